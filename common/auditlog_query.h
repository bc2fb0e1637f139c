/* common/auditlog_query: the egress audit log's record filters and its OCSF mapping
 * (auditlog_query.c). */
#ifndef AIRLOCK_COMMON_AUDITLOG_QUERY_H
#define AIRLOCK_COMMON_AUDITLOG_QUERY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/auditlog.h"

#define AL_AUDIT_OCSF_VERSION "1.1.0"

/* A query: every filter given (non-NULL, non-zero) must match. */
struct al_audit_filter {
    const char *sandbox;         /* the record's sandbox id */
    const char *decision;        /* allow | deny | would_deny */
    const char *host;            /* host, SNI or DNS name; ".example.com" matches subdomains too */
    const char *type;            /* a record type; also matches the aggregates that count it */
    const char *reason;          /* a reason code */
    uint64_t since_ns, until_ns; /* wall-clock window: a record whose time is inside, an
                                  * aggregate whose interval overlaps it */
    bool all; /* include the log's own records (checkpoints) and lines that are not JSON */
};

bool al_audit_filter_match(const struct al_audit_filter *f, const struct al_auditlog_record *rec);
/* A time of a filter: RFC 3339 (2026-01-02T03:04:05Z) or an age before now (90s, 10m, 2h).
 * 0 or -EINVAL. */
int al_audit_time_arg(const char *s, uint64_t *ns);
bool al_audit_is_aggregate(const json_t *j);
/* The OCSF 1.1 event of a record (an aggregate: the event it counts, with count and time
 * span; the record itself under "unmapped"), or NULL for a record that is not traffic (or
 * without memory). */
json_t *al_audit_ocsf_event(const struct al_auditlog_record *rec);

#endif
