/* controlplane/cluster_gw: a gateway's E2B API (cluster.role: gateway, docs/cluster.md).
 *
 * Owns: creations (POST /sandboxes, /v2/sandboxes): the body read whole, a placement under a
 * reservation id (cluster_db's one statement, on cluster.c's thread), the create sent to the
 * chosen node with the cluster token, and on success the placement named after the sandbox
 * the node made and the route cached; a start that fails on the node (no answer, or a 5xx)
 * books the capacity back and is tried once more on another node. Routing: every request of
 * one sandbox's control plane (/sandboxes/{id}/...) and data plane (E2b-Sandbox-Id, a
 * "<port>-<id>.<domain>" Host) goes to the node that owns it, through common/http_forward
 * (the one streaming forwarder); the route map (sandbox -> node) is cached here and the
 * nodes' leases come from cluster.c's snapshot, so that a database outage stops creations
 * (503) but not the traffic of sandboxes already routed. A sandbox whose node lost its lease
 * is gone: 404 on the control plane, E2B's 502 "The sandbox was not found" on the data plane.
 * A kill the node confirms forgets the placement and the route. The lists that span nodes
 * (GET /sandboxes, /v2/sandboxes, /sandboxes/metrics): each live node asked the client's
 * question, the answers merged in controlplane/list's order with its page tokens.
 */
#include <errno.h>
#include <jansson.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cluster.h"
#include "cluster_tls.h"
#include "common/http_forward.h"
#include "common/http_head.h"
#include "common/log.h"
#include "cp.h"
#include "ids.h"
#include "list.h"
#include "map.h"
#include "record.h"

#define GW_TIMEOUT_MS   120000 /* a forwarded request: connect and response head */
#define GW_CREATE_MS    300000 /* a creation on a node (a template may be pulled first) */
#define GW_MAX_BODY     (1u << 20)
#define GW_MAX_ROUTES   200000 /* cached routes; beyond, the cache starts again */
#define GW_MAX_RESPONSE (1u << 20)
#define GW_NODE_HEADERS 32
#define GW_MAX_LIST     (32u << 20) /* one node's list (v1 lists have no pages) */

/* The gateway's state (cluster.c holds it for the loop). */
struct cp_cluster_gw {
    struct cp_map routes; /* sandbox id -> struct gw_route */
};

struct gw_route {
    char node_id[CP_CLUSTER_NODE_ID_MAX];
    char address[CP_CLUSTER_ADDRESS_MAX];
};

static struct cp_cluster_gw *gw__state(struct cp *cp)
{
    void **slot = cp_cluster_gw_slot(cp);
    if (!slot)
        return NULL;
    if (!*slot) {
        struct cp_cluster_gw *g = calloc(1, sizeof *g);
        if (!g)
            return NULL;
        cp_map_init(&g->routes);
        *slot = g;
    }
    return *slot;
}

static int gw__free_route(void *v, void *arg)
{
    (void)arg;
    free(v);
    return 0;
}

static void gw__remember(struct cp *cp, const char *id, const char *node_id, const char *address)
{
    struct cp_cluster_gw *g = gw__state(cp);
    if (!g)
        return;
    free(cp_map_del(&g->routes, id, strlen(id)));
    if (cp_map_count(&g->routes) >= GW_MAX_ROUTES) {
        cp_map_foreach(&g->routes, gw__free_route, NULL);
        cp_map_free(&g->routes);
        cp_map_init(&g->routes);
    }
    struct gw_route *r = calloc(1, sizeof *r);
    if (!r)
        return;
    snprintf(r->node_id, sizeof r->node_id, "%s", node_id);
    snprintf(r->address, sizeof r->address, "%s", address);
    if (cp_map_put(&g->routes, id, strlen(id), r))
        free(r);
}

void cp_cluster_gw_forget(struct cp *cp, const char *sandbox_id)
{
    struct cp_cluster_gw *g = gw__state(cp);
    if (g)
        free(cp_map_del(&g->routes, sandbox_id, strlen(sandbox_id)));
}

void cp_cluster_gw_close(struct cp *cp)
{
    void **slot = cp_cluster_gw_slot(cp);
    struct cp_cluster_gw *g = slot ? *slot : NULL;
    if (!g)
        return;
    cp_map_foreach(&g->routes, gw__free_route, NULL);
    cp_map_free(&g->routes);
    free(g);
    *slot = NULL;
}

/* The end of a placement, without waiting for it (a kill the node confirmed, a failed
 * start): the thread books the capacity back. */
static void gw__unplace(struct cp *cp, const char *id)
{
    struct cp_cluster_job *j = calloc(1, sizeof *j);
    if (!j)
        return;
    j->kind = CP_CLUSTER_JOB_UNPLACE;
    snprintf(j->sandbox_id, sizeof j->sandbox_id, "%s", id);
    if (cp_cluster_submit(cp, j))
        free(j);
}

/* ---- routing ------------------------------------------------------------------------------- */

/* One request of a sandbox on its way to the owner node. */
struct gw_fwd {
    struct cp *cp;
    struct al_http_req *req; /* NULL once the client left (while the owner was looked up) */
    struct cp_cluster_job job;
    bool data;      /* data plane: "gone" is E2B's proxy's 502 */
    bool by_host;   /* routed by a "<port>-<id>" Host: the node gets the sandbox headers */
    bool is_delete; /* DELETE /sandboxes/{id}: a confirmed kill ends the placement */
    char id[64], port[8];
    char node_id[CP_CLUSTER_NODE_ID_MAX];
};

static void gw__gone(struct gw_fwd *f, const char *why)
{
    al_info("gateway: sandbox %s: %s", f->id, why);
    if (f->data)
        cp_proxy_not_found(f->cp, f->req, f->id);
    else
        cp_rest_error(f->req, 404, "sandbox \"%s\" not found (%s)", f->id, why);
}

static int gw__request_field(void *arg, const char *name, const char **value, char **owned)
{
    (void)value;
    (void)owned;
    const struct gw_fwd *f = arg;
    /* The token is the gateway's to give, never a client's to pass on. */
    if (strcasecmp(name, CP_CLUSTER_TOKEN_HEADER) == 0)
        return 1;
    if (f->by_host &&
        (strcasecmp(name, "E2b-Sandbox-Id") == 0 || strcasecmp(name, "E2b-Sandbox-Port") == 0))
        return 1;
    return 0;
}

static int gw__response_field(void *arg, bool upgrade, const char *name, const char **value,
                              char **owned)
{
    (void)arg;
    (void)value;
    (void)owned;
    /* Date and Server are the gateway's own. */
    return !upgrade && (strcasecmp(name, "Date") == 0 || strcasecmp(name, "Server") == 0);
}

static int gw__fail(void *arg, const struct al_http_req *req, int err, const char *why, char *msg,
                    size_t len)
{
    const struct gw_fwd *f = arg;
    (void)err;
    al_info("gateway: %s %.120s for sandbox %s: its node %s did not answer: %s", req->method,
            req->path, f->id, f->node_id, why);
    snprintf(msg, len, "sandbox %s: its node %s cannot be reached: %s", f->id, f->node_id, why);
    return 502;
}

static void gw__reply(void *arg, struct al_http_req *req, int status, const char *msg)
{
    (void)arg;
    cp_rest_error(req, status, "%s", msg);
}

static void gw__end(void *arg, int status)
{
    struct gw_fwd *f = arg;
    /* The node no longer has it (killed now, or gone before): so is the placement. */
    if (f->is_delete && (status == 204 || status == 404)) {
        gw__unplace(f->cp, f->id);
        cp_cluster_gw_forget(f->cp, f->id);
    }
    free(f);
}

static void gw__forward(struct gw_fwd *f, const char *address)
{
    struct al_http_req *req = f->req;
    al_http_req_on_close(req, NULL);
    req->user = NULL;
    char target[CP_CLUSTER_TARGET_MAX];
    const char *targets[] = {target};
    char label[96];
    snprintf(label, sizeof label, "node %s", f->node_id);
    const struct al_http_header extra[] = {{"E2b-Sandbox-Id", f->id},
                                           {"E2b-Sandbox-Port", f->port},
                                           {CP_CLUSTER_TOKEN_HEADER, cp_cluster_token(f->cp)}};
    bool token = cp_cluster_token(f->cp)[0] != '\0'; /* none with mutual TLS alone */
    struct al_http_forward_opts o = {
        .targets = targets,
        .n_targets = 1,
        .request_field = gw__request_field,
        .request_extra = extra + (f->by_host ? 0 : 2),
        .n_request_extra = (f->by_host ? 2u : 0u) + token,
        .response_field = gw__response_field,
        .timeout_ms = GW_TIMEOUT_MS,
        .pool = f->cp->pool,
        .fail = gw__fail,
        .reply = gw__reply,
        .on_end = gw__end,
        .arg = f,
        .label = label,
    };
    char f_node[CP_CLUSTER_NODE_ID_MAX];
    snprintf(f_node, sizeof f_node, "%s", f->node_id);
    int rc = cp_cluster_tls_target(f->cp, f->node_id, address, target, sizeof target);
    if (rc == 0)
        rc = al_http_forward(f->cp->loop, req, &o);
    if (rc == 0)
        return;
    free(f);
    if (rc == -E2BIG)
        cp_rest_error(req, 431, "too many request headers");
    else if (rc == -ENOMEM)
        cp_rest_error(req, 500, "out of memory");
    else
        cp_rest_error(req, 502, "cannot reach node %s (%s): %s", f_node, address, strerror(-rc));
}

static void gw__lookup(struct gw_fwd *f);

/* Where the route points, once the owner is known: its node's lease decides, as the
 * gateway's snapshot of the leases has it. A snapshot that does not know the node is older
 * than the node's registration: the database is asked (looked_up false), or, when it has
 * just answered that the lease is valid, believed. */
static void gw__to_node(struct gw_fwd *f, const char *node_id, const char *address, bool looked_up)
{
    snprintf(f->node_id, sizeof f->node_id, "%s", node_id);
    char addr[CP_CLUSTER_ADDRESS_MAX];
    bool live = false;
    int rc = cp_cluster_node_state(f->cp, node_id, addr, sizeof addr, &live);
    if (rc == -ENOENT && !looked_up) {
        gw__lookup(f);
        return;
    }
    if (rc == 0 && !live) {
        char why[160];
        snprintf(why, sizeof why, "its node %s lost its lease", node_id);
        cp_cluster_gw_forget(f->cp, f->id);
        gw__gone(f, why);
        free(f);
        return;
    }
    /* No snapshot yet (a gateway that just started), or one older than the node: the
     * owner's own answer counts. */
    gw__forward(f, rc == 0 ? addr : address);
}

static void gw__closed(struct al_http_req *req)
{
    struct gw_fwd *f = req->user;
    if (f)
        f->req = NULL;
}

static void gw__owner_done(struct cp_cluster_job *j, void *arg)
{
    struct gw_fwd *f = arg;
    if (!f->req) {
        free(f);
        return;
    }
    if (j->rc == -ENOENT) {
        al_http_req_on_close(f->req, NULL);
        gw__gone(f, "no node has it");
        free(f);
        return;
    }
    if (j->rc) {
        al_http_req_on_close(f->req, NULL);
        cp_rest_error(f->req, 503,
                      "sandbox %s: its node cannot be looked up (%s); routes this gateway "
                      "used before keep working",
                      f->id, j->msg);
        free(f);
        return;
    }
    if (!j->owner.lease_valid) {
        char why[160];
        snprintf(why, sizeof why, "its node %s lost its lease", j->owner.node_id);
        al_http_req_on_close(f->req, NULL);
        gw__gone(f, why);
        free(f);
        return;
    }
    gw__remember(f->cp, f->id, j->owner.node_id, j->owner.address);
    gw__to_node(f, j->owner.node_id, j->owner.address, true);
}

/* What a request to route is (gw__route). */
struct gw_route_opts {
    const char *id;   /* the sandbox */
    bool data;        /* data plane: "gone" is E2B's proxy's 502 */
    bool by_host;     /* named by a "<port>-<id>" Host: the node gets the sandbox headers */
    const char *port; /* the sandbox port (the node gets it when by_host) */
    bool is_delete;   /* DELETE /sandboxes/{id}: a confirmed kill ends the placement */
};

/* Routes req to the node of o->id's sandbox (cache, else the database). */
static void gw__route(struct cp *cp, struct al_http_req *req, const struct gw_route_opts *o)
{
    const char *id = o->id ? o->id : "";
    struct gw_fwd *f = calloc(1, sizeof *f);
    if (!f) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    f->cp = cp;
    f->req = req;
    f->data = o->data;
    f->by_host = o->by_host;
    f->is_delete = o->is_delete;
    snprintf(f->id, sizeof f->id, "%s", id);
    snprintf(f->port, sizeof f->port, "%s", o->port ? o->port : "");
    if (!cp_sandbox_id_valid(id)) {
        gw__gone(f, "not a sandbox id");
        free(f);
        return;
    }
    struct cp_cluster_gw *g = gw__state(cp);
    const struct gw_route *r = g ? cp_map_get(&g->routes, id, strlen(id)) : NULL;
    if (r) {
        gw__to_node(f, r->node_id, r->address, false);
        return;
    }
    gw__lookup(f);
}

/* The owner of f's sandbox from the database (cluster.c's thread), then gw__owner_done. */
static void gw__lookup(struct gw_fwd *f)
{
    struct al_http_req *req = f->req;
    memset(&f->job, 0, sizeof f->job);
    f->job.kind = CP_CLUSTER_JOB_OWNER;
    snprintf(f->job.sandbox_id, sizeof f->job.sandbox_id, "%s", f->id);
    f->job.done = gw__owner_done;
    f->job.arg = f;
    req->user = f;
    al_http_req_on_close(req, gw__closed);
    if (cp_cluster_submit(f->cp, &f->job)) {
        al_http_req_on_close(req, NULL);
        req->user = NULL;
        free(f);
        cp_rest_error(req, 503, "this gateway has no cluster database");
    }
}

bool cp_cluster_gw_data(struct cp *cp, struct al_http_req *req)
{
    if (cp->cfg.cluster_role != CP_CLUSTER_GATEWAY)
        return false;
    size_t nid = al_http_req_header_count(req, "E2b-Sandbox-Id");
    if (nid > 1) {
        cp_rest_error(req, 400, "more than one E2b-Sandbox-Id header");
        return true;
    }
    if (nid == 1) {
        const char *port = al_http_req_header(req, "E2b-Sandbox-Port");
        gw__route(cp, req,
                  &(struct gw_route_opts){
                      .id = al_http_req_header(req, "E2b-Sandbox-Id"), .data = true, .port = port});
        return true;
    }
    char port[8], id[64];
    if (!cp_proxy_host_parse(cp, req, port, sizeof port, id, sizeof id))
        return false;
    gw__route(cp, req,
              &(struct gw_route_opts){.id = id, .data = true, .by_host = true, .port = port});
    return true;
}

/* The fields a request the gateway makes of a node carries (hdr has GW_NODE_HEADERS
 * slots): the client's end-to-end ones (its API key among them: the node authenticates it
 * too), without Host (the node's), Expect and the framing, and the gateway's token. The
 * values point into req. Returns how many. */
static size_t gw__node_headers(struct cp *cp, const struct al_http_req *req,
                               struct al_http_header *hdr)
{
    size_t n = 0;
    for (size_t i = 0; i < req->n_headers && n < GW_NODE_HEADERS - 1; i++) {
        const char *name = req->headers[i].name;
        if (al_http_forward_drops_header(req->headers, req->n_headers, name, 0) ||
            strcasecmp(name, "Host") == 0 || strcasecmp(name, "Expect") == 0 ||
            strcasecmp(name, CP_CLUSTER_TOKEN_HEADER) == 0)
            continue;
        hdr[n++] = req->headers[i];
    }
    if (cp_cluster_token(cp)[0]) /* none with mutual TLS alone */
        hdr[n++] = (struct al_http_header){CP_CLUSTER_TOKEN_HEADER, cp_cluster_token(cp)};
    return n;
}

/* ---- creations ----------------------------------------------------------------------------- */

/* A creation on its way: placed, sent to a node, perhaps placed again. */
struct gw_create {
    struct cp *cp;
    struct al_http_req *req; /* NULL once the client left */
    struct cp_cluster_job job;
    char reservation[64];
    char path[128];
    char template_id[160];
    char tried[2][CP_CLUSTER_NODE_ID_MAX];
    int attempts;
    char node_id[CP_CLUSTER_NODE_ID_MAX], address[CP_CLUSTER_ADDRESS_MAX];
    /* the client's fields the node gets, and the token */
    struct al_http_header hdr[GW_NODE_HEADERS];
    size_t n_hdr;
    /* the node's answer */
    int status;
    char content_type[128];
    struct al_buf resp;
    bool too_big;
    char sandbox_id[64];
    char failed[400]; /* why the start failed on tried[0], for the answer after the retry */
};

static void gw__create_free(struct gw_create *c)
{
    al_buf_free_wipe(&c->resp); /* the sandbox's access tokens */
    free(c);
}

static void gw__create_closed(struct al_http_req *req)
{
    struct gw_create *c = req->user;
    if (c)
        c->req = NULL;
}

/* Relays the node's answer to the client (if it is still there) and ends the creation. */
static void gw__create_relay(struct gw_create *c)
{
    if (c->req) {
        al_http_req_on_close(c->req, NULL);
        c->req->user = NULL;
        al_http_reply(c->req, c->status, c->content_type[0] ? c->content_type : "application/json",
                      c->resp.data ? c->resp.data : "", c->resp.len);
    }
    gw__create_free(c);
}

/* Answers the client with an error of the gateway's and ends the creation. */
static void gw__create_fail(struct gw_create *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void gw__create_fail(struct gw_create *c, int status, const char *fmt, ...)
{
    if (c->req) {
        al_http_req_on_close(c->req, NULL);
        c->req->user = NULL;
        char m[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        cp_rest_error(c->req, status, "%s", m);
    }
    gw__create_free(c);
}

static void gw__place(struct gw_create *c);

static void gw__renamed(struct cp_cluster_job *j, void *arg)
{
    struct gw_create *c = arg;
    if (j->rc)
        al_warn("gateway: sandbox %s on node %s: its placement could not be named after it "
                "(%s); the node's heartbeats reconcile it",
                c->sandbox_id, c->node_id, j->msg);
    gw__create_relay(c);
}

static int gw__create_response(struct al_http_creq *q, int status, const struct al_http_header *h,
                               size_t n, void *arg)
{
    (void)q;
    struct gw_create *c = arg;
    c->status = status;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(h[i].name, "Content-Type") == 0)
            snprintf(c->content_type, sizeof c->content_type, "%s", h[i].value);
    return 0;
}

static int gw__create_data(struct al_http_creq *q, const char *data, size_t len, void *arg)
{
    (void)q;
    struct gw_create *c = arg;
    if (c->resp.len + len > GW_MAX_RESPONSE) {
        c->too_big = true;
        return 0;
    }
    if (al_buf_append(&c->resp, data, len))
        c->too_big = true;
    return 0;
}

/* The node's answer to the create. */
static void gw__create_done(struct al_http_creq *q, int err, void *arg)
{
    struct gw_create *c = arg;
    const char *why = err ? al_http_creq_strerror(q) : "";
    if (!err && c->too_big) {
        err = -E2BIG;
        why = "its answer is too large";
    }
    if (!err && c->status >= 200 && c->status < 300) {
        json_t *b = json_loadb(c->resp.data ? c->resp.data : "", c->resp.len, 0, NULL);
        const char *sid = json_string_value(json_object_get(b, "sandboxID"));
        if (sid && cp_sandbox_id_valid(sid)) {
            snprintf(c->sandbox_id, sizeof c->sandbox_id, "%s", sid);
            json_decref(b);
            gw__remember(c->cp, c->sandbox_id, c->node_id, c->address);
            al_info("gateway: sandbox %s (template %s) created on node %s", c->sandbox_id,
                    c->template_id, c->node_id);
            memset(&c->job, 0, sizeof c->job);
            c->job.kind = CP_CLUSTER_JOB_RENAME;
            snprintf(c->job.sandbox_id, sizeof c->job.sandbox_id, "%s", c->reservation);
            snprintf(c->job.to_id, sizeof c->job.to_id, "%s", c->sandbox_id);
            c->job.done = gw__renamed;
            c->job.arg = c;
            if (cp_cluster_submit(c->cp, &c->job))
                gw__create_relay(c);
            return;
        }
        json_decref(b);
        err = -EPROTO;
        why = "its answer names no sandbox";
    }
    /* The node did not start it: its booking goes back. */
    gw__unplace(c->cp, c->reservation);
    if (!err && c->status < 500) {
        /* The client's mistake (or its key's): the node's answer is the client's. */
        gw__create_relay(c);
        return;
    }
    char what[400];
    if (err) {
        snprintf(what, sizeof what, "%s", why);
    } else {
        /* The node's (or its connector's, cluster_tls.c) E2B error message says why. */
        json_t *b = json_loadb(c->resp.data ? c->resp.data : "", c->resp.len, 0, NULL);
        const char *m = json_string_value(json_object_get(b, "message"));
        snprintf(what, sizeof what, "it answered %d%s%.300s", c->status, m ? ": " : "", m ? m : "");
        json_decref(b);
    }
    if (c->attempts == 1)
        snprintf(c->failed, sizeof c->failed, "%s", what);
    al_warn("gateway: creating a sandbox of template %s on node %s failed: %s%s", c->template_id,
            c->node_id, what, c->attempts < 2 ? "; trying another node" : "");
    if (c->attempts < 2) {
        gw__place(c);
        return;
    }
    if (!err) {
        gw__create_relay(c); /* the last node's own answer */
        return;
    }
    gw__create_fail(c, 502, "the sandbox could not be started on node %s nor on node %s: %s",
                    c->tried[0], c->node_id, what);
}

static void gw__send(struct gw_create *c)
{
    c->status = 0;
    c->content_type[0] = '\0';
    c->too_big = false;
    al_buf_free_wipe(&c->resp);
    c->resp = (struct al_buf)AL_BUF_INIT;
    char target[CP_CLUSTER_TARGET_MAX];
    struct al_http_creq_opts o = {
        .target = target,
        .method = "POST",
        .path = c->path,
        .headers = c->hdr,
        .n_headers = c->n_hdr,
        .body = c->req->body.data,
        .body_len = c->req->body.len,
        .timeout_ms = GW_CREATE_MS,
        .on_response = gw__create_response,
        .on_data = gw__create_data,
        .on_done = gw__create_done,
        .arg = c,
        .wipe = true,
    };
    struct al_http_creq *q = NULL;
    int rc = cp_cluster_tls_target(c->cp, c->node_id, c->address, target, sizeof target);
    if (rc == 0)
        rc = al_http_creq_start(c->cp->loop, &o, &q);
    if (rc) {
        gw__unplace(c->cp, c->reservation);
        gw__create_fail(c, 502, "cannot send the creation to node %s (%s): %s", c->node_id,
                        c->address, strerror(-rc));
    }
}

static void gw__placed(struct cp_cluster_job *j, void *arg)
{
    struct gw_create *c = arg;
    if (j->rc == 0 && !c->req) {
        /* The client left: nothing is started for nobody. */
        gw__unplace(c->cp, c->reservation);
        gw__create_free(c);
        return;
    }
    if (!c->req) {
        gw__create_free(c);
        return;
    }
    if (j->rc) {
        int status = j->rc == -ENOENT ? 404 : j->rc == -EINVAL ? 400 : 503;
        if (c->attempts > 1 && j->rc == -ENOSPC)
            gw__create_fail(c, 503, "%s (the start failed on node %s: %s)", j->msg, c->tried[0],
                            c->failed);
        else if (j->rc == -ENOTCONN)
            gw__create_fail(c, 503, "creations need the cluster database: %s", j->msg);
        else
            gw__create_fail(c, status, "%s", j->msg);
        return;
    }
    snprintf(c->node_id, sizeof c->node_id, "%s", j->owner.node_id);
    snprintf(c->address, sizeof c->address, "%s", j->owner.address);
    snprintf(c->tried[c->attempts - 1], sizeof c->tried[0], "%s", j->owner.node_id);
    gw__send(c);
}

/* A placement (again, without the nodes tried). */
static void gw__place(struct gw_create *c)
{
    uint8_t r[8];
    randombytes_buf(r, sizeof r);
    char hex[17];
    sodium_bin2hex(hex, sizeof hex, r, sizeof r);
    snprintf(c->reservation, sizeof c->reservation, CP_CLUSTER_RESERVATION_PREFIX "%s", hex);
    memset(&c->job, 0, sizeof c->job);
    c->job.kind = CP_CLUSTER_JOB_PLACE;
    snprintf(c->job.sandbox_id, sizeof c->job.sandbox_id, "%s", c->reservation);
    snprintf(c->job.template_id, sizeof c->job.template_id, "%s", c->template_id);
    c->job.cpu = c->cp->cfg.cpu_count;
    c->job.memory_bytes = c->cp->cfg.memory_bytes;
    for (int i = 0; i < c->attempts; i++)
        snprintf(c->job.exclude[c->job.n_exclude++], sizeof c->job.exclude[0], "%s", c->tried[i]);
    c->job.done = gw__placed;
    c->job.arg = c;
    c->attempts++;
    if (cp_cluster_submit(c->cp, &c->job))
        gw__create_fail(c, 503, "this gateway has no cluster database");
}

static void gw__create_body(struct al_http_req *req, int err)
{
    struct gw_create *c = req->user;
    if (err) {
        /* The server answered (413, 408, 400) or the client is gone. */
        req->user = NULL;
        gw__create_free(c);
        return;
    }
    json_t *b = json_loadb(req->body.data, req->body.len, 0, NULL);
    const char *tpl = json_string_value(json_object_get(b, "templateID"));
    if (!json_is_object(b) || !tpl || !tpl[0] || strlen(tpl) >= sizeof c->template_id) {
        json_decref(b);
        req->user = NULL;
        gw__create_free(c);
        cp_rest_error(req, 400,
                      "a creation needs a JSON object with templateID (a template's "
                      "id or alias)");
        return;
    }
    snprintf(c->template_id, sizeof c->template_id, "%s", tpl);
    json_decref(b);
    al_http_req_on_close(req, gw__create_closed);
    gw__place(c);
}

static void gw__create(struct cp *cp, struct al_http_req *req)
{
    struct gw_create *c = calloc(1, sizeof *c);
    if (!c) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    c->cp = cp;
    c->req = req;
    c->resp = (struct al_buf)AL_BUF_INIT;
    snprintf(c->path, sizeof c->path, "%s", req->path);
    c->n_hdr = gw__node_headers(cp, req, c->hdr);
    req->user = c;
    int rc = al_http_req_read_body(req, GW_MAX_BODY, gw__create_body);
    if (rc < 0) {
        req->user = NULL;
        gw__create_free(c);
        cp_rest_error(req, 400, "cannot read the request body: %s", strerror(-rc));
    }
}

/* ---- lists across nodes ---------------------------------------------------------------------- */

/* GET /sandboxes, /v2/sandboxes and /sandboxes/metrics: every node with a valid lease is
 * asked the client's question (the same query, so the same filters and the same page
 * token: a token names the last sandbox of a page by start time and id, which means the
 * same on every node), and the answers are merged as one airlockd would have answered.
 * A node that does not answer fails the list (502 naming it) rather than leaving its
 * sandboxes out unsaid; a node whose lease is gone is not asked, so its sandboxes are not
 * listed. */
enum gw_list_kind { GW_LIST_V1, GW_LIST_V2, GW_LIST_METRICS };

struct gw_list;

/* One node's answer. */
struct gw_list_part {
    struct gw_list *l;
    char node_id[CP_CLUSTER_NODE_ID_MAX];
    char address[CP_CLUSTER_ADDRESS_MAX];
    int status;
    char why[200]; /* "" while it went well */
    struct al_buf body;
};

struct gw_list {
    struct cp *cp;
    struct al_http_req *req; /* NULL once the client left */
    struct cp_cluster_job job;
    enum gw_list_kind kind;
    struct cp_list_query q; /* the lists' */
    char *target;           /* path?query, as the client sent it */
    struct al_http_header hdr[GW_NODE_HEADERS];
    size_t n_hdr;
    struct gw_list_part *parts;
    size_t n_parts, pending;
};

static void gw__list_free(struct gw_list *l)
{
    for (size_t i = 0; i < l->n_parts; i++)
        al_buf_free(&l->parts[i].body);
    free(l->parts);
    free(l->target);
    cp_list_query_free(&l->q);
    free(l);
}

static void gw__list_closed(struct al_http_req *req)
{
    struct gw_list *l = req->user;
    if (l)
        l->req = NULL;
}

/* The merged list of sandboxes: the nodes' items in the query's order, one page of them,
 * and the token of the next page. */
static void gw__list_merge(struct gw_list *l, json_t **docs)
{
    size_t total = 0;
    for (size_t i = 0; i < l->n_parts; i++)
        total += json_array_size(docs[i]);
    struct cp_list_item *items = calloc(total ? total : 1, sizeof *items);
    if (!items) {
        cp_rest_error(l->req, 500, "out of memory");
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < l->n_parts; i++) {
        size_t k;
        json_t *o;
        json_array_foreach(docs[i], k, o)
        {
            const char *id = json_string_value(json_object_get(o, "sandboxID"));
            const char *st = json_string_value(json_object_get(o, "state"));
            const char *tpl = json_string_value(json_object_get(o, "templateID"));
            json_t *ns = json_object_get(o, CP_CLUSTER_LIST_STARTED_FIELD);
            enum cp_sb_state state;
            if (!id || !st || !tpl || !json_is_integer(ns) || json_integer_value(ns) < 0 ||
                cp_sb_state_parse(st, &state)) {
                cp_rest_error(l->req, 502,
                              "node %s answered a sandbox list this gateway cannot merge (an "
                              "item without sandboxID, state, templateID or %s: is it an "
                              "airlockd of another version?)",
                              l->parts[i].node_id, CP_CLUSTER_LIST_STARTED_FIELD);
                free(items);
                return;
            }
            items[n++] = (struct cp_list_item){.id = id,
                                               .state = state,
                                               .started_ns = (uint64_t)json_integer_value(ns),
                                               .template_id = tpl,
                                               .metadata = json_object_get(o, "metadata"),
                                               .user = o};
        }
    }
    size_t kept = 0;
    char next[160];
    cp_list_select(&l->q, items, n, &kept, next, sizeof next);
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < kept; i++) {
        json_t *o = items[i].user;
        json_object_del(o, CP_CLUSTER_LIST_STARTED_FIELD);
        json_array_append(arr, o);
    }
    free(items);
    if (!arr) {
        cp_rest_error(l->req, 500, "out of memory");
        return;
    }
    cp_rest_reply_page(l->req, arr, next);
}

/* Every node answered (or failed): the client's answer. */
static void gw__list_answer(struct gw_list *l)
{
    struct al_http_req *req = l->req;
    al_http_req_on_close(req, NULL);
    req->user = NULL;
    for (size_t i = 0; i < l->n_parts; i++) {
        const struct gw_list_part *p = &l->parts[i];
        if (p->why[0]) {
            cp_rest_error(req, 502,
                          "the list needs every live node, and node %s (%s) did not answer: %s",
                          p->node_id, p->address, p->why);
            return;
        }
        if (p->status >= 400 && p->status < 500) {
            /* The client's question (or its key) was refused: the node says why. */
            al_http_reply(req, p->status, "application/json", p->body.data ? p->body.data : "",
                          p->body.len);
            return;
        }
        if (p->status != 200) {
            cp_rest_error(req, 502, "the list needs every live node, and node %s answered %d",
                          p->node_id, p->status);
            return;
        }
    }
    json_t **docs = calloc(l->n_parts ? l->n_parts : 1, sizeof *docs);
    if (!docs) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    for (size_t i = 0; i < l->n_parts; i++) {
        const struct gw_list_part *p = &l->parts[i];
        docs[i] = json_loadb(p->body.data ? p->body.data : "", p->body.len, 0, NULL);
        json_t *want = l->kind == GW_LIST_METRICS ? json_object_get(docs[i], "sandboxes") : docs[i];
        if (l->kind == GW_LIST_METRICS ? !json_is_object(want) : !json_is_array(want)) {
            cp_rest_error(req, 502, "node %s answered the list with something else than %s",
                          p->node_id,
                          l->kind == GW_LIST_METRICS ? "{\"sandboxes\": {...}}" : "a JSON array");
            goto out;
        }
    }
    if (l->kind == GW_LIST_METRICS) {
        /* A node answers for the ids it has: together, for all that exist. */
        json_t *all = json_object();
        for (size_t i = 0; all && i < l->n_parts; i++)
            json_object_update(all, json_object_get(docs[i], "sandboxes"));
        json_t *out = all ? json_pack("{s:o}", "sandboxes", all) : NULL;
        if (out)
            al_http_reply_json(req, 200, out);
        else
            cp_rest_error(req, 500, "out of memory");
    } else {
        gw__list_merge(l, docs);
    }
out:
    for (size_t i = 0; i < l->n_parts; i++)
        json_decref(docs[i]);
    free(docs);
}

static void gw__list_part_done(struct gw_list *l)
{
    if (--l->pending)
        return;
    if (l->req)
        gw__list_answer(l);
    gw__list_free(l);
}

static int gw__list_response(struct al_http_creq *q, int status, const struct al_http_header *h,
                             size_t n, void *arg)
{
    (void)q;
    (void)h;
    (void)n;
    struct gw_list_part *p = arg;
    p->status = status;
    return 0;
}

static int gw__list_data(struct al_http_creq *q, const char *data, size_t len, void *arg)
{
    (void)q;
    struct gw_list_part *p = arg;
    if (p->why[0])
        return 0;
    if (p->body.len + len > GW_MAX_LIST || al_buf_append(&p->body, data, len))
        snprintf(p->why, sizeof p->why, "its list is larger than %u MiB", GW_MAX_LIST >> 20);
    return 0;
}

static void gw__list_node_done(struct al_http_creq *q, int err, void *arg)
{
    struct gw_list_part *p = arg;
    if (err && !p->why[0])
        snprintf(p->why, sizeof p->why, "%s", al_http_creq_strerror(q));
    if (p->why[0])
        al_warn("gateway: a sandbox list: node %s (%s) did not answer: %s", p->node_id, p->address,
                p->why);
    gw__list_part_done(p->l);
}

/* Asks each of the nodes (NULL, 0: none is live) the client's question. */
static void gw__list_ask(struct gw_list *l, const struct cp_cluster_node *nodes, size_t n)
{
    if (!l->req) {
        gw__list_free(l);
        return;
    }
    l->parts = n ? calloc(n, sizeof *l->parts) : NULL;
    if (n && !l->parts) {
        al_http_req_on_close(l->req, NULL);
        l->req->user = NULL;
        cp_rest_error(l->req, 500, "out of memory");
        gw__list_free(l);
        return;
    }
    l->n_parts = n;
    /* One count for this loop itself: no answer is given before every node was asked. */
    l->pending = n + 1;
    for (size_t i = 0; i < n; i++) {
        struct gw_list_part *p = &l->parts[i];
        p->l = l;
        p->body = (struct al_buf)AL_BUF_INIT;
        snprintf(p->node_id, sizeof p->node_id, "%s", nodes[i].id);
        snprintf(p->address, sizeof p->address, "%s", nodes[i].address);
        char target[CP_CLUSTER_TARGET_MAX];
        struct al_http_creq_opts o = {
            .target = target,
            .method = "GET",
            .path = l->target,
            .headers = l->hdr,
            .n_headers = l->n_hdr,
            .timeout_ms = GW_TIMEOUT_MS,
            .on_response = gw__list_response,
            .on_data = gw__list_data,
            .on_done = gw__list_node_done,
            .arg = p,
            .pool = l->cp->pool,
        };
        struct al_http_creq *q = NULL;
        int rc = cp_cluster_tls_target(l->cp, p->node_id, p->address, target, sizeof target);
        if (rc == 0)
            rc = al_http_creq_start(l->cp->loop, &o, &q);
        if (rc) {
            snprintf(p->why, sizeof p->why, "cannot ask it: %s", strerror(-rc));
            l->pending--;
        }
    }
    gw__list_part_done(l);
}

static void gw__list_nodes(struct cp_cluster_job *j, void *arg)
{
    struct gw_list *l = arg;
    struct cp_cluster_node *v = j->nodes;
    size_t n = j->n_nodes;
    j->nodes = NULL;
    j->n_nodes = 0;
    if (j->rc == -ENOTCONN && l->req) {
        /* Through an outage the nodes' leases as this gateway saw them last. */
        cp_cluster_nodes_free(v, n);
        v = NULL;
        n = 0;
        if (cp_cluster_snapshot_live(l->cp, &v, &n) == 0) {
            j->rc = 0;
            al_info("gateway: a sandbox list during a database outage: the nodes live at the "
                    "last look are asked (%zu)",
                    n);
        }
    }
    if (j->rc && l->req) {
        al_http_req_on_close(l->req, NULL);
        l->req->user = NULL;
        cp_rest_error(l->req, 503, "the list needs the cluster's nodes: %s", j->msg);
    }
    if (j->rc) {
        cp_cluster_nodes_free(v, n);
        gw__list_free(l);
        return;
    }
    gw__list_ask(l, v, n);
    cp_cluster_nodes_free(v, n);
}

static void gw__list(struct cp *cp, struct al_http_req *req, enum gw_list_kind kind)
{
    struct gw_list *l = calloc(1, sizeof *l);
    size_t tl = strlen(req->path) + 1 + strlen(req->query) + 1;
    char *target = l ? malloc(tl) : NULL;
    if (!target) {
        free(l);
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    snprintf(target, tl, "%s%s%s", req->path, req->query[0] ? "?" : "", req->query);
    l->cp = cp;
    l->req = req;
    l->kind = kind;
    l->target = target;
    if (kind != GW_LIST_METRICS) {
        /* Refused here as a node would refuse it: no node is asked a bad question. */
        struct al_error err = {0};
        if (cp_list_query_parse(req->query, kind == GW_LIST_V2, &l->q, &err)) {
            gw__list_free(l);
            cp_rest_error(req, 400, "%s", al_error_str(&err));
            return;
        }
    }
    l->n_hdr = gw__node_headers(cp, req, l->hdr);
    l->job.kind = CP_CLUSTER_JOB_LIVE_NODES;
    l->job.done = gw__list_nodes;
    l->job.arg = l;
    req->user = l;
    al_http_req_on_close(req, gw__list_closed);
    if (cp_cluster_submit(cp, &l->job)) {
        al_http_req_on_close(req, NULL);
        req->user = NULL;
        gw__list_free(l);
        cp_rest_error(req, 503, "this gateway has no cluster database");
    }
}

bool cp_cluster_gw_api(struct cp *cp, struct al_http_req *req)
{
    if (cp->cfg.cluster_role != CP_CLUSTER_GATEWAY)
        return false;
    const char *p = req->path;
    bool v2 = strncmp(p, "/v2/", 4) == 0;
    const char *rp = v2 ? p + 3 : p;
    bool get = strcmp(req->method, "GET") == 0;
    if (strcmp(rp, "/sandboxes") == 0) {
        if (strcmp(req->method, "POST") == 0)
            gw__create(cp, req);
        else if (get)
            gw__list(cp, req, v2 ? GW_LIST_V2 : GW_LIST_V1);
        else
            cp_rest_error(req, 405, "%s is not allowed on %s (GET lists, POST creates)",
                          req->method, p);
        return true;
    }
    if (!v2 && strcmp(rp, "/sandboxes/metrics") == 0 && get) {
        gw__list(cp, req, GW_LIST_METRICS);
        return true;
    }
    if (strncmp(rp, "/sandboxes/", 11) != 0)
        return false;
    const char *q = rp + 11;
    char id[64];
    if (!cp_rest_path_part(&q, id, sizeof id)) {
        cp_rest_error(req, 404, "no such endpoint: %s %s", req->method, p);
        return true;
    }
    gw__route(cp, req,
              &(struct gw_route_opts){
                  .id = id, .is_delete = *q == '\0' && strcmp(req->method, "DELETE") == 0});
    return true;
}
