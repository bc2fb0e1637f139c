/* controlplane/templates/cache: the content-addressed blob cache every pull shares
 * (internal.h).
 *
 * A blob is visible under its digest only once complete and verified: downloads go to
 * <hex>.partial, are checked (size, sha256), fsync'd and renamed; the directory is fsync'd
 * after. One writer per blob: <hex>.lock is held with an open-file-description lock, so
 * threads of one process and separate processes exclude each other alike, and a crash
 * releases it. A second pull of the same blob waits and then finds it in place. A partial
 * file left by an interrupted download is hashed again and resumed (Range) by the next pull.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "cachegc.h"

/* ---- paths ------------------------------------------------------------------------------ */

int tpl_cache_blob_path(const char *cache_dir, const char *digest, char *out, size_t len)
{
    if (!tpl_digest_valid(digest))
        return -EINVAL;
    int n = snprintf(out, len, "%s/blobs/sha256/%s", cache_dir, digest + 7);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int cache__dir(const char *cache_dir, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/blobs/sha256", cache_dir);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return al_mkdir_p(out, 0700);
}

/* ---- writing ---------------------------------------------------------------------------- */

static int cache__lock(int fd, bool wait)
{
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    for (;;) {
        if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) == 0)
            return 0;
        if (errno != EINTR)
            return errno == EAGAIN || errno == EACCES ? -EAGAIN : -errno;
    }
}

/* Hashes what an earlier attempt left in the partial file. */
static int cache__rehash(struct tpl_blob_writer *w)
{
    char *buf = malloc(1 << 20);
    if (!buf)
        return -ENOMEM;
    uint64_t off = 0;
    int rc = 0;
    for (;;) {
        ssize_t n = pread(w->fd, buf, 1 << 20, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        tpl_sha256_update(w->sha, buf, (size_t)n);
        off += (uint64_t)n;
    }
    free(buf);
    w->off = off;
    if (!rc && lseek(w->fd, (off_t)off, SEEK_SET) < 0)
        rc = -errno;
    return rc;
}

int tpl_cache_begin(const char *cache_dir, const char *digest, struct tpl_blob_writer *w,
                    struct al_error *err)
{
    memset(w, 0, sizeof *w);
    w->fd = w->lock_fd = -1;
    char dir[4096];
    int rc = cache__dir(cache_dir, dir, sizeof dir);
    if (rc)
        return al_error_set(err, rc, "cannot make the blob cache %s: %s", dir, strerror(-rc));
    if ((rc = tpl_cache_blob_path(cache_dir, digest, w->final, sizeof w->final)))
        return al_error_set(err, rc, "bad digest '%s'", digest);
    snprintf(w->digest, sizeof w->digest, "%s", digest);
    snprintf(w->partial, sizeof w->partial, "%s.partial", w->final);
    if (access(w->final, F_OK) == 0) {
        tpl_cache_touch(w->final); /* (its place in the size bound's order: cachegc.h) */
        return 1;
    }
    char lock[4210];
    snprintf(lock, sizeof lock, "%s.lock", w->final);
    w->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w->lock_fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", lock, strerror(errno));
    if ((rc = cache__lock(w->lock_fd, false))) {
        close(w->lock_fd);
        w->lock_fd = -1;
        if (rc == -EAGAIN)
            return -EAGAIN;
        return al_error_set(err, rc, "cannot lock %s: %s", lock, strerror(-rc));
    }
    /* Another writer may have finished between the check and the lock. */
    if (access(w->final, F_OK) == 0) {
        close(w->lock_fd);
        w->lock_fd = -1;
        return 1;
    }
    w->sha = tpl_sha256_new();
    w->fd = open(w->partial, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (!w->sha || w->fd < 0) {
        rc = w->sha ? -errno : -ENOMEM;
        tpl_cache_abort(w, true);
        return al_error_set(err, rc, "cannot open %s: %s", w->partial, strerror(-rc));
    }
    if ((rc = cache__rehash(w))) {
        tpl_cache_abort(w, false);
        return al_error_set(err, rc, "cannot read %s: %s", w->partial, strerror(-rc));
    }
    return 0;
}

int tpl_cache_write(struct tpl_blob_writer *w, const void *data, size_t len)
{
    int rc = al_write_all(w->fd, data, len);
    if (rc < 0)
        return rc;
    tpl_sha256_update(w->sha, data, len);
    w->off += len;
    return 0;
}

int tpl_cache_restart(struct tpl_blob_writer *w)
{
    if (ftruncate(w->fd, 0) < 0 || lseek(w->fd, 0, SEEK_SET) < 0)
        return -errno;
    tpl_sha256_reset(w->sha);
    w->off = 0;
    return 0;
}

void tpl_cache_abort(struct tpl_blob_writer *w, bool keep)
{
    if (w->fd >= 0) {
        close(w->fd);
        if (!keep)
            unlink(w->partial);
    }
    if (w->lock_fd >= 0)
        close(w->lock_fd); /* releases the lock; the lock file stays (it is reused) */
    tpl_sha256_free(w->sha);
    w->fd = w->lock_fd = -1;
    w->sha = NULL;
}

int tpl_cache_commit(struct tpl_blob_writer *w, uint64_t size, struct al_error *err)
{
    char got[TPL_DIGEST_LEN + 1];
    int rc = 0;
    if (w->off != size) {
        rc = al_error_set(err, -EBADMSG,
                          "blob %s: the registry sent %llu bytes where the manifest says %llu",
                          w->digest, (unsigned long long)w->off, (unsigned long long)size);
        tpl_cache_abort(w, false);
        return rc;
    }
    tpl_sha256_final(w->sha, got);
    if (strcmp(got, w->digest) != 0) {
        rc = al_error_set(err, -EBADMSG,
                          "blob %s: the data the registry sent has the digest %s: refused (a "
                          "corrupted or tampered download; nothing of it was kept)",
                          w->digest, got);
        tpl_cache_abort(w, false);
        return rc;
    }
    if (fsync(w->fd) < 0 || rename(w->partial, w->final) < 0) {
        rc = al_error_set(err, -errno, "cannot store blob %s in %s: %s", w->digest, w->final,
                          strerror(errno));
        tpl_cache_abort(w, false);
        return rc;
    }
    close(w->fd);
    w->fd = -1;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", w->final);
    *strrchr(dir, '/') = '\0';
    al_fsync_dir(dir);
    tpl_cache_abort(w, true);
    return 0;
}

/* ---- small blobs ------------------------------------------------------------------------ */

int tpl_cache_read(const char *cache_dir, const char *digest, size_t max, char **out, size_t *len,
                   struct al_error *err)
{
    char p[4200];
    int rc = tpl_cache_blob_path(cache_dir, digest, p, sizeof p);
    if (rc)
        return al_error_set(err, rc, "bad digest '%s'", digest);
    if ((rc = al_read_file(p, max, out, len, err)))
        return rc;
    tpl_cache_touch(p);
    char got[TPL_DIGEST_LEN + 1];
    tpl_sha256_digest(*out, *len, got);
    if (strcmp(got, digest) != 0) {
        free(*out);
        *out = NULL;
        unlink(p);
        return al_error_set(err, -EBADMSG, "cached blob %s was damaged (digest %s): removed",
                            digest, got);
    }
    return 0;
}

int tpl_cache_put(const char *cache_dir, const char *digest, const void *data, size_t len,
                  struct al_error *err)
{
    char dir[4096], p[4200];
    int rc = cache__dir(cache_dir, dir, sizeof dir);
    if (!rc)
        rc = tpl_cache_blob_path(cache_dir, digest, p, sizeof p);
    if (rc)
        return al_error_set(err, rc, "cannot make the blob cache in %s: %s", cache_dir,
                            strerror(-rc));
    if (access(p, F_OK) == 0)
        return 0;
    return al_write_file_atomic(p, data, len, 0600, err);
}
