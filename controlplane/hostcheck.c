/* controlplane/hostcheck: see hostcheck.h. */
#include "hostcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
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

/* The generic C implementations; any other driver of "aes" is an accelerated one (aes-aesni,
 * the ARMv8 crypto extensions, ...). */
static bool host__aes_generic(const char *drv)
{
    return strcmp(drv, "aes-generic") == 0 || strcmp(drv, "aes-fixed-time") == 0 ||
           strcmp(drv, "aes_generic") == 0;
}

/* The value of "key : value" at line l (bounded by its newline), or NULL. */
static bool host__field(const char *l, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);
    if (strncmp(l, key, kl) != 0 || (l[kl] != ' ' && l[kl] != '\t' && l[kl] != ':'))
        return false;
    const char *v = strchr(l, ':');
    const char *e = strchr(l, '\n');
    if (!v || (e && v > e))
        return false;
    for (v++; *v == ' ' || *v == '\t'; v++)
        ;
    size_t n = e ? (size_t)(e - v) : strlen(v);
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), v);
    return true;
}

enum cp_host_aes cp_host_aes_parse(const char *crypto, const char *aliases, char *driver,
                                   size_t len)
{
    /* /proc/crypto: blocks of "key : value" lines, a blank line between two. */
    char name[128] = "", drv[128] = "", type[64] = "", v[128];
    long prio = -1, best = -1;
    driver[0] = '\0';
    for (const char *l = crypto; l && *l;) {
        const char *e = strchr(l, '\n');
        bool end = !e || l == e || !e[1];
        if (host__field(l, "name", v, sizeof v))
            snprintf(name, sizeof name, "%s", v);
        else if (host__field(l, "driver", v, sizeof v))
            snprintf(drv, sizeof drv, "%s", v);
        else if (host__field(l, "type", v, sizeof v))
            snprintf(type, sizeof type, "%s", v);
        else if (host__field(l, "priority", v, sizeof v))
            prio = strtol(v, NULL, 10);
        if (end) {
            if (strcmp(name, "aes") == 0 && strcmp(type, "cipher") == 0 && prio > best) {
                best = prio;
                snprintf(driver, len, "%s", drv);
            }
            name[0] = drv[0] = type[0] = '\0';
            prio = -1;
        }
        l = e ? e + 1 : NULL;
    }
    if (driver[0] && !host__aes_generic(driver))
        return CP_AES_FAST;
    /* modules.alias: "alias crypto-aes MODULE" for each module that provides AES. */
    for (const char *l = aliases; l && *l;) {
        const char *e = strchr(l, '\n');
        char mod[64];
        if (sscanf(l, "alias crypto-aes %63s", mod) == 1 && !host__aes_generic(mod)) {
            snprintf(driver, len, "%s", mod);
            return CP_AES_MODULE;
        }
        l = e ? e + 1 : NULL;
    }
    return driver[0] ? CP_AES_GENERIC : CP_AES_UNKNOWN;
}

static char *host__slurp(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t cap = 0, n = 0, got;
    char buf[8192];
    while ((got = fread(buf, 1, sizeof buf, f)) > 0 && n < (8u << 20)) {
        if (n + got + 1 > cap) {
            size_t nc = (n + got + 1) * 2;
            char *t = realloc(text, nc);
            if (!t)
                break;
            text = t;
            cap = nc;
        }
        memcpy(text + n, buf, got);
        n += got;
        text[n] = '\0';
    }
    fclose(f);
    return text;
}

static void host__aes_probe(struct cp_host *h)
{
    char *crypto = host__slurp("/proc/crypto");
    char path[256];
    snprintf(path, sizeof path, "/lib/modules/%s/modules.alias", h->kernel);
    char *aliases = host__slurp(path);
    h->aes = cp_host_aes_parse(crypto, aliases, h->aes_driver, sizeof h->aes_driver);
    free(crypto);
    free(aliases);
    char *cpu = host__slurp("/proc/cpuinfo");
    const char *fl = cpu ? strstr(cpu, "\nflags") : NULL;
    if (fl) {
        const char *e = strchr(fl + 1, '\n');
        size_t n = e ? (size_t)(e - fl) : strlen(fl);
        for (const char *p = strstr(fl, " aes"); p && p < fl + n; p = strstr(p + 1, " aes"))
            if (p[4] == ' ' || p[4] == '\n' || !p[4]) {
                h->cpu_aes = true;
                break;
            }
    }
    free(cpu);
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
    host__aes_probe(h);
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
    switch (h->aes) {
    case CP_AES_FAST:
        fprintf(f, "  AES         %s (accelerated)\n", h->aes_driver);
        break;
    case CP_AES_MODULE:
        fprintf(f, "  AES         %s (accelerated; the kernel loads the module on first use)\n",
                h->aes_driver);
        break;
    case CP_AES_GENERIC:
    case CP_AES_UNKNOWN:
        fprintf(f,
                "  AES         %s: NOT accelerated (%s): writes to a store encrypted at rest "
                "(at_rest.encrypt) cost several times more; see docs/snapshots.md\n",
                h->aes_driver[0] ? h->aes_driver : "none found in /proc/crypto",
                h->cpu_aes ? "the CPU has AES-NI but this kernel has no driver for it, aesni_intel"
                           : "the CPU offers no AES instructions");
        break;
    }
}

/* ---- the limits of all sandboxes together ------------------------------------------------ */

void cp_host_res_probe(const char *state_dir, struct cp_host_res *r)
{
    memset(r, 0, sizeof *r);
    long pm = host__read_long("/proc/sys/kernel/pid_max", 32768);
    long tm = host__read_long("/proc/sys/kernel/threads-max", pm);
    r->pid_max = (uint64_t)(pm < tm ? pm : tm);
    r->file_max = (uint64_t)host__read_long("/proc/sys/fs/file-max", 0);
    struct sysinfo si;
    if (sysinfo(&si) == 0)
        r->mem_total = (uint64_t)si.totalram * si.mem_unit;
    struct statvfs vfs;
    if (state_dir && statvfs(state_dir, &vfs) == 0)
        r->disk_free = (uint64_t)vfs.f_bfree * vfs.f_frsize;
    r->nofile = cp_nofile_now();
}

uint64_t cp_nofile_now(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return 0;
    return (uint64_t)rl.rlim_cur;
}

uint64_t cp_nofile_sandboxes(const struct cp_config *c, uint64_t nofile)
{
    if (!nofile)
        return UINT64_MAX;
    uint64_t reserve = CP_NOFILE_RESERVE;
    uint64_t pools = (uint64_t)(c->net_pool_size > 0 ? c->net_pool_size : 0) +
                     4 * (uint64_t)(c->warm_pool > 0 ? c->warm_pool : 0);
    if (nofile <= reserve + pools)
        return 0;
    return (nofile - reserve - pools) / CP_NOFILE_PER_SANDBOX;
}

static const char *host__size(uint64_t b, char *buf, size_t len)
{
    if (b >= (10ull << 30))
        snprintf(buf, len, "%.0f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 30))
        snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ull << 30));
    else
        snprintf(buf, len, "%.0f MiB", (double)b / (double)(1ull << 20));
    return buf;
}

/* What the host keeps of total when the sandboxes get the rest: frac of it, at least min,
 * at most half. */
static uint64_t host__reserve(uint64_t total, uint64_t div, uint64_t min)
{
    uint64_t r = total / div;
    if (r < min)
        r = min;
    if (r > total / 2)
        r = total / 2;
    return r;
}

int cp_host_limits_plan(const struct cp_config *c, const struct cp_host_res *r,
                        struct cp_host_limits *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    char a[32], b[32];
    if (c->total_pids > 0) {
        out->pids = (uint64_t)c->total_pids;
        if (out->pids + CP_HOST_MIN_PIDS > r->pid_max)
            return al_error_set(err, -EINVAL,
                                "sandboxes.total_pids %" PRIu64 " leaves the host %s of its "
                                "%" PRIu64 " processes (the smaller of kernel.pid_max and "
                                "kernel.threads-max): at least %d must stay outside the "
                                "sandboxes for airlockd, airlock-egress and the host; lower it "
                                "to %" PRIu64 " or less, or 0 for the default",
                                out->pids, out->pids >= r->pid_max ? "none" : "too few", r->pid_max,
                                CP_HOST_MIN_PIDS,
                                r->pid_max > CP_HOST_MIN_PIDS ? r->pid_max - CP_HOST_MIN_PIDS : 0);
    } else {
        out->pids = r->pid_max - host__reserve(r->pid_max, 4, 2048);
        out->pids_auto = true;
    }
    if (c->total_memory_bytes > 0) {
        out->memory = c->total_memory_bytes;
        if (r->mem_total && out->memory + CP_HOST_MIN_MEMORY > r->mem_total)
            return al_error_set(err, -EINVAL,
                                "sandboxes.total_memory %s leaves the host less than %s of "
                                "its %s: lower it, or 0 for the default",
                                host__size(out->memory, a, sizeof a),
                                host__size(CP_HOST_MIN_MEMORY, b, sizeof b),
                                host__size(r->mem_total, (char[32]){0}, 32));
    } else {
        out->memory = r->mem_total - host__reserve(r->mem_total, 8, 1ull << 30);
        out->memory_auto = true;
    }
    return 0;
}

int cp_host_limits_print(const struct cp_config *c, const struct cp_host_res *r,
                         const struct cp_host_limits *l, bool kvm, FILE *f)
{
    char a[32], b[32], d[32];
    int over = 0;
    uint64_t n = (uint64_t)c->max_sandboxes;
    fprintf(f,
            "  limits      all sandboxes together (cgroup %s): %" PRIu64 " processes%s, "
            "%s of memory%s; the host keeps %" PRIu64 " processes and %s\n",
            c->cgroup_parent, l->pids, l->pids_auto ? " (sandboxes.total_pids: auto)" : "",
            host__size(l->memory, a, sizeof a),
            l->memory_auto ? " (sandboxes.total_memory: auto)" : "", r->pid_max - l->pids,
            host__size(r->mem_total > l->memory ? r->mem_total - l->memory : 0, b, sizeof b));

    /* A KVM sandbox's processes are its airlock-vmm's threads (one per vCPU and a few). */
    uint64_t per_pids = kvm ? (uint64_t)c->cpu_count + 16 : (uint64_t)c->pids;
    uint64_t want_pids = n * per_pids;
    if (want_pids > l->pids) {
        over++;
        fprintf(f,
                "  overcommit  processes: sandboxes.max %" PRIu64 " x %" PRIu64 " (%s) = %" PRIu64
                " > %" PRIu64 ". When the sandboxes together have that many, a fork in any "
                "sandbox fails (EAGAIN) and new sandboxes are refused (503) until processes "
                "exit; airlockd, airlock-egress and the host keep theirs\n",
                n, per_pids, kvm ? "the VMM's threads" : "sandboxes.pids", want_pids, l->pids);
    }
    /* A KVM guest's airlock-vmm is charged for the guest's memory and its own. */
    uint64_t per = c->memory_bytes;
    if (kvm)
        per += per / 4 > (128ull << 20) ? per / 4 : (128ull << 20);
    uint64_t want_mem = n * per;
    if (want_mem > l->memory) {
        over++;
        fprintf(f,
                "  overcommit  memory: sandboxes.max %" PRIu64 " x %s%s = %s > %s. When the "
                "sandboxes together use that much, the kernel reclaims their caches and then "
                "OOM-kills processes inside the sandboxes; nothing outside them is killed for "
                "it\n",
                n, host__size(per, a, sizeof a),
                kvm ? " (sandboxes.memory and the VMM's share)"
                    : " (sandboxes.memory, their tmpfs disks included)",
                host__size(want_mem, b, sizeof b), host__size(l->memory, d, sizeof d));
    }
    /* Open files have no cgroup limit: each process has RLIMIT_NOFILE, and the kernel's
     * file objects are charged to the sandbox's memory cgroup. */
    uint64_t want_files = l->pids * CP_SANDBOX_NOFILE;
    if (r->file_max && want_files > r->file_max) {
        over++;
        fprintf(f,
                "  overcommit  open files: %" PRIu64 " processes x %d (RLIMIT_NOFILE) = %" PRIu64
                " > fs.file-max %" PRIu64 ". The file objects are kernel memory charged to the "
                "sandboxes' memory, which bounds them; should the system-wide table still "
                "fill, opening a file fails (ENFILE) on the whole host: raise fs.file-max "
                "(sysctl) or lower sandboxes.total_pids\n",
                l->pids, CP_SANDBOX_NOFILE, want_files, r->file_max);
    }
    /* airlockd's own descriptors: a creation beyond them is refused (503) before it starts. */
    uint64_t fit = cp_nofile_sandboxes(c, r->nofile);
    if (n > fit) {
        over++;
        fprintf(f,
                "  overcommit  airlockd's open files: RLIMIT_NOFILE %" PRIu64
                " has room for %" PRIu64
                " sandboxes (%d descriptors each, after the pools and a reserve) < sandboxes.max "
                "%" PRIu64 ". Creations beyond %" PRIu64 " are refused (503): raise LimitNOFILE= "
                "in airlockd's unit, or ulimit -n of the shell that starts it\n",
                r->nofile, fit, CP_NOFILE_PER_SANDBOX, n, fit);
    }
    uint64_t want_disk = n * c->disk_bytes;
    if (kvm && want_disk > r->disk_free) {
        over++;
        fprintf(f,
                "  overcommit  disk: sandboxes.max %" PRIu64 " x sandboxes.disk %s = %s > %s "
                "free in %s. KVM disks are files there that grow as the guests write; when "
                "the file system fills, writes in every guest fail (and airlockd's own "
                "state with them): keep sandboxes.max x sandboxes.disk below the free space\n",
                n, host__size(c->disk_bytes, a, sizeof a), host__size(want_disk, b, sizeof b),
                host__size(r->disk_free, d, sizeof d), c->state_dir);
    } else if (!kvm) {
        fprintf(f, "  disk        a sandbox's writable layer is a tmpfs counted in its memory "
                   "(bounded with it)\n");
    }
    return over;
}
