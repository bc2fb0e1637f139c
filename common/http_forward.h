/* common/http_forward: one streaming HTTP forwarder, from a request of an al_http_server to an
 * upstream reached with an al_http_creq: airlockd's sandbox proxy (controlplane/proxy.c, to
 * the sandbox's agent) and the agent's port forwarder (vmm/guest/forward.c, to a server on
 * the sandbox's loopback).
 *
 * Owns: the request head the upstream gets (the client's fields minus the hop-by-hop ones,
 * those its Connection names, the framing and Expect, each then shown to the caller's
 * request_field hook, plus the caller's extra fields), the dial (the caller's targets in
 * order while a dial is refused and nothing of the client's body was read), the response
 * head the client gets (likewise filtered, with the caller's response_field hook and extra
 * fields; the Content-Length kept), both bodies streamed with flow control in each direction
 * (high/low water marks), the hand-off of a 101 to al_http_relay, and how each failure ends:
 * an answer with the status the caller's fail hook chooses before the response started, a
 * cut-off response (al_http_resp_abort) after, and the upstream request cancelled when the
 * client leaves.
 *
 * The client's body is read once the upstream's connection is up (so a refused dial can
 * still go to the next target, and a client sending "Expect: 100-continue" gets its 100 only
 * then); a body is never combined with an upgrade. Everything runs on the request's loop.
 */
#ifndef AIRLOCK_COMMON_HTTP_FORWARD_H
#define AIRLOCK_COMMON_HTTP_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "http.h"

/* At most this many fields in a head either way, the extra fields included. */
#define AL_HTTP_FORWARD_MAX_HEADERS 160

struct al_http_forward_opts {
    /* al_http_creq targets ("unix:/x.sock", "127.0.0.1:8080", ...), tried in order while the
     * dial is refused (-ECONNREFUSED) and before the client's body was read. 1 to 4. */
    const char *const *targets;
    size_t n_targets;
    const char *path; /* request-target the upstream gets; NULL: the client's */
    /* Per end-to-end field of the client's request head: 0 keeps it (*value may be replaced;
     * a replacement the hook allocated goes in *owned and is freed once the head is copied),
     * 1 drops it, < 0 fails al_http_forward with that error. NULL: every field is kept. */
    int (*request_field)(void *arg, const char *name, const char **value, char **owned);
    const struct al_http_header *request_extra; /* appended to the upstream's request head */
    size_t n_request_extra;
    /* Per end-to-end field of the upstream's response head (upgrade: of its 101), as above;
     * < 0 means the response cannot be relayed (the client gets the fail hook's answer). */
    int (*response_field)(void *arg, bool upgrade, const char *name, const char **value,
                          char **owned);
    const struct al_http_header *response_extra; /* appended to a response head (not a 101) */
    size_t n_response_extra;
    const struct al_http_header *upgrade_extra; /* appended to a 101's head */
    size_t n_upgrade_extra;
    uint32_t timeout_ms;       /* al_http_creq_opts.timeout_ms */
    size_t high_water;         /* bytes queued either way before that side pauses; 0: 256 KiB */
    size_t low_water;          /* ... and resumes; 0: a quarter of high_water */
    struct al_http_pool *pool; /* keep-alive connections (never for an upgrade); NULL: none */
    /* The answer for a failure before the response started (the upstream could not be
     * reached, failed or timed out, or its head could not be relayed): err is the upstream
     * request's error, why al_http_creq_strerror's text (may be ""). Writes the message to
     * msg and returns the status. NULL: 502 "<label>: <why>". */
    int (*fail)(void *arg, const struct al_http_req *req, int err, const char *why, char *msg,
                size_t len);
    /* Sends an error answer (status, message). NULL: al_http_reply_error. */
    void (*reply)(void *arg, struct al_http_req *req, int status, const char *msg);
    /* Once, when the forward is over: the status the client was answered with (101 for an
     * upgrade, 502 for a cut-off response), 0 if the client left first. arg may be freed. */
    void (*on_end)(void *arg, int status);
    void *arg;
    const char *label; /* names the upstream in logs and messages: "sandbox X", "port 8080" */
};

/* Forwards req. 0: the forwarder owns req (it answers it, in every case) and calls on_end
 * once. < 0: nothing was done, req is the caller's to answer and on_end is not called:
 * -E2BIG more than AL_HTTP_FORWARD_MAX_HEADERS fields, -EINVAL bad options, a
 * request_field hook's error, -ENOMEM, or what al_http_creq_start returned. */
int al_http_forward(uv_loop_t *loop, struct al_http_req *req,
                    const struct al_http_forward_opts *opts);

#endif
