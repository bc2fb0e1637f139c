/* common/http_tls: see http_tls.h. */
#include "http_tls.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/error.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <psa/crypto.h>

#include "buf.h"

#define TLS_MAX_IN (1024 * 1024) /* ciphertext not yet taken by mbedtls */

struct tls_provider {
    struct al_http_tls pub;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt roots;
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
    if (m == 0)
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

/* What went wrong, in words a user can act on. */
static int tls__fail(struct tls_session *s, int m, char *msg, size_t msglen)
{
    if (m == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
        uint32_t flags = mbedtls_ssl_get_verify_result(&s->ssl);
        char info[256];
        int n = mbedtls_x509_crt_verify_info(info, sizeof info, "", flags);
        if (n > 0 && info[n - 1] == '\n')
            info[--n] = '\0';
        for (char *q = info; *q; q++)
            if (*q == '\n')
                *q = ';';
        snprintf(msg, msglen,
                 "the certificate of %s does not verify: %s (is its CA in the trusted roots?)",
                 s->host, n > 0 ? info : "unknown reason");
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
    free(p);
}

int al_http_tls_client_new(const struct al_http_tls_client_opts *o, struct al_http_tls **out,
                           struct al_error *err)
{
    *out = NULL;
    pthread_once(&tls__once, tls__init);
    if (tls__init_rc)
        return al_error_set(err, tls__init_rc,
                            "cannot initialise the TLS library (libsodium or PSA crypto): no "
                            "entropy source?");
    struct tls_provider *p = calloc(1, sizeof *p);
    if (!p)
        return al_error_set(err, -ENOMEM, "out of memory");
    p->pub.ops = &tls__ops;
    p->pub.provider = p;
    mbedtls_ssl_config_init(&p->conf);
    mbedtls_x509_crt_init(&p->roots);
    const char *file = o && o->ca_file ? o->ca_file : AL_HTTP_TLS_DEFAULT_CA;
    int m = o && o->ca_pem ? mbedtls_x509_crt_parse(&p->roots, (const unsigned char *)o->ca_pem,
                                                    strlen(o->ca_pem) + 1)
                           : mbedtls_x509_crt_parse_file(&p->roots, file);
    /* A positive result counts certificates that could not be parsed: fine if some could. */
    if (m < 0 || p->roots.raw.len == 0) {
        char e[200] = "no certificate could be parsed";
        if (m < 0)
            tls__strerror(m, e, sizeof e);
        al_http_tls_client_free(&p->pub);
        return al_error_set(err, o && o->ca_pem ? -EINVAL : -ENOENT,
                            "cannot load the trusted roots from %s: %s",
                            o && o->ca_pem ? "the PEM given" : file, e);
    }
    m = mbedtls_ssl_config_defaults(&p->conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                    MBEDTLS_SSL_PRESET_DEFAULT);
    if (m == 0) {
        mbedtls_ssl_conf_rng(&p->conf, tls__rng, NULL);
        mbedtls_ssl_conf_authmode(&p->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
        mbedtls_ssl_conf_ca_chain(&p->conf, &p->roots, NULL);
        mbedtls_ssl_conf_min_tls_version(&p->conf, MBEDTLS_SSL_VERSION_TLS1_2);
        mbedtls_ssl_conf_max_tls_version(&p->conf, MBEDTLS_SSL_VERSION_TLS1_3);
#if defined(MBEDTLS_SSL_SESSION_TICKETS)
        mbedtls_ssl_conf_session_tickets(&p->conf, MBEDTLS_SSL_SESSION_TICKETS_DISABLED);
#endif
        m = mbedtls_ssl_conf_alpn_protocols(&p->conf, tls__alpn);
    }
    if (m != 0) {
        char e[200];
        tls__strerror(m, e, sizeof e);
        al_http_tls_client_free(&p->pub);
        return al_error_set(err, -EIO, "cannot configure TLS: %s", e);
    }
    *out = &p->pub;
    return 0;
}
