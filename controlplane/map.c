/* controlplane/map: see map.h. Chained buckets, doubled at load factor 1. */
#include "map.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct cp_map_entry {
    struct cp_map_entry *next;
    uint64_t hash;
    void *value;
    size_t klen;
    unsigned char key[];
};

static uint64_t map__hash(const void *key, size_t len)
{
    /* FNV-1a: keys are ids and digests, which callers do not choose freely. */
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

void cp_map_init(struct cp_map *m)
{
    memset(m, 0, sizeof *m);
}

void cp_map_free(struct cp_map *m)
{
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct cp_map_entry *e = m->buckets[i];
        while (e) {
            struct cp_map_entry *n = e->next;
            free(e);
            e = n;
        }
    }
    free(m->buckets);
    memset(m, 0, sizeof *m);
}

static int map__grow(struct cp_map *m)
{
    size_t nb = m->nbuckets ? m->nbuckets * 2 : 64;
    struct cp_map_entry **b = calloc(nb, sizeof *b);
    if (!b)
        return -ENOMEM;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct cp_map_entry *e = m->buckets[i];
        while (e) {
            struct cp_map_entry *n = e->next;
            size_t j = e->hash & (nb - 1);
            e->next = b[j];
            b[j] = e;
            e = n;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = nb;
    return 0;
}

static struct cp_map_entry **map__find(const struct cp_map *m, const void *key, size_t klen,
                                       uint64_t h)
{
    if (!m->nbuckets)
        return NULL;
    struct cp_map_entry **pp = &m->buckets[h & (m->nbuckets - 1)];
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0)
            return pp;
    }
    return NULL;
}

int cp_map_put(struct cp_map *m, const void *key, size_t klen, void *value)
{
    uint64_t h = map__hash(key, klen);
    if (map__find(m, key, klen, h))
        return -EEXIST;
    if (m->count >= m->nbuckets && map__grow(m))
        return -ENOMEM;
    struct cp_map_entry *e = malloc(sizeof *e + klen);
    if (!e)
        return -ENOMEM;
    e->hash = h;
    e->value = value;
    e->klen = klen;
    memcpy(e->key, key, klen);
    size_t j = h & (m->nbuckets - 1);
    e->next = m->buckets[j];
    m->buckets[j] = e;
    m->count++;
    return 0;
}

void *cp_map_get(const struct cp_map *m, const void *key, size_t klen)
{
    struct cp_map_entry **pp = map__find(m, key, klen, map__hash(key, klen));
    return pp ? (*pp)->value : NULL;
}

void *cp_map_del(struct cp_map *m, const void *key, size_t klen)
{
    struct cp_map_entry **pp = map__find(m, key, klen, map__hash(key, klen));
    if (!pp)
        return NULL;
    struct cp_map_entry *e = *pp;
    void *v = e->value;
    *pp = e->next;
    free(e);
    m->count--;
    return v;
}

int cp_map_foreach(const struct cp_map *m, int (*fn)(void *value, void *arg), void *arg)
{
    for (size_t i = 0; i < m->nbuckets; i++) {
        for (struct cp_map_entry *e = m->buckets[i]; e; e = e->next) {
            int rc = fn(e->value, arg);
            if (rc)
                return rc;
        }
    }
    return 0;
}
