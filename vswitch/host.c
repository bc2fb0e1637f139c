/* vswitch/host: the host around the switch.
 *
 * Owns: validation of the options (and their defaults), the host checks that decide whether
 * the switch may start (sysctls, bpffs, privileges, address-range and interface-name
 * collisions), mounting bpffs, and the nftables guard: the second layer that drops, in the
 * switch's network namespace, whatever arrives from a sandbox interface without the steer
 * mark, whatever would be forwarded to or from one, and whatever the host sends into one
 * without the reply mark. The guard matches interfaces by name prefix, so it is installed
 * once (vswitch_open), not per sandbox, and already covers an interface in the instant
 * between its creation and the attachment of the programs.
 */
#include "internal.h"

#include "common/paths.h"
#include "common/util.h"

#include <bpf/bpf.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <linux/capability.h>
#include <nftables/libnftables.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <arpa/inet.h>

#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC 0xcafe4a11
#endif
#define VS_BPF_TCX_INGRESS 46 /* missing from Debian 12's UAPI headers */

/* ---- settings -------------------------------------------------------------------------- */

static int host__parse_cidr(const char *s, uint32_t *addr, unsigned *len, struct al_error *err)
{
    char buf[32];
    const char *slash = strchr(s, '/');
    if (!slash || (size_t)(slash - s) >= sizeof buf)
        return al_error_set(err, -EINVAL, "address range '%s' is not an IPv4 CIDR such as %s", s,
                            VSWITCH_DEFAULT_RANGE);
    memcpy(buf, s, (size_t)(slash - s));
    buf[slash - s] = '\0';
    struct in_addr a;
    if (inet_pton(AF_INET, buf, &a) != 1)
        return al_error_set(err, -EINVAL, "address range '%s': '%s' is not an IPv4 address", s,
                            buf);
    char *end = NULL;
    errno = 0;
    long l = strtol(slash + 1, &end, 10);
    if (errno || !end || *end || end == slash + 1 || l < 1 || l > 31)
        return al_error_set(err, -EINVAL, "address range '%s': prefix length must be 1..31", s);
    uint32_t mask = l == 0 ? 0 : htonl(0xffffffffu << (32 - l));
    if (a.s_addr & ~mask) {
        struct in_addr net = {a.s_addr & mask};
        char nb[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &net, nb, sizeof nb);
        return al_error_set(err, -EINVAL,
                            "address range '%s' has host bits set; did you mean "
                            "%s/%ld?",
                            s, nb, l);
    }
    *addr = a.s_addr;
    *len = (unsigned)l;
    return 0;
}

/* Lowest address of the range, host order, and whether it overlaps reserved space that the
 * programs treat as a bad destination (0/8, 127/8, 224/3). */
static bool host__range_reserved(uint32_t addr_be, unsigned len)
{
    uint32_t lo = ntohl(addr_be);
    uint32_t hi = lo | (len == 32 ? 0 : (0xffffffffu >> len));
    uint8_t a = lo >> 24, b = hi >> 24;
    for (unsigned top = a; top <= b; top++) {
        if (top == 0 || top == 127 || top >= 224)
            return true;
    }
    return false;
}

static int host__name_ok(const char *s, size_t max, bool allow_underscore)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || !islower((unsigned char)s[0]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(islower(c) || isdigit(c) || (allow_underscore && (c == '_' || isupper(c)))))
            return 0;
    }
    return 1;
}

int vswitch__settings(const struct vswitch_opts *o, struct vs_settings *s, struct al_error *err)
{
    static const struct vswitch_opts none;
    if (!o)
        o = &none;
    memset(s, 0, sizeof *s);

    const char *sd = o->state_dir ? o->state_dir : al_state_dir();
    if (!sd || sd[0] != '/')
        return al_error_set(err, -EINVAL, "state directory '%s' must be an absolute path",
                            sd ? sd : "");
    char real[PATH_MAX];
    if (realpath(sd, real))
        sd = real;
    if (snprintf(s->state_dir, sizeof s->state_dir, "%s", sd) >= (int)sizeof s->state_dir)
        return al_error_set(err, -ENAMETOOLONG, "state directory path is too long");

    if (o->pin_dir) {
        if (o->pin_dir[0] != '/')
            return al_error_set(err, -EINVAL,
                                "pin directory '%s' must be an absolute path on "
                                "bpffs (e.g. %s/airlock/NAME)",
                                o->pin_dir, VS_BPFFS_ROOT);
        if (snprintf(s->pin_dir, sizeof s->pin_dir, "%s", o->pin_dir) >= (int)sizeof s->pin_dir)
            return al_error_set(err, -ENAMETOOLONG, "pin directory path is too long");
        size_t n = strlen(s->pin_dir);
        while (n > 1 && s->pin_dir[n - 1] == '/')
            s->pin_dir[--n] = '\0';
    } else {
        if (sodium_init() < 0)
            return al_error_set(err, -EIO, "libsodium failed to initialise");
        unsigned char h[8];
        crypto_generichash(h, sizeof h, (const unsigned char *)s->state_dir, strlen(s->state_dir),
                           NULL, 0);
        char hex[17];
        sodium_bin2hex(hex, sizeof hex, h, sizeof h);
        snprintf(s->pin_dir, sizeof s->pin_dir, "%s/airlock/%s", VS_BPFFS_ROOT, hex);
    }

    int rc = host__parse_cidr(o->range ? o->range : VSWITCH_DEFAULT_RANGE, &s->range_addr,
                              &s->range_len, err);
    if (rc)
        return rc;
    s->prefix_len = o->prefix_len ? o->prefix_len : VSWITCH_DEFAULT_PREFIX_LEN;
    if (s->prefix_len != 30 && s->prefix_len != 31)
        return al_error_set(err, -EINVAL,
                            "per-sandbox prefix length %u: use 30 (default) or "
                            "31",
                            s->prefix_len);
    if (s->range_len > s->prefix_len)
        return al_error_set(err, -EINVAL,
                            "address range /%u is smaller than one sandbox "
                            "subnet (/%u)",
                            s->range_len, s->prefix_len);
    if (host__range_reserved(s->range_addr, s->range_len))
        return al_error_set(err, -EINVAL,
                            "address range overlaps 0.0.0.0/8, 127.0.0.0/8 or "
                            "224.0.0.0/3: use a private range such as %s",
                            VSWITCH_DEFAULT_RANGE);

    const char *pfx = o->ifname_prefix ? o->ifname_prefix : VSWITCH_DEFAULT_IFNAME_PREFIX;
    if (!host__name_ok(pfx, 10, false))
        return al_error_set(err, -EINVAL,
                            "interface prefix '%s': use 1..10 characters of "
                            "[a-z0-9], starting with a letter",
                            pfx);
    snprintf(s->ifname_prefix, sizeof s->ifname_prefix, "%s", pfx);
    if (o->nft_table) {
        if (!host__name_ok(o->nft_table, 31, true))
            return al_error_set(err, -EINVAL,
                                "nftables table name '%s': use up to 31 "
                                "characters of [a-zA-Z0-9_], starting with a lowercase letter",
                                o->nft_table);
        snprintf(s->nft_table, sizeof s->nft_table, "%s", o->nft_table);
    } else {
        snprintf(s->nft_table, sizeof s->nft_table, "airlock_%s", pfx);
    }

    s->steer_mark = o->steer_mark ? o->steer_mark : VSWITCH_DEFAULT_STEER_MARK;
    s->reply_mark = o->reply_mark ? o->reply_mark : VSWITCH_DEFAULT_REPLY_MARK;
    if (s->steer_mark == s->reply_mark)
        return al_error_set(err, -EINVAL, "steer mark and reply mark must differ (both 0x%x)",
                            s->steer_mark);
    s->route_table = o->route_table ? o->route_table : VSWITCH_DEFAULT_ROUTE_TABLE;
    if (s->route_table >= 253 && s->route_table <= 255)
        return al_error_set(err, -EINVAL,
                            "route table %u is one of the kernel's own "
                            "(default, main, local): pick another number",
                            s->route_table);
    s->rule_priority = o->rule_priority ? o->rule_priority : VSWITCH_DEFAULT_RULE_PRIORITY;
    if (s->rule_priority >= 32766)
        return al_error_set(err, -EINVAL,
                            "rule priority %u must be below 32766 (the main "
                            "table's rule)",
                            s->rule_priority);
    if (o->attach_mode != VSWITCH_ATTACH_AUTO && o->attach_mode != VSWITCH_ATTACH_TCX &&
        o->attach_mode != VSWITCH_ATTACH_CLSACT)
        return al_error_set(err, -EINVAL, "unknown attach mode %d", (int)o->attach_mode);
    s->attach_mode = o->attach_mode;
    s->max_ifaces = o->max_ifaces ? o->max_ifaces : VSWITCH_DEFAULT_MAX_IFACES;
    if (s->max_ifaces > VSWITCH_MAX_IFACES_LIMIT)
        return al_error_set(err, -EINVAL,
                            "interface table of %u entries: use 1..%u (network.max_interfaces)",
                            s->max_ifaces, VSWITCH_MAX_IFACES_LIMIT);
    s->allow_ip_forward = o->allow_ip_forward;
    return 0;
}

/* ---- sysctls ---------------------------------------------------------------------------- */

int vswitch__sysctl_read(const char *path, long *value)
{
    char p[256], buf[64];
    snprintf(p, sizeof p, "/proc/sys/%s", path);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n <= 0)
        return n < 0 ? -e : -EIO;
    buf[n] = '\0';
    char *end = NULL;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno || end == buf)
        return -EINVAL;
    *value = v;
    return 0;
}

int vswitch__sysctl_write(const char *path, const char *value)
{
    char p[256];
    snprintf(p, sizeof p, "/proc/sys/%s", path);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = strlen(value);
    ssize_t n = write(fd, value, len);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    return (size_t)n == len ? 0 : -EIO;
}

/* ---- bpffs ------------------------------------------------------------------------------ */

static bool host__on_bpffs(const char *path)
{
    struct statfs st;
    return statfs(path, &st) == 0 && (unsigned long)st.f_type == BPF_FS_MAGIC;
}

/* The nearest existing ancestor of path (path itself included) into out. */
static void host__existing_ancestor(const char *path, char *out, size_t len)
{
    snprintf(out, len, "%s", path);
    struct stat st;
    while (stat(out, &st) != 0) {
        char *slash = strrchr(out, '/');
        if (!slash || slash == out) {
            snprintf(out, len, "/");
            return;
        }
        *slash = '\0';
    }
}

static bool host__under_bpffs_root(const char *pin_dir)
{
    size_t n = strlen(VS_BPFFS_ROOT);
    return strncmp(pin_dir, VS_BPFFS_ROOT, n) == 0 && (pin_dir[n] == '/' || pin_dir[n] == 0);
}

int vswitch__bpffs_ensure(const char *pin_dir, struct al_error *err)
{
    char anc[PATH_MAX];
    host__existing_ancestor(pin_dir, anc, sizeof anc);
    if (host__on_bpffs(anc))
        return 0;
    if (!host__under_bpffs_root(pin_dir) || strcmp(anc, VS_BPFFS_ROOT) != 0)
        return al_error_set(err, -ENOTSUP,
                            "pin directory %s is not on a bpffs mount (nearest "
                            "existing directory: %s); mount one (mount -t bpf bpf DIR) or use "
                            "the default under %s",
                            pin_dir, anc, VS_BPFFS_ROOT);
    if (mount("bpf", VS_BPFFS_ROOT, "bpf", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") != 0)
        return al_error_set(err, -errno,
                            "bpffs is not mounted at %s and mounting it failed "
                            "(%s): mount it with `mount -t bpf bpf %s` (add it to /etc/fstab)",
                            VS_BPFFS_ROOT, strerror(errno), VS_BPFFS_ROOT);
    return 0;
}

/* ---- nftables guard --------------------------------------------------------------------- */

static int host__nft_run(const char *script, const char *what, struct al_error *err)
{
    struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!ctx)
        return al_error_set(err, -ENOMEM, "%s: cannot create an nftables context", what);
    nft_ctx_buffer_output(ctx);
    nft_ctx_buffer_error(ctx);
    int rc = nft_run_cmd_from_buffer(ctx, script);
    if (rc != 0) {
        const char *e = nft_ctx_get_error_buffer(ctx);
        char first[300] = "";
        if (e) {
            snprintf(first, sizeof first, "%s", e);
            char *nl = strchr(first, '\n');
            if (nl)
                *nl = '\0';
        }
        al_error_set(err, -EIO,
                     "%s failed: %s (is the nf_tables module available, and do "
                     "we have CAP_NET_ADMIN?)",
                     what, first[0] ? first : "nftables error");
        nft_ctx_free(ctx);
        return -EIO;
    }
    nft_ctx_free(ctx);
    return 0;
}

/* One nftables transaction: create the tables and chains if missing, flush them and add
 * the rules. The kernel applies the whole batch atomically, so re-installing an existing
 * guard (every vswitch_open) never leaves a moment without rules. */
int vswitch__guard_install(const struct vs_settings *s, struct al_error *err)
{
    const char *t = s->nft_table;
    const char *p = s->ifname_prefix;
    char script[4096];
    int n = snprintf(
        script, sizeof script,
        "add table inet %1$s\n"
        "add chain inet %1$s sandbox_prerouting { type filter hook prerouting priority -300; "
        "policy accept; }\n"
        "add chain inet %1$s sandbox_input { type filter hook input priority -300; "
        "policy accept; }\n"
        "add chain inet %1$s sandbox_forward { type filter hook forward priority -300; "
        "policy accept; }\n"
        "add chain inet %1$s sandbox_output { type filter hook output priority -300; "
        "policy accept; }\n"
        "flush chain inet %1$s sandbox_prerouting\n"
        "flush chain inet %1$s sandbox_input\n"
        "flush chain inet %1$s sandbox_forward\n"
        "flush chain inet %1$s sandbox_output\n"
        "add rule inet %1$s sandbox_prerouting iifname \"%2$s*\" meta mark != 0x%3$x counter "
        "drop comment \"airlock vswitch: only packets steered to the proxy\"\n"
        "add rule inet %1$s sandbox_input iifname \"%2$s*\" meta mark != 0x%3$x counter drop\n"
        "add rule inet %1$s sandbox_forward iifname \"%2$s*\" counter drop comment "
        "\"airlock vswitch: nothing is routed for sandboxes\"\n"
        "add rule inet %1$s sandbox_forward oifname \"%2$s*\" counter drop\n"
        "add rule inet %1$s sandbox_output oifname \"%2$s*\" meta mark != 0x%4$x counter drop "
        "comment \"airlock vswitch: only the proxy's replies enter a sandbox\"\n"
        "add table arp %1$s\n"
        "add chain arp %1$s sandbox_input { type filter hook input priority -300; "
        "policy accept; }\n"
        "add chain arp %1$s sandbox_output { type filter hook output priority -300; "
        "policy accept; }\n"
        "flush chain arp %1$s sandbox_input\n"
        "flush chain arp %1$s sandbox_output\n"
        "add rule arp %1$s sandbox_input iifname \"%2$s*\" counter drop\n"
        "add rule arp %1$s sandbox_output oifname \"%2$s*\" counter drop\n",
        t, p, s->steer_mark, s->reply_mark);
    if (n < 0 || (size_t)n >= sizeof script)
        return al_error_set(err, -E2BIG, "nftables guard script too long");
    return host__nft_run(script, "installing the nftables guard", err);
}

int vswitch__guard_remove(const char *t, struct al_error *err)
{
    /* "add" first makes the delete succeed when a table is already gone. */
    char script[512];
    snprintf(script, sizeof script,
             "add table inet %1$s\ndelete table inet %1$s\nadd table arp %1$s\n"
             "delete table arp %1$s\n",
             t);
    return host__nft_run(script, "removing the nftables guard", err);
}

int vswitch__guard_present(const char *t, bool *present, struct al_error *err)
{
    struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!ctx)
        return al_error_set(err, -ENOMEM, "cannot create an nftables context");
    nft_ctx_buffer_output(ctx);
    nft_ctx_buffer_error(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "list chain inet %s sandbox_prerouting", t);
    bool v4 = nft_run_cmd_from_buffer(ctx, cmd) == 0;
    const char *out = nft_ctx_get_output_buffer(ctx);
    bool rule = v4 && out && strstr(out, "drop");
    snprintf(cmd, sizeof cmd, "list chain arp %s sandbox_input", t);
    bool arp = nft_run_cmd_from_buffer(ctx, cmd) == 0;
    nft_ctx_free(ctx);
    *present = rule && arp;
    return 0;
}

/* ---- host checks ------------------------------------------------------------------------ */

/* The checks' results as they are added: at most max of them in res, all of them counted. */
struct host__report {
    struct vswitch_check *res;
    size_t max, n;
    int failed;
};

static void host__add(struct host__report *r, const char *name, bool ok, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void host__add(struct host__report *r, const char *name, bool ok, const char *fmt, ...)
{
    if (!ok)
        r->failed++;
    if (r->n >= r->max)
        return;
    struct vswitch_check *c = &r->res[r->n++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->ok = ok;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
}

static bool host__has_cap(int cap)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) != 0)
        return false;
    return (d[cap / 32].effective >> (cap % 32)) & 1;
}

/* Interfaces named with the prefix: ours (our MAC signature) or foreign. */
struct host__links {
    const char *prefix;
    int *ours;
    size_t n_ours, cap_ours;
    char foreign[16];
};

static int host__links_cb(const struct vs_nl_link_info *l, void *arg)
{
    struct host__links *h = arg;
    if (strncmp(l->name, h->prefix, strlen(h->prefix)) != 0)
        return 0;
    if (!vswitch__mac_is_ours(l->mac)) {
        if (!h->foreign[0])
            snprintf(h->foreign, sizeof h->foreign, "%s", l->name);
        return 0;
    }
    if (h->n_ours == h->cap_ours) {
        size_t cap = h->cap_ours ? h->cap_ours * 2 : 64;
        int *p = realloc(h->ours, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        h->ours = p;
        h->cap_ours = cap;
    }
    h->ours[h->n_ours++] = l->ifindex;
    return 0;
}

struct host__overlap {
    const struct vs_settings *s;
    const struct host__links *links;
    char found[160];
};

static bool host__prefix_overlaps(uint32_t a, unsigned alen, uint32_t b, unsigned blen)
{
    unsigned len = alen < blen ? alen : blen;
    uint32_t mask = len == 0 ? 0 : htonl(0xffffffffu << (32 - len));
    return (a & mask) == (b & mask);
}

static int host__route_overlap_cb(const struct vs_nl_route_info *r, void *arg)
{
    struct host__overlap *o = arg;
    if (r->dst_len == 0 || r->table == o->s->route_table)
        return 0;
    if (!host__prefix_overlaps(r->dst, r->dst_len, o->s->range_addr, o->s->range_len))
        return 0;
    if (r->protocol == VS_RTPROT && r->dst_len == 32) {
        for (size_t i = 0; i < o->links->n_ours; i++) {
            if (o->links->ours[i] == r->oif)
                return 0;
        }
    }
    char b[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &r->dst, b, sizeof b);
    snprintf(o->found, sizeof o->found, "route %s/%u (table %u)", b, r->dst_len, r->table);
    return 1;
}

static int host__addr_overlap_cb(const struct vs_nl_addr_info *a, void *arg)
{
    struct host__overlap *o = arg;
    if (!host__prefix_overlaps(a->addr, 32, o->s->range_addr, o->s->range_len))
        return 0;
    char b[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->addr, b, sizeof b);
    snprintf(o->found, sizeof o->found, "address %s on interface %d", b, a->ifindex);
    return 1;
}

int vswitch__host_checks(const struct vs_settings *s, struct vswitch_check *res, size_t max,
                         size_t *n)
{
    struct host__report rep = {.res = res, .max = max};
    long v = 0;

    bool admin = host__has_cap(CAP_NET_ADMIN);
    bool bpf = host__has_cap(39 /* CAP_BPF */) || host__has_cap(CAP_SYS_ADMIN);
    host__add(&rep, "privileges", admin && bpf,
              admin && bpf ? "CAP_NET_ADMIN and CAP_BPF present"
                           : "missing %s%s%s: run the switch as root (airlockd does)",
              admin ? "" : "CAP_NET_ADMIN", !admin && !bpf ? " and " : "", bpf ? "" : "CAP_BPF");

    char anc[PATH_MAX];
    host__existing_ancestor(s->pin_dir, anc, sizeof anc);
    if (host__on_bpffs(anc))
        host__add(&rep, "bpffs", true, "%s is on bpffs", anc);
    else if (host__under_bpffs_root(s->pin_dir) && strcmp(anc, VS_BPFFS_ROOT) == 0)
        host__add(&rep, "bpffs", true, "%s is not mounted yet; the switch mounts it at start",
                  VS_BPFFS_ROOT);
    else
        host__add(&rep, "bpffs", false,
                  "pin directory %s is not on bpffs: mount bpffs there or use the default",
                  s->pin_dir);

    if (vswitch__sysctl_read("net/ipv4/ip_forward", &v) != 0)
        host__add(&rep, "net.ipv4.ip_forward", false, "cannot be read");
    else if (v == 0)
        host__add(&rep, "net.ipv4.ip_forward", true, "0");
    else if (s->allow_ip_forward)
        host__add(&rep, "net.ipv4.ip_forward", true,
                  "%ld, accepted because allow_ip_forward is set (the guard's forward chain "
                  "is the remaining second layer)",
                  v);
    else
        host__add(&rep, "net.ipv4.ip_forward", false,
                  "is %ld: a sandbox packet that got past the switch could be routed onward. "
                  "Set it to 0 (sysctl -w net.ipv4.ip_forward=0, and in /etc/sysctl.d), or run "
                  "airlock in its own network namespace",
                  v);

    if (vswitch__sysctl_read("net/ipv4/tcp_fwmark_accept", &v) != 0)
        host__add(&rep, "net.ipv4.tcp_fwmark_accept", false, "cannot be read");
    else
        host__add(&rep, "net.ipv4.tcp_fwmark_accept", v == 0,
                  v == 0 ? "0"
                         : "is %ld: accepted connections would take the steer mark instead "
                           "of the proxy's reply mark, and their replies would be routed "
                           "back into the host. Set it to 0 (sysctl -w "
                           "net.ipv4.tcp_fwmark_accept=0)",
                  v);

    long all = 0, def = 0;
    if (vswitch__sysctl_read("net/ipv4/conf/all/src_valid_mark", &all) != 0 ||
        vswitch__sysctl_read("net/ipv4/conf/default/src_valid_mark", &def) != 0)
        host__add(&rep, "net.ipv4.conf.*.src_valid_mark", false, "cannot be read");
    else
        host__add(&rep, "net.ipv4.conf.*.src_valid_mark", all == 0 && def == 0,
                  all == 0 && def == 0
                      ? "0"
                      : "all=%ld default=%ld: the reverse-path check would use the steer "
                        "mark, see every sandbox address as local and drop all sandbox "
                        "traffic. Set both to 0",
                  all, def);

    long rpa = 0, rpd = 0;
    if (vswitch__sysctl_read("net/ipv4/conf/all/rp_filter", &rpa) == 0 &&
        vswitch__sysctl_read("net/ipv4/conf/default/rp_filter", &rpd) == 0)
        host__add(&rep, "net.ipv4.conf.*.rp_filter", true,
                  "all=%ld default=%ld (any value works: each sandbox has a /32 route "
                  "through its own interface)",
                  rpa, rpd);

    struct vs_nl nl = {.fd = -1};
    if (vswitch_nl_open(&nl, NULL) == 0) {
        struct host__links links = {.prefix = s->ifname_prefix};
        int r = vswitch_nl_link_dump(&nl, host__links_cb, &links, NULL);
        if (r < 0)
            host__add(&rep, "interface prefix", false, "cannot list interfaces");
        else if (links.foreign[0])
            host__add(&rep, "interface prefix", false,
                      "interface %s is named like a sandbox interface (%s*) but is not one: "
                      "the guard would drop its traffic. Rename it or choose another "
                      "ifname_prefix",
                      links.foreign, s->ifname_prefix);
        else
            host__add(&rep, "interface prefix", true, "no foreign interface is named %s*",
                      s->ifname_prefix);

        struct host__overlap o = {.s = s, .links = &links};
        r = vswitch_nl_route_dump(&nl, host__route_overlap_cb, &o, NULL);
        if (r == 0)
            r = vswitch_nl_addr_dump(&nl, host__addr_overlap_cb, &o, NULL);
        char rb[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &s->range_addr, rb, sizeof rb);
        if (r < 0)
            host__add(&rep, "address range", false, "cannot list routes and addresses");
        else
            host__add(&rep, "address range", r == 0,
                      r == 0 ? "%s/%u is free"
                             : "%s/%u overlaps %s: sandboxes would shadow (or be shadowed by) "
                               "it. Choose another range",
                      rb, s->range_len, o.found);
        free(links.ours);
        vswitch_nl_close(&nl);
    } else {
        host__add(&rep, "rtnetlink", false, "cannot open a netlink socket");
    }

    struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
    bool nft_ok = false;
    if (ctx) {
        nft_ctx_buffer_output(ctx);
        nft_ctx_buffer_error(ctx);
        nft_ok = nft_run_cmd_from_buffer(ctx, "list tables") == 0;
        nft_ctx_free(ctx);
    }
    host__add(&rep, "nftables", nft_ok,
              nft_ok ? "libnftables can talk to the kernel"
                     : "libnftables cannot list tables: load nf_tables (modprobe nf_tables) "
                       "and run as root");

    __u32 cnt = 0;
    int tcx = bpf_prog_query(1 /* lo */, VS_BPF_TCX_INGRESS, 0, NULL, NULL, &cnt);
    host__add(&rep, "attach", true,
              tcx == 0 ? "clsact filters by default; TCX links available (kernel >= 6.6)"
                       : "clsact filters (this kernel has no TCX)");
    char kernel[65];
    bool rp = vswitch_assign_takes_reuseport(kernel, sizeof kernel);
    host__add(&rep, "proxy sockets", true,
              rp ? "kernel %s: bpf_sk_assign takes SO_REUSEPORT sockets (airlock-egress: one "
                   "listening socket per worker)"
                 : "kernel %s < 6.5: bpf_sk_assign refuses SO_REUSEPORT sockets; the proxy "
                   "must register one plain socket per address (airlock-egress chooses "
                   "--listener-mode shared by itself; a SO_REUSEPORT socket is refused)",
              kernel);
    *n = rep.n;
    return rep.failed;
}
