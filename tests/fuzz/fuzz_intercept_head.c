/* tests/fuzz/fuzz_intercept_head: the head scanner every HTTP path runs (common/http_head.c), then
 * what the interception engine does with a sandbox's request head before any decision: for heads
 * the scanner accepts whole, the strict parser and collector and the proxy's request checks
 * inside TLS (egress/http.h), then Host against the SNI (egress/intercept/request.c). Byte 0 picks request or response and the SNI the connection would have; the rest is the
 * head, fed whole and byte by byte. Checks, beyond memory safety: both ways of feeding agree; an
 * accepted head has CRLF line ends only, no obs-fold, no controls but HTAB, and a request line of
 * three fields. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/http_head.h"
#include "egress/http.h"
#include "egress/intercept/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fz__url(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_url(p->data, at, n) < 0 ? HPE_USER : 0;
}
static int fz__field(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_field(p->data, at, n) < 0 ? HPE_USER : 0;
}
static int fz__value(llhttp_t *p, const char *at, size_t n)
{
    return egress_http_head_value(p->data, at, n) < 0 ? HPE_USER : 0;
}
static int fz__headers(llhttp_t *p)
{
    return egress_http_head_finish(p->data) < 0 ? HPE_USER : HPE_PAUSED;
}

static const llhttp_settings_t *fz__settings(void)
{
    static llhttp_settings_t s;
    if (!s.on_url) {
        llhttp_settings_init(&s);
        s.on_url = fz__url;
        s.on_header_field = fz__field;
        s.on_header_value = fz__value;
        s.on_headers_complete = fz__headers;
    }
    return &s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool request = (data[0] & 1) == 0;
    const char *sni = (data[0] & 2) ? "api.github.test" : "a.example.test";
    const char *h = (const char *)data + 1;
    size_t n = size - 1;
    const char *reason = NULL;
    struct al_http_head_scan whole, bytes;
    al_http_head_scan_init(&whole, request, 1 << 16);
    al_http_head_scan_init(&bytes, request, 1 << 16);
    size_t used = 0, at = 0;
    int rc = al_http_head_scan(&whole, h, n, &used);
    int rc1 = 0;
    for (; at < n && rc1 == 0; at++)
        rc1 = al_http_head_scan(&bytes, h + at, 1, &(size_t){0});
    if (rc != rc1 || (rc == 1 && at != used))
        __builtin_trap(); /* the state carries everything a split needs */
    if (rc < 0 && !al_http_head_scan_reason(&whole))
        __builtin_trap();
    if (rc != 1 || used != n)
        return 0;
    bool lead = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)h[i];
        if (h[i] == '\n' && (i == 0 || h[i - 1] != '\r'))
            __builtin_trap();
        if (h[i] == '\r' && (i + 1 == n || h[i + 1] != '\n'))
            __builtin_trap();
        if (!lead && h[i] == '\n' && i + 1 < n && (h[i + 1] == ' ' || h[i + 1] == '\t'))
            __builtin_trap();
        if ((ch < 0x20 && ch != '\t' && ch != '\r' && ch != '\n') || ch == 0x7f)
            __builtin_trap();
        if (ch != '\r' && ch != '\n')
            lead = false;
    }
    if (!request)
        return 0;
    /* The request line (after any empty lines): three fields. */
    const char *line = h, *end = h + n;
    while (line + 1 < end && line[0] == '\r')
        line += 2;
    const char *cr = memchr(line, '\r', (size_t)(end - line));
    const char *sp = cr ? memchr(line, ' ', (size_t)(cr - line)) : NULL;
    if (cr && cr != line && (!sp || !memchr(sp + 1, ' ', (size_t)(cr - sp - 1))))
        __builtin_trap(); /* the scanner accepted a bad request line */
    /* The request side as the interception engine runs it: the strict parser into the head
     * collector, the proxy's checks inside TLS, then the identity (Host = SNI). */
    struct egress_http_head hd;
    egress_http_head_init(&hd, 1 << 16);
    llhttp_t p;
    llhttp_init(&p, HTTP_REQUEST, fz__settings());
    p.data = &hd;
    llhttp_errno_t e = llhttp_execute(&p, h, n);
    if (e == HPE_PAUSED && llhttp_get_error_pos(&p) == h + n) {
        const struct egress_http_conn hc = {.port = 443, .tls = true};
        struct intercept_conn_view c = {.tls = true, .sni = sni, .port = 443};
        struct egress_http_request r;
        struct intercept_req_info info;
        int status;
        if (egress_http_check_request(&hd, &p, &hc, &r, &status, &reason) == 0 &&
            intercept_request_check(&c, &r, &info, &status, &reason) == 0) {
            /* An accepted request names the SNI, and its path is origin-form. */
            if (strcmp(info.host.text, sni) != 0 || info.path_len == 0 || info.path[0] != '/')
                __builtin_trap();
        }
    }
    egress_http_head_free(&hd);
    return 0;
}
