/* controlplane/cluster_db: the cluster's shared state in PostgreSQL (libpq).
 *
 * Owns: the connection to the cluster database (a libpq conninfo from cluster.database; its
 * secrets never logged: cp_cluster_db_describe names only host, port, database and user), the
 * versioned schema (migrations applied in one transaction, serialised across processes by an
 * advisory lock; a database whose schema needs a newer binary than this one is refused), and the
 * nodes table: registration, heartbeats renewing a lease, release, and listing with the lease
 * state; the sandboxes placed on nodes (their owner node and the capacity each books), and the
 * placement itself: one statement that picks a node and books its capacity, so that creations
 * from several gateways at once never book more than a node has. Published policies: numbered
 * versions of each policy (its document, digest, who published it and a signature with the
 * cluster token), and what each node reports it applies. Every lease decision uses the database's clock (now()), never a process's: nodes and
 * gateways on different machines agree on which leases are valid whatever their clocks say.
 *
 * Blocking: every call waits for the database (bounded by connect_timeout and
 * statement_timeout, which the caller's conninfo may override). Never call it on the event
 * loop; controlplane/cluster.c runs it on a thread of its own. One object per thread.
 */
#ifndef AIRLOCK_CP_CLUSTER_DB_H
#define AIRLOCK_CP_CLUSTER_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "record.h" /* CP_POLICY_NAME_MAX */

/* The newest schema this binary knows (and migrates to). */
#define CP_CLUSTER_SCHEMA_VERSION 3
#define CP_CLUSTER_NODE_ID_MAX    64
#define CP_CLUSTER_ADDRESS_MAX    256
#define CP_CLUSTER_INSTANCE_LEN   32
/* A gateway places a creation under a reservation id with this prefix until the node names
 * the sandbox (cp_cluster_db_rename); no sandbox id starts so. */
#define CP_CLUSTER_RESERVATION_PREFIX "pending-"
/* A heartbeat's reconciliation spares records younger than this (a creation the node had not
 * finished when it took the list it reports) and reservations younger than the second. */
#define CP_CLUSTER_RECONCILE_GRACE_S 60
/* The cluster token's least length (cluster.c). */
#define CP_CLUSTER_TOKEN_MIN         32
#define CP_CLUSTER_RESERVATION_MAX_S 900

struct cp_cluster_db;

/* A node as it registers (id .. version) and as it is listed (all of it). */
struct cp_cluster_node {
    char id[CP_CLUSTER_NODE_ID_MAX];
    char address[CP_CLUSTER_ADDRESS_MAX]; /* where gateways reach its API (HOST:PORT) */
    /* This airlockd process (random, per start): a second process registering the same id
     * while the first one's lease is valid is refused. Not listed. */
    char instance[CP_CLUSTER_INSTANCE_LEN + 1];
    int64_t cpu;
    uint64_t memory_bytes;
    int64_t sandboxes_max;
    int64_t sandboxes_running;
    char version[64]; /* airlockd's */
    /* The templates present on the node and how many warm sandboxes of each are ready: a
     * JSON object {"template": ready, ...} (NULL: none). The caller's when registering and
     * in heartbeats; allocated in a listing (cp_cluster_nodes_free). */
    char *templates;
    /* heartbeats only: the ids of the sandboxes the node has, a JSON array (NULL: no
     * reconciliation); the caller's */
    char *live;
    /* listed only: the published policies the node reports applying, a JSON object
     * {"name": {"version", "digest", "appliedAt", "error", "failedVersion"?}} (allocated) */
    char *policies;
    /* listed only: what placements booked (cp_cluster_db_place) */
    int64_t cpu_booked;
    uint64_t memory_booked;
    int64_t sandboxes_booked;
    bool cordoned;
    int schema_version;    /* the schema the node's airlockd knew */
    bool lease_valid;      /* lease_expires_at > now(), by the database */
    int64_t lease_left_ms; /* negative once expired */
    char registered_at[32], heartbeat_at[32], lease_expires_at[32]; /* RFC 3339, UTC */
};

/* Connects. conninfo: a libpq connection string or URI. 0, or a negative errno with err
 * saying why (without the conninfo's secrets). */
int cp_cluster_db_open(const char *conninfo, struct cp_cluster_db **out, struct al_error *err);
void cp_cluster_db_close(struct cp_cluster_db *db);
/* False once the connection broke (the caller reconnects). */
bool cp_cluster_db_ok(const struct cp_cluster_db *db);
/* "host=... port=... dbname=... user=..." of a conninfo, for logs (never a password). */
void cp_cluster_db_describe(const char *conninfo, char *out, size_t len);

/* Brings the schema to CP_CLUSTER_SCHEMA_VERSION in one transaction; *version (may be NULL)
 * gets the schema's version afterwards (above CP_CLUSTER_SCHEMA_VERSION when a newer airlockd
 * migrated it with changes this one can still work with: only additions). -EPROTO: the schema
 * needs a newer binary than this one. */
int cp_cluster_db_migrate(struct cp_cluster_db *db, int *version, struct al_error *err);

/* Registers n (or renews its registration) with a lease of lease_ms from the database's now.
 * Keeps a node's cordon. -EBUSY: another instance holds a valid lease on that id. */
int cp_cluster_db_register(struct cp_cluster_db *db, const struct cp_cluster_node *n,
                           uint64_t lease_ms, struct al_error *err);
/* Renews the lease of (n->id, n->instance) and records its running sandboxes and its
 * templates (n->templates). With n->live (a JSON array of the ids of the sandboxes the node
 * has), the same statement reconciles the placements: a sandbox recorded on the node that
 * the node no longer has (it ended there: timeout, kill) and that was placed more than
 * CP_CLUSTER_RECONCILE_GRACE_S ago loses its record and books its capacity back, and so does
 * a reservation (CP_CLUSTER_RESERVATION_PREFIX) older than CP_CLUSTER_RESERVATION_MAX_S (its
 * gateway died during the creation). -ESTALE: the lease was lost (it expired, or another
 * instance registered the id): register again. -EINVAL: n->templates is not a JSON object of
 * counts. */
int cp_cluster_db_heartbeat(struct cp_cluster_db *db, const struct cp_cluster_node *n,
                            uint64_t lease_ms, struct al_error *err);
/* Ends the lease of (id, instance) now (a clean stop). */
int cp_cluster_db_release(struct cp_cluster_db *db, const char *id, const char *instance,
                          struct al_error *err);
/* Sets a node's cordon (no new sandboxes are placed on it). -ENOENT: no such node. */
int cp_cluster_db_cordon(struct cp_cluster_db *db, const char *id, bool cordoned,
                         struct al_error *err);
/* Every node (live_only: only those with a valid lease), by id; *out is the caller's
 * (cp_cluster_nodes_free). */
int cp_cluster_db_nodes(struct cp_cluster_db *db, bool live_only, struct cp_cluster_node **out,
                        size_t *n, struct al_error *err);
void cp_cluster_nodes_free(struct cp_cluster_node *v, size_t n);

/* A creation to place. */
struct cp_cluster_place {
    const char *sandbox_id;
    const char *template_id; /* a node must have it (in its heartbeat's templates) */
    int64_t cpu;             /* what it books of the node: vCPUs, memory */
    uint64_t memory_bytes;
    /* Nodes not to pick (a start failed there already), n_exclude of them. */
    const char *const *exclude;
    size_t n_exclude;
};

/* Where a sandbox lives. */
struct cp_cluster_owner {
    char node_id[CP_CLUSTER_NODE_ID_MAX];
    char address[CP_CLUSTER_ADDRESS_MAX];
    bool warm;        /* place: the node had a warm sandbox of the template ready */
    bool lease_valid; /* lookup: the owner's lease is valid, by the database */
};

/* Picks a node for p and books its capacity and records the sandbox as its, in one statement
 * (so one transaction): of the nodes with a valid lease, not cordoned, not excluded, with the
 * template and with room for p (a sandbox slot, p->cpu, p->memory_bytes), one with a warm
 * sandbox of the template ready first, then the least loaded (its most used of slots, CPU and
 * memory), then at random. The chosen row is locked and its room checked again as it is
 * booked: concurrent placements from any number of gateways never book more than a node has.
 * A warm sandbox it counted on is taken off the node's count until its next heartbeat.
 * -EHOSTDOWN: no node has a valid lease; -ENOENT: no live node has the template; -ENOSPC:
 * those that have it are full, cordoned or excluded; -EEXIST: the sandbox id is placed
 * already; -EINVAL: a bad request. err says which, with the numbers. */
int cp_cluster_db_place(struct cp_cluster_db *db, const struct cp_cluster_place *p,
                        struct cp_cluster_owner *out, struct al_error *err);
/* The sandbox ended (or its start failed): its record goes and its owner's capacity is
 * booked back, in one statement. -ENOENT: not placed. */
int cp_cluster_db_unplace(struct cp_cluster_db *db, const char *sandbox_id, struct al_error *err);
/* A placement made under a reservation id (before the node named the sandbox) takes the id
 * the node gave it; placed_at restarts (the heartbeat's reconciliation counts from it).
 * -ENOENT: no such reservation; -EEXIST: the new id is placed already. */
int cp_cluster_db_rename(struct cp_cluster_db *db, const char *from, const char *to,
                         struct al_error *err);
/* A sandbox placed on a node. */
struct cp_cluster_placed {
    char id[64];
    char template_id[160];
};
struct cp_cluster_placed_list {
    struct cp_cluster_placed *v; /* by placement time */
    size_t n;                    /* in v */
    size_t total;                /* placed on the node in all */
};
/* The sandboxes placed on a node, at most max of them in out->v (the caller's:
 * cp_cluster_placed_free). */
int cp_cluster_db_node_sandboxes(struct cp_cluster_db *db, const char *node_id, size_t max,
                                 struct cp_cluster_placed_list *out, struct al_error *err);
void cp_cluster_placed_free(struct cp_cluster_placed_list *l);
/* The owner of a placed sandbox. -ENOENT: not placed. */
int cp_cluster_db_owner(struct cp_cluster_db *db, const char *sandbox_id,
                        struct cp_cluster_owner *out, struct al_error *err);

/* ---- published policies ---------------------------------------------------------------- */

/* The largest document a publication takes. */
#define CP_CLUSTER_POLICY_MAX (1u << 20)

/* One published version of a policy. */
struct cp_cluster_policy {
    char name[CP_POLICY_NAME_MAX];
    int64_t version; /* 1, 2, ... per name */
    char digest[65]; /* SHA-256 of the document, hex */
    /* HMAC-SHA256 of (name, version, digest) keyed with the cluster token, hex; "" when the
     * publishing airlockd had no token (mutual TLS alone) */
    char signature[65];
    char published_at[32]; /* RFC 3339, UTC, by the database's clock */
    char published_by[64]; /* the API key id that published it */
    char *document;        /* the YAML (cp_cluster_db_policy only; the caller frees it) */
};

/* The hex digest of a document (SHA-256). */
void cp_cluster_policy_digest(const char *doc, size_t len, char out[65]);
/* The signature of p (name, version, digest) with token into out ("" without a token). */
void cp_cluster_policy_sign(const char *token, const struct cp_cluster_policy *p, char out[65]);
/* Whether p's signature is token's (constant time). */
bool cp_cluster_policy_signed(const char *token, const struct cp_cluster_policy *p);
/* Publishes a new version of p->name (p->document, p->published_by; the digest, version and
 * signature are computed here): the next version of that name, written in one statement (a
 * concurrent publication of the same name that took the number first makes this one take
 * the next). *out gets the row as written (its document NULL). -EINVAL: a bad name or
 * document. */
int cp_cluster_db_policy_publish(struct cp_cluster_db *db, const struct cp_cluster_policy *p,
                                 const char *token, struct cp_cluster_policy *out,
                                 struct al_error *err);
/* name NULL: the newest version of every published policy, by name; otherwise every version
 * of name, newest first. Without documents; *out is the caller's (free()). */
int cp_cluster_db_policies(struct cp_cluster_db *db, const char *name,
                           struct cp_cluster_policy **out, size_t *n, struct al_error *err);
/* One version (0: the newest) with its document (out->document: the caller's). -ENOENT. */
int cp_cluster_db_policy(struct cp_cluster_db *db, const char *name, int64_t version,
                         struct cp_cluster_policy *out, struct al_error *err);
/* What node (id, instance) applies: a JSON object (cp_cluster_node.policies), while the
 * instance holds the id. */
int cp_cluster_db_policies_report(struct cp_cluster_db *db, const char *id, const char *instance,
                                  const char *applied, struct al_error *err);

/* A valid node id: 1..63 of [a-z0-9.-], starting with a letter or digit (a DNS label or name,
 * as Kubernetes node names are). */
bool cp_cluster_node_id_valid(const char *id);

#endif
