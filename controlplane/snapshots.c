#include "snapshots.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/http.h"
#include "common/log.h"
#include "common/util.h"
#include "builds.h"
#include "cp.h"
#include "disk.h"
#include "egressreg.h"
#include "events.h"
#include "ids.h"
#include "list.h"
#include "store.h"
#include "sweep.h"
#include "templates.h"

/* airlock-vmm's copy runs on its loop while the sandbox is frozen: bounded by the disk
 * size (about 1.3 s per 100 MB on a loaded machine), with room for a slow disk. */
#define SNAP_VMM_TIMEOUT_MS 600000

static void snap__dir(const struct cp *cp, const char *id, char *out, size_t len)
{
    snprintf(out, len, "%s/snapshots/%s", cp->cfg.state_dir, id);
}

static bool snap__id_valid(const char *s)
{
    size_t n = strlen(CP_SNAP_PREFIX);
    return strncmp(s, CP_SNAP_PREFIX, n) == 0 && cp_sandbox_id_valid(s + n);
}

/* The names E2B's SDK shows for a snapshot: "NAME:vVERSION" of a named one. */
static json_t *snap__names(const struct cp_store_snap *r)
{
    json_t *a = json_array();
    if (r->name[0]) {
        char n[160];
        snprintf(n, sizeof n, "%s:v%llu", r->name, (unsigned long long)r->version);
        json_array_append_new(a, json_string(n));
    }
    return a;
}

int cp_snapshot_body(struct al_http_req *req, const json_t *body, char *name, size_t len)
{
    name[0] = '\0';
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        if (strcmp(k, "name") != 0) {
            cp_rest_error(req, 400, "%.64s: not a field of a snapshot request (only \"name\")", k);
            return -EINVAL;
        }
        if (json_is_null(v))
            continue;
        const char *s = json_string_value(v);
        if (!s || !cp_template_tag_valid(s) || strlen(s) >= len) {
            cp_rest_error(req, 400,
                          "name: must be 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-', starting "
                          "with a letter or digit");
            return -EINVAL;
        }
        snprintf(name, len, "%s", s);
    }
    return 0;
}

/* ---- POST /sandboxes/{id}/snapshots ----------------------------------------------------- */

/* A fork once its checkpoint is taken: its copies start from it, at most
 * sandboxes.max_creating at a time with the other creations, each on its own. */
struct snap_fork {
    struct cp *cp;
    struct al_http_req *req;
    struct cp_sandbox *sb; /* the sandbox forked (a reference: its forked event) */
    char key_id[32];
    char policies[1024];
    char template_ref[CP_TEMPLATE_MAX];
    char dir[4200]; /* the checkpoint */
    json_t *metadata, *network;
    int allow_internet;
    bool auto_pause, auto_resume, timeout_given;
    uint64_t timeout_s;
    unsigned count, next, inflight, failed;
    bool pumping;
    json_t *results; /* one entry per copy, in order */
    struct fork_copy {
        struct snap_fork *f;
        unsigned i;
    } * copies;
    uint64_t t0;
};

struct snap_take {
    struct cp_op *op;
    void (*finish)(struct cp_sandbox *sb);
    struct snap_fork *fork; /* a fork's checkpoint (not recorded), or NULL */
    char id[64];
    char dir[4200];
    uint64_t t0;
};

static void fork__checkpointed(struct cp_sandbox *sb, struct snap_fork *f, int rc, json_t *res,
                               const char *msg);

/* The template version a sandbox's writable layer applies to: "ID:BUILD" when the template
 * has builds, else its template's name. */
static void snap__template_ref(const struct cp_sandbox *sb, char *out, size_t len)
{
    if (sb->rec.template_build[0]) {
        char id[CP_TEMPLATE_MAX], tag[72];
        if (cp_template_ref_split(sb->rec.template_id, id, sizeof id, tag, sizeof tag))
            snprintf(id, sizeof id, "%s", sb->rec.template_id);
        snprintf(out, len, "%s:%s", id, sb->rec.template_build);
    } else {
        snprintf(out, len, "%s", sb->rec.template_id);
    }
}

/* Gone from the store at once, its files removed off the loop thread. */
static void snap__remove(struct cp *cp, const char *dir)
{
    cp_take_away(cp->loop, dir, "snapshot");
}

static int snap__add_size(const struct cp_store_snap *r, void *arg)
{
    *(uint64_t *)arg += r->size_bytes;
    return 0;
}

/* The bytes of key_id's recorded snapshots together; < 0 when the store cannot tell. */
static int snap__key_bytes(struct cp *cp, const char *key_id, uint64_t *out, struct al_error *err)
{
    *out = 0;
    struct cp_store_snap_query q = {.key_id = key_id};
    int rc = cp_store_snap_list(cp->store, &q, snap__add_size, out, err);
    return rc < 0 ? rc : 0;
}

static void snap__taken(struct cp_sandbox *sb, int rc, json_t *res, const char *msg, void *arg)
{
    struct snap_take *t = arg;
    struct cp *cp = sb->cp;
    struct cp_op *op = t->op;
    if (t->fork) {
        fork__checkpointed(sb, t->fork, rc, res, msg);
        goto out;
    }
    if (rc) {
        /* airlock-vmm leaves no half snapshot under the name; whatever it renamed into
         * place before failing is not recorded, so it goes. */
        snap__remove(cp, t->dir);
        al_warn("sandbox %s: snapshot %s failed: %s", sb->rec.id, t->id,
                msg && *msg ? msg : strerror(-rc));
        if (op->req)
            cp_rest_error(op->req, rc == -EALREADY ? 409 : 500,
                          "snapshotting sandbox %s failed: %s", sb->rec.id,
                          msg && *msg ? msg : strerror(-rc));
        op->req = NULL;
        goto out;
    }
    struct cp_store_snap r = {0};
    snprintf(r.id, sizeof r.id, "%s", t->id);
    snprintf(r.name, sizeof r.name, "%s", op->name);
    snprintf(r.sandbox_id, sizeof r.sandbox_id, "%s", sb->rec.id);
    snprintf(r.parent, sizeof r.parent, "%s", sb->rec.snapshot_id);
    snap__template_ref(sb, r.template_id, sizeof r.template_id);
    snprintf(r.backend, sizeof r.backend, "%s", sb->rec.backend);
    /* What a restore needs of airlock-vmm: the format it wrote (cp_snapshot_for_create
     * refuses another); the agent is the one this airlockd ships. */
    snprintf(r.vmm_version, sizeof r.vmm_version, "%s",
             json_string_value(json_object_get(res, "format")) ?: "");
    snprintf(r.agent_version, sizeof r.agent_version, "%s", AIRLOCK_VERSION);
    json_int_t bytes = json_integer_value(json_object_get(json_object_get(res, "copied"), "bytes"));
    r.size_bytes = bytes > 0 ? (uint64_t)bytes : 0;
    r.created_ns = al_wall_ns();
    snprintf(r.key_id, sizeof r.key_id, "%s", op->key_id);
    struct al_error err = {0};
    uint64_t used = 0, quota = cp->cfg.snap_quota_per_key;
    if (quota && (snap__key_bytes(cp, r.key_id, &used, &err) < 0 || used + r.size_bytes > quota)) {
        /* Refused whole: a snapshot the key could not keep is not recorded. */
        snap__remove(cp, t->dir);
        if (op->req && err.code)
            cp_rest_error(op->req, 500, "snapshot %s: the snapshots' sizes cannot be read: %s",
                          t->id, al_error_str(&err));
        else if (op->req)
            cp_rest_error(op->req, 507,
                          "snapshotting sandbox %s: its snapshot of %llu bytes would take the "
                          "snapshots of key %s to %llu bytes, beyond snapshots.quota_per_key "
                          "(%llu); nothing was kept: delete some first",
                          sb->rec.id, (unsigned long long)r.size_bytes, r.key_id,
                          (unsigned long long)(used + r.size_bytes), (unsigned long long)quota);
        op->req = NULL;
        goto out;
    }
    if (!r.vmm_version[0]) {
        snap__remove(cp, t->dir);
        if (op->req)
            cp_rest_error(op->req, 500, "airlock-vmm answered the snapshot without its format");
        op->req = NULL;
        goto out;
    }
    if (cp_store_snap_insert(cp->store, &r, &err)) {
        snap__remove(cp, t->dir);
        if (op->req)
            cp_rest_error(op->req, 500, "recording snapshot %s: %s", t->id, al_error_str(&err));
        op->req = NULL;
        goto out;
    }
    uint64_t ms = (al_now_ns() - t->t0) / 1000000;
    al_info("sandbox %s: snapshot %s (%llu bytes, %llu ms, frozen %.1f ms)%s%s", sb->rec.id, r.id,
            (unsigned long long)r.size_bytes, (unsigned long long)ms,
            json_number_value(json_object_get(res, "frozen_ms")), r.name[0] ? " named " : "",
            r.name);
    cp_event_emit(
        sb, CP_EV_CHECKPOINTED, op->cause, op->key_id,
        json_pack("{s:s,s:I}", "snapshot_id", r.id, "size_bytes", (json_int_t)r.size_bytes));
    if (op->req)
        al_http_reply_json(op->req, 201,
                           json_pack("{s:s,s:o}", "snapshotID", r.id, "names", snap__names(&r)));
    op->req = NULL;
    /* The new one is the youngest: a count rule never takes it. */
    cp_snapshots_retain(cp, r.sandbox_id, r.key_id);
out:;
    void (*finish)(struct cp_sandbox *) = t->finish;
    free(t);
    finish(sb);
}

/* Why sb cannot be snapshotted now (into why, with the status to answer), or 0. */
static int snap__refusal(const struct cp_sandbox *sb, char *why, size_t len)
{
    struct cp *cp = sb->cp;
    if (!cp->backend->snapshot) {
        snprintf(why, len, "the test backend has no snapshots");
        return 501;
    }
    if (strcmp(sb->rec.backend, "jail") != 0) {
        snprintf(why, len,
                 "snapshots through this API exist for jail sandboxes only (a KVM sandbox's "
                 "snapshot is not wired to it yet)");
        return 501;
    }
    if (sb->gone) {
        snprintf(why, len, "its process has ended");
        return 409;
    }
    if (sb->rec.paused_fs) {
        snprintf(why, len,
                 "it is paused without memory (its files are kept, nothing runs): resume it "
                 "first");
        return 409;
    }
    /* The disk reserve that refuses creations refuses snapshots (a copy of up to the
     * sandbox's disk size) too. */
    if (!cp_disk_may_create(cp, why, len))
        return 503;
    return 0;
}

/* Asks airlock-vmm for a copy of sb's writable layer into a new snapshot directory; the
 * answer goes to snap__taken (with fork: to that fork): 0. On a failure to ask, answers
 * op->req, finishes the op and returns -1. */
static int snap__take(struct cp_sandbox *sb, struct cp_op *op, struct snap_fork *fork,
                      void (*finish)(struct cp_sandbox *sb))
{
    struct cp *cp = sb->cp;
    struct al_http_req **req = fork ? &fork->req : &op->req;
    struct snap_take *t = calloc(1, sizeof *t);
    if (!t) {
        if (*req)
            cp_rest_error(*req, 500, "out of memory");
        *req = NULL;
        finish(sb);
        return -1;
    }
    t->op = op;
    t->finish = finish;
    t->fork = fork;
    t->t0 = al_now_ns();
    char rnd[CP_ID_LEN + 1];
    struct cp_store_snap have;
    do {
        cp_sandbox_id_new(rnd);
        snprintf(t->id, sizeof t->id, CP_SNAP_PREFIX "%s", rnd);
    } while (cp_store_snap_load(cp->store, t->id, &have, NULL) == 0);
    snap__dir(cp, t->id, t->dir, sizeof t->dir);
    if (fork)
        snprintf(fork->dir, sizeof fork->dir, "%s", t->dir);
    int rc = cp->backend->snapshot(sb, t->dir, snap__taken, t);
    if (rc) {
        if (*req)
            cp_rest_error(*req, 500, "snapshotting sandbox %s: %s", sb->rec.id, strerror(-rc));
        *req = NULL;
        free(t);
        finish(sb);
        return -1;
    }
    return 0;
}

void cp_snapshot_run(struct cp_sandbox *sb, struct cp_op *op, void (*finish)(struct cp_sandbox *sb))
{
    char why[600];
    int status = snap__refusal(sb, why, sizeof why);
    uint64_t used, quota = sb->cp->cfg.snap_quota_per_key;
    struct al_error err = {0};
    if (!status && quota) {
        if (snap__key_bytes(sb->cp, op->key_id, &used, &err) < 0) {
            snprintf(why, sizeof why, "the snapshots' sizes cannot be read: %s",
                     al_error_str(&err));
            status = 500;
        } else if (used >= quota) {
            snprintf(why, sizeof why,
                     "the snapshots of key %s take %llu bytes of snapshots.quota_per_key "
                     "(%llu): delete some (Sandbox.deleteSnapshot, airlock snapshot rm) first",
                     op->key_id, (unsigned long long)used, (unsigned long long)quota);
            status = 507;
        }
    }
    if (status) {
        if (op->req)
            cp_rest_error(op->req, status, "cannot snapshot sandbox %s: %s", sb->rec.id, why);
        op->req = NULL;
        finish(sb);
        return;
    }
    snap__take(sb, op, NULL, finish);
}

/* ---- POST /sandboxes/{id}/fork ----------------------------------------------------------- */

static void fork__free(struct snap_fork *f)
{
    json_decref(f->metadata);
    json_decref(f->network);
    json_decref(f->results);
    free(f->copies);
    free(f);
}

static void fork__end(struct snap_fork *f)
{
    struct cp_sandbox *sb = f->sb;
    /* Every copy has its own files now (or never will): the checkpoint goes. */
    snap__remove(sb->cp, f->dir);
    json_t *ids = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(f->results, i, v)
    {
        const char *id =
            json_string_value(json_object_get(json_object_get(v, "sandbox"), "sandboxID"));
        if (id)
            json_array_append_new(ids, json_string(id));
    }
    uint64_t ms = (al_now_ns() - f->t0) / 1000000;
    al_info("sandbox %s: forked in %llu ms: %u of %u copies started", sb->rec.id,
            (unsigned long long)ms, f->count - f->failed, f->count);
    cp_event_emit(sb, CP_EV_FORKED, CP_CAUSE_API, f->key_id,
                  json_pack("{s:I,s:I,s:o}", "count", (json_int_t)f->count, "failed",
                            (json_int_t)f->failed, "sandbox_ids", ids));
    al_http_reply_json(f->req, 201, json_incref(f->results));
    cp_sb_unref(sb);
    fork__free(f);
}

static void fork__pump(struct snap_fork *f);

static void fork__copy_done(int status, json_t *sandbox, const char *msg, void *arg)
{
    struct fork_copy *c = arg;
    struct snap_fork *f = c->f;
    json_t *e;
    if (status == 201) {
        e = json_pack("{s:o}", "sandbox", sandbox);
    } else {
        f->failed++;
        e = json_pack("{s:{s:i,s:s}}", "error", "code", status, "message",
                      msg && *msg ? msg : "the sandbox could not be created");
    }
    json_array_set_new(f->results, c->i, e);
    f->inflight--;
    if (!f->pumping)
        fork__pump(f);
}

/* Starts copies while creations may (a refused one answers at once, into its entry); ends
 * the fork once every copy has its answer. */
static void fork__pump(struct snap_fork *f)
{
    struct cp *cp = f->cp;
    f->pumping = true;
    while (f->next < f->count &&
           (f->inflight == 0 || cp->n_creating < (size_t)cp->cfg.max_creating)) {
        struct fork_copy *c = &f->copies[f->next];
        c->f = f;
        c->i = f->next++;
        f->inflight++;
        struct cp_create cr = {
            .timeout_s = f->timeout_s,
            .timeout_given = f->timeout_given,
            .metadata = f->metadata,
            .network = f->network,
            .allow_internet = f->allow_internet,
            .auto_pause = f->auto_pause,
            .auto_resume = f->auto_resume,
            .restore_dir = f->dir,
            .forked_from = f->sb->rec.id,
            .done = fork__copy_done,
            .done_arg = c,
        };
        snprintf(cr.template_id, sizeof cr.template_id, "%s", f->template_ref);
        snprintf(cr.who.key_id, sizeof cr.who.key_id, "%s", f->key_id);
        snprintf(cr.who.policies, sizeof cr.who.policies, "%s", f->policies);
        cp_lifecycle_create(cp, &cr, NULL, CP_ANSWER_CREATED);
    }
    f->pumping = false;
    if (f->next == f->count && f->inflight == 0)
        fork__end(f);
}

static void fork__checkpointed(struct cp_sandbox *sb, struct snap_fork *f, int rc, json_t *res,
                               const char *msg)
{
    if (rc) {
        snap__remove(sb->cp, f->dir);
        al_warn("sandbox %s: fork: its checkpoint failed: %s", sb->rec.id,
                msg && *msg ? msg : strerror(-rc));
        cp_rest_error(f->req, rc == -EALREADY ? 409 : 500,
                      "forking sandbox %s failed: its checkpoint: %s", sb->rec.id,
                      msg && *msg ? msg : strerror(-rc));
        fork__free(f);
        return;
    }
    al_info("sandbox %s: fork: checkpoint of %lld bytes (frozen %.1f ms); starting %u "
            "cop%s",
            sb->rec.id,
            (long long)json_integer_value(json_object_get(json_object_get(res, "copied"), "bytes")),
            json_number_value(json_object_get(res, "frozen_ms")), f->count,
            f->count == 1 ? "y" : "ies");
    /* The copies start without the op: the sandbox forked goes on with its queue (even a
     * kill of it leaves them the checkpoint). */
    cp_sb_ref(sb);
    f->sb = sb;
    fork__pump(f);
}

void cp_fork_run(struct cp_sandbox *sb, struct cp_op *op, void (*finish)(struct cp_sandbox *sb))
{
    struct cp *cp = sb->cp;
    char why[600];
    int status = snap__refusal(sb, why, sizeof why);
    /* Header transforms are sealed in the vault for this sandbox alone: a copy could name
     * them only by sharing them (and deleting them when it ends). */
    if (!status && sb->rec.network && json_object_get(sb->rec.network, "transforms")) {
        status = 501;
        snprintf(why, sizeof why,
                 "its network has header transforms (network.rules), whose values are sealed "
                 "for it alone: create the copies with their own rules");
    }
    struct snap_fork *f = status ? NULL : calloc(1, sizeof *f);
    if (!status && f) {
        f->copies = calloc(op->count, sizeof *f->copies);
        f->results = json_array();
        for (unsigned i = 0; f->results && i < op->count; i++)
            json_array_append_new(f->results, json_null());
        if (!f->copies || !f->results || json_array_size(f->results) != op->count) {
            fork__free(f);
            f = NULL;
        }
    }
    if (!status && !f) {
        status = 500;
        snprintf(why, sizeof why, "out of memory");
    }
    if (status) {
        cp_rest_error(op->req, status, "cannot fork sandbox %s: %s", sb->rec.id, why);
        op->req = NULL;
        finish(sb);
        return;
    }
    f->cp = cp;
    f->req = op->req; /* the fork's answer outlives the op */
    op->req = NULL;
    f->t0 = al_now_ns();
    snprintf(f->key_id, sizeof f->key_id, "%s", op->key_id);
    snprintf(f->policies, sizeof f->policies, "%s", op->policies);
    snap__template_ref(sb, f->template_ref, sizeof f->template_ref);
    /* The copies are the sandbox's in what it was created with (its metadata, network and
     * lifecycle fields: each selects and registers its own policy with them), not its
     * environment variables (airlockd does not keep them). */
    f->metadata = sb->rec.metadata ? json_deep_copy(sb->rec.metadata) : NULL;
    f->network = sb->rec.network ? json_deep_copy(sb->rec.network) : NULL;
    f->allow_internet = sb->rec.allow_internet;
    f->auto_pause = sb->rec.on_timeout_pause;
    f->auto_resume = sb->rec.auto_resume;
    f->timeout_given = op->timeout_given;
    f->timeout_s = op->timeout_s;
    f->count = op->count;
    al_info("sandbox %s: forking %u cop%s (key %s)", sb->rec.id, f->count,
            f->count == 1 ? "y" : "ies", f->key_id);
    if (snap__take(sb, op, f, finish))
        fork__free(f);
}

/* ---- POST /sandboxes/{id}/rollback -------------------------------------------------------- */

int cp_rollback_body(struct al_http_req *req, const json_t *body, char *id, size_t len)
{
    id[0] = '\0';
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        if (strcmp(k, "snapshotID") != 0) {
            cp_rest_error(req, 400,
                          "%.64s: not a field of a rollback request (only \"snapshotID\")", k);
            return -EINVAL;
        }
        const char *s = json_string_value(v);
        if (!s || strlen(s) >= len || !snap__id_valid(s)) {
            cp_rest_error(req, 400,
                          "snapshotID: must be a snapshot id (\"" CP_SNAP_PREFIX "...\", as "
                          "createSnapshot answers)");
            return -EINVAL;
        }
        snprintf(id, len, "%s", s);
    }
    if (!id[0]) {
        cp_rest_error(req, 400, "snapshotID is required: the snapshot to roll the sandbox back to");
        return -EINVAL;
    }
    return 0;
}

static void snap__rolled_back(struct cp_sandbox *sb, int rc, json_t *res, const char *msg,
                              void *arg)
{
    struct snap_take *t = arg;
    struct cp_op *op = t->op;
    sb->rolling_back[0] = '\0';
    uint64_t ms = (al_now_ns() - t->t0) / 1000000;
    if (rc) {
        /* airlock-vmm refused before it stopped anything (the sandbox runs on as it was), or
         * it failed to build the sandbox again and stops: then its exit is a crash of the
         * sandbox, as any. */
        al_warn("sandbox %s: rollback to %s failed: %s", sb->rec.id, t->id,
                msg && *msg ? msg : strerror(-rc));
        if (op->req)
            cp_rest_error(op->req,
                          rc == -EALREADY  ? 409
                          : rc == -ENOTSUP ? 501
                                           : 500,
                          "rolling back sandbox %s to %s failed: %s", sb->rec.id, t->id,
                          msg && *msg ? msg : strerror(-rc));
        op->req = NULL;
    } else {
        al_info("sandbox %s: rolled back to snapshot %s in %llu ms (stop %.1f ms, files %.1f "
                "ms)",
                sb->rec.id, t->id, (unsigned long long)ms,
                json_number_value(json_object_get(res, "stop_ms")),
                json_number_value(json_object_get(res, "restore_ms")));
        /* The new agent installed the CA the sandbox was created with; the current one
         * (if the egress proxy's changed since) goes to it again. */
        if (sb->rec.intercept && json_object_get(sb->rec.intercept, "agentCaFingerprint")) {
            json_object_del(sb->rec.intercept, "agentCaFingerprint");
            cp_sb_save(sb);
        }
        cp_egress_ca_sync(sb);
        cp_event_emit(sb, CP_EV_ROLLED_BACK, op->cause, op->key_id,
                      json_pack("{s:s}", "snapshot_id", t->id));
        if (op->req)
            al_http_reply_json(
                op->req, 200, json_pack("{s:s,s:s}", "sandboxID", sb->rec.id, "snapshotID", t->id));
        op->req = NULL;
    }
    void (*finish)(struct cp_sandbox *) = t->finish;
    free(t);
    finish(sb);
}

void cp_rollback_run(struct cp_sandbox *sb, struct cp_op *op, void (*finish)(struct cp_sandbox *sb))
{
    struct cp *cp = sb->cp;
    struct cp_store_snap r;
    struct al_error err = {0};
    int status = 0;
    char why[600] = "";
    int rc = cp_store_snap_load(cp->store, op->name, &r, &err);
    if (rc == -ENOENT || (rc == 0 && strcmp(r.key_id, op->key_id) != 0)) {
        status = 404;
        snprintf(why, sizeof why, "snapshot \"%s\" not found", op->name);
    } else if (rc) {
        status = 500;
        snprintf(why, sizeof why, "%s", al_error_str(&err));
    } else if (strcmp(r.sandbox_id, sb->rec.id) != 0) {
        status = 400;
        snprintf(why, sizeof why,
                 "snapshot %s is of sandbox %s, not of %s: a sandbox rolls back to its own "
                 "snapshots only (start a new sandbox from it with Sandbox.create)",
                 op->name, r.sandbox_id, sb->rec.id);
    } else if (sb->rec.state == CP_SB_PAUSED) {
        status = 409;
        snprintf(why, sizeof why, "sandbox %s is paused: resume it (connect) first", sb->rec.id);
    } else if (sb->gone || sb->rec.state != CP_SB_RUNNING) {
        status = 409;
        snprintf(why, sizeof why, "sandbox %s is not running", sb->rec.id);
    } else if (!cp->backend->rollback) {
        status = 501;
        snprintf(why, sizeof why, "cannot roll back sandbox %s: the test backend has no rollback",
                 sb->rec.id);
    } else if (strcmp(sb->rec.backend, "jail") != 0) {
        status = 501;
        snprintf(why, sizeof why,
                 "cannot roll back sandbox %s: rollback exists for jail sandboxes only",
                 sb->rec.id);
    }
    struct snap_take *t = status ? NULL : calloc(1, sizeof *t);
    if (!status && !t) {
        status = 500;
        snprintf(why, sizeof why, "out of memory");
    }
    if (status) {
        if (op->req)
            cp_rest_error(op->req, status, "%s", why);
        op->req = NULL;
        finish(sb);
        return;
    }
    t->op = op;
    t->finish = finish;
    t->t0 = al_now_ns();
    snprintf(t->id, sizeof t->id, "%s", r.id);
    snap__dir(cp, t->id, t->dir, sizeof t->dir);
    snprintf(sb->rolling_back, sizeof sb->rolling_back, "%s", t->id);
    al_info("sandbox %s: rolling back to snapshot %s (key %s)", sb->rec.id, t->id, op->key_id);
    rc = cp->backend->rollback(sb, t->dir, snap__rolled_back, t);
    if (rc) {
        sb->rolling_back[0] = '\0';
        if (op->req)
            cp_rest_error(op->req, 500, "rolling back sandbox %s: %s", sb->rec.id, strerror(-rc));
        op->req = NULL;
        free(t);
        finish(sb);
    }
}

/* ---- GET /snapshots ------------------------------------------------------------------------ */

struct snap_page {
    json_t *arr;
    size_t limit;
    char next[32];
};

static int snap__page_add(const struct cp_store_snap *r, void *arg)
{
    struct snap_page *p = arg;
    if (json_array_size(p->arr) == p->limit)
        return 1; /* one more than a page: there is a next one */
    char created[40];
    al_time_rfc3339(created, sizeof created, r->created_ns);
    json_array_append_new(p->arr, json_pack("{s:s,s:o,s:s,s:s,s:s,s:I,s:s,s:s}", "snapshotID",
                                            r->id, "names", snap__names(r), "sandboxID",
                                            r->sandbox_id, "templateID", r->template_id, "backend",
                                            r->backend, "sizeBytes", (json_int_t)r->size_bytes,
                                            "createdAt", created, "parent", r->parent));
    snprintf(p->next, sizeof p->next, "%llu", (unsigned long long)r->seq);
    return 0;
}

static void snap__list(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    char sid[64] = "", name[128] = "";
    struct cp_store_snap_query q = {.key_id = who->key_id};
    int r = al_http_query_get(req->query, "sandboxID", sid, sizeof sid);
    if (r == 0 && sid[0]) {
        q.sandbox_id = sid;
    } else if (r && r != -ENOENT) {
        cp_rest_error(req, 400, "sandboxID: not a sandbox id");
        return;
    }
    r = al_http_query_get(req->query, "name", name, sizeof name);
    if (r == 0 && name[0]) {
        q.name = name;
    } else if (r && r != -ENOENT) {
        cp_rest_error(req, 400, "name: too long");
        return;
    }
    uint64_t limit = CP_LIST_DEFAULT_LIMIT, after = 0;
    bool has;
    if (!cp_rest_u64_param(req, "limit", &limit, &has) ||
        !cp_rest_u64_param(req, "nextToken", &after, &has))
        return;
    if (limit < 1 || limit > CP_LIST_MAX_LIMIT) {
        cp_rest_error(req, 400, "limit: must be an integer from 1 to %d", CP_LIST_MAX_LIMIT);
        return;
    }
    q.after_seq = after;
    q.limit = limit + 1;
    struct snap_page p = {.arr = json_array(), .limit = (size_t)limit};
    struct al_error err = {0};
    int rc = cp_store_snap_list(cp->store, &q, snap__page_add, &p, &err);
    if (rc < 0) {
        json_decref(p.arr);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    cp_rest_reply_page(req, p.arr, rc == 1 ? p.next : "");
}

/* ---- deletion: DELETE /templates/{snapshot id} and the retention rules -------------------- */

struct snap_busy {
    const char *id;
    char sandbox[64];
};

static int snap__restoring(void *v, void *arg)
{
    const struct cp_sandbox *sb = v;
    struct snap_busy *b = arg;
    /* A creation's airlock-vmm copies the snapshot's files until the sandbox runs. */
    if (sb->rec.state != CP_SB_CREATING || strcmp(sb->rec.snapshot_id, b->id) != 0)
        return 0;
    snprintf(b->sandbox, sizeof b->sandbox, "%s", sb->rec.id);
    return 1;
}

/* Deletes snapshot r: the row first (from there on nothing starts from it; files a crash
 * leaves go at the next start: cp_snapshots_sweep), then its files, then the template
 * version it kept if nothing else needs it, and an event of its sandbox with who asked.
 * -EBUSY (nothing done) while its files are being read: a rollback to it, or a sandbox
 * starting from it. */
static int snap__drop(struct cp *cp, const struct cp_store_snap *r, enum cp_event_cause cause,
                      const char *key_id, json_t *data, struct al_error *err)
{
    struct cp_sandbox *of = cp_sandbox_get(cp, r->sandbox_id);
    struct snap_busy b = {.id = r->id};
    int rc = 0;
    if (of && strcmp(of->rolling_back, r->id) == 0)
        rc = al_error_set(err, -EBUSY,
                          "snapshot %s: sandbox %s is being rolled back to it; try again once "
                          "that is done",
                          r->id, r->sandbox_id);
    else if (cp_map_foreach(&cp->sandboxes, snap__restoring, &b))
        rc = al_error_set(err, -EBUSY,
                          "snapshot %s: sandbox %s is starting from it; try again once it runs",
                          r->id, b.sandbox);
    if (!rc)
        rc = cp_store_snap_delete(cp->store, r->id, err);
    if (rc) {
        json_decref(data);
        return rc;
    }
    char dir[4200];
    snap__dir(cp, r->id, dir, sizeof dir);
    snap__remove(cp, dir);
    al_info("snapshot %s of sandbox %s deleted (%s%s)", r->id, r->sandbox_id,
            cause == CP_CAUSE_API ? "key " : "retention: ",
            cause == CP_CAUSE_API ? key_id : json_string_value(json_object_get(data, "rule")));
    cp_builds_gc(cp, r->template_id);
    json_t *ed = data ? data : json_object();
    json_object_set_new(ed, "snapshot_id", json_string(r->id));
    json_object_set_new(ed, "size_bytes", json_integer((json_int_t)r->size_bytes));
    if (of) {
        cp_event_emit(of, CP_EV_SNAPSHOT_DELETED, cause, key_id, ed);
    } else {
        struct cp_event_subject who = {.sandbox_id = r->sandbox_id,
                                       .template_id = r->template_id,
                                       .build_id = "",
                                       .execution_id = ""};
        cp_event_emit_for(cp, &who, CP_EV_SNAPSHOT_DELETED, cause, key_id, ed);
    }
    return 0;
}

static void snap__delete(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                         const char *id)
{
    struct cp_store_snap r;
    struct al_error err = {0};
    int rc = cp_store_snap_load(cp->store, id, &r, &err);
    if (rc == -ENOENT || (rc == 0 && strcmp(r.key_id, who->key_id) != 0)) {
        cp_rest_error(req, 404, "snapshot \"%s\" not found", id);
        return;
    }
    if (rc == 0)
        rc = snap__drop(cp, &r, CP_CAUSE_API, who->key_id, NULL, &err);
    if (rc) {
        cp_rest_error(req, rc == -EBUSY ? 409 : 500, "%s", al_error_str(&err));
        return;
    }
    al_http_reply(req, 204, NULL, NULL, 0);
}

/* The oldest snapshots matching a query, beyond a count or before a time: collected first,
 * deleted after the listing (the store is not changed under its cursor). */
struct snap_prune {
    struct cp_store_snap *rows;
    size_t n, cap, want; /* want: how many of the oldest (count rules) */
    uint64_t before_ns;  /* the age rule: made before this (0: not by age) */
};

static int snap__count(const struct cp_store_snap *r, void *arg)
{
    (void)r;
    (*(size_t *)arg)++;
    return 0;
}

static int snap__collect(const struct cp_store_snap *r, void *arg)
{
    struct snap_prune *p = arg;
    /* Oldest first: the rest are younger (rows are made in the order of their times; one
     * a clock step put out of order waits for those before it). */
    if (p->before_ns ? r->created_ns >= p->before_ns : p->n == p->want)
        return 1;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        struct cp_store_snap *rows = realloc(p->rows, cap * sizeof *rows);
        if (!rows)
            return -ENOMEM;
        p->rows = rows;
        p->cap = cap;
    }
    p->rows[p->n++] = *r;
    return 0;
}

/* Deletes what q and the bound select (keep: the count rule's bound, else the age rule's
 * before_ns); rule names it in the events. A snapshot busy now stays: it goes at the next
 * pass (the next snapshot of its sandbox or key, or the next tick). */
static void snap__prune(struct cp *cp, const struct cp_store_snap_query *q, size_t keep,
                        uint64_t before_ns, const char *rule)
{
    struct snap_prune p = {.before_ns = before_ns};
    struct al_error err = {0};
    int rc = 0;
    if (!before_ns) {
        size_t n = 0;
        rc = cp_store_snap_list(cp->store, q, snap__count, &n, &err);
        if (rc < 0 || n <= keep)
            goto out;
        p.want = n - keep;
    }
    rc = cp_store_snap_list(cp->store, q, snap__collect, &p, &err);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < p.n; i++) {
        struct al_error e2 = {0};
        if (snap__drop(cp, &p.rows[i], CP_CAUSE_RETENTION, NULL, json_pack("{s:s}", "rule", rule),
                       &e2))
            al_warn("retention (%s): %s: kept for now", rule, al_error_str(&e2));
    }
out:
    if (rc < 0)
        al_warn("retention (%s): cannot list snapshots: %s", rule,
                rc == -ENOMEM ? "out of memory" : al_error_str(&err));
    free(p.rows);
}

void cp_snapshots_retain(struct cp *cp, const char *sandbox_id, const char *key_id)
{
    if (cp->cfg.snap_keep_per_sandbox > 0) {
        struct cp_store_snap_query q = {.sandbox_id = sandbox_id};
        snap__prune(cp, &q, (size_t)cp->cfg.snap_keep_per_sandbox, 0, "snapshots.keep_per_sandbox");
    }
    if (cp->cfg.snap_keep_per_key > 0) {
        struct cp_store_snap_query q = {.key_id = key_id};
        snap__prune(cp, &q, (size_t)cp->cfg.snap_keep_per_key, 0, "snapshots.keep_per_key");
    }
}

void cp_snapshots_tick(struct cp *cp)
{
    if (!cp->cfg.snap_max_age_ms)
        return;
    uint64_t now = al_wall_ns(), age = cp->cfg.snap_max_age_ms * 1000000ull;
    if (now <= age)
        return;
    struct cp_store_snap_query q = {0};
    snap__prune(cp, &q, 0, now - age, "snapshots.max_age");
}

bool cp_snapshots_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    const char *p = req->path, *m = req->method;
    if (strcmp(p, "/snapshots") == 0) {
        if (strcmp(m, "GET") == 0)
            snap__list(cp, req, who);
        else
            cp_rest_error(req, 405, "%s is not allowed on /snapshots (GET lists)", m);
        return true;
    }
    if (strncmp(p, "/templates/", 11) != 0 || strcmp(m, "DELETE") != 0)
        return false;
    const char *rest = p + 11;
    char id[72];
    if (!cp_rest_path_part(&rest, id, sizeof id) || *rest || !snap__id_valid(id))
        return false;
    snap__delete(cp, req, who, id);
    return true;
}

/* ---- Sandbox.create(snapshotID) -------------------------------------------------------------- */

struct snap_version {
    uint64_t version;
    char id[64];
};

static int snap__version(const struct cp_store_snap *r, void *arg)
{
    struct snap_version *v = arg;
    if (r->version != v->version)
        return 0;
    snprintf(v->id, sizeof v->id, "%s", r->id);
    return 1;
}

/* "NAME:vN", the name of version N of the key's snapshots named NAME: its id, or "". */
static void snap__by_name(struct cp *cp, const char *ref, const char *key_id, char *id, size_t len)
{
    id[0] = '\0';
    const char *c = strrchr(ref, ':');
    char name[128];
    if (!c || c[1] != 'v' || c[2] < '1' || c[2] > '9' || (size_t)(c - ref) >= sizeof name)
        return;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(c + 2, &end, 10);
    if (*end || errno)
        return;
    memcpy(name, ref, (size_t)(c - ref));
    name[c - ref] = '\0';
    if (!cp_template_tag_valid(name))
        return;
    struct snap_version v = {.version = n};
    struct cp_store_snap_query q = {.key_id = key_id, .name = name};
    if (cp_store_snap_list(cp->store, &q, snap__version, &v, NULL) == 1)
        snprintf(id, len, "%s", v.id);
}

int cp_snapshot_for_create(struct cp *cp, const char *ref, const char *key_id, char *tpl_ref,
                           size_t tpl_len, char *dir, size_t dir_len, struct al_error *err)
{
    char named[64];
    snap__by_name(cp, ref, key_id, named, sizeof named);
    if (named[0])
        ref = named;
    else if (!snap__id_valid(ref))
        return 0;
    struct cp_store_snap r;
    int rc = cp_store_snap_load(cp->store, ref, &r, err);
    if (rc == -ENOENT || (rc == 0 && strcmp(r.key_id, key_id) != 0))
        return al_error_set(err, -ENOENT, "snapshot \"%s\" not found", ref);
    if (rc)
        return rc;
    if (strcmp(r.backend, cp->backend_kind) != 0)
        return al_error_set(err, -EPROTO,
                            "snapshot %s is of a %s sandbox: this server runs %s sandboxes", ref,
                            r.backend, cp->backend_kind);
    if (strcmp(r.vmm_version, "airlock-jail-fs-1") != 0)
        return al_error_set(err, -EPROTO,
                            "snapshot %s has format \"%s\": this airlock-vmm restores "
                            "airlock-jail-fs-1",
                            ref, r.vmm_version);
    snprintf(tpl_ref, tpl_len, "%s", r.template_id);
    snap__dir(cp, r.id, dir, dir_len);
    return 1;
}

struct snap_use {
    const char *id, *bid;
    bool used;
};

static int snap__uses(const struct cp_store_snap *r, void *arg)
{
    struct snap_use *u = arg;
    size_t n = strlen(u->id);
    if (strncmp(r->template_id, u->id, n) == 0 && r->template_id[n] == ':' &&
        strcmp(r->template_id + n + 1, u->bid) == 0) {
        u->used = true;
        return 1;
    }
    return 0;
}

bool cp_snapshots_use_version(struct cp *cp, const char *id, const char *bid)
{
    struct snap_use u = {.id = id, .bid = bid};
    struct cp_store_snap_query q = {0};
    struct al_error err = {0};
    /* When the store cannot tell, the version is kept. */
    if (cp_store_snap_list(cp->store, &q, snap__uses, &u, &err) < 0) {
        al_warn("template %s: cannot list snapshots (%s): keeping build %s", id, al_error_str(&err),
                bid);
        return true;
    }
    return u.used;
}

/* ---- start ------------------------------------------------------------------------------- */

/* Half written (.tmp-), or its row gone (deleted, or airlockd died before it recorded the
 * snapshot and answered): not recorded. */
static bool snap__recorded(const char *name, void *arg)
{
    struct cp *cp = arg;
    struct cp_store_snap r;
    return snap__id_valid(name) && cp_store_snap_load(cp->store, name, &r, NULL) == 0;
}

void cp_snapshots_sweep(struct cp *cp)
{
    char top[4200];
    snprintf(top, sizeof top, "%s/snapshots", cp->cfg.state_dir);
    cp_sweep_dir(top,
                 &(struct cp_sweep){
                     .what = "snapshot", .create = true, .recorded = snap__recorded, .arg = cp});
}
