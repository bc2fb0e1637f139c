/* tests/fuzz/fuzz_cp_ws_frame: the WebSocket frames a browser sends to the console's terminal
 * (controlplane/console_ws.c), hostile input: every frame parsed is within the input, its
 * payload within the frame and at most CP_WS_MAX_PAYLOAD, a control frame whole and short;
 * a frame written back from it parses to the same opcode and bytes once masked. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/console_ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A server frame turned into a client one (the mask bit and a zero mask), for re-parsing. */
static void check_roundtrip(const struct cp_ws_frame *f)
{
    struct al_buf b;
    al_buf_init(&b, 0);
    if (cp_ws_frame_append(&b, f->opcode, f->payload, f->len))
        abort();
    uint8_t *c = malloc(b.len + 4);
    if (!c)
        abort();
    size_t hl = (b.data[1] & 0x7F) == 126 ? 4 : (b.data[1] & 0x7F) == 127 ? 10 : 2;
    memcpy(c, b.data, hl);
    c[1] |= 0x80;
    memset(c + hl, 0, 4);
    memcpy(c + hl + 4, b.data + hl, b.len - hl);
    struct cp_ws_frame g;
    size_t used = 0;
    struct al_error err = {0};
    if (cp_ws_parse(c, b.len + 4, &g, &used, &err) != 1 || used != b.len + 4 ||
        g.opcode != f->opcode || g.len != f->len || !g.fin ||
        (g.len && memcmp(g.payload, b.data + hl, g.len) != 0))
        abort();
    free(c);
    al_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    while (off < size) {
        struct cp_ws_frame f;
        size_t used = 0;
        struct al_error err = {0};
        int rc = cp_ws_parse(buf + off, size - off, &f, &used, &err);
        if (rc < 0) {
            if (!err.msg[0])
                abort();
            break;
        }
        if (rc == 0)
            break;
        if (used == 0 || used > size - off || f.len > CP_WS_MAX_PAYLOAD || f.payload < buf + off ||
            f.payload + f.len != buf + off + used)
            abort();
        if ((f.opcode & 0x8) && (!f.fin || f.len > 125))
            abort();
        check_roundtrip(&f);
        off += used;
    }
    struct al_buf b;
    al_buf_init(&b, 0);
    char reason[200];
    size_t rl = size < sizeof reason - 1 ? size : sizeof reason - 1;
    memcpy(reason, data, rl);
    reason[rl] = '\0';
    if (cp_ws_close_append(&b, 1000, reason) || b.len > 127)
        abort();
    al_buf_free(&b);
    free(buf);
    return 0;
}
