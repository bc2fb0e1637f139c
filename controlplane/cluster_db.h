/* controlplane/cluster_db: the cluster's shared state in PostgreSQL (libpq).
 *
 * Owns: the connection to the cluster database (a libpq conninfo from cluster.database; its
 * secrets never logged: cp_cluster_db_describe names only host, port, database and user), the
 * versioned schema (migrations applied in one transaction, serialised across processes by an
 * advisory lock; a database whose schema needs a newer binary than this one is refused), and the
 * nodes table: registration, heartbeats renewing a lease, release, and listing with the lease
 * state. Every lease decision uses the database's clock (now()), never a process's: nodes and
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

/* The newest schema this binary knows (and migrates to). */
#define CP_CLUSTER_SCHEMA_VERSION 1
#define CP_CLUSTER_NODE_ID_MAX    64
#define CP_CLUSTER_ADDRESS_MAX    256
#define CP_CLUSTER_INSTANCE_LEN   32

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
    /* listed only */
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
/* Renews the lease of (id, instance) and records its running sandboxes. -ESTALE: the lease
 * was lost (it expired, or another instance registered the id): register again. */
int cp_cluster_db_heartbeat(struct cp_cluster_db *db, const char *id, const char *instance,
                            int64_t sandboxes_running, uint64_t lease_ms, struct al_error *err);
/* Ends the lease of (id, instance) now (a clean stop). */
int cp_cluster_db_release(struct cp_cluster_db *db, const char *id, const char *instance,
                          struct al_error *err);
/* Sets a node's cordon (no new sandboxes are placed on it). -ENOENT: no such node. */
int cp_cluster_db_cordon(struct cp_cluster_db *db, const char *id, bool cordoned,
                         struct al_error *err);
/* Every node (live_only: only those with a valid lease), by id; *out is the caller's (free). */
int cp_cluster_db_nodes(struct cp_cluster_db *db, bool live_only, struct cp_cluster_node **out,
                        size_t *n, struct al_error *err);

/* A valid node id: 1..63 of [a-z0-9.-], starting with a letter or digit (a DNS label or name,
 * as Kubernetes node names are). */
bool cp_cluster_node_id_valid(const char *id);

#endif
