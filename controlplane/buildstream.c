/* controlplane/buildstream: see buildstream.h. */
#include "buildstream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builds.h"
#include "common/buf.h"
#include "common/http.h"
#include "common/log.h"
#include "cp.h"
#include "sse.h"
#include "store.h"

#define BS_POLL_MS 250
#define BS_BATCH   1000 /* entries read per check (the rest at the next) */

struct bs_stream {
    struct cp_sse_poll poll; /* first: the stream's life (sse.c) */
    struct cp *cp;
    char bid[40];
    char status[12]; /* as last sent */
    uint64_t next;   /* the number of the next entry to read */
    int min_level;
};

static void bs__release(struct cp_sse_poll *p)
{
    free(p);
}

static void bs__event(struct bs_stream *s, const char *event, const uint64_t *id, json_t *data)
{
    char *d = json_dumps(data, JSON_COMPACT); /* compact JSON has no newline */
    json_decref(data);
    if (!d)
        return;
    struct al_buf b;
    al_buf_init(&b, 0);
    if (id)
        al_buf_printf(&b, "event: %s\nid: %llu\ndata: %s\n\n", event, (unsigned long long)*id, d);
    else
        al_buf_printf(&b, "event: %s\ndata: %s\n\n", event, d);
    al_http_resp_write(s->poll.req, b.data, b.len);
    al_buf_free(&b);
    free(d);
}

static int bs__entry(const struct cp_store_build_log_entry *e, void *arg)
{
    struct bs_stream *s = arg;
    s->next = e->n + 1;
    if (e->level >= s->min_level)
        bs__event(s, "log", &e->n, cp_builds_log_entry(e));
    return 0;
}

/* The entries added since the last check; true when there may be more. */
static bool bs__drain(struct bs_stream *s)
{
    uint64_t from = s->next;
    struct al_error err = {0};
    /* Every level is read (the entries' numbers are the offsets), the stream's own is sent. */
    if (cp_store_build_log_query(s->cp->store, s->bid,
                                 &(struct cp_store_build_log_page){CP_BUILD_DEBUG, from, BS_BATCH},
                                 bs__entry, s, &err)) {
        al_warn("build %s: its log cannot be read for a stream: %s", s->bid, al_error_str(&err));
        cp_sse_poll_end(&s->poll, "the build's log cannot be read (airlockd's log says why)");
        return false;
    }
    return s->next - from == BS_BATCH;
}

/* Sends the build's status when it changed. */
static void bs__status(struct bs_stream *s, const struct cp_store_build *b)
{
    if (strcmp(b->status, s->status) == 0)
        return;
    snprintf(s->status, sizeof s->status, "%s", b->status);
    json_t *o = json_pack("{s:s}", "status", b->status);
    json_t *reason = json_object_get(b->doc, "reason");
    if (json_is_object(reason))
        json_object_set(o, "reason", reason);
    bs__event(s, "status", NULL, o);
}

static void bs__tick(struct cp_sse_poll *p)
{
    struct bs_stream *s = (struct bs_stream *)p;
    /* The status first, then the entries: once it says the build ended, the entries read
     * after it are all there will be (both are written on this thread). */
    struct cp_store_build b;
    struct al_error err = {0};
    int rc = cp_store_build_load(s->cp->store, s->bid, &b, &err);
    if (rc) {
        bs__drain(s);
        cp_sse_poll_end(p, rc == -ENOENT ? "the build is gone (its template was deleted)"
                                         : "the build cannot be read (airlockd's log says why)");
        return;
    }
    bool ended = strcmp(b.status, "ready") == 0 || strcmp(b.status, "error") == 0;
    bool more = bs__drain(s);
    if (p->req && !more)
        bs__status(s, &b);
    cp_store_build_free(&b);
    if (p->req && ended && !more)
        cp_sse_poll_end(p, strcmp(s->status, "ready") == 0 ? "the build is ready: its log ends here"
                                                           : "the build failed: its log ends here");
}

void cp_build_stream(struct cp *cp, struct al_http_req *req, const struct cp_store_build *b,
                     uint64_t from, int min_level)
{
    struct bs_stream *s = calloc(1, sizeof *s);
    if (!s) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    s->cp = cp;
    s->next = from;
    s->min_level = min_level;
    snprintf(s->bid, sizeof s->bid, "%s", b->id);
    if (cp_sse_start(req) < 0) {
        free(s);
        al_http_resp_abort(req);
        return;
    }
    s->poll.every_ms = BS_POLL_MS;
    s->poll.slow = "this client reads slower than the build logs: reconnect (with Last-Event-ID) "
                   "to go on where it stopped";
    s->poll.tick = bs__tick;
    s->poll.release = bs__release;
    /* What there is now at once, then every BS_POLL_MS. */
    cp_sse_poll_start(&s->poll, cp->loop, req, 0);
}
