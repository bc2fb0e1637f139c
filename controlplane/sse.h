/* controlplane/sse: the parts every Server-Sent Events answer of airlockd shares.
 *
 * Owns: whether a request asks for a stream (Accept: text/event-stream), the stream's head
 * (200, text/event-stream, no-store) and its ": ready" comment (what happens after it is
 * sent), the keep-alive comment, and the end of a stream from airlockd's side ("event: end"
 * with why, then the response's end), the Last-Event-ID a client resumes from, and the life
 * of a stream polled on a timer (struct cp_sse_poll: a sandbox's logs, a build's log): its
 * checks, keep-alive, the end of a client that reads too slowly, its release when the client
 * leaves, and the end of every such stream when airlockd stops. What a stream follows and
 * sends is its owner's.
 */
#ifndef AIRLOCK_CP_SSE_H
#define AIRLOCK_CP_SSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct al_http_req;

#define CP_SSE_KEEPALIVE_MS 15000
/* A client that leaves more than this unread is too slow: its stream ends (it reconnects). */
#define CP_SSE_MAX_QUEUED (4u << 20)

bool cp_sse_wanted(const struct al_http_req *req);
/* The id of Last-Event-ID (a reconnecting EventSource sends the last one it had): 1 with *id
 * set, 0 without the header, -EINVAL when it is not a decimal number. */
int cp_sse_last_event_id(const struct al_http_req *req, uint64_t *id);
/* The head and ": ready"; < 0 if the response cannot start (the request is then the
 * caller's to answer or abort). */
int cp_sse_start(struct al_http_req *req);
void cp_sse_keepalive(struct al_http_req *req);
/* "event: end" with why (one line), then the end of the response (which releases req). */
void cp_sse_end(struct al_http_req *req, const char *why);

/* A stream that checks what it follows every every_ms (embedded first in its owner's struct,
 * which tick and release get back by a cast). */
struct cp_sse_poll {
    struct al_http_req *req; /* NULL once the client left or the stream ended */
    uv_timer_t timer;
    unsigned every_ms, ticks;
    const char *slow; /* why a client that reads too slowly is ended */
    /* Each check, with req set: sends what is new, or ends the stream (cp_sse_poll_end). */
    void (*tick)(struct cp_sse_poll *p);
    /* Once the stream is over and its timer closed: frees the owner. */
    void (*release)(struct cp_sse_poll *p);
    struct cp_sse_poll *next;
};
/* Follows req (after cp_sse_start) with p (every_ms, slow, tick and release set): the first
 * check after first_ms, then every every_ms. */
void cp_sse_poll_start(struct cp_sse_poll *p, uv_loop_t *loop, struct al_http_req *req,
                       unsigned first_ms);
/* "event: end" with why (cp_sse_end), then the stream is released; nothing if it is over. */
void cp_sse_poll_end(struct cp_sse_poll *p, const char *why);
/* Ends every polled stream ("airlockd stops"). */
void cp_sse_polls_stop(void);

#endif
