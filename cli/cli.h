/* cli: the `airlock` command, humans' tool.
 *
 * main.c owns the dispatch: `airlock <group> ...` calls the group's entry point. The groups
 * live here, one file each, and reach the daemons through their sockets (sandbox, events,
 * template: airlockd's; vault: airlock-vault's, see vault.c) or read what the product
 * writes (audit: the egress audit log; policy: policy files, through policy/). The vswitch
 * group is vswitch/'s own (it reads the switch's pinned maps). Global option: --state-dir
 * DIR (anywhere).
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

/* `airlock policy lint|explain|test|hash ...` (policy.c). */
int policy_cli_main(int argc, char **argv);
/* `airlock audit tail|query|verify|export|hash-secret` (audit.c). */
int audit_cli_main(int argc, char **argv);
/* `airlock vault ...` (vault.c): becomes `airlock-vault admin ...`. */
int cli_vault_main(int argc, char **argv);
/* Becomes `airlock-vault admin argv...` (argv[0] is the vault's command); returns only on
 * failure, having said why (exit status 1). */
int cli_vault_run(int argc, char **argv);

#endif
