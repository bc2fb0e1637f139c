/* controlplane/logstream: a sandbox's logs, live (GET /v2/sandboxes/{id}/logs or
 * /sandboxes/{id}/logs with Accept: text/event-stream).
 *
 * Owns: following the agent's log file as it grows (checked four times a second; the file
 * airlock-vmm rotated is read to its end, then the new one from its start; a truncated one
 * from its start again), each new line an "event: log" whose data is its SandboxLogEntry
 * (logs.c parses it), after a backlog of the latest entries; the listing's level and search
 * filters; the end of the stream when the sandbox stops. A slow client, keep-alive and
 * airlockd's stop are sse.c's (a polled stream). Nothing of a line is interpreted beyond
 * logs.c's parsing.
 */
#ifndef AIRLOCK_CP_LOGSTREAM_H
#define AIRLOCK_CP_LOGSTREAM_H

#include <stdbool.h>

#include "logs.h"

struct cp;
struct cp_sandbox;
struct al_http_req;

/* Answers req with the stream: first the latest q->limit entries (has_limit; else 100, at
 * most 1000; since_ms applies to them), oldest first, then every line written from then on
 * that passes the filters. */
void cp_logs_stream(struct cp *cp, struct al_http_req *req, struct cp_sandbox *sb,
                    const struct cp_logs_query *q, bool has_limit);

#endif
