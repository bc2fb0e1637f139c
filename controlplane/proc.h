/* controlplane/proc: starting and watching the processes airlockd runs (airlock-vmm per
 * sandbox, the helper daemons, the test backend's agent).
 *
 * Owns: spawning (posix_spawn: cheap for a large parent; the child gets its own session,
 * default signal dispositions, an empty signal mask, and exactly the descriptors asked
 * for; or, for airlock-vmm, the same without waiting for the child's exec: see proc.c),
 * pidfds (the one way to watch a process that is not our child, after a restart),
 * reaping our own children, and pid-reuse guards (start time).
 */
#ifndef AIRLOCK_CP_PROC_H
#define AIRLOCK_CP_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/error.h"

#define CP_PROC_MAX_FDS 8

struct cp_spawn {
    const char *path; /* executable */
    char *const *argv;
    char *const *envp; /* NULL = airlockd's environment */
    /* fds[i] >= 0 becomes descriptor i in the child (0, 1, 2, then extra ones); -1 = closed
     * (0..2 become /dev/null instead). */
    int fds[CP_PROC_MAX_FDS];
    int nfds;
    bool new_session;
    /* Return as soon as the child exists, not once it has exec'd (cp_proc_spawn's comment):
     * for the spawns on airlockd's event loop that happen under load (airlock-vmm). A
     * failed exec then shows as the child exiting with status 127 (and is logged). */
    bool no_wait_exec;
};

/* Starts a process. *pidfd (may be NULL) receives a pidfd for it (close-on-exec). A path
 * that is not an executable file is an error here, with either way of spawning. */
int cp_proc_spawn(const struct cp_spawn *s, pid_t *pid, int *pidfd, struct al_error *err);
/* A pidfd for an existing process, checked against its recorded start time (0 = do not
 * check). -ESRCH if it is gone or the pid now names another process. */
int cp_proc_open(pid_t pid, uint64_t start_time, int *pidfd);
/* After the pidfd became readable: the exit status if the process was our child (reaps it),
 * else -ECHILD. */
int cp_proc_reap(int pidfd, int *wstatus);
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
