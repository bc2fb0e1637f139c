/* common/log: see log.h. */
#include "log.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log__component = "airlock";
static enum al_log_format log__format = AL_LOG_AUTO;
static enum al_log_level log__level = AL_LOG_INFO;
static int log__fd = 2;

static const char *const log__names[] = {"debug", "info", "warn", "error", "off"};

int al_log_level_parse(const char *s, enum al_log_level *out)
{
    for (int i = 0; i <= AL_LOG_OFF; i++) {
        if (s && strcmp(s, log__names[i]) == 0) {
            *out = (enum al_log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

void al_log_init(const char *component, enum al_log_format format, enum al_log_level level)
{
    if (component)
        log__component = component;
    log__level = level;
    const char *env = getenv("AIRLOCK_LOG_LEVEL");
    enum al_log_level l;
    if (env && al_log_level_parse(env, &l) == 0)
        log__level = l;
    env = getenv("AIRLOCK_LOG_FORMAT");
    if (env && strcmp(env, "json") == 0)
        format = AL_LOG_JSON;
    else if (env && strcmp(env, "text") == 0)
        format = AL_LOG_TEXT;
    log__format = format;
}

void al_log_set_level(enum al_log_level level)
{
    log__level = level;
}

enum al_log_level al_log_get_level(void)
{
    return log__level;
}

void al_log_set_fd(int fd)
{
    log__fd = fd;
}

static enum al_log_format log__effective_format(void)
{
    if (log__format != AL_LOG_AUTO)
        return log__format;
    return isatty(log__fd) ? AL_LOG_TEXT : AL_LOG_JSON;
}

void al_log_vwrite(enum al_log_level level, const char *file, int line, const char *fmt, va_list ap)
{
    if (level < log__level || level >= AL_LOG_OFF)
        return;
    int saved = errno;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);

    char ts[AL_TIME_FORMAT_MAX];
    al_time_rfc3339(ts, sizeof ts, al_wall_ns());

    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : (file ? file : "?");

    char out[4096];
    int n;
    if (log__effective_format() == AL_LOG_JSON) {
        char esc[3000];
        al_json_escape(msg, esc, sizeof esc);
        n = snprintf(out, sizeof out,
                     "{\"time\":\"%s\",\"level\":\"%s\",\"component\":\"%s\",\"pid\":%d,"
                     "\"src\":\"%s:%d\",\"msg\":\"%s\"}\n",
                     ts, log__names[level], log__component, (int)getpid(), base, line, esc);
    } else {
        static const char *const colour[] = {"\033[2m", "", "\033[33m", "\033[31m"};
        int tty = isatty(log__fd);
        n = snprintf(out, sizeof out, "%s%s %-5s %s[%d] %s%s\n", tty ? colour[level] : "", ts,
                     log__names[level], log__component, (int)getpid(), msg, tty ? "\033[0m" : "");
    }
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof out) {
        n = sizeof out - 1;
        out[n - 1] = '\n';
    }
    ssize_t w = write(log__fd, out, (size_t)n);
    (void)w;
    errno = saved;
}

void al_log_write(enum al_log_level level, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    al_log_vwrite(level, file, line, fmt, ap);
    va_end(ap);
}

void al_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    al_log_vwrite(AL_LOG_ERROR, NULL, 0, fmt, ap);
    va_end(ap);
    exit(1);
}

void al_die_errno(int err, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    al_log_write(AL_LOG_ERROR, NULL, 0, "%s: %s", msg, strerror(err < 0 ? -err : err));
    exit(1);
}
