/* controlplane/disk: see disk.h. */
#include "disk.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "common/log.h"
#include "common/paths.h"
#include "cp.h"
#include "egressreg.h"

static void disk__fmt(uint64_t bytes, char *out, size_t n)
{
    if (bytes >= (10ull << 30))
        snprintf(out, n, "%.1f GiB", (double)bytes / (double)(1ull << 30));
    else
        snprintf(out, n, "%.1f MiB", (double)bytes / (double)(1ull << 20));
}

static void disk__on_timer(uv_timer_t *t)
{
    cp_disk_check(t->data);
}

void cp_disk_init(struct cp *cp)
{
    struct cp_disk *d = &cp->disk;
    d->reserve = cp->cfg.disk_reserve_bytes;
    d->n = 0;
    snprintf(d->p[d->n++].path, sizeof d->p[0].path, "%s", cp->cfg.state_dir);
    char audit[4096];
    cp_egress_audit_dir(cp, audit, sizeof audit);
    /* Watched only when it is another file system (or does not exist yet: then the state
     * directory's, checked already). */
    struct stat a, s;
    if (stat(audit, &a) == 0 && stat(cp->cfg.state_dir, &s) == 0 && a.st_dev != s.st_dev)
        snprintf(d->p[d->n++].path, sizeof d->p[0].path, "%s", audit);
    cp_disk_check(cp);
    if (d->reserve && cp->loop && !d->timer_init) {
        uv_timer_init(cp->loop, &d->timer);
        d->timer.data = cp;
        d->timer_init = true;
        uv_timer_start(&d->timer, disk__on_timer, cp->cfg.disk_check_ms, cp->cfg.disk_check_ms);
    }
}

static void disk__closed(uv_handle_t *h)
{
    (void)h;
}

void cp_disk_close(struct cp *cp)
{
    if (cp->disk.timer_init) {
        uv_close((uv_handle_t *)&cp->disk.timer, disk__closed);
        cp->disk.timer_init = false;
    }
}

bool cp_disk_check(struct cp *cp)
{
    struct cp_disk *d = &cp->disk;
    bool low = false;
    size_t low_i = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct statvfs v;
        if (statvfs(d->p[i].path, &v) < 0) {
            d->p[i].err = -errno;
            continue;
        }
        d->p[i].err = 0;
        d->p[i].free_bytes = (uint64_t)v.f_bavail * v.f_frsize;
        d->p[i].total_bytes = (uint64_t)v.f_blocks * v.f_frsize;
        if (d->reserve && d->p[i].free_bytes < d->reserve && !low) {
            low = true;
            low_i = i;
        }
    }
    char fr[32], rs[32];
    disk__fmt(d->p[low ? low_i : d->low_i].free_bytes, fr, sizeof fr);
    disk__fmt(d->reserve, rs, sizeof rs);
    if (low && !d->low)
        al_warn("disk reserve: %s has %s free, less than disk.reserve (%s): new sandboxes are "
                "refused (503) until space is freed; running sandboxes are served, and their "
                "audit records written, until the disk is full, when their egress fails closed",
                d->p[low_i].path, fr, rs);
    else if (!low && d->low)
        al_info("disk reserve: %s has %s free again (disk.reserve %s): new sandboxes are "
                "accepted",
                d->p[d->low_i].path, fr, rs);
    d->low = low;
    if (low)
        d->low_i = low_i;
    return low;
}

bool cp_disk_may_create(struct cp *cp, char *why, size_t whylen)
{
    struct cp_disk *d = &cp->disk;
    if (!d->reserve || !cp_disk_check(cp))
        return true;
    d->refused++;
    char fr[32], rs[32];
    disk__fmt(d->p[d->low_i].free_bytes, fr, sizeof fr);
    disk__fmt(d->reserve, rs, sizeof rs);
    snprintf(why, whylen,
             "not enough disk space: %s has %s free, less than the reserve kept for the audit "
             "log of running sandboxes (disk.reserve %s); new sandboxes are refused until "
             "space is freed there",
             d->p[d->low_i].path, fr, rs);
    return false;
}

void cp_disk_metrics(struct cp *cp, struct al_buf *b)
{
    struct cp_disk *d = &cp->disk;
    cp_disk_check(cp);
    al_buf_printf(b, "# HELP airlock_disk_free_bytes Free space (for unprivileged writers) of "
                     "the file systems of the state directory and the audit log.\n"
                     "# TYPE airlock_disk_free_bytes gauge\n");
    for (size_t i = 0; i < d->n; i++) {
        if (d->p[i].err)
            continue;
        /* a label value: backslash and quote escaped */
        char label[2 * sizeof d->p[i].path];
        size_t o = 0;
        for (const char *c = d->p[i].path; *c && o + 2 < sizeof label; c++) {
            if (*c == '"' || *c == '\\')
                label[o++] = '\\';
            label[o++] = *c == '\n' ? ' ' : *c;
        }
        label[o] = '\0';
        al_buf_printf(b, "airlock_disk_free_bytes{path=\"%s\"} %" PRIu64 "\n", label,
                      d->p[i].free_bytes);
    }
    al_buf_printf(b,
                  "# HELP airlock_disk_reserve_bytes The reserve below which new sandboxes are "
                  "refused (disk.reserve; 0: none).\n"
                  "# TYPE airlock_disk_reserve_bytes gauge\nairlock_disk_reserve_bytes %" PRIu64
                  "\n"
                  "# HELP airlock_disk_reserve_low 1 while a file system is below the reserve "
                  "(new sandboxes are refused).\n"
                  "# TYPE airlock_disk_reserve_low gauge\nairlock_disk_reserve_low %d\n"
                  "# HELP airlock_sandbox_create_refused_total Creations refused, by reason.\n"
                  "# TYPE airlock_sandbox_create_refused_total counter\n"
                  "airlock_sandbox_create_refused_total{reason=\"disk_reserve\"} %" PRIu64 "\n",
                  d->reserve, d->low ? 1 : 0, d->refused);
}
