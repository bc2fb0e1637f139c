/* vault/vault_http: the airlock-vault daemon's HTTP+JSON API on its unix socket (common/http).
 * Routes are vault_api.c's; this file adds the transport: peer credentials, request bodies
 * (wiped after parsing), the fetch answer assembled in guarded memory with "Cache-Control:
 * no-store", and the long-poll of GET /v1/changes (answered as soon as a secret changes, by
 * this daemon or by anyone else writing the file, or when wait_ms runs out). */
#include "vault/vault_http.h"

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#define HTTPD__BODY_MAX (256 * 1024)
#define HTTPD__TICK_MS  250

struct httpd__waiter {
    struct httpd__waiter *next, *prev;
    struct vault_httpd *d;
    struct al_http_req *req;
    struct vault_peer peer;
    uint64_t since;
    uint64_t deadline_ns;
};

struct vault_httpd {
    uv_loop_t *loop;
    struct vault_service *svc;
    struct vault_store *store;
    struct al_http_server *srv;
    uv_timer_t tick;
    bool tick_started;
    struct httpd__waiter *waiters;
    uint64_t seen_gen;
    void (*closed)(void *arg);
    void *closed_arg;
};

static struct vault_peer httpd__peer(const struct al_http_req *req)
{
    struct vault_peer p = {.uid = req->peer.uid, .gid = req->peer.gid, .pid = req->peer.pid};
    return p;
}

static void httpd__unlink(struct httpd__waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        w->d->waiters = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->next = w->prev = NULL;
}

static void httpd__waiter_closed(struct al_http_req *req)
{
    struct httpd__waiter *w = req->user;
    if (!w)
        return;
    httpd__unlink(w);
    free(w);
}

/* Answers a parked long-poll if something changed (or always, when force). */
static bool httpd__answer_waiter(struct httpd__waiter *w, bool force)
{
    json_t *out = NULL;
    int st = vault_service_changes(w->d->svc, &w->peer, w->since, &out);
    bool ready = st != 200 || json_is_true(json_object_get(out, "full")) ||
                 json_array_size(json_object_get(out, "changed")) > 0;
    if (!ready && !force) {
        json_decref(out);
        return false;
    }
    struct al_http_req *req = w->req;
    httpd__unlink(w);
    req->user = NULL;
    free(w);
    al_http_reply_json(req, st, out);
    return true;
}

static void httpd__wake(struct vault_httpd *d, bool expire_only)
{
    uint64_t now = al_now_ns();
    struct httpd__waiter *w = d->waiters;
    while (w) {
        struct httpd__waiter *next = w->next;
        bool expired = now >= w->deadline_ns;
        if (expired || !expire_only)
            httpd__answer_waiter(w, expired);
        w = next;
    }
}

static void httpd__on_tick(uv_timer_t *t)
{
    struct vault_httpd *d = t->data;
    struct al_error e = {0};
    bool changed = false;
    if (vault_store_refresh(d->store, &changed, &e) != 0)
        al_error("vault: %s", al_error_str(&e));
    uint64_t gen = vault_service_generation(d->svc);
    bool moved = gen != d->seen_gen;
    d->seen_gen = gen;
    httpd__wake(d, !moved);
}

static void httpd__reply_fetch(struct al_http_req *req, json_t *meta, struct vault_fetched *f)
{
    struct vault_value body = {0};
    int rc = vault_api_fetch_body(meta, &f->value, &body);
    vault_value_free(&f->value);
    json_decref(meta);
    if (rc) {
        al_http_reply_error(req, 500, "cannot build the answer");
        return;
    }
    static const struct al_http_header hdrs[] = {
        {"Content-Type", "application/json"},
        {"Cache-Control", "no-store"},
    };
    if (al_http_resp_start(req, 200, hdrs, 2, (int64_t)body.len) == 0 &&
        al_http_resp_write(req, body.data, body.len) == 0)
        al_http_resp_end(req);
    vault_value_free(&body);
}

static void httpd__dispatch(struct vault_httpd *d, struct al_http_req *req, const json_t *body)
{
    struct vault_peer p = httpd__peer(req);
    struct vault_fetched f;
    memset(&f, 0, sizeof f);
    json_t *out = NULL;
    struct vault_api_req rq = {
        .peer = &p, .method = req->method, .path = req->path, .query = req->query, .body = body};
    int st = vault_api_handle(d->svc, &rq, &out, &f);
    if (st == 200 && f.value.data) {
        httpd__reply_fetch(req, out, &f);
        return;
    }
    vault_value_free(&f.value);
    bool get = strcmp(req->method, "GET") == 0;
    if (st == 200 && get && strcmp(req->path, "/v1/changes") == 0 &&
        !json_is_true(json_object_get(out, "full")) &&
        json_array_size(json_object_get(out, "changed")) == 0) {
        uint64_t since = 0;
        uint32_t wait_ms = 0;
        vault_api_changes_query(req->query, &since, &wait_ms);
        if (wait_ms > 0) {
            struct httpd__waiter *w = calloc(1, sizeof *w);
            if (w) {
                json_decref(out);
                w->d = d;
                w->req = req;
                w->peer = p;
                w->since = since;
                w->deadline_ns = al_now_ns() + (uint64_t)wait_ms * 1000000ull;
                w->next = d->waiters;
                if (d->waiters)
                    d->waiters->prev = w;
                d->waiters = w;
                req->user = w;
                al_http_req_on_close(req, httpd__waiter_closed);
                return;
            }
        }
    }
    al_http_reply_json(req, st, out);
    if (!get && st >= 200 && st < 300) {
        d->seen_gen = vault_service_generation(d->svc);
        httpd__wake(d, false);
    }
}

static void httpd__on_body(struct al_http_req *req, int err)
{
    struct vault_httpd *d = req->user;
    req->user = NULL;
    if (err < 0) {
        al_buf_free_wipe(&req->body);
        return; /* the server has answered (413) or the peer is gone */
    }
    struct al_error e = {0};
    json_t *body = req->body.len ? al_json_parse(req->body.data, req->body.len, &e) : NULL;
    /* The raw body may hold a value (base64): wipe it now that it is parsed. */
    if (req->body.data)
        sodium_memzero(req->body.data, req->body.len);
    httpd__dispatch(d, req, body);
    json_decref(body); /* wiped on free (vault_harden_process) */
}

static void httpd__on_request(struct al_http_req *req, void *ctx)
{
    struct vault_httpd *d = ctx;
    if (!req->peer.is_unix) {
        al_http_reply_error(req, 403, "the vault API is served on its unix socket only");
        return;
    }
    if (vault_api_wants_body(req->method)) {
        req->user = d;
        if (al_http_req_read_body(req, HTTPD__BODY_MAX, httpd__on_body) != 0) {
            req->user = NULL;
            al_http_reply_error(req, 400, "cannot read the request body");
        }
        return;
    }
    httpd__dispatch(d, req, NULL);
}

int vault_httpd_start(uv_loop_t *loop, const struct vault_httpd_opts *opts,
                      struct vault_httpd **out, struct al_error *err)
{
    struct vault_httpd *d = calloc(1, sizeof *d);
    if (!d)
        return al_error_set(err, -ENOMEM, "out of memory");
    d->loop = loop;
    d->svc = opts->svc;
    d->store = opts->store;
    d->seen_gen = vault_service_generation(opts->svc);
    struct al_http_server_opts o = {
        .limits = {.max_body_bytes = HTTPD__BODY_MAX, .max_connections = 256},
        .on_request = httpd__on_request,
        .ctx = d,
        .server_name = "airlock-vault",
    };
    int rc = al_http_server_new(loop, &o, &d->srv);
    if (rc) {
        free(d);
        return al_error_set(err, rc, "cannot create the HTTP server: %s", strerror(-rc));
    }
    rc = al_http_server_listen_unix(d->srv, opts->sock, opts->mode, err);
    if (rc) {
        al_http_server_close(d->srv, NULL, NULL);
        free(d);
        return rc;
    }
    uv_timer_init(loop, &d->tick);
    d->tick.data = d;
    uv_timer_start(&d->tick, httpd__on_tick, HTTPD__TICK_MS, HTTPD__TICK_MS);
    d->tick_started = true;
    *out = d;
    return 0;
}

static void httpd__tick_closed(uv_handle_t *h)
{
    struct vault_httpd *d = h->data;
    void (*cb)(void *) = d->closed;
    void *arg = d->closed_arg;
    free(d);
    if (cb)
        cb(arg);
}

static void httpd__server_closed(void *arg)
{
    struct vault_httpd *d = arg;
    uv_close((uv_handle_t *)&d->tick, httpd__tick_closed);
}

void vault_httpd_stop(struct vault_httpd *d, void (*done)(void *arg), void *arg)
{
    d->closed = done;
    d->closed_arg = arg;
    uv_timer_stop(&d->tick);
    /* parked long-polls get their (empty) answer before the connections close */
    struct httpd__waiter *w = d->waiters;
    while (w) {
        struct httpd__waiter *next = w->next;
        httpd__answer_waiter(w, true);
        w = next;
    }
    al_http_server_close(d->srv, httpd__server_closed, d);
}
