/* tests/kvm/l1_vswitch: the vswitch world of the KVM nested test, run inside L1.
 *
 *   l1_vswitch STATE_DIR LOG -- VMM ARGS...
 *
 * Opens the airlock vswitch (clsact attachment), creates a tap for sandbox 1 ("kvm-test")
 * with IFF_VNET_HDR, registers a stand-in proxy (a transparent TCP listener on 127.0.0.1,
 * as airlock-egress would), then starts the VMM with the tap handed in (--tap-fd), the
 * guest MAC the switch chose (--mac) and the guest's address, gateway and DNS appended to
 * the kernel command line. Every connection the proxy receives is logged to LOG as
 *   TCP ORIG <original destination> PEER <guest address:port> SANDBOX <id> <label>
 * When the VMM exits, the sandbox's network and the switch are torn down and its exit
 * status is returned. A program other than the VMM (no --cmdline among its arguments, e.g.
 * a script that starts airlock-vmm --backend kvm the way the control plane will) gets the
 * tap inherited and its description in the environment instead: L1VS_TAP_FD, L1VS_MAC,
 * L1VS_ADDR (address/prefix), L1VS_GW, L1VS_IFNAME. Test code: not part of the product.
 *
 *   l1_vswitch --reuseport-probe PIN_DIR PORT SECONDS
 *
 * Shows the kernel's rule that airlock-egress's listener modes exist for: puts a
 * transparent TCP listener on 127.0.0.1:PORT with SO_REUSEPORT (alone in its group) straight
 * into the switch's sockmap (the TCP slot; vswitch_proxy_register would refuse it on a
 * kernel before 6.5), prints "probe registered", then accepts for SECONDS and prints
 * "probe accepted <peer>" per connection. Before Linux 6.5, bpf_sk_assign refuses the
 * socket, so a sandbox's connection never arrives and the switch counts assign_failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <netinet/in.h>

#include "common/log.h"
#include "vswitch/vswitch.h"

static int l1vs__die(const char *what, const struct al_error *e)
{
    fprintf(stderr, "l1_vswitch: %s: %s\n", what, al_error_str(e));
    return 1;
}

static int l1vs__reuseport_probe(const char *pin_dir, int port, int seconds)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vs_sockets", pin_dir);
    int map = bpf_obj_get(path);
    if (map < 0) {
        fprintf(stderr, "l1_vswitch: %s: %s\n", path, strerror(errno));
        return 1;
    }
    int one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0 ||
        setsockopt(lfd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
        bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 16) != 0) {
        perror("l1_vswitch: probe socket");
        return 1;
    }
    __u32 key = VS_SOCK_TCP;
    __u64 val = (__u64)lfd;
    if (bpf_map_update_elem(map, &key, &val, BPF_ANY) != 0) {
        fprintf(stderr, "l1_vswitch: sockmap update: %s\n", strerror(errno));
        return 1;
    }
    printf("probe registered\n");
    fflush(stdout);
    for (int waited = 0; waited < seconds * 10; waited++) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        int c = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        char t[INET_ADDRSTRLEN];
        printf("probe accepted %s\n", inet_ntop(AF_INET, &peer.sin_addr, t, sizeof t));
        fflush(stdout);
        close(c);
    }
    close(lfd);
    close(map);
    return 0;
}

int main(int argc, char **argv);
int main(int argc, char **argv)
{
    al_log_init("l1_vswitch", AL_LOG_TEXT, AL_LOG_WARN);
    if (argc == 5 && strcmp(argv[1], "--reuseport-probe") == 0)
        return l1vs__reuseport_probe(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: l1_vswitch STATE_DIR LOG -- VMM ARGS...\n");
        return 2;
    }
    const char *state = argv[1];
    FILE *log = fopen(argv[2], "w");
    if (!log) {
        perror(argv[2]);
        return 1;
    }
    struct al_error e = {0};
    struct vswitch_opts opts = {.state_dir = state, .attach_mode = VSWITCH_ATTACH_CLSACT};
    struct vswitch *vs;
    if (vswitch_open(&opts, &vs, &e) != 0)
        return l1vs__die("vswitch_open", &e);
    struct vswitch_sandbox sb = {.id = 1, .label = "kvm-test"};
    struct vswitch_tap_opts to = {.vnet_hdr = true};
    struct vswitch_net net;
    if (vswitch_tap_create(vs, &sb, &to, &net, &e) != 0)
        return l1vs__die("vswitch_tap_create", &e);

    int one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(15001), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (lfd < 0 || setsockopt(lfd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0 ||
        bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 64) != 0) {
        perror("l1_vswitch: proxy socket");
        return 1;
    }
    struct vswitch_view *v = vswitch_get_view(vs);
    if (vswitch_proxy_register(v, VSWITCH_PROXY_TCP, lfd, &e) != 0)
        return l1vs__die("vswitch_proxy_register", &e);

    char addr[INET_ADDRSTRLEN], gw[INET_ADDRSTRLEN], mac[32], tapfd[16], extra[256];
    inet_ntop(AF_INET, &net.addr, addr, sizeof addr);
    inet_ntop(AF_INET, &net.gateway, gw, sizeof gw);
    snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", net.guest_mac[0], net.guest_mac[1],
             net.guest_mac[2], net.guest_mac[3], net.guest_mac[4], net.guest_mac[5]);
    snprintf(tapfd, sizeof tapfd, "%d", net.tap_fd);
    snprintf(extra, sizeof extra, " airlock.ip=%s/%u airlock.gw=%s airlock.dns=%s", addr,
             net.prefix_len, gw, gw);
    fprintf(stderr, "l1_vswitch: sandbox 1 on %s: %s/%u via %s, guest MAC %s\n", net.host_ifname,
            addr, net.prefix_len, gw, mac);

    char addr_prefix[40];
    snprintf(addr_prefix, sizeof addr_prefix, "%s/%u", addr, net.prefix_len);
    setenv("L1VS_TAP_FD", tapfd, 1);
    setenv("L1VS_MAC", mac, 1);
    setenv("L1VS_ADDR", addr_prefix, 1);
    setenv("L1VS_GW", gw, 1);
    setenv("L1VS_IFNAME", net.host_ifname, 1);
    bool is_vmm = false;
    for (int i = 4; i < argc; i++)
        is_vmm |= strcmp(argv[i], "--cmdline") == 0;
    /* The VMM's arguments, with --cmdline's value extended and the tap/MAC added. */
    int n = argc - 4;
    char **vargv = calloc((size_t)n + 6, sizeof *vargv);
    int k = 0;
    char *cmdline = NULL;
    for (int i = 0; i < n; i++) {
        vargv[k++] = argv[4 + i];
        if (strcmp(argv[4 + i], "--cmdline") == 0 && i + 1 < n) {
            size_t len = strlen(argv[5 + i]) + strlen(extra) + 1;
            free(cmdline);
            cmdline = malloc(len);
            snprintf(cmdline, len, "%s%s", argv[5 + i], extra);
            vargv[k++] = cmdline;
            i++;
        }
    }
    if (is_vmm) {
        vargv[k++] = "--tap-fd";
        vargv[k++] = tapfd;
        vargv[k++] = "--mac";
        vargv[k++] = mac;
    }
    vargv[k] = NULL;
    int fl = fcntl(net.tap_fd, F_GETFD);
    fcntl(net.tap_fd, F_SETFD, fl & ~FD_CLOEXEC);
    pid_t child = fork();
    if (child == 0) {
        execv(vargv[0], vargv);
        perror("l1_vswitch: exec");
        _exit(127);
    }
    close(net.tap_fd); /* the VMM holds the tap now */
    free(cmdline);     /* the extended command line (the child has its copy) */
    free(vargv);

    int status = 0;
    for (;;) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        if (poll(&pf, 1, 200) > 0 && (pf.revents & POLLIN)) {
            struct sockaddr_in peer, orig;
            socklen_t pl = sizeof peer, ol = sizeof orig;
            int c = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
            if (c >= 0) {
                getsockname(c, (struct sockaddr *)&orig, &ol);
                char o[INET_ADDRSTRLEN], p[INET_ADDRSTRLEN], who[80] = "SANDBOX ? -";
                inet_ntop(AF_INET, &orig.sin_addr, o, sizeof o);
                inet_ntop(AF_INET, &peer.sin_addr, p, sizeof p);
                struct vswitch_peer vp;
                if (vswitch_view_peer(v, peer.sin_addr, &vp) == 0)
                    snprintf(who, sizeof who, "SANDBOX %llu %s", (unsigned long long)vp.sandbox_id,
                             vp.label);
                fprintf(log, "TCP ORIG %s:%u PEER %s:%u %s\n", o, ntohs(orig.sin_port), p,
                        ntohs(peer.sin_port), who);
                fflush(log);
                close(c);
            }
        }
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child)
            break;
    }
    if (vswitch_net_destroy(vs, 1, &e) != 0)
        l1vs__die("vswitch_net_destroy", &e);
    if (vswitch_destroy(vs, true, &e) != 0)
        l1vs__die("vswitch_destroy", &e);
    fclose(log);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
