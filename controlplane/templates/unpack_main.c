/* controlplane/templates/unpack_main: airlock-unpack, the confined helper that turns an
 * image's layers into a root filesystem (started by tpl_unpack_image, unpack.c; not a
 * command for people).
 *
 *   airlock-unpack --ids-dir DIR --uid-base N --uid-slots N --max-path N --max-entries N
 *                  --max-bytes N --max-ratio N DIGEST...
 *   fd 3: the (empty) root directory to fill; fd 4: the blob cache directory (blobs/sha256)
 *   fd 1: one JSON line per layer, then {"result":"ok",...} or {"result":"error",...}
 *
 *   airlock-unpack --copy --ids-dir DIR ... --src SRC --dest DEST [--dest-dir 1]
 *                  --owner USER[:GROUP] [--mode OCTAL]
 *   a COPY step instead (copy.h): fd 4 is the step's archive; fd 1 gets one result line.
 *
 *   airlock-unpack --layer --ids-dir DIR ...
 *   one layer onto a root that has files already (a RUN step's changes, made by
 *   tpl_layer_diff in the build sandbox's snapshot): fd 4 is the layer; its whiteouts
 *   remove what the root has. Output as for image layers.
 *
 * Owns: confining the code that reads untrusted image data. It runs as host root only long
 * enough to open the layer blobs, claim an id slot of its own (vmm/jail/idmap: the same
 * allocator as sandboxes, so its ids are nobody else's), and make an id-mapped mount of the
 * root directory for a child in new user, mount, network, PID, IPC, UTS and cgroup
 * namespaces. The child (uid 0 of its namespace = the slot's first host id) sees files it
 * makes on that mount as owned by ids 0..65535 on disk, which is what the jail's id-mapped
 * template mount expects. Before it reads a byte of a layer, the child pivots into an empty
 * tmpfs (no host file system in its mount namespace), sets rlimits, restricts itself with
 * Landlock to the root directory's tree (common/confine, the jailer), keeps only the capabilities
 * unpacking needs (chown, DAC override, fowner, fsetid, setfcap: within its user namespace),
 * sets no_new_privs and installs the jail's seccomp filter (vmm/jail/seccomp). It has no
 * network (an empty network namespace) and no descriptor but the layers, the root, its
 * output and stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apply.h"
#include "common/confine.h"
#include "copy.h"
#include "common/json.h"
#include "layer.h"
#include "tar.h"
#include "vmm/jail/idmap.h"
#include "vmm/jail/seccomp.h"

#define ROOT_FD    3
#define BLOBS_FD   4
#define ARCHIVE_FD 4 /* --copy */

struct args {
    const char *ids_dir;
    uint32_t uid_base, uid_slots;
    uint32_t max_path, max_ratio;
    uint64_t max_entries, max_bytes;
    const char *digests[TPL_MAX_LAYERS];
    int fds[TPL_MAX_LAYERS];
    size_t n;
    bool layer; /* --layer: fd 4 is one layer */
    /* --copy */
    bool copy, dest_is_dir;
    const char *src, *dest, *owner;
    int mode;
};

static void out_json(json_t *j)
{
    char *s = al_json_dump(j);
    if (s) {
        size_t l = strlen(s);
        s[l] = '\n';
        (void)!write(STDOUT_FILENO, s, l + 1);
        free(s);
    }
    json_decref(j);
}

static int fail(int layer, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int layer, const char *fmt, ...)
{
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    json_t *j = json_pack("{s:s, s:s}", "result", "error", "error", m);
    if (layer > 0)
        json_object_set_new(j, "layer", json_integer(layer));
    out_json(j);
    return 1;
}

/* ---- the confined child ------------------------------------------------------------- */

static int child__recv_fd(int sock)
{
    char c;
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&c, 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (n != 1 || c != 'M' || !cm || cm->cmsg_type != SCM_RIGHTS)
        return -EPROTO;
    int fd;
    memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
}

/* No host file system left in this mount namespace: an empty tmpfs is the root. */
static int child__empty_root(void)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return -errno;
    if (mount("airlock-unpack", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=4k,mode=0555") < 0)
        return -errno;
    if (chdir("/tmp") < 0)
        return -errno;
    return al_confine_pivot_cwd(NULL);
}

static int child__confine(int root, size_t nfds)
{
    struct al_error e = {0};
    if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
        return fail(0, "cannot become root of the unpacker's user namespace: %s", strerror(errno));
    int rc = child__empty_root();
    if (rc)
        return fail(0, "cannot give the unpacker an empty root: %s", strerror(-rc));
    struct al_rlimits rl = {
        .nofile = nfds + 32,
        .nproc = 64,
        .fsize = 0,
        .core = 0,
    };
    if (al_confine_rlimits(&rl, &e))
        return fail(0, "%s", e.msg);
    int abi = al_landlock_abi();
    if (abi > 0 && al_confine_landlock_beneath(abi, root, &e))
        return fail(0, "%s", e.msg);
    uint64_t keep = (1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) |
                    (1ull << CAP_FSETID) | (1ull << CAP_SETFCAP);
    if (al_confine_caps(keep, &e))
        return fail(0, "%s", e.msg);
    if (al_confine_no_new_privs(&e))
        return fail(0, "%s", e.msg);
    struct sock_filter *prog;
    size_t len;
    if ((rc = jail_seccomp_build(&prog, &len)))
        return fail(0, "cannot build the seccomp filter: %s", strerror(-rc));
    rc = al_sc_install(prog, len, 0, &e);
    free(prog);
    if (rc)
        return fail(0, "%s", e.msg);
    return 0;
}

static const char *comp_name(enum tpl_compression c)
{
    return c == TPL_COMP_GZIP ? "gzip" : c == TPL_COMP_ZSTD ? "zstd" : "none";
}

static int child__unpack(const struct args *a, int root)
{
    struct tpl_apply *ap;
    if (tpl_apply_new(root, a->max_path, a->max_entries, a->max_bytes, &ap))
        return fail(0, "out of memory");
    uint64_t out_total = 0;
    for (size_t i = 0; i < a->n; i++) {
        int li = (int)i + 1;
        struct tpl_layer_stream *ls;
        uint64_t left = a->max_bytes > out_total ? a->max_bytes - out_total : 0;
        /* The tar framing (headers, padding) counts too: a little room above the data. */
        if (tpl_layer_open(a->fds[i], a->max_ratio, left + (a->max_entries + 64) * 1024, &ls)) {
            tpl_apply_free(ap);
            return fail(li, "layer %d: cannot read its blob", li);
        }
        struct tpl_tar *t;
        if (tpl_tar_open(tpl_layer_read, ls, a->max_path, &t)) {
            tpl_layer_free(ls);
            tpl_apply_free(ap);
            return fail(li, "out of memory");
        }
        tpl_apply_layer(ap, (unsigned)li);
        int rc;
        const struct tpl_tar_entry *e;
        while ((rc = tpl_tar_next(t, &e)) == 1) {
            char msg[700];
            if (tpl_apply_entry(ap, t, e, msg, sizeof msg) < 0) {
                char p[300];
                al_json_escape(e->path, p, sizeof p);
                int r = fail(li, "layer %d, entry '%s': %s%s%s", li, p, msg,
                             strcmp(tpl_layer_error(ls), "no error") ? ": " : "",
                             strcmp(tpl_layer_error(ls), "no error") ? tpl_layer_error(ls) : "");
                tpl_tar_free(t);
                tpl_layer_free(ls);
                tpl_apply_free(ap);
                return r;
            }
        }
        char diff_id[TPL_DIGEST_LEN + 1] = "";
        if (rc == 0)
            rc = tpl_layer_finish(ls, diff_id);
        if (rc < 0) {
            bool lerr = strcmp(tpl_layer_error(ls), "no error") != 0;
            int r = fail(li, "layer %d: %s", li, lerr ? tpl_layer_error(ls) : tpl_tar_error(t));
            tpl_tar_free(t);
            tpl_layer_free(ls);
            tpl_apply_free(ap);
            return r;
        }
        out_total += tpl_layer_out_bytes(ls);
        out_json(json_pack(
            "{s:i, s:s, s:s, s:I, s:I, s:I}", "layer", li, "diff_id", diff_id, "compression",
            comp_name(tpl_layer_compression(ls)), "in", (json_int_t)tpl_layer_in_bytes(ls), "out",
            (json_int_t)tpl_layer_out_bytes(ls), "entries", (json_int_t)tpl_tar_count(t)));
        tpl_tar_free(t);
        tpl_layer_free(ls);
        close(a->fds[i]);
    }
    const struct tpl_apply_stats *st = tpl_apply_stats(ap);
    out_json(json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "result", "ok", "entries",
                       (json_int_t)st->entries, "bytes", (json_int_t)st->bytes, "whiteouts",
                       (json_int_t)st->whiteouts, "devices_skipped",
                       (json_int_t)st->devices_skipped, "xattrs_skipped",
                       (json_int_t)st->xattrs_skipped, "ids_clamped", (json_int_t)st->ids_clamped));
    tpl_apply_free(ap);
    return 0;
}

/* A COPY step's archive into the root (copy.h). */
static int child__copy(const struct args *a, int root)
{
    struct tpl_layer_stream *ls;
    if (tpl_layer_open(ARCHIVE_FD, a->max_ratio, a->max_bytes + (a->max_entries + 64) * 1024, &ls))
        return fail(0, "cannot read the archive");
    struct tpl_tar *t;
    if (tpl_tar_open(tpl_layer_read, ls, a->max_path, &t)) {
        tpl_layer_free(ls);
        return fail(0, "out of memory");
    }
    char msg[1024] = "";
    struct tpl_copy_opts o = {
        .src = a->src,
        .dest = a->dest,
        .dest_is_dir = a->dest_is_dir,
        .mode = a->mode,
        .max_path = a->max_path,
        .max_entries = a->max_entries,
        .max_bytes = a->max_bytes,
    };
    struct tpl_copy_result res;
    char diff_id[TPL_DIGEST_LEN + 1];
    int rc = tpl_copy_owner(root, a->owner, &o.uid, &o.gid, msg, sizeof msg);
    if (rc == 0)
        rc = tpl_copy_apply(root, t, &o, &res, msg, sizeof msg);
    if (rc == 0 && tpl_layer_finish(ls, diff_id) < 0) {
        rc = -EIO;
        snprintf(msg, sizeof msg, "%s", tpl_layer_error(ls));
    }
    if (rc < 0) {
        bool lerr = strcmp(tpl_layer_error(ls), "no error") != 0;
        int r = fail(0, "%s%s%s", msg, lerr && !strstr(msg, tpl_layer_error(ls)) ? ": " : "",
                     lerr && !strstr(msg, tpl_layer_error(ls)) ? tpl_layer_error(ls) : "");
        tpl_tar_free(t);
        tpl_layer_free(ls);
        return r;
    }
    out_json(json_pack("{s:s, s:I, s:I, s:I, s:b, s:s}", "result", "ok", "entries",
                       (json_int_t)res.entries, "files", (json_int_t)res.files, "bytes",
                       (json_int_t)res.bytes, "single", res.single, "where", res.where));
    tpl_tar_free(t);
    tpl_layer_free(ls);
    return 0;
}

static int child_main(const struct args *a, int sock, pid_t parent)
{
    /* PID 1 of a new PID namespace: getppid() is 0. A parent that died before the death
     * signal was armed shows as the end of the socket below. */
    (void)parent;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(ROOT_FD); /* the host's view of the root: the child uses the id-mapped mount only */
    int root = child__recv_fd(sock);
    close(sock);
    if (root < 0)
        return fail(0, "the unpacker did not get its mount");
    int rc = child__confine(root, a->copy ? 1 : a->n);
    if (rc)
        return rc;
    return a->copy ? child__copy(a, root) : child__unpack(a, root);
}

/* ---- the privileged parent ---------------------------------------------------------- */

static int write_file(const char *path, const char *data)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, data, strlen(data));
    int e = errno;
    close(fd);
    return n == (ssize_t)strlen(data) ? 0 : -(n < 0 ? e : EIO);
}

static int send_fd(int sock, int fd)
{
    char c = 'M';
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof ctl);
    struct iovec iov = {&c, 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    return sendmsg(sock, &mh, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

/* The root directory as an id-mapped mount for the child's user namespace. */
static int idmapped_root(pid_t child, char *msg, size_t len)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/ns/user", (int)child);
    int userns = open(p, O_RDONLY | O_CLOEXEC);
    if (userns < 0) {
        snprintf(msg, len, "open %s: %s", p, strerror(errno));
        return -errno;
    }
    int fd = (int)syscall(SYS_open_tree, ROOT_FD, "",
                          AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        close(userns);
        snprintf(msg, len, "cannot clone a mount of the root directory: %s", strerror(e));
        return -e;
    }
    struct mount_attr ma = {
        .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        .userns_fd = (uint64_t)userns,
    };
    int rc = 0;
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &ma, sizeof ma) < 0) {
        rc = -errno;
        snprintf(msg, len,
                 "cannot make an id-mapped mount of the root directory: %s (it must be on a "
                 "file system with id-mapped mounts: ext4, xfs, btrfs, tmpfs)",
                 strerror(errno));
        close(fd);
        fd = rc;
    }
    close(userns);
    return fd;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || e == s || *e)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (strncmp(k, "--", 2) != 0) {
            if (a->n >= TPL_MAX_LAYERS || !tpl_digest_valid(k))
                return fail(0, "bad layer digest '%s' (or too many layers)", k);
            a->digests[a->n++] = k;
            continue;
        }
        if (strcmp(k, "--copy") == 0) {
            a->copy = true;
            continue;
        }
        if (strcmp(k, "--layer") == 0) {
            a->layer = true;
            continue;
        }
        if (i + 1 >= argc)
            return fail(0, "%s needs a value", k);
        const char *v = argv[++i];
        uint64_t n = 0;
        const char **str = strcmp(k, "--ids-dir") == 0 ? &a->ids_dir
                           : strcmp(k, "--src") == 0   ? &a->src
                           : strcmp(k, "--dest") == 0  ? &a->dest
                           : strcmp(k, "--owner") == 0 ? &a->owner
                                                       : NULL;
        if (str) {
            *str = v;
            continue;
        }
        if (strcmp(k, "--mode") == 0) {
            char *e;
            unsigned long m = strtoul(v, &e, 8);
            if (!v[0] || *e || m > 07777)
                return fail(0, "--mode: '%s' is not an octal mode", v);
            a->mode = (int)m;
            continue;
        }
        if (parse_u64(v, &n))
            return fail(0, "%s: '%s' is not a number", k, v);
        if (strcmp(k, "--uid-base") == 0)
            a->uid_base = (uint32_t)n;
        else if (strcmp(k, "--uid-slots") == 0)
            a->uid_slots = (uint32_t)n;
        else if (strcmp(k, "--max-path") == 0)
            a->max_path = (uint32_t)n;
        else if (strcmp(k, "--max-ratio") == 0)
            a->max_ratio = (uint32_t)n;
        else if (strcmp(k, "--max-entries") == 0)
            a->max_entries = n;
        else if (strcmp(k, "--max-bytes") == 0)
            a->max_bytes = n;
        else if (strcmp(k, "--dest-dir") == 0)
            a->dest_is_dir = n != 0;
        else
            return fail(0, "unknown option %s", k);
    }
    if (a->copy && (a->n || !a->src || !a->dest || a->dest[0] != '/' || !a->owner))
        return fail(0, "usage: airlock-unpack --copy ... --src SRC --dest /DEST --owner OWNER "
                       "(and no layer digests)");
    if (a->layer && (a->n || a->copy))
        return fail(0, "usage: airlock-unpack --layer ... (fd 4: the layer; no digests)");
    if (!a->ids_dir || (!a->n && !a->copy && !a->layer) || !a->max_path || !a->max_ratio ||
        !a->max_entries || !a->max_bytes)
        return fail(0, "usage: airlock-unpack --ids-dir DIR --uid-base N --uid-slots N "
                       "--max-path N --max-entries N --max-bytes N --max-ratio N DIGEST...");
    return 0;
}

int main(int argc, char **argv)
{
    struct args a = {
        .uid_base = JAIL_ID_BASE_DEFAULT, .uid_slots = JAIL_ID_SLOTS_DEFAULT, .mode = -1};
    if (parse_args(argc, argv, &a))
        return 2;
    struct stat st;
    if (fstat(ROOT_FD, &st) < 0 || !S_ISDIR(st.st_mode) || fstat(BLOBS_FD, &st) < 0 ||
        (a.copy || a.layer ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode)))
        return fail(0, a.copy    ? "fd 3 must be the root directory and fd 4 the archive"
                       : a.layer ? "fd 3 must be the root directory and fd 4 the layer"
                                 : "fd 3 must be the root directory and fd 4 the blob directory");
    if (a.layer) {
        a.digests[0] = "layer";
        a.fds[0] = BLOBS_FD;
        a.n = 1;
    }
    for (size_t i = 0; i < a.n && !a.layer; i++) {
        a.fds[i] = openat(BLOBS_FD, a.digests[i] + 7, O_RDONLY | O_NOFOLLOW);
        if (a.fds[i] < 0)
            return fail((int)i + 1, "layer %zu: blob %s is not in the cache: %s", i + 1,
                        a.digests[i], strerror(errno));
    }
    if (!a.copy && !a.layer)
        close(BLOBS_FD);
    struct jail_idmap_cfg ids = {a.uid_base, a.uid_slots, a.ids_dir};
    char id[64];
    snprintf(id, sizeof id, "unpack-%d", (int)getpid());
    uint32_t slot;
    int hold = -1;
    struct al_error e = {0};
    /* Held, not merely claimed: a jail sweep meanwhile would take "unpack-PID" for the slot
     * of a crashed sandbox. The child inherits the hold, so the slot stays taken until the
     * child is gone too, even if this process is killed first. */
    if (jail_idmap_alloc_held(&ids, id, &slot, &hold, &e))
        return fail(0, "%s", e.msg);
    uint32_t host = jail_idmap_host_base(&ids, slot);
    int rc = 1;
    int sv[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        fail(0, "socketpair: %s", strerror(errno));
        goto out;
    }
    pid_t self = getpid();
    long pid = syscall(SYS_clone,
                       CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC |
                           CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
                       NULL, NULL, NULL, 0);
    if (pid < 0) {
        fail(0, "cannot make the unpacker's namespaces: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(sv[0]);
        _exit(child_main(&a, sv[1], self));
    }
    close(sv[1]);
    sv[1] = -1;
    for (size_t i = 0; i < a.n; i++)
        close(a.fds[i]);
    if (a.copy)
        close(ARCHIVE_FD);
    char map[64], p[64], msg[300] = "";
    snprintf(map, sizeof map, "0 %u %u\n", host, JAIL_IDS_PER_SLOT);
    snprintf(p, sizeof p, "/proc/%ld/uid_map", pid);
    int r = write_file(p, map);
    if (r == 0) {
        snprintf(p, sizeof p, "/proc/%ld/gid_map", pid);
        r = write_file(p, map);
    }
    int mfd = -1;
    if (r < 0)
        snprintf(msg, sizeof msg, "cannot write %s: %s", p, strerror(-r));
    else if ((mfd = idmapped_root((pid_t)pid, msg, sizeof msg)) >= 0)
        r = send_fd(sv[0], mfd);
    else
        r = mfd;
    if (mfd >= 0)
        close(mfd);
    close(sv[0]);
    sv[0] = -1;
    close(ROOT_FD);
    if (r < 0) {
        kill((pid_t)pid, SIGKILL);
        fail(0, "%s", msg[0] ? msg : strerror(-r));
    }
    int ws = 0;
    while (waitpid((pid_t)pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (r == 0) {
        if (WIFEXITED(ws))
            rc = WEXITSTATUS(ws);
        else
            rc = fail(0, "the unpacker was killed by signal %d", WTERMSIG(ws));
    }
out:
    if (sv[0] >= 0)
        close(sv[0]);
    if (sv[1] >= 0)
        close(sv[1]);
    close(hold); /* the child has been reaped: nothing else has it */
    jail_idmap_release(&ids, slot, id);
    return rc;
}
