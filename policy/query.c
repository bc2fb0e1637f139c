/* policy/query: a request as a person writes it, decided and explained.
 *
 * Owns: reading the URL forms of docs/policy.md "explain" (https://host[:port]/path,
 * http://..., host:port, tcp://host:port, dns:NAME) with a method, a destination address, a
 * body and connection level into a policy_request; deciding it (policy_decide or
 * policy_dns_decide); and the decision as JSON. `airlock policy explain|test` (cli/policy.c)
 * and airlockd's console (controlplane/console_policies.c) ask through this one query, so the
 * same text gives the same answer in both. */
#include "policy/policy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/http_head.h"

const char *policy_tls_name(enum policy_tls t)
{
    return t == POLICY_TLS_INSPECT       ? "inspect"
           : t == POLICY_TLS_PASSTHROUGH ? "passthrough"
                                         : "none";
}

static const char *query__scheme(enum policy_scheme s)
{
    return s == POLICY_SCHEME_HTTPS ? "https" : s == POLICY_SCHEME_HTTP ? "http" : "tcp";
}

/* The request-target parser of the proxies reads the URL (common/http_head.h): what it
 * refuses in a sandbox's request is refused here with the same reason. */
static int query__url(const char *url, const char *method, bool connection, struct policy_query *q,
                      struct al_error *err)
{
    if (strncmp(url, "dns:", 4) == 0) {
        if (method)
            return al_error_set(err, -EINVAL,
                                "a method needs an http:// or https:// request "
                                "(not dns:)");
        q->dns = true;
        snprintf(q->host, sizeof q->host, "%s", url + 4);
        return 0;
    }
    bool tcp = strncmp(url, "tcp://", 6) == 0;
    const char *u = tcp ? url + 6 : url, *why = NULL;
    struct al_http_target t;
    if (al_http_target_parse(u, strlen(u), AL_HTTP_TARGET_AUTHORITY_OK, &t, &why) < 0) {
        if (strcmp(why, "userinfo_in_authority") == 0)
            return al_error_set(err, -EINVAL,
                                "'%s' has userinfo (user@host): that is not part of the host the "
                                "proxy checks; remove it",
                                url);
        if (strcmp(why, "fragment_in_target") == 0)
            return al_error_set(err, -EINVAL, "'%s': a fragment (#...) is never sent; remove it",
                                url);
        if (strcmp(why, "missing_port") == 0)
            return al_error_set(err, -EINVAL, "'%s': raw TCP needs host:port", url);
        if (strcmp(why, "invalid_target") == 0 && strstr(url, "://"))
            return al_error_set(err, -EINVAL, "unsupported URL scheme in '%s' (https, http, tcp)",
                                url);
        if (strcmp(why, "invalid_target") == 0)
            return al_error_set(err, -EINVAL,
                                "'%s' is not a URL: https://host[:port]/path, "
                                "http://host[:port]/path, host:port, tcp://host:port or dns:NAME",
                                url);
        return al_error_set(err, -EINVAL, "'%s': %s", url, al_http_target_message(why));
    }
    if (t.form != AL_HTTP_TARGET_ABSOLUTE && t.form != AL_HTTP_TARGET_AUTHORITY)
        return al_error_set(err, -EINVAL,
                            "'%s' has no host: https://host[:port]/path, http://host[:port]/path, "
                            "host:port, tcp://host:port or dns:NAME",
                            url);
    if (tcp && t.form != AL_HTTP_TARGET_AUTHORITY)
        return al_error_set(err, -EINVAL, "'%s': raw TCP is tcp://host:port (no scheme inside)",
                            url);
    size_t hl;
    const char *host = al_http_authority_host(&t.authority, &hl);
    memcpy(q->host, host, hl); /* at most 257 bytes (al_http_authority_parse) */
    q->host[hl] = '\0';
    q->req.host = q->host;
    q->req.host_len = hl;
    if (t.form == AL_HTTP_TARGET_AUTHORITY) {
        q->req.scheme = POLICY_SCHEME_TCP;
        q->req.port = t.authority.port;
    } else {
        q->req.scheme = t.https ? POLICY_SCHEME_HTTPS : POLICY_SCHEME_HTTP;
        q->req.port = t.authority.has_port ? t.authority.port : t.https ? 443 : 80;
    }
    if (q->req.scheme == POLICY_SCHEME_TCP || connection) {
        if (method)
            return al_error_set(err, -EINVAL,
                                "a method needs an http:// or https:// request "
                                "(not raw TCP or a connection-level query)");
        return 0;
    }
    if (method && (!method[0] || strlen(method) >= sizeof q->method))
        return al_error_set(err, -EINVAL, "the method must be 1 to %zu characters (GET, POST, ...)",
                            sizeof q->method - 1);
    snprintf(q->method, sizeof q->method, "%s", method ? method : "GET");
    if (al_http_target_origin(&t, q->path, sizeof q->path) < 0)
        return al_error_set(err, -EINVAL, "'%s': the path is longer than %d bytes", url,
                            POLICY_PATH_MAX);
    q->req.method = q->method;
    q->req.method_len = strlen(q->method);
    q->req.path = q->path;
    q->req.path_len = strlen(q->path);
    return 0;
}

int policy_query_parse(const char *url, const struct policy_query_opts *o, struct policy_query *q,
                       struct al_error *err)
{
    static const struct policy_query_opts none = {0};
    if (!o)
        o = &none;
    memset(q, 0, sizeof *q);
    int rc = query__url(url, o->method, o->connection, q, err);
    if (rc)
        return rc;
    if (o->addr) {
        struct policy_host h;
        struct al_error e2 = {0};
        if (q->dns)
            return al_error_set(err, -EINVAL,
                                "an address goes with a connection or a request, "
                                "not a dns: question");
        if (policy_host_canon(o->addr, strlen(o->addr), &h, &e2) || h.kind != POLICY_HOST_ADDR)
            return al_error_set(err, -EINVAL,
                                "the address '%s' is not an IP address (203.0.113.5, 2001:db8::1)",
                                o->addr);
        q->addr = h.addr;
        q->req.addr = &q->addr;
    }
    if (o->body) {
        if (!q->req.method)
            return al_error_set(err, -EINVAL,
                                "a body needs an http:// or https:// request (not raw TCP, dns: "
                                "or a connection-level query)");
        q->req.body = true;
    }
    return 0;
}

void policy_query_decide(const struct policy *p, const struct policy_query *q,
                         struct policy_decision *d)
{
    if (q->dns)
        policy_dns_decide(p, q->host, strlen(q->host), d);
    else
        policy_decide(p, &q->req, d);
}

size_t policy_query_explain(const struct policy *p, const struct policy_query *q,
                            const struct policy_decision *d, char *buf, size_t len)
{
    return policy_explain(p, q->dns ? NULL : &q->req, d, buf, len);
}

json_t *policy_query_json(const struct policy *p, const struct policy_query *q,
                          const struct policy_decision *d)
{
    char why[1024];
    policy_query_explain(p, q, d, why, sizeof why);
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "decision", json_string(d->verdict == POLICY_ALLOW ? "allow" : "deny"));
    json_object_set_new(o, "would_deny", json_boolean(d->would_deny));
    json_object_set_new(o, "rule", d->rule ? json_string(d->rule->name) : json_null());
    json_object_set_new(o, "rule_line", d->rule ? json_integer(d->rule->line) : json_null());
    json_object_set_new(o, "reason", json_string(policy_reason_code(d->reason)));
    json_object_set_new(o, "explanation", json_string(why));
    json_object_set_new(o, "tls", json_string(policy_tls_name(d->tls)));
    json_object_set_new(o, "websocket", json_boolean(d->websocket));
    json_t *inj = json_array();
    for (size_t i = 0; i < d->n_inject; i++)
        json_array_append_new(inj, json_string(d->inject[i].header));
    json_object_set_new(o, "inject", inj);
    json_object_set_new(o, "host", d->host.len ? json_string(d->host.text) : json_null());
    json_object_set_new(o, "host_kind",
                        d->host.kind == POLICY_HOST_ADDR   ? json_string("address")
                        : d->host.kind == POLICY_HOST_NAME ? json_string("name")
                                                           : json_null());
    json_object_set_new(o, "address_class",
                        d->addr_info.code ? json_string(d->addr_info.code) : json_null());
    if (q->dns) {
        json_object_set_new(o, "query", json_string("dns"));
    } else {
        json_object_set_new(o, "query", json_string(q->req.method ? "request" : "connection"));
        json_object_set_new(o, "scheme", json_string(query__scheme(q->req.scheme)));
        json_object_set_new(o, "port", json_integer(q->req.port));
        json_object_set_new(o, "method", q->req.method ? json_string(q->req.method) : json_null());
        json_object_set_new(o, "path", q->req.path ? json_string(q->req.path) : json_null());
        if (q->req.method)
            json_object_set_new(o, "body", json_boolean(q->req.body));
    }
    json_object_set_new(o, "policy",
                        json_pack("{s:s, s:s, s:s}", "name", policy_name(p), "hash", policy_hash(p),
                                  "mode",
                                  policy_mode(p) == POLICY_MODE_REPORT ? "report" : "enforce"));
    return o;
}
