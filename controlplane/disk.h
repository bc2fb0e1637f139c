/* controlplane/disk: the disk reserve.
 *
 * Owns: watching the free space of the file systems airlockd and its helpers write to (the
 * state directory, and the egress audit log's directory) against disk.reserve; refusing new
 * sandboxes while any of them is below it (503, with the reason: the E2B SDK raises it as
 * ServiceBusyError with the message); saying so in the log when it goes below and when it
 * recovers; and the figures of /metrics. Running sandboxes are not touched: their egress
 * goes on, and its audit records go on being written into the reserve, until the disk is
 * actually full, when airlock-egress fails closed (its audit log's own rule).
 */
#ifndef AIRLOCK_CP_DISK_H
#define AIRLOCK_CP_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"

#define CP_DISK_PATHS 2

struct cp;

struct cp_disk {
    uint64_t reserve; /* bytes; 0 = no reserve */
    size_t n;
    struct {
        char path[4096];
        uint64_t free_bytes;  /* available to unprivileged writers at the last check */
        uint64_t total_bytes; /* of the file system */
        int err;              /* statvfs failed: -errno */
    } p[CP_DISK_PATHS];
    bool low;         /* below the reserve at the last check */
    size_t low_i;     /* which path */
    uint64_t refused; /* creations refused for it */
    uv_timer_t timer;
    bool timer_init;
};

/* The paths to watch (the state directory and the audit directory airlock-egress uses) and
 * the first check; starts the periodic check (disk.check_interval) on cp's loop. */
void cp_disk_init(struct cp *cp);
void cp_disk_close(struct cp *cp);
/* Checks now (logging a change); true while below the reserve. */
bool cp_disk_check(struct cp *cp);
/* A creation's check: false and why (for the 503) when the reserve refuses it. */
bool cp_disk_may_create(struct cp *cp, char *why, size_t whylen);
/* The Prometheus lines (airlock_disk_*), with fresh figures. */
void cp_disk_metrics(struct cp *cp, struct al_buf *b);

#endif
