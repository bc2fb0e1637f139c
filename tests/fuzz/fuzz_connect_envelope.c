/* tests/fuzz/fuzz_connect_envelope: the Connect envelope decoder (incremental, split at a
 * data-chosen point) and the whole-body request unwrapper. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vmm/guest/connect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_msg(void *ctx, uint8_t flags, const uint8_t *msg, size_t len)
{
    size_t *total = ctx;
    *total += len + flags;
    if (len)
        *total += msg[0] ^ msg[len - 1];
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct agent_connect_decoder d;
    size_t total = 0;
    agent_connect_decoder_init(&d, 4096);
    size_t split = size ? data[0] % (size + 1) : 0;
    if (agent_connect_decoder_feed(&d, data, split, on_msg, &total) == 0)
        agent_connect_decoder_feed(&d, data + split, size - split, on_msg, &total);
    (void)agent_connect_decoder_idle(&d);
    agent_connect_decoder_free(&d);
    const uint8_t *m;
    size_t ml;
    struct al_error e = {0};
    if (agent_connect_unwrap_request(data, size, 4096, &m, &ml, &e) == 0 && ml)
        total += m[ml - 1];
    return (int)(total & 0);
}
