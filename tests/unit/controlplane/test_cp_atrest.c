/* tests/unit/controlplane/test_cp_atrest: a state directory encrypted by its file system
 * (controlplane/atrest.c) on a private ext4 image made with its encrypt feature and mounted
 * on a loop device (so it runs as root), and on a tmpfs (a file system that cannot
 * encrypt): what each mode does there, the key file's checks, and that what is written in an
 * encrypted directory is not on the disk in clear while what is written beside it is. */
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
        .dir = dir, .key_path = key, .mode = mode, .setting = "snapshots.encrypt"};
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
    ck_assert_msg(strstr(al_error_str(&err), "or set snapshots.encrypt to auto or off"), "%s",
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
    ck_assert_msg(strstr(al_error_str(&err), "or set snapshots.encrypt to auto or off"), "%s",
                  al_error_str(&err));
    ck_assert_int_eq(access(key, F_OK), -1);
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
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
