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

int intercept_request_check(const struct intercept_conn_view *c,
                            const struct egress_http_request *r, struct intercept_req_info *out,
                            int *status, const char **reason)
{
    memset(out, 0, sizeof *out);
    *status = 0;
    *reason = NULL;
    if (policy_host_canon(r->host_name, strlen(r->host_name), &out->host, NULL) < 0) {
        *status = 400;
        *reason = "invalid_host";
        return -EPERM;
    }
    if (c->tls) {
        size_t sl = c->sni ? strlen(c->sni) : 0;
        if (out->host.kind != POLICY_HOST_NAME || sl != out->host.len ||
            memcmp(c->sni, out->host.text, sl) != 0) {
            *status = 403;
            *reason = "host_sni_mismatch";
            return -EPERM;
        }
    }
    out->websocket = r->websocket;
    out->path = r->target;
    out->path_len = r->target_len;
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
