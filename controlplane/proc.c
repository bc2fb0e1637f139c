/* controlplane/proc: see proc.h. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "record.h"

extern char **environ;

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static int proc__pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* ---- spawning without waiting for the exec ---------------------------------------------
 *
 * posix_spawn() returns once the child has exec'd (CLONE_VFORK): the caller waits while
 * the child is scheduled, moves its descriptors and execs. Under a burst of creations that
 * wait was 1.0-1.1 ms per airlock-vmm on average (the child competes for a CPU), about 40%
 * of airlockd's event loop's time, during which nothing else was answered or forwarded.
 *
 * proc__spawn_nowait() does what posix_spawn does, but the child runs on a stack of its
 * own in one private block of memory (copies of the path, argv and environment, its stack)
 * and the caller returns as soon as it exists (clone with CLONE_VM, without CLONE_VFORK;
 * CLONE_PIDFD gives the pidfd). Until its exec the child shares airlockd's memory, so it
 * uses raw system calls only (no errno, no locks, nothing of libc's that keeps state) and
 * touches nothing but its block. The block is freed once the child no longer runs in it:
 * the child holds the write end of a close-on-exec pipe, so the read end reads EOF when it
 * has exec'd or died, or the errno of a failed exec. Blocks are reclaimed at later spawns
 * (a poll of each pending pipe, no waiting). x86_64 only; elsewhere, and on kernels without
 * CLONE_PIDFD (< 5.2), posix_spawn as before. */
#if defined(__x86_64__)
#define PROC_NOWAIT 1

/* The child runs before its exec in airlockd's memory: no sanitizer runtime there. */
#define PROC_CHILD_CODE __attribute__((no_sanitize_address, no_sanitize("undefined"), noinline))

PROC_CHILD_CODE static long proc__sys(long n, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

struct proc__kern_sigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

struct proc__blk {
    void *map; /* the mapping this block lies in (guard page, stack, block) */
    size_t size;
    int err_r; /* parent: read end (EOF = exec'd or died; an int = exec's errno) */
    int err_w; /* child: write end (close-on-exec) */
    struct proc__blk *next;
    /* what the child reads, all inside this block */
    const char *path;
    char **argv, **envp;
    int fds[CP_PROC_MAX_FDS];
    int nfds, base;
    bool new_session;
    char devnull[16];
};

static struct proc__blk *proc__blks; /* children that may still run in their block */
static pthread_mutex_t proc__blk_lock = PTHREAD_MUTEX_INITIALIZER;

PROC_CHILD_CODE static int proc__child(void *arg)
{
    struct proc__blk *b = arg;
    /* Default dispositions (the parent blocked every signal around the clone, so no
     * handler of airlockd's can run here first), own session, descriptors as asked. */
    struct proc__kern_sigaction dfl = {.handler = SIG_DFL};
    for (long sig = 1; sig <= 64; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            proc__sys(SYS_rt_sigaction, sig, (long)&dfl, 0, 8, 0, 0);
    if (b->new_session)
        proc__sys(SYS_setsid, 0, 0, 0, 0, 0, 0);
    long r = 0;
    for (int i = 0; i < b->nfds && r >= 0; i++)
        if (b->fds[i] >= 0)
            r = proc__sys(SYS_dup2, b->fds[i], b->base + i, 0, 0, 0, 0);
    for (int i = 0; (i < b->nfds || i < 3) && r >= 0; i++) {
        if (i < b->nfds && b->fds[i] >= 0) {
            r = proc__sys(SYS_dup2, b->base + i, i, 0, 0, 0, 0);
            proc__sys(SYS_close, b->base + i, 0, 0, 0, 0, 0);
        } else if (i < 3) {
            long fd =
                proc__sys(SYS_open, (long)b->devnull, i == 0 ? O_RDONLY : O_WRONLY, 0, 0, 0, 0);
            r = fd < 0 ? fd : proc__sys(SYS_dup2, fd, i, 0, 0, 0, 0);
            if (fd >= 0 && fd != i)
                proc__sys(SYS_close, fd, 0, 0, 0, 0, 0);
        }
    }
    if (r >= 0) {
        uint64_t none = 0;
        proc__sys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, 8, 0, 0);
        r = proc__sys(SYS_execve, (long)b->path, (long)b->argv, (long)b->envp, 0, 0, 0);
    }
    int e = (int)-r;
    proc__sys(SYS_write, b->err_w, (long)&e, sizeof e, 0, 0, 0);
    proc__sys(SYS_exit_group, 127, 0, 0, 0, 0, 0);
    return 127;
}

/* Frees the blocks of children that exec'd or died; logs failed execs. */
static void proc__blks_reap(void)
{
    pthread_mutex_lock(&proc__blk_lock);
    for (struct proc__blk **pp = &proc__blks; *pp;) {
        struct proc__blk *b = *pp;
        struct pollfd p = {.fd = b->err_r, .events = POLLIN};
        if (poll(&p, 1, 0) != 1) {
            pp = &b->next;
            continue;
        }
        int e = 0;
        if (read(b->err_r, &e, sizeof e) == (ssize_t)sizeof e)
            al_error("cannot start %s: %s", b->path, strerror(e));
        *pp = b->next;
        close(b->err_r);
        munmap(b->map, b->size);
    }
    pthread_mutex_unlock(&proc__blk_lock);
}

static size_t proc__strv_size(char *const *v, size_t *n)
{
    size_t sz = 0, i = 0;
    for (; v && v[i]; i++)
        sz += strlen(v[i]) + 1;
    *n = i;
    return sz + (i + 1) * sizeof(char *);
}

/* Copies the NULL-terminated vector v to *cur (pointers first, then the strings). */
static char **proc__strv_copy(char *const *v, size_t n, char **cur)
{
    char **out = (char **)(void *)*cur;
    char *p = *cur + (n + 1) * sizeof(char *);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(v[i]) + 1;
        memcpy(p, v[i], l);
        out[i] = p;
        p += l;
    }
    out[n] = NULL;
    *cur = p;
    return out;
}

/* 0, or -ENOSYS if this kernel cannot (the caller falls back to posix_spawn). */
static int proc__spawn_nowait(const struct cp_spawn *s, int base, pid_t *pid, int *pidfd,
                              struct al_error *err)
{
    proc__blks_reap();
    enum { STACK = 64 << 10 };
    char *const *envp = s->envp ? s->envp : environ;
    size_t na, ne, pl = strlen(s->path) + 1;
    /* (+32: the alignment of the path and of the two vectors below) */
    size_t data = sizeof(struct proc__blk) + 32 + pl + proc__strv_size(s->argv, &na) +
                  proc__strv_size(envp, &ne);
    long pg = sysconf(_SC_PAGESIZE);
    size_t size = (((size_t)pg + STACK + data) + (size_t)pg - 1) & ~((size_t)pg - 1);
    /* [guard page][stack, growing down][the block's data] */
    char *m =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED)
        return al_error_set(err, -errno, "cannot start %s: %s", s->path, strerror(errno));
    mprotect(m, (size_t)pg, PROT_NONE);
    char *stack_top = m + (size_t)pg + STACK;
    struct proc__blk *b = (struct proc__blk *)(void *)(stack_top);
    memset(b, 0, sizeof *b);
    b->map = m;
    b->size = size;
    char *cur = (char *)(b + 1);
    cur = (char *)(((uintptr_t)cur + 15) & ~(uintptr_t)15);
    memcpy(cur, s->path, pl);
    b->path = cur;
    cur += pl;
    cur = (char *)(((uintptr_t)cur + 7) & ~(uintptr_t)7);
    b->argv = proc__strv_copy(s->argv, na, &cur);
    cur = (char *)(((uintptr_t)cur + 7) & ~(uintptr_t)7);
    b->envp = proc__strv_copy(envp, ne, &cur);
    memcpy(b->fds, s->fds, sizeof b->fds);
    b->nfds = s->nfds;
    b->base = base;
    b->new_session = s->new_session;
    snprintf(b->devnull, sizeof b->devnull, "/dev/null");
    /* The pipe's ends above every descriptor the child moves, so that no move closes the
     * write end before the exec (its EOF would free the block under the running child). */
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        int e = errno;
        munmap(m, size);
        return al_error_set(err, -e, "cannot start %s: pipe: %s", s->path, strerror(e));
    }
    int above = base + CP_PROC_MAX_FDS;
    b->err_r = fcntl(pfd[0], F_DUPFD_CLOEXEC, above);
    int e = b->err_r < 0 ? errno : 0;
    b->err_w = fcntl(pfd[1], F_DUPFD_CLOEXEC, above);
    if (b->err_w < 0 && !e)
        e = errno;
    close(pfd[0]);
    close(pfd[1]);
    if (b->err_r < 0 || b->err_w < 0) {
        if (b->err_r >= 0)
            close(b->err_r);
        if (b->err_w >= 0)
            close(b->err_w);
        munmap(m, size);
        return al_error_set(err, -e, "cannot start %s: %s", s->path, strerror(e));
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int fd = -1;
    pid_t p = clone(proc__child, stack_top, CLONE_VM | CLONE_PIDFD | SIGCHLD, b, &fd);
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(b->err_w);
    if (p < 0) {
        close(b->err_r);
        munmap(m, size);
        if (e == EINVAL || e == ENOSYS)
            return -ENOSYS;
        return al_error_set(err, -e, "cannot start %s: %s", s->path, strerror(e));
    }
    pthread_mutex_lock(&proc__blk_lock);
    b->next = proc__blks;
    proc__blks = b;
    pthread_mutex_unlock(&proc__blk_lock);
    *pid = p;
    if (pidfd)
        *pidfd = fd;
    else
        close(fd);
    return 0;
}
#endif

int cp_proc_spawn(const struct cp_spawn *s, pid_t *pid, int *pidfd, struct al_error *err)
{
    /* The common failure, said here and not only by a child exiting 127. */
    if (access(s->path, X_OK) != 0)
        return al_error_set(err, -errno, "cannot start %s: %s", s->path, strerror(errno));
    /* Descriptors are moved into place in two rounds so that one target never clobbers
     * another source: first dup everything above every source (a busy airlockd has
     * hundreds of descriptors open, so no fixed number is safe), then down. */
    int base = s->nfds > 3 ? s->nfds : 3;
    for (int i = 0; i < s->nfds; i++)
        if (s->fds[i] >= base)
            base = s->fds[i] + 1;
#ifdef PROC_NOWAIT
    static bool nowait_unsupported;
    if (s->no_wait_exec && !nowait_unsupported) {
        int r = proc__spawn_nowait(s, base, pid, pidfd, err);
        if (r != -ENOSYS)
            return r;
        nowait_unsupported = true; /* (this kernel: posix_spawn from now on) */
    }
#endif
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    int rc = 0;
    for (int i = 0; i < s->nfds; i++) {
        if (s->fds[i] >= 0)
            posix_spawn_file_actions_adddup2(&fa, s->fds[i], base + i);
    }
    for (int i = 0; i < s->nfds || i < 3; i++) {
        if (i < s->nfds && s->fds[i] >= 0) {
            posix_spawn_file_actions_adddup2(&fa, base + i, i);
            posix_spawn_file_actions_addclose(&fa, base + i);
        } else if (i < 3) {
            posix_spawn_file_actions_addopen(&fa, i, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY, 0);
        }
    }
    /* Everything else airlockd holds is close-on-exec (libuv, common/http and this module
     * open descriptors with O_CLOEXEC), so the child inherits exactly the map above. */
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (s->new_session)
        flags |= POSIX_SPAWN_SETSID;
    posix_spawnattr_setflags(&at, flags);
    pid_t p;
    int e = posix_spawn(&p, s->path, &fa, &at, s->argv, s->envp ? s->envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (e)
        return al_error_set(err, -e, "cannot start %s: %s", s->path, strerror(e));
    if (pidfd) {
        /* Our child cannot be reaped by anyone else before we do, so its pid is stable. */
        int fd = proc__pidfd_open(p);
        if (fd < 0) {
            rc = -errno;
            kill(p, SIGKILL);
            waitpid(p, NULL, 0);
            return al_error_set(err, rc, "pidfd_open(%d): %s (airlockd needs Linux >= 5.3)", (int)p,
                                strerror(-rc));
        }
        *pidfd = fd;
    }
    *pid = p;
    return rc;
}

int cp_proc_open(pid_t pid, uint64_t start_time, int *pidfd)
{
    if (pid <= 0)
        return -ESRCH;
    int fd = proc__pidfd_open(pid);
    if (fd < 0)
        return -errno;
    /* The pidfd pins the process it names; if its start time is the recorded one, it is
     * the process we started (pids are reused, start times are not). */
    if (start_time && cp_proc_start_time(pid) != start_time) {
        close(fd);
        return -ESRCH;
    }
    *pidfd = fd;
    return 0;
}

int cp_proc_reap(int pidfd, int *wstatus)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG) < 0)
        return -errno;
    if (si.si_pid == 0)
        return -EAGAIN;
    if (si.si_code == CLD_EXITED)
        *wstatus = W_EXITCODE(si.si_status, 0);
    else
        *wstatus = si.si_status & 0x7f; /* killed or dumped: the signal number */
    return 0;
}

int cp_proc_signal(int pidfd, int sig)
{
    if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0)
        return -errno;
    return 0;
}

static void proc__on_poll(uv_poll_t *h, int status, int events)
{
    struct cp_proc_watch *w = h->data;
    (void)status;
    (void)events;
    if (!w->active)
        return;
    int ws = -1;
    int rc = cp_proc_reap(w->pidfd, &ws);
    if (rc == -EAGAIN)
        return; /* not gone yet (spurious wake-up) */
    if (rc < 0)
        ws = -1;
    w->active = false;
    uv_poll_stop(h);
    w->cb(w, ws);
}

int cp_proc_watch_start(uv_loop_t *loop, struct cp_proc_watch *w, pid_t pid, int pidfd,
                        void (*cb)(struct cp_proc_watch *w, int wstatus))
{
    w->pidfd = pidfd;
    w->pid = pid;
    w->cb = cb;
    int rc = uv_poll_init(loop, &w->poll, pidfd);
    if (rc)
        return rc;
    w->poll.data = w;
    w->active = true;
    rc = uv_poll_start(&w->poll, UV_READABLE, proc__on_poll);
    if (rc) {
        w->active = false;
        return rc;
    }
    return 0;
}

static void proc__closed(uv_handle_t *h)
{
    struct cp_proc_watch *w = h->data;
    if (w->pidfd >= 0) {
        close(w->pidfd);
        w->pidfd = -1;
    }
    if (w->close_cb)
        w->close_cb(w);
}

void cp_proc_watch_stop(struct cp_proc_watch *w, void (*close_cb)(struct cp_proc_watch *w))
{
    w->active = false;
    w->close_cb = close_cb;
    uv_close((uv_handle_t *)&w->poll, proc__closed);
}

static void proc__reaper_closed(struct cp_proc_watch *w)
{
    free(w);
}

static void proc__reaped(struct cp_proc_watch *w, int wstatus)
{
    (void)wstatus;
    cp_proc_watch_stop(w, proc__reaper_closed);
}

void cp_proc_reap_later(uv_loop_t *loop, pid_t pid, int pidfd)
{
    int fd = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return;
    int st;
    int r = cp_proc_reap(fd, &st);
    if (r == 0 || r == -ECHILD) {
        /* Gone already (reaped now), or not our child: nothing to wait for. */
        close(fd);
        return;
    }
    struct cp_proc_watch *w = calloc(1, sizeof *w);
    if (!w || uv_poll_init(loop, &w->poll, fd) != 0) {
        free(w);
        close(fd);
        return; /* (a zombie until airlockd exits: out of memory or descriptors) */
    }
    w->pidfd = fd;
    w->pid = pid;
    w->cb = proc__reaped;
    w->poll.data = w;
    w->active = true;
    if (uv_poll_start(&w->poll, UV_READABLE, proc__on_poll) != 0)
        cp_proc_watch_stop(w, proc__reaper_closed);
}

void cp_proc_describe(int wstatus, char *out, size_t len)
{
    if (wstatus < 0)
        snprintf(out, len, "exited (status unknown: not our child)");
    else if (WIFEXITED(wstatus))
        snprintf(out, len, "exited with status %d", WEXITSTATUS(wstatus));
    else
        snprintf(out, len, "killed by signal %d (%s)", wstatus & 0x7f, strsignal(wstatus & 0x7f));
}
