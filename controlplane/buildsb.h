/* controlplane/buildsb: the sandbox a RUN step of a template build runs in.
 *
 * Owns: one hidden sandbox per RUN step (in no registry, listed nowhere, no API reaches
 * it; recorded in the store as "creating" like a warm sandbox, so that an airlockd that
 * died leaves it to the next one to tear down) over the version being built (its rootfs
 * and template.json, whose start command it never has), with the isolation of any sandbox
 * of the backend: its network from the vswitch and its egress through airlock-egress
 * under the build's policy (default templates.build_policy: deny-all), or loopback only
 * without a network;
 * the step's command through its agent's process.Process/Start (common/envd_proc) as the
 * step's user, in its working directory, with its environment; the time bound
 * (templates.step_timeout); and, when the command exits 0, the snapshot of its writable
 * layer (backend snapshot: the jail's POST /snapshot), which the build turns into a layer
 * (templates/layerdiff.h). The sandbox is torn down before the step's callback runs.
 */
#ifndef AIRLOCK_CP_BUILDSB_H
#define AIRLOCK_CP_BUILDSB_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/envd_proc.h"

struct cp;

struct cp_buildsb_step {
    const char *template_id, *build_id;
    const char *dir;      /* the version being built: dir/rootfs, dir/template.json */
    const char *script;   /* run as /bin/bash -l -c SCRIPT */
    const char *user;     /* the step's user (envd's: a name of the image's passwd) */
    const char *cwd;      /* the working directory, or NULL */
    const json_t *env;    /* the variables of the steps before (borrowed), or NULL */
    const char *snapshot; /* a new directory: the writable layer goes there on exit 0 */
    const char *policy;   /* the build's egress policy (a name of policies.dir) */
    /* The command's output as it comes. */
    void (*output)(void *arg, enum al_envd_stream_fd fd, const unsigned char *d, size_t n);
    /* Once, after the sandbox is gone: rc 0 and the exit code (the snapshot was taken
     * when it is 0; snap: its id_base, ...), or rc < 0 and why (the step did not run to
     * its end: no sandbox, the agent, the time bound). */
    void (*done)(void *arg, int rc, int exit_code, const json_t *snap, const char *msg);
    void *arg;
};

/* 0 with the build sandbox's id in sandbox_id (its egress is audited under it), or < 0
 * (done will not run): -EINVAL when s->policy is not a valid policy, -ECANCELED while
 * airlockd stops. */
int cp_buildsb_run(struct cp *cp, const struct cp_buildsb_step *s, char sandbox_id[64]);
/* airlockd stops: every step under way ends (its build fails, its sandbox is torn down);
 * then runs once they all have. */
void cp_buildsb_stop(struct cp *cp, void (*then)(struct cp *cp));

#endif
