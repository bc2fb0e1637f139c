/* controlplane/logstream: see logstream.h. */
#include "logstream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "common/buf.h"
#include "common/http.h"
#include "common/log.h"
#include "cp.h"
#include "sse.h"

#define LS_POLL_MS     250
#define LS_READ_MAX    (256u << 10) /* bytes read per check (the rest at the next) */
#define LS_LINE_MAX    (64u << 10)  /* a longer line is sent in pieces of this size */
#define LS_BACKLOG     100          /* entries sent first by default */
#define LS_BACKLOG_MAX 1000

struct ls_stream {
    struct cp_sse_poll poll; /* first: the stream's life (sse.c) */
    struct cp *cp;
    char id[64];
    char path[4200];
    int fd;
    uint64_t off;
    ino_t ino;
    struct cp_logs_query q;
    char last_ts[40];
    struct al_buf partial; /* the end of the file after its last newline */
};

static void ls__release(struct cp_sse_poll *p)
{
    struct ls_stream *s = (struct ls_stream *)p;
    if (s->fd >= 0)
        close(s->fd);
    al_buf_free(&s->partial);
    free(s);
}

static void ls__send(struct ls_stream *s, const json_t *entry)
{
    if (!cp_logs_match(entry, &s->q))
        return;
    char *d = json_dumps(entry, JSON_COMPACT);
    if (!d)
        return;
    struct al_buf b;
    al_buf_init(&b, 0);
    al_buf_printf(&b, "event: log\ndata: %s\n\n", d); /* compact JSON has no newline */
    al_http_resp_write(s->poll.req, b.data, b.len);
    al_buf_free(&b);
    free(d);
}

static void ls__line(struct ls_stream *s, const char *line, size_t len)
{
    json_t *e = cp_logs_parse_line(line, len, s->last_ts, sizeof s->last_ts);
    if (e)
        ls__send(s, e);
    json_decref(e);
}

/* What was appended to the file since the last check, as entries; a line without its
 * newline yet waits for it (but never grows beyond LS_LINE_MAX). */
static void ls__drain(struct ls_stream *s)
{
    struct stat st;
    if (s->fd < 0 || fstat(s->fd, &st) < 0)
        return;
    if ((uint64_t)st.st_size < s->off) { /* truncated: it starts again */
        s->off = 0;
        al_buf_reset(&s->partial);
    }
    char buf[16384];
    size_t budget = LS_READ_MAX;
    while (s->poll.req && budget) {
        ssize_t r = pread(s->fd, buf, sizeof buf < budget ? sizeof buf : budget, (off_t)s->off);
        if (r <= 0)
            break;
        s->off += (uint64_t)r;
        budget -= (size_t)r;
        const char *p = buf, *end = buf + r;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
            if (s->partial.len + n > LS_LINE_MAX)
                n = LS_LINE_MAX - s->partial.len;
            al_buf_append(&s->partial, p, n);
            p += n;
            if (nl && p == nl)
                p++;
            else if (s->partial.len < LS_LINE_MAX)
                break; /* no newline yet */
            ls__line(s, s->partial.data, s->partial.len);
            al_buf_reset(&s->partial);
        }
    }
}

/* The file at the path is another one than the one followed (airlock-vmm rotated it): the
 * rest of the old one was read, the new one is followed from its start. */
static void ls__reopen(struct ls_stream *s)
{
    struct stat st;
    if (stat(s->path, &st) < 0 || (s->fd >= 0 && st.st_ino == s->ino))
        return;
    int fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return;
    }
    if (s->fd >= 0) {
        ls__drain(s);
        close(s->fd);
        if (s->partial.len)
            ls__line(s, s->partial.data, s->partial.len);
        al_buf_reset(&s->partial);
    }
    s->fd = fd;
    s->ino = st.st_ino;
    s->off = 0;
}

static void ls__tick(struct cp_sse_poll *p)
{
    struct ls_stream *s = (struct ls_stream *)p;
    struct cp_sandbox *sb = cp_sandbox_get(s->cp, s->id);
    if (!s->cp->stopping && (!sb || sb->rec.state == CP_SB_STOPPING)) {
        ls__drain(s);
        cp_sse_poll_end(p, "the sandbox was stopped: its logs end here");
        return;
    }
    ls__drain(s);
    if (p->req)
        ls__reopen(s);
    if (p->req)
        ls__drain(s);
}

void cp_logs_stream(struct cp *cp, struct al_http_req *req, struct cp_sandbox *sb,
                    const struct cp_logs_query *q, bool has_limit)
{
    struct ls_stream *s = calloc(1, sizeof *s);
    if (!s) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    s->cp = cp;
    s->fd = -1;
    s->q = *q;
    al_buf_init(&s->partial, 0);
    snprintf(s->id, sizeof s->id, "%s", sb->rec.id);
    cp->backend->log_path(sb, s->path, sizeof s->path);
    /* The backlog is read from the descriptor then followed, up to the size it had: no line
     * is sent twice or missed between the two. */
    s->fd = s->path[0] ? open(s->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    struct stat st;
    if (s->fd >= 0 && (fstat(s->fd, &st) < 0 || !S_ISREG(st.st_mode))) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->fd >= 0) {
        s->ino = st.st_ino;
        s->off = (uint64_t)st.st_size;
    }
    struct cp_logs_query bq = *q;
    bq.forward = false; /* the newest, sent oldest first */
    bq.limit = has_limit ? (q->limit > LS_BACKLOG_MAX ? LS_BACKLOG_MAX : q->limit) : LS_BACKLOG;
    json_t *backlog = bq.limit ? cp_logs_read_fd(s->path, s->fd, s->off, cp->cfg.log_max_bytes, &bq)
                               : json_array();
    if (cp_sse_start(req) < 0) {
        json_decref(backlog);
        if (s->fd >= 0)
            close(s->fd);
        al_buf_free(&s->partial);
        free(s);
        al_http_resp_abort(req);
        return;
    }
    s->poll.every_ms = LS_POLL_MS;
    s->poll.slow = "this client reads slower than the sandbox logs: reconnect to go on";
    s->poll.tick = ls__tick;
    s->poll.release = ls__release;
    cp_sse_poll_start(&s->poll, cp->loop, req, LS_POLL_MS);
    /* The stream's own lines carry on from the backlog's last timestamp. */
    size_t n = json_array_size(backlog);
    for (size_t i = n; i-- > 0;) {
        json_t *e = json_array_get(backlog, i);
        ls__send(s, e);
        if (i == 0)
            snprintf(s->last_ts, sizeof s->last_ts, "%s",
                     json_string_value(json_object_get(e, "timestamp")));
    }
    json_decref(backlog);
}
