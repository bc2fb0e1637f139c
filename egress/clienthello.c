/* egress/clienthello: see clienthello.h. Every length read from the wire is checked
 * against what remains before it is used; nothing is allocated. */
#include "clienthello.h"

#include <string.h>

#define TLS_RECORD_HANDSHAKE   22
#define TLS_HS_CLIENT_HELLO    1
#define TLS_MAX_RECORD         16384
#define EXT_SERVER_NAME        0
#define EXT_ALPN               16
#define EXT_SUPPORTED_VERSIONS 43
#define EXT_ECH                0xfe0d
#define EXT_ESNI               0xffce
#define CH_MAX_EXTENSIONS      128

struct ch__rd {
    const uint8_t *p;
    const uint8_t *end;
};

static bool ch__need(const struct ch__rd *r, size_t n)
{
    return (size_t)(r->end - r->p) >= n;
}

static uint16_t ch__be16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static int ch__fail(struct egress_clienthello *out, int status, const char *why)
{
    out->error = why;
    return status;
}

bool egress_clienthello_looks_tls(const uint8_t *buf, size_t len)
{
    if (len < 1 || buf[0] != TLS_RECORD_HANDSHAKE)
        return false;
    if (len >= 2 && buf[1] != 3)
        return false;
    return true;
}

bool egress_clienthello_offers_alpn(const struct egress_clienthello *ch, const char *proto)
{
    for (size_t i = 0; i < ch->n_alpn; i++)
        if (strcmp(ch->alpn[i], proto) == 0)
            return true;
    return false;
}

static int ch__sni(struct egress_clienthello *out, struct ch__rd r)
{
    if (!ch__need(&r, 2))
        return ch__fail(out, EGRESS_CH_MALFORMED, "server_name extension is truncated");
    size_t list = ch__be16(r.p);
    r.p += 2;
    if (list == 0 || list != (size_t)(r.end - r.p))
        return ch__fail(out, EGRESS_CH_MALFORMED, "server_name list length is inconsistent");
    while (r.p < r.end) {
        if (!ch__need(&r, 3))
            return ch__fail(out, EGRESS_CH_MALFORMED, "server_name entry is truncated");
        uint8_t type = r.p[0];
        size_t n = ch__be16(r.p + 1);
        r.p += 3;
        if (!ch__need(&r, n))
            return ch__fail(out, EGRESS_CH_MALFORMED, "server_name entry overruns the extension");
        if (type == 0) {
            if (out->has_sni)
                return ch__fail(out, EGRESS_CH_MALFORMED, "more than one host_name in server_name");
            if (n == 0 || n > 255)
                return ch__fail(out, EGRESS_CH_MALFORMED,
                                "host_name is empty or longer than 255 bytes");
            if (memchr(r.p, 0, n))
                return ch__fail(out, EGRESS_CH_MALFORMED, "host_name contains a NUL byte");
            memcpy(out->sni, r.p, n);
            out->sni[n] = 0;
            out->sni_len = n;
            out->has_sni = true;
        }
        r.p += n;
    }
    return 0;
}

static int ch__alpn(struct egress_clienthello *out, struct ch__rd r)
{
    if (!ch__need(&r, 2))
        return ch__fail(out, EGRESS_CH_MALFORMED, "ALPN extension is truncated");
    size_t list = ch__be16(r.p);
    r.p += 2;
    if (list < 2 || list != (size_t)(r.end - r.p))
        return ch__fail(out, EGRESS_CH_MALFORMED, "ALPN list length is inconsistent");
    while (r.p < r.end) {
        size_t n = r.p[0];
        r.p++;
        if (n == 0 || !ch__need(&r, n))
            return ch__fail(out, EGRESS_CH_MALFORMED,
                            "ALPN protocol name is empty or overruns the list");
        if (out->n_alpn < EGRESS_CH_MAX_ALPN) {
            char *dst = out->alpn[out->n_alpn++];
            size_t keep = n < sizeof out->alpn[0] - 1 ? n : sizeof out->alpn[0] - 2;
            for (size_t i = 0; i < keep; i++)
                dst[i] = (r.p[i] >= 0x21 && r.p[i] <= 0x7e) ? (char)r.p[i] : '?';
            if (keep < n)
                dst[keep++] = '~';
            dst[keep] = 0;
        }
        out->n_alpn_total++;
        r.p += n;
    }
    return 0;
}

static int ch__versions(struct egress_clienthello *out, struct ch__rd r)
{
    if (!ch__need(&r, 1))
        return ch__fail(out, EGRESS_CH_MALFORMED, "supported_versions is truncated");
    size_t n = r.p[0];
    r.p++;
    if (n < 2 || (n & 1) || n != (size_t)(r.end - r.p))
        return ch__fail(out, EGRESS_CH_MALFORMED, "supported_versions length is inconsistent");
    for (; r.p < r.end; r.p += 2)
        if (ch__be16(r.p) == 0x0304)
            out->offers_tls13 = true;
    return 0;
}

/* The ClientHello body (after the 4-byte handshake header). */
static int ch__body(struct egress_clienthello *out, const uint8_t *body, size_t len)
{
    struct ch__rd r = {body, body + len};
    if (!ch__need(&r, 2 + 32 + 1))
        return ch__fail(out, EGRESS_CH_MALFORMED, "ClientHello is too short");
    out->client_version = ch__be16(r.p);
    if (r.p[0] != 3)
        return ch__fail(out, EGRESS_CH_MALFORMED, "ClientHello version is not TLS");
    r.p += 2 + 32;
    size_t sid = r.p[0];
    r.p++;
    if (sid > 32 || !ch__need(&r, sid))
        return ch__fail(out, EGRESS_CH_MALFORMED,
                        "session id is longer than 32 bytes or truncated");
    r.p += sid;
    if (!ch__need(&r, 2))
        return ch__fail(out, EGRESS_CH_MALFORMED, "cipher suites are missing");
    size_t cs = ch__be16(r.p);
    r.p += 2;
    if (cs < 2 || (cs & 1) || !ch__need(&r, cs))
        return ch__fail(out, EGRESS_CH_MALFORMED, "cipher suite list is empty, odd or truncated");
    r.p += cs;
    if (!ch__need(&r, 1))
        return ch__fail(out, EGRESS_CH_MALFORMED, "compression methods are missing");
    size_t cm = r.p[0];
    r.p++;
    if (cm < 1 || !ch__need(&r, cm))
        return ch__fail(out, EGRESS_CH_MALFORMED, "compression method list is empty or truncated");
    r.p += cm;
    if (r.p == r.end)
        return EGRESS_CH_OK; /* no extensions (SSL 3.0 style): no SNI */
    if (!ch__need(&r, 2))
        return ch__fail(out, EGRESS_CH_MALFORMED, "extensions length is truncated");
    size_t ext = ch__be16(r.p);
    r.p += 2;
    if (ext != (size_t)(r.end - r.p))
        return ch__fail(out, EGRESS_CH_MALFORMED,
                        "extensions length does not match the ClientHello");
    out->has_extensions = true;

    uint16_t seen[CH_MAX_EXTENSIONS];
    size_t n_seen = 0;
    while (r.p < r.end) {
        if (!ch__need(&r, 4))
            return ch__fail(out, EGRESS_CH_MALFORMED, "extension header is truncated");
        uint16_t type = ch__be16(r.p);
        size_t elen = ch__be16(r.p + 2);
        r.p += 4;
        if (!ch__need(&r, elen))
            return ch__fail(out, EGRESS_CH_MALFORMED, "extension overruns the ClientHello");
        if (n_seen == CH_MAX_EXTENSIONS)
            return ch__fail(out, EGRESS_CH_MALFORMED, "more than 128 extensions");
        for (size_t i = 0; i < n_seen; i++)
            if (seen[i] == type)
                return ch__fail(out, EGRESS_CH_MALFORMED, "an extension appears twice");
        seen[n_seen++] = type;
        struct ch__rd e = {r.p, r.p + elen};
        int rc = 0;
        switch (type) {
        case EXT_SERVER_NAME:
            rc = ch__sni(out, e);
            break;
        case EXT_ALPN:
            rc = ch__alpn(out, e);
            break;
        case EXT_SUPPORTED_VERSIONS:
            rc = ch__versions(out, e);
            break;
        case EXT_ECH:
            out->has_ech = true;
            break;
        case EXT_ESNI:
            out->has_esni = true;
            break;
        default:
            break;
        }
        if (rc < 0)
            return rc;
        r.p += elen;
    }
    out->n_extensions = n_seen;
    return EGRESS_CH_OK;
}

int egress_clienthello_parse(const uint8_t *buf, size_t len, struct egress_clienthello *out)
{
    memset(out, 0, sizeof *out);
    if (len >= 1 && !egress_clienthello_looks_tls(buf, len))
        return ch__fail(out, EGRESS_CH_NOT_TLS, "not a TLS handshake record");

    /* Reassembled handshake bytes. Only the ClientHello itself is kept. */
    uint8_t hs[4 + EGRESS_CH_MAX_HANDSHAKE];
    size_t hs_len = 0, need = 0; /* need = 4 + body length, once known */
    size_t pos = 0, records = 0;

    while (len - pos >= 5) {
        const uint8_t *h = buf + pos;
        size_t rlen = ch__be16(h + 3);
        if (h[0] != TLS_RECORD_HANDSHAKE)
            return ch__fail(out, EGRESS_CH_MALFORMED,
                            "a non-handshake record arrived before the ClientHello was complete");
        if (h[1] != 3 || h[2] > 4)
            return ch__fail(out, EGRESS_CH_MALFORMED, "record version is not TLS");
        if (rlen == 0 || rlen > TLS_MAX_RECORD)
            return ch__fail(out, EGRESS_CH_MALFORMED, "record length is 0 or above 16384");
        if (records == 0)
            out->record_version = ch__be16(h + 1);
        if (++records > EGRESS_CH_MAX_RECORDS)
            return ch__fail(out, EGRESS_CH_TOO_LARGE, "ClientHello is split over too many records");
        /* Early check on a partial first record: is it a ClientHello at all? */
        if (hs_len == 0 && len - pos > 5 && h[5] != TLS_HS_CLIENT_HELLO)
            return ch__fail(out, EGRESS_CH_MALFORMED,
                            "first handshake message is not a ClientHello");
        if (len - pos - 5 < rlen)
            break; /* record not complete yet */

        size_t room = sizeof hs - hs_len;
        size_t take = rlen;
        if (need) {
            if (hs_len + take > need)
                return ch__fail(out, EGRESS_CH_MALFORMED,
                                "data follows the ClientHello in its record");
        } else if (take > room) {
            take = room;
        }
        memcpy(hs + hs_len, h + 5, take);
        hs_len += take;
        pos += 5 + rlen;

        if (!need && hs_len >= 4) {
            if (hs[0] != TLS_HS_CLIENT_HELLO)
                return ch__fail(out, EGRESS_CH_MALFORMED,
                                "first handshake message is not a ClientHello");
            size_t body = ((size_t)hs[1] << 16) | ((size_t)hs[2] << 8) | hs[3];
            if (body > EGRESS_CH_MAX_HANDSHAKE)
                return ch__fail(out, EGRESS_CH_TOO_LARGE, "ClientHello is larger than 16 KiB");
            need = 4 + body;
            if (hs_len > need)
                return ch__fail(out, EGRESS_CH_MALFORMED,
                                "data follows the ClientHello in its record");
        }
        if (!need && take < rlen)
            return ch__fail(out, EGRESS_CH_TOO_LARGE, "ClientHello is larger than 16 KiB");
        if (need && hs_len == need) {
            out->handshake_len = need - 4;
            out->consumed = pos;
            return ch__body(out, hs + 4, need - 4);
        }
    }
    if (len >= EGRESS_CH_MAX_BUFFER)
        return ch__fail(out, EGRESS_CH_TOO_LARGE, "too many bytes before a complete ClientHello");
    return EGRESS_CH_MORE;
}
