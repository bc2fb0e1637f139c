/* vault/vault_file: parser and writer of the vault file (format in vault_file.h), and the
 * catalog it decodes to. The parser takes untrusted bytes: every line and field is bounded,
 * unknown keys are errors, and nothing is returned unless the whole file verifies. */
#include "vault/vault_file.h"

#include "common/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- catalog ---------------------------------------------------------------------------------- */

void vault_version_clear(struct vault_version *v)
{
    free(v->ct);
    memset(v, 0, sizeof *v);
}

void vault_secret_clear(struct vault_secret *s)
{
    free(s->description);
    json_decref(s->metadata);
    for (size_t i = 0; i < s->n_hosts; i++)
        free(s->hosts[i]);
    free(s->hosts);
    for (size_t i = 0; i < s->n_versions; i++)
        vault_version_clear(&s->versions[i]);
    free(s->versions);
    free(s->history);
    memset(s, 0, sizeof *s);
}

void vault_catalog_free(struct vault_catalog *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        vault_secret_clear(&c->secrets[i]);
    free(c->secrets);
    free(c->tombs);
    memset(c, 0, sizeof *c);
}

const struct vault_secret *vault_catalog_find(const struct vault_catalog *c, const char *name)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int k = strcmp(c->secrets[mid].name, name);
        if (k == 0)
            return &c->secrets[mid];
        if (k < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

json_t *vault_secret_json(const struct vault_secret *s, bool with_history)
{
    json_t *hosts = json_array();
    for (size_t i = 0; i < s->n_hosts; i++)
        json_array_append_new(hosts, json_string(s->hosts[i]));
    json_t *vers = json_array();
    for (size_t i = 0; i < s->n_versions; i++)
        json_array_append_new(vers,
                              json_pack("{s:i,s:s,s:s,s:s}", "version", (int)s->versions[i].version,
                                        "created", s->versions[i].created, "by", s->versions[i].by,
                                        "secret_id", s->versions[i].secret_id));
    json_t *j =
        json_pack("{s:s,s:o,s:s,s:o,s:o,s:s,s:s,s:i,s:i,s:o,s:I}", "name", s->name, "id",
                  s->uid[0] ? json_string(s->uid) : json_null(), "description",
                  s->description ? s->description : "", "metadata",
                  s->metadata ? json_deep_copy(s->metadata) : json_object(), "bound_hosts", hosts,
                  "created", s->created, "updated", s->updated, "current_version", (int)s->current,
                  "keep", (int)s->keep, "versions", vers, "generation", (json_int_t)s->generation);
    if (j && with_history) {
        json_t *h = json_array();
        for (size_t i = 0; i < s->n_history; i++)
            json_array_append_new(h, json_pack("{s:s,s:s,s:i,s:s}", "time", s->history[i].time,
                                               "event", s->history[i].event, "version",
                                               (int)s->history[i].version, "by", s->history[i].by));
        json_object_set_new(j, "history", h);
    }
    return j;
}

/* ---- parsing helpers ------------------------------------------------------------------------------ */

struct file__line {
    const char *p;
    size_t len;   /* without '\n' */
    size_t start; /* offset in the file */
    uint64_t no;  /* 1-based */
};

/* Next complete line; false at the end. *partial is set when bytes remain without '\n'. */
static bool file__next(const char *data, size_t len, size_t *pos, uint64_t *no,
                       struct file__line *l, bool *partial)
{
    *partial = false;
    if (*pos >= len)
        return false;
    const char *nl = memchr(data + *pos, '\n', len - *pos);
    if (!nl) {
        *partial = true;
        return false;
    }
    l->p = data + *pos;
    l->len = (size_t)(nl - l->p);
    l->start = *pos;
    l->no = ++*no;
    *pos += l->len + 1;
    return true;
}

static bool file__hex(const char *s, unsigned char *out, size_t outlen)
{
    size_t bl = 0;
    return s && strlen(s) == outlen * 2 &&
           sodium_hex2bin(out, outlen, s, outlen * 2, NULL, &bl, NULL) == 0 && bl == outlen;
}

static bool file__str(const json_t *o, const char *k, size_t max, const char **out)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v) || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v))
        return false;
    *out = json_string_value(v);
    return true;
}

static bool file__int(const json_t *o, const char *k, int64_t min, int64_t max, int64_t *out)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return false;
    *out = json_integer_value(v);
    return true;
}

static bool file__keys(const json_t *o, const char *const *allowed)
{
    if (!json_is_object(o))
        return false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(k, *a) == 0;
        if (!ok)
            return false;
    }
    return true;
}

static bool file__time(const json_t *o, const char *k, char out[40])
{
    const char *s;
    if (!file__str(o, k, 39, &s))
        return false;
    snprintf(out, 40, "%s", s);
    return true;
}

/* "<letter> <64 hex> <json>" */
static int file__split(const struct file__line *l, char letter, unsigned char mac[32],
                       const char **json, size_t *jlen)
{
    if (l->len < 3 + 64 + 2 || l->p[0] != letter || l->p[1] != ' ' || l->p[66] != ' ')
        return -EINVAL;
    char hex[65];
    memcpy(hex, l->p + 2, 64);
    hex[64] = '\0';
    if (!file__hex(hex, mac, 32))
        return -EINVAL;
    *json = l->p + 67;
    *jlen = l->len - 67;
    return 0;
}

static void file__mac(const struct vault_keys *k, char letter, const char *json, size_t len,
                      unsigned char out[32])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, k->mac, sizeof k->mac, 32);
    unsigned char pre[2] = {(unsigned char)letter, ' '};
    crypto_generichash_update(&st, pre, 2);
    crypto_generichash_update(&st, (const unsigned char *)json, len);
    crypto_generichash_final(&st, out, 32);
}

/* ---- header ------------------------------------------------------------------------------------ */

int vault_file_header(const char *data, size_t len, struct vault_header *h, size_t *body_off,
                      struct al_error *err)
{
    memset(h, 0, sizeof *h);
    if (len == 0)
        return al_error_set(err, -EBADMSG, "the file is empty (truncated to zero bytes)");
    if (len > VAULT_FILE_MAX)
        return al_error_set(err, -EFBIG, "the file is larger than %u MiB: not a vault file",
                            VAULT_FILE_MAX >> 20);
    size_t pos = 0;
    uint64_t no = 0;
    struct file__line l;
    bool partial;
    if (!file__next(data, len, &pos, &no, &l, &partial))
        return al_error_set(err, -EBADMSG, "the file is truncated in its first line");
    if (l.len != strlen(VAULT_FILE_MAGIC) || memcmp(l.p, VAULT_FILE_MAGIC, l.len) != 0) {
        if (l.len > 14 && l.len < 40 && memcmp(l.p, "airlock-vault ", 14) == 0)
            return al_error_set(err, -EPROTONOSUPPORT,
                                "unsupported vault format '%.*s' (this airlock reads '%s'): "
                                "upgrade airlock",
                                (int)l.len, l.p, VAULT_FILE_MAGIC);
        return al_error_set(err, -EBADMSG, "line 1 is not '%s': not a vault file, or corrupted",
                            VAULT_FILE_MAGIC);
    }
    if (!file__next(data, len, &pos, &no, &l, &partial))
        return al_error_set(err, -EBADMSG, "the file is truncated after line 1 (no header)");
    unsigned char sum[32], want[32];
    const char *json;
    size_t jl;
    if (l.len > 4096 || file__split(&l, 'H', want, &json, &jl) != 0)
        return al_error_set(err, -EBADMSG, "line 2 (the header) is corrupted");
    crypto_generichash(sum, 32, (const unsigned char *)json, jl, NULL, 0);
    if (sodium_memcmp(sum, want, 32) != 0)
        return al_error_set(err, -EBADMSG,
                            "line 2 (the header) is corrupted: its checksum does not match");
    json_t *j = json_loadb(json, jl, JSON_REJECT_DUPLICATES, NULL);
    static const char *const hk[] = {"file_id", "created", "kdf", "key", NULL};
    static const char *const kk[] = {"type", "salt", "opslimit", "memlimit", NULL};
    static const char *const wk[] = {"nonce", "wrapped", NULL};
    const char *s = NULL, *type = NULL, *nonce = NULL, *wrapped = NULL;
    json_t *kdf = json_object_get(j, "kdf"), *key = json_object_get(j, "key");
    bool ok = j && file__keys(j, hk) && file__str(j, "file_id", 32, &s) &&
              file__hex(s, (unsigned char[16]){0}, 16) && file__time(j, "created", h->created) &&
              file__keys(kdf, kk) && file__str(kdf, "type", 16, &type) && file__keys(key, wk) &&
              file__str(key, "nonce", 48, &nonce) &&
              file__hex(nonce, h->wrap_nonce, sizeof h->wrap_nonce) &&
              file__str(key, "wrapped", 96, &wrapped) &&
              file__hex(wrapped, h->wrapped, sizeof h->wrapped);
    if (ok)
        snprintf(h->file_id, sizeof h->file_id, "%s", s);
    if (ok && strcmp(type, "keyfile") == 0) {
        h->kdf = VAULT_KDF_KEYFILE;
        ok = json_object_size(kdf) == 1;
    } else if (ok && strcmp(type, "argon2id") == 0) {
        int64_t ops = 0, mem = 0;
        const char *salt;
        h->kdf = VAULT_KDF_ARGON2ID;
        ok = file__str(kdf, "salt", 32, &salt) && file__hex(salt, h->salt, sizeof h->salt) &&
             file__int(kdf, "opslimit", 1, VAULT_KDF_OPS_MAX, &ops) &&
             file__int(kdf, "memlimit", (int64_t)VAULT_KDF_MEM_MIN, (int64_t)VAULT_KDF_MEM_MAX,
                       &mem);
        h->opslimit = (uint64_t)ops;
        h->memlimit = (uint64_t)mem;
    } else {
        ok = false;
    }
    json_decref(j);
    if (!ok)
        return al_error_set(err, -EBADMSG, "line 2 (the header) has invalid fields");
    *body_off = pos;
    return 0;
}

/* ---- entries ------------------------------------------------------------------------------------- */

static int file__secret(const json_t *j, struct vault_secret *s)
{
    static const char *const sk[] = {
        "name",       "id",      "description", "metadata", "bound_hosts", "created", "updated",
        "generation", "current", "keep",        "versions", "history",     NULL};
    static const char *const vk[] = {"version", "created", "by", "nonce", "ct", "secret_id", NULL};
    static const char *const ek[] = {"time", "event", "version", "by", NULL};
    memset(s, 0, sizeof *s);
    const char *name, *desc;
    int64_t gen, cur, keep;
    if (!file__keys(j, sk) || !file__str(j, "name", VAULT_NAME_MAX, &name) ||
        vault_name_check(name, NULL) != 0 || !file__str(j, "description", VAULT_DESC_MAX, &desc) ||
        !file__time(j, "created", s->created) || !file__time(j, "updated", s->updated) ||
        !file__int(j, "generation", 1, INT64_MAX, &gen) ||
        !file__int(j, "current", 1, UINT32_MAX, &cur) ||
        !file__int(j, "keep", 1, VAULT_KEEP_MAX, &keep))
        return -EINVAL;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->generation = (uint64_t)gen;
    s->current = (uint32_t)cur;
    s->keep = (uint32_t)keep;
    s->description = strdup(desc);
    if (!s->description)
        return -ENOMEM;
    /* Optional (secrets stored before they existed have neither). */
    json_t *uid = json_object_get(j, "id");
    if (uid) {
        const char *u;
        if (!file__str(j, "id", VAULT_UID_LEN, &u) || !vault_uid_valid(u))
            return -EINVAL;
        snprintf(s->uid, sizeof s->uid, "%s", u);
    }
    json_t *meta = json_object_get(j, "metadata");
    if (meta) {
        if (vault_metadata_check(meta, NULL))
            return -EINVAL;
        s->metadata = json_deep_copy(meta);
        if (!s->metadata)
            return -ENOMEM;
    }

    json_t *hosts = json_object_get(j, "bound_hosts");
    if (!json_is_array(hosts) || json_array_size(hosts) > VAULT_HOSTS_MAX)
        return -EINVAL;
    if (json_array_size(hosts)) {
        s->hosts = calloc(json_array_size(hosts), sizeof *s->hosts);
        if (!s->hosts)
            return -ENOMEM;
    }
    for (size_t i = 0; i < json_array_size(hosts); i++) {
        json_t *v = json_array_get(hosts, i);
        if (!json_is_string(v) || json_string_length(v) > VAULT_HOST_MAX + 2)
            return -EINVAL;
        char buf[VAULT_HOST_MAX + 3];
        snprintf(buf, sizeof buf, "%s", json_string_value(v));
        if (vault_host_check(buf, false, NULL) != 0 || strcmp(buf, json_string_value(v)) != 0)
            return -EINVAL;
        s->hosts[i] = strdup(buf);
        if (!s->hosts[i])
            return -ENOMEM;
        s->n_hosts++;
    }

    json_t *vers = json_object_get(j, "versions");
    size_t nv = json_array_size(vers);
    if (!json_is_array(vers) || nv == 0 || nv > (size_t)keep)
        return -EINVAL;
    s->versions = calloc(nv, sizeof *s->versions);
    if (!s->versions)
        return -ENOMEM;
    for (size_t i = 0; i < nv; i++) {
        json_t *v = json_array_get(vers, i);
        struct vault_version *ver = &s->versions[i];
        const char *nonce, *ct, *sid, *by;
        int64_t vn;
        if (!file__keys(v, vk) || !file__int(v, "version", 1, UINT32_MAX, &vn) ||
            !file__time(v, "created", ver->created) || !file__str(v, "by", 63, &by) ||
            !file__str(v, "nonce", 48, &nonce) || !file__hex(nonce, ver->nonce, 24) ||
            !file__str(v, "secret_id", VAULT_SECRET_ID_LEN, &sid) ||
            strlen(sid) != VAULT_SECRET_ID_LEN || strncmp(sid, "b2k:", 4) != 0 ||
            !file__str(v, "ct", 4 * ((VAULT_VALUE_MAX + 16 + 2) / 3) + 4, &ct))
            return -EINVAL;
        /* newest first, strictly decreasing, the first is the current one */
        if ((i == 0 && vn != cur) || (i > 0 && (uint64_t)vn >= s->versions[i - 1].version))
            return -EINVAL;
        ver->version = (uint32_t)vn;
        snprintf(ver->by, sizeof ver->by, "%s", by);
        snprintf(ver->secret_id, sizeof ver->secret_id, "%s", sid);
        size_t cl = strlen(ct);
        ver->ct = malloc(cl ? cl : 1);
        if (!ver->ct)
            return -ENOMEM;
        s->n_versions++;
        if (sodium_base642bin(ver->ct, cl, ct, cl, NULL, &ver->ct_len, NULL,
                              sodium_base64_VARIANT_ORIGINAL) != 0 ||
            ver->ct_len < crypto_aead_xchacha20poly1305_ietf_ABYTES ||
            ver->ct_len > VAULT_VALUE_MAX + crypto_aead_xchacha20poly1305_ietf_ABYTES)
            return -EINVAL;
    }

    json_t *hist = json_object_get(j, "history");
    size_t nh = json_array_size(hist);
    if (!json_is_array(hist) || nh > VAULT_HISTORY_MAX)
        return -EINVAL;
    if (nh) {
        s->history = calloc(nh, sizeof *s->history);
        if (!s->history)
            return -ENOMEM;
    }
    for (size_t i = 0; i < nh; i++) {
        json_t *e = json_array_get(hist, i);
        struct vault_event *ev = &s->history[i];
        const char *event, *by;
        int64_t vn;
        if (!file__keys(e, ek) || !file__time(e, "time", ev->time) ||
            !file__str(e, "event", 15, &event) || !file__int(e, "version", 0, UINT32_MAX, &vn) ||
            !file__str(e, "by", 63, &by))
            return -EINVAL;
        if (strcmp(event, "create") != 0 && strcmp(event, "rotate") != 0 &&
            strcmp(event, "update") != 0)
            return -EINVAL;
        snprintf(ev->event, sizeof ev->event, "%s", event);
        snprintf(ev->by, sizeof ev->by, "%s", by);
        ev->version = (uint32_t)vn;
        s->n_history++;
    }
    return 0;
}

static int file__tomb(const json_t *j, struct vault_tombstone *t)
{
    static const char *const tk[] = {"name", "generation", "time", NULL};
    const char *name;
    int64_t gen;
    if (!file__keys(j, tk) || !file__str(j, "name", VAULT_NAME_MAX, &name) ||
        vault_name_check(name, NULL) != 0 || !file__int(j, "generation", 1, INT64_MAX, &gen) ||
        !file__time(j, "time", t->time))
        return -EINVAL;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->generation = (uint64_t)gen;
    return 0;
}

static int file__grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    void *na = realloc(*arr, nc * elem);
    if (!na)
        return -ENOMEM;
    *arr = na;
    *cap = nc;
    return 0;
}

int vault_file_body(const char *data, size_t len, size_t body_off, const struct vault_keys *k,
                    struct vault_catalog *out, struct al_error *err)
{
    struct vault_catalog c = {0};
    size_t cap_s = 0, cap_t = 0;
    size_t pos = body_off;
    uint64_t no = 2;
    struct file__line l;
    bool partial = false, have_trailer = false;
    int rc = 0;
    json_t *j = NULL;
    while (file__next(data, len, &pos, &no, &l, &partial)) {
        if (have_trailer) {
            rc = al_error_set(err, -EBADMSG,
                              "line %" PRIu64 " comes after the trailer: something was appended "
                              "to the file",
                              l.no);
            goto fail;
        }
        if (l.len > VAULT_LINE_MAX) {
            rc = al_error_set(err, -EBADMSG, "line %" PRIu64 " is too long (%zu bytes)", l.no,
                              l.len);
            goto fail;
        }
        char letter = l.len ? l.p[0] : '?';
        unsigned char want[32], got[32];
        const char *json;
        size_t jl;
        if ((letter != 'S' && letter != 'D' && letter != 'T') ||
            file__split(&l, letter, want, &json, &jl) != 0) {
            rc = al_error_set(err, -EBADMSG, "line %" PRIu64 " is not a vault entry", l.no);
            goto fail;
        }
        j = json_loadb(json, jl, JSON_REJECT_DUPLICATES, NULL);
        if (!j) {
            rc = al_error_set(err, -EBADMSG, "line %" PRIu64 " is not valid JSON", l.no);
            goto fail;
        }
        if (letter == 'S') {
            if (c.n >= VAULT_SECRETS_MAX ||
                file__grow((void **)&c.secrets, &cap_s, c.n, sizeof *c.secrets)) {
                rc = al_error_set(err, -E2BIG, "too many secrets (at most %d)", VAULT_SECRETS_MAX);
                goto fail;
            }
            struct vault_secret *s = &c.secrets[c.n];
            int k2 = file__secret(j, s);
            c.n++; /* so that a partly parsed secret is freed on failure */
            const char *nm = json_string_value(json_object_get(j, "name"));
            bool show = nm && vault_name_check(nm, NULL) == 0;
            if (k2) {
                rc = al_error_set(err, k2 == -ENOMEM ? -ENOMEM : -EBADMSG,
                                  "line %" PRIu64 "%s%s%s has invalid fields", l.no,
                                  show ? " (secret \"" : "", show ? nm : "", show ? "\")" : "");
                goto fail;
            }
            file__mac(k, 'S', json, jl, got);
            if (sodium_memcmp(got, want, 32) != 0) {
                rc = al_error_set(err, -EBADMSG,
                                  "line %" PRIu64 " (secret \"%s\") fails its integrity check: "
                                  "it was modified",
                                  l.no, s->name);
                goto fail;
            }
            if (c.n > 1 && strcmp(c.secrets[c.n - 2].name, s->name) >= 0) {
                rc = al_error_set(err, -EBADMSG,
                                  "line %" PRIu64 " (secret \"%s\") is out of order or "
                                  "duplicated: entries were moved",
                                  l.no, s->name);
                goto fail;
            }
        } else if (letter == 'D') {
            if (c.n_tombs >= VAULT_TOMBSTONES_MAX ||
                file__grow((void **)&c.tombs, &cap_t, c.n_tombs, sizeof *c.tombs)) {
                rc = al_error_set(err, -EBADMSG, "too many deletion records");
                goto fail;
            }
            struct vault_tombstone *t = &c.tombs[c.n_tombs];
            if (file__tomb(j, t) != 0) {
                rc = al_error_set(err, -EBADMSG,
                                  "line %" PRIu64 " (a deletion record) has "
                                  "invalid fields",
                                  l.no);
                goto fail;
            }
            file__mac(k, 'D', json, jl, got);
            if (sodium_memcmp(got, want, 32) != 0) {
                rc = al_error_set(err, -EBADMSG,
                                  "line %" PRIu64 " (deletion of \"%s\") fails its integrity "
                                  "check: it was modified",
                                  l.no, t->name);
                goto fail;
            }
            if (c.n_tombs > 0 && c.tombs[c.n_tombs - 1].generation > t->generation) {
                rc = al_error_set(err, -EBADMSG, "line %" PRIu64 " is out of order", l.no);
                goto fail;
            }
            c.n_tombs++;
        } else {
            static const char *const tk[] = {"generation",   "secrets", "tombstones",
                                             "tomb_horizon", "written", NULL};
            int64_t gen, ns, nt, hz;
            char written[40];
            if (!file__keys(j, tk) || !file__int(j, "generation", 0, INT64_MAX, &gen) ||
                !file__int(j, "secrets", 0, VAULT_SECRETS_MAX, &ns) ||
                !file__int(j, "tombstones", 0, VAULT_TOMBSTONES_MAX, &nt) ||
                !file__int(j, "tomb_horizon", 0, INT64_MAX, &hz) ||
                !file__time(j, "written", written)) {
                rc = al_error_set(err, -EBADMSG,
                                  "line %" PRIu64 " (the trailer) has invalid "
                                  "fields",
                                  l.no);
                goto fail;
            }
            crypto_generichash_state st;
            crypto_generichash_init(&st, k->mac, sizeof k->mac, 32);
            crypto_generichash_update(&st, (const unsigned char *)data, l.start);
            crypto_generichash_update(&st, (const unsigned char *)"T ", 2);
            crypto_generichash_update(&st, (const unsigned char *)json, jl);
            crypto_generichash_final(&st, got, 32);
            if (sodium_memcmp(got, want, 32) != 0) {
                rc = al_error_set(err, -EBADMSG,
                                  "the trailer (line %" PRIu64 ") does not match the file: "
                                  "entries were added, removed or reordered",
                                  l.no);
                goto fail;
            }
            if ((size_t)ns != c.n || (size_t)nt != c.n_tombs) {
                rc = al_error_set(err, -EBADMSG,
                                  "the trailer's counts do not match the "
                                  "entries");
                goto fail;
            }
            c.generation = (uint64_t)gen;
            c.tomb_horizon = (uint64_t)hz;
            have_trailer = true;
        }
        json_decref(j);
        j = NULL;
    }
    if (!have_trailer) {
        rc = al_error_set(err, -EBADMSG,
                          "the file is truncated: it ends %s line %" PRIu64 " without its "
                          "trailer",
                          partial ? "in the middle of the line after" : "after", no);
        goto fail;
    }
    if (partial) {
        rc = al_error_set(err, -EBADMSG, "bytes after the trailer: something was appended");
        goto fail;
    }
    for (size_t i = 0; i < c.n; i++) {
        if (c.secrets[i].generation > c.generation) {
            rc = al_error_set(err, -EBADMSG, "secret \"%s\" is newer than the file",
                              c.secrets[i].name);
            goto fail;
        }
    }
    *out = c;
    return 0;
fail:
    json_decref(j);
    vault_catalog_free(&c);
    return rc;
}

/* ---- writer ------------------------------------------------------------------------------------ */

static int file__append_line(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 4096;
        while (nc < *len + n + 1)
            nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb)
            return -ENOMEM;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int file__entry(char **buf, size_t *len, size_t *cap, const struct vault_keys *k,
                       char letter, json_t *j)
{
    char *js = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!js)
        return -ENOMEM;
    size_t jl = strlen(js);
    unsigned char mac[32];
    if (letter == 'H')
        crypto_generichash(mac, 32, (const unsigned char *)js, jl, NULL, 0);
    else
        file__mac(k, letter, js, jl, mac);
    char pre[70];
    pre[0] = letter;
    pre[1] = ' ';
    sodium_bin2hex(pre + 2, 65, mac, 32);
    pre[66] = ' ';
    int rc = file__append_line(buf, len, cap, pre, 67);
    if (rc == 0)
        rc = file__append_line(buf, len, cap, js, jl);
    if (rc == 0)
        rc = file__append_line(buf, len, cap, "\n", 1);
    free(js);
    return rc;
}

static json_t *file__secret_json(const struct vault_secret *s)
{
    json_t *hosts = json_array();
    for (size_t i = 0; i < s->n_hosts; i++)
        json_array_append_new(hosts, json_string(s->hosts[i]));
    json_t *vers = json_array();
    for (size_t i = 0; i < s->n_versions; i++) {
        const struct vault_version *v = &s->versions[i];
        char nonce[49];
        sodium_bin2hex(nonce, sizeof nonce, v->nonce, sizeof v->nonce);
        size_t bl = sodium_base64_ENCODED_LEN(v->ct_len, sodium_base64_VARIANT_ORIGINAL);
        char *b64 = malloc(bl);
        if (!b64) {
            json_decref(hosts);
            json_decref(vers);
            return NULL;
        }
        sodium_bin2base64(b64, bl, v->ct, v->ct_len, sodium_base64_VARIANT_ORIGINAL);
        json_array_append_new(vers,
                              json_pack("{s:I,s:s,s:s,s:s,s:s,s:s}", "version",
                                        (json_int_t)v->version, "created", v->created, "by", v->by,
                                        "nonce", nonce, "ct", b64, "secret_id", v->secret_id));
        free(b64);
    }
    json_t *hist = json_array();
    for (size_t i = 0; i < s->n_history; i++)
        json_array_append_new(hist,
                              json_pack("{s:s,s:s,s:I,s:s}", "time", s->history[i].time, "event",
                                        s->history[i].event, "version",
                                        (json_int_t)s->history[i].version, "by", s->history[i].by));
    json_t *o = json_pack("{s:s,s:s,s:o,s:s,s:s,s:I,s:I,s:I,s:o,s:o}", "name", s->name,
                          "description", s->description ? s->description : "", "bound_hosts", hosts,
                          "created", s->created, "updated", s->updated, "generation",
                          (json_int_t)s->generation, "current", (json_int_t)s->current, "keep",
                          (json_int_t)s->keep, "versions", vers, "history", hist);
    if (o && s->uid[0] && json_object_set_new(o, "id", json_string(s->uid))) {
        json_decref(o);
        return NULL;
    }
    if (o && s->metadata && json_object_size(s->metadata) &&
        json_object_set_new(o, "metadata", json_deep_copy(s->metadata))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int vault_file_write(const struct vault_header *h, const struct vault_keys *k,
                     const struct vault_catalog *c, const char *written, char **out, size_t *olen)
{
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc =
        file__append_line(&buf, &len, &cap, VAULT_FILE_MAGIC "\n", strlen(VAULT_FILE_MAGIC) + 1);
    char nonce[49], wrapped[97], salt[33];
    sodium_bin2hex(nonce, sizeof nonce, h->wrap_nonce, sizeof h->wrap_nonce);
    sodium_bin2hex(wrapped, sizeof wrapped, h->wrapped, sizeof h->wrapped);
    sodium_bin2hex(salt, sizeof salt, h->salt, sizeof h->salt);
    json_t *kdf = h->kdf == VAULT_KDF_ARGON2ID
                      ? json_pack("{s:s,s:s,s:I,s:I}", "type", "argon2id", "salt", salt, "opslimit",
                                  (json_int_t)h->opslimit, "memlimit", (json_int_t)h->memlimit)
                      : json_pack("{s:s}", "type", "keyfile");
    if (rc == 0)
        rc = file__entry(&buf, &len, &cap, k, 'H',
                         json_pack("{s:s,s:s,s:o,s:{s:s,s:s}}", "file_id", h->file_id, "created",
                                   h->created, "kdf", kdf, "key", "nonce", nonce, "wrapped",
                                   wrapped));
    for (size_t i = 0; rc == 0 && i < c->n; i++) {
        json_t *j = file__secret_json(&c->secrets[i]);
        rc = j ? file__entry(&buf, &len, &cap, k, 'S', j) : -ENOMEM;
    }
    for (size_t i = 0; rc == 0 && i < c->n_tombs; i++)
        rc = file__entry(&buf, &len, &cap, k, 'D',
                         json_pack("{s:s,s:I,s:s}", "name", c->tombs[i].name, "generation",
                                   (json_int_t)c->tombs[i].generation, "time", c->tombs[i].time));
    if (rc == 0) {
        json_t *t = json_pack("{s:I,s:I,s:I,s:I,s:s}", "generation", (json_int_t)c->generation,
                              "secrets", (json_int_t)c->n, "tombstones", (json_int_t)c->n_tombs,
                              "tomb_horizon", (json_int_t)c->tomb_horizon, "written", written);
        char *js = t ? json_dumps(t, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(t);
        if (!js) {
            rc = -ENOMEM;
        } else {
            size_t jl = strlen(js);
            unsigned char mac[32];
            crypto_generichash_state st;
            crypto_generichash_init(&st, k->mac, sizeof k->mac, 32);
            crypto_generichash_update(&st, (const unsigned char *)buf, len);
            crypto_generichash_update(&st, (const unsigned char *)"T ", 2);
            crypto_generichash_update(&st, (const unsigned char *)js, jl);
            crypto_generichash_final(&st, mac, 32);
            char pre[70] = "T ";
            sodium_bin2hex(pre + 2, 65, mac, 32);
            pre[66] = ' ';
            rc = file__append_line(&buf, &len, &cap, pre, 67);
            if (rc == 0)
                rc = file__append_line(&buf, &len, &cap, js, jl);
            if (rc == 0)
                rc = file__append_line(&buf, &len, &cap, "\n", 1);
            free(js);
        }
    }
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *olen = len;
    return 0;
}
