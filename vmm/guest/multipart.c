/* vmm/guest/multipart: see multipart.h.
 *
 * The body is scanned through a window. The window starts with a virtual "\r\n" so that the
 * first delimiter ("--boundary" at the very start of the body) matches the same
 * "\r\n--boundary" pattern as every later one. In the body state everything except the last
 * delim_len-1 bytes (which could be the start of a delimiter) is handed out at once.
 */
#include "multipart.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/percent.h"

static int mp__fail(struct agent_mp *mp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int mp__fail(struct agent_mp *mp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mp->err, sizeof mp->err, fmt, ap);
    va_end(ap);
    mp->state = AGENT_MP_FAILED;
    return -EPROTO;
}

/* Copies one parameter value (quoted or token) starting at p into out; returns the end. */
static const char *mp__param_value(const char *p, char *out, size_t outlen, int *rc)
{
    size_t o = 0;
    *rc = 0;
    if (*p == '"') {
        p++;
        while (*p && *p != '"') {
            char c = *p++;
            if (c == '\\' && *p)
                c = *p++;
            if (o + 1 >= outlen) {
                *rc = -E2BIG;
            } else {
                out[o++] = c;
            }
        }
        if (*p != '"')
            *rc = -EINVAL;
        else
            p++;
    } else {
        while (*p && *p != ';' && *p != ' ' && *p != '\t') {
            if (o + 1 >= outlen)
                *rc = -E2BIG;
            else
                out[o++] = *p;
            p++;
        }
    }
    if (outlen)
        out[o] = '\0';
    return p;
}

/* RFC 5987 ext-value: charset'lang'percent-encoded. Only UTF-8 (and US-ASCII) accepted. */
static int mp__ext_value(const char *in, char *out, size_t outlen)
{
    const char *q1 = strchr(in, '\'');
    const char *q2 = q1 ? strchr(q1 + 1, '\'') : NULL;
    if (!q1 || !q2)
        return -EINVAL;
    size_t cl = (size_t)(q1 - in);
    if (!((cl == 5 && strncasecmp(in, "utf-8", 5) == 0) ||
          (cl == 8 && strncasecmp(in, "us-ascii", 8) == 0)))
        return -EINVAL;
    const char *v = q2 + 1;
    ssize_t n = al_percent_decode(v, strlen(v), out, outlen, 0);
    return n < 0 ? (int)n : 0;
}

int agent_mp_header_param(const char *value, const char *param, char *out, size_t outlen)
{
    const char *p = strchr(value, ';');
    size_t plen = strlen(param);
    int found = -ENOENT;
    while (p && *p) {
        p++; /* past ';' */
        while (*p == ' ' || *p == '\t')
            p++;
        const char *key = p;
        while (*p && *p != '=' && *p != ';')
            p++;
        size_t klen = (size_t)(p - key);
        while (klen && (key[klen - 1] == ' ' || key[klen - 1] == '\t'))
            klen--;
        if (*p != '=') {
            p = strchr(p, ';');
            continue;
        }
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        char tmp[4096];
        int rc;
        p = mp__param_value(p, tmp, sizeof tmp, &rc);
        if (klen == plen && strncasecmp(key, param, plen) == 0 && found != 0) {
            if (rc < 0)
                return rc;
            if (strlen(tmp) + 1 > outlen)
                return -E2BIG;
            memcpy(out, tmp, strlen(tmp) + 1);
            found = 0;
        }
        p = strchr(p, ';');
    }
    return found;
}

int agent_mp_init(struct agent_mp *mp, const char *content_type,
                  const struct agent_mp_callbacks *cb, void *ctx)
{
    memset(mp, 0, sizeof *mp);
    mp->cb = cb;
    mp->ctx = ctx;
    mp->state = AGENT_MP_FAILED;
    if (!content_type || strncasecmp(content_type, "multipart/", 10) != 0) {
        snprintf(mp->err, sizeof mp->err, "Content-Type '%.64s' is not multipart/form-data",
                 content_type ? content_type : "");
        return -EINVAL;
    }
    char boundary[AGENT_MP_MAX_BOUNDARY + 2];
    int r = agent_mp_header_param(content_type, "boundary", boundary, sizeof boundary);
    size_t bl = r == 0 ? strlen(boundary) : 0;
    if (r < 0 || bl == 0 || bl > AGENT_MP_MAX_BOUNDARY) {
        snprintf(mp->err, sizeof mp->err,
                 "the multipart Content-Type needs a boundary parameter of 1 to 70 characters");
        return -EINVAL;
    }
    for (size_t i = 0; i < bl; i++) {
        if ((unsigned char)boundary[i] < 0x20 || boundary[i] == 0x7f) {
            snprintf(mp->err, sizeof mp->err, "the multipart boundary contains control characters");
            return -EINVAL;
        }
    }
    memcpy(mp->delim, "\r\n--", 4);
    memcpy(mp->delim + 4, boundary, bl);
    mp->delim_len = bl + 4;
    mp->win = malloc(AGENT_MP_WINDOW + mp->delim_len);
    if (!mp->win)
        return -ENOMEM;
    mp->win[0] = '\r';
    mp->win[1] = '\n';
    mp->win_len = 2;
    mp->state = AGENT_MP_PREAMBLE;
    return 0;
}

void agent_mp_free(struct agent_mp *mp)
{
    free(mp->win);
    mp->win = NULL;
}

static void mp__consume(struct agent_mp *mp, size_t n)
{
    memmove(mp->win, mp->win + n, mp->win_len - n);
    mp->win_len -= n;
}

static int mp__header_line(struct agent_mp *mp, char *line)
{
    char *colon = strchr(line, ':');
    if (!colon || colon == line)
        return mp__fail(mp, "malformed multipart part header (expected 'Name: value')");
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t vl = strlen(v);
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        v[--vl] = '\0';
    if (strcasecmp(line, "Content-Disposition") == 0) {
        if (strncasecmp(v, "form-data", 9) != 0 || (v[9] && v[9] != ';' && v[9] != ' '))
            return mp__fail(mp, "a multipart part's Content-Disposition must be form-data");
        int r = agent_mp_header_param(v, "name", mp->part.name, sizeof mp->part.name);
        if (r == -E2BIG || r == -EINVAL)
            return mp__fail(mp, "the form field name of a multipart part is malformed or too long");
        char ext[4096];
        r = agent_mp_header_param(v, "filename*", ext, sizeof ext);
        if (r == 0) {
            if (mp__ext_value(ext, mp->part.filename, sizeof mp->part.filename) < 0)
                return mp__fail(mp, "the filename* parameter of a multipart part is malformed "
                                    "(expected UTF-8''percent-encoded)");
            mp->part.has_filename = true;
        } else {
            r = agent_mp_header_param(v, "filename", mp->part.filename, sizeof mp->part.filename);
            if (r == -E2BIG)
                return mp__fail(mp, "the filename of a multipart part is longer than 4095 bytes");
            if (r == -EINVAL)
                return mp__fail(mp, "the filename of a multipart part is malformed");
            mp->part.has_filename = r == 0;
        }
    } else if (strcasecmp(line, "Content-Type") == 0) {
        snprintf(mp->part.content_type, sizeof mp->part.content_type, "%s", v);
    }
    return 0;
}

/* Runs the state machine over the window until it needs more input. */
static int mp__process(struct agent_mp *mp, bool at_end)
{
    for (;;) {
        switch (mp->state) {
        case AGENT_MP_PREAMBLE: {
            char *m = memmem(mp->win, mp->win_len, mp->delim, mp->delim_len);
            if (m) {
                mp__consume(mp, (size_t)(m - mp->win) + mp->delim_len);
                mp->state = AGENT_MP_AFTER_DELIM;
                continue;
            }
            if (mp->win_len >= mp->delim_len)
                mp__consume(mp, mp->win_len - (mp->delim_len - 1));
            return 0;
        }
        case AGENT_MP_AFTER_DELIM: {
            if (mp->win_len >= 2 && mp->win[0] == '-' && mp->win[1] == '-') {
                mp->state = AGENT_MP_DONE;
                mp->win_len = 0;
                return 0;
            }
            size_t i = 0;
            while (i < mp->win_len && (mp->win[i] == ' ' || mp->win[i] == '\t'))
                i++;
            if (i + 2 > mp->win_len) {
                if (i > 256)
                    return mp__fail(mp, "too much padding after a multipart boundary");
                return 0;
            }
            if (mp->win[i] != '\r' || mp->win[i + 1] != '\n')
                return mp__fail(mp, "a multipart boundary must be followed by CRLF or '--'");
            mp__consume(mp, i + 2);
            if (++mp->parts > AGENT_MP_MAX_PARTS)
                return mp__fail(mp, "more than %d parts in one multipart body", AGENT_MP_MAX_PARTS);
            memset(&mp->part, 0, sizeof mp->part);
            mp->header_bytes = 0;
            mp->state = AGENT_MP_HEADERS;
            continue;
        }
        case AGENT_MP_HEADERS: {
            char *crlf = memmem(mp->win, mp->win_len, "\r\n", 2);
            if (!crlf) {
                if (mp->win_len + mp->header_bytes > AGENT_MP_MAX_HEADER)
                    return mp__fail(mp, "multipart part headers exceed %d bytes",
                                    AGENT_MP_MAX_HEADER);
                return 0;
            }
            size_t ll = (size_t)(crlf - mp->win);
            mp->header_bytes += ll + 2;
            if (mp->header_bytes > AGENT_MP_MAX_HEADER)
                return mp__fail(mp, "multipart part headers exceed %d bytes", AGENT_MP_MAX_HEADER);
            if (ll == 0) {
                mp__consume(mp, 2);
                if (!mp->part.name[0] && !mp->part.has_filename)
                    return mp__fail(mp, "a multipart part lacks Content-Disposition: form-data; "
                                        "name=...");
                mp->state = AGENT_MP_BODY;
                if (mp->cb && mp->cb->on_part_begin) {
                    int r = mp->cb->on_part_begin(mp->ctx, &mp->part);
                    if (r)
                        return r;
                }
                continue;
            }
            if (memchr(mp->win, '\0', ll))
                return mp__fail(mp, "a multipart part header contains a NUL byte");
            char line[AGENT_MP_MAX_HEADER + 1];
            memcpy(line, mp->win, ll);
            line[ll] = '\0';
            mp__consume(mp, ll + 2);
            int r = mp__header_line(mp, line);
            if (r)
                return r;
            continue;
        }
        case AGENT_MP_BODY: {
            char *m = memmem(mp->win, mp->win_len, mp->delim, mp->delim_len);
            if (m) {
                size_t n = (size_t)(m - mp->win);
                /* Like Go's reader: "\r\n--boundary" is a delimiter only when "--", blanks
                 * or a line end follow; otherwise it is part of the data. */
                if (n + mp->delim_len >= mp->win_len)
                    return 0; /* need one more byte to decide */
                char next = mp->win[n + mp->delim_len];
                if (next != '-' && next != ' ' && next != '\t' && next != '\r' && next != '\n') {
                    if (mp->cb && mp->cb->on_part_data) {
                        int r = mp->cb->on_part_data(mp->ctx, mp->win, n + 1);
                        if (r)
                            return r;
                    }
                    mp__consume(mp, n + 1);
                    continue;
                }
                if (n && mp->cb && mp->cb->on_part_data) {
                    int r = mp->cb->on_part_data(mp->ctx, mp->win, n);
                    if (r)
                        return r;
                }
                mp__consume(mp, n + mp->delim_len);
                mp->state = AGENT_MP_AFTER_DELIM;
                if (mp->cb && mp->cb->on_part_end) {
                    int r = mp->cb->on_part_end(mp->ctx);
                    if (r)
                        return r;
                }
                continue;
            }
            if (mp->win_len >= mp->delim_len) {
                size_t n = mp->win_len - (mp->delim_len - 1);
                if (mp->cb && mp->cb->on_part_data) {
                    int r = mp->cb->on_part_data(mp->ctx, mp->win, n);
                    if (r)
                        return r;
                }
                mp__consume(mp, n);
            }
            (void)at_end;
            return 0;
        }
        case AGENT_MP_DONE:
            mp->win_len = 0;
            return 0;
        case AGENT_MP_FAILED:
            return -EPROTO;
        }
    }
}

int agent_mp_feed(struct agent_mp *mp, const char *data, size_t len)
{
    if (mp->state == AGENT_MP_FAILED)
        return -EPROTO;
    size_t cap = AGENT_MP_WINDOW + mp->delim_len;
    while (len > 0) {
        if (mp->state == AGENT_MP_DONE)
            return 0; /* epilogue is ignored */
        size_t take = cap - mp->win_len;
        if (take > len)
            take = len;
        if (take == 0)
            return mp__fail(mp, "multipart parser window overflow");
        memcpy(mp->win + mp->win_len, data, take);
        mp->win_len += take;
        data += take;
        len -= take;
        int r = mp__process(mp, false);
        if (r)
            return r;
        if (mp->state == AGENT_MP_HEADERS && mp->win_len == cap)
            return mp__fail(mp, "multipart part headers exceed %d bytes", AGENT_MP_MAX_HEADER);
    }
    return 0;
}

int agent_mp_finish(struct agent_mp *mp)
{
    if (mp->state == AGENT_MP_DONE)
        return 0;
    if (mp->state == AGENT_MP_FAILED)
        return -EPROTO;
    return mp__fail(mp, "the multipart body ended before its closing boundary (--%.*s--)",
                    (int)(mp->delim_len - 4), mp->delim + 4);
}
