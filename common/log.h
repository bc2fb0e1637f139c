/* common/log: leveled logging for every airlock process.
 *
 * Owns: the process-wide log sink. Text lines for a terminal, JSON lines for a service
 * (chosen automatically from isatty(stderr), or forced by AIRLOCK_LOG_FORMAT=text|json or
 * al_log_init). AIRLOCK_LOG_LEVEL=debug|info|warn|error sets the threshold.
 * Thread-safe: each line is formatted into a local buffer and written with one write(2).
 * Never pass secret values to these functions.
 */
#ifndef AIRLOCK_COMMON_LOG_H
#define AIRLOCK_COMMON_LOG_H

#include <stdarg.h>

enum al_log_level { AL_LOG_DEBUG = 0, AL_LOG_INFO, AL_LOG_WARN, AL_LOG_ERROR, AL_LOG_OFF };
enum al_log_format { AL_LOG_AUTO = 0, AL_LOG_TEXT, AL_LOG_JSON };

/* component names the process in every line ("egress", "airlockd", ...). */
void al_log_init(const char *component, enum al_log_format format, enum al_log_level level);
void al_log_set_level(enum al_log_level level);
enum al_log_level al_log_get_level(void);
/* Send lines to fd instead of stderr (tests). */
void al_log_set_fd(int fd);
/* Parse "debug"|"info"|"warn"|"error"|"off"; -EINVAL otherwise. */
int al_log_level_parse(const char *s, enum al_log_level *out);

void al_log_write(enum al_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void al_log_vwrite(enum al_log_level level, const char *file, int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#define al_debug(...) al_log_write(AL_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define al_info(...)  al_log_write(AL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define al_warn(...)  al_log_write(AL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define al_error(...) al_log_write(AL_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

/* For setup code only (kvmtool's die()): log and exit(1). Never on a per-request path. */
_Noreturn void al_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void al_die_errno(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
