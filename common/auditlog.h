/* common/auditlog: a tamper-evident, hash-chained JSON Lines log (writer, reader, verifier).
 *
 * Owns the log format, the group-commit writer, checkpoint signing, rotation, retention and
 * offline verification. Does not own what a record says: callers (the egress proxy, the
 * vault) pass a JSON object, and must never put a secret value in it (see the redaction
 * helpers at the end). docs/audit-chain.md describes the format for auditors.
 *
 * Format. Every record is one line of compact JSON ending in '\n':
 *
 *   {"seq":42,"time":"2026-11-30T01:02:03.123456Z","log_id":"<32 hex>","prev":"<64 hex>",...}
 *
 * - seq: 1, 2, 3, ... with no gap, across files and restarts.
 * - time: UTC, microseconds.
 * - log_id: random id of this log, chosen at first start (stored with the signing key).
 * - prev: BLAKE2b-256 (libsodium crypto_generichash, unkeyed, 32-byte output) of the exact
 *   bytes of the previous record's line without its '\n'; 64 zeros for seq 1.
 * - then the caller's fields, in the caller's order. The keys seq, time, log_id, prev and
 *   auditlog are reserved.
 *
 * The log's own records carry an "auditlog" object. Two kinds. The signed checkpoint:
 *
 *   "auditlog":{"event":"checkpoint","reason":R,"covers":S-1,"key":"<16 hex>","sig":"<128 hex>"}
 *
 * where S is the checkpoint's own seq, "covers" the last record it vouches for, and "sig" an
 * Ed25519 signature (crypto_sign_detached) over the text
 *
 *   "airlock-auditlog-checkpoint-v1\n" log_id "\n" covers "\n" prev "\n" time "\n" reason "\n"
 *
 * (decimal covers, the checkpoint's own prev and time fields). Since prev is the hash of
 * record S-1, which holds the hash of S-2, ..., one signature vouches for every record before
 * it. "key" is the first 8 bytes of BLAKE2b(public key), in hex. Reasons: "start" (seq 1 of
 * a new log), "open" (a writer reopened the log; carries "recovered":{"file","offset","bytes"}
 * when it found bytes of an interrupted write after the last complete record), "seal" (the
 * last record of every file that is closed for the next), "rotate" (the first record of
 * every file after the first), "retention" (right after a retention record), "count",
 * "interval", "close" (clean shutdown), "request" (al_auditlog_checkpoint).
 * Every file therefore begins with a signed checkpoint, which anchors its position after
 * retention has deleted the files before it, and every closed file ends with one.
 *
 * The retention record, written (and made durable) before retention deletes a file:
 *
 *   "auditlog":{"event":"retention","retained_from":F,"pruned":[{"file","first_seq",
 *     "last_seq","bytes","rule"}...],"history":[{"first_seq","last_seq","files","bytes",
 *     "rule","limit"}...],"rules":{"max_age_ms","max_bytes","max_files"}}
 *
 * "pruned" lists the files this pass deletes; "history" covers every seq from 1 to F-1 that
 * retention deleted so far, in ranges by rule ("max_age", "max_bytes", "max_files", or
 * "unaccounted": files that were gone when the writer started, deleted by someone else);
 * "rules" are the limits in force. The writer keeps the history in <dir>/<prefix>.retention.
 *
 * Files: <dir>/<prefix>-<first seq, 20 digits>-<UTC yyyymmddThhmmssZ>.jsonl, so that names
 * sort in log order; <dir>/<prefix>.key (0600: log id + Ed25519 key pair, created at first
 * start), <dir>/<prefix>.pub (0644: log id + public key, the file to hand to auditors),
 * <dir>/<prefix>.checkpoints (a copy of every checkpoint line, appended after the checkpoint
 * is durable in the log: ship it off the host), <dir>/<prefix>.lock (one writer at a time),
 * <dir>/<prefix>.retention (what retention deleted so far, for the next retention record).
 *
 * Durability: records are buffered and written by a writer thread (group commit) that
 * fdatasyncs at least every sync_interval_ms (<= 100 ms), and before and after every
 * checkpoint. A crash loses at most the unsynced window; it leaves either a clean end or a
 * torn last line, which the next writer leaves in place, declares in its "open" checkpoint and
 * continues in a new file; the verifier reports it as a truncation, not as corruption.
 *
 * Threading: al_auditlog_append and friends may be called from any thread (one mutex; the
 * lock is held for formatting, hashing and a memcpy, never for I/O), so a libuv loop can
 * append without blocking on the disk. Failures of write(2) or fdatasync(2) are sticky:
 * every later append returns the error (callers fail closed), on_state is called, and
 * al_auditlog_status reports it. A full disk (ENOSPC, EDQUOT) is retried every sync interval
 * and clears itself once space is back (on_state is called again with 0); an fdatasync
 * failure or EIO is permanent until the log is reopened.
 */
#ifndef AIRLOCK_COMMON_AUDITLOG_H
#define AIRLOCK_COMMON_AUDITLOG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "error.h"

#define AL_AUDITLOG_MAX_RECORD  (256 * 1024) /* bytes of one line; longer is refused */
#define AL_AUDITLOG_ID_HEX      32           /* log_id: 16 random bytes in hex */
#define AL_AUDITLOG_HASH_HEX    64           /* prev: BLAKE2b-256 in hex */
#define AL_AUDITLOG_PATH_MAX    1024
#define AL_AUDITLOG_HISTORY_MAX 16 /* ranges of a retention history (merged beyond) */

/* ---- writer ------------------------------------------------------------------------ */
struct al_auditlog;

struct al_auditlog_opts {
    const char *dir;                 /* required; created 0750 if absent */
    const char *prefix;              /* required; [a-z0-9_-]{1,32}, e.g. "egress", "vault" */
    const char *key_file;            /* default <dir>/<prefix>.key */
    const char *checkpoint_file;     /* default <dir>/<prefix>.checkpoints; "" = none */
    uint32_t sync_interval_ms;       /* group commit window; default and maximum 100 */
    uint32_t checkpoint_records;     /* a checkpoint after this many records; default 10000 */
    uint32_t checkpoint_interval_ms; /* and at least this often while records arrive; 60000 */
    uint64_t rotate_bytes;           /* start a new file beyond this size; default 64 MiB */
    uint64_t rotate_interval_ms;     /* and when the file is this old; 0 = never by age */
    /* Retention (the oldest files first, never the one being written; each pass is
     * announced in the log by a "retention" record before a file is deleted): */
    uint64_t retain_age_ms;   /* delete files last written longer ago; 0 = never by age */
    uint64_t retain_bytes;    /* delete while all files together are larger; 0 = no bound */
    uint32_t retain_files;    /* keep at most this many files; 0 = no bound */
    size_t max_pending_bytes; /* unwritten bytes before append says -ENOBUFS; 64 MiB */
    mode_t file_mode;         /* of log files; default 0640 */
    /* Called on the writer thread when the log fails (err < 0) or recovers (err = 0). Keep
     * it short; use uv_async_send to get to a loop. */
    void (*on_state)(struct al_auditlog *log, int err, void *arg);
    void *arg;
};

/* Opens (or creates) the log: takes the lock, loads or creates the key, finds the end of the
 * chain, writes a "start" or "open" checkpoint and starts the writer thread. Errors say what
 * to do (another writer holds the log, key missing while files exist, unreadable file...). */
int al_auditlog_open(const struct al_auditlog_opts *opts, struct al_auditlog **out,
                     struct al_error *err);

/* Appends one record: fields must be a JSON object without the reserved keys. Returns 0
 * and the record's seq, or: -EINVAL (not an object, reserved key), -E2BIG (record too
 * large), -ENOBUFS (too much unwritten data), or the log's sticky error (-ENOSPC, -EIO, ...).
 * A record is durable once al_auditlog_durable_seq() >= its seq. */
int al_auditlog_append(struct al_auditlog *log, const json_t *fields, uint64_t *seq);
/* The same for a record the caller serialised itself (a high-rate caller may format its
 * records without building a json_t): obj must be one compact JSON object, without the
 * reserved keys and without raw newlines. Release builds only check its framing (braces, no
 * newline or NUL); debug builds parse it and refuse reserved keys. */
int al_auditlog_append_raw(struct al_auditlog *log, const char *obj, size_t len, uint64_t *seq);
/* Writes a checkpoint now (reason "request"). */
int al_auditlog_checkpoint(struct al_auditlog *log);
/* Blocks until every record appended before the call is durable, or the log fails.
 * timeout_ms 0 = no limit; -ETIMEDOUT when it expires. */
int al_auditlog_sync(struct al_auditlog *log, uint32_t timeout_ms);
/* 0 while healthy, else the sticky negative errno. */
int al_auditlog_status(struct al_auditlog *log);
uint64_t al_auditlog_durable_seq(struct al_auditlog *log);
const char *al_auditlog_id(const struct al_auditlog *log);

struct al_auditlog_stats {
    uint64_t next_seq;    /* seq the next record will get */
    uint64_t durable_seq; /* highest seq known on disk */
    uint64_t records;     /* appended by this writer (caller records + checkpoints) */
    uint64_t checkpoints; /* written by this writer */
    uint64_t rotations;
    uint64_t pruned_files, pruned_bytes; /* deleted by retention (this writer) */
    uint64_t fsyncs;
    uint64_t bytes_written;
    size_t pending_bytes; /* buffered, not yet written */
    int status;
    char current_file[AL_AUDITLOG_PATH_MAX];
};
void al_auditlog_get_stats(struct al_auditlog *log, struct al_auditlog_stats *st);

/* Writes a "close" checkpoint, flushes, syncs, stops the thread, releases the lock and
 * frees the log. Returns 0 or the error that kept records from reaching the disk. */
int al_auditlog_close(struct al_auditlog *log);

/* Copies <key_file>'s public part to out_path (0644), the file auditors verify with. */
int al_auditlog_export_pubkey(const char *key_file, const char *out_path, struct al_error *err);

/* ---- reader (tail, follow, query) ------------------------------------------------------ */
struct al_auditlog_reader;

struct al_auditlog_reader_opts {
    const char *dir; /* read <dir>/<prefix>-*.jsonl in order, or: */
    const char *prefix;
    const char *const *files; /* these files, in this order (dir/prefix ignored) */
    size_t n_files;
    bool follow; /* at the end, wait for more (and for new files) */
};

struct al_auditlog_record {
    const char *line; /* exact bytes without '\n'; valid until the next call */
    size_t len;
    json_t *json;     /* parsed, or NULL if the line is not a JSON object;
                                        borrowed until the next call (json_incref to keep) */
    uint64_t seq;     /* 0 when absent */
    bool internal;    /* the log's own record (a checkpoint) */
    const char *file; /* path of the file it came from */
    uint64_t lineno;  /* 1-based line in that file */
};

int al_auditlog_reader_open(const struct al_auditlog_reader_opts *opts,
                            struct al_auditlog_reader **out, struct al_error *err);
/* Positions before the first record with seq >= seq. */
int al_auditlog_reader_seek_seq(struct al_auditlog_reader *r, uint64_t seq);
/* Positions before the last n complete lines. */
int al_auditlog_reader_seek_tail(struct al_auditlog_reader *r, uint64_t n);
/* 1 = *rec holds the next line, 0 = nothing more for now (in follow mode call
 * al_auditlog_reader_wait and try again), < 0 = error (I/O). Partial last lines are not
 * returned until they are complete. */
int al_auditlog_reader_next(struct al_auditlog_reader *r, struct al_auditlog_record *rec);
/* follow: waits up to timeout_ms (-1 = forever) for the files to change; 1 = changed,
 * 0 = timed out. */
int al_auditlog_reader_wait(struct al_auditlog_reader *r, int timeout_ms);
/* follow: an fd that becomes readable when the files change (for uv_poll); then call
 * al_auditlog_reader_wait(r, 0) to drain it. -1 when not following. */
int al_auditlog_reader_fd(const struct al_auditlog_reader *r);
void al_auditlog_reader_close(struct al_auditlog_reader *r);

/* ---- verifier -------------------------------------------------------------------------- */
enum al_auditlog_verdict {
    AL_AUDIT_INTACT = 0,
    AL_AUDIT_EDITED,        /* a record's bytes changed (its hash is not the next prev) */
    AL_AUDIT_REMOVED,       /* records missing (seq gap) */
    AL_AUDIT_REORDERED,     /* records present but out of order */
    AL_AUDIT_INSERTED,      /* a record that is not part of the chain (duplicate, foreign) */
    AL_AUDIT_TRUNCATED,     /* records known to exist (external checkpoints) are gone */
    AL_AUDIT_BAD_SIGNATURE, /* a checkpoint does not verify against the public key */
    AL_AUDIT_MISSING_FILE,  /* a whole file is gone between two others */
    AL_AUDIT_MALFORMED,     /* a line that is not a record (not JSON, fields missing) */
    AL_AUDIT_NO_RECORDS,    /* nothing to verify */
};

enum al_auditlog_tail {
    AL_AUDIT_TAIL_CLEAN = 0, /* ends after a complete record */
    AL_AUDIT_TAIL_TORN,      /* ends in an incomplete line: a crash during a write */
    AL_AUDIT_TAIL_CLOSED,    /* ends with the writer's "close" checkpoint */
};

struct al_auditlog_verify_opts {
    const char *dir; /* verify <dir>/<prefix>-*.jsonl, or: */
    const char *prefix;
    const char *const *files; /* these files (sorted by the seq in their names) */
    size_t n_files;
    const char *pubkey_file;     /* default <dir>/<prefix>.pub; required with files */
    const char *checkpoint_file; /* optional: checkpoints kept elsewhere that the log must
                                        still contain (detects truncation and rollback) */
    /* Optional: called for each of the caller's records (not the log's own) once the chain
     * accepted it, in log order, with its parsed JSON (borrowed for the call), so that the
     * caller can state what the verified records say (the egress CLI: what its aggregate
     * records stand for). Not called for records after the first problem. */
    void (*on_record)(const json_t *rec, uint64_t seq, void *arg);
    /* Optional with on_record: the "type" of the records it wants; records whose "type" is
     * another string are verified without being handed over (nor their JSON built). */
    const char *on_record_type;
    void *arg;
};

struct al_auditlog_verify_result {
    enum al_auditlog_verdict verdict;
    /* The first bad record (when verdict != INTACT). */
    char file[AL_AUDITLOG_PATH_MAX];
    uint64_t line; /* 1-based; 0 when the problem is not one line */
    uint64_t seq;  /* the record's seq or the first missing one; 0 unknown */
    char reason[768];
    /* What was verified. */
    char log_id[AL_AUDITLOG_ID_HEX + 1];
    char key_id[17];
    uint64_t files, records, checkpoints;
    uint64_t first_seq, last_seq;
    char first_file[AL_AUDITLOG_PATH_MAX];
    bool starts_at_genesis; /* seq 1: nothing was deleted by retention */
    bool start_anchored;    /* the first record is seq 1 or a signed checkpoint */
    enum al_auditlog_tail tail;
    uint64_t torn_bytes;           /* bytes of the incomplete last line */
    uint64_t unsigned_tail;        /* records after the last signed checkpoint */
    uint64_t crash_recoveries;     /* interrupted writes declared by a later writer */
    uint64_t external_checkpoints; /* checkpoint-file entries matched against the log */
    /* Retention: the latest "retention" record of the verified log (retention_seq 0 when
     * there is none) and what it says was deleted, by rule. */
    uint64_t retention_seq;
    char retention_time[40];
    uint64_t retained_from; /* every seq before this was deleted by retention */
    size_t n_pruned;
    struct al_auditlog_pruned {
        uint64_t first_seq, last_seq, files, bytes;
        uint64_t limit; /* of the rule when it deleted them: ms (max_age), bytes, files */
        char rule[16];  /* "max_age", "max_bytes", "max_files", "unaccounted" */
    } pruned[AL_AUDITLOG_HISTORY_MAX];
};

/* Returns 0 when the verification ran (res->verdict says what it found), < 0 when it could
 * not run (no public key, unreadable files: err says why). */
int al_auditlog_verify(const struct al_auditlog_verify_opts *opts,
                       struct al_auditlog_verify_result *res, struct al_error *err);
const char *al_auditlog_verdict_name(enum al_auditlog_verdict v); /* "edited", ... */
/* One human paragraph: start point, counts, tail, and the first problem. */
void al_auditlog_verify_print(const struct al_auditlog_verify_result *res, FILE *out);
/* The same with the caller's own paragraph (more) between what was verified and the end and
 * verdict. */
void al_auditlog_verify_print_with(const struct al_auditlog_verify_result *res, FILE *out,
                                   void (*more)(FILE *out, void *arg), void *arg);
json_t *al_auditlog_verify_json(const struct al_auditlog_verify_result *res);

/* ---- redaction helpers ------------------------------------------------------------------- */
/* A path for the log: the request-target without query string and fragment, and without
 * userinfo/scheme/authority if it is an absolute URI. Returns the length written. */
size_t al_audit_redact_path(const char *target, char *out, size_t outlen);
/* A keyed id for a value that must never be logged: "b2k:" + 32 hex of BLAKE2b-128 keyed
 * with key (32 bytes). out must hold AL_AUDIT_KEYED_ID_LEN + 1 bytes. */
#define AL_AUDIT_KEYED_ID_LEN 36
void al_audit_keyed_id(const unsigned char key[32], const void *value, size_t len, char *out);
/* True if the record line contains needle raw, hex- or base64-encoded (for tests and
 * debug assertions that a secret never reaches the log). */
bool al_audit_line_contains_secret(const char *line, size_t len, const void *secret,
                                   size_t secret_len);

#endif
