/* vmm/jail/harden: see harden.h. */
#include "harden.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- capabilities ---------------------------------------------------------------- */

uint64_t jail_caps_agent_mask(void)
{
    return (1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) |
           (1ull << CAP_KILL) | (1ull << CAP_SETGID) | (1ull << CAP_SETUID) | (1ull << CAP_SETPCAP);
}

int jail_caps_limit(uint64_t keep, struct al_error *err)
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

int jail_landlock_abi(void)
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

int jail_landlock_apply(int abi, struct al_error *err)
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
    int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
        int e = errno;
        close(rs);
        return al_error_set(err, -e, "open /: %s", strerror(e));
    }
    struct ll_path_beneath_attr pb = {
        .allowed_access = attr.handled_access_fs & ~(LL_FS_MAKE_CHAR | LL_FS_MAKE_BLOCK),
        .parent_fd = root,
    };
    int rc = 0;
    if (syscall(__NR_landlock_add_rule, rs, LL_RULE_PATH_BENEATH, &pb, 0) < 0)
        rc = al_error_set(err, -errno, "landlock_add_rule /: %s", strerror(errno));
    else if (syscall(__NR_landlock_restrict_self, rs, 0) < 0)
        rc = al_error_set(err, -errno, "landlock_restrict_self: %s", strerror(errno));
    close(root);
    close(rs);
    return rc;
}

/* ---- rlimits --------------------------------------------------------------------- */

int jail_rlimits_apply(const struct jail_rlimits *r, struct al_error *err)
{
    static const struct {
        int res;
        const char *name;
        size_t off;
    } map[] = {
        {RLIMIT_NOFILE, "RLIMIT_NOFILE", offsetof(struct jail_rlimits, nofile)},
        {RLIMIT_NPROC, "RLIMIT_NPROC", offsetof(struct jail_rlimits, nproc)},
        {RLIMIT_FSIZE, "RLIMIT_FSIZE", offsetof(struct jail_rlimits, fsize)},
        {RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", offsetof(struct jail_rlimits, memlock)},
        {RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", offsetof(struct jail_rlimits, msgqueue)},
        {RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING", offsetof(struct jail_rlimits, sigpending)},
        {RLIMIT_CORE, "RLIMIT_CORE", offsetof(struct jail_rlimits, core)},
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
