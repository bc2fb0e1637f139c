/* tests/fuzz/fuzz_json_dumpb: the compact serialiser al_json_dumpb (common/json.c) against
 * jansson's.
 *
 * The input is parsed by jansson (any top-level value, NULs allowed in strings); when it is
 * not JSON its raw bytes become a string and an object's key (the _nocheck setters), so
 * invalid UTF-8 reaches the serialiser too. For every value al_json_dumpb must give what
 * json.h promises: the bytes of json_dumpb(JSON_COMPACT | JSON_ENCODE_ANY), which jansson
 * parses back to an equal value (unless a key holds a NUL, which its parser refuses); 0
 * where a string or key is not valid UTF-8 or the nesting is deeper than
 * AL_JSON_DUMP_DEPTH; the whole length from a buffer too small, having written nothing past
 * it. The buffers are exact-size heap blocks (ASan sees a byte too far); the sizes tried:
 * exact, exact plus room for the word-at-a-time string path, and short ones (0, one taken
 * from the input's first byte, one less than exact). The value is checked alone and one
 * and two levels down. Any difference aborts, printing both texts. */
#include "common/json.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_FLAGS (JSON_COMPACT | JSON_ENCODE_ANY)

/* Prints up to 400 bytes of s, the unprintable ones as \xNN. */
static void fuzz__show(const char *label, const char *s, size_t n)
{
    fprintf(stderr, "  %s (%zu): ", label, n);
    for (size_t i = 0; s && i < n && i < 400; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\')
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fputc('\n', stderr);
}

static void fuzz__fail(const char *what, const char *want, size_t wn, const char *got, size_t gn)
{
    fprintf(stderr, "fuzz_json_dumpb: %s\n", what);
    fuzz__show("jansson", want, wn);
    fuzz__show("al     ", got, gn);
    abort();
}

/* Whether al_json_dumpb can serialise v: every string and key valid UTF-8, by jansson's
 * own check (json_stringn refuses the rest), and no deeper than AL_JSON_DUMP_DEPTH, counted
 * as json.c does (the top value at 0, a container's members one below it). jansson's
 * json_dumpb is no oracle for keys: it ignores the failure of a key's string and writes
 * {":true} for a key that is not valid UTF-8, where al_json_dumpb returns 0. */
static bool fuzz__utf8(const char *s, size_t n)
{
    json_t *t = json_stringn(s, n);
    json_decref(t);
    return t != NULL;
}

static bool fuzz__serialisable(const json_t *v, int depth, bool *nul_key)
{
    if (depth > AL_JSON_DUMP_DEPTH)
        return false;
    if (json_is_string(v))
        return fuzz__utf8(json_string_value(v), json_string_length(v));
    if (json_is_object(v)) {
        for (void *it = json_object_iter((json_t *)v); it;
             it = json_object_iter_next((json_t *)v, it)) {
            const char *k = json_object_iter_key(it);
            size_t kn = json_object_iter_key_len(it);
            if (memchr(k, '\0', kn))
                *nul_key = true;
            if (!fuzz__utf8(k, kn) ||
                !fuzz__serialisable(json_object_iter_value(it), depth + 1, nul_key))
                return false;
        }
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!fuzz__serialisable(json_array_get(v, i), depth + 1, nul_key))
                return false;
    }
    return true;
}

/* al_json_dumpb into an exact heap block of cap bytes; the result in *out (malloc'd). */
static size_t fuzz__al(const json_t *v, size_t cap, char **out)
{
    char *b = malloc(cap ? cap : 1);
    if (!b)
        abort();
    size_t n = al_json_dumpb(v, b, cap);
    *out = b;
    return n;
}

/* A buffer of cap < the text's length: the whole length is returned and nothing is written
 * past cap (what json.h promises; the contents below cap are scratch, as jansson's are). */
static void fuzz__short(const json_t *v, const char *want, size_t wn, size_t cap)
{
    char *a = malloc(cap + 16);
    if (!a)
        abort();
    memset(a, 0xa5, cap + 16);
    size_t na = al_json_dumpb(v, a, cap);
    if (na != wn)
        fuzz__fail("a short buffer did not return the whole length", want, wn, a, cap);
    for (size_t i = cap; i < cap + 16; i++)
        if ((unsigned char)a[i] != 0xa5)
            fuzz__fail("a short buffer was written past its size", want, wn, a, cap + 16);
    free(a);
}

static void fuzz__check(const json_t *v, uint8_t pick)
{
    size_t wn = json_dumpb(v, NULL, 0, FUZZ_FLAGS);
    char *want = NULL;
    if (wn) {
        want = malloc(wn);
        if (!want || json_dumpb(v, want, wn, FUZZ_FLAGS) != wn)
            abort();
    }
    bool nul_key = false;
    bool ok = fuzz__serialisable(v, 0, &nul_key);

    char *got;
    size_t gn = fuzz__al(v, wn, &got);
    if (!ok) {
        if (gn)
            fuzz__fail("a value with invalid UTF-8 or nested deeper than AL_JSON_DUMP_DEPTH "
                       "was serialised",
                       want, wn, got, gn);
        free(got);
        free(want);
        return;
    }
    if (!wn)
        fuzz__fail("jansson cannot serialise a valid value", want, wn, got, gn);
    if (gn != wn || memcmp(got, want, wn) != 0)
        fuzz__fail("differs from json_dumpb(JSON_COMPACT | JSON_ENCODE_ANY)", want, wn, got, gn);
    free(got);

    gn = fuzz__al(v, wn + 64, &got);
    if (gn != wn || memcmp(got, want, wn) != 0)
        fuzz__fail("differs from jansson with room to spare", want, wn, got, gn);
    /* (jansson's parser takes no NUL in a key, even with JSON_ALLOW_NUL: such a text is
     * checked by its bytes above only.) */
    if (!nul_key) {
        json_error_t je;
        json_t *back = json_loadb(got, gn, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!back || !json_equal(back, (json_t *)v))
            fuzz__fail(back ? "parses back to another value" : je.text, want, wn, got, gn);
        json_decref(back);
    }
    free(got);

    fuzz__short(v, want, wn, 0);
    fuzz__short(v, want, wn, (size_t)pick % wn);
    fuzz__short(v, want, wn, wn - 1);
    free(want);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    uint8_t pick = size ? data[0] : 0;
    json_error_t je;
    json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) {
        /* Not JSON: the raw bytes as a string, and as an object's key (NULs and invalid
         * UTF-8 included, which no parse yields). */
        v = json_stringn_nocheck((const char *)data, size);
        json_t *k = json_object();
        if (!v || !k || json_object_setn_nocheck(k, (const char *)data, size, json_true()))
            abort();
        fuzz__check(k, pick);
        json_decref(k);
    }
    fuzz__check(v, pick);
    /* The same value one level down, as an object member and an array element (the audit
     * writer's shape: scalars inside objects). */
    json_t *o = json_object();
    json_t *a = json_array();
    if (!o || !a || json_object_set(o, "k", v) || json_array_append(a, v) ||
        json_array_append(a, o))
        abort();
    fuzz__check(a, pick);
    json_decref(a);
    json_decref(o);
    json_decref(v);
    return 0;
}
