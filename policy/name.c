/* policy/name: the one canonicaliser of host names and IP literals, host patterns, secret
 * names, and the address classifier. Every component that compares, resolves, logs or binds
 * a host name goes through policy_host_canon (docs/policy.md, "Canonical names"). */
#include "policy/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <idn2.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define NAME__RAW_MAX 1024 /* longest raw input considered at all */

/* ---- addresses ------------------------------------------------------------------------ */

bool policy_addr_equal(const struct policy_addr *a, const struct policy_addr *b)
{
    if (a->family != b->family)
        return false;
    return memcmp(a->bytes, b->bytes, a->family == AF_INET ? 4 : 16) == 0;
}

const char *policy_addr_format(const struct policy_addr *a, char *buf, size_t len)
{
    if (!a || (a->family != AF_INET && a->family != AF_INET6) ||
        !inet_ntop(a->family, a->bytes, buf, (socklen_t)len)) {
        if (len)
            snprintf(buf, len, "(none)");
    }
    return buf;
}

static void addr__from_v6(const uint8_t b[16], struct policy_addr *out)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(out, 0, sizeof *out);
    if (memcmp(b, mapped, 12) == 0) {
        out->family = AF_INET;
        memcpy(out->bytes, b + 12, 4);
    } else {
        out->family = AF_INET6;
        memcpy(out->bytes, b, 16);
    }
}

int policy_addr_from_sockaddr(const struct sockaddr *sa, struct policy_addr *out)
{
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        out->family = AF_INET;
        memcpy(out->bytes, &s4->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        addr__from_v6(s6->sin6_addr.s6_addr, out);
        return 0;
    }
    return -EAFNOSUPPORT;
}

struct addr__range {
    uint8_t prefix[16];
    uint8_t bits;
    enum policy_addr_class cls;
    const char *code;
    const char *reason;
};

static bool addr__in(const uint8_t *a, const uint8_t *net, unsigned bits)
{
    unsigned full = bits / 8, rest = bits % 8;
    if (memcmp(a, net, full) != 0)
        return false;
    if (rest) {
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        if ((a[full] & mask) != (net[full] & mask))
            return false;
    }
    return true;
}

/* Most specific first; the first range that contains the address decides. */
static const struct addr__range addr__v4[] = {
    {{255, 255, 255, 255}, 32, POLICY_ADDR_BROADCAST, "broadcast", "broadcast (255.255.255.255)"},
    {{169, 254, 169, 254},
     32,
     POLICY_ADDR_METADATA,
     "metadata",
     "cloud metadata service (169.254.169.254)"},
    {{0}, 8, POLICY_ADDR_UNSPECIFIED, "unspecified", "\"this network\" (0.0.0.0/8)"},
    {{10}, 8, POLICY_ADDR_PRIVATE, "private", "private-use (10.0.0.0/8, RFC 1918)"},
    {{100, 64},
     10,
     POLICY_ADDR_SHARED,
     "shared",
     "shared address space / carrier-grade NAT (100.64.0.0/10)"},
    {{127}, 8, POLICY_ADDR_LOOPBACK, "loopback", "loopback (127.0.0.0/8)"},
    {{169, 254}, 16, POLICY_ADDR_LINK_LOCAL, "link_local", "link-local (169.254.0.0/16)"},
    {{172, 16}, 12, POLICY_ADDR_PRIVATE, "private", "private-use (172.16.0.0/12, RFC 1918)"},
    {{192, 0, 0}, 24, POLICY_ADDR_RESERVED, "reserved", "IETF protocol assignments (192.0.0.0/24)"},
    {{192, 0, 2}, 24, POLICY_ADDR_DOCUMENTATION, "documentation", "documentation (192.0.2.0/24)"},
    {{192, 88, 99}, 24, POLICY_ADDR_TUNNEL, "tunnel", "6to4 relay anycast (192.88.99.0/24)"},
    {{192, 168}, 16, POLICY_ADDR_PRIVATE, "private", "private-use (192.168.0.0/16, RFC 1918)"},
    {{198, 18}, 15, POLICY_ADDR_BENCHMARK, "benchmark", "benchmarking (198.18.0.0/15)"},
    {{198, 51, 100},
     24,
     POLICY_ADDR_DOCUMENTATION,
     "documentation",
     "documentation (198.51.100.0/24)"},
    {{203, 0, 113},
     24,
     POLICY_ADDR_DOCUMENTATION,
     "documentation",
     "documentation (203.0.113.0/24)"},
    {{224}, 4, POLICY_ADDR_MULTICAST, "multicast", "multicast (224.0.0.0/4)"},
    {{240}, 4, POLICY_ADDR_RESERVED, "reserved", "reserved (240.0.0.0/4)"},
};

static const struct addr__range addr__v6[] = {
    {{0}, 128, POLICY_ADDR_UNSPECIFIED, "unspecified", "unspecified (::)"},
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
     128,
     POLICY_ADDR_LOOPBACK,
     "loopback",
     "loopback (::1)"},
    {{0x20, 0x01, 0x00, 0x02},
     48,
     POLICY_ADDR_BENCHMARK,
     "benchmark",
     "benchmarking (2001:2::/48)"},
    {{0x20, 0x01, 0x0d, 0xb8},
     32,
     POLICY_ADDR_DOCUMENTATION,
     "documentation",
     "documentation (2001:db8::/32)"},
    {{0x20, 0x01, 0x00, 0x00},
     23,
     POLICY_ADDR_RESERVED,
     "reserved",
     "IETF protocol assignments (2001::/23)"},
    {{0x3f, 0xff}, 20, POLICY_ADDR_DOCUMENTATION, "documentation", "documentation (3fff::/20)"},
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01},
     48,
     POLICY_ADDR_RESERVED,
     "reserved",
     "local-use NAT64 (64:ff9b:1::/48)"},
    {{0x01, 0x00, 0, 0, 0, 0, 0, 0},
     64,
     POLICY_ADDR_RESERVED,
     "reserved",
     "discard-only (100::/64)"},
    {{0x5f, 0x00}, 16, POLICY_ADDR_RESERVED, "reserved", "SRv6 SIDs (5f00::/16)"},
    {{0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54},
     128,
     POLICY_ADDR_METADATA,
     "metadata",
     "cloud metadata service (fd00:ec2::254)"},
    {{0xfc}, 7, POLICY_ADDR_ULA, "ula", "unique local (fc00::/7)"},
    {{0xfe, 0x80}, 10, POLICY_ADDR_LINK_LOCAL, "link_local", "link-local (fe80::/10)"},
    {{0xfe, 0xc0}, 10, POLICY_ADDR_RESERVED, "reserved", "site-local, deprecated (fec0::/10)"},
    {{0xff}, 8, POLICY_ADDR_MULTICAST, "multicast", "multicast (ff00::/8)"},
};

static void addr__set(struct policy_addr_info *out, enum policy_addr_class cls, const char *code,
                      const char *reason)
{
    out->cls = cls;
    out->code = code;
    out->reason = reason;
    out->internal = !(cls == POLICY_ADDR_PUBLIC || cls == POLICY_ADDR_DOCUMENTATION ||
                      cls == POLICY_ADDR_NAT64);
}

static void addr__classify_v4(const uint8_t *b, struct policy_addr_info *out)
{
    for (size_t i = 0; i < sizeof addr__v4 / sizeof addr__v4[0]; i++) {
        if (addr__in(b, addr__v4[i].prefix, addr__v4[i].bits)) {
            addr__set(out, addr__v4[i].cls, addr__v4[i].code, addr__v4[i].reason);
            return;
        }
    }
    addr__set(out, POLICY_ADDR_PUBLIC, "public", "public address");
}

void policy_addr_classify(const struct policy_addr *a, struct policy_addr_info *out)
{
    memset(out, 0, sizeof *out);
    if (!a || (a->family != AF_INET && a->family != AF_INET6)) {
        addr__set(out, POLICY_ADDR_RESERVED, "invalid", "no valid address");
        return;
    }
    if (a->family == AF_INET) {
        addr__classify_v4(a->bytes, out);
        return;
    }
    const uint8_t *b = a->bytes;
    static const uint8_t zero12[12] = {0};
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    struct policy_addr v4 = {.family = AF_INET};
    struct policy_addr_info inner;
    /* Forms that embed an IPv4 address are judged by the address they reach. */
    if (memcmp(b, mapped, 12) == 0) {
        memcpy(v4.bytes, b + 12, 4);
        addr__classify_v4(v4.bytes, out);
        out->embedded = v4;
        return;
    }
    for (size_t i = 0; i < 2; i++) { /* :: and ::1 before the ::/96 block */
        if (addr__in(b, addr__v6[i].prefix, addr__v6[i].bits)) {
            addr__set(out, addr__v6[i].cls, addr__v6[i].code, addr__v6[i].reason);
            return;
        }
    }
    if (memcmp(b, zero12, 12) == 0) {
        memcpy(v4.bytes, b + 12, 4);
        addr__set(out, POLICY_ADDR_RESERVED, "reserved",
                  "IPv4-compatible IPv6, deprecated (::/96)");
        out->embedded = v4;
        return;
    }
    if (memcmp(b, nat64, 12) == 0) {
        memcpy(v4.bytes, b + 12, 4);
        addr__classify_v4(v4.bytes, &inner);
        if (inner.internal) {
            addr__set(out, inner.cls, inner.code,
                      "NAT64 (64:ff9b::/96) form of an internal IPv4 address");
        } else {
            addr__set(out, POLICY_ADDR_NAT64, "nat64", "NAT64 (64:ff9b::/96) of a public IPv4");
        }
        out->embedded = v4;
        return;
    }
    if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) {
        /* Teredo: the client's IPv4 is the last 32 bits, inverted. Refused always. */
        for (int i = 0; i < 4; i++)
            v4.bytes[i] = (uint8_t)~b[12 + i];
        addr__classify_v4(v4.bytes, &inner);
        addr__set(out, POLICY_ADDR_TUNNEL, "tunnel",
                  inner.internal ? "Teredo (2001::/32) tunnel to an internal IPv4 address"
                                 : "Teredo tunnel (2001::/32)");
        out->embedded = v4;
        return;
    }
    if (b[0] == 0x20 && b[1] == 0x02) {
        memcpy(v4.bytes, b + 2, 4);
        addr__classify_v4(v4.bytes, &inner);
        addr__set(out, POLICY_ADDR_TUNNEL, "tunnel",
                  inner.internal ? "6to4 (2002::/16) form of an internal IPv4 address"
                                 : "6to4 tunnel (2002::/16)");
        out->embedded = v4;
        return;
    }
    for (size_t i = 2; i < sizeof addr__v6 / sizeof addr__v6[0]; i++) {
        if (addr__in(b, addr__v6[i].prefix, addr__v6[i].bits)) {
            addr__set(out, addr__v6[i].cls, addr__v6[i].code, addr__v6[i].reason);
            return;
        }
    }
    if ((b[0] & 0xe0) != 0x20) {
        addr__set(out, POLICY_ADDR_RESERVED, "reserved", "outside IPv6 global unicast (2000::/3)");
        return;
    }
    addr__set(out, POLICY_ADDR_PUBLIC, "public", "public address");
}

bool policy_addr_is_internal(const struct policy_addr *a)
{
    struct policy_addr_info info;
    policy_addr_classify(a, &info);
    return info.internal;
}

/* ---- IP literals ---------------------------------------------------------------------- */

/* One part of an inet_aton/WHATWG IPv4 spelling: 0x.. hex, 0.. octal, else decimal. */
static bool name__v4_part(const char *s, size_t len, uint64_t *out)
{
    unsigned base = 10;
    if (len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        len -= 2;
    } else if (len >= 2 && s[0] == '0') {
        base = 8;
        s++;
        len--;
    }
    if (len == 0) {
        if (base == 16) { /* "0x" alone is zero, as in WHATWG */
            *out = 0;
            return true;
        }
        return false;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        int c = tolower((unsigned char)s[i]);
        unsigned dgt;
        if (c >= '0' && c <= '9')
            dgt = (unsigned)(c - '0');
        else if (base == 16 && c >= 'a' && c <= 'f')
            dgt = (unsigned)(c - 'a' + 10);
        else
            return false;
        if (dgt >= base)
            return false;
        v = v * base + dgt;
        if (v > 0xffffffffull)
            return false;
    }
    *out = v;
    return true;
}

/* Does the last label look like a number (WHATWG "ends in a number")? */
static bool name__ends_in_number(const char *s, size_t len)
{
    size_t start = len;
    while (start > 0 && s[start - 1] != '.')
        start--;
    const char *l = s + start;
    size_t ll = len - start;
    if (ll == 0)
        return false;
    if (strspn(l, "0123456789") >= ll)
        return true;
    if (ll >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X')) {
        for (size_t i = 2; i < ll; i++)
            if (!isxdigit((unsigned char)l[i]))
                return false;
        return true;
    }
    return false;
}

static bool name__parse_v4(const char *s, size_t len, uint8_t out[4])
{
    uint64_t parts[4];
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '.') {
            if (n == 4)
                return false;
            if (!name__v4_part(s + start, i - start, &parts[n]))
                return false;
            n++;
            start = i + 1;
        }
    }
    if (n == 0)
        return false;
    for (size_t i = 0; i + 1 < n; i++)
        if (parts[i] > 255)
            return false;
    uint64_t last = parts[n - 1];
    if (last >= (1ull << (8 * (5 - n))))
        return false;
    uint32_t v = (uint32_t)last;
    for (size_t i = 0; i + 1 < n; i++)
        v |= (uint32_t)parts[i] << (8 * (3 - i));
    out[0] = (uint8_t)(v >> 24);
    out[1] = (uint8_t)(v >> 16);
    out[2] = (uint8_t)(v >> 8);
    out[3] = (uint8_t)v;
    return true;
}

static int name__parse_v6(const char *s, size_t len, struct policy_host *out, struct al_error *err)
{
    char buf[64];
    const char *pct = memchr(s, '%', len);
    size_t alen = pct ? (size_t)(pct - s) : len;
    if (alen == 0 || alen >= sizeof buf)
        return al_error_set(err, -EINVAL, "not a valid IPv6 address");
    memcpy(buf, s, alen);
    buf[alen] = '\0';
    uint8_t b[16];
    if (inet_pton(AF_INET6, buf, b) != 1)
        return al_error_set(err, -EINVAL, "'%s' is not a valid IPv6 address", buf);
    out->zone[0] = '\0';
    if (pct) {
        const char *z = pct + 1;
        size_t zl = len - alen - 1;
        if (zl >= 2 && z[0] == '2' && z[1] == '5') { /* URL form: %25eth0 */
            z += 2;
            zl -= 2;
        }
        if (zl == 0 || zl >= sizeof out->zone)
            return al_error_set(err, -EINVAL, "IPv6 zone id is empty or too long");
        for (size_t i = 0; i < zl; i++)
            if (!isalnum((unsigned char)z[i]) && z[i] != '.' && z[i] != '_' && z[i] != '-')
                return al_error_set(err, -EINVAL, "IPv6 zone id has invalid characters");
        memcpy(out->zone, z, zl);
        out->zone[zl] = '\0';
    }
    out->kind = POLICY_HOST_ADDR;
    addr__from_v6(b, &out->addr);
    policy_addr_format(&out->addr, out->text, sizeof out->text);
    out->len = strlen(out->text);
    return 0;
}

/* ---- names ---------------------------------------------------------------------------- */

enum {
    SC_LATIN = 1u << 0,
    SC_GREEK = 1u << 1,
    SC_CYRILLIC = 1u << 2,
    SC_ARMENIAN = 1u << 3,
    SC_HEBREW = 1u << 4,
    SC_ARABIC = 1u << 5,
    SC_INDIC = 1u << 6,
    SC_THAI = 1u << 7,
    SC_GEORGIAN = 1u << 8,
    SC_HANGUL = 1u << 9,
    SC_HAN = 1u << 10,
    SC_HIRAGANA = 1u << 11,
    SC_KATAKANA = 1u << 12,
    SC_BOPOMOFO = 1u << 13,
    SC_ETHIOPIC = 1u << 14,
    SC_OTHER = 1u << 15,
};

struct name__script_range {
    uint32_t lo, hi;
    unsigned script; /* 0 = common or inherited (ignored) */
};

/* Enough of Unicode's Scripts.txt to catch mixed-script labels (Chrome's "highly
 * restrictive" profile). Code points not listed count as one "other" script per 128-code-
 * point block, so two unknown blocks, or an unknown block next to a known script, are
 * treated as a mix. */
static const struct name__script_range name__scripts[] = {
    {0x30, 0x39, 0},
    {0x2d, 0x2d, 0},
    {0x61, 0x7a, SC_LATIN},
    {0xaa, 0xaa, SC_LATIN},
    {0xb7, 0xb7, 0},
    {0xba, 0xba, SC_LATIN},
    {0xc0, 0x24f, SC_LATIN},
    {0x250, 0x2af, SC_LATIN},
    {0x2b0, 0x2ff, 0},
    {0x300, 0x36f, 0},
    {0x370, 0x3ff, SC_GREEK},
    {0x400, 0x52f, SC_CYRILLIC},
    {0x530, 0x58f, SC_ARMENIAN},
    {0x590, 0x5ff, SC_HEBREW},
    {0x600, 0x6ff, SC_ARABIC},
    {0x750, 0x77f, SC_ARABIC},
    {0x8a0, 0x8ff, SC_ARABIC},
    {0x900, 0xdff, SC_INDIC},
    {0xe00, 0xeff, SC_THAI},
    {0x10a0, 0x10ff, SC_GEORGIAN},
    {0x1100, 0x11ff, SC_HANGUL},
    {0x1200, 0x139f, SC_ETHIOPIC},
    {0x1ab0, 0x1aff, 0},
    {0x1c80, 0x1c8f, SC_CYRILLIC},
    {0x1d00, 0x1d7f, SC_LATIN},
    {0x1dc0, 0x1dff, 0},
    {0x1e00, 0x1eff, SC_LATIN},
    {0x1f00, 0x1fff, SC_GREEK},
    {0x200c, 0x200d, 0},
    {0x20d0, 0x20ff, 0},
    {0x2c60, 0x2c7f, SC_LATIN},
    {0x2d00, 0x2d2f, SC_GEORGIAN},
    {0x2de0, 0x2dff, SC_CYRILLIC},
    {0x2e80, 0x2fdf, SC_HAN},
    {0x3000, 0x3004, 0},
    {0x3005, 0x3007, SC_HAN},
    {0x3021, 0x3029, SC_HAN},
    {0x3038, 0x303b, SC_HAN},
    {0x3040, 0x309f, SC_HIRAGANA},
    {0x30a0, 0x30fb, SC_KATAKANA},
    {0x30fc, 0x30fc, 0},
    {0x30fd, 0x30ff, SC_KATAKANA},
    {0x3100, 0x312f, SC_BOPOMOFO},
    {0x3130, 0x318f, SC_HANGUL},
    {0x31a0, 0x31bf, SC_BOPOMOFO},
    {0x31f0, 0x31ff, SC_KATAKANA},
    {0x3400, 0x4dbf, SC_HAN},
    {0x4e00, 0x9fff, SC_HAN},
    {0xa640, 0xa69f, SC_CYRILLIC},
    {0xa720, 0xa7ff, SC_LATIN},
    {0xa960, 0xa97f, SC_HANGUL},
    {0xab30, 0xab6f, SC_LATIN},
    {0xac00, 0xd7ff, SC_HANGUL},
    {0xf900, 0xfaff, SC_HAN},
    {0xfb50, 0xfdff, SC_ARABIC},
    {0xfe00, 0xfe0f, 0},
    {0xfe20, 0xfe2f, 0},
    {0xfe70, 0xfeff, SC_ARABIC},
    {0x20000, 0x3ffff, SC_HAN},
};

static unsigned name__script_of(uint32_t cp)
{
    for (size_t i = 0; i < sizeof name__scripts / sizeof name__scripts[0]; i++)
        if (cp >= name__scripts[i].lo && cp <= name__scripts[i].hi)
            return name__scripts[i].script;
    return SC_OTHER;
}

/* Checks one label in Unicode (UTF-8) for a mix of scripts a reader could confuse. */
static bool name__single_script(const char *u)
{
    unsigned mask = 0;
    uint32_t other_block = UINT32_MAX;
    const unsigned char *s = (const unsigned char *)u;
    while (*s) {
        uint32_t cp;
        size_t n;
        if (*s < 0x80) {
            cp = *s;
            n = 1;
        } else if ((*s & 0xe0) == 0xc0 && (s[1] & 0xc0) == 0x80) {
            cp = ((uint32_t)(*s & 0x1f) << 6) | (s[1] & 0x3f);
            n = 2;
        } else if ((*s & 0xf0) == 0xe0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80) {
            cp = ((uint32_t)(*s & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
            n = 3;
        } else if ((*s & 0xf8) == 0xf0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
                   (s[3] & 0xc0) == 0x80) {
            cp = ((uint32_t)(*s & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
                 ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
            n = 4;
        } else {
            return false;
        }
        s += n;
        unsigned sc = name__script_of(cp);
        if (sc == SC_OTHER) {
            if (other_block != UINT32_MAX && other_block != cp >> 7)
                return false;
            other_block = cp >> 7;
        }
        mask |= sc;
    }
    if ((mask & (mask - 1)) == 0)
        return true; /* zero or one script */
    if (mask & SC_OTHER)
        return false;
    static const unsigned ok[] = {
        SC_LATIN | SC_HAN | SC_HIRAGANA | SC_KATAKANA, /* Japanese */
        SC_LATIN | SC_HAN | SC_BOPOMOFO,               /* Chinese */
        SC_LATIN | SC_HAN | SC_HANGUL,                 /* Korean */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if ((mask & ~ok[i]) == 0)
            return true;
    return false;
}

/* An xn-- label must be a valid A-label: it decodes, re-encodes to itself (no fake or
 * non-canonical punycode), and its Unicode form is not a mix of scripts. */
static int name__check_alabel(const char *label, size_t len, const char *name, struct al_error *err)
{
    char a[POLICY_LABEL_MAX + 1];
    memcpy(a, label, len);
    a[len] = '\0';
    char *u = NULL, *back = NULL;
    int rc = idn2_to_unicode_8z8z(a, &u, 0);
    if (rc != IDN2_OK || !u || !*u) {
        free(u);
        return al_error_set(err, -EINVAL, "label '%s' of '%s' is not valid punycode", a, name);
    }
    rc = idn2_to_ascii_8z(u, &back, IDN2_NONTRANSITIONAL | IDN2_NFC_INPUT);
    bool same = rc == IDN2_OK && back && strcmp(back, a) == 0;
    free(back);
    if (!same) {
        free(u);
        return al_error_set(err, -EINVAL,
                            "label '%s' of '%s' is not a valid IDNA A-label (it does not "
                            "round-trip through IDNA 2008/UTS-46)",
                            a, name);
    }
    if (!name__single_script(u)) {
        al_error_set(err, -EINVAL,
                     "label '%s' ('%s') of '%s' mixes scripts (e.g. Latin with Cyrillic or "
                     "Greek), a homograph risk; such names are refused",
                     a, u, name);
        free(u);
        return -EINVAL;
    }
    free(u);
    return 0;
}

/* Validates and stores an ASCII name: lower case, one trailing dot stripped, LDH labels. */
static int name__ascii(const char *s, size_t len, struct policy_host *out, struct al_error *err)
{
    if (len && s[len - 1] == '.')
        len--;
    if (len == 0)
        return al_error_set(err, -EINVAL, "empty host name");
    if (len > POLICY_NAME_MAX)
        return al_error_set(err, -EINVAL, "host name is %zu characters, longer than %d", len,
                            POLICY_NAME_MAX);
    char *t = out->text;
    for (size_t i = 0; i < len; i++)
        t[i] = (char)tolower((unsigned char)s[i]);
    t[len] = '\0';
    if (name__ends_in_number(t, len)) {
        uint8_t b[4];
        if (!name__parse_v4(t, len, b))
            return al_error_set(err, -EINVAL,
                                "'%s' ends in a number but is not a valid IPv4 address", t);
        out->kind = POLICY_HOST_ADDR;
        memset(&out->addr, 0, sizeof out->addr);
        out->addr.family = AF_INET;
        memcpy(out->addr.bytes, b, 4);
        policy_addr_format(&out->addr, out->text, sizeof out->text);
        out->len = strlen(out->text);
        return 0;
    }
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && t[i] != '.') {
            char c = t[i];
            if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')
                continue;
            if (c == '_')
                return al_error_set(err, -EINVAL,
                                    "'%s' contains an underscore: host names use letters, "
                                    "digits and hyphens only",
                                    t);
            if (c == '*')
                return al_error_set(err, -EINVAL, "'%s' contains a wildcard '*'", t);
            return al_error_set(err, -EINVAL, "'%s' contains the character '%c' (0x%02x)", t,
                                isprint((unsigned char)c) ? c : '?', (unsigned char)c);
        }
        size_t ll = i - start;
        if (ll == 0)
            return al_error_set(err, -EINVAL, "'%s' has an empty label ('..' or a leading dot)",
                                s[0] == '.' || len == 0 ? t : t);
        if (ll > POLICY_LABEL_MAX)
            return al_error_set(err, -EINVAL, "'%s' has a label longer than %d characters", t,
                                POLICY_LABEL_MAX);
        if (t[start] == '-' || t[i - 1] == '-')
            return al_error_set(err, -EINVAL, "'%s' has a label that starts or ends with '-'", t);
        if (ll >= 4 && memcmp(t + start, "xn--", 4) == 0) {
            int rc = name__check_alabel(t + start, ll, t, err);
            if (rc)
                return rc;
        }
        start = i + 1;
    }
    out->kind = POLICY_HOST_NAME;
    out->len = len;
    return 0;
}

int policy_host_canon(const char *in, size_t len, struct policy_host *out, struct al_error *err)
{
    memset(out, 0, offsetof(struct policy_host, text));
    out->text[0] = '\0';
    out->zone[0] = '\0';
    memset(&out->addr, 0, sizeof out->addr);
    if (!in || len == 0)
        return al_error_set(err, -EINVAL, "empty host");
    if (len > NAME__RAW_MAX)
        return al_error_set(err, -EINVAL, "host is %zu bytes, far longer than any valid name", len);
    bool nonascii = false, colon = false;
    size_t dots = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c < 0x21 || c == 0x7f)
            return al_error_set(err, -EINVAL,
                                "host contains a control character, space or NUL (0x%02x)", c);
        nonascii |= c >= 0x80;
        colon |= c == ':';
        dots += c == '.';
    }
    if (in[0] == '[') {
        if (len < 3 || in[len - 1] != ']')
            return al_error_set(err, -EINVAL, "'[' without a matching ']' in host");
        return name__parse_v6(in + 1, len - 2, out, err);
    }
    if (colon) {
        const char *c1 = memchr(in, ':', len);
        if (memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - in)))
            return name__parse_v6(in, len, out, err); /* two colons: meant as IPv6 */
        return al_error_set(err, -EINVAL,
                            "'%.*s' contains ':' but is not an IPv6 address (give the port "
                            "separately)",
                            (int)len, in);
    }
    if (!nonascii)
        return name__ascii(in, len, out, err);

    /* Unicode: UTS-46 non-transitional mapping and IDNA 2008 via libidn2. Characters that
     * UTS-46 would turn into a label separator (ideographic and full-width full stops, ...)
     * are refused: a name must say where its labels end in ASCII. */
    char u[NAME__RAW_MAX + 1];
    memcpy(u, in, len);
    u[len] = '\0';
    char *a = NULL;
    int rc = idn2_to_ascii_8z(u, &a, IDN2_NONTRANSITIONAL | IDN2_NFC_INPUT);
    if (rc != IDN2_OK || !a) {
        free(a);
        return al_error_set(err, -EINVAL, "'%s' is not a valid internationalised name: %s", u,
                            idn2_strerror(rc));
    }
    size_t alen = strlen(a), adots = 0;
    for (size_t i = 0; i < alen; i++)
        adots += a[i] == '.';
    if (adots != dots) {
        free(a);
        return al_error_set(err, -EINVAL,
                            "'%s' contains a full-width or ideographic dot (or another character "
                            "that stands for '.'); write labels separated by ASCII '.'",
                            u);
    }
    if (alen > NAME__RAW_MAX) {
        free(a);
        return al_error_set(err, -EINVAL, "host name is too long");
    }
    char buf[NAME__RAW_MAX + 1];
    memcpy(buf, a, alen + 1);
    free(a);
    rc = name__ascii(buf, alen, out, err);
    if (rc == 0 && out->kind == POLICY_HOST_NAME) {
        /* Every converted label was checked as an A-label above; a Unicode label that maps
         * to plain ASCII (full-width letters) is accepted as that ASCII. */
    }
    return rc;
}

/* ---- patterns ------------------------------------------------------------------------- */

static bool name__glob_match(const char *g, size_t gl, const char *s, size_t sl)
{
    size_t gi = 0, si = 0, star = SIZE_MAX, mark = 0;
    while (si < sl) {
        if (gi < gl && g[gi] == '*') {
            star = gi++;
            mark = si;
        } else if (gi < gl && g[gi] == s[si]) {
            gi++;
            si++;
        } else if (star != SIZE_MAX) {
            gi = star + 1;
            si = ++mark;
        } else {
            return false;
        }
    }
    while (gi < gl && g[gi] == '*')
        gi++;
    return gi == gl;
}

bool policy__glob_label_match(const char *glob, size_t gl, const char *label, size_t ll)
{
    return name__glob_match(glob, gl, label, ll);
}

int policy_pattern_canon(const char *in, size_t len, struct policy_pattern *out,
                         struct al_error *err)
{
    memset(out, 0, sizeof *out);
    if (!in || len == 0)
        return al_error_set(err, -EINVAL, "empty host pattern");
    const char *star = memchr(in, '*', len);
    struct policy_host h;
    if (!star) {
        int rc = policy_host_canon(in, len, &h, err);
        if (rc)
            return rc;
        if (h.kind != POLICY_HOST_NAME)
            return al_error_set(err, -EINVAL,
                                "'%s' is an IP address, not a host name: open addresses with "
                                "cidrs: [%s/%d]",
                                h.text, h.text, h.addr.family == AF_INET ? 32 : 128);
        out->kind = POLICY_PATTERN_EXACT;
        memcpy(out->text, h.text, h.len + 1);
        out->base = out->text;
        return 0;
    }
    const char *dot = memchr(in, '.', len);
    if (!dot)
        return al_error_set(err, -EINVAL,
                            "'%.*s' would match every name: a wildcard needs a domain after it, "
                            "e.g. *.example.com",
                            (int)len, in);
    size_t ll = (size_t)(dot - in);
    if (memchr(dot, '*', len - ll))
        return al_error_set(err, -EINVAL,
                            "'%.*s': a wildcard may only be the leftmost label (*.example.com, "
                            "**.example.com or api-*.example.com)",
                            (int)len, in);
    int rc = policy_host_canon(dot + 1, len - ll - 1, &h, err);
    if (rc)
        return al_error_prefix(err, "after the wildcard in '%.*s'", (int)len, in);
    if (h.kind != POLICY_HOST_NAME)
        return al_error_set(err, -EINVAL, "'%.*s': wildcards apply to names, not addresses",
                            (int)len, in);
    if (ll == 1) {
        out->kind = POLICY_PATTERN_ONE;
    } else if (ll == 2 && in[1] == '*') {
        out->kind = POLICY_PATTERN_ANY;
    } else {
        if (ll > POLICY_LABEL_MAX)
            return al_error_set(err, -EINVAL, "'%.*s': the wildcard label is too long", (int)len,
                                in);
        bool prev_star = false;
        for (size_t i = 0; i < ll; i++) {
            char c = (char)tolower((unsigned char)in[i]);
            if (c == '*') {
                if (prev_star)
                    return al_error_set(err, -EINVAL,
                                        "'%.*s': '**' is only allowed as a whole label "
                                        "(**.example.com)",
                                        (int)len, in);
                prev_star = true;
            } else {
                prev_star = false;
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
                    return al_error_set(err, -EINVAL,
                                        "'%.*s': the wildcard label may contain only letters, "
                                        "digits, '-' and '*'",
                                        (int)len, in);
            }
            out->glob[i] = c;
        }
        out->glob[ll] = '\0';
        out->kind = POLICY_PATTERN_GLOB;
    }
    size_t pl = out->kind == POLICY_PATTERN_GLOB ? ll : out->kind == POLICY_PATTERN_ANY ? 2 : 1;
    if (pl + 1 + h.len > POLICY_NAME_MAX)
        return al_error_set(err, -EINVAL, "'%.*s' is too long", (int)len, in);
    if (out->kind == POLICY_PATTERN_GLOB)
        memcpy(out->text, out->glob, ll);
    else
        memcpy(out->text, "**", pl);
    out->text[pl] = '.';
    memcpy(out->text + pl + 1, h.text, h.len + 1);
    out->base = out->text + pl + 1;
    return 0;
}

bool policy_pattern_match(const struct policy_pattern *p, const char *name, size_t len)
{
    size_t bl = strlen(p->base);
    if (p->kind == POLICY_PATTERN_EXACT)
        return len == bl && memcmp(name, p->base, len) == 0;
    if (len < bl + 2 || name[len - bl - 1] != '.' || memcmp(name + len - bl, p->base, bl) != 0)
        return false;
    size_t pre = len - bl - 1; /* the labels left of the base */
    if (p->kind == POLICY_PATTERN_ANY)
        return true;
    if (memchr(name, '.', pre))
        return false;
    if (p->kind == POLICY_PATTERN_ONE)
        return true;
    return name__glob_match(p->glob, strlen(p->glob), name, pre);
}

/* ---- vault bound hosts ------------------------------------------------------------------ */

int policy_bound_host_canon(const char *in, size_t len, bool psl,
                            char out[POLICY_BOUND_HOST_MAX + 1], struct al_error *err)
{
    out[0] = '\0';
    if (!in || len == 0)
        return al_error_set(err, -EINVAL, "empty bound host");
    if (!memchr(in, '*', len)) {
        struct policy_host h;
        int rc = policy_host_canon(in, len, &h, err);
        if (rc)
            return rc;
        if (h.kind == POLICY_HOST_ADDR) {
            if (h.zone[0])
                return al_error_set(err, -EINVAL,
                                    "'%.*s': an IPv6 zone id has no meaning for a bound host; "
                                    "give the address alone",
                                    (int)len, in);
            memcpy(out, h.text, h.len + 1);
            return 0;
        }
    }
    struct policy_pattern pat;
    int rc = policy_pattern_canon(in, len, &pat, err);
    if (rc)
        return rc;
    if (psl && pat.kind == POLICY_PATTERN_EXACT && policy__is_public_suffix(pat.base, true))
        return al_error_set(err, -EINVAL,
                            "bound host is the public suffix %s (a top-level or registry domain "
                            "such as com or co.uk), not a host (rule public_suffix): name the "
                            "host itself",
                            pat.base);
    if (psl && pat.kind != POLICY_PATTERN_EXACT &&
        (policy__is_public_suffix(pat.base, true) || policy__is_public_suffix(pat.base, false)))
        return al_error_set(err, -EINVAL,
                            "a wildcard bound host over the public suffix %s would release the "
                            "secret to every site registered under it (rule "
                            "wildcard_public_suffix): bind the secret to exact hosts, or to a "
                            "wildcard under a registrable domain (e.g. *.example.%s)",
                            pat.base, pat.base);
    size_t tl = strlen(pat.text);
    if (tl > POLICY_BOUND_HOST_MAX)
        return al_error_set(err, -EINVAL, "bound host is too long");
    memcpy(out, pat.text, tl + 1);
    return 0;
}

bool policy_bound_host_match(const char *const *bound, size_t n, const char *host, size_t len)
{
    struct policy_host h;
    if (n == 0 || !host || policy_host_canon(host, len, &h, NULL) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        const char *b = bound[i];
        if (!b || !*b)
            continue;
        if (h.kind == POLICY_HOST_ADDR) {
            /* Entries are canonical: an address entry is its canonical text. */
            if (!strchr(b, '*') && strcmp(b, h.text) == 0)
                return true;
            continue;
        }
        struct policy_pattern pat;
        if (policy_pattern_canon(b, strlen(b), &pat, NULL) != 0)
            continue; /* an address entry (or one this build cannot read): never a name's */
        if (policy_pattern_match(&pat, h.text, h.len))
            return true;
    }
    return false;
}

/* ---- secret names --------------------------------------------------------------------- */

bool policy_secret_name_valid(const char *name, size_t len)
{
    if (!name || len == 0 || len > 128)
        return false;
    size_t seg = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || name[i] == '/') {
            size_t sl = i - seg;
            if (sl == 0 || name[seg] == '.')
                return false; /* empty, ".", "..", or hidden segments */
            seg = i + 1;
            continue;
        }
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- CIDRs ---------------------------------------------------------------------------- */

bool policy__cidr_contains(const struct policy__cidr *c, const struct policy_addr *a)
{
    if (c->net.family != a->family)
        return false;
    return addr__in(a->bytes, c->net.bytes, c->bits);
}

const char *policy__cidr_format(const struct policy__cidr *c, char *buf, size_t len)
{
    char a[64];
    policy_addr_format(&c->net, a, sizeof a);
    snprintf(buf, len, "%s/%u", a, c->bits);
    return buf;
}

int policy__cidr_parse(const char *s, struct policy__cidr *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    char buf[64];
    size_t len = strlen(s);
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : len;
    if (alen == 0 || alen >= sizeof buf)
        return al_error_set(err, -EINVAL, "'%s' is not a CIDR (write e.g. 10.20.0.0/16)", s);
    memcpy(buf, s, alen);
    buf[alen] = '\0';
    uint8_t b[16];
    unsigned maxbits;
    if (inet_pton(AF_INET, buf, b) == 1) {
        out->net.family = AF_INET;
        memcpy(out->net.bytes, b, 4);
        maxbits = 32;
    } else if (inet_pton(AF_INET6, buf, b) == 1) {
        addr__from_v6(b, &out->net);
        maxbits = out->net.family == AF_INET ? 32 : 128;
    } else {
        return al_error_set(err, -EINVAL,
                            "'%s' is not an IP address: write a dotted quad (10.20.0.5) or an "
                            "IPv6 address, with an optional /prefix",
                            buf);
    }
    unsigned bits = maxbits;
    if (slash) {
        const char *p = slash + 1;
        size_t pl = strlen(p);
        if (pl == 0 || pl > 3 || strspn(p, "0123456789") != pl || (pl > 1 && p[0] == '0'))
            return al_error_set(err, -EINVAL, "'%s': the prefix length must be a number", s);
        bits = (unsigned)atoi(p);
        bool mapped = maxbits == 32 && strchr(buf, ':');
        if (mapped) {
            if (bits < 96 || bits > 128)
                return al_error_set(err, -EINVAL,
                                    "'%s': prefix out of range for an "
                                    "IPv4-mapped address",
                                    s);
            bits -= 96;
        }
        if (bits > maxbits)
            return al_error_set(err, -EINVAL, "'%s': the prefix length must be 0..%u", s, maxbits);
    }
    out->bits = (uint8_t)bits;
    struct policy__cidr masked = *out;
    for (unsigned i = 0; i < 16; i++) {
        unsigned lo = i * 8;
        if (lo >= bits)
            masked.net.bytes[i] = 0;
        else if (lo + 8 > bits)
            masked.net.bytes[i] &= (uint8_t)(0xff << (8 - (bits - lo)));
    }
    if (memcmp(masked.net.bytes, out->net.bytes, 16) != 0) {
        char sug[80];
        policy__cidr_format(&masked, sug, sizeof sug);
        return al_error_set(err, -EINVAL,
                            "'%s' has bits set beyond the /%u prefix: did you mean %s (the "
                            "network) or %s/%u (one address)?",
                            s, bits, sug, buf, maxbits);
    }
    return 0;
}

/* The first internal or special range that a CIDR overlaps (its reason), or NULL; sets
 * *metadata when the CIDR contains a cloud metadata address. */
const char *policy__cidr_internal_overlap(const struct policy__cidr *c, bool *metadata)
{
    const struct addr__range *t = c->net.family == AF_INET ? addr__v4 : addr__v6;
    size_t n = c->net.family == AF_INET ? sizeof addr__v4 / sizeof addr__v4[0]
                                        : sizeof addr__v6 / sizeof addr__v6[0];
    const char *first = NULL;
    *metadata = false;
    for (size_t i = 0; i < n; i++) {
        if (t[i].cls == POLICY_ADDR_DOCUMENTATION || t[i].cls == POLICY_ADDR_PUBLIC)
            continue;
        unsigned bits = c->bits < t[i].bits ? c->bits : t[i].bits;
        if (!addr__in(c->net.bytes, t[i].prefix, bits))
            continue;
        if (t[i].cls == POLICY_ADDR_METADATA)
            *metadata = true;
        else if (!first)
            first = t[i].reason;
    }
    if (!first && c->net.family == AF_INET6) {
        struct policy_addr_info info;
        policy_addr_classify(&c->net, &info);
        if (info.internal)
            first = info.reason;
    }
    return first;
}
