/* Unit tests: vmm/jail id slots, the mount plan, and vmm/logcap (agent log capture). */
#include "al_test.h"
#include "vmm/jail/idmap.h"
#include "vmm/jail/mounts.h"
#include "vmm/logcap.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static void mkdir_tmp(void)
{
    al_test_tmpdir(dir, sizeof dir, "jailparts");
}

static void rm_tmp(void)
{
    ck_assert_int_eq(al_test_rmtree(dir), 0);
}

/* ---- id slots ---------------------------------------------------------------------- */

START_TEST(idmap_ranges_are_checked)
{
    struct al_error e = {0};
    struct jail_idmap_cfg c = {JAIL_ID_BASE_DEFAULT, JAIL_ID_SLOTS_DEFAULT, "/x"};
    ck_assert_int_eq(jail_idmap_check(&c, &e), 0);
    ck_assert_uint_eq(jail_idmap_host_base(&c, 0), 1073741824u);
    ck_assert_uint_eq(jail_idmap_host_base(&c, 3), 1073741824u + 3 * 65536u);
    /* The last id of the last slot stays below 2^32 - 1. */
    struct jail_idmap_cfg too_many = {1u << 31, 1u << 15, "/x"};
    ck_assert_int_eq(jail_idmap_check(&too_many, &e), -ERANGE);
    ck_assert_ptr_nonnull(strstr(e.msg, "past the largest id"));
    struct jail_idmap_cfg low = {1000, 10, "/x"};
    ck_assert_int_eq(jail_idmap_check(&low, &e), -EINVAL);
    ck_assert_ptr_nonnull(strstr(e.msg, "at least 65536"));
    struct jail_idmap_cfg zero = {65536, 0, "/x"};
    ck_assert_int_eq(jail_idmap_check(&zero, &e), -EINVAL);
    /* Deterministic start slot. */
    ck_assert_uint_eq(jail_idmap_start_slot(&c, "abc"), jail_idmap_start_slot(&c, "abc"));
    ck_assert_uint_lt(jail_idmap_start_slot(&c, "abc"), c.slots);
}
END_TEST

START_TEST(idmap_slots_are_distinct_and_released_by_their_holder)
{
    mkdir_tmp();
    char sdir[300];
    snprintf(sdir, sizeof sdir, "%s/slots", dir);
    struct jail_idmap_cfg c = {65536, 64, sdir};
    struct al_error e = {0};
    uint32_t slots[64];
    for (int i = 0; i < 64; i++) {
        char id[16];
        snprintf(id, sizeof id, "sbx%d", i);
        ck_assert_msg(jail_idmap_alloc(&c, id, &slots[i], &e) == 0, "%s", e.msg);
        for (int k = 0; k < i; k++)
            ck_assert_uint_ne(slots[k], slots[i]);
        char holder[64];
        ck_assert_int_eq(jail_idmap_holder(&c, slots[i], holder, sizeof holder), 0);
        ck_assert_str_eq(holder, id);
    }
    uint32_t extra;
    ck_assert_int_eq(jail_idmap_alloc(&c, "one-too-many", &extra, &e), -ENOSPC);
    ck_assert_ptr_nonnull(strstr(e.msg, "--sweep"));
    /* Only the holder can release a slot. */
    ck_assert_int_eq(jail_idmap_release(&c, slots[5], "sbx6"), -EPERM);
    ck_assert_int_eq(jail_idmap_release(&c, slots[5], "sbx5"), 0);
    ck_assert_int_eq(jail_idmap_release(&c, slots[5], "sbx5"), 0); /* idempotent */
    ck_assert_int_eq(jail_idmap_alloc(&c, "newcomer", &extra, &e), 0);
    ck_assert_uint_eq(extra, slots[5]);
    rm_tmp();
}
END_TEST

static int count_slot(uint32_t slot, const char *holder, void *arg)
{
    (void)slot;
    ck_assert_ptr_nonnull(strstr(holder, "sbx"));
    (*(int *)arg)++;
    return 0;
}

START_TEST(idmap_map_records_and_legacy_slot_files)
{
    mkdir_tmp();
    char sdir[300], legacy[400];
    snprintf(sdir, sizeof sdir, "%s/jail/idslots", dir); /* <state>/jail made on demand */
    struct jail_idmap_cfg c = {65536, 8, sdir};
    struct al_error e = {0};
    /* A slot file of an earlier airlock-vmm holds the slot the id hashes to. */
    uint32_t want = jail_idmap_start_slot(&c, "sbxA");
    ck_assert_int_eq(al_mkdir_p(sdir, 0700), 0);
    snprintf(legacy, sizeof legacy, "%s/%u", sdir, want);
    FILE *f = fopen(legacy, "w");
    fputs("old1\n", f);
    fclose(f);
    uint32_t a, b;
    ck_assert_msg(jail_idmap_alloc(&c, "sbxA", &a, &e) == 0, "%s", e.msg);
    ck_assert_uint_ne(a, want);
    ck_assert_msg(jail_idmap_alloc(&c, "sbxB", &b, &e) == 0, "%s", e.msg);
    char h[64];
    ck_assert_int_eq(jail_idmap_holder(&c, want, h, sizeof h), 0);
    ck_assert_str_eq(h, "old1");
    int n = 0;
    ck_assert_int_eq(jail_idmap_foreach(&c, count_slot, &n), 0);
    ck_assert_int_eq(n, 2);
    /* Release clears the record (and the legacy file of its holder). */
    ck_assert_int_eq(jail_idmap_release(&c, a, "sbxA"), 0);
    ck_assert_int_eq(jail_idmap_holder(&c, a, h, sizeof h), -ENOENT);
    ck_assert_int_eq(jail_idmap_release(&c, want, "old1"), 0);
    ck_assert_int_eq(access(legacy, F_OK), -1);
    n = 0;
    ck_assert_int_eq(jail_idmap_foreach(&c, count_slot, &n), 0);
    ck_assert_int_eq(n, 1);
    rm_tmp();
}
END_TEST

START_TEST(idmap_held_slot_is_not_released_while_its_processes_live)
{
    mkdir_tmp();
    char sdir[300];
    snprintf(sdir, sizeof sdir, "%s/jail/idslots", dir);
    struct jail_idmap_cfg c = {65536, 8, sdir};
    struct al_error e = {0};
    uint32_t slot, other;
    int hold = -1;
    ck_assert_msg(jail_idmap_alloc_held(&c, "unpack-1", &slot, &hold, &e) == 0, "%s", e.msg);
    ck_assert_int_ge(hold, 0);
    ck_assert_int_eq(fcntl(hold, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    ck_assert_int_eq(fcntl(hold, F_GETFL) & O_ACCMODE, O_RDONLY);
    /* What a sweep does with a holder it does not know: it is refused, the record stays. */
    ck_assert_int_eq(jail_idmap_release(&c, slot, "unpack-1"), -EBUSY);
    char h[64];
    ck_assert_int_eq(jail_idmap_holder(&c, slot, h, sizeof h), 0);
    ck_assert_str_eq(h, "unpack-1");
    ck_assert_msg(jail_idmap_alloc(&c, "sbx", &other, &e) == 0, "%s", e.msg);
    ck_assert_uint_ne(other, slot);
    /* A child that inherited the hold keeps the slot after the holder let go of it. */
    int go[2];
    ck_assert_int_eq(pipe(go), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(go[1]);
        char b;
        (void)!read(go[0], &b, 1);
        _exit(0);
    }
    close(go[0]);
    close(hold);
    ck_assert_int_eq(jail_idmap_release(&c, slot, "unpack-1"), -EBUSY);
    close(go[1]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    /* Gone with its last process: released, and slots of sandboxes are unaffected. */
    ck_assert_int_eq(jail_idmap_release(&c, slot, "unpack-1"), 0);
    ck_assert_int_eq(jail_idmap_holder(&c, slot, h, sizeof h), -ENOENT);
    ck_assert_int_eq(jail_idmap_release(&c, other, "sbx"), 0);
    rm_tmp();
}
END_TEST

/* ---- mount plan ---------------------------------------------------------------------- */

static const struct jail_mnt_step *step_at(const struct jail_mnt_plan *p, const char *target,
                                           enum jail_mnt_kind kind, size_t *index)
{
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->steps[i].target, target) == 0 && p->steps[i].kind == kind) {
            if (index)
                *index = i;
            return &p->steps[i];
        }
    }
    return NULL;
}

START_TEST(mount_plan_shape)
{
    struct jail_mnt_opts o = {
        .agent = true, .n_binds = 2, .bind_targets = {"/opt/data", "/srv/x/y"}};
    struct jail_mnt_plan p;
    ck_assert_int_eq(jail_mnt_plan_build(&o, &p), 0);
    /* /proc first: masks and read-only binds need it. */
    ck_assert_int_eq(p.steps[0].kind, JAIL_MNT_PROC);
    ck_assert_str_eq(p.steps[0].target, "proc");
    ck_assert(p.steps[0].attr & JAIL_MA_NOSUID);
    ck_assert(p.steps[0].attr & JAIL_MA_NOEXEC);
    static const char *const masked[] = {
        "proc/kcore",   "proc/keys", "proc/timer_list", "proc/sched_debug", "proc/sysrq-trigger",
        "proc/cmdline", NULL};
    for (const char *const *m = masked; *m; m++) {
        const struct jail_mnt_step *s = step_at(&p, *m, JAIL_MNT_MASK_FILE, NULL);
        ck_assert_msg(s != NULL, "%s is not masked", *m);
        ck_assert(s->attr & JAIL_MA_RDONLY);
    }
    ck_assert_ptr_nonnull(step_at(&p, "proc/acpi", JAIL_MNT_MASK_DIR, NULL));
    ck_assert_ptr_nonnull(step_at(&p, "proc/sys", JAIL_MNT_RO_SELF, NULL));
    /* /dev: tmpfs, nodes, devpts, then read-only; no device node is bound after that. */
    size_t idev, iro, ipts, inull;
    ck_assert_ptr_nonnull(step_at(&p, "dev", JAIL_MNT_TMPFS, &idev));
    ck_assert_ptr_nonnull(step_at(&p, "dev", JAIL_MNT_READONLY, &iro));
    ck_assert_ptr_nonnull(step_at(&p, "dev/pts", JAIL_MNT_DEVPTS, &ipts));
    const struct jail_mnt_step *n = step_at(&p, "dev/null", JAIL_MNT_DEV_NODE, &inull);
    ck_assert_ptr_nonnull(n);
    ck_assert_str_eq(n->source, "/dev/null");
    ck_assert(!(n->attr & JAIL_MA_NODEV));
    ck_assert(idev < inull && inull < iro && ipts < iro);
    ck_assert_ptr_nonnull(strstr(p.steps[ipts].data, "newinstance"));
    ck_assert(!(p.steps[ipts].attr & JAIL_MA_NODEV)); /* ptmx and the ptys are devices */
    ck_assert(p.steps[ipts].attr & JAIL_MA_NOSUID);
    ck_assert_ptr_nonnull(strstr(p.steps[ipts].data, "ptmxmode=0666"));
    ck_assert_ptr_nonnull(step_at(&p, "dev/ptmx", JAIL_MNT_SYMLINK, NULL));
    /* Only these device nodes, nothing else from the host's /dev. */
    int nodes = 0;
    for (size_t i = 0; i < p.n; i++)
        nodes += p.steps[i].kind == JAIL_MNT_DEV_NODE;
    ck_assert_int_eq(nodes, 6);
    const struct jail_mnt_step *sys = step_at(&p, "sys", JAIL_MNT_TMPFS, NULL);
    ck_assert_ptr_nonnull(sys);
    ck_assert(sys->attr & JAIL_MA_RDONLY);
    const struct jail_mnt_step *tmp = step_at(&p, "tmp", JAIL_MNT_UPPER_BIND, NULL);
    ck_assert_ptr_nonnull(tmp);
    ck_assert(tmp->attr & JAIL_MA_NOSUID && tmp->attr & JAIL_MA_NODEV);
    ck_assert_ptr_nonnull(step_at(&p, "dev/shm", JAIL_MNT_UPPER_BIND, NULL));
    const struct jail_mnt_step *ag = step_at(&p, ".airlock", JAIL_MNT_FD, NULL);
    ck_assert_ptr_nonnull(ag);
    ck_assert_int_eq(ag->fd_index, 0);
    ck_assert_int_eq(step_at(&p, "opt/data", JAIL_MNT_FD, NULL)->fd_index, 1);
    ck_assert_int_eq(step_at(&p, "srv/x/y", JAIL_MNT_FD, NULL)->fd_index, 2);
    /* Every target is relative to the new root and every mount is nosuid. */
    for (size_t i = 0; i < p.n; i++) {
        ck_assert_msg(p.steps[i].target[0] != '/', "absolute target %s", p.steps[i].target);
        enum jail_mnt_kind k = p.steps[i].kind;
        if (k == JAIL_MNT_PROC || k == JAIL_MNT_TMPFS || k == JAIL_MNT_DEV_NODE ||
            k == JAIL_MNT_DEVPTS || k == JAIL_MNT_UPPER_BIND || k == JAIL_MNT_MASK_FILE)
            ck_assert_msg(p.steps[i].attr & JAIL_MA_NOSUID, "%s is not nosuid", p.steps[i].target);
    }
}
END_TEST

/* The same object as path (device and inode). */
static bool same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

START_TEST(mount_targets_are_resolved_and_made_inside_the_root)
{
    mkdir_tmp();
    char root[300], p[400];
    snprintf(root, sizeof root, "%s/root", dir);
    ck_assert_int_eq(mkdir(root, 0755), 0);
    snprintf(p, sizeof p, "%s/etc", root);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/escape", root);
    ck_assert_int_eq(symlink("/etc", p), 0);
    int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(rfd, 0);
    struct al_error e = {0};

    /* A missing name in the root itself: a file, then a directory. */
    int fd = jail_mnt_resolve(rfd, "null", true, false, &e);
    ck_assert_msg(fd >= 0, "%s", al_error_str(&e));
    snprintf(p, sizeof p, "%s/null", root);
    ck_assert(same_file(fd, p));
    struct stat st;
    ck_assert_int_eq(lstat(p, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    close(fd);
    ck_assert_int_ge(fd = jail_mnt_resolve(rfd, "pts", true, true, &e), 0);
    snprintf(p, sizeof p, "%s/pts", root);
    ck_assert(same_file(fd, p));
    ck_assert_int_eq(lstat(p, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    close(fd);
    /* Found again, not made twice; missing parents are made one by one. */
    ck_assert_int_ge(fd = jail_mnt_resolve(rfd, "null", true, false, &e), 0);
    close(fd);
    ck_assert_int_ge(fd = jail_mnt_resolve(rfd, "a/b/c", true, true, &e), 0);
    snprintf(p, sizeof p, "%s/a/b/c", root);
    ck_assert(same_file(fd, p));
    close(fd);
    /* Without create, a missing name is an error that says which. */
    ck_assert_int_eq(jail_mnt_resolve(rfd, "nope", false, false, &e), -ENOENT);
    ck_assert_ptr_nonnull(strstr(al_error_str(&e), "/nope"));
    /* A symlink in the template cannot lead out of the root: "escape" -> /etc is the
     * root's own etc, where the missing name is made (the host's /etc is not touched). */
    ck_assert_int_ge(fd = jail_mnt_resolve(rfd, "escape/al-jailparts-test", true, false, &e), 0);
    snprintf(p, sizeof p, "%s/etc/al-jailparts-test", root);
    ck_assert(same_file(fd, p));
    close(fd);
    ck_assert_int_ne(access("/etc/al-jailparts-test", F_OK), 0);
    /* ".." of the root is the root. */
    ck_assert_int_ge(fd = jail_mnt_resolve(rfd, "..", true, true, &e), 0);
    ck_assert(same_file(fd, root));
    close(fd);
    close(rfd);
    rm_tmp();
}
END_TEST

START_TEST(mount_plan_rejects_bad_binds)
{
    struct jail_mnt_plan p;
    struct jail_mnt_opts bad = {.agent = true, .n_binds = 1, .bind_targets = {"relative"}};
    ck_assert_int_eq(jail_mnt_plan_build(&bad, &p), -EINVAL);
    struct jail_mnt_opts root = {.agent = true, .n_binds = 1, .bind_targets = {"/"}};
    ck_assert_int_eq(jail_mnt_plan_build(&root, &p), -EINVAL);
}
END_TEST

/* ---- log capture --------------------------------------------------------------------- */

static off_t fsize(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? st.st_size : -1;
}

START_TEST(logcap_rotates_and_bounds_disk)
{
    mkdir_tmp();
    char path[300], old[310];
    snprintf(path, sizeof path, "%s/agent.log", dir);
    snprintf(old, sizeof old, "%s.1", path);
    struct vmm_logcap l = {0};
    struct al_error e = {0};
    uv_loop_t *loop = uv_default_loop();
    /* A huge rate: only the size bound matters here. */
    ck_assert_int_eq(
        vmm_logcap_start(&l, loop,
                         &(struct vmm_logcap_opts){
                             .in_fd = -1, .path = path, .max_bytes = 10000, .rate_bps = 1ull << 40},
                         &e),
        0);
    char chunk[3000];
    memset(chunk, 'a', sizeof chunk);
    uint64_t t = 1000000000ull;
    for (int i = 0; i < 100; i++)
        vmm_logcap_feed(&l, chunk, sizeof chunk, t += 1000);
    vmm_logcap_stop(&l);
    ck_assert_int_le(fsize(path), 10000);
    ck_assert_int_eq(fsize(old), 10000);
    ck_assert_uint_eq(l.total_in, 300000);
    ck_assert_uint_eq(l.total_dropped, 0);
    /* Reopening appends to the current file. */
    ck_assert_int_eq(
        vmm_logcap_start(&l, loop,
                         &(struct vmm_logcap_opts){
                             .in_fd = -1, .path = path, .max_bytes = 10000, .rate_bps = 1ull << 40},
                         &e),
        0);
    off_t before = fsize(path);
    vmm_logcap_feed(&l, "xyz\n", 4, t += 1000);
    vmm_logcap_stop(&l);
    ck_assert_int_eq(fsize(path), before + 4 <= 10000 ? before + 4 : 4);
    rm_tmp();
}
END_TEST

START_TEST(logcap_rate_limit_drops_and_says_so)
{
    mkdir_tmp();
    char path[300];
    snprintf(path, sizeof path, "%s/agent.log", dir);
    struct vmm_logcap l = {0};
    struct al_error e = {0};
    /* 1000 bytes/s, burst = max = 4000 bytes. */
    ck_assert_int_eq(
        vmm_logcap_start(&l, uv_default_loop(),
                         &(struct vmm_logcap_opts){
                             .in_fd = -1, .path = path, .max_bytes = 4000, .rate_bps = 1000},
                         &e),
        0);
    char chunk[1000];
    memset(chunk, 'b', sizeof chunk);
    uint64_t t = 5000000000ull;
    for (int i = 0; i < 10; i++) /* 10 KB at once: 4 KB pass, 6 KB dropped */
        vmm_logcap_feed(&l, chunk, sizeof chunk, t);
    ck_assert_uint_eq(l.total_dropped, 6000);
    t += 2000000000ull; /* 2 s later: 2000 more bytes of budget */
    vmm_logcap_feed(&l, chunk, sizeof chunk, t);
    vmm_logcap_stop(&l);
    char *data = NULL;
    size_t len = 0;
    ck_assert_int_eq(al_read_file(path, 1 << 20, &data, &len, NULL), 0);
    ck_assert_ptr_nonnull(strstr(data, "[airlock-vmm: 6000 bytes of agent output dropped"));
    free(data);
    rm_tmp();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jail_parts");
    TCase *t = tcase_create("parts");
    tcase_add_test(t, idmap_ranges_are_checked);
    tcase_add_test(t, idmap_slots_are_distinct_and_released_by_their_holder);
    tcase_add_test(t, idmap_map_records_and_legacy_slot_files);
    tcase_add_test(t, idmap_held_slot_is_not_released_while_its_processes_live);
    tcase_add_test(t, mount_plan_shape);
    tcase_add_test(t, mount_plan_rejects_bad_binds);
    tcase_add_test(t, mount_targets_are_resolved_and_made_inside_the_root);
    tcase_add_test(t, logcap_rotates_and_bounds_disk);
    tcase_add_test(t, logcap_rate_limit_drops_and_says_so);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
