/* controlplane/supervise: airlockd's helper daemons (airlock-egress, airlock-vault) as
 * separate, supervised processes.
 *
 * Owns: starting each one (own session, its output on airlockd's standard error), noticing
 * when it is ready (its admin socket answers a health request), restarting it with
 * exponential backoff when it exits (0.5 s doubling to 30 s; reset after a minute of good
 * health), re-adopting one that a previous airlockd left running (pid and start time are
 * kept in the state database), and stopping them (SIGTERM, then SIGKILL after 5 s).
 */
#ifndef AIRLOCK_CP_SUPERVISE_H
#define AIRLOCK_CP_SUPERVISE_H

#include <stdbool.h>

struct cp;
struct cp_supervisor;
struct cp_daemon;

struct cp_daemon_def {
    const char *name;        /* "egress" */
    const char *path;        /* executable */
    char **argv;             /* NULL-terminated (copied) */
    const char *socket;      /* admin socket */
    const char *health_path; /* "GET" this until 2xx */
    /* Called each time the daemon becomes ready (first start, restart, adoption). */
    void (*on_ready)(struct cp *cp, struct cp_daemon *d);
};

int cp_sup_new(struct cp *cp, struct cp_supervisor **out);
int cp_sup_add(struct cp_supervisor *s, const struct cp_daemon_def *def);
void cp_sup_start(struct cp_supervisor *s);
/* True once every daemon was ready at least once. */
bool cp_sup_all_ready(const struct cp_supervisor *s);
bool cp_sup_ready(const struct cp_supervisor *s, const char *name);
/* Stops the daemons (kill) or leaves them running for the next airlockd (keep = true);
 * done runs when they are gone (or at once when kept); then frees s. */
void cp_sup_stop(struct cp_supervisor *s, bool keep, void (*done)(struct cp *cp));

#endif
