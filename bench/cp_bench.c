/* bench/cp_bench: what the control plane costs, in JSON lines.
 *
 *   cp_bench [-b jail|test] [-n N1] [-N NC] [-c CONC] [-i IDLE] [-m MAXHELD] [-r REFRUNS]
 *            [-w WARM_POOL] [-p NETWORK_POOL] [-k START_CONCURRENCY]   (default: airlockd's)
 *            [-W WARM_SANDBOXES]   (default 0: none; sandboxes.warm.templates ["base=W"])
 *            [-q REFILL_QUIET_MS]  (sandboxes.refill_quiet; default airlockd's)
 *
 * Runs as root in a network namespace of its own (only loopback), with airlockd started on
 * 127.0.0.1:<free port> and a state directory, cgroup parent and interface prefix unique to
 * this run, all removed at the end (also on failure). airlockd runs with its defaults (the
 * vswitch, airlock-egress, airlock-vault, both pools) except sandboxes.max. Each phase
 * begins once both pools are full (airlockd's airlock_pool_ready against airlock_pool_size),
 * and with -W once W warm sandboxes of base are ready (they refill between the phases: a
 * phase of more creations than W claims W of them and starts the others cold).
 * Measures, client-side, through the E2B API:
 *   create_c1_*      N1 creations one after the other: POST /v2/sandboxes until 201 (the
 *                    agent answered /health) plus the first GET /health through the data
 *                    plane (target p50 <= 20 ms with the jail backend)
 *   create_c50_*     NC creations with CONC in flight (target p95 <= 150 ms), sandboxes/s;
 *                    create_c50_until_201_*: the same creations until their 201 only, for
 *                    comparison (what an SDK's create waits for)
 *   kill_c1_*, kill_c50_*  DELETE /sandboxes/{id} until 204 (the processes are gone)
 *   airlockd_stop    SIGTERM at the end until airlockd exited (it gives the pooled
 *                    networks back; the sandboxes are gone by then)
 *   vmm_direct_*     reference, same run: airlock-vmm started directly with a spec (cold),
 *                    until its ready line, without airlockd, network or egress
 *   pss_per_idle_sandbox  (PSS of every airlock process and every process of the sandboxes,
 *                    with IDLE idle sandboxes - without any) / IDLE
 *   max_idle_sandboxes  sandboxes created (8 at a time) and held idle until MAXHELD or the
 *                    first failure (target >= 500; the failure's answer is printed, it says
 *                    which limit, with airlockd's open files, the host's tasks, MemAvailable,
 *                    and airlockd's record and log of each sandbox of the failed batch), or
 *                    until MemAvailable falls below a tenth of MemTotal
 *                    (max_idle_stopped_by_memory); then all are killed
 *   max_idle_machine_kb_per_sandbox, max_idle_kernel_kb_per_sandbox  what /proc/meminfo's
 *                    MemAvailable lost while they were made, and the kernel's part (Slab,
 *                    KernelStack, PageTables, Percpu), per held sandbox: the whole machine's
 *                    cost, beside the PSS of the processes
 * With every create phase, where its creations spent their time (airlockd's stage timings):
 *   *_stage_<accept|network|egress|queue|start>_mean_ms
 * and with -W how many of them claimed a warm sandbox: *_warm_claims
 * With -W, the cold path beside the claims in the same run: create_c1_cold_* and kill_c1_cold_*,
 *                    N1 creations one after the other of "cold", base's files under a name no
 *                    warm pool keeps (the pooled network and airlock-vmm, as without -W)
 *   bwrap_true_*     reference, same run (with -r): `bwrap --unshare-all` running /bin/true
 *                    in base's root file system, REFRUNS times, until it exited (needs bwrap:
 *                    the bubblewrap package; skipped without it)
 * With every create and kill phase, the CPU it cost per sandbox, measured in the same run:
 *   *_cpu_ms_per_sandbox       CPU time of airlockd, its helpers, every airlock-vmm and every
 *                    sandbox (cgroup CPU accounting: airlockd is started in a cgroup of its
 *                    own, the sandboxes live under the run's cgroup parent; both are summed,
 *                    the bench's own HTTP client is not) / sandboxes
 *   *_host_cpu_ms_per_sandbox  the whole machine's busy CPU time (/proc/stat) / sandboxes:
 *                    includes kernel threads (network namespace teardown, RCU) and anything
 *                    else that ran meanwhile (other jobs on a shared machine)
 *   *_cores_busy     the same, divided by the phase's wall time: how many cores were in use
 * CP_BENCH_LOG=FILE keeps airlockd's log (CP_BENCH_LOG_LEVEL=info: a line per creation,
 * with the time of each of its stages);
 * CP_BENCH_DIR=DIR puts the run's state directory under DIR instead of /tmp;
 * CP_BENCH_NETWORK=off runs without the vswitch and airlock-egress (to see their share);
 * CP_BENCH_SAMPLES=FILE writes, for the creations of the last phase run with more than one
 * in flight, a line per creation: index, its start (ms since the phase began), POST to 201
 * (ms), the GET /health after it (ms) and the whole (ms);
 * CP_BENCH_MARKS=1 prints each phase's CLOCK_MONOTONIC start and end (ns) on stderr, to cut
 * a `perf record -k CLOCK_MONOTONIC` profile to one phase (perf report --time).
 * Every figure: {"bench":"cp","metric":...,"value":...,"unit":...}. Figures from a busy
 * machine are noisy: run it on a quiet one (Release build) for numbers that count.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/http.h"
#include "common/json.h"
#include "common/util.h"

static const char *opt_backend = "jail";
static int opt_n1 = 50, opt_nc = 200, opt_conc = 50, opt_idle = 50, opt_max = 520, opt_ref = 20;
static int opt_warm = -1, opt_netpool = -1, opt_starts = -1; /* -1: airlockd's defaults */
static int opt_warm_sb = 0;                                  /* warm sandboxes of base */
static int opt_quiet = -1; /* sandboxes.refill_quiet in ms; -1: airlockd's default */
static char g_dir[256], g_state[300], g_url[128], g_key[64], g_bin[4096], g_cg[64];
static const char *g_template = "base"; /* what the creations of flight_run start */
static pid_t g_airlockd;
/* CPU accounting: the cgroup airlockd runs in, the run's cgroup parent (the sandboxes), and
 * the file that holds their CPU time (cpuacct.usage in ns on v1, cpu.stat usage_usec on v2). */
static char g_acct_dir[512], g_acct_parent[512];
static bool g_acct_v2;

static void out(const char *metric, double v, const char *unit)
{
    printf(
        "{\"bench\":\"cp\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\",\"backend\":\"%s\"}\n",
        metric, v, unit, opt_backend);
    fflush(stdout);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static void out_dist(const char *name, double *v, size_t n)
{
    char m[96];
    qsort(v, n, sizeof *v, cmp_d);
    snprintf(m, sizeof m, "%s_p50", name);
    out(m, pct(v, n, 0.50), "ms");
    snprintf(m, sizeof m, "%s_p95", name);
    out(m, pct(v, n, 0.95), "ms");
    snprintf(m, sizeof m, "%s_p99", name);
    out(m, pct(v, n, 0.99), "ms");
}

/* ---- the instance ----------------------------------------------------------------------- */

static void cleanup(void)
{
    if (g_airlockd > 0) {
        kill(g_airlockd, SIGTERM);
        for (int i = 0; i < 600; i++) {
            if (waitpid(g_airlockd, NULL, WNOHANG) == g_airlockd)
                break;
            usleep(100000);
        }
        g_airlockd = 0;
    }
    if (g_dir[0]) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] && "
                 "find \"$d\" -depth -type d -exec rmdir {} \\; ; done 2>/dev/null; rm -rf '%s'",
                 g_cg, g_cg, g_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cp_bench: cleanup of %s incomplete\n", g_dir);
        g_dir[0] = '\0';
    }
    if (g_acct_dir[0]) {
        for (int i = 0; i < 50 && rmdir(g_acct_dir) < 0 && errno == EBUSY; i++)
            usleep(100000);
        g_acct_dir[0] = '\0';
    }
}

/* ---- CPU accounting ------------------------------------------------------------------------ */

/* Finds the cgroup hierarchy to account CPU with: v1 cpuacct if mounted, else the v2 root;
 * creates <root>/<g_cg>-acct for airlockd. 0, or -1 (no figure then). */
static int acct_setup(void)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f)
        return -1;
    char line[1024], v1[256] = "", v2[256] = "";
    while (fgets(line, sizeof line, f)) {
        char mnt[256], rest[512];
        rest[0] = ' '; /* " - " also when no optional field precedes it */
        if (sscanf(line, "%*s %*s %*s %*s %255s %*s %510[^\n]", mnt, rest + 1) != 2)
            continue;
        char *sep = strstr(rest, " - ");
        if (!sep)
            continue;
        char fstype[32], super[256] = "";
        if (sscanf(sep + 3, "%31s %*s %255s", fstype, super) < 1)
            continue;
        if (!strcmp(fstype, "cgroup") && !v1[0]) {
            for (char *t = strtok(super, ","); t; t = strtok(NULL, ","))
                if (!strcmp(t, "cpuacct"))
                    snprintf(v1, sizeof v1, "%s", mnt);
        } else if (!strcmp(fstype, "cgroup2") && !v2[0]) {
            snprintf(v2, sizeof v2, "%s", mnt);
        }
    }
    fclose(f);
    const char *root = v1[0] ? v1 : v2;
    if (!root[0])
        return -1;
    g_acct_v2 = !v1[0];
    snprintf(g_acct_dir, sizeof g_acct_dir, "%s/%s-acct", root, g_cg);
    snprintf(g_acct_parent, sizeof g_acct_parent, "%s/%s", root, g_cg);
    if (mkdir(g_acct_dir, 0755) < 0) {
        g_acct_dir[0] = '\0';
        return -1;
    }
    return 0;
}

/* In the child that becomes airlockd: into the accounting cgroup. */
static void acct_join(void)
{
    if (!g_acct_dir[0])
        return;
    char p[600], v[32];
    snprintf(p, sizeof p, "%s/cgroup.procs", g_acct_dir);
    snprintf(v, sizeof v, "%d", (int)getpid());
    int fd = open(p, O_WRONLY);
    if (fd >= 0) {
        if (write(fd, v, strlen(v)) < 0)
            perror("cp_bench: join the accounting cgroup");
        close(fd);
    }
}

static uint64_t acct_read_one(const char *dir)
{
    char p[600], buf[4096];
    snprintf(p, sizeof p, "%s/%s", dir, g_acct_v2 ? "cpu.stat" : "cpuacct.usage");
    int fd = open(p, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (!g_acct_v2)
        return strtoull(buf, NULL, 10);
    char *u = strstr(buf, "usage_usec ");
    return u ? strtoull(u + 11, NULL, 10) * 1000 : 0;
}

/* CPU ns of airlockd, its helpers and every sandbox so far. */
static uint64_t acct_ns(void)
{
    return g_acct_dir[0] ? acct_read_one(g_acct_dir) + acct_read_one(g_acct_parent) : 0;
}

/* Busy CPU ns of the whole machine so far. */
static uint64_t host_busy_ns(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return 0;
    unsigned long long u, ni, sy, id, io, irq, sirq, st;
    int k = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &u, &ni, &sy, &id, &io, &irq,
                   &sirq, &st);
    fclose(f);
    if (k != 8)
        return 0;
    return (u + ni + sy + irq + sirq + st) * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
}

/* airlockd's creation stages (airlock_sandbox_create_stage_duration_seconds): the sums and
 * counts so far, read from its /metrics. */
#define N_STAGES 5
static const char *const stage_names[N_STAGES] = {"accept", "network", "egress", "queue", "start"};

/* airlockd's /metrics, whole. */
static int metrics_get(struct al_http_resp *r, struct al_error *e)
{
    struct al_http_call_opts o = {
        .target = g_url, .method = "GET", .path = "/metrics", .timeout_ms = 10000};
    return al_http_call(&o, r, e);
}

static int stage_sums(double sum[N_STAGES], double count[N_STAGES])
{
    struct al_http_resp r = {0};
    struct al_error e = {0};
    memset(sum, 0, N_STAGES * sizeof *sum);
    memset(count, 0, N_STAGES * sizeof *count);
    if (!g_url[0] || metrics_get(&r, &e))
        return -1;
    int found = 0;
    const char *t = r.body.data ? r.body.data : "";
    for (int i = 0; i < N_STAGES; i++) {
        char k[160];
        const char *hit;
        snprintf(k, sizeof k, "airlock_sandbox_create_stage_duration_seconds_sum{stage=\"%s\"} ",
                 stage_names[i]);
        if ((hit = strstr(t, k)) && (hit - t) < (ptrdiff_t)r.body.len)
            sum[i] = strtod(hit + strlen(k), NULL), found++;
        snprintf(k, sizeof k, "airlock_sandbox_create_stage_duration_seconds_count{stage=\"%s\"} ",
                 stage_names[i]);
        if ((hit = strstr(t, k)) && (hit - t) < (ptrdiff_t)r.body.len)
            count[i] = strtod(hit + strlen(k), NULL);
    }
    al_http_resp_free(&r);
    return found == N_STAGES ? 0 : -1;
}

/* The value of one series of airlockd's /metrics text (len bytes), or -1. */
static long metric_value(const char *text, size_t len, const char *series)
{
    size_t l = strlen(series);
    for (size_t i = 0; i + l < len; i++) {
        if ((i == 0 || text[i - 1] == '\n') && memcmp(text + i, series, l) == 0 &&
            text[i + l] == ' ')
            return strtol(text + i + l + 1, NULL, 10);
    }
    return -1;
}

/* Waits (up to timeout_s) until both pools hold what they keep (airlock_pool_ready against
 * airlock_pool_size), so that each phase starts from the same state whatever the pools'
 * sizes. false if they did not fill in time. */
static bool pools_wait(int timeout_s)
{
    static const char *const pools[] = {"airlock-vmm", "network"};
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_s * 1000000000ull;
    do {
        struct al_http_resp r = {0};
        struct al_error e = {0};
        bool full = g_url[0] && metrics_get(&r, &e) == 0 && r.body.data;
        for (size_t i = 0; full && i < 2; i++) {
            char rs[96], ss[96];
            snprintf(rs, sizeof rs, "airlock_pool_ready{pool=\"%s\"}", pools[i]);
            snprintf(ss, sizeof ss, "airlock_pool_size{pool=\"%s\"}", pools[i]);
            long ready = metric_value(r.body.data, r.body.len, rs);
            long size = metric_value(r.body.data, r.body.len, ss);
            full = ready >= 0 && size >= 0 && ready >= size;
        }
        if (full && opt_warm_sb > 0)
            full = metric_value(r.body.data, r.body.len,
                                "airlock_warm_sandboxes{template=\"base\",state=\"ready\"}") >=
                   opt_warm_sb;
        al_http_resp_free(&r);
        if (full)
            return true;
        usleep(100000);
    } while (al_now_ns() < deadline);
    return false;
}

/* Creations of base that claimed a warm sandbox so far (-W), or -1. */
static long warm_claims(void)
{
    struct al_http_resp r = {0};
    struct al_error e = {0};
    long v = -1;
    if (opt_warm_sb > 0 && g_url[0] && metrics_get(&r, &e) == 0 && r.body.data)
        v = metric_value(r.body.data, r.body.len,
                         "airlock_warm_claims_total{template=\"base\",how=\"warm\"}");
    al_http_resp_free(&r);
    return v;
}

struct phase {
    long warm0;
    uint64_t t0, acct0, host0;
    double stage_sum[N_STAGES], stage_count[N_STAGES];
    bool stages;
};

static void phase_begin(struct phase *p)
{
    p->stages = stage_sums(p->stage_sum, p->stage_count) == 0;
    p->warm0 = warm_claims();
    p->acct0 = acct_ns();
    p->host0 = host_busy_ns();
    p->t0 = al_now_ns();
    if (getenv("CP_BENCH_MARKS"))
        fprintf(stderr, "cp_bench: mark begin %llu\n", (unsigned long long)p->t0);
}

static void phase_end(const struct phase *p, const char *name, int n)
{
    uint64_t t1 = al_now_ns();
    if (getenv("CP_BENCH_MARKS"))
        fprintf(stderr, "cp_bench: mark end %s %llu\n", name, (unsigned long long)t1);
    uint64_t acct = acct_ns() - p->acct0, host = host_busy_ns() - p->host0;
    char m[96];
    if (n <= 0)
        return;
    if (g_acct_dir[0]) {
        snprintf(m, sizeof m, "%s_cpu_ms_per_sandbox", name);
        out(m, (double)acct / 1e6 / n, "ms");
    }
    snprintf(m, sizeof m, "%s_host_cpu_ms_per_sandbox", name);
    out(m, (double)host / 1e6 / n, "ms");
    snprintf(m, sizeof m, "%s_cores_busy", name);
    out(m, (double)host / (double)(t1 - p->t0), "cores");
    long warm = p->warm0 >= 0 && strncmp(name, "create", 6) == 0 ? warm_claims() : -1;
    if (warm >= 0) {
        snprintf(m, sizeof m, "%s_warm_claims", name);
        out(m, (double)(warm - p->warm0), "sandboxes");
    }
    /* Creations: where their time went, stage by stage (the mean of the phase's). */
    double sum[N_STAGES], count[N_STAGES];
    if (p->stages && stage_sums(sum, count) == 0) {
        for (int i = 0; i < N_STAGES; i++) {
            double dn = count[i] - p->stage_count[i];
            if (dn <= 0)
                continue;
            snprintf(m, sizeof m, "%s_stage_%s_mean_ms", name, stage_names[i]);
            out(m, (sum[i] - p->stage_sum[i]) * 1e3 / dn, "ms");
        }
    }
}

static void on_signal(int sig)
{
    (void)sig;
    cleanup();
    _exit(1);
}

static int start_airlockd(void)
{
    const char *base = getenv("CP_BENCH_DIR") ? getenv("CP_BENCH_DIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/al-cp-bench-%d-XXXXXX", base, getpid());
    if (!mkdtemp(g_dir))
        return -errno;
    chmod(g_dir, 0711);
    snprintf(g_state, sizeof g_state, "%s/state", g_dir);
    snprintf(g_cg, sizeof g_cg, "al-cp-bench-%d", getpid());
    if (acct_setup() < 0)
        fprintf(stderr, "cp_bench: no cgroup CPU accounting (cpuacct or cgroup2): only the "
                        "machine-wide CPU figures\n");
    char cfg[400], outp[400];
    snprintf(cfg, sizeof cfg, "%s/airlockd.yaml", g_dir);
    snprintf(outp, sizeof outp, "%s/out", g_dir);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return -errno;
    int maxsb = opt_max > opt_nc ? opt_max : opt_nc;
    if (opt_n1 > maxsb)
        maxsb = opt_n1; /* (the c=1 phase holds its sandboxes until its kills) */
    fprintf(f, "sandboxes:\n  backend: %s\n  cgroup_parent: %s\n  max: %d\n  max_creating: %d\n",
            opt_backend, g_cg, maxsb + 10, opt_conc > 64 ? opt_conc : 64);
    if (opt_warm >= 0)
        fprintf(f, "  warm_pool: %d\n", opt_warm);
    if (opt_starts >= 0)
        fprintf(f, "  start_concurrency: %d\n", opt_starts);
    if (opt_quiet >= 0)
        fprintf(f, "  refill_quiet: %dms\n", opt_quiet);
    if (opt_warm_sb > 0)
        fprintf(f, "  warm:\n    templates: [\"base=%d\"]\n    memory: 8GiB\n", opt_warm_sb);

    fprintf(f, "log:\n  level: %s\nnetwork:\n  ifname_prefix: b%d\n  range: 10.202.0.0/16\n",
            getenv("CP_BENCH_LOG_LEVEL") ? getenv("CP_BENCH_LOG_LEVEL") : "warn",
            getpid() % 100000);
    if (getenv("CP_BENCH_NETWORK"))
        fprintf(f, "  mode: \"%s\"\n", getenv("CP_BENCH_NETWORK"));
    if (opt_netpool >= 0)
        fprintf(f, "  pool_size: %d\n", opt_netpool);
    fprintf(f, "egress:\n  args: [\"--resolver\", \"192.0.2.53\", \"--workers\", \"1\"]\n");
    fclose(f);
    snprintf(g_key, sizeof g_key, "e2b_%040d", 42);
    char listen[] = "127.0.0.1:0";
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -errno;
    self[n] = '\0';
    *strrchr(self, '/') = '\0'; /* <build>/bench */
    snprintf(g_bin, sizeof g_bin, "%s/../bin", self);
    char airlockd[4200];
    /* The test backend exists only in the test build's airlockd-test. */
    snprintf(airlockd, sizeof airlockd, "%s/%s", g_bin,
             strcmp(opt_backend, "test") == 0 ? "airlockd-test" : "airlockd");
    g_airlockd = fork();
    if (g_airlockd < 0)
        return -errno;
    if (g_airlockd == 0) {
        int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int ef = open("/dev/null", O_WRONLY);
        if (getenv("CP_BENCH_LOG"))
            ef = open(getenv("CP_BENCH_LOG"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 1);
        dup2(ef, 2);
        acct_join();
        setenv("AIRLOCK_API_KEY", g_key, 1);
        setenv("AIRLOCK_LOG_FORMAT", "json", 1);
        execl(airlockd, airlockd, "--listen", listen, "--state-dir", g_state, "--config", cfg,
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 6000; i++) {
        char *text = NULL;
        size_t len;
        if (al_read_file(outp, 1 << 16, &text, &len, NULL) == 0) {
            char *u = strstr(text, "export E2B_API_URL=http://");
            if (u) {
                u += strlen("export E2B_API_URL=http://");
                char *e = strchr(u, '\n');
                if (e) {
                    *e = '\0';
                    snprintf(g_url, sizeof g_url, "%s", u);
                    free(text);
                    return 0;
                }
            }
            free(text);
        }
        if (waitpid(g_airlockd, NULL, WNOHANG) == g_airlockd) {
            g_airlockd = 0;
            fprintf(stderr, "cp_bench: airlockd exited during start-up (CP_BENCH_LOG=FILE "
                            "keeps its log)\n");
            return -EIO;
        }
        usleep(100000);
    }
    return -ETIMEDOUT;
}

/* ---- requests ---------------------------------------------------------------------------- */

/* Async creations and kills with a bounded number in flight. */
struct flight {
    uv_loop_t *loop;
    struct al_http_pool *pool;
    int total, started, done, failed, conc, inflight;
    bool kill;
    char (*ids)[32];
    double *ms;
    double *post_ms; /* (creations) POST to 201 alone, if not NULL */
    const char *body;
    uint64_t t0;
    FILE *samples; /* CP_BENCH_SAMPLES: one line per creation */
};

struct one {
    struct flight *f;
    int idx;
    uint64_t t0;
    int status;
    struct al_buf body;
    int phase;     /* 0 create/kill, 1 health */
    uint64_t t201; /* when the 201 arrived */
};

static void flight_next(struct flight *f);

static int one_resp(struct al_http_creq *c, int status, const struct al_http_header *h, size_t n,
                    void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct one *)arg)->status = status;
    return 0;
}

static int one_data(struct al_http_creq *c, const char *d, size_t len, void *arg)
{
    (void)c;
    al_buf_append(&((struct one *)arg)->body, d, len);
    return 0;
}

static void one_start(struct one *o);

static void one_done(struct al_http_creq *c, int err, void *arg)
{
    struct one *o = arg;
    struct flight *f = o->f;
    (void)c;
    if (!f->kill && o->phase == 0 && !err && o->status == 201) {
        json_t *j = json_loadb(o->body.data, o->body.len, 0, NULL);
        const char *sid = json_string_value(json_object_get(j, "sandboxID"));
        snprintf(f->ids[o->idx], sizeof f->ids[o->idx], "%s", sid ? sid : "");
        json_decref(j);
        o->phase = 1;
        o->t201 = al_now_ns();
        al_buf_reset(&o->body);
        one_start(o);
        return;
    }
    bool ok = !err && (f->kill ? o->status == 204 : (o->status >= 200 && o->status < 300));
    if (!ok) {
        f->failed++;
        fprintf(stderr, "cp_bench: %s %d failed: %s status %d %.*s\n", f->kill ? "kill" : "create",
                o->idx, err ? strerror(-err) : "", o->status,
                (int)(o->body.len > 200 ? 200 : o->body.len), o->body.data ? o->body.data : "");
    }
    uint64_t t1 = al_now_ns();
    f->ms[o->idx] = (double)(t1 - o->t0) / 1e6;
    if (f->post_ms && !f->kill)
        f->post_ms[o->idx] = o->t201 ? (double)(o->t201 - o->t0) / 1e6 : f->ms[o->idx];
    if (f->samples && !f->kill && o->t201)
        fprintf(f->samples, "%d %.3f %.3f %.3f %.3f\n", o->idx, (double)(o->t0 - f->t0) / 1e6,
                (double)(o->t201 - o->t0) / 1e6, (double)(t1 - o->t201) / 1e6, f->ms[o->idx]);
    f->done++;
    f->inflight--;
    al_buf_free(&o->body);
    free(o);
    flight_next(f);
}

static void one_start(struct one *o)
{
    struct flight *f = o->f;
    struct al_http_header h[3] = {{"X-API-KEY", g_key}, {"Content-Type", "application/json"}};
    char path[96];
    struct al_http_creq_opts co = {.target = g_url,
                                   .headers = h,
                                   .n_headers = 2,
                                   .timeout_ms = 120000,
                                   .on_response = one_resp,
                                   .on_data = one_data,
                                   .on_done = one_done,
                                   .arg = o,
                                   .pool = f->pool};
    if (f->kill) {
        snprintf(path, sizeof path, "/sandboxes/%s", f->ids[o->idx]);
        co.method = "DELETE";
        co.path = path;
    } else if (o->phase == 0) {
        co.method = "POST";
        co.path = "/v2/sandboxes";
        co.body = f->body;
        co.body_len = strlen(f->body);
    } else {
        h[0] = (struct al_http_header){"E2b-Sandbox-Id", f->ids[o->idx]};
        h[1] = (struct al_http_header){"E2b-Sandbox-Port", "49983"};
        co.method = "GET";
        co.path = "/health";
    }
    struct al_http_creq *c;
    if (al_http_creq_start(f->loop, &co, &c)) {
        f->failed++;
        f->done++;
        f->inflight--;
        free(o);
    }
}

static void flight_next(struct flight *f)
{
    while (f->inflight < f->conc && f->started < f->total) {
        struct one *o = calloc(1, sizeof *o);
        o->f = f;
        o->idx = f->started++;
        o->t0 = al_now_ns();
        al_buf_init(&o->body, 1 << 20);
        f->inflight++;
        one_start(o);
    }
}

/* Runs total creations (kill = false) or kills of ids, conc at a time; returns failures. */
static int flight_run(int total, int conc, bool kill, char (*ids)[32], double *ms, double *post_ms,
                      double *secs)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    char body[160];
    snprintf(body, sizeof body, "{\"templateID\":\"%s\",\"timeout\":3600}", g_template);
    struct flight f = {.loop = &loop,
                       .total = total,
                       .conc = conc,
                       .kill = kill,
                       .ids = ids,
                       .ms = ms,
                       .post_ms = post_ms,
                       .body = body};
    struct al_http_pool_opts po = {.max_idle = (size_t)conc, .max_idle_per_target = (size_t)conc};
    al_http_pool_new(&loop, &po, &f.pool);
    const char *sp = getenv("CP_BENCH_SAMPLES");
    if (sp && *sp && !kill && conc > 1)
        f.samples = fopen(sp, "w");
    uint64_t t0 = f.t0 = al_now_ns();
    flight_next(&f);
    uv_run(&loop, UV_RUN_DEFAULT);
    *secs = (double)(al_now_ns() - t0) / 1e9;
    if (f.samples)
        fclose(f.samples);
    al_http_pool_close(f.pool);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return f.failed;
}

/* ---- memory ------------------------------------------------------------------------------- */

static bool proc_has(long pid, const char *file, const char *needle)
{
    char p[64], buf[8192];
    snprintf(p, sizeof p, "/proc/%ld/%s", pid, file);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    for (ssize_t i = 0; i < n; i++)
        if (!buf[i])
            buf[i] = ' ';
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

/* PSS (kB) of airlockd and what it runs: processes naming the state directory, and every
 * process in this run's cgroups (the sandboxes' contents). */
/* A field of /proc/meminfo in kB (MemAvailable, Slab, ...), or -1. */
static double meminfo_kb(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return -1;
    char line[256];
    double v = -1;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtod(line + kl + 1, NULL);
            break;
        }
    fclose(f);
    return v;
}

/* The kernel's own memory: slabs (namespaces, devices, cgroups, sockets), stacks, page
 * tables, per-CPU areas (cgroups' counters). */
static double kernel_kb(void)
{
    static const char *const k[] = {"Slab", "KernelStack", "PageTables", "Percpu"};
    double sum = 0;
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        double v = meminfo_kb(k[i]);
        if (v > 0)
            sum += v;
    }
    return sum;
}

/* Entries of a /proc directory (a process's fd/ or task/), or -1. */
static long proc_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* After a failed creation of the holding phase: what the host's counted limits stood at, and
 * what airlockd says of each sandbox of the failed batch (its record and its log), so that
 * the run says which limit, or which fault, stopped it. */
static void hold_postmortem(char (*ids)[32], int n)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/fd", (int)g_airlockd);
    long fds = proc_entries(p);
    char *text = NULL;
    size_t len = 0;
    long tasks = -1;
    if (al_read_file("/proc/loadavg", 256, &text, &len, NULL) == 0) {
        char *slash = strchr(text, '/');
        tasks = slash ? strtol(slash + 1, NULL, 10) : -1;
        free(text);
    }
    fprintf(stderr,
            "cp_bench: at the failure: airlockd %ld open files, %ld tasks on the host, "
            "MemAvailable %.0f kB\n",
            fds, tasks, meminfo_kb("MemAvailable"));
    struct al_http_header h[] = {{"X-API-KEY", g_key}};
    for (int i = 0; i < n; i++) {
        if (!ids[i][0])
            continue;
        for (int k = 0; k < 2; k++) {
            char path[96];
            snprintf(path, sizeof path, "/sandboxes/%s%s", ids[i], k ? "/logs" : "");
            struct al_http_call_opts o = {.target = g_url,
                                          .method = "GET",
                                          .path = path,
                                          .headers = h,
                                          .n_headers = 1,
                                          .max_body = 1 << 20};
            struct al_http_resp r = {0};
            struct al_error e = {0};
            if (al_http_call(&o, &r, &e) == 0) {
                /* (the log's end: what the sandbox said last) */
                size_t off = r.body.len > 3000 ? r.body.len - 3000 : 0;
                fprintf(stderr, "cp_bench: GET %s: %d %.*s\n", path, r.status,
                        (int)(r.body.len - off), r.body.data + off);
            } else {
                fprintf(stderr, "cp_bench: GET %s: %s\n", path, al_error_str(&e));
            }
            al_http_resp_free(&r);
        }
    }
}

static double pss_kb(void)
{
    DIR *d = opendir("/proc");
    double total = 0;
    struct dirent *e;
    char cgneedle[96];
    snprintf(cgneedle, sizeof cgneedle, "/%s/", g_cg);
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1)
            continue;
        if (!proc_has(pid, "cmdline", g_state) && !proc_has(pid, "cgroup", cgneedle))
            continue;
        char p[64], line[256];
        snprintf(p, sizeof p, "/proc/%ld/smaps_rollup", pid);
        FILE *f = fopen(p, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f)) {
            unsigned long kb;
            if (sscanf(line, "Pss: %lu kB", &kb) == 1) {
                total += (double)kb;
                break;
            }
        }
        fclose(f);
    }
    closedir(d);
    return total;
}

/* ---- the references: airlock-vmm without airlockd, bwrap -------------------------------- */

/* "cold": base's files under a name no warm pool keeps (as tests/integration/cp_warm.sh's
 * "plain"). */
static int cold_template(void)
{
    char base[400], cold[400], target[4096];
    snprintf(base, sizeof base, "%s/templates/base", g_state);
    snprintf(cold, sizeof cold, "%s/templates/cold", g_state);
    if (!realpath(base, target))
        return -errno;
    return symlink(target, cold) < 0 && errno != EEXIST ? -errno : 0;
}

/* ms until `bwrap --unshare-all ... /bin/true` in base's root exited 0, or -1. */
static double bwrap_once(const char *bwrap)
{
    char root[4200], rel[400];
    snprintf(rel, sizeof rel, "%s/templates/base", g_state);
    if (!realpath(rel, root))
        return -1;
    strncat(root, "/rootfs", sizeof root - strlen(root) - 1);
    uint64_t t0 = al_now_ns();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (nul >= 0) {
            dup2(nul, 1);
            dup2(nul, 2);
        }
        execl(bwrap, "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", root, "/",
              "--proc", "/proc", "--dev", "/dev", "/bin/true", (char *)NULL);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return (double)(al_now_ns() - t0) / 1e6;
}

static const char *bwrap_path(void)
{
    static const char *const dirs[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        if (access(dirs[i], X_OK) == 0)
            return dirs[i];
    return NULL;
}

static double vmm_direct_once(int i)
{
    char id[64], spec[1024], vmm[4200];
    snprintf(id, sizeof id, "ref%d-%d", getpid(), i);
    snprintf(spec, sizeof spec,
             "{\"id\":\"%s\",\"template\":\"%s/templates/base\",\"network\":{\"mode\":\"none\"},"
             "\"jail\":{\"cgroup_parent\":\"%s\"}}",
             id, g_state, g_cg);
    snprintf(vmm, sizeof vmm, "%s/airlock-vmm", g_bin);
    int in[2], rd[2];
    if (pipe(in) || pipe(rd))
        return -1;
    uint64_t t0 = al_now_ns();
    pid_t p = fork();
    if (p == 0) {
        dup2(in[0], 0);
        dup2(rd[1], 3);
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 1);
        dup2(nul, 2);
        for (int fd = 4; fd < 64; fd++)
            close(fd);
        execl(vmm, vmm, "--state-dir", g_state, "--spec", "-", "--ready-fd", "3", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(rd[1]);
    al_write_all(in[1], spec, strlen(spec));
    close(in[1]);
    char line[4096];
    ssize_t n = read(rd[0], line, sizeof line - 1);
    double ms = (double)(al_now_ns() - t0) / 1e6;
    close(rd[0]);
    if (n <= 0 || !strstr(line, "\"ready\":true"))
        ms = -1;
    kill(p, SIGTERM);
    waitpid(p, NULL, 0);
    return ms;
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "b:n:N:c:i:m:r:w:W:p:k:q:h")) != -1) {
        switch (c) {
        case 'b':
            opt_backend = optarg;
            break;
        case 'n':
            opt_n1 = atoi(optarg);
            break;
        case 'N':
            opt_nc = atoi(optarg);
            break;
        case 'c':
            opt_conc = atoi(optarg);
            break;
        case 'i':
            opt_idle = atoi(optarg);
            break;
        case 'm':
            opt_max = atoi(optarg);
            break;
        case 'r':
            opt_ref = atoi(optarg);
            break;
        case 'w':
            opt_warm = atoi(optarg);
            break;
        case 'W':
            opt_warm_sb = atoi(optarg);
            break;
        case 'p':
            opt_netpool = atoi(optarg);
            break;
        case 'k':
            opt_starts = atoi(optarg);
            break;
        case 'q':
            opt_quiet = atoi(optarg);
            break;

        default:
            fprintf(stderr, "usage: cp_bench [-b jail|test] [-n N1] [-N NC] [-c CONC] [-i IDLE] "
                            "[-m MAXHELD] [-r REFRUNS] [-w WARM] [-W WARM_SANDBOXES] [-p NETPOOL] "
                            "[-k STARTS] [-q REFILL_QUIET_MS]\n");
            return 2;
        }
    }
    if (geteuid() != 0) {
        fprintf(stderr, "cp_bench: needs root (namespaces, cgroups, the switch)\n");
        return 2;
    }
    if (unshare(CLONE_NEWNET) < 0 || system("ip link set lo up") != 0) {
        fprintf(stderr, "cp_bench: cannot make a private network namespace: %s\n", strerror(errno));
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    atexit(cleanup);
    int rc = start_airlockd();
    if (rc) {
        fprintf(stderr, "cp_bench: airlockd did not start: %s\n", strerror(-rc));
        return 1;
    }
    /* Let the pools (warm airlock-vmm processes, sandbox networks) fill before measuring. */
    sleep(1);
    if (!pools_wait(120))
        fprintf(stderr, "cp_bench: the pools did not fill within 120 s; measuring anyway\n");
    int fails = 0;
    int nmax = opt_nc > opt_n1 ? opt_nc : opt_n1;
    size_t cap = (size_t)(nmax > opt_max ? nmax : opt_max);
    cap = (cap > (size_t)opt_idle ? cap : (size_t)opt_idle) + 1;
    char(*ids)[32] = calloc(cap, sizeof *ids);
    double *ms = calloc(cap, sizeof *ms);
    double *ms2 = calloc(cap, sizeof *ms2);
    double secs;

    struct phase ph;
    /* c = 1 */
    phase_begin(&ph);
    fails += flight_run(opt_n1, 1, false, ids, ms, NULL, &secs);
    phase_end(&ph, "create_c1", opt_n1);
    out_dist("create_c1", ms, (size_t)opt_n1);
    phase_begin(&ph);
    fails += flight_run(opt_n1, 1, true, ids, ms2, NULL, &secs);
    phase_end(&ph, "kill_c1", opt_n1);
    out_dist("kill_c1", ms2, (size_t)opt_n1);
    if (opt_warm_sb > 0) {
        /* The cold path, same run: no warm sandbox keeps "cold". */
        int rc = cold_template();
        if (rc < 0) {
            fprintf(stderr, "cp_bench: cannot make the template \"cold\": %s\n", strerror(-rc));
            fails++;
        } else {
            sleep(1);
            if (!pools_wait(120))
                fprintf(stderr, "cp_bench: the pools did not refill within 120 s; measuring "
                                "anyway\n");
            g_template = "cold";
            phase_begin(&ph);
            fails += flight_run(opt_n1, 1, false, ids, ms, NULL, &secs);
            phase_end(&ph, "create_c1_cold", opt_n1);
            out_dist("create_c1_cold", ms, (size_t)opt_n1);
            phase_begin(&ph);
            fails += flight_run(opt_n1, 1, true, ids, ms2, NULL, &secs);
            phase_end(&ph, "kill_c1_cold", opt_n1);
            out_dist("kill_c1_cold", ms2, (size_t)opt_n1);
            g_template = "base";
        }
    }

    /* c = CONC */
    char m[64];
    snprintf(m, sizeof m, "create_c%d", opt_conc);
    /* The pools refill between bursts (the kills' network releases finish meanwhile). */
    sleep(3);
    if (!pools_wait(120))
        fprintf(stderr, "cp_bench: the pools did not refill within 120 s; measuring anyway\n");
    phase_begin(&ph);
    fails += flight_run(opt_nc, opt_conc, false, ids, ms, ms2, &secs);
    phase_end(&ph, m, opt_nc);
    out_dist(m, ms, (size_t)opt_nc);
    /* For comparison only (the target is on the figure above): the part an SDK's create
     * waits for, the 201 (airlockd answers it once the agent answered /health). */
    snprintf(m, sizeof m, "create_c%d_until_201", opt_conc);
    out_dist(m, ms2, (size_t)opt_nc);
    snprintf(m, sizeof m, "create_c%d_rate", opt_conc);
    out(m, (double)opt_nc / secs, "sandboxes/s");
    snprintf(m, sizeof m, "kill_c%d", opt_conc);
    phase_begin(&ph);
    fails += flight_run(opt_nc, opt_conc, true, ids, ms2, NULL, &secs);
    phase_end(&ph, m, opt_nc);
    out_dist(m, ms2, (size_t)opt_nc);

    /* The reference: airlock-vmm alone. */
    if (strcmp(opt_backend, "jail") == 0 && opt_ref > 0) {
        double *ref = calloc((size_t)opt_ref, sizeof *ref);
        size_t k = 0;
        for (int i = 0; i < opt_ref; i++) {
            double v = vmm_direct_once(i);
            if (v >= 0)
                ref[k++] = v;
        }
        if (k)
            out_dist("vmm_direct", ref, k);
        const char *bw = bwrap_path();
        k = 0;
        for (int i = 0; bw && i < opt_ref; i++) {
            double v = bwrap_once(bw);
            if (v >= 0)
                ref[k++] = v;
        }
        if (k)
            out_dist("bwrap_true", ref, k);
        else
            fprintf(stderr, "cp_bench: %s: no bwrap_true reference\n",
                    bw ? "bwrap did not run /bin/true in base's root"
                       : "no bwrap (apt-get install bubblewrap)");
        free(ref);
    }

    /* Memory per idle sandbox. */
    if (opt_idle > 0) {
        sleep(1);
        double before = pss_kb();
        fails += flight_run(opt_idle, 8, false, ids, ms, NULL, &secs);
        sleep(2);
        double after = pss_kb();
        out("pss_all_airlock_idle", after, "kB");
        out("pss_per_idle_sandbox", (after - before) / opt_idle, "kB");
        fails += flight_run(opt_idle, 8, true, ids, ms2, NULL, &secs);
    }

    /* How many idle sandboxes airlockd holds. */
    if (opt_max > 0) {
        int held = 0;
        double avail0 = meminfo_kb("MemAvailable"), kern0 = kernel_kb();
        double total = meminfo_kb("MemTotal");
        for (; held < opt_max;) {
            /* Bounded by the machine too: the kernel's share of a sandbox (its network
             * namespace, interfaces, cgroups) is charged to no sandbox's limit, so the host's
             * OOM killer, not airlockd's 503, would stop a count beyond what memory holds. */
            double avail = meminfo_kb("MemAvailable");
            if (total > 0 && avail >= 0 && avail < total / 10) {
                fprintf(stderr,
                        "cp_bench: stopped holding at %d sandboxes: MemAvailable %.0f kB is "
                        "below a tenth of MemTotal\n",
                        held, avail);
                out("max_idle_stopped_by_memory", 1, "bool");
                break;
            }
            int batch = opt_max - held < 8 ? opt_max - held : 8;
            int f = flight_run(batch, batch, false, ids + held, ms + held, NULL, &secs);
            if (f) {
                hold_postmortem(ids + held, batch);
                /* Keep what was made: kill only those with an id. */
                int ok = 0;
                for (int i = held; i < held + batch; i++)
                    if (ids[i][0])
                        memcpy(ids[held + ok++], ids[i], sizeof ids[i]);
                held += ok;
                break;
            }
            held += batch;
        }
        out("max_idle_sandboxes", held, "sandboxes");
        out("max_idle_pss_total", pss_kb(), "kB");
        /* The whole machine's share, beside the PSS: what MemAvailable lost (user memory,
         * page cache the sandboxes pinned, the kernel's) and the kernel's part of it. */
        if (held > 0 && avail0 > 0) {
            sleep(2);
            out("max_idle_machine_kb_per_sandbox", (avail0 - meminfo_kb("MemAvailable")) / held,
                "kB");
            out("max_idle_kernel_kb_per_sandbox", (kernel_kb() - kern0) / held, "kB");
        }
        int k = 0;
        for (int i = 0; i < held; i++)
            if (ids[i][0])
                memcpy(ids[k++], ids[i], sizeof ids[i]);
        fails += flight_run(k, 32, true, ids, ms2, NULL, &secs);
    }
    free(ids);
    free(ms);
    free(ms2);
    /* airlockd's stop: SIGTERM until it exited (it gives its pooled networks back then). */
    if (g_airlockd > 0) {
        uint64_t ts = al_now_ns();
        kill(g_airlockd, SIGTERM);
        for (int i = 0; i < 12000; i++) {
            if (waitpid(g_airlockd, NULL, WNOHANG) == g_airlockd) {
                out("airlockd_stop", (double)(al_now_ns() - ts) / 1e6, "ms");
                g_airlockd = 0;
                break;
            }
            usleep(5000);
        }
    }
    cleanup();
    if (fails)
        fprintf(stderr, "cp_bench: %d request(s) failed (see above)\n", fails);
    return fails ? 1 : 0;
}
