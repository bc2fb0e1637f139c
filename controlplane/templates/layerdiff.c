/* controlplane/templates/layerdiff: see layerdiff.h. */
#include "layerdiff.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/trust.h"
#include "common/util.h"
#include "internal.h"
#include "tar.h"

#define LD_MAX_DEPTH   256
#define LD_IDS         65536u
#define LD_XATTR_LIST  (64 * 1024)
#define LD_XATTR_VALUE (64 * 1024)
#define LD_LINKS_MAX   65536
#define LD_CHUNK       (1u << 20)

struct ld_link {
    dev_t dev;
    ino_t ino;
    char *path;
};

struct ld {
    int out;
    struct tpl_sha256 *h;
    uint32_t id_base;
    uint64_t max_entries, max_bytes;
    struct tpl_layer_diff_stats *st;
    struct al_error *err;
    struct ld_link *links;
    size_t n_links;
    char *buf; /* LD_CHUNK */
    size_t used;
};

static int ld__flush(struct ld *l)
{
    size_t off = 0;
    while (off < l->used) {
        ssize_t n = write(l->out, l->buf + off, l->used - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return al_error_set(l->err, -errno, "writing the layer: %s", strerror(errno));
        off += (size_t)n;
    }
    tpl_sha256_update(l->h, l->buf, l->used);
    l->used = 0;
    return 0;
}

static int ld__put(struct ld *l, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        size_t k = LD_CHUNK - l->used < len ? LD_CHUNK - l->used : len;
        memcpy(l->buf + l->used, p, k);
        l->used += k;
        p += k;
        len -= k;
        if (l->used == LD_CHUNK && ld__flush(l))
            return -1;
    }
    return 0;
}

static int ld__pad(struct ld *l, uint64_t size)
{
    static const char zero[TPL_TAR_BLOCK];
    size_t r = (size_t)(size % TPL_TAR_BLOCK);
    return r ? ld__put(l, zero, TPL_TAR_BLOCK - r) : 0;
}

/* One pax record ("LEN key=value\n", LEN counting itself). */
static int ld__pax_rec(struct al_buf *b, const char *key, const char *val, size_t vlen)
{
    size_t base = strlen(key) + vlen + 3, n = base + 1;
    while (n != base + (size_t)snprintf(NULL, 0, "%zu", n))
        n = base + (size_t)snprintf(NULL, 0, "%zu", n);
    if (al_buf_printf(b, "%zu %s=", n, key) < 0 || al_buf_append(b, val, vlen) < 0 ||
        al_buf_append(b, "\n", 1) < 0)
        return -1;
    return 0;
}

static void ld__octal(char *f, size_t w, uint64_t v)
{
    snprintf(f, w, "%0*llo", (int)(w - 1), (unsigned long long)v);
}

/* What a ustar header says of an entry (uid and gid as the layer has them). */
struct ld__hdr {
    char type;
    const char *name, *link; /* link: NULL but for links */
    uint32_t mode, uid, gid;
    uint64_t size;
    int64_t mtime;
};

/* A ustar header block; fields that do not fit are in the pax header before it. */
static int ld__header(struct ld *l, const struct ld__hdr *e)
{
    char h[TPL_TAR_BLOCK];
    memset(h, 0, sizeof h);
    snprintf(h, 100, "%.99s", e->name);
    ld__octal(h + 100, 8, e->mode);
    ld__octal(h + 108, 8, e->uid);
    ld__octal(h + 116, 8, e->gid);
    ld__octal(h + 124, 12, e->size < 077777777777ull ? e->size : 0);
    ld__octal(h + 136, 12, e->mtime > 0 && e->mtime < 077777777777ll ? (uint64_t)e->mtime : 0);
    memset(h + 148, ' ', 8);
    h[156] = e->type;
    if (e->link)
        snprintf(h + 157, 100, "%.99s", e->link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (size_t i = 0; i < sizeof h; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    return ld__put(l, h, sizeof h);
}

/* An entry of the layer: its type, name, link target (NULL but for links), the inode's
 * metadata, its data's size and an open descriptor for its attributes (-1: none). */
struct ld__item {
    char type;
    const char *name, *link;
    const struct stat *st;
    uint64_t size;
    int fd;
};

/* The pax records an entry needs (long name or link, a large size or time, attributes). */
static int ld__entry(struct ld *l, const struct ld__item *e)
{
    if (++l->st->entries > l->max_entries)
        return al_error_set(l->err, -EFBIG, "the step made more than %llu entries",
                            (unsigned long long)l->max_entries);
    uint64_t u = (uint64_t)e->st->st_uid - l->id_base, g = (uint64_t)e->st->st_gid - l->id_base;
    if (e->st->st_uid < l->id_base || e->st->st_gid < l->id_base || u >= LD_IDS || g >= LD_IDS)
        return al_error_set(l->err, -ERANGE,
                            "%s is owned by %u:%u, outside the build sandbox's ids: refused",
                            e->name, (unsigned)e->st->st_uid, (unsigned)e->st->st_gid);
    struct al_buf pax;
    al_buf_init(&pax, 4u << 20);
    int rc = 0;
    if (strlen(e->name) > 99)
        rc |= ld__pax_rec(&pax, "path", e->name, strlen(e->name));
    if (e->link && strlen(e->link) > 99)
        rc |= ld__pax_rec(&pax, "linkpath", e->link, strlen(e->link));
    if (e->size >= 077777777777ull) {
        char n[24];
        snprintf(n, sizeof n, "%llu", (unsigned long long)e->size);
        rc |= ld__pax_rec(&pax, "size", n, strlen(n));
    }
    if (e->fd >= 0) {
        char *list = malloc(LD_XATTR_LIST), *val = malloc(LD_XATTR_VALUE);
        ssize_t n = list ? flistxattr(e->fd, list, LD_XATTR_LIST) : -1;
        for (ssize_t i = 0; list && val && n > 0 && i < n; i += (ssize_t)strlen(list + i) + 1) {
            const char *k = list + i;
            /* overlayfs' own bookkeeping is the upper layer's, not the step's */
            if (strncmp(k, "user.", 5) != 0 || strncmp(k, "user.overlay.", 13) == 0)
                continue;
            ssize_t vl = fgetxattr(e->fd, k, val, LD_XATTR_VALUE);
            if (vl < 0)
                continue;
            char key[300];
            snprintf(key, sizeof key, "SCHILY.xattr.%s", k);
            rc |= ld__pax_rec(&pax, key, val, (size_t)vl);
        }
        free(list);
        free(val);
    }
    if (rc) {
        al_buf_free(&pax);
        return al_error_set(l->err, -E2BIG, "%s: its names and attributes are too large", e->name);
    }
    if (pax.len) {
        char pn[100];
        snprintf(pn, sizeof pn, "PaxHeaders/%.80s", e->name);
        if (ld__header(l, &(struct ld__hdr){'x', pn, NULL, 0644, 0, 0, pax.len, 0}) ||
            ld__put(l, pax.data, pax.len) || ld__pad(l, pax.len)) {
            al_buf_free(&pax);
            return -1;
        }
    }
    al_buf_free(&pax);
    return ld__header(l, &(struct ld__hdr){e->type, e->name, e->link,
                                           (uint32_t)(e->st->st_mode & 07777), (uint32_t)u,
                                           (uint32_t)g, e->size, (int64_t)e->st->st_mtim.tv_sec});
}

static int ld__data(struct ld *l, int fd, const char *name, uint64_t size)
{
    if (l->st->bytes + size > l->max_bytes)
        return al_error_set(l->err, -EFBIG, "the step's files are larger than %llu bytes",
                            (unsigned long long)l->max_bytes);
    uint64_t left = size;
    while (left) {
        if (l->used == LD_CHUNK && ld__flush(l))
            return -1;
        size_t want = LD_CHUNK - l->used < left ? LD_CHUNK - l->used : (size_t)left;
        ssize_t n = read(fd, l->buf + l->used, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return al_error_set(l->err, n < 0 ? -errno : -EIO, "reading %s: %s", name,
                                n < 0 ? strerror(errno) : "it became shorter");
        l->used += (size_t)n;
        left -= (uint64_t)n;
    }
    l->st->bytes += size;
    l->st->files++;
    return ld__pad(l, size);
}

/* Whether rel ("a/b/") is the directory of the sandbox CA the agent installs (trust.h). */
static bool ld__trust_dir(const char *rel)
{
    size_t n = strlen(AL_TRUST_CA_DIR) - 1; /* without its leading '/' */
    return strncmp(rel, &AL_TRUST_CA_DIR[1], n) == 0 && rel[n] == '/' && rel[n + 1] == '\0';
}

/* The system bundle as the step left it, without the build sandbox's CA block: the copy
 * the agent wrote it into is in the upper layer, but the CA is the build sandbox's (its
 * egress proxy's), never the template's. A bundle that was only that block (the image had
 * none) is left out. */
static int ld__bundle(struct ld *l, int fd, const char *path, const struct stat *st)
{
    char *data = NULL;
    size_t len = 0;
    struct al_error rerr = {0};
    if (al_read_fd(fd, path, 64u << 20, &data, &len, &rerr) < 0) {
        free(data);
        return al_error_set(l->err, rerr.code, "%s", al_error_str(&rerr));
    }
    struct al_buf out;
    al_buf_init(&out, 64u << 20);
    bool had = false;
    int rc = al_trust_bundle_strip(data, len, &out, &had);
    free(data);
    if (rc) {
        al_buf_free(&out);
        return al_error_set(l->err, -ENOMEM, "out of memory");
    }
    if (had && out.len == 0) {
        al_buf_free(&out);
        l->st->skipped++;
        return 0;
    }
    if (l->st->bytes + out.len > l->max_bytes) {
        al_buf_free(&out);
        return al_error_set(l->err, -EFBIG, "the step's files are larger than %llu bytes",
                            (unsigned long long)l->max_bytes);
    }
    rc = ld__entry(l, &(struct ld__item){'0', path, NULL, st, out.len, fd});
    if (!rc)
        rc = ld__put(l, out.data, out.len);
    if (!rc) {
        l->st->bytes += out.len;
        l->st->files++;
        rc = ld__pad(l, out.len);
    }
    al_buf_free(&out);
    return rc;
}

static int ld__cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ld__dir(struct ld *l, int dfd, const char *rel, int depth);

static int ld__one(struct ld *l, int dfd, const char *name, const char *rel, int depth)
{
    char path[8192];
    int n = snprintf(path, sizeof path, "%s%s", rel, name);
    if (n < 0 || (size_t)n >= sizeof path - 2)
        return al_error_set(l->err, -ENAMETOOLONG, "a path of the step is too long");
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return al_error_set(l->err, -errno, "%s: %s", path, strerror(errno));
    if (S_ISCHR(st.st_mode) && major(st.st_rdev) == 0 && minor(st.st_rdev) == 0) {
        char wh[8300];
        snprintf(wh, sizeof wh, "%s.wh.%s", rel, name);
        l->st->whiteouts++;
        struct stat w = st;
        w.st_mode = S_IFREG | 0644;
        w.st_uid = w.st_gid = l->id_base; /* (the kernel's, not the step's) */
        return ld__entry(l, &(struct ld__item){'0', wh, NULL, &w, 0, -1});
    }
    if (S_ISLNK(st.st_mode)) {
        char target[4097];
        ssize_t tl = readlinkat(dfd, name, target, sizeof target - 1);
        if (tl < 0)
            return al_error_set(l->err, -errno, "%s: %s", path, strerror(errno));
        target[tl] = '\0';
        return ld__entry(l, &(struct ld__item){'2', path, target, &st, 0, -1});
    }
    if (S_ISFIFO(st.st_mode))
        return ld__entry(l, &(struct ld__item){'6', path, NULL, &st, 0, -1});
    if (S_ISDIR(st.st_mode)) {
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return al_error_set(l->err, -errno, "%s: %s", path, strerror(errno));
        char v[4];
        bool opaque = fgetxattr(fd, "user.overlay.opaque", v, sizeof v) == 1 && v[0] == 'y';
        strcat(path, "/");
        int rc = ld__entry(l, &(struct ld__item){'5', path, NULL, &st, 0, fd});
        if (!rc && opaque) {
            char op[8300];
            snprintf(op, sizeof op, "%s.wh..wh..opq", path);
            struct stat w = st;
            w.st_mode = S_IFREG | 0644;
            w.st_uid = w.st_gid = l->id_base;
            l->st->opaque++;
            rc = ld__entry(l, &(struct ld__item){'0', op, NULL, &w, 0, -1});
        }
        if (!rc)
            rc = ld__dir(l, fd, path, depth + 1);
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        l->st->skipped++; /* sockets, devices a sandbox cannot make */
        return 0;
    }
    if (st.st_nlink > 1) {
        for (size_t i = 0; i < l->n_links; i++)
            if (l->links[i].dev == st.st_dev && l->links[i].ino == st.st_ino)
                return ld__entry(l, &(struct ld__item){'1', path, l->links[i].path, &st, 0, -1});
    }
    bool trust = ld__trust_dir(rel);
    if (trust && strcmp(name, AL_TRUST_CA_NAME) == 0) {
        l->st->skipped++; /* the build sandbox's CA (see ld__bundle) */
        return 0;
    }
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(l->err, -errno, "%s: %s", path, strerror(errno));
    if (trust && st.st_nlink == 1 && strcmp(name, AL_TRUST_BUNDLE) == 0) {
        int brc = ld__bundle(l, fd, path, &st);
        close(fd);
        return brc;
    }
    int rc = ld__entry(l, &(struct ld__item){'0', path, NULL, &st, (uint64_t)st.st_size, fd});
    if (!rc)
        rc = ld__data(l, fd, path, (uint64_t)st.st_size);
    close(fd);
    if (!rc && st.st_nlink > 1 && l->n_links < LD_LINKS_MAX) {
        struct ld_link *nl = realloc(l->links, (l->n_links + 1) * sizeof *nl);
        char *p = strdup(path);
        if (!nl || !p) {
            free(p);
            if (nl)
                l->links = nl;
            return al_error_set(l->err, -ENOMEM, "out of memory");
        }
        l->links = nl;
        l->links[l->n_links++] = (struct ld_link){st.st_dev, st.st_ino, p};
    }
    return rc;
}

/* The entries of dfd (a directory at rel, "" or "a/b/"), in name order. */
static int ld__dir(struct ld *l, int dfd, const char *rel, int depth)
{
    if (depth > LD_MAX_DEPTH)
        return al_error_set(l->err, -ELOOP, "%s: directories nested deeper than %d", rel,
                            LD_MAX_DEPTH);
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return al_error_set(l->err, -errno, "%s: %s", rel[0] ? rel : "/", strerror(errno));
    }
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char **nn = realloc(names, (n + 1) * sizeof *nn);
        char *s = strdup(de->d_name);
        if (!nn || !s) {
            free(s);
            if (nn)
                names = nn;
            rc = al_error_set(l->err, -ENOMEM, "out of memory");
            break;
        }
        names = nn;
        names[n++] = s;
        if (n > l->max_entries + 1) {
            rc = al_error_set(l->err, -EFBIG, "the step made more than %llu entries",
                              (unsigned long long)l->max_entries);
            break;
        }
    }
    closedir(d);
    if (!rc && n)
        qsort(names, n, sizeof *names, ld__cmp);
    for (size_t i = 0; i < n && !rc; i++) {
        /* the mount point of the agent's own files (vmm/jail/mounts.c), not the step's */
        if (!rel[0] && strcmp(names[i], ".airlock") == 0) {
            l->st->skipped++;
            continue;
        }
        rc = ld__one(l, dfd, names[i], rel, depth);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int tpl_layer_diff(const struct tpl_layer_diff_opts *o, char *diff_id,
                   struct tpl_layer_diff_stats *st, struct al_error *err)
{
    const char *upper = o->upper, *out = o->out;
    memset(st, 0, sizeof *st);
    diff_id[0] = '\0';
    int src = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0)
        return al_error_set(err, -errno, "opening %s: %s", upper, strerror(errno));
    struct ld l = {
        .out = open(out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600),
        .h = tpl_sha256_new(),
        .id_base = o->id_base,
        .max_entries = o->max_entries,
        .max_bytes = o->max_bytes,
        .st = st,
        .err = err,
        .buf = malloc(LD_CHUNK),
    };
    int rc;
    if (l.out < 0)
        rc = al_error_set(err, -errno, "creating %s: %s", out, strerror(errno));
    else if (!l.h || !l.buf)
        rc = al_error_set(err, -ENOMEM, "out of memory");
    else
        rc = ld__dir(&l, src, "", 0);
    if (!rc) {
        static const char end[2 * TPL_TAR_BLOCK];
        rc = ld__put(&l, end, sizeof end);
    }
    if (!rc)
        rc = ld__flush(&l);
    if (!rc && fsync(l.out) < 0)
        rc = al_error_set(err, -errno, "writing %s: %s", out, strerror(errno));
    if (!rc)
        tpl_sha256_final(l.h, diff_id);
    if (l.out >= 0)
        close(l.out);
    if (rc && l.out >= 0)
        unlink(out);
    close(src);
    for (size_t i = 0; i < l.n_links; i++)
        free(l.links[i].path);
    free(l.links);
    free(l.buf);
    if (l.h)
        tpl_sha256_free(l.h);
    return rc < 0 ? rc : rc ? -EIO : 0;
}
