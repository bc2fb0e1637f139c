/* egress/dns_wire: the DNS wire format (RFC 1035, EDNS0 RFC 6891), as much as the
 * sandbox resolver needs and no more.
 *
 * Owns: parsing a sandbox's query (one question, strict), parsing an upstream resolver's
 * answer (A/AAAA through a CNAME chain, bounded compression-pointer following), and
 * building our replies and our upstream queries. Bounded, allocation-free, never trusts a
 * length; fuzzed by fuzz_dns.
 */
#ifndef AIRLOCK_EGRESS_DNS_WIRE_H
#define AIRLOCK_EGRESS_DNS_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_HEADER_LEN  12
#define DNS_MAX_NAME    255  /* wire length, RFC 1035 */
#define DNS_MAX_TEXT    254  /* presentation length without a trailing dot */
#define DNS_MAX_UDP     1232 /* what we accept and offer over UDP with EDNS */
#define DNS_MAX_TCP     65535
#define DNS_MAX_ANSWERS 16 /* addresses we keep from one answer */

enum dns_type {
    DNS_T_A = 1,
    DNS_T_NS = 2,
    DNS_T_CNAME = 5,
    DNS_T_SOA = 6,
    DNS_T_NULL = 10,
    DNS_T_PTR = 12,
    DNS_T_MX = 15,
    DNS_T_TXT = 16,
    DNS_T_AAAA = 28,
    DNS_T_SRV = 33,
    DNS_T_OPT = 41,
    DNS_T_SVCB = 64,
    DNS_T_HTTPS = 65,
    DNS_T_ANY = 255,
};

enum dns_rcode {
    DNS_R_NOERROR = 0,
    DNS_R_FORMERR = 1,
    DNS_R_SERVFAIL = 2,
    DNS_R_NXDOMAIN = 3,
    DNS_R_NOTIMP = 4,
    DNS_R_REFUSED = 5,
};

enum dns_status {
    DNS_OK = 0,
    DNS_E_SHORT = -1,     /* truncated message */
    DNS_E_FORMAT = -2,    /* malformed: answer FORMERR if we can */
    DNS_E_NOTIMP = -3,    /* an opcode we do not implement */
    DNS_E_NOT_QUERY = -4, /* QR set: a response where a query was expected */
    DNS_E_MISMATCH = -5,  /* upstream answer does not match our question */
};

/* A sandbox's query. */
struct dns_query {
    uint16_t id;
    uint16_t flags; /* raw header flags */
    bool rd;
    uint8_t opcode;
    uint16_t qtype, qclass;
    uint8_t qname_wire[DNS_MAX_NAME]; /* as sent (case kept), for echoing */
    size_t qname_wire_len;
    char qname[DNS_MAX_TEXT + 1]; /* presentation form, lowercase, no trailing dot;
                                          "" for the root */
    bool qname_ldh;               /* every byte is a letter, digit, '-' or '_' (else the text
                                 has '?' in their place and the name is unusable) */
    size_t n_labels;
    size_t longest_label;
    bool has_edns;
    uint16_t edns_udp_size; /* 512 without EDNS */
    uint8_t edns_version;
    size_t len; /* bytes of the message that were parsed */
};

/* Parses a query. On DNS_E_FORMAT / DNS_E_NOTIMP, q->id (and q->flags) are still set when
 * the header was readable, so that an error reply can be sent. */
int dns_parse_query(const uint8_t *msg, size_t len, struct dns_query *q);

/* What an upstream resolver answered for our question. */
struct dns_addr {
    uint8_t family; /* 4 or 6 */
    uint8_t addr[16];
    uint32_t ttl;
};
struct dns_answer {
    uint16_t id;
    uint8_t rcode;
    bool truncated; /* TC: retry over TCP */
    size_t n_addrs;
    struct dns_addr addrs[DNS_MAX_ANSWERS];
    size_t n_dropped; /* addresses beyond DNS_MAX_ANSWERS */
    uint32_t min_ttl; /* over the chain followed; 0 if no address */
    uint32_t neg_ttl; /* SOA minimum for negative answers (0 if none) */
    size_t n_cnames;  /* CNAME links followed */
    size_t n_ignored; /* records not on the chain or of other types */
};

/* A question we send upstream: its id, name in wire form and type. */
struct dns_question {
    uint16_t id;
    const uint8_t *qname_wire;
    size_t qname_wire_len;
    uint16_t qtype;
};

/* Parses a response to the question q we sent. Only records of class IN on the CNAME chain
 * starting at our name are used. */
int dns_parse_answer(const uint8_t *msg, size_t len, const struct dns_question *q,
                     struct dns_answer *ans);

/* What a reply to a client says: rcode and n_addrs addresses, all with ttl. */
struct dns_reply {
    uint8_t rcode;
    const struct dns_addr *addrs;
    size_t n_addrs;
    uint32_t ttl;
};

/* Builds reply r to q into out (cap bytes, >= 512). Addresses whose family matches the
 * question are written as records owned by the question name (CNAME chains are
 * flattened), each with r->ttl; as many as fit in max_len (the client's UDP size, or 65535
 * over TCP). Returns the length, or a negative dns_status. */
int dns_build_reply(const struct dns_query *q, const struct dns_reply *r, size_t max_len,
                    uint8_t *out, size_t cap);

/* Builds the query for q, RD set, with EDNS0 advertising DNS_MAX_UDP. Returns the length or
 * a negative dns_status. */
int dns_build_query(const struct dns_question *q, uint8_t *out, size_t cap);

/* Converts a lowercase presentation name (no trailing dot, LDH labels) to wire form.
 * Returns the wire length or -1. */
int dns_name_to_wire(const char *name, uint8_t *out, size_t cap);

const char *dns_type_name(uint16_t type); /* "A", "TXT", ... or "TYPE<n>" (static) */
const char *dns_rcode_name(uint8_t rcode);

/* Shannon entropy of a label in bits per character (for exfiltration heuristics). */
double dns_label_entropy(const char *label, size_t len);

#endif
