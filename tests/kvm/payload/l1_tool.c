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

/* Every retry loop ends at a wall-clock deadline (90 s, or $L1_TOOL_TIMEOUT seconds, which
 * also bounds each read: "no answer within T" is then an answer, e.g. from a paused VM),
 * so that a scenario fails and shows the guest's console well before the harness kills L1. */
static time_t l1__deadline;
static int l1__timeout(void)
{
    const char *t = getenv("L1_TOOL_TIMEOUT");
    return t && atoi(t) > 0 ? atoi(t) : 0;
}
static int l1__expired(void)
{
    if (!l1__deadline)
        l1__deadline = time(NULL) + (l1__timeout() ? l1__timeout() : 90);
    return time(NULL) > l1__deadline;
}
static void l1__read_timeout(int fd)
{
    if (l1__timeout()) {
        struct timeval tv = {.tv_sec = l1__timeout()};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
}

static unsigned char pattern(long i)
{
    return (unsigned char)((i * 7 + (i >> 8)) & 0xff);
}

static int echo_once(const char *path, long bytes, int *retry)
{
    *retry = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        *retry = 1;
        return -1;
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    long sent = 0, got = 0;
    int wr_closed = bytes == 0;
    if (wr_closed)
        shutdown(fd, SHUT_WR);
    static unsigned char out[65536], in[65536];
    time_t start = time(NULL);
    while (1) {
        struct pollfd p = {.fd = fd, .events = POLLIN | (wr_closed ? 0 : POLLOUT)};
        if (poll(&p, 1, 1000) < 0)
            return -1;
        if (time(NULL) - start > 60) {
            fprintf(stderr, "l1_tool: timeout (sent %ld, got %ld)\n", sent, got);
            return -1;
        }
        if (!wr_closed && (p.revents & POLLOUT)) {
            long n = bytes - sent < (long)sizeof out ? bytes - sent : (long)sizeof out;
            for (long i = 0; i < n; i++)
                out[i] = pattern(sent + i);
            ssize_t w = write(fd, out, (size_t)n);
            if (w > 0)
                sent += w;
            if (sent == bytes) {
                shutdown(fd, SHUT_WR);
                wr_closed = 1;
            }
        }
        if (p.revents & (POLLIN | POLLHUP)) {
            ssize_t r = read(fd, in, sizeof in);
            if (r == 0)
                break;
            if (r < 0) {
                if (errno == EAGAIN)
                    continue;
                if (errno == ECONNRESET && got == 0) {
                    close(fd);
                    *retry = 1; /* refused before the guest listened */
                    return -1;
                }
                fprintf(stderr, "l1_tool: read: %s\n", strerror(errno));
                return -1;
            }
            for (ssize_t i = 0; i < r; i++) {
                if (in[i] != pattern(got + i)) {
                    fprintf(stderr, "l1_tool: byte %ld differs\n", got + i);
                    return -1;
                }
            }
            got += r;
        }
    }
    close(fd);
    if (got == 0 && sent == 0 && bytes > 0) {
        *retry = 1; /* reset before anything happened: guest not listening yet */
        return -1;
    }
    if (got != bytes) {
        fprintf(stderr, "l1_tool: sent %ld, echoed %ld\n", sent, got);
        if (got == 0)
            *retry = 1;
        return -1;
    }
    printf("l1_tool: echoed %ld bytes\n", got);
    return 0;
}

/* One request line, the whole reply printed. Retries every interval_us while the peer
 * resets or closes without answering (guest not listening yet). */
static int cmd(const char *path, const char *line, int retries, unsigned interval_us)
{
    for (int attempt = 0; attempt <= retries && !l1__expired(); attempt++) {
        if (attempt)
            usleep(interval_us);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            close(fd);
            continue;
        }
        char req[512];
        int n = snprintf(req, sizeof req, "%s\n", line);
        if (write(fd, req, (size_t)n) != n) {
            close(fd);
            continue;
        }
        char buf[4096];
        size_t got = 0;
        for (;;) {
            /* Bounded by the deadline: a peer that never answers nor closes (a connection
             * request the guest left pending) ends the wait, not the harness's timeout. */
            struct pollfd p = {.fd = fd, .events = POLLIN};
            long left = (long)(l1__deadline - time(NULL));
            if (poll(&p, 1, (int)(left > 0 ? left : 0) * 1000) <= 0) {
                fprintf(stderr, "l1_tool: no reply from %s to '%s' before the deadline\n", path,
                        line);
                break;
            }
            ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        close(fd);
        if (got == 0)
            continue;
        buf[got] = 0;
        fputs(buf, stdout);
        return 0;
    }
    fprintf(stderr, "l1_tool: no answer from %s to '%s'\n", path, line);
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
    for (int attempt = 0; attempt < 1200 && !l1__expired(); attempt++) {
        if (attempt)
            usleep(100000);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            close(fd);
            continue;
        }
        l1__read_timeout(fd);
        char hdr[1536];
        const char *extra = getenv("L1_TOOL_HEADER"); /* one more header line, e.g. a token */
        int n = snprintf(hdr, sizeof hdr,
                         "%s %s HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n"
                         "Connect-Protocol-Version: 1\r\nContent-Type: %s\r\n%s%s"
                         "Content-Length: %zu\r\n\r\n",
                         method, target, ctype, extra ? extra : "", extra ? "\r\n" : "", blen);
        if (write(fd, hdr, (size_t)n) != n || (blen && write(fd, b, blen) != (ssize_t)blen)) {
            close(fd);
            continue;
        }
        size_t got = 0;
        for (;;) {
            ssize_t r = read(fd, resp + got, sizeof resp - 1 - got);
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        close(fd);
        if (got == 0)
            continue;
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
    fprintf(stderr, "l1_tool: no answer from %s\n", path);
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
        return cmd(argv[2], argv[3], 1200, 100000); /* up to 2 min: slow nested boots under load */
    if (argc == 4 && strcmp(argv[1], "fastcmd") == 0) /* for timing: retry every 5 ms */
        return cmd(argv[2], argv[3], 24000, 5000);
    if (argc == 4 && strcmp(argv[1], "echo") == 0) {
        long bytes = atol(argv[3]);
        for (int i = 0; i < 1200 && !l1__expired(); i++) {
            int retry;
            if (echo_once(argv[2], bytes, &retry) == 0)
                return 0;
            if (!retry)
                return 1;
            usleep(100000);
        }
        fprintf(stderr, "l1_tool: gave up connecting to %s\n", argv[2]);
        return 1;
    }
    fprintf(stderr, "usage: l1_tool echo SOCKET BYTES\n");
    return 2;
}
