/* controlplane/backend_test: THE TEST BACKEND. It runs the real agent (airlock-agent-dev)
 * as a plain process on the host, listening on a unix socket: NO ISOLATION, no network
 * namespace, no cgroup, no egress policy. It exists so that the control plane (REST,
 * routing, lifecycle, state, re-adoption) can be tested end to end with the real SDKs where
 * sandboxes cannot be built; it is never chosen automatically (sandboxes.backend: test)
 * and airlockd warns at start when it is on. Only airlockd-test (main_test.c, built with the
 * tests, never installed) links it: the airlockd users run cannot run a sandbox unconfined.
 *
 * Owns: <state>/sandboxes/<id>/ (agent.sock, home/, agent.log), the agent process (its own
 * session; as root it runs as nobody through setpriv, with no capabilities), its init
 * object (environment, access token) on descriptor 3, the health probe, pause and resume
 * (SIGSTOP/SIGCONT of the agent), stats from /proc, and stop (SIGTERM: the agent stops its
 * commands, then SIGKILL after 3 s).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "cp.h"

#define TB_NOBODY 65534

struct tb_timer {
    uv_timer_t t;
    struct tb_priv *p;
};

struct tb_priv {
    struct cp_sandbox *sb;
    cp_backend_cb cb;
    struct tb_timer *timer; /* the current phase's timer (a closing one is forgotten) */
    uint64_t deadline_ns;
    int phase; /* 1 probing, 2 stopping */
    bool probe_inflight;
    struct cp_proc_watch stop_watch;
};

static struct tb_priv *tb__priv(struct cp_sandbox *sb)
{
    if (!sb->bpriv) {
        sb->bpriv = calloc(1, sizeof(struct tb_priv));
        if (sb->bpriv)
            ((struct tb_priv *)sb->bpriv)->sb = sb;
    }
    return sb->bpriv;
}

static void tb__dir(const struct cp_sandbox *sb, char *out, size_t len)
{
    snprintf(out, len, "%s/sandboxes/%s", sb->cp->cfg.state_dir, sb->rec.id);
}

static void tb__paths(struct cp_sandbox *sb)
{
    snprintf(sb->agent_sock, sizeof sb->agent_sock, "%s/sandboxes/%s/agent.sock",
             sb->cp->cfg.state_dir, sb->rec.id);
}

static int tb__rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                    continue;
                char p[4200];
                snprintf(p, sizeof p, "%s/%s", path, e->d_name);
                tb__rm_rf(p);
            }
            closedir(d);
        }
        return rmdir(path) < 0 ? -errno : 0;
    }
    return unlink(path) < 0 ? -errno : 0;
}

/* ---- timer-driven phases ------------------------------------------------------------- */

static void tb__timer_closed(uv_handle_t *h)
{
    struct tb_timer *t = h->data;
    struct cp_sandbox *sb = t->p->sb;
    free(t);
    cp_sb_unref(sb);
}

static void tb__timer_stop(struct tb_priv *p)
{
    if (p->timer) {
        uv_close((uv_handle_t *)&p->timer->t, tb__timer_closed);
        p->timer = NULL;
    }
}

static void tb__finish(struct tb_priv *p, int rc, const char *msg)
{
    tb__timer_stop(p);
    p->phase = 0;
    cp_backend_cb cb = p->cb;
    p->cb = NULL;
    if (cb)
        cb(p->sb, rc, msg);
}

static void tb__probe_tick(uv_timer_t *t);

static void tb__probe_done(struct al_http_creq *c, int err, void *arg)
{
    struct tb_priv *p = arg;
    (void)c;
    p->probe_inflight = false;
    (void)err;
    cp_sb_unref(p->sb);
}

static int tb__probe_resp(struct al_http_creq *c, int status, const struct al_http_header *h,
                          size_t n, void *arg)
{
    struct tb_priv *p = arg;
    (void)c;
    (void)h;
    (void)n;
    if (p->phase == 1 && status >= 200 && status < 300)
        tb__finish(p, 0, NULL);
    return 0;
}

static void tb__probe_tick(uv_timer_t *t)
{
    struct tb_priv *p = ((struct tb_timer *)t->data)->p;
    struct cp_sandbox *sb = p->sb;
    if (p->phase != 1)
        return;
    int st;
    if (sb->pidfd >= 0 && cp_proc_reap(sb->pidfd, &st) == 0) {
        char how[128], msg[256];
        cp_proc_describe(st, how, sizeof how);
        snprintf(msg, sizeof msg,
                 "the agent %s during start-up (see its log %s/sandboxes/%s/"
                 "agent.log)",
                 how, sb->cp->cfg.state_dir, sb->rec.id);
        tb__finish(p, -EIO, msg);
        return;
    }
    if (al_now_ns() > p->deadline_ns) {
        if (sb->pidfd >= 0)
            cp_proc_signal(sb->pidfd, SIGKILL);
        tb__finish(p, -ETIMEDOUT, "the agent did not answer GET /health in time");
        return;
    }
    if (p->probe_inflight)
        return;
    char target[160];
    snprintf(target, sizeof target, "unix:%s", sb->agent_sock);
    struct al_http_creq_opts o = {.target = target,
                                  .method = "GET",
                                  .path = "/health",
                                  .timeout_ms = 1000,
                                  .on_response = tb__probe_resp,
                                  .on_done = tb__probe_done,
                                  .arg = p};
    struct al_http_creq *c;
    cp_sb_ref(sb);
    p->probe_inflight = true;
    if (al_http_creq_start(sb->cp->loop, &o, &c)) {
        p->probe_inflight = false;
        cp_sb_unref(sb);
    }
}

static int tb__timer(struct tb_priv *p, uv_timer_cb cb, uint64_t every_ms)
{
    if (!p->timer) {
        struct tb_timer *t = calloc(1, sizeof *t);
        if (!t)
            return -ENOMEM;
        t->p = p;
        uv_timer_init(p->sb->cp->loop, &t->t);
        t->t.data = t;
        p->timer = t;
        cp_sb_ref(p->sb);
    }
    return uv_timer_start(&p->timer->t, cb, 0, every_ms);
}

/* ---- start ------------------------------------------------------------------------------ */

static int tb_start(struct cp_sandbox *sb, const struct cp_start_args *a, cp_backend_cb cb)
{
    struct cp *cp = sb->cp;
    struct tb_priv *p = tb__priv(sb);
    if (!p)
        return -ENOMEM;
    char dir[4200], home[4300], listen[4300], logp[4300];
    tb__dir(sb, dir, sizeof dir);
    snprintf(home, sizeof home, "%s/home", dir);
    snprintf(logp, sizeof logp, "%s/agent.log", dir);
    tb__paths(sb);
    snprintf(listen, sizeof listen, "unix:%s", sb->agent_sock);
    char base[4200];
    snprintf(base, sizeof base, "%s/sandboxes", cp->cfg.state_dir);
    int rc = al_mkdir_p(base, 0711);
    if (rc)
        return rc;
    tb__rm_rf(dir);
    if (mkdir(dir, 0711) < 0 || mkdir(home, 0700) < 0)
        return -errno;
    bool as_nobody = geteuid() == 0;
    if (as_nobody &&
        (chown(dir, TB_NOBODY, TB_NOBODY) < 0 || chown(home, TB_NOBODY, TB_NOBODY) < 0))
        return -errno;
    int logfd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (logfd < 0)
        return -errno;
    int initp[2];
    if (pipe2(initp, O_CLOEXEC) < 0) {
        rc = -errno;
        close(logfd);
        return rc;
    }
    json_t *init = json_pack(
        "{s:O,s:s,s:s,s:s}", "envVars", a->env_vars ? a->env_vars : json_object(), "accessToken",
        sb->rec.token, "sandboxID", sb->rec.id, "templateID", sb->rec.template_id);
    if (init && a->start_cmd)
        json_object_set_new(init, "startCmd", json_string(a->start_cmd));
    if (init && a->ready_cmd)
        json_object_set_new(init, "readyCmd", json_string(a->ready_cmd));
    char *text = init ? json_dumps(init, JSON_COMPACT) : NULL;
    json_decref(init);
    char *agent = cp->agent_bin;
    char *argv_direct[] = {agent, "--listen", listen, "--home", home, NULL};
    char *argv_nobody[] = {"/usr/bin/setpriv",
                           "--reuid=65534",
                           "--regid=65534",
                           "--clear-groups",
                           "--inh-caps=-all",
                           "--bounding-set=-all",
                           "--",
                           agent,
                           "--listen",
                           listen,
                           "--home",
                           home,
                           NULL};
    char **argv = as_nobody ? argv_nobody : argv_direct;
    /* The agent reads its init object from descriptor 3 (AIRLOCK_AGENT_INIT_FD). */
    extern char **environ;
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **envp = calloc(ne + 3, sizeof *envp);
    size_t k = 0;
    if (envp) {
        for (size_t i = 0; i < ne; i++)
            if (strncmp(environ[i], "AIRLOCK_AGENT_", 14) != 0 &&
                strncmp(environ[i], "AIRLOCK_API_KEY=", 16) != 0 &&
                strncmp(environ[i], "ASAN_OPTIONS=", 13) != 0)
                envp[k++] = environ[i];
        envp[k++] = "AIRLOCK_AGENT_INIT_FD=3";
        /* The sanitizer build of the agent must not fail the sandbox on leak reports. */
        envp[k++] = "ASAN_OPTIONS=detect_leaks=0";
    }
    struct al_spawn s = {.path = argv[0],
                         .argv = argv,
                         .envp = envp,
                         .fds = {-1, logfd, logfd, initp[0]},
                         .nfds = 4,
                         .new_session = true};
    pid_t pid;
    struct al_error err = {0};
    rc = text && envp ? al_spawn(&s, &pid, &sb->pidfd, &err) : -ENOMEM;
    free(envp);
    close(logfd);
    close(initp[0]);
    if (rc == 0 && text) {
        /* Small (environment + token): it fits the pipe buffer. */
        al_write_all(initp[1], text, strlen(text));
    }
    close(initp[1]);
    if (text) {
        explicit_bzero(text, strlen(text));
        free(text);
    }
    if (rc) {
        al_error("sandbox %s: %s", sb->rec.id, al_error_str(&err));
        return rc;
    }
    sb->rec.pid = pid;
    sb->rec.pid_start = cp_proc_start_time(pid);
    cp_sb_save(sb);
    p->cb = cb;
    p->phase = 1;
    p->deadline_ns = al_now_ns() + cp->cfg.start_timeout_ms * 1000000ull;
    return tb__timer(p, tb__probe_tick, 5);
}

/* ---- stop / cleanup --------------------------------------------------------------------- */

static void tb__reclaim(struct cp_sandbox *sb)
{
    char dir[4200];
    tb__dir(sb, dir, sizeof dir);
    tb__rm_rf(dir);
}

static void tb__stop_tick(uv_timer_t *t)
{
    struct tb_priv *p = ((struct tb_timer *)t->data)->p;
    struct cp_sandbox *sb = p->sb;
    if (p->phase != 2)
        return;
    int st;
    bool gone = sb->pidfd < 0 || cp_proc_reap(sb->pidfd, &st) == 0 ||
                cp_proc_signal(sb->pidfd, 0) == -ESRCH;
    if (gone) {
        tb__reclaim(sb);
        tb__finish(p, 0, NULL);
        return;
    }
    if (al_now_ns() > p->deadline_ns)
        cp_proc_signal(sb->pidfd, SIGKILL);
}

static int tb_stop(struct cp_sandbox *sb, cp_backend_cb cb)
{
    struct tb_priv *p = tb__priv(sb);
    if (!p)
        return -ENOMEM;
    if (sb->pidfd < 0 && sb->rec.pid > 0)
        cp_proc_open(sb->rec.pid, sb->rec.pid_start, &sb->pidfd);
    if (sb->pidfd >= 0) {
        cp_proc_signal(sb->pidfd, SIGCONT); /* a paused agent must run to stop */
        cp_proc_signal(sb->pidfd, SIGTERM);
    }
    p->cb = cb;
    p->phase = 2;
    p->deadline_ns = al_now_ns() + 3000000000ull;
    return tb__timer(p, tb__stop_tick, 10);
}

/* An agent started just before airlockd died may not have been recorded: find it by its
 * listening path (unique to this sandbox of this state directory) and kill it. */
static void tb__kill_unrecorded(struct cp_sandbox *sb)
{
    char want[200];
    snprintf(want, sizeof want, "unix:%s", sb->agent_sock);
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1 || pid == getpid())
            continue;
        char p[64], cmd[8192];
        snprintf(p, sizeof p, "/proc/%ld/cmdline", pid);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        if (n <= 0)
            continue;
        cmd[n] = '\0';
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(cmd + i) + 1) {
            if (strcmp(cmd + i, want) == 0) {
                al_warn("sandbox %s: killing its unrecorded agent (pid %ld)", sb->rec.id, pid);
                kill((pid_t)pid, SIGKILL);
                break;
            }
        }
    }
    closedir(d);
}

static int tb_cleanup(struct cp_sandbox *sb, cp_backend_cb cb)
{
    tb__paths(sb);
    tb__kill_unrecorded(sb);
    return tb_stop(sb, cb);
}

/* ---- pause / resume / stats / adopt ----------------------------------------------------- */

static void tb__immediate_closed(uv_handle_t *h)
{
    free(h);
}

struct tb_later {
    uv_timer_t t;
    struct cp_sandbox *sb;
    cp_backend_cb cb;
    int rc;
    char msg[256];
};

static void tb__later_fire(uv_timer_t *t)
{
    struct tb_later *l = t->data;
    l->cb(l->sb, l->rc, l->msg[0] ? l->msg : NULL);
    cp_sb_unref(l->sb);
    uv_close((uv_handle_t *)&l->t, tb__immediate_closed);
}

/* Callbacks never run inside the call that started them (the lifecycle relies on it). */
static int tb__later(struct cp_sandbox *sb, cp_backend_cb cb, int rc, const char *msg)
{
    struct tb_later *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->sb = sb;
    l->cb = cb;
    l->rc = rc;
    snprintf(l->msg, sizeof l->msg, "%s", msg ? msg : "");
    cp_sb_ref(sb);
    uv_timer_init(sb->cp->loop, &l->t);
    l->t.data = l;
    uv_timer_start(&l->t, tb__later_fire, 0, 0);
    return 0;
}

static int tb_pause(struct cp_sandbox *sb, cp_backend_cb cb)
{
    int rc = sb->pidfd >= 0 ? cp_proc_signal(sb->pidfd, SIGSTOP) : -ESRCH;
    return tb__later(sb, cb, rc, rc ? "the agent process is gone" : NULL);
}

static int tb_resume(struct cp_sandbox *sb, cp_backend_cb cb)
{
    int rc = sb->pidfd >= 0 ? cp_proc_signal(sb->pidfd, SIGCONT) : -ESRCH;
    return tb__later(sb, cb, rc, rc ? "the agent process is gone" : NULL);
}

struct tb_stats_later {
    uv_timer_t t;
    struct cp_sandbox *sb;
    cp_backend_stats_cb cb;
    void *arg;
    json_t *stats;
};

static void tb__stats_fire(uv_timer_t *t)
{
    struct tb_stats_later *l = t->data;
    l->cb(l->sb, l->stats ? 0 : -ESRCH, l->stats, l->arg);
    json_decref(l->stats);
    cp_sb_unref(l->sb);
    uv_close((uv_handle_t *)&l->t, tb__immediate_closed);
}

static json_t *tb__proc_stats(const struct cp_sandbox *sb)
{
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)sb->rec.pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return NULL;
    /* Fields after the command name: state is field 3; utime, stime, cutime, cstime are
     * 14..17 and rss is 24, i.e. tokens 11..14 and 21 after the ')'. */
    unsigned long long tok[24] = {0};
    char *save = NULL;
    int k = 0;
    for (char *t = strtok_r(p + 1, " ", &save); t && k < 24; t = strtok_r(NULL, " ", &save), k++)
        tok[k] = k == 0 ? 0 : strtoull(t, NULL, 10);
    if (k < 22)
        return NULL;
    unsigned long long ut = tok[11], st = tok[12], cut = tok[13], cst = tok[14];
    long rss = (long)tok[21];
    long hz = sysconf(_SC_CLK_TCK);
    uint64_t cpu_ns = (ut + st + cut + cst) * (1000000000ull / (uint64_t)(hz > 0 ? hz : 100));
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/sandboxes/%s", sb->cp->cfg.state_dir, sb->rec.id);
    struct statvfs vfs;
    uint64_t dtotal = 0, dused = 0;
    if (statvfs(dir, &vfs) == 0) {
        dtotal = (uint64_t)vfs.f_blocks * vfs.f_frsize;
        dused = dtotal - (uint64_t)vfs.f_bfree * vfs.f_frsize;
    }
    return json_pack("{s:I,s:i,s:I,s:I,s:I,s:I}", "cpu_usage_ns", (json_int_t)cpu_ns, "cpus",
                     sb->rec.cpu_count, "memory_bytes", (json_int_t)rss * sysconf(_SC_PAGESIZE),
                     "memory_limit_bytes", (json_int_t)sb->rec.memory_mb << 20, "disk_used_bytes",
                     (json_int_t)dused, "disk_total_bytes", (json_int_t)dtotal);
}

static int tb_stats(struct cp_sandbox *sb, cp_backend_stats_cb cb, void *arg)
{
    struct tb_stats_later *l = calloc(1, sizeof *l);
    if (!l)
        return -ENOMEM;
    l->sb = sb;
    l->cb = cb;
    l->arg = arg;
    l->stats = tb__proc_stats(sb);
    cp_sb_ref(sb);
    uv_timer_init(sb->cp->loop, &l->t);
    l->t.data = l;
    uv_timer_start(&l->t, tb__stats_fire, 0, 0);
    return 0;
}

static int tb_adopt(struct cp_sandbox *sb, cp_backend_cb cb)
{
    tb__paths(sb);
    int fd;
    int rc = cp_proc_open(sb->rec.pid, sb->rec.pid_start, &fd);
    if (rc)
        return tb__later(sb, cb, -ESRCH, "its agent process is gone");
    if (sb->pidfd >= 0)
        close(sb->pidfd);
    sb->pidfd = fd;
    /* A stopped agent is a paused sandbox. */
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)sb->rec.pid);
    int sfd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = sfd >= 0 ? read(sfd, buf, sizeof buf - 1) : -1;
    if (sfd >= 0)
        close(sfd);
    if (n > 0) {
        buf[n] = '\0';
        char *p = strrchr(buf, ')');
        if (p && (p[2] == 'T' || p[2] == 't'))
            sb->rec.state = CP_SB_PAUSED;
    }
    return tb__later(sb, cb, 0, NULL);
}

static int tb_sweep(struct cp *cp, struct al_error *err)
{
    (void)cp;
    (void)err;
    return 0;
}

static void tb_log_path(const struct cp_sandbox *sb, char *out, size_t len)
{
    snprintf(out, len, "%s/sandboxes/%s/agent.log", sb->cp->cfg.state_dir, sb->rec.id);
}

const struct cp_backend_ops cp_backend_test = {
    .name = "test",
    .host_process = true,
    .start = tb_start,
    .stop = tb_stop,
    .pause = tb_pause,
    .resume = tb_resume,
    .stats = tb_stats,
    .adopt = tb_adopt,
    .cleanup = tb_cleanup,
    .sweep = tb_sweep,
    .log_path = tb_log_path,
};
