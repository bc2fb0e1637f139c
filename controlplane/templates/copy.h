/* controlplane/templates/copy: what a COPY step's archive (the tar, gzip'd or not, that the
 * SDK uploaded for the step's files) does to the root filesystem being built, inside the
 * confined unpacker (airlock-unpack --copy) only: the archive is untrusted.
 *
 * E2B's semantics: the step's source without its glob part (tpl_copy_source: "src/{a,b}.js"
 * gives "src", "a?.txt" the archive's root) names what is taken from the archive. If that is
 * a file (or a link), it becomes the destination: the destination itself, or a name in it when the
 * destination ends in '/' or is a directory already. If it is a directory, what is beneath it
 * goes beneath the destination (made if missing). Entries elsewhere in the archive are not
 * copied. The destination is resolved inside the root with RESOLVE_IN_ROOT (a link of the
 * image leads to another place of the image); the entries are written with apply.c beneath
 * it, never through a link. Everything copied gets the step's owner and, except links, its
 * mode when it has one; xattrs are not copied.
 *
 * Refused, with a message naming the entry: what apply.c refuses (absolute paths, "..", a
 * path crossing a link, hard links to what this step does not copy), device nodes, an
 * archive with both a file and a directory at the source, an archive with nothing at it.
 */
#ifndef AIRLOCK_CP_TEMPLATES_COPY_H
#define AIRLOCK_CP_TEMPLATES_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tar.h"

struct tpl_copy_opts {
    const char *src;  /* the step's source as sent (tpl_copy_source makes it a path) */
    const char *dest; /* absolute, without "..": where in the root */
    bool dest_is_dir; /* the step's destination ended in '/' */
    uint32_t uid, gid;
    int mode; /* permission bits of everything but links; -1: the archive's */
    uint32_t max_path;
    uint64_t max_entries, max_bytes;
};

struct tpl_copy_result {
    uint64_t entries; /* copied */
    uint64_t files;   /* of which regular files */
    uint64_t bytes;
    bool single;      /* the source was a file */
    char where[4200]; /* the file it became, or the directory the entries went beneath */
};

/* The part of a COPY source without glob characters, as a path of the archive: up to the
 * last '/' before the first of * ? [ {, or all of it; "" is the archive's root. -EINVAL (why
 * in msg) for an absolute source or one with "..". */
int tpl_copy_source(const char *src, char *out, size_t len, char *msg, size_t msglen);

/* Which way an entry of the archive (cleaned path) relates to the source base. */
enum tpl_copy_rel {
    TPL_COPY_SKIP = 0, /* not copied */
    TPL_COPY_SELF,     /* the source itself */
    TPL_COPY_BENEATH,  /* beneath it: *rel is the path relative to it */
};
enum tpl_copy_rel tpl_copy_relate(const char *base, const char *path, const char **rel);

/* Owner of a COPY ("user", "user:group", numeric ids) as ids of the root filesystem root, from
 * its etc/passwd and etc/group. A user without a group gets the group of its name if there
 * is one, else its primary group (a number: the same number). 0, or < 0 with why in msg. */
int tpl_copy_owner(int root, const char *spec, uint32_t *uid, uint32_t *gid, char *msg,
                   size_t msglen);

/* Applies the archive t to root as the step o says. 0, or < 0 with why in msg. */
int tpl_copy_apply(int root, struct tpl_tar *t, const struct tpl_copy_opts *o,
                   struct tpl_copy_result *res, char *msg, size_t msglen);

#endif
