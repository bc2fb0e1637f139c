/* common/confine: see confine.h. */
#include "common/confine.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- cgroups and the root ---------------------------------------------------------- */

int al_confine_join_cgroup(const char *dir, pid_t pid, struct al_error *err)
{
    /* cgroup v2 and v1 both take "0" (= the writer) in cgroup.procs. */
    char path[4096], v[24];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    int n = snprintf(v, sizeof v, "%d", (int)pid);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot move process %d into cgroup %s: %s", (int)pid, dir,
                            strerror(errno));
    ssize_t w = write(fd, v, (size_t)n);
    int e = errno;
    close(fd);
    if (w != n)
        return al_error_set(err, w < 0 ? -e : -EIO, "cannot move process %d into cgroup %s: %s",
                            (int)pid, dir, strerror(w < 0 ? e : EIO));
    return 0;
}

int al_confine_pivot_cwd(struct al_error *err)
{
    /* pivot_root(".", "."): the old root ends up on top of the new one; detach it. */
    if (syscall(SYS_pivot_root, ".", ".") == 0) {
        if (umount2(".", MNT_DETACH) < 0)
            return al_error_set(err, -errno, "detaching the old root: %s", strerror(errno));
    } else if (errno == EINVAL) {
        /* The root is an initramfs (rootfs cannot be pivoted): move the new root over it,
         * as switch_root does, and chroot. The old root is covered; capabilities and the
         * filters keep chroot and mount out of reach afterwards. */
        if (mount(".", "/", NULL, MS_MOVE, NULL) < 0)
            return al_error_set(err, -errno, "moving the new root over /: %s", strerror(errno));
        if (chroot(".") < 0)
            return al_error_set(err, -errno, "chroot into the new root: %s", strerror(errno));
    } else {
        return al_error_set(err, -errno, "pivot_root: %s", strerror(errno));
    }
    if (chdir("/") < 0)
        return al_error_set(err, -errno, "chdir /: %s", strerror(errno));
    return 0;
}

int al_confine_pivot(const char *dir, struct al_error *err)
{
    if (unshare(CLONE_NEWNS) < 0)
        return al_error_set(err, -errno, "unshare(CLONE_NEWNS): %s", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return al_error_set(err, -errno, "making / private: %s", strerror(errno));
    if (mount(dir, dir, NULL, MS_BIND | MS_REC, NULL) < 0)
        return al_error_set(err, -errno, "bind-mounting %s: %s", dir, strerror(errno));
    if (mount(NULL, dir, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return al_error_set(err, -errno, "remounting %s nosuid,nodev,noexec: %s", dir,
                            strerror(errno));
    if (chdir(dir) < 0)
        return al_error_set(err, -errno, "chdir %s: %s", dir, strerror(errno));
    int rc = al_confine_pivot_cwd(err);
    if (rc < 0)
        al_error_prefix(err, "pivot into %s: ", dir);
    return rc;
}

/* ---- capabilities and identity ------------------------------------------------------ */

int al_confine_caps(uint64_t keep, struct al_error *err)
{
    for (int c = 0; c < 64; c++) {
        if (keep & (1ull << c))
            continue;
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break; /* past the kernel's last capability */
            return al_error_set(err, -errno, "cannot drop capability %d from the bounding set: %s",
                                c, strerror(errno));
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return al_error_set(err, -errno, "cannot clear ambient capabilities: %s", strerror(errno));
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    d[0].permitted = d[0].effective = (uint32_t)keep;
    d[1].permitted = d[1].effective = (uint32_t)(keep >> 32);
    if (syscall(SYS_capset, &h, d) < 0)
        return al_error_set(err, -errno, "cannot set capabilities: %s", strerror(errno));
    return 0;
}

int al_confine_identity(uid_t uid, gid_t gid, struct al_error *err)
{
    if (uid == 0)
        return al_error_set(err, -EINVAL, "al_confine_identity: uid 0 is not unprivileged");
    for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return al_error_set(err, -errno, "dropping capability %d: %s", cap, strerror(errno));
    if (setgroups(0, NULL) < 0)
        return al_error_set(err, -errno, "setgroups: %s", strerror(errno));
    if (setresgid(gid, gid, gid) < 0)
        return al_error_set(err, -errno, "setresgid %u: %s", (unsigned)gid, strerror(errno));
    if (setresuid(uid, uid, uid) < 0)
        return al_error_set(err, -errno, "setresuid %u: %s", (unsigned)uid, strerror(errno));
    /* Verify: nothing effective, permitted or inheritable, nothing ambient. */
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) < 0)
        return al_error_set(err, -errno, "capget: %s", strerror(errno));
    for (int i = 0; i < 2; i++)
        if (d[i].effective || d[i].permitted || d[i].inheritable)
            return al_error_set(err, -EPERM, "capabilities survived the uid switch");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return al_error_set(err, -errno, "cannot clear ambient capabilities: %s", strerror(errno));
    return 0;
}

int al_confine_no_new_privs(struct al_error *err)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return al_error_set(err, -errno, "PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
    return 0;
}

/* ---- Landlock -------------------------------------------------------------------- */

#define LL_CREATE_RULESET_VERSION (1u << 0)
#define LL_RULE_PATH_BENEATH      1

#define LL_FS_EXECUTE     (1ull << 0)
#define LL_FS_WRITE_FILE  (1ull << 1)
#define LL_FS_READ_FILE   (1ull << 2)
#define LL_FS_READ_DIR    (1ull << 3)
#define LL_FS_REMOVE_DIR  (1ull << 4)
#define LL_FS_REMOVE_FILE (1ull << 5)
#define LL_FS_MAKE_CHAR   (1ull << 6)
#define LL_FS_MAKE_DIR    (1ull << 7)
#define LL_FS_MAKE_REG    (1ull << 8)
#define LL_FS_MAKE_SOCK   (1ull << 9)
#define LL_FS_MAKE_FIFO   (1ull << 10)
#define LL_FS_MAKE_BLOCK  (1ull << 11)
#define LL_FS_MAKE_SYM    (1ull << 12)
#define LL_FS_REFER       (1ull << 13) /* ABI 2 */
#define LL_FS_TRUNCATE    (1ull << 14) /* ABI 3 */
#define LL_FS_IOCTL_DEV   (1ull << 15) /* ABI 5 */

#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ull << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL               (1ull << 1) /* ABI 6 */

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule       445
#define __NR_landlock_restrict_self  446
#endif

struct ll_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net; /* ABI 4 */
    uint64_t scoped;             /* ABI 6 */
};

struct ll_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

int al_landlock_abi(void)
{
    long v = syscall(__NR_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
    return v < 0 ? 0 : (int)v;
}

static uint64_t ll__fs_rights(int abi)
{
    uint64_t r = (LL_FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
    if (abi >= 2)
        r |= LL_FS_REFER;
    if (abi >= 3)
        r |= LL_FS_TRUNCATE;
    /* IOCTL_DEV (ABI 5) is not handled: device ioctls are filtered by seccomp, and all
     * device files live under /dev anyway. */
    return r;
}

int al_confine_landlock(int abi, struct al_error *err)
{
    if (abi <= 0)
        return 0;
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return al_error_set(err, -errno, "open /: %s", strerror(errno));
    int rc = al_confine_landlock_beneath(abi, root, err);
    close(root);
    return rc;
}

int al_confine_landlock_beneath(int abi, int dirfd, struct al_error *err)
{
    if (abi <= 0)
        return 0;
    struct ll_ruleset_attr attr = {0};
    size_t attr_size;
    attr.handled_access_fs = ll__fs_rights(abi);
    if (abi >= 6) {
        attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
        attr_size = sizeof attr;
    } else if (abi >= 4) {
        attr_size = offsetof(struct ll_ruleset_attr, scoped);
    } else {
        attr_size = offsetof(struct ll_ruleset_attr, handled_access_net);
    }
    int rs = (int)syscall(__NR_landlock_create_ruleset, &attr, attr_size, 0);
    if (rs < 0)
        return al_error_set(err, -errno, "landlock_create_ruleset (ABI %d): %s", abi,
                            strerror(errno));
    struct ll_path_beneath_attr pb = {
        .allowed_access = attr.handled_access_fs & ~(LL_FS_MAKE_CHAR | LL_FS_MAKE_BLOCK),
        .parent_fd = dirfd,
    };
    int rc = 0;
    if (syscall(__NR_landlock_add_rule, rs, LL_RULE_PATH_BENEATH, &pb, 0) < 0)
        rc = al_error_set(err, -errno, "landlock_add_rule: %s", strerror(errno));
    else if (syscall(__NR_landlock_restrict_self, rs, 0) < 0)
        rc = al_error_set(err, -errno, "landlock_restrict_self: %s", strerror(errno));
    close(rs);
    return rc;
}

/* ---- rlimits --------------------------------------------------------------------- */

int al_confine_rlimits(const struct al_rlimits *r, struct al_error *err)
{
    static const struct {
        int res;
        const char *name;
        size_t off;
    } map[] = {
        {RLIMIT_NOFILE, "RLIMIT_NOFILE", offsetof(struct al_rlimits, nofile)},
        {RLIMIT_NPROC, "RLIMIT_NPROC", offsetof(struct al_rlimits, nproc)},
        {RLIMIT_FSIZE, "RLIMIT_FSIZE", offsetof(struct al_rlimits, fsize)},
        {RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", offsetof(struct al_rlimits, memlock)},
        {RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", offsetof(struct al_rlimits, msgqueue)},
        {RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING", offsetof(struct al_rlimits, sigpending)},
        {RLIMIT_CORE, "RLIMIT_CORE", offsetof(struct al_rlimits, core)},
        {RLIMIT_AS, "RLIMIT_AS", offsetof(struct al_rlimits, as)},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        uint64_t v = *(const uint64_t *)((const char *)r + map[i].off);
        if (v == 0 && map[i].res != RLIMIT_CORE)
            continue; /* 0 = leave as inherited */
        struct rlimit cur;
        if (getrlimit(map[i].res, &cur) < 0)
            return al_error_set(err, -errno, "getrlimit %s: %s", map[i].name, strerror(errno));
        rlim_t want = (rlim_t)v;
        if (cur.rlim_max != RLIM_INFINITY && want > cur.rlim_max)
            want = cur.rlim_max;
        struct rlimit nl = {want, want};
        if (setrlimit(map[i].res, &nl) < 0)
            return al_error_set(err, -errno, "setrlimit %s to %llu: %s", map[i].name,
                                (unsigned long long)want, strerror(errno));
    }
    return 0;
}

int al_confine_no_dumps(struct al_error *err)
{
    struct rlimit rl = {0, 0};
    if (setrlimit(RLIMIT_CORE, &rl) < 0)
        return al_error_set(err, -errno, "cannot disable core dumps (RLIMIT_CORE 0): %s",
                            strerror(errno));
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return al_error_set(err, -errno, "cannot make the process non-dumpable: %s",
                            strerror(errno));
    return 0;
}

/* ---- the whole sequence ------------------------------------------------------------- */

int al_confine_self(const struct al_confine_opts *o, struct al_error *err)
{
    int rc;
    /* Lazy initialisation that would need files or calls the filters forbid later: glibc
     * reads the time-zone data on the first gmtime_r/localtime_r. */
    time_t t0 = 0;
    struct tm tm;
    gmtime_r(&t0, &tm);
    localtime_r(&t0, &tm);
    for (int i = 0; i < o->n_cgroups; i++)
        if ((rc = al_confine_join_cgroup(o->cgroups[i], 0, err)) < 0)
            return rc;
    if (o->root_dir && (rc = al_confine_pivot(o->root_dir, err)) < 0)
        return rc;
    if (o->rlimits && (rc = al_confine_rlimits(o->rlimits, err)) < 0)
        return rc;
    if (o->uid && (rc = al_confine_identity(o->uid, o->gid, err)) < 0)
        return rc;
    if ((rc = al_confine_no_new_privs(err)) < 0)
        return rc;
    if (o->landlock && (rc = al_confine_landlock(al_landlock_abi(), err)) < 0)
        return rc;
    return 0;
}
