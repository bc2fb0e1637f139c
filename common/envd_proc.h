/* common/envd_proc: the client side of envd's process.Process/Start (Connect server
 * streaming), for every caller that runs a command through a sandbox's agent: the CLI's
 * `airlock sandbox exec`, airlockd's template builds (a RUN step) and the web console's
 * terminal (a pty).
 *
 * Owns: the request's envelope (one JSON message, 5-byte Connect framing), the
 * Authorization header that names the user, and decoding the answer's envelopes into the
 * command's output (stdout, stderr, pty), its start, its end (exit code) and the stream's
 * own error (deadline_exceeded and the rest). The transport is the caller's (al_http_creq).
 */
#ifndef AIRLOCK_COMMON_ENVD_PROC_H
#define AIRLOCK_COMMON_ENVD_PROC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

enum al_envd_stream_fd { AL_ENVD_STDOUT = 1, AL_ENVD_STDERR = 2, AL_ENVD_PTY = 3 };

/* The body of process.Process/Start: {"process":{cmd,args,envs,cwd},"stdin":false} in one
 * envelope. args and envs are stolen (NULL: none); cwd may be NULL. *out is malloc'd. */
int al_envd_start_body(const char *cmd, json_t *args, json_t *envs, const char *cwd,
                       unsigned char **out, size_t *len);
/* The same with a pty of cols x rows instead of pipes (the output comes as AL_ENVD_PTY;
 * input goes to process.Process/SendInput as {"pty": ...}). */
int al_envd_start_pty_body(const char *cmd, json_t *args, json_t *envs, const char *cwd,
                           unsigned cols, unsigned rows, unsigned char **out, size_t *len);
/* "Basic base64(USER:)", the header envd takes the command's user from. */
void al_envd_user_auth(const char *user, char *out, size_t len);

struct al_envd_stream {
    struct al_buf buf; /* undecoded envelope bytes (or a non-200 answer's body) */
    int status;        /* the HTTP status, set by the caller */
    bool started, ended;
    int pid;               /* of the start event: the process's id for the other calls */
    int exit_code;         /* of the end event; 128+9 when it ended without an exit status */
    char status_text[128]; /* the end event's status ("exit status 3", "signal: killed") */
    bool deadline;         /* the stream ended with deadline_exceeded */
    char error[512];       /* the stream's end-of-stream error message, or "" */
    /* Each piece of output, decoded (NULL: dropped). */
    void (*on_output)(void *arg, enum al_envd_stream_fd fd, const unsigned char *data, size_t n);
    void *arg;
};

/* max: the most undecoded bytes held (one message is at most that). */
void al_envd_stream_init(struct al_envd_stream *s, size_t max,
                         void (*on_output)(void *, enum al_envd_stream_fd, const unsigned char *,
                                           size_t),
                         void *arg);
/* Takes a piece of the answer's body: 0, or -E2BIG when a message is larger than max
 * (the caller aborts). A non-200 answer's body is only collected (buf). */
int al_envd_stream_feed(struct al_envd_stream *s, const char *d, size_t len);
void al_envd_stream_free(struct al_envd_stream *s);

#endif
