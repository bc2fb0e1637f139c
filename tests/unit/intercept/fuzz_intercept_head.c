/* Fuzz target: what the interception engine does with a sandbox's request head before any
 * decision (egress/intercept/request.c): the byte-level validation, then — for heads it
 * accepts — the checks of Host, authority, upgrades. Byte 0 picks request or response and
 * the SNI the connection would have; the rest is the head. Checks, beyond memory safety: an
 * accepted request head has CRLF line ends only and no obs-fold. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    if (intercept_head_validate(h, n, request, &reason) < 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (h[i] == '\n' && (i == 0 || h[i - 1] != '\r'))
            __builtin_trap();
        if (h[i] == '\n' && i + 1 < n && (h[i + 1] == ' ' || h[i + 1] == '\t'))
            __builtin_trap();
    }
    if (!request)
        return 0;
    /* Split into request line and headers as the engine's parser would. */
    struct al_http_field hdrs[64];
    size_t nh = 0;
    const char *line = h, *end = h + n;
    const char *method = NULL, *target = NULL;
    size_t ml = 0, tl = 0;
    while (line < end) {
        const char *cr = memchr(line, '\r', (size_t)(end - line));
        if (!cr || cr == line)
            break;
        if (!method) {
            const char *sp = memchr(line, ' ', (size_t)(cr - line));
            const char *sp2 = sp ? memchr(sp + 1, ' ', (size_t)(cr - sp - 1)) : NULL;
            if (!sp || !sp2)
                __builtin_trap(); /* validate accepted a bad request line */
            method = line;
            ml = (size_t)(sp - line);
            target = sp + 1;
            tl = (size_t)(sp2 - sp - 1);
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
    struct intercept_req_view r = {
        .method = m, .target = target, .target_len = tl, .hdrs = hdrs, .n_hdrs = nh};
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
