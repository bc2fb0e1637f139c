/* egress/intercept/request: checks of requests inside intercepted TLS (see request.h). */
#include "request.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

bool intercept_hdr_is(const struct al_http_field *h, const char *name)
{
    size_t n = strlen(name);
    return h->name_len == n && strncasecmp(h->name, name, n) == 0;
}

const struct al_http_field *intercept_hdr_find(const struct al_http_field *h, size_t n,
                                               const char *name, size_t *count)
{
    const struct al_http_field *found = NULL;
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (intercept_hdr_is(&h[i], name)) {
            if (!found)
                found = &h[i];
            c++;
        }
    if (count)
        *count = c;
    return found;
}

static void req__trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

/* "host", "host:port", "[v6]", "[v6]:port" -> canonical host and port (0 = none). */
static int req__authority(const char *a, size_t n, struct policy_host *out, unsigned *port)
{
    *port = 0;
    req__trim(&a, &n);
    if (n == 0 || memchr(a, '@', n))
        return -1;
    size_t hl = n;
    const char *colon = NULL;
    if (a[0] == '[') {
        const char *rb = memchr(a, ']', n);
        if (!rb)
            return -1;
        hl = (size_t)(rb - a) + 1;
        if (hl < n) {
            if (a[hl] != ':')
                return -1;
            colon = a + hl;
        }
    } else {
        colon = memchr(a, ':', n);
        if (colon)
            hl = (size_t)(colon - a);
    }
    if (colon) {
        const char *p = colon + 1;
        size_t pl = n - (size_t)(p - a);
        if (pl == 0 || pl > 5)
            return -1;
        unsigned v = 0;
        for (size_t i = 0; i < pl; i++) {
            if (p[i] < '0' || p[i] > '9')
                return -1;
            v = v * 10 + (unsigned)(p[i] - '0');
        }
        if (v == 0 || v > 65535)
            return -1;
        *port = v;
    }
    return policy_host_canon(a, hl, out, NULL) < 0 ? -1 : 0;
}

static bool req__same_host(const struct policy_host *a, const struct policy_host *b)
{
    return a->kind == b->kind && a->len == b->len && memcmp(a->text, b->text, a->len) == 0;
}

#define FAIL(st, why)    \
    do {                 \
        *status = (st);  \
        *reason = (why); \
        return -EPERM;   \
    } while (0)

int intercept_request_check(const struct intercept_conn_view *c, const struct intercept_req_view *r,
                            struct intercept_req_info *out, int *status, const char **reason)
{
    memset(out, 0, sizeof *out);
    *status = 0;
    *reason = NULL;
    if (strcmp(r->method, "CONNECT") == 0)
        FAIL(403, "connect_in_tunnel");
    if (strcmp(r->method, "PRI") == 0)
        FAIL(403, "h2_prior_knowledge_refused");
    if (r->http_major != 1)
        FAIL(400, "unsupported_http_version"); /* what the plain path says */
    size_t count = 0;
    const struct al_http_field *host = intercept_hdr_find(r->hdrs, r->n_hdrs, "Host", &count);
    if (count == 0)
        FAIL(400, "missing_host");
    if (count > 1)
        FAIL(400, "duplicate_host");
    unsigned port = 0;
    if (req__authority(host->value, host->value_len, &out->host, &port) < 0)
        FAIL(400, "invalid_host");
    if (port && port != c->port)
        FAIL(403, "host_port_mismatch");

    /* The target: origin-form, or absolute-form naming the same authority. */
    out->path = r->target;
    out->path_len = r->target_len;
    const char *t = r->target;
    size_t tl = r->target_len;
    size_t skip = 0;
    if (tl >= 7 && strncasecmp(t, "http://", 7) == 0)
        skip = 7;
    else if (tl >= 8 && strncasecmp(t, "https://", 8) == 0)
        skip = 8;
    if (skip) {
        const char *a = t + skip;
        size_t al = 0;
        while (skip + al < tl && a[al] != '/' && a[al] != '?' && a[al] != '#')
            al++;
        struct policy_host ah;
        unsigned aport = 0;
        if (req__authority(a, al, &ah, &aport) < 0)
            FAIL(400, "invalid_host");
        if (!req__same_host(&ah, &out->host) || (aport && aport != c->port))
            FAIL(403, "authority_host_mismatch");
        out->path = a + al;
        out->path_len = tl - skip - al;
        if (out->path_len == 0) {
            out->path = "/";
            out->path_len = 1;
        }
    }
    if (c->tls) {
        size_t sl = c->sni ? strlen(c->sni) : 0;
        if (out->host.kind != POLICY_HOST_NAME || sl != out->host.len ||
            memcmp(c->sni, out->host.text, sl) != 0)
            FAIL(403, "host_sni_mismatch");
    }

    /* Upgrades. */
    if (intercept_hdr_find(r->hdrs, r->n_hdrs, "HTTP2-Settings", NULL))
        FAIL(403, "h2c_upgrade_refused");
    for (size_t i = 0; i < r->n_hdrs; i++) {
        if (!intercept_hdr_is(&r->hdrs[i], "Upgrade"))
            continue;
        const char *v = r->hdrs[i].value;
        size_t vl = r->hdrs[i].value_len;
        while (vl) {
            size_t k = 0;
            while (k < vl && v[k] != ',')
                k++;
            const char *tok = v;
            size_t tokl = k;
            req__trim(&tok, &tokl);
            const char *slash = memchr(tok, '/', tokl);
            size_t name_l = slash ? (size_t)(slash - tok) : tokl;
            if (name_l == 3 && strncasecmp(tok, "h2c", 3) == 0)
                FAIL(403, "h2c_upgrade_refused");
            if (name_l == 9 && strncasecmp(tok, "websocket", 9) == 0)
                out->websocket = true;
            else if (tokl)
                FAIL(403, "upgrade_not_allowed");
            v += k;
            vl -= k;
            if (vl) {
                v++;
                vl--;
            }
        }
    }
    return 0;
}

int intercept_request_check_decided(const struct intercept_req_info *info,
                                    const struct policy_decision *d, const char **reason)
{
    *reason = NULL;
    if (!info->websocket)
        return 0;
    if (!d->websocket) {
        *reason = "websocket_not_allowed";
        return -EPERM;
    }
    if (d->n_inject && d->rule && d->rule->scrub == POLICY_SCRUB_STRICT) {
        *reason = "websocket_not_inspectable";
        return -EPERM;
    }
    return 0;
}

int intercept_response_check(int status, bool websocket_allowed, const char **reason)
{
    *reason = NULL;
    if (status == 101 && !websocket_allowed) {
        *reason = "unrequested_upgrade";
        return -EPROTO;
    }
    return 0;
}
