/* vmm/guest/proc: process.Process, and the registry of children the agent reaps.
 *
 * A process has its stdout/stderr pipes (or a pty master) read through fdio, fans each chunk
 * out to the streams attached to it (Start and any Connect), and, like envd, drops output
 * when nobody is attached. Backpressure: when any attached stream has more than
 * stream_high_water bytes queued, reading from the child stops (its pipe fills and its
 * writes block) until the stream drains; memory per process is bounded by the pipe sizes
 * plus the high-water mark per stream.
 * End of a process: once it is reaped, whatever it left in its pipes is read (bounded by
 * the pipe capacity) and the end event is sent. Unlike envd, the agent does not wait for
 * EOF: a background grandchild that keeps the pipe open does not hold the command open.
 * The exit is retained for 30 s so that a late Connect still learns it.
 * Deadlines (envd's): Start's Connect-Timeout-Ms is also the process's lifetime; there the
 * Start stream ends with deadline_exceeded (no end event) and the process group is killed,
 * whether or not the client is still there. A Connect stream's deadline ends that stream
 * only; the process goes on.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/log.h"
#include "common/util.h"
#include "fdio.h"
#include "fspath.h"
#include "protojson.h"
#include "spawn.h"

#define PROC_RETAIN_NS   (30ull * 1000000000ull)
#define PROC_MAX_ARGS    65536
#define PROC_DRAIN_BYTES (4u << 20)

struct proc__child {
    struct proc__child *next;
    pid_t pid;
    agent_child_exit_fn fn;
    void *arg;
};

struct proc__sub {
    struct proc__sub *next;
    struct agent_stream *s;
    struct agent_proc *p;
    bool starter; /* the Start stream, whose deadline is the process's */
};

struct agent_proc {
    struct agent_proc *next;
    struct agent *a;
    pid_t pid;
    char *tag;
    json_t *config;
    bool pty;
    struct agent_fdio out; /* stdout, or the pty master (read and write) */
    struct agent_fdio err; /* stderr (pipes only) */
    struct agent_fdio in;  /* stdin pipe (pipes with stdin only) */
    int handles;           /* fdio + timer handles not yet closed */
    bool reaped;
    int wstatus;
    bool finished;
    bool paused;
    uv_timer_t timeout;
    bool has_timeout;
    struct proc__sub *subs;
    size_t nsubs;
    uint64_t bytes_out, bytes_err;
    agent_child_exit_fn on_end; /* the agent's own (startCmd): told of the exit */
    void *on_end_arg;
};

struct proc__retained {
    struct proc__retained *next;
    pid_t pid;
    char *tag;
    json_t *end; /* the EndEvent object */
    uint64_t expires;
};

struct agent_procs {
    struct agent_proc *list;
    size_t n;
    struct proc__retained *retained;
    size_t nretained;
    struct proc__child *children;
};

/* ---- child registry ------------------------------------------------------------------ */

int agent_child_watch(struct agent *a, pid_t pid, agent_child_exit_fn fn, void *arg)
{
    struct proc__child *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->pid = pid;
    c->fn = fn;
    c->arg = arg;
    c->next = a->procs->children;
    a->procs->children = c;
    return 0;
}

void agent_child_unwatch(struct agent *a, pid_t pid)
{
    for (struct proc__child **pp = &a->procs->children; *pp; pp = &(*pp)->next) {
        if ((*pp)->pid == pid) {
            struct proc__child *c = *pp;
            *pp = c->next;
            free(c);
            return;
        }
    }
}

void agent_reap_children(struct agent *a)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0)
            return;
        struct proc__child *found = NULL;
        for (struct proc__child **pp = &a->procs->children; *pp; pp = &(*pp)->next) {
            if ((*pp)->pid == pid) {
                found = *pp;
                *pp = found->next;
                break;
            }
        }
        if (found) {
            found->fn(found->arg, pid, st);
            free(found);
        } else {
            al_debug("reaped orphan pid %d", (int)pid);
        }
    }
}

/* ---- events ------------------------------------------------------------------------- */

static json_t *proc__event(const char *kind, json_t *body)
{
    json_t *ev = json_object();
    json_object_set_new(ev, kind, body);
    json_t *root = json_object();
    json_object_set_new(root, "event", ev);
    return root;
}

static json_t *proc__start_event(pid_t pid)
{
    json_t *b = json_object();
    json_object_set_new(b, "pid", json_integer(pid));
    return proc__event("start", b);
}

static json_t *proc__end_body(int wstatus)
{
    char status[96];
    int code;
    bool exited;
    agent_exit_status(wstatus, status, sizeof status, &code, &exited);
    json_t *b = json_object();
    if (code != 0)
        json_object_set_new(b, "exitCode", json_integer(code));
    if (exited)
        json_object_set_new(b, "exited", json_true());
    json_object_set_new(b, "status", json_string(status));
    if (!(exited && code == 0))
        json_object_set_new(b, "error", json_string(status));
    return b;
}

/* ---- retained exits ------------------------------------------------------------------ */

static void proc__retained_gc(struct agent_procs *ps)
{
    uint64_t now = al_now_ns();
    for (struct proc__retained **pp = &ps->retained; *pp;) {
        struct proc__retained *r = *pp;
        if (r->expires <= now) {
            *pp = r->next;
            free(r->tag);
            json_decref(r->end);
            free(r);
            ps->nretained--;
        } else {
            pp = &r->next;
        }
    }
}

static void proc__retain(struct agent *a, struct agent_proc *p, json_t *end)
{
    struct agent_procs *ps = a->procs;
    proc__retained_gc(ps);
    /* a newer process with the same pid or tag replaces an older record */
    for (struct proc__retained **pp = &ps->retained; *pp;) {
        struct proc__retained *r = *pp;
        if (r->pid == p->pid || (p->tag && r->tag && strcmp(r->tag, p->tag) == 0) ||
            ps->nretained >= a->lim.max_retained_exits) {
            *pp = r->next;
            free(r->tag);
            json_decref(r->end);
            free(r);
            ps->nretained--;
        } else {
            pp = &r->next;
        }
    }
    struct proc__retained *r = calloc(1, sizeof *r);
    if (!r)
        return;
    r->pid = p->pid;
    r->tag = p->tag ? strdup(p->tag) : NULL;
    r->end = json_incref(end);
    r->expires = al_now_ns() + PROC_RETAIN_NS;
    r->next = ps->retained;
    ps->retained = r;
    ps->nretained++;
}

/* ---- lifetime ------------------------------------------------------------------------ */

static void proc__free(struct agent_proc *p)
{
    free(p->tag);
    json_decref(p->config);
    free(p);
}

static void proc__handle_closed(struct agent_proc *p)
{
    if (--p->handles == 0 && p->finished)
        proc__free(p);
}

static void proc__fdio_closed(struct agent_fdio *io)
{
    proc__handle_closed(io->owner);
}

static void proc__timer_closed(uv_handle_t *h)
{
    proc__handle_closed(h->data);
}

static void proc__close_io(struct agent_fdio *io)
{
    if (agent_fdio_is_open(io))
        agent_fdio_close(io, false, proc__fdio_closed);
}

static void proc__unlink(struct agent *a, struct agent_proc *p)
{
    for (struct agent_proc **pp = &a->procs->list; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            a->procs->n--;
            return;
        }
    }
}

static void proc__finish(struct agent_proc *p)
{
    struct agent *a = p->a;
    if (p->finished)
        return;
    p->finished = true;
    json_t *end = proc__end_body(p->wstatus);
    char status[96];
    int code;
    bool exited;
    agent_exit_status(p->wstatus, status, sizeof status, &code, &exited);
    al_info("process %d ended: %s (stdout %llu bytes, stderr %llu bytes)", (int)p->pid, status,
            (unsigned long long)p->bytes_out, (unsigned long long)p->bytes_err);
    proc__retain(a, p, end);
    for (struct proc__sub *s = p->subs; s;) {
        struct proc__sub *next = s->next;
        agent_stream_send(s->s, proc__event("end", json_incref(end)));
        s->s->owner = NULL;
        s->s->on_gone = NULL;
        s->s->on_drain = NULL;
        agent_stream_end(s->s, AGENT_CONNECT_OK, NULL);
        free(s);
        s = next;
    }
    p->subs = NULL;
    p->nsubs = 0;
    json_decref(end);
    proc__close_io(&p->out);
    proc__close_io(&p->err);
    proc__close_io(&p->in);
    if (p->has_timeout) {
        p->has_timeout = false;
        uv_timer_stop(&p->timeout);
        uv_close((uv_handle_t *)&p->timeout, proc__timer_closed);
    }
    proc__unlink(a, p);
    if (p->handles == 0)
        proc__free(p);
}

/* ---- output ------------------------------------------------------------------------- */

static void proc__set_paused(struct agent_proc *p, bool paused)
{
    if (p->paused == paused)
        return;
    p->paused = paused;
    struct agent_fdio *ios[] = {&p->out, &p->err};
    for (size_t i = 0; i < 2; i++) {
        if (!agent_fdio_is_open(ios[i]))
            continue;
        if (paused)
            agent_fdio_pause(ios[i]);
        else
            agent_fdio_resume(ios[i]);
    }
}

static void proc__check_pressure(struct agent_proc *p)
{
    bool over = false;
    for (struct proc__sub *s = p->subs; s; s = s->next) {
        if (agent_stream_queued(s->s) > p->a->lim.stream_high_water) {
            over = true;
            agent_stream_want_drain(s->s);
        }
    }
    proc__set_paused(p, over);
}

static void proc__on_drain(struct agent_stream *s)
{
    struct proc__sub *sub = s->owner;
    if (sub && !sub->p->finished)
        proc__check_pressure(sub->p);
}

static void proc__on_output(struct agent_fdio *io, const char *data, ssize_t n)
{
    struct agent_proc *p = io->owner;
    if (n <= 0) {
        if (n < 0)
            al_debug("process %d: read error %s", (int)p->pid, strerror((int)-n));
        /* EOF: keep the fd until the process is reaped (pty master stays writable). */
        if (io != &p->out || !p->pty)
            proc__close_io(io);
        return;
    }
    const char *kind = p->pty ? "pty" : (io == &p->out ? "stdout" : "stderr");
    if (io == &p->out)
        p->bytes_out += (uint64_t)n;
    else
        p->bytes_err += (uint64_t)n;
    if (!p->subs)
        return; /* like envd: output nobody listens to is dropped */
    char *b64 = agent_pj_base64_encode(data, (size_t)n);
    if (!b64)
        return;
    for (struct proc__sub *s = p->subs; s; s = s->next) {
        json_t *d = json_object();
        json_object_set_new(d, kind, json_string(b64));
        agent_stream_send(s->s, proc__event("data", d));
    }
    free(b64);
    proc__check_pressure(p);
}

/* ---- subscribers --------------------------------------------------------------------- */

static void proc__on_gone(struct agent_stream *s)
{
    struct proc__sub *sub = s->owner;
    if (!sub)
        return;
    struct agent_proc *p = sub->p;
    for (struct proc__sub **pp = &p->subs; *pp; pp = &(*pp)->next) {
        if (*pp == sub) {
            *pp = sub->next;
            p->nsubs--;
            break;
        }
    }
    free(sub);
    s->owner = NULL;
    proc__check_pressure(p);
}

static int proc__subscribe(struct agent_proc *p, struct agent_stream *s, bool starter)
{
    struct proc__sub *sub = calloc(1, sizeof *sub);
    if (!sub)
        return -ENOMEM;
    sub->s = s;
    sub->p = p;
    sub->starter = starter;
    s->owner = sub;
    s->on_gone = proc__on_gone;
    s->on_drain = proc__on_drain;
    sub->next = p->subs;
    p->subs = sub;
    p->nsubs++;
    return 0;
}

/* ---- exit --------------------------------------------------------------------------- */

static void proc__on_exit(void *arg, pid_t pid, int wstatus)
{
    struct agent_proc *p = arg;
    p->reaped = true;
    p->wstatus = wstatus;
    if (p->on_end)
        p->on_end(p->on_end_arg, pid, wstatus);
    /* Collect what the process left in its pipes, then report the end. */
    if (agent_fdio_is_open(&p->out))
        agent_fdio_drain(&p->out, PROC_DRAIN_BYTES);
    if (agent_fdio_is_open(&p->err))
        agent_fdio_drain(&p->err, PROC_DRAIN_BYTES);
    proc__finish(p);
}

static void proc__on_timeout(uv_timer_t *t)
{
    struct agent_proc *p = t->data;
    if (p->reaped)
        return;
    /* As envd: the Start stream ends with deadline_exceeded, not with the end event of
     * the kill (streams attached by Connect have deadlines of their own and see it). */
    for (struct proc__sub *sub = p->subs; sub; sub = sub->next) {
        if (sub->starter) {
            agent_stream_expire(sub->s);
            break;
        }
    }
    al_info("process %d reached its Connect-Timeout-Ms deadline: killing it", (int)p->pid);
    if (kill(-p->pid, SIGKILL) < 0)
        kill(p->pid, SIGKILL);
}

/* ---- requests ----------------------------------------------------------------------- */

static struct agent_proc *proc__find(struct agent *a, const json_t *msg, bool *had_selector,
                                     pid_t *pid_out, const char **tag_out, struct al_error *err)
{
    json_t *sel = NULL;
    *had_selector = false;
    *pid_out = 0;
    *tag_out = NULL;
    if (agent_pj_object(msg, "process", NULL, &sel, err) < 0)
        return NULL;
    uint32_t pid;
    const char *tag;
    if (agent_pj_uint32(sel, "pid", NULL, &pid, err) == 0) {
        *had_selector = true;
        *pid_out = (pid_t)pid;
        for (struct agent_proc *p = a->procs->list; p; p = p->next)
            if (p->pid == (pid_t)pid && !p->finished)
                return p;
        al_error_set(err, -ENOENT, "process with pid %u not found", pid);
        return NULL;
    }
    if (agent_pj_string(sel, "tag", NULL, &tag, err) == 0) {
        *had_selector = true;
        *tag_out = tag;
        for (struct agent_proc *p = a->procs->list; p; p = p->next)
            if (p->tag && strcmp(p->tag, tag) == 0 && !p->finished)
                return p;
        al_error_set(err, -ENOENT, "process with tag %.128s not found", tag);
        return NULL;
    }
    return NULL;
}

static bool proc__select(struct agent_call *c, struct agent_proc **out)
{
    struct al_error e = {0};
    bool had;
    pid_t pid;
    const char *tag;
    *out = proc__find(c->a, c->msg, &had, &pid, &tag, &e);
    if (*out)
        return true;
    if (!had && !e.code)
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT,
                        "the request needs process: {pid} or {tag}");
    else if (e.code == -ENOENT)
        agent_rpc_error(c, AGENT_CONNECT_NOT_FOUND, "%s", al_error_str(&e));
    else
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
    return false;
}

/* What a process is started with: a Start request's, or the agent's own (startCmd). */
struct proc__spec {
    const char *user; /* NULL: the default user */
    const char *cmd;
    const json_t *args, *envs; /* may be NULL */
    const char *cwd;           /* NULL: the default workdir */
    const char *tag;
    bool want_stdin, pty;
    uint32_t cols, rows;
    int64_t left; /* ms of the deadline (its lifetime), -1: none, 0: passed */
};

static int proc__fail(enum agent_connect_code *code, enum agent_connect_code c, struct al_error *e,
                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int proc__fail(enum agent_connect_code *code, enum agent_connect_code c, struct al_error *e,
                      const char *fmt, ...)
{
    char msg[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *code = c;
    al_error_set(e, -EINVAL, "%s", msg);
    return -1;
}

/* Starts q's process and registers it; *code and e say why not. */
static int proc__spawn(struct agent *a, const struct proc__spec *q, struct agent_proc **out,
                       enum agent_connect_code *code, struct al_error *e)
{
    const char *cmd = q->cmd, *cwd = q->cwd, *tag = q->tag;
    const json_t *args = q->args, *envs = q->envs;
    bool want_stdin = q->want_stdin, pty = q->pty;
    uint32_t cols = q->cols, rows = q->rows;
    int64_t left = q->left;
    size_t i;
    json_t *v;
    int r;
    if (a->procs->n >= a->lim.max_procs)
        return proc__fail(code, AGENT_CONNECT_RESOURCE_EXHAUSTED, e,
                          "too many running processes (%zu); wait for some to end or kill them",
                          a->procs->n);
    struct agent_user u;
    struct al_error ue = {0};
    int ur = agent_resolve_user(a, q->user, &u, &ue);
    if (ur < 0) {
        if (ur == -ENOENT && q->user)
            return proc__fail(code, AGENT_CONNECT_UNAUTHENTICATED, e, "invalid username: '%.128s'",
                              q->user);
        return proc__fail(code,
                          ur == -ENOENT  ? AGENT_CONNECT_UNAUTHENTICATED
                          : ur == -EPERM ? AGENT_CONNECT_PERMISSION_DENIED
                                         : AGENT_CONNECT_INTERNAL,
                          e, "%s", al_error_str(&ue));
    }
    char dir[PATH_MAX];
    if (agent_path_resolve(cwd, u.home, a->default_workdir, dir, sizeof dir, e) < 0)
        return proc__fail(code, AGENT_CONNECT_INVALID_ARGUMENT, e, "%s", al_error_str(e));
    struct stat st;
    if (stat(dir, &st) < 0)
        return proc__fail(code, AGENT_CONNECT_INVALID_ARGUMENT, e, "cwd '%s' does not exist", dir);
    /* A deadline that has already passed: envd would still start the command, unseen (its
     * stream ends at once); here nothing is started and the stream says why. */
    if (left == 0)
        return proc__fail(code, AGENT_CONNECT_DEADLINE_EXCEEDED, e, "context deadline exceeded");
    /* argv */
    size_t argc = args ? json_array_size(args) : 0;
    char **argv = calloc(argc + 2, sizeof *argv);
    char **envp = agent_child_env(a, &u, envs, NULL);
    if (!argv || !envp) {
        free(argv);
        agent_free_strv(envp);
        return proc__fail(code, AGENT_CONNECT_RESOURCE_EXHAUSTED, e, "out of memory");
    }
    argv[0] = (char *)cmd;
    json_array_foreach(args, i, v) argv[i + 1] = (char *)json_string_value(v);

    int child_in = -1, child_out = -1, child_err = -1, par_in = -1, par_out = -1, par_err = -1;
    int master = -1, slave = -1;
    struct al_spawn so = {0};
    if (pty) {
        if (agent_pty_open(cols, rows, &u, &master, &slave, e) < 0) {
            free(argv);
            agent_free_strv(envp);
            return proc__fail(code, AGENT_CONNECT_INVALID_ARGUMENT, e, "%s", al_error_str(e));
        }
        so.fds[0] = so.fds[1] = so.fds[2] = slave;
        so.controlling_tty = true;
    } else {
        int po[2], pe[2], pi[2] = {-1, -1};
        if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 ||
            (want_stdin && pipe2(pi, O_CLOEXEC) < 0)) {
            free(argv);
            agent_free_strv(envp);
            return proc__fail(code, AGENT_CONNECT_RESOURCE_EXHAUSTED, e, "cannot create pipes: %s",
                              strerror(errno));
        }
        child_out = po[1];
        par_out = po[0];
        child_err = pe[1];
        par_err = pe[0];
        child_in = pi[0];
        par_in = pi[1];
        so.fds[0] = child_in;
        so.fds[1] = child_out;
        so.fds[2] = child_err;
    }
    so.nfds = 3;
    agent_spawn_user(a, &so, cmd, argv, envp, &u);
    so.cwd = dir;
    pid_t pid;
    r = al_spawn(&so, &pid, NULL, e);
    free(argv);
    agent_free_strv(envp);
    if (slave >= 0)
        close(slave);
    if (child_in >= 0)
        close(child_in);
    if (child_out >= 0)
        close(child_out);
    if (child_err >= 0)
        close(child_err);
    if (r < 0) {
        if (master >= 0)
            close(master);
        if (par_in >= 0)
            close(par_in);
        if (par_out >= 0)
            close(par_out);
        if (par_err >= 0)
            close(par_err);
        return proc__fail(code, AGENT_CONNECT_INVALID_ARGUMENT, e,
                          "error starting process '%s': %s", cmd, al_error_str(e));
    }
    struct agent_proc *p = calloc(1, sizeof *p);
    p->a = a;
    p->pid = pid;
    p->pty = pty;
    p->tag = tag ? strdup(tag) : NULL;
    p->config = json_object();
    json_object_set_new(p->config, "cmd", json_string(cmd));
    json_object_set_new(p->config, "args", args ? json_deep_copy(args) : json_array());
    if (envs)
        json_object_set_new(p->config, "envs", json_deep_copy(envs));
    if (cwd)
        json_object_set_new(p->config, "cwd", json_string(cwd));
    if (pty) {
        agent_fdio_open(a->loop, &p->out, master, a->lim.stdin_max_queued, proc__on_output, p);
        p->handles++;
    } else {
        agent_fdio_open(a->loop, &p->out, par_out, 0, proc__on_output, p);
        agent_fdio_open(a->loop, &p->err, par_err, 0, proc__on_output, p);
        p->handles += 2;
        if (par_in >= 0) {
            agent_fdio_open(a->loop, &p->in, par_in, a->lim.stdin_max_queued, NULL, p);
            p->handles++;
        }
    }
    if (left > 0) {
        uv_timer_init(a->loop, &p->timeout);
        p->timeout.data = p;
        uv_timer_start(&p->timeout, proc__on_timeout, (uint64_t)left, 0);
        p->has_timeout = true;
        p->handles++;
    }
    p->next = a->procs->list;
    a->procs->list = p;
    a->procs->n++;
    agent_child_watch(a, pid, proc__on_exit, p);
    al_info("process %d started (%s, %zu args, user %s, %s)", (int)pid, agent_path_base(cmd), argc,
            u.name, pty ? "pty" : "pipes");
    *out = p;
    return 0;
}

int agent_proc_start_shell(struct agent *a, const struct agent_shell_opts *o, pid_t *pid,
                           struct al_error *err)
{
    json_t *args = json_pack("[s,s,s]", "-l", "-c", o->cmdline);
    if (!args)
        return al_error_set(err, -ENOMEM, "out of memory");
    struct proc__spec q = {.cmd = "/bin/bash", .args = args, .tag = o->tag, .left = -1};
    struct agent_proc *p = NULL;
    enum agent_connect_code code;
    int r = proc__spawn(a, &q, &p, &code, err);
    json_decref(args);
    if (r < 0)
        return -EINVAL;
    p->on_end = o->on_end;
    p->on_end_arg = o->arg;
    *pid = p->pid;
    return 0;
}

static void proc__start(struct agent_call *c)
{
    struct agent *a = c->a;
    struct al_error e = {0};
    json_t *pc = NULL, *envs = NULL, *pty = NULL;
    const char *cmd = NULL, *cwd = NULL, *tag = NULL;
    bool want_stdin = true;
    int r;
    if (agent_pj_object(c->msg, "process", NULL, &pc, &e) < 0) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s",
                          e.code ? al_error_str(&e) : "StartRequest needs process: {cmd, args}");
        return;
    }
    if ((r = agent_pj_string(pc, "cmd", NULL, &cmd, &e)) < 0 || !*cmd) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s",
                          r == -EINVAL ? al_error_str(&e) : "process.cmd is required");
        return;
    }
    json_t *args = agent_pj_field(pc, "args", NULL);
    if (args && (!json_is_array(args) || json_array_size(args) > PROC_MAX_ARGS)) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT,
                          "process.args must be an array of at most %d strings", PROC_MAX_ARGS);
        return;
    }
    size_t i;
    json_t *v;
    json_array_foreach(args, i, v)
    {
        if (!json_is_string(v) || memchr(json_string_value(v), '\0', json_string_length(v))) {
            agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT,
                              "process.args[%zu] must be a string without NUL bytes", i);
            return;
        }
    }
    if ((r = agent_pj_string_map(pc, "envs", NULL, &envs, &e)) < 0 && r != -ENOENT) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    if ((r = agent_pj_string(pc, "cwd", NULL, &cwd, &e)) < 0 && r != -ENOENT) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    if ((r = agent_pj_string(c->msg, "tag", NULL, &tag, &e)) < 0 && r != -ENOENT) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    if ((r = agent_pj_bool(c->msg, "stdin", NULL, &want_stdin, &e)) < 0 && r != -ENOENT) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    uint32_t cols = 80, rows = 24;
    if ((r = agent_pj_object(c->msg, "pty", NULL, &pty, &e)) < 0 && r != -ENOENT) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    if (pty) {
        json_t *size = agent_pj_field(pty, "size", NULL);
        if (size && (agent_pj_uint32(size, "cols", NULL, &cols, &e) == -EINVAL ||
                     agent_pj_uint32(size, "rows", NULL, &rows, &e) == -EINVAL)) {
            agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
            return;
        }
    }
    struct proc__spec q = {.user = c->has_user ? c->user : NULL,
                           .cmd = cmd,
                           .args = args,
                           .envs = envs,
                           .cwd = cwd,
                           .tag = tag,
                           .want_stdin = want_stdin,
                           .pty = pty != NULL,
                           .cols = cols,
                           .rows = rows,
                           .left = agent_call_time_left(c)};
    struct agent_proc *p = NULL;
    enum agent_connect_code code;
    if (proc__spawn(a, &q, &p, &code, &e) < 0) {
        agent_stream_fail(c, code, "%s", al_error_str(&e));
        return;
    }
    struct agent_stream *s = agent_stream_start(c, "{\"event\":{\"keepalive\":{}}}");
    if (!s)
        return;
    agent_stream_send(s, proc__start_event(p->pid));
    proc__subscribe(p, s, true);
}

static void proc__connect(struct agent_call *c)
{
    struct agent *a = c->a;
    struct al_error e = {0};
    bool had;
    pid_t pid;
    const char *tag;
    struct agent_proc *p = proc__find(a, c->msg, &had, &pid, &tag, &e);
    if (!p) {
        proc__retained_gc(a->procs);
        for (struct proc__retained *r = a->procs->retained; had && r; r = r->next) {
            if ((pid && r->pid == pid) || (tag && r->tag && strcmp(tag, r->tag) == 0)) {
                struct agent_stream *s = agent_stream_start(c, "{\"event\":{\"keepalive\":{}}}");
                if (!s)
                    return;
                agent_stream_send(s, proc__start_event(r->pid));
                agent_stream_send(s, proc__event("end", json_incref(r->end)));
                agent_stream_end(s, AGENT_CONNECT_OK, NULL);
                return;
            }
        }
        agent_stream_fail(c, had ? AGENT_CONNECT_NOT_FOUND : AGENT_CONNECT_INVALID_ARGUMENT, "%s",
                          e.code ? al_error_str(&e) : "the request needs process: {pid} or {tag}");
        return;
    }
    if (p->nsubs >= a->lim.max_subscribers) {
        agent_stream_fail(c, AGENT_CONNECT_RESOURCE_EXHAUSTED,
                          "process %d already has %zu connected streams", (int)p->pid, p->nsubs);
        return;
    }
    struct agent_stream *s = agent_stream_start(c, "{\"event\":{\"keepalive\":{}}}");
    if (!s)
        return;
    agent_stream_send(s, proc__start_event(p->pid));
    proc__subscribe(p, s, false);
}

static void proc__list(struct agent_call *c)
{
    json_t *arr = json_array();
    for (struct agent_proc *p = c->a->procs->list; p; p = p->next) {
        if (p->finished)
            continue;
        json_t *info = json_object();
        json_object_set_new(info, "config", json_incref(p->config));
        json_object_set_new(info, "pid", json_integer(p->pid));
        if (p->tag)
            json_object_set_new(info, "tag", json_string(p->tag));
        json_array_append_new(arr, info);
    }
    json_t *res = json_object();
    json_object_set_new(res, "processes", arr);
    agent_rpc_reply(c, res);
}

static void proc__send_input(struct agent_call *c)
{
    struct agent_proc *p;
    if (!proc__select(c, &p))
        return;
    struct al_error e = {0};
    json_t *in = NULL;
    if (agent_pj_object(c->msg, "input", NULL, &in, &e) < 0) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s",
                        e.code ? al_error_str(&e) : "the request needs input: {stdin} or {pty}");
        return;
    }
    struct al_buf data;
    al_buf_init(&data, c->a->lim.rpc_max_body);
    bool to_pty;
    int r = agent_pj_bytes(in, "pty", NULL, &data, &e);
    if (r == 0) {
        to_pty = true;
    } else if (r == -ENOENT && (r = agent_pj_bytes(in, "stdin", NULL, &data, &e)) == 0) {
        to_pty = false;
    } else {
        al_buf_free(&data);
        if (r == -ENOENT)
            agent_rpc_error(c, AGENT_CONNECT_UNIMPLEMENTED,
                            "invalid input type: expected stdin or pty");
        else
            agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    struct agent_fdio *io = NULL;
    if (to_pty && !p->pty) {
        agent_rpc_error(c, AGENT_CONNECT_INTERNAL,
                        "error writing to tty: tty not assigned to process — input should be "
                        "written to the stdin, not the tty");
    } else if (!to_pty && p->pty) {
        agent_rpc_error(c, AGENT_CONNECT_INTERNAL,
                        "error writing to stdin: tty assigned to process — input should be written "
                        "to the pty, not the stdin");
    } else {
        io = to_pty ? &p->out : &p->in;
        if (!agent_fdio_is_open(io) || io->close_after_flush) {
            agent_rpc_error(c, AGENT_CONNECT_INTERNAL,
                            "error writing to stdin: stdin not enabled or closed");
        } else {
            r = agent_fdio_write(io, data.data ? data.data : "", data.len);
            if (r == -ENOSPC)
                agent_rpc_error(c, AGENT_CONNECT_RESOURCE_EXHAUSTED,
                                "the process is not reading its input: %zu bytes are already "
                                "waiting (limit %zu)",
                                agent_fdio_queued(io), c->a->lim.stdin_max_queued);
            else if (r < 0)
                agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "error writing to process %d: %s",
                                (int)p->pid, strerror(-r));
            else
                agent_rpc_reply(c, NULL);
        }
    }
    al_buf_free_wipe(&data);
}

static const struct agent_pj_enum proc__signals[] = {
    {"SIGNAL_UNSPECIFIED", 0}, {"SIGNAL_SIGTERM", 15}, {"SIGNAL_SIGKILL", 9}, {NULL, 0}};

static void proc__send_signal(struct agent_call *c)
{
    struct agent_proc *p;
    if (!proc__select(c, &p))
        return;
    struct al_error e = {0};
    int sig = 0;
    if (agent_pj_enum(c->msg, "signal", NULL, proc__signals, &sig, &e) == -EINVAL) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    if (sig != SIGKILL && sig != SIGTERM) {
        agent_rpc_error(c, AGENT_CONNECT_UNIMPLEMENTED,
                        "invalid signal: %d (SIGNAL_SIGTERM and SIGNAL_SIGKILL are supported)",
                        sig);
        return;
    }
    /* The process leads its own process group: signal the group so that pipelines and
     * helpers it started go too, then the process itself (it may have left the group). */
    int r1 = kill(-p->pid, sig);
    int r2 = kill(p->pid, sig);
    if (r1 < 0 && r2 < 0 && errno != ESRCH) {
        agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "error sending signal: %s", strerror(errno));
        return;
    }
    al_info("process %d: sent %s", (int)p->pid, sig == SIGKILL ? "SIGKILL" : "SIGTERM");
    agent_rpc_reply(c, NULL);
}

static void proc__close_stdin(struct agent_call *c)
{
    struct agent_proc *p;
    if (!proc__select(c, &p))
        return;
    if (p->pty) {
        agent_rpc_error(c, AGENT_CONNECT_UNKNOWN,
                        "error closing stdin: cannot close stdin for PTY process — send Ctrl+D "
                        "(0x04) instead");
        return;
    }
    if (agent_fdio_is_open(&p->in))
        agent_fdio_close(&p->in, true, proc__fdio_closed);
    agent_rpc_reply(c, NULL);
}

static void proc__update(struct agent_call *c)
{
    struct agent_proc *p;
    if (!proc__select(c, &p))
        return;
    struct al_error e = {0};
    json_t *pty = NULL;
    if (agent_pj_object(c->msg, "pty", NULL, &pty, &e) == -EINVAL) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    if (pty) {
        uint32_t cols = 0, rows = 0;
        json_t *size = agent_pj_field(pty, "size", NULL);
        if (size && (agent_pj_uint32(size, "cols", NULL, &cols, &e) == -EINVAL ||
                     agent_pj_uint32(size, "rows", NULL, &rows, &e) == -EINVAL)) {
            agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
            return;
        }
        if (!p->pty || !agent_fdio_is_open(&p->out)) {
            agent_rpc_error(c, AGENT_CONNECT_INTERNAL,
                            "error resizing tty: tty not assigned to process");
            return;
        }
        int r = agent_pty_resize(p->out.fd, cols, rows);
        if (r < 0) {
            agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "error resizing tty: %s", strerror(-r));
            return;
        }
    }
    agent_rpc_reply(c, NULL);
}

void agent_process_call(struct agent_call *c)
{
    const char *m = c->method;
    if (strcmp(m, "Start") == 0)
        proc__start(c);
    else if (strcmp(m, "Connect") == 0)
        proc__connect(c);
    else if (strcmp(m, "List") == 0)
        proc__list(c);
    else if (strcmp(m, "SendInput") == 0)
        proc__send_input(c);
    else if (strcmp(m, "SendSignal") == 0)
        proc__send_signal(c);
    else if (strcmp(m, "CloseStdin") == 0)
        proc__close_stdin(c);
    else if (strcmp(m, "Update") == 0)
        proc__update(c);
    else
        agent_rpc_error(c, AGENT_CONNECT_UNIMPLEMENTED, "process.Process/%s is not implemented", m);
}

int agent_procs_init(struct agent *a)
{
    a->procs = calloc(1, sizeof *a->procs);
    return a->procs ? 0 : -ENOMEM;
}

void agent_procs_shutdown(struct agent *a, int sig)
{
    for (struct agent_proc *p = a->procs->list; p; p = p->next) {
        if (!p->reaped) {
            kill(-p->pid, sig);
            kill(p->pid, sig);
        }
    }
}

void agent_procs_free(struct agent *a)
{
    if (!a->procs)
        return;
    struct proc__retained *r = a->procs->retained;
    while (r) {
        struct proc__retained *n = r->next;
        free(r->tag);
        json_decref(r->end);
        free(r);
        r = n;
    }
    struct proc__child *ch = a->procs->children;
    while (ch) {
        struct proc__child *n = ch->next;
        free(ch);
        ch = n;
    }
    /* live processes are released by the loop's close walk in main.c */
    free(a->procs);
    a->procs = NULL;
}
