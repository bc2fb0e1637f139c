/* egress/dns_wire: see dns_wire.h. */
#include "dns_wire.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DNS_CLASS_IN  1
#define DNS_MAX_JUMPS 32
#define DNS_MAX_CHAIN 8
#define DNS_MAX_RRS   64

static uint16_t dns__be16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t dns__be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void dns__put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void dns__put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint8_t dns__lower(uint8_t c)
{
    return (c >= 'A' && c <= 'Z') ? (uint8_t)(c + 32) : c;
}

/* Reads a (possibly compressed) name at *off into flat wire form. Pointers must point
 * strictly backwards (no loops), at most DNS_MAX_JUMPS of them. *off moves past the name
 * as it appears at the original position. */
static int dns__read_name(const uint8_t *msg, size_t len, size_t *off, uint8_t *out,
                          size_t *out_len)
{
    size_t pos = *off, n = 0, jumps = 0, after = 0;
    bool jumped = false;
    for (;;) {
        if (pos >= len)
            return DNS_E_SHORT;
        uint8_t b = msg[pos];
        if ((b & 0xc0) == 0xc0) {
            if (pos + 1 >= len)
                return DNS_E_SHORT;
            size_t target = ((size_t)(b & 0x3f) << 8) | msg[pos + 1];
            if (target >= pos || ++jumps > DNS_MAX_JUMPS)
                return DNS_E_FORMAT;
            if (!jumped) {
                after = pos + 2;
                jumped = true;
            }
            pos = target;
            continue;
        }
        if (b & 0xc0)
            return DNS_E_FORMAT; /* extended label types */
        if (n + 1 + b > DNS_MAX_NAME)
            return DNS_E_FORMAT;
        if (pos + 1 + b > len)
            return DNS_E_SHORT;
        memcpy(out + n, msg + pos, 1 + (size_t)b);
        n += 1 + (size_t)b;
        pos += 1 + (size_t)b;
        if (b == 0)
            break;
    }
    *out_len = n;
    *off = jumped ? after : pos;
    return DNS_OK;
}

static bool dns__name_eq(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    if (alen != blen)
        return false;
    for (size_t i = 0; i < alen; i++)
        if (dns__lower(a[i]) != dns__lower(b[i]))
            return false;
    return true;
}

/* Wire name (already validated) to lowercase text. */
static void dns__name_text(const uint8_t *w, size_t wlen, struct dns_query *q)
{
    size_t o = 0, i = 0;
    q->qname_ldh = true;
    q->n_labels = 0;
    q->longest_label = 0;
    while (i < wlen && w[i]) {
        size_t l = w[i++];
        if (q->n_labels++)
            q->qname[o++] = '.';
        if (l > q->longest_label)
            q->longest_label = l;
        for (size_t k = 0; k < l; k++, i++) {
            uint8_t c = dns__lower(w[i]);
            bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
            if (!ok)
                q->qname_ldh = false;
            q->qname[o++] = ok ? (char)c : '?';
        }
    }
    q->qname[o] = 0;
}

int dns_parse_query(const uint8_t *msg, size_t len, struct dns_query *q)
{
    memset(q, 0, sizeof *q);
    q->edns_udp_size = 512;
    if (len >= 2)
        q->id = dns__be16(msg);
    if (len >= 4) {
        q->flags = dns__be16(msg + 2);
        q->rd = (q->flags & 0x0100) != 0;
        q->opcode = (uint8_t)((q->flags >> 11) & 0xf);
    }
    if (len < DNS_HEADER_LEN)
        return DNS_E_SHORT;
    if (q->flags & 0x8000)
        return DNS_E_NOT_QUERY;
    if (q->opcode != 0)
        return DNS_E_NOTIMP;
    uint16_t qd = dns__be16(msg + 4), an = dns__be16(msg + 6), ns = dns__be16(msg + 8),
             ar = dns__be16(msg + 10);
    if (qd != 1 || an != 0 || ns != 0 || ar > 1)
        return DNS_E_FORMAT;

    /* The question name: no compression (nothing before it to point at). */
    size_t pos = DNS_HEADER_LEN, n = 0;
    for (;;) {
        if (pos >= len)
            return DNS_E_FORMAT;
        uint8_t b = msg[pos];
        if (b & 0xc0)
            return DNS_E_FORMAT;
        if (n + 1 + b > DNS_MAX_NAME || pos + 1 + b > len)
            return DNS_E_FORMAT;
        memcpy(q->qname_wire + n, msg + pos, 1 + (size_t)b);
        n += 1 + (size_t)b;
        pos += 1 + (size_t)b;
        if (b == 0)
            break;
    }
    q->qname_wire_len = n;
    dns__name_text(q->qname_wire, n, q);
    if (pos + 4 > len)
        return DNS_E_FORMAT;
    q->qtype = dns__be16(msg + pos);
    q->qclass = dns__be16(msg + pos + 2);
    pos += 4;

    if (ar == 1) {
        /* Only an OPT pseudo-record is acceptable: root owner, type 41. */
        if (pos + 11 > len || msg[pos] != 0 || dns__be16(msg + pos + 1) != DNS_T_OPT)
            return DNS_E_FORMAT;
        uint16_t udp = dns__be16(msg + pos + 3);
        uint32_t ttl = dns__be32(msg + pos + 5);
        uint16_t rdlen = dns__be16(msg + pos + 9);
        pos += 11;
        if (pos + rdlen > len)
            return DNS_E_FORMAT;
        /* Options are a sequence of (code, length, data); check they tile rdata. */
        size_t o = pos, end = pos + rdlen;
        while (o < end) {
            if (o + 4 > end)
                return DNS_E_FORMAT;
            size_t olen = dns__be16(msg + o + 2);
            if (o + 4 + olen > end)
                return DNS_E_FORMAT;
            o += 4 + olen;
        }
        pos = end;
        q->has_edns = true;
        q->edns_version = (uint8_t)(ttl >> 16);
        q->edns_udp_size = udp < 512 ? 512 : (udp > DNS_MAX_UDP ? DNS_MAX_UDP : udp);
        if (q->edns_version != 0)
            return DNS_E_FORMAT;
    }
    if (pos != len)
        return DNS_E_FORMAT; /* trailing bytes */
    q->len = pos;
    return DNS_OK;
}

struct dns__rr {
    size_t owner_off;
    uint16_t type;
    uint32_t ttl;
    size_t rdata_off;
    uint16_t rdlen;
};

static int dns__read_rr(const uint8_t *msg, size_t len, size_t *pos, struct dns__rr *rr,
                        uint16_t *class_out)
{
    uint8_t scratch[DNS_MAX_NAME];
    size_t sl;
    rr->owner_off = *pos;
    int rc = dns__read_name(msg, len, pos, scratch, &sl);
    if (rc < 0)
        return rc;
    if (*pos + 10 > len)
        return DNS_E_SHORT;
    rr->type = dns__be16(msg + *pos);
    *class_out = dns__be16(msg + *pos + 2);
    rr->ttl = dns__be32(msg + *pos + 4);
    if (rr->ttl > 0x7fffffff)
        rr->ttl = 0; /* RFC 2181 8: a TTL with the top bit set is treated as zero */
    rr->rdlen = dns__be16(msg + *pos + 8);
    *pos += 10;
    if (*pos + rr->rdlen > len)
        return DNS_E_SHORT;
    rr->rdata_off = *pos;
    *pos += rr->rdlen;
    return DNS_OK;
}

int dns_parse_answer(const uint8_t *msg, size_t len, const struct dns_question *q,
                     struct dns_answer *ans)
{
    memset(ans, 0, sizeof *ans);
    if (len < DNS_HEADER_LEN)
        return DNS_E_SHORT;
    ans->id = dns__be16(msg);
    uint16_t flags = dns__be16(msg + 2);
    if (ans->id != q->id || !(flags & 0x8000) || ((flags >> 11) & 0xf) != 0)
        return DNS_E_MISMATCH;
    ans->rcode = (uint8_t)(flags & 0xf);
    ans->truncated = (flags & 0x0200) != 0;
    uint16_t qd = dns__be16(msg + 4), an = dns__be16(msg + 6), ns = dns__be16(msg + 8);
    size_t pos = DNS_HEADER_LEN;
    uint8_t name[DNS_MAX_NAME];
    size_t nl;
    if (qd == 0 && ans->rcode != DNS_R_NOERROR)
        return DNS_OK; /* an error without the question echoed: accept the rcode only */
    if (qd != 1)
        return DNS_E_MISMATCH;
    int rc = dns__read_name(msg, len, &pos, name, &nl);
    if (rc < 0)
        return rc;
    if (pos + 4 > len)
        return DNS_E_SHORT;
    if (!dns__name_eq(name, nl, q->qname_wire, q->qname_wire_len) ||
        dns__be16(msg + pos) != q->qtype || dns__be16(msg + pos + 2) != DNS_CLASS_IN)
        return DNS_E_MISMATCH;
    pos += 4;
    if (ans->truncated)
        return DNS_OK;

    struct dns__rr rrs[DNS_MAX_RRS];
    size_t n_rr = 0;
    for (size_t i = 0; i < an; i++) {
        struct dns__rr rr;
        uint16_t cls;
        rc = dns__read_rr(msg, len, &pos, &rr, &cls);
        if (rc < 0)
            return rc == DNS_E_SHORT ? DNS_E_FORMAT : rc;
        if (cls != DNS_CLASS_IN || n_rr == DNS_MAX_RRS) {
            ans->n_ignored++;
            continue;
        }
        rrs[n_rr++] = rr;
    }

    /* Follow the CNAME chain from our name, then collect the addresses of its end. */
    uint8_t cur[DNS_MAX_NAME];
    size_t cl = q->qname_wire_len;
    memcpy(cur, q->qname_wire, cl);
    uint32_t min_ttl = UINT32_MAX;
    bool used[DNS_MAX_RRS] = {false};
    for (bool moved = true; moved;) {
        moved = false;
        for (size_t i = 0; i < n_rr; i++) {
            if (used[i] || rrs[i].type != DNS_T_CNAME)
                continue;
            size_t o = rrs[i].owner_off;
            if (dns__read_name(msg, len, &o, name, &nl) < 0 || !dns__name_eq(name, nl, cur, cl))
                continue;
            if (++ans->n_cnames > DNS_MAX_CHAIN)
                return DNS_E_FORMAT;
            size_t r = rrs[i].rdata_off;
            rc = dns__read_name(msg, len, &r, name, &nl);
            if (rc < 0 || r != rrs[i].rdata_off + rrs[i].rdlen)
                return DNS_E_FORMAT;
            memcpy(cur, name, nl);
            cl = nl;
            used[i] = true;
            if (rrs[i].ttl < min_ttl)
                min_ttl = rrs[i].ttl;
            moved = true;
        }
    }
    for (size_t i = 0; i < n_rr; i++) {
        if (used[i])
            continue;
        size_t o = rrs[i].owner_off;
        bool want = (rrs[i].type == q->qtype) && (q->qtype == DNS_T_A || q->qtype == DNS_T_AAAA);
        if (!want || dns__read_name(msg, len, &o, name, &nl) < 0 ||
            !dns__name_eq(name, nl, cur, cl)) {
            ans->n_ignored++;
            continue;
        }
        size_t alen = q->qtype == DNS_T_A ? 4 : 16;
        if (rrs[i].rdlen != alen)
            return DNS_E_FORMAT;
        if (ans->n_addrs == DNS_MAX_ANSWERS) {
            ans->n_dropped++;
            continue;
        }
        struct dns_addr *a = &ans->addrs[ans->n_addrs++];
        a->family = q->qtype == DNS_T_A ? 4 : 6;
        memset(a->addr, 0, sizeof a->addr);
        memcpy(a->addr, msg + rrs[i].rdata_off, alen);
        a->ttl = rrs[i].ttl;
        if (a->ttl < min_ttl)
            min_ttl = a->ttl;
    }
    ans->min_ttl = ans->n_addrs ? min_ttl : 0;

    /* Authority: the SOA of a negative answer gives its TTL (RFC 2308). */
    for (size_t i = 0; i < ns; i++) {
        struct dns__rr rr;
        uint16_t cls;
        if (dns__read_rr(msg, len, &pos, &rr, &cls) < 0)
            break; /* the authority section is advisory; stop at the first bad record */
        if (rr.type != DNS_T_SOA || cls != DNS_CLASS_IN)
            continue;
        size_t r = rr.rdata_off;
        if (dns__read_name(msg, len, &r, name, &nl) < 0 ||
            dns__read_name(msg, len, &r, name, &nl) < 0)
            break;
        if (r + 20 != rr.rdata_off + rr.rdlen)
            break;
        uint32_t minimum = dns__be32(msg + r + 16);
        ans->neg_ttl = minimum < rr.ttl ? minimum : rr.ttl;
        break;
    }
    return DNS_OK;
}

static size_t dns__put_header(uint8_t *out, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an,
                              uint16_t ar)
{
    dns__put16(out, id);
    dns__put16(out + 2, flags);
    dns__put16(out + 4, qd);
    dns__put16(out + 6, an);
    dns__put16(out + 8, 0);
    dns__put16(out + 10, ar);
    return DNS_HEADER_LEN;
}

static size_t dns__put_opt(uint8_t *out)
{
    out[0] = 0;
    dns__put16(out + 1, DNS_T_OPT);
    dns__put16(out + 3, DNS_MAX_UDP);
    dns__put32(out + 5, 0);
    dns__put16(out + 9, 0);
    return 11;
}

int dns_build_reply(const struct dns_query *q, const struct dns_reply *r, size_t max_len,
                    uint8_t *out, size_t cap)
{
    if (max_len > cap)
        max_len = cap;
    bool question = q->qname_wire_len > 0;
    size_t fixed = DNS_HEADER_LEN + (question ? q->qname_wire_len + 4 : 0) + (q->has_edns ? 11 : 0);
    if (fixed > max_len)
        return DNS_E_SHORT;
    size_t alen = q->qtype == DNS_T_AAAA ? 16 : 4;
    size_t rr_len = 12 + alen;
    size_t n = 0;
    if (question && (q->qtype == DNS_T_A || q->qtype == DNS_T_AAAA)) {
        for (size_t i = 0; i < r->n_addrs; i++) {
            if (r->addrs[i].family != (alen == 4 ? 4 : 6))
                continue;
            if (fixed + (n + 1) * rr_len > max_len)
                break;
            n++;
        }
    }
    /* QR, opcode 0, RD echoed, RA set. */
    uint16_t flags = (uint16_t)(0x8000 | (q->flags & 0x0100) | 0x0080 | (r->rcode & 0xf));
    size_t pos =
        dns__put_header(out, q->id, flags, question ? 1 : 0, (uint16_t)n, q->has_edns ? 1 : 0);
    if (question) {
        memcpy(out + pos, q->qname_wire, q->qname_wire_len);
        pos += q->qname_wire_len;
        dns__put16(out + pos, q->qtype);
        dns__put16(out + pos + 2, q->qclass);
        pos += 4;
    }
    size_t written = 0;
    for (size_t i = 0; i < r->n_addrs && written < n; i++) {
        if (r->addrs[i].family != (alen == 4 ? 4 : 6))
            continue;
        dns__put16(out + pos, 0xc00c); /* the question name */
        dns__put16(out + pos + 2, q->qtype);
        dns__put16(out + pos + 4, DNS_CLASS_IN);
        dns__put32(out + pos + 6, r->ttl);
        dns__put16(out + pos + 10, (uint16_t)alen);
        memcpy(out + pos + 12, r->addrs[i].addr, alen);
        pos += rr_len;
        written++;
    }
    if (q->has_edns)
        pos += dns__put_opt(out + pos);
    return (int)pos;
}

int dns_build_query(const struct dns_question *q, uint8_t *out, size_t cap)
{
    if (q->qname_wire_len == 0 || q->qname_wire_len > DNS_MAX_NAME ||
        DNS_HEADER_LEN + q->qname_wire_len + 4 + 11 > cap)
        return DNS_E_SHORT;
    size_t pos = dns__put_header(out, q->id, 0x0100, 1, 0, 1);
    memcpy(out + pos, q->qname_wire, q->qname_wire_len);
    pos += q->qname_wire_len;
    dns__put16(out + pos, q->qtype);
    dns__put16(out + pos + 2, DNS_CLASS_IN);
    pos += 4;
    pos += dns__put_opt(out + pos);
    return (int)pos;
}

int dns_name_to_wire(const char *name, uint8_t *out, size_t cap)
{
    size_t n = 0;
    const char *p = name;
    if (*p == 0) {
        if (cap < 1)
            return -1;
        out[0] = 0;
        return 1;
    }
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        if (l == 0 || l > 63 || n + 1 + l + 1 > cap || n + 1 + l + 1 > DNS_MAX_NAME)
            return -1;
        out[n++] = (uint8_t)l;
        memcpy(out + n, p, l);
        n += l;
        if (!dot)
            break;
        p = dot + 1;
    }
    out[n++] = 0;
    return (int)n;
}

const char *dns_type_name(uint16_t type)
{
    switch (type) {
    case DNS_T_A:
        return "A";
    case DNS_T_NS:
        return "NS";
    case DNS_T_CNAME:
        return "CNAME";
    case DNS_T_SOA:
        return "SOA";
    case DNS_T_NULL:
        return "NULL";
    case DNS_T_PTR:
        return "PTR";
    case DNS_T_MX:
        return "MX";
    case DNS_T_TXT:
        return "TXT";
    case DNS_T_AAAA:
        return "AAAA";
    case DNS_T_SRV:
        return "SRV";
    case DNS_T_OPT:
        return "OPT";
    case DNS_T_SVCB:
        return "SVCB";
    case DNS_T_HTTPS:
        return "HTTPS";
    case DNS_T_ANY:
        return "ANY";
    default: {
        static _Thread_local char buf[16];
        snprintf(buf, sizeof buf, "TYPE%u", (unsigned)type);
        return buf;
    }
    }
}

const char *dns_rcode_name(uint8_t rcode)
{
    switch (rcode) {
    case DNS_R_NOERROR:
        return "NOERROR";
    case DNS_R_FORMERR:
        return "FORMERR";
    case DNS_R_SERVFAIL:
        return "SERVFAIL";
    case DNS_R_NXDOMAIN:
        return "NXDOMAIN";
    case DNS_R_NOTIMP:
        return "NOTIMP";
    case DNS_R_REFUSED:
        return "REFUSED";
    default:
        return "RCODE?";
    }
}

double dns_label_entropy(const char *label, size_t len)
{
    if (len == 0)
        return 0;
    unsigned counts[256] = {0};
    for (size_t i = 0; i < len; i++)
        counts[(uint8_t)label[i]]++;
    double h = 0;
    for (size_t i = 0; i < 256; i++) {
        if (!counts[i])
            continue;
        double p = (double)counts[i] / (double)len;
        h -= p * log2(p);
    }
    return h;
}
