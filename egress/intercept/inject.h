/* egress/intercept/inject: credential injection into requests the policy allowed, its gates,
 * and placeholder mode.
 *
 * Owns: which headers of a request are dropped and which are added, given the deciding
 * rule's `inject` entries, the secrets fetched for them (secrets.h) and the sandbox's
 * placeholders; every refusal with a reason; what the audit record says (header, secret
 * name, version and secret id: never a value).
 *
 * The gates, in order (each refusal denies the request, 403, and is audited):
 *   1. Proxy-Authorization (and every Proxy-* header) is never forwarded, whatever the rule.
 *   2. The sandbox's own copy of every header a rule injects is removed, always, also when
 *      the injection is then refused or skipped (placeholder mode: a copy that carries the
 *      placeholder is swapped, one that does not is removed).
 *   3. Never over plain HTTP unless the rule says allow_plaintext_inject ("plaintext_inject").
 *   4. Never when Host differs from the SNI ("inject_host_sni_mismatch"; request.c refuses
 *      such requests anyway).
 *   5. Never toward a host outside the secret's bound_hosts ("secret_not_bound_to_host"),
 *      checked here for every use, cached or not.
 *   6. Never a value that would break the header (CR, LF, NUL or other controls:
 *      "secret_not_header_safe").
 *   7. A report-mode allow (would_deny) gets no injection (the headers are still removed).
 *   8. Placeholders: a sandbox's placeholder (in any spelling scrub.h knows) may appear only
 *      in the header of a placeholder-mode entry of the deciding rule, for that entry's
 *      secret; anywhere else (another header, the target, a deny or report-mode request, a
 *      host outside the bound hosts) the request is refused ("placeholder_misuse") and a
 *      security_event audited. Request bodies are checked by the engine with
 *      intercept_placeholders_matcher (stream.c's job: abort on a match).
 *
 * Values built here live in buffers wiped when the edit is freed.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_INJECT_H
#define AIRLOCK_EGRESS_INTERCEPT_INJECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "egress/intercept/request.h"
#include "egress/intercept/scrub.h"
#include "egress/intercept/secrets.h"
#include "policy/policy.h"

#define INTERCEPT_INJECT_MAX         16 /* inject entries of one rule that are handled */
#define INTERCEPT_PLACEHOLDER_PREFIX "alph_"

/* ---- placeholders (per sandbox) ------------------------------------------------------- */

struct intercept_placeholders;
/* One random placeholder per placeholder env var of the policy ("alph_" + 40 hex). With
 * prev (the sandbox's current set), env vars that keep their secret keep their value (the
 * sandbox's environment cannot change after creation). NULL *out when the policy has none. */
int intercept_placeholders_new(const struct policy *p, const struct intercept_placeholders *prev,
                               struct intercept_placeholders **out, struct al_error *err);
/* The same, keeping the values given in keep ({"ENV": "alph_..."}, what the control plane
 * stored from an earlier registration: the sandbox's processes still hold them); a value not
 * of the placeholder form is ignored (a fresh one is made). */
int intercept_placeholders_restore(const struct policy *p, const json_t *keep,
                                   struct intercept_placeholders **out, struct al_error *err);
struct intercept_placeholders *intercept_placeholders_ref(struct intercept_placeholders *ph);
void intercept_placeholders_unref(struct intercept_placeholders *ph);
size_t intercept_placeholders_count(const struct intercept_placeholders *ph);
const char *intercept_placeholder_env(const struct intercept_placeholders *ph, size_t i);
const char *intercept_placeholder_value(const struct intercept_placeholders *ph, size_t i);
const char *intercept_placeholder_secret(const struct intercept_placeholders *ph, size_t i);
/* {"ENV": "alph_..."}: what the control plane adds to the agent's envVars. */
json_t *intercept_placeholders_env_json(const struct intercept_placeholders *ph);
/* Finds every spelling of every placeholder (value index = placeholder index). */
const struct intercept_matcher *
intercept_placeholders_matcher(const struct intercept_placeholders *ph);

/* ---- one request ------------------------------------------------------------------------ */

/* The distinct secret names the decision's inject entries need (at most max). */
size_t intercept_inject_secrets(const struct policy_decision *d, const char **names, size_t max);

/* What happened to one inject entry (or to a placeholder found elsewhere). */
struct intercept_inject_note {
    const char *header;    /* as the rule writes it */
    const char *secret;    /* secret name */
    const char *secret_id; /* from the vault ("b2k:..."), NULL if no value was used */
    uint32_t version;
    bool placeholder;    /* placeholder mode */
    const char *outcome; /* "injected", "refused", "skipped", "removed" */
    const char *reason;  /* why, when not injected */
};

struct intercept_header_add {
    const char *name;
    char *value; /* wiped and freed by intercept_inject_edit_free */
    size_t len;
};

struct intercept_inject_edit {
    bool *drop; /* per request header: not forwarded (caller-sized n_hdrs) */
    size_t n_hdrs;
    struct intercept_header_add add[INTERCEPT_INJECT_MAX];
    size_t n_add;
    struct intercept_inject_note notes[INTERCEPT_INJECT_MAX + 1];
    size_t n_notes;
    size_t dropped;           /* headers removed */
    bool placeholder_misuse;  /* a placeholder was found where it may not go */
    const char *misuse_where; /* "target", or the header's name (misuse_header) */
    char misuse_header[64];
    const char *misuse_secret; /* the secret the placeholder stands for */
    size_t n_injected;
    const struct intercept_secret *used[INTERCEPT_INJECT_MAX]; /* secrets whose values were
                                                                   added (for scrubbing) */
    size_t n_used;
};

struct intercept_inject_ctx {
    const struct intercept_conn_view *conn;
    const char *host;                 /* canonical Host (request.c) */
    const struct al_http_field *hdrs; /* the request's headers */
    size_t n_hdrs;
    const char *target;
    size_t target_len;
    const struct policy_decision *d; /* the request's decision (allow, or report-mode allow) */
    struct intercept_secret *const *secrets; /* fetched values, any order (by name) */
    size_t n_secrets;
    const struct intercept_placeholders *ph; /* the sandbox's, or NULL */
};

/* Computes the edit. Returns 0 (forward with the edit), or -EPERM with *reason: the request
 * must be denied (403) and audited with edit->notes; placeholder_misuse additionally asks
 * for a security_event. edit->drop must hold n_hdrs entries (intercept_inject_edit_init). */
int intercept_inject_apply(const struct intercept_inject_ctx *ctx,
                           struct intercept_inject_edit *edit, const char **reason);
int intercept_inject_edit_init(struct intercept_inject_edit *edit, size_t n_hdrs);
void intercept_inject_edit_free(struct intercept_inject_edit *edit); /* wipes added values */
/* The audit member "inject": [{"header","secret","secret_id","version","mode","outcome",
 * "reason"}], written into w (a record of egress/audit.h's writer). */
struct egress_recw;
void intercept_inject_notes_write(const struct intercept_inject_edit *edit, struct egress_recw *w);

#endif
