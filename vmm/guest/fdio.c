/* vmm/guest/fdio: see fdio.h. */
#include "fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

static void fdio__on_poll(uv_poll_t *h, int status, int events);

static void fdio__update(struct agent_fdio *io)
{
    if (!io->active)
        return;
    int ev = 0;
    if (io->reading && !io->paused && !io->eof)
        ev |= UV_READABLE;
    if (io->wq.len > 0)
        ev |= UV_WRITABLE;
    if (ev)
        uv_poll_start(&io->poll, ev, fdio__on_poll);
    else
        uv_poll_stop(&io->poll);
}

int agent_fdio_open(uv_loop_t *loop, struct agent_fdio *io, int fd, size_t wq_max,
                    agent_fdio_read_fn on_read, void *owner)
{
    memset(io, 0, sizeof *io);
    io->fd = fd;
    io->owner = owner;
    io->on_read = on_read;
    io->read_chunk = 65536;
    al_buf_init(&io->wq, wq_max);
    al_set_nonblock(fd, true);
    al_set_cloexec(fd, true);
    int r = uv_poll_init(loop, &io->poll, fd);
    if (r < 0) {
        io->fd = -1;
        close(fd);
        return r;
    }
    io->poll.data = io;
    io->active = true;
    io->reading = on_read != NULL;
    fdio__update(io);
    return 0;
}

static void fdio__read_once(struct agent_fdio *io)
{
    char buf[65536];
    size_t want = io->read_chunk < sizeof buf ? io->read_chunk : sizeof buf;
    ssize_t n = read(io->fd, buf, want);
    if (n > 0) {
        io->on_read(io, buf, n);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    io->eof = true;
    fdio__update(io);
    if (n == 0 || errno == EIO)
        io->on_read(io, NULL, 0);
    else
        io->on_read(io, NULL, -errno);
}

static void fdio__flush(struct agent_fdio *io)
{
    while (io->wq.len > 0) {
        ssize_t n = write(io->fd, io->wq.data, io->wq.len);
        if (n > 0) {
            al_buf_consume(&io->wq, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        al_buf_reset(&io->wq); /* EPIPE & co: the reader is gone, drop what is queued */
        break;
    }
    if (io->wq.len == 0 && io->close_after_flush) {
        io->close_after_flush = false;
        agent_fdio_close(io, false, io->on_closed);
        return;
    }
    fdio__update(io);
}

static void fdio__on_poll(uv_poll_t *h, int status, int events)
{
    struct agent_fdio *io = h->data;
    if (status < 0) {
        /* EBADF & co: report as an error on the read side and stop. */
        io->eof = true;
        fdio__update(io);
        if (io->on_read)
            io->on_read(io, NULL, status);
        return;
    }
    if ((events & UV_WRITABLE) && io->wq.len > 0) {
        fdio__flush(io);
        if (!io->active)
            return;
    }
    if ((events & (UV_READABLE | UV_DISCONNECT)) && io->reading && !io->paused && !io->eof)
        fdio__read_once(io);
}

void agent_fdio_pause(struct agent_fdio *io)
{
    io->paused = true;
    fdio__update(io);
}

void agent_fdio_resume(struct agent_fdio *io)
{
    io->paused = false;
    fdio__update(io);
}

void agent_fdio_drain(struct agent_fdio *io, size_t max_bytes)
{
    size_t got = 0;
    while (io->active && io->reading && !io->eof && got < max_bytes) {
        char buf[65536];
        ssize_t n = read(io->fd, buf, sizeof buf);
        if (n > 0) {
            got += (size_t)n;
            io->on_read(io, buf, n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        io->eof = true;
        fdio__update(io);
        io->on_read(io, NULL, (n == 0 || errno == EIO) ? 0 : -errno);
        return;
    }
}

int agent_fdio_write(struct agent_fdio *io, const void *data, size_t len)
{
    if (!io->active || io->close_after_flush)
        return -EPIPE;
    if (len == 0)
        return 0;
    if (io->wq.len == 0) {
        /* Fast path: try to write directly. */
        ssize_t n = write(io->fd, data, len);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -errno;
        if (n > 0) {
            data = (const char *)data + n;
            len -= (size_t)n;
        }
        if (len == 0)
            return 0;
    }
    int r = al_buf_append(&io->wq, data, len);
    if (r < 0)
        return -ENOSPC;
    fdio__update(io);
    return 0;
}

size_t agent_fdio_queued(const struct agent_fdio *io)
{
    return io->wq.len;
}

bool agent_fdio_is_open(const struct agent_fdio *io)
{
    return io->active;
}

static void fdio__closed(uv_handle_t *h)
{
    struct agent_fdio *io = h->data;
    /* libuv: stop, close the handle, and only then close the fd (no stale epoll entry). */
    if (io->fd >= 0)
        close(io->fd);
    io->fd = -1;
    al_buf_free(&io->wq);
    if (io->on_closed)
        io->on_closed(io);
}

void agent_fdio_close(struct agent_fdio *io, bool flush, agent_fdio_closed_fn on_closed)
{
    if (!io->active)
        return;
    io->on_closed = on_closed;
    if (flush && io->wq.len > 0) {
        io->close_after_flush = true;
        io->reading = false;
        fdio__update(io);
        return;
    }
    io->active = false;
    uv_poll_stop(&io->poll);
    uv_close((uv_handle_t *)&io->poll, fdio__closed);
}
