/* controlplane/templates/internal: what the files of templates/ share and nothing else
 * includes: the credentials' accessors, the blob cache's writer, sha256 streams.
 */
#ifndef AIRLOCK_CP_TEMPLATES_INTERNAL_H
#define AIRLOCK_CP_TEMPLATES_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "oci.h"

const char *tpl__creds_user(const struct tpl_creds *c);
const char *tpl__creds_pass(const struct tpl_creds *c);

/* ---- sha256 (OpenSSL: SHA-NI where the CPU has it) ------------------------------------ */
struct tpl_sha256;
struct tpl_sha256 *tpl_sha256_new(void);
void tpl_sha256_update(struct tpl_sha256 *h, const void *data, size_t len);
/* "sha256:<hex>" into out (TPL_DIGEST_LEN + 1); the stream starts again. */
void tpl_sha256_final(struct tpl_sha256 *h, char *out);
void tpl_sha256_reset(struct tpl_sha256 *h);
void tpl_sha256_free(struct tpl_sha256 *h);
void tpl_sha256_digest(const void *data, size_t len, char *out);

/* ---- the blob cache (cache.c) ---------------------------------------------------------
 * <cache>/blobs/sha256/<hex>: complete, verified blobs only (renamed into place after the
 * digest and size checked, fsync'd). <hex>.partial: an interrupted download, resumed by the
 * next pull of that blob. <hex>.lock: held (OFD lock) by the one writer of that blob. */
struct tpl_blob_writer {
    int fd;
    int lock_fd;
    uint64_t off; /* bytes in the partial file (hashed) */
    struct tpl_sha256 *sha;
    char digest[TPL_DIGEST_LEN + 1];
    char final[4200];
    char partial[4200];
};
/* 1: the blob is in the cache already (nothing opened). 0: w is ready, resuming after w->off
 * bytes of an earlier attempt. -EAGAIN: another writer holds the blob (try again later:
 * when it is done the blob is there). < 0: error. */
int tpl_cache_begin(const char *cache_dir, const char *digest, struct tpl_blob_writer *w,
                    struct al_error *err);
int tpl_cache_write(struct tpl_blob_writer *w, const void *data, size_t len);
/* Back to zero bytes (the server did not honour a Range request). */
int tpl_cache_restart(struct tpl_blob_writer *w);
/* Checks size and digest, makes the blob durable and visible. A mismatch removes the
 * partial file (-EBADMSG). Releases w in every case. */
int tpl_cache_commit(struct tpl_blob_writer *w, uint64_t size, struct al_error *err);
/* Gives up; keep = leave the partial file for a later resume. */
void tpl_cache_abort(struct tpl_blob_writer *w, bool keep);
/* Reads a cached blob whole (small ones: configs), checking its digest. */
int tpl_cache_read(const char *cache_dir, const char *digest, size_t max, char **out, size_t *len,
                   struct al_error *err);
/* Stores a small blob already in memory (verified by the caller). */
int tpl_cache_put(const char *cache_dir, const char *digest, const void *data, size_t len,
                  struct al_error *err);

#endif
