/* controlplane/sse: see sse.h. */
#include "sse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/http.h"
#include "common/http_head.h"

bool cp_sse_wanted(const struct al_http_req *req)
{
    const char *a = al_http_req_header(req, "Accept");
    return a && al_http_list_has(a, strlen(a), "text/event-stream", 17);
}

int cp_sse_last_event_id(const struct al_http_req *req, uint64_t *id)
{
    const char *v = al_http_req_header(req, "Last-Event-ID");
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (!*v || *end || errno || v[0] == '-' || v[0] == '+' || v[0] == ' ')
        return -EINVAL;
    *id = (uint64_t)n;
    return 1;
}

int cp_sse_start(struct al_http_req *req)
{
    struct al_http_header h[] = {{"Content-Type", "text/event-stream"},
                                 {"Cache-Control", "no-store"}};
    int rc = al_http_resp_start(req, 200, h, 2, -1);
    if (rc < 0)
        return rc;
    al_http_resp_write(req, ": ready\n\n", 9);
    return 0;
}

void cp_sse_keepalive(struct al_http_req *req)
{
    al_http_resp_write(req, ": keep-alive\n\n", 14);
}

void cp_sse_end(struct al_http_req *req, const char *why)
{
    char line[512];
    /* One data line: a reason never carries a newline into the stream's framing. */
    int n = snprintf(line, sizeof line, "event: end\ndata: %s", why);
    for (int i = 17; i < n && i < (int)sizeof line; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    size_t len = strlen(line);
    if (len > sizeof line - 3)
        len = sizeof line - 3;
    memcpy(line + len, "\n\n", 3);
    al_http_resp_write(req, line, len + 2);
    al_http_resp_end(req);
}

/* ---- polled streams ------------------------------------------------------------------------ */

static struct cp_sse_poll *sse__polls;

static void sse__closed(uv_handle_t *h)
{
    struct cp_sse_poll *p = h->data;
    for (struct cp_sse_poll **q = &sse__polls; *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
    p->release(p);
}

/* Over (the client left, or it ended from here): released once its timer is closed. */
static void sse__poll_over(struct cp_sse_poll *p)
{
    if (p->req) {
        p->req->user = NULL;
        p->req = NULL;
    }
    if (!uv_is_closing((uv_handle_t *)&p->timer))
        uv_close((uv_handle_t *)&p->timer, sse__closed);
}

void cp_sse_poll_end(struct cp_sse_poll *p, const char *why)
{
    struct al_http_req *req = p->req;
    sse__poll_over(p);
    if (req)
        cp_sse_end(req, why);
}

static void sse__on_close(struct al_http_req *req)
{
    struct cp_sse_poll *p = req->user;
    if (p) {
        p->req = NULL;
        sse__poll_over(p);
    }
}

static void sse__tick(uv_timer_t *t)
{
    struct cp_sse_poll *p = t->data;
    if (!p->req)
        return;
    p->tick(p);
    if (!p->req)
        return;
    if (al_http_resp_queued(p->req) > CP_SSE_MAX_QUEUED) {
        cp_sse_poll_end(p, p->slow);
        return;
    }
    if (++p->ticks * p->every_ms >= CP_SSE_KEEPALIVE_MS) {
        p->ticks = 0;
        cp_sse_keepalive(p->req);
    }
}

void cp_sse_poll_start(struct cp_sse_poll *p, uv_loop_t *loop, struct al_http_req *req,
                       unsigned first_ms)
{
    p->req = req;
    req->user = p;
    al_http_req_on_close(req, sse__on_close);
    uv_timer_init(loop, &p->timer);
    p->timer.data = p;
    p->next = sse__polls;
    sse__polls = p;
    uv_timer_start(&p->timer, sse__tick, first_ms, p->every_ms);
}

void cp_sse_polls_stop(void)
{
    for (struct cp_sse_poll *p = sse__polls; p; p = p->next)
        if (p->req)
            cp_sse_poll_end(p, "airlockd stops");
}
