/* tests/unit/controlplane/test_cp_rest_templates: the templates API (cp_rest_fixture.h):
 * listing and aliases (the SDK's Template.exists), the build API as Template.build speaks it
 * (requests, definitions checked field by field, status with paged logs, deletion), and the
 * build runner making templates that sandboxes start from. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cp_rest_fixture.h"

/* GET /templates and GET /templates/aliases/{alias} (the SDK's Template.exists). */
START_TEST(templates_list_and_alias)
{
    /* One from a registry (its digest is the build id), one half-made (a pull's temporary
     * name) and one directory that is no template. */
    char d[400];
    snprintf(d, sizeof d, "%s/templates/t-img/rootfs", g_tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
    snprintf(d, sizeof d, "%s/templates/t-img/template.json", g_tmpdir);
    FILE *f = fopen(d, "w");
    fprintf(f, "{\"name\":\"t-img\",\"image\":{\"digest\":\"sha256:%064d\"}}\n", 7);
    fclose(f);
    snprintf(d, sizeof d, "%s/templates/.t-half.tmp/rootfs", g_tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
    snprintf(d, sizeof d, "%s/templates/.t-half.tmp/template.json", g_tmpdir);
    fclose(fopen(d, "w"));
    snprintf(d, sizeof d, "%s/templates/no-json/rootfs", g_tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);

    struct resp r;
    req(&r, "GET", "/templates", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert(json_is_array(r.body));
    const char *want[] = {"base",       "code-interpreter-v1", "failing", "noagent", "pinned",
                          "pinned-bad", "pinned-missing",      "slow",    "t-img"};
    ck_assert_uint_eq(json_array_size(r.body), 9);
    for (size_t i = 0; i < 9; i++) {
        json_t *t = json_array_get(r.body, i);
        ck_assert_str_eq(jstr(t, "templateID"), want[i]);
        ck_assert_str_eq(json_string_value(json_array_get(json_object_get(t, "aliases"), 0)),
                         want[i]);
        ck_assert_str_eq(json_string_value(json_array_get(json_object_get(t, "names"), 0)),
                         want[i]);
        ck_assert_str_eq(jstr(t, "buildStatus"), "ready");
        ck_assert(json_is_false(json_object_get(t, "public")));
        ck_assert_int_gt(json_integer_value(json_object_get(t, "memoryMB")), 0);
        ck_assert_int_gt(json_integer_value(json_object_get(t, "cpuCount")), 0);
        ck_assert_ptr_nonnull(strstr(jstr(t, "createdAt"), "T"));
        ck_assert_str_eq(
            jstr(t, "buildID"),
            i == 8 ? "sha256:0000000000000000000000000000000000000000000000000000000000000007"
                   : "");
    }
    resp_free(&r);

    req(&r, "GET", "/templates/aliases/code-interpreter-v1", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "templateID"), "code-interpreter-v1");
    ck_assert(json_is_false(json_object_get(r.body, "public")));
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/no-json", NULL);
    assert_error(&r, 404, "template 'no-json' not found (templates available: base, ");
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/.t-half.tmp", NULL);
    assert_error(&r, 400, "not a template alias");
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/Big%20Name", NULL);
    assert_error(&r, 400, "1..64 of a-z");
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/base/x", NULL);
    assert_error(&r, 400, "not a template alias");
    resp_free(&r);
    req_full(&r, g_target, "GET", "/templates/aliases/base", NULL, NULL, NULL, 0);
    ck_assert_int_eq(r.status, 401);
    resp_free(&r);
    /* A template made without the build API has one version, its default tag's. */
    req(&r, "GET", "/templates/base/tags", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(r.body), 1);
    ck_assert_str_eq(jstr(json_array_get(r.body, 0), "tag"), "default");
    ck_assert_ptr_nonnull(strstr(jstr(json_array_get(r.body, 0), "createdAt"), "T"));
    resp_free(&r);
    req(&r, "GET", "/templates/nope/tags", NULL);
    assert_error(&r, 404, "template 'nope' not found");
    resp_free(&r);
    req(&r, "PUT", "/templates/base/tags", NULL);
    assert_error(&r, 405, "GET lists the tags");
    resp_free(&r);
}
END_TEST

/* The template build API as the SDK's Template.build speaks it (builds.c): a build requested
 * with POST /v3/templates waits for its definition; the definition is checked field by
 * field; the status answer pages the build's log by logsOffset and names the failing step;
 * GET /templates/{id} lists the builds; DELETE is refused while a sandbox uses the template. */
static int count_entries(const char *path)
{
    struct resp r;
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%s: %d %s", path, r.status, r.raw);
    int n = (int)json_array_size(json_object_get(r.body, "logEntries"));
    resp_free(&r);
    return n;
}

START_TEST(template_builds_api)
{
    struct resp r;
    char d0[400];
    struct stat st0;
    req(&r, "POST", "/v3/templates", "{\"name\":\"my-tpl\"}");
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "templateID"), "my-tpl");
    char bid[40], path[300];
    snprintf(bid, sizeof bid, "%s", jstr(r.body, "buildID"));
    ck_assert_uint_eq(strlen(bid), 36);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r.body, "names"), 0)),
                     "my-tpl");
    ck_assert(json_is_false(json_object_get(r.body, "public")));
    /* Without a tag, the build gets the default one (what the name alone names). */
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "tags")), 1);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r.body, "tags"), 0)),
                     "default");
    resp_free(&r);

    snprintf(path, sizeof path, "/templates/my-tpl/builds/%s/status", bid);
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "status"), "waiting");
    ck_assert_str_eq(jstr(r.body, "buildID"), bid);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "logEntries")), 0);
    ck_assert_ptr_null(json_object_get(r.body, "reason"));
    resp_free(&r);

    /* Listed (no files yet: the newest build's status), in name order with the others. */
    req(&r, "GET", "/templates", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    json_t *t = NULL;
    for (size_t i = 0; i < json_array_size(r.body); i++)
        if (strcmp(jstr(json_array_get(r.body, i), "templateID"), "my-tpl") == 0)
            t = json_array_get(r.body, i);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(jstr(t, "buildStatus"), "waiting");
    ck_assert_str_eq(jstr(t, "buildID"), "");
    ck_assert_str_eq(jstr(json_array_get(r.body, 2), "templateID"), "failing");
    ck_assert_str_eq(jstr(json_array_get(r.body, 3), "templateID"), "my-tpl");
    resp_free(&r);
    req(&r, "GET", "/templates/my-tpl", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "builds")), 1);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "buildID"), bid);
    resp_free(&r);
    req(&r, "GET", "/templates/aliases/my-tpl", NULL); /* Template.exists: requested, not built */
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "templateID"), "my-tpl");
    resp_free(&r);
    /* A template without builds recorded (a default one): one ready build. */
    req(&r, "GET", "/templates/base", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "status"), "ready");
    resp_free(&r);

    /* Requests that cannot be honoured say why. */
    const char *bad[][3] = {
        {"{\"name\":\"base\"}", "409", "default template"},
        {"{\"name\":\"my-tpl:v 2\"}", "400", "optionally :TAG"},
        {"{\"name\":\"my-tpl:\"}", "400", "optionally :TAG"},
        {"{\"name\":\"x\",\"tags\":[\"\"]}", "400", "tag \"\" is not a tag"},
        {"{\"name\":\"x\",\"tags\":[\".v\"]}", "400", "is not a tag"},
        {"{\"name\":\"x\",\"tags\":\"v1\"}", "400", "must be an array"},
        {"{\"name\":\"Big Name\"}", "400", "not a template name"},
        {"{\"name\":\"x\",\"cpuCount\":97}", "400", "leave cpuCount and memoryMB out"},
        {"{\"name\":\"x\",\"minFreeDiskMb\":99999999}", "400", "minFreeDiskMb"},
        {"{\"name\":\"x\",\"teamID\":\"t\"}", "400", "no teams"},
        {"{\"name\":\"x\",\"colour\":1}", "400", "unknown field \"colour\""},
        {"{\"cpuCount\":2}", "400", "\"name\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        req(&r, "POST", "/v3/templates", bad[i][0]);
        assert_error(&r, atoi(bad[i][1]), bad[i][2]);
        resp_free(&r);
    }

    /* Definitions are checked before anything is recorded. */
    snprintf(path, sizeof path, "/v2/templates/my-tpl/builds/%s", bid);
    const char *bad_def[][3] = {
        {"{\"steps\":[]}", "400", "exactly one of fromImage"},
        {"{\"fromImage\":\"a\",\"fromTemplate\":\"base\"}", "400", "exactly one of fromImage"},
        {"{\"fromTemplate\":\"nope\"}", "404", "template 'nope' not found"},
        {"{\"fromTemplate\":\"my-tpl\"}", "400", "cannot be built from itself"},
        {"{\"fromImage\":\"Not A Ref\"}", "400", NULL},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"FROB\",\"args\":[\"x\"]}]}", "400",
         "step 1: unknown step type \"FROB\""},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"1\"]},"
         "{\"type\":\"COPY\",\"args\":[\"a\",\"/b\"]}]}",
         "400", "step 2 (COPY a): \"filesHash\""},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\"]}]}", "400",
         "step 1 (ENV): 1 arguments"},
        {"{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"RUN\",\"args\":[1]}]}", "400",
         "argument 1 must be a string"},
        {"{\"fromTemplate\":\"base\",\"colour\":1}", "400", "unknown field \"colour\""},
        {"{\"fromImage\":\"busybox\",\"fromImageRegistry\":{\"type\":\"aws\","
         "\"awsAccessKeyId\":\"a\",\"awsSecretAccessKey\":\"b\",\"awsRegion\":\"c\"}}",
         "400", "fromImageRegistry"},
    };
    for (size_t i = 0; i < sizeof bad_def / sizeof *bad_def; i++) {
        req(&r, "POST", path, bad_def[i][0]);
        assert_error(&r, atoi(bad_def[i][1]), bad_def[i][2]);
        resp_free(&r);
    }
    req(&r, "POST", "/v2/templates/base/builds/00000000-0000-4000-8000-000000000000", "{}");
    assert_error(&r, 404, "has no build");
    resp_free(&r);
    snprintf(path, sizeof path, "/v2/templates/t-img/builds/%s", bid);
    req(&r, "POST", path, "{\"fromTemplate\":\"base\"}");
    assert_error(&r, 404, "has no build"); /* the build is my-tpl's */
    resp_free(&r);

    /* A valid definition is recorded; a step the runner cannot run ends the build before
     * anything is made, naming it. */
    snprintf(path, sizeof path, "/v2/templates/my-tpl/builds/%s", bid);
    req(&r, "POST", path,
        "{\"fromTemplate\":\"base\",\"startCmd\":\"sleep 1\",\"readyCmd\":null,\"force\":false,"
        "\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"1\"],\"force\":false},"
        "{\"type\":\"RUN\",\"args\":[\"true\",\"root\"]}]}");
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    resp_free(&r);
    req(&r, "POST", path, "{\"fromTemplate\":\"base\"}");
    assert_error(&r, 409, "already been started (it is error)");
    resp_free(&r);
    snprintf(path, sizeof path, "/templates/my-tpl/builds/%s/status", bid);
    req(&r, "GET", path, NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "status"), "error");
    json_t *reason = json_object_get(r.body, "reason");
    ck_assert_str_eq(jstr(reason, "step"), "2");
    ck_assert_ptr_nonnull(strstr(jstr(reason, "message"),
                                 "step 2 (RUN true): the fake backend cannot run RUN steps"));
    ck_assert_uint_eq(json_array_size(json_object_get(reason, "logEntries")), 1);
    json_t *logs = json_object_get(r.body, "logEntries");
    ck_assert_uint_eq(json_array_size(logs), 2);
    ck_assert_str_eq(jstr(json_array_get(logs, 0), "level"), "info");
    ck_assert_ptr_nonnull(strstr(jstr(json_array_get(logs, 0), "message"), "2 steps"));
    ck_assert_str_eq(jstr(json_array_get(logs, 1), "level"), "error");
    ck_assert_str_eq(jstr(json_array_get(logs, 1), "step"), "2");
    ck_assert_ptr_nonnull(strstr(jstr(json_array_get(logs, 1), "timestamp"), "T"));
    snprintf(d0, sizeof d0, "%s/templates/my-tpl", g_tmpdir);
    ck_assert_int_lt(stat(d0, &st0), 0);
    resp_free(&r);

    /* Paging: logsOffset skips what the client has, limit bounds an answer (100 unless
     * asked), level filters. Entries added by another connection to the database. */
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    for (int i = 0; i < 150; i++)
        ck_assert_int_eq(
            cp_store_build_log_add(
                s2, bid,
                &(struct cp_store_build_log_entry){
                    .time_ns = al_wall_ns(), .level = i % 2, .step = "1", .message = "line"},
                NULL),
            0);
    cp_store_close(s2);
    char q[400];
    ck_assert_int_eq(count_entries(path), 100);
    snprintf(q, sizeof q, "%s?logsOffset=100", path);
    ck_assert_int_eq(count_entries(q), 52);
    snprintf(q, sizeof q, "%s?logsOffset=1&limit=1", path);
    req(&r, "GET", q, NULL);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "logEntries"), 0), "level"),
                     "error");
    resp_free(&r);
    snprintf(q, sizeof q, "%s?level=error", path);
    ck_assert_int_eq(count_entries(q), 1);
    snprintf(q, sizeof q, "%s?level=info&limit=1000", path);
    ck_assert_int_eq(count_entries(q), 77);
    snprintf(q, sizeof q, "%s?level=loud", path);
    req(&r, "GET", q, NULL);
    assert_error(&r, 400, "level must be");
    resp_free(&r);
    snprintf(q, sizeof q, "%s?logsOffset=-1", path);
    req(&r, "GET", q, NULL);
    assert_error(&r, 400, "logsOffset");
    resp_free(&r);
    req(&r, "GET", "/templates/my-tpl/builds/nope/status", NULL);
    assert_error(&r, 404, "has no build 'nope'");
    resp_free(&r);

    /* Deletion: not a default template, not while a sandbox uses it. */
    char d[400];
    snprintf(d, sizeof d, "%s/templates/t-del/rootfs", g_tmpdir);
    ck_assert_int_eq(al_mkdir_p(d, 0755), 0);
    snprintf(d, sizeof d, "%s/templates/t-del/template.json", g_tmpdir);
    FILE *f = fopen(d, "w");
    fprintf(f, "{\"name\":\"t-del\"}\n");
    fclose(f);
    req(&r, "DELETE", "/templates/base", NULL);
    assert_error(&r, 409, "default template");
    resp_free(&r);
    char id[64];
    create("{\"templateID\":\"t-del\"}", id, NULL);
    req(&r, "DELETE", "/templates/t-del", NULL);
    assert_error(&r, 409, "is used by 1 sandbox");
    ck_assert_ptr_nonnull(strstr(jstr(r.body, "message"), id));
    resp_free(&r);
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "DELETE", "/templates/t-del", NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    snprintf(d, sizeof d, "%s/templates/t-del", g_tmpdir);
    struct stat st;
    ck_assert_int_lt(stat(d, &st), 0);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"t-del\"}");
    assert_error(&r, 404, "template 't-del' not found");
    resp_free(&r);
    req(&r, "DELETE", "/templates/my-tpl", NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    req(&r, "GET", "/templates/my-tpl", NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "GET", path, NULL);
    resp_free(&r);
    snprintf(path, sizeof path, "/templates/my-tpl/builds/%s/status", bid);
    req(&r, "GET", path, NULL);
    assert_error(&r, 404, "has no build");
    resp_free(&r);
    req(&r, "DELETE", "/templates/nope", NULL);
    assert_error(&r, 404, "not found");
    resp_free(&r);
    req(&r, "DELETE", "/templates/..", NULL);
    assert_error(&r, 400, "not a template name");
    resp_free(&r);
}
END_TEST

/* Requests a build of name with definition def; returns its id. */
static void build_start(const char *name, const char *def, char bid[40])
{
    struct resp r;
    char body[200], path[300];
    snprintf(body, sizeof body, "{\"name\":\"%s\"}", name);
    req(&r, "POST", "/v3/templates", body);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    snprintf(bid, 40, "%s", jstr(r.body, "buildID"));
    resp_free(&r);
    snprintf(path, sizeof path, "/v2/templates/%s/builds/%s", name, bid);
    req(&r, "POST", path, def);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    resp_free(&r);
}

static json_t *tpl_json(const char *name)
{
    char p[400];
    snprintf(p, sizeof p, "%s/templates/%s/template.json", g_tmpdir, name);
    json_t *t = json_load_file(p, 0, NULL);
    ck_assert_msg(t != NULL, "no %s", p);
    return t;
}

/* The runner: fromTemplate with ENV, WORKDIR, USER, startCmd and readyCmd makes a template
 * (the base's files linked, not copied), which sandboxes start from; a rebuild replaces it
 * while a sandbox of the old version keeps its files; a failing build leaves the previous
 * version in use. */
START_TEST(template_build_runs)
{
    /* The base: files the new template must share (same inodes), a directory with its mode,
     * a link that points out of the root (kept as a link, never followed). */
    char p[400];
    snprintf(p, sizeof p, "%s/templates/base/rootfs/etc", g_tmpdir);
    ck_assert_int_eq(al_mkdir_p(p, 0750), 0);
    snprintf(p, sizeof p, "%s/templates/base/rootfs/etc/hostname", g_tmpdir);
    FILE *f = fopen(p, "w");
    fprintf(f, "base\n");
    fclose(f);
    struct stat sb, sn;
    ck_assert_int_eq(stat(p, &sb), 0);
    snprintf(p, sizeof p, "%s/templates/base/rootfs/out", g_tmpdir);
    ck_assert_int_eq(symlink("/etc/shadow", p), 0);

    char bid[40], bid2[40], bid3[40];
    build_start("my-tpl",
                "{\"fromTemplate\":\"base\",\"startCmd\":\"python3 -m http.server\","
                "\"readyCmd\":\"sleep 0\",\"steps\":["
                "{\"type\":\"ENV\",\"args\":[\"A\",\"1\",\"B\",\"two\"]},"
                "{\"type\":\"WORKDIR\",\"args\":[\"/app/src\"]},"
                "{\"type\":\"WORKDIR\",\"args\":[\"sub\"]},"
                "{\"type\":\"USER\",\"args\":[\"user\"]}]}",
                bid);
    struct resp r;
    build_wait("my-tpl", bid, &r);
    ck_assert_msg(strcmp(jstr(r.body, "status"), "ready") == 0, "%s", r.raw);
    json_t *logs = json_object_get(r.body, "logEntries");
    ck_assert_ptr_nonnull(strstr(r.raw, "the files of template base"));
    ck_assert_ptr_nonnull(strstr(r.raw, "WORKDIR /app/src/sub"));
    ck_assert_ptr_nonnull(strstr(r.raw, "template my-tpl is ready"));
    ck_assert_str_eq(jstr(json_array_get(logs, json_array_size(logs) - 1), "step"), "finalize");
    /* Its progress stays in the answer once it ended: at the end, of 4 steps, no image. */
    json_t *prog = json_object_get(r.body, "progress");
    ck_assert_msg(json_is_object(prog), "%s", r.raw);
    ck_assert_str_eq(jstr(prog, "step"), "finalize");
    ck_assert_int_eq(json_integer_value(json_object_get(prog, "steps")), 4);
    ck_assert_ptr_null(json_object_get(prog, "image"));
    resp_free(&r);

    json_t *t = tpl_json("my-tpl");
    ck_assert_str_eq(jstr(t, "name"), "my-tpl");
    ck_assert_str_eq(jstr(json_object_get(t, "env"), "A"), "1");
    ck_assert_str_eq(jstr(json_object_get(t, "env"), "B"), "two");
    ck_assert_str_eq(jstr(t, "workdir"), "/app/src/sub");
    ck_assert_str_eq(jstr(t, "user"), "user");
    ck_assert_str_eq(jstr(t, "start_cmd"), "python3 -m http.server");
    ck_assert_str_eq(jstr(t, "ready_cmd"), "sleep 0");
    ck_assert_str_eq(jstr(json_object_get(t, "build"), "id"), bid);
    json_decref(t);
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/etc/hostname", g_tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
    ck_assert_uint_eq(sn.st_ino, sb.st_ino); /* linked */
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/etc", g_tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
    ck_assert_int_eq(sn.st_mode & 07777, 0750);
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/app/src/sub", g_tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
    ck_assert(S_ISDIR(sn.st_mode));
    snprintf(p, sizeof p, "%s/templates/my-tpl/rootfs/out", g_tmpdir);
    char lt[64] = "";
    ck_assert_int_eq(readlink(p, lt, sizeof lt - 1), 11);
    ck_assert_str_eq(lt, "/etc/shadow");

    req(&r, "GET", "/templates/my-tpl", NULL);
    ck_assert_str_eq(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "status"), "ready");
    ck_assert_ptr_nonnull(jstr(json_array_get(json_object_get(r.body, "builds"), 0), "finishedAt"));
    resp_free(&r);
    req(&r, "GET", "/templates", NULL);
    for (size_t i = 0; i < json_array_size(r.body); i++) {
        json_t *e = json_array_get(r.body, i);
        if (strcmp(jstr(e, "templateID"), "my-tpl") == 0) {
            ck_assert_str_eq(jstr(e, "buildID"), bid);
            ck_assert_str_eq(jstr(e, "buildStatus"), "ready");
        }
    }
    resp_free(&r);

    /* A sandbox of it; a rebuild replaces the template, the old version's files stay while
     * the sandbox exists. */
    char id[64];
    create("{\"templateID\":\"my-tpl\"}", id, NULL);
    build_start("my-tpl",
                "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"2\"]}]}",
                bid2);
    build_wait("my-tpl", bid2, &r);
    ck_assert_msg(strcmp(jstr(r.body, "status"), "ready") == 0, "%s", r.raw);
    resp_free(&r);
    t = tpl_json("my-tpl");
    ck_assert_str_eq(jstr(json_object_get(t, "env"), "A"), "2");
    ck_assert_ptr_null(json_object_get(t, "start_cmd"));
    json_decref(t);
    snprintf(p, sizeof p, "%s/templates/.my-tpl.v-%s/template.json", g_tmpdir, bid);
    ck_assert_int_eq(stat(p, &sn), 0);

    /* A build that fails leaves the current version in use and nothing of its own. */
    build_start("my-tpl",
                "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":[\"A\",\"3\"]},"
                "{\"type\":\"WORKDIR\",\"args\":[\"../../x\"]}]}",
                bid3);
    build_wait("my-tpl", bid3, &r);
    ck_assert_str_eq(jstr(r.body, "status"), "error");
    ck_assert_str_eq(jstr(json_object_get(r.body, "reason"), "step"), "2");
    ck_assert_ptr_nonnull(strstr(jstr(json_object_get(r.body, "reason"), "message"),
                                 "step 2 (WORKDIR ../../x): not a path without '..'"));
    ck_assert_str_eq(jstr(json_object_get(r.body, "progress"), "step"), "2"); /* where it ended */
    resp_free(&r);
    t = tpl_json("my-tpl");
    ck_assert_str_eq(jstr(json_object_get(t, "build"), "id"), bid2);
    json_decref(t);
    snprintf(p, sizeof p, "%s/templates/.my-tpl.build-%s", g_tmpdir, bid3);
    ck_assert_int_lt(stat(p, &sn), 0);
    req(&r, "GET", "/templates/my-tpl", NULL);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "builds")), 3);
    resp_free(&r);
    req(&r, "GET", "/templates", NULL);
    for (size_t i = 0; i < json_array_size(r.body); i++) {
        json_t *e = json_array_get(r.body, i);
        if (strcmp(jstr(e, "templateID"), "my-tpl") == 0) {
            ck_assert_str_eq(jstr(e, "buildID"), bid2); /* the newest ready one */
            ck_assert_str_eq(jstr(e, "buildStatus"), "error");
        }
    }
    resp_free(&r);

    /* Once the sandbox is gone, deleting the template takes the old version too. */
    char path[200];
    snprintf(path, sizeof path, "/sandboxes/%s", id);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    req(&r, "DELETE", "/templates/my-tpl", NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    snprintf(p, sizeof p, "%s/templates/.my-tpl.v-%s", g_tmpdir, bid);
    for (int i = 0; i < 1000 && stat(p, &sn) == 0; i++)
        usleep(10000);
    ck_assert_int_lt(stat(p, &sn), 0);
    /* The base is untouched. */
    snprintf(p, sizeof p, "%s/templates/base/rootfs/etc/hostname", g_tmpdir);
    ck_assert_int_eq(stat(p, &sn), 0);
}
END_TEST

/* The JSON template.json of the version dir (relative to the templates directory). */
static const char *tpl_env_a(const char *dir, char *out, size_t len)
{
    char p[400];
    snprintf(p, sizeof p, "%s/templates/%s/template.json", g_tmpdir, dir);
    json_t *t = json_load_file(p, 0, NULL);
    snprintf(out, len, "%s", t ? jstr(json_object_get(t, "env"), "A") : "(none)");
    json_decref(t);
    return out;
}

/* Tags (E2B's NAME:TAG): a build gets the default tag unless tags are named; POST
 * /templates/tags points tags at the build a target names, DELETE removes them; sandboxes
 * start from a tag's version or a build id's, which is kept while a tag names it or a sandbox
 * uses it and removed once neither does. */
START_TEST(template_tags)
{
    char a[40], b[40], c[40], e[16], path[300], body[400], dir[200], p[400];
    const char *env1 = "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":"
                       "[\"A\",\"1\"]}]}";
    const char *env2 = "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":"
                       "[\"A\",\"2\"]}]}";
    const char *env3 = "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":"
                       "[\"A\",\"3\"]}]}";
    struct resp r;
    build_tagged("{\"name\":\"tg\"}", "tg", env1, a, "[\"default\"]");
    ck_assert_str_eq(tpl_env_a("tg", e, sizeof e), "1");
    req(&r, "POST", "/templates/tags", "{\"target\":\"tg\",\"tags\":[\"stable\",\"v1\"]}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "buildID"), a);
    ck_assert_uint_eq(json_array_size(json_object_get(r.body, "tags")), 2);
    resp_free(&r);

    /* A rebuild moves the default tag; the tagged version stays, under its build id. */
    build_tagged("{\"name\":\"tg\"}", "tg", env2, b, "[\"default\"]");
    ck_assert_str_eq(tpl_env_a("tg", e, sizeof e), "2");
    snprintf(dir, sizeof dir, ".tg.v-%s", a);
    ck_assert_str_eq(tpl_env_a(dir, e, sizeof e), "1");
    req(&r, "GET", "/templates/tg/tags", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    ck_assert_uint_eq(json_array_size(r.body), 3);
    const char *want[][2] = {{"default", b}, {"stable", a}, {"v1", a}};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_str_eq(jstr(json_array_get(r.body, i), "tag"), want[i][0]);
        ck_assert_str_eq(jstr(json_array_get(r.body, i), "buildID"), want[i][1]);
        ck_assert_ptr_nonnull(strstr(jstr(json_array_get(r.body, i), "createdAt"), "T"));
    }
    resp_free(&r);

    /* Sandboxes by tag and by build id; the sandbox says what it was asked for. */
    char s1[64], s2[64];
    create("{\"templateID\":\"tg:stable\"}", s1, NULL);
    snprintf(body, sizeof body, "{\"templateID\":\"tg:%s\"}", b);
    create(body, s2, NULL);
    snprintf(path, sizeof path, "/sandboxes/%s", s1);
    req(&r, "GET", path, NULL);
    ck_assert_str_eq(jstr(r.body, "templateID"), "tg:stable");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"tg:nope\"}");
    assert_error(&r, 404, "template 'tg' has no tag 'nope' (its tags: ");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes",
        "{\"templateID\":\"tg:00000000-0000-4000-8000-000000000000\"}");
    assert_error(&r, 404, "no kept version");
    resp_free(&r);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"tg:a b\"}");
    assert_error(&r, 400, "NAME:TAG");
    resp_free(&r);

    /* Assigning and removing, refused with reasons. */
    const char *bad[][3] = {
        {"POST", "{\"target\":\"tg:nope\",\"tags\":[\"x\"]}", "404 has no tag 'nope'"},
        {"POST", "{\"target\":\"nope\",\"tags\":[\"x\"]}", "404 template 'nope' not found"},
        {"POST", "{\"target\":\"tg\",\"tags\":[]}", "400 no tags"},
        {"POST", "{\"target\":\"tg\",\"tags\":[\"\"]}", "400 is not a tag"},
        {"POST", "{\"target\":\"tg\"}", "400 \"tags\""},
        {"POST", "{\"target\":\"base\",\"tags\":[\"x\"]}", "409 default template"},
        {"POST", "{\"target\":\"tg\",\"tags\":[\"x\"],\"colour\":1}", "400 colour"},
        {"DELETE", "{\"name\":\"tg\",\"tags\":[\"default\"]}", "400 cannot be removed"},
        {"DELETE", "{\"name\":\"tg\",\"tags\":[\"v1\",\"nope\"]}", "404 has no tag 'nope'"},
        {"DELETE", "{\"name\":\"nope\",\"tags\":[\"v1\"]}", "404 has no tags"},
        {"DELETE", "{\"name\":\"tg:v1\",\"tags\":[\"v1\"]}", "400 not a template name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        req(&r, bad[i][0], "/templates/tags", bad[i][1]);
        assert_error(&r, atoi(bad[i][2]), bad[i][2] + 4);
        resp_free(&r);
    }
    req(&r, "GET", "/templates/tg/tags", NULL);
    ck_assert_uint_eq(json_array_size(r.body), 3); /* v1 stayed: nothing half-done */
    resp_free(&r);

    /* NAME:TAG at build time: the tag only, the default stays. */
    build_tagged("{\"name\":\"tg:v3\",\"tags\":[\"v3\",\"rc\"]}", "tg", env3, c, "[\"v3\",\"rc\"]");
    ck_assert_str_eq(tpl_env_a("tg", e, sizeof e), "2");
    snprintf(dir, sizeof dir, ".tg.v-%s", c);
    ck_assert_str_eq(tpl_env_a(dir, e, sizeof e), "3");
    /* The default moves by assignment; the version it left is kept for sandbox s2. */
    req(&r, "POST", "/templates/tags", "{\"target\":\"tg:rc\",\"tags\":[\"default\"]}");
    ck_assert_msg(r.status == 201, "%d %s", r.status, r.raw);
    ck_assert_str_eq(jstr(r.body, "buildID"), c);
    resp_free(&r);
    ck_assert_str_eq(tpl_env_a("tg", e, sizeof e), "3");
    snprintf(p, sizeof p, "%s/templates/.tg.v-%s", g_tmpdir, b);
    ck_assert(exists_within(p, true));

    /* Tags removed: version a stays while s1 uses it, goes with s1. */
    req(&r, "DELETE", "/templates/tags", "{\"name\":\"tg\",\"tags\":[\"stable\",\"v1\"]}");
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    snprintf(p, sizeof p, "%s/templates/.tg.v-%s", g_tmpdir, a);
    ck_assert(exists_within(p, true));
    snprintf(path, sizeof path, "/sandboxes/%s", s1);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    ck_assert_msg(exists_within(p, false), "%s stays", p);
    snprintf(path, sizeof path, "/sandboxes/%s", s2);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    snprintf(p, sizeof p, "%s/templates/.tg.v-%s", g_tmpdir, b);
    ck_assert_msg(exists_within(p, false), "%s stays", p);

    /* Deleting the template takes every version and the link. */
    req(&r, "DELETE", "/templates/tg", NULL);
    ck_assert_msg(r.status == 204, "%d %s", r.status, r.raw);
    resp_free(&r);
    snprintf(p, sizeof p, "%s/templates/.tg.v-%s", g_tmpdir, c);
    ck_assert(exists_within(p, false));
    struct stat st;
    snprintf(p, sizeof p, "%s/templates/tg", g_tmpdir);
    ck_assert_int_lt(lstat(p, &st), 0);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"tg:v3\"}");
    assert_error(&r, 404, "not found");
    resp_free(&r);
}
END_TEST

/* A template directory made before versions were kept (no build in its template.json): a
 * build exchanges it for the link and keeps it while a sandbox of the template exists; that
 * sandbox's build is not known, so it keeps every version until it is gone. */
START_TEST(template_tags_legacy_dir)
{
    char p[400], a[40], b[40], sid[64], path[200], e[16];
    snprintf(p, sizeof p, "%s/templates/t-leg/rootfs", g_tmpdir);
    ck_assert_int_eq(al_mkdir_p(p, 0755), 0);
    snprintf(p, sizeof p, "%s/templates/t-leg/template.json", g_tmpdir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"name\":\"t-leg\",\"env\":{\"A\":\"0\"}}\n");
    fclose(f);
    create("{\"templateID\":\"t-leg\"}", sid, NULL);
    const char *env1 = "{\"fromTemplate\":\"base\",\"steps\":[{\"type\":\"ENV\",\"args\":"
                       "[\"A\",\"1\"]}]}";
    build_tagged("{\"name\":\"t-leg\"}", "t-leg", env1, a, "[\"default\"]");
    ck_assert_str_eq(tpl_env_a("t-leg", e, sizeof e), "1");
    char dir[200];
    snprintf(dir, sizeof dir, ".t-leg.prev-%s", a);
    ck_assert_str_eq(tpl_env_a(dir, e, sizeof e), "0");
    build_tagged("{\"name\":\"t-leg\"}", "t-leg", env1, b, "[\"default\"]");
    char va[400], prev[400];
    snprintf(va, sizeof va, "%s/templates/.t-leg.v-%s", g_tmpdir, a);
    snprintf(prev, sizeof prev, "%s/templates/.t-leg.prev-%s", g_tmpdir, a);
    struct stat st;
    ck_assert_int_eq(stat(va, &st), 0); /* untagged, but the sandbox may run on it */
    ck_assert_int_eq(stat(prev, &st), 0);
    struct resp r;
    snprintf(path, sizeof path, "/sandboxes/%s", sid);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);
    ck_assert_msg(exists_within(va, false), "%s stays", va);
    ck_assert_msg(exists_within(prev, false), "%s stays", prev);
    snprintf(p, sizeof p, "%s/templates/.t-leg.v-%s", g_tmpdir, b);
    ck_assert_int_eq(stat(p, &st), 0);
}
END_TEST

/* A template with startCmd/readyCmd: the backend is handed both, the creation answers only
 * once the agent's GET /ready says ready (asked with the sandbox's token); a start the agent
 * reports failed, and one not ready within sandboxes.ready_timeout, fail the creation with
 * what the agent said, and leave no sandbox. A template without them is not waited for. */
static void ready_set(const char *reply, int after)
{
    pthread_mutex_lock(&g_ready_mu);
    snprintf(g_ready_reply, sizeof g_ready_reply, "%s", reply);
    g_ready_after = after;
    g_ready_polls = 0;
    pthread_mutex_unlock(&g_ready_mu);
}

static int ready_polls(void)
{
    pthread_mutex_lock(&g_ready_mu);
    int n = g_ready_polls;
    pthread_mutex_unlock(&g_ready_mu);
    return n;
}

static size_t sandboxes_listed(void)
{
    struct resp r;
    req(&r, "GET", "/sandboxes", NULL);
    ck_assert_msg(r.status == 200, "%d %s", r.status, r.raw);
    size_t n = json_array_size(r.body);
    resp_free(&r);
    return n;
}

/* Kills the started sandbox's process once airlockd has polled /ready twice (bounded). */
static void *kill_when_polled(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5000 && (ready_polls() < 2 || !atomic_load(&g_started_pid)); i++)
        usleep(1000);
    int pid = atomic_load(&g_started_pid);
    if (pid > 0)
        kill(pid, SIGKILL);
    return NULL;
}

START_TEST(template_start_ready)
{
    char p[400];
    snprintf(p, sizeof p, "%s/templates/t-svc/rootfs", g_tmpdir);
    ck_assert_int_eq(al_mkdir_p(p, 0755), 0);
    snprintf(p, sizeof p, "%s/templates/t-svc/template.json", g_tmpdir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"name\":\"t-svc\",\"start_cmd\":\"run-server\",\"ready_cmd\":"
               "\"probe-server\"}\n");
    fclose(f);
    const char *starting = "{\"state\":\"starting\",\"attempts\":3,\"lastStatus\":\"exit status "
                           "7\",\"lastOutput\":\"connection refused\\n\"}";
    /* Ready at the fourth poll. */
    ready_set(starting, 3);
    char sid[64], tok[80];
    create("{\"templateID\":\"t-svc\"}", sid, tok);
    ck_assert_int_eq(ready_polls(), 4);
    pthread_mutex_lock(&g_ready_mu);
    ck_assert_str_eq(g_started_cmds, "run-server|probe-server");
    ck_assert_str_eq(g_ready_token, tok);
    pthread_mutex_unlock(&g_ready_mu);
    struct resp r;
    char path[200];
    snprintf(path, sizeof path, "/sandboxes/%s", sid);
    req(&r, "DELETE", path, NULL);
    ck_assert_int_eq(r.status, 204);
    resp_free(&r);

    /* Reported failed: a 500 with the agent's reason and its last attempt. */
    int stops = g_stops;
    ready_set("{\"state\":\"failed\",\"attempts\":1,\"lastStatus\":\"exit status 1\","
              "\"lastOutput\":\"\",\"error\":\"startCmd 'run-server' ended (exit status 3) before "
              "readyCmd succeeded\"}",
              -1);
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"t-svc\"}");
    assert_error(&r, 500,
                 "the template's start failed: startCmd 'run-server' ended (exit status 3) "
                 "before readyCmd succeeded (readyCmd: 1 attempt(s), the last: exit status 1)");
    resp_free(&r);
    ck_assert_int_eq(sandboxes_listed(), 0);
    ck_assert_int_eq(g_stops, stops + 1);

    /* Never ready: after sandboxes.ready_timeout (1 s), with what the last poll said. */
    ready_set(starting, -1);
    uint64_t t0 = al_now_ns();
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"t-svc\"}");
    double s = (double)(al_now_ns() - t0) / 1e9;
    assert_error(&r, 500,
                 "the template's readyCmd 'probe-server' did not succeed within 1.0 s "
                 "(sandboxes.ready_timeout): 3 attempt(s), the last: exit status 7, output: "
                 "connection refused");
    const char *m = jstr(r.body, "message");
    ck_assert_msg(m[strlen(m) - 1] == 'd', "the output's newline is kept: %s", m);
    resp_free(&r);
    ck_assert_msg(s >= 1.0 && s < 9.0, "the creation took %.2f s", s);
    ck_assert_int_gt(ready_polls(), 1);
    ck_assert_int_eq(sandboxes_listed(), 0);
    ck_assert_int_eq(g_stops, stops + 2);

    /* Its process ends while it waits: the creation fails then, not at the timeout. */
    ready_set(starting, -1);
    atomic_store(&g_started_pid, 0);
    pthread_t killer;
    ck_assert_int_eq(pthread_create(&killer, NULL, kill_when_polled, NULL), 0);
    t0 = al_now_ns();
    req(&r, "POST", "/v2/sandboxes", "{\"templateID\":\"t-svc\"}");
    s = (double)(al_now_ns() - t0) / 1e9;
    pthread_join(killer, NULL);
    assert_error(&r, 500,
                 "the sandbox ended before it was ready (its template's readyCmd 'probe-server' "
                 "had not succeeded): 3 attempt(s), the last: exit status 7");
    resp_free(&r);
    ck_assert_int_eq(sandboxes_listed(), 0);
    ck_assert_int_eq(g_stops, stops + 3);

    /* No startCmd/readyCmd: nothing asks /ready. */
    ready_set(starting, -1);
    create("{\"templateID\":\"base\"}", sid, NULL);
    ck_assert_int_eq(ready_polls(), 0);
    pthread_mutex_lock(&g_ready_mu);
    ck_assert_str_eq(g_started_cmds, "-|-");
    pthread_mutex_unlock(&g_ready_mu);
}
END_TEST

/* The RUN steps' policy a build asks for (X-Airlock-Build-Policy) is one the API key may
 * use, as a sandbox's metadata["airlock.policy"]; refused before anything is built. */
START_TEST(template_build_policy)
{
    char key[CP_APIKEY_LEN + 1], path[300], bid[40];
    add_key("builder", CP_ROLE_ADMIN, "other", key);
    struct resp r;
    req_full(&r, g_target, "POST", "/v3/templates", key, "{\"name\":\"bp\"}", NULL, 0);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    snprintf(bid, sizeof bid, "%s", jstr(r.body, "buildID"));
    resp_free(&r);
    snprintf(path, sizeof path, "/v2/templates/bp/builds/%s", bid);
    const char *def = "{\"fromTemplate\":\"base\"}";
    struct al_http_header h[2] = {{"X-Airlock-Build-Policy", "default"},
                                  {"X-Airlock-Build-Policy", "other"}};
    req_full(&r, g_target, "POST", path, key, def, h, 1);
    assert_error(&r, 403, "may not use policy \"default\" (it may use: other)");
    resp_free(&r);
    req_full(&r, g_target, "POST", path, key, def, h, 2);
    assert_error(&r, 400, "more than one X-Airlock-Build-Policy header");
    resp_free(&r);
    /* A key that may use any policy: still one of the policies directory. */
    struct al_http_header bad[2] = {{"X-Airlock-Build-Policy", "nope"},
                                    {"X-Airlock-Build-Policy", "../default"}};
    req_full(&r, g_target, "POST", path, KEY_ENV, def, bad, 1);
    assert_error(&r, 400, "no policy \"nope\"");
    ck_assert_ptr_nonnull(strstr(r.raw, "X-Airlock-Build-Policy header names a file"));
    resp_free(&r);
    req_full(&r, g_target, "POST", path, KEY_ENV, def, bad + 1, 1);
    assert_error(&r, 400, "X-Airlock-Build-Policy header must name a policy");
    resp_free(&r);
    /* Nothing was started by the refusals: the build is still waiting, and starts now. */
    req_full(&r, g_target, "POST", path, key, def, h + 1, 1);
    ck_assert_msg(r.status == 202, "%d %s", r.status, r.raw);
    resp_free(&r);
    build_wait("bp", bid, &r);
    ck_assert_msg(strcmp(jstr(r.body, "status"), "ready") == 0, "%s", r.raw);
    resp_free(&r);
    /* (the record, through a second connection: the loop thread owns airlockd's) */
    char db[300];
    snprintf(db, sizeof db, "%s/airlockd.db", g_tmpdir);
    struct cp_store *s2;
    ck_assert_int_eq(cp_store_open(db, &s2, NULL), 0);
    struct cp_store_build b;
    struct al_error err = {0};
    ck_assert_msg(cp_store_build_load(s2, bid, &b, &err) == 0, "%s", al_error_str(&err));
    ck_assert_str_eq(jstr(b.doc, "build_policy"), "other");
    cp_store_build_free(&b);
    cp_store_close(s2);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_rest_templates");
    TCase *t = cp_rest_tcase("templates");
    tcase_add_test(t, templates_list_and_alias);
    tcase_add_test(t, template_builds_api);
    tcase_add_test(t, template_build_runs);
    tcase_add_test(t, template_tags);
    tcase_add_test(t, template_tags_legacy_dir);
    tcase_add_test(t, template_start_ready);
    tcase_add_test(t, template_build_policy);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
