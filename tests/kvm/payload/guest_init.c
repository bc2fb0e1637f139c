/* tests/kvm/payload/guest_init: a tiny static PID 1 for the L2 test guest.
 *
 * Exercises what the VMM offers and reports each check on the serial console as
 *   AIRLOCK-GUEST: ok <check>      or   AIRLOCK-GUEST: FAIL <check>: <why>
 * then "AIRLOCK-GUEST: done <passed>/<total>" and reboots (reboot=k: the i8042 reset line,
 * which the VMM turns into a clean exit). The scenario in L1 reads the console log.
 * The checks it runs are named on the kernel command line (airlock.test=a,b,c).
 * Exec'd with AIRLOCK_AGENT_LISTEN_FD (by airlock-kvm-init, from a disk root) it stands in
 * for the agent: the state server on that listening socket.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int passed, total;

static void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(1, buf, (size_t)n);
    (void)w;
}

static void result(const char *check, int ok, const char *why)
{
    total++;
    if (ok) {
        passed++;
        say("AIRLOCK-GUEST: ok %s", check);
    } else {
        say("AIRLOCK-GUEST: FAIL %s: %s", check, why);
    }
}

static char cmdline[4096];

static int wants(const char *check)
{
    const char *p = strstr(cmdline, "airlock.test=");
    if (!p)
        return 0;
    p += strlen("airlock.test=");
    size_t n = strlen(check);
    while (*p && *p != ' ' && *p != '\n') {
        if (strncmp(p, check, n) == 0 && (p[n] == ',' || p[n] == ' ' || p[n] == '\n' || !p[n]))
            return 1;
        while (*p && *p != ',' && *p != ' ' && *p != '\n')
            p++;
        if (*p == ',')
            p++;
    }
    return 0;
}

static void check_boot(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    say("AIRLOCK-GUEST: boottime %ld.%03ld", (long)ts.tv_sec, ts.tv_nsec / 1000000);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    char why[64];
    snprintf(why, sizeof why, "%ld CPUs online", ncpu);
    say("AIRLOCK-GUEST: cpus %ld", ncpu);
    result("boot", ncpu >= 1, why);
}

/* disk: /dev/vda's first sector carries a marker the scenario wrote; we write one of our
 * own at 4096 and read it back (the scenario then finds it in the overlay, not the base). */
static void check_disk(void)
{
    char buf[4096], why[128];
    int fd = open("/dev/vda", O_RDWR);
    if (fd < 0) {
        snprintf(why, sizeof why, "open /dev/vda: %s", strerror(errno));
        result("disk", 0, why);
        return;
    }
    ssize_t n = pread(fd, buf, 512, 0);
    if (n != 512 || memcmp(buf, "AIRLOCK-DISK-v1", 15) != 0) {
        result("disk", 0, "marker not found in sector 0");
        close(fd);
        return;
    }
    memset(buf, 0, sizeof buf);
    strcpy(buf, "GUEST-WROTE-THIS");
    if (pwrite(fd, buf, 4096, 4096) != 4096 || fsync(fd) != 0) {
        snprintf(why, sizeof why, "write: %s", strerror(errno));
        result("disk", 0, why);
        close(fd);
        return;
    }
    /* Read back through the device, bypassing the page cache. */
    close(fd);
    fd = open("/dev/vda", O_RDONLY | O_DIRECT);
    static char abuf[4096] __attribute__((aligned(4096)));
    n = fd < 0 ? -1 : pread(fd, abuf, 4096, 4096);
    result("disk", n == 4096 && strcmp(abuf, "GUEST-WROTE-THIS") == 0, "read-back mismatch");
    if (fd >= 0)
        close(fd);
    /* A read beyond the end must fail cleanly, not crash anything. */
    fd = open("/dev/vda", O_RDONLY);
    off_t end = lseek(fd, 0, SEEK_END);
    n = pread(fd, buf, 512, end);
    result("disk-end", n == 0, "read at the end returned data");
    close(fd);
}

static int if_set(int s, const char *name, unsigned long req, struct ifreq *ifr)
{
    strncpy(ifr->ifr_name, name, IFNAMSIZ - 1);
    return ioctl(s, req, ifr);
}

/* net: eth0 = 192.0.2.2/24; TCP to 192.0.2.1:7777 (the scenario's listener in L1). */
static void check_net(void)
{
    char why[128];
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, "192.0.2.2", &sin->sin_addr);
    if (if_set(s, "eth0", SIOCSIFADDR, &ifr) < 0) {
        snprintf(why, sizeof why, "SIOCSIFADDR eth0: %s", strerror(errno));
        result("net", 0, why);
        close(s);
        return;
    }
    inet_pton(AF_INET, "255.255.255.0", &sin->sin_addr);
    if_set(s, "eth0", SIOCSIFNETMASK, &ifr);
    memset(&ifr, 0, sizeof ifr);
    if_set(s, "eth0", SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if_set(s, "eth0", SIOCSIFFLAGS, &ifr);
    memset(&ifr, 0, sizeof ifr);
    strcpy(ifr.ifr_name, "lo");
    ioctl(s, SIOCGIFFLAGS, &ifr);
    ifr.ifr_flags |= IFF_UP;
    ioctl(s, SIOCSIFFLAGS, &ifr);
    close(s);

    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(7777)};
    inet_pton(AF_INET, "192.0.2.1", &dst.sin_addr);
    int ok = 0;
    for (int attempt = 0; attempt < 600 && !ok; attempt++) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c, (struct sockaddr *)&dst, sizeof dst) == 0) {
            const char msg[] = "hello-from-the-guest\n";
            ok = write(c, msg, sizeof msg - 1) == (ssize_t)sizeof msg - 1;
            snprintf(why, sizeof why, "write: %s", strerror(errno));
        } else {
            snprintf(why, sizeof why, "connect 192.0.2.1:7777: %s", strerror(errno));
            usleep(100000);
        }
        close(c);
    }
    result("net", ok, why);
}

/* vsock: serve N echo connections on port 1234 (the scenario's client talks to the VMM's
 * unix socket, which the VMM bridges here). Echo until EOF, then close. */
static void check_vsock(int conns)
{
    char why[128];
    int l = socket(AF_VSOCK, SOCK_STREAM, 0);
    struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = 1234};
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 4) < 0) {
        snprintf(why, sizeof why, "vsock listen: %s", strerror(errno));
        result("vsock", 0, why);
        return;
    }
    say("AIRLOCK-GUEST: vsock listening");
    long total_bytes = 0;
    for (int i = 0; i < conns; i++) {
        int c = accept(l, NULL, NULL);
        if (c < 0) {
            snprintf(why, sizeof why, "accept: %s", strerror(errno));
            result("vsock", 0, why);
            return;
        }
        static char buf[65536];
        for (;;) {
            ssize_t n = read(c, buf, sizeof buf);
            if (n <= 0)
                break;
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(c, buf + off, (size_t)(n - off));
                if (w <= 0)
                    break;
                off += w;
            }
            total_bytes += n;
        }
        close(c);
    }
    close(l);
    say("AIRLOCK-GUEST: vsock echoed %ld bytes", total_bytes);
    result("vsock", 1, "");
}

/* rng: the virtio-rng device is the guest's current hwrng and yields bytes. */
static void check_rng(void)
{
    char cur[64] = "";
    int fd = open("/sys/class/misc/hw_random/rng_current", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, cur, sizeof cur - 1);
        cur[n > 0 ? n : 0] = 0;
        close(fd);
    }
    unsigned char buf[64];
    memset(buf, 0, sizeof buf);
    fd = open("/dev/hwrng", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
    if (fd >= 0)
        close(fd);
    int nonzero = 0;
    for (size_t i = 0; i < sizeof buf; i++)
        nonzero += buf[i] != 0;
    char why[160];
    snprintf(why, sizeof why, "rng_current '%s', read %zd bytes, %d non-zero", cur, n, nonzero);
    result("rng", strncmp(cur, "virtio_rng", 10) == 0 && n == (ssize_t)sizeof buf && nonzero > 32,
           why);
}

/* One TCP connection to 192.0.2.1:7777 (the scenario's listener), a line, close: 0, or -1
 * with why set. Attempts for 60 s of the guest's clock, each connect() bounded to 5 s (a
 * SYN nobody answers would otherwise hold one attempt for the kernel's two minutes), so the
 * host hears "error" and the reason well before its own bound on the reply. */
static int tcp_hello(char *why, size_t whylen)
{
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(7777)};
    inet_pton(AF_INET, "192.0.2.1", &dst.sin_addr);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int attempts = 0;
    do {
        attempts++;
        int c = socket(AF_INET, SOCK_STREAM, 0);
        struct timeval tv = {.tv_sec = 5};
        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(c, (struct sockaddr *)&dst, sizeof dst) == 0) {
            const char msg[] = "hello-from-the-agent\n";
            int ok = write(c, msg, sizeof msg - 1) == (ssize_t)sizeof msg - 1;
            snprintf(why, whylen, "write: %s", strerror(errno));
            close(c);
            return ok ? 0 : -1;
        }
        snprintf(why, whylen, "connect 192.0.2.1:7777: %s (%d attempts in 60 s)", strerror(errno),
                 attempts);
        close(c);
        usleep(100000);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec < 60);
    return -1;
}

/* state: a tiny stateful server on vsock port 1234 for the snapshot scenario. One command
 * line per connection:  get | set VALUE | disk-write VALUE | disk-read | quit  */
static void state_server(int l)
{
    char value[128] = "unset";
    struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = 1234};
    if (l < 0) {
        l = socket(AF_VSOCK, SOCK_STREAM, 0);
        if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 4) < 0) {
            result("state", 0, "vsock listen failed");
            return;
        }
    }
    say("AIRLOCK-GUEST: state server listening");
    static char sector[4096] __attribute__((aligned(4096)));
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0)
            continue;
        char line[256];
        size_t n = 0;
        while (n < sizeof line - 1) {
            ssize_t r = read(c, line + n, 1);
            if (r <= 0 || line[n] == '\n')
                break;
            n++;
        }
        line[n] = 0;
        char reply[300];
        int quit = 0;
        if (strcmp(line, "get") == 0) {
            snprintf(reply, sizeof reply, "%s\n", value);
        } else if (strncmp(line, "set ", 4) == 0) {
            snprintf(value, sizeof value, "%s", line + 4);
            snprintf(reply, sizeof reply, "ok\n");
        } else if (strncmp(line, "disk-write ", 11) == 0 || strcmp(line, "disk-read") == 0) {
            int fd = open("/dev/vda", O_RDWR | O_DIRECT);
            int ok = fd >= 0;
            if (ok && line[5] == 'w') {
                memset(sector, 0, sizeof sector);
                snprintf(sector, sizeof sector, "%s", line + 11);
                ok = pwrite(fd, sector, 4096, 8192) == 4096 && fsync(fd) == 0;
                snprintf(reply, sizeof reply, ok ? "ok\n" : "error\n");
            } else if (ok) {
                ok = pread(fd, sector, 4096, 8192) == 4096;
                sector[200] = 0;
                snprintf(reply, sizeof reply, "%s\n", ok ? sector : "error");
            } else {
                snprintf(reply, sizeof reply, "error\n");
            }
            if (fd >= 0)
                close(fd);
        } else if (strcmp(line, "hostname") == 0) {
            char h[65] = "";
            gethostname(h, sizeof h - 1);
            snprintf(reply, sizeof reply, "%s\n", h);
        } else if (strcmp(line, "pid") == 0) {
            snprintf(reply, sizeof reply, "%d\n", (int)getpid());
        } else if (strcmp(line, "net") == 0) {
            char why[160];
            if (tcp_hello(why, sizeof why) == 0)
                snprintf(reply, sizeof reply, "ok\n");
            else
                snprintf(reply, sizeof reply, "error: %s\n", why);
        } else if (strcmp(line, "quit") == 0) {
            snprintf(reply, sizeof reply, "bye\n");
            quit = 1;
        } else {
            snprintf(reply, sizeof reply, "unknown command\n");
        }
        ssize_t w = write(c, reply, strlen(reply));
        (void)w;
        if (quit) {
            /* Reboot only once the host has the answer: half-close, then wait (bounded)
             * for the host to close its side. */
            shutdown(c, SHUT_WR);
            struct timeval tv = {.tv_sec = 2};
            setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            char sink[64];
            while (read(c, sink, sizeof sink) > 0)
                ;
        }
        close(c);
        if (quit)
            break;
    }
    close(l);
    result("state", 1, "");
}

/* garbage: a hostile guest. Writes random values of every width to every register of the
 * VMM's MMIO windows (and the unassigned space around them) and to the I/O ports the VMM
 * emulates or leaves unassigned, including queue set-ups whose rings and buffers point at
 * the edges of RAM and beyond. The VMM must survive all of it; we then restore the UART
 * enough to report and reset. The in-kernel PIC/PIT ports (KVM's, not ours) and the i8042
 * reset command are left alone so that the guest can still report. */
static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint32_t edge_value(void)
{
    static const uint32_t v[] = {0,          1,          2,          3,          4,
                                 7,          8,          0xb,        0xf,        0x40,
                                 0x80,       0xff,       0x100,      0x101,      0xffff,
                                 0x10000,    0x7ffffff,  0x7ffff000, 0x80000000, 0xfffff000,
                                 0xfffffff0, 0xffffffff, 0xd0000000, 0xfee00000};
    return rnd() & 1 ? (uint32_t)rnd() : v[rnd() % (sizeof v / sizeof v[0])];
}

static void check_garbage(void)
{
    char why[128];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    rng_state ^= (uint64_t)ts.tv_nsec;
    say("AIRLOCK-GUEST: garbage seed %llu", (unsigned long long)rng_state);
    int fd = open("/dev/mem", O_RDWR | O_SYNC);
    volatile uint8_t *m =
        fd < 0 ? MAP_FAILED
               : mmap(NULL, 0x8000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0xd0000000);
    if (m == MAP_FAILED) {
        snprintf(why, sizeof why, "cannot map the MMIO windows: %s", strerror(errno));
        result("garbage", 0, why);
        return;
    }
    long writes = 0, reads = 0;
    for (int round = 0; round < 30000; round++) {
        unsigned dev = (unsigned)(rnd() % 8); /* 3 devices + 5 unassigned pages */
        unsigned off = (unsigned)(rnd() % 0x200);
        if (rnd() % 4 == 0)
            off &= ~3u;
        volatile uint8_t *p = m + dev * 0x1000 + off;
        switch (rnd() % 6) {
        case 0:
            *p = (uint8_t)edge_value();
            writes++;
            break;
        case 1:
            *(volatile uint16_t *)(p - ((uintptr_t)p & 1)) = (uint16_t)edge_value();
            writes++;
            break;
        case 2:
            *(volatile uint32_t *)(p - ((uintptr_t)p & 3)) = edge_value();
            writes++;
            break;
        case 3:
            *(volatile uint64_t *)(p - ((uintptr_t)p & 7)) =
                ((uint64_t)edge_value() << 32) | edge_value();
            writes++;
            break;
        default:
            (void)*(volatile uint32_t *)(p - ((uintptr_t)p & 3));
            reads++;
            break;
        }
        /* A driver-like sequence now and then: reset, features, a queue with wild rings,
         * DRIVER_OK, notify - so the back-ends see descriptor chains built from garbage. */
        if (round % 500 == 0) {
            volatile uint32_t *r = (volatile uint32_t *)(m + (rnd() % 3) * 0x1000);
            r[0x70 / 4] = 0;
            r[0x70 / 4] = 3;
            r[0x24 / 4] = 1;
            r[0x20 / 4] = 1;
            r[0x70 / 4] = 0xb;
            for (unsigned q = 0; q < 3; q++) {
                r[0x30 / 4] = q;
                r[0x38 / 4] = 1u << (rnd() % 9);
                uint64_t base = (rnd() % 2) ? (rnd() % (120u << 20)) & ~0xfffull
                                            : (uint64_t)edge_value() & ~0xfull;
                r[0x80 / 4] = (uint32_t)base;
                r[0x90 / 4] = (uint32_t)(base + 0x1000);
                r[0xa0 / 4] = (uint32_t)(base + 0x2000);
                r[0x44 / 4] = 1;
            }
            r[0x70 / 4] = 0xf;
            for (unsigned q = 0; q < 4; q++)
                r[0x50 / 4] = q;
            writes += 20;
        }
    }
    munmap((void *)m, 0x8000);
    close(fd);
    /* Ports: the UART, the i8042 data/status (not the reset command), CMOS, POST, and
     * unassigned ranges. Skips KVM's own PIC (0x20, 0xa0), PIT (0x40-0x43, 0x61) and ELCR. */
    long ports = 0;
    if (iopl(3) == 0) {
        static const uint16_t ours[] = {0x3f8, 0x3f9, 0x3fa, 0x3fb, 0x3fc, 0x3fd, 0x3fe,
                                        0x3ff, 0x60,  0x62,  0x63,  0x70,  0x71,  0x80};
        for (int i = 0; i < 20000; i++) {
            uint16_t port = rnd() % 2 ? ours[rnd() % (sizeof ours / sizeof ours[0])]
                                      : (uint16_t)(0x100 + rnd() % 0xff00);
            if (port >= 0x4d0 && port <= 0x4d1)
                continue; /* ELCR */
            if (port >= 0x3f8 && port <= 0x3ff && rnd() % 2)
                (void)inb(port);
            else
                outb((uint8_t)rnd(), port);
            if (rnd() % 3 == 0)
                (void)inl(port & ~3);
            ports++;
        }
        /* The UART back to 8N1, no interrupts, no loopback, so the report goes out. */
        outb(0x03, 0x3fb);
        outb(0x00, 0x3f9);
        outb(0x0b, 0x3fc);
    } else {
        snprintf(why, sizeof why, "iopl: %s", strerror(errno));
        result("garbage-ports", 0, why);
    }
    say("AIRLOCK-GUEST: garbage wrote %ld MMIO, read %ld, %ld port accesses", writes, reads, ports);
    result("garbage", 1, "");
}

int main(void)
{
    /* Started by airlock-kvm-init as the agent stand-in: serve the channel it hands in. */
    const char *lfd = getenv("AIRLOCK_AGENT_LISTEN_FD");
    if (lfd) {
        say("AIRLOCK-GUEST: agent stand-in serving fd %s as pid %d", lfd, (int)getpid());
        state_server(atoi(lfd));
        say("AIRLOCK-GUEST: done %d/%d", passed, total);
        sync();
        reboot(RB_AUTOBOOT);
        for (;;)
            pause();
    }
    int fd = open("/dev/console", O_RDWR);
    if (fd < 0) {
        mkdir("/dev", 0755);
        mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
        fd = open("/dev/console", O_RDWR);
    }
    if (fd >= 0) {
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
    }
    mkdir("/dev", 0755);
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    mkdir("/proc", 0755);
    mount("proc", "/proc", "proc", 0, NULL);
    mkdir("/sys", 0755);
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    int cfd = open("/proc/cmdline", O_RDONLY);
    if (cfd >= 0) {
        ssize_t n = read(cfd, cmdline, sizeof cmdline - 1);
        cmdline[n > 0 ? n : 0] = 0;
        close(cfd);
    }
    say("AIRLOCK-GUEST: started");
    if (wants("boot"))
        check_boot();
    if (wants("disk"))
        check_disk();
    if (wants("net"))
        check_net();
    if (wants("rng"))
        check_rng();
    if (wants("vsock"))
        check_vsock(2);
    if (wants("state"))
        state_server(-1);
    if (wants("garbage"))
        check_garbage();
    say("AIRLOCK-GUEST: done %d/%d", passed, total);
    sync();
    reboot(RB_AUTOBOOT);
    for (;;)
        pause();
}
