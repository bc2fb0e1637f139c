/* egress/inspect: the INSPECT branch, binding egress/intercept/ to the proxy (see inspect.h). */
#include "inspect.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mbedtls/ssl.h>

#include "common/log.h"
#include "common/util.h"
#include "egress/intercept/session.h"
#include "internal.h"
#include "policy/policy.h"

/* What a session costs beyond egress's own buffers (mbedtls record buffers both ways, the
 * session's queues at rest), charged to the memory budget while it lives. */
#define INSPECT_SESSION_MEM (96 * 1024)

struct egress_inspect_state {
    struct intercept_tls_client *cli;
    struct intercept_secrets *secrets;
    bool feed_started;
};

struct egress_inspect_worker {
    struct intercept_pool *pool;
    struct intercept_fetcher *fetcher;
};

struct egress_inspect_sandbox {
    pthread_mutex_t lock; /* ph */
    struct intercept_ca *ca;
    struct intercept_tls_server *srv;
    struct intercept_placeholders *ph;
};

struct egress_inspect_conn {
    struct intercept_session *s;
    bool done, closing, stopped;
    char why[64];
    char detail[320];
    bool mem_taken;
    struct egress_http_rec_cache rec; /* the members its requests' records repeat */
};

static const struct policy *inspect__raw(const struct egress_policy *p)
{
    return egress_policy_raw(p);
}

/* ---- instance ---------------------------------------------------------------------------- */

int egress_inspect_init(struct egress *e, struct al_error *err)
{
    struct egress_inspect_state *st = calloc(1, sizeof *st);
    if (!st)
        return al_error_set(err, -ENOMEM, "out of memory");
    struct intercept_tls_client_opts co = {.ca_file =
                                               e->cfg.upstream_ca[0] ? e->cfg.upstream_ca : NULL};
    int rc = intercept_tls_client_new(&co, &st->cli, err);
    if (rc < 0) {
        free(st);
        return al_error_prefix(err, "TLS interception"), rc;
    }
    if (e->cfg.vault_socket[0]) {
        struct intercept_secrets_opts so = {.socket = e->cfg.vault_socket};
        if ((rc = intercept_secrets_new(&so, &st->secrets, err)) < 0) {
            intercept_tls_client_unref(st->cli);
            free(st);
            return rc;
        }
    }
    e->inspect = st;
    return 0;
}

void egress_inspect_start(struct egress *e)
{
    struct egress_inspect_state *st = e->inspect;
    if (st && st->secrets && !st->feed_started) {
        intercept_secrets_start(st->secrets, &e->ctl_loop);
        st->feed_started = true;
    }
}

void egress_inspect_stop(struct egress *e)
{
    struct egress_inspect_state *st = e->inspect;
    if (st && st->secrets && st->feed_started)
        intercept_secrets_stop(st->secrets, NULL, NULL);
}

void egress_inspect_fini(struct egress *e)
{
    struct egress_inspect_state *st = e->inspect;
    if (!st)
        return;
    intercept_secrets_free(st->secrets);
    intercept_tls_client_unref(st->cli);
    free(st);
    e->inspect = NULL;
}

bool egress_inspect_rule_injects(const struct egress_policy *p, const char *rule)
{
    if (!p || !rule)
        return false;
    const struct policy_rule *r = policy_rule_find(inspect__raw(p), rule);
    return r && r->n_inject > 0;
}

bool egress_inspect_available(const struct egress *e)
{
    return e->inspect && e->inspect->secrets;
}

/* ---- workers -------------------------------------------------------------------------------- */

/* The pool closed a socket it held watched: its slot goes. */
static void inspect__unwatch(void *arg, uint64_t slot)
{
    egress_slot_free(arg, slot);
}

int egress_inspect_worker_init(struct egress_worker *w)
{
    struct egress_inspect_worker *iw = calloc(1, sizeof *iw);
    if (!iw)
        return -ENOMEM;
    /* Plain HTTP keeps, per sandbox and host, as many upstreams as it had requests in flight
     * on this worker when the burst of new connections ended (a reference proxy keeps 64 per
     * upstream and worker). */
    struct intercept_pool_opts po = {
        .max_per_key = 64, .unwatch = inspect__unwatch, .unwatch_arg = w};
    int rc = intercept_pool_new(&po, &iw->pool);
    if (rc == 0 && w->e->inspect && w->e->inspect->secrets)
        rc = intercept_fetcher_new(w->e->inspect->secrets, &w->loop, &iw->fetcher);
    if (rc < 0) {
        intercept_pool_free(iw->pool);
        free(iw);
        return rc;
    }
    w->inspect = iw;
    return 0;
}

void egress_inspect_worker_stop(struct egress_worker *w)
{
    struct egress_inspect_worker *iw = w->inspect;
    if (!iw)
        return;
    intercept_pool_free(iw->pool);
    intercept_fetcher_close(iw->fetcher);
    free(iw);
    w->inspect = NULL;
}

int egress_inspect_pool_take(struct egress_worker *w, const char *sandbox, const char *name,
                             uint16_t port, bool check, uint64_t *slot)
{
    if (!w->inspect)
        return -ENOENT;
    char key[INTERCEPT_POOL_KEY_MAX];
    intercept_pool_key(key, sandbox, name, port);
    int fd;
    if (intercept_pool_take_plain(w->inspect->pool, key, check, &fd, slot) < 0)
        return -ENOENT;
    return fd;
}

void egress_inspect_pool_give(struct egress_worker *w, const char *sandbox, const char *name,
                              uint16_t port, int fd, uint64_t slot)
{
    if (!w->inspect) {
        if (slot)
            egress_slot_free(w, slot);
        close(fd);
        return;
    }
    char key[INTERCEPT_POOL_KEY_MAX];
    intercept_pool_key(key, sandbox, name, port);
    if (slot)
        intercept_pool_put_watched(w->inspect->pool, key, fd, slot);
    else
        intercept_pool_put(w->inspect->pool, key, fd, NULL);
}

void egress_inspect_pool_event(struct egress_worker *w, uint64_t slot)
{
    if (w->inspect)
        intercept_pool_watch_event(w->inspect->pool, slot);
}

/* A key whose sandbox the registry no longer knows. Asking the registry rather than being
 * told which ids went needs nothing queued between threads, catches every removal since the
 * last purge in one pass, and keeps the connections of an id registered again meanwhile. */
static bool inspect__key_removed(const char *key, void *arg)
{
    struct egress *e = arg;
    char id[INTERCEPT_POOL_KEY_MAX];
    intercept_pool_key_sandbox(key, id);
    struct egress_sandbox *sb = egress_registry_by_id(e->reg, id);
    if (!sb)
        return true;
    egress_sandbox_put(sb);
    return false;
}

void egress_inspect_pool_purge_removed(struct egress_worker *w)
{
    if (w->inspect)
        intercept_pool_purge(w->inspect->pool, inspect__key_removed, w->e);
}

/* ---- sandboxes ------------------------------------------------------------------------------ */

int egress_inspect_sandbox_new(struct egress *e, const char *id, const struct egress_policy *p,
                               const json_t *keep_placeholders, struct egress_inspect_sandbox **out,
                               struct al_error *err)
{
    (void)e;
    *out = NULL;
    struct egress_inspect_sandbox *x = calloc(1, sizeof *x);
    if (!x)
        return al_error_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&x->lock, NULL);
    size_t n = 0;
    const char *const *names = policy_intercepted_names(inspect__raw(p), &n);
    int rc = 0;
    /* A policy that intercepts nothing gets no CA: it would be constrained to nothing (a
     * reloaded policy cannot widen a CA), never installed in the sandbox, and its key pair
     * and self-signature were most of the registration's cost. Its TLS is never terminated
     * (inspect__start refuses, as the CA's constraints would). */
    if (n > 0) {
        struct intercept_ca_opts co = {.sandbox_id = id, .names = names, .n_names = n};
        rc = intercept_ca_new(&co, &x->ca, err);
        if (rc == 0) {
            struct intercept_tls_server_opts so = {.ca = x->ca};
            rc = intercept_tls_server_new(&so, &x->srv, err);
        }
    }
    if (rc == 0)
        rc = intercept_placeholders_restore(inspect__raw(p), keep_placeholders, &x->ph, err);
    if (rc < 0) {
        egress_inspect_sandbox_free(x);
        return al_error_prefix(err, "sandbox %s: interception", id), rc;
    }
    *out = x;
    return 0;
}

void egress_inspect_sandbox_free(struct egress_inspect_sandbox *x)
{
    if (!x)
        return;
    intercept_placeholders_unref(x->ph);
    intercept_tls_server_unref(x->srv);
    intercept_ca_unref(x->ca); /* the key is wiped when its last user lets go */
    pthread_mutex_destroy(&x->lock);
    free(x);
}

int egress_inspect_sandbox_policy(struct egress_sandbox *sb, const struct egress_policy *p,
                                  struct al_error *err)
{
    struct egress_inspect_sandbox *x = sb->inspect;
    if (!x)
        return 0;
    pthread_mutex_lock(&x->lock);
    struct intercept_placeholders *ph = NULL;
    int rc = intercept_placeholders_new(inspect__raw(p), x->ph, &ph, err);
    if (rc == 0) {
        intercept_placeholders_unref(x->ph);
        x->ph = ph;
    }
    pthread_mutex_unlock(&x->lock);
    return rc;
}

json_t *egress_inspect_sandbox_json(struct egress_sandbox *sb)
{
    struct egress_inspect_sandbox *x = sb->inspect;
    json_t *o = json_object();
    if (!x)
        return o;
    if (x->ca) { /* (none when the policy intercepted nothing at registration) */
        json_object_set_new(o, "caCertPem", json_string(intercept_ca_pem(x->ca)));
        json_object_set_new(o, "caFingerprint", json_string(intercept_ca_fingerprint(x->ca)));
        const char *const *sub;
        size_t n = intercept_ca_subtrees(x->ca, &sub);
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(a, json_string(sub[i]));
        json_object_set_new(o, "caNames", a);
    }
    pthread_mutex_lock(&x->lock);
    json_object_set_new(o, "placeholders", intercept_placeholders_env_json(x->ph));
    pthread_mutex_unlock(&x->lock);
    return o;
}

json_t *egress_sandbox_intercept_json(struct egress *e, const char *id)
{
    struct egress_sandbox *sb = egress_registry_by_id(e->reg, id);
    if (!sb)
        return NULL;
    json_t *o = egress_inspect_sandbox_json(sb);
    egress_sandbox_put(sb);
    return o;
}

/* ---- connections ------------------------------------------------------------------------------ */

static struct egress_conn *inspect__conn(void *ctx)
{
    return ctx;
}

static int inspect__uv(int events)
{
    return ((events & INTERCEPT_TLS_WANT_READ) ? UV_READABLE : 0) |
           ((events & INTERCEPT_TLS_WANT_WRITE) ? UV_WRITABLE : 0);
}

static void op_watch(void *ctx, int which, int fd, int events)
{
    struct egress_conn *c = inspect__conn(ctx);
    if (which == INTERCEPT_END_CLIENT) {
        egress_conn_set_events(&c->client, inspect__uv(events));
        return;
    }
    struct egress_end *u = &c->upstream;
    int ep = c->w->ep;
    if (fd != u->fd) {
        /* Another socket (a retry, one from the pool) or none: the old one leaves the set
         * while it is still open (the session closes it after this call). */
        if (u->registered && u->fd >= 0)
            epoll_ctl(ep, EPOLL_CTL_DEL, u->fd, NULL);
        if (u->slot)
            egress_slot_free(c->w, u->slot);
        u->slot = 0;
        u->fd = fd;
        u->c = c;
        u->registered = false;
        u->events = 0;
        u->eof = u->shut_wr = false;
    }
    if (fd < 0)
        return;
    if (events == 0) {
        /* An idle upstream is not watched at all: its hang-up must not end the sandbox's
         * connection (the next request notices and takes another one). */
        if (u->registered)
            epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        u->registered = false;
        u->events = 0;
        return;
    }
    egress_conn_set_events(u, inspect__uv(events));
}

static void op_deadline(void *ctx, uint32_t ms)
{
    struct egress_conn *c = inspect__conn(ctx);
    if (ms)
        egress_conn_deadline(c, ms);
    else
        egress_conn_no_deadline(c);
}

static int op_connect(void *ctx)
{
    struct egress_conn *c = inspect__conn(ctx);
    struct egress *e = c->w->e;
    int fd = egress_dial(e, &c->dialled, c->dst_port);
    if (fd < 0) {
        atomic_fetch_add(&e->stats.upstream_errors, 1);
        return fd;
    }
    if (!c->t_connect0)
        c->t_connect0 = al_now_ns();
    return fd;
}

static const struct policy *op_policy(void *ctx)
{
    struct egress_conn *c = inspect__conn(ctx);
    /* Each request is decided on the sandbox's current policy (hot reload). */
    struct egress_policy *p = egress_sandbox_policy(c->sb);
    if (p) {
        egress_policy_unref(c->policy);
        c->policy = p;
    }
    return c->policy ? inspect__raw(c->policy) : NULL;
}

static void inspect__count_request(struct egress *e, struct egress_conn *c, const char *decision)
{
    atomic_fetch_add(&e->stats.http_requests, 1);
    if (decision && strcmp(decision, "deny") == 0) {
        atomic_fetch_add(&e->stats.http_denied, 1);
        atomic_fetch_add(&c->sb->n_denied, 1);
    } else {
        atomic_fetch_add(&c->sb->n_allowed, 1);
    }
}

static bool op_audit(void *ctx, json_t *rec)
{
    struct egress_conn *c = inspect__conn(ctx);
    struct egress *e = c->w->e;
    /* The connection's common fields first, then what the session says. */
    const char *type = json_string_value(json_object_get(rec, "type"));
    json_t *r = egress_rec_new(type ? type : "security_event");
    if (!r) {
        json_decref(rec);
        return egress_audit_ok(e->audit);
    }
    egress_rec_sandbox(r, c->sb, c->policy);
    egress_rec_str(r, "request_id", json_string_value(json_object_get(rec, "request_id")));
    egress_rec_str(r, "connection_id", c->request_id);
    egress_rec_str(r, "src", c->src_text);
    egress_rec_str(r, "dst", c->dst_text);
    if (c->dialled.family)
        egress_rec_str(r, "dialled", c->dialled_text);
    egress_rec_str(r, "mode",
                   c->policy && egress_policy_report_mode(c->policy) ? "report" : "enforce");
    json_object_update(r, rec);
    json_decref(rec);
    egress_audit(e, r);
    return egress_audit_ok(e->audit);
}

/* A request's record: written as a plain request's is (egress_http_audit). */
static bool op_audit_request(void *ctx, const struct egress_http_rec *r)
{
    struct egress_conn *c = inspect__conn(ctx);
    struct egress *e = c->w->e;
    egress_http_audit(c, &c->inspect->rec, r);
    inspect__count_request(e, c, r->decision);
    return egress_audit_ok(e->audit);
}

static void op_request_id(void *ctx, char out[32])
{
    struct egress_conn *c = inspect__conn(ctx);
    egress_new_request_id(c->w->e, out);
}

static void op_done(void *ctx, const char *why, const char *detail)
{
    struct egress_conn *c = inspect__conn(ctx);
    struct egress_inspect_conn *ic = c->inspect;
    ic->done = true;
    snprintf(ic->why, sizeof ic->why, "%s", why ? why : "closed");
    snprintf(ic->detail, sizeof ic->detail, "%s", detail ? detail : "");
}

static const struct intercept_host_ops inspect__ops = {
    .watch = op_watch,
    .deadline = op_deadline,
    .connect = op_connect,
    .policy = op_policy,
    .audit = op_audit,
    .audit_request = op_audit_request,
    .request_id = op_request_id,
    .done = op_done,
};

/* After every call into the session: if it ended, so does the connection. */
static void inspect__after(struct egress_conn *c)
{
    struct egress_inspect_conn *ic = c->inspect;
    if (ic && ic->done && !ic->closing) {
        ic->closing = true;
        c->end_reason = ic->why;
        if (ic->detail[0])
            c->end_detail = ic->detail;
        egress_conn_close(c, false, ic->why);
    }
}

static void inspect__addr(const struct egress_ip *ip, struct policy_addr *out)
{
    memset(out, 0, sizeof *out);
    if (ip->family == 4) {
        out->family = AF_INET;
        memcpy(out->bytes, ip->addr, 4);
    } else if (ip->family == 6) {
        out->family = AF_INET6;
        memcpy(out->bytes, ip->addr, 16);
    }
}

static int inspect__start(struct egress_conn *c, const char *name, bool plain, const void *prefix,
                          size_t len, const char **reason)
{
    struct egress *e = c->w->e;
    struct egress_inspect_worker *iw = c->w->inspect;
    struct egress_inspect_sandbox *x = c->sb ? c->sb->inspect : NULL;
    *reason = NULL;
    if (!e->inspect || !iw || (!plain && !x)) {
        *reason = "interception_unavailable";
        return -ENOTSUP;
    }
    if (!plain && !x->srv) {
        /* Its policy intercepted nothing when it was registered: it has no CA (a reload that
         * adds interception needs a new sandbox, as it would need a wider CA). */
        *reason = "outside_ca_constraints";
        al_warn("sandbox %s: interception of %s refused: the sandbox has no CA (its policy "
                "intercepted nothing when it was created; create a new sandbox)",
                c->sb->id, name);
        intercept_tls_raw_alert(c->client.fd, MBEDTLS_SSL_ALERT_MSG_ACCESS_DENIED);
        return -EPERM;
    }
    struct egress_inspect_conn *ic = calloc(1, sizeof *ic);
    if (!ic) {
        *reason = "out_of_memory";
        return -ENOMEM;
    }
    if (!egress_mem_take(e, c->sb, INSPECT_SESSION_MEM)) {
        free(ic);
        atomic_fetch_add(&e->stats.limit_memory, 1);
        *reason = "memory_budget";
        return -ENOBUFS;
    }
    ic->mem_taken = true;
    c->inspect = ic;
    struct intercept_placeholders *ph = NULL;
    if (x) {
        pthread_mutex_lock(&x->lock);
        ph = intercept_placeholders_ref(x->ph);
        pthread_mutex_unlock(&x->lock);
    }
    struct intercept_session_opts o = {
        .ops = &inspect__ops,
        .ctx = c,
        .srv = x ? x->srv : NULL,
        .cli = e->inspect->cli,
        .pool = iw->pool,
        .fetcher = iw->fetcher,
        .ph = ph,
        .sandbox_id = c->sb->id,
        .name = name,
        .port = c->dst_port,
        .plaintext = plain,
        .client_fd = c->client.fd,
        .prefix = prefix,
        .prefix_len = len,
        .limits =
            {
                .max_header_bytes = e->cfg.max_header_bytes,
                .max_body_bytes = e->cfg.max_body_bytes,
                .handshake_timeout_ms = e->cfg.header_timeout_ms,
                .header_timeout_ms = e->cfg.header_timeout_ms,
                .keepalive_timeout_ms = e->cfg.keepalive_timeout_ms,
                .response_timeout_ms = e->cfg.response_timeout_ms,
                .idle_timeout_ms = e->cfg.idle_timeout_ms,
            },
    };
    inspect__addr(&c->dst, &o.dst);
    enum egress_conn_state before = c->state;
    c->state = CONN_INSPECT;
    struct al_error err = {0};
    int rc = intercept_session_start(&o, &ic->s, &err);
    intercept_placeholders_unref(ph);
    if (rc < 0) {
        egress_mem_give(e, c->sb, INSPECT_SESSION_MEM);
        egress_http_rec_cache_free(&ic->rec);
        free(ic);
        c->inspect = NULL;
        c->state = before;
        *reason = rc == -EPERM ? "outside_ca_constraints" : "interception_failed";
        al_warn("sandbox %s: interception of %s refused: %s", c->sb->id, name, al_error_str(&err));
        return rc;
    }
    inspect__after(c);
    return 0;
}

int egress_inspect_conn_start(struct egress_conn *c, const char **reason)
{
    return inspect__start(c, c->host.text, false, c->in, c->in_len, reason);
}

int egress_inspect_conn_start_plain(struct egress_conn *c, const char *host, const void *prefix,
                                    size_t prefix_len, const char **reason)
{
    return inspect__start(c, host, true, prefix, prefix_len, reason);
}

void egress_inspect_on_events(struct egress_conn *c, struct egress_end *end, int uv_events)
{
    struct egress_inspect_conn *ic = c->inspect;
    if (!ic || ic->done)
        return;
    int ev = ((uv_events & UV_READABLE) ? INTERCEPT_TLS_WANT_READ : 0) |
             ((uv_events & UV_WRITABLE) ? INTERCEPT_TLS_WANT_WRITE : 0);
    if (end == &c->upstream)
        c->t_last_io = al_now_ns();
    intercept_session_on_events(
        ic->s, end == &c->client ? INTERCEPT_END_CLIENT : INTERCEPT_END_UPSTREAM, ev);
    inspect__after(c);
}

void egress_inspect_on_timeout(struct egress_conn *c)
{
    struct egress_inspect_conn *ic = c->inspect;
    if (!ic || ic->done)
        return;
    intercept_session_on_timeout(ic->s);
    inspect__after(c);
}

void egress_inspect_conn_stop(struct egress_conn *c)
{
    struct egress_inspect_conn *ic = c->inspect;
    if (!ic || ic->stopped)
        return;
    ic->stopped = true;
    if (!ic->done) {
        intercept_session_abort(ic->s, c->end_reason ? c->end_reason : "closed");
        ic->closing = true;
    }
    struct intercept_session_stats st;
    intercept_session_get_stats(ic->s, &st);
    c->bytes_up += st.bytes_up;
    c->bytes_down += st.bytes_down;
}

void egress_inspect_conn_free(struct egress_conn *c)
{
    struct egress_inspect_conn *ic = c->inspect;
    if (!ic)
        return;
    egress_inspect_conn_stop(c);
    intercept_session_free(ic->s); /* the upstream goes to the pool or is closed */
    if (ic->mem_taken)
        egress_mem_give(c->w->e, c->sb, INSPECT_SESSION_MEM);
    c->inspect = NULL;
    egress_http_rec_cache_free(&ic->rec);
    free(ic);
}
