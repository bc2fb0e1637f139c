/* controlplane/cluster: this airlockd's part in a cluster (cluster.role, docs/cluster.md).
 *
 * Owns: the thread that talks to the cluster database (cluster_db.c) so that the event loop
 * never waits for PostgreSQL: at start it connects and migrates the schema; a node registers
 * itself (id, advertised address, capacity, versions) and renews its lease every
 * cluster.heartbeat_interval; a database outage is logged once, the node keeps serving its
 * sandboxes, and it reconnects and registers again (a lost lease included) when the database
 * is back; a clean stop releases the lease. And GET /admin/cluster/nodes: the nodes with their
 * lease state, read on that thread and answered on the loop.
 * Nothing here runs without cluster.database: a standalone airlockd never connects.
 */
#ifndef AIRLOCK_CP_CLUSTER_H
#define AIRLOCK_CP_CLUSTER_H

#include <stdbool.h>

#include "common/http.h"

struct cp;

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
/* /admin/cluster/...: true when it answered req (authenticated already). */
bool cp_cluster_route(struct cp *cp, struct al_http_req *req);

#endif
