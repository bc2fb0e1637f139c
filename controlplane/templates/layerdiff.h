/* controlplane/templates/layerdiff: a RUN step's changes as an image layer.
 *
 * The build sandbox's writable layer (the overlay's upper directory, as a jail snapshot of
 * it holds it: owners shifted to the sandbox's host ids, whiteouts as character devices
 * 0:0, opaque directories marked with the user.overlay.opaque attribute) becomes an
 * uncompressed OCI layer: whiteouts as ".wh.NAME", opaque directories as
 * ".wh..wh..opq", owners back to the sandbox's own ids (0..65535), user.* attributes but
 * overlayfs' own, hard links within the layer as links. airlock-unpack --layer applies it
 * to the version being built (unpack.h), with every refusal of an image layer.
 *
 * Owns: the walk (nothing followed: each entry is opened relative to its directory with
 * O_NOFOLLOW, so a link the step made cannot point the walk at a host path), the tar
 * writer (ustar headers, pax records for long names, large sizes and attributes), entries
 * in name order (the same changes give the same layer), and the bounds. Sockets and device
 * nodes other than whiteouts are left out (counted). Blocking.
 */
#ifndef AIRLOCK_CP_TEMPLATES_LAYERDIFF_H
#define AIRLOCK_CP_TEMPLATES_LAYERDIFF_H

#include <stdint.h>

#include "common/error.h"
#include "oci.h"

struct tpl_layer_diff_stats {
    uint64_t entries, files, bytes, whiteouts, opaque, skipped;
};

/* A layer to write: of upper (a directory; owners in [id_base, id_base + 65536)) to out (a
 * new file), with at most max_entries entries and max_bytes of file data. */
struct tpl_layer_diff_opts {
    const char *upper;
    uint32_t id_base;
    const char *out;
    uint64_t max_entries, max_bytes;
};
/* Writes the layer o describes and its sha256 as "sha256:<hex>" to diff_id
 * (TPL_DIGEST_LEN + 1). On failure o->out is removed. */
int tpl_layer_diff(const struct tpl_layer_diff_opts *o, char *diff_id,
                   struct tpl_layer_diff_stats *st, struct al_error *err);

#endif
