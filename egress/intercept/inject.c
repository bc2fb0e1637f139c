/* egress/intercept/inject: header edits for credential injection, its gates, placeholders
 * (see inject.h). */
#include "inject.h"

#include <errno.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "intercept.h"
#include "common/util.h"
#include "egress/audit.h"

/* ---- placeholders ------------------------------------------------------------------------ */

struct intercept_placeholders {
    atomic_int refs;
    size_t n;
    char **env, **secret, **value;
    struct intercept_matcher *m;
};

static void ph__free(struct intercept_placeholders *ph)
{
    for (size_t i = 0; i < ph->n; i++) {
        free(ph->env ? ph->env[i] : NULL);
        free(ph->secret ? ph->secret[i] : NULL);
        free(ph->value ? ph->value[i] : NULL);
    }
    free(ph->env);
    free(ph->secret);
    free(ph->value);
    intercept_matcher_unref(ph->m);
    free(ph);
}

int intercept_placeholders_new(const struct policy *p, const struct intercept_placeholders *prev,
                               struct intercept_placeholders **out, struct al_error *err)
{
    *out = NULL;
    int r = intercept_init(err);
    if (r < 0)
        return r;
    size_t n = 0;
    const struct policy_placeholder *pp = policy_placeholders(p, &n);
    if (n == 0)
        return 0;
    if (n > INTERCEPT_SCRUB_MAX_VALUES)
        return al_error_set(err, -E2BIG,
                            "the policy declares %zu placeholders; at most %d are supported", n,
                            INTERCEPT_SCRUB_MAX_VALUES);
    struct intercept_placeholders *ph = calloc(1, sizeof *ph);
    if (!ph)
        return al_error_set(err, -ENOMEM, "out of memory");
    atomic_init(&ph->refs, 1);
    ph->env = calloc(n, sizeof *ph->env);
    ph->secret = calloc(n, sizeof *ph->secret);
    ph->value = calloc(n, sizeof *ph->value);
    if (!ph->env || !ph->secret || !ph->value) {
        ph__free(ph);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    ph->n = n;
    const void *vals[INTERCEPT_SCRUB_MAX_VALUES];
    size_t lens[INTERCEPT_SCRUB_MAX_VALUES];
    for (size_t i = 0; i < n; i++) {
        const char *keep = NULL;
        for (size_t k = 0; prev && k < prev->n && !keep; k++)
            if (strcmp(prev->env[k], pp[i].env) == 0 && strcmp(prev->secret[k], pp[i].secret) == 0)
                keep = prev->value[k];
        char fresh[sizeof INTERCEPT_PLACEHOLDER_PREFIX + 40];
        if (!keep) {
            unsigned char rnd[20];
            randombytes_buf(rnd, sizeof rnd);
            memcpy(fresh, INTERCEPT_PLACEHOLDER_PREFIX, sizeof INTERCEPT_PLACEHOLDER_PREFIX - 1);
            sodium_bin2hex(fresh + sizeof INTERCEPT_PLACEHOLDER_PREFIX - 1, 41, rnd, sizeof rnd);
            keep = fresh;
        }
        ph->env[i] = strdup(pp[i].env);
        ph->secret[i] = strdup(pp[i].secret);
        ph->value[i] = strdup(keep);
        if (!ph->env[i] || !ph->secret[i] || !ph->value[i]) {
            ph__free(ph);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
        vals[i] = ph->value[i];
        lens[i] = strlen(ph->value[i]);
    }
    if (intercept_matcher_new(vals, lens, n, &ph->m) < 0) {
        ph__free(ph);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    *out = ph;
    return 0;
}

static bool ph__valid(const char *v)
{
    size_t pl = sizeof INTERCEPT_PLACEHOLDER_PREFIX - 1;
    return v && strlen(v) == pl + 40 && strncmp(v, INTERCEPT_PLACEHOLDER_PREFIX, pl) == 0 &&
           al_hex_is_lower(v + pl, 40);
}

int intercept_placeholders_restore(const struct policy *p, const json_t *keep,
                                   struct intercept_placeholders **out, struct al_error *err)
{
    /* A previous set made of the values to keep, then the usual path. */
    size_t n = 0;
    const struct policy_placeholder *pp = policy_placeholders(p, &n);
    struct intercept_placeholders prev = {0};
    char *env[INTERCEPT_SCRUB_MAX_VALUES], *sec[INTERCEPT_SCRUB_MAX_VALUES],
        *val[INTERCEPT_SCRUB_MAX_VALUES];
    for (size_t i = 0; keep && i < n && prev.n < INTERCEPT_SCRUB_MAX_VALUES; i++) {
        const char *v = json_string_value(json_object_get(keep, pp[i].env));
        if (!ph__valid(v))
            continue;
        env[prev.n] = (char *)pp[i].env;
        sec[prev.n] = (char *)pp[i].secret;
        val[prev.n] = (char *)v;
        prev.n++;
    }
    prev.env = env;
    prev.secret = sec;
    prev.value = val;
    return intercept_placeholders_new(p, prev.n ? &prev : NULL, out, err);
}

struct intercept_placeholders *intercept_placeholders_ref(struct intercept_placeholders *ph)
{
    if (ph)
        atomic_fetch_add(&ph->refs, 1);
    return ph;
}

void intercept_placeholders_unref(struct intercept_placeholders *ph)
{
    if (ph && atomic_fetch_sub(&ph->refs, 1) == 1)
        ph__free(ph);
}

size_t intercept_placeholders_count(const struct intercept_placeholders *ph)
{
    return ph ? ph->n : 0;
}

const char *intercept_placeholder_env(const struct intercept_placeholders *ph, size_t i)
{
    return ph->env[i];
}

const char *intercept_placeholder_value(const struct intercept_placeholders *ph, size_t i)
{
    return ph->value[i];
}

const char *intercept_placeholder_secret(const struct intercept_placeholders *ph, size_t i)
{
    return ph->secret[i];
}

json_t *intercept_placeholders_env_json(const struct intercept_placeholders *ph)
{
    json_t *o = json_object();
    for (size_t i = 0; ph && i < ph->n; i++)
        json_object_set_new(o, ph->env[i], json_string(ph->value[i]));
    return o;
}

const struct intercept_matcher *
intercept_placeholders_matcher(const struct intercept_placeholders *ph)
{
    return ph ? ph->m : NULL;
}

/* ---- requests ----------------------------------------------------------------------------- */

size_t intercept_inject_secrets(const struct policy_decision *d, const char **names, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; d->inject && i < d->n_inject; i++)
        for (size_t k = 0; k < d->inject[i].n_secrets; k++) {
            const char *s = d->inject[i].secrets[k];
            bool seen = false;
            for (size_t j = 0; j < n && !seen; j++)
                seen = strcmp(names[j], s) == 0;
            if (!seen && n < max)
                names[n++] = s;
        }
    return n;
}

int intercept_inject_edit_init(struct intercept_inject_edit *edit, size_t n_hdrs)
{
    memset(edit, 0, sizeof *edit);
    edit->drop = calloc(n_hdrs ? n_hdrs : 1, sizeof *edit->drop);
    edit->n_hdrs = n_hdrs;
    return edit->drop ? 0 : -ENOMEM;
}

void intercept_inject_edit_free(struct intercept_inject_edit *edit)
{
    for (size_t i = 0; i < edit->n_add; i++) {
        if (edit->add[i].value) {
            sodium_memzero(edit->add[i].value, edit->add[i].len);
            free(edit->add[i].value);
        }
    }
    edit->n_add = 0;
    free(edit->drop);
    edit->drop = NULL;
}

static struct intercept_inject_note *note(struct intercept_inject_edit *e,
                                          const struct policy_inject *in, const char *secret,
                                          const char *outcome, const char *reason)
{
    if (e->n_notes == sizeof e->notes / sizeof *e->notes)
        return &e->notes[e->n_notes - 1];
    struct intercept_inject_note *n = &e->notes[e->n_notes++];
    memset(n, 0, sizeof *n);
    n->header = in ? in->header : NULL;
    n->secret = secret;
    n->placeholder = in && in->placeholder_env;
    n->outcome = outcome;
    n->reason = reason;
    return n;
}

static const struct intercept_secret *find_secret_n(const struct intercept_inject_ctx *c,
                                                    const char *name, size_t len)
{
    for (size_t i = 0; i < c->n_secrets; i++)
        if (c->secrets[i] && strlen(c->secrets[i]->name) == len &&
            memcmp(c->secrets[i]->name, name, len) == 0)
            return c->secrets[i];
    return NULL;
}

static const struct intercept_secret *find_secret(const struct intercept_inject_ctx *c,
                                                  const char *name)
{
    return find_secret_n(c, name, strlen(name));
}

static bool header_safe(const unsigned char *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
            return false;
    return true;
}

/* Replaces every occurrence of the placeholder pat in (v, n) by sec's value; the result in
 * a malloc'd buffer. */
static char *replace_all(const char *v, size_t n, const char *pat,
                         const struct intercept_secret *sec, size_t *out_len, bool *found)
{
    size_t pl = strlen(pat), rl = sec->len;
    const unsigned char *rep = sec->value;
    size_t count = 0;
    for (const char *p = v; (p = memmem(p, n - (size_t)(p - v), pat, pl)); p += pl)
        count++;
    *found = count > 0;
    size_t len = n + count * rl - count * pl;
    char *o = malloc(len + 1);
    if (!o)
        return NULL;
    size_t w = 0;
    const char *p = v, *end = v + n;
    while (p < end) {
        const char *q = memmem(p, (size_t)(end - p), pat, pl);
        if (!q) {
            memcpy(o + w, p, (size_t)(end - p));
            w += (size_t)(end - p);
            break;
        }
        memcpy(o + w, p, (size_t)(q - p));
        w += (size_t)(q - p);
        memcpy(o + w, rep, rl);
        w += rl;
        p = q + pl;
    }
    o[w] = 0;
    *out_len = w;
    return o;
}

/* Placeholder swap in one header value: plain, or inside "Basic <base64(user:pass)>". */
static char *swap_placeholder(const char *v, size_t n, const char *ph,
                              const struct intercept_secret *sec, size_t *out_len)
{
    bool found = false;
    char *o = replace_all(v, n, ph, sec, out_len, &found);
    if (found || !o)
        return found ? o : (free(o), NULL);
    free(o);
    if (n > 6 && strncasecmp(v, "Basic ", 6) == 0) {
        const char *b = v + 6;
        size_t bl = n - 6;
        while (bl && *b == ' ') {
            b++;
            bl--;
        }
        size_t cap = bl * 3 / 4 + 4, dl = 0;
        char *dec = malloc(cap + 1);
        if (!dec)
            return NULL;
        if (sodium_base642bin((unsigned char *)dec, cap, b, bl, NULL, &dl, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0) {
            free(dec);
            return NULL;
        }
        size_t sl = 0;
        char *sw = replace_all(dec, dl, ph, sec, &sl, &found);
        sodium_memzero(dec, cap);
        free(dec);
        if (!sw || !found) {
            if (sw) {
                sodium_memzero(sw, sl);
                free(sw);
            }
            return NULL;
        }
        size_t el = sodium_base64_ENCODED_LEN(sl, sodium_base64_VARIANT_ORIGINAL);
        char *res = malloc(6 + el);
        if (res) {
            memcpy(res, "Basic ", 6);
            sodium_bin2base64(res + 6, el, (unsigned char *)sw, sl, sodium_base64_VARIANT_ORIGINAL);
            *out_len = strlen(res);
        }
        sodium_memzero(sw, sl);
        free(sw);
        return res;
    }
    return NULL;
}

static int ph_index(const struct intercept_placeholders *ph, const char *env)
{
    for (size_t i = 0; ph && i < ph->n; i++)
        if (strcmp(ph->env[i], env) == 0)
            return (int)i;
    return -1;
}

static int add_header(struct intercept_inject_edit *e, const char *name, char *value, size_t len)
{
    if (e->n_add == INTERCEPT_INJECT_MAX) {
        sodium_memzero(value, len);
        free(value);
        return -E2BIG;
    }
    e->add[e->n_add++] = (struct intercept_header_add){name, value, len};
    return 0;
}

static void use_secret(struct intercept_inject_edit *e, const struct intercept_secret *s)
{
    for (size_t i = 0; i < e->n_used; i++)
        if (e->used[i] == s)
            return;
    if (e->n_used < INTERCEPT_INJECT_MAX)
        e->used[e->n_used++] = s;
}

/* Refuses every entry not yet noted with reason. */
static int refuse_all(struct intercept_inject_edit *e, const struct policy_inject *entries,
                      size_t n, const char *reason, const char **out)
{
    for (size_t i = 0; i < n; i++) {
        const struct policy_inject *in = &entries[i];
        note(e, in, in->n_secrets ? in->secrets[0] : NULL, "refused", reason);
    }
    *out = reason;
    return -EPERM;
}

int intercept_inject_apply(const struct intercept_inject_ctx *c, struct intercept_inject_edit *e,
                           const char **reason)
{
    *reason = NULL;
    const struct policy_decision *d = c->d;
    /* The entries: the decision's (a genuine allow), else the matched rule's (report mode
     * and denials carry none, but the sandbox's copies must go all the same). */
    const struct policy_inject *entries = d->inject;
    size_t n_inj = d->inject ? d->n_inject : 0;
    if (!entries && d->rule && d->rule->n_inject) {
        entries = d->rule->inject;
        n_inj = d->rule->n_inject;
    }
    if (n_inj > INTERCEPT_INJECT_MAX)
        n_inj = INTERCEPT_INJECT_MAX;
    int entry_of[512];
    size_t nh = c->n_hdrs < 512 ? c->n_hdrs : 512;

    /* 1, 2: Proxy-* never; the sandbox's copies of injected headers, always. */
    for (size_t i = 0; i < c->n_hdrs; i++) {
        if (i < nh)
            entry_of[i] = -1;
        const struct al_http_field *h = &c->hdrs[i];
        if (h->name_len >= 6 && strncasecmp(h->name, "Proxy-", 6) == 0) {
            e->drop[i] = true;
            e->dropped++;
            continue;
        }
        for (size_t k = 0; k < n_inj; k++)
            if (intercept_hdr_is(h, entries[k].header)) {
                e->drop[i] = true;
                e->dropped++;
                if (i < nh)
                    entry_of[i] = (int)k;
                break;
            }
    }

    /* 8: placeholders may only be where they will be swapped. */
    const struct intercept_matcher *pm = intercept_placeholders_matcher(c->ph);
    if (pm) {
        uint32_t m = intercept_matcher_find_mask(pm, c->target, c->target_len);
        const char *where = m ? "target" : NULL;
        for (size_t i = 0; i < c->n_hdrs && !m; i++) {
            if (e->drop[i] && !(i < nh && entry_of[i] >= 0))
                continue; /* never forwarded */
            uint32_t hm = intercept_matcher_find_mask(pm, c->hdrs[i].value, c->hdrs[i].value_len);
            if (!hm)
                continue;
            int k = i < nh ? entry_of[i] : -1;
            const struct policy_inject *in = k >= 0 ? &entries[k] : NULL;
            for (size_t p = 0; p < c->ph->n && hm; p++) {
                if (!(hm & (1u << p)))
                    continue;
                bool ok = in && in->placeholder_env && in->n_secrets == 1 &&
                          strcmp(in->secrets[0], c->ph->secret[p]) == 0;
                if (ok)
                    hm &= ~(1u << p);
            }
            if (hm) {
                m = hm;
                where = "header";
                size_t l = c->hdrs[i].name_len < sizeof e->misuse_header - 1
                               ? c->hdrs[i].name_len
                               : sizeof e->misuse_header - 1;
                memcpy(e->misuse_header, c->hdrs[i].name, l);
                e->misuse_header[l] = 0;
            }
        }
        if (m) {
            size_t p = 0;
            while (p < c->ph->n && !(m & (1u << p)))
                p++;
            e->placeholder_misuse = true;
            e->misuse_where = strcmp(where, "target") == 0 ? "target" : e->misuse_header;
            e->misuse_secret = p < c->ph->n ? c->ph->secret[p] : NULL;
            struct intercept_inject_note *nt =
                note(e, NULL, e->misuse_secret, "refused", "placeholder_misuse");
            nt->placeholder = true;
            *reason = "placeholder_misuse";
            return -EPERM;
        }
    }

    if (n_inj == 0)
        return 0;
    /* 7: report mode, or anything not a genuine allow: no injection. */
    if (d->verdict != POLICY_ALLOW || d->would_deny || !d->inject) {
        for (size_t k = 0; k < n_inj; k++) {
            const struct policy_inject *in = &entries[k];
            note(e, in, in->n_secrets ? in->secrets[0] : NULL, "skipped", "report_mode");
        }
        return 0;
    }
    /* 3, 4 */
    if (!c->conn->tls && !(d->rule && d->rule->allow_plaintext_inject))
        return refuse_all(e, entries, n_inj, "plaintext_inject", reason);
    if (c->conn->tls && (!c->conn->sni || !c->host || strcmp(c->conn->sni, c->host) != 0))
        return refuse_all(e, entries, n_inj, "inject_host_sni_mismatch", reason);

    for (size_t k = 0; k < n_inj; k++) {
        const struct policy_inject *in = &entries[k];
        /* 5, 6 for every secret the entry uses. */
        for (size_t j = 0; j < in->n_secrets; j++) {
            const struct intercept_secret *s = find_secret(c, in->secrets[j]);
            const char *why = !s                                       ? "secret_unavailable"
                              : !intercept_secret_bound_to(s, c->host) ? "secret_not_bound_to_host"
                              : !header_safe(s->value, s->len)         ? "secret_not_header_safe"
                                                                       : NULL;
            if (why) {
                struct intercept_inject_note *nt = note(e, in, in->secrets[j], "refused", why);
                if (s) {
                    nt->secret_id = s->secret_id;
                    nt->version = s->version;
                }
                *reason = why;
                return -EPERM;
            }
        }
        if (!in->placeholder_env) {
            /* Replace mode: the template with the values. */
            size_t len = 0;
            for (size_t p = 0; p < in->n_parts; p++)
                len += in->parts[p].secret
                           ? find_secret_n(c, in->parts[p].text, in->parts[p].len)->len
                           : in->parts[p].len;
            char *v = malloc(len + 1);
            if (!v)
                return -ENOMEM;
            size_t w = 0;
            for (size_t p = 0; p < in->n_parts; p++) {
                if (in->parts[p].secret) {
                    const struct intercept_secret *s =
                        find_secret_n(c, in->parts[p].text, in->parts[p].len);
                    memcpy(v + w, s->value, s->len);
                    w += s->len;
                } else {
                    memcpy(v + w, in->parts[p].text, in->parts[p].len);
                    w += in->parts[p].len;
                }
            }
            v[w] = 0;
            if (add_header(e, in->header, v, w) < 0)
                return -E2BIG;
            for (size_t j = 0; j < in->n_secrets; j++) {
                const struct intercept_secret *s = find_secret(c, in->secrets[j]);
                struct intercept_inject_note *nt = note(e, in, s->name, "injected", NULL);
                nt->secret_id = s->secret_id;
                nt->version = s->version;
                use_secret(e, s);
            }
            e->n_injected++;
            continue;
        }
        /* Placeholder mode: swap where the sandbox put its placeholder. */
        const struct intercept_secret *s = find_secret(c, in->secrets[0]);
        int pi = ph_index(c->ph, in->placeholder_env);
        if (pi < 0 || strcmp(c->ph->secret[pi], in->secrets[0]) != 0) {
            note(e, in, in->secrets[0], "skipped", "placeholder_unknown");
            continue;
        }
        bool had = false, swapped = false;
        for (size_t i = 0; i < nh && !swapped; i++) {
            if (entry_of[i] != (int)k)
                continue;
            had = true;
            size_t ol = 0;
            char *nv =
                swap_placeholder(c->hdrs[i].value, c->hdrs[i].value_len, c->ph->value[pi], s, &ol);
            if (nv) {
                if (add_header(e, in->header, nv, ol) < 0)
                    return -E2BIG;
                swapped = true;
            }
        }
        if (swapped) {
            struct intercept_inject_note *nt = note(e, in, s->name, "injected", NULL);
            nt->secret_id = s->secret_id;
            nt->version = s->version;
            use_secret(e, s);
            e->n_injected++;
        } else {
            note(e, in, s->name, had ? "removed" : "skipped",
                 had ? "no_placeholder_in_header" : "header_absent");
        }
    }
    return 0;
}

void intercept_inject_notes_write(const struct intercept_inject_edit *e, struct egress_recw *w)
{
    egress_recw_arr_begin(w, "inject");
    for (size_t i = 0; i < e->n_notes; i++) {
        const struct intercept_inject_note *n = &e->notes[i];
        egress_recw_obj_begin(w, NULL);
        if (n->header)
            egress_recw_str(w, "header", n->header);
        if (n->secret)
            egress_recw_str(w, "secret", n->secret);
        if (n->secret_id) {
            egress_recw_str(w, "secret_id", n->secret_id);
            egress_recw_int(w, "version", n->version);
        }
        egress_recw_str(w, "mode", n->placeholder ? "placeholder" : "replace");
        egress_recw_str(w, "outcome", n->outcome);
        if (n->reason)
            egress_recw_str(w, "reason", n->reason);
        egress_recw_close(w, '}');
    }
    egress_recw_close(w, ']');
}
