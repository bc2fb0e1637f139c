/* vswitch/cli: `airlock vswitch status|check|teardown`, for operators.
 *
 * Owns: the text and JSON presentation of a switch instance (configuration, the proxy's
 * registered sockets, the guard, every interface with its sandbox and counters) read from
 * the pins through a view, the host checks of vswitch_open runnable on their own, and the
 * operator's teardown (which takes the instance's lock, so never while airlockd runs).
 */
#include "internal.h"

#include "common/cleanup.h"
#include "common/json.h"
#include "common/paths.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

static void cli__usage(FILE *f)
{
    fprintf(f, "usage: airlock vswitch <command> [options]\n\n"
               "commands:\n"
               "  status [--json]   the switch of this state directory: configuration, proxy\n"
               "                    sockets, guard, sandboxes, interfaces, counters\n"
               "  check             the host settings the switch needs (what it checks at\n"
               "                    start); exit 1 if one is unsafe\n"
               "  teardown [--force]  remove the switch of this state directory: sandbox\n"
               "                    interfaces, pins, rule, route table, nftables guard.\n"
               "                    Stop airlockd first; --force also ends attached sandboxes'\n"
               "                    networks\n\n"
               "The state directory (--state-dir, before or after the group) says which\n"
               "switch instance to read. Run as root, in the switch's network namespace.\n");
}

static const char *cli__ip(uint32_t be, char *buf)
{
    struct in_addr a = {be};
    inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
    return buf;
}

static const char *cli__mac(const uint8_t m[6], char *buf)
{
    snprintf(buf, 18, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return buf;
}

struct cli__status {
    const struct vswitch_view *v;
    bool json;
    json_t *arr;
    size_t sandboxes, pool;
};

static json_t *cli__counters_json(const struct vswitch_counters *c)
{
    json_t *o = json_object();
    for (unsigned r = 0; r < VSWITCH_REASON_MAX; r++) {
        if (!c->packets[r])
            continue;
        json_object_set_new(o, vswitch_reason_name(r),
                            json_pack("{s:I, s:I}", "packets", (json_int_t)c->packets[r], "bytes",
                                      (json_int_t)c->bytes[r]));
    }
    return o;
}

static void cli__counters_text(const struct vswitch_counters *c, const char *indent)
{
    uint64_t handled = 0, dropped = 0;
    for (unsigned r = 0; r < VSWITCH_REASON_MAX; r++) {
        if (r == VS_R_IN_REPLY || r == VS_R_IN_DROPPED)
            continue;
        if (vswitch_reason_is_drop(r))
            dropped += c->packets[r];
        else
            handled += c->packets[r];
    }
    printf("%sfrom sandbox: %" PRIu64 " handled, %" PRIu64 " dropped; to sandbox: %" PRIu64
           " delivered, %" PRIu64 " dropped\n",
           indent, handled, dropped, c->packets[VS_R_IN_REPLY], c->packets[VS_R_IN_DROPPED]);
    bool any = false;
    for (unsigned r = 0; r < VSWITCH_REASON_MAX; r++) {
        if (!c->packets[r])
            continue;
        printf("%s%s%s=%" PRIu64, any ? " " : indent, any ? "" : "", vswitch_reason_name(r),
               c->packets[r]);
        any = true;
    }
    if (any)
        printf("\n");
}

static int cli__iface_cb(const struct vswitch_iface_info *i, void *arg)
{
    struct cli__status *st = arg;
    struct vswitch_counters c;
    if (vswitch_view_counters(st->v, i->host_ifindex, &c) != 0)
        memset(&c, 0, sizeof c);
    bool pool = i->iface.flags & VS_IF_POOL;
    if (pool)
        st->pool++;
    else
        st->sandboxes++;
    char a[INET_ADDRSTRLEN], g[INET_ADDRSTRLEN], hm[18], gm[18];
    const char *kind = i->iface.flags & VS_IF_TAP ? "tap" : "veth";
    if (st->json) {
        json_t *o =
            json_pack("{s:i, s:s, s:s, s:I, s:s, s:s, s:s, s:i, s:s, s:s, s:b}", "ifindex",
                      i->host_ifindex, "ifname", i->iface.ifname, "kind", kind, "sandbox_id",
                      (json_int_t)i->iface.sandbox_id, "label", i->iface.label, "address",
                      cli__ip(i->iface.addr, a), "gateway", cli__ip(i->iface.gateway, g), "slot",
                      (int)i->iface.slot, "host_mac", cli__mac(i->iface.host_mac, hm), "guest_mac",
                      cli__mac(i->iface.guest_mac, gm), "pool", pool);
        json_object_set_new(o, "counters", cli__counters_json(&c));
        json_array_append_new(st->arr, o);
        return 0;
    }
    if (pool)
        printf("  %-8s ifindex %-5d %-15s (pool: not given to a sandbox yet)\n", i->iface.ifname,
               i->host_ifindex, cli__ip(i->iface.addr, a));
    else
        printf("  %-8s ifindex %-5d %-4s sandbox %" PRIu64 "%s%s%s  %s via %s\n", i->iface.ifname,
               i->host_ifindex, kind, (uint64_t)i->iface.sandbox_id, i->iface.label[0] ? " (" : "",
               i->iface.label, i->iface.label[0] ? ")" : "", cli__ip(i->iface.addr, a),
               cli__ip(i->iface.gateway, g));
    cli__counters_text(&c, "           ");
    return 0;
}

static int cli__status(bool json)
{
    struct al_error err = {0};
    struct vswitch_view *v = NULL;
    if (vswitch_view_open(NULL, &v, &err) != 0) {
        fprintf(stderr, "airlock vswitch status: %s\n", al_error_str(&err));
        return 1;
    }
    struct vs_config cfg;
    if (vswitch_view_config(v, &cfg) != 0) {
        fprintf(stderr, "airlock vswitch status: cannot read the configuration map\n");
        vswitch_view_close(v);
        return 1;
    }
    bool guard = false;
    vswitch__guard_present(cfg.nft_table, &guard, NULL);
    char rb[INET_ADDRSTRLEN];
    const char *mode = cfg.attach_mode == VS_ATTACH_TCX ? "tcx" : "clsact";
    struct cli__status st = {.v = v, .json = json};
    uint64_t cookies[VS_SOCK_MAX] = {0};
    bool reg[VS_SOCK_MAX];
    for (unsigned k = 0; k < VS_SOCK_MAX; k++)
        reg[k] = vswitch_proxy_registered(v, (enum vswitch_proxy_sock)k, &cookies[k]);
    struct vswitch_counters unknown;
    if (vswitch_view_counters(v, 0, &unknown) != 0)
        memset(&unknown, 0, sizeof unknown);
    unsigned table = 0;
    vswitch_view_max_ifaces(v, &table);

    if (json) {
        char cidr[40];
        snprintf(cidr, sizeof cidr, "%s/%u", cli__ip(cfg.range_addr, rb), cfg.range_len);
        json_t *proxy = json_object();
        for (unsigned k = 0; k < VS_SOCK_MAX; k++) {
            json_t *p = json_pack("{s:b}", "registered", reg[k]);
            if (reg[k])
                json_object_set_new(p, "cookie", json_integer((json_int_t)cookies[k]));
            json_object_set_new(proxy, vswitch_proxy_sock_name((enum vswitch_proxy_sock)k), p);
        }
        st.arr = json_array();
        vswitch_view_foreach(v, cli__iface_cb, &st);
        json_t *o = json_pack(
            "{s:s, s:s, s:i, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:o, s:o, s:i, s:i, s:I}",
            "pin_dir", v->pin_dir, "range", cidr, "prefix_len", (int)cfg.prefix_len,
            "ifname_prefix", cfg.ifname_prefix, "nft_table", cfg.nft_table, "attach_mode", mode,
            "steer_mark", (json_int_t)cfg.steer_mark, "reply_mark", (json_int_t)cfg.reply_mark,
            "route_table", (json_int_t)cfg.route_table, "rule_priority",
            (json_int_t)cfg.rule_priority, "guard_present", guard, "proxy", proxy, "interfaces",
            st.arr, "sandboxes", (int)st.sandboxes, "pool", (int)st.pool, "unknown_iface_dropped",
            (json_int_t)unknown.packets[VS_R_UNKNOWN_IFACE]);
        json_object_set_new(o, "max_interfaces", json_integer(table));
        char *s = al_json_dump(o);
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
        vswitch_view_close(v);
        return 0;
    }

    printf("vswitch %s\n", v->pin_dir);
    printf("  range %s/%u, one /%u per sandbox, interfaces %s*, attach %s\n",
           cli__ip(cfg.range_addr, rb), cfg.range_len, cfg.prefix_len, cfg.ifname_prefix, mode);
    printf("  marks steer 0x%x reply 0x%x, rule priority %u -> table %u\n", cfg.steer_mark,
           cfg.reply_mark, cfg.rule_priority, cfg.route_table);
    printf("  guard: nftables tables inet/arp %s %s\n", cfg.nft_table,
           guard ? "present" : "ABSENT in this network namespace");
    printf("  proxy sockets:");
    for (unsigned k = 0; k < VS_SOCK_MAX; k++)
        printf(" %s=%s", vswitch_proxy_sock_name((enum vswitch_proxy_sock)k),
               reg[k] ? "registered" : "MISSING");
    printf("\n");
    if (!reg[VS_SOCK_TCP] || !reg[VS_SOCK_DNS_UDP] || !reg[VS_SOCK_DNS_TCP])
        printf("  (traffic for a missing socket is dropped and counted as no_proxy: is "
               "airlock-egress running?)\n");
    printf("interfaces:\n");
    vswitch_view_foreach(v, cli__iface_cb, &st);
    printf("%zu sandbox(es), %zu pooled, of %u the interface table holds; %" PRIu64
           " packet(s) dropped on unknown interfaces\n",
           st.sandboxes, st.pool, table, unknown.packets[VS_R_UNKNOWN_IFACE]);
    vswitch_view_close(v);
    return 0;
}

/* The options an existing instance was started with (so that checks and teardown speak of
 * the same switch); false if none was started for this state directory. */
struct cli__inst {
    struct vswitch_opts o;
    char pin_dir[PATH_MAX], ifp[16], nft[32], cidr[40];
};

static bool cli__instance(struct cli__inst *in, struct al_error *err)
{
    memset(in, 0, sizeof *in);
    struct vswitch_view *v = NULL;
    if (vswitch__read_instance(al_state_dir(), in->pin_dir, sizeof in->pin_dir, err) != 0 ||
        vswitch_view_open_pins(in->pin_dir, &v, err) != 0)
        return false;
    struct vs_config cfg;
    bool ok = vswitch_view_config(v, &cfg) == 0;
    if (ok) {
        char rb[INET_ADDRSTRLEN];
        snprintf(in->cidr, sizeof in->cidr, "%s/%u", cli__ip(cfg.range_addr, rb), cfg.range_len);
        snprintf(in->ifp, sizeof in->ifp, "%s", cfg.ifname_prefix);
        snprintf(in->nft, sizeof in->nft, "%s", cfg.nft_table);
        in->o.state_dir = al_state_dir();
        in->o.pin_dir = in->pin_dir;
        in->o.range = in->cidr;
        in->o.prefix_len = cfg.prefix_len;
        in->o.ifname_prefix = in->ifp;
        in->o.nft_table = in->nft;
        in->o.steer_mark = cfg.steer_mark;
        in->o.reply_mark = cfg.reply_mark;
        in->o.route_table = cfg.route_table;
        in->o.rule_priority = cfg.rule_priority;
        in->o.attach_mode = (enum vswitch_attach_mode)cfg.attach_mode;
        ok = vswitch_view_max_ifaces(v, &in->o.max_ifaces) == 0;
    }
    vswitch_view_close(v);
    return ok;
}

static int cli__teardown(bool force)
{
    struct cli__inst in;
    struct al_error err = {0};
    if (!cli__instance(&in, &err)) {
        fprintf(stderr, "airlock vswitch teardown: %s\n", al_error_str(&err));
        return 1;
    }
    struct vswitch *vs = NULL;
    if (vswitch__open(&in.o, true, &vs, &err) != 0) {
        fprintf(stderr, "airlock vswitch teardown: %s\n", al_error_str(&err));
        return 1;
    }
    if (vswitch_destroy(vs, force, &err) != 0) {
        fprintf(stderr, "airlock vswitch teardown: %s%s\n", al_error_str(&err),
                err.code == -EBUSY ? " (--force ends them)" : "");
        return 1;
    }
    printf("vswitch of %s removed (pins %s, rule, route table, guard %s)\n", al_state_dir(),
           in.pin_dir, in.nft);
    return 0;
}

static int cli__check(bool allow_ip_forward)
{
    /* The settings of the instance if one was started, the defaults otherwise. */
    struct cli__inst in;
    if (!cli__instance(&in, NULL))
        memset(&in, 0, sizeof in);
    struct vswitch_opts o = in.o;
    o.allow_ip_forward = allow_ip_forward;
    struct vswitch_check res[16];
    size_t n = 0;
    int failed = vswitch_host_check(&o, res, AL_ARRAY_SIZE(res), &n);
    for (size_t i = 0; i < n; i++)
        printf("%-4s %-32s %s\n", res[i].ok ? "ok" : "FAIL", res[i].name, res[i].detail);
    if (failed)
        printf("%d check(s) failed: the switch would refuse to start\n", failed);
    return failed ? 1 : 0;
}

int vswitch_cli_main(int argc, char **argv)
{
    argc = al_take_state_dir_arg(argc, argv);
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    bool json = false, allow_fwd = false, force = false;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0 && strcmp(cmd, "status") == 0)
            json = true;
        else if (strcmp(argv[i], "--allow-ip-forward") == 0 && strcmp(cmd, "check") == 0)
            allow_fwd = true;
        else if (strcmp(argv[i], "--force") == 0 && strcmp(cmd, "teardown") == 0)
            force = true;
        else {
            fprintf(stderr, "airlock vswitch %s: unknown option '%s'\n", cmd, argv[i]);
            return 2;
        }
    }
    if (strcmp(cmd, "status") == 0)
        return cli__status(json);
    if (strcmp(cmd, "check") == 0)
        return cli__check(allow_fwd);
    if (strcmp(cmd, "teardown") == 0)
        return cli__teardown(force);
    fprintf(stderr, "airlock vswitch: unknown command '%s'\n\n", cmd);
    cli__usage(stderr);
    return 2;
}
