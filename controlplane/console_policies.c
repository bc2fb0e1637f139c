/* controlplane/console_policies: the egress policies the web console shows (docs/console.md,
 * "Policies"), read-only:
 *
 *   GET /admin/policies                 every policy of the policies directory, valid or not:
 *                                       its counts of errors and warnings, hash, mode, rules,
 *                                       and the sandboxes using it
 *   GET /admin/policies/{name}          the same for one, with its YAML as written, every lint
 *                                       finding at its line and column, and its rules
 *   GET /admin/policies/{name}/explain  one request (?url=, method, addr, connection, body)
 *                                       decided by it and explained: policy/query.c, the query
 *                                       `airlock policy explain --json` asks
 *
 * Owns: what these answers hold. Which roles may call them is auth.c's table. Reading and
 * linting the files is file I/O over what an operator put there: it runs on libuv's thread
 * pool; which sandboxes use a policy is read on the loop, where the sandboxes live. Explain
 * decides with the compiled policy creations use (policysel.c's cache): the decision shown is
 * the one a new sandbox with that policy would get.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "common/yaml.h"
#include "console.h"
#include "cp.h"
#include "policy/policy.h"
#include "policysel.h"

#define CPOL_MAX 4096 /* policies listed; a directory with more is refused, not cut short */

struct cpol_work {
    uv_work_t w;
    struct cp *cp;
    struct al_http_req *req;
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
    json_t *o = json_pack(
        "{s:s,s:s,s:b,s:b,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:[]}", "name", name, "file", path, "default",
        strcmp(name, def) == 0, "valid", p != NULL, "errors", (json_int_t)d.errors, "warnings",
        (json_int_t)d.warnings, "hash", p ? json_string(policy_hash(p)) : json_null(), "mode",
        p ? json_string(policy_mode(p) == POLICY_MODE_REPORT ? "report" : "enforce") : json_null(),
        "description", desc ? json_string(desc) : json_null(), "policyName",
        p ? json_string(policy_name(p)) : json_null(), "ruleCount",
        p ? json_integer((json_int_t)policy_rule_count(p)) : json_null(), "sandboxes");
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

static void cpol__one(struct cpol_work *x)
{
    const char *exts[] = {".yaml", ".yml"};
    for (int i = 0; i < 2; i++) {
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s%s", x->dir, x->name, exts[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            x->out = cpol__entry(x->dir, x->name, exts[i], x->def, true);
            x->status = x->out ? 200 : 500;
            if (!x->out)
                snprintf(x->msg, sizeof x->msg, "out of memory");
            return;
        }
    }
    x->status = 404;
    snprintf(x->msg, sizeof x->msg, "no policy \"%s\" in %s (a file %s.yaml there)", x->name,
             x->dir, x->name);
}

static void cpol__work(uv_work_t *w)
{
    struct cpol_work *x = w->data;
    if (x->name[0])
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

/* On the loop: the sandboxes using each policy (by the name they were created with). */
static void cpol__done(uv_work_t *w, int status)
{
    struct cpol_work *x = w->data;
    if (status < 0) {
        json_decref(x->out);
        cp_rest_error(x->req, 500, "the policies could not be read (%s)", uv_strerror(status));
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

static void cpol__read(struct cp *cp, struct al_http_req *req, const char *name)
{
    struct cpol_work *x = calloc(1, sizeof *x);
    if (!x) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    x->cp = cp;
    x->req = req;
    snprintf(x->dir, sizeof x->dir, "%s", cp->cfg.policies_path);
    snprintf(x->def, sizeof x->def, "%s", cp->cfg.default_policy ? cp->cfg.default_policy : "");
    snprintf(x->name, sizeof x->name, "%s", name ? name : "");
    x->w.data = x;
    if (uv_queue_work(req->loop, &x->w, cpol__work, cpol__done) < 0) {
        free(x);
        cp_rest_error(req, 500, "cannot queue the policies' reading");
    }
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
        cpol__read(cp, req, NULL);
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
        cpol__read(cp, req, name);
    else if (strcmp(rest, "/explain") == 0)
        cpol__explain(cp, req, name);
    else
        cp_rest_error(req, 404,
                      "no such endpoint: GET %s (/admin/policies/{name} or "
                      "/admin/policies/{name}/explain)",
                      p);
    return true;
}
