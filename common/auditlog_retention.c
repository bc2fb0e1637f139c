/* common/auditlog_retention: what retention deletes and how the log says so. Decides which
 * files a pass deletes (the oldest first, by age, total size and count), builds the
 * retention record that announces them in the chain before they go, and keeps the history
 * of everything retention deleted so far (ranges of seq by rule), which every retention
 * record carries in full, so that the verifier can say exactly what is missing from the
 * start of a log and why, from the chain alone. See auditlog.h for the record. */
#include "auditlog.h"
#include "auditlog_int.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define RETENTION__FORMAT "airlock-auditlog-retention-v1"

static const char *const retention__rules[] = {"max_age", "max_bytes", "max_files", "unaccounted"};

void auditlog__history_reset(struct auditlog__history *h)
{
    memset(h, 0, sizeof *h);
    h->retained_from = 1;
}

void auditlog__history_add(struct auditlog__history *h, const struct auditlog__range *d)
{
    struct al_auditlog_pruned *last = h->n ? &h->r[h->n - 1] : NULL;
    if (last && strcmp(last->rule, d->rule) == 0 && last->limit == d->limit &&
        last->last_seq + 1 == d->first_seq) {
        last->last_seq = d->last_seq;
        last->files += d->files;
        last->bytes += d->bytes;
    } else {
        if (h->n == AL_AUDITLOG_HISTORY_MAX) {
            /* Full: the two oldest ranges become one, named by both rules. */
            struct al_auditlog_pruned *a = &h->r[0], *b = &h->r[1];
            char both[sizeof a->rule];
            if (strcmp(a->rule, b->rule) == 0)
                snprintf(both, sizeof both, "%s", a->rule);
            else
                snprintf(both, sizeof both, "several");
            a->last_seq = b->last_seq;
            a->files += b->files;
            a->bytes += b->bytes;
            snprintf(a->rule, sizeof a->rule, "%s", both);
            a->limit = 0;
            memmove(&h->r[1], &h->r[2], (h->n - 2) * sizeof h->r[0]);
            h->n--;
        }
        struct al_auditlog_pruned *r = &h->r[h->n++];
        memset(r, 0, sizeof *r);
        r->first_seq = d->first_seq;
        r->last_seq = d->last_seq;
        r->files = d->files;
        r->bytes = d->bytes;
        r->limit = d->limit;
        snprintf(r->rule, sizeof r->rule, "%s", d->rule);
    }
    if (d->last_seq + 1 > h->retained_from)
        h->retained_from = d->last_seq + 1;
}

static json_t *retention__history_json(const struct auditlog__history *h)
{
    json_t *a = json_array();
    for (size_t i = 0; i < h->n; i++) {
        const struct al_auditlog_pruned *r = &h->r[i];
        json_array_append_new(a, json_pack("{s:I,s:I,s:I,s:I,s:s,s:I}", "first_seq",
                                           (json_int_t)r->first_seq, "last_seq",
                                           (json_int_t)r->last_seq, "files", (json_int_t)r->files,
                                           "bytes", (json_int_t)r->bytes, "rule", r->rule, "limit",
                                           (json_int_t)r->limit));
    }
    return a;
}

static bool retention__uint(const json_t *o, const char *k, uint64_t *out)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static bool retention__rule_known(const char *rule)
{
    if (strcmp(rule, "several") == 0)
        return true;
    for (size_t i = 0; i < sizeof retention__rules / sizeof retention__rules[0]; i++)
        if (strcmp(rule, retention__rules[i]) == 0)
            return true;
    return false;
}

int auditlog__history_parse(const json_t *arr, uint64_t retained_from, struct auditlog__history *h,
                            const char **why)
{
    auditlog__history_reset(h);
    if (!json_is_array(arr) || json_array_size(arr) > AL_AUDITLOG_HISTORY_MAX) {
        *why = "its \"history\" is not a list of at most 16 ranges";
        return -EINVAL;
    }
    uint64_t next = 1;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        struct al_auditlog_pruned *r = &h->r[i];
        const char *rule = json_string_value(json_object_get(v, "rule"));
        if (!retention__uint(v, "first_seq", &r->first_seq) ||
            !retention__uint(v, "last_seq", &r->last_seq) ||
            !retention__uint(v, "files", &r->files) || !retention__uint(v, "bytes", &r->bytes) ||
            !retention__uint(v, "limit", &r->limit) || !rule || strlen(rule) >= sizeof r->rule ||
            !retention__rule_known(rule)) {
            *why = "a range of its \"history\" lacks first_seq, last_seq, files, bytes, limit or "
                   "a known rule";
            return -EINVAL;
        }
        if (r->first_seq != next || r->last_seq < r->first_seq) {
            *why = "the ranges of its \"history\" do not follow each other from seq 1";
            return -EINVAL;
        }
        snprintf(r->rule, sizeof r->rule, "%s", rule);
        next = r->last_seq + 1;
        h->n++;
    }
    if (next != retained_from) {
        *why = "its \"history\" does not end just before \"retained_from\"";
        return -EINVAL;
    }
    h->retained_from = retained_from;
    return 0;
}

void auditlog__history_load(const char *path, const char *log_id, struct auditlog__history *h)
{
    auditlog__history_reset(h);
    char *data = NULL;
    size_t len = 0;
    if (al_read_file(path, 1 << 20, &data, &len, NULL) != 0)
        return;
    json_t *j = json_loadb(data, len, AUDITLOG__JSON_FLAGS, NULL);
    free(data);
    const char *id = json_string_value(json_object_get(j, "log_id"));
    uint64_t from = 0;
    const char *why;
    if (!id || strcmp(id, log_id) != 0 || !retention__uint(j, "retained_from", &from) || from < 1 ||
        auditlog__history_parse(json_object_get(j, "history"), from, h, &why) != 0)
        auditlog__history_reset(h);
    json_decref(j);
}

int auditlog__history_save(const char *path, const char *log_id, const struct auditlog__history *h)
{
    json_t *j = json_pack("{s:s,s:s,s:I,s:o}", "format", RETENTION__FORMAT, "log_id", log_id,
                          "retained_from", (json_int_t)h->retained_from, "history",
                          retention__history_json(h));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return -ENOMEM;
    size_t n = strlen(s);
    s[n] = '\n'; /* json_dumps leaves room for the NUL only: write n+1 with the newline */
    int rc = al_write_file_atomic(path, s, n + 1, 0640, NULL);
    free(s);
    return rc;
}

void auditlog__prune_free(struct auditlog__prune *p)
{
    free(p->f);
    memset(p, 0, sizeof *p);
}

int auditlog__retention_plan(const char *dir, const char *prefix, const struct auditlog__rules *r,
                             struct auditlog__prune *out)
{
    memset(out, 0, sizeof *out);
    if (!r->max_age_ms && !r->max_bytes && !r->max_files)
        return 0;
    struct auditlog__file *f = NULL;
    size_t n = 0;
    int rc = auditlog__list(dir, prefix, &f, &n, NULL);
    if (rc || n < 2) {
        free(f);
        return rc;
    }
    uint64_t *size = calloc(n, sizeof *size);
    uint64_t *mtime_ns = calloc(n, sizeof *mtime_ns);
    out->f = calloc(n, sizeof *out->f);
    if (!size || !mtime_ns || !out->f) {
        rc = -ENOMEM;
        goto out;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(f[i].path, &st) == 0) {
            size[i] = (uint64_t)st.st_size;
            mtime_ns[i] =
                (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
        }
        total += size[i];
    }
    uint64_t now = al_wall_ns();
    /* Never the newest file (the one being written); files are in log order. */
    for (size_t i = 0; i + 1 < n && out->n < AUDITLOG__PRUNE_MAX; i++) {
        const char *rule = NULL;
        uint64_t limit = 0;
        if (r->max_age_ms && mtime_ns[i] + r->max_age_ms * 1000000ull < now) {
            rule = "max_age";
            limit = r->max_age_ms;
        } else if (r->max_bytes && total > r->max_bytes) {
            rule = "max_bytes";
            limit = r->max_bytes;
        } else if (r->max_files && n - out->n > r->max_files) {
            rule = "max_files";
            limit = r->max_files;
        }
        if (!rule)
            break; /* the next ones are newer and the totals only shrink */
        struct auditlog__prune_file *p = &out->f[out->n++];
        snprintf(p->path, sizeof p->path, "%s", f[i].path);
        snprintf(p->name, sizeof p->name, "%s", f[i].name);
        p->first_seq = f[i].first_seq;
        p->last_seq = f[i + 1].first_seq - 1;
        p->bytes = size[i];
        p->rule = rule;
        p->limit = limit;
        total -= size[i];
    }
out:
    free(size);
    free(mtime_ns);
    free(f);
    if (rc || out->n == 0) {
        auditlog__prune_free(out);
        return rc;
    }
    return 0;
}

char *auditlog__retention_object(const struct auditlog__prune *p, const struct auditlog__history *h,
                                 const struct auditlog__rules *r)
{
    json_t *files = json_array();
    for (size_t i = 0; i < p->n; i++)
        json_array_append_new(files, json_pack("{s:s,s:I,s:I,s:I,s:s}", "file", p->f[i].name,
                                               "first_seq", (json_int_t)p->f[i].first_seq,
                                               "last_seq", (json_int_t)p->f[i].last_seq, "bytes",
                                               (json_int_t)p->f[i].bytes, "rule", p->f[i].rule));
    json_t *o =
        json_pack("{s:s,s:I,s:o,s:o,s:{s:I,s:I,s:I}}", "event", "retention", "retained_from",
                  (json_int_t)h->retained_from, "pruned", files, "history",
                  retention__history_json(h), "rules", "max_age_ms", (json_int_t)r->max_age_ms,
                  "max_bytes", (json_int_t)r->max_bytes, "max_files", (json_int_t)r->max_files);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

int auditlog__retention_check(const json_t *a, uint64_t seq, struct auditlog__history *h,
                              const char **why)
{
    uint64_t from = 0;
    if (!retention__uint(a, "retained_from", &from) || from < 1 || from > seq) {
        *why = "the retention record's \"retained_from\" is missing or beyond the record";
        return -EINVAL;
    }
    if (!json_is_array(json_object_get(a, "pruned")) ||
        !json_is_object(json_object_get(a, "rules"))) {
        *why = "the retention record lacks \"pruned\" or \"rules\"";
        return -EINVAL;
    }
    return auditlog__history_parse(json_object_get(a, "history"), from, h, why);
}
