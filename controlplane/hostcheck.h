/* controlplane/hostcheck: what this host offers airlockd, said plainly at start.
 *
 * Owns: the checks (kernel release, cgroup v1/v2, user namespaces, seccomp, Landlock, whether
 * /dev/kvm opens and creates a VM, whether the kernel's AES is accelerated) and the summary
 * airlockd prints. Whether KVM can run
 * sandboxes is not decided here (a paravirtual KVM creates VMs but boots no Linux guest):
 * backendsel.c runs airlock-vmm --probe-kvm for that.
 * Also the limits of all sandboxes together (the cgroup parent's pids.max and memory.max,
 * derived from the host's kernel.pid_max and memory unless configured), the check of the
 * configuration against them (sandboxes.max times each sandbox's limits) and the summary of
 * what happens when that is overcommitted.
 */
#ifndef AIRLOCK_CP_HOSTCHECK_H
#define AIRLOCK_CP_HOSTCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "config.h"

/* The AES the kernel's file encryption (fscrypt's AES-256-XTS, encryption at rest) runs on.
 * Without an accelerated driver it is the kernel's table-free C code: writes to an encrypted
 * store cost several times those to a plain one (docs/snapshots.md, "Encryption at rest"). */
enum cp_host_aes {
    CP_AES_UNKNOWN, /* /proc/crypto has no AES cipher */
    CP_AES_GENERIC, /* only the kernel's C implementation */
    CP_AES_MODULE,  /* an accelerated driver is a module the kernel loads on first use */
    CP_AES_FAST,    /* an accelerated driver is registered */
};

struct cp_host {
    char kernel[128];
    int kmajor, kminor;
    bool cgroup2_unified; /* cgroup v2 only */
    bool cgroup2_present; /* any cgroup2 mount */
    bool cgroup1;         /* v1 controllers mounted */
    bool userns;
    bool seccomp;
    int landlock_abi; /* 0 = none */
    bool kvm_present;
    bool kvm_usable; /* opens, expected API, KVM_CREATE_VM works (not: boots a guest) */
    char kvm_detail[128];
    bool root;
    enum cp_host_aes aes;
    char aes_driver[64]; /* the AES cipher's driver in /proc/crypto, or its module */
    bool cpu_aes;        /* the CPU has AES instructions (the "aes" flag) */
};

void cp_host_probe(struct cp_host *h);
/* The AES of crypto (the text of /proc/crypto) and aliases (of modules.alias; NULL: none):
 * the highest-priority driver of the "aes" cipher, or the module an alias names. */
enum cp_host_aes cp_host_aes_parse(const char *crypto, const char *aliases, char *driver,
                                   size_t len);
/* Prints the summary lines ("  kernel     6.1.0 ..."). */
void cp_host_print(const struct cp_host *h, FILE *f);

/* What the host has, as far as the sum of the sandboxes is concerned. */
struct cp_host_res {
    uint64_t pid_max;   /* the smaller of kernel.pid_max and kernel.threads-max */
    uint64_t mem_total; /* MemTotal, bytes */
    uint64_t file_max;  /* fs.file-max */
    uint64_t disk_free; /* bytes free (for root) on the state directory's file system */
    uint64_t nofile;    /* airlockd's RLIMIT_NOFILE (its soft limit; 0: unlimited) */
};
void cp_host_res_probe(const char *state_dir, struct cp_host_res *r);

/* The host keeps at least this much outside the sandboxes, whatever the configuration. */
#define CP_HOST_MIN_PIDS   1024
#define CP_HOST_MIN_MEMORY (256ull << 20)
/* What a sandbox's open files can be at most (the spec's default RLIMIT_NOFILE). */
#define CP_SANDBOX_NOFILE 4096

/* airlockd's descriptors: 2 per sandbox (its airlock-vmm's pidfd, one socket), 1 per pooled
 * network, 4 per warm airlock-vmm, and a reserve for clients, the idle connections to agents
 * (up to 1,024), the store and logs (2,048). */
#define CP_NOFILE_PER_SANDBOX 2
#define CP_NOFILE_RESERVE     2048
/* How many sandboxes airlockd's open-files limit nofile (0: unlimited, UINT64_MAX back)
 * leaves room for, after the pools of c and the reserve. */
uint64_t cp_nofile_sandboxes(const struct cp_config *c, uint64_t nofile);
/* airlockd's RLIMIT_NOFILE now (0: unlimited or unknown). */
uint64_t cp_nofile_now(void);

/* The limits of all sandboxes together (the cgroup parent's). */
struct cp_host_limits {
    uint64_t pids;   /* pids.max */
    uint64_t memory; /* memory.max, bytes */
    bool pids_auto, memory_auto;
};
/* From sandboxes.total_pids / total_memory, or (0) derived from the host: three quarters
 * of its processes (at least 2048 and at most half for the host) and seven eighths of its
 * memory (at least 1 GiB and at most half for the host). -EINVAL with the reason when a
 * configured value leaves the host less than CP_HOST_MIN_PIDS / CP_HOST_MIN_MEMORY. */
int cp_host_limits_plan(const struct cp_config *c, const struct cp_host_res *r,
                        struct cp_host_limits *out, struct al_error *err);
/* Prints the limits and, for each overcommitted resource (processes, memory, open files,
 * disk), what happens when the sandboxes use it all. kvm: the backend runs KVM guests
 * (their memory and disks cost differently). Returns the number of overcommitted ones. */
int cp_host_limits_print(const struct cp_config *c, const struct cp_host_res *r,
                         const struct cp_host_limits *l, bool kvm, FILE *f);

#endif
