/* bench/vault_fetch: latency of POST /v1/fetch over airlock-vault's unix socket (p50/p99;
 * target p99 <= 200 us), against references measured in the same run: the same fetch in
 * process (role check, decrypt, access-log append; no socket), and a hit in the egress
 * proxy's own cache (egress/intercept/secrets.c, filled from the daemon: what the cache saves
 * per injection). Prints JSON lines.
 *
 *   build/bench/bench_vault_fetch [--requests N] [--daemon PATH]
 *
 * It makes a throwaway state directory under /tmp, starts the daemon of the same build (--egress-user 0 --egress-exe <this program>: the
 * benchmark runs as root and plays the egress proxy, checked as airlockd configures it), and
 * stops and removes everything at the end.
 */
#include "common/auditlog.h"
#include "common/util.h"
#include "vault/vault.h"
#include "egress/intercept/secrets.h"
#include <uv.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

int main(int argc, char **argv);

static void emit(const char *metric, double value, const char *unit)
{
    printf("{\"bench\":\"vault_fetch\",\"metric\":\"%s\",\"value\":%.2f,\"unit\":\"%s\"}\n", metric,
           value, unit);
    fflush(stdout);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void percentiles(const char *what, uint64_t *lat, size_t n)
{
    qsort(lat, n, sizeof *lat, cmp_u64);
    char m[96];
    snprintf(m, sizeof m, "%s_p50_us", what);
    emit(m, (double)lat[n / 2] / 1000.0, "us");
    snprintf(m, sizeof m, "%s_p99_us", what);
    emit(m, (double)lat[(size_t)((double)n * 0.99)] / 1000.0, "us");
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(p);
    return 0;
}

static const char *SECRET = "ghp_benchmark_value_0123456789abcdefghijklmnopqrstu";

/* One keep-alive request/response on fd; returns the status or -1. */
static int fetch_once(int fd, const char *req, size_t reqlen, char *buf, size_t cap)
{
    if (al_write_all(fd, req, reqlen) != 0)
        return -1;
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            return -1;
        n += (size_t)r;
        buf[n] = '\0';
        char *hend = strstr(buf, "\r\n\r\n");
        if (!hend)
            continue;
        char *cl = strcasestr(buf, "\r\ncontent-length:");
        if (!cl || cl > hend)
            return -1;
        size_t want = (size_t)(hend + 4 - buf) + (size_t)strtoul(cl + 17, NULL, 10);
        if (n >= want)
            return atoi(buf + 9);
    }
}

/* Reference 2: a hit in the egress proxy's own cache (egress/intercept/secrets.c, the code
 * airlock-egress runs: lookup under its lock, a reference taken and dropped), filled by one
 * real fetch from the daemon and kept valid by its changes feed. What the cache saves per
 * injection is socket_fetch minus this. */
struct bench_wait {
    bool done;
    int err;
    const char *reason;
};

static void bench__fetched(struct intercept_fetch *req, struct intercept_secret *sec, int err,
                           const char *reason)
{
    struct bench_wait *w = req->data;
    w->done = true;
    w->err = err;
    w->reason = reason;
    intercept_secret_unref(sec);
}

static void bench__stopped(void *arg)
{
    *(bool *)arg = true;
}

static int bench__cache_hits(const char *sock, uint64_t *lat, long requests)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct intercept_secrets_opts so = {.socket = sock};
    struct intercept_secrets *secs = NULL;
    struct intercept_fetcher *f = NULL;
    struct al_error e = {0};
    int rc = -1;
    if (intercept_secrets_new(&so, &secs, &e) < 0 || intercept_secrets_start(secs, &loop) < 0 ||
        intercept_fetcher_new(secs, &loop, &f) < 0) {
        fprintf(stderr, "bench_vault_fetch: the proxy's cache: %s\n", al_error_str(&e));
        goto out;
    }
    uint64_t t_end = al_now_ns() + 5000000000ull; /* the feed connects first */
    while (!intercept_secrets_feed_ok(secs) && al_now_ns() < t_end)
        uv_run(&loop, UV_RUN_NOWAIT), usleep(1000);
    struct intercept_fetch_args fa = {.name = "github/token",
                                      .sandbox = "sbx-bench",
                                      .rule = "gh",
                                      .host = "api.github.com",
                                      .request_id = "req-bench"};
    struct bench_wait w = {0};
    struct intercept_fetch fr = {.cb = bench__fetched, .data = &w};
    struct intercept_secret *sec = NULL;
    const char *why = NULL;
    int r = intercept_fetch_start(f, &fa, &fr, &sec, &why);
    if (r == 0) {
        while (!w.done && al_now_ns() < t_end)
            uv_run(&loop, UV_RUN_ONCE);
        r = w.done && !w.err ? 1 : -1;
        why = w.reason;
    } else if (r == 1) {
        intercept_secret_unref(sec);
    }
    if (r != 1) {
        fprintf(stderr, "bench_vault_fetch: the first fetch through the proxy's cache failed: %s\n",
                why ? why : "timeout");
        goto out;
    }
    long misses = 0;
    for (long i = 0; i < requests; i++) {
        struct intercept_fetch req = {.cb = bench__fetched, .data = &w};
        uint64_t t0 = al_now_ns();
        r = intercept_fetch_start(f, &fa, &req, &sec, &why);
        if (r == 1)
            intercept_secret_unref(sec);
        lat[i] = al_now_ns() - t0;
        if (r != 1) {
            misses++;
            if (r == 0)
                intercept_fetch_cancel(&req);
        }
    }
    if (misses) {
        fprintf(stderr, "bench_vault_fetch: %ld of %ld lookups missed the proxy's cache\n", misses,
                requests);
        goto out;
    }
    rc = 0;
out:
    if (f)
        intercept_fetcher_close(f);
    if (secs) {
        bool stopped = false;
        intercept_secrets_stop(secs, bench__stopped, &stopped);
        while (!stopped)
            uv_run(&loop, UV_RUN_ONCE);
        uv_run(&loop, UV_RUN_NOWAIT);
        intercept_secrets_free(secs);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}

int main(int argc, char **argv)
{
    long requests = 20000;
    char daemon[PATH_MAX] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc)
            requests = atol(argv[++i]);
        else if (strcmp(argv[i], "--daemon") == 0 && i + 1 < argc)
            snprintf(daemon, sizeof daemon, "%s", argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--requests N] [--daemon PATH]\n", argv[0]);
            return 2;
        }
    }
    if (requests < 100) {
        fprintf(stderr, "bench_vault_fetch: --requests must be at least 100\n");
        return 2;
    }
    vault_harden_process();
    char state[128], vdir[256], adir[300];
    snprintf(state, sizeof state, "/tmp/al-bench-vault-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(state)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(vdir, sizeof vdir, "%s/vault", state);
    snprintf(adir, sizeof adir, "%s/" VAULT_AUDIT_DIR, vdir);
    struct al_error e = {0};
    struct vault_store *store = NULL;
    struct vault_value v = {0};
    if (vault_store_init(vdir, NULL, &e) || vault_store_open(vdir, NULL, &store, &e) ||
        vault_value_set(&v, SECRET, strlen(SECRET))) {
        fprintf(stderr, "bench_vault_fetch: %s\n", al_error_str(&e));
        return 1;
    }
    const char *hosts[] = {"api.github.com"};
    struct vault_put p = {
        .name = "github/token", .value = &v, .hosts = hosts, .n_hosts = 1, .set_hosts = true};
    if (vault_store_create(store, &p, "bench", NULL, &e)) {
        fprintf(stderr, "bench_vault_fetch: %s\n", al_error_str(&e));
        return 1;
    }
    vault_value_free(&v);
    uint64_t *lat = calloc((size_t)requests, sizeof *lat);
    struct vault_fetch_req rq = {.name = "github/token",
                                 .sandbox = "sbx-bench",
                                 .rule = "gh",
                                 .host = "api.github.com",
                                 .request_id = "req-bench"};

    /* Reference 1: in process (no socket): role check, decrypt, access-log append. */
    {
        struct al_auditlog *log;
        struct al_auditlog_opts ao = {.dir = adir, .prefix = VAULT_AUDIT_PREFIX};
        if (al_auditlog_open(&ao, &log, &e)) {
            fprintf(stderr, "bench_vault_fetch: %s\n", al_error_str(&e));
            return 1;
        }
        struct vault_service *svc;
        struct vault_service_opts so = {
            .store = store, .audit = log, .roles = {.egress_set = true, .egress_uid = 0}};
        vault_service_new(&so, &svc);
        struct vault_peer me = {.uid = 0, .gid = 0, .pid = getpid()};
        for (long i = 0; i < requests; i++) {
            struct vault_fetched f;
            json_t *out = NULL;
            uint64_t t0 = al_now_ns();
            int st = vault_service_fetch(svc, &me, &rq, &f, &out);
            lat[i] = al_now_ns() - t0;
            vault_value_free(&f.value);
            json_decref(out);
            if (st != 200) {
                fprintf(stderr, "bench_vault_fetch: in-process fetch failed: %d\n", st);
                return 1;
            }
        }
        percentiles("in_process_fetch", lat, (size_t)requests);
        vault_service_free(svc);
        al_auditlog_close(log);
    }

    vault_store_close(store);

    /* The daemon, over its socket, keep-alive. */
    if (!daemon[0])
        snprintf(daemon, sizeof daemon, "%s/airlock-vault", AIRLOCK_BIN_DIR);
    char sock[300];
    snprintf(sock, sizeof sock, "%s/run/vault.sock", state);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        /* As airlockd runs it: the egress role also needs the caller's executable (this
         * benchmark plays airlock-egress), so the /proc/<pid>/exe check is in the numbers. */
        char self[PATH_MAX];
        if (!realpath("/proc/self/exe", self))
            _exit(127);
        execl(daemon, "airlock-vault", "--state-dir", state, "--egress-user", "0", "--egress-exe",
              self, "--log-level", "warn", (char *)NULL);
        _exit(127);
    }
    int fd = -1;
    for (int i = 0; i < 200 && fd < 0; i++) {
        usleep(25000);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        fprintf(stderr, "bench_vault_fetch: the daemon %s did not start\n", daemon);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return 1;
    }
    const char *body = "{\"name\":\"github/token\",\"sandbox\":\"sbx-bench\",\"rule\":\"gh\","
                       "\"host\":\"api.github.com\",\"request_id\":\"req-bench\"}";
    char req[1024];
    int rl = snprintf(req, sizeof req,
                      "POST /v1/fetch HTTP/1.1\r\nHost: vault\r\nContent-Type: application/json"
                      "\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(body), body);
    char buf[8192];
    for (int i = 0; i < 200; i++) /* warm up */
        fetch_once(fd, req, (size_t)rl, buf, sizeof buf);
    int failed = 0;
    for (long i = 0; i < requests; i++) {
        uint64_t t0 = al_now_ns();
        int st = fetch_once(fd, req, (size_t)rl, buf, sizeof buf);
        lat[i] = al_now_ns() - t0;
        if (st != 200)
            failed++;
    }
    sodium_memzero(buf, sizeof buf);
    close(fd);
    if (failed) {
        fprintf(stderr, "bench_vault_fetch: %d fetches failed\n", failed);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return 1;
    }
    percentiles("socket_fetch", lat, (size_t)requests);
    double p99 = (double)lat[(size_t)((double)requests * 0.99)] / 1000.0;
    double socket_p50 = (double)lat[requests / 2] / 1000.0;
    if (bench__cache_hits(sock, lat, requests) < 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return 1;
    }
    percentiles("cache_hit", lat, (size_t)requests);
    emit("cache_saves_per_injection_us", socket_p50 - (double)lat[requests / 2] / 1000.0, "us");
    emit("target_p99_us", 200, "us");
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    emit("requests", (double)requests, "count");
    emit("meets_target", p99 > 0 && p99 <= 200, "bool");
    free(lat);
    nftw(state, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
