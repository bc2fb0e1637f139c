/* controlplane/sweep: removing, at start, what no record of the state database names.
 *
 * Owns: the one walk of a store directory under airlockd's state directory (<state>/snapshots,
 * <state>/volumes, <state>/paused) that removes every entry its owner's records do not claim:
 * an entry made before its row and never completed (a ".tmp-" name, or one whose row was never
 * written because airlockd died first) and an entry whose row is gone (a deletion airlockd did
 * not finish). The owner says which entries are still recorded, and may release an entry (e.g.
 * unmount it) before it is removed; the walk removes without following links, logs each
 * removal and each failure, and answers how many it removed.
 */
#ifndef AIRLOCK_CP_SWEEP_H
#define AIRLOCK_CP_SWEEP_H

#include <stdbool.h>

struct cp_sweep {
    const char *what; /* for the log: "snapshot", "volume", ... */
    bool create;      /* make the directory (0700) when it is missing, else nothing to do */
    /* Whether the entry named name is still recorded (kept). It judges the name as well: a
     * name that is no id of the owner's (".tmp-...", junk) is not recorded. */
    bool (*recorded)(const char *name, void *arg);
    /* Before an entry that is not recorded is removed, with its path; NULL: nothing. */
    void (*release)(const char *path, void *arg);
    void *arg;
};

/* Removes from dir every entry s->recorded does not keep; the number removed. */
unsigned cp_sweep_dir(const char *dir, const struct cp_sweep *s);

#endif
