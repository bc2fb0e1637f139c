/* controlplane/logs: see logs.h. */
#include "logs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json.h"
#include "common/util.h"

static const char *const logs__levels[] = {"debug", "info", "warn", "error"};

int cp_logs_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, logs__levels[i]) == 0)
            return i;
    if (strcmp(s, "warning") == 0)
        return 2;
    return -1;
}

json_t *cp_logs_parse_line(const char *line, size_t len, char *last_ts, size_t ts_len)
{
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (!len)
        return NULL;
    json_t *e = json_object();
    json_t *fields = json_object();
    json_t *j = line[0] == '{' ? json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const char *msg = NULL, *lvl = NULL, *ts = NULL;
    if (j && json_is_object(j)) {
        msg = json_string_value(json_object_get(j, "msg"));
        const char *mkey = msg ? "msg" : "message"; /* airlock's name, else envd's (zerolog) */
        if (!msg)
            msg = json_string_value(json_object_get(j, "message"));
        lvl = json_string_value(json_object_get(j, "level"));
        ts = json_string_value(json_object_get(j, "time"));
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
        {
            if (strcmp(k, mkey) == 0 || strcmp(k, "level") == 0 || strcmp(k, "time") == 0)
                continue;
            if (json_is_string(v)) {
                json_object_set(fields, k, v);
            } else {
                char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                if (t)
                    json_object_set_new(fields, k, json_string(t));
                free(t);
            }
        }
    }
    if (ts) {
        uint64_t ns;
        if (al_time_parse_rfc3339(ts, &ns) == 0)
            snprintf(last_ts, ts_len, "%s", ts);
        else
            ts = NULL;
    }
    if (!ts && !last_ts[0])
        al_time_rfc3339(last_ts, ts_len, 0);
    json_object_set_new(e, "timestamp", json_string(ts ? ts : last_ts));
    json_object_set_new(e, "level",
                        json_string(lvl && cp_logs_level_parse(lvl) >= 0
                                        ? logs__levels[cp_logs_level_parse(lvl)]
                                        : "info"));
    if (msg) {
        json_object_set_new(e, "message", json_string(msg));
    } else {
        /* Not a JSON line: the text itself (invalid UTF-8 is replaced). */
        char *esc = malloc(len * 6 + 1);
        char *raw = malloc(len + 1);
        if (esc && raw) {
            memcpy(raw, line, len);
            raw[len] = '\0';
            json_t *s = json_stringn(raw, len);
            if (!s) {
                /* json_stringn refuses invalid UTF-8: keep the printable ASCII. */
                for (size_t i = 0; i < len; i++)
                    if ((unsigned char)raw[i] >= 0x80 || (unsigned char)raw[i] < 0x20)
                        raw[i] = '?';
                s = json_stringn(raw, len);
            }
            json_object_set_new(e, "message", s ? s : json_string(""));
        } else {
            json_object_set_new(e, "message", json_string(""));
        }
        free(esc);
        free(raw);
    }
    json_object_set_new(e, "fields", fields);
    json_decref(j);
    return e;
}

/* Appends the tail (at most max bytes) of an open file, up to its byte end, to b; a partial
 * first line is dropped. */
static void logs__tail_fd(int fd, uint64_t end, uint64_t max, char **buf, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return;
    uint64_t size = (uint64_t)st.st_size < end ? (uint64_t)st.st_size : end;
    uint64_t off = size > max ? size - max : 0;
    size_t n = (size_t)(size - off);
    char *nb = realloc(*buf, *len + n + 1);
    if (!nb)
        return;
    *buf = nb;
    ssize_t r = pread(fd, nb + *len, n, (off_t)off);
    if (r <= 0)
        return;
    size_t start = 0;
    if (off > 0) {
        char *nl = memchr(nb + *len, '\n', (size_t)r);
        start = nl ? (size_t)(nl - (nb + *len)) + 1 : (size_t)r;
    }
    memmove(nb + *len, nb + *len + start, (size_t)r - start);
    *len += (size_t)r - start;
    nb[*len] = '\0';
}

static void logs__tail(const char *path, uint64_t max, char **buf, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    logs__tail_fd(fd, UINT64_MAX, max, buf, len);
    close(fd);
}

bool cp_logs_match(const json_t *e, const struct cp_logs_query *q)
{
    int lvl = cp_logs_level_parse(json_string_value(json_object_get(e, "level")));
    const char *msg = json_string_value(json_object_get(e, "message"));
    return lvl >= q->min_level && (!q->search[0] || (msg && strstr(msg, q->search)));
}

json_t *cp_logs_read(const char *path, uint64_t max_bytes, const struct cp_logs_query *q)
{
    if (!path || !path[0])
        return json_array();
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    json_t *out = cp_logs_read_fd(path, fd, UINT64_MAX, max_bytes, q);
    if (fd >= 0)
        close(fd);
    return out;
}

json_t *cp_logs_read_fd(const char *path, int fd, uint64_t end, uint64_t max_bytes,
                        const struct cp_logs_query *q)
{
    json_t *all = json_array();
    if (!path || !path[0])
        return all;
    char *buf = NULL;
    size_t len = 0;
    char old[4200];
    snprintf(old, sizeof old, "%s.1", path);
    logs__tail(old, max_bytes, &buf, &len);
    if (len && buf[len - 1] != '\n') {
        char *nb = realloc(buf, len + 2);
        if (nb) {
            buf = nb;
            buf[len++] = '\n';
            buf[len] = '\0';
        }
    }
    if (fd >= 0)
        logs__tail_fd(fd, end, max_bytes, &buf, &len);
    char last_ts[40] = "";
    size_t pos = 0;
    while (pos < len) {
        char *nl = memchr(buf + pos, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - (buf + pos)) : len - pos;
        json_t *e = cp_logs_parse_line(buf + pos, l, last_ts, sizeof last_ts);
        pos += l + 1;
        if (!e)
            continue;
        uint64_t ns = 0;
        al_time_parse_rfc3339(json_string_value(json_object_get(e, "timestamp")), &ns);
        if (!cp_logs_match(e, q) || ns / 1000000 < q->since_ms) {
            json_decref(e);
            continue;
        }
        json_array_append_new(all, e);
    }
    free(buf);
    size_t n = json_array_size(all);
    json_t *out = json_array();
    size_t take = q->limit && q->limit < n ? q->limit : n;
    if (q->forward) {
        for (size_t i = 0; i < take; i++)
            json_array_append(out, json_array_get(all, i));
    } else {
        for (size_t i = 0; i < take; i++)
            json_array_append(out, json_array_get(all, n - 1 - i));
    }
    json_decref(all);
    return out;
}

char *cp_logs_entry_line(const json_t *entry)
{
    json_t *o = json_object();
    json_object_set(o, "level", json_object_get(entry, "level"));
    json_object_set(o, "message", json_object_get(entry, "message"));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)json_object_get(entry, "fields"), k, v)
    {
        if (!json_object_get(o, k))
            json_object_set(o, k, v);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}
