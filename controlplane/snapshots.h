/* controlplane/snapshots: E2B's snapshot API for jail sandboxes (file system only).
 *
 * Owns: POST /sandboxes/{id}/snapshots (Sandbox.createSnapshot: runs as an operation of the
 * sandbox's queue, CP_OP_SNAPSHOT, so it never overlaps a pause, resume or kill of it),
 * POST /sandboxes/{id}/rollback (an airlock extension: the sandbox's file system replaced by
 * one of its own snapshots in place, CP_OP_ROLLBACK in the same queue), POST
 * /sandboxes/{id}/fork (sbx.fork: a checkpoint as a snapshot, CP_OP_FORK in the same queue,
 * then new sandboxes started from it; the checkpoint is no snapshot anyone lists, and goes
 * once they started), GET /snapshots
 * (listSnapshots: the caller's key's snapshots, oldest first, paged by
 * limit/nextToken and x-next-token, filtered by sandboxID and name), DELETE /templates/{id}
 * of a snapshot id (deleteSnapshot), what Sandbox.create(snapshotID) starts from
 * (cp_snapshot_for_create), the snapshot store's directory <state>/snapshots and its sweep.
 *
 * A snapshot is the sandbox's writable layer captured by airlock-vmm (POST /snapshot,
 * vmm/jail/snapshot.c) into <state>/snapshots/<id> and, once complete, a row of the store's
 * snapshots table (cp_store_snap_*): a directory there without a row is incomplete or
 * deleted, and goes at the next start. The row names the template version the layer applies
 * to ("ID:BUILD" when the template has builds): that version stays on disk while a snapshot
 * needs it (cp_snapshots_use_version, builds.c's GC). Only the file system is kept. The
 * store is encrypted at rest by its file system where it can be (atrest.h, at start).
 *
 * Retention: snapshots.keep_per_sandbox and snapshots.keep_per_key are applied after each
 * new snapshot (the oldest beyond the bound go), snapshots.max_age at airlockd's tick. A
 * deletion by either way is one path (the row, the files, the template version it kept, a
 * sandbox.lifecycle.snapshot_deleted event with the key or the rule) and never takes a
 * snapshot whose files are being read (a rollback to it, a creation from it).
 */
#ifndef AIRLOCK_CONTROLPLANE_SNAPSHOTS_H
#define AIRLOCK_CONTROLPLANE_SNAPSHOTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct cp;
struct cp_op;
struct cp_sandbox;
struct cp_principal;
struct al_http_req;

/* "snap_" + a sandbox-style id. */
#define CP_SNAP_PREFIX "snap_"

/* Checks a createSnapshot body ({} or {"name": NAME}) into name ("" when none): 0, or 400
 * answered and -EINVAL. */
int cp_snapshot_body(struct al_http_req *req, const json_t *body, char *name, size_t len);
/* Runs the CP_OP_SNAPSHOT op of sb (op->name, op->key_id): answers op->req and calls
 * finish(sb) once over (possibly before returning). */
void cp_snapshot_run(struct cp_sandbox *sb, struct cp_op *op,
                     void (*finish)(struct cp_sandbox *sb));
/* Checks a rollback body ({"snapshotID": ID}) into id: 0, or 400 answered and -EINVAL. */
int cp_rollback_body(struct al_http_req *req, const json_t *body, char *id, size_t len);
/* Runs the CP_OP_ROLLBACK op of sb (op->name: the snapshot's id, op->key_id): answers
 * op->req and calls finish(sb) once over (possibly before returning). */
void cp_rollback_run(struct cp_sandbox *sb, struct cp_op *op,
                     void (*finish)(struct cp_sandbox *sb));
/* Runs the CP_OP_FORK op of sb (op->count, op->timeout_s when op->timeout_given, op->key_id
 * and op->policies: who asked): checkpoints sb's file system (as a snapshot, not recorded)
 * and calls finish(sb); then starts op->count copies from the checkpoint, and once every
 * copy started or failed, answers op->req with one entry per copy and removes the
 * checkpoint. */
void cp_fork_run(struct cp_sandbox *sb, struct cp_op *op, void (*finish)(struct cp_sandbox *sb));
/* Routes GET /snapshots and DELETE /templates/{snapshot id}; false for another request. */
bool cp_snapshots_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who);
/* Whether ref (a create's template) names a snapshot of key_id, by its id or as "NAME:vN"
 * (its names: version N of the key's snapshots named NAME, which wins over a template NAME
 * with a tag "vN"): 1 with the template version to start (tpl_ref: "ID" or "ID:BUILD") and
 * the snapshot's directory; 0 when ref is neither; < 0 with err (-ENOENT: a snapshot id of
 * another key or of none, -EPROTO: not one this backend restores). */
int cp_snapshot_for_create(struct cp *cp, const char *ref, const char *key_id, char *tpl_ref,
                           size_t tpl_len, char *dir, size_t dir_len, struct al_error *err);
/* Whether a snapshot needs build bid of template id (its files must stay). */
bool cp_snapshots_use_version(struct cp *cp, const char *id, const char *bid);
/* The count rules (snapshots.keep_per_sandbox of sandbox_id, snapshots.keep_per_key of
 * key_id): the oldest beyond them are deleted. Called after each new snapshot. */
void cp_snapshots_retain(struct cp *cp, const char *sandbox_id, const char *key_id);
/* The age rule (snapshots.max_age): called from airlockd's tick. */
void cp_snapshots_tick(struct cp *cp);
/* At start (blocking): creates <state>/snapshots and removes what no row names there
 * (half-written .tmp- directories, deletions a crash interrupted). */
void cp_snapshots_sweep(struct cp *cp);

#endif
