/* vmm/guest/spawn: see spawn.h.
 *
 * Everything between fork() and execve() is async-signal-safe: raw syscalls, no malloc, no
 * stdio, fixed messages. The parent blocks on the report pipe only for the child's setup
 * (a few syscalls), the same trade posix_spawn makes.
 */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT           47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

enum spawn__step {
    STEP_SETSID = 1,
    STEP_FDS,
    STEP_CTTY,
    STEP_CHDIR,
    STEP_BOUNDING,
    STEP_GROUPS,
    STEP_SETGID,
    STEP_SETUID,
    STEP_CAPS,
    STEP_NNP,
};

static const char *spawn__step_name(int step)
{
    switch (step) {
    case STEP_SETSID:
        return "start a new session";
    case STEP_FDS:
        return "set up the standard file descriptors";
    case STEP_CTTY:
        return "make the pty the controlling terminal";
    case STEP_CHDIR:
        return "change to the working directory";
    case STEP_BOUNDING:
        return "clear the capability bounding set";
    case STEP_GROUPS:
        return "set the supplementary groups";
    case STEP_SETGID:
        return "switch group id";
    case STEP_SETUID:
        return "switch user id";
    case STEP_CAPS:
        return "clear the capabilities";
    case STEP_NNP:
        return "set no_new_privs";
    default:
        return "prepare the process";
    }
}

struct spawn__report {
    int step;
    int err;
};

static int spawn__capget(struct __user_cap_data_struct data[2])
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    return (int)syscall(SYS_capget, &hdr, data);
}

static int spawn__capset_zero(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    return (int)syscall(SYS_capset, &hdr, data);
}

bool agent_can_switch_user(void)
{
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (spawn__capget(d) < 0)
        return false;
    uint32_t eff = d[0].effective;
    return (eff & (1u << CAP_SETUID)) && (eff & (1u << CAP_SETGID));
}

static _Noreturn void spawn__fail(int errfd, int step)
{
    struct spawn__report r = {step, errno};
    ssize_t n = write(errfd, &r, sizeof r);
    (void)n;
    _exit(127);
}

static void spawn__puts(const char *s)
{
    ssize_t n = write(2, s, strlen(s));
    (void)n;
}

static size_t spawn__strlcpy(char *dst, const char *src, size_t cap)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return n;
}

static void spawn__exec_one(const char *path, char *const *argv, char *const *envp)
{
    execve(path, argv, envp);
    if (errno == ENOEXEC) {
        /* A script without "#!": run it with /bin/sh, as execvp and shells do. */
        size_t argc = 0;
        while (argv[argc])
            argc++;
        char *sh_argv[argc + 2];
        sh_argv[0] = (char *)"sh";
        sh_argv[1] = (char *)path;
        for (size_t i = 1; i <= argc; i++)
            sh_argv[i + 1] = argv[i];
        execve("/bin/sh", sh_argv, envp);
        errno = ENOEXEC;
    }
}

bool agent_path_next(const char **p, const char *file, char *buf, size_t len)
{
    while (*p) {
        const char *s = *p;
        const char *colon = strchr(s, ':');
        size_t dl = colon ? (size_t)(colon - s) : strlen(s);
        *p = colon ? colon + 1 : NULL;
        if (dl + 1 + strlen(file) + 1 > len)
            continue;
        size_t n = 0;
        if (dl == 0) {
            buf[n++] = '.';
        } else {
            memcpy(buf, s, dl);
            n = dl;
        }
        buf[n++] = '/';
        spawn__strlcpy(buf + n, file, len - n);
        return true;
    }
    return false;
}

static _Noreturn void spawn__exec(const struct agent_spawn_opts *o)
{
    const char *file = o->file;
    int saved = ENOENT;
    if (strchr(file, '/')) {
        spawn__exec_one(file, o->argv, o->envp);
        saved = errno;
    } else if (*file) {
        const char *path = NULL;
        for (char *const *e = o->envp; *e; e++)
            if (strncmp(*e, "PATH=", 5) == 0)
                path = *e + 5;
        if (!path)
            path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        bool eacces = false;
        const char *p = path;
        char buf[PATH_MAX];
        while (agent_path_next(&p, file, buf, sizeof buf)) {
            spawn__exec_one(buf, o->argv, o->envp);
            if (errno == EACCES)
                eacces = true;
            else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP && errno != ENAMETOOLONG)
                break;
        }
        saved = eacces ? EACCES : errno;
        if (saved == ENOTDIR || saved == ELOOP || saved == ENAMETOOLONG)
            saved = ENOENT;
    }
    spawn__puts("airlock-agent: ");
    spawn__puts(file);
    if (saved == ENOENT) {
        spawn__puts(strchr(file, '/') ? ": No such file or directory\n" : ": command not found\n");
        _exit(127);
    }
    if (saved == EACCES)
        spawn__puts(": Permission denied\n");
    else if (saved == ENOEXEC)
        spawn__puts(": Exec format error\n");
    else if (saved == E2BIG)
        spawn__puts(": Argument list too long\n");
    else
        spawn__puts(": cannot execute\n");
    _exit(126);
}

static void spawn__close_from(int lowest, int keep)
{
    if (keep >= lowest) {
        if (keep > lowest && syscall(SYS_close_range, (unsigned)lowest, (unsigned)keep - 1, 0) < 0)
            for (int fd = lowest; fd < keep; fd++)
                close(fd);
        lowest = keep + 1;
    }
    if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) < 0) {
        long max = sysconf(_SC_OPEN_MAX);
        if (max < 0 || max > 1 << 20)
            max = 1 << 20;
        for (int fd = lowest; fd < max; fd++)
            close(fd);
    }
}

static _Noreturn void spawn__child(const struct agent_spawn_opts *o, int errfd)
{
    /* 1. Signals: default dispositions, nothing blocked. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    /* 2. A new session: the child leads its own process group (kill(-pid) reaches it all). */
    if (setsid() < 0)
        spawn__fail(errfd, STEP_SETSID);

    /* 3. File descriptors: move every source above the targets, then dup2 into place.
     * (A working directory given as a descriptor is entered first: it is closed below.) */
    if (o->use_cwd_fd && fchdir(o->cwd_fd) < 0)
        spawn__fail(errfd, STEP_CHDIR);
    int hi = fcntl(errfd, F_DUPFD_CLOEXEC, 64);
    if (hi < 0)
        spawn__fail(errfd, STEP_FDS);
    errfd = hi;
    int tmp[AGENT_SPAWN_MAX_FDS];
    for (size_t i = 0; i < o->nfds; i++) {
        int src = o->fds[i];
        if (src < 0 && i < 3)
            src = open("/dev/null", O_RDWR | O_CLOEXEC);
        tmp[i] = src < 0 ? -1 : fcntl(src, F_DUPFD_CLOEXEC, 64 + AGENT_SPAWN_MAX_FDS);
        if (src >= 0 && tmp[i] < 0)
            spawn__fail(errfd, STEP_FDS);
    }
    for (size_t i = 0; i < o->nfds; i++) {
        if (tmp[i] >= 0 && dup2(tmp[i], (int)i) < 0)
            spawn__fail(errfd, STEP_FDS);
        if (tmp[i] < 0)
            close((int)i);
    }
    spawn__close_from((int)o->nfds, errfd);

    /* 4. Controlling terminal. */
    if (o->ctty >= 0 && ioctl(o->ctty, TIOCSCTTY, 0) < 0)
        spawn__fail(errfd, STEP_CTTY);

    /* 5. Make the agent (and not the workload) the last thing the OOM killer picks. */
    if (o->oom_score_adj >= -1000 && o->oom_score_adj <= 1000) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            char b[16];
            int v = o->oom_score_adj, n = 0;
            char rev[12];
            bool neg = v < 0;
            unsigned u = neg ? (unsigned)-v : (unsigned)v;
            do {
                rev[n++] = (char)('0' + u % 10);
                u /= 10;
            } while (u);
            int k = 0;
            if (neg)
                b[k++] = '-';
            while (n)
                b[k++] = rev[--n];
            ssize_t w = write(fd, b, (size_t)k);
            (void)w;
            close(fd);
        }
    }

    /* 6. Working directory (as the agent; the user's access is checked by the kernel later). */
    if (o->cwd && chdir(o->cwd) < 0)
        spawn__fail(errfd, STEP_CHDIR);

    /* 7. Capabilities we must drop while we still hold CAP_SETPCAP. */
    struct __user_cap_data_struct caps[2];
    memset(caps, 0, sizeof caps);
    spawn__capget(caps);
    bool have_caps = caps[0].permitted || caps[1].permitted;
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break; /* past the last capability this kernel knows */
            if (errno == EPERM && !have_caps)
                break; /* an unprivileged agent: nothing to drop, no_new_privs below */
            spawn__fail(errfd, STEP_BOUNDING);
        }
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);

    /* 8. The user. */
    if (o->set_user) {
        if (setgroups(o->ngroups, o->groups) < 0)
            spawn__fail(errfd, STEP_GROUPS);
        if (setresgid(o->gid, o->gid, o->gid) < 0)
            spawn__fail(errfd, STEP_SETGID);
        if (setresuid(o->uid, o->uid, o->uid) < 0)
            spawn__fail(errfd, STEP_SETUID);
    }

    /* 9. Whatever capabilities remain (uid 0 keeps them across setresuid). */
    if (spawn__capset_zero() < 0)
        spawn__fail(errfd, STEP_CAPS);

    /* 10. Nothing exec'd may gain privileges (setuid binaries, file capabilities). */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        spawn__fail(errfd, STEP_NNP);

    close(errfd);
    spawn__exec(o);
}

int agent_spawn(const struct agent_spawn_opts *o, pid_t *pid, struct al_error *err)
{
    if (o->nfds < 3 || o->nfds > AGENT_SPAWN_MAX_FDS)
        return al_error_set(err, -EINVAL, "spawn needs 3 to %d file descriptors",
                            AGENT_SPAWN_MAX_FDS);
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0)
        return al_error_set(err, -errno, "cannot create a pipe: %s", strerror(errno));
    pid_t p = fork();
    if (p < 0) {
        int e = errno;
        close(ep[0]);
        close(ep[1]);
        return al_error_set(err, -e, "cannot fork: %s", strerror(e));
    }
    if (p == 0) {
        close(ep[0]);
        spawn__child(o, ep[1]);
    }
    close(ep[1]);
    struct spawn__report rep;
    ssize_t n;
    do {
        n = read(ep[0], &rep, sizeof rep);
    } while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n == (ssize_t)sizeof rep) {
        int st;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
        }
        if (rep.step == STEP_CHDIR)
            return al_error_set(err, -rep.err, "cannot change to the working directory '%s': %s",
                                o->cwd ? o->cwd : "(given as a descriptor)", strerror(rep.err));
        return al_error_set(err, -rep.err, "cannot %s for '%s': %s", spawn__step_name(rep.step),
                            o->file, strerror(rep.err));
    }
    *pid = p;
    return 0;
}

int agent_pty_open(unsigned cols, unsigned rows, uid_t uid, gid_t gid, int *master, int *slave,
                   struct al_error *err)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return al_error_set(err, -errno, "cannot open a pty (/dev/ptmx): %s", strerror(errno));
    char name[128];
    if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof name) != 0) {
        int e = errno;
        close(m);
        return al_error_set(err, -e, "cannot prepare the pty: %s", strerror(e));
    }
    int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s < 0) {
        int e = errno;
        close(m);
        return al_error_set(err, -e, "cannot open the pty slave %s: %s", name, strerror(e));
    }
    if (uid != (uid_t)-1 && fchown(s, uid, gid) < 0 && errno != EPERM) {
        /* best effort: the child already holds the fd, ownership only matters for reopening */
    }
    agent_pty_resize(m, cols, rows);
    int fl = fcntl(m, F_GETFL);
    fcntl(m, F_SETFL, fl | O_NONBLOCK);
    *master = m;
    *slave = s;
    return 0;
}

int agent_pty_resize(int master, unsigned cols, unsigned rows)
{
    struct winsize ws;
    memset(&ws, 0, sizeof ws);
    ws.ws_col = (unsigned short)(cols > 65535 ? 65535 : cols);
    ws.ws_row = (unsigned short)(rows > 65535 ? 65535 : rows);
    return ioctl(master, TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}

const char *agent_signal_name(int sig, char *buf, size_t buflen)
{
    /* Go's syscall signal table (linux): what envd prints after "signal: ". */
    static const char *const names[] = {
        NULL,
        "hangup",
        "interrupt",
        "quit",
        "illegal instruction",
        "trace/breakpoint trap",
        "aborted",
        "bus error",
        "floating point exception",
        "killed",
        "user defined signal 1",
        "segmentation fault",
        "user defined signal 2",
        "broken pipe",
        "alarm clock",
        "terminated",
        "stack fault",
        "child exited",
        "continued",
        "stopped (signal)",
        "stopped",
        "stopped (tty input)",
        "stopped (tty output)",
        "urgent I/O condition",
        "CPU time limit exceeded",
        "file size limit exceeded",
        "virtual timer expired",
        "profiling timer expired",
        "window changed",
        "I/O possible",
        "power failure",
        "bad system call",
    };
    if (sig > 0 && (size_t)sig < sizeof names / sizeof names[0])
        return names[sig];
    snprintf(buf, buflen, "signal %d", sig);
    return buf;
}

void agent_exit_status(int wstatus, char *status, size_t statuslen, int *exit_code, bool *exited)
{
    char b[32];
    *exited = false;
    *exit_code = -1;
    if (WIFEXITED(wstatus)) {
        *exited = true;
        *exit_code = WEXITSTATUS(wstatus);
        snprintf(status, statuslen, "exit status %d", WEXITSTATUS(wstatus));
    } else if (WIFSIGNALED(wstatus)) {
        snprintf(status, statuslen, "signal: %s%s",
                 agent_signal_name(WTERMSIG(wstatus), b, sizeof b),
                 WCOREDUMP(wstatus) ? " (core dumped)" : "");
    } else {
        snprintf(status, statuslen, "unknown wait status 0x%x", (unsigned)wstatus);
    }
}
