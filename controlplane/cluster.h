/* controlplane/cluster: this airlockd's part in a cluster (cluster.role, docs/cluster.md).
 *
 * Owns: the thread that talks to the cluster database (cluster_db.c) so that the event loop
 * never waits for PostgreSQL: at start it connects and migrates the schema; a node registers
 * itself (id, advertised address, capacity, versions) and renews its lease every
 * cluster.heartbeat_interval; a database outage is logged once, the node keeps serving its
 * sandboxes, and it reconnects and registers again (a lost lease included) when the database
 * is back; a clean stop releases the lease. A node's heartbeat carries the ids of its
 * sandboxes (the database forgets placements of those that ended). A gateway's thread keeps
 * a snapshot of the nodes (address, lease) for routing through an outage, and reports the
 * nodes whose lease it sees end: a node_lost event of each sandbox placed there. The jobs the loop
 * hands the thread (struct cp_cluster_job: placements, owners, node lists, cordons) are
 * answered on the loop. The admin API /admin/cluster/nodes[/{id}[/cordon|/uncordon]] and
 * /admin/cluster/policies[/{name}[/{version}]]: a policy published (linted first, refused
 * with its findings) as a new version in the database; a node applies each newest version
 * (checked, written into its policies directory, airlock-egress made to re-read it), audits
 * it, and reports per policy the version in force, or why it refused one. The
 * cluster token (cluster.token_file, AIRLOCK_CLUSTER_TOKEN): gateways send it to nodes, nodes
 * refuse API requests over TCP without it (cp_cluster_node_admit). The live nodes a
 * gateway's list asks (from the database, or its snapshot through an outage).
 * Nothing here runs without cluster.database: a standalone airlockd never connects.
 */
#ifndef AIRLOCK_CP_CLUSTER_H
#define AIRLOCK_CP_CLUSTER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cluster_db.h"
#include "common/http.h"

struct cp;

/* The header gateways prove themselves to nodes with (the interim until mutual TLS). */
#define CP_CLUSTER_TOKEN_HEADER "X-Airlock-Cluster-Token"
/* A node's sandbox list answered to a gateway gives each sandbox's start time in
 * nanoseconds under this field (startedAt has milliseconds): the gateway merges the nodes'
 * pages in the order and with the page tokens a single airlockd uses (controlplane/list),
 * and removes the field before answering its client. */
#define CP_CLUSTER_LIST_STARTED_FIELD "airlockStartedNs"

/* Starts the database thread (once the API listens: a node advertises where it serves).
 * No-op without cluster.database. 0, or a negative errno (logged). */
int cp_cluster_start(struct cp *cp);
/* The running sandboxes, for the next heartbeat (from the loop's tick). */
void cp_cluster_tick(struct cp *cp);
/* Stops: the thread releases a node's lease and ends; requests still waiting get 503. */
void cp_cluster_stop(struct cp *cp);
/* Waits for the thread (bounded by the database's timeouts) and releases everything; the
 * loop must still run once afterwards (a handle is closing). */
void cp_cluster_close(struct cp *cp);
/* /admin/cluster/...: true when it answered req (authenticated already, as who). */
struct cp_principal;
bool cp_cluster_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who);
/* A node with a cluster token: false when req came over TCP without it (answered 403 then);
 * /health and /metrics, and the local socket, need none. True on other roles. */
bool cp_cluster_node_admit(struct cp *cp, struct al_http_req *req);
/* The cluster token ("" without a cluster). */
const char *cp_cluster_token(const struct cp *cp);
/* The gateway's last snapshot of a node (refreshed every heartbeat interval, kept through a
 * database outage): 0 with its address and whether its lease was valid; -ENOENT: no such
 * node; -EAGAIN: no snapshot yet. */
int cp_cluster_node_state(struct cp *cp, const char *node_id, char *address, size_t len,
                          bool *live);
/* The gateway's last snapshot of the nodes with a valid lease (id, address, lease_valid of
 * each; *out is the caller's: cp_cluster_nodes_free). -EAGAIN: no snapshot yet. */
int cp_cluster_snapshot_live(struct cp *cp, struct cp_cluster_node **out, size_t *n);
/* A request a node got from a gateway (over TCP, so with the valid cluster token). */
bool cp_cluster_from_gateway(const struct cp *cp, const struct al_http_req *req);

enum cp_cluster_job_kind {
    CP_CLUSTER_JOB_PLACE, /* in: sandbox_id, template_id, cpu, memory_bytes, exclude; out: owner */
    CP_CLUSTER_JOB_UNPLACE,    /* in: sandbox_id */
    CP_CLUSTER_JOB_RENAME,     /* in: sandbox_id (the reservation), to_id */
    CP_CLUSTER_JOB_OWNER,      /* in: sandbox_id; out: owner */
    CP_CLUSTER_JOB_LIVE_NODES, /* out: nodes, n_nodes (those with a valid lease) */
};

/* Work for the database thread, answered on the loop. The caller's until done runs. */
struct cp_cluster_job {
    int kind; /* enum cp_cluster_job_kind */
    char sandbox_id[64], to_id[64];
    char template_id[160];
    int64_t cpu;
    uint64_t memory_bytes;
    char exclude[2][CP_CLUSTER_NODE_ID_MAX];
    size_t n_exclude;
    /* the answer: rc 0, or a negative errno with msg (-ENOTCONN: the database is
     * unreachable, -ESHUTDOWN: airlockd is stopping; otherwise cluster_db.h's) */
    int rc;
    char msg[AL_ERROR_MSG_MAX];
    struct cp_cluster_owner owner;
    struct cp_cluster_node *nodes; /* the caller's once done (cp_cluster_nodes_free) */
    size_t n_nodes;
    /* on the loop, once; NULL: nobody waits */
    void (*done)(struct cp_cluster_job *j, void *arg);
    void *arg;
    struct cp_cluster_job *next;
};

/* Queues j; done runs on the loop (also when airlockd stops first: rc -ESHUTDOWN). With
 * done NULL the job is freed (free()) once run. -ENODEV: no cluster database (j untouched). */
int cp_cluster_submit(struct cp *cp, struct cp_cluster_job *j);

/* The gateway (cluster_gw.c). Data-plane traffic of sandboxes (E2b-Sandbox-Id, a
 * "<port>-<id>.<domain>" Host): before anything else; true when it answered req. */
bool cp_cluster_gw_data(struct cp *cp, struct al_http_req *req);
/* After authentication: creations, the control plane of one sandbox and the lists; true
 * when it answered req. */
bool cp_cluster_gw_api(struct cp *cp, struct al_http_req *req);
/* The route cache's entry for a sandbox that ended or moved. */
void cp_cluster_gw_forget(struct cp *cp, const char *sandbox_id);
void cp_cluster_gw_close(struct cp *cp);
/* Where cluster.c keeps the gateway's state for cluster_gw.c (NULL without a cluster). */
void **cp_cluster_gw_slot(struct cp *cp);

#endif
