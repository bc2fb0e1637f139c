/* controlplane/templates/layer: see layer.h. */
#include "layer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "internal.h"

#define LAYER_IN_BUF (256 * 1024)

struct tpl_layer_stream {
    int fd;
    enum tpl_compression comp;
    z_stream z;
    bool z_init;
    ZSTD_DStream *zs;
    unsigned char *in;
    size_t in_len, in_off;
    bool in_eof;
    bool ended; /* the compressed stream ended (no more output) */
    uint64_t in_total, out_total;
    uint32_t max_ratio;
    uint64_t max_out;
    struct tpl_sha256 *sha;
    char err[256];
};

static int layer__fail(struct tpl_layer_stream *s, int rc, const char *msg)
{
    if (!s->err[0])
        snprintf(s->err, sizeof s->err, "%s", msg);
    return rc;
}

/* Refills the compressed input; 0 at EOF. */
static ssize_t layer__fill(struct tpl_layer_stream *s)
{
    if (s->in_off < s->in_len)
        return (ssize_t)(s->in_len - s->in_off);
    if (s->in_eof)
        return 0;
    for (;;) {
        ssize_t n = read(s->fd, s->in, LAYER_IN_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        s->in_off = 0;
        s->in_len = (size_t)n;
        s->in_total += (uint64_t)n;
        if (n == 0)
            s->in_eof = true;
        return n;
    }
}

int tpl_layer_open(int fd, uint32_t max_ratio, uint64_t max_out, struct tpl_layer_stream **out)
{
    *out = NULL;
    struct tpl_layer_stream *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->fd = fd;
    s->max_ratio = max_ratio;
    s->max_out = max_out;
    s->in = malloc(LAYER_IN_BUF);
    s->sha = tpl_sha256_new();
    if (!s->in || !s->sha) {
        tpl_layer_free(s);
        return -ENOMEM;
    }
    ssize_t n = layer__fill(s);
    if (n < 0) {
        int rc = (int)n;
        tpl_layer_free(s);
        return rc;
    }
    const unsigned char *m = s->in;
    if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
        s->comp = TPL_COMP_GZIP;
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK) {
            tpl_layer_free(s);
            return -ENOMEM;
        }
        s->z_init = true;
    } else if (n >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) {
        s->comp = TPL_COMP_ZSTD;
        s->zs = ZSTD_createDStream();
        if (!s->zs || ZSTD_isError(ZSTD_initDStream(s->zs)) ||
            ZSTD_isError(ZSTD_DCtx_setParameter(s->zs, ZSTD_d_windowLogMax, 27))) {
            tpl_layer_free(s);
            return -ENOMEM;
        }
    } else {
        s->comp = TPL_COMP_NONE;
    }
    *out = s;
    return 0;
}

/* Counts and checks what came out, and hashes it. */
static ssize_t layer__out(struct tpl_layer_stream *s, const void *buf, size_t n)
{
    s->out_total += n;
    if (s->out_total > s->max_out)
        return layer__fail(s, -EFBIG,
                           "the layer unpacks to more than the image may hold "
                           "(templates.max_unpacked_size)");
    if (s->comp != TPL_COMP_NONE && s->out_total > TPL_LAYER_RATIO_FROM &&
        s->out_total / (s->in_total ? s->in_total : 1) > s->max_ratio)
        return layer__fail(s, -EFBIG,
                           "the layer decompresses to more than its compression ratio limit "
                           "allows (a decompression bomb?)");
    tpl_sha256_update(s->sha, buf, n);
    return (ssize_t)n;
}

ssize_t tpl_layer_read(void *arg, void *buf, size_t len)
{
    struct tpl_layer_stream *s = arg;
    if (s->err[0])
        return -EIO;
    for (;;) {
        if (s->ended)
            return 0;
        ssize_t avail = layer__fill(s);
        if (avail < 0)
            return layer__fail(s, (int)avail, "cannot read the layer blob");
        if (s->comp == TPL_COMP_NONE) {
            if (avail == 0) {
                s->ended = true;
                return 0;
            }
            size_t k = (size_t)avail < len ? (size_t)avail : len;
            memcpy(buf, s->in + s->in_off, k);
            s->in_off += k;
            return layer__out(s, buf, k);
        }
        if (s->comp == TPL_COMP_GZIP) {
            if (avail == 0)
                return layer__fail(s, -EBADMSG, "the gzip stream of the layer is truncated");
            s->z.next_in = s->in + s->in_off;
            s->z.avail_in = (uInt)avail;
            s->z.next_out = buf;
            s->z.avail_out = (uInt)(len > (1u << 30) ? (1u << 30) : len);
            int zr = inflate(&s->z, Z_NO_FLUSH);
            size_t produced = (size_t)((unsigned char *)s->z.next_out - (unsigned char *)buf);
            s->in_off = (size_t)(s->z.next_in - s->in);
            if (zr == Z_STREAM_END) {
                /* Another gzip member may follow (concatenated archives). */
                ssize_t more = layer__fill(s);
                if (more > 0)
                    inflateReset(&s->z);
                else
                    s->ended = true;
            } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
                return layer__fail(s, -EBADMSG, "the layer is not valid gzip data");
            }
            if (produced)
                return layer__out(s, buf, produced);
            continue;
        }
        /* zstd */
        if (avail == 0)
            return layer__fail(s, -EBADMSG, "the zstd stream of the layer is truncated");
        ZSTD_inBuffer in = {s->in + s->in_off, (size_t)avail, 0};
        ZSTD_outBuffer out = {buf, len, 0};
        size_t r = ZSTD_decompressStream(s->zs, &out, &in);
        s->in_off += in.pos;
        if (ZSTD_isError(r))
            return layer__fail(s, -EBADMSG,
                               "the layer is not valid zstd data (or needs a larger "
                               "window than 128 MiB)");
        if (r == 0 && s->in_off == s->in_len && layer__fill(s) == 0)
            s->ended = true;
        if (out.pos)
            return layer__out(s, buf, out.pos);
    }
}

int tpl_layer_finish(struct tpl_layer_stream *s, char diff_id[TPL_DIGEST_LEN + 1])
{
    char buf[64 * 1024];
    for (;;) {
        ssize_t n = tpl_layer_read(s, buf, sizeof buf);
        if (n < 0)
            return (int)n;
        if (n == 0)
            break;
    }
    tpl_sha256_final(s->sha, diff_id);
    return 0;
}

const char *tpl_layer_error(const struct tpl_layer_stream *s)
{
    return s->err[0] ? s->err : "no error";
}

enum tpl_compression tpl_layer_compression(const struct tpl_layer_stream *s)
{
    return s->comp;
}

uint64_t tpl_layer_in_bytes(const struct tpl_layer_stream *s)
{
    return s->in_total;
}

uint64_t tpl_layer_out_bytes(const struct tpl_layer_stream *s)
{
    return s->out_total;
}

void tpl_layer_free(struct tpl_layer_stream *s)
{
    if (!s)
        return;
    if (s->z_init)
        inflateEnd(&s->z);
    ZSTD_freeDStream(s->zs);
    tpl_sha256_free(s->sha);
    free(s->in);
    free(s);
}
