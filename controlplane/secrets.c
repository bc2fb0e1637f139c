/* controlplane/secrets: see secrets.h. */
#include "secrets.h"

#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "cp.h"
#include "list.h"
#include "policy/policy.h"
#include "vault/vault.h"

#define SECRETS_NAME_HINT                                                                    \
    "a secret name is 1 or more path segments of a-z, 0-9, '.', '_' and '-' (letters are "   \
    "lower-cased; a segment does not start with '.') separated by single '/', e.g. "         \
    "openai-key or team/github-token; names starting with \"sec_\" are reserved for secret " \
    "identifiers"

/* ---- the vault ---------------------------------------------------------------------------- */

int cp_vault_call(struct cp *cp, const struct cp_vault_req *r, int *status, json_t **out,
                  struct al_error *err)
{
    *out = NULL;
    *status = 0;
    char target[4300];
    snprintf(target, sizeof target, "unix:%s/%s", cp->cfg.state_dir, AL_SOCK_VAULT);
    /* wipe: a body carries a secret's value (cp_vault_put wipes its own copy). */
    struct al_http_call_opts o = {.target = target,
                                  .method = r->method,
                                  .path = r->path,
                                  .body = r->body,
                                  .body_len = r->body ? r->body_len : 0,
                                  .timeout_ms = CP_VAULT_MS,
                                  .wipe = r->body != NULL};
    int rc = al_http_call_json(&o, NULL, status, out, err);
    return rc && rc != -EBADMSG ? -ENOTCONN : rc;
}

int cp_vault_put(struct cp *cp, const char *method, const struct cp_vault_secret *s, int *status,
                 json_t **out, struct al_error *err)
{
    const json_t *fields = s->fields;
    const char *value = s->value;
    size_t value_len = s->value_len;
    *out = NULL;
    *status = 0;
    char *m = fields ? json_dumps(fields, JSON_COMPACT) : strdup("{}");
    if (!m)
        return al_error_set(err, -ENOMEM, "out of memory");
    size_t ml = strlen(m);
    size_t b64l = sodium_base64_ENCODED_LEN(value_len, sodium_base64_VARIANT_ORIGINAL);
    size_t cap = ml + b64l + 32;
    char *body = sodium_malloc(cap);
    if (!body) {
        free(m);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    /* {"value_b64":"...",<fields>} */
    size_t o = 0;
    memcpy(body, "{\"value_b64\":\"", 14);
    o += 14;
    sodium_bin2base64(body + o, b64l, (const unsigned char *)value, value_len,
                      sodium_base64_VARIANT_ORIGINAL);
    o += strlen(body + o);
    body[o++] = '"';
    if (ml > 2) {
        body[o++] = ',';
        memcpy(body + o, m + 1, ml - 1); /* the fields without their '{', with the '}' */
        o += ml - 1;
    } else {
        body[o++] = '}';
    }
    free(m);
    char path[VAULT_NAME_MAX + 32];
    snprintf(path, sizeof path, "/v1/secrets/%s", s->name);
    struct cp_vault_req r = {.method = method, .path = path, .body = body, .body_len = o};
    int rc = cp_vault_call(cp, &r, status, out, err);
    sodium_free(body); /* wipes */
    return rc;
}

/* ---- names and shapes --------------------------------------------------------------------- */

void cp_secrets_prefix(const char *key_id, char *out, size_t len)
{
    snprintf(out, len, "%s%s/", VAULT_APIKEY_PREFIX, key_id);
}

int cp_secrets_name(const char *prefix, const char *in, char *name, char *vault,
                    struct al_error *err)
{
    size_t n = in ? strlen(in) : 0, pl = strlen(prefix);
    if (n == 0)
        return al_error_set(err, -EINVAL, "the secret name is empty: %s", SECRETS_NAME_HINT);
    if (n + pl > VAULT_NAME_MAX)
        return al_error_set(err, -EINVAL, "the secret name is too long (%zu bytes, at most %zu)", n,
                            (size_t)VAULT_NAME_MAX - pl);
    int segments = 1;
    for (size_t i = 0; i < n; i++) {
        name[i] = (char)tolower((unsigned char)in[i]);
        segments += in[i] == '/';
    }
    name[n] = '\0';
    /* the prefix has two segments of the vault's 8 */
    if (!policy_secret_name_valid(name, n) || segments > 6)
        return al_error_set(err, -EINVAL, "the secret name is not valid: %s", SECRETS_NAME_HINT);
    if (strncmp(name, "sec_", 4) == 0)
        return al_error_set(err, -EINVAL,
                            "the secret name starts with \"sec_\", which is reserved for secret "
                            "identifiers: %s",
                            SECRETS_NAME_HINT);
    snprintf(vault, VAULT_NAME_MAX + 1, "%s%s", prefix, name);
    return 0;
}

json_t *cp_secrets_json(const json_t *vs, const char *prefix)
{
    const char *vname = json_string_value(json_object_get(vs, "name"));
    size_t pl = strlen(prefix);
    if (!vname || strncmp(vname, prefix, pl) != 0 || !vname[pl])
        return NULL;
    const char *uid = json_string_value(json_object_get(vs, "id"));
    json_t *meta = json_object_get(vs, "metadata");
    /* A secret stored before the vault gave identifiers is known by its name until its next
     * update gives it one (getInfo takes either). */
    return json_pack("{s:s,s:s,s:O,s:o,s:O?,s:O?}", "secretID", uid ? uid : vname + pl, "name",
                     vname + pl, "currentVersion", json_object_get(vs, "current_version"),
                     "metadata", json_is_object(meta) ? json_deep_copy(meta) : json_object(),
                     "createdAt", json_object_get(vs, "created"), "updatedAt",
                     json_object_get(vs, "updated"));
}

/* ---- routes ------------------------------------------------------------------------------- */

/* A failed exchange with the vault as the API's answer. */
void cp_vault_fail(struct al_http_req *req, int rc, int status, const json_t *out,
                   const struct al_error *err, const char *name, const char *rewrite)
{
    const char *m = json_string_value(json_object_get(out, "message"));
    if (rc == -ENOTCONN) {
        cp_rest_error(req, 503,
                      "secrets are kept by airlock-vault, which is not available (%s): check "
                      "vault.mode and `airlock vault status`",
                      al_error_str(err));
    } else if (rc) {
        cp_rest_error(req, 502, "%s", al_error_str(err));
    } else if (status == 403) {
        cp_rest_error(req, 503,
                      "airlock-vault refuses airlockd's change (%s): airlockd needs the vault's "
                      "admin role (vault.args)",
                      m ? m : "403");
    } else if (status == 404) {
        cp_rest_error(req, 404, "secret \"%s\" not found", name);
    } else if (status == 409) {
        cp_rest_error(req, 409, "a secret named \"%s\" already exists: change its value with %s",
                      name, rewrite);
    } else if (status == 400 || status == 507) {
        cp_rest_error(req, status, "%s", m ? m : "the vault refused the secret");
    } else {
        cp_rest_error(req, 502, "airlock-vault answered %d: %s", status, m ? m : "");
    }
}

json_t *cp_vault_secrets(struct cp *cp, struct al_http_req *req)
{
    int status;
    json_t *out;
    struct al_error err = {0};
    int rc = cp_vault_call(cp, &(struct cp_vault_req){.method = "GET", .path = "/v1/secrets"},
                           &status, &out, &err);
    if (rc || status != 200 || !json_is_array(json_object_get(out, "secrets"))) {
        cp_vault_fail(req, rc, status == 200 ? 502 : status, out, &err, "", "Secret.update");
        json_decref(out);
        return NULL;
    }
    json_t *arr = json_incref(json_object_get(out, "secrets"));
    json_decref(out);
    return arr;
}

/* The caller's secret that ref names (its identifier or its name): the vault's metadata of
 * it (caller's), or NULL after answering req (404 for another key's and for a malformed
 * ref, as for an absent one). */
static json_t *secrets__find(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                             const char *ref)
{
    char prefix[64], name[VAULT_NAME_MAX + 1], vname[VAULT_NAME_MAX + 1];
    cp_secrets_prefix(who->key_id, prefix, sizeof prefix);
    if (strncmp(ref, "sec_", 4) == 0) {
        json_t *all = cp_vault_secrets(cp, req);
        if (!all)
            return NULL;
        size_t i;
        json_t *s;
        json_array_foreach(all, i, s)
        {
            const char *uid = json_string_value(json_object_get(s, "id"));
            const char *vn = json_string_value(json_object_get(s, "name"));
            if (uid && vn && strcmp(uid, ref) == 0 && strncmp(vn, prefix, strlen(prefix)) == 0) {
                json_incref(s);
                json_decref(all);
                return s;
            }
        }
        json_decref(all);
        cp_rest_error(req, 404, "secret \"%.64s\" not found", ref);
        return NULL;
    }
    struct al_error err = {0};
    if (cp_secrets_name(prefix, ref, name, vname, &err)) {
        cp_rest_error(req, 404, "secret \"%.64s\" not found (%s)", ref, al_error_str(&err));
        return NULL;
    }
    char path[VAULT_NAME_MAX + 32];
    snprintf(path, sizeof path, "/v1/secrets/%s", vname);
    int status;
    json_t *out;
    int rc = cp_vault_call(cp, &(struct cp_vault_req){.method = "GET", .path = path}, &status, &out,
                           &err);
    if (rc || status != 200) {
        cp_vault_fail(req, rc, status, out, &err, name, "Secret.update");
        json_decref(out);
        return NULL;
    }
    return out;
}

static void secrets__reply(struct al_http_req *req, int status, const json_t *vs,
                           const struct cp_principal *who)
{
    char prefix[64];
    cp_secrets_prefix(who->key_id, prefix, sizeof prefix);
    json_t *o = cp_secrets_json(vs, prefix);
    if (!o) {
        cp_rest_error(req, 502, "airlock-vault's answer does not describe the secret");
        return;
    }
    al_http_reply_json(req, status, o);
}

/* The value's bytes are forwarded and then wiped, here and in the request's buffer
 * (cp_rest_wipe_body). */

/* value (required, a non-empty string) and metadata (optional: an object; the vault checks
 * its limits); false after answering req. */
static bool secrets__fields(struct al_http_req *req, json_t *body, const char *const *keys,
                            const char *what)
{
    struct al_error err = {0};
    if (al_json_check_keys(body, keys, what, &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return false;
    }
    json_t *v = json_object_get(body, "value");
    if (!json_is_string(v) || json_string_length(v) == 0) {
        cp_rest_error(req, 400, "\"value\" (the secret's value, a non-empty string) is required");
        return false;
    }
    if (json_string_length(v) > VAULT_VALUE_MAX) {
        cp_rest_error(req, 400, "the value has %zu bytes, at most %d", json_string_length(v),
                      VAULT_VALUE_MAX);
        return false;
    }
    json_t *m = json_object_get(body, "metadata");
    if (m && !json_is_null(m) && !json_is_object(m)) {
        cp_rest_error(req, 400, "\"metadata\" must be an object of strings: {\"team\": \"ml\"}");
        return false;
    }
    return true;
}

static void secrets__write(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                           const char *method, const char *vname, const char *name, json_t *body)
{
    json_t *fields = json_object(), *m = json_object_get(body, "metadata");
    if (!fields) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    if (strcmp(method, "POST") == 0) {
        char desc[96];
        snprintf(desc, sizeof desc, "E2B API secret of API key %s", who->key_id);
        json_object_set_new(fields, "description", json_string(desc));
    }
    if (json_is_object(m))
        json_object_set(fields, "metadata", m);
    json_t *v = json_object_get(body, "value");
    int status;
    json_t *out;
    struct al_error err = {0};
    struct cp_vault_secret sec = {.name = vname,
                                  .fields = fields,
                                  .value = json_string_value(v),
                                  .value_len = json_string_length(v)};
    int rc = cp_vault_put(cp, method, &sec, &status, &out, &err);
    json_decref(fields);
    cp_rest_wipe_body(req, body, "value");
    if (rc || (status != 200 && status != 201))
        cp_vault_fail(req, rc, status, out, &err, name, "Secret.update");
    else
        secrets__reply(req, strcmp(method, "POST") == 0 ? 201 : 200, out, who);
    json_decref(out);
}

void cp_secrets_create(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       json_t *body)
{
    static const char *const keys[] = {"name", "value", "metadata", NULL};
    if (!secrets__fields(req, body, keys, "the secret")) {
        cp_rest_wipe_body(req, body, "value");
        return;
    }
    json_t *n = json_object_get(body, "name");
    char prefix[64], name[VAULT_NAME_MAX + 1], vname[VAULT_NAME_MAX + 1];
    cp_secrets_prefix(who->key_id, prefix, sizeof prefix);
    struct al_error err = {0};
    if (!json_is_string(n) || cp_secrets_name(prefix, json_string_value(n), name, vname, &err)) {
        cp_rest_wipe_body(req, body, "value");
        cp_rest_error(req, 400, "%s",
                      json_is_string(n) ? al_error_str(&err)
                                        : "\"name\" (the secret's name, a string) is required");
        return;
    }
    secrets__write(cp, req, who, "POST", vname, name, body);
}

void cp_secrets_update(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *ref, json_t *body)
{
    static const char *const keys[] = {"value", "metadata", NULL};
    if (!secrets__fields(req, body, keys, "the update")) {
        cp_rest_wipe_body(req, body, "value");
        return;
    }
    json_t *vs = secrets__find(cp, req, who, ref);
    if (!vs) {
        cp_rest_wipe_body(req, body, "value");
        return;
    }
    char vname[VAULT_NAME_MAX + 1], prefix[64];
    cp_secrets_prefix(who->key_id, prefix, sizeof prefix);
    snprintf(vname, sizeof vname, "%s", json_string_value(json_object_get(vs, "name")));
    json_decref(vs);
    secrets__write(cp, req, who, "PUT", vname, vname + strlen(prefix), body);
}

void cp_secrets_get(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                    const char *ref)
{
    json_t *vs = secrets__find(cp, req, who, ref);
    if (!vs)
        return;
    secrets__reply(req, 200, vs, who);
    json_decref(vs);
}

void cp_secrets_delete(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *ref)
{
    json_t *vs = secrets__find(cp, req, who, ref);
    if (!vs)
        return;
    char path[VAULT_NAME_MAX + 32], prefix[64];
    cp_secrets_prefix(who->key_id, prefix, sizeof prefix);
    const char *vname = json_string_value(json_object_get(vs, "name"));
    snprintf(path, sizeof path, "/v1/secrets/%s", vname);
    int status;
    json_t *out;
    struct al_error err = {0};
    int rc = cp_vault_call(cp, &(struct cp_vault_req){.method = "DELETE", .path = path}, &status,
                           &out, &err);
    if (rc || status != 200)
        cp_vault_fail(req, rc, status, out, &err, vname + strlen(prefix), "Secret.update");
    else
        al_http_reply(req, 204, NULL, NULL, 0);
    json_decref(out);
    json_decref(vs);
}

void cp_secrets_list(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    char prefix[64], after[VAULT_NAME_MAX + 1] = "", buf[VAULT_NAME_MAX + 1];
    cp_secrets_prefix(who->key_id, prefix, sizeof prefix);
    size_t limit = CP_LIST_DEFAULT_LIMIT;
    char lim[32];
    int q = al_http_query_get(req->query, "limit", lim, sizeof lim);
    if (q == 0 && lim[0]) {
        char *end;
        errno = 0;
        long l = strtol(lim, &end, 10);
        if (*end || errno || l < 1 || l > CP_LIST_MAX_LIMIT) {
            cp_rest_error(req, 400, "limit: \"%.32s\" must be an integer from 1 to %d", lim,
                          CP_LIST_MAX_LIMIT);
            return;
        }
        limit = (size_t)l;
    } else if (q && q != -ENOENT) {
        cp_rest_error(req, 400, "limit: must be an integer from 1 to %d", CP_LIST_MAX_LIMIT);
        return;
    }
    q = al_http_query_get(req->query, "nextToken", after, sizeof after);
    struct al_error err = {0};
    char vname[VAULT_NAME_MAX + 1];
    if (q == 0 && after[0] && cp_secrets_name(prefix, after, buf, vname, &err)) {
        cp_rest_error(req, 400,
                      "nextToken: not a token this server issued (pass the x-next-token header "
                      "of the previous page unchanged)");
        return;
    }
    if (q && q != -ENOENT) {
        cp_rest_error(req, 400, "nextToken: not a token this server issued");
        return;
    }
    if (q)
        after[0] = '\0';
    else if (after[0])
        snprintf(after, sizeof after, "%s", buf); /* canonical, as the names compared */
    json_t *all = cp_vault_secrets(cp, req);
    if (!all)
        return;
    /* The vault lists by name, so the caller's are in name order. */
    json_t *arr = json_array();
    char next[VAULT_NAME_MAX + 1] = "";
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s)
    {
        json_t *o = cp_secrets_json(s, prefix);
        if (!o)
            continue;
        const char *n = json_string_value(json_object_get(o, "name"));
        if (after[0] && strcmp(n, after) <= 0) {
            json_decref(o);
            continue;
        }
        if (json_array_size(arr) == limit) {
            json_decref(o);
            const json_t *last = json_array_get(arr, limit - 1);
            snprintf(next, sizeof next, "%s", json_string_value(json_object_get(last, "name")));
            break;
        }
        json_array_append_new(arr, o);
    }
    json_decref(all);
    cp_rest_reply_page(req, arr, next);
}
