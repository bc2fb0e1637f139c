/* vmm/jail/snapshot: snapshots of a jail sandbox's file system and restores from them (see
 * jail.h, "snapshots of the file system"). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "fscopy.h"
#include "idmap.h"
#include "jail.h"

/* Written for each sandbox by jail.c (its identity): never taken, never restored. */
static const char *const snap__identity[] = {"etc/hostname", "etc/hosts", "etc/resolv.conf", NULL};

#define SNAP_META_MAX (64 * 1024)

static json_t *snap__stats_json(const struct jail_fscopy_stats *st)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "bytes", (json_int_t)st->bytes, "files",
                     (json_int_t)st->files, "dirs", (json_int_t)st->dirs, "symlinks",
                     (json_int_t)st->symlinks, "whiteouts", (json_int_t)st->whiteouts, "hardlinks",
                     (json_int_t)st->hardlinks, "skipped", (json_int_t)st->skipped,
                     "reflinked_files", (json_int_t)st->reflinked_files);
}

int jail_snapshot_check(struct jail *j, const char *dir, bool own, struct al_error *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/snapshot.json", dir);
    al_autofree char *text = NULL;
    size_t len;
    struct al_error e = {0};
    int rc = al_read_file(p, SNAP_META_MAX, &text, &len, &e);
    if (rc) /* (a rollback's snapshot that is not there is the caller's mistake: -EINVAL) */
        return al_error_set(err, own && rc == -ENOENT ? -EINVAL : rc,
                            "%s: %s (is it a snapshot made by POST /snapshot of a jail "
                            "sandbox?)",
                            own ? "rollback" : "spec.jail.restore", al_error_str(&e));
    json_t *m = al_json_parse(text, len, &e);
    const char *format = json_string_value(json_object_get(m, "format"));
    json_t *base = json_object_get(m, "id_base");
    if (!m || !format || strcmp(format, JAIL_SNAPSHOT_FORMAT) != 0 || !json_is_integer(base) ||
        json_integer_value(base) < 0 || json_integer_value(base) > 0xffffffffll) {
        rc = al_error_set(err, -EINVAL,
                          "%s: %s is not a jail snapshot of this version (format %.64s, "
                          "want " JAIL_SNAPSHOT_FORMAT ")",
                          own ? "rollback" : "spec.jail.restore", p, format ? format : "missing");
        json_decref(m);
        return rc;
    }
    /* A rollback replaces the layer of the sandbox the snapshot was taken of: another's
     * (or one of another template, whose differences would apply to the wrong files) is
     * refused before anything is stopped. */
    const char *sid = json_string_value(json_object_get(m, "sandbox"));
    const char *tdir = json_string_value(json_object_get(m, "template_dir"));
    if (own && (!sid || strcmp(sid, j->spec->id) != 0)) {
        rc = al_error_set(err, -EINVAL, "rollback: %s is a snapshot of sandbox %.64s, not of %s",
                          dir, sid ? sid : "(unnamed)", j->spec->id);
        json_decref(m);
        return rc;
    }
    if (own && (!tdir || strcmp(tdir, j->spec->template_dir) != 0)) {
        rc = al_error_set(err, -EINVAL,
                          "rollback: %s was taken on template %.256s, the sandbox runs on %s", dir,
                          tdir ? tdir : "(unnamed)", j->spec->template_dir);
        json_decref(m);
        return rc;
    }
    j->restore_id_base = (uint32_t)json_integer_value(base);
    json_decref(m);
    struct stat st;
    snprintf(p, sizeof p, "%s/upper", dir);
    if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode))
        return al_error_set(err, -EINVAL, "%s: %s is missing: the snapshot is incomplete",
                            own ? "rollback" : "spec.jail.restore", p);
    return 0;
}

/* Files made in the sandbox's tmpfs need an owner its user namespace maps, and a new inode
 * is first owned by the file system ids of its maker: this thread makes them as the
 * sandbox's root (fsuid and fsgid), keeping its capabilities (SECBIT_NO_SETUID_FIXUP), so
 * that it can still read the snapshot and give each file its owner. */
static int snap__fsid_enter(uid_t id, int *old_bits)
{
    int bits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (bits < 0 || prctl(PR_SET_SECUREBITS, bits | SECBIT_NO_SETUID_FIXUP, 0, 0, 0) < 0)
        return -errno;
    *old_bits = bits;
    setfsgid(id);
    setfsuid(id);
    if ((uid_t)setfsuid((uid_t)-1) != id || (gid_t)setfsgid((gid_t)-1) != id) {
        setfsuid(0);
        setfsgid(0);
        prctl(PR_SET_SECUREBITS, bits, 0, 0, 0);
        return -EPERM;
    }
    return 0;
}

static void snap__fsid_leave(int old_bits)
{
    setfsuid(0);
    setfsgid(0);
    prctl(PR_SET_SECUREBITS, old_bits, 0, 0, 0);
}

int jail_snapshot_fill(struct jail *j, struct al_error *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/upper", j->restore);
    int src = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0)
        return al_error_set(err, -errno, "restore: open %s: %s", p, strerror(errno));
    struct jail_fscopy_opts o = {
        .src_id_base = j->restore_id_base,
        .dst_id_base = j->host_uid,
        .id_count = JAIL_IDS_PER_SLOT,
        .skip = snap__identity,
        .merge = true, /* the identity files and /etc are in place already */
    };
    struct jail_fscopy_stats st;
    uint64_t t0 = al_now_ns();
    struct al_error e = {0};
    int bits = 0;
    int rc = snap__fsid_enter(j->host_uid, &bits);
    if (rc) {
        close(src);
        return al_error_set(err, rc,
                            "restoring the snapshot: cannot act as the sandbox's root "
                            "(setfsuid with SECBIT_NO_SETUID_FIXUP): %s",
                            strerror(-rc));
    }
    rc = jail_fscopy(src, j->upper_fd, &o, &st, &e);
    snap__fsid_leave(bits);
    close(src);
    if (rc)
        return al_error_set(err, rc, "restoring the snapshot %s: %s%s", j->restore,
                            al_error_str(&e),
                            rc == -ENOSPC ? " (it does not fit the sandbox's disk size)" : "");
    al_debug("sandbox %s: %llu bytes in %llu files restored in %.1f ms", j->spec->id,
             (unsigned long long)st.bytes, (unsigned long long)st.files,
             (double)(al_now_ns() - t0) / 1e6);
    return 0;
}

int jail_snapshot(struct jail *j, const char *dest, json_t **info, struct al_error *err)
{
    *info = NULL;
    if (!vmm_path_normalised(dest) || strcmp(dest, "/") == 0)
        return al_error_set(err, -EINVAL, "\"path\" must be a normalised absolute path");
    if (j->upper_fd < 0)
        return al_error_set(err, -ENOTCONN, "sandbox %s has no file system to snapshot",
                            j->spec->id);
    struct stat st;
    if (lstat(dest, &st) == 0)
        return al_error_set(err, -EEXIST, "%s exists: give a new directory", dest);
    char parent[PATH_MAX], tmp[PATH_MAX + 64], p[PATH_MAX + 96];
    snprintf(parent, sizeof parent, "%s", dest);
    char *slash = strrchr(parent, '/');
    const char *name = slash + 1;
    *slash = '\0';
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s.%d", parent[0] ? parent : "", name, (int)getpid());
    if (lstat(parent[0] ? parent : "/", &st) < 0 || !S_ISDIR(st.st_mode))
        return al_error_set(err, -EINVAL, "%s: its directory %s does not exist", dest,
                            parent[0] ? parent : "/");
    al_rmtree(tmp); /* a leftover of an earlier attempt of this very process */
    snprintf(p, sizeof p, "%s/upper", tmp);
    if (mkdir(tmp, 0700) < 0 || mkdir(p, 0700) < 0) {
        int rc = al_error_set(err, -errno, "create %s: %s", p, strerror(errno));
        al_rmtree(tmp);
        return rc;
    }
    int dst = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dst < 0) {
        int rc = al_error_set(err, -errno, "open %s: %s", p, strerror(errno));
        al_rmtree(tmp);
        return rc;
    }

    /* Frozen, so that the tree is one moment's and no file changes while it is copied. */
    bool was_paused = jail_is_paused(j);
    uint64_t t0 = al_now_ns();
    int rc = was_paused ? 0 : jail_pause(j, err);
    struct jail_fscopy_stats cs = {0};
    if (!rc) {
        struct jail_fscopy_opts o = {
            .src_id_base = j->host_uid,
            .dst_id_base = j->host_uid,
            .id_count = JAIL_IDS_PER_SLOT,
            .skip = snap__identity,
            .reflink = true,
        };
        rc = jail_fscopy(j->upper_fd, dst, &o, &cs, err);
        if (!was_paused) {
            struct al_error e2 = {0};
            if (jail_resume(j, &e2) && !rc)
                rc = al_error_set(err, e2.code ? e2.code : -EIO, "%s", al_error_str(&e2));
        }
    }
    uint64_t frozen_ns = al_now_ns() - t0;
    if (!rc) {
        json_t *meta =
            json_pack("{s:s,s:s,s:s,s:I,s:s,s:o}", "format", JAIL_SNAPSHOT_FORMAT, "sandbox",
                      j->spec->id, "template_id", j->spec->template_id ? j->spec->template_id : "",
                      "id_base", (json_int_t)j->host_uid, "template_dir", j->spec->template_dir,
                      "copied", snap__stats_json(&cs));
        char *text = meta ? json_dumps(meta, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
        json_decref(meta);
        snprintf(p, sizeof p, "%s/snapshot.json", tmp);
        rc = text ? al_write_file_atomic(p, text, strlen(text), 0600, err)
                  : al_error_set(err, -ENOMEM, "out of memory");
        free(text);
    }
    /* Durable before it is in place: a crash leaves the old state or the whole snapshot. */
    if (!rc && syncfs(dst) < 0)
        rc = al_error_set(err, -errno, "sync %s: %s", tmp, strerror(errno));
    close(dst);
    if (!rc && rename(tmp, dest) < 0)
        rc = al_error_set(err, -errno, "rename %s to %s: %s", tmp, dest, strerror(errno));
    if (!rc && parent[0])
        al_fsync_dir(parent);
    if (rc) {
        al_rmtree(tmp);
        return rc;
    }
    double ms = (double)(al_now_ns() - t0) / 1e6;
    *info = json_pack("{s:s,s:s,s:f,s:f,s:I,s:o}", "path", dest, "format", JAIL_SNAPSHOT_FORMAT,
                      "ms", ms, "frozen_ms", (double)frozen_ns / 1e6, "id_base",
                      (json_int_t)j->host_uid, "copied", snap__stats_json(&cs));
    al_info("sandbox %s: file system snapshot written to %s in %.1f ms (%llu bytes in %llu "
            "files, frozen %.1f ms)",
            j->spec->id, dest, ms, (unsigned long long)cs.bytes, (unsigned long long)cs.files,
            (double)frozen_ns / 1e6);
    return 0;
}
