/* controlplane/webhooks: see webhooks.h. */
#include "webhooks.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/http.h"
#include "common/http_head.h"
#include "common/http_tls.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "events.h"
#include "policy/policy.h"
#include "store.h"

#define WH_KEY_FILE   "webhooks.key"
#define WH_URL_MAX    2047
#define WH_NAME_MAX   256
#define WH_SECRET_MIN 16
#define WH_SECRET_MAX 256
#define WH_LIMIT_MAX  100
#define WH_ERROR_MAX  240
#define WH_AD_PREFIX  "airlock-webhook-secret-v1"
#define WH_SEALED_EXTRA \
    (crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES)

/* One event waiting for (or between) attempts. */
struct wh_item {
    struct wh_item *next;
    char event_id[40];
    char type[48];
    unsigned attempts;
    uint64_t due_ns; /* monotonic: not before */
    size_t len;
    char body[];
};

struct wh {
    struct cp_webhooks *W;
    struct wh *next;
    char id[37];
    char key_id[32];
    uint64_t created_ns;
    json_t *
        doc; /* the E2B Webhook without secret: id, teamID, name, createdAt, enabled, url, events */
    uint64_t mask;
    bool enabled;
    struct cp_wh_url url;
    unsigned char *secret; /* sodium_malloc */
    size_t secret_len;
    struct wh_item *head, *tail;
    size_t queued;
    /* The attempt in flight. */
    struct wh_item *cur;
    uv_getaddrinfo_t *gai; /* resolving (its data is NULLed when abandoned) */
    struct al_http_creq *creq;
    uv_timer_t timer; /* the next attempt's due time, then the attempt's bound */
    bool timer_for_attempt;
    int status;
    uint64_t started_ns;
    char delivery_id[37];
    char addr[INET6_ADDRSTRLEN];
    bool closing;
};

struct cp_webhooks {
    struct cp *cp;
    struct wh *list;
    struct al_http_tls *tls;
    char tls_error[256];
    unsigned char key[crypto_aead_xchacha20poly1305_ietf_KEYBYTES];
    bool stopping;
};

/* ---- pure parts --------------------------------------------------------------------------- */

int cp_wh_url_parse(const char *url, bool allow_http, struct cp_wh_url *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    size_t n = strlen(url);
    if (n == 0 || n > WH_URL_MAX)
        return al_error_set(err, -EINVAL, "url: 1 to %d bytes", WH_URL_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)url[i] <= 0x20 || url[i] == 0x7f)
            return al_error_set(err, -EINVAL,
                                "url: no spaces or control characters (percent-encode them)");
    /* The request-target parser of every HTTP component reads it: an absolute-form target is
     * exactly scheme://authority/path?query, with the authority's refusals (userinfo, a bad
     * host or port) said the same way everywhere. */
    struct al_http_target t;
    const char *why = NULL;
    if (al_http_target_parse(url, n, 0, &t, &why) < 0) {
        if (strcmp(why, "fragment_in_target") == 0)
            return al_error_set(err, -EINVAL, "url: no fragment (#...)");
        if (strcmp(why, "userinfo_in_authority") == 0)
            return al_error_set(err, -EINVAL, "url: no user name or password (user@host)");
        if (strcmp(why, "invalid_target") == 0)
            return al_error_set(err, -EINVAL, "url: must be an https:// URL");
        return al_error_set(err, -EINVAL, "url: %s", al_http_target_message(why));
    }
    if (t.form != AL_HTTP_TARGET_ABSOLUTE)
        return al_error_set(err, -EINVAL, "url: must be an https:// URL");
    if (!t.https && !allow_http)
        return al_error_set(err, -EINVAL,
                            "url: must be https:// (this airlockd does not allow http:// "
                            "webhooks: webhooks.allow_http)");
    out->tls = t.https;
    out->port = t.authority.has_port ? t.authority.port : out->tls ? 443 : 80;
    size_t host_len;
    const char *host = al_http_authority_host(&t.authority, &host_len);
    struct policy_host h;
    struct al_error herr = {0};
    if (policy_host_canon(host, host_len, &h, &herr))
        return al_error_set(err, -EINVAL, "url: the host: %s", al_error_str(&herr));
    snprintf(out->host, sizeof out->host, "%s", h.text);
    out->host_is_addr = h.kind == POLICY_HOST_ADDR;
    bool v6 = out->host_is_addr && h.addr.family == AF_INET6;
    snprintf(out->target, sizeof out->target, "%s://%s%s%s:%d", out->tls ? "https" : "http",
             v6 ? "[" : "", out->host, v6 ? "]" : "", out->port);
    /* fits: url is at most WH_URL_MAX bytes */
    return al_http_target_origin(&t, out->path, sizeof out->path) < 0
               ? al_error_set(err, -EINVAL, "url: the path is too long")
               : 0;
}

int cp_wh_addr_check(const struct sockaddr *sa, bool allow_private, char *why, size_t len)
{
    struct policy_addr a;
    if (policy_addr_from_sockaddr(sa, &a)) {
        snprintf(why, len, "not an IPv4 or IPv6 address");
        return -EACCES;
    }
    struct policy_addr_info info;
    policy_addr_classify(&a, &info);
    if (!info.internal || allow_private)
        return 0;
    char text[64];
    snprintf(why, len, "%s is %s", policy_addr_format(&a, text, sizeof text), info.reason);
    return -EACCES;
}

void cp_wh_sign_e2b(const void *secret, size_t slen, const void *body, size_t blen, char *out)
{
    crypto_hash_sha256_state st;
    unsigned char d[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, secret, slen);
    crypto_hash_sha256_update(&st, body, blen);
    crypto_hash_sha256_final(&st, d);
    sodium_bin2base64(out, 44, d, sizeof d, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

void cp_wh_sign(const void *secret, size_t slen, uint64_t timestamp, const void *body, size_t blen,
                char *out)
{
    crypto_auth_hmacsha256_state st;
    unsigned char d[crypto_auth_hmacsha256_BYTES];
    char ts[24];
    int n = snprintf(ts, sizeof ts, "%llu.", (unsigned long long)timestamp);
    crypto_auth_hmacsha256_init(&st, secret, slen);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)ts, (size_t)n);
    crypto_auth_hmacsha256_update(&st, body, blen);
    crypto_auth_hmacsha256_final(&st, d);
    memcpy(out, "v1=", 3);
    sodium_bin2hex(out + 3, 65, d, sizeof d);
    sodium_memzero(&st, sizeof st);
}

uint64_t cp_wh_backoff_ms(uint64_t base, uint64_t max, unsigned n, uint32_t r)
{
    uint64_t d = base ? base : 1;
    for (unsigned i = 1; i < n && d < max; i++)
        d *= 2;
    if (d > max)
        d = max;
    uint64_t half = d / 2;
    return d - half + (half ? (uint64_t)r % (half + 1) : 0);
}

/* ---- the sealing key and secrets ------------------------------------------------------------ */

static int wh__key_load(struct cp_webhooks *W, struct al_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", W->cp->cfg.state_dir, WH_KEY_FILE);
    struct al_error kerr = {0};
    int rc = al_key_file(path, W->key, sizeof W->key, true, &kerr);
    if (rc == -EINVAL)
        return al_error_set(err, rc,
                            "%s: it is not the webhook sealing key: restore it, or delete it "
                            "and register the webhooks again",
                            al_error_str(&kerr));
    if (rc < 0)
        return al_error_set(err, rc, "%s", al_error_str(&kerr));
    return 0;
}

static void wh__ad(const char *id, unsigned char *ad, size_t *adl)
{
    size_t p = sizeof WH_AD_PREFIX, il = strlen(id);
    memcpy(ad, WH_AD_PREFIX, p); /* with its NUL */
    memcpy(ad + p, id, il);
    *adl = p + il;
}

/* nonce || ciphertext of the secret, bound to the webhook's id. out: len + WH_SEALED_EXTRA. */
static void wh__seal(const struct cp_webhooks *W, const char *id, const void *secret, size_t len,
                     unsigned char *out)
{
    unsigned char ad[sizeof WH_AD_PREFIX + 40];
    size_t adl;
    wh__ad(id, ad, &adl);
    randombytes_buf(out, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    unsigned long long cl;
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
                                               &cl, secret, len, ad, adl, NULL, out, W->key);
}

/* The secret into sodium_malloc memory (*out, *len), or -EBADMSG. */
static int wh__unseal(const struct cp_webhooks *W, const char *id, const unsigned char *in,
                      size_t inl, unsigned char **out, size_t *len)
{
    if (inl <= WH_SEALED_EXTRA || inl > WH_SECRET_MAX + WH_SEALED_EXTRA)
        return -EBADMSG;
    unsigned char ad[sizeof WH_AD_PREFIX + 40];
    size_t adl;
    wh__ad(id, ad, &adl);
    size_t n = inl - WH_SEALED_EXTRA;
    unsigned char *s = sodium_malloc(n);
    if (!s)
        return -ENOMEM;
    unsigned long long ml;
    const unsigned char *nonce = in;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            s, &ml, NULL, in + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
            inl - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, ad, adl, nonce, W->key)) {
        sodium_free(s);
        return -EBADMSG;
    }
    *out = s;
    *len = (size_t)ml;
    return 0;
}

/* ---- the registry ---------------------------------------------------------------------------- */

static uint64_t wh__mask_of(const json_t *events)
{
    uint64_t m = 0;
    size_t i;
    json_t *v;
    json_array_foreach(events, i, v)
    {
        enum cp_event_type t;
        if (json_is_string(v) && cp_event_type_parse(json_string_value(v), &t) == 0)
            m |= 1ull << t;
    }
    return m;
}

static struct wh *wh__find(struct cp_webhooks *W, const char *id, const char *key_id)
{
    for (struct wh *w = W->list; w; w = w->next)
        if (strcmp(w->id, id) == 0 && (!key_id || strcmp(w->key_id, key_id) == 0))
            return w;
    return NULL;
}

/* Takes doc's values into w (the URL was checked when it was stored). */
static int wh__apply(struct wh *w, json_t *doc)
{
    struct al_error err = {0};
    struct cp_wh_url u;
    const char *url = json_string_value(json_object_get(doc, "url"));
    /* allow_http true: an operator who turned http off later sees its attempts refused, the
     * registration is not lost. */
    if (!url || cp_wh_url_parse(url, true, &u, &err))
        return -EINVAL;
    json_decref(w->doc);
    w->doc = json_incref(doc);
    w->url = u;
    w->mask = wh__mask_of(json_object_get(doc, "events"));
    w->enabled = json_is_true(json_object_get(doc, "enabled"));
    return 0;
}

static void wh__item_free(struct wh_item *it)
{
    free(it);
}

static void wh__timer_closed(uv_handle_t *h)
{
    struct wh *w = h->data;
    for (struct wh_item *it = w->head, *next; it; it = next) {
        next = it->next;
        wh__item_free(it);
    }
    wh__item_free(w->cur);
    json_decref(w->doc);
    if (w->secret)
        sodium_free(w->secret);
    free(w);
}

static void wh__abandon_attempt(struct wh *w);

/* Unlinks w and frees it once its timer is closed. */
static void wh__destroy(struct wh *w)
{
    struct cp_webhooks *W = w->W;
    for (struct wh **p = &W->list; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->closing = true;
    wh__abandon_attempt(w);
    uv_close((uv_handle_t *)&w->timer, wh__timer_closed);
}

static struct wh *wh__new(struct cp_webhooks *W, const char *id, const char *key_id,
                          uint64_t created_ns)
{
    struct wh *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->W = W;
    snprintf(w->id, sizeof w->id, "%s", id);
    snprintf(w->key_id, sizeof w->key_id, "%s", key_id);
    w->created_ns = created_ns;
    uv_timer_init(W->cp->loop, &w->timer);
    w->timer.data = w;
    return w;
}

static int wh__load_one(const char *id, const char *key_id, uint64_t created_ns, const json_t *doc,
                        const void *secret, size_t secret_len, void *arg)
{
    struct cp_webhooks *W = arg;
    struct wh *w = wh__new(W, id, key_id, created_ns);
    if (!w)
        return -ENOMEM;
    int rc = wh__unseal(W, id, secret, secret_len, &w->secret, &w->secret_len);
    if (!rc)
        rc = wh__apply(w, (json_t *)doc);
    if (rc) {
        al_warn("webhook %s: %s: it is not loaded (delete it and register it again)", id,
                rc == -EBADMSG ? "its secret does not open with " WH_KEY_FILE
                               : "its registration is malformed");
        w->next = NULL;
        uv_close((uv_handle_t *)&w->timer, wh__timer_closed);
        return 0;
    }
    w->next = W->list;
    W->list = w;
    return 0;
}

/* ---- deliveries ------------------------------------------------------------------------------ */

static void wh__pump(struct wh *w);

/* One attempt's record in the history. */
static void wh__record(struct wh *w, const struct wh_item *it, const char *outcome, int status,
                       const char *error)
{
    struct cp *cp = w->W->cp;
    uint64_t now = al_wall_ns();
    char ts[40];
    al_time_rfc3339(ts, sizeof ts, now);
    char id[37];
    if (w->delivery_id[0] && it == w->cur)
        snprintf(id, sizeof id, "%s", w->delivery_id);
    else
        al_uuid_v4(id);
    json_t *d = json_pack("{s:s,s:s,s:s,s:s,s:i,s:s,s:s}", "id", id, "webhookId", w->id, "eventId",
                          it->event_id, "eventType", it->type, "attempt", (int)it->attempts,
                          "timestamp", ts, "outcome", outcome);
    if (!d)
        return;
    json_object_set_new(d, "status", status > 0 ? json_integer(status) : json_null());
    json_object_set_new(d, "error", error && *error ? json_string(error) : json_null());
    if (w->addr[0] && it == w->cur)
        json_object_set_new(d, "address", json_string(w->addr));
    if (w->started_ns && it == w->cur)
        json_object_set_new(d, "durationMs",
                            json_integer((json_int_t)((al_now_ns() - w->started_ns) / 1000000)));
    char *doc = al_json_dump(d);
    json_decref(d);
    struct al_error err = {0};
    if (!doc || cp_store_whd_add(cp->store, w->id, now, outcome, doc,
                                 (uint64_t)cp->cfg.webhooks_history, &err))
        al_warn("webhook %s: its %s delivery of event %s was not recorded: %s", w->id, outcome,
                it->event_id, doc ? al_error_str(&err) : "out of memory");
    free(doc);
}

static void wh__gai_done(uv_getaddrinfo_t *req, int status, struct addrinfo *res);

/* Ends the attempt in flight without an outcome (deleted, disabled, stopping). */
static void wh__abandon_attempt(struct wh *w)
{
    if (w->gai) {
        w->gai->data = NULL; /* its callback frees it */
        uv_cancel((uv_req_t *)w->gai);
        w->gai = NULL;
    }
    if (w->creq) {
        struct al_http_creq *c = w->creq;
        w->creq = NULL;
        al_http_creq_cancel(c); /* its on_done sees w->creq == NULL: ignored */
    }
    uv_timer_stop(&w->timer);
    w->timer_for_attempt = false;
}

/* The attempt's end: delivered, or retried later, or given up. */
static void wh__attempt_end(struct wh *w, bool ok, int status, const char *error)
{
    struct cp *cp = w->W->cp;
    struct wh_item *it = w->cur;
    uv_timer_stop(&w->timer);
    w->timer_for_attempt = false;
    if (ok) {
        wh__record(w, it, "delivered", status, NULL);
        wh__item_free(it);
    } else if (it->attempts < (unsigned)cp->cfg.webhooks_attempts) {
        uint64_t wait =
            cp_wh_backoff_ms(cp->cfg.webhooks_backoff_ms, cp->cfg.webhooks_backoff_max_ms,
                             it->attempts, randombytes_random());
        char why[WH_ERROR_MAX + 64];
        snprintf(why, sizeof why, "%s (attempt %u of %lld; the next in %llu ms)", error,
                 it->attempts, (long long)cp->cfg.webhooks_attempts, (unsigned long long)wait);
        wh__record(w, it, "retrying", status, why);
        it->due_ns = al_now_ns() + wait * 1000000ull;
        /* Back at the head: events go out in order. */
        it->next = w->head;
        w->head = it;
        if (!w->tail)
            w->tail = it;
        w->queued++;
    } else {
        wh__record(w, it, "failed", status, error);
        al_warn("webhook %s: event %s not delivered after %u attempts: %s", w->id, it->event_id,
                it->attempts, error);
        wh__item_free(it);
    }
    w->cur = NULL;
    w->delivery_id[0] = '\0';
    w->addr[0] = '\0';
    w->started_ns = 0;
    w->status = 0;
    wh__pump(w);
}

static int wh__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    struct wh *w = arg;
    w->status = status;
    return 0;
}

static int wh__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    /* The answer's body means nothing to us: read (so the connection ends cleanly) and
     * dropped. The attempt's timer bounds how long it may take. */
    (void)c;
    (void)data;
    (void)len;
    (void)arg;
    return 0;
}

static void wh__on_done(struct al_http_creq *c, int err, void *arg)
{
    struct wh *w = arg;
    if (w->creq != c)
        return; /* abandoned */
    w->creq = NULL;
    char msg[WH_ERROR_MAX];
    int st = w->status;
    if (st >= 200 && st < 300) {
        wh__attempt_end(w, true, st, NULL);
        return;
    }
    if (st >= 300 && st < 400)
        snprintf(msg, sizeof msg, "answered %d: redirects are not followed", st);
    else if (st)
        snprintf(msg, sizeof msg, "answered %d", st);
    else
        snprintf(msg, sizeof msg, "%s",
                 err == -ECANCELED
                     ? "no complete answer in time"
                     : (*al_http_creq_strerror(c) ? al_http_creq_strerror(c) : strerror(-err)));
    wh__attempt_end(w, false, st, msg);
}

static void wh__attempt_timeout(uv_timer_t *t)
{
    struct wh *w = t->data;
    w->timer_for_attempt = false;
    char msg[WH_ERROR_MAX];
    snprintf(msg, sizeof msg, "no complete answer within %llu ms (webhooks.timeout)",
             (unsigned long long)w->W->cp->cfg.webhooks_timeout_ms);
    if (w->gai) {
        w->gai->data = NULL;
        uv_cancel((uv_req_t *)w->gai);
        w->gai = NULL;
    }
    if (w->creq) {
        struct al_http_creq *c = w->creq;
        w->creq = NULL;
        al_http_creq_cancel(c);
    }
    wh__attempt_end(w, false, w->status, msg);
}

/* The address is known and allowed: sign and send. */
static void wh__send(struct wh *w, const struct sockaddr *sa)
{
    struct cp_webhooks *W = w->W;
    struct wh_item *it = w->cur;
    const void *addr = sa->sa_family == AF_INET
                           ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
                           : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
    inet_ntop(sa->sa_family, addr, w->addr, sizeof w->addr);
    if (w->url.tls && !W->tls) {
        char msg[WH_ERROR_MAX];
        snprintf(msg, sizeof msg, "no TLS roots to verify https webhooks with: %s", W->tls_error);
        wh__attempt_end(w, false, 0, msg);
        return;
    }
    uint64_t ts = al_wall_ns() / 1000000000ull;
    char e2b[48], sig[72], tss[24];
    cp_wh_sign_e2b(w->secret, w->secret_len, it->body, it->len, e2b);
    cp_wh_sign(w->secret, w->secret_len, ts, it->body, it->len, sig);
    snprintf(tss, sizeof tss, "%llu", (unsigned long long)ts);
    struct al_http_header h[] = {
        {"Content-Type", "application/json"},
        {"User-Agent", "airlock-webhooks/1"},
        {"e2b-webhook-id", w->id},
        {"e2b-delivery-id", w->delivery_id},
        {"e2b-signature-version", "v1"},
        {"e2b-signature", e2b},
        {"airlock-timestamp", tss},
        {"airlock-signature", sig},
    };
    struct al_http_creq_opts o = {
        .target = w->url.target,
        .method = "POST",
        .path = w->url.path,
        .headers = h,
        .n_headers = sizeof h / sizeof h[0],
        .body = it->body,
        .body_len = it->len,
        .timeout_ms = (uint32_t)W->cp->cfg.webhooks_timeout_ms,
        .on_response = wh__on_response,
        .on_data = wh__on_data,
        .on_done = wh__on_done,
        .arg = w,
        .tls = w->url.tls ? W->tls : NULL,
        .connect_addr = sa,
    };
    int rc = al_http_creq_start(W->cp->loop, &o, &w->creq);
    if (rc) {
        w->creq = NULL;
        char msg[WH_ERROR_MAX];
        snprintf(msg, sizeof msg, "cannot send: %s", strerror(-rc));
        wh__attempt_end(w, false, 0, msg);
    }
}

/* The first allowed address of res, or NULL with why saying what was refused. Every
 * address must be allowed: a name that resolves to an internal address among public ones
 * is refused, whatever the order of the answers. */
static const struct sockaddr *wh__pick(const struct addrinfo *res, bool allow_private, char *why,
                                       size_t len)
{
    const struct sockaddr *first = NULL;
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
            continue;
        if (cp_wh_addr_check(a->ai_addr, allow_private, why, len))
            return NULL;
        if (!first)
            first = a->ai_addr;
    }
    if (!first)
        snprintf(why, len, "no IPv4 or IPv6 address");
    return first;
}

static void wh__gai_done(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct wh *w = req->data;
    free(req);
    if (!w) {
        uv_freeaddrinfo(res);
        return;
    }
    w->gai = NULL;
    char why[160], msg[WH_ERROR_MAX];
    if (status < 0 || !res) {
        snprintf(msg, sizeof msg, "cannot resolve %s: %s", w->url.host, uv_strerror(status));
        uv_freeaddrinfo(res);
        wh__attempt_end(w, false, 0, msg);
        return;
    }
    const struct sockaddr *sa =
        wh__pick(res, w->W->cp->cfg.webhooks_allow_private, why, sizeof why);
    if (!sa) {
        snprintf(msg, sizeof msg, "refused: %s resolves to %s (webhooks.allow_private)",
                 w->url.host, why);
        uv_freeaddrinfo(res);
        wh__attempt_end(w, false, 0, msg);
        return;
    }
    struct sockaddr_storage ss;
    memcpy(&ss, sa,
           sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
    uv_freeaddrinfo(res);
    wh__send(w, (struct sockaddr *)&ss);
}

/* Resolves the URL's host (once per attempt); addresses in the URL are taken as they are. */
static int wh__resolve(struct cp *cp, const struct cp_wh_url *u, uv_getaddrinfo_t *req,
                       uv_getaddrinfo_cb cb, struct sockaddr_storage *lit)
{
    if (u->host_is_addr) {
        memset(lit, 0, sizeof *lit);
        if (uv_ip4_addr(u->host, u->port, (struct sockaddr_in *)lit) == 0 ||
            uv_ip6_addr(u->host, u->port, (struct sockaddr_in6 *)lit) == 0)
            return 1;
        return -EINVAL;
    }
    char port[8];
    snprintf(port, sizeof port, "%d", u->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    return uv_getaddrinfo(cp->loop, req, cb, u->host, port, &hints);
}

static void wh__due(uv_timer_t *t)
{
    wh__pump(t->data);
}

/* Starts the next attempt if none is in flight and the head is due. */
static void wh__pump(struct wh *w)
{
    struct cp_webhooks *W = w->W;
    if (w->cur || w->closing || W->stopping || !w->enabled || !w->head)
        return;
    uint64_t now = al_now_ns();
    if (w->head->due_ns > now) {
        uv_timer_start(&w->timer, wh__due, (w->head->due_ns - now + 999999) / 1000000, 0);
        return;
    }
    struct wh_item *it = w->head;
    w->head = it->next;
    if (!w->head)
        w->tail = NULL;
    w->queued--;
    it->next = NULL;
    it->attempts++;
    w->cur = it;
    w->status = 0;
    w->addr[0] = '\0';
    al_uuid_v4(w->delivery_id);
    w->started_ns = now;
    w->timer_for_attempt = true;
    uv_timer_start(&w->timer, wh__attempt_timeout, W->cp->cfg.webhooks_timeout_ms, 0);
    char why[160], msg[WH_ERROR_MAX];
    if (w->url.tls == false && !W->cp->cfg.webhooks_allow_http) {
        wh__attempt_end(w, false, 0,
                        "refused: http:// webhooks are not allowed "
                        "(webhooks.allow_http)");
        return;
    }
    uv_getaddrinfo_t *g = calloc(1, sizeof *g);
    if (!g) {
        wh__attempt_end(w, false, 0, "out of memory");
        return;
    }
    g->data = w;
    struct sockaddr_storage lit;
    int rc = wh__resolve(W->cp, &w->url, g, wh__gai_done, &lit);
    if (rc == 1) {
        free(g);
        if (cp_wh_addr_check((struct sockaddr *)&lit, W->cp->cfg.webhooks_allow_private, why,
                             sizeof why)) {
            snprintf(msg, sizeof msg, "refused: %s (webhooks.allow_private)", why);
            wh__attempt_end(w, false, 0, msg);
            return;
        }
        wh__send(w, (struct sockaddr *)&lit);
        return;
    }
    if (rc < 0) {
        free(g);
        snprintf(msg, sizeof msg, "cannot resolve %s: %s", w->url.host, uv_strerror(rc));
        wh__attempt_end(w, false, 0, msg);
        return;
    }
    w->gai = g;
}

void cp_webhooks_event(struct cp *cp, int type, const char *doc)
{
    struct cp_webhooks *W = cp->webhooks;
    if (!W || W->stopping || type < 0 || type >= CP_EV__COUNT)
        return;
    const char *name = cp_event_type_name((enum cp_event_type)type);
    json_t *e = NULL;
    const char *eid = "";
    for (struct wh *w = W->list; w; w = w->next) {
        if (!w->enabled || !(w->mask >> type & 1))
            continue;
        if (!e) {
            e = json_loads(doc, 0, NULL);
            eid = e ? json_string_value(json_object_get(e, "id")) : NULL;
            if (!eid)
                eid = "";
        }
        size_t len = strlen(doc);
        struct wh_item *it = calloc(1, sizeof *it + len + 1);
        if (!it) {
            al_warn("webhook %s: event %s dropped: out of memory", w->id, eid);
            continue;
        }
        snprintf(it->event_id, sizeof it->event_id, "%s", eid);
        snprintf(it->type, sizeof it->type, "%s", name);
        it->len = len;
        memcpy(it->body, doc, len + 1);
        if (w->queued >= (size_t)cp->cfg.webhooks_queue) {
            /* Bounded: the oldest waiting event goes (the one in flight stays). */
            struct wh_item *old = w->head;
            w->head = old->next;
            if (!w->head)
                w->tail = NULL;
            w->queued--;
            char why[128];
            snprintf(why, sizeof why, "the queue is full (webhooks.queue: %lld waiting)",
                     (long long)cp->cfg.webhooks_queue);
            wh__record(w, old, "dropped", 0, why);
            al_warn("webhook %s: event %s dropped: %s", w->id, old->event_id, why);
            wh__item_free(old);
        }
        if (w->tail)
            w->tail->next = it;
        else
            w->head = it;
        w->tail = it;
        w->queued++;
        wh__pump(w);
    }
    json_decref(e);
}

/* ---- the API -------------------------------------------------------------------------------- */

static json_t *wh__public(const struct wh *w)
{
    return json_deep_copy(w->doc);
}

static int wh__count_of(struct cp_webhooks *W, const char *key_id)
{
    int n = 0;
    for (struct wh *w = W->list; w; w = w->next)
        n += strcmp(w->key_id, key_id) == 0;
    return n;
}

/* The fields of a create (every one given or defaulted) or an update (those given); doc gets
 * the checked values. secret: the new signing secret or "" (sodium-free by the caller). */
static bool wh__fields(struct cp *cp, struct al_http_req *req, json_t *body, json_t *doc,
                       bool create, char *secret, size_t secret_cap, struct cp_wh_url *url)
{
    static const char *const keys[] = {"name", "url", "enabled", "events", "signatureSecret", NULL};
    struct al_error err = {0};
    if (al_json_check_keys(body, keys, "webhook", &err)) {
        cp_rest_error(req, 400, "%s (a webhook has name, url, enabled, events, signatureSecret)",
                      al_error_str(&err));
        return false;
    }
    const char *name = NULL, *u = NULL, *sec = NULL;
    bool enabled = true;
    json_t *events = NULL;
    if (al_json_get_str(body, "name", false, &name, "webhook", &err) ||
        al_json_get_str(body, "url", create, &u, "webhook", &err) ||
        al_json_get_bool(body, "enabled", false, &enabled, "webhook", &err) ||
        al_json_get_arr(body, "events", false, &events, "webhook", &err) ||
        al_json_get_str(body, "signatureSecret", false, &sec, "webhook", &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return false;
    }
    if (name) {
        size_t n = strlen(name);
        if (n == 0 || n > WH_NAME_MAX) {
            cp_rest_error(req, 400, "name: 1 to %d bytes", WH_NAME_MAX);
            return false;
        }
        json_object_set_new(doc, "name", json_string(name));
    } else if (create) {
        json_object_set_new(doc, "name", json_string(""));
    }
    if (u) {
        if (cp_wh_url_parse(u, cp->cfg.webhooks_allow_http, url, &err)) {
            cp_rest_error(req, 400, "%s", al_error_str(&err));
            return false;
        }
        json_object_set_new(doc, "url", json_string(u));
    }
    if (json_object_get(body, "enabled") || create)
        json_object_set_new(doc, "enabled", json_boolean(enabled));
    if (events) {
        if (json_array_size(events) == 0) {
            cp_rest_error(req, 400,
                          "events: at least one event type (leave events out for all of them)");
            return false;
        }
        json_t *list = json_array();
        uint64_t seen = 0;
        size_t i;
        json_t *v;
        json_array_foreach(events, i, v)
        {
            enum cp_event_type t;
            if (!json_is_string(v) || cp_event_type_parse(json_string_value(v), &t)) {
                json_decref(list);
                char types[512];
                cp_event_type_list(types, sizeof types);
                cp_rest_error(req, 400, "events[%zu]: not an event type (%s)", i, types);
                return false;
            }
            if (!(seen >> t & 1))
                json_array_append_new(list, json_string(cp_event_type_name(t)));
            seen |= 1ull << t;
        }
        json_object_set_new(doc, "events", list);
    } else if (create) {
        json_t *list = json_array();
        for (int t = 0; t < CP_EV__COUNT; t++)
            json_array_append_new(list, json_string(cp_event_type_name((enum cp_event_type)t)));
        json_object_set_new(doc, "events", list);
    }
    secret[0] = '\0';
    if (sec) {
        size_t n = strlen(sec);
        bool ok = n >= WH_SECRET_MIN && n <= WH_SECRET_MAX && n < secret_cap;
        for (size_t i = 0; ok && i < n; i++)
            ok = (unsigned char)sec[i] >= 0x20 && sec[i] != 0x7f;
        if (!ok) {
            cp_rest_error(req, 400,
                          "signatureSecret: %d to %d printable bytes (leave it out to have "
                          "one made)",
                          WH_SECRET_MIN, WH_SECRET_MAX);
            return false;
        }
        memcpy(secret, sec, n + 1);
    }
    return true;
}

/* Registration and updates check the URL's host as a delivery would: an address the
 * operator does not allow is a 400 now, not failed deliveries later. Resolving happens on
 * libuv's pool; the request waits. */
struct wh_pending {
    struct cp *cp;
    struct al_http_req *req;
    uv_getaddrinfo_t gai;
    bool create;
    char id[37];
    char key_id[32];
    json_t *doc;
    struct cp_wh_url url;
    unsigned char *secret; /* sodium_malloc; NULL: keep */
    size_t secret_len;
    bool secret_made;
};

static void wh__pending_free(struct wh_pending *p)
{
    json_decref(p->doc);
    if (p->secret)
        sodium_free(p->secret);
    free(p);
}

static void wh__pending_closed(struct al_http_req *req)
{
    struct wh_pending *p = req->user;
    if (p)
        p->req = NULL;
}

/* The checks passed: store, then apply, then answer. */
static void wh__commit(struct wh_pending *p)
{
    struct cp *cp = p->cp;
    struct cp_webhooks *W = cp->webhooks;
    struct al_http_req *req = p->req;
    if (req) {
        req->user = NULL;
        al_http_req_on_close(req, NULL);
    }
    if (!W || W->stopping) {
        if (req)
            cp_rest_error(req, 503, "airlockd is stopping");
        return;
    }
    struct wh *w = wh__find(W, p->id, p->key_id);
    if (!p->create && !w) {
        if (req)
            cp_rest_error(req, 404, "webhook \"%s\" not found", p->id);
        return;
    }
    if (p->create && wh__count_of(W, p->key_id) >= cp->cfg.webhooks_per_key) {
        if (req)
            cp_rest_error(req, 409,
                          "this API key has %lld webhooks, the most it may have "
                          "(webhooks.per_key): delete one first",
                          (long long)cp->cfg.webhooks_per_key);
        return;
    }
    unsigned char *sealed = NULL;
    size_t sealed_len = 0;
    if (p->secret) {
        sealed_len = p->secret_len + WH_SEALED_EXTRA;
        sealed = malloc(sealed_len);
        if (!sealed) {
            if (req)
                cp_rest_error(req, 500, "out of memory");
            return;
        }
        wh__seal(W, p->id, p->secret, p->secret_len, sealed);
    }
    struct al_error err = {0};
    uint64_t created = w ? w->created_ns : al_wall_ns();
    int rc =
        cp_store_wh_save(cp->store, p->id, p->key_id, created, p->doc, sealed, sealed_len, &err);
    free(sealed);
    if (rc) {
        if (req)
            cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    bool was_enabled = w && w->enabled;
    if (!w) {
        w = wh__new(W, p->id, p->key_id, created);
        if (!w) {
            if (req)
                cp_rest_error(req, 500, "out of memory");
            return;
        }
        w->next = W->list;
        W->list = w;
    }
    wh__apply(w, p->doc);
    if (p->secret) {
        if (w->secret)
            sodium_free(w->secret);
        w->secret = p->secret; /* the webhook's now */
        w->secret_len = p->secret_len;
        p->secret = NULL;
    }
    /* A disabled webhook delivers nothing: what waited is dropped with it, the attempt in
     * flight is abandoned (its outcome is not known). */
    if (was_enabled && !w->enabled) {
        wh__abandon_attempt(w);
        if (w->cur) {
            wh__record(w, w->cur, "dropped", 0, "the webhook was disabled");
            wh__item_free(w->cur);
            w->cur = NULL;
        }
        for (struct wh_item *it = w->head, *next; it; it = next) {
            next = it->next;
            wh__record(w, it, "dropped", 0, "the webhook was disabled");
            wh__item_free(it);
        }
        w->head = w->tail = NULL;
        w->queued = 0;
    }
    /* The target only: a URL's path often carries a token of the receiver's. */
    al_info("webhook %s %s by key %s: %s, %d event types%s", w->id,
            p->create ? "registered" : "updated", p->key_id, w->url.target,
            __builtin_popcountll(w->mask), w->enabled ? "" : " (disabled)");
    if (!req)
        return;
    json_t *out = wh__public(w);
    /* A secret airlockd made is shown this once; one the caller gave, never. */
    if (p->create && p->secret_made)
        json_object_set_new(out, "signatureSecret",
                            json_stringn((const char *)w->secret, w->secret_len));
    al_http_reply_json(req, p->create ? 201 : 200, out);
}

static void wh__pending_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    struct wh_pending *p = g->data;
    char why[160];
    if (!p->req) {
        /* The client is gone: it would not learn the registration (nor a made secret). */
    } else if (status < 0 || !res) {
        if (p->req) {
            p->req->user = NULL;
            al_http_req_on_close(p->req, NULL);
            cp_rest_error(p->req, 400, "url: cannot resolve %s: %s", p->url.host,
                          uv_strerror(status));
        }
    } else if (!wh__pick(res, p->cp->cfg.webhooks_allow_private, why, sizeof why)) {
        if (p->req) {
            p->req->user = NULL;
            al_http_req_on_close(p->req, NULL);
            cp_rest_error(p->req, 400,
                          "url: %s resolves to %s: this airlockd does not deliver to internal "
                          "addresses (webhooks.allow_private)",
                          p->url.host, why);
        }
    } else {
        wh__commit(p);
    }
    uv_freeaddrinfo(res);
    wh__pending_free(p);
}

static void wh__check_and_commit(struct wh_pending *p, bool url_changed)
{
    struct cp *cp = p->cp;
    char why[160];
    if (!url_changed) {
        wh__commit(p);
        wh__pending_free(p);
        return;
    }
    struct sockaddr_storage lit;
    p->gai.data = p;
    int rc = wh__resolve(cp, &p->url, &p->gai, wh__pending_resolved, &lit);
    if (rc == 1) {
        if (cp_wh_addr_check((struct sockaddr *)&lit, cp->cfg.webhooks_allow_private, why,
                             sizeof why))
            cp_rest_error(p->req, 400,
                          "url: %s: this airlockd does not deliver to internal addresses "
                          "(webhooks.allow_private)",
                          why);
        else
            wh__commit(p);
        wh__pending_free(p);
        return;
    }
    if (rc < 0) {
        cp_rest_error(p->req, 400, "url: cannot resolve %s: %s", p->url.host, uv_strerror(rc));
        wh__pending_free(p);
        return;
    }
    p->req->user = p;
    al_http_req_on_close(p->req, wh__pending_closed);
}

/* NULL after answering (and wiping body). */
static struct wh_pending *wh__pending_new(struct cp *cp, struct al_http_req *req,
                                          const struct cp_principal *who, json_t *body)
{
    struct wh_pending *p = calloc(1, sizeof *p);
    if (!p) {
        cp_rest_error(req, 500, "out of memory");
        cp_rest_wipe_body(req, body, "signatureSecret");
        return NULL;
    }
    p->cp = cp;
    p->req = req;
    snprintf(p->key_id, sizeof p->key_id, "%s", who->key_id);
    return p;
}

/* The secret of p: given (copied into locked memory) or made. */
static bool wh__pending_secret(struct wh_pending *p, struct al_http_req *req, const char *given)
{
    size_t n = given[0] ? strlen(given) : 6 + 43;
    p->secret = sodium_malloc(n + 1);
    if (!p->secret) {
        cp_rest_error(req, 500, "out of memory");
        return false;
    }
    if (given[0]) {
        memcpy(p->secret, given, n);
    } else {
        unsigned char r[32];
        randombytes_buf(r, sizeof r);
        memcpy(p->secret, "whsec_", 6);
        sodium_bin2base64((char *)p->secret + 6, 44, r, sizeof r,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING);
        sodium_memzero(r, sizeof r);
        p->secret_made = true;
    }
    p->secret_len = n;
    return true;
}

void cp_webhooks_create(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                        json_t *body)
{
    struct cp_webhooks *W = cp->webhooks;
    char secret[WH_SECRET_MAX + 1];
    if (!W || W->stopping) {
        cp_rest_error(req, 503, "webhooks are not available (airlockd is stopping)");
        cp_rest_wipe_body(req, body, "signatureSecret");
        return;
    }
    struct wh_pending *p = wh__pending_new(cp, req, who, body);
    if (!p)
        return;
    p->create = true;
    al_uuid_v4(p->id);
    char created[40];
    al_time_rfc3339(created, sizeof created, al_wall_ns());
    p->doc = json_pack("{s:s,s:s}", "id", p->id, "teamID", "default");
    bool ok = p->doc && wh__fields(cp, req, body, p->doc, true, secret, sizeof secret, &p->url);
    if (ok) {
        /* E2B's order of fields. */
        json_t *d = json_pack(
            "{s:O,s:O,s:O,s:s,s:O,s:O,s:O}", "id", json_object_get(p->doc, "id"), "teamID",
            json_object_get(p->doc, "teamID"), "name", json_object_get(p->doc, "name"), "createdAt",
            created, "enabled", json_object_get(p->doc, "enabled"), "url",
            json_object_get(p->doc, "url"), "events", json_object_get(p->doc, "events"));
        json_decref(p->doc);
        p->doc = d;
        ok = d && wh__pending_secret(p, req, secret);
    }
    sodium_memzero(secret, sizeof secret);
    cp_rest_wipe_body(req, body, "signatureSecret");
    if (!ok) {
        wh__pending_free(p);
        return;
    }
    wh__check_and_commit(p, true);
}

void cp_webhooks_update(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                        const char *id, json_t *body)
{
    struct cp_webhooks *W = cp->webhooks;
    char secret[WH_SECRET_MAX + 1];
    struct wh *w = W && !W->stopping ? wh__find(W, id, who->key_id) : NULL;
    if (!w) {
        if (W && !W->stopping)
            cp_rest_error(req, 404, "webhook \"%s\" not found", id);
        else
            cp_rest_error(req, 503, "webhooks are not available (airlockd is stopping)");
        cp_rest_wipe_body(req, body, "signatureSecret");
        return;
    }
    struct wh_pending *p = wh__pending_new(cp, req, who, body);
    if (!p)
        return;
    snprintf(p->id, sizeof p->id, "%s", w->id);
    p->doc = json_deep_copy(w->doc);
    p->url = w->url;
    bool ok = p->doc && wh__fields(cp, req, body, p->doc, false, secret, sizeof secret, &p->url);
    bool url_changed = ok && json_object_get(body, "url") != NULL;
    if (ok && secret[0])
        ok = wh__pending_secret(p, req, secret);
    sodium_memzero(secret, sizeof secret);
    cp_rest_wipe_body(req, body, "signatureSecret");
    if (!ok) {
        wh__pending_free(p);
        return;
    }
    wh__check_and_commit(p, url_changed);
}

static int wh__collect(const char *doc, void *arg)
{
    json_t *v = json_loads(doc, 0, NULL);
    if (v)
        json_array_append_new(arg, v);
    return 0;
}

struct wh_stats {
    json_t *o;
    uint64_t last_ns, last_ok_ns;
};

static int wh__stat_one(const char *outcome, uint64_t count, uint64_t last_ns, void *arg)
{
    struct wh_stats *s = arg;
    json_object_set_new(s->o, outcome, json_integer((json_int_t)count));
    if (last_ns > s->last_ns)
        s->last_ns = last_ns;
    if (strcmp(outcome, "delivered") == 0)
        s->last_ok_ns = last_ns;
    return 0;
}

static void wh__stats(struct cp *cp, struct al_http_req *req, struct wh *w)
{
    struct wh_stats s = {.o = json_pack("{s:i,s:i,s:i,s:i}", "delivered", 0, "retrying", 0,
                                        "failed", 0, "dropped", 0)};
    struct al_error err = {0};
    if (!s.o || cp_store_whd_stats(cp->store, w->id, wh__stat_one, &s, &err)) {
        json_decref(s.o);
        cp_rest_error(req, 500, "%s", s.o ? al_error_str(&err) : "out of memory");
        return;
    }
    char ts[40];
    json_t *out = json_pack("{s:s,s:o,s:I,s:b}", "webhookId", w->id, "attempts", s.o, "queued",
                            (json_int_t)(w->queued + (w->cur ? 1 : 0)), "enabled", w->enabled);
    if (s.last_ns)
        al_time_rfc3339(ts, sizeof ts, s.last_ns);
    json_object_set_new(out, "lastAttemptAt", s.last_ns ? json_string(ts) : json_null());
    if (s.last_ok_ns)
        al_time_rfc3339(ts, sizeof ts, s.last_ok_ns);
    json_object_set_new(out, "lastDeliveredAt", s.last_ok_ns ? json_string(ts) : json_null());
    al_http_reply_json(req, 200, out);
}

static void wh__deliveries(struct cp *cp, struct al_http_req *req, struct wh *w)
{
    uint64_t limit = 50, offset = 0;
    bool has;
    if (!cp_rest_u64_param(req, "offset", &offset, &has) ||
        !cp_rest_u64_param(req, "limit", &limit, &has))
        return;
    if (has && (limit < 1 || limit > WH_LIMIT_MAX)) {
        cp_rest_error(req, 400, "limit must be from 1 to %d", WH_LIMIT_MAX);
        return;
    }
    if (offset > INT64_MAX) {
        cp_rest_error(req, 400, "offset is too large");
        return;
    }
    json_t *arr = json_array();
    struct al_error err = {0};
    if (cp_store_whd_query(cp->store, w->id, limit, offset, wh__collect, arr, &err)) {
        json_decref(arr);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    al_http_reply_json(req, 200, arr);
}

void cp_webhooks_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *rest)
{
    struct cp_webhooks *W = cp->webhooks;
    const char *m = req->method;
    if (!W || W->stopping) {
        cp_rest_error(req, 503, "webhooks are not available (airlockd is stopping)");
        return;
    }
    if (*rest == '\0' || strcmp(rest, "/") == 0) {
        if (strcmp(m, "GET") != 0) {
            cp_rest_error(req, 405,
                          "%s is not allowed on /events/webhooks (GET lists, POST "
                          "registers)",
                          m);
            return;
        }
        json_t *arr = json_array();
        /* Oldest first: the list is newest first. */
        for (struct wh *w = W->list; w; w = w->next)
            if (strcmp(w->key_id, who->key_id) == 0)
                json_array_insert_new(arr, 0, wh__public(w));
        al_http_reply_json(req, 200, arr);
        return;
    }
    const char *p = rest + 1;
    char id[64];
    if (!cp_rest_path_part(&p, id, sizeof id)) {
        cp_rest_error(req, 404, "no such endpoint: %s /events/webhooks%s", m, rest);
        return;
    }
    struct wh *w = wh__find(W, id, who->key_id);
    if (!w) {
        cp_rest_error(req, 404, "webhook \"%.64s\" not found", id);
        return;
    }
    if (*p == '\0') {
        if (strcmp(m, "GET") == 0) {
            al_http_reply_json(req, 200, wh__public(w));
        } else if (strcmp(m, "DELETE") == 0) {
            struct al_error err = {0};
            if (cp_store_wh_delete(cp->store, w->id, &err)) {
                cp_rest_error(req, 500, "%s", al_error_str(&err));
                return;
            }
            al_info("webhook %s deleted by key %s", w->id, who->key_id);
            wh__destroy(w);
            al_http_reply(req, 200, NULL, NULL, 0);
        } else {
            cp_rest_error(req, 405, "%s is not allowed on a webhook (GET, PATCH, DELETE)", m);
        }
        return;
    }
    if (strcmp(p, "/deliveries") == 0 && strcmp(m, "GET") == 0)
        wh__deliveries(cp, req, w);
    else if (strcmp(p, "/stats") == 0 && strcmp(m, "GET") == 0)
        wh__stats(cp, req, w);
    else if (strcmp(p, "/deliveries") == 0 || strcmp(p, "/stats") == 0)
        cp_rest_error(req, 405, "%s is not allowed on %s (GET)", m, p);
    else
        cp_rest_error(req, 404, "no such endpoint: %s /events/webhooks%s", m, rest);
}

/* ---- life ------------------------------------------------------------------------------------ */

int cp_webhooks_open(struct cp *cp, struct al_error *err)
{
    struct cp_webhooks *W = calloc(1, sizeof *W);
    if (!W)
        return al_error_set(err, -ENOMEM, "out of memory");
    W->cp = cp;
    int rc = wh__key_load(W, err);
    if (rc) {
        free(W);
        return rc;
    }
    struct al_http_tls_client_opts to = {
        .ca_file = cp->cfg.webhooks_ca_file && *cp->cfg.webhooks_ca_file ? cp->cfg.webhooks_ca_file
                                                                         : NULL};
    struct al_error terr = {0};
    if (al_http_tls_client_new(&to, &W->tls, &terr)) {
        /* Not fatal: http webhooks (where allowed) still work, https attempts say why. */
        snprintf(W->tls_error, sizeof W->tls_error, "%s", al_error_str(&terr));
        al_warn("webhooks: https deliveries will fail: %s (webhooks.ca_file)", W->tls_error);
        W->tls = NULL;
    }
    cp->webhooks = W;
    if ((rc = cp_store_wh_foreach(cp->store, wh__load_one, W, err))) {
        cp_webhooks_close(cp);
        return rc;
    }
    return 0;
}

void cp_webhooks_stop(struct cp *cp)
{
    struct cp_webhooks *W = cp->webhooks;
    if (!W || W->stopping)
        return;
    W->stopping = true;
    size_t lost = 0;
    for (struct wh *w = W->list; w; w = w->next) {
        wh__abandon_attempt(w);
        lost += w->queued + (w->cur ? 1 : 0);
    }
    if (lost)
        al_warn("webhooks: %zu deliveries not made: airlockd is stopping (the events stay in "
                "/events/sandboxes)",
                lost);
}

void cp_webhooks_close(struct cp *cp)
{
    struct cp_webhooks *W = cp->webhooks;
    if (!W)
        return;
    cp_webhooks_stop(cp);
    while (W->list)
        wh__destroy(W->list);
    al_http_tls_client_free(W->tls);
    sodium_memzero(W->key, sizeof W->key);
    cp->webhooks = NULL;
    free(W);
}
