/* controlplane/config: see config.h. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "cluster_db.h"
#include "common/paths.h"
#include "record.h"
#include "vswitch/vswitch.h"
#include "warm.h"

#define F(m) offsetof(struct cp_config, m)

static const char *const cfg__levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const cfg__formats[] = {"auto", "text", "json", NULL};
static const char *const cfg__backends[] = {"auto", "jail", "kvm", "test", NULL};
static const char *const cfg__shutdown[] = {"kill", "keep", NULL};
static const char *const cfg__tri[] = {"auto", "on", "off", NULL};
static const char *const cfg__roles[] = {"standalone", "node", "gateway", NULL};

const struct al_cfg_field cp_config_fields[] = {
    {.key = "listen",
     .type = AL_CFG_STR,
     .offset = F(listen),
     .def = "127.0.0.1:3000",
     .env = "AIRLOCK_LISTEN",
     .help = "address of the E2B API (HOST:PORT; --listen)"},
    {.key = "state_dir",
     .type = AL_CFG_STR,
     .offset = F(state_dir),
     .def = AL_DEFAULT_STATE_DIR,
     .env = "AIRLOCK_STATE_DIR",
     .help = "the state directory (--state-dir)"},
    {.key = "api.sandbox_url",
     .type = AL_CFG_STR,
     .offset = F(sandbox_url),
     .help = "URL printed as E2B_SANDBOX_URL (default: the API's own URL)"},
    {.key = "api.domain",
     .type = AL_CFG_STR,
     .offset = F(domain),
     .help = "\"domain\" returned with sandboxes (default: null)"},
    {.key = "log.level",
     .type = AL_CFG_ENUM,
     .offset = F(log_level),
     .def = "info",
     .env = "AIRLOCK_LOG_LEVEL",
     .choices = cfg__levels,
     .help = "log threshold"},
    {.key = "log.format",
     .type = AL_CFG_ENUM,
     .offset = F(log_format),
     .def = "auto",
     .env = "AIRLOCK_LOG_FORMAT",
     .choices = cfg__formats,
     .help = "text on a terminal, JSON lines otherwise (auto)"},

    {.key = "sandboxes.backend",
     .type = AL_CFG_ENUM,
     .offset = F(backend),
     .def = "auto",
     .env = "AIRLOCK_BACKEND",
     .choices = cfg__backends,
     .help = "auto: kvm when /dev/kvm exists and `airlock-vmm --probe-kvm` boots the guest "
             "kernel, else jail; kvm: refuse to start unless the probe passes; jail; test = the "
             "agent as a plain host process, NO ISOLATION, for tests only"},
    {.key = "sandboxes.kvm_kernel",
     .type = AL_CFG_STR,
     .offset = F(kvm_kernel),
     .env = "AIRLOCK_KVM_KERNEL",
     .help = "kvm: the guest kernel (bzImage) of sandboxes and of the probe (default: "
             "airlock-vmm's, /usr/lib/airlock/kvm/bzImage)"},
    {.key = "sandboxes.kvm_probe_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(kvm_probe_timeout_ms),
     .def = "5s",
     .min = 100,
     .max = 120000,
     .help = "how long the KVM probe may take to boot the guest kernel to its console (the "
             "probe is killed 5 s after that)"},
    {.key = "sandboxes.default_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(default_timeout_ms),
     .def = "300s",
     .min = 1000,
     .max = 30LL * 24 * 3600 * 1000,
     .help = "lifetime of a sandbox whose create request names none"},
    {.key = "sandboxes.max_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(max_timeout_ms),
     .def = "24h",
     .min = 1000,
     .max = 365LL * 24 * 3600 * 1000,
     .help = "longest timeout a client may ask for (a longer one is a 400)"},
    {.key = "sandboxes.cpu_count",
     .type = AL_CFG_INT,
     .offset = F(cpu_count),
     .def = "2",
     .min = 1,
     .max = 256,
     .help = "CPUs of a sandbox (quota)"},
    {.key = "sandboxes.memory",
     .type = AL_CFG_SIZE,
     .offset = F(memory_bytes),
     .def = "512MiB",
     .min = 16 << 20,
     .max = 1LL << 40,
     .help = "memory limit of a sandbox"},
    {.key = "sandboxes.disk",
     .type = AL_CFG_SIZE,
     .offset = F(disk_bytes),
     .def = "512MiB",
     .min = 1 << 20,
     .max = 1LL << 42,
     .help = "size of a sandbox's writable layer (jail: a tmpfs counted in its memory)"},
    {.key = "sandboxes.pids",
     .type = AL_CFG_INT,
     .offset = F(pids),
     .def = "1024",
     .min = 8,
     .max = 1 << 22,
     .help = "process limit of a sandbox"},
    {.key = "sandboxes.max",
     .type = AL_CFG_INT,
     .offset = F(max_sandboxes),
     .def = "1000",
     .min = 1,
     .max = 100000,
     .help = "sandboxes alive at once (creates beyond: 429)"},
    {.key = "sandboxes.total_pids",
     .type = AL_CFG_INT,
     .offset = F(total_pids),
     .def = "0",
     .min = 0,
     .max = 1 << 22,
     .help = "processes of all sandboxes together (pids.max of sandboxes.cgroup_parent); 0: "
             "three quarters of the smaller of kernel.pid_max and kernel.threads-max, the host "
             "keeping the rest (at least 2048, at most half); at least 1024 always stay for "
             "the host"},
    {.key = "sandboxes.total_memory",
     .type = AL_CFG_SIZE,
     .offset = F(total_memory_bytes),
     .def = "0",
     .min = 0,
     .max = 1LL << 50,
     .help = "memory of all sandboxes together (memory limit of sandboxes.cgroup_parent); 0: "
             "seven eighths of the host's memory, the host keeping the rest (at least 1 GiB, "
             "at most half); at least 256 MiB always stay for the host"},
    {.key = "sandboxes.max_creating",
     .type = AL_CFG_INT,
     .offset = F(max_creating),
     .def = "64",
     .min = 1,
     .max = 10000,
     .help = "creations in flight at once (beyond: 429)"},
    {.key = "sandboxes.max_fork",
     .type = AL_CFG_INT,
     .offset = F(max_fork),
     .def = "100",
     .min = 1,
     .max = 10000,
     .help = "copies one fork may ask for (POST /sandboxes/{id}/fork count; beyond: 400)"},
    {.key = "sandboxes.start_concurrency",
     .type = AL_CFG_INT,
     .offset = F(start_concurrency),
     .def = "0",
     .min = 0,
     .max = 10000,
     .help = "sandboxes starting at once (their airlock-vmm until the agent is healthy); "
             "the other creations wait their turn, oldest request first (0: four per CPU)"},
    {.key = "sandboxes.start_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(start_timeout_ms),
     .def = "30s",
     .min = 100,
     .max = 600000,
     .help = "how long a sandbox may take to answer /health"},
    {.key = "sandboxes.ready_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(ready_timeout_ms),
     .def = "50s",
     .min = 100,
     .max = 600000,
     .help = "how long a template's readyCmd may take to succeed once the agent is healthy "
             "(the creation fails after it; the SDK gives up on a creation after 60 s)"},
    {.key = "sandboxes.log_max",
     .type = AL_CFG_SIZE,
     .offset = F(log_max_bytes),
     .def = "1MiB",
     .min = 4096,
     .max = 1LL << 30,
     .help = "agent and console output kept per sandbox"},
    {.key = "sandboxes.metrics_interval",
     .type = AL_CFG_DURATION,
     .offset = F(metrics_interval_ms),
     .def = "5s",
     .min = 1000,
     .max = 3600000,
     .help = "how often CPU/memory/disk of running sandboxes are sampled"},
    {.key = "sandboxes.on_shutdown",
     .type = AL_CFG_ENUM,
     .offset = F(on_shutdown),
     .def = "kill",
     .choices = cfg__shutdown,
     .help = "on SIGTERM: kill every sandbox and stop the helpers (kill), or leave sandboxes "
             "and helpers running for the next airlockd to re-adopt (keep)"},
    {.key = "sandboxes.cgroup_parent",
     .type = AL_CFG_STR,
     .offset = F(cgroup_parent),
     .def = "airlock",
     .help = "jail: cgroup under which sandboxes are placed (one per airlockd instance: the "
             "sweep reclaims what it finds there)"},
    {.key = "sandboxes.runtime_tmpfs",
     .type = AL_CFG_BOOL,
     .offset = F(runtime_tmpfs),
     .def = "true",
     .help = "keep <state>/sandboxes (sockets, locks, logs of live sandboxes) on a tmpfs: "
             "cheaper than a disk file system under churn"},
    {.key = "sandboxes.warm_pool",
     .type = AL_CFG_INT,
     .offset = F(warm_pool),
     .def = "64",
     .min = 0,
     .max = 256,
     .help = "airlock-vmm processes kept started and waiting for a spec (faster creates)"},
    {.key = "sandboxes.refill_quiet",
     .type = AL_CFG_DURATION,
     .offset = F(refill_quiet_ms),
     .def = "20ms",
     .min = 0,
     .max = 10000,
     .help = "the pools (networks, airlock-vmm processes, warm sandboxes) refill once no "
             "creation has been in flight for this long, so that creations one after the other "
             "do not share the CPU with the replacements of the ones before; a pool below half "
             "its size refills as soon as none is in flight (0: always then)"},
    {.key = "sandboxes.warm.min",
     .type = AL_CFG_INT,
     .offset = F(warm_min),
     .def = "0",
     .min = 0,
     .max = 4096,
     .help = "warm sandboxes (started, without identity or egress, claimed by creations) each "
             "template keeps at least (templates not in sandboxes.warm.templates; 0: none)"},
    {.key = "sandboxes.warm.max",
     .type = AL_CFG_INT,
     .offset = F(warm_max),
     .def = "0",
     .min = 0,
     .max = 4096,
     .help = "and at most, as the demand seen asks (the largest burst of its creations within "
             "sandboxes.warm.window)"},
    {.key = "sandboxes.warm.templates",
     .type = AL_CFG_STRLIST,
     .offset = F(warm_templates),
     .help = "per template, \"NAME=MIN..MAX\" or \"NAME=N\" (MIN = MAX = N), over the two above"},
    {.key = "sandboxes.warm.memory",
     .type = AL_CFG_SIZE,
     .offset = F(warm_memory_bytes),
     .def = "1GiB",
     .min = 0,
     .max = 1LL << 42,
     .help = "host memory all warm sandboxes together may hold (their cgroups' use plus 1 MiB "
             "each for airlock-vmm and the network); a start that would pass it waits"},
    {.key = "sandboxes.warm.window",
     .type = AL_CFG_DURATION,
     .offset = F(warm_window_ms),
     .def = "10m",
     .min = 1000,
     .max = 86400000,
     .help = "how long a burst of creations keeps a template's pool above its minimum"},
    {.key = "sandboxes.uid_base",
     .type = AL_CFG_INT,
     .offset = F(uid_base),
     .def = "0",
     .min = 0,
     .max = 0xfffeffffLL,
     .help = "jail: first host uid of sandboxes (0 = default)"},
    {.key = "sandboxes.uid_slots",
     .type = AL_CFG_INT,
     .offset = F(uid_slots),
     .def = "0",
     .min = 0,
     .max = 65535,
     .help = "jail: uid ranges available to sandboxes (0 = default)"},

    {.key = "policies.dir",
     .type = AL_CFG_STR,
     .offset = F(policies_dir),
     .help = "policies directory (default <state>/policies)"},
    {.key = "policies.default",
     .type = AL_CFG_STR,
     .offset = F(default_policy),
     .def = "default",
     .help = "policy of sandboxes that name none"},
    {.key = "templates.dir",
     .type = AL_CFG_STR,
     .offset = F(templates_dir),
     .help = "templates directory (default <state>/templates)"},
    {.key = "templates.defaults",
     .type = AL_CFG_STRLIST,
     .offset = F(default_templates),
     .def = "base,code-interpreter-v1",
     .help = "templates that must exist"},
    {.key = "templates.build",
     .type = AL_CFG_ENUM,
     .offset = F(build_templates),
     .def = "auto",
     .choices = cfg__tri,
     .help = "build missing default templates at start (auto: when the builder is present)"},
    {.key = "templates.builder",
     .type = AL_CFG_STR,
     .offset = F(template_builder),
     .help = "template build script (default: deploy/templates/build of this tree)"},
    {.key = "templates.registries",
     .type = AL_CFG_STRLIST,
     .offset = F(registries),
     .help = "registries images may be pulled from (host[:port], docker.io; none by default)"},
    {.key = "templates.insecure_registries",
     .type = AL_CFG_STRLIST,
     .offset = F(insecure_registries),
     .help = "of those, the ones spoken to over plain HTTP"},
    {.key = "templates.registry_ca",
     .type = AL_CFG_STR,
     .offset = F(registry_ca),
     .help = "PEM bundle of the roots registries are verified with (default: the system's)"},
    {.key = "templates.cache_dir",
     .type = AL_CFG_STR,
     .offset = F(image_cache_dir),
     .help = "blob cache of pulled images (default <state>/cache/oci)"},
    {.key = "templates.pull_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(pull_timeout_ms),
     .def = "1h",
     .min = 1000,
     .max = 86400000,
     .help = "longest pull of an image"},
    {.key = "templates.max_image_size",
     .type = AL_CFG_SIZE,
     .offset = F(max_image_bytes),
     .def = "16GiB",
     .min = 1,
     .max = 1LL << 50,
     .help = "compressed layers of an image, all together"},
    {.key = "templates.max_unpacked_size",
     .type = AL_CFG_SIZE,
     .offset = F(max_unpacked_bytes),
     .def = "32GiB",
     .min = 1,
     .max = 1LL << 50,
     .help = "file data of an image's root filesystem"},
    {.key = "templates.max_entries",
     .type = AL_CFG_INT,
     .offset = F(max_image_entries),
     .def = "1000000",
     .min = 1,
     .max = 100000000,
     .help = "files, directories and links of an image, all layers together"},
    {.key = "templates.max_upload_size",
     .type = AL_CFG_SIZE,
     .offset = F(max_upload_bytes),
     .def = "1GiB",
     .min = 1,
     .max = 1LL << 40,
     .help = "one archive of a COPY step's files, as the SDK uploads it (compressed)"},
    {.key = "volumes.size",
     .type = AL_CFG_SIZE,
     .offset = F(volume_bytes),
     .def = "1GiB",
     .min = 16LL << 20,
     .max = 1LL << 44,
     .help = "the quota of a volume created without \"sizeMB\" (Volume.create): its file "
             "system's size, a whole number of MiB"},
    {.key = "volumes.max_size",
     .type = AL_CFG_SIZE,
     .offset = F(volume_max_bytes),
     .def = "64GiB",
     .min = 16LL << 20,
     .max = 1LL << 44,
     .help = "the largest quota a volume creation may ask for (\"sizeMB\"); keep it below the "
             "free space of the state directory's file system"},
    {.key = "volumes.max",
     .type = AL_CFG_INT,
     .offset = F(max_volumes),
     .def = "100",
     .min = 0,
     .max = 100000,
     .help = "volumes one API key may own"},
    {.key = "snapshots.keep_per_sandbox",
     .type = AL_CFG_INT,
     .offset = F(snap_keep_per_sandbox),
     .def = "0",
     .min = 0,
     .max = 1000000,
     .help = "snapshots kept of one sandbox: a new one deletes its oldest beyond this (0: no "
             "bound)"},
    {.key = "snapshots.keep_per_key",
     .type = AL_CFG_INT,
     .offset = F(snap_keep_per_key),
     .def = "0",
     .min = 0,
     .max = 10000000,
     .help = "snapshots kept of one API key: a new one deletes the key's oldest beyond this "
             "(0: no bound)"},
    {.key = "snapshots.max_age",
     .type = AL_CFG_DURATION,
     .offset = F(snap_max_age_ms),
     .def = "0",
     .min = 0,
     .max = 36500LL * 86400000,
     .help = "snapshots older than this are deleted (0: never by age)"},
    {.key = "snapshots.quota_per_key",
     .type = AL_CFG_SIZE,
     .offset = F(snap_quota_per_key),
     .def = "0",
     .min = 0,
     .max = 1LL << 50,
     .help = "bytes of one API key's snapshots together: a snapshot that would go beyond is "
             "refused (507) and nothing of it kept (0: no bound)"},
    {.key = "templates.cache_max",
     .type = AL_CFG_SIZE,
     .offset = F(cache_max),
     .def = "32GiB",
     .min = 0,
     .max = 1LL << 50,
     .help = "the blob cache and the RUN steps' layer cache together, least recently used "
             "removed first once no build runs (never what an existing template was made "
             "from)"},
    {.key = "templates.build_policy",
     .type = AL_CFG_STR,
     .offset = F(build_policy),
     .def = "deny-all",
     .help = "egress policy of the sandboxes RUN steps of template builds run in"},
    {.key = "templates.step_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(step_timeout_ms),
     .def = "30m",
     .min = 1000,
     .max = 86400000,
     .help = "longest RUN step of a template build (its sandbox is torn down then)"},
    {.key = "templates.max_step_output",
     .type = AL_CFG_SIZE,
     .offset = F(max_step_output),
     .def = "1MiB",
     .min = 1024,
     .max = 1LL << 30,
     .help = "output of one RUN step kept in the build log (the rest is counted, not kept)"},
    {.key = "templates.max_builds",
     .type = AL_CFG_INT,
     .offset = F(max_builds),
     .def = "2",
     .min = 1,
     .max = 64,
     .help = "template builds airlockd runs at once (each pulls and unpacks an image)"},

    {.key = "at_rest.encrypt",
     .type = AL_CFG_ENUM,
     .offset = F(at_rest_encrypt),
     .def = "auto",
     .choices = cfg__tri,
     .help = "encrypt what sandboxes wrote that airlockd keeps on disk (<state>/snapshots, "
             "<state>/paused, <state>/volumes) at rest by their file system (fscrypt): auto = "
             "where the file system can (else say why at start), on = refuse to start unless "
             "all three are, off = never encrypt a new one (an encrypted one is still "
             "unlocked)"},
    {.key = "at_rest.key_file",
     .type = AL_CFG_STR,
     .offset = F(at_rest_key_file),
     .help = "the one key the three are encrypted with (64 bytes, made with the first; default "
             "<state>/at_rest.key; an absolute path, never inside one of them)"},
    {.key = "network.mode",
     .type = AL_CFG_ENUM,
     .offset = F(network),
     .def = "auto",
     .choices = cfg__tri,
     .help = "the vswitch (on); off = sandboxes have loopback only (no egress at all)"},
    {.key = "network.range",
     .type = AL_CFG_STR,
     .offset = F(net_range),
     .def = "10.200.0.0/16",
     .help = "addresses of sandbox networks (IPv4 CIDR)"},
    {.key = "network.prefix_len",
     .type = AL_CFG_INT,
     .offset = F(net_prefix_len),
     .def = "30",
     .min = 30,
     .max = 31,
     .help = "per-sandbox subnet"},
    {.key = "network.ifname_prefix",
     .type = AL_CFG_STR,
     .offset = F(net_ifname_prefix),
     .def = "alsb",
     .help = "host-side interface names (reserved for the switch)"},
    {.key = "network.pool_size",
     .type = AL_CFG_INT,
     .offset = F(net_pool_size),
     .def = "128",
     .min = 0,
     .max = 4096,
     .help = "sandbox networks kept ready"},
    {.key = "network.max_interfaces",
     .type = AL_CFG_INT,
     .offset = F(net_max_ifaces),
     .def = "16384",
     .min = 1,
     .max = VSWITCH_MAX_IFACES_LIMIT,
     .help = "entries of the vswitch's interface table: the most sandbox networks at once, "
             "pooled ones included (network.range bounds them too); fixed when the switch is "
             "first created: a change needs `airlock vswitch teardown`, which ends every "
             "sandbox"},

    {.key = "audit.allow_rate",
     .type = AL_CFG_INT,
     .offset = F(audit_allow_rate),
     .def = "50",
     .min = 0,
     .max = 1000000,
     .help = "allowed decisions of one sandbox written one by one per second; beyond, counted "
             "into aggregate records (0: every one)"},
    {.key = "audit.allow_burst",
     .type = AL_CFG_INT,
     .offset = F(audit_allow_burst),
     .def = "200",
     .min = 1,
     .max = 4000000,
     .help = "... of which at once"},
    {.key = "audit.deny_rate",
     .type = AL_CFG_INT,
     .offset = F(audit_deny_rate),
     .def = "100",
     .min = 0,
     .max = 1000000,
     .help = "denials of one sandbox written one by one per second (0: every one)"},
    {.key = "audit.deny_burst",
     .type = AL_CFG_INT,
     .offset = F(audit_deny_burst),
     .def = "400",
     .min = 1,
     .max = 4000000,
     .help = "... of which at once"},
    {.key = "audit.aggregate_interval",
     .type = AL_CFG_DURATION,
     .offset = F(audit_aggregate_ms),
     .def = "1s",
     .min = 1000,
     .max = 3600000,
     .help = "what one aggregate record covers"},
    {.key = "audit.rotate_size",
     .type = AL_CFG_SIZE,
     .offset = F(audit_rotate_bytes),
     .def = "64MiB",
     .min = 4096,
     .max = 1LL << 40,
     .help = "a new audit log file beyond this size"},
    {.key = "audit.rotate_age",
     .type = AL_CFG_DURATION,
     .offset = F(audit_rotate_ms),
     .def = "1d",
     .min = 0,
     .max = 3650LL * 86400000,
     .help = "... or this age (0: never by age)"},
    {.key = "audit.retain_size",
     .type = AL_CFG_SIZE,
     .offset = F(audit_retain_bytes),
     .def = "4GiB",
     .min = 0,
     .max = 1LL << 50,
     .help = "the oldest audit log files are deleted while all are larger (0: no bound; at "
             "least twice rotate_size)"},
    {.key = "audit.retain_age",
     .type = AL_CFG_DURATION,
     .offset = F(audit_retain_ms),
     .def = "90d",
     .min = 0,
     .max = 36500LL * 86400000,
     .help = "audit log files last written longer ago are deleted (0: never by age)"},
    {.key = "audit.retain_files",
     .type = AL_CFG_INT,
     .offset = F(audit_retain_files),
     .def = "0",
     .min = 0,
     .max = 1000000,
     .help = "at most this many audit log files (0: no bound)"},

    {.key = "events.retention",
     .type = AL_CFG_DURATION,
     .offset = F(events_retention_ms),
     .def = "7d",
     .min = 0,
     .max = 36500LL * 86400000,
     .help = "sandbox lifecycle events (GET /events/sandboxes) older than this are deleted "
             "(0: never by age)"},
    {.key = "events.max",
     .type = AL_CFG_INT,
     .offset = F(events_max),
     .def = "100000",
     .min = 0,
     .max = 100000000,
     .help = "at most this many lifecycle events are kept, the oldest deleted first (0: no "
             "bound)"},

    {.key = "webhooks.allow_http",
     .type = AL_CFG_BOOL,
     .offset = F(webhooks_allow_http),
     .def = "false",
     .help = "webhook URLs may be http:// (else https:// only)"},
    {.key = "webhooks.allow_private",
     .type = AL_CFG_BOOL,
     .offset = F(webhooks_allow_private),
     .def = "false",
     .help = "webhooks may target loopback, private, link-local and other internal addresses"},
    {.key = "webhooks.ca_file",
     .type = AL_CFG_STR,
     .offset = F(webhooks_ca_file),
     .help = "PEM bundle of the roots a webhook's https certificate must chain to (empty: "
             "the system's)"},
    {.key = "webhooks.timeout",
     .type = AL_CFG_DURATION,
     .offset = F(webhooks_timeout_ms),
     .def = "10s",
     .min = 100,
     .max = 300000,
     .help = "one delivery attempt, from resolving its name to the end of the answer"},
    {.key = "webhooks.attempts",
     .type = AL_CFG_INT,
     .offset = F(webhooks_attempts),
     .def = "5",
     .min = 1,
     .max = 100,
     .help = "attempts per delivery (the first and the retries)"},
    {.key = "webhooks.backoff",
     .type = AL_CFG_DURATION,
     .offset = F(webhooks_backoff_ms),
     .def = "2s",
     .min = 1,
     .max = 3600000,
     .help = "wait before the first retry; doubled for each further one, with jitter"},
    {.key = "webhooks.backoff_max",
     .type = AL_CFG_DURATION,
     .offset = F(webhooks_backoff_max_ms),
     .def = "5m",
     .min = 1,
     .max = 86400000,
     .help = "the longest wait between two attempts"},
    {.key = "webhooks.queue",
     .type = AL_CFG_INT,
     .offset = F(webhooks_queue),
     .def = "1000",
     .min = 1,
     .max = 1000000,
     .help = "events waiting per webhook; beyond it the oldest is dropped (counted, in its "
             "deliveries)"},
    {.key = "webhooks.history",
     .type = AL_CFG_INT,
     .offset = F(webhooks_history),
     .def = "1000",
     .min = 1,
     .max = 1000000,
     .help = "delivery attempts kept per webhook (GET /events/webhooks/{id}/deliveries)"},
    {.key = "webhooks.per_key",
     .type = AL_CFG_INT,
     .offset = F(webhooks_per_key),
     .def = "20",
     .min = 1,
     .max = 10000,
     .help = "webhooks one API key may register"},

    {.key = "console.enabled",
     .type = AL_CFG_BOOL,
     .offset = F(console_enabled),
     .def = "true",
     .help = "serve the web console at /console/ on the API listener (docs/console.md)"},
    {.key = "console.session_timeout",
     .type = AL_CFG_DURATION,
     .offset = F(console_session_ms),
     .def = "8h",
     .min = 1000,
     .max = 30LL * 86400000,
     .help = "a console sign-in lasts this long, then the key must be given again"},
    {.key = "console.secure_cookie",
     .type = AL_CFG_ENUM,
     .offset = F(console_secure_cookie),
     .def = "auto",
     .choices = cfg__tri,
     .help = "mark the console's session cookie Secure (auto: when the request came over "
             "https, as X-Forwarded-Proto from a TLS front end says)"},

    {.key = "disk.reserve",
     .type = AL_CFG_SIZE,
     .offset = F(disk_reserve_bytes),
     .def = "1GiB",
     .min = 0,
     .max = 1LL << 50,
     .help = "free space kept on the file systems of the state directory and the audit log: "
             "below it new sandboxes are refused (503), running ones are served until the "
             "disk is full (0: no reserve)"},
    {.key = "disk.check_interval",
     .type = AL_CFG_DURATION,
     .offset = F(disk_check_ms),
     .def = "1s",
     .min = 100,
     .max = 60000,
     .help = "how often the free space is checked (and at every creation)"},

    {.key = "cluster.role",
     .type = AL_CFG_ENUM,
     .offset = F(cluster_role),
     .def = "standalone",
     .env = "AIRLOCK_CLUSTER_ROLE",
     .choices = cfg__roles,
     .help = "standalone: one airlockd, no cluster database; node: runs sandboxes and "
             "registers in cluster.database with a lease it renews; gateway: reads the "
             "E2B API that places sandboxes on nodes and routes every request to the node "
             "that owns the sandbox (docs/cluster.md)"},
    {.key = "cluster.database",
     .type = AL_CFG_STR,
     .offset = F(cluster_database),
     .env = "AIRLOCK_CLUSTER_DATABASE",
     .help = "the cluster's PostgreSQL, as a libpq connection string or URI (needed by node "
             "and gateway); keep the password out of it: libpq reads PGPASSFILE or "
             "PGPASSWORD. airlockd logs only its host, port, database and user"},
    {.key = "cluster.node_id",
     .type = AL_CFG_STR,
     .offset = F(cluster_node_id),
     .env = "AIRLOCK_CLUSTER_NODE_ID",
     .help = "this node's id in the cluster (default: the host name, lowercased; 1..63 of "
             "a-z 0-9 . -)"},
    {.key = "cluster.advertise",
     .type = AL_CFG_STR,
     .offset = F(cluster_advertise),
     .env = "AIRLOCK_CLUSTER_ADVERTISE",
     .help = "HOST:PORT where gateways reach this node's API (default: the listen address; "
             "required when that is 0.0.0.0 or ::)"},
    {.key = "cluster.token_file",
     .type = AL_CFG_STR,
     .offset = F(cluster_token_file),
     .help = "a file (mode 0600) holding the cluster token, the same on every gateway and node: "
             "gateways send it with each request, nodes refuse API requests over TCP without "
             "it (needed by node and gateway; AIRLOCK_CLUSTER_TOKEN, the token itself, "
             "overrides it)"},
    {.key = "cluster.tls.ca_file",
     .type = AL_CFG_STR,
     .offset = F(cluster_tls_ca),
     .help = "mutual TLS between gateways and nodes: the cluster CA's certificate (PEM); "
             "with cluster.tls.cert_file and key_file, on every gateway and node "
             "(docs/cluster.md, \"Mutual TLS\")"},
    {.key = "cluster.tls.cert_file",
     .type = AL_CFG_STR,
     .offset = F(cluster_tls_cert),
     .help = "this airlockd's certificate from the cluster CA (PEM): a node's names its "
             "cluster.node_id and is for serverAuth, a gateway's is for clientAuth"},
    {.key = "cluster.tls.key_file",
     .type = AL_CFG_STR,
     .offset = F(cluster_tls_key),
     .help = "the key of cluster.tls.cert_file (PEM, not encrypted, mode 0600)"},
    {.key = "cluster.lease",
     .type = AL_CFG_DURATION,
     .offset = F(cluster_lease_ms),
     .def = "15s",
     .min = 1000,
     .max = 600000,
     .help = "how long a node's registration stays valid without a heartbeat (judged by the "
             "database's clock); a node silent for longer counts as gone"},
    {.key = "cluster.heartbeat_interval",
     .type = AL_CFG_DURATION,
     .offset = F(cluster_heartbeat_ms),
     .def = "0",
     .min = 0,
     .max = 300000,
     .help = "how often a node renews its lease, and retries an unreachable database (0: a "
             "third of cluster.lease); less than cluster.lease"},

    {.key = "egress.mode",
     .type = AL_CFG_ENUM,
     .offset = F(egress),
     .def = "auto",
     .choices = cfg__tri,
     .help = "run airlock-egress (auto: whenever the network is on)"},
    {.key = "egress.args",
     .type = AL_CFG_STRLIST,
     .offset = F(egress_args),
     .help = "extra arguments of airlock-egress"},
    {.key = "vault.mode",
     .type = AL_CFG_ENUM,
     .offset = F(vault),
     .def = "auto",
     .choices = cfg__tri,
     .help = "run airlock-vault (auto: when it is installed)"},
    {.key = "vault.args",
     .type = AL_CFG_STRLIST,
     .offset = F(vault_args),
     .help = "extra arguments of airlock-vault (when set, airlockd adds no --egress-user, "
             "--egress-exe, --airlockd-user: give the roles here)"},
    {.key = "bin_dir",
     .type = AL_CFG_STR,
     .offset = F(bin_dir),
     .help = "where airlock-vmm, airlock-egress, airlock-vault live (default: next to airlockd)"},
    {.key = "agent_dir",
     .type = AL_CFG_STR,
     .offset = F(agent_dir),
     .help = "agent directory mounted read-only at /.airlock (default: airlock-vmm's)"},
    {.key = NULL},
};

size_t cp_config_egress_audit_args(const struct cp_config *c, char **argv, size_t max, char *buf,
                                   size_t buflen)
{
    const struct {
        const char *opt;
        uint64_t v;
        const char *unit;
    } a[] = {
        {"--audit-allow-rate", (uint64_t)c->audit_allow_rate, ""},
        {"--audit-allow-burst", (uint64_t)c->audit_allow_burst, ""},
        {"--audit-deny-rate", (uint64_t)c->audit_deny_rate, ""},
        {"--audit-deny-burst", (uint64_t)c->audit_deny_burst, ""},
        {"--audit-aggregate-interval", c->audit_aggregate_ms, "ms"},
        {"--audit-rotate-size", c->audit_rotate_bytes, ""},
        {"--audit-rotate-age", c->audit_rotate_ms, "ms"},
        {"--audit-retain-size", c->audit_retain_bytes, ""},
        {"--audit-retain-age", c->audit_retain_ms, "ms"},
        {"--audit-retain-files", (uint64_t)c->audit_retain_files, ""},
    };
    size_t n = 0, used = 0;
    for (size_t i = 0; i < sizeof a / sizeof a[0] && n + 1 < max; i++) {
        int w = snprintf(buf + used, buflen - used, "%s=%llu%s", a[i].opt,
                         (unsigned long long)a[i].v, a[i].unit);
        if (w < 0 || (size_t)w >= buflen - used)
            break;
        argv[n++] = buf + used;
        used += (size_t)w + 1;
    }
    return n;
}

int cp_parse_listen(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon;
    size_t hl;
    const char *h = s;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return -EINVAL;
        h = s + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen)
        return -EINVAL;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

static const char *cfg__s(const char *s)
{
    return s ? s : "";
}

int cp_config_finish(struct cp_config *c, struct al_diags *d)
{
    int rc = 0;
    if (cp_parse_listen(cfg__s(c->listen), c->listen_host, sizeof c->listen_host, &c->listen_port) <
        0)
        rc = al_diags_add(d, AL_DIAG_ERROR, "listen", 0, 0, "bad_listen",
                          "listen: \"%s\" is not HOST:PORT (e.g. 127.0.0.1:3000, [::1]:3000; "
                          "port 0 picks a free one)",
                          cfg__s(c->listen));
    const char *sd = cfg__s(c->state_dir);
    if (sd[0] != '/')
        rc = al_diags_add(d, AL_DIAG_ERROR, "state_dir", 0, 0, "bad_state_dir",
                          "state_dir: \"%s\" must be an absolute path", sd);
    if (c->policies_dir && c->policies_dir[0])
        snprintf(c->policies_path, sizeof c->policies_path, "%s", c->policies_dir);
    else
        snprintf(c->policies_path, sizeof c->policies_path, "%s/policies", sd);
    if (c->templates_dir && c->templates_dir[0])
        snprintf(c->templates_path, sizeof c->templates_path, "%s", c->templates_dir);
    else
        snprintf(c->templates_path, sizeof c->templates_path, "%s/templates", sd);
    if (c->image_cache_dir && c->image_cache_dir[0])
        snprintf(c->image_cache_path, sizeof c->image_cache_path, "%s", c->image_cache_dir);
    else
        snprintf(c->image_cache_path, sizeof c->image_cache_path, "%s/cache/oci", sd);
    if (c->bin_dir && c->bin_dir[0]) {
        snprintf(c->bin_path, sizeof c->bin_path, "%s", c->bin_dir);
    } else {
        if (al_self_dir(c->bin_path, sizeof c->bin_path) < 0)
            snprintf(c->bin_path, sizeof c->bin_path, "/usr/lib/airlock");
    }
    if (c->default_timeout_ms > c->max_timeout_ms)
        rc = al_diags_add(d, AL_DIAG_ERROR, "sandboxes.default_timeout", 0, 0, "bad_timeout",
                          "sandboxes.default_timeout is longer than sandboxes.max_timeout");
    if (c->audit_retain_bytes && c->audit_retain_bytes < 2 * c->audit_rotate_bytes)
        rc = al_diags_add(d, AL_DIAG_ERROR, "audit.retain_size", 0, 0, "bad_retention",
                          "audit.retain_size is less than twice audit.rotate_size: retention "
                          "would delete each file as soon as the next begins");
    if (c->volume_bytes % (1u << 20))
        rc = al_diags_add(d, AL_DIAG_ERROR, "volumes.size", 0, 0, "bad_volume_size",
                          "volumes.size must be a whole number of MiB (volumes are sized in MiB, "
                          "E2B's \"sizeMB\"): e.g. 1GiB, 512MiB");
    if (c->volume_max_bytes % (1u << 20))
        rc = al_diags_add(d, AL_DIAG_ERROR, "volumes.max_size", 0, 0, "bad_volume_size",
                          "volumes.max_size must be a whole number of MiB: e.g. 64GiB");
    if (c->volume_bytes > c->volume_max_bytes)
        rc = al_diags_add(d, AL_DIAG_ERROR, "volumes.size", 0, 0, "bad_volume_size",
                          "volumes.size is above volumes.max_size: raise volumes.max_size or "
                          "lower volumes.size");
    if (c->warm_min > c->warm_max)
        rc = al_diags_add(d, AL_DIAG_ERROR, "sandboxes.warm.min", 0, 0, "bad_warm",
                          "sandboxes.warm.min (%lld) is above sandboxes.warm.max (%lld)",
                          (long long)c->warm_min, (long long)c->warm_max);
    for (size_t i = 0; i < c->warm_templates.n; i++) {
        char name[CP_TEMPLATE_MAX];
        int64_t lo, hi;
        struct al_error e = {0};
        if (cp_warm_parse_entry(c->warm_templates.v[i], name, sizeof name, &lo, &hi, &e))
            rc = al_diags_add(d, AL_DIAG_ERROR, "sandboxes.warm.templates", 0, 0, "bad_warm", "%s",
                              al_error_str(&e));
    }
    bool has_db = c->cluster_database && c->cluster_database[0];
    if (c->cluster_role != CP_CLUSTER_STANDALONE && !has_db)
        rc = al_diags_add(d, AL_DIAG_ERROR, "cluster.database", 0, 0, "bad_cluster",
                          "cluster.role %s needs cluster.database (the cluster's PostgreSQL, "
                          "e.g. \"host=db.internal dbname=airlock user=airlock\")",
                          c->cluster_role == CP_CLUSTER_NODE ? "node" : "gateway");
    const char *tok_env = getenv("AIRLOCK_CLUSTER_TOKEN");
    int n_tls = (c->cluster_tls_ca && c->cluster_tls_ca[0]) +
                (c->cluster_tls_cert && c->cluster_tls_cert[0]) +
                (c->cluster_tls_key && c->cluster_tls_key[0]);
    if (n_tls && n_tls < 3)
        rc = al_diags_add(d, AL_DIAG_ERROR, "cluster.tls", 0, 0, "bad_cluster",
                          "cluster.tls needs all of ca_file, cert_file and key_file (the "
                          "cluster CA, this airlockd's certificate and its key)");
    if (n_tls && c->cluster_role == CP_CLUSTER_STANDALONE)
        rc = al_diags_add(d, AL_DIAG_ERROR, "cluster.tls", 0, 0, "bad_cluster",
                          "cluster.tls is for gateways and nodes: set cluster.role, or remove "
                          "cluster.tls");
    if (c->cluster_role != CP_CLUSTER_STANDALONE && !n_tls && (!tok_env || !tok_env[0]) &&
        (!c->cluster_token_file || !c->cluster_token_file[0]))
        rc = al_diags_add(d, AL_DIAG_ERROR, "cluster.token_file", 0, 0, "bad_cluster",
                          "cluster.role %s needs the cluster token: cluster.token_file (a file "
                          "of mode 0600 with at least %d characters, the same on every gateway "
                          "and node) or AIRLOCK_CLUSTER_TOKEN, or mutual TLS (cluster.tls)",
                          c->cluster_role == CP_CLUSTER_NODE ? "node" : "gateway",
                          CP_CLUSTER_TOKEN_MIN);
    if (c->cluster_heartbeat_ms && c->cluster_heartbeat_ms >= c->cluster_lease_ms)
        rc = al_diags_add(d, AL_DIAG_ERROR, "cluster.heartbeat_interval", 0, 0, "bad_cluster",
                          "cluster.heartbeat_interval must be shorter than cluster.lease (a "
                          "third of it leaves room for two missed heartbeats)");
    if (c->cluster_node_id && c->cluster_node_id[0] &&
        !cp_cluster_node_id_valid(c->cluster_node_id))
        rc = al_diags_add(d, AL_DIAG_ERROR, "cluster.node_id", 0, 0, "bad_cluster",
                          "cluster.node_id \"%s\" is not valid: 1..63 of a-z 0-9 . -, starting "
                          "with a letter or digit",
                          c->cluster_node_id);
    if (c->cluster_role == CP_CLUSTER_NODE && (!c->cluster_advertise || !c->cluster_advertise[0]) &&
        (strcmp(c->listen_host, "0.0.0.0") == 0 || strcmp(c->listen_host, "::") == 0))
        rc = al_diags_add(d, AL_DIAG_ERROR, "cluster.advertise", 0, 0, "bad_cluster",
                          "a node listening on every address (%s) must say where gateways "
                          "reach it: set cluster.advertise (HOST:PORT)",
                          c->listen_host);
    if (!c->default_policy || !c->default_policy[0])
        rc = al_diags_add(d, AL_DIAG_ERROR, "policies.default", 0, 0, "bad_policy",
                          "policies.default must name a policy (e.g. default, deny-all)");
    if (!c->build_policy || !c->build_policy[0] || strchr(c->build_policy, '/') ||
        c->build_policy[0] == '.')
        rc = al_diags_add(d, AL_DIAG_ERROR, "templates.build_policy", 0, 0, "bad_policy",
                          "templates.build_policy must name a policy of policies.dir (e.g. "
                          "deny-all, pypi)");
    return rc < 0 ? -EINVAL : 0;
}

int cp_config_load(struct cp_config *c, const char *file, const char *listen, const char *state_dir,
                   FILE *f)
{
    memset(c, 0, sizeof *c);
    struct al_diags d = AL_DIAGS_INIT;
    const char *path = file;
    unsigned flags = 0;
    if (!path) {
        path = CP_DEFAULT_CONFIG_FILE;
        flags = AL_CFG_FILE_OPTIONAL;
    }
    int rc = al_config_load(cp_config_fields, c, path, flags, &d);
    struct stat st;
    if (!rc && stat(path, &st) == 0)
        snprintf(c->config_file, sizeof c->config_file, "%s", path);
    if (!rc && listen)
        rc = al_config_set(cp_config_fields, c, "listen", listen, "--listen", &d);
    if (!rc && state_dir)
        rc = al_config_set(cp_config_fields, c, "state_dir", state_dir, "--state-dir", &d);
    if (!rc)
        rc = cp_config_finish(c, &d);
    if (d.n)
        al_diags_print(&d, f, false);
    al_diags_free(&d);
    return rc;
}

void cp_config_free(struct cp_config *c)
{
    al_config_free(cp_config_fields, c);
}
