/* bench/jail_bench: airlock-vmm's jail backend, measured end to end.
 *
 *   jail_bench --template DIR [--agent-dir DIR] [--samples N] [--density N]
 *              [--max-seconds S] [--vmm PATH] [--no-reference]
 *
 * Prints JSON lines {"bench":"jail","metric":...,"value":...,"unit":...}:
 *   create_healthy_p50_ms / _p99_ms   spawn of airlock-vmm -> the agent answered GET /health
 *                                     (airlock-vmm's ready line, written right after its
 *                                     probe got a 2xx), sandboxes created one at a time,
 *                                     each joining a pre-created network namespace (the
 *                                     "pooled network" of the vswitch); phase medians too
 *   warm_create_healthy_p50_ms / _p99_ms  the same from a warm airlock-vmm (started with
 *                                     --warm earlier, as a pool would): the spec written to
 *                                     its stdin -> its ready line
 *   reference_bare_agent_p50_ms       the same agent binary started directly on the host
 *                                     (no namespaces, mounts, cgroups, filters) until it
 *                                     answers /health: what the sandbox costs on top
 *   idle_sandboxes_held               how many idle sandboxes ran at once (stops at --density,
 *                                     at a failed create, or when MemAvailable < 2 GiB)
 *   memory_per_idle_sandbox_kib       host MemAvailable drop / sandboxes held (everything:
 *                                     airlock-vmm, the agent, kernel objects, page cache)
 *   host_overhead_per_sandbox_kib     the same minus what the sandboxes' memory cgroups hold
 *                                     (i.e. beyond what the workload, the agent, uses)
 *   vmm_pss_kib                       airlock-vmm's proportional set size, average
 * Everything it creates (sandboxes, network namespaces, cgroup parent al-bench-<pid>, a
 * state directory under /tmp) is removed at the end, also on SIGINT/SIGTERM. Needs root.
 *
 * The figures that count: a Release build, a quiet machine, e.g.
 *   build/bench/jail_bench --template /var/lib/airlock/templates/base --samples 200 --density 500
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char vmm_path[4096], agent_dir[4096], template_dir[4096], tmp[256], state[300];
static char cgparent[64];
static int samples = 50, density = 500, max_seconds = 600;
static int no_reference;
static volatile sig_atomic_t interrupted;

struct sbx {
    pid_t vmm;
    char id[32];
    char netns[400];
};
static struct sbx *live;
static int n_live;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void emit(const char *metric, double v, const char *unit)
{
    printf("{\"bench\":\"jail\",\"metric\":\"%s\",\"value\":%.3f,\"unit\":\"%s\"}\n", metric, v,
           unit);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)ceil(p / 100.0 * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static long meminfo_kib(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':')
            v = strtol(line + kl + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

/* A network namespace bound at path, like `ip netns add` (no process keeps it). */
static int netns_create(const char *path)
{
    int fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0)
        return -errno;
    close(fd);
    pid_t p = fork();
    if (p == 0) {
        if (unshare(CLONE_NEWNET) < 0)
            _exit(1);
        if (mount("/proc/self/ns/net", path, NULL, MS_BIND, NULL) < 0)
            _exit(2);
        _exit(0);
    }
    int st;
    waitpid(p, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

static void netns_delete(const char *path)
{
    umount2(path, MNT_DETACH);
    unlink(path);
}

static int write_spec(const char *id, const char *netns, char *path, size_t len)
{
    snprintf(path, len, "%s/spec-%s.json", tmp, id);
    FILE *f = fopen(path, "we");
    if (!f)
        return -errno;
    fprintf(f,
            "{\"id\":\"%s\",\"template\":\"%s\",\"agent\":{\"dir\":\"%s\"},"
            "\"resources\":{\"memory_mib\":256,\"disk_mib\":256,\"pids\":256,\"cpus\":1},",
            id, template_dir, agent_dir);
    if (netns)
        fprintf(f, "\"network\":{\"mode\":\"netns\",\"netns\":\"%s\"},", netns);
    fprintf(f, "\"jail\":{\"cgroup_parent\":\"%s\"}}\n", cgparent);
    fclose(f);
    return 0;
}

/* Reads one line from fd (30 s at most) into buf. */
static size_t read_line(int fd, char *buf, size_t len)
{
    size_t n = 0;
    for (;;) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 30000) <= 0)
            break;
        ssize_t r = read(fd, buf + n, len - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (memchr(buf, '\n', n))
            break;
    }
    buf[n] = '\0';
    return n;
}

/* Spawns airlock-vmm for s: cold (--spec FILE) or warm (--warm, spec later on stdin).
 * Returns the read end of its ready fd; *spec_w the write end of its stdin (warm). */
static int spawn_vmm(struct sbx *s, bool warm, int *spec_w)
{
    char spec[600];
    if (write_spec(s->id, s->netns[0] ? s->netns : NULL, spec, sizeof spec))
        return -1;
    int p[2], in[2] = {-1, -1};
    if (pipe2(p, O_CLOEXEC) < 0 || (warm && pipe2(in, O_CLOEXEC) < 0))
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 3);
    if (warm)
        posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    char logp[600];
    snprintf(logp, sizeof logp, "%s/vmm-%s.log", tmp, s->id);
    posix_spawn_file_actions_addopen(&fa, 2, logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *cold[] = {vmm_path, "--state-dir", state, "--spec", spec, "--ready-fd", "3", NULL};
    char *hot[] = {vmm_path, "--state-dir", state, "--warm", "--cgroup-parent", cgparent, "--spec",
                   "-",      "--ready-fd",  "3",   NULL};
    int rc = posix_spawn(&s->vmm, vmm_path, &fa, NULL, warm ? hot : cold, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (warm)
        close(in[0]);
    if (rc) {
        close(p[0]);
        if (warm)
            close(in[1]);
        return -1;
    }
    if (spec_w)
        *spec_w = in[1];
    return p[0];
}

/* Starts a sandbox cold; waits for its ready line. Returns ms from spawn to ready, or < 0. */
static double start_sandbox(struct sbx *s, char *ready, size_t rlen)
{
    double t0 = now_ms();
    int fd = spawn_vmm(s, false, NULL);
    if (fd < 0)
        return -1;
    read_line(fd, ready, rlen);
    double t1 = now_ms();
    close(fd);
    if (!strstr(ready, "\"ready\":true"))
        return -1;
    return t1 - t0;
}

/* A warm airlock-vmm waiting for its spec. */
struct warm {
    struct sbx s;
    int ready_fd, spec_fd;
};

static int warm_spawn(struct warm *w, const char *id, const char *netns)
{
    memset(w, 0, sizeof *w);
    snprintf(w->s.id, sizeof w->s.id, "%s", id);
    snprintf(w->s.netns, sizeof w->s.netns, "%s", netns ? netns : "");
    w->ready_fd = spawn_vmm(&w->s, true, &w->spec_fd);
    if (w->ready_fd < 0)
        return -1;
    char line[256];
    read_line(w->ready_fd, line, sizeof line);
    return strstr(line, "\"warm\":true") ? 0 : -1;
}

/* Hands the spec to a warm airlock-vmm; ms from the write to the ready line. */
static double warm_start(struct warm *w, char *ready, size_t rlen)
{
    char spec[600], *data = NULL;
    snprintf(spec, sizeof spec, "%s/spec-%s.json", tmp, w->s.id);
    FILE *f = fopen(spec, "re");
    size_t cap = 0;
    ssize_t n = f ? getdelim(&data, &cap, '\0', f) : -1;
    if (f)
        fclose(f);
    if (n <= 0) {
        free(data);
        return -1;
    }
    double t0 = now_ms();
    ssize_t wr = write(w->spec_fd, data, (size_t)n);
    close(w->spec_fd);
    free(data);
    if (wr != n)
        return -1;
    read_line(w->ready_fd, ready, rlen);
    double t1 = now_ms();
    close(w->ready_fd);
    return strstr(ready, "\"ready\":true") ? t1 - t0 : -1;
}

static int stop_sandbox(struct sbx *s)
{
    if (s->vmm <= 0)
        return 0;
    kill(s->vmm, SIGTERM);
    int st;
    while (waitpid(s->vmm, &st, 0) < 0 && errno == EINTR)
        ;
    s->vmm = 0;
    if (s->netns[0])
        netns_delete(s->netns);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static double json_num(const char *json, const char *key)
{
    char k[80];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(json, k);
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* ms from spawning the agent on the host to a 2xx answer to GET /health. */
static double bare_agent_once(int i)
{
    char sock[300];
    snprintf(sock, sizeof sock, "%s/bare-%d.sock", tmp, i);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(l, 16) < 0)
        return -1;
    char agent[4200], home[300];
    snprintf(agent, sizeof agent, "%s/bin/airlock-agent", agent_dir);
    snprintf(home, sizeof home, "%s/bare-home", tmp);
    mkdir(home, 0755);
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid == 0) {
        if (l == 3)
            fcntl(3, F_SETFD, 0);
        else
            dup2(l, 3);
        int dn = open("/dev/null", O_RDWR);
        dup2(dn, 1);
        dup2(dn, 2);
        setenv("AIRLOCK_AGENT_LISTEN_FD", "3", 1);
        char *argv[] = {agent, NULL};
        execv(agent, argv);
        _exit(127);
    }
    close(l);
    double t = -1;
    for (int attempt = 0; attempt < 5000 && t < 0; attempt++) {
        int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(c, (struct sockaddr *)&sa, sizeof sa) == 0) {
            static const char req[] =
                "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
            if (write(c, req, sizeof req - 1) == (ssize_t)(sizeof req - 1)) {
                char buf[64];
                ssize_t r = read(c, buf, sizeof buf - 1);
                if (r > 12 && buf[9] == '2')
                    t = now_ms() - t0;
            }
        }
        close(c);
        if (t < 0)
            usleep(200);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(sock);
    return t;
}

static long pss_kib(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(p, "re");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Pss:", 4) == 0)
            v = strtol(line + 4, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static long cgroup_mem_kib(const char *id)
{
    char p[300], buf[64];
    snprintf(p, sizeof p, "/sys/fs/cgroup/memory/%s/%s/memory.usage_in_bytes", cgparent, id);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(p, sizeof p, "/sys/fs/cgroup/%s/%s/memory.current", cgparent, id);
        fd = open(p, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return strtol(buf, NULL, 10) / 1024;
}

static void on_signal(int s)
{
    (void)s;
    interrupted = 1;
}

static void cleanup_all(void)
{
    for (int i = 0; i < n_live; i++)
        stop_sandbox(&live[i]);
    n_live = 0;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' --state-dir '%s' --sweep --cgroup-parent '%s' >/dev/null 2>&1",
             vmm_path, state, cgparent);
    if (system(cmd) != 0)
        fprintf(stderr, "jail_bench: the final sweep reported an error\n");
    static const char *const ctrls[] = {"memory", "pids", "cpu", "cpuacct", "freezer", ""};
    for (size_t i = 0; i < sizeof ctrls / sizeof ctrls[0]; i++) {
        char p[200];
        snprintf(p, sizeof p, "/sys/fs/cgroup/%s%s%s", ctrls[i], ctrls[i][0] ? "/" : "", cgparent);
        rmdir(p);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "jail_bench: cannot remove %s\n", tmp);
}

static void usage(void)
{
    fprintf(stderr, "usage: jail_bench --template DIR [--agent-dir DIR] [--samples N] "
                    "[--density N] [--max-seconds S] [--vmm PATH] [--no-reference]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sl > 0 ? sl : 0] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    snprintf(vmm_path, sizeof vmm_path, "%s/../bin/airlock-vmm", self);
    snprintf(agent_dir, sizeof agent_dir, "%s/../agent-root/.airlock", self);
    struct stat st;
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/bin/airlock-agent", agent_dir);
    if (stat(probe, &st) < 0)
        snprintf(agent_dir, sizeof agent_dir, "%s/../testinit-root", self);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--template") == 0 && v)
            snprintf(template_dir, sizeof template_dir, "%s", argv[++i]);
        else if (strcmp(a, "--agent-dir") == 0 && v)
            snprintf(agent_dir, sizeof agent_dir, "%s", argv[++i]);
        else if (strcmp(a, "--vmm") == 0 && v)
            snprintf(vmm_path, sizeof vmm_path, "%s", argv[++i]);
        else if (strcmp(a, "--samples") == 0 && v)
            samples = atoi(argv[++i]);
        else if (strcmp(a, "--density") == 0 && v)
            density = atoi(argv[++i]);
        else if (strcmp(a, "--max-seconds") == 0 && v)
            max_seconds = atoi(argv[++i]);
        else if (strcmp(a, "--no-reference") == 0)
            no_reference = 1;
        else
            usage();
    }
    if (!template_dir[0] || samples < 1 || density < 0 || samples > 100000 || density > 100000)
        usage();
    if (geteuid() != 0) {
        fprintf(stderr, "jail_bench: needs root\n");
        return 1;
    }
    char real[4096];
    if (realpath(agent_dir, real))
        snprintf(agent_dir, sizeof agent_dir, "%s", real);
    if (realpath(template_dir, real))
        snprintf(template_dir, sizeof template_dir, "%s", real);
    snprintf(tmp, sizeof tmp, "/tmp/al-bench-jail-%d", (int)getpid());
    snprintf(state, sizeof state, "%s/s", tmp);
    snprintf(cgparent, sizeof cgparent, "al-bench-%d", (int)getpid());
    if (mkdir(tmp, 0755) < 0 || mkdir(state, 0755) < 0) {
        fprintf(stderr, "jail_bench: cannot create %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    char nsdir[300];
    snprintf(nsdir, sizeof nsdir, "%s/netns", tmp);
    mkdir(nsdir, 0755);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    int cap = samples > density ? samples : density;
    live = calloc((size_t)cap + 4, sizeof *live);
    double *lat = calloc((size_t)samples, sizeof *lat);
    static const char *const phases[] = {"vmm_spec_us",
                                         "vmm_state_dir_us",
                                         "vmm_reserve_us",
                                         "vmm_record_us",
                                         "vmm_socket_us",
                                         "prepare_us",
                                         "clone_us",
                                         "setup_us",
                                         "cgroup_attach_us",
                                         "child_rootfs_us",
                                         "child_mounts_us",
                                         "child_pivot_us",
                                         "child_cgroup_wait_us",
                                         "child_locks_us",
                                         "child_us",
                                         "exec_us",
                                         "total_us",
                                         "health_us"};
    enum { NPH = sizeof phases / sizeof phases[0] };
    double *ph[NPH], *exec_ms = calloc((size_t)samples, sizeof(double));
    double *spawn_ms = calloc((size_t)(unsigned)samples, sizeof(double));
    for (int k = 0; k < NPH; k++)
        ph[k] = calloc((size_t)samples, sizeof(double));
    double deadline = now_ms() + max_seconds * 1000.0;
    char ready[4096];
    int rc = 0;

    fprintf(stderr, "jail_bench: vmm %s, agent %s, template %s\n", vmm_path, agent_dir,
            template_dir);
    /* Warm-up (page cache, dentries of the template). */
    for (int i = 0; i < 3 && !interrupted; i++) {
        struct sbx s = {0};
        snprintf(s.id, sizeof s.id, "warm%d", i);
        if (start_sandbox(&s, ready, sizeof ready) < 0) {
            fprintf(stderr, "jail_bench: the warm-up sandbox did not start: %s (see %s)\n", ready,
                    tmp);
            stop_sandbox(&s);
            rc = 1;
            goto out;
        }
        stop_sandbox(&s);
    }

    /* Latency: one at a time, each with a pooled (pre-created) network namespace. */
    int got = 0;
    for (int i = 0; i < samples && !interrupted && now_ms() < deadline; i++) {
        struct sbx s = {0};
        snprintf(s.id, sizeof s.id, "lat%d", i);
        snprintf(s.netns, sizeof s.netns, "%s/ns%d", nsdir, i);
        if (netns_create(s.netns) < 0) {
            fprintf(stderr, "jail_bench: cannot create a network namespace\n");
            rc = 1;
            break;
        }
        double ms = start_sandbox(&s, ready, sizeof ready);
        if (ms < 0) {
            fprintf(stderr, "jail_bench: sandbox %s did not start: %s\n", s.id, ready);
            stop_sandbox(&s);
            rc = 1;
            break;
        }
        lat[got] = ms;
        exec_ms[got] = json_num(ready, "exec_ms");
        spawn_ms[got] = ms - json_num(ready, "startup_ms");
        for (int k = 0; k < NPH; k++)
            ph[k][got] = json_num(ready, phases[k]) / 1000.0;
        got++;
        stop_sandbox(&s);
    }
    if (got) {
        double p50 = pct(lat, got, 50), p99 = pct(lat, got, 99);
        emit("create_healthy_p50_ms", p50, "ms");
        emit("create_healthy_p99_ms", p99, "ms");
        emit("create_healthy_samples", got, "count");
        emit("create_exec_p50_ms", pct(exec_ms, got, 50), "ms");
        emit("vmm_process_start_p50_ms", pct(spawn_ms, got, 50), "ms");
        for (int k = 0; k < NPH; k++) {
            char m[64];
            snprintf(m, sizeof m, "phase_%.*s_p50_ms", (int)(strlen(phases[k]) - 3), phases[k]);
            emit(m, pct(ph[k], got, 50), "ms");
        }
        if (!no_reference) {
            double *ref = calloc((size_t)got, sizeof(double));
            int nr = 0;
            for (int i = 0; i < got && i < 50; i++) {
                double t = bare_agent_once(i);
                if (t >= 0)
                    ref[nr++] = t;
            }
            if (nr) {
                double r50 = pct(ref, nr, 50);
                emit("reference_bare_agent_p50_ms", r50, "ms");
                emit("sandbox_overhead_p50_ms", p50 - r50, "ms");
            }
            free(ref);
        }
    }

    /* Warm: the same, handing each spec to an airlock-vmm started (and warmed) earlier,
     * as a control plane with a pool of warm airlock-vmm processes does. */
    double *wl = calloc((size_t)(unsigned)samples, sizeof(double));
    int wgot = 0;
    for (int i = 0; i < samples && !interrupted && now_ms() < deadline; i++) {
        struct warm w;
        char id[32], ns[400];
        snprintf(id, sizeof id, "warm%d", i);
        snprintf(ns, sizeof ns, "%s/wns%d", nsdir, i);
        if (netns_create(ns) < 0 || warm_spawn(&w, id, ns) < 0) {
            fprintf(stderr, "jail_bench: cannot start a warm airlock-vmm\n");
            rc = 1;
            break;
        }
        usleep(20000); /* it waits for its spec, as in a pool */
        double ms = warm_start(&w, ready, sizeof ready);
        if (ms < 0) {
            fprintf(stderr, "jail_bench: warm sandbox %s did not start: %s\n", id, ready);
            stop_sandbox(&w.s);
            rc = 1;
            break;
        }
        for (int k = 0; k < NPH; k++)
            ph[k][wgot] = json_num(ready, phases[k]) / 1000.0;
        wl[wgot++] = ms;
        stop_sandbox(&w.s);
    }
    if (wgot) {
        emit("warm_create_healthy_p50_ms", pct(wl, wgot, 50), "ms");
        emit("warm_create_healthy_p99_ms", pct(wl, wgot, 99), "ms");
        for (int k = 0; k < NPH; k++) {
            char m[64];
            snprintf(m, sizeof m, "warm_phase_%.*s_p50_ms", (int)(strlen(phases[k]) - 3),
                     phases[k]);
            emit(m, pct(ph[k], wgot, 50), "ms");
        }
    }
    free(wl);

    /* Density: idle sandboxes, held at once. */
    if (density > 0 && !interrupted) {
        sync();
        long avail0 = meminfo_kib("MemAvailable");
        double t0 = now_ms();
        for (int i = 0; i < density && !interrupted && now_ms() < deadline; i++) {
            if (meminfo_kib("MemAvailable") < 2L * 1024 * 1024) {
                fprintf(stderr, "jail_bench: stopping at %d sandboxes: less than 2 GiB left\n", i);
                break;
            }
            struct sbx *s = &live[n_live];
            memset(s, 0, sizeof *s);
            snprintf(s->id, sizeof s->id, "idle%d", i);
            if (start_sandbox(s, ready, sizeof ready) < 0) {
                fprintf(stderr, "jail_bench: sandbox %d did not start: %s\n", i, ready);
                stop_sandbox(s);
                break;
            }
            n_live++;
        }
        double fill_s = (now_ms() - t0) / 1000.0;
        sleep(2); /* let the agents settle into idle */
        long avail1 = meminfo_kib("MemAvailable");
        long cg = 0, pss = 0;
        int npss = 0;
        for (int i = 0; i < n_live; i++) {
            cg += cgroup_mem_kib(live[i].id);
            long p = pss_kib(live[i].vmm);
            if (p > 0) {
                pss += p;
                npss++;
            }
        }
        emit("idle_sandboxes_held", n_live, "count");
        emit("idle_fill_seconds", fill_s, "s");
        if (n_live) {
            double per = (double)(avail0 - avail1) / n_live;
            emit("memory_per_idle_sandbox_kib", per, "KiB");
            emit("sandbox_cgroup_memory_kib", (double)cg / n_live, "KiB");
            emit("host_overhead_per_sandbox_kib", per - (double)cg / n_live, "KiB");
            if (npss)
                emit("vmm_pss_kib", (double)pss / npss, "KiB");
        }
        double ts = now_ms();
        for (int i = 0; i < n_live; i++)
            if (stop_sandbox(&live[i]) < 0)
                rc = 1;
        if (n_live)
            emit("idle_stop_all_seconds", (now_ms() - ts) / 1000.0, "s");
        n_live = 0;
    }
out:
    cleanup_all();
    free(lat);
    free(exec_ms);
    free(spawn_ms);
    for (int k = 0; k < NPH; k++)
        free(ph[k]);
    free(live);
    if (interrupted)
        fprintf(stderr, "jail_bench: interrupted; cleaned up\n");
    return rc;
}
