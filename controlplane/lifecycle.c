/* controlplane/lifecycle: a sandbox from create to gone.
 *
 * Owns: the registry, the state machine and its persistence, the order of set-up steps and
 * their undoing, operations (pause, resume/connect, kill, expiry: one at a time per
 * sandbox, queued in order), timeouts, crash detection (a pidfd per sandbox process: its
 * exit is seen at once, and the sandbox's resources are reclaimed), and re-adoption after
 * a restart of airlockd.
 *
 * Create:   record (state creating, saved) -> network (vswitch, thread pool) -> egress
 *           registration -> backend start (agent healthy) -> the template's readyCmd
 *           succeeded (when it has a startCmd or readyCmd) -> state running, saved, timer,
 *           watch -> 201. A failing step undoes the earlier ones in reverse and the row is
 *           deleted: nothing is left half-done. With a warm sandbox of the template ready
 *           (warm.c), the creation takes it (its id, network and started agent), and its
 *           start is the claim (its identity through the agent's init).
 * Teardown (kill, expiry, crash, failed create): backend stop (or crash cleanup) ->
 *           egress unregistration -> network release -> row deleted -> forgotten. The
 *           client's kill is answered once the sandbox's processes are gone.
 * Restart:  rows in state creating or stopping are torn down (nobody got their 201 / the
 *           kill was under way); running and paused ones are adopted if their process is
 *           still the one recorded (pid + start time), else torn down.
 * Pause without memory ("parking"): the sandbox's writable layer is copied (the backend's
 *           snapshot) to <state>/paused/<id> -> state paused with paused_fs, saved -> the
 *           teardown's steps without its end: backend stop, egress unregistration, network
 *           release -> pid and address cleared, saved. The row, id, tokens, metadata and
 *           network fields stay. Its resume is a creation's steps over the same record
 *           (network, registration, start with the kept files, readyCmd) -> running, saved;
 *           a boot that fails parks it again (it stays paused). A restart finds a parked
 *           sandbox paused without a process; one whose parking was cut short is parked
 *           again (what runs of it stopped, its network released).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "egressreg.h"
#include "events.h"
#include "volumes.h"
#include "jcall.h"
#include "metrics.h"
#include "policysel.h"
#include "snapshots.h"
#include "store.h"
#include "sweep.h"
#include "builds.h"
#include "disk.h"
#include "hostcheck.h"
#include "templates.h"
#include "transforms.h"
#include "warm.h"
#include "vmm/jail/idmap.h"

/* ---- registry ------------------------------------------------------------------------ */

struct cp_sandbox *cp_sandbox_get(struct cp *cp, const char *id)
{
    return cp_map_get(&cp->sandboxes, id, strlen(id));
}

struct cp_sandbox *cp_sandbox_by_token(struct cp *cp, const char *token, size_t len)
{
    uint8_t d[CP_DIGEST_LEN];
    cp_digest(token, len, d);
    /* The lookup is by digest, so its timing says nothing about the token; the digests are
     * then compared in constant time. */
    struct cp_sandbox *sb = cp_map_get(&cp->by_token, d, sizeof d);
    if (sb && !cp_digest_equal(sb->token_digest, d))
        sb = NULL;
    return sb;
}

void cp_sb_ref(struct cp_sandbox *sb)
{
    sb->refs++;
}

/* Not inlined: gcc's -Wuse-after-free cannot see that other references keep sb alive. */
__attribute__((noinline)) void cp_sb_unref(struct cp_sandbox *sb)
{
    if (--sb->refs > 0)
        return;
    explicit_bzero(sb->rec.token, sizeof sb->rec.token);
    cp_sb_record_free(&sb->rec);
    json_decref(sb->warm_env);
    free(sb->samples);
    free(sb->bpriv);
    free(sb);
}

int cp_sb_save(struct cp_sandbox *sb)
{
    struct al_error err = {0};
    int rc = cp_store_sb_save(sb->cp->store, &sb->rec, &err);
    if (rc)
        al_error("sandbox %s: cannot record state %s: %s", sb->rec.id,
                 cp_sb_state_name(sb->rec.state), al_error_str(&err));
    return rc;
}

struct cp_sandbox *cp_sb_new(struct cp *cp)
{
    struct cp_sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        return NULL;
    sb->cp = cp;
    sb->refs = 1;
    sb->pidfd = -1;
    sb->net.netns_fd = -1;
    sb->net.tap_fd = -1;
    sb->ops_tail = &sb->ops;
    cp_sb_record_init(&sb->rec);
    return sb;
}

static int lc__register(struct cp_sandbox *sb)
{
    struct cp *cp = sb->cp;
    int rc = cp_map_put(&cp->sandboxes, sb->rec.id, strlen(sb->rec.id), sb);
    if (rc)
        return rc;
    sb->registered = true;
    cp->n_live++;
    cp_sb_ref(sb);
    if (sb->rec.token[0]) {
        cp_digest(sb->rec.token, strlen(sb->rec.token), sb->token_digest);
        if (cp_map_put(&cp->by_token, sb->token_digest, CP_DIGEST_LEN, sb) == 0)
            sb->token_indexed = true;
    }
    return 0;
}

static void lc__unregister(struct cp_sandbox *sb)
{
    struct cp *cp = sb->cp;
    if (sb->token_indexed) {
        cp_map_del(&cp->by_token, sb->token_digest, CP_DIGEST_LEN);
        sb->token_indexed = false;
    }
    if (sb->registered) {
        cp_map_del(&cp->sandboxes, sb->rec.id, strlen(sb->rec.id));
        sb->registered = false;
        cp->n_live--;
        cp_sb_unref(sb);
    }
}

/* ---- timers and the process watch -------------------------------------------------- */

static void lc__expired(uv_timer_t *t);
static void lc__run_ops(struct cp_sandbox *sb);
static void lc__teardown(struct cp_sandbox *sb);

static void lc__timer_closed(uv_handle_t *h)
{
    cp_sb_unref(h->data);
}

static void lc__arm_timer(struct cp_sandbox *sb)
{
    if (!sb->timer_init) {
        uv_timer_init(sb->cp->loop, &sb->timer);
        sb->timer.data = sb;
        sb->timer_init = true;
        cp_sb_ref(sb);
    }
    uint64_t now = al_wall_ns();
    uint64_t ms = sb->rec.end_ns > now ? (sb->rec.end_ns - now + 999999) / 1000000 : 0;
    uv_timer_start(&sb->timer, lc__expired, ms, 0);
}

static void lc__disarm_timer(struct cp_sandbox *sb)
{
    if (sb->timer_init)
        uv_timer_stop(&sb->timer);
}

static void lc__close_timer(struct cp_sandbox *sb)
{
    if (sb->timer_init) {
        sb->timer_init = false;
        uv_close((uv_handle_t *)&sb->timer, lc__timer_closed);
    }
}

static void lc__watch_closed(struct cp_proc_watch *w)
{
    cp_sb_unref(w->data);
}

/* reap: the process is ending (a stop) and must not stay a zombie. Not when airlockd leaves
 * its sandboxes running for the next airlockd (on_shutdown: keep): a reaper watching a live
 * airlock-vmm would keep airlockd's loop, and so airlockd, running until that sandbox ends. */
static void lc__stop_watch_ex(struct cp_sandbox *sb, bool reap)
{
    if (sb->watching) {
        /* The process may exit a moment later (airlock-vmm answers its stop first): make
         * sure it is reaped then. */
        if (reap && sb->watch.active)
            cp_proc_reap_later(sb->cp->loop, sb->rec.pid, sb->watch.pidfd);
        sb->watching = false;
        sb->pidfd = -1; /* closed with the watch */
        cp_proc_watch_stop(&sb->watch, lc__watch_closed);
    } else if (sb->pidfd >= 0) {
        if (reap)
            cp_proc_reap_later(sb->cp->loop, sb->rec.pid, sb->pidfd);
        close(sb->pidfd);
        sb->pidfd = -1;
    }
}

static void lc__stop_watch(struct cp_sandbox *sb)
{
    lc__stop_watch_ex(sb, true);
}

static void lc__paused_dir(const struct cp_sandbox *sb, char *out, size_t len);

static void lc__on_exit(struct cp_proc_watch *w, int wstatus)
{
    struct cp_sandbox *sb = w->data;
    char how[128];
    cp_proc_describe(wstatus, how, sizeof how);
    sb->gone = true;
    if (sb->rec.state == CP_SB_STOPPING || sb->parking)
        return; /* expected: it is being killed, or parked */
    char kept[4200];
    lc__paused_dir(sb, kept, sizeof kept);
    if (sb->rec.state == CP_SB_PAUSED && !sb->rec.paused_fs && access(kept, F_OK) == 0) {
        /* Paused with its memory, which is gone; its files, kept at its pause, are not. */
        al_error("sandbox %s: its process %d %s while it was paused with its memory: its "
                 "memory is lost; its files, as they were at its pause, are kept and its resume "
                 "boots it over them",
                 sb->rec.id, (int)w->pid, how);
        cp_metrics_crash(sb->cp->metrics);
        sb->rec.paused_fs = true;
        cp_sb_save(sb);
        cp_lifecycle_op(sb, CP_OP_PARK, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_CRASH, NULL);
        return;
    }
    al_error("sandbox %s: its process %d %s while %s: reclaiming its resources", sb->rec.id,
             (int)w->pid, how, cp_sb_state_name(sb->rec.state));
    cp_metrics_crash(sb->cp->metrics);
    /* Kill it for good: queued like a client's kill, answered to nobody. */
    cp_lifecycle_op(sb, CP_OP_KILL, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_CRASH, NULL);
}

static int lc__watch(struct cp_sandbox *sb)
{
    if (sb->pidfd < 0 || sb->watching)
        return 0;
    sb->watch.data = sb;
    int rc = cp_proc_watch_start(sb->cp->loop, &sb->watch, sb->rec.pid, sb->pidfd, lc__on_exit);
    if (rc) {
        al_error("sandbox %s: cannot watch process %d: %s", sb->rec.id, (int)sb->rec.pid,
                 uv_strerror(rc));
        return rc;
    }
    sb->watching = true;
    cp_sb_ref(sb);
    return 0;
}

/* ---- answers ---------------------------------------------------------------------------- */

static void lc__answer(struct cp_sandbox *sb, struct al_http_req *req, int api, int status)
{
    if (!req)
        return;
    if (api == CP_ANSWER_EMPTY || status == 204) {
        al_http_reply(req, 204, NULL, NULL, 0);
        return;
    }
    al_http_reply_json(req, status, cp_rest_sandbox_json(sb));
}

static void lc__answer_op(struct cp_op *op, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void lc__answer_op(struct cp_op *op, int status, const char *fmt, ...)
{
    if (!op->req)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cp_rest_error(op->req, status, "%s", msg);
    op->req = NULL;
}

/* ---- create ----------------------------------------------------------------------------- */

struct lc_create {
    struct cp_sandbox *sb;
    json_t *env_vars;
    char ca_fp[128]; /* the fingerprint of the CA handed to the agent at its start */
    char template_dir[4096];
    char template_build[40]; /* the build of the version template_dir holds ("" if none) */
    char template_ref[CP_TEMPLATE_MAX]; /* what the record names: the request's, or the
                                         * version a snapshot applies to */
    char restore_dir[4200];             /* Sandbox.create(snapshotID): its files, else "" */
    char forked_from[64];               /* a fork's copy: the sandbox forked, else "" */
    /* The answer's recipient instead of the request (struct cp_create's done), or NULL. */
    void (*done)(int status, json_t *sandbox, const char *msg, void *arg);
    void *done_arg;
    uint64_t timeout_s;
    struct cp_op *resume;        /* the boot of a parked sandbox: its resume, else NULL */
    char *start_cmd, *ready_cmd; /* the template's (template.json), or NULL */
    struct lc_ready *ready;      /* waiting for the agent to say it is ready */
    bool starting;               /* counted in cp->n_starting */
    int fail_status;
    char fail_msg[1024];
    uv_work_t work;
    int work_rc;
    struct al_error work_err;
};

static void lc__create_undo(struct lc_create *c);
static void lc__boot_done(struct lc_create *c);
static void lc__create_egress(struct lc_create *c);
static void lc__create_start(struct lc_create *c);
static void lc__start_release(struct lc_create *c);

static void lc__wipe_env(json_t *env)
{
    if (!env)
        return;
    /* Environment values may be secrets: wipe them before they are freed. */
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v)
    {
        if (json_is_string(v))
            explicit_bzero((char *)json_string_value(v), json_string_length(v));
    }
    json_decref(env);
}

static void lc__create_free(struct lc_create *c)
{
    lc__wipe_env(c->env_vars);
    free(c->start_cmd);
    free(c->ready_cmd);
    free(c);
}

static void lc__create_fail(struct lc_create *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void lc__create_fail(struct lc_create *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->fail_msg, sizeof c->fail_msg, fmt, ap);
    va_end(ap);
    c->fail_status = status;
    al_warn("sandbox %s: create failed: %s", c->sb->rec.id, c->fail_msg);
    lc__create_undo(c);
}

/* Ends the creation's current stage: its time goes to the stage, the next begins now. */
static void lc__stage(struct cp_sandbox *sb, enum cp_create_stage st)
{
    uint64_t now = al_now_ns();
    sb->create_stage_ms[st] += (double)(now - sb->create_mark_ns) / 1e6;
    sb->create_mark_ns = now;
}

static void lc__create_done(struct lc_create *c)
{
    struct cp_sandbox *sb = c->sb;
    struct cp *cp = sb->cp;
    if (c->resume) {
        lc__boot_done(c);
        return;
    }
    cp->n_creating--; /* (its turn to start was given back by lc__create_started) */
    uint64_t now = al_wall_ns();
    sb->rec.state = CP_SB_RUNNING;
    sb->rec.started_ns = now;
    sb->rec.end_ns = now + c->timeout_s * 1000000000ull;
    if (c->ca_fp[0] && sb->rec.intercept)
        json_object_set_new(sb->rec.intercept, "agentCaFingerprint", json_string(c->ca_fp));
    cp_sb_save(sb);
    json_t *evd = NULL;
    if (sb->rec.snapshot_id[0])
        evd = json_pack("{s:s}", "snapshot_id", sb->rec.snapshot_id);
    else if (c->forked_from[0])
        evd = json_pack("{s:s}", "forked_from", c->forked_from);
    cp_event_emit(sb, CP_EV_CREATED, CP_CAUSE_API, sb->rec.key_id, evd);
    lc__arm_timer(sb);
    lc__watch(sb);
    double ms = (double)(al_now_ns() - sb->create_t0_ns) / 1e6;
    const double *st = sb->create_stage_ms;
    cp_metrics_created(cp->metrics, ms, st);
    cp_warm_created(sb);
    al_info("sandbox %s created in %.1f ms (template %s, policy %s %.12s, backend %s%s%s%s; "
            "stages: accept %.1f, network %.1f, egress %.1f, queue %.1f, start %.1f ms)",
            sb->rec.id, ms, sb->rec.template_id, sb->rec.policy_name, sb->rec.policy_hash,
            sb->rec.backend, sb->start_how ? " " : "", sb->start_how ? sb->start_how : "",
            sb->rec.addr[0] ? "" : ", no network", st[CP_CREATE_ACCEPT], st[CP_CREATE_NETWORK],
            st[CP_CREATE_EGRESS], st[CP_CREATE_QUEUE], st[CP_CREATE_START]);
    struct al_http_req *req = sb->create_req;
    sb->create_req = NULL;
    if (c->done)
        c->done(201, cp_rest_sandbox_json(sb), NULL, c->done_arg);
    else
        lc__answer(sb, req, sb->create_api, 201);
    if (cp->n_creating == 0)
        cp_pools_refill(cp); /* a burst is over: get ready for the next one */
    sb->opctx = NULL;
    sb->busy = false;
    lc__create_free(c);
    lc__run_ops(sb);
    cp_sb_unref(sb);
}

/* ---- ready: the template's startCmd runs and its readyCmd succeeded ----------------------
 *
 * The agent runs both (vmm/guest/startcmd.c) and says where it stands in GET /ready; the
 * creation polls that until "ready", and fails (the sandbox torn down) on "failed" or after
 * sandboxes.ready_timeout, with what the last attempt said. */

#define LC_READY_POLL_MS 100

struct lc_ready {
    uv_timer_t timer;
    struct lc_create *c; /* NULL once over (the timer closing, a poll perhaps in flight) */
    bool inflight, closed;
    uint64_t deadline_ns;
    char last[400]; /* why the last poll had no answer */
};

static void lc__create_done(struct lc_create *c);

static void lc__ready_maybe_free(struct lc_ready *r)
{
    if (r->closed && !r->inflight)
        free(r);
}

static void lc__ready_closed(uv_handle_t *h)
{
    struct lc_ready *r = h->data;
    r->closed = true;
    lc__ready_maybe_free(r);
}

static void lc__ready_end(struct lc_ready *r)
{
    r->c->ready = NULL;
    r->c = NULL;
    uv_close((uv_handle_t *)&r->timer, lc__ready_closed);
}

static void lc__ready_fail(struct lc_ready *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void lc__ready_fail(struct lc_ready *r, int status, const char *fmt, ...)
{
    struct lc_create *c = r->c;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lc__ready_end(r);
    lc__create_fail(c, status, "%s", msg);
}

/* Where the agent said it stands: what the caller learns when it is not ready in time. */
static void lc__ready_describe(const json_t *st, char *out, size_t len)
{
    const char *ls = json_string_value(json_object_get(st, "lastStatus"));
    const char *lo = json_string_value(json_object_get(st, "lastOutput"));
    json_int_t n = json_integer_value(json_object_get(st, "attempts"));
    if (!ls) {
        snprintf(out, len, "no attempt has ended (%lld started)", (long long)n);
        return;
    }
    /* Its output's end, without the trailing newline. */
    size_t ol = lo ? strlen(lo) : 0;
    while (ol && (lo[ol - 1] == '\n' || lo[ol - 1] == '\r' || lo[ol - 1] == ' '))
        ol--;
    if (ol > 300) {
        lo += ol - 300;
        ol = 300;
    }
    snprintf(out, len, "%lld attempt(s), the last: %s%s%.*s", (long long)n, ls,
             ol ? ", output: " : "", (int)ol, lo ? lo : "");
}

static void lc__ready_answered(int status, json_t *st, const char *err, void *arg)
{
    struct lc_ready *r = arg;
    r->inflight = false;
    struct lc_create *c = r->c;
    if (!c) {
        lc__ready_maybe_free(r);
        return;
    }
    if (err) {
        /* Kept for the timeout's message; the next tick asks again. */
        snprintf(r->last, sizeof r->last, "GET /ready: %s", err);
        return;
    }
    if (status != 200) {
        snprintf(r->last, sizeof r->last, "GET /ready answered %d", status);
        return;
    }
    const char *state = json_string_value(json_object_get(st, "state"));
    if (state && strcmp(state, "ready") == 0) {
        lc__ready_end(r);
        lc__stage(c->sb, CP_CREATE_START);
        lc__create_done(c);
        return;
    }
    if (state && strcmp(state, "failed") == 0) {
        const char *e = json_string_value(json_object_get(st, "error"));
        char d[600];
        lc__ready_describe(st, d, sizeof d);
        lc__ready_fail(r, 500, "the template's start failed: %s (readyCmd: %s)",
                       e ? e : "no reason given", d);
        return;
    }
    if (state && strcmp(state, "none") == 0) {
        lc__ready_fail(r, 500,
                       "the sandbox's agent runs no startCmd/readyCmd although the template "
                       "has them (an agent older than airlockd?)");
        return;
    }
    /* "starting": keep what it said for the timeout's message. */
    lc__ready_describe(st, r->last, sizeof r->last);
}

static void lc__ready_tick(uv_timer_t *t)
{
    struct lc_ready *r = t->data;
    struct lc_create *c = r->c;
    struct cp_sandbox *sb = c->sb;
    struct cp *cp = sb->cp;
    if (cp->stopping) {
        lc__ready_fail(r, 503, "airlockd is shutting down");
        return;
    }
    /* Its process ended (the agent died, or what runs it): no answer will come. The pidfd
     * is readable then; it is not reaped here (the teardown does that). */
    struct pollfd pf = {.fd = sb->pidfd, .events = POLLIN};
    if (sb->pidfd >= 0 && poll(&pf, 1, 0) > 0) {
        lc__ready_fail(r, 500,
                       "the sandbox ended before it was ready (its template's %s%.200s%s): %s",
                       c->ready_cmd ? "readyCmd '" : "startCmd", c->ready_cmd ? c->ready_cmd : "",
                       c->ready_cmd ? "' had not succeeded" : " had not been reported running",
                       r->last[0] ? r->last : "no answer from GET /ready yet");
        return;
    }
    if (al_now_ns() > r->deadline_ns) {
        char what[300];
        if (c->ready_cmd)
            snprintf(what, sizeof what, "readyCmd '%.200s' did not succeed", c->ready_cmd);
        else
            snprintf(what, sizeof what, "startCmd was not reported running");
        lc__ready_fail(r, 500, "the template's %s within %.1f s (sandboxes.ready_timeout): %s",
                       what, (double)cp->cfg.ready_timeout_ms / 1000.0,
                       r->last[0] ? r->last : "the agent did not answer GET /ready");
        return;
    }
    if (r->inflight)
        return;
    char target[160];
    snprintf(target, sizeof target, "unix:%s", sb->agent_sock);
    struct cp_jcall_opts o = {.target = target,
                              .method = "GET",
                              .path = "/ready",
                              .token = sb->rec.token,
                              .timeout_ms = 2000,
                              .max_answer = 64 * 1024,
                              .done = lc__ready_answered,
                              .arg = r};
    r->inflight = true;
    if (cp_jcall(cp->loop, &o))
        r->inflight = false;
}

static void lc__ready_wait(struct lc_create *c)
{
    struct cp_sandbox *sb = c->sb;
    struct lc_ready *r = calloc(1, sizeof *r);
    if (!r) {
        lc__create_fail(c, 500, "out of memory");
        return;
    }
    r->c = c;
    r->deadline_ns = al_now_ns() + sb->cp->cfg.ready_timeout_ms * 1000000ull;
    uv_timer_init(sb->cp->loop, &r->timer);
    r->timer.data = r;
    c->ready = r;
    uv_timer_start(&r->timer, lc__ready_tick, 0, LC_READY_POLL_MS);
}

static void lc__create_started(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct lc_create *c = sb->opctx;
    lc__start_release(c); /* the next one may start */
    if (rc) {
        /* -EAGAIN: the host's limits for all sandboxes together are reached (503: try
         * again later), not a fault of this sandbox or of airlockd. */
        lc__create_fail(c,
                        rc == -ETIMEDOUT ? 504
                        : rc == -EAGAIN  ? 503
                                         : 500,
                        "the sandbox did not start: %s", msg && *msg ? msg : strerror(-rc));
        return;
    }
    sb->started = true;
    if (c->start_cmd || c->ready_cmd) {
        lc__ready_wait(c);
        return;
    }
    lc__stage(sb, CP_CREATE_START);
    lc__create_done(c);
}

/* What the egress proxy handed out for the sandbox (egressreg.c keeps it in rec.intercept):
 * the CA goes into the agent's init (it installs it in the sandbox's trust stores), the
 * placeholders into its envVars. A placeholder replaces an envVar of the same name: the
 * policy says that variable holds it (a value of the caller's own would never be swapped
 * for the secret, only removed from the request). */
static void lc__create_intercept(struct lc_create *c, struct cp_start_args *a)
{
    struct cp_sandbox *sb = c->sb;
    json_t *ix = sb->egress_registered ? sb->rec.intercept : NULL;
    if (!ix)
        return;
    const char *pem = json_string_value(json_object_get(ix, "caCertPem"));
    const char *fp = json_string_value(json_object_get(ix, "caFingerprint"));
    /* The test backend runs the agent as a plain host process: it has no trust store of
     * its own (and no network that reaches the proxy). A CA that can certify nothing (the
     * policy intercepts nothing) is not worth a copy of the system bundle in the sandbox. */
    if (pem && fp && !sb->cp->backend->host_process && cp_egress_ca_useful(ix)) {
        a->ca_cert_pem = pem;
        snprintf(c->ca_fp, sizeof c->ca_fp, "%s", fp);
    }
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(ix, "placeholders"), k, v)
    {
        if (json_object_get(c->env_vars, k))
            al_warn("sandbox %s: envVars.%s is replaced by the placeholder its policy defines "
                    "for that variable",
                    sb->rec.id, k);
        /* A copy: the environment is wiped when the creation ends (its values may be the
         * caller's secrets), the record's placeholders must stay. */
        json_object_set_new(c->env_vars, k, json_string(json_string_value(v)));
    }
}

/* ---- turns to start ------------------------------------------------------------------------
 *
 * At most start_limit sandboxes start at once (airlock-vmm until the agent is healthy); the
 * other creations wait for their turn, oldest request first. A start hops between processes
 * (airlockd, airlock-vmm, the sandbox's first process, the agent) about ten times; with
 * fifty starting on two CPUs each hop waits behind all the others, and some creations took
 * three times as long as the median (the tail of a burst, with every airlock-vmm warm and
 * every network pooled). In turns, each start is quick and the wait is the queue's: a steady
 * stream of creations waits about as long each. The limit (four per CPU by default) keeps
 * the CPUs busy while starts wait for one another. */

static void lc__create_start_now(struct lc_create *c);

static void lc__start_next(struct cp *cp)
{
    while (cp->start_queue && cp->n_starting < cp->start_limit) {
        struct cp_sandbox *sb = cp->start_queue;
        cp->start_queue = sb->start_next;
        sb->start_next = NULL;
        struct lc_create *c = sb->opctx;
        c->starting = true;
        cp->n_starting++;
        lc__stage(sb, CP_CREATE_QUEUE);
        lc__create_start_now(c);
    }
}

static void lc__create_start(struct lc_create *c)
{
    struct cp_sandbox *sb = c->sb;
    struct cp *cp = sb->cp;
    if (sb->warm_taken) {
        lc__create_start_now(c); /* a claim is one request to its agent: no turn needed */
        return;
    }
    if (!cp->start_limit) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        cp->start_limit = cp->cfg.start_concurrency > 0 ? (size_t)cp->cfg.start_concurrency
                                                        : 4 * (size_t)(ncpu > 0 ? ncpu : 1);
    }
    /* In the order the requests came in, not the order they got here: a creation whose
     * network had to be built (or whose registration took longer) does not also wait behind
     * every creation that overtook it meanwhile. */
    struct cp_sandbox **at = &cp->start_queue;
    while (*at && (*at)->create_t0_ns <= sb->create_t0_ns)
        at = &(*at)->start_next;
    sb->start_next = *at;
    *at = sb;
    lc__start_next(cp);
}

/* Its start is over (or the creation failed before it): the next may start. */
static void lc__start_release(struct lc_create *c)
{
    struct cp *cp = c->sb->cp;
    if (!c->starting)
        return;
    c->starting = false;
    cp->n_starting--;
    lc__start_next(cp);
}

static void lc__create_start_now(struct lc_create *c)
{
    struct cp_sandbox *sb = c->sb;
    struct cp *cp = sb->cp;
    if (cp->stopping) {
        lc__create_fail(c, 503, "airlockd is shutting down");
        return;
    }
    struct cp_start_args a = {
        .template_dir = c->template_dir,
        .template_name = sb->rec.template_id,
        .env_vars = c->env_vars,
        .netns_fd = sb->has_net ? sb->net.netns_fd : -1,
        .tap_fd = sb->has_net ? sb->net.tap_fd : -1,
        .tap_mac = sb->has_net ? sb->net.guest_mac : NULL,
        .addr = sb->has_net ? sb->net.addr : NULL,
        .prefix_len = sb->has_net ? sb->net.prefix_len : 0,
        .dns = sb->has_net && sb->net.gateway[0] ? sb->net.gateway : NULL,
        .hostname = NULL,
        .restore_dir = c->restore_dir[0] ? c->restore_dir : NULL,
        .start_cmd = c->start_cmd,
        .ready_cmd = c->ready_cmd,
    };
    lc__create_intercept(c, &a);
    sb->backend_attempted = true;
    int rc = sb->warm_taken ? cp_warm_claim(sb, &a, lc__create_started)
                            : cp->backend->start(sb, &a, lc__create_started);
    /* The network namespace (or tap) is joined by (or passed to) the sandbox now; airlockd's
     * copy is not needed any more (a tap goes away with the last copy: its VMM's). */
    if (sb->net.netns_fd >= 0) {
        close(sb->net.netns_fd);
        sb->net.netns_fd = -1;
    }
    if (sb->net.tap_fd >= 0) {
        close(sb->net.tap_fd);
        sb->net.tap_fd = -1;
    }
    if (rc)
        lc__create_fail(c, 500, "cannot start the sandbox: %s", strerror(-rc));
}

/* Its volumes' "mount" records are on disk before it starts: nothing in the sandbox writes
 * to a volume before the audit log says it was mounted there. A record that cannot be
 * written fails the creation (503), as the proxy fails closed when its log cannot be
 * written (docs/audit.md, "volume"). */
static void lc__create_mounts_audited(void *arg, int rc, const char *msg)
{
    struct cp_sandbox *sb = arg;
    struct lc_create *c = sb->opctx;
    if (rc) {
        lc__create_fail(c, 503,
                        "the audit record of its volume mount was not written (%s): the sandbox "
                        "is not started; see airlock-egress's log for why its audit log fails",
                        msg && *msg ? msg : strerror(-rc));
        return;
    }
    sb->mounts_audited = json_array_size(sb->rec.volumes) > 0;
    lc__create_start(c);
}

static void lc__create_mounts(struct lc_create *c)
{
    struct cp_sandbox *sb = c->sb;
    if (c->resume || !json_array_size(sb->rec.volumes)) {
        lc__create_start(c); /* (a parked sandbox's mounts were recorded at its creation) */
        return;
    }
    cp_volumes_audit_mounts(sb->cp, sb, true, sb->rec.key_id, NULL, lc__create_mounts_audited, sb);
}

static void lc__create_registered(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct lc_create *c = sb->opctx;
    if (rc) {
        lc__create_fail(c, rc == -EINVAL ? 400 : 503,
                        "the egress proxy refused the sandbox's registration: %s",
                        msg && *msg ? msg : strerror(-rc));
        return;
    }
    sb->egress_registered = true;
    lc__stage(sb, CP_CREATE_EGRESS);
    lc__create_mounts(c);
}

static void lc__create_egress(struct lc_create *c)
{
    struct cp_sandbox *sb = c->sb;
    struct cp *cp = sb->cp;
    if (!sb->has_net || !cp->egress) {
        lc__create_mounts(c);
        return;
    }
    int rc = cp_egress_register(cp->egress, sb, lc__create_registered);
    if (rc)
        lc__create_fail(c, 503, "cannot register the sandbox with the egress proxy: %s",
                        strerror(-rc));
}

static void lc__net_work(uv_work_t *w)
{
    struct lc_create *c = w->data;
    struct cp_sandbox *sb = c->sb;
    struct cp *cp = sb->cp;
    c->work_rc = cp->net->acquire(cp->net_priv, sb->rec.seq, sb->rec.id, &sb->net, &c->work_err);
}

static void lc__net_done(uv_work_t *w, int status)
{
    struct lc_create *c = w->data;
    struct cp_sandbox *sb = c->sb;
    if (status || c->work_rc) {
        lc__create_fail(c, 503, "no network for the sandbox: %s",
                        status ? uv_strerror(status) : al_error_str(&c->work_err));
        return;
    }
    sb->has_net = true;
    snprintf(sb->rec.addr, sizeof sb->rec.addr, "%s", sb->net.addr);
    cp_sb_save(sb);
    lc__stage(sb, CP_CREATE_NETWORK);
    lc__create_egress(c);
}

/* The creation's first step: its network (on the thread pool), then the rest. */
static void lc__create_network(struct lc_create *c)
{
    struct cp *cp = c->sb->cp;
    if (!cp->net || c->sb->warm_taken) { /* (a warm sandbox has its network) */
        lc__create_egress(c);
        return;
    }
    c->work.data = c;
    int rc = uv_queue_work(cp->loop, &c->work, lc__net_work, lc__net_done);
    if (rc)
        lc__create_fail(c, 500, "cannot queue the network set-up: %s", uv_strerror(rc));
}

static void lc__park(struct cp_sandbox *sb, struct cp_op *op, struct lc_create *c);

/* Undoes, in reverse order, whatever the creation had done; the teardown answers the
 * create request with the error. A boot of a parked sandbox is undone as far as its
 * parking: it stays paused, and its resume is answered with the error. */
static void lc__create_undo(struct lc_create *c)
{
    if (c->resume)
        lc__park(c->sb, c->resume, c);
    else
        lc__teardown(c->sb);
}

static int lc__check_env(const json_t *env, struct al_error *err)
{
    if (!env)
        return 0;
    if (json_object_size(env) > 1024)
        return al_error_set(err, -E2BIG, "envVars: at most 1024 variables");
    size_t total = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)env, k, v)
    {
        if (!json_is_string(v))
            return al_error_set(err, -EINVAL, "envVars.%s: values must be strings", k);
        size_t kl = strlen(k);
        if (kl == 0 || kl > 256 || strchr(k, '=') || strchr(k, '\0' + 0) != k + kl)
            return al_error_set(err, -EINVAL, "envVars: \"%.64s\" is not a variable name", k);
        total += kl + json_string_length(v) + 2;
    }
    if (total > 200 * 1024)
        return al_error_set(err, -E2BIG, "envVars: more than 200 KiB in all");
    return 0;
}

/* The template's startCmd and readyCmd (its template.json; a template without them, or
 * without the file, has neither). */
static int lc__template_cmds(struct lc_create *c, struct al_error *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/template.json", c->template_dir);
    if (access(p, F_OK) < 0)
        return 0;
    json_t *t = al_json_load_file(p, err);
    if (!t)
        return err->code ? err->code : -EINVAL;
    const char *s = json_string_value(json_object_get(t, "start_cmd"));
    const char *r = json_string_value(json_object_get(t, "ready_cmd"));
    c->start_cmd = s && *s ? strdup(s) : NULL;
    c->ready_cmd = r && *r ? strdup(r) : NULL;
    json_decref(t);
    return 0;
}

/* A creation refused before it began: the answer to req, or to req_c->done. */
static void lc__refuse(const struct cp_create *req_c, struct al_http_req *req, int status,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void lc__refuse(const struct cp_create *req_c, struct al_http_req *req, int status,
                       const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (req_c->done)
        req_c->done(status, NULL, msg, req_c->done_arg);
    else
        cp_rest_error(req, status, "%s", msg);
}

/* The limits on the count that airlockd knows before a start: its own descriptors
 * (RLIMIT_NOFILE, read at each creation, so a raise with prlimit counts at once) and the
 * jail's user-id ranges (each sandbox holds one for its life). A start beyond either would
 * fail half-way (an agent without its socket, a 500 after the network and egress steps). */
static bool lc__may_start(struct cp *cp, char *why, size_t len)
{
    uint64_t nofile = cp_nofile_now();
    uint64_t fit = cp_nofile_sandboxes(&cp->cfg, nofile);
    if (cp->n_live >= fit) {
        snprintf(why, len,
                 "airlockd's open-files limit (RLIMIT_NOFILE %" PRIu64 ") has room for %" PRIu64
                 " sandboxes (%d descriptors each, after its pools and a reserve) and %zu exist: "
                 "raise LimitNOFILE= in airlockd's unit, or ulimit -n of the shell that starts it",
                 nofile, fit, CP_NOFILE_PER_SANDBOX, cp->n_live);
        return false;
    }
    uint64_t slots = cp->cfg.uid_slots > 0 ? (uint64_t)cp->cfg.uid_slots : JAIL_ID_SLOTS_DEFAULT;
    if (strcmp(cp->backend_kind, "test") != 0 && cp->n_live >= slots) {
        snprintf(why, len,
                 "%zu sandboxes hold all %" PRIu64 " of the jail's user-id ranges "
                 "(sandboxes.uid_slots): raise it (up to 65535) or kill some first",
                 cp->n_live, slots);
        return false;
    }
    return true;
}

void cp_lifecycle_create(struct cp *cp, const struct cp_create *req_c, struct al_http_req *req,
                         int api)
{
    struct al_error err = {0};
    uint64_t t0 = al_now_ns();
    if (cp->stopping) {
        lc__refuse(req_c, req, 503, "airlockd is shutting down");
        return;
    }
    char why[600];
    if (!cp_disk_may_create(cp, why, sizeof why)) {
        lc__refuse(req_c, req, 503, "%s", why);
        return;
    }
    if (cp->n_live >= (size_t)cp->cfg.max_sandboxes) {
        lc__refuse(req_c, req, 429,
                   "%zu sandboxes exist, the configured maximum "
                   "(sandboxes.max): kill some first",
                   cp->n_live);
        return;
    }
    if (!lc__may_start(cp, why, sizeof why)) {
        lc__refuse(req_c, req, 503, "%s", why);
        return;
    }
    if (cp->n_creating >= (size_t)cp->cfg.max_creating) {
        lc__refuse(req_c, req, 429,
                   "%zu sandboxes are being created, the configured maximum "
                   "(sandboxes.max_creating): retry shortly",
                   cp->n_creating);
        return;
    }
    struct lc_create *c = calloc(1, sizeof *c);
    if (!c) {
        lc__refuse(req_c, req, 500, "out of memory");
        return;
    }
    c->done = req_c->done;
    c->done_arg = req_c->done_arg;
    /* A snapshot id: the template version it applies to, with its files on top (a fork's
     * copy names both). */
    snprintf(c->template_ref, sizeof c->template_ref, "%s", req_c->template_id);
    int snap = 1;
    if (req_c->restore_dir) {
        snprintf(c->restore_dir, sizeof c->restore_dir, "%s", req_c->restore_dir);
        snprintf(c->forked_from, sizeof c->forked_from, "%s",
                 req_c->forked_from ? req_c->forked_from : "");
    } else {
        snap = cp_snapshot_for_create(cp, req_c->template_id, req_c->who.key_id, c->template_ref,
                                      sizeof c->template_ref, c->restore_dir, sizeof c->restore_dir,
                                      &err);
    }
    if (snap < 0) {
        free(c);
        lc__refuse(req_c, req, snap == -ENOENT ? 404 : 409, "%s", al_error_str(&err));
        return;
    }
    if (cp_template_resolve_build(cp, c->template_ref, c->template_dir, sizeof c->template_dir,
                                  c->template_build, sizeof c->template_build, &err)) {
        lc__create_free(c);
        if (snap)
            lc__refuse(req_c, req, 409, "snapshot %s: its template is gone: %s", req_c->template_id,
                       al_error_str(&err));
        else
            lc__refuse(req_c, req, 404, "%s", al_error_str(&err));
        return;
    }
    if (lc__template_cmds(c, &err)) {
        lc__create_free(c);
        lc__refuse(req_c, req, 500, "%s", al_error_str(&err));
        return;
    }
    if (lc__check_env(req_c->env_vars, &err)) {
        lc__create_free(c);
        lc__refuse(req_c, req, 400, "%s", al_error_str(&err));
        return;
    }
    /* The id first: the secrets holding its header transforms' values are named after it. */
    char id[CP_ID_LEN + 1];
    /* A warm sandbox of the template's version brings its own (taken below, on this turn of
     * the loop: it stays ready until then). Not for a snapshot (its files come first) nor with
     * volumes (its mounts are made before it starts). */
    const char *warm_id =
        snap || req_c->volumes ? NULL : cp_warm_peek(cp, req_c->template_id, c->template_dir);
    if (warm_id)
        snprintf(id, sizeof id, "%s", warm_id);
    else
        do {
            cp_sandbox_id_new(id);
        } while (cp_sandbox_get(cp, id) || cp_warm_has_id(cp, id));
    json_t *network = req_c->network ? json_deep_copy(req_c->network) : NULL, *pending = NULL;
    if (cp_transforms_prepare(id, "c", network, &pending, &err)) {
        lc__create_free(c);
        json_decref(network);
        lc__refuse(req_c, req, 400, "%s", al_error_str(&err));
        return;
    }
    struct cp_policy_sel sel = {0};
    int status = 500;
    if (cp_transforms_resolve(cp, req_c->who.key_id, network, &status, &err)) {
        lc__create_free(c);
        json_decref(network);
        json_decref(pending);
        lc__refuse(req_c, req, status, "%s", al_error_str(&err));
        return;
    }
    struct cp_policy_ask ask = {.metadata = req_c->metadata,
                                .network = network,
                                .allow_internet = req_c->allow_internet,
                                .who = &req_c->who,
                                .template_dir = c->template_dir};
    if (cp_policy_select(cp, &ask, &sel, &status, &err)) {
        lc__create_free(c);
        json_decref(network);
        json_decref(pending);
        lc__refuse(req_c, req, status, "%s", al_error_str(&err));
        return;
    }
    uint64_t timeout_s =
        req_c->timeout_given ? req_c->timeout_s : (cp->cfg.default_timeout_ms + 999) / 1000;
    if (timeout_s * 1000 > cp->cfg.max_timeout_ms) {
        lc__create_free(c);
        json_decref(network);
        json_decref(pending);
        cp_policy_sel_free(&sel);
        lc__refuse(req_c, req, 400,
                   "timeout %llu s is longer than this server allows (%llu s, "
                   "sandboxes.max_timeout)",
                   (unsigned long long)timeout_s,
                   (unsigned long long)(cp->cfg.max_timeout_ms / 1000));
        return;
    }
    /* Sealed once everything that can refuse the creation has spoken; a failure from here
     * on deletes them (cp_transforms_drop at the teardown's end). */
    if (cp_transforms_seal(cp, pending, &err)) {
        lc__create_free(c);
        json_decref(network);
        cp_policy_sel_free(&sel);
        lc__refuse(req_c, req, 503, "%s", al_error_str(&err));
        return;
    }
    struct cp_sandbox *sb = warm_id ? cp_warm_take(cp, id) : cp_sb_new(cp);
    if (!sb) {
        lc__create_free(c);
        cp_transforms_drop(cp, network, NULL);
        json_decref(network);
        cp_policy_sel_free(&sel);
        lc__refuse(req_c, req, 500, "out of memory");
        return;
    }
    c->sb = sb;
    c->timeout_s = timeout_s;
    c->env_vars = req_c->env_vars ? json_deep_copy(req_c->env_vars) : json_object();
    struct cp_sb_record *r = &sb->rec;
    snprintf(r->id, sizeof r->id, "%s", id);
    r->network = network;
    r->volumes = req_c->volumes ? json_deep_copy(req_c->volumes) : NULL;
    if (!sb->warm_taken && cp_store_next_seq(cp->store, &r->seq, &err)) {
        cp_policy_sel_free(&sel);
        cp_transforms_drop(cp, r->network, NULL);
        lc__create_free(c);
        cp_sb_unref(sb);
        lc__refuse(req_c, req, 500, "%s", al_error_str(&err));
        return;
    }
    r->state = CP_SB_CREATING;
    snprintf(r->template_id, sizeof r->template_id, "%s", c->template_ref);
    snprintf(r->template_build, sizeof r->template_build, "%s", c->template_build);
    if (c->restore_dir[0] && !c->forked_from[0]) /* (the directory's name is its id) */
        snprintf(r->snapshot_id, sizeof r->snapshot_id, "%s", strrchr(c->restore_dir, '/') + 1);
    snprintf(r->backend, sizeof r->backend, "%s", cp->backend_kind);
    snprintf(r->key_id, sizeof r->key_id, "%s", req_c->who.key_id);
    cp_token_new(r->token);
    r->created_ns = al_wall_ns();
    r->on_timeout_pause = req_c->auto_pause;
    r->auto_pause_fs = req_c->auto_pause && req_c->auto_pause_fs;
    r->auto_resume = req_c->auto_resume;
    r->allow_internet = req_c->allow_internet;
    r->cpu_count = (int)cp->cfg.cpu_count;
    r->memory_mb = (int)(cp->cfg.memory_bytes >> 20);
    r->disk_mb = (int)(cp->cfg.disk_bytes >> 20);
    json_decref(r->metadata);
    r->metadata = req_c->metadata ? json_deep_copy(req_c->metadata) : json_object();
    snprintf(r->policy_name, sizeof r->policy_name, "%s", sel.name);
    snprintf(r->policy_hash, sizeof r->policy_hash, "%s", sel.hash);
    cp_policy_sel_free(&sel);
    if (cp_store_sb_save(cp->store, r, &err) || lc__register(sb)) {
        lc__refuse(req_c, req, 500, "cannot record the sandbox: %s", al_error_str(&err));
        lc__create_free(c);
        if (sb->warm_taken) {
            cp_lifecycle_discard(sb, NULL, NULL); /* its processes run: reclaims all of it */
        } else {
            cp_store_sb_delete(cp->store, r->id, NULL);
            cp_transforms_drop(cp, r->network, NULL);
        }
        cp_sb_unref(sb);
        return;
    }
    cp->n_creating++;
    sb->busy = true;
    sb->opctx = c;
    sb->create_req = req;
    sb->create_api = api;
    sb->create_t0_ns = sb->create_mark_ns = t0;
    lc__stage(sb, CP_CREATE_ACCEPT);
    cp_sb_ref(sb);   /* held by the creation until it ends */
    cp_sb_unref(sb); /* cp_sb_new's (or the warm pool's) reference: the registry holds one now */
    lc__create_network(c);
}

/* ---- teardown ----------------------------------------------------------------------------- */

/* The context of a teardown (kill, expiry, crash, failed or abandoned create). */
struct lc_teardown {
    struct cp_sandbox *sb;
    struct lc_create *create; /* a failed create: answer its request with its error */
    struct cp_op *op;         /* a kill op: answer it once the processes are gone */
    struct cp_op *keep;       /* parking (lc__park): the op it is part of; the row stays */
    void (*done)(struct cp_sandbox *sb, void *arg); /* cp_lifecycle_discard's */
    void *done_arg;
    uint64_t t0_ns;
    uv_work_t work;
    int work_rc;
    struct al_error work_err;
};

static void lc__td_forget(struct lc_teardown *t);

static void lc__td_net_work(uv_work_t *w)
{
    struct lc_teardown *t = w->data;
    struct cp_sandbox *sb = t->sb;
    struct cp *cp = sb->cp;
    t->work_rc = cp->net->release(cp->net_priv, sb->rec.seq, &t->work_err);
}

static void lc__td_net_done(uv_work_t *w, int status)
{
    struct lc_teardown *t = w->data;
    struct cp_sandbox *sb = t->sb;
    if (status || (t->work_rc && t->work_rc != -ENOENT))
        al_error("sandbox %s: releasing its network failed: %s (the vswitch reclaims it at "
                 "the next start)",
                 sb->rec.id, status ? uv_strerror(status) : al_error_str(&t->work_err));
    sb->has_net = false;
    lc__td_forget(t);
}

static void lc__td_net(struct lc_teardown *t)
{
    struct cp_sandbox *sb = t->sb;
    struct cp *cp = sb->cp;
    if (sb->net.netns_fd >= 0) {
        close(sb->net.netns_fd);
        sb->net.netns_fd = -1;
    }
    if (sb->net.tap_fd >= 0) {
        close(sb->net.tap_fd);
        sb->net.tap_fd = -1;
    }
    if (!sb->has_net || !cp->net) {
        lc__td_forget(t);
        return;
    }
    t->work.data = t;
    if (uv_queue_work(cp->loop, &t->work, lc__td_net_work, lc__td_net_done)) {
        /* Do it here rather than leak it. */
        lc__td_net_work(&t->work);
        lc__td_net_done(&t->work, 0);
    }
}

static void lc__td_unregistered(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct lc_teardown *t = sb->opctx;
    if (rc && rc != -ENOENT)
        al_warn("sandbox %s: egress unregistration: %s (resynchronised later)", sb->rec.id,
                msg && *msg ? msg : strerror(-rc));
    sb->egress_registered = false;
    lc__td_net(t);
}

static void lc__td_egress(struct lc_teardown *t)
{
    struct cp_sandbox *sb = t->sb;
    struct cp *cp = sb->cp;
    if (!sb->egress_registered || !cp->egress ||
        cp_egress_unregister(cp->egress, sb, lc__td_unregistered)) {
        sb->egress_registered = false;
        lc__td_net(t);
    }
}

static void lc__paused_remove(const struct cp_sandbox *sb);

/* Parking: airlock-vmm answers its stop before it has exited and removed
 * <state>/sandboxes/<id>, which the boot that resumes the sandbox makes again: the parking
 * goes on once the process has exited (its pidfd readable), polled, at most 10 s (then it is
 * killed, and 2 s more). */
#define LC_EXIT_WAIT_MS 10000

struct lc_exit_wait {
    uv_timer_t timer;
    struct lc_teardown *t;
    uint64_t deadline_ns;
    bool killed;
};

static void lc__exit_wait_closed(uv_handle_t *h)
{
    free(h->data);
}

static void lc__exit_wait_tick(uv_timer_t *tm)
{
    struct lc_exit_wait *w = tm->data;
    struct lc_teardown *t = w->t;
    struct cp_sandbox *sb = t->sb;
    struct pollfd pf = {.fd = sb->pidfd, .events = POLLIN};
    bool exited = sb->pidfd < 0 || poll(&pf, 1, 0) > 0;
    if (!exited && al_now_ns() < w->deadline_ns)
        return;
    if (!exited && !w->killed) {
        al_warn("sandbox %s: its airlock-vmm did not exit within %d ms of its stop: killing it",
                sb->rec.id, LC_EXIT_WAIT_MS);
        cp_proc_signal(sb->pidfd, SIGKILL);
        w->killed = true;
        w->deadline_ns = al_now_ns() + 2000000000ull;
        return;
    }
    uv_timer_stop(tm);
    uv_close((uv_handle_t *)tm, lc__exit_wait_closed);
    lc__stop_watch(sb);
    lc__td_egress(t);
}

/* True if the parking waits for the process's exit (it goes on in lc__exit_wait_tick). */
static bool lc__exit_wait(struct lc_teardown *t)
{
    struct cp_sandbox *sb = t->sb;
    struct pollfd pf = {.fd = sb->pidfd, .events = POLLIN};
    if (sb->pidfd < 0 || poll(&pf, 1, 0) > 0)
        return false;
    struct lc_exit_wait *w = calloc(1, sizeof *w);
    if (!w)
        return false;
    w->t = t;
    w->deadline_ns = al_now_ns() + LC_EXIT_WAIT_MS * 1000000ull;
    uv_timer_init(sb->cp->loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, lc__exit_wait_tick, 5, 10);
    return true;
}

static void lc__td_stopped(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct lc_teardown *t = sb->opctx;
    struct cp *cp = sb->cp;
    if (rc)
        al_error("sandbox %s: stopping it failed: %s", sb->rec.id,
                 msg && *msg ? msg : strerror(-rc));
    sb->started = false;
    if (t->keep && lc__exit_wait(t))
        return;
    lc__stop_watch(sb);
    /* The files a pause kept go before the kill is answered. */
    if (!t->keep)
        lc__paused_remove(sb);
    if (t->op) {
        double ms = (double)(al_now_ns() - t->t0_ns) / 1e6;
        cp_metrics_killed(cp->metrics, ms);
        if (t->op->req) {
            if (rc)
                cp_rest_error(t->op->req, 500, "stopping sandbox %s failed: %s", sb->rec.id,
                              msg && *msg ? msg : strerror(-rc));
            else
                al_http_reply(t->op->req, 204, NULL, NULL, 0);
            t->op->req = NULL;
        }
    }
    lc__td_egress(t);
}

static void lc__td_backend(struct lc_teardown *t)
{
    struct cp_sandbox *sb = t->sb;
    struct cp *cp = sb->cp;
    int rc;
    if (!sb->started && !sb->gone && !sb->backend_attempted) {
        lc__td_stopped(sb, 0, NULL);
        return;
    }
    if (sb->gone || !sb->started)
        rc = cp->backend->cleanup(sb, lc__td_stopped);
    else
        rc = cp->backend->stop(sb, lc__td_stopped);
    if (rc)
        lc__td_stopped(sb, rc, "cannot ask the backend");
}

static void lc__td_kept(struct lc_teardown *t);

static void lc__paused_remove(const struct cp_sandbox *sb)
{
    char dir[4200];
    lc__paused_dir(sb, dir, sizeof dir);
    cp_take_away(sb->cp->loop, dir, "paused sandbox"); /* a sandbox's whole disk, maybe */
}

static void lc__td_forget(struct lc_teardown *t)
{
    struct cp_sandbox *sb = t->sb;
    struct cp *cp = sb->cp;
    struct al_error err = {0};
    if (t->keep) {
        lc__td_kept(t);
        return;
    }
    if (cp_store_sb_delete(cp->store, sb->rec.id, &err))
        al_error("sandbox %s: %s", sb->rec.id, al_error_str(&err));
    cp_transforms_drop(cp, sb->rec.network, NULL);
    if (sb->rec.started_ns) { /* it had been created: a failed creation never was */
        enum cp_event_cause cause = t->op ? t->op->cause : CP_CAUSE_CRASH;
        const char *key = t->op ? t->op->key_id : NULL;
        cp_event_emit(sb, CP_EV_KILLED, cause, key, NULL);
        cp_volumes_audit_mounts(cp, sb, false, key, cp_event_cause_name(cause), NULL, NULL);
    } else if (sb->mounts_audited) { /* its mounts are on record, its start failed */
        cp_volumes_audit_mounts(cp, sb, false, NULL, "create_failed", NULL, NULL);
    }
    lc__close_timer(sb);
    lc__stop_watch(sb);
    lc__unregister(sb);
    /* The versions of the template it may have run on may be needed by nothing any more. */
    cp_builds_gc(cp, sb->rec.template_id);
    if (t->create) {
        struct lc_create *c = t->create;
        lc__start_release(c);
        cp->n_creating--;
        cp_metrics_create_failed(cp->metrics);
        if (cp->n_creating == 0)
            cp_pools_refill(cp);
        const char *why = c->fail_msg[0] ? c->fail_msg : "the sandbox could not be created";
        if (c->done) {
            c->done(c->fail_status ? c->fail_status : 500, NULL, why, c->done_arg);
        } else if (sb->create_req) {
            cp_rest_error(sb->create_req, c->fail_status ? c->fail_status : 500, "%s", why);
            sb->create_req = NULL;
        }
        lc__create_free(c);
        cp_sb_unref(sb); /* the creation's reference */
    } else {
        al_info("sandbox %s: gone (%.1f ms to tear down)", sb->rec.id,
                (double)(al_now_ns() - t->t0_ns) / 1e6);
    }
    /* Operations still queued find nothing to act on. */
    struct cp_op *op = sb->ops;
    sb->ops = NULL;
    sb->ops_tail = &sb->ops;
    while (op) {
        struct cp_op *n = op->next;
        if (op->req)
            cp_rest_error(op->req, 404, "sandbox %s not found (it was killed)", sb->rec.id);
        if (op->done)
            op->done(sb, -ESRCH, op->done_arg);
        free(op);
        op = n;
    }
    if (t->op) {
        if (t->op->req)
            al_http_reply(t->op->req, 204, NULL, NULL, 0);
        free(t->op);
    }
    sb->opctx = NULL;
    sb->busy = false;
    if (t->done)
        t->done(sb, t->done_arg);
    free(t);
    cp_sb_unref(sb); /* the teardown's reference */
}

/* Tears a sandbox down; sb->busy must be set by the caller (op runner or create). */
static void lc__teardown_ex(struct cp_sandbox *sb, struct cp_op *op,
                            void (*done)(struct cp_sandbox *sb, void *arg), void *arg)
{
    struct lc_teardown *t = calloc(1, sizeof *t);
    if (!t) {
        al_error("sandbox %s: out of memory tearing it down", sb->rec.id);
        if (done)
            done(sb, arg);
        return;
    }
    t->sb = sb;
    t->op = op;
    t->done = done;
    t->done_arg = arg;
    t->t0_ns = al_now_ns();
    if (sb->opctx && !op)
        t->create = sb->opctx; /* a failed create */
    sb->opctx = t;
    cp_sb_ref(sb);
    lc__disarm_timer(sb);
    if (sb->rec.state != CP_SB_STOPPING) {
        sb->rec.state = CP_SB_STOPPING;
        cp_sb_save(sb);
    }
    lc__td_backend(t);
}

static void lc__teardown_op(struct cp_sandbox *sb, struct cp_op *op)
{
    lc__teardown_ex(sb, op, NULL, NULL);
}

static void lc__teardown(struct cp_sandbox *sb)
{
    lc__teardown_op(sb, NULL);
}

void cp_lifecycle_discard(struct cp_sandbox *sb, void (*done)(struct cp_sandbox *sb, void *arg),
                          void *arg)
{
    sb->busy = true;
    lc__teardown_ex(sb, NULL, done, arg);
}

/* ---- operations ------------------------------------------------------------------------- */

static void lc__op_finish(struct cp_sandbox *sb)
{
    struct cp_op *op = sb->opctx;
    sb->opctx = NULL;
    if (op && op->done) {
        /* Not running at the end (killed, failed): the waiter is told so. */
        op->done(sb, sb->rec.state == CP_SB_RUNNING ? 0 : -ESRCH, op->done_arg);
        op->done = NULL;
    }
    free(op);
    sb->busy = false;
    lc__run_ops(sb);
    cp_sb_unref(sb);
}

/* The "updated" event of a new expiry (E2B's eventData.set_timeout). */
static void lc__timeout_event(struct cp_sandbox *sb, int cause, const char *key_id)
{
    char ts[40];
    al_time_rfc3339(ts, sizeof ts, sb->rec.end_ns);
    cp_event_emit(sb, CP_EV_UPDATED, cause, key_id, json_pack("{s:s}", "set_timeout", ts));
}

static bool lc__fs_capable(const struct cp_sandbox *sb, char *why, size_t len);
static bool lc__paused_keep_files(struct cp_sandbox *sb);

static void lc__paused(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct cp_op *op = sb->opctx;
    if (rc) {
        al_warn("sandbox %s: pause failed: %s", sb->rec.id, msg && *msg ? msg : strerror(-rc));
        lc__answer_op(op, rc == -EALREADY ? 409 : 500, "pausing sandbox %s failed: %s", sb->rec.id,
                      msg && *msg ? msg : strerror(-rc));
        if (op->kind == CP_OP_EXPIRE && !sb->gone) {
            /* A sandbox that cannot be paused at its timeout is killed rather than left
             * running past it. */
            al_warn("sandbox %s: killing it instead (its timeout passed)", sb->rec.id);
            op->kind = CP_OP_KILL;
            sb->opctx = NULL;
            lc__teardown_op(sb, op); /* owns op now */
            cp_sb_unref(sb);
            return;
        }
    } else {
        sb->rec.state = CP_SB_PAUSED;
        lc__disarm_timer(sb);
        cp_sb_save(sb);
        cp_event_emit(sb, CP_EV_PAUSED, op->cause, op->key_id, NULL);
        al_info("sandbox %s paused", sb->rec.id);
        if (lc__paused_keep_files(sb))
            return; /* answered once its files are on disk */
        if (op->req) {
            al_http_reply(op->req, 204, NULL, NULL, 0);
            op->req = NULL;
        }
    }
    lc__op_finish(sb);
}

static void lc__paused_files_copied(struct cp_sandbox *sb, int rc, json_t *res, const char *msg,
                                    void *arg)
{
    (void)arg;
    if (rc) {
        lc__paused_remove(sb);
        al_warn("sandbox %s: its files could not be kept on disk (%s): it is paused in memory "
                "only, a restart of the host ends it",
                sb->rec.id, msg && *msg ? msg : strerror(-rc));
    } else {
        al_info("sandbox %s: its files are kept on disk too (%lld bytes) for a restart of the "
                "host",
                sb->rec.id,
                (long long)json_integer_value(
                    json_object_get(json_object_get(res, "copied"), "bytes")));
    }
    struct cp_op *op = sb->opctx;
    if (op->req) {
        al_http_reply(op->req, 204, NULL, NULL, 0); /* paused: that did not fail */
        op->req = NULL;
    }
    lc__op_finish(sb);
}

/* A pause with memory keeps the frozen sandbox's files on disk as well (jail): a restart of
 * the host ends its processes, and its resume is then a boot over these files, which are
 * exactly what it had (nothing of it ran after the pause). The pause is answered once they
 * are on disk, so that a 204 means the pause survives a restart of the host. True if the
 * copy was started. */
static bool lc__paused_keep_files(struct cp_sandbox *sb)
{
    struct cp *cp = sb->cp;
    char why[600], top[4200], dir[4200];
    if (sb->gone || !lc__fs_capable(sb, why, sizeof why))
        return false;
    if (!cp_disk_may_create(cp, why, sizeof why)) {
        al_warn("sandbox %s: paused in memory only (its files are not kept on disk: %s): a "
                "restart of the host ends it",
                sb->rec.id, why);
        return false;
    }
    snprintf(top, sizeof top, "%s/paused", cp->cfg.state_dir);
    if (mkdir(top, 0700) < 0 && errno != EEXIST) {
        al_warn("sandbox %s: cannot create %s: %s", sb->rec.id, top, strerror(errno));
        return false;
    }
    lc__paused_dir(sb, dir, sizeof dir);
    lc__paused_remove(sb);
    int rc = cp->backend->snapshot(sb, dir, lc__paused_files_copied, NULL);
    if (rc) {
        al_warn("sandbox %s: paused in memory only: %s", sb->rec.id, strerror(-rc));
        return false;
    }
    return true;
}

static void lc__resumed(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct cp_op *op = sb->opctx;
    if (rc) {
        lc__answer_op(op, 500, "resuming sandbox %s failed: %s", sb->rec.id,
                      msg && *msg ? msg : strerror(-rc));
    } else {
        sb->rec.state = CP_SB_RUNNING;
        uint64_t now = al_wall_ns();
        uint64_t t = op->timeout_s ? op->timeout_s : (sb->cp->cfg.default_timeout_ms + 999) / 1000;
        sb->rec.end_ns = now + t * 1000000000ull;
        if (op->kind == CP_OP_RESUME && op->api == CP_ANSWER_RESUME)
            sb->rec.on_timeout_pause = op->auto_pause || sb->rec.on_timeout_pause;
        cp_sb_save(sb);
        cp_event_emit(sb, CP_EV_RESUMED, op->cause, op->key_id, NULL);
        lc__arm_timer(sb);
        al_info("sandbox %s resumed", sb->rec.id);
        lc__paused_remove(sb); /* what a restart of the host would have needed */
        /* The egress proxy may have made a new CA meanwhile: its POST /init leaves for the
         * agent before the client hears that the sandbox runs. */
        cp_egress_ca_sync(sb);
        lc__answer(sb, op->req, op->api, 201);
        op->req = NULL;
    }
    lc__op_finish(sb);
}

/* ---- pause without memory: parking, and the boot that resumes it -------------------------
 *
 * E2B's pause {"memory": false}: only the sandbox's files are kept, in <state>/paused/<id>
 * (the backend's snapshot of its writable layer, complete or absent), and its processes,
 * memory, cgroups and network are released. Its record stays (id, tokens, metadata, network
 * fields, policy), so the same Sandbox object goes on working after its resume, which boots
 * it again over those files: its template's startCmd runs, as after a reboot. */

static void lc__paused_dir(const struct cp_sandbox *sb, char *out, size_t len)
{
    snprintf(out, len, "%s/paused/%s", sb->cp->cfg.state_dir, sb->rec.id);
}

/* Whether the backend can keep sb's files without its memory; else why not. */
static bool lc__fs_capable(const struct cp_sandbox *sb, char *why, size_t len)
{
    if (!sb->cp->backend->snapshot)
        snprintf(why, len, "the test backend keeps no files of a sandbox without its processes");
    else if (strcmp(sb->rec.backend, "jail") != 0)
        snprintf(why, len,
                 "a pause without memory exists for jail sandboxes only (a %s sandbox's pause "
                 "keeps its memory: pause it without \"memory\": false)",
                 sb->rec.backend);
    else
        return true;
    return false;
}

/* The op failed before anything changed: answer it; a timeout's pause kills instead. */
static void lc__pause_fs_failed(struct cp_sandbox *sb, struct cp_op *op, int status,
                                const char *why)
{
    al_warn("sandbox %s: %s without memory failed: %s", sb->rec.id,
            op->kind == CP_OP_RESUME ? "a reboot" : "a pause", why);
    lc__answer_op(op, status, "%s sandbox %s without its memory failed: %s",
                  op->kind == CP_OP_RESUME ? "rebooting" : "pausing", sb->rec.id, why);
    if (op->kind == CP_OP_EXPIRE && !sb->gone) {
        al_warn("sandbox %s: killing it instead (its timeout passed)", sb->rec.id);
        op->kind = CP_OP_KILL;
        sb->opctx = NULL;
        lc__teardown_op(sb, op);
        cp_sb_unref(sb);
        return;
    }
    lc__op_finish(sb);
}

static void lc__pause_fs_copied(struct cp_sandbox *sb, int rc, json_t *res, const char *msg,
                                void *arg)
{
    (void)arg;
    struct cp_op *op = sb->opctx;
    if (rc) {
        lc__paused_remove(sb); /* nothing of a failed copy is kept */
        lc__pause_fs_failed(sb, op, rc == -EALREADY ? 409 : 500, msg && *msg ? msg : strerror(-rc));
        return;
    }
    json_int_t bytes = json_integer_value(json_object_get(json_object_get(res, "copied"), "bytes"));
    al_info("sandbox %s: its files are kept (%lld bytes, frozen %.1f ms): releasing its "
            "processes and network",
            sb->rec.id, (long long)bytes, json_number_value(json_object_get(res, "frozen_ms")));
    /* Saved before anything is stopped: from here on a crash leaves a parked sandbox (a
     * restart completes its parking), never a dead one. */
    sb->rec.state = CP_SB_PAUSED;
    sb->rec.paused_fs = true;
    lc__disarm_timer(sb);
    cp_sb_save(sb);
    lc__park(sb, op, NULL);
}

/* A pause without memory (op: CP_OP_PAUSE, CP_OP_EXPIRE with autoPauseMemory: false) or the
 * reboot of a memory pause (CP_OP_RESUME with memory false: its files are kept, then it
 * boots). */
static void lc__pause_fs(struct cp_sandbox *sb, struct cp_op *op)
{
    struct cp *cp = sb->cp;
    char why[600];
    if (!lc__fs_capable(sb, why, sizeof why)) {
        lc__pause_fs_failed(sb, op, 501, why);
        return;
    }
    if (sb->gone) {
        lc__pause_fs_failed(sb, op, 409, "its process has ended");
        return;
    }
    /* A copy of up to its disk size: the disk reserve refuses it as it refuses creations. */
    if (!cp_disk_may_create(cp, why, sizeof why)) {
        lc__pause_fs_failed(sb, op, 503, why);
        return;
    }
    char top[4200], dir[4200];
    snprintf(top, sizeof top, "%s/paused", cp->cfg.state_dir);
    if (mkdir(top, 0700) < 0 && errno != EEXIST) {
        snprintf(why, sizeof why, "cannot create %s: %s", top, strerror(errno));
        lc__pause_fs_failed(sb, op, 500, why);
        return;
    }
    lc__paused_dir(sb, dir, sizeof dir);
    lc__paused_remove(sb); /* left by an earlier pause that did not complete */
    int rc = cp->backend->snapshot(sb, dir, lc__pause_fs_copied, NULL);
    if (rc) {
        snprintf(why, sizeof why, "the backend refused: %s", strerror(-rc));
        lc__pause_fs_failed(sb, op, 500, why);
    }
}

/* The teardown's steps but its end (lc__td_kept instead of lc__td_forget): its processes,
 * egress registration and network go, its row stays. op is the operation it is part of; c a
 * failed boot being undone (its resume is answered with its error), or NULL. */
static void lc__park(struct cp_sandbox *sb, struct cp_op *op, struct lc_create *c)
{
    struct lc_teardown *t = calloc(1, sizeof *t);
    if (!t) {
        /* Left as it is: a restart parks it (its record says paused_fs). */
        al_error("sandbox %s: out of memory parking it", sb->rec.id);
        if (c) {
            lc__start_release(c);
            lc__create_free(c);
        }
        sb->opctx = op;
        lc__answer_op(op, 500, "out of memory");
        lc__op_finish(sb);
        return;
    }
    t->sb = sb;
    t->keep = op;
    t->create = c;
    t->t0_ns = al_now_ns();
    sb->opctx = t;
    sb->parking = true;
    cp_sb_ref(sb);
    lc__td_backend(t);
}

static void lc__boot(struct cp_sandbox *sb, struct cp_op *op);

static void lc__td_kept(struct lc_teardown *t)
{
    struct cp_sandbox *sb = t->sb;
    struct cp_op *op = t->keep;
    struct lc_create *c = t->create;
    sb->parking = false;
    sb->gone = false;
    sb->started = false;
    sb->backend_attempted = false;
    sb->rec.state = CP_SB_PAUSED;
    sb->rec.paused_fs = true;
    sb->rec.pid = 0;
    sb->rec.pid_start = 0;
    sb->rec.addr[0] = '\0';
    cp_sb_save(sb);
    sb->opctx = op;
    double ms = (double)(al_now_ns() - t->t0_ns) / 1e6;
    free(t);
    if (c) {
        /* A boot that failed: the sandbox stays paused; its resume may be tried again. */
        lc__start_release(c);
        lc__answer_op(op, c->fail_status ? c->fail_status : 500,
                      "resuming sandbox %s failed: %s (it stays paused: its files are kept)",
                      sb->rec.id, c->fail_msg[0] ? c->fail_msg : "its boot failed");
        lc__create_free(c);
    } else if (op->kind == CP_OP_RESUME) {
        lc__boot(sb, op); /* a reboot: its files are kept, its memory is gone */
        cp_sb_unref(sb);
        return;
    } else if (op->kind == CP_OP_PARK) {
        al_info("sandbox %s: parked (its files kept, no process)", sb->rec.id);
        if (sb->cp->stopping) {
            /* airlockd's stop: the next airlockd finds it paused (cp_lifecycle_kill_all). */
            lc__op_finish(sb);
            lc__close_timer(sb);
            lc__unregister(sb);
            cp_sb_unref(sb);
            return;
        }
    } else {
        cp_event_emit(sb, CP_EV_PAUSED, op->cause, op->key_id, json_pack("{s:b}", "memory", 0));
        al_info("sandbox %s paused without memory (%.1f ms to release it)", sb->rec.id, ms);
        if (op->req) {
            al_http_reply(op->req, 204, NULL, NULL, 0);
            op->req = NULL;
        }
    }
    lc__op_finish(sb);
    cp_sb_unref(sb); /* the parking's reference */
}

/* Resumes a parked sandbox: a creation's steps over its record, with its kept files. */
static void lc__boot(struct cp_sandbox *sb, struct cp_op *op)
{
    struct cp *cp = sb->cp;
    struct al_error err = {0};
    struct lc_create *c = calloc(1, sizeof *c);
    if (!c) {
        lc__answer_op(op, 500, "out of memory");
        lc__op_finish(sb);
        return;
    }
    c->sb = sb;
    c->resume = op;
    /* The version of its template it was created on (kept while it exists). */
    char ref[CP_TEMPLATE_MAX + 48], id[CP_TEMPLATE_MAX], tag[72];
    if (!sb->rec.template_build[0])
        snprintf(ref, sizeof ref, "%s", sb->rec.template_id);
    else if (cp_template_ref_split(sb->rec.template_id, id, sizeof id, tag, sizeof tag) == 0)
        snprintf(ref, sizeof ref, "%s:%s", id, sb->rec.template_build);
    else
        snprintf(ref, sizeof ref, "%s:%s", sb->rec.template_id, sb->rec.template_build);
    int status = 0;
    if (cp_template_resolve_build(cp, ref, c->template_dir, sizeof c->template_dir,
                                  c->template_build, sizeof c->template_build, &err))
        status = 409;
    else if (lc__template_cmds(c, &err))
        status = 500;
    lc__paused_dir(sb, c->restore_dir, sizeof c->restore_dir);
    if (!status && access(c->restore_dir, F_OK) < 0) {
        status = 500;
        al_error_set(&err, -errno, "its kept files (%s) are missing: %s", c->restore_dir,
                     strerror(errno));
    }
    if (status) {
        lc__answer_op(op, status, "resuming sandbox %s failed: %s (it stays paused)", sb->rec.id,
                      al_error_str(&err));
        lc__create_free(c);
        lc__op_finish(sb);
        return;
    }
    c->env_vars = json_object();
    c->timeout_s = op->timeout_s ? op->timeout_s : (cp->cfg.default_timeout_ms + 999) / 1000;
    sb->opctx = c;
    sb->create_t0_ns = sb->create_mark_ns = al_now_ns();
    memset(sb->create_stage_ms, 0, sizeof sb->create_stage_ms);
    al_info("sandbox %s: booting it over its kept files (a resume of a pause without memory)",
            sb->rec.id);
    lc__create_network(c);
}

static void lc__boot_done(struct lc_create *c)
{
    struct cp_sandbox *sb = c->sb;
    struct cp_op *op = c->resume;
    uint64_t now = al_wall_ns();
    sb->rec.state = CP_SB_RUNNING;
    sb->rec.paused_fs = false;
    sb->rec.end_ns = now + c->timeout_s * 1000000000ull;
    if (op->api == CP_ANSWER_RESUME)
        sb->rec.on_timeout_pause = op->auto_pause || sb->rec.on_timeout_pause;
    if (sb->rec.intercept) {
        if (c->ca_fp[0])
            json_object_set_new(sb->rec.intercept, "agentCaFingerprint", json_string(c->ca_fp));
        else
            json_object_del(sb->rec.intercept, "agentCaFingerprint");
    }
    cp_sb_save(sb);
    lc__paused_remove(sb); /* copied into the sandbox: a next pause keeps its files anew */
    cp_event_emit(sb, CP_EV_RESUMED, op->cause, op->key_id, json_pack("{s:b}", "memory", 0));
    lc__arm_timer(sb);
    lc__watch(sb);
    const double *st = sb->create_stage_ms;
    al_info("sandbox %s resumed by a boot in %.1f ms (network %.1f, egress %.1f, queue %.1f, "
            "start %.1f ms)",
            sb->rec.id, (double)(al_now_ns() - sb->create_t0_ns) / 1e6, st[CP_CREATE_NETWORK],
            st[CP_CREATE_EGRESS], st[CP_CREATE_QUEUE], st[CP_CREATE_START]);
    cp_egress_ca_sync(sb);
    lc__answer(sb, op->req, op->api, 201);
    op->req = NULL;
    sb->opctx = op;
    lc__create_free(c);
    lc__op_finish(sb);
}

static void lc__run_op(struct cp_sandbox *sb, struct cp_op *op)
{
    struct cp *cp = sb->cp;
    int rc = 0;
    sb->busy = true;
    sb->opctx = op;
    cp_sb_ref(sb);
    if (sb->rec.state == CP_SB_STOPPING && op->kind != CP_OP_KILL) {
        lc__answer_op(op, 404, "sandbox %s not found (it is being killed)", sb->rec.id);
        lc__op_finish(sb);
        return;
    }
    switch (op->kind) {
    case CP_OP_EXPIRE:
        if (sb->rec.state != CP_SB_RUNNING || al_wall_ns() < sb->rec.end_ns) {
            /* Paused meanwhile, or the timeout was extended: nothing to do. */
            if (sb->rec.state == CP_SB_RUNNING)
                lc__arm_timer(sb);
            lc__op_finish(sb);
            return;
        }
        if (sb->rec.on_timeout_pause && !sb->gone) {
            al_info("sandbox %s: timeout reached: pausing it (autoPause%s)", sb->rec.id,
                    sb->rec.auto_pause_fs ? ", without memory" : "");
            if (sb->rec.auto_pause_fs) {
                lc__pause_fs(sb, op);
                return;
            }
            rc = cp->backend->pause(sb, lc__paused);
            break;
        }
        al_info("sandbox %s: timeout reached: killing it", sb->rec.id);
        op->kind = CP_OP_KILL;
        /* fall through */
    case CP_OP_KILL:
        sb->opctx = NULL;
        lc__teardown_op(sb, op);
        cp_sb_unref(sb);
        return;
    case CP_OP_PAUSE:
        if (sb->rec.state == CP_SB_PAUSED) {
            lc__answer_op(op, 409, "sandbox %s is already paused", sb->rec.id);
            lc__op_finish(sb);
            return;
        }
        if (op->memory == 0) {
            lc__pause_fs(sb, op);
            return;
        }
        rc = cp->backend->pause(sb, lc__paused);
        break;
    case CP_OP_PARK:
        lc__park(sb, op, NULL);
        return;
    case CP_OP_RESUME:
        if (sb->rec.state == CP_SB_RUNNING) {
            if (op->api == CP_ANSWER_RESUME) {
                lc__answer_op(op, 409, "sandbox %s is already running", sb->rec.id);
            } else {
                /* connect to a running sandbox: its lifetime is extended, never shortened. */
                uint64_t t =
                    op->timeout_s ? op->timeout_s : (cp->cfg.default_timeout_ms + 999) / 1000;
                uint64_t end = al_wall_ns() + t * 1000000000ull;
                if (end > sb->rec.end_ns) {
                    sb->rec.end_ns = end;
                    cp_sb_save(sb);
                    lc__arm_timer(sb);
                    lc__timeout_event(sb, op->cause, op->key_id);
                }
                lc__answer(sb, op->req, op->api, 200);
                op->req = NULL;
            }
            lc__op_finish(sb);
            return;
        }
        if (sb->rec.paused_fs && op->cause == CP_CAUSE_TRAFFIC) {
            /* (proxy.c refuses first; this is for a wake queued before the pause) */
            al_info("sandbox %s: not resumed by traffic: it was paused without memory", sb->rec.id);
            lc__op_finish(sb);
            return;
        }
        if (sb->rec.paused_fs) {
            lc__boot(sb, op);
            return;
        }
        if (op->memory == 0) {
            lc__pause_fs(sb, op); /* onResume: 'reboot': its files, then a boot */
            return;
        }
        rc = cp->backend->resume(sb, lc__resumed);
        break;
    case CP_OP_SNAPSHOT:
        cp_snapshot_run(sb, op, lc__op_finish);
        return;
    case CP_OP_ROLLBACK:
        cp_rollback_run(sb, op, lc__op_finish);
        return;
    case CP_OP_FORK:
        cp_fork_run(sb, op, lc__op_finish);
        return;
    }
    if (rc) {
        lc__answer_op(op, 500, "sandbox %s: the backend refused: %s", sb->rec.id, strerror(-rc));
        lc__op_finish(sb);
    }
}

static void lc__run_ops(struct cp_sandbox *sb)
{
    if (sb->busy || !sb->ops || !sb->registered)
        return;
    struct cp_op *op = sb->ops;
    sb->ops = op->next;
    if (!sb->ops)
        sb->ops_tail = &sb->ops;
    op->next = NULL;
    lc__run_op(sb, op);
}

static void lc__enqueue(struct cp_sandbox *sb, struct cp_op *op)
{
    if (op->kind == CP_OP_KILL) {
        /* A kill overtakes queued pauses and resumes (they are answered 404 when it is done):
         * it goes first in the queue. */
        op->next = sb->ops;
        sb->ops = op;
        if (sb->ops_tail == &sb->ops)
            sb->ops_tail = &op->next;
    } else {
        *sb->ops_tail = op;
        sb->ops_tail = &op->next;
    }
    lc__run_ops(sb);
}

void cp_lifecycle_snapshot(struct cp_sandbox *sb, enum cp_op_kind kind, struct al_http_req *req,
                           const char *name, const char *key_id)
{
    struct cp_op *op = calloc(1, sizeof *op);
    if (!op) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    op->kind = kind;
    op->req = req;
    op->cause = CP_CAUSE_API;
    snprintf(op->key_id, sizeof op->key_id, "%s", key_id ? key_id : "");
    snprintf(op->name, sizeof op->name, "%s", name);
    lc__enqueue(sb, op);
}

void cp_lifecycle_fork(struct cp_sandbox *sb, struct al_http_req *req, unsigned count,
                       bool timeout_given, uint64_t timeout_s, const struct cp_principal *who)
{
    struct cp_op *op = calloc(1, sizeof *op);
    if (!op) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    op->kind = CP_OP_FORK;
    op->req = req;
    op->cause = CP_CAUSE_API;
    op->count = count;
    op->timeout_given = timeout_given;
    op->timeout_s = timeout_s;
    snprintf(op->key_id, sizeof op->key_id, "%s", who->key_id);
    snprintf(op->policies, sizeof op->policies, "%s", who->policies);
    lc__enqueue(sb, op);
}

static void lc__op_queue(struct cp_sandbox *sb, enum cp_op_kind kind, const struct cp_op_args *a,
                         int cause)
{
    struct al_http_req *req = a->req;
    uint64_t timeout_s = a->timeout_s;
    if (sb->rec.state == CP_SB_STOPPING && req) {
        cp_rest_error(req, 404, "sandbox %s not found (it is being killed)", sb->rec.id);
        return;
    }
    if (timeout_s * 1000 > sb->cp->cfg.max_timeout_ms) {
        if (req)
            cp_rest_error(req, 400, "timeout %llu s is longer than this server allows (%llu s)",
                          (unsigned long long)timeout_s,
                          (unsigned long long)(sb->cp->cfg.max_timeout_ms / 1000));
        return;
    }
    struct cp_op *op = calloc(1, sizeof *op);
    if (!op) {
        if (req)
            cp_rest_error(req, 500, "out of memory");
        return;
    }
    op->kind = kind;
    op->req = req;
    op->api = a->api;
    op->timeout_s = timeout_s;
    op->auto_pause = a->auto_pause;
    op->memory = a->memory;
    op->cause = cause;
    snprintf(op->key_id, sizeof op->key_id, "%s", a->key_id ? a->key_id : "");
    lc__enqueue(sb, op);
}

void cp_lifecycle_op(struct cp_sandbox *sb, enum cp_op_kind kind, struct al_http_req *req, int api,
                     uint64_t timeout_s, bool auto_pause, int cause, const char *key_id)
{
    struct cp_op_args a = {.req = req,
                           .api = api,
                           .timeout_s = timeout_s,
                           .auto_pause = auto_pause,
                           .memory = -1,
                           .key_id = key_id};
    lc__op_queue(sb, kind, &a, cause);
}

void cp_lifecycle_api_op(struct cp_sandbox *sb, enum cp_op_kind kind, const struct cp_op_args *a)
{
    lc__op_queue(sb, kind, a, CP_CAUSE_API);
}

static void lc__expired(uv_timer_t *t)
{
    struct cp_sandbox *sb = t->data;
    if (sb->rec.state != CP_SB_RUNNING)
        return;
    if (al_wall_ns() + 1000000 < sb->rec.end_ns) {
        lc__arm_timer(sb); /* extended meanwhile (or the wall clock moved) */
        return;
    }
    cp_lifecycle_op(sb, CP_OP_EXPIRE, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_TIMEOUT, NULL);
}

void cp_lifecycle_resume_then(struct cp_sandbox *sb,
                              void (*done)(struct cp_sandbox *sb, int rc, void *arg), void *arg)
{
    struct cp_op *op = calloc(1, sizeof *op);
    if (!op) {
        done(sb, -ENOMEM, arg);
        return;
    }
    op->kind = CP_OP_RESUME;
    op->api = CP_ANSWER_CONNECT;
    op->memory = -1;
    op->cause = CP_CAUSE_TRAFFIC;
    op->done = done;
    op->done_arg = arg;
    *sb->ops_tail = op;
    sb->ops_tail = &op->next;
    lc__run_ops(sb);
}

void cp_lifecycle_set_timeout(struct cp_sandbox *sb, uint64_t seconds, const char *key_id)
{
    sb->rec.end_ns = al_wall_ns() + seconds * 1000000000ull;
    cp_sb_save(sb);
    if (sb->rec.state == CP_SB_RUNNING)
        lc__arm_timer(sb);
    lc__timeout_event(sb, CP_CAUSE_API, key_id);
}

/* ---- adoption after a restart ------------------------------------------------------------ */

struct lc_adopt_all {
    struct cp *cp;
    size_t pending;
    size_t adopted, torn_down;
    bool listing_done;
    void (*done)(struct cp *cp);
};

static void lc__adopt_one_done(struct lc_adopt_all *a)
{
    if (--a->pending > 0 || !a->listing_done)
        return;
    struct cp *cp = a->cp;
    cp->adopting = false;
    al_info("re-adoption: %zu sandbox%s adopted, %zu torn down", a->adopted,
            a->adopted == 1 ? "" : "es", a->torn_down);
    void (*done)(struct cp *) = a->done;
    free(a);
    if (done)
        done(cp);
}

struct lc_adopt_ctx {
    struct lc_adopt_all *all;
};

static void lc__adopted(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct lc_adopt_ctx *c = sb->opctx;
    struct lc_adopt_all *a = c->all;
    struct cp *cp = sb->cp;
    sb->opctx = NULL;
    sb->busy = false;
    /* Parked, its parking (or a boot of it) cut short by the restart: whatever runs of it
     * is stopped, whatever is left is reclaimed, its files stay. */
    char kept[4200];
    lc__paused_dir(sb, kept, sizeof kept);
    if (rc && sb->rec.state == CP_SB_PAUSED && !sb->rec.paused_fs && access(kept, F_OK) == 0) {
        /* Paused with its memory, which is gone (the host restarted): its files are what
         * it had at its pause; its resume boots it over them. */
        al_warn("sandbox %s: its processes ended while it was paused with its memory (%s): "
                "its memory is lost; its files, as they were at its pause, are kept and its "
                "resume boots it over them",
                sb->rec.id, msg && *msg ? msg : strerror(-rc));
        sb->rec.paused_fs = true;
        cp_sb_save(sb);
    }
    bool park = sb->rec.paused_fs;
    if (park) {
        sb->rec.state = CP_SB_PAUSED;
        sb->gone = rc != 0;
        al_info("sandbox %s: paused without memory, but %s: completing its parking", sb->rec.id,
                rc ? "it left resources behind" : "a process of it runs");
    }
    if (rc && !park) {
        al_warn("sandbox %s: not running any more (%s): reclaiming what it left", sb->rec.id,
                msg && *msg ? msg : strerror(-rc));
        sb->gone = true;
        a->torn_down++;
        free(c);
        cp_lifecycle_op(sb, CP_OP_KILL, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_RESTART, NULL);
        lc__adopt_one_done(a);
        cp_sb_unref(sb);
        return;
    }
    sb->started = rc == 0;
    if (sb->rec.addr[0] && cp->net) {
        struct cp_net n;
        if (cp->net->find(cp->net_priv, sb->rec.seq, &n) == 0) {
            sb->has_net = true;
            sb->net = n;
            sb->net.netns_fd = -1;
            sb->net.tap_fd = -1;
        } else {
            al_error("sandbox %s: the vswitch has no network for it any more: it has no "
                     "egress (kill it and create a new one)",
                     sb->rec.id);
        }
    }
    /* The registration is checked against the proxy's list by the resync that follows. */
    sb->egress_registered = sb->has_net && cp->egress;
    if (park)
        cp_lifecycle_op(sb, CP_OP_PARK, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_RESTART, NULL);
    else
        lc__watch(sb);
    if (sb->rec.state == CP_SB_RUNNING)
        lc__arm_timer(sb);
    cp_sb_save(sb);
    cp_event_emit(sb, CP_EV_UPDATED, CP_CAUSE_RESTART, NULL,
                  json_pack("{s:b,s:s}", "adopted", 1, "state", cp_sb_state_name(sb->rec.state)));
    a->adopted++;
    al_info("sandbox %s adopted (%s, process %d)", sb->rec.id, cp_sb_state_name(sb->rec.state),
            (int)sb->rec.pid);
    /* airlockd may have died between a new registration and the agent's new CA. */
    cp_egress_ca_sync(sb);
    free(c);
    lc__run_ops(sb);
    lc__adopt_one_done(a);
    cp_sb_unref(sb);
}

static int lc__adopt_row(const struct cp_sb_record *r, void *arg)
{
    struct lc_adopt_all *a = arg;
    struct cp *cp = a->cp;
    struct cp_sandbox *sb = cp_sb_new(cp);
    if (!sb)
        return -ENOMEM;
    cp_sb_record_free(&sb->rec); /* cp_sb_new's empty metadata: the copy replaces it */
    cp_sb_record_copy(&sb->rec, r);
    if (lc__register(sb)) {
        al_error("sandbox %s: listed twice in the state database", r->id);
        cp_sb_unref(sb);
        return 0;
    }
    cp_sb_unref(sb); /* the registry's reference remains */
    if (strcmp(r->backend, cp->backend_kind) != 0)
        al_warn("sandbox %s was started by the %s backend; this airlockd uses %s", r->id,
                r->backend, cp->backend_kind);
    a->pending++;
    if (r->state == CP_SB_CREATING || r->state == CP_SB_STOPPING) {
        al_info("sandbox %s was %s when airlockd stopped: tearing it down", r->id,
                r->state == CP_SB_CREATING ? "being created" : "being killed");
        sb->gone = true; /* whatever runs gets the crash cleanup */
        a->torn_down++;
        cp_lifecycle_op(sb, CP_OP_KILL, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_RESTART, NULL);
        a->pending--;
        return 0;
    }
    if (r->state == CP_SB_PAUSED && r->paused_fs && !r->pid && !r->addr[0]) {
        /* Parked: nothing of it runs; its files wait in <state>/paused for its resume. */
        a->adopted++;
        a->pending--;
        cp_event_emit(sb, CP_EV_UPDATED, CP_CAUSE_RESTART, NULL,
                      json_pack("{s:b,s:s,s:b}", "adopted", 1, "state", "paused", "memory", 0));
        al_info("sandbox %s adopted (paused without memory)", r->id);
        return 0;
    }
    struct lc_adopt_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->all = a;
    sb->busy = true;
    sb->opctx = c;
    cp_sb_ref(sb);
    int rc = cp->backend->adopt(sb, lc__adopted);
    if (rc)
        lc__adopted(sb, rc, "the backend cannot adopt it");
    return 0;
}

static void lc__adopt_bad(const char *id, const char *why, void *arg)
{
    (void)arg;
    al_error("state database: sandbox %s cannot be read (%s): it is ignored; remove it with "
             "sqlite3 if it is not needed",
             id, why);
}

static bool lc__paused_recorded(const char *name, void *arg)
{
    return cp_sandbox_id_valid(name) && cp_sandbox_get(arg, name);
}

/* The kept files of sandboxes the store does not name any more (killed while airlockd was
 * removing them, or a pause that never completed) go. Every row is in the registry now. */
static void lc__paused_sweep(struct cp *cp)
{
    char top[4200];
    snprintf(top, sizeof top, "%s/paused", cp->cfg.state_dir);
    cp_sweep_dir(top,
                 &(struct cp_sweep){.what = "sandbox", .recorded = lc__paused_recorded, .arg = cp});
}

void cp_lifecycle_adopt_all(struct cp *cp, void (*done)(struct cp *cp))
{
    struct lc_adopt_all *a = calloc(1, sizeof *a);
    if (!a) {
        al_error("out of memory");
        if (done)
            done(cp);
        return;
    }
    a->cp = cp;
    a->done = done;
    a->pending = 1; /* the listing itself */
    cp->adopting = true;
    struct al_error err = {0};
    if (cp_store_sb_foreach(cp->store, lc__adopt_row, lc__adopt_bad, a, &err))
        al_error("re-adoption: %s", al_error_str(&err));
    lc__paused_sweep(cp);
    a->listing_done = true;
    lc__adopt_one_done(a);
}

/* ---- shutdown ------------------------------------------------------------------------------ */

struct lc_kill_all {
    struct cp *cp;
    void (*done)(struct cp *cp);
    uv_timer_t poll;
};

static void lc__kill_all_closed(uv_handle_t *h)
{
    struct lc_kill_all *k = h->data;
    void (*done)(struct cp *) = k->done;
    struct cp *cp = k->cp;
    free(k);
    if (done)
        done(cp);
}

static void lc__kill_all_poll(uv_timer_t *t)
{
    struct lc_kill_all *k = t->data;
    if (k->cp->n_live > 0)
        return;
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, lc__kill_all_closed);
}

struct lc_collect {
    struct cp_sandbox **v;
    size_t n;
};

static int lc__collect(void *v, void *arg)
{
    struct lc_collect *c = arg;
    struct cp_sandbox *sb = v;
    cp_sb_ref(sb);
    c->v[c->n++] = sb;
    return 0;
}

void cp_lifecycle_kill_all(struct cp *cp, void (*done)(struct cp *cp))
{
    struct lc_kill_all *k = calloc(1, sizeof *k);
    struct lc_collect c = {.v = calloc(cp_map_count(&cp->sandboxes) + 1, sizeof *c.v)};
    if (!k || !c.v) {
        free(k);
        free(c.v);
        if (done)
            done(cp);
        return;
    }
    k->cp = cp;
    k->done = done;
    /* Collect first: a kill may change the registry before the walk is over. */
    cp_map_foreach(&cp->sandboxes, lc__collect, &c);
    for (size_t i = 0; i < c.n; i++) {
        struct cp_sandbox *sb = c.v[i];
        char kept[4200];
        lc__paused_dir(sb, kept, sizeof kept);
        if (!sb->registered) {
        } else if (sb->rec.state == CP_SB_PAUSED && sb->rec.paused_fs && !sb->busy) {
            /* Paused without memory: nothing of it runs; its row and files stay for the next
             * airlockd (a paused sandbox outlives a stop of the host, as E2B's do). */
            lc__close_timer(sb);
            lc__unregister(sb);
        } else if (sb->rec.state == CP_SB_PAUSED && access(kept, F_OK) == 0) {
            /* Paused with its memory, its files on disk: its processes stop, its files stay;
             * the next airlockd resumes it by a boot over them (its memory is lost). Queued:
             * an operation of it in progress finishes first. */
            al_info("sandbox %s: paused with its memory: airlockd stops, so its memory is "
                    "lost; its files are kept for its resume",
                    sb->rec.id);
            sb->rec.paused_fs = true;
            cp_sb_save(sb);
            cp_lifecycle_op(sb, CP_OP_PARK, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_SHUTDOWN,
                            NULL);
        } else {
            cp_lifecycle_op(sb, CP_OP_KILL, NULL, CP_ANSWER_NONE, 0, false, CP_CAUSE_SHUTDOWN,
                            NULL);
        }
        cp_sb_unref(sb);
    }
    free(c.v);
    uv_timer_init(cp->loop, &k->poll);
    k->poll.data = k;
    uv_timer_start(&k->poll, lc__kill_all_poll, 0, 20);
}

void cp_lifecycle_detach_all(struct cp *cp)
{
    /* Forget every sandbox without touching it: the next airlockd re-adopts it. */
    struct lc_collect c = {.v = calloc(cp_map_count(&cp->sandboxes) + 1, sizeof *c.v)};
    if (!c.v)
        return;
    cp_map_foreach(&cp->sandboxes, lc__collect, &c);
    for (size_t i = 0; i < c.n; i++) {
        struct cp_sandbox *sb = c.v[i];
        lc__close_timer(sb);
        lc__stop_watch_ex(sb, false);
        lc__unregister(sb);
        cp_sb_unref(sb);
    }
    free(c.v);
}
