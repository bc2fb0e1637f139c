/* controlplane/templates/apply: what a layer's tar entries do to the root filesystem being
 * made, inside the confined unpacker (airlock-unpack) only.
 *
 * Owns: resolving every path beneath the root directory descriptor with openat2
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), never by
 * string paths; creating files, directories, symlinks, hard links and FIFOs with their
 * owners, modes, times and allowed xattrs; whiteouts (.wh.NAME) and opaque directories
 * (.wh..wh..opq), which remove what lower layers made; the entry count and data bounds.
 *
 * What it refuses, each with a message naming the layer entry:
 *   - paths that are absolute or have ".." (tpl_path_clean), or longer than max_path;
 *   - an entry whose parent path crosses a symbolic link (in this layer or a lower one):
 *     links are kept as links, with any target, and never followed while unpacking;
 *   - hard links whose target is not an existing non-directory inside the root;
 *   - character and block devices outside /dev (those under dev/ are skipped and counted:
 *     every sandbox gets a fresh /dev, so they could never be seen);
 *   - more entries or file data than the bounds allow.
 * Kept within the sandbox's id mapping: uids and gids above 65535 become 65534 (nobody),
 * counted. Setuid and setgid bits are kept (the jail mounts templates nosuid). Xattrs:
 * user.* and security.capability are kept, others skipped and counted.
 */
#ifndef AIRLOCK_CP_TEMPLATES_APPLY_H
#define AIRLOCK_CP_TEMPLATES_APPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tar.h"

#define TPL_ID_MAX    65535u
#define TPL_ID_NOBODY 65534u

struct tpl_apply_stats {
    uint64_t entries;
    uint64_t bytes; /* file data written */
    uint64_t whiteouts;
    uint64_t devices_skipped;
    uint64_t xattrs_skipped;
    uint64_t ids_clamped;
};

struct tpl_apply;
/* root: a directory descriptor (the root filesystem being made; the caller keeps it). */
int tpl_apply_new(int root, uint32_t max_path, uint64_t max_entries, uint64_t max_bytes,
                  struct tpl_apply **out);
void tpl_apply_free(struct tpl_apply *a);
/* Names starting with ".wh." are entries like any other, not whiteouts (a COPY step's
 * archive is files, not an image layer). */
void tpl_apply_no_whiteouts(struct tpl_apply *a);
/* Starts the next layer (whiteouts only remove what lower layers made). */
void tpl_apply_layer(struct tpl_apply *a, unsigned index);
/* Applies one entry, reading its data from t. 0, or < 0 with the reason in msg. */
int tpl_apply_entry(struct tpl_apply *a, struct tpl_tar *t, const struct tpl_tar_entry *e,
                    char *msg, size_t msglen);
const struct tpl_apply_stats *tpl_apply_stats(const struct tpl_apply *a);

/* mkdir -p of path (absolute, without "..") inside the root filesystem root (an image's:
 * untrusted). Every prefix is resolved with openat2(RESOLVE_IN_ROOT), so a link of the image
 * leads at most to another place of the image, never out of it; missing directories are made
 * 0755 and owned by the caller (root of the image). *out, if not NULL, gets an O_PATH
 * descriptor of the directory. 0, or < 0 with the reason in msg. */
int tpl_mkdir_in_root(int root, const char *path, int *out, char *msg, size_t msglen);
/* Opens path inside root as tpl_mkdir_in_root resolves it (flags: O_PATH | O_DIRECTORY,
 * O_RDONLY, ...). A descriptor or -errno. */
int tpl_open_in_root(int root, const char *path, int flags);

#endif
