/* controlplane/sweep: removing, at start, what no record of the state database names.
 *
 * Owns: the one walk of a store directory under airlockd's state directory (<state>/snapshots,
 * <state>/volumes, <state>/paused) that removes every entry its owner's records do not claim:
 * an entry made before its row and never completed (a ".tmp-" name, or one whose row was never
 * written because airlockd died first) and an entry whose row is gone (a deletion airlockd did
 * not finish). The owner says which entries are still recorded, and may release an entry (e.g.
 * unmount it) before it is removed; the walk removes without following links, logs each
 * removal and each failure, and answers how many it removed.
 * And the one removal of such an entry after start, off the loop thread: a snapshot's layer,
 * a fork's checkpoint, a paused sandbox's files or a template version can hold gigabytes,
 * and airlockd's event loop must not wait for their unlinking.
 */
#ifndef AIRLOCK_CP_SWEEP_H
#define AIRLOCK_CP_SWEEP_H

#include <stdbool.h>
#include <uv.h>

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

/* Removes path (a whole tree, links not followed) on a worker thread of loop; a failure is
 * logged with the path. The caller takes path out of its owner's sight first (cp_take_away)
 * so that nothing finds it meanwhile and a crash leaves it to its owner's sweep. When the
 * work cannot be queued, path is removed before this returns. */
void cp_remove_later(uv_loop_t *loop, const char *path);

/* Takes path away at once and removes it later: renamed to ".<name>.deleted-<random>" in
 * its directory (a name no owner records), then cp_remove_later. Nothing there is fine.
 * When the rename fails, path is removed before this returns (what: "snapshot", ...). */
void cp_take_away(uv_loop_t *loop, const char *path, const char *what);

#endif
