/* common/http_sync: the blocking client of http.h (al_http_call, al_http_call_json), for
 * CLIs and setup code.
 *
 * Owns: nothing long-lived. Each call runs the asynchronous client on a private loop
 * (so parsing, limits and error messages are the same code), bounded by one deadline
 * for the whole exchange and by max_body for the response body.
 */
#include "http.h"
#include "cleanup.h"
#include "http_internal.h"
#include "json.h"
#include "log.h"

#include <assert.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SYNC_DEFAULT_TIMEOUT_MS 30000
#define SYNC_DEFAULT_MAX_BODY   (16 * 1024 * 1024)

struct sync_call {
    struct al_http_resp *out;
    size_t max_body;
    uint32_t timeout_ms;
    uv_timer_t deadline;
    struct al_http_creq *c;
    bool done;
    bool too_big;
    bool timed_out;
    int err;
    char msg[256];
};

static int sync__on_response(struct al_http_creq *c, int status, const struct al_http_header *h,
                             size_t n, void *arg)
{
    (void)c;
    struct sync_call *s = arg;
    s->out->status = status;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += strlen(h[i].name) + strlen(h[i].value) + 2;
    /* One allocation: the array, then the strings. */
    char *mem = malloc(n * sizeof(struct al_http_header) + bytes + 1);
    if (!mem)
        return -1;
    struct al_http_header *v = (struct al_http_header *)mem;
    char *p = mem + n * sizeof(struct al_http_header);
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(h[i].name) + 1, vl = strlen(h[i].value) + 1;
        memcpy(p, h[i].name, nl);
        v[i].name = p;
        p += nl;
        memcpy(p, h[i].value, vl);
        v[i].value = p;
        p += vl;
    }
    s->out->headers = v;
    s->out->n_headers = n;
    return 0;
}

static int sync__on_data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct sync_call *s = arg;
    if (al_buf_append(&s->out->body, data, len) != 0) {
        s->too_big = true;
        al_http_creq_cancel(c);
    }
    return 0;
}

static void sync__on_done(struct al_http_creq *c, int err, void *arg)
{
    struct sync_call *s = arg;
    s->done = true;
    s->err = err;
    snprintf(s->msg, sizeof s->msg, "%s", al_http_creq_strerror(c));
    s->c = NULL;
    uv_timer_stop(&s->deadline);
}

static void sync__on_deadline(uv_timer_t *t)
{
    struct sync_call *s = t->data;
    s->timed_out = true;
    if (s->c)
        al_http_creq_cancel(s->c);
}

/* The JSON text of a request that carries a secret is wiped before it is freed. */
static void sync__free_text(char *text, bool wipe)
{
    if (text && wipe)
        sodium_memzero(text, strlen(text));
    free(text);
}

int al_http_call(const struct al_http_call_opts *co, struct al_http_resp *out, struct al_error *err)
{
    assert(co && out);
    memset(out, 0, sizeof *out);
    const char *target = co->target, *method = co->method, *path = co->path;
    struct sync_call s = {.out = out};
    s.timeout_ms = co->timeout_ms ? co->timeout_ms : SYNC_DEFAULT_TIMEOUT_MS;
    s.max_body = co->max_body ? co->max_body : SYNC_DEFAULT_MAX_BODY;
    al_buf_init(&out->body, s.max_body);

    struct http__target t;
    char tmsg[256] = "";
    int rc = http__parse_target(target, &t, tmsg, sizeof tmsg);
    if (rc)
        return al_error_set(err, rc, "%s", tmsg);
    uv_loop_t loop;
    rc = uv_loop_init(&loop);
    if (rc)
        return al_error_set(err, rc, "cannot create an event loop: %s", uv_strerror(rc));
    uv_timer_init(&loop, &s.deadline);
    s.deadline.data = &s;
    struct al_http_creq_opts o = {
        .target = target,
        .method = method,
        .path = path,
        .headers = co->headers,
        .n_headers = co->n_headers,
        .body = co->body,
        .body_len = co->body_len,
        .timeout_ms = s.timeout_ms,
        .wipe = co->wipe,
        .on_response = sync__on_response,
        .on_data = sync__on_data,
        .on_done = sync__on_done,
        .arg = &s,
    };
    rc = al_http_creq_start(&loop, &o, &s.c);
    if (rc) {
        uv_close((uv_handle_t *)&s.deadline, NULL);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        al_buf_free(&out->body);
        if (rc == -EINVAL)
            return al_error_set(err, rc,
                                "invalid request '%s %s': the method must be a token, the path "
                                "must start with '/' without spaces or control characters, and "
                                "header values must not contain CR, LF or NUL",
                                method ? method : "(null)", path ? path : "(null)");
        return al_error_set(err, rc, "cannot start the request to %s: %s", target, strerror(-rc));
    }
    uv_timer_start(&s.deadline, sync__on_deadline, s.timeout_ms, 0);
    uv_run(&loop, UV_RUN_DEFAULT); /* ends when the request is done and handles are closed */
    uv_close((uv_handle_t *)&s.deadline, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    int lc = uv_loop_close(&loop);
    if (lc) /* a handle left open would be a bug here, and it would leak the loop */
        al_warn("http: private loop not closed: %s", uv_strerror(lc));
    if (s.too_big) {
        al_http_resp_free(out);
        return al_error_set(err, -EFBIG, "the response from %s %s is larger than %zu bytes", target,
                            path, s.max_body);
    }
    if (s.timed_out) {
        al_http_resp_free(out);
        return al_error_set(err, -ETIMEDOUT, "%s %s %s: no complete answer within %u ms", method,
                            target, path, s.timeout_ms);
    }
    if (s.err) {
        al_http_resp_free(out);
        return al_error_set(err, s.err, "%s %s %s: %s", method, target, path, s.msg);
    }
    if (!out->body.data && al_buf_reserve(&out->body, 0) == 0)
        out->body.data[0] = '\0';
    return 0;
}

int al_http_call_json(const struct al_http_call_opts *o, json_t *body, int *status, json_t **out,
                      struct al_error *err)
{
    assert(o && status && out);
    *out = NULL;
    if (o->body && body)
        return al_error_set(err, -EINVAL,
                            "al_http_call_json takes one body: JSON to encode or the options' "
                            "text, not both");
    char *req = NULL;
    if (body) {
        req = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!req)
            return al_error_set(err, -ENOMEM, "cannot encode the request body as JSON");
    }
    bool has_body = req || o->body;
    size_t n = o->n_headers + (has_body ? 2 : 1);
    al_autofree struct al_http_header *hdrs = calloc(n, sizeof *hdrs);
    if (!hdrs) {
        sync__free_text(req, o->wipe);
        return al_error_set(err, -ENOMEM, "out of memory for the request's headers");
    }
    if (o->n_headers)
        memcpy(hdrs, o->headers, o->n_headers * sizeof *hdrs);
    hdrs[o->n_headers] = (struct al_http_header){"Accept", "application/json"};
    if (has_body)
        hdrs[o->n_headers + 1] = (struct al_http_header){"Content-Type", "application/json"};
    struct al_http_call_opts co = *o;
    co.headers = hdrs;
    co.n_headers = n;
    if (req) {
        co.body = req;
        co.body_len = strlen(req);
    }
    struct al_http_resp r;
    int rc = al_http_call(&co, &r, err);
    sync__free_text(req, o->wipe);
    if (rc)
        return rc;
    *status = r.status;
    if (r.body.len) {
        struct al_error jerr = {0};
        *out = al_json_parse(r.body.data, r.body.len, &jerr);
        if (!*out) {
            rc = al_error_set(err, -EBADMSG,
                              "%s %s answered %d with a body that is not JSON "
                              "(%s): %.80s",
                              o->method, o->path, r.status, jerr.msg, r.body.data);
        }
    }
    al_http_resp_free(&r);
    return rc;
}

void al_http_resp_free(struct al_http_resp *r)
{
    if (!r)
        return;
    al_buf_free(&r->body);
    free(r->headers);
    r->headers = NULL;
    r->n_headers = 0;
}
