/* egress/intercept/tls: mbedtls configurations and the socket glue (see tls.h). */
#include "tls.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/x509_crt.h>

#include "common/buf.h"
#include "intercept.h"

#define TLS_READ_CHUNK 16384

static const char *tls__alpn[] = {"http/1.1", NULL};

static const uint16_t tls__groups[] = {
    MBEDTLS_SSL_IANA_TLS_GROUP_X25519,
    MBEDTLS_SSL_IANA_TLS_GROUP_SECP256R1,
    MBEDTLS_SSL_IANA_TLS_GROUP_SECP384R1,
    MBEDTLS_SSL_IANA_TLS_GROUP_NONE,
};

/* Toward sandboxes: our leaves are ECDSA P-256, so ECDHE-ECDSA with AEADs for 1.2. */
static const int tls__server_suites[] = {
    MBEDTLS_TLS1_3_AES_128_GCM_SHA256,
    MBEDTLS_TLS1_3_AES_256_GCM_SHA384,
    MBEDTLS_TLS1_3_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    0,
};

/* Toward upstreams. mbedtls 3.6 offers RSA-PSS (needed by TLS 1.3) in a ClientHello that also
 * offers TLS 1.2, but cannot verify an RSA-PSS ServerKeyExchange in TLS 1.2: a TLS 1.2-only
 * server with an RSA key that picks PSS (OpenSSL does) fails the handshake. The caller then
 * connects again with a TLS 1.2-only hello, which offers no PSS (reason "retry_tls12"): no
 * downgrade, since the server itself chose TLS 1.2 and mbedtls checks TLS 1.3's downgrade
 * sentinel. */
static const uint16_t tls__client_sig_algs[] = {
    MBEDTLS_TLS1_3_SIG_ECDSA_SECP256R1_SHA256, MBEDTLS_TLS1_3_SIG_ECDSA_SECP384R1_SHA384,
    MBEDTLS_TLS1_3_SIG_ECDSA_SECP521R1_SHA512, MBEDTLS_TLS1_3_SIG_RSA_PKCS1_SHA256,
    MBEDTLS_TLS1_3_SIG_RSA_PKCS1_SHA384,       MBEDTLS_TLS1_3_SIG_RSA_PKCS1_SHA512,
    MBEDTLS_TLS1_3_SIG_RSA_PSS_RSAE_SHA256,    MBEDTLS_TLS1_3_SIG_RSA_PSS_RSAE_SHA384,
    MBEDTLS_TLS1_3_SIG_RSA_PSS_RSAE_SHA512,    MBEDTLS_TLS1_3_SIG_NONE,
};

/* Toward upstreams: forward-secret AEAD suites for RSA and ECDSA certificates. */
static const int tls__client_suites[] = {
    MBEDTLS_TLS1_3_AES_128_GCM_SHA256,
    MBEDTLS_TLS1_3_AES_256_GCM_SHA384,
    MBEDTLS_TLS1_3_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    0,
};

struct intercept_tls_server {
    atomic_int refs;
    struct intercept_ca *ca;
    mbedtls_ssl_config conf;
    mbedtls_ssl_ticket_context ticket;
    bool tickets;
};

struct intercept_tls_client {
    atomic_int refs;
    mbedtls_ssl_config conf;
    mbedtls_ssl_config conf12; /* TLS 1.2 only: the retry for RSA-PSS servers (see below) */
    mbedtls_x509_crt roots;
    size_t n_roots;
};

struct intercept_tls {
    mbedtls_ssl_context ssl;
    int fd;
    bool server;
    bool hs_done;
    bool eof;
    int want;
    int sys_err;
    /* Bytes read from the socket before TLS began (the ClientHello). */
    unsigned char *pre;
    size_t pre_len, pre_off;
    /* Ciphertext the socket did not take yet. */
    struct al_buf out;
    size_t out_off;
    struct intercept_tls_server *srv;
    struct intercept_tls_client *cli;
    struct intercept_leaf *leaf;
    const char *reason;
    char error[320];
    char name[256];
    char sni[256];
    uint64_t bytes_in, bytes_out;
    bool resumed; /* a session ticket of ours was accepted */
    bool tls12_only;
    bool plain; /* no TLS at all (plain HTTP through the same engine) */
    bool cork;  /* inside mbedtls_ssl_handshake: records queue in out, one send after it */
    /* Record boundaries of what the peer sends, to see its plaintext alerts (a client that
     * rejects our certificate says so before it encrypts anything). */
    unsigned char rec_hdr[5];
    size_t rec_hdr_have, rec_left, rec_pos;
    bool rec_alert;
    int peer_alert; /* description of a plaintext fatal alert, or -1 */
};

/* The endpoint whose handshake runs on this thread (the ticket callbacks get no ssl). */
static __thread struct intercept_tls *tls__current;

/* ---- configurations -------------------------------------------------------------------- */

static int tls__sni_cb(void *p, mbedtls_ssl_context *ssl, const unsigned char *name, size_t len)
{
    (void)p;
    struct intercept_tls *t = mbedtls_ssl_get_user_data_p(ssl);
    if (!t || !t->leaf)
        return -1;
    size_t n = len < sizeof t->sni - 1 ? len : sizeof t->sni - 1;
    memcpy(t->sni, name, n);
    t->sni[n] = 0;
    /* The name decided on came from this very ClientHello; compare again anyway (case and one
     * trailing dot do not matter). */
    if (n && t->sni[n - 1] == '.')
        n--;
    if (n != strlen(t->name) || strncasecmp(t->sni, t->name, n) != 0 || memchr(name, 0, len)) {
        t->reason = "sni_mismatch";
        snprintf(t->error, sizeof t->error,
                 "the TLS library saw SNI '%.100s', the proxy decided on '%s'", t->sni, t->name);
        return -1;
    }
    return mbedtls_ssl_set_hs_own_cert(ssl, intercept_leaf_crt(t->leaf),
                                       intercept_leaf_key(t->leaf));
}

static int tls__ticket_parse(void *p_ticket, mbedtls_ssl_session *session, unsigned char *buf,
                             size_t len)
{
    int r = mbedtls_ssl_ticket_parse(p_ticket, session, buf, len);
    if (r == 0 && tls__current)
        tls__current->resumed = true;
    return r;
}

static void tls__server_free(struct intercept_tls_server *s)
{
    mbedtls_ssl_config_free(&s->conf);
    mbedtls_ssl_ticket_free(&s->ticket);
    intercept_ca_unref(s->ca);
    free(s);
}

int intercept_tls_server_new(const struct intercept_tls_server_opts *o,
                             struct intercept_tls_server **out, struct al_error *err)
{
    *out = NULL;
    int r = intercept_init(err);
    if (r < 0)
        return r;
    if (!o || !o->ca)
        return al_error_set(err, -EINVAL, "a TLS server configuration needs the sandbox's CA");
    struct intercept_tls_server *s = calloc(1, sizeof *s);
    if (!s)
        return al_error_set(err, -ENOMEM, "out of memory");
    atomic_init(&s->refs, 1);
    s->ca = intercept_ca_ref(o->ca);
    mbedtls_ssl_config_init(&s->conf);
    mbedtls_ssl_ticket_init(&s->ticket);
    int m = mbedtls_ssl_config_defaults(&s->conf, MBEDTLS_SSL_IS_SERVER,
                                        MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
    if (m == 0) {
        mbedtls_ssl_conf_rng(&s->conf, intercept_rng, NULL);
        mbedtls_ssl_conf_min_tls_version(&s->conf, MBEDTLS_SSL_VERSION_TLS1_2);
        mbedtls_ssl_conf_max_tls_version(&s->conf, o->no_tls13 ? MBEDTLS_SSL_VERSION_TLS1_2
                                                               : MBEDTLS_SSL_VERSION_TLS1_3);
        mbedtls_ssl_conf_ciphersuites(&s->conf, tls__server_suites);
        mbedtls_ssl_conf_groups(&s->conf, tls__groups);
        mbedtls_ssl_conf_sni(&s->conf, tls__sni_cb, s);
        m = mbedtls_ssl_conf_alpn_protocols(&s->conf, tls__alpn);
    }
    if (m == 0 && !o->no_tickets) {
        m = mbedtls_ssl_ticket_setup(&s->ticket, intercept_rng, NULL, MBEDTLS_CIPHER_AES_256_GCM,
                                     o->ticket_lifetime_s ? o->ticket_lifetime_s : 3600);
        if (m == 0) {
            mbedtls_ssl_conf_session_tickets_cb(&s->conf, mbedtls_ssl_ticket_write,
                                                tls__ticket_parse, &s->ticket);
            s->tickets = true;
        }
    }
#if defined(MBEDTLS_SSL_PROTO_TLS1_3) && defined(MBEDTLS_SSL_SESSION_TICKETS)
    if (m == 0 && o->no_tickets)
        mbedtls_ssl_conf_new_session_tickets(&s->conf, 0);
#endif
    if (m != 0) {
        tls__server_free(s);
        return al_error_set(err, -EIO, "cannot configure TLS toward sandboxes: %s",
                            intercept_mbedtls_strerror(m));
    }
    *out = s;
    return 0;
}

struct intercept_tls_server *intercept_tls_server_ref(struct intercept_tls_server *s)
{
    if (s)
        atomic_fetch_add(&s->refs, 1);
    return s;
}

void intercept_tls_server_unref(struct intercept_tls_server *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        tls__server_free(s);
}

struct intercept_ca *intercept_tls_server_ca(struct intercept_tls_server *s)
{
    return s->ca;
}

static void tls__client_free(struct intercept_tls_client *c)
{
    mbedtls_ssl_config_free(&c->conf);
    mbedtls_ssl_config_free(&c->conf12);
    mbedtls_x509_crt_free(&c->roots);
    free(c);
}

static int tls__client_conf(mbedtls_ssl_config *conf, mbedtls_x509_crt *roots, bool tls12)
{
    int m = mbedtls_ssl_config_defaults(conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                        MBEDTLS_SSL_PRESET_DEFAULT);
    if (m != 0)
        return m;
    mbedtls_ssl_conf_rng(conf, intercept_rng, NULL);
    mbedtls_ssl_conf_authmode(conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(conf, roots, NULL);
    mbedtls_ssl_conf_min_tls_version(conf, MBEDTLS_SSL_VERSION_TLS1_2);
    mbedtls_ssl_conf_max_tls_version(conf, tls12 ? MBEDTLS_SSL_VERSION_TLS1_2
                                                 : MBEDTLS_SSL_VERSION_TLS1_3);
    mbedtls_ssl_conf_ciphersuites(conf, tls__client_suites);
    mbedtls_ssl_conf_groups(conf, tls__groups);
    mbedtls_ssl_conf_sig_algs(conf, tls__client_sig_algs);
#if defined(MBEDTLS_SSL_SESSION_TICKETS)
    mbedtls_ssl_conf_session_tickets(conf, MBEDTLS_SSL_SESSION_TICKETS_DISABLED);
#endif
    return mbedtls_ssl_conf_alpn_protocols(conf, tls__alpn);
}

int intercept_tls_client_new(const struct intercept_tls_client_opts *o,
                             struct intercept_tls_client **out, struct al_error *err)
{
    *out = NULL;
    int r = intercept_init(err);
    if (r < 0)
        return r;
    struct intercept_tls_client *c = calloc(1, sizeof *c);
    if (!c)
        return al_error_set(err, -ENOMEM, "out of memory");
    atomic_init(&c->refs, 1);
    mbedtls_ssl_config_init(&c->conf);
    mbedtls_ssl_config_init(&c->conf12);
    mbedtls_x509_crt_init(&c->roots);
    const char *file = o && o->ca_file ? o->ca_file : INTERCEPT_TLS_DEFAULT_CA;
    int m;
    if (o && o->ca_pem)
        m = mbedtls_x509_crt_parse(&c->roots, (const unsigned char *)o->ca_pem,
                                   strlen(o->ca_pem) + 1);
    else
        m = mbedtls_x509_crt_parse_file(&c->roots, file);
    /* A positive result counts certificates that could not be parsed: fine as long as some
     * could. */
    for (mbedtls_x509_crt *x = &c->roots; x && x->raw.len; x = x->next)
        c->n_roots++;
    if (m < 0 || c->n_roots == 0) {
        tls__client_free(c);
        if (o && o->ca_pem)
            return al_error_set(err, -EINVAL,
                                "the upstream trust roots given are not PEM certificates: %s",
                                m < 0 ? intercept_mbedtls_strerror(m) : "none could be parsed");
        return al_error_set(
            err, -ENOENT,
            "cannot load the upstream trust roots from %s: %s (install ca-certificates, "
            "or set the bundle with --upstream-ca)",
            file, m < 0 ? intercept_mbedtls_strerror(m) : "no certificate could be parsed");
    }
    m = tls__client_conf(&c->conf, &c->roots, o && o->no_tls13);
    if (m == 0)
        m = tls__client_conf(&c->conf12, &c->roots, true);
    if (m != 0) {
        tls__client_free(c);
        return al_error_set(err, -EIO, "cannot configure TLS toward upstreams: %s",
                            intercept_mbedtls_strerror(m));
    }
    *out = c;
    return 0;
}

struct intercept_tls_client *intercept_tls_client_ref(struct intercept_tls_client *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

void intercept_tls_client_unref(struct intercept_tls_client *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1)
        tls__client_free(c);
}

size_t intercept_tls_client_roots(const struct intercept_tls_client *c)
{
    return c->n_roots;
}

/* ---- socket glue ------------------------------------------------------------------------ */

static size_t tls__pending(const struct intercept_tls *t)
{
    return t->out.len - t->out_off;
}

static int tls__bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    struct intercept_tls *t = ctx;
    size_t sent = 0;
    if (tls__pending(t) == 0 && !t->cork) {
        for (;;) {
            ssize_t n = send(t->fd, buf, len, MSG_NOSIGNAL);
            if (n >= 0) {
                sent = (size_t)n;
                t->bytes_out += (uint64_t)n;
                break;
            }
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOTCONN)
                break;
            t->sys_err = errno;
            return MBEDTLS_ERR_NET_SEND_FAILED;
        }
        if (sent == len)
            return (int)len;
    } else if (tls__pending(t) > 4 * INTERCEPT_TLS_OUT_HIGH) {
        t->want |= INTERCEPT_TLS_WANT_WRITE;
        return MBEDTLS_ERR_SSL_WANT_WRITE;
    }
    if (t->out_off && t->out_off == t->out.len) {
        al_buf_reset(&t->out);
        t->out_off = 0;
    }
    if (al_buf_append(&t->out, buf + sent, len - sent) < 0)
        return MBEDTLS_ERR_SSL_ALLOC_FAILED;
    t->want |= INTERCEPT_TLS_WANT_WRITE;
    return (int)len;
}

static void tls__track(struct intercept_tls *t, const unsigned char *p, size_t n)
{
    while (n) {
        if (t->rec_hdr_have < 5) {
            t->rec_hdr[t->rec_hdr_have++] = *p++;
            n--;
            if (t->rec_hdr_have == 5) {
                t->rec_left = ((size_t)t->rec_hdr[3] << 8) | t->rec_hdr[4];
                t->rec_alert = t->rec_hdr[0] == 21 && t->rec_left == 2;
                t->rec_pos = 0;
                if (t->rec_left == 0)
                    t->rec_hdr_have = 0;
            }
            continue;
        }
        size_t k = n < t->rec_left ? n : t->rec_left;
        if (t->rec_alert)
            for (size_t i = 0; i < k; i++, t->rec_pos++)
                if (t->rec_pos == 1 && t->rec_hdr[0] == 21)
                    t->peer_alert = p[i];
        p += k;
        n -= k;
        t->rec_left -= k;
        if (t->rec_left == 0)
            t->rec_hdr_have = 0;
    }
}

static int tls__bio_recv_raw(struct intercept_tls *t, unsigned char *buf, size_t len);

static int tls__bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    struct intercept_tls *t = ctx;
    int n = tls__bio_recv_raw(t, buf, len);
    if (n > 0 && !t->hs_done)
        tls__track(t, buf, (size_t)n);
    return n;
}

static int tls__bio_recv_raw(struct intercept_tls *t, unsigned char *buf, size_t len)
{
    if (t->pre_off < t->pre_len) {
        size_t n = t->pre_len - t->pre_off;
        if (n > len)
            n = len;
        memcpy(buf, t->pre + t->pre_off, n);
        t->pre_off += n;
        if (t->pre_off == t->pre_len) {
            sodium_memzero(t->pre, t->pre_len);
            free(t->pre);
            t->pre = NULL;
            t->pre_len = t->pre_off = 0;
        }
        return (int)n;
    }
    for (;;) {
        ssize_t n = recv(t->fd, buf, len, 0);
        if (n > 0) {
            t->bytes_in += (uint64_t)n;
            return (int)n;
        }
        if (n == 0) {
            t->eof = true;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            t->want |= INTERCEPT_TLS_WANT_READ;
            return MBEDTLS_ERR_SSL_WANT_READ;
        }
        t->sys_err = errno;
        return errno == ECONNRESET ? MBEDTLS_ERR_NET_CONN_RESET : MBEDTLS_ERR_NET_RECV_FAILED;
    }
}

int intercept_tls_flush(struct intercept_tls *t)
{
    while (tls__pending(t)) {
        ssize_t n = send(t->fd, t->out.data + t->out_off, tls__pending(t), MSG_NOSIGNAL);
        if (n > 0) {
            t->out_off += (size_t)n;
            t->bytes_out += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            t->want |= INTERCEPT_TLS_WANT_WRITE;
            return -EAGAIN;
        }
        t->sys_err = n < 0 ? errno : EPIPE;
        return t->sys_err == ECONNRESET ? -ECONNRESET : -EPIPE;
    }
    t->want &= ~INTERCEPT_TLS_WANT_WRITE;
    if (t->out.cap > 2 * INTERCEPT_TLS_OUT_HIGH) {
        al_buf_free(&t->out); /* ciphertext: no need to wipe */
        al_buf_init(&t->out, 0);
    } else {
        al_buf_reset(&t->out);
    }
    t->out_off = 0;
    return 0;
}

size_t intercept_tls_out_pending(const struct intercept_tls *t)
{
    return tls__pending(t);
}

static struct intercept_tls *tls__new(int fd, const char *name)
{
    struct intercept_tls *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->fd = fd;
    t->peer_alert = -1;
    mbedtls_ssl_init(&t->ssl);
    al_buf_init(&t->out, 0);
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

void intercept_tls_free(struct intercept_tls *t)
{
    if (!t)
        return;
    mbedtls_ssl_free(&t->ssl);
    /* initialised even for plain endpoints */ /* wipes keys and record buffers */
    if (t->pre) {
        sodium_memzero(t->pre, t->pre_len);
        free(t->pre);
    }
    al_buf_free(&t->out);
    intercept_leaf_unref(t->leaf);
    intercept_tls_server_unref(t->srv);
    intercept_tls_client_unref(t->cli);
    free(t);
}

int intercept_tls_fd(const struct intercept_tls *t)
{
    return t->fd;
}

int intercept_tls_accept(struct intercept_tls_server *srv, int fd, const char *name,
                         const void *prefix, size_t prefix_len, struct intercept_tls **out,
                         struct al_error *err)
{
    *out = NULL;
    struct intercept_tls *t = tls__new(fd, name);
    if (!t)
        return al_error_set(err, -ENOMEM, "out of memory");
    t->server = true;
    t->srv = intercept_tls_server_ref(srv);
    int r = intercept_ca_leaf(srv->ca, name, &t->leaf, err);
    if (r < 0) {
        intercept_tls_free(t);
        return r;
    }
    if (prefix_len) {
        if (!(t->pre = malloc(prefix_len))) {
            intercept_tls_free(t);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
        memcpy(t->pre, prefix, prefix_len);
        t->pre_len = prefix_len;
    }
    int m = mbedtls_ssl_setup(&t->ssl, &srv->conf);
    if (m != 0) {
        intercept_tls_free(t);
        return al_error_set(err, m == MBEDTLS_ERR_SSL_ALLOC_FAILED ? -ENOMEM : -EIO,
                            "cannot set up TLS toward the sandbox: %s",
                            intercept_mbedtls_strerror(m));
    }
    mbedtls_ssl_set_user_data_p(&t->ssl, t);
    mbedtls_ssl_set_bio(&t->ssl, t, tls__bio_send, tls__bio_recv, NULL);
    *out = t;
    return 0;
}

int intercept_tls_connect(struct intercept_tls_client *cli, int fd, const char *name,
                          unsigned flags, struct intercept_tls **out, struct al_error *err)
{
    *out = NULL;
    struct intercept_tls *t = tls__new(fd, name);
    if (!t)
        return al_error_set(err, -ENOMEM, "out of memory");
    t->cli = intercept_tls_client_ref(cli);
    t->tls12_only = (flags & INTERCEPT_TLS_CONNECT_TLS12) != 0;
    int m = mbedtls_ssl_setup(&t->ssl, t->tls12_only ? &cli->conf12 : &cli->conf);
    if (m == 0)
        m = mbedtls_ssl_set_hostname(&t->ssl, name);
    if (m != 0) {
        intercept_tls_free(t);
        return al_error_set(err, m == MBEDTLS_ERR_SSL_ALLOC_FAILED ? -ENOMEM : -EIO,
                            "cannot set up TLS toward %s: %s", name, intercept_mbedtls_strerror(m));
    }
    mbedtls_ssl_set_user_data_p(&t->ssl, t);
    mbedtls_ssl_set_bio(&t->ssl, t, tls__bio_send, tls__bio_recv, NULL);
    *out = t;
    return 0;
}

/* ---- operations ------------------------------------------------------------------------ */

/* Maps an mbedtls failure to an errno and a reason; fills the error text. */
static int tls__fail(struct intercept_tls *t, int m)
{
    if (!t->hs_done && t->peer_alert < 0 && t->fd >= 0 &&
        (m == MBEDTLS_ERR_NET_SEND_FAILED || m == MBEDTLS_ERR_NET_CONN_RESET ||
         m == MBEDTLS_ERR_SSL_CONN_EOF)) {
        /* The peer may have said why before it went away: look at what it sent. */
        unsigned char junk[4096];
        ssize_t n = recv(t->fd, junk, sizeof junk, MSG_DONTWAIT);
        if (n > 0)
            tls__track(t, junk, (size_t)n);
    }
    if (!t->reason && t->peer_alert >= 0 && m != MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
        t->reason = "peer_alert";
        const char *what;
        switch (t->peer_alert) {
        case 42:
            what = "bad_certificate";
            break;
        case 43:
            what = "unsupported_certificate";
            break;
        case 45:
            what = "certificate_expired";
            break;
        case 46:
            what = "certificate_unknown";
            break;
        case 48:
            what = "unknown_ca";
            break;
        case 40:
            what = "handshake_failure";
            break;
        case 70:
            what = "protocol_version";
            break;
        case 112:
            what = "unrecognized_name";
            break;
        case 120:
            what = "no_application_protocol";
            break;
        default:
            what = "alert";
            break;
        }
        bool cert = t->peer_alert >= 42 && t->peer_alert <= 48;
        snprintf(t->error, sizeof t->error, "the %s sent the fatal alert %s (%d)%s",
                 t->server ? "sandbox" : "upstream", what, t->peer_alert,
                 cert && t->server
                     ? ": it does not trust the certificate of its airlock CA (is the CA "
                       "installed in the trust store the program uses?)"
                     : "");
        return -EPROTO;
    }
    if (m == MBEDTLS_ERR_SSL_CONN_EOF || (t->eof && m != MBEDTLS_ERR_X509_CERT_VERIFY_FAILED)) {
        if (!t->reason)
            t->reason = "peer_closed";
        snprintf(t->error, sizeof t->error, "the %s closed the connection %s",
                 t->server ? "sandbox" : "upstream",
                 t->hs_done ? "without close_notify" : "during the TLS handshake");
        return -EPIPE;
    }
    if (m == MBEDTLS_ERR_NET_CONN_RESET || m == MBEDTLS_ERR_NET_RECV_FAILED ||
        m == MBEDTLS_ERR_NET_SEND_FAILED) {
        t->reason = t->sys_err == ECONNRESET || m == MBEDTLS_ERR_NET_CONN_RESET ? "peer_reset"
                                                                                : "socket_error";
        snprintf(t->error, sizeof t->error, "socket error: %s",
                 strerror(t->sys_err ? t->sys_err : ECONNRESET));
        return t->sys_err == ECONNRESET || m == MBEDTLS_ERR_NET_CONN_RESET ? -ECONNRESET : -EIO;
    }
    if (m == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
        t->reason = "certificate_verify_failed";
        uint32_t flags = mbedtls_ssl_get_verify_result(&t->ssl);
        char info[256];
        int n = mbedtls_x509_crt_verify_info(info, sizeof info, "", flags);
        if (n > 0 && info[n - 1] == '\n')
            info[n - 1] = 0;
        for (char *p = info; *p; p++)
            if (*p == '\n')
                *p = ';';
        snprintf(t->error, sizeof t->error, "the certificate of %s does not verify: %s", t->name,
                 n > 0 ? info : "unknown reason");
        return -EPROTO;
    }
    if (!t->reason && !t->server && !t->hs_done && m == MBEDTLS_ERR_SSL_ILLEGAL_PARAMETER &&
        mbedtls_ssl_get_version_number(&t->ssl) == MBEDTLS_SSL_VERSION_TLS1_2 && !t->tls12_only) {
        t->reason = "retry_tls12";
        snprintf(t->error, sizeof t->error,
                 "%s speaks TLS 1.2 only and signed with RSA-PSS: connect again with "
                 "INTERCEPT_TLS_CONNECT_TLS12",
                 t->name);
    }
    if (!t->reason) {
        switch (m) {
        case MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE:
            t->reason = "peer_alert";
            break;
        case MBEDTLS_ERR_SSL_NO_APPLICATION_PROTOCOL:
            t->reason = "no_application_protocol";
            break;
        case MBEDTLS_ERR_SSL_BAD_PROTOCOL_VERSION:
            t->reason = "protocol_version";
            break;
        case MBEDTLS_ERR_SSL_ALLOC_FAILED:
            t->reason = "out_of_memory";
            break;
        default:
            t->reason = t->hs_done ? "tls_error" : "handshake_failed";
            break;
        }
    }
    if (!t->error[0]) {
        const char *what = m == MBEDTLS_ERR_SSL_FATAL_ALERT_MESSAGE
                               ? (t->server ? "the sandbox refused the session (fatal alert): does "
                                              "it trust its airlock CA?"
                                            : "the upstream refused the session (fatal alert)")
                               : intercept_mbedtls_strerror(m);
        snprintf(t->error, sizeof t->error, "%s", what);
    }
    return m == MBEDTLS_ERR_SSL_ALLOC_FAILED ? -ENOMEM : -EPROTO;
}

int intercept_tls_plain(int fd, const void *prefix, size_t prefix_len, struct intercept_tls **out)
{
    *out = NULL;
    struct intercept_tls *t = tls__new(fd, "");
    if (!t)
        return -ENOMEM;
    t->plain = true;
    t->hs_done = true;
    if (prefix_len) {
        if (!(t->pre = malloc(prefix_len))) {
            intercept_tls_free(t);
            return -ENOMEM;
        }
        memcpy(t->pre, prefix, prefix_len);
        t->pre_len = prefix_len;
    }
    *out = t;
    return 0;
}

int intercept_tls_handshake(struct intercept_tls *t)
{
    if (t->hs_done)
        return 0;
    t->want &= INTERCEPT_TLS_WANT_WRITE;
    tls__current = t;
    /* The records of a flight (ServerHello to Finished: five or six) leave in one send. */
    t->cork = true;
    int m = mbedtls_ssl_handshake(&t->ssl);
    t->cork = false;
    tls__current = NULL;
    int f = intercept_tls_flush(t);
    if (f < 0 && f != -EAGAIN &&
        (m == 0 || m == MBEDTLS_ERR_SSL_WANT_READ || m == MBEDTLS_ERR_SSL_WANT_WRITE))
        return tls__fail(t, MBEDTLS_ERR_NET_SEND_FAILED); /* as if mbedtls had sent it itself */
    if (m == 0) {
        t->hs_done = true;
        t->want &= ~INTERCEPT_TLS_WANT_READ;
        return f == -EAGAIN ? 0 : f;
    }
    if (m == MBEDTLS_ERR_SSL_WANT_READ || m == MBEDTLS_ERR_SSL_WANT_WRITE) {
        if (m == MBEDTLS_ERR_SSL_WANT_READ)
            t->want |= INTERCEPT_TLS_WANT_READ;
        return -EAGAIN;
    }
    return tls__fail(t, m);
}

bool intercept_tls_handshake_done(const struct intercept_tls *t)
{
    return t->hs_done;
}

int intercept_tls_want(const struct intercept_tls *t)
{
    return t->want | (tls__pending(t) ? INTERCEPT_TLS_WANT_WRITE : 0);
}

ssize_t intercept_tls_read(struct intercept_tls *t, void *buf, size_t len)
{
    t->want &= INTERCEPT_TLS_WANT_WRITE;
    if (t->plain) {
        int n = tls__bio_recv_raw(t, buf, len);
        if (n > 0)
            return n;
        if (n == 0)
            return 0; /* EOF is a clean end without TLS */
        if (n == MBEDTLS_ERR_SSL_WANT_READ)
            return -EAGAIN;
        t->reason = "peer_reset";
        snprintf(t->error, sizeof t->error, "socket error: %s",
                 strerror(t->sys_err ? t->sys_err : EIO));
        return -ECONNRESET;
    }
    for (;;) {
        int m = mbedtls_ssl_read(&t->ssl, buf, len);
        if (tls__pending(t)) {
            int f = intercept_tls_flush(t);
            if (f < 0 && f != -EAGAIN)
                return f;
        }
        if (m > 0)
            return m;
        if (m == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY)
            return 0;
        if (m == 0) {
            t->reason = "peer_closed";
            snprintf(t->error, sizeof t->error, "the %s closed the connection without close_notify",
                     t->server ? "sandbox" : "upstream");
            return -EPIPE;
        }
#ifdef MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET
        if (m == MBEDTLS_ERR_SSL_RECEIVED_NEW_SESSION_TICKET)
            continue;
#endif
        if (m == MBEDTLS_ERR_SSL_WANT_READ || m == MBEDTLS_ERR_SSL_WANT_WRITE) {
            if (m == MBEDTLS_ERR_SSL_WANT_READ)
                t->want |= INTERCEPT_TLS_WANT_READ;
            return -EAGAIN;
        }
        return tls__fail(t, m);
    }
}

bool intercept_tls_in_pending(const struct intercept_tls *t)
{
    if (t->plain)
        return t->pre_off < t->pre_len;
    return t->pre_off < t->pre_len || mbedtls_ssl_get_bytes_avail(&t->ssl) > 0 ||
           mbedtls_ssl_check_pending(&t->ssl);
}

ssize_t intercept_tls_write(struct intercept_tls *t, const void *buf, size_t len)
{
    if (tls__pending(t) >= INTERCEPT_TLS_OUT_HIGH) {
        int f = intercept_tls_flush(t);
        if (f < 0 && f != -EAGAIN)
            return f;
        if (tls__pending(t) >= INTERCEPT_TLS_OUT_HIGH)
            return -EAGAIN;
    }
    if (len == 0)
        return 0;
    if (t->plain) {
        int n = tls__bio_send(t, buf, len);
        if (n == MBEDTLS_ERR_SSL_WANT_WRITE)
            return -EAGAIN;
        return n < 0 ? (t->sys_err == ECONNRESET ? -ECONNRESET : -EPIPE) : n;
    }
    int m = mbedtls_ssl_write(&t->ssl, buf, len);
    if (m > 0) {
        int f = tls__pending(t) ? intercept_tls_flush(t) : 0;
        if (f < 0 && f != -EAGAIN)
            return f;
        return m;
    }
    if (m == MBEDTLS_ERR_SSL_WANT_READ || m == MBEDTLS_ERR_SSL_WANT_WRITE) {
        if (m == MBEDTLS_ERR_SSL_WANT_READ)
            t->want |= INTERCEPT_TLS_WANT_READ;
        return -EAGAIN;
    }
    return tls__fail(t, m);
}

int intercept_tls_close_notify(struct intercept_tls *t)
{
    if (t->plain)
        return intercept_tls_flush(t);
    int m = mbedtls_ssl_close_notify(&t->ssl);
    if (m != 0 && m != MBEDTLS_ERR_SSL_WANT_WRITE && m != MBEDTLS_ERR_SSL_WANT_READ)
        return tls__fail(t, m);
    return intercept_tls_flush(t);
}

int intercept_tls_send_alert(struct intercept_tls *t, unsigned char description)
{
    if (t->plain)
        return 0;
    int m = mbedtls_ssl_send_alert_message(&t->ssl, MBEDTLS_SSL_ALERT_LEVEL_FATAL, description);
    if (m != 0 && m != MBEDTLS_ERR_SSL_WANT_WRITE)
        return tls__fail(t, m);
    return intercept_tls_flush(t);
}

const char *intercept_tls_reason(const struct intercept_tls *t)
{
    return t->reason ? t->reason : "";
}

const char *intercept_tls_error(const struct intercept_tls *t)
{
    return t->error;
}

const char *intercept_tls_version(const struct intercept_tls *t)
{
    if (t->plain)
        return "none";
    return mbedtls_ssl_get_version(&t->ssl);
}

const char *intercept_tls_ciphersuite(const struct intercept_tls *t)
{
    if (t->plain)
        return "";
    return mbedtls_ssl_get_ciphersuite(&t->ssl);
}

const char *intercept_tls_alpn(const struct intercept_tls *t)
{
    if (t->plain)
        return NULL;
    return mbedtls_ssl_get_alpn_protocol(&t->ssl);
}

bool intercept_tls_resumed(const struct intercept_tls *t)
{
    return t->resumed;
}

const char *intercept_tls_sni(const struct intercept_tls *t)
{
    return t->sni;
}

uint64_t intercept_tls_bytes_in(const struct intercept_tls *t)
{
    return t->bytes_in;
}

uint64_t intercept_tls_bytes_out(const struct intercept_tls *t)
{
    return t->bytes_out;
}
