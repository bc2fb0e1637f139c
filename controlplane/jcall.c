/* controlplane/jcall: see jcall.h. */
#include "jcall.h"

#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/http.h"

#define JCALL_TIMEOUT_MS 10000
#define JCALL_ANSWER_MAX (1u << 20)

struct jcall {
    cp_jcall_cb done;
    void *arg;
    int status;
    bool truncated;
    struct al_buf body;
};

static int jcall__response(struct al_http_creq *c, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    struct jcall *j = arg;
    (void)c;
    (void)h;
    (void)n;
    j->status = status;
    return 0;
}

static int jcall__data(struct al_http_creq *c, const char *data, size_t len, void *arg)
{
    struct jcall *j = arg;
    (void)c;
    /* Past the cap the body is incomplete: it is not parsed (see jcall__done). */
    if (!j->truncated && al_buf_append(&j->body, data, len))
        j->truncated = true;
    return 0;
}

static void jcall__done(struct al_http_creq *c, int err, void *arg)
{
    struct jcall *j = arg;
    json_t *body = NULL;
    char why[512];
    if (err) {
        const char *s = al_http_creq_strerror(c);
        snprintf(why, sizeof why, "%s", s && *s ? s : strerror(-err));
        j->done(-1, NULL, why, j->arg);
    } else {
        if (j->body.len && !j->truncated)
            body = json_loadb(j->body.data, j->body.len, 0, NULL);
        j->done(j->status, body, NULL, j->arg);
    }
    json_decref(body);
    al_buf_free(&j->body);
    free(j);
}

int cp_jcall(uv_loop_t *loop, const struct cp_jcall_opts *o)
{
    struct jcall *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    j->done = o->done;
    j->arg = o->arg;
    al_buf_init(&j->body, o->max_answer ? o->max_answer : JCALL_ANSWER_MAX);
    char *text = o->body ? json_dumps(o->body, JSON_COMPACT) : NULL;
    if (o->body && !text) {
        free(j);
        return -ENOMEM;
    }
    const char *send = text ? text : o->body_text;
    struct al_http_header h[2];
    size_t nh = 0;
    if (send)
        h[nh++] = (struct al_http_header){"Content-Type", "application/json"};
    if (o->token)
        h[nh++] = (struct al_http_header){"X-Access-Token", o->token};
    struct al_http_creq_opts co = {
        .target = o->target,
        .method = o->method,
        .path = o->path,
        .headers = h,
        .n_headers = nh,
        .body = send,
        .body_len = send ? strlen(send) : 0,
        .timeout_ms = o->timeout_ms ? o->timeout_ms : JCALL_TIMEOUT_MS,
        .on_response = jcall__response,
        .on_data = jcall__data,
        .on_done = jcall__done,
        .arg = j,
        .pool = o->pool,
        .wipe = o->wipe,
    };
    struct al_http_creq *c;
    int rc = al_http_creq_start(loop, &co, &c);
    if (text && o->wipe)
        sodium_memzero(text, strlen(text));
    free(text);
    if (rc) {
        al_buf_free(&j->body);
        free(j);
    }
    return rc;
}
