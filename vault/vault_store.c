/* vault/vault_store: an open vault directory. Owns unlocking (key file or passphrase), the
 * in-memory catalog, reloading when another process changed the file, and every change:
 * under an exclusive lock, re-read and verify, apply, write a new file (write, fsync, rename,
 * fsync dir), so that a crash at any point leaves the old or the new vault, never a torn one,
 * and concurrent writers never lose each other's updates. */
#include "vault/vault.h"
#include "vault/vault_file.h"

#include "common/log.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

void (*vault_store_test_hook)(const char *stage);

struct vault_store {
    char dir[PATH_MAX];
    char file[PATH_MAX + 32];
    char lock[PATH_MAX + 32];
    char master[PATH_MAX + 32];
    char sidkey[PATH_MAX + 32];
    struct vault_header hdr;
    struct vault_keys *keys;
    unsigned char *sid_key; /* 32 bytes, sodium_malloc */
    struct vault_catalog cat;
    struct stat st;
    bool loaded;
};

static void store__paths(struct vault_store *s, const char *dir)
{
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->file, sizeof s->file, "%s/" VAULT_FILE, dir);
    snprintf(s->lock, sizeof s->lock, "%s/" VAULT_LOCK, dir);
    snprintf(s->master, sizeof s->master, "%s/" VAULT_MASTER_KEY, dir);
    snprintf(s->sidkey, sizeof s->sidkey, "%s/" VAULT_SECRET_ID_KEY, dir);
}

static void store__hook(const char *stage)
{
    if (vault_store_test_hook)
        vault_store_test_hook(stage);
}

/* Writes data as path atomically, with test hooks between the steps. */
static int store__write_atomic(const char *path, const char *dir, const char *data, size_t len,
                               struct al_error *err)
{
    char tmp[PATH_MAX + 64], rnd[17];
    al_random_hex(rnd, 8);
    snprintf(tmp, sizeof tmp, "%s.tmp-%s", path, rnd);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot create %s: %s (nothing was changed)", tmp,
                            strerror(errno));
    int rc = al_write_all(fd, data, len);
    if (rc == 0)
        store__hook("tmp_written");
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0)
        store__hook("tmp_synced");
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return al_error_set(err, rc, "cannot write %s: %s (nothing was changed)", path,
                            strerror(-rc));
    }
    store__hook("renamed");
    rc = al_fsync_dir(dir);
    if (rc)
        return al_error_set(err, rc,
                            "wrote %s but cannot sync its directory: %s (the change may not "
                            "survive a power loss)",
                            path, strerror(-rc));
    return 0;
}

/* Removes temporary files of writers that died mid-way (under the lock). */
static void store__clean_tmp(struct vault_store *s)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, VAULT_FILE ".tmp-", strlen(VAULT_FILE ".tmp-")) == 0) {
            char p[PATH_MAX + 300];
            snprintf(p, sizeof p, "%s/%s", s->dir, e->d_name);
            if (unlink(p) == 0)
                al_info("vault: removed %s, left by a writer that was interrupted", p);
        }
    }
    closedir(d);
}

static int store__read(struct vault_store *s, char **data, size_t *len, struct stat *st,
                       struct al_error *err)
{
    int fd = open(s->file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return al_error_set(err, -ENOENT,
                                "no vault in %s: run `airlock vault init` first (or pass the "
                                "right --state-dir)",
                                s->dir);
        if (e == EACCES)
            return al_error_set(err, -EACCES,
                                "cannot read %s: permission denied (run as root, or through "
                                "the airlock-vault daemon)",
                                s->file);
        return al_error_set(err, -e, "cannot open %s: %s", s->file, strerror(e));
    }
    if (fstat(fd, st) < 0) {
        int e = errno;
        close(fd);
        return al_error_set(err, -e, "cannot stat %s: %s", s->file, strerror(e));
    }
    close(fd);
    /* read by path again: al_read_file bounds the size */
    return al_read_file(s->file, VAULT_FILE_MAX, data, len, err);
}

static int store__corrupted(struct vault_store *s, struct al_error *err)
{
    return al_error_prefix(err,
                           "vault file %s is corrupted (nothing was changed; restore it from a "
                           "backup)",
                           s->file);
}

/* Reads and verifies the file with our keys into cat. Same vault (file_id and wrapped key)
 * required when keys are already loaded. */
static int store__load(struct vault_store *s, struct vault_catalog *cat, struct stat *st,
                       struct al_error *err)
{
    char *data = NULL;
    size_t len = 0;
    int rc = store__read(s, &data, &len, st, err);
    if (rc)
        return rc;
    struct vault_header h;
    size_t off = 0;
    rc = vault_file_header(data, len, &h, &off, err);
    if (rc) {
        if (rc != -EPROTONOSUPPORT)
            store__corrupted(s, err);
    } else if (s->loaded && (strcmp(h.file_id, s->hdr.file_id) != 0 ||
                             sodium_memcmp(h.wrapped, s->hdr.wrapped, sizeof h.wrapped) != 0)) {
        rc = al_error_set(err, -ESTALE,
                          "%s was replaced by a different vault while it was open: restart "
                          "airlock-vault (nothing was changed)",
                          s->file);
    } else {
        rc = vault_file_body(data, len, off, s->keys, cat, err);
        if (rc && rc != -ENOMEM)
            store__corrupted(s, err);
    }
    free(data);
    return rc;
}

/* ---- init ------------------------------------------------------------------------------------ */

static int store__write_key(const char *path, const unsigned char *key, const char *what,
                            struct al_error *err)
{
    char *buf = sodium_malloc(256);
    if (!buf)
        return al_error_set(err, -ENOMEM, "out of memory");
    int n = snprintf(buf, 256, "# airlock vault %s: keep it secret, back it up\n", what);
    sodium_bin2hex(buf + n, 65, key, 32);
    n += 64;
    buf[n++] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    int rc = 0;
    if (fd < 0) {
        rc = al_error_set(err, -errno, "cannot create %s: %s", path, strerror(errno));
    } else {
        rc = al_write_all(fd, buf, (size_t)n);
        if (rc == 0 && fsync(fd) < 0)
            rc = -errno;
        close(fd);
        if (rc) {
            unlink(path);
            al_error_set(err, rc, "cannot write %s: %s", path, strerror(-rc));
        }
    }
    sodium_free(buf);
    return rc;
}

int vault_store_init(const char *dir, const struct vault_init_opts *o, struct al_error *err)
{
    if (sodium_init() < 0)
        return al_error_set(err, -EIO, "libsodium failed to initialise");
    struct vault_init_opts def = {0};
    if (!o)
        o = &def;
    struct vault_store s0;
    struct vault_store *s = &s0;
    memset(s, 0, sizeof *s);
    store__paths(s, dir);
    struct stat st;
    if (stat(s->file, &st) == 0)
        return al_error_set(err, -EEXIST,
                            "a vault already exists in %s; refusing to overwrite it (remove "
                            "the directory yourself if you really mean to destroy it)",
                            dir);
    int rc = al_mkdir_p(dir, 0700);
    if (rc)
        return al_error_set(err, rc, "cannot create %s: %s", dir, strerror(-rc));
    if (chmod(dir, 0700) < 0)
        return al_error_set(err, -errno, "cannot chmod %s: %s", dir, strerror(errno));

    struct vault_header h;
    memset(&h, 0, sizeof h);
    al_random_hex(h.file_id, 16);
    al_time_rfc3339(h.created, sizeof h.created, al_wall_ns());
    unsigned char *mk = sodium_malloc(32);
    struct vault_keys *k = NULL;
    if (!mk || vault_keys_alloc(&k)) {
        sodium_free(mk);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    if (o->passphrase) {
        h.kdf = VAULT_KDF_ARGON2ID;
        h.opslimit = o->kdf_opslimit ? o->kdf_opslimit : 3;
        h.memlimit = o->kdf_memlimit ? o->kdf_memlimit : 256ull << 20;
        if (h.opslimit > VAULT_KDF_OPS_MAX || h.memlimit < VAULT_KDF_MEM_MIN ||
            h.memlimit > VAULT_KDF_MEM_MAX) {
            rc = al_error_set(err, -EINVAL,
                              "Argon2id parameters out of range: operations 1..%d, memory "
                              "8 MiB..1 GiB",
                              VAULT_KDF_OPS_MAX);
            goto out;
        }
        if (o->passphrase_len < 8) {
            rc = al_error_set(err, -EINVAL, "the passphrase is too short (at least 8 bytes)");
            goto out;
        }
        randombytes_buf(h.salt, sizeof h.salt);
        if ((rc = vault_master_from_passphrase(o->passphrase, o->passphrase_len, &h, mk, err)))
            goto out;
    } else {
        h.kdf = VAULT_KDF_KEYFILE;
        randombytes_buf(mk, 32);
        if (stat(s->master, &st) == 0) {
            rc = al_error_set(err, -EEXIST,
                              "%s exists without a vault file: move it away first (it may be "
                              "the only key to a vault file you are about to restore)",
                              s->master);
            goto out;
        }
        if ((rc = store__write_key(s->master, mk, "master key", err)))
            goto out;
    }
    randombytes_buf(k->dk, sizeof k->dk);
    vault_keys_derive(k);
    vault_dk_wrap(mk, &h, k);

    /* The secret-id key survives re-initialisation, so ids stay comparable. */
    if (stat(s->sidkey, &st) < 0) {
        unsigned char *sk = sodium_malloc(32);
        if (!sk) {
            rc = al_error_set(err, -ENOMEM, "out of memory");
            goto out;
        }
        randombytes_buf(sk, 32);
        rc = store__write_key(s->sidkey, sk, "secret-id key (for audit ids)", err);
        sodium_free(sk);
        if (rc)
            goto out;
    }

    struct vault_catalog empty = {0};
    char *data = NULL;
    size_t len = 0;
    char ts[40];
    al_time_rfc3339(ts, sizeof ts, al_wall_ns());
    if ((rc = vault_file_write(&h, k, &empty, ts, &data, &len))) {
        al_error_set(err, rc, "cannot build the vault file");
        goto out;
    }
    rc = store__write_atomic(s->file, s->dir, data, len, err);
    free(data);
out:
    if (rc && h.kdf == VAULT_KDF_KEYFILE && stat(s->file, &st) < 0)
        unlink(s->master);
    sodium_free(mk);
    vault_keys_free(k);
    return rc;
}

/* ---- open ------------------------------------------------------------------------------------ */

int vault_store_open(const char *dir, const struct vault_unlock *u, struct vault_store **out,
                     struct al_error *err)
{
    *out = NULL;
    if (sodium_init() < 0)
        return al_error_set(err, -EIO, "libsodium failed to initialise");
    struct vault_store *s = calloc(1, sizeof *s);
    if (!s)
        return al_error_set(err, -ENOMEM, "out of memory");
    store__paths(s, dir);
    unsigned char *mk = sodium_malloc(32);
    s->sid_key = sodium_malloc(32);
    int rc = 0;
    char *data = NULL;
    size_t len = 0, off = 0;
    if (!mk || !s->sid_key || vault_keys_alloc(&s->keys)) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = store__read(s, &data, &len, &s->st, err)))
        goto fail;
    if ((rc = vault_file_header(data, len, &s->hdr, &off, err))) {
        if (rc != -EPROTONOSUPPORT)
            store__corrupted(s, err);
        goto fail;
    }
    if (s->hdr.kdf == VAULT_KDF_ARGON2ID) {
        if (!u || !u->passphrase) {
            rc = al_error_set(err, -ENOKEY,
                              "the vault in %s is protected by a passphrase: give it with "
                              "--passphrase-file FILE (or type it on a terminal)",
                              dir);
            goto fail;
        }
        if ((rc = vault_master_from_passphrase(u->passphrase, u->passphrase_len, &s->hdr, mk, err)))
            goto fail;
    } else if ((rc = vault_key_file_load(s->master, mk, err))) {
        if (rc == -ENOENT)
            rc = al_error_set(
                err, -ENOKEY,
                "the master key %s is missing: restore it from your backup (without it "
                "the vault cannot be opened)",
                s->master);
        goto fail;
    }
    if (vault_dk_unwrap(mk, &s->hdr, s->keys) != 0) {
        rc = s->hdr.kdf == VAULT_KDF_ARGON2ID
                 ? al_error_set(err, -EKEYREJECTED,
                                "wrong passphrase: it does not open the vault in %s", dir)
                 : al_error_set(err, -EKEYREJECTED,
                                "wrong master key: %s does not open %s (was the key file "
                                "replaced? restore the one made by `airlock vault init`)",
                                s->master, s->file);
        goto fail;
    }
    if ((rc = vault_file_body(data, len, off, s->keys, &s->cat, err))) {
        if (rc != -ENOMEM)
            store__corrupted(s, err);
        goto fail;
    }
    if ((rc = vault_key_file_load(s->sidkey, s->sid_key, err)))
        goto fail;
    s->loaded = true;
    free(data);
    sodium_free(mk);
    *out = s;
    return 0;
fail:
    free(data);
    if (mk)
        sodium_free(mk);
    vault_store_close(s);
    return rc;
}

int vault_store_probe(const char *dir, bool *passphrase, struct al_error *err)
{
    struct vault_store s0;
    memset(&s0, 0, sizeof s0);
    store__paths(&s0, dir);
    char *data = NULL;
    size_t len = 0, off = 0;
    struct stat st;
    int rc = store__read(&s0, &data, &len, &st, err);
    if (rc)
        return rc;
    struct vault_header h;
    rc = vault_file_header(data, len, &h, &off, err);
    free(data);
    if (rc) {
        if (rc != -EPROTONOSUPPORT)
            store__corrupted(&s0, err);
        return rc;
    }
    *passphrase = h.kdf == VAULT_KDF_ARGON2ID;
    return 0;
}

void vault_store_close(struct vault_store *s)
{
    if (!s)
        return;
    vault_catalog_free(&s->cat);
    vault_keys_free(s->keys);
    if (s->sid_key)
        sodium_free(s->sid_key);
    free(s);
}

static bool store__same(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int vault_store_refresh(struct vault_store *s, bool *changed, struct al_error *err)
{
    if (changed)
        *changed = false;
    struct stat st;
    if (stat(s->file, &st) < 0)
        return al_error_set(err, -errno, "the vault file %s disappeared: %s", s->file,
                            strerror(errno));
    if (store__same(&st, &s->st))
        return 0;
    struct vault_catalog c = {0};
    int rc = store__load(s, &c, &st, err);
    if (rc)
        return rc;
    vault_catalog_free(&s->cat);
    s->cat = c;
    s->st = st;
    if (changed)
        *changed = true;
    return 0;
}

const struct vault_catalog *vault_store_catalog(const struct vault_store *s)
{
    return &s->cat;
}

const unsigned char *vault_store_secret_id_key(const struct vault_store *s)
{
    return s->sid_key;
}

bool vault_store_uses_passphrase(const struct vault_store *s)
{
    return s->hdr.kdf == VAULT_KDF_ARGON2ID;
}

const char *vault_store_dir(const struct vault_store *s)
{
    return s->dir;
}

/* ---- changes ---------------------------------------------------------------------------------- */

typedef int (*store__fn)(struct vault_store *s, struct vault_catalog *c, void *arg,
                         struct al_error *err);

static int store__mutate(struct vault_store *s, store__fn fn, void *arg, struct al_error *err)
{
    int lfd = open(s->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s (nothing was changed)", s->lock,
                            strerror(errno));
    while (flock(lfd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            int e = errno;
            close(lfd);
            return al_error_set(err, -e, "cannot lock %s: %s (nothing was changed)", s->lock,
                                strerror(e));
        }
    }
    store__clean_tmp(s);
    struct vault_catalog c = {0};
    struct stat st;
    int rc = store__load(s, &c, &st, err);
    if (rc == 0)
        rc = fn(s, &c, arg, err);
    char *data = NULL;
    size_t len = 0;
    if (rc == 0) {
        char ts[40];
        al_time_rfc3339(ts, sizeof ts, al_wall_ns());
        rc = vault_file_write(&s->hdr, s->keys, &c, ts, &data, &len);
        if (rc)
            al_error_set(err, rc, "cannot build the vault file (nothing was changed)");
    }
    if (rc == 0)
        rc = store__write_atomic(s->file, s->dir, data, len, err);
    free(data);
    if (rc == 0 && stat(s->file, &st) == 0) {
        vault_catalog_free(&s->cat);
        s->cat = c;
        s->st = st;
    } else {
        vault_catalog_free(&c);
    }
    flock(lfd, LOCK_UN);
    close(lfd);
    return rc;
}

static int store__validate_put(const struct vault_put *p, bool create, char ***hosts_out,
                               struct al_error *err)
{
    *hosts_out = NULL;
    int rc = vault_name_check(p->name, err);
    if (rc)
        return rc;
    if (!p->value || !p->value->data || p->value->len == 0)
        return al_error_set(err, -EINVAL, "the value is empty: nothing to store");
    if (p->value->len > VAULT_VALUE_MAX)
        return al_error_set(err, -E2BIG, "the value is too large (%zu bytes, at most %d)",
                            p->value->len, VAULT_VALUE_MAX);
    if (p->description) {
        if (strlen(p->description) > VAULT_DESC_MAX)
            return al_error_set(err, -EINVAL, "the description is longer than %d bytes",
                                VAULT_DESC_MAX);
        for (const char *c = p->description; *c; c++) {
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                return al_error_set(err, -EINVAL, "the description contains a control character");
        }
    }
    if (p->keep > VAULT_KEEP_MAX)
        return al_error_set(err, -EINVAL, "--keep must be between 1 and %d", VAULT_KEEP_MAX);
    if (p->metadata && (rc = vault_metadata_check(p->metadata, err)))
        return rc;
    if (p->set_hosts || create) {
        if (p->n_hosts > VAULT_HOSTS_MAX)
            return al_error_set(err, -EINVAL, "too many bound hosts (at most %d)", VAULT_HOSTS_MAX);
        char **h = calloc(p->n_hosts + 1, sizeof *h);
        if (!h)
            return al_error_set(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < p->n_hosts; i++) {
            h[i] = malloc(VAULT_HOST_MAX + 3);
            if (!h[i] || strlen(p->hosts[i]) > VAULT_HOST_MAX + 1) {
                rc = h[i] ? al_error_set(err, -EINVAL, "bound host %zu is too long", i + 1)
                          : al_error_set(err, -ENOMEM, "out of memory");
            } else {
                snprintf(h[i], VAULT_HOST_MAX + 3, "%s", p->hosts[i]);
                rc = vault_host_check(h[i], true, err);
            }
            if (rc) {
                for (size_t k = 0; k <= i; k++)
                    free(h[k]);
                free(h);
                return rc;
            }
            for (size_t k = 0; k < i; k++) {
                if (strcmp(h[k], h[i]) == 0) {
                    for (size_t m = 0; m <= i; m++)
                        free(h[m]);
                    free(h);
                    return al_error_set(err, -EINVAL, "bound host %zu is given twice", i + 1);
                }
            }
        }
        *hosts_out = h;
    }
    return 0;
}

struct store__put_arg {
    const struct vault_put *p;
    char **hosts;
    const char *actor;
    bool create;
    uint32_t version;
};

static void store__event(struct vault_secret *s, const char *event, uint32_t version,
                         const char *actor, const char *ts)
{
    if (s->n_history == VAULT_HISTORY_MAX) {
        memmove(s->history, s->history + 1, (VAULT_HISTORY_MAX - 1) * sizeof *s->history);
        s->n_history--;
    }
    struct vault_event *e = &s->history[s->n_history++];
    memset(e, 0, sizeof *e);
    snprintf(e->time, sizeof e->time, "%s", ts);
    snprintf(e->event, sizeof e->event, "%s", event);
    snprintf(e->by, sizeof e->by, "%s", actor);
    e->version = version;
}

/* 128 random bits never collide in practice; the check makes uniqueness an invariant. */
static bool store__uid_used(const struct vault_catalog *c, const struct vault_secret *self)
{
    for (size_t i = 0; i < c->n; i++)
        if (&c->secrets[i] != self && strcmp(c->secrets[i].uid, self->uid) == 0)
            return true;
    return false;
}

static int store__apply_put(struct vault_store *s, struct vault_catalog *c, void *arg,
                            struct al_error *err)
{
    struct store__put_arg *a = arg;
    const struct vault_put *p = a->p;
    const struct vault_secret *found = vault_catalog_find(c, p->name);
    if (a->create && found)
        return al_error_set(err, -EEXIST,
                            "secret \"%s\" already exists: use `airlock vault rotate %s` to "
                            "replace its value",
                            p->name, p->name);
    if (!a->create && !found)
        return al_error_set(err, -ENOENT,
                            "no secret named \"%s\" (see `airlock vault ls`; create it with "
                            "`airlock vault put %s`)",
                            p->name, p->name);
    if (a->create && c->n >= VAULT_SECRETS_MAX)
        return al_error_set(err, -ENOSPC, "the vault is full (%d secrets)", VAULT_SECRETS_MAX);
    char ts[40];
    al_time_rfc3339(ts, sizeof ts, al_wall_ns());
    struct vault_secret *sec;
    if (a->create) {
        size_t at = 0;
        while (at < c->n && strcmp(c->secrets[at].name, p->name) < 0)
            at++;
        struct vault_secret *ns = realloc(c->secrets, (c->n + 1) * sizeof *ns);
        if (!ns)
            return al_error_set(err, -ENOMEM, "out of memory");
        c->secrets = ns;
        memmove(&c->secrets[at + 1], &c->secrets[at], (c->n - at) * sizeof *ns);
        c->n++;
        sec = &c->secrets[at];
        memset(sec, 0, sizeof *sec);
        snprintf(sec->name, sizeof sec->name, "%s", p->name);
        snprintf(sec->created, sizeof sec->created, "%s", ts);
        sec->keep = p->keep ? p->keep : VAULT_KEEP_DEFAULT;
        sec->description = strdup(p->description ? p->description : "");
        sec->history = calloc(VAULT_HISTORY_MAX, sizeof *sec->history);
        sec->versions = calloc(VAULT_KEEP_MAX + 1, sizeof *sec->versions);
        if (!sec->description || !sec->history || !sec->versions)
            return al_error_set(err, -ENOMEM, "out of memory");
    } else {
        sec = (struct vault_secret *)found;
        if (p->keep)
            sec->keep = p->keep;
        if (p->description) {
            char *d = strdup(p->description);
            if (!d)
                return al_error_set(err, -ENOMEM, "out of memory");
            free(sec->description);
            sec->description = d;
        }
        struct vault_event *h = realloc(sec->history, VAULT_HISTORY_MAX * sizeof *h);
        struct vault_version *v = realloc(sec->versions, (VAULT_KEEP_MAX + 1) * sizeof *v);
        if (h)
            sec->history = h;
        if (v)
            sec->versions = v;
        if (!h || !v)
            return al_error_set(err, -ENOMEM, "out of memory");
    }
    if (p->metadata) {
        json_t *m = json_deep_copy(p->metadata);
        if (!m)
            return al_error_set(err, -ENOMEM, "out of memory");
        json_decref(sec->metadata);
        sec->metadata = m;
    }
    /* New secrets get their identifier; one stored before identifiers existed gets it now. */
    if (!sec->uid[0]) {
        do {
            vault_uid_new(sec->uid);
        } while (store__uid_used(c, sec));
    }
    if (a->hosts) {
        for (size_t i = 0; i < sec->n_hosts; i++)
            free(sec->hosts[i]);
        free(sec->hosts);
        sec->hosts = a->hosts;
        sec->n_hosts = p->n_hosts;
        a->hosts = NULL; /* now owned by the catalog */
    }
    /* The new version, newest first. */
    struct vault_version nv = {0};
    nv.version = a->create ? 1 : sec->current + 1;
    snprintf(nv.created, sizeof nv.created, "%s", ts);
    snprintf(nv.by, sizeof nv.by, "%s", a->actor);
    vault_secret_id(s->sid_key, p->value->data, p->value->len, nv.secret_id);
    int rc = vault_value_seal(s->keys, s->hdr.file_id, sec->name, p->value, &nv);
    if (rc)
        return al_error_set(err, rc, "cannot encrypt the value");
    memmove(&sec->versions[1], &sec->versions[0], sec->n_versions * sizeof nv);
    sec->versions[0] = nv;
    sec->n_versions++;
    while (sec->n_versions > sec->keep)
        vault_version_clear(&sec->versions[--sec->n_versions]);
    sec->current = nv.version;
    snprintf(sec->updated, sizeof sec->updated, "%s", ts);
    c->generation++;
    sec->generation = c->generation;
    store__event(sec, a->create ? "create" : "rotate", nv.version, a->actor, ts);
    a->version = nv.version;
    return 0;
}

static int store__put(struct vault_store *s, const struct vault_put *p, const char *actor,
                      bool create, uint32_t *version, struct al_error *err)
{
    struct store__put_arg a = {.p = p, .actor = actor ? actor : "unknown", .create = create};
    int rc = store__validate_put(p, create, &a.hosts, err);
    if (rc)
        return rc;
    rc = store__mutate(s, store__apply_put, &a, err);
    if (a.hosts) {
        for (size_t i = 0; i < p->n_hosts; i++)
            free(a.hosts[i]);
        free(a.hosts);
    }
    if (version)
        *version = rc == 0 ? a.version : 0;
    return rc;
}

int vault_store_create(struct vault_store *s, const struct vault_put *p, const char *actor,
                       uint32_t *version, struct al_error *err)
{
    return store__put(s, p, actor, true, version, err);
}

int vault_store_rotate(struct vault_store *s, const struct vault_put *p, const char *actor,
                       uint32_t *version, struct al_error *err)
{
    return store__put(s, p, actor, false, version, err);
}

static int store__apply_delete(struct vault_store *s, struct vault_catalog *c, void *arg,
                               struct al_error *err)
{
    (void)s;
    const char *name = arg;
    const struct vault_secret *found = vault_catalog_find(c, name);
    if (!found)
        return al_error_set(err, -ENOENT, "no secret named \"%s\" (see `airlock vault ls`)", name);
    size_t at = (size_t)(found - c->secrets);
    vault_secret_clear(&c->secrets[at]);
    memmove(&c->secrets[at], &c->secrets[at + 1], (c->n - at - 1) * sizeof *c->secrets);
    c->n--;
    c->generation++;
    if (c->n_tombs == VAULT_TOMBSTONES_MAX) {
        c->tomb_horizon = c->tombs[0].generation;
        memmove(&c->tombs[0], &c->tombs[1], (VAULT_TOMBSTONES_MAX - 1) * sizeof *c->tombs);
        c->n_tombs--;
    }
    struct vault_tombstone *nt = realloc(c->tombs, (c->n_tombs + 1) * sizeof *nt);
    if (!nt)
        return al_error_set(err, -ENOMEM, "out of memory");
    c->tombs = nt;
    struct vault_tombstone *t = &c->tombs[c->n_tombs++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->generation = c->generation;
    al_time_rfc3339(t->time, sizeof t->time, al_wall_ns());
    return 0;
}

int vault_store_delete(struct vault_store *s, const char *name, const char *actor,
                       struct al_error *err)
{
    (void)actor;
    int rc = vault_name_check(name, err);
    if (rc)
        return rc;
    return store__mutate(s, store__apply_delete, (void *)name, err);
}

int vault_store_value(struct vault_store *s, const struct vault_secret *sec, uint32_t version,
                      struct vault_value *out, struct al_error *err)
{
    const struct vault_version *v = NULL;
    for (size_t i = 0; i < sec->n_versions && !v; i++) {
        if (version == 0 || sec->versions[i].version == version)
            v = &sec->versions[i];
    }
    if (!v)
        return al_error_set(err, -ENOENT,
                            "secret \"%s\" has no version %" PRIu32 " (kept: the last %" PRIu32 ")",
                            sec->name, version, sec->keep);
    int rc = vault_value_open(s->keys, s->hdr.file_id, sec->name, v, out);
    if (rc == -EBADMSG)
        return al_error_set(err, -EBADMSG,
                            "secret \"%s\" version %" PRIu32 " does not decrypt: the vault file "
                            "was tampered with",
                            sec->name, v->version);
    if (rc)
        return al_error_set(err, rc, "cannot decrypt secret \"%s\": %s", sec->name, strerror(-rc));
    return 0;
}

int vault_store_check(struct vault_store *s, size_t *values, struct al_error *err)
{
    size_t n = 0;
    for (size_t i = 0; i < s->cat.n; i++) {
        const struct vault_secret *sec = &s->cat.secrets[i];
        for (size_t k = 0; k < sec->n_versions; k++) {
            struct vault_value v;
            int rc = vault_store_value(s, sec, sec->versions[k].version, &v, err);
            if (rc)
                return rc;
            char id[VAULT_SECRET_ID_LEN + 1];
            vault_secret_id(s->sid_key, v.data, v.len, id);
            vault_value_free(&v);
            if (strcmp(id, sec->versions[k].secret_id) != 0)
                return al_error_set(err, -EBADMSG,
                                    "secret \"%s\" version %" PRIu32 ": its recorded secret id "
                                    "does not match its value (was %s replaced?)",
                                    sec->name, sec->versions[k].version, s->sidkey);
            n++;
        }
    }
    if (values)
        *values = n;
    return 0;
}
