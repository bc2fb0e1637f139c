/* controlplane/net: the sandbox network provider (the vswitch), behind a narrow interface.
 *
 * Owns nothing; the interface between the lifecycle and vswitch/ (net_vswitch.c). Calls
 * block (rtnetlink, bpf): the lifecycle runs them on libuv's thread pool. A provider is
 * optional: without one, sandboxes have loopback only (no egress at all). A sandbox's network
 * is a network namespace with a veth (jail) or a tap (kvm: the provider is opened for taps
 * when the backend is kvm).
 */
#ifndef AIRLOCK_CP_NET_H
#define AIRLOCK_CP_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct cp_net {
    int netns_fd; /* the sandbox's network namespace (owned by the caller) or -1 */
    int tap_fd;   /* kvm: the sandbox's tap (owned by the caller) or -1 */
    unsigned prefix_len;
    char guest_mac[18]; /* kvm: the MAC the guest NIC must have ("aa:bb:cc:dd:ee:ff") */
    char addr[46];      /* the sandbox's address */
    char gateway[46];   /* its gateway and DNS server */
    int host_ifindex;
    char host_ifname[16];
};

struct cp_net_ops {
    const char *name;
    int (*acquire)(void *priv, uint64_t seq, const char *label, struct cp_net *out,
                   struct al_error *err);
    int (*release)(void *priv, uint64_t seq, struct al_error *err);
    /* After a restart: the network of seq if the switch still has it (-ENOENT). */
    int (*find)(void *priv, uint64_t seq, struct cp_net *out);
    /* Calls fn for every sandbox network the switch holds (to reconcile after a restart). */
    int (*foreach)(void *priv, int (*fn)(uint64_t seq, const char *label, void *arg), void *arg);
    /* Keeps the pool of ready networks full (worker thread). */
    int (*pool_fill)(void *priv, struct al_error *err);
    /* Networks ready in the pool and how many it keeps (0: no pool); waits for at most one
     * network being made. */
    void (*pool_counts)(void *priv, size_t *ready, size_t *size);
    /* Releases the handle; everything stays attached (fail closed) for the next airlockd. */
    void (*close)(void *priv);
    /* Removes the whole switch instance (rules, guard, pins); refuses (-EBUSY) while
     * sandbox networks exist. Frees priv in every case. */
    int (*destroy)(void *priv, struct al_error *err);
};

#endif
