/* vmm/jail/backend: the jail backend behind airlock-vmm's backend interface (backend.h). */
#include <errno.h>
#include <string.h>

#include "common/json.h"
#include "jail.h"
#include "vmm/backend.h"

static int jb__prepare(void *priv, const struct vmm_spec *spec, const char *state_dir,
                       struct al_error *err)
{
    return jail_prepare(priv, spec, state_dir, err);
}

static json_t *jb__record(const void *priv)
{
    return jail_record(priv);
}

static void jb__started(const struct jail *j, struct vmm_started *out)
{
    out->pid = j->pid;
    out->pidfd = j->pidfd;
    out->log_fd = j->log_fd;
    json_t *t = json_object();
    json_object_set_new(t, "prepare_us", json_integer((json_int_t)(j->timing.prepare_ns / 1000)));
    json_object_set_new(t, "clone_us", json_integer((json_int_t)(j->timing.clone_ns / 1000)));
    json_object_set_new(t, "setup_us", json_integer((json_int_t)(j->timing.setup_ns / 1000)));
    json_object_set_new(t, "cgroup_attach_us",
                        json_integer((json_int_t)(j->timing.cgroup_attach_ns / 1000)));
    json_object_set_new(t, "child_rootfs_us", json_integer(j->timing.child.rootfs_us));
    json_object_set_new(t, "child_mounts_us", json_integer(j->timing.child.plan_us));
    json_object_set_new(t, "child_pivot_us", json_integer(j->timing.child.pivot_us));
    json_object_set_new(t, "child_cgroup_wait_us", json_integer(j->timing.child.cgroup_wait_us));
    json_object_set_new(t, "child_locks_us", json_integer(j->timing.child.locks_us));
    json_object_set_new(t, "child_us", json_integer((json_int_t)(j->timing.child_ns / 1000)));
    json_object_set_new(t, "exec_us", json_integer((json_int_t)(j->timing.exec_ns / 1000)));
    if (j->restore)
        json_object_set_new(t, "restore_us",
                            json_integer((json_int_t)(j->timing.restore_ns / 1000)));
    json_object_set_new(t, "total_us", json_integer((json_int_t)(j->timing.total_ns / 1000)));
    out->timing = t;
}

static int jb__start(void *priv, int listen_fd, struct vmm_started *out, struct al_error *err)
{
    struct jail *j = priv;
    int rc = jail_start(j, listen_fd, err);
    if (rc == 0)
        jb__started(j, out);
    return rc;
}

static int jb__rollback(void *priv, const char *dir, const char *access_token, int listen_fd,
                        struct vmm_rolled_back *out, struct al_error *err)
{
    struct jail *j = priv;
    pid_t old = j->pid;
    int rc = jail_rollback(j, dir, access_token, listen_fd, &out->info, err);
    out->stopped = j->pid != old;
    if (rc == 0)
        jb__started(j, &out->started);
    return rc;
}

static int jb__pause(void *priv, struct al_error *err)
{
    return jail_pause(priv, err);
}

static int jb__resume(void *priv, struct al_error *err)
{
    return jail_resume(priv, err);
}

static int jb__terminate(void *priv)
{
    return jail_terminate(priv);
}

static int jb__kill(void *priv, struct al_error *err)
{
    return jail_kill(priv, err);
}

static int jb__nprocs(const void *priv)
{
    return jail_nprocs(priv);
}

static int jb__reclaim(void *priv, struct al_error *err)
{
    return jail_reclaim(priv, err);
}

static json_t *jb__stats(const void *priv)
{
    return jail_stats(priv);
}

static int jb__snapshot(void *priv, const char *dest, json_t **info, struct al_error *err)
{
    return jail_snapshot(priv, dest, info, err);
}

static bool jb__is_live_default(const char *id, void *arg)
{
    (void)id;
    (void)arg;
    return false;
}

static int jb__sweep(const struct vmm_sweep_opts *o, struct al_error *err)
{
    struct jail_sweep_opts so = {
        .state_dir = o->state_dir,
        .cgroup_parent = "airlock",
        .uid_base = JAIL_ID_BASE_DEFAULT,
        .uid_slots = JAIL_ID_SLOTS_DEFAULT,
        .is_live = o->is_live ? o->is_live : jb__is_live_default,
        .arg = o->arg,
        .only = o->only,
    };
    if (o->defaults) {
        const char *p = NULL;
        int64_t v;
        if (al_json_get_str(o->defaults, "cgroup_parent", false, &p, "sweep", err))
            return -EINVAL;
        if (p)
            so.cgroup_parent = p;
        if (al_json_get_int(o->defaults, "uid_base", false, 65536, 0xffffffffll, &v, "sweep", err))
            return -EINVAL;
        if (json_object_get(o->defaults, "uid_base"))
            so.uid_base = (uint32_t)v;
        if (al_json_get_int(o->defaults, "uid_slots", false, 1, 65535, &v, "sweep", err))
            return -EINVAL;
        if (json_object_get(o->defaults, "uid_slots"))
            so.uid_slots = (uint32_t)v;
    }
    return jail_sweep(&so, err);
}

static int jb__warm(const json_t *opts, struct al_error *err)
{
    const char *parent = "airlock";
    if (opts && al_json_get_str(opts, "cgroup_parent", false, &parent, "warm", err))
        return -EINVAL;
    /* The limits the sandbox will most likely get: the spec's defaults, or what the
     * control plane says it will ask for. */
    struct jail_cg_limits lim = {(uint64_t)VMM_DEFAULT_MEMORY_MIB << 20, VMM_DEFAULT_PIDS,
                                 VMM_DEFAULT_CPUS};
    int64_t v;
    if (opts && json_object_get(opts, "memory_mib")) {
        if (al_json_get_int(opts, "memory_mib", true, 1, 1 << 30, &v, "warm", err))
            return -EINVAL;
        lim.memory_bytes = (uint64_t)v << 20;
    }
    if (opts && json_object_get(opts, "pids")) {
        if (al_json_get_int(opts, "pids", true, 1, 1 << 22, &v, "warm", err))
            return -EINVAL;
        lim.pids = (uint32_t)v;
    }
    json_t *c = opts ? json_object_get(opts, "cpus") : NULL;
    if (c)
        lim.cpus = json_number_value(c);
    return jail_warm(parent ? parent : "airlock", &lim, err);
}

static void jb__settle(void *priv)
{
    (void)priv;
    jail_warm_release();
}

const struct vmm_backend vmm_backend_jail = {
    .name = "jail",
    .priv_size = sizeof(struct jail),
    .warm = jb__warm,
    .settle = jb__settle,
    .prepare = jb__prepare,
    .record = jb__record,
    .start = jb__start,
    .pause = jb__pause,
    .resume = jb__resume,
    .terminate = jb__terminate,
    .kill = jb__kill,
    .nprocs = jb__nprocs,
    .reclaim = jb__reclaim,
    .stats = jb__stats,
    .snapshot = jb__snapshot,
    .rollback = jb__rollback,
    .cleanup_record = jail_cleanup_record,
    .sweep = jb__sweep,
};
