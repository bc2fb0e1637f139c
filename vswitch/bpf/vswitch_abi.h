/* vswitch/bpf/vswitch_abi: the layout shared by the eBPF programs and the loader.
 *
 * Owns: the pinned maps' key/value structs, the verdict reasons (one counter each), the
 * proxy socket slots and the ABI version. Included by vswitch.bpf.c (clang -target bpf) and
 * by the C library, so it uses only fixed-width kernel UAPI types. Changing a struct here
 * changes VS_ABI_VERSION: the loader then refuses to adopt state pinned by an older build
 * (see vswitch_open) instead of misreading it.
 */
#ifndef AIRLOCK_VSWITCH_ABI_H
#define AIRLOCK_VSWITCH_ABI_H

#include <linux/types.h>

#define VS_ABI_VERSION 1u

/* Capacity of every per-interface map as the object is built. The loader sets the real one
 * before it loads the object (vswitch_opts.max_ifaces), and the address plan is capped to it;
 * the unknown-interface counters take one entry more (key 0). */
#define VS_DEFAULT_IFACES 16384u

/* Proxy socket slots in the vs_sockets sockmap (filled by airlock-egress). */
enum vs_sock_slot {
    VS_SOCK_TCP = 0,     /* transparent TCP listener: every TCP connection but port 53 */
    VS_SOCK_DNS_UDP = 1, /* transparent UDP socket (IP_RECVORIGDSTADDR): UDP to port 53 */
    VS_SOCK_DNS_TCP = 2, /* transparent TCP listener: TCP to port 53 */
    VS_SOCK_MAX = 3,
};

/* One counter (packets + bytes) per reason and interface. The first group are packets the
 * switch handled (steered or answered); the rest are drops. Names in vswitch_reason_name. */
enum vs_reason {
    /* from the sandbox: delivered to the proxy or answered by the switch */
    VS_R_TCP_SYN = 0,  /* new TCP connection handed to the proxy's TCP listener */
    VS_R_TCP_FLOW,     /* packet of a connection the proxy already owns */
    VS_R_DNS_UDP,      /* UDP/53 handed to the proxy's DNS socket */
    VS_R_DNS_TCP_SYN,  /* new TCP/53 connection handed to the proxy's DNS listener */
    VS_R_ARP_REPLY,    /* ARP request for the gateway, answered by the switch */
    VS_R_ICMP_GATEWAY, /* ICMP echo to the gateway, answered by the switch */
    /* bare ACK of no known flow, handed to the proxy's listener: it completes a SYN-cookie
     * handshake or answers with a RST */
    VS_R_TCP_ACK_LISTENER,
    /* from the sandbox: dropped */
    VS_R_NO_PROXY,        /* the proxy socket for this traffic is not registered */
    VS_R_UNASSIGNED,      /* interface is attached but not yet given to a sandbox (pool) */
    VS_R_UNKNOWN_IFACE,   /* packet on an interface the switch has no identity for */
    VS_R_SPOOFED,         /* IPv4 source is not the address assigned to the interface */
    VS_R_IPV6,            /* IPv6 (not routed for sandboxes) */
    VS_R_FRAGMENT,        /* IPv4 fragment */
    VS_R_IP_OPTIONS,      /* IPv4 header with options */
    VS_R_MALFORMED,       /* truncated or inconsistent headers */
    VS_R_RAW_FRAME,       /* not IPv4/ARP, VLAN-tagged, or IPv4 not sent to the gateway MAC */
    VS_R_ARP_OTHER,       /* ARP that is not a request for the gateway from the sandbox */
    VS_R_UDP,             /* UDP to a port other than 53 (QUIC, NTP, ...) */
    VS_R_ICMP,            /* ICMP to anything but the gateway, or not an echo request */
    VS_R_OTHER_PROTO,     /* IPv4 protocol other than TCP, UDP, ICMP */
    VS_R_TO_SANDBOX,      /* destination is another sandbox (inside the address range) */
    VS_R_BAD_DESTINATION, /* 0/8, loopback, multicast, reserved or broadcast destination */
    VS_R_TCP_NO_FLOW,     /* SYN+ACK, RST or FIN of no proxied flow */
    VS_R_ASSIGN_FAILED,   /* the kernel refused to hand the packet to the proxy socket */
    /* toward the sandbox */
    VS_R_IN_REPLY,   /* reply from the proxy or the switch, delivered */
    VS_R_IN_DROPPED, /* anything else the host tried to send into the sandbox */
    VS_R_MAX,
};

/* vs_config[0]: what the instance was created with (read by the loader and the CLI; the
 * programs take the same values as load-time constants). Addresses in network order. */
struct vs_config {
    __u32 abi_version;
    __u32 prefix_len;    /* per-sandbox subnet: 30 or 31 */
    __u32 range_addr;    /* network order */
    __u32 range_len;     /* prefix length of the range */
    __u32 steer_mark;    /* skb->mark on packets handed to the proxy (fwmark rule) */
    __u32 reply_mark;    /* SO_MARK of the proxy sockets: the only traffic let into sandboxes */
    __u32 route_table;   /* table holding "local 0.0.0.0/0 dev lo" */
    __u32 rule_priority; /* priority of "fwmark steer_mark lookup route_table" */
    __u32 attach_mode;   /* enum vs_attach_mode */
    __u32 reserved;
    char ifname_prefix[16];
    char nft_table[32];
};

enum vs_attach_mode {
    VS_ATTACH_TCX = 1,    /* bpf_link on TCX ingress/egress (kernel >= 6.6), links pinned */
    VS_ATTACH_CLSACT = 2, /* legacy clsact qdisc + direct-action filters */
};

/* Interface flags. */
#define VS_IF_POOL 0x1u /* pre-created, not given to a sandbox yet: every packet dropped */
#define VS_IF_TAP  0x2u /* a tap device (KVM backend) rather than a veth */

/* vs_ifaces[ifindex of the host-side interface]: the identity of the sandbox behind it. */
struct vs_iface {
    __u64 sandbox_id;  /* 0 only while VS_IF_POOL */
    __u32 addr;        /* the sandbox's address, network order */
    __u32 gateway;     /* its gateway (the host side, virtual), network order */
    __u8 host_mac[6];  /* MAC of the host-side interface (source of our ARP/ICMP replies) */
    __u8 guest_mac[6]; /* MAC of the sandbox's interface */
    __u32 slot;        /* index in the address plan */
    __u32 flags;       /* VS_IF_* */
    /* Below: for operators (status) and the loader only; the programs do not read them. */
    char ifname[16]; /* host-side interface name */
    char label[48];  /* the control plane's name for the sandbox, NUL-terminated */
};

/* vs_addrs[sandbox address, network order]: reverse lookup for airlock-egress, which sees
 * the sandbox address as the peer of every accepted connection. */
struct vs_addr_entry {
    __u64 sandbox_id;
    __u32 ifindex;
    __u32 flags;
    char label[48];
};

/* vs_counters[ifindex] (per CPU); key 0 collects packets of unknown interfaces. */
struct vs_counters {
    __u64 packets[VS_R_MAX];
    __u64 bytes[VS_R_MAX];
};

/* Probe builds only (the unit tests' BPF_PROG_TEST_RUN object): what would have been
 * handed to bpf_sk_assign, which the test-run context cannot execute. */
struct vs_probe {
    __u32 assigned;    /* number of assignments seen */
    __u32 reason;      /* enum vs_reason of the last one */
    __u32 sk_state;    /* BPF_TCP_* of the chosen socket (UDP: 7 = unconnected) */
    __u32 sk_protocol; /* IPPROTO_TCP / IPPROTO_UDP */
    __u32 sk_src_ip4;  /* the chosen socket's local address (network order) */
    __u32 sk_src_port; /* the chosen socket's local port (host order) */
    __u32 mark;        /* skb->mark that would have been set */
    __u32 pad;
};

#endif
