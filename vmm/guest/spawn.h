/* vmm/guest/spawn: starting a user's program with nothing of the agent's power.
 *
 * Owns: fork + exec with, in the child and in this order: default signal dispositions and
 * an empty mask, a new session (and the pty as controlling terminal), the fds the caller
 * maps (everything else closed), oom_score_adj, the working directory, the bounding set
 * cleared, ambient capabilities cleared, the target user's groups/gid/uid, every remaining
 * capability cleared (effective, permitted, inheritable), no_new_privs, then execve with a
 * PATH search in the child's own environment. Setup failures are reported back through a
 * close-on-exec pipe with the step that failed; an exec failure becomes exit status 127/126
 * with a message on the child's stderr, as a shell would report it.
 * Also: opening a pty pair, and envd's exit-status strings.
 */
#ifndef AIRLOCK_GUEST_SPAWN_H
#define AIRLOCK_GUEST_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

#define AGENT_SPAWN_MAX_FDS 8

struct agent_spawn_opts {
    const char *file; /* program; searched in the child's PATH when it has no '/' */
    char *const *argv;
    char *const *envp;
    const char *cwd;
    bool use_cwd_fd; /* change to the directory cwd_fd (before the fds are set up) */
    int cwd_fd;
    bool set_user; /* switch to uid/gid/groups (needs CAP_SETUID/SETGID) */
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    size_t ngroups;
    int fds[AGENT_SPAWN_MAX_FDS]; /* child fd i <- fds[i]; -1 = /dev/null for 0..2, closed above */
    size_t nfds;                  /* at least 3 */
    int ctty;          /* fd (in the child's numbering) to make the controlling tty, or -1 */
    int oom_score_adj; /* written when >= -1000 and <= 1000 */
};

/* Starts the child; *pid on success. Errors carry a message naming the failed step. */
int agent_spawn(const struct agent_spawn_opts *o, pid_t *pid, struct al_error *err);

/* The next place to look for file in a PATH list (*p, advanced; an empty entry is "."),
 * written to buf; false once the list is done. Entries too long for buf are skipped.
 * Async-signal-safe: the child's exec uses it after fork. */
bool agent_path_next(const char **p, const char *file, char *buf, size_t len);

/* Opens a pty pair (master non-blocking, both close-on-exec) with the given size and, when
 * uid != (uid_t)-1, hands the slave to that user. */
int agent_pty_open(unsigned cols, unsigned rows, uid_t uid, gid_t gid, int *master, int *slave,
                   struct al_error *err);
int agent_pty_resize(int master, unsigned cols, unsigned rows);

/* envd's end event for a wait status: status "exit status 3" / "signal: killed"
 * (+ " (core dumped)"), exit_code (-1 when signalled), exited (normal exit). */
void agent_exit_status(int wstatus, char *status, size_t statuslen, int *exit_code, bool *exited);
/* Go's name for a signal ("killed", "terminated", ...; "signal 40" when unnamed). */
const char *agent_signal_name(int sig, char *buf, size_t buflen);

/* Whether this process may switch users (CAP_SETUID and CAP_SETGID effective). */
bool agent_can_switch_user(void);

#endif
