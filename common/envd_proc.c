/* common/envd_proc: see envd_proc.h. */
#include "envd_proc.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One message in a Connect envelope: flags 0, the length big-endian, the JSON. */
static int envd__envelope(json_t *req, unsigned char **out, size_t *len)
{
    char *msg = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!msg)
        return -ENOMEM;
    size_t ml = strlen(msg);
    unsigned char *e = malloc(ml + 5);
    if (!e) {
        free(msg);
        return -ENOMEM;
    }
    e[0] = 0;
    e[1] = (unsigned char)(ml >> 24);
    e[2] = (unsigned char)(ml >> 16);
    e[3] = (unsigned char)(ml >> 8);
    e[4] = (unsigned char)ml;
    memcpy(e + 5, msg, ml);
    free(msg);
    *out = e;
    *len = ml + 5;
    return 0;
}

static json_t *envd__process(const char *cmd, json_t *args, json_t *envs, const char *cwd)
{
    json_t *proc = json_pack("{s:s,s:o,s:o}", "cmd", cmd, "args", args ? args : json_array(),
                             "envs", envs ? envs : json_object());
    if (proc && cwd && cwd[0])
        json_object_set_new(proc, "cwd", json_string(cwd));
    return proc;
}

int al_envd_start_body(const char *cmd, json_t *args, json_t *envs, const char *cwd,
                       unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    json_t *proc = envd__process(cmd, args, envs, cwd);
    return envd__envelope(proc ? json_pack("{s:o,s:b}", "process", proc, "stdin", 0) : NULL, out,
                          len);
}

int al_envd_start_pty_body(const char *cmd, json_t *args, json_t *envs, const char *cwd,
                           unsigned cols, unsigned rows, unsigned char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    json_t *proc = envd__process(cmd, args, envs, cwd);
    return envd__envelope(proc ? json_pack("{s:o,s:{s:{s:I,s:I}}}", "process", proc, "pty", "size",
                                           "cols", (json_int_t)cols, "rows", (json_int_t)rows)
                               : NULL,
                          out, len);
}

void al_envd_user_auth(const char *user, char *out, size_t len)
{
    char up[300], b64[420];
    snprintf(up, sizeof up, "%s:", user);
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)up, strlen(up),
                      sodium_base64_VARIANT_ORIGINAL);
    snprintf(out, len, "Basic %s", b64);
}

void al_envd_stream_init(struct al_envd_stream *s, size_t max,
                         void (*on_output)(void *, enum al_envd_stream_fd, const unsigned char *,
                                           size_t),
                         void *arg)
{
    memset(s, 0, sizeof *s);
    al_buf_init(&s->buf, max);
    s->exit_code = 1;
    s->on_output = on_output;
    s->arg = arg;
}

void al_envd_stream_free(struct al_envd_stream *s)
{
    al_buf_free(&s->buf);
}

static void envd__output(struct al_envd_stream *s, enum al_envd_stream_fd fd, const char *b64)
{
    if (!b64 || !s->on_output)
        return;
    size_t l = strlen(b64), n = 0;
    unsigned char *out = malloc(l + 1);
    if (out &&
        sodium_base642bin(out, l, b64, l, NULL, &n, NULL, sodium_base64_VARIANT_ORIGINAL) == 0)
        s->on_output(s->arg, fd, out, n);
    free(out);
}

static void envd__message(struct al_envd_stream *s, unsigned flags, const char *data, size_t len)
{
    json_t *m = json_loadb(data, len, 0, NULL);
    if (!m)
        return;
    if (flags & 2) { /* the end of the stream: {} or {"error":{code,message}} */
        json_t *err = json_object_get(m, "error");
        const char *msg = json_string_value(json_object_get(err, "message"));
        const char *code = json_string_value(json_object_get(err, "code"));
        if (msg)
            snprintf(s->error, sizeof s->error, "%s", msg);
        else if (code)
            snprintf(s->error, sizeof s->error, "%s", code);
        s->deadline = code && strcmp(code, "deadline_exceeded") == 0;
        json_decref(m);
        return;
    }
    json_t *ev = json_object_get(m, "event");
    json_t *d = json_object_get(ev, "data");
    json_t *start = json_object_get(ev, "start");
    if (start) {
        s->started = true;
        s->pid = (int)json_integer_value(json_object_get(start, "pid"));
    }
    if (d) {
        envd__output(s, AL_ENVD_STDOUT, json_string_value(json_object_get(d, "stdout")));
        envd__output(s, AL_ENVD_PTY, json_string_value(json_object_get(d, "pty")));
        envd__output(s, AL_ENVD_STDERR, json_string_value(json_object_get(d, "stderr")));
    }
    json_t *end = json_object_get(ev, "end");
    if (end) {
        s->ended = true;
        s->exit_code = (int)json_integer_value(json_object_get(end, "exitCode"));
        const char *st = json_string_value(json_object_get(end, "status"));
        snprintf(s->status_text, sizeof s->status_text, "%s", st ? st : "");
        if (s->exit_code == 0 && st && strncmp(st, "exit status ", 12) != 0)
            s->exit_code = 128 + 9; /* signalled */
    }
    json_decref(m);
}

int al_envd_stream_feed(struct al_envd_stream *s, const char *d, size_t len)
{
    if (al_buf_append(&s->buf, d, len) < 0)
        return -E2BIG;
    if (s->status != 200)
        return 0;
    while (s->buf.len >= 5) {
        const unsigned char *b = (const unsigned char *)s->buf.data;
        size_t n = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
        if (s->buf.len < 5 + n)
            break;
        envd__message(s, b[0], s->buf.data + 5, n);
        al_buf_consume(&s->buf, 5 + n);
    }
    return 0;
}
