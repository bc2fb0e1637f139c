/* common/util: small system helpers every daemon needs (time, files, fds).
 *
 * Owns: the one time formatter (RFC 3339 and the other UTC forms the tree writes) and the
 * RFC 3339 parser; durable file replacement (write, fsync, rename, fsync dir) so that a
 * crash leaves the old or the new content, never a torn file; bounded whole-file reads;
 * mkdir -p.
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
/* The one time formatter: sec.nsec (seconds since 1970-01-01 UTC, nsec 0..999999999) in
 * UTC, without libc's time functions (no time-zone data, no lock, the same in musl). */
enum al_time_form {
    AL_TIME_RFC3339_S,     /* 2026-11-30T01:02:03Z */
    AL_TIME_RFC3339_MS,    /* 2026-11-30T01:02:03.456Z */
    AL_TIME_RFC3339_US,    /* 2026-11-30T01:02:03.456789Z */
    AL_TIME_RFC3339_NS,    /* 2026-11-30T01:02:03.456789012Z */
    AL_TIME_RFC3339_EXACT, /* the fewest of 0, 3, 6 or 9 fraction digits that keep the
                              value (protobuf JSON's Timestamp) */
    AL_TIME_BASIC,         /* 20261130T010203Z (ISO 8601 basic: file names) */
    AL_TIME_ASN1,          /* 20261130010203 (X.509 validity, as mbedtls takes it) */
    AL_TIME_HTTP,          /* Mon, 30 Nov 2026 01:02:03 GMT (RFC 9110 IMF-fixdate) */
};
#define AL_TIME_FORMAT_MAX 32 /* the longest form and its NUL */
/* Writes the time into out (outlen bytes, NUL-terminated); returns its length, -E2BIG if it
 * does not fit, -ERANGE for a year outside 0000..9999 (RFC 3339 has four digits), -EINVAL for
 * a bad nsec or form; out is "" on an error. */
int al_time_format(char *out, size_t outlen, int64_t sec, long nsec, enum al_time_form form);
/* al_time_format's AL_TIME_RFC3339_MS of a CLOCK_REALTIME value in nanoseconds. */
void al_time_rfc3339(char *out, size_t outlen, uint64_t wall_ns);
/* RFC 3339 / ISO 8601 parse (Z or ±hh:mm offsets, optional fraction). */
int al_time_parse_rfc3339(const char *s, uint64_t *wall_ns);

int al_write_all(int fd, const void *data, size_t len);
int al_read_all(int fd, void *data, size_t len); /* -EPIPE on early EOF */

/* Reads a whole file up to max bytes (-EFBIG beyond). *out is NUL-terminated; caller frees. */
int al_read_file(const char *path, size_t max, char **out, size_t *len, struct al_error *err);
/* The same from an open descriptor (read from where it is); path names it in errors. */
int al_read_fd(int fd, const char *path, size_t max, char **out, size_t *len, struct al_error *err);
/* Atomically replaces path with data: tmp file in the same dir, fsync, rename, fsync dir. */
int al_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode,
                         struct al_error *err);
int al_mkdir_p(const char *path, mode_t mode);
/* A secret key of exactly len bytes kept in a file: read into key (0), or, when the file
 * does not exist and create is set, len random bytes written there (mode 0600, atomically)
 * and into key (1). -ENOENT without create; -EINVAL (err names both sizes) for a file of
 * another size. The read buffer is wiped. */
int al_key_file(const char *path, void *key, size_t len, bool create, struct al_error *err);
/* Opens path beneath dirfd (openat2 RESOLVE_BENEATH) crossing no symbolic link, magic link
 * or mount point, O_NOFOLLOW and O_CLOEXEC added to flags: the one way code that works in a
 * tree it does not trust (an image's layers, a sandbox's root) opens what is in it. The fd,
 * or -errno (-ELOOP at a link; -EXDEV at a mount point, for an absolute path, or for ".."
 * leading out of dirfd). */
int al_openat_beneath(int dirfd, const char *path, int flags);
/* How deep al_rmtree_at goes (it holds one open directory per level, and a process's usual
 * limit is 1024 descriptors): deeper than an image or a jail snapshot goes. */
#define AL_RMTREE_MAX_DEPTH 1024
/* Removes name under dirfd and, if it is a directory, everything in it, never following a
 * symbolic link and never crossing into what is mounted inside it (-EXDEV for a mount
 * point). 0 also when it does not exist, else the first -errno met (-ELOOP deeper than
 * AL_RMTREE_MAX_DEPTH); the rest is still removed. */
int al_rmtree_at(int dirfd, const char *name);
/* The same for a path (its last component is removed); -EINVAL for "/" or "". */
int al_rmtree(const char *path);
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

/* Hex, the tree's one encoder and decoder. Not constant-time: for public bytes (hashes,
 * identifiers, escapes); secrets go through sodium_bin2hex. al_hex_encode writes n bytes as
 * 2n digits and a NUL; al_hex_value is a digit's value (either case), or -1. */
extern const char al_hex_lower[17], al_hex_upper[17];
void al_hex_encode(char *out, const void *in, size_t n, bool upper);
int al_hex_value(int c);
/* Whether the n bytes at s are all lowercase hex digits (identifiers and digests the tree
 * writes with al_hex_encode). */
bool al_hex_is_lower(const char *s, size_t n);

/* Random identifiers: n random bytes as lowercase hex into out (2n+1 bytes). */
void al_random_hex(char *out, size_t nbytes);
/* A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx". */
void al_uuid_v4(char out[37]);
/* 16 bytes in the UUID text form (the caller sets version and variant bits). */
void al_uuid_format(const unsigned char b[16], char out[37]);

#endif
