/* Unit tests: vmm/jail/fscopy, the copy of a jail sandbox's writable layer (snapshots). Run
 * as root (owners are set), on plain directories of the host. */
#include "al_test.h"
#include "common/util.h"
#include "vmm/jail/fscopy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define BASE_A 3000000u /* the source's id range */
#define BASE_B 4000000u /* the destination's */

static char dir[256];
static int src, dst;

static void setup(void)
{
    al_test_tmpdir(dir, sizeof dir, "fscopy");
    char p[300];
    snprintf(p, sizeof p, "%s/src", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    src = open(p, O_RDONLY | O_DIRECTORY);
    snprintf(p, sizeof p, "%s/dst", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    dst = open(p, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(src, 0);
    ck_assert_int_ge(dst, 0);
}

static void teardown(void)
{
    close(src);
    close(dst);
    ck_assert_int_eq(al_rmtree(dir), 0);
}

static void put(int at, const char *name, const char *text, uid_t owner)
{
    int fd = openat(at, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(al_write_all(fd, text, strlen(text)), 0);
    ck_assert_int_eq(fchown(fd, owner, owner), 0);
    close(fd);
}

static void own(int at, const char *name, uid_t owner)
{
    ck_assert_int_eq(fchownat(at, name, owner, owner, AT_SYMLINK_NOFOLLOW), 0);
}

static struct jail_fscopy_opts opts(void)
{
    return (struct jail_fscopy_opts){
        .src_id_base = BASE_A, .dst_id_base = BASE_B, .id_count = 65536};
}

START_TEST(copies_types_owners_and_modes_shifted)
{
    ck_assert_int_eq(mkdirat(src, "d", 0750), 0);
    own(src, "d", BASE_A + 1000);
    put(src, "d/f", "hello", BASE_A + 1000);
    ck_assert_int_eq(fchmodat(src, "d/f", 04755, 0), 0);
    ck_assert_int_eq(symlinkat("/etc/passwd", src, "d/l"), 0);
    own(src, "d/l", BASE_A + 1000);
    ck_assert_int_eq(linkat(src, "d/f", src, "d/h", 0), 0);
    ck_assert_int_eq(mkfifoat(src, "d/p", 0600), 0);
    own(src, "d/p", BASE_A);
    ck_assert_int_eq(mknodat(src, "wh", S_IFCHR | 0600, makedev(0, 0)), 0);
    own(src, "wh", BASE_A);
    ck_assert_int_eq(mknodat(src, "null", S_IFCHR | 0600, makedev(1, 3)), 0);
    own(src, "null", BASE_A);
    int fd = openat(src, "d", O_RDONLY | O_DIRECTORY);
    ck_assert_int_eq(fsetxattr(fd, "user.overlay.opaque", "y", 1, 0), 0);
    close(fd);
    put(src, "skipme", "x", BASE_A);
    /* A sparse file: 64 MiB of hole and one byte. */
    fd = openat(src, "sparse", O_WRONLY | O_CREAT, 0644);
    ck_assert_int_eq(pwrite(fd, "z", 1, 64 << 20), 1);
    ck_assert_int_eq(fchown(fd, BASE_A, BASE_A), 0);
    close(fd);

    static const char *const skip[] = {"skipme", NULL};
    struct jail_fscopy_opts o = opts();
    o.skip = skip;
    struct jail_fscopy_stats st;
    struct al_error e = {0};
    ck_assert_msg(jail_fscopy(src, dst, &o, &st, &e) == 0, "%s", al_error_str(&e));

    struct stat s;
    ck_assert_int_eq(fstatat(dst, "d", &s, AT_SYMLINK_NOFOLLOW), 0);
    ck_assert(S_ISDIR(s.st_mode));
    ck_assert_uint_eq(s.st_mode & 07777, 0750);
    ck_assert_uint_eq(s.st_uid, BASE_B + 1000);
    ck_assert_int_eq(fstatat(dst, "d/f", &s, AT_SYMLINK_NOFOLLOW), 0);
    ck_assert_uint_eq(s.st_mode & 07777, 04755); /* setuid survives the chown */
    ck_assert_uint_eq(s.st_uid, BASE_B + 1000);
    ck_assert_uint_eq(s.st_nlink, 2); /* d/h is a link to it again */
    struct stat h;
    ck_assert_int_eq(fstatat(dst, "d/h", &h, AT_SYMLINK_NOFOLLOW), 0);
    ck_assert_uint_eq(h.st_ino, s.st_ino);
    char l[64] = "";
    ck_assert_int_eq(readlinkat(dst, "d/l", l, sizeof l - 1), 11);
    ck_assert_str_eq(l, "/etc/passwd"); /* copied as a link, never followed */
    ck_assert_int_eq(fstatat(dst, "d/l", &s, AT_SYMLINK_NOFOLLOW), 0);
    ck_assert_uint_eq(s.st_uid, BASE_B + 1000);
    ck_assert_int_eq(fstatat(dst, "d/p", &s, AT_SYMLINK_NOFOLLOW), 0);
    ck_assert(S_ISFIFO(s.st_mode));
    ck_assert_int_eq(fstatat(dst, "wh", &s, AT_SYMLINK_NOFOLLOW), 0);
    ck_assert(S_ISCHR(s.st_mode) && s.st_rdev == makedev(0, 0));
    ck_assert_int_eq(fstatat(dst, "null", &s, AT_SYMLINK_NOFOLLOW), -1); /* a real device: not */
    ck_assert_int_eq(fstatat(dst, "skipme", &s, AT_SYMLINK_NOFOLLOW), -1);
    ck_assert_int_eq(fstatat(dst, "sparse", &s, AT_SYMLINK_NOFOLLOW), 0);
    ck_assert_int_eq(s.st_size, (64 << 20) + 1);
    ck_assert_int_lt(s.st_blocks * 512, 1 << 20); /* the hole stayed a hole */
    char v[8] = "";
    fd = openat(dst, "d", O_RDONLY | O_DIRECTORY);
    ck_assert_int_eq(fgetxattr(fd, "user.overlay.opaque", v, sizeof v), 1);
    close(fd);
    ck_assert_uint_eq(st.files, 2);
    ck_assert_uint_eq(st.hardlinks, 1);
    ck_assert_uint_eq(st.whiteouts, 1);
    ck_assert_uint_eq(st.skipped, 2);
    fd = openat(dst, "d/f", O_RDONLY);
    char buf[16] = "";
    ck_assert_int_eq(read(fd, buf, sizeof buf), 5);
    ck_assert_str_eq(buf, "hello");
    close(fd);
}
END_TEST

START_TEST(owner_outside_the_range_is_refused)
{
    put(src, "mine", "x", BASE_A + 5);
    put(src, "host", "x", 0); /* host root's: never the sandbox's */
    struct jail_fscopy_opts o = opts();
    struct jail_fscopy_stats st;
    struct al_error e = {0};
    ck_assert_int_eq(jail_fscopy(src, dst, &o, &st, &e), -ERANGE);
    ck_assert_ptr_nonnull(strstr(al_error_str(&e), "outside the sandbox's ids"));
}
END_TEST

START_TEST(byte_bound_and_depth_bound)
{
    put(src, "big", "0123456789", BASE_A);
    struct jail_fscopy_opts o = opts();
    o.max_bytes = 5;
    struct jail_fscopy_stats st;
    struct al_error e = {0};
    ck_assert_int_eq(jail_fscopy(src, dst, &o, &st, &e), -EFBIG);
    ck_assert_int_eq(al_rmtree_at(dst, "big"), 0);
    ck_assert_int_eq(unlinkat(src, "big", 0), 0);

    char p[8];
    int at = dup(src);
    for (int i = 0; i <= JAIL_FSCOPY_MAX_DEPTH; i++) {
        snprintf(p, sizeof p, "d");
        ck_assert_int_eq(mkdirat(at, p, 0755), 0);
        own(at, p, BASE_A);
        int n = openat(at, p, O_RDONLY | O_DIRECTORY);
        close(at);
        at = n;
    }
    close(at);
    o = opts();
    e = (struct al_error){0};
    ck_assert_int_eq(jail_fscopy(src, dst, &o, &st, &e), -ELOOP);
}
END_TEST

START_TEST(merge_keeps_directories_and_replaces_the_rest)
{
    ck_assert_int_eq(mkdirat(src, "etc", 0700), 0);
    own(src, "etc", BASE_A);
    put(src, "etc/new", "from snapshot", BASE_A);
    put(src, "etc/over", "from snapshot", BASE_A);
    ck_assert_int_eq(mkdirat(dst, "etc", 0755), 0);
    own(dst, "etc", BASE_B);
    put(dst, "etc/hostname", "mine", BASE_B);
    ck_assert_int_eq(mkdirat(dst, "etc/over", 0755), 0); /* a directory where a file goes */
    struct jail_fscopy_opts o = opts();
    struct jail_fscopy_stats st;
    struct al_error e = {0};
    /* Without merge an entry in the way is an error. */
    ck_assert_int_eq(jail_fscopy(src, dst, &o, &st, &e), -EEXIST);
    o.merge = true;
    e = (struct al_error){0};
    ck_assert_msg(jail_fscopy(src, dst, &o, &st, &e) == 0, "%s", al_error_str(&e));
    struct stat s;
    ck_assert_int_eq(fstatat(dst, "etc", &s, 0), 0);
    ck_assert_uint_eq(s.st_mode & 07777, 0755); /* the merged directory keeps its own */
    ck_assert_int_eq(fstatat(dst, "etc/hostname", &s, 0), 0);
    ck_assert_int_eq(fstatat(dst, "etc/over", &s, 0), 0);
    ck_assert(S_ISREG(s.st_mode));
    ck_assert_int_eq(fstatat(dst, "etc/new", &s, 0), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jail_fscopy");
    TCase *t = tcase_create("fscopy");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, copies_types_owners_and_modes_shifted);
    tcase_add_test(t, owner_outside_the_range_is_refused);
    tcase_add_test(t, byte_bound_and_depth_bound);
    tcase_add_test(t, merge_keeps_directories_and_replaces_the_rest);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
