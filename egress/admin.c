/* egress/admin: the admin API of airlock-egress, HTTP+JSON on a unix socket
 * (<state>/run/egress.sock, mode 0660), served by common/http on the control loop. Only
 * peers running as root or as the proxy's own user are answered (SO_PEERCRED).
 *
 *   GET    /v1/health                 200 {"status":"ok",...}; 503 while the audit log fails
 *   GET    /v1/stats                  global counters
 *   GET    /v1/sandboxes              every registered sandbox with its figures
 *   POST   /v1/sandboxes              register: {"id","template","addresses":[...],
 *                                     "policy":{"yaml":"...","origin":"..."} | "policy_file",
 *                                     "placeholders"?:{ENV: value} (kept from before),
 *                                     "network"?:{"allow_internet_access"?,"allow_out"?,
 *                                     "deny_out"?} (E2B fields: narrow every policy the
 *                                     sandbox gets, docs/policy.md)}
 *                                     201 the sandbox, with "caCertPem", "caFingerprint",
 *                                     "caNames", "placeholders" (interception); 400 invalid
 *                                     (the reason, with file:line:col for policy errors);
 *                                     409 id/address taken
 *   GET    /v1/sandboxes/{id}         200 the sandbox (with "network" when narrowed; its
 *                                     policy.hash is the narrowed policy's); 404
 *   DELETE /v1/sandboxes/{id}         204 (its connections are closed); 404
 *   PUT    /v1/sandboxes/{id}/policy  {"yaml":"...","origin":"..."} | {"file":"..."}:
 *                                     200 {"policy":{"name","hash"}}; 400 (old one kept); 404
 *   PUT    /v1/sandboxes/{id}/network {"network": {"allow_internet_access"?,"allow_out"?,
 *                                     "deny_out"?} | null, "update"?: ID, "api_key_id"?: ID,
 *                                     "generation"?: N}:
 *                                     replaces the E2B fields (null: none) atomically; the
 *                                     sandbox's established connections are judged again
 *                                     (egress_set_network). 200 {"policy":{"name","hash"},
 *                                     "network"}; 400 (the old fields stay); 404
 *   POST   /v1/reload                 re-reads file-based policies: 200 {"reloaded":[...],
 *                                     "failed":[{"sandbox","error"}]}
 *   POST   /v1/audit/sync             204 once every record so far is on disk
 *   POST   /v1/audit/checkpoint       204 once a signed checkpoint is written
 *   POST   /v1/audit/records          a record of airlockd's ({"type":"volume"|"lifecycle"|
 *                                     "cluster","event",...}):
 *                                     204 once it is in the log and on disk; 400 refused
 *                                     (egress_audit_controlplane); 503 the log fails
 * Errors use common/http's {"code": status, "message": "..."} shape.
 */
#include "admin.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/percent.h"
#include "common/util.h"
#include "decide.h"
#include "egress.h"

#define ADMIN_MAX_BODY (4u << 20)

struct egress_admin {
    struct egress *e;
    struct al_http_server *srv;
    char path[512];
};

static int admin__parse_ip(const char *s, struct egress_ip *ip)
{
    memset(ip, 0, sizeof *ip);
    if (inet_pton(AF_INET, s, ip->addr) == 1) {
        ip->family = 4;
        return 0;
    }
    if (inet_pton(AF_INET6, s, ip->addr) == 1) {
        /* An IPv4-mapped address names the IPv4 sandbox. */
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(ip->addr, mapped, 12) == 0) {
            memmove(ip->addr, ip->addr + 12, 4);
            memset(ip->addr + 4, 0, 12);
            ip->family = 4;
        } else {
            ip->family = 6;
        }
        return 0;
    }
    return -EINVAL;
}

/* Policy source from {"yaml":...,"origin":...} or {"file":...}. */
static int admin__policy_src(json_t *o, struct egress_policy_src *src, struct al_error *err)
{
    static const char *const keys[] = {"yaml", "origin", "file", NULL};
    if (al_json_check_keys(o, keys, "policy", err) < 0)
        return -EINVAL;
    *src = (struct egress_policy_src){0};
    if (al_json_get_str(o, "yaml", false, &src->yaml, "policy", err) < 0 ||
        al_json_get_str(o, "origin", false, &src->origin, "policy", err) < 0 ||
        al_json_get_str(o, "file", false, &src->file, "policy", err) < 0)
        return -EINVAL;
    if (!!src->yaml == !!src->file)
        return al_error_set(err, -EINVAL,
                            "policy: give exactly one of \"yaml\" (the policy text) "
                            "or \"file\" (a path the proxy reads and re-reads on reload)");
    if (src->yaml)
        src->len = json_string_length(json_object_get(o, "yaml"));
    return 0;
}

static void admin__register(struct al_http_req *req, struct egress_admin *a)
{
    struct al_error err = {0};
    json_t *body = al_json_parse(req->body.data ? req->body.data : "", req->body.len, &err);
    if (!body || !json_is_object(body)) {
        json_decref(body);
        al_http_reply_error(req, 400, "the body must be a JSON object: %s", al_error_str(&err));
        return;
    }
    static const char *const keys[] = {"id",          "template",     "addresses", "policy",
                                       "policy_file", "placeholders", "network",   NULL};
    const char *id = NULL, *tmpl = NULL, *pfile = NULL;
    json_t *addrs = NULL, *pol = NULL, *phs = NULL, *net = NULL;
    if (al_json_check_keys(body, keys, "sandbox", &err) < 0 ||
        al_json_get_str(body, "id", true, &id, "sandbox", &err) < 0 ||
        al_json_get_str(body, "template", false, &tmpl, "sandbox", &err) < 0 ||
        al_json_get_arr(body, "addresses", true, &addrs, "sandbox", &err) < 0 ||
        al_json_get_obj(body, "policy", false, &pol, "sandbox", &err) < 0 ||
        al_json_get_str(body, "policy_file", false, &pfile, "sandbox", &err) < 0 ||
        al_json_get_obj(body, "placeholders", false, &phs, "sandbox", &err) < 0 ||
        ((net = json_object_get(body, "network")) && !json_is_null(net) &&
         egress_network_check(net, &err) < 0)) {
        json_decref(body);
        al_http_reply_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    struct egress_ip ips[EGRESS_SANDBOX_MAX_ADDRS_API];
    size_t n = json_array_size(addrs);
    if (n == 0 || n > EGRESS_SANDBOX_MAX_ADDRS_API) {
        json_decref(body);
        al_http_reply_error(req, 400, "sandbox: \"addresses\" needs 1..%d IP addresses",
                            EGRESS_SANDBOX_MAX_ADDRS_API);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(addrs, i));
        if (!s || admin__parse_ip(s, &ips[i]) < 0) {
            json_decref(body);
            al_http_reply_error(req, 400, "sandbox: addresses[%zu] is not an IP address", i);
            return;
        }
    }
    struct egress_register r = {.id = id,
                                .template_name = tmpl,
                                .addrs = ips,
                                .n_addrs = n,
                                .placeholders = phs,
                                .network = json_is_null(net) ? NULL : net};
    if (pol) {
        if (admin__policy_src(pol, &r.policy, &err) < 0) {
            json_decref(body);
            al_http_reply_error(req, 400, "%s", al_error_str(&err));
            return;
        }
        if (pfile) {
            json_decref(body);
            al_http_reply_error(req, 400, "sandbox: give \"policy\" or \"policy_file\", not both");
            return;
        }
    } else if (pfile) {
        r.policy.file = pfile;
    } else {
        json_decref(body);
        al_http_reply_error(req, 400,
                            "sandbox: a policy is required (\"policy\": {\"yaml\": ...} or "
                            "\"policy_file\": PATH); without one all its traffic would be denied");
        return;
    }
    char origin[200];
    if (r.policy.yaml && !r.policy.origin) {
        snprintf(origin, sizeof origin, "sandbox %s policy", id);
        r.policy.origin = origin;
    }
    int rc = egress_register_sandbox(a->e, &r, &err);
    if (rc < 0) {
        json_decref(body);
        al_http_reply_error(req, rc == -EEXIST ? 409 : 400, "%s", al_error_str(&err));
        return;
    }
    json_t *out = egress_stats_json(a->e, id);
    /* What the control plane hands the sandbox's agent: the CA it trusts, the placeholders
     * of its environment (docs/egress-intercept.md). */
    json_t *ix = egress_sandbox_intercept_json(a->e, id);
    if (out && ix)
        json_object_update_new(out, ix);
    else
        json_decref(ix);
    json_decref(body);
    al_http_reply_json(req, 201, out);
}

/* The answer to a change of a sandbox's policy or (network) its network fields: 404, 400
 * (what stays), or 200 {"policy": {...}} (and "network", null when none). */
static void admin__changed(struct al_http_req *req, struct egress_admin *a, const char *id, int rc,
                           const struct al_error *err, bool network)
{
    const char *kept = network ? "the previous network fields stay in force"
                               : "the previous policy stays in force";
    if (rc < 0) {
        al_http_reply_error(req, rc == -ENOENT ? 404 : 400, "%s%s%s%s", al_error_str(err),
                            rc == -ENOENT ? "" : " (", rc == -ENOENT ? "" : kept,
                            rc == -ENOENT ? "" : ")");
        return;
    }
    json_t *sb = egress_stats_json(a->e, id);
    json_t *out = json_object();
    json_object_set(out, "policy", json_object_get(sb, "policy"));
    if (network) {
        json_t *n = json_object_get(sb, "network");
        json_object_set(out, "network", n ? n : json_null());
    }
    json_decref(sb);
    al_http_reply_json(req, 200, out);
}

static void admin__set_policy(struct al_http_req *req, struct egress_admin *a, const char *id)
{
    struct al_error err = {0};
    json_t *body = al_json_parse(req->body.data ? req->body.data : "", req->body.len, &err);
    if (!body || !json_is_object(body)) {
        json_decref(body);
        al_http_reply_error(req, 400, "the body must be a JSON object: %s", al_error_str(&err));
        return;
    }
    struct egress_policy_src src;
    if (admin__policy_src(body, &src, &err) < 0) {
        json_decref(body);
        al_http_reply_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    char org[200];
    if (src.yaml && !src.origin) {
        snprintf(org, sizeof org, "sandbox %s policy", id);
        src.origin = org;
    }
    int rc = egress_set_policy(a->e, id, &src, &err);
    json_decref(body);
    admin__changed(req, a, id, rc, &err, false);
}

/* An update's id or a key id: printable, short (they go into audit records). */
static bool admin__token_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '"' || s[i] == '\\')
            return false;
    return true;
}

static void admin__set_network(struct al_http_req *req, struct egress_admin *a, const char *id)
{
    struct al_error err = {0};
    json_t *body = al_json_parse(req->body.data ? req->body.data : "", req->body.len, &err);
    if (!body || !json_is_object(body)) {
        json_decref(body);
        al_http_reply_error(req, 400, "the body must be a JSON object: %s", al_error_str(&err));
        return;
    }
    static const char *const keys[] = {"network", "update", "api_key_id", "generation", NULL};
    const char *update = NULL, *key = NULL;
    int64_t generation = -1;
    json_t *net = json_object_get(body, "network");
    if (al_json_check_keys(body, keys, "network update", &err) < 0 ||
        al_json_get_str(body, "update", false, &update, "network update", &err) < 0 ||
        al_json_get_str(body, "api_key_id", false, &key, "network update", &err) < 0 ||
        al_json_get_int(body, "generation", false, 0, INT64_MAX, &generation, "network update",
                        &err) < 0) {
        json_decref(body);
        al_http_reply_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    if (!net) {
        json_decref(body);
        al_http_reply_error(req, 400,
                            "network update: \"network\" is required (an object of E2B "
                            "fields, or null for none)");
        return;
    }
    if ((update && !admin__token_ok(update)) || (key && !admin__token_ok(key))) {
        json_decref(body);
        al_http_reply_error(req, 400,
                            "network update: \"update\" and \"api_key_id\" must be 1..64 "
                            "printable characters without spaces or quotes");
        return;
    }
    int rc = egress_set_network(a->e, id, json_is_null(net) ? NULL : net,
                                &(struct egress_net_update){update, key, generation}, &err);
    json_decref(body);
    admin__changed(req, a, id, rc, &err, true);
}

static void admin__controlplane_record(struct al_http_req *req, struct egress_admin *a)
{
    struct al_error err = {0};
    json_t *rec = al_json_parse(req->body.data, req->body.len, &err);
    int rc = rec ? egress_audit_controlplane(a->e, rec, &err) : -EINVAL;
    json_decref(rec);
    if (rc == 0)
        rc = egress_sync_audit(a->e, 5000);
    if (rc == -EINVAL)
        al_http_reply_error(req, 400, "%s", al_error_str(&err));
    else if (rc < 0)
        al_http_reply_error(req, 503, "audit log: %s", err.msg[0] ? err.msg : strerror(-rc));
    else
        al_http_reply(req, 204, NULL, NULL, 0);
}

static void admin__on_body(struct al_http_req *req, int err)
{
    struct egress_admin *a = req->user;
    if (err < 0)
        return; /* the server answered (413) or the peer went away */
    const char *path = req->path;
    if (strcmp(path, "/v1/sandboxes") == 0) {
        admin__register(req, a);
        return;
    }
    if (strcmp(path, "/v1/audit/records") == 0) {
        admin__controlplane_record(req, a);
        return;
    }
    const char *id = path + strlen("/v1/sandboxes/");
    char buf[256];
    bool network = strcmp(strrchr(path, '/'), "/network") == 0;
    size_t l = strlen(id) - strlen(network ? "/network" : "/policy");
    if (l >= sizeof buf) {
        al_http_reply_error(req, 404, "no such sandbox");
        return;
    }
    if (al_percent_decode(id, l, buf, sizeof buf, 0) < 0) {
        al_http_reply_error(req, 400, "bad escape in the sandbox id");
        return;
    }
    if (network)
        admin__set_network(req, a, buf);
    else
        admin__set_policy(req, a, buf);
}

static bool admin__peer_ok(const struct al_http_req *req)
{
    return req->peer.is_unix && (req->peer.uid == 0 || req->peer.uid == geteuid());
}

static void admin__handle(struct al_http_req *req, void *ctx)
{
    struct egress_admin *a = ctx;
    struct egress *e = a->e;
    req->user = a;
    if (!admin__peer_ok(req)) {
        al_http_reply_error(req, 403, "the egress admin API answers only root and uid %u",
                            (unsigned)geteuid());
        return;
    }
    const char *m = req->method, *p = req->path;
    if (strcmp(p, "/v1/health") == 0 && strcmp(m, "GET") == 0) {
        json_t *st = egress_stats_json(e, NULL);
        json_t *audit = json_object_get(st, "audit");
        bool ok = json_is_true(json_object_get(audit, "ok"));
        json_t *out = json_pack("{s:s,s:O,s:O}", "status", ok ? "ok" : "audit_failing", "sandboxes",
                                json_object_get(st, "sandboxes"), "audit", audit);
        json_decref(st);
        al_http_reply_json(req, ok ? 200 : 503, out);
        return;
    }
    if (strcmp(p, "/v1/stats") == 0 && strcmp(m, "GET") == 0) {
        al_http_reply_json(req, 200, egress_stats_json(e, NULL));
        return;
    }
    if (strcmp(p, "/v1/reload") == 0 && strcmp(m, "POST") == 0) {
        json_t *out = json_object();
        egress_reload(e, out);
        al_http_reply_json(req, 200, out);
        return;
    }
    if (strcmp(p, "/v1/audit/sync") == 0 && strcmp(m, "POST") == 0) {
        int rc = egress_sync_audit(e, 5000);
        if (rc < 0)
            al_http_reply_error(req, 503, "audit log: %s", strerror(-rc));
        else
            al_http_reply(req, 204, NULL, NULL, 0);
        return;
    }
    if (strcmp(p, "/v1/audit/records") == 0) {
        if (strcmp(m, "POST") != 0)
            al_http_reply_error(req, 405, "use POST on /v1/audit/records");
        else if (al_http_req_read_body(req, 64 * 1024, admin__on_body) < 0)
            al_http_reply_error(req, 500, "cannot read the body");
        return;
    }
    if (strcmp(p, "/v1/audit/checkpoint") == 0 && strcmp(m, "POST") == 0) {
        int rc = egress_checkpoint_audit(e);
        if (rc == 0)
            rc = egress_sync_audit(e, 5000);
        if (rc < 0)
            al_http_reply_error(req, 503, "audit log: %s", strerror(-rc));
        else
            al_http_reply(req, 204, NULL, NULL, 0);
        return;
    }
    if (strcmp(p, "/v1/sandboxes") == 0) {
        if (strcmp(m, "GET") == 0) {
            al_http_reply_json(req, 200, egress_sandboxes_json(e));
            return;
        }
        if (strcmp(m, "POST") == 0) {
            if (al_http_req_read_body(req, ADMIN_MAX_BODY, admin__on_body) < 0)
                al_http_reply_error(req, 500, "cannot read the body");
            return;
        }
        al_http_reply_error(req, 405, "use GET or POST on /v1/sandboxes");
        return;
    }
    if (strncmp(p, "/v1/sandboxes/", 14) == 0) {
        const char *rest = p + 14;
        const char *slash = strchr(rest, '/');
        if (slash && (strcmp(slash, "/policy") == 0 || strcmp(slash, "/network") == 0)) {
            if (strcmp(m, "PUT") != 0) {
                al_http_reply_error(req, 405, "use PUT on /v1/sandboxes/{id}%s", slash);
                return;
            }
            if (al_http_req_read_body(req, ADMIN_MAX_BODY, admin__on_body) < 0)
                al_http_reply_error(req, 500, "cannot read the body");
            return;
        }
        char id[256];
        if (slash || strlen(rest) >= sizeof id || !*rest) {
            al_http_reply_error(req, 404, "no such resource: %s", p);
            return;
        }
        if (al_percent_decode(rest, strlen(rest), id, sizeof id, 0) < 0) {
            al_http_reply_error(req, 400, "bad escape in the sandbox id");
            return;
        }
        if (strcmp(m, "GET") == 0) {
            json_t *o = egress_stats_json(e, id);
            if (!o)
                al_http_reply_error(req, 404, "no sandbox '%s' is registered", id);
            else
                al_http_reply_json(req, 200, o);
            return;
        }
        if (strcmp(m, "DELETE") == 0) {
            if (egress_unregister_sandbox(e, id) < 0)
                al_http_reply_error(req, 404, "no sandbox '%s' is registered", id);
            else
                al_http_reply(req, 204, NULL, NULL, 0);
            return;
        }
        al_http_reply_error(req, 405, "use GET or DELETE on /v1/sandboxes/{id}");
        return;
    }
    al_http_reply_error(req, 404, "no such resource: %s %s (see the admin API in egress/admin.c)",
                        m, p);
}

int egress_admin_start(struct egress *e, const char *path, struct egress_admin **out,
                       struct al_error *err)
{
    struct egress_admin *a = calloc(1, sizeof *a);
    if (!a)
        return al_error_set(err, -ENOMEM, "out of memory");
    a->e = e;
    snprintf(a->path, sizeof a->path, "%s", path);
    struct al_http_server_opts o = {
        .on_request = admin__handle, .ctx = a, .server_name = "airlock-egress"};
    o.limits.max_body_bytes = ADMIN_MAX_BODY;
    int rc = al_http_server_new(egress_ctl_loop(e), &o, &a->srv);
    if (rc < 0) {
        free(a);
        return al_error_set(err, rc, "admin API: %s", strerror(-rc));
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        al_mkdir_p(dir, 0750);
    }
    if ((rc = al_http_server_listen_unix(a->srv, path, 0660, err)) < 0) {
        al_http_server_close(a->srv, NULL, NULL);
        uv_run(egress_ctl_loop(e), UV_RUN_NOWAIT);
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

static void admin__closed(void *arg)
{
    free(arg);
}

void egress_admin_stop(struct egress_admin *a)
{
    if (!a)
        return;
    unlink(a->path);
    al_http_server_close(a->srv, admin__closed, a);
}
