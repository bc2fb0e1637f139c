/* tests/fuzz/fuzz_cp_list_query: the list endpoints' query parser (a client controls the whole
 * query string: metadata decoded three times, states, limits, nextToken) and the selection over a
 * few sandboxes. The first byte picks v1 or v2. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/list.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    char *q = malloc(size);
    if (!q)
        return 0;
    memcpy(q, data + 1, size - 1);
    q[size - 1] = '\0';
    struct cp_list_query lq;
    if (cp_list_query_parse(q, data[0] & 1, &lq, NULL) == 0) {
        json_t *md = json_pack("{s:s}", "k", "v");
        struct cp_list_item items[3] = {
            {.id = "a",
             .state = CP_SB_RUNNING,
             .started_ns = 1,
             .template_id = "base",
             .metadata = md},
            {.id = "b",
             .state = CP_SB_PAUSED,
             .started_ns = 2,
             .template_id = "base",
             .metadata = md},
            {.id = "c",
             .state = CP_SB_RUNNING,
             .started_ns = 2,
             .template_id = "x",
             .metadata = md},
        };
        size_t n;
        char tok[160];
        cp_list_select(&lq, items, 3, &n, tok, sizeof tok);
        if (tok[0]) {
            uint64_t ns;
            char id[64];
            if (cp_list_token_decode(tok, &ns, id, sizeof id) != 0)
                abort(); /* a token we issue must decode */
        }
        json_decref(md);
        cp_list_query_free(&lq);
    }
    free(q);
    return 0;
}
