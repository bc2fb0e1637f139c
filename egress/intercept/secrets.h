/* egress/intercept/secrets: the egress proxy's client of airlock-vault, and its cache of
 * secret values (the contract is docs/vault.md, "The egress proxy's cache").
 *
 * Owns: fetching values (POST /v1/fetch on <state>/run/vault.sock, through common/http's
 * asynchronous client and a keep-alive pool per event loop), the cache shared by every
 * worker thread, and its invalidation by the changes feed (GET /v1/changes long-poll).
 *
 *   1. Entries are keyed by secret name and live at most max_age_ms (the vault's, capped by
 *      max_age_cap_ms) from their fetch. Values are kept in sodium_malloc'd memory and
 *      wiped when the last user lets go; the response bodies that carried them are wiped.
 *   2. One long-poll is kept open; every name it reports changed is dropped, "full": true
 *      drops everything. A fetch that raced with a change the feed already reported is used
 *      for the request that asked, never cached.
 *   3. While the feed is down (not yet answered, or failing), entries still expire on time
 *      and new fetches fail at once (reason "vault_feed_down"): the injecting rule denies.
 *   4. Each entry carries its bound_hosts; the injector checks the request's host against
 *      them (inject.c) before using a cached value toward any host.
 *   5. Concurrent requests for the same (name, sandbox, rule, host) on one loop share one
 *      fetch; different ones fetch separately, so the vault's access log names every
 *      sandbox, rule and host a value was released for.
 *
 * Every value also gets its matcher (scrub.h) when fetched, so that scrubbing a response
 * costs no set-up.
 *
 * Threading: struct intercept_secrets is shared (its cache has a lock); a struct
 * intercept_fetcher belongs to one loop; the feed runs on the loop given to
 * intercept_secrets_start. Secrets are immutable and reference-counted.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_SECRETS_H
#define AIRLOCK_EGRESS_INTERCEPT_SECRETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/error.h"
#include "egress/intercept/scrub.h"

#define INTERCEPT_SECRET_NAME_MAX  128
#define INTERCEPT_SECRET_ID_LEN    36 /* "b2k:" + 32 hex */
#define INTERCEPT_SECRET_HOSTS_MAX 32

struct intercept_secret {
    char name[INTERCEPT_SECRET_NAME_MAX + 1];
    uint32_t version;
    uint64_t generation;
    char secret_id[INTERCEPT_SECRET_ID_LEN + 1];
    const unsigned char *value; /* sodium_malloc'd; never logged */
    size_t len;
    char *bound_hosts[INTERCEPT_SECRET_HOSTS_MAX]; /* none = any host the policy allows */
    size_t n_bound;
    struct intercept_matcher *matcher; /* its spellings, for scrubbing */
    uint64_t fetched_ns, expires_ns;   /* monotonic */
};
/* A secret as intercept_secret_new takes it: its name, value (len > 0 bytes), the vault's id
 * and version of it (secret_id may be NULL), and the hosts it is bound to (none: any). */
struct intercept_secret_def {
    const char *name;
    const void *value;
    size_t len;
    const char *secret_id;
    uint32_t version;
    const char *const *bound_hosts;
    size_t n_bound;
};
/* A secret built in memory (tests, benchmarks, tools): value copied into guarded memory,
 * matcher built, no expiry; bound hosts canonicalised (policy_bound_host_canon). NULL on ENOMEM
 * or an invalid bound host. */
struct intercept_secret *intercept_secret_new(const struct intercept_secret_def *d);
struct intercept_secret *intercept_secret_ref(struct intercept_secret *s);
void intercept_secret_unref(struct intercept_secret *s); /* NULL is fine; wipes the value */
/* May the value go toward host? Bound hosts are policy host patterns or IP literals, matched by
 * the policy library (policy_bound_host_match, the same matcher the vault uses); none bound =
 * any host. */
bool intercept_secret_bound_to(const struct intercept_secret *s, const char *host);

struct intercept_secrets_opts {
    const char *socket;        /* the vault's socket, e.g. <state>/run/vault.sock */
    uint32_t fetch_timeout_ms; /* 0 = 2000 */
    uint32_t poll_wait_ms;     /* the changes long-poll; 0 = 30000 (the vault caps 60000) */
    uint32_t max_age_cap_ms; /* 0 = 300000: an entry never lives longer, whatever the vault says */
    uint32_t retry_ms;       /* first delay before the feed is retried; 0 = 250 (doubles to 5 s) */
    size_t max_entries;      /* 0 = 1024; the least recently fetched goes first */
};

struct intercept_secrets;
int intercept_secrets_new(const struct intercept_secrets_opts *o, struct intercept_secrets **out,
                          struct al_error *err);
/* Starts the changes feed on loop. */
int intercept_secrets_start(struct intercept_secrets *s, uv_loop_t *loop);
/* Stops the feed (from its loop); done runs once its handles are closed. */
void intercept_secrets_stop(struct intercept_secrets *s, void (*done)(void *arg), void *arg);
/* After stop's done (or if never started), with every fetcher closed. */
void intercept_secrets_free(struct intercept_secrets *s);
bool intercept_secrets_feed_ok(const struct intercept_secrets *s);
/* Drops every cached value (e.g. on SIGHUP, or when a policy is removed). */
void intercept_secrets_flush(struct intercept_secrets *s);

struct intercept_secrets_stats {
    uint64_t hits, misses, fetches, fetch_failures, coalesced;
    uint64_t invalidated, full_flushes, feed_answers, feed_failures, not_cached_race;
    uint64_t generation;
    size_t cached;
    bool feed_ok;
};
void intercept_secrets_get_stats(struct intercept_secrets *s, struct intercept_secrets_stats *st);

/* ---- fetching, per loop -------------------------------------------------------------- */

struct intercept_fetcher;
int intercept_fetcher_new(struct intercept_secrets *s, uv_loop_t *loop,
                          struct intercept_fetcher **out);
/* Cancels what is in flight (callbacks run with -ECANCELED) and frees the fetcher once its
 * connections are closed (run the loop). */
void intercept_fetcher_close(struct intercept_fetcher *f);

struct intercept_fetch_args {
    const char *name;    /* secret name */
    const char *sandbox; /* for the vault's access log */
    const char *rule;
    const char *host;       /* canonical host the value is for (the vault checks it) */
    const char *request_id; /* may be NULL */
};

struct intercept_fetch;
/* err = 0 and sec (a reference for the callee) on success; err < 0 and reason (static,
 * "vault_unreachable", "vault_refused", "secret_not_found", "vault_timeout",
 * "vault_unavailable", "vault_bad_answer", "vault_feed_down") otherwise. */
typedef void (*intercept_fetch_cb)(struct intercept_fetch *req, struct intercept_secret *sec,
                                   int err, const char *reason);

/* Caller-owned, lives until its callback ran or it was cancelled. */
struct intercept_fetch {
    intercept_fetch_cb cb;
    void *data;
    /* private */
    struct intercept_fetch *next;
    void *flight;
};

/* 1: a cached value (*out, a reference); 0: the callback will run from the loop; < 0:
 * refused at once (*reason as above). Never calls the callback from inside. */
int intercept_fetch_start(struct intercept_fetcher *f, const struct intercept_fetch_args *a,
                          struct intercept_fetch *req, struct intercept_secret **out,
                          const char **reason);
/* The callback will not run. Safe on a request that already completed. */
void intercept_fetch_cancel(struct intercept_fetch *req);

#endif
