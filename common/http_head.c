/* common/http_head: the head scanner and the forwarding rule (see http_head.h). */
#include "http_head.h"
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 tchar: ALPHA / DIGIT / "!#$%&'*+-.^_`|~" */
static const uint8_t head__tchar[256] = {
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, ['!'] = 1, ['#'] = 1, ['$'] = 1,
    ['%'] = 1,         ['&'] = 1,         ['\''] = 1,        ['*'] = 1, ['+'] = 1, ['-'] = 1,
    ['.'] = 1,         ['^'] = 1,         ['_'] = 1,         ['`'] = 1, ['|'] = 1, ['~'] = 1,
};

enum {
    ST_LINE = 0, /* at the start of a line */
    ST_LEAD_CR,  /* CR of an empty line before the request line */
    ST_METHOD,
    ST_TARGET0, /* the first byte of the request-target */
    ST_TARGET,
    ST_RVER,   /* "HTTP/d.d" ending a request line (pos: bytes of it seen) */
    ST_SVER,   /* "HTTP/d.d" starting a status line */
    ST_STATUS, /* three digits (pos) */
    ST_REASON,
    ST_NAME,
    ST_VALUE,
    ST_CR,     /* CR ending a non-empty line */
    ST_END_CR, /* CR of the blank line ending the head */
    ST_DONE,
    ST_FAILED,
};

static const char *const head__messages[][2] = {
    {"head_too_large", "header block too large"},
    {"invalid_line_ending", "a line ends with a bare LF or CR (CRLF required)"},
    {"obs_fold", "obsolete line folding (a header line starts with whitespace)"},
    {"invalid_header_name", "a header name that is not a token followed by ':'"},
    {"invalid_header_value", "a control character in a header value"},
    {"invalid_request_line", "a request line that is not METHOD SP target SP HTTP/d.d"},
    {"invalid_status_line", "a status line that is not HTTP/d.d SP ddd [SP reason]"},
};

void al_http_head_scan_init(struct al_http_head_scan *s, bool request, size_t max)
{
    *s = (struct al_http_head_scan){
        .max = max > UINT32_MAX ? UINT32_MAX : (uint32_t)max,
        .request = request,
        .state = ST_LINE,
    };
}

/* "HTTP/d.d": whether byte c fits at position pos. */
static bool head__version_byte(unsigned pos, unsigned char c)
{
    static const char lit[] = "HTTP/";
    if (pos < 5)
        return c == (unsigned char)lit[pos];
    if (pos == 6)
        return c == '.';
    return c >= '0' && c <= '9';
}

static bool head__ctl(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

/* Bytes a header value runs on without a look at the state: not CR, not a control (RFC 9110
 * field-vchar, SP, HTAB, obs-text). */
static const uint8_t head__vbyte[256] = {
    ['\t'] = 1,
    [' ' ... 0x7e] = 1,
    [0x80 ... 0xff] = 1,
};

/* Where a run of bytes of one class that starts at b[from] may go: up to n, and no further
 * than the bound on the head's bytes allows (each byte of the run is counted). */
static size_t head__run_end(const struct al_http_head_scan *s, size_t from, size_t n)
{
    if (s->max && n - from > (size_t)(s->max - s->bytes))
        return from + (s->max - s->bytes);
    return n;
}

static int head__fail(struct al_http_head_scan *s, const char *why, size_t at, size_t *used)
{
    s->state = ST_FAILED;
    s->why = why;
    *used = at;
    return why == head__messages[0][0] ? -E2BIG : -EBADMSG;
}

int al_http_head_scan(struct al_http_head_scan *s, const char *p, size_t n, size_t *used)
{
    const unsigned char *b = (const unsigned char *)p;
    const char *bad_line = s->request ? "invalid_request_line" : "invalid_status_line";
    *used = 0;
    if (s->state == ST_FAILED)
        return s->why == head__messages[0][0] ? -E2BIG : -EBADMSG;
    if (s->state == ST_DONE)
        return 1;
    size_t i = 0;
    for (; i < n; i++) {
        unsigned char c = b[i];
        if (s->max && s->bytes >= s->max)
            return head__fail(s, head__messages[0][0], i, used);
        s->bytes++;
        if (c == '\n' && s->state != ST_CR && s->state != ST_LEAD_CR && s->state != ST_END_CR)
            return head__fail(s, "invalid_line_ending", i, used);
        switch (s->state) {
        case ST_LINE:
            if (s->lines == 0) {
                if (s->request) {
                    if (c == '\r')
                        s->state = ST_LEAD_CR;
                    else if (head__tchar[c])
                        s->state = ST_METHOD;
                    else
                        return head__fail(s, bad_line, i, used);
                } else {
                    if (!head__version_byte(0, c))
                        return head__fail(s, bad_line, i, used);
                    s->state = ST_SVER;
                    s->pos = 1;
                }
            } else if (c == '\r') {
                s->state = ST_END_CR;
            } else if (c == ' ' || c == '\t') {
                return head__fail(s, "obs_fold", i, used);
            } else if (head__tchar[c]) {
                s->state = ST_NAME;
            } else {
                return head__fail(s, "invalid_header_name", i, used);
            }
            break;
        case ST_LEAD_CR:
        case ST_CR:
            if (c != '\n')
                return head__fail(s, "invalid_line_ending", i, used);
            if (s->state == ST_CR)
                s->lines++;
            s->state = ST_LINE;
            break;
        case ST_END_CR:
            if (c != '\n')
                return head__fail(s, "invalid_line_ending", i, used);
            s->state = ST_DONE;
            *used = i + 1;
            return 1;
        case ST_METHOD:
            if (c == ' ')
                s->state = ST_TARGET0;
            else if (!head__tchar[c])
                return head__fail(s, bad_line, i, used);
            break;
        case ST_TARGET0:
        case ST_TARGET:
            if (c == ' ' && s->state == ST_TARGET) {
                s->state = ST_RVER;
                s->pos = 0;
            } else if (c <= 0x20 || c >= 0x7f) {
                return head__fail(s, bad_line, i, used);
            } else {
                s->state = ST_TARGET;
                /* The rest of the target at once; the byte that ends it is the loop's. */
                size_t k = i + 1, end = head__run_end(s, k, n);
                while (k < end && b[k] > 0x20 && b[k] < 0x7f)
                    k++;
                s->bytes += (uint32_t)(k - (i + 1));
                i = k - 1;
            }
            break;
        case ST_RVER:
            if (s->pos == 8) {
                if (c != '\r')
                    return head__fail(s, bad_line, i, used);
                s->state = ST_CR;
            } else if (!head__version_byte(s->pos++, c)) {
                return head__fail(s, bad_line, i, used);
            }
            break;
        case ST_SVER:
            if (s->pos == 8) {
                if (c != ' ')
                    return head__fail(s, bad_line, i, used);
                s->state = ST_STATUS;
                s->pos = 0;
            } else if (!head__version_byte(s->pos++, c)) {
                return head__fail(s, bad_line, i, used);
            }
            break;
        case ST_STATUS:
            if (s->pos == 3) {
                if (c == '\r')
                    s->state = ST_CR;
                else if (c == ' ')
                    s->state = ST_REASON;
                else
                    return head__fail(s, bad_line, i, used);
            } else if (c >= '0' && c <= '9') {
                s->pos++;
            } else {
                return head__fail(s, bad_line, i, used);
            }
            break;
        case ST_REASON:
            if (c == '\r')
                s->state = ST_CR;
            else if (head__ctl(c))
                return head__fail(s, bad_line, i, used);
            break;
        case ST_NAME:
            if (c == ':')
                s->state = ST_VALUE;
            else if (!head__tchar[c])
                return head__fail(s, "invalid_header_name", i, used);
            else {
                /* The rest of the name at once; ':' or a refused byte is the loop's. */
                size_t k = i + 1, end = head__run_end(s, k, n);
                while (k < end && head__tchar[b[k]])
                    k++;
                s->bytes += (uint32_t)(k - (i + 1));
                i = k - 1;
            }
            break;
        case ST_VALUE:
            if (c == '\r') {
                s->state = ST_CR;
            } else if (head__ctl(c)) {
                return head__fail(s, "invalid_header_value", i, used);
            } else {
                /* The value up to its CR at once (the bytes most of a head is made of); the
                 * CR, or a control byte refused, is the loop's. */
                size_t k = i + 1, end = head__run_end(s, k, n);
                while (k < end && head__vbyte[b[k]])
                    k++;
                s->bytes += (uint32_t)(k - (i + 1));
                i = k - 1;
            }
            break;
        }
    }
    *used = n;
    return 0;
}

const char *al_http_head_scan_reason(const struct al_http_head_scan *s)
{
    return s->state == ST_FAILED ? s->why : NULL;
}

const char *al_http_head_scan_message(const struct al_http_head_scan *s)
{
    const char *why = al_http_head_scan_reason(s);
    if (!why)
        return "";
    for (size_t k = 0; k < sizeof head__messages / sizeof head__messages[0]; k++)
        if (head__messages[k][0] == why)
            return head__messages[k][1];
    return why;
}

/* ---- request-target and authority ---------------------------------------------------- */

/* What a host name or IPv4 address is made of: RFC 3986 unreserved. The sub-delims a reg-name
 * may also hold name no host anyone resolves, and ',' ';' split lists in the proxies that
 * read Host. */
static const uint8_t head__hostchar[256] = {
    ['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1, ['-'] = 1,
    ['.'] = 1,         ['_'] = 1,         ['~'] = 1,
};

static int head__refuse(const char **reason, const char *why)
{
    *reason = why;
    return -EINVAL;
}

int al_http_authority_parse(const char *a, size_t n, struct al_http_authority *out,
                            const char **reason)
{
    *out = (struct al_http_authority){0};
    while (n && (*a == ' ' || *a == '\t')) {
        a++;
        n--;
    }
    while (n && (a[n - 1] == ' ' || a[n - 1] == '\t'))
        n--;
    out->text = a;
    out->len = n;
    if (n == 0)
        return head__refuse(reason, "missing_host");
    /* Bytes no part of an authority holds: the first names the refusal, as a reader
     * scanning left to right would. The rest is checked per part (a "+80" port is an
     * invalid port, not an invalid host). */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a[i];
        if (c == '@')
            return head__refuse(reason, "userinfo_in_authority");
        if (c == '\\')
            return head__refuse(reason, "backslash_in_authority");
        if (c <= 0x20 || c >= 0x7f || c == '/' || c == '?' || c == '#' || c == '%' || c == ',' ||
            c == ';')
            return head__refuse(reason, "invalid_host");
    }
    const char *colon = NULL;
    if (a[0] == '[') {
        const char *close = memchr(a, ']', n);
        if (!close)
            return head__refuse(reason, "invalid_host");
        size_t hl = (size_t)(close - a) + 1;
        if (hl < n) {
            if (a[hl] != ':')
                return head__refuse(reason, "invalid_host");
            colon = a + hl;
        }
        out->host = a + 1;
        out->host_len = hl - 2;
        out->ip6 = true;
        char buf[INET6_ADDRSTRLEN];
        struct in6_addr ip;
        if (out->host_len == 0 || out->host_len >= sizeof buf)
            return head__refuse(reason, "invalid_host");
        memcpy(buf, out->host, out->host_len);
        buf[out->host_len] = 0;
        if (inet_pton(AF_INET6, buf, &ip) != 1)
            return head__refuse(reason, "invalid_host");
    } else {
        colon = memchr(a, ':', n);
        out->host = a;
        out->host_len = colon ? (size_t)(colon - a) : n;
        /* Brackets only around the whole host; a second ':' is an unbracketed IPv6 literal. */
        if (memchr(a, '[', n) || memchr(a, ']', n) ||
            (colon && memchr(colon + 1, ':', n - (size_t)(colon - a) - 1)))
            return head__refuse(reason, "invalid_host");
        if (out->host_len == 0)
            return head__refuse(reason, "missing_host");
        if (out->host_len > 255)
            return head__refuse(reason, "invalid_host");
        for (size_t i = 0; i < out->host_len; i++)
            if (!head__hostchar[(unsigned char)a[i]])
                return head__refuse(reason, "invalid_host");
    }
    if (colon) {
        const char *p = colon + 1, *end = a + n;
        size_t digits = (size_t)(end - p);
        if (digits == 0 || digits > 5)
            return head__refuse(reason, "invalid_port");
        unsigned v = 0;
        for (; p < end; p++) {
            if (*p < '0' || *p > '9')
                return head__refuse(reason, "invalid_port");
            v = v * 10 + (unsigned)(*p - '0');
        }
        if (v == 0 || v > 65535)
            return head__refuse(reason, "invalid_port");
        out->has_port = true;
        out->port = (uint16_t)v;
    }
    return 0;
}

/* path and query of p[0, n) (origin-form from its '/', absolute-form after its authority). */
static void head__path_query(const char *p, size_t n, struct al_http_target *out)
{
    const char *q = memchr(p, '?', n);
    out->path = p;
    out->path_len = q ? (size_t)(q - p) : n;
    out->has_query = q != NULL;
    out->query = q ? q + 1 : p + n;
    out->query_len = q ? n - out->path_len - 1 : 0;
}

int al_http_target_parse(const char *t, size_t n, unsigned flags, struct al_http_target *out,
                         const char **reason)
{
    *out = (struct al_http_target){0};
    if (n == 0)
        return head__refuse(reason, "invalid_target");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c <= 0x20 || c >= 0x7f)
            return head__refuse(reason, "invalid_target");
    }
    if (memchr(t, '#', n))
        return head__refuse(reason, "fragment_in_target");
    if ((flags & AL_HTTP_TARGET_NO_BACKSLASH) && memchr(t, '\\', n))
        return head__refuse(reason, "backslash_in_target");
    if (t[0] == '/') {
        out->form = AL_HTTP_TARGET_ORIGIN;
        head__path_query(t, n, out);
        return 0;
    }
    if (n == 1 && t[0] == '*') {
        out->form = AL_HTTP_TARGET_ASTERISK;
        return 0;
    }
    size_t skip = 0;
    if (n >= 7 && strncasecmp(t, "http://", 7) == 0)
        skip = 7;
    else if (n >= 8 && strncasecmp(t, "https://", 8) == 0)
        skip = 8;
    if (skip) {
        out->form = AL_HTTP_TARGET_ABSOLUTE;
        out->https = skip == 8;
        size_t al = 0;
        while (skip + al < n && t[skip + al] != '/' && t[skip + al] != '?')
            al++;
        int rc = al_http_authority_parse(t + skip, al, &out->authority, reason);
        if (rc < 0)
            return rc;
        head__path_query(t + skip + al, n - skip - al, out);
        return 0;
    }
    /* Some other scheme ("ftp://", "file:///"): refused as a form, not misread as a host. */
    const char *sep = memchr(t, ':', n);
    if (!(flags & AL_HTTP_TARGET_AUTHORITY_OK) ||
        (sep && (size_t)(t + n - sep) >= 3 && sep[1] == '/' && sep[2] == '/'))
        return head__refuse(reason, "invalid_target");
    out->form = AL_HTTP_TARGET_AUTHORITY;
    int rc = al_http_authority_parse(t, n, &out->authority, reason);
    if (rc < 0)
        return rc;
    if (!out->authority.has_port)
        return head__refuse(reason, "missing_port");
    return 0;
}

const char *al_http_authority_host(const struct al_http_authority *a, size_t *len)
{
    *len = a->host_len + (a->ip6 ? 2 : 0);
    return a->ip6 ? a->host - 1 : a->host;
}

int al_http_target_origin(const struct al_http_target *t, char *out, size_t len)
{
    /* The path and the query are contiguous in the target; an empty path's pointer is where
     * the '?' stands. */
    size_t n = t->path_len + (t->has_query ? 1 + t->query_len : 0);
    int w = snprintf(out, len, "%s%.*s", t->path_len ? "" : "/", (int)n, n ? t->path : "");
    return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

static const char *const head__target_messages[][2] = {
    {"invalid_target",
     "not an origin-form (\"/path?query\"), absolute-form (\"http[s]://host/path\")"
     " or asterisk-form target"},
    {"fragment_in_target", "a '#' in the request-target (a fragment is never sent)"},
    {"backslash_in_target", "a backslash in the request-target (percent-encode it as %5C)"},
    {"missing_port", "no port after the host (authority-form is \"host:port\")"},
    {"missing_host", "no host"},
    {"userinfo_in_authority", "a '@' in the host (userinfo is not allowed)"},
    {"backslash_in_authority", "a backslash in the host"},
    {"invalid_host",
     "the host is neither a name (letters, digits, '-', '.', '_', '~'), nor an IPv4 address, "
     "nor an IPv6 address in brackets"},
    {"invalid_port", "the port is not a number from 1 to 65535"},
};

const char *al_http_target_message(const char *reason)
{
    for (size_t k = 0; k < sizeof head__target_messages / sizeof *head__target_messages; k++)
        if (strcmp(head__target_messages[k][0], reason) == 0)
            return head__target_messages[k][1];
    return reason;
}

/* ---- forwarding ---------------------------------------------------------------------- */

bool al_http_list_has(const char *value, size_t len, const char *token, size_t token_len)
{
    size_t pos = 0;
    while (pos < len) {
        while (pos < len && (value[pos] == ' ' || value[pos] == '\t' || value[pos] == ','))
            pos++;
        size_t s = pos;
        while (pos < len && value[pos] != ',')
            pos++;
        size_t l = pos - s;
        while (l && (value[s + l - 1] == ' ' || value[s + l - 1] == '\t'))
            l--;
        if (l == token_len && l && strncasecmp(value + s, token, l) == 0)
            return true;
    }
    return false;
}

static bool head__blank(char c)
{
    return c == ' ' || c == '\t';
}

bool al_http_cookie_next(const char *list, struct al_http_cookie_seg *seg)
{
    const char *raw = list;
    size_t index = 0;
    if (seg->raw) {
        raw = seg->raw + seg->raw_len;
        if (*raw != ';')
            return false;
        raw++;
        index = seg->index + 1;
    }
    const char *semi = strchr(raw, ';');
    const char *end = semi ? semi : raw + strlen(raw);
    const char *s = raw;
    while (s < end && head__blank(*s))
        s++;
    const char *eq = memchr(s, '=', (size_t)(end - s));
    const char *ne = eq ? eq : end;
    while (ne > s && head__blank(ne[-1]))
        ne--;
    const char *v = NULL, *ve = NULL;
    if (eq) {
        v = eq + 1;
        ve = end;
        while (v < ve && head__blank(*v))
            v++;
        while (ve > v && head__blank(ve[-1]))
            ve--;
    }
    *seg = (struct al_http_cookie_seg){.raw = raw,
                                       .raw_len = (size_t)(end - raw),
                                       .name = s,
                                       .name_len = (size_t)(ne - s),
                                       .value = v,
                                       .value_len = v ? (size_t)(ve - v) : 0,
                                       .index = index};
    return true;
}

int al_http_cookie_filter(const char *in, char *out, size_t outlen, al_http_cookie_drop_fn *drop,
                          void *arg)
{
    size_t o = 0;
    int dropped = 0;
    bool kept = false; /* a segment is written (perhaps an empty first one) */
    struct al_http_cookie_seg seg = {0};
    while (al_http_cookie_next(in, &seg)) {
        const char *s = seg.name; /* (after its leading blanks) */
        size_t len = seg.raw_len - (size_t)(s - seg.raw);
        if (seg.index > 0 && len == 0)
            continue;
        if (drop(&seg, arg)) {
            dropped++;
            continue;
        }
        const char *from = kept ? seg.raw : s;
        size_t n = kept ? seg.raw_len : len;
        if (o + n + kept >= outlen) {
            if (outlen)
                out[0] = '\0';
            return -ENOSPC;
        }
        if (kept)
            out[o++] = ';';
        memcpy(out + o, from, n);
        o += n;
        kept = true;
    }
    if (!outlen)
        return -ENOSPC;
    out[o] = '\0';
    return dropped;
}

struct head__name {
    const char *s;
    size_t n;
};
#define HEAD__NAME(s)   \
    {                   \
        s, sizeof s - 1 \
    }
static const struct head__name head__hop[] = {
    HEAD__NAME("Connection"),         HEAD__NAME("Keep-Alive"),
    HEAD__NAME("Proxy-Connection"),   HEAD__NAME("TE"),
    HEAD__NAME("Transfer-Encoding"),  HEAD__NAME("Trailer"),
    HEAD__NAME("Proxy-Authenticate"), HEAD__NAME("Proxy-Authorization"),
    HEAD__NAME("Content-Length"),
};
static const struct head__name head__override[] = {
    HEAD__NAME("X-HTTP-Method-Override"),
    HEAD__NAME("X-HTTP-Method"),
    HEAD__NAME("X-Method-Override"),
};
#undef HEAD__NAME

static bool head__in(const struct head__name *t, size_t tn, const char *name, size_t len)
{
    for (size_t i = 0; i < tn; i++)
        if (t[i].n == len && strncasecmp(name, t[i].s, len) == 0)
            return true;
    return false;
}

static bool head__is(const char *name, size_t len, const char *lit, size_t lit_len)
{
    return len == lit_len && strncasecmp(name, lit, len) == 0;
}

/* What the rule says without the Connection options: 1 drop, 0 keep (also against what
 * Connection names: an upgrade's own Upgrade), -1 drop if a Connection field names it. */
static int head__fixed(const char *name, size_t len, unsigned flags)
{
    if (head__is(name, len, "Upgrade", 7))
        return flags & AL_HTTP_FWD_UPGRADE ? 0 : 1;
    if (head__in(head__hop, sizeof head__hop / sizeof *head__hop, name, len))
        return 1;
    if ((flags & AL_HTTP_FWD_METHOD_DECIDED) &&
        head__in(head__override, sizeof head__override / sizeof *head__override, name, len))
        return 1;
    return -1;
}

bool al_http_forward_drops(const struct al_http_field *f, size_t n, const char *name, size_t len,
                           unsigned flags)
{
    int fixed = head__fixed(name, len, flags);
    if (fixed >= 0)
        return fixed;
    for (size_t i = 0; i < n; i++)
        if (head__is(f[i].name, f[i].name_len, "Connection", 10) &&
            al_http_list_has(f[i].value, f[i].value_len, name, len))
            return true;
    return false;
}

bool al_http_forward_drops_header(const struct al_http_header *h, size_t n, const char *name,
                                  unsigned flags)
{
    size_t len = strlen(name);
    int fixed = head__fixed(name, len, flags);
    if (fixed >= 0)
        return fixed;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(h[i].name, "Connection") == 0 &&
            al_http_list_has(h[i].value, strlen(h[i].value), name, len))
            return true;
    return false;
}
