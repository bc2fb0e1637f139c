/* egress/http_rec: the request members of an http_request audit record (egress/http.h,
 * docs/audit.md), written with the record writer of egress/audit.h for both engines of the
 * proxy: the plain one (http.c) and the intercepted one (intercept/session.c), whose own
 * members come through the record's extra hook. Pure (library airlock_egress_http).
 */
#include <stddef.h>

#include "audit.h"
#include "http.h"

static void rec__span(struct egress_recw *w, const char *key, const struct egress_http_span *s)
{
    if (s->from && s->to)
        egress_recw_us(w, key, s->to > s->from ? s->to - s->from : 0);
}

void egress_http_rec_write(struct egress_recw *w, const struct egress_http_rec *r, uint64_t now)
{
    egress_recw_str(w, "decision", r->decision);
    egress_recw_str(w, "reason", r->reason);
    egress_recw_str(w, "rule", r->rule);
    if (r->mode)
        egress_recw_str(w, "mode", r->mode);
    if (r->error) {
        egress_recw_str(w, "error", r->error);
        if (r->error_detail && r->error_detail[0])
            egress_recw_str(w, "error_detail", r->error_detail);
    }
    if (r->websocket)
        egress_recw_bool(w, "websocket", true);
    if (r->method)
        egress_recw_str(w, "method", r->method);
    if (r->host && r->host[0])
        egress_recw_str(w, "host", r->host);
    if (r->path && r->path[0])
        egress_recw_str(w, "path", r->path);
    if (r->status)
        egress_recw_int(w, "status", r->status);
    egress_recw_int(w, "bytes_up", (int64_t)r->bytes_up);
    egress_recw_int(w, "bytes_down", (int64_t)r->bytes_down);
    if (r->upstream_reused)
        egress_recw_bool(w, "upstream_reused", true);
    if (r->extra)
        r->extra(w, r->extra_arg);
    egress_recw_obj_begin(w, "timing_us");
    rec__span(w, "decide", &r->decide);
    rec__span(w, "dns", &r->dns);
    rec__span(w, "vault", &r->vault);
    rec__span(w, "tls_sandbox", &r->tls_sandbox);
    rec__span(w, "connect", &r->connect);
    rec__span(w, "tls_upstream", &r->tls_upstream);
    rec__span(w, "upstream", &r->upstream);
    rec__span(w, "total", &(struct egress_http_span){r->t_start, now});
    egress_recw_close(w, '}');
}
