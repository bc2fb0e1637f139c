/* tests/unit/common/auditlog_fixture: what the test_auditlog_* suites share
 * (auditlog_fixture.h). */
#include "auditlog_fixture.h"

#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/util.h"

char g_root[256];

void root_setup(void)
{
    al_test_tmpdir(g_root, sizeof g_root, "auditlog");
}

void root_teardown(void)
{
    al_test_rmtree(g_root);
}

const char *tdir(const char *name)
{
    static char ring[4][512];
    static int k;
    char *d = ring[k++ % 4];
    snprintf(d, 512, "%s/%s", g_root, name);
    ck_assert_int_eq(al_mkdir_p(d, 0700), 0);
    return d;
}

struct al_auditlog *open_log(const char *dir, struct al_auditlog_opts *extra)
{
    struct al_auditlog_opts o = {0};
    if (extra)
        o = *extra;
    o.dir = dir;
    o.prefix = "test";
    struct al_auditlog *l = NULL;
    struct al_error e = {0};
    int rc = al_auditlog_open(&o, &l, &e);
    ck_assert_msg(rc == 0, "open: %s", al_error_str(&e));
    return l;
}

void append_n(struct al_auditlog *l, int n, int base)
{
    for (int i = 0; i < n; i++) {
        json_t *r = json_pack("{s:s,s:i,s:s}", "event", "request", "n", base + i, "host",
                              "api.example.com");
        uint64_t seq = 0;
        ck_assert_int_eq(al_auditlog_append(l, r, &seq), 0);
        ck_assert_uint_gt(seq, 0);
        json_decref(r);
    }
}

void verify_dir(const char *dir, const char *ckpt, struct al_auditlog_verify_result *res)
{
    struct al_auditlog_verify_opts o = {.dir = dir, .prefix = "test", .checkpoint_file = ckpt};
    struct al_error e = {0};
    int rc = al_auditlog_verify(&o, res, &e);
    ck_assert_msg(rc == 0, "verify could not run: %s", al_error_str(&e));
}

void expect_intact(const char *dir)
{
    struct al_auditlog_verify_result r;
    verify_dir(dir, NULL, &r);
    if (r.verdict != AL_AUDIT_INTACT)
        al_auditlog_verify_print(&r, stderr);
    ck_assert_str_eq(al_auditlog_verdict_name(r.verdict), "intact");
}

void lines_load(const char *path, struct lines *L)
{
    char *data;
    size_t len;
    ck_assert_int_eq(al_read_file(path, 64 << 20, &data, &len, NULL), 0);
    L->v = NULL;
    L->n = 0;
    size_t pos = 0;
    while (pos < len) {
        char *nl = memchr(data + pos, '\n', len - pos);
        if (!nl)
            break;
        L->v = realloc(L->v, (L->n + 1) * sizeof *L->v);
        L->v[L->n++] = strndup(data + pos, (size_t)(nl - (data + pos)));
        pos = (size_t)(nl - data) + 1;
    }
    L->tail = strndup(data + pos, len - pos);
    free(data);
}

void lines_save(const char *path, struct lines *L)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < L->n; i++) {
        if (L->v[i])
            fprintf(f, "%s\n", L->v[i]);
    }
    fputs(L->tail, f);
    fclose(f);
}

void lines_free(struct lines *L)
{
    for (size_t i = 0; i < L->n; i++)
        free(L->v[i]);
    free(L->v);
    free(L->tail);
}

size_t log_files(const char *dir, char files[][600], size_t max)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls %s/test-*.jsonl 2>/dev/null | sort", dir);
    FILE *p = popen(cmd, "r");
    size_t n = 0;
    while (n < max && fgets(files[n], 600, p)) {
        files[n][strcspn(files[n], "\n")] = '\0';
        n++;
    }
    pclose(p);
    return n;
}

uint64_t line_seq(const char *line)
{
    json_t *j = json_loads(line, 0, NULL);
    uint64_t s = (uint64_t)json_integer_value(json_object_get(j, "seq"));
    json_decref(j);
    return s;
}

bool line_is_ckpt(const char *line)
{
    return strstr(line, "\"auditlog\":{") != NULL;
}

size_t make_log(const char *dir, int records)
{
    struct al_auditlog_opts o = {.rotate_bytes = 8192, .checkpoint_records = 25};
    struct al_auditlog *l = open_log(dir, &o);
    append_n(l, records, 0);
    ck_assert_int_eq(al_auditlog_close(l), 0);
    char files[64][600];
    return log_files(dir, files, 64);
}

size_t log_grep(const char *dir, const char *needle)
{
    char files[64][600];
    size_t n = log_files(dir, files, 64), hits = 0;
    for (size_t i = 0; i < n; i++) {
        struct lines L;
        lines_load(files[i], &L);
        for (size_t k = 0; k < L.n; k++)
            hits += strstr(L.v[k], needle) != NULL;
        lines_free(&L);
    }
    return hits;
}

void expect_pruned(const char *d, const char *rule, struct al_auditlog_verify_result *r)
{
    verify_dir(d, NULL, r);
    al_auditlog_verify_print(r, stderr);
    ck_assert_str_eq(al_auditlog_verdict_name(r->verdict), "intact");
    ck_assert(!r->starts_at_genesis);
    ck_assert(r->start_anchored);
    ck_assert_uint_gt(r->retention_seq, 0);
    ck_assert_uint_eq(r->retained_from, r->first_seq);
    ck_assert_uint_ge(r->n_pruned, 1);
    ck_assert_uint_eq(r->pruned[0].first_seq, 1);
    ck_assert_uint_eq(r->pruned[r->n_pruned - 1].last_seq, r->first_seq - 1);
    bool named = false;
    for (size_t i = 0; i < r->n_pruned; i++)
        named = named || strcmp(r->pruned[i].rule, rule) == 0;
    ck_assert_msg(named, "no range deleted by %s", rule);
    /* The --json report says the same. */
    json_t *j = al_auditlog_verify_json(r);
    json_t *ret = json_object_get(j, "retention");
    ck_assert_int_eq(json_integer_value(json_object_get(ret, "retained_from")),
                     (json_int_t)r->first_seq);
    ck_assert_uint_eq(json_array_size(json_object_get(ret, "pruned")), r->n_pruned);
    json_decref(j);
}

size_t make_pruned_log(const char *d, char files[][600])
{
    struct al_auditlog_opts o = {.rotate_bytes = 4096, .retain_files = 5, .checkpoint_records = 25};
    struct al_auditlog *l = open_log(d, &o);
    for (int round = 0; round < 6; round++) {
        append_n(l, 100, round * 100);
        ck_assert_int_eq(al_auditlog_sync(l, 0), 0);
    }
    ck_assert_int_eq(al_auditlog_close(l), 0);
    size_t n = log_files(d, files, 64);
    ck_assert_uint_ge(n, 4);
    struct al_auditlog_verify_result r;
    expect_pruned(d, "max_files", &r);
    return n;
}

void middle(const char *d, char *path, struct lines *L)
{
    char files[64][600];
    size_t n = log_files(d, files, 64);
    ck_assert_uint_ge(n, 3);
    snprintf(path, 600, "%s", files[n / 2]);
    lines_load(path, L);
    ck_assert_uint_ge(L->n, 10);
}

void expect_verdict(const char *d, const char *ckpt, enum al_auditlog_verdict v, const char *path,
                    uint64_t line, uint64_t seq)
{
    struct al_auditlog_verify_result r;
    verify_dir(d, ckpt, &r);
    al_auditlog_verify_print(&r, stderr);
    ck_assert_str_eq(al_auditlog_verdict_name(r.verdict), al_auditlog_verdict_name(v));
    if (path)
        ck_assert_str_eq(r.file, path);
    if (line)
        ck_assert_uint_eq(r.line, line);
    if (seq)
        ck_assert_uint_eq(r.seq, seq);
    ck_assert(strlen(r.reason) > 20);
}

size_t plain_index(struct lines *L)
{
    for (size_t i = 3; i + 2 < L->n; i++) {
        if (!line_is_ckpt(L->v[i - 1]) && !line_is_ckpt(L->v[i]) && !line_is_ckpt(L->v[i + 1]) &&
            !line_is_ckpt(L->v[i + 2]))
            return i;
    }
    ck_abort_msg("no plain record");
    return 0;
}

TCase *auditlog_tcase(const char *name)
{
    TCase *t = tcase_create(name);
    tcase_add_unchecked_fixture(t, root_setup, root_teardown);
    tcase_set_timeout(t, 60);
    return t;
}
