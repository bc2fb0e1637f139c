/* controlplane/list: the sandbox list endpoints' query language.
 *
 * Owns: parsing of GET /sandboxes (v1) and GET /v2/sandboxes queries (metadata filter with
 * the SDK's triple percent-encoding, state, template, startedAfter, order, limit,
 * nextToken), selection, ordering and pagination (x-next-token). Pure: no I/O, so the unit
 * suite covers it exactly.
 *
 * Metadata filters arrive percent-encoded three times (E2B-PROTOCOL.md section 10): the query
 * string is decoded once, then the parameter itself is unescaped, split on '&' and '=', and
 * each key and value unescaped again, as E2B's own parseFilters does.
 */
#ifndef AIRLOCK_CP_LIST_H
#define AIRLOCK_CP_LIST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "record.h"

#define CP_LIST_DEFAULT_LIMIT 100
#define CP_LIST_MAX_LIMIT     100
#define CP_LIST_MAX_FILTERS   64

struct cp_list_query {
    json_t *metadata;     /* required key -> value, or NULL */
    bool running, paused; /* states wanted */
    bool has_started_after;
    uint64_t started_after_ns;
    char template_id[CP_TEMPLATE_MAX]; /* "" = any */
    bool ascending;                    /* default: newest first */
    size_t limit;                      /* 0 = no limit (v1) */
    bool has_cursor;
    uint64_t cursor_started_ns;
    char cursor_id[64];
};

/* v2 = GET /v2/sandboxes (all parameters); v1 = GET /sandboxes (metadata only; running
 * sandboxes only, no pagination). Unknown parameters are ignored, as E2B does. */
int cp_list_query_parse(const char *query, bool v2, struct cp_list_query *q, struct al_error *err);
void cp_list_query_free(struct cp_list_query *q);

/* Parses the value of a metadata parameter (after the query string's own decoding) into
 * an object. Exposed for tests. */
json_t *cp_list_parse_metadata(const char *value, struct al_error *err);

/* What a sandbox looks like to the filter (the caller points into its own records). */
struct cp_list_item {
    const char *id;
    enum cp_sb_state state;
    uint64_t started_ns;
    const char *template_id;
    const json_t *metadata;
    void *user;
};

bool cp_list_match(const struct cp_list_query *q, const struct cp_list_item *it);
/* Sorts items in place in the query's order, keeps those that match and come after the
 * cursor, and cuts the page: *n_out items stay at the front of items. next_token receives
 * the token of the next page, or "" when this is the last page (size >= 96). */
void cp_list_select(const struct cp_list_query *q, struct cp_list_item *items, size_t n,
                    size_t *n_out, char *next_token, size_t next_token_len);

/* Encodes/decodes the opaque pagination token. */
void cp_list_token_encode(uint64_t started_ns, const char *id, char *out, size_t len);
int cp_list_token_decode(const char *tok, uint64_t *started_ns, char *id, size_t idlen);

#endif
