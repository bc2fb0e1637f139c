/* tests/unit/controlplane/cp_rest_fixture: the world the test_cp_rest_* suites share.
 *
 * Each test case (cp_rest_tcase: fork mode, 60 s) gets a fresh one: a state directory
 * (g_tmpdir) with config (sandboxes.max 6, start_concurrency 1, api.domain sbx.test), the
 * policies "default" and "other", the templates base, code-interpreter-v1, failing (its start
 * fails), noagent (no agent answers), pinned (policy other), pinned-missing, pinned-bad and
 * slow (50 ms to start); airlockd's API on 127.0.0.1 (g_target) and on <g_tmpdir>/cp.sock,
 * with the environment key KEY_ENV (sandboxes.ready_timeout 1 s). The fake agent echoes what
 * it got as JSON (method, target, sandbox, port, token, body_len) and serves /cut-chunked,
 * /cut-length, /ws, /cookies, /console-cookie, /seen (with the Cookie it got), /health,
 * /ready and /stream. The fake backend counts stops, pauses and resumes and records the
 * order sandboxes started in. */
#ifndef AIRLOCK_TESTS_CP_REST_FIXTURE_H
#define AIRLOCK_TESTS_CP_REST_FIXTURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "al_test.h"
#include "common/http.h"
#include "common/json.h"
#include "common/util.h"
#include "controlplane/cp.h"
#include "controlplane/store.h"

#define KEY_ENV "e2b_1111111111111111111111111111111111111111"

extern char g_tmpdir[256]; /* the test's state directory */
extern struct cp g_cp;     /* owned by the loop thread while the test runs */
extern char g_target[64];  /* "127.0.0.1:<port>" of the API */

/* The fake backend: calls counted, and what it started. */
extern int g_stops, g_pauses, g_resumes;
extern char g_start_order[8][CP_ID_LEN + 1]; /* ids, in the order they started */
extern int g_n_started;
extern char g_started_policy[CP_POLICY_NAME_MAX]; /* the policy of the last start */
/* The first start of a test ends only once this many creations wait in the start queue
 * (polled on the loop thread, bounded at 10 s); 0: no gate. */
extern atomic_int g_start_gate;
extern int g_fb_starting_max; /* the most starts in flight at once */
/* The fake agent's GET /ready (under g_ready_mu): g_ready_reply for the first g_ready_after
 * polls (every one when negative), then {"state":"ready"}; the polls counted, the token of
 * the last; the start and ready commands of the last start ("start|ready", "-" for none). */
extern pthread_mutex_t g_ready_mu;
extern char g_ready_reply[1024];
extern int g_ready_after, g_ready_polls;
extern char g_ready_token[128];
extern char g_started_cmds[512];
extern atomic_int g_started_pid; /* the process of the last start (a sleep) */

void cp_rest_setup(void);
void cp_rest_teardown(void);
/* A test case with the fixture above. */
TCase *cp_rest_tcase(const char *name);

struct resp {
    int status;
    json_t *body;
    char raw[65536]; /* /metrics is longer than 8 KiB */
    size_t len;
    char next[256];
    char ctype[128];
    char etag[64];
    /* every header field of the answer, in order (resp_header) */
    struct al_http_header headers[48];
    size_t n_headers;
    char hbuf[16384];
};

/* A request to target with key (NULL: none), a JSON body (NULL: none; its Content-Type unless
 * extra has one) and extra headers;
 * fails the test if no answer comes within 10 s. */
void req_full(struct resp *r, const char *target, const char *method, const char *path,
              const char *key, const char *body, const struct al_http_header *extra,
              size_t n_extra);
/* The same to g_target with KEY_ENV. */
void req(struct resp *r, const char *method, const char *path, const char *body);
void resp_free(struct resp *r);
/* A raw TCP connection to airlockd's API (for what the blocking client cannot do: upgrades),
 * reads bounded at 5 s. */
int raw_connect(void);
/* The nth (0: first) header field of the answer called name (any case), or NULL. */
const char *resp_header(const struct resp *r, const char *name, size_t nth);
const char *jstr(const json_t *o, const char *k);
/* Creates a sandbox and returns its id (and token, if token is not NULL). */
void create(const char *body, char id[64], char token[80]);
/* Stores a new API key as `airlock apikey create` does (name, role, policies "*" when NULL),
 * through a second connection to the state database; the key into key. Its record. */
struct cp_apikey add_key(const char *name, unsigned role, const char *policies,
                         char key[CP_APIKEY_LEN + 1]);
/* The answer is an error of this status with a JSON code, its message containing needle. */
void assert_error(struct resp *r, int status, const char *needle);
/* Waits for a build to end (it runs on a worker thread): its status answer, ready or error,
 * into r; 10 s at most. */
void build_wait(const char *name, const char *bid, struct resp *r);
/* A build requested with body (a name with a tag, tags) of template tid, its definition def,
 * run until ready; its id into bid; the request's answer must have tags want_tags. */
void build_tagged(const char *body, const char *tid, const char *def, char bid[40],
                  const char *want_tags);
/* Whether p exists is want, within 10 s (polled). */
bool exists_within(const char *p, bool want);

#endif
