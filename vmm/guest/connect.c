/* vmm/guest/connect: see connect.h. */
#include "connect.h"

#include "common/cleanup.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int status;
} connect__codes[] = {
    [AGENT_CONNECT_OK] = {"ok", 200},
    [AGENT_CONNECT_CANCELED] = {"canceled", 499},
    [AGENT_CONNECT_UNKNOWN] = {"unknown", 500},
    [AGENT_CONNECT_INVALID_ARGUMENT] = {"invalid_argument", 400},
    [AGENT_CONNECT_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
    [AGENT_CONNECT_NOT_FOUND] = {"not_found", 404},
    [AGENT_CONNECT_ALREADY_EXISTS] = {"already_exists", 409},
    [AGENT_CONNECT_PERMISSION_DENIED] = {"permission_denied", 403},
    [AGENT_CONNECT_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
    [AGENT_CONNECT_FAILED_PRECONDITION] = {"failed_precondition", 400},
    [AGENT_CONNECT_ABORTED] = {"aborted", 409},
    [AGENT_CONNECT_OUT_OF_RANGE] = {"out_of_range", 400},
    [AGENT_CONNECT_UNIMPLEMENTED] = {"unimplemented", 501},
    [AGENT_CONNECT_INTERNAL] = {"internal", 500},
    [AGENT_CONNECT_UNAVAILABLE] = {"unavailable", 503},
    [AGENT_CONNECT_DATA_LOSS] = {"data_loss", 500},
    [AGENT_CONNECT_UNAUTHENTICATED] = {"unauthenticated", 401},
};

#define CONNECT__NCODES (sizeof connect__codes / sizeof connect__codes[0])

const char *agent_connect_code_name(enum agent_connect_code code)
{
    if ((size_t)code >= CONNECT__NCODES)
        return "unknown";
    return connect__codes[code].name;
}

int agent_connect_code_http_status(enum agent_connect_code code)
{
    if ((size_t)code >= CONNECT__NCODES)
        return 500;
    return connect__codes[code].status;
}

int agent_connect_code_parse(const char *name, enum agent_connect_code *out)
{
    for (size_t i = 1; i < CONNECT__NCODES; i++) {
        if (strcmp(name, connect__codes[i].name) == 0) {
            *out = (enum agent_connect_code)i;
            return 0;
        }
    }
    return -EINVAL;
}

int agent_connect_frame_append(struct al_buf *out, uint8_t flags, const void *data, size_t len)
{
    if (len > UINT32_MAX)
        return -E2BIG;
    uint8_t hdr[AGENT_CONNECT_HDR_LEN] = {flags, (uint8_t)(len >> 24), (uint8_t)(len >> 16),
                                          (uint8_t)(len >> 8), (uint8_t)len};
    size_t before = out->len;
    int r = al_buf_append(out, hdr, sizeof hdr);
    if (r == 0 && len)
        r = al_buf_append(out, data, len);
    if (r < 0)
        out->len = before; /* never leave half a frame behind */
    if (out->data)
        out->data[out->len] = '\0';
    return r;
}

static json_t *connect__error_obj(enum agent_connect_code code, const char *message)
{
    json_t *e = json_object();
    json_object_set_new(e, "code", json_string(agent_connect_code_name(code)));
    if (message && *message) {
        json_t *m = json_string(message);
        if (!m) /* not valid UTF-8: keep the code, say so */
            m = json_string("(error message was not valid UTF-8)");
        json_object_set_new(e, "message", m);
    }
    return e;
}

int agent_connect_end_stream_append(struct al_buf *out, enum agent_connect_code code,
                                    const char *message)
{
    if (code == AGENT_CONNECT_OK)
        return agent_connect_frame_append(out, AGENT_CONNECT_FLAG_END_STREAM, "{}", 2);
    json_t *root = json_object();
    json_object_set_new(root, "error", connect__error_obj(code, message));
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        return -ENOMEM;
    int r = agent_connect_frame_append(out, AGENT_CONNECT_FLAG_END_STREAM, s, strlen(s));
    free(s);
    return r;
}

char *agent_connect_error_json(enum agent_connect_code code, const char *message)
{
    json_t *e = connect__error_obj(code, message);
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    return s;
}

void agent_connect_decoder_init(struct agent_connect_decoder *d, size_t max_msg)
{
    memset(d, 0, sizeof *d);
    d->max_msg = max_msg;
    al_buf_init(&d->msg, max_msg ? max_msg + 1 : 0);
}

void agent_connect_decoder_free(struct agent_connect_decoder *d)
{
    al_buf_free(&d->msg);
}

bool agent_connect_decoder_idle(const struct agent_connect_decoder *d)
{
    return !d->failed && d->hdr_have == 0 && !d->in_payload;
}

static int connect__fail(struct agent_connect_decoder *d, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int connect__fail(struct agent_connect_decoder *d, int code, const char *fmt, ...)
{
    va_list ap;
    d->failed = true;
    va_start(ap, fmt);
    vsnprintf(d->err, sizeof d->err, fmt, ap);
    va_end(ap);
    return code;
}

int agent_connect_decoder_feed(struct agent_connect_decoder *d, const void *data, size_t len,
                               agent_connect_msg_fn on_message, void *ctx)
{
    const uint8_t *p = data;
    if (d->failed)
        return -EPROTO;
    while (len > 0) {
        if (!d->in_payload) {
            size_t take = AL_MIN(AGENT_CONNECT_HDR_LEN - d->hdr_have, len);
            memcpy(d->hdr + d->hdr_have, p, take);
            d->hdr_have += take;
            p += take;
            len -= take;
            if (d->hdr_have < AGENT_CONNECT_HDR_LEN)
                break;
            d->flags = d->hdr[0];
            d->need = (uint32_t)d->hdr[1] << 24 | (uint32_t)d->hdr[2] << 16 |
                      (uint32_t)d->hdr[3] << 8 | d->hdr[4];
            if (d->flags & AGENT_CONNECT_FLAG_COMPRESSED)
                return connect__fail(
                    d, -EPROTO,
                    "compressed Connect messages are not supported (flags 0x%02x); "
                    "send uncompressed envelopes",
                    d->flags);
            if (d->flags & ~(unsigned)AGENT_CONNECT_FLAG_END_STREAM)
                return connect__fail(d, -EPROTO, "unknown Connect envelope flags 0x%02x", d->flags);
            if (d->max_msg && d->need > d->max_msg)
                return connect__fail(
                    d, -EMSGSIZE, "Connect message of %u bytes is larger than this server accepts",
                    d->need);
            d->hdr_have = 0;
            d->in_payload = true;
            al_buf_reset(&d->msg);
        }
        size_t want = d->need - d->msg.len;
        size_t take = want < len ? want : len;
        if (take && al_buf_append(&d->msg, p, take) < 0)
            return connect__fail(d, -ENOMEM, "out of memory for a %u-byte message", d->need);
        p += take;
        len -= take;
        if (d->msg.len == d->need) {
            d->in_payload = false;
            int r = on_message(ctx, d->flags, (const uint8_t *)(d->msg.data ? d->msg.data : ""),
                               d->msg.len);
            al_buf_reset(&d->msg);
            if (r)
                return r;
        }
    }
    return 0;
}

int agent_connect_unwrap_request(const uint8_t *body, size_t len, size_t max_msg,
                                 const uint8_t **msg, size_t *msglen, struct al_error *err)
{
    if (len < AGENT_CONNECT_HDR_LEN)
        return al_error_set(err, -EPROTO,
                            "request body of %zu bytes is not a Connect envelope (a streaming call "
                            "sends flags:u8 length:u32 message)",
                            len);
    uint8_t flags = body[0];
    uint32_t n =
        (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 | body[4];
    if (flags & AGENT_CONNECT_FLAG_COMPRESSED)
        return al_error_set(
            err, -EPROTO, "compressed Connect messages are not supported; send them uncompressed");
    if (flags != 0)
        return al_error_set(err, -EPROTO,
                            "the request envelope has flags 0x%02x; a request message has flags 0",
                            flags);
    if (max_msg && n > max_msg)
        return al_error_set(err, -EMSGSIZE,
                            "request message of %u bytes exceeds the %zu-byte limit", n, max_msg);
    if ((size_t)n != len - AGENT_CONNECT_HDR_LEN)
        return al_error_set(err, -EPROTO,
                            "the request envelope announces %u bytes but the body carries %zu; "
                            "a streaming request holds exactly one message",
                            n, len - AGENT_CONNECT_HDR_LEN);
    *msg = body + AGENT_CONNECT_HDR_LEN;
    *msglen = n;
    return 0;
}
