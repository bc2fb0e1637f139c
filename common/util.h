/* common/util: small system helpers every daemon needs (time, files, fds).
 *
 * Owns: durable file replacement (write, fsync, rename, fsync dir) so that a crash leaves
 * the old or the new content, never a torn file; bounded whole-file reads; mkdir -p.
 */
#ifndef AIRLOCK_COMMON_UTIL_H
#define AIRLOCK_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

uint64_t al_now_ns(void);  /* CLOCK_MONOTONIC */
uint64_t al_wall_ns(void); /* CLOCK_REALTIME */
/* RFC 3339 UTC with milliseconds: "2026-11-30T01:02:03.456Z" (out >= 32 bytes). */
void al_time_rfc3339(char *out, size_t outlen, uint64_t wall_ns);
/* RFC 3339 / ISO 8601 parse (Z or ±hh:mm offsets, optional fraction). */
int al_time_parse_rfc3339(const char *s, uint64_t *wall_ns);

int al_write_all(int fd, const void *data, size_t len);
int al_read_all(int fd, void *data, size_t len); /* -EPIPE on early EOF */

/* Reads a whole file up to max bytes (-EFBIG beyond). *out is NUL-terminated; caller frees. */
int al_read_file(const char *path, size_t max, char **out, size_t *len, struct al_error *err);
/* Atomically replaces path with data: tmp file in the same dir, fsync, rename, fsync dir. */
int al_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode,
                         struct al_error *err);
int al_mkdir_p(const char *path, mode_t mode);
int al_fsync_dir(const char *dir);
int al_set_nonblock(int fd, bool on);
int al_set_cloexec(int fd, bool on);
/* Raises RLIMIT_NOFILE's soft limit to its hard limit, then grows this process's descriptor
 * table to hold at least n descriptors (at most that limit). The kernel grows the table on
 * demand, doubling it, and in a process with threads each growth waits for an RCU grace
 * period (the old table may still be read by another thread): 10 ms and more on a busy
 * host, with the calling thread, often an event loop, blocked. Called once at start, before
 * any thread exists, the growth costs microseconds. Returns the size asked for, lowered to
 * the limit, or -errno. */
int al_fd_table_reserve(unsigned n);

/* Parses sizes such as "10MiB", "512k", "1G", "4096" into bytes. */
int al_parse_size(const char *s, uint64_t *out);
/* Parses durations such as "250ms", "30s", "5m", "1h" into milliseconds. */
int al_parse_duration_ms(const char *s, uint64_t *out);

/* Random identifiers: n random bytes as lowercase hex into out (2n+1 bytes). */
void al_random_hex(char *out, size_t nbytes);

#endif
