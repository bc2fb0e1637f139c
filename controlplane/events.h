/* controlplane/events: the sandboxes' lifecycle events (E2B's /events/sandboxes).
 *
 * Owns: one event for every lifecycle change of a sandbox (created, paused, resumed, its
 * timeout changed, killed, a terminal of the web console opened or closed, a snapshot of
 * it deleted, its cluster node lost as a gateway saw it), with its cause (the API key that asked, the timeout, a crash, airlockd's
 * stop or restart, a retention rule); their persistence in the state database (store.c, table
 * events) and retention (events.retention, events.max); the E2B listing
 * (GET /events/sandboxes[/{id}] with offset, limit, orderAsc, types); and live streams of
 * the same events as Server-Sent Events (the same paths with Accept: text/event-stream,
 * resumable with Last-Event-ID) for the CLI (`airlock events tail`) and the console.
 * An event is recorded after the change it reports has been saved: a reader never sees an
 * event for a change that did not happen. A failure to record one is logged and counted,
 * never fails the operation that caused it.
 */
#ifndef AIRLOCK_CP_EVENTS_H
#define AIRLOCK_CP_EVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

struct cp;
struct cp_sandbox;
struct al_http_req;

/* The order is the stored type number: append only. */
enum cp_event_type {
    CP_EV_CREATED = 0,
    CP_EV_KILLED,
    CP_EV_UPDATED,
    CP_EV_PAUSED,
    CP_EV_RESUMED,
    CP_EV_CHECKPOINTED,
    CP_EV_ROLLED_BACK,
    CP_EV_FORKED,
    CP_EV_TERMINAL_OPENED, /* the web console opened a terminal in it (console_term.c) */
    CP_EV_TERMINAL_CLOSED,
    CP_EV_SNAPSHOT_DELETED, /* one of its snapshots deleted (snapshots.c); it may be gone */
    CP_EV_NODE_LOST,        /* a gateway saw its cluster node's lease end (cluster.c) */
    CP_EV__COUNT
};

/* Why a change happened (eventData.cause). */
enum cp_event_cause {
    CP_CAUSE_API = 0, /* an API call; key_id names the key */
    CP_CAUSE_TIMEOUT, /* the sandbox's timeout */
    CP_CAUSE_CRASH,   /* its process ended by itself */
    CP_CAUSE_SHUTDOWN,
    CP_CAUSE_RESTART,   /* found at airlockd's start: adopted, or torn down */
    CP_CAUSE_TRAFFIC,   /* auto-resume on traffic to a paused sandbox */
    CP_CAUSE_RETENTION, /* a retention rule (snapshots.keep_per_*, snapshots.max_age) */
    CP_CAUSE_NODE,      /* its cluster node (the node's lease ended) */
};

/* "api", "timeout", ... (eventData.cause); NULL for an unknown cause. */
const char *cp_event_cause_name(enum cp_event_cause c);
/* "sandbox.lifecycle.created" ...; NULL for an unknown type. */
const char *cp_event_type_name(enum cp_event_type t);
int cp_event_type_parse(const char *s, enum cp_event_type *out);
/* "sandbox.lifecycle.created, killed, ...": every type, for the errors that list them. */
void cp_event_type_list(char *out, size_t len);

int cp_events_open(struct cp *cp, struct al_error *err);
/* Ends every stream (airlockd stops). */
void cp_events_stop(struct cp *cp);
void cp_events_close(struct cp *cp);
/* Retention: called from airlockd's tick. */
void cp_events_tick(struct cp *cp);

/* Records an event. key_id: the API key for CP_CAUSE_API (else NULL); data: more of
 * eventData (stolen, may be NULL). */
void cp_event_emit(struct cp_sandbox *sb, enum cp_event_type t, enum cp_event_cause cause,
                   const char *key_id, json_t *data);
/* The same for a sandbox that may have ended: what its event names of it. build_id and
 * execution_id are "" when they are not known any more (they are not stored with it). */
struct cp_event_subject {
    const char *sandbox_id, *template_id, *build_id, *execution_id;
};
void cp_event_emit_for(struct cp *cp, const struct cp_event_subject *who, enum cp_event_type t,
                       enum cp_event_cause cause, const char *key_id, json_t *data);

/* Handles GET /events/sandboxes and /events/sandboxes/{id}; false if path is another. */
bool cp_events_route(struct cp *cp, struct al_http_req *req, const char *path);

struct cp_events_query {
    uint64_t offset, limit;
    bool ascending;
    uint64_t type_mask;
};

#endif
