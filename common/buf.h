/* common/buf: a growable byte buffer with a hard cap.
 *
 * Owns nothing global. Every buffer that holds data from an untrusted peer has a cap; an
 * append that would exceed it fails with -E2BIG and leaves the buffer unchanged.
 */
#ifndef AIRLOCK_COMMON_BUF_H
#define AIRLOCK_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct al_buf {
    char *data; /* always NUL-terminated when non-NULL (the NUL is not counted in len) */
    size_t len;
    size_t cap; /* allocated bytes */
    size_t max; /* 0 = unlimited */
};

#define AL_BUF_INIT   \
    {                 \
        NULL, 0, 0, 0 \
    }

void al_buf_init(struct al_buf *b, size_t max);
int al_buf_reserve(struct al_buf *b, size_t extra);
int al_buf_append(struct al_buf *b, const void *data, size_t len);
int al_buf_appends(struct al_buf *b, const char *s);
int al_buf_printf(struct al_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int al_buf_vprintf(struct al_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Drops the first n bytes. */
void al_buf_consume(struct al_buf *b, size_t n);
void al_buf_reset(struct al_buf *b);
/* Releases the memory; if wipe, zeroes it first (for buffers that held secrets). */
void al_buf_free(struct al_buf *b);
void al_buf_free_wipe(struct al_buf *b);
/* Hands the data to the caller (who frees it) and resets b. */
char *al_buf_steal(struct al_buf *b, size_t *len);

#endif
