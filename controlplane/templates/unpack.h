/* controlplane/templates/unpack: an image's root filesystem, made by the confined helper
 * airlock-unpack (unpack_main.c) from the layers tpl_oci_pull put in the cache. Nothing of
 * the image is parsed in the calling process: it hands the helper the root directory and
 * the cache directory, reads one JSON line per layer back, and checks each layer's digest of
 * its uncompressed bytes against the image config's diff_ids.
 *
 * The result is rootfs in the form the jail mounts (vmm/jail: <template>/rootfs, id-mapped,
 * read-only, nosuid, nodev): owned by ids 0..65535 as the image says, /dev left empty.
 */
#ifndef AIRLOCK_CP_TEMPLATES_UNPACK_H
#define AIRLOCK_CP_TEMPLATES_UNPACK_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "oci.h"

struct tpl_unpack_opts {
    const char *helper;              /* path of airlock-unpack */
    const char *ids_dir;             /* the jail's id slots: <state>/jail/idslots */
    uint32_t uid_base;               /* 0 = the jail's default */
    uint32_t uid_slots;              /* 0 = the jail's default */
    const struct tpl_limits *limits; /* NULL = defaults */
};

struct tpl_unpack_result {
    uint64_t entries, bytes, whiteouts, devices_skipped, xattrs_skipped, ids_clamped;
};

/* Makes rootfs (which must not exist; its parent must) from img's layers. On failure
 * rootfs is removed again: nothing half-made stays. */
int tpl_unpack_image(const struct tpl_unpack_opts *o, const struct tpl_image *img,
                     const char *rootfs, struct tpl_unpack_result *res, struct al_error *err);

/* A COPY step (copy.h), for tpl_unpack_copy. */
struct tpl_unpack_copy {
    const char *src;   /* the step's source as the SDK sent it */
    const char *dest;  /* absolute, without ".." */
    bool dest_is_dir;  /* the step's destination ended in '/' */
    const char *owner; /* user[:group], names of the image or ids */
    int mode;          /* -1: the archive's */
};

struct tpl_unpack_copy_result {
    uint64_t entries, files, bytes;
    bool single;      /* the source was one file */
    char where[4200]; /* the file, or the directory the entries went beneath */
};

/* Applies the files' archive of a COPY step to rootfs (a root filesystem being built) with
 * the confined helper. On failure rootfs may have part of the files: the caller discards
 * the whole version it builds. */
int tpl_unpack_copy(const struct tpl_unpack_opts *o, const char *rootfs, const char *archive,
                    const struct tpl_unpack_copy *c, struct tpl_unpack_copy_result *res,
                    struct al_error *err);

/* Applies one layer (an uncompressed, gzip or zstd tar; whiteouts remove what rootfs has)
 * to rootfs, which has files already (a RUN step's changes: layerdiff.h), with the confined
 * helper (airlock-unpack --layer). diff_id: the sha256 of the uncompressed tar, checked. On
 * failure rootfs may have part of the layer: the caller discards the whole version. */
int tpl_unpack_layer(const struct tpl_unpack_opts *o, const char *rootfs, const char *layer,
                     const char *diff_id, struct tpl_unpack_result *res, struct al_error *err);

#endif
