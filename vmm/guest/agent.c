/* vmm/guest/agent: the agent's state, its configuration (init channel and POST /init), who
 * it acts as, and the router that splits requests between envd and the code interpreter.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sodium.h>
#include <sys/statvfs.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "protojson.h"
#include "spawn.h"

void agent_limits_default(struct agent_limits *lim)
{
    lim->rpc_max_body = 8u << 20;
    lim->json_max_body = 8u << 20;
    lim->max_procs = 512;
    lim->max_subscribers = 32;
    lim->stream_high_water = 256u << 10;
    lim->stdin_max_queued = 1u << 20;
    lim->max_watchers = 64;
    lim->max_watches = 8192;
    lim->max_watcher_events = 4096;
    lim->watcher_idle_ms = 600000;
    lim->max_contexts = 16;
    lim->max_pending_exec = 16;
    lim->kernel_max_frame = 64u << 20;
    lim->max_list_entries = 200000;
    lim->max_upload_bytes = 10ull << 30;
    lim->max_retained_exits = 256;
    lim->forward_timeout_ms = 110000; /* under airlockd's 120 s: our 504 reaches the client */
}

/* Appends ", <what>" (no comma first) to buf. */
__attribute__((format(printf, 3, 4))) static void agent__note(char *buf, size_t cap,
                                                              const char *fmt, ...)
{
    size_t n = strlen(buf);
    if (n && n + 2 < cap) {
        memcpy(buf + n, ", ", 3);
        n += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

int agent_init(struct agent *a, uv_loop_t *loop, struct al_error *err)
{
    a->loop = loop;
    a->env = json_object();
    a->self_uid = getuid();
    a->self_gid = getgid();
    a->pid1 = getpid() == 1;
    a->vm_guest = agent_vm_guest_detect();
    a->can_switch_user = agent_can_switch_user();
    a->start_ns = al_now_ns();
    if (!a->path_env) {
        const char *p = getenv("PATH");
        a->path_env =
            strdup(p && *p ? p : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    }
    if (!a->python)
        a->python = strdup("python3");
    if (!a->node)
        a->node = strdup("node");
    int r = agent_procs_init(a);
    if (r == 0)
        r = agent_watchers_init(a);
    if (r == 0)
        r = agent_interp_init(a);
    if (r < 0)
        return al_error_set(err, r, "cannot initialise the agent's services: %s", strerror(-r));
    return 0;
}

static void agent__free_token(struct agent *a)
{
    if (a->token) {
        sodium_memzero(a->token, a->token_len);
        sodium_free(a->token);
    }
    a->token = NULL;
    a->token_len = 0;
}

void agent_free(struct agent *a)
{
    agent_forward_free(a);
    agent_interp_free(a);
    agent_watchers_free(a);
    agent_start_free(a);
    agent_procs_free(a);
    agent__free_token(a);
    free(a->start_cmd);
    free(a->ready_cmd);
    json_decref(a->env);
    free(a->default_user);
    free(a->default_workdir);
    free(a->sandbox_id);
    free(a->template_id);
    free(a->hostname);
    free(a->home_override);
    free(a->path_env);
    free(a->python);
    free(a->node);
    free(a->ca_root);
    agent_userdb_free(&a->users);
}

static int agent__set_str(char **dst, const json_t *obj, const char *key, const char *alt,
                          struct al_error *err)
{
    const char *v;
    int r = agent_pj_string(obj, key, alt, &v, err);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    if (!*v)
        return 0; /* envd: an empty value keeps the current one */
    char *s = strdup(v);
    if (!s)
        return -ENOMEM;
    free(*dst);
    *dst = s;
    return 0;
}

int agent_apply_init(struct agent *a, json_t *init, struct al_error *err)
{
    if (!json_is_object(init))
        return al_error_set(err, -EINVAL, "the init message must be a JSON object");
    json_t *env = NULL;
    int r = agent_pj_string_map(init, "envVars", "env_vars", &env, err);
    if (r < 0 && r != -ENOENT)
        return r;
    const char *token = NULL;
    r = agent_pj_string(init, "accessToken", "access_token", &token, err);
    if (r < 0 && r != -ENOENT)
        return r;
    if (token && strlen(token) > 4096)
        return al_error_set(err, -EINVAL, "accessToken is longer than 4096 bytes");
    const char *ca = NULL;
    r = agent_pj_string(init, "caCertPem", "ca_cert_pem", &ca, err);
    if (r < 0 && r != -ENOENT)
        return r;
    if (ca && *ca && (r = agent_ca_check(ca, strlen(ca), err)) < 0)
        return r;
    const char *wd = NULL;
    if (agent_pj_string(init, "defaultWorkdir", "default_workdir", &wd, err) == 0 && *wd &&
        wd[0] != '/')
        return al_error_set(err, -EINVAL, "defaultWorkdir '%.200s' must be an absolute path", wd);
    json_t *agent_opts = json_object_get(init, "agent");
    bool ci = a->code_interpreter;
    if (agent_opts && !json_is_null(agent_opts)) {
        json_t *v =
            json_is_object(agent_opts) ? json_object_get(agent_opts, "code_interpreter") : NULL;
        if (!json_is_object(agent_opts) || (v && !json_is_boolean(v)))
            return al_error_set(err, -EINVAL,
                                "\"agent\" must be an object whose \"code_interpreter\" is a "
                                "boolean (the template.json's agent settings)");
        if (v)
            ci = json_is_true(v);
    }
    const char *start_cmd = NULL, *ready_cmd = NULL;
    if (((r = agent_pj_string(init, "startCmd", "start_cmd", &start_cmd, err)) < 0 &&
         r != -ENOENT) ||
        ((r = agent_pj_string(init, "readyCmd", "ready_cmd", &ready_cmd, err)) < 0 && r != -ENOENT))
        return r;
    /* Validate everything before changing anything. */
    struct agent_vm_init vm;
    r = agent_vm_parse(init, &vm, err);
    if (r == 0)
        r = agent_vm_apply(a, &vm, err);
    sodium_memzero(vm.seed, sizeof vm.seed);
    if (r < 0)
        return r;
    if ((r = agent__set_str(&a->default_user, init, "defaultUser", "default_user", err)) < 0 ||
        (r = agent__set_str(&a->default_workdir, init, "defaultWorkdir", "default_workdir", err)) <
            0 ||
        (r = agent__set_str(&a->sandbox_id, init, "sandboxID", "sandbox_id", err)) < 0 ||
        (r = agent__set_str(&a->template_id, init, "templateID", "template_id", err)) < 0 ||
        (r = agent__set_str(&a->hostname, init, "hostname", NULL, err)) < 0)
        return r;
    if (ca && *ca && (r = agent_install_ca(a, ca, strlen(ca), err)) < 0)
        return r;
    if (env) {
        json_t *copy = json_deep_copy(env);
        json_decref(a->env);
        a->env = copy;
    }
    a->code_interpreter = ci;
    /* They run once per agent (startcmd.c): a later init cannot change what already runs. */
    if (!a->start && start_cmd) {
        free(a->start_cmd);
        a->start_cmd = *start_cmd ? strdup(start_cmd) : NULL;
    }
    if (!a->start && ready_cmd) {
        free(a->ready_cmd);
        a->ready_cmd = *ready_cmd ? strdup(ready_cmd) : NULL;
    }
    if (token && *token) {
        size_t n = strlen(token);
        char *t = sodium_malloc(n + 1);
        if (!t)
            return al_error_set(err, -ENOMEM, "out of memory for the access token");
        memcpy(t, token, n + 1);
        agent__free_token(a);
        a->token = t;
        a->token_len = n;
    }
    /* One line for what was set (each log line wakes airlock-vmm, which copies it into the
     * sandbox's log, during every sandbox's start). */
    char what[400] = "";
    if (env)
        agent__note(what, sizeof what, "%zu environment variable(s) set", json_object_size(env));
    if (token && *token)
        agent__note(what, sizeof what, "access token set (%zu bytes)", a->token_len);
    if (a->default_user)
        agent__note(what, sizeof what, "default user '%.64s'", a->default_user);
    if (a->default_workdir)
        agent__note(what, sizeof what, "default workdir '%.200s'", a->default_workdir);
    if (what[0])
        al_info("init: %s", what);
    return 0;
}

bool agent_token_ok(const struct agent *a, const char *presented)
{
    if (!a->token)
        return true;
    if (!presented)
        return false;
    size_t n = strlen(presented);
    /* Length is not secret (tokens have a fixed format); content is compared in constant time. */
    if (n != a->token_len)
        return false;
    return sodium_memcmp(a->token, presented, n) == 0;
}

int agent_resolve_user(struct agent *a, const char *name, struct agent_user *u,
                       struct al_error *err)
{
    int r;
    if (!name) {
        if (a->default_user) {
            name = a->default_user;
        } else if (a->can_switch_user && agent_user_by_name(&a->users, "user", u, NULL) == 0) {
            name = "user";
        }
    }
    if (name) {
        r = agent_user_by_spec(&a->users, name, u, err);
        if (r < 0)
            return r;
    } else {
        r = agent_user_by_uid(&a->users, a->self_uid, u, NULL);
        if (r < 0) {
            /* Not in passwd (tests on a host): describe ourselves. */
            memset(u, 0, sizeof *u);
            snprintf(u->name, sizeof u->name, "%u", (unsigned)a->self_uid);
            u->uid = a->self_uid;
            u->gid = a->self_gid;
            const char *h = getenv("HOME");
            snprintf(u->home, sizeof u->home, "%s", h && *h == '/' ? h : "/");
            u->groups[0] = a->self_gid;
            u->ngroups = 1;
        }
    }
    if (u->uid != a->self_uid && !a->can_switch_user)
        return al_error_set(err, -EPERM,
                            "cannot act as user '%s' (uid %u): the agent runs as uid %u without "
                            "CAP_SETUID/CAP_SETGID (it is not the sandbox's init); use the "
                            "default user",
                            u->name, (unsigned)u->uid, (unsigned)a->self_uid);
    if (a->home_override && u->uid == a->self_uid)
        snprintf(u->home, sizeof u->home, "%s", a->home_override);
    return 0;
}

int agent_basic_auth_user(const struct al_http_req *req, char *buf, size_t buflen)
{
    const char *h = al_http_req_header(req, "Authorization");
    if (!h)
        return -ENOENT;
    if (strncasecmp(h, "Basic ", 6) != 0)
        return -ENOENT; /* other schemes are not about users */
    const char *b = h + 6;
    while (*b == ' ')
        b++;
    struct al_buf dec;
    al_buf_init(&dec, 1024);
    if (agent_pj_base64_decode(b, strlen(b), &dec) < 0 || !dec.data) {
        al_buf_free(&dec);
        return -EINVAL;
    }
    char *colon = memchr(dec.data, ':', dec.len);
    size_t n = colon ? (size_t)(colon - dec.data) : dec.len;
    if (n == 0 || n >= buflen || memchr(dec.data, '\0', n)) {
        al_buf_free(&dec);
        return -EINVAL;
    }
    memcpy(buf, dec.data, n);
    buf[n] = '\0';
    al_buf_free_wipe(&dec);
    return 0;
}

void agent_free_strv(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

/* Adds or replaces NAME=value in a growing NULL-terminated vector. */
static int agent__env_set(char ***vp, size_t *n, size_t *cap, const char *name, const char *value)
{
    size_t nl = strlen(name);
    char *e = malloc(nl + strlen(value) + 2);
    if (!e)
        return -ENOMEM;
    sprintf(e, "%s=%s", name, value);
    char **v = *vp;
    for (size_t i = 0; i < *n; i++) {
        if (strncmp(v[i], name, nl) == 0 && v[i][nl] == '=') {
            free(v[i]);
            v[i] = e;
            return 0;
        }
    }
    if (*n + 2 > *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        char **nv = realloc(v, nc * sizeof *nv);
        if (!nv) {
            free(e);
            return -ENOMEM;
        }
        v = *vp = nv;
        *cap = nc;
    }
    v[(*n)++] = e;
    v[*n] = NULL;
    return 0;
}

static bool agent__env_name_ok(const char *k)
{
    return *k && !strchr(k, '=') && strlen(k) < 4096;
}

char **agent_child_env(struct agent *a, const struct agent_user *u, const json_t *extra,
                       const char *const *more)
{
    char **v = NULL;
    size_t n = 0, cap = 0;
    agent__env_set(&v, &n, &cap, "PATH", a->path_env);
    agent__env_set(&v, &n, &cap, "HOME", u->home);
    agent__env_set(&v, &n, &cap, "USER", u->name);
    agent__env_set(&v, &n, &cap, "LOGNAME", u->name);
    if (a->ca_installed) {
        /* The trust stores with the sandbox CA, for programs that bring their own. */
        char bundle[PATH_MAX], ca[PATH_MAX];
        const char *root = a->ca_root && strcmp(a->ca_root, "/") != 0 ? a->ca_root : "";
        snprintf(bundle, sizeof bundle, "%s%s", root, AGENT_CA_BUNDLE);
        snprintf(ca, sizeof ca, "%s%s", root, AGENT_CA_FILE);
        agent__env_set(&v, &n, &cap, "SSL_CERT_FILE", bundle);
        agent__env_set(&v, &n, &cap, "REQUESTS_CA_BUNDLE", bundle);
        agent__env_set(&v, &n, &cap, "CURL_CA_BUNDLE", bundle);
        agent__env_set(&v, &n, &cap, "NODE_EXTRA_CA_CERTS", ca);
    }
    const char *k;
    json_t *val;
    json_object_foreach(a->env, k, val)
    {
        if (agent__env_name_ok(k) && json_is_string(val))
            agent__env_set(&v, &n, &cap, k, json_string_value(val));
    }
    if (extra) {
        json_object_foreach((json_t *)extra, k, val)
        {
            if (agent__env_name_ok(k) && json_is_string(val))
                agent__env_set(&v, &n, &cap, k, json_string_value(val));
        }
    }
    for (; more && more[0] && more[1]; more += 2)
        agent__env_set(&v, &n, &cap, more[0], more[1]);
    if (!v)
        v = calloc(1, sizeof *v);
    return v;
}

void agent_reply_error(struct al_http_req *req, int status, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *body = json_object();
    json_object_set_new(body, "code", json_integer(status));
    json_t *m = json_string(msg);
    json_object_set_new(body, "message", m ? m : json_string("(message was not valid UTF-8)"));
    al_http_reply_json(req, status, body);
}

/* ---- envd plain HTTP endpoints ------------------------------------------------------- */

static void agent__init_body_done(struct al_http_req *req, int err)
{
    struct agent *a = req->user;
    static const struct al_http_header h[] = {{"X-Envd-Version", AGENT_ENVD_VERSION},
                                              {"Cache-Control", "no-store"}};
    if (err < 0) {
        if (err != -E2BIG)
            agent_reply_error(req, 400, "cannot read the init body: %s", strerror(-err));
        return;
    }
    struct al_error e = {0};
    json_t *init = NULL;
    if (req->body.len > 0) {
        init = al_json_parse(req->body.data, req->body.len, &e);
        if (!init) {
            al_buf_free_wipe(&req->body);
            agent_reply_error(req, 400, "invalid init JSON: %s", al_error_str(&e));
            return;
        }
    } else {
        init = json_object();
    }
    /* Once a token is set, only its holder may re-initialise: either in the header or as
     * the body's accessToken (how envd's orchestrator re-sends it on resume). */
    if (a->token) {
        const char *hdr = al_http_req_header(req, "X-Access-Token");
        const char *body_tok = NULL;
        agent_pj_string(init, "accessToken", "access_token", &body_tok, NULL);
        if (!agent_token_ok(a, hdr) && !(body_tok && agent_token_ok(a, body_tok))) {
            json_decref(init);
            al_buf_free_wipe(&req->body);
            al_warn("POST /init refused: no valid access token");
            agent_reply_error(req, 401,
                              "access token validation failed: send the current token in "
                              "X-Access-Token or as accessToken");
            return;
        }
    }
    int r = agent_apply_init(a, init, &e);
    json_decref(init);
    al_buf_free_wipe(&req->body);
    if (r < 0) {
        agent_reply_error(req, 400, "%s", al_error_str(&e));
        return;
    }
    al_http_resp_start(req, 204, h, 2, 0);
    al_http_resp_end(req);
    if (a->code_interpreter)
        agent_interp_start_defaults(a);
    agent_start_begin(a);
}

static void agent__envs(struct agent *a, struct al_http_req *req)
{
    static const struct al_http_header h[] = {{"Content-Type", "application/json"},
                                              {"Cache-Control", "no-store"}};
    char *s = json_dumps(a->env, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    al_http_resp_start(req, 200, h, 2, (int64_t)n);
    al_http_resp_write(req, s, n);
    al_http_resp_end(req);
    if (s) {
        sodium_memzero(s, n);
        free(s);
    }
}

static uint64_t agent__meminfo(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    if (!p)
        return 0;
    p += strlen(key);
    while (*p == ' ' || *p == ':')
        p++;
    return strtoull(p, NULL, 10) * 1024;
}

static void agent__metrics(struct agent *a, struct al_http_req *req)
{
    (void)a;
    char *mi = NULL, *stat = NULL;
    size_t len;
    json_t *m = json_object();
    json_object_set_new(m, "ts", json_integer((json_int_t)(al_wall_ns() / 1000000000ull)));
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    json_object_set_new(m, "cpu_count", json_integer(cpus > 0 ? cpus : 1));
    /* CPU use since boot from /proc/stat (a point sample cannot do better without state). */
    double pct = 0;
    if (al_read_file("/proc/stat", 1 << 20, &stat, &len, NULL) == 0) {
        unsigned long long v[8] = {0};
        if (sscanf(stat, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) >= 4) {
            unsigned long long idle = v[3] + v[4], total = 0;
            for (int i = 0; i < 8; i++)
                total += v[i];
            if (total)
                pct = (double)(total - idle) * 100.0 / (double)total;
        }
    }
    json_object_set_new(m, "cpu_used_pct", json_real((double)(long)(pct * 100) / 100.0));
    uint64_t total = 0, avail = 0, cached = 0;
    if (al_read_file("/proc/meminfo", 1 << 20, &mi, &len, NULL) == 0) {
        total = agent__meminfo(mi, "MemTotal");
        avail = agent__meminfo(mi, "MemAvailable");
        cached = agent__meminfo(mi, "Cached");
    }
    uint64_t used = total > avail ? total - avail : 0;
    json_object_set_new(m, "mem_total", json_integer((json_int_t)total));
    json_object_set_new(m, "mem_used", json_integer((json_int_t)used));
    json_object_set_new(m, "mem_cache", json_integer((json_int_t)cached));
    json_object_set_new(m, "mem_total_mib", json_integer((json_int_t)(total >> 20)));
    json_object_set_new(m, "mem_used_mib", json_integer((json_int_t)(used >> 20)));
    struct statvfs vfs;
    if (statvfs("/", &vfs) == 0) {
        uint64_t dt = (uint64_t)vfs.f_blocks * vfs.f_frsize;
        uint64_t da = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        json_object_set_new(m, "disk_total", json_integer((json_int_t)dt));
        json_object_set_new(m, "disk_used", json_integer((json_int_t)(dt - da)));
    }
    free(mi);
    free(stat);
    al_http_reply_json(req, 200, m);
}

static bool agent__is_interp_path(const char *path)
{
    return strcmp(path, "/execute") == 0 || strcmp(path, "/contexts") == 0 ||
           strncmp(path, "/contexts/", 10) == 0;
}

static void agent__envd(struct agent *a, struct al_http_req *req)
{
    const char *m = req->method, *p = req->path;
    bool is_get = strcmp(m, "GET") == 0, is_post = strcmp(m, "POST") == 0;
    bool open_path = (is_get && strcmp(p, "/health") == 0) || strcmp(p, "/files") == 0 ||
                     (is_post && strcmp(p, "/init") == 0);
    if (!open_path && !agent_token_ok(a, al_http_req_header(req, "X-Access-Token"))) {
        al_warn("%s %s refused: missing or wrong access token", m, p);
        agent_reply_error(req, 401,
                          "unauthorized access, please provide a valid access token or "
                          "method signing if supported");
        return;
    }
    if (strcmp(p, "/health") == 0 && is_get) {
        static const struct al_http_header h[] = {{"Cache-Control", "no-store"}};
        al_http_resp_start(req, 204, h, 1, 0);
        al_http_resp_end(req);
        return;
    }
    if (strcmp(p, "/files") == 0) {
        if (!is_get && !is_post) {
            agent_reply_error(req, 405, "/files accepts GET (download) and POST (upload)");
            return;
        }
        agent_files_request(a, req);
        return;
    }
    if (strcmp(p, "/init") == 0 && is_post) {
        req->user = a;
        int r = al_http_req_read_body(req, a->lim.json_max_body, agent__init_body_done);
        if (r < 0)
            agent_reply_error(req, 400, "cannot read the init body: %s", strerror(-r));
        return;
    }
    if (strcmp(p, "/ready") == 0 && is_get) {
        json_t *o = agent_start_status(a);
        if (!o) {
            agent_reply_error(req, 500, "out of memory");
            return;
        }
        al_http_reply_json(req, 200, o);
        return;
    }
    if (strcmp(p, "/envs") == 0 && is_get) {
        agent__envs(a, req);
        return;
    }
    if (strcmp(p, "/metrics") == 0 && is_get) {
        agent__metrics(a, req);
        return;
    }
    static const char *const services[] = {"/process.Process/", "/filesystem.Filesystem/"};
    for (size_t i = 0; i < 2; i++) {
        size_t n = strlen(services[i]);
        if (strncmp(p, services[i], n) == 0) {
            if (!is_post) {
                agent_reply_error(req, 405, "Connect calls use POST");
                return;
            }
            char svc[32];
            snprintf(svc, sizeof svc, "%.*s", (int)(n - 2), services[i] + 1);
            agent_rpc_dispatch(a, req, svc, p + n);
            return;
        }
    }
    agent_reply_error(req, 404, "no envd endpoint %s %s", m, p);
}

void agent_on_request(struct al_http_req *req, void *ctx)
{
    struct agent *a = ctx;
    const char *port = al_http_req_header(req, "E2b-Sandbox-Port");
    if (port) {
        if (strcmp(port, AGENT_INTERP_PORT) == 0) {
            agent_interp_request(a, req);
            return;
        }
        if (strcmp(port, AGENT_ENVD_PORT) != 0) {
            /* Any other port: a server the sandbox runs (getHost), on its own loopback. */
            agent_forward_request(a, req, port);
            return;
        }
        agent__envd(a, req);
        return;
    }
    if (agent__is_interp_path(req->path)) {
        agent_interp_request(a, req);
        return;
    }
    agent__envd(a, req);
}
