/* vmm/kvm/guest-init/airlock-kvm-init: PID 1 of a KVM sandbox until it execs the agent.
 *
 * Owns the guest-side set-up that the jail backend does from the host: the kernel file
 * systems (/proc, /sys, /dev, /dev/pts, /dev/shm, /tmp, /run), the hostname, loopback and
 * the sandbox interface (address, default route, resolv.conf) from the kernel command
 * line, and the agent channel: a listening AF_VSOCK socket on the agent port, handed to
 * the agent as AIRLOCK_AGENT_LISTEN_FD (the VMM bridges the host's agent.sock to that
 * port). Then it execs the agent, which becomes PID 1. Any failure is printed on the
 * console and ends the VM (reboot: the VMM exits), never a guest stuck half set up.
 *
 * The agent runs with AIRLOCK_AGENT_VM=kvm, which tells it that it may set the clock,
 * reseed the kernel's RNG and configure the network when its init object asks (a VM
 * restored from a template snapshot learns its identity that way, after the boot).
 *
 * Second use, by the agent (not PID 1):
 *   airlock-kvm-init configure [ip=A.B.C.D/LEN] [gw=A.B.C.D] [dns=A,B] [mac=MAC] [hostname=H]
 * applies the same settings (and the MAC of eth0) to the running guest and exits 0, or
 * prints why not and exits 1. An existing address and default route are replaced.
 *
 * Kernel command line (all optional):
 *   airlock.agent=PATH       default /.airlock/bin/airlock-agent
 *   airlock.port=N           vsock port of the agent channel, default 1024
 *   airlock.ip=A.B.C.D/LEN   address of eth0     airlock.gw=A.B.C.D   default route
 *   airlock.dns=A.B.C.D      nameserver (repeatable by comma)
 *   airlock.hostname=NAME
 * Static, no libraries: it must run in any template.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define INIT_DEFAULT_AGENT "/.airlock/bin/airlock-agent"
#define INIT_DEFAULT_PORT  1024

static char init__cmdline[4096];
static int init__configuring; /* "configure" mode: failures exit 1 instead of rebooting */

static void init__say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void init__say(const char *fmt, ...)
{
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

static _Noreturn void init__fatal(const char *what)
{
    if (init__configuring) {
        init__say("airlock-kvm-init configure: %s: %s", what, strerror(errno));
        exit(1);
    }
    init__say("airlock-kvm-init: %s: %s; stopping the sandbox", what, strerror(errno));
    sync();
    reboot(RB_AUTOBOOT);
    for (;;)
        pause();
}

/* Value of airlock.<key>= on the command line into out ("" if absent). */
static const char *init__param(const char *key, char *out, size_t outlen)
{
    char pat[64];
    snprintf(pat, sizeof pat, "airlock.%s=", key);
    out[0] = 0;
    for (const char *p = init__cmdline; (p = strstr(p, pat)); p++) {
        if (p != init__cmdline && p[-1] != ' ')
            continue;
        p += strlen(pat);
        size_t n = strcspn(p, " \n");
        if (n >= outlen)
            n = outlen - 1;
        memcpy(out, p, n);
        out[n] = 0;
        break;
    }
    return out;
}

static void init__mount(const char *src, const char *dst, const char *type, unsigned long flags,
                        const char *data)
{
    mkdir(dst, 0755);
    if (mount(src, dst, type, flags, data) < 0 && errno != EBUSY) {
        char what[128];
        snprintf(what, sizeof what, "mount %s on %s", type, dst);
        init__fatal(what);
    }
}

static int init__ifreq(int s, const char *ifname, unsigned long req, struct ifreq *ifr)
{
    snprintf(ifr->ifr_name, sizeof ifr->ifr_name, "%s", ifname);
    return ioctl(s, req, ifr);
}

static void init__link_up(int s, const char *ifname)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    if (init__ifreq(s, ifname, SIOCGIFFLAGS, &ifr) < 0)
        init__fatal("SIOCGIFFLAGS");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (init__ifreq(s, ifname, SIOCSIFFLAGS, &ifr) < 0)
        init__fatal("SIOCSIFFLAGS");
}

static void init__mac(int s)
{
    char mac[32];
    if (!init__param("mac", mac, sizeof mac)[0])
        return;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    unsigned m[6];
    char tail;
    errno = EINVAL;
    if (sscanf(mac, "%2x:%2x:%2x:%2x:%2x:%2x%c", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &tail) !=
            6 ||
        (m[0] & 1))
        init__fatal("mac is not a unicast MAC address (aa:bb:cc:dd:ee:ff)");
    ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
    for (int i = 0; i < 6; i++)
        ifr.ifr_hwaddr.sa_data[i] = (char)m[i];
    if (init__ifreq(s, "eth0", SIOCSIFHWADDR, &ifr) < 0)
        init__fatal("setting the MAC address of eth0");
}

static void init__network(void)
{
    char ip[64], gw[32], dns[256];
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        init__fatal("socket");
    init__link_up(s, "lo");
    init__mac(s);
    if (init__param("ip", ip, sizeof ip)[0]) {
        char *slash = strchr(ip, '/');
        int len = slash ? atoi(slash + 1) : 24;
        if (slash)
            *slash = 0;
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
        sin->sin_family = AF_INET;
        errno = EINVAL;
        if (len < 1 || len > 32 || inet_pton(AF_INET, ip, &sin->sin_addr) != 1)
            init__fatal("airlock.ip is not A.B.C.D/LEN");
        if (init__ifreq(s, "eth0", SIOCSIFADDR, &ifr) < 0)
            init__fatal("setting the address of eth0");
        sin->sin_addr.s_addr = htonl(len == 32 ? 0xffffffffu : ~(0xffffffffu >> len));
        if (init__ifreq(s, "eth0", SIOCSIFNETMASK, &ifr) < 0)
            init__fatal("setting the netmask of eth0");
        init__link_up(s, "eth0");
    }
    if (init__param("gw", gw, sizeof gw)[0]) {
        struct rtentry rt;
        memset(&rt, 0, sizeof rt);
        struct sockaddr_in *g = (struct sockaddr_in *)&rt.rt_gateway;
        struct sockaddr_in *d = (struct sockaddr_in *)&rt.rt_dst;
        struct sockaddr_in *m = (struct sockaddr_in *)&rt.rt_genmask;
        g->sin_family = d->sin_family = m->sin_family = AF_INET;
        errno = EINVAL;
        if (inet_pton(AF_INET, gw, &g->sin_addr) != 1)
            init__fatal("airlock.gw is not A.B.C.D");
        rt.rt_flags = RTF_UP | RTF_GATEWAY;
        rt.rt_dev = (char *)"eth0";
        if (init__configuring) {
            /* Replace whatever default route there is (a re-configuration). */
            struct rtentry del;
            memset(&del, 0, sizeof del);
            ((struct sockaddr_in *)&del.rt_dst)->sin_family = AF_INET;
            ((struct sockaddr_in *)&del.rt_genmask)->sin_family = AF_INET;
            while (ioctl(s, SIOCDELRT, &del) == 0) {
            }
        }
        if (ioctl(s, SIOCADDRT, &rt) < 0)
            init__fatal("adding the default route");
    }
    close(s);
    if (init__param("dns", dns, sizeof dns)[0]) {
        int fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            init__fatal("writing /etc/resolv.conf");
        for (char *tok = strtok(dns, ","); tok; tok = strtok(NULL, ",")) {
            char line[80];
            int n = snprintf(line, sizeof line, "nameserver %s\n", tok);
            if (write(fd, line, (size_t)n) != n)
                init__fatal("writing /etc/resolv.conf");
        }
        close(fd);
    }
}

/* sethostname, and /etc/hostname and /etc/hosts as the jail backend writes them (best
 * effort: a template may keep them read-only). */
static void init__hostname(void)
{
    char host[65];
    if (!init__param("hostname", host, sizeof host)[0])
        return;
    if (sethostname(host, strlen(host)) < 0)
        init__fatal("sethostname");
    char buf[256];
    int n = snprintf(buf, sizeof buf, "%s\n", host);
    int fd = open("/etc/hostname", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, buf, (size_t)n);
        (void)w;
        close(fd);
    }
    n = snprintf(buf, sizeof buf,
                 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                 "127.0.1.1\t%s\n",
                 host);
    fd = open("/etc/hosts", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, buf, (size_t)n);
        (void)w;
        close(fd);
    }
}

/* airlock-kvm-init configure KEY=VALUE...: the settings of the command line, for a running
 * guest. The arguments become "airlock.KEY=VALUE" words so the same parsing applies. */
static int init__configure(int argc, char **argv)
{
    init__configuring = 1;
    size_t n = 0;
    for (int i = 2; i < argc; i++) {
        static const char *const keys[] = {"ip=", "gw=", "dns=", "mac=", "hostname=", NULL};
        int ok = 0;
        for (const char *const *k = keys; *k; k++)
            ok |= strncmp(argv[i], *k, strlen(*k)) == 0;
        errno = EINVAL;
        if (!ok || strchr(argv[i], ' '))
            init__fatal("arguments are ip=A.B.C.D/LEN gw= dns= mac= hostname=");
        int w = snprintf(init__cmdline + n, sizeof init__cmdline - n, " airlock.%s", argv[i]);
        errno = E2BIG;
        if (w < 0 || (size_t)w >= sizeof init__cmdline - n)
            init__fatal("arguments too long");
        n += (size_t)w;
    }
    init__hostname();
    init__network();
    return 0;
}

int main(int argc, char **argv);
int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "configure") == 0)
        return init__configure(argc, argv);
    if (getpid() != 1) {
        fprintf(stderr, "airlock-kvm-init: PID 1 of a KVM sandbox, or: airlock-kvm-init configure "
                        "[ip=A.B.C.D/LEN] [gw=A.B.C.D] [dns=A,B] [mac=MAC] [hostname=NAME]\n");
        return 2;
    }
    /* The console first, so every later message is seen. */
    mkdir("/dev", 0755);
    mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
    int con = open("/dev/console", O_RDWR | O_CLOEXEC);
    if (con >= 0) {
        dup2(con, 0);
        dup2(con, 1);
        dup2(con, 2);
        if (con > 2)
            close(con);
    }
    init__mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, init__cmdline, sizeof init__cmdline - 1);
        init__cmdline[n > 0 ? n : 0] = 0;
        close(fd);
    }
    init__mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    init__mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                "gid=5,mode=620,ptmxmode=666");
    init__mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    init__mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    init__mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");

    init__hostname();
    init__network();

    char agent[256], port_s[16];
    if (!init__param("agent", agent, sizeof agent)[0])
        snprintf(agent, sizeof agent, "%s", INIT_DEFAULT_AGENT);
    unsigned long port = init__param("port", port_s, sizeof port_s)[0] ? strtoul(port_s, NULL, 10)
                                                                       : INIT_DEFAULT_PORT;
    int l = socket(AF_VSOCK, SOCK_STREAM, 0); /* inherited by the agent: no CLOEXEC */
    struct sockaddr_vm sa = {
        .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = (unsigned)port};
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 128) < 0)
        init__fatal("listening on the agent's vsock port");
    if (l != 3) {
        if (dup2(l, 3) < 0)
            init__fatal("dup2");
        close(l);
    }
    setenv("AIRLOCK_AGENT_LISTEN_FD", "3", 1);
    setenv("AIRLOCK_AGENT_VM", "kvm", 1);
    if (!getenv("PATH"))
        setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    char *const agent_argv[] = {agent, NULL};
    execv(agent, agent_argv);
    init__fatal(agent);
}
