/* tests/fuzz/fuzz_forward_fields: what vmm/guest/forward.c parses from a client before forwarding:
 * the Connection options (al_http_forward_drops_header), the E2b-Sandbox-Port value and the
 * request-target's origin-form. Input: lines "Connection value", "field name", "port", "target"
 * (missing lines are empty). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/guest/agent.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    char *line[4] = {"", "", "", ""};
    char *p = s;
    for (int i = 0; i < 4 && p; i++) {
        line[i] = p;
        p = strchr(p, '\n');
        if (p)
            *p++ = '\0';
    }
    const struct al_http_header h[] = {{"Connection", line[0]}, {"connection", line[2]}};
    g_sink += al_http_forward_drops_header(h, 2, line[1], 0);
    g_sink += al_http_forward_drops_header(h, 1, line[0], AL_HTTP_FWD_UPGRADE);
    if (!al_http_forward_drops_header(h, 2, "TE", AL_HTTP_FWD_UPGRADE))
        abort(); /* the fixed list holds whatever Connection says */
    int port = agent_forward_port(line[2]);
    if (port >= 0 && (port < 1 || port > 65535))
        abort();
    char buf[256];
    const char *o = agent_forward_origin_form(line[3], buf, sizeof buf);
    if (!o) {
        if (strlen(line[3]) < sizeof buf)
            abort(); /* a rewrite is never longer than the target it came from */
        free(s);
        return 0;
    }
    if (line[3][0] == '/' && o != line[3])
        abort(); /* origin-form passes through untouched */
    if (o != line[3] && o[0] != '/')
        abort(); /* a rewritten target is always origin-form */
    g_sink += strlen(o);
    free(s);
    return 0;
}
