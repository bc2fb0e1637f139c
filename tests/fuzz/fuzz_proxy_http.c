/* tests/fuzz/fuzz_proxy_http: the request side of the proxy's HTTP engine on arbitrary bytes: strict
 * llhttp into the bounded head collector and the head scanner, the request checks (byte 0 picks a
 * plain connection or one inside intercepted TLS, and the port), and the head re-serialised for
 * the upstream. Invariant checked on every accepted request: what the upstream
 * would receive parses (strictly) as exactly one request head with the same method, target, Host
 * and framing, and without hop-by-hop or Proxy-* headers. */
#include "common/http_head.h"
#include "egress/http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fz {
    struct egress_http_head h;
    bool complete;
};

static int fz__url(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_url(&((struct fz *)p->data)->h, at, n) < 0 ? HPE_USER : 0;
}
static int fz__field(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_field(&((struct fz *)p->data)->h, at, n) < 0 ? HPE_USER : 0;
}
static int fz__value(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_value(&((struct fz *)p->data)->h, at, n) < 0 ? HPE_USER : 0;
}
static int fz__headers(llhttp_t *p)
{
    struct fz *f = p->data;
    if (egress_http_head_finish(&f->h) < 0)
        return HPE_USER;
    f->complete = true;
    return HPE_PAUSED;
}

static void fz__settings(llhttp_settings_t *s)
{
    llhttp_settings_init(s);
    s->on_url = fz__url;
    s->on_header_field = fz__field;
    s->on_header_value = fz__value;
    s->on_headers_complete = fz__headers;
}

/* Parses buf as a request head; returns whether one complete head was read. */
static bool fz__parse(const char *buf, size_t len, size_t split, struct fz *f, llhttp_t *p,
                      const llhttp_settings_t *s)
{
    egress_http_head_init(&f->h, 8192);
    f->complete = false;
    llhttp_init(p, HTTP_REQUEST, s);
    p->data = f;
    /* Fed in two pieces, as a socket might deliver it. */
    if (split > len)
        split = len;
    llhttp_errno_t e = llhttp_execute(p, buf, split);
    if (e == HPE_OK && !f->complete)
        e = llhttp_execute(p, buf + split, len - split);
    return f->complete && (e == HPE_PAUSED || e == HPE_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    static llhttp_settings_t s;
    static bool init;
    if (!init) {
        fz__settings(&s);
        init = true;
    }
    bool tls = data[0] & 2;
    uint16_t dst_port = tls ? (data[0] & 1 ? 443 : 8443) : (data[0] & 1 ? 80 : 8080);
    const struct egress_http_conn conn = {.port = dst_port, .tls = tls};
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    struct fz f;
    llhttp_t p;
    if (!fz__parse(buf, len, len / 2, &f, &p, &s)) {
        egress_http_head_free(&f.h);
        return 0;
    }
    /* What llhttp accepted goes through the head scanner too (egress/http.c); a head it
     * refuses is denied there. */
    struct al_http_head_scan sc;
    al_http_head_scan_init(&sc, true, 0);
    size_t head_len = (size_t)(llhttp_get_error_pos(&p) - buf), used = 0;
    int src = al_http_head_scan(&sc, buf, head_len, &used);
    if (src < 0 && !al_http_head_scan_reason(&sc))
        abort();
    if (src != 1 || used != head_len) {
        egress_http_head_free(&f.h);
        return 0;
    }
    struct egress_http_request r;
    int status = 0;
    const char *reason = NULL;
    if (egress_http_check_request(&f.h, &p, &conn, &r, &status, &reason) < 0) {
        if (!reason || status < 400 || status > 499)
            abort();
        egress_http_head_free(&f.h);
        return 0;
    }
    if (r.port != dst_port || !r.host_name[0] || r.target[0] != '/')
        abort();
    struct al_buf out;
    al_buf_init(&out, 0);
    if (egress_http_serialize_request(&f.h, &r, false, &out) < 0)
        abort();
    /* The upstream's view. */
    struct fz g;
    llhttp_t q;
    if (!fz__parse(out.data, out.len, out.len, &g, &q, &s))
        abort(); /* we produced something a strict parser rejects */
    size_t consumed = (size_t)(llhttp_get_error_pos(&q) - out.data);
    if (consumed != out.len)
        abort(); /* more than one head, or bytes after it */
    if (q.method != p.method)
        abort();
    if (g.h.url_len != r.target_len || memcmp(g.h.buf + g.h.url, r.target, r.target_len) != 0)
        abort();
    size_t n_host = 0;
    egress_http_head_get(&g.h, "Host", &n_host);
    if (n_host != 1)
        abort();
    static const char *const banned[] = {"Proxy-Authorization",
                                         "Proxy-Connection",
                                         "Keep-Alive",
                                         "TE",
                                         "Trailer",
                                         "HTTP2-Settings",
                                         NULL};
    for (const char *const *b = banned; *b; b++) {
        size_t n = 0;
        egress_http_head_get(&g.h, *b, &n);
        if (n)
            abort();
    }
    size_t n_te = 0, n_cl = 0;
    egress_http_head_get(&g.h, "Transfer-Encoding", &n_te);
    egress_http_head_get(&g.h, "Content-Length", &n_cl);
    if (n_te + n_cl > 1 || (r.chunked && n_te != 1) || (r.content_length >= 0 && n_cl != 1))
        abort(); /* framing restated exactly once */
    if (n_cl && q.content_length != (uint64_t)r.content_length)
        abort();
    al_buf_free(&out);
    egress_http_head_free(&g.h);
    egress_http_head_free(&f.h);
    return 0;
}
