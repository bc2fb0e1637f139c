/* vault/vault_daemon: airlock-vault, the process that holds the unlocked vault. Owns startup
 * (hardening, unlocking, roles from flags), the access log, the socket, and a clean shutdown
 * on SIGTERM/SIGINT. */
#include "vault/vault.h"
#include "vault/vault_http.h"

#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
    fprintf(f,
            "usage: airlock-vault [--state-dir DIR] [--egress-user USER] [--airlockd-user USER]\n"
            "                     [--admin-group GROUP] [--passphrase-file F | --passphrase-fd N]\n"
            "                     [--socket PATH] [--socket-mode MODE] [--cache-max-age DURATION]\n"
            "                     [--log-level LEVEL]\n"
            "\n"
            "Serves the vault of <state>/" AL_DIR_VAULT " on <state>/" AL_SOCK_VAULT ".\n"
            "Roles (by the caller's uid, from SO_PEERCRED):\n"
            "  --egress-user      the egress proxy: may fetch values (for injection only)\n"
            "  --airlockd-user    airlockd: may list names and metadata\n"
            "  --admin-group      members (and root) may create, rotate, delete and list\n"
            "Anyone else is refused, and every access is logged in <state>/" AL_DIR_VAULT
            "/" VAULT_AUDIT_DIR ".\n");
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

int vault_daemon_main(int argc, char **argv)
{
    vault_harden_process();
    al_log_init("vault", AL_LOG_AUTO, AL_LOG_INFO);
    argc = al_take_state_dir_arg(argc, argv);
    struct vault_roles roles = {0};
    const char *pass_file = NULL, *sock_opt = NULL;
    int pass_fd = -1;
    mode_t sock_mode = 0666;
    uint64_t max_age = 60000;
    struct al_error e = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            daemon__usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "airlock-vault: %s: unknown option or missing value (see --help)\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--egress-user") == 0) {
            rc = vault_roles_set_user(&roles.egress_uid, &roles.egress_set, v, &e);
        } else if (strcmp(a, "--airlockd-user") == 0) {
            rc = vault_roles_set_user(&roles.reader_uid, &roles.reader_set, v, &e);
        } else if (strcmp(a, "--admin-group") == 0) {
            rc = vault_roles_set_group(&roles, v, &e);
        } else if (strcmp(a, "--passphrase-file") == 0) {
            pass_file = v;
        } else if (strcmp(a, "--passphrase-fd") == 0) {
            char *end;
            long fd = strtol(v, &end, 10);
            if (*end || fd < 0 || fd > 1024) {
                fprintf(stderr, "airlock-vault: --passphrase-fd needs a file descriptor\n");
                return 2;
            }
            pass_fd = (int)fd;
        } else if (strcmp(a, "--socket") == 0) {
            sock_opt = v;
        } else if (strcmp(a, "--socket-mode") == 0) {
            char *end;
            long m = strtol(v, &end, 8);
            if (*end || m < 0 || m > 0777) {
                fprintf(stderr, "airlock-vault: --socket-mode needs an octal mode such as 0660\n");
                return 2;
            }
            sock_mode = (mode_t)m;
        } else if (strcmp(a, "--cache-max-age") == 0) {
            if (al_parse_duration_ms(v, &max_age) != 0 || max_age > 3600000) {
                fprintf(stderr, "airlock-vault: --cache-max-age needs a duration up to 1h "
                                "(e.g. 30s)\n");
                return 2;
            }
        } else if (strcmp(a, "--log-level") == 0) {
            enum al_log_level l;
            if (al_log_level_parse(v, &l) != 0) {
                fprintf(stderr, "airlock-vault: --log-level: debug, info, warn or error\n");
                return 2;
            }
            al_log_set_level(l);
        } else {
            fprintf(stderr, "airlock-vault: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (rc) {
            fprintf(stderr, "airlock-vault: %s: %s\n", a, al_error_str(&e));
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    char dir[PATH_MAX], audit_dir[PATH_MAX + 16], sock[PATH_MAX], run[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/" AL_DIR_VAULT, al_state_dir());
    snprintf(audit_dir, sizeof audit_dir, "%s/" VAULT_AUDIT_DIR, dir);
    if (sock_opt)
        snprintf(sock, sizeof sock, "%s", sock_opt);
    else
        al_state_path(sock, sizeof sock, AL_SOCK_VAULT);
    al_state_path(run, sizeof run, "run");

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
    int rc = vault_store_open(dir, &u, &store, &e);
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
    if (vault_httpd_start(&c.loop, svc, store, sock, sock_mode, &c.httpd, &e) != 0)
        al_die("cannot serve on %s: %s", sock, al_error_str(&e));
    uv_signal_init(&c.loop, &c.sigterm);
    uv_signal_init(&c.loop, &c.sigint);
    c.sigterm.data = c.sigint.data = &c;
    uv_signal_start(&c.sigterm, daemon__on_signal, SIGTERM);
    uv_signal_start(&c.sigint, daemon__on_signal, SIGINT);

    json_t *start =
        json_pack("{s:s,s:s,s:i,s:{s:I,s:I,s:I},s:{s:o,s:o,s:o},s:I}", "op", "daemon_start",
                  "result", "ok", "status", 200, "peer", "uid", (json_int_t)getuid(), "gid",
                  (json_int_t)getgid(), "pid", (json_int_t)getpid(), "config", "egress_uid",
                  roles.egress_set ? json_integer(roles.egress_uid) : json_null(), "airlockd_uid",
                  roles.reader_set ? json_integer(roles.reader_uid) : json_null(), "admin_gid",
                  roles.admin_group_set ? json_integer(roles.admin_gid) : json_null(), "generation",
                  (json_int_t)vault_service_generation(svc));
    if (al_auditlog_append(audit, start, NULL) != 0)
        al_die("cannot write the access log");
    json_decref(start);
    al_info("vault: serving %s on %s (%zu secrets, generation %llu)", dir, sock,
            vault_store_catalog(store)->n, (unsigned long long)vault_service_generation(svc));
    if (!roles.egress_set)
        al_warn("vault: no --egress-user: nobody can fetch values (injection is off)");

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
