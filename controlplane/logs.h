/* controlplane/logs: a sandbox's logs for GET /sandboxes/{id}/logs and /v2/.../logs.
 *
 * Owns: reading the agent's log file (and its one rotated predecessor; airlock-vmm bounds
 * both), turning lines into E2B SandboxLogEntry objects (the agent writes JSON lines; other
 * output becomes info entries) and into the v1 SandboxLog line (a JSON object, as E2B's
 * raw lines are and as its CLI parses them), and the filters (since, level, search,
 * direction, limit).
 * Reads at most 2 x log_max bytes; never follows a symlink.
 */
#ifndef AIRLOCK_CP_LOGS_H
#define AIRLOCK_CP_LOGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cp_logs_query {
    uint64_t since_ms; /* entries at or after this unix time in ms (0 = all) */
    size_t limit;
    bool forward;     /* oldest first (else newest first) */
    int min_level;    /* 0 debug .. 3 error */
    char search[256]; /* case-sensitive substring of the message ("" = any) */
};

/* "debug" 0, "info" 1, "warn" 2, "error" 3; -1 otherwise. */
int cp_logs_level_parse(const char *s);
/* SandboxLogEntry[] (new reference; empty when there is no file). */
json_t *cp_logs_read(const char *path, uint64_t max_bytes, const struct cp_logs_query *q);
/* The same with the log file already open as fd (-1: none), read up to its byte end (the
 * live stream's backlog: what it follows starts there; <path>.1 is read by name). */
json_t *cp_logs_read_fd(const char *path, int fd, uint64_t end, uint64_t max_bytes,
                        const struct cp_logs_query *q);
/* Does the entry pass q's level and search filters (not since, not limit)? */
bool cp_logs_match(const json_t *entry, const struct cp_logs_query *q);
/* One line into an entry (new reference), or NULL for a blank line; last_ts carries the
 * timestamp of the previous JSON line to lines that have none. */
json_t *cp_logs_parse_line(const char *line, size_t len, char *last_ts, size_t ts_len);
/* The v1 SandboxLog "line" of an entry: {"level":...,"message":...,<fields>} as compact JSON
 * (malloc'd; NULL without memory). `e2b sandbox logs` JSON.parses it and reads "level". */
char *cp_logs_entry_line(const json_t *entry);

#endif
