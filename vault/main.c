/* vault/main: airlock-vault: the daemon (vault_daemon.c), and with `admin` first the vault's
 * commands that `airlock vault` and `airlock audit hash-secret` run (vault_cli.c), so that
 * the vault library is linked by this program only. */
#include "vault/vault.h"

#include <string.h>

int main(int argc, char **argv);

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "admin") == 0)
        return vault_cli_main(argc - 1, argv + 1);
    return vault_daemon_main(argc, argv);
}
