/* controlplane/backend_vmm: sandboxes as airlock-vmm processes (vmm/; jail or kvm).
 *
 * Owns: the spec airlockd writes for a sandbox (to the process's standard input, so the
 * access token and environment never touch the disk; cp_vmm_spec), starting airlock-vmm in
 * its own session (jail: the sandbox's network namespace named by /proc/<airlockd>/fd/<n>;
 * kvm: the sandbox's vswitch tap inherited as descriptor 4), reading its ready line
 * (descriptor 3), and the vmm's control API on <state>/sandboxes/<id>/vmm.sock (status,
 * stats, pause, resume, stop). After a crash: `airlock-vmm --cleanup ID` reclaims what a
 * dead airlock-vmm left; at start: `airlock-vmm --sweep` reclaims what nobody owns.
 * airlock-vmm writes its own logs to airlockd's standard error (one stream for an operator).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "jcall.h"
#include "volumes.h"

#define VMM_API_TIMEOUT_MS  15000
#define VMM_STOP_TIMEOUT_MS 20000
/* A snapshot copies the sandbox's writable layer (bounded by its disk size) */
#define VMM_SNAPSHOT_TIMEOUT_MS 600000
/* Warm airlock-vmm processes starting at once while the pool refills: each start costs a
 * few milliseconds of CPU (exec, cgroups), and a refill of the whole pool at once (32 or
 * more processes) took both cores for hundreds of milliseconds whenever a burst paused
 * for an instant. Two at a time keep the refill in the background. */
#define VMM_POOL_SPAWN_MAX 2

struct vmm_proc;

struct vmm_priv {
    struct cp_sandbox *sb;
    /* start */
    cp_backend_cb start_cb;
    struct vmm_proc *proc;
    uv_timer_t timer;
    bool timer_open;
    int netns_fd; /* kept open until the ready line (the spec names it by path) */
    bool start_done;
    /* cleanup */
    struct cp_proc_watch cleanup_watch;
    cp_backend_cb cleanup_cb;
};

static struct vmm_priv *vmm__priv(struct cp_sandbox *sb)
{
    if (!sb->bpriv) {
        struct vmm_priv *p = calloc(1, sizeof *p);
        if (p) {
            p->sb = sb;
            p->netns_fd = -1;
        }
        sb->bpriv = p;
    }
    return sb->bpriv;
}

static void vmm__handle_closed(uv_handle_t *h)
{
    struct vmm_priv *p = h->data;
    cp_sb_unref(p->sb);
}

static void vmm__paths(struct cp_sandbox *sb)
{
    const char *state = sb->cp->cfg.state_dir;
    snprintf(sb->agent_sock, sizeof sb->agent_sock, "%s/sandboxes/%s/agent.sock", state,
             sb->rec.id);
    snprintf(sb->vmm_sock, sizeof sb->vmm_sock, "%s/sandboxes/%s/vmm.sock", state, sb->rec.id);
}

/* ---- the control API ------------------------------------------------------------------- */

struct vmm_call {
    struct cp_sandbox *sb;
    cp_backend_cb cb;
    cp_backend_stats_cb stats_cb;
    cp_backend_snap_cb snap_cb;
    void *arg;
    void (*done)(struct vmm_call *c, int status, json_t *body, const char *err);
};

static void vmm__answered(int status, json_t *body, const char *err, void *arg)
{
    struct vmm_call *x = arg;
    char why[512] = "";
    const char *m = err ? err : json_string_value(json_object_get(body, "message"));
    if (m)
        snprintf(why, sizeof why, "%s", m);
    x->done(x, status, body, why);
    cp_sb_unref(x->sb);
    free(x);
}

static int vmm__call(struct cp_sandbox *sb, const char *method, const char *path, const char *body,
                     uint32_t timeout_ms, struct vmm_call *proto)
{
    struct vmm_call *x = malloc(sizeof *x);
    if (!x)
        return -ENOMEM;
    *x = *proto;
    x->sb = sb;
    cp_sb_ref(sb);
    char target[160];
    snprintf(target, sizeof target, "unix:%s", sb->vmm_sock);
    struct cp_jcall_opts o = {
        .target = target,
        .method = method,
        .path = path,
        .body_text = body,
        .timeout_ms = timeout_ms,
        .pool = sb->cp->pool,
        .done = vmm__answered,
        .arg = x,
    };
    int rc = cp_jcall(sb->cp->loop, &o);
    if (rc) {
        cp_sb_unref(sb);
        free(x);
    }
    return rc;
}

/* ---- cleanup (airlock-vmm --cleanup ID) -------------------------------------------------- */

/* The options --sweep and --cleanup share: where the sandboxes' cgroups and id slots are. */
struct vmm_sweep_args {
    char parent[512], base[32], slots[32];
};

static int vmm__sweep_args(struct cp *cp, struct vmm_sweep_args *a, char **argv, int n)
{
    if (cp->cfg.cgroup_parent && cp->cfg.cgroup_parent[0]) {
        snprintf(a->parent, sizeof a->parent, "%s", cp->cfg.cgroup_parent);
        argv[n++] = "--cgroup-parent";
        argv[n++] = a->parent;
    }
    if (cp->cfg.uid_base) {
        snprintf(a->base, sizeof a->base, "%lld", (long long)cp->cfg.uid_base);
        argv[n++] = "--uid-base";
        argv[n++] = a->base;
    }
    if (cp->cfg.uid_slots) {
        snprintf(a->slots, sizeof a->slots, "%lld", (long long)cp->cfg.uid_slots);
        argv[n++] = "--uid-slots";
        argv[n++] = a->slots;
    }
    return n;
}

static void vmm__cleanup_watch_closed(struct cp_proc_watch *w)
{
    struct vmm_priv *p = w->data;
    cp_sb_unref(p->sb);
}

static void vmm__cleanup_exited(struct cp_proc_watch *w, int wstatus)
{
    struct vmm_priv *p = w->data;
    struct cp_sandbox *sb = p->sb;
    cp_backend_cb cb = p->cleanup_cb;
    p->cleanup_cb = NULL;
    char how[128];
    cp_proc_describe(wstatus, how, sizeof how);
    int rc = wstatus >= 0 && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 ? 0 : -EIO;
    if (rc)
        al_error("sandbox %s: airlock-vmm --cleanup %s; run it by hand: airlock-vmm "
                 "--state-dir %s --cleanup %s",
                 sb->rec.id, how, sb->cp->cfg.state_dir, sb->rec.id);
    cb(sb, rc, rc ? "airlock-vmm --cleanup failed" : NULL);
    cp_proc_watch_stop(w, vmm__cleanup_watch_closed);
}

static int vmm__run_cleanup(struct cp_sandbox *sb, cp_backend_cb cb)
{
    struct cp *cp = sb->cp;
    struct vmm_priv *p = vmm__priv(sb);
    if (!p)
        return -ENOMEM;
    /* The wait: what the killed airlock-vmm had forked but not yet exec'd holds its lock
     * until it dies (at once: its parent death signal, or its next read from it). */
    struct vmm_sweep_args sa;
    char *argv[20];
    int n = 0;
    argv[n++] = cp->vmm_bin;
    argv[n++] = "--state-dir";
    argv[n++] = cp->cfg.state_dir;
    argv[n++] = "--cleanup";
    argv[n++] = sb->rec.id;
    argv[n++] = "--wait-ms";
    argv[n++] = "10000";
    n = vmm__sweep_args(cp, &sa, argv, n);
    argv[n] = NULL;
    struct al_spawn s = {
        .path = cp->vmm_bin, .argv = argv, .fds = {-1, 2, 2}, .nfds = 3, .new_session = true};
    pid_t pid;
    int pidfd;
    struct al_error err = {0};
    int rc = al_spawn(&s, &pid, &pidfd, &err);
    if (rc) {
        al_error("sandbox %s: %s", sb->rec.id, al_error_str(&err));
        return rc;
    }
    p->cleanup_cb = cb;
    p->cleanup_watch.data = p;
    cp_sb_ref(sb);
    rc = cp_proc_watch_start(cp->loop, &p->cleanup_watch, pid, pidfd, vmm__cleanup_exited);
    if (rc) {
        /* Wait here rather than lose track of it. */
        int st;
        waitpid(pid, &st, 0);
        close(pidfd);
        p->cleanup_cb = NULL;
        cp_sb_unref(sb);
        return -EIO;
    }
    return 0;
}

/* SIGKILL through a pidfd, then wait (bounded) for the exit: airlock-vmm's lock goes with
 * its process, and --cleanup refuses while the lock is held. */
static void vmm__kill_wait(int pidfd)
{
    if (cp_proc_signal(pidfd, SIGKILL) < 0)
        return;
    struct pollfd pf = {.fd = pidfd, .events = POLLIN};
    while (poll(&pf, 1, 5000) < 0 && errno == EINTR)
        ;
}

/* Kills a live airlock-vmm of this sandbox (if any), then reclaims what it left. */
static int vmm_cleanup(struct cp_sandbox *sb, cp_backend_cb cb)
{
    vmm__paths(sb);
    if (sb->pidfd >= 0) {
        vmm__kill_wait(sb->pidfd);
    } else if (sb->rec.pid > 0) {
        int fd;
        if (cp_proc_open(sb->rec.pid, sb->rec.pid_start, &fd) == 0) {
            vmm__kill_wait(fd);
            close(fd);
        }
    }
    /* --cleanup refuses while the old airlock-vmm still holds its lock; SIGKILL released it
     * (or it is gone already). */
    return vmm__run_cleanup(sb, cb);
}

/* ---- airlock-vmm processes and the warm pool --------------------------------------------
 *
 * A vmm_proc is one airlock-vmm process from its spawn to its ready line: its standard input
 * (the spec goes there), its ready pipe, and its pidfd. Warm ones were started with --warm
 * and have said {"warm":true}: they have done what needs no spec (their cgroups) and wait on
 * standard input. A create takes a warm process if there is one (and starts a replacement),
 * else starts one cold; either way the spec names the sandbox's network namespace through
 * /proc/<airlockd>/fd/<n>, which airlockd keeps open until the ready line. */

enum vp_state { VP_STARTING = 0, VP_WARM, VP_ASSIGNED, VP_DONE };

struct vmm_proc {
    struct cp *cp;
    enum vp_state state;
    pid_t pid;
    int pidfd;      /* handed to the sandbox on assignment */
    int pool_pidfd; /* a duplicate the pool polls while the process is warm */
    uv_pipe_t ready;
    uv_pipe_t spec;
    uv_poll_t pool_poll;
    bool pool_poll_init;
    uv_write_t wr;
    int open_handles;
    char line[8192];
    size_t line_len;
    char *spec_text;
    size_t spec_len;
    struct vmm_priv *owner; /* assigned: whose start this is */
    struct vmm_proc *next;  /* in the warm list */
    bool in_pool;
};

struct vmm_pool {
    struct vmm_proc *warm; /* ready to take a spec */
    size_t n_warm, n_starting;
    bool closing;
};

static struct vmm_pool vmm__pool;

/* Warm processes released at airlockd's stop (EOF on their standard input): they remove
 * their warm cgroups and exit on their own. Their pidfds are kept so that airlockd exits
 * only after them (cp_vmm_pool_wait), leaving nothing behind. */
static int *vmm__released;
static size_t vmm__n_released, vmm__cap_released;

static void vp__release_track(int pidfd)
{
    int fd = pidfd >= 0 ? fcntl(pidfd, F_DUPFD_CLOEXEC, 3) : -1;
    if (fd < 0)
        return;
    if (vmm__n_released == vmm__cap_released) {
        size_t cap = vmm__cap_released ? 2 * vmm__cap_released : 64;
        int *n = realloc(vmm__released, cap * sizeof *n);
        if (!n) {
            close(fd);
            return;
        }
        vmm__released = n;
        vmm__cap_released = cap;
    }
    vmm__released[vmm__n_released++] = fd;
}

static void vmm__start_finish(struct vmm_priv *p, int rc, const char *msg);
static void vmm__pool_refill(struct cp *cp);

static void vp__closed(uv_handle_t *h)
{
    struct vmm_proc *v = h->data;
    if (--v->open_handles > 0)
        return;
    if (v->spec_text) {
        explicit_bzero(v->spec_text, v->spec_len);
        free(v->spec_text);
    }
    if (v->pool_pidfd >= 0)
        close(v->pool_pidfd);
    if (v->pidfd >= 0)
        close(v->pidfd);
    free(v);
}

static void vp__close(struct vmm_proc *v, uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, vp__closed);
}

/* Ends the process's life as a vmm_proc (the process itself goes on if assigned). */
static void vp__done(struct vmm_proc *v)
{
    if (v->state == VP_DONE)
        return;
    v->state = VP_DONE;
    vp__close(v, (uv_handle_t *)&v->ready);
    if (v->pool_poll_init)
        vp__close(v, (uv_handle_t *)&v->pool_poll);
    if (!v->spec_text) /* nothing being written */
        vp__close(v, (uv_handle_t *)&v->spec);
}

static void vp__pool_remove(struct vmm_proc *v)
{
    if (!v->in_pool)
        return;
    for (struct vmm_proc **pp = &vmm__pool.warm; *pp; pp = &(*pp)->next) {
        if (*pp == v) {
            *pp = v->next;
            vmm__pool.n_warm--;
            break;
        }
    }
    v->in_pool = false;
}

static void vp__line(struct vmm_proc *v)
{
    v->line[v->line_len] = '\0';
    json_t *j = json_loads(v->line, 0, NULL);
    if (v->state == VP_STARTING) {
        if (j && json_is_true(json_object_get(j, "warm")) && vmm__pool.closing) {
            /* Started before airlockd began to stop: release it (EOF on its stdin). */
            vmm__pool.n_starting--;
            vp__release_track(v->pidfd);
            vp__done(v);
        } else if (j && json_is_true(json_object_get(j, "warm"))) {
            v->state = VP_WARM;
            vmm__pool.n_starting--;
            v->next = vmm__pool.warm;
            vmm__pool.warm = v;
            vmm__pool.n_warm++;
            v->in_pool = true;
            vmm__pool_refill(v->cp); /* the next one, if the pool is still short */
        } else {
            al_warn("a warm airlock-vmm (pid %d) did not get ready: %s", (int)v->pid, v->line);
            vmm__pool.n_starting--;
            cp_proc_signal(v->pidfd, SIGKILL);
            vp__done(v);
        }
        json_decref(j);
        return;
    }
    if (v->state != VP_ASSIGNED || !v->owner) {
        json_decref(j);
        return;
    }
    struct vmm_priv *p = v->owner;
    v->owner = NULL;
    if (!j || !json_is_object(j)) {
        json_decref(j);
        vp__done(v);
        vmm__start_finish(p, -EPROTO, "airlock-vmm's ready line is not JSON");
        return;
    }
    if (json_is_true(json_object_get(j, "ready"))) {
        json_decref(j);
        vp__done(v);
        vmm__start_finish(p, 0, NULL);
        return;
    }
    char msg[1024];
    const char *e = json_string_value(json_object_get(j, "error"));
    snprintf(msg, sizeof msg, "%s", e ? e : "airlock-vmm reported a failure");
    /* "busy": the sandboxes together are at their limits (a condition that passes). */
    int code = json_is_true(json_object_get(j, "busy")) ? -EAGAIN : -EIO;
    json_decref(j);
    vp__done(v);
    vmm__start_finish(p, code, msg);
}

static void vp__alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    struct vmm_proc *v = h->data;
    (void)sz;
    b->base = v->line + v->line_len;
    b->len = sizeof v->line - 1 - v->line_len;
}

static void vp__on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    struct vmm_proc *v = s->data;
    (void)b;
    if (v->state == VP_DONE)
        return;
    if (n > 0) {
        v->line_len += (size_t)n;
        char *nl;
        while (v->state != VP_DONE && (nl = memchr(v->line, '\n', v->line_len))) {
            size_t l = (size_t)(nl - v->line);
            char rest[sizeof v->line];
            size_t rl = v->line_len - l - 1;
            memcpy(rest, nl + 1, rl);
            v->line_len = l;
            vp__line(v);
            memcpy(v->line, rest, rl);
            v->line_len = rl;
        }
        if (v->line_len >= sizeof v->line - 1) {
            v->line_len = 0; /* a line that long is garbage: drop it */
        }
        return;
    }
    if (n < 0) {
        /* EOF: the process is exiting (its status comes with its pidfd). */
        int st = -1;
        char how[128] = "exited";
        int fd = v->owner ? v->owner->sb->pidfd : v->pidfd;
        if (v->state == VP_ASSIGNED && v->owner && fd >= 0 && cp_proc_reap(fd, &st) == 0)
            cp_proc_describe(st, how, sizeof how);
        if (v->state == VP_STARTING)
            vmm__pool.n_starting--;
        vp__pool_remove(v);
        struct vmm_priv *p = v->state == VP_ASSIGNED ? v->owner : NULL;
        v->owner = NULL;
        vp__done(v);
        if (p) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "airlock-vmm %s before its sandbox was ready (its log lines "
                     "are in airlockd's output)",
                     how);
            vmm__start_finish(p, -EIO, msg);
        }
    }
}

/* A warm process that dies while waiting is forgotten (and replaced at the next refill). */
static void vp__pool_exit(uv_poll_t *h, int status, int events)
{
    struct vmm_proc *v = h->data;
    (void)status;
    (void)events;
    if (v->state != VP_WARM && v->state != VP_STARTING)
        return;
    int st;
    if (cp_proc_reap(v->pool_pidfd, &st) == -EAGAIN)
        return;
    if (v->state == VP_STARTING)
        vmm__pool.n_starting--;
    vp__pool_remove(v);
    vp__done(v);
}

/* Spawns airlock-vmm, warm (waits for a spec) or cold (the spec is written at once). */
static struct vmm_proc *vp__spawn(struct cp *cp, bool warm, int tap_fd, struct al_error *err)
{
    struct vmm_proc *v = calloc(1, sizeof *v);
    if (!v) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    v->cp = cp;
    v->pidfd = v->pool_pidfd = -1;
    int specp[2] = {-1, -1}, readyp[2] = {-1, -1};
    if (pipe2(specp, O_CLOEXEC) < 0 || pipe2(readyp, O_CLOEXEC) < 0) {
        al_error_set(err, -errno, "pipe: %s", strerror(errno));
        if (specp[0] >= 0) {
            close(specp[0]);
            close(specp[1]);
        }
        free(v);
        return NULL;
    }
    char *argv[24];
    int n = 0;
    argv[n++] = cp->vmm_bin;
    argv[n++] = "--state-dir";
    argv[n++] = cp->cfg.state_dir;
    char mem[32], pids[32], cpus[32];
    if (warm) {
        /* The resources every create asks for (cp_vmm_spec): the cgroups get them now. */
        snprintf(mem, sizeof mem, "%lld", (long long)(cp->cfg.memory_bytes >> 20));
        snprintf(pids, sizeof pids, "%lld", (long long)cp->cfg.pids);
        snprintf(cpus, sizeof cpus, "%lld", (long long)cp->cfg.cpu_count);
        argv[n++] = "--warm";
        argv[n++] = "--cgroup-parent";
        argv[n++] = cp->cfg.cgroup_parent;
        argv[n++] = "--memory-mib";
        argv[n++] = mem;
        argv[n++] = "--pids";
        argv[n++] = pids;
        argv[n++] = "--cpus";
        argv[n++] = cpus;
    }
    argv[n++] = "--spec";
    argv[n++] = "-";
    argv[n++] = "--ready-fd";
    argv[n++] = "3";
    argv[n] = NULL;
    struct al_spawn s = {.path = cp->vmm_bin,
                         .argv = argv,
                         .fds = {specp[0], 2, 2, readyp[1], tap_fd},
                         .nfds = tap_fd >= 0 ? 5 : 4,
                         .new_session = true,
                         .no_wait_exec = true};
    int rc = al_spawn(&s, &v->pid, &v->pidfd, err);
    close(specp[0]);
    close(readyp[1]);
    if (rc) {
        close(specp[1]);
        close(readyp[0]);
        free(v);
        return NULL;
    }
    uv_pipe_init(cp->loop, &v->spec, 0);
    uv_pipe_init(cp->loop, &v->ready, 0);
    v->spec.data = v->ready.data = v->pool_poll.data = v;
    uv_pipe_open(&v->spec, specp[1]);
    uv_pipe_open(&v->ready, readyp[0]);
    v->open_handles = 2;
    if (warm) {
        v->pool_pidfd = fcntl(v->pidfd, F_DUPFD_CLOEXEC, 0);
        if (v->pool_pidfd >= 0 && uv_poll_init(cp->loop, &v->pool_poll, v->pool_pidfd) == 0) {
            v->open_handles++;
            v->pool_poll_init = true;
            uv_poll_start(&v->pool_poll, UV_READABLE, vp__pool_exit);
        }
        vmm__pool.n_starting++;
    } else {
        v->state = VP_ASSIGNED;
    }
    uv_read_start((uv_stream_t *)&v->ready, vp__alloc, vp__on_read);
    return v;
}

static void vmm__pool_refill(struct cp *cp)
{
    /* Refilled between bursts, not during one: a burst takes what is ready and does not
     * compete with its own replacements for the CPU. A few at a time, each ready process
     * starting the next (vp__line), so that a burst that resumes finds the CPU free: the
     * refill stops as soon as a creation is in flight again. */
    if (vmm__pool.closing || cp->stopping || cp->n_creating > 0 ||
        strcmp(cp->backend_kind, "jail") != 0)
        return; /* (kvm: a sandbox's VMM inherits its tap at its start: no warm processes) */
    while (vmm__pool.n_warm + vmm__pool.n_starting < (size_t)cp->cfg.warm_pool &&
           vmm__pool.n_starting < VMM_POOL_SPAWN_MAX) {
        struct al_error err = {0};
        if (!vp__spawn(cp, true, -1, &err)) {
            al_warn("cannot start a warm airlock-vmm: %s", al_error_str(&err));
            return;
        }
    }
}

/* Takes a warm process (its pool watch ends: the sandbox's lifecycle watches it now). */
static struct vmm_proc *vp__take_warm(void)
{
    struct vmm_proc *v = vmm__pool.warm;
    if (!v)
        return NULL;
    vp__pool_remove(v);
    v->state = VP_ASSIGNED;
    if (v->pool_poll_init)
        vp__close(v, (uv_handle_t *)&v->pool_poll);
    return v;
}

void cp_vmm_pool_refill(struct cp *cp)
{
    if (cp->backend == &cp_backend_vmm && strcmp(cp->backend_kind, "jail") == 0)
        vmm__pool_refill(cp);
}

void cp_vmm_pool_start(struct cp *cp)
{
    if (cp->backend == &cp_backend_vmm && strcmp(cp->backend_kind, "jail") == 0)
        vmm__pool_refill(cp);
}

void cp_vmm_pool_counts(const struct cp *cp, size_t *ready, size_t *size)
{
    bool used = cp->backend == &cp_backend_vmm && strcmp(cp->backend_kind, "jail") == 0;
    *ready = used ? vmm__pool.n_warm : 0;
    *size = used ? (size_t)cp->cfg.warm_pool : 0;
}

void cp_vmm_pool_stop(void)
{
    /* Closing their standard input releases warm processes (they exit 0). */
    vmm__pool.closing = true;
    while (vmm__pool.warm) {
        struct vmm_proc *v = vmm__pool.warm;
        vp__pool_remove(v);
        vp__release_track(v->pidfd);
        vp__done(v);
    }
}

void cp_vmm_pool_wait(unsigned timeout_ms)
{
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    size_t left = vmm__n_released;
    struct pollfd *pf = left ? calloc(left, sizeof *pf) : NULL;
    while (pf && left) {
        size_t n = 0;
        for (size_t i = 0; i < vmm__n_released; i++)
            if (vmm__released[i] >= 0)
                pf[n++] = (struct pollfd){.fd = vmm__released[i], .events = POLLIN};
        uint64_t now = al_now_ns();
        if (now >= deadline)
            break;
        int r = poll(pf, n, (int)((deadline - now) / 1000000ull) + 1);
        if (r < 0 && errno != EINTR)
            break;
        for (size_t k = 0; r > 0 && k < n; k++) {
            if (!pf[k].revents)
                continue;
            for (size_t i = 0; i < vmm__n_released; i++) {
                if (vmm__released[i] == pf[k].fd) {
                    close(vmm__released[i]);
                    vmm__released[i] = -1;
                    left--;
                }
            }
        }
    }
    free(pf);
    if (left)
        al_warn("%zu released warm airlock-vmm process%s still running after %u ms (each "
                "removes its warm cgroups when it exits)",
                left, left == 1 ? " is" : "es are", timeout_ms);
    for (size_t i = 0; i < vmm__n_released; i++)
        if (vmm__released[i] >= 0)
            close(vmm__released[i]);
    free(vmm__released);
    vmm__released = NULL;
    vmm__n_released = vmm__cap_released = 0;
}

/* ---- start ----------------------------------------------------------------------------- */

static void vmm__start_finish(struct vmm_priv *p, int rc, const char *msg)
{
    if (p->start_done)
        return;
    p->start_done = true;
    if (p->timer_open) {
        p->timer_open = false;
        uv_close((uv_handle_t *)&p->timer, vmm__handle_closed);
    }
    if (p->netns_fd >= 0) {
        close(p->netns_fd);
        p->netns_fd = -1;
    }
    struct cp_sandbox *sb = p->sb;
    cp_backend_cb cb = p->start_cb;
    p->start_cb = NULL;
    if (rc && p->proc) {
        /* The process is on its way out (or stuck): make sure it goes. */
        p->proc->owner = NULL;
    }
    p->proc = NULL;
    cb(sb, rc, msg);
    cp_sb_unref(sb); /* the start's reference */
}

static void vmm__on_start_timeout(uv_timer_t *t)
{
    struct vmm_priv *p = t->data;
    struct cp_sandbox *sb = p->sb;
    if (sb->pidfd >= 0)
        cp_proc_signal(sb->pidfd, SIGKILL);
    if (p->proc) {
        p->proc->owner = NULL;
        vp__done(p->proc);
    }
    char msg[160];
    snprintf(msg, sizeof msg, "the sandbox was not ready within %llu ms",
             (unsigned long long)sb->cp->cfg.start_timeout_ms + 5000);
    vmm__start_finish(p, -ETIMEDOUT, msg);
}

static void vmm__spec_written(uv_write_t *w, int status)
{
    struct vmm_proc *v = w->data;
    if (status)
        al_debug("airlock-vmm %d: writing the spec: %s", (int)v->pid, uv_strerror(status));
    explicit_bzero(v->spec_text, v->spec_len);
    free(v->spec_text);
    v->spec_text = NULL;
    vp__close(v, (uv_handle_t *)&v->spec); /* EOF: the spec is complete */
}

json_t *cp_vmm_spec(struct cp_sandbox *sb, const struct cp_start_args *a, int netns_fd)
{
    struct cp *cp = sb->cp;
    bool kvm = strcmp(cp->backend_kind, "kvm") == 0;
    json_t *res = json_pack("{s:i,s:I,s:I,s:I}", "cpus", sb->rec.cpu_count, "memory_mib",
                            (json_int_t)sb->rec.memory_mb, "disk_mib", (json_int_t)sb->rec.disk_mb,
                            "pids", (json_int_t)cp->cfg.pids);
    json_t *net;
    if (kvm && a->tap_fd >= 0 && a->addr && a->tap_mac) {
        /* The tap is descriptor CP_VMM_TAP_FD of airlock-vmm (vp__spawn); the guest
         * configures its address itself, and its gateway is its DNS server. */
        char cidr[64];
        snprintf(cidr, sizeof cidr, "%s/%u", a->addr, a->prefix_len);
        net = json_pack("{s:s,s:i,s:s,s:s}", "mode", "tap", "tap_fd", CP_VMM_TAP_FD, "mac",
                        a->tap_mac, "address", cidr);
        if (a->dns) {
            json_object_set_new(net, "gateway", json_string(a->dns));
            json_object_set_new(net, "dns", json_pack("[s]", a->dns));
        }
    } else if (!kvm && netns_fd >= 0) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)getpid(), netns_fd);
        net = json_pack("{s:s,s:s}", "mode", "netns", "netns", path);
        if (a->dns)
            json_object_set_new(net, "dns", json_pack("[s]", a->dns));
    } else {
        net = json_pack("{s:s}", "mode", "none");
    }
    json_t *agent = json_pack("{s:I,s:I}", "log_max_bytes", (json_int_t)cp->cfg.log_max_bytes,
                              "start_timeout_ms", (json_int_t)cp->cfg.start_timeout_ms);
    if (cp->cfg.agent_dir && cp->cfg.agent_dir[0])
        json_object_set_new(agent, "dir", json_string(cp->cfg.agent_dir));
    if (a->warm) /* the code interpreter's kernels wait for the claim's envVars */
        json_object_set_new(agent, "env", json_pack("{s:s}", "AIRLOCK_AGENT_WARM", "1"));
    json_t *env = a->env_vars ? json_incref(a->env_vars) : json_object();
    json_t *s =
        json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", sb->rec.id, "backend",
                  kvm ? "kvm" : "jail", "template", a->template_dir, "template_id",
                  a->template_name, "resources", res, "network", net, "agent", agent, "env", env);
    /* (a warm sandbox has none: it gets its token when a creation claims it, warm.c) */
    if (s && sb->rec.token[0])
        json_object_set_new(s, "access_token", json_string(sb->rec.token));
    /* The jail section confines the KVM backend's VMM process too (its cgroup parent, its
     * id range), so that --sweep finds both the same way. */
    json_t *j = json_pack("{s:s}", "cgroup_parent", cp->cfg.cgroup_parent);
    if (cp->cfg.uid_base)
        json_object_set_new(j, "uid_base", json_integer(cp->cfg.uid_base));
    if (cp->cfg.uid_slots)
        json_object_set_new(j, "uid_slots", json_integer(cp->cfg.uid_slots));
    if (a->restore_dir && !kvm)
        json_object_set_new(j, "restore", json_string(a->restore_dir));
    if (a->build && !kvm)
        json_object_set_new(j, "build", json_true());
    json_object_set_new(s, "jail", j);
    if (kvm) {
        /* No kernel: airlock-vmm's default ($AIRLOCK_KVM_KERNEL, the installed one), the
         * same the probe booted. */
        json_t *k = json_object();
        if (cp->cfg.kvm_kernel && cp->cfg.kvm_kernel[0])
            json_object_set_new(k, "kernel", json_string(cp->cfg.kvm_kernel));
        json_object_set_new(s, "kvm", k);
    }
    if (a->hostname)
        json_object_set_new(s, "hostname", json_string(a->hostname));
    if (a->ca_cert_pem)
        json_object_set_new(s, "ca_cert_pem", json_string(a->ca_cert_pem));
    /* Its volumes, mounted on the host first (after a reboot nothing is). */
    size_t i;
    json_t *v;
    json_array_foreach(sb->rec.volumes, i, v)
    {
        char dir[4300];
        struct al_error err = {0};
        if (cp_volume_mount(cp, json_string_value(json_object_get(v, "volumeID")), dir, sizeof dir,
                            &err)) {
            al_error("sandbox %s: volume %s: %s", sb->rec.id,
                     json_string_value(json_object_get(v, "name")), al_error_str(&err));
            json_decref(s);
            return NULL;
        }
        json_t *vols = json_object_get(s, "volumes");
        if (!vols)
            json_object_set_new(s, "volumes", vols = json_array());
        json_array_append_new(
            vols, json_pack("{s:s,s:O}", "source", dir, "target", json_object_get(v, "path")));
    }
    return s;
}

static int vmm_start(struct cp_sandbox *sb, const struct cp_start_args *a, cp_backend_cb cb)
{
    struct cp *cp = sb->cp;
    struct vmm_priv *p = vmm__priv(sb);
    if (!p)
        return -ENOMEM;
    vmm__paths(sb);
    p->netns_fd = -1;
    if (a->netns_fd >= 0 && (p->netns_fd = fcntl(a->netns_fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return -errno;
    bool jail = strcmp(cp->backend_kind, "jail") == 0;
    json_t *spec = cp_vmm_spec(sb, a, p->netns_fd);
    char *text = spec ? json_dumps(spec, JSON_COMPACT) : NULL;
    json_decref(spec); /* (the env values are the caller's; it wipes them) */
    if (!text) {
        if (p->netns_fd >= 0)
            close(p->netns_fd);
        return spec ? -ENOMEM : -EIO; /* (a volume that cannot be mounted: logged) */
    }
    struct al_error err = {0};
    /* kvm: always a fresh process, which inherits the tap (descriptor CP_VMM_TAP_FD). */
    struct vmm_proc *v = jail ? vp__take_warm() : NULL;
    bool warm = v != NULL;
    if (!v && !(v = vp__spawn(cp, false, jail ? -1 : a->tap_fd, &err))) {
        al_error("sandbox %s: %s", sb->rec.id, al_error_str(&err));
        explicit_bzero(text, strlen(text));
        free(text);
        if (p->netns_fd >= 0)
            close(p->netns_fd);
        return err.code ? err.code : -EIO;
    }
    vmm__pool_refill(cp);
    /* The sandbox owns the process from now on: its pidfd is the sandbox's. */
    sb->pidfd = v->pidfd;
    v->pidfd = -1;
    sb->rec.pid = v->pid;
    sb->rec.pid_start = cp_proc_start_time(v->pid);
    cp_sb_save(sb); /* so that a restart during the creation finds the process */
    v->owner = p;
    v->spec_text = text;
    v->spec_len = strlen(text);
    p->proc = v;
    p->start_cb = cb;
    p->start_done = false;
    cp_sb_ref(sb); /* the start's reference */
    uv_timer_init(cp->loop, &p->timer);
    p->timer.data = p;
    p->timer_open = true;
    cp_sb_ref(sb);
    uv_timer_start(&p->timer, vmm__on_start_timeout, cp->cfg.start_timeout_ms + 5000, 0);
    uv_buf_t b = uv_buf_init(v->spec_text, (unsigned)v->spec_len);
    v->wr.data = v;
    if (uv_write(&v->wr, (uv_stream_t *)&v->spec, &b, 1, vmm__spec_written)) {
        explicit_bzero(v->spec_text, v->spec_len);
        free(v->spec_text);
        v->spec_text = NULL;
        vp__close(v, (uv_handle_t *)&v->spec);
    }
    sb->start_how = warm ? "(warm airlock-vmm)" : "(airlock-vmm started cold)";
    al_debug("sandbox %s: airlock-vmm %d (%s)", sb->rec.id, (int)v->pid, warm ? "warm" : "cold");
    return 0;
}

/* ---- stop, pause, resume, stats, adopt --------------------------------------------------- */

static void vmm__stop_cleaned(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct vmm_priv *p = sb->bpriv;
    cp_backend_cb cb = p->start_cb;
    p->start_cb = NULL;
    cb(sb, rc, msg);
}

static void vmm__stopped(struct vmm_call *x, int status, json_t *body, const char *why)
{
    struct cp_sandbox *sb = x->sb;
    (void)body;
    if (status == 204 || status == 200) {
        x->cb(sb, 0, NULL);
        return;
    }
    /* The vmm did not stop cleanly (or is gone): kill it and reclaim what it left. */
    al_warn("sandbox %s: airlock-vmm did not stop on request (%s): killing it and cleaning up",
            sb->rec.id, status < 0 ? why : "bad status");
    struct vmm_priv *p = vmm__priv(sb);
    p->start_cb = x->cb;
    if (vmm_cleanup(sb, vmm__stop_cleaned)) {
        p->start_cb = NULL;
        x->cb(sb, -EIO, "cannot clean up after airlock-vmm");
    }
}

static int vmm_stop(struct cp_sandbox *sb, cp_backend_cb cb)
{
    vmm__paths(sb);
    struct vmm_call c = {.cb = cb, .done = vmm__stopped};
    return vmm__call(sb, "POST", "/stop", "{\"grace_ms\":0}", VMM_STOP_TIMEOUT_MS, &c);
}

static void vmm__simple_done(struct vmm_call *x, int status, json_t *body, const char *why)
{
    (void)body;
    int rc = status == 204 || status == 200 ? 0 : status == 409 ? -EALREADY : -EIO;
    x->cb(x->sb, rc, rc ? why : NULL);
}

static int vmm_pause(struct cp_sandbox *sb, cp_backend_cb cb)
{
    struct vmm_call c = {.cb = cb, .done = vmm__simple_done};
    return vmm__call(sb, "POST", "/pause", NULL, VMM_API_TIMEOUT_MS, &c);
}

static int vmm_resume(struct cp_sandbox *sb, cp_backend_cb cb)
{
    struct vmm_call c = {.cb = cb, .done = vmm__simple_done};
    return vmm__call(sb, "POST", "/resume", NULL, VMM_API_TIMEOUT_MS, &c);
}

static void vmm__stats_done(struct vmm_call *x, int status, json_t *body, const char *why)
{
    (void)why;
    x->stats_cb(x->sb, status == 200 && body ? 0 : -EIO, body, x->arg);
}

static int vmm_stats(struct cp_sandbox *sb, cp_backend_stats_cb cb, void *arg)
{
    struct vmm_call c = {.stats_cb = cb, .arg = arg, .done = vmm__stats_done};
    return vmm__call(sb, "GET", "/stats", NULL, VMM_API_TIMEOUT_MS, &c);
}

static void vmm__snapshot_done(struct vmm_call *x, int status, json_t *body, const char *why)
{
    int rc = status == 200 && json_is_object(body) ? 0
             : status == 409                       ? -EALREADY
             : status == 501                       ? -ENOTSUP
                                                   : -EIO;
    char msg[600];
    if (rc && status > 0 && !*why)
        snprintf(msg, sizeof msg, "airlock-vmm answered %d", status);
    else
        snprintf(msg, sizeof msg, "%s", why);
    x->snap_cb(x->sb, rc, rc ? NULL : body, rc ? msg : NULL, x->arg);
}

static int vmm_snapshot(struct cp_sandbox *sb, const char *path, cp_backend_snap_cb cb, void *arg)
{
    json_t *b = json_pack("{s:s}", "path", path);
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!text)
        return -ENOMEM;
    struct vmm_call c = {.snap_cb = cb, .arg = arg, .done = vmm__snapshot_done};
    int rc = vmm__call(sb, "POST", "/snapshot", text, VMM_SNAPSHOT_TIMEOUT_MS, &c);
    free(text);
    return rc;
}

static int vmm_rollback(struct cp_sandbox *sb, const char *path, cp_backend_snap_cb cb, void *arg)
{
    /* The new agent needs the sandbox's token, which airlock-vmm dropped once its first
     * agent had it. */
    json_t *b = json_pack("{s:s,s:s}", "path", path, "access_token", sb->rec.token);
    char *text = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!text)
        return -ENOMEM;
    /* Its answer comes once the copy is done and the new agent answers /health. */
    struct vmm_call c = {.snap_cb = cb, .arg = arg, .done = vmm__snapshot_done};
    int rc = vmm__call(sb, "POST", "/rollback", text, VMM_SNAPSHOT_TIMEOUT_MS, &c);
    explicit_bzero(text, strlen(text));
    free(text);
    return rc;
}

static void vmm__adopt_done(struct vmm_call *x, int status, json_t *body, const char *why)
{
    struct cp_sandbox *sb = x->sb;
    if (status != 200 || !json_is_object(body)) {
        x->cb(sb, -ESRCH, status < 0 ? why : "airlock-vmm answered its status with an error");
        return;
    }
    const char *state = json_string_value(json_object_get(body, "state"));
    json_int_t vpid = json_integer_value(json_object_get(body, "vmm_pid"));
    if (!state || (strcmp(state, "running") != 0 && strcmp(state, "paused") != 0)) {
        x->cb(sb, -ESRCH, "its airlock-vmm is not running it any more");
        return;
    }
    if (sb->rec.pid > 0 && vpid != sb->rec.pid) {
        x->cb(sb, -ESRCH, "another process answers on its socket");
        return;
    }
    int fd;
    if (cp_proc_open((pid_t)vpid, sb->rec.pid > 0 ? sb->rec.pid_start : 0, &fd)) {
        x->cb(sb, -ESRCH, "its airlock-vmm process is gone");
        return;
    }
    if (sb->pidfd >= 0)
        close(sb->pidfd);
    sb->pidfd = fd;
    sb->rec.pid = (pid_t)vpid;
    if (!sb->rec.pid_start)
        sb->rec.pid_start = cp_proc_start_time((pid_t)vpid);
    sb->rec.state = strcmp(state, "paused") == 0 ? CP_SB_PAUSED : CP_SB_RUNNING;
    x->cb(sb, 0, NULL);
}

static int vmm_adopt(struct cp_sandbox *sb, cp_backend_cb cb)
{
    vmm__paths(sb);
    struct vmm_call c = {.cb = cb, .done = vmm__adopt_done};
    return vmm__call(sb, "GET", "/status", NULL, 5000, &c);
}

static int vmm_sweep(struct cp *cp, struct al_error *err)
{
    struct vmm_sweep_args sa;
    char *argv[16];
    int n = 0;
    argv[n++] = cp->vmm_bin;
    argv[n++] = "--state-dir";
    argv[n++] = cp->cfg.state_dir;
    argv[n++] = "--sweep";
    n = vmm__sweep_args(cp, &sa, argv, n);
    argv[n] = NULL;
    struct al_spawn s = {.path = cp->vmm_bin, .argv = argv, .fds = {-1, 2, 2}, .nfds = 3};
    pid_t pid;
    int rc = al_spawn(&s, &pid, NULL, err);
    if (rc)
        return rc;
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char how[128];
        cp_proc_describe(st, how, sizeof how);
        return al_error_set(err, -EIO, "airlock-vmm --sweep %s", how);
    }
    return 0;
}

/* airlock-vmm --limit-parent: the cgroups are airlock-vmm's to handle (it owns the layout). */
static int vmm_limit_all(struct cp *cp, uint64_t pids, uint64_t memory_bytes,
                         uint64_t *pids_current, struct al_error *err)
{
    char spids[32], smem[32];
    snprintf(spids, sizeof spids, "%" PRIu64, pids);
    snprintf(smem, sizeof smem, "%" PRIu64, memory_bytes >> 20);
    char *argv[] = {cp->vmm_bin,
                    "--state-dir",
                    cp->cfg.state_dir,
                    "--limit-parent",
                    "--cgroup-parent",
                    cp->cfg.cgroup_parent,
                    "--pids",
                    spids,
                    "--memory-mib",
                    smem,
                    NULL};
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return al_error_set(err, -errno, "pipe: %s", strerror(errno));
    struct al_spawn s = {.path = cp->vmm_bin, .argv = argv, .fds = {-1, p[1], 2}, .nfds = 3};
    pid_t pid;
    int pidfd;
    int rc = al_spawn(&s, &pid, &pidfd, err);
    close(p[1]);
    if (rc) {
        close(p[0]);
        return rc;
    }
    char buf[1024];
    size_t len;
    int st = -1;
    struct cp_proc_child child = {
        .outfd = p[0], .pid = pid, .pidfd = pidfd, .t0 = al_now_ns(), .kill_after_ms = 30000};
    rc = cp_proc_collect(&child, buf, sizeof buf, &len, &st);
    close(p[0]);
    close(pidfd);
    if (rc)
        return al_error_set(err, rc, "airlock-vmm --limit-parent did not finish within 30 s");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char how[128];
        cp_proc_describe(st, how, sizeof how);
        return al_error_set(err, -EIO, "airlock-vmm --limit-parent %s (its error is above)", how);
    }
    json_t *j = json_loads(buf, 0, NULL);
    json_t *max = json_object_get(j, "pids_max");
    bool ok = json_is_integer(max) && (uint64_t)json_integer_value(max) == pids;
    *pids_current = (uint64_t)json_integer_value(json_object_get(j, "pids_current"));
    json_decref(j);
    if (!ok)
        return al_error_set(err, -EIO,
                            "airlock-vmm --limit-parent answered '%.200s', not the pids.max "
                            "asked for (%" PRIu64 ")",
                            buf, pids);
    return 0;
}

static void vmm_log_path(const struct cp_sandbox *sb, char *out, size_t len)
{
    snprintf(out, len, "%s/sandboxes/%s/agent.log", sb->cp->cfg.state_dir, sb->rec.id);
}

const struct cp_backend_ops cp_backend_vmm = {
    .name = "vmm",
    .start = vmm_start,
    .stop = vmm_stop,
    .pause = vmm_pause,
    .resume = vmm_resume,
    .stats = vmm_stats,
    .snapshot = vmm_snapshot,
    .rollback = vmm_rollback,
    .adopt = vmm_adopt,
    .cleanup = vmm_cleanup,
    .sweep = vmm_sweep,
    .limit_all = vmm_limit_all,
    .log_path = vmm_log_path,
};
