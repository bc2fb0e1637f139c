/* egress/sandbox: see sandbox.h. The maps are small open-addressing tables rebuilt on
 * growth; sandboxes come and go at human rates, lookups happen per connection. */
#include "sandbox.h"
#include "audit_budget.h"
#include "inspect.h"
#include "resolver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/util.h"

struct reg__slot {
    uint64_t hash;
    struct egress_sandbox *sb; /* NULL = empty */
    uint8_t key_kind;          /* 1 = addr, 2 = id */
    struct egress_ip ip;       /* for addr keys */
};

struct egress_registry {
    pthread_rwlock_t lock;
    struct reg__slot *addr_slots;
    struct reg__slot *id_slots;
    size_t cap; /* power of two, for both tables */
    size_t n_sandboxes;
    size_t n_addrs;
};

static uint64_t reg__fnv(const void *data, size_t len, uint64_t h)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t reg__hash_ip(const struct egress_ip *ip)
{
    uint64_t h = reg__fnv(&ip->family, 1, 0xcbf29ce484222325ull);
    return reg__fnv(ip->addr, ip->family == 4 ? 4 : 16, h) | 1;
}

static uint64_t reg__hash_id(const char *id)
{
    return reg__fnv(id, strlen(id), 0xcbf29ce484222325ull) | 1;
}

bool egress_ip_equal(const struct egress_ip *a, const struct egress_ip *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, a->family == 4 ? 4 : 16) == 0;
}

static struct reg__slot *reg__find_addr(struct reg__slot *t, size_t cap, const struct egress_ip *ip)
{
    uint64_t h = reg__hash_ip(ip);
    for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (!t[i].sb)
            return &t[i];
        if (t[i].hash == h && egress_ip_equal(&t[i].ip, ip))
            return &t[i];
    }
}

static struct reg__slot *reg__find_id(struct reg__slot *t, size_t cap, const char *id)
{
    uint64_t h = reg__hash_id(id);
    for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (!t[i].sb)
            return &t[i];
        if (t[i].hash == h && strcmp(t[i].sb->id, id) == 0)
            return &t[i];
    }
}

/* Backward-shift deletion keeps linear probing correct without tombstones. */
static void reg__delete(struct reg__slot *t, size_t cap, struct reg__slot *s)
{
    size_t i = (size_t)(s - t);
    for (;;) {
        t[i].sb = NULL;
        size_t j = i;
        for (;;) {
            j = (j + 1) & (cap - 1);
            if (!t[j].sb)
                return;
            size_t home = t[j].hash & (cap - 1);
            /* Can t[j] move to i? Only if its home is not in (i, j]. */
            bool in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
            if (!in_range)
                break;
        }
        t[i] = t[j];
        i = j;
    }
}

static int reg__grow(struct egress_registry *r)
{
    size_t ncap = r->cap ? r->cap * 2 : 64;
    struct reg__slot *na = calloc(ncap, sizeof *na), *ni = calloc(ncap, sizeof *ni);
    if (!na || !ni) {
        free(na);
        free(ni);
        return -ENOMEM;
    }
    for (size_t i = 0; i < r->cap; i++) {
        if (r->addr_slots[i].sb)
            *reg__find_addr(na, ncap, &r->addr_slots[i].ip) = r->addr_slots[i];
        if (r->id_slots[i].sb)
            *reg__find_id(ni, ncap, r->id_slots[i].sb->id) = r->id_slots[i];
    }
    free(r->addr_slots);
    free(r->id_slots);
    r->addr_slots = na;
    r->id_slots = ni;
    r->cap = ncap;
    return 0;
}

int egress_registry_new(struct egress_registry **out)
{
    struct egress_registry *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    pthread_rwlock_init(&r->lock, NULL);
    int rc = reg__grow(r);
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void egress_registry_free(struct egress_registry *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->cap; i++) {
        if (r->id_slots[i].sb) {
            atomic_store(&r->id_slots[i].sb->removed, true);
            egress_sandbox_put(r->id_slots[i].sb);
        }
    }
    free(r->addr_slots);
    free(r->id_slots);
    pthread_rwlock_destroy(&r->lock);
    free(r);
}

static void ans__free_all(struct egress_sandbox *sb);

struct egress_sandbox *egress_sandbox_get(struct egress_sandbox *sb)
{
    atomic_fetch_add(&sb->refs, 1);
    return sb;
}

void egress_sandbox_put(struct egress_sandbox *sb)
{
    if (!sb || atomic_fetch_sub(&sb->refs, 1) != 1)
        return;
    egress_policy_unref(sb->policy);
    egress_inspect_sandbox_free(sb->inspect);
    json_decref(sb->network);
    ans__free_all(sb);
    egress_rcache_unref(atomic_load(&sb->rcache));
    egress_audit_budget_free(sb);
    pthread_mutex_destroy(&sb->agg_lock);
    pthread_mutex_destroy(&sb->lock);
    free(sb);
}

int egress_registry_add(struct egress_registry *r, const struct egress_registry_entry *in,
                        struct al_error *err)
{
    const char *id = in->id;
    const struct egress_ip *addrs = in->addrs;
    size_t n_addrs = in->n_addrs;
    if (!id[0] || strlen(id) >= sizeof((struct egress_sandbox *)0)->id)
        return al_error_set(err, -EINVAL, "sandbox id must be 1..127 characters");
    if (n_addrs == 0 || n_addrs > EGRESS_SANDBOX_MAX_ADDRS)
        return al_error_set(err, -EINVAL, "a sandbox needs 1..%d addresses",
                            EGRESS_SANDBOX_MAX_ADDRS);
    struct egress_sandbox *sb = calloc(1, sizeof *sb);
    if (!sb)
        return al_error_set(err, -ENOMEM, "out of memory");
    atomic_init(&sb->refs, 1);
    snprintf(sb->id, sizeof sb->id, "%s", id);
    snprintf(sb->template_name, sizeof sb->template_name, "%s",
             in->template_name ? in->template_name : "");
    snprintf(sb->policy_file, sizeof sb->policy_file, "%s", in->policy_file ? in->policy_file : "");
    memcpy(sb->addrs, addrs, n_addrs * sizeof *addrs);
    sb->n_addrs = n_addrs;
    pthread_mutex_init(&sb->lock, NULL);
    pthread_mutex_init(&sb->agg_lock, NULL);

    pthread_rwlock_wrlock(&r->lock);
    int rc = 0;
    if (reg__find_id(r->id_slots, r->cap, id)->sb) {
        rc = al_error_set(err, -EEXIST, "sandbox '%s' is already registered", id);
        goto out;
    }
    for (size_t i = 0; i < n_addrs; i++) {
        struct reg__slot *s = reg__find_addr(r->addr_slots, r->cap, &addrs[i]);
        if (s->sb) {
            char t[64];
            egress_ip_text(&addrs[i], t, sizeof t);
            rc = al_error_set(err, -EEXIST, "address %s already belongs to sandbox '%s'", t,
                              s->sb->id);
            goto out;
        }
        for (size_t k = 0; k < i; k++)
            if (egress_ip_equal(&addrs[k], &addrs[i])) {
                rc = al_error_set(err, -EINVAL, "the same address is listed twice");
                goto out;
            }
    }
    while ((r->n_sandboxes + 1) * 2 > r->cap || (r->n_addrs + n_addrs) * 2 > r->cap) {
        if ((rc = reg__grow(r)) < 0) {
            al_error_set(err, rc, "out of memory");
            goto out;
        }
    }
    sb->policy = in->policy;
    sb->network = in->network;
    struct reg__slot *s = reg__find_id(r->id_slots, r->cap, id);
    s->hash = reg__hash_id(id);
    s->sb = sb;
    s->key_kind = 2;
    for (size_t i = 0; i < n_addrs; i++) {
        s = reg__find_addr(r->addr_slots, r->cap, &addrs[i]);
        s->hash = reg__hash_ip(&addrs[i]);
        s->sb = sb;
        s->key_kind = 1;
        s->ip = addrs[i];
    }
    r->n_sandboxes++;
    r->n_addrs += n_addrs;
out:
    pthread_rwlock_unlock(&r->lock);
    if (rc < 0) {
        pthread_mutex_destroy(&sb->agg_lock);
        pthread_mutex_destroy(&sb->lock);
        free(sb);
    }
    return rc;
}

struct egress_sandbox *egress_registry_remove(struct egress_registry *r, const char *id)
{
    pthread_rwlock_wrlock(&r->lock);
    struct reg__slot *s = reg__find_id(r->id_slots, r->cap, id);
    struct egress_sandbox *sb = s->sb;
    if (sb) {
        reg__delete(r->id_slots, r->cap, s);
        for (size_t i = 0; i < sb->n_addrs; i++) {
            struct reg__slot *a = reg__find_addr(r->addr_slots, r->cap, &sb->addrs[i]);
            if (a->sb == sb)
                reg__delete(r->addr_slots, r->cap, a);
        }
        r->n_sandboxes--;
        r->n_addrs -= sb->n_addrs;
        atomic_store(&sb->removed, true);
        /* The registry's reference passes to the caller. */
    }
    pthread_rwlock_unlock(&r->lock);
    return sb;
}

struct egress_sandbox *egress_registry_by_addr(struct egress_registry *r,
                                               const struct egress_ip *ip)
{
    pthread_rwlock_rdlock(&r->lock);
    struct egress_sandbox *sb = reg__find_addr(r->addr_slots, r->cap, ip)->sb;
    if (sb)
        egress_sandbox_get(sb);
    pthread_rwlock_unlock(&r->lock);
    return sb;
}

struct egress_sandbox *egress_registry_by_id(struct egress_registry *r, const char *id)
{
    pthread_rwlock_rdlock(&r->lock);
    struct egress_sandbox *sb = reg__find_id(r->id_slots, r->cap, id)->sb;
    if (sb)
        egress_sandbox_get(sb);
    pthread_rwlock_unlock(&r->lock);
    return sb;
}

void egress_registry_each(struct egress_registry *r,
                          void (*fn)(struct egress_sandbox *sb, void *arg), void *arg)
{
    pthread_rwlock_rdlock(&r->lock);
    for (size_t i = 0; i < r->cap; i++)
        if (r->id_slots[i].sb)
            fn(r->id_slots[i].sb, arg);
    pthread_rwlock_unlock(&r->lock);
}

size_t egress_registry_count(struct egress_registry *r)
{
    pthread_rwlock_rdlock(&r->lock);
    size_t n = r->n_sandboxes;
    pthread_rwlock_unlock(&r->lock);
    return n;
}

struct egress_policy *egress_sandbox_policy(struct egress_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    struct egress_policy *p = sb->policy ? egress_policy_ref(sb->policy) : NULL;
    pthread_mutex_unlock(&sb->lock);
    return p;
}

void egress_sandbox_set_policy(struct egress_sandbox *sb, struct egress_policy *p,
                               const char *policy_file)
{
    pthread_mutex_lock(&sb->lock);
    struct egress_policy *old = sb->policy;
    sb->policy = p;
    if (policy_file)
        snprintf(sb->policy_file, sizeof sb->policy_file, "%s", policy_file);
    pthread_mutex_unlock(&sb->lock);
    egress_policy_unref(old);
}

struct egress_policy *egress_sandbox_policy_gen(struct egress_sandbox *sb, unsigned *gen)
{
    pthread_mutex_lock(&sb->lock);
    struct egress_policy *p = sb->policy ? egress_policy_ref(sb->policy) : NULL;
    *gen = atomic_load(&sb->net_gen);
    pthread_mutex_unlock(&sb->lock);
    return p;
}

void egress_sandbox_set_network(struct egress_sandbox *sb, struct egress_policy *p,
                                struct json_t *network, const char *update_id)
{
    pthread_mutex_lock(&sb->lock);
    struct egress_policy *old = sb->policy;
    json_t *old_net = sb->network;
    sb->policy = p;
    sb->network = network;
    snprintf(sb->net_update, sizeof sb->net_update, "%s", update_id ? update_id : "");
    atomic_fetch_add(&sb->net_gen, 1);
    pthread_mutex_unlock(&sb->lock);
    egress_policy_unref(old);
    json_decref(old_net);
}

void egress_sandbox_net_update(struct egress_sandbox *sb, char out[72])
{
    pthread_mutex_lock(&sb->lock);
    snprintf(out, 72, "%s", sb->net_update);
    pthread_mutex_unlock(&sb->lock);
}

/* ---- answer memory ---------------------------------------------------------------- */

#define ANS_PROBE 16

static size_t ans__slot(const char *name)
{
    return (size_t)(reg__fnv(name, strlen(name), 0xcbf29ce484222325ull) % EGRESS_ANSWER_SLOTS);
}

static void ans__free_all(struct egress_sandbox *sb)
{
    if (!sb->answers)
        return;
    for (size_t i = 0; i < EGRESS_ANSWER_SLOTS; i++)
        free(sb->answers[i]);
    free(sb->answers);
    sb->answers = NULL;
}

struct egress_rcache *egress_sandbox_rcache(struct egress_sandbox *sb,
                                            const struct egress_config *cfg)
{
    struct egress_rcache *c = atomic_load(&sb->rcache);
    if (c)
        return c;
    if (egress_rcache_new(cfg, &c) < 0)
        return NULL;
    struct egress_rcache *none = NULL;
    if (!atomic_compare_exchange_strong(&sb->rcache, &none, c)) {
        egress_rcache_unref(c); /* another worker made it first */
        c = none;
    }
    return c;
}

void egress_sandbox_remember(struct egress_sandbox *sb, const char *name,
                             const struct egress_ip *ips, size_t n, uint32_t keep_s)
{
    size_t nl = strlen(name);
    if (nl == 0 || nl > 253)
        return;
    uint64_t now = al_now_ns(), expire = now + (uint64_t)keep_s * 1000000000ull;
    pthread_mutex_lock(&sb->lock);
    if (!sb->answers && !(sb->answers = calloc(EGRESS_ANSWER_SLOTS, sizeof *sb->answers))) {
        pthread_mutex_unlock(&sb->lock);
        return;
    }
    /* Probe a short window from the name's slot: the same name, else an empty or expired
     * slot, else the entry that expires first is replaced. */
    size_t home = ans__slot(name);
    struct egress_answer_entry **slot = NULL, **victim = NULL;
    for (size_t k = 0; k < ANS_PROBE; k++) {
        struct egress_answer_entry **c = &sb->answers[(home + k) % EGRESS_ANSWER_SLOTS];
        if (*c && strcmp((*c)->name, name) == 0) {
            slot = c;
            break;
        }
        if (!*c || (*c)->expire_ns <= now) {
            if (!victim || (*victim && (*victim)->expire_ns > now))
                victim = c;
        } else if (!victim || (*victim && (*c)->expire_ns < (*victim)->expire_ns)) {
            victim = c;
        }
    }
    if (!slot) {
        slot = victim;
        free(*slot);
        *slot = calloc(1, sizeof **slot + nl + 1);
        if (!*slot) {
            pthread_mutex_unlock(&sb->lock);
            return;
        }
        memcpy((*slot)->name, name, nl + 1);
    }
    struct egress_answer_entry *e = *slot;
    if (e->expire_ns <= now)
        e->n4 = e->n6 = 0;
    /* Keep what was given before (connections may be on their way to it) and add the new
     * addresses; the oldest fall out when full. */
    for (size_t i = 0; i < n; i++) {
        bool v4 = ips[i].family == 4;
        size_t alen = v4 ? 4 : 16;
        uint8_t *arr = v4 ? &e->v4[0][0] : &e->v6[0][0];
        uint8_t *cnt = v4 ? &e->n4 : &e->n6;
        bool dup = false;
        for (size_t k = 0; k < *cnt && !dup; k++)
            dup = memcmp(arr + k * alen, ips[i].addr, alen) == 0;
        if (dup)
            continue;
        if (*cnt == DNS_MAX_ANSWERS) {
            memmove(arr, arr + alen, (DNS_MAX_ANSWERS - 1) * alen);
            (*cnt)--;
        }
        memcpy(arr + (*cnt)++ * alen, ips[i].addr, alen);
    }
    if (expire > e->expire_ns)
        e->expire_ns = expire;
    pthread_mutex_unlock(&sb->lock);
}

bool egress_sandbox_answered(struct egress_sandbox *sb, const char *name,
                             const struct egress_ip *ip)
{
    bool found = false;
    uint64_t now = al_now_ns();
    bool v4 = ip->family == 4;
    size_t alen = v4 ? 4 : 16;
    pthread_mutex_lock(&sb->lock);
    if (sb->answers) {
        size_t home = ans__slot(name);
        for (size_t k = 0; k < ANS_PROBE; k++) {
            const struct egress_answer_entry *c = sb->answers[(home + k) % EGRESS_ANSWER_SLOTS];
            if (!c || strcmp(c->name, name) != 0)
                continue;
            if (c->expire_ns > now) {
                const uint8_t *arr = v4 ? &c->v4[0][0] : &c->v6[0][0];
                size_t cnt = v4 ? c->n4 : c->n6;
                for (size_t i = 0; i < cnt && !found; i++)
                    found = memcmp(arr + i * alen, ip->addr, alen) == 0;
            }
            break;
        }
    }
    pthread_mutex_unlock(&sb->lock);
    return found;
}
