/* cli/policy: `airlock policy lint|explain|test|hash`, the security team's tools.
 *
 * Exit status: 0 ok, 1 the thing checked is bad (lint errors, failed test cases, an invalid
 * policy), 2 usage. Diagnostics go to stderr as "file:line:col: error|warning: ..."; results
 * (summaries, explanations, JSON) go to stdout. docs/policy.md documents every command and
 * the CASES file format. */
#include "cli/cli.h"
#include "policy/policy.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void cli__usage(FILE *f)
{
    fprintf(
        f, "usage: airlock policy <command> ...\n"
           "\n"
           "  lint FILE... [--strict] [--quiet]\n"
           "      Validate policies. Exit 0 when valid (warnings are printed), 1 on errors\n"
           "      (--strict: also on warnings).\n"
           "  explain FILE URL [--method M] [--body] [--addr IP] [--connection] [--json]\n"
           "      Decide one request and say why. URL: https://host[:port]/path,\n"
           "      http://host[:port]/path, host:port or tcp://host:port (raw TCP), dns:NAME.\n"
           "  test FILE CASES.yaml [--verbose]\n"
           "      Run golden request -> decision cases (format: docs/policy.md). Exit 1 if any\n"
           "      case fails.\n"
           "  hash FILE [--canonical]\n"
           "      Print the policy hash (BLAKE2b of the canonical form), or the canonical JSON.\n");
}

static struct policy *cli__load(const char *path, bool print_warnings)
{
    struct al_diags d = AL_DIAGS_INIT;
    struct policy *p = policy_load_file(path, &d);
    al_diags_sort(&d);
    al_diags_print(&d, stderr, !(print_warnings || !p));
    if (!p)
        fprintf(stderr, "%s: invalid policy (%zu error%s); run `airlock policy lint %s`\n", path,
                d.errors, d.errors == 1 ? "" : "s", path);
    al_diags_free(&d);
    return p;
}

/* ---- lint ----------------------------------------------------------------------------- */

static int cli__lint(int argc, char **argv)
{
    bool strict = false, quiet = false;
    static const struct option opts[] = {{"strict", no_argument, NULL, 's'},
                                         {"quiet", no_argument, NULL, 'q'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "sqh", opts, NULL)) != -1) {
        if (c == 's')
            strict = true;
        else if (c == 'q')
            quiet = true;
        else if (c == 'h') {
            cli__usage(stdout);
            return 0;
        } else
            return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "airlock policy lint: give one or more policy files\n");
        return 2;
    }
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        struct al_diags d = AL_DIAGS_INIT;
        struct policy *p = policy_load_file(argv[i], &d);
        al_diags_sort(&d);
        al_diags_print(&d, stderr, false);
        if (!p) {
            rc = 1;
            if (!quiet)
                printf("%s: %zu error%s, %zu warning%s\n", argv[i], d.errors,
                       d.errors == 1 ? "" : "s", d.warnings, d.warnings == 1 ? "" : "s");
        } else {
            if (strict && d.warnings)
                rc = 1;
            if (!quiet)
                printf("%s: ok, %zu rule%s, %zu warning%s, hash %s\n", argv[i],
                       policy_rule_count(p), policy_rule_count(p) == 1 ? "" : "s", d.warnings,
                       d.warnings == 1 ? "" : "s", policy_hash(p));
            policy_unref(p);
        }
        al_diags_free(&d);
    }
    return rc;
}

/* ---- explain -------------------------------------------------------------------------- */

static int cli__explain(int argc, char **argv)
{
    const char *method = NULL, *addr = NULL;
    bool json = false, connection = false, body = false;
    static const struct option opts[] = {{"method", required_argument, NULL, 'X'},
                                         {"addr", required_argument, NULL, 'a'},
                                         {"connection", no_argument, NULL, 'c'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"body", no_argument, NULL, 'b'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "X:a:cjbh", opts, NULL)) != -1) {
        switch (c) {
        case 'X':
            method = optarg;
            break;
        case 'b':
            body = true;
            break;
        case 'a':
            addr = optarg;
            break;
        case 'c':
            connection = true;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            cli__usage(stdout);
            return 0;
        default:
            return 2;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "usage: airlock policy explain FILE URL [--method M] [--body] [--addr IP] "
                        "[--connection] [--json]\n");
        return 2;
    }
    struct policy_query *r = malloc(sizeof *r);
    if (!r)
        return 1;
    struct al_error err = {0};
    struct policy_query_opts qo = {
        .method = method, .connection = connection, .addr = addr, .body = body};
    if (policy_query_parse(argv[optind + 1], &qo, r, &err)) {
        fprintf(stderr, "airlock policy explain: %s\n", err.msg);
        free(r);
        return 2;
    }
    struct policy *p = cli__load(argv[optind], false);
    if (!p) {
        free(r);
        return 1;
    }
    struct policy_decision d;
    policy_query_decide(p, r, &d);
    if (json) {
        json_t *o = policy_query_json(p, r, &d);
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        char why[1024];
        policy_query_explain(p, r, &d, why, sizeof why);
        printf("decision: %s%s\n", d.verdict == POLICY_ALLOW ? "allow" : "deny",
               d.would_deny ? " (report mode: would deny)" : "");
        printf("reason:   %s\n", policy_reason_code(d.reason));
        printf("why:      %s\n", why);
        if (d.rule)
            printf("rule:     %s (%s:%u)\n", d.rule->name, policy_file(p) ? policy_file(p) : "",
                   d.rule->line);
        else
            printf("rule:     (none)\n");
        printf("host:     %s%s%s\n", d.host.len ? d.host.text : "(invalid)",
               d.addr_info.code ? ", address class " : "",
               d.addr_info.code ? d.addr_info.code : "");
        if (!r->dns) {
            printf("tls:      %s\n", policy_tls_name(d.tls));
            printf("inject:  ");
            for (size_t i = 0; i < d.n_inject; i++)
                printf(" %s", d.inject[i].header);
            printf("%s\n", d.n_inject ? "" : " (none)");
        }
        printf("policy:   %s, hash %s\n", policy_name(p), policy_hash(p));
    }
    policy_unref(p);
    free(r);
    return 0;
}

/* ---- test ----------------------------------------------------------------------------- */

static const char *const cli__case_keys[] = {
    "name",   "url", "method", "connection", "addr",      "network", "expect", "rule",
    "reason", "tls", "inject", "would_deny", "websocket", "body",    NULL};

/* Builds the policy a case runs against: the loaded one, or a narrowed view of it. */
static struct policy *cli__case_policy(struct policy *p, const struct al_yaml_node *net,
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
    if ((v = al_yaml_get(net, "allow_out"))) {
        if (al_yaml_strlist(v, "allow_out", false, d) || v->n > 256)
            return NULL;
        for (size_t i = 0; i < v->n; i++)
            allow[i] = v->items[i]->str;
        n.allow_out = allow;
        n.n_allow_out = v->n;
    }
    if ((v = al_yaml_get(net, "deny_out"))) {
        if (al_yaml_strlist(v, "deny_out", false, d) || v->n > 256)
            return NULL;
        for (size_t i = 0; i < v->n; i++)
            deny[i] = v->items[i]->str;
        n.deny_out = deny;
        n.n_deny_out = v->n;
    }
    struct al_error err = {0};
    struct policy *np = policy_narrow(p, &n, &err);
    if (!np)
        al_yaml_error(d, net, "bad_network", "%s", err.msg);
    return np;
}

/* Runs one case; returns 1 pass, 0 fail, -1 malformed case (reported in d). */
static int cli__case(struct policy *p, const struct al_yaml_node *cs, size_t idx, bool verbose,
                     struct al_diags *d)
{
    if (al_yaml_expect_map(cs, "a test case", cli__case_keys, d))
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
    static const char *const verdicts[] = {"deny", "allow", NULL};
    int expect;
    if (!(v = al_yaml_get(cs, "expect")))
        return al_yaml_error(d, cs, "missing_key", "%s: needs expect: allow|deny", name), -1;
    if (al_yaml_enum(v, "expect", verdicts, &expect, d))
        return -1;
    struct policy_query *r = malloc(sizeof *r);
    if (!r)
        return -1;
    struct al_error err = {0};
    struct policy_query_opts qo = {
        .method = method, .connection = connection, .addr = addr, .body = body};
    if (policy_query_parse(url, &qo, r, &err)) {
        al_yaml_error(d, al_yaml_get(cs, "url"), "bad_case", "%s: %s", name, err.msg);
        free(r);
        return -1;
    }
    struct policy *cp = cli__case_policy(p, al_yaml_get(cs, "network"), d);
    if (!cp) {
        free(r);
        return -1;
    }
    struct policy_decision dec;
    policy_query_decide(cp, r, &dec);
    char fail[1024] = "";
    size_t fo = 0;
#define FAILF(...)                                                   \
    do {                                                             \
        int k_ = snprintf(fail + fo, sizeof fail - fo, __VA_ARGS__); \
        if (k_ > 0 && (size_t)k_ < sizeof fail - fo)                 \
            fo += (size_t)k_;                                        \
    } while (0)
    if ((int)dec.verdict != expect)
        FAILF("; expected %s, got %s", verdicts[expect], verdicts[dec.verdict]);
    if ((v = al_yaml_get(cs, "rule"))) {
        const char *want = NULL;
        if (!al_yaml_is_null(v) && al_yaml_str(v, "rule", &want, d)) {
            policy_unref(cp);
            free(r);
            return -1;
        }
        const char *got = dec.rule ? dec.rule->name : NULL;
        if ((want == NULL) != (got == NULL) || (want && strcmp(want, got) != 0))
            FAILF("; expected rule %s, got %s", want ? want : "null", got ? got : "null");
    }
    if ((v = al_yaml_get(cs, "reason")) && !al_yaml_str(v, "reason", &s, d) &&
        strcmp(s, policy_reason_code(dec.reason)) != 0)
        FAILF("; expected reason %s, got %s", s, policy_reason_code(dec.reason));
    if ((v = al_yaml_get(cs, "tls")) && !al_yaml_str(v, "tls", &s, d) &&
        strcmp(s, policy_tls_name(dec.tls)) != 0)
        FAILF("; expected tls %s, got %s", s, policy_tls_name(dec.tls));
    bool b;
    if ((v = al_yaml_get(cs, "would_deny")) && !al_yaml_bool(v, "would_deny", &b, d) &&
        b != dec.would_deny)
        FAILF("; expected would_deny %s", b ? "true" : "false");
    if ((v = al_yaml_get(cs, "websocket")) && !al_yaml_bool(v, "websocket", &b, d) &&
        b != dec.websocket)
        FAILF("; expected websocket %s", b ? "true" : "false");
    if ((v = al_yaml_get(cs, "inject")) && !al_yaml_strlist(v, "inject", false, d)) {
        bool same = v->n == dec.n_inject;
        for (size_t i = 0; same && i < v->n; i++)
            same = strcasecmp(v->items[i]->str, dec.inject[i].header) == 0;
        if (!same) {
            FAILF("; expected inject [");
            for (size_t i = 0; i < v->n; i++)
                FAILF("%s%s", i ? ", " : "", v->items[i]->str);
            FAILF("], got [");
            for (size_t i = 0; i < dec.n_inject; i++)
                FAILF("%s%s", i ? ", " : "", dec.inject[i].header);
            FAILF("]");
        }
    }
#undef FAILF
    char why[1024];
    policy_query_explain(cp, r, &dec, why, sizeof why);
    int pass = fail[0] == '\0';
    if (!pass)
        printf("FAIL %s (%s:%u)%s\n     decision: %s, %s: %s\n", name, cs->file ? cs->file : "",
               cs->line, fail, verdicts[dec.verdict], policy_reason_code(dec.reason), why);
    else if (verbose)
        printf("ok   %s: %s\n", name, why);
    else
        printf("ok   %s\n", name);
    policy_unref(cp);
    free(r);
    return pass;
}

static int cli__test(int argc, char **argv)
{
    bool verbose = false;
    static const struct option opts[] = {
        {"verbose", no_argument, NULL, 'v'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
        if (c == 'v')
            verbose = true;
        else if (c == 'h') {
            cli__usage(stdout);
            return 0;
        } else
            return 2;
    }
    if (argc - optind != 2) {
        fprintf(stderr, "usage: airlock policy test FILE CASES.yaml [--verbose]\n");
        return 2;
    }
    struct policy *p = cli__load(argv[optind], false);
    if (!p)
        return 1;
    struct al_diags d = AL_DIAGS_INIT;
    struct al_yaml_doc *doc = NULL;
    int rc = 1;
    if (al_yaml_load_file(argv[optind + 1], NULL, &doc, &d) == 0) {
        const struct al_yaml_node *root = al_yaml_root(doc);
        static const char *const keys[] = {"description", "cases", NULL};
        const struct al_yaml_node *cases = al_yaml_get(root, "cases");
        if (al_yaml_expect_map(root, "the cases file", keys, &d) == 0 && !cases)
            al_yaml_error(&d, root, "missing_key", "the cases file needs cases: [...]");
        else if (cases && cases->kind != AL_YAML_SEQ)
            al_yaml_error(&d, cases, "wrong_type", "cases must be a list of cases");
        if (d.errors == 0 && cases) {
            size_t pass = 0, fail = 0, bad = 0;
            for (size_t i = 0; i < cases->n; i++) {
                int r = cli__case(p, cases->items[i], i, verbose, &d);
                if (r == 1)
                    pass++;
                else if (r == 0)
                    fail++;
                else
                    bad++;
            }
            printf("%zu case%s: %zu passed, %zu failed%s\n", cases->n, cases->n == 1 ? "" : "s",
                   pass, fail, bad ? ", some cases are malformed (see above)" : "");
            rc = fail || bad || cases->n == 0 ? 1 : 0;
            if (cases->n == 0)
                fprintf(stderr, "%s: no cases\n", argv[optind + 1]);
        }
    }
    al_diags_sort(&d);
    al_diags_print(&d, stderr, false);
    al_diags_free(&d);
    al_yaml_free(doc);
    policy_unref(p);
    return rc;
}

/* ---- hash ----------------------------------------------------------------------------- */

static int cli__hash(int argc, char **argv)
{
    bool canonical = false;
    static const struct option opts[] = {{"canonical", no_argument, NULL, 'c'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "ch", opts, NULL)) != -1) {
        if (c == 'c')
            canonical = true;
        else if (c == 'h') {
            cli__usage(stdout);
            return 0;
        } else
            return 2;
    }
    if (argc - optind != 1) {
        fprintf(stderr, "usage: airlock policy hash FILE [--canonical]\n");
        return 2;
    }
    struct policy *p = cli__load(argv[optind], false);
    if (!p)
        return 1;
    if (canonical) {
        char *s = policy_canonical_json(p);
        printf("%s\n", s ? s : "");
        free(s);
    } else {
        printf("%s\n", policy_hash(p));
    }
    policy_unref(p);
    return 0;
}

int policy_cli_main(int argc, char **argv)
{
    if (argc < 2) {
        cli__usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        cli__usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "lint") == 0)
        return cli__lint(argc - 1, argv + 1);
    if (strcmp(cmd, "explain") == 0)
        return cli__explain(argc - 1, argv + 1);
    if (strcmp(cmd, "test") == 0)
        return cli__test(argc - 1, argv + 1);
    if (strcmp(cmd, "hash") == 0)
        return cli__hash(argc - 1, argv + 1);
    fprintf(stderr, "airlock policy: unknown command '%s'\n\n", cmd);
    cli__usage(stderr);
    return 2;
}
