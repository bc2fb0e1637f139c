/* vmm/kvm/main: airlock-vmm-kvm, the development front end of the KVM backend until it
 * plugs into airlock-vmm (--backend kvm). Boots (or restores) one VM from command-line
 * options and exits when the guest resets or powers off (0), on SIGTERM/SIGINT or a "stop"
 * command (0), or on error (1).
 *
 * --control PATH: a unix socket taking one command per line, answering "ok ..." or
 * "error <why>": pause | resume | snapshot DIR | stop. --control-fd N: the same protocol on
 * a connected stream socket handed in by a supervisor (airlock-vmm's KVM backend), for as
 * long as it lives: end of file on it means the supervisor is gone, and the VM stops.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "common/confine.h"
#include "vmm/kvm/confine.h"
#include "vmm/kvm/kvm.h"

static struct vmm_kvm *main__vm;

/* SIGTERM/SIGINT: the handler only writes an eventfd that main__serve polls, and the stop
 * happens there. vmm_kvm_stop takes the pause lock, and the signal may land on the vCPU or
 * device thread that holds it: stopping inside the handler deadlocked that thread, and the
 * VMM never exited. */
static int main__sig_fd = -1;

static void main__on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    uint64_t one = 1;
    if (main__sig_fd >= 0) {
        ssize_t w = write(main__sig_fd, &one, sizeof one);
        (void)w;
    }
    errno = saved;
}

static int main__listen(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(path, 0600) < 0 ||
        listen(fd, 4) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

/* One command from a control connection; the answer goes back on the same connection.
 * Returns -1 when the peer closed the connection before sending anything. */
static int main__command(struct vmm_kvm *vm, int fd)
{
    char line[4200];
    size_t n = 0;
    bool eof = false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (n < sizeof line - 1 && poll(&p, 1, 5000) == 1) {
        ssize_t r = read(fd, line + n, 1);
        if (r <= 0) {
            eof = r == 0 || errno != EINTR;
            break;
        }
        if (line[n] == '\n')
            break;
        n++;
    }
    if (eof && n == 0)
        return -1;
    line[n] = 0;
    char reply[700];
    struct al_error err = {0};
    if (strcmp(line, "pause") == 0) {
        if (vmm_kvm_pause(vm, &err) == 0)
            snprintf(reply, sizeof reply, "ok\n");
        else
            snprintf(reply, sizeof reply, "error %s\n", al_error_str(&err));
    } else if (strcmp(line, "resume") == 0) {
        vmm_kvm_resume(vm);
        snprintf(reply, sizeof reply, "ok\n");
    } else if (strncmp(line, "snapshot ", 9) == 0 && line[9]) {
        uint64_t t0 = al_now_ns();
        if (vmm_kvm_snapshot(vm, line + 9, &err) == 0)
            snprintf(reply, sizeof reply, "ok %.3f ms\n", (double)(al_now_ns() - t0) / 1e6);
        else
            snprintf(reply, sizeof reply, "error %s\n", al_error_str(&err));
    } else if (strcmp(line, "stop") == 0) {
        vmm_kvm_stop(vm);
        snprintf(reply, sizeof reply, "ok\n");
    } else {
        snprintf(reply, sizeof reply,
                 "error unknown command (pause, resume, snapshot DIR, stop)\n");
    }
    ssize_t w = write(fd, reply, strlen(reply));
    (void)w;
    return 0;
}

/* Serves the control socket and the supervisor's connection (either may be -1) until the
 * VM ends. */
static void main__serve(struct vmm_kvm *vm, int ctl, int conn)
{
    struct pollfd p[4] = {{.fd = vmm_kvm_exit_fd(vm), .events = POLLIN},
                          {.fd = ctl, .events = POLLIN},
                          {.fd = conn, .events = POLLIN},
                          {.fd = main__sig_fd, .events = POLLIN}};
    for (;;) {
        int n = poll(p, 4, -1);
        if (n < 0 && errno != EINTR)
            return;
        if (n < 0)
            continue;
        if (p[0].revents)
            return;
        if (p[3].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(main__sig_fd, &v, sizeof v);
            (void)r;
            vmm_kvm_stop(vm);
            p[3].fd = -1;
        }
        if (p[1].revents & POLLIN) {
            int c = accept4(ctl, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                main__command(vm, c);
                close(c);
            }
        }
        if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (main__command(vm, conn) < 0) {
                al_info("the supervisor closed the control connection: stopping the VM");
                vmm_kvm_stop(vm);
                p[2].fd = -1;
            }
        }
    }
}

static void main__usage(FILE *f)
{
    fprintf(
        f,
        "usage: airlock-vmm-kvm --kernel BZIMAGE [options]\n"
        "  --kernel PATH        guest kernel (bzImage)\n"
        "  --initrd PATH        initramfs\n"
        "  --cmdline STR        kernel command line (default: airlock guest defaults)\n"
        "  --mem SIZE           guest memory (default 256MiB)\n"
        "  --vcpus N            vCPUs (default 1)\n"
        "  --console PATH       append the serial console here (default stderr)\n"
        "  --disk PATH          root disk image (read-only; writes go to --overlay)\n"
        "  --overlay PATH       copy-on-write file for the disk's writes\n"
        "  --disk-ro            present the disk read-only\n"
        "  --tap NAME           virtio-net on this tap device\n"
        "  --mac MAC            the guest NIC's address (default: random, locally administered)\n"
        "  --cid N              virtio-vsock with this guest CID\n"
        "  --vsock PORT=PATH    bridge unix socket PATH on the host to guest vsock PORT\n"
        "  --tap-fd N / --console-fd N / --vsock-fd PORT=N\n"
        "                       descriptors handed in by a supervisor instead of names\n"
        "  --restore DIR        restore the snapshot in DIR instead of booting\n"
        "  --control PATH       command socket: pause | resume | snapshot DIR | stop\n"
        "  --control-fd N       the same commands on a connected socket handed in; its\n"
        "                       end of file stops the VM\n"
        "  --net-unplugged      a virtio-net device without a tap (drops what is sent)\n"
        "  --jail DIR           after setup, pivot_root into DIR (paths in later\n"
        "                       commands are inside it)\n"
        "  --uid N --gid N      after setup, run as this unprivileged identity\n"
        "  --cgroup DIR         join this cgroup (repeatable: one per v1 hierarchy)\n"
        "  --seccomp            per-thread seccomp filters after setup\n"
        "  --probe              only check that /dev/kvm is usable (with --kernel: that\n"
        "                       it boots that kernel to its first console output)\n"
        "  --timeout-ms N       with --probe --kernel: how long the kernel has for its\n"
        "                       first output (10..600000; default 10000)\n");
}

int main(int argc, char **argv);
int main(int argc, char **argv)
{
    al_log_init("vmm-kvm", AL_LOG_AUTO, AL_LOG_INFO);
    /* One malloc arena for all threads: per-thread arenas (and transparent huge pages in
     * them) cost megabytes of RSS in a process that allocates almost nothing after setup. */
    mallopt(M_ARENA_MAX, 1);
    struct vmm_kvm_config cfg = {.mem_bytes = 256ull << 20, .vcpus = 1};
    bool probe = false;
    unsigned probe_timeout_ms = 10000;
    const char *control = NULL;
    int control_fd = -1;
    struct al_confine_opts conf = {0};
    bool seccomp = false;
    static const struct option opts[] = {
        {"kernel", required_argument, 0, 'k'},
        {"initrd", required_argument, 0, 'i'},
        {"cmdline", required_argument, 0, 'c'},
        {"mem", required_argument, 0, 'm'},
        {"vcpus", required_argument, 0, 'n'},
        {"console", required_argument, 0, 'o'},
        {"disk", required_argument, 0, 'd'},
        {"overlay", required_argument, 0, 'w'},
        {"disk-ro", no_argument, 0, 'r'},
        {"tap", required_argument, 0, 't'},
        {"cid", required_argument, 0, 'C'},
        {"vsock", required_argument, 0, 'V'},
        {"mac", required_argument, 0, 'M'},
        {"tap-fd", required_argument, 0, 'F'},
        {"console-fd", required_argument, 0, 'O'},
        {"vsock-fd", required_argument, 0, 'W'},
        {"restore", required_argument, 0, 'R'},
        {"control", required_argument, 0, 'L'},
        {"jail", required_argument, 0, 'J'},
        {"uid", required_argument, 0, 'U'},
        {"gid", required_argument, 0, 'G'},
        {"cgroup", required_argument, 0, 'g'},
        {"seccomp", no_argument, 0, 'S'},
        {"probe", no_argument, 0, 'p'},
        {"timeout-ms", required_argument, 0, 'T'},
        {"control-fd", required_argument, 0, 'K'},
        {"net-unplugged", no_argument, 0, 'N'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'k':
            cfg.kernel = optarg;
            break;
        case 'i':
            cfg.initrd = optarg;
            break;
        case 'c':
            cfg.cmdline = optarg;
            break;
        case 'm':
            if (al_parse_size(optarg, &cfg.mem_bytes) < 0) {
                fprintf(stderr, "airlock-vmm-kvm: --mem '%s' is not a size (e.g. 256MiB)\n",
                        optarg);
                return 2;
            }
            break;
        case 'n':
            cfg.vcpus = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'o':
            cfg.console_log = optarg;
            break;
        case 'd':
            cfg.disk = optarg;
            break;
        case 'w':
            cfg.disk_overlay = optarg;
            break;
        case 'r':
            cfg.disk_readonly = true;
            break;
        case 't':
            cfg.tap = optarg;
            break;
        case 'C':
            cfg.guest_cid = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'M': {
            unsigned m[6];
            if (sscanf(optarg, "%2x:%2x:%2x:%2x:%2x:%2x", &m[0], &m[1], &m[2], &m[3], &m[4],
                       &m[5]) != 6 ||
                (m[0] & 1)) {
                fprintf(stderr,
                        "airlock-vmm-kvm: --mac '%s' is not a unicast MAC (aa:bb:cc:dd:ee:ff)\n",
                        optarg);
                return 2;
            }
            for (int i = 0; i < 6; i++)
                cfg.mac[i] = (uint8_t)m[i];
            break;
        }
        case 'F':
            cfg.tap_fd = atoi(optarg);
            break;
        case 'O':
            cfg.console_fd = atoi(optarg);
            break;
        case 'W': {
            char *eq = strchr(optarg, '=');
            if (!eq || cfg.n_vsock >= VMM_KVM_MAX_VSOCK_PORTS) {
                fprintf(stderr, "airlock-vmm-kvm: --vsock-fd wants PORT=FD (at most %d)\n",
                        VMM_KVM_MAX_VSOCK_PORTS);
                return 2;
            }
            *eq = 0;
            cfg.vsock[cfg.n_vsock].port = (uint32_t)strtoul(optarg, NULL, 10);
            cfg.vsock[cfg.n_vsock].fd = atoi(eq + 1);
            cfg.n_vsock++;
            break;
        }
        case 'V': {
            char *eq = strchr(optarg, '=');
            if (!eq || cfg.n_vsock >= VMM_KVM_MAX_VSOCK_PORTS) {
                fprintf(stderr, "airlock-vmm-kvm: --vsock wants PORT=PATH (at most %d)\n",
                        VMM_KVM_MAX_VSOCK_PORTS);
                return 2;
            }
            *eq = 0;
            cfg.vsock[cfg.n_vsock].port = (uint32_t)strtoul(optarg, NULL, 10);
            cfg.vsock[cfg.n_vsock].path = eq + 1;
            cfg.n_vsock++;
            break;
        }
        case 'R':
            cfg.restore_dir = optarg;
            break;
        case 'L':
            control = optarg;
            break;
        case 'J':
            conf.root_dir = optarg;
            break;
        case 'U':
            conf.uid = (uid_t)strtoul(optarg, NULL, 10);
            break;
        case 'G':
            conf.gid = (gid_t)strtoul(optarg, NULL, 10);
            break;
        case 'g':
            if (conf.n_cgroups >= AL_CONFINE_MAX_CGROUPS) {
                fprintf(stderr, "airlock-vmm-kvm: at most %d --cgroup\n", AL_CONFINE_MAX_CGROUPS);
                return 2;
            }
            conf.cgroups[conf.n_cgroups++] = optarg;
            break;
        case 'S':
            seccomp = true;
            break;
        case 'p':
            probe = true;
            break;
        case 'T': {
            char *end;
            errno = 0;
            unsigned long v = strtoul(optarg, &end, 10);
            if (errno || end == optarg || *end || v < 10 || v > 600000) {
                fprintf(stderr, "airlock-vmm-kvm: --timeout-ms '%s': wants 10..600000\n", optarg);
                return 2;
            }
            probe_timeout_ms = (unsigned)v;
            break;
        }
        case 'K':
            control_fd = atoi(optarg);
            if (control_fd <= 2) {
                fprintf(stderr, "airlock-vmm-kvm: --control-fd wants a descriptor > 2\n");
                return 2;
            }
            break;
        case 'N':
            cfg.net_unplugged = true;
            break;
        case 'h':
            main__usage(stdout);
            return 0;
        default:
            main__usage(stderr);
            return 2;
        }
    }
    struct al_error err = {0};
    if (probe) {
        if ((cfg.kernel ? vmm_kvm_probe_kernel(cfg.kernel, probe_timeout_ms, &err)
                        : vmm_kvm_probe(&err)) < 0) {
            fprintf(stderr, "airlock-vmm-kvm: %s\n", al_error_str(&err));
            return 1;
        }
        printf("/dev/kvm is usable\n");
        return 0;
    }
    if (!cfg.kernel && !cfg.restore_dir) {
        main__usage(stderr);
        return 2;
    }
    uint64_t t0 = al_now_ns();
    if (vmm_kvm_create(&cfg, &main__vm, &err) < 0) {
        fprintf(stderr, "airlock-vmm-kvm: %s\n", al_error_str(&err));
        return 1;
    }
    if ((conf.uid && !conf.gid) || (!conf.uid && conf.gid)) {
        fprintf(stderr, "airlock-vmm-kvm: --uid and --gid go together\n");
        vmm_kvm_destroy(main__vm);
        return 2;
    }
    /* The control socket is bound before confinement; its directory is kept open so the
     * socket can be removed from inside the jail. */
    int ctl = -1, ctl_dir = -1;
    char ctl_name[108] = "";
    if (control) {
        ctl = main__listen(control);
        if (ctl < 0) {
            fprintf(stderr, "airlock-vmm-kvm: cannot listen on %s: %s\n", control, strerror(-ctl));
            vmm_kvm_destroy(main__vm);
            return 1;
        }
        const char *slash = strrchr(control, '/');
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - control) : 1,
                 slash ? control : ".");
        snprintf(ctl_name, sizeof ctl_name, "%s", slash ? slash + 1 : control);
        ctl_dir = open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    }
    main__sig_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* before the seccomp filter */
    if (main__sig_fd < 0) {
        fprintf(stderr, "airlock-vmm-kvm: eventfd: %s\n", strerror(errno));
        vmm_kvm_destroy(main__vm);
        return 1;
    }
    if (conf.root_dir || conf.uid || conf.n_cgroups || seccomp) {
        al_log_init("vmm-kvm", AL_LOG_JSON, al_log_get_level()); /* no isatty() per line */
        if (al_confine_self(&conf, &err) < 0) {
            fprintf(stderr, "airlock-vmm-kvm: confinement failed: %s\n", al_error_str(&err));
            vmm_kvm_destroy(main__vm);
            return 1;
        }
        kvm_confine_enable_seccomp(seccomp);
    }
    signal(SIGPIPE, SIG_IGN); /* a supervisor gone mid-answer is EPIPE, not death */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = main__on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (vmm_kvm_start(main__vm, &err) < 0) {
        fprintf(stderr, "airlock-vmm-kvm: %s\n", al_error_str(&err));
        vmm_kvm_destroy(main__vm);
        return 1;
    }
    if (kvm_confine_thread(CONFINE_CONTROL, &err) < 0) {
        fprintf(stderr, "airlock-vmm-kvm: %s\n", al_error_str(&err));
        vmm_kvm_stop(main__vm);
    }
    main__serve(main__vm, ctl, control_fd);
    if (ctl >= 0) {
        close(ctl);
        if (ctl_dir >= 0)
            unlinkat(ctl_dir, ctl_name, 0);
    }
    if (ctl_dir >= 0)
        close(ctl_dir);
    if (control_fd >= 0)
        close(control_fd);
    enum vmm_kvm_exit how = vmm_kvm_wait(main__vm);
    al_info("VM ended after %.3f s: %s", (double)(al_now_ns() - t0) / 1e9, vmm_kvm_exit_str(how));
    vmm_kvm_destroy(main__vm);
    main__vm = NULL;
    close(main__sig_fd);
    main__sig_fd = -1;
    return how == VMM_KVM_EXIT_ERROR ? 1 : 0;
}
