/* egress/intercept/pool: idle upstream connections (see pool.h). */
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"

struct pool__conn {
    struct pool__conn *prev, *next; /* most recently put first */
    char key[INTERCEPT_POOL_KEY_MAX];
    int fd;
    struct intercept_tls *tls;
    uint64_t watch; /* the owner's, 0: not watched */
    uint64_t since_ns;
};

struct intercept_pool {
    struct pool__conn *head, *tail;
    size_t n;
    size_t max_idle, max_per_key;
    uint64_t idle_ns;
    void (*unwatch)(void *arg, uint64_t watch);
    void *unwatch_arg;
    struct intercept_pool_stats st;
};

int intercept_pool_new(const struct intercept_pool_opts *o, struct intercept_pool **out)
{
    struct intercept_pool *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->max_idle = o && o->max_idle ? o->max_idle : 256;
    p->max_per_key = o && o->max_per_key ? o->max_per_key : 16;
    p->idle_ns = (uint64_t)(o && o->idle_ms ? o->idle_ms : 30000) * 1000000ull;
    p->unwatch = o ? o->unwatch : NULL;
    p->unwatch_arg = o ? o->unwatch_arg : NULL;
    *out = p;
    return 0;
}

void intercept_pool_key(char *out, const char *sandbox, const char *host, uint16_t port)
{
    snprintf(out, INTERCEPT_POOL_KEY_MAX, "%s\x1f%s\x1f%u", sandbox, host, (unsigned)port);
}

static void pool__unlink(struct intercept_pool *p, struct pool__conn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        p->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        p->tail = c->prev;
    p->n--;
}

static void pool__close(struct intercept_pool *p, struct pool__conn *c)
{
    pool__unlink(p, c);
    if (c->watch && p->unwatch)
        p->unwatch(p->unwatch_arg, c->watch);
    intercept_tls_free(c->tls);
    close(c->fd);
    free(c);
}

void intercept_pool_sweep(struct intercept_pool *p)
{
    uint64_t now = al_now_ns();
    /* Oldest at the tail. */
    while (p->tail && now - p->tail->since_ns >= p->idle_ns) {
        p->st.expired++;
        pool__close(p, p->tail);
    }
}

static void pool__put(struct intercept_pool *p, const char *key, int fd, struct intercept_tls *tls,
                      uint64_t watch)
{
    intercept_pool_sweep(p);
    struct pool__conn *c = calloc(1, sizeof *c);
    if (!c) {
        if (watch && p->unwatch)
            p->unwatch(p->unwatch_arg, watch);
        intercept_tls_free(tls);
        close(fd);
        return;
    }
    snprintf(c->key, sizeof c->key, "%s", key);
    c->fd = fd;
    c->tls = tls;
    c->watch = watch;
    c->since_ns = al_now_ns();
    /* Per key: drop the oldest beyond the bound. */
    size_t same = 0;
    struct pool__conn *oldest = NULL;
    for (struct pool__conn *x = p->head; x; x = x->next)
        if (strcmp(x->key, key) == 0) {
            same++;
            oldest = x;
        }
    if (same >= p->max_per_key && oldest) {
        p->st.evicted++;
        pool__close(p, oldest);
    }
    if (p->n >= p->max_idle && p->tail) {
        p->st.evicted++;
        pool__close(p, p->tail);
    }
    c->next = p->head;
    if (p->head)
        p->head->prev = c;
    p->head = c;
    if (!p->tail)
        p->tail = c;
    p->n++;
}

void intercept_pool_put(struct intercept_pool *p, const char *key, int fd,
                        struct intercept_tls *tls)
{
    pool__put(p, key, fd, tls, 0);
}

void intercept_pool_put_watched(struct intercept_pool *p, const char *key, int fd, uint64_t watch)
{
    pool__put(p, key, fd, NULL, watch);
}

/* An idle connection is alive if reading finds nothing to read. Anything else (the server's
 * close_notify, EOF, a reset, bytes nobody asked for) makes it unusable. */
static bool pool__alive(struct pool__conn *c)
{
    unsigned char b[1];
    if (!c->tls) {
        ssize_t n = recv(c->fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    ssize_t n = intercept_tls_read(c->tls, b, sizeof b);
    return n == -EAGAIN && intercept_tls_out_pending(c->tls) == 0;
}

/* The newest idle connection for key that may be given (plain only, or watched ones too),
 * alive (checked unless watched and !check); dead ones met on the way are closed. */
static struct pool__conn *pool__take(struct intercept_pool *p, const char *key, bool plain,
                                     bool watched, bool check)
{
    intercept_pool_sweep(p);
    struct pool__conn *c = p->head;
    while (c) {
        struct pool__conn *next = c->next;
        if (strcmp(c->key, key) == 0 && (!plain || !c->tls) && (watched || !c->watch)) {
            if ((c->watch && !check) || pool__alive(c)) {
                pool__unlink(p, c);
                p->st.hits++;
                return c;
            }
            p->st.dead++;
            pool__close(p, c);
        }
        c = next;
    }
    p->st.misses++;
    return NULL;
}

int intercept_pool_get(struct intercept_pool *p, const char *key, int *fd,
                       struct intercept_tls **tls)
{
    struct pool__conn *c = pool__take(p, key, false, false, true);
    if (!c)
        return -ENOENT;
    *fd = c->fd;
    *tls = c->tls;
    free(c);
    return 0;
}

int intercept_pool_take_plain(struct intercept_pool *p, const char *key, bool check, int *fd,
                              uint64_t *watch)
{
    struct pool__conn *c = pool__take(p, key, true, true, check);
    if (!c)
        return -ENOENT;
    *fd = c->fd;
    *watch = c->watch;
    free(c);
    return 0;
}

void intercept_pool_watch_event(struct intercept_pool *p, uint64_t watch)
{
    for (struct pool__conn *c = p->head; c; c = c->next)
        if (c->watch == watch) {
            if (!pool__alive(c)) {
                p->st.dead++;
                pool__close(p, c);
            }
            return;
        }
}

void intercept_pool_key_sandbox(const char *key, char *out)
{
    size_t n = strcspn(key, "\x1f");
    if (n >= INTERCEPT_POOL_KEY_MAX)
        n = INTERCEPT_POOL_KEY_MAX - 1;
    memcpy(out, key, n);
    out[n] = '\0';
}

void intercept_pool_purge(struct intercept_pool *p, bool (*drop)(const char *key, void *arg),
                          void *arg)
{
    struct pool__conn *c = p->head;
    while (c) {
        struct pool__conn *next = c->next;
        if (!drop || drop(c->key, arg))
            pool__close(p, c);
        c = next;
    }
}

void intercept_pool_free(struct intercept_pool *p)
{
    if (!p)
        return;
    intercept_pool_purge(p, NULL, NULL);
    free(p);
}

void intercept_pool_get_stats(const struct intercept_pool *p, struct intercept_pool_stats *st)
{
    *st = p->st;
    st->idle = p->n;
}
