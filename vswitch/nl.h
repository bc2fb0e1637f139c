/* vswitch/nl: the small rtnetlink client the vswitch needs (no iproute2 at run time).
 *
 * Owns: one NETLINK_ROUTE socket bound to the network namespace it was opened in, the
 * requests the switch makes (links, addresses, routes, rules, neighbours, dumps) and
 * synchronous request/acknowledge with the kernel's extended error message. libmnl builds,
 * parses and dispatches the messages; the socket, the receive loop and its bounds are ours.
 * Everything is blocking and bounded; one request at a time.
 * Internal to vswitch/ (and its tests): not part of the public API.
 */
#ifndef AIRLOCK_VSWITCH_NL_H
#define AIRLOCK_VSWITCH_NL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct vs_nl {
    int fd;
    uint32_t seq;
};

/* Opens a socket in the calling thread's current network namespace. */
int vswitch_nl_open(struct vs_nl *nl, struct al_error *err);
void vswitch_nl_close(struct vs_nl *nl);

struct vs_veth_spec {
    const char *name;        /* host side */
    const uint8_t *mac;      /* host side MAC, or NULL */
    const char *peer_name;   /* sandbox side */
    const uint8_t *peer_mac; /* sandbox side MAC, or NULL */
    int peer_netns_fd;       /* create the peer directly in this netns, or -1 */
    uint32_t mtu;            /* 0 = default */
};
/* Creates a veth pair (both ends down). */
int vswitch_nl_veth_add(struct vs_nl *nl, const struct vs_veth_spec *spec, struct al_error *err);
int vswitch_nl_link_del(struct vs_nl *nl, int ifindex, struct al_error *err);
int vswitch_nl_link_set_up(struct vs_nl *nl, int ifindex, bool up, struct al_error *err);
/* Disables IPv6 link-local address generation (no router solicitations, no DAD noise). */
int vswitch_nl_link_addrgen_none(struct vs_nl *nl, int ifindex, struct al_error *err);
/* Interface index of name in this socket's namespace (-ENODEV if absent). */
int vswitch_nl_link_index(struct vs_nl *nl, const char *name, int *ifindex, struct al_error *err);

/* Adds addr/prefix_len (network-order address) to ifindex. */
int vswitch_nl_addr_add(struct vs_nl *nl, int ifindex, uint32_t addr, unsigned prefix_len,
                        struct al_error *err);

enum vs_route_kind {
    VS_ROUTE_UNICAST_DEV, /* dst/len dev oif scope link */
    VS_ROUTE_DEFAULT_VIA, /* default via gw dev oif onlink */
    VS_ROUTE_LOCAL_ALL,   /* local 0.0.0.0/0 dev oif (lo) scope host */
};
struct vs_route_spec {
    enum vs_route_kind kind;
    uint32_t table;
    uint32_t dst; /* network order */
    unsigned dst_len;
    uint32_t gateway; /* network order */
    int oif;
    uint8_t protocol; /* RTPROT_* (identifies our routes) */
};
/* replace: NLM_F_REPLACE instead of NLM_F_EXCL (idempotent). */
int vswitch_nl_route_add(struct vs_nl *nl, const struct vs_route_spec *r, bool replace,
                         struct al_error *err);
int vswitch_nl_route_del(struct vs_nl *nl, const struct vs_route_spec *r, struct al_error *err);

/* "fwmark mark/mask lookup table priority prio" (IPv4). add: -EEXIST is success. */
int vswitch_nl_rule_add(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                        struct al_error *err);
int vswitch_nl_rule_del(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                        struct al_error *err);
/* True if exactly that rule exists. */
int vswitch_nl_rule_exists(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                           bool *exists, struct al_error *err);

/* Permanent neighbour entry ip -> mac on ifindex. */
int vswitch_nl_neigh_add(struct vs_nl *nl, int ifindex, uint32_t ip, const uint8_t mac[6],
                         struct al_error *err);

/* Dumps. The callbacks return 0 to continue, non-zero to stop; a dump returns that value,
 * 0 when it ran to the end, or a negative errno. */
struct vs_nl_route_info {
    uint32_t table;
    uint8_t type; /* RTN_* */
    uint8_t protocol;
    uint32_t dst; /* network order */
    unsigned dst_len;
    int oif;
};
int vswitch_nl_route_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_route_info *r, void *arg),
                          void *arg, struct al_error *err);
struct vs_nl_addr_info {
    int ifindex;
    uint32_t addr; /* network order */
    unsigned prefix_len;
};
int vswitch_nl_addr_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_addr_info *a, void *arg),
                         void *arg, struct al_error *err);
struct vs_nl_link_info {
    int ifindex;
    char name[16];
    uint8_t mac[6]; /* zero if the link has no Ethernet address */
    char kind[16];  /* IFLA_INFO_KIND ("veth", "tun", ...), "" if none */
    unsigned flags; /* IFF_* */
};
/* One interface by index (-ENODEV if absent). */
int vswitch_nl_link_get(struct vs_nl *nl, int ifindex, struct vs_nl_link_info *out,
                        struct al_error *err);
/* Sets the Ethernet address of an interface. */
int vswitch_nl_link_set_mac(struct vs_nl *nl, int ifindex, const uint8_t mac[6],
                            struct al_error *err);
int vswitch_nl_link_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_link_info *l, void *arg),
                         void *arg, struct al_error *err);

#endif
