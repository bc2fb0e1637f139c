/* vault/vault_api: the routes of the vault's HTTP+JSON API (documented in docs/vault.md),
 * independent of the transport so that the daemon and the offline CLI answer alike:
 *
 *   GET    /v1/health                      {"ok":true}
 *   GET    /v1/whoami                      the caller's uid and roles
 *   GET    /v1/secrets                     list (admin, airlockd): metadata only
 *   GET    /v1/secrets/NAME                show (admin, airlockd)
 *   GET    /v1/history/NAME                show with lifecycle history (admin, airlockd)
 *   POST   /v1/secrets/NAME                create (admin) {"value_b64",...}
 *   PUT    /v1/secrets/NAME                rotate (admin) {"value_b64",...}
 *   DELETE /v1/secrets/NAME                delete (admin)
 *   POST   /v1/fetch                       the value (egress only) {"name","sandbox","rule",
 *                                          "host"[,"version","request_id"]}
 *   GET    /v1/changes?since=G[&wait_ms=N] names changed after generation G (long-poll in the
 *                                          daemon)
 */
#include "vault/vault.h"

#include <assert.h>
#include <ctype.h>
#include <sodium.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/http.h"
#include "common/percent.h"

static int api__error(json_t **out, int status, const char *msg)
{
    *out = json_pack("{s:i,s:s}", "code", status, "message", msg);
    return status;
}

/* One decimal query parameter through the tree's one query decoder, so that an escape
 * decodes as everywhere else, and given at most once: with two values, which one a reader
 * took would be a choice the caller cannot see. */
struct api__u64 {
    uint64_t n;
    unsigned seen;
};

static int api__u64_one(const char *v, void *arg)
{
    struct api__u64 *a = arg;
    if (++a->seen > 1)
        return -ENOTUNIQ;
    size_t vl = strlen(v);
    if (vl == 0 || vl > 19)
        return -EINVAL;
    for (size_t i = 0; i < vl; i++) {
        if (!isdigit((unsigned char)v[i]))
            return -EINVAL;
        a->n = a->n * 10 + (uint64_t)(v[i] - '0');
    }
    return 0;
}

/* 0 with *out set; -ENOENT absent; -ENOTUNIQ given twice; -EINVAL not a decimal integer. */
static int api__query_u64(const char *query, const char *key, uint64_t *out)
{
    char buf[24];
    struct api__u64 a = {0};
    int r = al_http_query_each(query, key, buf, sizeof buf, api__u64_one, &a);
    if (r == -E2BIG)
        r = -EINVAL;
    if (r == 0)
        *out = a.n;
    return r;
}

int vault_api_changes_query(const char *query, uint64_t *since, uint32_t *wait_ms)
{
    uint64_t s = 0, w = 0;
    int r = api__query_u64(query, "since", &s);
    if (r < 0)
        return r == -ENOENT ? -EINVAL : r;
    r = api__query_u64(query, "wait_ms", &w);
    if (r < 0 && r != -ENOENT)
        return r;
    *since = s;
    *wait_ms = (uint32_t)(w > 60000 ? 60000 : w);
    return 0;
}

bool vault_api_wants_body(const char *method)
{
    return strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0;
}

static const char *api__str(const json_t *body, const char *k)
{
    json_t *v = json_object_get(body, k);
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v)
               ? json_string_value(v)
               : NULL;
}

static int api__fetch(struct vault_service *svc, const struct vault_peer *p, const json_t *body,
                      json_t **out, struct vault_fetched *fetched)
{
    static const char *const keys[] = {"name", "version",    "sandbox", "rule",
                                       "host", "request_id", NULL};
    struct vault_fetch_req rq = {0};
    /* A malformed request is still an access: the service checks the role and logs it. */
    if (!json_is_object(body)) {
        rq.invalid = "the request body must be a JSON object";
        return vault_service_fetch(svc, p, &rq, fetched, out);
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        bool ok = false;
        for (const char *const *a = keys; *a && !ok; a++)
            ok = strcmp(*a, k) == 0;
        if (!ok)
            rq.invalid = "unknown field in the fetch request (allowed: name, version, sandbox, "
                         "rule, host, request_id)";
    }
    json_t *ver = json_object_get(body, "version");
    if (ver && (!json_is_integer(ver) || json_integer_value(ver) < 0 ||
                json_integer_value(ver) > UINT32_MAX))
        rq.invalid = "\"version\" must be a positive integer (0 = current)";
    rq.name = api__str(body, "name");
    rq.version = ver && json_is_integer(ver) ? (uint32_t)json_integer_value(ver) : 0;
    rq.sandbox = api__str(body, "sandbox");
    rq.rule = api__str(body, "rule");
    rq.host = api__str(body, "host");
    rq.request_id = api__str(body, "request_id");
    if (!rq.invalid && !rq.name)
        rq.invalid = "\"name\" (the secret) is required";
    return vault_service_fetch(svc, p, &rq, fetched, out);
}

int vault_api_handle(struct vault_service *svc, const struct vault_api_req *rq, json_t **out,
                     struct vault_fetched *fetched)
{
    assert(rq->peer && rq->method && rq->path);
    const struct vault_peer *p = rq->peer;
    const char *method = rq->method, *path = rq->path, *query = rq->query ? rq->query : "";
    const json_t *body = rq->body;
    *out = NULL;
    char name[VAULT_NAME_MAX * 3 + 1];
    bool get = strcmp(method, "GET") == 0;
    if (strcmp(path, "/v1/health") == 0) {
        if (!get)
            return api__error(out, 405, "use GET /v1/health");
        *out = json_pack("{s:b}", "ok", 1);
        return 200;
    }
    if (strcmp(path, "/v1/whoami") == 0) {
        if (!get)
            return api__error(out, 405, "use GET /v1/whoami");
        return vault_service_whoami(svc, p, out);
    }
    if (strcmp(path, "/v1/secrets") == 0 || strcmp(path, "/v1/secrets/") == 0) {
        if (!get)
            return api__error(out, 405,
                              "use GET /v1/secrets to list; create with POST /v1/secrets/NAME");
        return vault_service_list(svc, p, out);
    }
    if (strcmp(path, "/v1/changes") == 0) {
        if (!get)
            return api__error(out, 405, "use GET /v1/changes?since=GENERATION");
        uint64_t since;
        uint32_t wait;
        int qr = vault_api_changes_query(query, &since, &wait);
        if (qr == -ENOTUNIQ)
            return api__error(out, 400,
                              "GET /v1/changes takes since and wait_ms at most once each");
        if (qr != 0)
            return api__error(out, 400,
                              "GET /v1/changes needs ?since=GENERATION (an integer; "
                              "optionally &wait_ms=N up to 60000)");
        return vault_service_changes(svc, p, since, out);
    }
    if (strcmp(path, "/v1/fetch") == 0) {
        if (strcmp(method, "POST") != 0)
            return api__error(out, 405, "use POST /v1/fetch");
        if (!fetched)
            return api__error(out, 403, "values are not available here");
        return api__fetch(svc, p, body, out, fetched);
    }
    bool history = strncmp(path, "/v1/history/", 12) == 0;
    if (history || strncmp(path, "/v1/secrets/", 12) == 0) {
        if (al_percent_decode(path + 12, strlen(path + 12), name, sizeof name, 0) < 0)
            return api__error(out, 400, "the secret name in the path is not valid");
        if (history) {
            if (!get)
                return api__error(out, 405, "use GET /v1/history/NAME");
            return vault_service_show(svc, p, name, true, out);
        }
        if (get)
            return vault_service_show(svc, p, name, false, out);
        if (strcmp(method, "DELETE") == 0)
            return vault_service_delete(svc, p, name, out);
        bool create = strcmp(method, "POST") == 0;
        if (!create && strcmp(method, "PUT") != 0)
            return api__error(out, 405,
                              "use GET (show), POST (create), PUT (rotate) or DELETE on "
                              "/v1/secrets/NAME");
        struct vault_put put;
        struct vault_value value;
        const char **hosts = NULL;
        struct al_error e = {0};
        if (vault_put_from_json(body, name, &put, &value, &hosts, &e) != 0) {
            /* still an access: the service checks the role, logs it and answers 400 */
            struct vault_put bad = {.name = name, .invalid = al_error_str(&e)};
            return create ? vault_service_create(svc, p, &bad, out)
                          : vault_service_rotate(svc, p, &bad, out);
        }
        int st = create ? vault_service_create(svc, p, &put, out)
                        : vault_service_rotate(svc, p, &put, out);
        vault_value_free(&value);
        free(hosts);
        return st;
    }
    return api__error(out, 404,
                      "no such endpoint (see docs/vault.md: /v1/secrets, /v1/history, "
                      "/v1/fetch, /v1/changes, /v1/whoami, /v1/health)");
}

int vault_api_fetch_body(const json_t *meta, const struct vault_value *v, struct vault_value *body)
{
    char *m = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!m)
        return -ENOMEM;
    size_t ml = strlen(m);
    if (ml < 2 || m[ml - 1] != '}') {
        free(m);
        return -EINVAL;
    }
    size_t b64l = sodium_base64_ENCODED_LEN(v->len, sodium_base64_VARIANT_ORIGINAL);
    size_t cap = ml + b64l + 32;
    int rc = vault_value_alloc(body, cap);
    if (rc) {
        free(m);
        return rc;
    }
    size_t o = ml - 1;
    memcpy(body->data, m, o);
    free(m);
    const char *k = ml > 2 ? ",\"value_b64\":\"" : "\"value_b64\":\"";
    memcpy(body->data + o, k, strlen(k));
    o += strlen(k);
    sodium_bin2base64((char *)body->data + o, b64l, v->data, v->len,
                      sodium_base64_VARIANT_ORIGINAL);
    o += strlen((char *)body->data + o);
    memcpy(body->data + o, "\"}", 2);
    o += 2;
    body->len = o;
    return 0;
}
