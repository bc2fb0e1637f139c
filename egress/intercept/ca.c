/* egress/intercept/ca: per-sandbox CA, name constraints, leaf minting and cache (see ca.h). */
#include "ca.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mbedtls/asn1write.h>
#include <mbedtls/ecp.h>
#include <mbedtls/oid.h>
#include <mbedtls/pem.h>
#include <mbedtls/platform_util.h>

#include "common/util.h"
#include "intercept.h"
#include "policy/policy.h"

#define CA_KEY_BLOCK 256  /* bytes of guarded memory for the CA key's DER (P-256: 121) */
#define CA_SKEW_S    3600 /* notBefore this far in the past (clocks of sandboxes drift) */
#define CA_ID_MAX    64

struct intercept_leaf {
    atomic_int refs;
    mbedtls_x509_crt crt;
    mbedtls_pk_context key;
    struct intercept_signer *signer; /* libcrypto's copy of key, which signs handshakes */
    uint64_t renew_ns;               /* monotonic: re-mint after this */
    char name[POLICY_NAME_MAX + 1];
};

struct ca__slot {
    struct intercept_leaf *leaf;
    uint64_t used; /* LRU tick */
};

struct intercept_ca {
    atomic_int refs;
    /* The private key (DER) in guarded memory, PROT_NONE except while a leaf is signed. */
    pthread_mutex_t key_lock;
    unsigned char *key_der;
    size_t key_der_len;

    char subject[160]; /* issuer name of every leaf */
    unsigned char *der;
    size_t der_len;
    char *pem;
    char fingerprint[8 + 64 + 1];
    char **subtrees;
    size_t n_subtrees;
    time_t not_after;
    uint32_t leaf_validity_s;

    pthread_mutex_t lock; /* the cache and the figures */
    struct ca__slot *slots;
    size_t n_slots, max_slots;
    uint64_t tick;
    struct intercept_ca_stats st;
};

/* ---- names ---------------------------------------------------------------------------- */

bool intercept_name_in_subtree(const char *name, const char *base)
{
    size_t n = strlen(name), b = strlen(base);
    if (n == b)
        return memcmp(name, base, n) == 0;
    return n > b + 1 && name[n - b - 1] == '.' && memcmp(name + n - b, base, b) == 0;
}

void intercept_strv_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int ca__cmp_len(const void *a, const void *b)
{
    size_t la = strlen(*(char *const *)a), lb = strlen(*(char *const *)b);
    if (la != lb)
        return la < lb ? -1 : 1;
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int intercept_ca_subtrees_for(const char *const *patterns, size_t n, char ***out, size_t *n_out,
                              struct al_error *err)
{
    *out = NULL;
    *n_out = 0;
    if (n > INTERCEPT_CA_MAX_SUBTREES)
        return al_error_set(
            err, -E2BIG, "the policy intercepts %zu host patterns; a sandbox CA takes at most %d",
            n, INTERCEPT_CA_MAX_SUBTREES);
    char **bases = calloc(n ? n : 1, sizeof *bases);
    if (!bases)
        return al_error_set(err, -ENOMEM, "out of memory");
    size_t nb = 0;
    for (size_t i = 0; i < n; i++) {
        struct policy_pattern pat;
        struct al_error perr = {0};
        if (policy_pattern_canon(patterns[i], strlen(patterns[i]), &pat, &perr) < 0) {
            intercept_strv_free(bases, nb);
            return al_error_set(err, -EINVAL, "intercepted name '%.260s' is not a host pattern: %s",
                                patterns[i], al_error_str(&perr));
        }
        const char *base = pat.kind == POLICY_PATTERN_EXACT ? pat.text : pat.base;
        if (!base || !*base) {
            intercept_strv_free(bases, nb);
            return al_error_set(err, -EINVAL, "intercepted name '%.260s' has no DNS base",
                                patterns[i]);
        }
        if (!(bases[nb++] = strdup(base))) {
            intercept_strv_free(bases, nb - 1);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
    }
    /* Shortest first: a base is dropped when an earlier (shorter or equal) one covers it. */
    qsort(bases, nb, sizeof *bases, ca__cmp_len);
    size_t k = 0;
    for (size_t i = 0; i < nb; i++) {
        bool covered = false;
        for (size_t j = 0; j < k && !covered; j++)
            covered = intercept_name_in_subtree(bases[i], bases[j]);
        if (covered)
            free(bases[i]);
        else
            bases[k++] = bases[i];
    }
    *out = bases;
    *n_out = k;
    return 0;
}

/* ---- name constraints ------------------------------------------------------------------- */

/* One GeneralSubtree (SEQUENCE { base }), base being the GeneralName of context tag `tag`
 * (2: dNSName, 7: iPAddress) with the value v; written backwards like all of mbedtls' ASN.1
 * writers. Returns the bytes written or a negative mbedtls error. */
static int ca__write_subtree(unsigned char **p, unsigned char *start, unsigned char tag,
                             const unsigned char *v, size_t vlen)
{
    int ret;
    size_t len = 0;
    MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_raw_buffer(p, start, v, vlen));
    MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_len(p, start, len));
    MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_tag(
                                  p, start, (unsigned char)(MBEDTLS_ASN1_CONTEXT_SPECIFIC | tag)));
    MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_len(p, start, len));
    MBEDTLS_ASN1_CHK_ADD(
        len, mbedtls_asn1_write_tag(p, start, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE));
    return (int)len;
}

static int ca__write_nc(unsigned char **p, unsigned char *start, const char *const *bases, size_t n)
{
    int ret;
    size_t len = 0, sub = 0;
    static const unsigned char zeros[32];
    /* excludedSubtrees [1]: iPAddress ::/0 and 0.0.0.0/0 (address and mask, all zero). */
    size_t ex = 0;
    for (int v6 = 1; v6 >= 0; v6--)
        MBEDTLS_ASN1_CHK_ADD(ex, ca__write_subtree(p, start, 7, zeros, v6 ? 32 : 8));
    MBEDTLS_ASN1_CHK_ADD(ex, mbedtls_asn1_write_len(p, start, ex));
    MBEDTLS_ASN1_CHK_ADD(
        ex, mbedtls_asn1_write_tag(p, start,
                                   MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_ASN1_CONSTRUCTED | 1));
    len += ex;
    /* permittedSubtrees [0]: one dNSName per base, in the given order. */
    for (size_t i = n; i-- > 0;)
        MBEDTLS_ASN1_CHK_ADD(
            sub, ca__write_subtree(p, start, 2, (const unsigned char *)bases[i], strlen(bases[i])));
    MBEDTLS_ASN1_CHK_ADD(sub, mbedtls_asn1_write_len(p, start, sub));
    MBEDTLS_ASN1_CHK_ADD(
        sub, mbedtls_asn1_write_tag(p, start,
                                    MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_ASN1_CONSTRUCTED | 0));
    len += sub;
    MBEDTLS_ASN1_CHK_ADD(len, mbedtls_asn1_write_len(p, start, len));
    MBEDTLS_ASN1_CHK_ADD(
        len, mbedtls_asn1_write_tag(p, start, MBEDTLS_ASN1_CONSTRUCTED | MBEDTLS_ASN1_SEQUENCE));
    return (int)len;
}

int intercept_name_constraints_der(const char *const *bases, size_t n, unsigned char *buf,
                                   size_t size, unsigned char **start, size_t *len)
{
    unsigned char *p = buf + size;
    int r = ca__write_nc(&p, buf, bases, n);
    if (r < 0)
        return r == MBEDTLS_ERR_ASN1_BUF_TOO_SMALL ? -ENOSPC : -EINVAL;
    *start = p;
    *len = (size_t)r;
    return 0;
}

/* ---- certificate helpers ---------------------------------------------------------------- */

/* X.509 validity as mbedtls takes it: "YYYYMMDDhhmmss", UTC. A year beyond 9999 leaves out
 * "", which mbedtls_x509write_crt_set_validity refuses, so no certificate is made. */
static void ca__time(time_t t, char out[16])
{
    al_time_format(out, 16, t, 0, AL_TIME_ASN1);
}

static int ca__serial(mbedtls_x509write_cert *w)
{
    unsigned char s[16];
    randombytes_buf(s, sizeof s);
    s[0] = (unsigned char)((s[0] & 0x7f) | 0x40); /* positive, full length */
    return mbedtls_x509write_crt_set_serial_raw(w, s, sizeof s);
}

/* Writes the certificate as DER into a malloc'd buffer. */
static int ca__crt_der(mbedtls_x509write_cert *w, size_t cap, unsigned char **der, size_t *len)
{
    unsigned char *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    int r = mbedtls_x509write_crt_der(w, buf, cap, intercept_rng, NULL);
    if (r < 0) {
        free(buf);
        return -EIO;
    }
    memmove(buf, buf + cap - (size_t)r, (size_t)r);
    *der = buf;
    *len = (size_t)r;
    return 0;
}

static int ca__set_eku_server(mbedtls_x509write_cert *w)
{
    mbedtls_asn1_sequence eku = {0};
    eku.buf.tag = MBEDTLS_ASN1_OID;
    eku.buf.p = (unsigned char *)MBEDTLS_OID_SERVER_AUTH;
    eku.buf.len = MBEDTLS_OID_SIZE(MBEDTLS_OID_SERVER_AUTH);
    return mbedtls_x509write_crt_set_ext_key_usage(w, &eku);
}

/* Loads the CA key from guarded memory into pk (the caller frees pk at once). */
static int ca__load_key(struct intercept_ca *ca, mbedtls_pk_context *pk)
{
    pthread_mutex_lock(&ca->key_lock);
    sodium_mprotect_readonly(ca->key_der);
    int r = mbedtls_pk_parse_key(pk, ca->key_der, ca->key_der_len, NULL, 0, intercept_rng, NULL);
    sodium_mprotect_noaccess(ca->key_der);
    pthread_mutex_unlock(&ca->key_lock);
    return r;
}

/* ---- the CA ------------------------------------------------------------------------------ */

static void ca__free(struct intercept_ca *ca)
{
    if (!ca)
        return;
    for (size_t i = 0; i < ca->n_slots; i++)
        intercept_leaf_unref(ca->slots[i].leaf);
    free(ca->slots);
    if (ca->key_der) {
        sodium_mprotect_readwrite(ca->key_der);
        sodium_free(ca->key_der); /* wipes */
    }
    free(ca->der);
    free(ca->pem);
    intercept_strv_free(ca->subtrees, ca->n_subtrees);
    pthread_mutex_destroy(&ca->key_lock);
    pthread_mutex_destroy(&ca->lock);
    free(ca);
}

static void ca__subject(const char *sandbox_id, char *out, size_t outlen)
{
    /* Sandbox ids are printable tokens; anything else is replaced so that the subject
     * string needs no escaping. */
    char id[CA_ID_MAX + 1];
    size_t n = 0;
    for (const char *s = sandbox_id; *s && n < CA_ID_MAX; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.';
        id[n++] = ok ? ch : '_';
    }
    id[n] = 0;
    snprintf(out, outlen, "CN=airlock sandbox CA %s,O=airlock,OU=egress interception", id);
}

int intercept_ca_new(const struct intercept_ca_opts *o, struct intercept_ca **out,
                     struct al_error *err)
{
    *out = NULL;
    int r = intercept_init(err);
    if (r < 0)
        return r;
    if (!o || !o->sandbox_id || !*o->sandbox_id)
        return al_error_set(err, -EINVAL, "a sandbox CA needs the sandbox id");
    struct intercept_ca *ca = calloc(1, sizeof *ca);
    if (!ca)
        return al_error_set(err, -ENOMEM, "out of memory");
    atomic_init(&ca->refs, 1);
    pthread_mutex_init(&ca->key_lock, NULL);
    pthread_mutex_init(&ca->lock, NULL);
    ca->max_slots = o->max_leaves ? o->max_leaves : INTERCEPT_CA_LEAVES_DEFAULT;
    uint32_t ca_validity = o->ca_validity_s ? o->ca_validity_s : INTERCEPT_CA_VALIDITY_DEFAULT;
    ca->leaf_validity_s = o->leaf_validity_s ? o->leaf_validity_s : INTERCEPT_LEAF_VALIDITY_DEFAULT;
    if (ca->leaf_validity_s > ca_validity)
        ca->leaf_validity_s = ca_validity;

    if ((r = intercept_ca_subtrees_for(o->names, o->n_names, &ca->subtrees, &ca->n_subtrees, err)) <
        0)
        goto fail;
    if (ca->n_subtrees == 0) {
        free(ca->subtrees);
        ca->subtrees = calloc(1, sizeof *ca->subtrees);
        if (!ca->subtrees || !(ca->subtrees[0] = strdup(INTERCEPT_CA_NOTHING))) {
            r = al_error_set(err, -ENOMEM, "out of memory");
            goto fail;
        }
        ca->n_subtrees = 1;
    }
    ca__subject(o->sandbox_id, ca->subject, sizeof ca->subject);

    mbedtls_pk_context pk;
    struct intercept_signer *signer = NULL; /* signs the CA's own certificate */
    mbedtls_x509write_cert w;
    mbedtls_pk_init(&pk);
    mbedtls_x509write_crt_init(&w);
    unsigned char *nc_buf = NULL;
    int m = intercept_key_gen_p256(&pk, &signer);
    if (m == 0) {
        /* The key's DER into guarded memory. */
        ca->key_der = sodium_malloc(CA_KEY_BLOCK);
        if (!ca->key_der) {
            m = MBEDTLS_ERR_PK_ALLOC_FAILED;
        } else {
            int kl = mbedtls_pk_write_key_der(&pk, ca->key_der, CA_KEY_BLOCK);
            if (kl <= 0) {
                m = kl ? kl : MBEDTLS_ERR_PK_BAD_INPUT_DATA;
            } else {
                memmove(ca->key_der, ca->key_der + CA_KEY_BLOCK - (size_t)kl, (size_t)kl);
                sodium_memzero(ca->key_der + kl, CA_KEY_BLOCK - (size_t)kl);
                ca->key_der_len = (size_t)kl;
            }
        }
    }
    time_t now = time(NULL);
    ca->not_after = now + (time_t)ca_validity;
    char nb[16], na[16];
    ca__time(now - CA_SKEW_S, nb);
    ca__time(ca->not_after, na);
    size_t nc_cap = 64;
    for (size_t i = 0; i < ca->n_subtrees; i++)
        nc_cap += strlen(ca->subtrees[i]) + 8;
    unsigned char *nc = NULL;
    size_t nc_len = 0;
    if (m == 0 && !(nc_buf = malloc(nc_cap)))
        m = MBEDTLS_ERR_X509_ALLOC_FAILED;
    if (m == 0 && intercept_name_constraints_der((const char *const *)ca->subtrees, ca->n_subtrees,
                                                 nc_buf, nc_cap, &nc, &nc_len) < 0)
        m = MBEDTLS_ERR_X509_BAD_INPUT_DATA;
    if (m == 0) {
        mbedtls_x509write_crt_set_version(&w, MBEDTLS_X509_CRT_VERSION_3);
        mbedtls_x509write_crt_set_md_alg(&w, MBEDTLS_MD_SHA256);
        mbedtls_x509write_crt_set_subject_key(&w, &pk);
        mbedtls_x509write_crt_set_issuer_key(&w, &pk);
    }
    if (m == 0)
        m = ca__serial(&w);
    if (m == 0)
        m = mbedtls_x509write_crt_set_subject_name(&w, ca->subject);
    if (m == 0)
        m = mbedtls_x509write_crt_set_issuer_name(&w, ca->subject);
    if (m == 0)
        m = mbedtls_x509write_crt_set_validity(&w, nb, na);
    if (m == 0)
        m = mbedtls_x509write_crt_set_basic_constraints(&w, 1, 0);
    if (m == 0)
        m = mbedtls_x509write_crt_set_key_usage(&w, MBEDTLS_X509_KU_KEY_CERT_SIGN |
                                                        MBEDTLS_X509_KU_CRL_SIGN);
    if (m == 0)
        m = ca__set_eku_server(&w);
    if (m == 0)
        m = mbedtls_x509write_crt_set_subject_key_identifier(&w);
    if (m == 0)
        m = mbedtls_x509write_crt_set_authority_key_identifier(&w);
    if (m == 0)
        m = mbedtls_x509write_crt_set_extension(&w, MBEDTLS_OID_NAME_CONSTRAINTS,
                                                MBEDTLS_OID_SIZE(MBEDTLS_OID_NAME_CONSTRAINTS), 1,
                                                nc, nc_len);
    if (m == 0 && ca__crt_der(&w, 4096 + nc_cap, &ca->der, &ca->der_len) < 0)
        m = MBEDTLS_ERR_X509_ALLOC_FAILED;
    free(nc_buf);
    mbedtls_x509write_crt_free(&w);
    intercept_signer_free(signer);
    mbedtls_pk_free(&pk); /* wipes the key material */
    if (m != 0) {
        r = al_error_set(err, -EIO, "cannot create the sandbox CA: %s",
                         intercept_mbedtls_strerror(m));
        goto fail;
    }
    sodium_mprotect_noaccess(ca->key_der);

    /* PEM (what the sandbox installs) and fingerprint. */
    size_t pem_cap = ca->der_len * 2 + 128, olen = 0;
    if (!(ca->pem = malloc(pem_cap)) ||
        mbedtls_pem_write_buffer("-----BEGIN CERTIFICATE-----\n", "-----END CERTIFICATE-----\n",
                                 ca->der, ca->der_len, (unsigned char *)ca->pem, pem_cap,
                                 &olen) != 0) {
        r = al_error_set(err, -ENOMEM, "cannot encode the sandbox CA as PEM");
        goto fail;
    }
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, ca->der, ca->der_len);
    memcpy(ca->fingerprint, "sha256:", 7);
    sodium_bin2hex(ca->fingerprint + 7, sizeof ca->fingerprint - 7, h, sizeof h);
    if (!(ca->slots = calloc(ca->max_slots, sizeof *ca->slots))) {
        r = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    *out = ca;
    return 0;
fail:
    ca__free(ca);
    return r;
}

struct intercept_ca *intercept_ca_ref(struct intercept_ca *ca)
{
    if (ca)
        atomic_fetch_add(&ca->refs, 1);
    return ca;
}

void intercept_ca_unref(struct intercept_ca *ca)
{
    if (ca && atomic_fetch_sub(&ca->refs, 1) == 1)
        ca__free(ca);
}

const char *intercept_ca_pem(const struct intercept_ca *ca)
{
    return ca->pem;
}

const unsigned char *intercept_ca_der(const struct intercept_ca *ca, size_t *len)
{
    *len = ca->der_len;
    return ca->der;
}

const char *intercept_ca_fingerprint(const struct intercept_ca *ca)
{
    return ca->fingerprint;
}

size_t intercept_ca_subtrees(const struct intercept_ca *ca, const char *const **out)
{
    *out = (const char *const *)ca->subtrees;
    return ca->n_subtrees;
}

bool intercept_ca_permits(const struct intercept_ca *ca, const char *name)
{
    for (size_t i = 0; i < ca->n_subtrees; i++)
        if (intercept_name_in_subtree(name, ca->subtrees[i]))
            return true;
    return false;
}

/* ---- leaves ------------------------------------------------------------------------------ */

static void leaf__free(struct intercept_leaf *l)
{
    mbedtls_x509_crt_free(&l->crt);
    intercept_signer_free(l->signer);
    mbedtls_pk_free(&l->key);
    free(l);
}

struct intercept_leaf *intercept_leaf_ref(struct intercept_leaf *l)
{
    if (l)
        atomic_fetch_add(&l->refs, 1);
    return l;
}

void intercept_leaf_unref(struct intercept_leaf *l)
{
    if (l && atomic_fetch_sub(&l->refs, 1) == 1)
        leaf__free(l);
}

const char *intercept_leaf_name(const struct intercept_leaf *l)
{
    return l->name;
}

mbedtls_x509_crt *intercept_leaf_crt(struct intercept_leaf *l)
{
    return &l->crt;
}

mbedtls_pk_context *intercept_leaf_key(struct intercept_leaf *l)
{
    return &l->key;
}

/* Mints a leaf for name; -ENOMEM or -EIO with err saying what failed. */
static int ca__mint(struct intercept_ca *ca, const char *name, struct intercept_leaf **out,
                    struct al_error *err)
{
    struct intercept_leaf *l = calloc(1, sizeof *l);
    if (!l)
        return al_error_set(err, -ENOMEM, "out of memory");
    atomic_init(&l->refs, 1);
    snprintf(l->name, sizeof l->name, "%s", name);
    mbedtls_x509_crt_init(&l->crt);
    mbedtls_pk_init(&l->key);
    mbedtls_pk_context issuer;
    mbedtls_pk_init(&issuer);
    struct intercept_signer *issuer_signer = NULL;
    struct al_error serr = {0};
    mbedtls_x509write_cert w;
    mbedtls_x509write_crt_init(&w);
    unsigned char *der = NULL;
    size_t der_len = 0;

    time_t now = time(NULL);
    time_t end = now + (time_t)ca->leaf_validity_s;
    if (end > ca->not_after)
        end = ca->not_after;
    char nb[16], na[16], subject[POLICY_NAME_MAX + 32];
    ca__time(now - CA_SKEW_S, nb);
    ca__time(end, na);
    /* CN is limited to 64 characters (RFC 5280 ub-common-name); the SAN is what counts. */
    if (strlen(name) <= 64)
        snprintf(subject, sizeof subject, "CN=%s,O=airlock", name);
    else
        snprintf(subject, sizeof subject, "O=airlock");
    mbedtls_x509_san_list san = {0};
    san.node.type = MBEDTLS_X509_SAN_DNS_NAME;
    san.node.san.unstructured_name.p = (unsigned char *)l->name;
    san.node.san.unstructured_name.len = strlen(l->name);

    int m = intercept_key_gen_p256(&l->key, &l->signer);
    if (m == 0)
        m = ca__load_key(ca, &issuer);
    /* libcrypto's copy of the CA key lives as long as mbedtls' transient one: the key stays
     * in guarded memory between mints (building it costs about 0.03 ms a mint). */
    if (m == 0 && intercept_signer_new(&issuer, &issuer_signer, &serr) < 0)
        m = MBEDTLS_ERR_PK_KEY_INVALID_FORMAT;
    if (m == 0) {
        mbedtls_x509write_crt_set_version(&w, MBEDTLS_X509_CRT_VERSION_3);
        mbedtls_x509write_crt_set_md_alg(&w, MBEDTLS_MD_SHA256);
        mbedtls_x509write_crt_set_subject_key(&w, &l->key);
        mbedtls_x509write_crt_set_issuer_key(&w, &issuer);
        m = ca__serial(&w);
    }
    if (m == 0)
        m = mbedtls_x509write_crt_set_subject_name(&w, subject);
    if (m == 0)
        m = mbedtls_x509write_crt_set_issuer_name(&w, ca->subject);
    if (m == 0)
        m = mbedtls_x509write_crt_set_validity(&w, nb, na);
    if (m == 0)
        m = mbedtls_x509write_crt_set_basic_constraints(&w, 0, -1);
    if (m == 0)
        m = mbedtls_x509write_crt_set_key_usage(&w, MBEDTLS_X509_KU_DIGITAL_SIGNATURE);
    if (m == 0)
        m = ca__set_eku_server(&w);
    if (m == 0)
        m = mbedtls_x509write_crt_set_subject_alternative_name(&w, &san);
    if (m == 0)
        m = mbedtls_x509write_crt_set_subject_key_identifier(&w);
    if (m == 0)
        m = mbedtls_x509write_crt_set_authority_key_identifier(&w);
    if (m == 0 && ca__crt_der(&w, 2048, &der, &der_len) < 0)
        m = MBEDTLS_ERR_X509_ALLOC_FAILED;
    if (m == 0)
        m = mbedtls_x509_crt_parse_der(&l->crt, der, der_len);
    free(der);
    mbedtls_x509write_crt_free(&w);
    intercept_signer_free(issuer_signer);
    mbedtls_pk_free(&issuer); /* wipes the CA key's transient copy */
    if (m != 0) {
        leaf__free(l);
        if (serr.code)
            return al_error_set(err, serr.code == -ENOMEM ? -ENOMEM : -EIO,
                                "the sandbox CA's key: %s", al_error_str(&serr));
        if (m == MBEDTLS_ERR_X509_ALLOC_FAILED || m == MBEDTLS_ERR_PK_ALLOC_FAILED ||
            m == MBEDTLS_ERR_ECP_ALLOC_FAILED)
            return al_error_set(err, -ENOMEM, "out of memory");
        return al_error_set(err, -EIO, "crypto failure: %s", intercept_mbedtls_strerror(m));
    }
    l->renew_ns = al_now_ns() + (uint64_t)(end - now) * 1000000000ull / 2;
    *out = l;
    return 0;
}

static struct ca__slot *ca__find(struct intercept_ca *ca, const char *name)
{
    for (size_t i = 0; i < ca->n_slots; i++)
        if (strcmp(ca->slots[i].leaf->name, name) == 0)
            return &ca->slots[i];
    return NULL;
}

static void ca__remove_slot(struct intercept_ca *ca, struct ca__slot *s)
{
    intercept_leaf_unref(s->leaf);
    *s = ca->slots[--ca->n_slots];
}

int intercept_ca_leaf(struct intercept_ca *ca, const char *name, struct intercept_leaf **out,
                      struct al_error *err)
{
    *out = NULL;
    uint64_t now = al_now_ns();
    pthread_mutex_lock(&ca->lock);
    struct ca__slot *s = ca__find(ca, name);
    if (s && now < s->leaf->renew_ns) {
        s->used = ++ca->tick;
        ca->st.hits++;
        *out = intercept_leaf_ref(s->leaf);
        pthread_mutex_unlock(&ca->lock);
        return 0;
    }
    pthread_mutex_unlock(&ca->lock);

    /* A miss (or a renewal): check the name, then mint outside the lock. */
    struct policy_host h;
    size_t len = strlen(name);
    if (policy_host_canon(name, len, &h, NULL) < 0 || h.kind != POLICY_HOST_NAME || h.len != len ||
        memcmp(h.text, name, len) != 0)
        return al_error_set(err, -EINVAL, "'%.260s' is not a canonical host name", name);
    if (!intercept_ca_permits(ca, name)) {
        pthread_mutex_lock(&ca->lock);
        ca->st.refused++;
        pthread_mutex_unlock(&ca->lock);
        return al_error_set(
            err, -EPERM,
            "'%s' is outside the name constraints of this sandbox's CA (the policy "
            "intercepts it only since the sandbox was created: recreate the sandbox)",
            name);
    }
    uint64_t t0 = al_now_ns();
    struct intercept_leaf *l;
    int r = ca__mint(ca, name, &l, err);
    if (r < 0) {
        al_error_prefix(err, "cannot mint a certificate for '%s'", name);
        return r;
    }
    uint64_t t1 = al_now_ns();

    pthread_mutex_lock(&ca->lock);
    ca->st.minted++;
    ca->st.mint_ns_total += t1 - t0;
    s = ca__find(ca, name);
    if (s && t1 < s->leaf->renew_ns) {
        /* Another thread minted it meanwhile: use theirs, so the cache holds one. */
        s->used = ++ca->tick;
        *out = intercept_leaf_ref(s->leaf);
        pthread_mutex_unlock(&ca->lock);
        intercept_leaf_unref(l);
        return 0;
    }
    if (s) {
        ca__remove_slot(ca, s);
    } else if (ca->n_slots == ca->max_slots) {
        size_t lru = 0;
        for (size_t i = 1; i < ca->n_slots; i++)
            if (ca->slots[i].used < ca->slots[lru].used)
                lru = i;
        ca__remove_slot(ca, &ca->slots[lru]);
        ca->st.evicted++;
    }
    ca->slots[ca->n_slots].leaf = l;
    ca->slots[ca->n_slots].used = ++ca->tick;
    ca->n_slots++;
    *out = intercept_leaf_ref(l);
    pthread_mutex_unlock(&ca->lock);
    return 0;
}

int intercept_ca__mint_unchecked(struct intercept_ca *ca, const char *name,
                                 struct intercept_leaf **out)
{
    return ca__mint(ca, name, out, NULL);
}

void intercept_ca_get_stats(struct intercept_ca *ca, struct intercept_ca_stats *st)
{
    pthread_mutex_lock(&ca->lock);
    *st = ca->st;
    st->cached = ca->n_slots;
    pthread_mutex_unlock(&ca->lock);
}
