/* tests/fuzz/fuzz_cp_cookie: the cookie lists airlockd filters (common/http_head.c's segment
 * filter), each input read both ways: as a sandbox's Set-Cookie value made host-only
 * (controlplane/proxy.c: the sandbox writes it) and as a browser's Cookie header, in which the
 * console finds its session and from which it strips the session before a request reaches a
 * sandbox (controlplane/console.c: anyone can send one). Hostile input both times.
 * Either filter's result is never longer, keeps nothing it drops, and is a fixed point; a
 * value found always fits and is part of the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/http_head.h"
#include "controlplane/console.h"
#include "controlplane/cp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether list (a Set-Cookie value) still has a Domain attribute. */
static bool has_domain(const char *list)
{
    struct al_http_cookie_seg seg = {0};
    while (al_http_cookie_next(list, &seg))
        if (seg.index > 0 && seg.name_len == 6 && strncasecmp(seg.name, "domain", 6) == 0)
            return true;
    return false;
}

static void set_cookie(const char *in, char *out, char *again)
{
    cp_proxy_cookie_host_only(in, out, strlen(in) + 1);
    if (strlen(out) > strlen(in) || has_domain(out))
        abort();
    /* The cookie's pair keeps its place: what it was named, it is named still. */
    struct al_http_cookie_seg a = {0}, b = {0};
    if (!al_http_cookie_next(in, &a) || !al_http_cookie_next(out, &b) || a.name_len != b.name_len ||
        memcmp(a.name, b.name, a.name_len) != 0)
        abort();
    if (cp_proxy_cookie_host_only(out, again, strlen(out) + 1) || strcmp(out, again) != 0)
        abort();
    /* One byte short: nothing, never a part. */
    if (out[0] && (!cp_proxy_cookie_host_only(in, again, strlen(out)) || again[0]))
        abort();
}

static void cookie_header(const char *in, char *out, char *again)
{
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
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *in = malloc(size + 1), *out = malloc(size + 1), *again = malloc(size + 1);
    if (!in || !out || !again)
        abort();
    memcpy(in, data, size);
    in[size] = '\0';
    set_cookie(in, out, again);
    cookie_header(in, out, again);
    free(in);
    free(out);
    free(again);
    return 0;
}
