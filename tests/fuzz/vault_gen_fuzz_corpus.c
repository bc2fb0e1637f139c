/* tests/fuzz/vault_gen_fuzz_corpus: writes the seed corpora of fuzz_vault_file and
 * fuzz_auditlog_verify with the fixed test keys of fuzz_keys.h (so that seeds verify and mutations
 * go deep).
 *
 *   vault_gen_fuzz_corpus tests/fuzz/corpus/fuzz_vault_file tests/fuzz/corpus/fuzz_auditlog_verify
 *
 * Run it again (and commit the result) when either format changes.
 */
#include "common/auditlog.h"
#include "common/util.h"
#include "fuzz_keys.h"
#include "vault/vault_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv);

static void die(const char *what)
{
    fprintf(stderr, "vault_gen_fuzz_corpus: %s\n", what);
    exit(1);
}

static void write_file(const char *dir, const char *name, const char *data, size_t len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f || fwrite(data, 1, len, f) != len)
        die(p);
    fclose(f);
}

static void add_secret(struct vault_catalog *c, const struct vault_keys *k, const char *file_id,
                       const char *name, int versions, const char *host)
{
    c->secrets = realloc(c->secrets, (c->n + 1) * sizeof *c->secrets);
    struct vault_secret *s = &c->secrets[c->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->description = strdup("seed secret");
    if (host) {
        s->hosts = calloc(1, sizeof *s->hosts);
        s->hosts[0] = strdup(host);
        s->n_hosts = 1;
    }
    snprintf(s->created, sizeof s->created, "2026-01-01T00:00:00.000Z");
    snprintf(s->updated, sizeof s->updated, "2026-01-02T00:00:00.000Z");
    s->keep = 3;
    s->versions = calloc((size_t)versions, sizeof *s->versions);
    s->history = calloc((size_t)versions, sizeof *s->history);
    unsigned char sidkey[32] = {7};
    for (int i = 0; i < versions; i++) {
        struct vault_version *v = &s->versions[i];
        v->version = (uint32_t)(versions - i);
        snprintf(v->created, sizeof v->created, "2026-01-0%dT00:00:00.000Z", versions - i);
        snprintf(v->by, sizeof v->by, "uid 0 (root)");
        char val[64];
        snprintf(val, sizeof val, "seed-value-%s-%u", name, v->version);
        struct vault_value vv;
        vault_value_set(&vv, val, strlen(val));
        vault_secret_id(sidkey, vv.data, vv.len, v->secret_id);
        if (vault_value_seal(k, file_id, name, &vv, v) != 0)
            die("seal");
        vault_value_free(&vv);
        s->n_versions++;
        struct vault_event *e = &s->history[i];
        snprintf(e->time, sizeof e->time, "%s", v->created);
        snprintf(e->event, sizeof e->event, "%s", i == versions - 1 ? "create" : "rotate");
        e->version = (uint32_t)(i + 1);
        snprintf(e->by, sizeof e->by, "uid 0 (root)");
        s->n_history++;
    }
    s->current = (uint32_t)versions;
    s->generation = ++c->generation;
}

static void vault_seed(const char *dir, const char *name, bool argon, int nsecrets, bool tombstone)
{
    struct vault_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.file_id, sizeof h.file_id, "0123456789abcdef0123456789abcdef");
    snprintf(h.created, sizeof h.created, "2026-01-01T00:00:00.000Z");
    struct vault_keys *k;
    if (vault_keys_alloc(&k))
        die("keys");
    unsigned char mk[32];
    memset(mk, FUZZ_MASTER_BYTE, sizeof mk);
    if (argon) {
        h.kdf = VAULT_KDF_ARGON2ID;
        memset(h.salt, 5, sizeof h.salt);
        h.opslimit = 3;
        h.memlimit = 256ull << 20;
        memset(k->dk, FUZZ_DATA_BYTE, sizeof k->dk); /* the target falls back to this key */
        vault_keys_derive(k);
        memset(mk, 0x99, sizeof mk); /* wrapped under a key the target does not have */
    } else {
        randombytes_buf(k->dk, sizeof k->dk);
        vault_keys_derive(k);
    }
    vault_dk_wrap(mk, &h, k);
    struct vault_catalog c = {0};
    const char *names[] = {"aws/prod/key", "db/password", "github/token", "stripe/live"};
    const char *hosts[] = {"*.amazonaws.com", NULL, "api.github.com", "api.stripe.com"};
    for (int i = 0; i < nsecrets; i++)
        add_secret(&c, k, h.file_id, names[i], 1 + i % 3, hosts[i]);
    if (tombstone) {
        c.tombs = calloc(1, sizeof *c.tombs);
        snprintf(c.tombs[0].name, sizeof c.tombs[0].name, "old/secret");
        c.tombs[0].generation = ++c.generation;
        snprintf(c.tombs[0].time, sizeof c.tombs[0].time, "2026-01-03T00:00:00.000Z");
        c.n_tombs = 1;
    }
    char *out;
    size_t len;
    if (vault_file_write(&h, k, &c, "2026-01-04T00:00:00.000Z", &out, &len) != 0)
        die("write");
    write_file(dir, name, out, len);
    free(out);
    vault_catalog_free(&c);
    vault_keys_free(k);
}

static void append_file(char **buf, size_t *len, const char *path, bool sep)
{
    char *d;
    size_t l;
    if (al_read_file(path, 1 << 20, &d, &l, NULL) != 0)
        die(path);
    const char *base = strrchr(path, '/') + 1;
    *buf = realloc(*buf, *len + l + 2 + strlen(base) + 8);
    if (sep) {
        memcpy(*buf + *len, FUZZ_FILE_SPLIT, 2);
        *len += 2;
    }
    *len += (size_t)sprintf(*buf + *len, "@name %s\n", base);
    memcpy(*buf + *len, d, l);
    *len += l;
    free(d);
}

static void audit_seeds(const char *out)
{
    char dir[] = "/tmp/al-gen-corpus-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");
    unsigned char seed[32], pk[32], sk[64];
    memset(seed, FUZZ_SIGN_SEED, sizeof seed);
    crypto_sign_seed_keypair(pk, sk, seed);
    char pkh[65], skh[129], key[300];
    sodium_bin2hex(pkh, sizeof pkh, pk, 32);
    sodium_bin2hex(skh, sizeof skh, sk, 64);
    snprintf(key, sizeof key, "%s/fz.key", dir);
    int fd = open(key, O_WRONLY | O_CREAT | O_EXCL, 0600);
    dprintf(fd,
            "{\"format\":\"airlock-auditlog-key-v1\",\"log_id\":\"%s\",\"public_key\":\"%s\","
            "\"secret_key\":\"%s\"}\n",
            FUZZ_LOG_ID, pkh, skh);
    close(fd);
    struct al_auditlog_opts o = {.dir = dir,
                                 .prefix = "fz",
                                 .checkpoint_records = 6,
                                 .rotate_bytes = 2500,
                                 .checkpoint_file = ""};
    struct al_auditlog *l;
    struct al_error e = {0};
    for (int round = 0; round < 2; round++) {
        if (al_auditlog_open(&o, &l, &e) != 0)
            die(e.msg);
        for (int i = 0; i < 12; i++) {
            json_t *r = json_pack("{s:s,s:s,s:i,s:s}", "op", i % 3 ? "fetch" : "list", "secret",
                                  "github/token", "version", i, "result", "ok");
            al_auditlog_append(l, r, NULL);
            json_decref(r);
        }
        if (al_auditlog_close(l) != 0)
            die("close");
    }
    /* a crash: a torn line, then a writer that recovers */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls %s/fz-*.jsonl | sort", dir);
    FILE *p = popen(cmd, "r");
    char files[16][512];
    int n = 0;
    while (n < 16 && fgets(files[n], sizeof files[n], p)) {
        files[n][strcspn(files[n], "\n")] = '\0';
        n++;
    }
    pclose(p);
    FILE *f = fopen(files[n - 1], "a");
    fputs("{\"seq\":999,\"time\":\"2026-", f);
    fclose(f);
    if (al_auditlog_open(&o, &l, &e) != 0)
        die(e.msg);
    json_t *r = json_pack("{s:s}", "op", "after-crash");
    al_auditlog_append(l, r, NULL);
    json_decref(r);
    al_auditlog_close(l);
    /* retention: a writer that keeps four files announces what it deletes */
    o.retain_files = 4;
    if (al_auditlog_open(&o, &l, &e) != 0)
        die(e.msg);
    for (int i = 0; i < 12; i++) {
        r = json_pack("{s:s,s:i}", "op", "after-retention", "n", i);
        al_auditlog_append(l, r, NULL);
        json_decref(r);
    }
    if (al_auditlog_close(l) != 0)
        die("close");

    p = popen(cmd, "r");
    n = 0;
    while (n < 16 && fgets(files[n], sizeof files[n], p)) {
        files[n][strcspn(files[n], "\n")] = '\0';
        n++;
    }
    pclose(p);
    /* seed 1: the first file kept alone; seed 2: the first three; seed 3: the last two */
    char *buf = NULL;
    size_t len = 0;
    append_file(&buf, &len, files[0], false);
    write_file(out, "one-file.jsonl", buf, len);
    free(buf);
    buf = NULL;
    len = 0;
    for (int i = 0; i < 3 && i < n; i++)
        append_file(&buf, &len, files[i], i > 0);
    write_file(out, "three-files.jsonl", buf, len);
    free(buf);
    buf = NULL;
    len = 0;
    /* the end of the log (retention kept only the last files; anchored by a checkpoint) */
    for (int i = n - 2; i < n; i++)
        append_file(&buf, &len, files[i], i > n - 2);
    write_file(out, "crash-recovery.jsonl", buf, len);
    free(buf);
    buf = NULL;
    len = 0;
    /* seed 4: every file retention kept (its records say what it deleted) */
    for (int i = 0; i < n; i++)
        append_file(&buf, &len, files[i], i > 0);
    write_file(out, "retained.jsonl", buf, len);
    free(buf);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        die("cleanup");
}

int main(int argc, char **argv)
{
    if (argc != 3 || sodium_init() < 0) {
        fprintf(stderr, "usage: %s VAULT_CORPUS_DIR AUDITLOG_CORPUS_DIR\n", argv[0]);
        return 2;
    }
    al_mkdir_p(argv[1], 0755);
    al_mkdir_p(argv[2], 0755);
    vault_seed(argv[1], "empty.vault", false, 0, false);
    vault_seed(argv[1], "four-secrets.vault", false, 4, true);
    vault_seed(argv[1], "passphrase.vault", true, 2, false);
    audit_seeds(argv[2]);
    return 0;
}
