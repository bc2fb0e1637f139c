/* controlplane/list: see list.h. */
#include "list.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/percent.h"
#include "common/util.h"

#define LIST_PARAM_MAX 8192

json_t *cp_list_parse_metadata(const char *value, struct al_error *err)
{
    /* Second decoding: the parameter was itself a URL-encoded query ("k=v&k2=v2"). */
    size_t vl = strlen(value);
    char *once = malloc(vl + 1);
    if (!once) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    if (al_percent_decode(value, vl, once, vl + 1, AL_PERCENT_PLUS_SPACE) < 0) {
        free(once);
        al_error_set(err, -EINVAL,
                     "metadata filter: malformed percent-encoding; send "
                     "metadata=<url-encoded \"key=value&key2=value2\"> with each key and value "
                     "url-encoded");
        return NULL;
    }
    json_t *obj = json_object();
    char *p = once;
    size_t count = 0;
    while (*p) {
        char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (n) {
            char *eq = memchr(p, '=', n);
            if (!eq) {
                al_error_set(err, -EINVAL,
                             "metadata filter: \"%.*s\" has no '=': each filter "
                             "is key=value",
                             (int)(n > 64 ? 64 : n), p);
                goto fail;
            }
            if (++count > CP_LIST_MAX_FILTERS) {
                al_error_set(err, -E2BIG, "metadata filter: at most %d key=value pairs",
                             CP_LIST_MAX_FILTERS);
                goto fail;
            }
            size_t kl = (size_t)(eq - p), vlen = n - kl - 1;
            char *k = malloc(kl + 1), *v = malloc(vlen + 1);
            /* Third decoding: each key and value was url-encoded by the SDK. */
            ssize_t rk = k ? al_percent_decode(p, kl, k, kl + 1, AL_PERCENT_PLUS_SPACE) : -ENOMEM;
            ssize_t rv =
                v ? al_percent_decode(eq + 1, vlen, v, vlen + 1, AL_PERCENT_PLUS_SPACE) : -ENOMEM;
            if (rk < 0 || rv < 0 || rk == 0) {
                free(k);
                free(v);
                al_error_set(err, -EINVAL,
                             rk == 0 ? "metadata filter: an empty key"
                                     : "metadata filter: malformed percent-encoding "
                                       "in a key or value");
                goto fail;
            }
            json_object_set_new(obj, k, json_string(v));
            free(k);
            free(v);
        }
        if (!amp)
            break;
        p = amp + 1;
    }
    free(once);
    return obj;
fail:
    free(once);
    json_decref(obj);
    return NULL;
}

void cp_list_token_encode(uint64_t started_ns, const char *id, char *out, size_t len)
{
    char raw[128];
    int n = snprintf(raw, sizeof raw, "%llu:%s", (unsigned long long)started_ns, id);
    if (n < 0 || (size_t)n >= sizeof raw ||
        len < sodium_base64_ENCODED_LEN((size_t)n, sodium_base64_VARIANT_URLSAFE_NO_PADDING)) {
        if (len)
            out[0] = '\0';
        return;
    }
    sodium_bin2base64(out, len, (const unsigned char *)raw, (size_t)n,
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

int cp_list_token_decode(const char *tok, uint64_t *started_ns, char *id, size_t idlen)
{
    unsigned char raw[128];
    size_t n = 0;
    if (strlen(tok) > 160 || sodium_base642bin(raw, sizeof raw - 1, tok, strlen(tok), NULL, &n,
                                               NULL, sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0)
        return -EINVAL;
    raw[n] = '\0';
    char *colon = strchr((char *)raw, ':');
    if (!colon || colon == (char *)raw)
        return -EINVAL;
    *colon = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull((char *)raw, &end, 10);
    if (errno || *end)
        return -EINVAL;
    const char *i = colon + 1;
    if (!*i || strlen(i) >= idlen)
        return -EINVAL;
    for (const char *c = i; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
            return -EINVAL;
    }
    *started_ns = v;
    snprintf(id, idlen, "%s", i);
    return 0;
}

static int list__states(const char *v, struct cp_list_query *q, struct al_error *err)
{
    const char *p = v;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n == 7 && memcmp(p, "running", 7) == 0)
            q->running = true;
        else if (n == 6 && memcmp(p, "paused", 6) == 0)
            q->paused = true;
        else
            return al_error_set(err, -EINVAL,
                                "state: \"%.*s\" is not a sandbox state (use "
                                "running, paused, or both: state=running,paused)",
                                (int)(n > 32 ? 32 : n), p);
        if (!c)
            return 0;
        p = c + 1;
    }
}

int cp_list_query_parse(const char *query, bool v2, struct cp_list_query *q, struct al_error *err)
{
    memset(q, 0, sizeof *q);
    q->limit = v2 ? CP_LIST_DEFAULT_LIMIT : 0;
    bool state_given = false;
    int rc = 0;
    char *val = malloc(LIST_PARAM_MAX);
    if (!val)
        return al_error_set(err, -ENOMEM, "out of memory");
    const char *p = query ? query : "";
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        size_t kl = eq ? (size_t)(eq - p) : n;
        char key[32];
        if (kl && kl < sizeof key &&
            al_percent_decode(p, kl, key, sizeof key, AL_PERCENT_PLUS_SPACE) > 0) {
            const char *vs = eq ? eq + 1 : p + n;
            size_t vl = eq ? n - kl - 1 : 0;
            ssize_t r = al_percent_decode(vs, vl, val, LIST_PARAM_MAX, AL_PERCENT_PLUS_SPACE);
            if (r < 0) {
                rc = al_error_set(err, -EINVAL, "query parameter %s: %s", key,
                                  r == -E2BIG ? "too long" : "malformed percent-encoding");
                goto out;
            }
            if (strcmp(key, "metadata") == 0) {
                if (*val) {
                    json_t *m = cp_list_parse_metadata(val, err);
                    if (!m) {
                        rc = -EINVAL;
                        goto out;
                    }
                    if (!q->metadata) {
                        q->metadata = m;
                    } else {
                        json_object_update(q->metadata, m);
                        json_decref(m);
                    }
                }
            } else if (!v2) {
                /* v1 takes only metadata. */
            } else if (strcmp(key, "state") == 0) {
                if (*val) {
                    if ((rc = list__states(val, q, err)))
                        goto out;
                    state_given = true;
                }
            } else if (strcmp(key, "template") == 0) {
                if (strlen(val) >= sizeof q->template_id) {
                    rc = al_error_set(err, -EINVAL, "template: longer than %zu bytes",
                                      sizeof q->template_id - 1);
                    goto out;
                }
                snprintf(q->template_id, sizeof q->template_id, "%s", val);
            } else if (strcmp(key, "startedAfter") == 0) {
                if (*val) {
                    if (al_time_parse_rfc3339(val, &q->started_after_ns)) {
                        rc = al_error_set(err, -EINVAL,
                                          "startedAfter: \"%.64s\" is not an RFC "
                                          "3339 time (e.g. 2026-01-02T03:04:05Z)",
                                          val);
                        goto out;
                    }
                    q->has_started_after = true;
                }
            } else if (strcmp(key, "order") == 0) {
                if (strcmp(val, "asc") == 0)
                    q->ascending = true;
                else if (strcmp(val, "desc") == 0 || !*val)
                    q->ascending = false;
                else {
                    rc = al_error_set(err, -EINVAL, "order: \"%.32s\" must be asc or desc", val);
                    goto out;
                }
            } else if (strcmp(key, "limit") == 0) {
                char *end;
                errno = 0;
                long l = strtol(val, &end, 10);
                if (!*val || *end || errno || l < 1 || l > CP_LIST_MAX_LIMIT) {
                    rc = al_error_set(err, -EINVAL,
                                      "limit: \"%.32s\" must be an integer from 1 "
                                      "to %d",
                                      val, CP_LIST_MAX_LIMIT);
                    goto out;
                }
                q->limit = (size_t)l;
            } else if (strcmp(key, "nextToken") == 0) {
                if (*val) {
                    if (cp_list_token_decode(val, &q->cursor_started_ns, q->cursor_id,
                                             sizeof q->cursor_id)) {
                        rc = al_error_set(err, -EINVAL,
                                          "nextToken: not a token this server "
                                          "issued (pass the x-next-token header of the "
                                          "previous page unchanged)");
                        goto out;
                    }
                    q->has_cursor = true;
                }
            }
        }
        if (!amp)
            break;
        p = amp + 1;
    }
    if (!state_given) {
        q->running = true;
        q->paused = v2;
    }
out:
    free(val);
    if (rc)
        cp_list_query_free(q);
    return rc;
}

void cp_list_query_free(struct cp_list_query *q)
{
    json_decref(q->metadata);
    q->metadata = NULL;
}

bool cp_list_match(const struct cp_list_query *q, const struct cp_list_item *it)
{
    if (it->state == CP_SB_RUNNING) {
        if (!q->running)
            return false;
    } else if (it->state == CP_SB_PAUSED) {
        if (!q->paused)
            return false;
    } else {
        return false; /* creating / stopping: not listed */
    }
    if (q->has_started_after && it->started_ns < q->started_after_ns)
        return false;
    if (q->template_id[0] && strcmp(q->template_id, it->template_id) != 0)
        return false;
    if (q->metadata) {
        const char *k;
        json_t *want;
        json_object_foreach((json_t *)q->metadata, k, want)
        {
            json_t *have = it->metadata ? json_object_get(it->metadata, k) : NULL;
            if (!have || !json_is_string(have) ||
                strcmp(json_string_value(have), json_string_value(want)) != 0)
                return false;
        }
    }
    return true;
}

/* Order: by start time, then id (a total order, so pages never skip or repeat). */
static int list__cmp_key(uint64_t as, const char *aid, uint64_t bs, const char *bid)
{
    if (as != bs)
        return as < bs ? -1 : 1;
    return strcmp(aid, bid);
}

static int list__cmp_asc(const void *a, const void *b)
{
    const struct cp_list_item *x = a, *y = b;
    return list__cmp_key(x->started_ns, x->id, y->started_ns, y->id);
}

static int list__cmp_desc(const void *a, const void *b)
{
    return -list__cmp_asc(a, b);
}

void cp_list_select(const struct cp_list_query *q, struct cp_list_item *items, size_t n,
                    size_t *n_out, char *next_token, size_t next_token_len)
{
    if (next_token_len)
        next_token[0] = '\0';
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!cp_list_match(q, &items[i]))
            continue;
        if (q->has_cursor) {
            int c =
                list__cmp_key(items[i].started_ns, items[i].id, q->cursor_started_ns, q->cursor_id);
            /* The cursor names the last item of the previous page. */
            if (q->ascending ? c <= 0 : c >= 0)
                continue;
        }
        items[k++] = items[i];
    }
    qsort(items, k, sizeof *items, q->ascending ? list__cmp_asc : list__cmp_desc);
    if (q->limit && k > q->limit) {
        k = q->limit;
        cp_list_token_encode(items[k - 1].started_ns, items[k - 1].id, next_token, next_token_len);
    }
    *n_out = k;
}
