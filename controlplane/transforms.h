/* controlplane/transforms: a sandbox's API-given header transforms (E2B network.rules).
 *
 * Owns: the shape check of network.rules; what the sandbox's record keeps of them (the
 * domains, header names and the vault secret holding each value: never a value); sealing
 * the values in airlock-vault as secrets scoped to the sandbox (sandboxes/<id>/<tag>-<n>,
 * bound to the transform's domain; the vault releases them only on the sandbox's behalf);
 * deleting them with the sandbox, or when an update replaced them.
 *
 * The record's network object then holds "rules" in E2B's shape with every value replaced
 * by "[sealed]" (what getInfo shows) and "transforms" ([{"domain", "headers": [{"name",
 * "secret"}]}], what the policy narrowing and airlock-egress get; getInfo leaves it out).
 * A value that is exactly "${e2b.secrets.NAME}" names a vault secret (the caller's own
 * Secret NAME, else the operator's NAME: cp_transforms_resolve): that value never passes
 * through the API. Whether the sandbox's policy lets a domain get
 * headers at all is the policy's (policy_narrow: `api_transforms: allow`).
 *
 * The vault is written with blocking calls on airlockd's loop (a local unix socket, bounded
 * by a short deadline), only for the creations and updates that carry transforms and the
 * teardowns of sandboxes that had some.
 */
#ifndef AIRLOCK_CONTROLPLANE_TRANSFORMS_H
#define AIRLOCK_CONTROLPLANE_TRANSFORMS_H

#include <jansson.h>

#include "common/error.h"

struct cp;

#define CP_TRANSFORM_SEALED "[sealed]"

/* network.rules as E2B sends it: {"domain": [{"transform"?: {"headers"?: {NAME: VALUE}}}]}.
 * 0, or -EINVAL with err naming what is wrong (never quoting a value). */
int cp_transforms_check(const json_t *rules, struct al_error *err);
/* Replaces network's "rules" (checked) by the sealed form and adds "transforms", naming the
 * secrets sandboxes/<sb_id>/<tag>-<n>; *pending gets what cp_transforms_seal must write
 * ([{"secret","domain","header","value"}], NULL when nothing). A network without "rules"
 * is left as it is. */
int cp_transforms_prepare(const char *sb_id, const char *tag, json_t *network, json_t **pending,
                          struct al_error *err);
/* Points each "${e2b.secrets.NAME}" of network's transforms at the caller's own secret
 * NAME (Secret.create by the API key key_id: the vault's keys/<key_id>/NAME) when it has one,
 * else at the vault secret NAME an operator stored. No other key's secret can be named: their
 * namespace is refused as a placeholder. 0, or < 0 with err and *status (503: the vault did
 * not answer). */
int cp_transforms_resolve(struct cp *cp, const char *key_id, json_t *network, int *status,
                          struct al_error *err);
/* Writes the pending values into the vault (and drops them from pending, which is freed).
 * On failure, deletes the ones it wrote: 0, or < 0 with err (-ENOTCONN: no vault). */
int cp_transforms_seal(struct cp *cp, json_t *pending, struct al_error *err);
/* Deletes the sandbox-scoped secrets network's transforms name that keep (another network
 * object, or NULL) does not. Failures are logged (the secret stays, unusable by others). */
void cp_transforms_drop(struct cp *cp, const json_t *network, const json_t *keep);

#endif
