/* tests/unit/controlplane/test_cp_rest_volumes: the volume API (cp_rest_fixture.h) with real
 * volumes (ext4 images on loop devices, so it runs as root): names and content paths, POST /
 * GET / DELETE /volumes in E2B's shapes and errors and per key, the content API with the
 * volume's token (files, directories, stat, metadata, removal), symbolic links a sandbox
 * could leave in a volume that point out of it, the quota, and the sweep of <state>/volumes
 * at start. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controlplane/volumes.h"
#include "cp_rest_fixture.h"

START_TEST(volumes_names_and_paths)
{
    const char *good[] = {"data", "A1", "my-vol_2.x", "0"};
    const char *bad[] = {
        "",   "-x",  ".x",
        "_x", "a/b", "a b",
        "..", "é",   "a234567890123456789012345678901234567890123456789012345678901234"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(cp_volume_name_valid(good[i]), "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!cp_volume_name_valid(bad[i]), "%s", bad[i]);
    const char *in[] = {"/", "/a/b", "a//b/", "./a/./b", "/../x", "////"};
    const char *out[] = {".", "a/b", "a/b", "a/b", "../x", "."};
    char buf[4096];
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        struct al_error err = {0};
        ck_assert_msg(cp_volume_path_norm(in[i], buf, sizeof buf, &err) == 0, "%s", in[i]);
        ck_assert_str_eq(buf, out[i]);
    }
    struct al_error err = {0};
    ck_assert_int_eq(cp_volume_path_norm("", buf, sizeof buf, &err), -EINVAL);
    char longc[300];
    memset(longc, 'a', 299);
    longc[299] = '\0';
    ck_assert_int_eq(cp_volume_path_norm(longc, buf, sizeof buf, &err), -EINVAL);
    ck_assert_int_eq(cp_volume_path_norm("/a/b", buf, 3, &err), -ENAMETOOLONG);
}
END_TEST

/* A volume made through the API: its id and token. */
static void vol_new(const char *name, char id[64], char token[80])
{
    struct resp r;
    char body[128];
    snprintf(body, sizeof body, "{\"name\":\"%s\"}", name);
    req(&r, "POST", "/volumes", body);
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "name"), name);
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "volumeID"), "vol_"));
    snprintf(id, 64, "%s", jstr(r.body, "volumeID"));
    snprintf(token, 80, "%s", jstr(r.body, "token"));
    ck_assert_uint_eq(strlen(token), 64);
    resp_free(&r);
}

/* A content request with the volume's token (tok NULL: none). */
static void vc(struct resp *r, const char *method, const char *id, const char *what,
               const char *query, const char *tok, const char *body)
{
    char path[4200], auth[128];
    snprintf(path, sizeof path, "/volumecontent/%s/%s%s%s", id, what, query ? "?" : "",
             query ? query : "");
    snprintf(auth, sizeof auth, "Bearer %s", tok ? tok : "");
    struct al_http_header h[2] = {{"Authorization", auth},
                                  {"Content-Type", "application/octet-stream"}};
    req_full(r, g_target, method, path, NULL, body, h, tok ? 2 : 1);
}

static bool mounted(const char *id)
{
    char a[400], b[400];
    struct stat x, y;
    snprintf(a, sizeof a, "%s/volumes/%s", g_tmpdir, id);
    snprintf(b, sizeof b, "%s/volumes", g_tmpdir);
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev != y.st_dev;
}

START_TEST(volumes_create_list_get_delete)
{
    char id[64], tok[80], id2[64], tok2[80];
    vol_new("data", id, tok);
    ck_assert(mounted(id));
    struct resp r;
    /* E2B's errors: 409 for a name in use, 400 for a bad one or an unknown field. */
    req(&r, "POST", "/volumes", "{\"name\":\"data\"}");
    assert_error(&r, 409, "exists");
    resp_free(&r);
    req(&r, "POST", "/volumes", "{\"name\":\"../x\"}");
    assert_error(&r, 400, "\"name\" must be");
    resp_free(&r);
    req(&r, "POST", "/volumes", "{}");
    assert_error(&r, 400, "\"name\" must be");
    resp_free(&r);
    req(&r, "POST", "/volumes", "{\"name\":\"v\",\"size\":5}");
    assert_error(&r, 400, "unknown field \"size\" (a volume creation has \"name\" and \"sizeMB\")");
    resp_free(&r);
    req(&r, "POST", "/volumes", "[]");
    assert_error(&r, 400, "JSON object");
    resp_free(&r);
    vol_new("second", id2, tok2);
    ck_assert_str_ne(tok, tok2);

    req(&r, "GET", "/volumes", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(r.body), 2);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "volumeID"), id);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "name"), "data");
    ck_assert_ptr_null(json_object_get(json_array_get(r.body, 0), "token"));
    resp_free(&r);
    char path[200];
    snprintf(path, sizeof path, "/volumes/%s", id);
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "token"), tok);
    ck_assert_str_eq(jstr(r.body, "name"), "data");
    resp_free(&r);

    /* Another key sees none of them, and may use the same name. */
    char other[CP_APIKEY_LEN + 1];
    add_key("other", CP_ROLE_ADMIN, NULL, other);
    req_full(&r, g_target, "GET", "/volumes", other, NULL, NULL, 0);
    ck_assert_uint_eq(json_array_size(r.body), 0);
    resp_free(&r);
    req_full(&r, g_target, "GET", path, other, NULL, NULL, 0);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req_full(&r, g_target, "DELETE", path, other, NULL, NULL, 0);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req_full(&r, g_target, "POST", "/volumes", other, "{\"name\":\"data\"}", NULL, 0);
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    resp_free(&r);
    /* An auditor lists them but gets no token. */
    char aud[CP_APIKEY_LEN + 1];
    add_key("aud", CP_ROLE_AUDITOR, NULL, aud);
    req_full(&r, g_target, "GET", "/volumes", aud, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    req_full(&r, g_target, "GET", path, aud, NULL, NULL, 0);
    assert_error(&r, 403, "role auditor");
    resp_free(&r);

    req(&r, "DELETE", path, NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    ck_assert(!mounted(id));
    char img[400];
    snprintf(img, sizeof img, "%s/volumes/%s.img", g_tmpdir, id);
    ck_assert_int_ne(access(img, F_OK), 0);
    req(&r, "GET", path, NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "DELETE", path, NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    /* Its token opens nothing any more. */
    vc(&r, "GET", id, "path", "path=/", tok, NULL);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    req(&r, "PUT", "/volumes", NULL);
    assert_error(&r, 405, "GET lists");
    resp_free(&r);
}
END_TEST

START_TEST(volumes_content)
{
    char id[64], tok[80], id2[64], tok2[80];
    vol_new("data", id, tok);
    vol_new("other", id2, tok2);
    struct resp r;
    /* The token is the credential: none, another volume's or an API key are refused. */
    vc(&r, "GET", id, "path", "path=/", NULL, NULL);
    assert_error(&r, 401, "Bearer");
    resp_free(&r);
    vc(&r, "GET", id, "path", "path=/", tok2, NULL);
    assert_error(&r, 401, "Bearer");
    resp_free(&r);
    char p[300];
    snprintf(p, sizeof p, "/volumecontent/%s/path?path=/", id);
    req(&r, "GET", p, NULL);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);

    /* The root: a directory of the sandbox's user, empty (no lost+found). */
    vc(&r, "GET", id, "path", "path=/", tok, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "type"), "directory");
    ck_assert_str_eq(jstr(r.body, "path"), "/");
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "uid")), 1000);
    resp_free(&r);
    vc(&r, "GET", id, "dir", "path=/", tok, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(r.body), 0);
    resp_free(&r);

    /* Writing under a missing directory needs force (which makes it). */
    vc(&r, "PUT", id, "file", "path=/a/b/hello.txt", tok, "hello volume");
    assert_error(&r, 404, "force=true");
    resp_free(&r);
    vc(&r, "PUT", id, "file", "path=/a/b/hello.txt&force=true&mode=0600&uid=1001", tok,
       "hello volume");
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "name"), "hello.txt");
    ck_assert_str_eq(jstr(r.body, "path"), "/a/b/hello.txt");
    ck_assert_str_eq(jstr(r.body, "type"), "file");
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "size")), 12);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "mode")), 0600);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "uid")), 1001);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "gid")), 1000);
    ck_assert_ptr_nonnull(jstr(r.body, "mtime"));
    resp_free(&r);
    vc(&r, "GET", id, "file", "path=a/b/hello.txt", tok, NULL);
    ck_assert_int_eq(r.status, 200);
    ck_assert_str_eq(r.raw, "hello volume");
    resp_free(&r);
    /* Overwritten in place of the old one; the other volume does not have it. */
    vc(&r, "PUT", id, "file", "path=/a/b/hello.txt", tok, "v2");
    ck_assert_int_eq(r.status, 200);
    resp_free(&r);
    vc(&r, "GET", id, "file", "path=/a/b/hello.txt", tok, NULL);
    ck_assert_str_eq(r.raw, "v2");
    resp_free(&r);
    vc(&r, "GET", id2, "file", "path=/a/b/hello.txt", tok2, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    vc(&r, "GET", id, "file", "path=/a", tok, NULL);
    assert_error(&r, 400, "a directory");
    resp_free(&r);
    vc(&r, "GET", id, "file", NULL, tok, NULL);
    assert_error(&r, 400, "\"path\" is required");
    resp_free(&r);

    /* Directories: made, listed to a depth, made again only with force. */
    vc(&r, "POST", id, "dir", "path=/c", tok, NULL);
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "type"), "directory");
    resp_free(&r);
    vc(&r, "POST", id, "dir", "path=/c", tok, NULL);
    ck_assert_int_eq(r.status, 409);
    resp_free(&r);
    vc(&r, "POST", id, "dir", "path=/c&force=true", tok, NULL);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);
    vc(&r, "POST", id, "dir", "path=/x/y", tok, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    vc(&r, "GET", id, "dir", "path=/", tok, NULL);
    ck_assert_uint_eq(json_array_size(r.body), 2);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "path"), "/a");
    ck_assert_str_eq(jstr(json_array_get(r.body, 1), "path"), "/c");
    resp_free(&r);
    vc(&r, "GET", id, "dir", "path=/&depth=3", tok, NULL);
    ck_assert_uint_eq(json_array_size(r.body), 4);
    ck_assert_str_eq(jstr(json_array_get(r.body, 2), "path"), "/a/b/hello.txt");
    resp_free(&r);
    vc(&r, "GET", id, "dir", "path=/&depth=0", tok, NULL);
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    vc(&r, "GET", id, "dir", "path=/nope", tok, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);

    /* Metadata. */
    vc(&r, "PATCH", id, "path", "path=/a/b/hello.txt", tok, "{\"mode\":420,\"gid\":5}");
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "mode")), 0644);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "gid")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "uid")), 1000); /* the rewrite's */
    resp_free(&r);
    vc(&r, "PATCH", id, "path", "path=/a/b/hello.txt", tok, "{\"owner\":1}");
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);
    vc(&r, "PATCH", id, "path", "path=/a/b/hello.txt", tok, "{\"mode\":99999}");
    ck_assert_int_eq(r.status, 400);
    resp_free(&r);

    /* Removal: a directory with what is in it; the root never. */
    vc(&r, "DELETE", id, "path", "path=/a", tok, NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    vc(&r, "GET", id, "path", "path=/a/b/hello.txt", tok, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    vc(&r, "DELETE", id, "path", "path=/a", tok, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    vc(&r, "DELETE", id, "path", "path=/", tok, NULL);
    assert_error(&r, 400, "root");
    resp_free(&r);
    vc(&r, "GET", id, "nothing", "path=/", tok, NULL);
    ck_assert_int_eq(r.status, 404);
    resp_free(&r);
    vc(&r, "DELETE", id, "file", "path=/c", tok, NULL);
    ck_assert_int_eq(r.status, 405);
    resp_free(&r);
}
END_TEST

/* What a sandbox could leave in a volume: links out of it, by relative and absolute paths
 * and through /proc's magic links. None of them reaches the host. */
START_TEST(volumes_symlinks_stay_inside)
{
    char id[64], tok[80];
    vol_new("data", id, tok);
    char host[400], v[400], l[500];
    snprintf(host, sizeof host, "%s/secret", g_tmpdir);
    FILE *f = fopen(host, "w");
    fputs("host secret", f);
    fclose(f);
    snprintf(v, sizeof v, "%s/volumes/%s", g_tmpdir, id);
    struct {
        const char *name, *target;
    } links[] = {
        {"rel", "../../secret"},
        {"abs", NULL}, /* the host path of the secret */
        {"up", "../../../../../.."},
        {"proc", "/proc/self/root"},
        {"etc", "/etc"},
    };
    for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
        snprintf(l, sizeof l, "%s/%s", v, links[i].name);
        ck_assert_int_eq(symlink(links[i].target ? links[i].target : host, l), 0);
    }
    const char *reads[] = {"path=/rel",           "path=/abs",
                           "path=/up/etc/passwd", "path=/proc/etc/passwd",
                           "path=/etc/passwd",    "path=/up/../../secret"};
    struct resp r;
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++) {
        vc(&r, "GET", id, "file", reads[i], tok, NULL);
        ck_assert_msg(r.status == 404 || r.status == 400, "%s: %d %s", reads[i], r.status, r.raw);
        ck_assert_ptr_null(strstr(r.raw, "host secret"));
        ck_assert_ptr_null(strstr(r.raw, "root:"));
        resp_free(&r);
    }
    /* Writes through them land inside the volume or nowhere. */
    vc(&r, "PUT", id, "file", "path=/etc/airlock-volume-test&force=true", tok, "x");
    ck_assert_int_ne(r.status, 200);
    resp_free(&r);
    ck_assert_int_ne(access("/etc/airlock-volume-test", F_OK), 0);
    vc(&r, "PUT", id, "file", "path=/rel", tok, "overwritten");
    ck_assert_int_eq(r.status, 200); /* replaces the link itself */
    resp_free(&r);
    char buf[64] = "";
    f = fopen(host, "r");
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_str_eq(buf, "host secret");
    /* Listing and stat show the links as links; removing one removes the link only. */
    vc(&r, "GET", id, "path", "path=/abs", tok, NULL);
    ck_assert_str_eq(jstr(r.body, "type"), "symlink");
    ck_assert_str_eq(jstr(r.body, "target"), host);
    resp_free(&r);
    vc(&r, "DELETE", id, "path", "path=/abs", tok, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    vc(&r, "DELETE", id, "path", "path=/up", tok, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    ck_assert_int_eq(access(host, F_OK), 0);
    ck_assert_int_eq(access("/etc/passwd", F_OK), 0);
    /* A directory link on the way to a removal is resolved inside the volume. */
    vc(&r, "DELETE", id, "path", "path=/proc/etc", tok, NULL);
    ck_assert_int_ne(r.status, 204);
    resp_free(&r);
    ck_assert_int_eq(access("/etc/passwd", F_OK), 0);
}
END_TEST

START_TEST(volumes_quota)
{
    g_cp.cfg.volume_bytes = 16u << 20; /* set before the loop thread reads it for this one */
    char id[64], tok[80];
    vol_new("small", id, tok);
    size_t big = 20u << 20;
    char *data = malloc(big + 1);
    memset(data, 'q', big);
    data[big] = '\0';
    struct resp r;
    vc(&r, "PUT", id, "file", "path=/big", tok, data);
    assert_error(&r, 507, "the volume is full");
    resp_free(&r);
    /* Nothing of the failed write is left, and the room is there again. */
    vc(&r, "GET", id, "dir", "path=/", tok, NULL);
    ck_assert_msg(r.status == 200 && json_array_size(r.body) == 0, "%d %s", r.status, r.raw);
    resp_free(&r);
    data[4u << 20] = '\0';
    vc(&r, "PUT", id, "file", "path=/fits", tok, data);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "size")), 4 << 20);
    resp_free(&r);
    free(data);
}
END_TEST

static uint64_t image_size(const char *id)
{
    char p[400];
    struct stat st;
    snprintf(p, sizeof p, "%s/volumes/%s.img", g_tmpdir, id);
    ck_assert_int_eq(stat(p, &st), 0);
    return (uint64_t)st.st_size;
}

/* "sizeMB" at creation is the volume's quota (its image's size), kept and shown; without it,
 * volumes.size; outside 16 .. volumes.max_size, or not an integer, a 400 and nothing made. */
START_TEST(volumes_sizes)
{
    struct resp r;
    req(&r, "POST", "/volumes", "{\"name\":\"sized\",\"sizeMB\":24}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "sizeMB")), 24);
    char id[64], tok[80];
    snprintf(id, sizeof id, "%s", jstr(r.body, "volumeID"));
    snprintf(tok, sizeof tok, "%s", jstr(r.body, "token"));
    resp_free(&r);
    ck_assert_uint_eq(image_size(id), 24u << 20);
    char path[200];
    snprintf(path, sizeof path, "/volumes/%s", id);
    req(&r, "GET", path, NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(r.body, "sizeMB")), 24);
    resp_free(&r);
    req(&r, "GET", "/volumes", NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(r.body, 0), "sizeMB")), 24);
    resp_free(&r);
    /* The kernel keeps it: 30 MiB do not fit, and the answer names the quota; 12 MiB do. */
    size_t big = 30u << 20;
    char *data = malloc(big + 1);
    memset(data, 'z', big);
    data[big] = '\0';
    vc(&r, "PUT", id, "file", "path=/big", tok, data);
    assert_error(&r, 507, "its quota is 24 MiB");
    resp_free(&r);
    data[12u << 20] = '\0';
    vc(&r, "PUT", id, "file", "path=/fits", tok, data);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    resp_free(&r);
    free(data);

    /* Without it: volumes.size (the fixture's default, 1 GiB). */
    char id2[64], tok2[80];
    vol_new("default-size", id2, tok2);
    ck_assert_uint_eq(image_size(id2), g_cp.cfg.volume_bytes);
    req(&r, "GET", "/volumes", NULL);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(r.body, 1), "sizeMB")),
                     (json_int_t)(g_cp.cfg.volume_bytes >> 20));
    resp_free(&r);

    char too_big[128];
    snprintf(too_big, sizeof too_big, "{\"name\":\"b\",\"sizeMB\":%llu}",
             (unsigned long long)(g_cp.cfg.volume_max_bytes >> 20) + 1);
    const char *bad[] = {"{\"name\":\"b\",\"sizeMB\":15}",   "{\"name\":\"b\",\"sizeMB\":0}",
                         "{\"name\":\"b\",\"sizeMB\":-1}",   "{\"name\":\"b\",\"sizeMB\":\"32\"}",
                         "{\"name\":\"b\",\"sizeMB\":32.5}", too_big};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        req(&r, "POST", "/volumes", bad[i]);
        assert_error(&r, 400, "the volume's quota in MiB, from 16 to");
        ck_assert_msg(strstr(r.raw, "volumes.max_size"), "%s", r.raw);
        resp_free(&r);
    }
    req(&r, "GET", "/volumes", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 2);
    resp_free(&r);
}
END_TEST

START_TEST(volumes_sweep)
{
    char id[64], tok[80], gone[64], gtok[80];
    vol_new("keep", id, tok);
    /* A volume whose row went while it stayed mounted (a deletion airlockd did not finish):
     * unmounted, then its directory and image removed; what is in it is never walked. */
    vol_new("gone", gone, gtok);
    struct resp r;
    vc(&r, "PUT", gone, "file", "path=/inside", gtok, "x");
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    resp_free(&r);
    ck_assert(mounted(gone));
    ck_assert_int_eq(cp_store_vol_delete(g_cp.store, gone, NULL), 0);
    char p[400];
    snprintf(p, sizeof p, "%s/volumes/.tmp-vol_aaaaaaaaaaaaaaaaaaaa.img", g_tmpdir);
    int fd = open(p, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(p, sizeof p, "%s/volumes/vol_bbbbbbbbbbbbbbbbbbbb.img", g_tmpdir);
    fd = open(p, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    cp_volumes_sweep(&g_cp);
    ck_assert_int_ne(access(p, F_OK), 0);
    snprintf(p, sizeof p, "%s/volumes/.tmp-vol_aaaaaaaaaaaaaaaaaaaa.img", g_tmpdir);
    ck_assert_int_ne(access(p, F_OK), 0);
    snprintf(p, sizeof p, "%s/volumes/%s.img", g_tmpdir, id);
    ck_assert_int_eq(access(p, F_OK), 0);
    ck_assert(mounted(id));
    ck_assert(!mounted(gone));
    snprintf(p, sizeof p, "%s/volumes/%s", g_tmpdir, gone);
    ck_assert_int_ne(access(p, F_OK), 0);
    snprintf(p, sizeof p, "%s/volumes/%s.img", g_tmpdir, gone);
    ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

/* volumeMounts at creation: refused by a backend without volumes, and checked before
 * anything starts (cp_volumes_resolve, what the jail backend's creations go through). */
START_TEST(volumes_mounts_checked)
{
    char id[64], tok[80];
    vol_new("data", id, tok);
    struct resp r;
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"base\",\"volumeMounts\":[{\"name\":\"data\",\"path\":\"/data\"}]}");
    assert_error(&r, 400, "the test backend cannot mount volumes");
    resp_free(&r);
    req(&r, "GET", "/v2/sandboxes", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 0);
    resp_free(&r);
    char other[CP_APIKEY_LEN + 1];
    struct cp_apikey k = add_key("other", CP_ROLE_ADMIN, NULL, other);
    req_full(&r, g_target, "POST", "/volumes", other, "{\"name\":\"theirs\"}", NULL, 0);
    ck_assert_int_eq(r.status, 201);
    resp_free(&r);

    snprintf(g_cp.backend_kind, sizeof g_cp.backend_kind, "jail");
    const struct {
        const char *mounts, *want;
    } bad[] = {
        {"{}", "must be a list"},
        {"[1]", "volumeMounts[0] must be"},
        {"[{\"name\":\"data\"}]", "path"},
        {"[{\"name\":\"data\",\"path\":\"/d\",\"ro\":true}]", "volumeMounts[0]"},
        {"[{\"name\":\"data\",\"path\":\"d\"}]", "must be an absolute path"},
        {"[{\"name\":\"data\",\"path\":\"/\"}]", "must be an absolute path"},
        {"[{\"name\":\"data\",\"path\":\"/a/../etc\"}]", "must be an absolute path"},
        {"[{\"name\":\"data\",\"path\":\"/a/\"}]", "must be an absolute path"},
        {"[{\"name\":\"data\",\"path\":\"/proc/x\"}]", "inside /proc"},
        {"[{\"name\":\"data\",\"path\":\"/.airlock\"}]", "inside /.airlock"},
        {"[{\"name\":\"data\",\"path\":\"/d\"},{\"name\":\"data\",\"path\":\"/d\"}]",
         "two volumes are mounted at /d"},
        {"[{\"name\":\"data\",\"path\":\"/d\"},{\"name\":\"data\",\"path\":\"/d/e\"}]",
         "path /d/e and volumeMounts[0]'s /d are one inside the other"},
        {"[{\"name\":\"data\",\"path\":\"/d/e\"},{\"name\":\"data\",\"path\":\"/d\"}]",
         "path /d and volumeMounts[0]'s /d/e are one inside the other"},
        {"[{\"name\":\"nope\",\"path\":\"/d\"}]", "no volume named \"nope\""},
        {"[{\"name\":\"theirs\",\"path\":\"/d\"}]", "no volume named \"theirs\""},
        {"[{\"name\":\"a\",\"path\":\"/1\"},{\"name\":\"a\",\"path\":\"/2\"},{\"name\":\"a\","
         "\"path\":\"/3\"},{\"name\":\"a\",\"path\":\"/4\"},{\"name\":\"a\",\"path\":\"/5\"},{"
         "\"name\":\"a\",\"path\":\"/6\"},{\"name\":\"a\",\"path\":\"/7\"},{\"name\":\"a\","
         "\"path\":\"/8\"},{\"name\":\"a\",\"path\":\"/9\"}]",
         "at most 8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *m = json_loads(bad[i].mounts, JSON_DECODE_ANY, NULL);
        ck_assert_ptr_nonnull(m);
        json_t *out = NULL;
        struct al_error err = {0};
        ck_assert_int_eq(cp_volumes_resolve(&g_cp, m, "env", &out, &err), -EINVAL);
        ck_assert_msg(strstr(al_error_str(&err), bad[i].want), "%s: %s", bad[i].mounts,
                      al_error_str(&err));
        ck_assert_ptr_null(out);
        json_decref(m);
    }
    json_t *m = json_loads("[{\"name\":\"data\",\"path\":\"/data\"},{\"name\":\"data\","
                           "\"path\":\"/home/user/d\"}]",
                           0, NULL);
    json_t *out = NULL;
    struct al_error err = {0};
    ck_assert_msg(cp_volumes_resolve(&g_cp, m, "env", &out, &err) == 0, "%s", al_error_str(&err));
    ck_assert_uint_eq(json_array_size(out), 2);
    ck_assert_str_eq(jstr(json_array_get(out, 1), "volumeID"), id);
    ck_assert_str_eq(jstr(json_array_get(out, 1), "path"), "/home/user/d");
    json_t *shown = cp_volumes_mounts_json(out);
    char *text = json_dumps(shown, JSON_COMPACT | JSON_SORT_KEYS);
    ck_assert_str_eq(text, "[{\"name\":\"data\",\"path\":\"/data\"},{\"name\":\"data\","
                           "\"path\":\"/home/user/d\"}]");
    free(text);
    json_decref(shown);
    json_decref(out);
    json_decref(m);
    /* A common prefix is not nesting. */
    m = json_loads("[{\"name\":\"data\",\"path\":\"/d\"},{\"name\":\"data\","
                   "\"path\":\"/de\"}]",
                   0, NULL);
    ck_assert_msg(cp_volumes_resolve(&g_cp, m, "env", &out, &err) == 0, "%s", al_error_str(&err));
    ck_assert_uint_eq(json_array_size(out), 2);
    json_decref(out);
    json_decref(m);
    ck_assert_int_eq(cp_volumes_resolve(&g_cp, NULL, "env", &out, &err), 0);
    ck_assert_ptr_null(out);
    (void)k;
    snprintf(g_cp.backend_kind, sizeof g_cp.backend_kind, "test");
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_volumes");
    TCase *t = cp_rest_tcase("volumes");
    tcase_add_test(t, volumes_names_and_paths);
    tcase_add_test(t, volumes_create_list_get_delete);
    tcase_add_test(t, volumes_content);
    tcase_add_test(t, volumes_symlinks_stay_inside);
    tcase_add_test(t, volumes_quota);
    tcase_add_test(t, volumes_sizes);
    tcase_add_test(t, volumes_sweep);
    tcase_add_test(t, volumes_mounts_checked);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
