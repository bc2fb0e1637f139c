/* vswitch/nl: see nl.h. */
#include "nl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/fib_rules.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sys/socket.h>
#include <sys/time.h>

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif
#ifndef NETLINK_CAP_ACK
#define NETLINK_CAP_ACK 10
#endif

#define NL_MSG_MAX  4096
#define NL_RECV_MAX 65536

struct nl_msg {
    union {
        struct nlmsghdr h;
        char buf[NL_MSG_MAX];
    };
    int overflow;
};

static void nl__init(struct nl_msg *m, uint16_t type, uint16_t flags)
{
    memset(&m->h, 0, sizeof m->h);
    m->overflow = 0;
    m->h.nlmsg_len = NLMSG_LENGTH(0);
    m->h.nlmsg_type = type;
    m->h.nlmsg_flags = NLM_F_REQUEST | flags;
}

static void *nl__tail(struct nl_msg *m)
{
    return m->buf + NLMSG_ALIGN(m->h.nlmsg_len);
}

static void *nl__put(struct nl_msg *m, const void *data, size_t len)
{
    size_t off = NLMSG_ALIGN(m->h.nlmsg_len);
    if (off + NLMSG_ALIGN(len) > sizeof m->buf) {
        m->overflow = 1;
        return NULL;
    }
    void *p = m->buf + off;
    memset(p, 0, NLMSG_ALIGN(len));
    if (data)
        memcpy(p, data, len);
    m->h.nlmsg_len = off + len;
    return p;
}

static void nl__attr(struct nl_msg *m, uint16_t type, const void *data, size_t len)
{
    size_t off = NLMSG_ALIGN(m->h.nlmsg_len);
    if (off + RTA_SPACE(len) > sizeof m->buf) {
        m->overflow = 1;
        return;
    }
    struct rtattr *a = (struct rtattr *)(m->buf + off);
    a->rta_type = type;
    a->rta_len = RTA_LENGTH(len);
    memset(RTA_DATA(a), 0, RTA_ALIGN(len));
    if (len)
        memcpy(RTA_DATA(a), data, len);
    m->h.nlmsg_len = off + RTA_SPACE(len);
}

static void nl__attr_u32(struct nl_msg *m, uint16_t type, uint32_t v)
{
    nl__attr(m, type, &v, sizeof v);
}

static void nl__attr_u8(struct nl_msg *m, uint16_t type, uint8_t v)
{
    nl__attr(m, type, &v, sizeof v);
}

static void nl__attr_str(struct nl_msg *m, uint16_t type, const char *s)
{
    nl__attr(m, type, s, strlen(s) + 1);
}

static struct rtattr *nl__nest(struct nl_msg *m, uint16_t type)
{
    struct rtattr *a = nl__tail(m);
    nl__attr(m, type, NULL, 0);
    return m->overflow ? NULL : a;
}

static void nl__nest_end(struct nl_msg *m, struct rtattr *a)
{
    if (a)
        a->rta_len = (unsigned short)((char *)nl__tail(m) - (char *)a);
}

int vs_nl_open(struct vs_nl *nl, struct al_error *err)
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

void vs_nl_close(struct vs_nl *nl)
{
    if (nl->fd >= 0)
        close(nl->fd);
    nl->fd = -1;
}

/* Extracts the kernel's extended-ack text, if any. */
static const char *nl__ext_msg(const struct nlmsghdr *h)
{
    if (!(h->nlmsg_flags & NLM_F_ACK_TLVS))
        return NULL;
    const struct nlmsgerr *e = NLMSG_DATA(h);
    size_t off = sizeof *e;
    if (!(h->nlmsg_flags & NLM_F_CAPPED))
        off += e->msg.nlmsg_len - sizeof(struct nlmsghdr);
    if (NLMSG_LENGTH(off) > h->nlmsg_len)
        return NULL;
    const char *p = (const char *)e + NLMSG_ALIGN(off);
    size_t left = h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(off));
    while (left >= sizeof(struct nlattr)) {
        const struct nlattr *a = (const struct nlattr *)p;
        if (a->nla_len < sizeof *a || a->nla_len > left)
            break;
        if ((a->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG && a->nla_len > sizeof *a &&
            p[a->nla_len - 1] == '\0')
            return p + sizeof *a;
        size_t step = NLA_ALIGN(a->nla_len);
        if (step >= left)
            break;
        p += step;
        left -= step;
    }
    return NULL;
}

static int nl__send(struct vs_nl *nl, struct nl_msg *m, const char *what, struct al_error *err)
{
    if (m->overflow)
        return al_error_set(err, -EMSGSIZE, "%s: netlink request too large", what);
    m->h.nlmsg_seq = ++nl->seq;
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    ssize_t n;
    do {
        n = sendto(nl->fd, m->buf, m->h.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof sa);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return al_error_set(err, -errno, "%s: netlink send failed: %s", what, strerror(errno));
    return 0;
}

/* Sends m and waits for its acknowledgement. */
static int nl__talk(struct vs_nl *nl, struct nl_msg *m, const char *what, struct al_error *err)
{
    m->h.nlmsg_flags |= NLM_F_ACK;
    int rc = nl__send(nl, m, what, err);
    if (rc)
        return rc;
    char *buf = malloc(NL_RECV_MAX);
    if (!buf)
        return al_error_set(err, -ENOMEM, "%s: out of memory", what);
    for (;;) {
        ssize_t n = recv(nl->fd, buf, NL_RECV_MAX, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = al_error_set(err, -errno, "%s: netlink receive failed: %s", what, strerror(errno));
            break;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != nl->seq)
                continue;
            if (h->nlmsg_type != NLMSG_ERROR)
                continue;
            const struct nlmsgerr *e = NLMSG_DATA(h);
            if (e->error == 0) {
                free(buf);
                return 0;
            }
            const char *ext = nl__ext_msg(h);
            rc = al_error_set(err, e->error, "%s: %s%s%s", what, strerror(-e->error),
                              ext ? ": " : "", ext ? ext : "");
            free(buf);
            return rc;
        }
    }
    free(buf);
    return rc;
}

/* Sends a dump request and calls cb for each answer of type want. */
static int nl__dump(struct vs_nl *nl, struct nl_msg *m, uint16_t want,
                    int (*cb)(const struct nlmsghdr *h, void *arg), void *arg, const char *what,
                    struct al_error *err)
{
    m->h.nlmsg_flags |= NLM_F_DUMP;
    int rc = nl__send(nl, m, what, err);
    if (rc)
        return rc;
    char *buf = malloc(NL_RECV_MAX);
    if (!buf)
        return al_error_set(err, -ENOMEM, "%s: out of memory", what);
    int stop = 0;
    for (;;) {
        ssize_t n = recv(nl->fd, buf, NL_RECV_MAX, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = al_error_set(err, -errno, "%s: netlink receive failed: %s", what, strerror(errno));
            goto out;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != nl->seq)
                continue;
            if (h->nlmsg_type == NLMSG_DONE) {
                rc = stop;
                goto out;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                rc = al_error_set(err, e->error ? e->error : -EIO, "%s: %s", what,
                                  strerror(e->error ? -e->error : EIO));
                goto out;
            }
            /* Keep reading to NLMSG_DONE even after the callback stopped, so the socket
             * is clean for the next request. */
            if (h->nlmsg_type == want && !stop)
                stop = cb(h, arg);
        }
    }
out:
    free(buf);
    return rc;
}

/* Walks the attributes that follow a fixed header of hdrlen bytes. */
static void nl__parse(const struct nlmsghdr *h, size_t hdrlen, struct rtattr **tb, int max)
{
    memset(tb, 0, sizeof(*tb) * (size_t)(max + 1));
    if (h->nlmsg_len < NLMSG_LENGTH(hdrlen))
        return;
    struct rtattr *a = (struct rtattr *)((char *)NLMSG_DATA(h) + NLMSG_ALIGN(hdrlen));
    int len = (int)h->nlmsg_len - (int)NLMSG_LENGTH(NLMSG_ALIGN(hdrlen));
    for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type <= max && !tb[a->rta_type])
            tb[a->rta_type] = a;
    }
}

static uint32_t nl__u32(const struct rtattr *a)
{
    uint32_t v = 0;
    if (a && RTA_PAYLOAD(a) >= sizeof v)
        memcpy(&v, RTA_DATA(a), sizeof v);
    return v;
}

/* ---- links ------------------------------------------------------------------------ */

static void nl__addrgen_none(struct nl_msg *m)
{
    struct rtattr *af = nl__nest(m, IFLA_AF_SPEC);
    struct rtattr *v6 = nl__nest(m, AF_INET6);
    nl__attr_u8(m, IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE);
    nl__nest_end(m, v6);
    nl__nest_end(m, af);
}

int vs_nl_veth_add(struct vs_nl *nl, const struct vs_veth_spec *s, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    nl__put(&m, &ifi, sizeof ifi);
    nl__attr_str(&m, IFLA_IFNAME, s->name);
    if (s->mac)
        nl__attr(&m, IFLA_ADDRESS, s->mac, 6);
    if (s->mtu)
        nl__attr_u32(&m, IFLA_MTU, s->mtu);
    nl__attr_u32(&m, IFLA_NUM_TX_QUEUES, 1);
    nl__attr_u32(&m, IFLA_NUM_RX_QUEUES, 1);
    struct rtattr *li = nl__nest(&m, IFLA_LINKINFO);
    nl__attr_str(&m, IFLA_INFO_KIND, "veth");
    struct rtattr *data = nl__nest(&m, IFLA_INFO_DATA);
    struct rtattr *peer = nl__nest(&m, VETH_INFO_PEER);
    struct ifinfomsg pifi = {.ifi_family = AF_UNSPEC};
    nl__put(&m, &pifi, sizeof pifi);
    nl__attr_str(&m, IFLA_IFNAME, s->peer_name);
    if (s->peer_mac)
        nl__attr(&m, IFLA_ADDRESS, s->peer_mac, 6);
    if (s->mtu)
        nl__attr_u32(&m, IFLA_MTU, s->mtu);
    nl__attr_u32(&m, IFLA_NUM_TX_QUEUES, 1);
    nl__attr_u32(&m, IFLA_NUM_RX_QUEUES, 1);
    if (s->peer_netns_fd >= 0)
        nl__attr_u32(&m, IFLA_NET_NS_FD, (uint32_t)s->peer_netns_fd);
    nl__nest_end(&m, peer);
    nl__nest_end(&m, data);
    nl__nest_end(&m, li);
    char what[64];
    snprintf(what, sizeof what, "creating veth %s", s->name);
    return nl__talk(nl, &m, what, err);
}

int vs_nl_link_del(struct vs_nl *nl, int ifindex, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_DELLINK, 0);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
    nl__put(&m, &ifi, sizeof ifi);
    char what[64];
    snprintf(what, sizeof what, "deleting interface %d", ifindex);
    return nl__talk(nl, &m, what, err);
}

int vs_nl_link_set_up(struct vs_nl *nl, int ifindex, bool up, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_NEWLINK, 0);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC,
                            .ifi_index = ifindex,
                            .ifi_flags = up ? IFF_UP : 0,
                            .ifi_change = IFF_UP};
    nl__put(&m, &ifi, sizeof ifi);
    char what[64];
    snprintf(what, sizeof what, "setting interface %d %s", ifindex, up ? "up" : "down");
    return nl__talk(nl, &m, what, err);
}

int vs_nl_link_addrgen_none(struct vs_nl *nl, int ifindex, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_NEWLINK, 0);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
    nl__put(&m, &ifi, sizeof ifi);
    nl__addrgen_none(&m);
    return nl__talk(nl, &m, "disabling IPv6 address generation", err);
}

static void nl__link_parse(const struct nlmsghdr *h, struct vs_nl_link_info *l)
{
    const struct ifinfomsg *ifi = NLMSG_DATA(h);
    struct rtattr *tb[IFLA_MAX + 1];
    nl__parse(h, sizeof *ifi, tb, IFLA_MAX);
    memset(l, 0, sizeof *l);
    l->ifindex = ifi->ifi_index;
    l->flags = ifi->ifi_flags;
    if (tb[IFLA_IFNAME]) {
        size_t n = RTA_PAYLOAD(tb[IFLA_IFNAME]);
        memcpy(l->name, RTA_DATA(tb[IFLA_IFNAME]), n < 16 ? n : 16);
        l->name[15] = '\0';
    }
    if (tb[IFLA_ADDRESS] && RTA_PAYLOAD(tb[IFLA_ADDRESS]) == 6)
        memcpy(l->mac, RTA_DATA(tb[IFLA_ADDRESS]), 6);
    if (tb[IFLA_LINKINFO]) {
        struct rtattr *li = tb[IFLA_LINKINFO];
        int len = (int)RTA_PAYLOAD(li);
        for (struct rtattr *a = RTA_DATA(li); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
            if (a->rta_type == IFLA_INFO_KIND) {
                size_t n = RTA_PAYLOAD(a);
                memcpy(l->kind, RTA_DATA(a), n < 16 ? n : 16);
                l->kind[15] = '\0';
            }
        }
    }
}

/* RTM_GETLINK for one link answers with a single RTM_NEWLINK, then the ACK. */
static int nl__getlink(struct vs_nl *nl, struct nl_msg *m, struct vs_nl_link_info *out,
                       const char *what, struct al_error *err)
{
    int rc = nl__send(nl, m, what, err);
    if (rc)
        return rc;
    char *buf = malloc(NL_RECV_MAX);
    if (!buf)
        return al_error_set(err, -ENOMEM, "%s: out of memory", what);
    bool found = false;
    for (;;) {
        ssize_t n = recv(nl->fd, buf, NL_RECV_MAX, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = al_error_set(err, -errno, "%s: %s", what, strerror(errno));
            break;
        }
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_seq != nl->seq)
                continue;
            if (h->nlmsg_type == RTM_NEWLINK) {
                nl__link_parse(h, out);
                found = true;
                continue;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                rc = e->error;
                if (rc == 0 && !found)
                    rc = -ENODEV;
                if (rc == -ENODEV)
                    al_error_set(err, rc, "%s: no such interface", what);
                else if (rc)
                    al_error_set(err, rc, "%s: %s", what, strerror(-rc));
                free(buf);
                return rc;
            }
        }
    }
    free(buf);
    return rc;
}

int vs_nl_link_index(struct vs_nl *nl, const char *name, int *ifindex, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_GETLINK, NLM_F_ACK);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    nl__put(&m, &ifi, sizeof ifi);
    nl__attr_str(&m, IFLA_IFNAME, name);
    struct vs_nl_link_info l;
    char what[64];
    snprintf(what, sizeof what, "looking up interface %s", name);
    int rc = nl__getlink(nl, &m, &l, what, err);
    if (rc)
        return rc;
    *ifindex = l.ifindex;
    return 0;
}

int vs_nl_link_get(struct vs_nl *nl, int ifindex, struct vs_nl_link_info *out, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_GETLINK, NLM_F_ACK);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
    nl__put(&m, &ifi, sizeof ifi);
    char what[64];
    snprintf(what, sizeof what, "looking up interface %d", ifindex);
    return nl__getlink(nl, &m, out, what, err);
}

int vs_nl_link_set_mac(struct vs_nl *nl, int ifindex, const uint8_t mac[6], struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_NEWLINK, 0);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
    nl__put(&m, &ifi, sizeof ifi);
    nl__attr(&m, IFLA_ADDRESS, mac, 6);
    return nl__talk(nl, &m, "setting a MAC address", err);
}

/* ---- addresses, routes, rules, neighbours ------------------------------------------ */

int vs_nl_addr_add(struct vs_nl *nl, int ifindex, uint32_t addr, unsigned prefix_len,
                   struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE);
    struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                            .ifa_prefixlen = (unsigned char)prefix_len,
                            .ifa_scope = RT_SCOPE_UNIVERSE,
                            .ifa_index = (unsigned)ifindex};
    nl__put(&m, &ifa, sizeof ifa);
    nl__attr_u32(&m, IFA_LOCAL, addr);
    nl__attr_u32(&m, IFA_ADDRESS, addr);
    return nl__talk(nl, &m, "adding an address", err);
}

static void nl__route_msg(struct nl_msg *m, const struct vs_route_spec *r)
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
    nl__put(m, &rtm, sizeof rtm);
    nl__attr_u32(m, RTA_TABLE, r->table);
    if (r->kind == VS_ROUTE_UNICAST_DEV)
        nl__attr_u32(m, RTA_DST, r->dst);
    if (r->kind == VS_ROUTE_DEFAULT_VIA)
        nl__attr_u32(m, RTA_GATEWAY, r->gateway);
    if (r->oif > 0)
        nl__attr_u32(m, RTA_OIF, (uint32_t)r->oif);
}

int vs_nl_route_add(struct vs_nl *nl, const struct vs_route_spec *r, bool replace,
                    struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_NEWROUTE, NLM_F_CREATE | (replace ? NLM_F_REPLACE : NLM_F_EXCL));
    nl__route_msg(&m, r);
    return nl__talk(nl, &m, "adding a route", err);
}

int vs_nl_route_del(struct vs_nl *nl, const struct vs_route_spec *r, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_DELROUTE, 0);
    nl__route_msg(&m, r);
    return nl__talk(nl, &m, "deleting a route", err);
}

static void nl__rule_msg(struct nl_msg *m, uint32_t mark, uint32_t table, uint32_t prio)
{
    struct fib_rule_hdr frh = {.family = AF_INET,
                               .action = FR_ACT_TO_TBL,
                               .table = table < 256 ? (uint8_t)table : RT_TABLE_UNSPEC};
    nl__put(m, &frh, sizeof frh);
    nl__attr_u32(m, FRA_PRIORITY, prio);
    nl__attr_u32(m, FRA_FWMARK, mark);
    nl__attr_u32(m, FRA_FWMASK, 0xffffffffu);
    nl__attr_u32(m, FRA_TABLE, table);
}

int vs_nl_rule_add(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                   struct al_error *err)
{
    bool exists = false;
    int rc = vs_nl_rule_exists(nl, mark, table, prio, &exists, err);
    if (rc || exists)
        return rc;
    struct nl_msg m;
    nl__init(&m, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL);
    nl__rule_msg(&m, mark, table, prio);
    rc = nl__talk(nl, &m, "adding the fwmark rule", err);
    return rc == -EEXIST ? 0 : rc;
}

int vs_nl_rule_del(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio,
                   struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_DELRULE, 0);
    nl__rule_msg(&m, mark, table, prio);
    return nl__talk(nl, &m, "deleting the fwmark rule", err);
}

struct nl__rule_find {
    uint32_t mark, table, prio;
    bool found;
};

static int nl__rule_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__rule_find *f = arg;
    const struct fib_rule_hdr *frh = NLMSG_DATA(h);
    struct rtattr *tb[FRA_MAX + 1];
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

int vs_nl_rule_exists(struct vs_nl *nl, uint32_t mark, uint32_t table, uint32_t prio, bool *exists,
                      struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_GETRULE, 0);
    struct fib_rule_hdr frh = {.family = AF_INET};
    nl__put(&m, &frh, sizeof frh);
    struct nl__rule_find f = {.mark = mark, .table = table, .prio = prio};
    int rc = nl__dump(nl, &m, RTM_NEWRULE, nl__rule_cb, &f, "listing ip rules", err);
    if (rc < 0)
        return rc;
    *exists = f.found;
    return 0;
}

int vs_nl_neigh_add(struct vs_nl *nl, int ifindex, uint32_t ip, const uint8_t mac[6],
                    struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE);
    struct ndmsg nd = {.ndm_family = AF_INET, .ndm_ifindex = ifindex, .ndm_state = NUD_PERMANENT};
    nl__put(&m, &nd, sizeof nd);
    nl__attr_u32(&m, NDA_DST, ip);
    nl__attr(&m, NDA_LLADDR, mac, 6);
    return nl__talk(nl, &m, "adding a neighbour entry", err);
}

/* ---- dumps ------------------------------------------------------------------------- */

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
    const struct rtmsg *rtm = NLMSG_DATA(h);
    if (rtm->rtm_family != AF_INET)
        return 0;
    struct rtattr *tb[RTA_MAX + 1];
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

int vs_nl_route_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_route_info *r, void *arg),
                     void *arg, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_GETROUTE, 0);
    struct rtmsg rtm = {.rtm_family = AF_INET};
    nl__put(&m, &rtm, sizeof rtm);
    struct nl__cb c = {.route = cb, .arg = arg};
    return nl__dump(nl, &m, RTM_NEWROUTE, nl__route_dump_cb, &c, "listing routes", err);
}

static int nl__addr_dump_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__cb *c = arg;
    const struct ifaddrmsg *ifa = NLMSG_DATA(h);
    if (ifa->ifa_family != AF_INET)
        return 0;
    struct rtattr *tb[IFA_MAX + 1];
    nl__parse(h, sizeof *ifa, tb, IFA_MAX);
    struct vs_nl_addr_info a = {
        .ifindex = (int)ifa->ifa_index,
        .addr = nl__u32(tb[IFA_LOCAL] ? tb[IFA_LOCAL] : tb[IFA_ADDRESS]),
        .prefix_len = ifa->ifa_prefixlen,
    };
    return c->addr(&a, c->arg);
}

int vs_nl_addr_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_addr_info *a, void *arg),
                    void *arg, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_GETADDR, 0);
    struct ifaddrmsg ifa = {.ifa_family = AF_INET};
    nl__put(&m, &ifa, sizeof ifa);
    struct nl__cb c = {.addr = cb, .arg = arg};
    return nl__dump(nl, &m, RTM_NEWADDR, nl__addr_dump_cb, &c, "listing addresses", err);
}

static int nl__link_dump_cb(const struct nlmsghdr *h, void *arg)
{
    struct nl__cb *c = arg;
    struct vs_nl_link_info l;
    nl__link_parse(h, &l);
    return c->link(&l, c->arg);
}

int vs_nl_link_dump(struct vs_nl *nl, int (*cb)(const struct vs_nl_link_info *l, void *arg),
                    void *arg, struct al_error *err)
{
    struct nl_msg m;
    nl__init(&m, RTM_GETLINK, 0);
    struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
    nl__put(&m, &ifi, sizeof ifi);
    struct nl__cb c = {.link = cb, .arg = arg};
    return nl__dump(nl, &m, RTM_NEWLINK, nl__link_dump_cb, &c, "listing interfaces", err);
}
