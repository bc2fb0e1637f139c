/* vmm/guest/sudo: root on request for the sandbox's own processes (the `sudo` program).
 *
 * Owns: the unix socket the sandbox's `sudo` connects to (AGENT_SUDO_SOCKET as init), who
 * may use it, the command's user, program, environment and working directory, starting it
 * with the caller's stdin/stdout/stderr, passing the caller's signals on, and reporting its
 * wait status.
 *
 * Why a service and not a setuid binary: every process the agent starts has no_new_privs
 * and an empty capability bounding set, so a setuid sudo cannot work (and must not). The
 * agent already starts processes as root for the API's `user: "root"`; this starts them
 * the same way (agent_spawn_user: same namespaces, cgroup, seccomp filter, empty bounding set,
 * no capabilities, no_new_privs; in a build sandbox root's AL_BUILD_ROOT_CAPS, as for the
 * step's own command), so sudo grants a sandbox process exactly what the API already grants
 * its caller, and nothing outside the sandbox.
 *
 * Who may: the kernel's credentials of the connecting process (SO_PEERCRED, taken at
 * connect): uid 0, or a user whose groups (the sandbox's /etc/passwd and /etc/group) include
 * the group "sudo" (as Debian's `%sudo ALL=(ALL:ALL) ALL`, without a password: the
 * templates put "user" in it). A peer outside the agent's PID namespace (pid 0) is refused.
 * There is no sudoers file: any target user, any command.
 *
 * Lifetime: the command lives as long as its client. When the client's connection ends
 * before the command (the client was killed, e.g. by a command timeout of the API, which
 * signals the client's process group, not the command's), the command's process group gets
 * SIGKILL.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "common/log.h"
#include "common/util.h"
#include "fspath.h"
#include "spawn.h"
#include "sudoproto.h"

#define SUDO_MAX_SESSIONS 64
#define SUDO_REQ_TIMEOUT  30000 /* ms for a client to send its whole request */
#define SUDO_COMMAND_MAX  4096  /* SUDO_COMMAND is cut there, as sudo does */
#define SUDO_GROUP        "sudo"

struct sudo__sess {
    struct sudo__sess *next;
    struct agent *a;
    int fd;
    uv_poll_t poll;
    uv_timer_t timer;
    int handles; /* poll + timer not yet closed */
    bool polling, closing;
    struct ucred cred;
    int fds[AGENT_SUDO_NFDS];
    int nfds;
    bool fds_seen;
    uint8_t hdr[AGENT_SUDO_HDR];
    size_t hdr_got;
    uint8_t type;
    uint32_t body_len;
    char *body;
    size_t body_got;
    bool have_req;
    pid_t pid;
    bool running;
    bool client_gone;
};

struct agent_sudo {
    int lfd;
    uv_poll_t lpoll;
    bool listening;
    char path[PATH_MAX];
    struct sudo__sess *list;
    size_t n;
};

/* ---- policy (pure but for the user database) ------------------------------------------- */

int agent_sudo_authorize(struct agent *a, uid_t uid, struct agent_user *caller,
                         struct al_error *err)
{
    int r = agent_user_by_uid(&a->users, uid, caller, NULL);
    if (uid == 0) {
        if (r < 0) {
            memset(caller, 0, sizeof *caller);
            snprintf(caller->name, sizeof caller->name, "root");
            snprintf(caller->home, sizeof caller->home, "/root");
            caller->ngroups = 1;
        }
        return 0;
    }
    if (r < 0)
        return al_error_set(err, -EPERM,
                            "uid %u is not in the sandbox's /etc/passwd: only root and members "
                            "of the group '" SUDO_GROUP "' may use sudo",
                            (unsigned)uid);
    gid_t g;
    if (agent_gid_by_name(&a->users, SUDO_GROUP, &g) == 0) {
        for (size_t i = 0; i < caller->ngroups; i++)
            if (caller->groups[i] == g)
                return 0;
    }
    return al_error_set(err, -EPERM,
                        "%s is not allowed to run commands as another user in this sandbox: "
                        "only root and members of the group '" SUDO_GROUP "' (/etc/group) may",
                        caller->name);
}

static bool sudo__name_ok(const char *s, size_t n)
{
    if (n == 0 || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z')))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* sudo's env_keep defaults: what survives the reset, given a value sudo would keep. */
static bool sudo__kept(const char *name, size_t nl, const char *value)
{
    static const char *const keep[] = {
        "COLORS", "DISPLAY",    "HOSTNAME",       "KRB5CCNAME",          "LS_COLORS", "PS1",
        "PS2",    "XAUTHORITY", "XAUTHORIZATION", "XDG_CURRENT_DESKTOP", NULL};
    /* These are kept only with a value that names no file ('/') and no format ('%'). */
    static const char *const check[] = {"COLORTERM", "LANG", "LANGUAGE", "LINGUAS", "TERM", NULL};
    for (const char *const *k = keep; *k; k++)
        if (strlen(*k) == nl && memcmp(*k, name, nl) == 0)
            return true;
    bool checked = nl > 3 && memcmp(name, "LC_", 3) == 0;
    for (const char *const *k = check; *k && !checked; k++)
        checked = strlen(*k) == nl && memcmp(*k, name, nl) == 0;
    if (checked)
        return !strchr(value, '/') && !strchr(value, '%');
    if (nl == 2 && memcmp(name, "TZ", 2) == 0) {
        /* sudo's tz_is_safe: a zone name, or a file under the zone directory; no "..". */
        const char *v = value[0] == ':' ? value + 1 : value;
        if (v[0] == '/' && strncmp(v, "/usr/share/zoneinfo/", 20) != 0)
            return false;
        for (const char *c = v; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
                return false;
        return !strstr(v, "..") && strlen(v) < PATH_MAX;
    }
    return false;
}

/* What sudo removes even from a preserved (-E) environment: variables that change how a
 * program or its interpreter runs (sudo's initial_badenv_table). */
static bool sudo__bad(const char *name, size_t nl, const char *value)
{
    static const char *const bad[] = {"IFS",
                                      "CDPATH",
                                      "LOCALDOMAIN",
                                      "RES_OPTIONS",
                                      "HOSTALIASES",
                                      "NLSPATH",
                                      "PATH_LOCALE",
                                      "TERMINFO",
                                      "TERMINFO_DIRS",
                                      "TERMPATH",
                                      "TERMCAP",
                                      "ENV",
                                      "BASH_ENV",
                                      "PS4",
                                      "GLOBIGNORE",
                                      "BASHOPTS",
                                      "SHELLOPTS",
                                      "JAVA_TOOL_OPTIONS",
                                      "PERLIO_DEBUG",
                                      "PERLLIB",
                                      "PERL5LIB",
                                      "PERL5OPT",
                                      "PERL5DB",
                                      "FPATH",
                                      "NULLCMD",
                                      "READNULLCMD",
                                      "ZDOTDIR",
                                      "TMPPREFIX",
                                      "PYTHONHOME",
                                      "PYTHONPATH",
                                      "PYTHONINSPECT",
                                      "PYTHONUSERBASE",
                                      "RUBYLIB",
                                      "RUBYOPT",
                                      NULL};
    for (const char *const *b = bad; *b; b++)
        if (strlen(*b) == nl && memcmp(*b, name, nl) == 0)
            return true;
    if ((nl > 3 && memcmp(name, "LD_", 3) == 0) || (nl > 9 && memcmp(name, "BASH_FUNC_", 10) == 0))
        return true;
    return strncmp(value, "() ", 3) == 0; /* an exported bash function */
}

static void sudo__set(json_t *env, const char *name, size_t nl, const char *value)
{
    char key[4096];
    if (nl >= sizeof key)
        return;
    memcpy(key, name, nl);
    key[nl] = '\0';
    json_object_set_new_nocheck(env, key, json_string_nocheck(value));
}

char **agent_sudo_env(struct agent *a, const struct agent_sudo_env_opts *o)
{
    const struct agent_user *caller = o->caller, *target = o->target;
    const struct agent_sudo_req *req = o->req;
    json_t *x = json_object();
    if (!x)
        return NULL;
    bool login = req->mode == AGENT_SUDO_LOGIN;
    for (size_t i = 0; i < req->envc; i++) {
        const char *e = req->env[i], *eq = strchr(e, '=');
        if (!eq || !sudo__name_ok(e, (size_t)(eq - e)))
            continue;
        size_t nl = (size_t)(eq - e);
        bool keep = req->preserve_env ? !sudo__bad(e, nl, eq + 1) : sudo__kept(e, nl, eq + 1);
        for (size_t k = 0; !keep && k < req->keepc; k++)
            keep = strlen(req->keep[k]) == nl && memcmp(req->keep[k], e, nl) == 0;
        if (keep)
            sudo__set(x, e, nl, eq + 1);
    }
    /* The target's identity (HOME stays the caller's with -E, as sudo's; -i is a login). */
    char mail[300];
    snprintf(mail, sizeof mail, "/var/mail/%s", target->name);
    if (!req->preserve_env || login)
        sudo__set(x, "HOME", 4, target->home);
    if (!req->preserve_env || login || !json_object_get(x, "SHELL"))
        sudo__set(x, "SHELL", 5, o->shell);
    sudo__set(x, "USER", 4, target->name);
    sudo__set(x, "LOGNAME", 7, target->name);
    sudo__set(x, "MAIL", 4, mail);
    sudo__set(x, "PATH", 4, AGENT_SUDO_SECURE_PATH);
    char num[24];
    sudo__set(x, "SUDO_USER", 9, caller->name);
    snprintf(num, sizeof num, "%u", (unsigned)o->caller_uid);
    sudo__set(x, "SUDO_UID", 8, num);
    snprintf(num, sizeof num, "%u", (unsigned)o->caller_gid);
    sudo__set(x, "SUDO_GID", 8, num);
    sudo__set(x, "SUDO_COMMAND", 12, o->command);
    for (size_t i = 0; i < req->setenvc; i++) {
        const char *e = req->setenv[i], *eq = strchr(e, '=');
        if (eq && sudo__name_ok(e, (size_t)(eq - e)))
            sudo__set(x, e, (size_t)(eq - e), eq + 1);
    }
    char **v = agent_child_env(a, target, x, NULL);
    json_decref(x);
    return v;
}

/* The executable called file in a PATH list (into out), as sudo's own lookup: the first
 * regular file with an execute bit. -ENOENT when none. */
int agent_sudo_find(const char *file, const char *path, char *out, size_t outlen)
{
    const char *p = path;
    while (al_spawn_path_next(&p, file, out, outlen)) {
        struct stat st;
        if (out[0] == '.' && out[1] == '/')
            continue; /* an empty or relative PATH entry: never searched for root */
        if (out[0] == '/' && stat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
            return 0;
    }
    return -ENOENT;
}

/* ---- sessions ----------------------------------------------------------------------------- */

static void sudo__send(struct sudo__sess *s, uint8_t type, const void *p, uint32_t len)
{
    if (s->client_gone || s->fd < 0)
        return;
    uint8_t buf[AGENT_SUDO_HDR + AGENT_SUDO_MAX_MSG];
    if (len > AGENT_SUDO_MAX_MSG)
        len = AGENT_SUDO_MAX_MSG;
    agent_sudo_hdr(type, len, buf);
    memcpy(buf + AGENT_SUDO_HDR, p, len);
    /* A few bytes into a socket whose client only reads: they fit; if the client stopped
     * reading anyway, it loses its own answer. */
    ssize_t n = send(s->fd, buf, AGENT_SUDO_HDR + len, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
}

static void sudo__close_fds(struct sudo__sess *s)
{
    for (int i = 0; i < s->nfds; i++)
        if (s->fds[i] >= 0)
            close(s->fds[i]);
    s->nfds = 0;
}

static void sudo__free(struct sudo__sess *s)
{
    free(s->body);
    free(s);
}

static void sudo__handle_closed(uv_handle_t *h)
{
    struct sudo__sess *s = h->data;
    if (--s->handles == 0)
        sudo__free(s);
}

static void sudo__unlink(struct sudo__sess *s)
{
    struct agent_sudo *sv = s->a->sudo;
    for (struct sudo__sess **pp = &sv->list; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            sv->n--;
            return;
        }
    }
}

static void sudo__stop_poll(struct sudo__sess *s)
{
    if (s->polling) {
        uv_poll_stop(&s->poll);
        s->polling = false;
    }
}

/* Ends the session: the connection is closed; the memory goes with the handles. */
static void sudo__close(struct sudo__sess *s)
{
    if (s->closing)
        return;
    s->closing = true;
    sudo__stop_poll(s);
    sudo__close_fds(s);
    sudo__unlink(s);
    uv_close((uv_handle_t *)&s->poll, sudo__handle_closed);
    uv_close((uv_handle_t *)&s->timer, sudo__handle_closed);
    close(s->fd); /* after the poll handle stopped watching it */
    s->fd = -1;
}

__attribute__((format(printf, 2, 3))) static void sudo__refuse(struct sudo__sess *s,
                                                               const char *fmt, ...)
{
    char msg[AGENT_SUDO_MAX_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sudo__send(s, AGENT_SUDO_F_REFUSE, msg, (uint32_t)strlen(msg));
    sudo__close(s);
}

static void sudo__kill(struct sudo__sess *s, int sig)
{
    if (!s->running)
        return;
    int r1 = kill(-s->pid, sig);
    int r2 = kill(s->pid, sig);
    (void)r1;
    (void)r2;
}

static void sudo__on_exit(void *arg, pid_t pid, int wstatus)
{
    struct sudo__sess *s = arg;
    s->running = false;
    char status[96];
    int code;
    bool exited;
    agent_exit_status(wstatus, status, sizeof status, &code, &exited);
    al_info("sudo: process %d ended: %s", (int)pid, status);
    uint8_t w[4];
    agent_sudo_put_u32(w, (uint32_t)wstatus);
    sudo__send(s, AGENT_SUDO_F_EXIT, w, 4);
    sudo__close(s);
}

static int sudo__target(struct agent *a, const char *name, struct agent_user *u,
                        struct al_error *err)
{
    if (!name) {
        if (agent_user_by_uid(&a->users, 0, u, NULL) == 0)
            return 0;
        memset(u, 0, sizeof *u);
        snprintf(u->name, sizeof u->name, "root");
        snprintf(u->home, sizeof u->home, "/root");
        snprintf(u->shell, sizeof u->shell, "/bin/sh");
        u->ngroups = 1;
        return 0;
    }
    if (name[0] == '#') {
        char *end;
        errno = 0;
        unsigned long id = strtoul(name + 1, &end, 10);
        if (!name[1] || *end || errno || id >= 0xffffffffUL)
            return al_error_set(err, -EINVAL, "unknown user %.64s", name);
        if (agent_user_by_uid(&a->users, (uid_t)id, u, NULL) < 0)
            return al_error_set(err, -ENOENT, "unknown user %.64s (no such uid in %s)", name,
                                a->users.passwd.path);
        return 0;
    }
    if (agent_user_by_name(&a->users, name, u, NULL) < 0)
        return al_error_set(err, -ENOENT, "unknown user %.64s", name);
    return 0;
}

/* SUDO_COMMAND: the program's path and the arguments, spaces between, cut at 4096 bytes. */
static void sudo__command_line(const char *path, const char *const *args, char *out, size_t len)
{
    size_t k = (size_t)snprintf(out, len, "%s", path);
    for (size_t i = 0; args[i] && k + 1 < len; i++)
        k += (size_t)snprintf(out + k, len - k, " %s", args[i]);
}

static void sudo__run(struct sudo__sess *s, struct agent_sudo_req *req)
{
    struct agent *a = s->a;
    struct al_error e = {0};
    struct agent_user caller, target;
    if (s->cred.pid <= 0) {
        al_warn("sudo refused: the caller is outside the sandbox's PID namespace");
        sudo__refuse(s, "the caller is not a process of this sandbox");
        return;
    }
    if (agent_sudo_authorize(a, s->cred.uid, &caller, &e) < 0) {
        al_warn("sudo refused for pid %d, uid %u: %s", (int)s->cred.pid, (unsigned)s->cred.uid,
                al_error_str(&e));
        sudo__refuse(s, "%s", al_error_str(&e));
        return;
    }
    if (!a->can_switch_user) {
        sudo__refuse(s,
                     "the airlock agent runs as uid %u without CAP_SETUID/CAP_SETGID (it is not "
                     "the sandbox's init): it cannot start processes as another user",
                     (unsigned)a->self_uid);
        return;
    }
    if (req->mode == AGENT_SUDO_VALIDATE) {
        uint8_t w[4] = {0};
        sudo__send(s, AGENT_SUDO_F_EXIT, w, 4);
        sudo__close(s);
        return;
    }
    if (sudo__target(a, req->user, &target, &e) < 0) {
        sudo__refuse(s, "%s", al_error_str(&e));
        return;
    }
    if (s->nfds != AGENT_SUDO_NFDS) {
        sudo__refuse(s, "the request came without its %d file descriptors", AGENT_SUDO_NFDS);
        return;
    }
    /* The program and its arguments. */
    const char *shell = NULL;
    char *quoted = NULL;
    char argv0[PATH_MAX + 2];
    const char *file;
    size_t nargs = req->mode == AGENT_SUDO_RUN ? req->argc : 3;
    const char **argv = calloc(nargs + 1, sizeof *argv);
    char path[PATH_MAX];
    if (!argv) {
        sudo__refuse(s, "out of memory");
        return;
    }
    if (req->mode == AGENT_SUDO_RUN) {
        file = req->argv[0];
        if (!strchr(file, '/')) {
            const char *search = AGENT_SUDO_SECURE_PATH;
            for (size_t i = 0; i < req->setenvc; i++)
                if (strncmp(req->setenv[i], "PATH=", 5) == 0)
                    search = req->setenv[i] + 5;
            if (agent_sudo_find(file, search, path, sizeof path) < 0) {
                free(argv);
                sudo__refuse(s, "%.256s: command not found", file);
                return;
            }
            file = path;
        } else {
            struct stat st;
            int dfd = s->nfds == AGENT_SUDO_NFDS ? s->fds[3] : AT_FDCWD;
            if (fstatat(dfd, file, &st, 0) < 0 || !S_ISREG(st.st_mode) || !(st.st_mode & 0111)) {
                free(argv);
                sudo__refuse(s, "%.256s: command not found", file);
                return;
            }
        }
        for (size_t i = 0; i < req->argc; i++)
            argv[i] = req->argv[i];
        shell = target.shell[0] ? target.shell : "/bin/sh";
    } else {
        /* -s: the caller's SHELL, else the caller's login shell; -i: the target's. */
        if (req->mode == AGENT_SUDO_SHELL) {
            for (size_t i = 0; i < req->envc && !shell; i++)
                if (strncmp(req->env[i], "SHELL=", 6) == 0 && req->env[i][6])
                    shell = req->env[i] + 6;
            if (!shell)
                shell = caller.shell[0] ? caller.shell : "/bin/sh";
        } else {
            shell = target.shell[0] ? target.shell : "/bin/sh";
        }
        file = shell;
        if (req->mode == AGENT_SUDO_LOGIN) {
            const char *b = strrchr(shell, '/');
            snprintf(argv0, sizeof argv0, "-%s", b ? b + 1 : shell);
            argv[0] = argv0;
        } else {
            argv[0] = shell;
        }
        if (req->argc) {
            if (agent_sudo_shell_quote(req->argv, req->argc, &quoted) < 0) {
                free(argv);
                sudo__refuse(s, "out of memory");
                return;
            }
            argv[1] = "-c";
            argv[2] = quoted;
        }
    }
    char cmdline[SUDO_COMMAND_MAX + 1];
    sudo__command_line(file, argv + 1, cmdline, sizeof cmdline);
    char **envp = agent_sudo_env(a, &(struct agent_sudo_env_opts){.caller = &caller,
                                                                  .caller_uid = s->cred.uid,
                                                                  .caller_gid = s->cred.gid,
                                                                  .target = &target,
                                                                  .req = req,
                                                                  .shell = shell,
                                                                  .command = cmdline});
    if (!envp) {
        free(argv);
        free(quoted);
        sudo__refuse(s, "out of memory");
        return;
    }
    struct al_spawn so = {0};
    agent_spawn_user(a, &so, file, (char *const *)argv, envp, &target);
    so.set_user = true; /* (sudo runs only in an agent that may switch users) */
    if (req->mode == AGENT_SUDO_LOGIN) {
        so.cwd = target.home; /* a login starts at home, as sudo -i does */
    } else {
        so.use_cwd_fd = true;
        so.cwd_fd = s->fds[3];
    }
    so.fds[0] = s->fds[0];
    so.fds[1] = s->fds[1];
    so.fds[2] = s->fds[2];
    so.nfds = 3;
    pid_t pid;
    int r = al_spawn(&so, &pid, NULL, &e);
    free(argv);
    free(quoted);
    agent_free_strv(envp);
    sudo__close_fds(s); /* the command has its own copies */
    if (r < 0) {
        sudo__refuse(s, "%s", al_error_str(&e));
        return;
    }
    s->pid = pid;
    s->running = true;
    agent_child_watch(a, pid, sudo__on_exit, s);
    /* The program, not its arguments: those may hold secrets. */
    al_info("sudo: pid %d (%s) started process %d as %s: %s", (int)s->cred.pid, caller.name,
            (int)pid, target.name, agent_path_base(file));
}

static void sudo__take_fds(struct sudo__sess *s, struct msghdr *m, bool *bad)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *fds = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < n; i++) {
            if (!s->fds_seen && !s->have_req && s->nfds < AGENT_SUDO_NFDS && n == AGENT_SUDO_NFDS)
                s->fds[s->nfds++] = fds[i];
            else {
                close(fds[i]);
                *bad = true;
            }
        }
        s->fds_seen = true;
    }
    if (m->msg_flags & MSG_CTRUNC)
        *bad = true;
}

/* The client went away (or broke the protocol): its command goes too; the command's exit
 * closes the session. */
static void sudo__client_gone(struct sudo__sess *s)
{
    s->client_gone = true;
    if (s->running) {
        sudo__kill(s, SIGKILL);
        sudo__stop_poll(s);
    } else {
        sudo__close(s);
    }
}

static void sudo__on_readable(uv_poll_t *h, int status, int events)
{
    struct sudo__sess *s = h->data;
    (void)events;
    for (;;) {
        uint8_t *dst;
        size_t want;
        if (s->hdr_got < AGENT_SUDO_HDR) {
            dst = s->hdr + s->hdr_got;
            want = AGENT_SUDO_HDR - s->hdr_got;
        } else {
            dst = (uint8_t *)s->body + s->body_got;
            want = s->body_len - s->body_got;
        }
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int) * 8)];
        } ctl;
        struct iovec iov = {dst, want};
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
        ssize_t n = status < 0 ? -1 : recvmsg(s->fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR) && status >= 0)
            return;
        bool bad = false;
        if (n > 0)
            sudo__take_fds(s, &m, &bad);
        if (bad && !s->have_req) {
            al_warn("sudo: pid %d sent other file descriptors than its 4", (int)s->cred.pid);
            sudo__refuse(s, "the request must carry exactly 4 file descriptors (stdin, stdout, "
                            "stderr, working directory) and nothing after them");
            return;
        }
        if (n <= 0 || bad) {
            if (bad)
                al_warn("sudo: pid %d sent file descriptors after its request", (int)s->cred.pid);
            sudo__client_gone(s);
            return;
        }
        if (s->hdr_got < AGENT_SUDO_HDR) {
            s->hdr_got += (size_t)n;
            if (s->hdr_got < AGENT_SUDO_HDR)
                continue;
            if (agent_sudo_hdr_parse(s->hdr, &s->type, &s->body_len) < 0 ||
                (!s->have_req && s->type != AGENT_SUDO_F_REQ) ||
                (s->have_req && s->type != AGENT_SUDO_F_SIG)) {
                al_warn("sudo: pid %d sent a malformed message", (int)s->cred.pid);
                if (!s->have_req) {
                    sudo__refuse(s, "malformed request (the sudo program and the agent differ)");
                    return;
                }
                sudo__client_gone(s);
                return;
            }
            free(s->body);
            s->body = malloc(s->body_len + 1);
            s->body_got = 0;
            if (!s->body) {
                sudo__refuse(s, "out of memory");
                return;
            }
        } else {
            s->body_got += (size_t)n;
        }
        if (s->hdr_got < AGENT_SUDO_HDR || s->body_got < s->body_len)
            continue;
        s->hdr_got = 0; /* a whole frame: the next one starts */
        if (!s->have_req) {
            s->have_req = true;
            uv_timer_stop(&s->timer);
            struct agent_sudo_req req;
            const char *why = NULL;
            s->body[s->body_len] = '\0';
            if (agent_sudo_req_parse(s->body, s->body_len, &req, &why) < 0) {
                al_warn("sudo: pid %d sent a bad request: %s", (int)s->cred.pid, why);
                sudo__refuse(s, "bad request: %s", why);
                return;
            }
            sudo__run(s, &req);
            agent_sudo_req_free(&req);
            free(s->body);
            s->body = NULL;
            if (s->closing)
                return;
            continue;
        }
        int sig = (int)agent_sudo_u32((uint8_t *)s->body);
        if (sig > 0 && sig < NSIG && sig != SIGKILL && sig != SIGSTOP)
            sudo__kill(s, sig);
    }
}

static void sudo__on_timeout(uv_timer_t *t)
{
    struct sudo__sess *s = t->data;
    if (s->have_req)
        return;
    al_warn("sudo: pid %d did not send its request within %d s", (int)s->cred.pid,
            SUDO_REQ_TIMEOUT / 1000);
    sudo__refuse(s, "the request did not arrive within %d s", SUDO_REQ_TIMEOUT / 1000);
}

static void sudo__on_connection(uv_poll_t *h, int status, int events)
{
    struct agent *a = h->data;
    struct agent_sudo *sv = a->sudo;
    (void)events;
    if (status < 0)
        return;
    for (;;) {
        int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                al_warn("sudo: accept: %s", strerror(errno));
            return;
        }
        struct ucred cred;
        socklen_t cl = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
            close(fd);
            continue;
        }
        struct sudo__sess *s = calloc(1, sizeof *s);
        if (!s || sv->n >= SUDO_MAX_SESSIONS || uv_poll_init(a->loop, &s->poll, fd) < 0) {
            static const char msg[] = "too many sudo sessions at once in this sandbox (64)";
            uint8_t b[AGENT_SUDO_HDR + sizeof msg];
            agent_sudo_hdr(AGENT_SUDO_F_REFUSE, sizeof msg - 1, b);
            memcpy(b + AGENT_SUDO_HDR, msg, sizeof msg - 1);
            ssize_t n = send(fd, b, AGENT_SUDO_HDR + sizeof msg - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)n;
            al_warn("sudo: pid %d refused: %s", (int)cred.pid, s ? msg : "out of memory");
            free(s);
            close(fd);
            continue;
        }
        s->a = a;
        s->fd = fd;
        s->cred = cred;
        s->poll.data = s;
        uv_timer_init(a->loop, &s->timer);
        s->timer.data = s;
        s->handles = 2;
        uv_poll_start(&s->poll, UV_READABLE | UV_DISCONNECT, sudo__on_readable);
        s->polling = true;
        uv_timer_start(&s->timer, sudo__on_timeout, SUDO_REQ_TIMEOUT, 0);
        s->next = sv->list;
        sv->list = s;
        sv->n++;
    }
}

int agent_sudo_listen(struct agent *a, const char *path, struct al_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path || path[0] != '/')
        return al_error_set(err, -EINVAL,
                            "sudo socket '%.200s': an absolute path shorter than %zu "
                            "bytes is needed",
                            path, sizeof sa.sun_path);
    if (!a->sudo && !(a->sudo = calloc(1, sizeof *a->sudo)))
        return al_error_set(err, -ENOMEM, "out of memory");
    struct agent_sudo *sv = a->sudo;
    if (sv->listening)
        return al_error_set(err, -EEXIST, "the sudo socket is already open");
    strcpy(sa.sun_path, path);
    /* Its directory (as init: /run/airlock, root's, 0755, so no user can replace the socket). */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return al_error_set(err, -errno, "cannot create %s for the sudo socket: %s", dir,
                                strerror(errno));
    }
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return al_error_set(err, -EEXIST,
                                "%s exists and is not a socket: sudo stays off (remove it)", path);
        unlink(path); /* a socket left by an earlier agent */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return al_error_set(err, -errno, "sudo socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(path, 0666) < 0 ||
        listen(fd, 64) < 0) {
        int e = errno;
        close(fd);
        unlink(path);
        return al_error_set(err, -e, "cannot listen on %s: %s", path, strerror(e));
    }
    sv->lfd = fd;
    snprintf(sv->path, sizeof sv->path, "%s", path);
    uv_poll_init(a->loop, &sv->lpoll, fd);
    sv->lpoll.data = a;
    uv_poll_start(&sv->lpoll, UV_READABLE, sudo__on_connection);
    sv->listening = true;
    return 0;
}

void agent_sudo_shutdown(struct agent *a, int sig)
{
    if (!a->sudo)
        return;
    for (struct sudo__sess *s = a->sudo->list; s; s = s->next)
        sudo__kill(s, sig);
}

static void sudo__lclosed(uv_handle_t *h)
{
    struct agent *a = h->data;
    close(a->sudo->lfd);
    free(a->sudo);
    a->sudo = NULL;
}

void agent_sudo_close(struct agent *a)
{
    struct agent_sudo *sv = a->sudo;
    if (!sv)
        return;
    while (sv->list) {
        struct sudo__sess *s = sv->list;
        if (s->running) {
            sudo__kill(s, SIGKILL);
            agent_child_unwatch(a, s->pid);
            s->running = false;
        }
        s->client_gone = true;
        sudo__close(s);
    }
    if (sv->listening) {
        sv->listening = false;
        unlink(sv->path);
        uv_close((uv_handle_t *)&sv->lpoll, sudo__lclosed);
    } else {
        free(sv);
        a->sudo = NULL;
    }
}
