/* vmm/spec: see spec.h. */
#include "spec.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/json.h"
#include "common/paths.h"
#include "common/cleanup.h"
#include "common/util.h"

#define MIB (1024ull * 1024ull)

bool vmm_id_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > VMM_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '-' && c != '_')))
            return false;
    }
    return true;
}

bool vmm_path_normalised(const char *p)
{
    if (!p || p[0] != '/' || strlen(p) >= 256)
        return false;
    if (p[1] == '\0')
        return true;
    for (const char *c = p + 1;;) {
        const char *s = strchr(c, '/');
        size_t n = s ? (size_t)(s - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f)
                return false;
        if (!s)
            return true;
        c = s + 1;
    }
}

static bool spec__hostname_valid(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  ((c == '-' || c == '.') && i > 0 && i + 1 < n);
        if (!ok)
            return false;
    }
    return true;
}

/* An object whose values are all strings without NUL, keys valid env names. */
static int spec__check_env(const json_t *o, const char *what, struct al_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        size_t kl = strlen(k);
        bool ok = kl > 0 && kl < 256 && !(k[0] >= '0' && k[0] <= '9');
        for (size_t i = 0; ok && i < kl; i++)
            ok = (k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') ||
                 (k[i] >= '0' && k[i] <= '9') || k[i] == '_';
        if (!ok)
            return al_error_set(err, -EINVAL,
                                "%s: \"%s\" is not a valid environment variable name (letters, "
                                "digits and '_', not starting with a digit)",
                                what, k);
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
            return al_error_set(err, -EINVAL,
                                "%s: the value of \"%s\" must be a string without "
                                "NUL bytes",
                                what, k);
    }
    return 0;
}

static int spec__size_mib(const json_t *obj, const char *key, uint64_t min, uint64_t max,
                          uint64_t *out, const char *what, struct al_error *err)
{
    int64_t v;
    int rc = al_json_get_int(obj, key, false, (int64_t)min, (int64_t)max, &v, what, err);
    if (rc == 0 && json_object_get(obj, key) && !json_is_null(json_object_get(obj, key)))
        *out = (uint64_t)v * MIB;
    return rc;
}

int vmm_default_agent_dir(char *out, size_t len)
{
    const char *env = getenv("AIRLOCK_AGENT_DIR");
    if (env && *env) {
        if ((size_t)snprintf(out, len, "%s", env) >= len)
            return -ENAMETOOLONG;
        return 0;
    }
    /* The build tree puts the agent's files in <build>/agent-root/.airlock next to
     * <build>/bin/airlock-vmm; an installation in /usr/lib/airlock/agent. */
    char dir[PATH_MAX];
    if (al_self_dir(dir, sizeof dir) == 0) {
        char cand[PATH_MAX + 64], real[PATH_MAX];
        snprintf(cand, sizeof cand, "%s/../agent-root/.airlock", dir);
        if (realpath(cand, real)) {
            if ((size_t)snprintf(out, len, "%s", real) >= len)
                return -ENAMETOOLONG;
            return 0;
        }
    }
    if ((size_t)snprintf(out, len, "%s", "/usr/lib/airlock/agent") >= len)
        return -ENAMETOOLONG;
    return 0;
}

static int spec__resources(struct vmm_spec *s, json_t *r, struct al_error *err)
{
    static const char *const keys[] = {"cpus", "memory_mib", "disk_mib", "pids", "nofile", NULL};
    const char *what = "spec.resources";
    int rc = al_json_check_keys(r, keys, what, err);
    if (rc)
        return rc;
    json_t *c = json_object_get(r, "cpus");
    if (c && !json_is_null(c)) {
        if (!json_is_number(c))
            return al_error_set(err, -EINVAL, "%s: \"cpus\" must be a number (e.g. 2 or 0.5)",
                                what);
        double v = json_number_value(c);
        if (!(v >= 0.01 && v <= 1024) || isnan(v))
            return al_error_set(err, -ERANGE, "%s: \"cpus\" = %g is out of range 0.01..1024", what,
                                v);
        s->cpus = v;
    }
    if ((rc = spec__size_mib(r, "memory_mib", 16, 1u << 20, &s->memory_bytes, what, err)) ||
        (rc = spec__size_mib(r, "disk_mib", 1, 1u << 20, &s->disk_bytes, what, err)))
        return rc;
    int64_t v;
    if ((rc = al_json_get_int(r, "pids", false, 8, 1 << 22, &v, what, err)))
        return rc;
    if (json_object_get(r, "pids"))
        s->pids = (uint32_t)v;
    if ((rc = al_json_get_int(r, "nofile", false, 64, 1 << 20, &v, what, err)))
        return rc;
    if (json_object_get(r, "nofile"))
        s->nofile = (uint32_t)v;
    return 0;
}

static int spec__mac(const char *m, uint8_t out[6])
{
    unsigned v[6];
    char tail;
    if (sscanf(m, "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) !=
            6 ||
        (v[0] & 1) || strlen(m) != 17)
        return -EINVAL;
    for (int i = 0; i < 6; i++)
        out[i] = (uint8_t)v[i];
    return 0;
}

/* "A.B.C.D/N", N in 1..32 */
static bool spec__cidr4(const char *a)
{
    const char *slash = strchr(a, '/');
    char ip[INET_ADDRSTRLEN];
    unsigned char buf[4];
    if (!slash || (size_t)(slash - a) >= sizeof ip)
        return false;
    memcpy(ip, a, (size_t)(slash - a));
    ip[slash - a] = '\0';
    char *end;
    long n = strtol(slash + 1, &end, 10);
    return inet_pton(AF_INET, ip, buf) == 1 && slash[1] && !*end && n >= 1 && n <= 32;
}

static int spec__tap(struct vmm_spec *s, json_t *n, const char *what, struct al_error *err)
{
    int64_t fd;
    int rc;
    if ((rc = al_json_get_int(n, "tap_fd", true, 3, 65535, &fd, what, err)))
        return rc;
    s->tap_fd = (int)fd;
    const char *mac = NULL;
    if ((rc = al_json_get_str(n, "mac", false, &mac, what, err)))
        return rc;
    if (mac) {
        if (spec__mac(mac, s->tap_mac) < 0)
            return al_error_set(err, -EINVAL,
                                "%s: \"mac\" must be a unicast MAC aa:bb:cc:dd:ee:ff (the "
                                "guest_mac vswitch_tap_create returned), got \"%s\"",
                                what, mac);
        s->have_tap_mac = true;
    }
    if ((rc = al_json_get_str(n, "address", true, &s->net_address, what, err)) ||
        (rc = al_json_get_str(n, "gateway", false, &s->net_gateway, what, err)))
        return rc;
    if (!spec__cidr4(s->net_address))
        return al_error_set(err, -EINVAL,
                            "%s: \"address\" must be the guest's IPv4 address with its prefix "
                            "length (e.g. 10.200.0.2/30), got \"%s\"",
                            what, s->net_address);
    unsigned char buf[4];
    if (s->net_gateway && inet_pton(AF_INET, s->net_gateway, buf) != 1)
        return al_error_set(err, -EINVAL, "%s: \"gateway\" must be an IPv4 address, got \"%s\"",
                            what, s->net_gateway);
    return 0;
}

static int spec__network(struct vmm_spec *s, json_t *n, struct al_error *err)
{
    static const char *const keys[] = {"mode", "netns",   "dns",     "tap_fd",
                                       "mac",  "address", "gateway", NULL};
    const char *what = "spec.network";
    int rc = al_json_check_keys(n, keys, what, err);
    if (rc)
        return rc;
    const char *mode = "none";
    if ((rc = al_json_get_str(n, "mode", false, &mode, what, err)))
        return rc;
    static const char *const tap_keys[] = {"tap_fd", "mac", "address", "gateway"};
    if (strcmp(mode, "tap") != 0) {
        for (size_t i = 0; i < AL_ARRAY_SIZE(tap_keys); i++)
            if (json_object_get(n, tap_keys[i]))
                return al_error_set(err, -EINVAL,
                                    "%s: \"%s\" only goes with \"mode\": \"tap\" (kvm)", what,
                                    tap_keys[i]);
    }
    if (strcmp(mode, "none") == 0) {
        s->net_mode = VMM_NET_NONE;
        if (json_object_get(n, "netns"))
            return al_error_set(err, -EINVAL, "%s: \"netns\" only goes with \"mode\": \"netns\"",
                                what);
    } else if (strcmp(mode, "tap") == 0) {
        s->net_mode = VMM_NET_TAP;
        if (json_object_get(n, "netns"))
            return al_error_set(err, -EINVAL, "%s: \"netns\" only goes with \"mode\": \"netns\"",
                                what);
        if ((rc = spec__tap(s, n, what, err)))
            return rc;
    } else if (strcmp(mode, "netns") == 0) {
        s->net_mode = VMM_NET_NETNS;
        if ((rc = al_json_get_str(n, "netns", true, &s->netns_path, what, err)))
            return rc;
        if (s->netns_path[0] != '/')
            return al_error_set(err, -EINVAL,
                                "%s: \"netns\" must be an absolute path to a network namespace "
                                "(e.g. /run/netns/al-sbx-1), got \"%s\"",
                                what, s->netns_path);
    } else {
        return al_error_set(err, -EINVAL,
                            "%s: \"mode\" must be \"none\" (loopback only), \"netns\" (join a "
                            "prepared namespace; jail) or \"tap\" (a vswitch tap; kvm), got \"%s\"",
                            what, mode);
    }
    json_t *dns = NULL;
    if ((rc = al_json_get_arr(n, "dns", false, &dns, what, err)))
        return rc;
    if (dns) {
        if (json_array_size(dns) > VMM_MAX_DNS)
            return al_error_set(err, -E2BIG, "%s: at most %d \"dns\" servers", what, VMM_MAX_DNS);
        size_t i;
        json_t *d;
        json_array_foreach(dns, i, d)
        {
            unsigned char buf[16];
            const char *a = json_string_value(d);
            if (!a || (inet_pton(AF_INET, a, buf) != 1 && inet_pton(AF_INET6, a, buf) != 1))
                return al_error_set(err, -EINVAL,
                                    "%s: \"dns\"[%zu] must be an IPv4 or IPv6 address literal",
                                    what, i);
            s->dns[s->n_dns++] = a;
        }
    }
    return 0;
}

static int spec__agent(struct vmm_spec *s, json_t *a, struct al_error *err)
{
    static const char *const keys[] = {
        "dir", "path", "args", "env", "log_max_bytes", "start_timeout_ms", NULL};
    const char *what = "spec.agent";
    int rc = al_json_check_keys(a, keys, what, err);
    if (rc)
        return rc;
    const char *dir = NULL;
    if ((rc = al_json_get_str(a, "dir", false, &dir, what, err)))
        return rc;
    if (dir) {
        if (dir[0] != '/')
            return al_error_set(err, -EINVAL, "%s: \"dir\" must be an absolute host path", what);
        if ((size_t)snprintf(s->agent_dir, sizeof s->agent_dir, "%s", dir) >= sizeof s->agent_dir)
            return al_error_set(err, -ENAMETOOLONG, "%s: \"dir\" is too long", what);
    }
    if ((rc = al_json_get_str(a, "path", false, &s->agent_path, what, err)))
        return rc;
    if (!vmm_path_normalised(s->agent_path) || strncmp(s->agent_path, "/.airlock/", 10) != 0)
        return al_error_set(err, -EINVAL,
                            "%s: \"path\" must be a normalised path under /.airlock/ (the "
                            "read-only agent directory), got \"%s\"",
                            what, s->agent_path);
    if ((rc = al_json_get_arr(a, "args", false, &s->agent_args, what, err)))
        return rc;
    if (s->agent_args) {
        size_t i;
        json_t *v;
        if (json_array_size(s->agent_args) > 64)
            return al_error_set(err, -E2BIG, "%s: at most 64 \"args\"", what);
        json_array_foreach(s->agent_args, i, v)
        {
            if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
                return al_error_set(err, -EINVAL, "%s: \"args\"[%zu] must be a string", what, i);
        }
    }
    if ((rc = al_json_get_obj(a, "env", false, &s->agent_env, what, err)))
        return rc;
    if (s->agent_env && (rc = spec__check_env(s->agent_env, "spec.agent.env", err)))
        return rc;
    int64_t v;
    if ((rc = al_json_get_int(a, "log_max_bytes", false, 4096, 1ll << 30, &v, what, err)))
        return rc;
    if (json_object_get(a, "log_max_bytes"))
        s->log_max_bytes = (uint64_t)v;
    if ((rc = al_json_get_int(a, "start_timeout_ms", false, 10, 600000, &v, what, err)))
        return rc;
    if (json_object_get(a, "start_timeout_ms"))
        s->start_timeout_ms = (uint32_t)v;
    return 0;
}

/* spec.binds (read-only trees) and spec.volumes (writable, id-mapped), one list. */
static int spec__binds(struct vmm_spec *s, json_t *arr, const char *key, bool volume,
                       struct al_error *err)
{
    static const char *const keys[] = {"source", "target", NULL};
    if (s->n_binds + json_array_size(arr) > VMM_MAX_BINDS)
        return al_error_set(err, -E2BIG, "spec.binds and spec.volumes: at most %d entries",
                            VMM_MAX_BINDS);
    static const char *const reserved[] = {"/proc", "/dev", "/sys", "/.airlock", "/tmp", NULL};
    size_t i;
    json_t *b;
    json_array_foreach(arr, i, b)
    {
        char what[64];
        snprintf(what, sizeof what, "spec.%s[%zu]", key, i);
        int rc = al_json_check_keys(b, keys, what, err);
        if (rc)
            return rc;
        struct vmm_bind *d = &s->binds[s->n_binds];
        d->volume = volume;
        if ((rc = al_json_get_str(b, "source", true, &d->source, what, err)) ||
            (rc = al_json_get_str(b, "target", true, &d->target, what, err)))
            return rc;
        if (d->source[0] != '/')
            return al_error_set(err, -EINVAL, "%s: \"source\" must be an absolute host path", what);
        if (!vmm_path_normalised(d->target) || strcmp(d->target, "/") == 0)
            return al_error_set(err, -EINVAL,
                                "%s: \"target\" must be a normalised absolute path other than "
                                "\"/\" (no \"..\", \".\", \"//\" or trailing \"/\"), got \"%s\"",
                                what, d->target);
        for (const char *const *r = reserved; *r; r++) {
            size_t rl = strlen(*r);
            if (strncmp(d->target, *r, rl) == 0 && (d->target[rl] == '\0' || d->target[rl] == '/'))
                return al_error_set(err, -EINVAL,
                                    "%s: \"target\" %s is inside %s, which airlock-vmm manages",
                                    what, d->target, *r);
        }
        for (size_t k = 0; k < s->n_binds; k++)
            if (strcmp(s->binds[k].target, d->target) == 0)
                return al_error_set(err, -EINVAL, "%s: \"target\" %s is mounted twice", what,
                                    d->target);
        s->n_binds++;
    }
    return 0;
}

static int spec__kvm(struct vmm_spec *s, json_t *k, struct al_error *err)
{
    static const char *const keys[] = {"kernel", "vcpus", "snapshot", "restore", "cache_dir", NULL};
    const char *what = "spec.kvm";
    int rc = al_json_check_keys(k, keys, what, err);
    if (rc)
        return rc;
    int64_t v;
    if ((rc = al_json_get_str(k, "kernel", false, &s->kvm_kernel, what, err)) ||
        (rc = al_json_get_str(k, "restore", false, &s->kvm_restore, what, err)) ||
        (rc = al_json_get_str(k, "cache_dir", false, &s->kvm_cache_dir, what, err)) ||
        (rc = al_json_get_bool(k, "snapshot", false, &s->kvm_snapshot, what, err)) ||
        (rc = al_json_get_int(k, "vcpus", false, 1, 16, &v, what, err)))
        return rc;
    if (json_object_get(k, "vcpus"))
        s->kvm_vcpus = (uint32_t)v;
    const struct {
        const char *key;
        const char **val;
    } paths[] = {
        {"kernel", &s->kvm_kernel}, {"restore", &s->kvm_restore}, {"cache_dir", &s->kvm_cache_dir}};
    for (size_t i = 0; i < AL_ARRAY_SIZE(paths); i++)
        if (*paths[i].val && !vmm_path_normalised(*paths[i].val))
            return al_error_set(err, -EINVAL, "%s: \"%s\" must be a normalised absolute path", what,
                                paths[i].key);
    return 0;
}

/* What only one backend understands. */
static int spec__backend_fit(const struct vmm_spec *s, struct al_error *err)
{
    bool kvm = strcmp(s->backend, "kvm") == 0;
    if (!kvm && s->net_mode == VMM_NET_TAP)
        return al_error_set(err, -EINVAL,
                            "spec.network: \"mode\": \"tap\" is for \"backend\": \"kvm\"; the jail "
                            "backend joins a network namespace (\"mode\": \"netns\")");
    if (!kvm && json_object_get(s->root, "kvm"))
        return al_error_set(err, -EINVAL, "spec.kvm only applies to \"backend\": \"kvm\"");
    if (!kvm)
        return 0;
    if (s->net_mode == VMM_NET_NETNS)
        return al_error_set(err, -EINVAL,
                            "spec.network: the kvm backend's network is a tap: give \"mode\": "
                            "\"tap\" with the tap_fd, mac and address vswitch_tap_create returned "
                            "(or \"none\")");
    if (s->n_binds)
        return al_error_set(
            err, -EINVAL,
            "spec.binds, spec.volumes: the kvm backend cannot bind host directories into a "
            "guest; put the files into the template");
    if ((s->agent_args && json_array_size(s->agent_args)) ||
        (s->agent_env && json_object_size(s->agent_env)))
        return al_error_set(err, -EINVAL,
                            "spec.agent: \"args\" and \"env\" are not supported by the kvm backend "
                            "(the guest's init starts the agent); use \"env\" for the sandbox's "
                            "environment");
    for (size_t i = 0; i < s->n_dns; i++) {
        unsigned char b[4];
        if (inet_pton(AF_INET, s->dns[i], b) != 1)
            return al_error_set(
                err, -EINVAL, "spec.network: \"dns\"[%zu]: the kvm guest takes IPv4 resolvers", i);
    }
    return 0;
}

static int spec__jail(struct vmm_spec *s, json_t *j, struct al_error *err)
{
    static const char *const keys[] = {"cgroup_parent", "uid_base", "uid_slots",
                                       "restore",       "build",    NULL};
    const char *what = "spec.jail";
    int rc = al_json_check_keys(j, keys, what, err);
    if (rc)
        return rc;
    if ((rc = al_json_get_str(j, "cgroup_parent", false, &s->cgroup_parent, what, err)) ||
        (rc = al_json_get_str(j, "restore", false, &s->jail_restore, what, err)) ||
        (rc = al_json_get_bool(j, "build", false, &s->jail_build, what, err)))
        return rc;
    if (s->jail_restore && !vmm_path_normalised(s->jail_restore))
        return al_error_set(err, -EINVAL, "%s: \"restore\" must be a normalised absolute path",
                            what);
    int64_t v;
    if ((rc = al_json_get_int(j, "uid_base", false, 65536, 0xfffeffffll, &v, what, err)))
        return rc;
    if (json_object_get(j, "uid_base"))
        s->uid_base = (uint32_t)v;
    if ((rc = al_json_get_int(j, "uid_slots", false, 1, 65535, &v, what, err)))
        return rc;
    if (json_object_get(j, "uid_slots"))
        s->uid_slots = (uint32_t)v;
    return 0;
}

int vmm_spec_parse(const char *data, size_t len, struct vmm_spec *s, struct al_error *err)
{
    memset(s, 0, sizeof *s);
    s->backend = "jail";
    s->cpus = VMM_DEFAULT_CPUS;
    s->memory_bytes = (uint64_t)VMM_DEFAULT_MEMORY_MIB * MIB;
    s->disk_bytes = 512 * MIB;
    s->pids = VMM_DEFAULT_PIDS;
    s->nofile = 4096;
    s->agent_path = "/.airlock/bin/airlock-agent";
    s->log_max_bytes = 1 << 20;
    s->start_timeout_ms = 10000;
    s->cgroup_parent = "airlock";
    s->uid_base = 1073741824u;
    s->uid_slots = 16384;
    s->tap_fd = -1;
    s->kvm_snapshot = true;

    if (len > VMM_SPEC_MAX_SIZE)
        return al_error_set(err, -E2BIG, "the spec is %zu bytes, more than the limit of %u", len,
                            VMM_SPEC_MAX_SIZE);
    struct al_error jerr = {0};
    s->root = al_json_parse(data, len, &jerr);
    if (!s->root)
        return al_error_set(err, -EINVAL, "spec: %s", jerr.msg);
    const char *what = "spec";
    static const char *const keys[] = {"id",          "backend",   "template", "template_id",
                                       "resources",   "network",   "hostname", "agent",
                                       "env",         "user",      "workdir",  "access_token",
                                       "binds",       "keep_logs", "jail",     "kvm",
                                       "ca_cert_pem", "volumes",   NULL};
    int rc = al_json_check_keys(s->root, keys, what, err);
    if (rc)
        goto fail;
    if ((rc = al_json_get_str(s->root, "id", true, &s->id, what, err)))
        goto fail;
    if (!vmm_id_valid(s->id)) {
        rc = al_error_set(err, -EINVAL,
                          "spec: \"id\" must be 1..%d letters, digits, '-' or '_', starting "
                          "with a letter or digit",
                          VMM_ID_MAX);
        goto fail;
    }
    if ((rc = al_json_get_str(s->root, "backend", false, &s->backend, what, err)))
        goto fail;
    if (strcmp(s->backend, "jail") != 0 && strcmp(s->backend, "kvm") != 0) {
        rc = al_error_set(err, -EINVAL, "spec: \"backend\" must be \"jail\" or \"kvm\", got \"%s\"",
                          s->backend);
        goto fail;
    }
    if ((rc = al_json_get_str(s->root, "template", true, &s->template_ref, what, err)))
        goto fail;
    if (s->template_ref[0] != '/' && !vmm_id_valid(s->template_ref)) {
        rc = al_error_set(err, -EINVAL,
                          "spec: \"template\" must be a template name (letters, digits, '-', "
                          "'_') or an absolute directory, got \"%s\"",
                          s->template_ref);
        goto fail;
    }
    if ((rc = al_json_get_str(s->root, "template_id", false, &s->template_id, what, err)))
        goto fail;
    json_t *o = NULL;
    if ((rc = al_json_get_obj(s->root, "resources", false, &o, what, err)) ||
        (o && (rc = spec__resources(s, o, err))))
        goto fail;
    o = NULL;
    if ((rc = al_json_get_obj(s->root, "network", false, &o, what, err)) ||
        (o && (rc = spec__network(s, o, err))))
        goto fail;
    if ((rc = al_json_get_str(s->root, "hostname", false, &s->hostname, what, err)))
        goto fail;
    if (!s->hostname)
        s->hostname = s->id;
    if (!spec__hostname_valid(s->hostname)) {
        rc = al_error_set(err, -EINVAL,
                          "spec: \"hostname\" \"%s\" is not a valid host name (letters, digits, "
                          "'-' and '.', at most 63)",
                          s->hostname);
        goto fail;
    }
    o = NULL;
    if ((rc = al_json_get_obj(s->root, "agent", false, &o, what, err)) ||
        (o && (rc = spec__agent(s, o, err))))
        goto fail;
    if (!s->agent_dir[0] && (rc = vmm_default_agent_dir(s->agent_dir, sizeof s->agent_dir))) {
        al_error_set(err, rc,
                     "cannot find the default agent directory: set spec.agent.dir or "
                     "AIRLOCK_AGENT_DIR");
        goto fail;
    }
    if ((rc = al_json_get_obj(s->root, "env", false, &s->env, what, err)) ||
        (s->env && (rc = spec__check_env(s->env, "spec.env", err))))
        goto fail;
    if ((rc = al_json_get_str(s->root, "user", false, &s->user, what, err)) ||
        (rc = al_json_get_str(s->root, "workdir", false, &s->workdir, what, err)) ||
        (rc = al_json_get_str(s->root, "access_token", false, &s->access_token, what, err)) ||
        (rc = al_json_get_str(s->root, "ca_cert_pem", false, &s->ca_cert_pem, what, err)))
        goto fail;
    if (s->ca_cert_pem && (!*s->ca_cert_pem || strlen(s->ca_cert_pem) > VMM_CA_PEM_MAX)) {
        rc = al_error_set(err, -EINVAL,
                          "spec: \"ca_cert_pem\" must be one PEM certificate of 1..%d bytes",
                          VMM_CA_PEM_MAX);
        goto fail;
    }
    if (s->workdir && !vmm_path_normalised(s->workdir)) {
        rc = al_error_set(err, -EINVAL, "spec: \"workdir\" must be a normalised absolute path");
        goto fail;
    }
    if (s->user &&
        (!*s->user || strlen(s->user) > 32 || strchr(s->user, ':') || strchr(s->user, '/'))) {
        rc = al_error_set(err, -EINVAL, "spec: \"user\" must be a user name of 1..32 characters");
        goto fail;
    }
    json_t *arr = NULL;
    if ((rc = al_json_get_arr(s->root, "binds", false, &arr, what, err)) ||
        (arr && (rc = spec__binds(s, arr, "binds", false, err))))
        goto fail;
    arr = NULL;
    if ((rc = al_json_get_arr(s->root, "volumes", false, &arr, what, err)) ||
        (arr && (rc = spec__binds(s, arr, "volumes", true, err))))
        goto fail;
    if ((rc = al_json_get_bool(s->root, "keep_logs", false, &s->keep_logs, what, err)))
        goto fail;
    o = NULL;
    if ((rc = al_json_get_obj(s->root, "jail", false, &o, what, err)) ||
        (o && (rc = spec__jail(s, o, err))))
        goto fail;
    o = NULL;
    if ((rc = al_json_get_obj(s->root, "kvm", false, &o, what, err)) ||
        (o && (rc = spec__kvm(s, o, err))))
        goto fail;
    if ((rc = spec__backend_fit(s, err)))
        goto fail;
    return 0;
fail:
    json_decref(s->root);
    s->root = NULL;
    return rc;
}

int vmm_template_validate(const json_t *t, const char *where, struct al_error *err)
{
    /* Besides what the sandbox gets: what the image said (cmd, entrypoint, image), the
     * default policy (airlockd's), the build that made it (build) and its start and ready
     * commands (airlockd's builds record them). */
    static const char *const keys[] = {"name",   "description", "user",      "workdir",    "env",
                                       "agent",  "build",       "cmd",       "entrypoint", "image",
                                       "policy", "start_cmd",   "ready_cmd", NULL};
    int rc = al_json_check_keys(t, keys, where, err);
    if (rc)
        return rc;
    const char *name = NULL, *user = NULL, *workdir = NULL, *desc = NULL;
    json_t *o = NULL;
    if ((rc = al_json_get_str(t, "name", true, &name, where, err)) ||
        (rc = al_json_get_str(t, "description", false, &desc, where, err)) ||
        (rc = al_json_get_str(t, "user", false, &user, where, err)) ||
        (rc = al_json_get_str(t, "workdir", false, &workdir, where, err)))
        return rc;
    /* A template's name as airlockd allows them: letters, digits, '-', '_' and '.', not
     * first, and no "..". */
    bool name_ok = name[0] != '.' && !strstr(name, "..") && strlen(name) <= VMM_ID_MAX;
    for (const char *c = name; name_ok && *c; c++)
        name_ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || ((*c == '-' || *c == '_' || *c == '.') && c != name);
    if (!name_ok)
        return al_error_set(err, -EINVAL,
                            "%s: \"name\" must be letters, digits, '-', '_' and '.' (not first)",
                            where);
    if (workdir && !vmm_path_normalised(workdir))
        return al_error_set(err, -EINVAL, "%s: \"workdir\" must be a normalised absolute path",
                            where);
    if ((rc = al_json_get_obj(t, "env", false, &o, where, err)) ||
        (o && (rc = spec__check_env(o, where, err))))
        return rc;
    if ((rc = al_json_get_obj(t, "agent", false, &o, where, err)) ||
        (rc = al_json_get_obj(t, "build", false, &o, where, err)))
        return rc;
    const char *cmd = NULL;
    if ((rc = al_json_get_str(t, "start_cmd", false, &cmd, where, err)) ||
        (rc = al_json_get_str(t, "ready_cmd", false, &cmd, where, err)))
        return rc;
    return 0;
}

int vmm_spec_load_template(struct vmm_spec *s, struct al_error *err)
{
    int n;
    if (s->template_ref[0] == '/')
        n = snprintf(s->template_dir, sizeof s->template_dir, "%s", s->template_ref);
    else
        n = snprintf(s->template_dir, sizeof s->template_dir, "%s/templates/%s", al_state_dir(),
                     s->template_ref);
    if (n < 0 || (size_t)n >= sizeof s->template_dir)
        return al_error_set(err, -ENAMETOOLONG, "template path too long");
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/rootfs", s->template_dir);
    struct stat st;
    if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
        return al_error_set(err, -ENOENT,
                            "template \"%s\": %s is not a directory. Build templates with "
                            "deploy/templates/build (it installs them into <state>/templates/)",
                            s->template_ref, p);
    snprintf(p, sizeof p, "%s/template.json", s->template_dir);
    struct al_error jerr = {0};
    json_t *t = al_json_load_file(p, &jerr);
    if (!t)
        return al_error_set(err, jerr.code ? jerr.code : -EINVAL, "template \"%s\": %s",
                            s->template_ref, jerr.msg);
    int rc = vmm_template_validate(t, p, err);
    if (rc) {
        json_decref(t);
        return rc;
    }
    json_decref(s->template_json);
    s->template_json = t;
    return 0;
}

json_t *vmm_spec_init_object(const struct vmm_spec *s)
{
    const json_t *t = s->template_json;
    json_t *o = json_object();
    json_t *env = json_object();
    if (!o || !env) {
        json_decref(o);
        json_decref(env);
        return NULL;
    }
    json_t *tenv = t ? json_object_get(t, "env") : NULL;
    if (tenv)
        json_object_update(env, tenv);
    if (s->env)
        json_object_update(env, s->env);
    const char *user = s->user;
    if (!user && t)
        user = json_string_value(json_object_get(t, "user"));
    if (!user)
        user = "user";
    const char *workdir = s->workdir;
    if (!workdir && t)
        workdir = json_string_value(json_object_get(t, "workdir"));
    char home[64];
    if (!workdir) {
        snprintf(home, sizeof home, "/home/%s", user);
        workdir = strcmp(user, "root") == 0 ? "/root" : home;
    }
    const char *tid = s->template_id;
    if (!tid && t)
        tid = json_string_value(json_object_get(t, "name"));
    json_object_set_new(o, "sandboxID", json_string(s->id));
    json_object_set_new(o, "templateID", json_string(tid ? tid : s->template_ref));
    json_object_set_new(o, "hostname", json_string(s->hostname));
    json_object_set_new(o, "envVars", env);
    if (s->access_token)
        json_object_set_new(o, "accessToken", json_string(s->access_token));
    if (s->ca_cert_pem)
        json_object_set_new(o, "caCertPem", json_string(s->ca_cert_pem));
    json_object_set_new(o, "defaultUser", json_string(user));
    json_object_set_new(o, "defaultWorkdir", json_string(workdir));
    json_t *agent = t ? json_object_get(t, "agent") : NULL;
    if (agent)
        json_object_set(o, "agent", agent);
    /* The template's start and ready commands: the agent runs them (airlockd waits). */
    const char *start = t ? json_string_value(json_object_get(t, "start_cmd")) : NULL;
    const char *ready = t ? json_string_value(json_object_get(t, "ready_cmd")) : NULL;
    if (start && *start)
        json_object_set_new(o, "startCmd", json_string(start));
    if (ready && *ready)
        json_object_set_new(o, "readyCmd", json_string(ready));
    return o;
}

void vmm_spec_free(struct vmm_spec *s)
{
    json_decref(s->template_json);
    json_decref(s->root);
    memset(s, 0, sizeof *s);
}
