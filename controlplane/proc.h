/* controlplane/proc: starting and watching the processes airlockd runs (airlock-vmm per
 * sandbox, the helper daemons, the test backend's agent).
 *
 * Owns: pidfds (the one way to watch a process that is not our child, after a restart),
 * reaping our own children, and pid-reuse guards (start time). Processes are started with
 * common/spawn (al_spawn; airlock-vmm on its fast path, no_wait_exec).
 */
#ifndef AIRLOCK_CP_PROC_H
#define AIRLOCK_CP_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/error.h"
#include "common/spawn.h"

/* A pidfd for an existing process, checked against its recorded start time (0 = do not
 * check). -ESRCH if it is gone or the pid now names another process. */
int cp_proc_open(pid_t pid, uint64_t start_time, int *pidfd);
/* After the pidfd became readable: the exit status if the process was our child (reaps it),
 * else -ECHILD. */
int cp_proc_reap(int pidfd, int *wstatus);
/* A child of ours whose standard output is read to its end. */
struct cp_proc_child {
    int outfd; /* the read end of its stdout pipe */
    pid_t pid;
    int pidfd;
    uint64_t t0;            /* al_now_ns() at its start */
    uint64_t kill_after_ms; /* from t0: then it is killed */
};
/* Reads the standard output of c into buf (NUL terminated, *len bytes; what exceeds cap is
 * dropped) until EOF, and reaps it into *wstatus; both bounded by c's kill_after_ms.
 * Returns 0, or -ETIMEDOUT (the process was killed). */
int cp_proc_collect(const struct cp_proc_child *c, char *buf, size_t cap, size_t *len,
                    int *wstatus);
/* Sends sig through the pidfd (no pid-reuse race). */
int cp_proc_signal(int pidfd, int sig);

/* Watches a pidfd on the loop; cb runs once when the process is gone. */
struct cp_proc_watch {
    uv_poll_t poll;
    int pidfd;
    pid_t pid;
    bool active;
    void (*cb)(struct cp_proc_watch *w, int wstatus); /* wstatus -1 when unknown */
    void (*close_cb)(struct cp_proc_watch *w);
    void *data;
};
int cp_proc_watch_start(uv_loop_t *loop, struct cp_proc_watch *w, pid_t pid, int pidfd,
                        void (*cb)(struct cp_proc_watch *w, int wstatus));
/* Stops watching; close_cb (may be NULL) runs when the handle is closed. The pidfd is
 * closed then. */
void cp_proc_watch_stop(struct cp_proc_watch *w, void (*close_cb)(struct cp_proc_watch *w));

/* Reaps our child pid whenever it exits (a duplicate of pidfd is watched, so the caller may
 * close or stop watching its own): no zombie is left behind by processes airlockd stops
 * watching before they are gone (an airlock-vmm exits just after answering its stop). */
void cp_proc_reap_later(uv_loop_t *loop, pid_t pid, int pidfd);

/* "exited with status 3", "killed by signal 9 (Killed)". */
void cp_proc_describe(int wstatus, char *out, size_t len);

#endif
