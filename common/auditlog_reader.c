/* common/auditlog_reader: reads an audit log's records in order across its files, for
 * `tail`, `tail -f` and queries. It checks nothing (that is the verifier's job): it hands out
 * complete lines, parsed when they are JSON. */
#include "auditlog.h"
#include "auditlog_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/inotify.h>

struct al_auditlog_reader {
    bool follow, explicit_files;
    char dir[AL_AUDITLOG_PATH_MAX];
    char prefix[40];
    struct auditlog__file *files;
    size_t n, idx;
    int fd;
    char *buf;
    size_t len, cap, pos;
    bool skipping; /* dropping an over-long line up to its '\n' */
    uint64_t lineno;
    json_t *cur;
    int ino;
};

static int reader__relist(struct al_auditlog_reader *r)
{
    if (r->explicit_files)
        return 0;
    struct auditlog__file *f = NULL;
    size_t n = 0;
    int rc = auditlog__list(r->dir, r->prefix, &f, &n, NULL);
    if (rc)
        return rc;
    /* Keep our position: find the current file in the new listing. */
    if (r->idx < r->n) {
        size_t j = 0;
        while (j < n && strcmp(f[j].name, r->files[r->idx].name) != 0)
            j++;
        if (j == n) {
            /* our file is gone (retention): continue with the first newer one */
            j = 0;
            while (j < n && f[j].first_seq <= r->files[r->idx].first_seq)
                j++;
            if (r->fd >= 0) {
                close(r->fd);
                r->fd = -1;
            }
            r->len = r->pos = 0;
        }
        r->idx = j;
    }
    free(r->files);
    r->files = f;
    r->n = n;
    return 0;
}

int al_auditlog_reader_open(const struct al_auditlog_reader_opts *o,
                            struct al_auditlog_reader **out, struct al_error *err)
{
    *out = NULL;
    struct al_auditlog_reader *r = calloc(1, sizeof *r);
    if (!r)
        return al_error_set(err, -ENOMEM, "out of memory");
    r->fd = r->ino = -1;
    r->follow = o->follow;
    r->cap = 64 * 1024;
    r->buf = malloc(r->cap);
    int rc = 0;
    if (!r->buf) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    if (o->files && o->n_files) {
        r->explicit_files = true;
        r->files = calloc(o->n_files, sizeof *r->files);
        if (!r->files) {
            rc = al_error_set(err, -ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < o->n_files; i++) {
            snprintf(r->files[i].path, sizeof r->files[i].path, "%s", o->files[i]);
            const char *b = strrchr(o->files[i], '/');
            snprintf(r->files[i].name, sizeof r->files[i].name, "%s", b ? b + 1 : o->files[i]);
        }
        r->n = o->n_files;
    } else {
        if (!o->dir || !auditlog__prefix_ok(o->prefix)) {
            rc = al_error_set(err, -EINVAL,
                              "audit log reader: a directory and a prefix are "
                              "required");
            goto fail;
        }
        snprintf(r->dir, sizeof r->dir, "%s", o->dir);
        snprintf(r->prefix, sizeof r->prefix, "%s", o->prefix);
        if ((rc = auditlog__list(r->dir, r->prefix, &r->files, &r->n, err)) != 0)
            goto fail;
    }
    if (r->follow) {
        r->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        const char *d = r->explicit_files ? NULL : r->dir;
        if (r->ino < 0) {
            rc = al_error_set(err, -errno, "inotify: %s", strerror(errno));
            goto fail;
        }
        if (d && inotify_add_watch(r->ino, d, IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0) {
            rc = al_error_set(err, -errno, "cannot watch %s: %s", d, strerror(errno));
            goto fail;
        }
        for (size_t i = 0; r->explicit_files && i < r->n; i++)
            inotify_add_watch(r->ino, r->files[i].path, IN_MODIFY);
    }
    *out = r;
    return 0;
fail:
    al_auditlog_reader_close(r);
    return rc;
}

void al_auditlog_reader_close(struct al_auditlog_reader *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    if (r->ino >= 0)
        close(r->ino);
    json_decref(r->cur);
    free(r->files);
    free(r->buf);
    free(r);
}

static int reader__open_current(struct al_auditlog_reader *r)
{
    r->fd = open(r->files[r->idx].path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0)
        return -errno;
    r->len = r->pos = 0;
    r->lineno = 0;
    r->skipping = false;
    return 0;
}

/* Reads more of the current file; 1 = got bytes, 0 = EOF, < 0 error. */
static int reader__fill(struct al_auditlog_reader *r)
{
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    if (r->len == r->cap) {
        if (r->cap > AL_AUDITLOG_MAX_RECORD) {
            /* an over-long line: drop what we have and skip to its end */
            r->skipping = true;
            r->len = 0;
        } else {
            char *nb = realloc(r->buf, r->cap * 2);
            if (!nb)
                return -ENOMEM;
            r->buf = nb;
            r->cap *= 2;
        }
    }
    for (;;) {
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        r->len += (size_t)n;
        return n > 0;
    }
}

int al_auditlog_reader_next(struct al_auditlog_reader *r, struct al_auditlog_record *rec)
{
    json_decref(r->cur);
    r->cur = NULL;
    for (;;) {
        if (r->fd < 0) {
            if (r->idx >= r->n) {
                if (!r->follow)
                    return 0;
                size_t before = r->n;
                reader__relist(r);
                if (r->idx >= r->n || r->n == before)
                    return 0;
            }
            int rc = reader__open_current(r);
            if (rc == -ENOENT) { /* removed by retention meanwhile */
                r->idx++;
                continue;
            }
            if (rc)
                return rc;
        }
        char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
        if (nl) {
            char *line = r->buf + r->pos;
            size_t len = (size_t)(nl - line);
            r->pos += len + 1;
            r->lineno++;
            if (r->skipping) {
                r->skipping = false;
                len = 0; /* report the over-long line as an unparsable, empty one */
            }
            memset(rec, 0, sizeof *rec);
            rec->line = line;
            rec->len = len;
            rec->file = r->files[r->idx].path;
            rec->lineno = r->lineno;
            r->cur = len ? json_loadb(line, len, AUDITLOG__JSON_FLAGS, NULL) : NULL;
            if (r->cur && !json_is_object(r->cur)) {
                json_decref(r->cur);
                r->cur = NULL;
            }
            rec->json = r->cur;
            json_t *s = json_object_get(r->cur, "seq");
            if (json_is_integer(s) && json_integer_value(s) > 0)
                rec->seq = (uint64_t)json_integer_value(s);
            rec->internal = json_is_object(json_object_get(r->cur, "auditlog"));
            return 1;
        }
        int rc = reader__fill(r);
        if (rc < 0)
            return rc;
        if (rc > 0)
            continue;
        /* End of this file: move on if a newer file exists (the writer never returns to an
         * older file; an incomplete last line there is the debris of a crash). */
        if (r->follow && r->idx + 1 >= r->n)
            reader__relist(r);
        if (r->idx + 1 < r->n) {
            close(r->fd);
            r->fd = -1;
            r->idx++;
            continue;
        }
        return 0;
    }
}

int al_auditlog_reader_seek_seq(struct al_auditlog_reader *r, uint64_t seq)
{
    if (r->fd >= 0) {
        close(r->fd);
        r->fd = -1;
    }
    r->idx = 0;
    for (size_t i = 0; !r->explicit_files && i < r->n; i++) {
        if (r->files[i].first_seq <= seq)
            r->idx = i;
    }
    struct al_auditlog_record rec;
    for (;;) {
        int rc = al_auditlog_reader_next(r, &rec);
        if (rc <= 0)
            return rc;
        if (rec.seq >= seq) {
            /* un-read it: the line is still in the buffer of the current file */
            r->pos = (size_t)(rec.line - r->buf);
            r->lineno = rec.lineno - 1;
            return 0;
        }
    }
}

static int reader__count_lines(const char *path, uint64_t *n)
{
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[65536];
    for (;;) {
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + k - p))); p++)
            (*n)++;
    }
    close(fd);
    return 0;
}

int al_auditlog_reader_seek_tail(struct al_auditlog_reader *r, uint64_t want)
{
    if (r->fd >= 0) {
        close(r->fd);
        r->fd = -1;
    }
    if (r->n == 0) {
        r->idx = 0;
        return 0;
    }
    uint64_t total = 0, skip = 0;
    size_t i = r->n;
    while (i > 0) {
        uint64_t c = 0;
        reader__count_lines(r->files[i - 1].path, &c);
        i--;
        if (total + c >= want) {
            skip = c - (want - total);
            total = want;
            break;
        }
        total += c;
    }
    r->idx = i;
    if (skip == 0)
        return 0;
    struct al_auditlog_record rec;
    for (uint64_t k = 0; k < skip; k++) {
        int rc = al_auditlog_reader_next(r, &rec);
        if (rc <= 0)
            return rc;
    }
    json_decref(r->cur);
    r->cur = NULL;
    return 0;
}

int al_auditlog_reader_wait(struct al_auditlog_reader *r, int timeout_ms)
{
    if (r->ino < 0)
        return 0;
    struct pollfd p = {.fd = r->ino, .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc <= 0)
        return 0;
    char buf[4096];
    while (read(r->ino, buf, sizeof buf) > 0) {
    }
    return 1;
}

int al_auditlog_reader_fd(const struct al_auditlog_reader *r)
{
    return r->ino;
}
