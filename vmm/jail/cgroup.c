/* vmm/jail/cgroup: see cgroup.h. */
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/confine.h"
#include "common/util.h"

static const char *const cg__names[JAIL_CG_NCTRL] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

/* ---- layout --------------------------------------------------------------------- */

/* Undoes mountinfo's octal escapes (\040 for space etc.) in place. */
static void cg__unescape(char *s)
{
    char *o = s;
    while (*s) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 4;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
}

static bool cg__opt_has(const char *opts, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = opts; p && *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        p = c ? c + 1 : NULL;
    }
    return false;
}

static bool cg__word_has(const char *words, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = words; p && *p;) {
        while (*p == ' ' || *p == '\n' || *p == '\t')
            p++;
        const char *e = p;
        while (*e && *e != ' ' && *e != '\n' && *e != '\t')
            e++;
        if ((size_t)(e - p) == n && memcmp(p, name, n) == 0)
            return true;
        p = *e ? e + 1 : NULL;
    }
    return false;
}

int jail_cg_layout_parse(const char *mountinfo, const char *v2_controllers,
                         struct jail_cg_layout *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    al_autofree char *copy = strdup(mountinfo ? mountinfo : "");
    if (!copy)
        return al_error_set(err, -ENOMEM, "out of memory");
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        /* id parent maj:min root mountpoint opts [optional...] - fstype source superopts */
        char *f[6] = {0};
        char *p = line;
        for (int i = 0; i < 5 && p; i++) {
            f[i] = p;
            p = strchr(p, ' ');
            if (p)
                *p++ = '\0';
        }
        if (!p || !f[4])
            continue;
        char *sep = strstr(p, " - ");
        if (!sep)
            continue;
        char *rest = sep + 3;
        char *fstype = rest;
        char *source = strchr(fstype, ' ');
        if (!source)
            continue;
        *source++ = '\0';
        char *superopts = strchr(source, ' ');
        if (!superopts)
            continue;
        *superopts++ = '\0';
        char *mnt = f[4];
        cg__unescape(mnt);
        if (strlen(mnt) >= JAIL_CG_PATH_MAX)
            continue;
        if (strcmp(f[3], "/") != 0)
            continue; /* a bind of a sub-directory of a hierarchy: not its root */
        if (strcmp(fstype, "cgroup2") == 0) {
            if (!out->v2_root[0])
                snprintf(out->v2_root, sizeof out->v2_root, "%s", mnt);
        } else if (strcmp(fstype, "cgroup") == 0) {
            for (int c = 0; c < JAIL_CG_NCTRL; c++) {
                if (cg__opt_has(superopts, cg__names[c]) && !out->v1_root[c][0])
                    snprintf(out->v1_root[c], sizeof out->v1_root[c], "%s", mnt);
            }
        }
    }

    bool v2_ok = out->v2_root[0] && v2_controllers && cg__word_has(v2_controllers, "memory") &&
                 cg__word_has(v2_controllers, "pids") && cg__word_has(v2_controllers, "cpu");
    bool v1_ok = out->v1_root[JAIL_CG_MEMORY][0] && out->v1_root[JAIL_CG_PIDS][0] &&
                 out->v1_root[JAIL_CG_CPU][0] && out->v1_root[JAIL_CG_FREEZER][0];
    if (v2_ok) {
        out->version = 2;
        for (int c = 0; c < JAIL_CG_NCTRL; c++)
            out->v1_root[c][0] = '\0';
        return 0;
    }
    if (v1_ok) {
        out->version = 1;
        return 0;
    }
    char missing[128] = "";
    for (int c = 0; c < JAIL_CG_NCTRL; c++) {
        if (c == JAIL_CG_CPUACCT)
            continue;
        bool in_v2 = out->v2_root[0] && v2_controllers &&
                     (c == JAIL_CG_FREEZER || cg__word_has(v2_controllers, cg__names[c]));
        if (!out->v1_root[c][0] && !in_v2) {
            size_t l = strlen(missing);
            snprintf(missing + l, sizeof missing - l, "%s%s", l ? ", " : "", cg__names[c]);
        }
    }
    return al_error_set(err, -ENOTSUP,
                        "no usable cgroup setup: the controllers memory, pids, cpu (and freezer "
                        "on v1) must all be available on cgroup v2 (%s%s) or each on a cgroup v1 "
                        "hierarchy; missing: %s. Mount them (e.g. mount -t cgroup -o memory "
                        "cgroup /sys/fs/cgroup/memory) or enable them in the v2 root's "
                        "cgroup.subtree_control",
                        out->v2_root[0] ? "found at " : "not mounted",
                        out->v2_root[0] ? out->v2_root : "", missing[0] ? missing : "(mixed)");
}

int jail_cg_layout_detect(struct jail_cg_layout *out, struct al_error *err)
{
    al_autofree char *mi = NULL;
    int rc = al_read_file("/proc/self/mountinfo", 4 << 20, &mi, NULL, err);
    if (rc)
        return rc;
    /* Find the v2 root first to read its controllers. */
    struct jail_cg_layout tmp;
    jail_cg_layout_parse(mi, NULL, &tmp, NULL);
    al_autofree char *ctrls = NULL;
    if (tmp.v2_root[0]) {
        char p[JAIL_CG_PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/cgroup.controllers", tmp.v2_root);
        if (al_read_file(p, 4096, &ctrls, NULL, NULL) != 0)
            ctrls = NULL;
    }
    return jail_cg_layout_parse(mi, ctrls, out, err);
}

/* ---- paths ----------------------------------------------------------------------- */

static bool cg__valid_component(const char *s, size_t n)
{
    if (n == 0 || n > 63 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

static bool cg__valid_rel(const char *rel)
{
    if (!rel || !*rel || rel[0] == '/')
        return false;
    for (const char *p = rel; *p;) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (!cg__valid_component(p, n))
            return false;
        p = s ? s + 1 : p + n;
        if (s && !*p)
            return false; /* trailing slash */
    }
    return true;
}

/* id "" = the parent's own directories. */
static int cg__init(struct jail_cg *cg, const struct jail_cg_layout *layout, const char *parent,
                    const char *id, struct al_error *err)
{
    memset(cg, 0, sizeof *cg);
    cg->layout = *layout;
    if (!cg__valid_rel(parent))
        return al_error_set(err, -EINVAL,
                            "cgroup parent '%s' is invalid: use a relative path of components "
                            "made of letters, digits, '-', '_' and '.' (e.g. \"airlock\")",
                            parent ? parent : "");
    snprintf(cg->parent, sizeof cg->parent, "%s", parent);
    snprintf(cg->id, sizeof cg->id, "%s", id);
    for (int c = 0; c < JAIL_CG_NCTRL; c++) {
        const char *root = layout->version == 2 ? layout->v2_root : layout->v1_root[c];
        if (layout->version == 2 && c == JAIL_CG_CPUACCT)
            root = "";
        if (!root[0])
            continue;
        int n =
            snprintf(cg->dir[c], sizeof cg->dir[c], "%s/%s%s%s", root, parent, *id ? "/" : "", id);
        if (n < 0 || (size_t)n >= sizeof cg->dir[c])
            return al_error_set(err, -ENAMETOOLONG, "cgroup path too long under %s", root);
        bool seen = false;
        for (size_t u = 0; u < cg->n_uniq; u++)
            seen |= strcmp(cg->uniq[u], cg->dir[c]) == 0;
        if (!seen)
            snprintf(cg->uniq[cg->n_uniq++], JAIL_CG_PATH_MAX, "%s", cg->dir[c]);
    }
    return 0;
}

int jail_cg_init(struct jail_cg *cg, const struct jail_cg_layout *layout, const char *parent,
                 const char *id, struct al_error *err)
{
    if (!cg__valid_component(id, strlen(id))) {
        memset(cg, 0, sizeof *cg);
        return al_error_set(err, -EINVAL, "sandbox id '%s' cannot name a cgroup", id);
    }
    return cg__init(cg, layout, parent, id, err);
}

/* The writes planned so far: n of at most max in out. */
struct cg__plan {
    struct jail_cg_write *out;
    size_t max, n;
};

static int cg__add(struct cg__plan *pl, const char *dir, const char *file, const char *value,
                   bool optional)
{
    if (pl->n >= pl->max)
        return -ENOSPC;
    struct jail_cg_write *w = &pl->out[pl->n];
    snprintf(w->path, sizeof w->path, "%s/%s", dir, file);
    snprintf(w->value, sizeof w->value, "%s", value);
    w->optional = optional;
    pl->n++;
    return 0;
}

int jail_cg_plan(const struct jail_cg *cg, const struct jail_cg_limits *lim,
                 struct jail_cg_write *out, size_t max)
{
    struct cg__plan pl = {.out = out, .max = max};
    char v[64];
    int rc = 0;
    const uint64_t period = 100000; /* 100 ms, the kernel default */
    uint64_t quota = lim->cpus > 0 ? (uint64_t)(lim->cpus * (double)period + 0.5) : 0;
    if (quota && quota < 1000)
        quota = 1000; /* the kernel's minimum quota is 1 ms */
    if (cg->layout.version == 2) {
        const char *d = cg->dir[JAIL_CG_MEMORY];
        if (lim->memory_bytes) {
            snprintf(v, sizeof v, "%" PRIu64, lim->memory_bytes);
            rc |= cg__add(&pl, d, "memory.max", v, false);
            /* No swap: a sandbox must not push its memory (tmpfs included) to swap. */
            rc |= cg__add(&pl, d, "memory.swap.max", "0", true);
        }
        snprintf(v, sizeof v, lim->pids ? "%" PRIu32 : "max", lim->pids);
        rc |= cg__add(&pl, cg->dir[JAIL_CG_PIDS], "pids.max", v, false);
        if (quota)
            snprintf(v, sizeof v, "%" PRIu64 " %" PRIu64, quota, period);
        else
            snprintf(v, sizeof v, "max %" PRIu64, period);
        rc |= cg__add(&pl, cg->dir[JAIL_CG_CPU], "cpu.max", v, false);
    } else {
        const char *d = cg->dir[JAIL_CG_MEMORY];
        snprintf(v, sizeof v, "%" PRId64, lim->memory_bytes ? (int64_t)lim->memory_bytes : -1);
        rc |= cg__add(&pl, d, "memory.limit_in_bytes", v, false);
        /* memory+swap = memory: nothing can be swapped out (only where swap accounting
         * exists; the file is absent otherwise). Written after the memory limit, which it
         * must not be below. */
        rc |= cg__add(&pl, d, "memory.memsw.limit_in_bytes", v, true);
        rc |= cg__add(&pl, d, "memory.swappiness", "0", true);
        snprintf(v, sizeof v, lim->pids ? "%" PRIu32 : "max", lim->pids);
        rc |= cg__add(&pl, cg->dir[JAIL_CG_PIDS], "pids.max", v, false);
        snprintf(v, sizeof v, "%" PRIu64, period);
        rc |= cg__add(&pl, cg->dir[JAIL_CG_CPU], "cpu.cfs_period_us", v, false);
        snprintf(v, sizeof v, "%" PRId64, quota ? (int64_t)quota : -1);
        rc |= cg__add(&pl, cg->dir[JAIL_CG_CPU], "cpu.cfs_quota_us", v, false);
    }
    return rc ? -ENOSPC : (int)pl.n;
}

/* ---- file helpers --------------------------------------------------------------- */

static int cg__write(const char *path, const char *value)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, value, strlen(value));
    int e = n < 0 ? errno : 0;
    close(fd);
    return n < 0 ? -e : 0;
}

static int cg__writef(const char *dir, const char *file, const char *value)
{
    char p[JAIL_CG_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return cg__write(p, value);
}

static int cg__read(const char *dir, const char *file, char *buf, size_t len)
{
    char p[JAIL_CG_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, len - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    buf[n] = '\0';
    return (int)n;
}

static int cg__read_u64(const char *dir, const char *file, uint64_t *out)
{
    char buf[64];
    int n = cg__read(dir, file, buf, sizeof buf);
    if (n < 0)
        return n;
    if (strncmp(buf, "max", 3) == 0) {
        *out = UINT64_MAX;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || end == buf)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Value of "key N" in a flat keyed file (memory.stat, memory.events, cpu.stat, ...). */
static int cg__read_key(const char *dir, const char *file, const char *key, uint64_t *out)
{
    char buf[8192];
    int n = cg__read(dir, file, buf, sizeof buf);
    if (n < 0)
        return n;
    size_t kl = strlen(key);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (strncmp(line, key, kl) == 0 && line[kl] == ' ') {
            *out = strtoull(line + kl + 1, NULL, 10);
            return 0;
        }
        line = nl ? nl + 1 : NULL;
    }
    return -ENOENT;
}

static void cg__sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- lifecycle ------------------------------------------------------------------- */

static int cg__mkdir_parent(const struct jail_cg *cg, const char *root, struct al_error *err)
{
    char p[JAIL_CG_PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, cg->parent);
    /* Usually there already: one mkdir, not one per path component. */
    int rc = mkdir(p, 0755) < 0 && errno != EEXIST ? al_mkdir_p(p, 0755) : 0;
    if (rc)
        return al_error_set(err, rc, "cannot create cgroup %s: %s", p, strerror(-rc));
    if (cg->layout.version == 2) {
        /* Enable the controllers on the way down: root, each parent component. */
        char walk[JAIL_CG_PATH_MAX];
        snprintf(walk, sizeof walk, "%s", root);
        const char *rel = cg->parent;
        for (;;) {
            rc = cg__writef(walk, "cgroup.subtree_control", "+memory +pids +cpu");
            if (rc && rc != -ENOENT)
                return al_error_set(err, rc,
                                    "cannot enable memory, pids and cpu in %s/cgroup.subtree_"
                                    "control: %s (a cgroup with processes of its own cannot "
                                    "delegate controllers; choose another cgroup parent)",
                                    walk, strerror(-rc));
            if (!*rel)
                break;
            const char *s = strchr(rel, '/');
            size_t n = s ? (size_t)(s - rel) : strlen(rel);
            size_t l = strlen(walk);
            snprintf(walk + l, sizeof walk - l, "/%.*s", (int)n, rel);
            rel = s ? s + 1 : rel + n;
        }
    }
    return 0;
}

static int cg__apply(const struct jail_cg *cg, const struct jail_cg_limits *lim,
                     struct al_error *err)
{
    struct jail_cg_write w[JAIL_CG_MAX_WRITES];
    int n = jail_cg_plan(cg, lim, w, JAIL_CG_MAX_WRITES);
    if (n < 0)
        return al_error_set(err, n, "internal error: cgroup plan too long");
    for (int i = 0; i < n; i++) {
        int rc = cg__write(w[i].path, w[i].value);
        if (rc == -ENOENT && w[i].optional)
            continue;
        if (rc && w[i].optional && rc == -EINVAL)
            continue;
        if (rc)
            return al_error_set(err, rc, "cannot write '%s' to %s: %s", w[i].value, w[i].path,
                                strerror(-rc));
    }
    return 0;
}

bool jail_cg_limits_equal(const struct jail_cg_limits *a, const struct jail_cg_limits *b)
{
    return a->memory_bytes == b->memory_bytes && a->pids == b->pids && a->cpus == b->cpus;
}

int jail_cg_relimit(const struct jail_cg *cg, const struct jail_cg_limits *lim,
                    const struct jail_cg_limits *prev, struct al_error *err)
{
    if (prev && jail_cg_limits_equal(lim, prev))
        return 0;
    /* v1 refuses a memory limit above memory+swap: lift that first (the plan sets both). */
    if (cg->layout.version == 1 && cg->dir[JAIL_CG_MEMORY][0])
        cg__writef(cg->dir[JAIL_CG_MEMORY], "memory.memsw.limit_in_bytes", "-1");
    return cg__apply(cg, lim, err);
}

int jail_cg_create(struct jail_cg *cg, const struct jail_cg_limits *lim, struct al_error *err)
{
    int rc;
    for (size_t u = 0; u < cg->n_uniq; u++) {
        /* v1: the parent is nearly always there already; one mkdir, not two. (v2 enables
         * the controllers on the way down each time.) */
        if (cg->layout.version == 1 && mkdir(cg->uniq[u], 0755) == 0)
            continue;
        /* The parent is the directory above the sandbox's. */
        char root[JAIL_CG_PATH_MAX];
        snprintf(root, sizeof root, "%s", cg->uniq[u]);
        size_t cut = strlen(root) - strlen(cg->parent) - strlen(cg->id) - 2;
        root[cut] = '\0';
        rc = cg__mkdir_parent(cg, root, err);
        if (rc)
            goto fail;
        if (mkdir(cg->uniq[u], 0755) < 0 && errno != EEXIST) {
            rc = -errno;
            al_error_set(err, rc, "cannot create cgroup %s: %s", cg->uniq[u], strerror(errno));
            goto fail;
        }
    }
    if ((rc = cg__apply(cg, lim, err)))
        goto fail;
    return 0;
fail:
    jail_cg_destroy(cg, NULL);
    return rc;
}

int jail_cg_attach(const struct jail_cg *cg, pid_t pid, struct al_error *err)
{
    /* The first write waits for an RCU grace period (the global threadgroup rwsem's
     * rcu_sync; milliseconds on a busy host) unless a migration happened moments ago or
     * the hierarchy is mounted with favordynmods; the others are then cheap. */
    for (size_t u = 0; u < cg->n_uniq; u++) {
        int rc = al_confine_join_cgroup(cg->uniq[u], pid, err);
        if (rc)
            return rc;
    }
    return 0;
}

bool jail_cg_is_frozen(const struct jail_cg *cg)
{
    char buf[256];
    if (cg->layout.version == 2) {
        uint64_t v = 0;
        if (cg__read_key(cg->dir[JAIL_CG_MEMORY], "cgroup.events", "frozen", &v) == 0 && v)
            return true;
        return cg__read(cg->dir[JAIL_CG_MEMORY], "cgroup.freeze", buf, sizeof buf) > 0 &&
               buf[0] == '1';
    }
    if (cg__read(cg->dir[JAIL_CG_FREEZER], "freezer.state", buf, sizeof buf) < 0)
        return false;
    return strncmp(buf, "FROZEN", 6) == 0 || strncmp(buf, "FREEZING", 8) == 0;
}

int jail_cg_freeze(const struct jail_cg *cg, bool frozen, unsigned timeout_ms, struct al_error *err)
{
    const char *dir = cg->layout.version == 2 ? cg->dir[JAIL_CG_MEMORY] : cg->dir[JAIL_CG_FREEZER];
    int rc = cg->layout.version == 2
                 ? cg__writef(dir, "cgroup.freeze", frozen ? "1" : "0")
                 : cg__writef(dir, "freezer.state", frozen ? "FROZEN" : "THAWED");
    if (rc)
        return al_error_set(err, rc, "cannot %s cgroup %s: %s", frozen ? "freeze" : "thaw", dir,
                            strerror(-rc));
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (unsigned delay = 0;; delay = delay ? AL_MIN(delay * 2, 20u) : 1) {
        char buf[64];
        bool done;
        if (cg->layout.version == 2) {
            uint64_t v = 0;
            cg__read_key(dir, "cgroup.events", "frozen", &v);
            done = (v != 0) == frozen;
        } else {
            if (cg__read(dir, "freezer.state", buf, sizeof buf) < 0)
                buf[0] = '\0';
            done = frozen ? strncmp(buf, "FROZEN", 6) == 0 : strncmp(buf, "THAWED", 6) == 0;
        }
        if (done)
            return 0;
        if (al_now_ns() > deadline)
            return al_error_set(err, -ETIMEDOUT, "cgroup %s did not become %s within %u ms", dir,
                                frozen ? "frozen" : "thawed", timeout_ms);
        if (delay)
            cg__sleep_ms(delay);
        else
            sched_yield();
    }
}

/* Calls fn for every pid in dir/cgroup.procs. */
static int cg__each_pid(const char *dir, void (*fn)(pid_t pid, void *arg), void *arg)
{
    char p[JAIL_CG_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/cgroup.procs", dir);
    al_autofclose FILE *f = fopen(p, "re");
    if (!f)
        return -errno;
    int n = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        if (fn)
            fn((pid_t)pid, arg);
        n++;
    }
    return n;
}

static void cg__kill_one(pid_t pid, void *arg)
{
    (void)arg;
    kill(pid, SIGKILL);
}

int jail_cg_kill_all(const struct jail_cg *cg, struct al_error *err)
{
    if (cg->layout.version == 2) {
        int rc = cg__writef(cg->dir[JAIL_CG_MEMORY], "cgroup.kill", "1");
        if (rc == 0 || rc == -ENOENT)
            return 0;
        /* Kernels before 5.14 have no cgroup.kill: fall through to freeze-and-kill. */
    }
    /* Freeze first so nothing forks while we walk the list; killed tasks of a frozen
     * cgroup die once thawed. */
    const char *dir = cg->layout.version == 2 ? cg->dir[JAIL_CG_MEMORY] : cg->dir[JAIL_CG_PIDS];
    struct al_error ferr;
    bool frozen = jail_cg_freeze(cg, true, 2000, &ferr) == 0;
    int n = cg__each_pid(dir, cg__kill_one, NULL);
    /* Also the memory hierarchy, in case a process was moved between v1 hierarchies. */
    if (cg->layout.version == 1 && n >= 0)
        cg__each_pid(cg->dir[JAIL_CG_MEMORY], cg__kill_one, NULL);
    int rc = jail_cg_freeze(cg, false, 2000, err);
    if (n < 0 && n != -ENOENT)
        return al_error_set(err, n, "cannot list processes of cgroup %s: %s", dir, strerror(-n));
    if (rc && frozen)
        return rc;
    return n < 0 ? 0 : n;
}

int jail_cg_nprocs(const struct jail_cg *cg)
{
    int total = 0;
    bool any = false;
    for (size_t u = 0; u < cg->n_uniq; u++) {
        int n = cg__each_pid(cg->uniq[u], NULL, NULL);
        if (n == -ENOENT)
            continue;
        if (n < 0)
            return n;
        any = true;
        total = AL_MAX(total, n);
    }
    (void)any;
    return total;
}

bool jail_cg_exists(const struct jail_cg *cg)
{
    for (size_t u = 0; u < cg->n_uniq; u++) {
        struct stat st;
        if (stat(cg->uniq[u], &st) == 0)
            return true;
    }
    return false;
}

int jail_cg_destroy(const struct jail_cg *cg, struct al_error *err)
{
    int first = 0;
    for (size_t u = 0; u < cg->n_uniq; u++) {
        /* rmdir can briefly fail with EBUSY while the last task is being released. */
        for (int attempt = 0;; attempt++) {
            if (rmdir(cg->uniq[u]) == 0 || errno == ENOENT)
                break;
            if (errno != EBUSY || attempt >= 200) {
                int e = errno;
                if (!first)
                    first = al_error_set(err, -e, "cannot remove cgroup %s: %s", cg->uniq[u],
                                         strerror(e));
                break;
            }
            cg__sleep_ms(5);
        }
    }
    return first;
}

int jail_cg_stats(const struct jail_cg *cg, struct jail_cg_stats *st)
{
    memset(st, 0, sizeof *st);
    const char *m = cg->dir[JAIL_CG_MEMORY];
    const char *p = cg->dir[JAIL_CG_PIDS];
    if (cg->layout.version == 2) {
        cg__read_u64(m, "memory.current", &st->memory_bytes);
        cg__read_u64(m, "memory.peak", &st->memory_peak_bytes);
        cg__read_u64(m, "memory.max", &st->memory_limit_bytes);
        cg__read_key(m, "memory.events", "oom_kill", &st->oom_kills);
        uint64_t us = 0;
        if (cg__read_key(cg->dir[JAIL_CG_CPU], "cpu.stat", "usage_usec", &us) == 0)
            st->cpu_usage_ns = us * 1000;
    } else {
        cg__read_u64(m, "memory.usage_in_bytes", &st->memory_bytes);
        cg__read_u64(m, "memory.max_usage_in_bytes", &st->memory_peak_bytes);
        cg__read_u64(m, "memory.limit_in_bytes", &st->memory_limit_bytes);
        cg__read_key(m, "memory.oom_control", "oom_kill", &st->oom_kills);
        if (cg->dir[JAIL_CG_CPUACCT][0])
            cg__read_u64(cg->dir[JAIL_CG_CPUACCT], "cpuacct.usage", &st->cpu_usage_ns);
    }
    cg__read_u64(p, "pids.current", &st->pids);
    cg__read_u64(p, "pids.max", &st->pids_limit);
    return 0;
}

int jail_cg_list(const struct jail_cg_layout *layout, const char *parent,
                 int (*fn)(const char *id, void *arg), void *arg)
{
    if (!cg__valid_rel(parent))
        return -EINVAL;
    /* The union over hierarchies, deduplicated with a small sorted list. */
    char **seen = NULL;
    size_t n_seen = 0;
    int rc = 0;
    for (int c = 0; c < JAIL_CG_NCTRL && rc == 0; c++) {
        const char *root =
            layout->version == 2 ? (c == 0 ? layout->v2_root : "") : layout->v1_root[c];
        if (!root[0])
            continue;
        char p[JAIL_CG_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", root, parent);
        DIR *d = opendir(p);
        if (!d)
            continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_type != DT_DIR || e->d_name[0] == '.')
                continue;
            bool dup = false;
            for (size_t i = 0; i < n_seen && !dup; i++)
                dup = strcmp(seen[i], e->d_name) == 0;
            if (dup)
                continue;
            char **ns = realloc(seen, (n_seen + 1) * sizeof *seen);
            if (!ns) {
                rc = -ENOMEM;
                break;
            }
            seen = ns;
            seen[n_seen] = strdup(e->d_name);
            if (!seen[n_seen]) {
                rc = -ENOMEM;
                break;
            }
            n_seen++;
        }
        closedir(d);
    }
    for (size_t i = 0; i < n_seen; i++) {
        if (rc == 0 && fn(seen[i], arg))
            rc = 1;
        free(seen[i]);
    }
    free(seen);
    return rc < 0 ? rc : 0;
}

void jail_cg_remove_parent(const struct jail_cg_layout *layout, const char *parent)
{
    if (!cg__valid_rel(parent))
        return;
    for (int c = 0; c < JAIL_CG_NCTRL; c++) {
        const char *root =
            layout->version == 2 ? (c == 0 ? layout->v2_root : "") : layout->v1_root[c];
        if (!root[0])
            continue;
        /* Remove the deepest component first, then its ancestors, as long as empty. */
        char rel[128];
        snprintf(rel, sizeof rel, "%s", parent);
        for (;;) {
            char p[JAIL_CG_PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", root, rel);
            if (rmdir(p) < 0)
                break;
            char *s = strrchr(rel, '/');
            if (!s)
                break;
            *s = '\0';
        }
    }
}

/* ---- the parent: what all sandboxes share ------------------------------------------- */

int jail_cg_parent_limit(const struct jail_cg_layout *layout, const char *parent,
                         const struct jail_cg_limits *lim, struct al_error *err)
{
    struct jail_cg cg;
    int rc = cg__init(&cg, layout, parent, "", err);
    if (rc)
        return rc;
    for (size_t u = 0; u < cg.n_uniq; u++) {
        char root[JAIL_CG_PATH_MAX];
        snprintf(root, sizeof root, "%s", cg.uniq[u]);
        root[strlen(root) - strlen(parent) - 1] = '\0';
        if ((rc = cg__mkdir_parent(&cg, root, err)))
            return rc;
    }
    return jail_cg_relimit(&cg, lim, NULL, err);
}

int jail_cg_parent_usage(const struct jail_cg_layout *layout, const char *parent,
                         struct jail_cg_stats *st, struct al_error *err)
{
    struct jail_cg cg;
    int rc = cg__init(&cg, layout, parent, "", err);
    if (rc)
        return rc;
    return jail_cg_stats(&cg, st);
}

int jail_cg_parent_room(const struct jail_cg *cg, uint32_t pids, struct al_error *err)
{
    char dir[JAIL_CG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cg->dir[JAIL_CG_PIDS]);
    char *slash = strrchr(dir, '/');
    if (!slash || !cg->id[0])
        return 0;
    *slash = '\0';
    uint64_t max = 0, cur = 0;
    if (cg__read_u64(dir, "pids.max", &max) || max == UINT64_MAX ||
        cg__read_u64(dir, "pids.current", &cur) || cur + pids <= max)
        return 0;
    return al_error_set(err, -EAGAIN,
                        "the sandboxes together are at their process limit: cgroup %s has %" PRIu64
                        " of %" PRIu64 " processes (its pids.max, from airlockd's "
                        "sandboxes.total_pids) and a sandbox needs %" PRIu32
                        " to start; try again when processes of other sandboxes have exited, or "
                        "raise the limit (docs/operations.md, \"Host limits\")",
                        dir, cur, max, pids);
}
