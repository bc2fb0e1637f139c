/* controlplane/templates/cachegc: the size bound of the blob cache and the step cache.
 *
 * Owns: the rule that keeps both caches (the pulls' blobs, <cache>/blobs/sha256/<hex>, and
 * the RUN steps' layers, <steps>/<key>.tar with its record <key>.json) together within
 * templates.cache_max: least recently used first (a use touches the file's mtime:
 * tpl_cache_touch), never an entry the caller keeps (what an existing template was made
 * from: its image's blobs, its steps' layers), never a download or a layer under way
 * (.partial files) or a lock. The caller runs it while no build runs (builds.c), so no
 * build is reading what it removes. Blocking (file system walks): off the loop.
 */
#ifndef AIRLOCK_CP_TEMPLATES_CACHEGC_H
#define AIRLOCK_CP_TEMPLATES_CACHEGC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* What must stay: blob digests ("sha256:<hex>") and step keys ("<hex>", 64 digits). */
struct tpl_cache_keep {
    char **v;
    size_t n, cap;
};

int tpl_cache_keep_add(struct tpl_cache_keep *k, const char *id);
bool tpl_cache_keep_has(const struct tpl_cache_keep *k, const char *id);
void tpl_cache_keep_free(struct tpl_cache_keep *k);

struct tpl_cache_trim_stats {
    uint64_t bytes_before, bytes_after; /* of the entries that count (both caches) */
    uint64_t removed, removed_bytes;
    uint64_t kept; /* entries that would have gone but are kept */
};

/* Removes the least recently used entries of the blob cache blob_cache (may be NULL) and
 * the step cache step_dir (may be NULL) until both together hold at most max bytes (a
 * step layer and its record go together). A missing directory is an empty cache. */
int tpl_cache_trim(const char *blob_cache, const char *step_dir, uint64_t max,
                   const struct tpl_cache_keep *keep, struct tpl_cache_trim_stats *st,
                   struct al_error *err);
/* The entry at path was used now (its place in the order). */
void tpl_cache_touch(const char *path);

#endif
