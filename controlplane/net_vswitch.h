/* controlplane/net_vswitch: the vswitch (vswitch/) as airlockd's network provider (net.h).
 *
 * Owns: opening the switch instance of the state directory (re-adopting what a previous
 * airlockd left attached), translating sandbox sequence numbers to switch sandbox ids, and
 * the address text airlockd records and hands to airlock-egress.
 */
#ifndef AIRLOCK_CP_NET_VSWITCH_H
#define AIRLOCK_CP_NET_VSWITCH_H

#include "common/error.h"

struct cp;

/* Opens the switch; sets cp->net and cp->net_priv. Blocking (at start). */
int cp_net_vswitch_open(struct cp *cp, struct al_error *err);

#endif
