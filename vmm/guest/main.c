/* vmm/guest/main: airlock-agent's entry point: PID 1 of the sandbox's PID namespace.
 *
 * Owns: arguments and the channels airlock-vmm hands in (AIRLOCK_AGENT_LISTEN_FD, a listening
 * unix socket; AIRLOCK_AGENT_INIT_FD, one JSON init object), loopback listeners for tests
 * (--listen unix:PATH | 127.0.0.1:PORT | [::1]:PORT), PID 1 duties (reaping every child,
 * orphans included; SIGTERM/SIGINT/SIGHUP forwarded to the workload before a clean stop; no
 * signal is fatal), finding the kernel files shipped next to the binary, and where the
 * sandbox's sudo is served (AGENT_SUDO_SOCKET as init, --sudo-socket).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sodium.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "agent.h"
#include "sudoproto.h"
#include "spawn.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "common/paths.h"

#define MAIN_MAX_LISTEN 8

static struct agent g_agent;
static uv_signal_t g_sig_chld, g_sig_term, g_sig_int, g_sig_hup;
static uv_timer_t g_stop_timer;
static int g_stop_phase;

static void main__usage(FILE *f)
{
    fprintf(
        f, "usage: airlock-agent [options]\n"
           "  --listen SPEC        serve on SPEC: unix:PATH, 127.0.0.1:PORT or [::1]:PORT\n"
           "                       (repeatable; loopback only). Without it the agent serves\n"
           "                       the listening socket in $AIRLOCK_AGENT_LISTEN_FD.\n"
           "  --user NAME          default user (else init's defaultUser, else 'user', else self)\n"
           "  --workdir DIR        default working directory\n"
           "  --home DIR           home directory of the agent's own user (tests)\n"
           "  --passwd FILE        users file (default /etc/passwd)\n"
           "  --group FILE         groups file (default /etc/group)\n"
           "  --lib-dir DIR        where the kernels (airlock_kernel.py, .js) live (default: next\n"
           "                       to the binary)\n"
           "  --python PATH        Python for code contexts (default python3 from PATH)\n"
           "  --node PATH          Node.js for JavaScript and TypeScript contexts (default node\n"
           "                       from PATH)\n"
           "  --log-level LEVEL    debug|info|warn|error (default info)\n"
           "  --ca-root DIR        where the sandbox CA of init's caCertPem goes (default: / as "
           "PID 1;\n"
           "                       otherwise installing a CA is refused)\n"
           "  --sudo-socket PATH   serve the sandbox's sudo there (default " AGENT_SUDO_SOCKET "\n"
           "                       as PID 1, else off); 'off' turns it off\n"
           "  --build-sandbox      root's processes keep the capabilities a package manager\n"
           "                       needs (a template build's RUN step; airlock-vmm passes it\n"
           "                       for spec.jail.build only)\n"
           "Environment: AIRLOCK_AGENT_LISTEN_FD, AIRLOCK_AGENT_INIT_FD (JSON init object).\n");
}

static void main__finish_stop(uv_timer_t *t)
{
    (void)t;
    struct agent *a = &g_agent;
    if (g_stop_phase == 1) {
        agent_procs_shutdown(a, SIGKILL);
        agent_start_shutdown(a, SIGKILL);
        agent_interp_shutdown(a, SIGKILL);
        agent_sudo_shutdown(a, SIGKILL);
        g_stop_phase = 2;
        uv_timer_start(&g_stop_timer, main__finish_stop, 300, 0);
        return;
    }
    agent_reap_children(a);
    al_info("agent stopped");
    uv_stop(a->loop);
}

static void main__server_closed(void *arg)
{
    (void)arg;
    g_agent.server = NULL;
}

static void main__on_signal(uv_signal_t *h, int sig)
{
    struct agent *a = h->data;
    if (sig == SIGCHLD) {
        agent_reap_children(a);
        return;
    }
    if (a->stopping) {
        al_info("signal %d while stopping: ignored", sig);
        return;
    }
    a->stopping = true;
    al_info("signal %s: stopping (the workload gets SIGTERM, then SIGKILL after 2 s)",
            sig == SIGTERM  ? "SIGTERM"
            : sig == SIGINT ? "SIGINT"
                            : "SIGHUP");
    agent_procs_shutdown(a, SIGTERM);
    agent_start_shutdown(a, SIGTERM);
    agent_interp_shutdown(a, SIGTERM);
    agent_sudo_shutdown(a, SIGTERM);
    if (a->server)
        al_http_server_close(a->server, main__server_closed, NULL);
    g_stop_phase = 1;
    uv_timer_start(&g_stop_timer, main__finish_stop, 2000, 0);
}

static int main__listen(struct al_http_server *s, const char *spec, struct al_error *err)
{
    if (strncmp(spec, "unix:", 5) == 0)
        return al_http_server_listen_unix(s, spec + 5, 0600, err);
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || strlen(colon + 1) == 0)
        return al_error_set(err, -EINVAL, "--listen '%s': expected unix:PATH or HOST:PORT", spec);
    size_t hl = (size_t)(colon - spec);
    if (hl >= sizeof host)
        return al_error_set(err, -EINVAL, "--listen '%s': host too long", spec);
    memcpy(host, spec, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 1 || port > 65535)
        return al_error_set(err, -EINVAL, "--listen '%s': port must be 1..65535", spec);
    struct in_addr v4;
    struct in6_addr v6;
    bool loopback = false;
    if (inet_pton(AF_INET, host, &v4) == 1)
        loopback = (ntohl(v4.s_addr) >> 24) == 127;
    else if (inet_pton(AF_INET6, host, &v6) == 1)
        loopback = IN6_IS_ADDR_LOOPBACK(&v6);
    if (!loopback)
        return al_error_set(err, -EINVAL,
                            "--listen '%s': the agent only listens on loopback addresses "
                            "(127.0.0.0/8 or ::1); the sandbox network must never reach it",
                            spec);
    return al_http_server_listen_tcp(s, host, (int)port, err);
}

static int main__env_fd(const char *name, int *fd)
{
    const char *v = getenv(name);
    if (!v)
        return -ENOENT;
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > 1 << 20)
        return -EINVAL;
    *fd = (int)n;
    unsetenv(name);
    return 0;
}

static int main__read_init(struct agent *a, int fd)
{
    al_set_cloexec(fd, true);
    struct al_buf b;
    al_buf_init(&b, 1u << 20);
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            al_error("AIRLOCK_AGENT_INIT_FD: read: %s", strerror(errno));
            close(fd);
            al_buf_free_wipe(&b);
            return -errno;
        }
        if (n == 0)
            break;
        if (al_buf_append(&b, chunk, (size_t)n) < 0) {
            al_error("AIRLOCK_AGENT_INIT_FD: the init object is larger than 1 MiB");
            close(fd);
            al_buf_free_wipe(&b);
            return -E2BIG;
        }
    }
    close(fd);
    struct al_error e = {0};
    json_t *init = b.len ? al_json_parse(b.data, b.len, &e) : json_object();
    al_buf_free_wipe(&b);
    if (!init) {
        al_error("AIRLOCK_AGENT_INIT_FD: invalid JSON: %s", al_error_str(&e));
        return -EINVAL;
    }
    int r = agent_apply_init(a, init, &e);
    json_decref(init);
    if (r < 0)
        al_error("AIRLOCK_AGENT_INIT_FD: %s", al_error_str(&e));
    return r;
}

static void main__find_lib(struct agent *a)
{
    const char *env = getenv("AIRLOCK_AGENT_LIB");
    if (env && *env) {
        snprintf(a->lib_dir, sizeof a->lib_dir, "%s", env);
        return;
    }
    char dir[PATH_MAX];
    if (al_self_dir(dir, sizeof dir) < 0) {
        snprintf(a->lib_dir, sizeof a->lib_dir, "/.airlock/lib");
        return;
    }
    static const char *const cands[] = {"/../lib", "/../agent-root/.airlock/lib"};
    for (size_t i = 0; i < 2; i++) {
        char p[PATH_MAX], k[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s%s", dir, cands[i]);
        snprintf(k, sizeof k, "%s/airlock_kernel.py", p);
        if (access(k, R_OK) == 0) {
            char real[PATH_MAX];
            snprintf(a->lib_dir, sizeof a->lib_dir, "%s", realpath(p, real) ? real : p);
            return;
        }
    }
    snprintf(a->lib_dir, sizeof a->lib_dir, "/.airlock/lib");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"user", required_argument, NULL, 'u'},
        {"workdir", required_argument, NULL, 'w'},
        {"home", required_argument, NULL, 'H'},
        {"passwd", required_argument, NULL, 'p'},
        {"group", required_argument, NULL, 'g'},
        {"lib-dir", required_argument, NULL, 'L'},
        {"python", required_argument, NULL, 'P'},
        {"node", required_argument, NULL, 'N'},
        {"log-level", required_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"ca-root", required_argument, NULL, 'C'},
        {"sudo-socket", required_argument, NULL, 'S'},
        {"build-sandbox", no_argument, NULL, 'B'},
        {NULL, 0, NULL, 0},
    };
    const char *listens[MAIN_MAX_LISTEN];
    size_t nlisten = 0;
    const char *user = NULL, *workdir = NULL, *home = NULL, *passwd = "/etc/passwd",
               *group = "/etc/group", *libdir = NULL, *python = NULL, *node = NULL, *ca_root = NULL,
               *sudo_socket = NULL;
    bool build_sandbox = false;
    enum al_log_level level = AL_LOG_INFO;
    const char *lv = getenv("AIRLOCK_LOG_LEVEL");
    if (lv)
        al_log_level_parse(lv, &level);
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'l':
            if (nlisten == MAIN_MAX_LISTEN) {
                fprintf(stderr, "airlock-agent: at most %d --listen options\n", MAIN_MAX_LISTEN);
                return 2;
            }
            listens[nlisten++] = optarg;
            break;
        case 'u':
            user = optarg;
            break;
        case 'w':
            workdir = optarg;
            break;
        case 'H':
            home = optarg;
            break;
        case 'p':
            passwd = optarg;
            break;
        case 'g':
            group = optarg;
            break;
        case 'L':
            libdir = optarg;
            break;
        case 'P':
            python = optarg;
            break;
        case 'N':
            node = optarg;
            break;
        case 'C':
            ca_root = optarg;
            break;
        case 'S':
            sudo_socket = optarg;
            break;
        case 'B':
            build_sandbox = true;
            break;
        case 'v':
            if (al_log_level_parse(optarg, &level) < 0) {
                fprintf(stderr, "airlock-agent: --log-level: debug, info, warn or error\n");
                return 2;
            }
            break;
        case 'h':
            main__usage(stdout);
            return 0;
        default:
            main__usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "airlock-agent: unexpected argument '%s'\n", argv[optind]);
        main__usage(stderr);
        return 2;
    }
    al_log_init("agent", AL_LOG_AUTO, level);
    /* sodium_malloc (the access token) and the signature checks need libsodium set up. */
    if (sodium_init() < 0)
        al_die("libsodium could not be initialised");
    signal(SIGPIPE, SIG_IGN);
    umask(022);

    struct agent *a = &g_agent;
    agent_limits_default(&a->lim);
    agent_userdb_init(&a->users, passwd, group);
    if (user)
        a->default_user = strdup(user);
    if (workdir) {
        if (workdir[0] != '/') {
            fprintf(stderr, "airlock-agent: --workdir must be an absolute path\n");
            return 2;
        }
        a->default_workdir = strdup(workdir);
    }
    if (home)
        a->home_override = strdup(home);
    if (python)
        a->python = strdup(python);
    if (node)
        a->node = strdup(node);
    /* The sandbox CA goes into this root's trust stores: the sandbox's own as its init. */
    if (ca_root)
        a->ca_root = strdup(ca_root);
    else if (getpid() == 1)
        a->ca_root = strdup("/");
    if (libdir)
        snprintf(a->lib_dir, sizeof a->lib_dir, "%s", libdir);
    else
        main__find_lib(a);

    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); /* orphans of our children come to us */

    uv_loop_t *loop = uv_default_loop();
    struct al_error err = {0};
    if (agent_init(a, loop, &err) < 0)
        al_die("%s", al_error_str(&err));
    if (build_sandbox) {
        if (agent_build_caps(a, &err) < 0)
            al_die("%s", al_error_str(&err));
        al_info("a build sandbox: root's processes keep capabilities 0x%llx",
                (unsigned long long)a->root_caps);
    }

    int fd;
    int r = main__env_fd("AIRLOCK_AGENT_INIT_FD", &fd);
    if (r == -EINVAL)
        al_die("AIRLOCK_AGENT_INIT_FD must be a file descriptor number");
    if (r == 0 && main__read_init(a, fd) < 0)
        al_die("the initial configuration (AIRLOCK_AGENT_INIT_FD) is invalid; see above");

    struct al_http_server_opts so;
    memset(&so, 0, sizeof so);
    so.on_request = agent_on_request;
    so.ctx = a;
    so.limits.idle_timeout_ms = 640000; /* envd keeps idle connections for 640 s */
    so.limits.body_timeout_ms = 120000;
    r = al_http_server_new(loop, &so, &a->server);
    if (r < 0)
        al_die("cannot create the HTTP server: %s", strerror(-r));
    int lfd;
    r = main__env_fd("AIRLOCK_AGENT_LISTEN_FD", &lfd);
    if (r == -EINVAL)
        al_die("AIRLOCK_AGENT_LISTEN_FD must be a file descriptor number");
    if (r == 0) {
        al_set_cloexec(lfd, true);
        if (al_http_server_listen_fd(a->server, lfd, &err) < 0)
            al_die("AIRLOCK_AGENT_LISTEN_FD %d: %s", lfd, al_error_str(&err));
    } else if (nlisten == 0) {
        fprintf(stderr,
                "airlock-agent: nothing to serve: set AIRLOCK_AGENT_LISTEN_FD or pass --listen\n");
        return 2;
    }
    for (size_t i = 0; i < nlisten; i++) {
        if (main__listen(a->server, listens[i], &err) < 0)
            al_die("%s", al_error_str(&err));
    }

    /* The sandbox's sudo: as its init by default (the sandbox's own /run), where asked
     * otherwise. Failing to serve it is logged, never fatal: the API works without it. */
    if (!sudo_socket && getpid() == 1)
        sudo_socket = AGENT_SUDO_SOCKET;
    if (sudo_socket && strcmp(sudo_socket, "off") != 0) {
        if (agent_sudo_listen(a, sudo_socket, &err) < 0)
            al_error("sudo is off in this sandbox: %s", al_error_str(&err));
        memset(&err, 0, sizeof err);
    }

    uv_signal_t *sigs[] = {&g_sig_chld, &g_sig_term, &g_sig_int, &g_sig_hup};
    int signums[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < 4; i++) {
        uv_signal_init(loop, sigs[i]);
        sigs[i]->data = a;
        uv_signal_start(sigs[i], main__on_signal, signums[i]);
    }
    uv_timer_init(loop, &g_stop_timer);
    agent_reap_children(a); /* anything that exited before the handler existed */
    /* A warm sandbox (controlplane/warm.c) gets its envVars with the POST /init of its claim,
     * which starts the default contexts and the template's startCmd then: started now they
     * would run without them (and before anyone asked for the sandbox). */
    const char *warm = getenv("AIRLOCK_AGENT_WARM");
    bool defer = warm && strcmp(warm, "1") == 0;
    unsetenv("AIRLOCK_AGENT_WARM");
    if (a->code_interpreter && !defer)
        agent_interp_start_defaults(a); /* as E2B's server: the kernels wait for the first use */
    if (!defer)
        agent_start_begin(a);
    al_info("airlock-agent %s (envd %s) ready: pid %d%s, uid %u%s, lib %s", AIRLOCK_VERSION,
            AGENT_ENVD_VERSION, (int)getpid(), a->pid1 ? " (init)" : "", (unsigned)a->self_uid,
            a->can_switch_user ? " (may switch users)" : "", a->lib_dir);
    uv_run(loop, UV_RUN_DEFAULT);
    /* Stopped: everything this process started has been killed; leave. */
    return 0;
}
