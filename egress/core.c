/* egress/core: one proxy instance: listeners (one socket per worker in each SO_REUSEPORT
 * group), workers, the control loop, sandbox registration and policy replacement, the
 * memory budget, and the helpers every file of egress/ uses. */
#include "internal.h"
#include "ratelimit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

int egress_worker_init(struct egress_worker *w, struct egress *e, unsigned index);
void egress_worker_fini(struct egress_worker *w);

/* ---- helpers --------------------------------------------------------------------------- */

void egress_ip_from_sockaddr(const struct sockaddr *sa, struct egress_ip *ip, uint16_t *port)
{
    memset(ip, 0, sizeof *ip);
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        ip->family = 4;
        memcpy(ip->addr, &s->sin_addr, 4);
        if (port)
            *port = ntohs(s->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
            ip->family = 4;
            memcpy(ip->addr, (const uint8_t *)&s->sin6_addr + 12, 4);
        } else {
            ip->family = 6;
            memcpy(ip->addr, &s->sin6_addr, 16);
        }
        if (port)
            *port = ntohs(s->sin6_port);
    } else if (port) {
        *port = 0;
    }
}

void egress_sockaddr_from_ip(const struct egress_ip *ip, uint16_t port, struct sockaddr_storage *ss,
                             socklen_t *len)
{
    memset(ss, 0, sizeof *ss);
    if (ip->family == 4) {
        struct sockaddr_in *s = (struct sockaddr_in *)ss;
        s->sin_family = AF_INET;
        s->sin_port = htons(port);
        memcpy(&s->sin_addr, ip->addr, 4);
        *len = sizeof *s;
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = htons(port);
        memcpy(&s->sin6_addr, ip->addr, 16);
        *len = sizeof *s;
    }
}

void egress_endpoint_text(const struct egress_ip *ip, uint16_t port, char *out, size_t outlen)
{
    char t[64];
    if (!ip->family) {
        snprintf(out, outlen, "?:%u", port);
        return;
    }
    inet_ntop(ip->family == 4 ? AF_INET : AF_INET6, ip->addr, t, sizeof t);
    if (ip->family == 6)
        snprintf(out, outlen, "[%s]:%u", t, port);
    else
        snprintf(out, outlen, "%s:%u", t, port);
}

void egress_new_request_id(struct egress *e, char out[32])
{
    uint64_t n = atomic_fetch_add(&e->req_seq, 1) + 1;
    /* "%s-%" PRIx64, without printf (one per request and connection). */
    size_t o = strnlen(e->boot_id, sizeof e->boot_id);
    memcpy(out, e->boot_id, o);
    out[o++] = '-';
    char t[16];
    int k = 0;
    do
        t[k++] = al_hex_lower[n & 15];
    while ((n >>= 4));
    while (k)
        out[o++] = t[--k];
    out[o] = 0;
}

bool egress_mem_take(struct egress *e, struct egress_sandbox *sb, size_t n)
{
    size_t used = atomic_fetch_add(&e->mem_used, n) + n;
    if (used > e->cfg.memory_budget) {
        atomic_fetch_sub(&e->mem_used, n);
        return false;
    }
    if (sb) {
        size_t s = atomic_fetch_add(&sb->mem, n) + n;
        if (s > e->cfg.sandbox_memory) {
            atomic_fetch_sub(&sb->mem, n);
            atomic_fetch_sub(&e->mem_used, n);
            return false;
        }
    }
    return true;
}

void egress_mem_give(struct egress *e, struct egress_sandbox *sb, size_t n)
{
    atomic_fetch_sub(&e->mem_used, n);
    if (sb)
        atomic_fetch_sub(&sb->mem, n);
}

bool egress_audit_throttle(atomic_uint_fast64_t *last_ns, uint64_t interval_ns)
{
    uint64_t now = al_now_ns(), last = atomic_load(last_ns);
    if (last && now - last < interval_ns)
        return false;
    return atomic_compare_exchange_strong(last_ns, &last, now);
}

void egress_rec_sandbox(json_t *r, const struct egress_sandbox *sb, const struct egress_policy *p)
{
    egress_rec_str(r, "sandbox", sb ? sb->id : NULL);
    egress_rec_str(r, "template", sb && sb->template_name[0] ? sb->template_name : NULL);
    if (p) {
        json_t *po = json_object();
        egress_rec_str(po, "name", egress_policy_name(p));
        egress_rec_str(po, "hash", egress_policy_hash(p));
        json_object_set_new(r, "policy", po);
    } else {
        json_object_set_new(r, "policy", json_null());
    }
}

void egress_audit(struct egress *e, json_t *rec)
{
    if (!rec)
        return;
    egress_audit_append(e->audit, rec);
}

void egress_recw_sandbox(struct egress_recw *w, const struct egress_sandbox *sb,
                         const struct egress_policy *p)
{
    egress_recw_str(w, "sandbox", sb ? sb->id : NULL);
    egress_recw_str(w, "template", sb && sb->template_name[0] ? sb->template_name : NULL);
    if (p) {
        egress_recw_obj_begin(w, "policy");
        egress_recw_str(w, "name", egress_policy_name(p));
        egress_recw_str(w, "hash", egress_policy_hash(p));
        egress_recw_close(w, '}');
    } else {
        egress_recw_null(w, "policy");
    }
}

void egress_audit_w(struct egress *e, struct egress_recw *w)
{
    const char *obj;
    size_t len;
    if (egress_recw_end(w, &obj, &len) == 0)
        egress_audit_append_raw(e->audit, obj, len);
    else
        egress_audit_append(e->audit, NULL); /* counted as a failure */
    egress_recw_free(w);
}

bool egress_is_self(struct egress *e, const struct egress_ip *ip)
{
    bool found = false;
    pthread_mutex_lock(&e->self_lock);
    for (size_t i = 0; i < e->n_self && !found; i++)
        found = egress_ip_equal(&e->self[i], ip);
    pthread_mutex_unlock(&e->self_lock);
    return found;
}

void egress_refresh_self(struct egress *e)
{
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) < 0)
        return;
    struct egress_ip tmp[64];
    size_t n = 0;
    for (struct ifaddrs *i = ifa; i && n < 64; i = i->ifa_next) {
        if (!i->ifa_addr ||
            (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        egress_ip_from_sockaddr(i->ifa_addr, &tmp[n], NULL);
        n++;
    }
    freeifaddrs(ifa);
    pthread_mutex_lock(&e->self_lock);
    memcpy(e->self, tmp, n * sizeof tmp[0]);
    e->n_self = n;
    pthread_mutex_unlock(&e->self_lock);
}

uv_loop_t *egress_ctl_loop(struct egress *e)
{
    return &e->ctl_loop;
}

int egress_audit_controlplane(struct egress *e, const json_t *rec, struct al_error *err)
{
    /* The control plane's records this log carries; each is documented in docs/audit.md. */
    static const char *const types[] = {"volume", "lifecycle", "cluster", NULL};
    static const char *const envelope[] = {"seq", "time", "log_id", "prev", "auditlog", NULL};
    if (!json_is_object(rec))
        return al_error_set(err, -EINVAL, "a control-plane record must be a JSON object");
    const char *type = json_string_value(json_object_get(rec, "type"));
    const char *const *t = types;
    while (*t && (!type || strcmp(*t, type) != 0))
        t++;
    if (!*t)
        return al_error_set(err, -EINVAL,
                            "a control-plane record's \"type\" must be \"volume\", "
                            "\"lifecycle\" or \"cluster\" (got %.32s)",
                            type ? type : "none");
    const char *event = json_string_value(json_object_get(rec, "event"));
    size_t n = event ? strlen(event) : 0;
    bool ok = n > 0 && n <= 32;
    for (size_t i = 0; ok && i < n; i++)
        ok = (event[i] >= 'a' && event[i] <= 'z') || event[i] == '_';
    if (!ok)
        return al_error_set(err, -EINVAL,
                            "a control-plane record's \"event\" must be 1..32 of a-z and '_'");
    for (const char *const *k = envelope; *k; k++)
        if (json_object_get(rec, *k))
            return al_error_set(err, -EINVAL,
                                "\"%s\" is the log's own field: a record may not carry it", *k);
    json_t *r = egress_rec_new(type);
    if (!r || json_object_update(r, (json_t *)rec) < 0) {
        json_decref(r);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    if (egress_audit_append(e->audit, r) < 0 || egress_audit_status(e->audit) < 0) {
        int st = egress_audit_status(e->audit);
        return al_error_set(err, -EIO, "the audit log cannot be written: %s",
                            strerror(st < 0 ? -st : EIO));
    }
    return 0;
}

int egress_sync_audit(struct egress *e, uint32_t timeout_ms)
{
    return egress_audit_sync(e->audit, timeout_ms);
}

enum egress_listener_mode egress_listener_mode(const struct egress *e)
{
    return e->listener_mode;
}

size_t egress_listener_fds(const struct egress *e, int kind, size_t i, int *fds, size_t max)
{
    size_t n = 0;
    if (i >= EGRESS_MAX_LISTEN)
        return 0;
    for (unsigned w = 0; w < e->n_workers && n < max; w++) {
        int fd = kind == 0   ? e->tcp_fds[w][i]
                 : kind == 1 ? e->dns_udp_fds[w][i]
                             : e->dns_tcp_fds[w][i];
        if (fd >= 0)
            fds[n++] = fd;
    }
    return n;
}

int egress_set_reply_mark(struct egress *e, uint32_t mark)
{
    e->cfg.reply_mark = mark;
    for (unsigned w = 0; w < e->n_workers; w++)
        for (size_t k = 0; k < EGRESS_MAX_LISTEN; k++) {
            int fds[3] = {e->tcp_fds[w][k], e->dns_udp_fds[w][k], e->dns_tcp_fds[w][k]};
            for (int j = 0; j < 3; j++)
                if (fds[j] >= 0 && setsockopt(fds[j], SOL_SOCKET, SO_MARK, &mark, sizeof mark) < 0)
                    return -errno;
        }
    return 0;
}

int egress_checkpoint_audit(struct egress *e)
{
    return egress_audit_checkpoint(e->audit);
}

uint16_t egress_tcp_port(const struct egress *e, size_t i)
{
    return i < EGRESS_MAX_LISTEN ? e->tcp_ports[i] : 0;
}

uint16_t egress_dns_port(const struct egress *e, size_t i)
{
    return i < EGRESS_MAX_LISTEN ? e->dns_ports[i] : 0;
}

/* ---- sandboxes and policies ---------------------------------------------------------- */

/* A control record beyond its sandbox and policy: type and event, the error that refused a
 * change (the record is then a deny), the policy's hash before the change and before
 * narrowing, and fields to add (stolen). */
struct core__control {
    const char *type, *event;
    const char *error;
    const char *old_hash, *base_hash;
    json_t *extra;
};

static void core__audit_control(struct egress *e, struct egress_sandbox *sb,
                                struct egress_policy *p, const struct core__control *c)
{
    json_t *r = egress_rec_new(c->type);
    if (!r) {
        json_decref(c->extra);
        return;
    }
    egress_rec_str(r, "event", c->event);
    egress_rec_sandbox(r, sb, p);
    if (sb) {
        json_t *a = json_array();
        for (size_t i = 0; i < sb->n_addrs; i++) {
            char t[64];
            egress_ip_text(&sb->addrs[i], t, sizeof t);
            json_array_append_new(a, json_string(t));
        }
        json_object_set_new(r, "addresses", a);
        if (sb->policy_file[0])
            egress_rec_str(r, "policy_file", sb->policy_file);
        /* The E2B fields that narrow the policy: policy.hash is the narrowed policy's,
         * base_policy_hash the hash of the policy before narrowing. */
        if (sb->network)
            json_object_set(r, "network", sb->network);
    }
    if (c->base_hash)
        egress_rec_str(r, "base_policy_hash", c->base_hash);
    if (c->old_hash)
        egress_rec_str(r, "old_policy_hash", c->old_hash);
    if (c->error) {
        egress_rec_str(r, "decision", "deny");
        egress_rec_str(r, "reason", "invalid_policy");
        egress_rec_str(r, "error", c->error);
    }
    if (c->extra)
        json_object_update_new(r, c->extra);
    egress_audit(e, r);
}

static int core__load_policy(const struct egress_policy_src *src, struct egress_policy **out,
                             struct al_error *err)
{
    if (src->yaml)
        return egress_policy_load(src->yaml, src->len, src->origin ? src->origin : "policy", out,
                                  err);
    if (src->file)
        return egress_policy_load(NULL, 0, src->file, out, err);
    return al_error_set(err, -EINVAL, "a policy is required: give policy_yaml or policy_file");
}

/* Loads a policy and narrows it by the sandbox's network fields; *base_hash gets the hash
 * before narrowing ("" when network is NULL). *reason says which part was refused. */
static int core__policy_for(const struct egress_policy_src *src, const json_t *network,
                            struct egress_policy **out, char base_hash[72], const char **reason,
                            struct al_error *err)
{
    struct egress_policy *base = NULL;
    base_hash[0] = 0;
    *reason = "invalid_policy";
    int rc = core__load_policy(src, &base, err);
    if (rc < 0)
        return rc;
    if (network)
        snprintf(base_hash, 72, "%s", egress_policy_hash(base));
    rc = egress_policy_narrow(base, network, out, err);
    egress_policy_unref(base);
    if (rc < 0)
        *reason = "invalid_network";
    return rc;
}

int egress_register_sandbox(struct egress *e, const struct egress_register *r, struct al_error *err)
{
    struct egress_policy *p = NULL;
    char base_hash[72];
    const char *reason = "invalid_policy";
    int rc = r->network ? egress_network_check((const json_t *)r->network, err) : 0;
    if (rc < 0)
        reason = "invalid_network";
    else
        rc = core__policy_for(&r->policy, (const json_t *)r->network, &p, base_hash, &reason, err);
    if (rc < 0) {
        json_t *rec = egress_rec_new("sandbox");
        if (rec) {
            egress_rec_str(rec, "event", "register_refused");
            egress_rec_str(rec, "sandbox", r->id);
            egress_rec_str(rec, "decision", "deny");
            egress_rec_str(rec, "reason", reason);
            egress_rec_str(rec, "error", al_error_str(err));
            egress_audit(e, rec);
        }
        return rc;
    }
    /* Its interception state (CA, TLS configuration, placeholders) before it can connect. */
    struct egress_inspect_sandbox *x = NULL;
    if ((rc = egress_inspect_sandbox_new(e, r->id, p, (const json_t *)r->placeholders, &x, err)) <
        0) {
        egress_policy_unref(p);
        return rc;
    }
    json_t *net = r->network ? json_deep_copy((const json_t *)r->network) : NULL;
    if (r->network && !net) {
        egress_inspect_sandbox_free(x);
        egress_policy_unref(p);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    rc = egress_registry_add(
        e->reg,
        &(struct egress_registry_entry){r->id, r->template_name, r->addrs, r->n_addrs,
                                        r->policy.yaml ? NULL : r->policy.file, p, net},
        err);
    if (rc < 0) {
        json_decref(net);
        egress_inspect_sandbox_free(x);
        egress_policy_unref(p);
        return rc;
    }
    struct egress_sandbox *sb = egress_registry_by_id(e->reg, r->id);
    if (!sb)
        egress_inspect_sandbox_free(x);
    if (sb) {
        sb->inspect = x;
        core__audit_control(e, sb, p,
                            &(struct core__control){.type = "sandbox",
                                                    .event = "register",
                                                    .base_hash = base_hash[0] ? base_hash : NULL});
        al_info("sandbox %s registered (policy %s %.12s%s)", r->id, egress_policy_name(p),
                egress_policy_hash(p), net ? ", narrowed by its E2B network fields" : "");
        egress_sandbox_put(sb);
    }
    return 0;
}

static void core__kick_workers(struct egress *e)
{
    for (unsigned i = 0; i < e->n_workers; i++) {
        atomic_store(&e->workers[i].kick_removed, true);
        uv_async_send(&e->workers[i].wake);
    }
}

int egress_unregister_sandbox(struct egress *e, const char *id)
{
    struct egress_sandbox *sb = egress_registry_remove(e->reg, id);
    if (!sb)
        return -ENOENT;
    egress_limits_flush_sandbox(e, sb, true);
    struct egress_policy *p = egress_sandbox_policy(sb);
    core__audit_control(e, sb, p,
                        &(struct core__control){.type = "sandbox", .event = "unregister"});
    egress_policy_unref(p);
    al_info("sandbox %s removed", id);
    egress_sandbox_put(sb);
    core__kick_workers(e);
    return 0;
}

int egress_set_policy(struct egress *e, const char *id, const struct egress_policy_src *src,
                      struct al_error *err)
{
    struct egress_policy_src s = src ? *src : (struct egress_policy_src){0};
    const char *file = s.file;
    struct egress_sandbox *sb = egress_registry_by_id(e->reg, id);
    if (!sb)
        return al_error_set(err, -ENOENT, "no sandbox '%s' is registered", id);
    struct egress_policy *old = egress_sandbox_policy(sb);
    struct egress_policy *p = NULL;
    char base_hash[72];
    const char *reason;
    /* The sandbox's network fields narrow the new policy exactly as they narrowed the first
     * one: a replacement or a reload never widens what the sandbox was created with. */
    if (!s.yaml && !s.file)
        s.file = sb->policy_file;
    int rc = core__policy_for(&s, sb->network, &p, base_hash, &reason, err);
    if (rc < 0) {
        core__audit_control(e, sb, old,
                            &(struct core__control){.type = "policy",
                                                    .event = "reload_refused",
                                                    .error = al_error_str(err)});
        al_warn("sandbox %s: new policy refused, the old one stays: %s", id, al_error_str(err));
        egress_policy_unref(old);
        egress_sandbox_put(sb);
        return rc;
    }
    char old_hash[80];
    snprintf(old_hash, sizeof old_hash, "%s", old ? egress_policy_hash(old) : "");
    egress_sandbox_set_policy(sb, p, s.yaml ? "" : file);
    struct al_error ierr = {0};
    if (egress_inspect_sandbox_policy(sb, p, &ierr) < 0)
        al_warn("sandbox %s: placeholders of the new policy: %s (the previous ones stay)", id,
                al_error_str(&ierr));
    core__audit_control(e, sb, p,
                        &(struct core__control){.type = "policy",
                                                .event = "reload",
                                                .old_hash = old_hash,
                                                .base_hash = base_hash[0] ? base_hash : NULL});
    egress_policy_unref(old);
    egress_sandbox_put(sb);
    return 0;
}

static void core__kick_rejudge(struct egress *e)
{
    for (unsigned i = 0; i < e->n_workers; i++) {
        atomic_store(&e->workers[i].kick_rejudge, true);
        uv_async_send(&e->workers[i].wake);
    }
}

/* Who asked and which update, for the records of an update. */
static json_t *core__update_fields(const struct egress_net_update *u)
{
    json_t *x = json_object();
    if (x && u->id && *u->id)
        json_object_set_new(x, "update", json_string(u->id));
    if (x && u->generation >= 0)
        json_object_set_new(x, "generation", json_integer(u->generation));
    if (x && u->key_id && *u->key_id)
        json_object_set_new(x, "api_key_id", json_string(u->key_id));
    return x;
}

int egress_set_network(struct egress *e, const char *id, const json_t *network,
                       const struct egress_net_update *u, struct al_error *err)
{
    static const struct egress_net_update none = {.generation = -1};
    if (!u)
        u = &none;
    const char *update_id = u->id;
    struct egress_sandbox *sb = egress_registry_by_id(e->reg, id);
    if (!sb)
        return al_error_set(err, -ENOENT, "no sandbox '%s' is registered", id);
    struct egress_policy *old = egress_sandbox_policy(sb);
    /* Replace semantics: the new fields narrow the policy under the old ones, so an update
     * never accumulates on the previous narrowing, and never reaches past the policy. */
    struct egress_policy *base = old ? egress_policy_unnarrowed(old) : NULL;
    struct egress_policy *p = NULL;
    json_t *net = NULL;
    int rc = base ? 0 : al_error_set(err, -EINVAL, "sandbox '%s' has no policy", id);
    if (!rc && network)
        rc = egress_network_check(network, err);
    if (!rc)
        rc = egress_policy_narrow(base, network, &p, err);
    if (!rc && network && !(net = json_deep_copy(network)))
        rc = al_error_set(err, -ENOMEM, "out of memory");
    if (rc < 0) {
        json_t *x = core__update_fields(u);
        if (x && network)
            json_object_set_new(x, "requested_network", json_deep_copy(network));
        core__audit_control(e, sb, old,
                            &(struct core__control){.type = "sandbox",
                                                    .event = "network_update_refused",
                                                    .error = al_error_str(err),
                                                    .extra = x});
        al_warn("sandbox %s: network update refused, the previous fields stay: %s", id,
                al_error_str(err));
        egress_policy_unref(p);
        egress_policy_unref(base);
        egress_policy_unref(old);
        egress_sandbox_put(sb);
        return rc < 0 ? rc : -EINVAL;
    }
    char old_hash[80], base_hash[80];
    snprintf(old_hash, sizeof old_hash, "%s", egress_policy_hash(old));
    snprintf(base_hash, sizeof base_hash, "%s", egress_policy_hash(base));
    egress_sandbox_set_network(sb, egress_policy_ref(p), net, update_id);
    struct al_error ierr = {0};
    if (egress_inspect_sandbox_policy(sb, p, &ierr) < 0)
        al_warn("sandbox %s: placeholders after the network update: %s (the previous ones stay)",
                id, al_error_str(&ierr));
    core__audit_control(e, sb, p,
                        &(struct core__control){.type = "sandbox",
                                                .event = "network_update",
                                                .old_hash = old_hash,
                                                .base_hash = base_hash,
                                                .extra = core__update_fields(u)});
    al_info("sandbox %s: network fields replaced%s%s (policy %.12s, was %.12s): its connections "
            "are judged again",
            id, update_id && *update_id ? " by update " : "", update_id ? update_id : "",
            egress_policy_hash(p), old_hash);
    egress_policy_unref(p);
    egress_policy_unref(base);
    egress_policy_unref(old);
    egress_sandbox_put(sb);
    core__kick_rejudge(e);
    return 0;
}

struct core__reload_ctx {
    char (*ids)[128];
    size_t n, cap;
};

static void core__collect_file_sandboxes(struct egress_sandbox *sb, void *arg)
{
    struct core__reload_ctx *x = arg;
    if (!sb->policy_file[0])
        return;
    if (x->n == x->cap) {
        size_t nc = x->cap ? x->cap * 2 : 16;
        void *n = realloc(x->ids, nc * sizeof *x->ids);
        if (!n)
            return;
        x->ids = n;
        x->cap = nc;
    }
    snprintf(x->ids[x->n++], 128, "%s", sb->id);
}

int egress_reload(struct egress *e, json_t *report)
{
    struct core__reload_ctx x = {0};
    egress_registry_each(e->reg, core__collect_file_sandboxes, &x);
    int failed = 0;
    json_t *ok = json_array(), *bad = json_array();
    for (size_t i = 0; i < x.n; i++) {
        struct al_error err = {0};
        if (egress_set_policy(e, x.ids[i], NULL, &err) < 0) {
            failed++;
            json_array_append_new(
                bad, json_pack("{s:s,s:s}", "sandbox", x.ids[i], "error", al_error_str(&err)));
        } else {
            json_array_append_new(ok, json_string(x.ids[i]));
        }
    }
    free(x.ids);
    egress_refresh_self(e);
    if (report) {
        json_object_set_new(report, "reloaded", ok);
        json_object_set_new(report, "failed", bad);
    } else {
        json_decref(ok);
        json_decref(bad);
    }
    return failed;
}

static json_t *core__sandbox_json(struct egress *e, struct egress_sandbox *sb)
{
    struct egress_policy *p = egress_sandbox_policy(sb);
    json_t *a = json_array();
    for (size_t i = 0; i < sb->n_addrs; i++) {
        char t[64];
        egress_ip_text(&sb->addrs[i], t, sizeof t);
        json_array_append_new(a, json_string(t));
    }
    json_t *o = json_pack(
        "{s:s,s:s?,s:o,s:{s:s?,s:s?,s:s?},s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}}", "id", sb->id,
        "template", sb->template_name[0] ? sb->template_name : NULL, "addresses", a, "policy",
        "name", p ? egress_policy_name(p) : NULL, "hash", p ? egress_policy_hash(p) : NULL, "file",
        sb->policy_file[0] ? sb->policy_file : NULL, "stats", "connections",
        (json_int_t)atomic_load(&sb->conns), "connections_peak",
        (json_int_t)atomic_load(&sb->conns_peak), "memory", (json_int_t)atomic_load(&sb->mem),
        "allowed", (json_int_t)atomic_load(&sb->n_allowed), "denied",
        (json_int_t)atomic_load(&sb->n_denied), "dns_queries", (json_int_t)atomic_load(&sb->n_dns),
        "bytes_up", (json_int_t)atomic_load(&sb->bytes_up), "bytes_down",
        (json_int_t)atomic_load(&sb->bytes_down));
    egress_policy_unref(p);
    if (o && sb->network)
        json_object_set(o, "network", sb->network);
    /* The tokens left in its buckets now (full = the burst): a caller that needs a full
     * bucket (a test before a flood, an operator after one) waits for it by asking. */
    uint64_t now = al_now_ns();
    const struct egress_config *c = &e->cfg;
    if (o)
        json_object_set_new(
            o, "buckets",
            json_pack("{s:I,s:I,s:I}", "dns",
                      (json_int_t)egress_rate_tokens(&sb->dns_tat, c->dns_rate, c->dns_burst, now),
                      "audit_allow",
                      (json_int_t)egress_rate_tokens(&sb->audit_allow_tat, c->audit_allow_rate,
                                                     c->audit_allow_burst, now),
                      "audit_deny",
                      (json_int_t)egress_rate_tokens(&sb->audit_deny_tat, c->audit_deny_rate,
                                                     c->audit_deny_burst, now)));
    return o;
}

struct core__list {
    struct egress *e;
    json_t *a;
};

static void core__list_one(struct egress_sandbox *sb, void *arg)
{
    struct core__list *l = arg;
    json_array_append_new(l->a, core__sandbox_json(l->e, sb));
}

json_t *egress_sandboxes_json(struct egress *e)
{
    struct core__list l = {e, json_array()};
    egress_registry_each(e->reg, core__list_one, &l);
    return l.a;
}

json_t *egress_stats_json(struct egress *e, const char *id)
{
    if (id) {
        struct egress_sandbox *sb = egress_registry_by_id(e->reg, id);
        if (!sb)
            return NULL;
        json_t *o = core__sandbox_json(e, sb);
        egress_sandbox_put(sb);
        return o;
    }
    struct egress_stats *s = &e->stats;
    struct al_auditlog_stats as;
    egress_audit_stats(e->audit, &as);
#define S(x) (json_int_t) atomic_load(&s->x)
    return json_pack(
        "{s:I,s:i,s:I,s:I,s:{s:I,s:I,s:I,s:I,s:I},s:{s:I,s:I},s:{s:I,s:I,s:I},"
        "s:{s:I,s:I},s:{s:I,s:I,s:I,s:I,s:I,s:I,s:I},s:{s:I,s:I},s:{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:"
        "s}}",
        "uptime_ms", (json_int_t)((al_now_ns() - e->started_ns) / 1000000), "workers",
        (int)e->n_workers, "sandboxes", (json_int_t)egress_registry_count(e->reg), "memory",
        (json_int_t)atomic_load(&e->mem_used), "connections", "accepted", S(conns_accepted),
        "active", S(conns_active), "allowed", S(conns_allowed), "denied", S(conns_denied),
        "unknown_source", S(unknown_source), "http", "requests", S(http_requests), "denied",
        S(http_denied), "dns", "queries", S(dns_queries), "denied", S(dns_denied), "refused",
        S(dns_refused), "bytes", "up", S(bytes_up), "down", S(bytes_down), "limits",
        "sandbox_connections", S(limit_sandbox), "proxy_connections", S(limit_global), "memory",
        S(limit_memory), "timeouts", S(timeouts), "dns_rate", S(limit_dns_rate), "dns_inflight",
        S(limit_dns_inflight), "audit_aggregated", S(audit_aggregated), "upstream", "errors",
        S(upstream_errors), "audit_denied", S(audit_denied), "audit", "ok",
        egress_audit_ok(e->audit), "status", (json_int_t)egress_audit_status(e->audit), "records",
        (json_int_t)egress_audit_records(e->audit), "failures",
        (json_int_t)egress_audit_failures(e->audit), "rotations", (json_int_t)as.rotations,
        "pruned_files", (json_int_t)as.pruned_files, "pruned_bytes", (json_int_t)as.pruned_bytes,
        "file", as.current_file);
#undef S
}

/* ---- lifecycle ------------------------------------------------------------------------ */

/* The soft limit up to the hard one, and room for this many descriptors in the table
 * before the workers start (al_fd_table_reserve: growing it later blocks the growing
 * thread for an RCU grace period). Each proxied connection holds two. */
#define CORE_FD_TABLE 8192

static void core__on_limits_timer(uv_timer_t *t)
{
    egress_limits_flush(t->data, false);
}

static void core__on_ctl_wake(uv_async_t *a)
{
    struct egress *e = a->data;
    if (atomic_load(&e->stopping))
        uv_stop(&e->ctl_loop);
}

int egress_new(const struct egress_config *cfg, struct egress **out, struct al_error *err)
{
    struct egress *e = calloc(1, sizeof *e);
    if (!e)
        return al_error_set(err, -ENOMEM, "out of memory");
    e->cfg = *cfg;
    e->started_ns = al_now_ns();
    pthread_mutex_init(&e->self_lock, NULL);
    al_random_hex(e->boot_id, 4);
    int frc = al_fd_table_reserve(CORE_FD_TABLE);
    if (frc < 0)
        al_warn("cannot reserve room for %d descriptors: %s", CORE_FD_TABLE, strerror(-frc));
    signal(SIGPIPE, SIG_IGN);
    int rc;
    if ((rc = egress_registry_new(&e->reg)) < 0) {
        al_error_set(err, rc, "out of memory");
        goto fail;
    }
    struct egress_audit_opts ao = {.dir = e->cfg.audit_dir,
                                   .fail_open = e->cfg.audit_fail_open,
                                   .rotate_bytes = e->cfg.audit_rotate_bytes,
                                   .rotate_ms = e->cfg.audit_rotate_ms,
                                   .retain_bytes = e->cfg.audit_retain_bytes,
                                   .retain_ms = e->cfg.audit_retain_ms,
                                   .retain_files = e->cfg.audit_retain_files};
    if ((rc = egress_audit_open(&ao, &e->audit, err)) < 0)
        goto fail;
    egress_refresh_self(e);
    if ((rc = egress_inspect_init(e, err)) < 0)
        goto fail;

    unsigned n = e->cfg.workers;
    if (n == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        n = cpus > 0 ? (unsigned)cpus : 1;
    }
    if (n > 64)
        n = 64;
    e->n_workers = n;
    e->workers = calloc(n, sizeof *e->workers);
    e->tcp_fds = calloc(n, sizeof *e->tcp_fds);
    e->dns_udp_fds = calloc(n, sizeof *e->dns_udp_fds);
    e->dns_tcp_fds = calloc(n, sizeof *e->dns_tcp_fds);
    if (!e->workers || !e->tcp_fds || !e->dns_udp_fds || !e->dns_tcp_fds) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    for (unsigned i = 0; i < n; i++)
        for (size_t k = 0; k < EGRESS_MAX_LISTEN; k++)
            e->tcp_fds[i][k] = e->dns_udp_fds[i][k] = e->dns_tcp_fds[i][k] = -1;
    char why[256];
    e->listener_mode = egress_listener_mode_pick(&e->cfg, why, sizeof why);
    bool shared = e->listener_mode == EGRESS_LISTENER_SHARED;
    al_info("listeners: %s (%s): %s", egress_listener_mode_name(e->listener_mode),
            shared ? "one socket per address, polled by every worker"
                   : "one socket per worker per address, SO_REUSEPORT",
            why);
    /* reuseport: one socket per worker in each group; the first one fixes the port.
     * shared: row 0 only; every worker polls row 0's sockets. */
    for (unsigned i = 0; i < (shared ? 1 : n); i++) {
        for (size_t k = 0; k < e->cfg.n_tcp_listen; k++) {
            uint16_t port = e->tcp_ports[k];
            int fd = egress_listen_tcp(&e->cfg.tcp_listen[k], true, !shared, 4096, &port, err);
            if (fd < 0) {
                rc = fd;
                goto fail;
            }
            e->tcp_fds[i][k] = fd;
            e->tcp_ports[k] = port;
        }
        for (size_t k = 0; k < e->cfg.n_dns_listen; k++) {
            uint16_t port = e->dns_ports[k];
            int fd = egress_listen_udp(&e->cfg.dns_listen[k], !shared, &port, err);
            if (fd < 0) {
                rc = fd;
                goto fail;
            }
            e->dns_udp_fds[i][k] = fd;
            e->dns_ports[k] = port;
            fd = egress_listen_tcp(&e->cfg.dns_listen[k], true, !shared, 1024, &port, err);
            if (fd < 0) {
                rc = fd;
                goto fail;
            }
            e->dns_tcp_fds[i][k] = fd;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        struct egress_worker *w = &e->workers[i];
        if ((rc = egress_worker_init(w, e, i)) < 0) {
            al_error_set(err, rc, "worker %u: %s", i, uv_strerror(rc));
            goto fail;
        }
        unsigned row = shared ? 0 : i;
        for (size_t k = 0; k < e->cfg.n_tcp_listen; k++)
            w->listeners[w->n_listeners++] = (struct egress_listener){
                .fd = e->tcp_fds[row][k], .kind = 0, .port = e->tcp_ports[k], .shared = shared};
        for (size_t k = 0; k < e->cfg.n_dns_listen; k++) {
            w->listeners[w->n_listeners++] = (struct egress_listener){
                .fd = e->dns_udp_fds[row][k], .kind = 1, .port = e->dns_ports[k], .shared = shared};
            w->listeners[w->n_listeners++] = (struct egress_listener){
                .fd = e->dns_tcp_fds[row][k], .kind = 2, .port = e->dns_ports[k], .shared = shared};
        }
    }
    if ((rc = uv_loop_init(&e->ctl_loop)) < 0) {
        al_error_set(err, rc, "control loop: %s", uv_strerror(rc));
        goto fail;
    }
    e->ctl_loop_init = true;
    uv_async_init(&e->ctl_loop, &e->ctl_wake, core__on_ctl_wake);
    e->ctl_wake.data = e;
    uv_timer_init(&e->ctl_loop, &e->limits_timer);
    e->limits_timer.data = e;
    e->limits_timer_init = true;
    *out = e;
    return 0;
fail:
    egress_free(e);
    return rc < 0 ? rc : -EINVAL;
}

int egress_start(struct egress *e, struct al_error *err)
{
    for (unsigned i = 0; i < e->n_workers; i++) {
        int rc = egress_worker_start(&e->workers[i]);
        if (rc < 0)
            return al_error_set(err, rc, "starting worker %u: %s", i, uv_strerror(rc));
    }
    json_t *r = egress_rec_new("daemon");
    if (r) {
        egress_rec_str(r, "event", "start");
        egress_rec_str(r, "version", AIRLOCK_VERSION);
        egress_rec_int(r, "workers", e->n_workers);
        egress_rec_str(r, "listener_mode", egress_listener_mode_name(e->listener_mode));
        egress_rec_bool(r, "audit_fail_open", e->cfg.audit_fail_open);
        egress_audit(e, r);
    }
    egress_inspect_start(e);
    uint64_t every = EGRESS_LIMIT_INTERVAL_NS / 1000000ull;
    uv_timer_start(&e->limits_timer, core__on_limits_timer, every, every);
    return 0;
}

int egress_run(struct egress *e)
{
    uv_run(&e->ctl_loop, UV_RUN_DEFAULT);
    return 0;
}

void egress_stop(struct egress *e)
{
    atomic_store(&e->stopping, true);
    if (e->ctl_loop_init)
        uv_async_send(&e->ctl_wake);
    for (unsigned i = 0; i < e->n_workers; i++)
        if (e->workers && e->workers[i].loop.data)
            uv_async_send(&e->workers[i].wake);
}

void egress_free(struct egress *e)
{
    if (!e)
        return;
    atomic_store(&e->stopping, true);
    for (unsigned i = 0; e->workers && i < e->n_workers; i++) {
        struct egress_worker *w = &e->workers[i];
        if (!w->loop.data)
            continue;
        if (w->started) {
            uv_async_send(&w->wake);
            uv_thread_join(&w->thread);
        } else {
            /* Never started: close what init opened and let the loop finish. */
            if (w->resolver)
                egress_resolver_close(w->resolver);
            egress_inspect_worker_stop(w);
            uv_close((uv_handle_t *)&w->wake, NULL);
            uv_close((uv_handle_t *)&w->ep_poll, NULL);
            uv_run(&w->loop, UV_RUN_DEFAULT);
        }
        egress_worker_fini(w);
    }
    for (unsigned i = 0; i < e->n_workers; i++) {
        for (size_t k = 0; k < EGRESS_MAX_LISTEN; k++) {
            if (e->tcp_fds && e->tcp_fds[i][k] >= 0)
                close(e->tcp_fds[i][k]);
            if (e->dns_udp_fds && e->dns_udp_fds[i][k] >= 0)
                close(e->dns_udp_fds[i][k]);
            if (e->dns_tcp_fds && e->dns_tcp_fds[i][k] >= 0)
                close(e->dns_tcp_fds[i][k]);
        }
    }
    egress_inspect_stop(e);
    if (e->ctl_loop_init) {
        uv_close((uv_handle_t *)&e->ctl_wake, NULL);
        if (e->limits_timer_init)
            uv_close((uv_handle_t *)&e->limits_timer, NULL);
        uv_run(&e->ctl_loop, UV_RUN_DEFAULT);
        uv_loop_close(&e->ctl_loop);
    }
    if (e->audit) {
        if (e->reg)
            egress_limits_flush(e, true); /* counts no later event would have carried */
        json_t *r = egress_rec_new("daemon");
        if (r) {
            egress_rec_str(r, "event", "stop");
            egress_audit(e, r);
        }
        egress_audit_close(e->audit);
    }
    egress_registry_free(e->reg); /* sandboxes free their interception state */
    egress_policy_cache_clear();
    egress_inspect_fini(e);
    free(e->workers);
    free(e->tcp_fds);
    free(e->dns_udp_fds);
    free(e->dns_tcp_fds);
    pthread_mutex_destroy(&e->self_lock);
    free(e);
}
