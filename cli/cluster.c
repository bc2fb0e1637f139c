/* cli/cluster: `airlock cluster nodes|cordon|uncordon|drain` (docs/cluster.md).
 *
 * Owns: the operator's view of the cluster through any airlockd that has the cluster
 * database (a gateway or a node), over its local socket: the node list, cordons, and drain:
 * cordon, then wait until the node holds no sandbox (placed ones as the database records
 * them, running ones as its heartbeats report), or say which remain when the wait is over.
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
    fprintf(stderr, "airlock: unknown cluster command '%s'\n\n", cmd);
    cluster__usage(stderr);
    return 2;
}
