/* Unit tests: the vswitch loader library (vswitch.h). Needs root.
 *
 * Each test runs in its own process and network namespace (which plays the switch's "host"
 * namespace), with a state directory under /tmp and pins under /sys/fs/bpf that carry the
 * runner's and the test's PIDs; the runner removes both after the suite (also after a
 * failed test).
 */
#include "al_test.h"
#include "vswitch/internal.h"
#include "vswitch/nl.h"
#include "vswitch/vswitch.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <net/if.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_state[PATH_MAX], g_pin[PATH_MAX];

static uint32_t ip(const char *s)
{
    struct in_addr a;
    ck_assert_int_eq(inet_pton(AF_INET, s, &a), 1);
    return a.s_addr;
}

static void world(void)
{
    if (geteuid() != 0)
        ck_abort_msg("the vswitch library tests need root: run them as root, as CI does");
    ck_assert_int_eq(unshare(CLONE_NEWNET), 0);
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    ck_assert_int_eq(vswitch_nl_link_set_up(&nl, 1, true, NULL), 0);
    vswitch_nl_close(&nl);
    snprintf(g_state, sizeof g_state, "/tmp/airlock-unit-%d-%d", (int)getppid(), (int)getpid());
    snprintf(g_pin, sizeof g_pin, "/sys/fs/bpf/airlock-unit-%d-%d", (int)getppid(), (int)getpid());
}

static struct vswitch_opts opts(void)
{
    struct vswitch_opts o = {.state_dir = g_state, .pin_dir = g_pin, .ifname_prefix = "ut"};
    return o;
}

static struct vswitch *open_ok(const struct vswitch_opts *o)
{
    struct al_error e = {0};
    struct vswitch *vs = NULL;
    int rc = vswitch_open(o, &vs, &e);
    ck_assert_msg(rc == 0, "vswitch_open: %s", al_error_str(&e));
    return vs;
}

static int count_ifaces(struct vswitch *vs, bool pool)
{
    int n = 0;
    struct vs_iface ifc;
    __u32 key, next, *prev = NULL;
    struct vswitch_view *v = vswitch_get_view(vs);
    while (bpf_map_get_next_key(v->map_ifaces, prev, &next) == 0) {
        if (bpf_map_lookup_elem(v->map_ifaces, &next, &ifc) == 0 &&
            !!(ifc.flags & VS_IF_POOL) == pool)
            n++;
        key = next;
        prev = &key;
    }
    return n;
}

static bool link_exists(int ifindex)
{
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    struct vs_nl_link_info l;
    bool ok = vswitch_nl_link_get(&nl, ifindex, &l, NULL) == 0;
    vswitch_nl_close(&nl);
    return ok;
}

/* Runs f inside netns_fd (the test process is disposable, but it returns home anyway). */
struct guest_view {
    bool has_addr, has_default, eth0_up;
};

static int guest_addr_cb(const struct vs_nl_addr_info *a, void *arg)
{
    struct guest_view *g = arg;
    if (a->addr == ip("10.200.0.2") && a->prefix_len == 30)
        g->has_addr = true;
    return 0;
}

static int guest_route_cb(const struct vs_nl_route_info *r, void *arg)
{
    struct guest_view *g = arg;
    if (r->dst_len == 0 && r->table == 254 && r->type == 1 /* RTN_UNICAST */)
        g->has_default = true;
    return 0;
}

static struct guest_view look_inside(int netns_fd)
{
    struct guest_view g = {0};
    int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(home, 0);
    ck_assert_int_eq(setns(netns_fd, CLONE_NEWNET), 0);
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    int eth = 0;
    ck_assert_int_eq(vswitch_nl_link_index(&nl, "eth0", &eth, NULL), 0);
    struct vs_nl_link_info l;
    ck_assert_int_eq(vswitch_nl_link_get(&nl, eth, &l, NULL), 0);
    g.eth0_up = l.flags & IFF_UP;
    ck_assert_int_ge(vswitch_nl_addr_dump(&nl, guest_addr_cb, &g, NULL), 0);
    ck_assert_int_ge(vswitch_nl_route_dump(&nl, guest_route_cb, &g, NULL), 0);
    vswitch_nl_close(&nl);
    ck_assert_int_eq(setns(home, CLONE_NEWNET), 0);
    close(home);
    return g;
}

/* ---- options ---------------------------------------------------------------------------- */

static void expect_bad(struct vswitch_opts o, const char *needle)
{
    struct al_error e = {0};
    struct vswitch *vs = NULL;
    int rc = vswitch_open(&o, &vs, &e);
    ck_assert_msg(rc == -EINVAL, "want -EINVAL for '%s', got %d (%s)", needle, rc,
                  al_error_str(&e));
    ck_assert_ptr_null(vs);
    ck_assert_msg(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
}

START_TEST(options_are_validated)
{
    world();
    struct vswitch_opts o = opts();
    o.range = "10.200.0.0";
    expect_bad(o, "not an IPv4 CIDR");
    o.range = "10.200.0.5/16";
    expect_bad(o, "did you mean 10.200.0.0/16");
    o.range = "10.200.0.0/33";
    expect_bad(o, "prefix length must be");
    o.range = "127.0.0.0/8";
    expect_bad(o, "private range");
    o.range = "10.200.0.0/31";
    expect_bad(o, "smaller than one sandbox subnet");
    o = opts();
    o.prefix_len = 29;
    expect_bad(o, "use 30 (default) or 31");
    o = opts();
    o.ifname_prefix = "Bad-Name";
    expect_bad(o, "interface prefix");
    o.ifname_prefix = "waytoolongprefix";
    expect_bad(o, "interface prefix");
    o = opts();
    o.steer_mark = 5;
    o.reply_mark = 5;
    expect_bad(o, "must differ");
    o = opts();
    o.route_table = 254;
    expect_bad(o, "kernel's own");
    o = opts();
    o.rule_priority = 40000;
    expect_bad(o, "below 32766");
    o = opts();
    o.pin_dir = "relative/pins";
    expect_bad(o, "absolute path");
    o = opts();
    o.nft_table = "bad table";
    expect_bad(o, "nftables table name");
}
END_TEST

START_TEST(unsafe_host_refuses_to_start)
{
    world();
    ck_assert_int_eq(vswitch__sysctl_write("net/ipv4/ip_forward", "1"), 0);
    struct vswitch_opts o = opts();
    struct al_error e = {0};
    struct vswitch *vs = NULL;
    ck_assert_int_eq(vswitch_open(&o, &vs, &e), -EPERM);
    ck_assert_ptr_nonnull(strstr(e.msg, "net.ipv4.ip_forward"));
    ck_assert_ptr_nonnull(strstr(e.msg, "Set it to 0"));
    struct vswitch_check res[16];
    size_t n = 0;
    ck_assert_int_eq(vswitch_host_check(&o, res, 16, &n), 1);
    bool seen = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(res[i].name, "net.ipv4.ip_forward") == 0)
            seen = !res[i].ok;
        else
            ck_assert_msg(res[i].ok, "%s: %s", res[i].name, res[i].detail);
    }
    ck_assert(seen);
    /* Explicitly allowed: it starts. */
    o.allow_ip_forward = true;
    vs = open_ok(&o);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
    ck_assert_int_eq(vswitch__sysctl_write("net/ipv4/ip_forward", "0"), 0);
    o.allow_ip_forward = false;
    ck_assert_int_eq(vswitch_host_check(&o, res, 16, &n), 0);
}
END_TEST

/* ---- networks --------------------------------------------------------------------------- */

START_TEST(network_create_find_destroy)
{
    world();
    struct vswitch_opts o = opts();
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    struct vswitch_sandbox sb = {.id = 5, .label = "sandbox-five"};
    struct vswitch_net net;
    struct stat home0, home1, guest;
    ck_assert_int_eq(stat("/proc/thread-self/ns/net", &home0), 0);
    ck_assert_msg(vswitch_net_create(vs, &sb, &net, &e) == 0, "%s", al_error_str(&e));
    ck_assert_int_ge(net.netns_fd, 0);
    /* The sandbox's namespace is made in the calling thread, which must be back in its own. */
    ck_assert_int_eq(stat("/proc/thread-self/ns/net", &home1), 0);
    ck_assert_int_eq(fstat(net.netns_fd, &guest), 0);
    ck_assert(home1.st_ino == home0.st_ino && home1.st_dev == home0.st_dev);
    ck_assert(guest.st_ino != home0.st_ino);
    ck_assert_int_eq(net.tap_fd, -1);
    ck_assert_uint_eq(net.addr.s_addr, ip("10.200.0.2"));
    ck_assert_uint_eq(net.gateway.s_addr, ip("10.200.0.1"));
    ck_assert_uint_eq(net.prefix_len, 30);
    ck_assert_str_eq(net.host_ifname, "ut0");
    ck_assert_str_eq(net.guest_ifname, "eth0");
    ck_assert(link_exists(net.host_ifindex));

    struct guest_view g = look_inside(net.netns_fd);
    ck_assert(g.has_addr);
    ck_assert(g.has_default);
    ck_assert(g.eth0_up);

    struct vswitch_peer p;
    ck_assert_int_eq(vswitch_view_peer(vswitch_get_view(vs), net.addr, &p), 0);
    ck_assert_uint_eq(p.sandbox_id, 5);
    ck_assert_str_eq(p.label, "sandbox-five");
    ck_assert_int_eq(p.host_ifindex, net.host_ifindex);
    struct vswitch_counters c;
    ck_assert_int_eq(vswitch_view_counters(vswitch_get_view(vs), net.host_ifindex, &c), 0);

    struct vswitch_net found;
    ck_assert_int_eq(vswitch_net_find(vs, 5, &found), 0);
    ck_assert_int_eq(found.host_ifindex, net.host_ifindex);
    ck_assert_int_eq(found.netns_fd, -1);
    ck_assert_int_eq(vswitch_net_create(vs, &sb, &found, &e), -EEXIST);

    ck_assert_int_eq(vswitch_net_destroy(vs, 5, &e), 0);
    ck_assert(!link_exists(net.host_ifindex));
    ck_assert_int_eq(vswitch_view_peer(vswitch_get_view(vs), net.addr, &p), -ENOENT);
    ck_assert_int_eq(vswitch_net_find(vs, 5, &found), -ENOENT);
    ck_assert_int_eq(vswitch_net_destroy(vs, 5, &e), -ENOENT);
    vswitch_net_close_fds(&net);

    struct vswitch_sandbox bad = {.id = 0};
    ck_assert_int_eq(vswitch_net_create(vs, &bad, &net, &e), -EINVAL);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
    struct stat st;
    ck_assert_int_ne(stat(g_pin, &st), 0);
}
END_TEST

START_TEST(pool_hands_out_ready_networks)
{
    world();
    struct vswitch_opts o = opts();
    o.pool_size = 3;
    o.prefix_len = 31;
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    ck_assert_int_eq(vswitch_pool_fill(vs, &e), 3);
    ck_assert_uint_eq(vswitch_pool_ready(vs), 3);
    ck_assert_int_eq(count_ifaces(vs, true), 3);
    struct vswitch_sandbox sb = {.id = 9, .label = "nine"};
    struct vswitch_net net;
    ck_assert_int_eq(vswitch_net_create(vs, &sb, &net, &e), 0);
    ck_assert_uint_eq(vswitch_pool_ready(vs), 2);
    ck_assert_int_eq(count_ifaces(vs, true), 2);
    ck_assert_int_eq(count_ifaces(vs, false), 1);
    ck_assert_uint_eq(net.prefix_len, 31);
    /* /31: the gateway is even, the sandbox odd. */
    ck_assert_uint_eq(ntohl(net.addr.s_addr) & 1, 1);
    ck_assert_uint_eq(ntohl(net.gateway.s_addr) + 1, ntohl(net.addr.s_addr));
    struct vswitch_peer p;
    ck_assert_int_eq(vswitch_view_peer(vswitch_get_view(vs), net.addr, &p), 0);
    ck_assert_uint_eq(p.sandbox_id, 9);
    ck_assert_str_eq(p.label, "nine");
    ck_assert_int_ge(net.netns_fd, 0);
    ck_assert_int_eq(vswitch_pool_fill(vs, &e), 3);
    int keep = net.host_ifindex;
    vswitch_close(vs); /* gives the pool back, keeps the sandbox */

    vs = open_ok(&o);
    ck_assert_int_eq(count_ifaces(vs, true), 0);
    ck_assert_int_eq(count_ifaces(vs, false), 1);
    ck_assert(link_exists(keep));
    ck_assert_int_eq(vswitch_net_destroy(vs, 9, &e), 0);
    vswitch_net_close_fds(&net);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

/* Interfaces named ut* that the switch has no identity for: its half-made networks. */
struct staged_scan {
    struct vswitch *vs;
    int n, up, idx[16];
};

static int staged_cb(const struct vs_nl_link_info *l, void *arg)
{
    struct staged_scan *s = arg;
    __u32 k = (__u32)l->ifindex;
    struct vs_iface ifc;
    if (strncmp(l->name, "ut", 2) != 0 ||
        bpf_map_lookup_elem(vswitch_get_view(s->vs)->map_ifaces, &k, &ifc) == 0)
        return 0;
    if (s->n < 16)
        s->idx[s->n] = l->ifindex;
    s->n++;
    s->up += !!(l->flags & IFF_UP);
    return 0;
}

struct link_count {
    const char *prefix;
    int n;
};

static int count_links_cb(const struct vs_nl_link_info *l, void *arg)
{
    struct link_count *c = arg;
    if (strncmp(l->name, c->prefix, strlen(c->prefix)) == 0)
        c->n++;
    return 0;
}

/* Interfaces of this namespace whose name starts with prefix. */
static int count_links(const char *prefix)
{
    struct link_count c = {.prefix = prefix};
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    ck_assert_int_ge(vswitch_nl_link_dump(&nl, count_links_cb, &c, NULL), 0);
    vswitch_nl_close(&nl);
    return c.n;
}

static struct staged_scan staged(struct vswitch *vs)
{
    struct staged_scan s = {.vs = vs};
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    ck_assert_int_ge(vswitch_nl_link_dump(&nl, staged_cb, &s, NULL), 0);
    vswitch_nl_close(&nl);
    return s;
}

START_TEST(networks_are_made_ahead_and_finished_on_demand)
{
    world();
    struct vswitch_opts o = opts();
    o.pool_size = 2; /* (fewer than VS_STAGE_MAX: as many made ahead as the pool keeps) */
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    ck_assert_int_eq(vswitch_pool_fill(vs, &e), 2);
    /* Two pooled networks, and two more half-made: down, without identity, their clsact
     * qdisc already there (the first filter on a qdisc younger than an RCU grace period
     * waits for one, holding the RTNL). */
    struct staged_scan s = staged(vs);
    ck_assert_int_eq(count_ifaces(vs, true), 2);
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(s.up, 0);
    for (int i = 0; i < s.n; i++) {
        LIBBPF_OPTS(bpf_tc_hook, h, .ifindex = s.idx[i], .attach_point = BPF_TC_INGRESS);
        ck_assert_int_eq(bpf_tc_hook_create(&h), -EEXIST);
    }
    /* The pool first, then the oldest half-made network, finished; one more made ahead. */
    struct vswitch_net net[3];
    for (int i = 0; i < 3; i++) {
        struct vswitch_sandbox sb = {.id = (uint64_t)(20 + i)};
        ck_assert_int_eq(vswitch_net_create(vs, &sb, &net[i], &e), 0);
    }
    ck_assert_int_eq(net[2].host_ifindex, s.idx[0] < s.idx[1] ? s.idx[0] : s.idx[1]);
    struct vs_nl nl;
    struct vs_nl_link_info l;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    ck_assert_int_eq(vswitch_nl_link_get(&nl, net[2].host_ifindex, &l, NULL), 0);
    vswitch_nl_close(&nl);
    ck_assert(l.flags & IFF_UP);
    struct vswitch_peer p;
    ck_assert_int_eq(vswitch_view_peer(vswitch_get_view(vs), net[2].addr, &p), 0);
    ck_assert_uint_eq(p.sandbox_id, 22);
    struct guest_view g = look_inside(net[2].netns_fd);
    /* (Its address is another slot's than look_inside knows.) */
    ck_assert(g.has_default && g.eth0_up);
    s = staged(vs);
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(s.up, 0);
    ck_assert_int_eq(count_ifaces(vs, false), 3);

    /* Closing gives the half-made networks back with the pool: when it returns, only the
     * three sandboxes' interfaces are left. */
    vswitch_close(vs);
    ck_assert_int_eq(count_links("ut"), 3);
    vs = open_ok(&o);
    ck_assert_int_eq(staged(vs).n, 0);
    ck_assert_int_eq(count_ifaces(vs, false), 3);

    /* A process that dies with networks made ahead: the next start deletes them. The switch
     * is closed before the fork: a child that inherited its lock descriptor would find the
     * instance lock (a flock, shared by both copies) held until the parent's close, and fail
     * its open with EBUSY whenever it ran first. */
    vswitch_close(vs);
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) {
        struct vswitch *v2 = NULL;
        struct al_error e2 = {0};
        if (vswitch_open(&o, &v2, &e2) != 0) {
            fprintf(stderr, "child: vswitch_open: %s\n", al_error_str(&e2));
            _exit(1);
        }
        if (vswitch_pool_fill(v2, &e2) != 2 || staged(v2).n != 2) {
            fprintf(stderr, "child: pool fill: %s\n", al_error_str(&e2));
            _exit(2);
        }
        _exit(0); /* (no vswitch_close) */
    }
    int st = 0;
    ck_assert_int_eq(waitpid(c, &st, 0), c);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status %#x)", st);
    vs = open_ok(&o);
    ck_assert_int_eq(staged(vs).n, 0);
    ck_assert_int_eq(count_ifaces(vs, true), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(vswitch_net_destroy(vs, (uint64_t)(20 + i), &e), 0);
        vswitch_net_close_fds(&net[i]);
    }
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

/* A fill running in another thread (airlockd's refill between bursts). */
struct fill_arg {
    struct vswitch *vs;
    int rc;
};

static void *fill_thread(void *p)
{
    struct fill_arg *a = p;
    struct al_error e = {0};
    a->rc = vswitch_pool_fill(a->vs, &e);
    return NULL;
}

/* A gate in the fill (vs->fill_step): the fill stops after its network number `at` until
 * the test opens it, so the test acts while the fill is provably under way. */
struct fill_gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    size_t made, at;
    bool open;
};

static void fill_gate_step(struct vswitch *vs, void *p)
{
    (void)vs;
    struct fill_gate *g = p;
    pthread_mutex_lock(&g->m);
    g->made++;
    pthread_cond_broadcast(&g->c);
    while (g->made == g->at && !g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

/* Waits until the fill is held at the gate's `at`. */
static void fill_gate_wait(struct fill_gate *g)
{
    pthread_mutex_lock(&g->m);
    while (g->made < g->at)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

/* Lets the fill go on, to be held again after network `next` (0: never). */
static void fill_gate_move(struct fill_gate *g, size_t next)
{
    pthread_mutex_lock(&g->m);
    g->at = next;
    g->open = next == 0;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

static void *close_thread(void *p)
{
    vswitch_close(p);
    return NULL;
}

START_TEST(pool_fill_yields_to_creates_and_close_waits_for_it)
{
    world();
    struct vswitch_opts o = opts();
    o.pool_size = 64;
    struct vswitch *vs = open_ok(&o);
    struct fill_gate g = {.m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER, .at = 3};
    vs->fill_step = fill_gate_step;
    vs->fill_step_arg = &g;
    struct fill_arg a = {.vs = vs, .rc = -1};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fill_thread, &a), 0);
    fill_gate_wait(&g);
    /* The fill takes the lock per network: with 3 of 64 made and the fill still running, a
     * sandbox gets one of them at once instead of waiting for all 64. */
    struct al_error e = {0};
    struct vswitch_sandbox sb = {.id = 7, .label = "seven"};
    struct vswitch_net net;
    ck_assert_int_eq(vswitch_net_create(vs, &sb, &net, &e), 0);
    ck_assert_uint_eq(vswitch_pool_ready(vs), 2);
    /* Closing while the fill runs (held after its 5th network): close waits for it, the
     * fill stops at its next network (under ASan a use after free would show here), and
     * the pool is given back. */
    fill_gate_move(&g, 5);
    fill_gate_wait(&g);
    int keep = net.host_ifindex;
    pthread_t ct;
    ck_assert_int_eq(pthread_create(&ct, NULL, close_thread, vs), 0);
    /* (vs lives until the fill has returned, and the fill is held at the gate.) */
    for (bool stop = false; !stop;) {
        pthread_mutex_lock(&vs->mu);
        stop = vs->pool_stop;
        pthread_mutex_unlock(&vs->mu);
        if (!stop)
            sched_yield();
    }
    fill_gate_move(&g, 0);
    ck_assert_int_eq(pthread_join(ct, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(a.rc, 4); /* 5 made, 1 taken: not one more after the close */
    ck_assert_uint_eq(g.made, 5);

    vs = open_ok(&o);
    ck_assert_int_eq(count_ifaces(vs, true), 0);
    ck_assert_int_eq(count_ifaces(vs, false), 1);
    ck_assert(link_exists(keep));
    ck_assert_int_eq(vswitch_net_destroy(vs, 7, &e), 0);
    vswitch_net_close_fds(&net);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

/* Sandbox 3 gets b's address (b's slot was freed), then the switch is destroyed with a
 * (still adopted) and c: their interfaces go with it. */
static void reuse_b_then_destroy(struct vswitch *vs, const struct vswitch_opts *o,
                                 struct vswitch_net *a, struct vswitch_net *b, bool busy_first)
{
    struct al_error e = {0};
    struct vswitch_net c;
    struct vswitch_sandbox sc = {.id = 3};
    ck_assert_int_eq(vswitch_net_create(vs, &sc, &c, &e), 0);
    ck_assert_uint_eq(c.addr.s_addr, b->addr.s_addr);
    if (busy_first) {
        ck_assert_int_eq(vswitch_destroy(vs, false, &e), -EBUSY);
        ck_assert_ptr_nonnull(strstr(e.msg, "still attached"));
        vs = open_ok(o);
    }
    ck_assert_int_eq(vswitch_destroy(vs, true, &e), 0);
    ck_assert(!link_exists(a->host_ifindex));
    ck_assert(!link_exists(c.host_ifindex));
    vswitch_net_close_fds(a);
    vswitch_net_close_fds(b);
    vswitch_net_close_fds(&c);
}

START_TEST(reopen_adopts_and_forgets)
{
    world();
    struct vswitch_opts o = opts();
    o.attach_mode = VSWITCH_ATTACH_TCX; /* pinned links, checked below */
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    struct vswitch_net a, b;
    struct vswitch_sandbox sa = {.id = 1, .label = "a"}, sb = {.id = 2, .label = "b"};
    ck_assert_int_eq(vswitch_net_create(vs, &sa, &a, &e), 0);
    ck_assert_int_eq(vswitch_net_create(vs, &sb, &b, &e), 0);
    char pin[PATH_MAX];
    snprintf(pin, sizeof pin, "%s/links/%d_in", g_pin, a.host_ifindex);
    struct stat st;
    ck_assert_int_eq(stat(pin, &st), 0);
    vswitch_close(vs);

    /* Another process could not open it while we had it; now it can. Sandbox b's
     * interface dies while nobody has the switch open. */
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    ck_assert_int_eq(vswitch_nl_link_del(&nl, b.host_ifindex, NULL), 0);
    vswitch_nl_close(&nl);

    vs = open_ok(&o);
    struct vswitch_net f;
    ck_assert_int_eq(vswitch_net_find(vs, 1, &f), 0);
    ck_assert_int_eq(f.host_ifindex, a.host_ifindex);
    ck_assert_str_eq(f.host_ifname, a.host_ifname);
    ck_assert_int_eq(vswitch_net_find(vs, 2, &f), -ENOENT);
    snprintf(pin, sizeof pin, "%s/links/%d_in", g_pin, b.host_ifindex);
    ck_assert_int_ne(stat(pin, &st), 0);
    /* b's slot is free again, a's is not. */
    reuse_b_then_destroy(vs, &o, &a, &b, true);
}
END_TEST

START_TEST(interrupted_creation_is_deleted_and_the_rest_adopted)
{
    /* airlockd killed while it made a sandbox's network: the interface has its programs and
     * identity but never came up. The next open must not fail on it (its host route cannot
     * be added to a device that is down: "Device for nexthop is not up", which kept the whole
     * switch, and every other sandbox, from starting): it deletes it and adopts the rest. */
    world();
    struct vswitch_opts o = opts();
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    struct vswitch_net a, b;
    struct vswitch_sandbox sa = {.id = 1, .label = "a"}, sb = {.id = 2, .label = "b"};
    ck_assert_int_eq(vswitch_net_create(vs, &sa, &a, &e), 0);
    ck_assert_int_eq(vswitch_net_create(vs, &sb, &b, &e), 0);
    vswitch_close(vs);
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    ck_assert_int_eq(vswitch_nl_link_set_up(&nl, b.host_ifindex, false, NULL), 0);
    vswitch_nl_close(&nl);

    vs = open_ok(&o);
    struct vswitch_net f;
    ck_assert_int_eq(vswitch_net_find(vs, 1, &f), 0);
    ck_assert_int_eq(f.host_ifindex, a.host_ifindex);
    ck_assert_int_eq(vswitch_net_find(vs, 2, &f), -ENOENT);
    ck_assert(!link_exists(b.host_ifindex));
    /* b's slot is free again. */
    reuse_b_then_destroy(vs, &o, &a, &b, false);
}
END_TEST

START_TEST(interface_without_identity_is_deleted_not_unattached)
{
    /* An interface whose identity is gone (a deletion that failed half-way) must be deleted
     * by the next open before its pinned programs are released: never a live interface
     * without programs. */
    world();
    struct vswitch_opts o = opts();
    o.attach_mode = VSWITCH_ATTACH_TCX; /* the case where programs hang on pinned links */
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    struct vswitch_sandbox sb = {.id = 8};
    struct vswitch_net net;
    ck_assert_int_eq(vswitch_net_create(vs, &sb, &net, &e), 0);
    __u32 key = (__u32)net.host_ifindex;
    ck_assert_int_eq(bpf_map_delete_elem(vswitch_get_view(vs)->map_ifaces, &key), 0);
    vswitch_close(vs);
    ck_assert(link_exists(net.host_ifindex));
    vs = open_ok(&o);
    ck_assert(!link_exists(net.host_ifindex));
    char pin[PATH_MAX];
    struct stat st;
    snprintf(pin, sizeof pin, "%s/links/%d_in", g_pin, net.host_ifindex);
    ck_assert_int_ne(stat(pin, &st), 0);
    vswitch_net_close_fds(&net);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

START_TEST(one_owner_and_fixed_settings)
{
    world();
    struct vswitch_opts o = opts();
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    struct vswitch *other = NULL;
    ck_assert_int_eq(vswitch_open(&o, &other, &e), -EBUSY);
    ck_assert_ptr_nonnull(strstr(e.msg, "another process"));
    vswitch_close(vs);
    o.range = "10.201.0.0/16";
    ck_assert_int_eq(vswitch_open(&o, &other, &e), -EEXIST);
    ck_assert_ptr_nonnull(strstr(e.msg, "different address range"));
    o = opts();
    vs = open_ok(&o);
    /* The instance record lets views find the pins from the state directory. */
    struct vswitch_view *v = NULL;
    ck_assert_int_eq(vswitch_view_open(g_state, &v, &e), 0);
    struct vs_config cfg;
    ck_assert_int_eq(vswitch_view_config(v, &cfg), 0);
    ck_assert_str_eq(cfg.ifname_prefix, "ut");
    ck_assert_uint_eq(cfg.reply_mark, VSWITCH_DEFAULT_REPLY_MARK);
    vswitch_view_close(v);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
    ck_assert_int_eq(vswitch_view_open(g_state, &v, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(e.msg, "no virtual switch was started"));
}
END_TEST

/* network.max_interfaces: the tables are made with the size asked, the address plan stops
 * at it (with an error naming the key), and a pinned instance keeps its size. */
static unsigned pinned_size(const char *map)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", g_pin, map);
    unsigned n = 0;
    ck_assert_int_eq(vswitch__pinned_max_entries(path, &n), 0);
    return n;
}

START_TEST(interface_table_size_is_an_option)
{
    world();
    struct vswitch_opts o = opts();
    o.max_ifaces = VSWITCH_MAX_IFACES_LIMIT + 1;
    expect_bad(o, "network.max_interfaces");
    o = opts();
    o.max_ifaces = 3;
    struct vswitch *vs = open_ok(&o);
    ck_assert_uint_eq(pinned_size("vs_ifaces"), 3);
    ck_assert_uint_eq(pinned_size("vs_addrs"), 3);
    ck_assert_uint_eq(pinned_size("vs_counters"), 4);
    unsigned n = 0;
    ck_assert_int_eq(vswitch_view_max_ifaces(vswitch_get_view(vs), &n), 0);
    ck_assert_uint_eq(n, 3);
    struct al_error e = {0};
    struct vswitch_net net[4];
    for (uint64_t i = 0; i < 3; i++) {
        struct vswitch_sandbox sb = {.id = i + 1};
        /* (its namespace stays open: the sandbox's network lives as long as it does) */
        ck_assert_msg(vswitch_net_create(vs, &sb, &net[i], &e) == 0, "%s", al_error_str(&e));
    }
    /* The /16 has room for 16,384 subnets: the table is what is full. */
    struct vswitch_sandbox fourth = {.id = 4};
    ck_assert_int_eq(vswitch_net_create(vs, &fourth, &net[3], &e), -ENOSPC);
    ck_assert_msg(strstr(e.msg, "interface table is full (3 networks") &&
                      strstr(e.msg, "network.max_interfaces"),
                  "%s", e.msg);
    vswitch_close(vs);

    /* Reopened with another size: refused, naming both; with its own size: adopted. */
    al_error_clear(&e);
    o.max_ifaces = 5;
    struct vswitch *other = NULL;
    ck_assert_int_eq(vswitch_open(&o, &other, &e), -EEXIST);
    ck_assert_msg(strstr(e.msg, "interface table of 3 entries, not 5 (network.max_interfaces)"),
                  "%s", e.msg);
    ck_assert_ptr_null(other);
    o.max_ifaces = 0; /* the default, 16384: refused too */
    ck_assert_int_eq(vswitch_open(&o, &other, &e), -EEXIST);
    o.max_ifaces = 3;
    vs = open_ok(&o);
    struct vswitch_net f;
    ck_assert_int_eq(vswitch_net_find(vs, 3, &f), 0);
    ck_assert_int_eq(vswitch_net_create(vs, &fourth, &net[3], &e), -ENOSPC);
    vswitch_close(vs);

    /* A teardown takes the pinned size, whatever it is given. */
    o.max_ifaces = 0;
    ck_assert_msg(vswitch__open(&o, true, &vs, &e) == 0, "%s", al_error_str(&e));
    ck_assert_int_eq(vswitch_destroy(vs, true, &e), 0);
    for (size_t i = 0; i < 3; i++)
        vswitch_net_close_fds(&net[i]);
    struct stat st;
    ck_assert_int_ne(stat(g_pin, &st), 0);
    /* Made anew, it takes the size asked. */
    o.max_ifaces = 5;
    vs = open_ok(&o);
    ck_assert_uint_eq(pinned_size("vs_ifaces"), 5);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

START_TEST(attach_checks_the_interface)
{
    world();
    struct vswitch_opts o = opts();
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    struct vs_veth_spec good = {.name = "utx", .peer_name = "utxpeer", .peer_netns_fd = -1};
    struct vs_veth_spec other = {.name = "other0", .peer_name = "other1", .peer_netns_fd = -1};
    ck_assert_int_eq(vswitch_nl_veth_add(&nl, &good, NULL), 0);
    ck_assert_int_eq(vswitch_nl_veth_add(&nl, &other, NULL), 0);
    int gi = 0, oi = 0;
    ck_assert_int_eq(vswitch_nl_link_index(&nl, "utx", &gi, NULL), 0);
    ck_assert_int_eq(vswitch_nl_link_index(&nl, "other0", &oi, NULL), 0);
    const uint8_t mac[6] = {0x06, 1, 2, 3, 4, 5};
    struct vswitch_sandbox sb = {.id = 44};
    struct vswitch_net net;
    ck_assert_int_eq(vswitch_attach(vs, oi, &sb, mac, &net, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "guard would not cover it"));
    ck_assert_int_eq(vswitch_nl_link_set_up(&nl, gi, true, NULL), 0);
    ck_assert_int_eq(vswitch_attach(vs, gi, &sb, mac, &net, &e), -EBUSY);
    ck_assert_ptr_nonnull(strstr(e.msg, "is up"));
    ck_assert_int_eq(vswitch_nl_link_set_up(&nl, gi, false, NULL), 0);
    ck_assert_msg(vswitch_attach(vs, gi, &sb, mac, &net, &e) == 0, "%s", al_error_str(&e));
    ck_assert_mem_eq(net.guest_mac, mac, 6);
    struct vs_nl_link_info l;
    ck_assert_int_eq(vswitch_nl_link_get(&nl, gi, &l, NULL), 0);
    ck_assert(l.flags & IFF_UP);
    ck_assert(vswitch__mac_is_ours(l.mac)); /* recognisable as the switch's from now on */
    ck_assert_int_eq(vswitch_attach(vs, gi, &sb, mac, &net, &e), -EBUSY);
    ck_assert_int_eq(vswitch_detach(vs, gi, &e), 0);
    ck_assert(!link_exists(gi)); /* detaching deletes: never a live unattached interface */
    ck_assert_int_eq(vswitch_detach(vs, gi, &e), -ENOENT);
    vswitch_nl_close(&nl);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

/* ---- taps: the live datapath through a tap fd ----------------------------------------- */

static uint16_t csum16(const void *data, size_t len, uint32_t sum)
{
    const uint8_t *p = data;
    for (size_t i = 0; i + 1 < len; i += 2)
        sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    if (len & 1)
        sum += (uint32_t)p[len - 1] << 8;
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

/* (The poll's 10 s is a bound for a frame that never comes, not an expected delay: on a
 * loaded machine the softirq that answers may run late.) */
static ssize_t read_frame(int fd, uint8_t *buf, size_t len, uint16_t ethertype)
{
    for (int i = 0; i < 20; i++) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 10000) <= 0)
            return -1;
        ssize_t n = read(fd, buf, len);
        if (n >= 14 && (buf[12] << 8 | buf[13]) == ethertype)
            return n;
    }
    return -1;
}

START_TEST(tap_datapath)
{
    world();
    struct vswitch_opts o = opts();
    struct vswitch *vs = open_ok(&o);
    struct al_error e = {0};
    struct vswitch_sandbox sb = {.id = 77, .label = "vm"};
    struct vswitch_tap_opts to = {0};
    struct vswitch_net net;
    ck_assert_msg(vswitch_tap_create(vs, &sb, &to, &net, &e) == 0, "%s", al_error_str(&e));
    ck_assert_int_ge(net.tap_fd, 0);
    ck_assert_int_eq(net.netns_fd, -1);
    ck_assert_str_eq(net.guest_ifname, net.host_ifname);

    /* The proxy's listener, registered like airlock-egress does. */
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ck_assert_int_eq(setsockopt(l, SOL_IP, IP_TRANSPARENT, &one, sizeof one), 0);
    struct sockaddr_in la = {
        .sin_family = AF_INET, .sin_port = htons(15001), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(l, (struct sockaddr *)&la, sizeof la), 0);
    ck_assert_int_eq(listen(l, 8), 0);
    ck_assert_msg(vswitch_proxy_register(vswitch_get_view(vs), VSWITCH_PROXY_TCP, l, &e) == 0, "%s",
                  al_error_str(&e));

    /* ARP: "who has the gateway?" from the guest, answered by the switch. */
    uint8_t f[128] = {0};
    memset(f, 0xff, 6);
    memcpy(f + 6, net.guest_mac, 6);
    f[12] = 0x08, f[13] = 0x06;
    uint8_t *a = f + 14;
    a[1] = 1, a[2] = 0x08, a[4] = 6, a[5] = 4, a[7] = 1;
    memcpy(a + 8, net.guest_mac, 6);
    memcpy(a + 14, &net.addr, 4);
    memcpy(a + 24, &net.gateway, 4);
    ck_assert_int_eq(write(net.tap_fd, f, 42), 42);
    uint8_t r[2048];
    ssize_t n = read_frame(net.tap_fd, r, sizeof r, 0x0806);
    ck_assert_int_ge(n, 42);
    ck_assert_uint_eq(r[14 + 7], 2);
    ck_assert_mem_eq(r + 14 + 8, net.host_mac, 6);
    ck_assert_mem_eq(r + 14 + 14, &net.gateway, 4);

    /* TCP SYN to 203.0.113.7:443: the proxy's listener answers with a SYN-ACK from the
     * original destination, delivered back through the tap. */
    memset(f, 0, sizeof f);
    memcpy(f, net.host_mac, 6);
    memcpy(f + 6, net.guest_mac, 6);
    f[12] = 0x08, f[13] = 0x00;
    uint8_t *h = f + 14, *t = f + 34;
    h[0] = 0x45, h[3] = 40, h[6] = 0x40, h[8] = 64, h[9] = IPPROTO_TCP;
    uint32_t dst = ip("203.0.113.7");
    memcpy(h + 12, &net.addr, 4);
    memcpy(h + 16, &dst, 4);
    uint16_t c = csum16(h, 20, 0);
    h[10] = (uint8_t)(c >> 8), h[11] = (uint8_t)c;
    t[0] = 0x9c, t[1] = 0x40; /* 40000 */
    t[2] = 0x01, t[3] = 0xbb; /* 443 */
    t[7] = 1;
    t[12] = 5 << 4, t[13] = 0x02, t[14] = 0xff, t[15] = 0xff;
    uint8_t ph[12];
    memcpy(ph, h + 12, 8);
    ph[8] = 0, ph[9] = IPPROTO_TCP, ph[10] = 0, ph[11] = 20;
    uint32_t sum = 0;
    for (int i = 0; i < 12; i += 2)
        sum += (uint32_t)(ph[i] << 8 | ph[i + 1]);
    c = csum16(t, 20, sum);
    t[16] = (uint8_t)(c >> 8), t[17] = (uint8_t)c;
    ck_assert_int_eq(write(net.tap_fd, f, 54), 54);
    n = read_frame(net.tap_fd, r, sizeof r, 0x0800);
    ck_assert_msg(n >= 54, "no SYN-ACK came back through the tap");
    ck_assert_mem_eq(r, net.guest_mac, 6);
    ck_assert_mem_eq(r + 14 + 12, &dst, 4); /* from the original destination */
    ck_assert_mem_eq(r + 14 + 16, &net.addr, 4);
    ck_assert_uint_eq(r[34 + 13] & 0x12, 0x12); /* SYN+ACK */
    ck_assert_uint_eq(r[34] << 8 | r[35], 443);

    struct vswitch_counters cnt;
    ck_assert_int_eq(vswitch_view_counters(vswitch_get_view(vs), net.host_ifindex, &cnt), 0);
    ck_assert_uint_eq(cnt.packets[VS_R_ARP_REPLY], 1);
    ck_assert_uint_eq(cnt.packets[VS_R_TCP_SYN], 1);
    ck_assert_uint_ge(cnt.packets[VS_R_IN_REPLY], 2);

    /* The VMM closing its fd deletes the tap; the switch forgets it. */
    int idx = net.host_ifindex;
    vswitch_net_close_fds(&net);
    for (int i = 0; i < 500 && link_exists(idx); i++) /* (10 s at most) */
        usleep(20000);
    ck_assert(!link_exists(idx));
    ck_assert_int_eq(vswitch_net_destroy(vs, 77, &e), 0);
    close(l);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

/* ---- the proxy's side ----------------------------------------------------------------- */

START_TEST(proxy_registration_checks_sockets)
{
    world();
    struct vswitch_opts o = opts();
    struct vswitch *vs = open_ok(&o);
    struct vswitch_view *v = NULL;
    struct al_error e = {0};
    ck_assert_int_eq(vswitch_view_open_pins(g_pin, &v, &e), 0);
    int one = 1;

    int plain = socket(AF_INET, SOCK_STREAM, 0);
    listen(plain, 1);
    ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, plain, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "IP_TRANSPARENT"));

    int tcp = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(tcp, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
    ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, tcp, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "listening"));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(tcp, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(tcp, 8), 0);
    ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_DNS_UDP, tcp, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "SOCK_DGRAM"));

    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    setsockopt(udp, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
    ck_assert_int_eq(bind(udp, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_DNS_UDP, udp, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "IP_RECVORIGDSTADDR"));
    setsockopt(udp, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one);

    int v6 = socket(AF_INET6, SOCK_STREAM, 0);
    ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, v6, &e), -EAFNOSUPPORT);
    ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, 9999, &e), -ENOTSOCK);

    ck_assert(!vswitch_proxy_registered(v, VSWITCH_PROXY_TCP, NULL));
    ck_assert_msg(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, tcp, &e) == 0, "%s",
                  al_error_str(&e));
    ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_DNS_UDP, udp, &e), 0);
    uint64_t cookie = 0;
    ck_assert(vswitch_proxy_registered(v, VSWITCH_PROXY_TCP, &cookie));
    ck_assert_uint_ne(cookie, 0);
    int mark = 0;
    socklen_t ml = sizeof mark;
    ck_assert_int_eq(getsockopt(tcp, SOL_SOCKET, SO_MARK, &mark, &ml), 0);
    ck_assert_uint_eq((uint32_t)mark, VSWITCH_DEFAULT_REPLY_MARK);

    /* SO_REUSEPORT: refused where bpf_sk_assign cannot take it (before Linux 6.5; the
     * nested KVM scenario sees that on 6.1), registered (replacing tcp) where it can. */
    int rp = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(rp, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
    setsockopt(rp, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    ck_assert_int_eq(bind(rp, (struct sockaddr *)&a, sizeof a), 0);
    ck_assert_int_eq(listen(rp, 8), 0);
    char kernel[65];
    if (vswitch_assign_takes_reuseport(kernel, sizeof kernel)) {
        ck_assert_msg(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, rp, &e) == 0, "%s",
                      al_error_str(&e));
        ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, tcp, &e), 0);
    } else {
        ck_assert_int_eq(vswitch_proxy_register(v, VSWITCH_PROXY_TCP, rp, &e), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(e.msg, "has SO_REUSEPORT"));
        ck_assert_ptr_nonnull(strstr(e.msg, kernel));
    }
    close(rp);
    ck_assert(vswitch_proxy_registered(v, VSWITCH_PROXY_TCP, &cookie));

    /* A proxy that dies takes its sockets out of the map: fail closed. */
    close(tcp);
    ck_assert(!vswitch_proxy_registered(v, VSWITCH_PROXY_TCP, NULL));
    ck_assert(vswitch_proxy_registered(v, VSWITCH_PROXY_DNS_UDP, NULL));
    ck_assert_int_eq(vswitch_proxy_unregister(v, VSWITCH_PROXY_DNS_UDP, &e), 0);
    ck_assert(!vswitch_proxy_registered(v, VSWITCH_PROXY_DNS_UDP, NULL));
    close(udp);
    close(plain);
    close(v6);
    vswitch_view_close(v);
    ck_assert_int_eq(vswitch_destroy(vs, false, &e), 0);
}
END_TEST

START_TEST(reason_names)
{
    for (unsigned r = 0; r < VSWITCH_REASON_MAX; r++) {
        const char *n = vswitch_reason_name(r);
        ck_assert_ptr_nonnull(n);
        for (unsigned q = 0; q < r; q++)
            ck_assert_str_ne(n, vswitch_reason_name(q));
    }
    ck_assert_ptr_null(vswitch_reason_name(VSWITCH_REASON_MAX));
    ck_assert(!vswitch_reason_is_drop(VS_R_TCP_SYN));
    ck_assert(!vswitch_reason_is_drop(VS_R_ICMP_GATEWAY));
    ck_assert(!vswitch_reason_is_drop(VS_R_IN_REPLY));
    ck_assert(vswitch_reason_is_drop(VS_R_NO_PROXY));
    ck_assert(vswitch_reason_is_drop(VS_R_IN_DROPPED));
    ck_assert_str_eq(vswitch_reason_name(VS_R_NO_PROXY), "no_proxy");
}
END_TEST

START_TEST(rules_are_idempotent)
{
    world();
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    bool exists = true;
    ck_assert_int_eq(vswitch_nl_rule_exists(&nl, 0x1234, 100, 50, &exists, NULL), 0);
    ck_assert(!exists);
    ck_assert_int_eq(vswitch_nl_rule_add(&nl, 0x1234, 100, 50, NULL), 0);
    ck_assert_int_eq(vswitch_nl_rule_add(&nl, 0x1234, 100, 50, NULL), 0);
    ck_assert_int_eq(vswitch_nl_rule_exists(&nl, 0x1234, 100, 50, &exists, NULL), 0);
    ck_assert(exists);
    ck_assert_int_eq(vswitch_nl_rule_exists(&nl, 0x1234, 101, 50, &exists, NULL), 0);
    ck_assert(!exists);
    ck_assert_int_eq(vswitch_nl_rule_del(&nl, 0x1234, 100, 50, NULL), 0);
    ck_assert_int_eq(vswitch_nl_rule_exists(&nl, 0x1234, 100, 50, &exists, NULL), 0);
    ck_assert(!exists);
    struct al_error e = {0};
    ck_assert_int_lt(vswitch_nl_link_del(&nl, 4242, &e), 0);
    ck_assert_ptr_nonnull(strstr(e.msg, "deleting interface 4242"));
    vswitch_nl_close(&nl);
}
END_TEST

/* What the kernel refuses comes back with its errno, what was asked and, where the kernel
 * explains itself (extended acknowledgements), its explanation; what cannot be asked is
 * refused before it is sent. */
START_TEST(netlink_errors_explain_themselves)
{
    world();
    struct vs_nl nl;
    ck_assert_int_eq(vswitch_nl_open(&nl, NULL), 0);
    struct al_error e = {0};
    struct vs_nl_link_info l;
    ck_assert_int_eq(vswitch_nl_link_get(&nl, 4242, &l, &e), -ENODEV);
    ck_assert_msg(strstr(e.msg, "looking up interface 4242: no such interface"), "%s", e.msg);
    al_error_clear(&e);
    int ifindex = 0;
    ck_assert_int_eq(vswitch_nl_link_index(&nl, "nosuch0", &ifindex, &e), -ENODEV);
    ck_assert_msg(strstr(e.msg, "looking up interface nosuch0: no such interface"), "%s", e.msg);
    al_error_clear(&e);
    ck_assert_int_eq(vswitch_nl_link_index(&nl, "an-interface-name-far-too-long", &ifindex, &e),
                     -EINVAL);
    ck_assert_msg(strstr(e.msg, "is longer than 15 bytes"), "%s", e.msg);
    al_error_clear(&e);
    struct vs_veth_spec v = {
        .name = "ut-ok", .peer_name = "ut-peer-name-too-long", .peer_netns_fd = -1};
    ck_assert_int_eq(vswitch_nl_veth_add(&nl, &v, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "creating veth ut-ok: interface name 'ut-peer-name-too-long"), "%s",
                  e.msg);
    ck_assert_int_eq(vswitch_nl_link_index(&nl, "ut-ok", &ifindex, NULL), -ENODEV);
    al_error_clear(&e);
    /* An address on an interface that does not exist: the kernel says which part is wrong
     * in its extended acknowledgement, after the errno's text. */
    ck_assert_int_eq(vswitch_nl_addr_add(&nl, 4242, ip("10.9.9.1"), 24, &e), -ENODEV);
    const char *want = "adding an address: No such device: ";
    ck_assert_msg(strncmp(e.msg, want, strlen(want)) == 0 && strlen(e.msg) > strlen(want) + 3, "%s",
                  e.msg);
    vswitch_nl_close(&nl);
}
END_TEST

/* ---- cleanup of what failed tests may leave (runs in the runner process) -------------- */

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void cleanup_leftovers(void)
{
    char pat[PATH_MAX];
    const char *roots[] = {"/sys/fs/bpf", "/tmp"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(pat, sizeof pat, "%s/airlock-unit-%d-*", roots[i], (int)getpid());
        glob_t g;
        if (glob(pat, 0, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc; k++)
                nftw(g.gl_pathv[k], rm_cb, 16, FTW_DEPTH | FTW_PHYS);
            globfree(&g);
        }
    }
}

static Suite *vswitch_lib_suite(void)
{
    Suite *s = suite_create("vswitch_lib");
    TCase *t = tcase_create("library");
    tcase_set_timeout(t, 120);
    tcase_add_unchecked_fixture(t, NULL, cleanup_leftovers);
    tcase_add_test(t, options_are_validated);
    tcase_add_test(t, unsafe_host_refuses_to_start);
    tcase_add_test(t, network_create_find_destroy);
    tcase_add_test(t, pool_hands_out_ready_networks);
    tcase_add_test(t, pool_fill_yields_to_creates_and_close_waits_for_it);
    tcase_add_test(t, networks_are_made_ahead_and_finished_on_demand);
    tcase_add_test(t, reopen_adopts_and_forgets);
    tcase_add_test(t, interrupted_creation_is_deleted_and_the_rest_adopted);
    tcase_add_test(t, interface_without_identity_is_deleted_not_unattached);
    tcase_add_test(t, one_owner_and_fixed_settings);
    tcase_add_test(t, interface_table_size_is_an_option);
    tcase_add_test(t, attach_checks_the_interface);
    tcase_add_test(t, tap_datapath);
    tcase_add_test(t, proxy_registration_checks_sockets);
    tcase_add_test(t, reason_names);
    tcase_add_test(t, rules_are_idempotent);
    tcase_add_test(t, netlink_errors_explain_themselves);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(vswitch_lib_suite)
