/* vmm/logcap: see logcap.h. */
#include "logcap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

static int logcap__open(struct vmm_logcap *l, bool truncate)
{
    int fd = open(l->path,
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | (truncate ? O_TRUNC : 0),
                  0640);
    if (fd < 0)
        return -errno;
    l->out_fd = fd;
    off_t end = lseek(fd, 0, SEEK_END);
    l->written = end > 0 ? (uint64_t)end : 0;
    return 0;
}

static void logcap__rotate(struct vmm_logcap *l)
{
    char old[4200];
    snprintf(old, sizeof old, "%s.1", l->path);
    if (l->out_fd >= 0)
        close(l->out_fd);
    l->out_fd = -1;
    if (rename(l->path, old) < 0)
        al_warn("cannot rotate %s: %s", l->path, strerror(errno));
    if (logcap__open(l, true) < 0)
        al_warn("cannot reopen %s: %s", l->path, strerror(errno));
}

static void logcap__write(struct vmm_logcap *l, const char *data, size_t len)
{
    while (len && l->out_fd >= 0) {
        uint64_t room = l->max_bytes > l->written ? l->max_bytes - l->written : 0;
        if (room == 0) {
            logcap__rotate(l);
            continue;
        }
        size_t n = len < room ? len : (size_t)room;
        if (al_write_all(l->out_fd, data, n) < 0)
            return; /* the disk is full or the file is gone: drop, keep the agent running */
        l->written += n;
        data += n;
        len -= n;
    }
}

void vmm_logcap_feed(struct vmm_logcap *l, const char *data, size_t len, uint64_t now_ns)
{
    l->total_in += len;
    if (l->last_ns) {
        double dt = (double)(now_ns - l->last_ns) / 1e9;
        l->tokens += dt * (double)l->rate_bps;
    }
    l->last_ns = now_ns;
    if (l->tokens > (double)l->max_bytes)
        l->tokens = (double)l->max_bytes;
    size_t ok = len;
    if ((double)len > l->tokens)
        ok = l->tokens > 0 ? (size_t)l->tokens : 0;
    if (ok && l->dropped) {
        char note[128];
        int n = snprintf(note, sizeof note,
                         "\n[airlock-vmm: %llu bytes of agent output dropped: more than %llu "
                         "bytes/s]\n",
                         (unsigned long long)l->dropped, (unsigned long long)l->rate_bps);
        logcap__write(l, note, (size_t)n);
        l->dropped = 0;
    }
    logcap__write(l, data, ok);
    l->tokens -= (double)ok;
    l->dropped += len - ok;
    l->total_dropped += len - ok;
}

static void logcap__on_poll(uv_poll_t *h, int status, int events)
{
    struct vmm_logcap *l = h->data;
    char buf[65536];
    /* Bounded work per wakeup: at most 4 reads, then back to the loop. */
    for (int i = 0; i < 4; i++) {
        ssize_t n = read(l->in_fd, buf, sizeof buf);
        if (n > 0) {
            vmm_logcap_feed(l, buf, (size_t)n, al_now_ns());
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        /* EOF (every writer is gone) or an error. */
        uv_poll_stop(&l->poll);
        l->active = false;
        if (l->on_eof)
            l->on_eof(l);
        return;
    }
    (void)status;
    (void)events;
}

int vmm_logcap_start(struct vmm_logcap *l, uv_loop_t *loop, const struct vmm_logcap_opts *o,
                     struct al_error *err)
{
    int in_fd = o->in_fd;
    const char *path = o->path;
    uint64_t max_bytes = o->max_bytes;
    void (*on_eof)(struct vmm_logcap *) = l->on_eof;
    memset(l, 0, sizeof *l);
    l->on_eof = on_eof;
    l->in_fd = in_fd;
    l->out_fd = -1;
    l->max_bytes = max_bytes;
    l->rate_bps = o->rate_bps;
    l->tokens = (double)max_bytes;
    if ((size_t)snprintf(l->path, sizeof l->path, "%s", path) >= sizeof l->path)
        return al_error_set(err, -ENAMETOOLONG, "log path too long");
    int rc = logcap__open(l, false);
    if (rc)
        return al_error_set(err, rc, "cannot open %s: %s", path, strerror(-rc));
    if (in_fd < 0)
        return 0;
    al_set_nonblock(in_fd, true);
    rc = uv_poll_init(loop, &l->poll, in_fd);
    if (rc)
        return al_error_set(err, rc, "cannot watch the agent's log pipe: %s", uv_strerror(rc));
    l->poll.data = l;
    l->poll_inited = true;
    rc = uv_poll_start(&l->poll, UV_READABLE | UV_DISCONNECT, logcap__on_poll);
    if (rc)
        return al_error_set(err, rc, "cannot watch the agent's log pipe: %s", uv_strerror(rc));
    l->active = true;
    return 0;
}

void vmm_logcap_stop(struct vmm_logcap *l)
{
    if (l->active) {
        char buf[65536];
        for (int i = 0; i < 16; i++) {
            ssize_t n = read(l->in_fd, buf, sizeof buf);
            if (n <= 0)
                break;
            vmm_logcap_feed(l, buf, (size_t)n, al_now_ns());
        }
        l->active = false;
    }
    if (l->poll_inited) {
        uv_poll_stop(&l->poll);
        uv_close((uv_handle_t *)&l->poll, NULL);
        l->poll_inited = false;
    }
    if (l->dropped) {
        char note[128];
        int n = snprintf(note, sizeof note,
                         "\n[airlock-vmm: %llu bytes of agent output dropped at the end]\n",
                         (unsigned long long)l->dropped);
        logcap__write(l, note, (size_t)n);
        l->dropped = 0;
    }
    if (l->out_fd >= 0) {
        close(l->out_fd);
        l->out_fd = -1;
    }
}
