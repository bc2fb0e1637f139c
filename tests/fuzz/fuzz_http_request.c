/* tests/fuzz/fuzz_http_request: the HTTP server's whole request path under arbitrary bytes.
 *
 * Each input is written into one end of a socketpair whose other end the server serves
 * (al_http_server_serve_fd), with handlers that exercise every body mode (buffered,
 * streamed with pauses, unclaimed), asynchronous answers, HEAD and error replies. The loop
 * runs until the server has nothing more to say, then the client side closes (a
 * disconnect at whatever stage the input left the connection in), and the loop runs until
 * the connection is gone. Checked after every input: no crash or sanitizer report, the
 * connection and every request released, and the output bounded by the input.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_INPUT (256 * 1024)

static uv_loop_t fz_loop;
static struct al_http_server *fz_srv;
static struct al_http_req *fz_paused; /* a streamed body waiting for the harness to resume */

static void fz_die(const char *what)
{
    fprintf(stderr, "fuzz_http_request: %s\n", what);
    abort();
}

/* ---- handlers ---------------------------------------------------------------------- */
static void fz_read_done(struct al_http_req *req, int err)
{
    if (err)
        return; /* the server answered (413/408/400) or the peer is gone */
    al_http_reply(req, 200, "application/octet-stream", req->body.data, req->body.len);
}

static int fz_stream_data(struct al_http_req *req, const char *d, size_t len)
{
    uintptr_t n = (uintptr_t)req->user;
    if (n == 0)
        al_http_resp_start(req, 200, NULL, 0, -1);
    req->user = (void *)(n + 1);
    al_http_resp_write(req, d, len);
    switch (n % 3) {
    case 1:
        fz_paused = req; /* the harness resumes it after the next loop turn */
        return 1;
    case 2:
        al_http_req_resume_body(req); /* a resume from inside cancels the pause */
        return 1;
    default:
        return 0;
    }
}

static void fz_stream_end(struct al_http_req *req, int err)
{
    if (fz_paused == req)
        fz_paused = NULL;
    if (err)
        return;
    if (!req->user)
        al_http_resp_start(req, 200, NULL, 0, -1);
    al_http_resp_end(req);
}

struct fz_async {
    uv_timer_t t;
    struct al_http_req *req;
};

static void fz_async_closed(uv_handle_t *h)
{
    free(h->data);
}

static void fz_async_fire(uv_timer_t *t)
{
    struct fz_async *a = t->data;
    al_http_reply_json(a->req, 202, json_pack("{s:s}", "path", a->req->path));
    uv_close((uv_handle_t *)t, fz_async_closed);
}

static void fz_async_gone(struct al_http_req *req)
{
    struct fz_async *a = req->user;
    uv_timer_stop(&a->t);
    uv_close((uv_handle_t *)&a->t, fz_async_closed);
}

static void fz_handler(struct al_http_req *req, void *ctx)
{
    (void)ctx;
    const char *p = req->path;
    /* Everything a handler may read must be sane. */
    if (!req->method || !req->target || !req->path || !req->query)
        fz_die("request without method/target/path/query");
    for (size_t i = 0; i < req->n_headers; i++)
        if (!req->headers[i].name[0] || !http__is_field_value(req->headers[i].value))
            fz_die("header with an empty name or a control character");
    char v[64];
    (void)al_http_query_get(req->query, "x", v, sizeof v);
    if (strncmp(p, "/read", 5) == 0) {
        if (al_http_req_read_body(req, 4096, fz_read_done) != 0)
            fz_die("read_body refused a fresh request");
    } else if (strncmp(p, "/stream", 7) == 0) {
        req->user = NULL;
        if (al_http_req_stream_body(req, fz_stream_data, fz_stream_end) != 0)
            fz_die("stream_body refused a fresh request");
    } else if (strncmp(p, "/async", 6) == 0) {
        struct fz_async *a = calloc(1, sizeof *a);
        a->req = req;
        uv_timer_init(req->loop, &a->t);
        a->t.data = a;
        req->user = a;
        al_http_req_on_close(req, fz_async_gone);
        uv_timer_start(&a->t, fz_async_fire, 0, 0);
    } else if (strncmp(p, "/head", 5) == 0) {
        al_http_resp_start(req, 200, (struct al_http_header[]){{"X-A", "b"}}, 1, 5);
        al_http_resp_write(req, "hello", 5);
        al_http_resp_end(req);
    } else if (strncmp(p, "/error", 6) == 0) {
        al_http_reply_error(req, 500, "failed on %s", p);
    } else {
        al_http_reply(req, 200, "text/plain", "ok", 2);
    }
}

static void fz_init(void)
{
    if (uv_loop_init(&fz_loop) != 0)
        fz_die("uv_loop_init");
    struct al_http_server_opts o = {
        .on_request = fz_handler,
        .server_name = "fuzz",
        .limits = {.max_header_bytes = 2048,
                   .max_body_bytes = 8192,
                   .max_headers = 32,
                   /* Deadlines never fire inside one input's short run. */
                   .header_timeout_ms = 600000,
                   .body_timeout_ms = 600000,
                   .idle_timeout_ms = 600000}};
    if (al_http_server_new(&fz_loop, &o, &fz_srv) != 0)
        fz_die("al_http_server_new");
}

/* FUZZ_HTTP_VERBOSE=1 prints what the server answered (to check the harness). */
static size_t fz_drain(int fd)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("FUZZ_HTTP_VERBOSE") != NULL;
    char buf[65536];
    size_t total = 0;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0)
            break;
        if (verbose)
            fprintf(stderr, "%.*s", (int)n, buf);
        total += (size_t)n;
    }
    return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fz_srv)
        fz_init();
    if (size > FUZZ_MAX_INPUT)
        size = FUZZ_MAX_INPUT;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        fz_die("socketpair");
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    struct al_error err = {0};
    if (al_http_server_serve_fd(fz_srv, sv[0], &err) != 0)
        fz_die(err.msg);

    /* Two halves, with a loop turn between them, so bodies arrive in pieces. */
    size_t sent = 0, out = 0, half = size / 2;
    int quiet = 0;
    fz_paused = NULL;
    for (int i = 0; i < 100000 && quiet < 4; i++) {
        size_t upto = i == 0 ? half : size;
        if (sent < upto) {
            ssize_t n = send(sv[1], data + sent, upto - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                sent += (size_t)n;
        }
        uv_run(&fz_loop, UV_RUN_NOWAIT);
        if (fz_paused) {
            struct al_http_req *p = fz_paused;
            fz_paused = NULL;
            al_http_req_resume_body(p);
        }
        size_t got = fz_drain(sv[1]);
        out += got;
        quiet = (got || sent < size) ? 0 : quiet + 1;
        if (al_http_server_connections(fz_srv) == 0)
            break; /* the server closed it (an error answer, or "Connection: close") */
    }
    close(sv[1]); /* the client leaves, at whatever stage the input left it */
    for (int i = 0; i < 10000 && al_http_server_connections(fz_srv); i++)
        uv_run(&fz_loop, UV_RUN_NOWAIT);
    uv_run(&fz_loop, UV_RUN_NOWAIT); /* close callbacks */

    if (al_http_server_connections(fz_srv) != 0)
        fz_die("connection still open after the peer closed");
    if (atomic_load(&http__live_reqs) != 0)
        fz_die("a request outlived its connection");
    /* Output is the echoes plus small heads: bounded by the input. */
    if (out > 16 * size + 64 * 1024)
        fz_die("output out of proportion with the input");
    return 0;
}
