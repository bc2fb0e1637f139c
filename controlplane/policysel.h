/* controlplane/policysel: which egress policy a sandbox gets.
 *
 * Owns: the rule (metadata["airlock.policy"], or for a template build's RUN steps the
 * X-Airlock-Build-Policy header, names a policy of the policies directory that the caller's
 * API key may use; otherwise the template's default policy, the "policy" key
 * of its template.json; otherwise the configured default policy), loading and validating the
 * named file (cached by path, size and mtime; a cached file read again because it changed is
 * a reload of the policies' history, console_policies.c), and the E2B network fields
 * (allow_internet_access, network.allowOut, network.denyOut), which may only narrow the
 * policy: they are validated here with policy_narrow() and handed to airlock-egress, which
 * applies them in front of the policy.
 */
#ifndef AIRLOCK_CP_POLICYSEL_H
#define AIRLOCK_CP_POLICYSEL_H

#include <jansson.h>
#include <stdbool.h>

#include "common/error.h"
#include "record.h"

struct cp;
struct cp_principal;
struct policy;

#define CP_POLICY_META_KEY "airlock.policy"

struct cp_policy_sel {
    char name[CP_POLICY_NAME_MAX];
    char file[4096];
    char hash[65];     /* of the narrowed policy */
    json_t *narrowing; /* {"allow_internet_access"?, "allow_out"?, "deny_out"?} or NULL */
};

/* What a creation asks of its policy. */
struct cp_policy_ask {
    const json_t *metadata;         /* the creation's; may name the policy, or NULL */
    const json_t *network;          /* E2B network fields, or NULL */
    int allow_internet;             /* allow_internet_access: 1, 0, or -1 when not given */
    const struct cp_principal *who; /* the key creating it: the policies it may use */
    const char *template_dir;       /* the template's directory (its template.json may name a
                                 default policy), or NULL */
    /* A policy asked for outside metadata (a template build's X-Airlock-Build-Policy header),
     * checked as metadata's is, and how it was asked for (for the errors); or NULL. */
    const char *requested, *requested_what;
};

/* Chooses and validates. On error *status is the HTTP status to answer (400, 403, 500). */
int cp_policy_select(struct cp *cp, const struct cp_policy_ask *ask, struct cp_policy_sel *out,
                     int *status, struct al_error *err);
/* The default policy a template's template.json names ("policy"), into out (size
 * CP_POLICY_NAME_MAX): 1 when it names one, 0 when it names none (or has no template.json),
 * <0 with err when the file or the key is malformed. */
int cp_template_policy(const char *template_dir, char *out, struct al_error *err);
/* Checks E2B network fields against a sandbox's policy (by name) as a creation would:
 * 0 with the narrowed policy's hash, or <0 with *status (400: a refused entry, named;
 * 500: the policy is missing or invalid) and err. */
int cp_policy_check_network(struct cp *cp, const char *name, const json_t *network,
                            int allow_internet, char hash[65], int *status, struct al_error *err);
void cp_policy_sel_free(struct cp_policy_sel *s);
/* Whether s can name a policy of the policies directory (letters, digits, '.', '_', '-'). */
bool cp_policy_name_valid(const char *s);
/* The policy <name> of the policies directory, compiled (from the cache creations use), with
 * a new reference, and its file into file (len at least 4200); NULL with *status (400 a bad
 * name, 404 no such policy, 422 a policy with errors) and err. */
struct policy *cp_policy_get(struct cp *cp, const char *name, char *file, size_t len, int *status,
                             struct al_error *err);
/* The narrowing object of a stored sandbox (for re-registration), or NULL. */
json_t *cp_policy_narrowing(const json_t *network, int allow_internet);
/* Drops the cache. */
void cp_policy_cache_clear(void);
/* A policy's lint findings as JSON: [{"severity", "line", "col", "code", "message"}]. */
struct al_diags;
json_t *cp_policy_diags_json(const struct al_diags *d);

#endif
