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

static void idmap__path(const struct jail_idmap_cfg *cfg, uint32_t slot, char *out, size_t len)
{
    snprintf(out, len, "%s/%u", cfg->dir, slot);
}

int jail_idmap_holder(const struct jail_idmap_cfg *cfg, uint32_t slot, char *out, size_t outlen)
{
    char p[4096];
    idmap__path(cfg, slot, p, sizeof p);
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

int jail_idmap_alloc(const struct jail_idmap_cfg *cfg, const char *id, uint32_t *slot,
                     struct al_error *err)
{
    int rc = jail_idmap_check(cfg, err);
    if (rc)
        return rc;
    rc = mkdir(cfg->dir, 0700) < 0 && errno != EEXIST ? al_mkdir_p(cfg->dir, 0700) : 0;
    if (rc)
        return al_error_set(err, rc, "cannot create %s: %s", cfg->dir, strerror(-rc));
    uint32_t start = jail_idmap_start_slot(cfg, id);
    for (uint32_t i = 0; i < cfg->slots; i++) {
        uint32_t s = (start + i) % cfg->slots;
        char p[4096];
        idmap__path(cfg, s, p, sizeof p);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            return al_error_set(err, -errno, "cannot create id slot file %s: %s", p,
                                strerror(errno));
        }
        char line[128];
        int n = snprintf(line, sizeof line, "%s\n", id);
        rc = al_write_all(fd, line, (size_t)n);
        close(fd);
        if (rc) {
            unlink(p);
            return al_error_set(err, rc, "cannot write id slot file %s: %s", p, strerror(-rc));
        }
        *slot = s;
        return 0;
    }
    return al_error_set(err, -ENOSPC,
                        "all %u id slots in %s are taken: stop sandboxes, run airlock-vmm "
                        "--sweep to reclaim those of crashed ones, or raise uid_slots",
                        cfg->slots, cfg->dir);
}

int jail_idmap_release(const struct jail_idmap_cfg *cfg, uint32_t slot, const char *id)
{
    char holder[128];
    int rc = jail_idmap_holder(cfg, slot, holder, sizeof holder);
    if (rc)
        return rc == -ENOENT ? 0 : rc;
    if (strcmp(holder, id) != 0)
        return -EPERM;
    char p[4096];
    idmap__path(cfg, slot, p, sizeof p);
    if (unlink(p) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}
