/* egress/audit: the proxy's handle on its audit log: common/auditlog (hash chain, group
 * commit, signed checkpoints, rotation) with prefix "egress" under <state>/audit/. This
 * file decides what a failure of the log means for traffic: with the default (fail
 * closed) nothing is allowed while the log is failing; it recovers by itself when the
 * writer does (a full disk that has space again). */
#include "audit.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/auditlog.h"
#include "common/log.h"

struct egress_audit {
    struct al_auditlog *log;
    bool fail_open;
    atomic_int status; /* 0 healthy, else the log's sticky error */
    atomic_uint_fast64_t records, failures;
};

static void audit__on_state(struct al_auditlog *log, int err, void *arg)
{
    struct egress_audit *a = arg;
    (void)log;
    int old = atomic_exchange(&a->status, err);
    if (err && !old)
        al_error("audit log failing (%s): %s", strerror(-err),
                 a->fail_open ? "traffic continues (--audit-fail-open)"
                              : "all traffic is denied until it recovers");
    else if (!err && old)
        al_warn("audit log recovered: traffic is decided normally again");
}

int egress_audit_open(const struct egress_audit_opts *opts, struct egress_audit **out,
                      struct al_error *err)
{
    struct egress_audit *a = calloc(1, sizeof *a);
    if (!a)
        return al_error_set(err, -ENOMEM, "out of memory");
    a->fail_open = opts->fail_open;
    struct al_auditlog_opts lo = {
        .dir = opts->dir,
        .prefix = "egress",
        .rotate_bytes = opts->rotate_bytes,
        .rotate_interval_ms = opts->rotate_ms,
        .retain_bytes = opts->retain_bytes,
        .retain_age_ms = opts->retain_ms,
        .retain_files = opts->retain_files,
        .on_state = audit__on_state,
        .arg = a,
    };
    int rc = al_auditlog_open(&lo, &a->log, err);
    if (rc < 0) {
        al_error_prefix(err, "audit log in %s", opts->dir);
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void egress_audit_close(struct egress_audit *a)
{
    if (!a)
        return;
    int rc = al_auditlog_close(a->log);
    if (rc < 0)
        al_error("audit log: closing: %s", strerror(-rc));
    free(a);
}

int egress_audit_append(struct egress_audit *a, json_t *rec)
{
    uint64_t seq;
    int rc = al_auditlog_append(a->log, rec, &seq);
    json_decref(rec);
    if (rc < 0) {
        atomic_fetch_add(&a->failures, 1);
        if (rc != -EINVAL && rc != -E2BIG)
            atomic_store(&a->status, rc);
        return rc;
    }
    atomic_fetch_add(&a->records, 1);
    return 0;
}

int egress_audit_append_raw(struct egress_audit *a, const char *obj, size_t len)
{
    uint64_t seq;
    int rc = al_auditlog_append_raw(a->log, obj, len, &seq);
    if (rc < 0) {
        atomic_fetch_add(&a->failures, 1);
        if (rc != -EINVAL && rc != -E2BIG)
            atomic_store(&a->status, rc);
        return rc;
    }
    atomic_fetch_add(&a->records, 1);
    return 0;
}

bool egress_audit_ok(const struct egress_audit *a)
{
    if (a->fail_open)
        return true;
    if (atomic_load(&((struct egress_audit *)a)->status) == 0)
        return true;
    /* The writer may have recovered since the last failing append. */
    int st = al_auditlog_status(a->log);
    if (st == 0)
        atomic_store(&((struct egress_audit *)a)->status, 0);
    return st == 0;
}

int egress_audit_status(const struct egress_audit *a)
{
    return al_auditlog_status(a->log);
}

int egress_audit_checkpoint(struct egress_audit *a)
{
    return al_auditlog_checkpoint(a->log);
}

int egress_audit_sync(struct egress_audit *a, uint32_t timeout_ms)
{
    return al_auditlog_sync(a->log, timeout_ms);
}

uint64_t egress_audit_records(const struct egress_audit *a)
{
    return atomic_load(&((struct egress_audit *)a)->records);
}

uint64_t egress_audit_failures(const struct egress_audit *a)
{
    return atomic_load(&((struct egress_audit *)a)->failures);
}

void egress_audit_stats(struct egress_audit *a, struct al_auditlog_stats *st)
{
    al_auditlog_get_stats(a->log, st);
}
