/* controlplane/egressreg: see egressreg.h.
 *
 * The admin API of airlock-egress (egress/admin.c):
 *   POST   /v1/sandboxes       {"id","template","addresses":[...],"policy_file":PATH,
 *                               "network":{"allow_internet_access"?,"allow_out"?,"deny_out"?}}
 *   DELETE /v1/sandboxes/{id}
 *   GET    /v1/sandboxes       [{"id",...}]
 *   GET    /v1/stats           the proxy's counters (decisions for /metrics)
 * "network" is sent only for sandboxes whose creation carried E2B network fields.
 */
#include "egressreg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include <unistd.h>
#include "cp.h"
#include "policysel.h"

#define EG_TIMEOUT_MS 10000

struct cp_egress {
    struct cp *cp;
    char target[4200];
    json_t *stats;
    uint64_t stats_ns;
    bool stats_pending;
    bool resync_pending;
};

struct eg_call {
    struct cp_egress *e;
    struct cp_sandbox *sb; /* referenced, or NULL */
    cp_egress_cb cb;
    void (*done)(struct eg_call *c, int status, json_t *body);
    int status;
    struct al_buf body;
    char id[64];
};

/* What a policy narrowed to nothing becomes (deploy/policies/deny-all.yaml). */
#define EG_DENY_ALL                                                                     \
    "version: 1\nname: deny-all\ndescription: no network access (E2B network fields)\n" \
    "rules: []\ndns:\n  resolve: none\n"

/* True when the E2B fields leave no destination at all: no internet (or every address
 * denied) and nothing allowed back. */
static bool eg__denies_everything(const json_t *n)
{
    if (json_array_size(json_object_get(n, "allow_out")) > 0)
        return false;
    if (json_is_false(json_object_get(n, "allow_internet_access")))
        return true;
    bool v4 = false, v6 = false;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(n, "deny_out"), i, d)
    {
        const char *s = json_string_value(d);
        v4 |= s && strcmp(s, "0.0.0.0/0") == 0;
        v6 |= s && strcmp(s, "::/0") == 0;
    }
    return v4 || v6;
}

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
    json_t *n = cp_policy_narrowing(sb->rec.network, sb->rec.allow_internet);
    if (n && eg__denies_everything(n)) {
        /* The narrowing leaves nothing: the sandbox gets a policy that allows nothing (and
         * resolves no name), which is exactly what the E2B fields ask for. */
        json_decref(n);
        char origin[200];
        snprintf(origin, sizeof origin,
                 "sandbox %s: %s narrowed to nothing by its E2B network "
                 "fields",
                 sb->rec.id, sb->rec.policy_name);
        return json_pack("{s:s,s:s,s:[s],s:{s:s,s:s}}", "id", sb->rec.id, "template",
                         sb->rec.template_id, "addresses", sb->rec.addr, "policy", "yaml",
                         EG_DENY_ALL, "origin", origin);
    }
    json_t *b = json_pack("{s:s,s:s,s:[s],s:s}", "id", sb->rec.id, "template", sb->rec.template_id,
                          "addresses", sb->rec.addr, "policy_file", file);
    if (n)
        json_object_set_new(b, "network", n);
    return b;
}

static int eg__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    struct eg_call *x = arg;
    (void)c;
    (void)h;
    (void)n;
    x->status = status;
    return 0;
}

static int eg__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct eg_call *x = arg;
    (void)c;
    al_buf_append(&x->body, data, len); /* capped: the rest is dropped */
    return 0;
}

static void eg__on_done(struct al_http_creq *c, int err, void *arg)
{
    struct eg_call *x = arg;
    json_t *body = NULL;
    if (!err && x->body.len)
        body = json_loadb(x->body.data, x->body.len, 0, NULL);
    if (err) {
        const char *why = al_http_creq_strerror(c);
        char msg[512];
        snprintf(msg, sizeof msg, "airlock-egress (%s) did not answer: %s", x->e->target,
                 why && *why ? why : strerror(-err));
        x->status = -1;
        json_decref(body);
        body = json_pack("{s:s}", "message", msg);
    }
    x->done(x, x->status, body);
    json_decref(body);
    al_buf_free(&x->body);
    if (x->sb)
        cp_sb_unref(x->sb);
    free(x);
}

static int eg__call(struct cp_egress *e, struct cp_sandbox *sb, const char *method,
                    const char *path, json_t *body, cp_egress_cb cb,
                    void (*done)(struct eg_call *c, int status, json_t *body))
{
    struct eg_call *x = calloc(1, sizeof *x);
    if (!x)
        return -ENOMEM;
    x->e = e;
    x->cb = cb;
    x->done = done;
    al_buf_init(&x->body, 1 << 20);
    if (sb) {
        x->sb = sb;
        cp_sb_ref(sb);
        snprintf(x->id, sizeof x->id, "%s", sb->rec.id);
    }
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct al_http_header h[] = {{"Content-Type", "application/json"}};
    struct al_http_creq_opts o = {
        .target = e->target,
        .method = method,
        .path = path,
        .headers = h,
        .n_headers = body ? 1 : 0,
        .body = text,
        .body_len = text ? strlen(text) : 0,
        .timeout_ms = EG_TIMEOUT_MS,
        .on_response = eg__on_response,
        .on_data = eg__on_data,
        .on_done = eg__on_done,
        .arg = x,
        .pool = e->cp->pool,
    };
    struct al_http_creq *c;
    int rc = al_http_creq_start(e->cp->loop, &o, &c);
    free(text);
    if (rc) {
        if (x->sb)
            cp_sb_unref(x->sb);
        al_buf_free(&x->body);
        free(x);
    }
    return rc;
}

static const char *eg__msg(json_t *body)
{
    const char *m = json_string_value(json_object_get(body, "message"));
    return m ? m : "";
}

static void eg__registered(struct eg_call *x, int status, json_t *body)
{
    int rc = status == 201 || status == 200 ? 0
             : status == 400                ? -EINVAL
             : status == 409                ? -EEXIST
                                            : -EIO;
    if (x->cb)
        x->cb(x->sb, rc, rc ? eg__msg(body) : NULL);
}

int cp_egress_register(struct cp_egress *e, struct cp_sandbox *sb, cp_egress_cb cb)
{
    json_t *b = cp_egress_body(e->cp, sb);
    int rc = eg__call(e, sb, "POST", "/v1/sandboxes", b, cb, eg__registered);
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
    return eg__call(e, sb, "DELETE", path, NULL, cb, eg__unregistered);
}

/* ---- resynchronisation --------------------------------------------------------------- */

static void eg__resync_reg(struct cp_sandbox *sb, int rc, const char *msg)
{
    if (rc && rc != -EEXIST)
        al_error("sandbox %s: registration with the egress proxy failed: %s (its traffic is "
                 "refused until it succeeds)",
                 sb->rec.id, msg && *msg ? msg : strerror(-rc));
    else
        sb->egress_registered = true;
}

static void eg__resync_del(struct eg_call *x, int status, json_t *body)
{
    if (status != 204 && status != 404)
        al_warn("egress: could not drop the stale registration of %s: %s", x->id, eg__msg(body));
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
    al_info("sandbox %s: registering it with the egress proxy again", sb->rec.id);
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
            eg__call(e, NULL, "DELETE", path, NULL, NULL, eg__resync_del);
        } else {
            sb->egress_registered = true;
        }
    }
    struct eg_resync_ctx c = {.registered = ids, .e = e};
    cp_map_foreach(&cp->sandboxes, eg__resync_each, &c);
    json_decref(ids);
}

void cp_egress_resync(struct cp_egress *e)
{
    if (e->resync_pending)
        return;
    e->resync_pending = true;
    if (eg__call(e, NULL, "GET", "/v1/sandboxes", NULL, NULL, eg__resync_list))
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
    }
}

json_t *cp_egress_stats(struct cp_egress *e)
{
    /* Refreshed in the background: a scrape sees figures at most one scrape old. */
    if (!e->stats_pending && al_now_ns() - e->stats_ns > 1000000000ull) {
        e->stats_pending = true;
        if (eg__call(e, NULL, "GET", "/v1/stats", NULL, NULL, eg__stats_done))
            e->stats_pending = false;
    }
    return e->stats;
}
