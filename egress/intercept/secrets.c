/* egress/intercept/secrets: the vault client, the shared cache and the changes feed (see
 * secrets.h and docs/vault.md). */
#include "secrets.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/http.h"
#include "common/log.h"
#include "common/util.h"
#include "intercept.h"
#include "policy/policy.h"

#define BODY_MAX     (256 * 1024)
#define CHANGES_RING 1024

/* ---- secrets ---------------------------------------------------------------------------- */

struct secret__impl {
    struct intercept_secret pub;
    atomic_int refs;
    unsigned char *mem; /* sodium_malloc'd value */
    size_t mem_len;
};

static struct secret__impl *secret__impl(struct intercept_secret *s)
{
    return (struct secret__impl *)((char *)s - offsetof(struct secret__impl, pub));
}

struct intercept_secret *intercept_secret_ref(struct intercept_secret *s)
{
    if (s)
        atomic_fetch_add(&secret__impl(s)->refs, 1);
    return s;
}

void intercept_secret_unref(struct intercept_secret *s)
{
    if (!s)
        return;
    struct secret__impl *i = secret__impl(s);
    if (atomic_fetch_sub(&i->refs, 1) != 1)
        return;
    if (i->mem)
        sodium_free(i->mem); /* wipes */
    for (size_t k = 0; k < s->n_bound; k++)
        free(s->bound_hosts[k]);
    intercept_matcher_unref(s->matcher);
    free(i);
}

struct intercept_secret *intercept_secret_new(const struct intercept_secret_def *d)
{
    if (intercept_init(NULL) < 0 || d->n_bound > INTERCEPT_SECRET_HOSTS_MAX || d->len == 0)
        return NULL;
    struct secret__impl *si = calloc(1, sizeof *si);
    if (!si)
        return NULL;
    atomic_init(&si->refs, 1);
    struct intercept_secret *s = &si->pub;
    snprintf(s->name, sizeof s->name, "%s", d->name);
    snprintf(s->secret_id, sizeof s->secret_id, "%s", d->secret_id ? d->secret_id : "");
    s->version = d->version;
    si->mem_len = d->len;
    if (!(si->mem = sodium_malloc(d->len)))
        goto fail;
    memcpy(si->mem, d->value, d->len);
    s->value = si->mem;
    s->len = d->len;
    for (size_t i = 0; i < d->n_bound; i++) {
        char canon[POLICY_BOUND_HOST_MAX + 1];
        if (!d->bound_hosts[i] ||
            policy_bound_host_canon(d->bound_hosts[i], strlen(d->bound_hosts[i]), false, canon,
                                    NULL) ||
            !(s->bound_hosts[i] = strdup(canon)))
            goto fail;
        s->n_bound++;
    }
    const void *vals[1] = {s->value};
    size_t lens[1] = {d->len};
    if (intercept_matcher_new(vals, lens, 1, &s->matcher) < 0)
        goto fail;
    s->fetched_ns = al_now_ns();
    s->expires_ns = UINT64_MAX;
    return s;
fail:
    intercept_secret_unref(s);
    return NULL;
}

bool intercept_secret_bound_to(const struct intercept_secret *s, const char *host)
{
    if (s->n_bound == 0)
        return true;
    /* The policy library's one matcher (the vault checks with the same one). */
    return host && policy_bound_host_match((const char *const *)s->bound_hosts, s->n_bound, host,
                                           strlen(host));
}

/* ---- the shared cache ------------------------------------------------------------------- */

struct secrets__entry {
    struct intercept_secret *sec;
};

struct secrets__change {
    char name[INTERCEPT_SECRET_NAME_MAX + 1];
    uint64_t gen;
};

struct intercept_secrets {
    char target[700];
    uint32_t fetch_timeout_ms, poll_wait_ms, max_age_cap_ms, retry_ms;
    size_t max_entries;

    pthread_mutex_t lock;
    struct secrets__entry *ents;
    size_t n;
    struct secrets__change *chg; /* ring of names the feed reported, with its generation */
    size_t chg_head, chg_n;
    uint64_t full_gen; /* a "full" answer invalidates everything fetched before */
    struct intercept_secrets_stats st;
    atomic_bool feed_ok;
    atomic_uint_fast64_t generation;

    /* The feed (its loop only). */
    uv_loop_t *loop;
    uv_timer_t timer;
    bool started, stopping, timer_open;
    struct al_http_creq *feed_req;
    struct al_buf feed_body;
    int feed_status;
    bool feed_first;
    uint32_t backoff_ms;
    void (*stop_done)(void *);
    void *stop_arg;
};

static void cache__remove_at(struct intercept_secrets *s, size_t i)
{
    intercept_secret_unref(s->ents[i].sec);
    s->ents[i] = s->ents[--s->n];
}

/* Under the lock. */
static void cache__drop_name(struct intercept_secrets *s, const char *name, uint64_t gen)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->ents[i].sec->name, name) == 0) {
            cache__remove_at(s, i);
            s->st.invalidated++;
            break;
        }
    struct secrets__change *c = &s->chg[s->chg_head];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->gen = gen;
    s->chg_head = (s->chg_head + 1) % CHANGES_RING;
    if (s->chg_n < CHANGES_RING)
        s->chg_n++;
}

/* Under the lock: the generation at which the feed last reported name changed (0: not in
 * memory; an old ring entry may have been overwritten, so full_gen covers those). */
static uint64_t cache__changed_gen(struct intercept_secrets *s, const char *name)
{
    uint64_t g = s->full_gen;
    for (size_t k = 0; k < s->chg_n; k++) {
        const struct secrets__change *c = &s->chg[k];
        if (c->gen > g && strcmp(c->name, name) == 0)
            g = c->gen;
    }
    if (s->chg_n == CHANGES_RING) {
        /* Forgotten changes may be newer than what we remember for this name. */
        const struct secrets__change *oldest = &s->chg[s->chg_head];
        if (oldest->gen > g)
            g = oldest->gen;
    }
    return g;
}

int intercept_secrets_new(const struct intercept_secrets_opts *o, struct intercept_secrets **out,
                          struct al_error *err)
{
    *out = NULL;
    int r = intercept_init(err);
    if (r < 0)
        return r;
    if (!o || !o->socket || !*o->socket)
        return al_error_set(err, -EINVAL, "the vault client needs the vault's socket path");
    struct intercept_secrets *s = calloc(1, sizeof *s);
    if (!s)
        return al_error_set(err, -ENOMEM, "out of memory");
    if (snprintf(s->target, sizeof s->target, "unix:%s", o->socket) >= (int)sizeof s->target) {
        free(s);
        return al_error_set(err, -ENAMETOOLONG, "the vault socket path is too long: %s", o->socket);
    }
    s->fetch_timeout_ms = o->fetch_timeout_ms ? o->fetch_timeout_ms : 2000;
    s->poll_wait_ms = o->poll_wait_ms ? o->poll_wait_ms : 30000;
    if (s->poll_wait_ms > 60000)
        s->poll_wait_ms = 60000;
    s->max_age_cap_ms = o->max_age_cap_ms ? o->max_age_cap_ms : 300000;
    s->retry_ms = o->retry_ms ? o->retry_ms : 250;
    s->max_entries = o->max_entries ? o->max_entries : 1024;
    s->ents = calloc(s->max_entries, sizeof *s->ents);
    s->chg = calloc(CHANGES_RING, sizeof *s->chg);
    if (!s->ents || !s->chg) {
        free(s->ents);
        free(s->chg);
        free(s);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    pthread_mutex_init(&s->lock, NULL);
    atomic_init(&s->feed_ok, false);
    atomic_init(&s->generation, 0);
    al_buf_init(&s->feed_body, BODY_MAX);
    *out = s;
    return 0;
}

void intercept_secrets_flush(struct intercept_secrets *s)
{
    pthread_mutex_lock(&s->lock);
    while (s->n)
        cache__remove_at(s, s->n - 1);
    pthread_mutex_unlock(&s->lock);
}

void intercept_secrets_free(struct intercept_secrets *s)
{
    if (!s)
        return;
    intercept_secrets_flush(s);
    pthread_mutex_destroy(&s->lock);
    al_buf_free(&s->feed_body);
    free(s->ents);
    free(s->chg);
    free(s);
}

bool intercept_secrets_feed_ok(const struct intercept_secrets *s)
{
    return atomic_load(&s->feed_ok);
}

void intercept_secrets_get_stats(struct intercept_secrets *s, struct intercept_secrets_stats *st)
{
    pthread_mutex_lock(&s->lock);
    *st = s->st;
    st->cached = s->n;
    pthread_mutex_unlock(&s->lock);
    st->generation = atomic_load(&s->generation);
    st->feed_ok = atomic_load(&s->feed_ok);
}

/* ---- the changes feed ------------------------------------------------------------------- */

static void feed__poll(struct intercept_secrets *s);

static void feed__on_timer(uv_timer_t *t)
{
    feed__poll(t->data);
}

static int feed__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                             size_t n, void *arg)
{
    (void)c, (void)h, (void)n;
    struct intercept_secrets *s = arg;
    s->feed_status = status;
    return 0;
}

static int feed__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    (void)c;
    struct intercept_secrets *s = arg;
    if (al_buf_append(&s->feed_body, data, len) < 0)
        s->feed_status = -1; /* too large: treated as a failure */
    return 0;
}

/* Applies one answer; false when it is not one. */
static bool feed__apply(struct intercept_secrets *s)
{
    json_t *j = json_loadb(s->feed_body.data ? s->feed_body.data : "", s->feed_body.len, 0, NULL);
    json_t *gen = json_object_get(j, "generation");
    json_t *changed = json_object_get(j, "changed");
    if (!json_is_integer(gen) || json_integer_value(gen) < 0 ||
        (changed && !json_is_array(changed))) {
        json_decref(j);
        return false;
    }
    uint64_t g = (uint64_t)json_integer_value(gen);
    bool full = json_is_true(json_object_get(j, "full"));
    pthread_mutex_lock(&s->lock);
    s->st.feed_answers++;
    if (full) {
        while (s->n)
            cache__remove_at(s, s->n - 1);
        s->full_gen = g;
        s->st.full_flushes++;
    } else {
        size_t i;
        json_t *v;
        json_array_foreach(changed, i, v)
        {
            if (json_is_string(v))
                cache__drop_name(s, json_string_value(v), g);
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (g > atomic_load(&s->generation))
        atomic_store(&s->generation, g);
    json_decref(j);
    return true;
}

static void feed__on_done(struct al_http_creq *c, int err, void *arg)
{
    (void)c;
    struct intercept_secrets *s = arg;
    s->feed_req = NULL;
    if (s->stopping)
        return;
    bool ok = err == 0 && s->feed_status == 200 && feed__apply(s);
    al_buf_reset(&s->feed_body);
    if (ok) {
        if (!atomic_load(&s->feed_ok))
            al_info("vault changes feed: connected (generation %llu)",
                    (unsigned long long)atomic_load(&s->generation));
        atomic_store(&s->feed_ok, true);
        s->feed_first = false;
        s->backoff_ms = 0;
        uv_timer_start(&s->timer, feed__on_timer, 0, 0);
        return;
    }
    if (atomic_load(&s->feed_ok))
        al_warn("vault changes feed lost (%s): new fetches fail until it is back",
                err < 0 ? "connection failed" : "bad answer");
    atomic_store(&s->feed_ok, false);
    pthread_mutex_lock(&s->lock);
    s->st.feed_failures++;
    pthread_mutex_unlock(&s->lock);
    s->feed_first = true; /* ask without waiting first, to know at once when it is back */
    s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : s->retry_ms;
    if (s->backoff_ms > 5000)
        s->backoff_ms = 5000;
    uv_timer_start(&s->timer, feed__on_timer, s->backoff_ms, 0);
}

static void feed__poll(struct intercept_secrets *s)
{
    if (s->stopping || s->feed_req)
        return;
    char path[96];
    uint64_t g = atomic_load(&s->generation);
    if (s->feed_first)
        snprintf(path, sizeof path, "/v1/changes?since=%llu", (unsigned long long)g);
    else
        snprintf(path, sizeof path, "/v1/changes?since=%llu&wait_ms=%u", (unsigned long long)g,
                 s->poll_wait_ms);
    s->feed_status = 0;
    al_buf_reset(&s->feed_body);
    struct al_http_creq_opts o = {
        .target = s->target,
        .method = "GET",
        .path = path,
        .timeout_ms = s->feed_first ? s->fetch_timeout_ms : s->poll_wait_ms + 5000,
        .on_response = feed__on_response,
        .on_data = feed__on_data,
        .on_done = feed__on_done,
        .arg = s,
    };
    if (al_http_creq_start(s->loop, &o, &s->feed_req) < 0) {
        s->feed_req = NULL;
        uv_timer_start(&s->timer, feed__on_timer, 1000, 0);
    }
}

int intercept_secrets_start(struct intercept_secrets *s, uv_loop_t *loop)
{
    if (s->started)
        return -EALREADY;
    s->loop = loop;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    s->timer_open = true;
    s->started = true;
    s->feed_first = true;
    feed__poll(s);
    return 0;
}

static void feed__timer_closed(uv_handle_t *h)
{
    struct intercept_secrets *s = h->data;
    s->timer_open = false;
    if (s->stop_done)
        s->stop_done(s->stop_arg);
}

void intercept_secrets_stop(struct intercept_secrets *s, void (*done)(void *arg), void *arg)
{
    s->stopping = true;
    atomic_store(&s->feed_ok, false);
    if (s->feed_req)
        al_http_creq_cancel(s->feed_req);
    s->stop_done = done;
    s->stop_arg = arg;
    if (s->timer_open) {
        uv_timer_stop(&s->timer);
        uv_close((uv_handle_t *)&s->timer, feed__timer_closed);
    } else if (done) {
        done(arg);
    }
}

/* ---- fetching --------------------------------------------------------------------------- */

struct fetch__flight {
    struct intercept_fetcher *f;
    struct fetch__flight *next;
    char *key; /* name \x1f sandbox \x1f rule \x1f host */
    char name[INTERCEPT_SECRET_NAME_MAX + 1];
    struct intercept_fetch *waiters;
    struct al_http_creq *creq;
    int status;
    struct al_buf body;
};

struct intercept_fetcher {
    struct intercept_secrets *s;
    uv_loop_t *loop;
    struct al_http_pool *pool;
    struct fetch__flight *flights;
};

int intercept_fetcher_new(struct intercept_secrets *s, uv_loop_t *loop,
                          struct intercept_fetcher **out)
{
    struct intercept_fetcher *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    f->s = s;
    f->loop = loop;
    struct al_http_pool_opts po = {
        .max_idle = 4, .max_idle_per_target = 4, .idle_timeout_ms = 10000};
    int r = al_http_pool_new(loop, &po, &f->pool);
    if (r < 0) {
        free(f);
        return r;
    }
    *out = f;
    return 0;
}

static void flight__free(struct fetch__flight *fl)
{
    al_buf_free_wipe(&fl->body);
    free(fl->key);
    free(fl);
}

static void flight__unlink(struct fetch__flight *fl)
{
    struct fetch__flight **pp = &fl->f->flights;
    while (*pp && *pp != fl)
        pp = &(*pp)->next;
    if (*pp)
        *pp = fl->next;
}

static void flight__deliver(struct fetch__flight *fl, struct intercept_secret *sec, int err,
                            const char *reason)
{
    struct intercept_fetch *w;
    while ((w = fl->waiters)) {
        fl->waiters = w->next;
        w->next = NULL;
        w->flight = NULL;
        w->cb(w, sec ? intercept_secret_ref(sec) : NULL, err, reason);
    }
}

void intercept_fetcher_close(struct intercept_fetcher *f)
{
    if (!f)
        return;
    while (f->flights) {
        struct fetch__flight *fl = f->flights;
        if (fl->creq) {
            al_http_creq_cancel(fl->creq); /* on_done runs now, unlinks and frees fl */
        } else {
            flight__unlink(fl);
            flight__deliver(fl, NULL, -ECANCELED, "cancelled");
            flight__free(fl);
        }
    }
    al_http_pool_close(f->pool);
    free(f);
}

void intercept_fetch_cancel(struct intercept_fetch *req)
{
    struct fetch__flight *fl = req->flight;
    if (!fl)
        return;
    struct intercept_fetch **pp = &fl->waiters;
    while (*pp && *pp != req)
        pp = &(*pp)->next;
    if (*pp)
        *pp = req->next;
    req->next = NULL;
    req->flight = NULL;
}

static int fetch__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                              size_t n, void *arg)
{
    (void)c, (void)h, (void)n;
    struct fetch__flight *fl = arg;
    fl->status = status;
    return 0;
}

static int fetch__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    (void)c;
    struct fetch__flight *fl = arg;
    if (al_buf_append(&fl->body, data, len) < 0)
        fl->status = -1;
    return 0;
}

/* Builds the secret from a 200 answer. The value is decoded into guarded memory and its
 * base64 blanked in the body before the rest is parsed. */
static struct intercept_secret *fetch__parse(struct intercept_secrets *s, struct fetch__flight *fl)
{
    char *b = fl->body.data;
    size_t n = fl->body.len;
    if (!b || n < 2)
        return NULL;
    /* "value_b64" (the last one), then optional blanks, ':', blanks, '"'. */
    static const char key[] = "\"value_b64\"";
    char *k = NULL;
    for (char *p = b; (p = memmem(p, n - (size_t)(p - b), key, sizeof key - 1)); p++)
        k = p;
    if (!k)
        return NULL;
    char *v = k + sizeof key - 1, *end = b + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    if (v >= end || *v++ != ':')
        return NULL;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    if (v >= end || *v++ != '"')
        return NULL;
    char *e = memchr(v, '"', (size_t)(end - v));
    if (!e)
        return NULL;
    size_t vl = (size_t)(e - v);
    struct secret__impl *si = calloc(1, sizeof *si);
    if (!si)
        return NULL;
    atomic_init(&si->refs, 1);
    struct intercept_secret *sec = &si->pub;
    si->mem_len = vl * 3 / 4 + 4;
    si->mem = sodium_malloc(si->mem_len);
    size_t len = 0;
    json_t *j = NULL;
    if (!si->mem ||
        sodium_base642bin(si->mem, si->mem_len, v, vl, NULL, &len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0 ||
        len == 0)
        goto bad;
    memset(v, 'A', vl);
    sec->value = si->mem;
    sec->len = len;
    j = json_loadb(b, n, 0, NULL);
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *sid = json_string_value(json_object_get(j, "secret_id"));
    json_t *ver = json_object_get(j, "version"), *gen = json_object_get(j, "generation");
    json_t *age = json_object_get(j, "max_age_ms"), *hosts = json_object_get(j, "bound_hosts");
    if (!name || strcmp(name, fl->name) != 0 || !sid || strlen(sid) != INTERCEPT_SECRET_ID_LEN ||
        strncmp(sid, "b2k:", 4) != 0 || !json_is_integer(ver) || !json_is_integer(gen) ||
        (hosts && !json_is_array(hosts)) || json_array_size(hosts) > INTERCEPT_SECRET_HOSTS_MAX)
        goto bad;
    snprintf(sec->name, sizeof sec->name, "%s", name);
    memcpy(sec->secret_id, sid, INTERCEPT_SECRET_ID_LEN + 1);
    sec->version = (uint32_t)json_integer_value(ver);
    sec->generation = (uint64_t)json_integer_value(gen);
    size_t i;
    json_t *h;
    json_array_foreach(hosts, i, h)
    {
        const char *hs = json_string_value(h);
        char canon[POLICY_BOUND_HOST_MAX + 1];
        /* The vault stored it canonical; canonicalise again (no PSL rules: the vault decided
         * those when the secret was written) so that matching never sees raw text. */
        if (!hs || policy_bound_host_canon(hs, strlen(hs), false, canon, NULL) != 0 ||
            !(sec->bound_hosts[sec->n_bound] = strdup(canon)))
            goto bad;
        sec->n_bound++;
    }
    uint64_t max_age =
        json_is_integer(age) && json_integer_value(age) > 0 ? (uint64_t)json_integer_value(age) : 0;
    if (max_age == 0 || max_age > s->max_age_cap_ms)
        max_age = s->max_age_cap_ms;
    sec->fetched_ns = al_now_ns();
    sec->expires_ns = sec->fetched_ns + max_age * 1000000ull;
    const void *vals[1] = {sec->value};
    size_t lens[1] = {sec->len};
    if (intercept_matcher_new(vals, lens, 1, &sec->matcher) < 0)
        goto bad;
    json_decref(j);
    return sec;
bad:
    json_decref(j);
    intercept_secret_unref(sec);
    return NULL;
}

static void fetch__on_done(struct al_http_creq *c, int err, void *arg)
{
    (void)c;
    struct fetch__flight *fl = arg;
    struct intercept_secrets *s = fl->f->s;
    fl->creq = NULL;
    flight__unlink(fl);
    struct intercept_secret *sec = NULL;
    const char *reason = NULL;
    int rc = 0;
    if (err == -ECANCELED) {
        rc = -ECANCELED;
        reason = "cancelled";
    } else if (err < 0) {
        rc = err;
        reason = err == -ETIMEDOUT ? "vault_timeout" : "vault_unreachable";
    } else if (fl->status == 200) {
        if (!(sec = fetch__parse(s, fl))) {
            rc = -EBADMSG;
            reason = "vault_bad_answer";
        }
    } else {
        rc = -EACCES;
        switch (fl->status) {
        case 403:
            reason = "vault_refused";
            break;
        case 404:
            rc = -ENOENT;
            reason = "secret_not_found";
            break;
        case 503:
            rc = -EAGAIN;
            reason = "vault_unavailable";
            break;
        default:
            rc = -EBADMSG;
            reason = "vault_bad_answer";
            break;
        }
    }
    al_buf_free_wipe(&fl->body);
    pthread_mutex_lock(&s->lock);
    if (sec) {
        if (cache__changed_gen(s, sec->name) > sec->generation) {
            s->st.not_cached_race++; /* changed since: serve this request only */
        } else {
            size_t slot = s->n;
            for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->ents[i].sec->name, sec->name) == 0)
                    slot = i;
            if (slot < s->n) {
                intercept_secret_unref(s->ents[slot].sec);
            } else if (s->n == s->max_entries) {
                size_t old = 0;
                for (size_t i = 1; i < s->n; i++)
                    if (s->ents[i].sec->fetched_ns < s->ents[old].sec->fetched_ns)
                        old = i;
                intercept_secret_unref(s->ents[old].sec);
                slot = old;
            } else {
                s->n++;
            }
            s->ents[slot].sec = intercept_secret_ref(sec);
        }
    } else if (rc != -ECANCELED) {
        s->st.fetch_failures++;
    }
    pthread_mutex_unlock(&s->lock);
    flight__deliver(fl, sec, rc, reason);
    intercept_secret_unref(sec);
    flight__free(fl);
}

int intercept_fetch_start(struct intercept_fetcher *f, const struct intercept_fetch_args *a,
                          struct intercept_fetch *req, struct intercept_secret **out,
                          const char **reason)
{
    struct intercept_secrets *s = f->s;
    *out = NULL;
    *reason = NULL;
    req->next = NULL;
    req->flight = NULL;
    if (!a->name || !a->sandbox || !a->rule || !a->host ||
        strlen(a->name) > INTERCEPT_SECRET_NAME_MAX) {
        *reason = "invalid_request";
        return -EINVAL;
    }
    uint64_t now = al_now_ns();
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->n; i++) {
        struct intercept_secret *sec = s->ents[i].sec;
        if (strcmp(sec->name, a->name) != 0)
            continue;
        if (now < sec->expires_ns) {
            *out = intercept_secret_ref(sec);
            s->st.hits++;
            pthread_mutex_unlock(&s->lock);
            return 1;
        }
        cache__remove_at(s, i); /* expired */
        break;
    }
    s->st.misses++;
    pthread_mutex_unlock(&s->lock);
    if (!atomic_load(&s->feed_ok)) {
        *reason = "vault_feed_down";
        pthread_mutex_lock(&s->lock);
        s->st.fetch_failures++;
        pthread_mutex_unlock(&s->lock);
        return -ENOTCONN;
    }
    char *key = NULL;
    if (asprintf(&key, "%s\x1f%s\x1f%s\x1f%s", a->name, a->sandbox, a->rule, a->host) < 0)
        return -ENOMEM;
    for (struct fetch__flight *fl = f->flights; fl; fl = fl->next) {
        if (strcmp(fl->key, key) == 0) {
            free(key);
            req->next = fl->waiters;
            fl->waiters = req;
            req->flight = fl;
            pthread_mutex_lock(&s->lock);
            s->st.coalesced++;
            pthread_mutex_unlock(&s->lock);
            return 0;
        }
    }
    struct fetch__flight *fl = calloc(1, sizeof *fl);
    if (!fl) {
        free(key);
        return -ENOMEM;
    }
    fl->f = f;
    fl->key = key;
    snprintf(fl->name, sizeof fl->name, "%s", a->name);
    al_buf_init(&fl->body, BODY_MAX);
    json_t *body = json_pack("{s:s,s:s,s:s,s:s}", "name", a->name, "sandbox", a->sandbox, "rule",
                             a->rule, "host", a->host);
    if (body && a->request_id)
        json_object_set_new(body, "request_id", json_string(a->request_id));
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        flight__free(fl);
        *reason = "invalid_request";
        return -EINVAL;
    }
    static const struct al_http_header hdrs[] = {{"Content-Type", "application/json"}};
    struct al_http_creq_opts o = {
        .target = s->target,
        .method = "POST",
        .path = "/v1/fetch",
        .headers = hdrs,
        .n_headers = 1,
        .body = text,
        .body_len = strlen(text),
        .timeout_ms = s->fetch_timeout_ms,
        .on_response = fetch__on_response,
        .on_data = fetch__on_data,
        .on_done = fetch__on_done,
        .arg = fl,
        .pool = f->pool,
    };
    int r = al_http_creq_start(f->loop, &o, &fl->creq);
    free(text);
    if (r < 0) {
        flight__free(fl);
        *reason = "vault_unreachable";
        return r;
    }
    req->flight = fl;
    fl->waiters = req;
    fl->next = f->flights;
    f->flights = fl;
    pthread_mutex_lock(&s->lock);
    s->st.fetches++;
    pthread_mutex_unlock(&s->lock);
    return 0;
}
