/* Unit tests: vmm/jail/cgroup (layout detection from mountinfo text, paths, the plan, the
 * parent's limits and the room check on a fake cgroupfs). The real hierarchies are exercised
 * by the integration tests. */
#include "al_test.h"
#include "vmm/jail/cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* This machine's layout: v1 for everything, an empty v2 hierarchy at .../unified. */
static const char *mi_hybrid =
    "23 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "30 23 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n"
    "32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpuacct\n"
    "33 30 0:29 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "34 30 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "35 30 0:31 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "36 30 0:32 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "37 30 0:33 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n"
    "38 30 0:34 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "39 30 0:35 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
    "40 30 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

static const char *mi_v2 = "25 1 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 "
                           "- cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

/* systemd-style v1 with cpu and cpuacct co-mounted, a path with an escaped space. */
static const char *mi_comounted =
    "31 30 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "34 30 0:30 / /sys/fs/my\\040cg/memory rw - cgroup cgroup rw,memory\n"
    "36 30 0:32 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
    "38 30 0:34 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    "39 30 0:34 /sub /mnt/pids-bind rw - cgroup cgroup rw,pids\n";

START_TEST(hybrid_machine_is_v1)
{
    struct jail_cg_layout l;
    struct al_error e = {0};
    ck_assert_int_eq(jail_cg_layout_parse(mi_hybrid, "", &l, &e), 0);
    ck_assert_int_eq(l.version, 1);
    ck_assert_str_eq(l.v1_root[JAIL_CG_MEMORY], "/sys/fs/cgroup/memory");
    ck_assert_str_eq(l.v1_root[JAIL_CG_PIDS], "/sys/fs/cgroup/pids");
    ck_assert_str_eq(l.v1_root[JAIL_CG_CPU], "/sys/fs/cgroup/cpu");
    ck_assert_str_eq(l.v1_root[JAIL_CG_CPUACCT], "/sys/fs/cgroup/cpuacct");
    ck_assert_str_eq(l.v1_root[JAIL_CG_FREEZER], "/sys/fs/cgroup/freezer");
    ck_assert_str_eq(l.v2_root, "/sys/fs/cgroup/unified");
}
END_TEST

START_TEST(unified_machine_is_v2)
{
    struct jail_cg_layout l;
    struct al_error e = {0};
    ck_assert_int_eq(
        jail_cg_layout_parse(mi_v2, "cpuset cpu io memory hugetlb pids rdma\n", &l, &e), 0);
    ck_assert_int_eq(l.version, 2);
    ck_assert_str_eq(l.v2_root, "/sys/fs/cgroup");
    /* v2 without the memory controller delegated: refused, naming what is missing. */
    ck_assert_int_eq(jail_cg_layout_parse(mi_v2, "cpu pids\n", &l, &e), -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(e.msg, "missing: memory"));
}
END_TEST

START_TEST(comounted_and_escaped)
{
    struct jail_cg_layout l;
    struct al_error e = {0};
    ck_assert_int_eq(jail_cg_layout_parse(mi_comounted, NULL, &l, &e), 0);
    ck_assert_int_eq(l.version, 1);
    ck_assert_str_eq(l.v1_root[JAIL_CG_CPU], "/sys/fs/cgroup/cpu,cpuacct");
    ck_assert_str_eq(l.v1_root[JAIL_CG_CPUACCT], "/sys/fs/cgroup/cpu,cpuacct");
    ck_assert_str_eq(l.v1_root[JAIL_CG_MEMORY], "/sys/fs/my cg/memory");
    ck_assert_str_eq(l.v1_root[JAIL_CG_PIDS], "/sys/fs/cgroup/pids"); /* not the bind */
    struct jail_cg cg;
    ck_assert_int_eq(jail_cg_init(&cg, &l, "airlock", "sbx1", &e), 0);
    ck_assert_uint_eq(cg.n_uniq, 4); /* cpu and cpuacct share a directory */
    ck_assert_str_eq(cg.dir[JAIL_CG_CPUACCT], "/sys/fs/cgroup/cpu,cpuacct/airlock/sbx1");
}
END_TEST

START_TEST(nothing_usable)
{
    struct jail_cg_layout l;
    struct al_error e = {0};
    ck_assert_int_eq(jail_cg_layout_parse("23 1 254:0 / / rw - ext4 /dev/vda rw\n", NULL, &l, &e),
                     -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(e.msg, "memory, pids, cpu"));
    ck_assert_int_eq(
        jail_cg_layout_parse("34 30 0:30 / /c/memory rw - cgroup cgroup rw,memory\n", NULL, &l, &e),
        -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(e.msg, "missing: pids, cpu, freezer"));
}
END_TEST

START_TEST(paths_are_checked)
{
    struct jail_cg_layout l;
    struct al_error e = {0};
    jail_cg_layout_parse(mi_hybrid, "", &l, &e);
    struct jail_cg cg;
    ck_assert_int_eq(jail_cg_init(&cg, &l, "airlock/tests-1", "sbx", &e), 0);
    ck_assert_str_eq(cg.dir[JAIL_CG_MEMORY], "/sys/fs/cgroup/memory/airlock/tests-1/sbx");
    ck_assert_uint_eq(cg.n_uniq, 5);
    ck_assert_int_eq(jail_cg_init(&cg, &l, "../etc", "sbx", &e), -EINVAL);
    ck_assert_int_eq(jail_cg_init(&cg, &l, "/abs", "sbx", &e), -EINVAL);
    ck_assert_int_eq(jail_cg_init(&cg, &l, "a//b", "sbx", &e), -EINVAL);
    ck_assert_int_eq(jail_cg_init(&cg, &l, "a/", "sbx", &e), -EINVAL);
    ck_assert_int_eq(jail_cg_init(&cg, &l, "", "sbx", &e), -EINVAL);
    ck_assert_int_eq(jail_cg_init(&cg, &l, "airlock", "..", &e), -EINVAL);
    ck_assert_int_eq(jail_cg_init(&cg, &l, "airlock", "a/b", &e), -EINVAL);
}
END_TEST

static const char *find(const struct jail_cg_write *w, int n, const char *suffix)
{
    size_t sl = strlen(suffix);
    for (int i = 0; i < n; i++) {
        size_t pl = strlen(w[i].path);
        if (pl >= sl && strcmp(w[i].path + pl - sl, suffix) == 0)
            return w[i].value;
    }
    return NULL;
}

START_TEST(plan_v1)
{
    struct jail_cg_layout l;
    struct al_error e = {0};
    jail_cg_layout_parse(mi_hybrid, "", &l, &e);
    struct jail_cg cg;
    jail_cg_init(&cg, &l, "airlock", "s", &e);
    struct jail_cg_limits lim = {.memory_bytes = 256 << 20, .pids = 100, .cpus = 1.5};
    struct jail_cg_write w[JAIL_CG_MAX_WRITES];
    int n = jail_cg_plan(&cg, &lim, w, JAIL_CG_MAX_WRITES);
    ck_assert_int_gt(n, 0);
    ck_assert_str_eq(find(w, n, "memory/airlock/s/memory.limit_in_bytes"), "268435456");
    ck_assert_str_eq(find(w, n, "memory/airlock/s/memory.memsw.limit_in_bytes"), "268435456");
    ck_assert_str_eq(find(w, n, "pids/airlock/s/pids.max"), "100");
    ck_assert_str_eq(find(w, n, "cpu/airlock/s/cpu.cfs_period_us"), "100000");
    ck_assert_str_eq(find(w, n, "cpu/airlock/s/cpu.cfs_quota_us"), "150000");
    /* memsw must come after the memory limit (it may not be below it). */
    int im = -1, is = -1;
    for (int i = 0; i < n; i++) {
        if (strstr(w[i].path, "memory.limit_in_bytes"))
            im = i;
        if (strstr(w[i].path, "memsw"))
            is = i;
    }
    ck_assert_int_lt(im, is);
    /* No limits: -1 / max. */
    struct jail_cg_limits none = {0};
    n = jail_cg_plan(&cg, &none, w, JAIL_CG_MAX_WRITES);
    ck_assert_str_eq(find(w, n, "memory.limit_in_bytes"), "-1");
    ck_assert_str_eq(find(w, n, "pids.max"), "max");
    ck_assert_str_eq(find(w, n, "cpu.cfs_quota_us"), "-1");
    /* A tiny CPU share is raised to the kernel's 1 ms minimum. */
    struct jail_cg_limits tiny = {.cpus = 0.001};
    n = jail_cg_plan(&cg, &tiny, w, JAIL_CG_MAX_WRITES);
    ck_assert_str_eq(find(w, n, "cpu.cfs_quota_us"), "1000");
    ck_assert_int_eq(jail_cg_plan(&cg, &lim, w, 2), -ENOSPC);
}
END_TEST

START_TEST(plan_v2)
{
    struct jail_cg_layout l;
    struct al_error e = {0};
    jail_cg_layout_parse(mi_v2, "memory pids cpu", &l, &e);
    struct jail_cg cg;
    ck_assert_int_eq(jail_cg_init(&cg, &l, "airlock", "s", &e), 0);
    ck_assert_uint_eq(cg.n_uniq, 1);
    ck_assert_str_eq(cg.dir[JAIL_CG_MEMORY], "/sys/fs/cgroup/airlock/s");
    ck_assert_str_eq(cg.dir[JAIL_CG_FREEZER], "/sys/fs/cgroup/airlock/s");
    ck_assert_str_eq(cg.dir[JAIL_CG_CPUACCT], "");
    struct jail_cg_limits lim = {.memory_bytes = 1 << 30, .pids = 512, .cpus = 2};
    struct jail_cg_write w[JAIL_CG_MAX_WRITES];
    int n = jail_cg_plan(&cg, &lim, w, JAIL_CG_MAX_WRITES);
    ck_assert_str_eq(find(w, n, "/airlock/s/memory.max"), "1073741824");
    ck_assert_str_eq(find(w, n, "/airlock/s/memory.swap.max"), "0");
    ck_assert_str_eq(find(w, n, "/airlock/s/pids.max"), "512");
    ck_assert_str_eq(find(w, n, "/airlock/s/cpu.max"), "200000 100000");
    struct jail_cg_limits none = {0};
    n = jail_cg_plan(&cg, &none, w, JAIL_CG_MAX_WRITES);
    ck_assert_str_eq(find(w, n, "cpu.max"), "max 100000");
    ck_assert_ptr_null(find(w, n, "memory.max"));
}
END_TEST

static void put(const char *dir, const char *file, const char *text)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static const char *get(const char *dir, const char *file)
{
    static char buf[128];
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* A v2 hierarchy made of plain files: the parent gets the limits of all sandboxes, and a
 * sandbox finds no room when fewer than the processes it needs are left under them. */
START_TEST(parent_limits_and_room)
{
    char root[64];
    al_test_tmpdir(root, sizeof root, "jail-cg");
    struct jail_cg_layout l = {.version = 2};
    snprintf(l.v2_root, sizeof l.v2_root, "%s", root);
    char par[300];
    snprintf(par, sizeof par, "%s/airlock", root);
    ck_assert_int_eq(mkdir(par, 0755), 0);
    const char *files[] = {"memory.max", "memory.swap.max", "pids.max", "cpu.max"};
    for (size_t i = 0; i < 4; i++)
        put(par, files[i], ""); /* (plain files: written without truncation) */
    struct jail_cg_limits lim = {.memory_bytes = 1 << 30, .pids = 100};
    struct al_error err = {0};
    ck_assert_int_eq(jail_cg_parent_limit(&l, "airlock", &lim, &err), 0);
    ck_assert_str_eq(get(par, "pids.max"), "100");
    ck_assert_str_eq(get(par, "memory.max"), "1073741824");
    ck_assert_str_eq(get(par, "cpu.max"), "max 100000");
    ck_assert_int_eq(jail_cg_parent_limit(&l, "../x", &lim, &err), -EINVAL);

    struct jail_cg cg;
    ck_assert_int_eq(jail_cg_init(&cg, &l, "airlock", "sb1", NULL), 0);
    put(par, "pids.current", "95\n");
    ck_assert_int_eq(jail_cg_parent_room(&cg, 5, &err), 0);
    ck_assert_int_eq(jail_cg_parent_room(&cg, JAIL_CG_START_PIDS, &err), -EAGAIN);
    ck_assert_ptr_nonnull(strstr(err.msg, "at their process limit"));
    ck_assert_ptr_nonnull(strstr(err.msg, "has 95 of 100 processes"));
    ck_assert_ptr_nonnull(strstr(err.msg, "sandboxes.total_pids"));
    put(par, "pids.max", "max"); /* no limit: the kernel decides */
    ck_assert_int_eq(jail_cg_parent_room(&cg, JAIL_CG_START_PIDS, &err), 0);

    ck_assert_int_eq(al_test_rmtree(root), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jail_cgroup");
    TCase *t = tcase_create("cgroup");
    tcase_add_test(t, hybrid_machine_is_v1);
    tcase_add_test(t, unified_machine_is_v2);
    tcase_add_test(t, comounted_and_escaped);
    tcase_add_test(t, nothing_usable);
    tcase_add_test(t, paths_are_checked);
    tcase_add_test(t, plan_v1);
    tcase_add_test(t, plan_v2);
    tcase_add_test(t, parent_limits_and_room);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
