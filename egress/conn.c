/* egress/conn: the per-connection pipeline (see internal.h for the picture): accept,
 * identify, limits, peek, classify, decide, destination check, connect, then hand over to
 * the relay (TLS passthrough, raw TCP) or to the HTTP engine. Every path ends in an audit
 * record and a close; nothing waits without a deadline. */
#include "internal.h"
#include "ratelimit.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define PEEK_INITIAL 2048
#define REJECT_SLACK 64 /* connections beyond a cap still answered 429/503, then reset */

static void conn__on_timer(uv_timer_t *t);
static void conn__peek_read(struct egress_conn *c);
static void conn__start_connect(struct egress_conn *c);

/* ---- small helpers ------------------------------------------------------------------ */

void egress_conn_set_events(struct egress_end *end, int events)
{
    if (end->fd < 0 || end->events == events)
        return;
    int ep = end->c->w->ep;
    struct epoll_event ev = {.events = ((events & UV_READABLE) ? EPOLLIN | EPOLLRDHUP : 0) |
                                       ((events & UV_WRITABLE) ? EPOLLOUT : 0)};
    if (end->slot)
        ev.data.u64 = end->slot;
    else
        ev.data.ptr = end;
    int rc;
    if (events == 0 && !end->registered) {
        rc = 0;
    } else if (end->registered) {
        /* Interest 0 stays in the set (one MOD instead of DEL + ADD later); only a hang-up
         * or an error can then be reported, and egress_conn_on_events closes on those. */
        rc = epoll_ctl(ep, EPOLL_CTL_MOD, end->fd, &ev);
    } else {
        rc = epoll_ctl(ep, EPOLL_CTL_ADD, end->fd, &ev);
        end->registered = rc == 0;
    }
    if (rc == 0)
        end->events = events;
}

/* Deadlines are lazy: a connection keeps one due time (loop milliseconds), and its timer is
 * re-armed only when the new due time is earlier than the armed one. When the timer fires
 * early (the due time moved later since) it re-arms for the rest. A keep-alive request moves
 * the deadline three times (head, body, keep-alive) without touching the timer heap. */
void egress_conn_deadline(struct egress_conn *c, uint32_t ms)
{
    if (c->state == CONN_CLOSING)
        return;
    uint64_t now = uv_now(&c->w->loop);
    c->due_ms = now + (ms ? ms : 1);
    if (!uv_is_active((uv_handle_t *)&c->timer) || c->due_ms < c->armed_ms) {
        uv_timer_start(&c->timer, conn__on_timer, c->due_ms - now, 0);
        c->armed_ms = c->due_ms;
    }
}

void egress_conn_no_deadline(struct egress_conn *c)
{
    c->due_ms = 0; /* the timer, if it fires, finds nothing due */
}

static int conn__end_init(struct egress_conn *c, struct egress_end *end, int fd)
{
    end->fd = fd;
    end->c = c;
    end->registered = false;
    end->events = 0;
    return 0;
}

static const char *conn__proto_name(enum egress_proto p)
{
    switch (p) {
    case PROTO_TLS:
        return "tls";
    case PROTO_HTTP:
        return "http";
    case PROTO_TCP:
        return "tcp";
    default:
        return "unknown";
    }
}

/* Fields common to connection records. */
static void conn__record(struct egress_conn *c, struct egress_recw *w, const char *type)
{
    egress_recw_begin(w, type);
    egress_recw_sandbox(w, c->sb, c->policy);
    egress_recw_str(w, "request_id", c->request_id);
    egress_recw_str(w, "proto", conn__proto_name(c->proto));
    egress_recw_str(w, "src", c->src_text);
    egress_recw_str(w, "dst", c->dst_text);
}

static void conn__audit_decision(struct egress_conn *c, const char *decision, const char *rule,
                                 const char *reason, const char *error)
{
    if (c->decision_audited)
        return;
    c->decision_audited = true;
    char sni[256] = "";
    if (c->ch && c->ch->has_sni)
        snprintf(sni, sizeof sni, "%.*s", (int)c->ch->sni_len, c->ch->sni);
    struct egress_audit_event ev = {.type = "connection",
                                    .decision = decision,
                                    .rule = rule,
                                    .reason = reason,
                                    .host = c->have_host ? c->host.text : sni,
                                    .request_id = c->request_id,
                                    .policy = c->policy,
                                    .error = error != NULL};
    if (!c->net_update[0] && !egress_audit_budget(c->w->e, c->sb, &ev)) {
        c->decision_aggregated = true;
        return;
    }
    struct egress_recw w;
    conn__record(c, &w, "connection");
    egress_recw_str(&w, "decision", decision);
    egress_recw_str(&w, "reason", reason);
    egress_recw_str(&w, "rule", rule);
    egress_recw_str(&w, "mode",
                    c->policy && egress_policy_report_mode(c->policy) ? "report" : "enforce");
    if (error)
        egress_recw_str(&w, "error", error);
    if (c->net_update[0])
        egress_recw_str(&w, "network_update", c->net_update);
    if (c->ch) {
        if (c->ch->has_sni)
            egress_recw_strn(&w, "sni", c->ch->sni, c->ch->sni_len);
        else
            egress_recw_null(&w, "sni");
        egress_recw_arr_begin(&w, "alpn");
        for (size_t i = 0; i < c->ch->n_alpn; i++)
            egress_recw_elem_strn(&w, c->ch->alpn[i], strlen(c->ch->alpn[i]));
        egress_recw_close(&w, ']');
        if (c->ch->has_ech || c->ch->has_esni)
            egress_recw_bool(&w, "ech", true);
    }
    if (c->have_host)
        egress_recw_str(&w, "host", c->host.text);
    if (c->dialled.family)
        egress_recw_str(&w, "dialled", c->dialled_text);
    if (c->proto == PROTO_TLS && c->verdict.tls == EGRESS_TLS_INSPECT && c->verdict.allow)
        egress_recw_bool(&w, "inspected", true);
    egress_recw_obj_begin(&w, "timing_us");
    if (c->t_first)
        egress_recw_us(&w, "peek", c->t_first - c->t_accept);
    if (c->t_dns)
        egress_recw_us(&w, "dns", c->t_dns - c->t_dns0);
    if (c->t_decided)
        egress_recw_us(&w, "decide", c->t_decided - (c->t_first ? c->t_first : c->t_accept));
    if (c->t_connected)
        egress_recw_us(&w, "connect", c->t_connected - c->t_connect0);
    egress_recw_close(&w, '}');
    egress_audit_w(c->w->e, &w);
}

static void conn__audit_end(struct egress_conn *c)
{
    if (c->audited_end || !c->allowed)
        return;
    c->audited_end = true;
    const char *end = c->end_reason ? c->end_reason : "closed";
    struct egress_audit_event ev = {.type = "connection_end",
                                    .decision = c->verdict.would_deny ? "would_deny" : "allow",
                                    .rule = c->verdict.rule,
                                    .reason = end,
                                    .host = c->have_host ? c->host.text : NULL,
                                    .request_id = c->request_id,
                                    .policy = c->policy,
                                    .bytes_up = c->bytes_up,
                                    .bytes_down = c->bytes_down,
                                    .error = c->end_detail && *c->end_detail,
                                    .aggregate = c->decision_aggregated};
    /* An end forced by a network update is written whatever the budget: it is the
     * update's effect on this connection. */
    if (!c->net_update[0] && !egress_audit_budget(c->w->e, c->sb, &ev))
        return;
    struct egress_recw w;
    conn__record(c, &w, "connection_end");
    egress_recw_int(&w, "bytes_up", (int64_t)c->bytes_up);
    egress_recw_int(&w, "bytes_down", (int64_t)c->bytes_down);
    egress_recw_us(&w, "duration_us", al_now_ns() - c->t_accept);
    egress_recw_str(&w, "end", end);
    if (c->end_detail && *c->end_detail)
        egress_recw_str(&w, "error", c->end_detail);
    if (c->net_update[0])
        egress_recw_str(&w, "network_update", c->net_update);
    egress_audit_w(c->w->e, &w);
}

/* ---- lifetime ------------------------------------------------------------------------ */

static void conn__free(struct egress_conn *c)
{
    struct egress *e = c->w->e;
    if (c->sb) {
        atomic_fetch_add(&c->sb->bytes_up, c->bytes_up);
        atomic_fetch_add(&c->sb->bytes_down, c->bytes_down);
    }
    atomic_fetch_add(&e->stats.bytes_up, c->bytes_up);
    atomic_fetch_add(&e->stats.bytes_down, c->bytes_down);
    egress_policy_unref(c->policy);
    egress_sandbox_put(c->sb);
    free(c->ch);
    free(c);
}

static void conn__on_handle_closed(uv_handle_t *h)
{
    struct egress_conn *c = h->data;
    if (--c->handles_open == 0)
        conn__free(c);
}

static void conn__close_end(struct egress_conn *c, struct egress_end *end, bool reset)
{
    if (end->fd < 0)
        return;
    if (reset) {
        struct linger l = {1, 0};
        setsockopt(end->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    /* close() takes the socket out of the epoll set; events already fetched for it in
     * this batch find the connection CLOSING (its memory lives until the timer closes). */
    close(end->fd);
    end->fd = -1;
    end->registered = false;
    end->events = 0;
    if (end->slot)
        egress_slot_free(c->w, end->slot);
    end->slot = 0;
}

static void conn__free_in(struct egress_conn *c)
{
    if (c->in) {
        egress_mem_give(c->w->e, c->sb, c->in_cap);
        free(c->in);
        c->in = NULL;
        c->in_len = c->in_cap = 0;
    }
}

void egress_conn_close(struct egress_conn *c, bool reset, const char *why)
{
    if (c->state == CONN_CLOSING)
        return;
    struct egress_worker *w = c->w;
    struct egress *e = w->e;
    if (!c->end_reason)
        c->end_reason = why;
    if (c->resolving) {
        egress_resolve_cancel(&c->rreq);
        c->resolving = false;
    }
    /* An interception session or a relay ends first: its byte counts go into the end
     * record. */
    egress_inspect_conn_stop(c);
    egress_relay_stop(c);
    if (c->allowed)
        conn__audit_end(c);
    c->state = CONN_CLOSING;
    /* Unlink from the worker. */
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    w->n_conns--;
    atomic_fetch_sub(&e->stats.conns_active, 1);
    if (c->counted)
        atomic_fetch_sub(&c->sb->conns, 1);
    if (!reset)
        egress_http_pool_upstream(c); /* before the upstream socket would close */
    egress_http_free(c);
    conn__free_in(c);
    egress_inspect_conn_free(c); /* its upstream socket is its own (pooled or closed) */
    conn__close_end(c, &c->client, reset);
    conn__close_end(c, &c->upstream, reset);
    uv_timer_stop(&c->timer); /* for real: the handle closes */
    uv_close((uv_handle_t *)&c->timer, conn__on_handle_closed);
}

void egress_worker_reap_removed(struct egress_worker *w)
{
    struct egress_conn *c = w->conns;
    while (c) {
        struct egress_conn *next = c->next;
        if (c->sb && atomic_load(&c->sb->removed))
            egress_conn_close(c, true, "sandbox_removed");
        c = next;
    }
    /* Its idle upstreams too: they hold fds and the pool's room until they would expire. */
    egress_inspect_pool_purge_removed(w);
}

/* One connection of a sandbox whose network fields were replaced. Only the narrowing
 * changed (the rules under it are the same), so a destination already decided is judged
 * again by the new narrowing alone, on what it was decided on: the host (SNI, the bound
 * Host) and the address connected to. */
static void conn__rejudge(struct egress_conn *c)
{
    unsigned gen;
    struct egress_policy *p = egress_sandbox_policy_gen(c->sb, &gen);
    if (!p || gen == c->net_gen) {
        egress_policy_unref(p);
        return;
    }
    c->net_gen = gen;
    bool decided = c->state != CONN_PEEK && !(c->proto == PROTO_HTTP && !c->have_host);
    if (!decided) {
        /* Its decision is still to come: it is made on the new policy. */
        egress_policy_unref(c->policy);
        c->policy = p;
        return;
    }
    bool pass = egress_policy_narrowing_passes(p, c->have_host ? &c->host : NULL, &c->dst);
    egress_policy_unref(p);
    if (pass || c->state == CONN_DRAIN)
        return;
    egress_sandbox_net_update(c->sb, c->net_update);
    if (!c->net_update[0])
        snprintf(c->net_update, sizeof c->net_update, "unnamed");
    if (!c->allowed) {
        /* Decided but not yet through (resolving, connecting): its decision record is a
         * denial by the update. */
        atomic_fetch_add(&c->w->e->stats.conns_denied, 1);
        atomic_fetch_add(&c->sb->n_denied, 1);
        conn__audit_decision(c, "deny", NULL, "network_update", NULL);
    }
    egress_conn_close(c, true, "network_update");
}

void egress_worker_rejudge(struct egress_worker *w)
{
    struct egress_conn *c = w->conns;
    while (c) {
        struct egress_conn *next = c->next;
        if (c->sb && c->state != CONN_CLOSING && !atomic_load(&c->sb->removed))
            conn__rejudge(c);
        c = next;
    }
}

/* ---- deny ---------------------------------------------------------------------------- */

/* TLS and raw TCP cannot carry an explanation before interception: audit, then reset. */
static void conn__deny_reset(struct egress_conn *c, const char *rule, const char *reason)
{
    if (!c->t_decided)
        c->t_decided = al_now_ns();
    atomic_fetch_add(&c->w->e->stats.conns_denied, 1);
    if (c->sb)
        atomic_fetch_add(&c->sb->n_denied, 1);
    conn__audit_decision(c, "deny", rule, reason, NULL);
    egress_conn_close(c, true, reason);
}

/* Allowed, but the upstream could not be reached: the decision as it was, the error, and
 * a reset (what the sandbox would have seen without a proxy). */
static void conn__fail_reset(struct egress_conn *c, const char *error)
{
    atomic_fetch_add(&c->w->e->stats.upstream_errors, 1);
    conn__audit_decision(c, c->verdict.would_deny ? "would_deny" : "allow", c->verdict.rule,
                         c->verdict.reason, error);
    egress_conn_close(c, true, error);
}

/* ---- accept -------------------------------------------------------------------------- */

static void conn__audit_unknown(struct egress_conn *c)
{
    static atomic_uint_fast64_t last;
    struct egress *e = c->w->e;
    atomic_fetch_add(&e->stats.unknown_source, 1);
    if (!egress_audit_throttle(&last, 1000000000ull))
        return;
    json_t *r = egress_rec_new("security_event");
    if (!r)
        return;
    egress_rec_str(r, "event", "unknown_source");
    egress_rec_str(r, "decision", "deny");
    egress_rec_str(r, "reason", "unknown_source");
    egress_rec_str(r, "src", c->src_text);
    egress_rec_str(r, "dst", c->dst_text);
    egress_rec_str(r, "proto", "tcp");
    egress_audit(e, r);
}

static uint64_t conn__sandbox_cap(struct egress_conn *c)
{
    uint64_t cap = c->w->e->cfg.max_conns_per_sandbox;
    uint64_t p = c->policy ? egress_policy_max_connections(c->policy) : 0;
    if (p && p < cap)
        cap = p;
    return cap;
}

static void conn__limit_event(struct egress_conn *c, const char *reason)
{
    if (!c->sb || !egress_audit_throttle(&c->sb->last_limit_audit_ns, 1000000000ull)) {
        if (c->sb)
            atomic_fetch_add(&c->sb->limit_events, 1);
        return;
    }
    struct egress_recw w;
    conn__record(c, &w, "security_event");
    egress_recw_str(&w, "event", "limit");
    egress_recw_str(&w, "decision", "deny");
    egress_recw_str(&w, "reason", reason);
    egress_recw_int(&w, "suppressed", (int64_t)atomic_exchange(&c->sb->limit_events, 0));
    egress_recw_int(&w, "sandbox_connections", (int64_t)atomic_load(&c->sb->conns));
    egress_audit_w(c->w->e, &w);
}

/* A connection the sandbox holds (not reset at once): the peak it reached. */
static void conn__peak(struct egress_sandbox *sb, uint32_t conns)
{
    unsigned cur = atomic_load(&sb->conns_peak);
    while (conns > cur && !atomic_compare_exchange_weak(&sb->conns_peak, &cur, conns))
        ;
}

void egress_conn_accept(struct egress_worker *w, int fd, const struct sockaddr_storage *peer)
{
    struct egress *e = w->e;
    atomic_fetch_add(&e->stats.conns_accepted, 1);
    struct egress_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->w = w;
    c->client.fd = -1;
    c->upstream.fd = -1;
    c->t_accept = al_now_ns();
    c->state = CONN_PEEK;
    uv_timer_init(&w->loop, &c->timer);
    c->timer.data = c;
    c->handles_open = 1;
    if (conn__end_init(c, &c->client, fd) < 0) {
        close(fd);
        c->client.fd = -1;
    }
    /* Link in first so that egress_conn_close can always be used. */
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    w->n_conns++;
    atomic_fetch_add(&e->stats.conns_active, 1);
    egress_new_request_id(e, c->request_id);
    if (c->client.fd < 0) {
        egress_conn_close(c, true, "internal_error");
        return;
    }

    /* The peer address from accept4; the original destination is the local address (the
     * transparent listener, or the vswitch's sk_assign). TCP_NODELAY comes from the
     * listener. */
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &l) < 0) {
        egress_conn_close(c, true, "peer_gone");
        return;
    }
    egress_ip_from_sockaddr((const struct sockaddr *)peer, &c->src, &c->src_port);
    egress_ip_from_sockaddr((struct sockaddr *)&ss, &c->dst, &c->dst_port);
    egress_endpoint_text(&c->src, c->src_port, c->src_text, sizeof c->src_text);
    egress_endpoint_text(&c->dst, c->dst_port, c->dst_text, sizeof c->dst_text);

    c->sb = egress_registry_by_addr(e->reg, &c->src);
    if (!c->sb) {
        conn__audit_unknown(c);
        egress_conn_close(c, true, "unknown_source");
        return;
    }
    c->policy = egress_sandbox_policy_gen(c->sb, &c->net_gen);
    uint32_t conns = atomic_fetch_add(&c->sb->conns, 1) + 1;
    c->counted = true;

    /* Decisions that do not need the first bytes. They still wait for them, so that an
     * HTTP client gets a JSON answer with the reason (429, 503, 403). */
    const char *early = NULL;
    uint64_t cap = conn__sandbox_cap(c);
    uint64_t active = atomic_load(&e->stats.conns_active);
    if (!c->policy)
        early = "no_policy";
    else if (!egress_audit_ok(e->audit))
        early = "audit_unavailable";
    else if (active > e->cfg.max_conns)
        early = "proxy_connection_limit";
    else if (conns > cap)
        early = "sandbox_connection_limit";
    if (early) {
        bool limit = strstr(early, "limit") != NULL;
        if (limit) {
            atomic_fetch_add(strcmp(early, "sandbox_connection_limit") == 0
                                 ? &e->stats.limit_sandbox
                                 : &e->stats.limit_global,
                             1);
            conn__limit_event(c, early);
            /* Far beyond the cap: no more work for this one. */
            if (conns > cap + REJECT_SLACK || active > e->cfg.max_conns + REJECT_SLACK) {
                egress_conn_close(c, true, early);
                return;
            }
        } else if (strcmp(early, "audit_unavailable") == 0) {
            atomic_fetch_add(&e->stats.audit_denied, 1);
        }
        c->verdict.reason = early;
        c->verdict.allow = false;
    } else if (c->dst_port != 0) {
        /* Raw TCP opened by a CIDR rule: connect at once (server-first protocols). */
        struct egress_query q = {.dst = &c->dst, .port = c->dst_port, .scheme = EGRESS_SCHEME_TCP};
        struct egress_verdict v;
        egress_decide(c->policy, &q, &v);
        if (v.allow && !v.would_deny && !egress_is_self(e, &c->dst)) {
            c->proto = PROTO_TCP;
            c->verdict = v;
            c->t_decided = al_now_ns();
            egress_conn_set_dialled(c, &c->dst);
            conn__peak(c->sb, conns);
            conn__start_connect(c);
            return;
        }
    }
    conn__peak(c->sb, conns);
    egress_conn_deadline(c, e->cfg.header_timeout_ms);
    /* A TLS or HTTP client speaks right after the handshake, so its first bytes are usually
     * here already: read them now, and let epoll watch the socket only when they are not
     * (two epoll_ctl fewer per connection). */
    conn__peek_read(c);
    if (c->state != CONN_PEEK || c->classified)
        return;
    if (c->in_len == 0 && c->in) {
        /* Nothing yet: a silent client holds no buffer until it speaks. */
        egress_mem_give(e, c->sb, c->in_cap);
        free(c->in);
        c->in = NULL;
        c->in_cap = 0;
    }
    egress_conn_set_events(&c->client, UV_READABLE);
}

/* ---- classification and decisions ------------------------------------------------------ */

static bool conn__looks_http(const uint8_t *p, size_t n)
{
    /* A request line starts with a method token: upper-case letters, then a space. */
    size_t i = 0;
    while (i < n && i < 24 && p[i] >= 'A' && p[i] <= 'Z')
        i++;
    if (i == n)
        return n > 0 && n < 24; /* undecided yet: treat as HTTP until proven otherwise */
    return i > 0 && p[i] == ' ';
}

static void conn__on_dst_checked(struct egress_conn *c, bool ok, const char *reason);
static void conn__on_dst_checked_inspect(struct egress_conn *c, bool ok, const char *reason);

static void conn__decide_tls(struct egress_conn *c)
{
    struct egress *e = c->w->e;
    const struct egress_clienthello *ch = c->ch;
    c->t_decided = al_now_ns();
    if (c->verdict.reason && !c->verdict.allow) {
        conn__deny_reset(c, NULL, c->verdict.reason);
        return;
    }
    if (ch->has_ech || ch->has_esni) {
        conn__deny_reset(c, NULL, "ech_present");
        return;
    }
    struct egress_query q = {.dst = &c->dst, .port = c->dst_port, .scheme = EGRESS_SCHEME_TLS};
    if (ch->has_sni) {
        struct al_error err = {0};
        if (egress_canon_host(ch->sni, ch->sni_len, &c->host, &err) < 0) {
            conn__deny_reset(c, NULL, "invalid_sni");
            return;
        }
        c->have_host = true;
        if (c->host.kind == EGRESS_HOST_IP) {
            conn__deny_reset(c, NULL, "sni_is_ip_literal");
            return;
        }
        q.host = c->host.text;
        q.host_len = c->host.len;
    }
    egress_decide(c->policy, &q, &c->verdict);
    c->t_decided = al_now_ns();
    if (!c->verdict.allow) {
        conn__deny_reset(c, c->verdict.rule,
                         !ch->has_sni && strcmp(c->verdict.reason, "no_rule_matched") == 0
                             ? "sni_missing"
                             : c->verdict.reason);
        return;
    }
    if (c->verdict.tls == EGRESS_TLS_INSPECT) {
        /* Interception (inspect.c): the name must be known and its destination checked like
         * any other; the session dials only the checked address. */
        if (egress_is_self(e, &c->dst)) {
            conn__deny_reset(c, c->verdict.rule, "proxy_address");
            return;
        }
        if (!ch->has_sni || c->verdict.by_address) {
            conn__deny_reset(c, c->verdict.rule, "interception_needs_sni");
            return;
        }
        egress_check_destination(c, &c->host, conn__on_dst_checked_inspect);
        return;
    }
    if (egress_is_self(e, &c->dst)) {
        conn__deny_reset(c, c->verdict.rule, "proxy_address");
        return;
    }
    if (!ch->has_sni || c->verdict.by_address) {
        /* Allowed by an address rule: the destination is what the rule names. */
        conn__on_dst_checked(c, true, NULL);
        return;
    }
    egress_check_destination(c, &c->host, conn__on_dst_checked);
}

static void conn__on_dst_checked(struct egress_conn *c, bool ok, const char *reason)
{
    if (!ok) {
        conn__deny_reset(c, c->verdict.rule, reason);
        return;
    }
    egress_conn_set_dialled(c, &c->dst);
    conn__start_connect(c);
}

/* INSPECT: the destination is the name's; the session takes the connection over. */
static void conn__on_dst_checked_inspect(struct egress_conn *c, bool ok, const char *reason)
{
    if (!ok) {
        conn__deny_reset(c, c->verdict.rule, reason);
        return;
    }
    egress_conn_set_dialled(c, &c->dst);
    egress_conn_no_deadline(c);
    const char *why = NULL;
    if (egress_inspect_conn_start(c, &why) < 0) {
        /* A TLS alert went out (access_denied or internal_error): audit, then close without
         * a reset so that the sandbox reads it. */
        atomic_fetch_add(&c->w->e->stats.conns_denied, 1);
        if (c->sb)
            atomic_fetch_add(&c->sb->n_denied, 1);
        conn__audit_decision(c, "deny", c->verdict.rule, why, NULL);
        egress_conn_close(c, false, why);
        return;
    }
    if (c->state == CONN_CLOSING)
        return; /* the session ended at once */
    c->allowed = true;
    atomic_fetch_add(&c->w->e->stats.conns_allowed, 1);
    conn__audit_decision(c, c->verdict.would_deny ? "would_deny" : "allow", c->verdict.rule,
                         c->verdict.reason, NULL);
    free(c->ch);
    c->ch = NULL;
    conn__free_in(c); /* the session copied the ClientHello */
}

static void conn__decide_tcp(struct egress_conn *c)
{
    c->proto = PROTO_TCP;
    c->t_decided = al_now_ns();
    if (c->verdict.reason && !c->verdict.allow) {
        conn__deny_reset(c, NULL, c->verdict.reason);
        return;
    }
    struct egress_query q = {.dst = &c->dst, .port = c->dst_port, .scheme = EGRESS_SCHEME_TCP};
    egress_decide(c->policy, &q, &c->verdict);
    if (!c->verdict.allow) {
        conn__deny_reset(c, c->verdict.rule,
                         strcmp(c->verdict.reason, "no_rule_matched") == 0 ? "unrecognised_protocol"
                                                                           : c->verdict.reason);
        return;
    }
    if (egress_is_self(c->w->e, &c->dst)) {
        conn__deny_reset(c, c->verdict.rule, "proxy_address");
        return;
    }
    egress_conn_set_dialled(c, &c->dst);
    conn__start_connect(c);
}

static void conn__classify(struct egress_conn *c)
{
    if (c->in_len == 0)
        return;
    if (c->in[0] == 0x16) {
        c->proto = PROTO_TLS;
        if (!c->ch && !(c->ch = malloc(sizeof *c->ch))) {
            conn__deny_reset(c, NULL, "out_of_memory");
            return;
        }
        int rc = egress_clienthello_parse(c->in, c->in_len, c->ch);
        if (rc == EGRESS_CH_MORE)
            return;
        if (rc < 0) {
            conn__deny_reset(c, NULL,
                             rc == EGRESS_CH_TOO_LARGE ? "clienthello_too_large"
                                                       : "malformed_clienthello");
            return;
        }
        c->classified = true;
        egress_conn_no_deadline(c);
        egress_conn_set_events(&c->client, 0);
        conn__decide_tls(c);
        return;
    }
    if (conn__looks_http(c->in, c->in_len)) {
        c->proto = PROTO_HTTP;
        c->classified = true;
        egress_conn_set_events(&c->client, 0);
        if (egress_http_start(c) < 0)
            egress_conn_close(c, true, "internal_error");
        return;
    }
    c->classified = true;
    egress_conn_set_events(&c->client, 0);
    egress_conn_no_deadline(c);
    conn__decide_tcp(c);
}

static int conn__grow_in(struct egress_conn *c, size_t max)
{
    size_t ncap = c->in_cap ? c->in_cap * 2 : PEEK_INITIAL;
    if (ncap > max)
        ncap = max;
    if (ncap <= c->in_cap)
        return -E2BIG;
    if (!egress_mem_take(c->w->e, c->sb, ncap - c->in_cap))
        return -ENOBUFS;
    uint8_t *n = realloc(c->in, ncap);
    if (!n) {
        egress_mem_give(c->w->e, c->sb, ncap - c->in_cap);
        return -ENOMEM;
    }
    c->in = n;
    c->in_cap = ncap;
    return 0;
}

static void conn__peek_read(struct egress_conn *c)
{
    struct egress *e = c->w->e;
    size_t max = EGRESS_CH_MAX_BUFFER;
    if (e->cfg.max_header_bytes + 1 > max)
        max = e->cfg.max_header_bytes + 1;
    for (;;) {
        if (c->in_len == c->in_cap) {
            int rc = conn__grow_in(c, max);
            if (rc == -E2BIG) {
                /* Neither a complete ClientHello nor an HTTP head within the bounds. */
                conn__classify(c);
                if (c->state == CONN_PEEK)
                    conn__deny_reset(c, NULL, "first_bytes_too_large");
                return;
            }
            if (rc < 0) {
                atomic_fetch_add(&e->stats.limit_memory, 1);
                conn__limit_event(c, "memory_budget");
                conn__deny_reset(c, NULL, "memory_budget");
                return;
            }
        }
        ssize_t n = read(c->client.fd, c->in + c->in_len, c->in_cap - c->in_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            if (c->in_len == 0) {
                c->proto = PROTO_UNKNOWN;
                conn__deny_reset(c, NULL, n == 0 ? "closed_before_data" : "reset_before_data");
            } else {
                conn__deny_reset(c, NULL, "closed_before_complete");
            }
            return;
        }
        if (!c->t_first)
            c->t_first = al_now_ns();
        c->in_len += (size_t)n;
        if (c->in_len < c->in_cap)
            break;
    }
    conn__classify(c);
}

/* ---- destination check -------------------------------------------------------------- */

static egress_dst_check_cb conn__dst_cb_of(struct egress_conn *c)
{
    return (egress_dst_check_cb)c->rreq.data;
}

static bool conn__in_resolution(const struct egress_resolution *res, const struct egress_ip *ip)
{
    for (size_t i = 0; i < res->n; i++)
        if (egress_ip_equal(&res->ips[i], ip))
            return true;
    return false;
}

static void conn__dst_resolved(struct egress_resolve_req *req, const struct egress_resolution *res)
{
    struct egress_conn *c =
        (struct egress_conn *)((char *)req - offsetof(struct egress_conn, rreq));
    egress_dst_check_cb done = conn__dst_cb_of(c);
    c->resolving = false;
    c->t_dns = al_now_ns();
    if (res->status < 0) {
        done(c, false, res->status == -ETIMEDOUT ? "resolution_timeout" : "resolution_failed");
        return;
    }
    if (!conn__in_resolution(res, &c->dst)) {
        done(c, false, res->n ? "destination_mismatch" : "destination_not_resolved");
        return;
    }
    egress_sandbox_remember(c->sb, c->host.text, res->ips, res->n,
                            res->ttl > c->w->e->cfg.dns_remember_s ? res->ttl
                                                                   : c->w->e->cfg.dns_remember_s);
    done(c, true, NULL);
}

void egress_check_destination(struct egress_conn *c, const struct egress_host *host,
                              egress_dst_check_cb done)
{
    if (host->kind == EGRESS_HOST_IP) {
        done(c, egress_ip_equal(&host->ip, &c->dst), "address_mismatch");
        return;
    }
    if (egress_sandbox_answered(c->sb, host->text, &c->dst)) {
        done(c, true, NULL);
        return;
    }
    if (!c->w->resolver) {
        done(c, false, "destination_not_resolved");
        return;
    }
    if (host != &c->host)
        c->host = *host;
    c->t_dns0 = al_now_ns();
    c->rreq.cb = conn__dst_resolved;
    c->rreq.data = (void *)done;
    struct egress_resolution res;
    uint16_t qtype = c->dst.family == 4 ? DNS_T_A : DNS_T_AAAA;
    int rc = egress_resolve(c->w->resolver, egress_sandbox_rcache(c->sb, &c->w->e->cfg),
                            c->host.text, qtype, &c->rreq, &res);
    if (rc == 1) {
        conn__dst_resolved(&c->rreq, &res);
        return;
    }
    c->resolving = true;
    c->state = CONN_RESOLVE;
}

/* ---- upstream connect ----------------------------------------------------------------- */

void egress_conn_set_dialled(struct egress_conn *c, const struct egress_ip *ip)
{
    c->dialled = *ip;
    egress_endpoint_text(ip, c->dst_port, c->dialled_text, sizeof c->dialled_text);
}

int egress_dial(struct egress *e, const struct egress_ip *ip, uint16_t port)
{
    struct sockaddr_storage ss;
    socklen_t l;
    egress_sockaddr_from_ip(ip, port, &ss, &l);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (e->cfg.upstream_mark)
        setsockopt(fd, SOL_SOCKET, SO_MARK, &e->cfg.upstream_mark, sizeof e->cfg.upstream_mark);
    if (connect(fd, (struct sockaddr *)&ss, l) < 0 && errno != EINPROGRESS) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

int egress_conn_connect(struct egress_conn *c)
{
    struct egress *e = c->w->e;
    int fd = egress_dial(e, &c->dialled, c->dst_port);
    if (fd < 0)
        return fd;
    int rc = conn__end_init(c, &c->upstream, fd);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    c->t_connect0 = al_now_ns();
    c->state = CONN_CONNECT;
    egress_conn_set_events(&c->upstream, UV_WRITABLE);
    egress_conn_deadline(c, e->cfg.connect_timeout_ms);
    return 0;
}

void egress_conn_adopt_upstream(struct egress_conn *c, int fd, uint64_t slot)
{
    struct egress_end *u = &c->upstream;
    conn__end_init(c, u, fd);
    u->eof = u->shut_wr = false;
    if (slot) {
        /* Registered as the pool left it: readable is what it asks for (no epoll_ctl). */
        egress_slot_set(c->w, slot, u);
        u->slot = slot;
        u->registered = true;
        u->events = UV_READABLE;
    }
    c->state = CONN_HTTP;
}

uint64_t egress_conn_release_upstream(struct egress_conn *c)
{
    struct egress_end *u = &c->upstream;
    uint64_t slot = u->slot;
    bool fresh = !slot;
    if (fresh)
        slot = egress_slot_new(c->w);
    if (slot) {
        egress_slot_set(c->w, slot, NULL);
        /* Reading is watched, as the response was read: the same interest under the same
         * slot costs nothing; else one epoll_ctl where DEL here and ADD at the next take
         * would have been two. */
        if (fresh || !u->registered || u->events != UV_READABLE) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = slot};
            if (epoll_ctl(c->w->ep, u->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, u->fd, &ev) <
                0) {
                egress_slot_free(c->w, slot);
                slot = 0;
            } else {
                u->registered = true;
            }
        }
    }
    if (!slot && u->registered)
        epoll_ctl(c->w->ep, EPOLL_CTL_DEL, u->fd, NULL);
    u->fd = -1;
    u->registered = false;
    u->events = 0;
    u->slot = 0;
    return slot;
}

void egress_conn_drop_upstream(struct egress_conn *c)
{
    conn__close_end(c, &c->upstream, false); /* which takes it out of the epoll set */
    c->upstream.eof = c->upstream.shut_wr = false;
}

static void conn__start_connect(struct egress_conn *c)
{
    int rc = egress_conn_connect(c);
    if (rc < 0) {
        if (c->proto == PROTO_HTTP) {
            atomic_fetch_add(&c->w->e->stats.upstream_errors, 1);
            egress_http_on_connected(c, rc);
            return;
        }
        conn__fail_reset(c, "upstream_connect_failed");
    }
}

/* The upstream's connect finished (epoll_events: what epoll reported). A failed connect
 * sets the socket's error, which epoll reports as EPOLLERR: writable without it is a
 * connection made, and only a reported error is asked for (a getsockopt fewer per
 * connection). */
static void conn__connected(struct egress_conn *c, uint32_t epoll_events)
{
    int err = 0;
    socklen_t l = sizeof err;
    if ((epoll_events & (EPOLLERR | EPOLLHUP)) &&
        getsockopt(c->upstream.fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
        err = errno;
    if (err == 0)
        c->t_connected = al_now_ns();
    egress_conn_no_deadline(c);
    if (c->proto == PROTO_HTTP) {
        egress_http_on_connected(c, -err);
        return;
    }
    if (err) {
        conn__fail_reset(c,
                         err == ETIMEDOUT ? "upstream_connect_timeout" : "upstream_connect_failed");
        return;
    }
    /* Allowed: audit the decision now that the dial succeeded, then relay. */
    c->allowed = true;
    atomic_fetch_add(&c->w->e->stats.conns_allowed, 1);
    atomic_fetch_add(&c->sb->n_allowed, 1);
    conn__audit_decision(c, c->verdict.would_deny ? "would_deny" : "allow", c->verdict.rule,
                         c->verdict.reason, NULL);
    free(c->ch);
    c->ch = NULL;
    /* The first bytes go upstream first, then the relay takes over. */
    egress_relay_init(c);
    int rc = al_relay_prime(&c->relay, 0, c->in, c->in_len);
    conn__free_in(c);
    if (rc < 0) {
        egress_conn_close(c, true, "out_of_memory");
        return;
    }
    c->state = CONN_RELAY;
    egress_relay_start(c);
}

/* ---- events ------------------------------------------------------------------------- */

void egress_conn_on_events(struct egress_end *end, uint32_t epoll_events)
{
    struct egress_conn *c = end->c;
    if (c->state == CONN_CLOSING || end->fd < 0)
        return;
    int events = 0;
    if (epoll_events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        events |= UV_READABLE;
    if (epoll_events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
        events |= UV_WRITABLE;
    if (end->events == 0) {
        /* Nothing was asked of this socket: only a hang-up or an error wakes it, and with
         * level-triggered epoll it would keep doing so. The peer is gone: so is the
         * connection. */
        if (epoll_events & (EPOLLHUP | EPOLLERR))
            egress_conn_close(c, true, end == &c->client ? "client_reset" : "upstream_reset");
        return;
    }
    events &= end->events; /* only what was asked for (an error shows up as both) */
    if (!events)
        return;
    switch (c->state) {
    case CONN_PEEK:
        if (end == &c->client && (events & UV_READABLE))
            conn__peek_read(c);
        break;
    case CONN_CONNECT:
        if (end == &c->upstream && (events & UV_WRITABLE))
            conn__connected(c, epoll_events);
        break;
    case CONN_RELAY:
        egress_relay_on_event(c, end, events);
        break;
    case CONN_HTTP:
    case CONN_DRAIN:
        egress_http_on_event(c, end, events);
        break;
    case CONN_INSPECT:
        egress_inspect_on_events(c, end, events);
        break;
    default:
        egress_conn_set_events(end, 0);
        break;
    }
}

static void conn__on_timer(uv_timer_t *t)
{
    struct egress_conn *c = t->data;
    struct egress *e = c->w->e;
    uint64_t now = uv_now(&c->w->loop);
    if (!c->due_ms)
        return; /* the deadline was lifted */
    if (now < c->due_ms) {
        /* Moved later since the timer was armed. */
        uv_timer_start(&c->timer, conn__on_timer, c->due_ms - now, 0);
        c->armed_ms = c->due_ms;
        return;
    }
    c->due_ms = 0;
    switch (c->state) {
    case CONN_PEEK:
        atomic_fetch_add(&e->stats.timeouts, 1);
        if (c->proto == PROTO_HTTP || (c->in_len && conn__looks_http(c->in, c->in_len))) {
            egress_http_on_timeout(c);
            return;
        }
        conn__deny_reset(c, NULL, c->in_len ? "handshake_timeout" : "no_data_timeout");
        break;
    case CONN_CONNECT:
        atomic_fetch_add(&e->stats.timeouts, 1);
        atomic_fetch_add(&e->stats.upstream_errors, 1);
        if (c->proto == PROTO_HTTP) {
            egress_http_on_connected(c, -ETIMEDOUT);
            return;
        }
        conn__fail_reset(c, "upstream_connect_timeout");
        break;
    case CONN_RELAY:
        if (egress_relay_on_timeout(c)) {
            atomic_fetch_add(&e->stats.timeouts, 1);
            egress_conn_close(c, true, "idle_timeout");
        }
        break;
    case CONN_HTTP:
    case CONN_DRAIN:
        egress_http_on_timeout(c);
        break;
    case CONN_INSPECT:
        egress_inspect_on_timeout(c);
        break;
    default:
        break;
    }
}
