/* common/spawn: see spawn.h. */
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT           47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
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

/* The setup steps of the child, for the report of the one that failed. */
enum sp__step {
    SP_EXEC = 0,
    SP_PDEATHSIG,
    SP_SETSID,
    SP_CWD_FD,
    SP_FDS,
    SP_CTTY,
    SP_CWD,
    SP_BOUNDING,
    SP_GROUPS,
    SP_SETGID,
    SP_SETUID,
    SP_CAPS,
    SP_NNP,
};

static const char *const sp__step_names[] = {
    [SP_EXEC] = "execute it",
    [SP_PDEATHSIG] = "set the death signal",
    [SP_SETSID] = "start a new session",
    [SP_CWD_FD] = "change to the working directory (given as a descriptor)",
    [SP_FDS] = "set up the file descriptors",
    [SP_CTTY] = "make the terminal the controlling terminal",
    [SP_CWD] = "change to the working directory",
    [SP_BOUNDING] = "clear the capability bounding set",
    [SP_GROUPS] = "set the supplementary groups",
    [SP_SETGID] = "switch group id",
    [SP_SETUID] = "switch user id",
    [SP_CAPS] = "clear the capabilities",
    [SP_NNP] = "set no_new_privs",
};

/* What a failed child writes to its parent before it exits. */
struct sp__report {
    int step; /* enum sp__step */
    int err;  /* errno */
};

struct sp__blk {
    void *map; /* the mapping this block lies in (guard page, stack, block) */
    size_t size;
    int err_r; /* parent: read end (EOF = exec'd or died; a report = the step that failed) */
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
    bool use_cwd_fd, ctty, set_oom, drop_privileges, set_user;
    uint64_t keep_caps;
    int cwd_fd;
    const char *cwd;
    char oom_path[32];
    char oom[16];
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    size_t ngroups;
    /* as_shell: the places to execute in order, the /bin/sh argv of a file without "#!"
     * (its [1] is the place), the message's start ("<as_shell>: <path>") */
    bool as_shell, has_slash;
    char **cands;
    char **sh_argv;
    char bin_sh[16];
    const char *prefix;
};
/* Children of the fast path that may still run in their block. */
static struct sp__blk *sp__pending;
static pthread_mutex_t sp__lock = PTHREAD_MUTEX_INITIALIZER;

SPAWN_CHILD_CODE static _Noreturn void sp__fail(struct sp__blk *b, int step, long r)
{
    struct sp__report rep = {.step = step, .err = (int)-r};
    sp__sys(SYS_write, b->err_w, (long)&rep, sizeof rep, 0, 0, 0);
    sp__sys(SYS_exit_group, 127, 0, 0, 0, 0, 0);
    __builtin_unreachable();
}

SPAWN_CHILD_CODE static void sp__puts(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    sp__sys(SYS_write, 2, (long)s, (long)n, 0, 0, 0);
}

/* execve, and /bin/sh for a file the kernel cannot execute, as execvp and shells do. */
SPAWN_CHILD_CODE static long sp__exec_one(struct sp__blk *b, const char *path)
{
    long r = sp__sys(SYS_execve, (long)path, (long)b->argv, (long)b->envp, 0, 0, 0);
    if (r == -ENOEXEC && b->as_shell) {
        b->sh_argv[1] = (char *)path;
        sp__sys(SYS_execve, (long)b->bin_sh, (long)b->sh_argv, (long)b->envp, 0, 0, 0);
    }
    return r;
}

/* as_shell: every place in turn, then what a shell says and its exit status. */
SPAWN_CHILD_CODE static _Noreturn void sp__exec_as_shell(struct sp__blk *b)
{
    int saved = ENOENT;
    bool eacces = false;
    for (char **c = b->cands; *c; c++) {
        saved = (int)-sp__exec_one(b, *c);
        if (b->has_slash)
            break;
        if (saved == EACCES)
            eacces = true;
        else if (saved != ENOENT && saved != ENOTDIR && saved != ELOOP && saved != ENAMETOOLONG)
            break;
    }
    if (!b->has_slash) {
        if (eacces)
            saved = EACCES;
        if (saved == ENOTDIR || saved == ELOOP || saved == ENAMETOOLONG)
            saved = ENOENT;
    }
    sp__puts(b->prefix);
    int status = 126;
    if (saved == ENOENT) {
        sp__puts(b->has_slash ? ": No such file or directory\n" : ": command not found\n");
        status = 127;
    } else if (saved == EACCES) {
        sp__puts(": Permission denied\n");
    } else if (saved == ENOEXEC) {
        sp__puts(": Exec format error\n");
    } else if (saved == E2BIG) {
        sp__puts(": Argument list too long\n");
    } else {
        sp__puts(": cannot execute\n");
    }
    sp__sys(SYS_exit_group, status, 0, 0, 0, 0, 0);
    __builtin_unreachable();
}

/* The bounding and ambient sets, then the user, then every capability (but keep_caps while
 * root), then no_new_privs. */
SPAWN_CHILD_CODE static void sp__drop_privileges(struct sp__blk *b)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct caps[2] = {{0}, {0}};
    sp__sys(SYS_capget, (long)&hdr, (long)caps, 0, 0, 0, 0);
    bool have_caps = caps[0].permitted || caps[1].permitted;
    for (long cap = 0; cap <= 63; cap++) {
        if (b->keep_caps & (1ull << cap))
            continue;
        long r = sp__sys(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0, 0);
        if (r == -EINVAL)
            break; /* past the last capability this kernel knows */
        if (r == -EPERM && !have_caps)
            break; /* an unprivileged parent: nothing to drop, no_new_privs below */
        if (r < 0)
            sp__fail(b, SP_BOUNDING, r);
    }
    sp__sys(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0);
    long r;
    if (b->set_user) {
        if ((r = sp__sys(SYS_setgroups, (long)b->ngroups, (long)b->groups, 0, 0, 0, 0)) < 0)
            sp__fail(b, SP_GROUPS, r);
        if ((r = sp__sys(SYS_setresgid, b->gid, b->gid, b->gid, 0, 0, 0)) < 0)
            sp__fail(b, SP_SETGID, r);
        if ((r = sp__sys(SYS_setresuid, b->uid, b->uid, b->uid, 0, 0, 0)) < 0)
            sp__fail(b, SP_SETUID, r);
    }
    /* Whatever capabilities remain (uid 0 keeps them across setresuid), but keep_caps while
     * the child is still root: what the switch left of its permitted set. Root's exec then
     * gives a program the bounding set (keep_caps) within that permitted set (no_new_privs
     * lets nothing exceed it). */
    struct __user_cap_data_struct set[2] = {{0}, {0}};
    if (b->keep_caps) {
        hdr = (struct __user_cap_header_struct){.version = _LINUX_CAPABILITY_VERSION_3};
        if ((r = sp__sys(SYS_capget, (long)&hdr, (long)caps, 0, 0, 0, 0)) < 0)
            sp__fail(b, SP_CAPS, r);
        set[0].permitted = set[0].effective = caps[0].permitted & (uint32_t)b->keep_caps;
        set[1].permitted = set[1].effective = caps[1].permitted & (uint32_t)(b->keep_caps >> 32);
    }
    hdr = (struct __user_cap_header_struct){.version = _LINUX_CAPABILITY_VERSION_3};
    if ((r = sp__sys(SYS_capset, (long)&hdr, (long)set, 0, 0, 0, 0)) < 0)
        sp__fail(b, SP_CAPS, r);
    /* Nothing exec'd may gain privileges (setuid programs, file capabilities). */
    if ((r = sp__sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0)) < 0)
        sp__fail(b, SP_NNP, r);
}

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
        if ((r = sp__sys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0)) < 0)
            sp__fail(b, SP_PDEATHSIG, r);
        /* The parent may have died before the death signal was armed. */
        if (sp__sys(SYS_getppid, 0, 0, 0, 0, 0, 0) != b->parent)
            sp__sys(SYS_exit_group, 127, 0, 0, 0, 0, 0);
    }
    if (b->new_session && (r = sp__sys(SYS_setsid, 0, 0, 0, 0, 0, 0)) < 0)
        sp__fail(b, SP_SETSID, r);
    if (b->go_r >= 0) {
        char c;
        if (sp__sys(SYS_read, b->go_r, (long)&c, 1, 0, 0, 0) != 1)
            sp__sys(SYS_exit_group, 127, 0, 0, 0, 0, 0); /* the parent gave up */
    }
    /* (before the descriptors move: it may be one they close) */
    if (b->use_cwd_fd && (r = sp__sys(SYS_fchdir, b->cwd_fd, 0, 0, 0, 0, 0)) < 0)
        sp__fail(b, SP_CWD_FD, r);
    /* Descriptors in two rounds so that one target never clobbers another source: first
     * above every source, then down. */
    for (int i = 0; i < b->nfds; i++)
        if (b->fds[i] >= 0 && (r = sp__sys(SYS_dup2, b->fds[i], b->base + i, 0, 0, 0, 0)) < 0)
            sp__fail(b, SP_FDS, r);
    for (int i = 0; i < b->nfds || i < 3; i++) {
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
        if (r < 0)
            sp__fail(b, SP_FDS, r);
    }
    /* Nothing else reaches the program, whatever the parent left open (Linux >= 5.11;
     * before, the parent's descriptors are close-on-exec by convention). */
    int first = b->nfds > 3 ? b->nfds : 3;
    sp__sys(SYS_close_range, first, ~0u, CLOSE_RANGE_CLOEXEC, 0, 0, 0);
    if (b->ctty && (r = sp__sys(SYS_ioctl, 0, TIOCSCTTY, 0, 0, 0, 0)) < 0)
        sp__fail(b, SP_CTTY, r);
    if (b->set_oom) {
        /* Advice to the OOM killer: without /proc, or lowered without CAP_SYS_RESOURCE, the
         * child keeps the parent's. */
        long fd = sp__sys(SYS_openat, AT_FDCWD, (long)b->oom_path, O_WRONLY | O_CLOEXEC, 0, 0, 0);
        size_t n = 0;
        while (b->oom[n])
            n++;
        if (fd >= 0) {
            sp__sys(SYS_write, fd, (long)b->oom, (long)n, 0, 0, 0);
            sp__sys(SYS_close, fd, 0, 0, 0, 0, 0);
        }
    }
    /* As the parent's user: the target user's access is the kernel's to check later. */
    if (b->cwd && (r = sp__sys(SYS_chdir, (long)b->cwd, 0, 0, 0, 0, 0)) < 0)
        sp__fail(b, SP_CWD, r);
    if (b->drop_privileges)
        sp__drop_privileges(b);
    uint64_t none = 0;
    sp__sys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, 8, 0, 0);
    if (b->as_shell)
        sp__exec_as_shell(b);
    sp__fail(b, SP_EXEC, sp__exec_one(b, b->path));
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
        struct sp__report rep;
        if (read(b->err_r, &rep, sizeof rep) == (ssize_t)sizeof rep)
            al_error("cannot start %s: cannot %s: %s", b->path, sp__step_names[rep.step],
                     strerror(rep.err));
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

bool al_spawn_path_next(const char **p, const char *file, char *buf, size_t len)
{
    size_t fl = strlen(file);
    while (*p) {
        const char *s = *p;
        const char *colon = strchr(s, ':');
        size_t dl = colon ? (size_t)(colon - s) : strlen(s);
        *p = colon ? colon + 1 : NULL;
        if ((dl ? dl : 1) + 1 + fl + 1 > len)
            continue;
        size_t n = dl ? dl : 1;
        memcpy(buf, dl ? s : ".", n);
        buf[n++] = '/';
        memcpy(buf + n, file, fl + 1);
        return true;
    }
    return false;
}

/* as_shell: where the child looks for s->path, in order (envp's PATH, or the default). */
static const char *sp__search_path(char *const *envp)
{
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            return *e + 5;
    return AL_SPAWN_DEFAULT_PATH;
}

/* as_shell: the places to execute file at, in order, as a NULL-terminated vector at *cur
 * (pointers first, then the strings; *cur advanced), or with cur NULL only the bytes that
 * takes. */
static size_t sp__cands(const char *file, char *const *envp, char **cur)
{
    char buf[PATH_MAX];
    bool slash = strchr(file, '/') != NULL;
    size_t n = 0, bytes = 0;
    const char *list = sp__search_path(envp);
    while (slash ? n == 0 : file[0] && al_spawn_path_next(&list, file, buf, sizeof buf)) {
        bytes += strlen(slash ? file : buf) + 1;
        n++;
    }
    if (cur) {
        char **out = (char **)(void *)*cur;
        char *p = *cur + (n + 1) * sizeof(char *);
        list = sp__search_path(envp);
        for (size_t k = 0; k < n; k++) {
            const char *c = file;
            if (!slash && al_spawn_path_next(&list, file, buf, sizeof buf))
                c = buf;
            size_t l = strlen(c) + 1;
            memcpy(p, c, l);
            out[k] = p;
            p += l;
        }
        out[n] = NULL;
        *cur = p;
    }
    return bytes + (n + 1) * sizeof(char *);
}

static char *sp__align(char *cur, size_t a)
{
    return (char *)(((uintptr_t)cur + a - 1) & ~(uintptr_t)(a - 1));
}

static struct sp__blk *sp__blk_new(const struct al_spawn *s, int base, int *rc)
{
    enum { STACK = 64 << 10 };
    char *const *envp = s->envp ? s->envp : environ;
    size_t na, ne, pl = strlen(s->path) + 1;
    size_t cwdl = s->cwd ? strlen(s->cwd) + 1 : 0;
    size_t prefl = s->as_shell ? strlen(s->as_shell) + 2 + pl : 0;
    size_t candl = s->as_shell ? sp__cands(s->path, envp, NULL) : 0;
    /* (+64: the alignment of the pieces below) */
    size_t data = sizeof(struct sp__blk) + 64 + pl + sp__strv_size(s->argv, &na) +
                  sp__strv_size(envp, &ne) + cwdl + prefl + candl +
                  (s->as_shell ? (na + 3) * sizeof(char *) : 0) +
                  (s->set_user ? s->ngroups * sizeof(gid_t) : 0);
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
    char *cur = sp__align((char *)(b + 1), 16);
    memcpy(cur, s->path, pl);
    b->path = cur;
    cur = sp__align(cur + pl, 8);
    b->argv = sp__strv_copy(s->argv, na, &cur);
    cur = sp__align(cur, 8);
    b->envp = sp__strv_copy(envp, ne, &cur);
    if (s->set_user && s->ngroups) {
        cur = sp__align(cur, 8);
        b->groups = (gid_t *)(void *)cur;
        memcpy(b->groups, s->groups, s->ngroups * sizeof(gid_t));
        cur += s->ngroups * sizeof(gid_t);
    }
    if (s->cwd) {
        memcpy(cur, s->cwd, cwdl);
        b->cwd = cur;
        cur += cwdl;
    }
    if (s->as_shell) {
        b->as_shell = true;
        b->has_slash = strchr(s->path, '/') != NULL;
        snprintf(cur, prefl, "%s: %s", s->as_shell, s->path);
        b->prefix = cur;
        cur = sp__align(cur + prefl, 8);
        b->cands = (char **)(void *)cur;
        sp__cands(s->path, envp, &cur);
        /* "sh", the place (set by the child), argv[1...], NULL */
        cur = sp__align(cur, 8);
        b->sh_argv = (char **)(void *)cur;
        b->sh_argv[0] = (char *)"sh";
        b->sh_argv[2] = NULL;
        for (size_t i = 1; i <= na; i++)
            b->sh_argv[i + 1] = b->argv[i];
        cur += (na + 3) * sizeof(char *);
        snprintf(b->bin_sh, sizeof b->bin_sh, "/bin/sh");
    }
    memcpy(b->fds, s->fds, sizeof b->fds);
    b->nfds = s->nfds;
    b->base = base;
    b->new_session = s->new_session;
    b->die_with_parent = s->die_with_parent;
    b->parent = (long)getpid();
    snprintf(b->devnull, sizeof b->devnull, "/dev/null");
    b->use_cwd_fd = s->use_cwd_fd;
    b->cwd_fd = s->cwd_fd;
    b->ctty = s->controlling_tty;
    b->set_oom = s->set_oom_score_adj;
    snprintf(b->oom_path, sizeof b->oom_path, "/proc/self/oom_score_adj");
    snprintf(b->oom, sizeof b->oom, "%d", s->oom_score_adj);
    b->drop_privileges = s->drop_privileges;
    b->set_user = s->set_user;
    b->keep_caps = s->drop_privileges ? s->keep_caps : 0;
    b->uid = s->uid;
    b->gid = s->gid;
    b->ngroups = s->set_user ? s->ngroups : 0;
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

/* The exec's report: 0 once the child exec'd (EOF), else the failed step's error in err. */
static int sp__wait_exec(const struct al_spawn *s, struct sp__blk *b, struct al_error *err)
{
    struct sp__report rep;
    ssize_t n;
    while ((n = read(b->err_r, &rep, sizeof rep)) < 0 && errno == EINTR) {
    }
    if (n != (ssize_t)sizeof rep)
        return 0;
    if (rep.step == SP_EXEC)
        return al_error_set(err, -rep.err, "cannot execute %s: %s", s->path, strerror(rep.err));
    if (rep.step == SP_CWD)
        return al_error_set(err, -rep.err,
                            "cannot start %s: cannot change to the working directory '%s': %s",
                            s->path, s->cwd, strerror(rep.err));
    return al_error_set(err, -rep.err, "cannot start %s: cannot %s: %s", s->path,
                        sp__step_names[rep.step], strerror(rep.err));
}

static void sp__kill_reap(pid_t p)
{
    kill(p, SIGKILL);
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
    }
}

int al_spawn(const struct al_spawn *s, pid_t *pid, int *pidfd, struct al_error *err)
{
    /* The common failure, said here and not only by a child exiting 127 (as_shell: the
     * child's exit status is how it is said). */
    if (!s->as_shell && access(s->path, X_OK) != 0)
        return al_error_set(err, -errno, "cannot start %s: %s", s->path, strerror(errno));
    if (s->nfds < 0 || s->nfds > AL_SPAWN_MAX_FDS || (s->no_wait_exec && s->before_exec) ||
        (s->set_user && !s->drop_privileges) || (s->controlling_tty && !s->new_session) ||
        (s->set_user && s->ngroups && !s->groups) ||
        (s->set_oom_score_adj && (s->oom_score_adj < -1000 || s->oom_score_adj > 1000)))
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
    if (!no_clone_pidfd && !s->set_user) { /* (spawn.h: a user's switch forks) */
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
        if (p > 0 && pidfd && (fd = (int)syscall(SYS_pidfd_open, p, 0)) < 0)
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
    if (fd < 0 && pidfd) {
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
        if (rc >= 0)
            rc = sp__wait_exec(s, b, err);
        if (rc < 0) {
            sp__kill_reap(p);
            if (fd >= 0)
                close(fd);
            sp__free(b);
            return rc;
        }
        sp__free(b);
    }
    *pid = p;
    if (pidfd)
        *pidfd = fd;
    else if (fd >= 0)
        close(fd);
    return 0;
}
