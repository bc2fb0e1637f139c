/* common/error: the error convention shared by every component.
 *
 * Functions return 0 on success and a negative errno on failure (libuv style); pointer
 * APIs return NULL and set errno. Where a user can cause the error, the caller passes a
 * struct al_error to receive a message that says what was wrong and how to fix it.
 * Passing NULL for the al_error is always allowed.
 */
#ifndef AIRLOCK_COMMON_ERROR_H
#define AIRLOCK_COMMON_ERROR_H

#include <stddef.h>

#define AL_ERROR_MSG_MAX 512

struct al_error {
    int code;                   /* negative errno, 0 = no error */
    char msg[AL_ERROR_MSG_MAX]; /* human text; never contains secret values */
};

/* Records code and message in err (if non-NULL) and returns code, so that
 *   return al_error_set(err, -EINVAL, "port %d out of range 1..65535", p);
 * reads naturally. code must be negative. */
int al_error_set(struct al_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to an existing message (for adding context on the way up). */
int al_error_prefix(struct al_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void al_error_clear(struct al_error *err);
/* The message if one was set, otherwise strerror(-code). */
const char *al_error_str(const struct al_error *err);

#endif
