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

/* Prints one case's result (policy/cases.c runs it). */
static void cli__case(const struct policy_case_result *r, void *arg)
{
    bool verbose = *(const bool *)arg;
    if (!r->pass)
        printf("FAIL %s (%s:%u); %s\n     decision: %s, %s: %s\n", r->name, r->file ? r->file : "",
               r->line, r->failures, r->decision, r->reason, r->why);
    else if (verbose)
        printf("ok   %s: %s\n", r->name, r->why);
    else
        printf("ok   %s\n", r->name);
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
    struct policy_cases_summary sum;
    int rc = 1;
    if (policy_cases_run_file(p, argv[optind + 1], cli__case, &verbose, &sum, &d) == 0) {
        printf("%zu case%s: %zu passed, %zu failed%s\n", sum.total, sum.total == 1 ? "" : "s",
               sum.passed, sum.failed,
               sum.malformed ? ", some cases are malformed (see above)" : "");
        rc = sum.failed || sum.malformed || sum.total == 0 ? 1 : 0;
        if (sum.total == 0)
            fprintf(stderr, "%s: no cases\n", argv[optind + 1]);
    }
    al_diags_sort(&d);
    al_diags_print(&d, stderr, false);
    al_diags_free(&d);
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
