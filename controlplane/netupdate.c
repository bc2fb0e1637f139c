/* controlplane/netupdate: a running sandbox's egress fields replaced, E2B's
 * sbx.updateNetwork() (PUT /sandboxes/{id}/network; rest.c checks the body's shape).
 *
 * Owns: E2B's replace semantics (the egress fields given replace the sandbox's, those
 * omitted are cleared: allowOut, denyOut, rules, allow_internet_access; its other network fields,
 * allowPublicTraffic, maskRequestHost, stay as created); the check against the sandbox's
 * policy (an update narrows it exactly as a creation does and can never widen it: what
 * policy_narrow() refuses is a 400 naming the entry); one update at a time per sandbox
 * (409 for another meanwhile, and for a paused sandbox, as E2B answers); the order that
 * keeps the store and airlock-egress agreeing: the new fields are saved first, then sent to
 * the proxy (which applies them to new decisions and judges established connections
 * again), whose refusal or silence undoes the saved change; a restart between the two is
 * healed by the resynchronisation (egressreg.c), which sends the stored fields again. Every
 * update has an id (nu_ and 16 hex digits) named by the proxy's audit records and by the
 * sandbox.lifecycle.updated event, with the API key that asked, and a generation: the
 * sandbox's count of applied updates (0 as created), saved with the fields (so it survives
 * restarts), shown by getInfo (networkGeneration) and in the 204's ETag. Concurrent updates
 * resolve deterministically: one at a time (409 for another meanwhile), and a client that
 * sends If-Match with the generation it read replaces the fields only if it is still the
 * current one (412 otherwise), so that two read-modify-write clients cannot lose an update. Header transforms
 * (network.rules) are replaced too: the update's values are sealed under its id before it
 * is saved, and the replaced ones (or, when it is undone, its own) deleted afterwards.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "egressreg.h"
#include "events.h"
#include "policysel.h"
#include "transforms.h"

struct nu_ctx {
    struct al_http_req *req;
    char id[24];
    char key_id[32];
    /* What the record held before, to undo a change the proxy did not apply. */
    json_t *old_network;
    int old_allow_internet;
    char old_hash[65];
    uint64_t old_generation;
};

static void nu__free(struct nu_ctx *u)
{
    json_decref(u->old_network);
    free(u);
}

/* The record's network object after the update: the fields that are not egress fields
 * stay, allowOut/denyOut/rules are the update's (NULL when nothing is left). */
static json_t *nu__merge(const json_t *old, const json_t *fields)
{
    static const char *const kept[] = {"allowPublicTraffic", "maskRequestHost", "httpsPorts", NULL};
    json_t *n = json_object();
    if (!n)
        return NULL;
    for (const char *const *k = kept; *k; k++) {
        json_t *v = old ? json_object_get(old, *k) : NULL;
        if (v)
            json_object_set(n, *k, v);
    }
    static const char *const given[] = {"allowOut", "denyOut", "rules", NULL};
    for (const char *const *k = given; *k; k++) {
        json_t *v = json_object_get(fields, *k);
        if (v && !json_is_null(v))
            json_object_set_new(n, *k, json_deep_copy(v));
    }
    if (json_object_size(n) == 0) {
        json_decref(n);
        return NULL;
    }
    return n;
}

static void nu__event(struct cp_sandbox *sb, const struct nu_ctx *u)
{
    json_t *f = json_object();
    if (!f)
        return;
    json_object_set_new(f, "updateId", json_string(u->id));
    json_object_set_new(f, "allow_internet_access",
                        sb->rec.allow_internet < 0 ? json_null()
                                                   : json_boolean(sb->rec.allow_internet));
    static const char *const keys[] = {"allowOut", "denyOut", NULL};
    for (const char *const *k = keys; *k; k++) {
        json_t *v = sb->rec.network ? json_object_get(sb->rec.network, *k) : NULL;
        json_object_set(f, *k, v ? v : json_null());
    }
    json_object_set_new(f, "generation", json_integer((json_int_t)sb->rec.net_generation));
    cp_event_emit(sb, CP_EV_UPDATED, CP_CAUSE_API, u->key_id,
                  json_pack("{s:o}", "network_update", f));
}

static void nu__undo(struct cp_sandbox *sb, struct nu_ctx *u)
{
    cp_transforms_drop(sb->cp, sb->rec.network, u->old_network); /* the update's own */
    json_decref(sb->rec.network);
    sb->rec.network = u->old_network;
    u->old_network = NULL;
    sb->rec.allow_internet = u->old_allow_internet;
    sb->rec.net_generation = u->old_generation;
    snprintf(sb->rec.policy_hash, sizeof sb->rec.policy_hash, "%s", u->old_hash);
    if (sb->registered && sb->rec.state != CP_SB_STOPPING)
        cp_sb_save(sb);
}

static void nu__applied(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct nu_ctx *u = sb->netupdate;
    sb->netupdate = NULL;
    if (!u)
        return;
    bool live = sb->registered && sb->rec.state != CP_SB_STOPPING;
    if (rc == -ENOENT) {
        /* Not registered with the proxy right now (it restarted, or the sandbox's
         * registration is being made again): the registration carries the stored fields,
         * and a resynchronisation makes sure one in flight with the old ones gets these. */
        al_info("sandbox %s: update %s saved; the egress proxy does not know the sandbox right "
                "now and gets the new fields with its registration",
                sb->rec.id, u->id);
        if (sb->cp->egress)
            cp_egress_resync(sb->cp->egress);
        rc = 0;
    }
    if (rc == 0) /* the transforms' values the update replaced */
        cp_transforms_drop(sb->cp, u->old_network, sb->rec.network);
    if (rc == 0 && live) {
        nu__event(sb, u);
        al_info("sandbox %s: network fields replaced (update %s, key %s, generation %llu, policy "
                "hash %.12s)",
                sb->rec.id, u->id, u->key_id[0] ? u->key_id : "-",
                (unsigned long long)sb->rec.net_generation, sb->rec.policy_hash);
        char etag[32];
        snprintf(etag, sizeof etag, "\"%llu\"", (unsigned long long)sb->rec.net_generation);
        struct al_http_header h[] = {{"ETag", etag}};
        al_http_resp_start(u->req, 204, h, 1, 0);
        al_http_resp_end(u->req);
    } else if (rc == 0) {
        cp_rest_error(u->req, 404, "sandbox \"%s\" not found (it was killed meanwhile)",
                      sb->rec.id);
    } else {
        nu__undo(sb, u);
        al_warn("sandbox %s: update %s not applied by the egress proxy: %s (the previous network "
                "fields stay)",
                sb->rec.id, u->id, msg && *msg ? msg : strerror(-rc));
        /* A proxy that did not answer in time may still read the request: the
         * resynchronisation compares its fields with the record and sends the record's. */
        if (rc != -EINVAL && sb->cp->egress)
            cp_egress_resync(sb->cp->egress);
        cp_rest_error(u->req, rc == -EINVAL ? 400 : 502,
                      "the egress proxy did not apply the network update: %s (the previous "
                      "network fields stay in force)",
                      msg && *msg ? msg : strerror(-rc));
    }
    nu__free(u);
}

int cp_network_if_match(const char *v, uint64_t generation)
{
    if (!v)
        return 1;
    bool any = false;
    const char *p = v;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '*') {
            p++;
            any = true;
        } else {
            bool q = *p == '"';
            p += q;
            if (*p < '0' || *p > '9')
                return -EINVAL;
            uint64_t n = 0;
            for (; *p >= '0' && *p <= '9'; p++) {
                uint64_t d = (uint64_t)(*p - '0');
                if (n > (UINT64_MAX - d) / 10)
                    return -EINVAL;
                n = n * 10 + d;
            }
            if (q && *p++ != '"')
                return -EINVAL;
            any = any || n == generation;
        }
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            return any ? 1 : 0;
        if (*p++ != ',')
            return -EINVAL;
    }
}

void cp_network_update(struct cp_sandbox *sb, struct al_http_req *req, const json_t *fields,
                       int allow_internet, const char *key_id)
{
    struct cp *cp = sb->cp;
    if (sb->rec.state == CP_SB_PAUSED) {
        cp_rest_error(req, 409,
                      "sandbox \"%s\" is paused: resume it (Sandbox.connect) before changing its "
                      "network",
                      sb->rec.id);
        return;
    }
    if (sb->netupdate) {
        cp_rest_error(req, 409,
                      "another network update of sandbox \"%s\" is in progress: send this one "
                      "again when it has been answered",
                      sb->rec.id);
        return;
    }
    /* A client that read the fields (getInfo's networkGeneration) and sends If-Match with
     * that generation replaces them only if no other update came in between. */
    if (al_http_req_header_count(req, "If-Match") > 1) {
        cp_rest_error(req, 400, "more than one If-Match header: send one, e.g. If-Match: \"3\"");
        return;
    }
    int m = cp_network_if_match(al_http_req_header(req, "If-Match"), sb->rec.net_generation);
    if (m < 0) {
        cp_rest_error(req, 400,
                      "If-Match must name network generations (getInfo's networkGeneration), "
                      "e.g. If-Match: \"3\", or be *");
        return;
    }
    if (m == 0) {
        cp_rest_error(req, 412,
                      "the network of sandbox \"%s\" is at generation %llu, not the one If-Match "
                      "names: another update came first (read it again with getInfo)",
                      sb->rec.id, (unsigned long long)sb->rec.net_generation);
        return;
    }
    char uid[24];
    memcpy(uid, "nu_", 3);
    al_random_hex(uid + 3, 8);
    json_t *n = nu__merge(sb->rec.network, fields), *pending = NULL;
    char hash[65];
    int status = 500;
    struct al_error err = {0};
    /* The update's transforms get secrets of their own (named after it): the current ones
     * stay in use until the proxy has applied the update. */
    if (cp_transforms_prepare(sb->rec.id, uid, n, &pending, &err)) {
        json_decref(n);
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    if (cp_transforms_resolve(cp, key_id ? key_id : "", n, &status, &err)) {
        json_decref(n);
        json_decref(pending);
        cp_rest_error(req, status, "%s", al_error_str(&err));
        return;
    }
    if (cp_policy_check_network(cp, sb->rec.policy_name, n, allow_internet, hash, &status, &err)) {
        json_decref(n);
        json_decref(pending);
        cp_rest_error(req, status, "%s", al_error_str(&err));
        return;
    }
    if (cp_transforms_seal(cp, pending, &err)) {
        json_decref(n);
        cp_rest_error(req, 503, "%s", al_error_str(&err));
        return;
    }
    struct nu_ctx *u = calloc(1, sizeof *u);
    if (!u) {
        cp_transforms_drop(cp, n, sb->rec.network);
        json_decref(n);
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    u->req = req;
    snprintf(u->id, sizeof u->id, "%s", uid);
    snprintf(u->key_id, sizeof u->key_id, "%s", key_id ? key_id : "");
    u->old_network = sb->rec.network;
    u->old_allow_internet = sb->rec.allow_internet;
    u->old_generation = sb->rec.net_generation;
    snprintf(u->old_hash, sizeof u->old_hash, "%s", sb->rec.policy_hash);
    sb->rec.network = n;
    sb->rec.net_generation++;
    sb->rec.allow_internet = allow_internet;
    snprintf(sb->rec.policy_hash, sizeof sb->rec.policy_hash, "%s", hash);
    /* Saved first: what getInfo shows and what a re-registration sends is the new state
     * from now on; the proxy's answer confirms it or undoes it. */
    if (cp_sb_save(sb)) {
        nu__undo(sb, u);
        nu__free(u);
        cp_rest_error(req, 500, "cannot save the sandbox's new network fields");
        return;
    }
    sb->netupdate = u;
    if (!cp->egress || !sb->has_net) {
        /* No proxy decides for this sandbox (no network): nothing to apply. */
        nu__applied(sb, 0, NULL);
        return;
    }
    int rc = cp_egress_set_network(cp->egress, sb, u->id, u->key_id, nu__applied);
    if (rc)
        nu__applied(sb, rc == -ENOMEM ? -ENOMEM : -EIO, "cannot reach the egress proxy");
}
