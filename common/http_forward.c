/* common/http_forward: one streaming forwarder (http_forward.h).
 *
 * Owns: the state of one forwarded exchange. A forward holds the client's request until it
 * is answered, upgraded or gone (fw->req), the upstream request until its on_done (fw->creq)
 * and the client's body callbacks while they may still run (fw->body_streaming); it is
 * freed, after on_end, once it holds none of the three. The upstream's request head is kept
 * (one allocation with the forward) for a dial to the next target.
 */
#include "http_forward.h"
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FW__HIGH_WATER  (256u << 10)
#define FW__MAX_TARGETS 4

struct al_http_forward {
    uv_loop_t *loop;
    struct al_http_forward_opts o; /* targets, extras and label below are the forward's own */
    struct al_http_req *req;       /* NULL once answered, upgraded or gone */
    struct al_http_creq *creq;     /* NULL once done */
    size_t next_target;
    const char *targets[FW__MAX_TARGETS];
    struct al_http_header *head; /* the upstream's request head */
    size_t n_head;
    char *path;
    int status; /* what the client was answered with, for on_end */
    bool has_body;
    bool body_claimed; /* the client's body is being read (no other target from here) */
    bool body_streaming;
    bool resp_started;
    const char *label;
};

static void fw__maybe_free(struct al_http_forward *fw)
{
    if (fw->req || fw->creq || fw->body_streaming)
        return;
    if (fw->o.on_end)
        fw->o.on_end(fw->o.arg, fw->status);
    free(fw);
}

/* Releases the client's request (answered, upgraded or gone): no callback of it runs again. */
static struct al_http_req *fw__release(struct al_http_forward *fw)
{
    struct al_http_req *req = fw->req;
    fw->req = NULL;
    fw->body_streaming = false; /* ending the response stops the body callbacks */
    if (req)
        req->user = NULL;
    return req;
}

static void fw__reply(struct al_http_forward *fw, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fw__reply(struct al_http_forward *fw, int status, const char *fmt, ...)
{
    bool started = fw->resp_started;
    struct al_http_req *req = fw__release(fw);
    if (!req)
        return;
    if (started) {
        /* Too late for a status: cut the response short so the client sees a broken one. */
        fw->status = 502;
        al_http_resp_abort(req);
        return;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fw->status = status;
    if (fw->o.reply)
        fw->o.reply(fw->o.arg, req, status, msg);
    else
        al_http_reply_error(req, status, "%s", msg);
}

/* A head on its way to the next hop: its n fields h, whether it is a request's or a 101's,
 * the hook each field goes through (NULL: none) and the fields appended after them. */
struct fw__filter_in {
    const struct al_http_header *h;
    size_t n;
    bool request, upgrade;
    int (*hook)(void *, bool, const char *, const char **, char **);
    void *hook_arg;
    const struct al_http_header *extra;
    size_t n_extra;
};

/* The fields fw__filter passes on, and the values a hook allocated for them (owned: freed by
 * fw__head_free once the fields are used). */
struct fw__head {
    struct al_http_header h[AL_HTTP_FORWARD_MAX_HEADERS];
    char *owned[AL_HTTP_FORWARD_MAX_HEADERS];
    size_t n_owned;
};

/* The end-to-end fields of in->h for the next hop (Expect too, in a request: this hop's
 * server answers it, al_http_req_stream_body sending the 100), through the hook, then the
 * extra ones, into out->h; returns their number. */
static int fw__filter(const struct fw__filter_in *in, struct fw__head *out)
{
    const struct al_http_header *h = in->h;
    size_t k = 0;
    out->n_owned = 0;
    for (size_t i = 0; i < in->n; i++) {
        if (al_http_forward_drops_header(h, in->n, h[i].name,
                                         in->upgrade ? AL_HTTP_FWD_UPGRADE : 0) ||
            strcasecmp(h[i].name, "Content-Length") == 0 ||
            (in->request && strcasecmp(h[i].name, "Expect") == 0))
            continue;
        const char *v = h[i].value;
        if (in->hook) {
            char *own = NULL;
            int rc = in->hook(in->hook_arg, in->upgrade, h[i].name, &v, &own);
            if (own)
                out->owned[out->n_owned++] = own;
            if (rc < 0)
                return rc;
            if (rc > 0)
                continue;
        }
        if (k >= AL_HTTP_FORWARD_MAX_HEADERS - in->n_extra)
            return -E2BIG;
        out->h[k++] = (struct al_http_header){h[i].name, v};
    }
    for (size_t i = 0; i < in->n_extra; i++)
        out->h[k++] = in->extra[i];
    return (int)k;
}

static void fw__head_free(struct fw__head *hd)
{
    for (size_t i = 0; i < hd->n_owned; i++)
        free(hd->owned[i]);
}

/* Content-Length of a response head, -1 if it has none that is valid. */
static int64_t fw__content_length(const struct al_http_header *h, size_t n)
{
    int64_t cl = -1;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(h[i].name, "Content-Length") == 0) {
            char *end;
            long long v = strtoll(h[i].value, &end, 10);
            if (*h[i].value && !*end && v >= 0)
                cl = v;
        }
    return cl;
}

/* ---- the upstream's answer ------------------------------------------------------------- */

static void fw__client_drained(struct al_http_req *req)
{
    struct al_http_forward *fw = req->user;
    if (fw && fw->creq)
        al_http_creq_resume(fw->creq);
}

static int fw__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    struct al_http_forward *fw = arg;
    (void)c;
    if (!fw->req)
        return 1;
    struct fw__head out;
    int k = fw__filter(&(struct fw__filter_in){h, n, false, false, fw->o.response_field, fw->o.arg,
                                               fw->o.response_extra, fw->o.n_response_extra},
                       &out);
    int rc =
        k < 0 ? k : al_http_resp_start(fw->req, status, out.h, (size_t)k, fw__content_length(h, n));
    fw__head_free(&out);
    if (rc) {
        al_warn("%s: cannot relay the response (status %d): %s", fw->label, status, strerror(-rc));
        return 1; /* on_done follows with an error: the fail hook answers */
    }
    fw->status = status;
    fw->resp_started = true;
    return 0;
}

static int fw__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct al_http_forward *fw = arg;
    (void)c;
    if (!fw->req)
        return 0;
    if (al_http_resp_write(fw->req, data, len) < 0)
        return 0; /* the client is gone: on_close cancels us */
    if (al_http_resp_queued(fw->req) > fw->o.high_water) {
        al_http_resp_on_drain(fw->req, fw->o.low_water, fw__client_drained);
        return 1;
    }
    return 0;
}

static void fw__relay_done(int err, uint64_t up, uint64_t down, void *arg)
{
    char *label = arg;
    al_info("%s: upgraded connection closed (%llu bytes to it, %llu from it)%s%s", label,
            (unsigned long long)up, (unsigned long long)down, err ? ": " : "",
            err ? strerror(-err) : "");
    free(label);
}

static void fw__on_upgrade(struct al_http_creq *c, const struct al_http_header *h, size_t n,
                           struct al_http_tunnel *t, void *arg)
{
    struct al_http_forward *fw = arg;
    (void)c;
    if (!fw->req) {
        al_http_tunnel_close(t);
        return;
    }
    struct fw__head out = {.n_owned = 0}; /* (h zeroed: gcc -O2 cannot tell k covers it) */
    int k = fw__filter(&(struct fw__filter_in){h, n, false, true, fw->o.response_field, fw->o.arg,
                                               fw->o.upgrade_extra, fw->o.n_upgrade_extra},
                       &out);
    struct al_http_tunnel *down = NULL;
    int rc = k < 0 ? k : al_http_req_upgrade(fw->req, out.h, (size_t)k, &down);
    fw__head_free(&out);
    if (rc) {
        al_http_tunnel_close(t);
        if (rc == -EPIPE) { /* the client left: the request is released */
            fw->req = NULL;
            fw->body_streaming = false;
            return;
        }
        al_warn("%s: cannot switch the client's connection over: %s", fw->label, strerror(-rc));
        fw__reply(fw, 502,
                  "%s switched protocols, but the client's connection could not follow (%s)",
                  fw->label, strerror(-rc));
        return;
    }
    fw->req = NULL; /* released by the upgrade */
    fw->body_streaming = false;
    fw->status = 101;
    char *label = strdup(fw->label);
    rc = label ? al_http_relay(down, t, NULL, fw__relay_done, label) : -ENOMEM;
    if (rc) {
        al_warn("%s: cannot relay the upgraded connection: %s", fw->label, strerror(-rc));
        free(label);
    }
}

static int fw__start(struct al_http_forward *fw);

static void fw__on_done(struct al_http_creq *c, int err, void *arg)
{
    struct al_http_forward *fw = arg;
    fw->creq = NULL;
    if (!fw->req) {
        fw__maybe_free(fw);
        return;
    }
    const char *why = al_http_creq_strerror(c);
    if (!why || !*why)
        why = err ? strerror(-err) : "";
    if (err == 0) {
        struct al_http_req *req = fw__release(fw);
        al_http_resp_end(req);
    } else if (err == -ECONNREFUSED && fw->next_target < fw->o.n_targets && !fw->body_claimed &&
               !fw->resp_started) {
        /* Nothing listens there; the client's body is untouched: try the next target. */
        int rc = fw__start(fw);
        if (rc < 0)
            fw__reply(fw, 502, "%s: cannot forward the request: %s", fw->label, strerror(-rc));
    } else if (fw->resp_started) {
        al_info("%s: request %s %.120s failed in the middle of the response: %s", fw->label,
                fw->req->method, fw->req->path, why);
        fw__reply(fw, 502, "%s: %s", fw->label, why);
    } else if (fw->o.fail) {
        char msg[512];
        int status = fw->o.fail(fw->o.arg, fw->req, err, why, msg, sizeof msg);
        fw__reply(fw, status, "%s", msg);
    } else {
        al_info("%s: request %s %.120s failed: %s", fw->label, fw->req->method, fw->req->path, why);
        fw__reply(fw, 502, "%s: %s", fw->label, why);
    }
    fw__maybe_free(fw);
}

/* ---- the client's side ------------------------------------------------------------------- */

static void fw__cancel(struct al_http_forward *fw)
{
    if (fw->creq) {
        al_http_creq_cancel(fw->creq); /* on_done frees fw, now or from the loop */
        return;
    }
    fw__maybe_free(fw);
}

static void fw__up_drained(struct al_http_creq *c, void *arg)
{
    struct al_http_forward *fw = arg;
    (void)c;
    if (fw->req && fw->body_streaming)
        al_http_req_resume_body(fw->req);
}

static int fw__body_data(struct al_http_req *req, const char *data, size_t len)
{
    struct al_http_forward *fw = req->user;
    if (!fw || !fw->creq)
        return 0;
    if (al_http_creq_write(fw->creq, data, len) < 0)
        return 0; /* on_done reports it */
    if (al_http_creq_queued(fw->creq) > fw->o.high_water) {
        al_http_creq_on_drain(fw->creq, fw->o.low_water, fw__up_drained);
        return 1;
    }
    return 0;
}

static void fw__body_end(struct al_http_req *req, int err)
{
    struct al_http_forward *fw = req->user;
    if (!fw)
        return;
    fw->body_streaming = false;
    if (err == 0) {
        if (fw->creq)
            al_http_creq_end(fw->creq);
        return;
    }
    /* The client's body broke (or the client left): the request is released when we
     * return; the upstream's side is abandoned. */
    fw__release(fw);
    fw->status = 0;
    fw__cancel(fw);
}

static void fw__on_close(struct al_http_req *req)
{
    struct al_http_forward *fw = req->user;
    if (!fw)
        return;
    fw__release(fw);
    fw->status = 0; /* the client left first */
    fw__cancel(fw);
}

/* The upstream's connection is up and the request head written: the body may flow. */
static void fw__up_ready(struct al_http_creq *c, void *arg)
{
    struct al_http_forward *fw = arg;
    (void)c;
    if (!fw->req || fw->body_claimed)
        return;
    fw->body_claimed = true;
    fw->body_streaming = true;
    int rc = al_http_req_stream_body(fw->req, fw__body_data, fw__body_end);
    if (rc == -EALREADY && fw->resp_started) {
        /* The upstream answered before taking the body: ours discards it, as a server does. */
        fw->body_streaming = false;
        return;
    }
    if (rc) {
        fw->body_streaming = false;
        if (!fw->resp_started) /* the upstream has not answered: it will not get its body */
            fw__reply(fw, 400, "cannot read the request body: %s", strerror(-rc));
        if (fw->creq)
            al_http_creq_cancel(fw->creq);
    }
}

static int fw__start(struct al_http_forward *fw)
{
    struct al_http_req *req = fw->req;
    const char *upgrade = req->upgrade && !fw->has_body ? al_http_req_header(req, "Upgrade") : NULL;
    struct al_http_creq_opts o = {
        .target = fw->targets[fw->next_target++],
        .method = req->method,
        .path = fw->path,
        .headers = fw->head,
        .n_headers = fw->n_head,
        .stream_body = fw->has_body,
        .stream_length = fw->has_body && !req->chunked ? req->content_length : 0,
        .timeout_ms = fw->o.timeout_ms,
        .on_response = fw__on_response,
        .on_data = fw__on_data,
        .on_done = fw__on_done,
        .arg = fw,
        .pool = upgrade ? NULL : fw->o.pool,
        .upgrade = upgrade,
        .on_upgrade = upgrade ? fw__on_upgrade : NULL,
    };
    int rc = al_http_creq_start(fw->loop, &o, &fw->creq);
    if (rc) {
        fw->creq = NULL;
        return rc;
    }
    if (fw->has_body) /* the body is read once the upstream is there (so a retry stays possible) */
        al_http_creq_on_drain(fw->creq, 0, fw__up_ready);
    return 0;
}

/* Adapts request_field (which has no upgrade flag) to fw__filter's hook. */
static int fw__request_field(void *arg, bool upgrade, const char *name, const char **value,
                             char **owned)
{
    const struct al_http_forward_opts *o = arg;
    (void)upgrade;
    return o->request_field(o->arg, name, value, owned);
}

static size_t fw__size(const struct al_http_header *h, size_t n)
{
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(h[i].name) + strlen(h[i].value) + 2;
    return bytes;
}

static char *fw__str(char **s, const char *v)
{
    size_t len = strlen(v) + 1;
    char *d = memcpy(*s, v, len);
    *s += len;
    return d;
}

static struct al_http_header *fw__copy(struct al_http_header **slots, char **s,
                                       const struct al_http_header *h, size_t n)
{
    struct al_http_header *d = *slots;
    for (size_t i = 0; i < n; i++)
        d[i] = (struct al_http_header){fw__str(s, h[i].name), fw__str(s, h[i].value)};
    *slots += n;
    return d;
}

/* The forward, with its own copy of everything it uses after al_http_forward returns (the
 * upstream's request head and path, the targets, the extra response fields) in one block. */
static struct al_http_forward *fw__new(const struct al_http_forward_opts *o,
                                       const struct al_http_header *head, size_t n_head,
                                       const char *path)
{
    size_t slots = n_head + o->n_response_extra + o->n_upgrade_extra;
    size_t bytes = fw__size(head, n_head) + fw__size(o->response_extra, o->n_response_extra) +
                   fw__size(o->upgrade_extra, o->n_upgrade_extra) + strlen(path) + 1 +
                   strlen(o->label ? o->label : "upstream") + 1;
    for (size_t i = 0; i < o->n_targets; i++)
        bytes += strlen(o->targets[i]) + 1;
    struct al_http_forward *fw =
        calloc(1, sizeof *fw + slots * sizeof(struct al_http_header) + bytes);
    if (!fw)
        return NULL;
    fw->o = *o;
    struct al_http_header *slot = (struct al_http_header *)(fw + 1);
    char *s = (char *)(slot + slots);
    fw->head = fw__copy(&slot, &s, head, n_head);
    fw->n_head = n_head;
    fw->o.response_extra = fw__copy(&slot, &s, o->response_extra, o->n_response_extra);
    fw->o.upgrade_extra = fw__copy(&slot, &s, o->upgrade_extra, o->n_upgrade_extra);
    fw->o.request_extra = NULL; /* (used up) */
    fw->o.n_request_extra = 0;
    fw->path = fw__str(&s, path);
    fw->label = fw__str(&s, o->label ? o->label : "upstream");
    for (size_t i = 0; i < o->n_targets; i++)
        fw->targets[i] = fw__str(&s, o->targets[i]);
    fw->o.targets = NULL;
    return fw;
}

int al_http_forward(uv_loop_t *loop, struct al_http_req *req,
                    const struct al_http_forward_opts *opts)
{
    if (!loop || !req || !opts || !opts->targets || opts->n_targets == 0 ||
        opts->n_targets > FW__MAX_TARGETS || opts->n_request_extra > AL_HTTP_FORWARD_MAX_HEADERS ||
        opts->n_response_extra > AL_HTTP_FORWARD_MAX_HEADERS ||
        opts->n_upgrade_extra > AL_HTTP_FORWARD_MAX_HEADERS)
        return -EINVAL;
    for (size_t i = 0; i < opts->n_targets; i++)
        if (!opts->targets[i])
            return -EINVAL;
    struct fw__head head;
    int k = fw__filter(&(struct fw__filter_in){req->headers, req->n_headers, true, false,
                                               opts->request_field ? fw__request_field : NULL,
                                               (void *)opts, opts->request_extra,
                                               opts->n_request_extra},
                       &head);
    struct al_http_forward *fw =
        k >= 0 ? fw__new(opts, head.h, (size_t)k, opts->path ? opts->path : req->target) : NULL;
    fw__head_free(&head);
    if (k < 0)
        return k;
    if (!fw)
        return -ENOMEM;
    fw->loop = loop;
    if (!fw->o.high_water)
        fw->o.high_water = FW__HIGH_WATER;
    if (!fw->o.low_water || fw->o.low_water > fw->o.high_water)
        fw->o.low_water = fw->o.high_water / 4;
    fw->req = req;
    fw->has_body = req->chunked || req->content_length > 0;
    req->user = fw;
    int rc = fw__start(fw);
    if (rc < 0) {
        req->user = NULL;
        free(fw);
        return rc;
    }
    al_http_req_on_close(req, fw__on_close);
    return 0;
}
