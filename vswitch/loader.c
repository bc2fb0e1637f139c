/* vswitch/loader: the life of a switch instance.
 *
 * Owns: vswitch_open (host checks, lock, programs and pinned maps, fwmark rule, local route
 * table, nftables guard, re-adoption of what a previous process left), attaching the two
 * programs to an interface (TCX links pinned per interface, or legacy clsact filters) with
 * the identity behind it, detaching (which always deletes the interface), vswitch_close and
 * vswitch_destroy.
 *
 * Invariant: an interface named <prefix>* is either down and unattached (the guard covers
 * it), or attached with an identity in vs_ifaces. Identities go before interfaces, programs
 * go with them: nothing is ever detached from a live interface.
 */
#include "internal.h"

#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "vswitch.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>

#define VS_BPF_TCX_INGRESS   46 /* missing from Debian 12's UAPI headers */
#define VS_BPF_TCX_EGRESS    47
#define VS_BPF_F_BEFORE      (1u << 3)
#define VS_BPF_LINK_TYPE_TCX 11

static const char *const loader__maps[] = {"vs_config", "vs_ifaces", "vs_addrs", "vs_counters",
                                           "vs_sockets"};

/* libbpf's messages go to our log (warnings and errors only; debug when asked). The format
 * is libbpf's own (the callback's contract), hence not a literal. */
__attribute__((format(printf, 2, 0))) static int loader__libbpf_print(enum libbpf_print_level level,
                                                                      const char *fmt, va_list ap)
{
    if (level == LIBBPF_DEBUG && al_log_get_level() > AL_LOG_DEBUG)
        return 0;
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    size_t n = strlen(buf);
    while (n && buf[n - 1] == '\n')
        buf[--n] = '\0';
    /* bpf_tc_hook_create on an interface that has its clsact qdisc already: expected. */
    if (strstr(buf, "Exclusivity flag on"))
        level = LIBBPF_DEBUG;
    if (level == LIBBPF_WARN)
        al_warn("%s", buf);
    else
        al_debug("%s", buf);
    return 0;
}

static pthread_once_t loader__once = PTHREAD_ONCE_INIT;
static void loader__init_once(void)
{
    libbpf_set_print(loader__libbpf_print);
}

/* ---- attachment ------------------------------------------------------------------------ */

static void loader__link_path(const struct vswitch *vs, int ifindex, bool ingress, char *out,
                              size_t len)
{
    snprintf(out, len, "%s/links/%d_%s", vs->view.pin_dir, ifindex, ingress ? "in" : "eg");
}

/* The ifindex a pinned TCX link is attached to (0 once its device is gone). */
static int loader__tcx_link_ifindex(int link_fd)
{
    struct bpf_link_info info;
    __u32 len = sizeof info;
    memset(&info, 0, sizeof info);
    if (bpf_obj_get_info_by_fd(link_fd, &info, &len) != 0)
        return -errno;
    if (info.type != VS_BPF_LINK_TYPE_TCX)
        return -EINVAL;
    /* Debian 12's headers lack info.tcx; its ifindex sits where info.xdp.ifindex is. */
    return (int)info.xdp.ifindex;
}

static int loader__attach_tcx(struct vswitch *vs, int ifindex, bool ingress, struct al_error *err)
{
    int prog =
        bpf_program__fd(ingress ? vs->skel->progs.vs_from_sandbox : vs->skel->progs.vs_to_sandbox);
    char path[PATH_MAX];
    loader__link_path(vs, ifindex, ingress, path, sizeof path);
    int lfd = bpf_obj_get(path);
    if (lfd >= 0) {
        if (loader__tcx_link_ifindex(lfd) == ifindex) {
            int rc = bpf_link_update(lfd, prog, NULL);
            close(lfd);
            if (rc)
                return al_error_set(err, rc, "updating the program on interface %d: %s", ifindex,
                                    strerror(-rc));
            return 0;
        }
        close(lfd);
        unlink(path);
    }
    LIBBPF_OPTS(bpf_link_create_opts, lo, .flags = VS_BPF_F_BEFORE);
    lfd = bpf_link_create(prog, ifindex, ingress ? VS_BPF_TCX_INGRESS : VS_BPF_TCX_EGRESS, &lo);
    if (lfd < 0)
        return al_error_set(err, lfd, "attaching to interface %d (%s): %s", ifindex,
                            ingress ? "tcx ingress" : "tcx egress", strerror(-lfd));
    int rc = bpf_obj_pin(lfd, path);
    if (rc) {
        rc = -errno;
        close(lfd); /* releases (detaches) the link: the caller deletes the interface */
        return al_error_set(err, rc, "pinning the link at %s: %s", path, strerror(-rc));
    }
    close(lfd);
    return 0;
}

static int loader__attach_clsact(struct vswitch *vs, int ifindex, bool ingress,
                                 struct al_error *err)
{
    int prog =
        bpf_program__fd(ingress ? vs->skel->progs.vs_from_sandbox : vs->skel->progs.vs_to_sandbox);
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
                .attach_point = ingress ? BPF_TC_INGRESS : BPF_TC_EGRESS);
    int rc = 0;
    if (ingress) { /* one clsact qdisc carries both directions */
        rc = bpf_tc_hook_create(&hook);
        if (rc && rc != -EEXIST)
            return al_error_set(err, rc, "creating the clsact qdisc on interface %d: %s", ifindex,
                                strerror(-rc));
    }
    LIBBPF_OPTS(bpf_tc_opts, o, .handle = VS_TC_HANDLE, .priority = VS_TC_PRIORITY, .prog_fd = prog,
                .flags = BPF_TC_F_REPLACE);
    rc = bpf_tc_attach(&hook, &o);
    if (rc)
        return al_error_set(err, rc, "attaching the %s filter to interface %d: %s",
                            ingress ? "ingress" : "egress", ifindex, strerror(-rc));
    return 0;
}

int vswitch__qdisc_ahead(struct vswitch *vs, int ifindex, struct al_error *err)
{
    if (vs->cfg.attach_mode == VS_ATTACH_TCX)
        return 0; /* (no qdisc: a TCX link waits for its own grace period at the attach) */
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
    int rc = bpf_tc_hook_create(&hook);
    if (rc && rc != -EEXIST)
        return al_error_set(err, rc, "creating the clsact qdisc on interface %d: %s", ifindex,
                            strerror(-rc));
    return 0;
}

static int loader__attach_progs(struct vswitch *vs, int ifindex, struct al_error *err)
{
    for (int i = 0; i < 2; i++) {
        bool ingress = i == 0;
        int rc = vs->cfg.attach_mode == VS_ATTACH_TCX
                     ? loader__attach_tcx(vs, ifindex, ingress, err)
                     : loader__attach_clsact(vs, ifindex, ingress, err);
        if (rc)
            return rc;
    }
    return 0;
}

static void loader__unpin_links(struct vswitch *vs, int ifindex)
{
    char path[PATH_MAX];
    for (int i = 0; i < 2; i++) {
        loader__link_path(vs, ifindex, i == 0, path, sizeof path);
        unlink(path);
    }
}

static int loader__counters_reset(struct vswitch *vs, __u32 key, __u64 flags)
{
    size_t sz = sizeof(struct vs_counters) * (size_t)vs->view.ncpus;
    void *zero = calloc(1, sz);
    if (!zero)
        return -ENOMEM;
    int rc = bpf_map_update_elem(vs->view.map_counters, &key, zero, flags) ? -errno : 0;
    free(zero);
    return rc == -EEXIST && flags == BPF_NOEXIST ? 0 : rc;
}

int vswitch__set_identity_locked(struct vswitch *vs, int ifindex, struct vs_iface *ifc,
                                 struct al_error *err)
{
    __u32 key = (__u32)ifindex;
    if (bpf_map_update_elem(vs->view.map_ifaces, &key, ifc, BPF_ANY) != 0)
        return al_error_set(err, -errno, "recording the identity of interface %d: %s", ifindex,
                            strerror(errno));
    if (!(ifc->flags & VS_IF_POOL)) {
        struct vs_addr_entry a = {
            .sandbox_id = ifc->sandbox_id, .ifindex = key, .flags = ifc->flags};
        memcpy(a.label, ifc->label, sizeof a.label);
        if (bpf_map_update_elem(vs->view.map_addrs, &ifc->addr, &a, BPF_ANY) != 0)
            return al_error_set(err, -errno, "recording the address of interface %d: %s", ifindex,
                                strerror(errno));
    }
    return 0;
}

int vswitch__attach_locked(struct vswitch *vs, int ifindex, const struct vs_iface *ifc_in,
                           struct al_error *err)
{
    struct vs_iface ifc = *ifc_in;
    __u32 key = (__u32)ifindex;
    int rc = loader__counters_reset(vs, key, BPF_ANY);
    if (rc)
        return al_error_set(err, rc, "creating the counters of interface %d: %s", ifindex,
                            strerror(-rc));
    rc = vswitch__set_identity_locked(vs, ifindex, &ifc, err);
    if (!rc)
        rc = loader__attach_progs(vs, ifindex, err);
    if (rc) {
        bpf_map_delete_elem(vs->view.map_ifaces, &key);
        if (!(ifc.flags & VS_IF_POOL))
            bpf_map_delete_elem(vs->view.map_addrs, &ifc.addr);
        bpf_map_delete_elem(vs->view.map_counters, &key);
        loader__unpin_links(vs, ifindex);
    }
    return rc;
}

/* Forgets an interface that no longer exists (or is being deleted right now). */
static void loader__forget(struct vswitch *vs, int ifindex, const struct vs_iface *ifc)
{
    __u32 key = (__u32)ifindex;
    bpf_map_delete_elem(vs->view.map_ifaces, &key);
    struct vs_addr_entry a;
    if (bpf_map_lookup_elem(vs->view.map_addrs, &ifc->addr, &a) == 0 && a.ifindex == key)
        bpf_map_delete_elem(vs->view.map_addrs, &ifc->addr);
    loader__unpin_links(vs, ifindex);
    bpf_map_delete_elem(vs->view.map_counters, &key);
    if (ifc->slot < vs->nslots)
        vswitch__slot_free(vs, ifc->slot);
}

static int loader__detach(struct vswitch *vs, int ifindex, bool free_slot, struct al_error *err)
{
    __u32 key = (__u32)ifindex;
    struct vs_iface ifc;
    if (bpf_map_lookup_elem(vs->view.map_ifaces, &key, &ifc) != 0)
        return al_error_set(err, -ENOENT, "interface %d is not attached to the switch", ifindex);
    /* Identity first: from here every packet on it is dropped as unknown. */
    bpf_map_delete_elem(vs->view.map_ifaces, &key);
    struct vs_addr_entry a;
    if (bpf_map_lookup_elem(vs->view.map_addrs, &ifc.addr, &a) == 0 && a.ifindex == key)
        bpf_map_delete_elem(vs->view.map_addrs, &ifc.addr);
    /* Then the interface (the kernel takes the programs with it), only then the pins. */
    struct vs_nl_link_info l;
    if (vswitch_nl_link_get(&vs->nl, ifindex, &l, NULL) == 0 && strcmp(l.name, ifc.ifname) == 0) {
        int rc = vswitch_nl_link_del(&vs->nl, ifindex, err);
        if (rc && rc != -ENODEV) {
            /* Keep the programs attached: the interface lives on, without identity. */
            return rc;
        }
    }
    if (!free_slot)
        ifc.slot = UINT32_MAX;
    loader__forget(vs, ifindex, &ifc);
    return 0;
}

int vswitch__detach_locked(struct vswitch *vs, int ifindex, struct al_error *err)
{
    return loader__detach(vs, ifindex, true, err);
}

void vswitch__forget_locked(struct vswitch *vs, int ifindex)
{
    __u32 key = (__u32)ifindex;
    struct vs_iface ifc;
    if (bpf_map_lookup_elem(vs->view.map_ifaces, &key, &ifc) == 0)
        loader__forget(vs, ifindex, &ifc);
}

void vswitch__iface_init(struct vswitch *vs, struct vs_iface *ifc, uint32_t slot,
                         const struct vswitch_sandbox *sb, const char *ifname, uint32_t flags)
{
    memset(ifc, 0, sizeof *ifc);
    ifc->slot = slot;
    ifc->flags = flags;
    vswitch__slot_addrs(vs, slot, &ifc->gateway, &ifc->addr);
    vswitch__slot_macs(slot, ifc->host_mac, ifc->guest_mac);
    snprintf(ifc->ifname, sizeof ifc->ifname, "%s", ifname);
    if (sb) {
        ifc->sandbox_id = sb->id;
        if (sb->label)
            snprintf(ifc->label, sizeof ifc->label, "%s", sb->label);
    }
}

int vswitch__host_routes(struct vswitch *vs, int ifindex, const struct vs_iface *ifc,
                         struct al_error *err)
{
    struct vs_route_spec r = {.kind = VS_ROUTE_UNICAST_DEV,
                              .table = VS_TABLE_MAIN,
                              .dst = ifc->addr,
                              .dst_len = 32,
                              .oif = ifindex,
                              .protocol = VS_RTPROT};
    int rc = vswitch_nl_route_add(&vs->nl, &r, true, err);
    if (!rc)
        rc = vswitch_nl_neigh_add(&vs->nl, ifindex, ifc->addr, ifc->guest_mac, err);
    return rc;
}

/* ---- instance record and lock -------------------------------------------------------- */

static int loader__lock(struct vswitch *vs, struct al_error *err)
{
    char dir[PATH_MAX], path[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/vswitch", vs->state_dir);
    int rc = al_mkdir_p(dir, 0700);
    if (rc)
        return al_error_set(err, rc, "cannot create %s: %s", dir, strerror(-rc));
    snprintf(path, sizeof path, "%s/%s", vs->state_dir, VS_LOCK_FILE);
    vs->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (vs->lock_fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    if (flock(vs->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(vs->lock_fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(vs->lock_fd);
        vs->lock_fd = -1;
        return al_error_set(err, -EBUSY,
                            "another process (pid %s) has the switch of %s open "
                            "(lock %s)",
                            pid[0] ? pid : "?", vs->state_dir, path);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(vs->lock_fd, 0) == 0 && pwrite(vs->lock_fd, pid, (size_t)len, 0) < 0)
        al_debug("vswitch: cannot write the lock file's pid");
    return 0;
}

static const char *loader__mode_name(uint32_t mode)
{
    return mode == VS_ATTACH_TCX ? "tcx" : mode == VS_ATTACH_CLSACT ? "clsact" : "?";
}

static int loader__write_instance(struct vswitch *vs, struct al_error *err)
{
    char range[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &vs->cfg.range_addr, range, sizeof range);
    char cidr[40];
    snprintf(cidr, sizeof cidr, "%s/%u", range, vs->cfg.range_len);
    json_t *o = json_pack(
        "{s:i, s:s, s:s, s:s, s:i, s:s, s:s, s:I, s:I, s:I, s:I, s:s, s:i}", "abi_version",
        (int)vs->cfg.abi_version, "pin_dir", vs->view.pin_dir, "state_dir", vs->state_dir, "range",
        cidr, "prefix_len", (int)vs->cfg.prefix_len, "ifname_prefix", vs->cfg.ifname_prefix,
        "nft_table", vs->cfg.nft_table, "steer_mark", (json_int_t)vs->cfg.steer_mark, "reply_mark",
        (json_int_t)vs->cfg.reply_mark, "route_table", (json_int_t)vs->cfg.route_table,
        "rule_priority", (json_int_t)vs->cfg.rule_priority, "attach_mode",
        loader__mode_name(vs->cfg.attach_mode), "pid", (int)getpid());
    if (o)
        json_object_set_new(o, "max_interfaces", json_integer(vs->max_ifaces));
    if (!o)
        return al_error_set(err, -ENOMEM, "out of memory");
    char *s = al_json_dump(o);
    json_decref(o);
    if (!s)
        return al_error_set(err, -ENOMEM, "out of memory");
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", vs->state_dir, VS_INSTANCE_FILE);
    size_t len = strlen(s);
    s[len] = '\n';
    int rc = al_write_file_atomic(path, s, len + 1, 0644, err);
    free(s);
    return rc;
}

/* ---- configuration ------------------------------------------------------------------- */

static void loader__cfg_from_settings(const struct vs_settings *s, struct vs_config *c)
{
    memset(c, 0, sizeof *c);
    c->abi_version = VS_ABI_VERSION;
    c->prefix_len = s->prefix_len;
    c->range_addr = s->range_addr;
    c->range_len = s->range_len;
    c->steer_mark = s->steer_mark;
    c->reply_mark = s->reply_mark;
    c->route_table = s->route_table;
    c->rule_priority = s->rule_priority;
    c->attach_mode = (uint32_t)s->attach_mode;
    snprintf(c->ifname_prefix, sizeof c->ifname_prefix, "%s", s->ifname_prefix);
    snprintf(c->nft_table, sizeof c->nft_table, "%s", s->nft_table);
}

/* An existing instance keeps its settings: asking for different ones is an error that
 * names the first difference (changing them needs a teardown, which ends every sandbox). */
static int loader__cfg_compare(const struct vs_config *have, const struct vs_config *want,
                               const char *pin_dir, struct al_error *err)
{
    const char *what = NULL;
    if (have->abi_version != want->abi_version)
        what = "the pinned maps' layout (ABI version)";
    else if (have->range_addr != want->range_addr || have->range_len != want->range_len)
        what = "address range";
    else if (have->prefix_len != want->prefix_len)
        what = "per-sandbox prefix length";
    else if (have->steer_mark != want->steer_mark || have->reply_mark != want->reply_mark)
        what = "marks";
    else if (have->route_table != want->route_table || have->rule_priority != want->rule_priority)
        what = "route table or rule priority";
    else if (strcmp(have->ifname_prefix, want->ifname_prefix) != 0)
        what = "interface prefix";
    else if (strcmp(have->nft_table, want->nft_table) != 0)
        what = "nftables table";
    else if (want->attach_mode && have->attach_mode != want->attach_mode)
        what = "attach mode";
    if (!what)
        return 0;
    return al_error_set(err, -EEXIST,
                        "the switch pinned at %s was started with a different "
                        "%s: keep the old setting, or end every sandbox and tear it down first "
                        "(vswitch_destroy)",
                        pin_dir, what);
}

/* The interface tables' size of an instance that is already pinned: the one it was created
 * with. Asking for another is an error like a different range (the kernel cannot resize a
 * map, and libbpf would refuse the pinned one with a bare "parameter mismatch"); a teardown
 * takes the pinned size, whatever it is asked. */
static int loader__table_size(struct vs_settings *s, bool for_teardown, struct al_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/vs_ifaces", s->pin_dir);
    unsigned have = 0;
    int rc = vswitch__pinned_max_entries(path, &have);
    if (rc == -ENOENT)
        return 0;
    if (rc)
        return al_error_set(err, rc, "reading the size of the pinned map %s: %s", path,
                            strerror(-rc));
    if (have == s->max_ifaces)
        return 0;
    if (for_teardown) {
        s->max_ifaces = have;
        return 0;
    }
    return al_error_set(err, -EEXIST,
                        "the switch pinned at %s was started with an interface table of %u "
                        "entries, not %u (network.max_interfaces): keep the old setting, or end "
                        "every sandbox and tear it down first (airlock vswitch teardown)",
                        s->pin_dir, have, s->max_ifaces);
}

/* The default attach mode. Both keep the programs on the interface after the loader is
 * gone and are replaced atomically on re-adoption. clsact is the default: attaching a TCX
 * program waits for an RCU grace period per direction, which measured 25-30 ms per network
 * on a loaded host (0.2 ms for clsact); TCX is available on request (kernel >= 6.6). */
static uint32_t loader__default_attach_mode(void)
{
    return VS_ATTACH_CLSACT;
}

/* ---- re-adoption ------------------------------------------------------------------------ */

/* Interfaces with our name prefix and MAC signature but no identity: left down and
 * unattached by a process that died in the middle of creating them. */
struct loader__orphans {
    struct vswitch *vs;
    int idx[64];
    size_t n;
};

static int loader__orphan_cb(const struct vs_nl_link_info *l, void *arg)
{
    struct loader__orphans *o = arg;
    if (strncmp(l->name, o->vs->cfg.ifname_prefix, strlen(o->vs->cfg.ifname_prefix)) != 0 ||
        !vswitch__mac_is_ours(l->mac))
        return 0;
    __u32 k = (__u32)l->ifindex;
    struct vs_iface ifc;
    if (bpf_map_lookup_elem(o->vs->view.map_ifaces, &k, &ifc) == 0)
        return 0;
    if (o->n < AL_ARRAY_SIZE(o->idx))
        o->idx[o->n++] = l->ifindex;
    return 0;
}

static void loader__delete_orphans(struct vswitch *vs)
{
    struct loader__orphans o = {.vs = vs};
    if (vswitch_nl_link_dump(&vs->nl, loader__orphan_cb, &o, NULL) < 0)
        return;
    for (size_t i = 0; i < o.n; i++) {
        al_info("vswitch: deleting unattached interface %d left by a previous run", o.idx[i]);
        vswitch_nl_link_del(&vs->nl, o.idx[i], NULL);
    }
}

static int loader__readopt(struct vswitch *vs, struct al_error *err)
{
    /* Collect first: entries are deleted while we go. */
    size_t n = 0, cap = 64;
    __u32 *keys = malloc(cap * sizeof *keys);
    if (!keys)
        return al_error_set(err, -ENOMEM, "out of memory");
    __u32 key, next;
    __u32 *prev = NULL;
    while (bpf_map_get_next_key(vs->view.map_ifaces, prev, &next) == 0) {
        if (n == cap) {
            __u32 *k = realloc(keys, (cap *= 2) * sizeof *keys);
            if (!k) {
                free(keys);
                return al_error_set(err, -ENOMEM, "out of memory");
            }
            keys = k;
        }
        keys[n++] = next;
        key = next;
        prev = &key;
    }

    int rc = 0;
    size_t adopted = 0, dropped = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        int ifindex = (int)keys[i];
        struct vs_iface ifc;
        if (bpf_map_lookup_elem(vs->view.map_ifaces, &keys[i], &ifc) != 0)
            continue;
        struct vs_nl_link_info l;
        bool alive = vswitch_nl_link_get(&vs->nl, ifindex, &l, NULL) == 0 &&
                     strcmp(l.name, ifc.ifname) == 0 && memcmp(l.mac, ifc.host_mac, 6) == 0;
        uint32_t gw, addr;
        bool consistent = ifc.slot < vs->nslots;
        if (consistent) {
            vswitch__slot_addrs(vs, ifc.slot, &gw, &addr);
            consistent = gw == ifc.gateway && addr == ifc.addr && !vs->slot_used[ifc.slot];
        }
        if (!alive) {
            al_info("vswitch: forgetting %s (interface %d is gone)", ifc.ifname, ifindex);
            ifc.slot = UINT32_MAX; /* never mark a slot free that another entry may own */
            loader__forget(vs, ifindex, &ifc);
            dropped++;
            continue;
        }
        if (ifc.flags & VS_IF_POOL || !consistent) {
            /* A pooled network of a dead process (its namespace is gone or going), or an
             * entry that does not fit the address plan: delete it. */
            al_info("vswitch: deleting %s (%s)", ifc.ifname,
                    consistent ? "unused pool network of a previous run"
                               : "does not fit the address plan");
            if (consistent)
                vs->slot_used[ifc.slot] = 1;
            struct al_error e2 = {0};
            if (loader__detach(vs, ifindex, consistent, &e2) != 0)
                al_warn("vswitch: %s", al_error_str(&e2));
            dropped++;
            continue;
        }
        vs->slot_used[ifc.slot] = 1;
        if (!(l.flags & IFF_UP)) {
            /* Every interface comes up last, after its programs and identity: one still down
             * was being made when the previous process died (that creation is undone after
             * the restart). Its routes could not be added; nothing uses it. */
            al_info("vswitch: deleting %s (sandbox %llu): it is down, its creation was "
                    "interrupted",
                    ifc.ifname, (unsigned long long)ifc.sandbox_id);
            struct al_error e2 = {0};
            if (loader__detach(vs, ifindex, true, &e2) != 0)
                al_warn("vswitch: %s", al_error_str(&e2));
            dropped++;
            continue;
        }
        /* One interface that cannot be adopted must not keep the switch (and every other
         * sandbox) down: it is deleted (fail closed: that sandbox has no network any more,
         * which airlockd reports when it adopts it). Only an interface that can be neither
         * adopted nor deleted stops the start. */
        struct al_error e2 = {0};
        int arc = loader__attach_progs(vs, ifindex, &e2);
        if (!arc)
            arc = vswitch__host_routes(vs, ifindex, &ifc, &e2);
        if (arc) {
            al_error("vswitch: cannot adopt %s (sandbox %llu): %s; deleting it", ifc.ifname,
                     (unsigned long long)ifc.sandbox_id, al_error_str(&e2));
            struct al_error e3 = {0};
            if (loader__detach(vs, ifindex, true, &e3) != 0) {
                rc = al_error_set(err, arc, "cannot adopt %s: %s; nor delete it: %s", ifc.ifname,
                                  al_error_str(&e2), al_error_str(&e3));
                break;
            }
            dropped++;
            continue;
        }
        adopted++;
    }
    free(keys);
    if (rc)
        return rc;

    /* Interfaces without identity go first (so that no program is ever released from a
     * live one), then the pins of links whose interface has no identity any more. */
    loader__delete_orphans(vs);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/links", vs->view.pin_dir);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            char *end = NULL;
            long idx = strtol(de->d_name, &end, 10);
            if (!end || end == de->d_name || *end != '_')
                continue;
            __u32 k = (__u32)idx;
            struct vs_iface ifc;
            if (bpf_map_lookup_elem(vs->view.map_ifaces, &k, &ifc) == 0)
                continue;
            unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
    }
    if (adopted || dropped)
        al_info("vswitch: adopted %zu sandbox interface(s), cleaned up %zu", adopted, dropped);
    return 0;
}

/* ---- open / close / destroy ---------------------------------------------------------- */

static int loader__refusal(const struct vs_settings *s, struct al_error *err)
{
    struct vswitch_check res[16];
    size_t n = 0;
    int failed = vswitch__host_checks(s, res, AL_ARRAY_SIZE(res), &n);
    if (failed <= 0)
        return failed;
    char msg[AL_ERROR_MSG_MAX] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        if (res[i].ok)
            continue;
        int w = snprintf(msg + used, sizeof msg - used, "%s%s %s", used ? "; " : "", res[i].name,
                         res[i].detail);
        if (w < 0 || (size_t)w >= sizeof msg - used)
            break;
        used += (size_t)w;
    }
    return al_error_set(err, -EPERM,
                        "the switch refuses to start on this host: %s "
                        "(see docs/operations.md, `airlock vswitch check`)",
                        msg);
}

void vswitch_close(struct vswitch *vs)
{
    if (!vs)
        return;
    pthread_mutex_lock(&vs->mu);
    vswitch__pool_drain(vs);
    pthread_mutex_unlock(&vs->mu);
    if (vs->skel)
        vswitch_bpf__destroy(vs->skel);
    vswitch_nl_close(&vs->nl);
    if (vs->lock_fd >= 0)
        close(vs->lock_fd); /* releases the flock */
    free(vs->slot_used);
    free(vs->pool);
    pthread_cond_destroy(&vs->pool_cv);
    pthread_mutex_destroy(&vs->mu);
    free(vs);
}

int vswitch_open(const struct vswitch_opts *opts, struct vswitch **out, struct al_error *err)
{
    return vswitch__open(opts, false, out, err);
}

int vswitch__open(const struct vswitch_opts *opts, bool for_teardown, struct vswitch **out,
                  struct al_error *err)
{
    pthread_once(&loader__once, loader__init_once);
    *out = NULL;
    /* The state directory first, so that its real path (which names the pins) is stable. */
    const char *sd = opts && opts->state_dir ? opts->state_dir : al_state_dir();
    if (sd && sd[0] == '/') {
        int r = al_mkdir_p(sd, 0700);
        if (r)
            return al_error_set(err, r, "cannot create the state directory %s: %s", sd,
                                strerror(-r));
    }
    struct vs_settings s;
    int rc = vswitch__settings(opts, &s, err);
    if (rc)
        return rc;
    /* A teardown must work on a host that is unsafe now: it only removes things. */
    rc = for_teardown ? 0 : loader__refusal(&s, err);
    if (rc)
        return rc;

    struct vswitch *vs = calloc(1, sizeof *vs);
    if (!vs)
        return al_error_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&vs->mu, NULL);
    pthread_cond_init(&vs->pool_cv, NULL);
    vs->lock_fd = -1;
    vs->nl.fd = -1;
    vs->view.map_config = vs->view.map_ifaces = vs->view.map_addrs = -1;
    vs->view.map_counters = vs->view.map_sockets = -1;
    snprintf(vs->state_dir, sizeof vs->state_dir, "%s", s.state_dir);
    snprintf(vs->view.pin_dir, sizeof vs->view.pin_dir, "%s", s.pin_dir);
    vs->pool_size = opts ? opts->pool_size : 0;
    vs->allow_ip_forward = s.allow_ip_forward;
    vs->range_host = ntohl(s.range_addr);

    rc = loader__lock(vs, err);
    if (rc)
        goto fail;
    rc = vswitch__bpffs_ensure(s.pin_dir, err);
    if (rc)
        goto fail;
    rc = loader__table_size(&s, for_teardown, err);
    if (rc)
        goto fail;
    vs->max_ifaces = s.max_ifaces;
    uint64_t slots = 1ull << (s.prefix_len - s.range_len);
    vs->nslots = slots > s.max_ifaces ? s.max_ifaces : (uint32_t)slots;
    vs->slot_used = calloc(vs->nslots, 1);
    if (!vs->slot_used) {
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    char links[PATH_MAX];
    snprintf(links, sizeof links, "%s/links", s.pin_dir);
    rc = al_mkdir_p(links, 0700);
    if (rc) {
        al_error_set(err, rc, "cannot create %s: %s", links, strerror(-rc));
        goto fail;
    }

    LIBBPF_OPTS(bpf_object_open_opts, oo, .pin_root_path = s.pin_dir);
    vs->skel = vswitch_bpf__open_opts(&oo);
    if (!vs->skel) {
        rc = al_error_set(err, -errno, "opening the switch's eBPF object: %s", strerror(errno));
        goto fail;
    }
    vs->skel->rodata->cfg_range_addr = s.range_addr;
    vs->skel->rodata->cfg_range_mask = htonl(0xffffffffu << (32 - s.range_len));
    vs->skel->rodata->cfg_steer_mark = s.steer_mark;
    vs->skel->rodata->cfg_reply_mark = s.reply_mark;
    struct bpf_map *sized[] = {vs->skel->maps.vs_ifaces, vs->skel->maps.vs_addrs,
                               vs->skel->maps.vs_counters};
    for (size_t i = 0; i < AL_ARRAY_SIZE(sized); i++) {
        /* vs_counters: one entry more, for the packets of unknown interfaces (key 0). */
        uint32_t n = s.max_ifaces + (sized[i] == vs->skel->maps.vs_counters);
        rc = bpf_map__set_max_entries(sized[i], n);
        if (rc) {
            al_error_set(err, rc, "sizing the switch's map %s to %u entries: %s",
                         bpf_map__name(sized[i]), n, strerror(-rc));
            goto fail;
        }
    }
    rc = vswitch_bpf__load(vs->skel);
    if (rc) {
        al_error_set(err, rc,
                     "loading the switch's eBPF programs failed (%s): the kernel "
                     "needs bpf_sk_assign and sockmap lookups (Linux >= 5.10); if maps are "
                     "already pinned at %s by an incompatible build, tear that instance down "
                     "first. libbpf's log above has the details",
                     strerror(-rc), s.pin_dir);
        goto fail;
    }
    vs->view.map_config = bpf_map__fd(vs->skel->maps.vs_config);
    vs->view.map_ifaces = bpf_map__fd(vs->skel->maps.vs_ifaces);
    vs->view.map_addrs = bpf_map__fd(vs->skel->maps.vs_addrs);
    vs->view.map_counters = bpf_map__fd(vs->skel->maps.vs_counters);
    vs->view.map_sockets = bpf_map__fd(vs->skel->maps.vs_sockets);
    vs->view.owns_fds = false;
    vs->view.ncpus = libbpf_num_possible_cpus();
    if (vs->view.ncpus <= 0) {
        rc = al_error_set(err, -EIO, "cannot count the CPUs");
        goto fail;
    }

    /* The instance's configuration: recorded on first start, enforced afterwards. */
    struct vs_config want, have;
    loader__cfg_from_settings(&s, &want);
    __u32 zero = 0;
    if (bpf_map_lookup_elem(vs->view.map_config, &zero, &have) != 0) {
        rc = al_error_set(err, -errno, "reading vs_config: %s", strerror(errno));
        goto fail;
    }
    if (have.abi_version == 0) {
        if (!want.attach_mode)
            want.attach_mode = loader__default_attach_mode();
        if (bpf_map_update_elem(vs->view.map_config, &zero, &want, BPF_ANY) != 0) {
            rc = al_error_set(err, -errno, "writing vs_config: %s", strerror(errno));
            goto fail;
        }
        vs->cfg = want;
    } else {
        rc = loader__cfg_compare(&have, &want, s.pin_dir, err);
        if (rc)
            goto fail;
        vs->cfg = have;
    }
    rc = loader__counters_reset(vs, 0, BPF_NOEXIST);
    if (rc) {
        al_error_set(err, rc, "creating the unknown-interface counters: %s", strerror(-rc));
        goto fail;
    }

    rc = vswitch_nl_open(&vs->nl, err);
    if (rc)
        goto fail;
    struct stat nsst;
    if (stat("/proc/thread-self/ns/net", &nsst) != 0) {
        rc = al_error_set(err, -errno, "cannot stat this thread's network namespace: %s",
                          strerror(errno));
        goto fail;
    }
    vs->netns_dev = nsst.st_dev;
    vs->netns_ino = nsst.st_ino;
    /* "local 0.0.0.0/0 dev lo table T" + "fwmark M lookup T": a packet the programs handed
     * to a proxy socket is delivered locally whatever its destination. */
    struct vs_route_spec local = {.kind = VS_ROUTE_LOCAL_ALL,
                                  .table = s.route_table,
                                  .oif = 1 /* lo */,
                                  .protocol = VS_RTPROT};
    rc = vswitch_nl_route_add(&vs->nl, &local, true, err);
    if (!rc)
        rc = vswitch_nl_rule_add(&vs->nl, s.steer_mark, s.route_table, s.rule_priority, err);
    if (!rc)
        rc = vswitch__guard_install(&s, err);
    if (rc)
        goto fail;

    pthread_mutex_lock(&vs->mu);
    rc = loader__readopt(vs, err);
    pthread_mutex_unlock(&vs->mu);
    if (rc)
        goto fail;
    rc = loader__write_instance(vs, err);
    if (rc)
        goto fail;
    char rb[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &s.range_addr, rb, sizeof rb);
    al_info("vswitch: open (pins %s, %s, range %s/%u)", vs->view.pin_dir,
            loader__mode_name(vs->cfg.attach_mode), rb, s.range_len);
    char kernel[65];
    if (!vswitch_assign_takes_reuseport(kernel, sizeof kernel))
        al_warn("vswitch: kernel %s is older than 6.5: bpf_sk_assign cannot hand packets to "
                "SO_REUSEPORT sockets, so the proxy must register one plain socket per address "
                "(airlock-egress does so by itself: --listener-mode auto picks shared); a "
                "SO_REUSEPORT socket is refused at registration",
                kernel);
    *out = vs;
    return 0;

fail:
    vswitch_close(vs);
    return rc;
}

static int loader__count_live(struct vswitch *vs, size_t *live)
{
    __u32 key, next, *prev = NULL;
    *live = 0;
    while (bpf_map_get_next_key(vs->view.map_ifaces, prev, &next) == 0) {
        struct vs_iface ifc;
        if (bpf_map_lookup_elem(vs->view.map_ifaces, &next, &ifc) == 0 && !(ifc.flags & VS_IF_POOL))
            (*live)++;
        key = next;
        prev = &key;
    }
    return 0;
}

int vswitch_destroy(struct vswitch *vs, bool force, struct al_error *err)
{
    if (!vs)
        return 0;
    pthread_mutex_lock(&vs->mu);
    size_t live = 0;
    loader__count_live(vs, &live);
    if (live && !force) {
        pthread_mutex_unlock(&vs->mu);
        vswitch_close(vs);
        return al_error_set(err, -EBUSY,
                            "%zu sandbox interface(s) are still attached: end "
                            "those sandboxes first (or force the teardown)",
                            live);
    }
    vswitch__pool_drain(vs);
    int rc = 0;
    __u32 next;
    while (bpf_map_get_next_key(vs->view.map_ifaces, NULL, &next) == 0) {
        struct al_error e2 = {0};
        if (vswitch__detach_locked(vs, (int)next, &e2) != 0) {
            rc = al_error_set(err, e2.code, "%s", al_error_str(&e2));
            break;
        }
    }
    if (!rc) {
        struct vs_route_spec local = {.kind = VS_ROUTE_LOCAL_ALL,
                                      .table = vs->cfg.route_table,
                                      .oif = 1,
                                      .protocol = VS_RTPROT};
        int r = vswitch_nl_route_del(&vs->nl, &local, NULL);
        if (r && r != -ESRCH && r != -ENOENT)
            al_warn("vswitch: deleting the local route table entry failed: %s", strerror(-r));
        bool exists = true;
        while (vswitch_nl_rule_exists(&vs->nl, vs->cfg.steer_mark, vs->cfg.route_table,
                                      vs->cfg.rule_priority, &exists, NULL) == 0 &&
               exists) {
            if (vswitch_nl_rule_del(&vs->nl, vs->cfg.steer_mark, vs->cfg.route_table,
                                    vs->cfg.rule_priority, NULL) != 0)
                break;
        }
        rc = vswitch__guard_remove(vs->cfg.nft_table, err);
    }
    if (!rc) {
        char path[PATH_MAX];
        for (size_t i = 0; i < AL_ARRAY_SIZE(loader__maps); i++) {
            snprintf(path, sizeof path, "%s/%s", vs->view.pin_dir, loader__maps[i]);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/links", vs->view.pin_dir);
        rmdir(path);
        if (rmdir(vs->view.pin_dir) != 0 && errno != ENOENT)
            rc = al_error_set(err, -errno, "cannot remove %s: %s (unexpected files in it?)",
                              vs->view.pin_dir, strerror(errno));
        snprintf(path, sizeof path, "%s/airlock", VS_BPFFS_ROOT);
        rmdir(path); /* only if empty: other instances may live there */
        snprintf(path, sizeof path, "%s/%s", vs->state_dir, VS_INSTANCE_FILE);
        unlink(path);
    }
    pthread_mutex_unlock(&vs->mu);
    if (!rc)
        al_info("vswitch: torn down (%s)", vs->view.pin_dir);
    vswitch_close(vs);
    return rc;
}

struct vswitch_view *vswitch_get_view(struct vswitch *vs)
{
    return &vs->view;
}

const char *vswitch_pin_dir(const struct vswitch *vs)
{
    return vs->view.pin_dir;
}

int vswitch_host_check(const struct vswitch_opts *opts, struct vswitch_check *results, size_t max,
                       size_t *n)
{
    struct vs_settings s;
    struct al_error e = {0};
    *n = 0;
    int rc = vswitch__settings(opts, &s, &e);
    if (rc) {
        if (max) {
            snprintf(results[0].name, sizeof results[0].name, "options");
            results[0].ok = false;
            snprintf(results[0].detail, sizeof results[0].detail, "%s", al_error_str(&e));
            *n = 1;
        }
        return 1;
    }
    return vswitch__host_checks(&s, results, max, n);
}
