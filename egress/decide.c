/* egress/decide: binds decide.h to the policy library (policy/policy.h). Thin on purpose:
 * no matching, canonicalisation or classification happens here. */
#include "decide.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <pthread.h>
#include <sodium.h>

#include "common/json.h"
#include "common/util.h"
#include "common/yaml.h"
#include "policy/policy.h"

/* struct egress_policy is the policy library's struct policy. */
static struct policy *dec__p(const struct egress_policy *p)
{
    return (struct policy *)p;
}

/* ---- compiled policies, by origin and content ------------------------------------------
 *
 * Every registration names its policy (a file, usually one of a few), and parsing and
 * compiling it each time was a quarter of a registration's CPU. A compiled policy is
 * immutable and shared by reference, so the last few are kept by (origin, BLAKE2b of the
 * text): the text is still read every time and decides, an edited file is compiled afresh,
 * and the same text under another origin is another entry (its diagnostics and
 * policy_file() name the origin). */

#define DEC_CACHE_SLOTS 16

struct dec_cached {
    char origin[512];
    unsigned char digest[32];
    struct policy *p;
    uint64_t used;
};

static struct dec_cached dec__cache[DEC_CACHE_SLOTS];
static uint64_t dec__clock;
static pthread_mutex_t dec__mu = PTHREAD_MUTEX_INITIALIZER;

static struct policy *dec__cache_get(const char *origin, const unsigned char digest[32])
{
    struct policy *p = NULL;
    pthread_mutex_lock(&dec__mu);
    for (size_t i = 0; i < DEC_CACHE_SLOTS && !p; i++) {
        struct dec_cached *c = &dec__cache[i];
        if (c->p && strcmp(c->origin, origin) == 0 && memcmp(c->digest, digest, 32) == 0) {
            c->used = ++dec__clock;
            p = policy_ref(c->p);
        }
    }
    pthread_mutex_unlock(&dec__mu);
    return p;
}

static void dec__cache_put(const char *origin, const unsigned char digest[32], struct policy *p)
{
    if (strlen(origin) >= sizeof dec__cache[0].origin)
        return;
    pthread_mutex_lock(&dec__mu);
    struct dec_cached *slot = &dec__cache[0];
    for (size_t i = 0; i < DEC_CACHE_SLOTS; i++) {
        struct dec_cached *c = &dec__cache[i];
        if (c->p && strcmp(c->origin, origin) == 0) { /* an older text of this origin */
            slot = c;
            break;
        }
        if (!c->p || c->used < slot->used)
            slot = c; /* free, or the least recently used */
    }
    struct policy *old = slot->p;
    snprintf(slot->origin, sizeof slot->origin, "%s", origin);
    memcpy(slot->digest, digest, 32);
    slot->p = policy_ref(p);
    slot->used = ++dec__clock;
    pthread_mutex_unlock(&dec__mu);
    if (old)
        policy_unref(old);
}

void egress_policy_cache_clear(void)
{
    pthread_mutex_lock(&dec__mu);
    for (size_t i = 0; i < DEC_CACHE_SLOTS; i++) {
        if (dec__cache[i].p)
            policy_unref(dec__cache[i].p);
        memset(&dec__cache[i], 0, sizeof dec__cache[i]);
    }
    pthread_mutex_unlock(&dec__mu);
}

int egress_policy_load(const char *yaml, size_t len, const char *origin, struct egress_policy **out,
                       struct al_error *err)
{
    struct al_diags d;
    al_diags_init(&d);
    char *text = NULL;
    struct policy *p = NULL;
    if (!origin)
        origin = "policy";
    if (!yaml) {
        /* A file: its bytes, then as a buffer named by the path (what policy_load_file does);
         * one that cannot be read (or is larger than policy_load_file accepts) fails through
         * policy_load_file, with its diagnostics. */
        if (al_read_file(origin, AL_YAML_MAX_BYTES_DEFAULT, &text, &len, NULL) != 0)
            p = policy_load_file(origin, &d);
        yaml = text;
    }
    if (yaml) {
        unsigned char digest[32];
        crypto_generichash(digest, sizeof digest, (const unsigned char *)yaml, len, NULL, 0);
        p = dec__cache_get(origin, digest);
        if (!p && (p = policy_load_buffer(yaml, len, origin, &d)))
            dec__cache_put(origin, digest, p);
    }
    free(text);
    if (!p) {
        al_diags_sort(&d);
        char msg[AL_ERROR_MSG_MAX] = "";
        size_t o = 0;
        for (size_t i = 0; i < d.n && o + 2 < sizeof msg; i++) {
            if (d.v[i].severity != AL_DIAG_ERROR)
                continue;
            char line[AL_ERROR_MSG_MAX];
            al_diag_format(&d.v[i], line, sizeof line);
            o += (size_t)snprintf(msg + o, sizeof msg - o, "%s%s", o ? "; " : "", line);
        }
        if (!msg[0])
            snprintf(msg, sizeof msg, "%s: the policy could not be loaded",
                     origin ? origin : "policy");
        al_diags_free(&d);
        return al_error_set(err, -EINVAL, "%s", msg);
    }
    al_diags_free(&d);
    *out = (struct egress_policy *)p;
    return 0;
}

const struct policy *egress_policy_raw(const struct egress_policy *p)
{
    return dec__p(p);
}

struct egress_policy *egress_policy_ref(struct egress_policy *p)
{
    return (struct egress_policy *)policy_ref(dec__p(p));
}

void egress_policy_unref(struct egress_policy *p)
{
    if (p)
        policy_unref(dec__p(p));
}

const char *egress_policy_name(const struct egress_policy *p)
{
    return policy_name(dec__p(p));
}

const char *egress_policy_hash(const struct egress_policy *p)
{
    return policy_hash(dec__p(p));
}

bool egress_policy_report_mode(const struct egress_policy *p)
{
    return policy_mode(dec__p(p)) == POLICY_MODE_REPORT;
}

uint64_t egress_policy_max_connections(const struct egress_policy *p)
{
    return policy_limits(dec__p(p))->max_connections;
}

uint64_t egress_policy_max_request_body(const struct egress_policy *p)
{
    return policy_limits(dec__p(p))->max_request_body;
}

/* ---- narrowing ------------------------------------------------------------------------ */

int egress_network_check(const json_t *n, struct al_error *err)
{
    return policy_narrowing_json_check(n, err);
}

int egress_policy_narrow(struct egress_policy *base, const json_t *network,
                         struct egress_policy **out, struct al_error *err)
{
    if (!network) {
        *out = egress_policy_ref(base);
        return 0;
    }
    struct policy *p = policy_narrow_json(dec__p(base), network, err);
    if (!p)
        return err && err->code ? err->code : -EINVAL;
    *out = (struct egress_policy *)p;
    return 0;
}

static void dec__to_policy_addr(const struct egress_ip *ip, struct policy_addr *a)
{
    memset(a, 0, sizeof *a);
    a->family = ip->family == 4 ? AF_INET : AF_INET6;
    memcpy(a->bytes, ip->addr, ip->family == 4 ? 4 : 16);
}

static void dec__from_policy_addr(const struct policy_addr *a, struct egress_ip *ip)
{
    memset(ip, 0, sizeof *ip);
    ip->family = a->family == AF_INET ? 4 : 6;
    memcpy(ip->addr, a->bytes, a->family == AF_INET ? 4 : 16);
}

struct egress_policy *egress_policy_unnarrowed(struct egress_policy *p)
{
    return (struct egress_policy *)policy_unnarrowed(dec__p(p));
}

bool egress_policy_narrowing_passes(const struct egress_policy *p, const struct egress_host *host,
                                    const struct egress_ip *dst)
{
    struct policy_addr a;
    if (dst)
        dec__to_policy_addr(dst, &a);
    bool named = host && host->kind == EGRESS_HOST_NAME;
    return policy_narrowing_passes(dec__p(p), named ? host->text : NULL, named ? host->len : 0,
                                   dst ? &a : NULL);
}

static void dec__host(const struct policy_host *h, struct egress_host *out)
{
    memset(out, 0, sizeof *out);
    out->kind = h->kind == POLICY_HOST_ADDR ? EGRESS_HOST_IP : EGRESS_HOST_NAME;
    out->len = h->len < sizeof out->text ? h->len : sizeof out->text - 1;
    memcpy(out->text, h->text, out->len);
    if (h->kind == POLICY_HOST_ADDR)
        dec__from_policy_addr(&h->addr, &out->ip);
}

int egress_canon_host(const char *in, size_t len, struct egress_host *out, struct al_error *err)
{
    struct policy_host h;
    int rc = policy_host_canon(in, len, &h, err);
    if (rc < 0)
        return rc;
    if (h.kind == POLICY_HOST_ADDR && h.zone[0])
        return al_error_set(err, -EINVAL, "an IPv6 zone id is not a destination");
    dec__host(&h, out);
    return 0;
}

void egress_ip_classify(const struct egress_ip *ip, struct egress_ip_class *out)
{
    struct policy_addr a;
    struct policy_addr_info info;
    dec__to_policy_addr(ip, &a);
    policy_addr_classify(&a, &info);
    out->internal = info.internal;
    out->code = info.code;
}

bool egress_ip_opened(const struct egress_policy *p, const struct egress_ip *ip)
{
    /* An internal address is opened when some allow rule's CIDR covers it: ask the policy
     * for a connection-level decision with no name on each port range start of the CIDR
     * rules; the library applies its own CIDR semantics. */
    struct policy_addr a;
    dec__to_policy_addr(ip, &a);
    size_t n = policy_rule_count(dec__p(p));
    for (size_t i = 0; i < n; i++) {
        const struct policy_rule *r = policy_rule_at(dec__p(p), i);
        if (r->action != POLICY_ACTION_ALLOW || r->n_cidrs == 0)
            continue;
        uint16_t port = r->n_ports ? r->ports[0].lo : (r->scheme == POLICY_SCHEME_HTTP ? 80 : 443);
        struct policy_request req = {.addr = &a, .port = port, .scheme = r->scheme};
        struct policy_decision d;
        if (policy_decide(dec__p(p), &req, &d) == 0 && d.verdict == POLICY_ALLOW && d.rule == r)
            return true;
    }
    return false;
}

void egress_ip_text(const struct egress_ip *ip, char *out, size_t outlen)
{
    if (!inet_ntop(ip->family == 4 ? AF_INET : AF_INET6, ip->addr, out, (socklen_t)outlen))
        snprintf(out, outlen, "?");
}

int egress_path_normalize(const char *in, size_t len, char *out, size_t outlen,
                          struct al_error *err)
{
    return policy_path_normalize(in, len, out, outlen, err);
}

static void dec__verdict(const struct policy_decision *d, struct egress_verdict *v)
{
    memset(v, 0, sizeof *v);
    v->allow = d->verdict == POLICY_ALLOW;
    v->would_deny = d->would_deny;
    v->rule = d->rule ? d->rule->name : NULL;
    v->reason = policy_reason_code(d->reason);
    v->tls = d->tls == POLICY_TLS_INSPECT       ? EGRESS_TLS_INSPECT
             : d->tls == POLICY_TLS_PASSTHROUGH ? EGRESS_TLS_PASSTHROUGH
                                                : EGRESS_TLS_NONE;
    v->websocket = d->websocket;
    v->n_inject = d->n_inject;
    v->addr_class = d->addr_info.code;
    v->by_address = d->rule && d->rule->n_cidrs > 0 && d->rule->n_hosts == 0;
    v->malformed = d->verdict != POLICY_ALLOW && policy_reason_is_malformed(d->reason);
    if (d->host.kind)
        dec__host(&d->host, &v->host);
}

void egress_decide(const struct egress_policy *p, const struct egress_query *q,
                   struct egress_verdict *v)
{
    struct policy_addr a;
    if (q->dst)
        dec__to_policy_addr(q->dst, &a);
    struct policy_request req = {
        .host = q->host,
        .host_len = q->host_len,
        .addr = q->dst ? &a : NULL,
        .port = q->port,
        .scheme = q->scheme == EGRESS_SCHEME_HTTP  ? POLICY_SCHEME_HTTP
                  : q->scheme == EGRESS_SCHEME_TCP ? POLICY_SCHEME_TCP
                                                   : POLICY_SCHEME_HTTPS,
        .method = q->method,
        .method_len = q->method ? strlen(q->method) : 0,
        .path = q->path,
        .path_len = q->path_len,
        .body = q->body,
    };
    struct policy_decision d;
    if (policy_decide(dec__p(p), &req, &d) != 0) {
        memset(v, 0, sizeof *v);
        v->reason = "policy_error";
        return;
    }
    dec__verdict(&d, v);
}

void egress_decide_dns(const struct egress_policy *p, const char *name, size_t len,
                       struct egress_verdict *v)
{
    struct policy_decision d;
    if (policy_dns_decide(dec__p(p), name, len, &d) != 0) {
        memset(v, 0, sizeof *v);
        v->reason = "policy_error";
        return;
    }
    dec__verdict(&d, v);
}
