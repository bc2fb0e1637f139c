/* vswitch/net: a sandbox's network, built over rtnetlink (no iproute2 at run time).
 *
 * Owns: the address plan (slots of the range, MACs), creating a network namespace with a
 * configured "eth0" whose veth peer on the host is attached before it goes up, taps for the
 * KVM backend, attaching interfaces a backend made itself, the pool of ready networks that
 * keeps creation off the sandbox start path, and the few half-made networks (struct
 * vs_staged) that every network made on demand is finished from.
 *
 * The network namespace is created by the calling thread itself (unshare is per thread),
 * which opens the rtnetlink socket bound to the new namespace (through which "eth0" is
 * configured) and then returns to the namespace it was in (net__ns_create).
 */
#include "internal.h"

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

/* ---- address plan ----------------------------------------------------------------------- */

void vswitch__slot_addrs(const struct vswitch *vs, uint32_t slot, uint32_t *gateway, uint32_t *addr)
{
    uint32_t size = 1u << (32 - vs->cfg.prefix_len);
    uint32_t base = vs->range_host + slot * size;
    if (vs->cfg.prefix_len == 31) {
        *gateway = htonl(base);
        *addr = htonl(base + 1);
    } else {
        *gateway = htonl(base + 1);
        *addr = htonl(base + 2);
    }
}

int vswitch__slot_alloc(struct vswitch *vs, uint32_t *slot, struct al_error *err)
{
    for (uint32_t i = 0; i < vs->nslots; i++) {
        if (!vs->slot_used[i]) {
            vs->slot_used[i] = 1;
            *slot = i;
            return 0;
        }
    }
    uint64_t range_slots = 1ull << (vs->cfg.prefix_len - vs->cfg.range_len);
    if (range_slots > vs->nslots)
        return al_error_set(err, -ENOSPC,
                            "the switch's interface table is full (%u networks, pooled ones "
                            "included): end sandboxes or raise network.max_interfaces",
                            vs->nslots);
    return al_error_set(err, -ENOSPC,
                        "the address range has no free sandbox subnet (%u in "
                        "use, pooled ones included): end sandboxes or configure a larger "
                        "network.range%s",
                        vs->nslots,
                        vs->nslots == vs->max_ifaces ? " and network.max_interfaces" : "");
}

void vswitch__slot_free(struct vswitch *vs, uint32_t slot)
{
    if (slot < vs->nslots)
        vs->slot_used[slot] = 0;
}

/* Locally administered unicast MACs with an "AL" signature: 02:41:4c:<slot> on the host
 * side (how the switch recognises its interfaces), 06:41:4c:<slot> for the sandbox. */
void vswitch__slot_macs(uint32_t slot, uint8_t host[6], uint8_t guest[6])
{
    uint8_t tail[3] = {(uint8_t)(slot >> 16), (uint8_t)(slot >> 8), (uint8_t)slot};
    host[0] = 0x02, host[1] = 0x41, host[2] = 0x4c;
    guest[0] = 0x06, guest[1] = 0x41, guest[2] = 0x4c;
    memcpy(host + 3, tail, 3);
    memcpy(guest + 3, tail, 3);
}

bool vswitch__mac_is_ours(const uint8_t mac[6])
{
    return mac[0] == 0x02 && mac[1] == 0x41 && mac[2] == 0x4c;
}

static void net__ifname(const struct vswitch *vs, uint32_t slot, char out[IFNAMSIZ])
{
    snprintf(out, IFNAMSIZ, "%s%u", vs->cfg.ifname_prefix, slot);
}

static void net__fill(const struct vs_iface *ifc, int ifindex, struct vswitch_net *out)
{
    memset(out, 0, sizeof *out);
    out->sandbox_id = ifc->sandbox_id;
    out->netns_fd = -1;
    out->tap_fd = -1;
    out->host_ifindex = ifindex;
    snprintf(out->host_ifname, sizeof out->host_ifname, "%s", ifc->ifname);
    snprintf(out->guest_ifname, sizeof out->guest_ifname, "%s",
             ifc->flags & VS_IF_TAP ? ifc->ifname : VSWITCH_GUEST_IFNAME);
    out->addr.s_addr = ifc->addr;
    out->gateway.s_addr = ifc->gateway;
    memcpy(out->host_mac, ifc->host_mac, 6);
    memcpy(out->guest_mac, ifc->guest_mac, 6);
}

static int net__check_sandbox(const struct vswitch_sandbox *sb, struct al_error *err)
{
    if (!sb || sb->id == 0)
        return al_error_set(err, -EINVAL, "a sandbox needs a non-zero id");
    if (sb->label && strlen(sb->label) > VSWITCH_LABEL_MAX)
        return al_error_set(err, -EINVAL, "sandbox label '%.20s...' is longer than %d bytes",
                            sb->label, VSWITCH_LABEL_MAX);
    return 0;
}

/* -ENOENT if no interface carries sandbox id (caller holds the lock). */
/* The interface of sandbox id. Called on every creation: one batched read of the map (a
 * few syscalls for the whole map) rather than two syscalls per interface, which with
 * hundreds of sandboxes and pooled networks made this scan most of airlockd's CPU time per
 * creation; the entry-by-entry walk stays as the fallback for kernels without batch ops. */
static int net__find_locked(struct vswitch *vs, uint64_t id, int *ifindex, struct vs_iface *ifc)
{
    enum { CHUNK = 128 };
    __u32 *keys = malloc(CHUNK * sizeof *keys);
    struct vs_iface *vals = malloc(CHUNK * sizeof *vals);
    int found = -ENOENT;
    bool batched = keys && vals;
    __u32 in = 0, out = 0;
    for (bool first = true; batched;) {
        __u32 n = CHUNK;
        LIBBPF_OPTS(bpf_map_batch_opts, o);
        int r =
            bpf_map_lookup_batch(vs->view.map_ifaces, first ? NULL : &in, &out, keys, vals, &n, &o);
        if (r < 0 && r != -ENOENT) {
            batched = false; /* unsupported here: walk entry by entry */
            break;
        }
        for (__u32 i = 0; i < n && found; i++) {
            if (!(vals[i].flags & VS_IF_POOL) && vals[i].sandbox_id == id) {
                *ifindex = (int)keys[i];
                *ifc = vals[i];
                found = 0;
            }
        }
        if (r == -ENOENT || !found)
            break;
        in = out;
        first = false;
    }
    free(keys);
    free(vals);
    if (batched)
        return found;
    __u32 key, next, *prev = NULL;
    while (bpf_map_get_next_key(vs->view.map_ifaces, prev, &next) == 0) {
        if (bpf_map_lookup_elem(vs->view.map_ifaces, &next, ifc) == 0 &&
            !(ifc->flags & VS_IF_POOL) && ifc->sandbox_id == id) {
            *ifindex = (int)next;
            return 0;
        }
        key = next;
        prev = &key;
    }
    return -ENOENT;
}

/* ---- network namespaces ------------------------------------------------------------------ */

struct net__ns {
    int nsfd;
    struct vs_nl nl; /* bound to the new namespace */
};

/* Makes the new namespace in the calling thread, which then returns to the namespace it was
 * in. (A helper thread per network used to do it: under load its start waited for a CPU,
 * and the ~1 ms of a network's creation, one at a time under the switch's lock, became
 * 3-5 ms at 50 creations in flight.) A thread that cannot return would go on working in a
 * sandbox's namespace, so that aborts the process: it cannot happen with the descriptor of
 * the namespace held and CAP_SYS_ADMIN. */
static int net__ns_create(struct net__ns *ns, struct al_error *err)
{
    memset(ns, 0, sizeof *ns);
    ns->nsfd = -1;
    ns->nl.fd = -1;
    al_autoclose int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0)
        return al_error_set(err, -errno, "opening this thread's network namespace: %s",
                            strerror(errno));
    if (unshare(CLONE_NEWNET) != 0)
        return al_error_set(err, -errno, "creating a network namespace: %s", strerror(errno));
    int rc = 0;
    ns->nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (ns->nsfd < 0) {
        rc = al_error_set(err, -errno, "opening the new network namespace: %s", strerror(errno));
    } else {
        /* No IPv6 inside: the switch drops it anyway, and applications fail fast instead of
         * waiting for timeouts. (Absent when the kernel has no IPv6: fine.) */
        vswitch__sysctl_write("net/ipv6/conf/all/disable_ipv6", "1");
        vswitch__sysctl_write("net/ipv6/conf/default/disable_ipv6", "1");
        rc = vswitch_nl_open(&ns->nl, err);
        if (rc) {
            close(ns->nsfd);
            ns->nsfd = -1;
        }
    }
    if (setns(home, CLONE_NEWNET) != 0) {
        al_error("vswitch: cannot return to this thread's network namespace after making a "
                 "sandbox's: %s; stopping rather than working in the wrong namespace",
                 strerror(errno));
        abort();
    }
    return rc;
}

/* Configures the sandbox side: lo up, eth0 addr/prefix up, default route via the gateway. */
static int net__guest_config(struct vswitch *vs, struct vs_nl *gnl, const struct vs_iface *ifc,
                             struct al_error *err)
{
    int rc = vswitch_nl_link_set_up(gnl, 1, true, err);
    int eth = 0;
    if (!rc)
        rc = vswitch_nl_link_index(gnl, VSWITCH_GUEST_IFNAME, &eth, err);
    if (!rc)
        rc = vswitch_nl_addr_add(gnl, eth, ifc->addr, vs->cfg.prefix_len, err);
    if (!rc)
        rc = vswitch_nl_link_set_up(gnl, eth, true, err);
    if (!rc) {
        struct vs_route_spec r = {.kind = VS_ROUTE_DEFAULT_VIA,
                                  .table = VS_TABLE_MAIN,
                                  .gateway = ifc->gateway,
                                  .oif = eth,
                                  .protocol = VS_RTPROT};
        rc = vswitch_nl_route_add(gnl, &r, true, err);
    }
    if (rc)
        al_error_prefix(err, "configuring the sandbox side");
    return rc;
}

/* ---- half-made networks (struct vs_staged) ----------------------------------------------- */

/* The first part of a veth network (caller holds the lock): a slot, the namespace, the veth
 * pair (down) and the host side's qdisc. */
static int net__stage_make(struct vswitch *vs, struct vs_staged *st, struct al_error *err)
{
    uint32_t slot;
    int rc = vswitch__slot_alloc(vs, &slot, err);
    if (rc)
        return rc;
    char name[IFNAMSIZ];
    net__ifname(vs, slot, name);
    uint8_t host_mac[6], guest_mac[6];
    vswitch__slot_macs(slot, host_mac, guest_mac);

    struct net__ns ns;
    rc = net__ns_create(&ns, err);
    if (rc) {
        vswitch__slot_free(vs, slot);
        return rc;
    }
    struct vs_veth_spec spec = {.name = name,
                                .mac = host_mac,
                                .peer_name = VSWITCH_GUEST_IFNAME,
                                .peer_mac = guest_mac,
                                .peer_netns_fd = ns.nsfd};
    int ifindex = 0;
    rc = vswitch_nl_veth_add(&vs->nl, &spec, err);
    if (!rc) {
        rc = vswitch_nl_link_index(&vs->nl, name, &ifindex, err);
        if (!rc)
            rc = vswitch_nl_link_addrgen_none(&vs->nl, ifindex,
                                              err); /* no IPv6 from the host side */
        if (!rc)
            rc = vswitch__qdisc_ahead(vs, ifindex, err);
        /* (A failure after the veth cannot happen short of someone deleting it; should the
         * deletion fail too, the next vswitch_open removes the unattached interface.) */
        if (rc && ifindex > 0)
            vswitch_nl_link_del(&vs->nl, ifindex, NULL);
    }
    if (rc) {
        vswitch__slot_free(vs, slot);
        vswitch_nl_close(&ns.nl);
        close(ns.nsfd);
        return rc;
    }
    *st = (struct vs_staged){.slot = slot, .ifindex = ifindex, .nsfd = ns.nsfd, .nl = ns.nl};
    return 0;
}

/* Throws a half-made network away (caller holds the lock). */
static void net__stage_discard(struct vswitch *vs, struct vs_staged *st)
{
    vswitch_nl_link_del(&vs->nl, st->ifindex, NULL); /* (the sandbox side goes with it) */
    vswitch__slot_free(vs, st->slot);
    vswitch_nl_close(&st->nl);
    close(st->nsfd);
}

/* The rest (caller holds the lock): programs and identity while the link is still down (no
 * packet ever passes unattached), then up, the host route and neighbour, and the sandbox
 * side. st is used up either way: on failure its interface is gone and its slot free. */
static int net__finish_locked(struct vswitch *vs, const struct vswitch_sandbox *sb,
                              struct vs_staged *st, struct vswitch_net *out, struct al_error *err)
{
    char name[IFNAMSIZ];
    net__ifname(vs, st->slot, name);
    struct vs_iface ifc;
    vswitch__iface_init(vs, &ifc, st->slot, sb, name, sb ? 0 : VS_IF_POOL);
    int rc = vswitch__attach_locked(vs, st->ifindex, &ifc, err);
    if (rc) {
        vswitch_nl_link_del(&vs->nl, st->ifindex, NULL);
        vswitch__slot_free(vs, st->slot);
    } else {
        rc = vswitch_nl_link_set_up(&vs->nl, st->ifindex, true, err);
        if (!rc)
            rc = vswitch__host_routes(vs, st->ifindex, &ifc, err);
        if (!rc)
            rc = net__guest_config(vs, &st->nl, &ifc, err);
        if (rc)
            vswitch__detach_locked(vs, st->ifindex, NULL); /* (deletes it, frees the slot) */
    }
    vswitch_nl_close(&st->nl);
    if (rc) {
        close(st->nsfd);
        return rc;
    }
    net__fill(&ifc, st->ifindex, out);
    out->prefix_len = vs->cfg.prefix_len;
    out->netns_fd = st->nsfd;
    return 0;
}

/* Keeps min(VS_STAGE_MAX, pool_size) networks half-made (caller holds the lock). A failure
 * (no free slot, say) only leaves fewer: the next creation makes its own. */
static void net__stage_top_up(struct vswitch *vs)
{
    size_t want = vs->pool_size < VS_STAGE_MAX ? vs->pool_size : VS_STAGE_MAX;
    while (!vs->pool_stop && vs->stage_n < want) {
        struct al_error e = {0};
        if (net__stage_make(vs, &vs->stage[vs->stage_n], &e) != 0) {
            al_debug("vswitch: no network made ahead: %s", al_error_str(&e));
            return;
        }
        vs->stage_n++;
    }
}

/* Creates, attaches and configures one veth network (caller holds the lock), from the
 * oldest half-made one if there is one; then makes one ahead for a later creation. sb NULL
 * makes a pool network. */
static int net__create_locked(struct vswitch *vs, const struct vswitch_sandbox *sb,
                              struct vswitch_net *out, struct al_error *err)
{
    struct vs_staged st;
    int rc = -1;
    if (vs->stage_n > 0) {
        st = vs->stage[0];
        memmove(&vs->stage[0], &vs->stage[1], --vs->stage_n * sizeof vs->stage[0]);
        rc = net__finish_locked(vs, sb, &st, out, err);
        if (rc) {
            /* Unusable (its interface deleted behind our back?): a fresh one instead. */
            al_warn("vswitch: a network made ahead could not be finished (%s); making a new one",
                    al_error_str(err));
            al_error_clear(err);
        }
    }
    if (rc) {
        rc = net__stage_make(vs, &st, err);
        if (!rc)
            rc = net__finish_locked(vs, sb, &st, out, err);
    }
    net__stage_top_up(vs);
    return rc;
}

int vswitch_net_create(struct vswitch *vs, const struct vswitch_sandbox *sb,
                       struct vswitch_net *out, struct al_error *err)
{
    int rc = net__check_sandbox(sb, err);
    if (rc)
        return rc;
    vswitch__lock_for_sandbox(vs);
    int ifindex;
    struct vs_iface ifc;
    if (net__find_locked(vs, sb->id, &ifindex, &ifc) == 0) {
        pthread_mutex_unlock(&vs->mu);
        return al_error_set(err, -EEXIST, "sandbox %llu already has a network (%s)",
                            (unsigned long long)sb->id, ifc.ifname);
    }
    if (vs->pool_n > 0) {
        /* Hand out a ready network: one map update makes it live. */
        struct vswitch_net net = vs->pool[--vs->pool_n];
        __u32 key = (__u32)net.host_ifindex;
        if (bpf_map_lookup_elem(vs->view.map_ifaces, &key, &ifc) == 0) {
            ifc.sandbox_id = sb->id;
            ifc.flags &= ~VS_IF_POOL;
            memset(ifc.label, 0, sizeof ifc.label);
            if (sb->label)
                snprintf(ifc.label, sizeof ifc.label, "%s", sb->label);
            rc = vswitch__set_identity_locked(vs, net.host_ifindex, &ifc, err);
            if (rc == 0) {
                net.sandbox_id = sb->id;
                *out = net;
                pthread_mutex_unlock(&vs->mu);
                return 0;
            }
        }
        /* The pooled network is unusable: throw it away and build a fresh one. */
        vswitch__detach_locked(vs, net.host_ifindex, NULL);
        vswitch_net_close_fds(&net);
        al_error_clear(err);
    }
    rc = net__create_locked(vs, sb, out, err);
    pthread_mutex_unlock(&vs->mu);
    return rc;
}

void vswitch__lock_for_sandbox(struct vswitch *vs)
{
    atomic_fetch_add(&vs->sandbox_waiters, 1);
    pthread_mutex_lock(&vs->mu);
    if (atomic_fetch_sub(&vs->sandbox_waiters, 1) == 1)
        pthread_cond_broadcast(&vs->pool_cv); /* a fill waiting for its turn may go on */
}

int vswitch_pool_fill(struct vswitch *vs, struct al_error *err)
{
    pthread_mutex_lock(&vs->mu);
    if (!vs->pool && vs->pool_size) {
        vs->pool = calloc(vs->pool_size, sizeof *vs->pool);
        if (!vs->pool) {
            pthread_mutex_unlock(&vs->mu);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
    }
    /* One network at a time, and sandboxes first: one asking for a network meanwhile waits
     * for at most one creation, not for the whole fill (tens of milliseconds, more on a busy
     * machine), and takes a ready one as soon as there is one. */
    int rc = 0;
    vs->pool_fillers++;
    while (!vs->pool_stop && vs->pool_n < vs->pool_size) {
        while (atomic_load(&vs->sandbox_waiters) > 0 && !vs->pool_stop)
            pthread_cond_wait(&vs->pool_cv, &vs->mu); /* (mu is theirs meanwhile) */
        if (vs->pool_stop || vs->pool_n >= vs->pool_size)
            break;
        struct vswitch_net net;
        rc = net__create_locked(vs, NULL, &net, err);
        if (rc)
            break;
        vs->pool[vs->pool_n++] = net;
        pthread_mutex_unlock(&vs->mu); /* (others' chance: lookups, the pool's count) */
        if (vs->fill_step)
            vs->fill_step(vs, vs->fill_step_arg);
        pthread_mutex_lock(&vs->mu);
    }
    int ready = (int)vs->pool_n;
    if (--vs->pool_fillers == 0)
        pthread_cond_broadcast(&vs->pool_cv);
    pthread_mutex_unlock(&vs->mu);
    return rc ? rc : ready;
}

size_t vswitch_pool_ready(struct vswitch *vs)
{
    vswitch__lock_for_sandbox(vs); /* (a count, never worth waiting for a fill) */
    size_t n = vs->pool_n;
    pthread_mutex_unlock(&vs->mu);
    return n;
}

/* Waits (at most timeout_ms) until the interfaces of ifindex[] are gone; deletes the ones
 * still there then. */
static void net__wait_gone(struct vswitch *vs, const int *ifindex, size_t n, unsigned timeout_ms)
{
    uint64_t end = al_now_ns() + (uint64_t)timeout_ms * 1000000u;
    size_t left = n;
    for (unsigned pause_us = 200; left > 0; pause_us = pause_us < 20000 ? pause_us * 2 : pause_us) {
        left = 0;
        for (size_t i = 0; i < n; i++) {
            struct vs_nl_link_info l;
            if (ifindex[i] > 0 && vswitch_nl_link_get(&vs->nl, ifindex[i], &l, NULL) == 0)
                left++;
        }
        if (left == 0 || al_now_ns() >= end)
            break;
        usleep(pause_us);
    }
    if (left == 0)
        return;
    al_warn("vswitch: %zu pooled interface(s) still there %u ms after their namespaces were "
            "released; deleting them",
            left, timeout_ms);
    for (size_t i = 0; i < n; i++) {
        struct vs_nl_link_info l;
        if (ifindex[i] > 0 && vswitch_nl_link_get(&vs->nl, ifindex[i], &l, NULL) == 0 &&
            vswitch__mac_is_ours(l.mac) &&
            strncmp(l.name, vs->cfg.ifname_prefix, strlen(vs->cfg.ifname_prefix)) == 0)
            vswitch_nl_link_del(&vs->nl, ifindex[i], NULL);
    }
}

void vswitch__pool_drain(struct vswitch *vs)
{
    /* A fill running in another thread stops at its next network; wait for it. */
    vs->pool_stop = true;
    pthread_cond_broadcast(&vs->pool_cv); /* (a fill waiting for its turn) */
    while (vs->pool_fillers > 0)
        pthread_cond_wait(&vs->pool_cv, &vs->mu);
    /* Deleting the interfaces one by one costs a wait for an RCU barrier each (15-20 ms: 2-4 s
     * for a pool of 128). Nothing but our descriptors holds these networks' namespaces:
     * closing them lets the kernel destroy them all in one batch, the veth pairs with them
     * (one barrier for all). Identities go first (the programs drop whatever an interface
     * without one sends, the guard covers it too); then we wait until the interfaces are
     * gone, and delete any that is still there after a while ourselves. */
    size_t n = vs->pool_n + vs->stage_n, k = 0;
    int *gone = n ? calloc(n, sizeof *gone) : NULL;
    while (vs->pool_n > 0) {
        struct vswitch_net *net = &vs->pool[--vs->pool_n];
        if (gone) {
            vswitch__forget_locked(vs, net->host_ifindex);
            gone[k++] = net->host_ifindex;
        } else {
            vswitch__detach_locked(vs, net->host_ifindex, NULL);
        }
        vswitch_net_close_fds(net);
    }
    while (vs->stage_n > 0) {
        struct vs_staged *st = &vs->stage[--vs->stage_n];
        if (gone) {
            vswitch__slot_free(vs, st->slot);
            vswitch_nl_close(&st->nl);
            close(st->nsfd);
            gone[k++] = st->ifindex;
        } else {
            net__stage_discard(vs, st);
        }
    }
    net__wait_gone(vs, gone, k, 5000);
    free(gone);
}

/* ---- taps and foreign interfaces ------------------------------------------------------- */

static int net__same_netns(const struct vswitch *vs, struct al_error *err)
{
    /* A tap is created in the namespace of the thread that opens /dev/net/tun. */
    struct stat st;
    if (stat("/proc/thread-self/ns/net", &st) != 0)
        return al_error_set(err, -errno, "cannot stat this thread's network namespace: %s",
                            strerror(errno));
    if (st.st_ino != vs->netns_ino || st.st_dev != vs->netns_dev)
        return al_error_set(err, -EXDEV,
                            "this thread is not in the switch's network "
                            "namespace: create taps from a thread that is");
    return 0;
}

int vswitch_tap_create(struct vswitch *vs, const struct vswitch_sandbox *sb,
                       const struct vswitch_tap_opts *o, struct vswitch_net *out,
                       struct al_error *err)
{
    int rc = net__check_sandbox(sb, err);
    if (rc)
        return rc;
    rc = net__same_netns(vs, err);
    if (rc)
        return rc;
    vswitch__lock_for_sandbox(vs);
    int ifindex;
    struct vs_iface ifc;
    if (net__find_locked(vs, sb->id, &ifindex, &ifc) == 0) {
        pthread_mutex_unlock(&vs->mu);
        return al_error_set(err, -EEXIST, "sandbox %llu already has a network (%s)",
                            (unsigned long long)sb->id, ifc.ifname);
    }
    uint32_t slot;
    rc = vswitch__slot_alloc(vs, &slot, err);
    if (rc) {
        pthread_mutex_unlock(&vs->mu);
        return rc;
    }
    char name[IFNAMSIZ];
    net__ifname(vs, slot, name);
    vswitch__iface_init(vs, &ifc, slot, sb, name, VS_IF_TAP);
    if (o && o->guest_mac)
        memcpy(ifc.guest_mac, o->guest_mac, 6);

    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        rc = al_error_set(err, -errno, "opening /dev/net/tun: %s (is the tun module loaded?)",
                          strerror(errno));
        vswitch__slot_free(vs, slot);
        pthread_mutex_unlock(&vs->mu);
        return rc;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (o && o->vnet_hdr ? IFF_VNET_HDR : 0);
    if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
        rc = al_error_set(err, -errno, "creating tap %s: %s", name, strerror(errno));
        close(fd);
        vswitch__slot_free(vs, slot);
        pthread_mutex_unlock(&vs->mu);
        return rc;
    }
    ifindex = 0;
    rc = vswitch_nl_link_index(&vs->nl, name, &ifindex, err);
    if (!rc)
        rc = vswitch_nl_link_set_mac(&vs->nl, ifindex, ifc.host_mac, err);
    if (!rc)
        rc = vswitch_nl_link_addrgen_none(&vs->nl, ifindex, err);
    if (!rc)
        rc = vswitch__attach_locked(vs, ifindex, &ifc, err);
    if (rc) {
        close(fd); /* deletes the (unattached, down) tap */
        vswitch__slot_free(vs, slot);
        pthread_mutex_unlock(&vs->mu);
        return rc;
    }
    rc = vswitch_nl_link_set_up(&vs->nl, ifindex, true, err);
    if (!rc)
        rc = vswitch__host_routes(vs, ifindex, &ifc, err);
    if (rc) {
        vswitch__detach_locked(vs, ifindex, NULL);
        close(fd);
        pthread_mutex_unlock(&vs->mu);
        return rc;
    }
    net__fill(&ifc, ifindex, out);
    out->prefix_len = vs->cfg.prefix_len;
    out->tap_fd = fd;
    pthread_mutex_unlock(&vs->mu);
    return 0;
}

int vswitch_attach(struct vswitch *vs, int ifindex, const struct vswitch_sandbox *sb,
                   const uint8_t guest_mac[6], struct vswitch_net *out, struct al_error *err)
{
    int rc = net__check_sandbox(sb, err);
    if (rc)
        return rc;
    if (!guest_mac)
        return al_error_set(err, -EINVAL, "vswitch_attach needs the far end's MAC address");
    vswitch__lock_for_sandbox(vs);
    struct vs_nl_link_info l;
    rc = vswitch_nl_link_get(&vs->nl, ifindex, &l, err);
    if (rc)
        goto out;
    size_t plen = strlen(vs->cfg.ifname_prefix);
    if (strncmp(l.name, vs->cfg.ifname_prefix, plen) != 0 || !l.name[plen]) {
        rc = al_error_set(err, -EINVAL,
                          "interface %s is not named %s<something>: the "
                          "nftables guard would not cover it. Create it with that prefix",
                          l.name, vs->cfg.ifname_prefix);
        goto out;
    }
    if (l.flags & IFF_UP) {
        rc = al_error_set(err, -EBUSY,
                          "interface %s is up: attach it while it is down, so "
                          "that no packet passes unattached",
                          l.name);
        goto out;
    }
    bool tap = strcmp(l.kind, "tun") == 0;
    if (!tap && strcmp(l.kind, "veth") != 0) {
        rc = al_error_set(err, -EINVAL,
                          "interface %s is a '%s': only veth and tap interfaces "
                          "can be attached",
                          l.name, l.kind[0] ? l.kind : "device without a kind");
        goto out;
    }
    __u32 key = (__u32)ifindex;
    struct vs_iface ifc;
    if (bpf_map_lookup_elem(vs->view.map_ifaces, &key, &ifc) == 0 ||
        net__find_locked(vs, sb->id, &(int){0}, &ifc) == 0) {
        rc = al_error_set(err, -EEXIST, "interface %s or sandbox %llu is already attached", l.name,
                          (unsigned long long)sb->id);
        goto out;
    }
    uint32_t slot;
    rc = vswitch__slot_alloc(vs, &slot, err);
    if (rc)
        goto out;
    vswitch__iface_init(vs, &ifc, slot, sb, l.name, tap ? VS_IF_TAP : 0);
    memcpy(ifc.guest_mac, guest_mac, 6);
    rc = vswitch_nl_link_set_mac(&vs->nl, ifindex, ifc.host_mac, err);
    if (!rc)
        rc = vswitch_nl_link_addrgen_none(&vs->nl, ifindex, err);
    if (!rc)
        rc = vswitch__attach_locked(vs, ifindex, &ifc, err);
    if (rc) {
        vswitch__slot_free(vs, slot);
        goto out;
    }
    rc = vswitch_nl_link_set_up(&vs->nl, ifindex, true, err);
    if (!rc)
        rc = vswitch__host_routes(vs, ifindex, &ifc, err);
    if (rc) {
        vswitch__detach_locked(vs, ifindex, NULL);
        goto out;
    }
    net__fill(&ifc, ifindex, out);
    out->prefix_len = vs->cfg.prefix_len;
out:
    pthread_mutex_unlock(&vs->mu);
    return rc;
}

int vswitch_detach(struct vswitch *vs, int host_ifindex, struct al_error *err)
{
    vswitch__lock_for_sandbox(vs);
    int rc = vswitch__detach_locked(vs, host_ifindex, err);
    pthread_mutex_unlock(&vs->mu);
    return rc;
}

int vswitch_net_destroy(struct vswitch *vs, uint64_t sandbox_id, struct al_error *err)
{
    vswitch__lock_for_sandbox(vs);
    int ifindex;
    struct vs_iface ifc;
    int rc = net__find_locked(vs, sandbox_id, &ifindex, &ifc);
    if (rc)
        al_error_set(err, rc, "sandbox %llu has no network", (unsigned long long)sandbox_id);
    else
        rc = vswitch__detach_locked(vs, ifindex, err);
    pthread_mutex_unlock(&vs->mu);
    return rc;
}

int vswitch_net_find(struct vswitch *vs, uint64_t sandbox_id, struct vswitch_net *out)
{
    pthread_mutex_lock(&vs->mu);
    int ifindex;
    struct vs_iface ifc;
    int rc = net__find_locked(vs, sandbox_id, &ifindex, &ifc);
    if (!rc) {
        net__fill(&ifc, ifindex, out);
        out->prefix_len = vs->cfg.prefix_len;
    }
    pthread_mutex_unlock(&vs->mu);
    return rc;
}

void vswitch_net_close_fds(struct vswitch_net *net)
{
    if (net->netns_fd >= 0)
        close(net->netns_fd);
    if (net->tap_fd >= 0)
        close(net->tap_fd);
    net->netns_fd = -1;
    net->tap_fd = -1;
}
