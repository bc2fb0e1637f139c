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

/* The canonical host of a parsed authority (brackets of an IPv6 literal are the
 * canonicaliser's to read). */
static int req__canon(const struct al_http_authority *a, struct policy_host *out)
{
    size_t hl;
    const char *h = al_http_authority_host(a, &hl);
    return policy_host_canon(h, hl, out, NULL);
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
    struct al_http_authority ha;
    const char *why = NULL;
    if (al_http_authority_parse(host->value, host->value_len, &ha, &why) < 0)
        FAIL(400, why);
    if (req__canon(&ha, &out->host) < 0)
        FAIL(400, "invalid_host");
    if (ha.has_port && ha.port != c->port)
        FAIL(403, "host_port_mismatch");

    /* The target: origin-form, or absolute-form naming the same authority; the same parser
     * and refusals as the plain path (egress/http_head.c). */
    struct al_http_target t;
    if (al_http_target_parse(r->target, r->target_len, AL_HTTP_TARGET_NO_BACKSLASH, &t, &why) < 0)
        FAIL(400, why);
    if (t.form == AL_HTTP_TARGET_ASTERISK)
        FAIL(400, "asterisk_form_refused");
    out->path = r->target;
    out->path_len = r->target_len;
    if (t.form == AL_HTTP_TARGET_ABSOLUTE) {
        /* "https://h?x": its origin-form "/?x" is not in the target's bytes. */
        if (t.path_len == 0 && t.has_query)
            FAIL(400, "invalid_target");
        struct policy_host ah;
        if (req__canon(&t.authority, &ah) < 0)
            FAIL(400, "invalid_host");
        if (!req__same_host(&ah, &out->host) ||
            (t.authority.has_port && t.authority.port != c->port))
            FAIL(403, "authority_host_mismatch");
        out->path = t.path_len ? t.path : "/";
        out->path_len = t.path_len ? (size_t)(r->target + r->target_len - t.path) : 1;
    } else if (t.form != AL_HTTP_TARGET_ORIGIN) {
        FAIL(400, "invalid_target");
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
