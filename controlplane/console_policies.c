/* controlplane/console_policies: the egress policies the web console shows (docs/console.md,
 * "Policies"):
 *
 *   GET /admin/policies                 every policy of the policies directory, valid or not:
 *                                       its counts of errors and warnings, hash, mode, rules,
 *                                       and the sandboxes using it
 *   GET /admin/policies/{name}          the same for one, with its YAML as written, every lint
 *                                       finding at its line and column, and its rules
 *   GET /admin/policies/{name}/explain  one request (?url=, method, addr, connection, body)
 *                                       decided by it and explained: policy/query.c, the query
 *                                       `airlock policy explain --json` asks
 *   GET /admin/policies/{name}/tests    its test cases (<dir>/tests/<name>.yaml) run as
 *                                       `airlock policy test` runs them (policy/cases.c)
 *   GET /admin/policy-reloads           the history of the policies' reloads, newest first
 *   POST /admin/policy-reloads          every policy read again now (as SIGHUP)
 *
 * Owns: what these answers hold, and the policies' reloads: airlockd's last reading of each
 * policy and the history of the readings that changed one (at start, SIGHUP, an API reload, a
 * creation that read a changed file: policysel.c tells), in memory, on the loop. Which roles
 * may call them is auth.c's table. Reading and linting the files is file I/O over what an
 * operator put there: it runs on libuv's thread pool; which sandboxes use a policy is read on the loop, where the sandboxes live. Explain
 * decides with the compiled policy creations use (policysel.c's cache): the decision shown is
 * the one a new sandbox with that policy would get.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/util.h"
#include "common/yaml.h"
#include "console.h"
#include "cp.h"
#include "egressreg.h"
#include "policy/policy.h"
#include "policysel.h"

#define CPOL_MAX 4096 /* policies listed; a directory with more is refused, not cut short */

enum cpol_kind { CPOL_READ, CPOL_TESTS, CPOL_RELOAD };

struct cpol_work {
    uv_work_t w;
    struct cp *cp;
    struct al_http_req *req; /* NULL for a reload airlockd asked itself (start, SIGHUP) */
    enum cpol_kind kind;
    char trigger[16]; /* a reload's: "start", "sighup", "api" */
    char key_id[32];  /* an "api" reload's key */
    char dir[4096];
    char name[CP_POLICY_NAME_MAX]; /* "" for the list */
    char def[CP_POLICY_NAME_MAX];  /* the configured default policy */
    /* results (the worker's) */
    int status;
    json_t *out;
    char msg[768];
};

static json_t *cpol__rules_json(const struct policy *p)
{
    json_t *a = json_array();
    for (size_t i = 0; i < policy_rule_count(p); i++) {
        const struct policy_rule *r = policy_rule_at(p, i);
        /* The hosts it names and the vault secrets it injects toward them (the Vault page
         * says which rules use a secret). */
        json_t *hosts = json_array(), *secrets = json_array();
        for (size_t k = 0; k < r->n_hosts; k++)
            json_array_append_new(hosts, json_string(r->hosts[k]));
        for (size_t k = 0; k < r->n_cidrs; k++)
            json_array_append_new(hosts, json_string(r->cidrs[k]));
        for (size_t k = 0; k < r->n_inject; k++)
            for (size_t j = 0; j < r->inject[k].n_secrets; j++) {
                const char *n = r->inject[k].secrets[j];
                bool seen = false;
                for (size_t x = 0; x < json_array_size(secrets) && !seen; x++)
                    seen = strcmp(json_string_value(json_array_get(secrets, x)), n) == 0;
                if (!seen)
                    json_array_append_new(secrets, json_string(n));
            }
        json_array_append_new(
            a, json_pack("{s:s,s:I,s:s,s:b,s:o,s:o}", "name", r->name, "line", (json_int_t)r->line,
                         "action", r->action == POLICY_ACTION_ALLOW ? "allow" : "deny", "report",
                         r->report, "hosts", hosts, "secrets", secrets));
    }
    return a;
}

/* One policy file read and linted as `airlock policy lint` does: its entry of the list, and
 * with detail its text, findings and rules. */
static json_t *cpol__entry(const char *dir, const char *name, const char *ext, const char *def,
                           bool detail)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s%s", dir, name, ext);
    struct al_diags d = AL_DIAGS_INIT;
    char *text = NULL;
    size_t len = 0;
    struct al_error err = {0};
    struct policy *p = NULL;
    int rc = al_read_file(path, AL_YAML_MAX_BYTES_DEFAULT, &text, &len, &err);
    if (rc == -EFBIG)
        al_diags_add(&d, AL_DIAG_ERROR, path, 0, 0, "too_large",
                     "the file is larger than the limit of %u bytes", AL_YAML_MAX_BYTES_DEFAULT);
    else if (rc)
        al_diags_add(&d, AL_DIAG_ERROR, path, 0, 0, "io", "cannot read the file: %s",
                     al_error_str(&err));
    else
        p = policy_load_buffer(text, len, path, &d);
    al_diags_sort(&d);
    const char *desc = p ? policy_description(p) : NULL;
    char first[600] = "";
    for (size_t i = 0; i < d.n && !first[0]; i++)
        if (d.v[i].severity == AL_DIAG_ERROR)
            al_diag_format(&d.v[i], first, sizeof first);
    json_t *o = json_pack(
        "{s:s,s:s,s:b,s:b,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:[]}", "name", name, "file", path, "default",
        strcmp(name, def) == 0, "valid", p != NULL, "errors", (json_int_t)d.errors, "warnings",
        (json_int_t)d.warnings, "hash", p ? json_string(policy_hash(p)) : json_null(), "mode",
        p ? json_string(policy_mode(p) == POLICY_MODE_REPORT ? "report" : "enforce") : json_null(),
        "description", desc ? json_string(desc) : json_null(), "policyName",
        p ? json_string(policy_name(p)) : json_null(), "ruleCount",
        p ? json_integer((json_int_t)policy_rule_count(p)) : json_null(), "sandboxes");
    if (o)
        json_object_set_new(o, "firstError", first[0] ? json_string(first) : json_null());
    if (o && detail) {
        /* The text as the file holds it; a file that is not UTF-8 text has no JSON string
         * (its findings say what is wrong with it). */
        json_t *y = text ? json_stringn(text, len) : NULL;
        json_object_set_new(o, "yaml", y ? y : json_null());
        json_object_set_new(o, "diagnostics", cp_policy_diags_json(&d));
        json_object_set_new(o, "diagnosticsDropped", json_integer((json_int_t)d.dropped));
    }
    if (o)
        json_object_set_new(o, "rules", p ? cpol__rules_json(p) : json_array());
    if (p)
        policy_unref(p);
    free(text);
    al_diags_free(&d);
    return o;
}

/* The policy files of the directory as policysel.c finds them: <name>.yaml, else <name>.yml,
 * for names it accepts. */
static int cpol__cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void cpol__list(struct cpol_work *x)
{
    DIR *dh = opendir(x->dir);
    if (!dh) {
        x->status = errno == ENOENT ? 404 : 500;
        snprintf(x->msg, sizeof x->msg,
                 "cannot read the policies directory %s: %s (policies.dir in airlockd's "
                 "configuration)",
                 x->dir, strerror(errno));
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    bool too_many = false, oom = false;
    while ((de = readdir(dh)) != NULL && !too_many && !oom) {
        size_t l = strlen(de->d_name);
        const char *ext = l > 5 && strcmp(de->d_name + l - 5, ".yaml") == 0  ? ".yaml"
                          : l > 4 && strcmp(de->d_name + l - 4, ".yml") == 0 ? ".yml"
                                                                             : NULL;
        if (!ext)
            continue;
        char stem[CP_POLICY_NAME_MAX];
        size_t sl = l - strlen(ext);
        if (sl >= sizeof stem)
            continue;
        memcpy(stem, de->d_name, sl);
        stem[sl] = '\0';
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", x->dir, de->d_name);
        if (!cp_policy_name_valid(stem) || stat(path, &st) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (strcmp(ext, ".yml") == 0) { /* <name>.yaml wins, as a creation finds it */
            snprintf(path, sizeof path, "%s/%s.yaml", x->dir, stem);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
                continue;
        }
        if (n == CPOL_MAX) {
            too_many = true;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) {
                oom = true;
                break;
            }
            names = nn;
        }
        /* name plus its extension, split again below */
        if (!(names[n] = strdup(de->d_name)))
            oom = true;
        else
            n++;
    }
    closedir(dh);
    if (!too_many && !oom)
        qsort(names, n, sizeof *names, cpol__cmp);
    json_t *arr = too_many || oom ? NULL : json_array();
    for (size_t i = 0; arr && i < n; i++) {
        char *dot = strrchr(names[i], '.');
        char ext[8];
        snprintf(ext, sizeof ext, "%s", dot);
        *dot = '\0';
        json_t *e = cpol__entry(x->dir, names[i], ext, x->def, false);
        if (!e || json_array_append_new(arr, e) < 0) {
            json_decref(arr);
            arr = NULL;
            oom = true;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (too_many) {
        x->status = 500;
        snprintf(x->msg, sizeof x->msg,
                 "the policies directory %s holds more than %d policies; the console lists at "
                 "most %d (remove the ones no sandbox uses)",
                 x->dir, CPOL_MAX, CPOL_MAX);
        return;
    }
    x->out =
        arr ? json_pack("{s:s,s:s,s:o}", "dir", x->dir, "default", x->def, "policies", arr) : NULL;
    x->status = x->out ? 200 : 500;
    if (!x->out)
        snprintf(x->msg, sizeof x->msg, "out of memory");
}

/* The file of policy x->name (<name>.yaml, else .yml, as a creation finds it) into path and
 * its extension into ext; false (404 in x) when there is none. */
static bool cpol__find(struct cpol_work *x, char *path, size_t len, const char **ext)
{
    const char *exts[] = {".yaml", ".yml"};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        snprintf(path, len, "%s/%s%s", x->dir, x->name, exts[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            *ext = exts[i];
            return true;
        }
    }
    x->status = 404;
    snprintf(x->msg, sizeof x->msg, "no policy \"%s\" in %s (a file %s.yaml there)", x->name,
             x->dir, x->name);
    return false;
}

static void cpol__one(struct cpol_work *x)
{
    char path[4200];
    const char *ext;
    if (!cpol__find(x, path, sizeof path, &ext))
        return;
    x->out = cpol__entry(x->dir, x->name, ext, x->def, true);
    x->status = x->out ? 200 : 500;
    if (!x->out)
        snprintf(x->msg, sizeof x->msg, "out of memory");
}

/* ---- test cases --------------------------------------------------------------------------- */

static void cpol__case(const struct policy_case_result *r, void *arg)
{
    json_t *c =
        json_pack("{s:s,s:I,s:s,s:s,s:b,s:s,s:s,s:b,s:s,s:o,s:I,s:s,s:s}", "name", r->name, "line",
                  (json_int_t)r->line, "url", r->url, "method", r->method, "pass", r->pass,
                  "expect", r->expect, "decision", r->decision, "wouldDeny", r->would_deny,
                  "reason", r->reason, "rule", r->rule ? json_string(r->rule) : json_null(),
                  "ruleLine", (json_int_t)r->rule_line, "why", r->why, "failures", r->failures);
    if (c && r->has_expect_rule)
        json_object_set_new(c, "expectRule",
                            r->expect_rule ? json_string(r->expect_rule) : json_null());
    if (c)
        json_array_append_new(arg, c);
}

/* The cases of <dir>/tests/<name>.yaml (else .yml) run against the policy, as `airlock
 * policy test` runs them (policy/cases.c). */
static void cpol__tests(struct cpol_work *x)
{
    char path[4200], cases[4300] = "";
    const char *ext;
    if (!cpol__find(x, path, sizeof path, &ext))
        return;
    const char *exts[] = {".yaml", ".yml"};
    bool found = false;
    for (int i = 0; i < 2 && !found; i++) {
        struct stat st;
        snprintf(cases, sizeof cases, "%s/tests/%s%s", x->dir, x->name, exts[i]);
        found = stat(cases, &st) == 0 && S_ISREG(st.st_mode);
    }
    if (!found)
        snprintf(cases, sizeof cases, "%s/tests/%s.yaml", x->dir, x->name);
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_file(path, &d);
    if (!p) {
        x->status = 422;
        snprintf(x->msg, sizeof x->msg,
                 "policy \"%s\" (%s) has %zu error%s: its cases run once they are fixed (GET "
                 "/admin/policies/%s lists them)",
                 x->name, path, d.errors, d.errors == 1 ? "" : "s", x->name);
        al_diags_free(&d);
        return;
    }
    al_diags_free(&d);
    d = (struct al_diags)AL_DIAGS_INIT;
    json_t *arr = json_array();
    struct policy_cases_summary sum = {0};
    bool ran = found && policy_cases_run_file(p, cases, cpol__case, arr, &sum, &d) == 0;
    al_diags_sort(&d);
    x->out = json_pack("{s:s,s:s,s:s,s:s,s:b,s:b,s:I,s:I,s:I,s:I,s:o,s:o}", "policy", x->name,
                       "file", path, "hash", policy_hash(p), "casesFile", cases, "found", found,
                       "ran", ran, "total", (json_int_t)sum.total, "passed", (json_int_t)sum.passed,
                       "failed", (json_int_t)sum.failed, "malformed", (json_int_t)sum.malformed,
                       "cases", arr, "diagnostics", cp_policy_diags_json(&d));
    policy_unref(p);
    al_diags_free(&d);
    x->status = x->out ? 200 : 500;
    if (!x->out)
        snprintf(x->msg, sizeof x->msg, "out of memory");
}

static void cpol__work(uv_work_t *w)
{
    struct cpol_work *x = w->data;
    if (x->kind == CPOL_TESTS)
        cpol__tests(x);
    else if (x->name[0])
        cpol__one(x);
    else
        cpol__list(x);
}

struct cpol_users {
    json_t *by_name; /* policy name -> its entry (borrowed) */
};

static int cpol__user(void *v, void *arg)
{
    const struct cp_sandbox *sb = v;
    struct cpol_users *u = arg;
    json_t *e = json_object_get(u->by_name, sb->rec.policy_name);
    if (e)
        json_array_append_new(json_object_get(e, "sandboxes"),
                              json_pack("{s:s,s:s,s:s}", "sandboxID", sb->rec.id, "state",
                                        cp_sb_state_name(sb->rec.state), "templateID",
                                        sb->rec.template_id));
    return 0;
}

/* ---- reloads ------------------------------------------------------------------------------ */

/* What airlockd last read of each policy (name -> {"hash", "valid", "errors", "warnings"}), and
 * the history of what changed, oldest first: on the loop, in memory (a restart begins it with
 * the "start" reading). */
#define CPOL_RELOADS_MAX 1000
static json_t *cpol__known, *cpol__history;
static uint64_t cpol__reload_seq;
static bool cpol__reloading, cpol__reload_again;

static bool cpol__same(const json_t *a, const json_t *b)
{
    if (!a || !b)
        return a == b;
    static const char *const keys[] = {"hash", "valid", "errors", "warnings"};
    for (size_t i = 0; i < 4; i++)
        if (!json_equal(json_object_get(a, keys[i]), json_object_get(b, keys[i])))
            return false;
    return true;
}

/* One reading of a policy (now: {"hash", "valid", "errors", "warnings", "firstError"}, or NULL
 * for a file that is gone): recorded when it differs from the last one (or is the first). */
static json_t *cpol__note(const char *name, const char *file, const json_t *now,
                          const char *trigger, const char *key_id)
{
    if (!cpol__known)
        cpol__known = json_object();
    if (!cpol__history)
        cpol__history = json_array();
    if (!cpol__known || !cpol__history)
        return NULL;
    json_t *before = json_object_get(cpol__known, name);
    if (!before && !now)
        return NULL;
    if (before && cpol__same(before, now))
        return NULL;
    char at[40];
    al_time_rfc3339(at, sizeof at, al_wall_ns());
    json_t *after =
        now ? json_pack("{s:O,s:O,s:O,s:O,s:O*}", "hash", json_object_get(now, "hash"), "valid",
                        json_object_get(now, "valid"), "errors", json_object_get(now, "errors"),
                        "warnings", json_object_get(now, "warnings"), "firstError",
                        json_object_get(now, "firstError"))
            : json_null();
    json_t *e = json_pack("{s:I,s:s,s:s,s:s,s:s,s:o,s:o,s:o}", "seq",
                          (json_int_t)++cpol__reload_seq, "time", at, "policy", name, "file", file,
                          "trigger", trigger, "keyId", key_id ? json_string(key_id) : json_null(),
                          "before", before ? json_deep_copy(before) : json_null(), "after", after);
    if (!e)
        return NULL;
    const char *bh = before ? json_string_value(json_object_get(before, "hash")) : NULL;
    const char *ah = now ? json_string_value(json_object_get(now, "hash")) : NULL;
    al_info("policies: %s (%s) read (%s%s%s): %s -> %s", name, file, trigger,
            key_id ? " by key " : "", key_id ? key_id : "", before ? (bh ? bh : "invalid") : "new",
            now ? (ah ? ah : "invalid") : "removed");
    if (now)
        json_object_set_new(cpol__known, name,
                            json_pack("{s:O,s:O,s:O,s:O}", "hash", json_object_get(now, "hash"),
                                      "valid", json_object_get(now, "valid"), "errors",
                                      json_object_get(now, "errors"), "warnings",
                                      json_object_get(now, "warnings")));
    else
        json_object_del(cpol__known, name);
    if (json_array_size(cpol__history) >= CPOL_RELOADS_MAX)
        json_array_remove(cpol__history, 0);
    json_array_append(cpol__history, e);
    return e;
}

void cp_policy_reload_seen(const char *file, const struct policy *p, size_t errors, size_t warnings,
                           const char *first_error, const char *trigger)
{
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char name[CP_POLICY_NAME_MAX];
    size_t l = strcspn(base, ".");
    const char *ext = base + l;
    if (l >= sizeof name || (strcmp(ext, ".yaml") != 0 && strcmp(ext, ".yml") != 0))
        return;
    memcpy(name, base, l);
    name[l] = '\0';
    json_t *now = json_pack(
        "{s:o,s:b,s:I,s:I,s:o}", "hash", p ? json_string(policy_hash(p)) : json_null(), "valid",
        p != NULL, "errors", (json_int_t)errors, "warnings", (json_int_t)warnings, "firstError",
        first_error && first_error[0] ? json_string(first_error) : json_null());
    if (now)
        cpol__note(name, file, now, trigger, NULL);
    json_decref(now);
}

struct cpol_reload {
    struct al_http_req *req;
    json_t *out;
};

static void cpol__egress_reloaded(void *arg, int rc, const json_t *answer)
{
    struct cpol_reload *r = arg;
    const char *msg = "it did not answer, or refused the reload (its log says why)";
    json_t *failed = rc == 0 ? json_object_get(answer, "failed") : NULL; /* borrowed */
    json_t *eg = rc == 0
                     ? json_pack("{s:I,s:o}", "reloaded",
                                 (json_int_t)json_array_size(json_object_get(answer, "reloaded")),
                                 "failed", failed ? json_incref(failed) : json_array())
                     : json_pack("{s:s}", "error", msg);
    if (rc)
        al_warn("policies: airlock-egress did not reload the running sandboxes' policies: %s", msg);
    else if (json_array_size(json_object_get(answer, "failed")))
        al_warn("policies: airlock-egress refused the new policy of %zu sandboxes (they keep "
                "the old one; its audit log says why)",
                json_array_size(json_object_get(answer, "failed")));
    if (r->req) {
        json_object_set_new(r->out, "egress", eg ? eg : json_null());
        al_http_reply_json(r->req, 200, r->out);
    } else {
        json_decref(eg);
        json_decref(r->out);
    }
    free(r);
}

static void cpol__reload_start(struct cp *cp, struct al_http_req *req, const char *trigger,
                               const char *key_id);

/* On the loop: every policy read compared with the last reading (the changes recorded), the
 * ones that are gone recorded as removed; creations read the files again; airlock-egress
 * reloads the running sandboxes' policies. */
static void cpol__reloaded(struct cpol_work *x)
{
    json_t *changed = json_array();
    size_t unchanged = 0;
    json_t *list = json_object_get(x->out, "policies");
    json_t *seen = json_object();
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        json_object_set_new(seen, name, json_true());
        json_t *c = cpol__note(name, json_string_value(json_object_get(e, "file")), e, x->trigger,
                               x->key_id[0] ? x->key_id : NULL);
        if (c)
            json_array_append_new(changed, c);
        else
            unchanged++;
    }
    const char *name;
    json_t *v, *gone = json_array();
    json_object_foreach(cpol__known, name, v) if (!json_object_get(seen, name))
        json_array_append_new(gone, json_string(name));
    json_array_foreach(gone, i, v)
    {
        char file[4300];
        snprintf(file, sizeof file, "%s/%s.yaml", x->dir, json_string_value(v));
        json_t *c = cpol__note(json_string_value(v), file, NULL, x->trigger,
                               x->key_id[0] ? x->key_id : NULL);
        if (c)
            json_array_append_new(changed, c);
    }
    json_decref(gone);
    json_decref(seen);
    cp_policy_cache_clear();
    json_t *out = json_pack("{s:s,s:o,s:I,s:n}", "trigger", x->trigger, "changed", changed,
                            "unchanged", (json_int_t)unchanged, "egress");
    struct cpol_reload *r = out ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        json_decref(out);
        if (x->req)
            cp_rest_error(x->req, 500, "out of memory");
    } else {
        r->req = x->req;
        r->out = out;
        /* The start's reading is the one airlock-egress registers sandboxes with: nothing to
         * reload there. */
        bool asked = x->cp->egress && strcmp(x->trigger, "start") != 0 &&
                     cp_egress_reload(x->cp->egress, cpol__egress_reloaded, r) == 0;
        if (!asked) {
            if (x->req)
                al_http_reply_json(x->req, 200, out);
            else
                json_decref(out);
            free(r);
        }
    }
    cpol__reloading = false;
    if (cpol__reload_again) {
        cpol__reload_again = false;
        cpol__reload_start(x->cp, NULL, "sighup", NULL);
    }
}

/* On the loop: a reload's comparison (above), or the answer, with the sandboxes using each
 * policy (by the name they were created with) for the list and one policy. */
static void cpol__done(uv_work_t *w, int status)
{
    struct cpol_work *x = w->data;
    if (x->kind == CPOL_RELOAD) {
        if (status < 0 || !x->out) {
            al_warn("policies: the policies directory %s could not be read again: %s", x->dir,
                    status < 0 ? uv_strerror(status) : x->msg);
            if (x->req)
                cp_rest_error(x->req, status < 0 || !x->status ? 500 : x->status, "%s",
                              status < 0 ? uv_strerror(status) : x->msg);
            cpol__reloading = false;
        } else {
            cpol__reloaded(x);
        }
        json_decref(x->out);
        free(x);
        return;
    }
    if (status < 0) {
        json_decref(x->out);
        cp_rest_error(x->req, 500, "the policies could not be read (%s)", uv_strerror(status));
    } else if (x->out && x->kind == CPOL_TESTS) {
        al_http_reply_json(x->req, 200, x->out);
    } else if (x->out) {
        struct cpol_users u = {json_object()};
        json_t *list = json_object_get(x->out, "policies");
        if (list) {
            size_t i;
            json_t *e;
            json_array_foreach(list, i, e)
                json_object_set(u.by_name, json_string_value(json_object_get(e, "name")), e);
        } else {
            json_object_set(u.by_name, x->name, x->out);
        }
        cp_map_foreach(&x->cp->sandboxes, cpol__user, &u);
        json_decref(u.by_name);
        al_http_reply_json(x->req, 200, x->out);
    } else {
        cp_rest_error(x->req, x->status ? x->status : 500, "%s", x->msg);
    }
    free(x);
}

static struct cpol_work *cpol__work_new(struct cp *cp, struct al_http_req *req, enum cpol_kind kind,
                                        const char *name)
{
    struct cpol_work *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->cp = cp;
    x->req = req;
    x->kind = kind;
    snprintf(x->dir, sizeof x->dir, "%s", cp->cfg.policies_path);
    snprintf(x->def, sizeof x->def, "%s", cp->cfg.default_policy ? cp->cfg.default_policy : "");
    snprintf(x->name, sizeof x->name, "%s", name ? name : "");
    x->w.data = x;
    return x;
}

static void cpol__read(struct cp *cp, struct al_http_req *req, const char *name,
                       enum cpol_kind kind)
{
    struct cpol_work *x = cpol__work_new(cp, req, kind, name);
    if (!x) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    if (uv_queue_work(req->loop, &x->w, cpol__work, cpol__done) < 0) {
        free(x);
        cp_rest_error(req, 500, "cannot queue the policies' reading");
    }
}

static void cpol__reload_start(struct cp *cp, struct al_http_req *req, const char *trigger,
                               const char *key_id)
{
    if (cpol__reloading) {
        if (req)
            cp_rest_error(req, 429,
                          "the policies are being read again; ask again when it has ended");
        else
            cpol__reload_again = true;
        return;
    }
    struct cpol_work *x = cpol__work_new(cp, req, CPOL_RELOAD, NULL);
    if (!x) {
        if (req)
            cp_rest_error(req, 500, "out of memory");
        return;
    }
    snprintf(x->trigger, sizeof x->trigger, "%s", trigger);
    snprintf(x->key_id, sizeof x->key_id, "%s", key_id ? key_id : "");
    if (uv_queue_work(cp->loop, &x->w, cpol__work, cpol__done) < 0) {
        free(x);
        if (req)
            cp_rest_error(req, 500, "cannot queue the policies' reading");
        return;
    }
    cpol__reloading = true;
}

void cp_policy_reload(struct cp *cp, const char *trigger)
{
    cpol__reload_start(cp, NULL, trigger, NULL);
}

/* GET /admin/policy-reloads[?policy=NAME]: the history, newest first. */
static void cpol__history_list(struct al_http_req *req)
{
    char name[CP_POLICY_NAME_MAX] = "";
    int rc = al_http_query_get(req->query, "policy", name, sizeof name);
    if ((rc && rc != -ENOENT) || (name[0] && !cp_policy_name_valid(name))) {
        cp_rest_error(req, 400, "policy must be a policy's name (letters, digits, '.', '_', '-')");
        return;
    }
    json_t *arr = json_array();
    for (size_t i = json_array_size(cpol__history); arr && i-- > 0;) {
        json_t *e = json_array_get(cpol__history, i);
        if (!name[0] || strcmp(json_string_value(json_object_get(e, "policy")), name) == 0)
            json_array_append(arr, e);
    }
    json_t *out = arr ? json_pack("{s:o,s:b}", "reloads", arr, "reloading", cpol__reloading) : NULL;
    if (!out) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    al_http_reply_json(req, 200, out);
}

bool cp_console_reloads_route(struct cp *cp, struct al_http_req *req,
                              const struct cp_principal *who)
{
    if (strcmp(req->path, "/admin/policy-reloads") != 0)
        return false;
    if (strcmp(req->method, "GET") == 0)
        cpol__history_list(req);
    else if (strcmp(req->method, "POST") == 0)
        cpol__reload_start(cp, req, "api", who->key_id);
    else
        cp_rest_error(req, 405,
                      "%s is not allowed on %s (GET lists the reloads, POST reads the policies "
                      "again)",
                      req->method, req->path);
    return true;
}

/* ---- explain ------------------------------------------------------------------------------ */

static void cpol__explain(struct cp *cp, struct al_http_req *req, const char *name)
{
    char url[POLICY_PATH_MAX + 1100], method[40], addr[64];
    bool connection = false, body = false;
    int rc = al_http_query_get(req->query, "url", url, sizeof url);
    if (rc == -ENOENT || (rc == 0 && !url[0])) {
        cp_rest_error(req, 400,
                      "url is required: https://host[:port]/path, http://host[:port]/path, "
                      "host:port, tcp://host:port or dns:NAME");
        return;
    }
    if (rc) {
        cp_rest_error(req, 400, "url %s", rc == -E2BIG ? "is too long" : "is not well encoded");
        return;
    }
    struct {
        const char *key;
        char *buf;
        size_t len;
    } strs[] = {{"method", method, sizeof method}, {"addr", addr, sizeof addr}};
    struct policy_query_opts o = {0};
    for (size_t i = 0; i < 2; i++) {
        rc = al_http_query_get(req->query, strs[i].key, strs[i].buf, strs[i].len);
        if (rc && rc != -ENOENT) {
            cp_rest_error(req, 400, "%s %s", strs[i].key,
                          rc == -E2BIG ? "is too long" : "is not well encoded");
            return;
        }
        if (rc == 0 && strs[i].buf[0])
            *(i == 0 ? &o.method : &o.addr) = strs[i].buf;
    }
    if (!cp_rest_bool_param(req, "connection", &connection) ||
        !cp_rest_bool_param(req, "body", &body))
        return;
    o.connection = connection;
    o.body = body;
    struct policy_query *q = malloc(sizeof *q);
    if (!q) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    struct al_error err = {0};
    if (policy_query_parse(url, &o, q, &err)) {
        free(q);
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    char file[4200];
    int status = 500;
    struct policy *p = cp_policy_get(cp, name, file, sizeof file, &status, &err);
    if (!p) {
        free(q);
        cp_rest_error(req, status, "%s%s", al_error_str(&err),
                      status == 422 ? "; explain needs a policy without errors" : "");
        return;
    }
    struct policy_decision d;
    policy_query_decide(p, q, &d);
    json_t *out = policy_query_json(p, q, &d);
    if (out)
        json_object_set_new(out, "file", json_string(file));
    policy_unref(p);
    free(q);
    if (!out) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    al_http_reply_json(req, 200, out);
}

bool cp_console_policies_route(struct cp *cp, struct al_http_req *req)
{
    const char *p = req->path;
    if (strcmp(p, "/admin/policies") == 0) {
        cpol__read(cp, req, NULL, CPOL_READ);
        return true;
    }
    if (strncmp(p, "/admin/policies/", 16) != 0)
        return false;
    const char *rest = p + 16;
    char name[CP_POLICY_NAME_MAX];
    if (!cp_rest_path_part(&rest, name, sizeof name) || !cp_policy_name_valid(name)) {
        cp_rest_error(req, 400,
                      "a policy name is letters, digits, '.', '_' and '-' (GET "
                      "/admin/policies lists them)");
        return true;
    }
    if (*rest == '\0')
        cpol__read(cp, req, name, CPOL_READ);
    else if (strcmp(rest, "/explain") == 0)
        cpol__explain(cp, req, name);
    else if (strcmp(rest, "/tests") == 0)
        cpol__read(cp, req, name, CPOL_TESTS);
    else
        cp_rest_error(req, 404,
                      "no such endpoint: GET %s (/admin/policies/{name}, "
                      "/admin/policies/{name}/explain or /admin/policies/{name}/tests)",
                      p);
    return true;
}
