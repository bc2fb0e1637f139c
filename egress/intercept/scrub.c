/* egress/intercept/scrub: spellings of a value, the Aho-Corasick matcher, streaming
 * replacement, and decoding of response bodies (see scrub.h). */
#include "scrub.h"

#include <errno.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "common/util.h"
#include "egress/audit.h"

#define NONE32 UINT32_MAX
static const char scrub__mask[] = "REDACTED";

/* ---- spellings ---------------------------------------------------------------------- */

struct scrub__pat {
    unsigned char *p;
    size_t len;
    uint16_t value; /* index of the value */
    uint8_t enc;    /* enum intercept_enc */
};

struct scrub__pats {
    struct scrub__pat *v;
    size_t n, cap;
    size_t bytes;
};

static void scrub__pats_free(struct scrub__pats *ps)
{
    for (size_t i = 0; i < ps->n; i++) {
        sodium_memzero(ps->v[i].p, ps->v[i].len);
        free(ps->v[i].p);
    }
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

/* Takes ownership of p. Drops duplicates and too-short patterns. */
static int scrub__add(struct scrub__pats *ps, unsigned char *p, size_t len, size_t value, int enc)
{
    size_t min = enc == INTERCEPT_ENC_RAW ? INTERCEPT_SCRUB_MIN_RAW : INTERCEPT_SCRUB_MIN_ENCODED;
    bool drop = len < min;
    for (size_t i = 0; i < ps->n && !drop; i++)
        drop = ps->v[i].len == len && memcmp(ps->v[i].p, p, len) == 0;
    if (drop) {
        sodium_memzero(p, len);
        free(p);
        return 0;
    }
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? ps->cap * 2 : 16;
        struct scrub__pat *nv = realloc(ps->v, nc * sizeof *nv);
        if (!nv) {
            sodium_memzero(p, len);
            free(p);
            return -ENOMEM;
        }
        ps->v = nv;
        ps->cap = nc;
    }
    ps->v[ps->n++] = (struct scrub__pat){p, len, (uint16_t)value, (uint8_t)enc};
    ps->bytes += len;
    return 0;
}

static const char b64std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* The base64 characters (enc: INTERCEPT_ENC_BASE64 or _BASE64URL) that depend only on v's
 * bytes when v starts k bytes into a 3-byte group. */
static int scrub__b64_core(struct scrub__pats *ps, const unsigned char *v, size_t n, size_t k,
                           size_t value, int enc)
{
    const char *alpha = enc == INTERCEPT_ENC_BASE64URL ? b64url : b64std;
    size_t total = k + n;
    size_t nbits = total * 8;
    size_t nchars = (nbits + 5) / 6;
    unsigned char *out = malloc(nchars + 1);
    if (!out)
        return -ENOMEM;
    size_t o = 0;
    for (size_t j = 0; j < nchars; j++) {
        size_t bit = j * 6;
        if (bit < k * 8 || bit + 6 > nbits)
            continue; /* touches bytes that are not v's */
        unsigned val = 0;
        for (size_t b = bit; b < bit + 6; b++) {
            size_t byte = b / 8;
            unsigned char x = byte < k ? 0 : v[byte - k];
            val = (val << 1) | ((x >> (7 - b % 8)) & 1u);
        }
        out[o++] = (unsigned char)alpha[val];
    }
    return scrub__add(ps, out, o, value, enc);
}

static int scrub__hex(struct scrub__pats *ps, const unsigned char *v, size_t n, bool upper,
                      size_t value)
{
    unsigned char *out = malloc(n * 2 + 1);
    if (!out)
        return -ENOMEM;
    al_hex_encode((char *)out, v, n, upper);
    return scrub__add(ps, out, n * 2, value, INTERCEPT_ENC_HEX);
}

static bool scrub__unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

static int scrub__pct(struct scrub__pats *ps, const unsigned char *v, size_t n, bool upper,
                      bool all, size_t value)
{
    const char *d = upper ? al_hex_upper : al_hex_lower;
    unsigned char *out = malloc(n * 3 + 1);
    if (!out)
        return -ENOMEM;
    size_t o = 0;
    bool changed = false;
    for (size_t i = 0; i < n; i++) {
        if (!all && scrub__unreserved(v[i])) {
            out[o++] = v[i];
            continue;
        }
        changed = true;
        out[o++] = '%';
        out[o++] = (unsigned char)d[v[i] >> 4];
        out[o++] = (unsigned char)d[v[i] & 15];
    }
    if (!changed) {
        free(out);
        return 0;
    }
    return scrub__add(ps, out, o, value, INTERCEPT_ENC_PERCENT);
}

/* JSON escapes: slash_escape ("\/", as PHP writes), html ("<>&'" as \u00XX, as Go writes);
 * both escape '"', '\' and control characters. */
static int scrub__json(struct scrub__pats *ps, const unsigned char *v, size_t n, bool slash,
                       bool html, size_t value)
{
    unsigned char *out = malloc(n * 6 + 1);
    if (!out)
        return -ENOMEM;
    size_t o = 0;
    bool changed = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = v[i];
        if (c == '"' || c == '\\' || (slash && c == '/')) {
            out[o++] = '\\';
            out[o++] = c;
            changed = true;
        } else if (c < 0x20 || (html && (c == '<' || c == '>' || c == '&' || c == '\''))) {
            const char *hx = al_hex_lower;
            memcpy(out + o, "\\u00", 4);
            out[o + 4] = (unsigned char)hx[c >> 4];
            out[o + 5] = (unsigned char)hx[c & 15];
            o += 6;
            changed = true;
        } else {
            out[o++] = c;
        }
    }
    if (!changed) {
        free(out);
        return 0;
    }
    return scrub__add(ps, out, o, value, INTERCEPT_ENC_JSON);
}

static int scrub__spellings(struct scrub__pats *ps, const unsigned char *v, size_t n, size_t value)
{
    if (n > INTERCEPT_SCRUB_VALUE_MAX)
        n = INTERCEPT_SCRUB_VALUE_MAX;
    if (n < INTERCEPT_SCRUB_MIN_RAW)
        return 0;
    unsigned char *raw = malloc(n);
    if (!raw)
        return -ENOMEM;
    memcpy(raw, v, n);
    int r = scrub__add(ps, raw, n, value, INTERCEPT_ENC_RAW);
    for (size_t k = 0; k < 3 && r == 0; k++)
        r = scrub__b64_core(ps, v, n, k, value, INTERCEPT_ENC_BASE64);
    for (size_t k = 0; k < 3 && r == 0; k++)
        r = scrub__b64_core(ps, v, n, k, value, INTERCEPT_ENC_BASE64URL);
    if (r == 0)
        r = scrub__hex(ps, v, n, false, value);
    if (r == 0)
        r = scrub__hex(ps, v, n, true, value);
    if (r == 0)
        r = scrub__pct(ps, v, n, true, true, value);
    if (r == 0)
        r = scrub__pct(ps, v, n, false, true, value);
    if (r == 0)
        r = scrub__pct(ps, v, n, true, false, value);
    if (r == 0)
        r = scrub__pct(ps, v, n, false, false, value);
    if (r == 0)
        r = scrub__json(ps, v, n, false, false, value);
    if (r == 0)
        r = scrub__json(ps, v, n, true, false, value);
    if (r == 0)
        r = scrub__json(ps, v, n, false, true, value);
    return r;
}

/* ---- the automaton -------------------------------------------------------------------- */

/* A state has either one child (byte, child) or a table of 256 (branching states and the
 * root). out: 1 + the longest pattern ending here (its own, or through failure links). */
struct scrub__state {
    uint32_t fail;
    uint32_t child; /* single child, or table index when TABLE */
    uint32_t depth;
    uint16_t out; /* 0 = none */
    uint8_t byte;
    uint8_t flags;
};
#define ST_TABLE 1
#define ST_CHILD 2

struct intercept_matcher {
    atomic_int refs;
    struct scrub__state *s;
    size_t n_states;
    uint32_t *tables; /* 256 per table */
    size_t n_tables;
    uint32_t *out_len; /* per pattern (1-based via out) */
    uint8_t *out_enc;
    uint16_t *out_value;
    size_t n_pats;
    size_t max_len;
};

static inline uint32_t m__goto(const struct intercept_matcher *m, uint32_t s, unsigned char b)
{
    for (;;) {
        const struct scrub__state *st = &m->s[s];
        if (st->flags & ST_TABLE) {
            uint32_t n = m->tables[(size_t)st->child * 256 + b];
            if (n != NONE32)
                return n;
        } else if ((st->flags & ST_CHILD) && st->byte == b) {
            return st->child;
        }
        if (s == 0)
            return 0;
        s = st->fail;
    }
}

/* Build-time trie: children as sibling lists. */
struct scrub__node {
    uint32_t first, next; /* first child, next sibling */
    uint32_t depth;
    uint16_t term; /* 1 + pattern index */
    uint8_t byte;
    uint8_t nchild;
};

static uint32_t node__find(const struct scrub__node *t, uint32_t s, unsigned char b)
{
    for (uint32_t c = t[s].first; c != NONE32; c = t[c].next)
        if (t[c].byte == b)
            return c;
    return NONE32;
}

static void matcher__free(struct intercept_matcher *m)
{
    if (!m)
        return;
    if (m->s) {
        sodium_memzero(m->s, m->n_states * sizeof *m->s);
        free(m->s);
    }
    if (m->tables) {
        sodium_memzero(m->tables, m->n_tables * 256 * sizeof *m->tables);
        free(m->tables);
    }
    free(m->out_len);
    free(m->out_enc);
    free(m->out_value);
    free(m);
}

int intercept_matcher_new(const void *const *values, const size_t *lens, size_t n,
                          struct intercept_matcher **out)
{
    *out = NULL;
    if (n == 0 || n > INTERCEPT_SCRUB_MAX_VALUES)
        return -EINVAL;
    struct scrub__pats ps = {0};
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++)
        r = scrub__spellings(&ps, values[i], lens[i], i);
    if (r < 0) {
        scrub__pats_free(&ps);
        return r;
    }
    struct intercept_matcher *m = calloc(1, sizeof *m);
    struct scrub__node *t = calloc(ps.bytes + 1, sizeof *t);
    uint32_t *queue = calloc(ps.bytes + 1, sizeof *queue);
    if (!m || !t || !queue)
        goto nomem;
    atomic_init(&m->refs, 1);
    m->n_pats = ps.n;
    m->out_len = calloc(ps.n + 1, sizeof *m->out_len);
    m->out_enc = calloc(ps.n + 1, sizeof *m->out_enc);
    m->out_value = calloc(ps.n + 1, sizeof *m->out_value);
    if (!m->out_len || !m->out_enc || !m->out_value)
        goto nomem;

    /* Trie. */
    size_t nn = 1;
    t[0] = (struct scrub__node){.first = NONE32, .next = NONE32};
    for (size_t i = 0; i < ps.n; i++) {
        uint32_t s = 0;
        for (size_t k = 0; k < ps.v[i].len; k++) {
            unsigned char b = ps.v[i].p[k];
            uint32_t c = node__find(t, s, b);
            if (c == NONE32) {
                c = (uint32_t)nn++;
                t[c] = (struct scrub__node){
                    .first = NONE32, .next = t[s].first, .depth = t[s].depth + 1, .byte = b};
                t[s].first = c;
                if (t[s].nchild < 255)
                    t[s].nchild++;
            }
            s = c;
        }
        /* Duplicates were dropped, so no two patterns end on the same node. */
        t[s].term = (uint16_t)(i + 1);
        m->out_len[i + 1] = (uint32_t)ps.v[i].len;
        m->out_enc[i + 1] = ps.v[i].enc;
        m->out_value[i + 1] = ps.v[i].value;
        if (ps.v[i].len > m->max_len)
            m->max_len = ps.v[i].len;
    }
    m->n_states = nn;
    if (!(m->s = calloc(nn, sizeof *m->s)))
        goto nomem;
    size_t ntab = 0;
    for (size_t i = 0; i < nn; i++)
        if (i == 0 || t[i].nchild > 1)
            ntab++;
    m->n_tables = ntab;
    if (!(m->tables = malloc(ntab * 256 * sizeof *m->tables)))
        goto nomem;
    memset(m->tables, 0xff, ntab * 256 * sizeof *m->tables);
    ntab = 0;
    for (size_t i = 0; i < nn; i++) {
        struct scrub__state *st = &m->s[i];
        st->depth = t[i].depth;
        st->byte = t[i].byte;
        if (i == 0 || t[i].nchild > 1) {
            st->flags = ST_TABLE;
            st->child = (uint32_t)ntab;
            for (uint32_t c = t[i].first; c != NONE32; c = t[c].next)
                m->tables[ntab * 256 + t[c].byte] = c;
            if (i == 0)
                for (int b = 0; b < 256; b++)
                    if (m->tables[b] == NONE32)
                        m->tables[b] = 0; /* the root never fails */
            ntab++;
        } else if (t[i].nchild == 1) {
            st->flags = ST_CHILD;
            st->child = t[i].first;
            /* byte of the child is kept on the parent for the single-child test */
            st->byte = t[t[i].first].byte;
        }
    }
    /* Failure links and outputs, breadth first. */
    size_t qh = 0, qt = 0;
    m->s[0].fail = 0;
    m->s[0].out = 0;
    for (uint32_t c = t[0].first; c != NONE32; c = t[c].next) {
        m->s[c].fail = 0;
        m->s[c].out = t[c].term;
        queue[qt++] = c;
    }
    while (qh < qt) {
        uint32_t s = queue[qh++];
        for (uint32_t c = t[s].first; c != NONE32; c = t[c].next) {
            unsigned char b = t[c].byte;
            uint32_t f = m->s[s].fail;
            uint32_t g;
            for (;;) {
                g = node__find(t, f, b);
                if (g != NONE32 || f == 0)
                    break;
                f = m->s[f].fail;
            }
            m->s[c].fail = (g != NONE32 && g != c) ? g : 0;
            m->s[c].out = t[c].term ? t[c].term : m->s[m->s[c].fail].out;
            queue[qt++] = c;
        }
    }
    sodium_memzero(t, (ps.bytes + 1) * sizeof *t);
    free(t);
    free(queue);
    scrub__pats_free(&ps);
    *out = m;
    return 0;
nomem:
    if (t)
        sodium_memzero(t, (ps.bytes + 1) * sizeof *t);
    free(t);
    free(queue);
    scrub__pats_free(&ps);
    matcher__free(m);
    return -ENOMEM;
}

struct intercept_matcher *intercept_matcher_ref(struct intercept_matcher *m)
{
    if (m)
        atomic_fetch_add(&m->refs, 1);
    return m;
}

void intercept_matcher_unref(struct intercept_matcher *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1)
        matcher__free(m);
}

size_t intercept_matcher_patterns(const struct intercept_matcher *m)
{
    return m->n_pats;
}

size_t intercept_matcher_max_len(const struct intercept_matcher *m)
{
    return m->max_len;
}

const char *intercept_enc_name(enum intercept_enc e)
{
    static const char *const names[] = {"raw", "base64", "base64url", "hex", "percent", "json"};
    return (unsigned)e < INTERCEPT_ENC__COUNT ? names[e] : "unknown";
}

/* Scans buf[from, len) continuing from *state; masks matches (which may begin before from,
 * never before 0). */
static uint64_t m__scan(const struct intercept_matcher *m, uint32_t *state, unsigned char *buf,
                        size_t from, size_t len, size_t mi, struct intercept_scrub_report *rep)
{
    uint32_t s = *state;
    uint64_t found = 0;
    if (m->n_pats == 0)
        return 0;
    for (size_t i = from; i < len; i++) {
        s = m__goto(m, s, buf[i]);
        uint16_t o = m->s[s].out;
        if (o) {
            size_t ml = m->out_len[o];
            size_t start = i + 1 >= ml ? i + 1 - ml : 0;
            for (size_t k = start; k <= i; k++)
                buf[k] = (unsigned char)scrub__mask[(k - start) % 8];
            found++;
            if (rep) {
                rep->enc_mask |= 1u << m->out_enc[o];
                if (mi < INTERCEPT_SCRUB_MAX_MATCHERS)
                    rep->value_mask[mi] |= 1u << (m->out_value[o] & 31);
            }
        }
    }
    *state = s;
    if (rep)
        rep->matches += found;
    return found;
}

size_t intercept_scrub_buffer(const struct intercept_matcher *m, size_t mi, void *buf, size_t len,
                              struct intercept_scrub_report *rep)
{
    uint32_t s = 0;
    return (size_t)m__scan(m, &s, buf, 0, len, mi, rep);
}

bool intercept_matcher_find(const struct intercept_matcher *m, const void *buf, size_t len)
{
    if (m->n_pats == 0)
        return false;
    const unsigned char *p = buf;
    uint32_t s = 0;
    for (size_t i = 0; i < len; i++) {
        s = m__goto(m, s, p[i]);
        if (m->s[s].out)
            return true;
    }
    return false;
}

uint32_t intercept_matcher_find_mask(const struct intercept_matcher *m, const void *buf, size_t len)
{
    if (m->n_pats == 0)
        return 0;
    const unsigned char *p = buf;
    uint32_t s = 0, mask = 0;
    for (size_t i = 0; i < len; i++) {
        s = m__goto(m, s, p[i]);
        /* every pattern ending here: the longest, then shorter ones through failure links */
        for (uint32_t t = s; t && m->s[t].out; t = m->s[t].fail) {
            mask |= 1u << (m->out_value[m->s[t].out] & 31);
            if (m->out_len[m->s[t].out] == 0)
                break;
        }
    }
    return mask;
}

/* ---- streams ----------------------------------------------------------------------------- */

int intercept_scrub_init(struct intercept_scrub *s, struct intercept_matcher *const *m, size_t n)
{
    memset(s, 0, sizeof *s);
    if (n > INTERCEPT_SCRUB_MAX_MATCHERS)
        return -E2BIG;
    for (size_t i = 0; i < n; i++) {
        s->st[i].m = intercept_matcher_ref(m[i]);
        al_buf_init(&s->st[i].carry, 0);
    }
    s->n = n;
    al_buf_init(&s->tmp, 0);
    return 0;
}

/* One stage: carry + in -> out (minus what is held back as the new carry). */
static int scrub__stage(struct intercept_scrub_stage *st, size_t mi, const unsigned char *in,
                        size_t len, struct al_buf *out, struct intercept_scrub_report *rep)
{
    size_t base = out->len;
    size_t hl = st->carry.len;
    if (al_buf_reserve(out, hl + len + 1) < 0)
        return -ENOMEM;
    if (hl)
        memcpy(out->data + out->len, st->carry.data, hl);
    if (len)
        memcpy(out->data + out->len + hl, in, len);
    size_t total = hl + len;
    unsigned char *region = (unsigned char *)out->data + base;
    m__scan(st->m, &st->state, region, hl, total, mi, rep);
    size_t keep = st->m->n_pats ? st->m->s[st->state].depth : 0;
    if (keep > total)
        keep = total;
    al_buf_reset(&st->carry);
    if (keep && al_buf_append(&st->carry, region + total - keep, keep) < 0)
        return -ENOMEM;
    out->len = base + total - keep;
    out->data[out->len] = 0;
    return 0;
}

int intercept_scrub_feed(struct intercept_scrub *s, const void *in, size_t len, struct al_buf *out)
{
    if (s->n == 0)
        return al_buf_append(out, in, len) < 0 ? -ENOMEM : 0;
    const unsigned char *cur = in;
    size_t cur_len = len;
    struct al_buf a = AL_BUF_INIT, *bufs[2] = {&s->tmp, &a};
    int r = 0;
    for (size_t i = 0; i < s->n && r == 0; i++) {
        struct al_buf *dst = i + 1 == s->n ? out : bufs[i % 2];
        if (dst != out)
            al_buf_reset(dst);
        r = scrub__stage(&s->st[i], i, cur, cur_len, dst, &s->rep);
        if (dst != out) {
            cur = (const unsigned char *)dst->data;
            cur_len = dst->len;
        }
    }
    if (s->tmp.len)
        sodium_memzero(s->tmp.data, s->tmp.len);
    al_buf_reset(&s->tmp);
    al_buf_free_wipe(&a);
    return r;
}

int intercept_scrub_finish(struct intercept_scrub *s, struct al_buf *out)
{
    /* Stage i's held bytes are the end of its stream: they go through the later stages
     * (after whatever those still hold), whose own held bytes are flushed in their turn. */
    int r = 0;
    for (size_t i = 0; i < s->n; i++) {
        struct al_buf cur = s->st[i].carry;
        al_buf_init(&s->st[i].carry, 0);
        s->st[i].state = 0;
        for (size_t k = i + 1; k < s->n && cur.len && r == 0; k++) {
            struct al_buf nxt = AL_BUF_INIT;
            r = scrub__stage(&s->st[k], k, (const unsigned char *)cur.data, cur.len, &nxt, &s->rep);
            al_buf_free_wipe(&cur);
            cur = nxt;
        }
        if (r == 0 && cur.len && al_buf_append(out, cur.data, cur.len) < 0)
            r = -ENOMEM;
        al_buf_free_wipe(&cur);
    }
    return r;
}

void intercept_scrub_free(struct intercept_scrub *s)
{
    for (size_t i = 0; i < s->n; i++) {
        al_buf_free_wipe(&s->st[i].carry);
        intercept_matcher_unref((struct intercept_matcher *)s->st[i].m);
    }
    al_buf_free_wipe(&s->tmp);
    s->n = 0;
}

/* ---- the codings of a response body ---------------------------------------------------- */

static void codings__add(struct intercept_codings *c, const char *tok, size_t len, bool transfer)
{
    c->total++;
    if (transfer)
        c->n_transfer++;
    if (c->n == INTERCEPT_CODINGS_LIST)
        return;
    struct intercept_coding_el *e = &c->v[c->n++];
    e->transfer = transfer;
    size_t k = 0;
    for (; k < len && k + 1 < sizeof e->name; k++) {
        unsigned char ch = (unsigned char)tok[k];
        e->name[k] = ch >= 'A' && ch <= 'Z'   ? (char)(ch + 32)
                     : ch > 0x20 && ch < 0x7f ? (char)ch
                                              : '?';
    }
    e->name[k] = 0;
    if ((len == 4 && strncasecmp(tok, "gzip", 4) == 0) ||
        (len == 6 && strncasecmp(tok, "x-gzip", 6) == 0))
        e->kind = INTERCEPT_CODING_GZIP;
    else if (len == 7 && strncasecmp(tok, "deflate", 7) == 0)
        e->kind = INTERCEPT_CODING_DEFLATE;
    else
        e->kind = INTERCEPT_CODING_UNKNOWN; /* also anything with ";parameters" */
}

/* The elements of one list-valued field (RFC 9110 5.6.1: empty elements and OWS allowed). */
static void codings__field(struct intercept_codings *c, const char *v, size_t len, bool transfer,
                           bool *pending_chunked)
{
    size_t pos = 0;
    while (pos < len) {
        size_t k = pos;
        while (k < len && v[k] != ',')
            k++;
        const char *t = v + pos;
        size_t tl = k - pos;
        while (tl && (*t == ' ' || *t == '\t')) {
            t++;
            tl--;
        }
        while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\t'))
            tl--;
        pos = k + 1;
        if (tl == 0)
            continue;
        if (!transfer) {
            if (tl != 8 || strncasecmp(t, "identity", 8) != 0)
                codings__add(c, t, tl, false);
            continue;
        }
        /* A chunked is the framing only when nothing follows it, in this field or a later
         * one; one that something follows is a layer the proxy does not undo. */
        if (*pending_chunked)
            codings__add(c, "chunked", 7, true);
        *pending_chunked = tl == 7 && strncasecmp(t, "chunked", 7) == 0;
        if (!*pending_chunked)
            codings__add(c, t, tl, true);
    }
}

void intercept_codings_of(const struct al_http_field *h, size_t n, struct intercept_codings *out)
{
    memset(out, 0, sizeof *out);
    bool pending = false;
    for (size_t i = 0; i < n; i++)
        if (intercept_hdr_is(&h[i], "Content-Encoding"))
            codings__field(out, h[i].value, h[i].value_len, false, &pending);
    for (size_t i = 0; i < n; i++)
        if (intercept_hdr_is(&h[i], "Transfer-Encoding"))
            codings__field(out, h[i].value, h[i].value_len, true, &pending);
    out->chunked = pending;
}

json_t *intercept_codings_json(const struct intercept_codings *c)
{
    if (!c || c->total == 0)
        return NULL;
    json_t *a = json_array();
    for (size_t i = 0; i < c->n; i++)
        json_array_append_new(a, json_string(c->v[i].name));
    if (c->total > c->n)
        json_array_append_new(a, json_string("..."));
    return a;
}

void intercept_codings_write(const struct intercept_codings *c, const char *key,
                             struct egress_recw *w)
{
    if (!c || c->total == 0)
        return;
    egress_recw_arr_begin(w, key);
    for (size_t i = 0; i < c->n; i++)
        egress_recw_elem_strn(w, c->v[i].name, strlen(c->v[i].name));
    if (c->total > c->n)
        egress_recw_elem_strn(w, "...", 3);
    egress_recw_close(w, ']');
}

/* ---- response bodies ---------------------------------------------------------------------- */

#define BODY_CHUNK 16384

int intercept_body_start(struct intercept_body *b, struct intercept_matcher *const *m, size_t n,
                         const struct intercept_codings *c, enum policy_scrub mode,
                         uint64_t max_decoded, const char **reason)
{
    static const struct intercept_codings none;
    memset(b, 0, sizeof *b);
    *reason = NULL;
    b->max_decoded = max_decoded ? max_decoded : INTERCEPT_SCRUB_DECODED_MAX;
    if (!c)
        c = &none;
    /* Transfer codings first: whatever the mode, they cannot be passed on. */
    bool tr_unknown = false, ct_unknown = false;
    for (size_t i = 0; i < c->n; i++) {
        if (c->v[i].kind == INTERCEPT_CODING_UNKNOWN)
            *(c->v[i].transfer ? &tr_unknown : &ct_unknown) = true;
    }
    size_t n_ct = c->total - c->n_transfer;
    if (tr_unknown) {
        *reason = "unsupported_transfer_coding";
        return -EPROTO;
    }
    if (c->n_transfer > INTERCEPT_CODINGS_MAX || (c->n_transfer && c->total > c->n)) {
        *reason = "too_many_codings";
        return -EPROTO;
    }
    bool scrub = n > 0 && mode != POLICY_SCRUB_NONE;
    bool content = scrub && n_ct > 0;
    if (content && (ct_unknown || c->total > INTERCEPT_CODINGS_MAX)) {
        *reason = ct_unknown ? "unsupported_content_encoding" : "too_many_codings";
        if (mode == POLICY_SCRUB_STRICT)
            return -EPROTO;
        *reason = NULL;
        b->not_inspected = true; /* best_effort: the content codings go as they came */
        scrub = content = false;
    }
    /* The layers to undo, last applied first. */
    size_t from = content ? 0 : n_ct;
    for (size_t i = c->n; i > from; i--) {
        const struct intercept_coding_el *e = &c->v[i - 1];
        if (b->n_layers == INTERCEPT_CODINGS_MAX) { /* excluded above; kept as the bound */
            intercept_body_free(b);
            *reason = "too_many_codings";
            return -EPROTO;
        }
        struct intercept_body_layer *l = &b->layer[b->n_layers++];
        al_buf_init(&l->pre, 0);
        /* deflate: zlib wrapper, or raw as some servers send it, decided on the first bytes */
        l->wbits = e->kind == INTERCEPT_CODING_GZIP ? 16 + MAX_WBITS : 0;
    }
    int r = 0;
    if (scrub && (r = intercept_scrub_init(&b->scrub, m, n)) < 0)
        return r;
    b->scrubbing = scrub;
    b->content_decoded = content;
    if (b->n_layers == 0) {
        b->mode = scrub ? INTERCEPT_BODY_SCRUB : INTERCEPT_BODY_PASS;
        return 0;
    }
    b->mode = INTERCEPT_BODY_DECODE;
    if (!(b->chunk = malloc((size_t)BODY_CHUNK * b->n_layers)))
        goto nomem;
    for (size_t i = 0; i < b->n_layers; i++) {
        struct intercept_body_layer *l = &b->layer[i];
        z_stream *z = calloc(1, sizeof *z);
        if (!z || inflateInit2(z, l->wbits ? l->wbits : MAX_WBITS) != Z_OK) {
            free(z);
            goto nomem;
        }
        l->z = z;
    }
    return 0;
nomem:
    intercept_body_free(b);
    return -ENOMEM;
}

static int body__layer(struct intercept_body *b, size_t i, const unsigned char *in, size_t len,
                       struct al_buf *out, const char **reason);

/* What the last layer produced (or the body itself without layers): bounds, then scrub. */
static int body__sink(struct intercept_body *b, const unsigned char *in, size_t len,
                      struct al_buf *out, const char **reason)
{
    if (b->mode == INTERCEPT_BODY_DECODE) {
        b->decoded += len;
        if (b->decoded > b->max_decoded) {
            *reason = "decoded_body_too_large";
            return -EFBIG;
        }
        if (b->decoded > INTERCEPT_DECODE_RATIO_FLOOR &&
            b->decoded / INTERCEPT_DECODE_RATIO_MAX > b->received) {
            *reason = "decompression_ratio_exceeded";
            return -EFBIG;
        }
    }
    if (!len)
        return 0;
    if (b->scrubbing)
        return intercept_scrub_feed(&b->scrub, in, len, out);
    return al_buf_append(out, in, len) < 0 ? -ENOMEM : 0;
}

/* "deflate" is meant to be zlib-wrapped, but servers also send raw deflate: decide from the
 * first two bytes (a zlib header is CMF/FLG with CM 8 and a multiple of 31). */
static int body__deflate_kind(struct intercept_body_layer *l, const unsigned char **in, size_t *len,
                              bool *again)
{
    *again = false;
    if (al_buf_append(&l->pre, *in, *len) < 0)
        return -ENOMEM;
    if (l->pre.len < 2) {
        *len = 0;
        return 0;
    }
    const unsigned char *p = (const unsigned char *)l->pre.data;
    bool zlib = (p[0] & 0x0f) == 8 && ((unsigned)p[0] * 256u + p[1]) % 31u == 0;
    if (!zlib) {
        inflateEnd(l->z);
        memset(l->z, 0, sizeof(z_stream));
        if (inflateInit2(l->z, -MAX_WBITS) != Z_OK)
            return -ENOMEM;
    }
    l->wbits = zlib ? MAX_WBITS : -MAX_WBITS;
    *again = true; /* inflate what was collected (the caller frees pre afterwards) */
    *in = p;
    *len = l->pre.len;
    return 0;
}

/* Layer i undoes its coding on in; what it produces goes to layer i + 1, or the sink. */
static int body__layer(struct intercept_body *b, size_t i, const unsigned char *in, size_t len,
                       struct al_buf *out, const char **reason)
{
    if (i >= b->n_layers || i >= INTERCEPT_CODINGS_MAX) /* n_layers never exceeds the max */
        return body__sink(b, in, len, out, reason);
    struct intercept_body_layer *l = &b->layer[i];
    bool collected = false;
    if (l->wbits == 0) {
        int r = body__deflate_kind(l, &in, &len, &collected);
        if (r < 0 || len == 0)
            return r;
    }
    if (l->end && len) {
        *reason = "corrupt_encoding"; /* bytes after the end of the compressed stream */
        return -EBADMSG;
    }
    z_stream *z = l->z;
    unsigned char *chunk = b->chunk + (size_t)BODY_CHUNK * i;
    int rc = 0;
    z->next_in = (unsigned char *)in;
    z->avail_in = (uInt)len;
    while (!l->end && rc == 0) {
        z->next_out = chunk;
        z->avail_out = BODY_CHUNK;
        int zr = inflate(z, Z_NO_FLUSH);
        /* What zlib produced before it met the corruption still goes on first: the outcome is
         * the first failure in the stream's order (a bound the output before it already
         * passed), whatever the pieces the body arrived in. */
        bool corrupt = zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR;
        size_t got = BODY_CHUNK - z->avail_out;
        if (got || z->total_in)
            l->started = true;
        l->out += got;
        if (l->out > b->max_decoded) {
            *reason = "decoded_body_too_large";
            rc = -EFBIG;
            break;
        }
        if (zr == Z_STREAM_END)
            l->end = true;
        if (got && (rc = body__layer(b, i + 1, chunk, got, out, reason)) < 0)
            break;
        if (corrupt) {
            *reason = "corrupt_encoding";
            rc = -EBADMSG;
            break;
        }
        if (l->end)
            break;
        /* More to do only while input remains or zlib filled the whole chunk. */
        if (z->avail_in == 0 && z->avail_out != 0)
            break;
        if (zr == Z_BUF_ERROR && got == 0)
            break;
    }
    sodium_memzero(chunk, BODY_CHUNK);
    if (rc == 0 && l->end && z->avail_in > 0) {
        *reason = "corrupt_encoding"; /* bytes after the end of the compressed stream */
        rc = -EBADMSG;
    }
    if (collected)
        al_buf_free_wipe(&l->pre);
    return rc;
}

int intercept_body_feed(struct intercept_body *b, const void *in, size_t len, struct al_buf *out,
                        const char **reason)
{
    *reason = NULL;
    switch (b->mode) {
    case INTERCEPT_BODY_PASS:
        return al_buf_append(out, in, len) < 0 ? -ENOMEM : 0;
    case INTERCEPT_BODY_SCRUB:
        return intercept_scrub_feed(&b->scrub, in, len, out);
    case INTERCEPT_BODY_DECODE:
        b->received += len;
        return body__layer(b, 0, in, len, out, reason);
    }
    return -EINVAL;
}

int intercept_body_finish(struct intercept_body *b, struct al_buf *out, const char **reason)
{
    *reason = NULL;
    if (b->mode == INTERCEPT_BODY_PASS)
        return 0;
    for (size_t i = 0; i < b->n_layers; i++) {
        const struct intercept_body_layer *l = &b->layer[i];
        /* one byte of deflate, or a stream that did not end (truncated) */
        if ((l->wbits == 0 && l->pre.len) || (l->started && !l->end)) {
            *reason = "corrupt_encoding";
            return -EBADMSG;
        }
    }
    return b->scrubbing ? intercept_scrub_finish(&b->scrub, out) : 0;
}

void intercept_body_free(struct intercept_body *b)
{
    for (size_t i = 0; i < b->n_layers; i++) {
        if (b->layer[i].z) {
            inflateEnd(b->layer[i].z);
            free(b->layer[i].z);
        }
        al_buf_free_wipe(&b->layer[i].pre);
    }
    if (b->chunk) {
        sodium_memzero(b->chunk, (size_t)BODY_CHUNK * b->n_layers);
        free(b->chunk);
    }
    if (b->scrubbing)
        intercept_scrub_free(&b->scrub);
    memset(b, 0, sizeof *b);
}
