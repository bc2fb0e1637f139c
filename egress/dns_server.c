/* egress/dns_server: the sandboxes' DNS (UDP and TCP, transparent: whatever resolver
 * address a sandbox asks, the vswitch hands the query to us and we answer from that
 * address).
 *
 * Owns: per query, identify the sandbox by source address; refuse exfiltration shapes
 * (non-hostname bytes, over-long names or labels, high-entropy labels, TXT/NULL/ANY to
 * names the policy does not know) with an audited security event; answer A/AAAA only for
 * names the sandbox's policy lets it resolve (others NXDOMAIN, other types REFUSED);
 * resolve through the configured upstream (resolver.c, in the sandbox's own cache, TTLs
 * clamped); drop
 * answers that point at internal addresses (DNS rebinding) unless a CIDR rule opens them,
 * and at the proxy's own addresses; remember what was handed out for the destination
 * check of later connections; one audit record per query, within the sandbox's limits
 * (ratelimit.c: a query rate, a share of the resolutions in flight, identical denials
 * counted beyond a rate; over them REFUSED and one aggregated record per second).
 */
#include "internal.h"
#include "ratelimit.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"

#define UDP_BATCH       32
#define TCP_DNS_MAX_MSG 4096 /* a query longer than this over TCP is not a query */
#define TCP_DNS_IDLE_MS 10000
#define TCP_DNS_PER_SB  16

struct dns_tcp;

struct dns_ctx {
    struct egress_worker *w;
    struct dns_ctx *prev, *next;
    struct egress_sandbox *sb;
    struct egress_policy *p;
    struct dns_query q;
    struct egress_host name;
    char rid[32];
    char rule_name[128];
    uint64_t t0;
    struct egress_resolve_req rreq;
    bool resolving;
    bool inflight; /* holds one of the sandbox's in-flight slots */
    /* Where the answer goes. */
    struct dns_tcp *tcp; /* TCP, or: */
    int udp_fd;
    uint16_t udp_port; /* the listener's port */
    struct sockaddr_storage client;
    socklen_t client_len;
    struct egress_ip src, odst;
    uint16_t src_port, odst_port;
};

struct dns_tcp {
    struct egress_worker *w;
    struct dns_tcp *prev, *next;
    int fd;
    uv_poll_t poll;
    uv_timer_t timer;
    int handles;
    bool closing;
    struct egress_sandbox *sb;
    struct egress_ip src, odst;
    uint16_t src_port, odst_port;
    uint8_t in[2 + TCP_DNS_MAX_MSG];
    size_t in_len;
    struct al_buf out;
    struct dns_ctx *busy; /* the query being answered (one at a time) */
    bool eof;
    bool broken;
};

struct egress_dns_state {
    struct dns_ctx *ctxs;
    struct dns_tcp *tcps;
};

static struct egress_dns_state *dns__state(struct egress_worker *w)
{
    if (!w->dns)
        w->dns = calloc(1, sizeof *w->dns);
    return w->dns;
}

static void dns__tcp_reply(struct dns_tcp *t, const uint8_t *msg, size_t len);
static void dns__tcp_close(struct dns_tcp *t);

/* ---- replies ---------------------------------------------------------------------------- */

/* Sends a UDP reply from the address the sandbox asked (its original destination). */
static void dns__udp_send(struct dns_ctx *x, const uint8_t *msg, size_t len)
{
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {
        .msg_name = &x->client, .msg_namelen = x->client_len, .msg_iov = &iov, .msg_iovlen = 1};
    if (x->odst.family && x->odst_port != x->udp_port) {
        /* The sandbox asked another port (53) than ours: answer from a transparent socket
         * bound to exactly what it asked. */
        struct sockaddr_storage from;
        socklen_t fl;
        egress_sockaddr_from_ip(&x->odst, x->odst_port, &from, &fl);
        int s = socket(from.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return;
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (from.ss_family == AF_INET6)
            setsockopt(s, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one);
        else
            setsockopt(s, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
        uint32_t mark = x->w->e->cfg.reply_mark;
        if (mark)
            setsockopt(s, SOL_SOCKET, SO_MARK, &mark, sizeof mark);
        if (bind(s, (struct sockaddr *)&from, fl) == 0)
            sendmsg(s, &mh, MSG_DONTWAIT);
        close(s);
        return;
    }
    char cbuf[CMSG_SPACE(sizeof(struct in6_pktinfo))];
    memset(cbuf, 0, sizeof cbuf);
    if (x->odst.family == 4) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE(sizeof(struct in_pktinfo));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = IPPROTO_IP;
        cm->cmsg_type = IP_PKTINFO;
        cm->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
        struct in_pktinfo *pi = (struct in_pktinfo *)CMSG_DATA(cm);
        memcpy(&pi->ipi_spec_dst, x->odst.addr, 4);
    } else if (x->odst.family == 6) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE(sizeof(struct in6_pktinfo));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = IPPROTO_IPV6;
        cm->cmsg_type = IPV6_PKTINFO;
        cm->cmsg_len = CMSG_LEN(sizeof(struct in6_pktinfo));
        struct in6_pktinfo *pi = (struct in6_pktinfo *)CMSG_DATA(cm);
        memcpy(&pi->ipi6_addr, x->odst.addr, 16);
    }
    sendmsg(x->udp_fd, &mh, MSG_DONTWAIT);
}

static void dns__send(struct dns_ctx *x, const struct dns_reply *r)
{
    uint8_t out[DNS_MAX_UDP + 512];
    size_t max = x->tcp ? sizeof out : x->q.edns_udp_size;
    int len = dns_build_reply(&x->q, r, max, out, sizeof out);
    if (len < 0)
        return;
    if (x->tcp)
        dns__tcp_reply(x->tcp, out, (size_t)len);
    else
        dns__udp_send(x, out, (size_t)len);
}

/* ---- audit -------------------------------------------------------------------------------- */

static json_t *dns__record(struct dns_ctx *x, const char *type)
{
    json_t *r = egress_rec_new(type);
    if (!r)
        return NULL;
    egress_rec_sandbox(r, x->sb, x->p);
    egress_rec_str(r, "request_id", x->rid);
    egress_rec_str(r, "proto", x->tcp ? "dns_tcp" : "dns");
    char t[80];
    egress_endpoint_text(&x->src, x->src_port, t, sizeof t);
    egress_rec_str(r, "src", t);
    if (x->odst.family) {
        egress_endpoint_text(&x->odst, x->odst_port, t, sizeof t);
        egress_rec_str(r, "dst", t);
    }
    egress_rec_str(r, "qname", x->q.qname);
    egress_rec_str(r, "qtype", dns_type_name(x->q.qtype));
    return r;
}

/* The record of a query answered with ans (ans->addrs NULL: no answers to list, as for a
 * refusal; cached: they came from the resolver's cache). */
static void dns__audit_query(struct dns_ctx *x, const char *decision, const char *rule,
                             const char *reason, const struct dns_reply *ans, bool cached)
{
    struct egress_audit_event ev = {.type = "dns_query",
                                    .decision = decision,
                                    .rule = rule,
                                    .reason = reason,
                                    .host = x->q.qname,
                                    .request_id = x->rid,
                                    .policy = x->p};
    if (!egress_audit_budget(x->w->e, x->sb, &ev))
        return;
    json_t *r = dns__record(x, "dns_query");
    if (!r)
        return;
    egress_rec_str(r, "decision", decision);
    egress_rec_str(r, "reason", reason);
    egress_rec_str(r, "rule", rule);
    egress_rec_str(r, "mode", x->p && egress_policy_report_mode(x->p) ? "report" : "enforce");
    egress_rec_str(r, "rcode", dns_rcode_name(ans->rcode));
    if (ans->addrs) {
        json_t *a = json_array();
        for (size_t i = 0; i < ans->n_addrs; i++) {
            char t[64];
            struct egress_ip ip = {.family = ans->addrs[i].family};
            memcpy(ip.addr, ans->addrs[i].addr, 16);
            egress_ip_text(&ip, t, sizeof t);
            json_array_append_new(a, json_string(t));
        }
        json_object_set_new(r, "answers", a);
        egress_rec_int(r, "ttl", ans->ttl);
        egress_rec_bool(r, "cached", cached);
    }
    json_t *tm = json_object();
    egress_rec_us(tm, "dns", al_now_ns() - x->t0);
    json_object_set_new(r, "timing_us", tm);
    egress_audit(x->w->e, r);
}

static void dns__security_event(struct dns_ctx *x, const char *event, const char *reason,
                                const char *detail)
{
    json_t *r = dns__record(x, "security_event");
    if (!r)
        return;
    egress_rec_str(r, "event", event);
    egress_rec_str(r, "decision", "deny");
    egress_rec_str(r, "reason", reason);
    if (detail)
        egress_rec_str(r, "detail", detail);
    egress_audit(x->w->e, r);
}

/* ---- queries ----------------------------------------------------------------------------- */

static void dns__ctx_free(struct dns_ctx *x)
{
    struct egress_dns_state *st = x->w->dns;
    if (x->resolving)
        egress_resolve_cancel(&x->rreq);
    if (x->inflight)
        atomic_fetch_sub(&x->sb->dns_inflight, 1);
    if (x->prev)
        x->prev->next = x->next;
    else if (st && st->ctxs == x)
        st->ctxs = x->next;
    if (x->next)
        x->next->prev = x->prev;
    if (x->tcp && x->tcp->busy == x)
        x->tcp->busy = NULL;
    egress_policy_unref(x->p);
    egress_sandbox_put(x->sb);
    free(x);
}

/* Answers with rcode and no records, audits, and frees. */
static void dns__finish_refused(struct dns_ctx *x, uint8_t rcode, const char *decision,
                                const char *rule, const char *reason)
{
    struct egress *e = x->w->e;
    if (rcode == DNS_R_REFUSED)
        atomic_fetch_add(&e->stats.dns_refused, 1);
    else if (strcmp(decision, "deny") == 0)
        atomic_fetch_add(&e->stats.dns_denied, 1);
    struct dns_reply ans = {.rcode = rcode};
    dns__send(x, &ans);
    dns__audit_query(x, decision, rule, reason, &ans, false);
    dns__ctx_free(x);
}

/* Exfiltration shapes: NULL when the name looks like a host name, else the reason. */
static const char *dns__shape(const struct egress_config *cfg, const struct dns_query *q,
                              char *detail, size_t dlen)
{
    if (!q->qname_ldh)
        return "non_hostname_bytes";
    size_t len = strlen(q->qname);
    if (len > cfg->dns_max_name) {
        snprintf(detail, dlen, "name of %zu characters (limit %u)", len, cfg->dns_max_name);
        return "name_too_long";
    }
    if (q->longest_label > cfg->dns_max_label) {
        snprintf(detail, dlen, "label of %zu characters (limit %u)", q->longest_label,
                 cfg->dns_max_label);
        return "label_too_long";
    }
    const char *p = q->qname;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        if (l >= cfg->dns_entropy_min_len) {
            /* Hex is the classic tunnel encoding, and its entropy stays under 4 bits/char:
             * a long label of hex digits mixing letters and digits is refused as such. */
            size_t digits = 0, hex_letters = 0;
            for (size_t i = 0; i < l; i++) {
                if (p[i] >= '0' && p[i] <= '9')
                    digits++;
                else if (p[i] >= 'a' && p[i] <= 'f')
                    hex_letters++;
            }
            if (digits + hex_letters == l && digits * 5 >= l && hex_letters * 5 >= l) {
                snprintf(detail, dlen, "label of %zu hex digits", l);
                return "hex_encoded_label";
            }
            double h = dns_label_entropy(p, l);
            if (h > cfg->dns_entropy_max) {
                snprintf(detail, dlen, "label of %zu characters with %.2f bits/char (limit %.2f)",
                         l, h, cfg->dns_entropy_max);
                return "high_entropy_label";
            }
        }
        if (!dot)
            break;
        p = dot + 1;
    }
    return NULL;
}

static void dns__resolved(struct egress_resolve_req *req, const struct egress_resolution *res);

static void dns__answer(struct dns_ctx *x, const struct egress_resolution *res)
{
    struct egress *e = x->w->e;
    const struct egress_verdict *v = NULL;
    (void)v;
    if (res->status < 0) {
        dns__finish_refused(x, DNS_R_SERVFAIL, "allow", NULL,
                            res->status == -ETIMEDOUT ? "resolution_timeout" : "resolution_failed");
        return;
    }
    if (res->rcode != DNS_R_NOERROR && res->rcode != DNS_R_NXDOMAIN) {
        dns__finish_refused(x, DNS_R_SERVFAIL, "allow", NULL, "upstream_error");
        return;
    }
    /* Keep what may be handed out; drop internal addresses (rebinding) and the proxy's. */
    struct dns_addr keep[DNS_MAX_ANSWERS];
    struct egress_ip kept_ips[DNS_MAX_ANSWERS];
    size_t nk = 0;
    char dropped[512] = "";
    size_t dl = 0;
    for (size_t i = 0; i < res->n; i++) {
        const struct egress_ip *ip = &res->ips[i];
        if ((x->q.qtype == DNS_T_A) != (ip->family == 4))
            continue;
        struct egress_ip_class cls;
        egress_ip_classify(ip, &cls);
        bool self = egress_is_self(e, ip);
        if (self || (cls.internal && !egress_ip_opened(x->p, ip))) {
            char t[64];
            egress_ip_text(ip, t, sizeof t);
            dl +=
                (size_t)snprintf(dropped + dl, dl < sizeof dropped ? sizeof dropped - dl : 0,
                                 "%s%s (%s)", dl ? ", " : "", t, self ? "proxy address" : cls.code);
            if (dl >= sizeof dropped)
                dl = sizeof dropped - 1;
            continue;
        }
        keep[nk].family = ip->family;
        memcpy(keep[nk].addr, ip->addr, 16);
        keep[nk].ttl = res->ttl;
        kept_ips[nk] = *ip;
        nk++;
    }
    if (dropped[0])
        dns__security_event(x, "dns_answer_filtered", "internal_address_in_answer", dropped);
    if (nk)
        egress_sandbox_remember(x->sb, x->name.text, kept_ips, nk,
                                res->ttl > e->cfg.dns_remember_s ? res->ttl
                                                                 : e->cfg.dns_remember_s);
    uint8_t rcode = res->rcode;
    struct dns_reply ans = {rcode, keep, nk, res->ttl};
    dns__send(x, &ans);
    dns__audit_query(x, "allow", x->rule_name[0] ? x->rule_name : NULL,
                     dropped[0] && !nk ? "answers_filtered" : "resolved", &ans, res->from_cache);
    dns__ctx_free(x);
}

static void dns__tcp_process(struct dns_tcp *t);

static void dns__resolved(struct egress_resolve_req *req, const struct egress_resolution *res)
{
    struct dns_ctx *x = (struct dns_ctx *)((char *)req - offsetof(struct dns_ctx, rreq));
    x->resolving = false;
    struct dns_tcp *t = x->tcp;
    dns__answer(x, res);
    if (t)
        dns__tcp_process(t); /* the next pipelined query, events, close on EOF */
}

/* Decides and answers one parsed query. Takes ownership of x. */
static void dns__handle(struct dns_ctx *x)
{
    struct egress_worker *w = x->w;
    struct egress *e = w->e;
    atomic_fetch_add(&e->stats.dns_queries, 1);
    egress_new_request_id(e, x->rid);
    x->t0 = al_now_ns();
    x->sb = egress_registry_by_addr(e->reg, &x->src);
    if (!x->sb) {
        static atomic_uint_fast64_t last;
        atomic_fetch_add(&e->stats.unknown_source, 1);
        dns__send(x, &(struct dns_reply){.rcode = DNS_R_REFUSED});
        if (egress_audit_throttle(&last, 1000000000ull))
            dns__security_event(x, "unknown_source", "unknown_source", NULL);
        dns__ctx_free(x);
        return;
    }
    atomic_fetch_add(&x->sb->n_dns, 1);
    if (!egress_dns_rate_ok(e, x->sb)) {
        /* Over the sandbox's rate: counted into one aggregated record, not one each. */
        atomic_fetch_add(&e->stats.dns_refused, 1);
        dns__send(x, &(struct dns_reply){.rcode = DNS_R_REFUSED});
        dns__ctx_free(x);
        return;
    }
    x->p = egress_sandbox_policy(x->sb);
    if (!x->p) {
        dns__finish_refused(x, DNS_R_REFUSED, "deny", NULL, "no_policy");
        return;
    }
    if (!egress_audit_ok(e->audit)) {
        atomic_fetch_add(&e->stats.audit_denied, 1);
        dns__finish_refused(x, DNS_R_REFUSED, "deny", NULL, "audit_unavailable");
        return;
    }
    if (x->q.qclass != 1) {
        dns__finish_refused(x, DNS_R_REFUSED, "deny", NULL, "unsupported_class");
        return;
    }
    if (x->q.qname[0] == 0) {
        dns__finish_refused(x, DNS_R_REFUSED, "deny", NULL, "root_query");
        return;
    }
    char detail[160] = "";
    const char *shape = dns__shape(&e->cfg, &x->q, detail, sizeof detail);
    if (shape) {
        atomic_fetch_add(&e->stats.dns_refused, 1);
        dns__security_event(x, "dns_exfiltration_shape", shape, detail[0] ? detail : NULL);
        dns__finish_refused(x, DNS_R_REFUSED, "deny", NULL, shape);
        return;
    }
    struct al_error err = {0};
    if (egress_canon_host(x->q.qname, strlen(x->q.qname), &x->name, &err) < 0) {
        dns__finish_refused(x, DNS_R_NXDOMAIN, "deny", NULL, "invalid_name");
        return;
    }
    if (x->name.kind == EGRESS_HOST_IP) {
        dns__finish_refused(x, DNS_R_NXDOMAIN, "deny", NULL, "ip_literal_name");
        return;
    }
    struct egress_verdict v;
    egress_decide_dns(x->p, x->name.text, x->name.len, &v);
    bool a_or_aaaa = x->q.qtype == DNS_T_A || x->q.qtype == DNS_T_AAAA;
    if (!v.allow) {
        if (x->q.qtype == DNS_T_TXT || x->q.qtype == DNS_T_NULL || x->q.qtype == DNS_T_ANY) {
            dns__security_event(x, "dns_exfiltration_shape", "record_type_to_unknown_name",
                                dns_type_name(x->q.qtype));
            dns__finish_refused(x, DNS_R_REFUSED, "deny", v.rule, "record_type_to_unknown_name");
            return;
        }
        dns__finish_refused(x, a_or_aaaa ? DNS_R_NXDOMAIN : DNS_R_REFUSED, "deny", v.rule,
                            v.reason ? v.reason : "name_not_allowed");
        return;
    }
    if (!a_or_aaaa) {
        dns__finish_refused(x, DNS_R_REFUSED, "deny", v.rule, "unsupported_type");
        return;
    }
    snprintf(x->rule_name, sizeof x->rule_name, "%s", v.rule ? v.rule : "");
    if (!w->resolver) {
        dns__finish_refused(x, DNS_R_SERVFAIL, "allow", v.rule, "no_upstream_resolver");
        return;
    }
    x->rreq.cb = dns__resolved;
    struct egress_resolution res;
    /* The sandbox's share of the upstream resolutions in flight (the resolver's own cap is
     * per worker and shared): beyond it only cached answers are given. */
    x->inflight = true;
    if (atomic_fetch_add(&x->sb->dns_inflight, 1) >= e->cfg.dns_inflight) {
        struct egress_rcache *rc0 = egress_sandbox_rcache(x->sb, &e->cfg);
        if (rc0 && egress_rcache_get(rc0, x->name.text, x->q.qtype, &res)) {
            dns__answer(x, &res);
            return;
        }
        atomic_fetch_add(&e->stats.dns_refused, 1);
        egress_dns_inflight_refused(e, x->sb);
        dns__send(x, &(struct dns_reply){.rcode = DNS_R_REFUSED});
        dns__ctx_free(x);
        return;
    }
    int rc = egress_resolve(w->resolver, egress_sandbox_rcache(x->sb, &e->cfg), x->name.text,
                            x->q.qtype, &x->rreq, &res);
    if (rc == 1) {
        dns__answer(x, &res);
        return;
    }
    x->resolving = true;
}

static struct dns_ctx *dns__ctx_new(struct egress_worker *w)
{
    struct egress_dns_state *st = dns__state(w);
    struct dns_ctx *x = st ? calloc(1, sizeof *x) : NULL;
    if (!x)
        return NULL;
    x->w = w;
    x->next = st->ctxs;
    if (st->ctxs)
        st->ctxs->prev = x;
    st->ctxs = x;
    return x;
}

/* Parses; answers protocol errors at once. Returns true when x should be handled. */
static bool dns__parse(struct dns_ctx *x, const uint8_t *msg, size_t len)
{
    int rc = dns_parse_query(msg, len, &x->q);
    if (rc == DNS_OK)
        return true;
    if (rc == DNS_E_FORMAT || rc == DNS_E_NOTIMP) {
        /* Answer without a question section (it may be what was malformed). */
        struct dns_query q = x->q;
        q.qname_wire_len = 0;
        q.has_edns = false;
        x->q = q;
        dns__send(x,
                  &(struct dns_reply){.rcode = rc == DNS_E_NOTIMP ? DNS_R_NOTIMP : DNS_R_FORMERR});
    }
    /* Responses (QR set) and runts are dropped silently. */
    return false;
}

/* ---- UDP ------------------------------------------------------------------------------------ */

void egress_dns_udp_readable(struct egress_worker *w, struct egress_listener *l)
{
    for (int i = 0; i < UDP_BATCH; i++) {
        uint8_t buf[DNS_MAX_UDP + 1];
        struct sockaddr_storage from;
        char cbuf[512];
        struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
        struct msghdr mh = {.msg_name = &from,
                            .msg_namelen = sizeof from,
                            .msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = cbuf,
                            .msg_controllen = sizeof cbuf};
        ssize_t n = recvmsg(l->fd, &mh, MSG_DONTWAIT);
        if (n < 0)
            return; /* EAGAIN (or an error that the next event reports again) */
        if (mh.msg_flags & MSG_TRUNC)
            continue; /* a query larger than any we answer */
        struct dns_ctx *x = dns__ctx_new(w);
        if (!x)
            return;
        x->udp_fd = l->fd;
        x->udp_port = l->port;
        x->client = from;
        x->client_len = mh.msg_namelen;
        egress_ip_from_sockaddr((struct sockaddr *)&from, &x->src, &x->src_port);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if ((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_ORIGDSTADDR) ||
                (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_ORIGDSTADDR))
                egress_ip_from_sockaddr((struct sockaddr *)CMSG_DATA(cm), &x->odst, &x->odst_port);
        }
        if (dns__parse(x, buf, (size_t)n))
            dns__handle(x);
        else
            dns__ctx_free(x);
    }
}

/* ---- TCP ------------------------------------------------------------------------------------ */

static void dns__tcp_on_closed(uv_handle_t *h)
{
    struct dns_tcp *t = h->data;
    if (--t->handles > 0)
        return;
    close(t->fd);
    al_buf_free(&t->out);
    egress_sandbox_put(t->sb);
    free(t);
}

static void dns__tcp_close(struct dns_tcp *t)
{
    if (t->closing)
        return;
    t->closing = true;
    struct egress_dns_state *st = t->w->dns;
    if (t->busy) {
        struct dns_ctx *x = t->busy;
        t->busy = NULL;
        x->tcp = NULL;
        x->udp_fd = -1;
        dns__ctx_free(x);
    }
    if (t->prev)
        t->prev->next = t->next;
    else if (st && st->tcps == t)
        st->tcps = t->next;
    if (t->next)
        t->next->prev = t->prev;
    if (t->sb)
        atomic_fetch_sub(&t->sb->conns, 1);
    uv_close((uv_handle_t *)&t->poll, dns__tcp_on_closed);
    uv_close((uv_handle_t *)&t->timer, dns__tcp_on_closed);
}

static void dns__tcp_events(struct dns_tcp *t);

/* Never closes by itself (it may run inside a query's processing): a broken connection
 * is marked and closed by the next event. */
static void dns__tcp_flush(struct dns_tcp *t)
{
    while (t->out.len && !t->broken) {
        ssize_t n = send(t->fd, t->out.data, t->out.len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN) {
                t->broken = true;
                t->eof = true;
                al_buf_reset(&t->out);
            }
            return;
        }
        al_buf_consume(&t->out, (size_t)n);
    }
}

static void dns__tcp_reply(struct dns_tcp *t, const uint8_t *msg, size_t len)
{
    uint8_t hdr[2] = {(uint8_t)(len >> 8), (uint8_t)len};
    if (al_buf_append(&t->out, hdr, 2) < 0 || al_buf_append(&t->out, msg, len) < 0) {
        t->broken = true;
        t->eof = true;
        return;
    }
    dns__tcp_flush(t);
}

/* Handles the complete messages in the input, one at a time. */
static void dns__tcp_process(struct dns_tcp *t)
{
    while (!t->closing && !t->busy && t->in_len >= 2) {
        size_t ml = ((size_t)t->in[0] << 8) | t->in[1];
        if (ml == 0 || ml > TCP_DNS_MAX_MSG) {
            dns__tcp_close(t);
            return;
        }
        if (t->in_len < 2 + ml)
            break;
        struct dns_ctx *x = dns__ctx_new(t->w);
        if (!x) {
            dns__tcp_close(t);
            return;
        }
        x->tcp = t;
        x->src = t->src;
        x->src_port = t->src_port;
        x->odst = t->odst;
        x->odst_port = t->odst_port;
        t->busy = x;
        bool ok = dns__parse(x, t->in + 2, ml);
        memmove(t->in, t->in + 2 + ml, t->in_len - 2 - ml);
        t->in_len -= 2 + ml;
        if (ok)
            dns__handle(x); /* may finish at once (busy cleared) or later */
        else
            dns__ctx_free(x);
    }
    if (t->closing)
        return;
    if (t->broken || (t->eof && !t->busy && t->out.len == 0)) {
        dns__tcp_close(t);
        return;
    }
    dns__tcp_events(t);
}

static void dns__tcp_on_timer(uv_timer_t *h)
{
    dns__tcp_close(h->data);
}

static void dns__tcp_on_poll(uv_poll_t *h, int status, int events)
{
    struct dns_tcp *t = h->data;
    if (status < 0) {
        dns__tcp_close(t);
        return;
    }
    if (events & UV_WRITABLE)
        dns__tcp_flush(t);
    if (events & UV_READABLE && !t->eof) {
        ssize_t n = recv(t->fd, t->in + t->in_len, sizeof t->in - t->in_len, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            t->eof = true;
        } else if (n > 0) {
            t->in_len += (size_t)n;
        }
    }
    dns__tcp_process(t);
}

static void dns__tcp_events(struct dns_tcp *t)
{
    int ev = 0;
    if (!t->eof && !t->busy && t->in_len < sizeof t->in)
        ev |= UV_READABLE;
    if (t->out.len)
        ev |= UV_WRITABLE;
    if (ev)
        uv_poll_start(&t->poll, ev, dns__tcp_on_poll);
    else
        uv_poll_stop(&t->poll);
    uv_timer_start(&t->timer, dns__tcp_on_timer, TCP_DNS_IDLE_MS, 0);
}

void egress_dns_tcp_accept(struct egress_worker *w, int fd)
{
    struct egress_dns_state *st = dns__state(w);
    struct dns_tcp *t = st ? calloc(1, sizeof *t) : NULL;
    if (!t) {
        close(fd);
        return;
    }
    t->w = w;
    t->fd = fd;
    al_buf_init(&t->out, 64 * 1024);
    struct sockaddr_storage ss;
    socklen_t l = sizeof ss;
    getpeername(fd, (struct sockaddr *)&ss, &l);
    egress_ip_from_sockaddr((struct sockaddr *)&ss, &t->src, &t->src_port);
    l = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &l);
    egress_ip_from_sockaddr((struct sockaddr *)&ss, &t->odst, &t->odst_port);
    uv_poll_init(&w->loop, &t->poll, fd);
    uv_timer_init(&w->loop, &t->timer);
    t->poll.data = t->timer.data = t;
    t->handles = 2;
    t->next = st->tcps;
    if (st->tcps)
        st->tcps->prev = t;
    st->tcps = t;
    t->sb = egress_registry_by_addr(w->e->reg, &t->src);
    if (t->sb) {
        unsigned n = atomic_fetch_add(&t->sb->conns, 1) + 1;
        if (n > w->e->cfg.max_conns_per_sandbox + TCP_DNS_PER_SB) {
            dns__tcp_close(t);
            return;
        }
    }
    /* Unknown sources are answered REFUSED per query (and audited) like over UDP. */
    dns__tcp_events(t);
}

void egress_dns_close_all(struct egress_worker *w)
{
    struct egress_dns_state *st = w->dns;
    if (!st)
        return;
    while (st->tcps)
        dns__tcp_close(st->tcps);
    while (st->ctxs)
        dns__ctx_free(st->ctxs);
    free(st);
    w->dns = NULL;
}
