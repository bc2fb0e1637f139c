/* vmm/jail/idmap: see idmap.h. */
#include "idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/util.h"

int jail_idmap_check(const struct jail_idmap_cfg *cfg, struct al_error *err)
{
    if (cfg->slots == 0)
        return al_error_set(err, -EINVAL, "uid_slots must be at least 1");
    if (cfg->base < JAIL_IDS_PER_SLOT)
        return al_error_set(err, -EINVAL,
                            "uid_base %u overlaps the ids a host uses (0..65535): choose a base "
                            "of at least 65536, e.g. the default %u",
                            cfg->base, JAIL_ID_BASE_DEFAULT);
    uint64_t end = (uint64_t)cfg->base + (uint64_t)cfg->slots * JAIL_IDS_PER_SLOT;
    if (end > 0xffffffffull)
        return al_error_set(err, -ERANGE,
                            "uid_base %u with %u slots of 65536 ids goes past the largest id "
                            "(4294967294): lower the base or the number of slots",
                            cfg->base, cfg->slots);
    if (!cfg->dir || !*cfg->dir)
        return al_error_set(err, -EINVAL, "no directory for id slot files");
    return 0;
}

uint32_t jail_idmap_host_base(const struct jail_idmap_cfg *cfg, uint32_t slot)
{
    return cfg->base + slot * JAIL_IDS_PER_SLOT;
}

uint32_t jail_idmap_start_slot(const struct jail_idmap_cfg *cfg, const char *id)
{
    /* FNV-1a: cheap and well spread for short ids. */
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h % cfg->slots;
}

/* ---- the slot map ------------------------------------------------------------------ */

static void idmap__map_path(const struct jail_idmap_cfg *cfg, char *out, size_t len)
{
    snprintf(out, len, "%s.map", cfg->dir);
}

/* Opens (and with create, makes) the map; -ENOENT if it does not exist and !create. */
static int idmap__open(const struct jail_idmap_cfg *cfg, bool create)
{
    char p[4096];
    idmap__map_path(cfg, p, sizeof p);
    int fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    if (fd >= 0 || errno != ENOENT || !create)
        return fd < 0 ? -errno : fd;
    /* The first sandbox of this state directory: make <state>/jail. */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", p);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = '\0';
        int rc = al_mkdir_p(parent, 0700);
        if (rc)
            return rc;
    }
    fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_CREAT, 0600);
    return fd < 0 ? -errno : fd;
}

/* One record's lock (open file description locks: per open, not per process, and released
 * when the descriptor is closed, also by a crash). */
static int idmap__lock(int fd, uint32_t slot, short type, bool wait)
{
    struct flock l = {
        .l_type = type,
        .l_whence = SEEK_SET,
        .l_start = (off_t)slot * JAIL_IDMAP_RECORD,
        .l_len = JAIL_IDMAP_RECORD,
    };
    for (;;) {
        if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) == 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

/* Reads a record: 1 and its holder in out, 0 if free (or past the end of the file). */
static int idmap__read(int fd, uint32_t slot, char *out, size_t outlen)
{
    char rec[JAIL_IDMAP_RECORD];
    ssize_t n;
    do {
        n = pread(fd, rec, sizeof rec, (off_t)slot * JAIL_IDMAP_RECORD);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    if (n == 0 || rec[0] == '\0')
        return 0;
    rec[(size_t)n < sizeof rec ? (size_t)n : sizeof rec - 1] = '\0';
    if (out)
        snprintf(out, outlen, "%s", rec);
    return 1;
}

static int idmap__write(int fd, uint32_t slot, const char *id)
{
    char rec[JAIL_IDMAP_RECORD];
    memset(rec, 0, sizeof rec);
    if (id)
        snprintf(rec, sizeof rec, "%s", id);
    ssize_t n;
    do {
        n = pwrite(fd, rec, sizeof rec, (off_t)slot * JAIL_IDMAP_RECORD);
    } while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof rec ? 0 : n < 0 ? -errno : -EIO;
}

/* A slot file of an earlier airlock-vmm (one file per slot in cfg->dir). */
static void idmap__legacy_path(const struct jail_idmap_cfg *cfg, uint32_t slot, char *out,
                               size_t len)
{
    snprintf(out, len, "%s/%u", cfg->dir, slot);
}

static int idmap__legacy_holder(const struct jail_idmap_cfg *cfg, uint32_t slot, char *out,
                                size_t outlen)
{
    char p[4096];
    idmap__legacy_path(cfg, slot, p, sizeof p);
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, out, outlen - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    out[n] = '\0';
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
    return 0;
}

int jail_idmap_holder(const struct jail_idmap_cfg *cfg, uint32_t slot, char *out, size_t outlen)
{
    int fd = idmap__open(cfg, false);
    if (fd >= 0) {
        int r = idmap__read(fd, slot, out, outlen);
        close(fd);
        if (r < 0)
            return r;
        if (r == 1)
            return 0;
    } else if (fd != -ENOENT) {
        return fd;
    }
    return idmap__legacy_holder(cfg, slot, out, outlen);
}

/* <dir>.held: an empty file whose byte N is read-locked while slot N is held. */
static void idmap__held_path(const struct jail_idmap_cfg *cfg, char *out, size_t len)
{
    snprintf(out, len, "%s.held", cfg->dir);
}

static int idmap__held_lock(int fd, uint32_t slot, short type, int cmd, struct flock *l)
{
    *l = (struct flock){.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)slot, .l_len = 1};
    for (;;) {
        if (fcntl(fd, cmd, l) == 0)
            return 0;
        if (errno != EINTR)
            return -errno;
    }
}

/* Takes the hold of slot; the descriptor in *hold. */
static int idmap__hold(const struct jail_idmap_cfg *cfg, uint32_t slot, int *hold)
{
    char p[4096];
    idmap__held_path(cfg, p, sizeof p);
    /* Read-only: the holder's processes keep it open, and may be the ones whose input is
     * untrusted; the file is empty, so it tells them nothing. */
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_CREAT, 0600);
    if (fd < 0)
        return -errno;
    struct flock l;
    int rc = idmap__held_lock(fd, slot, F_RDLCK, F_OFD_SETLK, &l);
    if (rc) {
        close(fd);
        return rc;
    }
    *hold = fd;
    return 0;
}

/* 1 if some descriptor holds slot, 0 if not, or a negative errno. */
static int idmap__held(const struct jail_idmap_cfg *cfg, uint32_t slot)
{
    char p[4096];
    idmap__held_path(cfg, p, sizeof p);
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    struct flock l;
    int rc = idmap__held_lock(fd, slot, F_WRLCK, F_OFD_GETLK, &l);
    close(fd);
    return rc < 0 ? rc : l.l_type != F_UNLCK;
}

static int idmap__alloc(const struct jail_idmap_cfg *cfg, const char *id, uint32_t *slot, int *hold,
                        struct al_error *err)
{
    int rc = jail_idmap_check(cfg, err);
    if (rc)
        return rc;
    if (strlen(id) >= JAIL_IDMAP_RECORD)
        return al_error_set(err, -ENAMETOOLONG, "sandbox id %s is too long for an id slot", id);
    char mp[4096];
    idmap__map_path(cfg, mp, sizeof mp);
    int fd = idmap__open(cfg, true);
    if (fd < 0)
        return al_error_set(err, fd, "cannot open the id slot map %s: %s", mp, strerror(-fd));
    uint32_t start = jail_idmap_start_slot(cfg, id);
    for (uint32_t i = 0; i < cfg->slots; i++) {
        uint32_t s = (start + i) % cfg->slots;
        /* Unlocked look first (most probes end at the first slot); then under the
         * record's lock, which another airlock-vmm probing the same slot holds briefly. */
        if ((rc = idmap__read(fd, s, NULL, 0)) != 0) {
            if (rc < 0)
                break;
            continue;
        }
        if (idmap__lock(fd, s, F_WRLCK, false) < 0)
            continue;
        rc = idmap__read(fd, s, NULL, 0);
        char lp[4096];
        idmap__legacy_path(cfg, s, lp, sizeof lp);
        if (rc == 0 && access(lp, F_OK) == 0)
            rc = 1; /* held by an earlier airlock-vmm's slot file */
        if (rc == 0)
            rc = idmap__write(fd, s, id);
        else if (rc == 1)
            rc = -EEXIST;
        /* The hold is taken before the record's lock is let go, so a release (the sweep)
         * never sees the record claimed but not yet held. */
        if (rc == 0 && hold && (rc = idmap__hold(cfg, s, hold)) < 0)
            idmap__write(fd, s, NULL);
        idmap__lock(fd, s, F_UNLCK, false);
        if (rc == -EEXIST)
            continue;
        close(fd);
        if (rc < 0)
            return al_error_set(err, rc, "cannot claim id slot %u in %s: %s", s, mp, strerror(-rc));
        *slot = s;
        return 0;
    }
    close(fd);
    if (rc < 0)
        return al_error_set(err, rc, "cannot read the id slot map %s: %s", mp, strerror(-rc));
    return al_error_set(err, -ENOSPC,
                        "all %u id slots in %s are taken: stop sandboxes, run airlock-vmm "
                        "--sweep to reclaim those of crashed ones, or raise uid_slots",
                        cfg->slots, mp);
}

int jail_idmap_alloc(const struct jail_idmap_cfg *cfg, const char *id, uint32_t *slot,
                     struct al_error *err)
{
    return idmap__alloc(cfg, id, slot, NULL, err);
}

int jail_idmap_alloc_held(const struct jail_idmap_cfg *cfg, const char *id, uint32_t *slot,
                          int *hold, struct al_error *err)
{
    return idmap__alloc(cfg, id, slot, hold, err);
}

int jail_idmap_release(const struct jail_idmap_cfg *cfg, uint32_t slot, const char *id)
{
    char holder[JAIL_IDMAP_RECORD];
    int fd = idmap__open(cfg, false);
    if (fd >= 0) {
        int rc = idmap__lock(fd, slot, F_WRLCK, true);
        if (rc == 0) {
            rc = idmap__read(fd, slot, holder, sizeof holder);
            if (rc == 1) {
                if (strcmp(holder, id) != 0)
                    rc = -EPERM;
                else if ((rc = idmap__held(cfg, slot)) == 0)
                    rc = idmap__write(fd, slot, NULL);
                else if (rc == 1)
                    rc = -EBUSY; /* its holder's processes still run */
            } else if (rc == 0) {
                rc = 1; /* free in the map: perhaps an earlier airlock-vmm's slot file */
            }
            idmap__lock(fd, slot, F_UNLCK, false);
        }
        close(fd);
        if (rc <= 0)
            return rc;
    } else if (fd != -ENOENT) {
        return fd;
    }
    char lh[128];
    int rc = idmap__legacy_holder(cfg, slot, lh, sizeof lh);
    if (rc)
        return rc == -ENOENT ? 0 : rc;
    if (strcmp(lh, id) != 0)
        return -EPERM;
    char p[4096];
    idmap__legacy_path(cfg, slot, p, sizeof p);
    if (unlink(p) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int jail_idmap_foreach(const struct jail_idmap_cfg *cfg,
                       int (*fn)(uint32_t slot, const char *holder, void *arg), void *arg)
{
    int fd = idmap__open(cfg, false);
    if (fd < 0)
        return fd == -ENOENT ? 0 : fd;
    char buf[64 * JAIL_IDMAP_RECORD];
    int rc = 0;
    for (uint32_t s = 0; s < cfg->slots && rc == 0;) {
        ssize_t n = pread(fd, buf, sizeof buf, (off_t)s * JAIL_IDMAP_RECORD);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            break;
        }
        if (n == 0)
            break;
        for (size_t o = 0; o + JAIL_IDMAP_RECORD <= (size_t)n && rc == 0 && s < cfg->slots;
             o += JAIL_IDMAP_RECORD, s++) {
            char *rec = buf + o;
            if (!rec[0])
                continue;
            rec[JAIL_IDMAP_RECORD - 1] = '\0';
            rc = fn(s, rec, arg);
        }
        if ((size_t)n < sizeof buf)
            break;
    }
    close(fd);
    return rc;
}
