/* controlplane/map: a small hash map from byte-string keys to pointers.
 *
 * Owns: its buckets and copies of the keys, never the values. Used for the live sandbox
 * registry (by id, by access-token digest). Single-threaded (the event loop's).
 */
#ifndef AIRLOCK_CP_MAP_H
#define AIRLOCK_CP_MAP_H

#include <stdbool.h>
#include <stddef.h>

struct cp_map_entry;

struct cp_map {
    struct cp_map_entry **buckets;
    size_t nbuckets;
    size_t count;
};

void cp_map_init(struct cp_map *m);
void cp_map_free(struct cp_map *m);
/* -EEXIST if the key is present, -ENOMEM. */
int cp_map_put(struct cp_map *m, const void *key, size_t klen, void *value);
void *cp_map_get(const struct cp_map *m, const void *key, size_t klen);
/* Returns the removed value, or NULL. */
void *cp_map_del(struct cp_map *m, const void *key, size_t klen);
static inline size_t cp_map_count(const struct cp_map *m)
{
    return m->count;
}
/* Calls fn for each value (in no particular order); fn may not change the map. Returns the
 * first non-zero value fn returned. */
int cp_map_foreach(const struct cp_map *m, int (*fn)(void *value, void *arg), void *arg);

#endif
