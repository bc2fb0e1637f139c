/* vswitch/vswitch: the eBPF virtual switch of airlock, as a library (airlock_vswitch).
 *
 * Every packet a sandbox sends enters the host side of its interface (a veth whose other end
 * lives in the sandbox's network namespace, or a tap for the KVM backend), where the
 * switch's programs (vswitch/bpf/) hand it to the egress proxy's socket, answer it (ARP and
 * ping for the gateway), or drop and count it. Nothing a sandbox sends is forwarded or
 * routed; sandboxes never reach each other or the host's own services; traffic toward a
 * sandbox is limited to the proxy's replies.
 *
 * Who calls what
 *   airlockd (control plane)    vswitch_open at start (re-adopts what a previous run left
 *                               pinned), vswitch_pool_fill from a worker, vswitch_net_create /
 *                               vswitch_tap_create per sandbox, vswitch_net_destroy when it
 *                               ends, vswitch_close at exit (everything stays attached).
 *   airlock-vmm (jail)          receives vswitch_net.netns_fd and setns(fd, CLONE_NEWNET)
 *                               before it creates its other namespaces; inside, the sandbox
 *                               has "eth0" with vswitch_net.addr/prefix_len, a default route
 *                               via vswitch_net.gateway, loopback up and IPv6 disabled. The
 *                               gateway is also the sandbox's DNS server (resolv.conf).
 *   airlock-vmm (kvm)           receives vswitch_net.tap_fd (IFF_TAP | IFF_NO_PI, plus
 *                               IFF_VNET_HDR if asked) and gives the guest guest_mac; the
 *                               guest configures addr/prefix_len and gateway itself.
 *   airlock-egress              vswitch_view_open + vswitch_proxy_register for each of its
 *                               three transparent sockets; vswitch_view_peer to map an
 *                               accepted connection's peer address to the sandbox.
 *   `airlock vswitch status`    vswitch_view_* (read-only; no lock, no daemon needed).
 *
 * Address plan: the range (default 10.200.0.0/16) is cut into one subnet per sandbox
 * (/30 by default, /31 allowed). In slot i's /30 the gateway is .1 and the sandbox .2;
 * in a /31 the gateway is the even address and the sandbox the odd one. The gateway
 * address exists only in the switch: it answers ARP and ping for it, and TCP/UDP sent
 * to it goes to the proxy like any other destination. The host side carries no address;
 * the host reaches the sandbox through a /32 route and a permanent neighbour entry.
 *
 * Where the state lives
 *   <pin_dir>/ (bpffs, default /sys/fs/bpf/airlock/<16 hex of BLAKE2b(state dir)>)
 *       vs_config vs_ifaces vs_addrs vs_counters vs_sockets     pinned maps
 *       links/<ifindex>_in, links/<ifindex>_eg                  pinned TCX links
 *   <state>/vswitch/instance.json   the instance's settings and pin_dir (read by views)
 *   <state>/vswitch/lock            held (flock) by the process that has it open
 *   in the network namespace where vswitch_open ran: ip rule "fwmark <steer_mark> lookup
 *   <route_table>", "local 0.0.0.0/0 dev lo table <route_table>", and the nftables guard
 *   (table inet <nft_table> and table arp <nft_table>: drop from/to interfaces named
 *   <ifname_prefix>* whatever does not carry the switch's marks).
 * All of it survives the loader's death: a sandbox's traffic keeps going to the proxy (or
 * nowhere) while no loader runs, and the next vswitch_open takes it over without a window.
 *
 * Threading: one struct vswitch may be used from several threads (an internal mutex
 * serialises changes); calls block (rtnetlink, bpf syscalls). vswitch_net_create takes ~50 us
 * from the pool and 1-2 ms when it has to create (more under load); vswitch_pool_fill and
 * vswitch_net_destroy (the kernel deletes interfaces synchronously: tens of ms) belong on a
 * worker thread, not an event loop.
 * Errors: negative errno; with struct al_error, a message saying what to do.
 */
#ifndef AIRLOCK_VSWITCH_H
#define AIRLOCK_VSWITCH_H

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "vswitch/bpf/vswitch_abi.h"

#define VSWITCH_DEFAULT_RANGE         "10.200.0.0/16"
#define VSWITCH_DEFAULT_PREFIX_LEN    30
#define VSWITCH_DEFAULT_IFNAME_PREFIX "alsb"
#define VSWITCH_DEFAULT_STEER_MARK    0x414c0001u /* "AL" 0001 */
#define VSWITCH_DEFAULT_REPLY_MARK    0x414c0002u
#define VSWITCH_DEFAULT_ROUTE_TABLE   16716u /* 0x414c */
#define VSWITCH_DEFAULT_RULE_PRIORITY 99u
#define VSWITCH_GUEST_IFNAME          "eth0"
#define VSWITCH_LABEL_MAX             47 /* bytes of vswitch_sandbox.label */
#define VSWITCH_REASON_MAX            VS_R_MAX
/* Bounds of vswitch_opts.max_ifaces. The upper one keeps the tables' bucket arrays, which the
 * kernel allocates whole when the maps are created (16 bytes per entry and map, rounded up
 * to a power of two), at tens of MiB; the host-side MACs could number 2^24 slots. */
#define VSWITCH_DEFAULT_MAX_IFACES VS_DEFAULT_IFACES
#define VSWITCH_MAX_IFACES_LIMIT   (1u << 20)

struct vswitch;
struct vswitch_view;

enum vswitch_attach_mode {
    /* The switch's choice: clsact, whose attachment costs ~0.2 ms where TCX waits for two
     * RCU grace periods (25-30 ms per network measured under load). */
    VSWITCH_ATTACH_AUTO = 0,
    VSWITCH_ATTACH_TCX = VS_ATTACH_TCX,       /* TCX links, pinned (kernel >= 6.6) */
    VSWITCH_ATTACH_CLSACT = VS_ATTACH_CLSACT, /* clsact qdisc + direct-action filters */
};

struct vswitch_opts {
    const char *state_dir; /* default al_state_dir() */
    const char *pin_dir;   /* default /sys/fs/bpf/airlock/<hash of state_dir> */
    const char *range;     /* IPv4 CIDR, default VSWITCH_DEFAULT_RANGE */
    unsigned prefix_len;   /* per-sandbox subnet, 30 or 31; 0 = 30 */
    /* Host-side interface names are "<prefix><slot>": 1..10 characters of [a-z0-9]. The
     * prefix is reserved for the switch (the guard matches it). Default
     * VSWITCH_DEFAULT_IFNAME_PREFIX. */
    const char *ifname_prefix;
    /* 0 = the defaults above. They must not collide with other users of marks, routing
     * tables and rule priorities on the host. */
    uint32_t steer_mark;
    uint32_t reply_mark;
    uint32_t route_table;
    uint32_t rule_priority;
    const char *nft_table; /* default "airlock_<ifname_prefix>" */
    unsigned pool_size;    /* networks vswitch_pool_fill keeps ready (0 = none) */
    /* Entries of the interface tables: the most networks (sandboxes' and pooled ones) the
     * instance holds at once, whatever the range has room for. 1..VSWITCH_MAX_IFACES_LIMIT;
     * 0 = VSWITCH_DEFAULT_MAX_IFACES. Fixed when the instance is first created, like the
     * range: reopening pinned tables of another size is an error. */
    unsigned max_ifaces;
    enum vswitch_attach_mode attach_mode;
    /* Start although net.ipv4.ip_forward=1 (the host routes for something else). The
     * switch never passes unassigned packets and the guard's forward chain drops anything
     * from or to sandbox interfaces, but one layer of defence is gone: see
     * docs/operations.md before you set this. */
    bool allow_ip_forward;
};

/* Opens (creates, or takes over from a previous process) the switch instance in the
 * calling thread's network namespace: checks the host settings and refuses to start when
 * one is unsafe (the message names the setting and the fix), mounts bpffs if needed, loads
 * the programs (pinned maps are reused), installs the fwmark rule, the local route table and
 * the nftables guard (atomically replacing an existing guard: no window), re-attaches every
 * pinned sandbox interface to the new programs, and drops what belonged to dead interfaces.
 * Only one process may have an instance open (-EBUSY otherwise). */
int vswitch_open(const struct vswitch_opts *opts, struct vswitch **out, struct al_error *err);
/* Releases the handle. Everything stays attached and pinned (fail closed); pooled,
 * unassigned networks are deleted (tens of ms each). NULL is allowed. */
void vswitch_close(struct vswitch *vs);
/* Tears the instance down: deletes every sandbox interface it attached, the pins, the rule,
 * the route table, the guard and the instance record, then frees vs. Refuses (-EBUSY) while
 * sandboxes are attached unless force. vs is freed in every case. */
int vswitch_destroy(struct vswitch *vs, bool force, struct al_error *err);

/* What vswitch_open checks, without changing anything (also `airlock vswitch check`).
 * Fills up to max results; returns how many checks failed (0 = safe), or a negative errno. */
struct vswitch_check {
    char name[48]; /* "net.ipv4.ip_forward", "bpffs", ... */
    bool ok;
    char detail[256]; /* the value found and, when not ok, what to do */
};
int vswitch_host_check(const struct vswitch_opts *opts, struct vswitch_check *results, size_t max,
                       size_t *n);

/* ---- sandboxes ----------------------------------------------------------------------- */

struct vswitch_sandbox {
    uint64_t id; /* non-zero; unique among the instance's live sandboxes */
    /* Optional, at most VSWITCH_LABEL_MAX bytes: shown by status and returned to the proxy
     * with the id (e.g. the E2B sandbox id). */
    const char *label;
};

struct vswitch_net {
    uint64_t sandbox_id;
    /* veth: the sandbox's network namespace; the caller owns it and must close it. -1 for
     * taps and after vswitch_net_find. */
    int netns_fd;
    int tap_fd;       /* tap: the tap queue (the caller owns it); -1 otherwise */
    int host_ifindex; /* in the switch's namespace */
    char host_ifname[IFNAMSIZ];
    char guest_ifname[IFNAMSIZ]; /* "eth0" in netns_fd (veth); = host_ifname for taps */
    struct in_addr addr;         /* the sandbox's address */
    struct in_addr gateway;      /* its default gateway and DNS server */
    unsigned prefix_len;
    uint8_t host_mac[6];
    uint8_t guest_mac[6]; /* the sandbox side's MAC (give it to the guest NIC) */
};

/* Gives a sandbox a network: a new network namespace with "eth0" configured (from the pool
 * when one is ready, else created now: netns, veth pair, addresses, routes), attached before
 * its host side goes up. Returns with out->netns_fd open. */
int vswitch_net_create(struct vswitch *vs, const struct vswitch_sandbox *sb,
                       struct vswitch_net *out, struct al_error *err);

struct vswitch_tap_opts {
    bool vnet_hdr;            /* IFF_VNET_HDR on the tap */
    const uint8_t *guest_mac; /* the guest NIC's MAC, or NULL to let the switch pick one */
};
/* Creates a tap device for a KVM guest, attached before it goes up. out->tap_fd is the
 * open queue; closing its last copy deletes the device (the switch then forgets it on the
 * next vswitch_net_destroy or vswitch_open). */
int vswitch_tap_create(struct vswitch *vs, const struct vswitch_sandbox *sb,
                       const struct vswitch_tap_opts *o, struct vswitch_net *out,
                       struct al_error *err);

/* Attaches the switch to an interface that a backend created itself in the switch's
 * namespace. It must be down, named <ifname_prefix><anything> (so the guard covers it), and
 * be a veth or tap; the switch assigns the address slot (out) and installs the route and
 * neighbour entry (guest_mac is the MAC of the far end). The caller configures the far end.*/
int vswitch_attach(struct vswitch *vs, int ifindex, const struct vswitch_sandbox *sb,
                   const uint8_t guest_mac[6], struct vswitch_net *out, struct al_error *err);
/* Ends a sandbox's network: its identity goes first (every packet is dropped), then the
 * interface is deleted (the kernel detaches the programs with it), then the pins, counters
 * and address slot are released. The switch never leaves a live interface unattached:
 * there is no "detach but keep the interface". -ENOENT if unknown. */
int vswitch_detach(struct vswitch *vs, int host_ifindex, struct al_error *err);
int vswitch_net_destroy(struct vswitch *vs, uint64_t sandbox_id, struct al_error *err);
/* A sandbox's network as the switch knows it (e.g. after airlockd restarted); fds are -1. */
int vswitch_net_find(struct vswitch *vs, uint64_t sandbox_id, struct vswitch_net *out);
/* Closes out's fds (netns_fd, tap_fd) if open. */
void vswitch_net_close_fds(struct vswitch_net *net);

/* Creates unassigned networks until opts.pool_size are ready (attached; every packet on
 * them is dropped as "unassigned" until vswitch_net_create hands one out). Returns how
 * many are ready, or a negative errno. */
int vswitch_pool_fill(struct vswitch *vs, struct al_error *err);
size_t vswitch_pool_ready(struct vswitch *vs);

/* The read-only view of this instance (valid until vswitch_close). */
struct vswitch_view *vswitch_get_view(struct vswitch *vs);
const char *vswitch_pin_dir(const struct vswitch *vs);

/* ---- views: status, counters, the proxy's side --------------------------------------- */

/* Opens the pinned state of the instance whose state directory is state_dir (NULL: the
 * one in effect) read-only, for the CLI and airlock-egress. -ENOENT with a message if no
 * switch was ever started for it. */
int vswitch_view_open(const char *state_dir, struct vswitch_view **out, struct al_error *err);
/* The same, straight from a pin directory. */
int vswitch_view_open_pins(const char *pin_dir, struct vswitch_view **out, struct al_error *err);
void vswitch_view_close(struct vswitch_view *v);
int vswitch_view_config(const struct vswitch_view *v, struct vs_config *out);
/* Entries of the instance's interface table (vswitch_opts.max_ifaces it was created with). */
int vswitch_view_max_ifaces(const struct vswitch_view *v, unsigned *out);

/* Which sandbox owns a peer address (the proxy's getpeername()). -ENOENT if none. */
struct vswitch_peer {
    uint64_t sandbox_id;
    int host_ifindex;
    char label[VSWITCH_LABEL_MAX + 1];
};
int vswitch_view_peer(const struct vswitch_view *v, struct in_addr peer, struct vswitch_peer *out);

struct vswitch_iface_info {
    int host_ifindex;
    struct vs_iface iface; /* identity, addresses, MACs, flags, name, label */
};
/* Calls cb for every attached interface (sorted by slot); cb returns non-zero to stop. */
int vswitch_view_foreach(const struct vswitch_view *v,
                         int (*cb)(const struct vswitch_iface_info *i, void *arg), void *arg);

struct vswitch_counters {
    uint64_t packets[VSWITCH_REASON_MAX];
    uint64_t bytes[VSWITCH_REASON_MAX];
};
/* Sum over CPUs of an interface's counters; host_ifindex 0 = packets of unknown
 * interfaces. -ENOENT if the interface has none. */
int vswitch_view_counters(const struct vswitch_view *v, int host_ifindex,
                          struct vswitch_counters *out);
/* "tcp_syn", "no_proxy", ...; NULL if out of range. */
const char *vswitch_reason_name(unsigned reason);
/* True for reasons that drop the packet. */
bool vswitch_reason_is_drop(unsigned reason);

/* The proxy's sockets. airlock-egress creates each socket, then registers it:
 *   VSWITCH_PROXY_TCP      SOCK_STREAM AF_INET, IP_TRANSPARENT, bound (e.g. 127.0.0.1:15001),
 *                          listening. Gets every TCP connection except to port 53.
 *   VSWITCH_PROXY_DNS_UDP  SOCK_DGRAM AF_INET, IP_TRANSPARENT and IP_RECVORIGDSTADDR, bound
 *                          to port 53 (e.g. 127.0.0.1:53): answers leave from the socket's
 *                          own port, and resolvers drop answers from any other. Gets UDP to
 *                          port 53 of any address; answer with sendmsg and
 *                          IP_PKTINFO.ipi_spec_dst = the original destination (from the
 *                          IP_ORIGDSTADDR control message).
 *   VSWITCH_PROXY_DNS_TCP  like TCP, for TCP to port 53.
 * The sockets must live in the switch's network namespace (the kernel refuses to hand a
 * packet to a socket of another one: counted as assign_failed).
 * Registering sets SO_MARK = the instance's reply mark on the socket (accepted sockets
 * inherit it; only traffic carrying it may enter a sandbox) and puts it in the switch's
 * sockmap. Needs CAP_NET_ADMIN (SO_MARK) and CAP_BPF, or root; whoever holds the fd may
 * call it (egress itself, or airlockd after receiving the fd). A socket leaves the map when
 * its last fd is closed: a dead proxy means every packet is dropped ("no_proxy"), and a
 * restarted proxy registers its new sockets. Registering again replaces the old socket.
 * On kernels before 6.5 a socket with SO_REUSEPORT is refused (-EOPNOTSUPP): bpf_sk_assign
 * cannot take it there, so the proxy must use one plain socket shared by its threads. */
enum vswitch_proxy_sock {
    VSWITCH_PROXY_TCP = VS_SOCK_TCP,
    VSWITCH_PROXY_DNS_UDP = VS_SOCK_DNS_UDP,
    VSWITCH_PROXY_DNS_TCP = VS_SOCK_DNS_TCP,
};
int vswitch_proxy_register(const struct vswitch_view *v, enum vswitch_proxy_sock kind, int fd,
                           struct al_error *err);
int vswitch_proxy_unregister(const struct vswitch_view *v, enum vswitch_proxy_sock kind,
                             struct al_error *err);
/* Whether a socket is registered for kind (*cookie = its socket cookie). */
bool vswitch_proxy_registered(const struct vswitch_view *v, enum vswitch_proxy_sock kind,
                              uint64_t *cookie);
const char *vswitch_proxy_sock_name(enum vswitch_proxy_sock kind);
/* Whether this kernel's bpf_sk_assign takes sockets with SO_REUSEPORT (Linux >= 6.5).
 * kernel (may be NULL) receives the release string. */
bool vswitch_assign_takes_reuseport(char *kernel, size_t len);

/* `airlock vswitch ...` (status, check). */
int vswitch_cli_main(int argc, char **argv);

#endif
