/* vmm/guest/connect: the Connect protocol's wire pieces, independent of HTTP.
 *
 * Owns: the envelope codec (flags:u8 | length:u32 big-endian | data) used by server-streaming
 * calls, both incremental (a decoder fed arbitrary slices) and whole-body (exactly one
 * message, as a streaming request carries); the Connect error codes, their snake_case names
 * and conventional HTTP statuses; the JSON error bodies (unary) and end-stream frames.
 * Does not own: HTTP, routing, message schemas (protojson.h).
 * Every length read from the wire is checked against a caller-given maximum.
 */
#ifndef AIRLOCK_GUEST_CONNECT_H
#define AIRLOCK_GUEST_CONNECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

#define AGENT_CONNECT_FLAG_COMPRESSED 0x01u
#define AGENT_CONNECT_FLAG_END_STREAM 0x02u
#define AGENT_CONNECT_HDR_LEN         5u

enum agent_connect_code {
    AGENT_CONNECT_OK = 0,
    AGENT_CONNECT_CANCELED,
    AGENT_CONNECT_UNKNOWN,
    AGENT_CONNECT_INVALID_ARGUMENT,
    AGENT_CONNECT_DEADLINE_EXCEEDED,
    AGENT_CONNECT_NOT_FOUND,
    AGENT_CONNECT_ALREADY_EXISTS,
    AGENT_CONNECT_PERMISSION_DENIED,
    AGENT_CONNECT_RESOURCE_EXHAUSTED,
    AGENT_CONNECT_FAILED_PRECONDITION,
    AGENT_CONNECT_ABORTED,
    AGENT_CONNECT_OUT_OF_RANGE,
    AGENT_CONNECT_UNIMPLEMENTED,
    AGENT_CONNECT_INTERNAL,
    AGENT_CONNECT_UNAVAILABLE,
    AGENT_CONNECT_DATA_LOSS,
    AGENT_CONNECT_UNAUTHENTICATED,
};

/* "not_found", ...; "unknown" for out-of-range values. */
const char *agent_connect_code_name(enum agent_connect_code code);
/* The conventional HTTP status for a unary error with this code. */
int agent_connect_code_http_status(enum agent_connect_code code);
/* Parses a snake_case name; -EINVAL when it is not a Connect code. */
int agent_connect_code_parse(const char *name, enum agent_connect_code *out);

/* Appends one frame (header + data) to out. -E2BIG if len does not fit a u32 or the buffer cap. */
int agent_connect_frame_append(struct al_buf *out, uint8_t flags, const void *data, size_t len);
/* Appends an end-stream frame: {} for OK, else {"error":{"code":..,"message":..}}. */
int agent_connect_end_stream_append(struct al_buf *out, enum agent_connect_code code,
                                    const char *message);
/* A unary error body: {"code":"not_found","message":"..."} (malloc'd, NUL-terminated). */
char *agent_connect_error_json(enum agent_connect_code code, const char *message);

/* Incremental decoder. Feed any slices; on_message is called once per complete frame with
 * its flags and payload (valid only during the call). Returning non-zero from on_message
 * stops decoding and is returned by agent_connect_decoder_feed. */
typedef int (*agent_connect_msg_fn)(void *ctx, uint8_t flags, const uint8_t *data, size_t len);

struct agent_connect_decoder {
    uint8_t hdr[AGENT_CONNECT_HDR_LEN];
    size_t hdr_have;
    uint8_t flags;
    uint32_t need;     /* payload bytes of the current frame */
    struct al_buf msg; /* payload collected so far */
    size_t max_msg;
    bool in_payload;
    bool failed;
    char err[160];
};

void agent_connect_decoder_init(struct agent_connect_decoder *d, size_t max_msg);
void agent_connect_decoder_free(struct agent_connect_decoder *d);
/* 0, a negative errno on a malformed stream (-EMSGSIZE: frame over max_msg, -EPROTO:
 * unknown or compressed flags; d->err says which), or on_message's non-zero return. */
int agent_connect_decoder_feed(struct agent_connect_decoder *d, const void *data, size_t len,
                               agent_connect_msg_fn on_message, void *ctx);
/* True when no partial frame is pending (a stream may end here). */
bool agent_connect_decoder_idle(const struct agent_connect_decoder *d);

/* A server-streaming request body: exactly one uncompressed message frame and nothing else.
 * On success msg and msglen point into body. */
int agent_connect_unwrap_request(const uint8_t *body, size_t len, size_t max_msg,
                                 const uint8_t **msg, size_t *msglen, struct al_error *err);

#endif
