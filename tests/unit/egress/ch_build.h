/* tests/unit/egress/ch_build: builds TLS ClientHellos for the tests (header-only).
 *
 *   struct ch_b b; chb_init(&b);
 *   chb_sni(&b, "example.com"); chb_alpn(&b, "h2"); chb_ext(&b, 0xfe0d, "x", 1);
 *   size_t n = chb_finish(&b, out, sizeof out, record_size);   // 0 = one record
 */
#ifndef AIRLOCK_TESTS_CH_BUILD_H
#define AIRLOCK_TESTS_CH_BUILD_H

#include <stdint.h>
#include <string.h>

struct ch_b {
    uint8_t ext[8192];
    size_t ext_len;
    int no_extensions;
};

static inline void chb_init(struct ch_b *b)
{
    memset(b, 0, sizeof *b);
}

static inline void chb_ext(struct ch_b *b, uint16_t type, const void *data, size_t len)
{
    uint8_t *p = b->ext + b->ext_len;
    p[0] = (uint8_t)(type >> 8);
    p[1] = (uint8_t)type;
    p[2] = (uint8_t)(len >> 8);
    p[3] = (uint8_t)len;
    memcpy(p + 4, data, len);
    b->ext_len += 4 + len;
}

static inline void chb_sni(struct ch_b *b, const char *name)
{
    uint8_t d[600];
    size_t n = strlen(name);
    d[0] = (uint8_t)((n + 3) >> 8);
    d[1] = (uint8_t)(n + 3);
    d[2] = 0;
    d[3] = (uint8_t)(n >> 8);
    d[4] = (uint8_t)n;
    memcpy(d + 5, name, n);
    chb_ext(b, 0, d, n + 5);
}

static inline void chb_alpn(struct ch_b *b, const char *const *protos, size_t n)
{
    uint8_t d[600];
    size_t o = 2;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(protos[i]);
        d[o++] = (uint8_t)l;
        memcpy(d + o, protos[i], l);
        o += l;
    }
    d[0] = (uint8_t)((o - 2) >> 8);
    d[1] = (uint8_t)(o - 2);
    chb_ext(b, 16, d, o);
}

static inline void chb_tls13(struct ch_b *b)
{
    static const uint8_t d[] = {4, 0x03, 0x04, 0x03, 0x03};
    chb_ext(b, 43, d, sizeof d);
}

/* Writes the handshake message (header + body) into hs; returns its length. */
static inline size_t chb_handshake(const struct ch_b *b, uint8_t *hs)
{
    size_t o = 4;
    hs[o++] = 3;
    hs[o++] = 3;
    for (int i = 0; i < 32; i++)
        hs[o++] = (uint8_t)i;
    hs[o++] = 0; /* session id */
    hs[o++] = 0;
    hs[o++] = 4; /* two cipher suites */
    hs[o++] = 0x13;
    hs[o++] = 0x01;
    hs[o++] = 0xc0;
    hs[o++] = 0x2f;
    hs[o++] = 1; /* null compression */
    hs[o++] = 0;
    if (!b->no_extensions) {
        hs[o++] = (uint8_t)(b->ext_len >> 8);
        hs[o++] = (uint8_t)b->ext_len;
        memcpy(hs + o, b->ext, b->ext_len);
        o += b->ext_len;
    }
    size_t body = o - 4;
    hs[0] = 1;
    hs[1] = (uint8_t)(body >> 16);
    hs[2] = (uint8_t)(body >> 8);
    hs[3] = (uint8_t)body;
    return o;
}

/* Frames handshake bytes into records of at most rec bytes (0: one record). */
static inline size_t chb_records(const uint8_t *hs, size_t n, size_t rec, uint8_t *out)
{
    size_t o = 0, i = 0;
    if (rec == 0)
        rec = n;
    while (i < n) {
        size_t l = n - i < rec ? n - i : rec;
        out[o++] = 22;
        out[o++] = 3;
        out[o++] = 1;
        out[o++] = (uint8_t)(l >> 8);
        out[o++] = (uint8_t)l;
        memcpy(out + o, hs + i, l);
        o += l;
        i += l;
    }
    return o;
}

static inline size_t chb_finish(const struct ch_b *b, uint8_t *out, size_t rec)
{
    uint8_t hs[16384];
    size_t n = chb_handshake(b, hs);
    return chb_records(hs, n, rec, out);
}

#endif
