/* vault/main: the airlock-vault daemon (all of it lives in the library: vault_daemon.c). */
#include "vault/vault.h"

int main(int argc, char **argv);

int main(int argc, char **argv)
{
    return vault_daemon_main(argc, argv);
}
