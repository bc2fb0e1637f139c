/* common/cleanup: scope-bound ownership (bubblewrap/crun style).
 *
 *   al_autofree char *s = strdup(x);      freed when s goes out of scope
 *   al_autoclose int fd = open(...);      closed when fd goes out of scope
 *   return al_steal_ptr(&s);              hand ownership to the caller
 */
#ifndef AIRLOCK_COMMON_CLEANUP_H
#define AIRLOCK_COMMON_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void al__cleanup_free(void *p)
{
    free(*(void **)p);
}
static inline void al__cleanup_close(int *fd)
{
    if (*fd >= 0) {
        int e = errno;
        close(*fd);
        errno = e;
    }
}
static inline void al__cleanup_fclose(FILE **f)
{
    if (*f)
        fclose(*f);
}

#define al_autofree   __attribute__((cleanup(al__cleanup_free)))
#define al_autoclose  __attribute__((cleanup(al__cleanup_close)))
#define al_autofclose __attribute__((cleanup(al__cleanup_fclose)))

static inline void *al__steal_ptr(void *pp)
{
    void **p = (void **)pp;
    void *v = *p;
    *p = NULL;
    return v;
}
#define al_steal_ptr(pp) al__steal_ptr(pp)

static inline int al_steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}

#define AL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define AL_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define AL_MAX(a, b)     ((a) > (b) ? (a) : (b))

#endif
