/* egress/http_head: request/response heads and the request checks of http.h. */
#include "http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/http.h"
#include "common/json.h"
#include "common/util.h"

/* ---- head collection ---------------------------------------------------------------- */

void egress_http_head_init(struct egress_http_head *h, uint32_t max)
{
    memset(h, 0, sizeof *h);
    h->max = max;
}

void egress_http_head_reset(struct egress_http_head *h)
{
    /* The header slots are written whole when a header starts (egress_http_head_field):
     * only the counters go back to zero (a reset per message, not 2 KiB of memset). */
    h->len = 0;
    h->url = h->url_len = 0;
    h->status = h->status_len = 0;
    h->n_hdr = 0;
    h->last = 0;
    h->too_large = false;
    if (h->buf)
        h->buf[0] = 0;
}

void egress_http_head_free(struct egress_http_head *h)
{
    free(h->buf);
    h->buf = NULL;
    h->cap = 0;
    egress_http_head_reset(h);
}

static int head__append(struct egress_http_head *h, const char *at, size_t n, bool nul)
{
    size_t need = (size_t)h->len + n + (nul ? 1 : 0);
    if (need > h->max) {
        h->too_large = true;
        return -E2BIG;
    }
    if (need + 1 > h->cap) {
        size_t ncap = h->cap ? h->cap : 1024;
        while (ncap < need + 1)
            ncap *= 2;
        if (ncap > (size_t)h->max + 2)
            ncap = (size_t)h->max + 2;
        char *b = realloc(h->buf, ncap);
        if (!b)
            return -ENOMEM;
        h->buf = b;
        h->cap = (uint32_t)ncap;
    }
    memcpy(h->buf + h->len, at, n);
    h->len += (uint32_t)n;
    if (nul)
        h->buf[h->len++] = 0;
    h->buf[h->len] = 0;
    return 0;
}

/* Closes the string being collected (url, field or value) with a NUL. */
static int head__terminate(struct egress_http_head *h)
{
    if (h->last == 0)
        return 0;
    return head__append(h, "", 0, true);
}

int egress_http_head_url(struct egress_http_head *h, const char *at, size_t n)
{
    int rc;
    if (h->last != 1) {
        if ((rc = head__terminate(h)) < 0)
            return rc;
        h->url = h->len;
        h->url_len = 0;
        h->status = h->len;
        h->last = 1;
    }
    if ((rc = head__append(h, at, n, false)) < 0)
        return rc;
    h->url_len += (uint32_t)n;
    h->status_len = h->url_len;
    return 0;
}

int egress_http_head_field(struct egress_http_head *h, const char *at, size_t n)
{
    int rc;
    if (h->last != 2) {
        if ((rc = head__terminate(h)) < 0)
            return rc;
        if (h->n_hdr == EGRESS_HTTP_MAX_HEADERS) {
            h->too_large = true;
            return -E2BIG;
        }
        struct egress_http_hdr *x = &h->hdr[h->n_hdr++];
        x->name = h->len;
        x->name_len = 0;
        x->value = 0;
        x->value_len = 0;
        h->last = 2;
    }
    if ((rc = head__append(h, at, n, false)) < 0)
        return rc;
    h->hdr[h->n_hdr - 1].name_len += (uint32_t)n;
    return 0;
}

int egress_http_head_value(struct egress_http_head *h, const char *at, size_t n)
{
    int rc;
    if (h->n_hdr == 0)
        return -EINVAL;
    if (h->last != 3) {
        if ((rc = head__terminate(h)) < 0)
            return rc;
        h->hdr[h->n_hdr - 1].value = h->len;
        h->last = 3;
    }
    if ((rc = head__append(h, at, n, false)) < 0)
        return rc;
    h->hdr[h->n_hdr - 1].value_len += (uint32_t)n;
    return 0;
}

int egress_http_head_finish(struct egress_http_head *h)
{
    int rc;
    /* A header without a value (llhttp gives no value callback for "X:\r\n"). */
    if (h->last == 2) {
        if ((rc = head__terminate(h)) < 0)
            return rc;
        h->hdr[h->n_hdr - 1].value = h->len;
        h->hdr[h->n_hdr - 1].value_len = 0;
        if ((rc = head__append(h, "", 0, true)) < 0)
            return rc;
        h->last = 0;
        return 0;
    }
    if ((rc = head__terminate(h)) < 0)
        return rc;
    h->last = 0;
    /* Trailing whitespace of values is not part of them (RFC 9110 5.5). */
    for (uint32_t i = 0; i < h->n_hdr; i++) {
        struct egress_http_hdr *x = &h->hdr[i];
        while (x->value_len && (h->buf[x->value + x->value_len - 1] == ' ' ||
                                h->buf[x->value + x->value_len - 1] == '\t'))
            h->buf[x->value + --x->value_len] = 0;
    }
    return 0;
}

const char *egress_http_head_get(const struct egress_http_head *h, const char *name, size_t *count)
{
    const char *first = NULL;
    size_t n = 0, nl = strlen(name);
    for (uint32_t i = 0; i < h->n_hdr; i++) {
        if (h->hdr[i].name_len == nl && strncasecmp(h->buf + h->hdr[i].name, name, nl) == 0) {
            if (!first)
                first = h->buf + h->hdr[i].value;
            n++;
        }
    }
    if (count)
        *count = n;
    return first;
}

size_t egress_http_head_fields(const struct egress_http_head *h, struct al_http_field *out)
{
    for (uint32_t i = 0; i < h->n_hdr; i++)
        out[i] = (struct al_http_field){h->buf + h->hdr[i].name, h->hdr[i].name_len,
                                        h->buf + h->hdr[i].value, h->hdr[i].value_len};
    return h->n_hdr;
}

/* ---- request checks ----------------------------------------------------------------- */

static int req__refuse(int *status, const char **reason, int st, const char *why)
{
    *status = st;
    *reason = why;
    return -EINVAL;
}

/* The host of a as the request named it, brackets of an IPv6 literal kept (what the policy's
 * canonicaliser and the audit record take). */
static void req__host_name(const struct al_http_authority *a, char *out, size_t outlen)
{
    size_t hl;
    const char *h = al_http_authority_host(a, &hl);
    /* A head holds no NUL (the scanner refuses control bytes): a bounded copy, no printf. */
    if (hl >= outlen)
        hl = outlen - 1;
    memcpy(out, h, hl);
    out[hl] = 0;
}

static bool req__same_authority(const struct al_http_authority *a,
                                const struct al_http_authority *b, uint16_t default_port)
{
    return a->host_len == b->host_len && strncasecmp(a->host, b->host, a->host_len) == 0 &&
           a->ip6 == b->ip6 &&
           (a->has_port ? a->port : default_port) == (b->has_port ? b->port : default_port);
}

static bool req__token_in(const char *list, const char *token)
{
    return al_http_list_has(list, strlen(list), token, strlen(token));
}

int egress_http_check_request(struct egress_http_head *h, const llhttp_t *p,
                              const struct egress_http_conn *conn, struct egress_http_request *r,
                              int *status, const char **reason)
{
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    r->method = llhttp_method_name((llhttp_method_t)p->method);
    r->http_minor = p->http_minor;
    r->tls = conn->tls;
    uint16_t default_port = conn->tls ? 443 : 80;
    if (p->http_major != 1)
        return req__refuse(status, reason, 400, "unsupported_http_version");
    if (p->method == HTTP_CONNECT)
        return req__refuse(status, reason, 403,
                           conn->tls ? "connect_in_tunnel" : "connect_refused");
    if (p->method == HTTP_PRI)
        return req__refuse(status, reason, 403, "h2_prior_knowledge_refused");

    size_t n_host = 0;
    const char *host = egress_http_head_get(h, "Host", &n_host);
    if (n_host > 1)
        return req__refuse(status, reason, 400, "duplicate_host");
    /* Inside TLS the Host is compared with the SNI (the identity triangle): it must be there
     * even beside an absolute-form target. */
    if (!host && conn->tls)
        return req__refuse(status, reason, 400, "missing_host");

    const char *url = h->buf + h->url, *why = NULL;
    struct al_http_target t;
    if (al_http_target_parse(url, h->url_len, AL_HTTP_TARGET_NO_BACKSLASH, &t, &why) < 0)
        return req__refuse(status, reason, 400, why);
    struct al_http_authority ha;
    if (t.form == AL_HTTP_TARGET_ASTERISK)
        return req__refuse(status, reason, 400, "asterisk_form_refused");
    if (t.form == AL_HTTP_TARGET_ABSOLUTE) {
        if (t.https != conn->tls)
            return req__refuse(status, reason, 403, "scheme_mismatch");
        /* "http://h?x": the origin-form would be "/?x", which the target's bytes do not
         * hold; refused rather than rewritten. */
        if (t.path_len == 0 && t.has_query)
            return req__refuse(status, reason, 400, "invalid_target");
        if (host) {
            if (al_http_authority_parse(host, strlen(host), &ha, &why) < 0)
                return req__refuse(status, reason, 400, why);
            if (!req__same_authority(&ha, &t.authority, default_port))
                return req__refuse(status, reason, 400, "authority_mismatch");
        }
        r->absolute_form = true;
        r->host_raw = host;
        req__host_name(&t.authority, r->host_name, sizeof r->host_name);
        r->port = t.authority.has_port ? t.authority.port : default_port;
        /* "http://h": the path is "/". */
        r->target = t.path_len ? t.path : "/";
        r->target_len = t.path_len ? (size_t)(url + h->url_len - t.path) : 1;
    } else if (t.form == AL_HTTP_TARGET_ORIGIN) {
        if (!host)
            return req__refuse(status, reason, 400, "missing_host");
        if (al_http_authority_parse(host, strlen(host), &ha, &why) < 0)
            return req__refuse(status, reason, 400, why);
        r->host_raw = host;
        req__host_name(&ha, r->host_name, sizeof r->host_name);
        r->port = ha.has_port ? ha.port : default_port;
        r->target = url;
        r->target_len = h->url_len;
    } else {
        return req__refuse(status, reason, 400, "invalid_target");
    }
    if (r->port != conn->port)
        return req__refuse(status, reason, 403, "port_mismatch");
    r->path = t.path_len ? t.path : r->target;
    r->path_len = t.path_len ? t.path_len : r->target_len;

    /* Framing. */
    size_t n_te = 0;
    const char *te = egress_http_head_get(h, "Transfer-Encoding", &n_te);
    if (n_te) {
        if (n_te > 1 || strcasecmp(te, "chunked") != 0)
            return req__refuse(status, reason, 400, "unsupported_transfer_encoding");
        r->chunked = true;
    }
    if (p->flags & F_CONTENT_LENGTH) {
        if (r->chunked)
            return req__refuse(status, reason, 400, "content_length_with_chunked");
        r->content_length = (int64_t)p->content_length;
    }

    /* Upgrades. */
    size_t n_up = 0, n_h2s = 0;
    const char *up = egress_http_head_get(h, "Upgrade", &n_up);
    egress_http_head_get(h, "HTTP2-Settings", &n_h2s);
    const char *conn_f = egress_http_head_get(h, "Connection", NULL);
    if (n_h2s || (up && req__token_in(up, "h2c")))
        return req__refuse(status, reason, 403, "h2c_upgrade_refused");
    if (n_up) {
        if (n_up > 1 || strcasecmp(up, "websocket") != 0)
            return req__refuse(status, reason, 403, "upgrade_refused");
        if (!conn_f || !req__token_in(conn_f, "upgrade"))
            return req__refuse(status, reason, 400, "upgrade_without_connection_upgrade");
        if (p->method != HTTP_GET)
            return req__refuse(status, reason, 400, "websocket_needs_get");
        r->websocket = true;
    }
    size_t n_exp = 0;
    const char *exp = egress_http_head_get(h, "Expect", &n_exp);
    if (n_exp && (n_exp > 1 || strcasecmp(exp, "100-continue") != 0))
        return req__refuse(status, reason, 417, "expectation_unsupported");
    r->keep_alive = llhttp_should_keep_alive(p) != 0;
    return 0;
}

static int decide__refuse(struct egress_http_decision *out, int status, const char *error,
                          const char *reason)
{
    out->status = status;
    out->error = error;
    out->reason = reason;
    return -EPERM;
}

int egress_http_decide(const struct egress_http_decide_args *a, struct egress_http_decision *out)
{
    const struct egress_http_request *r = a->r;
    const struct egress_http_question q = {
        .host = a->host,
        .host_len = a->host_len,
        .port = a->conn->port,
        .tls = a->conn->tls,
        .method = r->method,
        .path = r->target,
        .path_len = r->target_len,
        .body = r->chunked || r->content_length > 0,
    };
    memset(out, 0, sizeof *out);
    struct egress_http_verdict *v = &out->v;
    a->decide(a->arg, &q, v);
    if (!v->allow)
        return v->malformed ? decide__refuse(out, 400, "bad_request", v->reason)
                            : decide__refuse(out, 403, "blocked_by_policy", v->reason);
    if (r->websocket && !v->would_deny && (!v->websocket || v->inspect_strict))
        return decide__refuse(out, 403, "blocked_by_policy",
                              v->websocket ? "websocket_not_inspectable" : "websocket_not_allowed");
    out->max_body = a->max_body;
    if (v->max_body && (!out->max_body || v->max_body < out->max_body))
        out->max_body = v->max_body;
    if (out->max_body && r->content_length > 0 && (uint64_t)r->content_length > out->max_body)
        return decide__refuse(out, 413, "payload_too_large", "request_body_too_large");
    return 0;
}

const char *egress_http_request_error(const llhttp_t *p, const struct egress_http_head *h,
                                      int *status)
{
    llhttp_errno_t err = llhttp_get_errno(p);
    const char *r = llhttp_get_error_reason(p);
    *status = 400;
    if (err == HPE_USER && r && strcmp(r, "request_body_too_large") == 0) {
        *status = 413;
        return "request_body_too_large";
    }
    if (err == HPE_USER && h->too_large) {
        *status = 431;
        return "request_head_too_large";
    }
    return al_http_parse_error_reason(err, status);
}

/* ---- serialisation ---------------------------------------------------------------- */

/* The Connection fields of h, for the options they name (RFC 9110 7.6.1). */
static size_t head__connection_fields(const struct egress_http_head *h,
                                      struct al_http_field conn[EGRESS_HTTP_MAX_HEADERS])
{
    size_t n = 0;
    for (uint32_t i = 0; i < h->n_hdr; i++)
        if (h->hdr[i].name_len == 10 && strcasecmp(h->buf + h->hdr[i].name, "connection") == 0)
            conn[n++] = (struct al_http_field){h->buf + h->hdr[i].name, h->hdr[i].name_len,
                                               h->buf + h->hdr[i].value, h->hdr[i].value_len};
    return n;
}

/* Restated by the serialiser (Host) or refused before (HTTP2-Settings); the rest of what is
 * not forwarded is common/http_head.h's (al_http_forward_drops). */
static const char *const req__restated[] = {"host", "http2-settings", NULL};

/* v in decimal, as "%lld" writes it: heads are built from known pieces, without printf. */
static int head__append_int(struct al_buf *out, int64_t v)
{
    char t[AL_JSON_INT_MAX];
    return al_buf_append(out, t, al_json_int(v, t));
}

int egress_http_append_host(const struct egress_http_request *r, struct al_buf *out)
{
    int rc;
    if ((rc = al_buf_append(out, "Host: ", 6)))
        return rc;
    if (r->host_raw)
        rc = al_buf_appends(out, r->host_raw);
    else if (!(rc = al_buf_appends(out, r->host_name)) && r->port != (r->tls ? 443 : 80))
        rc = al_buf_append(out, ":", 1) ? -ENOMEM : head__append_int(out, r->port);
    return rc ? rc : al_buf_append(out, "\r\n", 2);
}

int egress_http_serialize_request(const struct egress_http_head *h,
                                  const struct egress_http_request *r, bool keep_upstream,
                                  struct al_buf *out)
{
    const struct egress_http_serialize_opts o = {.keep_upstream = keep_upstream};
    return egress_http_serialize_request_opts(h, r, &o, out);
}

int egress_http_serialize_request_opts(const struct egress_http_head *h,
                                       const struct egress_http_request *r,
                                       const struct egress_http_serialize_opts *o,
                                       struct al_buf *out)
{
    bool keep = r->keep_alive || o->keep_upstream;
    int minor = o->http11 ? 1 : r->http_minor;
    int rc;
    if ((rc = al_buf_appends(out, r->method)) || (rc = al_buf_append(out, " ", 1)) ||
        (rc = al_buf_append(out, r->target, r->target_len)) ||
        (rc = al_buf_appends(out, minor ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n")))
        return rc;
    if ((rc = egress_http_append_host(r, out)))
        return rc;
    struct al_http_field conn[EGRESS_HTTP_MAX_HEADERS];
    size_t n_conn = head__connection_fields(h, conn);
    for (uint32_t i = 0; i < h->n_hdr; i++) {
        const char *name = h->buf + h->hdr[i].name;
        bool skip = false;
        for (const char *const *x = req__restated; *x && !skip; x++)
            skip = strcasecmp(name, *x) == 0;
        if (skip ||
            al_http_forward_drops(conn, n_conn, name, h->hdr[i].name_len,
                                  AL_HTTP_FWD_METHOD_DECIDED) ||
            (o->drop && o->drop(o->arg, h, i)))
            continue;
        if ((rc = al_buf_append(out, name, h->hdr[i].name_len)) ||
            (rc = al_buf_append(out, ": ", 2)) ||
            (rc = al_buf_append(out, h->buf + h->hdr[i].value, h->hdr[i].value_len)) ||
            (rc = al_buf_append(out, "\r\n", 2)))
            return rc;
    }
    if (o->add && (rc = o->add(o->arg, out)))
        return rc;
    if (r->chunked)
        rc = al_buf_appends(out, "Transfer-Encoding: chunked\r\n");
    else if (r->content_length >= 0 && !(rc = al_buf_append(out, "Content-Length: ", 16)) &&
             !(rc = head__append_int(out, r->content_length)))
        rc = al_buf_append(out, "\r\n", 2);
    if (rc)
        return rc;
    if (r->websocket)
        rc = al_buf_appends(out, "Connection: Upgrade\r\nUpgrade: websocket\r\n");
    else if (!keep)
        rc = al_buf_appends(out, "Connection: close\r\n");
    else if (minor == 0)
        rc = al_buf_appends(out, "Connection: keep-alive\r\n");
    if (rc)
        return rc;
    return al_buf_appends(out, "\r\n");
}

int egress_http_serialize_response(const struct egress_http_head *h, const llhttp_t *p, bool close,
                                   bool client10, struct al_buf *out)
{
    int status = llhttp_get_status_code((llhttp_t *)p);
    bool upgrade = status == 101;
    /* "HTTP/%d.%d %03d": llhttp's version digits are single, its status three digits. */
    int rc;
    if (p->http_major <= 9 && p->http_minor <= 9 && status >= 0 && status <= 999) {
        char line[] = {'H',
                       'T',
                       'T',
                       'P',
                       '/',
                       (char)('0' + p->http_major),
                       '.',
                       (char)('0' + p->http_minor),
                       ' ',
                       (char)('0' + status / 100),
                       (char)('0' + status / 10 % 10),
                       (char)('0' + status % 10)};
        rc = al_buf_append(out, line, sizeof line);
    } else {
        rc = al_buf_printf(out, "HTTP/%d.%d %03d", p->http_major, p->http_minor, status);
    }
    if (!rc && h->status_len) {
        rc = al_buf_append(out, " ", 1);
        if (!rc)
            rc = al_buf_append(out, h->buf + h->status, h->status_len);
    }
    if (!rc)
        rc = al_buf_append(out, "\r\n", 2);
    struct al_http_field conn[EGRESS_HTTP_MAX_HEADERS];
    size_t n_conn = head__connection_fields(h, conn);
    for (uint32_t i = 0; i < h->n_hdr && !rc; i++) {
        const char *name = h->buf + h->hdr[i].name;
        size_t nl = h->hdr[i].name_len;
        /* The body is forwarded as it came: the fields that describe its bytes stay. */
        bool framing = (nl == 17 && strcasecmp(name, "transfer-encoding") == 0) ||
                       (nl == 14 && strcasecmp(name, "content-length") == 0);
        if (!framing &&
            al_http_forward_drops(conn, n_conn, name, nl, upgrade ? AL_HTTP_FWD_UPGRADE : 0))
            continue;
        if ((rc = al_buf_append(out, name, nl)) || (rc = al_buf_append(out, ": ", 2)) ||
            (rc = al_buf_append(out, h->buf + h->hdr[i].value, h->hdr[i].value_len)))
            break;
        rc = al_buf_append(out, "\r\n", 2);
    }
    if (!rc) {
        if (upgrade)
            rc = al_buf_appends(out, "Connection: Upgrade\r\n");
        else if (close)
            rc = al_buf_appends(out, "Connection: close\r\n");
        else if (client10)
            rc = al_buf_appends(out, "Connection: keep-alive\r\n");
    }
    return rc ? rc : al_buf_append(out, "\r\n", 2);
}

int egress_http_body_append(struct al_buf *out, bool chunked, const void *at, size_t n)
{
    if (n == 0)
        return 0;
    int rc = 0;
    if (chunked) {
        /* The chunk's size line ("%zx\r\n"), written digit by digit rather than by printf. */
        char t[2 * sizeof n + 2], *e = t + sizeof t, *d = e - 2;
        memcpy(d, "\r\n", 2);
        size_t v = n;
        do
            *--d = al_hex_lower[v & 15];
        while (v >>= 4);
        rc = al_buf_append(out, d, (size_t)(e - d));
    }
    if (!rc)
        rc = al_buf_append(out, at, n);
    if (!rc && chunked)
        rc = al_buf_append(out, "\r\n", 2);
    return rc;
}

int egress_http_body_end(struct al_buf *out, bool chunked)
{
    return chunked ? al_buf_append(out, "0\r\n\r\n", 5) : 0;
}

int egress_http_error_response(struct al_buf *out, int status, const char *error, const char *rule,
                               const char *reason, const char *request_id, bool close)
{
    char e_rule[600], e_reason[300], e_err[100], e_id[100];
    al_json_escape(error ? error : "error", e_err, sizeof e_err);
    al_json_escape(reason ? reason : "", e_reason, sizeof e_reason);
    al_json_escape(request_id ? request_id : "", e_id, sizeof e_id);
    char body[1400];
    int n;
    if (rule) {
        al_json_escape(rule, e_rule, sizeof e_rule);
        n = snprintf(body, sizeof body,
                     "{\"error\":\"%s\",\"rule\":\"%s\",\"reason\":\"%s\",\"request_id\":\"%s\"}\n",
                     e_err, e_rule, e_reason, e_id);
    } else {
        n = snprintf(body, sizeof body,
                     "{\"error\":\"%s\",\"rule\":null,\"reason\":\"%s\",\"request_id\":\"%s\"}\n",
                     e_err, e_reason, e_id);
    }
    if (n < 0 || (size_t)n >= sizeof body)
        return -E2BIG;
    return al_buf_printf(out,
                         "HTTP/1.1 %d %s\r\n"
                         "Content-Type: application/json\r\n"
                         "Content-Length: %d\r\n"
                         "Cache-Control: no-store\r\n"
                         "X-Airlock-Request-Id: %s\r\n"
                         "%s"
                         "%s"
                         "\r\n%s",
                         status, al_http_status_text(status), n, e_id,
                         status == 429 || status == 503 ? "Retry-After: 1\r\n" : "",
                         close ? "Connection: close\r\n" : "", body);
}
