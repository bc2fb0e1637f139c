/* egress/config: the daemon's configuration: documented defaults, the command line
 * (every option named in the usage text; unknown options are errors), and checks. */
#include "egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/paths.h"
#include "common/util.h"

void egress_config_defaults(struct egress_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->state_dir, sizeof cfg->state_dir, "%s", al_state_dir());
    cfg->relay = EGRESS_RELAY_SPLICE;
    cfg->max_conns_per_sandbox = 256;
    cfg->max_conns = 16384;
    cfg->memory_budget = 256ull << 20;
    cfg->sandbox_memory = 0; /* budget / 4 in finish */
    cfg->max_header_bytes = 32 * 1024;
    cfg->max_body_bytes = 1ull << 30;
    cfg->header_timeout_ms = 10000;
    cfg->connect_timeout_ms = 10000;
    cfg->response_timeout_ms = 60000;
    cfg->idle_timeout_ms = 300000;
    cfg->keepalive_timeout_ms = 60000;
    cfg->body_timeout_ms = 30000;
    cfg->dns_min_ttl = 5;
    cfg->dns_max_ttl = 300;
    cfg->dns_neg_ttl = 30;
    cfg->dns_remember_s = 600;
    cfg->dns_timeout_ms = 2000;
    cfg->dns_max_name = 200;
    cfg->dns_max_label = 52;
    cfg->dns_entropy_min_len = 24;
    cfg->dns_entropy_max = 4.0;
    cfg->dns_rate = 200;
    cfg->dns_burst = 400;
    cfg->dns_inflight = 64;
    cfg->audit_allow_rate = 50;
    cfg->audit_allow_burst = 200;
    cfg->audit_deny_rate = 100;
    cfg->audit_deny_burst = 400;
    cfg->audit_aggregate_ms = 1000;
    cfg->audit_rotate_bytes = 64ull << 20;
    cfg->audit_rotate_ms = 86400000ull;
    cfg->audit_retain_bytes = 4ull << 30;
    cfg->audit_retain_ms = 90ull * 86400000ull;
    cfg->audit_retain_files = 0;
}

int egress_parse_sockaddr(const char *s, uint16_t default_port, struct sockaddr_storage *ss)
{
    char host[128];
    const char *port = NULL;
    memset(ss, 0, sizeof *ss);
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || (size_t)(close - s - 1) >= sizeof host)
            return -EINVAL;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = 0;
        if (close[1] == ':')
            port = close + 2;
        else if (close[1])
            return -EINVAL;
    } else {
        const char *colon = strrchr(s, ':');
        size_t hl = colon ? (size_t)(colon - s) : strlen(s);
        if (hl >= sizeof host || (colon && strchr(s, ':') != colon))
            return -EINVAL;
        memcpy(host, s, hl);
        host[hl] = 0;
        if (colon)
            port = colon + 1;
    }
    unsigned long p = default_port;
    if (port) {
        char *end;
        errno = 0;
        p = strtoul(port, &end, 10);
        if (!*port || *end || errno || p > 65535)
            return -EINVAL;
    }
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        return 0;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        return 0;
    }
    return -EINVAL;
}

void egress_config_usage(FILE *f)
{
    fputs(
        "usage: airlock-egress [options]\n"
        "\n"
        "The egress proxy of airlock: every TCP connection and DNS query of a sandbox is handed\n"
        "to it by the vswitch; it decides under the sandbox's policy and writes the audit log.\n"
        "Sandboxes are registered through the admin API (unix socket, HTTP+JSON).\n"
        "\n"
        "Places:\n"
        "  --state-dir DIR            state directory (default /var/lib/airlock)\n"
        "  --admin-socket PATH        admin API socket (default <state>/run/egress.sock; 'none')\n"
        "  --audit-dir DIR            audit log directory (default <state>/audit)\n"
        "  --vault-socket PATH        airlock-vault, for credential injection (default\n"
        "                             <state>/run/vault.sock; 'none': injecting rules are "
        "refused)\n"
        "  --upstream-ca FILE         roots that upstream certificates are verified against when\n"
        "                             TLS is inspected (default "
        "/etc/ssl/certs/ca-certificates.crt)\n"
        "Listeners (repeatable; port 0 picks one):\n"
        "  --listen ADDR:PORT         transparent TCP listener (default 127.0.0.1:15001)\n"
        "  --dns ADDR:PORT            DNS listener, UDP and TCP (default 127.0.0.1:15053)\n"
        "  --resolver ADDR[:PORT]     upstream resolver (default: first nameserver in\n"
        "                             /etc/resolv.conf)\n"
        "  --workers N                event loops (default: one per CPU)\n"
        "  --listener-mode auto|reuseport|shared\n"
        "                             reuseport: one listening socket per worker (SO_REUSEPORT);\n"
        "                             shared: one per address, polled by every worker (kernels\n"
        "                             before 6.5, whose bpf_sk_assign refuses SO_REUSEPORT "
        "sockets);\n"
        "                             auto: shared on such kernels when the vswitch may be used\n"
        "                             (default auto; also AIRLOCK_EGRESS_LISTENER_MODE)\n"
        "  --relay splice|copy        how bytes move on passthrough (default splice)\n"
        "  --upstream-mark N          SO_MARK on connections to upstreams (default none)\n"
        "  --vswitch auto|on|off      register the listeners with the vswitch of the state\n"
        "                             directory (auto: if there is one; default auto)\n"
        "  --vswitch-pins DIR         the switch's bpffs pin directory (default: from its state)\n"
        "Limits:\n"
        "  --max-connections N        all sandboxes together (default 16384)\n"
        "  --max-sandbox-connections N  per sandbox (default 256; a policy may lower it)\n"
        "  --memory-budget SIZE       buffers of all connections (default 256MiB)\n"
        "  --sandbox-memory SIZE      one sandbox's share (default budget/4)\n"
        "  --max-header-bytes SIZE    request line + headers (default 32KiB)\n"
        "  --max-body SIZE            request body (default 1GiB; a policy may lower it)\n"
        "  --header-timeout DUR       first bytes / complete request head (default 10s)\n"
        "  --connect-timeout DUR      upstream connect (default 10s)\n"
        "  --response-timeout DUR     upstream response head (default 60s)\n"
        "  --idle-timeout DUR         no byte either way on a tunnel (default 300s)\n"
        "  --keepalive-timeout DUR    between requests of a client (default 60s)\n"
        "  --body-timeout DUR         longest pause inside a request body (default 30s)\n"
        "DNS:\n"
        "  --dns-min-ttl DUR, --dns-max-ttl DUR   TTL clamp (default 5s, 300s)\n"
        "  --dns-neg-ttl DUR          longest negative caching (default 30s)\n"
        "  --dns-remember DUR         answers kept for the destination check (default 600s)\n"
        "  --dns-timeout DUR          one upstream attempt (default 2s)\n"
        "  --dns-max-name N           longer names are refused as exfiltration (default 200)\n"
        "  --dns-max-label N          longer labels likewise (default 52)\n"
        "  --dns-entropy-min-len N    labels this long are checked for entropy (default 24)\n"
        "  --dns-entropy-max BITS     refused above this many bits per character (default 4.0)\n"
        "  --dns-rate N               queries per second per sandbox; beyond, REFUSED and one\n"
        "                             aggregated audit record per second (default 200; 0 = none)\n"
        "  --dns-burst N              queries a sandbox may send at once (default 2 x rate)\n"
        "  --dns-inflight N           upstream resolutions one sandbox may wait on at a time;\n"
        "                             beyond, REFUSED unless cached (default 64)\n"
        "Audit:\n"
        "  --audit-fail-open          keep serving when the audit log cannot be written\n"
        "                             (default: deny everything until it can)\n"
        "  --audit-query-strings      log request paths with their query string\n"
        "  --audit-allow-rate N       allowed decisions of one sandbox written one by one per\n"
        "                             second; beyond, counted into aggregate records (default 50;\n"
        "                             0 = write every one)\n"
        "  --audit-allow-burst N      ... of which at once (default 4 x rate)\n"
        "  --audit-deny-rate N        the same for its denials (default 100; 0 = every one)\n"
        "  --audit-deny-burst N       ... of which at once (default 4 x rate)\n"
        "  --audit-aggregate-interval DUR  what one aggregate record covers (default 1s)\n"
        "  --audit-rotate-size SIZE   a new log file beyond this size (default 64MiB)\n"
        "  --audit-rotate-age DUR     ... or this age (default 1d; 0 = never by age)\n"
        "  --audit-retain-size SIZE   delete the oldest files while all are larger\n"
        "                             (default 4GiB; 0 = no bound)\n"
        "  --audit-retain-age DUR     delete files last written longer ago (default 90d;\n"
        "                             0 = never by age)\n"
        "  --audit-retain-files N     keep at most N files (default 0 = no bound)\n"
        "Other:\n"
        "  --log-level LEVEL          debug|info|warn|error (default info)\n"
        "  -h, --help\n",
        f);
}

const char *egress_listener_mode_name(enum egress_listener_mode m)
{
    return m == EGRESS_LISTENER_REUSEPORT ? "reuseport"
           : m == EGRESS_LISTENER_SHARED  ? "shared"
                                          : "auto";
}

static int cfg__listener_mode(const char *v, enum egress_listener_mode *out)
{
    if (strcmp(v, "auto") == 0)
        *out = EGRESS_LISTENER_AUTO;
    else if (strcmp(v, "reuseport") == 0)
        *out = EGRESS_LISTENER_REUSEPORT;
    else if (strcmp(v, "shared") == 0)
        *out = EGRESS_LISTENER_SHARED;
    else
        return -EINVAL;
    return 0;
}

static int cfg__bad(struct al_error *err, const char *opt, const char *val, const char *want)
{
    return al_error_set(err, -EINVAL, "%s '%s': expected %s (see --help)", opt, val, want);
}

static int cfg__u32(const char *opt, const char *v, uint32_t min, uint32_t max, uint32_t *out,
                    struct al_error *err)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (!*v || *end || errno || x < min || x > max) {
        char want[64];
        snprintf(want, sizeof want, "an integer in %u..%u", min, max);
        return cfg__bad(err, opt, v, want);
    }
    *out = (uint32_t)x;
    return 0;
}

static int cfg__dur(const char *opt, const char *v, uint32_t *out_ms, struct al_error *err)
{
    uint64_t ms;
    if (al_parse_duration_ms(v, &ms) < 0 || ms == 0 || ms > UINT32_MAX)
        return cfg__bad(err, opt, v, "a duration such as 250ms, 30s, 5m");
    *out_ms = (uint32_t)ms;
    return 0;
}

static int cfg__dur_s(const char *opt, const char *v, uint32_t *out_s, struct al_error *err)
{
    uint32_t ms;
    int rc = cfg__dur(opt, v, &ms, err);
    if (rc == 0)
        *out_s = ms / 1000 ? ms / 1000 : 1;
    return rc;
}

static int cfg__size(const char *opt, const char *v, uint64_t *out, struct al_error *err)
{
    if (al_parse_size(v, out) < 0 || *out == 0)
        return cfg__bad(err, opt, v, "a size such as 64KiB, 10MiB, 1GiB");
    return 0;
}

/* The same two where 0 turns the rule off. */
static int cfg__size0(const char *opt, const char *v, uint64_t *out, struct al_error *err)
{
    if (al_parse_size(v, out) < 0)
        return cfg__bad(err, opt, v, "a size such as 512MiB, 4GiB (0 = no bound)");
    return 0;
}

static int cfg__dur0(const char *opt, const char *v, uint64_t *out_ms, struct al_error *err)
{
    if (al_parse_duration_ms(v, out_ms) < 0)
        return cfg__bad(err, opt, v, "a duration such as 12h, 30d (0 = never)");
    return 0;
}

static int cfg__resolv_conf(struct sockaddr_storage *ss)
{
    FILE *f = fopen("/etc/resolv.conf", "r");
    if (!f)
        return -ENOENT;
    char line[512];
    int rc = -ENOENT;
    while (fgets(line, sizeof line, f)) {
        char addr[128];
        if (sscanf(line, " nameserver %127s", addr) == 1 &&
            egress_parse_sockaddr(addr, 53, ss) == 0) {
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

int egress_config_parse_args(struct egress_config *cfg, int argc, char **argv, struct al_error *err)
{
    bool burst_given = false; /* else --dns-rate sets the burst to twice the rate */
    bool allow_burst_given = false, deny_burst_given = false; /* likewise, four times */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            egress_config_usage(stdout);
            return 1;
        }
        const char *v = NULL;
        char name[64];
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            v = eq + 1;
            a = name;
        }
        /* Flags without a value. */
        if (strcmp(a, "--audit-fail-open") == 0) {
            cfg->audit_fail_open = true;
            continue;
        }
        if (strcmp(a, "--audit-query-strings") == 0) {
            cfg->audit_query_strings = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0)
            return al_error_set(err, -EINVAL, "unexpected argument '%s' (see --help)", a);
        static const char *const with_value[] = {"--state-dir",
                                                 "--admin-socket",
                                                 "--audit-dir",
                                                 "--vault-socket",
                                                 "--upstream-ca",
                                                 "--listen",
                                                 "--dns",
                                                 "--resolver",
                                                 "--workers",
                                                 "--listener-mode",
                                                 "--relay",
                                                 "--upstream-mark",
                                                 "--max-connections",
                                                 "--max-sandbox-connections",
                                                 "--memory-budget",
                                                 "--sandbox-memory",
                                                 "--max-header-bytes",
                                                 "--max-body",
                                                 "--header-timeout",
                                                 "--connect-timeout",
                                                 "--response-timeout",
                                                 "--idle-timeout",
                                                 "--keepalive-timeout",
                                                 "--body-timeout",
                                                 "--dns-min-ttl",
                                                 "--dns-max-ttl",
                                                 "--dns-neg-ttl",
                                                 "--dns-remember",
                                                 "--dns-timeout",
                                                 "--dns-max-name",
                                                 "--dns-max-label",
                                                 "--dns-entropy-min-len",
                                                 "--dns-entropy-max",
                                                 "--dns-rate",
                                                 "--dns-burst",
                                                 "--dns-inflight",
                                                 "--audit-allow-rate",
                                                 "--audit-allow-burst",
                                                 "--audit-deny-rate",
                                                 "--audit-deny-burst",
                                                 "--audit-aggregate-interval",
                                                 "--audit-rotate-size",
                                                 "--audit-rotate-age",
                                                 "--audit-retain-size",
                                                 "--audit-retain-age",
                                                 "--audit-retain-files",
                                                 "--vswitch",
                                                 "--vswitch-pins",
                                                 "--log-level",
                                                 "--log-format",
                                                 NULL};
        bool known = false;
        for (const char *const *k = with_value; *k && !known; k++)
            known = strcmp(*k, a) == 0;
        if (!known)
            return al_error_set(err, -EINVAL, "unknown option '%s' (see --help)", a);
        if (!v) {
            if (i + 1 >= argc)
                return al_error_set(err, -EINVAL, "%s needs a value (see --help)", a);
            v = argv[++i];
        }
        int rc = 0;
        uint64_t sz;
        if (strcmp(a, "--state-dir") == 0) {
            snprintf(cfg->state_dir, sizeof cfg->state_dir, "%s", v);
        } else if (strcmp(a, "--admin-socket") == 0) {
            snprintf(cfg->admin_socket, sizeof cfg->admin_socket, "%s", v);
        } else if (strcmp(a, "--audit-dir") == 0) {
            snprintf(cfg->audit_dir, sizeof cfg->audit_dir, "%s", v);
        } else if (strcmp(a, "--vault-socket") == 0) {
            snprintf(cfg->vault_socket, sizeof cfg->vault_socket, "%s", v);
        } else if (strcmp(a, "--upstream-ca") == 0) {
            snprintf(cfg->upstream_ca, sizeof cfg->upstream_ca, "%s", v);
        } else if (strcmp(a, "--listen") == 0 || strcmp(a, "--dns") == 0) {
            bool dns = strcmp(a, "--dns") == 0;
            size_t *n = dns ? &cfg->n_dns_listen : &cfg->n_tcp_listen;
            struct sockaddr_storage *arr = dns ? cfg->dns_listen : cfg->tcp_listen;
            if (*n == EGRESS_MAX_LISTEN)
                return al_error_set(err, -EINVAL, "at most %d %s addresses", EGRESS_MAX_LISTEN, a);
            if (egress_parse_sockaddr(v, 0, &arr[*n]) < 0 || !strchr(v, ':'))
                return cfg__bad(err, a, v, "ADDR:PORT or [V6]:PORT");
            (*n)++;
        } else if (strcmp(a, "--resolver") == 0) {
            if (egress_parse_sockaddr(v, 53, &cfg->resolver) < 0)
                return cfg__bad(err, a, v, "ADDR, ADDR:PORT or [V6]:PORT");
            cfg->have_resolver = true;
        } else if (strcmp(a, "--workers") == 0) {
            rc = cfg__u32(a, v, 1, 64, &cfg->workers, err);
        } else if (strcmp(a, "--listener-mode") == 0) {
            if (cfg__listener_mode(v, &cfg->listener_mode) < 0)
                return cfg__bad(err, a, v, "auto, reuseport or shared");
            cfg->listener_mode_set = true;
        } else if (strcmp(a, "--relay") == 0) {
            if (strcmp(v, "splice") == 0)
                cfg->relay = EGRESS_RELAY_SPLICE;
            else if (strcmp(v, "copy") == 0)
                cfg->relay = EGRESS_RELAY_COPY;
            else
                return cfg__bad(err, a, v, "splice or copy");
        } else if (strcmp(a, "--upstream-mark") == 0) {
            rc = cfg__u32(a, v, 1, UINT32_MAX, &cfg->upstream_mark, err);
        } else if (strcmp(a, "--max-connections") == 0) {
            rc = cfg__u32(a, v, 1, 10000000, &cfg->max_conns, err);
        } else if (strcmp(a, "--max-sandbox-connections") == 0) {
            rc = cfg__u32(a, v, 1, 10000000, &cfg->max_conns_per_sandbox, err);
        } else if (strcmp(a, "--memory-budget") == 0) {
            rc = cfg__size(a, v, &cfg->memory_budget, err);
        } else if (strcmp(a, "--sandbox-memory") == 0) {
            rc = cfg__size(a, v, &cfg->sandbox_memory, err);
        } else if (strcmp(a, "--max-header-bytes") == 0) {
            if ((rc = cfg__size(a, v, &sz, err)) == 0) {
                if (sz < 1024 || sz > 1024 * 1024)
                    return cfg__bad(err, a, v, "a size between 1KiB and 1MiB");
                cfg->max_header_bytes = (uint32_t)sz;
            }
        } else if (strcmp(a, "--max-body") == 0) {
            rc = cfg__size(a, v, &cfg->max_body_bytes, err);
        } else if (strcmp(a, "--header-timeout") == 0) {
            rc = cfg__dur(a, v, &cfg->header_timeout_ms, err);
        } else if (strcmp(a, "--connect-timeout") == 0) {
            rc = cfg__dur(a, v, &cfg->connect_timeout_ms, err);
        } else if (strcmp(a, "--response-timeout") == 0) {
            rc = cfg__dur(a, v, &cfg->response_timeout_ms, err);
        } else if (strcmp(a, "--idle-timeout") == 0) {
            rc = cfg__dur(a, v, &cfg->idle_timeout_ms, err);
        } else if (strcmp(a, "--keepalive-timeout") == 0) {
            rc = cfg__dur(a, v, &cfg->keepalive_timeout_ms, err);
        } else if (strcmp(a, "--body-timeout") == 0) {
            rc = cfg__dur(a, v, &cfg->body_timeout_ms, err);
        } else if (strcmp(a, "--dns-min-ttl") == 0) {
            rc = cfg__dur_s(a, v, &cfg->dns_min_ttl, err);
        } else if (strcmp(a, "--dns-max-ttl") == 0) {
            rc = cfg__dur_s(a, v, &cfg->dns_max_ttl, err);
        } else if (strcmp(a, "--dns-neg-ttl") == 0) {
            rc = cfg__dur_s(a, v, &cfg->dns_neg_ttl, err);
        } else if (strcmp(a, "--dns-remember") == 0) {
            rc = cfg__dur_s(a, v, &cfg->dns_remember_s, err);
        } else if (strcmp(a, "--dns-timeout") == 0) {
            rc = cfg__dur(a, v, &cfg->dns_timeout_ms, err);
        } else if (strcmp(a, "--dns-max-name") == 0) {
            rc = cfg__u32(a, v, 16, 253, &cfg->dns_max_name, err);
        } else if (strcmp(a, "--dns-max-label") == 0) {
            rc = cfg__u32(a, v, 8, 63, &cfg->dns_max_label, err);
        } else if (strcmp(a, "--dns-entropy-min-len") == 0) {
            rc = cfg__u32(a, v, 4, 64, &cfg->dns_entropy_min_len, err);
        } else if (strcmp(a, "--dns-entropy-max") == 0) {
            char *end;
            double x = strtod(v, &end);
            if (!*v || *end || x <= 0 || x > 8)
                return cfg__bad(err, a, v, "bits per character between 0 and 8, e.g. 4.0");
            cfg->dns_entropy_max = x;
        } else if (strcmp(a, "--dns-rate") == 0) {
            rc = cfg__u32(a, v, 0, 1000000, &cfg->dns_rate, err);
            if (rc == 0 && !burst_given)
                cfg->dns_burst = cfg->dns_rate ? 2 * cfg->dns_rate : 0;
        } else if (strcmp(a, "--dns-burst") == 0) {
            rc = cfg__u32(a, v, 1, 2000000, &cfg->dns_burst, err);
            burst_given = true;
        } else if (strcmp(a, "--dns-inflight") == 0) {
            rc = cfg__u32(a, v, 1, 100000, &cfg->dns_inflight, err);
        } else if (strcmp(a, "--audit-allow-rate") == 0) {
            rc = cfg__u32(a, v, 0, 1000000, &cfg->audit_allow_rate, err);
            if (rc == 0 && !allow_burst_given)
                cfg->audit_allow_burst = 4 * cfg->audit_allow_rate;
        } else if (strcmp(a, "--audit-deny-rate") == 0) {
            rc = cfg__u32(a, v, 0, 1000000, &cfg->audit_deny_rate, err);
            if (rc == 0 && !deny_burst_given)
                cfg->audit_deny_burst = 4 * cfg->audit_deny_rate;
        } else if (strcmp(a, "--audit-allow-burst") == 0) {
            rc = cfg__u32(a, v, 1, 4000000, &cfg->audit_allow_burst, err);
            allow_burst_given = true;
        } else if (strcmp(a, "--audit-deny-burst") == 0) {
            rc = cfg__u32(a, v, 1, 4000000, &cfg->audit_deny_burst, err);
            deny_burst_given = true;
        } else if (strcmp(a, "--audit-aggregate-interval") == 0) {
            rc = cfg__dur(a, v, &cfg->audit_aggregate_ms, err);
            if (rc == 0 && (cfg->audit_aggregate_ms < 1000 || cfg->audit_aggregate_ms > 3600000))
                return cfg__bad(err, a, v, "a duration between 1s and 1h");
        } else if (strcmp(a, "--audit-rotate-size") == 0) {
            rc = cfg__size(a, v, &cfg->audit_rotate_bytes, err);
            if (rc == 0 && cfg->audit_rotate_bytes < 4096)
                return cfg__bad(err, a, v, "a size of at least 4KiB");
        } else if (strcmp(a, "--audit-retain-size") == 0) {
            rc = cfg__size0(a, v, &cfg->audit_retain_bytes, err);
        } else if (strcmp(a, "--audit-rotate-age") == 0) {
            rc = cfg__dur0(a, v, &cfg->audit_rotate_ms, err);
        } else if (strcmp(a, "--audit-retain-age") == 0) {
            rc = cfg__dur0(a, v, &cfg->audit_retain_ms, err);
        } else if (strcmp(a, "--audit-retain-files") == 0) {
            rc = cfg__u32(a, v, 0, 1000000, &cfg->audit_retain_files, err);
            if (rc == 0 && cfg->audit_retain_files == 1)
                return cfg__bad(err, a, v,
                                "0 (no bound) or at least 2 (the file being written "
                                "and one before it)");
        } else if (strcmp(a, "--vswitch") == 0) {
            if (strcmp(v, "auto") == 0)
                cfg->vswitch_mode = 0;
            else if (strcmp(v, "on") == 0)
                cfg->vswitch_mode = 1;
            else if (strcmp(v, "off") == 0)
                cfg->vswitch_mode = 2;
            else
                return cfg__bad(err, a, v, "auto, on or off");
        } else if (strcmp(a, "--vswitch-pins") == 0) {
            snprintf(cfg->vswitch_pins, sizeof cfg->vswitch_pins, "%s", v);
        } else if (strcmp(a, "--log-level") == 0 || strcmp(a, "--log-format") == 0) {
            /* handled by main */
        } else {
            return al_error_set(err, -EINVAL, "unknown option '%s' (see --help)", a);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

int egress_config_finish(struct egress_config *cfg, struct al_error *err)
{
    if (!cfg->admin_socket[0])
        snprintf(cfg->admin_socket, sizeof cfg->admin_socket, "%s/%s", cfg->state_dir,
                 AL_SOCK_EGRESS);
    if (!cfg->audit_dir[0])
        snprintf(cfg->audit_dir, sizeof cfg->audit_dir, "%s/%s", cfg->state_dir, AL_DIR_AUDIT);
    if (strcmp(cfg->vault_socket, "none") == 0) {
        cfg->vault_socket[0] = 0;
        cfg->no_vault = true;
    } else if (!cfg->no_vault && !cfg->vault_socket[0]) {
        snprintf(cfg->vault_socket, sizeof cfg->vault_socket, "%s/%s", cfg->state_dir,
                 AL_SOCK_VAULT);
    }
    const char *lm = getenv("AIRLOCK_EGRESS_LISTENER_MODE");
    if (!cfg->listener_mode_set && lm && *lm && cfg__listener_mode(lm, &cfg->listener_mode) < 0)
        return al_error_set(err, -EINVAL,
                            "AIRLOCK_EGRESS_LISTENER_MODE='%s': use auto, reuseport "
                            "or shared (or unset it)",
                            lm);
    if (!cfg->upstream_ca[0])
        snprintf(cfg->upstream_ca, sizeof cfg->upstream_ca, "%s",
                 "/etc/ssl/certs/ca-certificates.crt");
    if (cfg->n_tcp_listen == 0) {
        egress_parse_sockaddr("127.0.0.1:15001", 0, &cfg->tcp_listen[0]);
        cfg->n_tcp_listen = 1;
    }
    if (cfg->n_dns_listen == 0) {
        egress_parse_sockaddr("127.0.0.1:15053", 0, &cfg->dns_listen[0]);
        cfg->n_dns_listen = 1;
    }
    if (!cfg->have_resolver) {
        if (cfg__resolv_conf(&cfg->resolver) < 0)
            return al_error_set(err, -EINVAL,
                                "no upstream resolver: give --resolver ADDR (none "
                                "found in /etc/resolv.conf)");
        cfg->have_resolver = true;
    }
    if (cfg->audit_retain_bytes && cfg->audit_retain_bytes < 2 * cfg->audit_rotate_bytes)
        return al_error_set(err, -EINVAL,
                            "--audit-retain-size (%llu) is less than twice --audit-rotate-size "
                            "(%llu): retention would delete each file as soon as the next "
                            "begins; raise it or lower the rotate size",
                            (unsigned long long)cfg->audit_retain_bytes,
                            (unsigned long long)cfg->audit_rotate_bytes);
    if (!cfg->sandbox_memory)
        cfg->sandbox_memory = cfg->memory_budget / 4;
    if (cfg->sandbox_memory > cfg->memory_budget)
        return al_error_set(
            err, -EINVAL, "--sandbox-memory (%llu) is larger than --memory-budget (%llu)",
            (unsigned long long)cfg->sandbox_memory, (unsigned long long)cfg->memory_budget);
    if (cfg->dns_min_ttl > cfg->dns_max_ttl)
        return al_error_set(err, -EINVAL, "--dns-min-ttl is above --dns-max-ttl");
    if (cfg->max_conns_per_sandbox > cfg->max_conns)
        cfg->max_conns_per_sandbox = cfg->max_conns;
    return 0;
}
