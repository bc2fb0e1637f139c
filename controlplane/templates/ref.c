/* controlplane/templates/ref: image references, the registry allowlist, the bounds and the
 * credentials of oci.h (everything of a pull that is not the network).
 */
#include "oci.h"
#include "internal.h"

#include "common/http_head.h"

#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- references ------------------------------------------------------------------------ */

static bool ref__alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* One path component: alnum runs joined by '.', '_', '__' or runs of '-'. */
static bool ref__component_valid(const char *s, size_t n)
{
    if (n == 0 || !ref__alnum(s[0]) || !ref__alnum(s[n - 1]))
        return false;
    for (size_t i = 0; i < n;) {
        if (ref__alnum(s[i])) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && !ref__alnum(s[j]))
            j++;
        size_t len = j - i;
        bool ok = (len == 1 && (s[i] == '.' || s[i] == '_' || s[i] == '-')) ||
                  (len == 2 && s[i] == '_' && s[i + 1] == '_');
        for (size_t k = i; !ok && k < j && s[k] == '-'; k++)
            ok = k == j - 1;
        if (!ok)
            return false;
        i = j;
    }
    return true;
}

/* A registry as a reference names it, "host[:port]" or "[v6][:port]", read by the one
 * authority parser (common/http_head.h). Its host name is a DNS name: the authority grammar's
 * '_' and '~' are not in Docker's reference grammar. NULL, or why not. */
static const char *ref__registry_invalid(const char *s, size_t n)
{
    struct al_http_authority a;
    const char *reason;
    if (al_http_authority_parse(s, n, &a, &reason) < 0)
        return al_http_target_message(reason);
    if (a.text != s || a.len != n) /* (the parser leaves blanks around it out) */
        return al_http_target_message("invalid_host");
    if (!a.ip6 && (memchr(a.host, '_', a.host_len) || memchr(a.host, '~', a.host_len)))
        return "a registry's host name has letters, digits, '-' and '.' only";
    return NULL;
}

static bool ref__tag_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool word = isalnum(c) || c == '_';
        if (!(word || (i > 0 && (c == '.' || c == '-'))))
            return false;
    }
    return true;
}

int tpl_ref_parse(const char *s, struct tpl_ref *out, struct al_error *err)
{
    memset(out, 0, sizeof *out);
    size_t len = strlen(s);
    if (len == 0)
        return al_error_set(err, -EINVAL, "empty image reference (e.g. \"python:3.12\")");
    if (len >= TPL_REF_MAX)
        return al_error_set(err, -ENAMETOOLONG, "image reference longer than %d bytes",
                            TPL_REF_MAX - 1);
    char buf[TPL_REF_MAX];
    memcpy(buf, s, len + 1);
    char *at = strchr(buf, '@');
    if (at) {
        *at = '\0';
        if (!tpl_digest_valid(at + 1))
            return al_error_set(err, -EINVAL,
                                "image reference '%s': the digest after '@' must be "
                                "\"sha256:\" and 64 lowercase hex digits",
                                s);
        memcpy(out->digest, at + 1, TPL_DIGEST_LEN + 1);
    }
    /* A tag is after the last ':' that follows the last '/'. */
    char *slash = strrchr(buf, '/');
    char *colon = strrchr(slash ? slash : buf, ':');
    if (colon) {
        *colon = '\0';
        if (!ref__tag_valid(colon + 1))
            return al_error_set(err, -EINVAL,
                                "image reference '%s': invalid tag '%s' (letters, digits, '_', "
                                "'.', '-'; at most 128, not starting with '.' or '-')",
                                s, colon + 1);
        snprintf(out->tag, sizeof out->tag, "%s", colon + 1);
    }
    const char *name = buf;
    const char *first_end = strchr(name, '/');
    const char *path = name;
    if (first_end) {
        size_t fl = (size_t)(first_end - name);
        bool domain = memchr(name, '.', fl) || memchr(name, ':', fl) ||
                      (fl == 9 && memcmp(name, "localhost", 9) == 0) ||
                      (fl > 0 && isupper((unsigned char)name[0]));
        if (domain) {
            const char *why = ref__registry_invalid(name, fl);
            if (why || fl >= sizeof out->registry)
                return al_error_set(err, -EINVAL,
                                    "image reference '%s': invalid registry '%.*s' (host[:port]): "
                                    "%s",
                                    s, (int)fl, name, why ? why : "too long");
            memcpy(out->registry, name, fl);
            out->registry[fl] = '\0';
            path = first_end + 1;
        }
    }
    if (!out->registry[0])
        snprintf(out->registry, sizeof out->registry, "%s", TPL_DOCKER_HUB);
    for (char *p = out->registry; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if (strcmp(out->registry, "index.docker.io") == 0 ||
        strcmp(out->registry, "registry-1.docker.io") == 0)
        snprintf(out->registry, sizeof out->registry, "%s", TPL_DOCKER_HUB);
    bool hub = strcmp(out->registry, TPL_DOCKER_HUB) == 0;
    int n = snprintf(out->repository, sizeof out->repository, "%s%s",
                     hub && !strchr(path, '/') ? "library/" : "", path);
    if (n < 0 || (size_t)n >= sizeof out->repository)
        return al_error_set(err, -ENAMETOOLONG, "image reference '%s': repository name too long",
                            s);
    const char *p = out->repository;
    for (;;) {
        const char *e = strchr(p, '/');
        size_t cl = e ? (size_t)(e - p) : strlen(p);
        if (!ref__component_valid(p, cl))
            return al_error_set(err, -EINVAL,
                                "image reference '%s': invalid repository '%s' (lowercase "
                                "letters and digits, separated by '.', '_', '__', '-' or '/')",
                                s, out->repository);
        if (!e)
            break;
        p = e + 1;
    }
    if (!out->tag[0] && !out->digest[0])
        snprintf(out->tag, sizeof out->tag, "latest");
    return 0;
}

void tpl_ref_format(const struct tpl_ref *r, char *out, size_t len)
{
    snprintf(out, len, "%s/%s%s%s%s%s", r->registry, r->repository, r->tag[0] ? ":" : "", r->tag,
             r->digest[0] ? "@" : "", r->digest);
}

/* ---- registries ------------------------------------------------------------------------- */

static bool reg__listed(const char *const *v, size_t n, const char *registry)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], "*") == 0 || strcasecmp(v[i], registry) == 0)
            return true;
    return false;
}

int tpl_registry_check(const struct tpl_registries *r, const char *registry, struct al_error *err)
{
    if (r && reg__listed(r->allowed, r->n_allowed, registry))
        return 0;
    return al_error_set(err, -EACCES,
                        "pulling from the registry '%s' is not allowed: the operator lists the "
                        "registries templates may come from in templates.registries (now: %s)",
                        registry, r && r->n_allowed ? "other registries only" : "none");
}

/* ---- bounds ----------------------------------------------------------------------------- */

void tpl_limits_resolve(const struct tpl_limits *in, struct tpl_limits *out)
{
    static const struct tpl_limits def = {
        .max_manifest_bytes = 4u << 20,
        .max_config_bytes = 8u << 20,
        .max_layer_bytes = 8ull << 30,
        .max_image_bytes = 16ull << 30,
        .max_layers = TPL_MAX_LAYERS,
        .timeout_s = 3600,
        .max_unpacked_bytes = 32ull << 30,
        .max_entries = 1000000,
        .max_path = 4096,
        .max_ratio = 200,
    };
    *out = in ? *in : def;
#define LIM_DEF(f) \
    if (!out->f)   \
        out->f = def.f;
    LIM_DEF(max_manifest_bytes)
    LIM_DEF(max_config_bytes)
    LIM_DEF(max_layer_bytes)
    LIM_DEF(max_image_bytes)
    LIM_DEF(max_layers)
    LIM_DEF(timeout_s)
    LIM_DEF(max_unpacked_bytes)
    LIM_DEF(max_entries)
    LIM_DEF(max_path)
    LIM_DEF(max_ratio)
#undef LIM_DEF
    if (out->max_layers > TPL_MAX_LAYERS)
        out->max_layers = TPL_MAX_LAYERS;
}

/* ---- credentials ------------------------------------------------------------------------ */

struct tpl_creds {
    char *user; /* both in one sodium allocation: "user\0password\0" */
    char *pass;
    size_t size;
};

int tpl_creds_new(const char *username, const char *password, struct tpl_creds **out)
{
    *out = NULL;
    if (sodium_init() < 0)
        return -EIO;
    size_t ul = strlen(username), pl = strlen(password);
    if (ul > 4096 || pl > 65536)
        return -E2BIG;
    struct tpl_creds *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->size = ul + pl + 2;
    c->user = sodium_malloc(c->size);
    if (!c->user) {
        free(c);
        return -ENOMEM;
    }
    memcpy(c->user, username, ul + 1);
    c->pass = c->user + ul + 1;
    memcpy(c->pass, password, pl + 1);
    *out = c;
    return 0;
}

void tpl_creds_free(struct tpl_creds *c)
{
    if (!c)
        return;
    sodium_free(c->user); /* wipes */
    free(c);
}

const char *tpl__creds_user(const struct tpl_creds *c)
{
    return c->user;
}
const char *tpl__creds_pass(const struct tpl_creds *c)
{
    return c->pass;
}

/* Wipes the bytes of every string in obj (credentials arrived in it). */
static void creds__wipe_json(json_t *obj)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        if (json_is_string(v))
            sodium_memzero((char *)json_string_value(v), json_string_length(v));
    }
}

int tpl_creds_from_json(json_t *obj, struct tpl_creds **out, struct al_error *err)
{
    *out = NULL;
    if (!json_is_object(obj))
        return al_error_set(err, -EINVAL, "fromImageRegistry must be an object");
    const char *type = json_string_value(json_object_get(obj, "type"));
    int rc;
    if (type && strcmp(type, "registry") == 0) {
        const char *u = json_string_value(json_object_get(obj, "username"));
        const char *p = json_string_value(json_object_get(obj, "password"));
        if (!u || !p || !*u)
            rc = al_error_set(err, -EINVAL,
                              "fromImageRegistry of type \"registry\" needs a username and a "
                              "password (strings)");
        else if ((rc = tpl_creds_new(u, p, out)))
            al_error_set(err, rc, "the registry credentials are too long or cannot be stored");
    } else if (type && strcmp(type, "gcp") == 0) {
        const char *j = json_string_value(json_object_get(obj, "serviceAccountJson"));
        if (!j || !*j)
            rc = al_error_set(err, -EINVAL,
                              "fromImageRegistry of type \"gcp\" needs serviceAccountJson (the "
                              "service account's key file as a string)");
        else if ((rc = tpl_creds_new("_json_key", j, out)))
            al_error_set(err, rc, "the service account key is too long or cannot be stored");
    } else if (type && strcmp(type, "aws") == 0) {
        rc = al_error_set(err, -ENOTSUP,
                          "fromImageRegistry of type \"aws\" is not supported: send type "
                          "\"registry\" with username \"AWS\" and the password that `aws ecr "
                          "get-login-password --region REGION` prints");
    } else {
        rc = al_error_set(err, -EINVAL,
                          "fromImageRegistry.type must be \"registry\", \"gcp\" or \"aws\"");
    }
    creds__wipe_json(obj);
    return rc;
}
