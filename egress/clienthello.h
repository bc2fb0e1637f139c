/* egress/clienthello: a bounded parser for the first flight of a TLS client.
 *
 * Owns: recognising a TLS ClientHello in the bytes a sandbox sent first, reassembling it
 * across TLS records and TCP segments, and extracting what the proxy decides on: the SNI
 * host name, the ALPN protocols, whether Encrypted Client Hello (or the older ESNI) is
 * present, and whether TLS 1.3 is offered. It never allocates and never trusts a length.
 *
 * Usage: keep appending what the socket delivers to one buffer and call
 * egress_clienthello_parse on the whole buffer each time; it answers EGRESS_CH_MORE until
 * the ClientHello is complete. The bytes are not consumed: after the decision they are
 * forwarded unchanged (passthrough) or fed to the TLS engine (interception, part 2).
 */
#ifndef AIRLOCK_EGRESS_CLIENTHELLO_H
#define AIRLOCK_EGRESS_CLIENTHELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The largest ClientHello handshake message we accept (real ones, post-quantum key shares
 * and ECH GREASE included, stay under 4 KiB). */
#define EGRESS_CH_MAX_HANDSHAKE 16384
/* Bytes of records the caller may need to buffer for that: every record can carry as
 * little as one byte of the handshake, but each record costs 5 bytes of header, so we
 * also bound the number of records. */
#define EGRESS_CH_MAX_RECORDS 64
#define EGRESS_CH_MAX_BUFFER  (4 + EGRESS_CH_MAX_HANDSHAKE + 5 * EGRESS_CH_MAX_RECORDS)

#define EGRESS_CH_MAX_ALPN 8

enum egress_ch_status {
    EGRESS_CH_OK = 0,       /* a complete, well-formed ClientHello */
    EGRESS_CH_MORE = 1,     /* so far so good: read more bytes */
    EGRESS_CH_NOT_TLS = -1, /* the first bytes are not a TLS handshake record */
    EGRESS_CH_MALFORMED = -2,
    EGRESS_CH_TOO_LARGE = -3,
};

struct egress_clienthello {
    uint16_t record_version; /* version field of the first record */
    uint16_t client_version; /* legacy_version of the ClientHello */
    bool has_sni;
    char sni[256]; /* raw host_name bytes, NUL-terminated (no NUL inside) */
    size_t sni_len;
    size_t n_alpn; /* protocols offered (the first EGRESS_CH_MAX_ALPN kept) */
    size_t n_alpn_total;
    char alpn[EGRESS_CH_MAX_ALPN][32]; /* truncated names are marked by a trailing '~' */
    bool has_ech;                      /* encrypted_client_hello (0xfe0d), real or GREASE */
    bool has_esni;                     /* draft ESNI (0xffce) */
    bool offers_tls13;                 /* supported_versions contains 0x0304 */
    bool has_extensions;
    size_t n_extensions;
    size_t handshake_len; /* length of the ClientHello message body */
    size_t consumed;      /* bytes of whole records that carried it */
    const char *error;    /* static text saying what was wrong (on < 0) */
};

/* Parses buf[0..len). Returns an enum egress_ch_status; out is fully set on EGRESS_CH_OK,
 * and out->error is set on failures. A caller never needs to buffer more than
 * EGRESS_CH_MAX_BUFFER bytes: at that size the answer is never EGRESS_CH_MORE. */
int egress_clienthello_parse(const uint8_t *buf, size_t len, struct egress_clienthello *out);

/* True when the first byte(s) can only be the start of a TLS handshake record
 * (0x16 0x03 ...). Needs at least 1 byte; with 2 or more, checks the major version. */
bool egress_clienthello_looks_tls(const uint8_t *buf, size_t len);

/* Whether the ClientHello offers this ALPN protocol. */
bool egress_clienthello_offers_alpn(const struct egress_clienthello *ch, const char *proto);

#endif
