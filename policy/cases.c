/* policy/cases: golden test cases of a policy (the CASES format of docs/policy.md).
 *
 * Owns: reading a CASES document (its keys checked strictly, every malformed case a
 * file:line:col diagnostic), running each case as `airlock policy explain` would ask it
 * (policy/query.c), narrowed by the case's E2B network fields when it has them, and comparing
 * the decision with every key the case gives. `airlock policy test` (cli/policy.c) prints the
 * results; airlockd's console (controlplane/console_policies.c) answers them as JSON: one
 * implementation, so a case passes or fails the same way in both.
 */
#include "policy/policy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const cases__keys[] = {
    "name",   "url", "method", "connection", "addr",      "network", "expect", "rule",
    "reason", "tls", "inject", "would_deny", "websocket", "body",    NULL};

static const char *const cases__verdicts[] = {"deny", "allow", NULL};

/* The list of strings under key of the network map, if any, into buf (256 entries): *out
 * points at it then. -1 for a malformed one (reported in d). */
static int cases__strs(const struct al_yaml_node *net, const char *key, const char *buf[256],
                       const char *const **out, size_t *n, struct al_diags *d)
{
    const struct al_yaml_node *v = al_yaml_get(net, key);
    if (!v)
        return 0;
    if (al_yaml_strlist(v, key, false, d))
        return -1;
    if (v->n > 256)
        return al_yaml_error(d, v, "too_many", "%s: at most 256 entries", key), -1;
    for (size_t i = 0; i < v->n; i++)
        buf[i] = v->items[i]->str;
    *out = buf;
    *n = v->n;
    return 0;
}

/* Builds the policy a case runs against: the loaded one, or a narrowed view of it. */
static struct policy *cases__policy(struct policy *p, const struct al_yaml_node *net,
                                    struct al_diags *d)
{
    if (!net)
        return policy_ref(p);
    static const char *const keys[] = {"allow_internet_access", "allow_out", "deny_out", NULL};
    if (al_yaml_expect_map(net, "network", keys, d))
        return NULL;
    struct policy_narrowing n = {0};
    const struct al_yaml_node *v;
    bool access = true;
    if ((v = al_yaml_get(net, "allow_internet_access")) &&
        al_yaml_bool(v, "allow_internet_access", &access, d))
        return NULL;
    n.no_internet = !access;
    const char *allow[256], *deny[256];
    if (cases__strs(net, "allow_out", allow, &n.allow_out, &n.n_allow_out, d) ||
        cases__strs(net, "deny_out", deny, &n.deny_out, &n.n_deny_out, d))
        return NULL;
    struct al_error err = {0};
    struct policy *np = policy_narrow(p, &n, &err);
    if (!np)
        al_yaml_error(d, net, "bad_network", "%s", err.msg);
    return np;
}

struct cases__fail {
    char buf[1024];
    size_t o;
};

static void cases__failf(struct cases__fail *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void cases__failf(struct cases__fail *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(f->buf + f->o, sizeof f->buf - f->o, fmt, ap);
    va_end(ap);
    if (k > 0 && (size_t)k < sizeof f->buf - f->o)
        f->o += (size_t)k;
}

/* Compares the decision with what the case expects beyond the verdict; -1 for a malformed
 * key (reported in d). */
static int cases__compare(const struct al_yaml_node *cs, const struct policy_decision *dec,
                          struct cases__fail *f, struct al_diags *d)
{
    const struct al_yaml_node *v;
    const char *s;
    if ((v = al_yaml_get(cs, "rule"))) {
        const char *want = NULL;
        if (!al_yaml_is_null(v) && al_yaml_str(v, "rule", &want, d))
            return -1;
        const char *got = dec->rule ? dec->rule->name : NULL;
        if ((want == NULL) != (got == NULL) || (want && strcmp(want, got) != 0))
            cases__failf(f, "; expected rule %s, got %s", want ? want : "null", got ? got : "null");
    }
    if ((v = al_yaml_get(cs, "reason"))) {
        if (al_yaml_str(v, "reason", &s, d))
            return -1;
        if (strcmp(s, policy_reason_code(dec->reason)) != 0)
            cases__failf(f, "; expected reason %s, got %s", s, policy_reason_code(dec->reason));
    }
    if ((v = al_yaml_get(cs, "tls"))) {
        if (al_yaml_str(v, "tls", &s, d))
            return -1;
        if (strcmp(s, policy_tls_name(dec->tls)) != 0)
            cases__failf(f, "; expected tls %s, got %s", s, policy_tls_name(dec->tls));
    }
    bool b;
    if ((v = al_yaml_get(cs, "would_deny"))) {
        if (al_yaml_bool(v, "would_deny", &b, d))
            return -1;
        if (b != dec->would_deny)
            cases__failf(f, "; expected would_deny %s", b ? "true" : "false");
    }
    if ((v = al_yaml_get(cs, "websocket"))) {
        if (al_yaml_bool(v, "websocket", &b, d))
            return -1;
        if (b != dec->websocket)
            cases__failf(f, "; expected websocket %s", b ? "true" : "false");
    }
    if ((v = al_yaml_get(cs, "inject"))) {
        if (al_yaml_strlist(v, "inject", false, d))
            return -1;
        bool same = v->n == dec->n_inject;
        for (size_t i = 0; same && i < v->n; i++)
            same = strcasecmp(v->items[i]->str, dec->inject[i].header) == 0;
        if (!same) {
            cases__failf(f, "; expected inject [");
            for (size_t i = 0; i < v->n; i++)
                cases__failf(f, "%s%s", i ? ", " : "", v->items[i]->str);
            cases__failf(f, "], got [");
            for (size_t i = 0; i < dec->n_inject; i++)
                cases__failf(f, "%s%s", i ? ", " : "", dec->inject[i].header);
            cases__failf(f, "]");
        }
    }
    return 0;
}

/* Runs one case: 1 pass, 0 fail (cb told either way), -1 malformed (reported in d). */
static int cases__one(struct policy *p, const struct al_yaml_node *cs, size_t idx,
                      policy_case_cb cb, void *arg, struct al_diags *d)
{
    if (al_yaml_expect_map(cs, "a test case", cases__keys, d))
        return -1;
    char name[256];
    const struct al_yaml_node *v;
    const char *s;
    if ((v = al_yaml_get(cs, "name")) && !al_yaml_str(v, "name", &s, d))
        snprintf(name, sizeof name, "%s", s);
    else
        snprintf(name, sizeof name, "case %zu", idx + 1);
    const char *url = NULL, *method = NULL, *addr = NULL;
    bool connection = false, body = false;
    if (!(v = al_yaml_get(cs, "url")))
        return al_yaml_error(d, cs, "missing_key", "%s: needs url: (or url: dns:NAME)", name), -1;
    if (al_yaml_str(v, "url", &url, d))
        return -1;
    if ((v = al_yaml_get(cs, "method")) && al_yaml_str(v, "method", &method, d))
        return -1;
    if ((v = al_yaml_get(cs, "addr")) && al_yaml_str(v, "addr", &addr, d))
        return -1;
    if ((v = al_yaml_get(cs, "connection")) && al_yaml_bool(v, "connection", &connection, d))
        return -1;
    if ((v = al_yaml_get(cs, "body")) && al_yaml_bool(v, "body", &body, d))
        return -1;
    int expect;
    if (!(v = al_yaml_get(cs, "expect")))
        return al_yaml_error(d, cs, "missing_key", "%s: needs expect: allow|deny", name), -1;
    if (al_yaml_enum(v, "expect", cases__verdicts, &expect, d))
        return -1;
    const char *want_rule = NULL;
    bool has_rule = (v = al_yaml_get(cs, "rule")) != NULL;
    if (has_rule && !al_yaml_is_null(v) && al_yaml_str(v, "rule", &want_rule, d))
        return -1;
    struct policy_query *q = malloc(sizeof *q);
    if (!q)
        return al_yaml_error(d, cs, "oom", "%s: out of memory", name), -1;
    struct al_error err = {0};
    struct policy_query_opts qo = {
        .method = method, .connection = connection, .addr = addr, .body = body};
    if (policy_query_parse(url, &qo, q, &err)) {
        al_yaml_error(d, al_yaml_get(cs, "url"), "bad_case", "%s: %s", name, err.msg);
        free(q);
        return -1;
    }
    struct policy *cp = cases__policy(p, al_yaml_get(cs, "network"), d);
    if (!cp) {
        free(q);
        return -1;
    }
    struct policy_decision dec;
    policy_query_decide(cp, q, &dec);
    struct cases__fail f = {.o = 0};
    f.buf[0] = '\0';
    if ((int)dec.verdict != expect)
        cases__failf(&f, "; expected %s, got %s", cases__verdicts[expect],
                     cases__verdicts[dec.verdict]);
    if (cases__compare(cs, &dec, &f, d) < 0) {
        policy_unref(cp);
        free(q);
        return -1;
    }
    char why[1024];
    policy_query_explain(cp, q, &dec, why, sizeof why);
    struct policy_case_result r = {
        .name = name,
        .file = cs->file,
        .line = cs->line,
        .url = url,
        .method = q->method,
        .pass = f.buf[0] == '\0',
        .expect = cases__verdicts[expect],
        .has_expect_rule = has_rule,
        .expect_rule = want_rule,
        .decision = cases__verdicts[dec.verdict],
        .would_deny = dec.would_deny,
        .reason = policy_reason_code(dec.reason),
        .rule = dec.rule ? dec.rule->name : NULL,
        .rule_line = dec.rule ? dec.rule->line : 0,
        .why = why,
        .failures = f.buf[0] ? f.buf + 2 : "",
    };
    if (cb)
        cb(&r, arg);
    policy_unref(cp);
    free(q);
    return r.pass ? 1 : 0;
}

int policy_cases_run(struct policy *p, const struct al_yaml_node *root, policy_case_cb cb,
                     void *arg, struct policy_cases_summary *sum, struct al_diags *d)
{
    memset(sum, 0, sizeof *sum);
    static const char *const keys[] = {"description", "cases", NULL};
    if (!root)
        return al_diags_add(d, AL_DIAG_ERROR, NULL, 0, 0, "missing_key",
                            "the cases file is empty: it needs cases: [...]"),
               -EINVAL;
    if (al_yaml_expect_map(root, "the cases file", keys, d))
        return -EINVAL;
    const struct al_yaml_node *cases = al_yaml_get(root, "cases");
    if (!cases)
        return al_yaml_error(d, root, "missing_key", "the cases file needs cases: [...]"), -EINVAL;
    if (cases->kind != AL_YAML_SEQ)
        return al_yaml_error(d, cases, "wrong_type", "cases must be a list of cases"), -EINVAL;
    sum->total = cases->n;
    for (size_t i = 0; i < cases->n; i++) {
        int r = cases__one(p, cases->items[i], i, cb, arg, d);
        if (r == 1)
            sum->passed++;
        else if (r == 0)
            sum->failed++;
        else
            sum->malformed++;
    }
    return 0;
}

int policy_cases_run_file(struct policy *p, const char *path, policy_case_cb cb, void *arg,
                          struct policy_cases_summary *sum, struct al_diags *d)
{
    memset(sum, 0, sizeof *sum);
    struct al_yaml_doc *doc = NULL;
    int rc = al_yaml_load_file(path, NULL, &doc, d);
    if (rc == 0)
        rc = policy_cases_run(p, al_yaml_root(doc), cb, arg, sum, d);
    al_yaml_free(doc);
    return rc;
}
