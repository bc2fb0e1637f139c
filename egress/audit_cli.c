/* egress/audit_cli: `airlock audit tail|query|verify|export|hash-secret`.
 * (Work in progress: the commands land with the audit writer.) */
#include <stdio.h>

int audit_cli_main(int argc, char **argv);

int audit_cli_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "airlock audit: not built yet in this work-in-progress branch\n");
    return 2;
}
