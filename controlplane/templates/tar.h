/* controlplane/templates/tar: a bounded reader of tar archives (image layers): ustar, pax
 * extended headers (path, linkpath, size, uid, gid, mtime, SCHILY.xattr.*) and GNU long
 * names ('L', 'K') and base-256 numbers. It only parses: what an entry does to a file system
 * is apply.c's business.
 *
 * Owns: the header checks (checksum, numbers, magic), every bound (path and link length, pax
 * and long-name sizes, xattr count and size), and reading entry data without ever reading
 * past an entry or trusting a length it has not checked against what remains.
 * Refused with a message: sparse files ('S', GNU.sparse.*), multi-volume and unknown entry
 * types, a bad checksum, an archive that ends inside an entry.
 * Fuzzed (tests/fuzz/fuzz_tar.c).
 */
#ifndef AIRLOCK_CP_TEMPLATES_TAR_H
#define AIRLOCK_CP_TEMPLATES_TAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TPL_TAR_BLOCK     512
#define TPL_TAR_MAX_XATTR 64         /* per entry */
#define TPL_TAR_MAX_PAX   (1u << 20) /* bytes of one pax header */

enum tpl_tar_type {
    TPL_TAR_REG = 1,
    TPL_TAR_HARDLINK,
    TPL_TAR_SYMLINK,
    TPL_TAR_CHR,
    TPL_TAR_BLK,
    TPL_TAR_DIR,
    TPL_TAR_FIFO,
};

struct tpl_tar_xattr {
    char *name;
    char *value; /* binary */
    size_t len;
};

struct tpl_tar_entry {
    enum tpl_tar_type type;
    char *path;    /* as in the archive (see tpl_path_clean) */
    char *link;    /* symlink target, hard-link target; "" otherwise */
    uint32_t mode; /* permission bits incl. setuid/setgid/sticky (07777) */
    uint64_t uid, gid;
    uint64_t size; /* data bytes (regular files only; 0 for others) */
    int64_t mtime;
    uint32_t mtime_nsec;
    uint32_t devmajor, devminor;
    struct tpl_tar_xattr xattrs[TPL_TAR_MAX_XATTR];
    size_t n_xattrs;
};

/* Returns bytes read (> 0), 0 at the end of the stream, < 0 (negative errno) on failure. */
typedef ssize_t (*tpl_tar_read_fn)(void *arg, void *buf, size_t len);

struct tpl_tar;
/* max_path: bytes of a path or link target (also bounds long names). */
int tpl_tar_open(tpl_tar_read_fn rd, void *arg, uint32_t max_path, struct tpl_tar **out);
void tpl_tar_free(struct tpl_tar *t);
/* 1 and *e (valid until the next call) for the next entry (the previous entry's unread data
 * is skipped), 0 at the end of the archive, < 0 on a malformed archive (tpl_tar_error). */
int tpl_tar_next(struct tpl_tar *t, const struct tpl_tar_entry **e);
/* Data of the current entry: > 0 bytes, 0 at its end, < 0 on failure. */
ssize_t tpl_tar_read(struct tpl_tar *t, void *buf, size_t len);
/* What was wrong ("entry 12 (usr/bin/x): bad header checksum", ...). */
const char *tpl_tar_error(const struct tpl_tar *t);
/* Entries returned so far. */
uint64_t tpl_tar_count(const struct tpl_tar *t);

/* A path of an archive as a path inside the root: "./a//b/" -> "a/b", "./" -> "" (the root
 * itself). Refused (-EINVAL, why in msg): absolute paths, ".." components, components over
 * 255 bytes, more than max bytes. */
int tpl_path_clean(const char *in, char *out, size_t outlen, size_t max, char *msg, size_t msglen);

#endif
