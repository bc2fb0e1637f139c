/* controlplane/transforms: see transforms.h. */
#include "transforms.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/json.h"
#include "common/log.h"
#include "cp.h"
#include "policy/policy.h"
#include "secrets.h"
#include "vault/vault.h"

#define TF_VALUE_MAX   8192
#define TF_SECRETS_PFX "${e2b.secrets."

static int tf__value_check(const char *domain, const char *name, const json_t *v,
                           struct al_error *err)
{
    if (!json_is_string(v))
        return al_error_set(err, -EINVAL,
                            "network.rules['%s']: header '%s' must have a string value", domain,
                            name);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    if (len == 0 || len > TF_VALUE_MAX)
        return al_error_set(err, -EINVAL,
                            "network.rules['%s']: the value of header '%s' must have 1 to %d "
                            "bytes",
                            domain, name, TF_VALUE_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return al_error_set(err, -EINVAL,
                                "network.rules['%s']: the value of header '%s' contains a "
                                "control character (CR, LF, NUL...), which would break the "
                                "request",
                                domain, name);
    }
    if (strstr(s, "${e2b.")) {
        size_t pl = strlen(TF_SECRETS_PFX);
        bool whole = len > pl + 1 && strncmp(s, TF_SECRETS_PFX, pl) == 0 && s[len - 1] == '}' &&
                     policy_secret_name_valid(s + pl, len - pl - 1) &&
                     strncasecmp(s + pl, "sandboxes/", 10) != 0 &&
                     strncasecmp(s + pl, VAULT_APIKEY_PREFIX, strlen(VAULT_APIKEY_PREFIX)) != 0;
        if (!whole)
            return al_error_set(err, -EINVAL,
                                "network.rules['%s']: the value of header '%s' uses a "
                                "placeholder airlock cannot resolve: only a whole value "
                                "\"${e2b.secrets.NAME}\" (NAME a secret of airlock's vault) is "
                                "supported; workload identity tokens are not; put the whole "
                                "header value in the vault and reference it",
                                domain, name);
    }
    return 0;
}

int cp_transforms_check(const json_t *rules, struct al_error *err)
{
    if (!json_is_object(rules))
        return al_error_set(err, -EINVAL,
                            "network.rules must be an object: {\"api.example.com\": "
                            "[{\"transform\": {\"headers\": {\"Name\": \"value\"}}}]}");
    if (json_object_size(rules) > POLICY_TRANSFORMS_MAX)
        return al_error_set(err, -EINVAL, "network.rules names %zu domains; at most %d",
                            json_object_size(rules), POLICY_TRANSFORMS_MAX);
    const char *domain;
    json_t *list;
    json_object_foreach((json_t *)rules, domain, list)
    {
        struct policy_pattern pat;
        int rc = policy_transform_domain_canon(domain, strlen(domain), &pat, err);
        if (rc)
            return al_error_prefix(err, "network.rules");
        if (!json_is_array(list))
            return al_error_set(err, -EINVAL,
                                "network.rules['%s'] must be a list of rules "
                                "([{\"transform\": {\"headers\": {...}}}])",
                                domain);
        size_t i, n = 0;
        json_t *r;
        json_array_foreach(list, i, r)
        {
            static const char *const rule_keys[] = {"transform", NULL};
            static const char *const transform_keys[] = {"headers", NULL};
            char what[POLICY_NAME_MAX + 64];
            snprintf(what, sizeof what, "network.rules['%s'][%zu]", domain, i);
            if (al_json_check_keys(r, rule_keys, what, err))
                return al_error_prefix(err, "airlock knows transform only");
            json_t *t = json_object_get(r, "transform");
            if (!t || json_is_null(t))
                continue;
            snprintf(what, sizeof what, "network.rules['%s'][%zu].transform", domain, i);
            if (al_json_check_keys(t, transform_keys, what, err))
                return al_error_prefix(err, "airlock supports headers only");
            json_t *hs = json_object_get(t, "headers");
            if (!hs || json_is_null(hs))
                continue;
            if (!json_is_object(hs))
                return al_error_set(err, -EINVAL,
                                    "network.rules['%s'][%zu].transform.headers must be an "
                                    "object of header names to values",
                                    domain, i);
            const char *k;
            json_t *v;
            json_object_foreach(hs, k, v)
            {
                if (!policy_header_injectable(k, strlen(k)))
                    return al_error_set(err, -EINVAL,
                                        "network.rules['%s']: the header '%s' cannot be set: it "
                                        "is not an HTTP token, or it frames or routes the "
                                        "request (Host, Content-Length, Connection, Proxy-*...)",
                                        domain, k);
                if ((rc = tf__value_check(domain, k, v, err)))
                    return rc;
                if (++n > POLICY_TRANSFORM_HEADERS_MAX)
                    return al_error_set(err, -EINVAL,
                                        "network.rules['%s'] sets more than %d headers", domain,
                                        POLICY_TRANSFORM_HEADERS_MAX);
            }
        }
    }
    return 0;
}

int cp_transforms_prepare(const char *sb_id, const char *tag, json_t *network, json_t **pending,
                          struct al_error *err)
{
    *pending = NULL;
    json_t *rules = network ? json_object_get(network, "rules") : NULL;
    json_object_del(network, "transforms");
    if (!rules || json_is_null(rules)) {
        if (network)
            json_object_del(network, "rules");
        return 0;
    }
    int rc = cp_transforms_check(rules, err);
    if (rc)
        return rc;
    json_t *sealed = json_object(), *transforms = json_array(), *todo = json_array();
    if (!sealed || !transforms || !todo)
        goto nomem;
    const char *domain;
    json_t *list;
    unsigned seq = 0;
    json_object_foreach(rules, domain, list)
    {
        struct policy_pattern pat;
        policy_transform_domain_canon(domain, strlen(domain), &pat, err); /* checked above */
        if (json_object_get(sealed, pat.text)) {
            json_decref(sealed);
            json_decref(transforms);
            json_decref(todo);
            return al_error_set(err, -EINVAL,
                                "network.rules names the domain '%s' twice (in two spellings); "
                                "merge their rules",
                                pat.text);
        }
        json_t *slist = json_array(), *theaders = json_array();
        if (!slist || !theaders || json_object_set_new(sealed, pat.text, slist)) {
            json_decref(theaders);
            goto nomem;
        }
        size_t i;
        json_t *r;
        json_array_foreach(list, i, r)
        {
            json_t *hs = json_object_get(json_object_get(r, "transform"), "headers");
            json_t *shs = json_object();
            if (!shs ||
                json_array_append_new(slist, json_pack("{s:{s:o}}", "transform", "headers", shs))) {
                json_decref(theaders);
                goto nomem;
            }
            const char *name;
            json_t *v;
            json_object_foreach(hs, name, v)
            {
                for (size_t k = 0; k < json_array_size(theaders); k++) {
                    const char *o =
                        json_string_value(json_object_get(json_array_get(theaders, k), "name"));
                    if (o && strcasecmp(o, name) == 0) {
                        json_decref(theaders);
                        json_decref(sealed);
                        json_decref(transforms);
                        json_decref(todo);
                        return al_error_set(err, -EINVAL,
                                            "network.rules['%s'] sets the header '%s' twice",
                                            domain, name);
                    }
                }
                const char *s = json_string_value(v);
                size_t pl = strlen(TF_SECRETS_PFX), len = json_string_length(v);
                char secret[POLICY_NAME_MAX];
                if (strncmp(s, TF_SECRETS_PFX, pl) == 0) {
                    /* E2B's names are lower-cased, so are the vault's */
                    snprintf(secret, sizeof secret, "%.*s", (int)(len - pl - 1), s + pl);
                    for (char *c = secret; *c; c++)
                        *c = (char)tolower((unsigned char)*c);
                } else {
                    snprintf(secret, sizeof secret, "sandboxes/%s/%s-%u", sb_id, tag, seq++);
                    if (json_array_append_new(todo, json_pack("{s:s,s:s,s:s,s:O}", "secret", secret,
                                                              "domain", pat.text, "header", name,
                                                              "value", v))) {
                        json_decref(theaders);
                        goto nomem;
                    }
                }
                json_object_set_new(shs, name, json_string(CP_TRANSFORM_SEALED));
                json_array_append_new(theaders,
                                      json_pack("{s:s,s:s}", "name", name, "secret", secret));
            }
        }
        if (json_array_size(theaders))
            json_array_append_new(transforms,
                                  json_pack("{s:s,s:o}", "domain", pat.text, "headers", theaders));
        else
            json_decref(theaders);
    }
    json_object_set_new(network, "rules", sealed);
    if (json_array_size(transforms))
        json_object_set_new(network, "transforms", transforms);
    else
        json_decref(transforms);
    if (json_array_size(todo))
        *pending = todo;
    else
        json_decref(todo);
    return 0;
nomem:
    json_decref(sealed);
    json_decref(transforms);
    json_decref(todo);
    return al_error_set(err, -ENOMEM, "out of memory");
}

/* 0 once the vault answered 2xx; status 0 when it did not answer. */
static int tf__answer(int rc, int status, json_t *out, struct al_error *err)
{
    if (rc == 0 && (status < 200 || status > 299)) {
        const char *m = json_string_value(json_object_get(out, "message"));
        rc = al_error_set(err, -EIO, "airlock-vault answered %d: %s", status, m ? m : "");
    }
    json_decref(out);
    return rc;
}

static void tf__delete(struct cp *cp, const char *secret)
{
    int status = 0;
    json_t *out = NULL;
    struct al_error err = {0};
    char path[300];
    snprintf(path, sizeof path, "/v1/secrets/%s", secret);
    int rc = cp_vault_call(cp, &(struct cp_vault_req){.method = "DELETE", .path = path}, &status,
                           &out, &err);
    if (tf__answer(rc, status, out, &err) && status != 404)
        al_warn("cannot delete the transform secret %s from the vault: %s", secret,
                al_error_str(&err));
}

int cp_transforms_seal(struct cp *cp, json_t *pending, struct al_error *err)
{
    if (!pending)
        return 0;
    size_t i, done = 0;
    json_t *p;
    int rc = 0;
    json_array_foreach(pending, i, p)
    {
        const json_t *v = json_object_get(p, "value");
        char desc[400];
        snprintf(desc, sizeof desc, "header %s toward %s (API transform of the sandbox)",
                 json_string_value(json_object_get(p, "header")),
                 json_string_value(json_object_get(p, "domain")));
        json_t *fields = json_pack("{s:s,s:[s]}", "description", desc, "bound_hosts",
                                   json_string_value(json_object_get(p, "domain")));
        int status = 0;
        json_t *out = NULL;
        struct cp_vault_secret sec = {.name = json_string_value(json_object_get(p, "secret")),
                                      .fields = fields,
                                      .value = json_string_value(v),
                                      .value_len = json_string_length(v)};
        rc = fields ? cp_vault_put(cp, "POST", &sec, &status, &out, err)
                    : al_error_set(err, -ENOMEM, "out of memory");
        json_decref(fields);
        rc = tf__answer(rc, status, out, err);
        if (rc) {
            if (status == 0)
                rc = -ENOTCONN;
            al_error_prefix(err, "cannot seal the header transforms in airlock-vault");
            break;
        }
        done++;
    }
    if (rc)
        for (size_t k = 0; k < done; k++)
            tf__delete(cp,
                       json_string_value(json_object_get(json_array_get(pending, k), "secret")));
    json_decref(pending);
    return rc;
}

static bool tf__names(const json_t *network, const char *secret)
{
    json_t *ts = network ? json_object_get(network, "transforms") : NULL;
    size_t i, j;
    json_t *t, *h;
    json_array_foreach(ts, i, t)
    {
        json_array_foreach(json_object_get(t, "headers"), j, h)
        {
            const char *s = json_string_value(json_object_get(h, "secret"));
            if (s && strcmp(s, secret) == 0)
                return true;
        }
    }
    return false;
}

void cp_transforms_drop(struct cp *cp, const json_t *network, const json_t *keep)
{
    json_t *ts = network ? json_object_get(network, "transforms") : NULL;
    size_t i, j;
    json_t *t, *h;
    json_array_foreach(ts, i, t)
    {
        json_array_foreach(json_object_get(t, "headers"), j, h)
        {
            const char *s = json_string_value(json_object_get(h, "secret"));
            if (s && strncmp(s, "sandboxes/", 10) == 0 && !tf__names(keep, s))
                tf__delete(cp, s);
        }
    }
}

int cp_transforms_resolve(struct cp *cp, const char *key_id, json_t *network, int *status,
                          struct al_error *err)
{
    if (!key_id || !*key_id)
        return 0;
    char prefix[64];
    cp_secrets_prefix(key_id, prefix, sizeof prefix);
    size_t i, j;
    json_t *t, *h;
    json_array_foreach(network ? json_object_get(network, "transforms") : NULL, i, t)
    {
        json_array_foreach(json_object_get(t, "headers"), j, h)
        {
            const char *s = json_string_value(json_object_get(h, "secret"));
            if (!s || strncmp(s, "sandboxes/", 10) == 0)
                continue;
            char own[VAULT_NAME_MAX + 1], path[VAULT_NAME_MAX + 32];
            if (snprintf(own, sizeof own, "%s%s", prefix, s) >= (int)sizeof own)
                continue; /* too long to be one of the key's: the vault's own name */
            snprintf(path, sizeof path, "/v1/secrets/%s", own);
            int st = 0;
            json_t *out = NULL;
            int rc = cp_vault_call(cp, &(struct cp_vault_req){.method = "GET", .path = path}, &st,
                                   &out, err);
            json_decref(out);
            if (rc || (st != 200 && st != 404 && st != 400)) {
                *status = 503;
                if (!rc)
                    al_error_set(err, -EIO, "airlock-vault answered %d", st);
                return al_error_prefix(err, "cannot resolve \"${e2b.secrets.%s}\" in airlock-vault",
                                       s);
            }
            if (st == 200) /* 404: not the key's; 400: a name the key cannot have */
                json_object_set_new(h, "secret", json_string(own));
        }
    }
    return 0;
}
