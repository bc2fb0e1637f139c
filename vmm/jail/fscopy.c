/* vmm/jail/fscopy: see fscopy.h. */
#include "fscopy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

#define FSCOPY_XATTR_LIST_MAX  (64 * 1024)
#define FSCOPY_XATTR_VALUE_MAX (64 * 1024)
#define FSCOPY_CHUNK           (1u << 20)
/* Hard links remembered (inode -> first copy); beyond, further links become copies. */
#define FSCOPY_LINKS_MAX 65536

struct fscopy_link {
    dev_t dev;
    ino_t ino;
    char *path; /* relative to the destination root */
};

struct fscopy {
    const struct jail_fscopy_opts *o;
    struct jail_fscopy_stats *st;
    struct al_error *err;
    int dst_root;
    struct fscopy_link *links;
    size_t n_links, cap_links;
    char *buf; /* FSCOPY_CHUNK, for copies copy_file_range cannot do */
    char *rel; /* PATH_MAX: the entry at hand, relative to the roots */
};

static bool fc__skipped(const struct fscopy *c, const char *rel)
{
    for (const char *const *s = c->o->skip; s && *s; s++)
        if (strcmp(*s, rel) == 0)
            return true;
    return false;
}

/* The owner on the destination side, or -ERANGE for an id outside the sandbox's range. */
static int fc__map(const struct fscopy *c, const struct stat *st, const char *rel, uid_t *uid,
                   gid_t *gid)
{
    uint64_t u = (uint64_t)st->st_uid - c->o->src_id_base;
    uint64_t g = (uint64_t)st->st_gid - c->o->src_id_base;
    if (st->st_uid < c->o->src_id_base || st->st_gid < c->o->src_id_base || u >= c->o->id_count ||
        g >= c->o->id_count)
        return al_error_set(c->err, -ERANGE,
                            "%s is owned by %u:%u, outside the sandbox's ids (%u..%u): "
                            "refusing to copy it",
                            rel, (unsigned)st->st_uid, (unsigned)st->st_gid, c->o->src_id_base,
                            c->o->src_id_base + c->o->id_count - 1);
    *uid = (uid_t)(c->o->dst_id_base + u);
    *gid = (gid_t)(c->o->dst_id_base + g);
    return 0;
}

/* The user.* attributes of src onto dst (both open descriptors of regular files or
 * directories; other types cannot carry user.* attributes). */
static int fc__xattrs(struct fscopy *c, int src, int dst, const char *rel)
{
    char *list = NULL, *val = NULL;
    int rc = 0;
    ssize_t n = flistxattr(src, NULL, 0);
    if (n <= 0)
        return n < 0 && errno != ENOTSUP && errno != EOPNOTSUPP
                   ? al_error_set(c->err, -errno, "%s: list attributes: %s", rel, strerror(errno))
                   : 0;
    if (n > FSCOPY_XATTR_LIST_MAX)
        return al_error_set(c->err, -E2BIG, "%s: more than %d bytes of attribute names", rel,
                            FSCOPY_XATTR_LIST_MAX);
    list = malloc((size_t)n);
    val = malloc(FSCOPY_XATTR_VALUE_MAX);
    if (!list || !val) {
        rc = al_error_set(c->err, -ENOMEM, "out of memory");
        goto out;
    }
    n = flistxattr(src, list, (size_t)n);
    if (n < 0) {
        rc = al_error_set(c->err, -errno, "%s: list attributes: %s", rel, strerror(errno));
        goto out;
    }
    for (char *k = list; k < list + n; k += strlen(k) + 1) {
        if (strncmp(k, "user.", 5) != 0)
            continue;
        ssize_t vl = fgetxattr(src, k, val, FSCOPY_XATTR_VALUE_MAX);
        if (vl < 0) {
            if (errno == ENODATA)
                continue;
            rc = al_error_set(c->err, -errno, "%s: read attribute %s: %s", rel, k, strerror(errno));
            goto out;
        }
        if (fsetxattr(dst, k, val, (size_t)vl, 0) < 0) {
            rc =
                al_error_set(c->err, -errno, "%s: write attribute %s: %s", rel, k, strerror(errno));
            goto out;
        }
    }
out:
    free(list);
    free(val);
    return rc;
}

/* Owner, then mode (a chown clears setuid and setgid), then times, of an open dst. */
static int fc__meta_fd(struct fscopy *c, int dst, const struct stat *st, uid_t uid, gid_t gid,
                       const char *rel)
{
    if (fchown(dst, uid, gid) < 0 || fchmod(dst, st->st_mode & 07777) < 0)
        return al_error_set(c->err, -errno, "%s: set owner and mode: %s", rel, strerror(errno));
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    if (futimens(dst, ts) < 0)
        return al_error_set(c->err, -errno, "%s: set times: %s", rel, strerror(errno));
    return 0;
}

/* The data extents of src into dst (sparse: holes stay holes), then its size. */
static int fc__data(struct fscopy *c, int src, int dst, const struct stat *st, const char *rel)
{
    uint64_t alloc = (uint64_t)st->st_blocks * 512;
    if (c->o->max_bytes &&
        c->st->bytes + (alloc < (uint64_t)st->st_size ? alloc : (uint64_t)st->st_size) >
            c->o->max_bytes)
        return al_error_set(c->err, -EFBIG, "%s: the copy would exceed %llu bytes", rel,
                            (unsigned long long)c->o->max_bytes);
    if (c->o->reflink && ioctl(dst, FICLONE, src) == 0) {
        c->st->reflinked_files++;
        c->st->bytes += alloc;
        return 0;
    }
    off_t end = st->st_size, pos = 0;
    bool cfr = true;
    while (pos < end) {
        off_t data = lseek(src, pos, SEEK_DATA);
        if (data < 0) {
            if (errno == ENXIO)
                break; /* only a hole is left */
            return al_error_set(c->err, -errno, "%s: seek: %s", rel, strerror(errno));
        }
        off_t hole = lseek(src, data, SEEK_HOLE);
        if (hole < 0)
            return al_error_set(c->err, -errno, "%s: seek: %s", rel, strerror(errno));
        if (hole > end)
            hole = end;
        off_t in = data, out = data;
        while (in < hole) {
            size_t want = (size_t)AL_MIN((off_t)FSCOPY_CHUNK, hole - in);
            if (c->o->max_bytes && c->st->bytes + want > c->o->max_bytes)
                return al_error_set(c->err, -EFBIG, "%s: the copy would exceed %llu bytes", rel,
                                    (unsigned long long)c->o->max_bytes);
            ssize_t r = -1;
            if (cfr) {
                r = copy_file_range(src, &in, dst, &out, want, 0);
                if (r < 0 &&
                    (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) {
                    cfr = false;
                    continue;
                }
            } else {
                r = pread(src, c->buf, want, in);
                if (r > 0) {
                    ssize_t w = 0;
                    while (w < r) {
                        ssize_t k = pwrite(dst, c->buf + w, (size_t)(r - w), out + w);
                        if (k < 0 && errno == EINTR)
                            continue;
                        if (k <= 0)
                            return al_error_set(c->err, k < 0 ? -errno : -EIO, "%s: write: %s", rel,
                                                k < 0 ? strerror(errno) : "short write");
                        w += k;
                    }
                    in += r;
                    out += r;
                }
            }
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return al_error_set(c->err, -errno, "%s: copy: %s", rel, strerror(errno));
            if (r == 0)
                break; /* the file shrank: the sandbox is not frozen? keep what there is */
            c->st->bytes += (uint64_t)r;
        }
        pos = hole;
    }
    if (ftruncate(dst, end) < 0)
        return al_error_set(c->err, -errno, "%s: set size: %s", rel, strerror(errno));
    return 0;
}

/* Removes what is in the way of a new entry (merge mode) unless it is a directory that a
 * directory replaces (merged instead). */
static int fc__clear(struct fscopy *c, int dstdir, const char *name, bool keep_dir, const char *rel)
{
    struct stat d;
    if (fstatat(dstdir, name, &d, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : al_error_set(c->err, -errno, "%s: %s", rel, strerror(errno));
    if (keep_dir && S_ISDIR(d.st_mode))
        return 1;
    int rc = al_rmtree_at(dstdir, name);
    return rc ? al_error_set(c->err, rc, "%s: cannot replace it: %s", rel, strerror(-rc)) : 0;
}

static int fc__link_find(struct fscopy *c, const struct stat *st, const char **path)
{
    for (size_t i = 0; i < c->n_links; i++)
        if (c->links[i].dev == st->st_dev && c->links[i].ino == st->st_ino) {
            *path = c->links[i].path;
            return 1;
        }
    return 0;
}

static void fc__link_add(struct fscopy *c, const struct stat *st, const char *rel)
{
    if (c->n_links >= FSCOPY_LINKS_MAX)
        return;
    if (c->n_links == c->cap_links) {
        size_t cap = c->cap_links ? 2 * c->cap_links : 64;
        struct fscopy_link *n = realloc(c->links, cap * sizeof *n);
        if (!n)
            return; /* a further link becomes a copy */
        c->links = n;
        c->cap_links = cap;
    }
    char *p = strdup(rel);
    if (!p)
        return;
    c->links[c->n_links++] = (struct fscopy_link){st->st_dev, st->st_ino, p};
}

static int fc__dir(struct fscopy *c, int src, int dst, size_t rel_len, int depth);

/* Copies srcdir/name to dstdir/name; c->rel (rel_len bytes) names it. */
static int fc__entry(struct fscopy *c, int srcdir, int dstdir, const char *name, size_t rel_len,
                     int depth)
{
    const char *rel = c->rel;
    struct stat st;
    if (fstatat(srcdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : al_error_set(c->err, -errno, "%s: %s", rel, strerror(errno));
    if (fc__skipped(c, rel)) {
        c->st->skipped++;
        return 0;
    }
    if (S_ISSOCK(st.st_mode) || ((S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) &&
                                 (S_ISBLK(st.st_mode) || major(st.st_rdev) || minor(st.st_rdev)))) {
        c->st->skipped++;
        return 0;
    }
    uid_t uid = 0;
    gid_t gid = 0;
    int rc = fc__map(c, &st, rel, &uid, &gid);
    if (rc)
        return rc;
    if (c->o->merge && (rc = fc__clear(c, dstdir, name, S_ISDIR(st.st_mode), rel)) < 0)
        return rc;
    bool exists = rc == 1;

    if (S_ISDIR(st.st_mode)) {
        if (depth >= JAIL_FSCOPY_MAX_DEPTH)
            return al_error_set(c->err, -ELOOP, "%s: more than %d directories deep", rel,
                                JAIL_FSCOPY_MAX_DEPTH);
        if (!exists && mkdirat(dstdir, name, 0700) < 0)
            return al_error_set(c->err, -errno, "%s: create directory: %s", rel, strerror(errno));
        int s = openat(srcdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s < 0)
            return al_error_set(c->err, -errno, "%s: open: %s", rel, strerror(errno));
        int d = openat(dstdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d < 0) {
            rc = al_error_set(c->err, -errno, "%s: open copy: %s", rel, strerror(errno));
            close(s);
            return rc;
        }
        rc = fc__xattrs(c, s, d, rel);
        if (!rc)
            rc = fc__dir(c, s, d, rel_len, depth + 1);
        /* Last: a read-only directory can be filled first; a merged one keeps its own. */
        if (!rc && !exists)
            rc = fc__meta_fd(c, d, &st, uid, gid, rel);
        close(s);
        close(d);
        c->st->dirs++;
        return rc;
    }
    if (S_ISREG(st.st_mode)) {
        const char *first;
        if (st.st_nlink > 1 && fc__link_find(c, &st, &first)) {
            if (linkat(c->dst_root, first, dstdir, name, 0) == 0) {
                c->st->hardlinks++;
                return 0;
            }
            /* (a link limit or the like: a copy then) */
        }
        int s = openat(srcdir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        if (s < 0)
            return al_error_set(c->err, -errno, "%s: open: %s", rel, strerror(errno));
        int d = openat(dstdir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (d < 0) {
            rc = al_error_set(c->err, -errno, "%s: create: %s", rel, strerror(errno));
            close(s);
            return rc;
        }
        struct stat now;
        if (fstat(s, &now) < 0 || now.st_ino != st.st_ino || !S_ISREG(now.st_mode))
            rc = al_error_set(c->err, -EAGAIN, "%s changed while it was copied", rel);
        if (!rc)
            rc = fc__data(c, s, d, &st, rel);
        if (!rc)
            rc = fc__xattrs(c, s, d, rel);
        if (!rc)
            rc = fc__meta_fd(c, d, &st, uid, gid, rel);
        close(s);
        close(d);
        if (!rc) {
            c->st->files++;
            if (st.st_nlink > 1)
                fc__link_add(c, &st, rel);
        }
        return rc;
    }
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX + 1];
        ssize_t n = readlinkat(srcdir, name, target, sizeof target - 1);
        if (n < 0)
            return al_error_set(c->err, -errno, "%s: read link: %s", rel, strerror(errno));
        target[n] = '\0';
        if (symlinkat(target, dstdir, name) < 0)
            return al_error_set(c->err, -errno, "%s: create link: %s", rel, strerror(errno));
        c->st->symlinks++;
    } else if (S_ISFIFO(st.st_mode)) {
        if (mkfifoat(dstdir, name, 0600) < 0)
            return al_error_set(c->err, -errno, "%s: create FIFO: %s", rel, strerror(errno));
        c->st->other++;
    } else { /* a whiteout: character device 0:0 */
        if (mknodat(dstdir, name, S_IFCHR | 0600, makedev(0, 0)) < 0)
            return al_error_set(c->err, -errno, "%s: create whiteout: %s", rel, strerror(errno));
        c->st->whiteouts++;
    }
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    if (fchownat(dstdir, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
        (!S_ISLNK(st.st_mode) && fchmodat(dstdir, name, st.st_mode & 07777, 0) < 0) ||
        utimensat(dstdir, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
        return al_error_set(c->err, -errno, "%s: set owner, mode and times: %s", rel,
                            strerror(errno));
    return 0;
}

static int fc__dir(struct fscopy *c, int src, int dst, size_t rel_len, int depth)
{
    char *rel = c->rel;
    int fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return al_error_set(c->err, -errno, "dup: %s", strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return al_error_set(c->err, -errno, "opendir: %s", strerror(errno));
    }
    rewinddir(d);
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t nl = strlen(e->d_name);
        if (rel_len + nl + 2 > PATH_MAX) {
            rc = al_error_set(c->err, -ENAMETOOLONG, "%.200s/...: path longer than %d bytes", rel,
                              PATH_MAX);
            break;
        }
        size_t at = rel_len;
        if (at)
            rel[at++] = '/';
        memcpy(rel + at, e->d_name, nl + 1);
        rc = fc__entry(c, src, dst, e->d_name, at + nl, depth);
        rel[rel_len] = '\0';
    }
    closedir(d);
    return rc;
}

int jail_fscopy(int src_dir, int dst_dir, const struct jail_fscopy_opts *o,
                struct jail_fscopy_stats *st, struct al_error *err)
{
    memset(st, 0, sizeof *st);
    if (!o->id_count)
        return al_error_set(err, -EINVAL, "fscopy: no id range");
    struct fscopy c = {.o = o, .st = st, .err = err, .dst_root = dst_dir};
    c.rel = malloc(PATH_MAX);
    c.buf = malloc(FSCOPY_CHUNK);
    int rc;
    if (!c.rel || !c.buf) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
    } else {
        c.rel[0] = '\0';
        rc = fc__dir(&c, src_dir, dst_dir, 0, 0);
    }
    for (size_t i = 0; i < c.n_links; i++)
        free(c.links[i].path);
    free(c.links);
    free(c.buf);
    free(c.rel);
    return rc;
}
