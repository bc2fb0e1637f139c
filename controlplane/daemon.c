/* controlplane/daemon: airlockd from start to exit.
 *
 * Owns: the command line, the start sequence (configuration, state directory and its lock,
 * state database, host checks and the backend choice, the API key, default policies and
 * templates, the vswitch, the helper daemons, re-adoption of running sandboxes, the
 * listeners, the banner with the E2B environment variables), the periodic tick (metrics
 * samples, network pool), and the stop sequence on SIGTERM/SIGINT.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "atrest.h"
#include "builds.h"
#include "cluster.h"
#include "cluster_tls.h"
#include "console.h"
#include "buildsb.h"
#include "cp.h"
#include "warm.h"
#include "events.h"
#include "webhooks.h"
#include "backendsel.h"
#include "egressreg.h"
#include "embedded.h"
#include "hostcheck.h"
#include "sse.h"
#include "metrics.h"
#include "policysel.h"
#include "snapshots.h"
#include "volumes.h"
#include "store.h"
#include "supervise.h"
#include "templates.h"
#include "net_vswitch.h"

static struct cp daemon__cp;

static void daemon__usage(FILE *f)
{
    fprintf(f,
            "usage: airlockd [--listen ADDR:PORT] [--state-dir DIR] [--config FILE]\n"
            "\n"
            "Runs airlock: the E2B-compatible API on ADDR:PORT (default 127.0.0.1:3000), the\n"
            "sandboxes, their network switch and the egress proxy, with an embedded default\n"
            "configuration. A configuration file (default %s when it exists)\n"
            "sets everything else; `airlockd --help-config` lists its keys.\n"
            "\n"
            "  --listen ADDR:PORT   where the API listens (port 0: any free port)\n"
            "  --state-dir DIR      state directory (default %s)\n"
            "  --config FILE        configuration file (must exist)\n"
            "  --help-config        the configuration keys, defaults and environment variables\n"
            "  --version\n"
            "\n"
            "Environment: AIRLOCK_API_KEY=KEY is accepted as an API key (otherwise a key is made\n"
            "on first start, stored hashed and printed once; `airlock apikey` manages keys).\n",
            CP_DEFAULT_CONFIG_FILE, AL_DEFAULT_STATE_DIR);
}

/* ---- start helpers ---------------------------------------------------------------------- */

/* <state>/sandboxes holds only what lives as long as its sandboxes (sockets, locks, the vmm
 * record, agent logs): on a tmpfs its churn costs no disk inode allocation. Mounted only
 * over an empty directory (sandboxes of an airlockd that did not mount one stay where they
 * are) and left mounted across restarts (re-adoption finds everything). */
static void daemon__runtime_tmpfs(const char *path)
{
    struct statfs sf;
    if (statfs(path, &sf) == 0 && sf.f_type == TMPFS_MAGIC)
        return; /* already (ours from a previous run, or the operator's) */
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            empty = false;
    closedir(d);
    if (!empty) {
        al_info("%s is not empty: sandboxes stay on its file system (runtime_tmpfs applies "
                "from the next start with no sandbox)",
                path);
        return;
    }
    if (mount("airlock-sandboxes", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0711") <
        0) {
        al_warn("cannot mount a tmpfs on %s (%s): sandboxes' runtime files stay on disk", path,
                strerror(errno));
        return;
    }
}

/* At a full stop (every sandbox gone) the tmpfs goes too. */
static void daemon__runtime_tmpfs_release(struct cp *cp)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/sandboxes", cp->cfg.state_dir);
    struct statfs sf;
    if (!cp->cfg.runtime_tmpfs || statfs(p, &sf) < 0 || sf.f_type != TMPFS_MAGIC || cp->n_live > 0)
        return;
    /* Lazily: an airlock-vmm that has just answered its stop may still be closing a file
     * there; the tmpfs goes with its last user. */
    if (umount2(p, MNT_DETACH) < 0)
        al_warn("cannot unmount the tmpfs on %s: %s", p, strerror(errno));
}

static int daemon__dirs(struct cp *cp)
{
    const char *sd = cp->cfg.state_dir;
    int rc = al_mkdir_p(sd, 0711);
    if (rc) {
        al_error("cannot create the state directory %s: %s", sd, strerror(-rc));
        return rc;
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/run", sd);
    if ((rc = al_mkdir_p(p, 0755))) {
        al_error("cannot create %s: %s", p, strerror(-rc));
        return rc;
    }
    snprintf(p, sizeof p, "%s/sandboxes", sd);
    if ((rc = al_mkdir_p(p, 0711))) {
        al_error("cannot create %s: %s", p, strerror(-rc));
        return rc;
    }
    if ((rc = al_mkdir_p(cp->cfg.policies_path, 0755))) {
        al_error("cannot create the policies directory %s: %s", cp->cfg.policies_path,
                 strerror(-rc));
        return rc;
    }
    return 0;
}

static int daemon__lock(struct cp *cp)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/run/airlockd.lock", cp->cfg.state_dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        al_error("cannot open %s: %s", p, strerror(errno));
        return -errno;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        al_error("another airlockd already runs with the state directory %s (it holds %s); "
                 "stop it first, or give this one its own --state-dir",
                 cp->cfg.state_dir, p);
        close(fd);
        return -EBUSY;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) == 0)
        al_write_all(fd, pid, (size_t)n);
    return fd; /* held (open) until exit */
}

/* The files of set missing from dir, installed (what the operator changed stays). */
static void daemon__install(const struct cp_embedded *set, const char *dir, const char *what)
{
    for (const struct cp_embedded *e = set; e->name; e++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/%s", dir, e->name);
        if (access(p, F_OK) == 0)
            continue;
        struct al_error err = {0};
        if (al_write_file_atomic(p, e->data, e->len, 0644, &err))
            al_warn("cannot install the default %s %s: %s", what, p, al_error_str(&err));
        else
            al_info("installed the default %s %s", what, p);
    }
}

static void daemon__install_policies(struct cp *cp)
{
    daemon__install(cp_embedded_policies, cp->cfg.policies_path, "policy");
    char tests[4200];
    snprintf(tests, sizeof tests, "%s/tests", cp->cfg.policies_path);
    if (mkdir(tests, 0755) < 0 && errno != EEXIST)
        al_warn("cannot make %s for the default policies' test cases: %s", tests, strerror(errno));
    else
        daemon__install(cp_embedded_policy_tests, tests, "policy test cases");
}

/* The API key: AIRLOCK_API_KEY if set; else, if no key exists yet, a new one, stored as a
 * digest and printed once (into *fresh). */
static int daemon__api_key(struct cp *cp, char *fresh, size_t len)
{
    fresh[0] = '\0';
    const char *env = getenv("AIRLOCK_API_KEY");
    if (env && *env) {
        if (!cp_apikey_wellformed(env))
            al_warn("AIRLOCK_API_KEY is not of the form e2b_<hex>: E2B SDKs before 2.46 refuse "
                    "such keys unless E2B_VALIDATE_API_KEY=false");
        cp_digest(env, strlen(env), cp->env_key_digest);
        cp->has_env_key = true;
        /* Do not hand it to child processes (sandboxes never see it anyway). */
        unsetenv("AIRLOCK_API_KEY");
        return 0;
    }
    size_t n = 0;
    struct al_error err = {0};
    if (cp_store_key_count_valid(cp->store, &n, &err)) {
        al_error("%s", al_error_str(&err));
        return -EIO;
    }
    if (n > 0)
        return 0;
    struct cp_apikey k;
    char key[CP_APIKEY_LEN + 1];
    /* An admin key: the first key is the one that makes the others. */
    if (cp_apikey_make(&k, key, "default", "admin", "*", &err) ||
        cp_store_key_insert(cp->store, &k, &err)) {
        sodium_memzero(key, sizeof key);
        al_error("%s", al_error_str(&err));
        return -EIO;
    }
    snprintf(fresh, len, "%s", key);
    sodium_memzero(key, sizeof key);
    return 0;
}

/* The backend sandboxes.backend and the host imply (backendsel.h): prints the choice and
 * why; -1 when the configuration forces a backend this host cannot run. */
static const struct cp_backend_ops *daemon__test_backend;

void cp_backend_register_test(const struct cp_backend_ops *ops)
{
    daemon__test_backend = ops;
}

static int daemon__backend(struct cp *cp)
{
    struct cp_backend_sel sel;
    struct cp_backend_sel_opts o = {.choice = cp->cfg.backend,
                                    .vmm_bin = cp->vmm_bin,
                                    .kernel = cp->cfg.kvm_kernel,
                                    .timeout_ms = cp->cfg.kvm_probe_timeout_ms};
    struct al_error err = {0};
    int rc = cp_backend_select(&o, &sel, &err);
    if (sel.probe.ran)
        fprintf(stderr, "  KVM probe   %s: %s (airlock-vmm --probe-kvm, %llu ms)\n",
                sel.probe.usable ? "usable" : "NOT usable", sel.probe.reason,
                (unsigned long long)sel.probe.elapsed_ms);
    if (rc) {
        fprintf(stderr, "  backend     none\n");
        al_error("%s", al_error_str(&err));
        return -1;
    }
    snprintf(cp->backend_kind, sizeof cp->backend_kind, "%s", sel.kind);
    cp->backend_sel = sel;
    if (strcmp(sel.kind, "test") == 0) {
        if (!daemon__test_backend) {
            fprintf(stderr, "  backend     none\n");
            al_error("sandboxes.backend is test, the backend of airlock's own tests (no "
                     "isolation), which this airlockd does not have: only the test build's "
                     "airlockd-test does. Set sandboxes.backend to auto, jail or kvm");
            return -1;
        }
        cp->backend = daemon__test_backend;
        return 0;
    }
    cp->backend = &cp_backend_vmm;
    fprintf(stderr, "  backend     %s: %s (%s)\n", sel.kind,
            strcmp(sel.kind, "kvm") == 0 ? "KVM microVMs, one guest kernel per sandbox"
                                         : "namespaces, cgroups, seccomp, Landlock",
            sel.why);
    al_info("sandbox backend: %s (%s)", sel.kind, sel.why);
    return 0;
}

/* ---- the network: pool and reconciliation (on the thread pool) ---------------------------- */

struct daemon_network {
    uv_work_t w;
    struct cp *cp;
    uint64_t *stale;
    size_t n_stale;
    int rc;
    struct al_error err;
};

static bool daemon__pool_busy;

static void daemon__pool_work(uv_work_t *w)
{
    struct daemon_network *x = w->data;
    x->rc = x->cp->net->pool_fill(x->cp->net_priv, &x->err);
}

static void daemon__pool_done(uv_work_t *w, int status)
{
    struct daemon_network *x = w->data;
    if (status == 0 && x->rc < 0)
        al_warn("vswitch: filling the network pool: %s", al_error_str(&x->err));
    daemon__pool_busy = false;
    free(x);
}

static void daemon__pool_fill(struct cp *cp)
{
    if (!cp->net || !cp->net->pool_fill || daemon__pool_busy || cp->stopping ||
        cp->cfg.net_pool_size <= 0 || cp->n_creating > 0)
        return;
    struct daemon_network *x = calloc(1, sizeof *x);
    if (!x)
        return;
    x->cp = cp;
    x->w.data = x;
    daemon__pool_busy = true;
    if (uv_queue_work(cp->loop, &x->w, daemon__pool_work, daemon__pool_done)) {
        daemon__pool_busy = false;
        free(x);
    }
}

static void daemon__refill_now(struct cp *cp)
{
    daemon__pool_fill(cp);
    cp_vmm_pool_refill(cp);
    cp_warm_refill(cp);
}

static void daemon__refill_quiet(uv_timer_t *t)
{
    struct cp *cp = t->data;
    if (!cp->stopping && cp->n_creating == 0)
        daemon__refill_now(cp); /* (else the end of those creations comes back here) */
}

/* Whether a pool is below half its size: a stream of creations closer together than the
 * quiet time must not drain it. */
static bool daemon__pools_low(struct cp *cp)
{
    size_t ready = 0, size = 0;
    if (cp->net && cp->net->pool_counts) {
        cp->net->pool_counts(cp->net_priv, &ready, &size);
        if (2 * ready < size)
            return true;
    }
    cp_vmm_pool_counts(cp, &ready, &size);
    return 2 * ready < size || cp_warm_below_half(cp);
}

void cp_pools_refill(struct cp *cp)
{
    if (cp->stopping || cp->n_creating > 0)
        return;
    /* Creations one after the other (an agent's loop, a test suite) are a burst too: the
     * replacements of the first ones would share the CPU with the next ones, and a refill is
     * several milliseconds of CPU (a warm sandbox about 5, a network 1, an airlock-vmm 2-3)
     * against about 1 for a claim. They wait until the creations pause. */
    if (cp->cfg.refill_quiet_ms && cp->refill.loop /* (made by cp_main) */ &&
        !daemon__pools_low(cp)) {
        uv_timer_start(&cp->refill, daemon__refill_quiet, cp->cfg.refill_quiet_ms, 0);
        return;
    }
    if (cp->refill.loop)
        uv_timer_stop(&cp->refill);
    daemon__refill_now(cp);
}

struct daemon_stale {
    struct cp *cp;
    struct daemon_network *x;
    size_t cap;
};

static int daemon__seq_live(void *v, void *arg)
{
    struct cp_sandbox *sb = v;
    uint64_t *seq = arg;
    return sb->rec.seq == *seq ? 1 : 0;
}

static int daemon__stale_each(uint64_t seq, const char *label, void *arg)
{
    struct daemon_stale *s = arg;
    if (cp_map_foreach(&s->cp->sandboxes, daemon__seq_live, &seq))
        return 0;
    al_info("vswitch: network of sandbox %s (#%llu) has no sandbox any more: removing it",
            label && *label ? label : "?", (unsigned long long)seq);
    if (s->x->n_stale == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        uint64_t *nv = realloc(s->x->stale, nc * sizeof *nv);
        if (!nv)
            return 0;
        s->x->stale = nv;
        s->cap = nc;
    }
    s->x->stale[s->x->n_stale++] = seq;
    return 0;
}

static void daemon__stale_work(uv_work_t *w)
{
    struct daemon_network *x = w->data;
    for (size_t i = 0; i < x->n_stale; i++) {
        struct al_error err = {0};
        if (x->cp->net->release(x->cp->net_priv, x->stale[i], &err) && err.code != -ENOENT)
            al_warn("vswitch: %s", al_error_str(&err));
    }
}

static void daemon__stale_done(uv_work_t *w, int status)
{
    struct daemon_network *x = w->data;
    (void)status;
    free(x->stale);
    free(x);
}

/* After re-adoption: networks the switch holds for sandboxes that no longer exist. */
static void daemon__net_reconcile(struct cp *cp)
{
    if (!cp->net || !cp->net->foreach)
        return;
    struct daemon_network *x = calloc(1, sizeof *x);
    if (!x)
        return;
    x->cp = cp;
    struct daemon_stale s = {.cp = cp, .x = x};
    cp->net->foreach (cp->net_priv, daemon__stale_each, &s);
    x->w.data = x;
    if (!x->n_stale || uv_queue_work(cp->loop, &x->w, daemon__stale_work, daemon__stale_done)) {
        free(x->stale);
        free(x);
    }
}

/* ---- the tick ---------------------------------------------------------------------------- */

static void daemon__tick(uv_timer_t *t)
{
    struct cp *cp = t->data;
    if (cp->stopping)
        return;
    cp_metrics_sample_all(cp);
    cp_pools_refill(cp);
    cp_events_tick(cp);
    cp_snapshots_tick(cp);
    cp_cluster_tick(cp);
    if (cp->egress) {
        cp_egress_stats(cp->egress); /* refreshes the cached counters for /metrics */
        cp_egress_tick(cp->egress);
    }
}

/* ---- stop -------------------------------------------------------------------------------- */

static void daemon__handle_closed(uv_handle_t *h)
{
    (void)h;
}

static void daemon__final(struct cp *cp)
{
    uv_close((uv_handle_t *)&cp->sig_term, daemon__handle_closed);
    uv_close((uv_handle_t *)&cp->sig_int, daemon__handle_closed);
    uv_close((uv_handle_t *)&cp->sig_hup, daemon__handle_closed);
    uv_close((uv_handle_t *)&cp->tick, daemon__handle_closed);
    uv_close((uv_handle_t *)&cp->refill, daemon__handle_closed);
    cp_webhooks_close(cp);
    cp_events_close(cp);
    cp_cluster_close(cp);
    cp_disk_close(cp);
    if (cp->pool) {
        al_http_pool_close(cp->pool);
        cp->pool = NULL;
    }
    al_info("airlockd stopped");
}

static void daemon__sup_stopped(struct cp *cp)
{
    cp->sup = NULL;
    if (cp->cfg.on_shutdown == CP_SHUTDOWN_KILL)
        daemon__runtime_tmpfs_release(cp);
    if (cp->net_priv) {
        struct al_error err = {0};
        if (cp->cfg.on_shutdown == CP_SHUTDOWN_KEEP) {
            cp->net->close(cp->net_priv);
        } else if (cp->net->destroy(cp->net_priv, &err)) {
            /* Sandbox networks remain (a sandbox could not be reclaimed): the switch stays
             * in place, fail closed, for the next airlockd. */
            al_warn("the vswitch stays in place: %s", al_error_str(&err));
        } else {
            al_info("the vswitch is removed");
        }
        cp->net_priv = NULL;
        cp->net = NULL;
    }
    daemon__final(cp);
}

static void daemon__sandboxes_gone(struct cp *cp)
{
    bool keep = cp->cfg.on_shutdown == CP_SHUTDOWN_KEEP;
    if (cp->sup)
        cp_sup_stop(cp->sup, keep, daemon__sup_stopped);
    else
        daemon__sup_stopped(cp);
}

static void daemon__server_closed(void *arg)
{
    (void)arg;
}

static void daemon__stop_sandboxes(struct cp *cp);
static void daemon__stop_builds(struct cp *cp);

static void daemon__stop(struct cp *cp)
{
    if (cp->stopping)
        return;
    cp->stopping = true;
    cp_events_stop(cp);       /* the streams end; the shutdown's events are still recorded */
    cp_console_term_stop(cp); /* the console's terminals end, their shells killed */
    cp_console_api_stop(cp);  /* and its live tails of the audit log */
    cp_sse_polls_stop();      /* the sandboxes' live logs, the template builds' */
    cp_webhooks_stop(cp);
    cp_cluster_stop(cp); /* a node's lease is released: no new sandboxes come here */
    bool keep = cp->cfg.on_shutdown == CP_SHUTDOWN_KEEP;
    al_info("stopping: %s %zu sandbox%s", keep ? "leaving" : "killing", cp->n_live,
            cp->n_live == 1 ? "" : "es");
    cp_cluster_tls_close(cp); /* the front first: it hands connections to the API server */
    if (cp->api) {
        al_http_server_close(cp->api, daemon__server_closed, NULL);
        cp->api = NULL;
    }
    if (cp->local) {
        al_http_server_close(cp->local, daemon__server_closed, NULL);
        cp->local = NULL;
    }
    uv_timer_stop(&cp->tick);
    /* Warm sandboxes go in either case (nobody has them; the next airlockd would tear them
     * down anyway), before the airlock-vmm pool and the network they use. */
    cp_warm_stop(cp, daemon__stop_builds);
}

/* Template builds' RUN steps end (their builds fail) and their sandboxes go, like the warm
 * ones, before the sandboxes of users. */
static void daemon__stop_builds(struct cp *cp)
{
    cp_buildsb_stop(cp, daemon__stop_sandboxes);
}

static void daemon__stop_sandboxes(struct cp *cp)
{
    bool keep = cp->cfg.on_shutdown == CP_SHUTDOWN_KEEP;
    cp_vmm_pool_stop();
    if (keep) {
        cp_lifecycle_detach_all(cp);
        daemon__sandboxes_gone(cp);
    } else {
        cp_lifecycle_kill_all(cp, daemon__sandboxes_gone);
    }
}

static void daemon__on_signal(uv_signal_t *s, int signum)
{
    struct cp *cp = s->data;
    if (signum == SIGHUP) {
        al_info("SIGHUP: the policies are read again (creations and running sandboxes)");
        cp_policy_reload(cp, "sighup");
        return;
    }
    if (cp->stopping) {
        al_warn("signal %d again: still stopping (waiting for sandboxes to be reclaimed)", signum);
        return;
    }
    al_info("signal %d: stopping", signum);
    daemon__stop(cp);
}

/* ---- listening and the banner ------------------------------------------------------------- */

static char daemon__fresh_key[CP_APIKEY_LEN + 1];
/* airlockd's exit status once its loop ends: 1 when it could not serve at all. */
static int daemon__exit_rc;

static int daemon__listen(struct cp *cp)
{
    struct al_error err = {0};
    struct al_http_server_opts o = {
        .limits = {.max_body_bytes = 1u << 20,
                   .max_connections = 4096,
                   .idle_timeout_ms = 120000,
                   .body_timeout_ms = 120000,
                   .write_timeout_ms = 300000},
        .on_request = cp_on_request,
        .ctx = cp,
        .server_name = "airlockd",
    };
    int rc = al_http_server_new(cp->loop, &o, &cp->local);
    if (!rc) {
        char p[4200];
        snprintf(p, sizeof p, "%s/run/airlockd.sock", cp->cfg.state_dir);
        rc = al_http_server_listen_unix(cp->local, p, 0600, &err);
    }
    if (rc) {
        al_error("local socket: %s", al_error_str(&err));
        return rc;
    }
    if ((rc = cp_cluster_tls_open(cp, &err))) {
        al_error("cluster.tls: %s", al_error_str(&err));
        return rc;
    }
    /* A node with cluster.tls serves its API port through the TLS front only. */
    bool front = cp->cfg.cluster_role == CP_CLUSTER_NODE && cp_cluster_tls_on(cp);
    int port = -1;
    if ((rc = al_http_server_new(cp->loop, &o, &cp->api)) ||
        (rc = front
                  ? cp_cluster_tls_listen(cp, cp->cfg.listen_host, cp->cfg.listen_port, &port, &err)
                  : al_http_server_listen_tcp(cp->api, cp->cfg.listen_host, cp->cfg.listen_port,
                                              &err))) {
        al_error("cannot listen on %s: %s", cp->cfg.listen, al_error_str(&err));
        return rc ? rc : -EADDRINUSE;
    }
    if (!front)
        port = al_http_server_port(cp->api);
    bool v6 = strchr(cp->cfg.listen_host, ':') != NULL;
    const char *host = strcmp(cp->cfg.listen_host, "0.0.0.0") == 0 ? "127.0.0.1"
                       : strcmp(cp->cfg.listen_host, "::") == 0    ? "::1"
                                                                   : cp->cfg.listen_host;
    snprintf(cp->api_url, sizeof cp->api_url, v6 ? "%s://[%s]:%d" : "%s://%s:%d",
             front ? "https" : "http", host, port);
    return 0;
}

static void daemon__banner(struct cp *cp)
{
    const char *surl =
        cp->cfg.sandbox_url && cp->cfg.sandbox_url[0] ? cp->cfg.sandbox_url : cp->api_url;
    fprintf(stderr, "\nairlockd %s is ready (pid %d). For the E2B SDK:\n", AIRLOCK_VERSION,
            (int)getpid());
    printf("export E2B_API_URL=%s\n", cp->api_url);
    printf("export E2B_SANDBOX_URL=%s\n", surl);
    /* The SDK sends volume content requests to https://api.<domain> unless told. */
    printf("export E2B_VOLUME_API_URL=%s\n", cp->api_url);
    if (daemon__fresh_key[0]) {
        printf("export E2B_API_KEY=%s\n", daemon__fresh_key);
        fprintf(stderr, "(this API key is shown once: it is stored only as a digest; "
                        "`airlock apikey create` makes more)\n");
        sodium_memzero(daemon__fresh_key, sizeof daemon__fresh_key);
    } else if (cp->has_env_key) {
        printf("export E2B_API_KEY=\"$AIRLOCK_API_KEY\"\n");
    } else {
        printf("# E2B_API_KEY: the key printed at the first start, or a new one from "
               "`airlock --state-dir %s apikey create`\n",
               cp->cfg.state_dir);
    }
    fflush(stdout);
    al_info("listening on %s (E2B API and sandbox traffic) and %s/run/airlockd.sock (CLI)",
            cp->api_url, cp->cfg.state_dir);
}

static void daemon__adopted(struct cp *cp)
{
    if (cp->stopping)
        return;
    if (cp->egress)
        cp_egress_resync(cp->egress);
    daemon__net_reconcile(cp);
    daemon__pool_fill(cp);
    cp_vmm_pool_start(cp);
    cp_warm_refill(cp);
    if (daemon__listen(cp)) {
        al_error("airlockd cannot serve: stopping");
        daemon__exit_rc = 1;
        daemon__stop(cp);
        return;
    }
    uv_timer_start(&cp->tick, daemon__tick, cp->cfg.metrics_interval_ms,
                   cp->cfg.metrics_interval_ms);
    cp_disk_init(cp);
    /* A node registers once it serves (its address is the API's). */
    if (cp_cluster_start(cp)) {
        al_error("airlockd cannot join the cluster: stopping");
        daemon__stop(cp);
        return;
    }
    daemon__banner(cp);
}

static void daemon__egress_ready(struct cp *cp, struct cp_daemon *d)
{
    (void)d;
    /* A (re)started proxy knows no sandbox: register every live one again. */
    if (cp->egress && !cp->adopting && cp->api)
        cp_egress_resync(cp->egress);
}

/* The helpers get a few seconds to come up before the API opens (so that the first create
 * finds the egress proxy ready); after that airlockd serves anyway and says so. */
struct daemon_wait {
    uv_timer_t t;
    uint64_t deadline_ns;
};

static void daemon__wait_closed(uv_handle_t *h)
{
    free(h->data);
}

static void daemon__wait_tick(uv_timer_t *t)
{
    struct daemon_wait *w = t->data;
    struct cp *cp = &daemon__cp;
    bool ready = !cp->sup || cp_sup_all_ready(cp->sup);
    if (!ready && al_now_ns() < w->deadline_ns && !cp->stopping)
        return;
    uv_timer_stop(t);
    uv_close((uv_handle_t *)t, daemon__wait_closed);
    if (cp->stopping)
        return;
    if (!ready)
        al_warn("the helper daemons are not all ready yet; serving anyway (sandboxes created "
                "before airlock-egress is ready fail with 503)");
    cp_lifecycle_adopt_all(cp, daemon__adopted);
}

/* ---- main --------------------------------------------------------------------------------- */

/* First start: a vault with a random master key (`airlock vault init`), so that
 * airlock-vault can start; operators who want a passphrase vault make it themselves first. */
static int daemon__vault_init(struct cp *cp)
{
    char p[4200], cli[4200];
    snprintf(p, sizeof p, "%s/vault/secrets.vault", cp->cfg.state_dir);
    if (access(p, F_OK) == 0)
        return 0;
    snprintf(cli, sizeof cli, "%s/airlock", cp->cfg.bin_path);
    char *argv[] = {cli, "--state-dir", cp->cfg.state_dir, "vault", "init", NULL};
    struct al_spawn s = {.path = cli, .argv = argv, .fds = {-1, 2, 2}, .nfds = 3};
    pid_t pid;
    struct al_error err = {0};
    int rc = al_spawn(&s, &pid, NULL, &err);
    if (rc) {
        al_error("cannot create the vault: %s", al_error_str(&err));
        return rc;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        al_error("`airlock vault init` failed (above): airlock-vault is not started");
        return -EIO;
    }
    al_info("created the vault (random master key in %s/vault/master.key: back it up)",
            cp->cfg.state_dir);
    return 0;
}

static int daemon__bin(struct cp *cp, char *out, size_t len, const char *name, bool required)
{
    snprintf(out, len, "%s/%s", cp->cfg.bin_path, name);
    if (access(out, X_OK) == 0)
        return 0;
    if (required)
        al_error("%s not found (looked in %s; set bin_dir in the configuration)", name,
                 cp->cfg.bin_path);
    return -ENOENT;
}

/* The limits of all sandboxes together, so that no number of busy sandboxes takes the
 * processes or memory that airlockd, airlock-egress and the host need: checked against the
 * configuration (what happens when it is overcommitted is printed), then set. */
static int daemon__limit_all(struct cp *cp)
{
    struct cp_host_res res;
    struct cp_host_limits hl;
    struct al_error err = {0};
    cp_host_res_probe(cp->cfg.state_dir, &res);
    if (cp_host_limits_plan(&cp->cfg, &res, &hl, &err)) {
        al_error("%s", al_error_str(&err));
        return -1;
    }
    cp_host_limits_print(&cp->cfg, &res, &hl, strcmp(cp->backend_kind, "kvm") == 0, stderr);
    uint64_t now = 0;
    if (cp->backend->limit_all(cp, hl.pids, hl.memory, &now, &err)) {
        al_error("cannot set the limits of all sandboxes together: %s", al_error_str(&err));
        return -1;
    }
    if (now >= hl.pids)
        al_warn("the sandboxes kept from before have %" PRIu64 " processes, at or above their "
                "new limit (%" PRIu64 "): new sandboxes are refused until some exit",
                now, hl.pids);
    return 0;
}

/* Descriptors airlockd's table holds room for from the start: client and data-plane
 * connections, one pidfd and a few pipes per sandbox, the networks being made. */
#define DAEMON_FD_TABLE 4096

int cp_main(int argc, char **argv)
{
    const char *config = NULL, *listen = NULL, *state = NULL;
    static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                         {"state-dir", required_argument, NULL, 's'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"help-config", no_argument, NULL, 'H'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            listen = optarg;
            break;
        case 's':
            state = optarg;
            break;
        case 'c':
            config = optarg;
            break;
        case 'h':
            daemon__usage(stdout);
            return 0;
        case 'H':
            al_config_help(cp_config_fields, stdout);
            return 0;
        case 'V':
            printf("airlockd %s\n", AIRLOCK_VERSION);
            return 0;
        default:
            daemon__usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "airlockd: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "airlockd: libsodium failed to initialise\n");
        return 1;
    }
    struct cp *cp = &daemon__cp;
    memset(cp, 0, sizeof *cp);
    if (cp_config_load(&cp->cfg, config, listen, state, stderr)) {
        fprintf(stderr, "airlockd: the configuration has errors (above); nothing was started\n");
        return 2;
    }
    al_log_init("airlockd", (enum al_log_format)cp->cfg.log_format,
                (enum al_log_level)cp->cfg.log_level);
    al_set_state_dir(cp->cfg.state_dir);
    setenv("AIRLOCK_STATE_DIR", cp->cfg.state_dir, 1);
    cp->started_ns = al_now_ns();
    cp_map_init(&cp->sandboxes);
    cp_map_init(&cp->by_token);
    cp_map_init(&cp->key_cache);
    signal(SIGPIPE, SIG_IGN);
    /* Before any thread exists: a table grown later, under a burst of creations, blocked the
     * event loop for an RCU grace period (10 ms measured) at each doubling. */
    int frc = al_fd_table_reserve(DAEMON_FD_TABLE);
    if (frc < 0)
        al_warn("cannot reserve room for %d descriptors: %s", DAEMON_FD_TABLE, strerror(-frc));

    fprintf(stderr, "airlockd %s starting%s%s\n", AIRLOCK_VERSION,
            cp->cfg.config_file[0] ? " with " : " (embedded default configuration)",
            cp->cfg.config_file);
    int lockfd = -1, rc = 1;
    daemon__exit_rc = 0;
    if (daemon__dirs(cp) || (lockfd = daemon__lock(cp)) < 0)
        goto out;
    char dbp[4200];
    snprintf(dbp, sizeof dbp, "%s/airlockd.db", cp->cfg.state_dir);
    struct al_error err = {0};
    if (cp_store_open(dbp, &cp->store, &err)) {
        al_error("%s", al_error_str(&err));
        goto out;
    }
    struct cp_host host;
    cp_host_probe(&host);
    fprintf(stderr, "host:\n");
    cp_host_print(&host, stderr);
    if (cp->cfg.backend != CP_BACKEND_TEST &&
        daemon__bin(cp, cp->vmm_bin, sizeof cp->vmm_bin, "airlock-vmm", true))
        goto out;
    if (daemon__backend(cp))
        goto out;
    if (cp->backend->host_process) {
        fprintf(stderr, "  backend     TEST (sandboxes.backend: test): the agent runs as a plain "
                        "host process. NO ISOLATION, NO EGRESS POLICY. For airlock's own tests "
                        "only.\n");
        if (daemon__bin(cp, cp->agent_bin, sizeof cp->agent_bin, "airlock-agent-dev", true))
            goto out;
    } else {
        if (!host.root)
            al_warn("airlockd is not running as root: sandboxes (namespaces, cgroups, the "
                    "vswitch) will fail to start");
    }
    /* (After the backend choice, which may refuse to start: nothing is mounted then.) */
    if (cp->cfg.runtime_tmpfs && !cp->backend->host_process) {
        char sbdir[4200];
        snprintf(sbdir, sizeof sbdir, "%s/sandboxes", cp->cfg.state_dir);
        daemon__runtime_tmpfs(sbdir);
    }
    fprintf(stderr, "  state       %s\n  policies    %s (default: %s)\n  templates   %s\n",
            cp->cfg.state_dir, cp->cfg.policies_path, cp->cfg.default_policy,
            cp->cfg.templates_path);

    daemon__install_policies(cp);
    if (daemon__api_key(cp, daemon__fresh_key, sizeof daemon__fresh_key))
        goto out;
    if (cp_templates_ensure(cp, &err)) {
        al_error("%s", al_error_str(&err));
        goto out;
    }
    /* Before anything is written into the stores it encrypts (the sweeps, re-adoption). */
    if (cp_atrest_open_state(cp, &err)) {
        al_error("%s", al_error_str(&err));
        goto out;
    }
    cp_snapshots_sweep(cp);
    cp_volumes_sweep(cp);
    cp_builds_recover(cp);
    if (cp->backend->sweep(cp, &err))
        al_warn("sweeping leftovers of dead sandboxes: %s", al_error_str(&err));
    /* A gateway starts no sandbox (docs/cluster.md): it runs without the privileges setting
     * the sandboxes' limits takes (an unprivileged container). */
    if (cp->backend->limit_all && cp->cfg.cluster_role != CP_CLUSTER_GATEWAY &&
        daemon__limit_all(cp))
        goto out;

    /* The network. */
    bool want_net = !cp->backend->host_process && cp->cfg.network != CP_TRI_OFF;
    if (want_net) {
        if (cp_net_vswitch_open(cp, &err) == 0) {
            fprintf(stderr,
                    "  network     vswitch %s (every sandbox connection goes to "
                    "airlock-egress)\n",
                    cp->cfg.net_range);
        } else if (cp->cfg.network == CP_TRI_ON) {
            al_error("the vswitch cannot start: %s", al_error_str(&err));
            goto out;
        } else {
            al_warn("no sandbox network (the vswitch cannot start: %s); sandboxes get loopback "
                    "only and no egress at all (network.mode: on makes this fatal)",
                    al_error_str(&err));
            want_net = false;
        }
    }
    if (!want_net)
        fprintf(stderr, "  network     none: sandboxes have loopback only (no egress at all)\n");

    cp->loop = uv_default_loop();
    struct al_http_pool_opts po = {
        .max_idle = 1024, .max_idle_per_target = 8, .idle_timeout_ms = 15000};
    if (al_http_pool_new(cp->loop, &po, &cp->pool) || cp_metrics_new(&cp->metrics)) {
        al_error("out of memory");
        goto out;
    }
    if (cp_warm_init(cp, &err)) {
        al_error("%s", al_error_str(&err));
        goto out;
    }
    if (cp_events_open(cp, &err) || cp_webhooks_open(cp, &err)) {
        al_error("%s", al_error_str(&err));
        goto out;
    }
    /* Helper daemons. */
    if (cp_sup_new(cp, &cp->sup))
        goto out;
    char egress_bin[4200], vault_bin[4200], esock[4200], vsock[4200];
    snprintf(esock, sizeof esock, "%s/%s", cp->cfg.state_dir, AL_SOCK_EGRESS);
    snprintf(vsock, sizeof vsock, "%s/%s", cp->cfg.state_dir, AL_SOCK_VAULT);
    bool run_egress = cp->cfg.egress == CP_TRI_ON || (cp->cfg.egress == CP_TRI_AUTO && want_net);
    if (run_egress) {
        if (daemon__bin(cp, egress_bin, sizeof egress_bin, "airlock-egress", true))
            goto out;
        char *eargv[64] = {egress_bin, "--state-dir", cp->cfg.state_dir};
        static char audit_args[1024];
        size_t n = 3;
        n +=
            cp_config_egress_audit_args(&cp->cfg, eargv + n, 63 - n, audit_args, sizeof audit_args);
        /* egress.args last: what the operator gives there wins */
        for (size_t i = 0; i < cp->cfg.egress_args.n && n < 63; i++)
            eargv[n++] = cp->cfg.egress_args.v[i];
        eargv[n] = NULL;
        struct cp_daemon_def d = {.name = "egress",
                                  .path = egress_bin,
                                  .argv = eargv,
                                  .socket = esock,
                                  .health_path = "/v1/health",
                                  .on_ready = daemon__egress_ready};
        if (cp_sup_add(cp->sup, &d) || cp_egress_new(cp, esock, &cp->egress))
            goto out;
        fprintf(stderr, "  egress      airlock-egress (supervised; admin socket %s)\n", esock);
    }
    bool have_vault = daemon__bin(cp, vault_bin, sizeof vault_bin, "airlock-vault", false) == 0;
    if (cp->cfg.vault == CP_TRI_ON && !have_vault) {
        al_error("vault.mode is on but airlock-vault was not found in %s", cp->cfg.bin_path);
        goto out;
    }
    if (have_vault && cp->cfg.vault != CP_TRI_OFF && daemon__vault_init(cp)) {
        if (cp->cfg.vault == CP_TRI_ON)
            goto out;
        have_vault = false;
    }
    if (have_vault && cp->cfg.vault != CP_TRI_OFF) {
        char *vargv[64] = {vault_bin, "--state-dir", cp->cfg.state_dir};
        size_t n = 3;
        /* Roles, unless the operator configured them (vault.args): airlock-egress runs with
         * airlockd's uid, so that uid gets the egress role (fetching values for injection)
         * only for a caller running this very airlock-egress binary (--egress-exe: the
         * vault checks /proc/<pid>/exe of the peer). airlockd itself, and any other program
         * of its uid (a root shell with curl), gets the metadata role (--airlockd-user) and,
         * as root, the admin role: never values. Root can still read the vault's key file;
         * docs/vault.md, "Who may read values", says what this does and does not protect. */
        static char uidarg[32];
        snprintf(uidarg, sizeof uidarg, "%u", (unsigned)geteuid());
        if (cp->cfg.vault_args.n == 0) {
            if (run_egress) {
                vargv[n++] = "--egress-user";
                vargv[n++] = uidarg;
                vargv[n++] = "--egress-exe";
                vargv[n++] = egress_bin;
            }
            vargv[n++] = "--airlockd-user";
            vargv[n++] = uidarg;
        }
        for (size_t i = 0; i < cp->cfg.vault_args.n && n < 63; i++)
            vargv[n++] = cp->cfg.vault_args.v[i];
        vargv[n] = NULL;
        struct cp_daemon_def d = {.name = "vault",
                                  .path = vault_bin,
                                  .argv = vargv,
                                  .socket = vsock,
                                  .health_path = "/v1/health"};
        if (cp_sup_add(cp->sup, &d))
            goto out;
        fprintf(stderr, "  vault       airlock-vault (supervised; socket %s)\n", vsock);
    }

    uv_signal_init(cp->loop, &cp->sig_term);
    uv_signal_init(cp->loop, &cp->sig_int);
    uv_signal_init(cp->loop, &cp->sig_hup);
    cp->sig_term.data = cp->sig_int.data = cp->sig_hup.data = cp;
    uv_signal_start(&cp->sig_term, daemon__on_signal, SIGTERM);
    uv_signal_start(&cp->sig_int, daemon__on_signal, SIGINT);
    uv_signal_start(&cp->sig_hup, daemon__on_signal, SIGHUP);
    cp_policy_reload(cp, "start"); /* the first reading of the policies' history */
    uv_timer_init(cp->loop, &cp->tick);
    cp->tick.data = cp;
    uv_timer_init(cp->loop, &cp->refill);
    cp->refill.data = cp;

    cp_sup_start(cp->sup);
    struct daemon_wait *w = calloc(1, sizeof *w);
    if (!w)
        goto out;
    uv_timer_init(cp->loop, &w->t);
    w->t.data = w;
    w->deadline_ns = al_now_ns() + 15000000000ull;
    uv_timer_start(&w->t, daemon__wait_tick, 0, 20);

    uv_run(cp->loop, UV_RUN_DEFAULT);
    rc = daemon__exit_rc;
out:
    cp_webhooks_close(cp);
    cp_events_close(cp);
    cp_cluster_close(cp);
    cp_cluster_tls_close(cp);
    if (cp->loop) {
        /* Let closing handles finish, then release the loop. */
        uv_run(cp->loop, UV_RUN_NOWAIT);
        if (uv_loop_close(cp->loop) == UV_EBUSY)
            al_debug("some handles were still open at exit");
    }
    cp_vmm_pool_wait(10000);
    if (cp->egress)
        cp_egress_free(cp->egress);
    cp_metrics_free(cp->metrics);
    cp_warm_free(cp);
    cp_auth_free(cp);
    cp_console_free(cp);
    cp_map_free(&cp->sandboxes);
    cp_map_free(&cp->by_token);
    cp_policy_cache_clear();
    cp_store_close(cp->store);
    cp_config_free(&cp->cfg);
    if (lockfd >= 0)
        close(lockfd);
    return rc;
}
