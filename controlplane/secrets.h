/* controlplane/secrets: E2B's Secret API (/secrets) on airlock-vault, and airlockd's one way
 * of talking to the vault.
 *
 * Owns: the routes GET/POST /secrets and GET/POST/DELETE /secrets/{secretID or name}
 * (Secret.list/create/getInfo/update/destroy, exists = getInfo), their validation, the
 * E2B Secret shape, pagination (limit, nextToken, X-Next-Token), and cp_vault_call.
 *
 * Every secret lives in the vault, nowhere else: the API's secret NAME of API key K is the
 * vault secret keys/K/NAME (VAULT_APIKEY_PREFIX), so each key sees and changes only its own
 * (others are a 404, as if absent), `airlock vault ls` shows them all, and a policy rule
 * can inject one by that vault name. Values are write-only: airlockd forwards the one in a
 * create or update to the vault (base64 in locked memory, wiped once sent, as is the
 * request body) and keeps nothing; no answer carries a value. An update is a new version
 * (the vault keeps the last few); metadata (E2B's limits, checked by the vault) is replaced
 * when an update gives it. secretID is the vault's identifier of the secret (sec_...).
 *
 * The vault is called with blocking calls on airlockd's loop (a local unix socket, bounded
 * by CP_VAULT_MS), as for header transforms: these calls are rare and small.
 */
#ifndef AIRLOCK_CONTROLPLANE_SECRETS_H
#define AIRLOCK_CONTROLPLANE_SECRETS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct cp;
struct cp_principal;
struct al_http_req;

#define CP_VAULT_MS 3000

/* A request to airlock-vault's API (docs/vault.md). */
struct cp_vault_req {
    const char *method;
    const char *path;
    const void *body; /* sent as is (and wiped once sent: it may carry a value), or NULL */
    size_t body_len;
};
/* One exchange with airlock-vault on its socket: 0 with *status and *out (the JSON answer,
 * NULL when empty; the caller's), or < 0 with err (-ENOTCONN: the vault did not answer). */
int cp_vault_call(struct cp *cp, const struct cp_vault_req *r, int *status, json_t **out,
                  struct al_error *err);

/* Every vault secret's metadata (the "secrets" of GET /v1/secrets: names, versions, bound
 * hosts; never a value), or NULL after answering req with why. */
json_t *cp_vault_secrets(struct cp *cp, struct al_http_req *req);
/* Answers req for a vault call that failed (rc < 0) or was refused (status): what went wrong
 * for the secret name, in the API's terms; rewrite is how to change an existing secret's
 * value (for a 409). out is the vault's answer or NULL. */
void cp_vault_fail(struct al_http_req *req, int rc, int status, const json_t *out,
                   const struct al_error *err, const char *name, const char *rewrite);

/* A vault secret as cp_vault_put writes it. */
struct cp_vault_secret {
    const char *name;
    const json_t *fields; /* the request's other members (description, metadata,
                             bound_hosts...), or NULL */
    const char *value;
    size_t value_len;
};
/* Creates (POST) or rotates (PUT) the secret s: its value is added as value_b64 in locked
 * memory and wiped once sent. 0 with *status and *out as for cp_vault_call. */
int cp_vault_put(struct cp *cp, const char *method, const struct cp_vault_secret *s, int *status,
                 json_t **out, struct al_error *err);

/* The routes (rest.c dispatches; body is the parsed JSON object of a POST). ref is the path's
 * {secretID} (percent-decoded). */
void cp_secrets_list(struct cp *cp, struct al_http_req *req, const struct cp_principal *who);
void cp_secrets_create(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       json_t *body);
void cp_secrets_get(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                    const char *ref);
void cp_secrets_update(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *ref, json_t *body);
void cp_secrets_delete(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *ref);

/* ---- pure parts (unit-tested) ------------------------------------------------------------ */
/* "keys/<key_id>" and a slash into out (>= 64 bytes). */
void cp_secrets_prefix(const char *key_id, char *out, size_t len);
/* An API name (E2B: lower-cased before storage) into its canonical form (name, >= 129
 * bytes) and its vault name under prefix (vault, >= 129 bytes). -EINVAL with err saying what
 * is allowed. */
int cp_secrets_name(const char *prefix, const char *in, char *name, char *vault,
                    struct al_error *err);
/* The E2B Secret of a vault secret's metadata (vault_secret_json) under prefix: {"secretID",
 * "name","currentVersion","metadata","createdAt","updatedAt"}. NULL if it is not under
 * prefix. */
json_t *cp_secrets_json(const json_t *vs, const char *prefix);

#endif
