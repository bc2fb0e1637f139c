/* tests/unit/controlplane/templates/test_templates: image references, the registry allowlist,
 * credentials from E2B's fromImageRegistry, bounds, the tar reader, path cleaning, layer streams
 * and a COPY step's archive applied to a root filesystem. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zlib.h>

#include "al_test.h"
#include "common/util.h"
#include "controlplane/templates/apply.h"
#include "controlplane/templates/copy.h"
#include "controlplane/templates/layer.h"
#include "controlplane/templates/oci.h"
#include "controlplane/templates/tar.h"
#include "controlplane/templates/unpack.h"

static void ref_ok(const char *in, const char *reg, const char *repo, const char *tag,
                   const char *digest)
{
    struct tpl_ref r;
    struct al_error err = {0};
    ck_assert_msg(tpl_ref_parse(in, &r, &err) == 0, "%s: %s", in, err.msg);
    ck_assert_str_eq(r.registry, reg);
    ck_assert_str_eq(r.repository, repo);
    ck_assert_str_eq(r.tag, tag);
    ck_assert_str_eq(r.digest, digest);
}

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

START_TEST(references_as_docker_reads_them)
{
    ref_ok("busybox", "docker.io", "library/busybox", "latest", "");
    ref_ok("python:3.12", "docker.io", "library/python", "3.12", "");
    ref_ok("user/app", "docker.io", "user/app", "latest", "");
    ref_ok("index.docker.io/library/debian:12", "docker.io", "library/debian", "12", "");
    ref_ok("ghcr.io/org/tool:v1.2", "ghcr.io", "org/tool", "v1.2", "");
    ref_ok("localhost/app", "localhost", "app", "latest", "");
    ref_ok("reg.test:5000/team/sub/app", "reg.test:5000", "team/sub/app", "latest", "");
    ref_ok("reg.test:5000/app@sha256:" D64, "reg.test:5000", "app", "", "sha256:" D64);
    ref_ok("app:1@sha256:" D64, "docker.io", "library/app", "1", "sha256:" D64);
    ref_ok("a_b__c-d--e/x.y", "docker.io", "a_b__c-d--e/x.y", "latest", "");
    ref_ok("[::1]:5000/app:2", "[::1]:5000", "app", "2", "");
    ref_ok("[fd00::7]/app", "[fd00::7]", "app", "latest", "");
    ref_ok("Reg.Test/app", "reg.test", "app", "latest", "");
    char out[TPL_REF_MAX];
    struct tpl_ref r;
    tpl_ref_parse("busybox", &r, NULL);
    tpl_ref_format(&r, out, sizeof out);
    ck_assert_str_eq(out, "docker.io/library/busybox:latest");
}
END_TEST

START_TEST(references_refused)
{
    static const char *bad[] = {
        "",
        "app/UPPER",
        "app:",
        "app:-x",
        "app@sha256:abc",
        "app@md5:" D64,
        "reg.test:99999/app",
        "a//b",
        "a/",
        "/a",
        "app:"
        "t234567890123456789012345678901234567890123456789012345678901234567890123"
        "456789012345678901234567890123456789012345678901234567890",
        "a___b",
        "-a",
        "a.",
        "reg.test:5x/app",
        "reg.test:/app",
        "reg.test:0/app",
        "reg_x.test/app",
        "reg~x.test/app",
        "[zz::1]:5000/app",
        "[::1]x/app",
        "[::1/app",
        "reg.test:5000:1/app",
        " reg.test/app",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct tpl_ref r;
        struct al_error err = {0};
        ck_assert_msg(tpl_ref_parse(bad[i], &r, &err) < 0, "accepted '%s'", bad[i]);
        ck_assert(err.msg[0]);
    }
    /* Each says what is wrong with the registry. */
    struct tpl_ref r;
    struct al_error err = {0};
    ck_assert_int_eq(tpl_ref_parse("reg.test:99999/app", &r, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "invalid registry 'reg.test:99999'") &&
                      strstr(err.msg, "port is not a number from 1 to 65535"),
                  "%s", err.msg);
    ck_assert_int_eq(tpl_ref_parse("reg_x.test/app", &r, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "letters, digits, '-' and '.' only"), "%s", err.msg);
    ck_assert_int_eq(tpl_ref_parse("[zz::1]/app", &r, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "IPv6 address in brackets"), "%s", err.msg);
}
END_TEST

START_TEST(registry_allowlist)
{
    const char *allowed[] = {"reg.test:5000", "docker.io"};
    struct tpl_registries r = {.allowed = allowed, .n_allowed = 2};
    struct al_error err = {0};
    ck_assert_int_eq(tpl_registry_check(&r, "docker.io", &err), 0);
    ck_assert_int_eq(tpl_registry_check(&r, "REG.test:5000", &err), 0);
    ck_assert_int_eq(tpl_registry_check(&r, "reg.test", &err), -EACCES);
    ck_assert_ptr_nonnull(strstr(err.msg, "templates.registries"));
    struct tpl_registries none = {0};
    ck_assert_int_eq(tpl_registry_check(&none, "docker.io", &err), -EACCES);
    ck_assert_ptr_nonnull(strstr(err.msg, "(now: none)"));
}
END_TEST

static void url_ok(const char *in, const struct tpl_url *base, bool tls, const char *target,
                   const char *authority, const char *host, const char *path)
{
    struct tpl_url u;
    struct al_error err = {0};
    ck_assert_msg(tpl_url_parse(in, base, &u, &err) == 0, "%s: %s", in, err.msg);
    ck_assert_msg(u.tls == tls, "%s: tls", in);
    ck_assert_str_eq(u.target, target);
    ck_assert_str_eq(u.authority, authority);
    ck_assert_str_eq(u.host, host);
    ck_assert_str_eq(u.path, path);
}

static void url_bad(const char *in, const struct tpl_url *base, int rc, const char *why)
{
    struct tpl_url u;
    struct al_error err = {0};
    ck_assert_int_eq(tpl_url_parse(in, base, &u, &err), rc);
    ck_assert_msg(strstr(err.msg, why), "%s: '%s' does not say '%s'", in, err.msg, why);
}

/* The URLs a registry names: redirects (absolute, "/path", "//host/path") and token realms. */
START_TEST(registry_urls)
{
    url_ok("https://reg.test/v2/app/blobs/x?n=1", NULL, true, "https://reg.test", "reg.test",
           "reg.test", "/v2/app/blobs/x?n=1");
    url_ok("http://Reg.Test:5000", NULL, false, "http://Reg.Test:5000", "Reg.Test:5000", "reg.test",
           "/");
    url_ok("HTTPS://auth.test?service=reg", NULL, true, "https://auth.test", "auth.test",
           "auth.test", "/?service=reg");
    url_ok("https://[2001:DB8::1]:8443/p#frag", NULL, true, "https://[2001:DB8::1]:8443",
           "[2001:DB8::1]:8443", "[2001:db8::1]", "/p");
    struct tpl_url base;
    struct al_error err = {0};
    ck_assert_int_eq(tpl_url_parse("https://reg.test:5000/v2/", NULL, &base, &err), 0);
    url_ok("/v2/app/blobs/y#x", &base, true, "https://reg.test:5000", "reg.test:5000", "reg.test",
           "/v2/app/blobs/y");
    url_ok("//cdn.test/b?sig=1", &base, true, "https://cdn.test", "cdn.test", "cdn.test",
           "/b?sig=1");
    url_ok("http://cdn.test", &base, false, "http://cdn.test", "cdn.test", "cdn.test", "/");

    url_bad("", NULL, -EINVAL, "not an http:// or https:// URL");
    url_bad("ftp://reg.test/x", NULL, -EINVAL, "not an http:// or https:// URL");
    url_bad("reg.test/v2/", NULL, -EINVAL, "not an http:// or https:// URL");
    url_bad("/v2/", NULL, -EINVAL, "not an http:// or https:// URL");
    url_bad("v2/relative", &base, -EINVAL, "nor a path");
    url_bad("*", &base, -EINVAL, "nor a path");
    url_bad("https://user:pw@reg.test/", NULL, -EINVAL, "userinfo");
    url_bad("https://reg.test:0/", NULL, -EINVAL, "port");
    url_bad("https://reg.test:99999/", NULL, -EINVAL, "port");
    url_bad("https://reg.test:/", NULL, -EINVAL, "port");
    url_bad("https:///v2/", NULL, -EINVAL, "no host");
    url_bad("https://2001:db8::1/", NULL, -EINVAL, "IPv6 address in brackets");
    url_bad("https://reg test/", NULL, -EINVAL, "not an http:// or https:// URL");
    url_bad("https://reg.test/a b", NULL, -EINVAL, "not an http:// or https:// URL");
    url_bad("//", &base, -EINVAL, "no host");
    char long_url[TPL_URL_MAX + 32];
    snprintf(long_url, sizeof long_url, "https://reg.test/%0*d", TPL_URL_MAX, 0);
    url_bad(long_url, NULL, -ENAMETOOLONG, "longer than");
    snprintf(long_url, sizeof long_url, "https://reg.test%0*d", TPL_URL_MAX - 20, 0);
    long_url[16] = '/'; /* a path that fits as a URL, with room for nothing more */
    url_ok(long_url, NULL, true, "https://reg.test", "reg.test", "reg.test", long_url + 16);
}
END_TEST

START_TEST(credentials_from_request)
{
    struct tpl_creds *c = NULL;
    struct al_error err = {0};
    json_t *j =
        json_pack("{s:s, s:s, s:s}", "type", "registry", "username", "u", "password", "pw-secret");
    ck_assert_int_eq(tpl_creds_from_json(j, &c, &err), 0);
    ck_assert_ptr_nonnull(c);
    /* The request's copy of the secret is wiped. */
    ck_assert_int_eq(memcmp(json_string_value(json_object_get(j, "password")), "\0\0\0", 3), 0);
    tpl_creds_free(c);
    json_decref(j);
    j = json_pack("{s:s, s:s}", "type", "gcp", "serviceAccountJson", "{\"k\":1}");
    ck_assert_int_eq(tpl_creds_from_json(j, &c, &err), 0);
    tpl_creds_free(c);
    json_decref(j);
    j = json_pack("{s:s, s:s, s:s, s:s}", "type", "aws", "awsAccessKeyId", "AK",
                  "awsSecretAccessKey", "SK", "awsRegion", "eu-west-1");
    ck_assert_int_eq(tpl_creds_from_json(j, &c, &err), -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(err.msg, "get-login-password"));
    ck_assert_ptr_null(strstr(err.msg, "SK"));
    json_decref(j);
    j = json_pack("{s:s, s:s}", "type", "registry", "username", "u");
    ck_assert_int_eq(tpl_creds_from_json(j, &c, &err), -EINVAL);
    json_decref(j);
}
END_TEST

START_TEST(limits_defaults)
{
    struct tpl_limits in = {.max_layers = 1000, .max_ratio = 7}, out;
    tpl_limits_resolve(&in, &out);
    ck_assert_uint_eq(out.max_layers, TPL_MAX_LAYERS);
    ck_assert_uint_eq(out.max_ratio, 7);
    ck_assert_uint_eq(out.max_manifest_bytes, 4u << 20);
    tpl_limits_resolve(NULL, &out);
    ck_assert_uint_eq(out.max_path, 4096);
}
END_TEST

static void clean_ok(const char *in, const char *want)
{
    char out[512], msg[256];
    ck_assert_msg(tpl_path_clean(in, out, sizeof out, 400, msg, sizeof msg) == 0, "%s: %s", in,
                  msg);
    ck_assert_str_eq(out, want);
}

START_TEST(paths_cleaned_or_refused)
{
    clean_ok("./a//b/", "a/b");
    clean_ok("./", "");
    clean_ok("a/./b/.", "a/b");
    clean_ok("..a/b..", "..a/b..");
    char out[512], msg[256];
    ck_assert_int_eq(tpl_path_clean("/etc/passwd", out, sizeof out, 400, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "absolute"));
    ck_assert_int_eq(tpl_path_clean("a/../../b", out, sizeof out, 400, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "'..'"));
    ck_assert_int_eq(tpl_path_clean("..", out, sizeof out, 400, msg, sizeof msg), -EINVAL);
    char longc[300];
    memset(longc, 'x', 299);
    longc[299] = '\0';
    ck_assert_int_eq(tpl_path_clean(longc, out, sizeof out, 400, msg, sizeof msg), -ENAMETOOLONG);
}
END_TEST

/* ---- tar ----------------------------------------------------------------------------- */

struct mem {
    unsigned char *d;
    size_t n, off;
};

static ssize_t mem_read(void *arg, void *buf, size_t len)
{
    struct mem *m = arg;
    size_t k = m->n - m->off < len ? m->n - m->off : len;
    memcpy(buf, m->d + m->off, k);
    m->off += k;
    return (ssize_t)k;
}

/* A ustar header block. */
static void hdr(unsigned char *b, const char *name, char type, size_t size, const char *link)
{
    memset(b, 0, 512);
    snprintf((char *)b, 100, "%s", name);
    snprintf((char *)b + 100, 8, "%07o", 0644);
    snprintf((char *)b + 108, 8, "%07o", 1000);
    snprintf((char *)b + 116, 8, "%07o", 1000);
    snprintf((char *)b + 124, 12, "%011zo", size);
    snprintf((char *)b + 136, 12, "%011o", 1700000000);
    b[156] = (unsigned char)type;
    if (link)
        snprintf((char *)b + 157, 100, "%s", link);
    memcpy(b + 257,
           "ustar\0"
           "00",
           8);
    memset(b + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += b[i];
    snprintf((char *)b + 148, 8, "%06o", sum);
}

static size_t put_data(unsigned char *b, const char *s)
{
    size_t n = strlen(s);
    memset(b, 0, (n + 511) / 512 * 512);
    memcpy(b, s, n);
    return (n + 511) / 512 * 512;
}

START_TEST(tar_ustar_pax_gnu)
{
    static unsigned char a[512 * 16];
    size_t o = 0;
    hdr(a + o, "dir/", '5', 0, NULL);
    o += 512;
    hdr(a + o, "dir/file", '0', 5, NULL);
    o += 512;
    o += put_data(a + o, "hello");
    const char *pax = "31 path=very/long/pax/name.txt\n";
    hdr(a + o, "PaxHeader", 'x', strlen(pax), NULL);
    o += 512;
    o += put_data(a + o, pax);
    hdr(a + o, "short", '0', 0, NULL);
    o += 512;
    hdr(a + o, "././@LongLink", 'L', 9, NULL);
    o += 512;
    o += put_data(a + o, "gnu/long");
    hdr(a + o, "x", '2', 0, "/abs/target");
    o += 512;
    memset(a + o, 0, 1024);
    o += 1024;
    struct mem m = {a, o, 0};
    struct tpl_tar *t;
    ck_assert_int_eq(tpl_tar_open(mem_read, &m, 4096, &t), 0);
    const struct tpl_tar_entry *e;
    ck_assert_int_eq(tpl_tar_next(t, &e), 1);
    ck_assert_int_eq(e->type, TPL_TAR_DIR);
    ck_assert_str_eq(e->path, "dir/");
    ck_assert_int_eq(tpl_tar_next(t, &e), 1);
    ck_assert_int_eq(e->type, TPL_TAR_REG);
    ck_assert_uint_eq(e->uid, 1000);
    ck_assert_uint_eq(e->size, 5);
    char buf[16];
    ck_assert_int_eq(tpl_tar_read(t, buf, sizeof buf), 5);
    ck_assert_int_eq(memcmp(buf, "hello", 5), 0);
    ck_assert_int_eq(tpl_tar_read(t, buf, sizeof buf), 0);
    ck_assert_int_eq(tpl_tar_next(t, &e), 1);
    ck_assert_str_eq(e->path, "very/long/pax/name.txt");
    ck_assert_int_eq(tpl_tar_next(t, &e), 1);
    ck_assert_int_eq(e->type, TPL_TAR_SYMLINK);
    ck_assert_str_eq(e->path, "gnu/long");
    ck_assert_str_eq(e->link, "/abs/target");
    ck_assert_int_eq(tpl_tar_next(t, &e), 0);
    ck_assert_uint_eq(tpl_tar_count(t), 4);
    tpl_tar_free(t);
}
END_TEST

START_TEST(tar_refusals)
{
    static unsigned char a[512 * 8];
    struct tpl_tar *t;
    const struct tpl_tar_entry *e;
    /* bad checksum */
    hdr(a, "f", '0', 0, NULL);
    a[0] = 'g';
    struct mem m = {a, 1024, 0};
    tpl_tar_open(mem_read, &m, 4096, &t);
    ck_assert_int_lt(tpl_tar_next(t, &e), 0);
    ck_assert_ptr_nonnull(strstr(tpl_tar_error(t), "checksum"));
    tpl_tar_free(t);
    /* data cut short */
    hdr(a, "f", '0', 4000, NULL);
    m = (struct mem){a, 1024, 0};
    tpl_tar_open(mem_read, &m, 4096, &t);
    ck_assert_int_eq(tpl_tar_next(t, &e), 1);
    char buf[8192];
    ck_assert_int_eq(tpl_tar_read(t, buf, sizeof buf), 512);
    ck_assert_int_lt(tpl_tar_read(t, buf, sizeof buf), 0);
    ck_assert_ptr_nonnull(strstr(tpl_tar_error(t), "ends inside"));
    tpl_tar_free(t);
    /* sparse files */
    hdr(a, "f", 'S', 0, NULL);
    m = (struct mem){a, 1024, 0};
    tpl_tar_open(mem_read, &m, 4096, &t);
    ck_assert_int_eq(tpl_tar_next(t, &e), -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(tpl_tar_error(t), "sparse"));
    tpl_tar_free(t);
    /* a GNU long name over the bound */
    hdr(a, "././@LongLink", 'L', 2000, NULL);
    m = (struct mem){a, sizeof a, 0};
    tpl_tar_open(mem_read, &m, 100, &t);
    ck_assert_int_lt(tpl_tar_next(t, &e), 0);
    tpl_tar_free(t);
    /* a pax header that promises an entry that never comes */
    const char *pax = "31 path=very/long/pax/name.txt\n";
    hdr(a, "p", 'x', strlen(pax), NULL);
    put_data(a + 512, pax);
    m = (struct mem){a, 1024, 0};
    tpl_tar_open(mem_read, &m, 4096, &t);
    ck_assert_int_lt(tpl_tar_next(t, &e), 0);
    ck_assert_ptr_nonnull(strstr(tpl_tar_error(t), "extended header"));
    tpl_tar_free(t);
}
END_TEST

/* ---- layer streams ---------------------------------------------------------------- */

static int gz_file(const void *data, size_t n, int level)
{
    char p[] = "/tmp/al-test-layer-XXXXXX";
    int fd = mkstemp(p);
    unlink(p);
    gzFile g = gzdopen(dup(fd), "wb");
    gzsetparams(g, level, Z_DEFAULT_STRATEGY);
    gzwrite(g, data, (unsigned)n);
    gzclose(g);
    lseek(fd, 0, SEEK_SET);
    return fd;
}

START_TEST(layer_bomb_stopped_early)
{
    size_t n = 64u << 20;
    char *z = calloc(1, n);
    int fd = gz_file(z, n, 9);
    free(z);
    struct tpl_layer_stream *s;
    ck_assert_int_eq(tpl_layer_open(fd, 200, 1ull << 40, &s), 0);
    ck_assert_int_eq(tpl_layer_compression(s), TPL_COMP_GZIP);
    char buf[65536];
    ssize_t r;
    uint64_t out = 0;
    while ((r = tpl_layer_read(s, buf, sizeof buf)) > 0)
        out += (uint64_t)r;
    ck_assert_int_eq(r, -EFBIG);
    ck_assert_ptr_nonnull(strstr(tpl_layer_error(s), "compression ratio"));
    ck_assert_uint_lt(out, 20u << 20); /* stopped soon after TPL_LAYER_RATIO_FROM */
    tpl_layer_free(s);
    close(fd);
}
END_TEST

START_TEST(layer_digest_and_bound)
{
    const char *text = "not a tar, but a stream is a stream";
    int fd = gz_file(text, strlen(text), 6);
    struct tpl_layer_stream *s;
    ck_assert_int_eq(tpl_layer_open(fd, 200, 1 << 20, &s), 0);
    char d[TPL_DIGEST_LEN + 1];
    ck_assert_int_eq(tpl_layer_finish(s, d), 0);
    ck_assert_uint_eq(tpl_layer_out_bytes(s), strlen(text));
    /* sha256 of the uncompressed text */
    ck_assert_str_eq(d, "sha256:5ee4e114cfc03e2618fd3ea273be61dde560d3c11ed1b3b883b0b2922b63ed4b");
    tpl_layer_free(s);
    close(fd);
    fd = gz_file(text, strlen(text), 6);
    ck_assert_int_eq(tpl_layer_open(fd, 200, 10, &s), 0);
    ck_assert_int_eq(tpl_layer_finish(s, d), -EFBIG);
    tpl_layer_free(s);
    close(fd);
}
END_TEST

/* ---- COPY: an archive of the SDK's into a root filesystem ------------------------------ */

START_TEST(copy_source_without_glob)
{
    char out[4097], msg[256];
    const char *cases[][2] = {{"hello.txt", "hello.txt"},
                              {"src/*.js", "src"},
                              {"*.txt", ""},
                              {"a/b/", "a/b"},
                              {"dir/**/x", "dir"},
                              {"./d/f?.c", "d"},
                              {"conf/{a,b}.ini", "conf"},
                              {".", ""}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(tpl_copy_source(cases[i][0], out, sizeof out, msg, sizeof msg) == 0, "%s: %s",
                      cases[i][0], msg);
        ck_assert_msg(strcmp(out, cases[i][1]) == 0, "%s gave '%s'", cases[i][0], out);
    }
    ck_assert_int_eq(tpl_copy_source("/etc/passwd", out, sizeof out, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "absolute"));
    ck_assert_int_eq(tpl_copy_source("../x", out, sizeof out, msg, sizeof msg), -EINVAL);
    const char *rel;
    ck_assert_int_eq(tpl_copy_relate("src", "src", &rel), TPL_COPY_SELF);
    ck_assert_int_eq(tpl_copy_relate("src", "src/a/b", &rel), TPL_COPY_BENEATH);
    ck_assert_str_eq(rel, "a/b");
    ck_assert_int_eq(tpl_copy_relate("src", "srcx/a", &rel), TPL_COPY_SKIP);
    ck_assert_int_eq(tpl_copy_relate("", "a", &rel), TPL_COPY_BENEATH);
    ck_assert_str_eq(rel, "a");
}
END_TEST

/* A root filesystem with users, in a fresh temporary directory (into dir, n bytes); its
 * descriptor. */
static int copy_root(char *dir, size_t n)
{
    al_test_tmpdir(dir, n, "tpl-copy");
    char p[256];
    snprintf(p, sizeof p, "%s/etc", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/etc/passwd", dir);
    FILE *f = fopen(p, "w");
    fputs("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"
          "svc:x:1001:50::/srv:/bin/sh\n",
          f);
    fclose(f);
    snprintf(p, sizeof p, "%s/etc/group", dir);
    f = fopen(p, "w");
    fputs("root:x:0:\nstaff:x:50:\nuser:x:1000:\n", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/srv", dir);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/tmp", dir);
    ck_assert_int_eq(mkdir(p, 01777), 0);
    /* A link of the image out of the root: resolved in the root, it stays inside it. */
    snprintf(p, sizeof p, "%s/srv/out", dir);
    ck_assert_int_eq(symlink("../../../../../tmp", p), 0);
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    return fd;
}

static void copy_rmroot(int fd, const char *dir)
{
    close(fd);
    ck_assert_int_eq(al_rmtree(dir), 0);
}

/* Applies the archive a (o bytes) to root; the result code, the message in msg. */
static int copy_run(int root, unsigned char *a, size_t o, const char *src, const char *dest,
                    bool dest_dir, int mode, struct tpl_copy_result *res, char *msg, size_t len)
{
    memset(a + o, 0, 1024);
    struct mem m = {a, o + 1024, 0};
    struct tpl_tar *t;
    ck_assert_int_eq(tpl_tar_open(mem_read, &m, 4096, &t), 0);
    struct tpl_copy_opts co = {.src = src,
                               .dest = dest,
                               .dest_is_dir = dest_dir,
                               .mode = mode,
                               .max_path = 4096,
                               .max_entries = 100,
                               .max_bytes = 1 << 20};
    ck_assert_int_eq(tpl_copy_owner(root, "user", &co.uid, &co.gid, msg, len), 0);
    int rc = tpl_copy_apply(root, t, &co, res, msg, len);
    tpl_tar_free(t);
    return rc;
}

static void copy_expect(const char *dir, const char *rel, const char *content, unsigned mode)
{
    char p[512], buf[64] = "";
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    ck_assert_msg(lstat(p, &st) == 0, "%s is missing", rel);
    ck_assert_msg((st.st_mode & 07777) == mode, "%s has mode %o", rel, st.st_mode & 07777);
    ck_assert_uint_eq(st.st_uid, 1000);
    ck_assert_uint_eq(st.st_gid, 1000);
    if (!content)
        return;
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_str_eq(buf, content);
}

START_TEST(copy_a_file)
{
    char dir[64], msg[1024];
    int root = copy_root(dir, sizeof dir);
    static unsigned char a[512 * 16];
    size_t o = 0;
    hdr(a, "hello.txt", '0', 3, NULL);
    o = 512 + put_data(a + 512, "hi\n");
    struct tpl_copy_result r;
    /* Into a directory named with a trailing '/', made if missing. */
    ck_assert_msg(copy_run(root, a, o, "hello.txt", "/app", true, -1, &r, msg, sizeof msg) == 0,
                  "%s", msg);
    ck_assert(r.single);
    ck_assert_str_eq(r.where, "/app/hello.txt");
    copy_expect(dir, "app/hello.txt", "hi\n", 0644);
    /* Into an existing directory without one. */
    ck_assert_msg(copy_run(root, a, o, "hello.txt", "/srv", false, 0600, &r, msg, sizeof msg) == 0,
                  "%s", msg);
    copy_expect(dir, "srv/hello.txt", "hi\n", 0600);
    /* As the destination itself, replacing what is there. */
    ck_assert_msg(
        copy_run(root, a, o, "hello.txt", "/etc/app.conf", false, -1, &r, msg, sizeof msg) == 0,
        "%s", msg);
    copy_expect(dir, "etc/app.conf", "hi\n", 0644);
    ck_assert_msg(
        copy_run(root, a, o, "hello.txt", "/etc/app.conf", false, 0640, &r, msg, sizeof msg) == 0,
        "%s", msg);
    copy_expect(dir, "etc/app.conf", "hi\n", 0640);
    /* Through a link of the image: resolved inside the root, never out of it. */
    ck_assert_msg(copy_run(root, a, o, "hello.txt", "/srv/out/x/", true, -1, &r, msg, sizeof msg) ==
                      0,
                  "%s", msg);
    copy_expect(dir, "tmp/x/hello.txt", "hi\n", 0644);
    copy_rmroot(root, dir);
}
END_TEST

START_TEST(copy_a_directory)
{
    char dir[64], msg[1024];
    int root = copy_root(dir, sizeof dir);
    static unsigned char a[512 * 32];
    size_t o = 0;
    hdr(a + o, "src/", '5', 0, NULL);
    o += 512;
    hdr(a + o, "src/a.js", '0', 2, NULL);
    o += 512;
    o += put_data(a + o, "a\n");
    hdr(a + o, "src/lib/", '5', 0, NULL);
    o += 512;
    hdr(a + o, "src/lib/b.js", '0', 2, NULL);
    o += 512;
    o += put_data(a + o, "b\n");
    hdr(a + o, "src/lib/c.js", '1', 0, "src/lib/b.js");
    o += 512;
    hdr(a + o, "src/.wh.keep", '0', 0, NULL);
    o += 512;
    hdr(a + o, "src/l", '2', 0, "/etc/passwd");
    o += 512;
    hdr(a + o, "other.txt", '0', 2, NULL);
    o += 512;
    o += put_data(a + o, "o\n");
    struct tpl_copy_result r;
    ck_assert_msg(copy_run(root, a, o, "src/*.js", "/opt/app", false, -1, &r, msg, sizeof msg) == 0,
                  "%s", msg);
    ck_assert(!r.single);
    ck_assert_str_eq(r.where, "/opt/app");
    ck_assert_uint_eq(r.entries, 6);
    ck_assert_uint_eq(r.files, 3);
    copy_expect(dir, "opt/app/a.js", "a\n", 0644);
    copy_expect(dir, "opt/app/lib/b.js", "b\n", 0644);
    copy_expect(dir, "opt/app/lib/c.js", "b\n", 0644);
    copy_expect(dir, "opt/app/.wh.keep", NULL, 0644); /* a file, not a whiteout */
    char p[512], l[64] = "";
    snprintf(p, sizeof p, "%s/opt/app/l", dir);
    ck_assert_int_gt(readlink(p, l, sizeof l - 1), 0);
    ck_assert_str_eq(l, "/etc/passwd");
    struct stat s1, s2;
    snprintf(p, sizeof p, "%s/opt/app/lib/b.js", dir);
    ck_assert_int_eq(stat(p, &s1), 0);
    snprintf(p, sizeof p, "%s/opt/app/lib/c.js", dir);
    ck_assert_int_eq(stat(p, &s2), 0);
    ck_assert_uint_eq(s1.st_ino, s2.st_ino);
    snprintf(p, sizeof p, "%s/opt/app/other.txt", dir);
    ck_assert_int_ne(access(p, F_OK), 0); /* not beneath the source */
    snprintf(p, sizeof p, "%s/opt", dir);
    ck_assert_int_eq(stat(p, &s1), 0);
    ck_assert_uint_eq(s1.st_uid, 0); /* made by the copy, the image's root's */
    /* The archive's root: everything, beneath the destination. */
    ck_assert_msg(copy_run(root, a, o, "*", "/all", false, 0755, &r, msg, sizeof msg) == 0, "%s",
                  msg);
    copy_expect(dir, "all/other.txt", "o\n", 0755);
    copy_expect(dir, "all/src/lib/b.js", "b\n", 0755);
    copy_rmroot(root, dir);
}
END_TEST

START_TEST(copy_refusals)
{
    char dir[64], msg[1024];
    int root = copy_root(dir, sizeof dir);
    static unsigned char a[512 * 16];
    struct tpl_copy_result r;
    hdr(a, "../escaped-copy", '0', 0, NULL);
    ck_assert_int_eq(copy_run(root, a, 512, "*", "/d", false, -1, &r, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "'..'"));
    hdr(a, "/escaped-copy", '0', 0, NULL);
    ck_assert_int_eq(copy_run(root, a, 512, "*", "/d", false, -1, &r, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "absolute"));
    /* A link of the archive, then an entry through it. */
    hdr(a, "d/l", '2', 0, "/");
    hdr(a + 512, "d/l/escaped-copy", '0', 0, NULL);
    ck_assert_int_eq(copy_run(root, a, 1024, "d", "/d", false, -1, &r, msg, sizeof msg), -ELOOP);
    ck_assert_ptr_nonnull(strstr(msg, "symbolic link"));
    /* A hard link to what the step does not copy. */
    hdr(a, "d/x", '1', 0, "etc/passwd");
    ck_assert_int_eq(copy_run(root, a, 512, "d", "/d", false, -1, &r, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "does not copy"));
    hdr(a, "d/x", '1', 0, "../../etc/shadow");
    ck_assert_int_eq(copy_run(root, a, 512, "d", "/d", false, -1, &r, msg, sizeof msg), -EINVAL);
    hdr(a, "d/null", '3', 0, NULL);
    ck_assert_int_eq(copy_run(root, a, 512, "d", "/d", false, -1, &r, msg, sizeof msg), -EPERM);
    ck_assert_ptr_nonnull(strstr(msg, "device node"));
    hdr(a, "d", '0', 0, NULL);
    hdr(a + 512, "d/x", '0', 0, NULL);
    ck_assert_int_eq(copy_run(root, a, 1024, "d", "/d", false, -1, &r, msg, sizeof msg), -EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "as a file and as a directory"));
    hdr(a, "other", '0', 0, NULL);
    ck_assert_int_eq(copy_run(root, a, 512, "d", "/d", false, -1, &r, msg, sizeof msg), -ENOENT);
    ck_assert_ptr_nonnull(strstr(msg, "nothing in the uploaded archive is at 'd'"));
    /* The destination is a file of the image: a directory cannot go there. */
    hdr(a, "d/x", '0', 0, NULL);
    ck_assert_int_eq(copy_run(root, a, 512, "d", "/etc/passwd", false, -1, &r, msg, sizeof msg),
                     -ENOTDIR);
    char p[512];
    snprintf(p, sizeof p, "%s/d/l/escaped-copy", dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    ck_assert_int_ne(access("/escaped-copy", F_OK), 0);
    ck_assert_int_ne(access("/tmp/escaped-copy", F_OK), 0);
    copy_rmroot(root, dir);
}
END_TEST

START_TEST(copy_owner_from_the_image)
{
    char dir[64], msg[512];
    int root = copy_root(dir, sizeof dir);
    uint32_t u, g;
    ck_assert_int_eq(tpl_copy_owner(root, "user", &u, &g, msg, sizeof msg), 0);
    ck_assert(u == 1000 && g == 1000);
    ck_assert_int_eq(tpl_copy_owner(root, "svc", &u, &g, msg, sizeof msg), 0);
    ck_assert(u == 1001 && g == 50); /* no group of its name: its primary group */
    ck_assert_int_eq(tpl_copy_owner(root, "user:staff", &u, &g, msg, sizeof msg), 0);
    ck_assert(u == 1000 && g == 50);
    ck_assert_int_eq(tpl_copy_owner(root, "1234", &u, &g, msg, sizeof msg), 0);
    ck_assert(u == 1234 && g == 1234);
    ck_assert_int_eq(tpl_copy_owner(root, "1234:7", &u, &g, msg, sizeof msg), 0);
    ck_assert(u == 1234 && g == 7);
    ck_assert_int_eq(tpl_copy_owner(root, "nosuch", &u, &g, msg, sizeof msg), -ENOENT);
    ck_assert_ptr_nonnull(strstr(msg, "not in the image's /etc/passwd"));
    ck_assert_int_eq(tpl_copy_owner(root, "user:nosuch", &u, &g, msg, sizeof msg), -ENOENT);
    ck_assert_int_eq(tpl_copy_owner(root, "70000", &u, &g, msg, sizeof msg), -ERANGE);
    ck_assert_int_eq(tpl_copy_owner(root, "user:", &u, &g, msg, sizeof msg), -EINVAL);
    copy_rmroot(root, dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("templates");
    TCase *t = tcase_create("templates");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, references_as_docker_reads_them);
    tcase_add_test(t, references_refused);
    tcase_add_test(t, registry_allowlist);
    tcase_add_test(t, registry_urls);
    tcase_add_test(t, credentials_from_request);
    tcase_add_test(t, limits_defaults);
    tcase_add_test(t, paths_cleaned_or_refused);
    tcase_add_test(t, tar_ustar_pax_gnu);
    tcase_add_test(t, tar_refusals);
    tcase_add_test(t, layer_bomb_stopped_early);
    tcase_add_test(t, layer_digest_and_bound);
    tcase_add_test(t, copy_source_without_glob);
    tcase_add_test(t, copy_a_file);
    tcase_add_test(t, copy_a_directory);
    tcase_add_test(t, copy_refusals);
    tcase_add_test(t, copy_owner_from_the_image);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
