/* vmm/api: airlock-vmm's control API, HTTP/1.1 + JSON on <sandbox dir>/vmm.sock (mode
 * 0600; only callers with the uid of airlock-vmm or root are served, checked with
 * SO_PEERCRED).
 *
 *   GET  /status  200 {"id","backend","state","healthy","agent_pid","vmm_pid",
 *                      "agent_socket","log","started_at","uptime_ms","startup_ms"?,"template"}
 *   GET  /stats   200 {"state","cpu_usage_ns","cpus","memory_bytes","memory_peak_bytes",
 *                      "memory_limit_bytes","oom_kills","pids","pids_limit",
 *                      "disk_used_bytes","disk_total_bytes","log_bytes","log_dropped_bytes"}
 *   POST /pause   204; 409 if already paused; 409 if not running
 *   POST /resume  204; 409 if not paused
 *   POST /snapshot  (backends that can: kvm) body {"path": "/new/dir"}: the sandbox's full
 *                 state written there; 200 {"path","ms","memory_file_bytes"}; the API
 *                 answers nothing else while it is written; 501 for other backends
 *   POST /rollback  (backends that can: jail) body {"path": "/snapshot/dir", "access_token":
 *                 "..."}: the sandbox's file system replaced by that snapshot of its own
 *                 (POST /snapshot), its processes killed and the agent started again with
 *                 the token given (this process does not keep it); 200 {"path","ms",
 *                 "stop_ms","restore_ms"} once the new agent answers /health; 400 a snapshot
 *                 it cannot roll back to (nothing changed), 409 paused / not running /
 *                 another rollback under way, 500 it failed (after the kill: the sandbox
 *                 stops), 501 other backends. The API answers nothing else during the copy
 *   POST /stop    body optional {"grace_ms": N} (SIGTERM, N ms, then SIGKILL; default 0)
 *                 204 once every process is gone and everything is reclaimed; then
 *                 airlock-vmm exits (status 0)
 * Errors: {"code": <status>, "message": "..."} (404 unknown path, 405 wrong method).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <unistd.h>

#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "vmm.h"

#define API_MAX_STOP_WAITERS 16

struct vmm_api {
    struct vmm *v;
    struct al_http_server *srv;
    struct al_http_req *rollback_req; /* waits for the new agent's /health */
    struct al_http_req *stop_waiters[API_MAX_STOP_WAITERS];
    size_t n_waiters;
    void (*done)(struct vmm *v);
};

static void api__waiter_gone(struct al_http_req *req)
{
    struct vmm_api *a = req->user;
    for (size_t i = 0; i < a->n_waiters; i++) {
        if (a->stop_waiters[i] == req) {
            a->stop_waiters[i] = a->stop_waiters[--a->n_waiters];
            return;
        }
    }
}

static void api__reply_err(struct al_http_req *req, const struct al_error *err)
{
    int status = err->code == -EALREADY || err->code == -EINVAL || err->code == -EBUSY ? 409 : 500;
    al_http_reply_error(req, status, "%s", al_error_str(err));
}

static void api__stop_body(struct al_http_req *req, int rc)
{
    struct vmm_api *a = req->user;
    struct vmm *v = a->v;
    if (rc < 0)
        return; /* the server answered (413) or the peer is gone */
    uint32_t grace = 0;
    if (req->body.len) {
        struct al_error err = {0};
        json_t *b = al_json_parse(req->body.data, req->body.len, &err);
        static const char *const keys[] = {"grace_ms", NULL};
        int64_t g = 0;
        if (!b || al_json_check_keys(b, keys, "stop request", &err) ||
            al_json_get_int(b, "grace_ms", false, 0, 60000, &g, "stop request", &err)) {
            json_decref(b);
            al_http_reply_error(req, 400, "%s", al_error_str(&err));
            return;
        }
        json_decref(b);
        grace = (uint32_t)g;
    }
    if (v->state == VMM_STOPPED) {
        al_http_reply(req, 204, NULL, NULL, 0);
        return;
    }
    if (a->n_waiters >= API_MAX_STOP_WAITERS) {
        al_http_reply_error(req, 503, "too many stop requests in flight");
        return;
    }
    a->stop_waiters[a->n_waiters++] = req;
    al_http_req_on_close(req, api__waiter_gone);
    vmm_stop(v, grace, VMM_EXIT_STOPPED);
}

static void api__snapshot_body(struct al_http_req *req, int rc)
{
    struct vmm_api *a = req->user;
    struct vmm *v = a->v;
    if (rc < 0)
        return;
    struct al_error err = {0};
    json_t *b = req->body.len ? al_json_parse(req->body.data, req->body.len, &err) : NULL;
    static const char *const keys[] = {"path", NULL};
    const char *path = NULL;
    if (!b || al_json_check_keys(b, keys, "snapshot request", &err) ||
        al_json_get_str(b, "path", true, &path, "snapshot request", &err)) {
        json_decref(b);
        al_http_reply_error(req, 400, "%s",
                            req->body.len ? al_error_str(&err)
                                          : "the body must be {\"path\": \"/new/dir\"}");
        return;
    }
    if (v->state != VMM_RUNNING && v->state != VMM_PAUSED) {
        json_decref(b);
        al_http_reply_error(req, 409, "sandbox %s is %s", v->spec.id, vmm_state_name(v->state));
        return;
    }
    if (v->rollback_done) {
        json_decref(b);
        al_http_reply_error(req, 409, "sandbox %s is being rolled back", v->spec.id);
        return;
    }
    json_t *info = NULL;
    rc = v->backend->snapshot(v->priv, path, &info, &err);
    json_decref(b);
    if (rc)
        al_http_reply_error(req, rc == -EEXIST || rc == -EINVAL ? 400 : 500, "%s",
                            al_error_str(&err));
    else
        al_http_reply_json(req, 200, info);
}

static void api__rollback_gone(struct al_http_req *req)
{
    struct vmm_api *a = req->user;
    if (a->rollback_req == req)
        a->rollback_req = NULL;
}

static void api__rollback_done(struct vmm *v, int rc, json_t *info, const char *msg)
{
    struct vmm_api *a = v->api;
    struct al_http_req *req = a ? a->rollback_req : NULL;
    if (a)
        a->rollback_req = NULL;
    if (!req) {
        json_decref(info); /* the caller went away; the rollback happened all the same */
        return;
    }
    if (rc)
        al_http_reply_error(req, 500, "%s", msg ? msg : strerror(-rc));
    else
        al_http_reply_json(req, 200, info);
}

static void api__rollback_body(struct al_http_req *req, int rc)
{
    struct vmm_api *a = req->user;
    struct vmm *v = a->v;
    if (rc < 0)
        return;
    struct al_error err = {0};
    json_t *b = req->body.len ? al_json_parse(req->body.data, req->body.len, &err) : NULL;
    if (req->body.len)
        sodium_memzero(req->body.data, req->body.len); /* the access token */
    static const char *const keys[] = {"path", "access_token", NULL};
    const char *path = NULL, *token = NULL;
    if (!b || al_json_check_keys(b, keys, "rollback request", &err) ||
        al_json_get_str(b, "path", true, &path, "rollback request", &err) ||
        al_json_get_str(b, "access_token", false, &token, "rollback request", &err)) {
        json_decref(b);
        al_http_reply_error(req, 400, "%s",
                            req->body.len ? al_error_str(&err)
                                          : "the body must be {\"path\": \"/snapshot/dir\", "
                                            "\"access_token\": \"...\"}");
        return;
    }
    if (a->rollback_req) {
        json_decref(b);
        al_http_reply_error(req, 409, "sandbox %s is being rolled back already", v->spec.id);
        return;
    }
    a->rollback_req = req;
    al_http_req_on_close(req, api__rollback_gone);
    rc = vmm_rollback(v, path, token, api__rollback_done, &err);
    json_decref(b);
    if (rc) {
        a->rollback_req = NULL;
        int status = rc == -ENOTSUP                    ? 501
                     : rc == -EBUSY || rc == -EALREADY ? 409
                     : rc == -EINVAL                   ? 400
                                                       : 500;
        al_http_reply_error(req, status, "%s", al_error_str(&err));
    }
}

static bool api__peer_ok(const struct al_http_req *req)
{
    return req->peer.is_unix && (req->peer.uid == 0 || req->peer.uid == geteuid());
}

static void api__on_request(struct al_http_req *req, void *ctx)
{
    struct vmm_api *a = ctx;
    struct vmm *v = a->v;
    req->user = a;
    if (!api__peer_ok(req)) {
        al_http_reply_error(req, 403, "only root or the owner of airlock-vmm may use this API");
        return;
    }
    const char *m = req->method, *p = req->path;
    bool get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0;
    struct al_error err = {0};
    if (strcmp(p, "/status") == 0) {
        if (!get)
            goto method;
        al_http_reply_json(req, 200, vmm_status_json(v));
    } else if (strcmp(p, "/stats") == 0) {
        if (!get)
            goto method;
        al_http_reply_json(req, 200, vmm_stats_json(v));
    } else if (strcmp(p, "/pause") == 0) {
        if (!post)
            goto method;
        if (vmm_pause(v, &err))
            api__reply_err(req, &err);
        else
            al_http_reply(req, 204, NULL, NULL, 0);
    } else if (strcmp(p, "/resume") == 0) {
        if (!post)
            goto method;
        if (vmm_resume(v, &err))
            api__reply_err(req, &err);
        else
            al_http_reply(req, 204, NULL, NULL, 0);
    } else if (strcmp(p, "/snapshot") == 0) {
        if (!post)
            goto method;
        if (!v->backend->snapshot)
            al_http_reply_error(req, 501, "the %s backend cannot take snapshots", v->backend->name);
        else if (al_http_req_read_body(req, 4096, api__snapshot_body) < 0)
            al_http_reply_error(req, 400, "cannot read the request body");
    } else if (strcmp(p, "/rollback") == 0) {
        if (!post)
            goto method;
        if (!v->backend->rollback)
            al_http_reply_error(req, 501, "the %s backend has no rollback", v->backend->name);
        else if (al_http_req_read_body(req, 4096, api__rollback_body) < 0)
            al_http_reply_error(req, 400, "cannot read the request body");
    } else if (strcmp(p, "/stop") == 0) {
        if (!post)
            goto method;
        if (al_http_req_read_body(req, 4096, api__stop_body) < 0)
            al_http_reply_error(req, 400, "cannot read the request body");
    } else {
        al_http_reply_error(req, 404,
                            "no such endpoint %s (try GET /status, GET /stats, POST "
                            "/pause, /resume, /snapshot, /rollback, /stop)",
                            p);
    }
    return;
method:
    al_http_reply_error(req, 405, "%s is not allowed on %s", m, p);
}

int vmm_api_start(struct vmm *v, struct al_error *err)
{
    struct vmm_api *a = calloc(1, sizeof *a);
    if (!a)
        return al_error_set(err, -ENOMEM, "out of memory");
    a->v = v;
    struct al_http_server_opts o = {
        .limits = {.max_body_bytes = 4096, .max_connections = 64},
        .on_request = api__on_request,
        .ctx = a,
        .server_name = "airlock-vmm",
    };
    int rc = al_http_server_new(v->loop, &o, &a->srv);
    if (rc) {
        free(a);
        return al_error_set(err, rc, "cannot create the API server: %s", strerror(-rc));
    }
    rc = al_http_server_listen_unix(a->srv, v->api_sock, 0600, err);
    if (rc) {
        al_http_server_close(a->srv, NULL, NULL);
        free(a);
        return rc;
    }
    v->api = a;
    return 0;
}

static void api__closed(void *arg)
{
    struct vmm_api *a = arg;
    struct vmm *v = a->v;
    void (*done)(struct vmm *) = a->done;
    v->api = NULL;
    free(a);
    if (done)
        done(v);
}

static void api__free_handle(uv_handle_t *h)
{
    free(h);
}

static void api__close_timer(uv_timer_t *t)
{
    struct vmm_api *a = t->data;
    uv_close((uv_handle_t *)t, api__free_handle);
    al_http_server_close(a->srv, api__closed, a);
}

void vmm_api_finish(struct vmm *v, void (*done)(struct vmm *v))
{
    struct vmm_api *a = v->api;
    a->done = done;
    while (a->n_waiters) {
        struct al_http_req *req = a->stop_waiters[--a->n_waiters];
        al_http_reply(req, 204, NULL, NULL, 0);
    }
    /* Give the answers a moment to reach their callers before the connections close. */
    uv_timer_t *t = malloc(sizeof *t);
    if (!t) {
        al_http_server_close(a->srv, api__closed, a);
        return;
    }
    uv_timer_init(v->loop, t);
    t->data = a;
    uv_timer_start(t, api__close_timer, 20, 0);
}
