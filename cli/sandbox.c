/* cli/sandbox: `airlock sandbox ls|create|exec|kill|logs|pause|resume|info|snapshot|
 * rollback|fork`, `airlock snapshot ls|rm` and `airlock events ls|tail`.
 *
 * Speaks the same E2B API as the SDKs, on airlockd's local socket
 * (<state>/run/airlockd.sock, served to root and airlockd's uid without an API key), so it
 * works on the host that runs airlockd whatever address the API listens on. `exec` runs a
 * command through the sandbox's agent (process.Process/Start, Connect streaming) and
 * streams its output; its exit status becomes ours.
 */
#include <errno.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/envd_proc.h"
#include "common/http.h"
#include "common/json.h"
#include "common/paths.h"
#include "common/util.h"
#include "cli/cp.h"

#define CLI_TIMEOUT_MS 60000
/* A snapshot, a rollback or a fork copies files (up to the disk size, per copy for a fork)
 * and airlockd answers once it is done. */
#define CLI_COPY_TIMEOUT_MS 900000

static char cli__target[4200];
static int cli__timeout_ms = CLI_TIMEOUT_MS;

static void sb_cli__usage(FILE *f)
{
    fprintf(f,
            "usage: airlock [--state-dir DIR] sandbox <command>\n"
            "\n"
            "  ls [--json] [--state running|paused] [--metadata K=V]...\n"
            "  create [TEMPLATE] [--timeout SECONDS] [--metadata K=V]... [--env K=V]...\n"
            "         [--policy NAME] [--no-internet] [--allow-out HOST]... [--json]\n"
            "         TEMPLATE defaults to base; --policy sets metadata airlock.policy\n"
            "  exec ID [--user U] [--cwd DIR] [--env K=V]... [--timeout SECONDS] -- CMD [ARG...]\n"
            "         runs CMD (through /bin/bash -c when it is one string) and exits with its\n"
            "         status; past --timeout it is killed and exec exits 124\n"
            "  kill ID...\n"
            "  logs ID [--limit N] [--level debug|info|warn|error]\n"
            "  pause ID | resume ID [--timeout SECONDS] | info ID\n"
            "  snapshot ID [--name NAME] [--json]\n"
            "         snapshots its file system; prints the snapshot's id (airlock snapshot ls)\n"
            "  rollback ID SNAPSHOT [--json]\n"
            "         its file system back to one of its snapshots, in place (its processes\n"
            "         start again)\n"
            "  fork ID [--count N] [--timeout SECONDS] [--json]\n"
            "         N (default 1) new sandboxes from a checkpoint of it; prints each one's id,\n"
            "         or why it did not start (then exits 1)\n"
            "\n"
            "Talks to airlockd on %s/run/airlockd.sock.\n",
            al_state_dir());
}

int cp_cli_call(const char *method, const char *path, json_t *body, int *status, json_t **out,
                struct al_http_resp *raw)
{
    return cp_cli_call_with(&(struct cp_cli_req){method, path, NULL, 0, body}, status, out, raw);
}

int cp_cli_call_with(const struct cp_cli_req *rq, int *status, json_t **out,
                     struct al_http_resp *raw)
{
    const char *method = rq->method, *path = rq->path;
    json_t *body = rq->body;
    if (!cli__target[0])
        snprintf(cli__target, sizeof cli__target, "unix:%s/run/airlockd.sock", al_state_dir());
    struct al_http_header h[8];
    size_t nh = 0;
    if (body)
        h[nh++] = (struct al_http_header){"Content-Type", "application/json"};
    for (size_t i = 0; i < rq->n_headers && nh < sizeof h / sizeof h[0]; i++)
        h[nh++] = rq->headers[i];
    struct al_error err = {0};
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    struct al_http_resp r = {0};
    struct al_http_call_opts o = {.target = cli__target,
                                  .method = method,
                                  .path = path,
                                  .headers = h,
                                  .n_headers = nh,
                                  .body = text,
                                  .body_len = text ? strlen(text) : 0,
                                  .timeout_ms = cli__timeout_ms};
    int rc = al_http_call(&o, &r, &err);
    free(text);
    if (rc) {
        fprintf(stderr, "airlock: cannot reach airlockd (%s): %s\n", cli__target,
                al_error_str(&err));
        al_http_resp_free(&r);
        return -1;
    }
    *status = r.status;
    if (out) {
        *out = r.body.len ? json_loadb(r.body.data, r.body.len, 0, NULL) : NULL;
    }
    if (r.status >= 400) {
        json_t *e = r.body.len ? json_loadb(r.body.data, r.body.len, 0, NULL) : NULL;
        const char *m = json_string_value(json_object_get(e, "message"));
        fprintf(stderr, "airlock: %d: %s\n", r.status, m ? m : (r.body.data ? r.body.data : ""));
        json_decref(e);
    }
    if (raw)
        *raw = r;
    else
        al_http_resp_free(&r);
    return 0;
}

void cp_cli_print(json_t *v)
{
    char *t = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    printf("%s\n", t ? t : "null");
    free(t);
}

/* K=V into obj; false if malformed. */
static bool sb_cli__kv(json_t *obj, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return false;
    char *k = strndup(kv, (size_t)(eq - kv));
    json_object_set_new(obj, k, json_string(eq + 1));
    free(k);
    return true;
}

static char *sb_cli__urlenc(const char *s)
{
    size_t n = strlen(s);
    char *o = malloc(3 * n + 1), *p = o;
    if (!o)
        return NULL;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            *p++ = (char)c;
        } else {
            sprintf(p, "%%%02X", c);
            p += 3;
        }
    }
    *p = '\0';
    return o;
}

/* Every page of a list the API pages with nextToken / x-next-token (path has its query,
 * with limit), appended to all: 0, or 1 (printed). */
static int sb_cli__get_pages(const char *path0, json_t *all)
{
    char token[256] = "";
    do {
        struct al_buf path = AL_BUF_INIT;
        al_buf_printf(&path, "%s", path0);
        if (token[0])
            al_buf_printf(&path, "&nextToken=%s", token);
        int status;
        json_t *out = NULL;
        struct al_http_resp r = {0};
        int rc = cp_cli_call("GET", path.data, NULL, &status, &out, &r);
        al_buf_free(&path);
        if (rc || status != 200 || !json_is_array(out)) {
            json_decref(out);
            al_http_resp_free(&r);
            return 1;
        }
        const char *nt = al_http_resp_header(&r, "x-next-token");
        snprintf(token, sizeof token, "%s", nt ? nt : "");
        json_array_extend(all, out);
        json_decref(out);
        al_http_resp_free(&r);
    } while (token[0]);
    return 0;
}

static int sb_cli__ls(int argc, char **argv)
{
    bool as_json = false;
    const char *state = NULL;
    struct al_buf md = AL_BUF_INIT;
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                         {"state", required_argument, NULL, 's'},
                                         {"metadata", required_argument, NULL, 'm'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'j') {
            as_json = true;
        } else if (c == 's') {
            state = optarg;
        } else if (c == 'm') {
            const char *eq = strchr(optarg, '=');
            if (!eq) {
                fprintf(stderr, "airlock sandbox ls: --metadata wants KEY=VALUE\n");
                al_buf_free(&md);
                return 2;
            }
            /* The SDK's encoding: each key and value url-encoded, joined as a query. */
            char *k = strndup(optarg, (size_t)(eq - optarg));
            char *ek = sb_cli__urlenc(k), *ev = sb_cli__urlenc(eq + 1);
            al_buf_printf(&md, "%s%s=%s", md.len ? "&" : "", ek, ev);
            free(k);
            free(ek);
            free(ev);
        } else {
            sb_cli__usage(stderr);
            al_buf_free(&md);
            return 2;
        }
    }
    json_t *all = json_array();
    struct al_buf path = AL_BUF_INIT;
    al_buf_printf(&path, "/v2/sandboxes?limit=100");
    if (state)
        al_buf_printf(&path, "&state=%s", state);
    if (md.len) {
        char *e = sb_cli__urlenc(md.data);
        al_buf_printf(&path, "&metadata=%s", e);
        free(e);
    }
    int rc = sb_cli__get_pages(path.data, all);
    al_buf_free(&path);
    al_buf_free(&md);
    if (!rc) {
        if (as_json) {
            cp_cli_print(all);
        } else {
            printf("%-22s %-22s %-8s %-26s %s\n", "ID", "TEMPLATE", "STATE", "ENDS", "METADATA");
            size_t i;
            json_t *s;
            json_array_foreach(all, i, s)
            {
                char *m = json_dumps(json_object_get(s, "metadata"), JSON_COMPACT);
                printf("%-22s %-22s %-8s %-26s %s\n",
                       json_string_value(json_object_get(s, "sandboxID")),
                       json_string_value(json_object_get(s, "templateID")),
                       json_string_value(json_object_get(s, "state")),
                       json_string_value(json_object_get(s, "endAt")), m ? m : "{}");
                free(m);
            }
        }
    }
    json_decref(all);
    return rc;
}

static int sb_cli__create(int argc, char **argv)
{
    json_t *body = json_object(), *md = json_object(), *env = json_object();
    json_t *allow = json_array();
    bool as_json = false;
    static const struct option opts[] = {{"timeout", required_argument, NULL, 't'},
                                         {"metadata", required_argument, NULL, 'm'},
                                         {"env", required_argument, NULL, 'e'},
                                         {"policy", required_argument, NULL, 'p'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"no-internet", no_argument, NULL, 'n'},
                                         {"allow-out", required_argument, NULL, 'a'},
                                         {NULL, 0, NULL, 0}};
    int c, rc = 2;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            json_object_set_new(body, "timeout", json_integer(atoll(optarg)));
            break;
        case 'm':
            if (!sb_cli__kv(md, optarg))
                goto usage;
            break;
        case 'e':
            if (!sb_cli__kv(env, optarg))
                goto usage;
            break;
        case 'p':
            json_object_set_new(md, "airlock.policy", json_string(optarg));
            break;
        case 'j':
            as_json = true;
            break;
        case 'n':
            json_object_set_new(body, "allow_internet_access", json_false());
            break;
        case 'a':
            json_array_append_new(allow, json_string(optarg));
            break;
        default:
            goto usage;
        }
    }
    json_object_set_new(body, "templateID", json_string(optind < argc ? argv[optind] : "base"));
    if (json_object_size(md))
        json_object_set(body, "metadata", md);
    if (json_object_size(env))
        json_object_set(body, "envVars", env);
    if (json_array_size(allow))
        json_object_set_new(body, "network", json_pack("{s:O}", "allowOut", allow));
    int status;
    json_t *out = NULL;
    rc = 1;
    if (cp_cli_call("POST", "/v2/sandboxes", body, &status, &out, NULL) == 0 && status == 201) {
        if (as_json)
            cp_cli_print(out);
        else
            printf("%s\n", json_string_value(json_object_get(out, "sandboxID")));
        rc = 0;
    }
    json_decref(out);
    goto done;
usage:
    sb_cli__usage(stderr);
done:
    json_decref(body);
    json_decref(md);
    json_decref(env);
    json_decref(allow);
    return rc;
}

/* METHOD /sandboxes/ID<suffix>. */
static int sb_cli__simple(const char *method, const char *id, const char *suffix, json_t *body,
                          int want, bool print)
{
    char path[256];
    snprintf(path, sizeof path, "/sandboxes/%s%s", id, suffix);
    int status;
    json_t *out = NULL;
    int rc = cp_cli_call(method, path, body, &status, &out, NULL);
    if (!rc && (status == want || (want == 201 && status == 200))) {
        if (print && out)
            cp_cli_print(out);
        json_decref(out);
        return 0;
    }
    json_decref(out);
    return 1;
}

static int sb_cli__logs(int argc, char **argv)
{
    const char *limit = "1000", *level = NULL;
    static const struct option opts[] = {{"limit", required_argument, NULL, 'l'},
                                         {"level", required_argument, NULL, 'v'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'l')
            limit = optarg;
        else if (c == 'v')
            level = optarg;
        else {
            sb_cli__usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        sb_cli__usage(stderr);
        return 2;
    }
    char path[512];
    snprintf(path, sizeof path, "/v2/sandboxes/%s/logs?limit=%s%s%s", argv[optind], limit,
             level ? "&level=" : "", level ? level : "");
    int status;
    json_t *out = NULL;
    if (cp_cli_call("GET", path, NULL, &status, &out, NULL) || status != 200) {
        json_decref(out);
        return 1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(out, "logs"), i, e)
    {
        printf("%s %-5s %s\n", json_string_value(json_object_get(e, "timestamp")),
               json_string_value(json_object_get(e, "level")),
               json_string_value(json_object_get(e, "message")));
    }
    json_decref(out);
    return 0;
}

/* ---- exec: Connect streaming over the local socket (common/envd_proc) --------------------- */

static int exec__resp(struct al_http_creq *c, int status, const struct al_http_header *h, size_t n,
                      void *arg)
{
    struct al_envd_stream *x = arg;
    (void)c;
    (void)h;
    (void)n;
    x->status = status;
    return 0;
}

static void exec__output(void *arg, enum al_envd_stream_fd fd, const unsigned char *d, size_t n)
{
    (void)arg;
    FILE *f = fd == AL_ENVD_STDERR ? stderr : stdout;
    fwrite(d, 1, n, f);
    fflush(f);
}

static int exec__data(struct al_http_creq *c, const char *d, size_t len, void *arg)
{
    (void)c;
    al_envd_stream_feed(arg, d, len);
    return 0;
}

static void exec__done(struct al_http_creq *c, int err, void *arg)
{
    struct al_envd_stream *x = arg;
    if (err)
        snprintf(x->error, sizeof x->error, "%s", al_http_creq_strerror(c));
}

static int sb_cli__exec(int argc, char **argv)
{
    const char *user = NULL, *cwd = NULL;
    long timeout = 0;
    json_t *env = json_object();
    static const struct option opts[] = {{"user", required_argument, NULL, 'u'},
                                         {"cwd", required_argument, NULL, 'c'},
                                         {"env", required_argument, NULL, 'e'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {NULL, 0, NULL, 0}};
    int c;
    /* The ID first, as the usage shows it (exec ID [options] -- CMD), or after the options. */
    const char *id = NULL;
    if (argc > 1 && argv[1][0] != '-') {
        id = argv[1];
        argv++;
        argc--;
    }
    optind = 1;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (c == 'u')
            user = optarg;
        else if (c == 'c')
            cwd = optarg;
        else if (c == 'e' && sb_cli__kv(env, optarg))
            ;
        else if (c == 't')
            timeout = atol(optarg);
        else {
            json_decref(env);
            sb_cli__usage(stderr);
            return 2;
        }
    }
    if (!id && optind < argc)
        id = argv[optind++];
    if (!id) {
        json_decref(env);
        sb_cli__usage(stderr);
        return 2;
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc) {
        json_decref(env);
        sb_cli__usage(stderr);
        return 2;
    }
    /* The access token comes with the sandbox's details. */
    char path[256];
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    int status;
    json_t *info = NULL;
    if (cp_cli_call("GET", path, NULL, &status, &info, NULL) || status != 200) {
        json_decref(info);
        json_decref(env);
        return 1;
    }
    char token[256];
    snprintf(token, sizeof token, "%s",
             json_string_value(json_object_get(info, "envdAccessToken"))
                 ? json_string_value(json_object_get(info, "envdAccessToken"))
                 : "");
    json_decref(info);
    json_t *args = json_array();
    const char *cmd = "/bin/bash";
    if (argc - optind == 1) {
        json_array_append_new(args, json_string("-l"));
        json_array_append_new(args, json_string("-c"));
        json_array_append_new(args, json_string(argv[optind]));
    } else {
        cmd = argv[optind++];
        for (; optind < argc; optind++)
            json_array_append_new(args, json_string(argv[optind]));
    }
    unsigned char *env5 = NULL;
    size_t body_len = 0;
    if (al_envd_start_body(cmd, args, env, cwd, &env5, &body_len)) {
        fprintf(stderr, "airlock sandbox exec: out of memory\n");
        return 1;
    }
    char auth[600] = "", tmo[32];
    if (user)
        al_envd_user_auth(user, auth, sizeof auth);
    snprintf(tmo, sizeof tmo, "%ld", timeout * 1000);
    struct al_http_header h[8] = {{"Content-Type", "application/connect+json"},
                                  {"Connect-Protocol-Version", "1"},
                                  {"E2b-Sandbox-Id", id},
                                  {"E2b-Sandbox-Port", "49983"},
                                  {"X-Access-Token", token}};
    size_t nh = 5;
    if (auth[0])
        h[nh++] = (struct al_http_header){"Authorization", auth};
    if (timeout > 0)
        h[nh++] = (struct al_http_header){"Connect-Timeout-Ms", tmo};
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct al_envd_stream x;
    al_envd_stream_init(&x, 64u << 20, exec__output, NULL);
    struct al_http_creq_opts o = {.target = cli__target,
                                  .method = "POST",
                                  .path = "/process.Process/Start",
                                  .headers = h,
                                  .n_headers = nh,
                                  .body = env5,
                                  .body_len = body_len,
                                  .timeout_ms = 30000,
                                  .on_response = exec__resp,
                                  .on_data = exec__data,
                                  .on_done = exec__done,
                                  .arg = &x};
    struct al_http_creq *cr;
    int rc = al_http_creq_start(&loop, &o, &cr);
    if (rc == 0)
        uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    free(env5);
    explicit_bzero(token, sizeof token);
    if (rc == 0 && x.status == 200 && !x.ended && x.deadline) {
        /* envd's deadline: the agent killed the command, the stream says only that. */
        fprintf(stderr,
                "airlock sandbox exec: the command ran past --timeout %ld s and was killed\n",
                timeout);
        al_envd_stream_free(&x);
        return 124; /* as timeout(1) */
    }
    if (rc || x.status != 200 || !x.ended) {
        if (x.status && x.status != 200)
            fprintf(stderr, "airlock sandbox exec: %d: %.*s\n", x.status, (int)x.buf.len,
                    x.buf.data ? x.buf.data : "");
        else
            fprintf(stderr, "airlock sandbox exec: %s\n",
                    x.error[0] ? x.error : "the command did not report an end");
        al_envd_stream_free(&x);
        return 1;
    }
    al_envd_stream_free(&x);
    return x.exit_code & 0xff;
}

/* A whole number from min to max for option opt of command cmd; false (printed) if not. */
static bool sb_cli__uint(const char *cmd, const char *opt, const char *s, unsigned long long min,
                         unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || *s == '-' || v < min || v > max) {
        fprintf(stderr, "airlock sandbox %s: %s wants a whole number from %llu to %llu, not '%s'\n",
                cmd, opt, min, max, s);
        return false;
    }
    *out = v;
    return true;
}

/* snapshot ID [--name NAME] [--json] */
static int sb_cli__snapshot(int argc, char **argv)
{
    bool as_json = false;
    json_t *body = json_object();
    static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'n') {
            json_object_set_new(body, "name", json_string(optarg));
        } else if (c == 'j') {
            as_json = true;
        } else {
            json_decref(body);
            sb_cli__usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "airlock sandbox snapshot: one sandbox id, please\n");
        json_decref(body);
        return 2;
    }
    char path[256];
    snprintf(path, sizeof path, "/sandboxes/%s/snapshots", argv[optind]);
    int status, rc = 1;
    json_t *out = NULL;
    cli__timeout_ms = CLI_COPY_TIMEOUT_MS;
    if (cp_cli_call("POST", path, body, &status, &out, NULL) == 0 && status == 201) {
        rc = 0;
        if (as_json) {
            cp_cli_print(out);
        } else {
            printf("%s", json_string_value(json_object_get(out, "snapshotID")));
            size_t i;
            json_t *n;
            json_array_foreach(json_object_get(out, "names"), i, n)
                printf(" %s", json_string_value(n));
            printf("\n");
        }
    }
    json_decref(out);
    json_decref(body);
    return rc;
}

/* rollback ID SNAPSHOT [--json] */
static int sb_cli__rollback(int argc, char **argv)
{
    bool as_json = argc > 1 && strcmp(argv[argc - 1], "--json") == 0;
    if (as_json)
        argc--;
    if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-') {
        fprintf(stderr, "airlock sandbox rollback: wants ID SNAPSHOT [--json]\n");
        return 2;
    }
    json_t *body = json_pack("{s:s}", "snapshotID", argv[2]);
    char path[256];
    snprintf(path, sizeof path, "/sandboxes/%s/rollback", argv[1]);
    int status, rc = 1;
    json_t *out = NULL;
    cli__timeout_ms = CLI_COPY_TIMEOUT_MS;
    if (cp_cli_call("POST", path, body, &status, &out, NULL) == 0 && status == 200) {
        rc = 0;
        if (as_json)
            cp_cli_print(out);
        else
            printf("rolled back %s to %s\n", argv[1], argv[2]);
    }
    json_decref(out);
    json_decref(body);
    return rc;
}

/* fork ID [--count N] [--timeout SECONDS] [--json] */
static int sb_cli__fork(int argc, char **argv)
{
    bool as_json = false;
    json_t *body = json_object();
    static const struct option opts[] = {{"count", required_argument, NULL, 'c'},
                                         {"timeout", required_argument, NULL, 't'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int c;
    unsigned long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'c' && sb_cli__uint("fork", "--count", optarg, 1, 100000, &v)) {
            json_object_set_new(body, "count", json_integer((json_int_t)v));
        } else if (c == 't' && sb_cli__uint("fork", "--timeout", optarg, 1, 31536000, &v)) {
            json_object_set_new(body, "timeout", json_integer((json_int_t)v));
        } else if (c == 'j') {
            as_json = true;
        } else {
            if (c != 'c' && c != 't')
                sb_cli__usage(stderr);
            json_decref(body);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "airlock sandbox fork: one sandbox id, please\n");
        json_decref(body);
        return 2;
    }
    char path[256];
    snprintf(path, sizeof path, "/sandboxes/%s/fork", argv[optind]);
    int status, rc = 1;
    json_t *out = NULL;
    cli__timeout_ms = CLI_COPY_TIMEOUT_MS;
    if (cp_cli_call("POST", path, body, &status, &out, NULL) == 0 && status == 201 &&
        json_is_array(out)) {
        rc = 0;
        if (as_json)
            cp_cli_print(out);
        size_t i;
        json_t *e;
        json_array_foreach(out, i, e)
        {
            const char *id =
                json_string_value(json_object_get(json_object_get(e, "sandbox"), "sandboxID"));
            json_t *err = json_object_get(e, "error");
            if (id && !as_json) {
                printf("%s\n", id);
            } else if (!id) {
                rc = 1;
                fprintf(stderr, "airlock sandbox fork: copy %zu did not start: %d: %s\n", i + 1,
                        (int)json_integer_value(json_object_get(err, "code")),
                        json_string_value(json_object_get(err, "message")) ?: "(no message)");
            }
        }
    }
    json_decref(out);
    json_decref(body);
    return rc;
}

int sandbox_cli_main(int argc, char **argv)
{
    if (sodium_init() < 0)
        return 1;
    snprintf(cli__target, sizeof cli__target, "unix:%s/run/airlockd.sock", al_state_dir());
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        sb_cli__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc--;
    argv++;
    if (!strcmp(cmd, "ls") || !strcmp(cmd, "list"))
        return sb_cli__ls(argc, argv);
    if (!strcmp(cmd, "create"))
        return sb_cli__create(argc, argv);
    if (!strcmp(cmd, "exec"))
        return sb_cli__exec(argc, argv);
    if (!strcmp(cmd, "logs"))
        return sb_cli__logs(argc, argv);
    if (!strcmp(cmd, "snapshot"))
        return sb_cli__snapshot(argc, argv);
    if (!strcmp(cmd, "rollback"))
        return sb_cli__rollback(argc, argv);
    if (!strcmp(cmd, "fork"))
        return sb_cli__fork(argc, argv);
    if (argc < 2) {
        sb_cli__usage(stderr);
        return 2;
    }
    if (!strcmp(cmd, "kill")) {
        int rc = 0;
        for (int i = 1; i < argc; i++) {
            if (sb_cli__simple("DELETE", argv[i], "", NULL, 204, false))
                rc = 1;
            else
                printf("killed %s\n", argv[i]);
        }
        return rc;
    }
    if (!strcmp(cmd, "pause"))
        return sb_cli__simple("POST", argv[1], "/pause", NULL, 204, false);
    if (!strcmp(cmd, "info"))
        return sb_cli__simple("GET", argv[1], "", NULL, 200, true);
    if (!strcmp(cmd, "resume")) {
        json_t *b = json_object();
        if (argc > 3 && !strcmp(argv[2], "--timeout"))
            json_object_set_new(b, "timeout", json_integer(atoll(argv[3])));
        int rc = sb_cli__simple("POST", argv[1], "/connect", b, 201, false);
        json_decref(b);
        return rc;
    }
    fprintf(stderr, "airlock sandbox: unknown command '%s'\n\n", cmd);
    sb_cli__usage(stderr);
    return 2;
}

/* ---- airlock events ---------------------------------------------------------------------- */

static void ev_cli__usage(FILE *f)
{
    fprintf(
        f,
        "usage: airlock [--state-dir DIR] events <command>\n"
        "\n"
        "  ls [--sandbox ID] [--type TYPE]... [--limit N] [--offset N] [--asc] [--json]\n"
        "         the newest lifecycle events first (--asc: oldest first); N at most 100\n"
        "  tail [--sandbox ID] [--type TYPE]... [--json]\n"
        "         prints events as they happen until interrupted\n"
        "  TYPE: created, killed, updated, paused, resumed, checkpointed, rolled_back, forked,\n"
        "        terminal_opened, terminal_closed, snapshot_deleted, node_lost\n"
        "        (or the full sandbox.lifecycle.NAME; airlockd checks it)\n"
        "\n"
        "Talks to airlockd on %s/run/airlockd.sock.\n",
        al_state_dir());
}

struct ev_cli_opts {
    const char *sandbox;
    struct al_buf query;
    bool as_json, asc;
};

/* Parses the options common to ls and tail (and ls's own); 2 on a usage error. */
static int ev_cli__opts(int argc, char **argv, bool is_ls, struct ev_cli_opts *o)
{
    static const struct option opts[] = {{"sandbox", required_argument, NULL, 's'},
                                         {"type", required_argument, NULL, 't'},
                                         {"limit", required_argument, NULL, 'l'},
                                         {"offset", required_argument, NULL, 'o'},
                                         {"asc", no_argument, NULL, 'a'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    al_buf_init(&o->query, 64 * 1024);
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *enc = NULL;
        switch (c) {
        case 's':
            o->sandbox = optarg;
            break;
        case 't': {
            char full[128];
            snprintf(full, sizeof full, "%s%s",
                     strncmp(optarg, "sandbox.", 8) == 0 ? "" : "sandbox.lifecycle.", optarg);
            enc = sb_cli__urlenc(full);
            al_buf_printf(&o->query, "%stypes=%s", o->query.len ? "&" : "", enc ? enc : "");
            break;
        }
        case 'l':
        case 'o':
            if (!is_ls)
                return 2;
            enc = sb_cli__urlenc(optarg);
            al_buf_printf(&o->query, "%s%s=%s", o->query.len ? "&" : "",
                          c == 'l' ? "limit" : "offset", enc ? enc : "");
            break;
        case 'a':
            if (!is_ls)
                return 2;
            o->asc = true;
            break;
        case 'j':
            o->as_json = true;
            break;
        default:
            return 2;
        }
        free(enc);
    }
    if (optind < argc)
        return 2;
    if (o->asc)
        al_buf_printf(&o->query, "%sorderAsc=true", o->query.len ? "&" : "");
    return 0;
}

static void ev_cli__path(const struct ev_cli_opts *o, char *out, size_t outlen)
{
    char *enc = o->sandbox ? sb_cli__urlenc(o->sandbox) : NULL;
    snprintf(out, outlen, "/events/sandboxes%s%s%s%.*s", enc ? "/" : "", enc ? enc : "",
             o->query.len ? "?" : "", (int)o->query.len, o->query.data ? o->query.data : "");
    free(enc);
}

/* One line per event: time, type, sandbox, cause (and the key). */
static void ev_cli__line(json_t *e)
{
    const char *type = json_string_value(json_object_get(e, "type"));
    json_t *d = json_object_get(e, "eventData");
    const char *cause = json_string_value(json_object_get(d, "cause"));
    const char *key = json_string_value(json_object_get(d, "apiKeyId"));
    const char *tmo = json_string_value(json_object_get(d, "set_timeout"));
    printf("%-27s %-10s %-22s %s%s%s%s%s\n", json_string_value(json_object_get(e, "timestamp")),
           type && strncmp(type, "sandbox.lifecycle.", 18) == 0 ? type + 18 : (type ? type : "?"),
           json_string_value(json_object_get(e, "sandboxId")), cause ? cause : "-",
           key ? " by " : "", key ? key : "", tmo ? " until " : "", tmo ? tmo : "");
}

static int ev_cli__ls(int argc, char **argv)
{
    struct ev_cli_opts o;
    if (ev_cli__opts(argc, argv, true, &o)) {
        al_buf_free(&o.query);
        ev_cli__usage(stderr);
        return 2;
    }
    char path[70000];
    ev_cli__path(&o, path, sizeof path);
    al_buf_free(&o.query);
    int status;
    json_t *arr = NULL;
    if (cp_cli_call("GET", path, NULL, &status, &arr, NULL) || status != 200) {
        json_decref(arr);
        return 1;
    }
    if (o.as_json) {
        cp_cli_print(arr);
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) ev_cli__line(e);
    }
    json_decref(arr);
    return 0;
}

struct ev_tail {
    struct al_buf line; /* the Server-Sent Events line being read */
    struct al_buf body; /* an error answer */
    int status;
    bool as_json;
    char closing[256]; /* the server's last comment, why it ended the stream */
};

static int ev_cli__resp(struct al_http_creq *c, int status, const struct al_http_header *h,
                        size_t n, void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct ev_tail *)arg)->status = status;
    return 0;
}

static void ev_cli__sse_line(struct ev_tail *t, const char *l, size_t n)
{
    if (n >= 6 && strncmp(l, "data: ", 6) == 0) {
        json_t *e = json_loadb(l + 6, n - 6, 0, NULL);
        if (!e)
            return;
        if (t->as_json) {
            char *s = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
            printf("%s\n", s ? s : "null");
            free(s);
        } else {
            ev_cli__line(e);
        }
        json_decref(e);
        fflush(stdout);
    } else if (n == 7 && strncmp(l, ": ready", 7) == 0) {
        /* Subscribed: every event from now on is printed. */
        fprintf(stderr, "airlock events tail: following (interrupt to stop)\n");
    } else if (n >= 2 && l[0] == ':' && strncmp(l, ": keep-alive", 12) != 0) {
        snprintf(t->closing, sizeof t->closing, "%.*s", (int)(n - 2), l + 2);
    }
}

static int ev_cli__data(struct al_http_creq *c, const char *d, size_t len, void *arg)
{
    (void)c;
    struct ev_tail *t = arg;
    if (t->status != 200) {
        al_buf_append(&t->body, d, len);
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (d[i] != '\n') {
            if (al_buf_append(&t->line, d + i, 1))
                t->line.len = 0; /* a line beyond any event's size: dropped */
            continue;
        }
        ev_cli__sse_line(t, t->line.data ? t->line.data : "", t->line.len);
        t->line.len = 0;
    }
    return 0;
}

static void ev_cli__done(struct al_http_creq *c, int err, void *arg)
{
    (void)c;
    (void)err;
    (void)arg;
}

static int ev_cli__tail(int argc, char **argv)
{
    struct ev_tail t = {0};
    struct ev_cli_opts o;
    if (ev_cli__opts(argc, argv, false, &o)) {
        al_buf_free(&o.query);
        ev_cli__usage(stderr);
        return 2;
    }
    t.as_json = o.as_json;
    char path[70000];
    ev_cli__path(&o, path, sizeof path);
    al_buf_free(&o.query);
    al_buf_init(&t.line, 1u << 20);
    al_buf_init(&t.body, 64 * 1024);
    struct al_http_header h[] = {{"Accept", "text/event-stream"}};
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct al_http_creq_opts co = {.target = cli__target,
                                   .method = "GET",
                                   .path = path,
                                   .headers = h,
                                   .n_headers = 1,
                                   .timeout_ms = 30000,
                                   .on_response = ev_cli__resp,
                                   .on_data = ev_cli__data,
                                   .on_done = ev_cli__done,
                                   .arg = &t};
    struct al_http_creq *cr;
    int rc = al_http_creq_start(&loop, &co, &cr);
    if (rc == 0)
        uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    int ret = 0;
    if (rc || t.status == 0) {
        fprintf(stderr, "airlock events tail: cannot reach airlockd (%s)\n", cli__target);
        ret = 1;
    } else if (t.status != 200) {
        json_t *e = t.body.len ? json_loadb(t.body.data, t.body.len, 0, NULL) : NULL;
        const char *m = json_string_value(json_object_get(e, "message"));
        fprintf(stderr, "airlock: %d: %s\n", t.status, m ? m : "");
        json_decref(e);
        ret = 1;
    } else {
        fprintf(stderr, "airlock events tail: the stream ended%s%s\n", t.closing[0] ? ": " : "",
                t.closing);
        ret = 1;
    }
    al_buf_free(&t.line);
    al_buf_free(&t.body);
    return ret;
}

int events_cli_main(int argc, char **argv)
{
    snprintf(cli__target, sizeof cli__target, "unix:%s/run/airlockd.sock", al_state_dir());
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        ev_cli__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc--;
    argv++;
    if (!strcmp(cmd, "ls") || !strcmp(cmd, "list"))
        return ev_cli__ls(argc, argv);
    if (!strcmp(cmd, "tail"))
        return ev_cli__tail(argc, argv);
    fprintf(stderr, "airlock events: unknown command '%s'\n\n", cmd);
    ev_cli__usage(stderr);
    return 2;
}

/* ---- airlock snapshot -------------------------------------------------------------------- */

static void snap_cli__usage(FILE *f)
{
    fprintf(f,
            "usage: airlock [--state-dir DIR] snapshot <command>\n"
            "\n"
            "  ls [--sandbox ID] [--name NAME] [--json]\n"
            "         the snapshots taken through this CLI (airlock sandbox snapshot), oldest\n"
            "         first; those of an API key are its own (Sandbox.listSnapshots)\n"
            "  rm SNAPSHOT...\n"
            "         deletes them (sandboxes started from one keep their copy)\n"
            "\n"
            "Talks to airlockd on %s/run/airlockd.sock.\n",
            al_state_dir());
}

static int snap_cli__ls(int argc, char **argv)
{
    bool as_json = false;
    const char *sandbox = NULL, *name = NULL;
    static const struct option opts[] = {{"sandbox", required_argument, NULL, 's'},
                                         {"name", required_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {NULL, 0, NULL, 0}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 's') {
            sandbox = optarg;
        } else if (c == 'n') {
            name = optarg;
        } else if (c == 'j') {
            as_json = true;
        } else {
            snap_cli__usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        snap_cli__usage(stderr);
        return 2;
    }
    json_t *all = json_array();
    struct al_buf path = AL_BUF_INIT;
    al_buf_printf(&path, "/snapshots?limit=100");
    const char *keys[] = {"sandboxID", "name"}, *vals[] = {sandbox, name};
    for (int i = 0; i < 2; i++) {
        if (!vals[i])
            continue;
        char *e = sb_cli__urlenc(vals[i]);
        al_buf_printf(&path, "&%s=%s", keys[i], e ? e : "");
        free(e);
    }
    int rc = sb_cli__get_pages(path.data, all);
    al_buf_free(&path);
    if (!rc && as_json) {
        cp_cli_print(all);
    } else if (!rc) {
        printf("%-26s %-22s %-24s %10s %-24s %s\n", "ID", "SANDBOX", "TEMPLATE", "SIZE", "CREATED",
               "NAMES");
        size_t i;
        json_t *s;
        json_array_foreach(all, i, s)
        {
            struct al_buf names = AL_BUF_INIT;
            size_t j;
            json_t *n;
            json_array_foreach(json_object_get(s, "names"), j, n)
                al_buf_printf(&names, "%s%s", j ? "," : "", json_string_value(n));
            printf("%-26s %-22s %-24s %10lld %-24s %s\n",
                   json_string_value(json_object_get(s, "snapshotID")),
                   json_string_value(json_object_get(s, "sandboxID")),
                   json_string_value(json_object_get(s, "templateID")),
                   (long long)json_integer_value(json_object_get(s, "sizeBytes")),
                   json_string_value(json_object_get(s, "createdAt")),
                   names.len ? names.data : "-");
            al_buf_free(&names);
        }
    }
    json_decref(all);
    return rc;
}

int snapshot_cli_main(int argc, char **argv)
{
    if (sodium_init() < 0)
        return 1;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        snap_cli__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc--;
    argv++;
    if (!strcmp(cmd, "ls") || !strcmp(cmd, "list"))
        return snap_cli__ls(argc, argv);
    if (!strcmp(cmd, "rm") || !strcmp(cmd, "delete")) {
        if (argc < 2) {
            fprintf(stderr, "airlock snapshot rm: which snapshots?\n");
            return 2;
        }
        int rc = 0;
        for (int i = 1; i < argc; i++) {
            char path[256];
            snprintf(path, sizeof path, "/templates/%s", argv[i]);
            int status;
            if (cp_cli_call("DELETE", path, NULL, &status, NULL, NULL) || status != 204)
                rc = 1;
            else
                printf("deleted %s\n", argv[i]);
        }
        return rc;
    }
    fprintf(stderr, "airlock snapshot: unknown command '%s'\n\n", cmd);
    snap_cli__usage(stderr);
    return 2;
}
