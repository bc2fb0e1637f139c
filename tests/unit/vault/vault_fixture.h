/* tests/unit/vault/vault_fixture: what the test_vault_* suites share.
 *
 * A test case (vault_tcase) gets a scratch root, g_root, made once for all its tests (an
 * unchecked fixture: each test names its own vault directory in it with tdir/vdir). Stores are
 * opened with the test's helpers, which fail the test with the vault's message; the service
 * (struct svc_env) is the in-process vault_service over a store and an access log, with fixed
 * uids for the roles and peers that hold them; the CLI is `airlock vault` of this build. */
#ifndef AIRLOCK_TESTS_VAULT_FIXTURE_H
#define AIRLOCK_TESTS_VAULT_FIXTURE_H

#include <ftw.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "al_test.h"
#include "common/auditlog.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "vault/vault.h"
#include "vault/vault_file.h"

/* A distinctive value, which must never show up anywhere but in fetch answers. */
#define SECRET_A "ghp_A1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvWxYz"
#define SECRET_B "sk-live-ZYXWVUTSRQPONMLKJIHGFEDCBA987654321"

extern char g_root[256];
void root_setup(void);
void root_teardown(void);
/* A test case whose tests share one g_root. */
TCase *vault_tcase(const char *name);

/* ---- stores ---- */
/* <g_root>/name (from a ring of four buffers). */
const char *tdir(const char *name);
/* tdir(name), initialised as a vault. */
const char *vdir(const char *name);
struct vault_store *sopen(const char *d);
/* Creates (create) or rotates name to value, with bound hosts if hosts is not NULL. */
void put(struct vault_store *s, const char *name, const char *value, bool create,
         const char *const *hosts, size_t nh);
void expect_value(struct vault_store *s, const char *name, uint32_t version, const char *want);
char *slurp(const char *path, size_t *len);
void spit(const char *path, const char *d, size_t len);
/* The vault file of directory d. */
char *vfile(const char *d);
/* Tries to open and returns the error (0 if it opened). */
int open_err(const char *d, struct al_error *e);

/* ---- the service, in process ---- */
struct svc_env {
    const char *dir;
    struct vault_store *store;
    struct al_auditlog *audit;
    struct vault_service *svc;
    char audit_dir[600];
};

#define EGRESS_UID 3101
#define READER_UID 3102
#define ADMIN_GID  3103
#define OTHER_UID  3104

extern const struct vault_peer ROOT, EGRESS, READER, GROUPADMIN, OTHER;

/* A vault tdir(name) with its service; egress_exe: the program the egress role must run. */
void env_open(struct svc_env *e, const char *name);
void env_open_exe(struct svc_env *e, const char *name, const char *egress_exe);
void env_close(struct svc_env *e);
/* One API request as peer p; returns the HTTP status. */
int api(struct svc_env *e, const struct vault_peer *p, const char *method, const char *path,
        const char *query, const char *body, json_t **out, struct vault_fetched *f);
/* POST /v1/secrets/name with value (base64-encoded) and extra JSON members. */
int create_b64(struct svc_env *e, const struct vault_peer *p, const char *name, const char *value,
               const char *extra);
/* POST /v1/fetch of name for host, on behalf of sandbox sbx-1. */
int fetch(struct svc_env *e, const struct vault_peer *p, const char *name, const char *host,
          struct vault_fetched *f, json_t **out);
/* Reads the access log back. */
json_t *access_log(const char *audit_dir);

/* ---- no value anywhere ---- */
bool file_has_secret(const char *path, const char *secret);
/* An nftw callback: counts in g_grep_hits the regular files that contain g_grep_secret. */
extern const char *g_grep_secret;
extern int g_grep_hits;
int grep_cb(const char *p, const struct stat *st, int flag, struct FTW *f);
/* A binary of this build: $AIRLOCK_BINARY_DIR/bin (ctest), else next to this test. */
void bin_path(char *out, size_t n, const char *name);
extern const char *g_cli_path; /* PATH for the CLI; NULL: inherited */
/* Runs `bin --state-dir state group a1...` with stdin; returns the exit status, output in out
 * (stdout+stderr). */
int run_cli_exe(const char *bin, const char *state, const char *group, const char *in, char *out,
                size_t outlen, const char *a1, const char *a2, const char *a3, const char *a4);
/* `airlock vault a1...` of this build. */
int run_cli(const char *state, const char *in, char *out, size_t outlen, const char *a1,
            const char *a2, const char *a3, const char *a4);

#endif
