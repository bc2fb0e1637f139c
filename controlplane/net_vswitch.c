/* controlplane/net_vswitch: see net_vswitch.h. */
#include "net_vswitch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "cp.h"
#include "vswitch/vswitch.h"

struct nv {
    struct vswitch *vs;
    bool tap;         /* kvm: sandboxes get taps (no pool of network namespaces) */
    size_t pool_size; /* what the switch's pool keeps */
};

static void nv__fill(const struct vswitch_net *n, struct cp_net *out)
{
    memset(out, 0, sizeof *out);
    out->netns_fd = n->netns_fd;
    out->tap_fd = n->tap_fd;
    out->prefix_len = n->prefix_len;
    snprintf(out->guest_mac, sizeof out->guest_mac, "%02x:%02x:%02x:%02x:%02x:%02x",
             n->guest_mac[0], n->guest_mac[1], n->guest_mac[2], n->guest_mac[3], n->guest_mac[4],
             n->guest_mac[5]);
    inet_ntop(AF_INET, &n->addr, out->addr, sizeof out->addr);
    inet_ntop(AF_INET, &n->gateway, out->gateway, sizeof out->gateway);
    out->host_ifindex = n->host_ifindex;
    snprintf(out->host_ifname, sizeof out->host_ifname, "%s", n->host_ifname);
}

static int nv_acquire(void *priv, uint64_t seq, const char *label, struct cp_net *out,
                      struct al_error *err)
{
    struct nv *v = priv;
    struct vswitch_sandbox sb = {.id = seq, .label = label};
    struct vswitch_net n;
    /* The KVM backend's virtio-net wants the virtio-net header on the tap. */
    struct vswitch_tap_opts to = {.vnet_hdr = true};
    int rc = v->tap ? vswitch_tap_create(v->vs, &sb, &to, &n, err)
                    : vswitch_net_create(v->vs, &sb, &n, err);
    if (rc)
        return rc;
    nv__fill(&n, out);
    return 0;
}

static int nv_release(void *priv, uint64_t seq, struct al_error *err)
{
    struct nv *v = priv;
    return vswitch_net_destroy(v->vs, seq, err);
}

static int nv_find(void *priv, uint64_t seq, struct cp_net *out)
{
    struct nv *v = priv;
    struct vswitch_net n;
    int rc = vswitch_net_find(v->vs, seq, &n);
    if (rc)
        return rc;
    nv__fill(&n, out);
    out->netns_fd = -1;
    out->tap_fd = -1;
    return 0;
}

struct nv_each {
    int (*fn)(uint64_t seq, const char *label, void *arg);
    void *arg;
};

static int nv__each(const struct vswitch_iface_info *i, void *arg)
{
    struct nv_each *e = arg;
    if (!i->iface.sandbox_id)
        return 0; /* a pooled network */
    return e->fn(i->iface.sandbox_id, i->iface.label, e->arg);
}

static int nv_foreach(void *priv, int (*fn)(uint64_t seq, const char *label, void *arg), void *arg)
{
    struct nv *v = priv;
    struct nv_each e = {.fn = fn, .arg = arg};
    return vswitch_view_foreach(vswitch_get_view(v->vs), nv__each, &e);
}

static int nv_pool_fill(void *priv, struct al_error *err)
{
    struct nv *v = priv;
    if (v->tap)
        return 0; /* taps are made per sandbox; the pool holds network namespaces */
    return vswitch_pool_fill(v->vs, err);
}

static void nv_close(void *priv)
{
    struct nv *v = priv;
    vswitch_close(v->vs);
    free(v);
}

static int nv_destroy(void *priv, struct al_error *err)
{
    struct nv *v = priv;
    int rc = vswitch_destroy(v->vs, false, err);
    free(v);
    return rc;
}

static void nv_pool_counts(void *priv, size_t *ready, size_t *size)
{
    struct nv *v = priv;
    *size = v->pool_size;
    *ready = v->pool_size ? vswitch_pool_ready(v->vs) : 0;
}

static const struct cp_net_ops nv_ops = {
    .name = "vswitch",
    .acquire = nv_acquire,
    .release = nv_release,
    .find = nv_find,
    .foreach = nv_foreach,
    .pool_fill = nv_pool_fill,
    .pool_counts = nv_pool_counts,
    .close = nv_close,
    .destroy = nv_destroy,
};

int cp_net_vswitch_open(struct cp *cp, struct al_error *err)
{
    struct nv *v = calloc(1, sizeof *v);
    if (!v)
        return al_error_set(err, -ENOMEM, "out of memory");
    struct vswitch_opts o = {
        .state_dir = cp->cfg.state_dir,
        .range = cp->cfg.net_range,
        .prefix_len = (unsigned)cp->cfg.net_prefix_len,
        .ifname_prefix = cp->cfg.net_ifname_prefix,
        .pool_size = (unsigned)cp->cfg.net_pool_size,
        .max_ifaces = (unsigned)cp->cfg.net_max_ifaces,
    };
    v->tap = strcmp(cp->backend_kind, "kvm") == 0;
    if (v->tap)
        o.pool_size = 0;
    v->pool_size = o.pool_size;
    int rc = vswitch_open(&o, &v->vs, err);
    if (rc) {
        free(v);
        return rc;
    }
    cp->net = &nv_ops;
    cp->net_priv = v;
    return 0;
}
