/* common/http_util: the parts of HTTP that need no connection: status texts, header
 * lookup, what llhttp's errors mean (http_parser.h), query parameters, the header store,
 * field/token validation, target parsing for the clients, the write helper, the
 * per-thread read buffer, the input a connection carries between reads and the traffic-token derivation.
 * See http_internal.h.
 */
#include "http.h"
#include "http_internal.h"
#include "json.h"
#include "percent.h"
#include "util.h"

#include <sodium.h>

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

atomic_long http__live_reqs;
atomic_long http__live_conns;
atomic_long http__live_creqs;
atomic_long http__live_cconns;

/* ---- status texts ------------------------------------------------------------------ */
static const struct {
    int code;
    const char *text;
} util__status[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {203, "Non-Authoritative Information"},
    {204, "No Content"},
    {205, "Reset Content"},
    {206, "Partial Content"},
    {207, "Multi-Status"},
    {300, "Multiple Choices"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {303, "See Other"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {402, "Payment Required"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {407, "Proxy Authentication Required"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"},
    {421, "Misdirected Request"},
    {422, "Unprocessable Content"},
    {423, "Locked"},
    {424, "Failed Dependency"},
    {425, "Too Early"},
    {426, "Upgrade Required"},
    {428, "Precondition Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {451, "Unavailable For Legal Reasons"},
    {499, "Client Closed Request"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
    {507, "Insufficient Storage"},
    {508, "Loop Detected"},
    {511, "Network Authentication Required"},
};

const char *al_http_status_text(int status)
{
    for (size_t i = 0; i < sizeof util__status / sizeof util__status[0]; i++)
        if (util__status[i].code == status)
            return util__status[i].text;
    if (status >= 100 && status < 200)
        return "Informational";
    if (status >= 200 && status < 300)
        return "Success";
    if (status >= 300 && status < 400)
        return "Redirection";
    if (status >= 400 && status < 500)
        return "Client Error";
    return "Server Error";
}

/* ---- parser errors ------------------------------------------------------------------ */
const char *al_http_parse_error_reason(llhttp_errno_t err, int *status)
{
    *status = 400;
    switch (err) {
    case HPE_INVALID_TRANSFER_ENCODING:
    case HPE_UNEXPECTED_CONTENT_LENGTH:
    case HPE_INVALID_CONTENT_LENGTH:
        return "ambiguous_framing";
    case HPE_INVALID_HEADER_TOKEN:
        return "invalid_header";
    case HPE_LF_EXPECTED:
    case HPE_CR_EXPECTED:
    case HPE_STRICT:
        return "invalid_line_ending";
    case HPE_INVALID_METHOD:
        return "invalid_method";
    case HPE_INVALID_URL:
        return "invalid_target";
    case HPE_INVALID_VERSION:
        return "invalid_version";
    case HPE_PAUSED_H2_UPGRADE:
        *status = 403;
        return "h2_prior_knowledge_refused";
    case HPE_CLOSED_CONNECTION:
        return "data_after_close";
    case HPE_INVALID_CHUNK_SIZE:
        return "invalid_chunk";
    default:
        return "malformed_request";
    }
}

/* ---- header lookup ------------------------------------------------------------------ */
const struct al_http_header *http__find(const struct al_http_header *h, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(h[i].name, name) == 0)
            return &h[i];
    return NULL;
}

const char *al_http_req_header(const struct al_http_req *req, const char *name)
{
    const struct al_http_header *h = http__find(req->headers, req->n_headers, name);
    return h ? h->value : NULL;
}

size_t al_http_req_header_count(const struct al_http_req *req, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0)
            n++;
    return n;
}

const char *al_http_resp_header(const struct al_http_resp *r, const char *name)
{
    const struct al_http_header *h = http__find(r->headers, r->n_headers, name);
    return h ? h->value : NULL;
}

/* ---- query decoding ------------------------------------------------------------------ */
int al_http_query_each(const char *query, const char *name, char *out, size_t outlen,
                       int (*fn)(const char *value, void *arg), void *arg)
{
    if (!query || !name)
        return -ENOENT;
    if (*query == '?')
        query++;
    size_t nlen = strlen(name);
    const char *p = query;
    bool found = false;
    while (*p) {
        const char *end = strchr(p, '&');
        size_t plen = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', plen);
        size_t klen = eq ? (size_t)(eq - p) : plen;
        /* Compare the decoded key with name, without a copy. */
        size_t i = 0, k = 0;
        bool match = true;
        while (i < klen) {
            int c = al_percent_decode_byte(p, klen, &i, AL_PERCENT_PLUS_SPACE);
            if (c <= 0 || k >= nlen || (char)c != name[k]) {
                match = false;
                break;
            }
            k++;
        }
        if (match && k == nlen) {
            const char *v = eq ? eq + 1 : p + plen;
            size_t vlen = eq ? plen - klen - 1 : 0;
            ssize_t n = al_percent_decode(v, vlen, out, outlen, AL_PERCENT_PLUS_SPACE);
            if (n < 0)
                return n == -E2BIG ? -E2BIG : -EINVAL;
            found = true;
            int rc = fn ? fn(out, arg) : 1;
            if (rc)
                return rc > 0 ? 0 : rc;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return found ? 0 : -ENOENT;
}

int al_http_query_get(const char *query, const char *name, char *out, size_t outlen)
{
    return al_http_query_each(query, name, out, outlen, NULL, NULL);
}

/* ---- input carried between reads ------------------------------------------------ */
int http__input_feed(struct http__input *in, char *data, size_t len)
{
    if (in->len == 0) {
        in->cur = data;
        in->cur_len = len;
        return 0;
    }
    size_t need = in->len + len;
    if (need > in->cap) {
        char *n = realloc(in->buf, need);
        if (!n)
            return -ENOMEM;
        in->buf = n;
        in->cap = need;
    }
    memcpy(in->buf + in->len, data, len);
    in->len = need;
    in->cur = in->buf;
    in->cur_len = need;
    return 0;
}

int http__input_save(struct http__input *in)
{
    char *cur = in->cur;
    size_t len = in->cur_len;
    in->cur = NULL;
    in->cur_len = 0;
    in->len = 0;
    if (!cur || !len)
        return 0;
    if (in->buf && cur >= in->buf && cur < in->buf + in->cap) {
        memmove(in->buf, cur, len);
        in->len = len;
        return 0;
    }
    if (len > in->cap) {
        char *n = realloc(in->buf, len);
        if (!n)
            return -ENOMEM;
        in->buf = n;
        in->cap = len;
    }
    memcpy(in->buf, cur, len);
    in->len = len;
    return 0;
}

void http__input_trim(struct http__input *in)
{
    if (in->len == 0 && in->buf) {
        free(in->buf);
        in->buf = NULL;
        in->cap = 0;
    }
}

/* ---- header store ------------------------------------------------------------------ */
void http__hdrs_init(struct http__hdrs *h, size_t max_bytes, size_t max_n)
{
    al_buf_init(&h->strs, max_bytes);
    h->v = NULL;
    h->n = h->cap = 0;
    h->max_n = max_n;
    h->in_field = h->in_value = false;
}

void http__hdrs_reset(struct http__hdrs *h)
{
    h->strs.len = 0;
    if (h->strs.data)
        h->strs.data[0] = '\0';
    h->n = 0;
    h->in_field = h->in_value = false;
}

void http__hdrs_free(struct http__hdrs *h)
{
    al_buf_free(&h->strs);
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

int http__hdrs_add_string(struct http__hdrs *h, const char *s, size_t len, size_t *off)
{
    *off = h->strs.len;
    int rc = al_buf_append(&h->strs, s, len);
    return rc ? rc : al_buf_append(&h->strs, "", 1);
}

int http__hdrs_field(struct http__hdrs *h, const char *at, size_t len)
{
    if (!h->in_field) {
        if (h->n >= h->max_n)
            return -E2BIG;
        if (h->n == h->cap) {
            size_t ncap = h->cap ? h->cap * 2 : 16;
            if (ncap > h->max_n)
                ncap = h->max_n;
            struct al_http_header *v = realloc(h->v, ncap * sizeof *v);
            if (!v)
                return -ENOMEM;
            h->v = v;
            h->cap = ncap;
        }
        h->v[h->n].name = (const char *)(uintptr_t)h->strs.len;
        h->v[h->n].value = NULL;
        h->n++;
        h->in_field = true;
        h->in_value = false;
    }
    return al_buf_append(&h->strs, at, len);
}

int http__hdrs_field_done(struct http__hdrs *h)
{
    if (!h->in_field) /* an empty name: llhttp rejects it in strict builds, we do in all */
        return -EINVAL;
    h->in_field = false;
    return al_buf_append(&h->strs, "", 1);
}

int http__hdrs_value(struct http__hdrs *h, const char *at, size_t len)
{
    if (h->n == 0 || h->in_field)
        return -EINVAL;
    if (!h->in_value) {
        h->in_value = true;
        h->v[h->n - 1].value = (const char *)(uintptr_t)h->strs.len;
    }
    return al_buf_append(&h->strs, at, len);
}

int http__hdrs_value_done(struct http__hdrs *h)
{
    if (h->n == 0)
        return -EINVAL;
    if (!h->in_value) /* empty value: "X:" */
        h->v[h->n - 1].value = (const char *)(uintptr_t)h->strs.len;
    h->in_value = false;
    return al_buf_append(&h->strs, "", 1);
}

int http__hdrs_finish(struct http__hdrs *h)
{
    if (!h->strs.data) {
        int rc = al_buf_reserve(&h->strs, 1);
        if (rc)
            return rc;
        h->strs.data[0] = '\0';
    }
    for (size_t i = 0; i < h->n; i++) {
        struct al_http_header *e = &h->v[i];
        if (!e->value) /* a name whose value never completed: cannot happen after headers */
            return -EINVAL;
        e->name = h->strs.data + (uintptr_t)e->name;
        e->value = h->strs.data + (uintptr_t)e->value;
    }
    return 0;
}

/* ---- validation ---------------------------------------------------------------------- */
/* RFC 9110 tchar: ALPHA / DIGIT / "!#$%&'*+-.^_`|~" */
static inline bool util__is_tchar(unsigned char c)
{
    if (((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

bool http__is_token(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!util__is_tchar((unsigned char)s[i]))
            return false;
    return true;
}

bool http__is_field_value(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return false;
    return true;
}

/* ---- target parsing ---------------------------------------------------------------- */
int http__parse_target(const char *target, struct http__target *t, char *msg, size_t msglen)
{
    memset(t, 0, sizeof *t);
    if (!target || !*target) {
        snprintf(msg, msglen,
                 "empty target: use \"unix:/path.sock\", \"host:port\" or "
                 "\"http://host:port\"");
        return -EINVAL;
    }
    if (strncmp(target, "unix:", 5) == 0) {
        const char *path = target + 5;
        if (strncmp(path, "//", 2) == 0) /* unix:///run/x.sock */
            path += 2;
        size_t len = strlen(path);
        if (len == 0 || len >= sizeof t->path) {
            snprintf(msg, msglen, "unix socket path in \"%s\" is empty or longer than %zu bytes",
                     target, sizeof t->path - 1);
            return -EINVAL;
        }
        t->is_unix = true;
        memcpy(t->path, path, len + 1);
        snprintf(t->hostport, sizeof t->hostport, "localhost");
        return 0;
    }
    struct al_http_target pt;
    const char *why = NULL;
    if (al_http_target_parse(target, strlen(target), AL_HTTP_TARGET_AUTHORITY_OK, &pt, &why) < 0 ||
        pt.form == AL_HTTP_TARGET_ORIGIN || pt.form == AL_HTTP_TARGET_ASTERISK) {
        if (!why || strcmp(why, "invalid_target") == 0)
            snprintf(msg, msglen,
                     "\"%s\" is not \"unix:/path.sock\", \"host:port\" or "
                     "\"http[s]://host[:port][/path]\" (a path needs \"http://\")",
                     target);
        else if (strcmp(why, "missing_port") == 0)
            snprintf(msg, msglen, "\"%s\": missing port (use \"host:port\")", target);
        else
            snprintf(msg, msglen, "\"%s\": %s", target, al_http_target_message(why));
        return -EINVAL;
    }
    const struct al_http_authority *a = &pt.authority;
    t->tls = pt.https;
    memcpy(t->host, a->host, a->host_len); /* at most 255 bytes (al_http_authority_parse) */
    t->host[a->host_len] = '\0';
    t->port = a->has_port ? a->port : t->tls ? 443 : 80;
    if (strchr(t->host, ':'))
        snprintf(t->hostport, sizeof t->hostport, "[%s]:%d", t->host, t->port);
    else
        snprintf(t->hostport, sizeof t->hostport, "%s:%d", t->host, t->port);
    return 0;
}

/* ---- writes ---------------------------------------------------------------------- */
int http__write(const struct http__wdest *d, const uv_buf_t *bufs, unsigned n, size_t *queued)
{
    size_t total = 0, done = 0;
    *queued = 0;
    for (unsigned i = 0; i < n; i++)
        total += bufs[i].len;
    if (total == 0)
        return 0;
    if (d->queue_empty) {
        int r = uv_try_write(d->s, bufs, n);
        if (r >= 0)
            done = (size_t)r;
        else if (r != UV_EAGAIN)
            return r;
        if (done == total)
            return 0;
    }
    size_t rest = total - done;
    struct http__wreq *w = malloc(sizeof *w + rest);
    if (!w)
        return -ENOMEM;
    w->owner = d->owner;
    w->len = rest;
    size_t skip = done, o = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t l = bufs[i].len;
        if (skip >= l) {
            skip -= l;
            continue;
        }
        memcpy(w->data + o, bufs[i].base + skip, l - skip);
        o += l - skip;
        skip = 0;
    }
    uv_buf_t b = uv_buf_init(w->data, (unsigned)rest);
    int r = uv_write(&w->req, d->s, &b, 1, d->cb);
    if (r) {
        free(w);
        return r;
    }
    *queued = rest;
    return 0;
}

/* ---- per-thread read buffer -------------------------------------------------------- */
struct util__rbuf {
    char *data;
    bool busy;
};

static pthread_key_t util__rbuf_key;
static pthread_once_t util__rbuf_once = PTHREAD_ONCE_INIT;

static void util__rbuf_free(void *p)
{
    struct util__rbuf *rb = p;
    free(rb->data);
    free(rb);
}

static void util__rbuf_init(void)
{
    if (pthread_key_create(&util__rbuf_key, util__rbuf_free) != 0)
        abort();
}

void http__alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)h;
    (void)suggested;
    pthread_once(&util__rbuf_once, util__rbuf_init);
    struct util__rbuf *rb = pthread_getspecific(util__rbuf_key);
    if (!rb) {
        rb = calloc(1, sizeof *rb);
        if (rb && !(rb->data = malloc(HTTP__READ_BUF))) {
            free(rb);
            rb = NULL;
        }
        if (rb)
            pthread_setspecific(util__rbuf_key, rb);
    }
    if (rb && !rb->busy) {
        rb->busy = true;
        *buf = uv_buf_init(rb->data, HTTP__READ_BUF);
        return;
    }
    /* Nested loop on this thread (or out of memory): a private buffer. */
    char *p = malloc(HTTP__READ_BUF);
    *buf = uv_buf_init(p, p ? HTTP__READ_BUF : 0);
}

void http__release_buf(const uv_buf_t *buf)
{
    if (!buf || !buf->base)
        return;
    struct util__rbuf *rb = pthread_getspecific(util__rbuf_key);
    if (rb && buf->base == rb->data)
        rb->busy = false;
    else
        free(buf->base);
}

/* ---- misc -------------------------------------------------------------------------- */
const char *http__date(void)
{
    static __thread char date[40];
    static __thread time_t date_sec = -1;
    time_t now = time(NULL);
    if (now != date_sec) {
        al_time_format(date, sizeof date, now, 0, AL_TIME_HTTP);
        date_sec = now;
    }
    return date;
}

size_t http__error_body(char *out, size_t outlen, int status, const char *msg)
{
    char esc[1024];
    al_json_escape(msg ? msg : "", esc, sizeof esc);
    int n = snprintf(out, outlen, "{\"code\":%d,\"message\":\"%s\"}", status, esc);
    if (n < 0)
        return 0;
    return (size_t)n < outlen ? (size_t)n : outlen - 1;
}

/* libuv writes with write(2)/writev(2): a peer that went away raises SIGPIPE, which kills
 * a process that did not ignore it. Every HTTP user wants EPIPE instead; a handler the
 * application installed itself is left alone. */
static void util__sigpipe_once(void)
{
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
    }
}

void http__ignore_sigpipe(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, util__sigpipe_once);
}

/* ---- traffic tokens ---------------------------------------------------------------- */
void al_http_traffic_token(const char *access_token, size_t len,
                           char out[AL_HTTP_TRAFFIC_TOKEN_LEN + 1])
{
    /* BLAKE2b-256 keyed with a fixed label: a one-way function of the access token that no
     * other use of that token produces. */
    static const char label[] = "airlock traffic access token v1";
    unsigned char h[AL_HTTP_TRAFFIC_TOKEN_LEN / 2];
    crypto_generichash(h, sizeof h, (const unsigned char *)access_token, len,
                       (const unsigned char *)label, sizeof label - 1);
    sodium_bin2hex(out, AL_HTTP_TRAFFIC_TOKEN_LEN + 1, h, sizeof h);
    sodium_memzero(h, sizeof h);
}
