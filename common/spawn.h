/* common/spawn: the one way an airlock process starts a helper program (airlockd its
 * airlock-vmm per sandbox and its helper daemons, airlock-vmm the KVM monitor and the image
 * builder, the agent its guest-configuration helper).
 *
 * Owns: creating the child and, in it, in this order: default signal dispositions, the
 * death signal if asked (checked against a parent that died first), a new session if
 * asked, waiting for the parent's go if it has work to do first (before_exec), the
 * descriptors moved into place (every other one close-on-exec), an empty signal mask, and
 * execve. The child runs on a stack of its own in one private block of memory (copies of
 * the path, argv and environment) and makes raw system calls only, so it may share the
 * parent's memory until its exec (CLONE_VM): no copy of a large parent's page tables, no
 * libc state touched, and a pidfd from the clone itself (CLONE_PIDFD).
 *
 * Three ways to wait, one child:
 *   - default: return once the child has exec'd (CLONE_VFORK, as posix_spawn does); a
 *     failed exec is this call's error.
 *   - before_exec: the child waits; the parent runs the callback (e.g. moves it into the
 *     sandbox's cgroups, so it runs no instruction of the program outside them), then lets
 *     it exec and waits for that as above.
 *   - no_wait_exec, the fast path: return as soon as the child exists (no CLONE_VFORK);
 *     the block is reclaimed at later spawns once the child exec'd or died. Measured to
 *     matter for airlockd's event loop: under a burst of creations the wait for each
 *     airlock-vmm's exec was 1.0-1.1 ms (the child competes for a CPU), about 40% of the
 *     loop's time. A failed exec then shows as the child exiting with status 127 (logged).
 * The portable path, where the raw x86_64 calls are not available (another architecture)
 * or CLONE_PIDFD is not (Linux < 5.2): fork() and the same child code through libc's
 * syscall(), a pidfd from pidfd_open.
 *
 * What is not here, and why: a jail sandbox's first process (vmm/jail/jail.c) is cloned
 * with new namespaces into a copy of airlock-vmm (no CLONE_VM) and builds a root file
 * system before its exec, with libc; that is creating a sandbox, not starting a helper.
 * The agent's user processes (vmm/guest/spawn.c) switch credentials, take a controlling
 * terminal and search PATH in the child before exec; they share the same idea of the
 * descriptor map and the exec report, but their child does much more than this one may in
 * shared memory.
 */
#ifndef AIRLOCK_COMMON_SPAWN_H
#define AIRLOCK_COMMON_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/error.h"

#define AL_SPAWN_MAX_FDS 8

struct al_spawn {
    const char *path; /* executable */
    char *const *argv;
    char *const *envp; /* NULL: this process's environment */
    /* fds[i] >= 0 becomes descriptor i in the child (0, 1, 2, then extra ones); -1: closed
     * (0..2 become /dev/null instead). Every other descriptor is closed at the exec. */
    int fds[AL_SPAWN_MAX_FDS];
    int nfds;
    bool new_session;
    bool die_with_parent; /* SIGKILL when the spawning thread exits (PR_SET_PDEATHSIG) */
    bool no_wait_exec;    /* the fast path above (not with before_exec) */
    /* Runs in the parent while the child waits before its exec; a negative return kills
     * the child and is the spawn's result. */
    int (*before_exec)(pid_t pid, void *arg, struct al_error *err);
    void *arg;
};

/* Starts a process. *pidfd (may be NULL) receives a pidfd for it (close-on-exec). A path
 * that is not an executable file is an error here, with every way of waiting. */
int al_spawn(const struct al_spawn *s, pid_t *pid, int *pidfd, struct al_error *err);

#endif
