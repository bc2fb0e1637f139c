/* tests/fuzz/fuzz_multipart: the multipart/form-data parser. The first byte picks how the body is
 * split into chunks; the boundary is fixed ("B0und"), as an attacker does not choose it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vmm/guest/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t g_bytes;

static int on_begin(void *ctx, const struct agent_mp_part *p)
{
    (void)ctx;
    g_bytes += strlen(p->name) + strlen(p->filename);
    return 0;
}

static int on_data(void *ctx, const char *d, size_t n)
{
    (void)ctx;
    if (n)
        g_bytes += (unsigned char)d[0] + (unsigned char)d[n - 1];
    return 0;
}

static int on_end(void *ctx)
{
    (void)ctx;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct agent_mp_callbacks cb = {on_begin, on_data, on_end};
    struct agent_mp mp;
    if (agent_mp_init(&mp, "multipart/form-data; boundary=B0und", &cb, NULL) != 0)
        return 0;
    size_t step = size ? (size_t)data[0] % 64 + 1 : 1;
    for (size_t i = 0; i < size; i += step) {
        size_t n = size - i < step ? size - i : step;
        if (agent_mp_feed(&mp, (const char *)data + i, n) != 0)
            break;
    }
    agent_mp_finish(&mp);
    agent_mp_free(&mp);
    return 0;
}
