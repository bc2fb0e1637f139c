/* controlplane/console_ws: WebSocket (RFC 6455) for the web console's terminal.
 *
 * Owns: the opening handshake's checks and answer (Sec-WebSocket-Key -> Sec-WebSocket-Accept),
 * the parser of the frames a browser sends (bounded: a frame's payload is at most
 * CP_WS_MAX_PAYLOAD, every client frame must be masked, control frames are short and whole,
 * reserved bits and opcodes are errors) and the writer of the frames airlockd sends (unmasked,
 * as a server's are). The transport is the caller's (an al_http_tunnel); what the messages
 * mean is console_term.c's.
 */
#ifndef AIRLOCK_CP_CONSOLE_WS_H
#define AIRLOCK_CP_CONSOLE_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

#define CP_WS_MAX_PAYLOAD (64u * 1024)
#define CP_WS_ACCEPT_LEN  28 /* base64 of a SHA-1 digest */

enum cp_ws_opcode {
    CP_WS_CONT = 0x0,
    CP_WS_TEXT = 0x1,
    CP_WS_BINARY = 0x2,
    CP_WS_CLOSE = 0x8,
    CP_WS_PING = 0x9,
    CP_WS_PONG = 0xA,
};

/* Close codes (RFC 6455 7.4.1) the console sends. */
#define CP_WS_CLOSE_NORMAL   1000
#define CP_WS_CLOSE_PROTOCOL 1002
#define CP_WS_CLOSE_DATA     1003
#define CP_WS_CLOSE_TOO_BIG  1009
#define CP_WS_CLOSE_INTERNAL 1011

/* Sec-WebSocket-Accept for a client's Sec-WebSocket-Key: -EINVAL (err says why) unless the
 * key is the base64 of 16 bytes. */
int cp_ws_accept(const char *key, char out[CP_WS_ACCEPT_LEN + 1], struct al_error *err);

/* One frame as it arrived, unmasked. */
struct cp_ws_frame {
    bool fin;
    enum cp_ws_opcode opcode;
    const uint8_t *payload; /* valid until the next cp_ws_parse */
    size_t len;
};

/* Parses the first frame of data[0..len): 1 with *f and *used (the frame's bytes, which
 * are unmasked in place), 0 when more bytes are needed, -EPROTO (a frame no client may
 * send: unmasked, reserved bits, an unknown opcode, a fragmented or long control frame)
 * or -EMSGSIZE (a payload larger than CP_WS_MAX_PAYLOAD), err saying which. */
int cp_ws_parse(uint8_t *data, size_t len, struct cp_ws_frame *f, size_t *used,
                struct al_error *err);

/* Appends a whole server frame (FIN set, unmasked) to out: 0 or -ENOMEM/-E2BIG. */
int cp_ws_frame_append(struct al_buf *out, enum cp_ws_opcode op, const void *payload, size_t len);
/* A close frame with code and reason (cut to fit the 125 bytes of a control frame, at a
 * UTF-8 boundary). */
int cp_ws_close_append(struct al_buf *out, uint16_t code, const char *reason);

#endif
