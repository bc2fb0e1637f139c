/* vmm/guest/sudo_main: the sandbox's `sudo` (installed at /.airlock/bin/sudo; the templates
 * link /usr/bin/sudo to it).
 *
 * Owns: sudo's command line (-u, -E, --preserve-env=LIST, -i, -s, -n, -H, -S, -A, -P, -v,
 * -l, -k, -K, -h, -V, --, NAME=value before the command), sending the request with its
 * stdin, stdout, stderr and working directory to the agent (sudo.c, over
 * AGENT_SUDO_SOCKET, or $AIRLOCK_SUDO_SOCKET), passing on the signals it receives, and
 * ending as the command did: its exit status, or the same signal.
 *
 * It holds no privilege itself (no setuid bit: nothing in a sandbox can gain privileges
 * through exec); the agent decides who may, and starts the command. Nothing is ever asked
 * for: there are no passwords in a sandbox, so -n, -S and -A change nothing.
 * Links nothing but the C library and sudoproto.c (it is static in the sandbox).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "sudoproto.h"

#ifndef AIRLOCK_VERSION
#define AIRLOCK_VERSION "dev"
#endif

extern char **environ;

/* The signals passed on to the command (sudo relays these too). */
static const int sudo_signals[] = {SIGHUP,  SIGINT,  SIGQUIT,  SIGTERM, SIGUSR1,
                                   SIGUSR2, SIGALRM, SIGWINCH, SIGCONT};

static void sudo_usage(FILE *f)
{
    fprintf(
        f,
        "usage: sudo [-EHnPS] [-u user] [--preserve-env=list] [NAME=value...] command [args...]\n"
        "       sudo [-EHnPS] [-u user] -i|-s [command [args...]]\n"
        "       sudo -v | -l [command] | -k | -K | -h | -V\n"
        "Runs the command as root (or -u user) through the sandbox's airlock agent: uid 0 of\n"
        "the sandbox, without capabilities, in the sandbox's namespaces and limits. Allowed\n"
        "for root and members of the group 'sudo'; never asks for a password.\n"
        "  -u, --user USER        run as USER (a name or #uid) instead of root\n"
        "  -E, --preserve-env     keep the environment (sudo's unsafe variables still go)\n"
        "      --preserve-env=A,B keep these variables\n"
        "  -i, --login            the target user's login shell, in its home [-c command]\n"
        "  -s, --shell            $SHELL (or the caller's shell) [-c command]\n"
        "  -v, --validate         check that sudo is allowed (exit 0 or 1)\n"
        "  -l, --list             what may be run (everything), or the command's path\n"
        "  -n, -S, -A, -H, -P, -k, -K: accepted; nothing to ask for or forget\n"
        "Environment: AIRLOCK_SUDO_SOCKET (default " AGENT_SUDO_SOCKET ").\n");
}

__attribute__((format(printf, 1, 2))) static _Noreturn void sudo_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sudo: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static int sudo_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int sudo_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EPIPE;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Descriptors 0-2 as the command will have them: a closed one becomes /dev/null. */
static int sudo_std_fd(int fd)
{
    if (fcntl(fd, F_GETFD) >= 0)
        return fd;
    int n = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (n < 0)
        sudo_die("cannot open /dev/null: %s", strerror(errno));
    return n;
}

static int sudo_find(const char *file, char *out, size_t len)
{
    if (strchr(file, '/')) {
        snprintf(out, len, "%s", file);
        return access(file, X_OK);
    }
    const char *p = AGENT_SUDO_SECURE_PATH;
    while (*p) {
        const char *c = strchr(p, ':');
        size_t dl = c ? (size_t)(c - p) : strlen(p);
        if ((size_t)snprintf(out, len, "%.*s/%s", (int)dl, p, file) < len) {
            struct stat st;
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
                return 0;
        }
        p += dl + (c ? 1 : 0);
    }
    return -1;
}

struct sudo_req {
    uint8_t *buf;
    size_t len, cap;
};

static void sudo_add(struct sudo_req *q, char tag, const char *s)
{
    size_t need = strlen(s) + 2;
    if (q->len + need > q->cap) {
        size_t cap = q->cap ? q->cap : 4096;
        while (cap < q->len + need)
            cap *= 2;
        if (cap > AGENT_SUDO_MAX_REQ)
            cap = AGENT_SUDO_MAX_REQ;
        uint8_t *nb = realloc(q->buf, cap);
        if (!nb)
            sudo_die("%s", "out of memory");
        q->buf = nb;
        q->cap = cap;
    }
    if (agent_sudo_req_add(q->buf, q->cap, &q->len, tag, s) < 0)
        sudo_die("%s", "the command line and environment are too long (over 4 MiB)");
}

static int sudo_connect(void)
{
    const char *path = getenv("AIRLOCK_SUDO_SOCKET");
    if (!path || !*path)
        path = AGENT_SUDO_SOCKET;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        sudo_die("socket path too long: %s", path);
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        sudo_die("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        fprintf(stderr,
                "sudo: cannot reach the airlock agent at %s: %s (this sudo works only inside an "
                "airlock sandbox, whose agent runs commands as root)\n",
                path, strerror(errno));
        exit(1);
    }
    return fd;
}

/* Sends the request frame with fds attached to its first bytes. */
static void sudo_send_request(int sock, const struct sudo_req *q, const int fds[AGENT_SUDO_NFDS])
{
    uint8_t hdr[AGENT_SUDO_HDR];
    agent_sudo_hdr(AGENT_SUDO_F_REQ, (uint32_t)q->len, hdr);
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * AGENT_SUDO_NFDS)];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {hdr, sizeof hdr};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    m.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * AGENT_SUDO_NFDS);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * AGENT_SUDO_NFDS);
    ssize_t n;
    do {
        n = sendmsg(sock, &m, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        sudo_die("cannot send the request to the airlock agent: %s", strerror(errno));
    if ((size_t)n < sizeof hdr && sudo_write_all(sock, hdr + n, sizeof hdr - (size_t)n) < 0)
        sudo_die("cannot send the request to the airlock agent: %s", strerror(errno));
    if (sudo_write_all(sock, q->buf, q->len) < 0)
        sudo_die("cannot send the request to the airlock agent: %s", strerror(errno));
}

/* Ends this process as the command ended. */
static _Noreturn void sudo_exit_as(int wstatus)
{
    if (WIFEXITED(wstatus))
        exit(WEXITSTATUS(wstatus));
    if (WIFSIGNALED(wstatus)) {
        /* As sudo: the same signal, so that the caller sees "killed", "terminated", ... */
        int sig = WTERMSIG(wstatus);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        sigaction(sig, &sa, NULL);
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, sig);
        sigprocmask(SIG_UNBLOCK, &s, NULL);
        raise(sig);
        exit(128 + sig);
    }
    exit(1);
}

/* Waits for the agent's answer, passing signals on; never returns. */
static _Noreturn void sudo_wait(int sock, int sfd)
{
    for (;;) {
        struct pollfd p[2] = {{sock, POLLIN, 0}, {sfd, POLLIN, 0}};
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            sudo_die("poll: %s", strerror(errno));
        if (p[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                uint8_t f[AGENT_SUDO_HDR + 4];
                agent_sudo_hdr(AGENT_SUDO_F_SIG, 4, f);
                agent_sudo_put_u32(f + AGENT_SUDO_HDR, si.ssi_signo);
                sudo_write_all(sock, f, sizeof f); /* a closed socket shows below */
            }
        }
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        uint8_t hdr[AGENT_SUDO_HDR], type;
        uint32_t len;
        if (sudo_read_all(sock, hdr, sizeof hdr) < 0 || agent_sudo_hdr_parse(hdr, &type, &len) < 0)
            sudo_die("%s", "the airlock agent ended the session without the command's status");
        char body[AGENT_SUDO_MAX_MSG + 1];
        if (sudo_read_all(sock, body, len) < 0)
            sudo_die("%s", "the airlock agent ended the session without the command's status");
        body[len] = '\0';
        if (type == AGENT_SUDO_F_EXIT)
            sudo_exit_as((int)agent_sudo_u32((uint8_t *)body));
        if (type == AGENT_SUDO_F_REFUSE)
            sudo_die("%s", body);
        sudo_die("%s", "unexpected message from the airlock agent");
    }
}

int main(int argc, char **argv)
{
    enum { OPT_PRESERVE_LIST = 256 };
    static const struct option opts[] = {
        {"user", required_argument, NULL, 'u'},
        {"preserve-env", optional_argument, NULL, OPT_PRESERVE_LIST},
        {"login", no_argument, NULL, 'i'},
        {"shell", no_argument, NULL, 's'},
        {"non-interactive", no_argument, NULL, 'n'},
        {"set-home", no_argument, NULL, 'H'},
        {"stdin", no_argument, NULL, 'S'},
        {"askpass", no_argument, NULL, 'A'},
        {"preserve-groups", no_argument, NULL, 'P'},
        {"validate", no_argument, NULL, 'v'},
        {"list", no_argument, NULL, 'l'},
        {"reset-timestamp", no_argument, NULL, 'k'},
        {"remove-timestamp", no_argument, NULL, 'K'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"group", required_argument, NULL, 'g'},
        {"background", no_argument, NULL, 'b'},
        {"chdir", required_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    const char *user = NULL;
    bool preserve = false, login = false, shell = false, validate = false, list = false,
         forget = false;
    struct sudo_req q = {0};
    sudo_add(&q, AGENT_SUDO_T_VERSION, AGENT_SUDO_VERSION);
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+u:EisnHSAPvlkKhVg:bD:", opts, NULL)) != -1) {
        switch (c) {
        case 'u':
            user = optarg;
            break;
        case 'E':
            preserve = true;
            break;
        case OPT_PRESERVE_LIST:
            if (!optarg) {
                preserve = true;
                break;
            }
            for (char *save = NULL, *n = strtok_r(optarg, ",", &save); n;
                 n = strtok_r(NULL, ",", &save))
                sudo_add(&q, AGENT_SUDO_T_KEEP, n);
            break;
        case 'i':
            login = true;
            break;
        case 's':
            shell = true;
            break;
        case 'v':
            validate = true;
            break;
        case 'l':
            list = true;
            break;
        case 'k':
        case 'K':
            forget = true;
            break;
        case 'n':
        case 'H':
        case 'S':
        case 'A':
        case 'P':
            break; /* nothing is ever asked for; HOME is already the target's */
        case 'h':
            sudo_usage(stdout);
            return 0;
        case 'V':
            printf("airlock sudo %s (runs commands through the sandbox's airlock agent)\n",
                   AIRLOCK_VERSION);
            return 0;
        case 'g':
        case 'b':
        case 'D':
            fprintf(stderr, "sudo: -%c is not supported in an airlock sandbox\n", c);
            return 1;
        default:
            if (optopt && strchr("ugD", optopt))
                fprintf(stderr, "sudo: option requires an argument -- '%c'\n", optopt);
            else if (optopt && optopt < 256)
                fprintf(stderr, "sudo: invalid option -- '%c'\n", optopt);
            else
                fprintf(stderr, "sudo: unrecognized option '%s'\n", argv[optind - 1]);
            sudo_usage(stderr);
            return 1;
        }
    }
    if (login && shell) {
        fputs("sudo: you may not specify both the -i and -s options\n", stderr);
        return 1;
    }
    int first = optind;
    /* NAME=value words before the command set variables for it. */
    while (first < argc) {
        const char *w = argv[first], *eq = strchr(w, '=');
        if (!eq || eq == w || w[0] == '-')
            break;
        bool name = true;
        for (const char *p = w; p < eq && name; p++)
            name = *p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                   (p > w && *p >= '0' && *p <= '9');
        if (!name)
            break;
        sudo_add(&q, AGENT_SUDO_T_SETENV, w);
        first++;
    }
    bool has_cmd = first < argc;
    if (forget && !has_cmd && !validate && !list)
        return 0; /* -k / -K: there are no cached credentials */
    if (!has_cmd && !login && !shell && !validate && !list) {
        sudo_usage(stderr);
        return 1;
    }
    char mode = validate || list ? AGENT_SUDO_VALIDATE
                : login          ? AGENT_SUDO_LOGIN
                : shell          ? AGENT_SUDO_SHELL
                                 : AGENT_SUDO_RUN;
    char m[2] = {mode, 0};
    sudo_add(&q, AGENT_SUDO_T_MODE, m);
    if (user)
        sudo_add(&q, AGENT_SUDO_T_USER, user);
    if (preserve)
        sudo_add(&q, AGENT_SUDO_T_PRESERVE, "");
    if (mode != AGENT_SUDO_VALIDATE) {
        for (int i = first; i < argc; i++)
            sudo_add(&q, AGENT_SUDO_T_ARG, argv[i]);
        for (char **e = environ; e && *e; e++)
            sudo_add(&q, AGENT_SUDO_T_ENV, *e);
    }

    /* Signals are taken from here on: passed on once the command runs. */
    sigset_t sigs;
    sigemptyset(&sigs);
    for (size_t i = 0; i < sizeof sudo_signals / sizeof sudo_signals[0]; i++)
        sigaddset(&sigs, sudo_signals[i]);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0)
        sudo_die("signalfd: %s", strerror(errno));

    int sock = sudo_connect();
    int fds[AGENT_SUDO_NFDS] = {sudo_std_fd(0), sudo_std_fd(1), sudo_std_fd(2), -1};
    fds[3] = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fds[3] < 0)
        fds[3] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fds[3] < 0)
        sudo_die("cannot open the working directory: %s", strerror(errno));
    sudo_send_request(sock, &q, fds);
    free(q.buf);
    close(fds[3]);
    if (mode != AGENT_SUDO_VALIDATE)
        sudo_wait(sock, sfd);

    /* -v / -l: the agent answers EXIT 0 when allowed, REFUSE otherwise. */
    uint8_t hdr[AGENT_SUDO_HDR], type;
    uint32_t len;
    char body[AGENT_SUDO_MAX_MSG + 1];
    if (sudo_read_all(sock, hdr, sizeof hdr) < 0 || agent_sudo_hdr_parse(hdr, &type, &len) < 0 ||
        sudo_read_all(sock, body, len) < 0)
        sudo_die("%s", "the airlock agent ended the session without an answer");
    body[len] = '\0';
    if (type == AGENT_SUDO_F_REFUSE)
        sudo_die("%s", body);
    if (type != AGENT_SUDO_F_EXIT || agent_sudo_u32((uint8_t *)body) != 0)
        sudo_die("%s", "unexpected message from the airlock agent");
    if (!list)
        return 0;
    if (has_cmd) {
        char path[4096];
        if (sudo_find(argv[first], path, sizeof path) < 0)
            sudo_die("%s: command not found", argv[first]);
        printf("%s", path);
        for (int i = first + 1; i < argc; i++)
            printf(" %s", argv[i]);
        putchar('\n');
        return 0;
    }
    struct passwd *pw = getpwuid(getuid());
    char host[256] = "sandbox";
    gethostname(host, sizeof host - 1);
    printf("User %s may run the following commands on %s:\n    (ALL : ALL) NOPASSWD: ALL\n",
           pw ? pw->pw_name : "?", host);
    return 0;
}
