/* controlplane/console_term: the web console's terminal, a pty in a sandbox over a WebSocket.
 *
 * Owns: GET /console/api/sandboxes/{id}/terminal (docs/console.md, "Terminal"): the upgrade's
 * checks (a console session, its CSRF token offered as the WebSocket subprotocol
 * "csrf.<token>" since a browser's WebSocket cannot send headers, the page's Origin this
 * host, a role with the sandbox's data plane as auth.c's table says for
 * /sandboxes/{id}/terminal, a running sandbox); the shell it starts through the sandbox's
 * agent (process.Process/Start with a pty, the agent's own envd API, as `airlock sandbox
 * exec` and the template builds run commands); and the relay: the pty's output as binary
 * messages to the browser, its binary messages as input (process.Process/SendInput, one call
 * at a time so that keystrokes keep their order), its text messages {"resize": {"cols",
 * "rows"}} as process.Process/Update. The end, whichever side ends it, kills the shell and
 * closes the WebSocket with why.
 *
 * What is typed and what is shown is never logged nor kept: the lifecycle events
 * terminal_opened and terminal_closed (with the key, the size, the duration and byte counts)
 * are the record of a session.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/envd_proc.h"
#include "common/http_head.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "console.h"
#include "console_ws.h"
#include "cp.h"
#include "events.h"

#define TERM_PROTOCOL     "airlock.terminal"
#define TERM_CSRF_PREFIX  "csrf."
#define TERM_MAX_COLS     1000
#define TERM_MAX_ROWS     500
#define TERM_RX_MAX       (4 * (CP_WS_MAX_PAYLOAD + 14))
#define TERM_IN_MAX       (1u << 20)   /* typed or pasted, not yet taken by the agent */
#define TERM_IN_PAUSE     (256u << 10) /* read no more from the browser past this */
#define TERM_IN_CHUNK     (48u << 10)  /* one SendInput at most */
#define TERM_OUT_PAUSE    (1u << 20)   /* the browser reads slower than the shell writes */
#define TERM_STREAM_MAX   (4u << 20)   /* one undecoded message of the agent's stream */
#define TERM_ANSWER_MAX   512          /* what is kept of a refusal by the agent */
#define TERM_AGENT_TMO_MS 30000

/* The shell: bash where the template has it, else sh, as a login shell in $HOME. */
static const char term__shell[] = "command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l";

/* A unary call to the agent in flight (SendInput, Update): its status and the start of its
 * answer, for the message when it is refused. */
struct term_call {
    struct term *x;
    struct al_http_creq *c;
    int status;
    struct al_buf answer;
};

struct term {
    struct cp *cp;
    struct cp_sandbox *sb; /* a reference */
    int refs;              /* the tunnel, each request in flight, and term__end while it runs */
    char id[17];           /* pairs its two events */
    char key_id[32];
    char target[160];
    char token[128];
    struct al_http_tunnel *t;
    struct al_http_creq *start; /* the shell's output stream */
    struct al_envd_stream stream;
    struct term_call input, resize;
    struct al_buf rx; /* the browser's bytes, not yet a whole frame */
    struct al_buf in; /* input not yet sent */
    bool rx_paused, out_paused, opened, ending, in_binary;
    unsigned cols, rows, want_cols, want_rows;
    uint64_t t0_ns, bytes_in, bytes_out;
    struct term *next; /* term__live */
};

static struct term *term__live;

static void term__end(struct term *x, uint16_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void term__unref(struct term *x)
{
    if (--x->refs > 0)
        return;
    for (struct term **p = &term__live; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    al_envd_stream_free(&x->stream);
    al_buf_free_wipe(&x->rx);
    al_buf_free_wipe(&x->in);
    al_buf_free(&x->input.answer);
    al_buf_free(&x->resize.answer);
    sodium_memzero(x->token, sizeof x->token);
    cp_sb_unref(x->sb);
    free(x);
}

/* ---- to the browser ----------------------------------------------------------------------- */

static int term__send(struct term *x, enum cp_ws_opcode op, const void *d, size_t n)
{
    if (!x->t)
        return -EPIPE;
    struct al_buf f;
    al_buf_init(&f, 0);
    int rc = cp_ws_frame_append(&f, op, d, n);
    if (rc == 0)
        rc = al_http_tunnel_write(x->t, f.data, f.len);
    al_buf_free_wipe(&f);
    return rc;
}

static void term__output(void *arg, enum al_envd_stream_fd fd, const unsigned char *d, size_t n)
{
    struct term *x = arg;
    if (x->ending || !n)
        return;
    (void)fd; /* a pty has one output */
    x->bytes_out += n;
    term__send(x, CP_WS_BINARY, d, n);
}

static void term__out_drained(struct al_http_tunnel *t, void *arg)
{
    struct term *x = arg;
    (void)t;
    if (x->out_paused && x->start && !x->ending) {
        x->out_paused = false;
        al_http_creq_resume(x->start);
    }
}

/* ---- to the agent ------------------------------------------------------------------------- */

static int term__call_resp(struct al_http_creq *c, int status, const struct al_http_header *h,
                           size_t n, void *arg)
{
    (void)c, (void)h, (void)n;
    ((struct term_call *)arg)->status = status;
    return 0;
}

static int term__call_data(struct al_http_creq *c, const char *d, size_t len, void *arg)
{
    (void)c;
    struct term_call *tc = arg;
    if (tc->answer.len + len <= TERM_ANSWER_MAX)
        al_buf_append(&tc->answer, d, len);
    return 0;
}

/* process.Process/<method> with body (stolen) as one unary call: into tc, which holds a
 * reference to the session until on_done, or unobserved when tc is NULL. */
static int term__call(struct term *x, const char *method, json_t *body, struct term_call *tc,
                      void (*on_done)(struct al_http_creq *, int, void *))
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s)
        return -ENOMEM;
    char path[64];
    snprintf(path, sizeof path, "/process.Process/%s", method);
    struct al_http_header h[] = {{"Content-Type", "application/json"},
                                 {"Connect-Protocol-Version", "1"},
                                 {"X-Access-Token", x->token}};
    struct al_http_creq_opts o = {.target = x->target,
                                  .method = "POST",
                                  .path = path,
                                  .headers = h,
                                  .n_headers = sizeof h / sizeof h[0],
                                  .body = s,
                                  .body_len = strlen(s),
                                  .timeout_ms = TERM_AGENT_TMO_MS,
                                  .on_response = tc ? term__call_resp : NULL,
                                  .on_data = tc ? term__call_data : NULL,
                                  .on_done = on_done,
                                  .arg = tc,
                                  .pool = x->cp->pool,
                                  .wipe = true};
    if (tc) {
        tc->status = 0;
        al_buf_reset(&tc->answer);
    }
    struct al_http_creq *c = NULL;
    int rc = al_http_creq_start(x->cp->loop, &o, &c);
    sodium_memzero(s, strlen(s));
    free(s);
    if (rc == 0 && tc) {
        tc->c = c;
        x->refs++;
    }
    return rc;
}

static void term__killed(struct al_http_creq *c, int err, void *arg)
{
    (void)arg;
    if (err)
        al_info("console: killing a terminal's shell: %s", al_http_creq_strerror(c));
}

/* The shell is killed whatever ended the session: nothing typed into it outlives the page. */
static void term__kill_shell(struct term *x)
{
    if (!x->opened || x->stream.ended || !x->stream.pid)
        return;
    json_t *b =
        json_pack("{s:{s:i},s:s}", "process", "pid", x->stream.pid, "signal", "SIGNAL_SIGKILL");
    if (term__call(x, "SendSignal", b, NULL, term__killed))
        al_warn("console: terminal %s: cannot kill its shell (pid %d)", x->id, x->stream.pid);
}

static void term__pump(struct term *x);

static void term__input_done(struct al_http_creq *c, int err, void *arg)
{
    struct term_call *tc = arg;
    struct term *x = tc->x;
    tc->c = NULL;
    if (!x->ending) {
        if (err)
            term__end(x, CP_WS_CLOSE_INTERNAL, "the sandbox's agent did not take the input: %s",
                      al_http_creq_strerror(c));
        else if (tc->status != 200)
            term__end(x, CP_WS_CLOSE_INTERNAL, "the sandbox's agent refused the input (%d): %.200s",
                      tc->status, tc->answer.data ? tc->answer.data : "");
        else
            term__pump(x);
    }
    term__unref(x);
}

/* Sends what was typed, one call at a time (in order), once the shell runs. */
static void term__pump(struct term *x)
{
    if (x->ending || !x->opened || x->input.c)
        return;
    if (x->rx_paused && x->in.len < TERM_IN_PAUSE / 2 && x->t) {
        x->rx_paused = false;
        al_http_tunnel_resume(x->t);
    }
    if (!x->in.len)
        return;
    size_t n = x->in.len < TERM_IN_CHUNK ? x->in.len : TERM_IN_CHUNK;
    size_t bl = sodium_base64_ENCODED_LEN(n, sodium_base64_VARIANT_ORIGINAL);
    char *b64 = malloc(bl);
    if (!b64) {
        term__end(x, CP_WS_CLOSE_INTERNAL, "out of memory");
        return;
    }
    sodium_bin2base64(b64, bl, (const unsigned char *)x->in.data, n,
                      sodium_base64_VARIANT_ORIGINAL);
    json_t *b =
        json_pack("{s:{s:i},s:{s:s}}", "process", "pid", x->stream.pid, "input", "pty", b64);
    sodium_memzero(b64, bl);
    free(b64);
    int rc = term__call(x, "SendInput", b, &x->input, term__input_done);
    if (rc) {
        term__end(x, CP_WS_CLOSE_INTERNAL, "cannot reach the sandbox's agent: %s", strerror(-rc));
        return;
    }
    sodium_memzero(x->in.data, n);
    al_buf_consume(&x->in, n);
}

static void term__resize_send(struct term *x);

static void term__resize_done(struct al_http_creq *c, int err, void *arg)
{
    struct term_call *tc = arg;
    struct term *x = tc->x;
    tc->c = NULL;
    if (!x->ending) {
        /* A size the pty did not take leaves the shell usable: said in the log only. */
        if (err || tc->status != 200)
            al_info("console: terminal %s: the resize to %ux%u failed: %.200s", x->id, x->cols,
                    x->rows,
                    err ? al_http_creq_strerror(c) : (tc->answer.data ? tc->answer.data : ""));
        term__resize_send(x);
    }
    term__unref(x);
}

/* The latest size asked for, once the shell runs and no resize is under way. */
static void term__resize_send(struct term *x)
{
    if (x->ending || !x->opened || x->resize.c ||
        (x->want_cols == x->cols && x->want_rows == x->rows))
        return;
    x->cols = x->want_cols;
    x->rows = x->want_rows;
    json_t *b = json_pack("{s:{s:i},s:{s:{s:i,s:i}}}", "process", "pid", x->stream.pid, "pty",
                          "size", "cols", (int)x->cols, "rows", (int)x->rows);
    if (term__call(x, "Update", b, &x->resize, term__resize_done))
        al_info("console: terminal %s: cannot ask for a resize", x->id);
}

/* ---- the shell's stream ------------------------------------------------------------------- */

static int term__start_resp(struct al_http_creq *c, int status, const struct al_http_header *h,
                            size_t n, void *arg)
{
    (void)c, (void)h, (void)n;
    ((struct term *)arg)->stream.status = status;
    return 0;
}

static int term__start_data(struct al_http_creq *c, const char *d, size_t len, void *arg)
{
    (void)c;
    struct term *x = arg;
    if (x->ending)
        return 0;
    if (x->stream.status != 200 && x->stream.buf.len + len > TERM_ANSWER_MAX)
        return 0; /* enough of a refusal to say why */
    if (al_envd_stream_feed(&x->stream, d, len) < 0) {
        term__end(x, CP_WS_CLOSE_INTERNAL, "the sandbox's agent sent a message over %u bytes",
                  TERM_STREAM_MAX);
        return 0;
    }
    if (x->stream.started && !x->opened && !x->ending) {
        x->opened = true;
        al_info("console: terminal %s in sandbox %s opened by key %s (pid %d)", x->id,
                x->sb->rec.id, x->key_id, x->stream.pid);
        cp_event_emit(x->sb, CP_EV_TERMINAL_OPENED, CP_CAUSE_API, x->key_id,
                      json_pack("{s:s,s:i,s:i,s:i}", "terminal", x->id, "cols", (int)x->cols,
                                "rows", (int)x->rows, "pid", x->stream.pid));
        term__pump(x);
        term__resize_send(x);
    }
    if (x->t && al_http_tunnel_queued(x->t) > TERM_OUT_PAUSE && !x->ending) {
        x->out_paused = true;
        al_http_tunnel_on_drain(x->t, TERM_OUT_PAUSE / 4, term__out_drained);
        return 1;
    }
    return 0;
}

static void term__start_done(struct al_http_creq *c, int err, void *arg)
{
    struct term *x = arg;
    struct al_envd_stream *st = &x->stream;
    x->start = NULL;
    if (!x->ending) {
        if (st->ended)
            term__end(x, CP_WS_CLOSE_NORMAL, "%s", st->status_text[0] ? st->status_text : "ended");
        else if (st->status && st->status != 200)
            term__end(x, CP_WS_CLOSE_INTERNAL, "the sandbox's agent refused the shell (%d): %.200s",
                      st->status, st->buf.data ? st->buf.data : "");
        else if (err)
            term__end(x, CP_WS_CLOSE_INTERNAL, "the sandbox's agent: %s", al_http_creq_strerror(c));
        else
            term__end(x, CP_WS_CLOSE_INTERNAL,
                      "the sandbox's agent ended the shell's stream without its exit%s%s",
                      st->error[0] ? ": " : "", st->error);
    }
    term__unref(x);
}

/* ---- from the browser --------------------------------------------------------------------- */

/* A text message: {"resize": {"cols": C, "rows": R}}. false (the session ends) otherwise. */
static bool term__control(struct term *x, const uint8_t *d, size_t n)
{
    struct al_error err = {0};
    json_t *m = al_json_parse((const char *)d, n, &err);
    json_t *rs = json_object_get(m, "resize");
    json_int_t c = json_integer_value(json_object_get(rs, "cols"));
    json_int_t r = json_integer_value(json_object_get(rs, "rows"));
    bool ok = json_is_object(m) && json_object_size(m) == 1 && json_is_object(rs) && c >= 1 &&
              c <= TERM_MAX_COLS && r >= 1 && r <= TERM_MAX_ROWS;
    json_decref(m);
    if (!ok) {
        term__end(x, CP_WS_CLOSE_DATA,
                  "a text message must be {\"resize\": {\"cols\": 1..%d, \"rows\": 1..%d}}",
                  TERM_MAX_COLS, TERM_MAX_ROWS);
        return false;
    }
    x->want_cols = (unsigned)c;
    x->want_rows = (unsigned)r;
    term__resize_send(x);
    return true;
}

/* One frame: false once it ended the session. */
static bool term__frame(struct term *x, const struct cp_ws_frame *f)
{
    switch (f->opcode) {
    case CP_WS_CONT:
        if (!x->in_binary) {
            term__end(x, CP_WS_CLOSE_PROTOCOL, "a continuation of no binary message");
            return false;
        }
        __attribute__((fallthrough)); /* the rest of the input */
    case CP_WS_BINARY:
        x->in_binary = !f->fin;
        x->bytes_in += f->len;
        if (al_buf_append(&x->in, f->payload, f->len) < 0) {
            term__end(x, CP_WS_CLOSE_TOO_BIG,
                      "more than %u bytes of input wait for the sandbox: typed faster than its "
                      "shell reads",
                      TERM_IN_MAX);
            return false;
        }
        term__pump(x);
        return true;
    case CP_WS_TEXT:
        if (!f->fin || x->in_binary) {
            term__end(x, CP_WS_CLOSE_PROTOCOL, "a text message must be one whole frame");
            return false;
        }
        return term__control(x, f->payload, f->len);
    case CP_WS_PING:
        term__send(x, CP_WS_PONG, f->payload, f->len);
        return true;
    case CP_WS_PONG:
        return true;
    case CP_WS_CLOSE:
        term__end(x, CP_WS_CLOSE_NORMAL, "closed by the browser");
        return false;
    }
    return true;
}

static int term__rx(struct al_http_tunnel *t, const char *d, size_t len, void *arg)
{
    (void)t;
    struct term *x = arg;
    if (x->ending)
        return 0;
    if (al_buf_append(&x->rx, d, len) < 0) {
        term__end(x, CP_WS_CLOSE_TOO_BIG, "a WebSocket frame over %u bytes", CP_WS_MAX_PAYLOAD);
        return 0;
    }
    x->refs++; /* a frame may end the session: x stays until the frames are read */
    size_t off = 0;
    while (!x->ending) {
        struct cp_ws_frame f;
        size_t used = 0;
        struct al_error err = {0};
        int rc = cp_ws_parse((uint8_t *)x->rx.data + off, x->rx.len - off, &f, &used, &err);
        if (rc < 0)
            term__end(x, rc == -EMSGSIZE ? CP_WS_CLOSE_TOO_BIG : CP_WS_CLOSE_PROTOCOL, "%s",
                      al_error_str(&err));
        if (rc <= 0)
            break;
        term__frame(x, &f);
        off += used;
    }
    int pause = 0;
    if (!x->ending) {
        sodium_memzero(x->rx.data, off);
        al_buf_consume(&x->rx, off);
        if (x->in.len > TERM_IN_PAUSE) {
            x->rx_paused = true;
            pause = 1;
        }
    }
    term__unref(x);
    return pause;
}

static void term__rx_end(struct al_http_tunnel *t, int err, void *arg)
{
    (void)t;
    struct term *x = arg;
    if (!x->ending)
        term__end(x, CP_WS_CLOSE_NORMAL, "%s",
                  err == -ESHUTDOWN ? "airlockd stops"
                  : err             ? "the browser's connection failed"
                                    : "closed by the browser");
}

/* ---- the end ------------------------------------------------------------------------------ */

static void term__shut(struct al_http_tunnel *t, int err, void *arg)
{
    (void)err;
    struct term *x = arg;
    al_http_tunnel_close(t);
    x->t = NULL;
    term__unref(x);
}

static void term__end(struct term *x, uint16_t code, const char *fmt, ...)
{
    if (x->ending)
        return;
    x->ending = true;
    x->refs++;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    term__kill_shell(x);
    if (x->start)
        al_http_creq_cancel(x->start);
    if (x->input.c)
        al_http_creq_cancel(x->input.c);
    if (x->resize.c)
        al_http_creq_cancel(x->resize.c);
    if (x->t) {
        struct al_buf f;
        al_buf_init(&f, 0);
        if (cp_ws_close_append(&f, code, why) == 0)
            al_http_tunnel_write(x->t, f.data, f.len);
        al_buf_free(&f);
        if (al_http_tunnel_shutdown(x->t, term__shut) < 0) {
            al_http_tunnel_close(x->t);
            x->t = NULL;
            term__unref(x);
        }
    }
    if (x->opened) {
        double ms = (double)(al_now_ns() - x->t0_ns) / 1e6;
        al_info("console: terminal %s in sandbox %s closed: %s", x->id, x->sb->rec.id, why);
        cp_event_emit(x->sb, CP_EV_TERMINAL_CLOSED, CP_CAUSE_API, x->key_id,
                      json_pack("{s:s,s:s,s:I,s:I,s:I}", "terminal", x->id, "why", why,
                                "durationMs", (json_int_t)ms, "bytesIn", (json_int_t)x->bytes_in,
                                "bytesOut", (json_int_t)x->bytes_out));
    } else {
        al_info("console: a terminal in sandbox %s did not open: %s", x->sb->rec.id, why);
    }
    term__unref(x);
}

void cp_console_term_stop(struct cp *cp)
{
    (void)cp;
    for (struct term *x = term__live, *next; x; x = next) {
        next = x->next;
        term__end(x, 1001, "airlockd stops");
    }
}

/* ---- the upgrade -------------------------------------------------------------------------- */

/* Whether a comma-separated header list holds item (case-insensitive, as Upgrade and
 * Connection are compared). */
static bool term__list_has(const char *v, const char *item)
{
    return v && al_http_list_has(v, strlen(v), item, strlen(item));
}

/* The csrf.<token> subprotocol offered, into out: false when absent, empty, offered twice or
 * too long to be a token of ours. */
static bool term__csrf(const struct al_http_req *req, char *out, size_t len)
{
    out[0] = '\0';
    for (size_t i = 0; i < req->n_headers; i++) {
        if (strcasecmp(req->headers[i].name, "Sec-WebSocket-Protocol") != 0)
            continue;
        const char *p = strstr(req->headers[i].value, TERM_CSRF_PREFIX);
        if (!p)
            continue;
        p += strlen(TERM_CSRF_PREFIX);
        size_t n = strcspn(p, ", \t");
        if (out[0] || n == 0 || n >= len)
            return false; /* twice, empty, or not a token of ours */
        memcpy(out, p, n);
        out[n] = '\0';
    }
    return out[0] != '\0';
}

static bool term__size_param(struct al_http_req *req, const char *name, unsigned max, unsigned *out)
{
    uint64_t v;
    bool has;
    if (!cp_rest_u64_param(req, name, &v, &has))
        return false;
    if (has && (v < 1 || v > max)) {
        cp_rest_error(req, 400, "%s must be 1..%u", name, max);
        return false;
    }
    if (has)
        *out = (unsigned)v;
    return true;
}

void cp_console_term(struct cp *cp, struct al_http_req *req, const char *id)
{
    if (strcmp(req->method, "GET") != 0) {
        cp_rest_error(req, 405,
                      "%s is not allowed on a terminal (a GET that upgrades to a "
                      "WebSocket)",
                      req->method);
        return;
    }
    const char *up = al_http_req_header(req, "Upgrade");
    const char *ver = al_http_req_header(req, "Sec-WebSocket-Version");
    if (!req->upgrade || !up || !term__list_has(up, "websocket")) {
        cp_rest_error(req, 426, "a terminal is a WebSocket: the request must upgrade to one");
        return;
    }
    if (!ver || strcmp(ver, "13") != 0) {
        cp_rest_error(req, 426, "the terminal speaks WebSocket version 13 (Sec-WebSocket-Version)");
        return;
    }
    /* A WebSocket is not bound by the same-origin policy: another site's page could open
     * one with the operator's cookie (SameSite=Strict stops that in today's browsers; the
     * Origin check does in every one). */
    if (!cp_console_origin_ours(req)) {
        al_info("console: a terminal for sandbox %.64s refused: Origin %.200s is not this host", id,
                al_http_req_header(req, "Origin") ? al_http_req_header(req, "Origin") : "(none)");
        cp_rest_error(req, 403, "a terminal opens from the console's own page only (its Origin)");
        return;
    }
    char csrf[160];
    bool has_csrf = term__csrf(req, csrf, sizeof csrf);
    const char *protos = al_http_req_header(req, "Sec-WebSocket-Protocol");
    struct cp_principal who;
    struct al_error err = {0};
    int rc = cp_console_auth_csrf(cp, req, has_csrf ? csrf : NULL, &who, &err);
    sodium_memzero(csrf, sizeof csrf);
    if (rc == -ENOENT) {
        cp_rest_error(req, 401, "a terminal needs a console session: sign in to the console");
        return;
    }
    if (rc == -EPERM || (rc == 0 && (!protos || !term__list_has(protos, TERM_PROTOCOL)))) {
        cp_rest_error(req, 403,
                      "a terminal needs the subprotocols " TERM_PROTOCOL " and " TERM_CSRF_PREFIX
                      "<the session's CSRF token>");
        return;
    }
    if (rc) {
        cp_rest_error(req, rc == -EACCES ? 401 : 500, "%s", al_error_str(&err));
        return;
    }
    if (cp_auth_role_check(&who, "GET", "/sandboxes/x/terminal", &err)) {
        al_info("console: refused a terminal in sandbox %.64s to key %s (role %s)", id, who.key_id,
                cp_role_name(who.role));
        cp_rest_error(req, 403, "%s", al_error_str(&err));
        return;
    }
    struct cp_sandbox *sb = cp_sandbox_get(cp, id);
    if (!sb) {
        cp_rest_error(req, 404, "sandbox \"%.64s\" not found", id);
        return;
    }
    if (sb->rec.state != CP_SB_RUNNING || !sb->agent_sock[0]) {
        cp_rest_error(req, 409, "sandbox %s is %s: a terminal needs it running%s", sb->rec.id,
                      cp_sb_state_name(sb->rec.state),
                      sb->rec.state == CP_SB_PAUSED ? " (resume it first)" : "");
        return;
    }
    unsigned cols = 80, rows = 24;
    if (!term__size_param(req, "cols", TERM_MAX_COLS, &cols) ||
        !term__size_param(req, "rows", TERM_MAX_ROWS, &rows))
        return;
    char accept[CP_WS_ACCEPT_LEN + 1];
    if (cp_ws_accept(al_http_req_header(req, "Sec-WebSocket-Key"), accept, &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    struct term *x = calloc(1, sizeof *x);
    if (!x) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    x->cp = cp;
    x->sb = sb;
    cp_sb_ref(sb);
    x->refs = 1; /* the tunnel's */
    uint8_t raw[8];
    randombytes_buf(raw, sizeof raw);
    sodium_bin2hex(x->id, sizeof x->id, raw, sizeof raw);
    snprintf(x->key_id, sizeof x->key_id, "%s", who.key_id);
    snprintf(x->target, sizeof x->target, "unix:%s", sb->agent_sock);
    snprintf(x->token, sizeof x->token, "%s", sb->rec.token);
    x->cols = x->want_cols = cols;
    x->rows = x->want_rows = rows;
    x->t0_ns = al_now_ns();
    al_buf_init(&x->rx, TERM_RX_MAX);
    al_buf_init(&x->in, TERM_IN_MAX);
    x->input.x = x->resize.x = x;
    al_buf_init(&x->input.answer, 0);
    al_buf_init(&x->resize.answer, 0);
    al_envd_stream_init(&x->stream, TERM_STREAM_MAX, term__output, x);
    x->next = term__live;
    term__live = x;

    unsigned char *body = NULL;
    size_t body_len = 0;
    json_t *args = json_pack("[s,s]", "-c", term__shell);
    json_t *envs = json_pack("{s:s}", "TERM", "xterm-256color");
    if (al_envd_start_pty_body("/bin/sh", args, envs, NULL, cols, rows, &body, &body_len)) {
        cp_rest_error(req, 500, "out of memory");
        term__unref(x);
        return;
    }
    struct al_http_header rh[] = {{"Upgrade", "websocket"},
                                  {"Sec-WebSocket-Accept", accept},
                                  {"Sec-WebSocket-Protocol", TERM_PROTOCOL}};
    rc = al_http_req_upgrade(req, rh, sizeof rh / sizeof rh[0], &x->t);
    if (rc) {
        free(body);
        x->t = NULL;
        if (rc != -EPIPE)
            cp_rest_error(req, 400, "cannot switch to a WebSocket: %s", strerror(-rc));
        term__unref(x);
        return;
    }
    rc = al_http_tunnel_start(x->t, term__rx, term__rx_end, x);
    if (rc == 0) {
        struct al_http_header h[] = {{"Content-Type", "application/connect+json"},
                                     {"Connect-Protocol-Version", "1"},
                                     {"X-Access-Token", x->token}};
        struct al_http_creq_opts o = {.target = x->target,
                                      .method = "POST",
                                      .path = "/process.Process/Start",
                                      .headers = h,
                                      .n_headers = sizeof h / sizeof h[0],
                                      .body = body,
                                      .body_len = body_len,
                                      .timeout_ms = TERM_AGENT_TMO_MS,
                                      .on_response = term__start_resp,
                                      .on_data = term__start_data,
                                      .on_done = term__start_done,
                                      .arg = x,
                                      .wipe = true};
        rc = al_http_creq_start(cp->loop, &o, &x->start);
        if (rc == 0)
            x->refs++;
        else
            x->start = NULL;
    }
    free(body);
    if (rc)
        term__end(x, CP_WS_CLOSE_INTERNAL, "cannot reach the sandbox's agent: %s", strerror(-rc));
}
