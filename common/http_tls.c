/* common/http_tls: see http_tls.h. */
#include "http_tls.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <psa/crypto.h>

#include "buf.h"

#define TLS_MAX_IN (1024 * 1024) /* ciphertext not yet taken by mbedtls */

struct tls_provider {
    struct al_http_tls pub;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt roots;
    mbedtls_x509_crt own; /* a certificate presented to peers (a server's, mutual TLS) */
    mbedtls_pk_context key;
    bool server;
    bool require_usage; /* the peer's certificate must carry extendedKeyUsage */
};

struct tls_session {
    mbedtls_ssl_context ssl;
    struct al_buf in; /* ciphertext from the socket; in_off of it consumed */
    size_t in_off;
    struct al_buf out; /* ciphertext for the socket */
    char host[256];
};

static const char *tls__alpn[] = {"http/1.1", NULL};

static pthread_once_t tls__once = PTHREAD_ONCE_INIT;
static int tls__init_rc;

static void tls__init(void)
{
    if (sodium_init() < 0 || psa_crypto_init() != PSA_SUCCESS)
        tls__init_rc = -EIO;
}

static int tls__rng(void *ctx, unsigned char *out, size_t len)
{
    (void)ctx;
    randombytes_buf(out, len);
    return 0;
}

static void tls__strerror(int m, char *out, size_t len)
{
    char b[160];
    mbedtls_strerror(m, b, sizeof b);
    snprintf(out, len, "%s (-0x%04x)", b, (unsigned)-m);
}

/* ---- memory BIO --------------------------------------------------------------------- */

static int tls__bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    struct tls_session *s = ctx;
    if (al_buf_append(&s->out, buf, len) < 0)
        return MBEDTLS_ERR_SSL_ALLOC_FAILED;
    return (int)len;
}

static int tls__bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    struct tls_session *s = ctx;
    size_t avail = s->in.len - s->in_off;
    if (avail == 0)
        return MBEDTLS_ERR_SSL_WANT_READ;
    size_t n = avail < len ? avail : len;
    memcpy(buf, s->in.data + s->in_off, n);
    s->in_off += n;
    if (s->in_off == s->in.len) {
        sodium_memzero(s->in.data, s->in.len);
        s->in.len = 0;
        s->in_off = 0;
    }
    return (int)n;
}

/* ---- the operations ------------------------------------------------------------------ */

static void tls__session_free(void *p)
{
    struct tls_session *s = p;
    if (!s)
        return;
    mbedtls_ssl_free(&s->ssl);
    al_buf_free_wipe(&s->in);
    al_buf_free_wipe(&s->out);
    free(s);
}

static void *tls__session_new(void *provider, const char *host, char *msg, size_t msglen)
{
    struct tls_provider *p = provider;
    struct tls_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    snprintf(s->host, sizeof s->host, "%s", host);
    al_buf_init(&s->in, TLS_MAX_IN);
    al_buf_init(&s->out, 0);
    mbedtls_ssl_init(&s->ssl);
    int m = mbedtls_ssl_setup(&s->ssl, &p->conf);
    if (m == 0 && !p->server)
        m = mbedtls_ssl_set_hostname(&s->ssl, host);
    if (m != 0) {
        char e[200];
        tls__strerror(m, e, sizeof e);
        snprintf(msg, msglen, "cannot set up TLS for %s: %s", host, e);
        tls__session_free(s);
        return NULL;
    }
    mbedtls_ssl_set_bio(&s->ssl, s, tls__bio_send, tls__bio_recv, NULL);
    return s;
}

static int tls__feed(void *p, const void *data, size_t len)
{
    struct tls_session *s = p;
    if (s->in_off) { /* keep the buffer small: drop what mbedtls took */
        al_buf_consume(&s->in, s->in_off);
        s->in_off = 0;
    }
    return al_buf_append(&s->in, data, len) < 0 ? -ENOMEM : 0;
}

/* mbedtls's words for verification flags, on one line ("" when it has none). */
static void tls__verify_info(uint32_t flags, char *out, size_t len)
{
    int n = mbedtls_x509_crt_verify_info(out, len, "", flags);
    if (n <= 0) {
        out[0] = '\0';
        return;
    }
    if (out[n - 1] == '\n')
        out[--n] = '\0';
    for (char *q = out; *q; q++)
        if (*q == '\n')
            *q = ';';
}

/* What went wrong, in words a user can act on. */
static int tls__fail(struct tls_session *s, int m, char *msg, size_t msglen)
{
    if (m == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
        uint32_t flags = mbedtls_ssl_get_verify_result(&s->ssl);
        char info[256];
        tls__verify_info(flags, info, sizeof info);
        snprintf(msg, msglen, "the certificate of %s does not verify: %s%s", s->host,
                 info[0] ? info : "unknown reason",
                 flags & MBEDTLS_X509_BADCERT_NOT_TRUSTED ? " (is its CA in the trusted roots?)"
                 : flags & MBEDTLS_X509_BADCERT_CN_MISMATCH
                     ? " (it is another server's certificate: it does not name this host)"
                     : "");
        return -EPROTO;
    }
    if (m == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE) {
        snprintf(msg, msglen, "%s refused the TLS session (fatal alert)", s->host);
        return -EPROTO;
    }
    char e[200];
    tls__strerror(m, e, sizeof e);
    snprintf(msg, msglen, "%s", e);
    return m == MBEDTLS_ERR_SSL_ALLOC_FAILED ? -ENOMEM : -EPROTO;
}

static int tls__handshake(void *p, char *msg, size_t msglen)
{
    struct tls_session *s = p;
    int m = mbedtls_ssl_handshake(&s->ssl);
    if (m == 0)
        return 0;
    if (m == MBEDTLS_ERR_SSL_WANT_READ || m == MBEDTLS_ERR_SSL_WANT_WRITE)
        return -EAGAIN;
    return tls__fail(s, m, msg, msglen);
}

static long tls__read(void *p, void *buf, size_t len, char *msg, size_t msglen)
{
    struct tls_session *s = p;
    for (;;) {
        int m = mbedtls_ssl_read(&s->ssl, buf, len);
        if (m > 0)
            return m;
        if (m == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
            return 0;
        if (m == MBEDTLS_ERR_SSL_WANT_READ || m == MBEDTLS_ERR_SSL_WANT_WRITE)
            return -EAGAIN;
#ifdef MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET
        if (m == MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET)
            continue;
#endif
        if (m == 0) {
            snprintf(msg, msglen, "%s ended the TLS session without close_notify", s->host);
            return -EPIPE;
        }
        return tls__fail(s, m, msg, msglen);
    }
}

static int tls__write(void *p, const void *data, size_t len, char *msg, size_t msglen)
{
    struct tls_session *s = p;
    const unsigned char *d = data;
    while (len) {
        int m = mbedtls_ssl_write(&s->ssl, d, len);
        if (m < 0)
            return tls__fail(s, m, msg, msglen); /* the memory BIO never wants */
        d += m;
        len -= (size_t)m;
    }
    return 0;
}

static size_t tls__output(void *p, const char **data)
{
    struct tls_session *s = p;
    *data = s->out.data;
    return s->out.len;
}

static void tls__consume(void *p, size_t n)
{
    struct tls_session *s = p;
    sodium_memzero(s->out.data, n);
    al_buf_consume(&s->out, n);
}

static const struct al_http_tls_ops tls__ops = {
    .session_new = tls__session_new,
    .session_free = tls__session_free,
    .feed = tls__feed,
    .handshake = tls__handshake,
    .read = tls__read,
    .write = tls__write,
    .output = tls__output,
    .consume = tls__consume,
};

/* ---- the provider -------------------------------------------------------------------- */

void al_http_tls_client_free(struct al_http_tls *t)
{
    if (!t)
        return;
    struct tls_provider *p = t->provider;
    mbedtls_ssl_config_free(&p->conf);
    mbedtls_x509_crt_free(&p->roots);
    mbedtls_x509_crt_free(&p->own);
    mbedtls_pk_free(&p->key);
    free(p);
}

/* A private CA's certificates say what each is for: one without extendedKeyUsage would pass
 * mbedtls's usage check (which tests the extension only where it exists). */
static int tls__verify(void *ctx, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
    (void)ctx;
    if (depth == 0 && !mbedtls_x509_crt_has_ext_type(crt, MBEDTLS_X509_EXT_EXTENDED_KEY_USAGE))
        *flags |= MBEDTLS_X509_BADCERT_EXT_KEY_USAGE;
    return 0;
}

static int tls__provider_new(struct tls_provider **out, struct al_error *err)
{
    pthread_once(&tls__once, tls__init);
    if (tls__init_rc)
        return al_error_set(err, tls__init_rc,
                            "cannot initialise the TLS library (libsodium or PSA crypto): no "
                            "entropy source?");
    struct tls_provider *p = *out = calloc(1, sizeof *p);
    if (!p)
        return al_error_set(err, -ENOMEM, "out of memory");
    p->pub.ops = &tls__ops;
    p->pub.provider = p;
    mbedtls_ssl_config_init(&p->conf);
    mbedtls_x509_crt_init(&p->roots);
    mbedtls_x509_crt_init(&p->own);
    mbedtls_pk_init(&p->key);
    return 0;
}

/* Roots from a file or memory: 0, or the error set. */
static int tls__load_roots(struct tls_provider *p, const char *file, const char *pem,
                           struct al_error *err)
{
    int m = pem ? mbedtls_x509_crt_parse(&p->roots, (const unsigned char *)pem, strlen(pem) + 1)
                : mbedtls_x509_crt_parse_file(&p->roots, file);
    /* A positive result counts certificates that could not be parsed: fine if some could. */
    if (m >= 0 && p->roots.raw.len != 0)
        return 0;
    char e[200] = "no certificate could be parsed";
    if (m < 0)
        tls__strerror(m, e, sizeof e);
    return al_error_set(err, pem ? -EINVAL : -ENOENT, "cannot load the trusted roots from %s: %s",
                        pem ? "the PEM given" : file, e);
}

/* The certificate presented to peers and its key (which must be its certificate's). */
static int tls__load_own(struct tls_provider *p, const char *cert, const char *key,
                         struct al_error *err)
{
    if (!cert || !cert[0] || !key || !key[0])
        return al_error_set(err, -EINVAL, "a certificate needs its key: give both files");
    char e[200];
    int m = mbedtls_x509_crt_parse_file(&p->own, cert);
    if (m != 0 || p->own.raw.len == 0) {
        snprintf(e, sizeof e, "no certificate could be parsed");
        if (m < 0)
            tls__strerror(m, e, sizeof e);
        return al_error_set(err, -ENOENT, "cannot load the certificate %s: %s", cert, e);
    }
    m = mbedtls_pk_parse_keyfile(&p->key, key, NULL, tls__rng, NULL);
    if (m != 0) {
        tls__strerror(m, e, sizeof e);
        return al_error_set(err, -ENOENT, "cannot load the key %s: %s (a PEM key, not encrypted)",
                            key, e);
    }
    m = mbedtls_pk_check_pair(&p->own.pk, &p->key, tls__rng, NULL);
    if (m != 0)
        return al_error_set(err, -EINVAL, "the key %s is not the key of the certificate %s", key,
                            cert);
    m = mbedtls_ssl_conf_own_cert(&p->conf, &p->own, &p->key);
    if (m != 0) {
        tls__strerror(m, e, sizeof e);
        return al_error_set(err, -EIO, "cannot use the certificate %s: %s", cert, e);
    }
    return 0;
}

/* Both ends: TLS 1.2 and 1.3, our entropy, the roots, ALPN http/1.1, no tickets. */
static int tls__configure(struct tls_provider *p, int endpoint, int authmode, struct al_error *err)
{
    int m = mbedtls_ssl_config_defaults(&p->conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM,
                                        MBEDTLS_SSL_PRESET_DEFAULT);
    if (m == 0) {
        mbedtls_ssl_conf_rng(&p->conf, tls__rng, NULL);
        mbedtls_ssl_conf_authmode(&p->conf, authmode);
        mbedtls_ssl_conf_ca_chain(&p->conf, &p->roots, NULL);
        mbedtls_ssl_conf_min_tls_version(&p->conf, MBEDTLS_SSL_VERSION_TLS1_2);
        mbedtls_ssl_conf_max_tls_version(&p->conf, MBEDTLS_SSL_VERSION_TLS1_3);
#if defined(MBEDTLS_SSL_SESSION_TICKETS)
        if (endpoint == MBEDTLS_SSL_IS_CLIENT)
            mbedtls_ssl_conf_session_tickets(&p->conf, MBEDTLS_SSL_SESSION_TICKETS_DISABLED);
#endif
        if (p->require_usage)
            mbedtls_ssl_conf_verify(&p->conf, tls__verify, NULL);
        m = mbedtls_ssl_conf_alpn_protocols(&p->conf, tls__alpn);
    }
    if (m == 0)
        return 0;
    char e[200];
    tls__strerror(m, e, sizeof e);
    return al_error_set(err, -EIO, "cannot configure TLS: %s", e);
}

int al_http_tls_client_new(const struct al_http_tls_client_opts *o, struct al_http_tls **out,
                           struct al_error *err)
{
    *out = NULL;
    struct tls_provider *p = NULL;
    int rc = tls__provider_new(&p, err);
    if (rc)
        return rc;
    p->require_usage = o && o->require_usage;
    const char *file = o && o->ca_file ? o->ca_file : AL_HTTP_TLS_DEFAULT_CA;
    rc = tls__load_roots(p, file, o ? o->ca_pem : NULL, err);
    if (!rc)
        rc = tls__configure(p, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_VERIFY_REQUIRED, err);
    if (!rc && o && (o->cert_file || o->key_file))
        rc = tls__load_own(p, o->cert_file, o->key_file, err);
    if (rc) {
        al_http_tls_client_free(&p->pub);
        return rc;
    }
    *out = &p->pub;
    return 0;
}

int al_http_tls_server_new(const struct al_http_tls_server_opts *o, struct al_http_tls **out,
                           struct al_error *err)
{
    *out = NULL;
    if (!o || !o->client_ca_file || !o->client_ca_file[0])
        return al_error_set(err, -EINVAL, "a TLS server needs the roots of its clients' CA");
    struct tls_provider *p = NULL;
    int rc = tls__provider_new(&p, err);
    if (rc)
        return rc;
    p->server = true;
    p->require_usage = true;
    rc = tls__load_roots(p, o->client_ca_file, NULL, err);
    /* Optional at the handshake: a client without a certificate still gets an HTTP answer
     * saying what it lacks (al_http_tls_session_peer). */
    if (!rc)
        rc = tls__configure(p, MBEDTLS_SSL_IS_SERVER, MBEDTLS_SSL_VERIFY_OPTIONAL, err);
    if (!rc)
        rc = tls__load_own(p, o->cert_file, o->key_file, err);
    if (rc) {
        al_http_tls_client_free(&p->pub);
        return rc;
    }
    *out = &p->pub;
    return 0;
}

void al_http_tls_session_peer(void *session, struct al_http_tls_peer *out)
{
    struct tls_session *s = session;
    memset(out, 0, sizeof *out);
    const mbedtls_x509_crt *crt = mbedtls_ssl_get_peer_cert(&s->ssl);
    if (!crt || crt->raw.len == 0) {
        snprintf(out->why, sizeof out->why, "no certificate was presented");
        return;
    }
    out->presented = true;
    for (const mbedtls_x509_name *n = &crt->subject; n; n = n->next) {
        if (MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) != 0 || n->val.len >= sizeof out->name)
            continue;
        bool ok = n->val.len > 0;
        for (size_t i = 0; i < n->val.len; i++)
            ok = ok && n->val.p[i] > 0x20 && n->val.p[i] < 0x7f;
        if (ok) {
            memcpy(out->name, n->val.p, n->val.len);
            out->name[n->val.len] = '\0';
        }
        break;
    }
    uint32_t flags = mbedtls_ssl_get_verify_result(&s->ssl);
    if (flags == 0) {
        out->verified = true;
        return;
    }
    char info[256];
    tls__verify_info(flags, info, sizeof info);
    snprintf(out->why, sizeof out->why, "%s", info[0] ? info : "it does not verify");
}
