/* common/auditlog_query: which records of the egress audit log a query selects, and the
 * OCSF events they are exported as.
 *
 * Owns: the filters of `airlock audit tail|query|export` and of airlockd's audit export
 * (sandbox, decision, host, type, reason, a time window), the times they take, and the
 * mapping of a record to OCSF 1.1 (HTTP Activity 4002, DNS Activity 4003, Network Activity
 * 4001): one implementation for the CLI and the console, so both select and map alike.
 */
#include "common/auditlog_query.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"

int al_audit_time_arg(const char *s, uint64_t *ns)
{
    uint64_t ms;
    if (al_time_parse_rfc3339(s, ns) == 0)
        return 0;
    if (al_parse_duration_ms(s, &ms) == 0) {
        uint64_t now = al_wall_ns();
        *ns = now > ms * 1000000ull ? now - ms * 1000000ull : 0;
        return 0;
    }
    return -EINVAL;
}

static const char *aq__s(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static bool aq__host_match(const char *want, const char *have)
{
    if (!have)
        return false;
    if (want[0] == '.') {
        size_t wl = strlen(want), hl = strlen(have);
        return (hl > wl && strcasecmp(have + hl - wl, want) == 0) ||
               strcasecmp(have, want + 1) == 0;
    }
    return strcasecmp(want, have) == 0;
}

/* --type T: records of type T, and the aggregates that count records of type T ("of"). */
static bool aq__type_match(const char *want, json_t *j)
{
    const char *type = aq__s(j, "type");
    if (!type)
        return false;
    if (strcmp(type, want) == 0)
        return true;
    const char *of = aq__s(j, "of");
    return strcmp(type, "aggregate") == 0 && of && strcmp(of, want) == 0;
}

/* The last instant a time of limited precision stands for: "…03.998Z" is any moment up to
 * 03.998999999 (aggregate times are written in milliseconds, the decisions' own are finer). */
static int aq__time_end(const char *s, uint64_t *ns)
{
    if (al_time_parse_rfc3339(s, ns) < 0)
        return -EINVAL;
    const char *dot = strchr(s, '.');
    size_t digits = dot ? strspn(dot + 1, "0123456789") : 0;
    uint64_t unit = 1000000000ull;
    for (size_t i = 0; i < digits && unit > 1; i++)
        unit /= 10;
    *ns += unit - 1;
    return 0;
}

bool al_audit_is_aggregate(const json_t *j)
{
    const char *type = aq__s(j, "type");
    return type && strcmp(type, "aggregate") == 0;
}

/* The time a record is about. An aggregate counts decisions taken from its first_time to its
 * last_time and is written only when its interval ends (up to a sweep later), so its own
 * "time" says when it was appended, not when its decisions were taken; any other record is
 * about the instant it was appended. false when the times are missing or not RFC 3339. */
static bool aq__span(json_t *j, uint64_t *from, uint64_t *to)
{
    if (al_audit_is_aggregate(j) && aq__s(j, "first_time") && aq__s(j, "last_time") &&
        al_time_parse_rfc3339(aq__s(j, "first_time"), from) == 0 &&
        aq__time_end(aq__s(j, "last_time"), to) == 0 && *from <= *to)
        return true;
    const char *ts = aq__s(j, "time");
    if (!ts || al_time_parse_rfc3339(ts, from) < 0)
        return false;
    *to = *from;
    return true;
}

/* A time window selects the records about a moment of the window: an aggregate whose
 * interval overlaps it (some of its decisions may have been taken inside, which the record
 * cannot tell apart), any other record whose time is inside. */
bool al_audit_filter_match(const struct al_audit_filter *f, const struct al_auditlog_record *rec)
{
    json_t *j = rec->json;
    if (!j)
        return f->all;
    if (rec->internal && !f->all)
        return false;
    if (f->sandbox && (!aq__s(j, "sandbox") || strcmp(aq__s(j, "sandbox"), f->sandbox) != 0))
        return false;
    if (f->decision && (!aq__s(j, "decision") || strcmp(aq__s(j, "decision"), f->decision) != 0))
        return false;
    if (f->type && !aq__type_match(f->type, j))
        return false;
    if (f->reason && (!aq__s(j, "reason") || strcmp(aq__s(j, "reason"), f->reason) != 0))
        return false;
    if (f->host && !aq__host_match(f->host, aq__s(j, "host")) &&
        !aq__host_match(f->host, aq__s(j, "sni")) && !aq__host_match(f->host, aq__s(j, "qname")))
        return false;
    if (f->since_ns || f->until_ns) {
        uint64_t from, to;
        if (!aq__span(j, &from, &to))
            return false;
        if (f->since_ns && to < f->since_ns)
            return false;
        if (f->until_ns && from > f->until_ns)
            return false;
    }
    return true;
}

/* ---- OCSF ------------------------------------------------------------------------------ */

static void aq__ocsf_endpoint(json_t *o, const char *key, const char *ep, const char *host)
{
    if (!ep && !host)
        return;
    json_t *e = json_object();
    if (ep) {
        /* "ip:port" or "[v6]:port" */
        char ip[80] = "";
        int port = 0;
        const char *colon = strrchr(ep, ':');
        if (colon) {
            size_t l = (size_t)(colon - ep);
            if (ep[0] == '[' && l >= 2) {
                snprintf(ip, sizeof ip, "%.*s", (int)(l - 2), ep + 1);
            } else {
                snprintf(ip, sizeof ip, "%.*s", (int)l, ep);
            }
            port = atoi(colon + 1);
        }
        if (ip[0])
            json_object_set_new(e, "ip", json_string(ip));
        if (port)
            json_object_set_new(e, "port", json_integer(port));
    }
    if (host)
        json_object_set_new(e, "hostname", json_string(host));
    json_object_set_new(o, key, e);
}

static int aq__ocsf_http_activity(const char *m)
{
    static const char *const names[] = {"CONNECT", "DELETE", "GET", "HEAD",
                                        "OPTIONS", "POST",   "PUT", "TRACE"};
    for (int i = 0; i < 8; i++)
        if (m && strcmp(m, names[i]) == 0)
            return i + 1;
    return 99;
}

/* One OCSF event for a record, or NULL for records that are not traffic. */
json_t *al_audit_ocsf_event(const struct al_auditlog_record *rec)
{
    json_t *j = rec->json;
    const char *type = aq__s(j, "type");
    if (!type)
        return NULL;
    /* An aggregate is the event it counts, with OCSF's count and time span. */
    bool agg = strcmp(type, "aggregate") == 0;
    if (agg && !(type = aq__s(j, "of")))
        return NULL;
    int class_uid, activity;
    const char *decision = aq__s(j, "decision");
    bool denied = decision && strcmp(decision, "deny") == 0;
    if (strcmp(type, "http_request") == 0) {
        class_uid = 4002;
        activity = aq__ocsf_http_activity(aq__s(j, "method"));
    } else if (strcmp(type, "dns_query") == 0 ||
               (strcmp(type, "security_event") == 0 && aq__s(j, "qname"))) {
        class_uid = 4003;
        activity = 2; /* Response: the record holds the query and our answer */
    } else if (strcmp(type, "connection") == 0) {
        class_uid = 4001;
        activity = denied ? 5 : 1; /* Refuse / Open */
    } else if (strcmp(type, "connection_end") == 0) {
        class_uid = 4001;
        activity = 2; /* Close */
    } else if (strcmp(type, "security_event") == 0) {
        class_uid = 4001;
        activity = 5;
    } else {
        return NULL;
    }
    json_t *o = json_object();
    uint64_t t = 0;
    if (aq__s(j, "time"))
        al_time_parse_rfc3339(aq__s(j, "time"), &t);
    json_object_set_new(o, "class_uid", json_integer(class_uid));
    json_object_set_new(o, "category_uid", json_integer(4));
    json_object_set_new(o, "activity_id", json_integer(activity));
    json_object_set_new(o, "type_uid", json_integer((json_int_t)class_uid * 100 + activity));
    json_object_set_new(o, "time", json_integer((json_int_t)(t / 1000000)));
    if (agg) {
        uint64_t t0 = 0, t1 = 0;
        json_object_set(o, "count", json_object_get(j, "count"));
        if (aq__s(j, "first_time") && al_time_parse_rfc3339(aq__s(j, "first_time"), &t0) == 0)
            json_object_set_new(o, "start_time", json_integer((json_int_t)(t0 / 1000000)));
        if (aq__s(j, "last_time") && al_time_parse_rfc3339(aq__s(j, "last_time"), &t1) == 0)
            json_object_set_new(o, "end_time", json_integer((json_int_t)(t1 / 1000000)));
    }
    json_object_set_new(o, "severity_id",
                        json_integer(strcmp(type, "security_event") == 0 ? 3 : 1));
    json_object_set_new(o, "action_id", json_integer(denied ? 2 : 1));
    json_object_set_new(o, "disposition_id", json_integer(denied ? 2 : 1));
    json_object_set_new(o, "status_id", json_integer(denied ? 2 : 1));
    if (aq__s(j, "reason"))
        json_object_set_new(o, "status_detail", json_string(aq__s(j, "reason")));
    json_t *md =
        json_pack("{s:s,s:{s:s,s:s,s:{s:s}},s:s,s:I}", "version", AL_AUDIT_OCSF_VERSION, "product",
                  "name", "airlock", "vendor_name", "airlock", "feature", "name", "egress",
                  "log_name", "egress", "sequence", (json_int_t)rec->seq);
    if (aq__s(j, "request_id"))
        json_object_set_new(md, "uid", json_string(aq__s(j, "request_id")));
    else if (agg && aq__s(j, "first_request_id"))
        json_object_set_new(md, "uid", json_string(aq__s(j, "first_request_id")));
    if (aq__s(j, "connection_id"))
        json_object_set_new(md, "correlation_uid", json_string(aq__s(j, "connection_id")));
    json_object_set_new(o, "metadata", md);
    aq__ocsf_endpoint(o, "src_endpoint", aq__s(j, "src"), NULL);
    json_t *src = json_object_get(o, "src_endpoint");
    if (src && aq__s(j, "sandbox"))
        json_object_set_new(src, "uid", json_string(aq__s(j, "sandbox")));
    const char *dsthost = aq__s(j, "host") ? aq__s(j, "host") : aq__s(j, "sni");
    aq__ocsf_endpoint(o, "dst_endpoint", aq__s(j, "dst"), class_uid == 4003 ? NULL : dsthost);
    if (aq__s(j, "rule") || json_object_get(j, "policy")) {
        json_t *fr = json_object();
        if (aq__s(j, "rule"))
            json_object_set_new(fr, "name", json_string(aq__s(j, "rule")));
        json_t *pol = json_object_get(j, "policy");
        if (json_is_object(pol) && aq__s(pol, "hash"))
            json_object_set_new(fr, "uid", json_string(aq__s(pol, "hash")));
        if (json_is_object(pol) && aq__s(pol, "name"))
            json_object_set_new(fr, "desc", json_string(aq__s(pol, "name")));
        json_object_set_new(o, "firewall_rule", fr);
    }
    json_t *bu = json_object_get(j, "bytes_up"), *bd = json_object_get(j, "bytes_down");
    if (bu || bd)
        json_object_set_new(o, "traffic",
                            json_pack("{s:O*,s:O*}", "bytes_out", bu, "bytes_in", bd));
    if (class_uid == 4002) {
        json_t *req =
            json_pack("{s:s?,s:{s:s?,s:s?,s:s}}", "http_method", aq__s(j, "method"), "url",
                      "hostname", aq__s(j, "host"), "path", aq__s(j, "path"), "scheme", "http");
        json_object_set_new(o, "http_request", req);
        json_t *st = json_object_get(j, "status");
        if (json_is_integer(st))
            json_object_set_new(o, "http_response", json_pack("{s:O}", "code", st));
    } else if (class_uid == 4003) {
        json_object_set_new(o, "query",
                            json_pack("{s:s?,s:s?,s:s}", "hostname", aq__s(j, "qname"), "type",
                                      aq__s(j, "qtype"), "class", "IN"));
        json_t *ans = json_object_get(j, "answers");
        if (json_is_array(ans)) {
            json_t *arr = json_array();
            size_t i;
            json_t *v;
            json_array_foreach(ans, i, v) json_array_append_new(
                arr, json_pack("{s:O,s:s?,s:O*}", "rdata", v, "type", aq__s(j, "qtype"), "ttl",
                               json_object_get(j, "ttl")));
            json_object_set_new(o, "answers", arr);
        }
        if (aq__s(j, "rcode"))
            json_object_set_new(o, "rcode", json_string(aq__s(j, "rcode")));
    } else if (aq__s(j, "sni")) {
        json_object_set_new(o, "tls", json_pack("{s:s}", "sni", aq__s(j, "sni")));
    }
    /* Everything else (sandbox, template, decision, mode, timings...) as the record had it. */
    json_object_set(o, "unmapped", j);
    return o;
}
