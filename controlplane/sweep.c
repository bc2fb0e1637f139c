/* controlplane/sweep: see sweep.h. */
#include "sweep.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/util.h"
#include "ids.h"

unsigned cp_sweep_dir(const char *dir, const struct cp_sweep *s)
{
    if (s->create && mkdir(dir, 0700) < 0 && errno != EEXIST) {
        al_warn("cannot create %s: %s", dir, strerror(errno));
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) {
        if (errno != ENOENT || s->create)
            al_warn("cannot read %s: %s", dir, strerror(errno));
        return 0;
    }
    struct dirent *de;
    unsigned removed = 0;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || s->recorded(n, s->arg))
            continue;
        if (s->release) {
            char p[4608];
            snprintf(p, sizeof p, "%s/%s", dir, n);
            s->release(p, s->arg);
        }
        int rc = al_rmtree_at(dirfd(d), n);
        if (rc < 0) {
            al_warn("cannot remove %s/%s: %s", dir, n, strerror(-rc));
            continue;
        }
        removed++;
        al_info("removed %s/%s: no %s record names it (incomplete, or its deletion did not end)",
                dir, n, s->what);
    }
    closedir(d);
    return removed;
}

struct sweep_rm {
    uv_work_t w;
    int rc;
    char path[]; /* NUL-terminated */
};

static void sweep__rm_work(uv_work_t *w)
{
    struct sweep_rm *r = w->data;
    r->rc = al_rmtree(r->path);
}

static void sweep__rm_done(uv_work_t *w, int status)
{
    struct sweep_rm *r = w->data;
    if (status || r->rc)
        al_warn("cannot remove %s: %s (nothing records it: remove it by hand or restart)", r->path,
                strerror(status ? -status : -r->rc));
    free(r);
}

void cp_remove_later(uv_loop_t *loop, const char *path)
{
    size_t n = strlen(path);
    struct sweep_rm *r = malloc(sizeof *r + n + 1);
    if (!r) {
        int rc = al_rmtree(path);
        if (rc < 0)
            al_warn("cannot remove %s: %s", path, strerror(-rc));
        return;
    }
    memcpy(r->path, path, n + 1);
    r->rc = 0;
    r->w.data = r;
    if (uv_queue_work(loop, &r->w, sweep__rm_work, sweep__rm_done) < 0) {
        sweep__rm_work(&r->w);
        sweep__rm_done(&r->w, 0);
    }
}

void cp_take_away(uv_loop_t *loop, const char *path, const char *what)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno != ENOENT)
            al_warn("cannot remove %s %s: %s", what, path, strerror(errno));
        return;
    }
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path) : 1;
    const char *base = slash ? slash + 1 : path;
    char rnd[CP_ID_LEN + 1], gone[4608];
    cp_sandbox_id_new(rnd);
    if ((size_t)snprintf(gone, sizeof gone, "%.*s/.%s.deleted-%s", dl, slash ? path : ".", base,
                         rnd) >= sizeof gone ||
        rename(path, gone) < 0) {
        /* Removed here then: slower, but nothing is left behind. */
        int rc = al_rmtree(path);
        if (rc < 0)
            al_warn("cannot remove %s %s: %s (removed at the next start)", what, path,
                    strerror(-rc));
        return;
    }
    cp_remove_later(loop, gone);
}
