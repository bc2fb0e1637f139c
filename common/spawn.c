/* common/spawn: see spawn.h. */
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"

extern char **environ;

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The child runs before its exec in the parent's memory: no sanitizer runtime there. */
#define SPAWN_CHILD_CODE __attribute__((no_sanitize_address, no_sanitize("undefined"), noinline))

#if defined(__x86_64__)
#define SPAWN_SHARED_VM 1
/* A system call that touches nothing of libc's (errno lives in the parent's thread). */
SPAWN_CHILD_CODE static long sp__sys(long n, long a, long b, long c, long d, long e, long f)
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
#else
/* The portable path: the child is a forked copy, so libc's errno is its own. */
static long sp__sys(long n, long a, long b, long c, long d, long e, long f)
{
    long r = syscall(n, a, b, c, d, e, f);
    return r < 0 ? -errno : r;
}
#endif

struct sp__kern_sigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

struct sp__blk {
    void *map; /* the mapping this block lies in (guard page, stack, block) */
    size_t size;
    int err_r; /* parent: read end (EOF = exec'd or died; an int = the errno of the step) */
    int err_w; /* child: write end (close-on-exec) */
    int go_r;  /* child: waits for a byte before the exec (-1: no waiting) */
    int go_w;
    struct sp__blk *next;
    /* what the child reads, all inside this block */
    const char *path;
    char **argv, **envp;
    int fds[AL_SPAWN_MAX_FDS];
    int nfds, base;
    bool new_session, die_with_parent;
    long parent;
    char devnull[16];
};

/* Children of the fast path that may still run in their block. */
static struct sp__blk *sp__pending;
static pthread_mutex_t sp__lock = PTHREAD_MUTEX_INITIALIZER;

SPAWN_CHILD_CODE static int sp__child(void *arg)
{
    struct sp__blk *b = arg;
    /* Default dispositions (the parent blocked every signal around the clone, so no
     * handler of the parent's can run here first). */
    struct sp__kern_sigaction dfl = {.handler = SIG_DFL};
    for (long sig = 1; sig <= 64; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sp__sys(SYS_rt_sigaction, sig, (long)&dfl, 0, 8, 0, 0);
    long r = 0;
    if (b->die_with_parent) {
        r = sp__sys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
        /* The parent may have died before the death signal was armed. */
        if (r >= 0 && sp__sys(SYS_getppid, 0, 0, 0, 0, 0, 0) != b->parent)
            sp__sys(SYS_exit_group, 127, 0, 0, 0, 0, 0);
    }
    if (r >= 0 && b->new_session)
        r = sp__sys(SYS_setsid, 0, 0, 0, 0, 0, 0);
    if (r >= 0 && b->go_r >= 0) {
        char c;
        if (sp__sys(SYS_read, b->go_r, (long)&c, 1, 0, 0, 0) != 1)
            sp__sys(SYS_exit_group, 127, 0, 0, 0, 0, 0); /* the parent gave up */
    }
    /* Descriptors in two rounds so that one target never clobbers another source: first
     * above every source, then down. */
    for (int i = 0; i < b->nfds && r >= 0; i++)
        if (b->fds[i] >= 0)
            r = sp__sys(SYS_dup2, b->fds[i], b->base + i, 0, 0, 0, 0);
    for (int i = 0; (i < b->nfds || i < 3) && r >= 0; i++) {
        if (i < b->nfds && b->fds[i] >= 0) {
            r = sp__sys(SYS_dup2, b->base + i, i, 0, 0, 0, 0);
            sp__sys(SYS_close, b->base + i, 0, 0, 0, 0, 0);
        } else if (i < 3) {
            long fd = sp__sys(SYS_openat, AT_FDCWD, (long)b->devnull, i == 0 ? O_RDONLY : O_WRONLY,
                              0, 0, 0);
            r = fd < 0 ? fd : fd == i ? 0 : sp__sys(SYS_dup2, fd, i, 0, 0, 0, 0);
            if (fd >= 0 && fd != i)
                sp__sys(SYS_close, fd, 0, 0, 0, 0, 0);
        } else {
            sp__sys(SYS_close, i, 0, 0, 0, 0, 0);
        }
    }
    if (r >= 0) {
        /* Nothing else reaches the program, whatever the parent left open (Linux >= 5.11;
         * before, the parent's descriptors are close-on-exec by convention). */
        int first = b->nfds > 3 ? b->nfds : 3;
        sp__sys(SYS_close_range, first, ~0u, CLOSE_RANGE_CLOEXEC, 0, 0, 0);
        uint64_t none = 0;
        sp__sys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, 8, 0, 0);
        r = sp__sys(SYS_execve, (long)b->path, (long)b->argv, (long)b->envp, 0, 0, 0);
    }
    int e = (int)-r;
    sp__sys(SYS_write, b->err_w, (long)&e, sizeof e, 0, 0, 0);
    sp__sys(SYS_exit_group, 127, 0, 0, 0, 0, 0);
    return 127;
}

static void sp__free(struct sp__blk *b)
{
    if (b->err_r >= 0)
        close(b->err_r);
    if (b->go_w >= 0)
        close(b->go_w);
    munmap(b->map, b->size);
}

/* Frees the blocks of fast-path children that exec'd or died; logs failed execs. */
static void sp__reap_pending(void)
{
    pthread_mutex_lock(&sp__lock);
    for (struct sp__blk **pp = &sp__pending; *pp;) {
        struct sp__blk *b = *pp;
        struct pollfd p = {.fd = b->err_r, .events = POLLIN};
        if (poll(&p, 1, 0) != 1) {
            pp = &b->next;
            continue;
        }
        int e = 0;
        if (read(b->err_r, &e, sizeof e) == (ssize_t)sizeof e)
            al_error("cannot start %s: %s", b->path, strerror(e));
        *pp = b->next;
        sp__free(b);
    }
    pthread_mutex_unlock(&sp__lock);
}

static size_t sp__strv_size(char *const *v, size_t *n)
{
    size_t sz = 0, i = 0;
    for (; v && v[i]; i++)
        sz += strlen(v[i]) + 1;
    *n = i;
    return sz + (i + 1) * sizeof(char *);
}

/* Copies the NULL-terminated vector v to *cur (pointers first, then the strings). */
static char **sp__strv_copy(char *const *v, size_t n, char **cur)
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

/* A pipe whose ends are both at or above `above`, close-on-exec. */
static int sp__pipe_above(int fds[2], int above)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    fds[0] = fcntl(p[0], F_DUPFD_CLOEXEC, above);
    int e = fds[0] < 0 ? errno : 0;
    fds[1] = fcntl(p[1], F_DUPFD_CLOEXEC, above);
    if (fds[1] < 0 && !e)
        e = errno;
    close(p[0]);
    close(p[1]);
    if (e) {
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        return -e;
    }
    return 0;
}

static struct sp__blk *sp__blk_new(const struct al_spawn *s, int base, int *rc)
{
    enum { STACK = 64 << 10 };
    char *const *envp = s->envp ? s->envp : environ;
    size_t na, ne, pl = strlen(s->path) + 1;
    /* (+32: the alignment of the path and of the two vectors below) */
    size_t data =
        sizeof(struct sp__blk) + 32 + pl + sp__strv_size(s->argv, &na) + sp__strv_size(envp, &ne);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t size = (pg + STACK + data + pg - 1) & ~(pg - 1);
    /* [guard page][stack, growing down][the block's data] */
    char *m =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) {
        *rc = -errno;
        return NULL;
    }
    mprotect(m, pg, PROT_NONE);
    struct sp__blk *b = (struct sp__blk *)(void *)(m + pg + STACK);
    memset(b, 0, sizeof *b);
    b->map = m;
    b->size = size;
    b->err_r = b->err_w = b->go_r = b->go_w = -1;
    char *cur = (char *)(b + 1);
    cur = (char *)(((uintptr_t)cur + 15) & ~(uintptr_t)15);
    memcpy(cur, s->path, pl);
    b->path = cur;
    cur += pl;
    cur = (char *)(((uintptr_t)cur + 7) & ~(uintptr_t)7);
    b->argv = sp__strv_copy(s->argv, na, &cur);
    cur = (char *)(((uintptr_t)cur + 7) & ~(uintptr_t)7);
    b->envp = sp__strv_copy(envp, ne, &cur);
    memcpy(b->fds, s->fds, sizeof b->fds);
    b->nfds = s->nfds;
    b->base = base;
    b->new_session = s->new_session;
    b->die_with_parent = s->die_with_parent;
    b->parent = (long)getpid();
    snprintf(b->devnull, sizeof b->devnull, "/dev/null");
    /* The pipes' ends above every descriptor the child moves, so that no move closes them
     * before the exec (an EOF would free the block under the running child). */
    int above = base + AL_SPAWN_MAX_FDS, p[2];
    if ((*rc = sp__pipe_above(p, above)) < 0) {
        munmap(m, size);
        return NULL;
    }
    b->err_r = p[0];
    b->err_w = p[1];
    if (s->before_exec) {
        if ((*rc = sp__pipe_above(p, above)) < 0) {
            close(b->err_w);
            sp__free(b);
            return NULL;
        }
        b->go_r = p[0];
        b->go_w = p[1];
    }
    return b;
}

/* The exec's report: 0 once the child exec'd (EOF), else the errno of the failed step. */
static int sp__wait_exec(struct sp__blk *b)
{
    int e = 0;
    ssize_t n;
    while ((n = read(b->err_r, &e, sizeof e)) < 0 && errno == EINTR) {
    }
    return n == (ssize_t)sizeof e ? -e : 0;
}

static void sp__kill_reap(pid_t p)
{
    kill(p, SIGKILL);
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
    }
}

int al_spawn(const struct al_spawn *s, pid_t *pid, int *pidfd, struct al_error *err)
{
    /* The common failure, said here and not only by a child exiting 127. */
    if (access(s->path, X_OK) != 0)
        return al_error_set(err, -errno, "cannot start %s: %s", s->path, strerror(errno));
    if (s->nfds < 0 || s->nfds > AL_SPAWN_MAX_FDS || (s->no_wait_exec && s->before_exec))
        return al_error_set(err, -EINVAL, "cannot start %s: invalid spawn options", s->path);
    sp__reap_pending();
    int base = s->nfds > 3 ? s->nfds : 3;
    for (int i = 0; i < s->nfds; i++)
        if (s->fds[i] >= base)
            base = s->fds[i] + 1;
    int rc = 0;
    struct sp__blk *b = sp__blk_new(s, base, &rc);
    if (!b)
        return al_error_set(err, rc, "cannot start %s: %s", s->path, strerror(-rc));

    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int fd = -1;
    pid_t p = -1;
    int e = ENOSYS;
#ifdef SPAWN_SHARED_VM
    static bool no_clone_pidfd;
    if (!no_clone_pidfd) {
        int flags = CLONE_VM | CLONE_PIDFD | SIGCHLD;
        if (!s->no_wait_exec && !s->before_exec)
            flags |= CLONE_VFORK;
        p = clone(sp__child, b /* the stack's top */, flags, b, &fd);
        e = errno;
        if (p < 0 && e == EINVAL)
            no_clone_pidfd = true; /* (this kernel: the portable path from now on) */
    }
#endif
    if (p < 0 && e != EAGAIN && e != ENOMEM) {
        p = fork();
        e = errno;
        if (p == 0)
            sp__child(b);
        if (p > 0 && (fd = (int)syscall(SYS_pidfd_open, p, 0)) < 0)
            e = errno;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* The child's ends, closed here only: the child may still read the block's copies of
     * their numbers (it shares this memory), so the block keeps them. */
    close(b->err_w);
    if (b->go_r >= 0)
        close(b->go_r);
    if (p < 0) {
        sp__free(b);
        return al_error_set(err, -e, "cannot start %s: %s", s->path, strerror(e));
    }
    if (fd < 0) {
        rc = al_error_set(err, -e, "pidfd_open(%d): %s (Linux >= 5.3 is needed)", (int)p,
                          strerror(e));
        sp__kill_reap(p);
        sp__free(b);
        return rc;
    }
    if (s->no_wait_exec) {
        pthread_mutex_lock(&sp__lock);
        b->next = sp__pending;
        sp__pending = b;
        pthread_mutex_unlock(&sp__lock);
    } else {
        if (s->before_exec && (rc = s->before_exec(p, s->arg, err)) >= 0 &&
            write(b->go_w, "g", 1) != 1)
            rc = al_error_set(err, -errno, "cannot start %s: %s", s->path, strerror(errno));
        if (rc >= 0 && (rc = sp__wait_exec(b)) < 0)
            al_error_set(err, rc, "cannot execute %s: %s", s->path, strerror(-rc));
        if (rc < 0) {
            sp__kill_reap(p);
            close(fd);
            sp__free(b);
            return rc;
        }
        sp__free(b);
    }
    *pid = p;
    if (pidfd)
        *pidfd = fd;
    else
        close(fd);
    return 0;
}
