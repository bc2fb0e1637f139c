/* egress/audit: the content of the egress audit log (docs/audit.md says what each field
 * means) and the proxy's handle on the hash-chained log writer (common/auditlog).
 *
 * Owns: building one record per decision (connection, connection end, HTTP request, DNS
 * query, security event, sandbox registration, policy change, daemon start/stop) as a
 * JSON object with bounded, sanitised strings, and handing it to the writer, whose health
 * decides fail-closed behaviour. Never records a secret value, a body, or (by default) a
 * query string.
 */
#ifndef AIRLOCK_EGRESS_AUDIT_H
#define AIRLOCK_EGRESS_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/auditlog.h"
#include "common/error.h"

#define EGRESS_REC_STR_MAX 1024 /* longest string value kept (bytes of input) */

/* {"type": type}. NULL on ENOMEM (callers then count an audit failure). */
json_t *egress_rec_new(const char *type);
/* A JSON string from untrusted bytes: invalid UTF-8 and NULs become U+FFFD, longer than
 * EGRESS_REC_STR_MAX is cut (at a character boundary) and ends in "...". */
json_t *egress_json_str(const char *s, size_t n);
void egress_rec_str(json_t *r, const char *key, const char *s); /* NULL -> null */
void egress_rec_strn(json_t *r, const char *key, const char *s, size_t n);
void egress_rec_int(json_t *r, const char *key, int64_t v);
void egress_rec_bool(json_t *r, const char *key, bool v);
void egress_rec_us(json_t *r, const char *key, uint64_t ns); /* microseconds, integer */

/* The same records serialised without building a json_t (the per-request paths): members
 * are written in call order into a buffer on the caller's stack (heap only for a record
 * larger than it), with exactly the bytes json_dumpb(JSON_COMPACT) would give for the
 * json_t the helpers above build: strings sanitised and cut as egress_json_str does, then
 * escaped as jansson escapes them (\" \\ \b \f \n \r \t, other controls \u00XX). Keys are
 * trusted ASCII constants. Nesting (objects and arrays) goes EGRESS_RECW_DEPTH deep. */
#define EGRESS_RECW_STACK 4096
#define EGRESS_RECW_DEPTH 6

struct egress_recw {
    char *buf;
    size_t len, cap;
    bool heap;   /* buf was allocated (the record outgrew the stack buffer) */
    bool failed; /* out of memory: the record is lost, egress_recw_end says so */
    int depth;
    bool comma[EGRESS_RECW_DEPTH]; /* a member/element was written at this level */
    size_t mark;                   /* end of {"type":... (egress_recw_members) */
    char stack[EGRESS_RECW_STACK];
};

/* {"type":type */
void egress_recw_begin(struct egress_recw *w, const char *type);
void egress_recw_str(struct egress_recw *w, const char *key, const char *s); /* NULL -> null */
void egress_recw_strn(struct egress_recw *w, const char *key, const char *s, size_t n);
void egress_recw_int(struct egress_recw *w, const char *key, int64_t v);
void egress_recw_bool(struct egress_recw *w, const char *key, bool v);
void egress_recw_null(struct egress_recw *w, const char *key);
void egress_recw_us(struct egress_recw *w, const char *key, uint64_t ns);
/* "key":{ ... } and "key":[ ... ]; elements of an array: egress_recw_elem_strn. */
void egress_recw_obj_begin(struct egress_recw *w, const char *key);
void egress_recw_arr_begin(struct egress_recw *w, const char *key);
void egress_recw_elem_strn(struct egress_recw *w, const char *s, size_t n);
void egress_recw_close(struct egress_recw *w, char bracket); /* '}' or ']' */
/* Members serialised earlier (by another writer: egress_recw_members) written as they are:
 * records of one connection repeat the sandbox's and the connection's fields. */
void egress_recw_raw(struct egress_recw *w, const char *members, size_t len);
/* The members written since egress_recw_begin (after "type"), for egress_recw_raw; NULL and
 * 0 when the writer failed. Valid until the writer is freed. */
const char *egress_recw_members(const struct egress_recw *w, size_t *len);
/* Closes the record: 0 and (*out, *len) the object's bytes (valid until egress_recw_free),
 * or -ENOMEM. */
int egress_recw_end(struct egress_recw *w, const char **out, size_t *len);
void egress_recw_free(struct egress_recw *w);

struct egress_audit;

struct egress_audit_opts {
    const char *dir; /* <state>/audit */
    bool fail_open;  /* default false: a failing log makes egress_audit_ok false */
    /* Rotation and retention (al_auditlog_opts; 0 = the library's default, for rotation,
     * or no bound, for retention). */
    uint64_t rotate_bytes, rotate_ms;
    uint64_t retain_bytes, retain_ms;
    uint32_t retain_files;
};

int egress_audit_open(const struct egress_audit_opts *opts, struct egress_audit **out,
                      struct al_error *err);
/* Writes a last record, flushes and closes. */
void egress_audit_close(struct egress_audit *a);
/* Appends (steals the reference). Thread-safe, never blocks on the disk. < 0 when the
 * record could not be accepted (the failure is counted). */
int egress_audit_append(struct egress_audit *a, json_t *rec);
/* The same for a record serialised with egress_recw (one compact JSON object). */
int egress_audit_append_raw(struct egress_audit *a, const char *obj, size_t len);
/* Whether traffic may be allowed: the log is healthy, or fail_open is configured. */
bool egress_audit_ok(const struct egress_audit *a);
/* 0 while healthy, else the log's sticky negative errno. */
int egress_audit_status(const struct egress_audit *a);
/* Writes a signed checkpoint now (operators before shipping the checkpoint file). */
int egress_audit_checkpoint(struct egress_audit *a);
/* Blocks until everything appended so far is durable (tests, shutdown, admin). */
int egress_audit_sync(struct egress_audit *a, uint32_t timeout_ms);
uint64_t egress_audit_records(const struct egress_audit *a);
/* The writer's figures (files deleted by retention, rotations, ...). */
void egress_audit_stats(struct egress_audit *a, struct al_auditlog_stats *st);
uint64_t egress_audit_failures(const struct egress_audit *a);

#endif
