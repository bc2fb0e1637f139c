/* tests/unit/controlplane/test_cp_atrest: state directories encrypted by their file system
 * (controlplane/atrest.c) on a private ext4 image made with its encrypt feature and mounted
 * on a loop device (so it runs as root), and on a tmpfs (a file system that cannot
 * encrypt): what each mode does there, the key file's checks, that what is written in an
 * encrypted directory is not on the disk in clear while what is written beside it is, and
 * several directories served with one key (cp_atrest_open_all), each decided on its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_test.h"
#include "common/util.h"
#include "controlplane/atrest.h"
#include "controlplane/config.h"

static char g_tmp[256], g_img[300], g_mnt[300];

static void run(const char *cmd)
{
    int rc = system(cmd);
    ck_assert_msg(rc == 0, "%s: exit %d", cmd, rc);
}

static void setup(void)
{
    al_test_tmpdir(g_tmp, sizeof g_tmp, "atrest");
    snprintf(g_img, sizeof g_img, "%s/disk.img", g_tmp);
    snprintf(g_mnt, sizeof g_mnt, "%s/mnt", g_tmp);
    ck_assert_int_eq(al_mkdir_p(g_mnt, 0700), 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "truncate -s 32M %s && mkfs.ext4 -q -F -O encrypt %s && mount -o loop %s %s", g_img,
             g_img, g_img, g_mnt);
    run(cmd);
}

static void teardown(void)
{
    umount2(g_mnt, MNT_DETACH);
    al_test_rmtree(g_tmp);
}

static int open_at(const char *dir, const char *key, int mode, char *why, size_t wl,
                   struct al_error *err)
{
    struct cp_atrest_opts o = {
        .dir = dir, .key_path = key, .mode = mode, .setting = "at_rest.encrypt"};
    return cp_atrest_open(&o, why, wl, err);
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* Whether the image holds needle (read through the file, after the file system is gone). */
static bool image_has(const char *needle)
{
    char *data = NULL;
    size_t len = 0;
    struct al_error err = {0};
    ck_assert_msg(al_read_file(g_img, 64u << 20, &data, &len, &err) == 0, "%s", al_error_str(&err));
    bool has = memmem(data, len, needle, strlen(needle)) != NULL;
    free(data);
    return has;
}

START_TEST(encrypted_directory_at_rest)
{
    char dir[400], plain[400], key[400], why[1024], p[500];
    struct al_error err = {0};
    snprintf(dir, sizeof dir, "%s/snapshots", g_mnt);
    snprintf(plain, sizeof plain, "%s/plain", g_mnt);
    snprintf(key, sizeof key, "%s/snapshots.key", g_tmp);

    /* A new directory: encrypted, its key made (64 bytes, 0600). */
    ck_assert_msg(open_at(dir, key, CP_TRI_AUTO, why, sizeof why, &err) == 1, "%s",
                  al_error_str(&err));
    struct stat st;
    ck_assert_int_eq(stat(key, &st), 0);
    ck_assert_int_eq(st.st_size, CP_ATREST_KEY_LEN);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    snprintf(p, sizeof p, "%s/snap_x", dir);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/snap_x/canary", dir);
    put(p, "AIRLOCK-SECRET-CANARY-ENCRYPTED-7f3a");
    ck_assert_int_eq(mkdir(plain, 0700), 0);
    snprintf(p, sizeof p, "%s/canary", plain);
    put(p, "AIRLOCK-SECRET-CANARY-PLAIN-7f3a");
    /* Opened again (airlockd's next start): it is, with the same key. */
    ck_assert_msg(open_at(dir, key, CP_TRI_AUTO, why, sizeof why, &err) == 1, "%s",
                  al_error_str(&err));
    /* off does not decrypt-and-forget an encrypted directory: it is unlocked all the same. */
    ck_assert_int_eq(open_at(dir, key, CP_TRI_OFF, why, sizeof why, &err), 1);

    /* The disk: the plain file is there in clear, the encrypted one is not (nor its name). */
    sync();
    ck_assert_int_eq(umount(g_mnt), 0);
    ck_assert(image_has("AIRLOCK-SECRET-CANARY-PLAIN-7f3a"));
    ck_assert(!image_has("AIRLOCK-SECRET-CANARY-ENCRYPTED-7f3a"));
    ck_assert(!image_has("snap_x"));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mount -o loop %s %s", g_img, g_mnt);
    run(cmd);

    /* Mounted again without the key: the names are hidden, the content unreadable. */
    snprintf(p, sizeof p, "%s/snap_x/canary", dir);
    ck_assert_int_eq(access(p, F_OK), -1);

    /* A key file of another size, another key, no key: refused, whatever the mode. */
    char saved[CP_ATREST_KEY_LEN];
    ck_assert_int_eq(al_key_file(key, saved, sizeof saved, false, &err), 0);
    put(key, "short");
    ck_assert_int_eq(open_at(dir, key, CP_TRI_AUTO, why, sizeof why, &err), -EINVAL);
    ck_assert_msg(strstr(al_error_str(&err), "not a key of 64 bytes"), "%s", al_error_str(&err));
    unlink(key);
    ck_assert_int_eq(open_at(dir, key, CP_TRI_OFF, why, sizeof why, &err), -ENOENT);
    ck_assert_msg(strstr(al_error_str(&err), "is encrypted and its key file"), "%s",
                  al_error_str(&err));
    ck_assert_int_eq(al_key_file(key, (char[CP_ATREST_KEY_LEN]){0}, CP_ATREST_KEY_LEN, true, &err),
                     1);
    ck_assert_int_eq(open_at(dir, key, CP_TRI_AUTO, why, sizeof why, &err), -EKEYREJECTED);
    ck_assert_msg(strstr(al_error_str(&err), "is not the key"), "%s", al_error_str(&err));
    ck_assert_int_eq(access(p, F_OK), -1);

    /* Its own key back: readable again. */
    ck_assert_int_eq(al_write_file_atomic(key, saved, sizeof saved, 0600, &err), 0);
    ck_assert_msg(open_at(dir, key, CP_TRI_ON, why, sizeof why, &err) == 1, "%s",
                  al_error_str(&err));
    char *got = NULL;
    size_t gl = 0;
    ck_assert_int_eq(al_read_file(p, 100, &got, &gl, &err), 0);
    ck_assert_str_eq(got, "AIRLOCK-SECRET-CANARY-ENCRYPTED-7f3a");
    free(got);
}
END_TEST

START_TEST(what_cannot_be_encrypted)
{
    char dir[400], key[400], why[1024], p[500];
    struct al_error err = {0};
    snprintf(key, sizeof key, "%s/other.key", g_tmp);

    /* A directory that holds files from before: auto goes on without and says why, on
     * refuses, off is silent about it. */
    snprintf(dir, sizeof dir, "%s/old", g_mnt);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    snprintf(p, sizeof p, "%s/f", dir);
    put(p, "x");
    ck_assert_int_eq(open_at(dir, key, CP_TRI_AUTO, why, sizeof why, &err), 0);
    ck_assert_msg(strstr(why, "holds files made while it was not encrypted"), "%s", why);
    ck_assert_int_eq(open_at(dir, key, CP_TRI_ON, why, sizeof why, &err), -EEXIST);
    ck_assert_msg(strstr(al_error_str(&err), "or set at_rest.encrypt to auto or off"), "%s",
                  al_error_str(&err));
    ck_assert_int_eq(access(key, F_OK), -1); /* no key made for nothing */

    /* off: a new directory stays plain. */
    snprintf(dir, sizeof dir, "%s/off", g_mnt);
    ck_assert_int_eq(open_at(dir, key, CP_TRI_OFF, why, sizeof why, &err), 0);
    ck_assert_str_eq(why, "encryption is off");
    ck_assert_int_eq(access(key, F_OK), -1);

    /* A file system that cannot (tmpfs): auto says why, on refuses; no key is left. */
    char tmpfs[400];
    snprintf(tmpfs, sizeof tmpfs, "%s/tmpfs", g_tmp);
    ck_assert_int_eq(mkdir(tmpfs, 0700), 0);
    ck_assert_int_eq(mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"), 0);
    snprintf(dir, sizeof dir, "%s/snapshots", tmpfs);
    ck_assert_int_eq(open_at(dir, key, CP_TRI_AUTO, why, sizeof why, &err), 0);
    ck_assert_msg(strstr(why, "cannot encrypt (ext4 needs its encrypt feature"), "%s", why);
    ck_assert_int_eq(open_at(dir, key, CP_TRI_ON, why, sizeof why, &err), -EOPNOTSUPP);
    ck_assert_msg(strstr(al_error_str(&err), "or set at_rest.encrypt to auto or off"), "%s",
                  al_error_str(&err));
    ck_assert_int_eq(access(key, F_OK), -1);
    ck_assert_int_eq(umount(tmpfs), 0);
}
END_TEST

/* Several directories, one key: made with the first, each encrypted on its own, unlocked
 * together; one that cannot be (files from before, a tmpfs) is said by its own why. */
START_TEST(several_directories_one_key)
{
    char d[3][400], key[400], p[500], tmpfs[400];
    struct al_error err = {0};
    snprintf(key, sizeof key, "%s/at_rest.key", g_tmp);
    static const char *const names[] = {"s-snapshots", "s-paused", "s-volumes"};
    struct cp_atrest_dir dirs[3];
    for (int i = 0; i < 3; i++) {
        snprintf(d[i], sizeof d[i], "%s/%s", g_mnt, names[i]);
        dirs[i] = (struct cp_atrest_dir){.dir = d[i]};
    }

    /* The key inside one of them, or relative: refused before anything is made. */
    char inside[500];
    snprintf(inside, sizeof inside, "%s/k", d[1]);
    ck_assert_int_eq(cp_atrest_open_all(dirs, 3, inside, CP_TRI_AUTO, "at_rest.encrypt", &err),
                     -EINVAL);
    ck_assert_msg(strstr(al_error_str(&err), "which it encrypts"), "%s", al_error_str(&err));
    ck_assert_int_eq(
        cp_atrest_open_all(dirs, 3, "at_rest.key", CP_TRI_AUTO, "at_rest.encrypt", &err), -EINVAL);
    ck_assert_msg(strstr(al_error_str(&err), "give an absolute path"), "%s", al_error_str(&err));
    ck_assert_int_eq(access(d[0], F_OK), -1);
    ck_assert_int_eq(access(key, F_OK), -1);

    /* The second holds a file from before: on refuses there, naming it; auto encrypts the
     * other two with one key and says why not the second. */
    ck_assert_int_eq(mkdir(d[1], 0700), 0);
    snprintf(p, sizeof p, "%s/old", d[1]);
    put(p, "x");
    ck_assert_int_eq(cp_atrest_open_all(dirs, 3, key, CP_TRI_ON, "at_rest.encrypt", &err), -EEXIST);
    ck_assert_msg(strstr(al_error_str(&err), d[1]) &&
                      strstr(al_error_str(&err), "or set at_rest.encrypt to auto or off"),
                  "%s", al_error_str(&err));
    ck_assert_int_eq(dirs[0].encrypted, 1);
    ck_assert_msg(cp_atrest_open_all(dirs, 3, key, CP_TRI_AUTO, "at_rest.encrypt", &err) == 0, "%s",
                  al_error_str(&err));
    ck_assert_int_eq(dirs[0].encrypted, 1);
    ck_assert_int_eq(dirs[1].encrypted, 0);
    ck_assert_msg(strstr(dirs[1].why, "holds files made while it was not encrypted"), "%s",
                  dirs[1].why);
    ck_assert_int_eq(dirs[2].encrypted, 1);
    ck_assert_int_eq(unlink(p), 0);
    /* Emptied: the next start encrypts it too, with the same key. */
    char saved[CP_ATREST_KEY_LEN], again[CP_ATREST_KEY_LEN];
    ck_assert_int_eq(al_key_file(key, saved, sizeof saved, false, &err), 0);
    ck_assert_msg(cp_atrest_open_all(dirs, 3, key, CP_TRI_ON, "at_rest.encrypt", &err) == 0, "%s",
                  al_error_str(&err));
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(dirs[i].encrypted, 1);
    ck_assert_int_eq(al_key_file(key, again, sizeof again, false, &err), 0);
    ck_assert(memcmp(saved, again, sizeof saved) == 0);

    /* A canary in each: none on the disk, nor their names; remounted, hidden until the one
     * key unlocks all three. */
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/entry_%d", d[i], i);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        snprintf(p, sizeof p, "%s/entry_%d/canary", d[i], i);
        char text[64];
        snprintf(text, sizeof text, "AIRLOCK-MULTI-CANARY-%d-c41d", i);
        put(p, text);
    }
    sync();
    ck_assert_int_eq(umount(g_mnt), 0);
    for (int i = 0; i < 3; i++) {
        char text[64], name[16];
        snprintf(text, sizeof text, "AIRLOCK-MULTI-CANARY-%d-c41d", i);
        snprintf(name, sizeof name, "entry_%d", i);
        ck_assert_msg(!image_has(text), "%s is on the disk", text);
        ck_assert_msg(!image_has(name), "%s is on the disk", name);
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mount -o loop %s %s", g_img, g_mnt);
    run(cmd);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/entry_%d/canary", d[i], i);
        ck_assert_int_eq(access(p, F_OK), -1);
    }
    ck_assert_msg(cp_atrest_open_all(dirs, 3, key, CP_TRI_OFF, "at_rest.encrypt", &err) == 0, "%s",
                  al_error_str(&err));
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(dirs[i].encrypted, 1);
        snprintf(p, sizeof p, "%s/entry_%d/canary", d[i], i);
        char *got = NULL, want[64];
        size_t gl = 0;
        ck_assert_int_eq(al_read_file(p, 100, &got, &gl, &err), 0);
        snprintf(want, sizeof want, "AIRLOCK-MULTI-CANARY-%d-c41d", i);
        ck_assert_str_eq(got, want);
        free(got);
    }

    /* One of them on a file system that cannot: auto goes on and says why for that one;
     * on refuses. */
    snprintf(tmpfs, sizeof tmpfs, "%s/tmpfs-multi", g_tmp);
    ck_assert_int_eq(mkdir(tmpfs, 0700), 0);
    ck_assert_int_eq(mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"), 0);
    snprintf(d[2], sizeof d[2], "%s/volumes", tmpfs);
    ck_assert_msg(cp_atrest_open_all(dirs, 3, key, CP_TRI_AUTO, "at_rest.encrypt", &err) == 0, "%s",
                  al_error_str(&err));
    ck_assert_int_eq(dirs[0].encrypted, 1);
    ck_assert_int_eq(dirs[2].encrypted, 0);
    ck_assert_msg(strstr(dirs[2].why, "cannot encrypt"), "%s", dirs[2].why);
    ck_assert_int_eq(cp_atrest_open_all(dirs, 3, key, CP_TRI_ON, "at_rest.encrypt", &err),
                     -EOPNOTSUPP);
    ck_assert_int_eq(umount(tmpfs), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_atrest");
    TCase *t = tcase_create("atrest");
    /* Unchecked: set up and torn down by the runner itself, so that the image is unmounted
     * and removed also when a test fails (a failed test's process ends at its assert). The
     * tests use different directories of the one image. */
    tcase_add_unchecked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, encrypted_directory_at_rest);
    tcase_add_test(t, what_cannot_be_encrypted);
    tcase_add_test(t, several_directories_one_key);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
