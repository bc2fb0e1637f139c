/* tests/integration/vswitch_tool: drives the vswitch library from shell tests.
 *
 * Owns nothing of the product; it is the loader and the stand-in proxy of the integration
 * worlds (tests/integration/vswitch_*.sh) and of tests that need a switch but not airlockd.
 *
 *   al-vswitch-tool [common options] open [--pool N]        open (re-adopt), fill pool, close
 *   al-vswitch-tool [common options] serve                  open, print "ready", wait for
 *                                                           SIGTERM (or be killed)
 *   al-vswitch-tool [common options] create --id N [--label L] --netns-path PATH
 *                                   create a sandbox network; bind-mount its namespace on
 *                                   PATH (like `ip netns add`); print it as JSON
 *   al-vswitch-tool [common options] destroy --id N
 *   al-vswitch-tool [common options] teardown [--force]
 *   al-vswitch-tool [common options] proxy [--tcp-port P] [--dns-port Q] [--no-dns-tcp]
 *                                   stand-in egress proxy: registers transparent sockets and
 *                                   answers every TCP connection with one line
 *                                   "ORIG <ip:port> PEER <ip:port> SANDBOX <id> <label>\n"
 *                                   and every DNS datagram with "DNS ORIG ... \n" sent from
 *                                   the original destination; prints "ready" when registered
 * common options: --state-dir DIR --pin-dir DIR --prefix P --range CIDR --prefix-len N
 *                 --attach auto|tcx|clsact --allow-ip-forward
 */
#include "common/log.h"
#include "vswitch/vswitch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/ip.h>

static struct vswitch_opts opts;
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int die_err(const char *what, const struct al_error *e)
{
    fprintf(stderr, "al-vswitch-tool %s: %s\n", what, al_error_str(e));
    return 1;
}

static int cmd_open(unsigned pool)
{
    struct al_error e = {0};
    struct vswitch *vs;
    opts.pool_size = pool;
    if (vswitch_open(&opts, &vs, &e) != 0)
        return die_err("open", &e);
    if (pool && vswitch_pool_fill(vs, &e) < 0) {
        vswitch_close(vs);
        return die_err("pool", &e);
    }
    printf("{\"pin_dir\":\"%s\",\"pool\":%zu}\n", vswitch_pin_dir(vs), vswitch_pool_ready(vs));
    vswitch_close(vs);
    return 0;
}

static int cmd_serve(void)
{
    struct al_error e = {0};
    struct vswitch *vs;
    if (vswitch_open(&opts, &vs, &e) != 0)
        return die_err("serve", &e);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    while (!stop)
        pause();
    vswitch_close(vs);
    return 0;
}

static int bind_netns(int fd, const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        mkdir(dir, 0755);
    }
    int f = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (f < 0) {
        fprintf(stderr, "al-vswitch-tool: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    close(f);
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
    if (mount(src, path, "none", MS_BIND, NULL) != 0) {
        fprintf(stderr, "al-vswitch-tool: bind-mounting the namespace on %s: %s\n", path,
                strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

static void print_net(const struct vswitch_net *n)
{
    char a[INET_ADDRSTRLEN], g[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &n->addr, a, sizeof a);
    inet_ntop(AF_INET, &n->gateway, g, sizeof g);
    printf("{\"sandbox_id\":%llu,\"host_ifname\":\"%s\",\"host_ifindex\":%d,"
           "\"guest_ifname\":\"%s\",\"addr\":\"%s\",\"gateway\":\"%s\",\"prefix_len\":%u,"
           "\"guest_mac\":\"%02x:%02x:%02x:%02x:%02x:%02x\"}\n",
           (unsigned long long)n->sandbox_id, n->host_ifname, n->host_ifindex, n->guest_ifname, a,
           g, n->prefix_len, n->guest_mac[0], n->guest_mac[1], n->guest_mac[2], n->guest_mac[3],
           n->guest_mac[4], n->guest_mac[5]);
}

static int cmd_create(uint64_t id, const char *label, const char *netns_path)
{
    struct al_error e = {0};
    struct vswitch *vs;
    if (!id || !netns_path) {
        fprintf(stderr, "al-vswitch-tool create: --id and --netns-path are required\n");
        return 2;
    }
    if (vswitch_open(&opts, &vs, &e) != 0)
        return die_err("create", &e);
    struct vswitch_sandbox sb = {.id = id, .label = label};
    struct vswitch_net net;
    if (vswitch_net_create(vs, &sb, &net, &e) != 0) {
        vswitch_close(vs);
        return die_err("create", &e);
    }
    int rc = bind_netns(net.netns_fd, netns_path);
    if (rc) {
        vswitch_net_destroy(vs, id, NULL);
        vswitch_net_close_fds(&net);
        vswitch_close(vs);
        return 1;
    }
    print_net(&net);
    vswitch_net_close_fds(&net);
    vswitch_close(vs);
    return 0;
}

static int cmd_destroy(uint64_t id)
{
    struct al_error e = {0};
    struct vswitch *vs;
    if (vswitch_open(&opts, &vs, &e) != 0)
        return die_err("destroy", &e);
    int rc = vswitch_net_destroy(vs, id, &e);
    vswitch_close(vs);
    return rc ? die_err("destroy", &e) : 0;
}

static int cmd_teardown(bool force)
{
    struct al_error e = {0};
    struct vswitch *vs;
    if (vswitch_open(&opts, &vs, &e) != 0)
        return die_err("teardown", &e);
    return vswitch_destroy(vs, force, &e) ? die_err("teardown", &e) : 0;
}

/* ---- stand-in proxy ---------------------------------------------------------------------- */

static int proxy_socket(int type, int port)
{
    int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
        perror("al-vswitch-tool proxy: socket");
        exit(1);
    }
    if (type == SOCK_DGRAM && setsockopt(fd, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one)) {
        perror("al-vswitch-tool proxy: IP_RECVORIGDSTADDR");
        exit(1);
    }
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        (type == SOCK_STREAM && listen(fd, 128) != 0)) {
        perror("al-vswitch-tool proxy: bind/listen");
        exit(1);
    }
    return fd;
}

static void fmt_sa(const struct sockaddr_in *a, char *out, size_t len)
{
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
}

static void describe_peer(const struct vswitch_view *v, const struct sockaddr_in *peer, char *out,
                          size_t len)
{
    struct vswitch_peer p;
    if (vswitch_view_peer(v, peer->sin_addr, &p) == 0)
        snprintf(out, len, "SANDBOX %llu %s", (unsigned long long)p.sandbox_id,
                 p.label[0] ? p.label : "-");
    else
        snprintf(out, len, "SANDBOX ? -");
}

static void proxy_accept(const struct vswitch_view *v, int lfd, const char *kind)
{
    struct sockaddr_in peer, orig;
    socklen_t pl = sizeof peer, ol = sizeof orig;
    int c = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
    if (c < 0)
        return;
    getsockname(c, (struct sockaddr *)&orig, &ol);
    char o[64], p[64], who[96], line[300];
    fmt_sa(&orig, o, sizeof o);
    fmt_sa(&peer, p, sizeof p);
    describe_peer(v, &peer, who, sizeof who);
    int n = snprintf(line, sizeof line, "%s ORIG %s PEER %s %s\n", kind, o, p, who);
    if (write(c, line, (size_t)n) < 0)
        perror("al-vswitch-tool proxy: write");
    fputs(line, stdout);
    fflush(stdout);
    shutdown(c, SHUT_WR);
    /* Drain what the client sends until it closes (bounded), so the close is orderly. */
    char buf[4096];
    struct pollfd pf = {.fd = c, .events = POLLIN};
    while (poll(&pf, 1, 2000) > 0 && read(c, buf, sizeof buf) > 0) {
    }
    close(c);
}

static void proxy_dns(const struct vswitch_view *v, int fd)
{
    char buf[2048], ctrl[256];
    struct sockaddr_in peer;
    struct iovec iov = {buf, sizeof buf};
    struct msghdr m = {.msg_name = &peer,
                       .msg_namelen = sizeof peer,
                       .msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = ctrl,
                       .msg_controllen = sizeof ctrl};
    if (recvmsg(fd, &m, 0) < 0)
        return;
    struct sockaddr_in orig = {0};
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR)
            memcpy(&orig, CMSG_DATA(c), sizeof orig);
    }
    char o[64], p[64], who[96], line[300];
    fmt_sa(&orig, o, sizeof o);
    fmt_sa(&peer, p, sizeof p);
    describe_peer(v, &peer, who, sizeof who);
    int n = snprintf(line, sizeof line, "DNS ORIG %s PEER %s %s\n", o, p, who);
    /* Answer from the address the query was sent to. */
    char sctrl[CMSG_SPACE(sizeof(struct in_pktinfo))];
    memset(sctrl, 0, sizeof sctrl);
    struct iovec siov = {line, (size_t)n};
    struct msghdr s = {.msg_name = &peer,
                       .msg_namelen = sizeof peer,
                       .msg_iov = &siov,
                       .msg_iovlen = 1,
                       .msg_control = sctrl,
                       .msg_controllen = sizeof sctrl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&s);
    c->cmsg_level = SOL_IP;
    c->cmsg_type = IP_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(struct in_pktinfo));
    struct in_pktinfo pi = {.ipi_spec_dst = orig.sin_addr};
    memcpy(CMSG_DATA(c), &pi, sizeof pi);
    if (sendmsg(fd, &s, 0) < 0)
        perror("al-vswitch-tool proxy: sendmsg");
    fputs(line, stdout);
    fflush(stdout);
}

static int cmd_proxy(int tcp_port, int dns_port, bool dns_tcp)
{
    struct al_error e = {0};
    struct vswitch_view *v;
    int rc = opts.pin_dir ? vswitch_view_open_pins(opts.pin_dir, &v, &e)
                          : vswitch_view_open(opts.state_dir, &v, &e);
    if (rc)
        return die_err("proxy", &e);
    int tcp = proxy_socket(SOCK_STREAM, tcp_port);
    int udp = proxy_socket(SOCK_DGRAM, dns_port);
    int dtcp = dns_tcp ? proxy_socket(SOCK_STREAM, dns_port) : -1;
    if (vswitch_proxy_register(v, VSWITCH_PROXY_TCP, tcp, &e) != 0 ||
        vswitch_proxy_register(v, VSWITCH_PROXY_DNS_UDP, udp, &e) != 0 ||
        (dtcp >= 0 && vswitch_proxy_register(v, VSWITCH_PROXY_DNS_TCP, dtcp, &e) != 0))
        return die_err("proxy", &e);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    while (!stop) {
        struct pollfd pf[3] = {{.fd = tcp, .events = POLLIN},
                               {.fd = udp, .events = POLLIN},
                               {.fd = dtcp, .events = POLLIN}};
        if (poll(pf, dtcp >= 0 ? 3 : 2, 500) <= 0)
            continue;
        if (pf[0].revents & POLLIN)
            proxy_accept(v, tcp, "TCP");
        if (pf[1].revents & POLLIN)
            proxy_dns(v, udp);
        if (dtcp >= 0 && pf[2].revents & POLLIN)
            proxy_accept(v, dtcp, "DNSTCP");
    }
    vswitch_view_close(v);
    return 0;
}

int main(int argc, char **argv)
{
    al_log_init("al-vswitch-tool", AL_LOG_TEXT, AL_LOG_WARN);
    const char *cmd = NULL, *label = NULL, *netns_path = NULL;
    uint64_t id = 0;
    unsigned pool = 0;
    int tcp_port = 15001, dns_port = 15053;
    bool force = false, dns_tcp = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE(name) (strcmp(a, name) == 0 && val && (i++, 1))
        if (TAKE("--state-dir"))
            opts.state_dir = val;
        else if (TAKE("--pin-dir"))
            opts.pin_dir = val;
        else if (TAKE("--prefix"))
            opts.ifname_prefix = val;
        else if (TAKE("--range"))
            opts.range = val;
        else if (TAKE("--prefix-len"))
            opts.prefix_len = (unsigned)atoi(val);
        else if (TAKE("--attach"))
            opts.attach_mode = strcmp(val, "clsact") == 0 ? VSWITCH_ATTACH_CLSACT
                               : strcmp(val, "tcx") == 0  ? VSWITCH_ATTACH_TCX
                                                          : VSWITCH_ATTACH_AUTO;
        else if (strcmp(a, "--allow-ip-forward") == 0)
            opts.allow_ip_forward = true;
        else if (TAKE("--pool"))
            pool = (unsigned)atoi(val);
        else if (TAKE("--id"))
            id = strtoull(val, NULL, 10);
        else if (TAKE("--label"))
            label = val;
        else if (TAKE("--netns-path"))
            netns_path = val;
        else if (TAKE("--tcp-port"))
            tcp_port = atoi(val);
        else if (TAKE("--dns-port"))
            dns_port = atoi(val);
        else if (strcmp(a, "--no-dns-tcp") == 0)
            dns_tcp = false;
        else if (strcmp(a, "--force") == 0)
            force = true;
        else if (!cmd && a[0] != '-')
            cmd = a;
        else {
            fprintf(stderr, "al-vswitch-tool: unknown argument '%s'\n", a);
            return 2;
        }
#undef TAKE
    }
    if (!cmd) {
        fprintf(stderr, "usage: al-vswitch-tool [options] open|serve|create|destroy|teardown|"
                        "proxy (see the source's header)\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(cmd, "open") == 0)
        return cmd_open(pool);
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve();
    if (strcmp(cmd, "create") == 0)
        return cmd_create(id, label, netns_path);
    if (strcmp(cmd, "destroy") == 0)
        return cmd_destroy(id);
    if (strcmp(cmd, "teardown") == 0)
        return cmd_teardown(force);
    if (strcmp(cmd, "proxy") == 0)
        return cmd_proxy(tcp_port, dns_port, dns_tcp);
    fprintf(stderr, "al-vswitch-tool: unknown command '%s'\n", cmd);
    return 2;
}
