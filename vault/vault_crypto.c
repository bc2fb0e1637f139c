/* vault/vault_crypto: key material and value sealing for the vault (see vault_file.h for the
 * scheme), values in guarded memory, secret ids and key files. */
#include "vault/vault.h"
#include "vault/vault_file.h"

#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#define VAULT__DK_AD    "airlock-vault-dk-v1"
#define VAULT__VALUE_AD "airlock-vault-value-v1"

/* ---- values ---------------------------------------------------------------------------------- */

/* Recycled guarded blocks by size class. sodium_malloc puts a guard page right after the
 * block it returns for the exact size requested: blocks of a class are allocated at the class
 * size, so an overflow past the class still faults. */
#define VAULT__POOL_PER_CLASS 8
static const size_t vault__classes[] = {256, 4096, 128 * 1024};
static struct {
    void *blocks[VAULT__POOL_PER_CLASS];
    int n;
} vault__pool[3];
static pthread_mutex_t vault__pool_mu = PTHREAD_MUTEX_INITIALIZER;

int vault_value_alloc(struct vault_value *v, size_t len)
{
    v->data = NULL;
    v->len = v->cap = 0;
    size_t need = len ? len : 1;
    int cls = -1;
    for (int i = 0; i < 3 && cls < 0; i++) {
        if (need <= vault__classes[i])
            cls = i;
    }
    if (cls >= 0) {
        pthread_mutex_lock(&vault__pool_mu);
        if (vault__pool[cls].n > 0)
            v->data = vault__pool[cls].blocks[--vault__pool[cls].n];
        pthread_mutex_unlock(&vault__pool_mu);
        if (!v->data)
            v->data = sodium_malloc(vault__classes[cls]);
    } else {
        v->data = sodium_malloc(need);
    }
    if (!v->data)
        return -ENOMEM;
    v->len = len;
    v->cap = need;
    return 0;
}

int vault_value_set(struct vault_value *v, const void *data, size_t len)
{
    int rc = vault_value_alloc(v, len);
    if (rc == 0 && len)
        memcpy(v->data, data, len);
    return rc;
}

void vault_value_free(struct vault_value *v)
{
    if (!v || !v->data)
        return;
    sodium_memzero(v->data, v->cap);
    int cls = -1;
    for (int i = 0; i < 3 && cls < 0; i++) {
        if (v->cap <= vault__classes[i])
            cls = i;
    }
    bool pooled = false;
    if (cls >= 0) {
        pthread_mutex_lock(&vault__pool_mu);
        if (vault__pool[cls].n < VAULT__POOL_PER_CLASS) {
            vault__pool[cls].blocks[vault__pool[cls].n++] = v->data;
            pooled = true;
        }
        pthread_mutex_unlock(&vault__pool_mu);
    }
    if (!pooled)
        sodium_free(v->data); /* zeroes again and unmaps */
    v->data = NULL;
    v->len = v->cap = 0;
}

/* ---- keys ------------------------------------------------------------------------------------ */

int vault_keys_alloc(struct vault_keys **k)
{
    *k = sodium_malloc(sizeof **k);
    if (!*k)
        return -ENOMEM;
    sodium_memzero(*k, sizeof **k);
    return 0;
}

void vault_keys_free(struct vault_keys *k)
{
    if (k)
        sodium_free(k);
}

void vault_keys_derive(struct vault_keys *k)
{
    crypto_kdf_derive_from_key(k->enc, sizeof k->enc, 1, "vaultenc", k->dk);
    crypto_kdf_derive_from_key(k->mac, sizeof k->mac, 2, "vaultmac", k->dk);
}

int vault_master_from_passphrase(const char *pass, size_t len, const struct vault_header *h,
                                 unsigned char *mk, struct al_error *err)
{
    if (h->kdf != VAULT_KDF_ARGON2ID)
        return al_error_set(err, -EINVAL, "this vault is not protected by a passphrase");
    if (len == 0)
        return al_error_set(err, -EINVAL, "the passphrase is empty");
    if (crypto_pwhash(mk, 32, pass, len, h->salt, h->opslimit, (size_t)h->memlimit,
                      crypto_pwhash_ALG_ARGON2ID13) != 0)
        return al_error_set(err, -ENOMEM,
                            "Argon2id needs %" PRIu64 " MiB of memory and could not get it",
                            h->memlimit >> 20);
    return 0;
}

static size_t vault__dk_ad(const struct vault_header *h, unsigned char *ad, size_t cap)
{
    int n = snprintf((char *)ad, cap, VAULT__DK_AD "%c%s%c%d", 0, h->file_id, 0, (int)h->kdf);
    return n < 0 ? 0 : (size_t)n;
}

void vault_dk_wrap(const unsigned char *mk, struct vault_header *h, const struct vault_keys *k)
{
    unsigned char ad[96];
    size_t adl = vault__dk_ad(h, ad, sizeof ad);
    randombytes_buf(h->wrap_nonce, sizeof h->wrap_nonce);
    unsigned long long cl = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(h->wrapped, &cl, k->dk, sizeof k->dk, ad, adl, NULL,
                                               h->wrap_nonce, mk);
}

int vault_dk_unwrap(const unsigned char *mk, const struct vault_header *h, struct vault_keys *k)
{
    unsigned char ad[96];
    size_t adl = vault__dk_ad(h, ad, sizeof ad);
    unsigned long long ml = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(k->dk, &ml, NULL, h->wrapped, sizeof h->wrapped,
                                                   ad, adl, h->wrap_nonce, mk) != 0 ||
        ml != sizeof k->dk) {
        sodium_memzero(k, sizeof *k);
        return -EKEYREJECTED;
    }
    vault_keys_derive(k);
    return 0;
}

/* "airlock-vault-value-v1\0<file_id>\0<name>\0<version>" */
static size_t vault__value_ad(const char *file_id, const char *name, uint32_t version,
                              unsigned char *ad, size_t cap)
{
    int n = snprintf((char *)ad, cap, VAULT__VALUE_AD "%c%s%c%s%c%" PRIu32, 0, file_id, 0, name, 0,
                     version);
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

int vault_value_seal(const struct vault_keys *k, const char *file_id, const char *name,
                     const struct vault_value *v, struct vault_version *ver)
{
    unsigned char ad[64 + VAULT_NAME_MAX + 64];
    size_t adl = vault__value_ad(file_id, name, ver->version, ad, sizeof ad);
    if (!adl)
        return -ENAMETOOLONG;
    ver->ct_len = v->len + crypto_aead_xchacha20poly1305_ietf_ABYTES;
    ver->ct = malloc(ver->ct_len);
    if (!ver->ct)
        return -ENOMEM;
    randombytes_buf(ver->nonce, sizeof ver->nonce);
    unsigned long long cl = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(ver->ct, &cl, v->data, v->len, ad, adl, NULL,
                                               ver->nonce, k->enc);
    return 0;
}

int vault_value_open(const struct vault_keys *k, const char *file_id, const char *name,
                     const struct vault_version *ver, struct vault_value *out)
{
    out->data = NULL;
    out->len = 0;
    if (ver->ct_len < crypto_aead_xchacha20poly1305_ietf_ABYTES)
        return -EBADMSG;
    unsigned char ad[64 + VAULT_NAME_MAX + 64];
    size_t adl = vault__value_ad(file_id, name, ver->version, ad, sizeof ad);
    if (!adl)
        return -ENAMETOOLONG;
    size_t len = ver->ct_len - crypto_aead_xchacha20poly1305_ietf_ABYTES;
    int rc = vault_value_alloc(out, len);
    if (rc)
        return rc;
    unsigned long long ml = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(out->data, &ml, NULL, ver->ct, ver->ct_len, ad,
                                                   adl, ver->nonce, k->enc) != 0) {
        vault_value_free(out);
        return -EBADMSG;
    }
    out->len = (size_t)ml;
    return 0;
}

/* ---- secret ids and key files ------------------------------------------------------------------ */

void vault_secret_id(const unsigned char key[32], const void *value, size_t len,
                     char out[VAULT_SECRET_ID_LEN + 1])
{
    al_audit_keyed_id(key, value, len, out);
}

int vault_key_file_load(const char *path, unsigned char key[32], struct al_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            return al_error_set(err, -ENOENT, "key file %s does not exist", path);
        if (e == EACCES)
            return al_error_set(err, -EACCES,
                                "cannot read the key file %s: permission denied (run as root, "
                                "or through the airlock-vault daemon)",
                                path);
        return al_error_set(err, -e, "cannot open the key file %s: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return al_error_set(err, -EINVAL, "key file %s is not a regular file", path);
    }
    if (st.st_mode & 077) {
        close(fd);
        return al_error_set(err, -EPERM,
                            "key file %s is accessible to other users (mode %03o): run chmod 600 "
                            "%s",
                            path, (unsigned)(st.st_mode & 0777), path);
    }
    char *buf = sodium_malloc(256);
    if (!buf) {
        close(fd);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    ssize_t n = read(fd, buf, 255);
    close(fd);
    int rc = 0;
    if (n < 0) {
        rc = al_error_set(err, -errno, "cannot read %s: %s", path, strerror(errno));
    } else {
        buf[n] = '\0';
        /* "# comment lines" then 64 hex digits */
        char *p = buf;
        while (*p == '#') {
            char *nl = strchr(p, '\n');
            p = nl ? nl + 1 : p + strlen(p);
        }
        size_t hl = strcspn(p, "\r\n");
        size_t bl = 0;
        if (hl != 64 || sodium_hex2bin(key, 32, p, hl, NULL, &bl, NULL) != 0 || bl != 32)
            rc = al_error_set(err, -EINVAL,
                              "key file %s is corrupted (expected 64 hex digits): restore it "
                              "from your backup",
                              path);
    }
    sodium_free(buf);
    return rc;
}
