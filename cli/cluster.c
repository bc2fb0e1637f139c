/* cli/cluster: `airlock cluster nodes|cordon|uncordon|drain|policy` (docs/cluster.md).
 *
 * Owns: the operator's view of the cluster through any airlockd that has the cluster
 * database (a gateway or a node), over its local socket: the node list, cordons, and drain:
 * cordon, then wait until the node holds no sandbox (placed ones as the database records
 * them, running ones as its heartbeats report), or say which remain when the wait is over;
 * published policies: publish a file as a new version (airlockd lints it and refuses it with
 * its findings), list them with the version each node has in force, show a version, roll
 * back (the document of an earlier version published again as the newest).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cp.h"
#include "common/json.h"
#include "common/paths.h"
#include "common/util.h"
#include "controlplane/cluster_db.h"
#include "controlplane/policysel.h"

static void cluster__usage(FILE *f)
{
    fprintf(f,
            "usage: airlock [--state-dir DIR] cluster <command>\n"
            "\n"
            "  nodes [--json]                    the cluster's nodes: lease, cordon, sandboxes\n"
            "  cordon NODE                       no new sandboxes are placed on NODE\n"
            "  uncordon NODE                     NODE takes new sandboxes again\n"
            "  drain NODE [--timeout DURATION]   cordon NODE, then wait (default 10m, 0: do\n"
            "                                    not wait) until it holds no sandbox; exit 1\n"
            "                                    naming the sandboxes that remain\n"
            "  policy publish FILE [--name NAME] publish FILE (linted first) as the newest\n"
            "                                    version of policy NAME (default: FILE's name\n"
            "                                    without .yaml); every node applies it\n"
            "  policy ls [--json]                the published policies and, per node, the\n"
            "                                    version in force (or why not the newest)\n"
            "  policy show NAME [VERSION]        a version's document (default: the newest)\n"
            "  policy rollback NAME VERSION      publish VERSION's document again as the newest\n"
            "\n"
            "Any airlockd with cluster.database answers (a gateway or a node), through\n"
            "%s/run/airlockd.sock.\n",
            al_state_dir());
}

/* GET /admin/cluster/nodes/NODE (*out the node, with its sandboxes); printed on failure. */
static int cluster__node(const char *node, json_t **out)
{
    char path[160];
    snprintf(path, sizeof path, "/admin/cluster/nodes/%s", node);
    int status = 0;
    *out = NULL;
    if (cp_cli_call("GET", path, NULL, &status, out, NULL) || status != 200) {
        json_decref(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}

static int cluster__cordon(const char *node, bool on, bool quiet)
{
    if (!cp_cluster_node_id_valid(node)) {
        fprintf(stderr, "airlock: \"%s\" is not a node id (1..63 of a-z 0-9 . -)\n", node);
        return 2;
    }
    char path[160];
    snprintf(path, sizeof path, "/admin/cluster/nodes/%s/%s", node, on ? "cordon" : "uncordon");
    int status = 0;
    json_t *out = NULL;
    int rc = cp_cli_call("POST", path, NULL, &status, &out, NULL);
    json_decref(out);
    if (rc || status != 200)
        return 1;
    if (!quiet)
        printf("node %s %s\n", node,
               on ? "cordoned: no new sandboxes are placed on it" : "uncordoned");
    return 0;
}

static int cluster__nodes(int argc, char **argv)
{
    bool as_json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (argc > (as_json ? 2 : 1)) {
        cluster__usage(stderr);
        return 2;
    }
    int status = 0;
    json_t *out = NULL;
    if (cp_cli_call("GET", "/admin/cluster/nodes", NULL, &status, &out, NULL) || status != 200) {
        json_decref(out);
        return 1;
    }
    if (as_json) {
        cp_cli_print(out);
        json_decref(out);
        return 0;
    }
    printf("%-24s %-22s %-6s %-9s %s\n", "NODE", "ADDRESS", "LEASE", "CORDONED",
           "SANDBOXES (running/booked/max)");
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(out, "nodes"), i, n)
    {
        json_t *lease = json_object_get(n, "lease"), *booked = json_object_get(n, "booked");
        printf("%-24s %-22s %-6s %-9s %lld/%lld/%lld\n",
               json_string_value(json_object_get(n, "nodeID")),
               json_string_value(json_object_get(n, "address")),
               json_is_true(json_object_get(lease, "valid")) ? "valid" : "gone",
               json_is_true(json_object_get(n, "cordoned")) ? "yes" : "no",
               (long long)json_integer_value(json_object_get(n, "sandboxesRunning")),
               (long long)json_integer_value(json_object_get(booked, "sandboxes")),
               (long long)json_integer_value(json_object_get(n, "sandboxesMax")));
    }
    json_decref(out);
    return 0;
}

static uint64_t cluster__now_ms(void)
{
    return al_now_ns() / 1000000ull;
}

static int cluster__drain(int argc, char **argv)
{
    uint64_t timeout_ms = 600000;
    static const struct option opts[] = {{"timeout", required_argument, NULL, 't'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c != 't' || al_parse_duration_ms(optarg, &timeout_ms)) {
            if (c == 't')
                fprintf(stderr, "airlock: --timeout: not a duration: %s (e.g. 90s, 10m, 0)\n",
                        optarg);
            else
                cluster__usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        cluster__usage(stderr);
        return 2;
    }
    const char *node = argv[optind];
    int rc = cluster__cordon(node, true, true);
    if (rc)
        return rc;
    printf("node %s cordoned; waiting for its sandboxes to end\n", node);
    fflush(stdout);
    uint64_t deadline = cluster__now_ms() + timeout_ms;
    for (;;) {
        json_t *n = NULL;
        if (cluster__node(node, &n))
            return 1;
        json_int_t placed = json_integer_value(json_object_get(n, "sandboxCount"));
        json_int_t running = json_integer_value(json_object_get(n, "sandboxesRunning"));
        bool live = json_is_true(json_object_get(json_object_get(n, "lease"), "valid"));
        if (placed == 0 && (running == 0 || !live)) {
            json_decref(n);
            printf("node %s is drained: no sandbox is left on it (it stays cordoned)\n", node);
            return 0;
        }
        if (cluster__now_ms() >= deadline) {
            printf("node %s is not drained: %lld sandboxes placed on it, %lld running%s\n", node,
                   (long long)placed, (long long)running, placed ? ":" : "");
            size_t i;
            json_t *id;
            json_array_foreach(json_object_get(n, "sandboxes"), i, id)
                printf("  %s\n", json_string_value(id));
            json_decref(n);
            return 1;
        }
        json_decref(n);
        usleep(500000);
    }
}

/* ---- published policies ------------------------------------------------------------------ */

static void cluster__print_findings(const json_t *out, const char *file)
{
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(out, "findings"), i, f)
        fprintf(stderr, "%s:%lld:%lld: %s: %s [%s]\n", file,
                (long long)json_integer_value(json_object_get(f, "line")),
                (long long)json_integer_value(json_object_get(f, "col")),
                json_string_value(json_object_get(f, "severity")),
                json_string_value(json_object_get(f, "message")),
                json_string_value(json_object_get(f, "code")));
}

/* PUT /admin/cluster/policies/NAME with doc; prints the version published. */
static int cluster__publish_doc(const char *name, const char *doc, const char *file)
{
    char path[CP_POLICY_NAME_MAX + 40];
    snprintf(path, sizeof path, "/admin/cluster/policies/%s", name);
    json_t *body = json_pack("{s:s}", "document", doc);
    int status = 0;
    json_t *out = NULL;
    int rc = body ? cp_cli_call("PUT", path, body, &status, &out, NULL) : -ENOMEM;
    json_decref(body);
    if (rc || status != 201) {
        cluster__print_findings(out, file);
        json_decref(out);
        return 1;
    }
    cluster__print_findings(out, file); /* warnings */
    printf("policy %s version %lld published (digest %s); nodes apply it with their next "
           "heartbeat: `airlock cluster policy ls` shows it\n",
           name, (long long)json_integer_value(json_object_get(out, "version")),
           json_string_value(json_object_get(out, "digest")));
    json_decref(out);
    return 0;
}

static int cluster__policy_publish(int argc, char **argv)
{
    const char *name = NULL;
    static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c != 'n') {
            cluster__usage(stderr);
            return 2;
        }
        name = optarg;
    }
    if (optind != argc - 1) {
        cluster__usage(stderr);
        return 2;
    }
    const char *file = argv[optind];
    char def[CP_POLICY_NAME_MAX] = "";
    if (!name) {
        const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
        snprintf(def, sizeof def, "%s", base);
        char *dot = strrchr(def, '.');
        if (dot && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
            *dot = '\0';
        name = def;
    }
    if (!cp_policy_name_valid(name)) {
        fprintf(stderr,
                "airlock: \"%s\" is not a policy name (letters, digits, '.', '_', '-'): give "
                "one with --name\n",
                name);
        return 2;
    }
    char *doc = NULL;
    size_t len = 0;
    struct al_error e = {0};
    if (al_read_file(file, CP_CLUSTER_POLICY_MAX, &doc, &len, &e)) {
        fprintf(stderr, "airlock: %s\n", al_error_str(&e));
        return 1;
    }
    int rc = cluster__publish_doc(name, doc, file);
    free(doc);
    return rc;
}

/* GET /admin/cluster/policies/NAME[/VERSION] (*out: the version with its document). */
static int cluster__policy_get(const char *name, const char *version, json_t **out)
{
    if (!cp_policy_name_valid(name)) {
        fprintf(stderr, "airlock: \"%s\" is not a policy name\n", name);
        return 2;
    }
    char path[CP_POLICY_NAME_MAX + 64];
    snprintf(path, sizeof path, "/admin/cluster/policies/%s/%s", name, version ? version : "");
    if (!version) { /* the newest: the first of its versions */
        snprintf(path, sizeof path, "/admin/cluster/policies/%s", name);
        int status = 0;
        json_t *l = NULL;
        if (cp_cli_call("GET", path, NULL, &status, &l, NULL) || status != 200) {
            json_decref(l);
            return 1;
        }
        snprintf(path, sizeof path, "/admin/cluster/policies/%s/%lld", name,
                 (long long)json_integer_value(json_object_get(
                     json_array_get(json_object_get(l, "versions"), 0), "version")));
        json_decref(l);
    }
    int status = 0;
    *out = NULL;
    if (cp_cli_call("GET", path, NULL, &status, out, NULL) || status != 200) {
        json_decref(*out);
        *out = NULL;
        return 1;
    }
    return 0;
}

static int cluster__policy_ls(bool as_json)
{
    int status = 0;
    json_t *pol = NULL, *nodes = NULL;
    if (cp_cli_call("GET", "/admin/cluster/policies", NULL, &status, &pol, NULL) || status != 200 ||
        cp_cli_call("GET", "/admin/cluster/nodes", NULL, &status, &nodes, NULL) || status != 200) {
        json_decref(pol);
        json_decref(nodes);
        return 1;
    }
    if (as_json) {
        json_t *all = json_pack("{s:O,s:O}", "policies", json_object_get(pol, "policies"), "nodes",
                                json_object_get(nodes, "nodes"));
        cp_cli_print(all);
        json_decref(all);
        json_decref(pol);
        json_decref(nodes);
        return 0;
    }
    printf("%-24s %-8s %-18s %-26s %s\n", "POLICY", "VERSION", "DIGEST", "PUBLISHED", "BY");
    size_t i, k;
    json_t *p, *n;
    json_array_foreach(json_object_get(pol, "policies"), i, p)
    {
        const char *name = json_string_value(json_object_get(p, "name"));
        json_int_t v = json_integer_value(json_object_get(p, "version"));
        printf("%-24s %-8lld %-18.16s %-26s %s\n", name, (long long)v,
               json_string_value(json_object_get(p, "digest")),
               json_string_value(json_object_get(p, "publishedAt")),
               json_string_value(json_object_get(p, "publishedBy")));
        json_array_foreach(json_object_get(nodes, "nodes"), k, n)
        {
            json_t *a = json_object_get(json_object_get(n, "policies"), name);
            json_t *in = json_object_get(a, "version");
            const char *err = json_string_value(json_object_get(a, "error"));
            bool live = json_is_true(json_object_get(json_object_get(n, "lease"), "valid"));
            char has[32];
            if (json_is_integer(in))
                snprintf(has, sizeof has, "version %lld", (long long)json_integer_value(in));
            else
                snprintf(has, sizeof has, "no version");
            printf("  %-22s %s%s%s%s%s\n", json_string_value(json_object_get(n, "nodeID")), has,
                   json_is_integer(in) && json_integer_value(in) == v ? " (the newest)" : "",
                   live ? "" : " (its lease is gone)", err ? ": " : "", err ? err : "");
        }
    }
    json_decref(pol);
    json_decref(nodes);
    return 0;
}

static int cluster__policy(int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : "";
    if (strcmp(sub, "publish") == 0)
        return cluster__policy_publish(argc - 1, argv + 1);
    if (strcmp(sub, "ls") == 0 && (argc == 2 || (argc == 3 && strcmp(argv[2], "--json") == 0)))
        return cluster__policy_ls(argc == 3);
    if (strcmp(sub, "show") == 0 && (argc == 3 || argc == 4)) {
        json_t *v = NULL;
        int rc = cluster__policy_get(argv[2], argc == 4 ? argv[3] : NULL, &v);
        if (!rc)
            fputs(json_string_value(json_object_get(v, "document")), stdout);
        json_decref(v);
        return rc;
    }
    if (strcmp(sub, "rollback") == 0 && argc == 4) {
        json_t *v = NULL;
        int rc = cluster__policy_get(argv[2], argv[3], &v);
        if (rc)
            return rc;
        char label[CP_POLICY_NAME_MAX + 32];
        snprintf(label, sizeof label, "%s version %s", argv[2], argv[3]);
        rc =
            cluster__publish_doc(argv[2], json_string_value(json_object_get(v, "document")), label);
        json_decref(v);
        return rc;
    }
    cluster__usage(stderr);
    return 2;
}

int cluster_cli_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        cluster__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "nodes") == 0)
        return cluster__nodes(argc - 1, argv + 1);
    if ((strcmp(cmd, "cordon") == 0 || strcmp(cmd, "uncordon") == 0)) {
        if (argc != 3) {
            cluster__usage(stderr);
            return 2;
        }
        return cluster__cordon(argv[2], strcmp(cmd, "cordon") == 0, false);
    }
    if (strcmp(cmd, "drain") == 0)
        return cluster__drain(argc - 1, argv + 1);
    if (strcmp(cmd, "policy") == 0)
        return cluster__policy(argc - 1, argv + 1);
    fprintf(stderr, "airlock: unknown cluster command '%s'\n\n", cmd);
    cluster__usage(stderr);
    return 2;
}
