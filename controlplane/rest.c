/* controlplane/rest: the E2B REST API of airlockd (E2B-PROTOCOL.md section 2).
 *
 * Owns: routing of every request that is not data-plane traffic (proxy.c decides that
 * first), authentication, request bodies (chunked ones too, capped), validation of create
 * requests (unknown fields are errors; fields airlock cannot honour are a 400 that says
 * so), and the JSON shapes the SDKs parse: Sandbox, SandboxDetail, ListedSandbox,
 * SandboxMetric, SandboxLogs and TemplateAliasResponse (the template build API and its
 * shapes are builds.c's). Errors are {"code": status, "message": "..."}; a 2xx without
 * a body is 204. Both SDK generations: POST /sandboxes and /v2/sandboxes, GET /sandboxes
 * and /v2/sandboxes, POST /sandboxes/{id}/connect and /v2/sandboxes/{id}/connect. The
 * shape of a network update (PUT /sandboxes/{id}/network); netupdate.c applies it.
 */
#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json.h"
#include "common/log.h"
#include "common/percent.h"
#include "common/util.h"
#include "builds.h"
#include "cluster.h"
#include "console.h"
#include "cp.h"
#include "transforms.h"
#include "events.h"
#include "webhooks.h"
#include "list.h"
#include "logs.h"
#include "logstream.h"
#include "sse.h"
#include "metrics.h"
#include "policysel.h"
#include "secrets.h"
#include "snapshots.h"
#include "store.h"
#include "templates.h"
#include "volumes.h"

#define REST_MAX_BODY (1u << 20)

static struct cp_metrics *rest__api_metrics;

void cp_rest_wipe_body(struct al_http_req *req, json_t *body, const char *field)
{
    json_t *v = body ? json_object_get(body, field) : NULL;
    if (json_is_string(v))
        sodium_memzero((char *)json_string_value(v), json_string_length(v));
    if (req->body.data)
        sodium_memzero(req->body.data, req->body.len);
}

void cp_rest_error(struct al_http_req *req, int status, const char *fmt, ...)
{
    if (rest__api_metrics)
        cp_metrics_api(rest__api_metrics, status);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *b = json_pack("{s:i,s:s}", "code", status, "message", msg);
    al_http_reply_json(req, status, b);
}

static json_t *rest__time(uint64_t ns)
{
    char buf[40];
    al_time_rfc3339(buf, sizeof buf, ns);
    return json_string(buf);
}

static const char *rest__state(const struct cp_sandbox *sb)
{
    return sb->rec.state == CP_SB_PAUSED ? "paused" : "running";
}

json_t *cp_rest_sandbox_json(const struct cp_sandbox *sb)
{
    const struct cp *cp = sb->cp;
    json_t *o = json_object();
    json_object_set_new(o, "sandboxID", json_string(sb->rec.id));
    json_object_set_new(o, "templateID", json_string(sb->rec.template_id));
    json_object_set_new(o, "alias", json_string(sb->rec.template_id));
    json_object_set_new(o, "clientID", json_string("airlock"));
    json_object_set_new(o, "envdVersion", json_string(CP_ENVD_VERSION));
    json_object_set_new(o, "envdAccessToken", json_string(sb->rec.token));
    json_object_set_new(o, "domain",
                        cp->cfg.domain && cp->cfg.domain[0] ? json_string(cp->cfg.domain)
                                                            : json_null());
    /* Derived from the envd token (the agent derives the same): it opens the sandbox's
     * other ports (E2B-Traffic-Access-Token) and nothing else. */
    char traffic[AL_HTTP_TRAFFIC_TOKEN_LEN + 1];
    al_http_traffic_token(sb->rec.token, strlen(sb->rec.token), traffic);
    json_object_set_new(o, "trafficAccessToken", json_string(traffic));
    return o;
}

static void rest__common(const struct cp_sandbox *sb, json_t *o)
{
    json_object_set_new(o, "cpuCount", json_integer(sb->rec.cpu_count));
    json_object_set_new(o, "memoryMB", json_integer(sb->rec.memory_mb));
    json_object_set_new(o, "diskSizeMB", json_integer(sb->rec.disk_mb));
    json_object_set_new(o, "startedAt", rest__time(sb->rec.started_ns));
    json_object_set_new(o, "endAt", rest__time(sb->rec.end_ns));
    json_object_set_new(o, "state", json_string(rest__state(sb)));
    json_object_set(o, "metadata", sb->rec.metadata ? sb->rec.metadata : json_object());
    json_object_set_new(o, "volumeMounts", cp_volumes_mounts_json(sb->rec.volumes));
}

json_t *cp_rest_detail_json(const struct cp_sandbox *sb)
{
    json_t *o = cp_rest_sandbox_json(sb);
    rest__common(sb, o);
    json_object_set_new(o, "allowInternetAccess",
                        sb->rec.allow_internet < 0 ? json_null()
                                                   : json_boolean(sb->rec.allow_internet));
    if (sb->rec.network) {
        /* The transforms' secret names are the proxy's business; "rules" shows the domains
         * and header names, every value "[sealed]". */
        json_t *n = json_copy(sb->rec.network);
        json_object_del(n, "transforms");
        json_object_set_new(o, "network", n);
    }
    /* airlock's: the number of network updates applied (If-Match of updateNetwork) */
    json_object_set_new(o, "networkGeneration", json_integer((json_int_t)sb->rec.net_generation));
    json_object_set_new(o, "lifecycle",
                        json_pack("{s:b,s:s}", "autoResume", sb->rec.auto_resume, "onTimeout",
                                  sb->rec.on_timeout_pause ? "pause" : "kill"));
    return o;
}

static json_t *rest__listed_json(const struct cp_sandbox *sb)
{
    json_t *o = json_object();
    json_object_set_new(o, "sandboxID", json_string(sb->rec.id));
    json_object_set_new(o, "templateID", json_string(sb->rec.template_id));
    json_object_set_new(o, "alias", json_string(sb->rec.template_id));
    json_object_set_new(o, "clientID", json_string("airlock"));
    json_object_set_new(o, "envdVersion", json_string(CP_ENVD_VERSION));
    rest__common(sb, o);
    return o;
}

/* ---- request context -------------------------------------------------------------------- */

enum rest_route {
    R_CREATE_V1 = 1,
    R_CREATE_V2,
    R_CONNECT,
    R_RESUME,
    R_TIMEOUT,
    R_REFRESH,
    R_PAUSE,
    R_SNAPSHOT,    /* POST /sandboxes/{id}/snapshots */
    R_ROLLBACK,    /* POST /sandboxes/{id}/rollback */
    R_FORK,        /* POST /sandboxes/{id}/fork */
    R_NETWORK,     /* PUT /sandboxes/{id}/network */
    R_TPL_REQUEST, /* POST /v3/templates */
    R_TPL_TRIGGER, /* POST /v2/templates/{id}/builds/{buildID} */
    R_TPL_TAGS,    /* POST and DELETE /templates/tags */
    R_SECRET_NEW,  /* POST /secrets */
    R_SECRET_SET,  /* POST /secrets/{secretID} */
    R_WEBHOOK_NEW, /* POST /events/webhooks */
    R_WEBHOOK_SET, /* PATCH /events/webhooks/{id} */
    R_KEY_NEW,     /* POST /admin/keys */
    R_VAULT_WRITE, /* POST and PUT /admin/vault/{name} */
};

struct rest_ctx {
    struct cp *cp;
    struct cp_principal who;
    enum rest_route route;
    char id[256]; /* a sandbox, template or secret */
    char build_id[40];
};

static struct cp_sandbox *rest__find(struct cp *cp, struct al_http_req *req, const char *id)
{
    struct cp_sandbox *sb = cp_sandbox_id_valid(id) ? cp_sandbox_get(cp, id) : NULL;
    if (!sb || sb->rec.state == CP_SB_CREATING || sb->rec.state == CP_SB_STOPPING) {
        cp_rest_error(req, 404, "sandbox \"%s\" not found", id);
        return NULL;
    }
    return sb;
}

static json_t *rest__body(struct al_http_req *req, bool required)
{
    if (req->body.len == 0) {
        if (required) {
            cp_rest_error(req, 400, "a JSON object body is required");
            return NULL;
        }
        return json_object();
    }
    struct al_error err = {0};
    json_t *b = al_json_parse(req->body.data, req->body.len, &err);
    if (!b) {
        cp_rest_error(req, 400, "the body is not JSON: %s", al_error_str(&err));
        return NULL;
    }
    if (!json_is_object(b)) {
        json_decref(b);
        cp_rest_error(req, 400, "the body must be a JSON object");
        return NULL;
    }
    return b;
}

/* E2B's "memory" of a pause or a resume: -1 absent (or null), else 0 or 1. */
static int rest__memory(const json_t *b, int *out, struct al_error *err)
{
    json_t *v = json_object_get(b, "memory");
    *out = -1;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return al_error_set(err, -EINVAL, "\"memory\" must be true or false");
    *out = json_is_true(v);
    return 0;
}

/* A timeout in seconds: an integer >= 0 (JSON numbers like 30.0 are accepted). */
static int rest__seconds(const json_t *b, const char *key, bool *given, uint64_t *out,
                         struct al_error *err)
{
    json_t *v = json_object_get(b, key);
    *given = false;
    if (!v || json_is_null(v))
        return 0;
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v))
        d = json_real_value(v);
    else
        return al_error_set(err, -EINVAL, "\"%s\" must be a number of seconds", key);
    if (d < 0 || d > 31536000.0 || d != (double)(uint64_t)d)
        return al_error_set(err, -EINVAL,
                            "\"%s\" must be a whole number of seconds from 0 to "
                            "31536000",
                            key);
    *out = (uint64_t)d;
    *given = true;
    return 0;
}

static int rest__string_map(const json_t *b, const char *key, size_t max_n, size_t max_k,
                            size_t max_v, json_t **out, struct al_error *err)
{
    json_t *v = json_object_get(b, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return al_error_set(err, -EINVAL, "\"%s\" must be an object of strings", key);
    if (json_object_size(v) > max_n)
        return al_error_set(err, -E2BIG, "\"%s\": at most %zu entries", key, max_n);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x))
            return al_error_set(err, -EINVAL, "\"%s\".\"%.64s\" must be a string", key, k);
        if (strlen(k) == 0 || strlen(k) > max_k)
            return al_error_set(err, -EINVAL, "\"%s\": keys must have 1..%zu bytes", key, max_k);
        if (json_string_length(x) > max_v)
            return al_error_set(err, -E2BIG,
                                "\"%s\".\"%.64s\": values are limited to %zu "
                                "bytes",
                                key, k, max_v);
        if (strlen(json_string_value(x)) != json_string_length(x))
            return al_error_set(err, -EINVAL, "\"%s\".\"%.64s\" contains a NUL byte", key, k);
    }
    *out = v;
    return 0;
}

static int rest__string_list(const json_t *o, const char *key, const char *what,
                             struct al_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v) || json_array_size(v) > 256)
        return al_error_set(err, -EINVAL, "%s.%s must be a list of at most 256 strings", what, key);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x)
    {
        if (!json_is_string(x) || json_string_length(x) == 0 || json_string_length(x) > 260)
            return al_error_set(err, -EINVAL, "%s.%s[%zu] must be a non-empty string", what, key,
                                i);
    }
    return 0;
}

/* The E2B network object: what narrows egress is validated here (policysel.c checks the
 * entries themselves); what airlock cannot do is refused with the reason. */
static int rest__network(const json_t *n, struct al_error *err)
{
    if (!json_is_object(n))
        return al_error_set(err, -EINVAL, "\"network\" must be an object");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)n, k, v)
    {
        if (strcmp(k, "allowOut") == 0 || strcmp(k, "denyOut") == 0) {
            if (rest__string_list(n, k, "network", err))
                return -EINVAL;
        } else if (strcmp(k, "allowPublicTraffic") == 0) {
            /* Every request to a sandbox needs its access token (checked by the agent and
             * here); public (token-less) traffic is never allowed, whatever this says. */
            if (!json_is_boolean(v) && !json_is_null(v))
                return al_error_set(err, -EINVAL, "network.allowPublicTraffic must be a boolean");
        } else if (strcmp(k, "maskRequestHost") == 0) {
            if (!json_is_string(v) && !json_is_null(v))
                return al_error_set(err, -EINVAL, "network.maskRequestHost must be a string");
        } else if (strcmp(k, "httpsPorts") == 0) {
            if (!json_is_array(v) && !json_is_null(v))
                return al_error_set(err, -EINVAL, "network.httpsPorts must be a list");
            if (json_array_size(v))
                return al_error_set(err, -EINVAL,
                                    "network.httpsPorts is not supported: airlock "
                                    "forwards sandbox ports as plain HTTP");
        } else if (strcmp(k, "rules") == 0) {
            /* Whether the policy lets these domains get headers is policy_narrow()'s. */
            if (!json_is_null(v) && cp_transforms_check(v, err))
                return -EINVAL;
        } else if (strcmp(k, "egressProxy") == 0) {
            if (!json_is_null(v))
                return al_error_set(err, -EINVAL,
                                    "network.egressProxy is not supported: every "
                                    "sandbox connection goes through airlock's egress proxy");
        } else {
            return al_error_set(err, -EINVAL,
                                "network.%s is not a field airlock knows; remove "
                                "it",
                                k);
        }
    }
    return 0;
}

static void rest__create(struct al_http_req *req, struct rest_ctx *x)
{
    struct cp *cp = x->cp;
    json_t *b = rest__body(req, true);
    if (!b)
        return;
    struct al_error err = {0};
    struct cp_create c;
    memset(&c, 0, sizeof c);
    c.allow_internet = -1;
    c.who = x->who;
    const char *tpl = NULL;
    json_t *v;
    bool given = false;
    const char *k;
    int rc = 0;
    json_object_foreach(b, k, v)
    {
        static const char *const known[] = {"templateID",   "timeout",
                                            "metadata",     "envVars",
                                            "autoPause",    "autoPauseMemory",
                                            "autoResume",   "allow_internet_access",
                                            "network",      "secure",
                                            "mcp",          "iam",
                                            "volumeMounts", NULL};
        bool ok = false;
        for (const char *const *p = known; *p; p++)
            ok |= strcmp(*p, k) == 0;
        if (!ok) {
            rc = al_error_set(&err, -EINVAL,
                              "\"%s\" is not a field of a sandbox creation "
                              "request that airlock knows; remove it",
                              k);
            goto bad;
        }
    }
    if ((rc = al_json_get_str(b, "templateID", true, &tpl, "sandbox", &err)))
        goto bad;
    if (!cp_template_ref_valid(tpl)) {
        rc = al_error_set(&err, -EINVAL,
                          "templateID \"%.64s\" is not a template name "
                          "(letters, digits, '.', '_', '-'; NAME:TAG for a tag)",
                          tpl);
        goto bad;
    }
    snprintf(c.template_id, sizeof c.template_id, "%s", tpl);
    if ((rc = rest__seconds(b, "timeout", &given, &c.timeout_s, &err)))
        goto bad;
    c.timeout_given = given;
    if (given && c.timeout_s == 0) {
        rc = al_error_set(&err, -EINVAL, "\"timeout\" must be at least 1 second");
        goto bad;
    }
    if ((rc = rest__string_map(b, "metadata", 128, 256, 4096, &c.metadata, &err)) ||
        (rc = rest__string_map(b, "envVars", 1024, 256, 128 * 1024, &c.env_vars, &err)))
        goto bad;
    if ((v = json_object_get(b, "autoPause")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            rc = al_error_set(&err, -EINVAL, "\"autoPause\" must be a boolean");
            goto bad;
        }
        c.auto_pause = json_is_true(v);
    }
    if ((v = json_object_get(b, "autoPauseMemory")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            rc = al_error_set(&err, -EINVAL, "\"autoPauseMemory\" must be a boolean");
            goto bad;
        }
        c.auto_pause_fs = json_is_false(v);
    }
    if ((v = json_object_get(b, "autoResume")) && !json_is_null(v)) {
        json_t *en = json_object_get(v, "enabled");
        if (!json_is_object(v) || (en && !json_is_boolean(en)) || json_object_size(v) > 1) {
            rc = al_error_set(&err, -EINVAL, "\"autoResume\" must be {\"enabled\": true|false}");
            goto bad;
        }
        c.auto_resume = json_is_true(en);
        if (c.auto_resume && !c.auto_pause) {
            rc = al_error_set(&err, -EINVAL,
                              "autoResume needs autoPause (the sandbox pauses "
                              "at its timeout and resumes on traffic)");
            goto bad;
        }
    }
    if (c.auto_resume && c.auto_pause_fs) {
        rc = al_error_set(&err, -EINVAL,
                          "autoResume cannot be combined with autoPauseMemory: false: a sandbox "
                          "paused without its memory is not resumed by traffic (resume it with "
                          "Sandbox.connect)");
        goto bad;
    }
    if ((v = json_object_get(b, "allow_internet_access")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            rc = al_error_set(&err, -EINVAL, "\"allow_internet_access\" must be a boolean");
            goto bad;
        }
        c.allow_internet = json_is_true(v);
    }
    if ((v = json_object_get(b, "network")) && !json_is_null(v)) {
        if ((rc = rest__network(v, &err)))
            goto bad;
        c.network = v;
    }
    if ((v = json_object_get(b, "secure")) && !json_is_null(v) && !json_is_boolean(v)) {
        rc = al_error_set(&err, -EINVAL, "\"secure\" must be a boolean");
        goto bad;
    }
    if ((v = json_object_get(b, "mcp")) && !json_is_null(v)) {
        rc = al_error_set(&err, -EINVAL, "\"mcp\" (the MCP gateway) is not supported by airlock");
        goto bad;
    }
    if ((v = json_object_get(b, "iam")) && !json_is_null(v) &&
        json_object_size(json_object_get(v, "tokens")) > 0) {
        rc = al_error_set(&err, -EINVAL,
                          "\"iam\" (workload identity tokens) is not supported "
                          "by airlock");
        goto bad;
    }
    if ((rc = cp_volumes_resolve(cp, json_object_get(b, "volumeMounts"), x->who.key_id, &c.volumes,
                                 &err))) {
        json_decref(b);
        cp_rest_error(req, rc == -EINVAL ? 400 : 500, "%s", al_error_str(&err));
        return;
    }
    cp_lifecycle_create(cp, &c, req, CP_ANSWER_CREATED);
    json_decref(c.volumes);
    json_decref(b);
    return;
bad:
    json_decref(b);
    cp_rest_error(req, 400, "%s", al_error_str(&err));
    (void)rc;
}

static void rest__timeout_like(struct al_http_req *req, struct rest_ctx *x, const char *key)
{
    struct cp_sandbox *sb = rest__find(x->cp, req, x->id);
    if (!sb)
        return;
    json_t *b = rest__body(req, false);
    if (!b)
        return;
    struct al_error err = {0};
    bool given;
    uint64_t s = 0;
    if (rest__seconds(b, key, &given, &s, &err)) {
        json_decref(b);
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    json_decref(b);
    if (!given) {
        if (x->route == R_TIMEOUT) {
            cp_rest_error(req, 400, "\"timeout\" (seconds) is required");
            return;
        }
        s = (x->cp->cfg.default_timeout_ms + 999) / 1000;
    }
    if (s * 1000 > x->cp->cfg.max_timeout_ms) {
        cp_rest_error(req, 400, "%s %llu s is longer than this server allows (%llu s)", key,
                      (unsigned long long)s,
                      (unsigned long long)(x->cp->cfg.max_timeout_ms / 1000));
        return;
    }
    cp_lifecycle_set_timeout(sb, s, x->who.key_id);
    al_http_reply(req, 204, NULL, NULL, 0);
}

static void rest__connect(struct al_http_req *req, struct rest_ctx *x)
{
    struct cp_sandbox *sb = cp_sandbox_id_valid(x->id) ? cp_sandbox_get(x->cp, x->id) : NULL;
    if (!sb || sb->rec.state == CP_SB_CREATING || sb->rec.state == CP_SB_STOPPING) {
        cp_rest_error(req, 404, "sandbox \"%s\" not found", x->id);
        return;
    }
    json_t *b = rest__body(req, false);
    if (!b)
        return;
    struct al_error err = {0};
    bool given;
    uint64_t s = 0;
    json_t *ap = json_object_get(b, "autoPause");
    int memory;
    if (rest__seconds(b, "timeout", &given, &s, &err) || (ap && !json_is_boolean(ap)) ||
        rest__memory(b, &memory, &err)) {
        json_decref(b);
        cp_rest_error(req, 400, "%s",
                      ap && !json_is_boolean(ap) ? "\"autoPause\" must be a "
                                                   "boolean"
                                                 : al_error_str(&err));
        return;
    }
    bool auto_pause = json_is_true(ap);
    json_decref(b);
    struct cp_op_args a = {.req = req,
                           .api = x->route == R_RESUME ? CP_ANSWER_RESUME : CP_ANSWER_CONNECT,
                           .timeout_s = given ? s : 0,
                           .auto_pause = auto_pause,
                           .memory = memory,
                           .key_id = x->who.key_id};
    cp_lifecycle_api_op(sb, CP_OP_RESUME, &a);
}

/* POST /sandboxes/{id}/pause: {} or {"memory": true|false} (E2B's SandboxPauseRequest). */
static void rest__pause(struct al_http_req *req, struct rest_ctx *x)
{
    json_t *b = rest__body(req, false);
    if (!b)
        return;
    struct al_error err = {0};
    int memory;
    const char *k;
    json_t *v;
    int rc = rest__memory(b, &memory, &err);
    json_object_foreach(b, k, v)
    {
        if (!rc && strcmp(k, "memory") != 0)
            rc = al_error_set(&err, -EINVAL,
                              "\"%.64s\" is not a field of a pause request (only \"memory\")", k);
    }
    json_decref(b);
    if (rc) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    struct cp_sandbox *sb = rest__find(x->cp, req, x->id);
    if (!sb)
        return;
    struct cp_op_args a = {
        .req = req, .api = CP_ANSWER_EMPTY, .memory = memory, .key_id = x->who.key_id};
    cp_lifecycle_api_op(sb, CP_OP_PAUSE, &a);
}

/* POST /sandboxes/{id}/fork: E2B's SandboxForkRequest, {"count"?, "timeout"?} (seconds, the
 * copies' lifetime). */
static void rest__fork(struct al_http_req *req, struct rest_ctx *x)
{
    json_t *b = rest__body(req, false);
    if (!b)
        return;
    struct al_error err = {0};
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(b, k, v)
    {
        if (strcmp(k, "count") != 0 && strcmp(k, "timeout") != 0) {
            rc = al_error_set(&err, -EINVAL,
                              "%.64s: not a field of a fork request (count, timeout)", k);
            break;
        }
    }
    json_int_t count = 1;
    v = json_object_get(b, "count");
    if (!rc && v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            rc = al_error_set(&err, -EINVAL, "\"count\" must be a whole number from 1");
        else
            count = json_integer_value(v);
    }
    if (!rc && count > x->cp->cfg.max_fork)
        rc = al_error_set(&err, -EINVAL,
                          "\"count\" %lld is more copies than one fork may ask for on this "
                          "server (%lld, sandboxes.max_fork)",
                          (long long)count, (long long)x->cp->cfg.max_fork);
    bool given = false;
    uint64_t s = 0;
    if (!rc)
        rc = rest__seconds(b, "timeout", &given, &s, &err);
    if (!rc && given && s == 0)
        rc = al_error_set(&err, -EINVAL, "\"timeout\" must be at least 1 second");
    if (!rc && s * 1000 > x->cp->cfg.max_timeout_ms)
        rc = al_error_set(&err, -EINVAL,
                          "timeout %llu s is longer than this server allows (%llu s, "
                          "sandboxes.max_timeout)",
                          (unsigned long long)s,
                          (unsigned long long)(x->cp->cfg.max_timeout_ms / 1000));
    json_decref(b);
    if (rc) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    struct cp_sandbox *sb = rest__find(x->cp, req, x->id);
    if (sb)
        cp_lifecycle_fork(sb, req, (unsigned)count, given, s, &x->who);
}

/* PUT /sandboxes/{id}/network: E2B's SandboxNetworkUpdateConfig. The same fields and
 * refusals as a creation's network object, with allow_internet_access among them. */
static void rest__network_update(struct al_http_req *req, struct rest_ctx *x)
{
    struct cp_sandbox *sb = rest__find(x->cp, req, x->id);
    if (!sb)
        return;
    json_t *b = rest__body(req, true);
    if (!b)
        return;
    struct al_error err = {0};
    int allow_internet = -1;
    json_t *fields = json_object();
    const char *k;
    json_t *v;
    int rc = fields ? 0 : al_error_set(&err, -ENOMEM, "out of memory");
    json_object_foreach(b, k, v)
    {
        if (rc)
            break;
        if (strcmp(k, "allow_internet_access") == 0) {
            if (!json_is_null(v) && !json_is_boolean(v))
                rc = al_error_set(&err, -EINVAL, "\"allow_internet_access\" must be a boolean");
            else if (!json_is_null(v))
                allow_internet = json_is_true(v);
        } else if (strcmp(k, "allowOut") == 0 || strcmp(k, "denyOut") == 0 ||
                   strcmp(k, "rules") == 0 || strcmp(k, "egressProxy") == 0) {
            json_object_set(fields, k, v);
        } else {
            rc = al_error_set(&err, -EINVAL,
                              "\"%s\" is not a field of a network update (allow_internet_access, "
                              "allowOut, denyOut, rules, egressProxy); remove it",
                              k);
        }
    }
    if (!rc)
        rc = rest__network(fields, &err);
    if (rc)
        cp_rest_error(req, 400, "%s", al_error_str(&err));
    else
        cp_network_update(sb, req, fields, allow_internet, x->who.key_id);
    json_decref(fields);
    json_decref(b);
}

static void rest__on_body(struct al_http_req *req, int err)
{
    struct rest_ctx *x = req->user;
    req->user = NULL;
    if (err < 0) {
        free(x);
        return; /* answered by the server (413/408/400) or the peer is gone */
    }
    switch (x->route) {
    case R_CREATE_V1:
    case R_CREATE_V2:
        rest__create(req, x);
        break;
    case R_CONNECT:
    case R_RESUME:
        rest__connect(req, x);
        break;
    case R_TIMEOUT:
        rest__timeout_like(req, x, "timeout");
        break;
    case R_REFRESH:
        rest__timeout_like(req, x, "duration");
        break;
    case R_NETWORK:
        rest__network_update(req, x);
        break;
    case R_FORK:
        rest__fork(req, x);
        break;
    case R_PAUSE:
        rest__pause(req, x);
        break;
    case R_SNAPSHOT: {
        json_t *b = rest__body(req, false);
        char name[128];
        if (b && cp_snapshot_body(req, b, name, sizeof name) == 0) {
            struct cp_sandbox *sb = rest__find(x->cp, req, x->id);
            if (sb)
                cp_lifecycle_snapshot(sb, CP_OP_SNAPSHOT, req, name, x->who.key_id);
        }
        json_decref(b);
        break;
    }
    case R_ROLLBACK: {
        json_t *b = rest__body(req, true);
        char snap[72];
        if (b && cp_rollback_body(req, b, snap, sizeof snap) == 0) {
            struct cp_sandbox *sb = rest__find(x->cp, req, x->id);
            if (sb)
                cp_lifecycle_snapshot(sb, CP_OP_ROLLBACK, req, snap, x->who.key_id);
        }
        json_decref(b);
        break;
    }
    case R_KEY_NEW: {
        json_t *b = rest__body(req, true);
        if (b)
            cp_console_keys_create(x->cp, req, &x->who, b);
        json_decref(b);
        break;
    }
    case R_VAULT_WRITE: {
        json_t *b = rest__body(req, true);
        if (b)
            cp_console_vault_write(x->cp, req, &x->who, x->id, b);
        else
            cp_rest_wipe_body(req, NULL, NULL); /* a value may be in it */
        json_decref(b);
        break;
    }
    case R_SECRET_NEW:
    case R_SECRET_SET:
    case R_WEBHOOK_NEW:
    case R_WEBHOOK_SET: {
        json_t *b = rest__body(req, true);
        if (!b) {
            cp_rest_wipe_body(req, NULL, NULL); /* a value or signing secret may be in it */
            break;
        }
        if (x->route == R_SECRET_NEW)
            cp_secrets_create(x->cp, req, &x->who, b);
        else if (x->route == R_SECRET_SET)
            cp_secrets_update(x->cp, req, &x->who, x->id, b);
        else if (x->route == R_WEBHOOK_NEW)
            cp_webhooks_create(x->cp, req, &x->who, b);
        else
            cp_webhooks_update(x->cp, req, &x->who, x->id, b);
        json_decref(b);
        break;
    }
    case R_TPL_REQUEST:
    case R_TPL_TAGS:
    case R_TPL_TRIGGER: {
        json_t *b = rest__body(req, true);
        if (!b)
            break;
        if (x->route == R_TPL_REQUEST)
            cp_builds_request(x->cp, req, &x->who, b);
        else if (x->route == R_TPL_TAGS)
            cp_builds_tags(x->cp, req, b);
        else
            cp_builds_trigger(x->cp, req, &x->who, x->id, x->build_id, b);
        json_decref(b);
        break;
    }
    }
    free(x);
}

static void rest__with_body2(struct al_http_req *req, struct cp *cp, const struct cp_principal *who,
                             enum rest_route route, const char *id, const char *id2)
{
    struct rest_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    x->cp = cp;
    x->who = *who;
    x->route = route;
    snprintf(x->id, sizeof x->id, "%s", id ? id : "");
    snprintf(x->build_id, sizeof x->build_id, "%s", id2 ? id2 : "");
    req->user = x;
    int rc = al_http_req_read_body(req, REST_MAX_BODY, rest__on_body);
    if (rc < 0) {
        req->user = NULL;
        free(x);
        cp_rest_error(req, 400, "cannot read the request body: %s", strerror(-rc));
    }
}

static void rest__with_body(struct al_http_req *req, struct cp *cp, const struct cp_principal *who,
                            enum rest_route route, const char *id)
{
    rest__with_body2(req, cp, who, route, id, NULL);
}

/* ---- GET handlers ----------------------------------------------------------------------- */

struct rest_list {
    struct cp_list_item *items;
    size_t n, cap;
};

static int rest__collect(void *v, void *arg)
{
    struct cp_sandbox *sb = v;
    struct rest_list *l = arg;
    if (l->n == l->cap)
        return -ENOMEM;
    l->items[l->n++] = (struct cp_list_item){
        .id = sb->rec.id,
        .state = sb->rec.state,
        .started_ns = sb->rec.started_ns,
        .template_id = sb->rec.template_id,
        .metadata = sb->rec.metadata,
        .user = sb,
    };
    return 0;
}

static void rest__list(struct al_http_req *req, struct cp *cp, bool v2)
{
    struct cp_list_query q;
    struct al_error err = {0};
    if (cp_list_query_parse(req->query, v2, &q, &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    struct rest_list l = {.cap = cp_map_count(&cp->sandboxes)};
    l.items = calloc(l.cap ? l.cap : 1, sizeof *l.items);
    if (!l.items) {
        cp_list_query_free(&q);
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    cp_map_foreach(&cp->sandboxes, rest__collect, &l);
    size_t n;
    char next[160];
    cp_list_select(&q, l.items, l.n, &n, next, sizeof next);
    /* A gateway merges the lists of its nodes: it orders them by the exact start time. */
    bool for_gateway = cp_cluster_from_gateway(cp, req);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct cp_sandbox *sb = l.items[i].user;
        json_t *o = rest__listed_json(sb);
        if (for_gateway)
            json_object_set_new(o, CP_CLUSTER_LIST_STARTED_FIELD,
                                json_integer((json_int_t)sb->rec.started_ns));
        json_array_append_new(arr, o);
    }
    free(l.items);
    cp_list_query_free(&q);
    cp_rest_reply_page(req, arr, next);
}

void cp_rest_reply_page(struct al_http_req *req, json_t *arr, const char *next)
{
    char *body = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (!body) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    struct al_http_header h[2] = {{"Content-Type", "application/json"}, {"x-next-token", next}};
    size_t len = strlen(body);
    al_http_resp_start(req, 200, h, next[0] ? 2 : 1, (int64_t)len);
    al_http_resp_write(req, body, len);
    al_http_resp_end(req);
    free(body);
}

bool cp_rest_u64_param(struct al_http_req *req, const char *name, uint64_t *out, bool *has)
{
    char buf[32];
    *has = false;
    int rc = al_http_query_get(req->query, name, buf, sizeof buf);
    if (rc == -ENOENT || (rc == 0 && !buf[0]))
        return true;
    char *end;
    errno = 0;
    unsigned long long v = rc == 0 ? strtoull(buf, &end, 10) : 0;
    if (rc || errno || *end || buf[0] == '-') {
        cp_rest_error(req, 400, "query parameter %s must be a non-negative integer", name);
        return false;
    }
    *out = v;
    *has = true;
    return true;
}

bool cp_rest_bool_param(struct al_http_req *req, const char *name, bool *out)
{
    char buf[8];
    *out = false;
    int rc = al_http_query_get(req->query, name, buf, sizeof buf);
    if (rc == -ENOENT || (rc == 0 && !buf[0]))
        return true;
    if (rc == 0 && (strcmp(buf, "true") == 0 || strcmp(buf, "false") == 0)) {
        *out = buf[0] == 't';
        return true;
    }
    cp_rest_error(req, 400, "query parameter %s must be true or false", name);
    return false;
}

struct rest_metrics_ctx {
    struct al_http_req *req;
    uint64_t start, end;
};

static void rest__metrics_sampled(struct cp_sandbox *sb, int rc, json_t *stats, void *arg)
{
    struct rest_metrics_ctx *x = arg;
    sb->sampling = false;
    if (rc == 0 && stats)
        cp_metrics_add_sample(sb, stats);
    al_http_reply_json(x->req, 200, cp_metrics_sandbox_json(sb, x->start, x->end));
    free(x);
    cp_sb_unref(sb);
}

static void rest__metrics(struct al_http_req *req, struct cp *cp, const char *id)
{
    struct cp_sandbox *sb = rest__find(cp, req, id);
    if (!sb)
        return;
    uint64_t start = 0, end = 0;
    bool hs, he;
    if (!cp_rest_u64_param(req, "start", &start, &hs) || !cp_rest_u64_param(req, "end", &end, &he))
        return;
    if (!hs)
        start = 0;
    if (!he)
        end = 0;
    /* A range that reaches the present gets a fresh sample when the last one is older than
     * a second (a sandbox created a moment ago has metrics at once). */
    uint64_t now = al_wall_ns();
    uint64_t last =
        sb->n_samples ? sb->samples[(sb->sample_head + CP_SAMPLES_MAX - 1) % CP_SAMPLES_MAX].wall_ns
                      : 0;
    struct rest_metrics_ctx *x;
    if (sb->rec.state == CP_SB_RUNNING && sb->started && !sb->busy && !sb->sampling &&
        (!end || end >= now / 1000000000ull) && now - last > 1000000000ull &&
        (x = calloc(1, sizeof *x))) {
        x->req = req;
        x->start = start;
        x->end = end;
        sb->sampling = true;
        cp_sb_ref(sb);
        if (cp->backend->stats(sb, rest__metrics_sampled, x) == 0)
            return;
        sb->sampling = false;
        cp_sb_unref(sb);
        free(x);
    }
    al_http_reply_json(req, 200, cp_metrics_sandbox_json(sb, start, end));
}

static void rest__metrics_many(struct al_http_req *req, struct cp *cp)
{
    char ids[4096];
    int rc = al_http_query_get(req->query, "sandbox_ids", ids, sizeof ids);
    if (rc) {
        cp_rest_error(req, 400, "query parameter sandbox_ids (comma-separated ids) is required");
        return;
    }
    json_t *out = json_object(), *m = json_object();
    json_object_set_new(out, "sandboxes", m);
    char *save = NULL;
    for (char *t = strtok_r(ids, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        struct cp_sandbox *sb = cp_sandbox_id_valid(t) ? cp_sandbox_get(cp, t) : NULL;
        if (!sb || (sb->rec.state != CP_SB_RUNNING && sb->rec.state != CP_SB_PAUSED))
            continue;
        json_t *arr = cp_metrics_sandbox_json(sb, 0, 0);
        size_t n = json_array_size(arr);
        if (n)
            json_object_set(m, t, json_array_get(arr, n - 1));
        json_decref(arr);
    }
    al_http_reply_json(req, 200, out);
}

static void rest__logs(struct al_http_req *req, struct cp *cp, const char *id, bool v2)
{
    struct cp_sandbox *sb = rest__find(cp, req, id);
    if (!sb)
        return;
    struct cp_logs_query q = {.limit = 1000, .forward = true, .min_level = 0};
    uint64_t v = 0;
    bool has, has_limit;
    if (!cp_rest_u64_param(req, v2 ? "cursor" : "start", &v, &has))
        return;
    if (has)
        q.since_ms = v;
    if (!cp_rest_u64_param(req, "limit", &v, &has_limit))
        return;
    if (has_limit)
        q.limit = v > 10000 ? 10000 : (size_t)v;
    if (v2) {
        char buf[256];
        if (al_http_query_get(req->query, "direction", buf, sizeof buf) == 0 && buf[0]) {
            if (strcmp(buf, "forward") == 0)
                q.forward = true;
            else if (strcmp(buf, "backward") == 0)
                q.forward = false;
            else {
                cp_rest_error(req, 400, "direction must be forward or backward");
                return;
            }
        }
        if (al_http_query_get(req->query, "level", buf, sizeof buf) == 0 && buf[0]) {
            int l = cp_logs_level_parse(buf);
            if (l < 0) {
                cp_rest_error(req, 400, "level must be debug, info, warn or error");
                return;
            }
            q.min_level = l;
        }
        if (al_http_query_get(req->query, "search", q.search, sizeof q.search) == -E2BIG) {
            cp_rest_error(req, 400, "search: at most %zu bytes", sizeof q.search - 1);
            return;
        }
    }
    if (cp_sse_wanted(req)) { /* live (logstream.c): airlock's, E2B has no stream */
        cp_logs_stream(cp, req, sb, &q, has_limit);
        return;
    }
    char path[4200];
    cp->backend->log_path(sb, path, sizeof path);
    json_t *entries = cp_logs_read(path, cp->cfg.log_max_bytes, &q);
    json_t *out = json_object();
    if (v2) {
        json_object_set_new(out, "logs", entries);
    } else {
        json_t *lines = json_array();
        size_t i;
        json_t *e;
        json_array_foreach(entries, i, e)
        {
            char *line = cp_logs_entry_line(e);
            if (!line)
                continue;
            json_array_append_new(lines, json_pack("{s:O,s:s}", "timestamp",
                                                   json_object_get(e, "timestamp"), "line", line));
            free(line);
        }
        json_object_set_new(out, "logs", lines);
        json_object_set_new(out, "logEntries", entries);
    }
    al_http_reply_json(req, 200, out);
}

/* ---- templates ----------------------------------------------------------------------------- */

/* GET /templates/aliases/{alias}: what Template.exists asks. A template's alias is its id. */
static void rest__template_alias(struct al_http_req *req, struct cp *cp, const char *raw)
{
    char alias[128];
    if (strlen(raw) >= sizeof alias || strchr(raw, '/')) {
        cp_rest_error(req, 400, "\"%.64s\" is not a template alias", raw);
        return;
    }
    if (al_percent_decode(raw, strlen(raw), alias, sizeof alias, 0) < 0 ||
        !cp_template_id_valid(alias)) {
        cp_rest_error(req, 400,
                      "\"%.64s\" is not a template alias (1..64 of a-z, 0-9, '.', '_', '-', "
                      "starting with a letter or digit)",
                      raw);
        return;
    }
    char dir[4200];
    struct al_error err = {0};
    uint64_t created;
    json_t *doc = NULL;
    /* A template requested through the API exists from then on, built or not (E2B's). */
    if (cp_template_resolve(cp, alias, dir, sizeof dir, &err) &&
        cp_store_tpl_load(cp->store, alias, &created, &doc, NULL)) {
        cp_rest_error(req, err.code == -ENOENT ? 404 : 400, "%s", al_error_str(&err));
        return;
    }
    json_decref(doc);
    al_http_reply_json(req, 200, json_pack("{s:s,s:b}", "templateID", alias, "public", 0));
}

/* ---- router ------------------------------------------------------------------------------- */

static bool rest__is(const char *m, const char *want)
{
    return strcmp(m, want) == 0;
}

bool cp_rest_path_part(const char **pp, char *out, size_t len)
{
    const char *p = *pp, *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || n >= len)
        return false;
    if (al_percent_decode(p, n, out, len, 0) < 0)
        return false;
    *pp = p + n;
    return true;
}

/* Splits "/sandboxes/ID/action" (v2 prefix removed) into its parts; false if the path
 * has another shape. */
static bool rest__split(const char *p, char *id, size_t idlen, char *action, size_t alen)
{
    id[0] = action[0] = '\0';
    if (strncmp(p, "/sandboxes/", 11) != 0)
        return false;
    p += 11;
    if (!cp_rest_path_part(&p, id, idlen))
        return false;
    if (!*p)
        return true;
    p++;
    if (strchr(p, '/') || strlen(p) >= alen || !*p)
        return false;
    snprintf(action, alen, "%s", p);
    return true;
}

static void rest__not_supported(struct al_http_req *req, const char *what)
{
    cp_rest_error(req, 501, "%s is not supported by airlock (see docs/api.md)", what);
}

static void rest__prometheus(struct al_http_req *req, struct cp *cp)
{
    struct al_buf b = AL_BUF_INIT;
    cp_metrics_render(cp, &b);
    al_http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "",
                  b.len);
    al_buf_free(&b);
}

/* /secrets and /secrets/{secretID}: rest is what follows "/secrets". */
/* rest: the path after "/events/webhooks". A POST or PATCH reads its body first. */
static void rest__webhooks(struct al_http_req *req, struct cp *cp, const struct cp_principal *who,
                           const char *rest)
{
    const char *m = req->method;
    if (*rest == '\0' && rest__is(m, "POST")) {
        rest__with_body(req, cp, who, R_WEBHOOK_NEW, NULL);
        return;
    }
    if (*rest == '/' && rest__is(m, "PATCH")) {
        const char *p = rest + 1;
        char id[64];
        if (cp_rest_path_part(&p, id, sizeof id) && *p == '\0') {
            rest__with_body(req, cp, who, R_WEBHOOK_SET, id);
            return;
        }
    }
    cp_webhooks_route(cp, req, who, rest);
}

static void rest__secrets(struct al_http_req *req, struct cp *cp, const struct cp_principal *who,
                          const char *rest)
{
    const char *m = req->method;
    if (!*rest) {
        if (rest__is(m, "GET"))
            cp_secrets_list(cp, req, who);
        else if (rest__is(m, "POST"))
            rest__with_body(req, cp, who, R_SECRET_NEW, NULL);
        else
            cp_rest_error(req, 405, "%s is not allowed on /secrets (GET lists, POST creates)", m);
        return;
    }
    char ref[256];
    const char *p = rest + 1;
    if (!cp_rest_path_part(&p, ref, sizeof ref) || *p) {
        cp_rest_error(req, 404, "no such endpoint: %s %s (a secret is /secrets/{secretID or name})",
                      m, req->path);
        return;
    }
    if (rest__is(m, "GET"))
        cp_secrets_get(cp, req, who, ref);
    else if (rest__is(m, "POST"))
        rest__with_body(req, cp, who, R_SECRET_SET, ref);
    else if (rest__is(m, "DELETE"))
        cp_secrets_delete(cp, req, who, ref);
    else
        cp_rest_error(req, 405,
                      "%s is not allowed on /secrets/{secretID} (GET, POST updates, DELETE)", m);
}

void cp_on_request(struct al_http_req *req, void *ctx)
{
    struct cp *cp = ctx;
    rest__api_metrics = cp->metrics;
    /* A node serves its gateways only; a gateway routes sandbox traffic to the nodes. */
    if (!cp_cluster_node_admit(cp, req) || cp_cluster_gw_data(cp, req))
        return;
    if (cp_proxy_route(cp, req))
        return;
    cp_metrics_api(cp->metrics, 0);
    const char *m = req->method;
    const char *p = req->path;
    bool get = rest__is(m, "GET"), post = rest__is(m, "POST");
    if (cp_console_route(cp, req))
        return;
    /* Unauthenticated: liveness and Prometheus (loopback by default; put a reverse proxy
     * with its own auth in front if the listener is opened wider). */
    if (strcmp(p, "/health") == 0 && get) {
        al_http_reply_json(req, 200,
                           json_pack("{s:s}", "status", cp->stopping ? "stopping" : "ok"));
        return;
    }
    if (strcmp(p, "/metrics") == 0 && get) {
        rest__prometheus(req, cp);
        return;
    }
    if (cp_builds_upload_route(cp, req) || cp_volumes_content_route(cp, req))
        return;
    struct cp_principal who;
    struct al_error err = {0};
    if (cp_auth(cp, req, &who, &err)) {
        cp_rest_error(req,
                      err.code == -EACCES  ? 401
                      : err.code == -EPERM ? 403
                                           : 500,
                      "%s", al_error_str(&err));
        return;
    }
    /* What the key's role may call: one table (auth.c), before any handler. */
    if (cp_auth_role_check(&who, m, p, &err)) {
        al_info("api: refused %s %s to key %s (role %s): not open to its role", m, p, who.key_id,
                cp_role_name(who.role));
        cp_rest_error(req, 403, "%s", al_error_str(&err));
        return;
    }
    if (strcmp(p, "/admin/keys") == 0 && post) {
        rest__with_body(req, cp, &who, R_KEY_NEW, NULL);
        return;
    }
    if (strncmp(p, "/admin/vault/", 13) == 0 && (post || strcmp(m, "PUT") == 0)) {
        rest__with_body(req, cp, &who, R_VAULT_WRITE, p + 13);
        return;
    }
    if (cp_cluster_route(cp, req, &who) || cp_console_api_route(cp, req, &who) ||
        cp_cluster_gw_api(cp, req))
        return;
    bool v2 = strncmp(p, "/v2/", 4) == 0;
    const char *rp = v2 ? p + 3 : p;
    if (strcmp(rp, "/sandboxes") == 0) {
        if (post)
            rest__with_body(req, cp, &who, v2 ? R_CREATE_V2 : R_CREATE_V1, NULL);
        else if (get)
            rest__list(req, cp, v2);
        else
            cp_rest_error(req, 405, "%s is not allowed on %s (GET lists, POST creates)", m, p);
        return;
    }
    if (!v2 && strcmp(rp, "/sandboxes/metrics") == 0 && get) {
        rest__metrics_many(req, cp);
        return;
    }
    char id[64], action[32];
    if (rest__split(rp, id, sizeof id, action, sizeof action)) {
        if (v2) {
            if (rest__is(action, "connect") && post)
                rest__with_body(req, cp, &who, R_CONNECT, id);
            else if (rest__is(action, "logs") && get)
                rest__logs(req, cp, id, true);
            else
                cp_rest_error(req, 404, "no such endpoint: %s %s", m, p);
            return;
        }
        if (!action[0]) {
            if (get) {
                struct cp_sandbox *sb = rest__find(cp, req, id);
                json_t *o = sb ? cp_rest_detail_json(sb) : NULL;
                /* The tokens open the sandbox's data plane: withheld from a role without. */
                if (o && !cp_auth_data_plane(&who)) {
                    json_object_del(o, "envdAccessToken");
                    json_object_del(o, "trafficAccessToken");
                }
                if (o)
                    al_http_reply_json(req, 200, o);
            } else if (rest__is(m, "DELETE")) {
                struct cp_sandbox *sb = rest__find(cp, req, id);
                if (sb)
                    cp_lifecycle_op(sb, CP_OP_KILL, req, CP_ANSWER_EMPTY, 0, false, CP_CAUSE_API,
                                    who.key_id);
            } else {
                cp_rest_error(req, 405, "%s is not allowed on %s (GET, DELETE)", m, p);
            }
            return;
        }
        if (post && rest__is(action, "timeout"))
            rest__with_body(req, cp, &who, R_TIMEOUT, id);
        else if (post && rest__is(action, "refreshes"))
            rest__with_body(req, cp, &who, R_REFRESH, id);
        else if (post && rest__is(action, "pause"))
            rest__with_body(req, cp, &who, R_PAUSE, id);
        else if (post && rest__is(action, "resume"))
            rest__with_body(req, cp, &who, R_RESUME, id);
        else if (post && rest__is(action, "connect"))
            rest__with_body(req, cp, &who, R_CONNECT, id);
        else if (get && rest__is(action, "metrics"))
            rest__metrics(req, cp, id);
        else if (get && rest__is(action, "logs"))
            rest__logs(req, cp, id, false);
        else if (post && rest__is(action, "fork"))
            rest__with_body(req, cp, &who, R_FORK, id);
        else if (rest__is(action, "fork"))
            cp_rest_error(req, 405, "%s is not allowed on %s (POST forks the sandbox)", m, p);
        else if (post && rest__is(action, "snapshots"))
            rest__with_body(req, cp, &who, R_SNAPSHOT, id);
        else if (rest__is(action, "snapshots"))
            cp_rest_error(req, 405, "%s is not allowed on %s (POST takes a snapshot)", m, p);
        else if (post && rest__is(action, "rollback"))
            rest__with_body(req, cp, &who, R_ROLLBACK, id);
        else if (rest__is(action, "rollback"))
            cp_rest_error(req, 405, "%s is not allowed on %s (POST rolls the sandbox back)", m, p);
        else if (rest__is(action, "network") && rest__is(m, "PUT"))
            rest__with_body(req, cp, &who, R_NETWORK, id);
        else if (rest__is(action, "network"))
            cp_rest_error(req, 405, "%s is not allowed on %s (PUT replaces the network fields)", m,
                          p);
        else
            cp_rest_error(req, 404, "no such endpoint: %s %s", m, p);
        return;
    }
    if (strcmp(p, "/events/webhooks") == 0 || strncmp(p, "/events/webhooks/", 17) == 0) {
        rest__webhooks(req, cp, &who, p + 16);
        return;
    }
    if (cp_events_route(cp, req, p))
        return;
    if (strcmp(p, "/secrets") == 0 || strncmp(p, "/secrets/", 9) == 0) {
        rest__secrets(req, cp, &who, p + 8);
        return;
    }
    if (strcmp(p, "/v3/templates") == 0 && post) {
        rest__with_body(req, cp, &who, R_TPL_REQUEST, NULL);
        return;
    }
    if (strcmp(p, "/templates/tags") == 0 && (post || rest__is(m, "DELETE"))) {
        rest__with_body(req, cp, &who, R_TPL_TAGS, NULL);
        return;
    }
    char tid[72], bid[40];
    if (post && cp_builds_trigger_path(p, tid, sizeof tid, bid, sizeof bid)) {
        rest__with_body2(req, cp, &who, R_TPL_TRIGGER, tid, bid);
        return;
    }
    if (cp_snapshots_route(cp, req, &who) || cp_volumes_route(cp, req, &who))
        return;
    if (cp_builds_route(cp, req, &who))
        return;
    if (strncmp(p, "/templates/aliases/", 19) == 0 && get) {
        rest__template_alias(req, cp, p + 19);
        return;
    }
    static const char *const unsupported[] = {"/templates", "/v2/templates", "/v3/templates",
                                              "/teams", NULL};
    for (const char *const *u = unsupported; *u; u++) {
        size_t l = strlen(*u);
        if (strncmp(p, *u, l) == 0 && (p[l] == '\0' || p[l] == '/')) {
            rest__not_supported(req, *u + (strncmp(*u, "/v", 2) == 0 ? 3 : 0));
            return;
        }
    }
    cp_rest_error(req, 404, "no such endpoint: %s %s", m, p);
}
