/* egress/intercept/pool: idle upstream connections, reused per (sandbox, host, port).
 *
 * Owns: keeping a finished upstream connection (its socket and TLS session, or a plain
 * socket without one) for the next request of the same sandbox to the same host and port:
 * intercepted requests (keep-alive inside the sandbox's TLS, or a new sandbox connection,
 * cost no upstream handshake), and plain HTTP (egress/http.c: a new sandbox connection
 * costs no upstream connect and no close).
 * Bounded in total and per key; an idle connection expires after idle_ms; one the server
 * closed (or that has unexpected bytes waiting) is dropped when it is taken, or as soon as
 * the owner's event loop reports it when the owner watches the socket while it is idle (a
 * plain one: TLS records such as session tickets may arrive on a healthy connection). Never shared
 * between sandboxes (the key starts with the sandbox id), so a connection's history stays
 * within one sandbox's audit trail; a removed sandbox's are closed (intercept_pool_purge).
 *
 * Threading: one pool per event loop (worker); nothing is locked. The pool closes the
 * sockets it holds.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_POOL_H
#define AIRLOCK_EGRESS_INTERCEPT_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress/intercept/tls.h"

#define INTERCEPT_POOL_KEY_MAX 512

struct intercept_pool_opts {
    size_t max_idle;    /* 0 = 256 */
    size_t max_per_key; /* 0 = 16: a session holds its upstream until it ends, so a sandbox
                            with N connections to one host in flight needs more than N kept */
    uint32_t idle_ms;   /* 0 = 30000 (below common server keep-alive timeouts) */
    /* Called as the pool closes a connection put with a watch (intercept_pool_put_watched),
     * so that its owner forgets what it watched the socket with. */
    void (*unwatch)(void *arg, uint64_t watch);
    void *unwatch_arg;
};

struct intercept_pool;
int intercept_pool_new(const struct intercept_pool_opts *o, struct intercept_pool **out);
void intercept_pool_free(struct intercept_pool *p); /* closes every idle connection */

/* "sandbox, host, port" (0x1f separated) into out (>= INTERCEPT_POOL_KEY_MAX). */
void intercept_pool_key(char *out, const char *sandbox, const char *host, uint16_t port);
/* Gives an idle connection (handshake done, no request in progress) to the pool, which now
 * owns fd and tls (NULL: a plain connection). Dropped (closed) when the bounds say so. */
void intercept_pool_put(struct intercept_pool *p, const char *key, int fd,
                        struct intercept_tls *tls);
/* The same for a plain connection whose socket the caller's event loop keeps watching for
 * reading while it is idle (watch: the caller's name for that, nonzero), so that a close
 * or stray bytes reach intercept_pool_watch_event as they happen rather than at the next
 * take. */
void intercept_pool_put_watched(struct intercept_pool *p, const char *key, int fd, uint64_t watch);
/* Takes a live idle connection for key: 0 with fd and tls set (the caller owns them; tls
 * NULL for a plain one), or -ENOENT. Never a watched one. */
int intercept_pool_get(struct intercept_pool *p, const char *key, int *fd,
                       struct intercept_tls **tls);
/* Takes an idle plain connection for key, watched or not: 0 with fd and *watch (0: not
 * watched; else the caller's watch passes to the caller with the socket), or -ENOENT. An
 * unwatched one is checked alive; a watched one only with check (a close that arrived
 * after the event loop last asked is seen only so: a caller that cannot send its request
 * again on another connection asks for the check). */
int intercept_pool_take_plain(struct intercept_pool *p, const char *key, bool check, int *fd,
                              uint64_t *watch);
/* The watched socket is readable or hung up: the connection is closed unless it is still
 * alive (an event fetched before its owner read what caused it). */
void intercept_pool_watch_event(struct intercept_pool *p, uint64_t watch);
/* Closes every idle connection for whose key drop answers true (the sandbox the key starts
 * with was removed: intercept_pool_key_sandbox), or all with drop NULL. */
void intercept_pool_purge(struct intercept_pool *p, bool (*drop)(const char *key, void *arg),
                          void *arg);
/* The sandbox id a key starts with, into out (>= INTERCEPT_POOL_KEY_MAX). */
void intercept_pool_key_sandbox(const char *key, char *out);
/* Closes what expired (call now and then; get and put do it too). */
void intercept_pool_sweep(struct intercept_pool *p);

struct intercept_pool_stats {
    uint64_t hits, misses, dead, expired, evicted;
    size_t idle;
};
void intercept_pool_get_stats(const struct intercept_pool *p, struct intercept_pool_stats *st);

#endif
