/* vault/vault_cli: `airlock vault ...`, the administrators' tool. Write-only: no command prints
 * a value. Values come from stdin (a hidden prompt on a terminal) or --from-file, never from
 * argv or the environment. Commands go to the airlock-vault daemon over its socket; when no
 * daemon runs they work on the files directly (as root), through the same access checks and
 * the same access log. */
#include "vault/vault.h"

#include "common/auditlog.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "common/http.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>
#include <sys/stat.h>

#define CLI_MAX_HOSTS VAULT_HOSTS_MAX

struct cli {
    char vault_dir[PATH_MAX];
    char audit_dir[PATH_MAX + 16];
    char sock[PATH_MAX];
    /* options */
    bool json, offline, passphrase, clear_hosts, follow, keep_newline, help;
    const char *description, *from_file, *passphrase_file, *key_file, *pubkey, *checkpoints;
    const char *hosts[CLI_MAX_HOSTS];
    size_t n_hosts;
    long keep, lines, kdf_ops;
    unsigned given; /* options seen (O_*) */
    uint64_t kdf_mem;
    const char *pos[4];
    int n_pos;
    /* offline mode */
    bool daemon;
    struct vault_store *store;
    struct al_auditlog *audit;
    struct vault_service *svc;
};

static void cli__usage(FILE *f)
{
    fprintf(
        f,
        "usage: airlock vault <command> [options]\n"
        "\n"
        "  init [--passphrase | --passphrase-file F] [--kdf-ops N] [--kdf-mem SIZE]\n"
        "                              create the vault (a master key file, or Argon2id)\n"
        "  put NAME [--description D] [--bound-host H]... [--from-file F] [--keep N]\n"
        "                              store a new secret; the value is read from stdin\n"
        "  rotate NAME [--from-file F] [--description D] [--bound-host H]...\n"
        "              [--clear-bound-hosts] [--keep N]\n"
        "                              replace its value (the last N versions are kept)\n"
        "  rm NAME                     delete a secret\n"
        "  ls [--json]                 list secrets (metadata only)\n"
        "  show NAME [--json]          a secret's metadata (never its value)\n"
        "  history NAME [--json]       when it was created and rotated, and by whom\n"
        "  hash-secret [--key F] [--from-file F]\n"
        "                              the secret id (b2k:...) audit records carry for a value\n"
        "  check                       decrypt every stored version (integrity check)\n"
        "  log tail [-n N] [-f] [--json] | log verify [--pubkey F] [--checkpoints F]\n"
        "                              the vault's access log\n"
        "\n"
        "Values are never accepted on the command line and never shown. Without a running\n"
        "airlock-vault (or with --offline) commands work on %s/" AL_DIR_VAULT " directly\n"
        "(root only). For a passphrase vault offline: --passphrase-file F or a terminal.\n",
        al_state_dir());
}

/* ---- option parsing ---------------------------------------------------------------------------- */

enum {
    O_JSON = 1u << 0,
    O_OFFLINE = 1u << 1,
    O_PASS = 1u << 2,
    O_CLEAR = 1u << 3,
    O_FOLLOW = 1u << 4,
    O_KEEPNL = 1u << 5,
    O_HELP = 1u << 6,
    O_DESC = 1u << 7,
    O_FROM = 1u << 8,
    O_PASSFILE = 1u << 9,
    O_KEY = 1u << 10,
    O_PUBKEY = 1u << 11,
    O_CKPTS = 1u << 12,
    O_HOST = 1u << 13,
    O_KEEP = 1u << 14,
    O_LINES = 1u << 15,
    O_KDFOPS = 1u << 16,
    O_KDFMEM = 1u << 17,
};

static const struct {
    const char *name;
    unsigned bit;
    bool value;
} cli__opts[] = {
    {"--json", O_JSON, false},
    {"--offline", O_OFFLINE, false},
    {"--passphrase", O_PASS, false},
    {"--clear-bound-hosts", O_CLEAR, false},
    {"-f", O_FOLLOW, false},
    {"--follow", O_FOLLOW, false},
    {"--keep-newline", O_KEEPNL, false},
    {"-h", O_HELP, false},
    {"--help", O_HELP, false},
    {"--description", O_DESC, true},
    {"--from-file", O_FROM, true},
    {"--passphrase-file", O_PASSFILE, true},
    {"--key", O_KEY, true},
    {"--pubkey", O_PUBKEY, true},
    {"--checkpoints", O_CKPTS, true},
    {"--bound-host", O_HOST, true},
    {"--keep", O_KEEP, true},
    {"-n", O_LINES, true},
    {"--kdf-ops", O_KDFOPS, true},
    {"--kdf-mem", O_KDFMEM, true},
};

static long cli__number(const char *opt, const char *val)
{
    char *end;
    long v = strtol(val, &end, 10);
    if (*end || v < 1 || v > 1000000) {
        fprintf(stderr, "airlock vault: %s needs a positive number\n", opt);
        return -1;
    }
    return v;
}

static int cli__parse(struct cli *c, int argc, char **argv, int first)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--value") == 0 || strncmp(a, "--value=", 8) == 0) {
            fprintf(stderr, "airlock vault: values are never taken from the command line (they "
                            "would show in ps and in shell history): pipe the value to stdin or "
                            "use --from-file FILE\n");
            return 2;
        }
        if (a[0] != '-' || !a[1]) {
            if (c->n_pos == 4) {
                fprintf(stderr, "airlock vault: too many arguments\n");
                return 2;
            }
            c->pos[c->n_pos++] = a;
            continue;
        }
        size_t k = 0;
        while (k < AL_ARRAY_SIZE(cli__opts) && strcmp(cli__opts[k].name, a) != 0)
            k++;
        if (k == AL_ARRAY_SIZE(cli__opts)) {
            fprintf(stderr, "airlock vault: unknown option %s (see `airlock vault --help`)\n", a);
            return 2;
        }
        const char *val = NULL;
        if (cli__opts[k].value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "airlock vault: %s needs a value\n", a);
                return 2;
            }
            val = argv[++i];
        }
        unsigned bit = cli__opts[k].bit;
        c->given |= bit;
        long n;
        switch (bit) {
        case O_JSON:
            c->json = true;
            break;
        case O_OFFLINE:
            c->offline = true;
            break;
        case O_PASS:
            c->passphrase = true;
            break;
        case O_CLEAR:
            c->clear_hosts = true;
            break;
        case O_FOLLOW:
            c->follow = true;
            break;
        case O_KEEPNL:
            c->keep_newline = true;
            break;
        case O_HELP:
            c->help = true;
            break;
        case O_DESC:
            c->description = val;
            break;
        case O_FROM:
            c->from_file = val;
            break;
        case O_PASSFILE:
            c->passphrase_file = val;
            break;
        case O_KEY:
            c->key_file = val;
            break;
        case O_PUBKEY:
            c->pubkey = val;
            break;
        case O_CKPTS:
            c->checkpoints = val;
            break;
        case O_HOST:
            if (c->n_hosts == CLI_MAX_HOSTS) {
                fprintf(stderr, "airlock vault: at most %d --bound-host options\n", CLI_MAX_HOSTS);
                return 2;
            }
            c->hosts[c->n_hosts++] = val;
            break;
        case O_KEEP:
        case O_LINES:
        case O_KDFOPS:
            if ((n = cli__number(a, val)) < 0)
                return 2;
            if (bit == O_KEEP)
                c->keep = n;
            else if (bit == O_LINES)
                c->lines = n;
            else
                c->kdf_ops = n;
            break;
        case O_KDFMEM:
            if (al_parse_size(val, &c->kdf_mem) != 0) {
                fprintf(stderr, "airlock vault: --kdf-mem needs a size such as 256MiB\n");
                return 2;
            }
            break;
        }
    }
    return 0;
}

/* Refuses options that mean nothing to the command (a typo must not be silently ignored). */
static int cli__allowed(const struct cli *c, const char *cmd, unsigned allowed)
{
    unsigned extra = c->given & ~(allowed | O_HELP);
    if (!extra)
        return 0;
    for (size_t k = 0; k < AL_ARRAY_SIZE(cli__opts); k++) {
        if (extra & cli__opts[k].bit) {
            fprintf(stderr,
                    "airlock vault: %s does not apply to `airlock vault %s` (see "
                    "`airlock vault --help`)\n",
                    cli__opts[k].name, cmd);
            break;
        }
    }
    return 2;
}

/* ---- reading values and passphrases ----------------------------------------------------------- */

/* Reads up to max bytes of fd into v (guarded memory); -E2BIG beyond. */
static int cli__read_fd(int fd, size_t max, struct vault_value *v)
{
    struct vault_value buf;
    if (vault_value_alloc(&buf, max + 1))
        return -ENOMEM;
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf.data + n, max + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = -errno;
            vault_value_free(&buf);
            return e;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max) {
            vault_value_free(&buf);
            return -E2BIG;
        }
    }
    int rc = vault_value_set(v, buf.data, n);
    vault_value_free(&buf);
    return rc;
}

/* A line from the terminal with echo off. */
static int cli__read_hidden(const char *prompt, struct vault_value *v)
{
    int tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (tty < 0)
        return -ENOTTY;
    struct termios old, quiet;
    bool restore = tcgetattr(tty, &old) == 0;
    if (restore) {
        quiet = old;
        quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
        quiet.c_lflag |= ICANON;
        tcsetattr(tty, TCSAFLUSH, &quiet);
    }
    if (write(tty, prompt, strlen(prompt)) < 0)
        al_debug("cannot write the prompt");
    struct vault_value buf;
    int rc = vault_value_alloc(&buf, VAULT_VALUE_MAX + 1);
    size_t n = 0;
    while (rc == 0) {
        char ch;
        ssize_t r = read(tty, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || ch == '\n')
            break;
        if (n == VAULT_VALUE_MAX) {
            rc = -E2BIG;
            break;
        }
        buf.data[n++] = (unsigned char)ch;
    }
    if (restore)
        tcsetattr(tty, TCSAFLUSH, &old);
    if (write(tty, "\n", 1) < 0)
        al_debug("cannot write to the terminal");
    close(tty);
    if (rc == 0) {
        if (n && buf.data[n - 1] == '\r')
            n--;
        rc = vault_value_set(v, buf.data, n);
    }
    vault_value_free(&buf);
    return rc;
}

static int cli__read_value(const struct cli *c, const char *what, struct vault_value *v)
{
    int rc;
    if (c->from_file) {
        int fd = open(c->from_file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "airlock vault: cannot open %s: %s\n", c->from_file, strerror(errno));
            return -errno;
        }
        rc = cli__read_fd(fd, VAULT_VALUE_MAX, v);
        close(fd);
    } else if (isatty(0)) {
        char prompt[256];
        snprintf(prompt, sizeof prompt, "value for %s (input hidden): ", what);
        rc = cli__read_hidden(prompt, v);
    } else {
        rc = cli__read_fd(0, VAULT_VALUE_MAX, v);
        /* `echo token | airlock vault put x`: the newline is not part of the value */
        if (rc == 0 && !c->keep_newline && v->len && v->data[v->len - 1] == '\n') {
            v->len--;
            if (v->len && v->data[v->len - 1] == '\r')
                v->len--;
        }
    }
    if (rc == -E2BIG)
        fprintf(stderr, "airlock vault: the value is larger than %d bytes\n", VAULT_VALUE_MAX);
    else if (rc)
        fprintf(stderr, "airlock vault: cannot read the value: %s\n", strerror(-rc));
    else if (v->len == 0) {
        vault_value_free(v);
        fprintf(stderr,
                "airlock vault: the value is empty: pipe it to stdin (printf %%s \"$TOKEN\" "
                "| airlock vault put NAME) or use --from-file FILE\n");
        return -EINVAL;
    }
    return rc;
}

static int cli__passphrase(const struct cli *c, bool confirm, struct vault_value *v)
{
    int rc;
    if (c->passphrase_file) {
        int fd = open(c->passphrase_file, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "airlock vault: cannot open %s: %s\n", c->passphrase_file,
                    strerror(errno));
            return -errno;
        }
        rc = cli__read_fd(fd, 4096, v);
        close(fd);
        if (rc == 0) {
            size_t n = 0;
            while (n < v->len && v->data[n] != '\n' && v->data[n] != '\r')
                n++;
            v->len = n; /* the first line */
        }
    } else {
        rc = cli__read_hidden("vault passphrase: ", v);
        if (rc == -ENOTTY) {
            fprintf(stderr, "airlock vault: this needs the vault passphrase: give it with "
                            "--passphrase-file FILE (no terminal to ask on)\n");
            return rc;
        }
        if (rc == 0 && confirm) {
            struct vault_value again;
            rc = cli__read_hidden("again: ", &again);
            if (rc == 0 && (again.len != v->len || sodium_memcmp(again.data, v->data, v->len))) {
                fprintf(stderr, "airlock vault: the passphrases differ\n");
                rc = -EINVAL;
            }
            vault_value_free(&again);
            if (rc)
                vault_value_free(v);
        }
    }
    if (rc && rc != -EINVAL && rc != -ENOTTY)
        fprintf(stderr, "airlock vault: cannot read the passphrase: %s\n", strerror(-rc));
    return rc;
}

/* ---- talking to the vault ------------------------------------------------------------------------ */

static int cli__open_offline(struct cli *c)
{
    struct vault_value pass = {0};
    struct vault_unlock u = {0};
    struct al_error e = {0};
    bool needs_pass = false;
    int rc = vault_store_probe(c->vault_dir, &needs_pass, &e);
    if (rc) {
        fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return 1;
    }
    if (needs_pass) {
        if (cli__passphrase(c, false, &pass) != 0)
            return 1;
        u.passphrase = (const char *)pass.data;
        u.passphrase_len = pass.len;
    }
    rc = vault_store_open(c->vault_dir, &u, &c->store, &e);
    vault_value_free(&pass);
    if (rc) {
        fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return 1;
    }
    struct al_auditlog_opts ao = {.dir = c->audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    rc = al_auditlog_open(&ao, &c->audit, &e);
    if (rc) {
        if (rc == -EBUSY)
            fprintf(stderr,
                    "airlock vault: the vault's access log is held by a running airlock-vault, "
                    "but its socket %s is not reachable; use that daemon (check --state-dir)\n",
                    c->sock);
        else
            fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return 1;
    }
    struct vault_service_opts so = {.store = c->store, .audit = c->audit};
    if (vault_service_new(&so, &c->svc)) {
        fprintf(stderr, "airlock vault: out of memory\n");
        return 1;
    }
    return 0;
}

static int cli__connect(struct cli *c)
{
    struct stat st;
    if (!c->offline && stat(c->sock, &st) == 0 && S_ISSOCK(st.st_mode)) {
        char target[PATH_MAX + 8];
        snprintf(target, sizeof target, "unix:%s", c->sock);
        int status = 0;
        json_t *out = NULL;
        struct al_error e = {0};
        struct al_http_call_opts o = {
            .target = target, .method = "GET", .path = "/v1/health", .timeout_ms = 5000};
        int rc = al_http_call_json(&o, NULL, &status, &out, &e);
        json_decref(out);
        if (rc == 0 && status == 200) {
            c->daemon = true;
            return 0;
        }
        if (rc != -ECONNREFUSED && rc != -ENOENT) {
            fprintf(stderr, "airlock vault: the vault daemon at %s does not answer: %s\n", c->sock,
                    al_error_str(&e));
            return 1;
        }
    }
    if (!c->offline)
        fprintf(stderr,
                "airlock vault: note: airlock-vault is not running; working on %s "
                "directly\n",
                c->vault_dir);
    return cli__open_offline(c);
}

static void cli__close(struct cli *c)
{
    vault_service_free(c->svc);
    if (c->audit && al_auditlog_close(c->audit) != 0)
        fprintf(stderr, "airlock vault: warning: the access log could not be written "
                        "completely\n");
    vault_store_close(c->store);
}

/* One API call; *out is the JSON answer. Returns the HTTP status, or -1 (message printed). */
static int cli__call(struct cli *c, const char *method, const char *path, json_t *body,
                     json_t **out)
{
    *out = NULL;
    if (!c->daemon) {
        struct vault_peer p = {.uid = getuid(), .gid = getgid(), .pid = getpid()};
        const char *q = strchr(path, '?');
        char pbuf[1024];
        snprintf(pbuf, sizeof pbuf, "%.*s", q ? (int)(q - path) : (int)strlen(path), path);
        struct vault_api_req rq = {
            .peer = &p, .method = method, .path = pbuf, .query = q ? q + 1 : "", .body = body};
        return vault_api_handle(c->svc, &rq, out, NULL);
    }
    char target[PATH_MAX + 8];
    snprintf(target, sizeof target, "unix:%s", c->sock);
    int status = 0;
    struct al_error e = {0};
    /* wipe: create and rotate carry the secret's value. */
    struct al_http_call_opts o = {
        .target = target, .method = method, .path = path, .timeout_ms = 30000, .wipe = true};
    if (al_http_call_json(&o, body, &status, out, &e) != 0) {
        fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return -1;
    }
    return status;
}

static int cli__fail(int status, json_t *out)
{
    const char *m = json_string_value(json_object_get(out, "message"));
    fprintf(stderr, "airlock vault: %s\n", m ? m : "the vault refused the request");
    (void)status;
    json_decref(out);
    return 1;
}

/* ---- output --------------------------------------------------------------------------------------- */

static void cli__print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s)
        printf("%s\n", s);
    free(s);
}

static void cli__hosts_str(json_t *hosts, char *out, size_t n)
{
    size_t o = 0;
    out[0] = '\0';
    size_t i;
    json_t *h;
    json_array_foreach(hosts, i, h)
    {
        int k = snprintf(out + o, n - o, "%s%s", i ? "," : "", json_string_value(h));
        if (k < 0 || (size_t)k >= n - o)
            break;
        o += (size_t)k;
    }
    if (!o)
        snprintf(out, n, "(any)");
}

static void cli__print_list(json_t *out)
{
    json_t *arr = json_object_get(out, "secrets");
    size_t w = 4, i;
    json_t *s;
    json_array_foreach(arr, i, s)
    {
        size_t l = strlen(json_string_value(json_object_get(s, "name")));
        if (l > w)
            w = l;
    }
    printf("%-*s  %-7s  %-24s  %-28s  %s\n", (int)w, "NAME", "VERSION", "UPDATED", "BOUND HOSTS",
           "DESCRIPTION");
    json_array_foreach(arr, i, s)
    {
        char hosts[256];
        cli__hosts_str(json_object_get(s, "bound_hosts"), hosts, sizeof hosts);
        printf("%-*s  %-7" JSON_INTEGER_FORMAT "  %-24s  %-28s  %s\n", (int)w,
               json_string_value(json_object_get(s, "name")),
               json_integer_value(json_object_get(s, "current_version")),
               json_string_value(json_object_get(s, "updated")), hosts,
               json_string_value(json_object_get(s, "description")));
    }
    if (json_array_size(arr) == 0)
        printf("(no secrets: add one with `airlock vault put NAME`)\n");
}

static void cli__print_show(json_t *s, bool history)
{
    char hosts[1024];
    cli__hosts_str(json_object_get(s, "bound_hosts"), hosts, sizeof hosts);
    printf("name:         %s\n", json_string_value(json_object_get(s, "name")));
    const char *uid = json_string_value(json_object_get(s, "id"));
    printf("id:           %s\n", uid ? uid : "(none: given at its next rotation)");
    printf("description:  %s\n", json_string_value(json_object_get(s, "description")));
    json_t *meta = json_object_get(s, "metadata");
    if (json_object_size(meta)) {
        char *m = json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS);
        printf("metadata:     %s\n", m ? m : "");
        free(m);
    }
    printf("bound hosts:  %s\n", hosts);
    printf("version:      %" JSON_INTEGER_FORMAT " (keeps the last %" JSON_INTEGER_FORMAT ")\n",
           json_integer_value(json_object_get(s, "current_version")),
           json_integer_value(json_object_get(s, "keep")));
    printf("created:      %s\n", json_string_value(json_object_get(s, "created")));
    printf("updated:      %s\n", json_string_value(json_object_get(s, "updated")));
    printf("versions:\n");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(s, "versions"), i, v)
        printf("  v%-4" JSON_INTEGER_FORMAT " %s  %s  by %s\n",
               json_integer_value(json_object_get(v, "version")),
               json_string_value(json_object_get(v, "created")),
               json_string_value(json_object_get(v, "secret_id")),
               json_string_value(json_object_get(v, "by")));
    if (history) {
        printf("history:\n");
        json_array_foreach(json_object_get(s, "history"), i, v)
            printf("  %s  %-7s v%-4" JSON_INTEGER_FORMAT " by %s\n",
                   json_string_value(json_object_get(v, "time")),
                   json_string_value(json_object_get(v, "event")),
                   json_integer_value(json_object_get(v, "version")),
                   json_string_value(json_object_get(v, "by")));
    }
}

/* ---- commands ------------------------------------------------------------------------------------- */

static int cli__need_name(const struct cli *c, const char *cmd)
{
    if (c->n_pos != 1) {
        if (c->n_pos > 1 && (strcmp(cmd, "put") == 0 || strcmp(cmd, "rotate") == 0))
            fprintf(stderr,
                    "airlock vault: %s takes one NAME; the value comes from stdin or "
                    "--from-file, never from the command line\n",
                    cmd);
        else
            fprintf(stderr, "airlock vault: usage: airlock vault %s NAME\n", cmd);
        return 2;
    }
    struct al_error e = {0};
    if (vault_name_check(c->pos[0], &e)) {
        fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return 2;
    }
    return 0;
}

static int cli__put(struct cli *c, bool create)
{
    const char *cmd = create ? "put" : "rotate";
    int rc = cli__need_name(c, cmd);
    if (rc)
        return rc;
    if (create && c->clear_hosts) {
        fprintf(stderr, "airlock vault: --clear-bound-hosts is an option of rotate\n");
        return 2;
    }
    if (c->clear_hosts && c->n_hosts) {
        fprintf(stderr, "airlock vault: give --bound-host or --clear-bound-hosts, not both\n");
        return 2;
    }
    /* Check what we can before asking for the value. */
    for (size_t i = 0; i < c->n_hosts; i++) {
        char h[VAULT_HOST_MAX + 3];
        struct al_error e = {0};
        snprintf(h, sizeof h, "%s", c->hosts[i]);
        if (strlen(c->hosts[i]) > VAULT_HOST_MAX + 1) {
            fprintf(stderr, "airlock vault: --bound-host #%zu is too long\n", i + 1);
            return 2;
        }
        if (vault_host_check(h, true, &e)) {
            fprintf(stderr, "airlock vault: --bound-host #%zu: %s\n", i + 1, al_error_str(&e));
            return 2;
        }
    }
    if (c->description && strlen(c->description) > VAULT_DESC_MAX) {
        fprintf(stderr, "airlock vault: --description is longer than %d bytes\n", VAULT_DESC_MAX);
        return 2;
    }
    if (cli__connect(c))
        return 1;
    struct vault_value v = {0}, b64 = {0};
    if (cli__read_value(c, c->pos[0], &v) != 0)
        return 1;
    size_t bl = sodium_base64_ENCODED_LEN(v.len, sodium_base64_VARIANT_ORIGINAL);
    if (vault_value_alloc(&b64, bl)) {
        vault_value_free(&v);
        fprintf(stderr, "airlock vault: out of memory\n");
        return 1;
    }
    sodium_bin2base64((char *)b64.data, bl, v.data, v.len, sodium_base64_VARIANT_ORIGINAL);
    vault_value_free(&v);
    json_t *body = json_object();
    json_object_set_new(body, "value_b64", json_string((const char *)b64.data));
    vault_value_free(&b64);
    if (c->description)
        json_object_set_new(body, "description", json_string(c->description));
    if (c->n_hosts || c->clear_hosts) {
        json_t *h = json_array();
        for (size_t i = 0; i < c->n_hosts; i++)
            json_array_append_new(h, json_string(c->hosts[i]));
        json_object_set_new(body, "bound_hosts", h);
    }
    if (c->keep)
        json_object_set_new(body, "keep", json_integer(c->keep));
    char path[VAULT_NAME_MAX + 32];
    snprintf(path, sizeof path, "/v1/secrets/%s", c->pos[0]);
    json_t *out;
    int st = cli__call(c, create ? "POST" : "PUT", path, body, &out);
    json_decref(body); /* wiped on free (vault_harden_process) */
    if (st < 0)
        return 1;
    if (st != 200 && st != 201)
        return cli__fail(st, out);
    if (c->json) {
        cli__print_json(out);
    } else {
        json_t *v0 = json_array_get(json_object_get(out, "versions"), 0);
        printf("%s %s: version %" JSON_INTEGER_FORMAT " stored (secret id %s)\n",
               create ? "created" : "rotated", c->pos[0],
               json_integer_value(json_object_get(out, "current_version")),
               json_string_value(json_object_get(v0, "secret_id")));
    }
    json_decref(out);
    return 0;
}

static int cli__simple(struct cli *c, const char *cmd)
{
    bool list = strcmp(cmd, "ls") == 0;
    if (list ? c->n_pos != 0 : cli__need_name(c, cmd) != 0) {
        if (list)
            fprintf(stderr, "airlock vault: usage: airlock vault ls [--json]\n");
        return 2;
    }
    if (cli__connect(c))
        return 1;
    char path[VAULT_NAME_MAX + 32];
    const char *method = "GET";
    if (list)
        snprintf(path, sizeof path, "/v1/secrets");
    else if (strcmp(cmd, "history") == 0)
        snprintf(path, sizeof path, "/v1/history/%s", c->pos[0]);
    else
        snprintf(path, sizeof path, "/v1/secrets/%s", c->pos[0]);
    if (strcmp(cmd, "rm") == 0)
        method = "DELETE";
    json_t *out;
    int st = cli__call(c, method, path, NULL, &out);
    if (st < 0)
        return 1;
    if (st != 200)
        return cli__fail(st, out);
    if (c->json)
        cli__print_json(out);
    else if (list)
        cli__print_list(out);
    else if (strcmp(cmd, "rm") == 0)
        printf("deleted %s\n", c->pos[0]);
    else
        cli__print_show(out, strcmp(cmd, "history") == 0);
    json_decref(out);
    return 0;
}

static void cli__audit_self(struct al_auditlog *log, const char *op, const char *result,
                            json_t *extra)
{
    struct vault_peer p = {.uid = getuid(), .gid = getgid(), .pid = getpid()};
    char who[32];
    snprintf(who, sizeof who, "uid %u", (unsigned)p.uid);
    json_t *r = json_pack("{s:s,s:s,s:i,s:{s:I,s:I,s:I,s:s}}", "op", op, "result", result, "status",
                          strcmp(result, "ok") == 0 ? 200 : 500, "peer", "uid", (json_int_t)p.uid,
                          "gid", (json_int_t)p.gid, "pid", (json_int_t)p.pid, "who", who);
    if (extra)
        json_object_update(r, extra);
    json_decref(extra);
    if (al_auditlog_append(log, r, NULL) != 0)
        fprintf(stderr, "airlock vault: warning: cannot write the access log\n");
    json_decref(r);
}

static int cli__init(struct cli *c)
{
    if (c->n_pos) {
        fprintf(stderr, "airlock vault: usage: airlock vault init [--passphrase | "
                        "--passphrase-file F]\n");
        return 2;
    }
    struct vault_init_opts o = {.kdf_opslimit = (uint64_t)c->kdf_ops, .kdf_memlimit = c->kdf_mem};
    struct vault_value pass = {0};
    bool use_pass = c->passphrase || c->passphrase_file;
    if (!use_pass && (c->kdf_ops || c->kdf_mem)) {
        fprintf(stderr, "airlock vault: --kdf-ops/--kdf-mem apply to passphrase vaults only\n");
        return 2;
    }
    if (use_pass) {
        if (cli__passphrase(c, true, &pass) != 0)
            return 1;
        o.passphrase = (const char *)pass.data;
        o.passphrase_len = pass.len;
    }
    struct al_error e = {0};
    int rc = vault_store_init(c->vault_dir, &o, &e);
    vault_value_free(&pass);
    if (rc) {
        fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return 1;
    }
    struct al_auditlog *log;
    struct al_auditlog_opts ao = {.dir = c->audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    if (al_auditlog_open(&ao, &log, &e) != 0) {
        fprintf(stderr, "airlock vault: the vault was created but its access log cannot be: %s\n",
                al_error_str(&e));
        return 1;
    }
    cli__audit_self(log, "init", "ok",
                    json_pack("{s:s}", "kdf", use_pass ? "argon2id" : "keyfile"));
    rc = al_auditlog_close(log);
    printf("vault created in %s\n", c->vault_dir);
    if (use_pass)
        printf("unlock it with its passphrase (airlock-vault --passphrase-file FILE); there is "
               "no way to recover a lost passphrase\n");
    else
        printf("master key: %s/" VAULT_MASTER_KEY " (back it up somewhere safe: without it the "
               "vault cannot be opened)\n",
               c->vault_dir);
    printf(
        "access log public key (for `airlock vault log verify` elsewhere): %s/" VAULT_AUDIT_PREFIX
        ".pub\n",
        c->audit_dir);
    return rc ? 1 : 0;
}

static int cli__check(struct cli *c)
{
    if (c->n_pos) {
        fprintf(stderr, "airlock vault: usage: airlock vault check\n");
        return 2;
    }
    c->offline = true;
    if (cli__open_offline(c))
        return 1;
    size_t n = 0;
    struct al_error e = {0};
    int rc = vault_store_check(c->store, &n, &e);
    cli__audit_self(c->audit, "check", rc ? "error" : "ok",
                    rc ? json_pack("{s:s}", "reason", al_error_str(&e))
                       : json_pack("{s:I}", "values", (json_int_t)n));
    if (rc) {
        fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return 1;
    }
    printf("ok: %zu secret(s), %zu stored version(s): every value decrypts and matches its "
           "secret id\n",
           vault_store_catalog(c->store)->n, n);
    return 0;
}

static int cli__log(struct cli *c)
{
    const char *sub = c->n_pos ? c->pos[0] : "";
    if (c->n_pos != 1 || (strcmp(sub, "tail") != 0 && strcmp(sub, "verify") != 0)) {
        fprintf(stderr, "airlock vault: usage: airlock vault log tail [-n N] [-f] [--json] | "
                        "log verify [--pubkey F] [--checkpoints F]\n");
        return 2;
    }
    struct al_error e = {0};
    if (strcmp(sub, "verify") == 0) {
        struct al_auditlog_verify_opts vo = {.dir = c->audit_dir,
                                             .prefix = VAULT_AUDIT_PREFIX,
                                             .pubkey_file = c->pubkey,
                                             .checkpoint_file = c->checkpoints};
        struct al_auditlog_verify_result r;
        if (al_auditlog_verify(&vo, &r, &e) != 0) {
            fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
            return 1;
        }
        if (c->json) {
            json_t *j = al_auditlog_verify_json(&r);
            cli__print_json(j);
            json_decref(j);
        } else {
            al_auditlog_verify_print(&r, stdout);
        }
        return r.verdict == AL_AUDIT_INTACT ? 0 : 1;
    }
    struct al_auditlog_reader_opts ro = {
        .dir = c->audit_dir, .prefix = VAULT_AUDIT_PREFIX, .follow = c->follow};
    struct al_auditlog_reader *rd;
    if (al_auditlog_reader_open(&ro, &rd, &e) != 0) {
        fprintf(stderr, "airlock vault: %s\n", al_error_str(&e));
        return 1;
    }
    al_auditlog_reader_seek_tail(rd, c->lines ? (uint64_t)c->lines : 20);
    for (;;) {
        struct al_auditlog_record rec;
        int rc;
        while ((rc = al_auditlog_reader_next(rd, &rec)) == 1) {
            if (c->json || !rec.json) {
                printf("%.*s\n", (int)rec.len, rec.line);
                continue;
            }
            json_t *j = rec.json;
            if (rec.internal) {
                const char *time = json_string_value(json_object_get(j, "time"));
                printf("%s  -- %s checkpoint (seq %" PRIu64 ")\n", time ? time : "-",
                       json_string_value(json_object_get(json_object_get(j, "auditlog"), "reason")),
                       rec.seq);
                continue;
            }
#define CLI_S(o, k) (json_string_value(json_object_get((o), (k))) ?: "-")
            json_t *ob = json_object_get(j, "on_behalf");
            json_t *reason = json_object_get(j, "reason");
            printf("%s  %-12s %-9s %-28s %s", CLI_S(j, "time"), CLI_S(j, "op"), CLI_S(j, "result"),
                   CLI_S(j, "secret"), CLI_S(json_object_get(j, "peer"), "who"));
            if (ob)
                printf("  sandbox=%s rule=%s host=%s", CLI_S(ob, "sandbox"), CLI_S(ob, "rule"),
                       CLI_S(ob, "host"));
            if (reason)
                printf("  reason: %s", CLI_S(j, "reason"));
            printf("\n");
#undef CLI_S
        }
        fflush(stdout);
        if (rc < 0 || !c->follow)
            break;
        al_auditlog_reader_wait(rd, 1000);
    }
    al_auditlog_reader_close(rd);
    return 0;
}

int vault_hash_secret_main(int argc, char **argv)
{
    vault_harden_process();
    struct cli c0 = {0}, *c = &c0;
    int rc = cli__parse(c, argc, argv, 1);
    if (rc)
        return rc;
    if (c->help) {
        printf("usage: %s [--key FILE] [--from-file FILE] [--keep-newline]\n"
               "Reads a value (stdin, or a hidden prompt on a terminal) and prints the secret id\n"
               "(b2k:...) that audit records carry for it. The key defaults to %s/" AL_DIR_VAULT
               "/" VAULT_SECRET_ID_KEY ".\n",
               argv[0], al_state_dir());
        return 0;
    }
    if (c->given & ~(unsigned)(O_KEY | O_FROM | O_KEEPNL | O_HELP)) {
        fprintf(stderr, "airlock: %s takes --key, --from-file and --keep-newline only\n", argv[0]);
        return 2;
    }
    if (c->n_pos) {
        fprintf(stderr,
                "airlock: %s takes no arguments: the value is read from stdin or "
                "--from-file, never from the command line\n",
                argv[0]);
        return 2;
    }
    char def[PATH_MAX];
    snprintf(def, sizeof def, "%s/" AL_DIR_VAULT "/" VAULT_SECRET_ID_KEY, al_state_dir());
    unsigned char *key = sodium_malloc(32);
    struct al_error e = {0};
    if (!key || vault_key_file_load(c->key_file ? c->key_file : def, key, &e) != 0) {
        fprintf(stderr, "airlock: %s\n", key ? al_error_str(&e) : "out of memory");
        if (key)
            sodium_free(key);
        return 1;
    }
    struct vault_value v = {0};
    if (cli__read_value(c, "the secret", &v) != 0) {
        sodium_free(key);
        return 1;
    }
    char id[VAULT_SECRET_ID_LEN + 1];
    vault_secret_id(key, v.data, v.len, id);
    vault_value_free(&v);
    sodium_free(key);
    printf("%s\n", id);
    return 0;
}

int vault_cli_main(int argc, char **argv)
{
    vault_harden_process();
    if (argc < 2) {
        cli__usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        cli__usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "hash-secret") == 0)
        return vault_hash_secret_main(argc - 1, argv + 1);
    struct cli c0;
    memset(&c0, 0, sizeof c0);
    struct cli *c = &c0;
    int rc = cli__parse(c, argc, argv, 2);
    if (rc)
        return rc;
    if (c->help) {
        cli__usage(stdout);
        return 0;
    }
    snprintf(c->vault_dir, sizeof c->vault_dir, "%s/" AL_DIR_VAULT, al_state_dir());
    snprintf(c->audit_dir, sizeof c->audit_dir, "%s/" VAULT_AUDIT_DIR, c->vault_dir);
    snprintf(c->sock, sizeof c->sock, "%s/" AL_SOCK_VAULT, al_state_dir());
    signal(SIGPIPE, SIG_IGN);

    const unsigned conn = O_OFFLINE | O_PASSFILE;
    const unsigned put = conn | O_JSON | O_DESC | O_HOST | O_FROM | O_KEEP | O_KEEPNL;
    if (strcmp(cmd, "init") == 0)
        rc = cli__allowed(c, cmd, O_PASS | O_PASSFILE | O_KDFOPS | O_KDFMEM) ?: cli__init(c);
    else if (strcmp(cmd, "put") == 0)
        rc = cli__allowed(c, cmd, put) ?: cli__put(c, true);
    else if (strcmp(cmd, "rotate") == 0)
        rc = cli__allowed(c, cmd, put | O_CLEAR) ?: cli__put(c, false);
    else if (strcmp(cmd, "rm") == 0)
        rc = cli__allowed(c, cmd, conn) ?: cli__simple(c, cmd);
    else if (strcmp(cmd, "ls") == 0 || strcmp(cmd, "show") == 0 || strcmp(cmd, "history") == 0)
        rc = cli__allowed(c, cmd, conn | O_JSON) ?: cli__simple(c, cmd);
    else if (strcmp(cmd, "check") == 0)
        rc = cli__allowed(c, cmd, O_PASSFILE) ?: cli__check(c);
    else if (strcmp(cmd, "log") == 0)
        rc = cli__allowed(c, cmd, O_LINES | O_FOLLOW | O_JSON | O_PUBKEY | O_CKPTS) ?: cli__log(c);
    else if (strcmp(cmd, "get") == 0 || strcmp(cmd, "cat") == 0 || strcmp(cmd, "read") == 0) {
        fprintf(stderr, "airlock vault: there is no command to read a value back: the vault is "
                        "write-only (only the egress proxy receives values, for injection); use "
                        "`airlock vault show NAME` for metadata or `rotate` to replace it\n");
        rc = 2;
    } else {
        fprintf(stderr, "airlock vault: unknown command '%s'\n\n", cmd);
        cli__usage(stderr);
        rc = 2;
    }
    cli__close(c);
    return rc;
}
