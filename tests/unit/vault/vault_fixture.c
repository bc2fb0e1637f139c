/* tests/unit/vault/vault_fixture: what the test_vault_* suites share (vault_fixture.h). */
#include "vault_fixture.h"

#include <ftw.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

char g_root[256];

void root_setup(void)
{
    al_test_tmpdir(g_root, sizeof g_root, "vault");
    chmod(g_root, 0755);
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
    return d;
}

const char *vdir(const char *name)
{
    const char *d = tdir(name);
    struct al_error e = {0};
    int rc = vault_store_init(d, NULL, &e);
    ck_assert_msg(rc == 0, "init: %s", al_error_str(&e));
    return d;
}

struct vault_store *sopen(const char *d)
{
    struct vault_store *s = NULL;
    struct al_error e = {0};
    int rc = vault_store_open(d, NULL, &s, &e);
    ck_assert_msg(rc == 0, "open: %s", al_error_str(&e));
    return s;
}

void put(struct vault_store *s, const char *name, const char *value, bool create,
         const char *const *hosts, size_t nh)
{
    struct vault_value v;
    ck_assert_int_eq(vault_value_set(&v, value, strlen(value)), 0);
    struct vault_put p = {.name = name,
                          .value = &v,
                          .hosts = hosts,
                          .n_hosts = nh,
                          .set_hosts = hosts != NULL,
                          .description = create ? "test" : NULL};
    struct al_error e = {0};
    int rc = create ? vault_store_create(s, &p, "uid 0 (test)", NULL, &e)
                    : vault_store_rotate(s, &p, "uid 0 (test)", NULL, &e);
    ck_assert_msg(rc == 0, "put %s: %s", name, al_error_str(&e));
    vault_value_free(&v);
}

void expect_value(struct vault_store *s, const char *name, uint32_t version, const char *want)
{
    const struct vault_secret *sec = vault_catalog_find(vault_store_catalog(s), name);
    ck_assert_ptr_nonnull(sec);
    struct vault_value v;
    struct al_error e = {0};
    int rc = vault_store_value(s, sec, version, &v, &e);
    ck_assert_msg(rc == 0, "value %s: %s", name, al_error_str(&e));
    ck_assert_uint_eq(v.len, strlen(want));
    ck_assert(memcmp(v.data, want, v.len) == 0);
    vault_value_free(&v);
}

char *slurp(const char *path, size_t *len)
{
    char *d = NULL;
    size_t l = 0;
    if (al_read_file(path, 64 << 20, &d, &l, NULL) != 0)
        return NULL;
    if (len)
        *len = l;
    return d;
}

void spit(const char *path, const char *d, size_t len)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(d, 1, len, f), len);
    fclose(f);
}

char *vfile(const char *d)
{
    static char p[600];
    snprintf(p, sizeof p, "%s/" VAULT_FILE, d);
    return p;
}

int open_err(const char *d, struct al_error *e)
{
    struct vault_store *s = NULL;
    memset(e, 0, sizeof *e);
    int rc = vault_store_open(d, NULL, &s, e);
    vault_store_close(s);
    return rc;
}

void env_open(struct svc_env *e, const char *name)
{
    env_open_exe(e, name, NULL);
}

void env_open_exe(struct svc_env *e, const char *name, const char *egress_exe)
{
    memset(e, 0, sizeof *e);
    e->dir = vdir(name);
    e->store = sopen(e->dir);
    snprintf(e->audit_dir, sizeof e->audit_dir, "%s/" VAULT_AUDIT_DIR, e->dir);
    struct al_auditlog_opts ao = {.dir = e->audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    ck_assert_int_eq(al_auditlog_open(&ao, &e->audit, NULL), 0);
    struct vault_service_opts so = {
        .store = e->store,
        .audit = e->audit,
        .roles = {.egress_set = true,
                  .egress_uid = EGRESS_UID,
                  .reader_set = true,
                  .reader_uid = READER_UID,
                  .admin_group_set = true,
                  .admin_gid = ADMIN_GID},
        .cache_max_age_ms = 30000,
    };
    if (egress_exe)
        ck_assert_int_eq(vault_roles_set_egress_exe(&so.roles, egress_exe, NULL), 0);
    ck_assert_int_eq(vault_service_new(&so, &e->svc), 0);
}

void env_close(struct svc_env *e)
{
    vault_service_free(e->svc);
    ck_assert_int_eq(al_auditlog_close(e->audit), 0);
    vault_store_close(e->store);
}

const struct vault_peer ROOT = {0, 0, 1};
const struct vault_peer EGRESS = {EGRESS_UID, EGRESS_UID, 2};
const struct vault_peer READER = {READER_UID, READER_UID, 3};
const struct vault_peer GROUPADMIN = {OTHER_UID + 1, ADMIN_GID, 4};
const struct vault_peer OTHER = {OTHER_UID, OTHER_UID, 5};

int api(struct svc_env *e, const struct vault_peer *p, const char *method, const char *path,
        const char *query, const char *body, json_t **out, struct vault_fetched *f)
{
    json_t *b = body ? json_loads(body, 0, NULL) : NULL;
    struct vault_api_req rq = {
        .peer = p, .method = method, .path = path, .query = query, .body = b};
    int st = vault_api_handle(e->svc, &rq, out, f);
    json_decref(b);
    return st;
}

int create_b64(struct svc_env *e, const struct vault_peer *p, const char *name, const char *value,
               const char *extra)
{
    char b64[256];
    sodium_bin2base64(b64, sizeof b64, (const unsigned char *)value, strlen(value),
                      sodium_base64_VARIANT_ORIGINAL);
    char body[1024], path[256];
    snprintf(body, sizeof body, "{\"value_b64\":\"%s\"%s}", b64, extra ? extra : "");
    snprintf(path, sizeof path, "/v1/secrets/%s", name);
    json_t *out = NULL;
    int st = api(e, p, "POST", path, "", body, &out, NULL);
    json_decref(out);
    return st;
}

int fetch(struct svc_env *e, const struct vault_peer *p, const char *name, const char *host,
          struct vault_fetched *f, json_t **out)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"sandbox\":\"sbx-1\",\"rule\":\"gh\",\"host\":\"%s\","
             "\"request_id\":\"req-1\"}",
             name, host);
    memset(f, 0, sizeof *f);
    return api(e, p, "POST", "/v1/fetch", "", body, out, f);
}

json_t *access_log(const char *audit_dir)
{
    json_t *all = json_array();
    struct al_auditlog_reader_opts o = {.dir = audit_dir, .prefix = VAULT_AUDIT_PREFIX};
    struct al_auditlog_reader *r;
    ck_assert_int_eq(al_auditlog_reader_open(&o, &r, NULL), 0);
    struct al_auditlog_record rec;
    while (al_auditlog_reader_next(r, &rec) == 1) {
        if (!rec.internal && rec.json)
            json_array_append(all, rec.json);
    }
    al_auditlog_reader_close(r);
    return all;
}

bool file_has_secret(const char *path, const char *secret)
{
    size_t len = 0;
    char *d = slurp(path, &len);
    if (!d)
        return false;
    bool hit = al_audit_line_contains_secret(d, len, secret, strlen(secret));
    free(d);
    return hit;
}

const char *g_grep_secret;
int g_grep_hits;
int grep_cb(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)f;
    if (flag == FTW_F && S_ISREG(st->st_mode) && file_has_secret(p, g_grep_secret)) {
        fprintf(stderr, "secret found in %s\n", p);
        g_grep_hits++;
    }
    return 0;
}

void bin_path(char *out, size_t n, const char *name)
{
    const char *bd = getenv("AIRLOCK_BINARY_DIR");
    if (bd) {
        snprintf(out, n, "%s/bin/%s", bd, name);
        return;
    }
    char self[512];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    self[l > 0 ? l : 0] = '\0';
    char *sl = strrchr(self, '/');
    if (sl)
        *sl = '\0';
    snprintf(out, n, "%s/%s", self, name);
}

const char *g_cli_path;

int run_cli_exe(const char *bin, const char *state, const char *group, const char *in, char *out,
                size_t outlen, const char *a1, const char *a2, const char *a3, const char *a4)
{
    int pin[2], pout[2];
    ck_assert_int_eq(pipe(pin), 0);
    ck_assert_int_eq(pipe(pout), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(pout[1], 2);
        close(pin[1]);
        close(pout[0]);
        if (g_cli_path)
            setenv("PATH", g_cli_path, 1);
        execl(bin, "airlock", "--state-dir", state, group, a1, a2, a3, a4, (char *)NULL);
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    if (in && write(pin[1], in, strlen(in)) < 0)
        ck_abort_msg("write to the CLI failed");
    close(pin[1]);
    size_t n = 0;
    ssize_t r;
    while ((r = read(pout[0], out + n, outlen - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(pout[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int run_cli(const char *state, const char *in, char *out, size_t outlen, const char *a1,
            const char *a2, const char *a3, const char *a4)
{
    char bin[600];
    bin_path(bin, sizeof bin, "airlock");
    return run_cli_exe(bin, state, "vault", in, out, outlen, a1, a2, a3, a4);
}

TCase *vault_tcase(const char *name)
{
    TCase *t = tcase_create(name);
    tcase_add_unchecked_fixture(t, root_setup, root_teardown);
    return t;
}
