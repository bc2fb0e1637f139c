/* controlplane/sse: the parts every Server-Sent Events answer of airlockd shares.
 *
 * Owns: whether a request asks for a stream (Accept: text/event-stream), the stream's head
 * (200, text/event-stream, no-store) and its ": ready" comment (what happens after it is
 * sent), the keep-alive comment, and the end of a stream from airlockd's side ("event: end"
 * with why, then the response's end). The streams themselves (the audit log's tail, a
 * sandbox's logs) keep their own state and timers.
 */
#ifndef AIRLOCK_CP_SSE_H
#define AIRLOCK_CP_SSE_H

#include <stdbool.h>
#include <stddef.h>

struct al_http_req;

#define CP_SSE_KEEPALIVE_MS 15000
/* A client that leaves more than this unread is too slow: its stream ends (it reconnects). */
#define CP_SSE_MAX_QUEUED (4u << 20)

bool cp_sse_wanted(const struct al_http_req *req);
/* The head and ": ready"; < 0 if the response cannot start (the request is then the
 * caller's to answer or abort). */
int cp_sse_start(struct al_http_req *req);
void cp_sse_keepalive(struct al_http_req *req);
/* "event: end" with why (one line), then the end of the response (which releases req). */
void cp_sse_end(struct al_http_req *req, const char *why);

#endif
