/* cli/template: `airlock template pull|build|ls|inspect|rm`.
 *
 * pull: an image from a registry made into a template (<templates>/NAME/rootfs +
 * template.json) or only into the blob cache, by this process. The registries, their CA,
 * the cache and the bounds come from airlockd's configuration (the same file, environment
 * and --state-dir), so the CLI pulls exactly what the daemon would.
 * build, ls, inspect, rm: airlockd's template API (the SDK's) on its local socket; build
 * takes the definition the SDK sends (JSON) or a Dockerfile, and follows the build's log.
 */
#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "controlplane/config.h"
#include "cli/cp.h"
#include "controlplane/templates.h"
#include "controlplane/templates/oci.h"
#include "controlplane/templates/unpack.h"

static void tcli__usage(FILE *f)
{
    fprintf(
        f,
        "usage: airlock [--state-dir DIR] template pull REF [--name NAME] [options]\n"
        "\n"
        "Pulls the image REF (\"python:3.12\", \"reg.example:5000/team/app:1.0\",\n"
        "\"...@sha256:<hex>\") from a registry the configuration allows\n"
        "(templates.registries) into the blob cache; with --name, makes it the template NAME\n"
        "(<templates>/NAME/rootfs and template.json), unpacked by the confined airlock-unpack.\n"
        "\n"
        "options:\n"
        "  --name NAME        make the template NAME (must not exist yet)\n"
        "  --config FILE      airlockd's configuration (default %s if it exists)\n"
        "  --username USER    registry credentials: the password is read from stdin\n"
        "                     (one line), never from the command line\n"
        "  --json             print the result as JSON\n"
        "  --quiet            no progress on stderr\n"
        "\n"
        "Through airlockd (its socket %s/run/airlockd.sock):\n"
        "  build NAME (--json FILE | --dockerfile FILE) [--username USER] [--policy NAME]\n"
        "        [--force] [--quiet]\n"
        "                     builds NAME from the definition Template.build sends (JSON,\n"
        "                     '-' for stdin) or a Dockerfile, showing the build's log;\n"
        "                     --policy: the RUN steps' egress policy (default\n"
        "                     templates.build_policy)\n"
        "  ls [--json]        the templates, their status and build\n"
        "  inspect NAME       a template's builds and template.json\n"
        "  rm NAME...         removes templates no sandbox uses\n",
        CP_DEFAULT_CONFIG_FILE, al_state_dir());
}

static void tcli__progress(const struct tpl_progress *p, void *arg)
{
    (void)arg;
    fprintf(stderr, "\r%-8s layers %zu/%zu  %.1f/%.1f MiB   ", p->phase, p->layers_done, p->layers,
            (double)p->done / 1048576.0, (double)p->total / 1048576.0);
    if (strcmp(p->phase, "done") == 0)
        fputc('\n', stderr);
}

/* One line of stdin into sodium memory (the password). */
static int tcli__read_password(char **out)
{
    if (sodium_init() < 0)
        return -EIO;
    char *b = sodium_malloc(65537);
    if (!b)
        return -ENOMEM;
    size_t n = 0;
    int c;
    while (n < 65536 && (c = getchar()) != EOF && c != '\n')
        b[n++] = (char)c;
    b[n] = '\0';
    *out = b;
    return 0;
}

static int tcli__pull(int argc, char **argv)
{
    const char *ref = NULL, *name = NULL, *config = NULL, *user = NULL;
    bool json = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((strcmp(a, "--name") == 0 || strcmp(a, "--config") == 0 ||
             strcmp(a, "--username") == 0) &&
            i + 1 < argc) {
            const char *v = argv[++i];
            if (a[2] == 'n')
                name = v;
            else if (a[2] == 'c')
                config = v;
            else
                user = v;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            tcli__usage(stdout);
            return 0;
        } else if (a[0] != '-' && !ref) {
            ref = a;
        } else {
            fprintf(stderr, "airlock template pull: unexpected argument '%s'\n", a);
            tcli__usage(stderr);
            return 2;
        }
    }
    if (!ref) {
        tcli__usage(stderr);
        return 2;
    }
    if (name && !cp_template_id_valid(name)) {
        fprintf(stderr,
                "airlock template pull: '%s' is not a template name (1..64 of a-z, 0-9, '.', "
                "'_', '-', starting with a letter or digit)\n",
                name);
        return 2;
    }
    struct cp_config cfg;
    if (cp_config_load(&cfg, config, NULL, al_state_dir_arg(), stderr) < 0) {
        cp_config_free(&cfg);
        return 2;
    }
    int status = 1;
    struct tpl_creds *creds = NULL;
    struct tpl_image img;
    memset(&img, 0, sizeof img);
    char tmp[PATH_MAX] = "", dest[PATH_MAX] = "";
    struct al_error err = {0};
    if (user) {
        char *pw = NULL;
        if (tcli__read_password(&pw) < 0 || tpl_creds_new(user, pw, &creds) < 0) {
            sodium_free(pw);
            fprintf(stderr, "airlock template pull: cannot hold the credentials\n");
            goto out;
        }
        sodium_free(pw);
    }
    if (name) {
        snprintf(dest, sizeof dest, "%s/%s", cfg.templates_path, name);
        struct stat st;
        if (lstat(dest, &st) == 0) {
            fprintf(stderr, "airlock template pull: the template %s exists already (%s)\n", name,
                    dest);
            goto out;
        }
    }
    char who[64];
    snprintf(who, sizeof who, "cli:uid %u", (unsigned)getuid());
    struct tpl_pull_opts po = {.reference = ref,
                               .creds = creds,
                               .requested_by = who,
                               .progress = quiet ? NULL : tcli__progress};
    if (cp_template_pull(&cfg, &po, &img, &err) < 0) {
        if (!quiet)
            fputc('\n', stderr);
        fprintf(stderr, "airlock template pull: %s\n", err.msg);
        goto out;
    }
    tpl_creds_free(creds);
    creds = NULL;
    struct tpl_unpack_result ur = {0};
    if (name) {
        if (al_mkdir_p(cfg.templates_path, 0755) < 0) {
            fprintf(stderr, "airlock template pull: cannot make %s: %s\n", cfg.templates_path,
                    strerror(errno));
            goto out;
        }
        snprintf(tmp, sizeof tmp, "%s/.%s.pull.%d", cfg.templates_path, name, (int)getpid());
        if (mkdir(tmp, 0755) < 0) {
            fprintf(stderr, "airlock template pull: cannot make %s: %s\n", tmp, strerror(errno));
            tmp[0] = '\0';
            goto out;
        }
        json_t *t = cp_template_unpack(&cfg, name, &img, tmp, &ur, &err);
        if (!t) {
            fprintf(stderr, "airlock template pull: %s\n", err.msg);
            goto out;
        }
        int rc = cp_template_write_json(tmp, t, &err);
        json_decref(t);
        if (rc < 0 || rename(tmp, dest) < 0) {
            fprintf(stderr, "airlock template pull: cannot install %s: %s\n", dest,
                    rc < 0 ? err.msg : strerror(errno));
            goto out;
        }
        tmp[0] = '\0';
        al_fsync_dir(cfg.templates_path);
    }
    if (json) {
        json_t *o = tpl_image_template_json(&img);
        if (name) {
            json_object_set_new(o, "template", json_string(dest));
            json_object_set_new(o, "unpacked",
                                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "entries",
                                          (json_int_t)ur.entries, "bytes", (json_int_t)ur.bytes,
                                          "whiteouts", (json_int_t)ur.whiteouts, "devices_skipped",
                                          (json_int_t)ur.devices_skipped, "xattrs_skipped",
                                          (json_int_t)ur.xattrs_skipped, "ids_clamped",
                                          (json_int_t)ur.ids_clamped));
        }
        json_object_set_new(o, "bytes_pulled", json_integer((json_int_t)img.bytes_pulled));
        char *s = json_dumps(o, JSON_INDENT(2));
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
    } else {
        printf("%s %s (%zu layers, %.1f MiB, %.1f MiB pulled)%s%s\n", img.reference, img.digest,
               img.n_layers, (double)img.bytes / 1048576.0, (double)img.bytes_pulled / 1048576.0,
               name ? " -> " : "", name ? dest : "");
    }
    status = 0;
out:
    if (tmp[0])
        al_rmtree(tmp);
    tpl_creds_free(creds);
    tpl_image_free(&img);
    cp_config_free(&cfg);
    return status;
}

/* ---- build, ls, inspect, rm: airlockd's template API on its local socket ---------------- */

#define TCLI_MAX_FILE (1u << 20)

/* A file (or stdin for "-"), at most TCLI_MAX_FILE bytes, NUL-terminated. */
static char *tcli__read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "airlock template build: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *b = malloc(TCLI_MAX_FILE + 1);
    size_t n = b ? fread(b, 1, TCLI_MAX_FILE + 1, f) : 0;
    if (f != stdin)
        fclose(f);
    if (!b || n > TCLI_MAX_FILE) {
        fprintf(stderr, "airlock template build: %s is larger than %u bytes\n", path,
                TCLI_MAX_FILE);
        free(b);
        return NULL;
    }
    b[n] = '\0';
    *len = n;
    return b;
}

/* A Dockerfile's exec form (["a", "b"]) or shell form as one command line. */
static char *tcli__command(const char *rest)
{
    if (rest[0] != '[')
        return strdup(rest);
    json_t *a = json_loads(rest, 0, NULL);
    if (!json_is_array(a)) {
        json_decref(a);
        return NULL;
    }
    struct al_buf b = AL_BUF_INIT;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v)) {
            json_decref(a);
            al_buf_free(&b);
            return NULL;
        }
        al_buf_printf(&b, "%s%s", i ? " " : "", json_string_value(v));
    }
    json_decref(a);
    char *out = strndup(b.data ? b.data : "", b.len);
    al_buf_free(&b);
    return out;
}

/* The definition (TemplateBuildStartV2) of a Dockerfile: FROM, RUN, ENV, WORKDIR, USER, CMD
 * and ENTRYPOINT (the start command); EXPOSE and LABEL are ignored, said on stderr; anything
 * else (COPY and ADD need file uploads; ARG substitution, multi-stage builds) is refused,
 * naming the line. */
static json_t *tcli__dockerfile(char *text)
{
    json_t *def = json_object(), *steps = json_array();
    json_object_set_new(def, "steps", steps);
    int line = 0;
    char *save = NULL;
    /* Continuation lines are joined first: a backslash before the newline. */
    for (char *p = text; (p = strstr(p, "\\\n"));)
        p[0] = p[1] = ' ';
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        while (*l == ' ' || *l == '\t')
            l++;
        size_t n = strlen(l);
        while (n && (l[n - 1] == ' ' || l[n - 1] == '\t' || l[n - 1] == '\r'))
            l[--n] = '\0';
        if (!*l || *l == '#')
            continue;
        char *rest = l + strcspn(l, " \t");
        if (*rest)
            *rest++ = '\0';
        while (*rest == ' ' || *rest == '\t')
            rest++;
        for (char *c = l; *c; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        const char *why = NULL;
        if (!*rest) {
            why = "has no arguments";
        } else if (strcmp(l, "FROM") == 0) {
            if (json_object_get(def, "fromImage"))
                why = "is a second FROM: multi-stage builds are not supported";
            else {
                rest[strcspn(rest, " \t")] = '\0';
                json_object_set_new(def, "fromImage", json_string(rest));
            }
        } else if (!json_object_get(def, "fromImage")) {
            why = "comes before FROM";
        } else if (strcmp(l, "RUN") == 0 || strcmp(l, "CMD") == 0 || strcmp(l, "ENTRYPOINT") == 0) {
            char *cmd = tcli__command(rest);
            if (!cmd)
                why = "is not a JSON array of strings nor a shell command";
            else if (l[0] == 'R')
                json_array_append_new(steps, json_pack("{s:s,s:[s]}", "type", "RUN", "args", cmd));
            else
                json_object_set_new(def, "startCmd", json_string(cmd));
            free(cmd);
        } else if (strcmp(l, "WORKDIR") == 0 || strcmp(l, "USER") == 0) {
            json_array_append_new(steps, json_pack("{s:s,s:[s]}", "type", l, "args", rest));
        } else if (strcmp(l, "ENV") == 0) {
            json_t *args = json_array();
            if (!strchr(rest, '=')) { /* ENV NAME VALUE */
                char *v = rest + strcspn(rest, " \t");
                if (*v)
                    *v++ = '\0';
                json_array_append_new(args, json_string(rest));
                json_array_append_new(args, json_string(v));
            } else { /* ENV A=1 B=2 (unquoted values) */
                char *s2 = NULL;
                for (char *kv = strtok_r(rest, " \t", &s2); kv && !why;
                     kv = strtok_r(NULL, " \t", &s2)) {
                    char *eq = strchr(kv, '=');
                    if (!eq || eq == kv) {
                        why = "has a word that is not NAME=VALUE";
                        break;
                    }
                    *eq = '\0';
                    json_array_append_new(args, json_string(kv));
                    json_array_append_new(args, json_string(eq + 1));
                }
            }
            json_array_append_new(steps, json_pack("{s:s,s:o}", "type", "ENV", "args", args));
        } else if (strcmp(l, "EXPOSE") == 0 || strcmp(l, "LABEL") == 0) {
            fprintf(stderr, "airlock template build: line %d: %s is ignored\n", line, l);
        } else if (strcmp(l, "COPY") == 0 || strcmp(l, "ADD") == 0) {
            why = "needs file uploads, which `airlock template build` does not make yet";
        } else {
            why = "is an instruction airlock does not build (FROM, RUN, ENV, WORKDIR, USER, CMD, "
                  "ENTRYPOINT)";
        }
        if (why) {
            fprintf(stderr, "airlock template build: Dockerfile line %d: %s %s\n", line, l, why);
            json_decref(def);
            return NULL;
        }
    }
    if (!json_object_get(def, "fromImage")) {
        fprintf(stderr, "airlock template build: the Dockerfile has no FROM\n");
        json_decref(def);
        return NULL;
    }
    return def;
}

/* "step n/N" for a numbered step, else the step's name ("base", "finalize"). */
static void tcli__where(const char *step, size_t nsteps, char *out, size_t len)
{
    if (step && step[0] >= '0' && step[0] <= '9')
        snprintf(out, len, "step %s/%zu", step, nsteps);
    else
        snprintf(out, len, "%s", step ? step : "");
}

/* The base image's pull from the status answer's progress.image, in words ("" before it). */
static void tcli__pulled(const json_t *img, char *out, size_t len)
{
    out[0] = '\0';
    uint64_t total = (uint64_t)json_integer_value(json_object_get(img, "bytes"));
    if (!total)
        return;
    uint64_t cached = (uint64_t)json_integer_value(json_object_get(img, "bytesCached"));
    uint64_t pulled = (uint64_t)json_integer_value(json_object_get(img, "bytesPulled"));
    size_t layers = (size_t)json_integer_value(json_object_get(img, "layers"));
    snprintf(out, len, "%s %.1f of %.1f MiB (%zu layer%s), %.1f MiB downloaded",
             cached >= total ? "pulled" : "pulling", (double)cached / 1048576.0,
             (double)total / 1048576.0, layers, layers == 1 ? "" : "s", (double)pulled / 1048576.0);
}

/* Follows a build's status (its log paged by logsOffset, and its progress), printing on
 * stderr each log entry (elapsed, step n/N, level, message) and the base image's pull
 * (bytes pulled of the image's). On a terminal the progress is one line redrawn below the
 * log; else a line when it changed, at most one a second. The pull's end is a line either
 * way. 0 once ready, 1 on error. */
static int tcli__follow(const char *name, const char *bid, size_t nsteps, bool quiet)
{
    uint64_t t0 = al_now_ns(), offset = 0, last_line = 0;
    bool tty = !quiet && isatty(STDERR_FILENO), drawn = false;
    char said[160] = "";
    for (;;) {
        char path[512];
        snprintf(path, sizeof path, "/templates/%s/builds/%s/status?logsOffset=%llu", name, bid,
                 (unsigned long long)offset);
        int status;
        json_t *st = NULL;
        if (cp_cli_call("GET", path, NULL, &status, &st, NULL) || status != 200) {
            if (drawn)
                fputs("\r\033[K", stderr);
            json_decref(st);
            return 1;
        }
        double el = (double)(al_now_ns() - t0) / 1e9;
        json_t *logs = json_object_get(st, "logEntries");
        if (drawn && json_array_size(logs)) {
            fputs("\r\033[K", stderr);
            drawn = false;
        }
        size_t i;
        json_t *e;
        json_array_foreach(logs, i, e)
        {
            if (quiet)
                continue;
            char where[48];
            tcli__where(json_string_value(json_object_get(e, "step")), nsteps, where, sizeof where);
            fprintf(stderr, "[%6.1fs]%s%s %s: %s\n", el, where[0] ? " " : "", where,
                    json_string_value(json_object_get(e, "level")),
                    json_string_value(json_object_get(e, "message")));
        }
        offset += json_array_size(logs);
        const char *s = json_string_value(json_object_get(st, "status"));
        bool end = s && (strcmp(s, "ready") == 0 || strcmp(s, "error") == 0);
        json_t *prog = json_object_get(st, "progress");
        json_t *img = json_object_get(prog, "image");
        char pulled[160];
        tcli__pulled(img, pulled, sizeof pulled);
        bool pull_end = strncmp(pulled, "pulled", 6) == 0;
        if (!quiet && pulled[0] && strcmp(pulled, said) != 0 &&
            (pull_end || (!tty && al_now_ns() - last_line >= 1000000000ull))) {
            if (drawn)
                fputs("\r\033[K", stderr);
            drawn = false;
            fprintf(stderr, "[%6.1fs] base: %s\n", el, pulled);
            snprintf(said, sizeof said, "%s", pulled);
            last_line = al_now_ns();
        }
        if (tty && !end) {
            char where[48];
            tcli__where(json_string_value(json_object_get(prog, "step")), nsteps, where,
                        sizeof where);
            const char *pull_now = pulled[0] && !pull_end ? pulled : "";
            fprintf(stderr, "\r\033[K[%6.1fs] %s%s%s", el, where[0] ? where : "building",
                    pull_now[0] ? ": " : "", pull_now);
            drawn = true;
        }
        if (end && json_array_size(logs) == 0) {
            if (drawn)
                fputs("\r\033[K", stderr);
            int rc = strcmp(s, "ready") == 0 ? 0 : 1;
            if (rc) {
                json_t *r = json_object_get(st, "reason");
                fprintf(stderr, "airlock template build: %s failed at step %s: %s\n", name,
                        json_string_value(json_object_get(r, "step")),
                        json_string_value(json_object_get(r, "message")));
            } else {
                printf("%s %s ready (%.1f s)\n", name, bid, el);
            }
            json_decref(st);
            return rc;
        }
        json_decref(st);
        if (!end || json_array_size(logs) == 0)
            usleep(200 * 1000); /* the SDK's pace */
    }
}

static int tcli__build(int argc, char **argv)
{
    const char *name = NULL, *json_file = NULL, *dockerfile = NULL, *user = NULL, *policy = NULL;
    bool force = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0 && i + 1 < argc)
            json_file = argv[++i];
        else if (strcmp(a, "--username") == 0 && i + 1 < argc)
            user = argv[++i];
        else if (strcmp(a, "--dockerfile") == 0 && i + 1 < argc)
            dockerfile = argv[++i];
        else if (strcmp(a, "--policy") == 0 && i + 1 < argc)
            policy = argv[++i];
        else if (strcmp(a, "--force") == 0)
            force = true;
        else if (strcmp(a, "--quiet") == 0)
            quiet = true;
        else if (a[0] != '-' && !name)
            name = a;
        else {
            fprintf(stderr, "airlock template build: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!name || !json_file == !dockerfile) {
        fprintf(stderr, "usage: airlock template build NAME (--json FILE | --dockerfile FILE) "
                        "[--username USER] [--policy NAME] [--force] [--quiet]\n");
        return 2;
    }
    if (user && (json_file && strcmp(json_file, "-") == 0)) {
        fprintf(stderr, "airlock template build: --username reads the password from stdin: "
                        "give the definition as a file\n");
        return 2;
    }
    size_t len = 0;
    char *text = tcli__read_file(json_file ? json_file : dockerfile, &len);
    if (!text)
        return 1;
    json_t *def = NULL;
    if (json_file) {
        json_error_t je;
        def = json_loadb(text, len, 0, &je);
        if (!json_is_object(def)) {
            fprintf(stderr, "airlock template build: %s: not a JSON object (line %d: %s)\n",
                    json_file, je.line, je.text);
            json_decref(def);
            def = NULL;
        }
    } else {
        def = tcli__dockerfile(text);
    }
    sodium_memzero(text, len); /* it may hold fromImageRegistry's password */
    free(text);
    if (!def)
        return 1;
    if (force)
        json_object_set_new(def, "force", json_true());
    if (user) {
        char *pw = NULL;
        if (tcli__read_password(&pw) < 0) {
            fprintf(stderr, "airlock template build: cannot hold the password\n");
            json_decref(def);
            return 1;
        }
        json_object_set_new(
            def, "fromImageRegistry",
            json_pack("{s:s,s:s,s:s}", "type", "registry", "username", user, "password", pw));
        sodium_free(pw);
    }
    size_t nsteps = json_array_size(json_object_get(def, "steps"));
    int status, rc = 1;
    json_t *out = NULL;
    json_t *req = json_pack("{s:s}", "name", name);
    if (cp_cli_call("POST", "/v3/templates", req, &status, &out, NULL) == 0 && status == 202) {
        char bid[64], path[256];
        snprintf(bid, sizeof bid, "%s", json_string_value(json_object_get(out, "buildID")));
        snprintf(path, sizeof path, "/v2/templates/%s/builds/%s", name, bid);
        if (!quiet)
            fprintf(stderr, "build %s of template %s: %zu step%s\n", bid, name, nsteps,
                    nsteps == 1 ? "" : "s");
        struct al_http_header ph[] = {{"X-Airlock-Build-Policy", policy}};
        if (cp_cli_call_with(&(struct cp_cli_req){"POST", path, ph, policy ? 1 : 0, def}, &status,
                             NULL, NULL) == 0 &&
            status == 202)
            rc = tcli__follow(name, bid, nsteps, quiet);
    }
    json_decref(req);
    json_decref(out);
    json_decref(def);
    return rc;
}

static int tcli__ls(int argc, char **argv)
{
    bool as_json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (argc > (as_json ? 2 : 1)) {
        fprintf(stderr, "usage: airlock template ls [--json]\n");
        return 2;
    }
    int status;
    json_t *arr = NULL;
    if (cp_cli_call("GET", "/templates", NULL, &status, &arr, NULL) || status != 200) {
        json_decref(arr);
        return 1;
    }
    if (as_json) {
        cp_cli_print(arr);
    } else {
        printf("%-28s %-9s %-38s %s\n", "NAME", "STATUS", "BUILD", "UPDATED");
        size_t i;
        json_t *t;
        json_array_foreach(arr, i, t)
        {
            const char *b = json_string_value(json_object_get(t, "buildID"));
            printf("%-28s %-9s %-38.38s %s\n", json_string_value(json_object_get(t, "templateID")),
                   json_string_value(json_object_get(t, "buildStatus")), b && b[0] ? b : "-",
                   json_string_value(json_object_get(t, "updatedAt")));
        }
    }
    json_decref(arr);
    return 0;
}

/* The template as the API has it, with its template.json when this host has its files. */
static int tcli__inspect(int argc, char **argv)
{
    if (argc != 2 || !cp_template_id_valid(argv[1])) {
        fprintf(stderr, "usage: airlock template inspect NAME\n");
        return 2;
    }
    char path[128];
    snprintf(path, sizeof path, "/templates/%s", argv[1]);
    int status;
    json_t *t = NULL;
    if (cp_cli_call("GET", path, NULL, &status, &t, NULL) || status != 200) {
        json_decref(t);
        return 1;
    }
    char p[4300];
    snprintf(p, sizeof p, "%s/templates/%s/template.json", al_state_dir(), argv[1]);
    json_t *tj = al_json_load_file(p, NULL);
    if (tj)
        json_object_set_new(t, "templateJson", tj);
    cp_cli_print(t);
    json_decref(t);
    return 0;
}

static int tcli__rm(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: airlock template rm NAME...\n");
        return 2;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        if (!cp_template_id_valid(argv[i])) {
            fprintf(stderr, "airlock template rm: '%s' is not a template name\n", argv[i]);
            rc = 1;
            continue;
        }
        char path[128];
        snprintf(path, sizeof path, "/templates/%s", argv[i]);
        int status;
        if (cp_cli_call("DELETE", path, NULL, &status, NULL, NULL) || status != 204)
            rc = 1;
        else
            printf("%s removed\n", argv[i]);
    }
    return rc;
}

int template_cli_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        tcli__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc--;
    argv++;
    if (strcmp(cmd, "pull") == 0)
        return tcli__pull(argc, argv);
    if (strcmp(cmd, "build") == 0)
        return tcli__build(argc, argv);
    if (strcmp(cmd, "ls") == 0 || strcmp(cmd, "list") == 0)
        return tcli__ls(argc, argv);
    if (strcmp(cmd, "inspect") == 0)
        return tcli__inspect(argc, argv);
    if (strcmp(cmd, "rm") == 0)
        return tcli__rm(argc, argv);
    fprintf(stderr, "airlock template: unknown command '%s' (pull, build, ls, inspect, rm)\n", cmd);
    return 2;
}
