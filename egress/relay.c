/* egress/relay: a connection's bytes both ways once it has been decided (TLS passthrough,
 * raw TCP opened by a CIDR rule, an upgraded HTTP connection), through the one relay of
 * common/relay.h.
 *
 * Owns: what egress adds to that relay: buffers and pipes counted in the memory budget
 * (the global one and the sandbox's share), pipes from the worker's pool, the mode
 * (egress_config.relay: splice between the two sockets or copy), the connection's events
 * in the worker's epoll set, its idle deadline, and the end reason of the audit record.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <unistd.h>

#include "common/util.h"

static bool relay__take(void *ctx, size_t n)
{
    struct egress_conn *c = ctx;
    return egress_mem_take(c->w->e, c->sb, n);
}

static void relay__give(void *ctx, size_t n)
{
    struct egress_conn *c = ctx;
    egress_mem_give(c->w->e, c->sb, n);
}

static int relay__pipe_get(void *ctx, int fd[2])
{
    return egress_pipe_get(((struct egress_conn *)ctx)->w, fd);
}

static void relay__pipe_put(void *ctx, int fd[2])
{
    egress_pipe_put(((struct egress_conn *)ctx)->w, fd);
}

static const struct al_relay_res relay_res = {.take = relay__take,
                                              .give = relay__give,
                                              .pipe_get = relay__pipe_get,
                                              .pipe_put = relay__pipe_put};

void egress_relay_init(struct egress_conn *c)
{
    struct egress *e = c->w->e;
    struct al_relay_opts o = {.splice = e->cfg.relay == EGRESS_RELAY_SPLICE,
                              .idle_timeout_ms = e->cfg.idle_timeout_ms,
                              .res = &relay_res,
                              .res_ctx = c,
                              /* the client's first bytes were read here, the upstream was
                               * just dialled: a read of either at the start is an EAGAIN */
                              .read_when_ready = true};
    struct al_relay_end cl = {.fd = c->client.fd}, up = {.fd = c->upstream.fd};
    al_relay_init(&c->relay, &cl, &up, &o);
    c->relaying = true;
}

static void relay__update(struct egress_conn *c)
{
    egress_conn_set_events(&c->client, al_relay_want(&c->relay, 0));
    egress_conn_set_events(&c->upstream, al_relay_want(&c->relay, 1));
}

static void relay__after(struct egress_conn *c, int rc)
{
    if (rc == 1) {
        relay__update(c);
        return;
    }
    if (rc == 0) {
        egress_conn_close(c, false, "closed");
        return;
    }
    /* Writing upstream failed after the client had said all it had to say: that is the
     * upstream's doing; anything else is a reset. */
    bool up_write = c->relay.fail_end == 1 && c->relay.fail_op == AL_RELAY_WRITE;
    egress_conn_close(c, true,
                      up_write && c->relay.flow[0].eof ? "upstream_write_failed" : "reset");
}

void egress_relay_start(struct egress_conn *c)
{
    egress_conn_deadline(c, c->w->e->cfg.idle_timeout_ms);
    relay__after(c, al_relay_run(&c->relay, -1, 0));
}

_Static_assert((int)UV_READABLE == (int)AL_RELAY_READ && (int)UV_WRITABLE == (int)AL_RELAY_WRITE,
               "epoll interests pass to the relay as they are");

void egress_relay_on_event(struct egress_conn *c, struct egress_end *end, int events)
{
    relay__after(c, al_relay_run(&c->relay, end == &c->client ? 0 : 1, events));
}

bool egress_relay_on_timeout(struct egress_conn *c)
{
    uint64_t next = 0;
    if (al_relay_time(&c->relay, al_now_ns(), &next) < 0)
        return true;
    egress_conn_deadline(c, (uint32_t)next + 1);
    return false;
}

void egress_relay_stop(struct egress_conn *c)
{
    if (!c->relaying)
        return;
    c->relaying = false;
    c->bytes_up += al_relay_bytes(&c->relay, 0);
    c->bytes_down += al_relay_bytes(&c->relay, 1);
    al_relay_free(&c->relay);
}
