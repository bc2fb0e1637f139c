/* controlplane/cluster: see cluster.h. */
#include "cluster.h"
#include "cluster_tls.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster_db.h"
#include "common/log.h"
#include "common/util.h"
#include "common/yaml.h"
#include "cp.h"
#include "egressreg.h"
#include "events.h"
#include "policy/policy.h"
#include "policysel.h"
#include "hostcheck.h"
#include "ids.h"
#include "templates.h"
#include "warm.h"

/* The admin API's jobs (beside cp_cluster_job_kind's). */
enum {
    CLUSTER__NODES = 100,
    CLUSTER__NODE,
    CLUSTER__CORDON,
    CLUSTER__POL_LIST,     /* the newest version of every published policy */
    CLUSTER__POL_VERSIONS, /* every version of one */
    CLUSTER__POL_GET,      /* one version with its document */
    CLUSTER__POL_PUBLISH,  /* lint, then a new version */
    CLUSTER__LOST,         /* not admin jobs from here on */
    CLUSTER__POL_APPLIED,  /* the thread wrote policies: the loop audits and reloads */
};

/* A request of /admin/cluster/... waiting for the thread. */
struct cluster__admin {
    struct cp_cluster_job j; /* first: the queue holds &j */
    struct al_http_req *req;
    bool live_only; /* NODES */
    bool cordon;    /* CORDON: the new state */
    char node_id[CP_CLUSTER_NODE_ID_MAX];
    char policy[CP_POLICY_NAME_MAX]; /* POL_*: the policy's name */
    int64_t version;                 /* POL_GET */
    char *document;                  /* POL_PUBLISH: the YAML (a's) */
    char who[32];                    /* POL_PUBLISH: the publishing key's id */
    int status;                      /* 200, or the error's */
    json_t *out;                     /* the answer (200) */
};

/* The thread's report of a node a gateway saw lose its lease, for the loop's events. */
struct cluster__lost {
    struct cp_cluster_job j; /* first: the answers queue holds &j */
    char node_id[CP_CLUSTER_NODE_ID_MAX];
    char lease_expires_at[32], heartbeat_at[32]; /* "" for a node removed from the table */
    struct cp_cluster_placed_list sandboxes;
};

/* Events of one lost node's sandboxes: at most this many (the rest is logged as a count). */
#define CLUSTER__LOST_MAX 100000

/* A published policy on a node: the version in force, the newest it could not apply, and what
 * the loop still has to do (audit it, have airlock-egress reload it). */
struct cluster__pol {
    char name[CP_POLICY_NAME_MAX];
    int64_t version; /* in force here (its file is the policies directory's); 0: none known */
    char digest[65];
    char applied_at[32];
    int64_t failed_version; /* the newest version refused (0: none); not tried again */
    char error[512];        /* why, "" when all is well */
    /* written by the thread, for the loop: the version waiting for airlock-egress's reload,
     * and the record to audit (applied, refused) */
    int64_t pending;
    char pending_digest[65];
    char published_by[64], published_at[32];
    char audit[16]; /* "" or the event: "policy_applied", "policy_refused" */
    int64_t audit_version;
    uint64_t reload_gen; /* the loop's: the reload of airlock-egress that makes pending current */
};

/* A node as the gateway's snapshot has it. */
struct cluster__snap {
    char id[CP_CLUSTER_NODE_ID_MAX];
    char address[CP_CLUSTER_ADDRESS_MAX];
    bool live;
};

struct cp_cluster {
    /* set at start, read-only afterwards */
    struct cp *cp;
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
    struct cp_cluster_job *jobs, *answers;
    bool db_up, registered;
    int schema_version;
    char error[AL_ERROR_MSG_MAX]; /* the last problem, "" while all is well */

    atomic_int_fast64_t running; /* published by the loop's tick */
    /* under mu: the node's templates and warm sandboxes ready, as the loop's tick saw them
     * last (a JSON object, see cp_cluster_node.templates) */
    char *templates;
    char *live;            /* under mu: the ids of the node's sandboxes (a JSON array), likewise */
    uint64_t templates_ns; /* when the tick made it (CLOCK_MONOTONIC) */
    /* under mu: a gateway's snapshot of the nodes (NULL until the first read) */
    struct cluster__snap *snap;
    size_t n_snap;
    /* under mu: a node's published policies, what it reports of them, and whether the
     * database has that report yet */
    struct cluster__pol *pol;
    size_t n_pol;
    bool pol_dirty;
    uint64_t reload_gen; /* the loop's: airlock-egress's reloads asked so far */
    char token[256];     /* the cluster token; read-only after start */
    void *gw;            /* the loop's: the gateway's state (cluster_gw.c) */

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
    free(c->self.live);
    c->self.live = c->live ? strdup(c->live) : NULL;
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
        pthread_mutex_lock(&c->mu);
        c->pol_dirty = true; /* the row may hold an earlier process's report */
        pthread_mutex_unlock(&c->mu);
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
    json_t *pol = n->policies ? json_loads(n->policies, 0, NULL) : NULL;
    return json_pack(
        "{s:s,s:s,s:I,s:I,s:I,s:I,s:b,s:{s:b,s:s,s:I},s:s,s:s,s:s,s:i,s:{s:I,s:I,s:"
        "I},s:o,s:o}",
        "nodeID", n->id, "address", n->address, "cpuCount", (json_int_t)n->cpu, "memoryMB",
        (json_int_t)(n->memory_bytes >> 20), "sandboxesMax", (json_int_t)n->sandboxes_max,
        "sandboxesRunning", (json_int_t)n->sandboxes_running, "cordoned", n->cordoned, "lease",
        "valid", n->lease_valid, "expiresAt", n->lease_expires_at, "remainingMs",
        (json_int_t)(n->lease_left_ms > 0 ? n->lease_left_ms : 0), "heartbeatAt", n->heartbeat_at,
        "registeredAt", n->registered_at, "version", n->version, "schemaVersion", n->schema_version,
        "booked", "sandboxes", (json_int_t)n->sandboxes_booked, "cpuCount",
        (json_int_t)n->cpu_booked, "memoryMB", (json_int_t)(n->memory_booked >> 20),
        "templatesWarmReady", tpl ? tpl : json_object(), "policies", pol ? pol : json_object());
}

/* Whether an error of the store means the connection is not to be trusted again. */
static bool cluster__broken(int rc)
{
    return rc == -EIO || rc == -ENOTCONN;
}

static void cluster__snapshot_keep(struct cp_cluster *c, const struct cp_cluster_node *v, size_t n);
static void cluster__pol_applied(struct cp_cluster_job *j, void *arg);

static json_t *cluster__policy_json(const struct cp_cluster_policy *p)
{
    return json_pack("{s:s,s:I,s:s,s:b,s:s,s:s}", "name", p->name, "version",
                     (json_int_t)p->version, "digest", p->digest, "signed", p->signature[0] != '\0',
                     "publishedAt", p->published_at, "publishedBy", p->published_by);
}

/* A publication: the policy linted as `airlock policy lint` does (errors refuse it with
 * every finding; warnings are answered with the version), then its new version. */
static int cluster__publish(struct cp_cluster *c, struct cluster__admin *a, struct al_error *e)
{
    size_t len = strlen(a->document);
    char label[CP_POLICY_NAME_MAX + 16];
    snprintf(label, sizeof label, "%s.yaml", a->policy);
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *pol = policy_load_buffer(a->document, len, label, &d);
    al_diags_sort(&d);
    json_t *findings = cp_policy_diags_json(&d);
    if (!pol) {
        char first[600] = "";
        for (size_t i = 0; i < d.n && !first[0]; i++)
            if (d.v[i].severity == AL_DIAG_ERROR)
                al_diag_format(&d.v[i], first, sizeof first);
        snprintf(a->j.msg, sizeof a->j.msg,
                 "policy %s has %zu error%s (first: %s): nothing was published (check it with "
                 "`airlock policy lint`)",
                 a->policy, d.errors, d.errors == 1 ? "" : "s", first);
        al_diags_free(&d);
        a->status = 400;
        a->out = json_pack("{s:i,s:s,s:o}", "code", 400, "message", a->j.msg, "findings",
                           findings ? findings : json_array());
        return 0;
    }
    policy_unref(pol);
    al_diags_free(&d);
    struct cp_cluster_policy in = {.document = a->document}, out;
    snprintf(in.name, sizeof in.name, "%s", a->policy);
    snprintf(in.published_by, sizeof in.published_by, "%s", a->who);
    int rc = cp_cluster_db_policy_publish(c->db, &in, c->token, &out, e);
    if (rc) {
        json_decref(findings);
        return rc;
    }
    a->out = cluster__policy_json(&out);
    json_object_set_new(a->out, "findings", findings ? findings : json_array());
    a->status = 201;
    return 0;
}

/* The policies' admin jobs. */
static int cluster__policy_admin(struct cp_cluster *c, struct cluster__admin *a, struct al_error *e)
{
    if (a->j.kind == CLUSTER__POL_PUBLISH)
        return cluster__publish(c, a, e);
    if (a->j.kind == CLUSTER__POL_GET) {
        struct cp_cluster_policy p;
        int rc = cp_cluster_db_policy(c->db, a->policy, a->version, &p, e);
        if (rc)
            return rc;
        a->out = cluster__policy_json(&p);
        json_object_set_new(a->out, "document", json_string(p.document));
        free(p.document);
        a->status = 200;
        return 0;
    }
    struct cp_cluster_policy *v = NULL;
    size_t n = 0;
    int rc =
        cp_cluster_db_policies(c->db, a->j.kind == CLUSTER__POL_LIST ? NULL : a->policy, &v, &n, e);
    if (rc)
        return rc;
    if (a->j.kind == CLUSTER__POL_VERSIONS && n == 0)
        return al_error_set(e, -ENOENT, "cluster: no policy %s is published", a->policy);
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, cluster__policy_json(&v[i]));
    free(v);
    a->out = a->j.kind == CLUSTER__POL_LIST
                 ? json_pack("{s:o}", "policies", arr)
                 : json_pack("{s:s,s:o}", "name", a->policy, "versions", arr);
    a->status = 200;
    return 0;
}

/* An admin job: the node list, one node with its sandboxes, a cordon, the policies. */
static void cluster__admin_run(struct cp_cluster *c, struct cluster__admin *a)
{
    struct al_error e = {0};
    int rc = 0;
    if (a->j.kind >= CLUSTER__POL_LIST) {
        if ((rc = cluster__policy_admin(c, a, &e)))
            goto fail;
        return;
    }
    if (a->j.kind == CLUSTER__CORDON &&
        (rc = cp_cluster_db_cordon(c->db, a->node_id, a->cordon, &e)))
        goto fail;
    struct cp_cluster_node *v = NULL;
    size_t n = 0;
    if ((rc = cp_cluster_db_nodes(c->db, a->live_only, &v, &n, &e)))
        goto fail;
    if (a->j.kind == CLUSTER__NODES) {
        /* A gateway's snapshot is as fresh as what it just listed: after a change an
         * operator has seen, routing through an outage works from that. */
        if (c->role == CP_CLUSTER_GATEWAY && !a->live_only)
            cluster__snapshot_keep(c, v, n);
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < n; i++)
            json_array_append_new(arr, cluster__node_json(&v[i]));
        cp_cluster_nodes_free(v, n);
        a->out = arr;
        a->status = arr ? 200 : 500;
        if (!arr)
            snprintf(a->j.msg, sizeof a->j.msg, "out of memory");
        return;
    }
    json_t *node = NULL;
    for (size_t i = 0; i < n && !node; i++)
        if (strcmp(v[i].id, a->node_id) == 0)
            node = cluster__node_json(&v[i]);
    cp_cluster_nodes_free(v, n);
    if (!node) {
        a->status = 404;
        snprintf(a->j.msg, sizeof a->j.msg,
                 "cluster: no node \"%s\" (GET /admin/cluster/nodes lists them)", a->node_id);
        return;
    }
    /* Which sandboxes it still holds (what a drain waits for). */
    struct cp_cluster_placed_list pl;
    if ((rc = cp_cluster_db_node_sandboxes(c->db, a->node_id, 1000, &pl, &e))) {
        json_decref(node);
        goto fail;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < pl.n; i++)
        json_array_append_new(arr, json_string(pl.v[i].id));
    json_object_set_new(node, "sandboxes", arr);
    json_object_set_new(node, "sandboxCount", json_integer((json_int_t)pl.total));
    cp_cluster_placed_free(&pl);
    a->out = node;
    a->status = 200;
    return;
fail:
    a->status = rc == -ENOENT ? 404 : rc == -EINVAL ? 400 : cluster__broken(rc) ? 503 : 500;
    snprintf(a->j.msg, sizeof a->j.msg, "%s", al_error_str(&e));
    if (cluster__broken(rc))
        cluster__drop(c);
}

static void cluster__run(struct cp_cluster *c, struct cp_cluster_job *j)
{
    if (!cluster__connect(c)) {
        j->rc = -ENOTCONN;
        pthread_mutex_lock(&c->mu);
        snprintf(j->msg, sizeof j->msg, "the cluster database is unreachable: %s", c->error);
        pthread_mutex_unlock(&c->mu);
        if (j->kind >= CLUSTER__NODES && j->kind < CLUSTER__LOST)
            ((struct cluster__admin *)j)->status = 503;
        return;
    }
    if (j->kind >= CLUSTER__NODES && j->kind < CLUSTER__LOST) {
        cluster__admin_run(c, (struct cluster__admin *)j);
        return;
    }
    struct al_error e = {0};
    switch (j->kind) {
    case CP_CLUSTER_JOB_PLACE: {
        const char *ex[2] = {j->exclude[0], j->exclude[1]};
        struct cp_cluster_place p = {.sandbox_id = j->sandbox_id,
                                     .template_id = j->template_id,
                                     .cpu = j->cpu,
                                     .memory_bytes = j->memory_bytes,
                                     .exclude = ex,
                                     .n_exclude = j->n_exclude};
        j->rc = cp_cluster_db_place(c->db, &p, &j->owner, &e);
        break;
    }
    case CP_CLUSTER_JOB_UNPLACE:
        j->rc = cp_cluster_db_unplace(c->db, j->sandbox_id, &e);
        break;
    case CP_CLUSTER_JOB_RENAME:
        j->rc = cp_cluster_db_rename(c->db, j->sandbox_id, j->to_id, &e);
        break;
    case CP_CLUSTER_JOB_OWNER:
        j->rc = cp_cluster_db_owner(c->db, j->sandbox_id, &j->owner, &e);
        break;
    case CP_CLUSTER_JOB_LIVE_NODES:
        j->rc = cp_cluster_db_nodes(c->db, true, &j->nodes, &j->n_nodes, &e);
        break;
    default:
        j->rc = al_error_set(&e, -EINVAL, "cluster: unknown job %d", j->kind);
    }
    if (j->rc) {
        snprintf(j->msg, sizeof j->msg, "%s", al_error_str(&e));
        if (cluster__broken(j->rc)) {
            cluster__problem(c, j->msg);
            cluster__drop(c);
            j->rc = -ENOTCONN;
        }
    }
}

static void cluster__lost_done(struct cp_cluster_job *j, void *arg);

/* Hands j to the loop (its done runs there). */
static void cluster__answer(struct cp_cluster *c, struct cp_cluster_job *j)
{
    pthread_mutex_lock(&c->mu);
    j->next = c->answers;
    c->answers = j;
    pthread_mutex_unlock(&c->mu);
    uv_async_send(&c->async);
}

/* A node that was live at the gateway's last look and is not now (its lease ran out or was
 * released, or its row was removed: x NULL): the sandboxes placed on it, for the loop to
 * record an event of each. The placements stay: a node that comes back has them again. */
static void cluster__lost(struct cp_cluster *c, const char *node_id,
                          const struct cp_cluster_node *x)
{
    struct cluster__lost *l = calloc(1, sizeof *l);
    if (!l)
        return;
    l->j.kind = CLUSTER__LOST;
    l->j.done = cluster__lost_done;
    l->j.arg = c;
    snprintf(l->node_id, sizeof l->node_id, "%s", node_id);
    if (x) {
        snprintf(l->lease_expires_at, sizeof l->lease_expires_at, "%s", x->lease_expires_at);
        snprintf(l->heartbeat_at, sizeof l->heartbeat_at, "%s", x->heartbeat_at);
    }
    struct al_error e = {0};
    int rc =
        c->db ? cp_cluster_db_node_sandboxes(c->db, node_id, CLUSTER__LOST_MAX, &l->sandboxes, &e)
              : -ENOTCONN;
    if (rc) {
        /* The routes say "lost" all the same; only the events are missing. */
        al_warn("cluster: node %s lost its lease; its sandboxes could not be listed for their "
                "node_lost events: %s",
                node_id, c->db ? al_error_str(&e) : "no database connection");
        free(l);
        if (cluster__broken(rc))
            cluster__drop(c);
        return;
    }
    cluster__answer(c, &l->j);
}

/* Keeps every node of v (all of them, as listed) as the gateway's snapshot; reports the
 * nodes live in the previous snapshot that are not any more. */
static void cluster__snapshot_keep(struct cp_cluster *c, const struct cp_cluster_node *v, size_t n)
{
    pthread_mutex_lock(&c->mu);
    size_t n_old = c->snap ? c->n_snap : 0;
    struct cluster__snap *old = n_old ? calloc(n_old, sizeof *old) : NULL;
    if (old)
        memcpy(old, c->snap, n_old * sizeof *old);
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; old && i < n_old; i++) {
        if (!old[i].live)
            continue;
        const struct cp_cluster_node *x = NULL;
        for (size_t k = 0; k < n && !x; k++)
            if (strcmp(v[k].id, old[i].id) == 0)
                x = &v[k];
        if (!x || !x->lease_valid)
            cluster__lost(c, old[i].id, x);
    }
    free(old);
    struct cluster__snap *s = n ? calloc(n, sizeof *s) : NULL;
    if (n && !s)
        return;
    for (size_t i = 0; i < n; i++) {
        snprintf(s[i].id, sizeof s[i].id, "%s", v[i].id);
        snprintf(s[i].address, sizeof s[i].address, "%s", v[i].address);
        s[i].live = v[i].lease_valid;
    }
    pthread_mutex_lock(&c->mu);
    free(c->snap);
    c->snap = s ? s : calloc(1, sizeof *s); /* known, and empty */
    c->n_snap = n;
    pthread_mutex_unlock(&c->mu);
}

/* ---- published policies on a node (the thread's side) ------------------------------------ */

/* name's entry (under mu), added when add; NULL when there is none (or no memory). */
static struct cluster__pol *cluster__pol_find(struct cp_cluster *c, const char *name, bool add)
{
    for (size_t i = 0; i < c->n_pol; i++)
        if (strcmp(c->pol[i].name, name) == 0)
            return &c->pol[i];
    if (!add)
        return NULL;
    struct cluster__pol *v = realloc(c->pol, (c->n_pol + 1) * sizeof *v);
    if (!v)
        return NULL;
    c->pol = v;
    struct cluster__pol *x = &v[c->n_pol++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", name);
    return x;
}

/* The published version of name whose document the file at path holds (0: no file, or one no
 * published version has), with its digest. */
static int64_t cluster__pol_on_disk(struct cp_cluster *c, const char *name, const char *path,
                                    char digest[65])
{
    digest[0] = '\0';
    char *cur = NULL;
    size_t len = 0;
    struct al_error e = {0};
    if (al_read_file(path, CP_CLUSTER_POLICY_MAX, &cur, &len, &e))
        return 0;
    cp_cluster_policy_digest(cur, len, digest);
    free(cur);
    struct cp_cluster_policy *v = NULL;
    size_t n = 0;
    int64_t version = 0;
    if (c->db && cp_cluster_db_policies(c->db, name, &v, &n, &e) == 0)
        for (size_t i = 0; i < n && !version; i++) /* newest first */
            if (strcmp(v[i].digest, digest) == 0)
                version = v[i].version;
    free(v);
    return version;
}

/* Version p of its policy, fetched and checked (its document against its digest, its
 * signature against the cluster token, this airlockd's own lint) and written into the
 * policies directory at path; *wrote false when the file held it already. 0, or a negative
 * errno with why (a broken connection: cluster__broken). */
static int cluster__pol_apply(struct cp_cluster *c, const struct cp_cluster_policy *p,
                              const char *path, bool *wrote, char *why, size_t len)
{
    *wrote = false;
    struct cp_cluster_policy d;
    struct al_error e = {0};
    int rc = cp_cluster_db_policy(c->db, p->name, p->version, &d, &e);
    if (rc) {
        snprintf(why, len, "%s", al_error_str(&e));
        return rc;
    }
    size_t n = strlen(d.document);
    char dg[65];
    cp_cluster_policy_digest(d.document, n, dg);
    if (strcmp(dg, d.digest) != 0) {
        rc = -EBADMSG;
        snprintf(why, len,
                 "its document's digest is %.16s..., not the published %.16s...: its row in "
                 "the cluster database was changed after publication",
                 dg, d.digest);
    } else if (c->token[0] && !cp_cluster_policy_signed(c->token, &d)) {
        rc = -EPERM;
        snprintf(why, len,
                 "it is not signed with this cluster's token: it was not published through an "
                 "airlockd of this cluster (it was written into the cluster database some other "
                 "way)");
    } else {
        struct al_diags diags = AL_DIAGS_INIT;
        struct policy *pol = policy_load_buffer(d.document, n, path, &diags);
        if (!pol) {
            char first[400] = "";
            for (size_t i = 0; i < diags.n && !first[0]; i++)
                if (diags.v[i].severity == AL_DIAG_ERROR)
                    al_diag_format(&diags.v[i], first, sizeof first);
            rc = -EINVAL;
            snprintf(why, len, "this airlockd (%s) finds %zu error%s in it, first: %s",
                     AIRLOCK_VERSION, diags.errors, diags.errors == 1 ? "" : "s", first);
        }
        policy_unref(pol);
        al_diags_free(&diags);
    }
    if (!rc) {
        char *cur = NULL, cd[65] = "";
        size_t cl = 0;
        if (al_read_file(path, CP_CLUSTER_POLICY_MAX, &cur, &cl, &e) == 0)
            cp_cluster_policy_digest(cur, cl, cd);
        free(cur);
        if (strcmp(cd, d.digest) != 0) {
            if ((rc = al_write_file_atomic(path, d.document, n, 0644, &e)))
                snprintf(why, len, "cannot write %s: %s", path, al_error_str(&e));
            else
                *wrote = true;
        }
    }
    free(d.document);
    return rc;
}

/* What the node applies, to the database when it changed since it last went there. */
static void cluster__pol_report(struct cp_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    if (!c->pol_dirty) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    json_t *o = json_object();
    for (size_t i = 0; o && i < c->n_pol; i++) {
        const struct cluster__pol *x = &c->pol[i];
        json_t *r = json_pack("{s:o,s:o,s:o,s:o}", "version",
                              x->version ? json_integer(x->version) : json_null(), "digest",
                              x->digest[0] ? json_string(x->digest) : json_null(), "appliedAt",
                              x->applied_at[0] ? json_string(x->applied_at) : json_null(), "error",
                              x->error[0] ? json_string(x->error) : json_null());
        if (r && x->failed_version)
            json_object_set_new(r, "failedVersion", json_integer(x->failed_version));
        json_object_set_new(o, x->name, r);
    }
    c->pol_dirty = false;
    pthread_mutex_unlock(&c->mu);
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    struct al_error e = {0};
    int rc =
        s ? cp_cluster_db_policies_report(c->db, c->self.id, c->self.instance, s, &e) : -ENOMEM;
    free(s);
    if (rc) {
        pthread_mutex_lock(&c->mu);
        c->pol_dirty = true; /* the next round tries again */
        pthread_mutex_unlock(&c->mu);
        if (rc != -ENOMEM)
            al_warn("%s", al_error_str(&e));
        if (cluster__broken(rc))
            cluster__drop(c);
    }
}

/* A node's round over the published policies, after its lease: the newest version of each
 * that it neither holds nor refused already is applied (cluster__pol_apply); the loop audits
 * what changed and has airlock-egress re-read what was written; then the report. */
static void cluster__pol_sync(struct cp_cluster *c)
{
    struct cp_cluster_policy *v = NULL;
    size_t n = 0;
    struct al_error e = {0};
    int rc = cp_cluster_db_policies(c->db, NULL, &v, &n, &e);
    if (rc) {
        al_warn("cluster: the published policies could not be read: %s", al_error_str(&e));
        if (cluster__broken(rc))
            cluster__drop(c);
        return;
    }
    bool for_loop = false;
    for (size_t i = 0; i < n; i++) {
        const struct cp_cluster_policy *p = &v[i];
        pthread_mutex_lock(&c->mu);
        struct cluster__pol *x = cluster__pol_find(c, p->name, true);
        /* Never back to an older version: a rollback is a newer one, and a newest row
         * older than what is in force means rows were removed from the database. */
        bool skip = !x || p->version < x->version ||
                    (x->version == p->version && strcmp(x->digest, p->digest) == 0) ||
                    x->failed_version == p->version || x->pending >= p->version;
        pthread_mutex_unlock(&c->mu);
        if (skip)
            continue;
        char path[4400], why[512] = "", dd[65] = "";
        snprintf(path, sizeof path, "%s/%s.yaml", c->cp->cfg.policies_path, p->name);
        bool wrote = false;
        rc = cluster__pol_apply(c, p, path, &wrote, why, sizeof why);
        if (cluster__broken(rc)) { /* not the version's fault: the next round again */
            cluster__problem(c, why);
            cluster__drop(c);
            break;
        }
        int64_t disk = rc ? cluster__pol_on_disk(c, p->name, path, dd) : 0;
        char now[40];
        al_time_rfc3339(now, sizeof now, al_wall_ns());
        pthread_mutex_lock(&c->mu);
        x = cluster__pol_find(c, p->name, false);
        int64_t stays = x ? (x->version ? x->version : disk) : 0;
        if (x && rc) {
            if (!x->version && disk) {
                x->version = disk;
                snprintf(x->digest, sizeof x->digest, "%s", dd);
            }
            x->failed_version = p->version;
            snprintf(x->error, sizeof x->error, "version %lld was not applied: %s",
                     (long long)p->version, why);
            snprintf(x->audit, sizeof x->audit, "policy_refused");
            for_loop = true;
        } else if (x && wrote) {
            x->pending = p->version;
            for_loop = true;
        } else if (x) { /* the directory holds it already (written before a restart) */
            x->version = p->version;
            snprintf(x->digest, sizeof x->digest, "%s", p->digest);
            snprintf(x->applied_at, sizeof x->applied_at, "%s", now);
            x->failed_version = 0;
            x->error[0] = '\0';
        }
        if (x) {
            x->audit_version = p->version;
            snprintf(x->pending_digest, sizeof x->pending_digest, "%s", p->digest);
            snprintf(x->published_by, sizeof x->published_by, "%s", p->published_by);
            snprintf(x->published_at, sizeof x->published_at, "%s", p->published_at);
        }
        c->pol_dirty = true;
        pthread_mutex_unlock(&c->mu);
        if (rc)
            al_warn("cluster: policy %s version %lld was not applied (%s): %s", p->name,
                    (long long)p->version,
                    stays ? "the version before it stays in force" : "no version of it is in force",
                    why);
    }
    free(v);
    if (for_loop) {
        struct cp_cluster_job *j = calloc(1, sizeof *j);
        if (j) {
            j->kind = CLUSTER__POL_APPLIED;
            j->done = cluster__pol_applied;
            j->arg = c->cp;
            cluster__answer(c, j);
        }
    }
    if (c->db)
        cluster__pol_report(c);
}

/* A gateway's snapshot of the nodes, for routing while the database is away. */
static void cluster__snapshot(struct cp_cluster *c)
{
    struct cp_cluster_node *v = NULL;
    size_t n = 0;
    struct al_error e = {0};
    int rc = cp_cluster_db_nodes(c->db, false, &v, &n, &e);
    if (rc) {
        cluster__problem(c, al_error_str(&e));
        if (cluster__broken(rc))
            cluster__drop(c);
        return;
    }
    cluster__snapshot_keep(c, v, n);
    cp_cluster_nodes_free(v, n);
}

static void *cluster__thread(void *arg)
{
    struct cp_cluster *c = arg;
    bool registered = false;
    uint64_t next_ns = 0; /* the next lease renewal (or reconnection), CLOCK_MONOTONIC */
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        /* The lease first: a stream of jobs must not starve the heartbeat. */
        struct cp_cluster_job *j = al_now_ns() >= next_ns ? NULL : c->jobs;
        if (j) {
            c->jobs = j->next;
            pthread_mutex_unlock(&c->mu);
            cluster__run(c, j);
            cluster__answer(c, j);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        if (al_now_ns() >= next_ns) {
            pthread_mutex_unlock(&c->mu);
            bool up = cluster__connect(c);
            if (up && c->role == CP_CLUSTER_NODE) {
                up = cluster__lease(c, &registered);
                if (up && registered)
                    cluster__pol_sync(c);
                up = up && c->db != NULL;
            } else if (up && c->role == CP_CLUSTER_GATEWAY) {
                cluster__snapshot(c); /* for routing through an outage */
                up = c->db != NULL;
            } else if (!up) {
                registered = false;
            }
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
    free(c->self.live);
    c->self.live = NULL;
    return NULL;
}

/* ---- the loop's side ----------------------------------------------------------------------- */

/* A new version is in the database: logged, and recorded in this airlockd's audit log (each
 * node records it again as it applies it). */
static void cluster__published(struct cp_cluster *c, const json_t *v)
{
    const char *name = json_string_value(json_object_get(v, "name"));
    json_int_t version = json_integer_value(json_object_get(v, "version"));
    const char *digest = json_string_value(json_object_get(v, "digest"));
    const char *by = json_string_value(json_object_get(v, "publishedBy"));
    al_info("cluster: policy %s version %lld published by key %s (digest %s)", name,
            (long long)version, by, digest);
    json_t *rec = json_pack("{s:s,s:s,s:{s:s,s:I,s:s},s:s,s:s,s:b}", "type", "cluster", "event",
                            "policy_published", "policy", "name", name, "version", version,
                            "digest", digest, "published_by", by, "published_at",
                            json_string_value(json_object_get(v, "publishedAt")), "signed",
                            json_is_true(json_object_get(v, "signed")));
    char what[CP_POLICY_NAME_MAX + 64];
    snprintf(what, sizeof what, "cluster: policy %s version %lld", name, (long long)version);
    if (rec)
        cp_audit_record(c->cp, rec, what, NULL, NULL);
}

static void cluster__admin_done(struct cp_cluster_job *j, void *arg)
{
    struct cluster__admin *a = (struct cluster__admin *)j;
    struct cp_cluster *c = arg;
    if (j->rc == -ESHUTDOWN) {
        cp_rest_error(a->req, 503, "airlockd is stopping");
    } else if (a->status == 200 && a->j.kind == CLUSTER__NODES) {
        pthread_mutex_lock(&c->mu);
        json_t *self =
            json_pack("{s:s,s:s,s:s,s:b,s:b,s:i,s:s?}", "role", cluster__roles[c->role], "nodeID",
                      c->role == CP_CLUSTER_NODE ? c->self.id : "", "database", c->conninfo_desc,
                      "databaseUp", c->db_up, "registered", c->registered, "schemaVersion",
                      c->schema_version, "error", c->error[0] ? c->error : NULL);
        pthread_mutex_unlock(&c->mu);
        al_http_reply_json(a->req, 200, json_pack("{s:o,s:o}", "self", self, "nodes", a->out));
        a->out = NULL;
    } else if (a->out) { /* an answer, or a refused publication's findings */
        if (a->j.kind == CLUSTER__CORDON)
            al_info("cluster: node %s %s", a->node_id,
                    a->cordon ? "cordoned (no new sandboxes are placed on it)" : "uncordoned");
        if (a->j.kind == CLUSTER__POL_PUBLISH && a->status == 201)
            cluster__published(c, a->out);
        else if (a->j.kind == CLUSTER__POL_PUBLISH)
            al_warn("cluster: key %s: %s", a->who, a->j.msg);
        al_http_reply_json(a->req, a->status, a->out);
        a->out = NULL;
    } else {
        cp_rest_error(a->req, a->status, "%s", a->j.msg);
    }
    json_decref(a->out);
    free(a->document);
    free(a);
}

/* ---- published policies on a node (the loop's side) -------------------------------------- */

/* The records of what the thread applied or refused, in this node's audit log. */
static void cluster__pol_audit(struct cp_cluster *c)
{
    json_t *recs = json_array();
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; recs && i < c->n_pol; i++) {
        struct cluster__pol *x = &c->pol[i];
        if (!x->audit[0])
            continue;
        json_t *r = json_pack("{s:s,s:s,s:s,s:{s:s,s:I,s:s},s:s,s:s,s:o,s:o}", "type", "cluster",
                              "event", x->audit, "node", c->self.id, "policy", "name", x->name,
                              "version", (json_int_t)x->audit_version, "digest", x->pending_digest,
                              "published_by", x->published_by, "published_at", x->published_at,
                              "in_force", x->version ? json_integer(x->version) : json_null(),
                              "error", x->error[0] ? json_string(x->error) : json_null());
        json_array_append_new(recs, r);
        x->audit[0] = '\0';
    }
    pthread_mutex_unlock(&c->mu);
    size_t i;
    json_t *r;
    json_array_foreach(recs, i, r)
    {
        char what[CP_POLICY_NAME_MAX + 64];
        snprintf(what, sizeof what, "cluster: policy %s version %lld",
                 json_string_value(json_object_get(json_object_get(r, "policy"), "name")),
                 (long long)json_integer_value(
                     json_object_get(json_object_get(r, "policy"), "version")));
        cp_audit_record(c->cp, json_incref(r), what, NULL, NULL);
    }
    json_decref(recs);
}

/* One reload of airlock-egress, and the versions it makes current. */
struct cluster__reload {
    struct cp *cp;
    uint64_t gen;
};

/* airlock-egress re-read the policy files (rc 0, its report), or could not (rc < 0), or does
 * not run (rc 1): the versions written before the reload are in force. */
static void cluster__pol_reloaded(void *arg, int rc, const json_t *report)
{
    struct cluster__reload *r = arg;
    struct cp_cluster *c = r->cp->cluster;
    uint64_t gen = r->gen;
    free(r);
    if (!c)
        return; /* airlockd stops */
    const json_t *failed = report ? json_object_get(report, "failed") : NULL;
    char now[40];
    al_time_rfc3339(now, sizeof now, al_wall_ns());
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_pol; i++) {
        struct cluster__pol *x = &c->pol[i];
        if (!x->pending || x->reload_gen != gen)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s.yaml", c->cp->cfg.policies_path, x->name);
        x->error[0] = '\0';
        if (rc < 0) {
            snprintf(x->error, sizeof x->error,
                     "version %lld is in the policies directory (new sandboxes get it), but "
                     "airlock-egress did not re-read it: its sandboxes keep the version before "
                     "until it does",
                     (long long)x->pending);
        } else {
            size_t k, bad = 0;
            const json_t *f;
            const char *first = NULL;
            json_array_foreach(failed, k, f)
            {
                const char *m = json_string_value(json_object_get(f, "error"));
                if (m && strstr(m, path)) {
                    bad++;
                    first = first ? first : m;
                }
            }
            if (bad)
                snprintf(x->error, sizeof x->error,
                         "airlock-egress kept the version before for %zu sandbox%s: %.300s", bad,
                         bad == 1 ? "" : "es", first);
        }
        x->version = x->pending;
        snprintf(x->digest, sizeof x->digest, "%s", x->pending_digest);
        snprintf(x->applied_at, sizeof x->applied_at, "%s", now);
        if (x->failed_version < x->pending)
            x->failed_version = 0;
        snprintf(x->audit, sizeof x->audit, "policy_applied");
        x->audit_version = x->pending;
        al_info("cluster: policy %s version %lld (digest %.16s..., published by %s at %s) is in "
                "force%s%s",
                x->name, (long long)x->version, x->digest, x->published_by, x->published_at,
                x->error[0] ? ", but " : "", x->error);
        x->pending = 0;
        x->reload_gen = 0;
        c->pol_dirty = true;
    }
    pthread_mutex_unlock(&c->mu);
    cluster__pol_audit(c);
}

/* The thread applied or refused versions: their records, and a reload of airlock-egress for
 * those it wrote (a sandbox's policy is its file: the proxy re-reads the files). */
static void cluster__pol_applied(struct cp_cluster_job *j, void *arg)
{
    struct cp *cp = arg;
    free(j);
    struct cp_cluster *c = cp->cluster;
    if (!c || c->stop)
        return;
    cluster__pol_audit(c);
    struct cluster__reload *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->cp = cp;
    bool any = false;
    pthread_mutex_lock(&c->mu);
    r->gen = ++c->reload_gen;
    for (size_t i = 0; i < c->n_pol; i++)
        if (c->pol[i].pending && !c->pol[i].reload_gen) {
            c->pol[i].reload_gen = r->gen;
            any = true;
        }
    pthread_mutex_unlock(&c->mu);
    if (!any)
        free(r);
    else if (!cp->egress)
        cluster__pol_reloaded(r, 1, NULL);
    else if (cp_egress_reload(cp->egress, cluster__pol_reloaded, r))
        cluster__pol_reloaded(r, -EIO, NULL);
}

/* One node_lost event per sandbox the lost node had, on this gateway's event log and
 * webhooks. */
static void cluster__lost_done(struct cp_cluster_job *j, void *arg)
{
    struct cluster__lost *l = (struct cluster__lost *)j;
    struct cp_cluster *c = arg;
    char why[400];
    if (l->lease_expires_at[0])
        snprintf(why, sizeof why,
                 "its cluster node %s lost its lease at %s (its last heartbeat: %s): the node "
                 "stopped or can no longer reach the cluster database; until it is back the "
                 "sandbox answers 404 and its data plane 502",
                 l->node_id, l->lease_expires_at, l->heartbeat_at);
    else
        snprintf(why, sizeof why,
                 "its cluster node %s was removed from the cluster database; the sandbox "
                 "answers 404 and its data plane 502",
                 l->node_id);
    if (j->rc == 0 && !c->stop) {
        al_warn("cluster: node %s lost its lease: %zu of its sandboxes are unreachable "
                "(a node_lost event for each%s)",
                l->node_id, l->sandboxes.total,
                l->sandboxes.n < l->sandboxes.total ? ", for the first of them" : "");
        for (size_t i = 0; i < l->sandboxes.n; i++) {
            const struct cp_cluster_placed *p = &l->sandboxes.v[i];
            /* A reservation is a creation under way, not a sandbox anyone knows. */
            if (strncmp(p->id, CP_CLUSTER_RESERVATION_PREFIX,
                        strlen(CP_CLUSTER_RESERVATION_PREFIX)) == 0)
                continue;
            struct cp_event_subject who = {.sandbox_id = p->id,
                                           .template_id = p->template_id,
                                           .build_id = "",
                                           .execution_id = ""};
            json_t *d =
                json_pack("{s:s,s:s?,s:s?,s:s}", "node_id", l->node_id, "lease_expired_at",
                          l->lease_expires_at[0] ? l->lease_expires_at : NULL, "last_heartbeat_at",
                          l->heartbeat_at[0] ? l->heartbeat_at : NULL, "why", why);
            cp_event_emit_for(c->cp, &who, CP_EV_NODE_LOST, CP_CAUSE_NODE, NULL, d);
        }
    }
    cp_cluster_placed_free(&l->sandboxes);
    free(l);
}

static void cluster__deliver(struct cp_cluster_job *j)
{
    if (j->done)
        j->done(j, j->arg);
    else
        free(j);
}

static void cluster__on_async(uv_async_t *h)
{
    struct cp_cluster *c = h->data;
    pthread_mutex_lock(&c->mu);
    struct cp_cluster_job *j = c->answers;
    c->answers = NULL;
    pthread_mutex_unlock(&c->mu);
    while (j) {
        struct cp_cluster_job *next = j->next;
        cluster__deliver(j);
        j = next;
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

static int cluster__live_id(void *v, void *arg)
{
    const struct cp_sandbox *sb = v;
    json_array_append_new(arg, json_string(sb->rec.id));
    return 0;
}

/* The node's templates and their warm sandboxes ready, and its sandboxes, for the thread's
 * next heartbeat. */
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
    /* The sandboxes it has, whatever their state: the heartbeat's reconciliation forgets
     * the placements of the others. */
    json_t *ids = json_array();
    if (ids)
        cp_map_foreach(&cp->sandboxes, cluster__live_id, ids);
    char *l = ids ? json_dumps(ids, JSON_COMPACT) : NULL;
    json_decref(ids);
    pthread_mutex_lock(&c->mu);
    if (s) {
        free(c->templates);
        c->templates = s;
    }
    /* Without a list this round the heartbeat reconciles nothing (rather than everything). */
    free(c->live);
    c->live = l;
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
                 strncmp(cp->api_url, "http://", 7) == 0    ? cp->api_url + 7
                 : strncmp(cp->api_url, "https://", 8) == 0 ? cp->api_url + 8
                                                            : cp->api_url);
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

/* The cluster token: AIRLOCK_CLUSTER_TOKEN, else cluster.token_file (not readable by group
 * or others: it lets its holder act as a gateway). */
static int cluster__token(const struct cp_config *cfg, char *out, size_t len)
{
    const char *env = getenv("AIRLOCK_CLUSTER_TOKEN");
    char *buf = NULL;
    size_t n = 0;
    if (env && env[0]) {
        snprintf(out, len, "%s", env);
    } else if (cfg->cluster_token_file && cfg->cluster_token_file[0]) {
        struct stat st;
        if (stat(cfg->cluster_token_file, &st) == 0 && (st.st_mode & 077)) {
            al_error("cluster: %s (cluster.token_file) is readable by group or others: chmod "
                     "0600 it",
                     cfg->cluster_token_file);
            return -EPERM;
        }
        struct al_error e = {0};
        if (al_read_file(cfg->cluster_token_file, len - 1, &buf, &n, &e)) {
            al_error("cluster: cluster.token_file: %s", al_error_str(&e));
            return -EINVAL;
        }
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
            n--;
        memcpy(out, buf, n);
        out[n] = '\0';
        sodium_memzero(buf, n);
        free(buf);
    } else {
        out[0] = '\0';
    }
    if (cfg->cluster_role == CP_CLUSTER_STANDALONE)
        return 0;
    n = strlen(out);
    if (n == 0 && cfg->cluster_tls_ca && cfg->cluster_tls_ca[0])
        return 0; /* mutual TLS alone */
    bool printable = n > 0;
    for (size_t i = 0; i < n; i++)
        printable = printable && out[i] > ' ' && out[i] < 0x7f;
    if (n < CP_CLUSTER_TOKEN_MIN || !printable) {
        al_error("cluster: the cluster token (AIRLOCK_CLUSTER_TOKEN or cluster.token_file) must "
                 "be at least %d printable characters without spaces (make one with `head -c 32 "
                 "/dev/urandom | od -An -tx1 | tr -d ' \\n'`, the same on every gateway and node)",
                 CP_CLUSTER_TOKEN_MIN);
        return -EINVAL;
    }
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
    c->cp = cp;
    c->role = cfg->cluster_role;
    c->conninfo = cfg->cluster_database;
    cp_cluster_db_describe(c->conninfo, c->conninfo_desc, sizeof c->conninfo_desc);
    if (cluster__token(cfg, c->token, sizeof c->token)) {
        free(c);
        return -EINVAL;
    }
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
    for (struct cp_cluster_job *j = c->jobs, *next; j; j = next) {
        next = j->next;
        j->rc = -ESHUTDOWN;
        snprintf(j->msg, sizeof j->msg, "airlockd is stopping");
        cluster__deliver(j);
    }
    c->jobs = NULL;
    cp_cluster_gw_close(cp);
    free(c->live);
    c->live = NULL;
    free(c->snap);
    c->snap = NULL;
    free(c->pol);
    c->pol = NULL;
    c->n_pol = 0;
    sodium_memzero(c->token, sizeof c->token);
    free(c->templates);
    c->templates = NULL;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    cp->cluster = NULL;
    uv_close((uv_handle_t *)&c->async, cluster__async_closed);
}

int cp_cluster_submit(struct cp *cp, struct cp_cluster_job *j)
{
    struct cp_cluster *c = cp->cluster;
    if (!c)
        return -ENODEV;
    j->next = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->stop) {
        /* Answered from the loop as always, never inside this call. */
        j->rc = -ESHUTDOWN;
        snprintf(j->msg, sizeof j->msg, "airlockd is stopping");
        j->next = c->answers;
        c->answers = j;
        pthread_mutex_unlock(&c->mu);
        uv_async_send(&c->async);
        return 0;
    }
    struct cp_cluster_job **t = &c->jobs;
    while (*t)
        t = &(*t)->next;
    *t = j;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void **cp_cluster_gw_slot(struct cp *cp)
{
    return cp->cluster ? &cp->cluster->gw : NULL;
}

const char *cp_cluster_token(const struct cp *cp)
{
    return cp->cluster ? cp->cluster->token : "";
}

int cp_cluster_node_state(struct cp *cp, const char *node_id, char *address, size_t len, bool *live)
{
    struct cp_cluster *c = cp->cluster;
    if (!c)
        return -EAGAIN;
    int rc = -ENOENT;
    pthread_mutex_lock(&c->mu);
    if (!c->snap)
        rc = -EAGAIN;
    for (size_t i = 0; c->snap && i < c->n_snap; i++)
        if (strcmp(c->snap[i].id, node_id) == 0) {
            snprintf(address, len, "%s", c->snap[i].address);
            *live = c->snap[i].live;
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cp_cluster_snapshot_live(struct cp *cp, struct cp_cluster_node **out, size_t *n)
{
    struct cp_cluster *c = cp->cluster;
    *out = NULL;
    *n = 0;
    if (!c)
        return -EAGAIN;
    pthread_mutex_lock(&c->mu);
    int rc = c->snap ? 0 : -EAGAIN;
    struct cp_cluster_node *v = c->snap && c->n_snap ? calloc(c->n_snap, sizeof *v) : NULL;
    if (c->snap && c->n_snap && !v)
        rc = -ENOMEM;
    for (size_t i = 0; v && i < c->n_snap; i++) {
        if (!c->snap[i].live)
            continue;
        struct cp_cluster_node *x = &v[(*n)++];
        snprintf(x->id, sizeof x->id, "%s", c->snap[i].id);
        snprintf(x->address, sizeof x->address, "%s", c->snap[i].address);
        x->lease_valid = true;
    }
    pthread_mutex_unlock(&c->mu);
    *out = v;
    return rc;
}

bool cp_cluster_from_gateway(const struct cp *cp, const struct al_http_req *req)
{
    /* Over TCP a node admits nothing without a gateway's certificate or the valid token
     * (cp_cluster_node_admit). */
    return cp->cfg.cluster_role == CP_CLUSTER_NODE && !req->peer.is_unix &&
           ((req->peer.tls && req->peer.tls_verified) ||
            al_http_req_header(req, CP_CLUSTER_TOKEN_HEADER) != NULL);
}

bool cp_cluster_node_admit(struct cp *cp, struct al_http_req *req)
{
    if (cp->cfg.cluster_role != CP_CLUSTER_NODE || req->peer.is_unix)
        return true;
    if (strcmp(req->method, "GET") == 0 &&
        (strcmp(req->path, "/health") == 0 || strcmp(req->path, "/metrics") == 0))
        return true;
    struct cp_cluster *c = cp->cluster;
    if (!c) {
        cp_rest_error(req, 503, "this node is joining the cluster: try again");
        return false;
    }
    if (cp_cluster_tls_on(cp) && !(req->peer.tls && req->peer.tls_verified)) {
        const char *why = !req->peer.tls         ? "it did not come through the TLS front"
                          : req->peer.tls_why[0] ? req->peer.tls_why
                                                 : "no certificate was presented";
        al_info("cluster: refused %s %.120s from a client without a gateway's certificate "
                "(%s)",
                req->method, req->path, why);
        cp_rest_error(req, 403,
                      "this airlockd is a cluster node: it serves the cluster's gateways only, "
                      "and a gateway presents a certificate of the cluster CA issued for "
                      "clientAuth; this client's certificate: %s",
                      why);
        return false;
    }
    if (!c->token[0]) /* mutual TLS alone: the certificate said it */
        return true;
    const char *t = al_http_req_header(req, CP_CLUSTER_TOKEN_HEADER);
    if (t && al_http_req_header_count(req, CP_CLUSTER_TOKEN_HEADER) == 1 &&
        cp_secret_equal(t, strlen(t), c->token, strlen(c->token)))
        return true;
    al_info("cluster: refused %s %.120s from a client that is not a gateway (no valid %s)",
            req->method, req->path, CP_CLUSTER_TOKEN_HEADER);
    cp_rest_error(req, 403,
                  "this airlockd is a cluster node: it serves the cluster's gateways only (send "
                  "requests to a gateway; a gateway proves itself with %s)",
                  CP_CLUSTER_TOKEN_HEADER);
    return false;
}

/* A job of the admin API (NULL, answered 500, without memory); submitted by the caller. */
static struct cluster__admin *cluster__admin_new(struct cp *cp, struct al_http_req *req, int kind,
                                                 const char *node_id)
{
    struct cluster__admin *a = calloc(1, sizeof *a);
    if (!a) {
        cp_rest_error(req, 500, "out of memory");
        return NULL;
    }
    a->j.kind = kind;
    a->j.done = cluster__admin_done;
    a->j.arg = cp->cluster;
    a->req = req;
    snprintf(a->node_id, sizeof a->node_id, "%s", node_id ? node_id : "");
    return a;
}

static void cluster__admin_submit(struct cp *cp, struct al_http_req *req, int kind,
                                  const char *node_id, bool live_only, bool cordon)
{
    struct cluster__admin *a = cluster__admin_new(cp, req, kind, node_id);
    if (!a)
        return;
    a->live_only = live_only;
    a->cordon = cordon;
    cp_cluster_submit(cp, &a->j);
}

/* PUT /admin/cluster/policies/{name}'s body: {"document": "<the policy's YAML>"}. */
static void cluster__publish_body(struct al_http_req *req, int err)
{
    struct cluster__admin *a = req->user;
    req->user = NULL;
    if (err < 0) { /* answered by the server (413, 408, 400) or the client left */
        free(a);
        return;
    }
    struct cp_cluster *c = a->j.arg;
    json_t *b = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, NULL);
    json_t *doc = json_object_get(b, "document");
    const char *bad = NULL;
    if (!json_is_object(b) || !json_is_string(doc) || json_object_size(b) != 1)
        bad = "the body is a JSON object {\"document\": \"<the policy's YAML>\"} and nothing else";
    else if (json_string_length(doc) == 0 || json_string_length(doc) > CP_CLUSTER_POLICY_MAX)
        bad = "the document is 1 byte to 1 MiB of YAML";
    else if (strlen(json_string_value(doc)) != json_string_length(doc))
        bad = "the document holds a NUL character: a policy is text";
    if (!bad && !(a->document = strdup(json_string_value(doc))))
        bad = "out of memory";
    json_decref(b);
    if (bad) {
        cp_rest_error(req, 400, "%s", bad);
        free(a);
        return;
    }
    cp_cluster_submit(c->cp, &a->j);
}

/* /admin/cluster/policies[/{name}[/{version}]] */
static void cluster__policies_route(struct cp *cp, struct al_http_req *req,
                                    const struct cp_principal *who)
{
    const char *p = req->path, *q = p + strlen("/admin/cluster/policies");
    bool get = strcmp(req->method, "GET") == 0;
    if (*q == '\0') {
        if (!get)
            cp_rest_error(req, 405, "%s is not allowed on %s (GET)", req->method, p);
        else
            cluster__admin_submit(cp, req, CLUSTER__POL_LIST, NULL, false, false);
        return;
    }
    char name[CP_POLICY_NAME_MAX], ver[24] = "";
    bool ok = *q++ == '/' && cp_rest_path_part(&q, name, sizeof name) && cp_policy_name_valid(name);
    if (ok && *q)
        ok = *q++ == '/' && cp_rest_path_part(&q, ver, sizeof ver) && !*q;
    if (!ok) {
        cp_rest_error(req, 404,
                      "no such endpoint: %s %s (policy names are letters, digits, '.', '_' and "
                      "'-'; versions are numbers)",
                      req->method, p);
        return;
    }
    char *end = NULL;
    long long v = ver[0] ? strtoll(ver, &end, 10) : 0;
    if (ver[0] && (*end || v <= 0 || v > INT32_MAX)) {
        cp_rest_error(req, 404, "no such version: %s (versions are 1, 2, ...)", ver);
        return;
    }
    bool put = strcmp(req->method, "PUT") == 0;
    if (ver[0] ? !get : !get && !put) {
        cp_rest_error(req, 405, "%s is not allowed on %s (%s)", req->method, p,
                      ver[0] ? "GET" : "GET lists its versions, PUT publishes a new one");
        return;
    }
    struct cluster__admin *a = cluster__admin_new(cp, req,
                                                  put      ? CLUSTER__POL_PUBLISH
                                                  : ver[0] ? CLUSTER__POL_GET
                                                           : CLUSTER__POL_VERSIONS,
                                                  NULL);
    if (!a)
        return;
    snprintf(a->policy, sizeof a->policy, "%s", name);
    a->version = v;
    if (!put) {
        cp_cluster_submit(cp, &a->j);
        return;
    }
    snprintf(a->who, sizeof a->who, "%s", who->key_id);
    req->user = a;
    int rc = al_http_req_read_body(req, 4 * CP_CLUSTER_POLICY_MAX, cluster__publish_body);
    if (rc < 0) {
        req->user = NULL;
        free(a);
        cp_rest_error(req, 400, "cannot read the request body: %s", strerror(-rc));
    }
}

bool cp_cluster_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    const char *p = req->path;
    if (strncmp(p, "/admin/cluster/", 15) != 0)
        return false;
    bool policies = strcmp(p, "/admin/cluster/policies") == 0 ||
                    strncmp(p, "/admin/cluster/policies/", 24) == 0;
    if (!policies && strcmp(p, "/admin/cluster/nodes") != 0 &&
        strncmp(p, "/admin/cluster/nodes/", 21) != 0) {
        cp_rest_error(req, 404, "no such endpoint: %s %s", req->method, p);
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
    if (policies) {
        cluster__policies_route(cp, req, who);
        return true;
    }
    if (strcmp(p, "/admin/cluster/nodes") == 0) {
        if (strcmp(req->method, "GET") != 0) {
            cp_rest_error(req, 405, "%s is not allowed on %s (GET)", req->method, p);
            return true;
        }
        char live[8] = "";
        int rc = al_http_query_get(req->query, "live", live, sizeof live);
        if ((rc && rc != -ENOENT) || (live[0] && strcmp(live, "true") && strcmp(live, "false"))) {
            cp_rest_error(req, 400, "live must be true or false");
            return true;
        }
        cluster__admin_submit(cp, req, CLUSTER__NODES, NULL, strcmp(live, "true") == 0, false);
        return true;
    }
    /* /admin/cluster/nodes/{id}[/cordon|/uncordon] */
    const char *q = p + 21;
    char id[CP_CLUSTER_NODE_ID_MAX];
    if (!cp_rest_path_part(&q, id, sizeof id) || !cp_cluster_node_id_valid(id)) {
        cp_rest_error(req, 404, "no such node: %s (node ids are 1..63 of a-z 0-9 . -)", p + 21);
        return true;
    }
    if (*q == '\0') {
        if (strcmp(req->method, "GET") != 0)
            cp_rest_error(req, 405, "%s is not allowed on %s (GET)", req->method, p);
        else
            cluster__admin_submit(cp, req, CLUSTER__NODE, id, false, false);
        return true;
    }
    bool cordon = strcmp(q, "/cordon") == 0;
    if (!cordon && strcmp(q, "/uncordon") != 0) {
        cp_rest_error(req, 404, "no such endpoint: %s %s (a node has /cordon and /uncordon)",
                      req->method, p);
        return true;
    }
    if (strcmp(req->method, "POST") != 0) {
        cp_rest_error(req, 405, "%s is not allowed on %s (POST)", req->method, p);
        return true;
    }
    cluster__admin_submit(cp, req, CLUSTER__CORDON, id, false, cordon);
    return true;
}
