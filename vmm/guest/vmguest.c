/* vmm/guest/vmguest: what the init object asks of the agent only when it is PID 1 of a KVM
 * guest (airlock-kvm-init exec'd it with AIRLOCK_AGENT_VM=kvm).
 *
 * Owns: "timestamp" (RFC 3339, as envd's orchestrator sends it): the guest's wall clock is
 * set to it; "seed" (base64, 16..512 bytes from the host's CSPRNG): mixed into the kernel's
 * entropy pool (RNDADDENTROPY, credited) followed by a forced reseed (RNDRESEEDCRNG), so
 * that sandboxes restored from one template snapshot stop sharing random state at once;
 * "network" ({"address":"A.B.C.D/N","gateway":"A.B.C.D","dns":[...],"mac":"..."}) and
 * "hostname": applied by /.airlock/bin/airlock-kvm-init configure (the guest-side network
 * code lives there). Every field is validated before anything changes. In the jail (or a
 * host test) the clock, the entropy pool and the network belong to the host: the fields
 * are validated and ignored, with a debug log.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "agent.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"
#include "common/paths.h"
#include "protojson.h"

#define VMG_SEED_MIN 16
#define VMG_SEED_MAX 512

bool agent_vm_guest_detect(void)
{
    const char *v = getenv("AIRLOCK_AGENT_VM");
    return getpid() == 1 && v && strcmp(v, "kvm") == 0;
}

/* A string of at most max-1 bytes of [0-9a-fA-F.:/] (addresses, prefixes, MACs): the
 * helper parses it properly; this only keeps anything odd off its command line. */
static int vmg__token(const json_t *o, const char *key, char *out, size_t max, bool required,
                      struct al_error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required)
            return al_error_set(err, -EINVAL, "init: network.%s is required", key);
        out[0] = 0;
        return 0;
    }
    const char *s = json_string_value(v);
    size_t n = s ? strlen(s) : 0;
    if (!s || n == 0 || n >= max || n != json_string_length(v))
        return al_error_set(err, -EINVAL, "init: network.%s must be a non-empty string", key);
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789abcdefABCDEF.:/", s[i]))
            return al_error_set(err, -EINVAL,
                                "init: network.%s '%.64s' has a character other "
                                "than hex digits, '.', ':' and '/'",
                                key, s);
    memcpy(out, s, n + 1);
    return 0;
}

int agent_vm_parse(const json_t *init, struct agent_vm_init *v, struct al_error *err)
{
    memset(v, 0, sizeof *v);
    const char *ts = NULL;
    int r = agent_pj_string(init, "timestamp", NULL, &ts, err);
    if (r < 0 && r != -ENOENT)
        return r;
    if (ts) {
        if (al_time_parse_rfc3339(ts, &v->ts_ns) < 0)
            return al_error_set(err, -EINVAL,
                                "init: \"timestamp\" '%.64s' is not an RFC 3339 time "
                                "(e.g. 2026-01-02T03:04:05.123456789Z)",
                                ts);
        v->have_ts = true;
    }
    const char *seed = NULL;
    r = agent_pj_string(init, "seed", NULL, &seed, err);
    if (r < 0 && r != -ENOENT)
        return r;
    if (seed) {
        struct al_buf b;
        al_buf_init(&b, VMG_SEED_MAX * 2);
        int d = agent_pj_base64_decode(seed, strlen(seed), &b);
        if (d < 0 || b.len < VMG_SEED_MIN || b.len > VMG_SEED_MAX) {
            al_buf_free_wipe(&b);
            return al_error_set(err, -EINVAL,
                                "init: \"seed\" must be base64 of %d..%d random bytes",
                                VMG_SEED_MIN, VMG_SEED_MAX);
        }
        memcpy(v->seed, b.data, b.len);
        v->seed_len = b.len;
        al_buf_free_wipe(&b);
    }
    json_t *net = json_object_get(init, "network");
    if (net && !json_is_null(net)) {
        if (!json_is_object(net))
            return al_error_set(err, -EINVAL, "init: \"network\" must be an object");
        static const char *const keys[] = {"address", "gateway", "dns", "mac"};
        const char *k;
        json_t *x;
        json_object_foreach(net, k, x)
        {
            bool known = false;
            for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
                known |= strcmp(k, keys[i]) == 0;
            if (!known)
                return al_error_set(err, -EINVAL,
                                    "init: network.%s is not a known key (address, gateway, dns, "
                                    "mac)",
                                    k);
        }
        if ((r = vmg__token(net, "address", v->address, sizeof v->address, true, err)) < 0 ||
            (r = vmg__token(net, "gateway", v->gateway, sizeof v->gateway, false, err)) < 0 ||
            (r = vmg__token(net, "mac", v->mac, sizeof v->mac, false, err)) < 0)
            return r;
        json_t *dns = json_object_get(net, "dns");
        if (dns && !json_is_null(dns)) {
            if (!json_is_array(dns) || json_array_size(dns) > 3)
                return al_error_set(err, -EINVAL,
                                    "init: network.dns must be an array of at most "
                                    "3 addresses");
            size_t i;
            json_t *d;
            json_array_foreach(dns, i, d)
            {
                json_t *tmp = json_pack("{sO}", "dns", d);
                char one[48];
                r = vmg__token(tmp, "dns", one, sizeof one, true, err);
                json_decref(tmp);
                if (r < 0)
                    return r;
                size_t n = strlen(v->dns);
                snprintf(v->dns + n, sizeof v->dns - n, "%s%s", n ? "," : "", one);
            }
        }
        v->have_net = true;
    }
    const char *host = NULL;
    r = agent_pj_string(init, "hostname", NULL, &host, err);
    if (r < 0 && r != -ENOENT)
        return r;
    if (host && *host) { /* "" keeps the current one (envd) */
        size_t n = strlen(host);
        bool ok = n < sizeof v->hostname;
        for (size_t i = 0; ok && i < n; i++)
            ok = (host[i] >= 'a' && host[i] <= 'z') || (host[i] >= 'A' && host[i] <= 'Z') ||
                 (host[i] >= '0' && host[i] <= '9') ||
                 ((host[i] == '-' || host[i] == '.') && i > 0 && i + 1 < n);
        if (!ok)
            return al_error_set(err, -EINVAL,
                                "init: \"hostname\" '%.64s' is not a host name (letters, digits, "
                                "'-' and '.', at most 63)",
                                host);
        memcpy(v->hostname, host, n + 1);
    }
    return 0;
}

static int vmg__helper(const struct agent_vm_init *v, struct al_error *err)
{
    char dir[PATH_MAX];
    int r = al_self_dir(dir, sizeof dir);
    if (r < 0)
        return al_error_set(err, r, "cannot find the agent's own directory");
    char helper[PATH_MAX + 32];
    snprintf(helper, sizeof helper, "%s/airlock-kvm-init", dir);
    char a_ip[80], a_gw[48], a_dns[180], a_mac[40], a_host[80];
    char *argv[8];
    int k = 0;
    argv[k++] = helper;
    argv[k++] = (char *)"configure";
    if (v->have_net) {
        snprintf(a_ip, sizeof a_ip, "ip=%s", v->address);
        argv[k++] = a_ip;
        if (v->gateway[0]) {
            snprintf(a_gw, sizeof a_gw, "gw=%s", v->gateway);
            argv[k++] = a_gw;
        }
        if (v->dns[0]) {
            snprintf(a_dns, sizeof a_dns, "dns=%s", v->dns);
            argv[k++] = a_dns;
        }
        if (v->mac[0]) {
            snprintf(a_mac, sizeof a_mac, "mac=%s", v->mac);
            argv[k++] = a_mac;
        }
    }
    if (v->hostname[0]) {
        snprintf(a_host, sizeof a_host, "hostname=%s", v->hostname);
        argv[k++] = a_host;
    }
    argv[k] = NULL;
    char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    /* Its messages go where the agent's own go (the sandbox log). */
    struct al_spawn sp = {.path = helper, .argv = argv, .envp = envp, .fds = {-1, 1, 2}, .nfds = 3};
    pid_t pid;
    int rc = al_spawn(&sp, &pid, NULL, err);
    if (rc < 0)
        return rc;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return al_error_set(err, -errno, "waiting for %s: %s", helper, strerror(errno));
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return al_error_set(err, -EIO,
                            "%s configure failed (status %d; its message is in the sandbox log)",
                            helper, st);
    return 0;
}

int agent_vm_apply(struct agent *a, const struct agent_vm_init *v, struct al_error *err)
{
    bool any = v->have_ts || v->seed_len || v->have_net || v->hostname[0];
    if (!any)
        return 0;
    if (!a->vm_guest) {
        if (!v->have_ts && !v->seed_len && !v->have_net)
            return 0; /* a hostname alone: the jail sets it from the host */
        al_debug("init: timestamp/seed/network/hostname not applied: the agent is not PID 1 of a "
                 "KVM guest (the host owns the clock, entropy and network here)");
        return 0;
    }
    if (v->have_ts) {
        struct timespec ts = {.tv_sec = (time_t)(v->ts_ns / 1000000000ull),
                              .tv_nsec = (long)(v->ts_ns % 1000000000ull)};
        struct timespec before;
        clock_gettime(CLOCK_REALTIME, &before);
        if (clock_settime(CLOCK_REALTIME, &ts) < 0)
            return al_error_set(err, -errno, "init: cannot set the clock: %s", strerror(errno));
        double step = (double)ts.tv_sec - (double)before.tv_sec +
                      ((double)ts.tv_nsec - (double)before.tv_nsec) / 1e9;
        al_info("init: clock set from the host (stepped %.3f s)", step);
    }
    if (v->seed_len) {
        int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return al_error_set(err, -errno, "init: cannot open /dev/urandom: %s", strerror(errno));
        /* struct rand_pool_info ends in a flexible array: the seed follows it in one buffer
         * (a struct wrapping it would be a GNU extension, which clang refuses). */
        _Alignas(struct rand_pool_info) uint8_t req[sizeof(struct rand_pool_info) + VMG_SEED_MAX];
        struct rand_pool_info *info = (struct rand_pool_info *)req;
        info->entropy_count = (int)(v->seed_len * 8);
        info->buf_size = (int)v->seed_len;
        memcpy(req + sizeof(struct rand_pool_info), v->seed, v->seed_len);
        int r = ioctl(fd, RNDADDENTROPY, req);
        int e = errno;
        sodium_memzero(req, sizeof req);
        if (r == 0 && ioctl(fd, RNDRESEEDCRNG) < 0)
            r = -1, e = errno;
        close(fd);
        if (r < 0)
            return al_error_set(err, -e, "init: cannot reseed the kernel's RNG: %s", strerror(e));
        al_info("init: kernel RNG reseeded with %zu bytes from the host", v->seed_len);
    }
    if (v->have_net || v->hostname[0]) {
        int r = vmg__helper(v, err);
        if (r < 0)
            return r;
        if (v->have_net)
            al_info("init: network configured (%s)", v->address);
    }
    return 0;
}
