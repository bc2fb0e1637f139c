/* vmm/guest/spawn: see spawn.h. */
#include "spawn.h"
#include "agent.h"
#include "users.h"
#include "common/confine.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

void agent_spawn_user(const struct agent *a, struct al_spawn *s, const char *file,
                      char *const *argv, char *const *envp, const struct agent_user *u)
{
    s->path = file;
    s->argv = argv;
    s->envp = envp;
    s->as_shell = "airlock-agent";
    s->new_session = true; /* the child leads its own process group: kill(-pid) reaches all */
    s->drop_privileges = true;
    s->set_user = a->can_switch_user;
    /* (root's only: another user's process gets an empty bounding set as everywhere) */
    s->keep_caps = u->uid == 0 ? a->root_caps : 0;
    s->uid = u->uid;
    s->gid = u->gid;
    s->groups = u->groups;
    s->ngroups = u->ngroups;
    s->set_oom_score_adj = a->pid1;
    s->oom_score_adj = 100;
}

static uint64_t agent__caps_effective(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &hdr, d) < 0)
        return 0;
    return (uint64_t)d[0].effective | (uint64_t)d[1].effective << 32;
}

bool agent_can_switch_user(void)
{
    uint64_t eff = agent__caps_effective();
    return (eff & (1ull << CAP_SETUID)) && (eff & (1ull << CAP_SETGID));
}

int agent_build_caps(struct agent *a, struct al_error *err)
{
    uint64_t missing = AL_BUILD_ROOT_CAPS & ~agent__caps_effective();
    if (missing)
        return al_error_set(err, -EPERM,
                            "--build-sandbox: the agent lacks capabilities 0x%llx of the build "
                            "set 0x%llx (airlock-vmm gives them to the agent of a build "
                            "sandbox, spec.jail.build)",
                            (unsigned long long)missing, (unsigned long long)AL_BUILD_ROOT_CAPS);
    a->root_caps = AL_BUILD_ROOT_CAPS;
    return 0;
}

int agent_pty_open(unsigned cols, unsigned rows, const struct agent_user *owner, int *master,
                   int *slave, struct al_error *err)
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
    if (owner->uid != (uid_t)-1 && fchown(s, owner->uid, owner->gid) < 0 && errno != EPERM) {
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
