/* controlplane/sweep: see sweep.h. */
#include "sweep.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/util.h"

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
