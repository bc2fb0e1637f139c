/* vmm/kvm/backend: the KVM backend behind airlock-vmm's backend interface (vmm/backend.h).
 *
 * Each sandbox is a microVM run by airlock-vmm-kvm (vmm/kvm/) as a child process of
 * airlock-vmm, which stays outside the VM's confinement and does what needs privileges
 * around it. Why a child rather than the VMM linked into airlock-vmm: the VMM is the next
 * line of defence if a guest escapes, so it drops everything right after building the VM
 * (pivot_root into an empty directory, every capability, an unprivileged uid of its own,
 * per-thread seccomp); the supervisor must keep root to reclaim cgroups, id slots, taps and
 * files and to answer the API, and a process cannot be both. A separate binary also starts
 * from a clean address space (no supervisor heap, libuv or jansson state for an escaped
 * guest to find) and its exit is the sandbox's end (the pidfd airlock-vmm watches).
 *
 * Owns, per sandbox:
 *   - the VMM's confinement from the outside: a cgroup (<parent>/<id>, the jail's layout and
 *     code: memory = guest + overhead, pids, CPU quota = spec cpus), an id slot (the VMM runs
 *     as its first host uid), its root directory <sandbox dir>/vm (owned by that uid);
 *   - the disk: the template's root image from the cache (cache.c) and the sandbox's
 *     copy-on-write overlay <sandbox dir>/disk.overlay;
 *   - creation: restore of the template snapshot (made once per template, kernel, memory
 *     and vCPUs by booting the template until its agent is healthy), or a boot; then
 *     POST /init over the agent channel with the sandbox's identity, token and env plus a
 *     fresh timestamp, 64 random bytes of seed and the network from the vswitch's tap;
 *   - the VMM's control connection (a socketpair: pause, resume, snapshot, stop; its end of
 *     file stops the VM), the console pipe (the sandbox log), stats, crash cleanup.
 * Descriptors in the VMM: 3 console pipe, 4 control socket, 5 the agent channel's listening
 * socket (bridged to guest vsock port 1024), 6 the tap.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/backend.h"
#include "common/cleanup.h"
#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/paths.h"
#include "common/util.h"
#include "vmm/kvm/cache.h"
#include "vmm/jail/cgroup.h"
#include "vmm/jail/idmap.h"
#include "vmm/jail/jail.h"
#include "vmm/kvm/kvm.h"

#define KB_FD_CONSOLE 3
#define KB_FD_CONTROL 4
#define KB_FD_AGENT   5
#define KB_FD_TAP     6
#define KB_AGENT_PORT "1024"
#define KB_GUEST_CID  "3"
/* The guest's command line (the VMM adds its virtio-mmio devices). Part of the template
 * snapshot's key: a change makes new snapshots. */
#define KB_CMDLINE                                                                           \
    "console=ttyS0 reboot=k panic=-1 pci=off nomodules i8042.noaux i8042.nomux i8042.nopnp " \
    "i8042.dumbkbd tsc=reliable quiet root=/dev/vda rw init=/.airlock/bin/airlock-kvm-init"
#define KB_TEMPLATE_BOOT_MS 120000 /* template boot to healthy (TCG-nested CI is slow) */
#define KB_CTL_TIMEOUT_MS   10000
#define KB_SNAP_TIMEOUT_MS  120000
#define KB_SEED_BYTES       64
#define KB_MIB              (1024ull * 1024ull)

struct kvm_be {
    const struct vmm_spec *spec;
    char state_dir[PATH_MAX];
    char sbx_dir[PATH_MAX]; /* <state>/sandboxes/<id> */
    char vm_dir[PATH_MAX];  /* <sbx>/vm: the VMM's root after pivot_root */
    char overlay[PATH_MAX]; /* <sbx>/disk.overlay */
    char cache_dir[PATH_MAX];
    char vmm_bin[PATH_MAX], init_bin[PATH_MAX], mkrootfs[PATH_MAX], kernel[PATH_MAX];
    uint32_t vcpus;
    uint64_t mem_bytes;
    uint8_t mac[6];
    struct jail_cg cg;
    bool cg_created;
    char ids_dir[512];
    struct jail_idmap_cfg ids;
    uint32_t slot;
    bool have_slot;
    uint32_t host_uid;
    pid_t pid;
    int pidfd, log_fd, ctl_fd;
    bool paused;
    char image[PATH_MAX];
    char snapshot[PATH_MAX]; /* what the sandbox was restored from ("" = booted) */
    uint64_t t_image_ns, t_template_ns, t_spawn_ns, t_init_ns;
    bool template_built;
    unsigned snap_seq;
};

/* ---- paths ---------------------------------------------------------------------------------- */

/* A file the backend needs, and where it looks for it. */
struct kb__file {
    const char *env;      /* $env names it, or NULL */
    const char *name;     /* <bindir>/name, or NULL */
    const char *fallback; /* the installed path */
    int mode;             /* access(2) mode it needs */
    const char *what;     /* for the error */
};

/* The first of: $env, <bindir>/name, fallback that exists. */
static int kb__find(char *out, size_t len, const struct kb__file *f, struct al_error *err)
{
    const char *env = f->env, *name = f->name, *fallback = f->fallback, *what = f->what;
    int mode = f->mode;
    const char *e = env ? getenv(env) : NULL;
    if (e && *e) {
        if (access(e, mode) < 0)
            return al_error_set(err, -errno, "%s %s (from $%s): %s", what, e, env, strerror(errno));
        snprintf(out, len, "%s", e);
        return 0;
    }
    char bin[PATH_MAX];
    if (al_self_dir(bin, sizeof bin) != 0)
        bin[0] = '\0';
    if (bin[0] && name) {
        snprintf(out, len, "%s/%s", bin, name);
        if (access(out, mode) == 0)
            return 0;
    }
    snprintf(out, len, "%s", fallback);
    if (access(out, mode) == 0)
        return 0;
    return al_error_set(err, -ENOENT, "cannot find %s: looked at %s%s%s and %s%s%s", what,
                        bin[0] && name ? bin : "", bin[0] && name ? "/" : "",
                        bin[0] && name ? name : "", fallback, env ? "; set $" : "", env ? env : "");
}

static int kb__find_kernel(struct kvm_be *k, struct al_error *err)
{
    const char *p = k->spec->kvm_kernel;
    if (p) {
        if (access(p, R_OK) < 0)
            return al_error_set(err, -errno, "spec.kvm.kernel %s: %s", p, strerror(errno));
        snprintf(k->kernel, sizeof k->kernel, "%s", p);
        return 0;
    }
    return kb__find(k->kernel, sizeof k->kernel,
                    &(struct kb__file){.env = "AIRLOCK_KVM_KERNEL",
                                       .fallback = "/usr/lib/airlock/kvm/bzImage",
                                       .mode = R_OK,
                                       .what = "the guest kernel (build it with "
                                               "vmm/kvm/guest-kernel/build, then set "
                                               "spec.kvm.kernel or $AIRLOCK_KVM_KERNEL)"},
                    err);
}

/* ---- small process helpers -------------------------------------------------------------- */

/* Waits for pid (our child) to exit, up to timeout_ms; its status, or -ETIMEDOUT. */
static int kb__wait_exit(pid_t pid, int pidfd, int timeout_ms, int *status)
{
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    if (pidfd >= 0 && poll(&p, 1, timeout_ms) == 0)
        return -ETIMEDOUT;
    for (;;) {
        pid_t r = waitpid(pid, status, pidfd >= 0 ? 0 : WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
}

static int kb__attach(pid_t pid, void *arg, struct al_error *err)
{
    struct kvm_be *k = arg;
    return k->cg_created ? jail_cg_attach(&k->cg, pid, err) : 0;
}

/* Starts argv with 0 /dev/null, 1 = 2 (airlock-vmm's log), 3..6 = fds (-1: none): in the
 * sandbox's cgroup before it runs a single instruction of the new program, dying with
 * airlock-vmm. An exec failure comes back as an error. */
static pid_t kb__spawn(struct kvm_be *k, char *const *argv, const int fds[4], int *pidfd,
                       struct al_error *err)
{
    struct al_spawn s = {
        .path = argv[0],
        .argv = argv,
        .fds = {-1, 2, 2, fds[0], fds[1], fds[2], fds[3]},
        .nfds = 7,
        .die_with_parent = true,
        .before_exec = kb__attach,
        .arg = k,
    };
    pid_t pid;
    int rc = al_spawn(&s, &pid, pidfd, err);
    return rc < 0 ? rc : pid;
}

/* Runs a helper to completion (kvm_cache_run_fn): mkrootfs, in the sandbox's cgroup so a
 * crash cleanup kills it too. */
static int kb__run(void *ctx, char *const argv[], struct al_error *err)
{
    struct kvm_be *k = ctx;
    int pidfd;
    pid_t pid = kb__spawn(k, argv, (const int[4]){-1, -1, -1, -1}, &pidfd, err);
    if (pid < 0)
        return pid;
    int st = 0;
    kb__wait_exit(pid, pidfd, -1, &st);
    close(pidfd);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return al_error_set(err, -EIO, "%s failed (%s %d; its messages are above)", argv[0],
                            WIFEXITED(st) ? "exit status" : "signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    return 0;
}

/* ---- the control connection ------------------------------------------------------------- */

/* Sends one command and reads its one-line answer ("ok ..." or "error why"). */
static int kb__ctl(int fd, const char *cmd, char *reply, size_t rlen, int timeout_ms,
                   struct al_error *err)
{
    if (fd < 0)
        return al_error_set(err, -ENOTCONN, "the VMM is not running");
    char line[PATH_MAX + 32];
    int n = snprintf(line, sizeof line, "%s\n", cmd);
    if (send(fd, line, (size_t)n, MSG_NOSIGNAL) != n)
        return al_error_set(err, -EPIPE, "the VMM is gone (control: %s)", strerror(errno));
    size_t got = 0;
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (got < rlen - 1) {
        int64_t left = (int64_t)(deadline - al_now_ns()) / 1000000;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return al_error_set(err, -ETIMEDOUT, "the VMM did not answer \"%s\" within %d ms", cmd,
                                timeout_ms);
        ssize_t r = read(fd, reply + got, 1);
        if (r <= 0)
            return al_error_set(err, -EPIPE, "the VMM closed its control connection");
        if (reply[got] == '\n')
            break;
        got++;
    }
    reply[got] = '\0';
    if (strncmp(reply, "ok", 2) != 0)
        return al_error_set(err, -EIO, "the VMM refused \"%s\": %s", cmd,
                            strncmp(reply, "error ", 6) == 0 ? reply + 6 : reply);
    return 0;
}

/* ---- prepare / record ------------------------------------------------------------------- */

static int kb__prepare(void *priv, const struct vmm_spec *spec, const char *state_dir,
                       struct al_error *err)
{
    struct kvm_be *k = priv;
    memset(k, 0, sizeof *k);
    k->spec = spec;
    k->pid = -1;
    k->pidfd = k->log_fd = k->ctl_fd = -1;
    snprintf(k->state_dir, sizeof k->state_dir, "%s", state_dir);
    snprintf(k->sbx_dir, sizeof k->sbx_dir, "%s/%s/%s", state_dir, AL_DIR_SANDBOXES, spec->id);
    snprintf(k->vm_dir, sizeof k->vm_dir, "%s/vm", k->sbx_dir);
    snprintf(k->overlay, sizeof k->overlay, "%s/disk.overlay", k->sbx_dir);
    if (spec->kvm_cache_dir)
        snprintf(k->cache_dir, sizeof k->cache_dir, "%s", spec->kvm_cache_dir);
    else
        snprintf(k->cache_dir, sizeof k->cache_dir, "%s/kvm", state_dir);
    int rc;
    if ((rc = vmm_kvm_check_device(err)) < 0)
        return rc;
    if ((rc = kb__find(k->vmm_bin, sizeof k->vmm_bin,
                       &(struct kb__file){.env = "AIRLOCK_VMM_KVM",
                                          .name = "airlock-vmm-kvm",
                                          .fallback = "/usr/lib/airlock/kvm/airlock-vmm-kvm",
                                          .mode = X_OK,
                                          .what = "the VMM airlock-vmm-kvm"},
                       err)) ||
        (rc = kb__find(k->init_bin, sizeof k->init_bin,
                       &(struct kb__file){.env = "AIRLOCK_KVM_INIT",
                                          .name = "airlock-kvm-init",
                                          .fallback = "/usr/lib/airlock/kvm/airlock-kvm-init",
                                          .mode = R_OK,
                                          .what = "the guest init airlock-kvm-init"},
                       err)) ||
        (rc = kb__find(k->mkrootfs, sizeof k->mkrootfs,
                       &(struct kb__file){.env = "AIRLOCK_KVM_MKROOTFS",
                                          .name = "airlock-kvm-mkrootfs",
                                          .fallback = "/usr/lib/airlock/kvm/mkrootfs",
                                          .mode = X_OK,
                                          .what = "the image builder (vmm/kvm/mkrootfs)"},
                       err)) ||
        (rc = kb__find_kernel(k, err)))
        return rc;
    if (spec->kvm_vcpus)
        k->vcpus = spec->kvm_vcpus;
    else
        k->vcpus = (uint32_t)ceil(spec->cpus > 0 ? spec->cpus : 1);
    if (k->vcpus > VMM_KVM_MAX_VCPUS)
        k->vcpus = VMM_KVM_MAX_VCPUS;
    /* Guest memory: the spec's memory, in whole MiB, at least 64 MiB. */
    k->mem_bytes = spec->memory_bytes ? spec->memory_bytes : 512 * KB_MIB;
    k->mem_bytes &= ~(KB_MIB - 1);
    if (k->mem_bytes < 64 * KB_MIB)
        return al_error_set(err, -EINVAL,
                            "spec.resources.memory_mib: a KVM guest needs at least 64 MiB");
    if (spec->have_tap_mac) {
        memcpy(k->mac, spec->tap_mac, 6);
    } else {
        randombytes_buf(k->mac, 6);
        k->mac[0] = (uint8_t)((k->mac[0] & 0xfe) | 0x02); /* unicast, locally administered */
    }
    struct jail_cg_layout layout;
    if ((rc = jail_cg_layout_detect(&layout, err)) ||
        (rc = jail_cg_init(&k->cg, &layout, spec->cgroup_parent, spec->id, err)))
        return rc;
    snprintf(k->ids_dir, sizeof k->ids_dir, "%s/jail/idslots", state_dir);
    k->ids = (struct jail_idmap_cfg){spec->uid_base, spec->uid_slots, k->ids_dir};
    if ((rc = al_mkdir_p(k->ids_dir, 0700)) < 0)
        return al_error_set(err, rc, "cannot create %s: %s", k->ids_dir, strerror(-rc));
    if ((rc = jail_idmap_alloc(&k->ids, spec->id, &k->slot, err)))
        return rc;
    k->have_slot = true;
    k->host_uid = jail_idmap_host_base(&k->ids, k->slot);
    return 0;
}

static json_t *kb__record(const void *priv)
{
    const struct kvm_be *k = priv;
    /* The jail's fields (its cleanup drains the cgroup and frees the slot) plus ours. */
    json_t *r = json_object();
    json_object_set_new(r, "backend", json_string("kvm"));
    json_object_set_new(r, "id", json_string(k->spec->id));
    json_object_set_new(r, "cgroup_parent", json_string(k->cg.parent));
    json_object_set_new(r, "ids_dir", json_string(k->ids_dir));
    json_object_set_new(r, "uid_base", json_integer(k->ids.base));
    json_object_set_new(r, "uid_slots", json_integer(k->ids.slots));
    if (k->have_slot) {
        json_object_set_new(r, "slot", json_integer(k->slot));
        json_object_set_new(r, "host_uid", json_integer(k->host_uid));
    }
    json_object_set_new(r, "sandbox_dir", json_string(k->sbx_dir));
    json_object_set_new(r, "cache_dir", json_string(k->cache_dir));
    return r;
}

/* ---- building the VM ---------------------------------------------------------------------- */

/* argv for the VMM: the common confinement options and descriptors. */
struct kb__argv {
    char *v[64];
    int n;
    char strs[16][PATH_MAX + 32];
    int ns;
};

static void kb__arg(struct kb__argv *a, const char *s)
{
    if (a->n < (int)AL_ARRAY_SIZE(a->v) - 1)
        a->v[a->n++] = (char *)s;
    a->v[a->n] = NULL;
}

static void kb__argf(struct kb__argv *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void kb__argf(struct kb__argv *a, const char *fmt, ...)
{
    if (a->ns >= (int)AL_ARRAY_SIZE(a->strs))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->strs[a->ns], sizeof a->strs[0], fmt, ap);
    va_end(ap);
    kb__arg(a, a->strs[a->ns++]);
}

static void kb__argv_common(struct kvm_be *k, struct kb__argv *a)
{
    kb__arg(a, k->vmm_bin);
    kb__arg(a, "--cid");
    kb__arg(a, KB_GUEST_CID);
    kb__arg(a, "--vsock-fd");
    kb__arg(a, KB_AGENT_PORT "=5");
    kb__arg(a, "--control-fd");
    kb__arg(a, "4");
    kb__arg(a, "--jail");
    kb__arg(a, k->vm_dir);
    kb__arg(a, "--uid");
    kb__argf(a, "%u", k->host_uid);
    kb__arg(a, "--gid");
    kb__argf(a, "%u", k->host_uid);
    kb__arg(a, "--seccomp");
}

static void kb__argv_boot(struct kvm_be *k, struct kb__argv *a, const char *overlay)
{
    kb__arg(a, "--kernel");
    kb__arg(a, k->kernel);
    kb__arg(a, "--cmdline");
    kb__argf(a, "%s airlock.agent=%s", KB_CMDLINE, k->spec->agent_path);
    kb__arg(a, "--mem");
    kb__argf(a, "%lluMiB", (unsigned long long)(k->mem_bytes >> 20));
    kb__arg(a, "--vcpus");
    kb__argf(a, "%u", k->vcpus);
    kb__arg(a, "--disk");
    kb__arg(a, k->image);
    kb__arg(a, "--overlay");
    kb__arg(a, overlay);
}

struct kb__vm {
    pid_t pid;
    int pidfd, ctl, console_r;
};

/* The descriptors a VMM starts with besides its control socketpair. */
struct kb__vm_io {
    bool console_pipe; /* a console pipe; false when argv has --console PATH */
    int agent_fd;      /* the agent's listening socket */
    int tap_fd;        /* -1: network unplugged */
};

/* Starts the VMM with argv (already complete but for descriptors) and io; its control
 * socketpair and console pipe (if any) end up in *out. */
static int kb__start_vmm(struct kvm_be *k, struct kb__argv *a, const struct kb__vm_io *io,
                         struct kb__vm *out, struct al_error *err)
{
    int tap_fd = io->tap_fd;
    out->pid = -1;
    out->pidfd = out->ctl = out->console_r = -1;
    int sp[2], cp[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
        return al_error_set(err, -errno, "socketpair: %s", strerror(errno));
    if (io->console_pipe) {
        if (pipe2(cp, O_CLOEXEC) < 0) {
            int e = errno;
            close(sp[0]);
            close(sp[1]);
            return al_error_set(err, -e, "pipe: %s", strerror(e));
        }
        kb__arg(a, "--console-fd");
        kb__arg(a, "3");
    }
    if (tap_fd >= 0) {
        kb__arg(a, "--tap-fd");
        kb__arg(a, "6");
        kb__arg(a, "--mac");
        kb__argf(a, "%02x:%02x:%02x:%02x:%02x:%02x", k->mac[0], k->mac[1], k->mac[2], k->mac[3],
                 k->mac[4], k->mac[5]);
    } else {
        kb__arg(a, "--net-unplugged");
    }
    out->pid =
        kb__spawn(k, a->v, (const int[4]){cp[1], sp[1], io->agent_fd, tap_fd}, &out->pidfd, err);
    close(sp[1]);
    if (cp[1] >= 0)
        close(cp[1]);
    if (out->pid < 0) {
        int rc = out->pid;
        out->pid = -1;
        close(sp[0]);
        if (cp[0] >= 0)
            close(cp[0]);
        return rc;
    }
    out->ctl = sp[0];
    out->console_r = cp[0];
    return 0;
}

static void kb__vm_kill(struct kb__vm *vm)
{
    if (vm->pid > 0) {
        if (vm->pidfd >= 0)
            syscall(SYS_pidfd_send_signal, vm->pidfd, SIGKILL, NULL, 0);
        int st;
        kb__wait_exit(vm->pid, vm->pidfd, -1, &st);
    }
    if (vm->pidfd >= 0)
        close(vm->pidfd);
    if (vm->ctl >= 0)
        close(vm->ctl);
    if (vm->console_r >= 0)
        close(vm->console_r);
    vm->pid = -1;
    vm->pidfd = vm->ctl = vm->console_r = -1;
}

static bool kb__exited(const struct kb__vm *vm)
{
    struct pollfd p = {.fd = vm->pidfd, .events = POLLIN};
    return vm->pidfd >= 0 && poll(&p, 1, 0) == 1;
}

/* The last bytes of a console log, printable, for an error message. */
static void kb__tail(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)len - 1 ? end - (off_t)len + 1 : 0;
    ssize_t n = pread(fd, out, len - 1, from);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    for (ssize_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20 && out[i] != '\n')
            out[i] = ' ';
}

/* kvm_snap_req.make: boots the template with no network and a private agent socket, waits
 * for /health, snapshots into <vm>/template-snap, stops the VM. */
static int kb__make_template(void *ctx, struct kvm_snap_made *made, struct al_error *err)
{
    struct kvm_be *k = ctx;
    char sock[PATH_MAX], console[PATH_MAX], overlay[PATH_MAX], target[PATH_MAX + 16];
    snprintf(sock, sizeof sock, "%s/template-agent.sock", k->sbx_dir);
    snprintf(console, sizeof console, "%s/template-console.log", k->sbx_dir);
    snprintf(overlay, sizeof overlay, "%s/template.overlay", k->sbx_dir);
    snprintf(target, sizeof target, "unix:%s", sock);
    int lfd = vmm_listen_unix(sock, 16, err);
    if (lfd < 0)
        return lfd;
    unlink(console);
    struct kb__argv a = {0};
    kb__argv_common(k, &a);
    kb__argv_boot(k, &a, overlay);
    kb__arg(&a, "--console");
    kb__arg(&a, console);
    struct kb__vm vm;
    int rc = kb__start_vmm(k, &a, &(struct kb__vm_io){.agent_fd = lfd, .tap_fd = -1}, &vm, err);
    close(lfd);
    if (rc < 0)
        goto out;
    uint64_t deadline = al_now_ns() + (uint64_t)KB_TEMPLATE_BOOT_MS * 1000000ull;
    for (;;) {
        struct al_http_resp r = {0};
        struct al_error e = {0};
        struct al_http_call_opts o = {.target = target,
                                      .method = "GET",
                                      .path = "/health",
                                      .timeout_ms = 2000,
                                      .max_body = 4096};
        int c = al_http_call(&o, &r, &e);
        int st = r.status;
        al_http_resp_free(&r);
        if (c == 0 && st >= 200 && st < 300)
            break;
        if (kb__exited(&vm) || al_now_ns() > deadline) {
            char tail[1200];
            kb__tail(console, tail, sizeof tail);
            rc = al_error_set(err, -ETIMEDOUT, "the template's agent %s (console: ...%s)",
                              kb__exited(&vm) ? "never answered: the VM ended"
                                              : "did not answer /health within 120 s",
                              tail);
            goto out_vm;
        }
        usleep(20000);
    }
    char reply[256];
    if ((rc = kb__ctl(vm.ctl, "snapshot /template-snap", reply, sizeof reply, KB_SNAP_TIMEOUT_MS,
                      err)) < 0)
        goto out_vm;
    al_info("sandbox %s: template snapshot taken (%s)", k->spec->id, reply);
    kb__ctl(vm.ctl, "stop", reply, sizeof reply, KB_CTL_TIMEOUT_MS, NULL);
    int st = 0;
    if (kb__wait_exit(vm.pid, vm.pidfd, KB_CTL_TIMEOUT_MS, &st) == 0) {
        vm.pid = -1;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            al_warn("sandbox %s: the template VM exited with status %d after its snapshot",
                    k->spec->id, st);
    }
    snprintf(made->parent, sizeof made->parent, "%s", k->vm_dir);
    snprintf(made->name, sizeof made->name, "template-snap");
    made->owner = k->host_uid;
out_vm:
    kb__vm_kill(&vm);
out:
    unlink(sock);
    unlink(overlay);
    unlink(console);
    return rc;
}

/* POST /init on the agent channel until it is answered (the agent may still be booting),
 * with the sandbox's identity, token and env, plus timestamp, seed and network. */
static int kb__init_agent(struct kvm_be *k, const char *agent_sock, const struct kb__vm *vm,
                          struct al_error *err)
{
    json_t *init = vmm_spec_init_object(k->spec);
    if (!init)
        return al_error_set(err, -ENOMEM, "out of memory");
    unsigned char seed[KB_SEED_BYTES];
    char seed64[sodium_base64_ENCODED_LEN(KB_SEED_BYTES, sodium_base64_VARIANT_ORIGINAL)];
    randombytes_buf(seed, sizeof seed);
    sodium_bin2base64(seed64, sizeof seed64, seed, sizeof seed, sodium_base64_VARIANT_ORIGINAL);
    sodium_memzero(seed, sizeof seed);
    json_object_set_new(init, "seed", json_string(seed64));
    sodium_memzero(seed64, sizeof seed64);
    const struct vmm_spec *s = k->spec;
    if (s->net_mode == VMM_NET_TAP) {
        char mac[24];
        snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", k->mac[0], k->mac[1], k->mac[2],
                 k->mac[3], k->mac[4], k->mac[5]);
        json_t *net = json_pack("{s:s,s:s}", "address", s->net_address, "mac", mac);
        if (s->net_gateway)
            json_object_set_new(net, "gateway", json_string(s->net_gateway));
        json_t *dns = json_array();
        for (size_t i = 0; i < s->n_dns; i++)
            json_array_append_new(dns, json_string(s->dns[i]));
        if (!s->n_dns && s->net_gateway)
            json_array_append_new(dns, json_string(s->net_gateway)); /* the switch answers DNS */
        json_object_set_new(net, "dns", dns);
        json_object_set_new(init, "network", net);
    }
    char target[PATH_MAX + 8];
    snprintf(target, sizeof target, "unix:%s", agent_sock);
    /* The token authorises a re-init (a sandbox resumed from its own snapshot has one). */
    struct al_http_header h[2] = {{"Content-Type", "application/json"},
                                  {"X-Access-Token", s->access_token ? s->access_token : ""}};
    uint64_t deadline = al_now_ns() + (uint64_t)s->start_timeout_ms * 1000000ull;
    int rc;
    char last[300] = "no answer";
    for (;;) {
        /* The clock is read for each attempt: an attempt whose answer was lost may have been
         * applied, and a retry with the first attempt's time would set the guest's clock back
         * by however long the host stalled in between. */
        uint64_t now = al_wall_ns();
        char ts[AL_TIME_FORMAT_MAX];
        al_time_format(ts, sizeof ts, (int64_t)(now / 1000000000ull), (long)(now % 1000000000ull),
                       AL_TIME_RFC3339_NS);
        json_object_set_new(init, "timestamp", json_string(ts));
        char *body = json_dumps(init, JSON_COMPACT);
        if (!body) {
            rc = al_error_set(err, -ENOMEM, "out of memory");
            break;
        }
        size_t blen = strlen(body);
        struct al_http_resp r = {0};
        struct al_error e = {0};
        uint64_t left_ms = (deadline - al_now_ns()) / 1000000ull;
        /* wipe: the init carries the token and the seed (the copy here is wiped below). */
        struct al_http_call_opts o = {.target = target,
                                      .method = "POST",
                                      .path = "/init",
                                      .headers = h,
                                      .n_headers = s->access_token ? 2 : 1,
                                      .body = body,
                                      .body_len = blen,
                                      .timeout_ms = (uint32_t)AL_MIN(AL_MAX(left_ms, 1), 5000),
                                      .max_body = 65536,
                                      .wipe = true};
        int c = al_http_call(&o, &r, &e);
        sodium_memzero(body, blen);
        free(body);
        if (c == 0 && r.status == 204) {
            al_http_resp_free(&r);
            rc = 0;
            break;
        }
        if (c == 0) {
            rc = al_error_set(err, -EIO, "the agent refused its init (HTTP %d: %.200s)", r.status,
                              r.body.data ? r.body.data : "");
            al_http_resp_free(&r);
            break;
        }
        snprintf(last, sizeof last, "%s", e.msg);
        al_http_resp_free(&r);
        if (kb__exited(vm)) {
            rc = al_error_set(err, -ECHILD, "the VM ended before its agent took its init");
            break;
        }
        if (al_now_ns() > deadline) {
            rc = al_error_set(err, -ETIMEDOUT,
                              "the agent did not take its init within %u ms (last: %s)",
                              s->start_timeout_ms, last);
            break;
        }
        usleep(5000);
    }
    json_decref(init); /* (airlock-vmm's jansson allocator wipes what it frees) */
    return rc;
}

/* The image a user snapshot (POST /snapshot) was taken with, from its info.json. */
static int kb__snapshot_image(const char *dir, char *image, size_t len, struct al_error *err)
{
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/info.json", dir);
    struct al_error je = {0};
    json_t *info = al_json_load_file(p, &je);
    if (!info)
        return al_error_set(err, -EINVAL,
                            "spec.kvm.restore: %s: %s (is it a snapshot made by "
                            "POST /snapshot?)",
                            p, je.msg);
    const char *img = json_string_value(json_object_get(info, "image"));
    int rc = 0;
    if (!img || (size_t)snprintf(image, len, "%s", img) >= len)
        rc = al_error_set(err, -EINVAL, "%s names no root image", p);
    json_decref(info);
    if (rc == 0 && access(image, R_OK) < 0)
        rc = al_error_set(err, -errno, "the snapshot's root image %s: %s", image, strerror(errno));
    return rc;
}

static int kb__start(void *priv, int agent_listen_fd, struct vmm_started *out, struct al_error *err)
{
    struct kvm_be *k = priv;
    const struct vmm_spec *s = k->spec;
    uint64_t t0 = al_now_ns();
    /* The agent channel's path (the same socket airlock-vmm made): for POST /init. */
    struct sockaddr_un sa;
    socklen_t sl = sizeof sa;
    if (getsockname(agent_listen_fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sun_family != AF_UNIX)
        return al_error_set(err, -EINVAL, "the agent channel is not a unix socket");
    char agent_sock[sizeof sa.sun_path + 1];
    snprintf(agent_sock, sizeof agent_sock, "%s", sa.sun_path);

    /* The VMM's root: an empty directory of its own uid. */
    if (mkdir(k->vm_dir, 0700) < 0 && errno != EEXIST)
        return al_error_set(err, -errno, "cannot create %s: %s", k->vm_dir, strerror(errno));
    if (chown(k->vm_dir, k->host_uid, k->host_uid) < 0)
        return al_error_set(err, -errno, "chown %s: %s", k->vm_dir, strerror(errno));
    /* Its cgroup: guest memory plus room for the VMM, KVM's own structures and the page
     * cache of its disk files. */
    struct jail_cg_limits lim = {
        .memory_bytes = k->mem_bytes + AL_MAX(128 * KB_MIB, k->mem_bytes / 4),
        .pids = k->vcpus + 16,
        .cpus = s->cpus,
    };
    int rc = jail_cg_parent_room(&k->cg, JAIL_CG_START_PIDS, err);
    if (rc || (rc = jail_cg_create(&k->cg, &lim, err)))
        return rc;
    k->cg_created = true;

    const char *restore = NULL;
    if (s->kvm_restore) {
        if ((rc = kb__snapshot_image(s->kvm_restore, k->image, sizeof k->image, err)) < 0)
            return rc;
        restore = s->kvm_restore;
    } else {
        struct kvm_image_req ir = {
            .template_dir = s->template_dir,
            .template_json = s->template_json,
            .agent_dir = s->agent_dir,
            .init_bin = k->init_bin,
            .mkrootfs = k->mkrootfs,
            .slack_mib = s->disk_bytes >> 20,
            .run = kb__run,
            .ctx = k,
        };
        char ikey[KVM_CACHE_KEY_LEN + 1];
        if ((rc = kvm_cache_image(k->cache_dir, &ir, k->image, sizeof k->image, ikey, err)) < 0)
            return rc;
        k->t_image_ns = al_now_ns() - t0;
        if (s->kvm_snapshot) {
            char cmdline[600];
            snprintf(cmdline, sizeof cmdline, "%s airlock.agent=%s", KB_CMDLINE, s->agent_path);
            struct kvm_snap_req sr = {
                .image_key = ikey,
                .image = k->image,
                .kernel = k->kernel,
                .vmm = k->vmm_bin,
                .cmdline = cmdline,
                .mem_bytes = k->mem_bytes,
                .vcpus = k->vcpus,
                .make = kb__make_template,
                .ctx = k,
            };
            uint64_t t1 = al_now_ns();
            if ((rc = kvm_cache_snapshot(k->cache_dir, &sr, k->snapshot, sizeof k->snapshot,
                                         &k->template_built, err)) < 0)
                return rc;
            k->t_template_ns = al_now_ns() - t1;
            restore = k->snapshot;
        }
    }

    uint64_t t2 = al_now_ns();
    struct kb__argv a = {0};
    kb__argv_common(k, &a);
    if (restore) {
        if (restore != k->snapshot)
            snprintf(k->snapshot, sizeof k->snapshot, "%s", restore);
        kb__arg(&a, "--restore");
        kb__arg(&a, k->snapshot);
        kb__arg(&a, "--disk");
        kb__arg(&a, k->image);
        kb__arg(&a, "--overlay");
        kb__arg(&a, k->overlay);
    } else {
        kb__argv_boot(k, &a, k->overlay);
    }
    struct kb__vm vm;
    int tap = s->net_mode == VMM_NET_TAP ? s->tap_fd : -1;
    if (tap >= 0 && fcntl(tap, F_GETFD) < 0)
        return al_error_set(err, -EBADF,
                            "spec.network.tap_fd %d is not an open descriptor of airlock-vmm "
                            "(the control plane must leave the tap open across the exec)",
                            tap);
    if ((rc = kb__start_vmm(
             k, &a,
             &(struct kb__vm_io){.console_pipe = true, .agent_fd = agent_listen_fd, .tap_fd = tap},
             &vm, err)) < 0)
        return rc;
    if (tap >= 0)
        close(tap); /* the VMM holds the tap now; when it exits the device goes */
    k->t_spawn_ns = al_now_ns() - t2;
    uint64_t t3 = al_now_ns();
    if ((rc = kb__init_agent(k, agent_sock, &vm, err)) < 0) {
        kb__vm_kill(&vm);
        return rc;
    }
    k->t_init_ns = al_now_ns() - t3;
    k->pid = vm.pid;
    k->pidfd = vm.pidfd;
    k->ctl_fd = vm.ctl;
    k->log_fd = vm.console_r;
    out->pid = k->pid;
    out->pidfd = k->pidfd;
    out->log_fd = k->log_fd;
    json_t *t = json_object();
    json_object_set_new(t, "image_us", json_integer((json_int_t)(k->t_image_ns / 1000)));
    json_object_set_new(t, "template_us", json_integer((json_int_t)(k->t_template_ns / 1000)));
    json_object_set_new(t, "template_built", json_boolean(k->template_built));
    json_object_set_new(t, "vmm_spawn_us", json_integer((json_int_t)(k->t_spawn_ns / 1000)));
    json_object_set_new(t, "restore_to_init_us", json_integer((json_int_t)(k->t_init_ns / 1000)));
    json_object_set_new(t, "restored", json_boolean(restore != NULL));
    json_object_set_new(t, "total_us", json_integer((json_int_t)((al_now_ns() - t0) / 1000)));
    out->timing = t;
    al_info("sandbox %s: %s VM (%u vCPU, %llu MiB) pid %d in %.1f ms", s->id,
            restore ? "restored" : "booted", k->vcpus, (unsigned long long)(k->mem_bytes >> 20),
            (int)k->pid, (double)(al_now_ns() - t0) / 1e6);
    return 0;
}

/* ---- running ------------------------------------------------------------------------------- */

static int kb__pause(void *priv, struct al_error *err)
{
    struct kvm_be *k = priv;
    char reply[256];
    int rc = kb__ctl(k->ctl_fd, "pause", reply, sizeof reply, KB_CTL_TIMEOUT_MS, err);
    if (rc == 0)
        k->paused = true;
    return rc;
}

static int kb__resume(void *priv, struct al_error *err)
{
    struct kvm_be *k = priv;
    char reply[256];
    int rc = kb__ctl(k->ctl_fd, "resume", reply, sizeof reply, KB_CTL_TIMEOUT_MS, err);
    if (rc == 0)
        k->paused = false;
    return rc;
}

/* A guest has no graceful stop from the outside: the VM is stopped (its disk is the
 * sandbox's own and goes with it). */
static int kb__terminate(void *priv)
{
    struct kvm_be *k = priv;
    if (k->ctl_fd < 0)
        return -ENOTCONN;
    return send(k->ctl_fd, "stop\n", 5, MSG_NOSIGNAL | MSG_DONTWAIT) == 5 ? 0 : -errno;
}

static int kb__kill(void *priv, struct al_error *err)
{
    struct kvm_be *k = priv;
    if (k->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0);
    else if (k->pid > 0)
        kill(k->pid, SIGKILL);
    if (!k->cg_created)
        return 0;
    int rc = jail_cg_kill_all(&k->cg, err);
    return rc < 0 ? rc : 0;
}

static int kb__nprocs(const void *priv)
{
    const struct kvm_be *k = priv;
    return k->cg_created ? jail_cg_nprocs(&k->cg) : 0;
}

static void kb__remove_files(const char *sbx_dir)
{
    static const char *const files[] = {"disk.overlay", "template-agent.sock",
                                        "template-console.log", "template.overlay", NULL};
    char p[PATH_MAX + 32];
    for (const char *const *f = files; *f; f++) {
        snprintf(p, sizeof p, "%s/%s", sbx_dir, *f);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/vm", sbx_dir);
    kvm_cache_rmtree(p);
}

static int kb__reclaim(void *priv, struct al_error *err)
{
    struct kvm_be *k = priv;
    int rc = 0;
    if (k->ctl_fd >= 0) {
        close(k->ctl_fd);
        k->ctl_fd = -1;
    }
    if (k->log_fd >= 0) {
        close(k->log_fd);
        k->log_fd = -1;
    }
    if (k->pidfd >= 0) {
        close(k->pidfd);
        k->pidfd = -1;
    }
    if (k->cg_created) {
        if (jail_cg_nprocs(&k->cg) > 0)
            jail_cg_kill_all(&k->cg, NULL);
        rc = jail_cg_destroy(&k->cg, err);
        if (rc == 0)
            k->cg_created = false;
    }
    if (k->sbx_dir[0])
        kb__remove_files(k->sbx_dir);
    if (k->have_slot && rc == 0) {
        int r = jail_idmap_release(&k->ids, k->slot, k->spec->id);
        if (r && r != -ENOENT)
            rc = al_error_set(err, r, "release id slot %u: %s", k->slot, strerror(-r));
        else
            k->have_slot = false;
    }
    return rc;
}

static json_t *kb__stats(const void *priv)
{
    const struct kvm_be *k = priv;
    struct jail_cg_stats st;
    memset(&st, 0, sizeof st);
    jail_cg_stats(&k->cg, &st);
    json_t *o = json_object();
    json_object_set_new(o, "cpu_usage_ns", json_integer((json_int_t)st.cpu_usage_ns));
    json_object_set_new(o, "cpus", json_real(k->spec->cpus));
    json_object_set_new(o, "vcpus", json_integer(k->vcpus));
    /* What the VM costs the host: guest pages it touched, the VMM, KVM's structures, the
     * page cache of its disk files; the guest's own view of its memory is the agent's
     * /metrics. */
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)st.memory_bytes));
    json_object_set_new(o, "memory_peak_bytes", json_integer((json_int_t)st.memory_peak_bytes));
    json_object_set_new(o, "memory_limit_bytes", json_integer((json_int_t)k->mem_bytes));
    json_object_set_new(o, "guest_memory_bytes", json_integer((json_int_t)k->mem_bytes));
    json_object_set_new(o, "host_memory_limit_bytes",
                        json_integer((json_int_t)st.memory_limit_bytes));
    json_object_set_new(o, "oom_kills", json_integer((json_int_t)st.oom_kills));
    json_object_set_new(o, "pids", json_integer((json_int_t)st.pids));
    json_object_set_new(o, "pids_limit", json_integer((json_int_t)st.pids_limit));
    struct stat ov, img;
    if (stat(k->overlay, &ov) == 0)
        json_object_set_new(o, "disk_used_bytes", json_integer((json_int_t)ov.st_blocks * 512));
    if (k->image[0] && stat(k->image, &img) == 0)
        json_object_set_new(o, "disk_total_bytes", json_integer((json_int_t)img.st_size));
    json_object_set_new(o, "restored_from", json_string(k->snapshot));
    return o;
}

/* POST /snapshot: the VM's full state (memory, devices, disk overlay) into dest, a new
 * directory. The VM pauses while it is written and continues afterwards (unless paused). */
static int kb__snapshot(void *priv, const char *dest, json_t **info, struct al_error *err)
{
    struct kvm_be *k = priv;
    *info = NULL;
    if (!vmm_path_normalised(dest) || strcmp(dest, "/") == 0)
        return al_error_set(err, -EINVAL, "\"path\" must be a normalised absolute path");
    struct stat st;
    if (lstat(dest, &st) == 0)
        return al_error_set(err, -EEXIST, "%s exists: give a new directory", dest);
    char name[64], cmd[96], reply[256];
    snprintf(name, sizeof name, "api-snap-%u", ++k->snap_seq);
    snprintf(cmd, sizeof cmd, "snapshot /%s", name);
    uint64_t t0 = al_now_ns();
    int rc = kb__ctl(k->ctl_fd, cmd, reply, sizeof reply, KB_SNAP_TIMEOUT_MS, err);
    if (rc == 0)
        rc = kvm_cache_take_dir(k->vm_dir, name, k->host_uid, dest, err);
    if (rc < 0) {
        char p[PATH_MAX + 80];
        snprintf(p, sizeof p, "%s/%s", k->vm_dir, name);
        kvm_cache_rmtree(p);
        return rc;
    }
    double ms = (double)(al_now_ns() - t0) / 1e6;
    json_t *meta =
        json_pack("{s:s,s:s,s:s,s:I,s:i,s:s}", "format", "airlock-kvm-snapshot-1", "image",
                  k->image, "kernel", k->kernel, "memory_bytes", (json_int_t)k->mem_bytes, "vcpus",
                  (int)k->vcpus, "sandbox", k->spec->id);
    char *s = json_dumps(meta, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(meta);
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/info.json", dest);
    rc = s ? al_write_file_atomic(p, s, strlen(s), 0600, err) : -ENOMEM;
    free(s);
    if (rc < 0) {
        kvm_cache_rmtree(dest);
        return rc;
    }
    snprintf(p, sizeof p, "%s/memory", dest);
    uint64_t mem_alloc = stat(p, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
    *info = json_pack("{s:s,s:f,s:I}", "path", dest, "ms", ms, "memory_file_bytes",
                      (json_int_t)mem_alloc);
    al_info("sandbox %s: snapshot written to %s in %.1f ms", k->spec->id, dest, ms);
    return 0;
}

/* ---- after a crash ---------------------------------------------------------------------- */

static int kb__cleanup_record(const json_t *rec, unsigned timeout_ms, struct al_error *err)
{
    /* The VMM died with airlock-vmm (PR_SET_PDEATHSIG); the jail's cleanup kills whatever
     * is left in the cgroup, removes it and frees the id slot. */
    int rc = jail_cleanup_record(rec, timeout_ms, err);
    if (rc)
        return rc;
    const char *sbx = json_string_value(json_object_get(rec, "sandbox_dir"));
    if (sbx && sbx[0] == '/' && strstr(sbx, "/" AL_DIR_SANDBOXES "/"))
        kb__remove_files(sbx);
    return 0;
}

static int kb__sweep(const struct vmm_sweep_opts *o, struct al_error *err)
{
    (void)err;
    /* cgroups and id slots: the jail's sweep covers them (same layout). Here: the cache's
     * half-built entries, which are no one sandbox's. */
    if (o->only)
        return 0;
    const char *cache = NULL;
    if (o->defaults)
        cache = json_string_value(json_object_get(o->defaults, "kvm_cache_dir"));
    char dir[PATH_MAX];
    if (cache)
        snprintf(dir, sizeof dir, "%s", cache);
    else
        snprintf(dir, sizeof dir, "%s/kvm", o->state_dir);
    return kvm_cache_sweep(dir);
}

const struct vmm_backend vmm_backend_kvm = {
    .name = "kvm",
    .priv_size = sizeof(struct kvm_be),
    .prepare = kb__prepare,
    .record = kb__record,
    .start = kb__start,
    .pause = kb__pause,
    .resume = kb__resume,
    .terminate = kb__terminate,
    .kill = kb__kill,
    .nprocs = kb__nprocs,
    .reclaim = kb__reclaim,
    .stats = kb__stats,
    .snapshot = kb__snapshot,
    .cleanup_record = kb__cleanup_record,
    .sweep = kb__sweep,
};

/* ---- probe ----------------------------------------------------------------------------------- */

json_t *vmm_kvm_probe_json(const char *kernel, unsigned timeout_ms)
{
    uint64_t t0 = al_now_ns();
    json_t *o = json_object();
    json_t *checks = json_object();
    struct al_error e = {0};
    bool usable = false;
    char why[700] = "";
    char kpath[PATH_MAX] = "";
    if (kernel) {
        snprintf(kpath, sizeof kpath, "%s", kernel);
    } else {
        const char *env = getenv("AIRLOCK_KVM_KERNEL");
        snprintf(kpath, sizeof kpath, "%s", env && *env ? env : "/usr/lib/airlock/kvm/bzImage");
    }
    if (vmm_kvm_check_device(&e) < 0) {
        snprintf(why, sizeof why, "%s", e.msg);
        json_object_set_new(checks, "device", json_false());
    } else if (json_object_set_new(checks, "device", json_true()),
               access("/sys/module/kvm_pvm", F_OK) == 0) {
        /* A paravirtual "PVM" KVM passes every capability check and runs the tiny probe
         * guest, but an ordinary Linux guest makes no progress on it. */
        json_object_set_new(checks, "pvm", json_true());
        snprintf(why, sizeof why,
                 "/dev/kvm is a paravirtual PVM KVM (kvm_pvm is loaded): it runs only "
                 "PVM-enabled guest kernels, not airlock's guest; use the jail backend");
    } else if (vmm_kvm_probe(&e) < 0) {
        json_object_set_new(checks, "test_guest", json_false());
        snprintf(why, sizeof why, "%s", e.msg);
    } else if (json_object_set_new(checks, "test_guest", json_true()), access(kpath, R_OK) < 0) {
        snprintf(why, sizeof why,
                 "no guest kernel at %s (build it with vmm/kvm/guest-kernel/build; give "
                 "--kernel or set $AIRLOCK_KVM_KERNEL)",
                 kpath);
    } else if (vmm_kvm_probe_kernel(kpath, timeout_ms, &e) < 0) {
        json_object_set_new(checks, "guest_kernel", json_false());
        snprintf(why, sizeof why, "%s", e.msg);
    } else {
        json_object_set_new(checks, "guest_kernel", json_true());
        usable = true;
        snprintf(why, sizeof why, "the guest kernel %s boots to its console", kpath);
    }
    json_object_set_new(o, "usable", json_boolean(usable));
    json_object_set_new(o, "reason", json_string(why));
    json_object_set_new(o, "kernel", json_string(kpath));
    json_object_set_new(o, "checks", checks);
    json_object_set_new(o, "elapsed_ms", json_integer((json_int_t)((al_now_ns() - t0) / 1000000)));
    return o;
}
