/* controlplane/supervise: see supervise.h. */
#include "supervise.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "store.h"

#define SUP_MAX            4
#define SUP_BACKOFF_MIN_MS 500
#define SUP_BACKOFF_MAX_MS 30000
#define SUP_STOP_GRACE_MS  5000

enum sup_state { SUP_DOWN = 0, SUP_STARTING, SUP_READY, SUP_STOPPING };

struct cp_daemon {
    struct cp_supervisor *sup;
    char name[32];
    char path[4096];
    char **argv;
    char socket[4096];
    char health[128];
    void (*on_ready)(struct cp *cp, struct cp_daemon *d);
    enum sup_state state;
    bool ever_ready;
    bool adopted;
    pid_t pid;
    struct cp_proc_watch watch;
    bool watching;
    uv_timer_t timer; /* probe / restart backoff */
    uint64_t backoff_ms;
    uint64_t ready_ns;
    uint64_t stop_deadline_ns;
    struct al_http_creq *probe;
    unsigned restarts;
};

struct cp_supervisor {
    struct cp *cp;
    struct cp_daemon d[SUP_MAX];
    size_t n;
    bool stopping;
    size_t open_handles; /* timers and process watches not yet closed */
    bool finishing;
    void (*done)(struct cp *cp);
};

int cp_sup_new(struct cp *cp, struct cp_supervisor **out)
{
    struct cp_supervisor *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cp = cp;
    *out = s;
    return 0;
}

int cp_sup_add(struct cp_supervisor *s, const struct cp_daemon_def *def)
{
    if (s->n == SUP_MAX)
        return -E2BIG;
    struct cp_daemon *d = &s->d[s->n];
    memset(d, 0, sizeof *d);
    d->sup = s;
    snprintf(d->name, sizeof d->name, "%s", def->name);
    snprintf(d->path, sizeof d->path, "%s", def->path);
    snprintf(d->socket, sizeof d->socket, "%s", def->socket);
    snprintf(d->health, sizeof d->health, "%s", def->health_path);
    d->on_ready = def->on_ready;
    size_t n = 0;
    while (def->argv[n])
        n++;
    d->argv = calloc(n + 1, sizeof *d->argv);
    if (!d->argv)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        d->argv[i] = strdup(def->argv[i]);
    d->backoff_ms = SUP_BACKOFF_MIN_MS;
    s->open_handles++;
    uv_timer_init(s->cp->loop, &d->timer);
    d->timer.data = d;
    s->n++;
    return 0;
}

static void sup__meta_key(const struct cp_daemon *d, const char *what, char *out, size_t len)
{
    snprintf(out, len, "daemon.%s.%s", d->name, what);
}

static void sup__record(struct cp_daemon *d)
{
    struct cp *cp = d->sup->cp;
    char k[64], v[32];
    sup__meta_key(d, "pid", k, sizeof k);
    snprintf(v, sizeof v, "%d", (int)d->pid);
    cp_store_meta_set(cp->store, k, v, NULL);
    sup__meta_key(d, "start", k, sizeof k);
    snprintf(v, sizeof v, "%llu", (unsigned long long)cp_proc_start_time(d->pid));
    cp_store_meta_set(cp->store, k, v, NULL);
}

static void sup__spawn(struct cp_daemon *d);
static void sup__probe(uv_timer_t *t);

static void sup__release(struct cp_supervisor *s);

static void sup__watch_closed(struct cp_proc_watch *w)
{
    struct cp_daemon *d = w->data;
    sup__release(d->sup);
}

static void sup__maybe_done(struct cp_supervisor *s);

static void sup__restart_tick(uv_timer_t *t)
{
    struct cp_daemon *d = t->data;
    if (d->sup->stopping)
        return;
    sup__spawn(d);
}

static void sup__on_exit(struct cp_proc_watch *w, int wstatus)
{
    struct cp_daemon *d = w->data;
    struct cp_supervisor *s = d->sup;
    char how[128];
    cp_proc_describe(wstatus, how, sizeof how);
    d->watching = false;
    cp_proc_watch_stop(w, sup__watch_closed);
    enum sup_state was = d->state;
    d->state = SUP_DOWN;
    if (s->stopping || was == SUP_STOPPING) {
        al_info("%s (pid %d) %s", d->name, (int)d->pid, how);
        sup__maybe_done(s);
        return;
    }
    /* Back off more if it did not stay up for a minute. */
    if (d->ready_ns && al_now_ns() - d->ready_ns > 60000000000ull)
        d->backoff_ms = SUP_BACKOFF_MIN_MS;
    al_error("airlock-%s (pid %d) %s; restarting it in %.1f s", d->name, (int)d->pid, how,
             (double)d->backoff_ms / 1000.0);
    d->restarts++;
    uv_timer_start(&d->timer, sup__restart_tick, d->backoff_ms, 0);
    d->backoff_ms = d->backoff_ms * 2 > SUP_BACKOFF_MAX_MS ? SUP_BACKOFF_MAX_MS : d->backoff_ms * 2;
}

static int sup__watch(struct cp_daemon *d, int pidfd)
{
    d->watch.data = d;
    int rc = cp_proc_watch_start(d->sup->cp->loop, &d->watch, d->pid, pidfd, sup__on_exit);
    if (rc == 0) {
        d->watching = true;
        d->sup->open_handles++;
    }
    return rc;
}

static void sup__spawn(struct cp_daemon *d)
{
    struct cp *cp = d->sup->cp;
    struct al_spawn sp = {
        .path = d->path, .argv = d->argv, .fds = {-1, 2, 2}, .nfds = 3, .new_session = true};
    int pidfd;
    struct al_error err = {0};
    if (al_spawn(&sp, &d->pid, &pidfd, &err)) {
        al_error("%s: %s; retrying in %.1f s", d->name, al_error_str(&err),
                 (double)d->backoff_ms / 1000.0);
        uv_timer_start(&d->timer, sup__restart_tick, d->backoff_ms, 0);
        d->backoff_ms =
            d->backoff_ms * 2 > SUP_BACKOFF_MAX_MS ? SUP_BACKOFF_MAX_MS : d->backoff_ms * 2;
        return;
    }
    d->adopted = false;
    d->state = SUP_STARTING;
    d->ready_ns = 0;
    sup__record(d);
    if (sup__watch(d, pidfd))
        close(pidfd);
    al_info("started airlock-%s (pid %d)", d->name, (int)d->pid);
    uv_timer_start(&d->timer, sup__probe, 20, 50);
    (void)cp;
}

static int sup__probe_resp(struct al_http_creq *c, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    struct cp_daemon *d = arg;
    (void)c;
    (void)h;
    (void)n;
    if (d->state == SUP_STARTING && status >= 200 && status < 300) {
        d->state = SUP_READY;
        d->ever_ready = true;
        d->ready_ns = al_now_ns();
        uv_timer_stop(&d->timer);
        al_info("airlock-%s is ready (pid %d%s)", d->name, (int)d->pid,
                d->adopted ? ", adopted" : "");
        if (d->on_ready)
            d->on_ready(d->sup->cp, d);
    }
    return 0;
}

static void sup__probe_done(struct al_http_creq *c, int err, void *arg)
{
    struct cp_daemon *d = arg;
    (void)c;
    (void)err;
    d->probe = NULL;
}

static void sup__probe(uv_timer_t *t)
{
    struct cp_daemon *d = t->data;
    if (d->state != SUP_STARTING || d->probe)
        return;
    char target[4200];
    snprintf(target, sizeof target, "unix:%s", d->socket);
    struct al_http_creq_opts o = {.target = target,
                                  .method = "GET",
                                  .path = d->health,
                                  .timeout_ms = 2000,
                                  .on_response = sup__probe_resp,
                                  .on_done = sup__probe_done,
                                  .arg = d};
    if (al_http_creq_start(d->sup->cp->loop, &o, &d->probe))
        d->probe = NULL;
}

/* A daemon a previous airlockd started may still run: adopt it if its recorded pid is
 * still that process. */
static bool sup__adopt(struct cp_daemon *d)
{
    struct cp *cp = d->sup->cp;
    char k[64], v[32];
    sup__meta_key(d, "pid", k, sizeof k);
    if (cp_store_meta_get(cp->store, k, v, sizeof v))
        return false;
    pid_t pid = (pid_t)atoi(v);
    sup__meta_key(d, "start", k, sizeof k);
    if (cp_store_meta_get(cp->store, k, v, sizeof v))
        return false;
    uint64_t start = strtoull(v, NULL, 10);
    int pidfd;
    if (pid <= 0 || !start || cp_proc_open(pid, start, &pidfd))
        return false;
    d->pid = pid;
    d->adopted = true;
    d->state = SUP_STARTING;
    if (sup__watch(d, pidfd)) {
        close(pidfd);
        return false;
    }
    al_info("found airlock-%s still running (pid %d): adopting it", d->name, (int)pid);
    uv_timer_start(&d->timer, sup__probe, 0, 50);
    return true;
}

void cp_sup_start(struct cp_supervisor *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (!sup__adopt(&s->d[i]))
            sup__spawn(&s->d[i]);
    }
}

bool cp_sup_all_ready(const struct cp_supervisor *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (!s->d[i].ever_ready)
            return false;
    return true;
}

bool cp_sup_ready(const struct cp_supervisor *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->d[i].name, name) == 0)
            return s->d[i].state == SUP_READY;
    return false;
}

/* ---- stop ------------------------------------------------------------------------------ */

/* Frees the supervisor once it is finishing and its last handle is closed. */
static void sup__release(struct cp_supervisor *s)
{
    if (--s->open_handles > 0 || !s->finishing)
        return;
    void (*done)(struct cp *) = s->done;
    struct cp *cp = s->cp;
    for (size_t i = 0; i < s->n; i++) {
        for (char **a = s->d[i].argv; a && *a; a++)
            free(*a);
        free(s->d[i].argv);
    }
    free(s);
    if (done)
        done(cp);
}

static void sup__timer_closed(uv_handle_t *h)
{
    struct cp_daemon *d = h->data;
    sup__release(d->sup);
}

static void sup__finish(struct cp_supervisor *s)
{
    s->finishing = true;
    if (!s->open_handles) {
        s->open_handles = 1;
        sup__release(s);
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        struct cp_daemon *d = &s->d[i];
        if (d->watching) {
            d->watching = false;
            cp_proc_watch_stop(&d->watch, sup__watch_closed);
        }
        uv_close((uv_handle_t *)&d->timer, sup__timer_closed);
    }
}

static void sup__maybe_done(struct cp_supervisor *s)
{
    if (!s->stopping)
        return;
    for (size_t i = 0; i < s->n; i++)
        if (s->d[i].watching)
            return;
    sup__finish(s);
}

static void sup__kill_tick(uv_timer_t *t)
{
    struct cp_daemon *d = t->data;
    if (d->watching && al_now_ns() > d->stop_deadline_ns) {
        al_warn("airlock-%s (pid %d) did not stop within %d s: SIGKILL", d->name, (int)d->pid,
                SUP_STOP_GRACE_MS / 1000);
        cp_proc_signal(d->watch.pidfd, SIGKILL);
        uv_timer_stop(t);
    }
}

void cp_sup_stop(struct cp_supervisor *s, bool keep, void (*done)(struct cp *cp))
{
    s->stopping = true;
    s->done = done;
    for (size_t i = 0; i < s->n; i++) {
        struct cp_daemon *d = &s->d[i];
        uv_timer_stop(&d->timer);
        if (d->probe)
            al_http_creq_cancel(d->probe); /* its on_done clears d->probe */
        if (keep || !d->watching)
            continue;
        al_info("stopping airlock-%s (pid %d)", d->name, (int)d->pid);
        d->state = SUP_STOPPING;
        cp_proc_signal(d->watch.pidfd, SIGTERM);
        d->stop_deadline_ns = al_now_ns() + SUP_STOP_GRACE_MS * 1000000ull;
        uv_timer_start(&d->timer, sup__kill_tick, 100, 100);
    }
    if (keep) {
        for (size_t i = 0; i < s->n; i++)
            if (s->d[i].watching)
                al_info("leaving airlock-%s (pid %d) running for the next airlockd", s->d[i].name,
                        (int)s->d[i].pid);
        sup__finish(s);
        return;
    }
    sup__maybe_done(s);
}
