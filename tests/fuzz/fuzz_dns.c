/* tests/fuzz/fuzz_dns: the DNS wire parser on arbitrary bytes, as a sandbox's query (then our reply
 * to it, parsed back) and as an upstream answer to a fixed question. */
#include "egress/dns_wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > DNS_MAX_TCP)
        return 0;
    struct dns_query q;
    int rc = dns_parse_query(data, size, &q);
    if (rc == DNS_OK) {
        if (strlen(q.qname) > DNS_MAX_TEXT || q.qname_wire_len > DNS_MAX_NAME)
            abort();
        struct dns_addr a[2] = {{.family = 4, .addr = {203, 0, 113, 1}, .ttl = 1},
                                {.family = 6, .addr = {0x20, 0x01, 0x0d, 0xb8}, .ttl = 1}};
        uint8_t out[DNS_MAX_UDP];
        int n = dns_build_reply(&q, &(struct dns_reply){DNS_R_NOERROR, a, 2, 30}, q.edns_udp_size,
                                out, sizeof out);
        if (n < 0 || (size_t)n > q.edns_udp_size)
            abort();
        struct dns_answer ans;
        int r2 = dns_parse_answer(
            out, (size_t)n, &(struct dns_question){q.id, q.qname_wire, q.qname_wire_len, q.qtype},
            &ans);
        if (q.qclass == 1 && r2 != DNS_OK)
            abort(); /* we must always be able to read our own replies (class IN) */
    }
    /* As an answer to "fuzz.example.com A" with the id the input claims. */
    static const uint8_t qw[] = {4,   'f', 'u', 'z', 'z', 7,   'e', 'x', 'a',
                                 'm', 'p', 'l', 'e', 3,   'c', 'o', 'm', 0};
    uint16_t id = size >= 2 ? (uint16_t)((data[0] << 8) | data[1]) : 0;
    struct dns_answer ans;
    rc = dns_parse_answer(data, size, &(struct dns_question){id, qw, sizeof qw, DNS_T_A}, &ans);
    if (rc == DNS_OK && ans.n_addrs > DNS_MAX_ANSWERS)
        abort();
    rc = dns_parse_answer(data, size, &(struct dns_question){id, qw, sizeof qw, DNS_T_AAAA}, &ans);
    if (rc == DNS_OK && ans.n_addrs > DNS_MAX_ANSWERS)
        abort();
    return 0;
}
