/* controlplane/templates/apply: see apply.h.
 *
 * Every file-system call takes a directory descriptor that was itself resolved beneath the
 * root without following a link (openat2), and a single final name, which is created with
 * O_EXCL / O_NOFOLLOW after whatever was there has been removed (never opened and written
 * through). The descriptor of the last directory used is kept for the next entry (layers
 * list a directory's entries together) and dropped whenever something is removed.
 */
#include "apply.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/util.h"

#define APPLY_COPY_BUF (256 * 1024)

struct apply_set { /* the paths the current layer made (open addressing) */
    char **v;
    size_t cap, n;
};

struct tpl_apply {
    int root;
    uint32_t max_path;
    uint64_t max_entries, max_bytes;
    unsigned layer;
    bool literal; /* no whiteouts */
    struct tpl_apply_stats st;
    struct apply_set made;
    int dir_fd; /* cached parent */
    char *dir_path;
    char *buf;
};

/* ---- the set of paths a layer made ------------------------------------------------ */

static uint64_t set__hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void set__clear(struct apply_set *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static bool set__has(const struct apply_set *s, const char *p)
{
    if (!s->cap)
        return false;
    for (size_t i = set__hash(p) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->v[i])
            return false;
        if (strcmp(s->v[i], p) == 0)
            return true;
    }
}

static int set__add(struct apply_set *s, const char *p)
{
    if (set__has(s, p))
        return 0;
    if ((s->n + 1) * 2 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 1024;
        char **nv = calloc(nc, sizeof *nv);
        if (!nv)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->v[i])
                continue;
            size_t j = set__hash(s->v[i]) & (nc - 1);
            while (nv[j])
                j = (j + 1) & (nc - 1);
            nv[j] = s->v[i];
        }
        free(s->v);
        s->v = nv;
        s->cap = nc;
    }
    char *d = strdup(p);
    if (!d)
        return -ENOMEM;
    size_t i = set__hash(p) & (s->cap - 1);
    while (s->v[i])
        i = (i + 1) & (s->cap - 1);
    s->v[i] = d;
    s->n++;
    return 0;
}

/* ---- resolution ---------------------------------------------------------------------- */

static void apply__forget_dir(struct tpl_apply *a)
{
    if (a->dir_fd >= 0)
        close(a->dir_fd);
    a->dir_fd = -1;
    free(a->dir_path);
    a->dir_path = NULL;
}

static int apply__err(char *msg, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int apply__err(char *msg, size_t len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return rc;
}

/* Opens directory dir (cleaned, "" = the root) beneath the root, making missing
 * components (0755, root-owned) if create. The descriptor stays the cache's: do not close. */
static int apply__dir(struct tpl_apply *a, const char *dir, bool create, int *out, char *msg,
                      size_t msglen)
{
    if (a->dir_path && strcmp(a->dir_path, dir) == 0) {
        *out = a->dir_fd;
        return 0;
    }
    apply__forget_dir(a);
    int fd = dir[0] ? al_openat_beneath(a->root, dir, O_PATH | O_DIRECTORY)
                    : al_openat_beneath(a->root, ".", O_PATH | O_DIRECTORY);
    if (fd < 0) {
        /* The slow way, one component at a time: to say which one is wrong, and to make the
         * missing ones. */
        fd = al_openat_beneath(a->root, ".", O_PATH | O_DIRECTORY);
        if (fd < 0)
            return apply__err(msg, msglen, fd, "cannot open the root: %s", strerror(-fd));
        char part[4097];
        snprintf(part, sizeof part, "%s", dir);
        char *save = NULL;
        size_t done = 0;
        for (char *c = strtok_r(part, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
            int n = al_openat_beneath(fd, c, O_PATH | O_DIRECTORY);
            if (n == -ENOENT && create) {
                if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
                    int e = errno;
                    close(fd);
                    return apply__err(msg, msglen, -e, "cannot make the directory '%.*s%s': %s",
                                      (int)done, dir, c, strerror(e));
                }
                n = al_openat_beneath(fd, c, O_PATH | O_DIRECTORY);
            }
            if (n < 0) {
                struct stat st;
                bool link = fstatat(fd, c, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
                close(fd);
                if (link)
                    return apply__err(msg, msglen, -ELOOP,
                                      "'%.*s%s' is a symbolic link: entries are never written "
                                      "through links",
                                      (int)done, dir, c);
                if (n == -ENOTDIR)
                    return apply__err(msg, msglen, -ENOTDIR, "'%.*s%s' is not a directory",
                                      (int)done, dir, c);
                return apply__err(msg, msglen, n, "cannot open '%.*s%s': %s", (int)done, dir, c,
                                  strerror(-n));
            }
            close(fd);
            fd = n;
            done += strlen(c) + 1;
        }
    }
    a->dir_path = strdup(dir);
    if (!a->dir_path) {
        close(fd);
        return apply__err(msg, msglen, -ENOMEM, "out of memory");
    }
    a->dir_fd = fd;
    *out = fd;
    return 0;
}

/* ---- inside the root, through the image's own links ------------------------------------ */

int tpl_open_in_root(int root, const char *path, int flags)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
    long fd;
    do
        fd = syscall(SYS_openat2, root, path, &how, sizeof how);
    while (fd < 0 && (errno == EAGAIN || errno == EINTR));
    return fd < 0 ? -errno : (int)fd;
}

int tpl_mkdir_in_root(int root, const char *path, int *out, char *msg, size_t msglen)
{
    char pre[4097];
    size_t n = strlen(path);
    if (path[0] != '/' || n >= sizeof pre)
        return apply__err(msg, msglen, -EINVAL, "'%.200s' is not an absolute path", path);
    for (size_t i = 1; i <= n; i++) {
        if (i < n && path[i] != '/')
            continue;
        memcpy(pre, path, i);
        pre[i] = '\0';
        int fd = tpl_open_in_root(root, pre, O_PATH | O_DIRECTORY);
        if (fd >= 0) {
            close(fd);
            continue;
        }
        if (fd != -ENOENT)
            return apply__err(msg, msglen, fd, "%s in the image: %s", pre, strerror(-fd));
        char *slash = strrchr(pre, '/');
        *slash = '\0';
        int pfd = tpl_open_in_root(root, pre[0] ? pre : "/", O_PATH | O_DIRECTORY);
        if (pfd < 0)
            return apply__err(msg, msglen, pfd, "%s in the image: %s", pre[0] ? pre : "/",
                              strerror(-pfd));
        int rc = mkdirat(pfd, slash + 1, 0755) < 0 && errno != EEXIST ? -errno : 0;
        close(pfd);
        if (rc)
            return apply__err(msg, msglen, rc, "making %s in the image: %s", path, strerror(-rc));
    }
    if (!out)
        return 0;
    int fd = tpl_open_in_root(root, path, O_PATH | O_DIRECTORY);
    if (fd < 0)
        return apply__err(msg, msglen, fd, "%s in the image: %s", path, strerror(-fd));
    *out = fd;
    return 0;
}

/* ---- removal ------------------------------------------------------------------------- */

/* Empties dfd but for what keep holds (the paths, prefix-relative, this layer made). */
static int apply__empty_dir(int dfd, const struct apply_set *keep, const char *prefix)
{
    int rfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return -errno;
    DIR *d = fdopendir(rfd);
    if (!d) {
        close(rfd);
        return -ENOMEM;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char p[8192];
        snprintf(p, sizeof p, "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name);
        if (set__has(keep, p))
            continue;
        rc = al_rmtree_at(dfd, de->d_name);
        if (rc == 0)
            rewinddir(d); /* the listing changed under us */
    }
    closedir(d);
    return rc;
}

/* ---- metadata ------------------------------------------------------------------------ */

static uint32_t apply__id(struct tpl_apply *a, uint64_t id)
{
    if (id <= TPL_ID_MAX)
        return (uint32_t)id;
    a->st.ids_clamped++;
    return TPL_ID_NOBODY;
}

static bool apply__xattr_allowed(const char *name)
{
    return strncmp(name, "user.", 5) == 0 || strcmp(name, "security.capability") == 0;
}

/* Owner, then mode (chown clears setuid), xattrs, times: on an open descriptor. */
static int apply__meta_fd(struct tpl_apply *a, int fd, const struct tpl_tar_entry *e, char *msg,
                          size_t msglen)
{
    if (fchown(fd, apply__id(a, e->uid), apply__id(a, e->gid)) < 0)
        return apply__err(msg, msglen, -errno, "cannot set the owner: %s", strerror(errno));
    if (fchmod(fd, e->mode & 07777) < 0)
        return apply__err(msg, msglen, -errno, "cannot set the mode: %s", strerror(errno));
    for (size_t i = 0; i < e->n_xattrs; i++) {
        const struct tpl_tar_xattr *x = &e->xattrs[i];
        if (!apply__xattr_allowed(x->name) || fsetxattr(fd, x->name, x->value, x->len, 0) < 0)
            a->st.xattrs_skipped++;
    }
    struct timespec ts[2] = {{e->mtime, e->mtime_nsec}, {e->mtime, e->mtime_nsec}};
    futimens(fd, ts); /* times are best effort: out-of-range ones stay as they are */
    return 0;
}

/* ---- entries ------------------------------------------------------------------------- */

static int apply__regular(struct tpl_apply *a, struct tpl_tar *t, int pfd, const char *name,
                          const struct tpl_tar_entry *e, char *msg, size_t msglen)
{
    if (a->st.bytes + e->size > a->max_bytes)
        return apply__err(msg, msglen, -EFBIG,
                          "the files of the image are more than the %llu bytes allowed "
                          "(templates.max_unpacked_size)",
                          (unsigned long long)a->max_bytes);
    int fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return apply__err(msg, msglen, -errno, "cannot create the file: %s", strerror(errno));
    int rc = 0;
    for (;;) {
        ssize_t n = tpl_tar_read(t, a->buf, APPLY_COPY_BUF);
        if (n < 0) {
            rc = apply__err(msg, msglen, (int)n, "%s", tpl_tar_error(t));
            break;
        }
        if (n == 0)
            break;
        if ((rc = al_write_all(fd, a->buf, (size_t)n)) < 0) {
            apply__err(msg, msglen, rc, "cannot write the file: %s", strerror(-rc));
            break;
        }
        a->st.bytes += (uint64_t)n;
    }
    if (rc == 0)
        rc = apply__meta_fd(a, fd, e, msg, msglen);
    close(fd);
    return rc;
}

static int apply__directory(struct tpl_apply *a, int pfd, const char *name,
                            const struct tpl_tar_entry *e, char *msg, size_t msglen)
{
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
        int rc = al_rmtree_at(pfd, name);
        if (rc)
            return apply__err(msg, msglen, rc, "cannot replace it: %s", strerror(-rc));
    }
    if (mkdirat(pfd, name, 0700) < 0 && errno != EEXIST)
        return apply__err(msg, msglen, -errno, "cannot make the directory: %s", strerror(errno));
    int fd = al_openat_beneath(pfd, name, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return apply__err(msg, msglen, fd, "cannot open the directory: %s", strerror(-fd));
    int rc = apply__meta_fd(a, fd, e, msg, msglen);
    close(fd);
    return rc;
}

static int apply__hardlink(struct tpl_apply *a, int pfd, const char *name, const char *path,
                           const struct tpl_tar_entry *e, char *msg, size_t msglen)
{
    char lp[4097], why[256];
    const char *tgt = e->link;
    while (tgt[0] == '/') /* as tar does: link targets are relative to the archive's root */
        tgt++;
    int rc = tpl_path_clean(tgt, lp, sizeof lp, a->max_path, why, sizeof why);
    if (rc)
        return apply__err(msg, msglen, rc, "hard link target: %s", why);
    if (!lp[0] || strcmp(lp, path) == 0)
        return apply__err(msg, msglen, -EINVAL, "a hard link to '%s' itself or to the root",
                          e->link);
    char *slash = strrchr(lp, '/');
    const char *ldir = slash ? lp : "", *lbase = slash ? slash + 1 : lp;
    if (slash)
        *slash = '\0';
    int lfd = ldir[0] ? al_openat_beneath(a->root, ldir, O_PATH | O_DIRECTORY)
                      : al_openat_beneath(a->root, ".", O_PATH | O_DIRECTORY);
    if (lfd < 0)
        return apply__err(msg, msglen, lfd,
                          "hard link target '%s' is not inside the image (or crosses a "
                          "symbolic link): %s",
                          e->link, strerror(-lfd));
    struct stat st;
    if (fstatat(lfd, lbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode)) {
        int err = errno;
        close(lfd);
        return apply__err(msg, msglen, -ENOENT,
                          "hard link target '%s' %s in the image (a hard link must name a file "
                          "an earlier entry made)",
                          e->link,
                          S_ISDIR(st.st_mode) && err == 0 ? "is a directory" : "does not exist");
    }
    struct stat cur;
    if (fstatat(pfd, name, &cur, AT_SYMLINK_NOFOLLOW) == 0) {
        if (cur.st_ino == st.st_ino && cur.st_dev == st.st_dev) {
            close(lfd);
            return 0;
        }
        if ((rc = al_rmtree_at(pfd, name))) {
            close(lfd);
            return apply__err(msg, msglen, rc, "cannot replace it: %s", strerror(-rc));
        }
    }
    rc = linkat(lfd, lbase, pfd, name, 0) < 0 ? -errno : 0;
    close(lfd);
    if (rc)
        return apply__err(msg, msglen, rc, "cannot make the hard link to '%s': %s", e->link,
                          strerror(-rc));
    return 0;
}

static int apply__whiteout(struct tpl_apply *a, const char *dir, const char *base, char *msg,
                           size_t msglen)
{
    int pfd;
    int rc = apply__dir(a, dir, false, &pfd, msg, msglen);
    if (rc == -ENOENT)
        return 0; /* nothing there to hide */
    if (rc)
        return rc;
    a->st.whiteouts++;
    if (strcmp(base, ".wh..wh..opq") == 0) {
        /* Opaque: what lower layers put in dir is hidden; this layer's entries stay. */
        rc = apply__empty_dir(pfd, &a->made, dir);
        apply__forget_dir(a);
        return rc ? apply__err(msg, msglen, rc, "cannot empty the opaque directory: %s",
                               strerror(-rc))
                  : 0;
    }
    const char *victim = base + 4;
    if (!victim[0] || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0)
        return apply__err(msg, msglen, -EINVAL, "a whiteout without a name to remove");
    char p[8192];
    snprintf(p, sizeof p, "%s%s%s", dir, dir[0] ? "/" : "", victim);
    if (set__has(&a->made, p))
        return 0; /* a whiteout hides lower layers only */
    rc = al_rmtree_at(pfd, victim);
    apply__forget_dir(a);
    return rc ? apply__err(msg, msglen, rc, "cannot remove '%s': %s", p, strerror(-rc)) : 0;
}

int tpl_apply_entry(struct tpl_apply *a, struct tpl_tar *t, const struct tpl_tar_entry *e,
                    char *msg, size_t msglen)
{
    char path[4097], why[256];
    if (++a->st.entries > a->max_entries)
        return apply__err(msg, msglen, -E2BIG,
                          "the image has more than %llu entries (templates.max_entries)",
                          (unsigned long long)a->max_entries);
    int rc = tpl_path_clean(e->path, path, sizeof path, a->max_path, why, sizeof why);
    if (rc)
        return apply__err(msg, msglen, rc, "%s", why);
    char *slash = strrchr(path, '/');
    char dir[4097];
    const char *base;
    if (slash) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        base = slash + 1;
    } else {
        dir[0] = '\0';
        base = path;
    }
    if (!a->literal && strncmp(base, ".wh.", 4) == 0)
        return apply__whiteout(a, dir, base, msg, msglen);
    if (!path[0]) { /* "./": the root itself */
        if (e->type != TPL_TAR_DIR)
            return apply__err(msg, msglen, -EINVAL, "the root of the image is not a directory");
        int fd = al_openat_beneath(a->root, ".", O_RDONLY | O_DIRECTORY);
        if (fd < 0)
            return apply__err(msg, msglen, fd, "cannot open the root: %s", strerror(-fd));
        rc = apply__meta_fd(a, fd, e, msg, msglen);
        close(fd);
        return rc;
    }
    if (e->type == TPL_TAR_CHR || e->type == TPL_TAR_BLK) {
        if (strcmp(path, "dev") == 0 || strncmp(path, "dev/", 4) == 0) {
            a->st.devices_skipped++;
            return 0;
        }
        return apply__err(msg, msglen, -EPERM,
                          "a device node outside /dev: device nodes are not allowed in templates");
    }
    int pfd;
    if ((rc = apply__dir(a, dir, true, &pfd, msg, msglen)))
        return rc;
    if (e->type != TPL_TAR_DIR && e->type != TPL_TAR_HARDLINK) {
        struct stat st;
        if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (S_ISDIR(st.st_mode))
                apply__forget_dir(a);
            if ((rc = al_rmtree_at(pfd, base)))
                return apply__err(msg, msglen, rc, "cannot replace it: %s", strerror(-rc));
            if ((rc = apply__dir(a, dir, true, &pfd, msg, msglen)))
                return rc;
        }
    }
    switch (e->type) {
    case TPL_TAR_REG:
        rc = apply__regular(a, t, pfd, base, e, msg, msglen);
        break;
    case TPL_TAR_DIR:
        rc = apply__directory(a, pfd, base, e, msg, msglen);
        break;
    case TPL_TAR_SYMLINK:
        if (!e->link[0]) {
            rc = apply__err(msg, msglen, -EINVAL, "a symbolic link without a target");
            break;
        }
        if (symlinkat(e->link, pfd, base) < 0) {
            rc = apply__err(msg, msglen, -errno, "cannot make the symbolic link: %s",
                            strerror(errno));
            break;
        }
        if (fchownat(pfd, base, apply__id(a, e->uid), apply__id(a, e->gid), AT_SYMLINK_NOFOLLOW) <
            0) {
            rc =
                apply__err(msg, msglen, -errno, "cannot set the link's owner: %s", strerror(errno));
            break;
        }
        {
            struct timespec ts[2] = {{e->mtime, e->mtime_nsec}, {e->mtime, e->mtime_nsec}};
            utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW);
        }
        break;
    case TPL_TAR_HARDLINK:
        rc = apply__hardlink(a, pfd, base, path, e, msg, msglen);
        break;
    case TPL_TAR_FIFO:
        /* The name is safe to use after mknodat: it was made just now, in a directory only
         * this process writes. */
        if (mknodat(pfd, base, S_IFIFO | 0600, 0) < 0 ||
            fchownat(pfd, base, apply__id(a, e->uid), apply__id(a, e->gid), AT_SYMLINK_NOFOLLOW) <
                0 ||
            fchmodat(pfd, base, e->mode & 07777, 0) < 0)
            rc = apply__err(msg, msglen, -errno, "cannot make the FIFO: %s", strerror(errno));
        break;
    default:
        rc = apply__err(msg, msglen, -EINVAL, "unknown entry type");
        break;
    }
    if (rc == 0)
        rc = set__add(&a->made, path);
    return rc;
}

/* ---- the object ---------------------------------------------------------------------- */

int tpl_apply_new(int root, uint32_t max_path, uint64_t max_entries, uint64_t max_bytes,
                  struct tpl_apply **out)
{
    *out = NULL;
    struct tpl_apply *a = calloc(1, sizeof *a);
    if (!a)
        return -ENOMEM;
    a->buf = malloc(APPLY_COPY_BUF);
    if (!a->buf) {
        free(a);
        return -ENOMEM;
    }
    a->root = root;
    a->max_path = max_path ? max_path : 4096;
    a->max_entries = max_entries;
    a->max_bytes = max_bytes;
    a->dir_fd = -1;
    *out = a;
    return 0;
}

void tpl_apply_no_whiteouts(struct tpl_apply *a)
{
    a->literal = true;
}

void tpl_apply_layer(struct tpl_apply *a, unsigned index)
{
    a->layer = index;
    set__clear(&a->made);
    apply__forget_dir(a);
}

const struct tpl_apply_stats *tpl_apply_stats(const struct tpl_apply *a)
{
    return &a->st;
}

void tpl_apply_free(struct tpl_apply *a)
{
    if (!a)
        return;
    set__clear(&a->made);
    apply__forget_dir(a);
    free(a->buf);
    free(a);
}
