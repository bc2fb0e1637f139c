/* controlplane/console_vault: the vault as the web console shows it (docs/console.md,
 * "Vault"):
 *
 *   GET    /admin/vault         every secret's name, identifier, description, metadata,
 *                               versions and bound hosts, as airlock-vault lists them
 *   POST   /admin/vault/{name}  a new secret {value, description?, metadata?, boundHosts?}
 *   PUT    /admin/vault/{name}  a new version of it (rotate; fields not given are kept,
 *                               "boundHosts": [] clears them)
 *   DELETE /admin/vault/{name}  the secret, every version
 *
 * Owns: these routes and their bodies. Values are write-only: one goes from the request to
 * the vault through cp_vault_put (locked memory, wiped once sent, as is the request body),
 * and no answer carries one; airlockd holds the vault's admin and metadata roles, never the
 * egress role that reads values (docs/vault.md, "Who may read values"), so no route here
 * could return a value even by mistake. Which roles may call them is auth.c's table; each
 * change is logged with the acting key, and the vault's access log records it too.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/percent.h"
#include "console.h"
#include "cp.h"
#include "policy/policy.h"
#include "secrets.h"
#include "vault/vault.h"

#define CVAULT_REWRITE "PUT /admin/vault/{name} (Rotate on the console's Vault page)"

/* The secret name of the path's rest (percent-decoded), or false after answering 400. */
static bool cvault__name(struct al_http_req *req, const char *raw, char *name, size_t len)
{
    size_t n = strlen(raw);
    if (n == 0 || n > 3 * VAULT_NAME_MAX || al_percent_decode(raw, n, name, len, 0) < 0 ||
        !policy_secret_name_valid(name, strlen(name))) {
        cp_rest_error(req, 400,
                      "\"%.128s\" is not a secret name: segments of a-z, 0-9, '.', '_' and '-' "
                      "joined by '/' (github/token), at most %d bytes",
                      raw, VAULT_NAME_MAX);
        return false;
    }
    return true;
}

static void cvault__list(struct cp *cp, struct al_http_req *req)
{
    json_t *all = cp_vault_secrets(cp, req);
    if (all)
        al_http_reply_json(req, 200, json_pack("{s:o}", "secrets", all));
}

static void cvault__delete(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                           const char *name)
{
    char path[VAULT_NAME_MAX + 32];
    snprintf(path, sizeof path, "/v1/secrets/%s", name);
    int status;
    json_t *out = NULL;
    struct al_error err = {0};
    int rc = cp_vault_call(cp, &(struct cp_vault_req){.method = "DELETE", .path = path}, &status,
                           &out, &err);
    if (rc || status != 200) {
        cp_vault_fail(req, rc, status, out, &err, name, CVAULT_REWRITE);
    } else {
        al_info("vault: secret %s deleted by key %s (console)", name, who->key_id);
        al_http_reply(req, 204, NULL, NULL, 0);
    }
    json_decref(out);
}

void cp_console_vault_write(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                            const char *raw, json_t *body)
{
    static const char *const keys[] = {"value", "description", "metadata", "boundHosts", NULL};
    bool create = strcmp(req->method, "POST") == 0;
    char name[VAULT_NAME_MAX + 1];
    struct al_error err = {0};
    json_t *v = json_object_get(body, "value"), *d = json_object_get(body, "description"),
           *m = json_object_get(body, "metadata"), *bh = json_object_get(body, "boundHosts");
    if (!cvault__name(req, raw, name, sizeof name))
        goto out;
    if (al_json_check_keys(body, keys, "the secret", &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        goto out;
    }
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) > VAULT_VALUE_MAX) {
        cp_rest_error(req, 400, "\"value\" (the secret's value, 1 to %d bytes) is required",
                      VAULT_VALUE_MAX);
        goto out;
    }
    if ((d && !json_is_string(d)) || (m && !json_is_object(m)) || (bh && !json_is_array(bh))) {
        cp_rest_error(req, 400,
                      "\"description\" is a string, \"metadata\" an object of strings "
                      "({\"team\": \"ml\"}), \"boundHosts\" an array of host names "
                      "([\"api.github.com\"])");
        goto out;
    }
    /* The vault checks the bound hosts and the metadata's limits, and says what is wrong. */
    json_t *fields = json_object();
    if (d)
        json_object_set(fields, "description", d);
    if (m)
        json_object_set(fields, "metadata", m);
    if (bh)
        json_object_set(fields, "bound_hosts", bh);
    int status;
    json_t *res = NULL;
    struct cp_vault_secret sec = {.name = name,
                                  .fields = fields,
                                  .value = json_string_value(v),
                                  .value_len = json_string_length(v)};
    int rc = cp_vault_put(cp, create ? "POST" : "PUT", &sec, &status, &res, &err);
    json_decref(fields);
    cp_rest_wipe_body(req, body, "value");
    if (rc || status != (create ? 201 : 200)) {
        cp_vault_fail(req, rc, status, res, &err, name, CVAULT_REWRITE);
    } else {
        al_info("vault: secret %s %s by key %s (console)", name, create ? "created" : "rotated",
                who->key_id);
        al_http_reply_json(req, create ? 201 : 200, json_incref(res));
    }
    json_decref(res);
    return;
out:
    cp_rest_wipe_body(req, body, "value");
}

bool cp_console_vault_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    const char *p = req->path, *m = req->method;
    if (strcmp(p, "/admin/vault") == 0) {
        if (strcmp(m, "GET") == 0)
            cvault__list(cp, req);
        else
            cp_rest_error(req, 405, "%s is not allowed on %s (GET lists the secrets)", m, p);
        return true;
    }
    if (strncmp(p, "/admin/vault/", 13) != 0)
        return false;
    char name[VAULT_NAME_MAX + 1];
    if (strcmp(m, "DELETE") == 0) {
        if (cvault__name(req, p + 13, name, sizeof name))
            cvault__delete(cp, req, who, name);
    } else {
        cp_rest_error(req, 405,
                      "%s is not allowed on %s (POST creates the secret, PUT writes a new "
                      "version, DELETE removes it)",
                      m, p);
    }
    return true;
}
