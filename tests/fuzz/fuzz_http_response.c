/* tests/fuzz/fuzz_http_response: the asynchronous client's response path under arbitrary
 * bytes (the control plane reads responses from agents inside hostile sandboxes).
 *
 * Each input is the whole answer of a "server": the harness listens on a unix socket,
 * starts a request (the first input byte picks GET, HEAD or a streamed POST, and whether
 * the body reader pauses), accepts the client's connection, reads its request, writes the
 * input and closes. Checked after every input: no crash or sanitizer report, on_done
 * called exactly once, on_data never after on_done, and the request and its connection
 * released.
 */
#include "common/http.h"
#include "common/http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t fz_loop;
static int fz_lfd = -1;
static char fz_target[160];

struct fz_req {
    struct al_http_creq *c;
    int done;
    bool pause;
    size_t body;
    int status;
};

static void fz_die(const char *what)
{
    fprintf(stderr, "fuzz_http_response: %s\n", what);
    abort();
}

static char fz_path[108];

static void fz_cleanup(void)
{
    unlink(fz_path);
}

static void fz_init(void)
{
    if (uv_loop_init(&fz_loop) != 0)
        fz_die("uv_loop_init");
    char *path = fz_path;
    snprintf(fz_path, sizeof fz_path, "/tmp/al-fuzz-resp-%d.sock", (int)getpid());
    unlink(path);
    atexit(fz_cleanup);
    fz_lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    if (fz_lfd < 0 || bind(fz_lfd, (struct sockaddr *)&sun, sizeof sun) < 0 ||
        listen(fz_lfd, 16) < 0)
        fz_die("listen");
    snprintf(fz_target, sizeof fz_target, "unix:%s", path);
}

static int fz_on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                          size_t n, void *arg)
{
    (void)c;
    struct fz_req *r = arg;
    if (r->done)
        fz_die("on_response after on_done");
    if (status < 200 || status > 599)
        fz_die("status outside 200..599 delivered (1xx must be skipped)");
    for (size_t i = 0; i < n; i++)
        if (!h[i].name[0] || !h[i].value)
            fz_die("header without a name");
    r->status = status;
    return 0;
}

static int fz_on_data(struct al_http_creq *c, const char *d, size_t len, void *arg)
{
    struct fz_req *r = arg;
    (void)d;
    if (r->done)
        fz_die("on_data after on_done");
    r->body += len;
    if (r->pause) {
        if (len % 2)
            al_http_creq_resume(c); /* a resume from inside cancels the pause */
        return 1;                   /* otherwise the harness resumes after a loop turn */
    }
    return 0;
}

static void fz_on_done(struct al_http_creq *c, int err, void *arg)
{
    (void)c;
    (void)err;
    struct fz_req *r = arg;
    r->done++;
    r->c = NULL;
}

static void fz_turn(struct fz_req *r)
{
    uv_run(&fz_loop, UV_RUN_NOWAIT);
    if (r->c)
        al_http_creq_resume(r->c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fz_lfd < 0)
        fz_init();
    uint8_t mode = size ? data[0] : 0;
    if (size) {
        data++;
        size--;
    }
    struct fz_req r = {.pause = (mode & 4) != 0};
    struct al_http_creq_opts o = {
        .target = fz_target,
        .method = (mode & 3) == 1   ? "HEAD"
                  : (mode & 3) == 2 ? "POST"
                                    : "GET",
        .path = "/fuzz",
        .stream_body = (mode & 3) == 2,
        .timeout_ms = 60000,
        .max_header_bytes = 4096,
        .on_response = fz_on_response,
        .on_data = fz_on_data,
        .on_done = fz_on_done,
        .arg = &r,
    };
    if (al_http_creq_start(&fz_loop, &o, &r.c) != 0)
        fz_die("creq_start");
    if (o.stream_body) {
        al_http_creq_write(r.c, "abc", 3);
        al_http_creq_end(r.c);
    }
    int fd = -1;
    for (int i = 0; i < 10000 && fd < 0; i++) {
        uv_run(&fz_loop, UV_RUN_NOWAIT);
        fd = accept4(fz_lfd, NULL, NULL, SOCK_CLOEXEC);
    }
    if (fd < 0)
        fz_die("the client never connected");
    int big = 1 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    /* Two halves, with a loop turn between them, so bodies arrive in pieces. */
    size_t sent = 0, half = size / 2;
    char sink[4096];
    for (int i = 0; i < 100000 && !r.done && sent < size; i++) {
        size_t upto = i == 0 ? half : size;
        ssize_t n = sent < upto ? send(fd, data + sent, upto - sent, MSG_NOSIGNAL) : 0;
        if (n > 0)
            sent += (size_t)n;
        else if (n < 0 && errno != EAGAIN)
            break; /* the client gave up (bad response): fine */
        (void)!recv(fd, sink, sizeof sink, 0);
        fz_turn(&r);
    }
    close(fd); /* EOF: ends close-delimited bodies, fails incomplete ones */
    for (int i = 0; i < 10000 && !r.done; i++)
        fz_turn(&r);
    for (int i = 0; i < 10 && (atomic_load(&http__live_creqs) || atomic_load(&http__live_cconns));
         i++)
        uv_run(&fz_loop, UV_RUN_NOWAIT);
    if (r.done != 1)
        fz_die("on_done not called exactly once");
    if (atomic_load(&http__live_creqs) || atomic_load(&http__live_cconns))
        fz_die("the request or its connection outlived on_done");
    return 0;
}
