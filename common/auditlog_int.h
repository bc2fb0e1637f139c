/* common/auditlog_int: what the audit log's writer, reader and verifier share (file names,
 * key files, record fields, checkpoint messages). Not for use outside common/auditlog*.c. */
#ifndef AIRLOCK_COMMON_AUDITLOG_INT_H
#define AIRLOCK_COMMON_AUDITLOG_INT_H

#include <jansson.h>
#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auditlog.h"
#include "error.h"

#define AUDITLOG__SIG_DOMAIN "airlock-auditlog-checkpoint-v1\n"
#define AUDITLOG__SEQ_DIGITS 20

/* One log file found in a directory. */
struct auditlog__file {
    char path[AL_AUDITLOG_PATH_MAX];
    char name[256];
    uint64_t first_seq; /* from the name; 0 if the name does not carry one */
};

/* Lists <dir>/<prefix>-<20 digits>-*.jsonl sorted by seq. *out is malloc'd (may be NULL
 * when n is 0). */
int auditlog__list(const char *dir, const char *prefix, struct auditlog__file **out, size_t *n,
                   struct al_error *err);
void auditlog__sort(struct auditlog__file *files, size_t n);
/* Parses the seq in a file name "<prefix>-<20 digits>-..." (0 when it has none). */
uint64_t auditlog__name_seq(const char *name, const char *prefix);
bool auditlog__prefix_ok(const char *prefix);

/* Key material. The secret key lives in sodium_malloc'd memory. */
struct auditlog__pubkey {
    char log_id[AL_AUDITLOG_ID_HEX + 1];
    unsigned char pk[crypto_sign_PUBLICKEYBYTES];
    char key_id[17];
};
int auditlog__pubkey_load(const char *path, struct auditlog__pubkey *out, struct al_error *err);
int auditlog__pubkey_from_json(const json_t *j, const char *path, struct auditlog__pubkey *out,
                               struct al_error *err);
void auditlog__key_id(const unsigned char pk[crypto_sign_PUBLICKEYBYTES], char out[17]);

/* The fields every record has, taken from a parsed line. */
struct auditlog__fields {
    uint64_t seq;
    const char *time;
    const char *log_id;
    const char *prev;       /* 64 lowercase hex */
    const json_t *internal; /* the "auditlog" object, or NULL */
};
/* 0, or -EINVAL with a reason in why (a short phrase). */
int auditlog__fields(const json_t *rec, struct auditlog__fields *f, const char **why);
/* s is n lowercase hex digits and nothing more. */
bool auditlog__is_hex(const char *s, size_t n);

/* What the verifier needs of an ordinary record, read from its line without building its
 * JSON (auditlog_verify.c). */
struct auditlog__quick {
    uint64_t seq;
    char time[64];
    char log_id[AL_AUDITLOG_ID_HEX + 1];
    char prev[AL_AUDITLOG_HASH_HEX + 1];
    char type[64];
    bool has_type; /* "type" is a string, in type */
};
/* 0 when the line is a JSON object kept to a strict subset of JSON that json_loadb with
 * AUDITLOG__JSON_FLAGS accepts as well (ASCII strings, escapes other than \u0000 and
 * surrogates, integers of up to 18 digits, no duplicate key in any object, no key escaped,
 * nesting up to 32, nothing after the object), with the fields auditlog__fields would
 * accept, the same values, and no "auditlog" member. -1 otherwise: the line is for jansson
 * to judge (it may still be a good record). */
int auditlog__quick_fields(const char *line, size_t len, struct auditlog__quick *q);
void auditlog__hash_hex(const void *line, size_t len, char out[AL_AUDITLOG_HASH_HEX + 1]);
/* What a checkpoint signs: the log, the seq of the record it covers, that record's hash
 * (the chain's head), its time and reason. */
struct auditlog__sig {
    const char *log_id;
    uint64_t covers;
    const char *prev, *time, *reason;
};
/* Builds the text a checkpoint signs into out (>= 256 bytes); returns its length. */
size_t auditlog__sig_message(char *out, size_t outlen, const struct auditlog__sig *s);
/* Checks a checkpoint record (fields + "auditlog" object) against pk: 0 = good,
 * -EBADMSG = bad signature, -EINVAL = malformed (why says what). */
int auditlog__check_checkpoint(const struct auditlog__fields *f, const struct auditlog__pubkey *pk,
                               const char **why);
/* ---- retention (auditlog_retention.c) ----------------------------------------------- */

/* The limits retention applies (0 = that rule is off). */
struct auditlog__rules {
    uint64_t max_age_ms, max_bytes;
    uint32_t max_files;
};

/* What retention deleted so far: ranges of seq by rule, covering 1..retained_from-1. */
struct auditlog__history {
    uint64_t retained_from; /* 1: nothing deleted */
    size_t n;
    struct al_auditlog_pruned r[AL_AUDITLOG_HISTORY_MAX];
};

#define AUDITLOG__PRUNE_MAX 256 /* files one retention pass deletes (its record stays small) */

/* One pass: the files to delete, oldest first. */
struct auditlog__prune_file {
    char path[AL_AUDITLOG_PATH_MAX];
    char name[256];
    uint64_t first_seq, last_seq, bytes;
    const char *rule; /* static */
    uint64_t limit;
};
struct auditlog__prune {
    struct auditlog__prune_file *f;
    size_t n;
    uint64_t seq; /* the checkpoint after its record: delete once that is durable */
};

void auditlog__history_reset(struct auditlog__history *h);
/* A range of records deleted by rule (static text) at limit (of the rule then). */
struct auditlog__range {
    uint64_t first_seq, last_seq, files, bytes;
    const char *rule;
    uint64_t limit;
};
/* Appends a range (merged with the last range when the rule is the same; the oldest two
 * merged when the history is full). */
void auditlog__history_add(struct auditlog__history *h, const struct auditlog__range *d);
/* Parses a record's "history" array against its "retained_from": 0, or -EINVAL with why. */
int auditlog__history_parse(const json_t *arr, uint64_t retained_from, struct auditlog__history *h,
                            const char **why);
/* <dir>/<prefix>.retention: loaded (a missing or foreign file is an empty history) and
 * saved (atomically). */
void auditlog__history_load(const char *path, const char *log_id, struct auditlog__history *h);
int auditlog__history_save(const char *path, const char *log_id, const struct auditlog__history *h);
/* Decides which files to delete now: the oldest first, never the newest, each by the first
 * rule that wants it (max_age by the file's mtime, max_bytes over all files, max_files).
 * 0 with out->n = 0 when nothing is due. */
int auditlog__retention_plan(const char *dir, const char *prefix, const struct auditlog__rules *r,
                             struct auditlog__prune *out);
void auditlog__prune_free(struct auditlog__prune *p);
/* The "auditlog" object of the retention record for plan p, with the history h that
 * includes it. malloc'd compact JSON, or NULL. */
char *auditlog__retention_object(const struct auditlog__prune *p, const struct auditlog__history *h,
                                 const struct auditlog__rules *r);
/* Checks a retention record ("auditlog" object a of record seq) and parses its history:
 * 0, or -EINVAL with why. */
int auditlog__retention_check(const json_t *a, uint64_t seq, struct auditlog__history *h,
                              const char **why);

/* json_loadb options for records. */
#define AUDITLOG__JSON_FLAGS JSON_REJECT_DUPLICATES

#endif
