/* tests/fuzz/fuzz_cp_cookie: a sandbox's Set-Cookie value made host-only (controlplane/proxy.c).
 * The sandbox writes it: hostile input. What comes out is never longer, and has no Domain attribute
 * left. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "controlplane/cp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *in = malloc(size + 1), *out = malloc(size + 1), *again = malloc(size + 1);
    if (!in || !out || !again)
        abort();
    memcpy(in, data, size);
    in[size] = '\0';
    cp_proxy_cookie_host_only(in, out, strlen(in) + 1);
    if (strlen(out) > strlen(in))
        abort();
    /* Idempotent: nothing left to drop. */
    if (cp_proxy_cookie_host_only(out, again, strlen(out) + 1) || strcmp(out, again) != 0)
        abort();
    free(in);
    free(out);
    free(again);
    return 0;
}
