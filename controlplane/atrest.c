/* controlplane/atrest: state directories encrypted by their file system (see atrest.h). */
#include "atrest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fscrypt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "config.h"
#include "cp.h"

#define ATREST_HOWTO                                                                         \
    "ext4 needs its encrypt feature: `tune2fs -O encrypt DEVICE` while it is unmounted, or " \
    "`mkfs.ext4 -O encrypt`; f2fs and UBIFS can too; tmpfs, XFS and overlayfs cannot"

/* The file system cannot encrypt (no fscrypt in it, or ext4 without its feature). */
static bool atrest__unsupported(int e)
{
    return e == EOPNOTSUPP || e == ENOTTY;
}

/* Whether dir has no entry ("." and ".." aside): 1, 0, or -errno. */
static int atrest__empty(int fd)
{
    int d = dup(fd);
    DIR *dh = d >= 0 ? fdopendir(d) : NULL;
    if (!dh) {
        int e = errno;
        if (d >= 0)
            close(d);
        return -e;
    }
    int empty = 1;
    struct dirent *de;
    while ((de = readdir(dh)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            empty = 0;
            break;
        }
    closedir(dh);
    return empty;
}

/* Adds key to the file system of fd: its identifier into id. -errno. */
static int atrest__add_key(int fd, const unsigned char key[CP_ATREST_KEY_LEN],
                           unsigned char id[FSCRYPT_KEY_IDENTIFIER_SIZE])
{
    struct fscrypt_add_key_arg *a = calloc(1, sizeof *a + CP_ATREST_KEY_LEN);
    if (!a)
        return -ENOMEM;
    a->key_spec.type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER;
    a->raw_size = CP_ATREST_KEY_LEN;
    memcpy(a->raw, key, CP_ATREST_KEY_LEN);
    int rc = ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, a) < 0 ? -errno : 0;
    if (!rc)
        memcpy(id, a->key_spec.u.identifier, FSCRYPT_KEY_IDENTIFIER_SIZE);
    sodium_memzero(a, sizeof *a + CP_ATREST_KEY_LEN);
    free(a);
    return rc;
}

static void atrest__remove_key(int fd, const unsigned char id[FSCRYPT_KEY_IDENTIFIER_SIZE])
{
    struct fscrypt_remove_key_arg r = {.key_spec.type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER};
    memcpy(r.key_spec.u.identifier, id, FSCRYPT_KEY_IDENTIFIER_SIZE);
    (void)ioctl(fd, FS_IOC_REMOVE_ENCRYPTION_KEY, &r);
}

/* An encrypted directory: unlocked with the key of key_path if it is its key. */
static int atrest__unlock(int fd, const char *dir, const char *key_path,
                          const struct fscrypt_get_policy_ex_arg *pol, struct al_error *err)
{
    if (pol->policy.version != FSCRYPT_POLICY_V2)
        return al_error_set(err, -EPROTO,
                            "%s is encrypted with a version %u fscrypt policy airlockd did not "
                            "make: move it away to start with an empty one",
                            dir, pol->policy.version);
    unsigned char key[CP_ATREST_KEY_LEN], id[FSCRYPT_KEY_IDENTIFIER_SIZE];
    struct al_error kerr = {0};
    int rc = al_key_file(key_path, key, sizeof key, false, &kerr);
    if (rc == -ENOENT)
        return al_error_set(err, rc,
                            "%s is encrypted and its key file %s is missing: restore the key "
                            "file (without it nothing in %s can be read), or move %s away to "
                            "start with an empty one",
                            dir, key_path, dir, dir);
    if (rc < 0)
        return al_error_set(err, rc, "the key of %s: %s", dir, al_error_str(&kerr));
    rc = atrest__add_key(fd, key, id);
    sodium_memzero(key, sizeof key);
    if (rc)
        return al_error_set(err, rc, "unlocking %s with %s: %s", dir, key_path, strerror(-rc));
    if (memcmp(id, pol->policy.v2.master_key_identifier, sizeof id) != 0) {
        atrest__remove_key(fd, id);
        return al_error_set(err, -EKEYREJECTED,
                            "%s is not the key %s is encrypted with: restore its own key file, "
                            "or move %s away to start with an empty one",
                            key_path, dir, dir);
    }
    return 1;
}

/* A new (empty) directory: a key (made if the file is missing) and the policy set. */
static int atrest__encrypt(int fd, const char *dir, const char *key_path, struct al_error *err)
{
    unsigned char key[CP_ATREST_KEY_LEN], id[FSCRYPT_KEY_IDENTIFIER_SIZE];
    int made = al_key_file(key_path, key, sizeof key, true, err);
    if (made < 0)
        return made;
    int rc = atrest__add_key(fd, key, id);
    sodium_memzero(key, sizeof key);
    if (!rc) {
        struct fscrypt_policy_v2 p = {
            .version = FSCRYPT_POLICY_V2,
            .contents_encryption_mode = FSCRYPT_MODE_AES_256_XTS,
            .filenames_encryption_mode = FSCRYPT_MODE_AES_256_CTS,
            .flags = FSCRYPT_POLICY_FLAGS_PAD_32,
        };
        memcpy(p.master_key_identifier, id, sizeof id);
        if (ioctl(fd, FS_IOC_SET_ENCRYPTION_POLICY, &p) < 0) {
            rc = -errno;
            atrest__remove_key(fd, id);
        }
    }
    if (rc && made == 1)
        unlink(key_path); /* nothing was encrypted with it */
    if (rc)
        return al_error_set(err, rc, "encrypting %s: %s", dir, strerror(-rc));
    return 1;
}

int cp_atrest_open(const struct cp_atrest_opts *o, char *why, size_t why_len, struct al_error *err)
{
    const char *dir = o->dir, *key_path = o->key_path;
    int mode = o->mode;
    why[0] = '\0';
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return al_error_set(err, -errno, "cannot create %s: %s", dir, strerror(errno));
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", dir, strerror(errno));
    struct fscrypt_get_policy_ex_arg pol = {.policy_size = sizeof pol.policy};
    int rc = ioctl(fd, FS_IOC_GET_ENCRYPTION_POLICY_EX, &pol) < 0 ? -errno : 0;
    if (rc == 0) {
        rc = atrest__unlock(fd, dir, key_path, &pol, err);
        goto out;
    }
    if (rc != -ENODATA && !atrest__unsupported(-rc)) {
        rc = al_error_set(err, rc, "reading the encryption policy of %s: %s", dir, strerror(-rc));
        goto out;
    }
    if (mode == CP_TRI_OFF) {
        snprintf(why, why_len, "encryption is off");
        rc = 0;
        goto out;
    }
    if (rc == -ENODATA) {
        int empty = atrest__empty(fd);
        if (empty < 0) {
            rc = al_error_set(err, empty, "cannot read %s: %s", dir, strerror(-empty));
            goto out;
        }
        if (!empty) {
            snprintf(why, why_len,
                     "%s holds files made while it was not encrypted (a directory is "
                     "encrypted only while it is empty)",
                     dir);
            rc = mode == CP_TRI_ON ? al_error_set(err, -EEXIST,
                                                  "%s: move them out (or delete them) to have "
                                                  "it encrypted, or set %s to auto or off",
                                                  why, o->setting)
                                   : 0;
            goto out;
        }
        struct al_error eerr = {0};
        rc = atrest__encrypt(fd, dir, key_path, &eerr);
        if (rc >= 0 || !atrest__unsupported(-rc)) {
            if (rc < 0)
                al_error_set(err, rc, "%s", al_error_str(&eerr));
            goto out;
        }
    }
    /* The file system cannot. */
    snprintf(why, why_len, "the file system of %s cannot encrypt (" ATREST_HOWTO ")", dir);
    rc = mode == CP_TRI_ON ? al_error_set(err, -EOPNOTSUPP,
                                          "%s; or set %s to auto or off to run "
                                          "without",
                                          why, o->setting)
                           : 0;
out:
    close(fd);
    return rc;
}

/* Whether path is dir or inside it (by name: both as configured, absolute). */
static bool atrest__inside(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || !path[n]);
}

int cp_atrest_open_all(struct cp_atrest_dir *dirs, size_t n, const char *key_path, int mode,
                       const char *setting, struct al_error *err)
{
    if (key_path[0] != '/')
        return al_error_set(err, -EINVAL, "the key file %s: give an absolute path", key_path);
    for (size_t i = 0; i < n; i++)
        if (atrest__inside(key_path, dirs[i].dir))
            return al_error_set(err, -EINVAL,
                                "the key file %s is inside %s, which it encrypts: put it "
                                "outside (default: beside it)",
                                key_path, dirs[i].dir);
    for (size_t i = 0; i < n; i++) {
        struct cp_atrest_opts o = {
            .dir = dirs[i].dir, .key_path = key_path, .mode = mode, .setting = setting};
        int rc = cp_atrest_open(&o, dirs[i].why, sizeof dirs[i].why, err);
        if (rc < 0)
            return rc;
        dirs[i].encrypted = rc;
    }
    return 0;
}

int cp_atrest_open_state(struct cp *cp, struct al_error *err)
{
    /* The directory's name under <state> (its banner line's label) and what it holds. */
    static const struct {
        const char *name, *what;
    } stores[] = {
        {"snapshots", "snapshots"},
        {"paused", "the files of sandboxes paused without memory"},
        {"volumes", "volumes"},
    };
    enum { N = sizeof stores / sizeof stores[0] };
    struct cp_atrest_dir dirs[N];
    char paths[N][4200], key[4200];
    for (size_t i = 0; i < N; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/%s", cp->cfg.state_dir, stores[i].name);
        dirs[i] = (struct cp_atrest_dir){.dir = paths[i]};
    }
    if (cp->cfg.at_rest_key_file && *cp->cfg.at_rest_key_file)
        snprintf(key, sizeof key, "%s", cp->cfg.at_rest_key_file);
    else
        snprintf(key, sizeof key, "%s/at_rest.key", cp->cfg.state_dir);
    int rc = cp_atrest_open_all(dirs, N, key, cp->cfg.at_rest_encrypt, "at_rest.encrypt", err);
    if (rc < 0) {
        al_error_prefix(err, "encryption at rest (at_rest.encrypt, at_rest.key_file): ");
        return rc;
    }
    for (size_t i = 0; i < N; i++) {
        if (dirs[i].encrypted) {
            fprintf(stderr, "  %-11s %s (encrypted at rest, key %s)\n", stores[i].name, paths[i],
                    key);
            continue;
        }
        fprintf(stderr, "  %-11s %s (NOT encrypted at rest: %s)\n", stores[i].name, paths[i],
                dirs[i].why);
        if (cp->cfg.at_rest_encrypt != CP_TRI_OFF)
            al_warn("%s are not encrypted at rest: %s", stores[i].what, dirs[i].why);
    }
    return 0;
}
