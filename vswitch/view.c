/* vswitch/view: read access to a running switch's pinned state, and the proxy's side.
 *
 * Owns: finding an instance from its state directory (instance.json), opening its pinned
 * maps, peer-address lookups for airlock-egress, per-interface counters, the reason names,
 * and registering the proxy's sockets in the sockmap (with their reply mark).
 * A view needs no lock and no running loader: the pins are the truth.
 */
#include "internal.h"

#include "common/json.h"
#include "common/paths.h"
#include "common/util.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <sys/utsname.h>

static const char *const view__reasons[VS_R_MAX] = {
    [VS_R_TCP_SYN] = "tcp_syn",
    [VS_R_TCP_FLOW] = "tcp_flow",
    [VS_R_DNS_UDP] = "dns_udp",
    [VS_R_DNS_TCP_SYN] = "dns_tcp_syn",
    [VS_R_ARP_REPLY] = "arp_reply",
    [VS_R_ICMP_GATEWAY] = "icmp_gateway",
    [VS_R_TCP_ACK_LISTENER] = "tcp_ack_listener",
    [VS_R_NO_PROXY] = "no_proxy",
    [VS_R_UNASSIGNED] = "unassigned",
    [VS_R_UNKNOWN_IFACE] = "unknown_iface",
    [VS_R_SPOOFED] = "spoofed_source",
    [VS_R_IPV6] = "ipv6",
    [VS_R_FRAGMENT] = "fragment",
    [VS_R_IP_OPTIONS] = "ip_options",
    [VS_R_MALFORMED] = "malformed",
    [VS_R_RAW_FRAME] = "raw_frame",
    [VS_R_ARP_OTHER] = "arp_other",
    [VS_R_UDP] = "udp",
    [VS_R_ICMP] = "icmp",
    [VS_R_OTHER_PROTO] = "other_proto",
    [VS_R_TO_SANDBOX] = "to_sandbox",
    [VS_R_BAD_DESTINATION] = "bad_destination",
    [VS_R_TCP_NO_FLOW] = "tcp_no_flow",
    [VS_R_ASSIGN_FAILED] = "assign_failed",
    [VS_R_IN_REPLY] = "in_reply",
    [VS_R_IN_DROPPED] = "in_dropped",
};

const char *vswitch_reason_name(unsigned reason)
{
    return reason < VS_R_MAX ? view__reasons[reason] : NULL;
}

bool vswitch_reason_is_drop(unsigned reason)
{
    return reason < VS_R_MAX && !(reason <= VS_R_TCP_ACK_LISTENER || reason == VS_R_IN_REPLY);
}

const char *vswitch_proxy_sock_name(enum vswitch_proxy_sock kind)
{
    switch (kind) {
    case VSWITCH_PROXY_TCP:
        return "tcp";
    case VSWITCH_PROXY_DNS_UDP:
        return "dns_udp";
    case VSWITCH_PROXY_DNS_TCP:
        return "dns_tcp";
    }
    return "?";
}

/* ---- opening ------------------------------------------------------------------------- */

void vswitch__view_release(struct vswitch_view *v)
{
    if (!v->owns_fds)
        return;
    int *fds[] = {&v->map_config, &v->map_ifaces, &v->map_addrs, &v->map_counters, &v->map_sockets};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
}

int vswitch__view_open_fds(struct vswitch_view *v, const char *pin_dir, struct al_error *err)
{
    memset(v, 0, sizeof *v);
    v->owns_fds = true;
    v->map_config = v->map_ifaces = v->map_addrs = v->map_counters = v->map_sockets = -1;
    snprintf(v->pin_dir, sizeof v->pin_dir, "%s", pin_dir);
    struct {
        const char *name;
        int *fd;
    } maps[] = {{"vs_config", &v->map_config},
                {"vs_ifaces", &v->map_ifaces},
                {"vs_addrs", &v->map_addrs},
                {"vs_counters", &v->map_counters},
                {"vs_sockets", &v->map_sockets}};
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", pin_dir, maps[i].name);
        *maps[i].fd = bpf_obj_get(path);
        if (*maps[i].fd < 0) {
            int e = errno;
            vswitch__view_release(v);
            if (e == ENOENT)
                return al_error_set(err, -ENOENT,
                                    "no switch is pinned at %s (%s is missing): "
                                    "is airlockd running, with the same state directory?",
                                    pin_dir, maps[i].name);
            return al_error_set(err, -e, "opening %s: %s%s", path, strerror(e),
                                e == EPERM || e == EACCES ? " (run as root)" : "");
        }
    }
    struct vs_config cfg;
    __u32 zero = 0;
    if (bpf_map_lookup_elem(v->map_config, &zero, &cfg) != 0 || cfg.abi_version != VS_ABI_VERSION) {
        vswitch__view_release(v);
        return al_error_set(err, -EPROTO,
                            "the switch pinned at %s has layout version %u; this "
                            "build reads version %u",
                            pin_dir, cfg.abi_version, VS_ABI_VERSION);
    }
    v->ncpus = libbpf_num_possible_cpus();
    if (v->ncpus <= 0) {
        vswitch__view_release(v);
        return al_error_set(err, -EIO, "cannot count the CPUs");
    }
    return 0;
}

int vswitch__read_instance(const char *state_dir, char *pin_dir, size_t len, struct al_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", state_dir, VS_INSTANCE_FILE);
    json_t *o = al_json_load_file(path, NULL);
    if (!o)
        return al_error_set(err, -ENOENT,
                            "no virtual switch was started for %s (%s is "
                            "missing): start airlockd first, or pass --state-dir",
                            state_dir, path);
    const char *p = NULL;
    struct al_error e2 = {0};
    int rc = al_json_get_str(o, "pin_dir", true, &p, path, &e2);
    if (rc == 0 && (size_t)snprintf(pin_dir, len, "%s", p) >= len)
        rc = al_error_set(&e2, -ENAMETOOLONG, "%s: pin_dir is too long", path);
    json_decref(o);
    if (rc)
        return al_error_set(err, rc, "%s", al_error_str(&e2));
    return 0;
}

int vswitch_view_open_pins(const char *pin_dir, struct vswitch_view **out, struct al_error *err)
{
    *out = NULL;
    struct vswitch_view *v = calloc(1, sizeof *v);
    if (!v)
        return al_error_set(err, -ENOMEM, "out of memory");
    int rc = vswitch__view_open_fds(v, pin_dir, err);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

int vswitch_view_open(const char *state_dir, struct vswitch_view **out, struct al_error *err)
{
    char pin_dir[PATH_MAX];
    int rc = vswitch__read_instance(state_dir ? state_dir : al_state_dir(), pin_dir, sizeof pin_dir,
                                    err);
    if (rc)
        return rc;
    return vswitch_view_open_pins(pin_dir, out, err);
}

void vswitch_view_close(struct vswitch_view *v)
{
    if (!v)
        return;
    vswitch__view_release(v);
    free(v);
}

int vswitch_view_config(const struct vswitch_view *v, struct vs_config *out)
{
    __u32 zero = 0;
    return bpf_map_lookup_elem(v->map_config, &zero, out) ? -errno : 0;
}

static int view__max_entries(int fd, unsigned *out)
{
    struct bpf_map_info info;
    __u32 len = sizeof info;
    memset(&info, 0, sizeof info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0)
        return -errno;
    *out = info.max_entries;
    return 0;
}

int vswitch_view_max_ifaces(const struct vswitch_view *v, unsigned *out)
{
    return view__max_entries(v->map_ifaces, out);
}

int vswitch__pinned_max_entries(const char *path, unsigned *out)
{
    int fd = bpf_obj_get(path);
    if (fd < 0)
        return -errno;
    int rc = view__max_entries(fd, out);
    close(fd);
    return rc;
}

/* ---- lookups ------------------------------------------------------------------------ */

int vswitch_view_peer(const struct vswitch_view *v, struct in_addr peer, struct vswitch_peer *out)
{
    struct vs_addr_entry a;
    if (bpf_map_lookup_elem(v->map_addrs, &peer.s_addr, &a) != 0)
        return -ENOENT;
    memset(out, 0, sizeof *out);
    out->sandbox_id = a.sandbox_id;
    out->host_ifindex = (int)a.ifindex;
    memcpy(out->label, a.label, sizeof a.label);
    out->label[VSWITCH_LABEL_MAX] = '\0';
    return 0;
}

static int view__cmp_slot(const void *a, const void *b)
{
    const struct vswitch_iface_info *x = a, *y = b;
    return x->iface.slot < y->iface.slot ? -1 : x->iface.slot > y->iface.slot;
}

int vswitch_view_foreach(const struct vswitch_view *v,
                         int (*cb)(const struct vswitch_iface_info *i, void *arg), void *arg)
{
    size_t n = 0, cap = 32;
    struct vswitch_iface_info *all = malloc(cap * sizeof *all);
    if (!all)
        return -ENOMEM;
    __u32 key, next, *prev = NULL;
    while (bpf_map_get_next_key(v->map_ifaces, prev, &next) == 0) {
        if (n == cap) {
            struct vswitch_iface_info *p = realloc(all, (cap *= 2) * sizeof *all);
            if (!p) {
                free(all);
                return -ENOMEM;
            }
            all = p;
        }
        if (bpf_map_lookup_elem(v->map_ifaces, &next, &all[n].iface) == 0) {
            all[n].host_ifindex = (int)next;
            n++;
        }
        key = next;
        prev = &key;
    }
    qsort(all, n, sizeof *all, view__cmp_slot);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = cb(&all[i], arg);
    free(all);
    return rc;
}

int vswitch_view_counters(const struct vswitch_view *v, int host_ifindex,
                          struct vswitch_counters *out)
{
    struct vs_counters *per = calloc((size_t)v->ncpus, sizeof *per);
    if (!per)
        return -ENOMEM;
    __u32 key = (__u32)host_ifindex;
    if (bpf_map_lookup_elem(v->map_counters, &key, per) != 0) {
        int e = errno;
        free(per);
        return -e;
    }
    memset(out, 0, sizeof *out);
    for (int c = 0; c < v->ncpus; c++) {
        for (unsigned r = 0; r < VS_R_MAX; r++) {
            out->packets[r] += per[c].packets[r];
            out->bytes[r] += per[c].bytes[r];
        }
    }
    free(per);
    return 0;
}

/* ---- the proxy's sockets --------------------------------------------------------------- */

static int view__sockopt_int(int fd, int level, int opt, int *val)
{
    socklen_t len = sizeof *val;
    return getsockopt(fd, level, opt, val, &len) == 0 ? 0 : -errno;
}

/* Linux 6.5 is the first kernel whose bpf_sk_assign takes a socket with SO_REUSEPORT set
 * (before it: -ESOCKTNOSUPPORT for any such socket, even alone in its group). */
bool vswitch_assign_takes_reuseport(char *kernel, size_t len)
{
    struct utsname u;
    int maj = 0, min = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &maj, &min) != 2) {
        if (kernel && len)
            snprintf(kernel, len, "%s", "unknown");
        return false;
    }
    if (kernel && len)
        snprintf(kernel, len, "%s", u.release);
    return maj > 6 || (maj == 6 && min >= 5);
}

/* The checks spare the proxy's authors a silent failure: a socket without IP_TRANSPARENT
 * accepts, but cannot answer from the original destination; a SO_REUSEPORT socket on a
 * kernel before 6.5 is registered fine but every packet handed to it fails (assign_failed). */
static int view__check_socket(enum vswitch_proxy_sock kind, int fd, struct al_error *err)
{
    const char *name = vswitch_proxy_sock_name(kind);
    int type = 0, domain = 0, transparent = 0, listening = 0, origdst = 0;
    if (view__sockopt_int(fd, SOL_SOCKET, SO_TYPE, &type) != 0 ||
        view__sockopt_int(fd, SOL_SOCKET, SO_DOMAIN, &domain) != 0)
        return al_error_set(err, -ENOTSOCK, "proxy socket %s: fd %d is not a socket", name, fd);
    if (domain != AF_INET)
        return al_error_set(err, -EAFNOSUPPORT,
                            "proxy socket %s must be AF_INET (sandboxes "
                            "speak IPv4 only)",
                            name);
    view__sockopt_int(fd, SOL_IP, IP_TRANSPARENT, &transparent);
    if (!transparent)
        return al_error_set(err, -EINVAL,
                            "proxy socket %s needs IP_TRANSPARENT (set it "
                            "before bind; needs CAP_NET_ADMIN)",
                            name);
    int reuseport = 0;
    view__sockopt_int(fd, SOL_SOCKET, SO_REUSEPORT, &reuseport);
    char kernel[65];
    if (reuseport && !vswitch_assign_takes_reuseport(kernel, sizeof kernel))
        return al_error_set(err, -EOPNOTSUPP,
                            "proxy socket %s has SO_REUSEPORT, and this kernel (%s) cannot hand "
                            "packets to such sockets (bpf_sk_assign takes them from Linux 6.5): "
                            "every sandbox packet would be dropped as assign_failed. Use one "
                            "socket without SO_REUSEPORT (airlock-egress --listener-mode shared "
                            "or auto)",
                            name, kernel);
    if (kind == VSWITCH_PROXY_DNS_UDP) {
        if (type != SOCK_DGRAM)
            return al_error_set(err, -EINVAL, "proxy socket %s must be SOCK_DGRAM", name);
        view__sockopt_int(fd, SOL_IP, IP_RECVORIGDSTADDR, &origdst);
        if (!origdst)
            return al_error_set(err, -EINVAL,
                                "proxy socket %s needs IP_RECVORIGDSTADDR, or "
                                "it cannot tell which address a query was sent to",
                                name);
    } else {
        if (type != SOCK_STREAM)
            return al_error_set(err, -EINVAL, "proxy socket %s must be SOCK_STREAM", name);
        view__sockopt_int(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening);
        if (!listening)
            return al_error_set(err, -EINVAL,
                                "proxy socket %s must be listening (call "
                                "listen() before registering)",
                                name);
    }
    return 0;
}

int vswitch_proxy_register(const struct vswitch_view *v, enum vswitch_proxy_sock kind, int fd,
                           struct al_error *err)
{
    if ((unsigned)kind >= VS_SOCK_MAX)
        return al_error_set(err, -EINVAL, "unknown proxy socket kind %d", (int)kind);
    int rc = view__check_socket(kind, fd, err);
    if (rc)
        return rc;
    struct vs_config cfg;
    rc = vswitch_view_config(v, &cfg);
    if (rc)
        return al_error_set(err, rc, "reading the switch configuration: %s", strerror(-rc));
    int mark = (int)cfg.reply_mark;
    if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0)
        return al_error_set(err, -errno,
                            "setting SO_MARK on proxy socket %s: %s (needs "
                            "CAP_NET_ADMIN)",
                            vswitch_proxy_sock_name(kind), strerror(errno));
    __u32 key = (__u32)kind;
    __u64 val = (__u64)fd;
    if (bpf_map_update_elem(v->map_sockets, &key, &val, BPF_ANY) != 0)
        return al_error_set(err, -errno, "registering proxy socket %s: %s",
                            vswitch_proxy_sock_name(kind), strerror(errno));
    return 0;
}

int vswitch_proxy_unregister(const struct vswitch_view *v, enum vswitch_proxy_sock kind,
                             struct al_error *err)
{
    __u32 key = (__u32)kind;
    if (bpf_map_delete_elem(v->map_sockets, &key) != 0 && errno != ENOENT)
        return al_error_set(err, -errno, "unregistering proxy socket %s: %s",
                            vswitch_proxy_sock_name(kind), strerror(errno));
    return 0;
}

bool vswitch_proxy_registered(const struct vswitch_view *v, enum vswitch_proxy_sock kind,
                              uint64_t *cookie)
{
    __u32 key = (__u32)kind;
    __u64 val = 0;
    if (bpf_map_lookup_elem(v->map_sockets, &key, &val) != 0)
        return false;
    if (cookie)
        *cookie = val;
    return true;
}
