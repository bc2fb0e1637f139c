/* common/error: see error.h. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int al_error_set(struct al_error *err, int code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

int al_error_prefix(struct al_error *err, const char *fmt, ...)
{
    if (!err)
        return 0;
    char prefix[AL_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[AL_ERROR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
    return err->code;
}

void al_error_clear(struct al_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *al_error_str(const struct al_error *err)
{
    if (!err)
        return "unknown error";
    if (err->msg[0])
        return err->msg;
    return strerror(err->code < 0 ? -err->code : err->code);
}
