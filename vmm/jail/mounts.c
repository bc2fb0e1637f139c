/* vmm/jail/mounts: see mounts.h. Uses the new mount API (fsopen/fsmount/open_tree/
 * move_mount/mount_setattr) throughout: every mount is built detached and attached to a
 * target that was resolved with RESOLVE_IN_ROOT, so no path in the template can redirect a
 * mount outside the sandbox's root. */
#include "mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

/* ---- plan ------------------------------------------------------------------------ */

static int mnt__add(struct jail_mnt_plan *p, enum jail_mnt_kind kind, const char *target,
                    const char *source, const char *data, unsigned attr)
{
    if (p->n >= JAIL_MNT_MAX)
        return -E2BIG;
    struct jail_mnt_step *s = &p->steps[p->n];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    if ((size_t)snprintf(s->target, sizeof s->target, "%s", target) >= sizeof s->target ||
        (size_t)snprintf(s->source, sizeof s->source, "%s", source ? source : "") >=
            sizeof s->source ||
        (size_t)snprintf(s->data, sizeof s->data, "%s", data ? data : "") >= sizeof s->data)
        return -ENAMETOOLONG;
    s->attr = attr;
    s->fd_index = -1;
    p->n++;
    return 0;
}

/* A JAIL_MNT_FD step: the tree of descriptor fd_index attached at target. */
static int mnt__add_fd(struct jail_mnt_plan *p, const char *target, int fd_index)
{
    int rc = mnt__add(p, JAIL_MNT_FD, target, NULL, NULL, 0);
    if (rc == 0)
        p->steps[p->n - 1].fd_index = fd_index;
    return rc;
}

int jail_mnt_plan_build(const struct jail_mnt_opts *o, struct jail_mnt_plan *p)
{
    static const char *const mask_files[] = {
        "proc/kcore",       "proc/keys",          "proc/key-users",   "proc/timer_list",
        "proc/sched_debug", "proc/latency_stats", "proc/timer_stats", "proc/kallsyms",
        "proc/kmsg",        "proc/sysrq-trigger", "proc/config.gz",   "proc/kpagecount",
        "proc/kpageflags",  "proc/kpagecgroup",   "proc/vmallocinfo", "proc/pagetypeinfo",
        "proc/slabinfo",    "proc/cmdline",       "proc/bootconfig",  NULL};
    static const char *const mask_dirs[] = {"proc/acpi",     "proc/scsi",       "proc/asound",
                                            "proc/firmware", "proc/tty/driver", NULL};
    static const char *const ro_dirs[] = {"proc/sys",    "proc/bus",      "proc/fs", "proc/irq",
                                          "proc/driver", "proc/pressure", NULL};
    static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty", NULL};
    const unsigned nsd = JAIL_MA_NOSUID | JAIL_MA_NODEV;
    int rc = 0;
    memset(p, 0, sizeof *p);

    rc |= mnt__add(p, JAIL_MNT_PROC, "proc", NULL, NULL, nsd | JAIL_MA_NOEXEC);
    for (const char *const *f = mask_files; *f; f++)
        rc |= mnt__add(p, JAIL_MNT_MASK_FILE, *f, "/dev/null", NULL,
                       JAIL_MA_RDONLY | JAIL_MA_NOSUID | JAIL_MA_NOEXEC);
    for (const char *const *d = mask_dirs; *d; d++)
        rc |= mnt__add(p, JAIL_MNT_MASK_DIR, *d, NULL, NULL, 0);
    for (const char *const *d = ro_dirs; *d; d++)
        rc |= mnt__add(p, JAIL_MNT_RO_SELF, *d, NULL, NULL, 0);

    rc |= mnt__add(p, JAIL_MNT_TMPFS, "dev", NULL, "mode=0755,size=65536,nr_inodes=64",
                   JAIL_MA_NOSUID | JAIL_MA_NOEXEC);
    for (const char *const *n = nodes; *n; n++) {
        char t[64], s[64];
        snprintf(t, sizeof t, "dev/%s", *n);
        snprintf(s, sizeof s, "/dev/%s", *n);
        rc |= mnt__add(p, JAIL_MNT_DEV_NODE, t, s, NULL, JAIL_MA_NOSUID | JAIL_MA_NOEXEC);
    }
    /* Not nodev: /dev/pts/ptmx and the ptys are device nodes of this instance. */
    rc |= mnt__add(p, JAIL_MNT_DEVPTS, "dev/pts", NULL, "newinstance,ptmxmode=0666,mode=0620,gid=5",
                   JAIL_MA_NOSUID | JAIL_MA_NOEXEC);
    rc |= mnt__add(p, JAIL_MNT_SYMLINK, "dev/ptmx", "pts/ptmx", NULL, 0);
    rc |= mnt__add(p, JAIL_MNT_SYMLINK, "dev/fd", "/proc/self/fd", NULL, 0);
    rc |= mnt__add(p, JAIL_MNT_SYMLINK, "dev/stdin", "/proc/self/fd/0", NULL, 0);
    rc |= mnt__add(p, JAIL_MNT_SYMLINK, "dev/stdout", "/proc/self/fd/1", NULL, 0);
    rc |= mnt__add(p, JAIL_MNT_SYMLINK, "dev/stderr", "/proc/self/fd/2", NULL, 0);
    rc |= mnt__add(p, JAIL_MNT_UPPER_BIND, "dev/shm", "shm", NULL, nsd | JAIL_MA_NOEXEC);
    rc |= mnt__add(p, JAIL_MNT_READONLY, "dev", NULL, NULL, JAIL_MA_RDONLY);

    rc |= mnt__add(p, JAIL_MNT_TMPFS, "sys", NULL, "mode=0555,size=4096,nr_inodes=1",
                   JAIL_MA_RDONLY | nsd | JAIL_MA_NOEXEC);
    rc |= mnt__add(p, JAIL_MNT_UPPER_BIND, "tmp", "tmp", NULL, nsd);
    if (o->agent)
        rc |= mnt__add_fd(p, ".airlock", 0);
    for (size_t i = 0; i < o->n_binds && i < 16; i++) {
        const char *t = o->bind_targets[i];
        if (!t || t[0] != '/' || !t[1])
            return -EINVAL;
        rc |= mnt__add_fd(p, t + 1, (int)(1 + i));
    }
    return rc ? -E2BIG : 0;
}

/* ---- execution ------------------------------------------------------------------- */

static long mnt__openat2(int dirfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)flags,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    return syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

int jail_mnt_resolve(int rootfd, const char *rel, bool create, bool dir, struct al_error *err)
{
    int fd = (int)mnt__openat2(rootfd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT || !create) {
        if (fd < 0)
            return al_error_set(err, -errno, "resolve /%s: %s", rel, strerror(errno));
        return fd;
    }
    char path[256];
    if ((size_t)snprintf(path, sizeof path, "%s", rel) >= sizeof path)
        return al_error_set(err, -ENAMETOOLONG, "path too long: /%s", rel);
    /* Usually only the last component is missing: create it in its parent, then open it
     * relative to that parent (one component, not followed if a symlink). A name without a
     * slash is in the root itself (e.g. /dev's nodes, made in a fresh tmpfs). (A missing
     * name is never "." or "..": those always resolve.) */
    char *base = strrchr(path, '/');
    int parent = -1;
    if (base) {
        *base = '\0';
        parent = (int)mnt__openat2(rootfd, path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        *base = '/';
    } else {
        parent = rootfd; /* (not ours: not closed below) */
    }
    if (parent >= 0) {
        const char *name = base ? base + 1 : path;
        int r;
        if (dir) {
            r = mkdirat(parent, name, 0755);
        } else {
            r = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
            if (r >= 0)
                r = close(r);
        }
        if (r == 0 || errno == EEXIST)
            fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        int saved = errno;
        if (parent != rootfd)
            close(parent);
        if (fd >= 0)
            return fd;
        return al_error_set(err, -saved, "create /%s: %s", rel, strerror(saved));
    }
    /* Create the missing components one by one, each resolved inside the root. */
    for (char *p = path;;) {
        char *slash = strchr(p, '/');
        bool last = slash == NULL;
        if (slash)
            *slash = '\0';
        int e = (int)mnt__openat2(rootfd, path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (e >= 0) {
            close(e);
        } else if (errno == ENOENT) {
            char *base = strrchr(path, '/');
            const char *name = base ? base + 1 : path;
            int parent;
            if (base) {
                *base = '\0';
                parent = (int)mnt__openat2(rootfd, path, O_PATH | O_DIRECTORY | O_CLOEXEC);
                *base = '/';
            } else {
                parent = dup(rootfd);
            }
            if (parent < 0)
                return al_error_set(err, -errno, "resolve parent of /%s: %s", rel, strerror(errno));
            int r;
            if (!last || dir) {
                r = mkdirat(parent, name, 0755);
            } else {
                r = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                           0644);
                if (r >= 0)
                    r = close(r);
            }
            int saved = errno;
            close(parent);
            if (r < 0 && saved != EEXIST)
                return al_error_set(err, -saved, "create /%s: %s", path, strerror(saved));
        } else {
            return al_error_set(err, -errno, "resolve /%s: %s", path, strerror(errno));
        }
        if (last)
            break;
        *slash = '/';
        p = slash + 1;
    }
    fd = (int)mnt__openat2(rootfd, rel, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "resolve /%s: %s", rel, strerror(errno));
    return fd;
}

static unsigned mnt__attr(unsigned a)
{
    unsigned m = 0;
    if (a & JAIL_MA_RDONLY)
        m |= MOUNT_ATTR_RDONLY;
    if (a & JAIL_MA_NOSUID)
        m |= MOUNT_ATTR_NOSUID;
    if (a & JAIL_MA_NODEV)
        m |= MOUNT_ATTR_NODEV;
    if (a & JAIL_MA_NOEXEC)
        m |= MOUNT_ATTR_NOEXEC;
    return m;
}

static int mnt__setattr(int mfd, unsigned attr, const char *what, struct al_error *err)
{
    if (!attr)
        return 0;
    struct mount_attr ma = {.attr_set = mnt__attr(attr)};
    if (mount_setattr(mfd, "", AT_EMPTY_PATH, &ma, sizeof ma) < 0)
        return al_error_set(err, -errno, "set attributes of %s: %s", what, strerror(errno));
    return 0;
}

static int mnt__attach(int mfd, int targetfd, const char *what, struct al_error *err)
{
    if (move_mount(mfd, "", targetfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return al_error_set(err, -errno, "attach %s: %s", what, strerror(errno));
    return 0;
}

/* fsopen + key=value options + create + fsmount. */
static int mnt__fs(const char *type, const char *opts, unsigned attr, struct al_error *err)
{
    al_autoclose int fs = fsopen(type, FSOPEN_CLOEXEC);
    if (fs < 0)
        return al_error_set(err, -errno, "fsopen %s: %s", type, strerror(errno));
    char buf[128];
    snprintf(buf, sizeof buf, "%s", opts ? opts : "");
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        int r;
        if (eq) {
            *eq = '\0';
            r = fsconfig(fs, FSCONFIG_SET_STRING, kv, eq + 1, 0);
        } else {
            r = fsconfig(fs, FSCONFIG_SET_FLAG, kv, NULL, 0);
        }
        if (r < 0)
            return al_error_set(err, -errno, "%s option %s: %s", type, kv, strerror(errno));
    }
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return al_error_set(err, -errno, "create %s: %s", type, strerror(errno));
    int m = fsmount(fs, FSMOUNT_CLOEXEC, mnt__attr(attr));
    if (m < 0)
        return al_error_set(err, -errno, "fsmount %s: %s", type, strerror(errno));
    return m;
}

int jail_mnt_tmpfs(const char *opts, unsigned attr, struct al_error *err)
{
    return mnt__fs("tmpfs", opts, attr, err);
}

static int mnt__clone(int dirfd, const char *path, bool empty, struct al_error *err)
{
    int fd =
        open_tree(dirfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (empty ? AT_EMPTY_PATH : 0));
    if (fd < 0)
        return al_error_set(err, -errno, "clone mount %s: %s", *path ? path : "(fd)",
                            strerror(errno));
    return fd;
}

/* What the steps share: the roots to resolve targets in, and sources cloned more than
 * once. Targets under proc/ and dev/ are resolved in the proc and dev mounts this plan made
 * (the kernel's procfs, and a tmpfs holding only what the plan put there) rather than
 * walked from the root through the overlay each time. */
struct mnt__ctx {
    int rootfd, upperfd;
    const int *fds;
    size_t nfds;
    int emptyfd; /* an empty read-only tmpfs over the first masked directory, cloned over
                    the others */
    int nullfd;  /* /dev/null, read-only, nosuid, noexec, over the first masked file, cloned
                    over the others */
    int procfd;  /* the new /proc */
    int devfd;   /* the new /dev */
};

static int mnt__resolve(const struct mnt__ctx *c, const char *rel, bool create, bool dir,
                        struct al_error *err)
{
    if (c->procfd >= 0 && strncmp(rel, "proc/", 5) == 0)
        return jail_mnt_resolve(c->procfd, rel + 5, create, dir, err);
    if (c->devfd >= 0 && strncmp(rel, "dev/", 4) == 0)
        return jail_mnt_resolve(c->devfd, rel + 4, create, dir, err);
    return jail_mnt_resolve(c->rootfd, rel, create, dir, err);
}

static int mnt__step(const struct jail_mnt_step *s, struct mnt__ctx *c, struct al_error *err)
{
    al_autoclose int target = -1;
    al_autoclose int m = -1;
    int rc;
    switch (s->kind) {
    case JAIL_MNT_PROC:
        if ((target = mnt__resolve(c, s->target, true, true, err)) < 0)
            return target;
        if ((m = mnt__fs("proc", NULL, s->attr, err)) < 0)
            return m;
        if ((rc = mnt__attach(m, target, "/proc", err)))
            return rc;
        if (strcmp(s->target, "proc") == 0 && c->procfd < 0) {
            c->procfd = m; /* now the attached /proc */
            m = -1;
        }
        return 0;
    case JAIL_MNT_MASK_FILE:
    case JAIL_MNT_MASK_DIR:
    case JAIL_MNT_RO_SELF:
        target = mnt__resolve(c, s->target, false, false, NULL);
        if (target < 0)
            return 0; /* absent on this kernel: nothing to hide */
        if (s->kind == JAIL_MNT_MASK_FILE) {
            struct stat st;
            if (fstat(target, &st) == 0 && S_ISDIR(st.st_mode))
                return 0;
            if (strcmp(s->source, "/dev/null") == 0) {
                /* One clone of /dev/null with the attributes set, attached over the first
                 * file; the others get clones of that one (a clone keeps its source's
                 * attributes). Kept attached, it goes with the namespace: a detached
                 * mount closed at the end would cost an unmount and an RCU grace period. */
                if (c->nullfd < 0) {
                    if ((m = mnt__clone(AT_FDCWD, s->source, false, err)) < 0)
                        return m;
                    if ((rc = mnt__setattr(m, s->attr, s->source, err)) ||
                        (rc = mnt__attach(m, target, s->target, err)))
                        return rc;
                    c->nullfd = m;
                    m = -1;
                    return 0;
                }
                if ((m = mnt__clone(c->nullfd, "", true, err)) < 0)
                    return m;
                return mnt__attach(m, target, s->target, err);
            }
            m = mnt__clone(AT_FDCWD, s->source, false, err);
        } else if (s->kind == JAIL_MNT_MASK_DIR) {
            if (c->emptyfd < 0) {
                /* Attached over the first directory, cloned for the others (as nullfd). */
                m = jail_mnt_tmpfs("mode=0555,size=4096,nr_inodes=1",
                                   JAIL_MA_RDONLY | JAIL_MA_NOSUID | JAIL_MA_NODEV | JAIL_MA_NOEXEC,
                                   err);
                if (m < 0)
                    return m;
                if ((rc = mnt__attach(m, target, s->target, err)))
                    return rc;
                c->emptyfd = m;
                m = -1;
                return 0;
            }
            m = mnt__clone(c->emptyfd, "", true, err);
        } else {
            m = mnt__clone(target, "", true, err);
        }
        if (m < 0)
            return m;
        if (s->kind == JAIL_MNT_RO_SELF &&
            (rc = mnt__setattr(m, JAIL_MA_RDONLY | JAIL_MA_NOSUID | JAIL_MA_NODEV, s->target, err)))
            return rc;
        if (s->kind == JAIL_MNT_MASK_FILE && (rc = mnt__setattr(m, s->attr, s->target, err)))
            return rc;
        return mnt__attach(m, target, s->target, err);
    case JAIL_MNT_TMPFS:
        if ((target = mnt__resolve(c, s->target, true, true, err)) < 0)
            return target;
        if ((m = mnt__fs("tmpfs", s->data, s->attr, err)) < 0)
            return m;
        if ((rc = mnt__attach(m, target, s->target, err)))
            return rc;
        if (strcmp(s->target, "dev") == 0 && c->devfd < 0) {
            c->devfd = m; /* now the attached /dev */
            m = -1;
        }
        return 0;
    case JAIL_MNT_DEV_NODE:
        if ((target = mnt__resolve(c, s->target, true, false, err)) < 0)
            return target;
        if ((m = mnt__clone(AT_FDCWD, s->source, false, err)) < 0)
            return m;
        if ((rc = mnt__setattr(m, s->attr, s->target, err)))
            return rc;
        return mnt__attach(m, target, s->target, err);
    case JAIL_MNT_DEVPTS:
        if ((target = mnt__resolve(c, s->target, true, true, err)) < 0)
            return target;
        if ((m = mnt__fs("devpts", s->data, s->attr, err)) < 0)
            return m;
        return mnt__attach(m, target, s->target, err);
    case JAIL_MNT_SYMLINK: {
        char parent[256];
        snprintf(parent, sizeof parent, "%s", s->target);
        char *slash = strrchr(parent, '/');
        const char *name = s->target;
        if (slash) {
            *slash = '\0';
            name = slash + 1;
        }
        al_autoclose int pfd = -1;
        if (c->devfd >= 0 && strcmp(parent, "dev") == 0)
            pfd = dup(c->devfd);
        else
            pfd = slash ? (int)mnt__openat2(c->rootfd, parent, O_PATH | O_DIRECTORY | O_CLOEXEC)
                        : dup(c->rootfd);
        if (pfd < 0)
            return al_error_set(err, -errno, "resolve /%s: %s", parent, strerror(errno));
        if (symlinkat(s->source, pfd, name) < 0 && errno != EEXIST)
            return al_error_set(err, -errno, "symlink /%s: %s", s->target, strerror(errno));
        return 0;
    }
    case JAIL_MNT_UPPER_BIND:
        if ((target = mnt__resolve(c, s->target, true, true, err)) < 0)
            return target;
        if ((m = mnt__clone(c->upperfd, s->source, false, err)) < 0)
            return m;
        if ((rc = mnt__setattr(m, s->attr, s->target, err)))
            return rc;
        return mnt__attach(m, target, s->target, err);
    case JAIL_MNT_FD: {
        if (s->fd_index < 0 || (size_t)s->fd_index >= c->nfds || c->fds[s->fd_index] < 0)
            return al_error_set(err, -EBADF, "no mount handed in for /%s", s->target);
        struct stat st;
        bool dir = fstat(c->fds[s->fd_index], &st) < 0 || S_ISDIR(st.st_mode);
        if ((target = jail_mnt_resolve(c->rootfd, s->target, true, dir, err)) < 0)
            return target;
        return mnt__attach(c->fds[s->fd_index], target, s->target, err);
    }
    case JAIL_MNT_READONLY:
        if ((target = jail_mnt_resolve(c->rootfd, s->target, false, true, err)) < 0)
            return target;
        return mnt__setattr(target, s->attr, s->target, err);
    }
    return al_error_set(err, -EINVAL, "unknown mount step %d", (int)s->kind);
}

int jail_mnt_plan_exec(const struct jail_mnt_plan *plan, int rootfd, int upperfd, const int *fds,
                       size_t nfds, struct al_error *err)
{
    struct mnt__ctx c = {.rootfd = rootfd,
                         .upperfd = upperfd,
                         .fds = fds,
                         .nfds = nfds,
                         .emptyfd = -1,
                         .nullfd = -1,
                         .procfd = -1,
                         .devfd = -1};
    int rc = 0;
    for (size_t i = 0; i < plan->n && rc >= 0; i++)
        rc = mnt__step(&plan->steps[i], &c, err);
    int own[] = {c.emptyfd, c.nullfd, c.procfd, c.devfd};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own[i] >= 0)
            close(own[i]);
    return rc < 0 ? rc : 0;
}

int jail_mnt_write_file(int rootfd, const char *rel, const char *content, struct al_error *err)
{
    char parent[256];
    snprintf(parent, sizeof parent, "%s", rel);
    char *slash = strrchr(parent, '/');
    const char *name = rel;
    if (slash) {
        *slash = '\0';
        name = slash + 1;
    }
    al_autoclose int pfd =
        slash ? (int)mnt__openat2(rootfd, parent, O_PATH | O_DIRECTORY | O_CLOEXEC) : dup(rootfd);
    if (pfd < 0)
        return al_error_set(err, -errno, "resolve /%s: %s", parent, strerror(errno));
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
        unlinkat(pfd, name, 0);
    al_autoclose int dfd = openat(pfd, ".", O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return al_error_set(err, -errno, "open /%s: %s", parent, strerror(errno));
    al_autoclose int fd =
        openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return al_error_set(err, -errno, "write /%s: %s", rel, strerror(errno));
    /* 0644 also when the template's file had another mode (a template built on a host with
     * an executable /etc/resolv.conf kept it). */
    if (fchmod(fd, 0644) < 0)
        return al_error_set(err, -errno, "chmod /%s: %s", rel, strerror(errno));
    int rc = al_write_all(fd, content, strlen(content));
    if (rc)
        return al_error_set(err, rc, "write /%s: %s", rel, strerror(-rc));
    return 0;
}
