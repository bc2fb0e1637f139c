/* controlplane/hostcheck: see hostcheck.h. */
#include "hostcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

static long host__read_long(const char *path, long dflt)
{
    char buf[64];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dflt;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return dflt;
    buf[n] = '\0';
    return strtol(buf, NULL, 10);
}

void cp_host_probe(struct cp_host *h)
{
    memset(h, 0, sizeof *h);
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(h->kernel, sizeof h->kernel, "%s", u.release);
        sscanf(u.release, "%d.%d", &h->kmajor, &h->kminor);
    }
    struct stat st;
    h->cgroup2_unified = stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0;
    h->cgroup2_present =
        h->cgroup2_unified || stat("/sys/fs/cgroup/unified/cgroup.controllers", &st) == 0;
    h->cgroup1 = stat("/sys/fs/cgroup/memory", &st) == 0 || stat("/sys/fs/cgroup/cpu", &st) == 0;
    h->userns = host__read_long("/proc/sys/user/max_user_namespaces", 1) > 0;
    h->seccomp = stat("/proc/sys/kernel/seccomp/actions_avail", &st) == 0;
#ifdef SYS_landlock_create_ruleset
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1u /* VERSION */);
    h->landlock_abi = abi > 0 ? (int)abi : 0;
#endif
    h->root = geteuid() == 0;
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        h->kvm_present = errno != ENOENT;
        snprintf(h->kvm_detail, sizeof h->kvm_detail, "%s",
                 errno == ENOENT ? "no /dev/kvm" : strerror(errno));
        return;
    }
    h->kvm_present = true;
    int v = ioctl(fd, KVM_GET_API_VERSION, 0);
    int vm = v == KVM_API_VERSION ? ioctl(fd, KVM_CREATE_VM, 0) : -1;
    if (vm >= 0) {
        h->kvm_usable = true;
        snprintf(h->kvm_detail, sizeof h->kvm_detail,
                 "/dev/kvm present (API %d, creates VMs; the probe below decides)", v);
        close(vm);
    } else {
        snprintf(h->kvm_detail, sizeof h->kvm_detail, "/dev/kvm present but %s",
                 v != KVM_API_VERSION ? "its API version is unexpected"
                                      : "creating a VM fails (no hardware virtualisation?)");
    }
    close(fd);
}

void cp_host_print(const struct cp_host *h, FILE *f)
{
    fprintf(f, "  kernel      %s%s\n", h->kernel,
            h->kmajor > 6 || (h->kmajor == 6 && h->kminor >= 5) ? ""
            : h->kmajor > 5 || (h->kmajor == 5 && h->kminor >= 10)
                ? " (older than 6.5: bpf_sk_assign refuses SO_REUSEPORT sockets, so "
                  "airlock-egress listens with one socket per address shared by its workers; "
                  "see docs/operations.md)"
                : " (older than 5.10: unsupported)");
    fprintf(f, "  cgroups     %s\n",
            h->cgroup2_unified                 ? "v2 (unified)"
            : h->cgroup1 && h->cgroup2_present ? "v1 + v2 (hybrid)"
            : h->cgroup1                       ? "v1"
                                               : "none found");
    fprintf(f, "  namespaces  user namespaces %s; seccomp %s; Landlock %s\n",
            h->userns ? "available" : "DISABLED", h->seccomp ? "available" : "absent",
            h->landlock_abi ? "available" : "absent");
    fprintf(f, "  KVM         %s\n", h->kvm_detail);
}
