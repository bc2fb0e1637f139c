/* tests/integration/jail_testinit: a stand-in for airlock-agent in the jail tests.
 *
 * Keeps the agent contract (see vmm/README.md): PID 1 of the sandbox, the listening socket
 * in AIRLOCK_AGENT_LISTEN_FD (marked close-on-exec), one JSON object on AIRLOCK_AGENT_INIT_FD
 * read to EOF, logs on stderr, and every command it runs has no capabilities, an empty
 * bounding set and no_new_privs. Statically linked so any template can run it.
 *
 * HTTP, one request per connection (each served by a forked handler):
 *   GET  /health                   204
 *   GET  /init                     200, the init object as received
 *   POST /run?user=U&timeout_ms=N  body: a shell command run as U (default "user") with
 *                                  /bin/sh -c; 200, X-Exit-Code: <status or -signal>, body:
 *                                  stdout+stderr (the first 4 MiB; the rest is drained)
 *   POST /stderr?bytes=N           writes N bytes to its stderr (log capture tests)
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OUT_MAX (4u << 20)

static char init_json[1 << 20];
static size_t init_len;

static void ti_log(const char *msg)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "jail_testinit: %s\n", msg);
    if (n > 0 && write(2, buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1)) < 0)
        return;
}

static int env_fd(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return -1;
    return atoi(v);
}

static void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void reply(int fd, int status, const char *reason, const char *extra, const char *body,
                  size_t len)
{
    char h[512];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
                     "X-Airlock-Testinit: 1\r\n%s\r\n",
                     status, reason, len, extra ? extra : "");
    write_all(fd, h, (size_t)n);
    if (len)
        write_all(fd, body, len);
}

static const char *query_get(const char *q, const char *key, char *out, size_t outlen)
{
    size_t kl = strlen(key);
    for (const char *p = q; p && *p;) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = strcspn(v, "&");
            if (n >= outlen)
                n = outlen - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return out;
        }
        p = strchr(p, '&');
        if (p)
            p++;
    }
    return NULL;
}

/* Looks a user up in /etc/passwd (no NSS in a static binary). */
static int lookup_user(const char *name, uid_t *uid, gid_t *gid, char *home, size_t hl)
{
    FILE *f = fopen("/etc/passwd", "re");
    if (!f)
        return -1;
    char line[1024];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        char *fields[7] = {0};
        char *p = line;
        for (int i = 0; i < 7 && p; i++) {
            fields[i] = p;
            p = strchr(p, ':');
            if (p)
                *p++ = '\0';
        }
        if (!fields[5] || strcmp(fields[0], name) != 0)
            continue;
        *uid = (uid_t)strtoul(fields[2], NULL, 10);
        *gid = (gid_t)strtoul(fields[3], NULL, 10);
        snprintf(home, hl, "%s", fields[5]);
        rc = 0;
        break;
    }
    fclose(f);
    return rc;
}

static void drop_privileges(uid_t uid, gid_t gid)
{
    for (int c = 0; c < 64; c++)
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno == EINVAL)
            break;
    if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
        dprintf(2, "jail_testinit: cannot become %u:%u: %s\n", uid, gid, strerror(errno));
        _exit(120);
    }
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capset, &h, d) < 0)
        _exit(121);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        _exit(122);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void do_run(int cfd, const char *query, char *cmd)
{
    char user[64] = "user", tmo[32] = "30000", home[256] = "/";
    query_get(query, "user", user, sizeof user);
    query_get(query, "timeout_ms", tmo, sizeof tmo);
    uid_t uid;
    gid_t gid;
    if (lookup_user(user, &uid, &gid, home, sizeof home) < 0) {
        reply(cfd, 404, "Not Found", NULL, "no such user\n", 13);
        return;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        reply(cfd, 500, "Error", NULL, "pipe\n", 5);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        dup2(p[1], 1);
        dup2(p[1], 2);
        /* Nothing of the agent may leak into user processes. */
        syscall(SYS_close_range, 3u, ~0u, 0);
        signal(SIGPIPE, SIG_DFL);
        drop_privileges(uid, gid);
        if (chdir(home) < 0 && chdir("/") < 0)
            _exit(123);
        char e_home[300], e_user[80];
        snprintf(e_home, sizeof e_home, "HOME=%s", home);
        snprintf(e_user, sizeof e_user, "USER=%s", user);
        char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", e_home,
                        e_user, "LANG=C.UTF-8", NULL};
        char *argv[] = {"sh", "-c", cmd, NULL};
        execve("/bin/sh", argv, envp);
        dprintf(2, "jail_testinit: execve /bin/sh: %s\n", strerror(errno));
        _exit(127);
    }
    close(p[1]);
    char *out = malloc(OUT_MAX);
    size_t len = 0;
    long long deadline = now_ms() + atoll(tmo);
    bool killed = false;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0 && !killed) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            killed = true;
        }
        struct pollfd pf = {p[0], POLLIN, 0};
        int r = poll(&pf, 1, killed ? 100 : (int)(left < 100 ? left : 100));
        if (r < 0 && errno != EINTR)
            break;
        char buf[65536];
        ssize_t n = read(p[0], buf, sizeof buf);
        if (n > 0) {
            size_t take = len + (size_t)n <= OUT_MAX ? (size_t)n : OUT_MAX - len;
            if (out)
                memcpy(out + len, buf, take);
            len += take;
            continue;
        }
        if (n == 0)
            break;
        if (killed && r == 0)
            break;
    }
    close(p[0]);
    int st = 0;
    if (killed) {
        kill(-pid, SIGKILL);
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    char extra[64];
    snprintf(extra, sizeof extra, "X-Exit-Code: %d\r\n", code);
    reply(cfd, 200, "OK", extra, out ? out : "", out ? len : 0);
    free(out);
}

static void handle(int cfd)
{
    static char req[1 << 16];
    size_t len = 0;
    char *eoh = NULL;
    while (!eoh && len < sizeof req - 1) {
        ssize_t n = read(cfd, req + len, sizeof req - 1 - len);
        if (n <= 0)
            return;
        len += (size_t)n;
        req[len] = '\0';
        eoh = strstr(req, "\r\n\r\n");
    }
    if (!eoh)
        return;
    *eoh = '\0';
    char *body = eoh + 4;
    size_t have = len - (size_t)(body - req);
    char method[16], target[1024];
    if (sscanf(req, "%15s %1023s", method, target) != 2)
        return;
    size_t clen = 0;
    for (char *h = strstr(req, "\r\n"); h; h = strstr(h + 2, "\r\n")) {
        if (strncasecmp(h + 2, "Content-Length:", 15) == 0)
            clen = strtoul(h + 17, NULL, 10);
    }
    if (clen > sizeof req / 2) {
        reply(cfd, 413, "Too Large", NULL, NULL, 0);
        return;
    }
    char *b = malloc(clen + 1);
    memcpy(b, body, have < clen ? have : clen);
    size_t got = have < clen ? have : clen;
    while (got < clen) {
        ssize_t n = read(cfd, b + got, clen - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    b[got] = '\0';
    char *query = strchr(target, '?');
    if (query)
        *query++ = '\0';
    else
        query = "";
    if (strcmp(method, "GET") == 0 && strcmp(target, "/health") == 0) {
        reply(cfd, 204, "No Content", NULL, NULL, 0);
    } else if (strcmp(method, "GET") == 0 && strcmp(target, "/init") == 0) {
        reply(cfd, 200, "OK", "Content-Type: application/json\r\n", init_json, init_len);
    } else if (strcmp(method, "POST") == 0 && strcmp(target, "/run") == 0) {
        do_run(cfd, query, b);
    } else if (strcmp(method, "POST") == 0 && strcmp(target, "/stderr") == 0) {
        char nb[32] = "0";
        query_get(query, "bytes", nb, sizeof nb);
        unsigned long long n = strtoull(nb, NULL, 10);
        static char line[4096];
        memset(line, 'x', sizeof line);
        line[sizeof line - 1] = '\n';
        while (n) {
            size_t k = n < sizeof line ? (size_t)n : sizeof line;
            write_all(2, line, k);
            n -= k;
        }
        reply(cfd, 204, "No Content", NULL, NULL, 0);
    } else {
        reply(cfd, 404, "Not Found", NULL, NULL, 0);
    }
    free(b);
}

static volatile sig_atomic_t stop;

static void on_term(int s)
{
    (void)s;
    stop = 1;
}

int main(void)
{
    int lfd = env_fd("AIRLOCK_AGENT_LISTEN_FD");
    if (lfd < 0) {
        ti_log("AIRLOCK_AGENT_LISTEN_FD is not set");
        return 2;
    }
    fcntl(lfd, F_SETFD, FD_CLOEXEC);
    int ifd = env_fd("AIRLOCK_AGENT_INIT_FD");
    if (ifd >= 0) {
        for (;;) {
            ssize_t n = read(ifd, init_json + init_len, sizeof init_json - 1 - init_len);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            init_len += (size_t)n;
        }
        close(ifd);
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    ti_log(getpid() == 1 ? "serving as pid 1" : "serving (not pid 1)");
    while (!stop) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        struct pollfd pf = {lfd, POLLIN, 0};
        int r = poll(&pf, 1, 100);
        if (r <= 0)
            continue;
        int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd < 0)
            continue;
        pid_t h = fork();
        if (h == 0) {
            close(lfd);
            signal(SIGTERM, SIG_DFL);
            handle(cfd);
            _exit(0);
        }
        close(cfd);
    }
    ti_log("SIGTERM: exiting");
    return 0;
}
