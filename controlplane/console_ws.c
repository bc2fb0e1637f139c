/* controlplane/console_ws: see console_ws.h. */
#include "console_ws.h"

#include <errno.h>
#include <mbedtls/sha1.h>
#include <sodium.h>
#include <string.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

int cp_ws_accept(const char *key, char out[CP_WS_ACCEPT_LEN + 1], struct al_error *err)
{
    uint8_t raw[32];
    size_t n = 0;
    size_t kl = key ? strlen(key) : 0;
    if (kl != 24 ||
        sodium_base642bin(raw, sizeof raw, key, kl, NULL, &n, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        n != 16)
        return al_error_set(err, -EINVAL,
                            "Sec-WebSocket-Key must be the base64 of 16 random bytes");
    char cat[24 + sizeof WS_GUID];
    memcpy(cat, key, 24);
    memcpy(cat + 24, WS_GUID, sizeof WS_GUID);
    uint8_t d[20];
    if (mbedtls_sha1((const unsigned char *)cat, 24 + sizeof WS_GUID - 1, d) != 0)
        return al_error_set(err, -EIO, "SHA-1 failed");
    sodium_bin2base64(out, CP_WS_ACCEPT_LEN + 1, d, sizeof d, sodium_base64_VARIANT_ORIGINAL);
    return 0;
}

int cp_ws_parse(uint8_t *data, size_t len, struct cp_ws_frame *f, size_t *used,
                struct al_error *err)
{
    if (len < 2)
        return 0;
    uint8_t b0 = data[0], b1 = data[1];
    unsigned op = b0 & 0x0F;
    if (b0 & 0x70)
        return al_error_set(err, -EPROTO, "a WebSocket frame with reserved bits set");
    if (op != CP_WS_CONT && op != CP_WS_TEXT && op != CP_WS_BINARY && op != CP_WS_CLOSE &&
        op != CP_WS_PING && op != CP_WS_PONG)
        return al_error_set(err, -EPROTO, "a WebSocket frame with the unknown opcode %u", op);
    if (!(b1 & 0x80))
        return al_error_set(err, -EPROTO, "an unmasked WebSocket frame from the client");
    size_t hdr = 2;
    uint64_t plen = b1 & 0x7F;
    if (plen == 126) {
        if (len < 4)
            return 0;
        plen = (uint64_t)data[2] << 8 | data[3];
        hdr = 4;
    } else if (plen == 127) {
        if (len < 10)
            return 0;
        plen = 0;
        for (int i = 0; i < 8; i++)
            plen = plen << 8 | data[2 + i];
        hdr = 10;
    }
    bool control = op & 0x8;
    if (control && (!(b0 & 0x80) || plen > 125))
        return al_error_set(err, -EPROTO,
                            "a WebSocket control frame must be whole and at most 125 bytes");
    if (plen > CP_WS_MAX_PAYLOAD)
        return al_error_set(err, -EMSGSIZE, "a WebSocket frame of %llu bytes (at most %u)",
                            (unsigned long long)plen, CP_WS_MAX_PAYLOAD);
    if (len < hdr + 4 || len - hdr - 4 < plen)
        return 0;
    const uint8_t *mask = data + hdr;
    uint8_t *p = data + hdr + 4;
    for (size_t i = 0; i < plen; i++)
        p[i] ^= mask[i & 3];
    f->fin = b0 & 0x80;
    f->opcode = (enum cp_ws_opcode)op;
    f->payload = p;
    f->len = (size_t)plen;
    *used = hdr + 4 + (size_t)plen;
    return 1;
}

int cp_ws_frame_append(struct al_buf *out, enum cp_ws_opcode op, const void *payload, size_t len)
{
    uint8_t h[10];
    size_t hl = 2;
    h[0] = 0x80 | (uint8_t)op;
    if (len < 126) {
        h[1] = (uint8_t)len;
    } else if (len <= 0xFFFF) {
        h[1] = 126;
        h[2] = (uint8_t)(len >> 8);
        h[3] = (uint8_t)len;
        hl = 4;
    } else {
        h[1] = 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
        hl = 10;
    }
    int rc = al_buf_reserve(out, hl + len);
    if (rc)
        return rc;
    al_buf_append(out, h, hl);
    return len ? al_buf_append(out, payload, len) : 0;
}

int cp_ws_close_append(struct al_buf *out, uint16_t code, const char *reason)
{
    uint8_t p[125];
    p[0] = (uint8_t)(code >> 8);
    p[1] = (uint8_t)code;
    size_t rl = reason ? strlen(reason) : 0;
    if (rl > sizeof p - 2) {
        rl = sizeof p - 2;
        while (rl && ((uint8_t)reason[rl] & 0xC0) == 0x80) /* not inside a UTF-8 sequence */
            rl--;
    }
    if (rl)
        memcpy(p + 2, reason, rl);
    return cp_ws_frame_append(out, CP_WS_CLOSE, p, 2 + rl);
}
