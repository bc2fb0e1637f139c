/* tests/fuzz/fuzz_intercept_head: the head scanner every HTTP path runs (common/http_head.c), then
 * what the interception engine does with a sandbox's request head before any decision
 * (egress/intercept/request.c): for heads the scanner accepts whole, the checks of Host, authority,
 * upgrades. Byte 0 picks request or response and the SNI the connection would have; the rest is the
 * head, fed whole and byte by byte. Checks, beyond memory safety: both ways of feeding agree; an
 * accepted head has CRLF line ends only, no obs-fold, no controls but HTAB, and a request line of
 * three fields. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/http_head.h"
#include "egress/intercept/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    /* Split into request line and headers as the engine's parser would. */
    struct al_http_field hdrs[64];
    size_t nh = 0;
    const char *line = h, *end = h + n;
    const char *method = NULL, *target = NULL;
    size_t ml = 0, tl = 0;
    int major = 0;
    while (line < end) {
        const char *cr = memchr(line, '\r', (size_t)(end - line));
        if (!cr)
            break;
        if (cr == line) {
            if (method)
                break;
            line = cr + 2; /* an empty line before the request line */
            continue;
        }
        if (!method) {
            const char *sp = memchr(line, ' ', (size_t)(cr - line));
            const char *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(cr - sp - 1)) : NULL;
            if (!sp || !sp2)
                __builtin_trap(); /* the scanner accepted a bad request line */
            method = line;
            ml = (size_t)(sp - line);
            target = sp + 1;
            tl = (size_t)(sp2 - sp - 1);
            major = cr[-3] - '0'; /* "HTTP/d.d" ends the line */
        } else if (nh < 64) {
            const char *colon = memchr(line, ':', (size_t)(cr - line));
            if (!colon)
                __builtin_trap();
            const char *v = colon + 1;
            while (v < cr && (*v == ' ' || *v == '\t'))
                v++;
            hdrs[nh++] = (struct al_http_field){line, (size_t)(colon - line), v, (size_t)(cr - v)};
        }
        line = cr + 2;
    }
    if (!method)
        return 0;
    char m[32];
    if (ml >= sizeof m)
        return 0;
    memcpy(m, method, ml);
    m[ml] = 0;
    struct intercept_conn_view c = {.tls = true, .sni = sni, .port = 443};
    struct intercept_req_view r = {.method = m,
                                   .http_major = major,
                                   .target = target,
                                   .target_len = tl,
                                   .hdrs = hdrs,
                                   .n_hdrs = nh};
    struct intercept_req_info info;
    int status;
    if (intercept_request_check(&c, &r, &info, &status, &reason) == 0) {
        /* An accepted request names the SNI. */
        if (strcmp(info.host.text, sni) != 0)
            __builtin_trap();
        if (info.path_len > tl + 1)
            __builtin_trap();
    }
    return 0;
}
