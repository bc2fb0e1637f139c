/* tests/kvm/payload/l1_tool: helpers the L1 scenarios run next to the VMM (static).
 *
 *   l1_tool echo SOCKET BYTES    connects to the VMM's unix socket (bridged to the guest's
 *                                vsock echo server), sends BYTES of a pattern while reading
 *                                the echo, half-closes, and checks every byte came back.
 *                                Retries the connection while the guest is not listening.
 *   l1_tool cmd SOCKET LINE      sends one line, prints the reply (retries likewise); used
 *                                for the guest's state server and the VMM's control socket.
 *   l1_tool fastcmd SOCKET LINE  the same, retrying every 5 ms (benchmarks).
 *   l1_tool listen-exec PATH FD PROG ARGS...   listening unix socket PATH as fd FD, exec.
 *   l1_tool http SOCKET METHOD TARGET [BODY|-] [TYPE] [OUT]   one HTTP request (see below).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Every wait ends at one deadline, $L1_TOOL_TIMEOUT seconds (default 180) after the tool
 * started: the connection retries, connect() itself (non-blocking: a listener whose
 * backlog is full, because nobody accepts, is retried rather than waited on forever), every
 * write and every read. "No answer within T" is then an answer (e.g. from a paused VM), and
 * a scenario fails and says what it waited for before the harness ends a silent L1 (after
 * 300 s). The default is L1 wall time: a guest's boot to its agent, 5-20 s on an idle host,
 * took more than 90 s at a load of 20 on 2 cores. */
static long long l1__deadline_ms;
static long long l1__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
static int l1__timeout_s(void)
{
    const char *t = getenv("L1_TOOL_TIMEOUT");
    return t && atoi(t) > 0 ? atoi(t) : 180;
}
/* Milliseconds left before the deadline (0 once it has passed). */
static int l1__left_ms(void)
{
    if (!l1__deadline_ms)
        l1__deadline_ms = l1__now_ms() + 1000LL * l1__timeout_s();
    long long left = l1__deadline_ms - l1__now_ms();
    return left > 0 ? (int)left : 0;
}
static int l1__expired(void)
{
    return l1__left_ms() == 0;
}
/* Sleeps us microseconds, or less if the deadline comes first. */
static void l1__pause(unsigned us)
{
    long long left_us = 1000LL * l1__left_ms();
    usleep(left_us < us ? (unsigned)left_us : us);
}

/* A non-blocking connection to the unix socket at path, or -1 with errno (EAGAIN: the
 * listener's backlog is full). */
static int l1__connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* What the tool waits for, for its progress lines. */
static char l1__what[256];

/* Waits for events on fd until the deadline: 1 ready, 0 deadline (errno ETIMEDOUT). A wait
 * of more than two minutes (a longer $L1_TOOL_TIMEOUT) says once a minute that it goes on,
 * so that the harness, which ends an L1 whose console stays silent, does not end it. */
static int l1__wait(int fd, short events)
{
    for (;;) {
        int left = l1__left_ms(), slice = left;
        if (l1__timeout_s() > 120 && slice > 60000)
            slice = 60000;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, slice);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
        if (l1__expired()) {
            errno = ETIMEDOUT;
            return 0;
        }
        if (n == 0 && slice < left)
            fprintf(stderr, "l1_tool: still waiting for %s (%d s left)\n", l1__what,
                    l1__left_ms() / 1000);
    }
}

/* Writes all n bytes before the deadline: 0, or -1 with errno. */
static int l1__send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            return -1;
        } else if (l1__wait(fd, POLLOUT) <= 0) {
            return -1;
        }
    }
    return 0;
}

/* One read before the deadline: bytes, 0 at EOF, -1 with errno (ETIMEDOUT: deadline). */
static ssize_t l1__recv(int fd, void *buf, size_t n)
{
    for (;;) {
        ssize_t r = read(fd, buf, n);
        if (r >= 0 || (errno != EAGAIN && errno != EINTR))
            return r;
        if (l1__wait(fd, POLLIN) <= 0)
            return -1;
    }
}

static unsigned char pattern(long i)
{
    return (unsigned char)((i * 7 + (i >> 8)) & 0xff);
}

/* What the last attempt of a retry loop ended with, for the message when the loop gives up. */
static char l1__last[160] = "no attempt before the deadline";
static int l1__attempts;

static int echo_once(const char *path, long bytes, int *retry)
{
    *retry = 0;
    l1__attempts++;
    int fd = l1__connect(path);
    if (fd < 0) {
        snprintf(l1__last, sizeof l1__last, "connect: %s", strerror(errno));
        *retry = 1;
        return -1;
    }
    long sent = 0, got = 0;
    int wr_closed = bytes == 0;
    if (wr_closed)
        shutdown(fd, SHUT_WR);
    static unsigned char out[65536], in[65536];
    while (1) {
        struct pollfd p = {.fd = fd, .events = POLLIN | (wr_closed ? 0 : POLLOUT)};
        int n = poll(&p, 1, l1__left_ms());
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "l1_tool: echo %ld bytes through %s: %s (sent %ld, echoed %ld)\n",
                    bytes, path, n == 0 ? "deadline reached" : strerror(errno), sent, got);
            close(fd);
            return -1;
        }
        if (!wr_closed && (p.revents & POLLOUT)) {
            long k = bytes - sent < (long)sizeof out ? bytes - sent : (long)sizeof out;
            for (long i = 0; i < k; i++)
                out[i] = pattern(sent + i);
            ssize_t w = write(fd, out, (size_t)k);
            if (w > 0)
                sent += w;
            if (sent == bytes) {
                shutdown(fd, SHUT_WR);
                wr_closed = 1;
            }
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = read(fd, in, sizeof in);
            if (r == 0)
                break;
            if (r < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    continue;
                if (errno == ECONNRESET && got == 0) {
                    close(fd);
                    snprintf(l1__last, sizeof l1__last, "reset before any byte came back");
                    *retry = 1; /* refused before the guest listened */
                    return -1;
                }
                fprintf(stderr, "l1_tool: read: %s\n", strerror(errno));
                close(fd);
                return -1;
            }
            for (ssize_t i = 0; i < r; i++) {
                if (in[i] != pattern(got + i)) {
                    fprintf(stderr, "l1_tool: byte %ld differs\n", got + i);
                    close(fd);
                    return -1;
                }
            }
            got += r;
        }
    }
    close(fd);
    if (got == 0 && sent == 0 && bytes > 0) {
        snprintf(l1__last, sizeof l1__last, "closed before anything was sent");
        *retry = 1; /* reset before anything happened: guest not listening yet */
        return -1;
    }
    if (got != bytes) {
        fprintf(stderr, "l1_tool: sent %ld, echoed %ld\n", sent, got);
        snprintf(l1__last, sizeof l1__last, "sent %ld, echoed %ld", sent, got);
        if (got == 0)
            *retry = 1;
        return -1;
    }
    printf("l1_tool: echoed %ld bytes\n", got);
    return 0;
}

/* One request line, the whole reply printed. Retries every interval_us while the peer
 * resets or closes without answering (guest not listening yet), until the deadline. */
static int cmd(const char *path, const char *line, unsigned interval_us)
{
    snprintf(l1__what, sizeof l1__what, "a reply from %s to '%s'", path, line);
    for (; !l1__expired(); l1__pause(interval_us)) {
        l1__attempts++;
        int fd = l1__connect(path);
        if (fd < 0) {
            snprintf(l1__last, sizeof l1__last, "connect: %s", strerror(errno));
            continue;
        }
        char req[512];
        int n = snprintf(req, sizeof req, "%s\n", line);
        if (l1__send_all(fd, req, (size_t)n) < 0) {
            snprintf(l1__last, sizeof l1__last, "connected; sending the request: %s",
                     strerror(errno));
            close(fd);
            continue;
        }
        char buf[4096];
        size_t got = 0;
        ssize_t r = 0;
        while (got < sizeof buf - 1 && (r = l1__recv(fd, buf + got, sizeof buf - 1 - got)) > 0)
            got += (size_t)r;
        int e = errno;
        close(fd);
        if (got == 0) {
            snprintf(l1__last, sizeof l1__last, "connected, request sent; %s",
                     r == 0 ? "closed without a reply" : strerror(e));
            continue;
        }
        buf[got] = 0;
        fputs(buf, stdout);
        return 0;
    }
    fprintf(stderr, "l1_tool: no answer from %s to '%s' within %d s (%d attempts; the last: %s)\n",
            path, line, l1__timeout_s(), l1__attempts, l1__last);
    return 1;
}

/* http SOCKET METHOD TARGET [BODYFILE|-] [CONTENT-TYPE] [OUTFILE]: one HTTP/1.1 request
 * (Connection: close) over the unix socket; prints "status N" and writes the de-chunked
 * body to OUTFILE (default: stdout after the status). A content type ending in
 * "connect+json" wraps the body in one Connect envelope. Retries while nobody answers. */
static int http(int argc, char **argv)
{
    const char *path = argv[0], *method = argv[1], *target = argv[2];
    const char *bodyf = argc > 3 && strcmp(argv[3], "-") ? argv[3] : NULL;
    const char *ctype = argc > 4 ? argv[4] : "application/octet-stream";
    const char *outf = argc > 5 ? argv[5] : NULL;
    static unsigned char body[8 << 20], resp[16 << 20];
    size_t blen = 0;
    if (bodyf) {
        FILE *f = fopen(bodyf, "rb");
        if (!f) {
            perror(bodyf);
            return 1;
        }
        blen = fread(body + 5, 1, sizeof body - 5, f);
        fclose(f);
    }
    const char *sfx = "connect+json";
    size_t cl = strlen(ctype), sl = strlen(sfx);
    int envelope = cl >= sl && strcmp(ctype + cl - sl, sfx) == 0;
    unsigned char *b = body + 5;
    if (envelope) {
        body[0] = 0;
        body[1] = (unsigned char)(blen >> 24);
        body[2] = (unsigned char)(blen >> 16);
        body[3] = (unsigned char)(blen >> 8);
        body[4] = (unsigned char)blen;
        b = body;
        blen += 5;
    }
    snprintf(l1__what, sizeof l1__what, "a response from %s to %s %s", path, method, target);
    for (; !l1__expired(); l1__pause(100000)) {
        l1__attempts++;
        int fd = l1__connect(path);
        if (fd < 0) {
            snprintf(l1__last, sizeof l1__last, "connect: %s", strerror(errno));
            continue;
        }
        char hdr[1536];
        const char *extra = getenv("L1_TOOL_HEADER"); /* one more header line, e.g. a token */
        int n = snprintf(hdr, sizeof hdr,
                         "%s %s HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n"
                         "Connect-Protocol-Version: 1\r\nContent-Type: %s\r\n%s%s"
                         "Content-Length: %zu\r\n\r\n",
                         method, target, ctype, extra ? extra : "", extra ? "\r\n" : "", blen);
        if (l1__send_all(fd, hdr, (size_t)n) < 0 || (blen && l1__send_all(fd, b, blen) < 0)) {
            snprintf(l1__last, sizeof l1__last, "connected; sending the request: %s",
                     strerror(errno));
            close(fd);
            continue;
        }
        size_t got = 0;
        ssize_t r = 0;
        while (got < sizeof resp - 1 && (r = l1__recv(fd, resp + got, sizeof resp - 1 - got)) > 0)
            got += (size_t)r;
        int e = errno;
        close(fd);
        if (got == 0) {
            snprintf(l1__last, sizeof l1__last, "connected, request sent; %s",
                     r == 0 ? "closed without a reply" : strerror(e));
            continue;
        }
        if (r < 0) {
            fprintf(stderr, "l1_tool: %s %s on %s: the response stopped after %zu bytes: %s\n",
                    method, target, path, got, strerror(e));
            return 1;
        }
        resp[got] = 0;
        char *eoh = strstr((char *)resp, "\r\n\r\n");
        if (!eoh) {
            fprintf(stderr, "l1_tool: malformed response\n");
            return 1;
        }
        int status = atoi((char *)resp + 9);
        printf("status %d\n", status);
        unsigned char *p = (unsigned char *)eoh + 4, *end = resp + got;
        FILE *o = outf ? fopen(outf, "wb") : stdout;
        if (!o) {
            perror(outf);
            return 1;
        }
        *eoh = 0;
        if (strcasestr((char *)resp, "transfer-encoding: chunked")) {
            while (p < end) {
                unsigned long len = strtoul((char *)p, NULL, 16);
                unsigned char *data = (unsigned char *)strstr((char *)p, "\r\n");
                if (!data || len == 0)
                    break;
                data += 2;
                if (data + len > end)
                    len = (unsigned long)(end - data);
                fwrite(data, 1, len, o);
                p = data + len + 2;
            }
        } else {
            fwrite(p, 1, (size_t)(end - p), o);
        }
        if (outf)
            fclose(o);
        else
            fflush(o);
        return 0;
    }
    fprintf(stderr, "l1_tool: no answer from %s to %s %s within %d s (%d attempts; the last: %s)\n",
            path, method, target, l1__timeout_s(), l1__attempts, l1__last);
    return 1;
}

/* listen-exec PATH FD PROG ARGS...: a listening unix socket at PATH as descriptor FD, then
 * exec PROG (how a supervisor hands the agent channel to the VMM). */
static int listen_exec(char **argv)
{
    const char *path = argv[0];
    int want = atoi(argv[1]);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    unlink(path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 16) < 0) {
        perror("l1_tool: listen");
        return 1;
    }
    if (fd != want) {
        dup2(fd, want);
        close(fd);
    }
    execv(argv[2], argv + 2);
    perror("l1_tool: exec");
    return 1;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* a peer that closes early is an answer, not a crash */
    if (argc >= 5 && strcmp(argv[1], "http") == 0)
        return http(argc - 2, argv + 2);
    if (argc >= 5 && strcmp(argv[1], "listen-exec") == 0)
        return listen_exec(argv + 2);
    if (argc == 4 && strcmp(argv[1], "cmd") == 0)
        return cmd(argv[2], argv[3], 100000);
    if (argc == 4 && strcmp(argv[1], "fastcmd") == 0) /* for timing: retry every 5 ms */
        return cmd(argv[2], argv[3], 5000);
    if (argc == 4 && strcmp(argv[1], "echo") == 0) {
        long bytes = atol(argv[3]);
        for (; !l1__expired(); l1__pause(100000)) {
            int retry;
            if (echo_once(argv[2], bytes, &retry) == 0)
                return 0;
            if (!retry)
                return 1;
        }
        fprintf(stderr, "l1_tool: no echo from %s within %d s (%d attempts; the last: %s)\n",
                argv[2], l1__timeout_s(), l1__attempts, l1__last);
        return 1;
    }
    fprintf(stderr, "usage: l1_tool echo SOCKET BYTES\n");
    return 2;
}
