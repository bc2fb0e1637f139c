/* tests/unit/common/auditlog_fixture: what the test_auditlog_* suites share.
 *
 * A test case (auditlog_tcase: 60 s a test) gets a scratch root, g_root, made once for all its
 * tests (an unchecked fixture); each test makes its own log directory in it with tdir. Logs
 * use the prefix "test"; the helpers fail the test with the library's message. The lines
 * helpers load a log file as lines to tamper with and write it back. */
#ifndef AIRLOCK_TESTS_AUDITLOG_FIXTURE_H
#define AIRLOCK_TESTS_AUDITLOG_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "al_test.h"
#include "common/auditlog.h"
#include "common/json.h"

extern char g_root[256];
void root_setup(void);
void root_teardown(void);
/* A test case whose tests share one g_root. */
TCase *auditlog_tcase(const char *name);

/* A fresh directory <g_root>/name for one test (from a ring of four buffers). */
const char *tdir(const char *name);
/* The log in dir (prefix "test"), with extra's options if not NULL. */
struct al_auditlog *open_log(const char *dir, struct al_auditlog_opts *extra);
/* n request records, numbered from base. */
void append_n(struct al_auditlog *l, int n, int base);
void verify_dir(const char *dir, const char *ckpt, struct al_auditlog_verify_result *res);
void expect_intact(const char *dir);
/* The verdict v, and where it was found if path, line or seq is given (0/NULL: any). */
void expect_verdict(const char *d, const char *ckpt, enum al_auditlog_verdict v, const char *path,
                    uint64_t line, uint64_t seq);
/* The verification of a log that retention shortened: intact, starting where the retention
 * record says, with every deleted range named by its rule. */
void expect_pruned(const char *d, const char *rule, struct al_auditlog_verify_result *r);

/* ---- files, for tampering ---- */
struct lines {
    char **v;
    size_t n;
    char *tail; /* bytes after the last '\n' */
};

void lines_load(const char *path, struct lines *L);
/* Writes the lines back, leaving out those set to NULL. */
void lines_save(const char *path, struct lines *L);
void lines_free(struct lines *L);
/* The log's files, sorted. */
size_t log_files(const char *dir, char files[][600], size_t max);
uint64_t line_seq(const char *line);
bool line_is_ckpt(const char *line);
/* Counts the lines of the log's files that contain needle. */
size_t log_grep(const char *dir, const char *needle);
/* A log with several files, closed; returns the number of files. */
size_t make_log(const char *dir, int records);
/* A log that retention shortened, closed: returns its files. */
size_t make_pruned_log(const char *d, char files[][600]);
/* Loads the middle file of a multi-file log. */
void middle(const char *d, char *path, struct lines *L);
/* Index of an ordinary (non-checkpoint) record with ordinary neighbours. */
size_t plain_index(struct lines *L);

#endif
