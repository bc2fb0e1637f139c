/* controlplane/policysel: see policysel.h. */
#include "policysel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/yaml.h"
#include "console.h"
#include "cp.h"
#include "policy/policy.h"

/* A small cache of compiled policies by file: a creation does not re-parse an unchanged
 * policy (parsing is cheap, but a create must be cheaper). */
#define PS_CACHE 32

struct ps_entry {
    char path[4096];
    struct timespec mtime;
    off_t size;
    ino_t ino;
    struct policy *p;
};

static struct ps_entry ps__cache[PS_CACHE];

void cp_policy_cache_clear(void)
{
    for (int i = 0; i < PS_CACHE; i++) {
        if (ps__cache[i].p)
            policy_unref(ps__cache[i].p);
        memset(&ps__cache[i], 0, sizeof ps__cache[i]);
    }
}

bool cp_policy_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= CP_POLICY_NAME_MAX || s[0] == '.' || s[0] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Loads (or finds cached) the policy in path; NULL with err saying why. */
static struct policy *ps__load(const char *path, struct al_error *err)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        al_error_set(err, -errno, "%s", strerror(errno));
        return NULL;
    }
    int slot = -1, empty = -1;
    for (int i = 0; i < PS_CACHE; i++) {
        if (!ps__cache[i].p) {
            if (empty < 0)
                empty = i;
            continue;
        }
        if (strcmp(ps__cache[i].path, path) == 0) {
            slot = i;
            break;
        }
    }
    bool changed = slot >= 0;
    if (slot >= 0) {
        struct ps_entry *e = &ps__cache[slot];
        if (e->size == st.st_size && e->ino == st.st_ino && e->mtime.tv_sec == st.st_mtim.tv_sec &&
            e->mtime.tv_nsec == st.st_mtim.tv_nsec)
            return policy_ref(e->p);
        policy_unref(e->p);
        e->p = NULL;
        empty = slot;
    }
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_file(path, &d);
    if (!p) {
        al_diags_sort(&d); /* the first in the file, as lint prints them */
        char first[600] = "";
        for (size_t i = 0; i < d.n; i++) {
            if (d.v[i].severity == AL_DIAG_ERROR) {
                al_diag_format(&d.v[i], first, sizeof first);
                break;
            }
        }
        if (changed)
            cp_policy_reload_seen(path, NULL, d.errors, d.warnings, first, "file_changed");
        al_error_set(err, -EINVAL,
                     "%zu error%s, first: %s (check it with `airlock policy lint "
                     "%s`)",
                     d.errors, d.errors == 1 ? "" : "s", first, path);
        al_diags_free(&d);
        return NULL;
    }
    if (changed)
        cp_policy_reload_seen(path, p, d.errors, d.warnings, NULL, "file_changed");
    al_diags_free(&d);
    if (empty < 0)
        empty = (int)(st.st_ino % PS_CACHE);
    struct ps_entry *e = &ps__cache[empty];
    if (e->p)
        policy_unref(e->p);
    snprintf(e->path, sizeof e->path, "%s", path);
    e->mtime = st.st_mtim;
    e->size = st.st_size;
    e->ino = st.st_ino;
    e->p = policy_ref(p);
    return p;
}

json_t *cp_policy_narrowing(const json_t *network, int allow_internet)
{
    json_t *allow = network ? json_object_get(network, "allowOut") : NULL;
    json_t *deny = network ? json_object_get(network, "denyOut") : NULL;
    json_t *tf = network ? json_object_get(network, "transforms") : NULL;
    bool has_allow = json_is_array(allow), has_deny = json_is_array(deny);
    if (allow_internet < 0 && !has_allow && !has_deny && !json_array_size(tf))
        return NULL;
    json_t *n = json_object();
    if (allow_internet >= 0)
        json_object_set_new(n, "allow_internet_access", json_boolean(allow_internet));
    if (has_allow)
        json_object_set(n, "allow_out", allow);
    if (has_deny)
        json_object_set(n, "deny_out", deny);
    if (json_array_size(tf))
        json_object_set(n, "transforms", tf);
    return n;
}

/* The file of a policy of the policies directory (<name>.yaml or .yml) into path; false
 * when there is none. */
static bool ps__find(struct cp *cp, const char *name, char *path, size_t len)
{
    const char *exts[] = {".yaml", ".yml"};
    struct stat st;
    for (int i = 0; i < 2; i++) {
        snprintf(path, len, "%s/%s%s", cp->cfg.policies_path, name, exts[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            return true;
    }
    return false;
}

/* The hash of base narrowed by a narrowing object (cp_policy_narrowing; NULL: base's own
 * hash), or -EINVAL with err naming the entry policy_narrow() refused. */
static int ps__narrowed_hash(struct policy *base, const json_t *narrowing, char hash[65],
                             struct al_error *err)
{
    if (!narrowing) {
        snprintf(hash, 65, "%s", policy_hash(base));
        return 0;
    }
    struct al_error e2 = {0};
    struct policy *narrowed = policy_narrow_json(base, narrowing, &e2);
    if (!narrowed)
        return al_error_set(err, -EINVAL, "%s", al_error_str(&e2));
    snprintf(hash, 65, "%s", policy_hash(narrowed));
    policy_unref(narrowed);
    return 0;
}

int cp_template_policy(const char *template_dir, char *out, struct al_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/template.json", template_dir);
    out[0] = '\0';
    json_error_t je;
    json_t *t = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!t) {
        if (access(path, F_OK) != 0 && errno == ENOENT)
            return 0;
        return al_error_set(err, -EINVAL, "%s: %s (line %d)", path, je.text, je.line);
    }
    json_t *v = json_object_get(t, "policy");
    int rc = 0;
    if (v && !json_is_null(v)) {
        const char *name = json_string_value(v);
        if (!name || !cp_policy_name_valid(name))
            rc = al_error_set(err, -EINVAL,
                              "%s: \"policy\" must name a policy of the policies directory "
                              "(letters, digits, '.', '_', '-')",
                              path);
        else {
            snprintf(out, CP_POLICY_NAME_MAX, "%s", name);
            rc = 1;
        }
    }
    json_decref(t);
    return rc;
}

int cp_policy_select(struct cp *cp, const struct cp_policy_ask *ask, struct cp_policy_sel *out,
                     int *status, struct al_error *err)
{
    const json_t *metadata = ask->metadata, *network = ask->network;
    const struct cp_principal *who = ask->who;
    const char *template_dir = ask->template_dir;
    int allow_internet = ask->allow_internet;
    memset(out, 0, sizeof *out);
    const char *name = cp->cfg.default_policy;
    json_t *m = metadata ? json_object_get(metadata, CP_POLICY_META_KEY) : NULL;
    bool asked = m || ask->requested;
    char what[96];
    snprintf(what, sizeof what, "%s",
             m ? "metadata[\"" CP_POLICY_META_KEY "\"]"
               : (ask->requested_what ? ask->requested_what : "the request"));
    char tpl_policy[CP_POLICY_NAME_MAX];
    bool from_template = false;
    if (!asked && template_dir) {
        /* The template's own default, chosen by whoever installed the template (like the
         * configured default: not subject to the API key's list of policies). */
        int rc = cp_template_policy(template_dir, tpl_policy, err);
        if (rc < 0) {
            *status = 500;
            return rc;
        }
        if (rc == 1) {
            name = tpl_policy;
            from_template = true;
        }
    }
    if (asked) {
        name = m ? json_string_value(m) : ask->requested;
        if (!name || !cp_policy_name_valid(name)) {
            *status = 400;
            return al_error_set(err, -EINVAL,
                                "%s must name a policy of the policies directory (letters, "
                                "digits, '.', '_', '-')",
                                what);
        }
        if (!cp_apikey_allows_policy(who->policies, name)) {
            *status = 403;
            return al_error_set(err, -EPERM,
                                "this API key may not use policy \"%s\" (it may "
                                "use: %s); ask an operator (`airlock apikey create --policies`)",
                                name, who->policies);
        }
    }
    snprintf(out->name, sizeof out->name, "%s", name);
    char path[4200];
    if (!ps__find(cp, name, path, sizeof path)) {
        *status = asked ? 400 : 500;
        return al_error_set(
            err, -ENOENT, "no policy \"%s\" in %s%s%s%s", name, cp->cfg.policies_path,
            asked ? " (" : "", asked ? what : "",
            asked           ? " names a file <name>.yaml there)"
            : from_template ? " (the template's template.json names it as its default "
                              "policy: add the policy or fix the template)"
                            : " (the default policy, policies.default, is missing: restore it)");
    }
    snprintf(out->file, sizeof out->file, "%s", path);
    struct al_error e2 = {0};
    struct policy *base = ps__load(path, &e2);
    if (!base) {
        *status = 500;
        return al_error_set(err, -EINVAL, "policy \"%s\" (%s) is invalid: %s", name, path,
                            al_error_str(&e2));
    }
    out->narrowing = cp_policy_narrowing(network, allow_internet);
    int rc = ps__narrowed_hash(base, out->narrowing, out->hash, err);
    policy_unref(base);
    if (rc) {
        json_decref(out->narrowing);
        out->narrowing = NULL;
        *status = 400;
    }
    return rc;
}

int cp_policy_check_network(struct cp *cp, const char *name, const json_t *network,
                            int allow_internet, char hash[65], int *status, struct al_error *err)
{
    char path[4200];
    if (!cp_policy_name_valid(name) || !ps__find(cp, name, path, sizeof path)) {
        *status = 500;
        return al_error_set(err, -ENOENT,
                            "the sandbox's policy \"%s\" is no longer in %s: its network cannot "
                            "be checked (restore the policy)",
                            name, cp->cfg.policies_path);
    }
    struct al_error e2 = {0};
    struct policy *base = ps__load(path, &e2);
    if (!base) {
        *status = 500;
        return al_error_set(err, -EINVAL, "policy \"%s\" (%s) is invalid: %s", name, path,
                            al_error_str(&e2));
    }
    json_t *n = cp_policy_narrowing(network, allow_internet);
    int rc = ps__narrowed_hash(base, n, hash, err);
    json_decref(n);
    policy_unref(base);
    if (rc)
        *status = 400;
    return rc;
}

void cp_policy_sel_free(struct cp_policy_sel *s)
{
    json_decref(s->narrowing);
    s->narrowing = NULL;
}

struct policy *cp_policy_get(struct cp *cp, const char *name, char *file, size_t len, int *status,
                             struct al_error *err)
{
    if (!cp_policy_name_valid(name)) {
        *status = 400;
        al_error_set(err, -EINVAL,
                     "a policy name is letters, digits, '.', '_' and '-' (the file <name>.yaml "
                     "of %s)",
                     cp->cfg.policies_path);
        return NULL;
    }
    if (!ps__find(cp, name, file, len)) {
        *status = 404;
        al_error_set(err, -ENOENT, "no policy \"%s\" in %s (a file %s.yaml there)", name,
                     cp->cfg.policies_path, name);
        return NULL;
    }
    struct al_error e2 = {0};
    struct policy *p = ps__load(file, &e2);
    if (!p) {
        *status = 422;
        al_error_set(err, -EINVAL, "policy \"%s\" (%s) is invalid: %s", name, file,
                     al_error_str(&e2));
    }
    return p;
}

json_t *cp_policy_diags_json(const struct al_diags *d)
{
    json_t *a = json_array();
    for (size_t i = 0; i < d->n; i++) {
        const struct al_diag *g = &d->v[i];
        json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:s,s:s}", "severity",
                                           g->severity == AL_DIAG_ERROR ? "error" : "warning",
                                           "line", (json_int_t)g->line, "col", (json_int_t)g->col,
                                           "code", g->code, "message", g->msg));
    }
    return a;
}
