/* vswitch/nl: see nl.h. Messages are built, parsed and dispatched with libmnl; what stays
 * here is what rtnetlink means to the switch, the kernel's extended error message, and one
 * bounded receive loop. */
#include "nl.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sys/socket.h>
#include <sys/time.h>

/* The largest request (a veth pair) is 156 bytes. */
#define NL_MSG_MAX 512
/* One datagram of a dump: the kernel sizes its dump buffers after the reader's (up to
 * 32 KiB), so a larger buffer means fewer system calls per dump. */
#define NL_RECV_MAX 32768

struct nl_msg {
    union {
        struct nlmsghdr h;
        char buf[NL_MSG_MAX];
    };
};

static struct nlmsghdr *nl__init(struct nl_msg *m, uint16_t type, uint16_t flags, const void *hdr,
                                 size_t hdrlen)
{
    memset(m, 0, sizeof *m); /* libmnl 1.0.4 leaves attribute padding as it finds it */
    struct nlmsghdr *h = mnl_nlmsg_put_header(m->buf);
    h->nlmsg_type = type;
    h->nlmsg_flags = NLM_F_REQUEST | flags;
    memcpy(mnl_nlmsg_put_extra_header(h, hdrlen), hdr, hdrlen);
    return h;
}

int vswitch_nl_open(struct vs_nl *nl, struct al_error *err)
{
    nl->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    nl->seq = (uint32_t)getpid() << 8;
    if (nl->fd < 0)
        return al_error_set(err, -errno, "cannot open an rtnetlink socket: %s", strerror(errno));
    int one = 1;
    setsockopt(nl->fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
    setsockopt(nl->fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
    /* Requests are answered at once; a stuck kernel must not hang the loader forever. */
    struct timeval tv = {.tv_sec = 10};
    setsockopt(nl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    if (bind(nl->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(nl->fd);
        nl->fd = -1;
        return al_error_set(err, -e, "cannot bind an rtnetlink socket: %s", strerror(e));
    }
    return 0;
}

void vswitch_nl_close(struct vs_nl *nl)
{
    if (nl->fd >= 0)
        close(nl->fd);
    nl->fd = -1;
}

/* ---- one request and its answers ---------------------------------------------------------- */

struct nl__req {
    uint16_t want; /* answers of this type go to cb (0: none expected) */
    int (*cb)(const struct nlmsghdr *h, void *arg);
    void *arg;
    int stop;            /* cb's first non-zero answer */
    bool found;          /* an answer of type want came */
    int error;           /* the kernel's negative errno */
    const char *ext_msg; /* its extended-ack text (in the receive buffer), or NULL */
};

static int nl__error_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__req *q = arg;
    const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
    if (mnl_nlmsg_get_payload_len(h) < sizeof *e) {
        errno = EBADMSG;
        return MNL_CB_ERROR;
    }
    if (e->error == 0)
        return MNL_CB_STOP; /* the acknowledgement */
    q->error = e->error < 0 ? e->error : -e->error;
    /* The TLVs follow the request, or only its header when the kernel capped the echo. */
    size_t off = sizeof *e;
    if (!(h->nlmsg_flags & NLM_F_CAPPED))
        off += e->msg.nlmsg_len - sizeof(struct nlmsghdr);
    if (!(h->nlmsg_flags & NLM_F_ACK_TLVS) || off > mnl_nlmsg_get_payload_len(h))
        return MNL_CB_ERROR;
    const struct nlattr *a;
    mnl_attr_for_each(a, h, off)
    {
        if (mnl_attr_get_type(a) == NLMSGERR_ATTR_MSG &&
            mnl_attr_validate(a, MNL_TYPE_NUL_STRING) == 0)
            q->ext_msg = mnl_attr_get_str(a);
    }
    return MNL_CB_ERROR;
}

static int nl__done_cb(const struct nlmsghdr *h, void *arg)
{
    (void)h;
    (void)arg;
    return MNL_CB_STOP;
}

static int nl__data_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__req *q = arg;
    if (q->want && h->nlmsg_type == q->want) {
        q->found = true;
        /* Keep reading to the end of a dump even after the callback stopped, so the socket
         * is clean for the next request. */
        if (q->cb && !q->stop)
            q->stop = q->cb(h, q->arg);
    }
    return MNL_CB_OK;
}

static mnl_cb_t nl__ctl[NLMSG_MIN_TYPE] = {
    [NLMSG_ERROR] = nl__error_cb,
    [NLMSG_DONE] = nl__done_cb,
};

/* Sends h and reads its answers up to the acknowledgement (or a dump's end). Answers to
 * an earlier request (one whose wait timed out) have another sequence number: skipped. */
static int nl__run(struct vs_nl *nl, struct nlmsghdr *h, struct nl__req *q, const char *what,
                   struct al_error *err)
{
    assert(h->nlmsg_len <= NL_MSG_MAX); /* every request has a fixed shape and bounded names */
    h->nlmsg_seq = ++nl->seq;
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    ssize_t n;
    do {
        n = sendto(nl->fd, h, h->nlmsg_len, 0, (struct sockaddr *)&sa, sizeof sa);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return al_error_set(err, -errno, "%s: netlink send failed: %s", what, strerror(errno));
    union {
        struct nlmsghdr h;
        char b[NL_RECV_MAX];
    } buf;
    for (;;) {
        n = recv(nl->fd, buf.b, sizeof buf.b, MSG_TRUNC); /* n: the datagram's real size */
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return al_error_set(err, -errno, "%s: netlink receive failed: %s", what,
                                strerror(errno));
        if ((size_t)n > sizeof buf.b)
            return al_error_set(err, -EMSGSIZE, "%s: a netlink answer of %zd bytes exceeds %d",
                                what, n, NL_RECV_MAX);
        int r = mnl_cb_run2(buf.b, (size_t)n, nl->seq, 0, nl__data_cb, q, nl__ctl, NLMSG_MIN_TYPE);
        if (r == MNL_CB_STOP)
            return 0;
        if (r != MNL_CB_ERROR)
            continue;
        if (q->error)
            return al_error_set(err, q->error, "%s: %s%s%s", what,
                                q->error == -ENODEV && q->want == RTM_NEWLINK ? "no such interface"
                                                                              : strerror(-q->error),
                                q->ext_msg ? ": " : "", q->ext_msg ? q->ext_msg : "");
        if (errno != EPROTO)
            return al_error_set(err, -errno, "%s: malformed netlink answer: %s", what,
                                strerror(errno));
    }
}

/* A request answered by an acknowledgement only. */
static int nl__talk(struct vs_nl *nl, struct nlmsghdr *h, const char *what, struct al_error *err)
{
    h->nlmsg_flags |= NLM_F_ACK;
    struct nl__req q = {0};
    return nl__run(nl, h, &q, what, err);
}

/* A dump: cb for each answer of type want; returns cb's first non-zero answer, else 0. */
static int nl__dump(struct vs_nl *nl, struct nlmsghdr *h, uint16_t want,
                    int (*cb)(const struct nlmsghdr *h, void *arg), void *arg, const char *what,
                    struct al_error *err)
{
    h->nlmsg_flags |= NLM_F_DUMP;
    struct nl__req q = {.want = want, .cb = cb, .arg = arg};
    int rc = nl__run(nl, h, &q, what, err);
    return rc ? rc : q.stop;
}

/* The attributes after a fixed header of hdrlen bytes, by type (the first of each). */
static void nl__parse(const struct nlmsghdr *h, size_t hdrlen, const struct nlattr **tb,
                      uint16_t max)
{
    memset(tb, 0, sizeof(*tb) * ((size_t)max + 1));
    if (mnl_nlmsg_get_payload_len(h) < hdrlen)
        return;
    const struct nlattr *a;
    mnl_attr_for_each(a, h, hdrlen)
    {
        uint16_t type = mnl_attr_get_type(a);
        if (type <= max && !tb[type])
            tb[type] = a;
    }
}

static uint32_t nl__u32(const struct nlattr *a)
{
    return a && mnl_attr_validate(a, MNL_TYPE_U32) == 0 ? mnl_attr_get_u32(a) : 0;
}

/* A short string attribute into out[16], NUL-terminated. */
static void nl__str16(const struct nlattr *a, char out[16])
{
    if (!a)
        return;
    size_t n = mnl_attr_get_payload_len(a);
    memcpy(out, mnl_attr_get_payload(a), n < 16 ? n : 16);
    out[15] = '\0';
}

/* Interface names are bounded by the kernel; refusing longer ones keeps every request
 * within NL_MSG_MAX. */
static int nl__ifname_ok(const char *name, const char *what, struct al_error *err)
{
    if (strlen(name) >= IFNAMSIZ)
        return al_error_set(err, -EINVAL, "%s: interface name '%.32s...' is longer than %d bytes",
                            what, name, IFNAMSIZ - 1);
    return 0;
}

/* ---- links -------------------------------------------------------------------------------- */

static void nl__link_attrs(struct nlmsghdr *h, const char *name, const uint8_t *mac, uint32_t mtu)
{
    mnl_attr_put_strz(h, IFLA_IFNAME, name);
    if (mac)
        mnl_attr_put(h, IFLA_ADDRESS, 6, mac);
    if (mtu)
        mnl_attr_put_u32(h, IFLA_MTU, mtu);
    mnl_attr_put_u32(h, IFLA_NUM_TX_QUEUES, 1);
    mnl_attr_put_u32(h, IFLA_NUM_RX_QUEUES, 1);
}

int vswitch_nl_veth_add(struct vs_nl *nl, const struct vs_veth_spec *s, struct al_error *err)
{
    char what[64];
    snprintf(what, sizeof what, "creating veth %s", s->name);
    int rc = nl__ifname_ok(s->name, what, err);
    if (!rc)
        rc = nl__ifname_ok(s->peer_name, what, err);
    if (rc)
        return rc;
    struct nl_msg m;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct nlmsghdr *h = nl__init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
    nl__link_attrs(h, s->name, s->mac, s->mtu);
    struct nlattr *li = mnl_attr_nest_start(h, IFLA_LINKINFO);
    mnl_attr_put_strz(h, IFLA_INFO_KIND, "veth");
    struct nlattr *data = mnl_attr_nest_start(h, IFLA_INFO_DATA);
    struct nlattr *peer = mnl_attr_nest_start(h, VETH_INFO_PEER);
    memcpy(mnl_nlmsg_put_extra_header(h, sizeof ifi), &ifi, sizeof ifi);
    nl__link_attrs(h, s->peer_name, s->peer_mac, s->mtu);
    if (s->peer_netns_fd >= 0)
        mnl_attr_put_u32(h, IFLA_NET_NS_FD, (uint32_t)s->peer_netns_fd);
    mnl_attr_nest_end(h, peer);
    mnl_attr_nest_end(h, data);
    mnl_attr_nest_end(h, li);
    return nl__talk(nl, h, what, err);
}

/* RTM_NEWLINK or RTM_DELLINK of one interface by index. */
static struct nlmsghdr *nl__link_msg(struct nl_msg *m, uint16_t type, int ifindex, unsigned flags,
                                     unsigned change)
{
    struct ifinfomsg ifi = {
        .ifi_family = AF_UNSPEC, .ifi_index = ifindex, .ifi_flags = flags, .ifi_change = change};
    return nl__init(m, type, 0, &ifi, sizeof ifi);
}

int vswitch_nl_link_del(struct vs_nl *nl, int ifindex, struct al_error *err)
{
    struct nl_msg m;
    char what[64];
    snprintf(what, sizeof what, "deleting interface %d", ifindex);
    return nl__talk(nl, nl__link_msg(&m, RTM_DELLINK, ifindex, 0, 0), what, err);
}

int vswitch_nl_link_set_up(struct vs_nl *nl, int ifindex, bool up, struct al_error *err)
{
    struct nl_msg m;
    char what[64];
    snprintf(what, sizeof what, "setting interface %d %s", ifindex, up ? "up" : "down");
    return nl__talk(nl, nl__link_msg(&m, RTM_NEWLINK, ifindex, up ? IFF_UP : 0, IFF_UP), what, err);
}

int vswitch_nl_link_addrgen_none(struct vs_nl *nl, int ifindex, struct al_error *err)
{
    struct nl_msg m;
    struct nlmsghdr *h = nl__link_msg(&m, RTM_NEWLINK, ifindex, 0, 0);
    struct nlattr *af = mnl_attr_nest_start(h, IFLA_AF_SPEC);
    struct nlattr *v6 = mnl_attr_nest_start(h, AF_INET6);
    mnl_attr_put_u8(h, IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE);
    mnl_attr_nest_end(h, v6);
    mnl_attr_nest_end(h, af);
    return nl__talk(nl, h, "disabling IPv6 address generation", err);
}

int vswitch_nl_link_set_mac(struct vs_nl *nl, int ifindex, const uint8_t mac[6],
                            struct al_error *err)
{
    struct nl_msg m;
    struct nlmsghdr *h = nl__link_msg(&m, RTM_NEWLINK, ifindex, 0, 0);
    mnl_attr_put(h, IFLA_ADDRESS, 6, mac);
    return nl__talk(nl, h, "setting a MAC address", err);
}

static void nl__link_parse(const struct nlmsghdr *h, struct vs_nl_link_info *l)
{
    const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(h);
    const struct nlattr *tb[IFLA_MAX + 1];
    nl__parse(h, sizeof *ifi, tb, IFLA_MAX);
    memset(l, 0, sizeof *l);
    l->ifindex = ifi->ifi_index;
    l->flags = ifi->ifi_flags;
    nl__str16(tb[IFLA_IFNAME], l->name);
    if (tb[IFLA_ADDRESS] && mnl_attr_get_payload_len(tb[IFLA_ADDRESS]) == 6)
        memcpy(l->mac, mnl_attr_get_payload(tb[IFLA_ADDRESS]), 6);
    if (!tb[IFLA_LINKINFO])
        return;
    const struct nlattr *a;
    mnl_attr_for_each_nested(a, tb[IFLA_LINKINFO])
    {
        if (mnl_attr_get_type(a) == IFLA_INFO_KIND)
            nl__str16(a, l->kind);
    }
}

static int nl__link_one_cb(const struct nlmsghdr *h, void *arg)
{
    nl__link_parse(h, arg);
    return 0;
}

/* RTM_GETLINK for one link answers with a single RTM_NEWLINK, then the acknowledgement. */
static int nl__getlink(struct vs_nl *nl, struct nlmsghdr *h, struct vs_nl_link_info *out,
                       const char *what, struct al_error *err)
{
    h->nlmsg_flags |= NLM_F_ACK;
    struct nl__req q = {.want = RTM_NEWLINK, .cb = nl__link_one_cb, .arg = out};
    int rc = nl__run(nl, h, &q, what, err);
    if (!rc && !q.found)
        rc = al_error_set(err, -ENODEV, "%s: no such interface", what);
    return rc;
}

int vswitch_nl_link_index(struct vs_nl *nl, const char *name, int *ifindex, struct al_error *err)
{
    char what[64];
    snprintf(what, sizeof what, "looking up interface %s", name);
    int rc = nl__ifname_ok(name, what, err);
    if (rc)
        return rc;
    struct nl_msg m;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct nlmsghdr *h = nl__init(&m, RTM_GETLINK, 0, &ifi, sizeof ifi);
    mnl_attr_put_strz(h, IFLA_IFNAME, name);
    struct vs_nl_link_info l;
    rc = nl__getlink(nl, h, &l, what, err);
    if (!rc)
        *ifindex = l.ifindex;
    return rc;
}

int vswitch_nl_link_get(struct vs_nl *nl, int ifindex, struct vs_nl_link_info *out,
                        struct al_error *err)
{
    struct nl_msg m;
    char what[64];
    snprintf(what, sizeof what, "looking up interface %d", ifindex);
    return nl__getlink(nl, nl__link_msg(&m, RTM_GETLINK, ifindex, 0, 0), out, what, err);
}

/* ---- addresses, routes, rules, neighbours ------------------------------------------------- */

int vswitch_nl_addr_add(struct vs_nl *nl, int ifindex, uint32_t addr, unsigned prefix_len,
                        struct al_error *err)
{
    struct nl_msg m;
    struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                            .ifa_prefixlen = (unsigned char)prefix_len,
                            .ifa_scope = RT_SCOPE_UNIVERSE,
                            .ifa_index = (unsigned)ifindex};
    struct nlmsghdr *h = nl__init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, &ifa, sizeof ifa);
    mnl_attr_put_u32(h, IFA_LOCAL, addr);
    mnl_attr_put_u32(h, IFA_ADDRESS, addr);
    return nl__talk(nl, h, "adding an address", err);
}

static struct nlmsghdr *nl__route_msg(struct nl_msg *m, uint16_t type, uint16_t flags,
                                      const struct vs_route_spec *r)
{
    struct rtmsg rtm = {.rtm_family = AF_INET,
                        .rtm_table = r->table < 256 ? (unsigned char)r->table : RT_TABLE_UNSPEC,
                        .rtm_protocol = r->protocol,
                        .rtm_scope = RT_SCOPE_UNIVERSE,
                        .rtm_type = RTN_UNICAST};
    switch (r->kind) {
    case VS_ROUTE_UNICAST_DEV:
        rtm.rtm_scope = RT_SCOPE_LINK;
        rtm.rtm_dst_len = (unsigned char)r->dst_len;
        break;
    case VS_ROUTE_DEFAULT_VIA:
        rtm.rtm_flags = RTNH_F_ONLINK;
        break;
    case VS_ROUTE_LOCAL_ALL:
        rtm.rtm_scope = RT_SCOPE_HOST;
        rtm.rtm_type = RTN_LOCAL;
        break;
    }
    struct nlmsghdr *h = nl__init(m, type, flags, &rtm, sizeof rtm);
    mnl_attr_put_u32(h, RTA_TABLE, r->table);
    if (r->kind == VS_ROUTE_UNICAST_DEV)
        mnl_attr_put_u32(h, RTA_DST, r->dst);
    if (r->kind == VS_ROUTE_DEFAULT_VIA)
        mnl_attr_put_u32(h, RTA_GATEWAY, r->gateway);
    if (r->oif > 0)
        mnl_attr_put_u32(h, RTA_OIF, (uint32_t)r->oif);
    return h;
}

int vswitch_nl_route_add(struct vs_nl *nl, const struct vs_route_spec *r, bool replace,
                         struct al_error *err)
{
    struct nl_msg m;
    uint16_t flags = NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL);
    return nl__talk(nl, nl__route_msg(&m, RTM_NEWROUTE, flags, r), "adding a route", err);
}

int vswitch_nl_route_del(struct vs_nl *nl, const struct vs_route_spec *r, struct al_error *err)
{
    struct nl_msg m;
    return nl__talk(nl, nl__route_msg(&m, RTM_DELROUTE, 0, r), "deleting a route", err);
}

static struct nlmsghdr *nl__rule_msg(struct nl_msg *m, uint16_t type, uint16_t flags, uint32_t mark,
                                     uint32_t table, uint32_t prio)
{
    struct fib_rule_hdr frh = {.family = AF_INET,
                               .action = FR_ACT_TO_TBL,
                               .table = table < 256 ? (uint8_t)table : RT_TABLE_UNSPEC};
    struct nlmsghdr *h = nl__init(m, type, flags, &frh, sizeof frh);
    mnl_attr_put_u32(h, FRA_PRIORITY, prio);
    mnl_attr_put_u32(h, FRA_FWMARK, mark);
    mnl_attr_put_u32(h, FRA_FWMASK, 0xffffffffu);
    mnl_attr_put_u32(h, FRA_TABLE, table);
    return h;
}

int vswitch_nl_rule_add(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                        struct al_error *err)
{
    bool exists = false;
    int rc = vswitch_nl_rule_exists(nl, mark, table, prio, &exists, err);
    if (rc || exists)
        return rc;
    struct nl_msg m;
    rc = nl__talk(nl, nl__rule_msg(&m, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, mark, table, prio),
                  "adding the fwmark rule", err);
    return rc == -EEXIST ? 0 : rc;
}

int vswitch_nl_rule_del(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                        struct al_error *err)
{
    struct nl_msg m;
    return nl__talk(nl, nl__rule_msg(&m, RTM_DELRULE, 0, mark, table, prio),
                    "deleting the fwmark rule", err);
}

struct nl__rule_find {
    uint32_t mark, table, prio;
    bool found;
};

static int nl__rule_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__rule_find *f = arg;
    const struct fib_rule_hdr *frh = mnl_nlmsg_get_payload(h);
    const struct nlattr *tb[FRA_MAX + 1];
    nl__parse(h, sizeof *frh, tb, FRA_MAX);
    if (frh->family != AF_INET || frh->action != FR_ACT_TO_TBL)
        return 0;
    uint32_t table = tb[FRA_TABLE] ? nl__u32(tb[FRA_TABLE]) : frh->table;
    if (nl__u32(tb[FRA_PRIORITY]) == f->prio && nl__u32(tb[FRA_FWMARK]) == f->mark &&
        tb[FRA_FWMASK] && nl__u32(tb[FRA_FWMASK]) == 0xffffffffu && table == f->table &&
        !tb[FRA_IIFNAME] && !tb[FRA_OIFNAME] && frh->src_len == 0 && frh->dst_len == 0 &&
        !(frh->flags & FIB_RULE_INVERT)) {
        f->found = true;
        return 1;
    }
    return 0;
}

int vswitch_nl_rule_exists(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                           bool *exists, struct al_error *err)
{
    struct nl_msg m;
    struct fib_rule_hdr frh = {.family = AF_INET};
    struct nl__rule_find f = {.mark = mark, .table = table, .prio = prio};
    int rc = nl__dump(nl, nl__init(&m, RTM_GETRULE, 0, &frh, sizeof frh), RTM_NEWRULE, nl__rule_cb,
                      &f, "listing ip rules", err);
    if (rc < 0)
        return rc;
    *exists = f.found;
    return 0;
}

int vswitch_nl_neigh_add(struct vs_nl *nl, int ifindex, uint32_t ip, const uint8_t mac[6],
                         struct al_error *err)
{
    struct nl_msg m;
    struct ndmsg nd = {.ndm_family = AF_INET, .ndm_ifindex = ifindex, .ndm_state = NUD_PERMANENT};
    struct nlmsghdr *h = nl__init(&m, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, &nd, sizeof nd);
    mnl_attr_put_u32(h, NDA_DST, ip);
    mnl_attr_put(h, NDA_LLADDR, 6, mac);
    return nl__talk(nl, h, "adding a neighbour entry", err);
}

/* ---- dumps -------------------------------------------------------------------------------- */

struct nl__cb {
    union {
        int (*route)(const struct vs_nl_route_info *r, void *arg);
        int (*addr)(const struct vs_nl_addr_info *a, void *arg);
        int (*link)(const struct vs_nl_link_info *l, void *arg);
    };
    void *arg;
};

static int nl__route_dump_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__cb *c = arg;
    const struct rtmsg *rtm = mnl_nlmsg_get_payload(h);
    if (rtm->rtm_family != AF_INET)
        return 0;
    const struct nlattr *tb[RTA_MAX + 1];
    nl__parse(h, sizeof *rtm, tb, RTA_MAX);
    struct vs_nl_route_info r = {
        .table = tb[RTA_TABLE] ? nl__u32(tb[RTA_TABLE]) : rtm->rtm_table,
        .type = rtm->rtm_type,
        .protocol = rtm->rtm_protocol,
        .dst = nl__u32(tb[RTA_DST]),
        .dst_len = rtm->rtm_dst_len,
        .oif = (int)nl__u32(tb[RTA_OIF]),
    };
    return c->route(&r, c->arg);
}

int vswitch_nl_route_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_route_info *r, void *arg),
                          void *arg, struct al_error *err)
{
    struct nl_msg m;
    struct rtmsg rtm = {.rtm_family = AF_INET};
    struct nl__cb c = {.route = cb, .arg = arg};
    return nl__dump(nl, nl__init(&m, RTM_GETROUTE, 0, &rtm, sizeof rtm), RTM_NEWROUTE,
                    nl__route_dump_cb, &c, "listing routes", err);
}

static int nl__addr_dump_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__cb *c = arg;
    const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(h);
    if (ifa->ifa_family != AF_INET)
        return 0;
    const struct nlattr *tb[IFA_MAX + 1];
    nl__parse(h, sizeof *ifa, tb, IFA_MAX);
    struct vs_nl_addr_info a = {
        .ifindex = (int)ifa->ifa_index,
        .addr = nl__u32(tb[IFA_LOCAL] ? tb[IFA_LOCAL] : tb[IFA_ADDRESS]),
        .prefix_len = ifa->ifa_prefixlen,
    };
    return c->addr(&a, c->arg);
}

int vswitch_nl_addr_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_addr_info *a, void *arg),
                         void *arg, struct al_error *err)
{
    struct nl_msg m;
    struct ifaddrmsg ifa = {.ifa_family = AF_INET};
    struct nl__cb c = {.addr = cb, .arg = arg};
    return nl__dump(nl, nl__init(&m, RTM_GETADDR, 0, &ifa, sizeof ifa), RTM_NEWADDR,
                    nl__addr_dump_cb, &c, "listing addresses", err);
}

static int nl__link_dump_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__cb *c = arg;
    struct vs_nl_link_info l;
    nl__link_parse(h, &l);
    return c->link(&l, c->arg);
}

int vswitch_nl_link_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_link_info *l, void *arg),
                         void *arg, struct al_error *err)
{
    struct nl_msg m;
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    struct nl__cb c = {.link = cb, .arg = arg};
    return nl__dump(nl, nl__init(&m, RTM_GETLINK, 0, &ifi, sizeof ifi), RTM_NEWLINK,
                    nl__link_dump_cb, &c, "listing interfaces", err);
}
