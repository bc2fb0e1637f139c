/* tests/unit/controlplane/templates/test_layerdiff: a RUN step's writable layer as an image
 * layer (controlplane/templates/layerdiff.c), read back with the tree's tar reader: whiteouts
 * and opaque directories, hard links, owners shifted back from the sandbox's ids, user.*
 * attributes without overlayfs' own, the build sandbox's CA left out of the trust directory
 * and its block out of the system bundle, the agent's mount point left out, the bounds, and
 * the same changes giving the same layer. Runs as root (device nodes, owners). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "al_test.h"
#include "common/trust.h"
#include "common/util.h"
#include "controlplane/templates/layerdiff.h"
#include "controlplane/templates/tar.h"

#define BASE 200000u /* the build sandbox's first host id */

static char g_dir[256];

/* One entry of the layer as read back. */
struct ent {
    enum tpl_tar_type type;
    char path[512], link[512];
    uint32_t mode;
    uint64_t uid, gid, size;
    char data[256];
    char xattrs[512]; /* "name=value;" ... */
};

static ssize_t rd_fd(void *arg, void *buf, size_t len)
{
    ssize_t n = read(*(int *)arg, buf, len);
    return n < 0 ? -errno : n;
}

/* The entries of the layer at path, in order (at most max). */
static size_t read_layer(const char *path, struct ent *v, size_t max)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    struct tpl_tar *t;
    ck_assert_int_eq(tpl_tar_open(rd_fd, &fd, 4096, &t), 0);
    const struct tpl_tar_entry *e;
    size_t n = 0;
    int rc;
    while ((rc = tpl_tar_next(t, &e)) == 1) {
        ck_assert_uint_lt(n, max);
        struct ent *x = &v[n++];
        memset(x, 0, sizeof *x);
        x->type = e->type;
        snprintf(x->path, sizeof x->path, "%s", e->path);
        snprintf(x->link, sizeof x->link, "%s", e->link);
        x->mode = e->mode;
        x->uid = e->uid;
        x->gid = e->gid;
        x->size = e->size;
        for (size_t i = 0; i < e->n_xattrs; i++) {
            size_t o = strlen(x->xattrs);
            snprintf(x->xattrs + o, sizeof x->xattrs - o, "%s=%.*s;", e->xattrs[i].name,
                     (int)e->xattrs[i].len, e->xattrs[i].value);
        }
        ssize_t k = tpl_tar_read(t, x->data, sizeof x->data - 1);
        ck_assert_int_ge(k, 0);
        x->data[k] = '\0';
    }
    ck_assert_msg(rc == 0, "%s", tpl_tar_error(t));
    tpl_tar_free(t);
    close(fd);
    return n;
}

static const struct ent *find(const struct ent *v, size_t n, const char *path)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].path, path) == 0)
            return &v[i];
    return NULL;
}

static void put(const char *rel, const char *data, uid_t uid)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(data, f);
    fclose(f);
    ck_assert_int_eq(lchown(p, uid, uid), 0);
}

static void mkd(const char *rel, mode_t mode)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, rel);
    ck_assert_int_eq(mkdir(p, mode), 0);
    ck_assert_int_eq(chmod(p, mode), 0);
    ck_assert_int_eq(chown(p, BASE, BASE), 0);
}

static void setup(void)
{
    al_test_tmpdir(g_dir, sizeof g_dir, "layerdiff");
    char p[512];
    snprintf(p, sizeof p, "%s/upper", g_dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    ck_assert_int_eq(chown(p, BASE, BASE), 0);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static int diff(const char *out_name, uint64_t max_entries, uint64_t max_bytes, char *diff_id,
                struct tpl_layer_diff_stats *st, struct al_error *err)
{
    char upper[400], out[400];
    snprintf(upper, sizeof upper, "%s/upper", g_dir);
    snprintf(out, sizeof out, "%s/%s", g_dir, out_name);
    return tpl_layer_diff(&(struct tpl_layer_diff_opts){upper, BASE, out, max_entries, max_bytes},
                          diff_id, st, err);
}

START_TEST(whiteouts_opaque_links_owners)
{
    mkd("upper/etc", 0755);
    put("upper/etc/motd", "hello\n", BASE + 1000);
    char p[512], q[512];
    /* a file the step removed: the overlay's whiteout, a character device 0:0 */
    snprintf(p, sizeof p, "%s/upper/etc/gone", g_dir);
    ck_assert_int_eq(mknod(p, S_IFCHR | 0, makedev(0, 0)), 0);
    /* a directory the step replaced: opaque, keeps only its own entries */
    mkd("upper/srv", 0750);
    snprintf(p, sizeof p, "%s/upper/srv", g_dir);
    ck_assert_int_eq(setxattr(p, "user.overlay.opaque", "y", 1, 0), 0);
    put("upper/srv/new", "n", BASE);
    /* hard links within the layer: the second name (in name order) links to the first */
    put("upper/etc/a-first", "linked\n", BASE);
    snprintf(p, sizeof p, "%s/upper/etc/a-first", g_dir);
    snprintf(q, sizeof q, "%s/upper/etc/z-second", g_dir);
    ck_assert_int_eq(link(p, q), 0);
    /* a symbolic link out of the root: kept as a link, never followed */
    snprintf(p, sizeof p, "%s/upper/etc/shadow-link", g_dir);
    ck_assert_int_eq(symlink("/etc/shadow", p), 0);
    ck_assert_int_eq(lchown(p, BASE, BASE), 0);
    /* attributes: user.* kept, overlayfs' own (user.overlay.*) not */
    snprintf(p, sizeof p, "%s/upper/etc/motd", g_dir);
    ck_assert_int_eq(setxattr(p, "user.note", "kept", 4, 0), 0);
    ck_assert_int_eq(setxattr(p, "user.overlay.origin", "x", 1, 0), 0);
    /* a setuid file of uid 5 */
    put("upper/etc/suid", "s", BASE + 5);
    snprintf(p, sizeof p, "%s/upper/etc/suid", g_dir);
    ck_assert_int_eq(chmod(p, 04755), 0);
    /* a FIFO is kept; a socket cannot be part of a layer */
    snprintf(p, sizeof p, "%s/upper/etc/fifo", g_dir);
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    ck_assert_int_eq(chown(p, BASE, BASE), 0);
    /* the agent's own mount point at the root is not the step's */
    mkd("upper/.airlock", 0755);
    put("upper/.airlock/agent", "x", BASE);

    char id[TPL_DIGEST_LEN + 1];
    struct tpl_layer_diff_stats st;
    struct al_error err = {0};
    ck_assert_msg(diff("layer.tar", 1000, 1 << 20, id, &st, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(strlen(id), TPL_DIGEST_LEN);
    ck_assert_int_eq(strncmp(id, "sha256:", 7), 0);
    struct ent v[64];
    snprintf(p, sizeof p, "%s/layer.tar", g_dir);
    size_t n = read_layer(p, v, 64);

    const struct ent *e = find(v, n, "etc/.wh.gone");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->type, TPL_TAR_REG);
    ck_assert_uint_eq(e->size, 0);
    ck_assert_uint_eq(e->uid, 0);
    ck_assert_ptr_null(find(v, n, "etc/gone"));
    ck_assert_uint_eq(st.whiteouts, 1);

    e = find(v, n, "srv/");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->type, TPL_TAR_DIR);
    ck_assert_uint_eq(e->mode, 0750);
    ck_assert_ptr_null(strstr(e->xattrs, "overlay"));
    e = find(v, n, "srv/.wh..wh..opq");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->type, TPL_TAR_REG);
    ck_assert_uint_eq(st.opaque, 1);
    /* the marker comes before the directory's own entries (applied first, then filled) */
    ck_assert(e < find(v, n, "srv/new"));

    e = find(v, n, "etc/a-first");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->type, TPL_TAR_REG);
    ck_assert_str_eq(e->data, "linked\n");
    e = find(v, n, "etc/z-second");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->type, TPL_TAR_HARDLINK);
    ck_assert_str_eq(e->link, "etc/a-first");
    ck_assert_uint_eq(e->size, 0);

    e = find(v, n, "etc/shadow-link");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->type, TPL_TAR_SYMLINK);
    ck_assert_str_eq(e->link, "/etc/shadow");

    e = find(v, n, "etc/motd");
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->data, "hello\n");
    ck_assert_uint_eq(e->uid, 1000); /* back to the sandbox's own ids */
    ck_assert_uint_eq(e->gid, 1000);
    ck_assert_str_eq(e->xattrs, "user.note=kept;");

    e = find(v, n, "etc/suid");
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->mode, 04755);
    ck_assert_uint_eq(e->uid, 5);

    e = find(v, n, "etc/fifo");
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->type, TPL_TAR_FIFO);

    for (size_t i = 0; i < n; i++)
        ck_assert_msg(strncmp(v[i].path, ".airlock", 8) != 0, "%s is in the layer", v[i].path);
    /* the same changes give the same layer */
    char id2[TPL_DIGEST_LEN + 1];
    struct tpl_layer_diff_stats st2;
    ck_assert_msg(diff("again.tar", 1000, 1 << 20, id2, &st2, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(id, id2);
    ck_assert_uint_eq(st.entries, st2.entries);
    ck_assert_uint_eq(st.files, st2.files);
}
END_TEST

START_TEST(trust_dir_without_the_build_ca)
{
    mkd("upper/etc", 0755);
    mkd("upper/etc/ssl", 0755);
    mkd("upper/etc/ssl/certs", 0755);
    /* the CA file the agent installs: never part of the layer */
    put("upper/etc/ssl/certs/" AL_TRUST_CA_NAME, "-----BEGIN CERTIFICATE-----\nCA\n", BASE);
    /* the system bundle the step changed: its changes stay, the CA's block goes */
    put("upper/etc/ssl/certs/" AL_TRUST_BUNDLE,
        "ROOT-A\n" AL_TRUST_MARK_BEGIN "-----BEGIN CERTIFICATE-----\nCA\n" AL_TRUST_MARK_END
        "ROOT-ADDED-BY-THE-STEP\n",
        BASE);
    /* a file of that name elsewhere is a file like any other */
    mkd("upper/opt", 0755);
    put("upper/opt/" AL_TRUST_CA_NAME, "mine\n", BASE);

    char id[TPL_DIGEST_LEN + 1], p[512];
    struct tpl_layer_diff_stats st;
    struct al_error err = {0};
    ck_assert_msg(diff("layer.tar", 1000, 1 << 20, id, &st, &err) == 0, "%s", err.msg);
    struct ent v[32];
    snprintf(p, sizeof p, "%s/layer.tar", g_dir);
    size_t n = read_layer(p, v, 32);
    ck_assert_ptr_null(find(v, n, "etc/ssl/certs/" AL_TRUST_CA_NAME));
    const struct ent *e = find(v, n, "etc/ssl/certs/" AL_TRUST_BUNDLE);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->data, "ROOT-A\nROOT-ADDED-BY-THE-STEP\n");
    ck_assert_uint_eq(e->size, strlen("ROOT-A\nROOT-ADDED-BY-THE-STEP\n"));
    e = find(v, n, "opt/" AL_TRUST_CA_NAME);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->data, "mine\n");
    ck_assert_uint_ge(st.skipped, 1);
}
END_TEST

START_TEST(bundle_that_was_only_the_ca)
{
    /* An image without a bundle: the agent's copy holds only the CA block, which goes, and
     * with it the file. */
    mkd("upper/etc", 0755);
    mkd("upper/etc/ssl", 0755);
    mkd("upper/etc/ssl/certs", 0755);
    put("upper/etc/ssl/certs/" AL_TRUST_BUNDLE,
        AL_TRUST_MARK_BEGIN "-----BEGIN CERTIFICATE-----\nCA\n" AL_TRUST_MARK_END, BASE);
    char id[TPL_DIGEST_LEN + 1], p[512];
    struct tpl_layer_diff_stats st;
    struct al_error err = {0};
    ck_assert_msg(diff("layer.tar", 1000, 1 << 20, id, &st, &err) == 0, "%s", err.msg);
    struct ent v[16];
    snprintf(p, sizeof p, "%s/layer.tar", g_dir);
    size_t n = read_layer(p, v, 16);
    ck_assert_ptr_null(find(v, n, "etc/ssl/certs/" AL_TRUST_BUNDLE));
    ck_assert_ptr_nonnull(find(v, n, "etc/ssl/certs/"));
    ck_assert_uint_eq(st.files, 0);
}
END_TEST

START_TEST(bounds_and_foreign_owners)
{
    mkd("upper/d", 0755);
    for (int i = 0; i < 5; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "upper/d/f%d", i);
        put(rel, "0123456789", BASE);
    }
    char id[TPL_DIGEST_LEN + 1], p[512];
    struct tpl_layer_diff_stats st;
    struct al_error err = {0};
    ck_assert_int_eq(diff("few.tar", 3, 1 << 20, id, &st, &err), -EFBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 3 entries"));
    snprintf(p, sizeof p, "%s/few.tar", g_dir);
    ck_assert_int_ne(access(p, F_OK), 0); /* nothing half-made is left */
    ck_assert_str_eq(id, "");
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(diff("small.tar", 100, 25, id, &st, &err), -EFBIG);
    ck_assert_ptr_nonnull(strstr(err.msg, "larger than 25 bytes"));
    snprintf(p, sizeof p, "%s/small.tar", g_dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    /* an owner outside the build sandbox's ids: refused, never mapped to some id */
    put("upper/d/host", "h", 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(diff("host.tar", 100, 1 << 20, id, &st, &err), -ERANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "d/host is owned by 0:0"));
    put("upper/d/host", "h", BASE + 65536);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(diff("high.tar", 100, 1 << 20, id, &st, &err), -ERANGE);
    /* the output is made new: an existing file (or a link planted there) is not written */
    put("upper/d/host", "h", BASE);
    snprintf(p, sizeof p, "%s/exists.tar", g_dir);
    put("exists.tar", "", 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(diff("exists.tar", 100, 1 << 20, id, &st, &err), -EEXIST);
    ck_assert_int_eq(diff("ok.tar", 100, 1 << 20, id, &st, &err), 0);
    ck_assert_uint_eq(st.files, 6);
    ck_assert_uint_eq(st.bytes, 51);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("layerdiff");
    TCase *t = tcase_create("layerdiff");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, whiteouts_opaque_links_owners);
    tcase_add_test(t, trust_dir_without_the_build_ca);
    tcase_add_test(t, bundle_that_was_only_the_ca);
    tcase_add_test(t, bounds_and_foreign_owners);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
