/* vmm/guest/startcmd: the template's start command and its readiness check (E2B's startCmd
 * and readyCmd).
 *
 * Once init has named them, the start command runs as `/bin/bash -l -c CMD` as the
 * default user in the default workdir with the sandbox's environment, as a process like
 * any Start made (process.List shows it with the tag "startCmd"; Connect attaches to it).
 * The ready command then runs the same way, again and again (AGENT_READY_RETRY_MS between
 * attempts), until one exits 0: the sandbox is ready. Without a ready command the sandbox is
 * ready once the start command runs. A start command that fails (exits non-zero or is
 * killed) before that makes the start failed; one that exits 0 (it started a daemon) does
 * not. GET /ready says where this stands; airlockd polls it before it answers a creation
 * and bounds the wait (the agent does not: a ready command may take long per attempt).
 * Each of these happens once per agent: a later init does not start anything again.
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

#include "common/log.h"
#include "common/util.h"
#include "fdio.h"
#include "fspath.h"
#include "spawn.h"

#define AGENT_READY_RETRY_MS 250
#define START_OUTPUT_KEEP    512

enum start__state { START_NONE, START_STARTING, START_READY, START_FAILED };

struct agent_start {
    struct agent *a;
    enum start__state state;
    pid_t start_pid;
    pid_t probe_pid; /* the ready command's attempt running now, or 0 */
    unsigned attempts;
    bool have_last;
    int last_wstatus;
    char out[START_OUTPUT_KEEP]; /* the end of the last attempt's output (stdout + stderr) */
    size_t out_len;
    char cur[START_OUTPUT_KEEP]; /* the running attempt's */
    size_t cur_len;
    char error[768];
    struct agent_fdio io;
    bool io_open;
    uv_timer_t retry;
    bool retry_init;
    uint64_t t0_ns;
};

static void start__probe(struct agent_start *st);

static const char *start__name(enum start__state s)
{
    switch (s) {
    case START_STARTING:
        return "starting";
    case START_READY:
        return "ready";
    case START_FAILED:
        return "failed";
    default:
        return "none";
    }
}

static void start__ready(struct agent_start *st)
{
    st->state = START_READY;
    al_info("startCmd/readyCmd: ready after %.1f ms (%u readyCmd attempt(s))",
            (double)(al_now_ns() - st->t0_ns) / 1e6, st->attempts);
}

static void start__fail(struct agent_start *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void start__fail(struct agent_start *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->error, sizeof st->error, fmt, ap);
    va_end(ap);
    st->state = START_FAILED;
    al_warn("startCmd/readyCmd: %s", st->error);
}

static void start__cmd_ended(void *arg, pid_t pid, int wstatus)
{
    struct agent_start *st = arg;
    char status[64];
    int code;
    bool exited;
    agent_exit_status(wstatus, status, sizeof status, &code, &exited);
    al_info("startCmd (process %d) ended: %s", (int)pid, status);
    if (st->state == START_STARTING && !(exited && code == 0))
        start__fail(st, "startCmd '%.300s' ended (%s) before readyCmd succeeded", st->a->start_cmd,
                    status);
}

static void start__on_output(struct agent_fdio *io, const char *data, ssize_t n)
{
    struct agent_start *st = io->owner;
    if (n <= 0)
        return;
    /* Keep the end: that is where a failing check says why. */
    size_t k = (size_t)n;
    char clean[4096];
    if (k > sizeof clean) {
        data += k - sizeof clean;
        k = sizeof clean;
    }
    for (size_t i = 0; i < k; i++) {
        unsigned char ch = (unsigned char)data[i];
        clean[i] = (ch >= 0x20 && ch < 0x7f) || ch == '\n' || ch == '\t' ? (char)ch : '?';
    }
    data = clean;
    if (k >= sizeof st->cur) {
        memcpy(st->cur, data + k - sizeof st->cur, sizeof st->cur);
        st->cur_len = sizeof st->cur;
        return;
    }
    if (st->cur_len + k > sizeof st->cur) {
        size_t drop = st->cur_len + k - sizeof st->cur;
        memmove(st->cur, st->cur + drop, st->cur_len - drop);
        st->cur_len -= drop;
    }
    memcpy(st->cur + st->cur_len, data, k);
    st->cur_len += k;
}

static void start__retry_tick(uv_timer_t *t)
{
    start__probe(t->data);
}

/* The attempt's output is closed: its result counts, the next attempt may use io. */
static void start__io_closed(struct agent_fdio *io)
{
    struct agent_start *st = io->owner;
    st->io_open = false;
    memcpy(st->out, st->cur, st->cur_len);
    st->out_len = st->cur_len;
    st->have_last = true;
    int code;
    bool exited;
    char status[64];
    agent_exit_status(st->last_wstatus, status, sizeof status, &code, &exited);
    if (st->state != START_STARTING || st->a->stopping)
        return;
    if (exited && code == 0) {
        start__ready(st);
        return;
    }
    if (st->attempts == 1 || st->attempts % 20 == 0)
        al_info("readyCmd attempt %u: %s; trying again", st->attempts, status);
    uv_timer_start(&st->retry, start__retry_tick, AGENT_READY_RETRY_MS, 0);
}

static void start__probe_ended(void *arg, pid_t pid, int wstatus)
{
    struct agent_start *st = arg;
    (void)pid;
    st->probe_pid = 0;
    st->last_wstatus = wstatus;
    if (st->io_open) {
        agent_fdio_drain(&st->io, START_OUTPUT_KEEP * 8);
        agent_fdio_close(&st->io, false, start__io_closed);
    }
}

static void start__probe(struct agent_start *st)
{
    struct agent *a = st->a;
    if (st->state != START_STARTING || a->stopping)
        return;
    struct al_error e = {0};
    struct agent_user u;
    char dir[PATH_MAX];
    if (agent_resolve_user(a, NULL, &u, &e) < 0 ||
        agent_path_resolve(NULL, u.home, a->default_workdir, dir, sizeof dir, &e) < 0) {
        start__fail(st, "readyCmd cannot run: %s", al_error_str(&e));
        return;
    }
    char *argv[] = {"/bin/bash", "-l", "-c", a->ready_cmd, NULL};
    char **envp = agent_child_env(a, &u, NULL, NULL);
    int pfd[2];
    if (!envp || pipe2(pfd, O_CLOEXEC) < 0) {
        agent_free_strv(envp);
        start__fail(st, "readyCmd cannot run: %s", strerror(envp ? errno : ENOMEM));
        return;
    }
    struct al_spawn so = {.fds = {-1, pfd[1], pfd[1]}, .nfds = 3};
    agent_spawn_user(a, &so, argv[0], argv, envp, &u);
    so.cwd = dir;
    pid_t pid;
    int r = al_spawn(&so, &pid, NULL, &e);
    agent_free_strv(envp);
    close(pfd[1]);
    if (r < 0) {
        close(pfd[0]);
        start__fail(st, "readyCmd cannot run: %s", al_error_str(&e));
        return;
    }
    st->attempts++;
    st->probe_pid = pid;
    st->cur_len = 0;
    agent_fdio_open(a->loop, &st->io, pfd[0], 0, start__on_output, st);
    st->io_open = true;
    agent_child_watch(a, pid, start__probe_ended, st);
}

void agent_start_begin(struct agent *a)
{
    if (a->start || (!a->start_cmd && !a->ready_cmd))
        return;
    struct agent_start *st = calloc(1, sizeof *st);
    if (!st) {
        al_error("startCmd/readyCmd: out of memory");
        return;
    }
    st->a = a;
    st->state = START_STARTING;
    st->t0_ns = al_now_ns();
    uv_timer_init(a->loop, &st->retry);
    st->retry.data = st;
    st->retry_init = true;
    a->start = st;
    if (a->start_cmd) {
        struct al_error e = {0};
        if (agent_proc_start_shell(a,
                                   &(struct agent_shell_opts){.cmdline = a->start_cmd,
                                                              .tag = "startCmd",
                                                              .on_end = start__cmd_ended,
                                                              .arg = st},
                                   &st->start_pid, &e) < 0) {
            start__fail(st, "startCmd '%.300s' could not be started: %s", a->start_cmd,
                        al_error_str(&e));
            return;
        }
        al_info("startCmd: process %d started", (int)st->start_pid);
    }
    if (!a->ready_cmd) {
        start__ready(st);
        return;
    }
    start__probe(st);
}

json_t *agent_start_status(const struct agent *a)
{
    const struct agent_start *st = a->start;
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "state", json_string(start__name(st ? st->state : START_NONE)));
    if (a->start_cmd)
        json_object_set_new(o, "startCmd", json_string(a->start_cmd));
    if (a->ready_cmd)
        json_object_set_new(o, "readyCmd", json_string(a->ready_cmd));
    if (!st)
        return o;
    if (st->start_pid)
        json_object_set_new(o, "startPid", json_integer(st->start_pid));
    json_object_set_new(o, "attempts", json_integer(st->attempts));
    if (st->have_last) {
        char status[64];
        int code;
        bool exited;
        agent_exit_status(st->last_wstatus, status, sizeof status, &code, &exited);
        json_object_set_new(o, "lastStatus", json_string(status));
        json_object_set_new(o, "lastOutput", json_stringn(st->out, st->out_len));
    }
    if (st->state == START_FAILED)
        json_object_set_new(o, "error", json_string(st->error));
    return o;
}

void agent_start_shutdown(struct agent *a, int sig)
{
    struct agent_start *st = a->start;
    if (!st)
        return;
    if (st->retry_init)
        uv_timer_stop(&st->retry);
    if (st->probe_pid > 0 && kill(-st->probe_pid, sig) < 0)
        kill(st->probe_pid, sig);
}

static void start__timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void agent_start_free(struct agent *a)
{
    struct agent_start *st = a->start;
    a->start = NULL;
    if (!st)
        return;
    if (st->probe_pid > 0)
        agent_child_unwatch(a, st->probe_pid);
    if (st->io_open)
        agent_fdio_close(&st->io, false, NULL);
    /* The timer's close frees the state (after the fdio's close, queued first). */
    uv_close((uv_handle_t *)&st->retry, start__timer_closed);
}
