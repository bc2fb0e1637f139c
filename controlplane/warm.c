/* controlplane/warm: see warm.h.
 *
 * A pool (struct warm_pool) per template name as creations send it; its entries (struct
 * warm_sb) are STARTING (network, then airlock-vmm until the agent is healthy) or READY
 * (watched: a warm sandbox whose process ends is torn down and replaced). An entry leaves
 * its pool when a creation takes it, when it turns out stale (the template's default version
 * moved on), when it dies, or at the stop; every way out but the claim ends in
 * cp_lifecycle_discard (backend, network, record).
 */
#include "warm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "common/cleanup.h"
#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "jcall.h"
#include "store.h"
#include "templates.h"

/* One warm start at a time: each costs a few milliseconds of CPU, and the pools refill in
 * the background, never at the expense of a creation. */
#define WARM_STARTS_MAX 1
/* What a warm sandbox holds outside its cgroups (airlock-vmm, the namespace and interface
 * of its network; docs/operations.md, "Warm sandboxes"), and what a start is assumed to take
 * before the first warm sandbox has been measured. */
#define WARM_OVERHEAD_BYTES (1u << 20)
#define WARM_GUESS_BYTES    (4u << 20)
/* A pool whose start failed waits this long before the next attempt. */
#define WARM_RETRY_NS        (10ull * 1000000000ull)
#define WARM_INIT_TIMEOUT_MS 5000

enum warm_state { WARM_STARTING = 0, WARM_READY };

struct warm_pool;

struct warm_sb {
    struct warm_pool *pool;
    struct cp_sandbox *sb; /* referenced while in the pool */
    enum warm_state state;
    char template_dir[4096];
    json_t *template_env; /* template.json's env (the claim's envVars go over it) */
    uint64_t t0_ns;
    uint64_t mem_bytes; /* its cgroups' memory once measured, else 0 */
    bool watching;
    struct cp_proc_watch watch; /* READY: a duplicate of the sandbox's pidfd */
    uv_work_t work;
    int work_rc;
    struct al_error work_err;
    struct warm_sb *next;
};

struct warm_pool {
    char name[CP_TEMPLATE_MAX];
    int64_t min, max;
    bool listed; /* named in sandboxes.warm.templates (else the default pair) */
    struct warm_sb *list;
    size_t n_ready, n_starting;
    struct cp_warm_demand demand;
    uint64_t retry_ns;
    char last_error[256];
    /* metrics */
    uint64_t claims_warm, claims_cold, started, start_failed;
    double refill_ms_sum;
    struct warm_pool *next;
};

struct cp_warm {
    struct cp *cp;
    struct warm_pool *pools;
    size_t n_starting; /* all pools */
    size_t n_alive;    /* entries not yet torn down (in a pool or being discarded) */
    bool stopping;
    void (*stop_done)(struct cp *cp);
};

/* ---- configuration ----------------------------------------------------------------------- */

static int warm__count(const char *s, const char *what, int64_t *out, struct al_error *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || end == s || *end || errno || v < 0 || v > 4096)
        return al_error_set(err, -EINVAL,
                            "sandboxes.warm.templates: \"%s\": the %s must be a number from 0 to "
                            "4096",
                            what, s);
    *out = v;
    return 0;
}

int cp_warm_parse_entry(const char *s, char *name, size_t nlen, int64_t *min, int64_t *max,
                        struct al_error *err)
{
    const char *eq = strchr(s, '=');
    if (!eq || eq == s || (size_t)(eq - s) >= nlen)
        return al_error_set(err, -EINVAL,
                            "sandboxes.warm.templates: \"%.200s\" is not NAME=MIN..MAX or NAME=N "
                            "(e.g. \"base=2..8\")",
                            s);
    memcpy(name, s, (size_t)(eq - s));
    name[eq - s] = 0;
    if (!cp_template_ref_valid(name))
        return al_error_set(err, -EINVAL,
                            "sandboxes.warm.templates: \"%s\" is not a template name (NAME or "
                            "NAME:TAG, as creations name it)",
                            name);
    const char *r = eq + 1, *dots = strstr(r, "..");
    char lo[32], hi[32];
    if (dots) {
        if ((size_t)(dots - r) >= sizeof lo || strlen(dots + 2) >= sizeof hi)
            return al_error_set(err, -EINVAL, "sandboxes.warm.templates: \"%.200s\": bad range", s);
        memcpy(lo, r, (size_t)(dots - r));
        lo[dots - r] = 0;
        snprintf(hi, sizeof hi, "%s", dots + 2);
    } else {
        if (strlen(r) >= sizeof lo)
            return al_error_set(err, -EINVAL, "sandboxes.warm.templates: \"%.200s\": bad count", s);
        snprintf(lo, sizeof lo, "%s", r);
        snprintf(hi, sizeof hi, "%s", r);
    }
    int rc = warm__count(lo, "minimum", min, err);
    if (rc == 0)
        rc = warm__count(hi, "maximum", max, err);
    if (rc == 0 && *min > *max)
        rc = al_error_set(err, -EINVAL,
                          "sandboxes.warm.templates: \"%.200s\": the minimum is above the maximum",
                          s);
    return rc;
}

static struct warm_pool *warm__pool_add(struct cp_warm *w, const char *name, int64_t min,
                                        int64_t max, bool listed)
{
    struct warm_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->min = min;
    p->max = max;
    p->listed = listed;
    p->next = w->pools;
    w->pools = p;
    return p;
}

static struct warm_pool *warm__pool(struct cp_warm *w, const char *name)
{
    for (struct warm_pool *p = w->pools; p; p = p->next)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

static bool warm__jail(const struct cp *cp)
{
    /* kvm sandboxes get their network (a tap) and snapshot at their start: not warmed yet;
     * the test backend has no isolation to warm. */
    return strcmp(cp->backend_kind, "jail") == 0;
}

int cp_warm_init(struct cp *cp, struct al_error *err)
{
    struct cp_warm *w = calloc(1, sizeof *w);
    if (!w)
        return al_error_set(err, -ENOMEM, "out of memory");
    w->cp = cp;
    cp->warm = w;
    const struct al_cfg_strlist *l = &cp->cfg.warm_templates;
    for (size_t i = 0; i < l->n; i++) {
        char name[CP_TEMPLATE_MAX];
        int64_t min, max;
        int rc = cp_warm_parse_entry(l->v[i], name, sizeof name, &min, &max, err);
        if (rc)
            return rc;
        if (warm__pool(w, name))
            return al_error_set(err, -EINVAL, "sandboxes.warm.templates: %s is listed twice", name);
        if (!warm__pool_add(w, name, min, max, true))
            return al_error_set(err, -ENOMEM, "out of memory");
    }
    bool any = cp->cfg.warm_max > 0;
    for (struct warm_pool *p = w->pools; p; p = p->next)
        any |= p->max > 0;
    if (any && !warm__jail(cp))
        al_warn("sandboxes.warm: warm sandboxes are made for the jail backend only; this "
                "airlockd uses %s: none are started",
                cp->backend_kind);
    else if (any && cp->cfg.warm_memory_bytes == 0)
        al_warn("sandboxes.warm.memory is 0: no warm sandbox fits, none are started");
    return 0;
}

/* ---- demand ------------------------------------------------------------------------------- */

void cp_warm_demand_burst_end(struct cp_warm_demand *d, uint64_t now)
{
    if (!d->current)
        return;
    d->n[d->head] = d->current;
    d->end_ns[d->head] = now;
    d->head = (d->head + 1) % CP_WARM_BURSTS;
    d->current = 0;
}

size_t cp_warm_demand_target(const struct cp_warm_demand *d, uint64_t now, uint64_t window_ns,
                             int64_t min, int64_t max)
{
    int64_t peak = d->current;
    for (size_t i = 0; i < CP_WARM_BURSTS; i++)
        if (d->n[i] && now - d->end_ns[i] <= window_ns && d->n[i] > peak)
            peak = d->n[i];
    return (size_t)AL_MAX(AL_MIN(AL_MAX(peak, min), max), 0);
}

/* How many warm sandboxes the pool keeps now. */
static size_t warm__target(const struct cp *cp, const struct warm_pool *p, uint64_t now)
{
    return cp_warm_demand_target(&p->demand, now, cp->cfg.warm_window_ms * 1000000ull, p->min,
                                 p->max);
}

/* The host memory the warm sandboxes hold, and what one more would add. */
static void warm__memory(const struct cp_warm *w, uint64_t *used, uint64_t *one)
{
    uint64_t sum = 0, measured = 0, n_measured = 0;
    for (const struct warm_pool *p = w->pools; p; p = p->next)
        for (const struct warm_sb *e = p->list; e; e = e->next)
            if (e->mem_bytes) {
                measured += e->mem_bytes;
                n_measured++;
            }
    uint64_t each = n_measured ? AL_MAX(measured / n_measured, (uint64_t)1) : WARM_GUESS_BYTES;
    for (const struct warm_pool *p = w->pools; p; p = p->next)
        for (const struct warm_sb *e = p->list; e; e = e->next)
            sum += (e->mem_bytes ? e->mem_bytes : each) + WARM_OVERHEAD_BYTES;
    *used = sum;
    *one = each + WARM_OVERHEAD_BYTES;
}

/* ---- leaving the pool ------------------------------------------------------------------- */

static void warm__stop_done_maybe(struct cp_warm *w)
{
    if (!w->stopping || w->n_alive || !w->stop_done)
        return;
    void (*done)(struct cp *) = w->stop_done;
    w->stop_done = NULL;
    done(w->cp);
}

static void warm__unlink(struct warm_sb *e)
{
    struct warm_pool *p = e->pool;
    for (struct warm_sb **pp = &p->list; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    if (e->state == WARM_READY)
        p->n_ready--;
    e->next = NULL;
}

static void warm__watch_closed(struct cp_proc_watch *wt)
{
    struct warm_sb *e = wt->data;
    json_decref(e->template_env);
    free(e);
}

/* Frees the entry (its sandbox has been handed on or torn down). */
static void warm__entry_free(struct warm_sb *e)
{
    e->sb = NULL;
    if (e->watching) {
        e->watching = false;
        cp_proc_watch_stop(&e->watch, warm__watch_closed);
        return;
    }
    json_decref(e->template_env);
    free(e);
}

static void warm__discarded(struct cp_sandbox *sb, void *arg)
{
    struct cp_warm *w = arg;
    (void)sb;
    w->n_alive--;
    warm__stop_done_maybe(w);
    cp_warm_refill(w->cp); /* its place may be taken again */
}

/* Out of the pool and torn down. */
static void warm__discard(struct warm_sb *e, const char *why)
{
    struct cp_warm *w = e->sb->cp->warm;
    struct cp_sandbox *sb = e->sb;
    warm__unlink(e);
    sb->warm = NULL;
    al_info("warm sandbox %s (template %s): torn down: %s", sb->rec.id, e->pool->name, why);
    warm__entry_free(e);
    cp_lifecycle_discard(sb, warm__discarded, w);
    cp_sb_unref(sb); /* the pool's reference (the teardown holds its own) */
}

static void warm__exited(struct cp_proc_watch *wt, int wstatus)
{
    struct warm_sb *e = wt->data;
    char how[128];
    cp_proc_describe(wstatus, how, sizeof how);
    e->sb->gone = true;
    /* (the watch's pidfd goes with the entry; the sandbox's own is closed by the teardown) */
    warm__discard(e, how);
}

/* ---- starting ----------------------------------------------------------------------------- */

/* The measured memory of a warm sandbox (it may have been claimed meanwhile). */
static void warm__stats(struct cp_sandbox *sb, int rc, json_t *stats, void *arg)
{
    (void)arg;
    struct warm_sb *e = sb->warm;
    if (rc || !stats || !e)
        return;
    json_int_t m = json_integer_value(json_object_get(stats, "memory_bytes"));
    if (m > 0)
        e->mem_bytes = (uint64_t)m;
}

static void warm__started(struct cp_sandbox *sb, int rc, const char *msg)
{
    struct cp *cp = sb->cp;
    struct cp_warm *w = cp->warm;
    struct warm_sb *e = sb->warm;
    struct warm_pool *p = e->pool;
    w->n_starting--;
    p->n_starting--;
    if (rc) {
        p->start_failed++;
        p->retry_ns = al_now_ns() + WARM_RETRY_NS;
        snprintf(p->last_error, sizeof p->last_error, "%s", msg && *msg ? msg : strerror(-rc));
        al_warn("warm sandbox %s (template %s) did not start: %s (next attempt in %llu s)",
                sb->rec.id, p->name, p->last_error,
                (unsigned long long)(WARM_RETRY_NS / 1000000000ull));
        sb->warm = NULL;
        warm__discard(e, "its start failed");
        return;
    }
    sb->started = true;
    e->state = WARM_READY;
    p->n_ready++;
    p->started++;
    double ms = (double)(al_now_ns() - e->t0_ns) / 1e6;
    p->refill_ms_sum += ms;
    al_debug("warm sandbox %s (template %s) ready in %.1f ms", sb->rec.id, p->name, ms);
    int fd = fcntl(sb->pidfd, F_DUPFD_CLOEXEC, 0);
    e->watch.data = e;
    if (fd < 0 || cp_proc_watch_start(cp->loop, &e->watch, sb->rec.pid, fd, warm__exited)) {
        if (fd >= 0)
            close(fd);
        warm__discard(e, "it cannot be watched");
        return;
    }
    e->watching = true;
    if (w->stopping) {
        warm__discard(e, "airlockd is stopping");
        return;
    }
    if (cp->backend->stats)
        cp->backend->stats(sb, warm__stats, NULL);
    cp_warm_refill(cp);
}

static void warm__start_backend(struct warm_sb *e)
{
    struct cp_sandbox *sb = e->sb;
    struct cp *cp = sb->cp;
    struct cp_start_args a = {
        .template_dir = e->template_dir,
        .template_name = sb->rec.template_id,
        .env_vars = NULL, /* the template's only: the agent reads those from template.json */
        .netns_fd = sb->has_net ? sb->net.netns_fd : -1,
        .tap_fd = -1,
        .dns = sb->has_net && sb->net.gateway[0] ? sb->net.gateway : NULL,
        .warm = true,
    };
    sb->backend_attempted = true;
    int rc = cp->backend->start(sb, &a, warm__started);
    if (sb->net.netns_fd >= 0) {
        close(sb->net.netns_fd);
        sb->net.netns_fd = -1;
    }
    if (rc)
        warm__started(sb, rc, "cannot start it");
}

static void warm__net_work(uv_work_t *wk)
{
    struct warm_sb *e = wk->data;
    struct cp_sandbox *sb = e->sb;
    struct cp *cp = sb->cp;
    e->work_rc = cp->net->acquire(cp->net_priv, sb->rec.seq, sb->rec.id, &sb->net, &e->work_err);
}

static void warm__net_done(uv_work_t *wk, int status)
{
    struct warm_sb *e = wk->data;
    struct cp_sandbox *sb = e->sb;
    if (status || e->work_rc) {
        warm__started(sb, -EAGAIN, status ? uv_strerror(status) : al_error_str(&e->work_err));
        return;
    }
    sb->has_net = true;
    snprintf(sb->rec.addr, sizeof sb->rec.addr, "%s", sb->net.addr);
    cp_sb_save(sb);
    if (sb->cp->warm->stopping) {
        warm__started(sb, -ECANCELED, "airlockd is stopping");
        return;
    }
    warm__start_backend(e);
}

/* The template's env (the claim's envVars go over it), or NULL with *why set when the
 * template cannot be warmed. */
static json_t *warm__template_env(const char *dir, const char **why)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/template.json", dir);
    struct al_error err = {0};
    json_t *t = al_json_load_file(p, &err);
    if (!t) {
        static char msg[300];
        snprintf(msg, sizeof msg, "%s", al_error_str(&err));
        *why = msg;
        return NULL;
    }
    json_t *env = json_object_get(t, "env");
    json_t *out = json_is_object(env) ? json_deep_copy(env) : json_object();
    json_decref(t);
    return out;
}

/* Starts one warm sandbox of pool p from the template version in dir. */
static int warm__start(struct cp_warm *w, struct warm_pool *p, const char *dir, const char *build)
{
    struct cp *cp = w->cp;
    struct al_error err = {0};
    const char *why = NULL;
    json_t *env = warm__template_env(dir, &why);
    if (!env) {
        if (why && strcmp(p->last_error, why) != 0)
            al_warn("warm sandboxes of %s: %s", p->name, why);
        snprintf(p->last_error, sizeof p->last_error, "%s", why ? why : "out of memory");
        return -ENOTSUP;
    }
    struct warm_sb *e = calloc(1, sizeof *e);
    struct cp_sandbox *sb = e ? cp_sb_new(cp) : NULL;
    if (!sb) {
        free(e);
        json_decref(env);
        return -ENOMEM;
    }
    e->pool = p;
    e->sb = sb;
    e->t0_ns = al_now_ns();
    snprintf(e->template_dir, sizeof e->template_dir, "%s", dir);
    e->template_env = env;
    sb->warm = e;
    struct cp_sb_record *r = &sb->rec;
    do {
        cp_sandbox_id_new(r->id);
    } while (cp_sandbox_get(cp, r->id) || cp_warm_has_id(cp, r->id));
    if (cp_store_next_seq(cp->store, &r->seq, &err)) {
        al_warn("warm sandbox: %s", al_error_str(&err));
        sb->warm = NULL;
        json_decref(e->template_env);
        free(e);
        cp_sb_unref(sb);
        return -EIO;
    }
    r->state = CP_SB_CREATING;
    snprintf(r->template_id, sizeof r->template_id, "%s", p->name);
    snprintf(r->template_build, sizeof r->template_build, "%s", build);
    snprintf(r->backend, sizeof r->backend, "%s", cp->backend_kind);
    r->created_ns = al_wall_ns();
    r->cpu_count = (int)cp->cfg.cpu_count;
    r->memory_mb = (int)(cp->cfg.memory_bytes >> 20);
    r->disk_mb = (int)(cp->cfg.disk_bytes >> 20);
    if (cp_store_sb_save(cp->store, r, &err)) {
        al_warn("warm sandbox %s: cannot record it: %s", r->id, al_error_str(&err));
        sb->warm = NULL;
        json_decref(e->template_env);
        free(e);
        cp_sb_unref(sb);
        return -EIO;
    }
    e->next = p->list;
    p->list = e;
    p->n_starting++;
    w->n_starting++;
    w->n_alive++;
    if (!cp->net) {
        warm__start_backend(e);
        return 0;
    }
    e->work.data = e;
    int rc = uv_queue_work(cp->loop, &e->work, warm__net_work, warm__net_done);
    if (rc)
        warm__started(sb, -EIO, uv_strerror(rc));
    return 0;
}

/* Templates the default pair applies to get a pool the first time they are seen. */
static int warm__each_template(const char *id, const char *dir, void *arg)
{
    struct cp_warm *w = arg;
    (void)dir;
    if (!warm__pool(w, id))
        warm__pool_add(w, id, w->cp->cfg.warm_min, w->cp->cfg.warm_max, false);
    return 0;
}

/* Tears down ready warm sandboxes of p that are not of dir (the template moved on). */
static void warm__drop_stale(struct warm_pool *p, const char *dir)
{
    struct warm_sb *e = p->list, *n;
    for (; e; e = n) {
        n = e->next;
        if (e->state == WARM_READY && strcmp(e->template_dir, dir) != 0)
            warm__discard(e, "its template has a new version");
    }
}

void cp_warm_refill(struct cp *cp)
{
    struct cp_warm *w = cp->warm;
    if (!w || w->stopping || cp->stopping || !warm__jail(cp) || !cp->cfg.warm_memory_bytes)
        return;
    if (cp->n_creating > 0)
        return; /* a burst is under way: it has the CPU */
    uint64_t now = al_now_ns();
    if (cp->cfg.warm_max > 0)
        cp_templates_foreach(cp, warm__each_template, w);
    for (struct warm_pool *p = w->pools; p; p = p->next)
        cp_warm_demand_burst_end(&p->demand, now);
    for (struct warm_pool *p = w->pools; p && w->n_starting < WARM_STARTS_MAX; p = p->next) {
        size_t target = warm__target(cp, p, now);
        if (p->n_ready + p->n_starting >= target || now < p->retry_ns)
            continue;
        char dir[4096], build[40];
        struct al_error err = {0};
        if (cp_template_resolve_build(cp, p->name, dir, sizeof dir, build, sizeof build, &err)) {
            if (!p->retry_ns || strcmp(p->last_error, al_error_str(&err)) != 0)
                al_warn("warm sandboxes of %s: %s", p->name, al_error_str(&err));
            snprintf(p->last_error, sizeof p->last_error, "%s", al_error_str(&err));
            p->retry_ns = now + WARM_RETRY_NS;
            continue;
        }
        warm__drop_stale(p, dir);
        uint64_t used, one;
        warm__memory(w, &used, &one);
        if (used + one > cp->cfg.warm_memory_bytes) {
            al_debug("warm sandboxes of %s: %zu of %zu, the memory budget is used (%llu of %llu "
                     "bytes)",
                     p->name, p->n_ready + p->n_starting, target, (unsigned long long)used,
                     (unsigned long long)cp->cfg.warm_memory_bytes);
            break;
        }
        if (warm__start(w, p, dir, build) < 0)
            p->retry_ns = now + WARM_RETRY_NS;
    }
}

bool cp_warm_below_half(struct cp *cp)
{
    struct cp_warm *w = cp->warm;
    if (!w || !warm__jail(cp))
        return false;
    uint64_t now = al_now_ns();
    for (struct warm_pool *p = w->pools; p; p = p->next)
        if (2 * (p->n_ready + p->n_starting) < warm__target(cp, p, now))
            return true;
    return false;
}

/* ---- the claim -------------------------------------------------------------------------- */

bool cp_warm_has_id(struct cp *cp, const char *id)
{
    if (!cp->warm)
        return false;
    for (struct warm_pool *p = cp->warm->pools; p; p = p->next)
        for (struct warm_sb *e = p->list; e; e = e->next)
            if (e->sb && strcmp(e->sb->rec.id, id) == 0)
                return true;
    return false;
}

const char *cp_warm_peek(struct cp *cp, const char *template_id, const char *template_dir)
{
    struct cp_warm *w = cp->warm;
    struct warm_pool *p = w ? warm__pool(w, template_id) : NULL;
    if (!p)
        return NULL;
    p->demand.current++;
    warm__drop_stale(p, template_dir);
    for (struct warm_sb *e = p->list; e; e = e->next)
        if (e->state == WARM_READY)
            return e->sb->rec.id;
    return NULL;
}

size_t cp_warm_ready(const struct cp *cp, const char *template_id)
{
    struct warm_pool *p = cp->warm ? warm__pool(cp->warm, template_id) : NULL;
    return p ? p->n_ready : 0;
}

struct cp_sandbox *cp_warm_take(struct cp *cp, const char *id)
{
    struct cp_warm *w = cp->warm;
    for (struct warm_pool *p = w ? w->pools : NULL; p; p = p->next)
        for (struct warm_sb *e = p->list; e; e = e->next) {
            if (e->state != WARM_READY || strcmp(e->sb->rec.id, id) != 0)
                continue;
            struct cp_sandbox *sb = e->sb;
            warm__unlink(e);
            w->n_alive--;
            /* The creation owns it now (the pool's reference is its), and watches it once
             * created; its claim needs only the template's env. */
            sb->warm = NULL;
            sb->warm_taken = true;
            sb->warm_env = e->template_env;
            e->template_env = NULL;
            warm__entry_free(e);
            return sb;
        }
    return NULL;
}

struct warm_claim {
    struct cp_sandbox *sb;
    cp_backend_cb cb;
    uint64_t t0_ns;
};

static void warm__claimed(int status, json_t *body, const char *err, void *arg)
{
    struct warm_claim *x = arg;
    struct cp_sandbox *sb = x->sb;
    char msg[400] = "";
    int rc = 0;
    if (status < 0) {
        snprintf(msg, sizeof msg, "its agent did not take its identity: %s", err);
        rc = -EIO;
    } else if (status != 204 && status != 200) {
        const char *m = json_string_value(json_object_get(body, "message"));
        snprintf(msg, sizeof msg, "its agent refused its identity (HTTP %d: %.200s)", status,
                 m ? m : "no message");
        rc = -EIO;
    }
    if (rc == 0) {
        sb->warm_claimed = true;
        al_debug("sandbox %s: warm sandbox claimed in %.1f ms", sb->rec.id,
                 (double)(al_now_ns() - x->t0_ns) / 1e6);
    }
    cp_backend_cb cb = x->cb;
    free(x);
    cb(sb, rc, msg);
    cp_sb_unref(sb);
}

int cp_warm_claim(struct cp_sandbox *sb, const struct cp_start_args *a, cp_backend_cb cb)
{
    struct cp *cp = sb->cp;
    if (!sb->warm_taken || !sb->agent_sock[0])
        return -EINVAL;
    json_t *env = sb->warm_env ? json_deep_copy(sb->warm_env) : json_object();
    if (a->env_vars)
        json_object_update(env, a->env_vars);
    json_t *init = json_pack("{s:o,s:s}", "envVars", env, "accessToken", sb->rec.token);
    if (!init)
        return -ENOMEM;
    if (a->ca_cert_pem)
        json_object_set_new(init, "caCertPem", json_string(a->ca_cert_pem));
    /* What a restored KVM guest is given: its wall clock and fresh entropy. */
    uint64_t now = al_wall_ns();
    char ts[AL_TIME_FORMAT_MAX];
    al_time_format(ts, sizeof ts, (int64_t)(now / 1000000000ull), (long)(now % 1000000000ull),
                   AL_TIME_RFC3339_NS);
    json_object_set_new(init, "timestamp", json_string(ts));
    unsigned char seed[32];
    char seed64[sodium_base64_ENCODED_LEN(sizeof seed, sodium_base64_VARIANT_ORIGINAL)];
    randombytes_buf(seed, sizeof seed);
    sodium_bin2base64(seed64, sizeof seed64, seed, sizeof seed, sodium_base64_VARIANT_ORIGINAL);
    sodium_memzero(seed, sizeof seed);
    json_object_set_new(init, "seed", json_string(seed64));
    sodium_memzero(seed64, sizeof seed64);
    struct warm_claim *x = calloc(1, sizeof *x);
    if (!x) {
        json_decref(init);
        return -ENOMEM;
    }
    x->sb = sb;
    x->cb = cb;
    x->t0_ns = al_now_ns();
    char target[160];
    snprintf(target, sizeof target, "unix:%s", sb->agent_sock);
    /* The agent has no token yet: the first init sets it (and only its holder may send
     * another). Only airlockd reaches the agent's channel. */
    struct cp_jcall_opts o = {
        .target = target,
        .method = "POST",
        .path = "/init",
        .body = init,
        .timeout_ms = WARM_INIT_TIMEOUT_MS,
        .max_answer = 64 * 1024,
        .wipe = true,
        .pool = cp->pool,
        .done = warm__claimed,
        .arg = x,
    };
    cp_sb_ref(sb);
    int rc = cp_jcall(cp->loop, &o);
    /* (the env values are borrowed from the creation, which wipes them; the copies here go
     * with the object) */
    json_decref(init);
    if (rc) {
        cp_sb_unref(sb);
        free(x);
        return rc;
    }
    sb->start_how = "(warm sandbox claimed)";
    return 0;
}

void cp_warm_created(struct cp_sandbox *sb)
{
    struct cp_warm *w = sb->cp->warm;
    struct warm_pool *p = w ? warm__pool(w, sb->rec.template_id) : NULL;
    if (p && sb->warm_claimed)
        p->claims_warm++;
    else if (p)
        p->claims_cold++;
}

/* ---- metrics ------------------------------------------------------------------------------ */

void cp_warm_metrics(struct cp *cp, struct al_buf *b)
{
    struct cp_warm *w = cp->warm;
    if (!w)
        return;
    uint64_t now = al_now_ns();
    al_buf_printf(b, "# HELP airlock_warm_claims_total Creations of a template with warm "
                     "sandboxes configured, by how they were served: a warm sandbox claimed, "
                     "or started cold (none was ready).\n"
                     "# TYPE airlock_warm_claims_total counter\n");
    for (struct warm_pool *p = w->pools; p; p = p->next)
        if (p->max > 0 || p->claims_warm || p->claims_cold)
            al_buf_printf(b,
                          "airlock_warm_claims_total{template=\"%s\",how=\"warm\"} %llu\n"
                          "airlock_warm_claims_total{template=\"%s\",how=\"cold\"} %llu\n",
                          p->name, (unsigned long long)p->claims_warm, p->name,
                          (unsigned long long)p->claims_cold);
    al_buf_printf(b, "# HELP airlock_warm_sandboxes Warm sandboxes by template and state "
                     "(ready: claimable; starting) and the number the pool aims at "
                     "(target: the demand seen, within sandboxes.warm's minimum and "
                     "maximum).\n# TYPE airlock_warm_sandboxes gauge\n");
    for (struct warm_pool *p = w->pools; p; p = p->next)
        if (p->max > 0)
            al_buf_printf(b,
                          "airlock_warm_sandboxes{template=\"%s\",state=\"ready\"} %zu\n"
                          "airlock_warm_sandboxes{template=\"%s\",state=\"starting\"} %zu\n"
                          "airlock_warm_sandboxes{template=\"%s\",state=\"target\"} %zu\n",
                          p->name, p->n_ready, p->name, p->n_starting, p->name,
                          warm__target(cp, p, now));
    al_buf_printf(b, "# HELP airlock_warm_starts_total Warm sandboxes started (ok) or that "
                     "failed to start, and the seconds their starts took in all (refill "
                     "time).\n# TYPE airlock_warm_starts_total counter\n");
    for (struct warm_pool *p = w->pools; p; p = p->next)
        if (p->max > 0)
            al_buf_printf(b,
                          "airlock_warm_starts_total{template=\"%s\",result=\"ok\"} %llu\n"
                          "airlock_warm_starts_total{template=\"%s\",result=\"failed\"} %llu\n",
                          p->name, (unsigned long long)p->started, p->name,
                          (unsigned long long)p->start_failed);
    al_buf_printf(b, "# TYPE airlock_warm_start_seconds_total counter\n");
    for (struct warm_pool *p = w->pools; p; p = p->next)
        if (p->max > 0)
            al_buf_printf(b, "airlock_warm_start_seconds_total{template=\"%s\"} %.6f\n", p->name,
                          p->refill_ms_sum / 1000.0);
    uint64_t used, one;
    warm__memory(w, &used, &one);
    al_buf_printf(b,
                  "# HELP airlock_warm_memory_bytes Host memory the warm sandboxes hold "
                  "(measured cgroups plus airlock-vmm and network) and their budget "
                  "(sandboxes.warm.memory).\n# TYPE airlock_warm_memory_bytes gauge\n"
                  "airlock_warm_memory_bytes{what=\"used\"} %llu\n"
                  "airlock_warm_memory_bytes{what=\"budget\"} %llu\n",
                  (unsigned long long)used, (unsigned long long)cp->cfg.warm_memory_bytes);
}

/* ---- stop ------------------------------------------------------------------------------- */

void cp_warm_stop(struct cp *cp, void (*done)(struct cp *cp))
{
    struct cp_warm *w = cp->warm;
    if (!w) {
        done(cp);
        return;
    }
    w->stopping = true;
    w->stop_done = done;
    for (struct warm_pool *p = w->pools; p; p = p->next) {
        struct warm_sb *e = p->list, *n;
        for (; e; e = n) {
            n = e->next;
            if (e->state == WARM_READY) /* (starting ones stop when their start reports) */
                warm__discard(e, "airlockd is stopping");
        }
    }
    warm__stop_done_maybe(w);
}

void cp_warm_free(struct cp *cp)
{
    struct cp_warm *w = cp->warm;
    if (!w)
        return;
    while (w->pools) {
        struct warm_pool *p = w->pools;
        w->pools = p->next;
        free(p);
    }
    free(w);
    cp->warm = NULL;
}
