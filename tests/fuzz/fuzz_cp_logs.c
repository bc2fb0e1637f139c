/* tests/fuzz/fuzz_cp_logs: turning a sandbox's log lines into E2B log entries. The sandbox writes
 * them (its agent's output, and anything its programs print through it): hostile input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/logs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char ts[40] = "";
    const char *p = (const char *)data;
    size_t left = size;
    while (left) {
        const char *nl = memchr(p, '\n', left);
        size_t l = nl ? (size_t)(nl - p) : left;
        json_t *e = cp_logs_parse_line(p, l, ts, sizeof ts);
        if (e) {
            /* Every entry the API serves must be valid JSON text with the four fields. */
            if (!json_is_string(json_object_get(e, "message")) ||
                !json_is_string(json_object_get(e, "timestamp")) ||
                !json_is_string(json_object_get(e, "level")) ||
                !json_is_object(json_object_get(e, "fields")))
                abort();
            char *t = json_dumps(e, JSON_COMPACT);
            if (!t)
                abort();
            free(t);
            json_decref(e);
        }
        p += l + (nl ? 1 : 0);
        left -= l + (nl ? 1 : 0);
    }
    return 0;
}
