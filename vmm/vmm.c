/* vmm/vmm: see vmm.h. */
#include "vmm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "vmm/jail/jail.h"

#define VMM_LOG_RATE_BPS    (1u << 20) /* agent log: 1 MiB/s sustained */
#define VMM_REAP_POLL_MS    5
#define VMM_REAP_TIMEOUT_MS 10000

const struct vmm_backend *vmm_backend_find(const char *name)
{
    if (strcmp(name, "jail") == 0)
        return &vmm_backend_jail;
    if (strcmp(name, "kvm") == 0)
        return &vmm_backend_kvm;
    return NULL;
}

const char *vmm_state_name(enum vmm_state s)
{
    static const char *const names[] = {"starting", "running", "paused", "stopping", "stopped"};
    return (unsigned)s < AL_ARRAY_SIZE(names) ? names[s] : "unknown";
}

/* jansson allocations are wiped when freed: the spec and the init object carry the
 * sandbox's access token. */
static void vmm__zfree(void *p)
{
    if (p) {
        sodium_memzero(p, malloc_usable_size(p));
        free(p);
    }
}

/* ---- state directory ------------------------------------------------------------- */

static int vmm__sandbox_dir(const char *id, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/%s/%s", al_state_dir(), AL_DIR_SANDBOXES, id);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Opens and locks <dir>/vmm.lock; -EWOULDBLOCK if another airlock-vmm holds it. */
static int vmm__lock(const char *dir, bool create, int op)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/vmm.lock", dir);
    int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    if (fd < 0)
        return -errno;
    if (flock(fd, op | LOCK_NB) < 0) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK ? -EWOULDBLOCK : -e;
    }
    return fd;
}

bool vmm_is_live(const char *id, void *arg)
{
    (void)arg;
    char dir[4096];
    if (!vmm_id_valid(id) || vmm__sandbox_dir(id, dir, sizeof dir))
        return false;
    int fd = vmm__lock(dir, false, LOCK_SH);
    if (fd == -EWOULDBLOCK)
        return true;
    if (fd >= 0)
        close(fd);
    return false;
}

static void vmm__remove_files(const char *dir, bool keep_logs)
{
    static const char *const files[] = {"agent.sock", "vmm.sock", "vmm.json", "spec.json", NULL};
    char p[4200];
    for (const char *const *f = files; *f; f++) {
        snprintf(p, sizeof p, "%s/%s", dir, *f);
        unlink(p);
    }
    if (!keep_logs) {
        snprintf(p, sizeof p, "%s/agent.log", dir);
        unlink(p);
        snprintf(p, sizeof p, "%s/agent.log.1", dir);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/vmm.lock", dir);
    unlink(p);
    rmdir(dir); /* fails, as it should, when logs are kept */
}

/* Undoes a dead sandbox's leftovers; the caller holds its lock. */
static int vmm__cleanup_locked(const char *id, const char *dir, bool keep_logs,
                               struct al_error *err)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/vmm.json", dir);
    struct al_error jerr = {0};
    json_t *rec = al_json_load_file(p, &jerr);
    int rc = 0;
    if (rec) {
        const char *backend = "jail";
        json_t *b = json_object_get(rec, "backend_record");
        al_json_get_str(rec, "backend", false, &backend, "record", NULL);
        const struct vmm_backend *be = vmm_backend_find(backend);
        if (!be)
            rc = al_error_set(err, -EINVAL, "%s: unknown backend \"%s\"", p, backend);
        else if (b)
            rc = be->cleanup_record(b, VMM_REAP_TIMEOUT_MS, err);
        json_decref(rec);
    } else if (jerr.code != -ENOENT) {
        al_warn("sandbox %s: unreadable record (%s); the sweep will find its resources", id,
                jerr.msg);
    }
    if (rc == 0)
        vmm__remove_files(dir, keep_logs);
    return rc;
}

/* The backends' sweeps (only: one sandbox's leftovers, vmm_sweep_opts). Returns the number
 * reclaimed or the first error. */
static int vmm__sweep_backends(const json_t *defaults, const char *only, struct al_error *err)
{
    struct vmm_sweep_opts so = {
        .state_dir = al_state_dir(),
        .defaults = defaults,
        .is_live = vmm_is_live,
        .only = only,
    };
    static const struct vmm_backend *const backends[] = {&vmm_backend_jail, &vmm_backend_kvm};
    int reclaimed = 0, first = 0;
    for (size_t i = 0; i < AL_ARRAY_SIZE(backends); i++) {
        struct al_error e2 = {0};
        int rc = backends[i]->sweep(&so, &e2);
        if (rc < 0 && !first)
            first = al_error_set(err, rc, "%s", e2.msg);
        else if (rc > 0)
            reclaimed += rc;
    }
    return first ? first : reclaimed;
}

int vmm_cleanup(const char *id, const json_t *defaults, bool keep_logs, unsigned wait_ms,
                struct al_error *err)
{
    if (!vmm_id_valid(id))
        return al_error_set(err, -EINVAL, "\"%s\" is not a valid sandbox id", id);
    char dir[4096];
    if (vmm__sandbox_dir(id, dir, sizeof dir))
        return al_error_set(err, -ENAMETOOLONG, "state directory path too long");
    struct stat st;
    int rc = 0;
    if (stat(dir, &st) == 0) {
        uint64_t deadline = al_now_ns() + (uint64_t)wait_ms * 1000000u;
        int fd;
        while ((fd = vmm__lock(dir, true, LOCK_EX)) == -EWOULDBLOCK && al_now_ns() < deadline)
            usleep(20 * 1000);
        if (fd == -EWOULDBLOCK) {
            char p[4200];
            snprintf(p, sizeof p, "%s/vmm.sock", dir);
            return al_error_set(err, -EBUSY,
                                "sandbox %s is running (its airlock-vmm holds %s/vmm.lock%s): "
                                "stop it with POST /stop on %s, or send SIGTERM to its "
                                "airlock-vmm",
                                id, dir, wait_ms ? " still" : "", p);
        }
        if (fd < 0)
            return al_error_set(err, fd, "cannot lock %s/vmm.lock: %s", dir, strerror(-fd));
        rc = vmm__cleanup_locked(id, dir, keep_logs, err);
        close(fd);
        if (rc)
            return rc;
    }
    /* No directory or no record: a crash before the record was written (or before the
     * directory was made) can still have left cgroups and an id slot under the sandbox's id.
     * Its lock file is gone now, so the backends see it as dead. */
    rc = vmm__sweep_backends(defaults, id, err);
    return rc < 0 ? rc : 0;
}

int vmm_sweep(const json_t *defaults, bool keep_logs, struct al_error *err)
{
    char base[4096];
    snprintf(base, sizeof base, "%s/%s", al_state_dir(), AL_DIR_SANDBOXES);
    int reclaimed = 0, first = 0;
    DIR *d = opendir(base);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!vmm_id_valid(e->d_name))
                continue;
            struct al_error e1 = {0};
            char dir[4200];
            snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
            int fd = vmm__lock(dir, true, LOCK_EX);
            if (fd < 0)
                continue; /* live, or not ours to touch */
            char p[4300];
            snprintf(p, sizeof p, "%s/vmm.json", dir);
            bool had = access(p, F_OK) == 0;
            int rc = vmm__cleanup_locked(e->d_name, dir, keep_logs, &e1);
            close(fd);
            if (rc && !first)
                first = al_error_set(err, rc, "sandbox %s: %s", e->d_name, e1.msg);
            else if (rc == 0 && had) {
                reclaimed++;
                al_info("sweep: reclaimed sandbox %s", e->d_name);
            }
        }
        closedir(d);
    }
    struct al_error e3 = {0};
    int rc = vmm__sweep_backends(defaults, NULL, &e3);
    if (rc < 0 && !first)
        first = al_error_set(err, rc, "%s", e3.msg);
    else if (rc > 0)
        reclaimed += rc;
    return first ? first : reclaimed;
}

/* The record is replaced atomically (temporary file + rename) but not fsync'ed: it only
 * matters while the machine is up (a reboot ends every sandbox and its cgroups), and an
 * fsync costs tens of milliseconds on a busy disk, on every sandbox creation. */
static int vmm__write_record(const char *path, const char *data, struct al_error *err)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot create %s: %s", tmp, strerror(errno));
    int rc = al_write_all(fd, data, strlen(data));
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return al_error_set(err, rc, "cannot write %s: %s", path, strerror(-rc));
    }
    return 0;
}

/* ---- the agent channel ------------------------------------------------------------- */

int vmm_listen_unix(const char *path, int backlog, struct al_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return al_error_set(err, -ENAMETOOLONG,
                            "socket path %s is longer than %zu bytes: use a shorter state "
                            "directory or sandbox id",
                            path, sizeof sa.sun_path - 1);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return al_error_set(err, -errno, "socket: %s", strerror(errno));
    unlink(path);
    mode_t old = umask(0177);
    int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (r < 0 || listen(fd, backlog) < 0) {
        int e = errno;
        close(fd);
        return al_error_set(err, -e, "cannot listen on %s: %s", path, strerror(e));
    }
    return fd;
}

/* ---- ready notification ------------------------------------------------------------ */

static void vmm__notify(struct vmm *v, json_t *msg)
{
    if (v->ready_fd < 0) {
        json_decref(msg);
        return;
    }
    char *s = al_json_dump(msg);
    json_decref(msg);
    if (s) {
        size_t n = strlen(s);
        al_write_all(v->ready_fd, s, n);
        al_write_all(v->ready_fd, "\n", 1);
        free(s);
    }
    close(v->ready_fd);
    v->ready_fd = -1;
}

/* code -EAGAIN: the host's limits for all sandboxes together are reached ("busy": airlockd
 * answers 503, a condition that passes, not a broken sandbox). */
static void vmm__notify_error(struct vmm *v, const char *msg, int code)
{
    json_t *o = json_object();
    json_object_set_new(o, "ready", json_false());
    json_object_set_new(o, "error", json_string(msg));
    if (code == -EAGAIN)
        json_object_set_new(o, "busy", json_true());
    vmm__notify(v, o);
}

/* ---- status ------------------------------------------------------------------------ */

json_t *vmm_status_json(const struct vmm *v)
{
    json_t *o = json_object();
    char t[40];
    json_object_set_new(o, "id", json_string(v->spec.id));
    json_object_set_new(o, "backend", json_string(v->backend->name));
    json_object_set_new(o, "state", json_string(vmm_state_name(v->state)));
    json_object_set_new(o, "healthy", json_boolean(v->healthy));
    json_object_set_new(o, "agent_pid", json_integer(v->started.pid));
    json_object_set_new(o, "vmm_pid", json_integer(getpid()));
    json_object_set_new(o, "agent_socket", json_string(v->agent_sock));
    json_object_set_new(o, "log", json_string(v->log_path));
    al_time_rfc3339(t, sizeof t, v->started_wall_ns);
    json_object_set_new(o, "started_at", json_string(t));
    json_object_set_new(o, "uptime_ms",
                        json_integer((json_int_t)((al_now_ns() - v->t_begin_ns) / 1000000)));
    if (v->t_healthy_ns)
        json_object_set_new(o, "startup_ms",
                            json_real((double)(v->t_healthy_ns - v->t_begin_ns) / 1e6));
    json_object_set_new(o, "template", json_string(v->spec.template_dir));
    return o;
}

json_t *vmm_stats_json(const struct vmm *v)
{
    json_t *o = v->backend->stats(v->priv);
    if (!o)
        o = json_object();
    json_object_set_new(o, "state", json_string(vmm_state_name(v->state)));
    json_object_set_new(o, "log_bytes", json_integer((json_int_t)v->log.total_in));
    json_object_set_new(o, "log_dropped_bytes", json_integer((json_int_t)v->log.total_dropped));
    return o;
}

/* ---- lifecycle -------------------------------------------------------------------- */

int vmm_pause(struct vmm *v, struct al_error *err)
{
    if (v->rollback_done)
        return al_error_set(err, -EBUSY, "sandbox %s is being rolled back", v->spec.id);
    if (v->state == VMM_PAUSED)
        return al_error_set(err, -EALREADY, "sandbox %s is already paused", v->spec.id);
    if (v->state != VMM_RUNNING)
        return al_error_set(err, -EINVAL, "sandbox %s is %s, not running", v->spec.id,
                            vmm_state_name(v->state));
    int rc = v->backend->pause(v->priv, err);
    if (rc == 0) {
        v->state = VMM_PAUSED;
        al_info("sandbox %s paused", v->spec.id);
    }
    return rc;
}

int vmm_resume(struct vmm *v, struct al_error *err)
{
    if (v->state == VMM_RUNNING)
        return al_error_set(err, -EALREADY, "sandbox %s is not paused", v->spec.id);
    if (v->state != VMM_PAUSED)
        return al_error_set(err, -EINVAL, "sandbox %s is %s, not paused", v->spec.id,
                            vmm_state_name(v->state));
    int rc = v->backend->resume(v->priv, err);
    if (rc == 0) {
        v->state = VMM_RUNNING;
        al_info("sandbox %s resumed", v->spec.id);
    }
    return rc;
}

static void vmm__closed_noop(uv_handle_t *h)
{
    (void)h;
}

static void vmm__all_closed(struct vmm *v)
{
    uv_stop(v->loop);
}

/* The end of agent.log in airlock-vmm's own log: when the agent died or never answered,
 * its last words are the explanation, and agent.log is about to be removed. */
static void vmm__log_agent_tail(const struct vmm *v)
{
    int fd = open(v->log_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    char buf[1536];
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof buf - 1 ? end - (off_t)sizeof buf + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    al_warn("sandbox %s: last output of the agent: %s", v->spec.id, buf);
}

static void vmm__finish(struct vmm *v)
{
    struct al_error err = {0};
    vmm_probe_cancel(v);
    vmm_logcap_stop(&v->log);
    if (v->exit_code == VMM_EXIT_AGENT_DIED || v->exit_code == VMM_EXIT_UNHEALTHY)
        vmm__log_agent_tail(v);
    int rc = v->backend->reclaim(v->priv, &err);
    if (rc) {
        al_error("sandbox %s: could not reclaim everything: %s; the record stays in %s for "
                 "airlock-vmm --cleanup %s",
                 v->spec.id, al_error_str(&err), v->dir, v->spec.id);
        v->exit_code = VMM_EXIT_NOT_CLEANED;
    } else {
        vmm__remove_files(v->dir, v->spec.keep_logs);
    }
    v->state = VMM_STOPPED;
    al_info("sandbox %s stopped (%s)", v->spec.id,
            v->exit_code == VMM_EXIT_STOPPED      ? "on request"
            : v->exit_code == VMM_EXIT_AGENT_DIED ? "the agent exited"
            : v->exit_code == VMM_EXIT_UNHEALTHY  ? "the agent never became healthy"
                                                  : "incomplete cleanup");
    if (v->ready_fd >= 0)
        vmm__notify_error(v, "the sandbox stopped before it was ready", 0);
    uv_timer_stop(&v->stop_timer);
    uv_close((uv_handle_t *)&v->stop_timer, vmm__closed_noop);
    if (!uv_is_closing((uv_handle_t *)&v->pid_poll))
        uv_close((uv_handle_t *)&v->pid_poll, vmm__closed_noop);
    uv_close((uv_handle_t *)&v->sig_term, vmm__closed_noop);
    uv_close((uv_handle_t *)&v->sig_int, vmm__closed_noop);
    uv_close((uv_handle_t *)&v->sig_hup, vmm__closed_noop);
    if (v->api) {
        vmm_api_finish(v, vmm__all_closed);
        return;
    }
    vmm__all_closed(v);
}

static void vmm__reap(struct vmm *v)
{
    if (v->agent_alive) {
        int st;
        pid_t r = waitpid(v->started.pid, &st, WNOHANG);
        if (r == v->started.pid) {
            v->agent_alive = false;
            v->agent_status = st;
        }
    }
}

static void vmm__on_stop_timer(uv_timer_t *t)
{
    struct vmm *v = t->data;
    if (!v->killed) {
        /* The grace period is over (or there was none). */
        struct al_error err = {0};
        v->backend->kill(v->priv, &err);
        v->killed = true;
        v->stop_deadline_ns = al_now_ns() + (uint64_t)VMM_REAP_TIMEOUT_MS * 1000000ull;
    }
    vmm__reap(v);
    if (!v->agent_alive && v->backend->nprocs(v->priv) <= 0) {
        vmm__finish(v);
        return;
    }
    if (al_now_ns() > v->stop_deadline_ns) {
        al_error("sandbox %s: processes are still alive %d ms after SIGKILL", v->spec.id,
                 VMM_REAP_TIMEOUT_MS);
        v->exit_code = VMM_EXIT_NOT_CLEANED;
        vmm__finish(v);
        return;
    }
    /* Kill again: a process forked between the walk and the kill. */
    v->backend->kill(v->priv, NULL);
    uv_timer_start(&v->stop_timer, vmm__on_stop_timer, VMM_REAP_POLL_MS, 0);
}

void vmm_stop(struct vmm *v, uint32_t grace_ms, int exit_code)
{
    if (v->state == VMM_STOPPING || v->state == VMM_STOPPED)
        return;
    al_info("sandbox %s: stopping%s", v->spec.id, grace_ms ? " (graceful)" : "");
    bool was_paused = v->state == VMM_PAUSED;
    v->state = VMM_STOPPING;
    v->exit_code = exit_code;
    vmm_probe_cancel(v);
    if (v->rollback_done) {
        void (*done)(struct vmm *, int, json_t *, const char *) = v->rollback_done;
        v->rollback_done = NULL;
        json_decref(v->rollback_info);
        v->rollback_info = NULL;
        done(v, -ECANCELED, NULL, "the sandbox stopped before its agent answered again");
    }
    if (grace_ms && v->agent_alive) {
        if (was_paused)
            v->backend->resume(v->priv, NULL);
        v->backend->terminate(v->priv);
        uv_timer_start(&v->stop_timer, vmm__on_stop_timer, grace_ms, 0);
    } else {
        uv_timer_start(&v->stop_timer, vmm__on_stop_timer, 0, 0);
    }
}

static void vmm__on_agent_exit(uv_poll_t *h, int status, int events)
{
    struct vmm *v = h->data;
    (void)status;
    (void)events;
    vmm__reap(v);
    if (v->agent_alive)
        return;
    uv_poll_stop(h);
    int st = v->agent_status;
    if (v->state != VMM_STOPPING) {
        if (WIFEXITED(st))
            al_warn("sandbox %s: the agent exited with status %d", v->spec.id, WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
            al_warn("sandbox %s: the agent was killed by signal %d", v->spec.id, WTERMSIG(st));
        vmm_stop(v, 0, v->healthy ? VMM_EXIT_AGENT_DIED : VMM_EXIT_UNHEALTHY);
    }
}

static void vmm__watch_agent(struct vmm *v)
{
    uv_poll_init(v->loop, &v->pid_poll, v->started.pidfd);
    v->pid_poll.data = v;
    uv_poll_start(&v->pid_poll, UV_READABLE, vmm__on_agent_exit);
}

/* The agent's watch was closed for a rollback: it watches the agent there is now. */
static void vmm__watch_reopen(uv_handle_t *h)
{
    struct vmm *v = h->data;
    if (v->state != VMM_STOPPING && v->state != VMM_STOPPED)
        vmm__watch_agent(v);
}

static void vmm__on_rollback_healthy(struct vmm *v, int rc)
{
    void (*done)(struct vmm *, int, json_t *, const char *) = v->rollback_done;
    json_t *info = v->rollback_info;
    v->rollback_done = NULL;
    v->rollback_info = NULL;
    if (!done) {
        json_decref(info);
        return;
    }
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "after the rollback the agent did not answer GET /health within %u ms (see %s)",
                 v->spec.start_timeout_ms, v->log_path);
        al_error("sandbox %s: %s", v->spec.id, msg);
        json_decref(info);
        done(v, -ETIMEDOUT, NULL, msg);
        vmm_stop(v, 0, VMM_EXIT_UNHEALTHY);
        return;
    }
    done(v, 0, info, NULL);
}

int vmm_rollback(struct vmm *v, const char *dir, const char *access_token,
                 void (*done)(struct vmm *v, int rc, json_t *info, const char *msg),
                 struct al_error *err)
{
    if (!v->backend->rollback)
        return al_error_set(err, -ENOTSUP, "the %s backend has no rollback", v->backend->name);
    if (v->rollback_done)
        return al_error_set(err, -EBUSY, "sandbox %s is being rolled back already", v->spec.id);
    if (access_token && !v->spec_token)
        return al_error_set(err, -ENOTSUP,
                            "sandbox %s was started without its identity and given it later "
                            "through its agent's /init (a warm sandbox): its environment is "
                            "not kept, so a rollback could not give it again",
                            v->spec.id);
    if (v->state == VMM_PAUSED)
        return al_error_set(err, -EALREADY, "sandbox %s is paused: resume it first", v->spec.id);
    if (v->state != VMM_RUNNING)
        return al_error_set(err, -EBUSY, "sandbox %s is %s, not running", v->spec.id,
                            vmm_state_name(v->state));
    /* The new agent's channel is made beside the old one and renamed over it once the new
     * agent runs: until then the old agent's stays in place (a refused rollback keeps it).
     * The name is shorter than agent.sock, so it fits wherever that does. */
    char tmp[sizeof v->agent_sock];
    snprintf(tmp, sizeof tmp, "%.*s/a.rb", (int)(strrchr(v->agent_sock, '/') - v->agent_sock),
             v->agent_sock);
    int lfd = vmm_listen_unix(tmp, 128, err);
    if (lfd < 0)
        return lfd;
    /* Closed now, while its descriptor is the old agent's: reopened on the new agent's. */
    uv_close((uv_handle_t *)&v->pid_poll, vmm__watch_reopen);
    struct vmm_rolled_back rb = {.started = {.pid = -1, .pidfd = -1, .log_fd = -1}};
    al_info("sandbox %s: rolling back to %s", v->spec.id, dir);
    int rc = v->backend->rollback(v->priv, dir, access_token, lfd, &rb, err);
    close(lfd);
    json_t *info = rb.info;
    const struct vmm_started st = rb.started;
    if (rc) {
        unlink(tmp);
        if (rb.stopped) {
            /* Reaped by the backend; nothing of the sandbox runs. */
            al_error("sandbox %s: the rollback failed after its processes were stopped: %s",
                     v->spec.id, al_error_str(err));
            v->agent_alive = false;
            vmm_stop(v, 0, VMM_EXIT_AGENT_DIED);
        }
        return rc;
    }
    if (rename(tmp, v->agent_sock) < 0)
        al_warn("sandbox %s: rename %s to %s: %s", v->spec.id, tmp, v->agent_sock, strerror(errno));
    json_decref(st.timing);
    v->started.pid = st.pid;
    v->started.pidfd = st.pidfd;
    v->started.log_fd = st.log_fd;
    v->agent_alive = true;
    v->rollback_done = done;
    v->rollback_info = info;
    if (vmm_probe_start(v, v->spec.start_timeout_ms, vmm__on_rollback_healthy)) {
        v->rollback_done = NULL;
        v->rollback_info = NULL;
        json_decref(info);
        vmm_stop(v, 0, VMM_EXIT_SETUP);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    return 0;
}

static void vmm__on_signal(uv_signal_t *s, int signum)
{
    struct vmm *v = s->data;
    if (signum == SIGHUP)
        return;
    vmm_stop(v, 0, VMM_EXIT_STOPPED);
}

static void vmm__on_healthy(struct vmm *v, int rc)
{
    if (v->state != VMM_STARTING)
        return;
    if (rc) {
        al_error("sandbox %s: the agent did not answer GET /health within %u ms (see %s)",
                 v->spec.id, v->spec.start_timeout_ms, v->log_path);
        char msg[512];
        snprintf(msg, sizeof msg, "the agent did not answer GET /health within %u ms (see %s)",
                 v->spec.start_timeout_ms, v->log_path);
        vmm__notify_error(v, msg, 0);
        vmm_stop(v, 0, VMM_EXIT_UNHEALTHY);
        return;
    }
    v->healthy = true;
    v->t_healthy_ns = al_now_ns();
    double ms = (double)(v->t_healthy_ns - v->t_begin_ns) / 1e6;
    al_info("sandbox %s ready in %.2f ms (agent pid %d)", v->spec.id, ms, (int)v->started.pid);
    json_t *o = json_object();
    json_object_set_new(o, "ready", json_true());
    json_object_set_new(o, "id", json_string(v->spec.id));
    json_object_set_new(o, "agent_pid", json_integer(v->started.pid));
    json_object_set_new(o, "vmm_pid", json_integer(getpid()));
    json_object_set_new(o, "agent_socket", json_string(v->agent_sock));
    json_object_set_new(o, "api_socket", json_string(v->api ? v->api_sock : ""));
    json_object_set_new(o, "startup_ms", json_real(ms));
    json_object_set_new(o, "exec_ms", json_real((double)(v->t_exec_ns - v->t_begin_ns) / 1e6));
    if (v->started.timing) {
        /* airlock-vmm's own steps before the backend (spec + template, state directory
         * and lock, backend reservation, record, agent socket + log file), then the
         * backend's, then the health probe. */
        json_t *t = v->started.timing;
        static const char *const names[] = {"vmm_spec_us", "vmm_state_dir_us", "vmm_reserve_us",
                                            "vmm_record_us", "vmm_socket_us"};
        uint64_t prev = v->t_begin_ns;
        for (int i = 0; i < 5; i++) {
            json_object_set_new(t, names[i],
                                json_integer((json_int_t)((v->t_mark[i] - prev) / 1000)));
            prev = v->t_mark[i];
        }
        json_object_set_new(t, "health_us",
                            json_integer((json_int_t)((v->t_healthy_ns - v->t_exec_ns) / 1000)));
        json_object_set(o, "timing", t);
    }
    vmm__notify(v, o);
    /* After the answer: e.g. a warm start leaves the sandbox's cgroups (this costs an
     * RCU grace period; nobody waits for it now). */
    if (v->backend->settle)
        v->backend->settle(v->priv);
    v->state = VMM_RUNNING;
}

/* ---- run ---------------------------------------------------------------------------- */

static volatile sig_atomic_t vmm__warm_signal;

static void vmm__on_warm_signal(int sig)
{
    vmm__warm_signal = sig;
}

static int vmm__read_spec(const char *path, char **out, size_t *len, struct al_error *err)
{
    if (strcmp(path, "-") != 0)
        return al_read_file(path, VMM_SPEC_MAX_SIZE, out, len, err);
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return al_error_set(err, -ENOMEM, "out of memory");
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > VMM_SPEC_MAX_SIZE) {
                sodium_memzero(buf, n);
                free(buf);
                return al_error_set(err, -E2BIG,
                                    "the spec on standard input is larger than %u "
                                    "bytes",
                                    VMM_SPEC_MAX_SIZE);
            }
            char *nb = malloc(cap * 2);
            if (!nb) {
                sodium_memzero(buf, n);
                free(buf);
                return al_error_set(err, -ENOMEM, "out of memory");
            }
            memcpy(nb, buf, n);
            sodium_memzero(buf, n);
            free(buf);
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(0, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR && vmm__warm_signal) {
            sodium_memzero(buf, n);
            free(buf);
            return al_error_set(err, -EINTR, "signal %d while waiting for the spec",
                                (int)vmm__warm_signal);
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            sodium_memzero(buf, n);
            free(buf);
            return al_error_set(err, -e, "read the spec from standard input: %s", strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int vmm_run(const struct vmm_opts *o)
{
    json_set_alloc_funcs(malloc, vmm__zfree);
    struct al_error err = {0};
    struct vmm *v = calloc(1, sizeof *v);
    if (!v)
        al_die("out of memory");
    v->t_begin_ns = al_now_ns();
    v->started_wall_ns = al_wall_ns();
    v->lock_fd = -1;
    v->ready_fd = o->ready_fd;
    v->started.pid = -1;
    v->started.pidfd = -1;
    v->started.log_fd = -1;
    int code = VMM_EXIT_SETUP;
    int listen_fd = -1;
    bool prepared = false;
    char *data = NULL;
    size_t len = 0;

    signal(SIGPIPE, SIG_IGN);
    int rc;
    if (o->warm) {
        /* Only the jail backend has warm work today. */
        if ((rc = vmm_backend_jail.warm(o->warm_opts, &err)))
            goto fail;
        struct sigaction sa = {.sa_handler = vmm__on_warm_signal}; /* no SA_RESTART */
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        if (v->ready_fd >= 0) {
            char line[96];
            int n = snprintf(line, sizeof line, "{\"warm\":true,\"vmm_pid\":%d}\n", (int)getpid());
            al_write_all(v->ready_fd, line, (size_t)n);
        }
    }
    rc = vmm__read_spec(o->spec_path, &data, &len, &err);
    if (o->warm) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        if (rc == 0 && len == 0) {
            free(data);
            data = NULL;
            rc = al_error_set(&err, -ENODATA,
                              "standard input closed without a spec: a warm "
                              "airlock-vmm released unused");
        }
        if (rc) {
            jail_warm_release();
            if (rc == -EINTR || rc == -ENODATA) {
                al_info("%s", al_error_str(&err));
                code = VMM_EXIT_STOPPED;
                goto fail_quiet;
            }
            goto fail;
        }
        /* The sandbox's creation starts now. */
        v->t_begin_ns = al_now_ns();
        v->started_wall_ns = al_wall_ns();
    }
    if (rc)
        goto fail;
    rc = vmm_spec_parse(data, len, &v->spec, &err);
    sodium_memzero(data, len);
    free(data);
    if (rc)
        goto fail;
    al_log_init(NULL, AL_LOG_AUTO, al_log_get_level());
    if (o->warm && strcmp(v->spec.backend, "jail") != 0)
        jail_warm_release(); /* the warm cgroups are the jail's */
    if ((rc = vmm_spec_load_template(&v->spec, &err)))
        goto fail;
    v->t_mark[0] = al_now_ns();
    v->backend = vmm_backend_find(v->spec.backend);
    if (!v->backend) {
        rc = al_error_set(&err, -ENOTSUP,
                          "backend \"%s\" is not built into this airlock-vmm (available: jail, "
                          "kvm)",
                          v->spec.backend);
        goto fail;
    }

    /* The state directory and the lock that makes this process the sandbox's owner. */
    char base[4096];
    snprintf(base, sizeof base, "%s/%s", al_state_dir(), AL_DIR_SANDBOXES);
    if ((rc = (mkdir(base, 0711) < 0 && errno != EEXIST ? al_mkdir_p(base, 0711) : 0))) {
        al_error_set(&err, rc, "cannot create %s: %s", base, strerror(-rc));
        goto fail;
    }
    if ((rc = vmm__sandbox_dir(v->spec.id, v->dir, sizeof v->dir))) {
        al_error_set(&err, rc, "state directory path too long");
        goto fail;
    }
    bool existed = mkdir(v->dir, 0700) < 0;
    if (existed && errno != EEXIST) {
        rc = al_error_set(&err, -errno, "cannot create %s: %s", v->dir, strerror(errno));
        goto fail;
    }
    v->lock_fd = vmm__lock(v->dir, true, LOCK_EX);
    if (v->lock_fd == -EWOULDBLOCK) {
        rc = al_error_set(&err, -EBUSY,
                          "sandbox %s already runs (another airlock-vmm holds "
                          "%s/vmm.lock)",
                          v->spec.id, v->dir);
        v->lock_fd = -1;
        goto fail_nodir;
    }
    if (v->lock_fd < 0) {
        rc = al_error_set(&err, v->lock_fd, "cannot lock %s/vmm.lock: %s", v->dir,
                          strerror(-v->lock_fd));
        v->lock_fd = -1;
        goto fail_nodir;
    }
    if (existed) {
        /* A previous airlock-vmm of this id died: reclaim what it left first. */
        al_warn("sandbox %s: reclaiming what a previous airlock-vmm left in %s", v->spec.id,
                v->dir);
        if ((rc = vmm__cleanup_locked(v->spec.id, v->dir, false, &err)))
            goto fail;
        if (mkdir(v->dir, 0700) < 0 && errno != EEXIST) {
            rc = al_error_set(&err, -errno, "cannot create %s: %s", v->dir, strerror(errno));
            goto fail;
        }
        close(v->lock_fd);
        v->lock_fd = vmm__lock(v->dir, true, LOCK_EX);
        if (v->lock_fd < 0) {
            rc = al_error_set(&err, -EBUSY, "lost the race for %s/vmm.lock", v->dir);
            v->lock_fd = -1;
            goto fail_nodir;
        }
    }
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s/agent.sock", v->dir);
    if (strlen(tmp) >= sizeof v->agent_sock) {
        rc = al_error_set(&err, -ENAMETOOLONG,
                          "%s is longer than a unix socket path may be (%zu bytes): use a "
                          "shorter state directory",
                          tmp, sizeof v->agent_sock - 1);
        goto fail;
    }
    snprintf(v->agent_sock, sizeof v->agent_sock, "%s", tmp);
    snprintf(tmp, sizeof tmp, "%s/vmm.sock", v->dir);
    snprintf(v->api_sock, sizeof v->api_sock, "%s", tmp);
    snprintf(v->log_path, sizeof v->log_path, "%s/agent.log", v->dir);

    v->priv = calloc(1, v->backend->priv_size);
    if (!v->priv)
        al_die("out of memory");
    v->t_mark[1] = al_now_ns();
    if ((rc = v->backend->prepare(v->priv, &v->spec, al_state_dir(), &err)))
        goto fail;
    v->t_mark[2] = al_now_ns();
    prepared = true;
    json_t *rec = json_object();
    json_object_set_new(rec, "id", json_string(v->spec.id));
    json_object_set_new(rec, "backend", json_string(v->backend->name));
    json_object_set_new(rec, "vmm_pid", json_integer(getpid()));
    json_object_set_new(rec, "backend_record", v->backend->record(v->priv));
    char *recs = json_dumps(rec, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(rec);
    snprintf(tmp, sizeof tmp, "%s/vmm.json", v->dir);
    rc = recs ? vmm__write_record(tmp, recs, &err) : al_error_set(&err, -ENOMEM, "out of memory");
    free(recs);
    if (rc)
        goto fail;

    v->t_mark[3] = al_now_ns();
    if ((listen_fd = vmm_listen_unix(v->agent_sock, 128, &err)) < 0) {
        rc = listen_fd;
        goto fail;
    }
    /* The log file exists before the agent runs, so the control plane can always serve it. */
    v->loop = uv_default_loop();
    v->log.on_eof = NULL;
    if ((rc = vmm_logcap_start(&v->log, v->loop,
                               &(struct vmm_logcap_opts){.in_fd = -1,
                                                         .path = v->log_path,
                                                         .max_bytes = v->spec.log_max_bytes,
                                                         .rate_bps = VMM_LOG_RATE_BPS},
                               &err)))
        goto fail;
    vmm_logcap_stop(&v->log);

    v->t_mark[4] = al_now_ns();
    if ((rc = v->backend->start(v->priv, listen_fd, &v->started, &err)))
        goto fail;
    close(listen_fd); /* the agent holds the channel now */
    listen_fd = -1;
    /* The agent has its token; this process has no further use for it (the zeroing
     * allocator wipes it as it is freed). */
    v->spec_token = v->spec.access_token != NULL;
    if (v->spec.access_token) {
        json_object_del(v->spec.root, "access_token");
        v->spec.access_token = NULL;
    }
    v->agent_alive = true;
    v->t_exec_ns = al_now_ns();
    v->state = VMM_STARTING;
    al_info("sandbox %s: agent started as pid %d in %.2f ms", v->spec.id, (int)v->started.pid,
            (double)(v->t_exec_ns - v->t_begin_ns) / 1e6);

    /* The event loop: the agent's exit, its logs, signals, the API, the health probe. */
    uv_timer_init(v->loop, &v->stop_timer);
    v->stop_timer.data = v;
    vmm__watch_agent(v);
    uv_signal_init(v->loop, &v->sig_term);
    uv_signal_init(v->loop, &v->sig_int);
    uv_signal_init(v->loop, &v->sig_hup);
    v->sig_term.data = v->sig_int.data = v->sig_hup.data = v;
    uv_signal_start(&v->sig_term, vmm__on_signal, SIGTERM);
    uv_signal_start(&v->sig_int, vmm__on_signal, SIGINT);
    uv_signal_start(&v->sig_hup, vmm__on_signal, SIGHUP);
    if ((rc = vmm_logcap_start(&v->log, v->loop,
                               &(struct vmm_logcap_opts){.in_fd = v->started.log_fd,
                                                         .path = v->log_path,
                                                         .max_bytes = v->spec.log_max_bytes,
                                                         .rate_bps = VMM_LOG_RATE_BPS},
                               &err)))
        al_warn("sandbox %s: agent logs will not be captured: %s", v->spec.id, err.msg);
    rc = vmm_api_start(v, &err);
    if (rc) {
        al_error("sandbox %s: %s", v->spec.id, al_error_str(&err));
        vmm__notify_error(v, al_error_str(&err), 0);
        vmm_stop(v, 0, VMM_EXIT_SETUP);
    } else if ((rc = vmm_probe_start(v, v->spec.start_timeout_ms, vmm__on_healthy))) {
        vmm_stop(v, 0, VMM_EXIT_SETUP);
    }
    uv_run(v->loop, UV_RUN_DEFAULT);
    /* Let close callbacks run. */
    uv_run(v->loop, UV_RUN_NOWAIT);
    code = v->exit_code;
    if (v->started.timing)
        json_decref(v->started.timing);
    vmm_spec_free(&v->spec);
    if (v->lock_fd >= 0)
        close(v->lock_fd);
    free(v->priv);
    free(v);
    return code;

fail:
    if (listen_fd >= 0)
        close(listen_fd);
    if (prepared) {
        struct al_error e2 = {0};
        if (v->backend->reclaim(v->priv, &e2))
            al_error("cannot release what was reserved: %s", al_error_str(&e2));
    }
    if (v->lock_fd >= 0)
        vmm__remove_files(v->dir, false);
fail_nodir:
    al_error("%s", al_error_str(&err));
    vmm__notify_error(v, al_error_str(&err), err.code);
fail_quiet:
    if (v->lock_fd >= 0)
        close(v->lock_fd);
    if (v->spec.root)
        vmm_spec_free(&v->spec);
    free(v->priv);
    free(v);
    (void)rc;
    return code;
}
