/* vmm/jail/idmap: host uid/gid ranges for sandbox user namespaces.
 *
 * Every sandbox gets its own slot of 65536 host ids: sandbox id N (0 = root, 1000 = user)
 * is host id base + slot * 65536 + N, for uids and gids alike. Distinct slots mean two
 * sandboxes never share a host id, so a process that escaped one sandbox could not touch
 * another's files or signal its processes, and on the host it is nobody.
 *
 * Allocation is a record per slot in one file, <dir>.map (64 bytes each: the holder's
 * sandbox id, NUL-padded; all zero = free), claimed under an open-file-description lock of
 * that record. The record is cleared when the sandbox has been torn down (stop, or cleanup
 * after a crash), never merely because airlock-vmm died, so a slot cannot be reused while a
 * crashed sandbox's processes might still exist. Allocation starts at a hash of the sandbox
 * id and probes linearly, so it is O(1) in practice and needs no global lock. One record
 * rewritten in place rather than a file created and removed per sandbox: a disk file
 * system's inode allocation under that churn was a large part of a creation's cost.
 * A holder that is not a sandbox also keeps a lock of the slot's byte of <dir>.held (see
 * jail_idmap_alloc_held), which release respects: the sweep cannot ask airlockd about it.
 * Slot files of earlier versions (<dir>/<slot>, holding the id) are still honoured: such a
 * slot is never handed out, and release and the sweep remove them.
 *
 * Defaults: base 1073741824 (2^30), 16384 slots, i.e. host ids 2^30 .. 2^31-1. The range
 * must not overlap ids used on the host (check /etc/subuid and /etc/subgid).
 */
#ifndef AIRLOCK_VMM_JAIL_IDMAP_H
#define AIRLOCK_VMM_JAIL_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define JAIL_IDS_PER_SLOT     65536u
#define JAIL_ID_BASE_DEFAULT  1073741824u
#define JAIL_ID_SLOTS_DEFAULT 16384u
#define JAIL_IDMAP_RECORD     64 /* bytes per slot in the map (an id is at most 63) */

struct jail_idmap_cfg {
    uint32_t base;
    uint32_t slots;
    const char *dir; /* <state>/jail/idslots: the map is <dir>.map (legacy slot files in dir) */
};

/* Checks that the range is sane: base >= 65536, base + slots * 65536 - 1 < 2^32 - 1. */
int jail_idmap_check(const struct jail_idmap_cfg *cfg, struct al_error *err);
/* First host id of a slot. */
uint32_t jail_idmap_host_base(const struct jail_idmap_cfg *cfg, uint32_t slot);
/* The slot where probing starts for id (pure). */
uint32_t jail_idmap_start_slot(const struct jail_idmap_cfg *cfg, const char *id);
/* Claims a free slot for sandbox id. */
int jail_idmap_alloc(const struct jail_idmap_cfg *cfg, const char *id, uint32_t *slot,
                     struct al_error *err);
/* Claims a slot like jail_idmap_alloc, for a holder that is not a sandbox (airlock-unpack:
 * "unpack-PID"), whose liveness a sweep cannot learn from airlockd. *hold is a descriptor
 * (O_CLOEXEC, read-only, of the empty file <dir>.held) carrying a lock of the slot; the lock
 * lasts while any process has that descriptor, i.e. until the holder and every child it
 * forked have exited or closed it, and while it lasts release refuses with -EBUSY. The
 * holder closes *hold when its processes are gone, then releases. */
int jail_idmap_alloc_held(const struct jail_idmap_cfg *cfg, const char *id, uint32_t *slot,
                          int *hold, struct al_error *err);
/* Releases slot if it is held by id (a slot held by another id is left alone: -EPERM; one
 * whose hold is still taken: -EBUSY). */
int jail_idmap_release(const struct jail_idmap_cfg *cfg, uint32_t slot, const char *id);
/* Who holds slot: copies the holder's id into out; -ENOENT if free. */
int jail_idmap_holder(const struct jail_idmap_cfg *cfg, uint32_t slot, char *out, size_t outlen);
/* Calls fn for every held slot of the map (not legacy slot files) until fn returns non-zero;
 * returns that value, 0, or a negative errno. */
int jail_idmap_foreach(const struct jail_idmap_cfg *cfg,
                       int (*fn)(uint32_t slot, const char *holder, void *arg), void *arg);

#endif
