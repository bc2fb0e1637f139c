/* vmm/guest/ndjson: see ndjson.h. */
#include "ndjson.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int agent_ndjson_append(struct al_buf *out, const json_t *obj)
{
    if (!json_is_object(obj))
        return -EINVAL;
    char *s = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!s)
        return -ENOMEM;
    size_t before = out->len;
    int r = al_buf_appends(out, s);
    if (r == 0)
        r = al_buf_append(out, "\n", 1);
    if (r < 0) {
        out->len = before;
        if (out->data)
            out->data[out->len] = '\0';
    }
    free(s);
    return r;
}

/* Length of a valid UTF-8 sequence starting at p (1..4), 0 if invalid, -1 if it may be
 * valid but is cut off by the end of the buffer. */
static int ndjson__seq(const unsigned char *p, size_t avail)
{
    unsigned c = p[0];
    int n;
    uint32_t min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    uint32_t cp = c & (0xff >> (n + 1));
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= avail)
            return -1;
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
        /* reject overlongs/surrogates/out-of-range as early as the second byte allows */
        if (i == 1 &&
            ((n == 3 && c == 0xe0 && p[1] < 0xa0) || (n == 3 && c == 0xed && p[1] > 0x9f) ||
             (n == 4 && c == 0xf0 && p[1] < 0x90) || (n == 4 && c == 0xf4 && p[1] > 0x8f)))
            return 0;
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

size_t agent_utf8_complete_prefix(const char *buf, size_t len)
{
    /* Only the last 3 bytes can start a cut-off sequence. */
    size_t start = len > 3 ? len - 3 : 0;
    for (size_t i = start; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c >= 0xc2 && c <= 0xf4 && ndjson__seq((const unsigned char *)buf + i, len - i) == -1)
            return i;
    }
    return len;
}

int agent_utf8_sanitize(const char *in, size_t len, struct al_buf *out)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t i = 0, run = 0;
    while (i < len) {
        int n = ndjson__seq(p + i, len - i);
        if (n > 0) {
            i += (size_t)n;
            continue;
        }
        if (i > run && al_buf_append(out, in + run, i - run) < 0)
            return -E2BIG;
        if (al_buf_append(out, "\xef\xbf\xbd", 3) < 0)
            return -E2BIG;
        i++;
        run = i;
    }
    if (i > run && al_buf_append(out, in + run, i - run) < 0)
        return -E2BIG;
    return 0;
}
