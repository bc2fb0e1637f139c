/* cli/policy: `airlock policy lint|explain|test|hash`, the security team's tools.
 *
 * Exit status: 0 ok, 1 the thing checked is bad (lint errors, failed test cases, an invalid
 * policy), 2 usage. Diagnostics go to stderr as "file:line:col: error|warning: ..."; results
 * (summaries, explanations, JSON) go to stdout. docs/policy.md documents every command and
 * the CASES file format. */
#include "cli/cli.h"
#include "common/http_head.h"
#include "policy/policy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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

/* ---- requests from URLs --------------------------------------------------------------- */

struct cli__req {
    struct policy_request req;
    bool dns;
    char host[1100];
    char path[POLICY_PATH_MAX + 1];
    char method[40];
    struct policy_addr addr;
};

/* Parses URL forms into a request. method may be NULL (default GET for http/https). The
 * request-target parser of the proxies reads the URL (common/http_head.h): what it refuses
 * in a sandbox's request is refused here with the same reason. */
static int cli__url(const char *url, const char *method, bool connection, struct cli__req *r,
                    struct al_error *err)
{
    memset(r, 0, sizeof *r);
    if (strncmp(url, "dns:", 4) == 0) {
        r->dns = true;
        snprintf(r->host, sizeof r->host, "%s", url + 4);
        return 0;
    }
    bool tcp = strncmp(url, "tcp://", 6) == 0;
    const char *u = tcp ? url + 6 : url, *why = NULL;
    struct al_http_target t;
    if (al_http_target_parse(u, strlen(u), AL_HTTP_TARGET_AUTHORITY_OK, &t, &why) < 0) {
        if (strcmp(why, "userinfo_in_authority") == 0)
            return al_error_set(err, -EINVAL,
                                "'%s' has userinfo (user@host): that is not part of the host the "
                                "proxy checks; remove it",
                                url);
        if (strcmp(why, "fragment_in_target") == 0)
            return al_error_set(err, -EINVAL, "'%s': a fragment (#...) is never sent; remove it",
                                url);
        if (strcmp(why, "missing_port") == 0)
            return al_error_set(err, -EINVAL, "'%s': raw TCP needs host:port", url);
        if (strcmp(why, "invalid_target") == 0 && strstr(url, "://"))
            return al_error_set(err, -EINVAL, "unsupported URL scheme in '%s' (https, http, tcp)",
                                url);
        if (strcmp(why, "invalid_target") == 0)
            return al_error_set(err, -EINVAL,
                                "'%s' is not a URL: https://host[:port]/path, "
                                "http://host[:port]/path, host:port, tcp://host:port or dns:NAME",
                                url);
        return al_error_set(err, -EINVAL, "'%s': %s", url, al_http_target_message(why));
    }
    if (t.form != AL_HTTP_TARGET_ABSOLUTE && t.form != AL_HTTP_TARGET_AUTHORITY)
        return al_error_set(err, -EINVAL,
                            "'%s' has no host: https://host[:port]/path, http://host[:port]/path, "
                            "host:port, tcp://host:port or dns:NAME",
                            url);
    if (tcp && t.form != AL_HTTP_TARGET_AUTHORITY)
        return al_error_set(err, -EINVAL, "'%s': raw TCP is tcp://host:port (no scheme inside)",
                            url);
    size_t hl;
    const char *host = al_http_authority_host(&t.authority, &hl);
    memcpy(r->host, host, hl); /* at most 257 bytes (al_http_authority_parse) */
    r->host[hl] = '\0';
    r->req.host = r->host;
    r->req.host_len = hl;
    if (t.form == AL_HTTP_TARGET_AUTHORITY) {
        r->req.scheme = POLICY_SCHEME_TCP;
        r->req.port = t.authority.port;
    } else {
        r->req.scheme = t.https ? POLICY_SCHEME_HTTPS : POLICY_SCHEME_HTTP;
        r->req.port = t.authority.has_port ? t.authority.port : t.https ? 443 : 80;
    }
    if (r->req.scheme == POLICY_SCHEME_TCP || connection) {
        if (method)
            return al_error_set(err, -EINVAL,
                                "a method needs an http:// or https:// request "
                                "(not raw TCP or --connection)");
        return 0;
    }
    snprintf(r->method, sizeof r->method, "%s", method ? method : "GET");
    if (al_http_target_origin(&t, r->path, sizeof r->path) < 0)
        return al_error_set(err, -EINVAL, "'%s': the path is longer than %d bytes", url,
                            POLICY_PATH_MAX);
    r->req.method = r->method;
    r->req.method_len = strlen(r->method);
    r->req.path = r->path;
    r->req.path_len = strlen(r->path);
    return 0;
}

static int cli__addr(const char *s, struct cli__req *r, struct al_error *err)
{
    struct policy_host h;
    if (policy_host_canon(s, strlen(s), &h, err) || h.kind != POLICY_HOST_ADDR)
        return al_error_set(err, -EINVAL, "--addr '%s' is not an IP address", s);
    r->addr = h.addr;
    r->req.addr = &r->addr;
    return 0;
}

static void cli__decide(const struct policy *p, const struct cli__req *r, struct policy_decision *d)
{
    if (r->dns)
        policy_dns_decide(p, r->host, strlen(r->host), d);
    else
        policy_decide(p, &r->req, d);
}

static const char *cli__tls(enum policy_tls t)
{
    return t == POLICY_TLS_INSPECT       ? "inspect"
           : t == POLICY_TLS_PASSTHROUGH ? "passthrough"
                                         : "none";
}

static const char *cli__scheme(enum policy_scheme s)
{
    return s == POLICY_SCHEME_HTTPS ? "https" : s == POLICY_SCHEME_HTTP ? "http" : "tcp";
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

static json_t *cli__decision_json(const struct policy *p, const struct cli__req *r,
                                  const struct policy_decision *d)
{
    char why[1024];
    policy_explain(p, r->dns ? NULL : &r->req, d, why, sizeof why);
    json_t *o = json_object();
    json_object_set_new(o, "decision", json_string(d->verdict == POLICY_ALLOW ? "allow" : "deny"));
    json_object_set_new(o, "would_deny", json_boolean(d->would_deny));
    json_object_set_new(o, "rule", d->rule ? json_string(d->rule->name) : json_null());
    json_object_set_new(o, "rule_line", d->rule ? json_integer(d->rule->line) : json_null());
    json_object_set_new(o, "reason", json_string(policy_reason_code(d->reason)));
    json_object_set_new(o, "explanation", json_string(why));
    json_object_set_new(o, "tls", json_string(cli__tls(d->tls)));
    json_object_set_new(o, "websocket", json_boolean(d->websocket));
    json_t *inj = json_array();
    for (size_t i = 0; i < d->n_inject; i++)
        json_array_append_new(inj, json_string(d->inject[i].header));
    json_object_set_new(o, "inject", inj);
    json_object_set_new(o, "host", d->host.len ? json_string(d->host.text) : json_null());
    json_object_set_new(o, "host_kind",
                        d->host.kind == POLICY_HOST_ADDR   ? json_string("address")
                        : d->host.kind == POLICY_HOST_NAME ? json_string("name")
                                                           : json_null());
    json_object_set_new(o, "address_class",
                        d->addr_info.code ? json_string(d->addr_info.code) : json_null());
    if (r->dns) {
        json_object_set_new(o, "query", json_string("dns"));
    } else {
        json_object_set_new(o, "query", json_string(r->req.method ? "request" : "connection"));
        json_object_set_new(o, "scheme", json_string(cli__scheme(r->req.scheme)));
        json_object_set_new(o, "port", json_integer(r->req.port));
        json_object_set_new(o, "method", r->req.method ? json_string(r->req.method) : json_null());
        json_object_set_new(o, "path", r->req.path ? json_string(r->req.path) : json_null());
        if (r->req.method)
            json_object_set_new(o, "body", json_boolean(r->req.body));
    }
    json_object_set_new(o, "policy",
                        json_pack("{s:s, s:s, s:s}", "name", policy_name(p), "hash", policy_hash(p),
                                  "mode",
                                  policy_mode(p) == POLICY_MODE_REPORT ? "report" : "enforce"));
    return o;
}

/* --body / body: true: the request carries a body (only requests have one). */
static int cli__body(struct cli__req *r, struct al_error *err)
{
    if (!r->req.method)
        return al_error_set(err, -EINVAL,
                            "a body needs an http:// or https:// request (not raw TCP, dns: or "
                            "--connection)");
    r->req.body = true;
    return 0;
}

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
    struct cli__req *r = malloc(sizeof *r);
    if (!r)
        return 1;
    struct al_error err = {0};
    if (cli__url(argv[optind + 1], method, connection, r, &err) ||
        (addr && cli__addr(addr, r, &err)) || (body && cli__body(r, &err))) {
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
    cli__decide(p, r, &d);
    if (json) {
        json_t *o = cli__decision_json(p, r, &d);
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        char why[1024];
        policy_explain(p, r->dns ? NULL : &r->req, &d, why, sizeof why);
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
            printf("tls:      %s\n", cli__tls(d.tls));
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
    struct cli__req *r = malloc(sizeof *r);
    if (!r)
        return -1;
    struct al_error err = {0};
    if (cli__url(url, method, connection, r, &err) || (addr && cli__addr(addr, r, &err)) ||
        (body && cli__body(r, &err))) {
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
    cli__decide(cp, r, &dec);
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
        strcmp(s, cli__tls(dec.tls)) != 0)
        FAILF("; expected tls %s, got %s", s, cli__tls(dec.tls));
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
    policy_explain(cp, r->dns ? NULL : &r->req, &dec, why, sizeof why);
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
