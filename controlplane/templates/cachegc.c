/* controlplane/templates/cachegc: see cachegc.h. */
#include "cachegc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

int tpl_cache_keep_add(struct tpl_cache_keep *k, const char *id)
{
    if (tpl_cache_keep_has(k, id))
        return 0;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 32;
        char **v = realloc(k->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        k->v = v;
        k->cap = cap;
    }
    if (!(k->v[k->n] = strdup(id)))
        return -ENOMEM;
    k->n++;
    return 0;
}

bool tpl_cache_keep_has(const struct tpl_cache_keep *k, const char *id)
{
    for (size_t i = 0; k && i < k->n; i++)
        if (strcmp(k->v[i], id) == 0)
            return true;
    return false;
}

void tpl_cache_keep_free(struct tpl_cache_keep *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->v[i]);
    free(k->v);
    memset(k, 0, sizeof *k);
}

void tpl_cache_touch(const char *path)
{
    if (utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOENT)
        al_warn("cache: cannot mark %s as used: %s", path, strerror(errno));
}

/* One entry: a blob, or a step layer with its record. */
struct cg_ent {
    char id[72];        /* what keep names it by */
    char path[2][4400]; /* blob or layer, and a step's record ("" when none) */
    uint64_t bytes;
    struct timespec used;
};

struct cg {
    struct cg_ent *v;
    size_t n, cap;
};

static bool cg__hex64(const char *s, size_t len)
{
    return len == 64 && al_hex_is_lower(s, len);
}

static struct cg_ent *cg__add(struct cg *c)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct cg_ent *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return NULL;
        c->v = v;
        c->cap = cap;
    }
    struct cg_ent *e = &c->v[c->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static bool cg__newer(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec != b->tv_sec ? a->tv_sec > b->tv_sec : a->tv_nsec > b->tv_nsec;
}

/* Blobs: <dir>/<64 hex>; .partial and .lock files are a download's, never counted. */
static int cg__blobs(struct cg *c, const char *dir, struct al_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : al_error_set(err, -errno, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        struct stat st;
        if (!cg__hex64(de->d_name, strlen(de->d_name)) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        struct cg_ent *e = cg__add(c);
        if (!e) {
            rc = al_error_set(err, -ENOMEM, "out of memory");
            break;
        }
        snprintf(e->id, sizeof e->id, "sha256:%s", de->d_name);
        snprintf(e->path[0], sizeof e->path[0], "%s/%s", dir, de->d_name);
        e->bytes = (uint64_t)st.st_size;
        e->used = st.st_mtim;
    }
    closedir(d);
    return rc;
}

/* Step layers: <dir>/<key>.tar and <key>.json, one entry (the later use of the two). A
 * record without its layer is counted too (it names nothing: it goes first when old). */
static int cg__steps(struct cg *c, const char *dir, struct al_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : al_error_set(err, -errno, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        const char *dot = strchr(de->d_name, '.');
        struct stat st;
        if (!dot || !cg__hex64(de->d_name, (size_t)(dot - de->d_name)) ||
            (strcmp(dot, ".tar") != 0 && strcmp(dot, ".json") != 0) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        char key[72];
        snprintf(key, sizeof key, "%.64s", de->d_name);
        struct cg_ent *e = NULL;
        for (size_t i = 0; i < c->n && !e; i++)
            if (strcmp(c->v[i].id, key) == 0)
                e = &c->v[i];
        if (!e && !(e = cg__add(c))) {
            rc = al_error_set(err, -ENOMEM, "out of memory");
            break;
        }
        snprintf(e->id, sizeof e->id, "%s", key);
        int slot = strcmp(dot, ".tar") == 0 ? 0 : 1;
        snprintf(e->path[slot], sizeof e->path[slot], "%s/%s", dir, de->d_name);
        e->bytes += (uint64_t)st.st_size;
        if (cg__newer(&st.st_mtim, &e->used))
            e->used = st.st_mtim;
    }
    closedir(d);
    return rc;
}

static int cg__by_use(const void *a, const void *b)
{
    const struct cg_ent *x = a, *y = b;
    if (cg__newer(&y->used, &x->used))
        return -1;
    if (cg__newer(&x->used, &y->used))
        return 1;
    return strcmp(x->id, y->id);
}

int tpl_cache_trim(const char *blob_cache, const char *step_dir, uint64_t max,
                   const struct tpl_cache_keep *keep, struct tpl_cache_trim_stats *st,
                   struct al_error *err)
{
    memset(st, 0, sizeof *st);
    struct cg c = {0};
    char blobs[4200];
    int rc = 0;
    if (blob_cache) {
        snprintf(blobs, sizeof blobs, "%s/blobs/sha256", blob_cache);
        rc = cg__blobs(&c, blobs, err);
    }
    if (!rc && step_dir)
        rc = cg__steps(&c, step_dir, err);
    if (rc) {
        free(c.v);
        return rc;
    }
    for (size_t i = 0; i < c.n; i++)
        st->bytes_before += c.v[i].bytes;
    uint64_t total = st->bytes_before;
    if (c.n)
        qsort(c.v, c.n, sizeof *c.v, cg__by_use);
    for (size_t i = 0; i < c.n && total > max; i++) {
        struct cg_ent *e = &c.v[i];
        if (tpl_cache_keep_has(keep, e->id)) {
            st->kept++;
            continue;
        }
        /* A step's record before its layer: a build reads the record first, so it finds
         * either both or no entry at all. */
        bool gone = true;
        for (int slot = 1; slot >= 0; slot--) {
            if (e->path[slot][0] && unlink(e->path[slot]) < 0 && errno != ENOENT) {
                al_warn("cache: cannot remove %s: %s", e->path[slot], strerror(errno));
                gone = false;
            }
        }
        if (!gone)
            continue;
        total -= e->bytes;
        st->removed++;
        st->removed_bytes += e->bytes;
    }
    st->bytes_after = total;
    free(c.v);
    return 0;
}
