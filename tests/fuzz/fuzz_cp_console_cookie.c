/* tests/fuzz/fuzz_cp_console_cookie: a browser's Cookie header as airlockd reads it for the
 * console's session (controlplane/console.c): anyone can send one. The value found always fits
 * and is part of the input; stripping the console's cookies leaves no console cookie, never
 * grows the header, and is idempotent. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/console.h"

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
    char v[80];
    bool found = false;
    int rc = cp_console_cookie_find(in, CP_CONSOLE_COOKIE, v, sizeof v, &found);
    if (rc == 1 && (strlen(v) >= sizeof v || !strstr(in, v)))
        abort();
    if (rc == 0 && found)
        abort();
    cp_console_cookie_strip(in, out, strlen(in) + 1);
    if (strlen(out) > strlen(in))
        abort();
    found = false;
    if (cp_console_cookie_find(out, CP_CONSOLE_COOKIE, v, sizeof v, &found) != 0 ||
        cp_console_cookie_find(out, CP_CONSOLE_COOKIE_SECURE, v, sizeof v, &found) != 0)
        abort();
    if (cp_console_cookie_strip(out, again, strlen(out) + 1) || strcmp(out, again) != 0)
        abort();
    free(in);
    free(out);
    free(again);
    return 0;
}
