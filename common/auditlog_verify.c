/* common/auditlog_verify: the offline verifier of audit logs. Walks the files in order and
 * checks every line (JSON, seq continuity, the prev chain, checkpoint signatures, and
 * optionally an external copy of the checkpoints), stopping at the first bad record with a
 * verdict (edited, removed, reordered, inserted, truncated, bad signature, missing file,
 * malformed) and a reason a human can act on. Input files are untrusted: every length is
 * bounded and nothing is assumed about their content. */
#include "auditlog.h"
#include "auditlog_int.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define VERIFY__RING      1024
#define VERIFY__LOOKAHEAD 4096

struct verify__ext {
    uint64_t seq;
    char hash[AL_AUDITLOG_HASH_HEX + 1];
};

struct verify__ctx {
    const struct al_auditlog_verify_opts *opts;
    struct al_auditlog_verify_result *res;
    struct auditlog__pubkey pk;
    struct auditlog__file *files;
    size_t nfiles;
    bool names_have_seq;
    bool started;
    uint64_t expect;
    char head[AL_AUDITLOG_HASH_HEX + 1];
    char last_prev[AL_AUDITLOG_HASH_HEX + 1];
    size_t last_file;
    uint64_t last_line;
    uint64_t last_ckpt;
    bool last_close;
    bool last_seal; /* the last record is a "seal" checkpoint */
    /* The latest retention record. */
    struct auditlog__history hist;
    uint64_t hist_seq;
    char hist_time[40];
    struct {
        uint64_t seq;
        char hash[AL_AUDITLOG_HASH_HEX + 1];
        size_t file;
        uint64_t line;
    } ring[VERIFY__RING];
    struct verify__ext *ext;
    size_t next, ext_i;
    const char *ext_path;
};

const char *al_auditlog_verdict_name(enum al_auditlog_verdict v)
{
    switch (v) {
    case AL_AUDIT_INTACT:
        return "intact";
    case AL_AUDIT_EDITED:
        return "edited";
    case AL_AUDIT_REMOVED:
        return "removed";
    case AL_AUDIT_REORDERED:
        return "reordered";
    case AL_AUDIT_INSERTED:
        return "inserted";
    case AL_AUDIT_TRUNCATED:
        return "truncated";
    case AL_AUDIT_BAD_SIGNATURE:
        return "bad_signature";
    case AL_AUDIT_MISSING_FILE:
        return "missing_file";
    case AL_AUDIT_MALFORMED:
        return "malformed";
    case AL_AUDIT_NO_RECORDS:
        return "no_records";
    }
    return "unknown";
}

__attribute__((format(printf, 6, 7))) static int verify__fail(struct verify__ctx *c,
                                                              enum al_auditlog_verdict v,
                                                              const char *path, uint64_t line,
                                                              uint64_t seq, const char *fmt, ...)
{
    struct al_auditlog_verify_result *r = c->res;
    if (r->verdict != AL_AUDIT_INTACT)
        return 1;
    r->verdict = v;
    snprintf(r->file, sizeof r->file, "%s", path ? path : "");
    r->line = line;
    r->seq = seq;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
    return 1;
}

/* ---- the quick read of a record -----------------------------------------------------------
 * Building a record's JSON with jansson (an allocation per value, a hash table per object)
 * was most of a verification's time. A record as the writers write it is read here in one
 * pass that allocates nothing; whatever this pass does not accept is left to jansson, so the
 * verdicts are jansson's: this pass accepts only lines that jansson accepts too, and reads
 * the same values from them. */

#define QUICK__DEPTH 32
#define QUICK__KEYS  256

struct quick__key {
    const unsigned char *p;
    uint32_t n, tag; /* tag: length and the first and last bytes, compared first */
};

struct quick__st {
    const unsigned char *p, *e;
    int depth;
    size_t nkeys;
    struct quick__key keys[QUICK__KEYS]; /* of the objects open, innermost last */
};

/* String bytes taken as they are: printable ASCII but '"' and '\\' (DEL, controls and
 * non-ASCII are jansson's to judge). */
static const uint8_t quick__plain[256] = {
    [' ' ... '!'] = 1,
    ['#' ... '['] = 1,
    [']' ... '~'] = 1,
};

static void quick__ws(struct quick__st *s)
{
    while (s->p < s->e && (*s->p == ' ' || *s->p == '\t' || *s->p == '\r' || *s->p == '\n'))
        s->p++;
}

/* A string at s->p ('"'): its raw bytes between the quotes in *str, *n; *esc when it holds
 * an escape (its value then differs from its bytes). */
static bool quick__string(struct quick__st *s, const unsigned char **str, size_t *n, bool *esc)
{
    const unsigned char *q = s->p + 1, *e = s->e;
    *esc = false;
    for (;;) {
        while (q < e && quick__plain[*q])
            q++;
        if (q >= e)
            return false;
        if (*q == '"')
            break;
        if (*q != '\\' || q + 1 >= e)
            return false;
        switch (q[1]) {
        case '"':
        case '\\':
        case '/':
        case 'b':
        case 'f':
        case 'n':
        case 'r':
        case 't':
            q += 2;
            break;
        case 'u': {
            if (e - q < 6)
                return false;
            int v = 0;
            for (int i = 2; i < 6; i++) {
                int h = al_hex_value((unsigned char)q[i]);
                if (h < 0)
                    return false;
                v = v * 16 + h;
            }
            if (v == 0 || (v >= 0xd800 && v <= 0xdfff))
                return false; /* NUL and surrogates: jansson's to judge */
            q += 6;
            break;
        }
        default:
            return false;
        }
        *esc = true;
    }
    *str = s->p + 1;
    *n = (size_t)(q - (s->p + 1));
    s->p = q + 1;
    return true;
}

/* A number: an integer of up to 18 digits (fractions and exponents are jansson's). *v and
 * *neg its value. */
static bool quick__number(struct quick__st *s, uint64_t *v, bool *neg)
{
    const unsigned char *q = s->p, *e = s->e;
    *neg = q < e && *q == '-';
    if (*neg)
        q++;
    if (q >= e || *q < '0' || *q > '9')
        return false;
    const unsigned char *d = q;
    uint64_t x = 0;
    if (*q == '0') {
        q++;
    } else {
        while (q < e && *q >= '0' && *q <= '9' && q - d < 19)
            x = x * 10 + (uint64_t)(*q++ - '0');
    }
    if (q - d > 18 || (q < e && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E')))
        return false;
    *v = x;
    s->p = q;
    return true;
}

static bool quick__value(struct quick__st *s);

/* A key of the object whose keys start at keys[base]: not escaped, not seen before in it. */
static bool quick__key(struct quick__st *s, size_t base, const unsigned char **k, size_t *kn)
{
    bool esc;
    if (s->p >= s->e || *s->p != '"' || !quick__string(s, k, kn, &esc) || esc ||
        s->nkeys == QUICK__KEYS)
        return false;
    uint32_t tag = (uint32_t)(*kn & 0xffff) << 16;
    if (*kn)
        tag |= (uint32_t)(*k)[0] << 8 | (*k)[*kn - 1];
    for (size_t i = base; i < s->nkeys; i++)
        if (s->keys[i].tag == tag && s->keys[i].n == *kn && memcmp(s->keys[i].p, *k, *kn) == 0)
            return false; /* a duplicate: AUDITLOG__JSON_FLAGS refuses it */
    s->keys[s->nkeys++] = (struct quick__key){*k, (uint32_t)*kn, tag};
    quick__ws(s);
    if (s->p >= s->e || *s->p != ':')
        return false;
    s->p++;
    quick__ws(s);
    return true;
}

/* After a member or an element: ',' (true, *more) or the closing byte (true, !*more). */
static bool quick__next(struct quick__st *s, unsigned char close, bool *more)
{
    quick__ws(s);
    if (s->p < s->e && (*s->p == ',' || *s->p == close)) {
        *more = *s->p++ == ',';
        if (*more)
            quick__ws(s);
        return true;
    }
    return false;
}

static bool quick__container(struct quick__st *s)
{
    unsigned char close = *s->p == '{' ? '}' : ']';
    if (++s->depth > QUICK__DEPTH)
        return false;
    s->p++;
    size_t base = s->nkeys;
    quick__ws(s);
    bool more = true;
    if (s->p < s->e && *s->p == close) {
        s->p++;
        more = false;
    }
    while (more) {
        const unsigned char *k;
        size_t kn;
        if ((close == '}' && !quick__key(s, base, &k, &kn)) || !quick__value(s) ||
            !quick__next(s, close, &more))
            return false;
    }
    s->nkeys = base;
    s->depth--;
    return true;
}

static bool quick__value(struct quick__st *s)
{
    if (s->p >= s->e)
        return false;
    const unsigned char *str;
    size_t n;
    bool b;
    uint64_t v;
    switch (*s->p) {
    case '{':
    case '[':
        return quick__container(s);
    case '"':
        return quick__string(s, &str, &n, &b);
    case 't':
    case 'n':
        n = 4;
        break;
    case 'f':
        n = 5;
        break;
    default:
        return quick__number(s, &v, &b);
    }
    const char *lit = *s->p == 't' ? "true" : *s->p == 'n' ? "null" : "false";
    if ((size_t)(s->e - s->p) < n || memcmp(s->p, lit, n) != 0)
        return false;
    s->p += n;
    return true;
}

/* A string member's value without escapes into out[cap]: false when it does not fit. */
static bool quick__copy(struct quick__st *s, char *out, size_t cap)
{
    const unsigned char *str;
    size_t n;
    bool esc;
    if (s->p >= s->e || *s->p != '"' || !quick__string(s, &str, &n, &esc) || esc || n >= cap)
        return false;
    memcpy(out, str, n);
    out[n] = 0;
    return true;
}

int auditlog__quick_fields(const char *line, size_t len, struct auditlog__quick *q)
{
    struct quick__st *s = &(struct quick__st){.p = (const unsigned char *)line,
                                              .e = (const unsigned char *)line + len};
    q->has_type = false;
    if (len == 0 || *s->p != '{')
        return -1;
    s->depth = 1;
    s->p++;
    quick__ws(s);
    bool more = s->p < s->e && *s->p != '}', seq = false, time = false, id = false, prev = false;
    if (!more)
        return -1; /* {}: not a record */
    while (more) {
        const unsigned char *k;
        size_t kn;
        if (!quick__key(s, 0, &k, &kn))
            return -1;
        bool ok;
        if (kn == 3 && memcmp(k, "seq", 3) == 0) {
            bool neg;
            ok = seq = quick__number(s, &q->seq, &neg) && !neg && q->seq >= 1;
        } else if (kn == 4 && memcmp(k, "time", 4) == 0) {
            ok = time = quick__copy(s, q->time, sizeof q->time);
        } else if (kn == 6 && memcmp(k, "log_id", 6) == 0) {
            ok = id = quick__copy(s, q->log_id, sizeof q->log_id) &&
                      auditlog__is_hex(q->log_id, AL_AUDITLOG_ID_HEX);
        } else if (kn == 4 && memcmp(k, "prev", 4) == 0) {
            ok = prev = quick__copy(s, q->prev, sizeof q->prev) &&
                        auditlog__is_hex(q->prev, AL_AUDITLOG_HASH_HEX);
        } else if (kn == 4 && memcmp(k, "type", 4) == 0 && s->p < s->e && *s->p == '"') {
            const unsigned char *p0 = s->p;
            ok = q->has_type = quick__copy(s, q->type, sizeof q->type);
            if (!ok) {
                s->p = p0; /* escaped or long: a string all the same, of unknown value */
                ok = quick__value(s);
            }
        } else if (kn == 8 && memcmp(k, "auditlog", 8) == 0) {
            return -1; /* the log's own record: read whole, by jansson */
        } else {
            ok = quick__value(s);
        }
        if (!ok || !quick__next(s, '}', &more))
            return -1;
    }
    return s->p == s->e && seq && time && id && prev ? 0 : -1;
}

/* A line of a mapped file. */
struct verify__line {
    const char *p;
    size_t len;
    json_t *j;                /* its JSON, when read by jansson */
    struct auditlog__quick q; /* what the quick read found (f points into it) */
    struct auditlog__fields f;
    bool json; /* valid JSON */
    bool ok;   /* and has the record fields */
};

/* Reads a line: quickly when it allows (f then points into l), else with jansson (l->j).
 * want: the caller needs the JSON of an ordinary record of this "type" (NULL: any type). */
static void verify__parse(struct verify__line *l, bool want, const char *want_type)
{
    l->j = NULL;
    l->json = l->ok = false;
    if (l->len == 0 || l->len > AL_AUDITLOG_MAX_RECORD)
        return;
    if (auditlog__quick_fields(l->p, l->len, &l->q) == 0 &&
        (!want || (want_type && l->q.has_type && strcmp(l->q.type, want_type) != 0))) {
        l->f = (struct auditlog__fields){
            .seq = l->q.seq, .time = l->q.time, .log_id = l->q.log_id, .prev = l->q.prev};
        l->json = l->ok = true;
        return;
    }
    l->j = json_loadb(l->p, l->len, AUDITLOG__JSON_FLAGS, NULL);
    const char *why;
    l->json = l->j != NULL;
    l->ok = l->j && auditlog__fields(l->j, &l->f, &why) == 0;
}

/* Parses the complete line starting at pos; false at the end. */
static bool verify__line_at(const char *map, size_t size, size_t pos, struct verify__line *l,
                            size_t *next)
{
    if (pos >= size)
        return false;
    const char *nl = memchr(map + pos, '\n', size - pos);
    if (!nl)
        return false;
    l->p = map + pos;
    l->len = (size_t)(nl - l->p);
    *next = pos + l->len + 1;
    verify__parse(l, false, NULL);
    return true;
}

static const char *verify__loc(struct verify__ctx *c, size_t file, uint64_t line, char *buf,
                               size_t n)
{
    snprintf(buf, n, "%s:%" PRIu64, c->files[file].name, line);
    return buf;
}

/* A file's records as mapped: size bytes at p. */
struct verify__map {
    const char *p;
    size_t size;
};

/* Checks one record (line lineno of file fi); returns 1 to stop. next_pos is where the
 * following line starts in m (for look-ahead). */
static int verify__record(struct verify__ctx *c, size_t fi, uint64_t lineno, struct verify__line *l,
                          const struct verify__map *m, size_t next_pos)
{
    bool first_in_file = lineno == 1;
    struct al_auditlog_verify_result *r = c->res;
    const char *path = c->files[fi].path;
    char loc[320], loc2[320];
    if (!l->json)
        return verify__fail(c, AL_AUDIT_MALFORMED, path, lineno, c->started ? c->expect : 0,
                            "line %" PRIu64 " of %s is not valid JSON (edited or corrupted)",
                            lineno, c->files[fi].name);
    const char *why = "";
    if (!l->ok) {
        auditlog__fields(l->j, &l->f, &why);
        return verify__fail(c, AL_AUDIT_MALFORMED, path, lineno, c->started ? c->expect : 0,
                            "line %" PRIu64 " of %s is not an audit record: %s", lineno,
                            c->files[fi].name, why);
    }
    struct auditlog__fields *f = &l->f;
    if (strcmp(f->log_id, c->pk.log_id) != 0)
        return verify__fail(c, AL_AUDIT_INSERTED, path, lineno, f->seq,
                            "record seq %" PRIu64 " belongs to log %s, not to log %s (the public "
                            "key's log): a record from another log was inserted, or the wrong "
                            "public key was given",
                            f->seq, f->log_id, c->pk.log_id);
    char hash[AL_AUDITLOG_HASH_HEX + 1];
    auditlog__hash_hex(l->p, l->len, hash);

    if (!c->started) {
        c->started = true;
        r->first_seq = f->seq;
        snprintf(r->first_file, sizeof r->first_file, "%s", path);
        if (c->names_have_seq && c->files[fi].first_seq != f->seq)
            return verify__fail(c, AL_AUDIT_REMOVED, path, lineno, c->files[fi].first_seq,
                                "%s is named for seq %" PRIu64 " but its first record is seq "
                                "%" PRIu64 ": the records before it were removed",
                                c->files[fi].name, c->files[fi].first_seq, f->seq);
        if (!f->internal)
            return verify__fail(c, f->seq == 1 ? AL_AUDIT_INSERTED : AL_AUDIT_REMOVED, path, lineno,
                                f->seq,
                                f->seq == 1 ? "seq 1 is not the log's signed start checkpoint: "
                                              "the beginning of the log was replaced"
                                            : "the log starts at seq %" PRIu64 " with an "
                                              "ordinary record, but every file begins with a "
                                              "signed checkpoint: records before it were "
                                              "removed",
                                f->seq);
        if (f->seq == 1) {
            for (int i = 0; i < AL_AUDITLOG_HASH_HEX; i++) {
                if (f->prev[i] != '0')
                    return verify__fail(c, AL_AUDIT_EDITED, path, lineno, 1,
                                        "seq 1 must have a prev of 64 zeros");
            }
            r->starts_at_genesis = true;
        }
    } else if (f->seq == c->expect) {
        if (strcmp(f->prev, c->head) != 0) {
            /* Who changed? Look at the record after this one. */
            struct verify__line nx = {0};
            size_t np;
            bool got = verify__line_at(m->p, m->size, next_pos, &nx, &np);
            bool have = got && nx.ok;
            int rc;
            if (have && nx.f.seq == f->seq && strcmp(nx.f.prev, c->head) == 0)
                rc = verify__fail(c, AL_AUDIT_INSERTED, path, lineno, f->seq,
                                  "record seq %" PRIu64 " at %s is not part of the chain: the "
                                  "genuine seq %" PRIu64 " follows it; this one was inserted",
                                  f->seq, verify__loc(c, fi, lineno, loc, sizeof loc), f->seq);
            else if (have && nx.f.seq == f->seq + 1 && strcmp(nx.f.prev, hash) != 0)
                rc = verify__fail(c, AL_AUDIT_EDITED, path, lineno, f->seq,
                                  "record seq %" PRIu64 " at %s was modified: its prev does not "
                                  "match the record before it and its hash does not match the "
                                  "record after it",
                                  f->seq, verify__loc(c, fi, lineno, loc, sizeof loc));
            else
                rc = verify__fail(
                    c, AL_AUDIT_EDITED, c->files[c->last_file].path, c->last_line, f->seq - 1,
                    "record seq %" PRIu64 " at %s was modified: its hash no "
                    "longer matches the prev recorded in seq %" PRIu64 " at %s",
                    f->seq - 1, verify__loc(c, c->last_file, c->last_line, loc, sizeof loc), f->seq,
                    verify__loc(c, fi, lineno, loc2, sizeof loc2));
            if (got)
                json_decref(nx.j);
            return rc;
        }
    } else if (f->seq > c->expect) {
        if (first_in_file && fi > 0) {
            bool whole = !c->names_have_seq || c->files[fi].first_seq > c->expect;
            if (whole)
                return verify__fail(
                    c, AL_AUDIT_MISSING_FILE, path, lineno, c->expect,
                    "records %" PRIu64 "..%" PRIu64 " are missing between %s (ends at seq "
                    "%" PRIu64 ") and %s (starts at seq %" PRIu64 "): a log file was deleted "
                    "or the end of %s was cut",
                    c->expect, f->seq - 1, c->files[c->last_file].name, c->expect - 1,
                    c->files[fi].name, f->seq, c->files[c->last_file].name);
            return verify__fail(c, AL_AUDIT_REMOVED, path, lineno, c->expect,
                                "%s is named for seq %" PRIu64 " but starts at seq %" PRIu64
                                ": its first records were removed",
                                c->files[fi].name, c->files[fi].first_seq, f->seq);
        }
        /* Reordered or removed? Look ahead in this file for the missing seq. */
        size_t pos = next_pos;
        uint64_t ln = lineno;
        for (int k = 0; k < VERIFY__LOOKAHEAD; k++) {
            struct verify__line nx;
            size_t np;
            if (!verify__line_at(m->p, m->size, pos, &nx, &np))
                break;
            ln++;
            bool hit = nx.ok && nx.f.seq == c->expect;
            json_decref(nx.j);
            if (hit)
                return verify__fail(c, AL_AUDIT_REORDERED, path, lineno, f->seq,
                                    "records are out of order: seq %" PRIu64 " at %s comes "
                                    "before seq %" PRIu64 " at line %" PRIu64,
                                    f->seq, verify__loc(c, fi, lineno, loc, sizeof loc), c->expect,
                                    ln);
            pos = np;
        }
        if (f->seq - c->expect == 1)
            return verify__fail(
                c, AL_AUDIT_REMOVED, path, lineno, c->expect,
                "record seq %" PRIu64 " is missing: %s (seq %" PRIu64 ") is "
                "followed by %s (seq %" PRIu64 ")",
                c->expect, verify__loc(c, c->last_file, c->last_line, loc, sizeof loc),
                c->expect - 1, verify__loc(c, fi, lineno, loc2, sizeof loc2), f->seq);
        return verify__fail(c, AL_AUDIT_REMOVED, path, lineno, c->expect,
                            "records %" PRIu64 "..%" PRIu64 " are missing: %s (seq %" PRIu64
                            ") is followed by %s (seq %" PRIu64 ")",
                            c->expect, f->seq - 1,
                            verify__loc(c, c->last_file, c->last_line, loc, sizeof loc),
                            c->expect - 1, verify__loc(c, fi, lineno, loc2, sizeof loc2), f->seq);
    } else {
        /* seq < expect: a record that is not part of the chain. */
        if (f->seq == c->expect - 1 && strcmp(f->prev, c->last_prev) == 0) {
            struct verify__line nx = {0};
            size_t np;
            bool got = verify__line_at(m->p, m->size, next_pos, &nx, &np);
            bool this_is_genuine = got && nx.ok && strcmp(nx.f.prev, hash) == 0;
            if (got)
                json_decref(nx.j);
            if (this_is_genuine)
                return verify__fail(
                    c, AL_AUDIT_INSERTED, c->files[c->last_file].path, c->last_line, f->seq,
                    "record seq %" PRIu64 " at %s is not part of the chain: the "
                    "genuine seq %" PRIu64 " follows it at %s; this one was "
                    "inserted",
                    f->seq, verify__loc(c, c->last_file, c->last_line, loc, sizeof loc), f->seq,
                    verify__loc(c, fi, lineno, loc2, sizeof loc2));
        }
        for (size_t i = 0; i < VERIFY__RING; i++) {
            if (c->ring[i].seq == f->seq && strcmp(c->ring[i].hash, hash) == 0)
                return verify__fail(
                    c, AL_AUDIT_INSERTED, path, lineno, f->seq,
                    "record seq %" PRIu64 " at %s is a copy of %s (inserted "
                    "again after seq %" PRIu64 ")",
                    f->seq, verify__loc(c, fi, lineno, loc, sizeof loc),
                    verify__loc(c, c->ring[i].file, c->ring[i].line, loc2, sizeof loc2),
                    c->expect - 1);
        }
        return verify__fail(c, AL_AUDIT_INSERTED, path, lineno, f->seq,
                            "record seq %" PRIu64 " at %s does not belong after seq %" PRIu64
                            " (%s): it was inserted",
                            f->seq, verify__loc(c, fi, lineno, loc, sizeof loc), c->expect - 1,
                            verify__loc(c, c->last_file, c->last_line, loc2, sizeof loc2));
    }

    /* The chain holds up to here. A file must begin with its opening checkpoint. */
    const char *event =
        f->internal ? json_string_value(json_object_get(f->internal, "event")) : NULL;
    bool retention = event && strcmp(event, "retention") == 0;
    if (first_in_file && fi > 0 && (!f->internal || retention))
        return verify__fail(c, AL_AUDIT_REMOVED, path, lineno, f->seq,
                            "%s does not begin with the signed checkpoint every file starts "
                            "with: its first record(s) were removed or replaced",
                            c->files[fi].name);
    c->last_seal = false;
    if (retention) {
        struct auditlog__history h;
        if (auditlog__retention_check(f->internal, f->seq, &h, &why) != 0)
            return verify__fail(c, AL_AUDIT_MALFORMED, path, lineno, f->seq,
                                "retention record seq %" PRIu64 " at %s: %s", f->seq,
                                verify__loc(c, fi, lineno, loc, sizeof loc), why);
        if (h.retained_from < c->hist.retained_from && c->hist_seq &&
            c->hist.retained_from <= r->first_seq)
            return verify__fail(c, AL_AUDIT_EDITED, path, lineno, f->seq,
                                "retention record seq %" PRIu64 " at %s says retention deleted "
                                "up to seq %" PRIu64 ", less than the earlier retention record "
                                "seq %" PRIu64 " said (%" PRIu64 ")",
                                f->seq, verify__loc(c, fi, lineno, loc, sizeof loc),
                                h.retained_from - 1, c->hist_seq, c->hist.retained_from - 1);
        c->hist = h;
        c->hist_seq = f->seq;
        snprintf(c->hist_time, sizeof c->hist_time, "%s", f->time);
        c->last_close = false;
    } else if (f->internal) {
        int rc = auditlog__check_checkpoint(f, &c->pk, &why);
        if (rc == -EBADMSG)
            return verify__fail(c, AL_AUDIT_BAD_SIGNATURE, path, lineno, f->seq,
                                "checkpoint seq %" PRIu64 " at %s: %s (the records it covers, "
                                "or the checkpoint itself, were changed, or it was signed with "
                                "another key)",
                                f->seq, verify__loc(c, fi, lineno, loc, sizeof loc), why);
        if (rc)
            return verify__fail(c, AL_AUDIT_MALFORMED, path, lineno, f->seq,
                                "checkpoint seq %" PRIu64 " at %s: %s", f->seq,
                                verify__loc(c, fi, lineno, loc, sizeof loc), why);
        r->checkpoints++;
        c->last_ckpt = f->seq;
        const char *reason = json_string_value(json_object_get(f->internal, "reason"));
        c->last_close = reason && strcmp(reason, "close") == 0;
        c->last_seal = reason && strcmp(reason, "seal") == 0;
        if (json_object_get(f->internal, "recovered"))
            r->crash_recoveries++;
        if (!c->res->start_anchored && r->records == 0)
            r->start_anchored = true;
    } else {
        c->last_close = false;
    }
    /* Copies of checkpoints kept elsewhere must match. */
    while (c->ext_i < c->next && c->ext[c->ext_i].seq < f->seq)
        c->ext_i++;
    if (c->ext_i < c->next && c->ext[c->ext_i].seq == f->seq) {
        if (strcmp(c->ext[c->ext_i].hash, hash) != 0)
            return verify__fail(c, AL_AUDIT_EDITED, path, lineno, f->seq,
                                "record seq %" PRIu64 " at %s differs from its copy in %s: the "
                                "log was rewritten",
                                f->seq, verify__loc(c, fi, lineno, loc, sizeof loc), c->ext_path);
        r->external_checkpoints++;
        c->ext_i++;
    }

    size_t ri = (size_t)(f->seq % VERIFY__RING);
    c->ring[ri].seq = f->seq;
    memcpy(c->ring[ri].hash, hash, sizeof hash);
    c->ring[ri].file = fi;
    c->ring[ri].line = lineno;
    memcpy(c->last_prev, f->prev, AL_AUDITLOG_HASH_HEX + 1);
    memcpy(c->head, hash, sizeof hash);
    c->expect = f->seq + 1;
    c->last_file = fi;
    c->last_line = lineno;
    r->records++;
    r->last_seq = f->seq;
    if (!f->internal && c->opts->on_record && l->j)
        c->opts->on_record(l->j, f->seq, c->opts->arg);
    return 0;
}

/* If file fi+1 opens with a checkpoint declaring crash debris in file fi, returns true and
 * where the debris starts and how long it is. */
static bool verify__declared_debris(struct verify__ctx *c, size_t fi, uint64_t *off,
                                    uint64_t *bytes)
{
    if (fi + 1 >= c->nfiles)
        return false;
    int fd = open(c->files[fi + 1].path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n <= 0)
        return false;
    char *nl = memchr(buf, '\n', (size_t)n);
    if (!nl)
        return false;
    json_t *j = json_loadb(buf, (size_t)(nl - buf), AUDITLOG__JSON_FLAGS, NULL);
    json_t *rec = json_object_get(json_object_get(j, "auditlog"), "recovered");
    const char *file = json_string_value(json_object_get(rec, "file"));
    json_t *o = json_object_get(rec, "offset"), *b = json_object_get(rec, "bytes");
    bool ok = file && strcmp(file, c->files[fi].name) == 0 && json_is_integer(o) &&
              json_is_integer(b) && json_integer_value(o) >= 0 && json_integer_value(b) > 0;
    if (ok) {
        *off = (uint64_t)json_integer_value(o);
        *bytes = (uint64_t)json_integer_value(b);
    }
    json_decref(j);
    return ok;
}

static int verify__file(struct verify__ctx *c, size_t fi, struct al_error *err)
{
    struct auditlog__file *file = &c->files[fi];
    struct al_auditlog_verify_result *r = c->res;
    int fd = open(file->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", file->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return al_error_set(err, -EINVAL, "%s is not a regular file", file->path);
    }
    size_t size = (size_t)st.st_size;
    r->files++;
    if (size == 0) {
        close(fd);
        if (fi + 1 < c->nfiles)
            verify__fail(c, AL_AUDIT_MALFORMED, file->path, 0, c->expect,
                         "%s is empty, but later files exist: its records were removed",
                         file->name);
        return 0;
    }
    const char *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return al_error_set(err, -errno, "cannot map %s: %s", file->path, strerror(errno));

    uint64_t debris_off = 0, debris_bytes = 0;
    bool debris = verify__declared_debris(c, fi, &debris_off, &debris_bytes);
    size_t end = size;
    if (debris) {
        if (debris_off > size) {
            verify__fail(c, AL_AUDIT_TRUNCATED, file->path, 0, 0,
                         "%s is shorter (%zu bytes) than when the next writer found its end "
                         "(%" PRIu64 " bytes of records): the file was truncated",
                         file->name, size, debris_off);
            goto out;
        }
        if (size - debris_off != debris_bytes) {
            verify__fail(c, AL_AUDIT_EDITED, file->path, 0, 0,
                         "%s: the bytes after its last record changed since the next writer "
                         "recorded them (%" PRIu64 " bytes declared, %" PRIu64 " found)",
                         file->name, debris_bytes, (uint64_t)(size - debris_off));
            goto out;
        }
        end = (size_t)debris_off;
    }
    size_t pos = 0;
    uint64_t lineno = 0;
    while (pos < end && r->verdict == AL_AUDIT_INTACT) {
        const char *nl = memchr(map + pos, '\n', end - pos);
        if (!nl)
            break;
        struct verify__line l = {.p = map + pos, .len = (size_t)(nl - (map + pos))};
        size_t next = pos + l.len + 1;
        lineno++;
        verify__parse(&l, c->opts->on_record != NULL, c->opts->on_record_type);
        verify__record(c, fi, lineno, &l, &(struct verify__map){map, end}, next);
        json_decref(l.j);
        pos = next;
    }
    if (r->verdict == AL_AUDIT_INTACT && pos < end) {
        /* An incomplete last line. */
        if (debris) {
            verify__fail(c, AL_AUDIT_MALFORMED, file->path, lineno + 1, c->expect,
                         "%s: the crash recovery recorded in %s does not start at a line "
                         "boundary",
                         file->name, c->files[fi + 1].name);
        } else if (fi + 1 == c->nfiles) {
            r->tail = AL_AUDIT_TAIL_TORN;
            r->torn_bytes = end - pos;
        } else {
            verify__fail(c, AL_AUDIT_TRUNCATED, file->path, lineno + 1, c->expect,
                         "%s ends in the middle of a record (%zu bytes without a newline) and "
                         "the next file does not record a crash there: the file was cut",
                         file->name, end - pos);
        }
    }
    /* A file the writer closed for the next one ends with its signed seal (unless a crash
     * interrupted it, which the next file's opening checkpoint declares). */
    if (r->verdict == AL_AUDIT_INTACT && fi + 1 < c->nfiles && !debris && c->last_file == fi &&
        !c->last_seal)
        verify__fail(c, AL_AUDIT_TRUNCATED, file->path, lineno, c->expect,
                     "%s does not end with the signed seal that closes every file before the "
                     "next: records were cut from its end",
                     file->name);
out:
    munmap((void *)map, size);
    return 0;
}

/* What is missing from the start of the log must be what the latest retention record says
 * retention deleted (in a directory: files handed over may start anywhere), and nothing
 * else: files deleted by someone else are "removed". */
static void verify__retention(struct verify__ctx *c, bool whole_log)
{
    struct al_auditlog_verify_result *r = c->res;
    char loc[320];
    if (c->hist_seq) {
        r->retention_seq = c->hist_seq;
        snprintf(r->retention_time, sizeof r->retention_time, "%s", c->hist_time);
        r->retained_from = c->hist.retained_from;
        r->n_pruned = c->hist.n;
        memcpy(r->pruned, c->hist.r, c->hist.n * sizeof c->hist.r[0]);
    }
    for (size_t i = 0; i < c->hist.n; i++) {
        const struct al_auditlog_pruned *p = &c->hist.r[i];
        if (strcmp(p->rule, "unaccounted") == 0) {
            verify__fail(c, AL_AUDIT_REMOVED, r->first_file, 0, p->first_seq,
                         "records %" PRIu64 "..%" PRIu64 " were deleted, but not by retention: "
                         "they were already missing when a writer started, as the retention "
                         "record seq %" PRIu64 " says",
                         p->first_seq, p->last_seq, c->hist_seq);
            return;
        }
    }
    if (r->starts_at_genesis || !whole_log)
        return;
    snprintf(loc, sizeof loc, "%s", c->files[0].name);
    if (!c->hist_seq)
        verify__fail(c, AL_AUDIT_REMOVED, r->first_file, 1, r->first_seq - 1,
                     "the log starts at seq %" PRIu64 " (%s), but no retention record accounts "
                     "for seq 1..%" PRIu64 ": its files were deleted outside retention",
                     r->first_seq, loc, r->first_seq - 1);
    else if (c->hist.retained_from < r->first_seq)
        verify__fail(c, AL_AUDIT_REMOVED, r->first_file, 1, c->hist.retained_from,
                     "retention deleted seq 1..%" PRIu64 " (retention record seq %" PRIu64
                     "), but the log starts at seq %" PRIu64 " (%s): seq %" PRIu64 "..%" PRIu64
                     " were deleted outside retention",
                     c->hist.retained_from - 1, c->hist_seq, r->first_seq, loc,
                     c->hist.retained_from, r->first_seq - 1);
}

static int verify__load_ext(struct verify__ctx *c, const char *path, struct al_error *err)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return al_error_set(err, -errno, "cannot open the checkpoint file %s: %s", path,
                            strerror(errno));
    c->ext_path = path;
    char *line = NULL;
    size_t cap = 0, n = 0, alloc = 0;
    ssize_t len;
    uint64_t lineno = 0;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[len - 1] != '\n')
            break; /* incomplete last line: a crash while copying; ignore it */
        len--;
        struct verify__line l = {.p = line, .len = (size_t)len};
        verify__parse(&l, false, NULL);
        const char *why = "not a checkpoint record";
        int bad = !l.ok || !l.f.internal;
        if (!bad && strcmp(l.f.log_id, c->pk.log_id) != 0) {
            why = "it belongs to another log";
            bad = 1;
        }
        if (!bad) {
            int k = auditlog__check_checkpoint(&l.f, &c->pk, &why);
            if (k == -EBADMSG) {
                verify__fail(c, AL_AUDIT_BAD_SIGNATURE, path, lineno, l.f.seq,
                             "checkpoint copy at %s:%" PRIu64 ": %s", path, lineno, why);
                json_decref(l.j);
                break;
            }
            bad = k != 0;
        }
        if (bad) {
            verify__fail(c, AL_AUDIT_MALFORMED, path, lineno, 0,
                         "line %" PRIu64 " of the checkpoint file %s: %s", lineno, path, why);
            json_decref(l.j);
            break;
        }
        if (n == alloc) {
            alloc = alloc ? alloc * 2 : 64;
            struct verify__ext *ne = realloc(c->ext, alloc * sizeof *ne);
            if (!ne) {
                json_decref(l.j);
                rc = al_error_set(err, -ENOMEM, "out of memory");
                break;
            }
            c->ext = ne;
        }
        if (n && l.f.seq <= c->ext[n - 1].seq) {
            verify__fail(c, AL_AUDIT_MALFORMED, path, lineno, l.f.seq,
                         "the checkpoint file %s is out of order at line %" PRIu64, path, lineno);
            json_decref(l.j);
            break;
        }
        c->ext[n].seq = l.f.seq;
        auditlog__hash_hex(l.p, l.len, c->ext[n].hash);
        n++;
        json_decref(l.j);
    }
    free(line);
    fclose(f);
    c->next = n;
    return rc;
}

int al_auditlog_verify(const struct al_auditlog_verify_opts *o,
                       struct al_auditlog_verify_result *res, struct al_error *err)
{
    memset(res, 0, sizeof *res);
    if (sodium_init() < 0)
        return al_error_set(err, -EIO, "libsodium failed to initialise");
    struct verify__ctx *c = calloc(1, sizeof *c);
    if (!c)
        return al_error_set(err, -ENOMEM, "out of memory");
    c->opts = o;
    c->res = res;
    auditlog__history_reset(&c->hist);
    int rc = 0;
    char pub[AL_AUDITLOG_PATH_MAX + 64];
    if (o->pubkey_file && *o->pubkey_file) {
        snprintf(pub, sizeof pub, "%s", o->pubkey_file);
    } else if (o->dir && o->prefix) {
        snprintf(pub, sizeof pub, "%s/%s.pub", o->dir, o->prefix);
    } else {
        rc = al_error_set(err, -EINVAL,
                          "audit verify: the public key file is required "
                          "(--pubkey FILE)");
        goto out;
    }
    if ((rc = auditlog__pubkey_load(pub, &c->pk, err)) != 0) {
        al_error_prefix(err, "cannot verify without the log's public key");
        goto out;
    }
    snprintf(res->log_id, sizeof res->log_id, "%s", c->pk.log_id);
    snprintf(res->key_id, sizeof res->key_id, "%s", c->pk.key_id);

    if (o->files && o->n_files) {
        c->files = calloc(o->n_files, sizeof *c->files);
        if (!c->files) {
            rc = al_error_set(err, -ENOMEM, "out of memory");
            goto out;
        }
        c->names_have_seq = true;
        for (size_t i = 0; i < o->n_files; i++) {
            struct auditlog__file *f = &c->files[i];
            snprintf(f->path, sizeof f->path, "%s", o->files[i]);
            const char *b = strrchr(o->files[i], '/');
            snprintf(f->name, sizeof f->name, "%s", b ? b + 1 : o->files[i]);
            /* the prefix is whatever precedes "-<20 digits>-" */
            const char *dash = f->name;
            f->first_seq = 0;
            while ((dash = strchr(dash, '-'))) {
                char pfx[256];
                size_t pl = (size_t)(dash - f->name);
                if (pl < sizeof pfx) {
                    memcpy(pfx, f->name, pl);
                    pfx[pl] = '\0';
                    if ((f->first_seq = auditlog__name_seq(f->name, pfx)) != 0)
                        break;
                }
                dash++;
            }
            if (f->first_seq == 0)
                c->names_have_seq = false;
        }
        c->nfiles = o->n_files;
        if (c->names_have_seq)
            auditlog__sort(c->files, c->nfiles);
    } else if (o->dir && o->prefix) {
        if ((rc = auditlog__list(o->dir, o->prefix, &c->files, &c->nfiles, err)) != 0)
            goto out;
        c->names_have_seq = true;
    } else {
        rc = al_error_set(err, -EINVAL, "audit verify: give a directory and prefix, or files");
        goto out;
    }
    if (o->checkpoint_file && *o->checkpoint_file &&
        (rc = verify__load_ext(c, o->checkpoint_file, err)) != 0)
        goto out;

    for (size_t i = 0; i < c->nfiles && res->verdict == AL_AUDIT_INTACT; i++) {
        if ((rc = verify__file(c, i, err)) != 0)
            goto out;
    }
    if (res->verdict == AL_AUDIT_INTACT && res->records == 0) {
        res->verdict = AL_AUDIT_NO_RECORDS;
        snprintf(res->reason, sizeof res->reason, "no audit records found%s%s",
                 o->dir ? " in " : "", o->dir ? o->dir : "");
    }
    if (res->verdict == AL_AUDIT_INTACT && res->records)
        verify__retention(c, !(o->files && o->n_files));
    if (res->verdict == AL_AUDIT_INTACT) {
        res->unsigned_tail = res->last_seq - c->last_ckpt;
        if (c->last_close && res->tail == AL_AUDIT_TAIL_CLEAN)
            res->tail = AL_AUDIT_TAIL_CLOSED;
        for (size_t i = 0; i < c->next; i++) {
            if (c->ext[i].seq > res->last_seq) {
                verify__fail(
                    c, AL_AUDIT_TRUNCATED, c->files[c->last_file].path, 0, res->last_seq + 1,
                    "the log ends at seq %" PRIu64 " but %s holds a checkpoint at seq "
                    "%" PRIu64 ": records %" PRIu64 "..%" PRIu64 " (at least) were "
                    "removed from the end",
                    res->last_seq, c->ext_path, c->ext[i].seq, res->last_seq + 1, c->ext[i].seq);
                break;
            }
        }
    }
out:
    free(c->files);
    free(c->ext);
    free(c);
    return rc;
}

void al_auditlog_verify_print(const struct al_auditlog_verify_result *r, FILE *out)
{
    al_auditlog_verify_print_with(r, out, NULL, NULL);
}

void al_auditlog_verify_print_with(const struct al_auditlog_verify_result *r, FILE *out,
                                   void (*more)(FILE *out, void *arg), void *arg)
{
    fprintf(out, "log %s (signing key %s): %" PRIu64 " file(s), %" PRIu64 " record(s)", r->log_id,
            r->key_id, r->files, r->records);
    if (r->records)
        fprintf(out, ", seq %" PRIu64 "..%" PRIu64, r->first_seq, r->last_seq);
    fprintf(out, ", %" PRIu64 " signed checkpoint(s)\n", r->checkpoints);
    if (r->records) {
        if (r->starts_at_genesis)
            fprintf(out, "start: seq 1, the beginning of the log\n");
        else if (r->retention_seq && r->retained_from >= r->first_seq)
            fprintf(out,
                    "start: seq %" PRIu64 " in %s (its position is proven by the signed "
                    "checkpoint that opens the file); seq 1..%" PRIu64 " are not in the log, "
                    "and the retention record seq %" PRIu64 " (%s) accounts for them:\n",
                    r->first_seq, r->first_file, r->first_seq - 1, r->retention_seq,
                    r->retention_time);
        else
            fprintf(out,
                    "start: seq %" PRIu64 " in %s (its position is proven by the signed "
                    "checkpoint that opens the file)\n",
                    r->first_seq, r->first_file);
        for (size_t i = 0; i < r->n_pruned; i++) {
            const struct al_auditlog_pruned *p = &r->pruned[i];
            char why[96];
            if (strcmp(p->rule, "max_age") == 0)
                snprintf(why, sizeof why, "older than %" PRIu64 " s", p->limit / 1000);
            else if (strcmp(p->rule, "max_bytes") == 0)
                snprintf(why, sizeof why, "the log was over %" PRIu64 " bytes", p->limit);
            else if (strcmp(p->rule, "max_files") == 0)
                snprintf(why, sizeof why, "the log was over %" PRIu64 " files", p->limit);
            else if (strcmp(p->rule, "unaccounted") == 0)
                snprintf(why, sizeof why, "NOT by retention: missing when a writer started");
            else
                snprintf(why, sizeof why, "several rules");
            fprintf(out,
                    "  seq %" PRIu64 "..%" PRIu64 ": %" PRIu64 " file(s), %" PRIu64
                    " bytes, %s (%s)%s\n",
                    p->first_seq, p->last_seq, p->files, p->bytes, p->rule, why,
                    p->first_seq >= r->first_seq ? "; announced, still present" : "");
        }
    }
    if (more)
        more(out, arg);
    if (r->verdict == AL_AUDIT_INTACT) {
        switch (r->tail) {
        case AL_AUDIT_TAIL_CLOSED:
            fprintf(out, "end: closed cleanly by the writer (signed)\n");
            break;
        case AL_AUDIT_TAIL_TORN:
            fprintf(out,
                    "end: truncated by a crash: the last line is incomplete (%" PRIu64
                    " bytes); every complete record before it is intact\n",
                    r->torn_bytes);
            break;
        case AL_AUDIT_TAIL_CLEAN:
            fprintf(out, "end: clean (the writer is running or stopped without closing)\n");
            break;
        }
        if (r->unsigned_tail)
            fprintf(out,
                    "note: the last %" PRIu64 " record(s) come after the last signed "
                    "checkpoint; only the chain protects them\n",
                    r->unsigned_tail);
        if (r->crash_recoveries)
            fprintf(out,
                    "note: %" PRIu64 " crash recovery(ies): a writer restarted after an "
                    "interrupted write and declared the incomplete bytes it left\n",
                    r->crash_recoveries);
        if (r->external_checkpoints)
            fprintf(out, "external checkpoints matched: %" PRIu64 "\n", r->external_checkpoints);
        fprintf(out, "INTACT\n");
    } else if (r->verdict == AL_AUDIT_NO_RECORDS) {
        fprintf(out, "NOTHING TO VERIFY: %s\n", r->reason);
    } else {
        fprintf(out, "FAILED (%s)", al_auditlog_verdict_name(r->verdict));
        if (r->file[0])
            fprintf(out, " at %s", r->file);
        if (r->line)
            fprintf(out, ":%" PRIu64, r->line);
        if (r->seq)
            fprintf(out, " (seq %" PRIu64 ")", r->seq);
        fprintf(out, ": %s\n", r->reason);
    }
}

json_t *al_auditlog_verify_json(const struct al_auditlog_verify_result *r)
{
    static const char *const tails[] = {"clean", "torn", "closed"};
    json_t *j = json_pack(
        "{s:b,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:s,s:b,s:b,s:s,s:I,s:I,s:I,s:I}", "intact",
        r->verdict == AL_AUDIT_INTACT, "verdict", al_auditlog_verdict_name(r->verdict), "log_id",
        r->log_id, "key_id", r->key_id, "files", (json_int_t)r->files, "records",
        (json_int_t)r->records, "checkpoints", (json_int_t)r->checkpoints, "first_seq",
        (json_int_t)r->first_seq, "last_seq", (json_int_t)r->last_seq, "first_file", r->first_file,
        "starts_at_genesis", r->starts_at_genesis, "start_anchored", r->start_anchored, "tail",
        tails[r->tail], "torn_bytes", (json_int_t)r->torn_bytes, "unsigned_tail",
        (json_int_t)r->unsigned_tail, "crash_recoveries", (json_int_t)r->crash_recoveries,
        "external_checkpoints", (json_int_t)r->external_checkpoints);
    if (j && r->retention_seq) {
        json_t *ranges = json_array();
        for (size_t i = 0; i < r->n_pruned; i++) {
            const struct al_auditlog_pruned *p = &r->pruned[i];
            json_array_append_new(
                ranges, json_pack("{s:I,s:I,s:I,s:I,s:s,s:I}", "first_seq",
                                  (json_int_t)p->first_seq, "last_seq", (json_int_t)p->last_seq,
                                  "files", (json_int_t)p->files, "bytes", (json_int_t)p->bytes,
                                  "rule", p->rule, "limit", (json_int_t)p->limit));
        }
        json_object_set_new(j, "retention",
                            json_pack("{s:I,s:s,s:I,s:o}", "record_seq",
                                      (json_int_t)r->retention_seq, "time", r->retention_time,
                                      "retained_from", (json_int_t)r->retained_from, "pruned",
                                      ranges));
    }
    if (j && r->verdict != AL_AUDIT_INTACT) {
        json_object_set_new(j, "problem",
                            json_pack("{s:s,s:I,s:I,s:s}", "file", r->file, "line",
                                      (json_int_t)r->line, "seq", (json_int_t)r->seq, "reason",
                                      r->reason));
    }
    return j;
}
