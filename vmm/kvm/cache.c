/* vmm/kvm/cache: see cache.h. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "vmm/kvm/disk.h"

/* Bump when the image layout or the snapshot contract changes. */
#define KVM_CACHE_FORMAT "airlock-kvm-cache-1"

/* ---- keys -------------------------------------------------------------------------------- */

int kvm_cache_file_id(const char *path, char *out, size_t outlen)
{
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(path, real) || stat(real, &st) < 0)
        return -errno;
    int n = snprintf(out, outlen, "%s:%lld:%lld.%09ld:%llu:%llu", real, (long long)st.st_size,
                     (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     (unsigned long long)st.st_ino, (unsigned long long)st.st_dev);
    return n < 0 || (size_t)n >= outlen ? -ENAMETOOLONG : 0;
}

static void cache__update_str(crypto_generichash_state *h, const char *s)
{
    /* Length-prefixed: "ab"+"c" and "a"+"bc" differ. */
    uint64_t n = strlen(s);
    crypto_generichash_update(h, (const unsigned char *)&n, sizeof n);
    crypto_generichash_update(h, (const unsigned char *)s, n);
}

static void cache__final_key(crypto_generichash_state *h, char key[KVM_CACHE_KEY_LEN + 1])
{
    unsigned char d[32];
    crypto_generichash_final(h, d, sizeof d);
    al_hex_encode(key, d, KVM_CACHE_KEY_LEN / 2, false);
}

struct cache__entry {
    char *line;
};

static int cache__cmp(const void *a, const void *b)
{
    return strcmp(((const struct cache__entry *)a)->line, ((const struct cache__entry *)b)->line);
}

struct cache__walk {
    struct cache__entry *v;
    size_t n, cap;
    int err;
};

/* Collects one line per entry under dirfd (relative path, type, mode, owner, size, mtime,
 * link target), without following symlinks. */
static void cache__walk_dir(struct cache__walk *w, int dirfd, const char *rel, int depth)
{
    if (depth > 64) {
        w->err = -ELOOP;
        return;
    }
    DIR *d = fdopendir(dirfd);
    if (!d) {
        w->err = -errno;
        close(dirfd);
        return;
    }
    struct dirent *e;
    while (!w->err && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            w->err = -errno;
            break;
        }
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", rel, e->d_name) >= sizeof path) {
            w->err = -ENAMETOOLONG;
            break;
        }
        char target[PATH_MAX] = "";
        if (S_ISLNK(st.st_mode)) {
            ssize_t n = readlinkat(dirfd, e->d_name, target, sizeof target - 1);
            target[n > 0 ? n : 0] = '\0';
        }
        char line[3 * PATH_MAX];
        snprintf(line, sizeof line, "%s\t%o\t%u:%u\t%lld\t%lld.%09ld\t%s", path, st.st_mode,
                 st.st_uid, st.st_gid, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                 st.st_mtim.tv_nsec, target);
        if (w->n == w->cap) {
            size_t cap = w->cap ? w->cap * 2 : 1024;
            struct cache__entry *nv = realloc(w->v, cap * sizeof *nv);
            if (!nv) {
                w->err = -ENOMEM;
                break;
            }
            w->v = nv;
            w->cap = cap;
        }
        if (!(w->v[w->n].line = strdup(line))) {
            w->err = -ENOMEM;
            break;
        }
        w->n++;
        if (S_ISDIR(st.st_mode)) {
            int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                w->err = -errno;
                break;
            }
            cache__walk_dir(w, sub, path, depth + 1);
        }
    }
    closedir(d);
}

/* Hashes a directory tree's metadata (names, modes, owners, sizes, times, link targets). */
static int cache__hash_tree(crypto_generichash_state *h, const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct cache__walk w = {0};
    cache__walk_dir(&w, fd, "", 0);
    if (!w.err) {
        qsort(w.v, w.n, sizeof *w.v, cache__cmp);
        for (size_t i = 0; i < w.n; i++)
            cache__update_str(h, w.v[i].line);
    }
    for (size_t i = 0; i < w.n; i++)
        free(w.v[i].line);
    free(w.v);
    return w.err;
}

static int cache__image_key(const struct kvm_image_req *r, char key[KVM_CACHE_KEY_LEN + 1],
                            struct al_error *err)
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    cache__update_str(&h, KVM_CACHE_FORMAT " image");
    char real[PATH_MAX];
    if (!realpath(r->template_dir, real))
        return al_error_set(err, -errno, "template %s: %s", r->template_dir, strerror(errno));
    cache__update_str(&h, real);
    const json_t *b = json_object_get(r->template_json, "build");
    const char *bh = b ? json_string_value(json_object_get(b, "hash")) : NULL;
    int rc;
    if (bh && *bh) {
        /* deploy/templates/build: the hash covers the recipe; the directory is immutable. */
        cache__update_str(&h, "build-hash");
        cache__update_str(&h, bh);
    } else {
        char rootfs[PATH_MAX + 16];
        snprintf(rootfs, sizeof rootfs, "%s/rootfs", real);
        if ((rc = cache__hash_tree(&h, rootfs)) < 0)
            return al_error_set(err, rc, "cannot read template %s: %s", rootfs, strerror(-rc));
    }
    if ((rc = cache__hash_tree(&h, r->agent_dir)) < 0)
        return al_error_set(err, rc, "cannot read the agent directory %s: %s", r->agent_dir,
                            strerror(-rc));
    char id[PATH_MAX + 128];
    const char *files[] = {r->init_bin, r->mkrootfs};
    for (size_t i = 0; i < AL_ARRAY_SIZE(files); i++) {
        if ((rc = kvm_cache_file_id(files[i], id, sizeof id)) < 0)
            return al_error_set(err, rc, "%s: %s", files[i], strerror(-rc));
        cache__update_str(&h, id);
    }
    char slack[32];
    snprintf(slack, sizeof slack, "%llu", (unsigned long long)r->slack_mib);
    cache__update_str(&h, slack);
    cache__final_key(&h, key);
    return 0;
}

/* ---- locks and temporary entries --------------------------------------------------------- */

static int cache__lock(const char *kind_dir, const char *key, struct al_error *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s.lock", kind_dir, key);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", p, strerror(errno));
    while (flock(fd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return al_error_set(err, -e, "cannot lock %s: %s", p, strerror(e));
        }
    }
    return fd;
}

/* Removes .tmp-<key>-* entries (their builder died: we hold the key's lock). */
static void cache__drop_tmp(const char *kind_dir, const char *key)
{
    DIR *d = opendir(kind_dir);
    if (!d)
        return;
    char pre[64];
    snprintf(pre, sizeof pre, ".tmp-%s-", key);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, pre, strlen(pre)) == 0) {
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", kind_dir, e->d_name);
            al_info("kvm cache: removing %s (left by a builder that died)", p);
            kvm_cache_rmtree(p);
        }
    }
    closedir(d);
}

static bool cache__exists_dir(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cache__mkdirs(const char *cache, const char *kind, char *out, size_t outlen,
                         struct al_error *err)
{
    if ((size_t)snprintf(out, outlen, "%s/%s", cache, kind) >= outlen)
        return al_error_set(err, -ENAMETOOLONG, "cache path too long");
    int rc = al_mkdir_p(out, 0700);
    if (rc < 0)
        return al_error_set(err, rc, "cannot create %s: %s", out, strerror(-rc));
    return 0;
}

static void cache__write_info(const char *dir, json_t *info)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/info.json", dir);
    char *s = json_dumps(info, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(info);
    if (s) {
        al_write_file_atomic(p, s, strlen(s), 0644, NULL);
        free(s);
    }
}

/* ---- images ------------------------------------------------------------------------------ */

int kvm_cache_image(const char *cache, const struct kvm_image_req *r, char *out, size_t outlen,
                    char key[KVM_CACHE_KEY_LEN + 1], struct al_error *err)
{
    int rc = cache__image_key(r, key, err);
    if (rc < 0)
        return rc;
    char kd[PATH_MAX];
    if ((rc = cache__mkdirs(cache, "images", kd, sizeof kd, err)) < 0)
        return rc;
    char final[PATH_MAX];
    snprintf(final, sizeof final, "%s/%s", kd, key);
    if ((size_t)snprintf(out, outlen, "%s/rootfs.img", final) >= outlen)
        return al_error_set(err, -ENAMETOOLONG, "cache path too long");
    if (cache__exists_dir(final))
        return 0;
    al_autoclose int lock = cache__lock(kd, key, err);
    if (lock < 0)
        return lock;
    if (cache__exists_dir(final))
        return 0; /* another process built it while we waited */
    cache__drop_tmp(kd, key);
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%d", kd, key, (int)getpid());
    if (mkdir(tmp, 0700) < 0)
        return al_error_set(err, -errno, "cannot create %s: %s", tmp, strerror(errno));
    char img[PATH_MAX + 16], rootfs[PATH_MAX + 16], slack[32];
    snprintf(img, sizeof img, "%s/rootfs.img", tmp);
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", r->template_dir);
    snprintf(slack, sizeof slack, "%llu", (unsigned long long)r->slack_mib);
    char *argv[] = {(char *)r->mkrootfs,
                    "--rootfs",
                    rootfs,
                    "--agent-dir",
                    (char *)r->agent_dir,
                    "--init",
                    (char *)r->init_bin,
                    "--out",
                    img,
                    "--slack",
                    slack,
                    NULL};
    uint64_t t0 = al_now_ns();
    al_info("kvm cache: building the root image of template %s (key %s)", r->template_dir, key);
    rc = r->run(r->ctx, argv, err);
    if (rc == 0 && chmod(img, 0644) < 0)
        rc = al_error_set(err, -errno, "chmod %s: %s", img, strerror(errno));
    if (rc == 0) {
        json_t *info =
            json_pack("{s:s,s:s,s:s,s:I,s:f}", "format", KVM_CACHE_FORMAT, "template",
                      r->template_dir, "agent_dir", r->agent_dir, "slack_mib",
                      (json_int_t)r->slack_mib, "build_s", (double)(al_now_ns() - t0) / 1e9);
        cache__write_info(tmp, info);
        if (rename(tmp, final) < 0)
            rc = al_error_set(err, -errno, "cannot move %s into place: %s", tmp, strerror(errno));
    }
    if (rc < 0) {
        kvm_cache_rmtree(tmp);
        return al_error_prefix(err, "building the root image of %s", r->template_dir);
    }
    al_info("kvm cache: root image %s built in %.1f s", out, (double)(al_now_ns() - t0) / 1e9);
    return 0;
}

/* ---- template snapshots ------------------------------------------------------------------- */

static int cache__snap_key(const struct kvm_snap_req *r, char key[KVM_CACHE_KEY_LEN + 1],
                           struct al_error *err)
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    cache__update_str(&h, KVM_CACHE_FORMAT " snapshot");
    cache__update_str(&h, r->image_key);
    char id[PATH_MAX + 128];
    const char *files[] = {r->kernel, r->vmm};
    for (size_t i = 0; i < AL_ARRAY_SIZE(files); i++) {
        int rc = kvm_cache_file_id(files[i], id, sizeof id);
        if (rc < 0)
            return al_error_set(err, rc, "%s: %s", files[i], strerror(-rc));
        cache__update_str(&h, id);
    }
    cache__update_str(&h, r->cmdline);
    char n[64];
    snprintf(n, sizeof n, "%llu/%u", (unsigned long long)r->mem_bytes, r->vcpus);
    cache__update_str(&h, n);
    cache__final_key(&h, key);
    return 0;
}

int kvm_cache_snapshot(const char *cache, const struct kvm_snap_req *r, char *out, size_t outlen,
                       bool *built, struct al_error *err)
{
    *built = false;
    char key[KVM_CACHE_KEY_LEN + 1];
    int rc = cache__snap_key(r, key, err);
    if (rc < 0)
        return rc;
    char kd[PATH_MAX];
    if ((rc = cache__mkdirs(cache, "snapshots", kd, sizeof kd, err)) < 0)
        return rc;
    if ((size_t)snprintf(out, outlen, "%s/%s", kd, key) >= outlen)
        return al_error_set(err, -ENAMETOOLONG, "cache path too long");
    if (cache__exists_dir(out))
        return 0;
    al_autoclose int lock = cache__lock(kd, key, err);
    if (lock < 0)
        return lock;
    if (cache__exists_dir(out))
        return 0;
    cache__drop_tmp(kd, key);
    uint64_t t0 = al_now_ns();
    al_info("kvm cache: making the template snapshot %s (%llu MiB, %u vCPU)", key,
            (unsigned long long)(r->mem_bytes >> 20), r->vcpus);
    struct kvm_snap_made made = {0};
    rc = r->make(r->ctx, &made, err);
    if (rc < 0)
        return al_error_prefix(err, "making the template snapshot");
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%d", kd, key, (int)getpid());
    if ((rc = kvm_cache_take_dir(made.parent, made.name, made.owner, tmp, err)) < 0)
        return rc;
    json_t *info = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:i,s:f}", "format", KVM_CACHE_FORMAT,
                             "image", r->image, "image_key", r->image_key, "kernel", r->kernel,
                             "cmdline", r->cmdline, "memory_bytes", (json_int_t)r->mem_bytes,
                             "vcpus", (int)r->vcpus, "make_s", (double)(al_now_ns() - t0) / 1e9);
    cache__write_info(tmp, info);
    if (rename(tmp, out) < 0) {
        rc = al_error_set(err, -errno, "cannot move %s into place: %s", tmp, strerror(errno));
        kvm_cache_rmtree(tmp);
        return rc;
    }
    *built = true;
    al_info("kvm cache: template snapshot %s made in %.2f s", out,
            (double)(al_now_ns() - t0) / 1e9);
    return 0;
}

/* ---- taking what a VMM wrote -------------------------------------------------------------- */

static bool cache__snap_name(const char *n)
{
    return strcmp(n, "vm.state") == 0 || strcmp(n, "memory") == 0 || strcmp(n, "disk.overlay") == 0;
}

int kvm_cache_take_dir(const char *parent, const char *name, uid_t owner, const char *dest,
                       struct al_error *err)
{
    al_autoclose int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", parent, strerror(errno));
    al_autoclose int sfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (sfd < 0 || fstat(sfd, &st) < 0)
        return al_error_set(err, -errno, "cannot open the snapshot %s/%s: %s", parent, name,
                            strerror(errno));
    if (st.st_uid != owner)
        return al_error_set(err, -EPERM, "%s/%s is owned by uid %u, not the VMM's %u", parent, name,
                            (unsigned)st.st_uid, (unsigned)owner);
    if (mkdir(dest, 0700) < 0)
        return al_error_set(err, -errno, "cannot create %s: %s", dest, strerror(errno));
    al_autoclose int dfd = open(dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", dest, strerror(errno));
    int dup = fcntl(sfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
    if (!d) {
        if (dup >= 0)
            close(dup);
        kvm_cache_rmtree(dest);
        return al_error_set(err, -errno, "cannot list %s/%s", parent, name);
    }
    int rc = 0;
    bool have_state = false;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (!cache__snap_name(e->d_name)) {
            rc =
                al_error_set(err, -EINVAL, "unexpected entry \"%.64s\" in the snapshot", e->d_name);
            break;
        }
        /* Move the name first (out of the VMM's reach), then check what it is. */
        bool copied = false;
        if (renameat(sfd, e->d_name, dfd, e->d_name) < 0) {
            if (errno != EXDEV) {
                rc = al_error_set(err, -errno, "cannot move %s: %s", e->d_name, strerror(errno));
                break;
            }
            copied = true;
        }
        int src = copied ? openat(sfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
                         : openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat fs;
        if (src < 0 || fstat(src, &fs) < 0 || !S_ISREG(fs.st_mode) || fs.st_nlink != 1) {
            rc = al_error_set(err, -EINVAL, "snapshot entry %s is not a plain regular file",
                              e->d_name);
            if (src >= 0)
                close(src);
            break;
        }
        int fd = src;
        if (copied) {
            fd = openat(dfd, e->d_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            int r = fd < 0 ? -errno : kvm_disk_copy_sparse(src, fd, (uint64_t)fs.st_size);
            close(src);
            if (r < 0) {
                rc = al_error_set(err, r, "cannot copy %s: %s", e->d_name, strerror(-r));
                if (fd >= 0)
                    close(fd);
                break;
            }
        }
        if (fchown(fd, 0, 0) < 0 || fchmod(fd, 0600) < 0)
            rc = al_error_set(err, -errno, "cannot take %s: %s", e->d_name, strerror(errno));
        close(fd);
        have_state |= strcmp(e->d_name, "vm.state") == 0;
    }
    closedir(d);
    if (rc == 0 && !have_state)
        rc = al_error_set(err, -ENOENT, "the snapshot has no vm.state (incomplete)");
    if (rc < 0) {
        kvm_cache_rmtree(dest);
        return rc;
    }
    unlinkat(pfd, name, AT_REMOVEDIR); /* empty now (or not, when copied: rmtree) */
    if (faccessat(pfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", parent, name);
        kvm_cache_rmtree(p);
    }
    return 0;
}

/* ---- removal ------------------------------------------------------------------------------ */

int kvm_cache_rmtree(const char *path)
{
    return al_rmtree(path);
}

int kvm_cache_sweep(const char *cache)
{
    int n = 0;
    static const char *const kinds[] = {"images", "snapshots"};
    for (size_t k = 0; k < AL_ARRAY_SIZE(kinds); k++) {
        char kd[PATH_MAX];
        snprintf(kd, sizeof kd, "%s/%s", cache, kinds[k]);
        DIR *d = opendir(kd);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, ".tmp-", 5) != 0 || strlen(e->d_name) < 5 + KVM_CACHE_KEY_LEN)
                continue;
            char key[KVM_CACHE_KEY_LEN + 1];
            memcpy(key, e->d_name + 5, KVM_CACHE_KEY_LEN);
            key[KVM_CACHE_KEY_LEN] = '\0';
            char lp[PATH_MAX];
            snprintf(lp, sizeof lp, "%s/%s.lock", kd, key);
            int fd = open(lp, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
            if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
                if (fd >= 0)
                    close(fd); /* a builder is at work */
                continue;
            }
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", kd, e->d_name);
            if (kvm_cache_rmtree(p) == 0) {
                al_info("sweep: removed %s (left by a builder that died)", p);
                n++;
            }
            close(fd);
        }
        closedir(d);
    }
    return n;
}
