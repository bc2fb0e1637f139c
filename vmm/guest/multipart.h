/* vmm/guest/multipart: a streaming multipart/form-data parser (RFC 7578 / RFC 2046).
 *
 * Owns: the boundary from a Content-Type header, part headers (Content-Disposition name,
 * filename and filename* (RFC 5987), Content-Type), and part bodies delivered as they
 * arrive, without buffering whole parts. Memory is bounded: a window of 64 KiB plus the
 * delimiter, and at most AGENT_MP_MAX_HEADER bytes of headers per part.
 * Does not own: what is done with the parts (files.c writes them to disk).
 */
#ifndef AIRLOCK_GUEST_MULTIPART_H
#define AIRLOCK_GUEST_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

#define AGENT_MP_MAX_BOUNDARY 70
#define AGENT_MP_MAX_HEADER   8192
#define AGENT_MP_MAX_PARTS    4096
#define AGENT_MP_WINDOW       65536

struct agent_mp_part {
    char name[256];
    char filename[4096];
    bool has_filename;
    char content_type[256];
};

struct agent_mp_callbacks {
    /* A part's headers are complete. Non-zero stops the parser (returned by feed). */
    int (*on_part_begin)(void *ctx, const struct agent_mp_part *part);
    int (*on_part_data)(void *ctx, const char *data, size_t len);
    int (*on_part_end)(void *ctx);
};

enum agent_mp_state {
    AGENT_MP_PREAMBLE,
    AGENT_MP_AFTER_DELIM,
    AGENT_MP_HEADERS,
    AGENT_MP_BODY,
    AGENT_MP_DONE,
    AGENT_MP_FAILED,
};

struct agent_mp {
    enum agent_mp_state state;
    char delim[AGENT_MP_MAX_BOUNDARY + 5]; /* "\r\n--" boundary */
    size_t delim_len;
    char *win; /* AGENT_MP_WINDOW + delim_len bytes */
    size_t win_len;
    size_t header_bytes;
    size_t parts;
    struct agent_mp_part part;
    const struct agent_mp_callbacks *cb;
    void *ctx;
    char err[256];
};

/* Reads the boundary parameter of a multipart Content-Type value. -EINVAL with a message in
 * mp->err when the header is not multipart/form-data or lacks a valid boundary. */
int agent_mp_init(struct agent_mp *mp, const char *content_type,
                  const struct agent_mp_callbacks *cb, void *ctx);
void agent_mp_free(struct agent_mp *mp);
/* 0 or a negative errno (-EPROTO for malformed input, message in mp->err), or a callback's
 * non-zero return. */
int agent_mp_feed(struct agent_mp *mp, const char *data, size_t len);
/* At the end of the body: -EPROTO unless the closing delimiter was seen. */
int agent_mp_finish(struct agent_mp *mp);

/* Parses one header parameter list ("form-data; name=\"file\"; filename=\"/a b\"") and copies
 * the value of param into out. Exposed for tests. -ENOENT when absent. */
int agent_mp_header_param(const char *value, const char *param, char *out, size_t outlen);

#endif
