/* controlplane/templates/pull: the distribution-API client of oci.h (tpl_oci_pull).
 *
 * One pull runs a private libuv loop with one keep-alive pool (common/http's client, TLS by
 * common/http_tls): the manifest (an index is resolved to linux/amd64 and its manifest
 * fetched by digest), the config, then the layers, several at once, each streamed into the
 * blob cache through a sha256 and committed only when size and digest match.
 *
 * A transfer ("xfer") is one blob or document: it follows redirects itself (at most 5;
 * https only unless the registry is insecure-listed; the Authorization header never goes to
 * another host), resumes itself with Range after a broken connection (at most 3 times), and
 * reports a 401 to the driver, which answers the challenge once (a bearer token from the
 * realm the registry names, with the user's credentials if any, or basic auth) and starts
 * the transfer again. The token and the basic header live in sodium memory.
 */
#include "internal.h"
#include "oci.h"

#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <uv.h>

#include "common/buf.h"
#include "common/http.h"
#include "common/http_head.h"
#include "common/http_tls.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"

#define PULL_MAX_REDIRECTS 5
#define PULL_MAX_RETRIES   3
#define PULL_ERRBODY_MAX   (64 * 1024)
#define PULL_TOKEN_MAX     (1024 * 1024)
#define PULL_URL_MAX       TPL_URL_MAX
#define PULL_USER_AGENT    "airlock/" AIRLOCK_VERSION
#define PULL_STALL_NS      (60ull * 1000000000ull) /* no byte for this long: broken */

#define MT_OCI_INDEX     "application/vnd.oci.image.index.v1+json"
#define MT_OCI_MANIFEST  "application/vnd.oci.image.manifest.v1+json"
#define MT_DOCKER_LIST   "application/vnd.docker.distribution.manifest.list.v2+json"
#define MT_DOCKER_MANIF  "application/vnd.docker.distribution.manifest.v2+json"
#define MT_DOCKER_V1     "application/vnd.docker.distribution.manifest.v1"
#define MANIFEST_ACCEPTS MT_OCI_INDEX ", " MT_DOCKER_LIST ", " MT_OCI_MANIFEST ", " MT_DOCKER_MANIF

struct pull {
    const struct tpl_pull_opts *o;
    struct tpl_limits lim;
    struct tpl_ref ref;
    struct tpl_image *img;
    uv_loop_t loop;
    struct al_http_pool *pool;
    struct al_http_tls *tls;
    uv_timer_t tick;    /* while a transfer waits for another pull's lock on its blob */
    struct tpl_url reg; /* the registry (its path unused) */
    bool insecure;
    char *auth; /* sodium: the Authorization value, or NULL */
    size_t auth_size;
    bool auth_tried;
    uint64_t deadline_ns;
    /* progress */
    uint64_t done_bytes, last_progress;
    size_t layers_done;
};

enum xfer_state { X_IDLE, X_WAIT_LOCK, X_RUNNING, X_DONE };

struct xfer {
    struct pull *p;
    struct tpl_url url;
    bool foreign; /* redirected to another host: no Authorization */
    const char *accept;
    const char *what; /* for messages: "manifest", "config", "layer 3/7" */
    /* sinks: memory (documents) or the blob cache (layers) */
    bool to_blob;
    struct al_buf mem;
    struct tpl_blob_writer blob;
    bool blob_open;
    char digest[TPL_DIGEST_LEN + 1];
    uint64_t expect;
    /* the exchange */
    struct al_http_creq *c;
    enum xfer_state state;
    int status;
    bool body_ok;
    bool need_auth;
    bool range_sent;
    char www[1024];
    char location[PULL_URL_MAX];
    char ctype[128];
    struct al_buf errbody;
    int redirects, retries;
    uint64_t last_ns; /* the last sign of life of the exchange */
    int rc;
    struct al_error err;
};

/* ---- urls ---------------------------------------------------------------------------- */

int tpl_url_parse(const char *url, const struct tpl_url *base, struct tpl_url *out,
                  struct al_error *err)
{
    memset(out, 0, sizeof *out);
    /* A fragment is the client's own (it is never sent); a Location may carry one. */
    size_t n = strcspn(url, "#");
    if (n >= TPL_URL_MAX)
        return al_error_set(err, -ENAMETOOLONG, "longer than %d bytes", TPL_URL_MAX - 1);
    char abs[TPL_URL_MAX + 8];
    const char *u = url;
    if (base && n >= 2 && url[0] == '/' && url[1] == '/') {
        /* A network-path reference ("//host/path"): the base's scheme, its own authority. */
        snprintf(abs, sizeof abs, "%s:%.*s", base->tls ? "https" : "http", (int)n, url);
        u = abs;
        n = strlen(abs);
    }
    /* The request-target parser of every HTTP component: an absolute URL is exactly an
     * absolute-form target, with the same refusals (userinfo, a bad host or port). */
    struct al_http_target t;
    const char *why = NULL;
    if (al_http_target_parse(u, n, 0, &t, &why) < 0) {
        if (strcmp(why, "invalid_target") == 0)
            return al_error_set(err, -EINVAL, "not an http:// or https:// URL%s",
                                base ? " nor a path" : "");
        return al_error_set(err, -EINVAL, "%s", al_http_target_message(why));
    }
    if (t.form == AL_HTTP_TARGET_ORIGIN && base) {
        out->tls = base->tls;
        memcpy(out->target, base->target, sizeof out->target);
        memcpy(out->authority, base->authority, sizeof out->authority);
        memcpy(out->host, base->host, sizeof out->host);
        return al_http_target_origin(&t, out->path, sizeof out->path);
    }
    if (t.form != AL_HTTP_TARGET_ABSOLUTE)
        return al_error_set(err, -EINVAL, "not an http:// or https:// URL%s",
                            base ? " nor a path" : "");
    const struct al_http_authority *a = &t.authority;
    out->tls = t.https;
    /* What al_http_authority_parse accepted fits: a host of at most 255 bytes. */
    snprintf(out->authority, sizeof out->authority, "%.*s", (int)a->len, a->text);
    size_t hl;
    const char *h = al_http_authority_host(a, &hl);
    snprintf(out->host, sizeof out->host, "%.*s", (int)hl, h);
    for (char *c = out->host; *c; c++)
        *c = (char)tolower((unsigned char)*c);
    snprintf(out->target, sizeof out->target, "%s://%s", out->tls ? "https" : "http",
             out->authority);
    return al_http_target_origin(&t, out->path, sizeof out->path);
}

static bool pull__is_insecure(const struct pull *p, const char *authority)
{
    const struct tpl_registries *r = p->o->registries;
    for (size_t i = 0; i < r->n_insecure; i++)
        if (strcasecmp(r->insecure[i], authority) == 0)
            return true;
    return false;
}

static void pct__encode(struct al_buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~')
            al_buf_append(b, (const char *)p, 1);
        else
            al_buf_printf(b, "%%%02X", *p);
    }
}

/* ---- progress ------------------------------------------------------------------------ */

static void pull__progress(struct pull *p, const char *phase, bool force)
{
    if (!p->o->progress)
        return;
    if (!force && p->done_bytes - p->last_progress < (4u << 20))
        return;
    p->last_progress = p->done_bytes;
    struct tpl_progress pr = {
        .phase = phase,
        .done = p->done_bytes,
        .total = p->img->bytes,
        .pulled = p->img->bytes_pulled,
        .layers_done = p->layers_done,
        .layers = p->img->n_layers,
    };
    p->o->progress(&pr, p->o->arg);
}

/* ---- one transfer -------------------------------------------------------------------- */

static int xfer__start(struct xfer *x);

static void xfer__fail(struct xfer *x, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void xfer__fail(struct xfer *x, int rc, const char *fmt, ...)
{
    if (!x->rc) {
        va_list ap;
        va_start(ap, fmt);
        char m[AL_ERROR_MSG_MAX];
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        al_error_set(&x->err, rc, "%s", m);
        x->rc = rc;
    }
}

static int xfer__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                             size_t n, void *arg)
{
    (void)c;
    struct xfer *x = arg;
    x->status = status;
    x->last_ns = al_now_ns();
    x->www[0] = x->location[0] = x->ctype[0] = '\0';
    int64_t clen = -1;
    const char *crange = NULL;
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(h[i].name, "www-authenticate") == 0 && !x->www[0])
            snprintf(x->www, sizeof x->www, "%s", h[i].value);
        else if (strcasecmp(h[i].name, "location") == 0)
            snprintf(x->location, sizeof x->location, "%s", h[i].value);
        else if (strcasecmp(h[i].name, "content-type") == 0)
            snprintf(x->ctype, sizeof x->ctype, "%s", h[i].value);
        else if (strcasecmp(h[i].name, "content-length") == 0)
            clen = strtoll(h[i].value, NULL, 10);
        else if (strcasecmp(h[i].name, "content-range") == 0)
            crange = h[i].value;
    }
    if (status / 100 != 2)
        return 0; /* the body is an error document, read into errbody */
    x->body_ok = true;
    if (!x->to_blob) {
        if (clen >= 0 && (uint64_t)clen > x->mem.max) {
            xfer__fail(x, -EFBIG, "the %s of %s is %lld bytes, more than the %zu allowed", x->what,
                       x->p->img->reference, (long long)clen, x->mem.max);
            return -1;
        }
        return 0;
    }
    struct tpl_blob_writer *w = &x->blob;
    if (x->range_sent && status == 206) {
        unsigned long long start = 0;
        if (!crange || sscanf(crange, "bytes %llu-", &start) != 1 || start != w->off) {
            xfer__fail(x, -EPROTO,
                       "%s: the registry answered a resumed download with the range "
                       "'%s' where bytes %llu- were asked for",
                       x->what, crange ? crange : "(none)", (unsigned long long)w->off);
            return -1;
        }
    } else if (w->off > 0) {
        x->p->done_bytes -= w->off; /* the whole blob again */
        if (tpl_cache_restart(w) < 0) {
            xfer__fail(x, -EIO, "%s: cannot rewrite %s", x->what, w->partial);
            return -1;
        }
    }
    if (clen >= 0 && (uint64_t)clen > x->expect - w->off) {
        xfer__fail(x, -EFBIG,
                   "%s: the registry announces %lld bytes for blob %s, whose manifest says %llu",
                   x->what, (long long)clen, x->digest, (unsigned long long)x->expect);
        return -1;
    }
    return 0;
}

static int xfer__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct xfer *x = arg;
    x->last_ns = al_now_ns();
    if (!x->body_ok) {
        al_buf_append(&x->errbody, data, len); /* capped: the rest is dropped */
        return 0;
    }
    if (!x->to_blob) {
        if (al_buf_append(&x->mem, data, len) < 0) {
            xfer__fail(x, -EFBIG, "the %s of %s is more than the %zu bytes allowed", x->what,
                       x->p->img->reference, x->mem.max);
            al_http_creq_cancel(c);
        }
        return 0;
    }
    struct tpl_blob_writer *w = &x->blob;
    if (len > x->expect - w->off) {
        xfer__fail(x, -EFBIG, "%s: the registry sends more than the %llu bytes of blob %s", x->what,
                   (unsigned long long)x->expect, x->digest);
        al_http_creq_cancel(c);
        return 0;
    }
    int rc = tpl_cache_write(w, data, len);
    if (rc < 0) {
        xfer__fail(x, rc, "%s: cannot write %s: %s", x->what, w->partial, strerror(-rc));
        al_http_creq_cancel(c);
        return 0;
    }
    x->p->done_bytes += len;
    x->p->img->bytes_pulled += len;
    pull__progress(x->p, "layers", false);
    return 0;
}

/* The registry's own words from an error document ({"errors":[{"code","message"}]}). */
static void xfer__registry_message(struct xfer *x, char *out, size_t len)
{
    out[0] = '\0';
    if (!x->errbody.len)
        return;
    json_t *j = json_loadb(x->errbody.data, x->errbody.len, 0, NULL);
    json_t *e0 = json_array_get(json_object_get(j, "errors"), 0);
    const char *code = json_string_value(json_object_get(e0, "code"));
    const char *msg = json_string_value(json_object_get(e0, "message"));
    if (code || msg) {
        char esc[400];
        al_json_escape(msg ? msg : "", esc, sizeof esc);
        snprintf(out, len, " (%s%s%s)", code ? code : "", code && msg ? ": " : "", esc);
    }
    json_decref(j);
}

static void xfer__redirect(struct xfer *x)
{
    struct pull *p = x->p;
    if (++x->redirects > PULL_MAX_REDIRECTS) {
        xfer__fail(x, -ELOOP, "%s: more than %d redirects", x->what, PULL_MAX_REDIRECTS);
        return;
    }
    struct tpl_url to;
    struct al_error e = {0};
    if (tpl_url_parse(x->location, &x->url, &to, &e) < 0) {
        /* Not the location itself: a presigned one carries a signature. */
        xfer__fail(x, -EPROTO, "%s: the registry redirects to an invalid location: %s", x->what,
                   e.msg);
        return;
    }
    if (!to.tls && !pull__is_insecure(p, to.authority)) {
        xfer__fail(x, -EACCES,
                   "%s: the registry redirects to plain HTTP (%s), which only registries "
                   "listed in templates.insecure_registries may use",
                   x->what, to.authority);
        return;
    }
    if (strcmp(to.host, p->reg.host) != 0)
        x->foreign = true;
    x->url = to;
    int rc = xfer__start(x);
    if (rc)
        xfer__fail(x, rc, "%s: cannot follow the redirect: %s", x->what, strerror(-rc));
}

static void xfer__on_done(struct al_http_creq *c, int err, void *arg)
{
    struct xfer *x = arg;
    struct pull *p = x->p;
    x->c = NULL;
    if (x->rc) { /* failed in a callback */
        x->state = X_DONE;
        return;
    }
    if (err < 0) {
        /* A broken connection: resume (blobs) or repeat (documents) a few times. */
        bool timed_out = al_now_ns() >= p->deadline_ns;
        if (!timed_out && err != -ECANCELED && x->retries < PULL_MAX_RETRIES) {
            x->retries++;
            al_info("templates: %s of %s: %s; trying again (%d/%d)", x->what, p->img->reference,
                    al_http_creq_strerror(c), x->retries, PULL_MAX_RETRIES);
            if (!x->to_blob)
                al_buf_reset(&x->mem);
            int rc = xfer__start(x);
            if (rc == 0)
                return;
        }
        xfer__fail(x, err == -ECANCELED && timed_out ? -ETIMEDOUT : err, "%s of %s: %s", x->what,
                   p->img->reference,
                   timed_out ? "the pull took longer than its time limit"
                             : al_http_creq_strerror(c));
        x->state = X_DONE;
        return;
    }
    int st = x->status;
    if (st / 100 == 2) {
        x->state = X_DONE;
        return;
    }
    if ((st == 301 || st == 302 || st == 303 || st == 307 || st == 308) && x->location[0]) {
        al_buf_reset(&x->errbody);
        xfer__redirect(x);
        if (x->rc)
            x->state = X_DONE;
        return;
    }
    char rmsg[512];
    xfer__registry_message(x, rmsg, sizeof rmsg);
    if (st == 401 && !x->foreign && !p->auth_tried) {
        x->need_auth = true;
        x->state = X_DONE;
        return;
    }
    if (st == 401 || st == 403)
        xfer__fail(x, -EACCES, "%s of %s: the registry refused access (%d)%s: %s", x->what,
                   p->img->reference, st, rmsg,
                   p->o->creds ? "check the credentials (fromImageRegistry) and that they may "
                                 "pull this repository"
                               : "the repository is private or does not exist; give credentials "
                                 "(fromImageRegistry) if it is private");
    else if (st == 404)
        xfer__fail(x, -ENOENT, "%s of %s: not found in the registry%s", x->what, p->img->reference,
                   rmsg);
    else if (st == 429)
        xfer__fail(x, -EBUSY, "%s of %s: the registry limits the rate of pulls (429)%s; try later",
                   x->what, p->img->reference, rmsg);
    else
        xfer__fail(x, -EPROTO, "%s of %s: the registry answered %d%s", x->what, p->img->reference,
                   st, rmsg);
    x->state = X_DONE;
}

static int xfer__start(struct xfer *x)
{
    struct pull *p = x->p;
    struct al_http_header h[5];
    size_t n = 0;
    char range[64];
    h[n++] = (struct al_http_header){"User-Agent", PULL_USER_AGENT};
    if (x->accept)
        h[n++] = (struct al_http_header){"Accept", x->accept};
    if (p->auth && !x->foreign)
        h[n++] = (struct al_http_header){"Authorization", p->auth};
    x->range_sent = false;
    if (x->to_blob && x->blob.off > 0) {
        snprintf(range, sizeof range, "bytes=%llu-", (unsigned long long)x->blob.off);
        h[n++] = (struct al_http_header){"Range", range};
        x->range_sent = true;
    }
    x->status = 0;
    x->body_ok = false;
    x->need_auth = false;
    al_buf_reset(&x->errbody);
    struct al_http_creq_opts o = {
        .target = x->url.target,
        .method = "GET",
        .path = x->url.path,
        .headers = h,
        .n_headers = n,
        .timeout_ms = 60000,
        .on_response = xfer__on_response,
        .on_data = xfer__on_data,
        .on_done = xfer__on_done,
        .arg = x,
        .pool = p->pool,
        .tls = p->tls,
        .wipe = p->auth != NULL,
    };
    x->state = X_RUNNING;
    x->last_ns = al_now_ns();
    int rc = al_http_creq_start(&p->loop, &o, &x->c);
    if (rc)
        x->state = X_DONE;
    return rc;
}

static void xfer__init(struct xfer *x, struct pull *p, const char *what, const char *path,
                       const char *accept, size_t mem_max)
{
    memset(x, 0, sizeof *x);
    x->p = p;
    x->what = what;
    x->accept = accept;
    x->url = p->reg;
    snprintf(x->url.path, sizeof x->url.path, "%s", path);
    al_buf_init(&x->mem, mem_max);
    al_buf_init(&x->errbody, PULL_ERRBODY_MAX);
    x->blob.fd = x->blob.lock_fd = -1;
}

static void xfer__free(struct xfer *x)
{
    if (x->blob_open)
        tpl_cache_abort(&x->blob, true);
    x->blob_open = false;
    al_buf_free(&x->mem);
    al_buf_free(&x->errbody);
}

/* ---- authentication ------------------------------------------------------------------ */

static void pull__set_auth(struct pull *p, const char *scheme, const char *value, size_t vlen)
{
    if (p->auth)
        sodium_free(p->auth);
    size_t sl = strlen(scheme);
    p->auth_size = sl + 1 + vlen + 1;
    p->auth = sodium_malloc(p->auth_size);
    if (!p->auth)
        return;
    memcpy(p->auth, scheme, sl);
    p->auth[sl] = ' ';
    memcpy(p->auth + sl + 1, value, vlen);
    p->auth[sl + 1 + vlen] = '\0';
}

/* "Basic base64(user:pass)" in sodium memory. */
static char *pull__basic(const struct tpl_creds *cr, size_t *size)
{
    const char *u = tpl__creds_user(cr), *pw = tpl__creds_pass(cr);
    size_t ul = strlen(u), pl = strlen(pw);
    char *raw = sodium_malloc(ul + pl + 2);
    size_t bl = sodium_base64_ENCODED_LEN(ul + pl + 1, sodium_base64_VARIANT_ORIGINAL);
    char *b64 = sodium_malloc(bl);
    if (!raw || !b64) {
        sodium_free(raw);
        sodium_free(b64);
        return NULL;
    }
    memcpy(raw, u, ul);
    raw[ul] = ':';
    memcpy(raw + ul + 1, pw, pl);
    sodium_bin2base64(b64, bl, (unsigned char *)raw, ul + pl + 1, sodium_base64_VARIANT_ORIGINAL);
    sodium_free(raw);
    *size = bl;
    return b64;
}

/* Reads the parameters of a challenge: key="value" or key=token, comma separated. */
static int auth__param(const char *params, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);
    const char *p = params;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *k = p;
        while (*p && *p != '=' && *p != ',' && *p != ' ')
            p++;
        size_t this_kl = (size_t)(p - k);
        if (*p != '=')
            continue;
        p++;
        char v[1024];
        size_t vl = 0;
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1])
                    p++;
                if (vl + 1 < sizeof v)
                    v[vl++] = *p;
                p++;
            }
            if (*p == '"')
                p++;
        } else {
            while (*p && *p != ',' && *p != ' ') {
                if (vl + 1 < sizeof v)
                    v[vl++] = *p;
                p++;
            }
        }
        v[vl] = '\0';
        if (this_kl == kl && strncasecmp(k, key, kl) == 0) {
            snprintf(out, len, "%s", v);
            return 0;
        }
    }
    return -ENOENT;
}

static int pull__run(struct pull *p, struct xfer **xs, size_t n, unsigned conc,
                     struct al_error *err);

/* Answers the registry's challenge (x->www): a bearer token or basic credentials. */
static int pull__authenticate(struct pull *p, const char *www, struct al_error *err)
{
    p->auth_tried = true;
    const char *ref = p->img->reference;
    if (strncasecmp(www, "Basic", 5) == 0) {
        if (!p->o->creds)
            return al_error_set(err, -EACCES,
                                "%s: the registry wants a username and password (basic auth): "
                                "give them in fromImageRegistry",
                                ref);
        size_t bl;
        char *b = pull__basic(p->o->creds, &bl);
        if (!b)
            return al_error_set(err, -ENOMEM, "out of memory");
        pull__set_auth(p, "Basic", b, strlen(b));
        sodium_free(b);
        return p->auth ? 0 : al_error_set(err, -ENOMEM, "out of memory");
    }
    if (strncasecmp(www, "Bearer", 6) != 0)
        return al_error_set(err, -EPROTO,
                            "%s: the registry asks for an authentication this client does not "
                            "speak ('%.40s'): only Bearer and Basic",
                            ref, www);
    const char *params = www + 6;
    char realm[1024], service[512] = "", scope[1024] = "";
    if (auth__param(params, "realm", realm, sizeof realm) < 0)
        return al_error_set(err, -EPROTO, "%s: the registry's Bearer challenge has no realm", ref);
    auth__param(params, "service", service, sizeof service);
    if (auth__param(params, "scope", scope, sizeof scope) < 0)
        snprintf(scope, sizeof scope, "repository:%s:pull", p->ref.repository);
    struct tpl_url svc;
    struct al_error ue = {0};
    if (tpl_url_parse(realm, NULL, &svc, &ue) < 0)
        return al_error_set(err, -EPROTO,
                            "%s: the registry's token service '%.200s' is not a URL: %s", ref,
                            realm, ue.msg);
    if (!svc.tls && !pull__is_insecure(p, svc.authority))
        return al_error_set(err, -EACCES,
                            "%s: the registry's token service %s is plain HTTP, which only "
                            "registries listed in templates.insecure_registries may use",
                            ref, realm);
    struct al_buf q = AL_BUF_INIT;
    al_buf_appends(&q, svc.path);
    al_buf_appends(&q, strchr(svc.path, '?') ? "&" : "?");
    if (service[0]) {
        al_buf_appends(&q, "service=");
        pct__encode(&q, service);
        al_buf_appends(&q, "&");
    }
    al_buf_appends(&q, "scope=");
    pct__encode(&q, scope);
    if (!q.data || q.len >= PULL_URL_MAX) {
        al_buf_free(&q);
        return al_error_set(err, -ENAMETOOLONG, "%s: the token request is too long", ref);
    }
    struct xfer x;
    xfer__init(&x, p, "token", q.data, "application/json", PULL_TOKEN_MAX);
    al_buf_free(&q);
    memcpy(svc.path, x.url.path, sizeof svc.path); /* the realm's path with the query */
    x.url = svc;
    /* The credentials go to the token service (a Basic header of their own); without them
     * the token is anonymous. */
    char *saved = p->auth;
    size_t saved_size = p->auth_size;
    p->auth = NULL;
    if (p->o->creds) {
        size_t bl;
        char *b = pull__basic(p->o->creds, &bl);
        if (!b) {
            xfer__free(&x);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
        pull__set_auth(p, "Basic", b, strlen(b));
        sodium_free(b);
    }
    struct xfer *xs[1] = {&x};
    struct al_error e = {0};
    int rc = pull__run(p, xs, 1, 1, &e);
    if (p->auth)
        sodium_free(p->auth);
    p->auth = saved;
    p->auth_size = saved_size;
    if (rc == 0 && x.need_auth)
        rc = al_error_set(&e, -EACCES, "%s: the token service %s refused %s", ref, svc.authority,
                          p->o->creds ? "the credentials (fromImageRegistry)"
                                      : "an anonymous pull: give credentials (fromImageRegistry)");
    if (rc) {
        sodium_memzero(x.mem.data ? x.mem.data : (char *)"", x.mem.len);
        xfer__free(&x);
        return al_error_set(err, rc, "%s", e.msg);
    }
    json_t *j = json_loadb(x.mem.data, x.mem.len, 0, NULL);
    sodium_memzero(x.mem.data, x.mem.len);
    xfer__free(&x);
    json_t *tok = json_object_get(j, "token");
    if (!json_is_string(tok) || !json_string_length(tok))
        tok = json_object_get(j, "access_token");
    if (!json_is_string(tok) || !json_string_length(tok)) {
        json_decref(j);
        return al_error_set(err, -EPROTO, "%s: the token service %s answered without a token", ref,
                            svc.authority);
    }
    pull__set_auth(p, "Bearer", json_string_value(tok), json_string_length(tok));
    /* Every string of the answer (the token, a refresh token) is wiped before it is freed. */
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v)
    {
        if (json_is_string(v))
            sodium_memzero((char *)json_string_value(v), json_string_length(v));
    }
    json_decref(j);
    return p->auth ? 0 : al_error_set(err, -ENOMEM, "out of memory");
}

/* ---- the driver ---------------------------------------------------------------------- */

static void pull__on_tick(uv_timer_t *t)
{
    (void)t; /* wakes uv_run: waiting transfers try their lock again, stalls are checked */
}

/* Begins a blob transfer: 1 = nothing to do (cached), 0 = started or waiting. */
static int pull__begin_blob(struct pull *p, struct xfer *x)
{
    struct al_error e = {0};
    int rc = tpl_cache_begin(p->o->cache_dir, x->digest, &x->blob, &e);
    if (rc == 1) {
        x->state = X_DONE;
        return 1;
    }
    if (rc == -EAGAIN) {
        x->state = X_WAIT_LOCK;
        return 0;
    }
    if (rc < 0) {
        x->rc = rc;
        x->err = e;
        x->state = X_DONE;
        return 0;
    }
    x->blob_open = true;
    p->done_bytes += x->blob.off; /* resumed */
    rc = xfer__start(x);
    if (rc)
        xfer__fail(x, rc, "%s: cannot start the download: %s", x->what, strerror(-rc));
    return 0;
}

/* Runs transfers, at most conc at once, until all are done. A 401 is answered once for
 * all of them. Returns the first failure. */
static int pull__run(struct pull *p, struct xfer **xs, size_t n, unsigned conc,
                     struct al_error *err)
{
    for (;;) {
        size_t running = 0, waiting = 0, pending = 0;
        for (size_t i = 0; i < n; i++) {
            struct xfer *x = xs[i];
            if (x->state == X_DONE && x->need_auth && !x->rc) {
                if (p->auth_tried) {
                    x->need_auth = false;
                    x->status = 401;
                    xfer__fail(x, -EACCES, "%s of %s: the registry refused the credentials",
                               x->what, p->img->reference);
                } else {
                    struct al_error e = {0};
                    int rc = pull__authenticate(p, x->www, &e);
                    if (rc) {
                        x->rc = rc;
                        x->err = e;
                    } else {
                        x->need_auth = false;
                        if ((rc = xfer__start(x)))
                            xfer__fail(x, rc, "%s: %s", x->what, strerror(-rc));
                    }
                }
            }
            if (x->state == X_RUNNING)
                running++;
            else if (x->state == X_WAIT_LOCK)
                waiting++;
            else if (x->state == X_IDLE)
                pending++;
        }
        for (size_t i = 0; i < n; i++) {
            struct xfer *x = xs[i];
            if (x->state == X_DONE && x->rc) {
                /* The others are stopped; their partial files stay for a resume. */
                for (size_t k = 0; k < n; k++)
                    if (xs[k]->state == X_RUNNING && xs[k]->c)
                        al_http_creq_cancel(xs[k]->c);
                uv_timer_stop(&p->tick);
                uv_run(&p->loop, UV_RUN_DEFAULT);
                for (size_t k = 0; k < n; k++)
                    if (xs[k]->state != X_DONE)
                        xs[k]->state = X_DONE;
                return al_error_set(err, x->rc, "%s", x->err.msg);
            }
        }
        if (running + waiting + pending == 0) {
            uv_timer_stop(&p->tick);
            return 0;
        }
        for (size_t i = 0; i < n && running < conc; i++) {
            struct xfer *x = xs[i];
            if (x->state == X_WAIT_LOCK || x->state == X_IDLE) {
                if (x->to_blob)
                    pull__begin_blob(p, x);
                else if (xfer__start(x))
                    xfer__fail(x, -EIO, "%s: cannot start the request", x->what);
                if (x->state == X_RUNNING)
                    running++;
            }
        }
        bool wait_lock = false;
        uint64_t now = al_now_ns();
        for (size_t i = 0; i < n; i++) {
            struct xfer *x = xs[i];
            wait_lock |= x->state == X_WAIT_LOCK;
            if (x->state == X_RUNNING && x->c && now - x->last_ns > PULL_STALL_NS) {
                xfer__fail(x, -ETIMEDOUT, "%s of %s: no data from the registry for %llu s", x->what,
                           p->img->reference, (unsigned long long)(PULL_STALL_NS / 1000000000ull));
                al_http_creq_cancel(x->c);
            }
        }
        uint64_t every = wait_lock ? 50 : 1000;
        if (uv_timer_get_repeat(&p->tick) != every || !uv_is_active((uv_handle_t *)&p->tick))
            uv_timer_start(&p->tick, pull__on_tick, every, every);
        if (al_now_ns() >= p->deadline_ns) {
            for (size_t i = 0; i < n; i++) {
                if (xs[i]->state == X_RUNNING && xs[i]->c)
                    al_http_creq_cancel(xs[i]->c);
                else if (xs[i]->state != X_DONE)
                    xfer__fail(xs[i], -ETIMEDOUT, "%s of %s: the pull took longer than %u s",
                               xs[i]->what, p->img->reference, p->lim.timeout_s);
                xs[i]->state = X_DONE;
            }
            uv_timer_stop(&p->tick);
            continue;
        }
        uv_run(&p->loop, UV_RUN_ONCE);
    }
}

/* ---- documents ----------------------------------------------------------------------- */

/* Fetches a document (manifest, index, config) into memory; checks its digest if known. */
/* A document fetched whole: what it is (for messages), its path, the Accept header (NULL:
 * none), its bound, and the digest it must have (NULL: any, as for a manifest by tag). */
struct pull__doc_req {
    const char *what, *path, *accept;
    size_t max;
    const char *digest;
};

/* What pull__document got: the bytes (malloc'd, NUL-terminated) and their Content-Type. */
struct pull__doc {
    char *data;
    size_t len;
    char ctype[128];
};

static int pull__document(struct pull *p, const struct pull__doc_req *rq, struct pull__doc *out,
                          struct al_error *err)
{
    const char *what = rq->what, *digest = rq->digest;
    struct xfer x;
    xfer__init(&x, p, what, rq->path, rq->accept, rq->max);
    struct xfer *xs[1] = {&x};
    int rc = pull__run(p, xs, 1, 1, err);
    if (rc) {
        xfer__free(&x);
        return rc;
    }
    if (digest) {
        char got[TPL_DIGEST_LEN + 1];
        tpl_sha256_digest(x.mem.data ? x.mem.data : "", x.mem.len, got);
        if (strcmp(got, digest) != 0) {
            xfer__free(&x);
            return al_error_set(err, -EBADMSG,
                                "the %s of %s has the digest %s, not %s: refused (a tampered or "
                                "corrupted answer)",
                                what, p->img->reference, got, digest);
        }
    }
    snprintf(out->ctype, sizeof out->ctype, "%s", x.ctype);
    size_t l = x.mem.len;
    char *d = al_buf_steal(&x.mem, &l);
    xfer__free(&x);
    out->data = d ? d : strdup("");
    out->len = l;
    return out->data ? 0 : al_error_set(err, -ENOMEM, "out of memory");
}

static const char *pull__media_type(json_t *doc, const char *ctype)
{
    const char *mt = json_string_value(json_object_get(doc, "mediaType"));
    if (mt)
        return mt;
    return ctype;
}

static bool mt__is(const char *mt, const char *want)
{
    size_t n = strlen(want);
    return mt && strncmp(mt, want, n) == 0 && (mt[n] == '\0' || mt[n] == ';' || mt[n] == ' ');
}

/* A descriptor's digest and size, checked. */
static int pull__descriptor(const json_t *d, const char *what, uint64_t max, char *digest,
                            uint64_t *size, struct al_error *err)
{
    const char *dg = json_string_value(json_object_get(d, "digest"));
    json_t *sz = json_object_get(d, "size");
    if (!dg || !tpl_digest_valid(dg))
        return al_error_set(err, -EBADMSG,
                            "%s: missing or unsupported digest '%s' (only sha256 is accepted)",
                            what, dg ? dg : "");
    if (!json_is_integer(sz) || json_integer_value(sz) < 0)
        return al_error_set(err, -EBADMSG, "%s: missing or negative size", what);
    if ((uint64_t)json_integer_value(sz) > max)
        return al_error_set(err, -EFBIG, "%s is %lld bytes, more than the %llu allowed", what,
                            (long long)json_integer_value(sz), (unsigned long long)max);
    snprintf(digest, TPL_DIGEST_LEN + 1, "%s", dg);
    *size = (uint64_t)json_integer_value(sz);
    return 0;
}

/* The linux/amd64 entry of an index. */
static int pull__choose(struct pull *p, json_t *index, char *digest, uint64_t *size,
                        struct al_error *err)
{
    json_t *ms = json_object_get(index, "manifests");
    if (!json_is_array(ms))
        return al_error_set(err, -EBADMSG, "the index of %s has no manifests list",
                            p->img->reference);
    size_t i;
    json_t *m;
    char seen[256] = "";
    size_t sl = 0;
    json_array_foreach(ms, i, m)
    {
        json_t *pf = json_object_get(m, "platform");
        const char *os = json_string_value(json_object_get(pf, "os"));
        const char *arch = json_string_value(json_object_get(pf, "architecture"));
        if (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, "amd64") == 0) {
            char what[64];
            snprintf(what, sizeof what, "the linux/amd64 entry of the index");
            return pull__descriptor(m, what, p->lim.max_manifest_bytes, digest, size, err);
        }
        if (os && arch && sl < sizeof seen - 40 && strcmp(os, "unknown") != 0)
            sl +=
                (size_t)snprintf(seen + sl, sizeof seen - sl, "%s%s/%s", sl ? ", " : "", os, arch);
    }
    return al_error_set(err, -ENOENT,
                        "%s has no linux/amd64 image (it has: %s): sandboxes run linux/amd64",
                        p->img->reference, sl ? seen : "none");
}

/* ---- layers -------------------------------------------------------------------------- */

static int pull__layer_type(const char *mt, const char *what, enum tpl_compression *c,
                            struct al_error *err)
{
    static const struct {
        const char *mt;
        enum tpl_compression c;
    } known[] = {
        {"application/vnd.oci.image.layer.v1.tar", TPL_COMP_NONE},
        {"application/vnd.oci.image.layer.v1.tar+gzip", TPL_COMP_GZIP},
        {"application/vnd.oci.image.layer.v1.tar+zstd", TPL_COMP_ZSTD},
        {"application/vnd.docker.image.rootfs.diff.tar.gzip", TPL_COMP_GZIP},
        {"application/vnd.docker.image.rootfs.diff.tar", TPL_COMP_NONE},
    };
    for (size_t i = 0; mt && i < sizeof known / sizeof known[0]; i++) {
        if (strcmp(mt, known[i].mt) == 0) {
            *c = known[i].c;
            return 0;
        }
    }
    if (mt && (strstr(mt, "foreign") || strstr(mt, "nondistributable")))
        return al_error_set(err, -ENOTSUP,
                            "%s is a foreign (non-distributable) layer (%s), which is not "
                            "pulled: such layers are Windows base images",
                            what, mt);
    return al_error_set(err, -ENOTSUP, "%s has the media type '%s', which is not a layer", what,
                        mt ? mt : "(none)");
}

static int pull__config(struct pull *p, const char *digest, uint64_t size, struct al_error *err)
{
    struct tpl_image *img = p->img;
    char *data = NULL;
    size_t len = 0;
    int rc;
    char path[PULL_URL_MAX];
    if (size > p->lim.max_config_bytes)
        return al_error_set(
            err, -EFBIG, "the config of %s is %llu bytes, more than the %llu allowed",
            img->reference, (unsigned long long)size, (unsigned long long)p->lim.max_config_bytes);
    struct al_error e = {0};
    rc = tpl_cache_read(p->o->cache_dir, digest, p->lim.max_config_bytes, &data, &len, &e);
    if (rc) {
        snprintf(path, sizeof path, "/v2/%s/blobs/%s", p->ref.repository, digest);
        struct pull__doc d;
        rc = pull__document(
            p, &(struct pull__doc_req){"config", path, NULL, p->lim.max_config_bytes, digest}, &d,
            err);
        if (rc)
            return rc;
        data = d.data;
        len = d.len;
        if ((rc = tpl_cache_put(p->o->cache_dir, digest, data, len, err))) {
            free(data);
            return rc;
        }
    }
    if (len != size) {
        free(data);
        return al_error_set(err, -EBADMSG,
                            "the config of %s is %zu bytes where the manifest says %llu",
                            img->reference, len, (unsigned long long)size);
    }
    struct al_error je = {0};
    img->config = al_json_parse(data, len, &je);
    free(data);
    if (!json_is_object(img->config))
        return al_error_set(err, -EBADMSG, "the config of %s is not a JSON object: %s",
                            img->reference, je.msg);
    const char *os = json_string_value(json_object_get(img->config, "os"));
    const char *arch = json_string_value(json_object_get(img->config, "architecture"));
    if ((os && strcmp(os, "linux") != 0) || (arch && strcmp(arch, "amd64") != 0))
        return al_error_set(err, -ENOTSUP, "%s is a %s/%s image: sandboxes run linux/amd64",
                            img->reference, os ? os : "?", arch ? arch : "?");
    json_t *ids = json_object_get(json_object_get(img->config, "rootfs"), "diff_ids");
    if (!json_is_array(ids) || json_array_size(ids) != img->n_layers)
        return al_error_set(err, -EBADMSG,
                            "the config of %s lists %zu layer digests (rootfs.diff_ids) for %zu "
                            "layers",
                            img->reference, json_is_array(ids) ? json_array_size(ids) : 0,
                            img->n_layers);
    for (size_t i = 0; i < img->n_layers; i++) {
        const char *d = json_string_value(json_array_get(ids, i));
        if (!d || !tpl_digest_valid(d))
            return al_error_set(err, -EBADMSG,
                                "the config of %s: diff_id %zu is not a sha256 digest",
                                img->reference, i + 1);
        snprintf(img->layers[i].diff_id, sizeof img->layers[i].diff_id, "%s", d);
    }
    return 0;
}

static int pull__manifest(struct pull *p, json_t *m, struct al_error *err)
{
    struct tpl_image *img = p->img;
    json_t *cfg = json_object_get(m, "config");
    uint64_t csize;
    int rc = pull__descriptor(cfg, "the manifest's config", p->lim.max_config_bytes,
                              img->config_digest, &csize, err);
    if (rc)
        return rc;
    json_t *layers = json_object_get(m, "layers");
    if (!json_is_array(layers) || json_array_size(layers) == 0)
        return al_error_set(err, -EBADMSG, "the manifest of %s has no layers", img->reference);
    if (json_array_size(layers) > p->lim.max_layers)
        return al_error_set(err, -EFBIG, "%s has %zu layers, more than the %u allowed",
                            img->reference, json_array_size(layers), p->lim.max_layers);
    size_t i;
    json_t *l;
    img->n_layers = json_array_size(layers);
    json_array_foreach(layers, i, l)
    {
        char what[64];
        snprintf(what, sizeof what, "layer %zu of %s", i + 1, img->reference);
        struct tpl_layer *t = &img->layers[i];
        if ((rc = pull__descriptor(l, what, p->lim.max_layer_bytes, t->digest, &t->size, err)))
            return rc;
        if ((rc = pull__layer_type(json_string_value(json_object_get(l, "mediaType")), what,
                                   &t->compression, err)))
            return rc;
        if (img->bytes + t->size > p->lim.max_image_bytes)
            return al_error_set(err, -EFBIG,
                                "the layers of %s are more than the %llu bytes allowed",
                                img->reference, (unsigned long long)p->lim.max_image_bytes);
        img->bytes += t->size;
    }
    return pull__config(p, img->config_digest, csize, err);
}

static int pull__layers(struct pull *p, struct al_error *err)
{
    struct tpl_image *img = p->img;
    struct xfer *xs = calloc(img->n_layers, sizeof *xs);
    struct xfer **xp = calloc(img->n_layers, sizeof *xp);
    char(*whats)[48] = calloc(img->n_layers, sizeof *whats);
    if (!xs || !xp || !whats) {
        free(xs);
        free(xp);
        free(whats);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    size_t n = 0;
    for (size_t i = 0; i < img->n_layers; i++) {
        bool dup = false; /* one download per digest */
        for (size_t k = 0; k < i; k++)
            dup |= strcmp(img->layers[k].digest, img->layers[i].digest) == 0;
        if (dup)
            continue;
        char path[PULL_URL_MAX];
        snprintf(whats[n], sizeof whats[n], "layer %zu/%zu", i + 1, img->n_layers);
        snprintf(path, sizeof path, "/v2/%s/blobs/%s", p->ref.repository, img->layers[i].digest);
        xfer__init(&xs[n], p, whats[n], path, NULL, 0);
        xs[n].to_blob = true;
        snprintf(xs[n].digest, sizeof xs[n].digest, "%s", img->layers[i].digest);
        xs[n].expect = img->layers[i].size;
        xp[n] = &xs[n];
        n++;
    }
    pull__progress(p, "layers", true);
    int rc = pull__run(p, xp, n, p->o->concurrency ? p->o->concurrency : 4, err);
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct xfer *x = &xs[i];
        if (x->blob_open) {
            x->blob_open = false;
            rc = tpl_cache_commit(&x->blob, x->expect, err);
            if (rc)
                al_error_prefix(err, "%s of %s", x->what, img->reference);
        } else {
            p->done_bytes += x->expect; /* was in the cache */
        }
        p->layers_done++;
    }
    for (size_t i = 0; i < n; i++)
        xfer__free(&xs[i]);
    free(xs);
    free(xp);
    free(whats);
    pull__progress(p, "done", true);
    return rc;
}

/* ---- the pull ------------------------------------------------------------------------ */

static int pull__do(struct pull *p, struct al_error *err)
{
    struct tpl_image *img = p->img;
    char path[PULL_URL_MAX];
    const char *want = p->ref.digest[0] ? p->ref.digest : p->ref.tag;
    snprintf(path, sizeof path, "/v2/%s/manifests/%s", p->ref.repository, want);
    struct pull__doc d;
    pull__progress(p, "manifest", true);
    int rc = pull__document(p,
                            &(struct pull__doc_req){"manifest", path, MANIFEST_ACCEPTS,
                                                    p->lim.max_manifest_bytes,
                                                    p->ref.digest[0] ? p->ref.digest : NULL},
                            &d, err);
    if (rc)
        return rc;
    char digest[TPL_DIGEST_LEN + 1];
    tpl_sha256_digest(d.data, d.len, digest);
    struct al_error je = {0};
    json_t *m = al_json_parse(d.data, d.len, &je);
    free(d.data);
    if (!json_is_object(m)) {
        json_decref(m);
        return al_error_set(err, -EBADMSG, "the manifest of %s is not a JSON object: %s",
                            img->reference, je.msg);
    }
    const char *mt = pull__media_type(m, d.ctype);
    if (mt__is(mt, MT_OCI_INDEX) || mt__is(mt, MT_DOCKER_LIST) ||
        (!mt && json_is_array(json_object_get(m, "manifests")))) {
        snprintf(img->index_digest, sizeof img->index_digest, "%s", digest);
        uint64_t msize;
        rc = pull__choose(p, m, digest, &msize, err);
        json_decref(m);
        if (rc)
            return rc;
        snprintf(path, sizeof path, "/v2/%s/manifests/%s", p->ref.repository, digest);
        rc = pull__document(p,
                            &(struct pull__doc_req){"manifest", path,
                                                    MT_OCI_MANIFEST ", " MT_DOCKER_MANIF,
                                                    p->lim.max_manifest_bytes, digest},
                            &d, err);
        if (rc)
            return rc;
        m = al_json_parse(d.data, d.len, &je);
        free(d.data);
        if (!json_is_object(m)) {
            json_decref(m);
            return al_error_set(err, -EBADMSG,
                                "the linux/amd64 manifest of %s is not a JSON "
                                "object: %s",
                                img->reference, je.msg);
        }
        mt = pull__media_type(m, d.ctype);
    }
    snprintf(img->digest, sizeof img->digest, "%s", digest);
    if (mt && strncmp(mt, MT_DOCKER_V1, strlen(MT_DOCKER_V1)) == 0) {
        json_decref(m);
        return al_error_set(err, -ENOTSUP,
                            "%s is a Docker schema 1 image, which is not pulled (deprecated and "
                            "unverifiable): push it again with a current Docker or skopeo",
                            img->reference);
    }
    if (mt && !mt__is(mt, MT_OCI_MANIFEST) && !mt__is(mt, MT_DOCKER_MANIF)) {
        json_decref(m);
        return al_error_set(err, -ENOTSUP, "%s: unsupported manifest media type '%s'",
                            img->reference, mt);
    }
    rc = pull__manifest(p, m, err);
    json_decref(m);
    if (rc)
        return rc;
    return pull__layers(p, err);
}

static int pull__audit(struct pull *p, int rc, const struct al_error *err, uint64_t t0)
{
    const struct tpl_image *img = p->img;
    json_t *r = json_object();
    json_object_set_new(r, "event", json_string("template_pull"));
    json_object_set_new(r, "reference", json_string(img->reference));
    json_object_set_new(r, "registry", json_string(p->ref.registry));
    json_object_set_new(r, "repository", json_string(p->ref.repository));
    if (img->digest[0])
        json_object_set_new(r, "digest", json_string(img->digest));
    if (img->index_digest[0])
        json_object_set_new(r, "index_digest", json_string(img->index_digest));
    if (img->config_digest[0])
        json_object_set_new(r, "config_digest", json_string(img->config_digest));
    json_object_set_new(r, "layers", json_integer((json_int_t)img->n_layers));
    json_object_set_new(r, "bytes", json_integer((json_int_t)img->bytes));
    json_object_set_new(r, "bytes_pulled", json_integer((json_int_t)img->bytes_pulled));
    json_object_set_new(r, "requested_by",
                        json_string(p->o->requested_by ? p->o->requested_by : "unknown"));
    json_object_set_new(r, "credentials", json_boolean(p->o->creds != NULL));
    json_object_set_new(r, "result", json_string(rc ? "error" : "ok"));
    if (rc)
        json_object_set_new(r, "error", json_string(err && err->msg[0] ? err->msg : strerror(-rc)));
    json_object_set_new(r, "duration_ms", json_integer((json_int_t)((al_now_ns() - t0) / 1000000)));
    int a = p->o->audit(r, p->o->audit_arg);
    json_decref(r);
    return a;
}

int tpl_oci_pull(const struct tpl_pull_opts *o, struct tpl_image *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    if (!o || !o->reference || !o->registries || !o->cache_dir || !o->audit)
        return al_error_set(err, -EINVAL,
                            "tpl_oci_pull needs a reference, the registries, a cache directory "
                            "and an audit log");
    if (sodium_init() < 0)
        return al_error_set(err, -EIO, "libsodium failed to initialise");
    uint64_t t0 = al_now_ns();
    struct pull p = {.o = o, .img = out};
    tpl_limits_resolve(o->limits, &p.lim);
    snprintf(out->cache_dir, sizeof out->cache_dir, "%s", o->cache_dir);
    snprintf(out->reference, sizeof out->reference, "%s", o->reference);
    int rc = tpl_ref_parse(o->reference, &p.ref, err);
    if (rc == 0) {
        tpl_ref_format(&p.ref, out->reference, sizeof out->reference);
        rc = tpl_registry_check(o->registries, p.ref.registry, err);
    }
    bool loop_ok = false;
    if (rc == 0) {
        const char *host =
            strcmp(p.ref.registry, TPL_DOCKER_HUB) == 0 ? "registry-1.docker.io" : p.ref.registry;
        p.insecure = pull__is_insecure(&p, p.ref.registry);
        char url[300];
        snprintf(url, sizeof url, "%s://%s/", p.insecure ? "http" : "https", host);
        struct al_error ue = {0};
        if (tpl_url_parse(url, NULL, &p.reg, &ue) < 0)
            rc = al_error_set(err, -EINVAL, "%s: the registry '%s' is not a host[:port]: %s",
                              out->reference, p.ref.registry, ue.msg);
        p.deadline_ns = t0 + (uint64_t)p.lim.timeout_s * 1000000000ull;
        if (rc == 0 && !p.insecure) {
            struct al_http_tls_client_opts to = {.ca_file = o->registries->ca_file};
            rc = al_http_tls_client_new(&to, &p.tls, err);
        }
    }
    if (rc == 0 && (rc = uv_loop_init(&p.loop)) != 0)
        al_error_set(err, rc, "cannot create an event loop: %s", uv_strerror(rc));
    else if (rc == 0)
        loop_ok = true;
    if (loop_ok) {
        uv_timer_init(&p.loop, &p.tick);
        struct al_http_pool_opts po = {.max_idle = 16, .max_idle_per_target = 8};
        rc = al_http_pool_new(&p.loop, &po, &p.pool);
        if (rc)
            al_error_set(err, rc, "cannot make a connection pool: %s", strerror(-rc));
        else
            rc = pull__do(&p, err);
        if (p.pool)
            al_http_pool_close(p.pool);
        uv_close((uv_handle_t *)&p.tick, NULL);
        uv_run(&p.loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&p.loop))
            al_warn("templates: the pull's event loop did not close cleanly");
    }
    if (p.auth)
        sodium_free(p.auth);
    al_http_tls_client_free(p.tls);
    int a = pull__audit(&p, rc, err, t0);
    if (a < 0 && rc == 0)
        rc = al_error_set(err, a,
                          "%s was pulled, but the audit record could not be written (%s): "
                          "refused",
                          out->reference, strerror(-a));
    return rc;
}

int tpl_audit_to_log(const json_t *record, void *log)
{
    return al_auditlog_append(log, record, NULL);
}

void tpl_image_free(struct tpl_image *img)
{
    if (!img)
        return;
    json_decref(img->config);
    img->config = NULL;
}

json_t *tpl_image_template_json(const struct tpl_image *img)
{
    json_t *t = json_object();
    json_t *cfg = json_object_get(img->config, "config");
    json_t *env = json_object();
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(cfg, "Env"), i, v)
    {
        const char *s = json_string_value(v);
        const char *eq = s ? strchr(s, '=') : NULL;
        if (!eq || eq == s)
            continue;
        char k[256];
        size_t kl = (size_t)(eq - s);
        if (kl >= sizeof k)
            continue;
        memcpy(k, s, kl);
        k[kl] = '\0';
        json_object_set_new(env, k, json_string(eq + 1));
    }
    json_object_set_new(t, "env", env);
    const char *wd = json_string_value(json_object_get(cfg, "WorkingDir"));
    json_object_set_new(t, "workdir", json_string(wd && *wd ? wd : "/"));
    const char *user = json_string_value(json_object_get(cfg, "User"));
    json_object_set_new(t, "user", json_string(user && *user ? user : "root"));
    json_t *cmd = json_object_get(cfg, "Cmd"), *ep = json_object_get(cfg, "Entrypoint");
    if (json_is_array(cmd))
        json_object_set(t, "cmd", cmd);
    if (json_is_array(ep))
        json_object_set(t, "entrypoint", ep);
    json_t *im = json_object();
    json_object_set_new(im, "reference", json_string(img->reference));
    json_object_set_new(im, "digest", json_string(img->digest));
    if (img->index_digest[0])
        json_object_set_new(im, "index_digest", json_string(img->index_digest));
    json_object_set_new(im, "config_digest", json_string(img->config_digest));
    json_t *ls = json_array();
    for (size_t k = 0; k < img->n_layers; k++)
        json_array_append_new(ls, json_string(img->layers[k].digest));
    json_object_set_new(im, "layers", ls);
    json_object_set_new(im, "bytes", json_integer((json_int_t)img->bytes));
    json_object_set_new(t, "image", im);
    return t;
}
