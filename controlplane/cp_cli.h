/* controlplane/cp_cli: the CLI groups of the control plane (`airlock sandbox`, `airlock
 * apikey`), dispatched by controlplane/cli/main.c. */
#ifndef AIRLOCK_CP_CLI_H
#define AIRLOCK_CP_CLI_H

#include <stdbool.h>

struct cp_store;

int sandbox_cli_main(int argc, char **argv);
int apikey_cli_main(int argc, char **argv);
/* Opens <state>/airlockd.db for a CLI command (creating the directory if create), printing
 * what went wrong. */
int cp_cli_open_store(struct cp_store **out, bool create);

#endif
