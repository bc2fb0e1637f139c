/* vmm/jail/jail: see jail.h. */
#include "jail.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <net/if.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sodium.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "mounts.h"
#include "common/confine.h"
#include "seccomp.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef F_SETPIPE_SZ
#define F_SETPIPE_SZ 1031
#endif

/* Fixed descriptor numbers in the agent (the contract with airlock-agent). */
#define JAIL_FD_LISTEN 3
#define JAIL_FD_INIT   4

/* The host's cgroup layout does not change while we run: detect it once. */
static struct jail_cg_layout jail__layout;
static bool jail__layout_ok;

static int jail__get_layout(struct jail_cg_layout *out, struct al_error *err)
{
    if (!jail__layout_ok) {
        int rc = jail_cg_layout_detect(&jail__layout, err);
        if (rc)
            return rc;
        jail__layout_ok = true;
    }
    *out = jail__layout;
    return 0;
}

/* ---- warm start --------------------------------------------------------------------- */

/* A warm airlock-vmm (started ahead of any request) has already made its cgroups
 * (<parent>/warm-<pid>) and moved itself into them, which on a busy host costs an RCU grace
 * period (several milliseconds). When the spec arrives the directories are renamed to the
 * sandbox id and the sandbox's first process is cloned from inside them, inheriting its
 * cgroups without a move; airlock-vmm moves itself back out once the agent runs. */
static struct {
    bool active;  /* this process is inside the warm (or renamed) cgroups */
    bool claimed; /* renamed to a sandbox id */
    struct jail_cg cg;
    struct jail_cg_limits lim;                  /* what the cgroups were created with */
    char home[JAIL_CG_NCTRL][JAIL_CG_PATH_MAX]; /* where this process was, per controller */
} jail__warm;

/* Fills jail__warm.home from /proc/self/cgroup. */
static int jail__own_cgroups(const struct jail_cg_layout *l, struct al_error *err)
{
    al_autofree char *txt = NULL;
    int rc = al_read_file("/proc/self/cgroup", 65536, &txt, NULL, err);
    if (rc)
        return rc;
    static const char *const names[JAIL_CG_NCTRL] = {"memory", "pids", "cpu", "cpuacct", "freezer"};
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *path = c2 + 1;
        for (int c = 0; c < JAIL_CG_NCTRL; c++) {
            const char *root = l->version == 2 ? l->v2_root : l->v1_root[c];
            if (!root[0])
                continue;
            bool match = false;
            if (l->version == 2) {
                match = ctrls[0] == '\0' && line[0] == '0';
            } else {
                size_t n = strlen(names[c]);
                for (const char *p = ctrls; p && *p;) {
                    const char *e = strchr(p, ',');
                    size_t len = e ? (size_t)(e - p) : strlen(p);
                    match |= len == n && strncmp(p, names[c], n) == 0;
                    p = e ? e + 1 : NULL;
                }
            }
            if (match)
                snprintf(jail__warm.home[c], JAIL_CG_PATH_MAX, "%s%s", root,
                         strcmp(path, "/") == 0 ? "" : path);
        }
    }
    return 0;
}

int jail_warm(const char *cgroup_parent, const struct jail_cg_limits *lim, struct al_error *err)
{
    struct jail_cg_layout layout;
    int rc = jail__get_layout(&layout, err);
    if (rc)
        return rc;
    char id[32];
    snprintf(id, sizeof id, "warm-%d", (int)getpid());
    if ((rc = jail_cg_init(&jail__warm.cg, &layout, cgroup_parent, id, err)) ||
        (rc = jail__own_cgroups(&layout, err)))
        return rc;
    jail__warm.lim = lim ? *lim : (struct jail_cg_limits){0};
    if ((rc = jail_cg_create(&jail__warm.cg, &jail__warm.lim, err)))
        return rc;
    if ((rc = jail_cg_attach(&jail__warm.cg, getpid(), err))) {
        jail_cg_destroy(&jail__warm.cg, NULL);
        return rc;
    }
    jail__warm.active = true;
    return 0;
}

void jail_warm_release(void)
{
    if (!jail__warm.active)
        return;
    char v[32];
    snprintf(v, sizeof v, "%d", (int)getpid());
    for (int c = 0; c < JAIL_CG_NCTRL; c++) {
        if (!jail__warm.home[c][0] || !jail__warm.cg.dir[c][0])
            continue;
        char p[JAIL_CG_PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/cgroup.procs", jail__warm.home[c]);
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, v, strlen(v)) < 0)
            al_warn("cannot move airlock-vmm back to %s: %s", jail__warm.home[c], strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    jail__warm.active = false;
    if (!jail__warm.claimed)
        jail_cg_destroy(&jail__warm.cg, NULL);
}

/* Renames the warm cgroups to the sandbox's; false if there are none or they do not fit. */
static bool jail__claim_warm(struct jail *j)
{
    if (!jail__warm.active || jail__warm.claimed)
        return false;
    if (strcmp(jail__warm.cg.parent, j->cg.parent) != 0) {
        al_warn("warm cgroups are under %s, the spec wants %s: starting cold", jail__warm.cg.parent,
                j->cg.parent);
        jail_warm_release();
        return false;
    }
    if (jail_cg_exists(&j->cg)) {
        al_warn("cgroups of %s exist already: starting cold", j->spec->id);
        jail_warm_release();
        return false;
    }
    size_t done = 0;
    for (; done < j->cg.n_uniq; done++)
        if (rename(jail__warm.cg.uniq[done], j->cg.uniq[done]) < 0)
            break;
    if (done < j->cg.n_uniq) {
        al_warn("cannot rename %s to %s: %s; starting cold", jail__warm.cg.uniq[done],
                j->cg.uniq[done], strerror(errno));
        while (done-- > 0)
            rename(j->cg.uniq[done], jail__warm.cg.uniq[done]);
        jail_warm_release();
        return false;
    }
    jail__warm.claimed = true;
    return true;
}

/* ---- prepare / record ------------------------------------------------------------- */

int jail_prepare(struct jail *j, const struct vmm_spec *spec, const char *state_dir,
                 struct al_error *err)
{
    memset(j, 0, sizeof *j);
    j->spec = spec;
    j->pid = -1;
    j->pidfd = -1;
    j->log_fd = -1;
    j->log_w = -1;
    j->upper_fd = -1;
    j->restart_net_fd = -1;
    j->restore = spec->jail_restore;
    struct jail_cg_layout layout;
    int rc = jail__get_layout(&layout, err);
    if (rc)
        return rc;
    if ((rc = jail_cg_init(&j->cg, &layout, spec->cgroup_parent, spec->id, err)))
        return rc;
    j->cg_inherited = jail__claim_warm(j);
    if (j->cg_inherited)
        j->cg_created = true;
    snprintf(j->ids_dir, sizeof j->ids_dir, "%s/jail/idslots", state_dir);
    j->ids = (struct jail_idmap_cfg){spec->uid_base, spec->uid_slots, j->ids_dir};
    if ((rc = jail_idmap_alloc(&j->ids, spec->id, &j->slot, err))) {
        if (j->cg_inherited) {
            /* Undo the claim: out of the (renamed) cgroups, which then go. */
            jail_warm_release();
            jail_cg_destroy(&j->cg, NULL);
            j->cg_created = false;
        }
        return rc;
    }
    j->have_slot = true;
    j->host_uid = jail_idmap_host_base(&j->ids, j->slot);
    if (spec->jail_restore && (rc = jail_snapshot_check(j, spec->jail_restore, false, err))) {
        jail_reclaim(j, NULL);
        return rc;
    }
    return 0;
}

json_t *jail_record(const struct jail *j)
{
    json_t *r = json_object();
    json_object_set_new(r, "backend", json_string("jail"));
    json_object_set_new(r, "id", json_string(j->spec->id));
    json_object_set_new(r, "cgroup_parent", json_string(j->cg.parent));
    json_object_set_new(r, "ids_dir", json_string(j->ids_dir));
    json_object_set_new(r, "uid_base", json_integer(j->ids.base));
    json_object_set_new(r, "uid_slots", json_integer(j->ids.slots));
    if (j->have_slot) {
        json_object_set_new(r, "slot", json_integer(j->slot));
        json_object_set_new(r, "host_uid", json_integer(j->host_uid));
    }
    return r;
}

/* ---- helpers --------------------------------------------------------------------- */

static int jail__write_file(const char *path, const char *data)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = al_write_all(fd, data, strlen(data));
    close(fd);
    return rc;
}

static int jail__send_msg(int sock, char tag, const void *data, size_t len, const int *fds,
                          size_t n)
{
    char buf[CMSG_SPACE(sizeof(int) * (VMM_MAX_BINDS + 2))];
    memset(buf, 0, sizeof buf);
    struct iovec iov[2] = {{&tag, 1}, {(void *)data, len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    if (n) {
        m.msg_control = buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    }
    for (;;) {
        ssize_t r = sendmsg(sock, &m, MSG_NOSIGNAL);
        if (r == (ssize_t)(1 + len))
            return 0;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -errno : -EIO;
    }
}

static int jail__send_fds(int sock, char tag, const int *fds, size_t n)
{
    return jail__send_msg(sock, tag, NULL, 0, fds, n);
}

/* Receives one message; returns its tag, or a negative errno (-EPIPE at EOF). A payload
 * of up to len bytes is copied to data (if given). */
static int jail__recv_msg(int sock, void *data, size_t len, int *fds, size_t max, size_t *n)
{
    char tag = 0;
    char buf[CMSG_SPACE(sizeof(int) * (VMM_MAX_BINDS + 2))];
    struct iovec iov[2] = {{&tag, 1}, {data, data ? len : 0}};
    struct msghdr m = {.msg_iov = iov,
                       .msg_iovlen = data ? 2 : 1,
                       .msg_control = buf,
                       .msg_controllen = sizeof buf};
    ssize_t r;
    do {
        r = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return -errno;
    if (r == 0)
        return -EPIPE;
    if (n)
        *n = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (n && *n < max)
                fds[(*n)++] = fd;
            else
                close(fd);
        }
    }
    return (unsigned char)tag;
}

static int jail__recv_fds(int sock, int *fds, size_t max, size_t *n)
{
    return jail__recv_msg(sock, NULL, 0, fds, max, n);
}

/* Waits up to timeout_ms for fd to become readable. */
static int jail__wait_readable(int fd, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        int r = poll(&p, 1, timeout_ms);
        if (r > 0)
            return 0;
        if (r == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static int jail__lo_up(struct al_error *err)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return al_error_set(err, -errno, "socket: %s", strerror(errno));
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int rc = 0;
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
        rc = al_error_set(err, -errno, "SIOCGIFFLAGS lo: %s", strerror(errno));
    } else {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
            rc = al_error_set(err, -errno, "bring lo up: %s", strerror(errno));
    }
    close(s);
    return rc;
}

/* ---- the child ------------------------------------------------------------------- */

/* The capabilities the agent (uid 0 of the sandbox's user namespace) keeps in its
 * bounding, permitted and effective sets (none inheritable or ambient); every other one is
 * dropped from the bounding set, so nothing started inside can get it back. They are
 * capabilities in the sandbox's user namespace only: over the host they are nothing. The
 * agent clears them all (and sets no_new_privs) before it runs user code, except in a build
 * sandbox (spec.jail.build): there the agent also keeps AL_BUILD_ROOT_CAPS (common/
 * confine.h) and hands them to root's processes (--build-sandbox). */
#define JAIL_AGENT_CAPS                                                        \
    ((1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) | \
     (1ull << CAP_KILL) | (1ull << CAP_SETGID) | (1ull << CAP_SETUID) | (1ull << CAP_SETPCAP))

struct jail__child {
    const struct jail *j;
    int sync; /* socketpair end */
    int errw; /* close-on-exec error pipe, write end */
    int listen_fd;
    int init_r; /* -1 if no init data */
    int log_w;
    char ws_path[512];
    const struct jail_mnt_plan *plan;
    const struct sock_filter *prog;
    size_t prog_len;
    int landlock_abi;
    char *const *argv;
    char *const *envp;
    char hosts[512];
    char resolv[256];
    bool restore; /* airlock-vmm fills the upper layer from a snapshot ('U', then 'F') */
};

static _Noreturn void child__fail(const struct jail__child *c, const char *step,
                                  const struct al_error *e, int code)
{
    char msg[AL_ERROR_MSG_MAX + 64];
    int n = snprintf(msg, sizeof msg, "%s: %s", step,
                     e && e->msg[0] ? e->msg : strerror(code < 0 ? -code : code));
    if (n > 0)
        al_write_all(c->errw, msg, (size_t)AL_MIN((size_t)n, sizeof msg - 1));
    _exit(126);
}

#define CHILD_TRY(c, step, expr)                   \
    do {                                           \
        if ((expr) < 0)                            \
            child__fail((c), (step), NULL, errno); \
    } while (0)

/* Moves fds so that targets[i] = sources[i], then closes everything >= keep_from except the
 * listed extra descriptors (which become close-on-exec). */
static int child__arrange_fds(const int *src, const int *dst, size_t n, int *extra, size_t nextra)
{
    int tmp[8];
    for (size_t i = 0; i < n; i++) {
        tmp[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 64);
        if (tmp[i] < 0)
            return -1;
    }
    int etmp[4];
    for (size_t i = 0; i < nextra; i++) {
        etmp[i] = fcntl(extra[i], F_DUPFD_CLOEXEC, 64);
        if (etmp[i] < 0)
            return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (dup2(tmp[i], dst[i]) < 0) /* dup2 clears close-on-exec on the target */
            return -1;
    int next = 0;
    for (size_t i = 0; i < n; i++)
        next = AL_MAX(next, dst[i] + 1);
    for (size_t i = 0; i < nextra; i++) {
        if (dup3(etmp[i], next, O_CLOEXEC) < 0)
            return -1;
        extra[i] = next++;
    }
    return (int)syscall(SYS_close_range, (unsigned)next, ~0u, 0);
}

/* The child went away while the parent was handing it something (rc: that send's error):
 * its own reason, written to the error pipe before it exited, is the one worth reporting
 * ("sandbox setup failed at etc files: ..."), not the broken pipe it left behind. */
static int jail__child_failed(int errfd, int rc, struct al_error *err)
{
    char msg[AL_ERROR_MSG_MAX];
    ssize_t n = -1;
    if (jail__wait_readable(errfd, 1000) == 0) /* its end closes when it exits */
        do {
            n = read(errfd, msg, sizeof msg - 1);
        } while (n < 0 && errno == EINTR);
    if (n > 0) {
        msg[n] = '\0';
        return al_error_set(err, -EIO, "sandbox setup failed at %s", msg);
    }
    return al_error_set(err, rc, "the sandbox's first process died while being set up (%s)",
                        strerror(-rc));
}

/* A message the parent waits for from the child. */
struct jail__want {
    char tag;
    void *data; /* its payload, len bytes */
    size_t len;
    int *fd; /* its one descriptor, or NULL for none */
};

/* Waits (up to timeout_ms) for the child's message w. Anything else: the child's own reason
 * from errfd, or that it hung or died. */
static int jail__expect(int sock, int errfd, int timeout_ms, const struct jail__want *w,
                        struct al_error *err)
{
    char want = w->tag;
    int *fd = w->fd;
    int tag = -ETIMEDOUT, fds[1];
    size_t nfd = 0;
    if (jail__wait_readable(sock, timeout_ms) == 0)
        tag = jail__recv_msg(sock, w->data, w->len, fds, fd ? 1 : 0, &nfd);
    if (tag == want && (!fd || nfd == 1)) {
        if (fd)
            *fd = fds[0];
        return 0;
    }
    for (size_t i = 0; i < nfd; i++)
        close(fds[i]);
    char msg[AL_ERROR_MSG_MAX];
    ssize_t n = tag == -ETIMEDOUT ? -1 : read(errfd, msg, sizeof msg - 1);
    if (n > 0) {
        msg[n] = '\0';
        return al_error_set(err, -EIO, "sandbox setup failed at %s", msg);
    }
    return al_error_set(err, tag == -ETIMEDOUT ? -ETIMEDOUT : -EIO,
                        "the sandbox's first process %s before it was ready",
                        tag == -ETIMEDOUT ? "hung" : "died");
}

/* /etc/hostname, /etc/hosts and /etc/resolv.conf straight into the upper layer, before the
 * overlay exists: written through the overlay instead, each write copies the directory and
 * the file up (with their extended attributes) and walks the path three times. Done here
 * only in the usual case: the template's /etc a directory owned by root of the sandbox (so
 * that the merged /etc keeps its mode and owner), and no bind mount of the spec at or under
 * /etc (written afterwards, the files would fail on a read-only bind, as they did before).
 * Returns 1 when the files are in place, 0 when they must be written after the mounts, or
 * -errno. */
static int child__etc_upper(const struct jail__child *c, int lower, int upper,
                            const char *hostname_line, struct al_error *err)
{
    const struct vmm_spec *s = c->j->spec;
    for (size_t i = 0; i < s->n_binds; i++) {
        const char *t = s->binds[i].target;
        if (strncmp(t, "/etc", 4) == 0 && (t[4] == '\0' || t[4] == '/'))
            return 0;
    }
    struct stat st;
    if (fstatat(lower, "etc", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != 0 || st.st_gid != 0)
        return 0;
    if (mkdirat(upper, "etc", 0700) < 0 || fchmodat(upper, "etc", st.st_mode & 07777, 0) < 0)
        return al_error_set(err, -errno, "create /etc in the upper layer: %s", strerror(errno));
    al_autoclose int etc = openat(upper, "etc", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (etc < 0)
        return al_error_set(err, -errno, "open /etc in the upper layer: %s", strerror(errno));
    const char *names[] = {"hostname", "hosts", "resolv.conf"};
    const char *data[] = {hostname_line, c->hosts, c->resolv[0] ? c->resolv : NULL};
    for (size_t i = 0; i < AL_ARRAY_SIZE(names); i++) {
        if (!data[i])
            continue; /* no resolver in the spec: the template's resolv.conf stays */
        al_autoclose int fd =
            openat(etc, names[i], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 || fchmod(fd, 0644) < 0)
            return al_error_set(err, -errno, "write /etc/%s: %s", names[i], strerror(errno));
        int rc = al_write_all(fd, data[i], strlen(data[i]));
        if (rc)
            return al_error_set(err, rc, "write /etc/%s: %s", names[i], strerror(-rc));
    }
    return 1;
}

/* A read-only tree (the agent directory, a spec bind) as the sandbox mounts it: an overlay
 * of the tree over an empty directory, not the bind itself. A bind mount's entry in
 * /proc/self/mountinfo names its source's path within that source's file system (the
 * build tree, /usr/lib/airlock/agent, the bind's host directory) and that file system's
 * device and options; an overlay's root is "/" and its source "none", and its layers are
 * named as this process sees them: it runs chrooted at the workspace, where the tree is
 * attached at /ro/N and the empty layer is /ro/e, both in the upper tmpfs the sandbox never
 * sees. (overlayfs wants two layers when there is no upper one.) Returns the detached
 * mount's fd. */
static int child__ro_tree(int tree, int empty, struct al_error *err)
{
    al_autoclose int fs = fsopen("overlay", FSOPEN_CLOEXEC);
    if (fs < 0)
        return al_error_set(err, -errno, "fsopen overlay: %s", strerror(errno));
    if (fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", NULL, tree) < 0 ||
        fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", NULL, empty) < 0 ||
        fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0 ||
        fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
        int saved = errno;
        char log[256];
        ssize_t n = read(fs, log, sizeof log - 1);
        log[n > 0 ? n : 0] = '\0';
        return al_error_set(err, -saved, "create overlay: %s%s%s%s", strerror(saved),
                            n > 0 ? " (" : "", log, n > 0 ? ")" : "");
    }
    int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (m < 0)
        return al_error_set(err, -errno, "fsmount overlay: %s", strerror(errno));
    return m;
}

/* Whether the child's handed-in mount i (fds[i]) is a volume's. */
static bool child__is_volume(const struct vmm_spec *s, size_t i)
{
    return i >= 2 && i - 2 < s->n_binds && s->binds[i - 2].volume;
}

static int child__main(struct jail__child *c)
{
    const struct jail *j = c->j;
    const struct vmm_spec *s = j->spec;
    struct al_error e = {0};
    int fds[VMM_MAX_BINDS + 2];
    size_t nfds = 0;

    /* Dies with airlock-vmm from the start: until it execs, this process shares the
     * sandbox's lock (vmm.lock) with it, and a cleanup waits for that lock. The credential
     * change below clears it; it is armed again after it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        _exit(125);
    /* Wait for the maps, the cgroups and the mounts. Opening the workspace by path happens
     * before setresuid: until then the child is still host uid 0, the owner of the state
     * directory, so a 0700 state directory is no obstacle. */
    int tag = jail__recv_fds(c->sync, fds, VMM_MAX_BINDS + 2, &nfds);
    if (tag != 'M')
        _exit(125); /* the parent went away */
    int ws = open(c->ws_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (ws < 0)
        child__fail(c, "open workspace", NULL, errno);

    struct jail_child_timing ct = {0};
    uint64_t tc = al_now_ns();
    CHILD_TRY(c, "setresgid", setresgid(0, 0, 0));
    CHILD_TRY(c, "setresuid", setresuid(0, 0, 0));
    CHILD_TRY(c, "setgroups", setgroups(0, NULL));
    CHILD_TRY(c, "sethostname", sethostname(s->hostname, strlen(s->hostname)));
    CHILD_TRY(c, "make / private", mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));

    /* The writable layer: one tmpfs, capped at the disk size, holding the overlay's upper
     * and work directories and the backing directories of /tmp and /dev/shm. */
    char opts[96];
    snprintf(opts, sizeof opts, "mode=0755,size=%llu", (unsigned long long)s->disk_bytes);
    int up = jail_mnt_tmpfs(opts, JAIL_MA_NOSUID | JAIL_MA_NODEV, &e);
    if (up < 0)
        child__fail(c, "upper tmpfs", &e, up);
    CHILD_TRY(c, "mkdir upper", mkdirat(up, "upper", 0755));
    CHILD_TRY(c, "mkdir work", mkdirat(up, "work", 0700));
    CHILD_TRY(c, "mkdir tmp", mkdirat(up, "tmp", 0755));
    CHILD_TRY(c, "mkdir shm", mkdirat(up, "shm", 0755));
    CHILD_TRY(c, "chmod tmp", fchmodat(up, "tmp", 01777, 0));
    CHILD_TRY(c, "chmod shm", fchmodat(up, "shm", 01777, 0));
    /* Mount points of the read-only trees (the agent directory, the spec's binds) while
     * their overlays are configured, and the empty layer below each (see child__ro_tree). */
    CHILD_TRY(c, "mkdir ro", mkdirat(up, "ro", 0700));
    CHILD_TRY(c, "mkdir ro/e", mkdirat(up, "ro/e", 0500));
    /* (fds[0] is the template, fds[1] the agent directory, fds[2 + i] spec bind i; a
     * volume's is attached as it is, writable, by the mount plan.) */
    for (size_t i = 1; i < nfds; i++) {
        if (child__is_volume(s, i))
            continue;
        char name[16];
        snprintf(name, sizeof name, "ro/%zu", i);
        CHILD_TRY(c, "mkdir ro/N", mkdirat(up, name, 0500));
    }
    int upper = openat(up, "upper", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int work = openat(up, "work", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (upper < 0 || work < 0)
        child__fail(c, "open upper", NULL, errno);

    int lower = fds[0];
    char hostname_line[HOST_NAME_MAX + 2]; /* sethostname above took it: at most 64 */
    snprintf(hostname_line, sizeof hostname_line, "%s\n", s->hostname);
    int etc_done = child__etc_upper(c, lower, upper, hostname_line, &e);
    if (etc_done < 0)
        child__fail(c, "etc files", &e, etc_done);
    /* The upper directory for airlock-vmm: it fills it from a snapshot now (jail.restore)
     * and copies it out for a snapshot later (jail_snapshot). Before the overlay exists:
     * overlayfs does not expect its layers to change under it. */
    int upper_rd = openat(up, "upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (upper_rd < 0)
        child__fail(c, "open upper", NULL, errno);
    if (jail__send_fds(c->sync, 'U', &upper_rd, 1) < 0)
        _exit(125);
    close(upper_rd);
    if (c->restore && jail__recv_fds(c->sync, NULL, 0, NULL) != 'F')
        _exit(125); /* the parent could not fill it (it says why) or went away */

    /* The writable layer is attached under the old root (where the lower layer and the
     * overlay go too): pivot_root and the detach of the old root take it out of this
     * namespace with everything else in one unmount. Left detached, closing its descriptor
     * at exec would unmount it separately (another RCU grace period per sandbox); it is
     * never reachable from the new root either way. */
    CHILD_TRY(c, "attach upper tmpfs",
              move_mount(up, "", ws, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH));
    for (size_t i = 1; i < nfds; i++) {
        if (child__is_volume(s, i))
            continue;
        char name[16];
        snprintf(name, sizeof name, "ro/%zu", i);
        CHILD_TRY(c, "attach a read-only tree",
                  move_mount(fds[i], "", up, name, MOVE_MOUNT_F_EMPTY_PATH));
    }
    int empty = openat(up, "ro/e", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (empty < 0)
        child__fail(c, "open ro/e", NULL, errno);
    /* The lower layer must be attached in this namespace before overlayfs can use it. */
    CHILD_TRY(c, "attach template",
              move_mount(lower, "", ws, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH));
    int ofs = fsopen("overlay", FSOPEN_CLOEXEC);
    if (ofs < 0)
        child__fail(c, "fsopen overlay", NULL, errno);
    /* overlayfs keeps each layer's path as seen from this process's root when it is given
     * (d_path) and shows it in the sandbox's /proc/self/mountinfo: from the host's root that
     * is the state directory. Rooted at the workspace, where the layers are attached, the
     * paths are "/", "/upper" and "/work"; the old root comes back right after. */
    int oldroot = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (oldroot < 0)
        child__fail(c, "open /", NULL, errno);
    CHILD_TRY(c, "chdir workspace", fchdir(ws));
    CHILD_TRY(c, "chroot workspace", chroot("."));
    CHILD_TRY(c, "overlay lowerdir", fsconfig(ofs, FSCONFIG_SET_FD, "lowerdir+", NULL, lower));
    CHILD_TRY(c, "overlay upperdir", fsconfig(ofs, FSCONFIG_SET_FD, "upperdir", NULL, upper));
    CHILD_TRY(c, "overlay workdir", fsconfig(ofs, FSCONFIG_SET_FD, "workdir", NULL, work));
    for (size_t i = 1; i < nfds; i++) {
        if (child__is_volume(s, i))
            continue;
        int ro = child__ro_tree(fds[i], empty, &e);
        if (ro < 0)
            child__fail(c, i == 1 ? "agent directory overlay" : "bind overlay", &e, -ro);
        close(fds[i]);
        fds[i] = ro;
    }
    close(empty);
    CHILD_TRY(c, "chdir old root", fchdir(oldroot));
    CHILD_TRY(c, "chroot old root", chroot("."));
    close(oldroot);
    /* In a user namespace overlayfs keeps its metadata in user.* xattrs. */
    CHILD_TRY(c, "overlay userxattr", fsconfig(ofs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0));
    if (fsconfig(ofs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
        int saved = errno;
        char log[256];
        ssize_t n = read(ofs, log, sizeof log - 1);
        if (n > 0) {
            log[n] = '\0';
            al_error_set(&e, -saved, "create overlay: %s (%s)", strerror(saved), log);
            child__fail(c, "root overlay", &e, saved);
        }
        child__fail(c, "create overlay", NULL, saved);
    }
    int root = fsmount(ofs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (root < 0)
        child__fail(c, "fsmount overlay", NULL, errno);
    CHILD_TRY(c, "attach root",
              move_mount(root, "", ws, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH));

    ct.rootfs_us = (uint32_t)((al_now_ns() - tc) / 1000);
    tc = al_now_ns();
    int rc = jail_mnt_plan_exec(c->plan, root, up, fds + 1, nfds - 1, &e);
    if (rc < 0)
        child__fail(c, "mounts", &e, rc);
    if (!etc_done &&
        ((rc = jail_mnt_write_file(root, "etc/hostname", hostname_line, &e)) < 0 ||
         (rc = jail_mnt_write_file(root, "etc/hosts", c->hosts, &e)) < 0 ||
         (c->resolv[0] && (rc = jail_mnt_write_file(root, "etc/resolv.conf", c->resolv, &e)) < 0)))
        child__fail(c, "etc files", &e, rc);

    ct.plan_us = (uint32_t)((al_now_ns() - tc) / 1000);
    tc = al_now_ns();
    CHILD_TRY(c, "chdir new root", fchdir(root));
    if ((rc = al_confine_pivot_cwd(&e)) < 0)
        child__fail(c, "pivot_root", &e, rc);

    struct al_rlimits rl = {
        .nofile = s->nofile,
        .nproc = s->pids,
        .fsize = s->disk_bytes,
        .memlock = 64 << 10,
        .msgqueue = 800 << 10,
        .sigpending = 4096,
        .core = 0,
    };
    if ((rc = al_confine_rlimits(&rl, &e)) < 0)
        child__fail(c, "rlimits", &e, rc);

    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        child__fail(c, "open /dev/null", NULL, errno);
    int src[5] = {devnull, c->log_w, c->log_w, c->listen_fd, c->init_r};
    int dst[5] = {0, 1, 2, JAIL_FD_LISTEN, JAIL_FD_INIT};
    int extra[2] = {c->sync, c->errw};
    if (child__arrange_fds(src, dst, c->init_r >= 0 ? 5 : 4, extra, 2) < 0)
        child__fail(c, "arrange fds", NULL, errno);
    c->sync = extra[0];
    c->errw = extra[1];

    ct.pivot_us = (uint32_t)((al_now_ns() - tc) / 1000);
    /* The parent moves this process into the sandbox's cgroups while it builds the root
     * (a cgroup v1 migration can take milliseconds: it waits for an RCU grace period);
     * 'C' says it is done. The cgroup namespace is rooted where the process is now. */
    tc = al_now_ns();
    tag = jail__recv_fds(c->sync, NULL, 0, NULL);
    if (tag != 'C')
        _exit(125);
    ct.cgroup_wait_us = (uint32_t)((al_now_ns() - tc) / 1000);
    tc = al_now_ns();
    CHILD_TRY(c, "unshare(CLONE_NEWCGROUP)", unshare(CLONE_NEWCGROUP));
    if ((rc = al_confine_landlock(c->landlock_abi, &e)) < 0)
        child__fail(c, "landlock", &e, rc);
    if ((rc = al_confine_caps(JAIL_AGENT_CAPS | (s->jail_build ? AL_BUILD_ROOT_CAPS : 0), &e)) < 0)
        child__fail(c, "capabilities", &e, rc);
    if ((rc = al_confine_no_new_privs(&e)) < 0)
        child__fail(c, "no_new_privs", &e, rc);
    if ((rc = al_sc_install(c->prog, c->prog_len, 0, &e)) < 0)
        child__fail(c, "seccomp", &e, rc);
    /* Armed last: any change of credentials clears it. */
    CHILD_TRY(c, "pdeathsig", prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0));
    ct.locks_us = (uint32_t)((al_now_ns() - tc) / 1000);
    if (jail__send_msg(c->sync, 'R', &ct, sizeof ct, NULL, 0) < 0)
        _exit(125);
    tag = jail__recv_fds(c->sync, NULL, 0, NULL);
    if (tag != 'G')
        _exit(125); /* the parent died before the death signal was armed */
    execve(s->agent_path, c->argv, c->envp);
    child__fail(c, "execve agent", NULL, errno);
}

/* ---- start ----------------------------------------------------------------------- */

static char **jail__strv_new(size_t n)
{
    return calloc(n + 1, sizeof(char *));
}

static void jail__strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static char **jail__argv(const struct vmm_spec *s)
{
    size_t n = s->agent_args ? json_array_size(s->agent_args) : 0;
    char **v = jail__strv_new(n + 2);
    if (!v)
        return NULL;
    v[0] = strdup(s->agent_path);
    for (size_t i = 0; i < n; i++)
        v[i + 1] = strdup(json_string_value(json_array_get(s->agent_args, i)));
    if (s->jail_build) /* (from the spec alone: nothing in the sandbox can ask for it) */
        v[++n] = strdup("--build-sandbox");
    for (size_t i = 0; i <= n; i++)
        if (!v[i]) {
            jail__strv_free(v);
            return NULL;
        }
    return v;
}

static char **jail__envp(const struct vmm_spec *s, bool have_init)
{
    size_t n = s->agent_env ? json_object_size(s->agent_env) : 0;
    char **v = jail__strv_new(n + 6);
    if (!v)
        return NULL;
    size_t i = 0;
    bool ok = true;
    ok &= asprintf(&v[i++], "AIRLOCK_AGENT_LISTEN_FD=%d", JAIL_FD_LISTEN) > 0;
    if (have_init)
        ok &= asprintf(&v[i++], "AIRLOCK_AGENT_INIT_FD=%d", JAIL_FD_INIT) > 0;
    ok &= asprintf(&v[i++], "AIRLOCK_SANDBOX_ID=%s", s->id) > 0;
    ok &= (v[i++] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")) !=
          NULL;
    ok &= (v[i++] = strdup("HOME=/root")) != NULL;
    const char *k;
    json_t *val;
    if (s->agent_env) {
        json_object_foreach(s->agent_env, k, val)
        {
            ok &= asprintf(&v[i++], "%s=%s", k, json_string_value(val)) > 0;
        }
    }
    if (!ok) {
        jail__strv_free(v);
        return NULL;
    }
    return v;
}

static int jail__check_paths(const struct jail *j, struct al_error *err)
{
    const struct vmm_spec *s = j->spec;
    char p[PATH_MAX * 2];
    struct stat st;
    snprintf(p, sizeof p, "%s%s", s->agent_dir, s->agent_path + strlen("/.airlock"));
    if (stat(p, &st) < 0 || !S_ISREG(st.st_mode))
        return al_error_set(err, -ENOENT,
                            "the agent binary %s does not exist: build airlock-agent, or point "
                            "spec.agent.dir (or AIRLOCK_AGENT_DIR) at the directory that holds "
                            "bin/airlock-agent",
                            p);
    if (!(st.st_mode & S_IXOTH))
        return al_error_set(err, -EACCES,
                            "the agent binary %s is not executable by others "
                            "(mode %o): chmod 0755 it",
                            p, st.st_mode & 07777);
    for (size_t i = 0; i < s->n_binds; i++) {
        if (stat(s->binds[i].source, &st) < 0)
            return al_error_set(err, -errno, "spec.binds[%zu]: source %s: %s", i,
                                s->binds[i].source, strerror(errno));
        /* Shown through an overlay (child__ro_tree), which only a directory can be; a
         * volume is the root of its file system. */
        if (!S_ISDIR(st.st_mode))
            return al_error_set(err, -ENOTDIR,
                                "spec.binds[%zu]: source %s is not a directory (a bind is a "
                                "read-only directory tree: put the file in a directory of "
                                "its own and bind that)",
                                i, s->binds[i].source);
    }
    if (s->net_mode == VMM_NET_NETNS && j->restart_net_fd < 0 && stat(s->netns_path, &st) < 0)
        return al_error_set(err, -errno,
                            "spec.network.netns %s: %s (the network namespace must be created "
                            "before the sandbox, e.g. by the vswitch's pool)",
                            s->netns_path, strerror(errno));
    return 0;
}

static void jail__hosts(const struct vmm_spec *s, char *hosts, size_t hl, char *resolv, size_t rl)
{
    snprintf(hosts, hl,
             "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n",
             s->hostname);
    resolv[0] = '\0';
    size_t o = 0;
    for (size_t i = 0; i < s->n_dns && o < rl; i++)
        o += (size_t)snprintf(resolv + o, rl - o, "nameserver %s\n", s->dns[i]);
}

int jail_start(struct jail *j, int agent_listen_fd, struct al_error *err)
{
    const struct vmm_spec *s = j->spec;
    uint64_t t0 = al_now_ns();
    int rc;
    struct sock_filter *prog = NULL;
    size_t prog_len = 0;
    char **argv = NULL, **envp = NULL;
    al_autofree char *init = NULL;
    size_t init_len = 0;
    int sv[2] = {-1, -1}, errp[2] = {-1, -1}, logp[2] = {-1, -1}, initp[2] = {-1, -1};
    int orig_net = -1, target_net = -1, userns = -1;
    int mfds[VMM_MAX_BINDS + 1];
    size_t n_mfds = 0;
    struct jail_mnt_plan *plan = NULL;
    pid_t pid = -1;
    int pidfd = -1;
    bool net_switched = false;

    for (size_t i = 0; i < AL_ARRAY_SIZE(mfds); i++)
        mfds[i] = -1;
    if ((rc = jail__check_paths(j, err)))
        goto fail;

    /* Before anything is made: a clear refusal when the sandboxes together are at their
     * limit (the clone below would fail with a bare EAGAIN). */
    if ((rc = jail_cg_parent_room(&j->cg, JAIL_CG_START_PIDS, err)))
        goto fail;
    struct jail_cg_limits lim = {s->memory_bytes, s->pids, s->cpus};
    if (j->restarting) {
        /* A rollback: the sandbox's cgroups, emptied, with their limits. */
    } else if (j->cg_inherited) {
        /* The warm cgroups, renamed: usually created with these very limits. */
        if ((rc = jail_cg_relimit(&j->cg, &lim, &jail__warm.lim, err)))
            goto fail;
    } else if ((rc = jail_cg_create(&j->cg, &lim, err))) {
        goto fail;
    }
    j->cg_created = true;

    if ((rc = jail_seccomp_build(&prog, &prog_len))) {
        al_error_set(err, rc, "cannot build the seccomp filter: %s", strerror(-rc));
        goto fail;
    }
    plan = malloc(sizeof *plan);
    if (!plan) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    struct jail_mnt_opts mo = {.agent = true, .n_binds = s->n_binds};
    for (size_t i = 0; i < s->n_binds; i++)
        mo.bind_targets[i] = s->binds[i].target;
    if ((rc = jail_mnt_plan_build(&mo, plan))) {
        al_error_set(err, rc, "cannot build the mount plan: %s", strerror(-rc));
        goto fail;
    }
    json_t *io = vmm_spec_init_object(s);
    if (io && j->restart_token)
        json_object_set_new(io, "accessToken", json_string(j->restart_token));
    if (!io) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    init = al_json_dump(io);
    json_decref(io);
    if (!init) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    init_len = strlen(init);
    if (init_len > VMM_INIT_MAX_SIZE) {
        rc = al_error_set(err, -E2BIG,
                          "the agent's init data (env vars etc.) is %zu bytes, more than %u",
                          init_len, VMM_INIT_MAX_SIZE);
        goto fail;
    }
    argv = jail__argv(s);
    envp = jail__envp(s, true);
    if (!argv || !envp) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }

    struct jail__child c = {
        .j = j,
        .listen_fd = agent_listen_fd,
        .plan = plan,
        .prog = prog,
        .prog_len = prog_len,
        .landlock_abi = al_landlock_abi(),
        .argv = argv,
        .envp = envp,
        .restore = j->restore != NULL,
    };
    jail__hosts(s, c.hosts, sizeof c.hosts, c.resolv, sizeof c.resolv);
    char state_dir[512];
    snprintf(state_dir, sizeof state_dir, "%s", j->ids_dir);
    *strrchr(state_dir, '/') = '\0'; /* <state>/jail */
    snprintf(c.ws_path, sizeof c.ws_path, "%s/mnt", state_dir);
    if ((rc = mkdir(c.ws_path, 0755) < 0 && errno != EEXIST ? al_mkdir_p(c.ws_path, 0755) : 0)) {
        al_error_set(err, rc, "cannot create %s: %s", c.ws_path, strerror(-rc));
        goto fail;
    }

    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ||
        pipe2(errp, O_CLOEXEC) < 0 || (j->log_w < 0 && pipe2(logp, O_CLOEXEC) < 0) ||
        pipe2(initp, O_CLOEXEC) < 0) {
        rc = al_error_set(err, -errno, "cannot create pipes: %s", strerror(errno));
        goto fail;
    }
    if ((size_t)fcntl(initp[1], F_GETPIPE_SZ) < init_len + 1 &&
        fcntl(initp[1], F_SETPIPE_SZ, (int)(init_len + 4096)) < 0) {
        rc = al_error_set(err, -errno, "cannot size the init pipe: %s", strerror(errno));
        goto fail;
    }
    c.sync = sv[1];
    c.errw = errp[1];
    c.log_w = j->log_w >= 0 ? j->log_w : logp[1];
    c.init_r = initp[0];

    /* Network: the child is created inside the sandbox's network namespace; this process
     * goes back to its own right after the clone. A namespace made here ("none") is owned
     * by the host's user namespace, so root of the sandbox cannot reconfigure it. */
    orig_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (orig_net < 0) {
        rc = al_error_set(err, -errno, "open /proc/self/ns/net: %s", strerror(errno));
        goto fail;
    }
    j->timing.prepare_ns = al_now_ns() - t0;
    uint64_t t1 = al_now_ns();
    if (j->restart_net_fd >= 0) {
        if (setns(j->restart_net_fd, CLONE_NEWNET) < 0) {
            rc = al_error_set(err, -errno, "join the sandbox's network namespace again: %s",
                              strerror(errno));
            goto fail;
        }
    } else if (s->net_mode == VMM_NET_NETNS) {
        target_net = open(s->netns_path, O_RDONLY | O_CLOEXEC);
        if (target_net < 0) {
            rc = al_error_set(err, -errno, "open network namespace %s: %s", s->netns_path,
                              strerror(errno));
            goto fail;
        }
        if (setns(target_net, CLONE_NEWNET) < 0) {
            rc = al_error_set(err, -errno,
                              "join network namespace %s: %s (is it a network "
                              "namespace?)",
                              s->netns_path, strerror(errno));
            goto fail;
        }
    } else {
        if (unshare(CLONE_NEWNET) < 0) {
            rc = al_error_set(err, -errno, "create a network namespace: %s", strerror(errno));
            goto fail;
        }
    }
    net_switched = true;
    if (s->net_mode == VMM_NET_NONE && j->restart_net_fd < 0 && (rc = jail__lo_up(err)))
        goto fail;

    struct clone_args ca = {
        .flags =
            CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD,
        .pidfd = (uint64_t)(uintptr_t)&pidfd,
        .exit_signal = SIGCHLD,
    };
    pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
    if (pid == 0) {
        close(sv[0]);
        close(errp[0]);
        close(logp[0]);
        close(initp[1]);
        _exit(child__main(&c));
    }
    int clone_errno = errno;
    if (setns(orig_net, CLONE_NEWNET) < 0)
        al_die_errno(errno, "cannot return to the host network namespace");
    net_switched = false;
    if (pid < 0) {
        pid = -1;
        /* The room was there a moment ago; other sandboxes took it meanwhile. */
        if (clone_errno == EAGAIN && (rc = jail_cg_parent_room(&j->cg, 1, err)))
            goto fail;
        rc = al_error_set(err, -clone_errno,
                          "clone3 (new user, mount, pid, ipc, uts "
                          "namespaces): %s",
                          strerror(clone_errno));
        goto fail;
    }
    j->timing.clone_ns = al_now_ns() - t1;
    uint64_t t2 = al_now_ns();
    close(sv[1]);
    sv[1] = -1;
    close(errp[1]);
    errp[1] = -1;
    close(initp[0]);
    initp[0] = -1;

    char p[64], map[64];
    snprintf(map, sizeof map, "0 %u %u\n", j->host_uid, JAIL_IDS_PER_SLOT);
    snprintf(p, sizeof p, "/proc/%d/uid_map", (int)pid);
    if ((rc = jail__write_file(p, map))) {
        al_error_set(err, rc, "write %s: %s", p, strerror(-rc));
        goto fail;
    }
    snprintf(p, sizeof p, "/proc/%d/gid_map", (int)pid);
    if ((rc = jail__write_file(p, map))) {
        al_error_set(err, rc, "write %s: %s", p, strerror(-rc));
        goto fail;
    }
    snprintf(p, sizeof p, "/proc/%d/ns/user", (int)pid);
    userns = open(p, O_RDONLY | O_CLOEXEC);
    if (userns < 0) {
        rc = al_error_set(err, -errno, "open %s: %s", p, strerror(errno));
        goto fail;
    }

    /* Id-mapped, read-only clones of the template and the agent directory; plain
     * read-only clones for the spec's binds. */
    char tpath[PATH_MAX + 16];
    snprintf(tpath, sizeof tpath, "%s/rootfs", s->template_dir);
    const char *srcs[VMM_MAX_BINDS + 2];
    size_t nsrc = 0;
    srcs[nsrc++] = tpath;
    srcs[nsrc++] = s->agent_dir;
    for (size_t i = 0; i < s->n_binds; i++)
        srcs[nsrc++] = s->binds[i].source;
    for (size_t i = 0; i < nsrc; i++) {
        int fd = open_tree(AT_FDCWD, srcs[i], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (fd < 0) {
            rc = al_error_set(err, -errno, "clone mount of %s: %s", srcs[i], strerror(errno));
            goto fail;
        }
        mfds[n_mfds++] = fd;
        /* A volume (spec.volumes) is the one writable tree: id-mapped like the template, so
         * that what a sandbox's user writes is owned by that user in every sandbox. */
        bool volume = i >= 2 && s->binds[i - 2].volume;
        struct mount_attr ma = {
            .attr_set = (volume ? 0 : MOUNT_ATTR_RDONLY) | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        };
        if (i < 2 || volume) {
            ma.attr_set |= MOUNT_ATTR_IDMAP;
            ma.userns_fd = (uint64_t)userns;
        }
        if (mount_setattr(fd, "", AT_EMPTY_PATH, &ma, sizeof ma) < 0) {
            rc = al_error_set(err, -errno, "make %s a %s%s mount: %s%s", srcs[i],
                              volume ? "writable" : "read-only",
                              i < 2 || volume ? ", id-mapped" : "", strerror(errno),
                              i < 2 || volume
                                  ? " (the template, agent and volume directories must be on a "
                                    "file system that supports id-mapped mounts, e.g. ext4, "
                                    "xfs, btrfs or tmpfs)"
                                  : "");
            goto fail;
        }
    }
    if ((rc = jail__send_fds(sv[0], 'M', mfds, n_mfds))) {
        al_error_set(err, rc, "hand the mounts to the sandbox: %s", strerror(-rc));
        goto fail;
    }
    for (size_t i = 0; i < n_mfds; i++) {
        close(mfds[i]);
        mfds[i] = -1;
    }
    n_mfds = 0;
    if ((rc = al_write_all(initp[1], init, init_len)) < 0) {
        al_error_set(err, rc, "write the init data: %s", strerror(-rc));
        goto fail;
    }
    sodium_memzero(init, init_len);
    close(initp[1]);
    initp[1] = -1;
    /* While the child builds its root: the cgroups (see the child's side). */
    uint64_t tcg = al_now_ns();
    if (!j->cg_inherited && (rc = jail_cg_attach(&j->cg, pid, err)))
        goto fail;
    j->timing.cgroup_attach_ns = al_now_ns() - tcg;
    if (j->restore) {
        /* The child waits with its upper directory until it is filled. */
        uint64_t tr = al_now_ns();
        if ((rc = jail__expect(sv[0], errp[0], (int)s->start_timeout_ms,
                               &(struct jail__want){.tag = 'U', .fd = &j->upper_fd}, err)) ||
            (rc = jail_snapshot_fill(j, err)))
            goto fail;
        if ((rc = jail__send_fds(sv[0], 'F', NULL, 0))) {
            rc = jail__child_failed(errp[0], rc, err);
            goto fail;
        }
        j->timing.restore_ns = al_now_ns() - tr;
    }
    if ((rc = jail__send_fds(sv[0], 'C', NULL, 0))) {
        rc = jail__child_failed(errp[0], rc, err);
        goto fail;
    }
    j->timing.setup_ns = al_now_ns() - t2;
    uint64_t t3 = al_now_ns();

    /* The child hands over its upper directory ('U', unless it did so above), then reports
     * 'R' when it is ready to exec, or an error on errp. */
    if (!j->restore &&
        (rc = jail__expect(sv[0], errp[0], (int)s->start_timeout_ms,
                           &(struct jail__want){.tag = 'U', .fd = &j->upper_fd}, err)))
        goto fail;
    if ((rc = jail__expect(sv[0], errp[0], (int)s->start_timeout_ms,
                           &(struct jail__want){
                               .tag = 'R', .data = &j->timing.child, .len = sizeof j->timing.child},
                           err)))
        goto fail;
    j->timing.child_ns = al_now_ns() - t3;
    uint64_t t4 = al_now_ns();
    if ((rc = jail__send_fds(sv[0], 'G', NULL, 0))) {
        rc = jail__child_failed(errp[0], rc, err);
        goto fail;
    }
    /* The error pipe closes at a successful execve; a message means it failed. */
    char msg[AL_ERROR_MSG_MAX];
    ssize_t n;
    do {
        n = read(errp[0], msg, sizeof msg - 1);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        msg[n] = '\0';
        rc = al_error_set(err, -EIO, "sandbox setup failed at %s", msg);
        goto fail;
    }
    j->timing.exec_ns = al_now_ns() - t4;
    j->timing.total_ns = al_now_ns() - t0;

    close(sv[0]);
    close(errp[0]);
    close(orig_net);
    if (target_net >= 0)
        close(target_net);
    close(userns);
    free(prog);
    free(plan);
    jail__strv_free(argv);
    jail__strv_free(envp);
    j->pid = pid;
    j->pidfd = pidfd;
    if (logp[0] >= 0) {
        j->log_fd = logp[0];
        j->log_w = logp[1];
    }
    return 0;

fail:
    if (net_switched && setns(orig_net, CLONE_NEWNET) < 0)
        al_die_errno(errno, "cannot return to the host network namespace");
    if (pid > 0) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (pidfd >= 0)
        close(pidfd);
    if (j->upper_fd >= 0) {
        close(j->upper_fd);
        j->upper_fd = -1;
    }
    for (size_t i = 0; i < n_mfds; i++)
        close(mfds[i]);
    int all[] = {sv[0],    sv[1],    errp[0],  errp[1],    logp[0], logp[1],
                 initp[0], initp[1], orig_net, target_net, userns};
    for (size_t i = 0; i < AL_ARRAY_SIZE(all); i++)
        if (all[i] >= 0)
            close(all[i]);
    if (init)
        sodium_memzero(init, init_len);
    free(prog);
    free(plan);
    jail__strv_free(argv);
    jail__strv_free(envp);
    if (j->cg_created) {
        if (j->cg_inherited)
            jail_warm_release(); /* out of the cgroups before killing what is in them */
        jail_cg_kill_all(&j->cg, NULL);
        for (int i = 0; i < 200 && jail_cg_nprocs(&j->cg) > 0; i++)
            usleep(5000);
        jail_cg_destroy(&j->cg, NULL);
        j->cg_created = false;
    }
    return rc;
}

/* ---- running sandbox -------------------------------------------------------------- */

int jail_pause(struct jail *j, struct al_error *err)
{
    return jail_cg_freeze(&j->cg, true, 5000, err);
}

int jail_resume(struct jail *j, struct al_error *err)
{
    return jail_cg_freeze(&j->cg, false, 5000, err);
}

bool jail_is_paused(const struct jail *j)
{
    return jail_cg_is_frozen(&j->cg);
}

int jail_terminate(struct jail *j)
{
    if (j->pidfd >= 0 && syscall(SYS_pidfd_send_signal, j->pidfd, SIGTERM, NULL, 0) == 0)
        return 0;
    return j->pid > 0 && kill(j->pid, SIGTERM) < 0 ? -errno : 0;
}

int jail_kill(struct jail *j, struct al_error *err)
{
    /* Killing PID 1 of the sandbox makes the kernel kill every process in its PID
     * namespace; the cgroup sweep catches anything in between. A frozen task only dies once
     * thawed, which jail_cg_kill_all does. */
    if (j->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
    else if (j->pid > 0)
        kill(j->pid, SIGKILL);
    if (!j->cg_created)
        return 0;
    if (j->cg_inherited)
        jail_warm_release();
    int rc = jail_cg_kill_all(&j->cg, err);
    return rc < 0 ? rc : 0;
}

/* Kills the whole tree and waits (bounded) until the agent is reaped and the cgroups are
 * empty: the state a rollback builds the sandbox again from. */
static int jail__kill_wait(struct jail *j, unsigned timeout_ms, struct al_error *err)
{
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    bool reaped = false;
    for (;;) {
        jail_kill(j, NULL); /* again each round: a process forked between walk and kill */
        if (!reaped) {
            int st;
            pid_t r = waitpid(j->pid, &st, WNOHANG);
            reaped = r == j->pid || (r < 0 && errno == ECHILD);
        }
        if (reaped && jail_cg_nprocs(&j->cg) <= 0)
            return 0;
        if (al_now_ns() > deadline)
            return al_error_set(err, -ETIMEDOUT,
                                "processes of sandbox %s are still alive %u ms after SIGKILL",
                                j->spec->id, timeout_ms);
        if (!reaped && j->pidfd >= 0)
            jail__wait_readable(j->pidfd, 5); /* readable once the agent has exited */
        else
            usleep(2000); /* the cgroup empties as the last processes are released */
    }
}

int jail_rollback(struct jail *j, const char *dir, const char *access_token, int agent_listen_fd,
                  json_t **info, struct al_error *err)
{
    *info = NULL;
    if (j->pid <= 0 || j->upper_fd < 0)
        return al_error_set(err, -EINVAL, "sandbox %s is not running", j->spec->id);
    if (!vmm_path_normalised(dir) || strcmp(dir, "/") == 0)
        return al_error_set(err, -EINVAL, "\"path\" must be a normalised absolute path");
    /* Everything that can be checked is checked before the sandbox is stopped. */
    int rc = jail_snapshot_check(j, dir, true, err);
    if (rc)
        return rc;
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/ns/net", (int)j->pid);
    int net = open(p, O_RDONLY | O_CLOEXEC);
    if (net < 0)
        return al_error_set(err, -errno, "open %s: %s", p, strerror(errno));
    uint64_t t0 = al_now_ns();
    rc = jail__kill_wait(j, 10000, err);
    uint64_t t1 = al_now_ns();
    if (j->pidfd >= 0)
        close(j->pidfd);
    j->pidfd = -1;
    j->pid = -1;
    if (j->upper_fd >= 0)
        close(j->upper_fd); /* the old writable layer goes with it */
    j->upper_fd = -1;
    if (rc) {
        close(net);
        return rc;
    }
    /* The cgroups are this sandbox's now (a warm start's were renamed to it, and
     * airlock-vmm left them): the new first process is moved into them. */
    j->cg_inherited = false;
    j->restarting = true;
    j->restart_net_fd = net;
    j->restart_token = access_token;
    j->restore = dir;
    memset(&j->timing, 0, sizeof j->timing);
    rc = jail_start(j, agent_listen_fd, err);
    j->restarting = false;
    j->restart_net_fd = -1;
    j->restart_token = NULL;
    j->restore = j->spec->jail_restore;
    close(net);
    if (rc)
        return rc;
    uint64_t t2 = al_now_ns();
    *info = json_pack("{s:s,s:f,s:f,s:f}", "path", dir, "ms", (double)(t2 - t0) / 1e6, "stop_ms",
                      (double)(t1 - t0) / 1e6, "restore_ms", (double)j->timing.restore_ns / 1e6);
    al_info("sandbox %s: rolled back to %s in %.1f ms (processes stopped in %.1f ms, files "
            "restored in %.1f ms)",
            j->spec->id, dir, (double)(t2 - t0) / 1e6, (double)(t1 - t0) / 1e6,
            (double)j->timing.restore_ns / 1e6);
    return 0;
}

int jail_nprocs(const struct jail *j)
{
    return j->cg_created ? jail_cg_nprocs(&j->cg) : 0;
}

int jail_reclaim(struct jail *j, struct al_error *err)
{
    int rc = 0;
    if (j->log_fd >= 0) {
        close(j->log_fd);
        j->log_fd = -1;
    }
    if (j->log_w >= 0) {
        close(j->log_w);
        j->log_w = -1;
    }
    if (j->pidfd >= 0) {
        close(j->pidfd);
        j->pidfd = -1;
    }
    if (j->upper_fd >= 0) {
        close(j->upper_fd);
        j->upper_fd = -1;
    }
    if (j->cg_inherited)
        jail_warm_release();
    if (j->cg_created) {
        rc = jail_cg_destroy(&j->cg, err);
        if (rc == 0)
            j->cg_created = false;
    }
    if (j->have_slot && rc == 0) {
        int r = jail_idmap_release(&j->ids, j->slot, j->spec->id);
        if (r && r != -ENOENT)
            rc = al_error_set(err, r, "release id slot %u: %s", j->slot, strerror(-r));
        else
            j->have_slot = false;
    }
    return rc;
}

json_t *jail_stats(const struct jail *j)
{
    struct jail_cg_stats st;
    jail_cg_stats(&j->cg, &st);
    json_t *o = json_object();
    json_object_set_new(o, "cpu_usage_ns", json_integer((json_int_t)st.cpu_usage_ns));
    json_object_set_new(o, "cpus", json_real(j->spec->cpus));
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)st.memory_bytes));
    json_object_set_new(o, "memory_peak_bytes", json_integer((json_int_t)st.memory_peak_bytes));
    json_object_set_new(o, "memory_limit_bytes", json_integer((json_int_t)j->spec->memory_bytes));
    json_object_set_new(o, "oom_kills", json_integer((json_int_t)st.oom_kills));
    json_object_set_new(o, "pids", json_integer((json_int_t)st.pids));
    json_object_set_new(o, "pids_limit", json_integer((json_int_t)j->spec->pids));
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/root/", (int)j->pid);
    struct statfs sf;
    if (j->pid > 0 && statfs(p, &sf) == 0) {
        json_object_set_new(o, "disk_used_bytes",
                            json_integer((json_int_t)((sf.f_blocks - sf.f_bfree) * sf.f_bsize)));
        json_object_set_new(o, "disk_total_bytes",
                            json_integer((json_int_t)(sf.f_blocks * sf.f_bsize)));
    }
    return o;
}

/* ---- cleanup after a crash --------------------------------------------------------- */

static int jail__drain_cgroup(struct jail_cg *cg, unsigned timeout_ms, struct al_error *err)
{
    if (!jail_cg_exists(cg))
        return 0;
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int n = jail_cg_nprocs(cg);
        if (n <= 0)
            break;
        jail_cg_kill_all(cg, NULL);
        if (al_now_ns() > deadline)
            return al_error_set(err, -ETIMEDOUT,
                                "%d processes of cgroup %s did not exit within %u ms", n,
                                cg->uniq[0], timeout_ms);
        usleep(5000);
    }
    /* A crashed sandbox may have been frozen; a frozen empty cgroup still removes fine. */
    return jail_cg_destroy(cg, err);
}

int jail_cleanup_record(const json_t *rec, unsigned timeout_ms, struct al_error *err)
{
    const char *id = NULL, *parent = NULL, *ids_dir = NULL;
    int64_t base = 0, slots = 0, slot = -1;
    int rc;
    if ((rc = al_json_get_str(rec, "id", true, &id, "record", err)) ||
        (rc = al_json_get_str(rec, "cgroup_parent", true, &parent, "record", err)) ||
        (rc = al_json_get_str(rec, "ids_dir", true, &ids_dir, "record", err)) ||
        (rc = al_json_get_int(rec, "uid_base", true, 0, 0xffffffffll, &base, "record", err)) ||
        (rc = al_json_get_int(rec, "uid_slots", true, 1, 0xffffffffll, &slots, "record", err)) ||
        (rc = al_json_get_int(rec, "slot", false, 0, 0xffffffffll, &slot, "record", err)))
        return rc;
    struct jail_cg_layout layout;
    if ((rc = jail__get_layout(&layout, err)))
        return rc;
    struct jail_cg cg;
    if ((rc = jail_cg_init(&cg, &layout, parent, id, err)))
        return rc;
    if ((rc = jail__drain_cgroup(&cg, timeout_ms, err)))
        return rc;
    if (slot >= 0) {
        struct jail_idmap_cfg ids = {(uint32_t)base, (uint32_t)slots, ids_dir};
        int r = jail_idmap_release(&ids, (uint32_t)slot, id);
        if (r && r != -ENOENT && r != -EPERM)
            return al_error_set(err, r, "release id slot %lld: %s", (long long)slot, strerror(-r));
    }
    return 0;
}

struct jail__sweep_ctx {
    const struct jail_sweep_opts *o;
    struct jail_cg_layout layout;
    int reclaimed;
    int first_err;
    struct al_error *err;
};

/* warm-<pid> cgroups belong to a waiting airlock-vmm while that process lives. */
static bool jail__warm_live(const char *id)
{
    if (strncmp(id, "warm-", 5) != 0)
        return false;
    char *end;
    long pid = strtol(id + 5, &end, 10);
    if (*end || pid <= 0)
        return false;
    char p[64], comm[32] = "";
    snprintf(p, sizeof p, "/proc/%ld/comm", pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, comm, sizeof comm - 1);
    close(fd);
    comm[n > 0 ? n : 0] = '\0';
    return strncmp(comm, "airlock-vmm", 11) == 0;
}

static int jail__sweep_cg(const char *id, void *arg)
{
    struct jail__sweep_ctx *x = arg;
    if (x->o->only && strcmp(id, x->o->only) != 0 && strncmp(id, "warm-", 5) != 0)
        return 0;
    if (x->o->is_live(id, x->o->arg) || jail__warm_live(id))
        return 0;
    struct jail_cg cg;
    struct al_error e = {0};
    if (jail_cg_init(&cg, &x->layout, x->o->cgroup_parent, id, &e) == 0 &&
        jail__drain_cgroup(&cg, 5000, &e) == 0) {
        x->reclaimed++;
        al_info("sweep: removed the cgroups of sandbox %s", id);
    } else if (!x->first_err) {
        x->first_err = al_error_set(x->err, e.code ? e.code : -EIO, "sandbox %s: %s", id, e.msg);
    }
    return 0;
}

struct jail__sweep_slots {
    const struct jail_sweep_opts *o;
    const struct jail_idmap_cfg *ids;
    int reclaimed;
};

static int jail__sweep_slot(uint32_t slot, const char *holder, void *arg)
{
    struct jail__sweep_slots *x = arg;
    if (x->o->only && strcmp(holder, x->o->only) != 0)
        return 0;
    if (vmm_id_valid(holder) && x->o->is_live(holder, x->o->arg))
        return 0;
    if (jail_idmap_release(x->ids, slot, holder) == 0) {
        x->reclaimed++;
        al_info("sweep: released id slot %u of sandbox %s", slot, holder);
    }
    return 0;
}

int jail_sweep(const struct jail_sweep_opts *o, struct al_error *err)
{
    struct jail__sweep_ctx x = {.o = o, .err = err};
    int rc = jail__get_layout(&x.layout, err);
    if (rc)
        return rc;
    rc = jail_cg_list(&x.layout, o->cgroup_parent, jail__sweep_cg, &x);
    if (rc < 0)
        return al_error_set(err, rc, "list cgroups under %s: %s", o->cgroup_parent, strerror(-rc));
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/jail/idslots", o->state_dir);
    struct jail_idmap_cfg ids = {o->uid_base, o->uid_slots, dir};
    struct jail__sweep_slots ss = {.o = o, .ids = &ids};
    int r = jail_idmap_foreach(&ids, jail__sweep_slot, &ss);
    if (r < 0 && !x.first_err)
        x.first_err = al_error_set(err, r, "read the id slot map %s.map: %s", dir, strerror(-r));
    x.reclaimed += ss.reclaimed;
    /* Slot files of earlier versions. */
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            char *end;
            unsigned long slot = strtoul(e->d_name, &end, 10);
            if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end)
                continue;
            char holder[128] = "", p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            al_autofree char *txt = NULL;
            if (al_read_file(p, 127, &txt, NULL, NULL) == 0) {
                snprintf(holder, sizeof holder, "%s", txt);
                holder[strcspn(holder, "\n")] = '\0';
            }
            if ((o->only && strcmp(holder, o->only) != 0) ||
                (vmm_id_valid(holder) && o->is_live(holder, o->arg)))
                continue;
            if (unlink(p) == 0) {
                x.reclaimed++;
                al_info("sweep: released id slot %lu of sandbox %s", slot, holder);
            }
        }
        closedir(d);
    }
    return x.first_err ? x.first_err : x.reclaimed;
}

json_t *jail_limit_parent(const char *cgroup_parent, const struct jail_cg_limits *lim,
                          struct al_error *err)
{
    struct jail_cg_layout layout;
    struct jail_cg_stats st;
    if (jail__get_layout(&layout, err) || jail_cg_parent_limit(&layout, cgroup_parent, lim, err) ||
        jail_cg_parent_usage(&layout, cgroup_parent, &st, err))
        return NULL;
    /* v1 reports "no memory limit" as the largest page-aligned number. */
    bool mem_unlimited = st.memory_limit_bytes >= (UINT64_MAX >> 2);
    json_t *r = json_object();
    json_object_set_new(r, "parent", json_string(cgroup_parent));
    json_object_set_new(r, "cgroup_version", json_integer(layout.version));
    json_object_set_new(r, "pids_max",
                        st.pids_limit == UINT64_MAX ? json_null()
                                                    : json_integer((json_int_t)st.pids_limit));
    json_object_set_new(r, "pids_current", json_integer((json_int_t)st.pids));
    json_object_set_new(r, "memory_max",
                        mem_unlimited ? json_null()
                                      : json_integer((json_int_t)st.memory_limit_bytes));
    json_object_set_new(r, "memory_current", json_integer((json_int_t)st.memory_bytes));
    return r;
}
