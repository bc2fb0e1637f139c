/* vmm/logcap: captures the agent's stdout and stderr into <sandbox dir>/agent.log.
 *
 * Owns: reading the log pipe on the event loop and writing it to a file that is rotated
 * (agent.log -> agent.log.1, one old file kept) when it reaches max_bytes, so a sandbox
 * can never use more than 2 * max_bytes of host disk for logs. Writing is rate-limited
 * (a token bucket of rate_bps with a burst of max_bytes); what exceeds the rate is read and
 * dropped, never left in the pipe, so a flooding agent never blocks on its own stderr and
 * never makes airlock-vmm buffer. Drops are reported in the log itself.
 */
#ifndef AIRLOCK_VMM_LOGCAP_H
#define AIRLOCK_VMM_LOGCAP_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/error.h"

struct vmm_logcap {
    uv_poll_t poll;
    int in_fd;
    int out_fd;
    char path[4096];
    uint64_t max_bytes;
    uint64_t written; /* in the current file */
    uint64_t rate_bps;
    double tokens;
    uint64_t last_ns;
    uint64_t dropped;  /* since the last drop notice */
    uint64_t total_in; /* all bytes read */
    uint64_t total_dropped;
    bool active;
    bool poll_inited;
    void (*on_eof)(struct vmm_logcap *l);
};

struct vmm_logcap_opts {
    int in_fd;        /* -1: only create the file */
    const char *path; /* the log file */
    uint64_t max_bytes;
    uint64_t rate_bps;
};

/* Starts capturing o->in_fd (ownership stays with the caller, who must keep it open until
 * the capture is stopped). */
int vmm_logcap_start(struct vmm_logcap *l, uv_loop_t *loop, const struct vmm_logcap_opts *o,
                     struct al_error *err);
/* Reads whatever is still in the pipe (bounded), then stops and closes the file. */
void vmm_logcap_stop(struct vmm_logcap *l);
/* Feeds bytes as if read from the pipe (tests). */
void vmm_logcap_feed(struct vmm_logcap *l, const char *data, size_t len, uint64_t now_ns);

#endif
