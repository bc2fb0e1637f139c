/* vmm/jail/fscopy: copies a jail sandbox's writable layer (the overlay's upper directory)
 * out of its tmpfs into the snapshot store, and back into a new sandbox's tmpfs.
 *
 * Owns: the walk and what it keeps of each entry. Kept: directories, regular files (only
 * their data extents: a sparse file stays sparse, so a huge hole costs nothing), symbolic
 * links, FIFOs, overlayfs whiteouts (character devices 0:0), hard links within the tree,
 * owners, modes (setuid/setgid included), timestamps, and the user.* extended attributes
 * (where overlayfs keeps opaque directories and redirects in a user namespace). Not kept:
 * sockets, other device nodes (a sandbox cannot make any), and security.*, trusted.* and
 * system.* attributes (file capabilities and ACLs a sandbox set apply to its own user
 * namespace only; copied to the host they would mean something else).
 *
 * Owners are shifted, never trusted: every owner must lie in [src_id_base, src_id_base +
 * id_count) (the sandbox's id range on the host) and becomes the same offset from
 * dst_id_base, so a snapshot restored into another id slot is owned by that slot's ids.
 * Nothing is followed: every entry is opened relative to its parent with O_NOFOLLOW, so
 * a symbolic link made by the sandbox cannot point the copy at a host path. Blocking; the
 * caller freezes the sandbox first so that the tree does not change under the walk.
 */
#ifndef AIRLOCK_VMM_JAIL_FSCOPY_H
#define AIRLOCK_VMM_JAIL_FSCOPY_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

#define JAIL_FSCOPY_MAX_DEPTH 256

struct jail_fscopy_opts {
    uint32_t src_id_base, dst_id_base, id_count;
    /* Paths relative to the root that are not copied (NULL-terminated list, or NULL). */
    const char *const *skip;
    /* The destination may hold entries already: directories are merged (their own owner,
     * mode and times are kept), anything else in the way is replaced. Else every entry must
     * be new. */
    bool merge;
    /* At most this many bytes of file data (0: no bound): -EFBIG beyond. */
    uint64_t max_bytes;
    /* Try a reflink (FICLONE) of each regular file before copying its data. */
    bool reflink;
};

struct jail_fscopy_stats {
    uint64_t dirs, files, symlinks, whiteouts, other, hardlinks, skipped;
    uint64_t bytes;           /* file data copied (or cloned) */
    uint64_t reflinked_files; /* of files: cloned rather than copied */
};

/* Copies the tree under src_dir into dst_dir (both directory descriptors; their own
 * attributes are left alone). On failure dst_dir holds part of the tree: the caller copies
 * into a temporary directory and removes it. */
int jail_fscopy(int src_dir, int dst_dir, const struct jail_fscopy_opts *o,
                struct jail_fscopy_stats *st, struct al_error *err);

#endif
