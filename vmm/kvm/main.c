/* vmm/kvm/main: airlock-vmm-kvm, the development front end of the KVM backend until it
 * plugs into airlock-vmm (--backend kvm). Boots one VM from command-line options and exits
 * when the guest resets or powers off (0), on SIGTERM/SIGINT (0), or on error (1).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "vmm/kvm/kvm.h"

static struct vmm_kvm *main__vm;

static void main__on_signal(int sig)
{
    (void)sig;
    if (main__vm)
        vmm_kvm_stop(main__vm);
}

static void main__usage(FILE *f)
{
    fprintf(f,
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
            "  --cid N              virtio-vsock with this guest CID\n"
            "  --vsock PORT=PATH    bridge unix socket PATH on the host to guest vsock PORT\n"
            "  --probe              only check that /dev/kvm is usable\n");
}

int main(int argc, char **argv);
int main(int argc, char **argv)
{
    al_log_init("vmm-kvm", AL_LOG_AUTO, AL_LOG_INFO);
    struct vmm_kvm_config cfg = {.mem_bytes = 256ull << 20, .vcpus = 1};
    bool probe = false;
    static const struct option opts[] = {
        {"kernel", required_argument, 0, 'k'}, {"initrd", required_argument, 0, 'i'},
        {"cmdline", required_argument, 0, 'c'}, {"mem", required_argument, 0, 'm'},
        {"vcpus", required_argument, 0, 'n'}, {"console", required_argument, 0, 'o'},
        {"disk", required_argument, 0, 'd'}, {"overlay", required_argument, 0, 'w'},
        {"disk-ro", no_argument, 0, 'r'}, {"tap", required_argument, 0, 't'},
        {"cid", required_argument, 0, 'C'}, {"vsock", required_argument, 0, 'V'},
        {"probe", no_argument, 0, 'p'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'k': cfg.kernel = optarg; break;
        case 'i': cfg.initrd = optarg; break;
        case 'c': cfg.cmdline = optarg; break;
        case 'm':
            if (al_parse_size(optarg, &cfg.mem_bytes) < 0) {
                fprintf(stderr, "airlock-vmm-kvm: --mem '%s' is not a size (e.g. 256MiB)\n", optarg);
                return 2;
            }
            break;
        case 'n': cfg.vcpus = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'o': cfg.console_log = optarg; break;
        case 'd': cfg.disk = optarg; break;
        case 'w': cfg.disk_overlay = optarg; break;
        case 'r': cfg.disk_readonly = true; break;
        case 't': cfg.tap = optarg; break;
        case 'C': cfg.guest_cid = (uint32_t)strtoul(optarg, NULL, 10); break;
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
        case 'p': probe = true; break;
        case 'h': main__usage(stdout); return 0;
        default: main__usage(stderr); return 2;
        }
    }
    struct al_error err = {0};
    if (probe) {
        if (vmm_kvm_probe(&err) < 0) {
            fprintf(stderr, "airlock-vmm-kvm: %s\n", al_error_str(&err));
            return 1;
        }
        printf("/dev/kvm is usable\n");
        return 0;
    }
    if (!cfg.kernel) {
        main__usage(stderr);
        return 2;
    }
    uint64_t t0 = al_now_ns();
    if (vmm_kvm_create(&cfg, &main__vm, &err) < 0) {
        fprintf(stderr, "airlock-vmm-kvm: %s\n", al_error_str(&err));
        return 1;
    }
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
    enum vmm_kvm_exit how = vmm_kvm_wait(main__vm);
    al_info("VM ended after %.3f s: %s", (double)(al_now_ns() - t0) / 1e9, vmm_kvm_exit_str(how));
    vmm_kvm_destroy(main__vm);
    main__vm = NULL;
    return how == VMM_KVM_EXIT_ERROR ? 1 : 0;
}
