/* vmm/guest/interp: the code interpreter (E2B port 49999): POST /execute, /contexts.
 *
 * A context is a persistent kernel process running as the context's user with the same
 * privilege drop as any command:
 *   python: python3 airlock_kernel.py (shipped in lib_dir), fds 0=/dev/null, 1/2 = output
 *           pipes, 3 = requests from the agent, 4 = messages to the agent; each message is
 *           a 4-byte big-endian length and a JSON object.
 *   javascript, typescript: node airlock_kernel.js [--typescript], fds as for python.
 *   bash:   bash --noprofile --norc -s reading commands on fd 0; each execution is eval'ed
 *           in that shell (state persists: variables, cwd, functions), with stdin from
 *           /dev/null, and its status is reported on fd 3 as "AIRLOCK_DONE <status>".
 * The default contexts (python, and javascript when the sandbox has Node.js) exist before any
 * other: started with the agent when the template asks for it (init's agent.code_interpreter,
 * as E2B's server starts its kernels), else by the first interpreter request. GET /contexts
 * lists contexts in creation order, so the defaults come first, as with E2B.
 * Output order: before the agent acts on a kernel message it reads whatever the kernel
 * wrote to stdout/stderr first, so prints precede the results that follow them.
 * One execution runs per context at a time; others wait in a bounded queue (keepalives every
 * 5 s meanwhile). When the client goes away during an execution the kernel is interrupted
 * (SIGINT), as the reference server does. Backpressure: a slow client stops the agent from
 * reading the kernel's pipes (the kernel blocks), so memory stays bounded.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "fdio.h"
#include "ndjson.h"
#include "protojson.h"
#include "spawn.h"

#define INTERP_KEEPALIVE_MS 5000
#define INTERP_KERNEL_PY    "airlock_kernel.py"
#define INTERP_KERNEL_JS    "airlock_kernel.js"

/* python and javascript/typescript kernels speak the framed protocol on fds 3 and 4 */
enum interp__kind { KIND_PYTHON, KIND_BASH, KIND_JS };

/* The languages, in the order E2B's server makes its default contexts (python, then
 * javascript); a default of the others is made at its first use. */
static const char *const interp__languages[] = {"python", "javascript", "typescript", "bash"};
#define INTERP_NLANG (sizeof interp__languages / sizeof *interp__languages)

struct interp_ctx;

struct interp_kernel {
    struct interp_ctx *ctx; /* NULL once the context let go of it */
    pid_t pid;
    bool alive;
    int handles;
    struct agent_fdio out, err, ctl_w, ctl_r;
    struct al_buf frame; /* framed kernels: partial message; bash: partial status line */
    char carry[2][4];    /* incomplete UTF-8 at the end of the last read (out, err) */
    size_t ncarry[2];
};

struct interp_exec {
    struct interp_exec *next;
    struct interp_ctx *ctx;
    struct agent *a;
    struct al_http_req *req; /* NULL once the client is gone */
    char *code;
    json_t *env_vars;
    uv_timer_t keepalive;
    uint64_t last_write;
    bool running;
    bool finished;
};

struct interp_ctx {
    struct interp_ctx *next;
    struct agent *a;
    char id[40];
    char language[16];
    char cwd[PATH_MAX];
    struct agent_user user;
    enum interp__kind kind;
    struct interp_kernel *k;
    struct interp_exec *cur;
    struct interp_exec *q_head, *q_tail;
    size_t nqueued;
    int exec_count;
    char unavailable[512]; /* the kernel said it cannot run here (why), until it exits */
    bool waiting;          /* a default whose kernel starts once the first default's is up */
};

struct agent_interp {
    struct interp_ctx *list;
    size_t n;
    char defaults[INTERP_NLANG][40]; /* id of each language's default context ("" none) */
    bool defaults_made;              /* agent_interp_start_defaults ran */
};

static void interp__start_next(struct interp_ctx *c);
static void interp__start_waiting(struct agent *a);
static int interp__send_frame(struct interp_ctx *c, json_t *m);

/* ---- small helpers -------------------------------------------------------------------- */

static void interp__text(struct al_http_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void interp__text(struct al_http_req *req, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof msg)
        n = sizeof msg - 1;
    al_http_reply(req, status, "text/plain; charset=utf-8", msg, (size_t)n);
}

static const char *interp__normalize(const char *lang, char *buf, size_t buflen)
{
    if (!lang)
        return "python";
    while (*lang == ' ' || *lang == '\t')
        lang++;
    size_t n = strlen(lang);
    while (n && (lang[n - 1] == ' ' || lang[n - 1] == '\t'))
        n--;
    if (n == 0)
        return "python";
    if (n >= buflen)
        n = buflen - 1;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)((lang[i] >= 'A' && lang[i] <= 'Z') ? lang[i] + 32 : lang[i]);
    buf[n] = '\0';
    if (strcmp(buf, "js") == 0)
        return "javascript";
    if (strcmp(buf, "ts") == 0)
        return "typescript";
    return buf;
}

static struct interp_ctx *interp__find(struct agent *a, const char *id)
{
    for (struct interp_ctx *c = a->interp->list; c; c = c->next)
        if (strcmp(c->id, id) == 0)
            return c;
    return NULL;
}

/* ---- writing to the client --------------------------------------------------------- */

static void interp__write_line(struct interp_exec *x, const json_t *obj)
{
    if (!x->req)
        return;
    struct al_buf b;
    al_buf_init(&b, 0);
    if (agent_ndjson_append(&b, obj) == 0)
        al_http_resp_write(x->req, b.data, b.len);
    al_buf_free(&b);
    x->last_write = al_now_ns();
}

static void interp__write_simple(struct interp_exec *x, const char *type)
{
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string(type));
    interp__write_line(x, o);
    json_decref(o);
}

static void interp__write_error(struct interp_exec *x, const char *name, const char *value)
{
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("error"));
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "value", json_string(value));
    json_object_set_new(o, "traceback", json_string(""));
    interp__write_line(x, o);
    json_decref(o);
}

static void interp__kernel_pause(struct interp_kernel *k, bool pause)
{
    struct agent_fdio *ios[] = {&k->out, &k->err, &k->ctl_r};
    for (size_t i = 0; i < 3; i++) {
        if (!agent_fdio_is_open(ios[i]))
            continue;
        if (pause)
            agent_fdio_pause(ios[i]);
        else
            agent_fdio_resume(ios[i]);
    }
}

static void interp__on_drain(struct al_http_req *req)
{
    struct interp_exec *x = req->user;
    if (x && x->ctx && x->ctx->k && x->ctx->cur == x)
        interp__kernel_pause(x->ctx->k, false);
}

static void interp__check_pressure(struct interp_exec *x)
{
    if (!x->req || !x->ctx || !x->ctx->k)
        return;
    if (al_http_resp_queued(x->req) > x->a->lim.stream_high_water) {
        interp__kernel_pause(x->ctx->k, true);
        al_http_resp_on_drain(x->req, x->a->lim.stream_high_water / 4, interp__on_drain);
    }
}

/* ---- executions ------------------------------------------------------------------- */

static void interp__exec_timer_closed(uv_handle_t *h)
{
    struct interp_exec *x = h->data;
    free(x->code);
    json_decref(x->env_vars);
    free(x);
}

static void interp__exec_free(struct interp_exec *x)
{
    uv_timer_stop(&x->keepalive);
    uv_close((uv_handle_t *)&x->keepalive, interp__exec_timer_closed);
}

/* Ends the response (end_of_execution) and releases the execution. */
static void interp__exec_end(struct interp_exec *x)
{
    if (x->finished)
        return;
    x->finished = true;
    if (x->req) {
        interp__write_simple(x, "end_of_execution");
        x->req->user = NULL;
        al_http_resp_end(x->req);
        x->req = NULL;
    }
    interp__exec_free(x);
}

static void interp__on_keepalive(uv_timer_t *t)
{
    struct interp_exec *x = t->data;
    if (!x->req)
        return;
    if (al_now_ns() - x->last_write >= (uint64_t)(INTERP_KEEPALIVE_MS - 50) * 1000000ull)
        interp__write_simple(x, "keepalive");
}

static void interp__dequeue(struct interp_ctx *c, struct interp_exec *x)
{
    for (struct interp_exec **pp = &c->q_head; *pp; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            if (c->q_tail == x) {
                c->q_tail = NULL;
                for (struct interp_exec *y = c->q_head; y; y = y->next)
                    c->q_tail = y;
            }
            c->nqueued--;
            return;
        }
    }
}

static void interp__on_client_gone(struct al_http_req *req)
{
    struct interp_exec *x = req->user;
    if (!x)
        return;
    x->req = NULL;
    struct interp_ctx *c = x->ctx;
    if (c && c->cur == x) {
        /* Stop the abandoned work so that the next execution is not stuck behind it. */
        if (c->k && c->k->alive) {
            al_info("context %s: client went away during an execution: interrupting", c->id);
            /* Node.js loses a SIGINT that comes as a cell's synchronous part ends: the
             * JavaScript kernel takes a request and signals itself when it must. */
            if (c->kind == KIND_JS)
                interp__send_frame(c, json_pack("{s:s}", "op", "interrupt"));
            else
                kill(c->kind == KIND_BASH ? -c->k->pid : c->k->pid, SIGINT);
            interp__kernel_pause(c->k, false);
        }
        return; /* finished when the kernel reports done */
    }
    if (c)
        interp__dequeue(c, x);
    x->finished = true;
    interp__exec_free(x);
}

/* ---- kernels ------------------------------------------------------------------------ */

static void interp__kernel_handle_closed(struct interp_kernel *k)
{
    if (--k->handles == 0) {
        al_buf_free(&k->frame);
        free(k);
    }
}

static void interp__kernel_io_closed(struct agent_fdio *io)
{
    interp__kernel_handle_closed(io->owner);
}

static void interp__kernel_close_ios(struct interp_kernel *k)
{
    struct agent_fdio *ios[] = {&k->out, &k->err, &k->ctl_w, &k->ctl_r};
    for (size_t i = 0; i < 4; i++)
        if (agent_fdio_is_open(ios[i]))
            agent_fdio_close(ios[i], false, interp__kernel_io_closed);
}

static void interp__emit_output(struct interp_kernel *k, int which, const char *data, size_t n)
{
    struct interp_ctx *c = k->ctx;
    struct interp_exec *x = c ? c->cur : NULL;
    struct al_buf raw, clean;
    al_buf_init(&raw, 0);
    al_buf_init(&clean, 0);
    al_buf_append(&raw, k->carry[which], k->ncarry[which]);
    al_buf_append(&raw, data, n);
    size_t ok = n ? agent_utf8_complete_prefix(raw.data, raw.len) : raw.len;
    k->ncarry[which] = raw.len - ok;
    memcpy(k->carry[which], raw.data + ok, k->ncarry[which]);
    if (ok > 0 && x && x->req) {
        agent_utf8_sanitize(raw.data, ok, &clean);
        char ts[AL_TIME_FORMAT_MAX];
        uint64_t now = al_wall_ns();
        al_time_format(ts, sizeof ts, (int64_t)(now / 1000000000u), (long)(now % 1000000000u),
                       AL_TIME_RFC3339_US);
        json_t *o = json_object();
        json_object_set_new(o, "type", json_string(which == 0 ? "stdout" : "stderr"));
        json_object_set_new(o, "text", json_stringn(clean.data, clean.len));
        json_object_set_new(o, "timestamp", json_string(ts));
        interp__write_line(x, o);
        json_decref(o);
        interp__check_pressure(x);
    }
    al_buf_free(&raw);
    al_buf_free(&clean);
}

static void interp__on_out(struct agent_fdio *io, const char *data, ssize_t n)
{
    struct interp_kernel *k = io->owner;
    int which = io == &k->out ? 0 : 1;
    if (n > 0) {
        interp__emit_output(k, which, data, (size_t)n);
        return;
    }
    if (k->ncarry[which])
        interp__emit_output(k, which, "", 0); /* flush a dangling partial character */
    agent_fdio_close(io, false, interp__kernel_io_closed);
}

static void interp__drain_output(struct interp_kernel *k)
{
    if (agent_fdio_is_open(&k->out))
        agent_fdio_drain(&k->out, 8u << 20);
    if (agent_fdio_is_open(&k->err))
        agent_fdio_drain(&k->err, 8u << 20);
}

/* The current execution is complete. */
static void interp__exec_done(struct interp_ctx *c)
{
    struct interp_exec *x = c->cur;
    if (!x)
        return;
    c->cur = NULL;
    interp__exec_end(x);
    interp__start_next(c);
}

static const char *const interp__forward_types[] = {
    "number_of_executions", "result", "error", "stdout", "stderr", NULL};

/* A result's text as E2B's server gives it: a repr of a string loses its quotes. */
static void interp__result_text(json_t *msg)
{
    json_t *t = json_object_get(msg, "text");
    const char *s = json_string_value(t);
    size_t n = s ? json_string_length(t) : 0;
    if (n >= 2 && (s[0] == '\'' || s[0] == '"') && s[n - 1] == s[0]) {
        json_t *inner = json_stringn(s + 1, n - 2);
        if (inner)
            json_object_set_new(msg, "text", inner);
    }
}

static void interp__framed_message(struct interp_kernel *k, json_t *msg)
{
    struct interp_ctx *c = k->ctx;
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (!c || !type)
        return;
    if (strcmp(type, "ready") == 0) {
        interp__start_waiting(c->a);
        return;
    }
    if (strcmp(type, "unavailable") == 0) {
        /* It exits next: the current execution fails with the reason, and so does whatever
         * reaches this kernel before its exit (the next execution starts a new one). */
        const char *why = json_string_value(json_object_get(msg, "reason"));
        snprintf(c->unavailable, sizeof c->unavailable, "%s",
                 why ? why : "the kernel cannot run in this sandbox");
        al_warn("context %s: %s", c->id, c->unavailable);
        if (c->cur) {
            struct interp_exec *cur = c->cur;
            interp__write_error(cur, "ContextUnavailable", c->unavailable);
            c->cur = NULL;
            interp__exec_end(cur);
        }
        return;
    }
    struct interp_exec *x = c->cur;
    if (!x)
        return;
    if (strcmp(type, "done") == 0) {
        interp__exec_done(c);
        return;
    }
    for (const char *const *t = interp__forward_types; *t; t++) {
        if (strcmp(type, *t) == 0) {
            if (strcmp(type, "number_of_executions") == 0) {
                json_int_t n = json_integer_value(json_object_get(msg, "execution_count"));
                c->exec_count = (int)n;
            } else if (strcmp(type, "result") == 0) {
                interp__result_text(msg);
            }
            interp__write_line(x, msg);
            interp__check_pressure(x);
            return;
        }
    }
}

static void interp__bash_status(struct interp_kernel *k, const char *line)
{
    struct interp_ctx *c = k->ctx;
    if (!c || !c->cur || strncmp(line, "AIRLOCK_DONE ", 13) != 0)
        return;
    int status = atoi(line + 13);
    if (status != 0) {
        char v[64];
        snprintf(v, sizeof v, "exit status %d", status);
        interp__write_error(c->cur, "NonZeroExitStatus", v);
    }
    interp__exec_done(c);
}

static void interp__on_ctl(struct agent_fdio *io, const char *data, ssize_t n)
{
    struct interp_kernel *k = io->owner;
    if (n <= 0) {
        agent_fdio_close(io, false, interp__kernel_io_closed);
        return; /* the exit (SIGCHLD) finishes the current execution */
    }
    struct interp_ctx *c = k->ctx;
    if (al_buf_append(&k->frame, data, (size_t)n) < 0) {
        al_warn("context %s: kernel message over %zu bytes: killing the kernel", c ? c->id : "?",
                k->frame.max);
        kill(-k->pid, SIGKILL);
        al_buf_reset(&k->frame);
        return;
    }
    /* Everything the kernel printed before this message comes first. */
    interp__drain_output(k);
    if (c && c->kind == KIND_BASH) {
        char *nl;
        while (k->frame.len && (nl = memchr(k->frame.data, '\n', k->frame.len))) {
            *nl = '\0';
            interp__bash_status(k, k->frame.data);
            al_buf_consume(&k->frame, (size_t)(nl - k->frame.data) + 1);
        }
        return;
    }
    while (k->frame.len >= 4) {
        const unsigned char *p = (const unsigned char *)k->frame.data;
        uint32_t len = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        if (len > k->frame.max) {
            al_warn("context %s: kernel announced a %u-byte message: killing the kernel",
                    c ? c->id : "?", len);
            kill(-k->pid, SIGKILL);
            al_buf_reset(&k->frame);
            return;
        }
        if (k->frame.len < 4 + (size_t)len)
            return;
        json_t *msg = al_json_parse(k->frame.data + 4, len, NULL);
        al_buf_consume(&k->frame, 4 + (size_t)len);
        if (json_is_object(msg))
            interp__framed_message(k, msg);
        json_decref(msg);
        if (!k->ctx)
            return;
    }
}

static void interp__on_kernel_exit(void *arg, pid_t pid, int wstatus)
{
    struct interp_kernel *k = arg;
    k->alive = false;
    interp__drain_output(k);
    kill(-pid, SIGKILL); /* whatever the kernel left running in its session */
    struct interp_ctx *c = k->ctx;
    char status[96];
    int code;
    bool exited;
    agent_exit_status(wstatus, status, sizeof status, &code, &exited);
    if (c) {
        al_warn("context %s: %s kernel (pid %d) ended: %s", c->id, c->language, (int)pid, status);
        c->k = NULL;
        if (c->cur) {
            char v[256];
            snprintf(v, sizeof v,
                     "the %s process of this context ended (%s) before the execution finished; "
                     "its state is lost, the next execution starts a fresh one",
                     c->language, status);
            bool unavail = c->unavailable[0] != '\0';
            interp__write_error(c->cur, unavail ? "ContextUnavailable" : "KernelDied",
                                unavail ? c->unavailable : v);
            struct interp_exec *x = c->cur;
            c->cur = NULL;
            interp__exec_end(x);
        }
        c->exec_count = 0;
        c->unavailable[0] = '\0';
    }
    k->ctx = NULL;
    interp__kernel_close_ios(k);
    if (c) {
        interp__start_waiting(c->a);
        interp__start_next(c);
    }
}

static int interp__kernel_start(struct interp_ctx *c, struct al_error *err)
{
    struct agent *a = c->a;
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, pin[2] = {-1, -1}, pout[2] = {-1, -1};
    if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 || pipe2(pin, O_CLOEXEC) < 0 ||
        pipe2(pout, O_CLOEXEC) < 0) {
        int e = errno;
        int *all[] = {po, pe, pin, pout};
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 2; j++)
                if (all[i][j] >= 0)
                    close(all[i][j]);
        return al_error_set(err, -e, "cannot create pipes: %s", strerror(e));
    }
    char script[PATH_MAX + 32];
    snprintf(script, sizeof script, "%s/%s", a->lib_dir,
             c->kind == KIND_JS ? INTERP_KERNEL_JS : INTERP_KERNEL_PY);
    char *argv_py[] = {a->python, "-X", "utf8", script, NULL};
    char *argv_js[] = {a->node, script,
                       strcmp(c->language, "typescript") == 0 ? "--typescript" : NULL, NULL};
    char *argv_sh[] = {"/bin/bash", "--noprofile", "--norc", "-s", NULL};
    char lib_pp[PATH_MAX];
    snprintf(lib_pp, sizeof lib_pp, "%s", a->lib_dir);
    const char *more[] = {"AIRLOCK_KERNEL_LIB", lib_pp, "PYTHONIOENCODING", "utf-8", NULL, NULL};
    char **envp = agent_child_env(a, &c->user, NULL, c->kind == KIND_PYTHON ? more : NULL);
    struct al_spawn so = {0};
    agent_spawn_user(a, &so,
                     c->kind == KIND_PYTHON ? a->python
                     : c->kind == KIND_JS   ? a->node
                                            : "/bin/bash",
                     c->kind == KIND_PYTHON ? argv_py
                     : c->kind == KIND_JS   ? argv_js
                                            : argv_sh,
                     envp, &c->user);
    so.cwd = c->cwd;
    if (c->kind != KIND_BASH) {
        so.fds[0] = -1;
        so.fds[1] = po[1];
        so.fds[2] = pe[1];
        so.fds[3] = pin[0];
        so.fds[4] = pout[1];
        so.nfds = 5;
    } else {
        so.fds[0] = pin[0];
        so.fds[1] = po[1];
        so.fds[2] = pe[1];
        so.fds[3] = pout[1];
        so.nfds = 4;
    }
    pid_t pid;
    int r = al_spawn(&so, &pid, NULL, err);
    agent_free_strv(envp);
    close(po[1]);
    close(pe[1]);
    close(pin[0]);
    close(pout[1]);
    if (r < 0) {
        close(po[0]);
        close(pe[0]);
        close(pin[1]);
        close(pout[0]);
        return r;
    }
    struct interp_kernel *k = calloc(1, sizeof *k);
    k->ctx = c;
    k->pid = pid;
    k->alive = true;
    al_buf_init(&k->frame, a->lim.kernel_max_frame + 4);
    agent_fdio_open(a->loop, &k->out, po[0], 0, interp__on_out, k);
    agent_fdio_open(a->loop, &k->err, pe[0], 0, interp__on_out, k);
    agent_fdio_open(a->loop, &k->ctl_w, pin[1], a->lim.json_max_body * 2 + 65536, NULL, k);
    agent_fdio_open(a->loop, &k->ctl_r, pout[0], 0, interp__on_ctl, k);
    k->handles = 4;
    c->k = k;
    agent_child_watch(a, pid, interp__on_kernel_exit, k);
    al_info("context %s: started %s kernel pid %d as %s in %s", c->id, c->language, (int)pid,
            c->user.name, c->cwd);
    return 0;
}

/* ---- running executions ------------------------------------------------------------ */

static void interp__sh_quote(struct al_buf *b, const char *s)
{
    al_buf_append(b, "'", 1);
    for (; *s; s++) {
        if (*s == '\'')
            al_buf_appends(b, "'\\''");
        else
            al_buf_append(b, s, 1);
    }
    al_buf_append(b, "'", 1);
}

static bool interp__env_name_ok(const char *k)
{
    if (!*k || (*k >= '0' && *k <= '9'))
        return false;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_'))
            return false;
    return true;
}

static int interp__send_bash(struct interp_ctx *c, struct interp_exec *x)
{
    struct al_buf b;
    al_buf_init(&b, 0);
    const char *k;
    json_t *v;
    json_object_foreach(x->env_vars, k, v)
    {
        if (!interp__env_name_ok(k))
            continue;
        al_buf_printf(&b, "export %s=", k);
        interp__sh_quote(&b, json_string_value(v));
        al_buf_append(&b, "\n", 1);
    }
    char delim[48];
    do {
        char hex[33];
        al_random_hex(hex, 16);
        snprintf(delim, sizeof delim, "AIRLOCK_EOF_%s", hex);
    } while (strstr(x->code, delim));
    al_buf_printf(&b, "eval \"$(cat <<'%s'\n", delim);
    al_buf_appends(&b, x->code);
    al_buf_printf(&b, "\n%s\n)\" </dev/null\n__airlock_rc=$?\n", delim);
    /* per-execution variables do not outlive the execution (global ones are restored) */
    json_object_foreach(x->env_vars, k, v)
    {
        if (!interp__env_name_ok(k))
            continue;
        json_t *g = json_object_get(c->a->env, k);
        if (json_is_string(g)) {
            al_buf_printf(&b, "export %s=", k);
            interp__sh_quote(&b, json_string_value(g));
            al_buf_append(&b, "\n", 1);
        } else {
            al_buf_printf(&b, "unset %s\n", k);
        }
    }
    al_buf_appends(&b, "printf 'AIRLOCK_DONE %d\\n' \"$__airlock_rc\" >&3\n");
    int r = agent_fdio_write(&c->k->ctl_w, b.data, b.len);
    al_buf_free_wipe(&b);
    return r;
}

/* One request to a framed kernel (m is stolen). */
static int interp__send_frame(struct interp_ctx *c, json_t *m)
{
    char *s = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    unsigned char hdr[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8), (unsigned char)n};
    int r = agent_fdio_write(&c->k->ctl_w, hdr, 4);
    if (r == 0)
        r = agent_fdio_write(&c->k->ctl_w, s, n);
    free(s);
    return r;
}

static int interp__send_framed(struct interp_ctx *c, struct interp_exec *x)
{
    json_t *m = json_object();
    json_object_set_new(m, "op", json_string("execute"));
    json_object_set_new(m, "code", json_string(x->code));
    if (x->env_vars)
        json_object_set(m, "env_vars", x->env_vars);
    return interp__send_frame(c, m);
}

static void interp__start_next(struct interp_ctx *c)
{
    while (!c->cur && c->q_head) {
        struct interp_exec *x = c->q_head;
        c->q_head = x->next;
        if (!c->q_head)
            c->q_tail = NULL;
        c->nqueued--;
        x->next = NULL;
        struct al_error e = {0};
        if (!c->k && interp__kernel_start(c, &e) < 0) {
            al_warn("context %s: %s", c->id, al_error_str(&e));
            interp__write_error(x, "ContextUnavailable", al_error_str(&e));
            interp__exec_end(x);
            continue;
        }
        c->cur = x;
        x->running = true;
        int r;
        if (c->kind == KIND_BASH) {
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string("number_of_executions"));
            json_object_set_new(o, "execution_count", json_integer(++c->exec_count));
            interp__write_line(x, o);
            json_decref(o);
            r = interp__send_bash(c, x);
        } else {
            r = interp__send_framed(c, x);
        }
        if (r < 0) {
            interp__write_error(x, "ContextUnavailable",
                                r == -ENOSPC ? "the kernel is not reading its input"
                                             : "cannot send the code to the kernel");
            c->cur = NULL;
            interp__exec_end(x);
        }
    }
}

/* start: the kernel now; else at the first execution or interp__start_waiting. */
static struct interp_ctx *interp__ctx_new(struct agent *a, const char *language, const char *cwd,
                                          bool start, struct al_error *err)
{
    if (a->interp->n >= a->lim.max_contexts) {
        al_error_set(err, -ENOSPC, "too many contexts (%zu): remove some first", a->interp->n);
        return NULL;
    }
    struct interp_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    c->a = a;
    if (agent_resolve_user(a, NULL, &c->user, err) < 0) {
        free(c);
        return NULL;
    }
    al_uuid_v4(c->id);
    snprintf(c->language, sizeof c->language, "%s", language);
    c->kind = strcmp(language, "bash") == 0     ? KIND_BASH
              : strcmp(language, "python") == 0 ? KIND_PYTHON
                                                : KIND_JS;
    snprintf(c->cwd, sizeof c->cwd, "%s", cwd && *cwd ? cwd : c->user.home);
    struct stat st;
    if (stat(c->cwd, &st) < 0 || !S_ISDIR(st.st_mode)) {
        al_error_set(err, -ENOENT, "Failed to set working directory: '%s' is not a directory",
                     c->cwd);
        free(c);
        return NULL;
    }
    if (start && interp__kernel_start(c, err) < 0) {
        free(c);
        return NULL;
    }
    c->waiting = !start;
    c->next = a->interp->list;
    a->interp->list = c;
    a->interp->n++;
    return c;
}

static void interp__ctx_stop_kernel(struct interp_ctx *c, const char *err_name,
                                    const char *err_value)
{
    struct interp_kernel *k = c->k;
    if (c->cur) {
        interp__write_error(c->cur, err_name, err_value);
        struct interp_exec *x = c->cur;
        c->cur = NULL;
        interp__exec_end(x);
    }
    if (k) {
        c->k = NULL;
        k->ctx = NULL;
        if (k->alive) {
            kill(-k->pid, SIGKILL);
            kill(k->pid, SIGKILL);
        }
        /* the kernel struct lives on until reaped (interp__on_kernel_exit frees its fds) */
    }
    c->exec_count = 0;
}

static void interp__ctx_delete(struct agent *a, struct interp_ctx *c)
{
    interp__ctx_stop_kernel(c, "ContextDeleted", "the context was removed");
    while (c->q_head) {
        struct interp_exec *x = c->q_head;
        c->q_head = x->next;
        interp__write_error(x, "ContextDeleted", "the context was removed");
        interp__exec_end(x);
    }
    for (struct interp_ctx **pp = &a->interp->list; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            a->interp->n--;
            break;
        }
    }
    for (size_t i = 0; i < INTERP_NLANG; i++)
        if (strcmp(a->interp->defaults[i], c->id) == 0)
            a->interp->defaults[i][0] = '\0';
    free(c);
}

static int interp__lang_index(const char *lang)
{
    for (size_t i = 0; i < INTERP_NLANG; i++)
        if (strcmp(lang, interp__languages[i]) == 0)
            return (int)i;
    return -1;
}

/* Is prog (a name looked up in the children's PATH, or a path) an executable here? */
static bool interp__have_program(struct agent *a, const char *prog)
{
    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0;
    const char *path = json_string_value(json_object_get(a->env, "PATH"));
    if (!path)
        path = a->path_env;
    char cand[PATH_MAX];
    for (const char *p = path; p && al_spawn_path_next(&p, prog, cand, sizeof cand);) {
        /* an empty entry is the child's working directory, not the agent's */
        if (strncmp(cand, "./", 2) != 0 && access(cand, X_OK) == 0)
            return true;
    }
    return false;
}

/* Can this sandbox run lang? Otherwise a 404 text (the SDK's NotFoundError) into why. */
static bool interp__available(struct agent *a, const char *lang, char *why, size_t len)
{
    if (interp__lang_index(lang) < 0) {
        snprintf(why, len,
                 "no kernel for language '%.32s' in this sandbox: the airlock code interpreter "
                 "runs python, javascript, typescript and bash",
                 lang);
        return false;
    }
    if ((strcmp(lang, "javascript") == 0 || strcmp(lang, "typescript") == 0) &&
        !interp__have_program(a, a->node)) {
        snprintf(why, len,
                 "no kernel for language '%s' in this sandbox: it needs Node.js (%.200s), which "
                 "this template does not have",
                 lang, a->node);
        return false;
    }
    return true;
}

static struct interp_ctx *interp__default(struct agent *a, const char *language, bool start,
                                          struct al_error *err)
{
    int i = interp__lang_index(language);
    if (i < 0) {
        al_error_set(err, -EINVAL, "no kernel for language '%.32s'", language);
        return NULL;
    }
    char *slot = a->interp->defaults[i];
    struct interp_ctx *c = *slot ? interp__find(a, slot) : NULL;
    if (c)
        return c;
    c = interp__ctx_new(a, language, NULL, start, err);
    if (c)
        snprintf(slot, sizeof a->interp->defaults[i], "%s", c->id);
    return c;
}

void agent_interp_start_defaults(struct agent *a)
{
    if (a->interp->defaults_made)
        return;
    a->interp->defaults_made = true;
    /* The contexts exist at once, in this order; only the first kernel starts now, the
     * others once it is up (interp__start_waiting): started together they would share the
     * CPU and delay the first execution, which is almost always Python's. */
    static const char *const langs[] = {"python", "javascript"};
    bool started = false;
    for (size_t i = 0; i < sizeof langs / sizeof *langs; i++) {
        struct al_error e = {0};
        char why[256];
        if (!interp__available(a, langs[i], why, sizeof why))
            continue; /* e.g. no Node.js in this template */
        struct interp_ctx *c = interp__default(a, langs[i], !started, &e);
        if (!c)
            al_warn("the default %s context cannot start: %s", langs[i], al_error_str(&e));
        started = started || c;
    }
}

static void interp__start_waiting(struct agent *a)
{
    for (struct interp_ctx *c = a->interp->list; c; c = c->next) {
        if (!c->waiting)
            continue;
        c->waiting = false;
        struct al_error e = {0};
        if (!c->k && interp__kernel_start(c, &e) < 0)
            al_warn("context %s: %s", c->id, al_error_str(&e)); /* again at its first use */
    }
}

/* ---- HTTP ------------------------------------------------------------------------- */

static void interp__execute_body(struct al_http_req *req, int err)
{
    struct agent *a = req->user;
    req->user = NULL;
    if (err < 0)
        return;
    struct al_error e = {0};
    json_t *body = al_json_parse(req->body.data ? req->body.data : "", req->body.len, &e);
    al_buf_free_wipe(&req->body);
    if (!json_is_object(body)) {
        json_decref(body);
        interp__text(req, 422, "the request body must be a JSON object {\"code\": ...}: %s",
                     al_error_str(&e));
        return;
    }
    const char *code = NULL, *ctx_id = NULL, *lang = NULL;
    json_t *env = NULL;
    if (agent_pj_string(body, "code", NULL, &code, &e) < 0 ||
        agent_pj_string(body, "context_id", "contextId", &ctx_id, &e) == -EINVAL ||
        agent_pj_string(body, "language", NULL, &lang, &e) == -EINVAL ||
        agent_pj_string_map(body, "env_vars", "envVars", &env, &e) == -EINVAL) {
        interp__text(req, 422, "%s",
                     e.code ? al_error_str(&e) : "field 'code' (a string) is required");
        json_decref(body);
        return;
    }
    if (ctx_id && lang) {
        json_decref(body);
        interp__text(req, 400, "Only one of context_id or language can be provided");
        return;
    }
    struct interp_ctx *c = NULL;
    if (ctx_id) {
        c = interp__find(a, ctx_id);
        if (!c) {
            interp__text(req, 404, "Context %.64s not found", ctx_id);
            json_decref(body);
            return;
        }
    } else {
        char buf[32], why[320];
        const char *l = interp__normalize(lang, buf, sizeof buf);
        if (!interp__available(a, l, why, sizeof why)) {
            interp__text(req, 404, "%s", why);
            json_decref(body);
            return;
        }
        c = interp__default(a, l, true, &e);
        if (!c) {
            interp__text(req, 500, "Failed to create context: %s", al_error_str(&e));
            json_decref(body);
            return;
        }
    }
    if (c->nqueued >= a->lim.max_pending_exec) {
        interp__text(req, 429, "context %s already has %zu executions waiting", c->id, c->nqueued);
        json_decref(body);
        return;
    }
    struct interp_exec *x = calloc(1, sizeof *x);
    x->a = a;
    x->ctx = c;
    x->req = req;
    x->code = strdup(code);
    x->env_vars = env ? json_incref(env) : NULL;
    json_decref(body);
    uv_timer_init(a->loop, &x->keepalive);
    x->keepalive.data = x;
    uv_timer_start(&x->keepalive, interp__on_keepalive, INTERP_KEEPALIVE_MS, INTERP_KEEPALIVE_MS);
    x->last_write = al_now_ns();
    req->user = x;
    al_http_req_on_close(req, interp__on_client_gone);
    static const struct al_http_header h[] = {{"Content-Type", "application/x-ndjson"},
                                              {"Cache-Control", "no-store"}};
    al_http_resp_start(req, 200, h, 2, -1);
    if (c->q_tail)
        c->q_tail->next = x;
    else
        c->q_head = x;
    c->q_tail = x;
    c->nqueued++;
    al_debug("context %s: execution queued (%zu bytes of code)", c->id, strlen(x->code));
    interp__start_next(c);
}

static json_t *interp__ctx_json(const struct interp_ctx *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(c->id));
    json_object_set_new(o, "language", json_string(c->language));
    json_object_set_new(o, "cwd", json_string(c->cwd));
    return o;
}

static void interp__create_body(struct al_http_req *req, int err)
{
    struct agent *a = req->user;
    req->user = NULL;
    if (err < 0)
        return;
    struct al_error e = {0};
    json_t *body = req->body.len ? al_json_parse(req->body.data, req->body.len, &e) : json_object();
    al_buf_free(&req->body);
    if (!json_is_object(body)) {
        json_decref(body);
        interp__text(req, 422, "the request body must be a JSON object: %s", al_error_str(&e));
        return;
    }
    const char *lang = NULL, *cwd = NULL;
    if (agent_pj_string(body, "language", NULL, &lang, &e) == -EINVAL ||
        agent_pj_string(body, "cwd", NULL, &cwd, &e) == -EINVAL) {
        json_decref(body);
        interp__text(req, 422, "%s", al_error_str(&e));
        return;
    }
    char buf[32], why[320];
    const char *l = interp__normalize(lang, buf, sizeof buf);
    if (!interp__available(a, l, why, sizeof why)) {
        json_decref(body);
        interp__text(req, 404, "%s", why);
        return;
    }
    struct interp_ctx *c = interp__ctx_new(a, l, cwd, true, &e);
    json_decref(body);
    if (!c) {
        interp__text(req, e.code == -ENOSPC ? 429 : (e.code == -ENOENT ? 400 : 500), "%s",
                     al_error_str(&e));
        return;
    }
    al_http_reply_json(req, 200, interp__ctx_json(c));
}

void agent_interp_request(struct agent *a, struct al_http_req *req)
{
    const char *m = req->method, *p = req->path;
    if (strcmp(p, "/health") == 0 && strcmp(m, "GET") == 0) {
        al_http_reply(req, 200, "application/json", "\"OK\"", 4);
        return;
    }
    if (strcmp(p, "/execute") == 0 && strcmp(m, "POST") == 0) {
        if (!agent_token_ok(a, al_http_req_header(req, "X-Access-Token"))) {
            interp__text(req, 401, "unauthorized: a valid X-Access-Token is required");
            return;
        }
        agent_interp_start_defaults(a);
        req->user = a;
        if (al_http_req_read_body(req, a->lim.json_max_body, interp__execute_body) < 0)
            interp__text(req, 500, "cannot read the request body");
        return;
    }
    if (strcmp(p, "/contexts") == 0 && strcmp(m, "GET") == 0) {
        agent_interp_start_defaults(a);
        json_t *arr = json_array();
        for (struct interp_ctx *c = a->interp->list; c; c = c->next)
            json_array_insert_new(arr, 0, interp__ctx_json(c)); /* creation order */
        al_http_reply_json(req, 200, arr);
        return;
    }
    if (strcmp(p, "/contexts") == 0 && strcmp(m, "POST") == 0) {
        agent_interp_start_defaults(a); /* the defaults come first, as E2B's */
        req->user = a;
        if (al_http_req_read_body(req, 65536, interp__create_body) < 0)
            interp__text(req, 500, "cannot read the request body");
        return;
    }
    if (strncmp(p, "/contexts/", 10) == 0) {
        char id[64];
        const char *rest = p + 10;
        const char *slash = strchr(rest, '/');
        size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
        if (n == 0 || n >= sizeof id) {
            interp__text(req, 404, "Not Found");
            return;
        }
        memcpy(id, rest, n);
        id[n] = '\0';
        struct interp_ctx *c = interp__find(a, id);
        bool restart = slash && strcmp(slash, "/restart") == 0 && strcmp(m, "POST") == 0;
        bool del = !slash && strcmp(m, "DELETE") == 0;
        if (!restart && !del) {
            interp__text(req, 404, "Not Found");
            return;
        }
        if (!c) {
            interp__text(req, 404, "Context %s not found", id);
            return;
        }
        if (del) {
            al_info("context %s: removed", c->id);
            interp__ctx_delete(a, c);
            al_http_reply(req, 204, NULL, NULL, 0);
            return;
        }
        al_info("context %s: restarting", c->id);
        interp__ctx_stop_kernel(c, "ContextRestarting", "Context was restarted");
        struct al_error e = {0};
        if (interp__kernel_start(c, &e) < 0) {
            interp__text(req, 500, "Failed to restart context %s: %s", c->id, al_error_str(&e));
            return;
        }
        al_http_reply(req, 204, NULL, NULL, 0);
        interp__start_next(c);
        return;
    }
    interp__text(req, 404, "Not Found");
}

int agent_interp_init(struct agent *a)
{
    a->interp = calloc(1, sizeof *a->interp);
    return a->interp ? 0 : -ENOMEM;
}

void agent_interp_free(struct agent *a)
{
    if (!a->interp)
        return;
    while (a->interp->list)
        interp__ctx_delete(a, a->interp->list);
    free(a->interp);
    a->interp = NULL;
}

void agent_interp_shutdown(struct agent *a, int sig)
{
    for (struct interp_ctx *c = a->interp->list; c; c = c->next)
        if (c->k && c->k->alive)
            kill(-c->k->pid, sig);
}
