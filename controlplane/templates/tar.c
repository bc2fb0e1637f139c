/* controlplane/templates/tar: see tar.h. */
#include "tar.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAR_BUF (64 * 1024)

struct tpl_tar {
    tpl_tar_read_fn rd;
    void *arg;
    uint32_t max_path;
    unsigned char *buf;
    size_t buf_len, buf_off;
    bool eof;
    uint64_t left; /* data bytes of the current entry not yet read */
    uint64_t pad;  /* padding after them */
    uint64_t count;
    struct tpl_tar_entry e;
    /* pending from pax 'x' / GNU 'L' 'K' for the next entry */
    char *pax_path, *pax_link, *long_name, *long_link;
    bool has_size, has_uid, has_gid, has_mtime;
    uint64_t pax_size, pax_uid, pax_gid;
    int64_t pax_mtime;
    uint32_t pax_mtime_nsec;
    struct tpl_tar_xattr pax_x[TPL_TAR_MAX_XATTR];
    size_t n_pax_x;
    bool done;
    char err[512];
};

static int tar__fail(struct tpl_tar *t, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tar__fail(struct tpl_tar *t, int rc, const char *fmt, ...)
{
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    snprintf(t->err, sizeof t->err, "tar entry %llu: %s", (unsigned long long)t->count + 1, m);
    t->done = true;
    return rc;
}

/* ---- input ------------------------------------------------------------------------- */

/* Makes up to want bytes available at t->buf + t->buf_off; returns how many are. */
static ssize_t tar__fill(struct tpl_tar *t, size_t want)
{
    if (want > TAR_BUF)
        want = TAR_BUF;
    if (t->buf_len - t->buf_off >= want)
        return (ssize_t)(t->buf_len - t->buf_off);
    if (t->buf_off) {
        memmove(t->buf, t->buf + t->buf_off, t->buf_len - t->buf_off);
        t->buf_len -= t->buf_off;
        t->buf_off = 0;
    }
    while (!t->eof && t->buf_len < want) {
        ssize_t n = t->rd(t->arg, t->buf + t->buf_len, TAR_BUF - t->buf_len);
        if (n < 0)
            return n;
        if (n == 0)
            t->eof = true;
        t->buf_len += (size_t)n;
    }
    return (ssize_t)(t->buf_len - t->buf_off);
}

/* Exactly len bytes, or -EPIPE (the archive ends early). */
static int tar__read_exact(struct tpl_tar *t, void *out, size_t len)
{
    unsigned char *o = out;
    while (len) {
        ssize_t n = tar__fill(t, len);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return -EPIPE;
        size_t k = (size_t)n < len ? (size_t)n : len;
        memcpy(o, t->buf + t->buf_off, k);
        t->buf_off += k;
        o += k;
        len -= k;
    }
    return 0;
}

static int tar__skip(struct tpl_tar *t, uint64_t len)
{
    while (len) {
        ssize_t n = tar__fill(t, len > TAR_BUF ? TAR_BUF : (size_t)len);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return -EPIPE;
        size_t k = (uint64_t)n < len ? (size_t)n : (size_t)len;
        t->buf_off += k;
        len -= k;
    }
    return 0;
}

/* ---- numbers ------------------------------------------------------------------------ */

/* Octal (NUL/space terminated, leading spaces) or GNU base-256. */
static int tar__num(const unsigned char *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80) /* negative or too large for what we accept */
            return -ERANGE;
        for (size_t i = 1; i < n; i++) {
            if (v >> 56)
                return -ERANGE;
            v = (v << 8) | f[i];
        }
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v >> 60)
            return -ERANGE;
        v = (v << 3) | (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -EINVAL;
    *out = v;
    return 0;
}

static bool tar__zero_block(const unsigned char *b)
{
    for (size_t i = 0; i < TPL_TAR_BLOCK; i++)
        if (b[i])
            return false;
    return true;
}

static bool tar__checksum_ok(const unsigned char *b)
{
    uint64_t want;
    if (tar__num(b + 148, 8, &want) < 0)
        return false;
    uint64_t u = 0;
    int64_t s = 0;
    for (size_t i = 0; i < TPL_TAR_BLOCK; i++) {
        unsigned char c = (i >= 148 && i < 156) ? ' ' : b[i];
        u += c;
        s += (signed char)c;
    }
    return u == want || (uint64_t)s == want;
}

/* ---- strings ------------------------------------------------------------------------ */

static char *tar__strndup_field(const unsigned char *f, size_t n)
{
    size_t l = 0;
    while (l < n && f[l])
        l++;
    char *s = malloc(l + 1);
    if (s) {
        memcpy(s, f, l);
        s[l] = '\0';
    }
    return s;
}

static void tar__xattrs_free(struct tpl_tar_xattr *x, size_t *n)
{
    for (size_t i = 0; i < *n; i++) {
        free(x[i].name);
        free(x[i].value);
    }
    *n = 0;
}

static void tar__pending_free(struct tpl_tar *t)
{
    free(t->pax_path);
    free(t->pax_link);
    free(t->long_name);
    free(t->long_link);
    t->pax_path = t->pax_link = t->long_name = t->long_link = NULL;
    t->has_size = t->has_uid = t->has_gid = t->has_mtime = false;
    tar__xattrs_free(t->pax_x, &t->n_pax_x);
}

static void tar__entry_free(struct tpl_tar *t)
{
    free(t->e.path);
    free(t->e.link);
    tar__xattrs_free(t->e.xattrs, &t->e.n_xattrs);
    memset(&t->e, 0, sizeof t->e);
}

/* ---- pax ---------------------------------------------------------------------------- */

static int tar__pax_u64(const char *v, size_t n, uint64_t *out)
{
    if (n == 0 || n > 20)
        return -EINVAL;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9' || x > (UINT64_MAX - 9) / 10)
            return -EINVAL;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    *out = x;
    return 0;
}

static int tar__pax_record(struct tpl_tar *t, bool global, const char *k, size_t kl, const char *v,
                           size_t vl)
{
#define KEY(s) (kl == sizeof(s) - 1 && memcmp(k, s, kl) == 0)
    if (kl >= 11 && memcmp(k, "GNU.sparse.", 11) == 0)
        return tar__fail(t, -ENOTSUP, "sparse files (GNU.sparse) are not supported");
    if (global)
        return 0; /* global headers change nothing we use */
    bool has_nul = memchr(v, '\0', vl) != NULL;
    if (KEY("path") || KEY("linkpath")) {
        if (has_nul)
            return tar__fail(t, -EINVAL, "a pax %.*s with a NUL byte", (int)kl, k);
        if (vl > t->max_path)
            return tar__fail(t, -ENAMETOOLONG, "a pax %.*s of %zu bytes (at most %u)", (int)kl, k,
                             vl, t->max_path);
        char *s = strndup(v, vl);
        if (!s)
            return -ENOMEM;
        char **dst = KEY("path") ? &t->pax_path : &t->pax_link;
        free(*dst);
        *dst = s;
        return 0;
    }
    if (KEY("size")) {
        if (tar__pax_u64(v, vl, &t->pax_size) < 0)
            return tar__fail(t, -EINVAL, "a bad pax size");
        t->has_size = true;
        return 0;
    }
    if (KEY("uid") || KEY("gid")) {
        uint64_t x;
        if (tar__pax_u64(v, vl, &x) < 0)
            return tar__fail(t, -EINVAL, "a bad pax %.*s", (int)kl, k);
        if (KEY("uid")) {
            t->pax_uid = x;
            t->has_uid = true;
        } else {
            t->pax_gid = x;
            t->has_gid = true;
        }
        return 0;
    }
    if (KEY("mtime")) {
        const char *dot = memchr(v, '.', vl);
        size_t il = dot ? (size_t)(dot - v) : vl;
        bool neg = il > 0 && v[0] == '-';
        uint64_t s;
        if (tar__pax_u64(v + neg, il - neg, &s) < 0 || s > INT64_MAX)
            return tar__fail(t, -EINVAL, "a bad pax mtime");
        t->pax_mtime = neg ? -(int64_t)s : (int64_t)s;
        t->pax_mtime_nsec = 0;
        if (dot) {
            uint32_t ns = 0, digits = 0;
            for (const char *p = dot + 1; p < v + vl; p++) {
                if (*p < '0' || *p > '9')
                    return tar__fail(t, -EINVAL, "a bad pax mtime");
                if (digits < 9) {
                    ns = ns * 10 + (uint32_t)(*p - '0');
                    digits++;
                }
            }
            while (digits++ < 9)
                ns *= 10;
            t->pax_mtime_nsec = neg ? 0 : ns;
        }
        t->has_mtime = true;
        return 0;
    }
    if (kl > 13 && memcmp(k, "SCHILY.xattr.", 13) == 0) {
        if (t->n_pax_x >= TPL_TAR_MAX_XATTR)
            return tar__fail(t, -E2BIG, "more than %d extended attributes", TPL_TAR_MAX_XATTR);
        if (kl - 13 > 255 || vl > 65536)
            return tar__fail(t, -E2BIG, "an extended attribute name or value too long");
        struct tpl_tar_xattr *x = &t->pax_x[t->n_pax_x];
        x->name = strndup(k + 13, kl - 13);
        x->value = malloc(vl ? vl : 1);
        if (!x->name || !x->value) {
            free(x->name);
            free(x->value);
            return -ENOMEM;
        }
        if (memchr(x->name, '\0', kl - 13) || strlen(x->name) != kl - 13) {
            free(x->name);
            free(x->value);
            return tar__fail(t, -EINVAL, "an extended attribute name with a NUL byte");
        }
        memcpy(x->value, v, vl);
        x->len = vl;
        t->n_pax_x++;
        return 0;
    }
    return 0; /* atime, ctime, uname, gname, comment, charset, ...: not used */
#undef KEY
}

/* "%d %s=%s\n" records. */
static int tar__pax_parse(struct tpl_tar *t, bool global, const char *d, size_t n)
{
    size_t off = 0;
    while (off < n) {
        if (d[off] == '\0') /* padding some writers leave */
            break;
        size_t i = off, len = 0;
        while (i < n && d[i] >= '0' && d[i] <= '9' && len <= n) {
            len = len * 10 + (size_t)(d[i] - '0');
            i++;
        }
        if (i == off || i >= n || d[i] != ' ' || len < 5 || len > n - off)
            return tar__fail(t, -EINVAL, "a malformed pax record");
        const char *rec = d + i + 1, *end = d + off + len;
        if (end[-1] != '\n')
            return tar__fail(t, -EINVAL, "a pax record not ending in a newline");
        const char *eq = memchr(rec, '=', (size_t)(end - 1 - rec));
        if (!eq || eq == rec)
            return tar__fail(t, -EINVAL, "a pax record without key=value");
        int rc = tar__pax_record(t, global, rec, (size_t)(eq - rec), eq + 1,
                                 (size_t)(end - 1 - (eq + 1)));
        if (rc < 0)
            return rc;
        off += len;
    }
    return 0;
}

/* ---- entries ------------------------------------------------------------------------ */

int tpl_tar_open(tpl_tar_read_fn rd, void *arg, uint32_t max_path, struct tpl_tar **out)
{
    *out = NULL;
    struct tpl_tar *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->buf = malloc(TAR_BUF);
    if (!t->buf) {
        free(t);
        return -ENOMEM;
    }
    t->rd = rd;
    t->arg = arg;
    t->max_path = max_path ? max_path : 4096;
    *out = t;
    return 0;
}

void tpl_tar_free(struct tpl_tar *t)
{
    if (!t)
        return;
    tar__entry_free(t);
    tar__pending_free(t);
    free(t->buf);
    free(t);
}

const char *tpl_tar_error(const struct tpl_tar *t)
{
    return t->err[0] ? t->err : "no error";
}

uint64_t tpl_tar_count(const struct tpl_tar *t)
{
    return t->count;
}

/* Reads a meta entry's data (pax, long name) of size bytes into a new buffer. */
static int tar__meta_data(struct tpl_tar *t, uint64_t size, size_t max, const char *what,
                          char **out)
{
    if (size > max)
        return tar__fail(t, -E2BIG, "a %s of %llu bytes (at most %zu)", what,
                         (unsigned long long)size, max);
    char *d = malloc((size_t)size + 1);
    if (!d)
        return -ENOMEM;
    int rc = tar__read_exact(t, d, (size_t)size);
    if (rc == 0)
        rc = tar__skip(t, (TPL_TAR_BLOCK - size % TPL_TAR_BLOCK) % TPL_TAR_BLOCK);
    if (rc < 0) {
        free(d);
        return rc == -EPIPE ? tar__fail(t, -EPIPE, "the archive ends inside a %s", what)
                            : tar__fail(t, rc, "reading a %s: %s", what, strerror(-rc));
    }
    d[size] = '\0';
    *out = d;
    return 0;
}

int tpl_tar_next(struct tpl_tar *t, const struct tpl_tar_entry **out)
{
    *out = NULL;
    if (t->done)
        return t->err[0] ? -EINVAL : 0;
    int rc = tar__skip(t, t->left + t->pad);
    if (rc < 0)
        return rc == -EPIPE ? tar__fail(t, -EPIPE, "the archive ends inside an entry's data")
                            : tar__fail(t, rc, "read: %s", strerror(-rc));
    t->left = t->pad = 0;
    tar__entry_free(t);
    for (;;) {
        unsigned char h[TPL_TAR_BLOCK];
        ssize_t avail = tar__fill(t, TPL_TAR_BLOCK);
        if (avail < 0)
            return tar__fail(t, (int)avail, "read: %s", strerror((int)-avail));
        if (avail == 0) {
            /* No end-of-archive blocks: accepted (some writers omit them) unless a pax or
             * long-name header promised an entry. */
            t->done = true;
            if (t->pax_path || t->long_name || t->has_size)
                return tar__fail(t, -EPIPE, "the archive ends after an extended header");
            return 0;
        }
        if ((rc = tar__read_exact(t, h, TPL_TAR_BLOCK)) < 0)
            return tar__fail(t, -EPIPE, "the archive ends inside a header");
        if (tar__zero_block(h)) {
            t->done = true;
            if (t->pax_path || t->long_name || t->has_size)
                return tar__fail(t, -EPIPE, "the archive ends after an extended header");
            return 0;
        }
        if (!tar__checksum_ok(h))
            return tar__fail(t, -EBADMSG, "bad header checksum (not a tar archive, or damaged)");
        bool ustar = memcmp(h + 257, "ustar", 5) == 0;
        bool gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
        uint64_t size, mode, uid, gid, mtime, dmaj = 0, dmin = 0;
        if (tar__num(h + 124, 12, &size) < 0 || tar__num(h + 100, 8, &mode) < 0 ||
            tar__num(h + 108, 8, &uid) < 0 || tar__num(h + 116, 8, &gid) < 0 ||
            tar__num(h + 136, 12, &mtime) < 0)
            return tar__fail(t, -EBADMSG, "a malformed number in the header");
        if (ustar && (tar__num(h + 329, 8, &dmaj) < 0 || tar__num(h + 337, 8, &dmin) < 0))
            return tar__fail(t, -EBADMSG, "a malformed device number in the header");
        char type = (char)h[156];
        if (type == 'x' || type == 'g') {
            char *d;
            if ((rc = tar__meta_data(t, size, TPL_TAR_MAX_PAX, "pax header", &d)) < 0)
                return rc;
            rc = tar__pax_parse(t, type == 'g', d, (size_t)size);
            free(d);
            if (rc < 0)
                return rc;
            continue;
        }
        if (type == 'L' || type == 'K') {
            char *d;
            if ((rc = tar__meta_data(t, size, t->max_path + 1, "GNU long name", &d)) < 0)
                return rc;
            d[strnlen(d, (size_t)size)] = '\0';
            char **dst = type == 'L' ? &t->long_name : &t->long_link;
            free(*dst);
            *dst = d;
            continue;
        }
        struct tpl_tar_entry *e = &t->e;
        switch (type) {
        case '0':
        case '\0':
        case '7':
            e->type = TPL_TAR_REG;
            break;
        case '1':
            e->type = TPL_TAR_HARDLINK;
            break;
        case '2':
            e->type = TPL_TAR_SYMLINK;
            break;
        case '3':
            e->type = TPL_TAR_CHR;
            break;
        case '4':
            e->type = TPL_TAR_BLK;
            break;
        case '5':
            e->type = TPL_TAR_DIR;
            break;
        case '6':
            e->type = TPL_TAR_FIFO;
            break;
        case 'S':
            return tar__fail(t, -ENOTSUP, "GNU sparse files are not supported");
        default:
            return tar__fail(t, -ENOTSUP, "unsupported entry type '%c' (0x%02x)",
                             type >= 0x20 && type < 0x7f ? type : '?', (unsigned char)type);
        }
        /* The name: pax, GNU long name, or prefix + name. */
        if (t->pax_path) {
            e->path = t->pax_path;
            t->pax_path = NULL;
        } else if (t->long_name) {
            e->path = t->long_name;
            t->long_name = NULL;
        } else {
            char name[257];
            size_t nl = strnlen((const char *)h, 100), pl = 0;
            if (ustar && !gnu)
                pl = strnlen((const char *)h + 345, 155);
            if (pl) {
                memcpy(name, h + 345, pl);
                name[pl] = '/';
                memcpy(name + pl + 1, h, nl);
                name[pl + 1 + nl] = '\0';
            } else {
                memcpy(name, h, nl);
                name[nl] = '\0';
            }
            e->path = strdup(name);
        }
        if (t->pax_link) {
            e->link = t->pax_link;
            t->pax_link = NULL;
        } else if (t->long_link) {
            e->link = t->long_link;
            t->long_link = NULL;
        } else {
            e->link = tar__strndup_field(h + 157, 100);
        }
        if (!e->path || !e->link) {
            tar__pending_free(t);
            return -ENOMEM;
        }
        if (strlen(e->path) > t->max_path || strlen(e->link) > t->max_path) {
            tar__pending_free(t);
            return tar__fail(t, -ENAMETOOLONG, "a path or link target longer than %u bytes",
                             t->max_path);
        }
        if (!e->path[0]) {
            tar__pending_free(t);
            return tar__fail(t, -EINVAL, "an entry without a name");
        }
        e->mode = (uint32_t)(mode & 07777);
        e->uid = t->has_uid ? t->pax_uid : uid;
        e->gid = t->has_gid ? t->pax_gid : gid;
        if (t->has_mtime) {
            e->mtime = t->pax_mtime;
            e->mtime_nsec = t->pax_mtime_nsec;
        } else {
            e->mtime = (int64_t)(mtime > INT64_MAX ? INT64_MAX : mtime);
        }
        e->devmajor = (uint32_t)dmaj;
        e->devminor = (uint32_t)dmin;
        uint64_t data = t->has_size ? t->pax_size : size;
        memcpy(e->xattrs, t->pax_x, sizeof t->pax_x);
        e->n_xattrs = t->n_pax_x;
        t->n_pax_x = 0;
        tar__pending_free(t);
        if (data > (UINT64_MAX >> 2))
            return tar__fail(t, -EFBIG, "an entry of %llu bytes", (unsigned long long)data);
        /* Only regular files have data; other types' sizes are skipped (hard links of some
         * writers carry one). */
        e->size = e->type == TPL_TAR_REG ? data : 0;
        t->left = data;
        t->pad = (TPL_TAR_BLOCK - data % TPL_TAR_BLOCK) % TPL_TAR_BLOCK;
        if (e->type != TPL_TAR_REG) {
            t->pad += t->left;
            t->left = 0;
        }
        t->count++;
        *out = e;
        return 1;
    }
}

ssize_t tpl_tar_read(struct tpl_tar *t, void *buf, size_t len)
{
    if (t->left == 0)
        return 0;
    if (len > t->left)
        len = (size_t)t->left;
    ssize_t n = tar__fill(t, len);
    if (n < 0)
        return tar__fail(t, (int)n, "read: %s", strerror((int)-n));
    if (n == 0)
        return tar__fail(t, -EPIPE, "the archive ends inside the data of %s", t->e.path);
    size_t k = (size_t)n < len ? (size_t)n : len;
    memcpy(buf, t->buf + t->buf_off, k);
    t->buf_off += k;
    t->left -= k;
    return (ssize_t)k;
}

/* ---- paths -------------------------------------------------------------------------- */

int tpl_path_clean(const char *in, char *out, size_t outlen, size_t max, char *msg, size_t msglen)
{
    size_t il = strlen(in);
    if (il > max) {
        snprintf(msg, msglen, "the path is longer than %zu bytes", max);
        return -ENAMETOOLONG;
    }
    if (in[0] == '/') {
        snprintf(msg, msglen, "absolute path '%.200s' (layer paths are relative to the root)", in);
        return -EINVAL;
    }
    size_t o = 0;
    const char *p = in;
    while (*p) {
        const char *e = strchr(p, '/');
        size_t cl = e ? (size_t)(e - p) : strlen(p);
        if (cl == 0 || (cl == 1 && p[0] == '.')) {
            /* "a//b", "./a": nothing */
        } else if (cl == 2 && p[0] == '.' && p[1] == '.') {
            snprintf(msg, msglen, "the path '%.200s' has a '..' component", in);
            return -EINVAL;
        } else if (cl > 255) {
            snprintf(msg, msglen, "the path '%.100s...' has a component over 255 bytes", in);
            return -ENAMETOOLONG;
        } else {
            if (o + (o ? 1 : 0) + cl + 1 > outlen) {
                snprintf(msg, msglen, "the path is too long");
                return -ENAMETOOLONG;
            }
            if (o)
                out[o++] = '/';
            memcpy(out + o, p, cl);
            o += cl;
        }
        if (!e)
            break;
        p = e + 1;
    }
    out[o] = '\0';
    return 0;
}
