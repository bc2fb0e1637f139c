/* controlplane/record: what airlockd remembers about a sandbox and an API key, as stored.
 *
 * Owns: the persisted fields of a sandbox (the rest of struct cp_sandbox is runtime state
 * rebuilt after a restart), their JSON form (the store's "doc" column), and the sandbox
 * states. Environment variables are deliberately not part of the record: they may carry
 * secrets, are handed to the agent once at creation and never written to disk by airlockd.
 */
#ifndef AIRLOCK_CP_RECORD_H
#define AIRLOCK_CP_RECORD_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "ids.h"

#define CP_TEMPLATE_MAX    128
#define CP_POLICY_NAME_MAX 128
#define CP_CA_PEM_MAX      (64 * 1024) /* a sandbox CA certificate (the agent's limit) */

enum cp_sb_state {
    CP_SB_CREATING = 0, /* being created: not listed, not routable */
    CP_SB_RUNNING,
    CP_SB_PAUSED,
    CP_SB_STOPPING, /* being killed (or found dead and being reclaimed) */
};

const char *cp_sb_state_name(enum cp_sb_state s);
int cp_sb_state_parse(const char *s, enum cp_sb_state *out);

struct cp_sb_record {
    char id[64];
    uint64_t seq; /* numeric identity (vswitch), unique among live sandboxes */
    enum cp_sb_state state;
    char template_id[CP_TEMPLATE_MAX]; /* as the client named it ("base", "app:v1") */
    /* The build whose files it was created from ("" for a template made without the build
     * API): that version of the template is kept while the sandbox exists. */
    char template_build[40];
    char snapshot_id[64];         /* the snapshot it was started from ("" for none) */
    char backend[16];             /* "jail", "kvm", "test" */
    char key_id[32];              /* the API key that created it ("env", "local", key_...) */
    char token[CP_TOKEN_LEN + 1]; /* envd access token (state dir is root-only) */
    uint64_t created_ns;          /* wall clock */
    uint64_t started_ns;          /* wall clock: E2B startedAt */
    uint64_t end_ns;              /* wall clock: E2B endAt (expiry) */
    bool on_timeout_pause;        /* autoPause */
    bool auto_pause_fs;           /* autoPauseMemory: false: the timeout's pause keeps files only */
    bool auto_resume;
    /* Paused without its memory (pause {"memory": false}, or a memory pause whose processes
     * a host restart ended): no process, cgroup or network is left; its files are in
     * <state>/paused/<id>, and a resume boots it again over them (lifecycle.c). */
    bool paused_fs;
    int allow_internet; /* -1 not given, 0, 1 */
    int cpu_count;
    int memory_mb;
    int disk_mb;
    json_t *metadata; /* object of strings (owned; never NULL once loaded) */
    json_t *network;  /* E2B network object as accepted (owned), or NULL */
    /* Network updates applied (updateNetwork), 0 for the creation's fields: each update
     * that is applied takes the next number, and one that is undone gives it back. */
    uint64_t net_generation;
    char policy_name[CP_POLICY_NAME_MAX];
    char policy_hash[65];
    pid_t pid;          /* the process whose exit means the sandbox is gone */
    uint64_t pid_start; /* its start time (/proc/PID/stat field 22): pid reuse guard */
    char addr[46];      /* the sandbox's address ("" without a network) */
    /* What airlock-egress handed out at the sandbox's (latest) registration, or NULL:
     * {"caCertPem", "caFingerprint", "placeholders": {ENV: placeholder}}, and
     * "agentCaFingerprint", the CA the sandbox's agent has installed (a push is due when
     * they differ). Public material only: a CA certificate, and placeholders that are
     * worthless outside the proxy (docs/egress-intercept.md). Never a secret value. */
    json_t *intercept;
    /* The volumes mounted into it (volumeMounts, controlplane/volumes.c), or NULL:
     * [{"volumeID", "name", "path"}], each mounted again at every start of it. */
    json_t *volumes;
};

void cp_sb_record_init(struct cp_sb_record *r);
void cp_sb_record_free(struct cp_sb_record *r);
/* Deep copy (dst is overwritten; free it first if it held anything). */
void cp_sb_record_copy(struct cp_sb_record *dst, const struct cp_sb_record *src);
/* The JSON document stored for everything that has no column of its own. */
json_t *cp_sb_record_doc(const struct cp_sb_record *r);
int cp_sb_record_from_doc(struct cp_sb_record *r, const json_t *doc, struct al_error *err);

/* What a key may do (docs/api.md, "Roles"; the table of routes is auth.c's). Bits, so that a
 * route names the roles it is open to as a mask; 0 is no role at all, never a valid one. */
enum cp_role {
    CP_ROLE_ADMIN = 1u << 0,    /* everything */
    CP_ROLE_OPERATOR = 1u << 1, /* sandboxes, templates, snapshots */
    CP_ROLE_AUDITOR = 1u << 2,  /* audit, policies, vault names, what exists: reads only */
};
#define CP_ROLES_ALL (CP_ROLE_ADMIN | CP_ROLE_OPERATOR | CP_ROLE_AUDITOR)

/* "admin", "operator", "auditor"; "none" for anything else. */
const char *cp_role_name(unsigned role);
/* The role named s (exactly one of the names above), or 0 with err saying what is valid. */
unsigned cp_role_parse(const char *s, struct al_error *err);

struct cp_apikey {
    char id[32];
    char name[128];
    uint8_t digest[CP_DIGEST_LEN];
    uint64_t created_ns;
    uint64_t last_used_ns; /* 0 = never */
    uint64_t revoked_ns;   /* 0 = valid */
    char policies[1024];   /* "*" = any policy, else comma-separated policy names */
    unsigned role;         /* one enum cp_role */
};

/* A new key named name (its id when NULL) of the role named role ("admin" when NULL) and
 * policies ("*" when NULL), as `airlock apikey create` and POST /admin/keys make it: the
 * record into k, the key itself into key (shown once; only its digest is in k). -EINVAL with
 * err saying what is wrong (the name's length, the role, the policies). */
int cp_apikey_make(struct cp_apikey *k, char key[CP_APIKEY_LEN + 1], const char *name,
                   const char *role, const char *policies, struct al_error *err);

/* May a key with this policies field name policy? */
bool cp_apikey_allows_policy(const char *policies, const char *policy);
/* Validates a policies field ("*" or names of [A-Za-z0-9._-], comma-separated). */
int cp_apikey_policies_check(const char *policies, struct al_error *err);

/* /proc/PID/stat start time, 0 if the process does not exist. */
uint64_t cp_proc_start_time(pid_t pid);

#endif
