/* controlplane/buildsb: see buildsb.h. */
#include "buildsb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/auditlog.h"
#include "common/http.h"
#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "egressreg.h"
#include "ids.h"
#include "policysel.h"
#include "store.h"

#define BUILDSB_OUTPUT_MAX (4u << 20) /* one undecoded message of the agent's stream */

struct buildsb {
    struct cp *cp;
    struct cp_sandbox *sb;
    struct cp_buildsb_step s;
    char dir[4300], user[256], cwd[4200], snapshot[4400], tid[72], bid[40];
    char *script;
    json_t *env;
    uv_work_t work;
    int work_rc;
    struct al_error work_err;
    uv_timer_t timer;
    struct al_http_creq *creq;
    struct al_envd_stream stream;
    unsigned char *body;
    size_t body_len;
    char auth[600];
    bool starting, finishing;
    int abort_rc; /* the time bound ran out, or airlockd stops: the step ends at its next stage */
    char abort_msg[200];
    struct buildsb *next; /* bsb__live */
    int rc, exit_code;
    char msg[1024];
    char deny[300]; /* the first egress refusal of a failed step */
    json_t *snap;
};

static void bsb__finish(struct buildsb *x, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The steps under way (airlockd's stop ends them and waits for their sandboxes). */
static struct buildsb *bsb__live;
static size_t bsb__n_live;
static void (*bsb__stopped)(struct cp *cp);

static void bsb__free(struct buildsb *x)
{
    for (struct buildsb **p = &bsb__live; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            bsb__n_live--;
            break;
        }
    al_envd_stream_free(&x->stream);
    free(x->body);
    free(x->script);
    json_decref(x->env);
    json_decref(x->snap);
    free(x);
}

static void bsb__timer_closed(uv_handle_t *h)
{
    struct buildsb *x = h->data;
    struct cp *cp = x->cp;
    x->s.done(x->s.arg, x->rc, x->exit_code, x->snap, x->msg);
    bsb__free(x);
    if (bsb__stopped && !bsb__n_live) {
        void (*then)(struct cp *) = bsb__stopped;
        bsb__stopped = NULL;
        then(cp);
    }
}

/* Ends the step when its time ran out or airlockd stops (at the stage it is in); true if
 * it was. */
static bool bsb__aborted(struct buildsb *x)
{
    if (!x->abort_rc)
        return false;
    bsb__finish(x, x->abort_rc, "%s", x->abort_msg);
    return true;
}

static void bsb__discarded(struct cp_sandbox *sb, void *arg)
{
    struct buildsb *x = arg;
    (void)sb;
    uv_close((uv_handle_t *)&x->timer, bsb__timer_closed);
}

/* The end of the step, whatever it was: the sandbox goes, then done runs. */
static void bsb__finish(struct buildsb *x, int rc, const char *fmt, ...)
{
    if (x->finishing)
        return;
    x->finishing = true;
    uv_timer_stop(&x->timer);
    x->rc = rc;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->msg, sizeof x->msg, fmt, ap);
        va_end(ap);
    }
    struct cp_sandbox *sb = x->sb;
    sb->build_step = NULL;
    cp_lifecycle_discard(sb, bsb__discarded, x);
    cp_sb_unref(sb); /* ours (the teardown holds its own) */
}

static void bsb__snapped(struct cp_sandbox *sb, int rc, json_t *res, const char *msg, void *arg)
{
    struct buildsb *x = arg;
    (void)sb;
    if (rc) {
        bsb__finish(x, rc, "taking the step's files: %s", msg && *msg ? msg : strerror(-rc));
        return;
    }
    x->snap = json_incref(res);
    bsb__finish(x, 0, NULL);
}

static int bsb__resp(struct al_http_creq *c, int status, const struct al_http_header *h, size_t n,
                     void *arg)
{
    struct buildsb *x = arg;
    (void)c;
    (void)h;
    (void)n;
    x->stream.status = status;
    return 0;
}

static int bsb__data(struct al_http_creq *c, const char *d, size_t len, void *arg)
{
    (void)c;
    struct buildsb *x = arg;
    return al_envd_stream_feed(&x->stream, d, len) ? -1 : 0;
}

static void bsb__synced(struct cp_sandbox *sb, int rc, const char *msg);

static void bsb__ran(struct al_http_creq *c, int err, void *arg)
{
    struct buildsb *x = arg;
    struct al_envd_stream *st = &x->stream;
    x->creq = NULL;
    if (bsb__aborted(x))
        return;
    if (err && !st->ended) {
        bsb__finish(x, err, "the build sandbox's agent: %s", al_http_creq_strerror(c));
        return;
    }
    if (st->status != 200) {
        bsb__finish(x, -EPROTO, "the build sandbox's agent answered %d: %.300s", st->status,
                    st->buf.data ? st->buf.data : "");
        return;
    }
    if (!st->ended) {
        bsb__finish(x, -EPROTO, "the command did not report an end%s%s", st->error[0] ? ": " : "",
                    st->error);
        return;
    }
    x->exit_code = st->exit_code;
    struct cp *cp = x->cp;
    if (st->exit_code != 0) {
        snprintf(x->msg, sizeof x->msg, "%s", st->status_text[0] ? st->status_text : "failed");
        /* What the proxy refused it is likely why it failed: the build error says so. */
        if (cp->egress && x->sb->egress_registered &&
            cp_egress_audit_sync(cp->egress, x->sb, bsb__synced) == 0)
            return;
        bsb__finish(x, 0, NULL);
        return;
    }
    int rc = cp->backend->snapshot ? cp->backend->snapshot(x->sb, x->snapshot, bsb__snapped, x)
                                   : -ENOTSUP;
    if (rc)
        bsb__finish(x, rc,
                    rc == -ENOTSUP ? "the %s backend cannot take a sandbox's files: RUN steps "
                                     "need the jail backend"
                                   : "taking the step's files: %s",
                    rc == -ENOTSUP ? cp->backend->name : strerror(-rc));
}

/* The first deny of the step's sandbox among the last records of the egress log (worker
 * thread: file reads), as "dns_query pypi.test: name_not_allowed". */
#define BSB_DENY_TAIL 20000

static void bsb__deny_work(uv_work_t *w)
{
    struct buildsb *x = w->data;
    x->deny[0] = '\0';
    char dir[4200];
    cp_egress_audit_dir(x->cp, dir, sizeof dir);
    struct al_auditlog_reader_opts o = {.dir = dir, .prefix = "egress"};
    struct al_auditlog_reader *r = NULL;
    struct al_error err = {0};
    if (al_auditlog_reader_open(&o, &r, &err) < 0) {
        al_warn("build %s: reading the egress audit log: %s", x->bid, al_error_str(&err));
        return;
    }
    struct al_auditlog_record rec;
    const char *id = x->sb->rec.id;
    if (al_auditlog_reader_seek_tail(r, BSB_DENY_TAIL) == 0) {
        while (al_auditlog_reader_next(r, &rec) == 1) {
            const json_t *j = rec.json;
            const char *sb = json_string_value(json_object_get(j, "sandbox"));
            const char *d = json_string_value(json_object_get(j, "decision"));
            if (!sb || strcmp(sb, id) != 0 || !d || strcmp(d, "deny") != 0)
                continue;
            const char *type = json_string_value(json_object_get(j, "type"));
            const char *host = NULL;
            const char *keys[] = {"host", "qname", "sni", "dst"};
            for (size_t i = 0; i < 4 && !host; i++)
                host = json_string_value(json_object_get(j, keys[i]));
            const char *why = json_string_value(json_object_get(j, "reason"));
            snprintf(x->deny, sizeof x->deny, "%s %s: %s", type ? type : "record",
                     host ? host : "?", why ? why : "denied");
            break;
        }
    }
    al_auditlog_reader_close(r);
}

static void bsb__deny_done(uv_work_t *w, int status)
{
    struct buildsb *x = w->data;
    (void)status;
    if (bsb__aborted(x))
        return;
    if (x->deny[0]) {
        size_t n = strlen(x->msg);
        snprintf(x->msg + n, sizeof x->msg - n,
                 "; airlock-egress denied its traffic under the build policy %s (%s; `airlock "
                 "audit query --sandbox %s --decision deny` lists every refusal)",
                 x->sb->rec.policy_name, x->deny, x->sb->rec.id);
    }
    bsb__finish(x, 0, NULL);
}

static void bsb__synced(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct buildsb *x = sb->build_step;
    if (rc)
        al_warn("build %s: the egress audit log was not synced: %s", x->bid, msg);
    if (bsb__aborted(x))
        return;
    x->work.data = x;
    if (rc || uv_queue_work(x->cp->loop, &x->work, bsb__deny_work, bsb__deny_done))
        bsb__finish(x, 0, NULL);
}

static void bsb__started(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct buildsb *x = sb->build_step;
    x->starting = false;
    if (rc) {
        bsb__finish(x, rc, "the build sandbox did not start: %s",
                    msg && *msg ? msg : strerror(-rc));
        return;
    }
    sb->started = true;
    if (bsb__aborted(x))
        return;
    json_t *args = json_pack("[s,s,s]", "-l", "-c", x->script);
    json_t *env = json_is_object(x->env) ? json_deep_copy(x->env) : json_object();
    if (al_envd_start_body("/bin/bash", args, env, x->cwd[0] ? x->cwd : NULL, &x->body,
                           &x->body_len)) {
        bsb__finish(x, -ENOMEM, "out of memory");
        return;
    }
    al_envd_user_auth(x->user[0] ? x->user : "root", x->auth, sizeof x->auth);
    char target[160];
    snprintf(target, sizeof target, "unix:%s", sb->agent_sock);
    struct al_http_header h[] = {{"Content-Type", "application/connect+json"},
                                 {"Connect-Protocol-Version", "1"},
                                 {"X-Access-Token", sb->rec.token},
                                 {"Authorization", x->auth}};
    struct al_http_creq_opts o = {.target = target,
                                  .method = "POST",
                                  .path = "/process.Process/Start",
                                  .headers = h,
                                  .n_headers = sizeof h / sizeof h[0],
                                  .body = x->body,
                                  .body_len = x->body_len,
                                  .timeout_ms = 30000,
                                  .on_response = bsb__resp,
                                  .on_data = bsb__data,
                                  .on_done = bsb__ran,
                                  .arg = x};
    rc = al_http_creq_start(x->cp->loop, &o, &x->creq);
    if (rc) {
        x->creq = NULL;
        bsb__finish(x, rc, "cannot reach the build sandbox's agent: %s", strerror(-rc));
    }
}

static void bsb__start(struct buildsb *x)
{
    struct cp_sandbox *sb = x->sb;
    struct cp *cp = x->cp;
    struct cp_start_args a = {
        .template_dir = x->dir,
        .template_name = x->tid,
        .netns_fd = sb->has_net ? sb->net.netns_fd : -1,
        .tap_fd = -1,
        .dns = sb->has_net && sb->net.gateway[0] ? sb->net.gateway : NULL,
        /* Root of a RUN step may install packages: chown, other users' files (docs/
         * templates.md, "RUN steps"). */
        .build = true,
    };
    /* The build policy's interception CA in the sandbox's trust stores, as in any sandbox
     * (lifecycle.c), so a step reaches an intercepted host over TLS; the step's layer
     * leaves the CA out (layerdiff.c). */
    const json_t *ix = sb->egress_registered ? sb->rec.intercept : NULL;
    const char *pem = json_string_value(json_object_get(ix, "caCertPem"));
    if (pem && !cp->backend->host_process && cp_egress_ca_useful(ix))
        a.ca_cert_pem = pem;
    sb->backend_attempted = true;
    x->starting = true;
    int rc = cp->backend->start(sb, &a, bsb__started);
    if (sb->net.netns_fd >= 0) {
        close(sb->net.netns_fd);
        sb->net.netns_fd = -1;
    }
    if (rc) {
        x->starting = false;
        bsb__finish(x, rc, "cannot start the build sandbox: %s", strerror(-rc));
    }
}

static void bsb__registered(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct buildsb *x = sb->build_step;
    if (rc) {
        bsb__finish(x, rc, "the egress proxy refused the build sandbox: %s",
                    msg && *msg ? msg : strerror(-rc));
        return;
    }
    sb->egress_registered = true;
    if (bsb__aborted(x))
        return;
    bsb__start(x);
}

static void bsb__net_work(uv_work_t *w)
{
    struct buildsb *x = w->data;
    struct cp *cp = x->cp;
    x->work_rc =
        cp->net->acquire(cp->net_priv, x->sb->rec.seq, x->sb->rec.id, &x->sb->net, &x->work_err);
}

static void bsb__net_done(uv_work_t *w, int status)
{
    struct buildsb *x = w->data;
    struct cp_sandbox *sb = x->sb;
    struct cp *cp = x->cp;
    if (status || x->work_rc) {
        bsb__finish(x, -EAGAIN, "no network for the build sandbox: %s",
                    status ? uv_strerror(status) : al_error_str(&x->work_err));
        return;
    }
    sb->has_net = true;
    snprintf(sb->rec.addr, sizeof sb->rec.addr, "%s", sb->net.addr);
    cp_sb_save(sb);
    if (bsb__aborted(x))
        return;
    if (!cp->egress) {
        bsb__start(x); /* (the vswitch sends its traffic nowhere else: none leaves) */
        return;
    }
    int rc = cp_egress_register(cp->egress, sb, bsb__registered);
    if (rc)
        bsb__finish(x, rc, "cannot register the build sandbox with the egress proxy: %s",
                    strerror(-rc));
}

static void bsb__abort(struct buildsb *x, int rc, const char *msg)
{
    if (x->abort_rc || x->finishing)
        return;
    x->abort_rc = rc;
    snprintf(x->abort_msg, sizeof x->abort_msg, "%s", msg);
    if (x->creq)
        al_http_creq_cancel(x->creq); /* bsb__ran ends the step */
    /* else: the start, the network or the snapshot is under way; its end ends the step */
}

static void bsb__timeout(uv_timer_t *t)
{
    struct buildsb *x = t->data;
    char m[200];
    snprintf(m, sizeof m, "the step ran longer than %.0f s (templates.step_timeout): killed",
             (double)x->cp->cfg.step_timeout_ms / 1000.0);
    bsb__abort(x, -ETIMEDOUT, m);
}

void cp_buildsb_stop(struct cp *cp, void (*then)(struct cp *cp))
{
    if (!bsb__n_live) {
        then(cp);
        return;
    }
    bsb__stopped = then;
    for (struct buildsb *x = bsb__live; x; x = x->next)
        bsb__abort(x, -ECANCELED, "airlockd stopped while the step ran: nothing was built");
}

int cp_buildsb_run(struct cp *cp, const struct cp_buildsb_step *s, char sandbox_id[64])
{
    sandbox_id[0] = '\0';
    if (cp->stopping)
        return -ECANCELED;
    struct al_error err = {0};
    char hash[65] = "";
    int status = 0;
    const char *policy = s->policy;
    if (cp->net && cp_policy_check_network(cp, policy, NULL, -1, hash, &status, &err)) {
        al_warn("build %s: build policy '%s': %s", s->build_id, policy, al_error_str(&err));
        return -EINVAL;
    }
    struct buildsb *x = calloc(1, sizeof *x);
    struct cp_sandbox *sb = x ? cp_sb_new(cp) : NULL;
    if (!sb) {
        free(x);
        return -ENOMEM;
    }
    x->cp = cp;
    x->sb = sb;
    x->s = *s;
    snprintf(x->dir, sizeof x->dir, "%s", s->dir);
    snprintf(x->user, sizeof x->user, "%s", s->user ? s->user : "");
    snprintf(x->cwd, sizeof x->cwd, "%s", s->cwd ? s->cwd : "");
    snprintf(x->snapshot, sizeof x->snapshot, "%s", s->snapshot);
    snprintf(x->tid, sizeof x->tid, "%s", s->template_id);
    snprintf(x->bid, sizeof x->bid, "%s", s->build_id);
    x->script = strdup(s->script);
    x->env = s->env ? json_deep_copy(s->env) : NULL;
    al_envd_stream_init(&x->stream, BUILDSB_OUTPUT_MAX, s->output, s->arg);
    struct cp_sb_record *r = &sb->rec;
    do {
        cp_sandbox_id_new(r->id);
    } while (cp_sandbox_get(cp, r->id));
    if (!x->script || cp_store_next_seq(cp->store, &r->seq, &err)) {
        al_warn("build %s: %s", s->build_id, x->script ? al_error_str(&err) : "out of memory");
        cp_sb_unref(sb);
        bsb__free(x);
        return -EIO;
    }
    r->state = CP_SB_CREATING;
    snprintf(r->template_id, sizeof r->template_id, "%s", s->template_id);
    snprintf(r->template_build, sizeof r->template_build, "%s", s->build_id);
    snprintf(r->backend, sizeof r->backend, "%s", cp->backend_kind);
    snprintf(r->policy_name, sizeof r->policy_name, "%s", policy);
    snprintf(r->policy_hash, sizeof r->policy_hash, "%s", hash);
    cp_token_new(r->token);
    r->created_ns = al_wall_ns();
    r->cpu_count = (int)cp->cfg.cpu_count;
    r->memory_mb = (int)(cp->cfg.memory_bytes >> 20);
    r->disk_mb = (int)(cp->cfg.disk_bytes >> 20);
    if (cp_store_sb_save(cp->store, r, &err)) {
        al_warn("build %s: cannot record its sandbox: %s", s->build_id, al_error_str(&err));
        cp_sb_unref(sb);
        bsb__free(x);
        return -EIO;
    }
    sb->build_step = x;
    x->next = bsb__live;
    bsb__live = x;
    bsb__n_live++;
    uv_timer_init(cp->loop, &x->timer);
    x->timer.data = x;
    uv_timer_start(&x->timer, bsb__timeout, cp->cfg.step_timeout_ms, 0);
    al_info("build %s: step sandbox %s (policy %s)", s->build_id, r->id,
            cp->net ? policy : "none: no network");
    snprintf(sandbox_id, 64, "%s", r->id);
    if (!cp->net) {
        bsb__start(x);
        return 0;
    }
    x->work.data = x;
    int rc = uv_queue_work(cp->loop, &x->work, bsb__net_work, bsb__net_done);
    if (rc)
        bsb__finish(x, -EIO, "no network for the build sandbox: %s", uv_strerror(rc));
    return 0;
}
