/* controlplane/embedded: files built into airlockd: the default policies of deploy/policies/
 * and their test cases (deploy/policies/tests/), installed into the policies directory (and its
 * tests/) when they are missing, and the web console's assets
 * (controlplane/console/, served by console.c). */
#ifndef AIRLOCK_CP_EMBEDDED_H
#define AIRLOCK_CP_EMBEDDED_H

#include <stddef.h>

struct cp_embedded {
    const char *name;
    const unsigned char *data;
    size_t len;
};

/* Terminated by an entry with name NULL. */
extern const struct cp_embedded cp_embedded_policies[];
extern const struct cp_embedded cp_embedded_policy_tests[];
extern const struct cp_embedded cp_embedded_console[];

#endif
