/* vmm/health: the readiness probe of airlock-vmm: "GET /health" on the agent socket until
 * the agent answers 2xx, retrying every 2 ms (a connection made before the agent called
 * accept waits in the listen backlog and is answered as soon as it does), until a deadline.
 * A deliberately tiny HTTP client: one request, the status line of the answer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "vmm.h"

struct vmm_probe {
    struct vmm *v;
    uv_poll_t poll;
    uv_timer_t timer;
    int fd;
    bool poll_inited;
    char buf[256];
    size_t len;
    uint64_t deadline_ns;
    int attempts;
    void (*done)(struct vmm *v, int rc);
    int closing;
    bool finished;
};

static void probe__attempt(struct vmm_probe *p);
static void probe__on_timer(uv_timer_t *t);

static void probe__closed(uv_handle_t *h)
{
    struct vmm_probe *p = h->data;
    if (--p->closing == 0 && p->finished)
        free(p);
}

static void probe__close_fd(struct vmm_probe *p)
{
    if (p->poll_inited) {
        uv_poll_stop(&p->poll);
        p->closing++;
        uv_close((uv_handle_t *)&p->poll, probe__closed);
        p->poll_inited = false;
    }
    if (p->fd >= 0) {
        close(p->fd);
        p->fd = -1;
    }
}

static void probe__finish(struct vmm_probe *p, int rc)
{
    struct vmm *v = p->v;
    void (*done)(struct vmm *, int) = p->done;
    probe__close_fd(p);
    uv_timer_stop(&p->timer);
    v->probe = NULL;
    /* Freed once every handle's close callback has run. */
    p->finished = true;
    p->closing++;
    uv_close((uv_handle_t *)&p->timer, probe__closed);
    if (done)
        done(v, rc);
}

static void probe__retry(struct vmm_probe *p)
{
    probe__close_fd(p);
    if (al_now_ns() >= p->deadline_ns) {
        probe__finish(p, -ETIMEDOUT);
        return;
    }
    uv_timer_start(&p->timer, probe__on_timer, 2, 0);
}

/* Either the retry delay ended (no connection in flight) or, with one in flight, the
 * deadline passed. */
static void probe__on_timer(uv_timer_t *t)
{
    struct vmm_probe *p = t->data;
    if (p->fd >= 0)
        probe__finish(p, -ETIMEDOUT);
    else
        probe__attempt(p);
}

static void probe__on_io(uv_poll_t *h, int status, int events)
{
    struct vmm_probe *p = h->data;
    if (status < 0) {
        probe__retry(p);
        return;
    }
    if (events & UV_READABLE) {
        ssize_t n = read(p->fd, p->buf + p->len, sizeof p->buf - 1 - p->len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n > 0) {
            p->len += (size_t)n;
            p->buf[p->len] = '\0';
            char *eol = strstr(p->buf, "\r\n");
            if (!eol && p->len < sizeof p->buf - 1)
                return;
            int code = 0;
            if (sscanf(p->buf, "HTTP/1.%*d %d", &code) == 1 && code >= 200 && code < 300) {
                probe__finish(p, 0);
                return;
            }
        }
        /* EOF, an error, or a non-2xx answer: the agent is not ready yet. */
        probe__retry(p);
    }
}

static void probe__attempt(struct vmm_probe *p)
{
    struct vmm *v = p->v;
    p->attempts++;
    p->len = 0;
    p->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd < 0) {
        probe__retry(p);
        return;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", v->agent_sock);
    if (connect(p->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        probe__retry(p);
        return;
    }
    static const char req[] = "GET /health HTTP/1.1\r\nHost: airlock-agent\r\n"
                              "User-Agent: airlock-vmm\r\nConnection: close\r\n\r\n";
    if (write(p->fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        probe__retry(p);
        return;
    }
    if (uv_poll_init(v->loop, &p->poll, p->fd) != 0) {
        probe__retry(p);
        return;
    }
    p->poll.data = p;
    p->poll_inited = true;
    uv_poll_start(&p->poll, UV_READABLE | UV_DISCONNECT, probe__on_io);
    /* The overall deadline also bounds a connection the agent never answers. */
    uint64_t left = p->deadline_ns > al_now_ns() ? (p->deadline_ns - al_now_ns()) / 1000000 : 0;
    uv_timer_start(&p->timer, probe__on_timer, left + 1, 0);
}

int vmm_probe_start(struct vmm *v, uint32_t timeout_ms, void (*done)(struct vmm *v, int rc))
{
    struct vmm_probe *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->v = v;
    p->fd = -1;
    p->done = done;
    p->deadline_ns = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    uv_timer_init(v->loop, &p->timer);
    p->timer.data = p;
    v->probe = p;
    probe__attempt(p);
    return 0;
}

void vmm_probe_cancel(struct vmm *v)
{
    if (v->probe) {
        v->probe->done = NULL;
        probe__finish(v->probe, -ECANCELED);
    }
}
