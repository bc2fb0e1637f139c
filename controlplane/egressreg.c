/* controlplane/egressreg: see egressreg.h.
 *
 * The admin API of airlock-egress (egress/admin.c):
 *   POST   /v1/sandboxes       {"id","template","addresses":[...],"policy_file":PATH,
 *                               "network":{"allow_internet_access"?,"allow_out"?,"deny_out"?},
 *                               "placeholders":{ENV: value}}
 *                               201 {..., "caCertPem","caFingerprint","caNames","placeholders"}
 *   DELETE /v1/sandboxes/{id}
 *   PUT    /v1/sandboxes/{id}/network {"network": {...} | null, "update", "generation",
 *                                     "api_key_id"?}
 *                               200; 400 refused (the old fields stay); 404
 *   GET    /v1/sandboxes       [{"id",...}]
 *   GET    /v1/stats           the proxy's counters (decisions for /metrics and the overview)
 *   POST   /v1/audit/sync      204 once the records so far are written
 *   POST   /v1/audit/records   {"type":"volume","event",...}: 204 once in the log, on disk
 * "network" is sent only for sandboxes whose creation carried E2B network fields (the proxy
 * narrows the policy file with them, also across its reloads); "placeholders" only when
 * registering again a sandbox that already holds some (so that its processes keep them).
 * The answer's CA and placeholders are kept in the sandbox's record (rec.intercept): the
 * agent gets the CA in its init and the placeholders in its envVars at creation, and a new
 * CA (airlock-egress restarted) with POST /init over its channel (cp_egress_ca_sync).
 */
#include "egressreg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include <unistd.h>
#include "cp.h"
#include "jcall.h"
#include "metrics.h"
#include "policysel.h"

#define EG_TIMEOUT_MS 10000

struct cp_egress {
    struct cp *cp;
    char target[4200];
    json_t *stats;
    uint64_t stats_ns;
    bool stats_pending;
    bool resync_pending;
    bool resync_again; /* a registration met a conflict: list and register again */
};

struct eg_call {
    struct cp_egress *e;
    struct cp_sandbox *sb; /* referenced, or NULL */
    cp_egress_cb cb;
    void (*done)(struct eg_call *c, int status, json_t *body);
    char id[64];
    char ca_fp[128];          /* a CA push: the fingerprint of the CA sent */
    cp_egress_done_cb rec_cb; /* a control-plane audit record: the caller's */
    void *rec_arg;            /* also a reload's */
    cp_egress_reload_cb reload_cb;
    char target[160]; /* for messages */
};

int cp_egress_new(struct cp *cp, const char *sock_path, struct cp_egress **out)
{
    struct cp_egress *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    e->cp = cp;
    snprintf(e->target, sizeof e->target, "unix:%s", sock_path);
    *out = e;
    return 0;
}

void cp_egress_free(struct cp_egress *e)
{
    if (!e)
        return;
    json_decref(e->stats);
    free(e);
}

json_t *cp_egress_body(struct cp *cp, const struct cp_sandbox *sb)
{
    char file[4200] = "";
    const char *exts[] = {".yaml", ".yml"};
    for (int i = 0; i < 2; i++) {
        snprintf(file, sizeof file, "%s/%s%s", cp->cfg.policies_path, sb->rec.policy_name, exts[i]);
        if (access(file, R_OK) == 0)
            break;
    }
    /* A template build's step sandbox is named in the proxy's audit records by the build it
     * runs for (as the REST API names it), not as a sandbox of that template. */
    char tmpl[CP_TEMPLATE_MAX + 48];
    if (sb->build_step)
        snprintf(tmpl, sizeof tmpl, "%s/builds/%s", sb->rec.template_id, sb->rec.template_build);
    else
        snprintf(tmpl, sizeof tmpl, "%s", sb->rec.template_id);
    json_t *b = json_pack("{s:s,s:s,s:[s],s:s}", "id", sb->rec.id, "template", tmpl, "addresses",
                          sb->rec.addr, "policy_file", file);
    if (!b)
        return NULL;
    /* The E2B fields narrow the policy in the proxy, in front of it, for every policy the
     * sandbox gets there (they can only remove access). */
    json_t *n = cp_policy_narrowing(sb->rec.network, sb->rec.allow_internet);
    if (n)
        json_object_set_new(b, "network", n);
    /* Registered again (the proxy restarted): the placeholders its processes hold. */
    json_t *ph = sb->rec.intercept ? json_object_get(sb->rec.intercept, "placeholders") : NULL;
    if (json_object_size(ph) > 0)
        json_object_set(b, "placeholders", ph);
    return b;
}

static void eg__answered(int status, json_t *body, const char *err, void *arg)
{
    struct eg_call *x = arg;
    json_t *msg = NULL;
    if (err) {
        char m[512];
        snprintf(m, sizeof m, "%s did not answer: %s", x->target, err);
        msg = json_pack("{s:s}", "message", m);
        body = msg;
    }
    x->done(x, status, body);
    json_decref(msg);
    if (x->sb)
        cp_sb_unref(x->sb);
    free(x);
}

/* One request of eg__call: to airlock-egress (target NULL) or to a sandbox's agent (its
 * channel, with its access token). done reads the answer and tells cb (the caller's, or NULL). */
struct eg_req {
    const char *target;
    const char *token;
    struct cp_sandbox *sb; /* referenced while the call lasts, or NULL */
    const char *method;
    const char *path;
    json_t *body;
    cp_egress_cb cb;
    void (*done)(struct eg_call *c, int status, json_t *body);
};

/* 0 with *out (when out is not NULL) the call under way, or a negative errno. */
static int eg__call(struct cp_egress *e, const struct eg_req *r, struct eg_call **out)
{
    struct eg_call *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    x->e = e;
    x->cb = r->cb;
    x->done = r->done;
    if (r->target)
        snprintf(x->target, sizeof x->target, "the agent (%.140s)", r->target);
    else
        snprintf(x->target, sizeof x->target, "airlock-egress (%.130s)", e->target);
    if (r->sb) {
        x->sb = r->sb;
        cp_sb_ref(r->sb);
        snprintf(x->id, sizeof x->id, "%s", r->sb->rec.id);
    }
    if (out)
        *out = x;
    struct cp_jcall_opts o = {
        .target = r->target ? r->target : e->target,
        .method = r->method,
        .path = r->path,
        .token = r->token,
        .body = r->body,
        .timeout_ms = EG_TIMEOUT_MS,
        .pool = e->cp->pool,
        .done = eg__answered,
        .arg = x,
    };
    int rc = cp_jcall(e->cp->loop, &o);
    if (rc) {
        if (out)
            *out = NULL;
        if (x->sb)
            cp_sb_unref(x->sb);
        free(x);
    }
    return rc;
}

static const char *eg__msg(json_t *body)
{
    const char *m = json_string_value(json_object_get(body, "message"));
    return m ? m : "";
}

/* Environment variable names the agent accepts (and a placeholder must have). */
static bool eg__env_name_ok(const char *k)
{
    if (!k[0] || (k[0] >= '0' && k[0] <= '9') || strlen(k) > 128)
        return false;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return false;
    return true;
}

/* What the proxy handed out for the sandbox (its CA, its placeholders) goes into its record;
 * the agent's CA fingerprint (what it has installed) is kept. Anything malformed is left out
 * and said: the agent would refuse it anyway. */
static void eg__keep_answer(struct cp_sandbox *sb, json_t *body)
{
    const char *pem = json_string_value(json_object_get(body, "caCertPem"));
    const char *fp = json_string_value(json_object_get(body, "caFingerprint"));
    json_t *ph = json_object_get(body, "placeholders");
    json_t *ix = json_object();
    if (!ix)
        return;
    if (pem && fp && strlen(pem) < CP_CA_PEM_MAX && strstr(pem, "-----BEGIN CERTIFICATE-----")) {
        json_object_set_new(ix, "caCertPem", json_string(pem));
        json_object_set_new(ix, "caFingerprint", json_string(fp));
        json_t *names = json_object_get(body, "caNames");
        if (json_is_array(names))
            json_object_set(ix, "caNames", names);
    } else if (pem || fp) {
        al_warn("sandbox %s: the egress proxy's answer has no usable CA certificate (its "
                "intercepted connections will fail)",
                sb->rec.id);
    }
    json_t *keep = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(json_is_object(ph) ? ph : NULL, k, v)
    {
        const char *val = json_string_value(v);
        if (val && eg__env_name_ok(k) && strlen(val) <= 256)
            json_object_set(keep, k, v);
        else
            al_warn("sandbox %s: ignoring the malformed placeholder \"%.64s\" in the egress "
                    "proxy's answer",
                    sb->rec.id, k);
    }
    json_object_set_new(ix, "placeholders", keep);
    json_t *had =
        sb->rec.intercept ? json_object_get(sb->rec.intercept, "agentCaFingerprint") : NULL;
    if (json_is_string(had))
        json_object_set(ix, "agentCaFingerprint", had);
    json_decref(sb->rec.intercept);
    sb->rec.intercept = ix;
    /* A creation saves its record when it is done; a registration made again is saved now,
     * so that the placeholders survive a restart of airlockd. */
    if (sb->rec.state != CP_SB_CREATING)
        cp_sb_save(sb);
}

static void eg__registered(struct eg_call *x, int status, json_t *body)
{
    int rc = status == 201 || status == 200 ? 0
             : status == 400                ? -EINVAL
             : status == 409                ? -EEXIST
                                            : -EIO;
    if (rc == 0 && x->sb && json_is_object(body))
        eg__keep_answer(x->sb, body);
    if (x->cb)
        x->cb(x->sb, rc, rc ? eg__msg(body) : NULL);
}

int cp_egress_register(struct cp_egress *e, struct cp_sandbox *sb, cp_egress_cb cb)
{
    json_t *b = cp_egress_body(e->cp, sb);
    int rc = eg__call(e,
                      &(struct eg_req){.sb = sb,
                                       .method = "POST",
                                       .path = "/v1/sandboxes",
                                       .body = b,
                                       .cb = cb,
                                       .done = eg__registered},
                      NULL);
    json_decref(b);
    return rc;
}

static void eg__unregistered(struct eg_call *x, int status, json_t *body)
{
    int rc = status == 204 || status == 200 ? 0 : status == 404 ? -ENOENT : -EIO;
    if (x->cb)
        x->cb(x->sb, rc, rc ? eg__msg(body) : NULL);
}

int cp_egress_unregister(struct cp_egress *e, struct cp_sandbox *sb, cp_egress_cb cb)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/sandboxes/%s", sb->rec.id);
    return eg__call(
        e,
        &(struct eg_req){
            .sb = sb, .method = "DELETE", .path = path, .cb = cb, .done = eg__unregistered},
        NULL);
}

static void eg__network_set(struct eg_call *x, int status, json_t *body)
{
    int rc = status == 200 ? 0 : status == 404 ? -ENOENT : status == 400 ? -EINVAL : -EIO;
    if (x->cb)
        x->cb(x->sb, rc, rc ? eg__msg(body) : NULL);
}

int cp_egress_set_network(struct cp_egress *e, struct cp_sandbox *sb, const char *update_id,
                          const char *key_id, cp_egress_cb cb)
{
    json_t *n = cp_policy_narrowing(sb->rec.network, sb->rec.allow_internet);
    json_t *b = json_pack("{s:o,s:s,s:I}", "network", n ? n : json_null(), "update", update_id,
                          "generation", (json_int_t)sb->rec.net_generation);
    if (b && key_id && *key_id)
        json_object_set_new(b, "api_key_id", json_string(key_id));
    char path[128];
    snprintf(path, sizeof path, "/v1/sandboxes/%s/network", sb->rec.id);
    int rc = b ? eg__call(e,
                          &(struct eg_req){.sb = sb,
                                           .method = "PUT",
                                           .path = path,
                                           .body = b,
                                           .cb = cb,
                                           .done = eg__network_set},
                          NULL)
               : -ENOMEM;
    json_decref(b);
    return rc;
}

/* ---- resynchronisation --------------------------------------------------------------- */

static void eg__resync_reg(struct cp_sandbox *sb, int rc, const char *msg)
{
    if (rc == -EEXIST) {
        /* 409: this id, or this sandbox's address, is registered already. Never taken as
         * success: an address still held by a stale registration (its removal in flight)
         * would have this sandbox's traffic decided and audited under another sandbox's
         * policy. The next tick lists the registrations again: this id then shows up as
         * registered (with its address), or the stale one is gone and it registers. */
        al_warn("sandbox %s: the egress proxy refused its registration (%s): trying again",
                sb->rec.id, msg && *msg ? msg : "conflict");
        if (sb->cp->egress)
            sb->cp->egress->resync_again = true;
        return;
    }
    if (rc) {
        al_error("sandbox %s: registration with the egress proxy failed: %s (its traffic is "
                 "refused until it succeeds)",
                 sb->rec.id, msg && *msg ? msg : strerror(-rc));
        return;
    }
    sb->egress_registered = true;
    /* A new registration comes with a new CA: the agent must trust it. */
    cp_egress_ca_sync(sb);
}

static void eg__resync_del(struct eg_call *x, int status, json_t *body)
{
    if (status != 204 && status != 404)
        al_warn("egress: could not drop the stale registration of %s: %s", x->id, eg__msg(body));
}

/* Whether a registration's "addresses" are exactly the sandbox's one address (compared as
 * addresses, not as text). */
static bool eg__same_addresses(const json_t *addrs, const char *mine)
{
    unsigned char a[16], b[16];
    int fam = strchr(mine, ':') ? AF_INET6 : AF_INET;
    if (!json_is_array(addrs) || json_array_size(addrs) != 1 || inet_pton(fam, mine, a) != 1)
        return false;
    const char *t = json_string_value(json_array_get(addrs, 0));
    return t && inet_pton(fam, t, b) == 1 && memcmp(a, b, fam == AF_INET ? 4 : 16) == 0;
}

static void eg__resync_net_done(struct cp_sandbox *sb, int rc, const char *msg)
{
    if (rc)
        al_error("sandbox %s: the egress proxy refused its stored network fields (%s): it keeps "
                 "the ones it had",
                 sb->rec.id, msg && *msg ? msg : strerror(-rc));
    else
        al_info("sandbox %s: the egress proxy has its stored network fields again", sb->rec.id);
}

/* A registration whose network fields are not the stored ones (airlockd stopped between
 * saving an update and the proxy applying it, or the other way round): the stored ones,
 * which getInfo shows, are sent again. */
static void eg__resync_network(struct cp_egress *e, struct cp_sandbox *sb, json_t *registered)
{
    json_t *want = cp_policy_narrowing(sb->rec.network, sb->rec.allow_internet);
    bool same = want ? json_equal(want, registered) : !registered || json_is_null(registered);
    json_decref(want);
    if (same || sb->netupdate)
        return;
    al_warn("sandbox %s: the egress proxy's network fields are not the stored ones: sending "
            "them again",
            sb->rec.id);
    if (cp_egress_set_network(e, sb, "resync", NULL, eg__resync_net_done))
        al_error("sandbox %s: cannot send its network fields to the egress proxy", sb->rec.id);
}

struct eg_resync_ctx {
    json_t *registered;
    struct cp_egress *e;
};

static int eg__resync_each(void *v, void *arg)
{
    struct cp_sandbox *sb = v;
    struct eg_resync_ctx *c = arg;
    if (!sb->has_net || (sb->rec.state != CP_SB_RUNNING && sb->rec.state != CP_SB_PAUSED))
        return 0;
    if (json_object_get(c->registered, sb->rec.id))
        return 0;
    json_t *ph = sb->rec.intercept ? json_object_get(sb->rec.intercept, "placeholders") : NULL;
    al_info("sandbox %s: registering it with the egress proxy again (keeping its %zu "
            "placeholder%s)",
            sb->rec.id, json_object_size(ph), json_object_size(ph) == 1 ? "" : "s");
    if (cp_egress_register(c->e, sb, eg__resync_reg))
        al_error("sandbox %s: cannot register it with the egress proxy", sb->rec.id);
    return 0;
}

static void eg__resync_list(struct eg_call *x, int status, json_t *body)
{
    struct cp_egress *e = x->e;
    struct cp *cp = e->cp;
    e->resync_pending = false;
    if (status != 200 || !json_is_array(body)) {
        al_warn("egress: cannot list its sandboxes (%s): will retry",
                status < 0 ? eg__msg(body) : "bad answer");
        return;
    }
    json_t *ids = json_object();
    size_t i;
    json_t *s;
    json_array_foreach(body, i, s)
    {
        const char *id = json_string_value(json_object_get(s, "id"));
        if (!id)
            continue;
        json_object_set_new(ids, id, json_true());
        struct cp_sandbox *sb = cp_sandbox_id_valid(id) ? cp_sandbox_get(cp, id) : NULL;
        if (!sb || !sb->has_net) {
            al_info("egress: dropping the registration of %s (no such sandbox)", id);
            char path[128];
            snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
            eg__call(e, &(struct eg_req){.method = "DELETE", .path = path, .done = eg__resync_del},
                     NULL);
        } else if (!eg__same_addresses(json_object_get(s, "addresses"), sb->rec.addr)) {
            /* Our id with another address (a registration older than this sandbox's
             * network): dropped, and registered again on the next tick. */
            al_warn("egress: the registration of %s has other addresses than the sandbox: "
                    "dropping it",
                    id);
            sb->egress_registered = false;
            e->resync_again = true;
            char path[128];
            snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
            eg__call(e, &(struct eg_req){.method = "DELETE", .path = path, .done = eg__resync_del},
                     NULL);
        } else {
            sb->egress_registered = true;
            eg__resync_network(e, sb, json_object_get(s, "network"));
        }
    }
    struct eg_resync_ctx c = {.registered = ids, .e = e};
    cp_map_foreach(&cp->sandboxes, eg__resync_each, &c);
    json_decref(ids);
}

void cp_egress_tick(struct cp_egress *e)
{
    if (e->resync_again && !e->resync_pending) {
        e->resync_again = false;
        cp_egress_resync(e);
    }
}

void cp_egress_resync(struct cp_egress *e)
{
    if (e->resync_pending)
        return;
    e->resync_pending = true;
    if (eg__call(
            e, &(struct eg_req){.method = "GET", .path = "/v1/sandboxes", .done = eg__resync_list},
            NULL))
        e->resync_pending = false;
}

static void eg__stats_done(struct eg_call *x, int status, json_t *body)
{
    struct cp_egress *e = x->e;
    e->stats_pending = false;
    if (status == 200 && json_is_object(body)) {
        json_decref(e->stats);
        e->stats = json_incref(body);
        e->stats_ns = al_now_ns();
        cp_metrics_egress(e->cp->metrics, body, al_wall_ns());
    }
}

/* ---- the CA in the agent ---------------------------------------------------------------- */

static void eg__ca_pushed(struct eg_call *x, int status, json_t *body)
{
    struct cp_sandbox *sb = x->sb;
    sb->ca_pushing = false;
    if (!sb->registered || sb->rec.state == CP_SB_STOPPING)
        return; /* killed meanwhile */
    if (status != 204 && status != 200) {
        al_error("sandbox %s: its agent refused the new CA of the egress proxy (%s%s%d): its "
                 "intercepted connections fail until it takes it (tried again when the sandbox "
                 "is resumed or re-registered)",
                 sb->rec.id, eg__msg(body), *eg__msg(body) ? ", HTTP " : "HTTP ", status);
        return;
    }
    if (!sb->rec.intercept)
        return;
    json_object_set_new(sb->rec.intercept, "agentCaFingerprint", json_string(x->ca_fp));
    cp_sb_save(sb);
    al_info("sandbox %s: the agent installed the egress proxy's new CA (%.24s...)", sb->rec.id,
            x->ca_fp);
    cp_egress_ca_sync(sb); /* another one may have come meanwhile */
}

bool cp_egress_ca_useful(const json_t *intercept)
{
    json_t *names = json_object_get(intercept, "caNames");
    if (!json_is_array(names))
        return json_is_string(json_object_get(intercept, "caCertPem")); /* not said: install */
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n)
    {
        const char *s = json_string_value(n);
        if (s && strcmp(s, "invalid") != 0)
            return true;
    }
    return false;
}

void cp_egress_ca_sync(struct cp_sandbox *sb)
{
    struct cp *cp = sb->cp;
    if (!cp->egress || sb->ca_pushing || !sb->registered || sb->rec.state != CP_SB_RUNNING ||
        !sb->started || !sb->agent_sock[0] || !sb->rec.intercept)
        return;
    const char *pem = json_string_value(json_object_get(sb->rec.intercept, "caCertPem"));
    const char *fp = json_string_value(json_object_get(sb->rec.intercept, "caFingerprint"));
    const char *have = json_string_value(json_object_get(sb->rec.intercept, "agentCaFingerprint"));
    if (!pem || !fp || (have && strcmp(have, fp) == 0) || !cp_egress_ca_useful(sb->rec.intercept))
        return;
    char target[160];
    snprintf(target, sizeof target, "unix:%s", sb->agent_sock);
    json_t *b = json_pack("{s:s}", "caCertPem", pem);
    struct eg_call *x = NULL;
    struct eg_req r = {.target = target,
                       .token = sb->rec.token,
                       .sb = sb,
                       .method = "POST",
                       .path = "/init",
                       .body = b,
                       .done = eg__ca_pushed};
    int rc = b ? eg__call(cp->egress, &r, &x) : -ENOMEM;
    json_decref(b);
    if (rc) {
        al_error("sandbox %s: cannot send the egress proxy's new CA to its agent: %s", sb->rec.id,
                 strerror(-rc));
        return;
    }
    snprintf(x->ca_fp, sizeof x->ca_fp, "%s", fp);
    sb->ca_pushing = true;
    al_info("sandbox %s: sending the egress proxy's new CA to its agent", sb->rec.id);
}

void cp_egress_audit_dir(const struct cp *cp, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", cp->cfg.state_dir, AL_DIR_AUDIT);
    const struct al_cfg_strlist *a = &cp->cfg.egress_args;
    for (size_t i = 0; i < a->n; i++) {
        if (strcmp(a->v[i], "--audit-dir") == 0 && i + 1 < a->n)
            snprintf(out, len, "%s", a->v[i + 1]);
        else if (strncmp(a->v[i], "--audit-dir=", 12) == 0)
            snprintf(out, len, "%s", a->v[i] + 12);
    }
}

static void eg__synced(struct eg_call *x, int status, json_t *body)
{
    if (x->cb)
        x->cb(x->sb, status == 204 ? 0 : -EIO, status == 204 ? "" : eg__msg(body));
}

int cp_egress_audit_sync(struct cp_egress *e, struct cp_sandbox *sb, cp_egress_cb cb)
{
    return eg__call(
        e,
        &(struct eg_req){
            .sb = sb, .method = "POST", .path = "/v1/audit/sync", .cb = cb, .done = eg__synced},
        NULL);
}

static void eg__recorded(struct eg_call *x, int status, json_t *body)
{
    if (x->rec_cb)
        x->rec_cb(x->rec_arg,
                  status == 204   ? 0
                  : status == 400 ? -EINVAL
                                  : -EIO,
                  status == 204 ? "" : eg__msg(body));
}

int cp_egress_audit_record(struct cp_egress *e, json_t *rec, cp_egress_done_cb cb, void *arg)
{
    struct eg_call *x = NULL;
    int rc = eg__call(
        e,
        &(struct eg_req){
            .method = "POST", .path = "/v1/audit/records", .body = rec, .done = eg__recorded},
        &x);
    /* The answer comes on a later turn of the loop: the callback can be set now. */
    if (!rc) {
        x->rec_cb = cb;
        x->rec_arg = arg;
    }
    return rc;
}

static void eg__reloaded(struct eg_call *x, int status, json_t *body)
{
    if (x->reload_cb)
        x->reload_cb(x->rec_arg, status == 200 && json_is_object(body) ? 0 : -EIO,
                     status == 200 ? body : NULL);
}

int cp_egress_reload(struct cp_egress *e, cp_egress_reload_cb cb, void *arg)
{
    struct eg_call *x = NULL;
    int rc = eg__call(
        e, &(struct eg_req){.method = "POST", .path = "/v1/reload", .done = eg__reloaded}, &x);
    if (!rc) {
        x->reload_cb = cb;
        x->rec_arg = arg;
    }
    return rc;
}

struct eg_audit {
    cp_egress_done_cb then;
    void *arg;
    char what[160];
};

static void eg__audited(void *arg, int rc, const char *msg)
{
    struct eg_audit *a = arg;
    if (rc)
        al_error("%s: its audit record was not written: %s", a->what, msg);
    if (a->then)
        a->then(a->arg, rc, msg);
    free(a);
}

void cp_audit_record(struct cp *cp, json_t *rec, const char *what, cp_egress_done_cb then,
                     void *arg)
{
    struct eg_audit *a = calloc(1, sizeof *a);
    int rc = -ENOMEM;
    if (a) {
        a->then = then;
        a->arg = arg;
        snprintf(a->what, sizeof a->what, "%s", what);
    }
    if (a && !cp->egress) {
        al_warn("%s: not audited: airlock-egress, which writes the audit log, does not run "
                "(egress.mode off, or no sandbox network)",
                what);
        rc = 0;
    } else if (a && (rc = cp_egress_audit_record(cp->egress, rec, eg__audited, a)) == 0) {
        json_decref(rec);
        return; /* eg__audited has a and runs then */
    } else {
        al_error("%s: its audit record was not sent: %s", what, strerror(-rc));
    }
    json_decref(rec);
    free(a);
    if (then)
        then(arg, rc, rc ? strerror(-rc) : "");
}

json_t *cp_egress_stats(struct cp_egress *e)
{
    /* Refreshed in the background: a scrape sees figures at most one scrape old. */
    if (!e->stats_pending && al_now_ns() - e->stats_ns > 1000000000ull) {
        e->stats_pending = true;
        if (eg__call(e,
                     &(struct eg_req){.method = "GET", .path = "/v1/stats", .done = eg__stats_done},
                     NULL))
            e->stats_pending = false;
    }
    return e->stats;
}
