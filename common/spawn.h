/* common/spawn: the one way an airlock process starts a program: airlockd its airlock-vmm
 * per sandbox and its helper daemons, airlock-vmm the KVM monitor and the image builder, the
 * agent its guest-configuration helper and every user's process (commands, kernels, sudo).
 *
 * Owns: creating the child and, in it, in this order: default signal dispositions, the
 * death signal if asked (checked against a parent that died first), a new session if
 * asked, waiting for the parent's go if it has work to do first (before_exec), a working
 * directory given as a descriptor, the descriptors moved into place (every other one
 * close-on-exec), the controlling terminal, oom_score_adj, a working directory given as a
 * path, then, when asked, the privileges dropped (the bounding and ambient sets cleared,
 * the target user's groups, gid and uid, every remaining capability cleared, no_new_privs),
 * an empty signal mask, and execve (with a shell's PATH search when asked). The child runs
 * on a stack of its own in one private block of memory (copies of the path, argv,
 * environment, groups, PATH candidates) and makes raw system calls only, so it may share
 * the parent's memory until its exec (CLONE_VM): no copy of a large parent's page tables,
 * no libc state touched, and a pidfd from the clone itself (CLONE_PIDFD). A setup step
 * that fails is reported back with its name and errno.
 *
 * Three ways to wait, one child:
 *   - default: return once the child has exec'd (CLONE_VFORK, as posix_spawn does); a
 *     failed exec is this call's error (with as_shell: the child's exit status).
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
 * syscall(), a pidfd from pidfd_open. A child that switches users takes that path too: a
 * change of uid or gid in a child that shares the parent's memory would mark that memory,
 * the parent's, not dumpable (the kernel's commit_creds), and the switch costs a fork no
 * more than the rest of a user's process start.
 *
 * What is not here, and why: a jail sandbox's first process (vmm/jail/jail.c) is cloned
 * with new namespaces into a copy of airlock-vmm (no CLONE_VM) and builds a root file
 * system before its exec, with libc; that is creating a sandbox, not starting a program.
 */
#ifndef AIRLOCK_COMMON_SPAWN_H
#define AIRLOCK_COMMON_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
    /* Run path as a shell runs a command: a path without '/' is looked up in envp's PATH (a
     * default when it has none, al_spawn_path_next), a file the kernel cannot execute
     * (ENOEXEC, a script without "#!") is run by /bin/sh, and a failed exec is not this
     * call's error but the child's exit status, 127 (not found) or 126 (found, cannot be
     * run), with "<as_shell>: <path>: <why>" on its descriptor 2. NULL: path is executed as
     * it is and a failed exec is the error. */
    const char *as_shell;
    /* The working directory: a descriptor of the parent's, entered before the descriptors
     * move (use_cwd_fd), and/or a path, entered after them (as the parent's user, before any
     * switch). Neither: the parent's. */
    bool use_cwd_fd;
    int cwd_fd;
    const char *cwd;
    bool controlling_tty; /* the child's descriptor 0, a terminal, becomes its controlling
                             terminal (with new_session) */
    bool set_oom_score_adj;
    int oom_score_adj; /* -1000..1000 */
    /* Nothing of the parent's power: the capability bounding and ambient sets cleared, then
     * (set_user) the groups, gid and uid switched, every remaining capability cleared and
     * no_new_privs set. An unprivileged parent's child keeps its (empty) bounding set. */
    bool drop_privileges;
    bool set_user; /* (needs CAP_SETUID and CAP_SETGID; only with drop_privileges) */
    /* With drop_privileges: capabilities the child keeps (a subset of the parent's permitted
     * set), in its bounding set and, while it is uid 0 after the switch, in its permitted
     * and effective sets, so that root's programs have them after the exec too (a build
     * sandbox's root, vmm/guest/spawn.c). A child of another uid has none. 0: none. */
    uint64_t keep_caps;
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    size_t ngroups;
};

/* Starts a process. *pidfd (may be NULL: then none is opened) receives a pidfd for it
 * (close-on-exec). Without as_shell, a path
 * that is not an executable file is an error here, with every way of waiting. */
int al_spawn(const struct al_spawn *s, pid_t *pid, int *pidfd, struct al_error *err);

/* The next place to look for file in a PATH list (*p, advanced; an empty entry is "."),
 * written to buf; false once the list is done. Entries too long for buf are skipped. */
bool al_spawn_path_next(const char **p, const char *file, char *buf, size_t len);
/* The PATH a shell searches when the environment has none. */
#define AL_SPAWN_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#endif
