/* controlplane/cli: the `airlock` command, humans' tool.
 *
 * Owns only the dispatch: `airlock <group> ...` calls the group's entry point, which lives
 * in the owning component's library (policy_cli_main in policy/, audit in egress/, ...), so
 * each component keeps its own commands. Global option: --state-dir DIR (anywhere).
 * Conventions for every entry point: argv[0] is the group name; exit status 0 = success,
 * 1 = the thing checked is bad (lint errors, verify failure), 2 = usage error; errors go to
 * stderr as one line that says what was wrong and what to do.
 */
#ifndef AIRLOCK_CLI_H
#define AIRLOCK_CLI_H

struct al_cli_group {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
};

#endif
