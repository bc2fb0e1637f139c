/* common/buf: see buf.h. */
#include "buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

void al_buf_init(struct al_buf *b, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max;
}

int al_buf_reserve(struct al_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1)
        return -E2BIG;
    size_t need = b->len + extra + 1;
    if (b->max && b->len + extra > b->max)
        return -E2BIG;
    if (need <= b->cap)
        return 0;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) {
            ncap = need;
            break;
        }
        ncap *= 2;
    }
    char *n = realloc(b->data, ncap);
    if (!n)
        return -ENOMEM;
    b->data = n;
    b->cap = ncap;
    return 0;
}

int al_buf_append(struct al_buf *b, const void *data, size_t len)
{
    /* Room already there (the common case of the small appends heads are built from): no
     * reservation to compute. cap - len > len leaves the byte for the NUL. */
    if (len < b->cap - b->len && (!b->max || b->len + len <= b->max)) {
        if (len)
            memcpy(b->data + b->len, data, len);
        b->len += len;
        b->data[b->len] = '\0';
        return 0;
    }
    int rc = al_buf_reserve(b, len);
    if (rc)
        return rc;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int al_buf_appends(struct al_buf *b, const char *s)
{
    return al_buf_append(b, s, strlen(s));
}

int al_buf_vprintf(struct al_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return -EINVAL;
    int rc = al_buf_reserve(b, (size_t)n);
    if (rc)
        return rc;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int al_buf_printf(struct al_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = al_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void al_buf_consume(struct al_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
    }
    if (b->data)
        b->data[b->len] = '\0';
}

void al_buf_reset(struct al_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void al_buf_free(struct al_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void al_buf_free_wipe(struct al_buf *b)
{
    if (b->data)
        sodium_memzero(b->data, b->cap);
    al_buf_free(b);
}

char *al_buf_steal(struct al_buf *b, size_t *len)
{
    char *d = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return d;
}
