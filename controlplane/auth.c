/* controlplane/auth: who is calling the control plane.
 *
 * Owns: API-key authentication (X-API-KEY; the key's BLAKE2b digest is looked up, never the
 * key; AIRLOCK_API_KEY from airlockd's environment is one more key, kept as a digest),
 * the cache of keys (dropped whenever another connection, e.g. `airlock apikey revoke`,
 * changed the database), and the local socket's rule (root or airlockd's own uid, by
 * SO_PEERCRED, acts without a key, as "local"). A request without X-API-KEY may carry a
 * console session instead (console.c), which stands for the key it was signed in with.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "console.h"
#include "cp.h"
#include "store.h"

static int auth__free_key(void *v, void *arg)
{
    (void)arg;
    free(v);
    return 0;
}

static void auth__flush(struct cp *cp)
{
    cp_map_foreach(&cp->key_cache, auth__free_key, NULL);
    cp_map_free(&cp->key_cache);
    cp_map_init(&cp->key_cache);
}

int cp_auth(struct cp *cp, const struct al_http_req *req, struct cp_principal *who,
            struct al_error *err)
{
    memset(who, 0, sizeof *who);
    if (req->peer.is_unix) {
        if (req->peer.uid == 0 || req->peer.uid == geteuid()) {
            snprintf(who->key_id, sizeof who->key_id, "local");
            snprintf(who->policies, sizeof who->policies, "*");
            return 0;
        }
        return al_error_set(err, -EACCES, "the local socket serves only root and uid %u",
                            (unsigned)geteuid());
    }
    if (al_http_req_header_count(req, "X-API-KEY") > 1)
        return al_error_set(err, -EACCES, "more than one X-API-KEY header");
    const char *key = al_http_req_header(req, "X-API-KEY");
    if (!key || !*key) {
        int rc = cp_console_auth(cp, req, who, err);
        if (rc != -ENOENT)
            return rc;
        return al_error_set(err, -EACCES,
                            "missing X-API-KEY header (set E2B_API_KEY to a key "
                            "printed by airlockd or made with `airlock apikey create`)");
    }
    size_t kl = strlen(key);
    if (kl > 512)
        return al_error_set(err, -EACCES, "invalid API key");
    uint8_t d[CP_DIGEST_LEN];
    cp_digest(key, kl, d);
    return cp_auth_digest(cp, d, who, err);
}

int cp_auth_digest(struct cp *cp, const uint8_t d[CP_DIGEST_LEN], struct cp_principal *who,
                   struct al_error *err)
{
    memset(who, 0, sizeof *who);
    if (cp->has_env_key && cp_digest_equal(d, cp->env_key_digest)) {
        snprintf(who->key_id, sizeof who->key_id, "env");
        snprintf(who->policies, sizeof who->policies, "*");
        return 0;
    }
    if (cp_store_changed(cp->store))
        auth__flush(cp);
    struct cp_apikey *k = cp_map_get(&cp->key_cache, d, CP_DIGEST_LEN);
    if (!k) {
        struct cp_apikey found;
        struct al_error e2 = {0};
        int rc = cp_store_key_find(cp->store, d, &found, &e2);
        if (rc == -ENOENT)
            return al_error_set(err, -EACCES, "invalid API key");
        if (rc) {
            al_error("authentication: %s", al_error_str(&e2));
            return al_error_set(err, -EIO, "cannot check the API key (state database error)");
        }
        k = malloc(sizeof *k);
        if (!k)
            return al_error_set(err, -ENOMEM, "out of memory");
        *k = found;
        if (cp_map_put(&cp->key_cache, d, CP_DIGEST_LEN, k)) {
            free(k);
            k = NULL;
            return al_error_set(err, -ENOMEM, "out of memory");
        }
        /* Record the first use since airlockd started (not every request: that would be
         * a write per call). */
        cp_store_key_touch(cp->store, found.id, al_wall_ns());
        cp_store_changed(cp->store); /* our own write is not someone else's change */
    }
    if (!cp_digest_equal(k->digest, d))
        return al_error_set(err, -EACCES, "invalid API key");
    if (k->revoked_ns)
        return al_error_set(err, -EACCES, "this API key was revoked");
    snprintf(who->key_id, sizeof who->key_id, "%s", k->id);
    snprintf(who->policies, sizeof who->policies, "%s", k->policies);
    return 0;
}

void cp_auth_free(struct cp *cp)
{
    auth__flush(cp);
    cp_map_free(&cp->key_cache);
}
