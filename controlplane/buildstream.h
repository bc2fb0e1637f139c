/* controlplane/buildstream: a template build's log, live (GET
 * /templates/{id}/builds/{buildID}/status with Accept: text/event-stream).
 *
 * Owns: following a build's log entries in the state database as builds.c adds them
 * (checked four times a second), each an "event: log" whose id is the entry's number and
 * whose data is the entry as the status answer lists it; an "event: status" at the start and
 * at each change of the build's status; the end of the stream once the build is ready or
 * failed (after its last entries), or when the build goes (its template deleted). A slow
 * client, keep-alive and airlockd's stop are sse.c's (a polled stream). The entries
 * themselves are builds.c's.
 */
#ifndef AIRLOCK_CP_BUILDSTREAM_H
#define AIRLOCK_CP_BUILDSTREAM_H

#include <stdint.h>

struct cp;
struct al_http_req;
struct cp_store_build;

/* Answers req with the stream of build b (borrowed): the entries from number `from` on
 * (logsOffset, or one past Last-Event-ID), of level min_level and above. */
void cp_build_stream(struct cp *cp, struct al_http_req *req, const struct cp_store_build *b,
                     uint64_t from, int min_level);

#endif
