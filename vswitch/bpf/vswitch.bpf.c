/* vswitch/bpf/vswitch.bpf.c: the eBPF virtual switch on the host side of every sandbox
 * interface (veth or tap). Every packet a sandbox sends is handed to the egress proxy's
 * socket with bpf_sk_assign, answered here (ARP and ping for the gateway), or dropped and
 * counted. Nothing a sandbox sends is ever forwarded or routed.
 *
 * Owns: the per-packet verdicts, in both directions:
 *   vs_from_sandbox  tc/TCX ingress of the host-side interface (what the sandbox sends)
 *   vs_to_sandbox    tc/TCX egress of the host-side interface (what the host sends to it)
 * and the maps they share with the loader (layout in vswitch_abi.h). Identity is the
 * interface a packet arrived on (skb->ifindex); a sandbox cannot choose it.
 *
 * Built twice from this file: the product object, and a probe object (-DVS_PROBE) used by
 * the BPF_PROG_TEST_RUN unit tests, where bpf_sk_assign cannot run (the test-run skb is not
 * at tc ingress): there, the assignment is recorded in vs_probe instead. Nothing else
 * differs.
 *
 * Only UAPI structs are read (__sk_buff, bpf_sock and packet headers), so no CO-RE
 * relocations are needed. Header offsets are constants (packets with IP options are
 * dropped), which keeps the verifier happy with CAP_BPF + CAP_NET_ADMIN alone.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "vswitch_abi.h"

/* Load-time constants, set by the loader from the instance configuration. */
const volatile __u32 cfg_range_addr = 0; /* network order */
const volatile __u32 cfg_range_mask = 0; /* network order */
const volatile __u32 cfg_steer_mark = 0;
const volatile __u32 cfg_reply_mark = 0;

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct vs_config);
    __uint(pinning, LIBBPF_PIN_BY_NAME);
} vs_config SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, VS_DEFAULT_IFACES);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct vs_iface);
    __uint(pinning, LIBBPF_PIN_BY_NAME);
} vs_ifaces SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, VS_DEFAULT_IFACES);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct vs_addr_entry);
    __uint(pinning, LIBBPF_PIN_BY_NAME);
} vs_addrs SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
    __uint(max_entries, VS_DEFAULT_IFACES + 1);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct vs_counters);
    __uint(pinning, LIBBPF_PIN_BY_NAME);
} vs_counters SEC(".maps");

/* The proxy's sockets, inserted by airlock-egress (vswitch_proxy_register). A socket leaves
 * the map when it is closed, so a dead proxy means every packet is dropped (no_proxy). */
struct {
    __uint(type, BPF_MAP_TYPE_SOCKMAP);
    __uint(max_entries, VS_SOCK_MAX);
    __type(key, __u32);
    __type(value, __u64);
    __uint(pinning, LIBBPF_PIN_BY_NAME);
} vs_sockets SEC(".maps");

#ifdef VS_PROBE
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct vs_probe);
} vs_probe SEC(".maps");
#endif

#define ETH_HLEN_  14
#define IP_HLEN    20
#define IP_MF      0x2000
#define IP_OFFMASK 0x1fff
/* Bytes of headers the parser may touch: Ethernet + IPv4 + TCP (60 with options). */
#define VS_PULL_LEN (ETH_HLEN_ + IP_HLEN + 60)

/* ICMP and ARP for Ethernet/IPv4, spelled out here: linux/icmp.h and linux/if_arp.h drag in
 * libc headers that do not build for the bpf target. */
#define ICMP_ECHOREPLY 0
#define ICMP_ECHO      8
struct icmphdr {
    __u8 type;
    __u8 code;
    __sum16 checksum;
    __be32 rest;
};

#define ARPHRD_ETHER  1
#define ARPOP_REQUEST 1
#define ARPOP_REPLY   2
struct arp_eth_ipv4 {
    struct {
        __be16 ar_hrd, ar_pro;
        __u8 ar_hln, ar_pln;
        __be16 ar_op;
    } h;
    __u8 sha[ETH_ALEN];
    __u8 sip[4];
    __u8 tha[ETH_ALEN];
    __u8 tip[4];
} __attribute__((packed));

static __always_inline void vs__count(__u32 ifindex, enum vs_reason r, __u32 len)
{
    struct vs_counters *c = bpf_map_lookup_elem(&vs_counters, &ifindex);
    if (!c)
        return; /* the loader creates the entry at attach; never allocate on the fast path */
    if (r < VS_R_MAX) {
        c->packets[r] += 1;
        c->bytes[r] += len;
    }
}

static __always_inline int vs__drop(struct __sk_buff *skb, __u32 key, enum vs_reason r)
{
    vs__count(key, r, skb->len);
    return TC_ACT_SHOT;
}

/* Makes sure the headers are in the linear part (taps can hand us short heads). */
static __always_inline void vs__pull(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    __u32 want = skb->len < VS_PULL_LEN ? skb->len : VS_PULL_LEN;
    if (data + want > data_end)
        bpf_skb_pull_data(skb, want);
}

/* Destinations no sandbox may address: "this network", loopback, multicast, class E and
 * limited broadcast. (The proxy refuses private ranges itself; these are never useful.) */
static __always_inline int vs__bad_destination(__u32 daddr_be)
{
    __u32 d = bpf_ntohl(daddr_be);
    __u8 top = d >> 24;
    return top == 0 || top == 127 || top >= 224;
}

/* Hands skb to sk (a reference we own; released here) and marks it for the local route. */
static __always_inline int vs__assign(struct __sk_buff *skb, __u32 key, struct bpf_sock *sk,
                                      enum vs_reason r)
{
#ifdef VS_PROBE
    __u32 zero = 0;
    struct vs_probe *p = bpf_map_lookup_elem(&vs_probe, &zero);
    if (p) {
        p->assigned += 1;
        p->reason = r;
        p->sk_state = sk->state;
        struct bpf_sock *full = bpf_sk_fullsock(sk); /* request socks are not full */
        p->sk_protocol = full ? full->protocol : 0;
        p->sk_src_ip4 = sk->src_ip4;
        p->sk_src_port = sk->src_port;
        p->mark = cfg_steer_mark;
    }
    long err = 0;
#else
    long err = bpf_sk_assign(skb, sk, 0);
#endif
    bpf_sk_release(sk);
    if (err)
        return vs__drop(skb, key, VS_R_ASSIGN_FAILED);
    skb->mark = cfg_steer_mark;
    vs__count(key, r, skb->len);
    return TC_ACT_OK;
}

static __always_inline int vs__to_proxy(struct __sk_buff *skb, __u32 key, __u32 slot,
                                        enum vs_reason r)
{
    struct bpf_sock *sk = bpf_map_lookup_elem(&vs_sockets, &slot);
    if (!sk)
        return vs__drop(skb, key, VS_R_NO_PROXY);
    return vs__assign(skb, key, sk, r);
}

/* Answers "who has <gateway>?" from the sandbox; every other ARP is dropped. The host never
 * needs to ARP for the sandbox (the loader installs a permanent neighbour entry). */
static __always_inline int vs__arp(struct __sk_buff *skb, __u32 key, const struct vs_iface *ifc)
{
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    struct arp_eth_ipv4 *arp = data + ETH_HLEN_;
    if ((void *)(arp + 1) > data_end)
        return vs__drop(skb, key, VS_R_MALFORMED);
    if (arp->h.ar_hrd != bpf_htons(ARPHRD_ETHER) || arp->h.ar_pro != bpf_htons(ETH_P_IP) ||
        arp->h.ar_hln != ETH_ALEN || arp->h.ar_pln != 4 || arp->h.ar_op != bpf_htons(ARPOP_REQUEST))
        return vs__drop(skb, key, VS_R_ARP_OTHER);
    __u32 sip, tip;
    __builtin_memcpy(&sip, arp->sip, 4);
    __builtin_memcpy(&tip, arp->tip, 4);
    if (tip != ifc->gateway || sip != ifc->addr)
        return vs__drop(skb, key, VS_R_ARP_OTHER);

    __u8 asker[ETH_ALEN];
    __builtin_memcpy(asker, arp->sha, ETH_ALEN);
    arp->h.ar_op = bpf_htons(ARPOP_REPLY);
    __builtin_memcpy(arp->tha, asker, ETH_ALEN);
    __builtin_memcpy(arp->tip, &sip, 4);
    __builtin_memcpy(arp->sha, ifc->host_mac, ETH_ALEN);
    __builtin_memcpy(arp->sip, &tip, 4);
    __builtin_memcpy(eth->h_dest, asker, ETH_ALEN);
    __builtin_memcpy(eth->h_source, ifc->host_mac, ETH_ALEN);

    skb->mark = cfg_reply_mark;
    vs__count(key, VS_R_ARP_REPLY, skb->len);
    return bpf_redirect(skb->ifindex, 0);
}

static __always_inline __u16 vs__csum_fold(__u32 sum)
{
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return (__u16)~sum;
}

/* Answers an ICMP echo request to the gateway in place (the host stack never sees it). */
static __always_inline int vs__ping_gateway(struct __sk_buff *skb, __u32 key,
                                            const struct vs_iface *ifc)
{
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = data + ETH_HLEN_;
    struct icmphdr *icmp = data + ETH_HLEN_ + IP_HLEN;
    if ((void *)(icmp + 1) > data_end)
        return vs__drop(skb, key, VS_R_MALFORMED);
    if (icmp->type != ICMP_ECHO || icmp->code != 0)
        return vs__drop(skb, key, VS_R_ICMP);

    __u8 asker[ETH_ALEN];
    __builtin_memcpy(asker, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, asker, ETH_ALEN);
    __builtin_memcpy(eth->h_source, ifc->host_mac, ETH_ALEN);

    ip->daddr = ip->saddr;
    ip->saddr = ifc->gateway;
    ip->ttl = 64;
    ip->check = 0;
    __u32 sum = 0;
    __u16 *w = (__u16 *)ip;
#pragma unroll
    for (int i = 0; i < IP_HLEN / 2; i++)
        sum += w[i];
    ip->check = vs__csum_fold(sum);

    /* RFC 1624: type 8 -> 0 changes one 16-bit word (type<<8 | code) of the ICMP sum. */
    __u32 c = (__u16)~icmp->checksum;
    c += (__u16)~bpf_htons(ICMP_ECHO << 8);
    c += bpf_htons(ICMP_ECHOREPLY << 8);
    icmp->type = ICMP_ECHOREPLY;
    icmp->checksum = vs__csum_fold(c);

    skb->mark = cfg_reply_mark;
    vs__count(key, VS_R_ICMP_GATEWAY, skb->len);
    return bpf_redirect(skb->ifindex, 0);
}

static __always_inline int vs__tcp(struct __sk_buff *skb, __u32 key, struct iphdr *ip,
                                   void *data_end)
{
    struct tcphdr *th = (void *)ip + IP_HLEN;
    if ((void *)(th + 1) > data_end || th->doff < 5)
        return vs__drop(skb, key, VS_R_MALFORMED);

    struct bpf_sock_tuple tuple = {};
    tuple.ipv4.saddr = ip->saddr;
    tuple.ipv4.daddr = ip->daddr;
    tuple.ipv4.sport = th->source;
    tuple.ipv4.dport = th->dest;
    int dns = th->dest == bpf_htons(53);

    /* A socket of this very flow (request, established, time-wait) gets the packet. A
     * listener found here is whatever host service owns the original destination: never
     * used; only the proxy's own listener may take a new connection. */
    struct bpf_sock *sk =
        bpf_skc_lookup_tcp(skb, &tuple, sizeof(tuple.ipv4), BPF_F_CURRENT_NETNS, 0);
    if (sk) {
        if (sk->state != BPF_TCP_LISTEN)
            return vs__assign(skb, key, sk, VS_R_TCP_FLOW);
        bpf_sk_release(sk);
    }
    __u32 slot = dns ? VS_SOCK_DNS_TCP : VS_SOCK_TCP;
    if (th->syn && !th->ack && !th->rst && !th->fin)
        return vs__to_proxy(skb, key, slot, dns ? VS_R_DNS_TCP_SYN : VS_R_TCP_SYN);
    /* A bare ACK without a flow is the end of a SYN-cookie handshake when the proxy's
     * listener was flooded (by any sandbox): only that listener can validate it, so it
     * gets it (and answers anything else with a RST). Everything else goes nowhere. */
    if (th->ack && !th->syn && !th->rst)
        return vs__to_proxy(skb, key, slot, VS_R_TCP_ACK_LISTENER);
    return vs__drop(skb, key, VS_R_TCP_NO_FLOW);
}

SEC("tc")
int vs_from_sandbox(struct __sk_buff *skb)
{
    __u32 key = skb->ifindex;
    const struct vs_iface *ifc = bpf_map_lookup_elem(&vs_ifaces, &key);
    if (!ifc)
        return vs__drop(skb, 0, VS_R_UNKNOWN_IFACE);
    if (ifc->flags & VS_IF_POOL || ifc->sandbox_id == 0)
        return vs__drop(skb, key, VS_R_UNASSIGNED);
    if (skb->vlan_present)
        return vs__drop(skb, key, VS_R_RAW_FRAME);

    vs__pull(skb);
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return vs__drop(skb, key, VS_R_MALFORMED);

    if (eth->h_proto == bpf_htons(ETH_P_ARP))
        return vs__arp(skb, key, ifc);
    if (eth->h_proto == bpf_htons(ETH_P_IPV6))
        return vs__drop(skb, key, VS_R_IPV6);
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return vs__drop(skb, key, VS_R_RAW_FRAME);
    /* IPv4 must be sent to the gateway's MAC (broadcast and multicast frames are not). */
    if (skb->pkt_type != PACKET_HOST)
        return vs__drop(skb, key, VS_R_RAW_FRAME);

    struct iphdr *ip = data + ETH_HLEN_;
    if ((void *)ip + IP_HLEN > data_end)
        return vs__drop(skb, key, VS_R_MALFORMED);
    if (ip->version != 4 || ip->ihl < 5)
        return vs__drop(skb, key, VS_R_MALFORMED);
    if (ip->ihl != 5)
        return vs__drop(skb, key, VS_R_IP_OPTIONS);
    __u32 tot = bpf_ntohs(ip->tot_len);
    if (tot < IP_HLEN || tot > skb->len - ETH_HLEN_)
        return vs__drop(skb, key, VS_R_MALFORMED);
    if (ip->frag_off & bpf_htons(IP_MF | IP_OFFMASK))
        return vs__drop(skb, key, VS_R_FRAGMENT);
    if (ip->saddr != ifc->addr)
        return vs__drop(skb, key, VS_R_SPOOFED);
    if (vs__bad_destination(ip->daddr))
        return vs__drop(skb, key, VS_R_BAD_DESTINATION);
    int to_gateway = ip->daddr == ifc->gateway;
    if (!to_gateway && (ip->daddr & cfg_range_mask) == cfg_range_addr)
        return vs__drop(skb, key, VS_R_TO_SANDBOX);

    switch (ip->protocol) {
    case IPPROTO_TCP:
        return vs__tcp(skb, key, ip, data_end);
    case IPPROTO_UDP: {
        struct udphdr *uh = (void *)ip + IP_HLEN;
        if ((void *)(uh + 1) > data_end)
            return vs__drop(skb, key, VS_R_MALFORMED);
        if (uh->dest != bpf_htons(53))
            return vs__drop(skb, key, VS_R_UDP);
        return vs__to_proxy(skb, key, VS_SOCK_DNS_UDP, VS_R_DNS_UDP);
    }
    case IPPROTO_ICMP:
        if (!to_gateway)
            return vs__drop(skb, key, VS_R_ICMP);
        return vs__ping_gateway(skb, key, ifc);
    default:
        return vs__drop(skb, key, VS_R_OTHER_PROTO);
    }
}

/* Toward the sandbox only replies pass: packets of the proxy's sockets (their SO_MARK is the
 * reply mark, inherited by every accepted connection) and the switch's own ARP/ICMP answers
 * (marked above). Anything else a host process sends is dropped: nothing inbound. */
SEC("tc")
int vs_to_sandbox(struct __sk_buff *skb)
{
    __u32 key = skb->ifindex;
    const struct vs_iface *ifc = bpf_map_lookup_elem(&vs_ifaces, &key);
    if (!ifc)
        return vs__drop(skb, 0, VS_R_UNKNOWN_IFACE);
    if (skb->mark != cfg_reply_mark || ifc->flags & VS_IF_POOL || ifc->sandbox_id == 0)
        return vs__drop(skb, key, VS_R_IN_DROPPED);

    vs__pull(skb);
    void *data = (void *)(long)skb->data;
    void *data_end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return vs__drop(skb, key, VS_R_IN_DROPPED);
    if (eth->h_proto == bpf_htons(ETH_P_ARP)) {
        vs__count(key, VS_R_IN_REPLY, skb->len);
        return TC_ACT_OK;
    }
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return vs__drop(skb, key, VS_R_IN_DROPPED);
    struct iphdr *ip = data + ETH_HLEN_;
    if ((void *)ip + IP_HLEN > data_end || ip->daddr != ifc->addr)
        return vs__drop(skb, key, VS_R_IN_DROPPED);
    vs__count(key, VS_R_IN_REPLY, skb->len);
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Apache-2.0";
