/* vmm/spec: the sandbox spec airlock-vmm is started with, and the template it names.
 *
 * Owns: parsing and strict validation of the spec JSON (unknown keys are errors, every
 * error names the field and says what is allowed), reading the template's template.json,
 * and composing the init object the agent reads on AIRLOCK_AGENT_INIT_FD.
 * The schema is documented in vmm/README.md ("Spec"). Backend-neutral: the jail backend
 * reads the "jail" section, the KVM backend will read its own.
 *
 * The access token is a secret: it is only copied into the init object, which is wiped
 * when freed (airlock-vmm installs zeroing allocators for jansson).
 */
#ifndef AIRLOCK_VMM_SPEC_H
#define AIRLOCK_VMM_SPEC_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define VMM_ID_MAX        63
#define VMM_MAX_BINDS     16
#define VMM_MAX_DNS       3
#define VMM_SPEC_MAX_SIZE (1u << 20)   /* the whole spec */
#define VMM_INIT_MAX_SIZE (256u << 10) /* the init object handed to the agent */
#define VMM_CA_PEM_MAX    (64 * 1024)  /* the sandbox CA (the agent's own limit) */
/* Resources a spec gets when it names none. */
#define VMM_DEFAULT_CPUS       2
#define VMM_DEFAULT_MEMORY_MIB 512
#define VMM_DEFAULT_PIDS       1024

enum vmm_net_mode {
    VMM_NET_NONE = 0, /* a fresh network namespace with only loopback (up) */
    VMM_NET_NETNS,    /* join a prepared namespace (the vswitch's), by path */
    VMM_NET_TAP,      /* kvm: a tap the vswitch made (vswitch_tap_create), inherited as an fd */
};

struct vmm_bind {
    const char *source; /* host path, absolute */
    const char *target; /* sandbox path, absolute, normalised */
    /* spec.volumes: writable and id-mapped into the sandbox's user namespace (a volume's
     * file system, controlplane/volumes.c), not a read-only tree */
    bool volume;
};

struct vmm_spec {
    json_t *root; /* owns the strings below */
    const char *id;
    const char *backend; /* "jail" (default) or "kvm" */
    const char *template_ref;
    char template_dir[PATH_MAX]; /* resolved: contains rootfs/ and template.json */
    json_t *template_json;       /* owned; NULL until vmm_spec_load_template */
    const char *template_id;     /* reported to the agent; NULL = template.json name */

    double cpus;           /* 0 = no quota */
    uint64_t memory_bytes; /* 0 = no limit */
    uint64_t disk_bytes;   /* size of the writable layer (tmpfs) */
    uint32_t pids;
    uint32_t nofile;

    enum vmm_net_mode net_mode;
    const char *netns_path;
    const char *hostname;
    const char *dns[VMM_MAX_DNS];
    size_t n_dns;
    /* tap mode (kvm): the guest configures these on its interface (through the agent's
     * init), the VMM gives it the tap. */
    int tap_fd;
    uint8_t tap_mac[6];
    bool have_tap_mac;
    const char *net_address; /* "A.B.C.D/N" */
    const char *net_gateway; /* "A.B.C.D" */

    char agent_dir[PATH_MAX]; /* host directory mounted read-only at /.airlock */
    const char *agent_path;   /* inside the sandbox */
    json_t *agent_args;       /* array of strings (borrowed) or NULL */
    json_t *agent_env;        /* object string->string (borrowed) or NULL */
    uint64_t log_max_bytes;
    uint32_t start_timeout_ms;

    json_t *env; /* borrowed; envVars given by the caller */
    const char *user;
    const char *workdir;
    const char *access_token;
    /* The sandbox's CA of the egress proxy's interception (PEM), installed by the agent in
     * the sandbox's trust stores (init "caCertPem", vmm/guest/trust.c), or NULL. */
    const char *ca_cert_pem;

    struct vmm_bind binds[VMM_MAX_BINDS];
    size_t n_binds;
    bool keep_logs;

    /* kvm backend (spec.kvm; the jail section's cgroup parent and id range also confine
     * the VMM process) */
    const char *kvm_kernel;    /* guest bzImage; NULL: $AIRLOCK_KVM_KERNEL, installed default */
    uint32_t kvm_vcpus;        /* 0: ceil(cpus), at most 16 */
    bool kvm_snapshot;         /* start by restoring the template snapshot (default true) */
    const char *kvm_restore;   /* a snapshot of this sandbox (POST /snapshot) to resume */
    const char *kvm_cache_dir; /* root images and template snapshots; NULL: <state>/kvm */

    /* jail backend */
    const char *cgroup_parent;
    uint32_t uid_base;
    uint32_t uid_slots;
    const char *jail_restore; /* a jail snapshot (POST /snapshot) whose files it starts with */
    /* A build sandbox (a template build's RUN step, controlplane/buildsb.c): root's
     * processes keep AL_BUILD_ROOT_CAPS (common/confine.h) within the user namespace. */
    bool jail_build;
};

/* Parses and validates (no filesystem access except resolving defaults). */
int vmm_spec_parse(const char *data, size_t len, struct vmm_spec *out, struct al_error *err);
/* Resolves the template directory and reads template.json. */
int vmm_spec_load_template(struct vmm_spec *s, struct al_error *err);
/* The object for AIRLOCK_AGENT_INIT_FD (new reference). Needs the template loaded. */
json_t *vmm_spec_init_object(const struct vmm_spec *s);
void vmm_spec_free(struct vmm_spec *s);

/* Helpers shared with the backends and tests. */
bool vmm_id_valid(const char *id);
/* Absolute, normalised ("/a/b"), no "." or ".." components, no "//", no trailing "/". */
bool vmm_path_normalised(const char *p);
/* Validates template.json (name, user, workdir, env, agent, build). */
int vmm_template_validate(const json_t *t, const char *where, struct al_error *err);
/* The default agent directory: $AIRLOCK_AGENT_DIR, else <dir of airlock-vmm>/../agent-root/
 * .airlock (the build tree) if it exists, else /usr/lib/airlock/agent. */
int vmm_default_agent_dir(char *out, size_t len);

#endif
