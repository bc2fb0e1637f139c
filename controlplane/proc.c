/* controlplane/proc: see proc.h. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "record.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

static int proc__pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int cp_proc_open(pid_t pid, uint64_t start_time, int *pidfd)
{
    if (pid <= 0)
        return -ESRCH;
    int fd = proc__pidfd_open(pid);
    if (fd < 0)
        return -errno;
    /* The pidfd pins the process it names; if its start time is the recorded one, it is
     * the process we started (pids are reused, start times are not). */
    if (start_time && cp_proc_start_time(pid) != start_time) {
        close(fd);
        return -ESRCH;
    }
    *pidfd = fd;
    return 0;
}

int cp_proc_reap(int pidfd, int *wstatus)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG) < 0)
        return -errno;
    if (si.si_pid == 0)
        return -EAGAIN;
    if (si.si_code == CLD_EXITED)
        *wstatus = W_EXITCODE(si.si_status, 0);
    else
        *wstatus = si.si_status & 0x7f; /* killed or dumped: the signal number */
    return 0;
}

int cp_proc_signal(int pidfd, int sig)
{
    if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0) < 0)
        return -errno;
    return 0;
}

static void proc__on_poll(uv_poll_t *h, int status, int events)
{
    struct cp_proc_watch *w = h->data;
    (void)status;
    (void)events;
    if (!w->active)
        return;
    int ws = -1;
    int rc = cp_proc_reap(w->pidfd, &ws);
    if (rc == -EAGAIN)
        return; /* not gone yet (spurious wake-up) */
    if (rc < 0)
        ws = -1;
    w->active = false;
    uv_poll_stop(h);
    w->cb(w, ws);
}

int cp_proc_watch_start(uv_loop_t *loop, struct cp_proc_watch *w, pid_t pid, int pidfd,
                        void (*cb)(struct cp_proc_watch *w, int wstatus))
{
    w->pidfd = pidfd;
    w->pid = pid;
    w->cb = cb;
    int rc = uv_poll_init(loop, &w->poll, pidfd);
    if (rc)
        return rc;
    w->poll.data = w;
    w->active = true;
    rc = uv_poll_start(&w->poll, UV_READABLE, proc__on_poll);
    if (rc) {
        w->active = false;
        return rc;
    }
    return 0;
}

static void proc__closed(uv_handle_t *h)
{
    struct cp_proc_watch *w = h->data;
    if (w->pidfd >= 0) {
        close(w->pidfd);
        w->pidfd = -1;
    }
    if (w->close_cb)
        w->close_cb(w);
}

void cp_proc_watch_stop(struct cp_proc_watch *w, void (*close_cb)(struct cp_proc_watch *w))
{
    w->active = false;
    w->close_cb = close_cb;
    uv_close((uv_handle_t *)&w->poll, proc__closed);
}

static void proc__reaper_closed(struct cp_proc_watch *w)
{
    free(w);
}

static void proc__reaped(struct cp_proc_watch *w, int wstatus)
{
    (void)wstatus;
    cp_proc_watch_stop(w, proc__reaper_closed);
}

void cp_proc_reap_later(uv_loop_t *loop, pid_t pid, int pidfd)
{
    int fd = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return;
    int st;
    int r = cp_proc_reap(fd, &st);
    if (r == 0 || r == -ECHILD) {
        /* Gone already (reaped now), or not our child: nothing to wait for. */
        close(fd);
        return;
    }
    struct cp_proc_watch *w = calloc(1, sizeof *w);
    if (!w || uv_poll_init(loop, &w->poll, fd) != 0) {
        free(w);
        close(fd);
        return; /* (a zombie until airlockd exits: out of memory or descriptors) */
    }
    w->pidfd = fd;
    w->pid = pid;
    w->cb = proc__reaped;
    w->poll.data = w;
    w->active = true;
    if (uv_poll_start(&w->poll, UV_READABLE, proc__on_poll) != 0)
        cp_proc_watch_stop(w, proc__reaper_closed);
}

void cp_proc_describe(int wstatus, char *out, size_t len)
{
    if (wstatus < 0)
        snprintf(out, len, "exited (status unknown: not our child)");
    else if (WIFEXITED(wstatus))
        snprintf(out, len, "exited with status %d", WEXITSTATUS(wstatus));
    else
        snprintf(out, len, "killed by signal %d (%s)", wstatus & 0x7f, strsignal(wstatus & 0x7f));
}

int cp_proc_collect(const struct cp_proc_child *c, char *buf, size_t cap, size_t *len, int *wstatus)
{
    int outfd = c->outfd, pidfd = c->pidfd;
    pid_t pid = c->pid;
    uint64_t t0 = c->t0, kill_after_ms = c->kill_after_ms;
    bool eof = false, exited = false;
    *len = 0;
    while (!eof || !exited) {
        uint64_t el = (al_now_ns() - t0) / 1000000;
        if (el >= kill_after_ms)
            break;
        struct pollfd pf[2] = {{.fd = eof ? -1 : outfd, .events = POLLIN},
                               {.fd = exited ? -1 : pidfd, .events = POLLIN}};
        int n = poll(pf, 2, (int)(kill_after_ms - el));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (!eof && (pf[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            char tmp[1024];
            ssize_t r = read(outfd, tmp, sizeof tmp);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                eof = true;
            } else {
                size_t k = (size_t)r;
                if (k > cap - 1 - *len)
                    k = cap - 1 - *len; /* the rest is dropped (an answer is one short line) */
                memcpy(buf + *len, tmp, k);
                *len += k;
            }
        }
        if (!exited && (pf[1].revents & POLLIN)) {
            exited = true;
            /* Its output may still be in the pipe: keep reading until EOF. */
        }
    }
    buf[*len] = '\0';
    if (!exited) {
        cp_proc_signal(pidfd, SIGKILL);
        while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR)
            ;
        return -ETIMEDOUT;
    }
    while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR)
        ;
    return 0;
}
