/* egress/admin: the admin API of airlock-egress (see admin.c for the routes). */
#ifndef AIRLOCK_EGRESS_ADMIN_H
#define AIRLOCK_EGRESS_ADMIN_H

#include "common/error.h"

#define EGRESS_SANDBOX_MAX_ADDRS_API 4

struct egress;
struct egress_admin;

/* Listens on path (a unix socket, created 0660 after removing a stale one) on the
 * instance's control loop. */
int egress_admin_start(struct egress *e, const char *path, struct egress_admin **out,
                       struct al_error *err);
/* Stops listening and removes the socket file; the control loop finishes the closing. */
void egress_admin_stop(struct egress_admin *a);

#endif
