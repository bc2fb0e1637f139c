/* controlplane/auth: who is calling the control plane.
 *
 * Owns: API-key authentication (X-API-KEY; the key's BLAKE2b digest is looked up, never the
 * key; AIRLOCK_API_KEY from airlockd's environment is one more key, kept as a digest),
 * the cache of keys (dropped whenever another connection, e.g. `airlock apikey revoke`,
 * changed the database), and the local socket's rule (root or airlockd's own uid, by
 * SO_PEERCRED, acts without a key, as "local"). A request without X-API-KEY may carry a
 * console session instead (console.c), which stands for the key it was signed in with.
 * Also what each role may call: one table of routes (auth__routes, docs/api.md "Roles"),
 * checked by the router (rest.c) for every authenticated request before any handler runs.
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

void cp_auth_flush(struct cp *cp)
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
            who->role = CP_ROLE_ADMIN;
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
        who->role = CP_ROLE_ADMIN;
        return 0;
    }
    if (cp_store_changed(cp->store))
        cp_auth_flush(cp);
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
    if (!k->role)
        return al_error_set(err, -EACCES,
                            "API key %s has a role this airlockd does not know (`airlock apikey "
                            "ls`); make a new key with `airlock apikey create --role`",
                            k->id);
    snprintf(who->key_id, sizeof who->key_id, "%s", k->id);
    snprintf(who->policies, sizeof who->policies, "%s", k->policies);
    who->role = k->role;
    return 0;
}

/* ---- roles ------------------------------------------------------------------------------- */

#define A  CP_ROLE_ADMIN
#define AO (CP_ROLE_ADMIN | CP_ROLE_OPERATOR)
#define AU (CP_ROLE_ADMIN | CP_ROLE_AUDITOR)

/* What each role may call, first match wins; a request no row matches is admin's only (a
 * route added without a row here stays closed to the other roles). Paths are matched raw,
 * segment by segment: "*" is one non-empty segment, a final "**" any number of them (none
 * too). Method "*" is any method. Fixed segments are compared as the router compares them
 * (undecoded), so a path the table reads one way cannot reach another handler. docs/api.md,
 * "Roles", is this table. */
static const struct auth_route {
    const char *method, *path;
    unsigned roles;
    const char *what; /* for the refusal */
} auth__routes[] = {
    /* Sandboxes: what exists is everyone's to see; a sandbox's details carry its access tokens
     * only for roles with the data plane (cp_auth_data_plane). Its logs are what its processes
     * print: sandbox data. */
    {"GET", "/sandboxes", CP_ROLES_ALL, "listing sandboxes"},
    {"GET", "/v2/sandboxes", CP_ROLES_ALL, "listing sandboxes"},
    {"GET", "/sandboxes/metrics", CP_ROLES_ALL, "sandboxes' metrics"},
    {"GET", "/sandboxes/*", CP_ROLES_ALL, "a sandbox's details"},
    {"GET", "/sandboxes/*/metrics", CP_ROLES_ALL, "a sandbox's metrics"},
    {"*", "/sandboxes/**", AO,
     "creating, changing, connecting to or killing sandboxes, or "
     "reading their logs"},
    {"*", "/v2/sandboxes/**", AO, "creating or connecting to sandboxes, or reading their logs"},
    /* Lifecycle events: everyone's to read; webhooks send them out, set up by who runs
     * sandboxes. */
    {"GET", "/events/sandboxes/**", CP_ROLES_ALL, "reading lifecycle events"},
    {"*", "/events/webhooks/**", AO, "webhooks"},
    /* Secrets: names and metadata to everyone (no answer carries a value); values written and
     * secrets deleted by admins only. */
    {"GET", "/secrets/**", CP_ROLES_ALL, "secrets' names and metadata"},
    {"*", "/secrets/**", A, "writing or deleting secrets"},
    /* Templates and snapshots: read by everyone, built, tagged and deleted by operators. */
    {"GET", "/templates", CP_ROLES_ALL, "listing templates"},
    {"GET", "/templates/aliases/*", CP_ROLES_ALL, "a template's alias"},
    {"GET", "/templates/*", CP_ROLES_ALL, "a template's details"},
    {"GET", "/templates/*/tags", CP_ROLES_ALL, "a template's tags"},
    {"GET", "/templates/*/builds/*/status", CP_ROLES_ALL, "a template build's status and logs"},
    {"*", "/templates/**", AO, "building, tagging or deleting templates and snapshots"},
    {"*", "/v2/templates/**", AO, "building templates"},
    {"*", "/v3/templates/**", AO, "building templates"},
    {"GET", "/snapshots", CP_ROLES_ALL, "listing snapshots"},
    {"*", "/snapshots/**", AO, "snapshots"},
    /* The console's admin endpoints: the overview to everyone, the egress audit log (its
     * records and their verification), the policies and the vault's names to auditors. */
    {"GET", "/admin/overview/**", CP_ROLES_ALL, "the overview"},
    {"GET", "/admin/audit/**", AU, "the egress audit log"},
    {"GET", "/admin/policies/**", AU,
     "the egress policies (their text, findings, explain and test cases)"},
    {"GET", "/admin/policy-reloads/**", AU, "the egress policies' reloads"},
    {"*", "/admin/policy-reloads/**", A, "reloading the egress policies"},
    {"GET", "/admin/vault/**", AU, "the vault's secret names and metadata"},
    {"*", "/admin/vault/**", A, "writing or deleting vault secrets"},
    {"*", "/admin/keys/**", A, "managing API keys"},
    {"*", "/admin/cluster/**", A, "the cluster's nodes (they name its hosts)"},
    /* Volumes: which exist to everyone; made, destroyed and their tokens (which open their
     * content) to operators. */
    {"GET", "/volumes", CP_ROLES_ALL, "listing volumes"},
    {"*", "/volumes", AO, "creating volumes"},
    {"*", "/volumes/**", AO, "a volume's token, or destroying volumes"},
    /* Not supported for anyone (501): say so to every role. */
    {"*", "/teams/**", CP_ROLES_ALL, "teams"},
};

#undef A
#undef AO
#undef AU

/* Whether path matches pattern (above). */
static bool auth__path_match(const char *pat, const char *path)
{
    for (;;) {
        if (*pat != '/' || *path != '/')
            return *pat == '\0' && *path == '\0';
        pat++, path++;
        if (strcmp(pat, "**") == 0)
            return true;
        const char *pe = strchrnul(pat, '/'), *se = strchrnul(path, '/');
        size_t pl = (size_t)(pe - pat), sl = (size_t)(se - path);
        if (pl == 1 && *pat == '*') {
            if (sl == 0)
                return false;
        } else if (pl != sl || memcmp(pat, path, pl) != 0) {
            return false;
        }
        pat = pe, path = se;
    }
}

/* A final "**" matches no segment at all too: "/x" itself. */
static bool auth__match(const struct auth_route *r, const char *method, const char *path)
{
    if (strcmp(r->method, "*") != 0 && strcmp(r->method, method) != 0)
        return false;
    size_t n = strlen(r->path);
    if (n >= 3 && strcmp(r->path + n - 3, "/**") == 0 && strncmp(r->path, path, n - 3) == 0 &&
        path[n - 3] == '\0')
        return true;
    return auth__path_match(r->path, path);
}

static void auth__roles_text(unsigned roles, char *out, size_t len)
{
    static const unsigned all[] = {CP_ROLE_ADMIN, CP_ROLE_OPERATOR, CP_ROLE_AUDITOR};
    size_t n = 0, k = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (roles & all[i])
            k++;
    out[0] = '\0';
    for (size_t i = 0, j = 0; i < sizeof all / sizeof all[0] && n < len; i++) {
        if (!(roles & all[i]))
            continue;
        j++;
        n += (size_t)snprintf(out + n, len - n, "%s%s",
                              j == 1   ? ""
                              : j == k ? " or "
                                       : ", ",
                              cp_role_name(all[i]));
    }
}

int cp_auth_role_check(const struct cp_principal *who, const char *method, const char *path,
                       struct al_error *err)
{
    const struct auth_route *hit = NULL;
    for (size_t i = 0; i < sizeof auth__routes / sizeof auth__routes[0] && !hit; i++)
        if (auth__match(&auth__routes[i], method, path))
            hit = &auth__routes[i];
    unsigned roles = hit ? hit->roles : CP_ROLE_ADMIN;
    if (who->role & roles)
        return 0;
    char need[64];
    auth__roles_text(roles, need, sizeof need);
    return al_error_set(err, -EPERM,
                        "API key %s has the role %s; %s %.200s (%s) needs the role %s (see "
                        "docs/api.md, \"Roles\"; `airlock apikey create --role`)",
                        who->key_id, cp_role_name(who->role), method, path,
                        hit ? hit->what : "a route open to admins only", need);
}

bool cp_auth_data_plane(const struct cp_principal *who)
{
    return (who->role & (CP_ROLE_ADMIN | CP_ROLE_OPERATOR)) != 0;
}

void cp_auth_free(struct cp *cp)
{
    cp_auth_flush(cp);
    cp_map_free(&cp->key_cache);
}
