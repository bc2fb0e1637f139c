/* controlplane/events: see events.h. */
#include "events.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/http.h"
#include "common/log.h"
#include "common/percent.h"
#include "common/util.h"
#include "cp.h"
#include "egressreg.h"
#include "metrics.h"
#include "sse.h"
#include "store.h"
#include "webhooks.h"

/* A stream whose client reads slower than events come is ended (it reconnects with
 * Last-Event-ID and misses nothing that is still retained) rather than buffered without
 * bound in airlockd. */
#define EV_STREAM_MAX_QUEUED (1u << 20)
/* A comment line this often keeps proxies and the server's write timeout from closing an
 * idle stream. */
#define EV_KEEPALIVE_MS 15000
/* Replayed at most on a reconnect (Last-Event-ID), oldest first. */
#define EV_REPLAY_MAX    10000
#define EV_LIMIT_DEFAULT 10
#define EV_LIMIT_MAX     100

struct ev_sub {
    struct cp_events *ev;
    struct al_http_req *req;
    char sandbox_id[64]; /* "" = every sandbox */
    uint64_t mask;
    struct ev_sub *next;
};

struct cp_events {
    struct cp *cp;
    struct ev_sub *subs;
    uv_timer_t keepalive;
    bool stopping;
};

static const char *const ev__names[CP_EV__COUNT] = {
    [CP_EV_CREATED] = "sandbox.lifecycle.created",
    [CP_EV_KILLED] = "sandbox.lifecycle.killed",
    [CP_EV_UPDATED] = "sandbox.lifecycle.updated",
    [CP_EV_PAUSED] = "sandbox.lifecycle.paused",
    [CP_EV_RESUMED] = "sandbox.lifecycle.resumed",
    [CP_EV_CHECKPOINTED] = "sandbox.lifecycle.checkpointed",
    [CP_EV_ROLLED_BACK] = "sandbox.lifecycle.rolled_back",
    [CP_EV_FORKED] = "sandbox.lifecycle.forked",
    [CP_EV_TERMINAL_OPENED] = "sandbox.lifecycle.terminal_opened",
    [CP_EV_TERMINAL_CLOSED] = "sandbox.lifecycle.terminal_closed",
    [CP_EV_SNAPSHOT_DELETED] = "sandbox.lifecycle.snapshot_deleted",
    [CP_EV_NODE_LOST] = "sandbox.lifecycle.node_lost",
};

/* The events that are also records of the audit log (docs/audit.md, "lifecycle"): what
 * changes a sandbox's files or who is in it, beside what the proxy records itself (a
 * sandbox's registration at its creation, its unregistration when it is gone). */
static const bool ev__audited[CP_EV__COUNT] = {
    [CP_EV_CHECKPOINTED] = true,     [CP_EV_ROLLED_BACK] = true,     [CP_EV_FORKED] = true,
    [CP_EV_SNAPSHOT_DELETED] = true, [CP_EV_TERMINAL_OPENED] = true, [CP_EV_TERMINAL_CLOSED] = true,
};

static const char *const ev__causes[] = {
    [CP_CAUSE_API] = "api",
    [CP_CAUSE_TIMEOUT] = "timeout",
    [CP_CAUSE_CRASH] = "crash",
    [CP_CAUSE_SHUTDOWN] = "shutdown",
    [CP_CAUSE_RESTART] = "restart",
    [CP_CAUSE_TRAFFIC] = "traffic",
    [CP_CAUSE_RETENTION] = "retention",
    [CP_CAUSE_NODE] = "node",
};

#define EV_ALL_TYPES ((1ull << CP_EV__COUNT) - 1)

const char *cp_event_cause_name(enum cp_event_cause c)
{
    return (unsigned)c < sizeof ev__causes / sizeof *ev__causes ? ev__causes[c] : NULL;
}

const char *cp_event_type_name(enum cp_event_type t)
{
    return (unsigned)t < CP_EV__COUNT ? ev__names[t] : NULL;
}

int cp_event_type_parse(const char *s, enum cp_event_type *out)
{
    for (int i = 0; i < CP_EV__COUNT; i++)
        if (strcmp(s, ev__names[i]) == 0) {
            *out = (enum cp_event_type)i;
            return 0;
        }
    return -EINVAL;
}

void cp_event_type_list(char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < CP_EV__COUNT && n < len; i++) {
        /* The first in full, then only what follows the common prefix. */
        const char *name = i ? strrchr(ev__names[i], '.') + 1 : ev__names[i];
        int w = snprintf(out + n, len - n, "%s%s", i ? ", " : "", name);
        if (w < 0)
            break;
        n += (size_t)w;
    }
}

/* ---- query --------------------------------------------------------------------------- */

struct ev_types_ctx {
    uint64_t mask;
    struct al_error *err;
};

static int ev__type_one(const char *v, void *arg)
{
    struct ev_types_ctx *c = arg;
    enum cp_event_type t;
    if (cp_event_type_parse(v, &t)) {
        char types[512];
        cp_event_type_list(types, sizeof types);
        return al_error_set(c->err, -EINVAL, "unknown event type \"%.64s\" (types: %s)", v, types);
    }
    c->mask |= 1ull << t;
    return 0;
}

/* Reads the listing's query; false after answering 400. */
static bool ev__parse_query(struct al_http_req *req, struct cp_events_query *q)
{
    memset(q, 0, sizeof *q);
    bool has;
    q->limit = EV_LIMIT_DEFAULT;
    if (!cp_rest_u64_param(req, "offset", &q->offset, &has) ||
        !cp_rest_u64_param(req, "limit", &q->limit, &has))
        return false;
    if (has && (q->limit < 1 || q->limit > EV_LIMIT_MAX)) {
        cp_rest_error(req, 400, "limit must be from 1 to %d", EV_LIMIT_MAX);
        return false;
    }
    if (q->offset > INT64_MAX) {
        cp_rest_error(req, 400, "offset is too large");
        return false;
    }
    char v[64];
    int rc = al_http_query_get(req->query, "orderAsc", v, sizeof v);
    if (rc == 0 && (strcmp(v, "true") == 0 || strcmp(v, "false") == 0)) {
        q->ascending = v[0] == 't';
    } else if (rc != -ENOENT) {
        cp_rest_error(req, 400, "orderAsc must be true or false");
        return false;
    }
    struct al_error err = {0};
    struct ev_types_ctx c = {0, &err};
    rc = al_http_query_each(req->query, "types", v, sizeof v, ev__type_one, &c);
    if (rc == -ENOENT) {
        c.mask = EV_ALL_TYPES;
    } else if (rc) {
        cp_rest_error(req, 400, "%s", err.msg[0] ? al_error_str(&err) : "types: not an event type");
        return false;
    }
    q->type_mask = c.mask;
    return true;
}

/* ---- recording ------------------------------------------------------------------------ */

/* A sandbox's execution: one per creation (E2B's sandboxExecutionId), derived from its id
 * and creation time so that it is the same in every event of that sandbox. */
static void ev__execution_id(const struct cp_sandbox *sb, char out[37])
{
    uint8_t d[16];
    char in[96];
    int n = snprintf(in, sizeof in, "%s/%llu", sb->rec.id, (unsigned long long)sb->rec.created_ns);
    crypto_generichash(d, sizeof d, (const unsigned char *)in, (size_t)n, NULL, 0);
    d[6] = (uint8_t)((d[6] & 0x0f) | 0x80); /* version 8: derived, not random */
    d[8] = (uint8_t)((d[8] & 0x3f) | 0x80);
    al_uuid_format(d, out);
}

static void ev__send(struct ev_sub *s, uint64_t seq, const char *type, const char *doc)
{
    struct al_buf b = AL_BUF_INIT;
    al_buf_printf(&b, "id: %llu\nevent: %s\ndata: %s\n\n", (unsigned long long)seq, type, doc);
    if (b.data)
        al_http_resp_write(s->req, b.data, b.len);
    al_buf_free(&b);
}

static void ev__sub_unlink(struct ev_sub *s)
{
    for (struct ev_sub **p = &s->ev->subs; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    if (!s->ev->subs && !s->ev->stopping)
        uv_timer_stop(&s->ev->keepalive);
}

/* Ends a stream from our side. */
static void ev__sub_end(struct ev_sub *s, const char *why)
{
    ev__sub_unlink(s);
    if (why) {
        char line[256];
        int n = snprintf(line, sizeof line, ": %s\n\n", why);
        al_http_resp_write(s->req, line, (size_t)n);
    }
    s->req->user = NULL;
    al_http_resp_end(s->req);
    free(s);
}

void cp_event_emit(struct cp_sandbox *sb, enum cp_event_type t, enum cp_event_cause cause,
                   const char *key_id, json_t *data)
{
    char exec[37];
    ev__execution_id(sb, exec);
    struct cp_event_subject who = {.sandbox_id = sb->rec.id,
                                   .template_id = sb->rec.template_id,
                                   .build_id = sb->rec.policy_hash,
                                   .execution_id = exec};
    cp_event_emit_for(sb->cp, &who, t, cause, key_id, data);
}

void cp_event_emit_for(struct cp *cp, const struct cp_event_subject *who, enum cp_event_type t,
                       enum cp_event_cause cause, const char *key_id, json_t *data)
{
    if (!cp->events || (unsigned)t >= CP_EV__COUNT) {
        json_decref(data);
        return;
    }
    uint64_t now = al_wall_ns();
    char id[37], ts[40];
    al_uuid_v4(id);
    al_time_rfc3339(ts, sizeof ts, now);
    json_t *ed = data ? data : json_object();
    json_object_set_new(ed, "cause", json_string(ev__causes[cause]));
    if (cause == CP_CAUSE_API && key_id && *key_id)
        json_object_set_new(ed, "apiKeyId", json_string(key_id));
    json_t *e = json_pack("{s:s,s:s,s:s,s:o,s:s,s:s,s:s,s:s,s:s,s:s}", "version", "v1", "id", id,
                          "type", ev__names[t], "eventData", ed, "sandboxBuildId", who->build_id,
                          "sandboxExecutionId", who->execution_id, "sandboxId", who->sandbox_id,
                          "sandboxTeamId", "default", "sandboxTemplateId", who->template_id,
                          "timestamp", ts);
    char *doc = e ? json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (e && ev__audited[t]) {
        /* "sandbox.lifecycle.checkpointed" is event "checkpointed" of type "lifecycle". */
        const char *name = strrchr(ev__names[t], '.') + 1;
        json_t *rec = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:O}", "type", "lifecycle", "event", name,
                                "event_id", id, "sandbox", who->sandbox_id, "template",
                                who->template_id, "cause", ev__causes[cause], "event_data", ed);
        if (rec) {
            json_object_set_new(rec, "api_key_id",
                                key_id && *key_id ? json_string(key_id) : json_null());
            char what[160];
            snprintf(what, sizeof what, "sandbox %s: its %s event", who->sandbox_id, name);
            cp_audit_record(cp, rec, what, NULL, NULL);
        }
    }
    json_decref(e);
    struct al_error err = {0};
    uint64_t seq = 0;
    if (!doc || cp_store_event_add(cp->store, who->sandbox_id, (int)t, now, doc, &seq, &err)) {
        al_warn("sandbox %s: its %s event was not recorded: %s", who->sandbox_id, ev__names[t],
                doc ? al_error_str(&err) : "out of memory");
        cp_metrics_event(cp->metrics, false);
        free(doc);
        return;
    }
    cp_metrics_event(cp->metrics, true);
    for (struct ev_sub *s = cp->events->subs, *next; s; s = next) {
        next = s->next;
        if (!(s->mask >> t & 1) || (s->sandbox_id[0] && strcmp(s->sandbox_id, who->sandbox_id)))
            continue;
        if (al_http_resp_queued(s->req) > EV_STREAM_MAX_QUEUED) {
            ev__sub_end(s, "this client reads slower than events arrive: reconnect with "
                           "Last-Event-ID to go on where it stopped");
            continue;
        }
        ev__send(s, seq, ev__names[t], doc);
    }
    cp_webhooks_event(cp, (int)t, doc);
    free(doc);
}

/* ---- listing and streams ---------------------------------------------------------------- */

static int ev__collect(uint64_t seq, int type, const char *doc, void *arg)
{
    (void)seq;
    (void)type;
    json_t *arr = arg;
    json_t *v = json_loads(doc, 0, NULL);
    if (v)
        json_array_append_new(arr, v);
    return 0;
}

static int ev__replay_one(uint64_t seq, int type, const char *doc, void *arg)
{
    const char *name = cp_event_type_name((enum cp_event_type)type);
    ev__send(arg, seq, name ? name : "message", doc);
    return 0;
}

static void ev__on_close(struct al_http_req *req)
{
    struct ev_sub *s = req->user;
    if (!s)
        return;
    ev__sub_unlink(s);
    free(s);
}

static void ev__keepalive(uv_timer_t *t)
{
    struct cp_events *ev = t->data;
    for (struct ev_sub *s = ev->subs, *next; s; s = next) {
        next = s->next;
        if (al_http_resp_queued(s->req) > EV_STREAM_MAX_QUEUED) {
            ev__sub_end(s, "this client reads slower than events arrive");
            continue;
        }
        cp_sse_keepalive(s->req);
    }
}

static void ev__stream(struct cp *cp, struct al_http_req *req, const char *sandbox_id,
                       const struct cp_events_query *q)
{
    struct cp_events *ev = cp->events;
    uint64_t after = 0;
    int last = cp_sse_last_event_id(req, &after);
    if (last < 0) {
        cp_rest_error(req, 400, "Last-Event-ID must be the id of an event this stream sent");
        return;
    }
    struct ev_sub *s = calloc(1, sizeof *s);
    if (!s) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    s->ev = ev;
    s->req = req;
    s->mask = q->type_mask;
    snprintf(s->sandbox_id, sizeof s->sandbox_id, "%s", sandbox_id ? sandbox_id : "");
    /* ": ready" tells a client the stream is subscribed: what happens after it is sent. */
    if (cp_sse_start(req)) {
        free(s);
        al_http_resp_abort(req);
        return;
    }
    req->user = s;
    al_http_req_on_close(req, ev__on_close);
    if (last) {
        struct cp_store_event_query sq = {.sandbox_id = sandbox_id,
                                          .type_mask = q->type_mask,
                                          .after_seq = after,
                                          .limit = EV_REPLAY_MAX,
                                          .ascending = true};
        struct al_error err = {0};
        if (cp_store_event_query(cp->store, &sq, ev__replay_one, s, &err)) {
            al_warn("event stream: replaying after %llu: %s", (unsigned long long)after,
                    al_error_str(&err));
            ev__sub_end(s, "the events after Last-Event-ID could not be read");
            return;
        }
    }
    s->next = ev->subs;
    if (!ev->subs)
        uv_timer_start(&ev->keepalive, ev__keepalive, EV_KEEPALIVE_MS, EV_KEEPALIVE_MS);
    ev->subs = s;
}

bool cp_events_route(struct cp *cp, struct al_http_req *req, const char *path)
{
    static const char pre[] = "/events/sandboxes";
    if (strncmp(path, pre, sizeof pre - 1) != 0 ||
        (path[sizeof pre - 1] != '\0' && path[sizeof pre - 1] != '/'))
        return false;
    const char *rest = path + sizeof pre - 1;
    char id[64] = "";
    if (*rest == '/') {
        rest++;
        size_t n = strlen(rest);
        if (n == 0 || n >= sizeof id || strchr(rest, '/')) {
            cp_rest_error(req, 404, "no such endpoint: %s %s", req->method, path);
            return true;
        }
        if (al_percent_decode(rest, n, id, sizeof id, 0) < 0 || !cp_sandbox_id_valid(id)) {
            cp_rest_error(req, 400, "\"%.64s\" is not a sandbox id", rest);
            return true;
        }
    }
    if (strcmp(req->method, "GET") != 0) {
        cp_rest_error(req, 405, "%s is not allowed on %s (GET lists the events)", req->method,
                      path);
        return true;
    }
    if (!cp->events) {
        cp_rest_error(req, 503, "lifecycle events are not available (airlockd is stopping)");
        return true;
    }
    struct cp_events_query q;
    if (!ev__parse_query(req, &q))
        return true;
    struct al_error err = {0};
    if (cp_sse_wanted(req)) {
        ev__stream(cp, req, id[0] ? id : NULL, &q);
        return true;
    }
    /* Events outlive their sandbox (a killed one's history is what is asked for most), so
     * an id without events is an empty list, as for E2B, not a 404. */
    struct cp_store_event_query sq = {.sandbox_id = id[0] ? id : NULL,
                                      .type_mask = q.type_mask,
                                      .limit = q.limit,
                                      .offset = q.offset,
                                      .ascending = q.ascending};
    json_t *arr = json_array();
    if (cp_store_event_query(cp->store, &sq, ev__collect, arr, &err)) {
        json_decref(arr);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return true;
    }
    al_http_reply_json(req, 200, arr);
    return true;
}

/* ---- life ------------------------------------------------------------------------------ */

int cp_events_open(struct cp *cp, struct al_error *err)
{
    struct cp_events *ev = calloc(1, sizeof *ev);
    if (!ev)
        return al_error_set(err, -ENOMEM, "out of memory");
    ev->cp = cp;
    uv_timer_init(cp->loop, &ev->keepalive);
    ev->keepalive.data = ev;
    cp->events = ev;
    cp_events_tick(cp);
    return 0;
}

void cp_events_stop(struct cp *cp)
{
    struct cp_events *ev = cp->events;
    if (!ev)
        return;
    while (ev->subs)
        ev__sub_end(ev->subs, "airlockd is stopping");
    uv_timer_stop(&ev->keepalive);
}

static void ev__timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void cp_events_close(struct cp *cp)
{
    struct cp_events *ev = cp->events;
    if (!ev)
        return;
    cp_events_stop(cp);
    ev->stopping = true;
    cp->events = NULL;
    uv_close((uv_handle_t *)&ev->keepalive, ev__timer_closed);
}

void cp_events_tick(struct cp *cp)
{
    if (!cp->events)
        return;
    uint64_t now = al_wall_ns(), age = cp->cfg.events_retention_ms * 1000000ull;
    uint64_t deleted = 0;
    struct al_error err = {0};
    if (cp_store_event_prune(cp->store, age && age < now ? now - age : 0,
                             (uint64_t)cp->cfg.events_max, &deleted, &err))
        al_warn("lifecycle events: pruning: %s", al_error_str(&err));
    else if (deleted)
        al_debug("lifecycle events: %llu older than events.retention or beyond events.max "
                 "deleted",
                 (unsigned long long)deleted);
}
