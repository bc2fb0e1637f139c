/* tests/unit/controlplane/test_cp_list: the list endpoints' query language: the SDK's
 * triple-encoded metadata filters (strings produced by e2b 2.51.0's own encoder), states,
 * template, startedAfter, order, limits, and pagination that never skips or repeats. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "al_test.h"
#include "controlplane/list.h"

START_TEST(metadata_triple_encoding)
{
    struct cp_list_query q;
    struct al_error err = {0};
    /* new URLSearchParams({owner: encodeURIComponent("agent x")}) through openapi-fetch. */
    ck_assert_int_eq(cp_list_query_parse("metadata=owner%3Dagent%252520x", true, &q, &err), 0);
    ck_assert_ptr_nonnull(q.metadata);
    ck_assert_uint_eq(json_object_size(q.metadata), 1);
    ck_assert_str_eq(json_string_value(json_object_get(q.metadata, "owner")), "agent x");
    cp_list_query_free(&q);

    ck_assert_int_eq(
        cp_list_query_parse("metadata=%2525C3%2525BCn%2525C3%2525AF%3D%2525C3%2525A7%2525C3%2525B6d"
                            "%2525C3%2525A9%252526%25253D%252525%25252B%26a%252520b%3Dc",
                            true, &q, &err),
        0);
    ck_assert_uint_eq(json_object_size(q.metadata), 2);
    ck_assert_str_eq(json_string_value(json_object_get(q.metadata, "ünï")), "çödé&=%+");
    ck_assert_str_eq(json_string_value(json_object_get(q.metadata, "a b")), "c");
    cp_list_query_free(&q);

    /* An empty value is a filter for the empty string. */
    ck_assert_int_eq(cp_list_query_parse("metadata=k%3D", true, &q, &err), 0);
    ck_assert_str_eq(json_string_value(json_object_get(q.metadata, "k")), "");
    cp_list_query_free(&q);

    /* v1 takes metadata too. */
    ck_assert_int_eq(
        cp_list_query_parse("metadata=owner%3Dagent%252520x&state=paused", false, &q, &err), 0);
    ck_assert_ptr_nonnull(q.metadata);
    ck_assert(q.running && !q.paused); /* v1 lists running sandboxes only */
    ck_assert_uint_eq(q.limit, 0);
    cp_list_query_free(&q);
}
END_TEST

START_TEST(metadata_malformed)
{
    struct cp_list_query q;
    struct al_error err = {0};
    ck_assert_int_eq(cp_list_query_parse("metadata=owner", true, &q, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "key=value"));
    ck_assert_int_eq(cp_list_query_parse("metadata=%3Dv", true, &q, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "empty key"));
    ck_assert_int_eq(cp_list_query_parse("metadata=a%3D%25zz", true, &q, &err), -EINVAL);
    ck_assert_int_eq(cp_list_query_parse("metadata=%zz", true, &q, &err), -EINVAL);
    ck_assert_int_eq(cp_list_query_parse("metadata=a%3D%2500", true, &q, &err), -EINVAL);
    json_t *m = cp_list_parse_metadata("a=%", &err);
    ck_assert_ptr_null(m);
    /* Too many pairs. */
    char big[4096] = "";
    for (int i = 0; i < 70; i++) {
        char p[32];
        snprintf(p, sizeof p, "%sk%d=v", i ? "&" : "", i);
        strcat(big, p);
    }
    m = cp_list_parse_metadata(big, &err);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(err.code, -E2BIG);
}
END_TEST

START_TEST(other_parameters)
{
    struct cp_list_query q;
    struct al_error err = {0};
    ck_assert_int_eq(cp_list_query_parse("", true, &q, &err), 0);
    ck_assert(q.running && q.paused);
    ck_assert(!q.ascending);
    ck_assert_uint_eq(q.limit, CP_LIST_DEFAULT_LIMIT);
    cp_list_query_free(&q);

    ck_assert_int_eq(cp_list_query_parse("state=paused&order=asc&limit=5&template=base&"
                                         "startedAfter=2026-01-02T03%3A04%3A05.000Z&unknown=1",
                                         true, &q, &err),
                     0);
    ck_assert(!q.running && q.paused);
    ck_assert(q.ascending);
    ck_assert_uint_eq(q.limit, 5);
    ck_assert_str_eq(q.template_id, "base");
    ck_assert(q.has_started_after);
    ck_assert_uint_eq(q.started_after_ns, 1767323045000000000ull);
    cp_list_query_free(&q);

    /* Both spellings of several states (form explode=false and repeated). */
    ck_assert_int_eq(cp_list_query_parse("state=running%2Cpaused", true, &q, &err), 0);
    ck_assert(q.running && q.paused);
    cp_list_query_free(&q);
    ck_assert_int_eq(cp_list_query_parse("state=running,paused", true, &q, &err), 0);
    ck_assert(q.running && q.paused);
    cp_list_query_free(&q);
    ck_assert_int_eq(cp_list_query_parse("state=running&state=paused", true, &q, &err), 0);
    ck_assert(q.running && q.paused);
    cp_list_query_free(&q);

    ck_assert_int_eq(cp_list_query_parse("state=dead", true, &q, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "running, paused"));
    ck_assert_int_eq(cp_list_query_parse("limit=0", true, &q, &err), -EINVAL);
    ck_assert_int_eq(cp_list_query_parse("limit=101", true, &q, &err), -EINVAL);
    ck_assert_int_eq(cp_list_query_parse("limit=1x", true, &q, &err), -EINVAL);
    ck_assert_int_eq(cp_list_query_parse("order=up", true, &q, &err), -EINVAL);
    ck_assert_int_eq(cp_list_query_parse("startedAfter=yesterday", true, &q, &err), -EINVAL);
    ck_assert_int_eq(cp_list_query_parse("nextToken=garbage!", true, &q, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "x-next-token"));
}
END_TEST

START_TEST(token_roundtrip)
{
    char tok[128], id[64];
    uint64_t ns;
    cp_list_token_encode(1767323045123456789ull, "abc123def", tok, sizeof tok);
    ck_assert_int_eq(cp_list_token_decode(tok, &ns, id, sizeof id), 0);
    ck_assert_uint_eq(ns, 1767323045123456789ull);
    ck_assert_str_eq(id, "abc123def");
    ck_assert_int_eq(cp_list_token_decode("", &ns, id, sizeof id), -EINVAL);
    ck_assert_int_eq(cp_list_token_decode("MTIz", &ns, id, sizeof id), -EINVAL);     /* "123" */
    ck_assert_int_eq(cp_list_token_decode("OjEyMw", &ns, id, sizeof id), -EINVAL);   /* ":123" */
    ck_assert_int_eq(cp_list_token_decode("MTI6QUJD", &ns, id, sizeof id), -EINVAL); /* "12:ABC" */
}
END_TEST

#define N 37

struct world {
    struct cp_list_item items[N];
    char ids[N][16];
    json_t *md[N];
};

static void world_init(struct world *w)
{
    for (int i = 0; i < N; i++) {
        snprintf(w->ids[i], sizeof w->ids[i], "sb%02d", i);
        w->md[i] = json_pack("{s:s}", "team", i % 3 == 0 ? "red" : "blue");
        w->items[i] = (struct cp_list_item){
            .id = w->ids[i],
            .state = i % 5 == 0 ? CP_SB_PAUSED
                     : i == 7   ? CP_SB_CREATING
                                : CP_SB_RUNNING,
            /* Pairs share a start time, so the id breaks ties. */
            .started_ns = 1000 + (uint64_t)(i / 2),
            .template_id = i % 2 ? "base" : "code-interpreter-v1",
            .metadata = w->md[i],
        };
    }
}

static void world_free(struct world *w)
{
    for (int i = 0; i < N; i++)
        json_decref(w->md[i]);
}

/* Walks every page of a query and checks that the union is exactly the matching set, in
 * order, with no repeats. */
static void walk(const char *base, bool asc, int expect_total)
{
    struct world w;
    world_init(&w);
    char token[128] = "";
    int seen[N] = {0}, total = 0, pages = 0;
    uint64_t last_ns = asc ? 0 : UINT64_MAX;
    char last_id[16] = "";
    do {
        char qs[512];
        snprintf(qs, sizeof qs, "%s%s%s", base, token[0] ? "&nextToken=" : "", token);
        struct cp_list_query q;
        struct al_error err = {0};
        ck_assert_msg(cp_list_query_parse(qs, true, &q, &err) == 0, "%s: %s", qs, err.msg);
        struct cp_list_item items[N];
        memcpy(items, w.items, sizeof items);
        size_t n;
        cp_list_select(&q, items, N, &n, token, sizeof token);
        ck_assert_uint_le(n, q.limit);
        for (size_t i = 0; i < n; i++) {
            int idx = atoi(items[i].id + 2);
            ck_assert_int_eq(seen[idx], 0);
            seen[idx] = 1;
            ck_assert(cp_list_match(&q, &items[i]));
            int c = items[i].started_ns == last_ns ? (strcmp(items[i].id, last_id) > 0 ? 1 : -1)
                                                   : (items[i].started_ns > last_ns ? 1 : -1);
            if (total)
                ck_assert_msg(c == (asc ? 1 : -1), "%s: %s after %s", qs, items[i].id, last_id);
            last_ns = items[i].started_ns;
            snprintf(last_id, sizeof last_id, "%s", items[i].id);
            total++;
        }
        cp_list_query_free(&q);
        pages++;
        ck_assert_int_lt(pages, 100);
    } while (token[0]);
    ck_assert_int_eq(total, expect_total);
    world_free(&w);
}

START_TEST(pagination)
{
    /* 37 items: sb07 is being created (never listed); 8 paused (0,5,...,35). */
    walk("limit=5", false, 36);
    walk("limit=5&order=asc", true, 36);
    walk("limit=1&state=paused", false, 8);
    walk("limit=100", false, 36);
    walk("limit=4&state=running&order=asc", true, 28);
    /* team=red: i % 3 == 0 -> 13 items, minus none in creating (7 is blue). */
    walk("limit=3&metadata=team%3Dred", false, 13);
    walk("limit=2&template=base&order=asc", true, 17);
}
END_TEST

START_TEST(filters_match)
{
    struct world w;
    world_init(&w);
    struct cp_list_query q;
    struct al_error err = {0};
    ck_assert_int_eq(
        cp_list_query_parse("startedAfter=1970-01-01T00%3A00%3A00.000001010Z", true, &q, &err), 0);
    struct cp_list_item items[N];
    memcpy(items, w.items, sizeof items);
    size_t n;
    char tok[128];
    cp_list_select(&q, items, N, &n, tok, sizeof tok);
    /* started_ns >= 1010 means i/2 >= 10: i in 20..36 = 17 items. */
    ck_assert_uint_eq(n, 17);
    ck_assert_str_eq(tok, "");
    cp_list_query_free(&q);

    ck_assert_int_eq(cp_list_query_parse("metadata=team%3Dred%26x%3Dy", true, &q, &err), 0);
    memcpy(items, w.items, sizeof items);
    cp_list_select(&q, items, N, &n, tok, sizeof tok);
    ck_assert_uint_eq(n, 0);
    cp_list_query_free(&q);
    world_free(&w);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cp_list");
    TCase *t = tcase_create("list");
    tcase_add_test(t, metadata_triple_encoding);
    tcase_add_test(t, metadata_malformed);
    tcase_add_test(t, other_parameters);
    tcase_add_test(t, token_roundtrip);
    tcase_add_test(t, pagination);
    tcase_add_test(t, filters_match);
    suite_add_tcase(s, t);
    return s;
}

AL_SUITE_MAIN(suite)
