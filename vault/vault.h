/* vault/vault: the airlock vault library (airlock_vault): secrets encrypted at rest, readable
 * only by the egress proxy, every access audited.
 *
 * Layers, bottom up:
 *   crypto   master key (key file or Argon2id passphrase), data key, value sealing
 *            (XChaCha20-Poly1305, name + version + vault id as associated data), secret ids
 *   file     the on-disk format (vault_file.h): parse and verify, serialise
 *   store    an open vault directory: unlock, atomic updates under a lock, reload on change
 *   service  who may do what (roles from peer credentials), the access log, the operations
 *            that the daemon's HTTP API and the offline CLI share
 *   http     the daemon's HTTP+JSON API on a unix socket (vault_http.c, docs/vault.md)
 *   cli      `airlock vault ...` (vault_cli_main: `airlock-vault admin ...`, which the airlock
 *            CLI runs for it)
 *
 * Files under <state>/vault/ (mode 0700): secrets.vault (0600), master.key (0600, absent for
 * passphrase vaults), secret-id.key (0600), vault.lock, audit/ (the access log: vault-*.jsonl,
 * vault.key, vault.pub, vault.checkpoints). Socket: <state>/run/vault.sock.
 *
 * Values are only ever held in sodium_malloc'd memory (struct vault_value) and wiped after
 * use; they never appear in logs, errors, argv or the environment.
 */
#ifndef AIRLOCK_VAULT_H
#define AIRLOCK_VAULT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/auditlog.h"
#include "common/error.h"

#define VAULT_NAME_MAX       128         /* bytes of a secret name */
#define VAULT_VALUE_MAX      (64 * 1024) /* bytes of a value */
#define VAULT_DESC_MAX       512
#define VAULT_HOSTS_MAX      32
#define VAULT_HOST_MAX       253
#define VAULT_KEEP_DEFAULT   3 /* versions kept by rotate */
#define VAULT_KEEP_MAX       20
#define VAULT_HISTORY_MAX    64 /* lifecycle events kept per secret */
#define VAULT_SECRETS_MAX    10000
#define VAULT_TOMBSTONES_MAX 1024
/* Secrets of one sandbox (its API-given header transforms): fetched only on its behalf. */
#define VAULT_SANDBOX_PREFIX "sandboxes/" /* deletions remembered for "changes since" */
#define VAULT_SECRET_ID_LEN  AL_AUDIT_KEYED_ID_LEN
/* Secrets made through airlockd's E2B API (`Secret.create`): keys/<API key id>/<name>, so that
 * each API key has a namespace of its own that no other key can see or shadow. */
#define VAULT_APIKEY_PREFIX "keys/"
/* Every secret's stable identifier ("sec_" + 32 hex, random at creation; E2B's secretID):
 * unlike the name it is never reused for another secret. */
#define VAULT_UID_LEN 36
/* Customer metadata of a secret (string keys to string values), E2B's limits. */
#define VAULT_META_MAX_ENTRIES 32
#define VAULT_META_KEY_MAX     128
#define VAULT_META_VALUE_MAX   1024
#define VAULT_META_TOTAL_MAX   8192

#define VAULT_FILE          "secrets.vault"
#define VAULT_MASTER_KEY    "master.key"
#define VAULT_SECRET_ID_KEY "secret-id.key"
#define VAULT_LOCK          "vault.lock"
#define VAULT_AUDIT_DIR     "audit"
#define VAULT_AUDIT_PREFIX  "vault"

/* ---- values ------------------------------------------------------------------------------ */
/* A secret value in locked, guarded memory (sodium_malloc). Blocks are recycled through a
 * small pool (sodium_malloc costs several system calls) and wiped whenever they are freed. */
struct vault_value {
    unsigned char *data;
    size_t len;
    size_t cap; /* bytes that may have been written (wiped on free) */
};
int vault_value_alloc(struct vault_value *v, size_t len);
int vault_value_set(struct vault_value *v, const void *data, size_t len);
void vault_value_free(struct vault_value *v); /* wipes; safe on an empty value */

/* ---- names and hosts ---------------------------------------------------------------------- */
/* Secret names are path-like: segments of [a-z0-9._-] (not starting with '.') separated by
 * single '/', at most 8 segments and VAULT_NAME_MAX bytes: "github/token". */
int vault_name_check(const char *name, struct al_error *err);
/* Bound hosts: the policy library's bound-host syntax (policy_bound_host_canon: host names,
 * IDNs, wildcards as in policies, IP literals; no wildcard over a public suffix when psl).
 * Canonicalises in place: host must have room for VAULT_HOST_MAX + 1 bytes. Messages never
 * repeat the rejected text. psl false: re-reading stored entries (no PSL rules). */
int vault_host_check(char *host, bool psl, struct al_error *err);
/* Secret identifiers: "sec_" + 32 lowercase hex digits. */
bool vault_uid_valid(const char *s);
void vault_uid_new(char out[VAULT_UID_LEN + 1]);
/* Metadata: an object of at most VAULT_META_MAX_ENTRIES strings, keys of 1..VAULT_META_KEY_MAX
 * bytes, values of at most VAULT_META_VALUE_MAX, VAULT_META_TOTAL_MAX bytes of keys and
 * values in all, no control characters. Messages name the key, never a value. */
int vault_metadata_check(const json_t *m, struct al_error *err);
/* True if host (any spelling) is allowed by the canonical patterns (policy_bound_host_match). */
bool vault_host_allowed(const char *const *patterns, size_t n, const char *host);

/* ---- secret ids ---------------------------------------------------------------------------- */
/* "b2k:" + 32 hex: BLAKE2b-128 of the value keyed with the installation's secret-id key. The
 * same value gives the same id on one installation; without the key nobody can test guesses. */
void vault_secret_id(const unsigned char key[32], const void *value, size_t len,
                     char out[VAULT_SECRET_ID_LEN + 1]);
/* Loads a 32-byte key file (hex); refuses files readable by others. key must hold 32 bytes
 * (use sodium_malloc'd memory). */
int vault_key_file_load(const char *path, unsigned char key[32], struct al_error *err);
/* `airlock vault hash-secret` (and `airlock audit hash-secret`): reads a value (stdin or
 * --from-file) and prints its secret id. argv[0] is the command name. */
int vault_hash_secret_main(int argc, char **argv);

/* ---- the catalog (what the vault file holds, decrypted metadata only) ---------------------- */
struct vault_version {
    uint32_t version;
    char created[40];
    char by[64]; /* actor that stored it */
    unsigned char nonce[24];
    unsigned char *ct; /* ciphertext + tag */
    size_t ct_len;
    char secret_id[VAULT_SECRET_ID_LEN + 1];
};

struct vault_event {
    char time[40];
    char event[16]; /* create, rotate, update */
    uint32_t version;
    char by[64];
};

struct vault_secret {
    char name[VAULT_NAME_MAX + 1];
    char uid[VAULT_UID_LEN + 1]; /* "" for a secret stored before identifiers existed */
    json_t *metadata;            /* an object (vault_metadata_check), NULL when none */
    char *description;           /* "" when none */
    char **hosts;                /* bound hosts; none = any host the policy allows */
    size_t n_hosts;
    char created[40], updated[40];
    uint64_t generation;            /* vault generation of its last change */
    uint32_t current;               /* current version */
    uint32_t keep;                  /* versions kept */
    struct vault_version *versions; /* newest first; versions[0].version == current */
    size_t n_versions;
    struct vault_event *history; /* oldest first */
    size_t n_history;
};

struct vault_tombstone {
    char name[VAULT_NAME_MAX + 1];
    uint64_t generation;
    char time[40];
};

struct vault_catalog {
    uint64_t generation;          /* +1 on every change */
    uint64_t tomb_horizon;        /* deletions before this generation are forgotten */
    struct vault_secret *secrets; /* sorted by name */
    size_t n;
    struct vault_tombstone *tombs; /* by generation */
    size_t n_tombs;
};

void vault_catalog_free(struct vault_catalog *c);
const struct vault_secret *vault_catalog_find(const struct vault_catalog *c, const char *name);
/* Metadata as JSON (never a value): {"name","id","description","metadata","bound_hosts",
 * "created","updated","current_version","versions":[{"version","created","secret_id"}],
 * "generation"}; "id" is null for a secret stored before identifiers existed. */
json_t *vault_secret_json(const struct vault_secret *s, bool with_history);

/* ---- store -------------------------------------------------------------------------------- */
struct vault_store;

struct vault_init_opts {
    const char *passphrase; /* NULL: a random master key in master.key */
    size_t passphrase_len;
    uint64_t kdf_opslimit; /* Argon2id; 0 = 3 */
    uint64_t kdf_memlimit; /* bytes; 0 = 256 MiB; at least 8 MiB */
};
/* Creates <dir> (0700) with an empty vault, its keys and the access log's key. Refuses to
 * touch an existing vault. */
int vault_store_init(const char *dir, const struct vault_init_opts *o, struct al_error *err);

struct vault_unlock {
    const char *passphrase; /* for passphrase vaults; NULL otherwise */
    size_t passphrase_len;
};
/* Opens and verifies the vault (every entry's MAC and the file's trailer). Errors name the
 * problem: not initialised, wrong master key/passphrase, corrupted (which line/secret). */
int vault_store_open(const char *dir, const struct vault_unlock *u, struct vault_store **out,
                     struct al_error *err);
void vault_store_close(struct vault_store *s);
/* Whether the vault in dir needs a passphrase (reads the header only). */
int vault_store_probe(const char *dir, bool *passphrase, struct al_error *err);
/* Reloads if the file changed on disk (another process wrote it). *changed may be NULL. */
int vault_store_refresh(struct vault_store *s, bool *changed, struct al_error *err);
const struct vault_catalog *vault_store_catalog(const struct vault_store *s);
const unsigned char *vault_store_secret_id_key(const struct vault_store *s);
bool vault_store_uses_passphrase(const struct vault_store *s);
const char *vault_store_dir(const struct vault_store *s);

/* What create/rotate store. */
struct vault_put {
    const char *name;
    const struct vault_value *value; /* required */
    const char *description;         /* NULL = unchanged (rotate) / none (create) */
    const json_t *metadata;          /* an object: replaces; NULL = unchanged / none */
    const char *const *hosts;        /* with set_hosts: replace the bound hosts */
    size_t n_hosts;
    bool set_hosts;
    uint32_t keep;       /* 0 = unchanged / default */
    const char *invalid; /* set: the request was malformed (this says why); the
                                          service checks the role, logs and answers 400 */
};
/* Each mutation takes the vault lock, re-reads and verifies the file, applies the change and
 * replaces the file atomically (write, fsync, rename, fsync dir). On failure nothing changed.
 * actor is recorded in the secret's history ("uid 0 (root)"). The new version, or 0. */
int vault_store_create(struct vault_store *s, const struct vault_put *p, const char *actor,
                       uint32_t *version, struct al_error *err);
int vault_store_rotate(struct vault_store *s, const struct vault_put *p, const char *actor,
                       uint32_t *version, struct al_error *err);
int vault_store_delete(struct vault_store *s, const char *name, const char *actor,
                       struct al_error *err);
/* Decrypts a version (0 = current) into out (sodium_malloc'd; vault_value_free it). */
int vault_store_value(struct vault_store *s, const struct vault_secret *sec, uint32_t version,
                      struct vault_value *out, struct al_error *err);
/* Decrypts every version of every secret: the deep check behind `airlock vault check`. */
int vault_store_check(struct vault_store *s, size_t *values, struct al_error *err);

/* For tests: called at each step of an atomic update ("tmp_written", "tmp_synced",
 * "renamed"); NULL in production. */
extern void (*vault_store_test_hook)(const char *stage);

/* ---- service: roles, audit, operations ------------------------------------------------------ */
enum vault_role {
    VAULT_ROLE_ADMIN = 1,  /* root or the admin group: create, rotate, delete, list */
    VAULT_ROLE_EGRESS = 2, /* the egress proxy's uid: fetch values */
    VAULT_ROLE_READER = 4, /* airlockd's uid: list names and metadata */
};

struct vault_roles {
    bool egress_set;
    uid_t egress_uid;
    bool reader_set;
    uid_t reader_uid;
    bool admin_group_set;
    gid_t admin_gid;
    /* --egress-exe: the egress role also needs the peer process (SO_PEERCRED pid) to run this
     * executable (/proc/<pid>/exe: same file, or the same path if it was replaced since), so
     * that another program of the same uid (root's curl, airlockd) cannot read values. */
    bool egress_exe_set;
    dev_t egress_exe_dev;
    ino_t egress_exe_ino;
    char egress_exe[4096];
};
/* Parses "--egress-user", "--airlockd-user" (name or uid) and "--admin-group" (name or gid)
 * values into r. */
int vault_roles_set_user(uid_t *uid, bool *set, const char *spec, struct al_error *err);
int vault_roles_set_group(struct vault_roles *r, const char *spec, struct al_error *err);
/* Sets r's egress executable (resolved to an absolute path; must be an executable file). */
int vault_roles_set_egress_exe(struct vault_roles *r, const char *path, struct al_error *err);
/* Does process pid run r's egress executable? True when none is configured. seen (may be
 * NULL) receives what it runs, for the log ("?" when unreadable). */
bool vault_roles_exe_ok(const struct vault_roles *r, pid_t pid, char *seen, size_t n);

struct vault_peer {
    uid_t uid;
    gid_t gid;
    pid_t pid;
};
unsigned vault_roles_of(const struct vault_roles *r, const struct vault_peer *p);

struct vault_service;

struct vault_service_opts {
    struct vault_store *store; /* borrowed */
    struct al_auditlog *audit; /* borrowed; every access is appended here */
    struct vault_roles roles;
    uint32_t cache_max_age_ms; /* told to the egress proxy; default 60000 */
};
int vault_service_new(const struct vault_service_opts *o, struct vault_service **out);
void vault_service_free(struct vault_service *svc);
uint64_t vault_service_generation(const struct vault_service *svc);

/* The operations. Each returns an HTTP status (200, 201, 400, 403, 404, 409, 503, 500),
 * fills *out with the JSON answer (the E2B error shape {"code","message"} on errors), and
 * appends one record to the access log (who, what, on whose behalf, result). None of them
 * ever returns a value, except fetch to the egress role. */
int vault_service_whoami(struct vault_service *svc, const struct vault_peer *p, json_t **out);
int vault_service_list(struct vault_service *svc, const struct vault_peer *p, json_t **out);
int vault_service_show(struct vault_service *svc, const struct vault_peer *p, const char *name,
                       bool history, json_t **out);
int vault_service_create(struct vault_service *svc, const struct vault_peer *p,
                         const struct vault_put *put, json_t **out);
int vault_service_rotate(struct vault_service *svc, const struct vault_peer *p,
                         const struct vault_put *put, json_t **out);
int vault_service_delete(struct vault_service *svc, const struct vault_peer *p, const char *name,
                         json_t **out);
/* "changes since generation G": {"generation":N,"full":bool,"changed":[names]}. full means
 * "forget everything you cached" (G is unknown to this vault or older than its memory). */
int vault_service_changes(struct vault_service *svc, const struct vault_peer *p, uint64_t since,
                          json_t **out);

struct vault_fetch_req {
    const char *name;
    uint32_t version;       /* 0 = current */
    const char *sandbox;    /* on whose behalf (required) */
    const char *rule;       /* the policy rule asking (required) */
    const char *host;       /* the upstream host it will be sent to (required) */
    const char *request_id; /* optional, for correlation with the egress log */
    const char *invalid;    /* set: the request was malformed (this says why) */
};
struct vault_fetched {
    struct vault_value value; /* sodium_malloc'd: vault_value_free */
    uint32_t version;
    uint64_t generation;
    uint32_t max_age_ms;
    char secret_id[VAULT_SECRET_ID_LEN + 1];
};
/* On 200 *out holds metadata ({"name","version","generation","secret_id","max_age_ms",
 * "bound_hosts"}) and f->value the value; the caller builds the answer and frees both. */
int vault_service_fetch(struct vault_service *svc, const struct vault_peer *p,
                        const struct vault_fetch_req *rq, struct vault_fetched *f, json_t **out);

/* Parses a create/rotate request body into put (value_b64 decoded into value). */
int vault_put_from_json(const json_t *body, const char *name, struct vault_put *put,
                        struct vault_value *value, const char ***hosts, struct al_error *err);

/* ---- the HTTP API's routes (docs/vault.md), shared by the daemon and the offline CLI --------- */
/* One request to the API: who asks (the socket's peer), method, path
 * ("/v1/secrets/github/token"), raw query ("" when none), parsed body (NULL when none). */
struct vault_api_req {
    const struct vault_peer *peer;
    const char *method;
    const char *path;
    const char *query;
    const json_t *body;
};
/* Dispatches one request. Returns the HTTP status and *out (the JSON answer). For POST
 * /v1/fetch on 200, fetched->value holds the value: the caller sends it
 * (vault_api_fetch_body) and frees it. fetched may be NULL, which refuses fetch (the CLI has
 * no use for values). */
int vault_api_handle(struct vault_service *svc, const struct vault_api_req *rq, json_t **out,
                     struct vault_fetched *fetched);
/* Whether a route takes a JSON body (POST/PUT). */
bool vault_api_wants_body(const char *method);
/* The fetch answer: meta's fields plus "value_b64", built in guarded memory (*body is
 * sodium_malloc'd; vault_value_free it once sent). */
int vault_api_fetch_body(const json_t *meta, const struct vault_value *v, struct vault_value *body);
/* Parses "since" (required) and "wait_ms" of GET /v1/changes (wait_ms capped at 60000):
 * -EINVAL when since is absent or either is not a decimal integer, -ENOTUNIQ when either
 * is given twice. */
int vault_api_changes_query(const char *query, uint64_t *since, uint32_t *wait_ms);

/* ---- daemon and CLI ------------------------------------------------------------------------- */
/* Hardening every process that may hold a value calls first: no core dumps, not ptrace-able
 * by other users (PR_SET_DUMPABLE 0), jansson allocations wiped on free. */
void vault_harden_process(void);
int vault_cli_main(int argc, char **argv);
int vault_daemon_main(int argc, char **argv);

#endif
