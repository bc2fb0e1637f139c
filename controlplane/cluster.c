/* controlplane/cluster: see cluster.h. */
#include "cluster.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster_db.h"
#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "hostcheck.h"
#include "templates.h"
#include "warm.h"

/* A GET /admin/cluster/nodes waiting for the thread. */
struct cluster__ask {
    struct al_http_req *req;
    bool live_only;
    int status;  /* 200, or the error's */
    json_t *out; /* the nodes (200) */
    char msg[AL_ERROR_MSG_MAX];
    struct cluster__ask *next;
};

struct cp_cluster {
    /* set at start, read-only afterwards */
    int role;
    char conninfo_desc[300];
    const char *conninfo; /* cfg's: lives as long as cp */
    uint64_t lease_ms, interval_ms;
    struct cp_cluster_node self;

    pthread_t thread;
    bool thread_started;
    uv_async_t async;
    bool async_init;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    bool stop;
    struct cluster__ask *asks, *answers;
    bool db_up, registered;
    int schema_version;
    char error[AL_ERROR_MSG_MAX]; /* the last problem, "" while all is well */

    atomic_int_fast64_t running; /* published by the loop's tick */
    /* under mu: the node's templates and warm sandboxes ready, as the loop's tick saw them
     * last (a JSON object, see cp_cluster_node.templates) */
    char *templates;
    uint64_t templates_ns; /* when the tick made it (CLOCK_MONOTONIC) */

    /* the thread's own */
    struct cp_cluster_db *db;
};

static const char *const cluster__roles[] = {"standalone", "node", "gateway"};

/* ---- the thread ---------------------------------------------------------------------------- */

/* Records the current problem (logged when it changes: an outage is one line, not one per
 * heartbeat) or, with msg NULL, that it is over. */
static void cluster__problem(struct cp_cluster *c, const char *msg)
{
    pthread_mutex_lock(&c->mu);
    bool changed = strcmp(c->error, msg ? msg : "") != 0;
    bool was = c->error[0] != '\0';
    snprintf(c->error, sizeof c->error, "%s", msg ? msg : "");
    pthread_mutex_unlock(&c->mu);
    if (changed && msg)
        al_warn("%s", msg);
    else if (changed && was)
        al_info("cluster: the database (%s) answers again", c->conninfo_desc);
}

static void cluster__set(struct cp_cluster *c, bool db_up, bool registered)
{
    pthread_mutex_lock(&c->mu);
    c->db_up = db_up;
    c->registered = registered;
    pthread_mutex_unlock(&c->mu);
}

/* After a failure the database itself caused (not a refusal such as a lost lease): the
 * connection is not trusted again (libpq may still call a broken one CONNECTION_OK), the next
 * round makes a new one. */
static void cluster__drop(struct cp_cluster *c)
{
    cp_cluster_db_close(c->db);
    c->db = NULL;
}

/* Connected and migrated, or false with the problem recorded. */
static bool cluster__connect(struct cp_cluster *c)
{
    if (c->db && cp_cluster_db_ok(c->db))
        return true;
    cluster__drop(c);
    struct al_error e = {0};
    int v = 0;
    if (cp_cluster_db_open(c->conninfo, &c->db, &e) || cp_cluster_db_migrate(c->db, &v, &e)) {
        cluster__drop(c);
        char m[AL_ERROR_MSG_MAX + 64];
        snprintf(m, sizeof m, "%s%s", al_error_str(&e),
                 c->role == CP_CLUSTER_NODE ? " (the node keeps serving its sandboxes)" : "");
        cluster__problem(c, m);
        cluster__set(c, false, false);
        return false;
    }
    pthread_mutex_lock(&c->mu);
    c->schema_version = v;
    pthread_mutex_unlock(&c->mu);
    return true;
}

/* A node's registration or heartbeat; false when the database is gone (reconnect). */
static bool cluster__lease(struct cp_cluster *c, bool *registered)
{
    struct al_error e = {0};
    int64_t running = atomic_load(&c->running);
    c->self.sandboxes_running = running;
    pthread_mutex_lock(&c->mu);
    free(c->self.templates);
    c->self.templates = c->templates ? strdup(c->templates) : NULL;
    pthread_mutex_unlock(&c->mu);
    int rc;
    if (*registered) {
        rc = cp_cluster_db_heartbeat(c->db, &c->self, c->lease_ms, &e);
        if (rc == 0)
            return true;
        if (rc != -ESTALE)
            goto broken;
        al_warn("%s: registering again", al_error_str(&e));
        *registered = false;
    }
    rc = cp_cluster_db_register(c->db, &c->self, c->lease_ms, &e);
    if (rc == 0) {
        *registered = true;
        al_info("cluster: node %s registered at %s (lease %llu ms, database %s)", c->self.id,
                c->self.address, (unsigned long long)c->lease_ms, c->conninfo_desc);
        return true;
    }
    if (rc == -EBUSY || rc == -EINVAL) { /* refused: the database is fine */
        cluster__problem(c, al_error_str(&e));
        return true;
    }
broken:
    cluster__problem(c, al_error_str(&e));
    cluster__drop(c);
    return false;
}

static json_t *cluster__node_json(const struct cp_cluster_node *n)
{
    json_t *tpl = n->templates ? json_loads(n->templates, 0, NULL) : NULL;
    return json_pack(
        "{s:s,s:s,s:I,s:I,s:I,s:I,s:b,s:{s:b,s:s,s:I},s:s,s:s,s:s,s:i,s:{s:I,s:I,s:"
        "I},s:o}",
        "nodeID", n->id, "address", n->address, "cpuCount", (json_int_t)n->cpu, "memoryMB",
        (json_int_t)(n->memory_bytes >> 20), "sandboxesMax", (json_int_t)n->sandboxes_max,
        "sandboxesRunning", (json_int_t)n->sandboxes_running, "cordoned", n->cordoned, "lease",
        "valid", n->lease_valid, "expiresAt", n->lease_expires_at, "remainingMs",
        (json_int_t)(n->lease_left_ms > 0 ? n->lease_left_ms : 0), "heartbeatAt", n->heartbeat_at,
        "registeredAt", n->registered_at, "version", n->version, "schemaVersion", n->schema_version,
        "booked", "sandboxes", (json_int_t)n->sandboxes_booked, "cpuCount",
        (json_int_t)n->cpu_booked, "memoryMB", (json_int_t)(n->memory_booked >> 20),
        "templatesWarmReady", tpl ? tpl : json_object());
}

static void cluster__answer(struct cp_cluster *c, struct cluster__ask *a)
{
    if (!cluster__connect(c)) {
        a->status = 503;
        pthread_mutex_lock(&c->mu);
        snprintf(a->msg, sizeof a->msg, "the cluster database is unreachable: %s", c->error);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    struct cp_cluster_node *v = NULL;
    size_t n = 0;
    struct al_error e = {0};
    if (cp_cluster_db_nodes(c->db, a->live_only, &v, &n, &e)) {
        a->status = 503;
        snprintf(a->msg, sizeof a->msg, "%s", al_error_str(&e));
        cluster__drop(c);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, cluster__node_json(&v[i]));
    cp_cluster_nodes_free(v, n);
    a->status = arr ? 200 : 500;
    a->out = arr;
    if (!arr)
        snprintf(a->msg, sizeof a->msg, "out of memory");
}

static void *cluster__thread(void *arg)
{
    struct cp_cluster *c = arg;
    bool registered = false;
    uint64_t next_ns = 0; /* the next lease renewal (or reconnection), CLOCK_MONOTONIC */
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        struct cluster__ask *a = c->asks;
        if (a) {
            c->asks = a->next;
            pthread_mutex_unlock(&c->mu);
            cluster__answer(c, a);
            pthread_mutex_lock(&c->mu);
            a->next = c->answers;
            c->answers = a;
            pthread_mutex_unlock(&c->mu);
            uv_async_send(&c->async);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        if (al_now_ns() >= next_ns) {
            pthread_mutex_unlock(&c->mu);
            bool up = cluster__connect(c);
            if (up && c->role == CP_CLUSTER_NODE)
                up = cluster__lease(c, &registered);
            else if (!up)
                registered = false;
            if (up && (c->role != CP_CLUSTER_NODE || registered))
                cluster__problem(c, NULL);
            cluster__set(c, up, up && registered);
            next_ns = al_now_ns() + c->interval_ms * 1000000ull;
            pthread_mutex_lock(&c->mu);
            continue;
        }
        struct timespec dl = {.tv_sec = (time_t)(next_ns / 1000000000ull),
                              .tv_nsec = (long)(next_ns % 1000000000ull)};
        pthread_cond_timedwait(&c->cv, &c->mu, &dl);
    }
    pthread_mutex_unlock(&c->mu);
    if (registered && c->db && cp_cluster_db_ok(c->db)) {
        struct al_error e = {0};
        if (cp_cluster_db_release(c->db, c->self.id, c->self.instance, &e))
            al_warn("cluster: the lease of node %s could not be released (it expires by "
                    "itself): %s",
                    c->self.id, al_error_str(&e));
        else
            al_info("cluster: node %s released its lease", c->self.id);
    }
    cp_cluster_db_close(c->db);
    c->db = NULL;
    free(c->self.templates);
    c->self.templates = NULL;
    return NULL;
}

/* ---- the loop's side ----------------------------------------------------------------------- */

static void cluster__reply(struct cluster__ask *a, struct cp_cluster *c)
{
    if (a->status == 200) {
        pthread_mutex_lock(&c->mu);
        json_t *self =
            json_pack("{s:s,s:s,s:s,s:b,s:b,s:i,s:s?}", "role", cluster__roles[c->role], "nodeID",
                      c->role == CP_CLUSTER_NODE ? c->self.id : "", "database", c->conninfo_desc,
                      "databaseUp", c->db_up, "registered", c->registered, "schemaVersion",
                      c->schema_version, "error", c->error[0] ? c->error : NULL);
        pthread_mutex_unlock(&c->mu);
        al_http_reply_json(a->req, 200, json_pack("{s:o,s:o}", "self", self, "nodes", a->out));
        a->out = NULL;
    } else {
        cp_rest_error(a->req, a->status, "%s", a->msg);
    }
    json_decref(a->out);
    free(a);
}

static void cluster__on_async(uv_async_t *h)
{
    struct cp_cluster *c = h->data;
    pthread_mutex_lock(&c->mu);
    struct cluster__ask *a = c->answers;
    c->answers = NULL;
    pthread_mutex_unlock(&c->mu);
    while (a) {
        struct cluster__ask *next = a->next;
        cluster__reply(a, c);
        a = next;
    }
}

static void cluster__async_closed(uv_handle_t *h)
{
    free(h->data);
}

static int cluster__template(const char *id, const char *dir, void *arg)
{
    (void)dir;
    struct cp *cp = ((void **)arg)[0];
    json_t *o = ((void **)arg)[1];
    json_object_set_new(o, id, json_integer((json_int_t)cp_warm_ready(cp, id)));
    return 0;
}

/* The node's templates and their warm sandboxes ready, for the thread's next heartbeat. */
static void cluster__templates(struct cp *cp, struct cp_cluster *c)
{
    json_t *o = json_object();
    if (!o)
        return;
    void *arg[2] = {cp, o};
    cp_templates_foreach(cp, cluster__template, arg);
    /* The test backend starts the default templates without their files (as
     * cp_template_resolve does): they are what it can start. */
    for (size_t i = 0; cp->backend && cp->backend->host_process && i < cp->cfg.default_templates.n;
         i++)
        if (!json_object_get(o, cp->cfg.default_templates.v[i]))
            cluster__template(cp->cfg.default_templates.v[i], NULL, arg);
    char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    if (!s)
        return;
    pthread_mutex_lock(&c->mu);
    free(c->templates);
    c->templates = s;
    pthread_mutex_unlock(&c->mu);
}

/* The node's identity and capacity, as it registers. */
static int cluster__self(struct cp *cp, struct cp_cluster *c)
{
    struct cp_cluster_node *n = &c->self;
    const struct cp_config *cfg = &cp->cfg;
    if (cfg->cluster_node_id && cfg->cluster_node_id[0]) {
        snprintf(n->id, sizeof n->id, "%s", cfg->cluster_node_id);
    } else {
        char h[256] = "";
        gethostname(h, sizeof h - 1);
        for (char *p = h; *p; p++)
            if (*p >= 'A' && *p <= 'Z')
                *p = (char)(*p - 'A' + 'a');
        snprintf(n->id, sizeof n->id, "%s", h);
    }
    if (!cp_cluster_node_id_valid(n->id)) {
        al_error("cluster: the node id \"%s\" (%s) is not valid: set cluster.node_id (1..63 of "
                 "a-z 0-9 . -, starting with a letter or digit)",
                 n->id,
                 cfg->cluster_node_id && cfg->cluster_node_id[0] ? "cluster.node_id"
                                                                 : "the host name");
        return -EINVAL;
    }
    if (cfg->cluster_advertise && cfg->cluster_advertise[0])
        snprintf(n->address, sizeof n->address, "%s", cfg->cluster_advertise);
    else
        snprintf(n->address, sizeof n->address, "%s",
                 strncmp(cp->api_url, "http://", 7) == 0 ? cp->api_url + 7 : cp->api_url);
    uint8_t r[CP_CLUSTER_INSTANCE_LEN / 2];
    randombytes_buf(r, sizeof r);
    sodium_bin2hex(n->instance, sizeof n->instance, r, sizeof r);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    n->cpu = ncpu > 0 ? ncpu : 1;
    struct cp_host_res res;
    struct cp_host_limits hl;
    cp_host_res_probe(cfg->state_dir, &res);
    n->memory_bytes = cp_host_limits_plan(cfg, &res, &hl, NULL) == 0 && hl.memory
                          ? hl.memory
                          : (res.mem_total ? res.mem_total : 1);
    n->sandboxes_max = cfg->max_sandboxes;
    snprintf(n->version, sizeof n->version, "%s", AIRLOCK_VERSION);
    return 0;
}

int cp_cluster_start(struct cp *cp)
{
    const struct cp_config *cfg = &cp->cfg;
    if (!cfg->cluster_database || !cfg->cluster_database[0])
        return 0;
    struct cp_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->role = cfg->cluster_role;
    c->conninfo = cfg->cluster_database;
    cp_cluster_db_describe(c->conninfo, c->conninfo_desc, sizeof c->conninfo_desc);
    c->lease_ms = cfg->cluster_lease_ms;
    c->interval_ms = cfg->cluster_heartbeat_ms ? cfg->cluster_heartbeat_ms : c->lease_ms / 3;
    atomic_store(&c->running, (int_fast64_t)cp->n_live);
    if (c->role == CP_CLUSTER_NODE && cluster__self(cp, c)) {
        free(c);
        return -EINVAL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (c->role == CP_CLUSTER_NODE) {
        c->templates_ns = al_now_ns();
        cluster__templates(cp, c); /* the first registration has them */
    }
    if (uv_async_init(cp->loop, &c->async, cluster__on_async) < 0) {
        free(c->templates);
        free(c);
        return -ENOMEM;
    }
    c->async.data = c;
    c->async_init = true;
    int rc = pthread_create(&c->thread, NULL, cluster__thread, c);
    if (rc) {
        al_error("cluster: cannot start the database thread: %s", strerror(rc));
        free(c->templates);
        uv_close((uv_handle_t *)&c->async, cluster__async_closed);
        return -rc;
    }
    c->thread_started = true;
    cp->cluster = c;
    al_info("cluster: role %s, database %s%s%s", cluster__roles[c->role], c->conninfo_desc,
            c->role == CP_CLUSTER_NODE ? ", node " : "",
            c->role == CP_CLUSTER_NODE ? c->self.id : "");
    return 0;
}

void cp_cluster_tick(struct cp *cp)
{
    struct cp_cluster *c = cp->cluster;
    if (!c)
        return;
    atomic_store(&c->running, (int_fast64_t)cp->n_live);
    /* A directory read: as often as heartbeats go, not at every tick. */
    uint64_t now = al_now_ns();
    if (c->role == CP_CLUSTER_NODE && now - c->templates_ns >= c->interval_ms * 1000000ull) {
        c->templates_ns = now;
        cluster__templates(cp, c);
    }
}

void cp_cluster_stop(struct cp *cp)
{
    struct cp_cluster *c = cp->cluster;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void cp_cluster_close(struct cp *cp)
{
    struct cp_cluster *c = cp->cluster;
    if (!c)
        return;
    cp_cluster_stop(cp);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    /* What the thread answered, then what it never took. */
    cluster__on_async(&c->async);
    for (struct cluster__ask *a = c->asks, *next; a; a = next) {
        next = a->next;
        cp_rest_error(a->req, 503, "airlockd is stopping");
        free(a);
    }
    c->asks = NULL;
    free(c->templates);
    c->templates = NULL;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    cp->cluster = NULL;
    uv_close((uv_handle_t *)&c->async, cluster__async_closed);
}

bool cp_cluster_route(struct cp *cp, struct al_http_req *req)
{
    const char *p = req->path;
    if (strncmp(p, "/admin/cluster/", 15) != 0)
        return false;
    if (strcmp(p, "/admin/cluster/nodes") != 0) {
        cp_rest_error(req, 404, "no such endpoint: %s %s", req->method, p);
        return true;
    }
    if (strcmp(req->method, "GET") != 0) {
        cp_rest_error(req, 405, "%s is not allowed on %s (GET)", req->method, p);
        return true;
    }
    struct cp_cluster *c = cp->cluster;
    if (!c) {
        cp_rest_error(req, 404,
                      "this airlockd has no cluster database (cluster.role: %s, "
                      "cluster.database not set): it is not part of a cluster",
                      cluster__roles[cp->cfg.cluster_role]);
        return true;
    }
    char live[8] = "";
    int rc = al_http_query_get(req->query, "live", live, sizeof live);
    if ((rc && rc != -ENOENT) || (live[0] && strcmp(live, "true") && strcmp(live, "false"))) {
        cp_rest_error(req, 400, "live must be true or false");
        return true;
    }
    struct cluster__ask *a = calloc(1, sizeof *a);
    if (!a) {
        cp_rest_error(req, 500, "out of memory");
        return true;
    }
    a->req = req;
    a->live_only = strcmp(live, "true") == 0;
    pthread_mutex_lock(&c->mu);
    if (c->stop) {
        pthread_mutex_unlock(&c->mu);
        free(a);
        cp_rest_error(req, 503, "airlockd is stopping");
        return true;
    }
    struct cluster__ask **t = &c->asks;
    while (*t)
        t = &(*t)->next;
    *t = a;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return true;
}
