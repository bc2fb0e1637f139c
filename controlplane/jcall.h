/* controlplane/jcall: one HTTP request that sends JSON and reads a JSON answer.
 *
 * Owns: the request to a local daemon's socket (airlock-egress's admin API, airlock-vmm's
 * control API) or to a sandbox's agent over its channel (with the sandbox's access token),
 * collecting the answer's body up to a cap and parsing it. The caller's callback runs
 * exactly once, never from inside cp_jcall.
 */
#ifndef AIRLOCK_CP_JCALL_H
#define AIRLOCK_CP_JCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/error.h"

struct al_http_pool;

/* status: the HTTP status, or -1 when no answer came (err says why; NULL otherwise).
 * body: the answer parsed as JSON, or NULL (none, not JSON, or longer than the cap); it is
 * the callee's only during the call (json_incref to keep it). */
typedef void (*cp_jcall_cb)(int status, json_t *body, const char *err, void *arg);

struct cp_jcall_opts {
    const char *target; /* "unix:PATH" (or anything al_http_creq takes) */
    const char *method;
    const char *path;
    const char *token;     /* sent as X-Access-Token (an agent's channel), or NULL */
    const json_t *body;    /* sent as application/json, or NULL */
    const char *body_text; /* or the JSON already serialised (body wins) */
    uint32_t timeout_ms;   /* 0: 10 s */
    size_t max_answer;     /* the answer body's cap; 0: 1 MiB */
    /* The request carries a secret (a token, a sandbox's env): every copy cp_jcall makes of
     * what it sends (the serialised body, the client's buffer) is wiped when freed. The
     * caller's own body and body_text stay the caller's to wipe. */
    bool wipe;
    struct al_http_pool *pool;
    cp_jcall_cb done;
    void *arg;
};

/* 0, or a negative errno (nothing was sent and done will not run). */
int cp_jcall(uv_loop_t *loop, const struct cp_jcall_opts *o);

#endif
