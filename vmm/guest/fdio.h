/* vmm/guest/fdio: non-blocking I/O on a child's pipe or pty fd, over one uv_poll_t.
 *
 * Owns: reading (a callback per read(2), pausable for backpressure), a bounded write queue
 * flushed when the fd is writable, "drain now" (read until EAGAIN, used to order a child's
 * output before a control message), and asynchronous close (the fd is closed at once, the
 * handle's memory is released by the owner's on_closed callback).
 * One agent_fdio per fd: libuv allows one poll handle per fd, so a pty master (read and
 * write on the same fd) uses one fdio for both directions.
 */
#ifndef AIRLOCK_GUEST_FDIO_H
#define AIRLOCK_GUEST_FDIO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

#include "common/buf.h"

struct agent_fdio;
/* n > 0: data; n == 0: EOF (EIO on a pty master counts as EOF); n < 0: -errno. */
typedef void (*agent_fdio_read_fn)(struct agent_fdio *io, const char *data, ssize_t n);
typedef void (*agent_fdio_closed_fn)(struct agent_fdio *io);

struct agent_fdio {
    uv_poll_t poll;
    int fd;
    bool active;  /* poll handle initialised and not yet closing */
    bool reading; /* wants UV_READABLE */
    bool paused;  /* reading suspended by the owner */
    bool eof;
    bool close_after_flush;
    struct al_buf wq; /* pending writes (bounded by wq.max) */
    agent_fdio_read_fn on_read;
    agent_fdio_closed_fn on_closed;
    void *owner;
    size_t read_chunk;
};

/* Takes ownership of fd (made non-blocking). on_read may be NULL for a write-only fd. */
int agent_fdio_open(uv_loop_t *loop, struct agent_fdio *io, int fd, size_t wq_max,
                    agent_fdio_read_fn on_read, void *owner);
void agent_fdio_pause(struct agent_fdio *io);
void agent_fdio_resume(struct agent_fdio *io);
/* Reads until EAGAIN or EOF, delivering through on_read; at most max_bytes. */
void agent_fdio_drain(struct agent_fdio *io, size_t max_bytes);
/* Queues data; -ENOSPC when the queue would exceed its cap, -EPIPE after close/EOF. */
int agent_fdio_write(struct agent_fdio *io, const void *data, size_t len);
size_t agent_fdio_queued(const struct agent_fdio *io);
/* Closes the fd now (pending writes are dropped) or, with flush, after the queue empties.
 * on_closed (may be NULL) runs once the handle is closed. Safe to call twice. */
void agent_fdio_close(struct agent_fdio *io, bool flush, agent_fdio_closed_fn on_closed);
bool agent_fdio_is_open(const struct agent_fdio *io);

#endif
