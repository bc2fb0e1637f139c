/* controlplane/console_api: the admin endpoints the web console reads (docs/console.md),
 * served to any caller the API authenticates (a key, the local socket, a console session):
 *
 *   GET /admin/overview      the backend and why it was chosen (the KVM probe's verdict), the
 *                            pools, the sandboxes by state
 *   GET /admin/overview/series  the last hour of creation latency and egress decisions, in
 *                            buckets of 10 s (metrics.c's series), for the overview's charts
 *   GET /admin/audit         the latest records of the egress audit log, newest first
 *                            (limit, and the filters of `airlock audit query`:
 *                            common/auditlog_query); with Accept: text/event-stream, the
 *                            records as they are written (the same filters), live
 *   GET /admin/audit/export  every record the filters select, from the log's first line, as
 *                            a download: the lines as written (jsonl) or OCSF events (the
 *                            CLI's mapping); the live tail's stream without its following
 *   GET /admin/audit/verify  the log's verification (common/auditlog's verifier, as
 *                            `airlock audit verify` runs it): intact up to which record, or
 *                            the first bad record and what is wrong with it
 *   GET /admin/keys          the API keys (never the keys themselves), as `airlock apikey ls`
 *   POST /admin/keys         a new key, shown once (cp_console_keys_create)
 *   DELETE /admin/keys/{id}  revokes a key, at once
 *   GET /admin/policies...   the policies, their lint findings, explain, test cases, and
 *   /admin/policy-reloads    the history of their reloads (console_policies.c)
 * Which roles may call each is auth.c's table (admins only for the keys).
 *
 * Reading and verifying the log are file I/O over what may be gigabytes: they run on libuv's
 * thread pool, one verification at a time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/auditlog.h"
#include "common/auditlog_query.h"
#include "common/http_head.h"
#include "common/log.h"
#include "common/util.h"
#include "console.h"
#include "cp.h"
#include "egressreg.h"
#include "metrics.h"
#include "sse.h"
#include "store.h"

#define CAPI_LIMIT_DEFAULT 100
#define CAPI_LIMIT_MAX     1000
/* With a filter, the records matched are looked for among at most this many of the last;
 * without, among the last limit + this many lines (the log's own checkpoints are lines too). */
#define CAPI_SCAN_MAX   100000
#define CAPI_SCAN_SLACK 1024

enum capi_kind { CAPI_RECORDS, CAPI_VERIFY };

/* The filters of a listing, a live tail or an export (common/auditlog_query's, as `airlock
 * audit query` takes them); f points into the strings beside it. */
struct capi_query {
    struct al_audit_filter f;
    char decision[16], sandbox[64], host[256], type[32], reason[64];
};

struct capi_work {
    uv_work_t w;
    struct al_http_req *req;
    enum capi_kind kind;
    char dir[4200];
    size_t limit;
    struct capi_query q;
    /* results (the worker's) */
    int status;
    json_t *out;
    char msg[768];
};

static bool capi__verifying;

static bool capi__streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* ---- the overview ------------------------------------------------------------------------- */

struct capi_counts {
    size_t by_state[4];
};

static int capi__count(void *v, void *arg)
{
    const struct cp_sandbox *sb = v;
    struct capi_counts *c = arg;
    if ((unsigned)sb->rec.state < 4)
        c->by_state[sb->rec.state]++;
    return 0;
}

static void capi__overview(struct cp *cp, struct al_http_req *req)
{
    const struct cp_backend_sel *sel = &cp->backend_sel;
    json_t *probe = sel->probe.ran ? json_pack("{s:b,s:s,s:I}", "usable", sel->probe.usable,
                                               "reason", sel->probe.reason, "elapsedMs",
                                               (json_int_t)sel->probe.elapsed_ms)
                                   : json_null();
    size_t warm_ready = 0, warm_size = 0, net_ready = 0, net_size = 0;
    cp_vmm_pool_counts(cp, &warm_ready, &warm_size);
    if (cp->net && cp->net->pool_counts)
        cp->net->pool_counts(cp->net_priv, &net_ready, &net_size);
    struct capi_counts c = {0};
    cp_map_foreach(&cp->sandboxes, capi__count, &c);
    char started[40], dir[4200];
    al_time_rfc3339(started, sizeof started,
                    cp->started_ns ? al_wall_ns() - (al_now_ns() - cp->started_ns) : 0);
    cp_egress_audit_dir(cp, dir, sizeof dir);
    json_t *o = json_pack(
        "{s:{s:s,s:s,s:o},s:{s:{s:I,s:I},s:{s:I,s:I}},s:{s:I,s:I,s:I,s:I,s:I},s:s,s:b,s:s}",
        "backend", "kind", cp->backend_kind, "why", sel->why, "kvmProbe", probe, "pools", "network",
        "ready", (json_int_t)net_ready, "size", (json_int_t)net_size, "warm", "ready",
        (json_int_t)warm_ready, "size", (json_int_t)warm_size, "sandboxes", "creating",
        (json_int_t)c.by_state[CP_SB_CREATING], "running", (json_int_t)c.by_state[CP_SB_RUNNING],
        "paused", (json_int_t)c.by_state[CP_SB_PAUSED], "stopping",
        (json_int_t)c.by_state[CP_SB_STOPPING], "max", (json_int_t)cp->cfg.max_sandboxes,
        "startedAt", started, "egress", cp->egress != NULL, "auditDir", dir);
    if (!o) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    al_http_reply_json(req, 200, o);
}

static void capi__series(struct cp *cp, struct al_http_req *req)
{
    json_t *o = cp->metrics ? cp_metrics_series_json(cp->metrics, al_wall_ns()) : NULL;
    if (!o) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    json_object_set_new(o, "egressProxy", json_boolean(cp->egress != NULL));
    al_http_reply_json(req, 200, o);
}

/* ---- the audit log (worker threads) ------------------------------------------------------- */

static void capi__records(struct capi_work *x)
{
    struct al_auditlog_reader_opts o = {.dir = x->dir, .prefix = "egress"};
    struct al_auditlog_reader *r = NULL;
    struct al_error err = {0};
    if (al_auditlog_reader_open(&o, &r, &err) < 0) {
        x->status = 404;
        snprintf(x->msg, sizeof x->msg, "cannot read the audit log in %s: %s", x->dir,
                 al_error_str(&err));
        return;
    }
    const struct al_audit_filter *f = &x->q.f;
    bool filtered =
        f->decision || f->sandbox || f->host || f->type || f->reason || f->since_ns || f->until_ns;
    json_t **ring = calloc(x->limit, sizeof *ring);
    if (!ring || al_auditlog_reader_seek_tail(r, filtered ? CAPI_SCAN_MAX
                                                          : x->limit + CAPI_SCAN_SLACK) < 0) {
        free(ring);
        al_auditlog_reader_close(r);
        x->status = 500;
        snprintf(x->msg, sizeof x->msg, "cannot read the audit log in %s", x->dir);
        return;
    }
    size_t n = 0, scanned = 0;
    uint64_t last_seq = 0;
    struct al_auditlog_record rec;
    int rc;
    while ((rc = al_auditlog_reader_next(r, &rec)) == 1) {
        scanned++;
        if (rec.seq)
            last_seq = rec.seq;
        if (!al_audit_filter_match(f, &rec))
            continue;
        size_t slot = n % x->limit;
        json_decref(ring[slot]);
        ring[slot] = json_incref(rec.json);
        n++;
    }
    al_auditlog_reader_close(r);
    json_t *arr = json_array();
    size_t kept = n < x->limit ? n : x->limit;
    for (size_t i = 0; i < kept; i++) /* newest first */
        json_array_append_new(arr, ring[(n - 1 - i) % x->limit]);
    free(ring);
    if (rc < 0) {
        json_decref(arr);
        x->status = 500;
        snprintf(x->msg, sizeof x->msg, "reading the audit log in %s failed: %s", x->dir,
                 strerror(-rc));
        return;
    }
    x->out =
        json_pack("{s:o,s:I,s:s,s:o}", "records", arr, "scanned", (json_int_t)scanned, "dir",
                  x->dir, "lastSeq", last_seq ? json_integer((json_int_t)last_seq) : json_null());
    x->status = x->out ? 200 : 500;
}

static void capi__verify(struct capi_work *x)
{
    struct al_auditlog_verify_result *res = calloc(1, sizeof *res);
    struct al_error err = {0};
    struct al_auditlog_verify_opts o = {.dir = x->dir, .prefix = "egress"};
    if (!res) {
        x->status = 500;
        snprintf(x->msg, sizeof x->msg, "out of memory");
        return;
    }
    if (al_auditlog_verify(&o, res, &err) < 0) {
        x->status = err.code == -ENOENT ? 404 : 500;
        snprintf(x->msg, sizeof x->msg, "cannot verify the audit log in %s: %s", x->dir,
                 al_error_str(&err));
        free(res);
        return;
    }
    x->out = al_auditlog_verify_json(res);
    if (x->out)
        json_object_set_new(x->out, "dir", json_string(x->dir));
    x->status = x->out ? 200 : 500;
    free(res);
}

static void capi__work(uv_work_t *w)
{
    struct capi_work *x = w->data;
    if (x->kind == CAPI_VERIFY)
        capi__verify(x);
    else
        capi__records(x);
}

static void capi__done(uv_work_t *w, int status)
{
    struct capi_work *x = w->data;
    if (x->kind == CAPI_VERIFY)
        capi__verifying = false;
    if (status < 0)
        cp_rest_error(x->req, 500, "the audit log could not be read (%s)", uv_strerror(status));
    else if (x->out)
        al_http_reply_json(x->req, 200, x->out);
    else
        cp_rest_error(x->req, x->status ? x->status : 500, "%s", x->msg);
    free(x);
}

/* One text filter of the query string into buf (len): false after answering 400. */
static bool capi__param(struct al_http_req *req, const char *name, char *buf, size_t len,
                        const char **out)
{
    int rc = al_http_query_get(req->query, name, buf, len);
    if (rc == -ENOENT || (rc == 0 && !buf[0]))
        return true;
    if (rc) {
        cp_rest_error(req, 400, "%s %s", name,
                      rc == -E2BIG ? "is too long" : "is not well encoded");
        return false;
    }
    *out = buf;
    return true;
}

/* The filters of the records, their live tail and their export: decision, sandbox, host,
 * type, reason, since, until (as `airlock audit query` takes them). false after answering
 * 400. */
static bool capi__filters(struct al_http_req *req, struct capi_query *q)
{
    memset(q, 0, sizeof *q);
    struct al_audit_filter *f = &q->f;
    if (!capi__param(req, "decision", q->decision, sizeof q->decision, &f->decision) ||
        !capi__param(req, "sandbox", q->sandbox, sizeof q->sandbox, &f->sandbox) ||
        !capi__param(req, "host", q->host, sizeof q->host, &f->host) ||
        !capi__param(req, "type", q->type, sizeof q->type, &f->type) ||
        !capi__param(req, "reason", q->reason, sizeof q->reason, &f->reason))
        return false;
    if (f->decision && !capi__streq(f->decision, "allow") && !capi__streq(f->decision, "deny") &&
        !capi__streq(f->decision, "would_deny")) {
        cp_rest_error(req, 400, "decision must be allow, deny or would_deny");
        return false;
    }
    if (f->sandbox && !cp_sandbox_id_valid(f->sandbox)) {
        cp_rest_error(req, 400, "sandbox must be a sandbox id");
        return false;
    }
    const char *names[] = {"since", "until"};
    uint64_t *dst[] = {&f->since_ns, &f->until_ns};
    for (int i = 0; i < 2; i++) {
        char t[64];
        const char *v = NULL;
        if (!capi__param(req, names[i], t, sizeof t, &v))
            return false;
        if (v && al_audit_time_arg(v, dst[i]) < 0) {
            cp_rest_error(req, 400,
                          "%s must be an RFC 3339 time (2026-01-02T03:04:05Z) or an age (90s, "
                          "10m, 2h)",
                          names[i]);
            return false;
        }
    }
    return true;
}

static void capi__audit(struct cp *cp, struct al_http_req *req, enum capi_kind kind)
{
    if (kind == CAPI_VERIFY && capi__verifying) {
        cp_rest_error(req, 429,
                      "a verification of the audit log is running; ask again when it "
                      "has ended");
        return;
    }
    struct capi_work *x = calloc(1, sizeof *x);
    if (!x) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    x->req = req;
    x->kind = kind;
    x->limit = CAPI_LIMIT_DEFAULT;
    cp_egress_audit_dir(cp, x->dir, sizeof x->dir);
    if (kind == CAPI_RECORDS) {
        uint64_t v;
        bool has;
        if (!cp_rest_u64_param(req, "limit", &v, &has)) {
            free(x);
            return;
        }
        if (has && (v < 1 || v > CAPI_LIMIT_MAX)) {
            free(x);
            cp_rest_error(req, 400, "limit must be 1..%d", CAPI_LIMIT_MAX);
            return;
        }
        if (has)
            x->limit = (size_t)v;
        if (!capi__filters(req, &x->q)) {
            free(x);
            return;
        }
    }
    x->w.data = x;
    if (uv_queue_work(req->loop, &x->w, capi__work, capi__done) < 0) {
        free(x);
        cp_rest_error(req, 500, "cannot queue the audit log's reading");
        return;
    }
    if (kind == CAPI_VERIFY)
        capi__verifying = true;
}

/* ---- the live tail (Server-Sent Events) ---------------------------------------------------- */

/* GET /admin/audit with Accept: text/event-stream: the records written from now on (or after
 * the seq of Last-Event-ID, or of ?after=, so that a page that listed up to a record and a
 * client that reconnects miss none), with the filters of the listing, one event "record" per
 * record (id: its seq, data: its line as in the log). The log is followed as `airlock audit
 * tail -f` follows it (the reader's inotify descriptor, polled on the loop); it is read on
 * the thread pool, one read at a time per stream. */
#define CAPI_TAIL_BATCH 500   /* records per read (the rest in the next) */
#define CAPI_TAIL_SCAN  20000 /* lines looked at per read */
/* An export reads on while less than this waits to be sent to the client. */
#define CAPI_EXPORT_QUEUED (1u << 20)

struct capi_tail {
    struct cp *cp;
    struct al_http_req *req; /* NULL once the client left or the stream ended */
    struct al_auditlog_reader *r;
    uv_work_t w;
    uv_poll_t poll;
    uv_timer_t keepalive;
    int handles; /* of poll and keepalive, open */
    bool working, again, more, started, ending;
    uint64_t after;
    bool has_after;
    char dir[4200];
    struct capi_query q;
    enum capi_stream { CAPI_SSE, CAPI_EXPORT_JSONL, CAPI_EXPORT_OCSF } mode;
    bool eof; /* an export read the whole log */
    /* the worker's */
    struct al_buf out;
    int status;
    char msg[768];
    struct capi_tail *next;
};

static struct capi_tail *capi__tails;

static void capi__tail_free(struct capi_tail *t)
{
    for (struct capi_tail **p = &capi__tails; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    if (t->r)
        al_auditlog_reader_close(t->r);
    al_buf_free(&t->out);
    free(t);
}

static void capi__tail_closed(uv_handle_t *h)
{
    struct capi_tail *t = h->data;
    if (--t->handles == 0 && !t->working)
        capi__tail_free(t);
}

/* The stream is over (the client left, it ended from here): once no read is under way and
 * the handles are closed, it is freed. */
static void capi__tail_release(struct capi_tail *t)
{
    if (t->ending)
        return;
    t->ending = true;
    if (t->req) {
        t->req->user = NULL;
        t->req = NULL;
    }
    if (t->handles) {
        uv_close((uv_handle_t *)&t->poll, capi__tail_closed);
        uv_close((uv_handle_t *)&t->keepalive, capi__tail_closed);
    } else if (!t->working) {
        capi__tail_free(t);
    }
}

/* An export that ends before the end of the log is cut off where the client sees it (the
 * download fails rather than pass for the whole log); a live tail says why it ends. */
static void capi__tail_end(struct capi_tail *t, const char *why)
{
    struct al_http_req *req = t->req;
    capi__tail_release(t);
    if (req && t->mode != CAPI_SSE) {
        al_warn("console: an audit export ended before the end of the log: %s", why);
        al_http_resp_abort(req);
    } else if (req) {
        cp_sse_end(req, why);
    }
}

static void capi__tail_on_close(struct al_http_req *req)
{
    struct capi_tail *t = req->user;
    if (t) {
        t->req = NULL;
        capi__tail_release(t);
    }
}

static void capi__tail_read(struct capi_tail *t)
{
    if (!t->r) { /* the first read opens the log where the stream starts */
        struct al_auditlog_reader_opts o = {
            .dir = t->dir, .prefix = "egress", .follow = t->mode == CAPI_SSE};
        struct al_error err = {0};
        if (al_auditlog_reader_open(&o, &t->r, &err) < 0) {
            t->status = 404;
            snprintf(t->msg, sizeof t->msg, "cannot read the audit log in %s: %s", t->dir,
                     al_error_str(&err));
            return;
        }
        /* An export reads the log from its first line. */
        int rc = t->mode != CAPI_SSE ? 0
                 : t->has_after      ? al_auditlog_reader_seek_seq(t->r, t->after + 1)
                                     : al_auditlog_reader_seek_tail(t->r, 0);
        if (rc < 0) {
            t->status = 500;
            snprintf(t->msg, sizeof t->msg, "cannot read the audit log in %s: %s", t->dir,
                     strerror(-rc));
        }
        return; /* the stream starts; its first read follows at once */
    }
    if (t->mode == CAPI_SSE)
        al_auditlog_reader_wait(t->r, 0); /* drains the descriptor the loop polls */
    struct al_auditlog_record rec;
    size_t matched = 0, scanned = 0;
    int rc;
    t->more = false;
    while ((rc = al_auditlog_reader_next(t->r, &rec)) == 1) {
        if (al_audit_filter_match(&t->q.f, &rec)) {
            if (t->mode == CAPI_SSE) {
                al_buf_printf(&t->out, "id: %llu\nevent: record\ndata: %.*s\n\n",
                              (unsigned long long)rec.seq, (int)rec.len, rec.line);
            } else if (t->mode == CAPI_EXPORT_JSONL) { /* the line as the log holds it */
                al_buf_append(&t->out, rec.line, rec.len);
                al_buf_append(&t->out, "\n", 1);
            } else {
                json_t *ev = rec.json ? al_audit_ocsf_event(&rec) : NULL;
                char *line = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
                if (line) {
                    al_buf_appends(&t->out, line);
                    al_buf_append(&t->out, "\n", 1);
                }
                free(line);
                json_decref(ev);
            }
            matched++;
        }
        if (matched >= CAPI_TAIL_BATCH || ++scanned >= CAPI_TAIL_SCAN) {
            t->more = true;
            break;
        }
    }
    if (rc == 0 && t->mode != CAPI_SSE)
        t->eof = true;
    if (rc < 0) {
        t->status = 500;
        snprintf(t->msg, sizeof t->msg, "reading the audit log in %s failed: %s", t->dir,
                 strerror(-rc));
    }
}

static void capi__tail_work(uv_work_t *w)
{
    capi__tail_read(w->data);
}

static void capi__tail_queue(struct capi_tail *t);

static void capi__tail_poll(uv_poll_t *p, int status, int events)
{
    (void)status, (void)events;
    struct capi_tail *t = p->data;
    if (t->working)
        t->again = true;
    else
        capi__tail_queue(t);
}

static void capi__tail_keepalive(uv_timer_t *tm)
{
    struct capi_tail *t = tm->data;
    if (t->req && al_http_resp_queued(t->req) > CP_SSE_MAX_QUEUED)
        capi__tail_end(t, "this client reads slower than records arrive: reconnect (with "
                          "Last-Event-ID) to go on where it stopped");
    else if (t->req)
        cp_sse_keepalive(t->req);
}

/* An export's answer: a download of the records, read as the client takes them. */
static int capi__export_begin(struct capi_tail *t)
{
    struct al_http_req *req = t->req;
    char stamp[40], disp[128];
    al_time_rfc3339(stamp, sizeof stamp, al_wall_ns());
    for (char *c = stamp; *c; c++)
        if (*c == ':')
            *c = '-';
    snprintf(disp, sizeof disp, "attachment; filename=\"airlock-audit-%.19s%s\"", stamp,
             t->mode == CAPI_EXPORT_OCSF ? ".ocsf.jsonl" : ".jsonl");
    struct al_http_header h[] = {{"Content-Type", "application/x-ndjson; charset=utf-8"},
                                 {"Content-Disposition", disp},
                                 {"Cache-Control", "no-store"}};
    if (al_http_resp_start(req, 200, h, 3, -1) < 0)
        return -EPIPE;
    t->started = true;
    req->user = t;
    al_http_req_on_close(req, capi__tail_on_close);
    return 0;
}

static void capi__export_drained(struct al_http_req *req)
{
    struct capi_tail *t = req->user;
    if (t)
        capi__tail_queue(t);
}

/* The stream's answer, once the log is open where it starts. */
static int capi__tail_begin(struct capi_tail *t)
{
    struct al_http_req *req = t->req;
    if (t->mode != CAPI_SSE)
        return capi__export_begin(t);
    int fd = al_auditlog_reader_fd(t->r);
    if (fd < 0 || uv_poll_init(t->cp->loop, &t->poll, fd) < 0)
        return -EIO;
    t->poll.data = t;
    uv_timer_init(t->cp->loop, &t->keepalive);
    t->keepalive.data = t;
    t->handles = 2;
    /* ": ready" tells a client the stream follows the log: what is written after it is sent. */
    if (cp_sse_start(req) < 0)
        return -EPIPE;
    t->started = true;
    req->user = t;
    al_http_req_on_close(req, capi__tail_on_close);
    uv_poll_start(&t->poll, UV_READABLE, capi__tail_poll);
    uv_timer_start(&t->keepalive, capi__tail_keepalive, CP_SSE_KEEPALIVE_MS, CP_SSE_KEEPALIVE_MS);
    return 0;
}

static void capi__tail_done(uv_work_t *w, int status)
{
    struct capi_tail *t = w->data;
    t->working = false;
    if (t->ending) {
        if (!t->handles)
            capi__tail_free(t);
        return;
    }
    if (status < 0 && !t->status) {
        t->status = 500;
        snprintf(t->msg, sizeof t->msg, "the audit log could not be read (%s)",
                 uv_strerror(status));
    }
    if (!t->started) { /* the answer is not under way: an ordinary error, or the stream */
        struct al_http_req *req = t->req;
        if (t->status || capi__tail_begin(t) < 0) {
            if (t->status)
                cp_rest_error(req, t->status, "%s", t->msg);
            else
                cp_rest_error(req, 500, "cannot follow the audit log in %s", t->dir);
            t->req = NULL;
            capi__tail_release(t);
            return;
        }
        capi__tail_queue(t); /* what came meanwhile */
        return;
    }
    if (t->out.len && t->req)
        al_http_resp_write(t->req, t->out.data, t->out.len);
    al_buf_reset(&t->out);
    if (t->status) {
        capi__tail_end(t, t->msg);
        return;
    }
    if (t->mode != CAPI_SSE && t->req) {
        struct al_http_req *req = t->req;
        if (t->eof) { /* the whole log: the download is complete */
            capi__tail_release(t);
            al_http_resp_end(req);
        } else if (al_http_resp_queued(req) > CAPI_EXPORT_QUEUED) {
            al_http_resp_on_drain(req, CAPI_EXPORT_QUEUED / 4, capi__export_drained);
        } else {
            capi__tail_queue(t);
        }
        return;
    }
    if (t->req && al_http_resp_queued(t->req) > CP_SSE_MAX_QUEUED) {
        capi__tail_end(t, "this client reads slower than records arrive: reconnect (with "
                          "Last-Event-ID) to go on where it stopped");
        return;
    }
    if (t->more || t->again) {
        t->again = false;
        capi__tail_queue(t);
    }
}

static void capi__tail_queue(struct capi_tail *t)
{
    if (t->working || t->ending)
        return;
    t->w.data = t;
    if (uv_queue_work(t->cp->loop, &t->w, capi__tail_work, capi__tail_done) < 0) {
        capi__tail_end(t, "cannot queue the audit log's reading");
        return;
    }
    t->working = true;
}

/* The live tail (CAPI_SSE) or an export of the records that match the query. */
static void capi__tail(struct cp *cp, struct al_http_req *req, enum capi_stream mode)
{
    struct capi_tail *t = calloc(1, sizeof *t);
    if (!t) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    t->mode = mode;
    if (!capi__filters(req, &t->q)) {
        free(t);
        return;
    }
    if (mode != CAPI_SSE) {
        /* An export is every matching record from the log's first line on. */
        bool all = false;
        if (!cp_rest_bool_param(req, "all", &all)) {
            free(t);
            return;
        }
        const struct al_audit_filter *f = &t->q.f;
        /* Unfiltered, it is the log as written, the log's own records too: a file that
         * `airlock audit verify` checks like the log itself. */
        t->q.f.all = all || !(f->decision || f->sandbox || f->host || f->type || f->reason ||
                              f->since_ns || f->until_ns);
    }
    char after[32] = "";
    int last = mode == CAPI_SSE ? cp_sse_last_event_id(req, &t->after) : 0;
    int rc =
        mode == CAPI_SSE ? al_http_query_get(req->query, "after", after, sizeof after) : -ENOENT;
    if (last < 0) {
        free(t);
        cp_rest_error(req, 400, "Last-Event-ID must be the seq of a record of the log");
        return;
    }
    if (last) {
        t->has_after = true;
    } else if (rc == 0) {
        char *end = NULL;
        errno = 0;
        t->after = strtoull(after, &end, 10);
        t->has_after = true;
        if (!*after || *end || errno || after[0] == '-') {
            free(t);
            cp_rest_error(req, 400, "after must be the seq of a record of the log");
            return;
        }
    } else if (rc != -ENOENT) {
        free(t);
        cp_rest_error(req, 400, "after must be the seq of a record of the log");
        return;
    }
    t->cp = cp;
    t->req = req;
    al_buf_init(&t->out, 0);
    cp_egress_audit_dir(cp, t->dir, sizeof t->dir);
    t->next = capi__tails;
    capi__tails = t;
    capi__tail_queue(t);
    if (!t->working) {
        capi__tail_free(t);
        cp_rest_error(req, 500, "cannot queue the audit log's reading");
    }
}

/* GET /admin/audit/export?format=jsonl|ocsf and the query's filters. */
static void capi__audit_export(struct cp *cp, struct al_http_req *req)
{
    char fmt[16] = "";
    int rc = al_http_query_get(req->query, "format", fmt, sizeof fmt);
    if (rc == -ENOENT || (rc == 0 && strcmp(fmt, "jsonl") == 0))
        capi__tail(cp, req, CAPI_EXPORT_JSONL);
    else if (rc == 0 && strcmp(fmt, "ocsf") == 0)
        capi__tail(cp, req, CAPI_EXPORT_OCSF);
    else
        cp_rest_error(req, 400,
                      "format must be jsonl (the records as the log holds them) or ocsf (OCSF "
                      "1.1 events, one per line)");
}

void cp_console_api_stop(struct cp *cp)
{
    (void)cp;
    for (struct capi_tail *t = capi__tails, *next; t; t = next) {
        next = t->next;
        if (!t->ending)
            capi__tail_end(t, "airlockd stops");
    }
}

/* ---- API keys ------------------------------------------------------------------------------ */

static json_t *capi__time_or_null(uint64_t ns)
{
    if (!ns)
        return json_null();
    char buf[40];
    al_time_rfc3339(buf, sizeof buf, ns);
    return json_string(buf);
}

static json_t *capi__key_json(const struct cp_apikey *k)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:s}", "id", k->id, "name", k->name, "role",
                     cp_role_name(k->role), "policies", k->policies, "createdAt",
                     capi__time_or_null(k->created_ns), "lastUsedAt",
                     capi__time_or_null(k->last_used_ns), "revokedAt",
                     capi__time_or_null(k->revoked_ns), "status",
                     k->revoked_ns ? "revoked" : "valid");
}

static void capi__keys_list(struct cp *cp, struct al_http_req *req)
{
    struct cp_apikey *v = NULL;
    size_t n = 0;
    struct al_error err = {0};
    if (cp_store_key_list(cp->store, &v, &n, &err)) {
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, capi__key_json(&v[i]));
    free(v);
    al_http_reply_json(req, 200, json_pack("{s:o}", "keys", arr));
}

void cp_console_keys_create(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                            const json_t *b)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)b, k, v)
    {
        if (strcmp(k, "name") && strcmp(k, "role") && strcmp(k, "policies")) {
            cp_rest_error(req, 400, "\"%.64s\" is not a field of a key (name, role, policies)", k);
            return;
        }
        if (!json_is_string(v) && !json_is_null(v)) {
            cp_rest_error(req, 400, "\"%s\" must be a string", k);
            return;
        }
    }
    const char *name = json_string_value(json_object_get(b, "name"));
    struct cp_apikey key;
    char secret[CP_APIKEY_LEN + 1];
    struct al_error err = {0};
    if (cp_apikey_make(&key, secret, name, json_string_value(json_object_get(b, "role")),
                       json_string_value(json_object_get(b, "policies")), &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    int rc = cp_store_key_insert(cp->store, &key, &err);
    if (rc) {
        sodium_memzero(secret, sizeof secret);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    al_info("api: key %s (%s, role %s) created by key %s", key.id, key.name, cp_role_name(key.role),
            who->key_id);
    json_t *o = capi__key_json(&key);
    json_object_set_new(o, "key", json_string(secret));
    sodium_memzero(secret, sizeof secret);
    al_http_reply_json(req, 201, o);
}

static void capi__keys_revoke(struct cp *cp, struct al_http_req *req,
                              const struct cp_principal *who, const char *raw)
{
    char id[64];
    const char *p = raw;
    if (!cp_rest_path_part(&p, id, sizeof id) || *p) {
        cp_rest_error(req, 404, "no such endpoint: DELETE /admin/keys/%.64s", raw);
        return;
    }
    struct cp_apikey k;
    struct al_error err = {0};
    int rc = cp_store_key_get(cp->store, id, &k, &err);
    if (rc == 0 && strcmp(k.id, id) != 0)
        rc = al_error_set(&err, -ENOENT, "no API key with the id \"%s\"", id);
    if (rc == 0)
        rc = cp_store_key_revoke(cp->store, k.id, al_wall_ns(), &err);
    if (rc) {
        cp_rest_error(req,
                      rc == -ENOENT     ? 404
                      : rc == -EALREADY ? 409
                                        : 500,
                      "%s", al_error_str(&err));
        return;
    }
    /* Our own write: the cache would keep the key valid until another connection wrote. */
    cp_auth_flush(cp);
    al_info("api: key %s (%s) revoked by key %s", k.id, k.name, who->key_id);
    al_http_reply(req, 204, NULL, NULL, 0);
}

bool cp_console_api_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    const char *p = req->path;
    if (strncmp(p, "/admin/", 7) != 0)
        return false;
    if (cp_console_vault_route(cp, req, who) || cp_console_reloads_route(cp, req, who))
        return true;
    if (strcmp(p, "/admin/keys") == 0 && strcmp(req->method, "GET") == 0) {
        capi__keys_list(cp, req);
        return true;
    }
    if (strncmp(p, "/admin/keys/", 12) == 0 && strcmp(req->method, "DELETE") == 0) {
        capi__keys_revoke(cp, req, who, p + 12);
        return true;
    }
    if (strcmp(p, "/admin/keys") == 0 || strncmp(p, "/admin/keys/", 12) == 0) {
        cp_rest_error(req, 405,
                      "%s is not allowed on %s (GET /admin/keys lists, POST creates, DELETE "
                      "/admin/keys/{id} revokes)",
                      req->method, p);
        return true;
    }
    if (strcmp(req->method, "GET") != 0) {
        cp_rest_error(req, 405, "%s is not allowed on %s (GET)", req->method, p);
        return true;
    }
    if (strcmp(p, "/admin/overview") == 0)
        capi__overview(cp, req);
    else if (strcmp(p, "/admin/overview/series") == 0)
        capi__series(cp, req);
    else if (strcmp(p, "/admin/audit") == 0 && cp_sse_wanted(req))
        capi__tail(cp, req, CAPI_SSE);
    else if (strcmp(p, "/admin/audit/export") == 0)
        capi__audit_export(cp, req);
    else if (strcmp(p, "/admin/audit") == 0)
        capi__audit(cp, req, CAPI_RECORDS);
    else if (strcmp(p, "/admin/audit/verify") == 0)
        capi__audit(cp, req, CAPI_VERIFY);
    else if (cp_console_policies_route(cp, req))
        return true;
    else
        cp_rest_error(req, 404, "no such endpoint: GET %s", p);
    return true;
}
