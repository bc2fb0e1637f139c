/* cli/audit: `airlock audit tail|query|verify|export|hash-secret` over the egress
 * audit log (<state>/audit/egress-*.jsonl; docs/audit.md describes every field).
 *
 * Reading and verifying are common/auditlog's (reader, verifier), the filters and the OCSF
 * export mapping common/auditlog_query's (airlockd's console exports with the same); this
 * file owns the options and the one-line human view.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/auditlog.h"
#include "common/auditlog_query.h"
#include "common/json.h"
#include "common/paths.h"
#include "common/util.h"

static void cli__usage(FILE *f)
{
    fputs("usage: airlock [--state-dir DIR] audit <command> [options]\n"
          "\n"
          "  tail [-n N] [-f] [--json] [--all] [filters]  the last N records (default 20)\n"
          "        that match the filters (those of query); -f then follows\n"
          "  query [filters] [--json] [--all]       records matching every filter given:\n"
          "        --sandbox ID  --since T  --until T  --decision allow|deny|would_deny\n"
          "        --host NAME (host, SNI or DNS name; '.example.com' matches subdomains)\n"
          "        --type connection|connection_end|http_request|dns_query|security_event|\n"
          "               aggregate|... (a type also matches the aggregates that count it)\n"
          "        --reason R\n"
          "        T is RFC 3339 (2026-01-02T03:04:05Z) or an age (90s, 10m, 2h); an\n"
          "        aggregate matches when its interval (first_time..last_time) overlaps\n"
          "  verify [FILES...] [--pubkey F] [--checkpoints F] [--json]\n"
          "        checks the hash chain and signed checkpoints, and that what is missing from\n"
          "        the start is what retention says it deleted (and by which rule), and says\n"
          "        how many decisions the aggregate records stand for; exit 0\n"
          "        when intact, 1 naming the first bad record and why (edited, removed,\n"
          "        reordered, inserted, truncated, bad signature, missing file)\n"
          "  export --ocsf [filters]                  OCSF 1.1 events, one JSON per line\n"
          "  hash-secret [--from-file F]            the secret id (keyed hash) of a value read\n"
          "                                         from stdin, to search the log for it\n"
          "\n"
          "The log is read from <state>/audit (--dir DIR to read another directory).\n",
          f);
}

static const char *cli__s(const json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* An aggregate's part of its line: how many decisions, of what, to which name, the request
 * ids and times of the first and last, and what they add up to:
 *   412 x http_request pypi.org 3c5b7868-1a2..3c5b7868-3f1
 *   2026-11-30T01:02:03.117Z..01:02:03.998Z (881 ms) up 0 B down 5123841 B 2xx 410 4xx 2 */
static void cli__print_aggregate(json_t *j)
{
    const char *host = cli__s(j, "host");
    printf(" %lld x %s %s", (long long)json_integer_value(json_object_get(j, "count")),
           cli__s(j, "of") ? cli__s(j, "of") : "?",
           host ? host
                : (json_is_true(json_object_get(j, "merged")) ? "(names merged)" : "(no name)"));
    if (cli__s(j, "first_request_id"))
        printf(" %s..%s", cli__s(j, "first_request_id"),
               cli__s(j, "last_request_id") ? cli__s(j, "last_request_id") : "?");
    const char *t0 = cli__s(j, "first_time"), *t1 = cli__s(j, "last_time");
    if (t0 && t1) {
        /* The last time without its date when both are of one day. */
        size_t day = strchr(t0, 'T') ? (size_t)(strchr(t0, 'T') - t0) + 1 : 0;
        const char *t1s = day && strncmp(t0, t1, day) == 0 ? t1 + day : t1;
        printf(" %s..%s", t0, t1s);
        uint64_t a, b;
        if (al_time_parse_rfc3339(t0, &a) == 0 && al_time_parse_rfc3339(t1, &b) == 0 && b >= a)
            printf(" (%llu ms)", (unsigned long long)((b - a) / 1000000));
    }
    json_t *up = json_object_get(j, "bytes_up"), *down = json_object_get(j, "bytes_down");
    if (json_is_integer(up))
        printf(" up %lld B", (long long)json_integer_value(up));
    if (json_is_integer(down))
        printf(" down %lld B", (long long)json_integer_value(down));
    json_t *st = json_object_get(j, "status");
    if (json_is_object(st)) {
        const char *k;
        json_t *v;
        json_object_foreach(st, k, v) printf(" %s %lld", k, (long long)json_integer_value(v));
    }
    json_t *errs = json_object_get(j, "errors");
    if (json_is_integer(errs) && json_integer_value(errs) > 0)
        printf(" errors %lld", (long long)json_integer_value(errs));
}

/* One line for humans. */
static void cli__print_human(const struct al_auditlog_record *rec)
{
    json_t *j = rec->json;
    if (!j) {
        printf("%.*s\n", (int)rec->len, rec->line);
        return;
    }
    const char *type = cli__s(j, "type");
    json_t *al = json_object_get(j, "auditlog");
    if (!type && al)
        type = cli__s(al, "event") ? cli__s(al, "event") : "checkpoint";
    printf("%-24s %6llu %-14s %-10s %-26s %-12s", cli__s(j, "time") ? cli__s(j, "time") : "-",
           (unsigned long long)rec->seq, type ? type : "-",
           cli__s(j, "decision") ? cli__s(j, "decision") : "-",
           cli__s(j, "reason")  ? cli__s(j, "reason")
           : cli__s(j, "event") ? cli__s(j, "event")
           : cli__s(j, "end")   ? cli__s(j, "end") /* connection_end and its aggregates */
                                : "-",
           cli__s(j, "sandbox") ? cli__s(j, "sandbox") : "-");
    if (al_audit_is_aggregate(j)) {
        cli__print_aggregate(j);
    } else if (cli__s(j, "method"))
        printf(" %s http://%s%s", cli__s(j, "method"), cli__s(j, "host") ? cli__s(j, "host") : "?",
               cli__s(j, "path") ? cli__s(j, "path") : "");
    else if (cli__s(j, "qname"))
        printf(" %s %s", cli__s(j, "qtype") ? cli__s(j, "qtype") : "?", cli__s(j, "qname"));
    else if (cli__s(j, "sni"))
        printf(" tls %s", cli__s(j, "sni"));
    else if (cli__s(j, "host"))
        printf(" %s", cli__s(j, "host"));
    if (cli__s(j, "dst"))
        printf(" -> %s", cli__s(j, "dst"));
    json_t *st = json_object_get(j, "status");
    if (json_is_integer(st))
        printf(" %lld", (long long)json_integer_value(st));
    if (cli__s(j, "rcode"))
        printf(" %s", cli__s(j, "rcode"));
    if (al && json_is_object(al) && cli__s(al, "reason"))
        printf(" checkpoint (%s)", cli__s(al, "reason"));
    else if (al && json_is_object(al) && json_is_array(json_object_get(al, "pruned"))) {
        size_t i;
        json_t *f;
        printf(" deletes up to seq %lld:",
               (long long)json_integer_value(json_object_get(al, "retained_from")) - 1);
        json_array_foreach(json_object_get(al, "pruned"), i, f)
            printf(" %s (%s)", cli__s(f, "file") ? cli__s(f, "file") : "?",
                   cli__s(f, "rule") ? cli__s(f, "rule") : "?");
    }
    putchar('\n');
}

/* ---- commands -------------------------------------------------------------------------- */

static int cli__open_reader(const char *dir, bool follow, struct al_auditlog_reader **r)
{
    struct al_error err = {0};
    struct al_auditlog_reader_opts o = {.dir = dir, .prefix = "egress", .follow = follow};
    int rc = al_auditlog_reader_open(&o, r, &err);
    if (rc < 0)
        fprintf(stderr, "airlock audit: %s\n", al_error_str(&err));
    return rc;
}

enum { OUT_HUMAN, OUT_JSON, OUT_OCSF };

static void cli__emit(int out, const struct al_auditlog_record *rec)
{
    if (out == OUT_JSON) {
        printf("%.*s\n", (int)rec->len, rec->line);
    } else if (out == OUT_OCSF) {
        json_t *ev = rec->json ? al_audit_ocsf_event(rec) : NULL;
        if (ev) {
            char *s = json_dumps(ev, JSON_COMPACT);
            if (s)
                puts(s);
            free(s);
            json_decref(ev);
        }
    } else {
        cli__print_human(rec);
    }
}

/* tail: the last n records that match (not the matches among the last n lines: checkpoints
 * are hidden without --all, and filters select fewer). Reads back from the end in growing
 * steps until n have matched or the whole log was read; leaves the reader at the end. */
static int cli__tail(struct al_auditlog_reader *r, const struct al_audit_filter *f, int out,
                     uint64_t n)
{
    if (n == 0)
        return al_auditlog_reader_seek_tail(r, 0);
    if (n > 10000000)
        n = 10000000;
    char **ring = calloc((size_t)n, sizeof *ring);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = ring && lens ? 0 : -ENOMEM;
    uint64_t got = 0;
    for (uint64_t back = n < 16 ? 64 : n * 4; rc == 0;
         back = back > UINT64_MAX / 4 ? UINT64_MAX : back * 4) {
        for (uint64_t i = 0; i < n && i < got; i++) {
            free(ring[i]);
            ring[i] = NULL;
        }
        got = 0;
        if ((rc = al_auditlog_reader_seek_tail(r, back)) < 0)
            break;
        uint64_t lines = 0;
        struct al_auditlog_record rec;
        while ((rc = al_auditlog_reader_next(r, &rec)) == 1) {
            lines++;
            if (!al_audit_filter_match(f, &rec))
                continue;
            size_t k = (size_t)(got++ % n);
            free(ring[k]);
            if (!(ring[k] = malloc(rec.len + 1))) {
                rc = -ENOMEM;
                break;
            }
            memcpy(ring[k], rec.line, rec.len);
            ring[k][rec.len] = '\0';
            lens[k] = rec.len;
        }
        if (rc < 0)
            break;
        if (got >= n || lines < back)
            break; /* enough, or back reached the start of the log */
    }
    uint64_t first = got > n ? got - n : 0;
    for (uint64_t i = first; rc == 0 && i < got; i++) {
        size_t k = (size_t)(i % n);
        struct al_auditlog_record rec = {.line = ring[k], .len = lens[k]};
        rec.json = json_loadb(ring[k], lens[k], 0, NULL);
        if (rec.json && !json_is_object(rec.json)) {
            json_decref(rec.json);
            rec.json = NULL;
        }
        json_t *seq = json_object_get(rec.json, "seq");
        if (json_is_integer(seq) && json_integer_value(seq) > 0)
            rec.seq = (uint64_t)json_integer_value(seq);
        rec.internal = json_is_object(json_object_get(rec.json, "auditlog"));
        cli__emit(out, &rec);
        json_decref(rec.json);
    }
    for (uint64_t i = 0; ring && i < n; i++)
        free(ring[i]);
    free(ring);
    free(lens);
    return rc;
}

static int cli__scan(const char *dir, const struct al_audit_filter *f, int out, bool tail,
                     uint64_t n, bool follow)
{
    struct al_auditlog_reader *r;
    if (cli__open_reader(dir, follow, &r) < 0)
        return 1;
    int rc = tail ? cli__tail(r, f, out, n) : 0;
    if (rc < 0) {
        fprintf(stderr, "airlock audit: reading the log: %s\n", strerror(-rc));
        al_auditlog_reader_close(r);
        return 1;
    }
    if (tail && !follow) {
        al_auditlog_reader_close(r);
        return 0;
    }
    struct al_auditlog_record rec;
    for (;;) {
        rc = al_auditlog_reader_next(r, &rec);
        if (rc < 0) {
            fprintf(stderr, "airlock audit: reading the log: %s\n", strerror(-rc));
            al_auditlog_reader_close(r);
            return 1;
        }
        if (rc == 0) {
            if (!follow)
                break;
            fflush(stdout);
            al_auditlog_reader_wait(r, -1);
            continue;
        }
        if (!al_audit_filter_match(f, &rec))
            continue;
        cli__emit(out, &rec);
        if (follow)
            fflush(stdout);
    }
    al_auditlog_reader_close(r);
    return 0;
}

/* ---- verify: what the aggregate records stand for ---------------------------------------- */

#define CLI__AGG_GROUPS 16

struct cli__aggsum {
    uint64_t records, decisions, merged;
    uint64_t malformed, first_malformed; /* no valid count, type, decision or interval */
    uint64_t first_ns, last_ns;
    char first_time[40], last_time[40];
    json_t *sandboxes; /* the set of sandbox ids */
    size_t n;
    struct {
        char of[24], decision[16];
        uint64_t records, decisions, merged;
    } g[CLI__AGG_GROUPS];
    uint64_t other_records, other_decisions; /* (of, decision) pairs beyond the table */
};

static void cli__agg_on_record(const json_t *j, uint64_t seq, void *arg)
{
    struct cli__aggsum *a = arg;
    if (!al_audit_is_aggregate(j))
        return;
    a->records++;
    json_t *count = json_object_get(j, "count");
    const char *of = cli__s(j, "of"), *decision = cli__s(j, "decision");
    const char *t0s = cli__s(j, "first_time"), *t1s = cli__s(j, "last_time");
    uint64_t t0, t1;
    if (!json_is_integer(count) || json_integer_value(count) < 1 || !of || !decision || !t0s ||
        !t1s || al_time_parse_rfc3339(t0s, &t0) < 0 || al_time_parse_rfc3339(t1s, &t1) < 0 ||
        t1 < t0) {
        if (!a->malformed++)
            a->first_malformed = seq;
        return;
    }
    uint64_t n = (uint64_t)json_integer_value(count);
    bool merged = json_is_true(json_object_get(j, "merged"));
    a->decisions += n;
    a->merged += merged;
    if (!a->first_time[0] || t0 < a->first_ns) {
        a->first_ns = t0;
        snprintf(a->first_time, sizeof a->first_time, "%s", t0s);
    }
    if (!a->last_time[0] || t1 > a->last_ns) {
        a->last_ns = t1;
        snprintf(a->last_time, sizeof a->last_time, "%s", t1s);
    }
    if (cli__s(j, "sandbox"))
        json_object_set_new(a->sandboxes, cli__s(j, "sandbox"), json_true());
    size_t i = 0;
    while (i < a->n && (strcmp(a->g[i].of, of) != 0 || strcmp(a->g[i].decision, decision) != 0))
        i++;
    if (i == a->n && a->n < CLI__AGG_GROUPS) {
        snprintf(a->g[i].of, sizeof a->g[i].of, "%s", of);
        snprintf(a->g[i].decision, sizeof a->g[i].decision, "%s", decision);
        a->n++;
    }
    if (i == a->n) {
        a->other_records++;
        a->other_decisions += n;
        return;
    }
    a->g[i].records++;
    a->g[i].decisions += n;
    a->g[i].merged += merged;
}

struct cli__verify_print {
    const struct cli__aggsum *agg;
    bool intact, any;
};

static void cli__agg_print(FILE *out, void *arg)
{
    const struct cli__verify_print *p = arg;
    const struct cli__aggsum *a = p->agg;
    const char *scope = p->intact ? "" : " (in the records verified before the problem)";
    if (!p->any)
        return;
    if (!a->records) {
        fprintf(out, "aggregates: none%s: every decision is a record of its own\n", scope);
        return;
    }
    uint64_t valid = a->records - a->malformed;
    fprintf(out,
            "aggregates%s: %" PRIu64 " record(s) stand for %" PRIu64 " decision(s) that the "
            "sandboxes' audit budgets counted instead of writing them one by one",
            scope, valid, a->decisions);
    if (valid)
        fprintf(out, ", of %zu sandbox(es), taken from %s to %s", json_object_size(a->sandboxes),
                a->first_time, a->last_time);
    fprintf(out, "%s\n", valid ? ":" : "");
    for (size_t i = 0; i < a->n; i++) {
        fprintf(out, "  %s %s: %" PRIu64 " decision(s) in %" PRIu64 " record(s)", a->g[i].of,
                a->g[i].decision, a->g[i].decisions, a->g[i].records);
        if (a->g[i].merged)
            fprintf(out, ", %" PRIu64 " of them merged (the names not kept)", a->g[i].merged);
        fputc('\n', out);
    }
    if (a->other_records)
        fprintf(out, "  other types: %" PRIu64 " decision(s) in %" PRIu64 " record(s)\n",
                a->other_decisions, a->other_records);
    if (a->malformed)
        fprintf(out,
                "warning: %" PRIu64 " aggregate record(s), the first seq %" PRIu64 ", have no "
                "valid count, type, decision or interval: what they stand for is not known\n",
                a->malformed, a->first_malformed);
}

static json_t *cli__agg_json(const struct cli__aggsum *a)
{
    json_t *by = json_array();
    for (size_t i = 0; i < a->n; i++)
        json_array_append_new(
            by, json_pack("{s:s,s:s,s:I,s:I,s:I}", "of", a->g[i].of, "decision", a->g[i].decision,
                          "records", (json_int_t)a->g[i].records, "decisions",
                          (json_int_t)a->g[i].decisions, "merged", (json_int_t)a->g[i].merged));
    if (a->other_records)
        json_array_append_new(by, json_pack("{s:s,s:I,s:I}", "of", "other", "records",
                                            (json_int_t)a->other_records, "decisions",
                                            (json_int_t)a->other_decisions));
    json_t *o =
        json_pack("{s:I,s:I,s:I,s:I,s:o}", "records", (json_int_t)(a->records - a->malformed),
                  "decisions", (json_int_t)a->decisions, "merged", (json_int_t)a->merged,
                  "sandboxes", (json_int_t)json_object_size(a->sandboxes), "by", by);
    if (o && a->first_time[0]) {
        json_object_set_new(o, "first_time", json_string(a->first_time));
        json_object_set_new(o, "last_time", json_string(a->last_time));
    }
    if (o && a->malformed) {
        json_object_set_new(o, "malformed", json_integer((json_int_t)a->malformed));
        json_object_set_new(o, "first_malformed_seq", json_integer((json_int_t)a->first_malformed));
    }
    return o;
}

static int cli__verify(const char *dir, int argc, char **argv, int first)
{
    const char *pubkey = NULL, *checkpoints = NULL;
    bool json = false;
    const char *files[256];
    size_t n = 0;
    for (int i = first; i < argc; i++) {
        if (strcmp(argv[i], "--pubkey") == 0 && i + 1 < argc) {
            pubkey = argv[++i];
        } else if (strcmp(argv[i], "--checkpoints") == 0 && i + 1 < argc) {
            checkpoints = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "airlock audit verify: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (n < 256) {
            files[n++] = argv[i];
        }
    }
    char pk[1024];
    if (n && !pubkey) {
        /* Files given: the public key lives next to the log (or pass --pubkey). */
        snprintf(pk, sizeof pk, "%s/egress.pub", dir);
        pubkey = pk;
    }
    struct cli__aggsum agg = {.sandboxes = json_object()};
    struct al_auditlog_verify_opts o = {.dir = n ? NULL : dir,
                                        .prefix = "egress",
                                        .files = n ? files : NULL,
                                        .n_files = n,
                                        .pubkey_file = pubkey,
                                        .checkpoint_file = checkpoints,
                                        .on_record = cli__agg_on_record,
                                        .on_record_type = "aggregate",
                                        .arg = &agg};
    struct al_auditlog_verify_result res;
    struct al_error err = {0};
    if (!agg.sandboxes || al_auditlog_verify(&o, &res, &err) < 0) {
        fprintf(stderr, "airlock audit verify: %s\n",
                agg.sandboxes ? al_error_str(&err) : "out of memory");
        json_decref(agg.sandboxes);
        return 1;
    }
    if (json) {
        json_t *j = al_auditlog_verify_json(&res);
        if (j)
            json_object_set_new(j, "aggregates", cli__agg_json(&agg));
        char *s = json_dumps(j, JSON_COMPACT);
        puts(s ? s : "{}");
        free(s);
        json_decref(j);
    } else {
        struct cli__verify_print vp = {
            .agg = &agg, .intact = res.verdict == AL_AUDIT_INTACT, .any = res.records > 0};
        al_auditlog_verify_print_with(&res, stdout, cli__agg_print, &vp);
    }
    json_decref(agg.sandboxes);
    return res.verdict == AL_AUDIT_INTACT ? 0 : 1;
}

int audit_cli_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli__usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    char dir[1024];
    al_state_path(dir, sizeof dir, "audit");
    /* --dir may appear anywhere. */
    for (int i = 2; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0) {
            snprintf(dir, sizeof dir, "%s", argv[i + 1]);
            memmove(argv + i, argv + i + 2, (size_t)(argc - i - 2) * sizeof *argv);
            argc -= 2;
            break;
        }
    }
    if (strcmp(cmd, "verify") == 0)
        return cli__verify(dir, argc, argv, 2);
    if (strcmp(cmd, "hash-secret") == 0) /* the vault's key, so the vault's command */
        return cli_vault_run(argc - 1, argv + 1);
    bool is_tail = strcmp(cmd, "tail") == 0, is_query = strcmp(cmd, "query") == 0,
         is_export = strcmp(cmd, "export") == 0;
    if (!is_tail && !is_query && !is_export) {
        fprintf(stderr, "airlock audit: unknown command '%s'\n\n", cmd);
        cli__usage(stderr);
        return 2;
    }
    struct al_audit_filter f = {0};
    int out = OUT_HUMAN;
    bool follow = false, ocsf = false;
    uint64_t tail = is_tail ? 20 : 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            out = OUT_JSON;
        } else if (strcmp(a, "--all") == 0) {
            f.all = true;
        } else if (strcmp(a, "--ocsf") == 0 && is_export) {
            ocsf = true;
        } else if (strcmp(a, "-f") == 0 && is_tail) {
            follow = true;
        } else if (strcmp(a, "-n") == 0 && is_tail && v) {
            char *end;
            tail = strtoull(v, &end, 10);
            if (*end || !*v) {
                fprintf(stderr, "airlock audit tail: -n '%s' is not a number\n", v);
                return 2;
            }
            i++;
        } else if (v && strcmp(a, "--sandbox") == 0) {
            f.sandbox = v, i++;
        } else if (v && strcmp(a, "--decision") == 0) {
            if (strcmp(v, "allow") && strcmp(v, "deny") && strcmp(v, "would_deny")) {
                fprintf(stderr, "airlock audit: --decision is allow, deny or would_deny\n");
                return 2;
            }
            f.decision = v, i++;
        } else if (v && strcmp(a, "--host") == 0) {
            f.host = v, i++;
        } else if (v && strcmp(a, "--type") == 0) {
            f.type = v, i++;
        } else if (v && strcmp(a, "--reason") == 0) {
            f.reason = v, i++;
        } else if (v && (strcmp(a, "--since") == 0 || strcmp(a, "--until") == 0)) {
            uint64_t *t = a[2] == 's' ? &f.since_ns : &f.until_ns;
            if (al_audit_time_arg(v, t) < 0) {
                fprintf(stderr, "airlock audit: %s '%s': give RFC 3339 time or an age like 10m\n",
                        a, v);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "airlock audit %s: unknown or incomplete option '%s' (see --help)\n",
                    cmd, a);
            return 2;
        }
    }
    if (is_export) {
        if (!ocsf) {
            fprintf(stderr, "airlock audit export: give the format (--ocsf)\n");
            return 2;
        }
        out = OUT_OCSF;
    }
    return cli__scan(dir, &f, out, is_tail, tail, follow);
}
