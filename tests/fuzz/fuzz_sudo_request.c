/* tests/fuzz/fuzz_sudo_request: what vmm/guest/sudo.c parses from a sandbox process before deciding
 * anything: a frame header (agent_sudo_hdr_parse) and a request payload (agent_sudo_req_parse),
 * then the parsed request as sudo.c uses it (every string NUL-terminated within the buffer, the
 * arrays NULL-terminated, the counts bounded; -s/-i quoting of the arguments). Input: the first 5
 * bytes are a header, the rest the payload. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/guest/sudoproto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t g_sink;

static void check_strv(const char **v, size_t n, const char *buf, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (!v[i] || v[i] < buf || v[i] >= buf + len)
            abort();
        g_sink += strlen(v[i]);
    }
    if (v[n] || n > AGENT_SUDO_MAX_ARGS)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < AGENT_SUDO_HDR || size > (1u << 20))
        return 0;
    uint8_t type;
    uint32_t len;
    if (agent_sudo_hdr_parse(data, &type, &len) == 0 && type == AGENT_SUDO_F_SIG && len != 4)
        abort();
    size_t n = size - AGENT_SUDO_HDR;
    char *buf = malloc(n + 1);
    if (!buf)
        return 0;
    memcpy(buf, data + AGENT_SUDO_HDR, n);
    buf[n] = '\0';
    struct agent_sudo_req r;
    const char *why = NULL;
    int rc = agent_sudo_req_parse(buf, n, &r, &why);
    if (rc == 0) {
        check_strv(r.argv, r.argc, buf, n);
        check_strv(r.env, r.envc, buf, n);
        check_strv(r.setenv, r.setenvc, buf, n);
        check_strv(r.keep, r.keepc, buf, n);
        if (r.mode == AGENT_SUDO_RUN && (r.argc == 0 || !r.argv[0][0]))
            abort();
        for (size_t i = 0; i < r.setenvc; i++)
            if (!strchr(r.setenv[i], '=') || r.setenv[i][0] == '=')
                abort();
        char *q = NULL;
        if (agent_sudo_shell_quote(r.argv, r.argc, &q) == 0) {
            g_sink += strlen(q);
            free(q);
        }
        agent_sudo_req_free(&r);
    } else if (rc != -EPROTO && rc != -ENOMEM) {
        abort();
    } else if (!why || !*why) {
        abort();
    }
    free(buf);
    return 0;
}
