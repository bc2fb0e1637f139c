/* egress/main: the airlock-egress daemon: configuration, the vswitch registration of its
 * listening sockets, the admin API, signals (TERM/INT stop, HUP reloads file policies). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/confine.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "egress/admin.h"
#include "egress/egress.h"
#include "vswitch/vswitch.h"

static struct egress *g_e;

static void main__on_signal(uv_signal_t *s, int signum)
{
    if (signum == SIGHUP) {
        al_info("SIGHUP: reloading file-based policies");
        egress_reload(g_e, NULL);
        return;
    }
    al_info("signal %d: stopping", signum);
    egress_stop(g_e);
    (void)s;
}

/* Hands the listening sockets to the vswitch of this state directory, so that sandbox
 * traffic reaches them, and marks every socket that answers sandboxes. */
static int main__vswitch(struct egress *e, const struct egress_config *cfg, struct al_error *err)
{
    if (cfg->vswitch_mode == 2)
        return 0;
    struct vswitch_view *v = NULL;
    int rc = cfg->vswitch_pins[0] ? vswitch_view_open_pins(cfg->vswitch_pins, &v, err)
                                  : vswitch_view_open(cfg->state_dir, &v, err);
    if (rc < 0) {
        if (cfg->vswitch_mode == 0 && rc == -ENOENT) {
            al_info("no vswitch for %s: listeners are not registered (traffic must be steered "
                    "to them another way)",
                    cfg->state_dir);
            al_error_clear(err);
            return 0;
        }
        return rc;
    }
    struct vs_config vc;
    if ((rc = vswitch_view_config(v, &vc)) < 0 ||
        (rc = egress_set_reply_mark(e, vc.reply_mark)) < 0) {
        vswitch_view_close(v);
        return al_error_set(err, rc, "vswitch: cannot mark the listening sockets: %s",
                            strerror(-rc));
    }
    static const enum vswitch_proxy_sock kinds[3] = {VSWITCH_PROXY_TCP, VSWITCH_PROXY_DNS_UDP,
                                                     VSWITCH_PROXY_DNS_TCP};
    for (int k = 0; k < 3; k++) {
        int fds[64];
        /* The first listener address of each kind; the kernel spreads connections over
         * the reuseport group behind the registered socket. */
        if (egress_listener_fds(e, k, 0, fds, 64) == 0)
            continue;
        if ((rc = vswitch_proxy_register(v, kinds[k], fds[0], err)) < 0) {
            vswitch_view_close(v);
            return rc;
        }
    }
    vswitch_view_close(v);
    al_info("listening sockets registered with the vswitch");
    return 0;
}

int main(int argc, char **argv)
{
    al_log_init("egress", AL_LOG_AUTO, AL_LOG_INFO);
    /* It holds injected secrets and CA keys in memory: never in a core file. */
    struct al_error he = {0};
    if (al_confine_no_dumps(&he) < 0) {
        al_error("%s: refusing to hold secrets in a process that can dump them", al_error_str(&he));
        return 1;
    }
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--log-level") == 0) {
            enum al_log_level lv;
            if (al_log_level_parse(argv[i + 1], &lv) < 0) {
                fprintf(stderr,
                        "airlock-egress: --log-level '%s': use debug, info, warn or error\n",
                        argv[i + 1]);
                return 2;
            }
            al_log_set_level(lv);
        }
    }
    struct egress_config cfg;
    egress_config_defaults(&cfg);
    struct al_error err = {0};
    int rc = egress_config_parse_args(&cfg, argc, argv, &err);
    if (rc == 1)
        return 0;
    if (rc < 0 || egress_config_finish(&cfg, &err) < 0) {
        fprintf(stderr, "airlock-egress: %s\n", al_error_str(&err));
        return 2;
    }
    al_set_state_dir(cfg.state_dir);
    if (al_mkdir_p(cfg.state_dir, 0750) < 0 || al_mkdir_p(cfg.audit_dir, 0750) < 0) {
        fprintf(stderr, "airlock-egress: cannot create %s or %s: %s\n", cfg.state_dir,
                cfg.audit_dir, strerror(errno));
        return 1;
    }
    struct egress *e;
    if (egress_new(&cfg, &e, &err) < 0)
        al_die("%s", al_error_str(&err));
    g_e = e;
    if (main__vswitch(e, &cfg, &err) < 0) {
        egress_free(e);
        al_die("%s", al_error_str(&err));
    }
    struct egress_admin *admin = NULL;
    if (strcmp(cfg.admin_socket, "none") != 0 &&
        egress_admin_start(e, cfg.admin_socket, &admin, &err) < 0) {
        egress_free(e);
        al_die("%s", al_error_str(&err));
    }
    if (egress_start(e, &err) < 0) {
        egress_admin_stop(admin);
        egress_free(e);
        al_die("%s", al_error_str(&err));
    }
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_loop_t *loop = egress_ctl_loop(e);
    uv_signal_init(loop, &sig_term);
    uv_signal_init(loop, &sig_int);
    uv_signal_init(loop, &sig_hup);
    uv_signal_start(&sig_term, main__on_signal, SIGTERM);
    uv_signal_start(&sig_int, main__on_signal, SIGINT);
    uv_signal_start(&sig_hup, main__on_signal, SIGHUP);

    printf("airlock-egress ready: tcp port %u, dns port %u, admin %s, audit %s\n",
           egress_tcp_port(e, 0), egress_dns_port(e, 0), cfg.admin_socket, cfg.audit_dir);
    fflush(stdout);
    al_info("ready: %u transparent TCP, %u DNS listener(s)", (unsigned)cfg.n_tcp_listen,
            (unsigned)cfg.n_dns_listen);
    egress_run(e);

    uv_close((uv_handle_t *)&sig_term, NULL);
    uv_close((uv_handle_t *)&sig_int, NULL);
    uv_close((uv_handle_t *)&sig_hup, NULL);
    egress_admin_stop(admin);
    uv_run(loop, UV_RUN_NOWAIT);
    egress_free(e);
    al_info("stopped");
    return 0;
}
