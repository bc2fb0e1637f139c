/* vault/vault_daemon: airlock-vault, the process that holds the unlocked vault. Owns startup
 * (hardening, unlocking, roles from flags), the access log, the socket, and a clean shutdown
 * on SIGTERM/SIGINT. */
#include "vault/vault.h"
#include "vault/vault_http.h"

#include "common/cleanup.h"
#include "common/config.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

struct daemon__ctx {
    uv_loop_t loop;
    uv_signal_t sigterm, sigint;
    struct vault_httpd *httpd;
    bool stopping;
};

static void daemon__usage(FILE *f)
{
    fprintf(
        f, "usage: airlock-vault [--state-dir DIR] [--config FILE] [--egress-user USER]\n"
           "                     [--egress-exe PATH] [--airlockd-user USER] [--admin-group GROUP]\n"
           "                     [--passphrase-file F | --passphrase-fd N] [--socket PATH]\n"
           "                     [--socket-mode MODE] [--cache-max-age DURATION]\n"
           "                     [--log-level LEVEL] [--help-config]\n"
           "\n"
           "Serves the vault of <state>/" AL_DIR_VAULT " on <state>/" AL_SOCK_VAULT ".\n"
           "Settings come from <state>/" AL_DIR_VAULT "/vault.yaml (or --config FILE; keys:\n"
           "--help-config), the environment, then these flags.\n"
           "Roles (by the caller's uid, from SO_PEERCRED):\n"
           "  --egress-user      the egress proxy: may fetch values (for injection only)\n"
           "  --egress-exe       ... and only when the caller runs this airlock-egress\n"
           "                     binary (/proc/<pid>/exe; strongly advised when the\n"
           "                     egress user is root or shared with other programs)\n"
           "  --airlockd-user    airlockd: may list names and metadata\n"
           "  --admin-group      members (and root) may create, rotate, delete and list\n"
           "Anyone else is refused, and every access is logged in <state>/" AL_DIR_VAULT
           "/" VAULT_AUDIT_DIR ".\n"
           "\n"
           "airlock-vault [--state-dir DIR] admin <command> ...: the commands of `airlock vault`\n"
           "(which runs this; `admin --help` lists them).\n");
}

static void daemon__closed(void *arg)
{
    struct daemon__ctx *c = arg;
    uv_close((uv_handle_t *)&c->sigterm, NULL);
    uv_close((uv_handle_t *)&c->sigint, NULL);
}

static void daemon__on_signal(uv_signal_t *s, int signum)
{
    struct daemon__ctx *c = s->data;
    if (c->stopping)
        return;
    c->stopping = true;
    al_info("vault: signal %d: shutting down", signum);
    vault_httpd_stop(c->httpd, daemon__closed, c);
}

static int daemon__read_pass(const char *file, int fd, struct vault_value *v)
{
    int own = -1;
    if (file) {
        own = open(file, O_RDONLY | O_CLOEXEC);
        if (own < 0) {
            al_error("cannot open the passphrase file %s: %s", file, strerror(errno));
            return -1;
        }
        fd = own;
    }
    struct vault_value buf;
    if (vault_value_alloc(&buf, 4097))
        return -1;
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf.data + n, 4096 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == 4096)
            break;
    }
    if (own >= 0)
        close(own);
    size_t l = 0;
    while (l < n && buf.data[l] != '\n' && buf.data[l] != '\r')
        l++;
    int rc = vault_value_set(v, buf.data, l);
    vault_value_free(&buf);
    return rc;
}

/* The daemon's settings: <state>/vault/vault.yaml (or --config FILE), overridden by the
 * environment and then by flags. */
struct daemon__cfg {
    char *egress_user;
    char *egress_exe;
    char *airlockd_user;
    char *admin_group;
    uint64_t cache_max_age_ms;
    char *socket;
    char *socket_mode;
    char *passphrase_file;
};

static const struct al_cfg_field daemon__fields[] = {
    {.key = "roles.egress_user",
     .type = AL_CFG_STR,
     .offset = offsetof(struct daemon__cfg, egress_user),
     .env = "AIRLOCK_VAULT_EGRESS_USER",
     .help = "user (name or uid) of the egress proxy: may fetch values, for injection"},
    {.key = "roles.egress_exe",
     .type = AL_CFG_STR,
     .offset = offsetof(struct daemon__cfg, egress_exe),
     .env = "AIRLOCK_VAULT_EGRESS_EXE",
     .help = "path of airlock-egress: the egress role also needs the caller to run it (so "
             "another program of the egress user, e.g. a root shell, cannot read values)"},
    {.key = "roles.airlockd_user",
     .type = AL_CFG_STR,
     .offset = offsetof(struct daemon__cfg, airlockd_user),
     .env = "AIRLOCK_VAULT_AIRLOCKD_USER",
     .help = "user (name or uid) of airlockd: may list names and metadata"},
    {.key = "roles.admin_group",
     .type = AL_CFG_STR,
     .offset = offsetof(struct daemon__cfg, admin_group),
     .env = "AIRLOCK_VAULT_ADMIN_GROUP",
     .help = "group (name or gid) whose members administer secrets (root always may)"},
    {.key = "cache_max_age",
     .type = AL_CFG_DURATION,
     .offset = offsetof(struct daemon__cfg, cache_max_age_ms),
     .def = "60s",
     .min = 1000,
     .max = 3600000,
     .help = "longest time the egress proxy may use a fetched value (told in each answer)"},
    {.key = "socket",
     .type = AL_CFG_STR,
     .offset = offsetof(struct daemon__cfg, socket),
     .help = "unix socket to serve on (default <state>/run/vault.sock)"},
    {.key = "socket_mode",
     .type = AL_CFG_STR,
     .offset = offsetof(struct daemon__cfg, socket_mode),
     .def = "0666",
     .help = "mode of the socket; access is decided per request by the caller's uid"},
    {.key = "passphrase_file",
     .type = AL_CFG_STR,
     .offset = offsetof(struct daemon__cfg, passphrase_file),
     .help = "file holding the passphrase of a passphrase vault (e.g. a systemd credential)"},
    {.key = NULL},
};

static const struct {
    const char *flag;
    const char *key;
} daemon__flags[] = {
    {"--egress-user", "roles.egress_user"},     {"--egress-exe", "roles.egress_exe"},
    {"--airlockd-user", "roles.airlockd_user"}, {"--admin-group", "roles.admin_group"},
    {"--cache-max-age", "cache_max_age"},       {"--socket", "socket"},
    {"--socket-mode", "socket_mode"},           {"--passphrase-file", "passphrase_file"},
};

int vault_daemon_main(int argc, char **argv)
{
    vault_harden_process();
    al_log_init("vault", AL_LOG_AUTO, AL_LOG_INFO);
    argc = al_take_state_dir_arg(argc, argv);
    struct vault_roles roles = {0};
    const char *config = NULL;
    int pass_fd = -1;
    struct al_error e = {0};
    /* First pass: the options that are not settings, and the config file's name. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            daemon__usage(stdout);
            return 0;
        }
        if (strcmp(a, "--help-config") == 0) {
            al_config_help(daemon__fields, stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "airlock-vault: %s: unknown option or missing value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (strcmp(a, "--config") == 0) {
            config = v;
        } else if (strcmp(a, "--passphrase-fd") == 0) {
            char *end;
            long fd = strtol(v, &end, 10);
            if (*end || fd < 0 || fd > 1024) {
                fprintf(stderr, "airlock-vault: --passphrase-fd needs a file descriptor\n");
                return 2;
            }
            pass_fd = (int)fd;
        } else if (strcmp(a, "--log-level") == 0) {
            enum al_log_level l;
            if (al_log_level_parse(v, &l) != 0) {
                fprintf(stderr, "airlock-vault: --log-level: debug, info, warn or error\n");
                return 2;
            }
            al_log_set_level(l);
        } else {
            size_t k = 0;
            while (k < AL_ARRAY_SIZE(daemon__flags) && strcmp(daemon__flags[k].flag, a) != 0)
                k++;
            if (k == AL_ARRAY_SIZE(daemon__flags)) {
                fprintf(stderr, "airlock-vault: unknown option %s (see --help)\n", a);
                return 2;
            }
        }
    }
    char dir[PATH_MAX], audit_dir[PATH_MAX + 16], sock[PATH_MAX], run[PATH_MAX];
    char def_config[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/" AL_DIR_VAULT, al_state_dir());
    snprintf(audit_dir, sizeof audit_dir, "%s/" VAULT_AUDIT_DIR, dir);
    snprintf(def_config, sizeof def_config, "%s/vault.yaml", dir);
    al_state_path(run, sizeof run, "run");

    /* Settings: defaults < file < environment < flags. */
    struct daemon__cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    struct al_diags d;
    al_diags_init(&d);
    int rc = al_config_load(daemon__fields, &cfg, config ? config : def_config,
                            config ? 0 : AL_CFG_FILE_OPTIONAL, &d);
    for (int i = 1; rc == 0 && i + 1 < argc; i += 2) {
        for (size_t k = 0; k < AL_ARRAY_SIZE(daemon__flags); k++) {
            if (strcmp(daemon__flags[k].flag, argv[i]) == 0)
                rc = al_config_set(daemon__fields, &cfg, daemon__flags[k].key, argv[i + 1],
                                   daemon__flags[k].flag, &d);
        }
    }
    if (rc || d.errors) {
        al_diags_print(&d, stderr, false);
        al_diags_free(&d);
        al_config_free(daemon__fields, &cfg);
        return 2;
    }
    al_diags_print(&d, stderr, false); /* warnings */
    al_diags_free(&d);
    if ((cfg.egress_user &&
         vault_roles_set_user(&roles.egress_uid, &roles.egress_set, cfg.egress_user, &e)) ||
        (cfg.airlockd_user &&
         vault_roles_set_user(&roles.reader_uid, &roles.reader_set, cfg.airlockd_user, &e)) ||
        (cfg.egress_exe && vault_roles_set_egress_exe(&roles, cfg.egress_exe, &e)) ||
        (cfg.admin_group && vault_roles_set_group(&roles, cfg.admin_group, &e))) {
        fprintf(stderr, "airlock-vault: roles: %s\n", al_error_str(&e));
        al_config_free(daemon__fields, &cfg);
        return 2;
    }
    char *end;
    long m = strtol(cfg.socket_mode ? cfg.socket_mode : "", &end, 8);
    if (!cfg.socket_mode || !*cfg.socket_mode || *end || m < 0 || m > 0777) {
        fprintf(stderr, "airlock-vault: socket_mode must be an octal mode such as 0660\n");
        al_config_free(daemon__fields, &cfg);
        return 2;
    }
    mode_t sock_mode = (mode_t)m;
    uint64_t max_age = cfg.cache_max_age_ms;
    if (cfg.socket)
        snprintf(sock, sizeof sock, "%s", cfg.socket);
    else
        al_state_path(sock, sizeof sock, AL_SOCK_VAULT);
    char pass_file_buf[PATH_MAX];
    const char *pass_file = NULL;
    if (cfg.passphrase_file) {
        snprintf(pass_file_buf, sizeof pass_file_buf, "%s", cfg.passphrase_file);
        pass_file = pass_file_buf;
    }
    al_config_free(daemon__fields, &cfg);
    signal(SIGPIPE, SIG_IGN);

    bool needs_pass = false;
    if (vault_store_probe(dir, &needs_pass, &e) != 0)
        al_die("%s", al_error_str(&e));
    struct vault_value pass = {0};
    struct vault_unlock u = {0};
    if (needs_pass) {
        if (!pass_file && pass_fd < 0)
            al_die("the vault in %s is protected by a passphrase: start airlock-vault with "
                   "--passphrase-file FILE or --passphrase-fd N",
                   dir);
        if (daemon__read_pass(pass_file, pass_fd, &pass) != 0)
            al_die("cannot read the passphrase");
        u.passphrase = (const char *)pass.data;
        u.passphrase_len = pass.len;
    }
    struct vault_store *store = NULL;
    rc = vault_store_open(dir, &u, &store, &e);
    vault_value_free(&pass);
    if (rc)
        al_die("%s", al_error_str(&e));

    struct al_auditlog *audit = NULL;
    struct al_auditlog_opts ao = {.dir = audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    if (al_auditlog_open(&ao, &audit, &e) != 0)
        al_die("cannot open the access log: %s", al_error_str(&e));
    struct vault_service *svc = NULL;
    struct vault_service_opts so = {
        .store = store, .audit = audit, .roles = roles, .cache_max_age_ms = (uint32_t)max_age};
    if (vault_service_new(&so, &svc) != 0)
        al_die("out of memory");
    int mk = al_mkdir_p(run, 0755);
    if (mk)
        al_die_errno(mk, "cannot create %s", run);

    struct daemon__ctx c = {0};
    uv_loop_init(&c.loop);
    struct vault_httpd_opts ho = {.svc = svc, .store = store, .sock = sock, .mode = sock_mode};
    if (vault_httpd_start(&c.loop, &ho, &c.httpd, &e) != 0)
        al_die("cannot serve on %s: %s", sock, al_error_str(&e));
    uv_signal_init(&c.loop, &c.sigterm);
    uv_signal_init(&c.loop, &c.sigint);
    c.sigterm.data = c.sigint.data = &c;
    uv_signal_start(&c.sigterm, daemon__on_signal, SIGTERM);
    uv_signal_start(&c.sigint, daemon__on_signal, SIGINT);

    json_t *start =
        json_pack("{s:s,s:s,s:i,s:{s:I,s:I,s:I},s:{s:o,s:o,s:o,s:o},s:I}", "op", "daemon_start",
                  "result", "ok", "status", 200, "peer", "uid", (json_int_t)getuid(), "gid",
                  (json_int_t)getgid(), "pid", (json_int_t)getpid(), "config", "egress_uid",
                  roles.egress_set ? json_integer(roles.egress_uid) : json_null(), "egress_exe",
                  roles.egress_exe_set ? json_string(roles.egress_exe) : json_null(),
                  "airlockd_uid", roles.reader_set ? json_integer(roles.reader_uid) : json_null(),
                  "admin_gid", roles.admin_group_set ? json_integer(roles.admin_gid) : json_null(),
                  "generation", (json_int_t)vault_service_generation(svc));
    if (al_auditlog_append(audit, start, NULL) != 0)
        al_die("cannot write the access log");
    json_decref(start);
    al_info("vault: serving %s on %s (%zu secrets, generation %llu)", dir, sock,
            vault_store_catalog(store)->n, (unsigned long long)vault_service_generation(svc));
    if (!roles.egress_set)
        al_warn("vault: no --egress-user: nobody can fetch values (injection is off)");
    else if (!roles.egress_exe_set && roles.egress_uid == 0)
        al_warn("vault: the egress user is root and no --egress-exe is set: any root process "
                "(a shell with curl) may read values; give --egress-exe PATH-OF-airlock-egress");
    if (roles.egress_exe_set && geteuid() != 0)
        al_warn("vault: --egress-exe needs /proc/<pid>/exe of the egress proxy, which only root "
                "(or CAP_SYS_PTRACE) may read when it runs as another user: fetches will be "
                "refused if it cannot");
    if (roles.egress_set && roles.egress_exe_set)
        al_info("vault: values go only to uid %u running %s", (unsigned)roles.egress_uid,
                roles.egress_exe);

    uv_run(&c.loop, UV_RUN_DEFAULT);

    json_t *stop = json_pack("{s:s,s:s,s:i,s:{s:I,s:I,s:I}}", "op", "daemon_stop", "result", "ok",
                             "status", 200, "peer", "uid", (json_int_t)getuid(), "gid",
                             (json_int_t)getgid(), "pid", (json_int_t)getpid());
    al_auditlog_append(audit, stop, NULL);
    json_decref(stop);
    vault_service_free(svc);
    rc = al_auditlog_close(audit);
    vault_store_close(store);
    uv_loop_close(&c.loop);
    unlink(sock);
    if (rc)
        al_error("vault: the access log could not be written completely: %s", strerror(-rc));
    return rc ? 1 : 0;
}
