/* cli/main: `airlock <group> <command> ...`. See cli.h. */
#include "cli/cli.h"
#include "cli/cp.h"
#include "common/log.h"
#include "common/paths.h"
#include "vswitch/vswitch.h"

#include <stdio.h>
#include <string.h>

static const struct al_cli_group cli__groups[] = {
    {"policy", "lint, explain and test egress policies", policy_cli_main},
    {"vswitch", "show the virtual switch: sandboxes, interfaces, counters", vswitch_cli_main},
    {"audit", "read, query, verify and export the egress audit log", audit_cli_main},
    {"vault", "manage secrets (write-only: values are never shown)", cli_vault_main},
    {"sandbox", "list, create, exec in, snapshot, fork and kill sandboxes", sandbox_cli_main},
    {"events", "list and follow sandbox lifecycle events", events_cli_main},
    {"snapshot", "list and delete sandbox snapshots", snapshot_cli_main},
    {"apikey", "create, list and revoke API keys", apikey_cli_main},
    {"template", "templates: pull images, build (SDK JSON or Dockerfile), ls, inspect, rm",
     template_cli_main},
    {"cluster", "the cluster's nodes: list, cordon, uncordon, drain", cluster_cli_main},
    {NULL, NULL, NULL},
};

static void cli__usage(FILE *f)
{
    fprintf(f, "usage: airlock [--state-dir DIR] <group> <command> [args...]\n\ngroups:\n");
    for (const struct al_cli_group *g = cli__groups; g->name; g++)
        fprintf(f, "  %-10s %s\n", g->name, g->summary);
    fprintf(f,
            "\n`airlock <group> --help` lists a group's commands. "
            "State directory: %s\n",
            al_state_dir());
}

int main(int argc, char **argv)
{
    al_log_init("airlock", AL_LOG_TEXT, AL_LOG_WARN);
    argc = al_take_state_dir_arg(argc, argv);
    if (argc < 2) {
        cli__usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli__usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("airlock %s\n", AIRLOCK_VERSION);
        return 0;
    }
    for (const struct al_cli_group *g = cli__groups; g->name; g++) {
        if (strcmp(argv[1], g->name) == 0)
            return g->main(argc - 1, argv + 1);
    }
    fprintf(stderr, "airlock: unknown command group '%s'\n\n", argv[1]);
    cli__usage(stderr);
    return 2;
}
