/* vmm/guest/spawn: what the agent adds around common/spawn (al_spawn, which starts every
 * user's process: as_shell, drop_privileges, set_user) for those processes: pty pairs,
 * envd's exit-status strings, and whether the agent may switch users at all.
 */
#ifndef AIRLOCK_GUEST_SPAWN_H
#define AIRLOCK_GUEST_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"
#include "common/spawn.h"

struct agent;
struct agent_user;
/* Fills s for starting a user's program as the agent starts every one (the caller adds the
 * descriptors, the working directory, a controlling terminal): looked up and reported as a
 * shell would ("airlock-agent: x: command not found", exit 127), in a new session, with
 * nothing of the agent's power (as u when the agent may switch users; uid 0 of a build
 * sandbox keeps a->root_caps), and, when the agent is PID 1 of a sandbox, an oom_score_adj
 * that makes the workload, not the agent, the OOM killer's first pick. */
void agent_spawn_user(const struct agent *a, struct al_spawn *s, const char *file,
                      char *const *argv, char *const *envp, const struct agent_user *u);

/* Opens a pty pair (master non-blocking, both close-on-exec) with the given size and, when
 * owner->uid != (uid_t)-1, hands the slave to that user. */
int agent_pty_open(unsigned cols, unsigned rows, const struct agent_user *owner, int *master,
                   int *slave, struct al_error *err);
int agent_pty_resize(int master, unsigned cols, unsigned rows);

/* envd's end event for a wait status: status "exit status 3" / "signal: killed"
 * (+ " (core dumped)"), exit_code (-1 when signalled), exited (normal exit). */
void agent_exit_status(int wstatus, char *status, size_t statuslen, int *exit_code, bool *exited);
/* Go's name for a signal ("killed", "terminated", ...; "signal 40" when unnamed). */
const char *agent_signal_name(int sig, char *buf, size_t buflen);

/* Whether this process may switch users (CAP_SETUID and CAP_SETGID effective). */
bool agent_can_switch_user(void);
/* --build-sandbox: root's processes keep AL_BUILD_ROOT_CAPS (common/confine.h), which the
 * agent must hold itself (-EPERM otherwise). */
int agent_build_caps(struct agent *a, struct al_error *err);

#endif
