/* egress/audit_budget: how many records one sandbox may put into the audit log.
 *
 * Owns: the per-sandbox budgets of audit records and the aggregation of what goes beyond
 * them. Allowed decisions (connection, connection_end, http_request, dns_query records with
 * decision allow or would_deny) are written one by one up to cfg.audit_allow_rate per
 * second (burst cfg.audit_allow_burst); denials up to the higher cfg.audit_deny_rate (burst
 * cfg.audit_deny_burst). Beyond its budget a record is not written: it is counted into one
 * `aggregate` record per sandbox, record type, decision, policy, rule, reason, host and
 * interval (cfg.audit_aggregate_ms), which carries the count, the bytes, the errors, the
 * HTTP status classes, and the first and last request ids and times. A sandbox with more
 * distinct groups in one interval than the table holds has the rest merged per record type
 * and decision ("merged": true), so the number of aggregate records per sandbox and interval
 * is bounded whatever it sends.
 *
 * Each sandbox has its own buckets (GCRA, one atomic each: no lock while within budget) and
 * its own table (allocated at its first record over budget), so one sandbox's traffic never
 * changes how another's records are written. The sweep of the control loop
 * (egress_audit_budget_flush: every second, at the sandbox's removal and at shutdown) writes
 * every aggregate whose interval has ended, so that for each sandbox the records written one
 * by one plus the counts of its aggregates are all of its decisions. docs/audit.md,
 * "Aggregate records", is the auditor's description.
 */
#ifndef AIRLOCK_EGRESS_AUDIT_BUDGET_H
#define AIRLOCK_EGRESS_AUDIT_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct egress;
struct egress_sandbox;
struct egress_policy;

/* One decision about to be audited. */
struct egress_audit_event {
    const char *type;     /* "connection", "connection_end", "http_request", "dns_query" */
    const char *decision; /* "allow", "would_deny" or "deny" */
    const char *rule;     /* the deciding rule; NULL when none */
    const char *reason;   /* the record's reason (connection_end: its "end"); may be NULL */
    const char *host;     /* the name decided on (Host, SNI, query name); NULL when none */
    const char *request_id;
    const struct egress_policy *policy; /* the policy of the decision; may be NULL */
    uint64_t bytes_up, bytes_down;
    int status;     /* HTTP status the sandbox got; 0 when none */
    bool error;     /* the exchange failed after its decision (a record with "error") */
    bool aggregate; /* count it whatever the budget (the end of an aggregated connection) */
};

/* True when the record should be written one by one (within the sandbox's budget, or no
 * sandbox, or a sandbox already removed: only its closing connections remain); false when
 * it was counted into an aggregate instead. */
bool egress_audit_budget(struct egress *e, struct egress_sandbox *sb,
                         const struct egress_audit_event *ev);

/* Writes sb's aggregates whose interval has ended (all of them when force). */
void egress_audit_budget_flush(struct egress *e, struct egress_sandbox *sb, bool force);

/* Frees sb's aggregation table (the sandbox's end; nothing is written). */
void egress_audit_budget_free(struct egress_sandbox *sb);

#endif
