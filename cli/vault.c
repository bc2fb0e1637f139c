/* cli/vault: `airlock vault ...` and `airlock audit hash-secret`, carried out by airlock-vault.
 *
 * The vault's commands talk to the running airlock-vault over its socket, and when none runs
 * (or with --offline, and always for init and check) they open the vault's files directly:
 * that needs the vault library, the code that decrypts secrets. It stays out of this process,
 * as out of airlock-egress: the commands are airlock-vault's own admin mode
 * (`airlock-vault admin <command> ...`, vault/vault_cli.c), which this process becomes.
 * airlock-vault is looked for beside this executable (the build tree and the installation
 * keep them in one directory), then on PATH. --state-dir travels in AIRLOCK_STATE_DIR.
 */
#include "cli/cli.h"
#include "common/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VAULT_EXE "airlock-vault"

int cli_vault_run(int argc, char **argv)
{
    if (al_state_dir_arg() && setenv("AIRLOCK_STATE_DIR", al_state_dir_arg(), 1) != 0) {
        fprintf(stderr, "airlock: cannot pass the state directory on: %s\n", strerror(errno));
        return 1;
    }
    char **av = calloc((size_t)argc + 3, sizeof *av);
    if (!av) {
        fprintf(stderr, "airlock: out of memory\n");
        return 1;
    }
    av[0] = VAULT_EXE;
    av[1] = "admin";
    for (int i = 0; i < argc; i++)
        av[i + 2] = argv[i];
    char dir[PATH_MAX], exe[PATH_MAX + sizeof VAULT_EXE + 1] = "";
    int beside = ENOENT; /* no directory of our own: nothing beside us to run */
    if (al_self_dir(dir, sizeof dir) == 0) {
        snprintf(exe, sizeof exe, "%s/" VAULT_EXE, dir);
        execv(exe, av);
        beside = errno;
    }
    execvp(VAULT_EXE, av);
    int path = errno;
    free(av);
    if (exe[0] && beside != ENOENT)
        fprintf(stderr, "airlock: cannot run %s: %s\n", exe, strerror(beside));
    else
        fprintf(stderr,
                "airlock: the vault's commands are airlock-vault's, which is neither beside "
                "this airlock (%s) nor on PATH (%s): install airlock-vault with it\n",
                exe[0] ? dir : "?", strerror(path));
    return 1;
}

int cli_vault_main(int argc, char **argv)
{
    return cli_vault_run(argc - 1, argv + 1);
}
