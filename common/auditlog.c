/* common/auditlog: the writer (group commit, checkpoints, rotation, retention, recovery), key
 * files, and what the reader and verifier share. See auditlog.h for the format. */
#include "auditlog.h"
#include "auditlog_int.h"
#include "json.h"
#include "log.h"
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#define AUDITLOG__SEG_SIZE    (256 * 1024)
#define AUDITLOG__FLUSH_BYTES (4u * 1024 * 1024)
#define AUDITLOG__TAIL_SCAN   (4u * 1024 * 1024)
#define AUDITLOG__KEY_FORMAT  "airlock-auditlog-key-v1"
#define AUDITLOG__PUB_FORMAT  "airlock-auditlog-pubkey-v1"
/* Written segments are kept for the next records: a segment fresh from malloc costs the
 * appender a page fault for every 4 KiB it fills (one per five or six records, 6-9% of the
 * appender's time at 450,000 records/s). After each round the writer keeps as many as it
 * just wrote (what the appender fills during the next round at the same rate) and
 * AUDITLOG__FREE_QUIET more, so that a busy log recycles its queue and a quiet one gives
 * the memory back; the queue itself stays bounded by max_pending. */
#define AUDITLOG__FREE_QUIET 2

/* ==== shared helpers ====================================================================== */

bool auditlog__prefix_ok(const char *prefix)
{
    size_t n = prefix ? strlen(prefix) : 0;
    if (n == 0 || n > 32)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = prefix[i];
        if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '_' || c == '-'))
            return false;
    }
    return true;
}

uint64_t auditlog__name_seq(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0 || name[pl] != '-')
        return 0;
    const char *p = name + pl + 1;
    uint64_t v = 0;
    for (int i = 0; i < AUDITLOG__SEQ_DIGITS; i++) {
        if (!isdigit((unsigned char)p[i]))
            return 0;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    if (p[AUDITLOG__SEQ_DIGITS] != '-')
        return 0;
    size_t n = strlen(name);
    if (n < 6 || strcmp(name + n - 6, ".jsonl") != 0)
        return 0;
    return v;
}

static int auditlog__file_cmp(const void *a, const void *b)
{
    const struct auditlog__file *x = a, *y = b;
    if (x->first_seq != y->first_seq)
        return x->first_seq < y->first_seq ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The creation time in a file name "<prefix>-<seq>-yyyymmddThhmmssZ.jsonl" (wall ns), or 0. */
static uint64_t auditlog__name_time(const char *name)
{
    const char *dash = strrchr(name, '-');
    if (!dash || strlen(dash) != 1 + 16 + 6 || dash[9] != 'T' || dash[16] != 'Z')
        return 0;
    char iso[32];
    snprintf(iso, sizeof iso, "%.4s-%.2s-%.2sT%.2s:%.2s:%.2sZ", dash + 1, dash + 5, dash + 7,
             dash + 10, dash + 12, dash + 14);
    uint64_t ns = 0;
    return al_time_parse_rfc3339(iso, &ns) == 0 ? ns : 0;
}

void auditlog__sort(struct auditlog__file *files, size_t n)
{
    if (n > 1)
        qsort(files, n, sizeof *files, auditlog__file_cmp);
}

int auditlog__list(const char *dir, const char *prefix, struct auditlog__file **out, size_t *n,
                   struct al_error *err)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return al_error_set(err, -errno, "cannot read the log directory %s: %s", dir,
                            strerror(errno));
    struct auditlog__file *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t seq = auditlog__name_seq(e->d_name, prefix);
        if (seq == 0 || strlen(e->d_name) >= sizeof v[0].name)
            continue;
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            struct auditlog__file *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                free(v);
                closedir(d);
                return al_error_set(err, -ENOMEM, "out of memory listing %s", dir);
            }
            v = nv;
            cap = nc;
        }
        struct auditlog__file *f = &v[cnt];
        snprintf(f->name, sizeof f->name, "%s", e->d_name);
        if (snprintf(f->path, sizeof f->path, "%s/%s", dir, e->d_name) >= (int)sizeof f->path)
            continue;
        f->first_seq = seq;
        cnt++;
    }
    closedir(d);
    if (cnt)
        qsort(v, cnt, sizeof *v, auditlog__file_cmp);
    *out = v;
    *n = cnt;
    return 0;
}

void auditlog__hash_hex(const void *line, size_t len, char out[AL_AUDITLOG_HASH_HEX + 1])
{
    unsigned char h[32];
    crypto_generichash(h, sizeof h, line, len, NULL, 0);
    /* Not sodium_bin2hex: a chain hash is public (it is written into the next record), so
     * the constant-time encoder buys nothing here, and this runs once per record under the
     * log's lock. */
    al_hex_encode(out, h, sizeof h, false);
}

void auditlog__key_id(const unsigned char pk[crypto_sign_PUBLICKEYBYTES], char out[17])
{
    unsigned char h[32];
    crypto_generichash(h, sizeof h, pk, crypto_sign_PUBLICKEYBYTES, NULL, 0);
    sodium_bin2hex(out, 17, h, 8);
}

bool auditlog__is_hex(const char *s, size_t n)
{
    return s && strlen(s) == n && al_hex_is_lower(s, n);
}

int auditlog__fields(const json_t *rec, struct auditlog__fields *f, const char **why)
{
    memset(f, 0, sizeof *f);
    if (!json_is_object(rec)) {
        *why = "the line is not a JSON object";
        return -EINVAL;
    }
    json_t *v = json_object_get(rec, "seq");
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
        *why = "\"seq\" is missing or not a positive integer";
        return -EINVAL;
    }
    f->seq = (uint64_t)json_integer_value(v);
    v = json_object_get(rec, "time");
    if (!json_is_string(v)) {
        *why = "\"time\" is missing";
        return -EINVAL;
    }
    f->time = json_string_value(v);
    v = json_object_get(rec, "log_id");
    if (!json_is_string(v) || !auditlog__is_hex(json_string_value(v), AL_AUDITLOG_ID_HEX)) {
        *why = "\"log_id\" is missing or not 32 hex digits";
        return -EINVAL;
    }
    f->log_id = json_string_value(v);
    v = json_object_get(rec, "prev");
    if (!json_is_string(v) || !auditlog__is_hex(json_string_value(v), AL_AUDITLOG_HASH_HEX)) {
        *why = "\"prev\" is missing or not 64 hex digits";
        return -EINVAL;
    }
    f->prev = json_string_value(v);
    v = json_object_get(rec, "auditlog");
    if (v && !json_is_object(v)) {
        *why = "\"auditlog\" is not an object";
        return -EINVAL;
    }
    f->internal = v;
    return 0;
}

size_t auditlog__sig_message(char *out, size_t outlen, const struct auditlog__sig *s)
{
    int n = snprintf(out, outlen, AUDITLOG__SIG_DOMAIN "%s\n%" PRIu64 "\n%s\n%s\n%s\n", s->log_id,
                     s->covers, s->prev, s->time, s->reason);
    if (n < 0)
        return 0;
    return (size_t)n >= outlen ? outlen - 1 : (size_t)n;
}

int auditlog__check_checkpoint(const struct auditlog__fields *f, const struct auditlog__pubkey *pk,
                               const char **why)
{
    const json_t *a = f->internal;
    const char *event = json_string_value(json_object_get(a, "event"));
    if (!event || strcmp(event, "checkpoint") != 0) {
        *why = "the log's own record has an unknown \"event\"";
        return -EINVAL;
    }
    const char *reason = json_string_value(json_object_get(a, "reason"));
    const char *sig = json_string_value(json_object_get(a, "sig"));
    json_t *cv = json_object_get(a, "covers");
    if (!reason || !sig || !json_is_integer(cv) || strlen(reason) > 32 || strchr(reason, '\n')) {
        *why = "the checkpoint lacks \"reason\", \"covers\" or \"sig\"";
        return -EINVAL;
    }
    if ((uint64_t)json_integer_value(cv) != f->seq - 1) {
        *why = "the checkpoint's \"covers\" is not the record before it";
        return -EINVAL;
    }
    unsigned char s[crypto_sign_BYTES];
    size_t sl = 0;
    if (strlen(sig) != 2 * crypto_sign_BYTES ||
        sodium_hex2bin(s, sizeof s, sig, strlen(sig), NULL, &sl, NULL) != 0 || sl != sizeof s) {
        *why = "the checkpoint's \"sig\" is not 128 hex digits";
        return -EBADMSG;
    }
    if (strlen(f->time) > 64) {
        *why = "the checkpoint's \"time\" is too long";
        return -EINVAL;
    }
    char msg[512];
    struct auditlog__sig what = {f->log_id, f->seq - 1, f->prev, f->time, reason};
    size_t ml = auditlog__sig_message(msg, sizeof msg, &what);
    if (crypto_sign_verify_detached(s, (const unsigned char *)msg, ml, pk->pk) != 0) {
        *why = "the checkpoint's signature does not verify with the public key";
        return -EBADMSG;
    }
    return 0;
}

/* ---- key files ---------------------------------------------------------------------------- */

int auditlog__pubkey_from_json(const json_t *j, const char *path, struct auditlog__pubkey *out,
                               struct al_error *err)
{
    const char *id = json_string_value(json_object_get(j, "log_id"));
    const char *pk = json_string_value(json_object_get(j, "public_key"));
    size_t bl = 0;
    if (!id || !auditlog__is_hex(id, AL_AUDITLOG_ID_HEX) || !pk ||
        strlen(pk) != 2 * crypto_sign_PUBLICKEYBYTES ||
        sodium_hex2bin(out->pk, sizeof out->pk, pk, strlen(pk), NULL, &bl, NULL) != 0 ||
        bl != sizeof out->pk)
        return al_error_set(err, -EINVAL,
                            "%s is not an audit log key file (needs \"log_id\" and "
                            "\"public_key\" in hex)",
                            path);
    snprintf(out->log_id, sizeof out->log_id, "%s", id);
    auditlog__key_id(out->pk, out->key_id);
    return 0;
}

int auditlog__pubkey_load(const char *path, struct auditlog__pubkey *out, struct al_error *err)
{
    char *data = NULL;
    size_t len = 0;
    int rc = al_read_file(path, 64 * 1024, &data, &len, err);
    if (rc)
        return rc;
    json_error_t je;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    sodium_memzero(data, len); /* a private key file may have been given by mistake */
    free(data);
    if (!j)
        return al_error_set(err, -EINVAL, "%s: invalid JSON at line %d: %s", path, je.line,
                            je.text);
    rc = auditlog__pubkey_from_json(j, path, out, err);
    json_decref(j);
    return rc;
}

static json_t *auditlog__pub_json(const char *log_id, const unsigned char *pk)
{
    char hex[2 * crypto_sign_PUBLICKEYBYTES + 1], kid[17], ts[40];
    sodium_bin2hex(hex, sizeof hex, pk, crypto_sign_PUBLICKEYBYTES);
    auditlog__key_id(pk, kid);
    al_time_rfc3339(ts, sizeof ts, al_wall_ns());
    return json_pack("{s:s,s:s,s:s,s:s,s:s}", "format", AUDITLOG__PUB_FORMAT, "log_id", log_id,
                     "public_key", hex, "key_id", kid, "exported", ts);
}

static int auditlog__write_pub(const char *path, const char *log_id, const unsigned char *pk,
                               struct al_error *err)
{
    json_t *j = auditlog__pub_json(log_id, pk);
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!s)
        return al_error_set(err, -ENOMEM, "out of memory");
    size_t n = strlen(s);
    s[n] = '\n'; /* json_dumps leaves room for the NUL only: write n+1 with the newline */
    int rc = al_write_file_atomic(path, s, n + 1, 0644, err);
    free(s);
    return rc;
}

/* Loads <key_file>: log id, public key, and (if sk != NULL) the secret key into sk. */
static int auditlog__key_load(const char *path, char log_id[AL_AUDITLOG_ID_HEX + 1],
                              unsigned char pk[crypto_sign_PUBLICKEYBYTES], unsigned char *sk,
                              struct al_error *err)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return al_error_set(err, -errno, "cannot read the audit log key %s: %s", path,
                            strerror(errno));
    if (sk && (st.st_mode & 077))
        return al_error_set(err, -EPERM,
                            "the audit log key %s is readable by others (mode %03o): "
                            "run chmod 600 %s",
                            path, (unsigned)(st.st_mode & 0777), path);
    char *data = NULL;
    size_t len = 0;
    int rc = al_read_file(path, 64 * 1024, &data, &len, err);
    if (rc)
        return rc;
    json_error_t je;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    sodium_memzero(data, len);
    free(data);
    if (!j)
        return al_error_set(err, -EINVAL, "audit log key %s is corrupted (invalid JSON)", path);
    struct auditlog__pubkey pub;
    rc = auditlog__pubkey_from_json(j, path, &pub, err);
    const char *skh = json_string_value(json_object_get(j, "secret_key"));
    if (rc == 0 && sk) {
        size_t bl = 0;
        if (!skh || strlen(skh) != 2 * crypto_sign_SECRETKEYBYTES ||
            sodium_hex2bin(sk, crypto_sign_SECRETKEYBYTES, skh, strlen(skh), NULL, &bl, NULL) ||
            bl != crypto_sign_SECRETKEYBYTES)
            rc = al_error_set(err, -EINVAL, "audit log key %s has no valid \"secret_key\"", path);
        else if (memcmp(sk + 32, pub.pk, 32) != 0)
            rc = al_error_set(err, -EINVAL,
                              "audit log key %s: the secret and public keys do not match", path);
    }
    /* jansson's copy of the hex secret key: overwrite before freeing */
    if (skh)
        sodium_memzero((void *)skh, strlen(skh));
    json_decref(j);
    if (rc)
        return rc;
    memcpy(log_id, pub.log_id, AL_AUDITLOG_ID_HEX + 1);
    memcpy(pk, pub.pk, crypto_sign_PUBLICKEYBYTES);
    return 0;
}

static int auditlog__key_create(const char *path, const char *pub_path,
                                char log_id[AL_AUDITLOG_ID_HEX + 1],
                                unsigned char pk[crypto_sign_PUBLICKEYBYTES], unsigned char *sk,
                                struct al_error *err)
{
    crypto_sign_keypair(pk, sk);
    al_random_hex(log_id, AL_AUDITLOG_ID_HEX / 2);
    char ts[40];
    al_time_rfc3339(ts, sizeof ts, al_wall_ns());
    size_t cap = 1024;
    char *buf = sodium_malloc(cap);
    if (!buf)
        return al_error_set(err, -ENOMEM, "out of memory");
    char pkh[2 * crypto_sign_PUBLICKEYBYTES + 1], kid[17];
    sodium_bin2hex(pkh, sizeof pkh, pk, crypto_sign_PUBLICKEYBYTES);
    auditlog__key_id(pk, kid);
    int n = snprintf(buf, cap,
                     "{\n  \"format\": \"" AUDITLOG__KEY_FORMAT "\",\n  \"log_id\": \"%s\",\n"
                     "  \"public_key\": \"%s\",\n  \"key_id\": \"%s\",\n  \"created\": \"%s\",\n"
                     "  \"secret_key\": \"",
                     log_id, pkh, kid, ts);
    sodium_bin2hex(buf + n, cap - (size_t)n, sk, crypto_sign_SECRETKEYBYTES);
    n += 2 * crypto_sign_SECRETKEYBYTES;
    n += snprintf(buf + n, cap - (size_t)n, "\"\n}\n");
    /* Create with O_EXCL semantics: never overwrite an existing key. */
    char tmp[AL_AUDITLOG_PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int rc = 0;
    if (fd < 0) {
        rc = al_error_set(err, -errno, "cannot create the audit log key %s: %s", tmp,
                          strerror(errno));
    } else {
        rc = al_write_all(fd, buf, (size_t)n);
        if (rc == 0 && fsync(fd) < 0)
            rc = -errno;
        close(fd);
        if (rc == 0 && link(tmp, path) < 0)
            rc = -errno;
        unlink(tmp);
        if (rc)
            al_error_set(err, rc, "cannot create the audit log key %s: %s", path,
                         rc == -EEXIST ? "it appeared while creating it (another writer?)"
                                       : strerror(-rc));
    }
    sodium_free(buf);
    if (rc)
        return rc;
    char dir[AL_AUDITLOG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *sl = strrchr(dir, '/');
    if (sl)
        *sl = '\0';
    al_fsync_dir(sl ? dir : ".");
    if (pub_path)
        return auditlog__write_pub(pub_path, log_id, pk, err);
    return 0;
}

int al_auditlog_export_pubkey(const char *key_file, const char *out_path, struct al_error *err)
{
    char id[AL_AUDITLOG_ID_HEX + 1];
    unsigned char pk[crypto_sign_PUBLICKEYBYTES];
    int rc = auditlog__key_load(key_file, id, pk, NULL, err);
    if (rc)
        return rc;
    return auditlog__write_pub(out_path, id, pk, err);
}

/* ==== writer ============================================================================== */

enum { SEG_RECORDS = 0, SEG_CHECKPOINT, SEG_NEWFILE };

struct auditlog__seg {
    struct auditlog__seg *next;
    char *data;
    size_t len, cap, off; /* off: bytes already written */
    uint64_t last_seq;
    int kind;
    bool opened;   /* SEG_NEWFILE: file created */
    bool exported; /* checkpoint copied to the checkpoint file */
    char new_name[128];
};

struct al_auditlog {
    char dir[AL_AUDITLOG_PATH_MAX];
    char prefix[40];
    char key_path[AL_AUDITLOG_PATH_MAX];
    char ckpt_path[AL_AUDITLOG_PATH_MAX];
    uint32_t sync_ms, ckpt_records, ckpt_ms;
    uint64_t rotate_bytes, rotate_ms;
    struct auditlog__rules retain;
    char hist_path[AL_AUDITLOG_PATH_MAX + 48];
    size_t max_pending;
    mode_t file_mode;
    void (*on_state)(struct al_auditlog *log, int err, void *arg);
    void *arg;

    int lock_fd;
    unsigned char *sk; /* sodium_malloc */
    unsigned char pk[crypto_sign_PUBLICKEYBYTES];
    char log_id[AL_AUDITLOG_ID_HEX + 1];
    char key_id[17];

    pthread_mutex_t mu;
    pthread_cond_t wake, synced;
    pthread_t thread;
    bool thread_started;

    /* Appender state, under mu. */
    uint64_t next_seq;
    int64_t ts_sec;   /* the second whose text ts_text holds (records' times) */
    char ts_text[20]; /* "YYYY-MM-DDTHH:MM:SS." of ts_sec */
    char head[AL_AUDITLOG_HASH_HEX + 1];
    uint64_t file_bytes, file_opened_ns;
    uint64_t since_ckpt, last_ckpt_ns;
    struct auditlog__seg *pend_head, *pend_tail, *free_segs;
    size_t pending_bytes, n_free;
    int status;
    bool fatal, stopping, flush_now;
    bool close_pushed; /* the "close" checkpoint is queued: nothing may follow it */
    uint64_t durable_seq;
    uint64_t st_records, st_ckpts, st_rotations, st_fsyncs, st_bytes;
    uint64_t st_pruned_files, st_pruned_bytes;
    char cur_name[128];
    /* What retention deleted so far (under mu: the next retention record carries it). */
    struct auditlog__history hist;
    bool hist_dirty; /* a retention record is due even without files to delete */

    /* Writer thread state. */
    int fd, ckpt_fd;
    bool dirty;
    bool retention_due;
    uint64_t last_retention_ns;
    struct auditlog__prune prune; /* announced, deleted once prune.seq is durable */
};

/* A record's time, RFC 3339 with microseconds; name_ts (may be NULL) gets the same second
 * in the basic form of a file name. */
static void auditlog__time(char out[40], char name_ts[20])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    al_time_format(out, 40, ts.tv_sec, ts.tv_nsec, AL_TIME_RFC3339_US);
    if (name_ts)
        al_time_format(name_ts, 20, ts.tv_sec, 0, AL_TIME_BASIC);
}

static struct auditlog__seg *auditlog__seg_new(struct al_auditlog *l, int kind, size_t need)
{
    struct auditlog__seg *s = NULL;
    if (need <= AUDITLOG__SEG_SIZE && l->free_segs) {
        s = l->free_segs;
        l->free_segs = s->next;
        l->n_free--;
    } else {
        s = calloc(1, sizeof *s);
        if (!s)
            return NULL;
        s->cap = need > AUDITLOG__SEG_SIZE ? need : AUDITLOG__SEG_SIZE;
        s->data = malloc(s->cap);
        if (!s->data) {
            free(s);
            return NULL;
        }
    }
    s->next = NULL;
    s->len = s->off = 0;
    s->kind = kind;
    s->opened = s->exported = false;
    s->new_name[0] = '\0';
    if (l->pend_tail)
        l->pend_tail->next = s;
    else
        l->pend_head = s;
    l->pend_tail = s;
    return s;
}

static void auditlog__seg_release(struct al_auditlog *l, struct auditlog__seg *s)
{
    if (s->cap == AUDITLOG__SEG_SIZE) {
        s->next = l->free_segs;
        l->free_segs = s;
        l->n_free++;
        return;
    }
    free(s->data);
    free(s);
}

static void auditlog__segs_free(struct auditlog__seg *s)
{
    while (s) {
        struct auditlog__seg *n = s->next;
        free(s->data);
        free(s);
        s = n;
    }
}

/* Detaches the free segments beyond keep (under mu), for auditlog__segs_free outside it. */
static struct auditlog__seg *auditlog__free_trim(struct al_auditlog *l, size_t keep)
{
    if (l->n_free <= keep)
        return NULL;
    struct auditlog__seg **at = &l->free_segs;
    for (size_t i = 0; i < keep; i++)
        at = &(*at)->next;
    struct auditlog__seg *spare = *at;
    *at = NULL;
    l->n_free = keep;
    return spare;
}

/* Room for a line of len bytes and its '\n' at the end of the pending queue. */
static char *auditlog__reserve(struct al_auditlog *l, size_t len, int kind)
{
    struct auditlog__seg *s = l->pend_tail;
    if (kind != SEG_RECORDS || !s || s->kind != SEG_RECORDS || s->cap - s->len < len + 1) {
        s = auditlog__seg_new(l, kind, len + 1);
        if (!s)
            return NULL;
    }
    return s->data + s->len;
}

/* The line of len bytes written where auditlog__reserve said joins the queue; the chain
 * advances. */
static void auditlog__commit(struct al_auditlog *l, size_t len, int kind, const char *name_ts)
{
    struct auditlog__seg *s = l->pend_tail;
    char *line = s->data + s->len;
    line[len] = '\n';
    s->len += len + 1;
    s->last_seq = l->next_seq;
    if (kind == SEG_NEWFILE) {
        snprintf(s->new_name, sizeof s->new_name, "%s-%0*" PRIu64 "-%s.jsonl", l->prefix,
                 AUDITLOG__SEQ_DIGITS, l->next_seq, name_ts);
        snprintf(l->cur_name, sizeof l->cur_name, "%s", s->new_name);
        l->file_bytes = 0;
        l->file_opened_ns = al_now_ns();
        l->st_rotations++;
    }
    auditlog__hash_hex(line, len, l->head);
    l->next_seq++;
    l->file_bytes += len + 1;
    l->pending_bytes += len + 1;
    l->st_records++;
}

/* Appends a finished line (without '\n') to the pending queue and advances the chain. */
static int auditlog__push_line(struct al_auditlog *l, const char *line, size_t len, int kind,
                               const char *name_ts)
{
    char *at = auditlog__reserve(l, len, kind);
    if (!at)
        return -ENOMEM;
    memcpy(at, line, len);
    auditlog__commit(l, len, kind, name_ts);
    return 0;
}

/* Appends a signed checkpoint (under mu). recovered may be NULL. */
static int auditlog__checkpoint_locked(struct al_auditlog *l, const char *reason, int kind,
                                       const json_t *recovered)
{
    char ts[40], name_ts[20];
    auditlog__time(ts, name_ts);
    uint64_t seq = l->next_seq, covers = seq - 1;
    char msg[512];
    struct auditlog__sig what = {l->log_id, covers, l->head, ts, reason};
    size_t ml = auditlog__sig_message(msg, sizeof msg, &what);
    unsigned char sig[crypto_sign_BYTES];
    crypto_sign_detached(sig, NULL, (const unsigned char *)msg, ml, l->sk);
    char sigh[2 * crypto_sign_BYTES + 1];
    sodium_bin2hex(sigh, sizeof sigh, sig, sizeof sig);
    char rec[1400];
    int n = snprintf(rec, sizeof rec,
                     "{\"seq\":%" PRIu64 ",\"time\":\"%s\",\"log_id\":\"%s\",\"prev\":\"%s\","
                     "\"auditlog\":{\"event\":\"checkpoint\",\"reason\":\"%s\",\"covers\":%" PRIu64
                     ",\"key\":\"%s\",\"sig\":\"%s\"",
                     seq, ts, l->log_id, l->head, reason, covers, l->key_id, sigh);
    if (recovered) {
        char *r = json_dumps(recovered, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!r)
            return -ENOMEM;
        n += snprintf(rec + n, sizeof rec - (size_t)n, ",\"recovered\":%s", r);
        free(r);
    }
    n += snprintf(rec + n, sizeof rec - (size_t)n, "}}");
    if (n <= 0 || (size_t)n >= sizeof rec)
        return -E2BIG;
    int rc = auditlog__push_line(l, rec, (size_t)n, kind, name_ts);
    if (rc)
        return rc;
    l->since_ckpt = 0;
    l->last_ckpt_ns = al_now_ns();
    l->st_ckpts++;
    return 0;
}

/* Closes the current file with a signed "seal" and opens the next with a signed "rotate"
 * checkpoint (under mu). */
static int auditlog__rotate_locked(struct al_auditlog *l)
{
    int rc = auditlog__checkpoint_locked(l, "seal", SEG_CHECKPOINT, NULL);
    return rc ? rc : auditlog__checkpoint_locked(l, "rotate", SEG_NEWFILE, NULL);
}

static const char *const auditlog__reserved[] = {"seq", "time", "log_id", "prev", "auditlog", NULL};

#define AUDITLOG__HEAD_MAX 256

/* A record's time (as auditlog__time's, RFC 3339 with microseconds) into out, returning its
 * length: the text of the second is kept from the last record (under mu). */
static size_t auditlog__record_time(struct al_auditlog *l, char out[40])
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != l->ts_sec || !l->ts_text[0]) {
        char t[40];
        if (al_time_format(t, sizeof t, ts.tv_sec, ts.tv_nsec, AL_TIME_RFC3339_US) < 0)
            return 0;
        memcpy(l->ts_text, t, sizeof l->ts_text);
        l->ts_sec = ts.tv_sec;
    }
    memcpy(out, l->ts_text, sizeof l->ts_text);
    unsigned us = (unsigned)ts.tv_nsec / 1000;
    for (int i = 25; i >= 20; i--, us /= 10)
        out[i] = (char)('0' + us % 10);
    out[26] = 'Z';
    return 27;
}

/* The head of the record with seq next_seq, {"seq":N,"time":"T","log_id":"I","prev":"P",
 * (without the last ',' when it has no members), into head (AUDITLOG__HEAD_MAX bytes)
 * without printf, since every record is formatted under the log's lock. Returns its
 * length. */
static size_t auditlog__head_locked(struct al_auditlog *l, char *head, bool members)
{
    size_t len = 0;
    memcpy(head, "{\"seq\":", 7);
    len = 7;
    char digits[24];
    int nd = 0;
    uint64_t seq = l->next_seq;
    do
        digits[nd++] = (char)('0' + seq % 10);
    while ((seq /= 10));
    while (nd)
        head[len++] = digits[--nd];
#define AUDITLOG__PUT(str, n)       \
    do {                            \
        memcpy(head + len, str, n); \
        len += n;                   \
    } while (0)
    AUDITLOG__PUT(",\"time\":\"", 9);
    len += auditlog__record_time(l, head + len);
    AUDITLOG__PUT("\",\"log_id\":\"", 12);
    AUDITLOG__PUT(l->log_id, AL_AUDITLOG_ID_HEX);
    AUDITLOG__PUT("\",\"prev\":\"", 10);
    AUDITLOG__PUT(l->head, AL_AUDITLOG_HASH_HEX);
    AUDITLOG__PUT(members ? "\"," : "\"", members ? 2u : 1u);
#undef AUDITLOG__PUT
    return len;
}

/* Appends the record with seq next_seq whose caller fields are members (JSON object
 * members without the braces), formatted straight into the pending queue (under mu). */
static int auditlog__push_record(struct al_auditlog *l, const char *members, size_t mlen)
{
    char head[AUDITLOG__HEAD_MAX];
    size_t hl = auditlog__head_locked(l, head, mlen != 0);
    size_t len = hl + mlen + 1;
    if (len > AL_AUDITLOG_MAX_RECORD)
        return -E2BIG;
    char *at = auditlog__reserve(l, len, SEG_RECORDS);
    if (!at)
        return -ENOMEM;
    memcpy(at, head, hl);
    memcpy(at + hl, members, mlen);
    at[len - 1] = '}';
    auditlog__commit(l, len, SEG_RECORDS, NULL);
    return 0;
}

/* Appends a record whose caller fields are the JSON object members (without the braces). */
static int auditlog__append_members(struct al_auditlog *l, const char *members, size_t mlen,
                                    uint64_t *seq_out)
{
    pthread_mutex_lock(&l->mu);
    /* One clock reading for both time checks (each reading is 1% of a record's cost); a
     * rotation below sets the times after it, hence the sums rather than differences. */
    uint64_t now = al_now_ns();
    int rc = l->status;
    if (rc == 0 && l->stopping)
        rc = -ESHUTDOWN;
    if (rc == 0 && l->pending_bytes > l->max_pending)
        rc = -ENOBUFS;
    if (rc == 0 && (l->file_bytes >= l->rotate_bytes ||
                    (l->rotate_ms && l->file_opened_ns + l->rotate_ms * 1000000ull <= now)))
        rc = auditlog__rotate_locked(l);
    if (rc == 0) {
        uint64_t seq = l->next_seq;
        rc = auditlog__push_record(l, members, mlen);
        if (rc == 0) {
            if (seq_out)
                *seq_out = seq;
            l->since_ckpt++;
            if (l->since_ckpt >= l->ckpt_records)
                rc = auditlog__checkpoint_locked(l, "count", SEG_CHECKPOINT, NULL);
            else if (l->last_ckpt_ns + l->ckpt_ms * 1000000ull <= now)
                rc = auditlog__checkpoint_locked(l, "interval", SEG_CHECKPOINT, NULL);
        }
        if (l->pending_bytes >= AUDITLOG__FLUSH_BYTES)
            pthread_cond_signal(&l->wake);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int al_auditlog_append(struct al_auditlog *l, const json_t *fields, uint64_t *seq_out)
{
    /* Serialise outside the lock (refusing the keys the log writes itself); most records fit
     * the stack buffer. */
    char stackbuf[4096];
    char *body = stackbuf;
    size_t blen = al_json_dumpb_object(fields, auditlog__reserved, stackbuf, sizeof stackbuf);
    if (blen == 0)
        return -EINVAL;
    if (blen > sizeof stackbuf) {
        if (blen > AL_AUDITLOG_MAX_RECORD)
            return -E2BIG;
        body = malloc(blen);
        if (!body)
            return -ENOMEM;
        if (al_json_dumpb_object(fields, auditlog__reserved, body, blen) != blen) {
            free(body);
            return -EINVAL;
        }
    }
    /* body is "{...}"; "{}" has no members. */
    int rc = auditlog__append_members(l, body + 1, blen - 2, seq_out);
    if (body != stackbuf)
        free(body);
    return rc;
}

int al_auditlog_append_raw(struct al_auditlog *l, const char *obj, size_t len, uint64_t *seq_out)
{
    if (len < 2 || obj[0] != '{' || obj[len - 1] != '}')
        return -EINVAL;
    if (len > AL_AUDITLOG_MAX_RECORD)
        return -E2BIG;
    if (memchr(obj, '\n', len) || memchr(obj, '\r', len) || memchr(obj, '\0', len))
        return -EINVAL; /* one record, one line */
#ifndef NDEBUG
    /* Debug builds check what release builds trust: an object without reserved keys. */
    json_t *j = json_loadb(obj, len, JSON_REJECT_DUPLICATES, NULL);
    bool ok = json_is_object(j);
    for (size_t i = 0; ok && auditlog__reserved[i]; i++)
        ok = json_object_get(j, auditlog__reserved[i]) == NULL;
    json_decref(j);
    if (!ok)
        return -EINVAL;
#endif
    return auditlog__append_members(l, obj + 1, len - 2, seq_out);
}

int al_auditlog_checkpoint(struct al_auditlog *l)
{
    pthread_mutex_lock(&l->mu);
    int rc = l->status;
    if (rc == 0)
        rc = auditlog__checkpoint_locked(l, "request", SEG_CHECKPOINT, NULL);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int al_auditlog_status(struct al_auditlog *l)
{
    pthread_mutex_lock(&l->mu);
    int rc = l->status;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

uint64_t al_auditlog_durable_seq(struct al_auditlog *l)
{
    pthread_mutex_lock(&l->mu);
    uint64_t v = l->durable_seq;
    pthread_mutex_unlock(&l->mu);
    return v;
}

const char *al_auditlog_id(const struct al_auditlog *l)
{
    return l->log_id;
}

void al_auditlog_get_stats(struct al_auditlog *l, struct al_auditlog_stats *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&l->mu);
    st->next_seq = l->next_seq;
    st->durable_seq = l->durable_seq;
    st->records = l->st_records;
    st->checkpoints = l->st_ckpts;
    st->rotations = l->st_rotations;
    st->pruned_files = l->st_pruned_files;
    st->pruned_bytes = l->st_pruned_bytes;
    st->fsyncs = l->st_fsyncs;
    st->bytes_written = l->st_bytes;
    st->pending_bytes = l->pending_bytes;
    st->status = l->status;
    snprintf(st->current_file, sizeof st->current_file, "%s/%s", l->dir, l->cur_name);
    pthread_mutex_unlock(&l->mu);
}

int al_auditlog_sync(struct al_auditlog *l, uint32_t timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)timeout_ms * 1000000ull;
    dl.tv_sec += (time_t)(ns / 1000000000ull);
    dl.tv_nsec = (long)(ns % 1000000000ull);
    pthread_mutex_lock(&l->mu);
    uint64_t target = l->next_seq - 1;
    l->flush_now = true;
    pthread_cond_signal(&l->wake);
    int rc = 0;
    while (l->durable_seq < target) {
        if (l->status) {
            rc = l->status;
            break;
        }
        if (timeout_ms == 0) {
            pthread_cond_wait(&l->synced, &l->mu);
        } else if (pthread_cond_timedwait(&l->synced, &l->mu, &dl) == ETIMEDOUT) {
            rc = l->durable_seq >= target ? 0 : -ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* ---- writer thread -------------------------------------------------------------------------- */

static bool auditlog__retryable(int e)
{
    return e == -ENOSPC || e == -EDQUOT || e == -EFBIG || e == -EAGAIN || e == -EINTR;
}

static int auditlog__datasync(struct al_auditlog *l, int fd)
{
    if (fdatasync(fd) < 0)
        return -errno;
    pthread_mutex_lock(&l->mu);
    l->st_fsyncs++;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* Announces a retention pass (under mu): the retention record, then a signed checkpoint,
 * whose seq goes to *seq: the files may go once it is durable. */
static int auditlog__retention_record_locked(struct al_auditlog *l, const struct auditlog__prune *p,
                                             const struct auditlog__history *h, uint64_t *seq)
{
    char *obj = auditlog__retention_object(p, h, &l->retain);
    if (!obj)
        return -ENOMEM;
    size_t mlen = strlen(obj) + 11;
    char *members = malloc(mlen + 1);
    int rc = members ? 0 : -ENOMEM;
    if (rc == 0) {
        snprintf(members, mlen + 1, "\"auditlog\":%s", obj);
        rc = auditlog__push_record(l, members, mlen);
    }
    if (rc == 0) {
        l->since_ckpt++;
        rc = auditlog__checkpoint_locked(l, "retention", SEG_CHECKPOINT, NULL);
    }
    if (rc == 0)
        *seq = l->next_seq - 1;
    free(obj);
    free(members);
    return rc;
}

/* A retention pass (writer thread, mu not held): decides what to delete and announces it in
 * the log; auditlog__prune deletes it once the announcement is durable. */
static void auditlog__retention(struct al_auditlog *l)
{
    if (l->prune.seq)
        return; /* the previous pass is not finished */
    l->last_retention_ns = al_now_ns();
    struct auditlog__prune p;
    int rc = auditlog__retention_plan(l->dir, l->prefix, &l->retain, &p);
    if (rc) {
        al_warn("audit log %s/%s: retention cannot list the files: %s", l->dir, l->prefix,
                strerror(-rc));
        return;
    }
    pthread_mutex_lock(&l->mu);
    if ((p.n == 0 && !l->hist_dirty) || l->status || l->close_pushed) {
        pthread_mutex_unlock(&l->mu);
        auditlog__prune_free(&p);
        return;
    }
    struct auditlog__history h = l->hist;
    for (size_t i = 0; i < p.n; i++)
        auditlog__history_add(&h,
                              &(struct auditlog__range){p.f[i].first_seq, p.f[i].last_seq, 1,
                                                        p.f[i].bytes, p.f[i].rule, p.f[i].limit});
    uint64_t seq = 0;
    rc = auditlog__retention_record_locked(l, &p, &h, &seq);
    if (rc == 0) {
        l->hist = h;
        l->hist_dirty = false;
        p.seq = seq;
        l->prune = p;
        l->flush_now = true;
    }
    pthread_mutex_unlock(&l->mu);
    if (rc) {
        al_warn("audit log %s/%s: cannot write the retention record: %s", l->dir, l->prefix,
                strerror(-rc));
        auditlog__prune_free(&p);
    }
}

/* Deletes what the last pass announced, now that its record is durable (writer thread).
 * The history is saved first: a crash in between leaves files that the history says are
 * deleted, which the next writer notices (they are still there) and announces again. */
static void auditlog__prune(struct al_auditlog *l)
{
    pthread_mutex_lock(&l->mu);
    struct auditlog__history h = l->hist;
    pthread_mutex_unlock(&l->mu);
    int rc = auditlog__history_save(l->hist_path, l->log_id, &h);
    if (rc) {
        al_warn("audit log %s/%s: cannot save the retention history %s (%s): deleting nothing "
                "until it can",
                l->dir, l->prefix, l->hist_path, strerror(-rc));
        auditlog__prune_free(&l->prune);
        return;
    }
    uint64_t files = 0, bytes = 0;
    for (size_t i = 0; i < l->prune.n; i++) {
        const struct auditlog__prune_file *f = &l->prune.f[i];
        if (unlink(f->path) == 0 || errno == ENOENT) {
            files++;
            bytes += f->bytes;
            al_info("audit log: retention (%s) deleted %s (seq %" PRIu64 "..%" PRIu64 ", %" PRIu64
                    " bytes)",
                    f->rule, f->path, f->first_seq, f->last_seq, f->bytes);
        } else {
            al_warn("audit log: retention cannot delete %s: %s", f->path, strerror(errno));
        }
    }
    if (files)
        al_fsync_dir(l->dir);
    pthread_mutex_lock(&l->mu);
    l->st_pruned_files += files;
    l->st_pruned_bytes += bytes;
    pthread_mutex_unlock(&l->mu);
    /* A pass deletes at most AUDITLOG__PRUNE_MAX files: the next one goes on (a rotation
     * meanwhile has asked for one already). */
    if (l->prune.n == AUDITLOG__PRUNE_MAX)
        l->retention_due = true;
    auditlog__prune_free(&l->prune);
}

/* Writes one segment. Returns 0, or a negative errno (the segment keeps its progress). */
static int auditlog__write_seg(struct al_auditlog *l, struct auditlog__seg *s)
{
    int rc;
    if (s->kind == SEG_NEWFILE && !s->opened) {
        if (l->fd >= 0) {
            if (l->dirty && (rc = auditlog__datasync(l, l->fd)) != 0)
                return rc;
            l->dirty = false;
            close(l->fd);
            l->fd = -1;
        }
        char path[AL_AUDITLOG_PATH_MAX + 160];
        snprintf(path, sizeof path, "%s/%s", l->dir, s->new_name);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, l->file_mode);
        if (fd < 0 && errno == EEXIST) {
            /* A retry after a failure that left the file behind: it must be empty. */
            struct stat st;
            fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
            if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_size != 0)) {
                close(fd);
                errno = EEXIST;
                fd = -1;
            }
        }
        if (fd < 0)
            return -errno;
        l->fd = fd;
        if ((rc = al_fsync_dir(l->dir)) != 0)
            return rc;
        s->opened = true;
        l->retention_due = true;
    }
    if (s->kind != SEG_RECORDS && s->off == 0 && l->dirty) {
        /* Everything before a checkpoint is on disk before the checkpoint is written. */
        if ((rc = auditlog__datasync(l, l->fd)) != 0)
            return rc;
        l->dirty = false;
    }
    while (s->off < s->len) {
        ssize_t w = write(l->fd, s->data + s->off, s->len - s->off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        s->off += (size_t)w;
        l->dirty = true;
        pthread_mutex_lock(&l->mu);
        l->st_bytes += (uint64_t)w;
        pthread_mutex_unlock(&l->mu);
    }
    if (s->kind != SEG_RECORDS && !s->exported) {
        if (l->dirty) {
            if ((rc = auditlog__datasync(l, l->fd)) != 0)
                return rc;
            l->dirty = false;
        }
        if (l->ckpt_fd >= 0) {
            if ((rc = al_write_all(l->ckpt_fd, s->data, s->len)) != 0)
                return rc;
            if ((rc = auditlog__datasync(l, l->ckpt_fd)) != 0)
                return rc;
        }
        s->exported = true;
    }
    return 0;
}

static void auditlog__set_status(struct al_auditlog *l, int rc, bool fatal)
{
    pthread_mutex_lock(&l->mu);
    int old = l->status;
    if (!l->fatal) {
        l->status = rc;
        l->fatal = fatal;
    }
    int now = l->status;
    pthread_cond_broadcast(&l->synced);
    pthread_mutex_unlock(&l->mu);
    if (old != now) {
        if (now)
            al_error("audit log %s/%s: cannot write: %s%s", l->dir, l->prefix, strerror(-now),
                     fatal ? " (permanent until the log is reopened)"
                           : " (retrying; appends are refused meanwhile)");
        else
            al_info("audit log %s/%s: writing again", l->dir, l->prefix);
        if (l->on_state)
            l->on_state(l, now, l->arg);
    }
}

static void *auditlog__thread(void *arg)
{
    struct al_auditlog *l = arg;
    pthread_mutex_lock(&l->mu);
    uint64_t last_round = al_now_ns();
    for (;;) {
        bool stopping = l->stopping;
        /* The next round starts sync_ms after the previous one started (not after it ended),
         * so that records wait at most sync_ms plus one write and fdatasync. */
        uint64_t due = last_round + (uint64_t)l->sync_ms * 1000000ull;
        if (!stopping && !l->flush_now && l->pending_bytes < AUDITLOG__FLUSH_BYTES &&
            al_now_ns() < due) {
            struct timespec dl = {.tv_sec = (time_t)(due / 1000000000ull),
                                  .tv_nsec = (long)(due % 1000000000ull)};
            pthread_cond_timedwait(&l->wake, &l->mu, &dl);
            stopping = l->stopping;
        }
        if (al_now_ns() >= due || l->flush_now || stopping ||
            l->pending_bytes >= AUDITLOG__FLUSH_BYTES)
            last_round = al_now_ns();
        else
            continue; /* woken early for nothing */
        l->flush_now = false;
        /* Closing: once everything queued is written and no retention pass is due. */
        if (stopping && !l->close_pushed &&
            (l->status || (!l->pend_head && !l->prune.seq && !l->retention_due))) {
            if (l->status == 0)
                auditlog__checkpoint_locked(l, "close", SEG_CHECKPOINT, NULL);
            l->close_pushed = true;
        }
        /* Time-driven checkpoints and rotation, also while no record arrives. */
        if (l->status == 0 && !stopping) {
            uint64_t now = al_now_ns();
            if (l->since_ckpt && now - l->last_ckpt_ns >= l->ckpt_ms * 1000000ull)
                auditlog__checkpoint_locked(l, "interval", SEG_CHECKPOINT, NULL);
            if (l->rotate_ms && l->file_bytes > 0 && l->since_ckpt &&
                now - l->file_opened_ns >= l->rotate_ms * 1000000ull)
                auditlog__rotate_locked(l);
        }
        struct auditlog__seg *list = l->pend_head;
        l->pend_head = l->pend_tail = NULL;
        bool was_failing = l->status != 0;
        bool fatal = l->fatal;
        pthread_mutex_unlock(&l->mu);

        int rc = 0;
        bool rc_fatal = false;
        uint64_t done_seq = 0;
        size_t done_bytes = 0;
        struct auditlog__seg *s = list;
        if (fatal) {
            rc = -EIO;
        } else {
            while (s) {
                rc = auditlog__write_seg(l, s);
                if (rc)
                    break;
                done_seq = s->last_seq;
                done_bytes += s->len;
                s = s->next;
            }
            if (rc == 0 && l->dirty) {
                rc = auditlog__datasync(l, l->fd);
                if (rc == 0)
                    l->dirty = false;
                else
                    rc_fatal = true; /* after a failed fdatasync the page cache is unknown */
            } else if (rc && !auditlog__retryable(rc)) {
                rc_fatal = true;
            }
        }
        if (rc == 0 && l->retain.max_age_ms && al_now_ns() - l->last_retention_ns >= 60000000000ull)
            l->retention_due = true; /* files age without a rotation */
        if (rc == 0 && l->retention_due && !l->prune.seq) {
            l->retention_due = false;
            auditlog__retention(l);
        }

        pthread_mutex_lock(&l->mu);
        /* Release what was written; requeue the rest in front of newer segments. */
        struct auditlog__seg *it = list;
        size_t n_done = 0;
        while (it != s) {
            struct auditlog__seg *nx = it->next;
            auditlog__seg_release(l, it);
            it = nx;
            n_done++;
        }
        struct auditlog__seg *spare = auditlog__free_trim(l, n_done + AUDITLOG__FREE_QUIET);
        if (s) {
            struct auditlog__seg *last = s;
            while (last->next)
                last = last->next;
            last->next = l->pend_head;
            if (!l->pend_head)
                l->pend_tail = last;
            l->pend_head = s;
        }
        l->pending_bytes -= done_bytes;
        if (rc == 0 && done_seq) {
            l->durable_seq = done_seq;
            pthread_cond_broadcast(&l->synced);
        } else if (rc == 0 && !s) {
            pthread_cond_broadcast(&l->synced);
        }
        pthread_mutex_unlock(&l->mu);
        auditlog__segs_free(spare);
        if (rc)
            auditlog__set_status(l, rc, rc_fatal || fatal);
        else if (was_failing)
            auditlog__set_status(l, 0, false);
        if (rc == 0 && l->prune.seq && al_auditlog_durable_seq(l) >= l->prune.seq)
            auditlog__prune(l);
        pthread_mutex_lock(&l->mu);
        if (l->stopping && l->close_pushed && (!l->pend_head || l->status))
            break;
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- open: find the end of the chain ------------------------------------------------------- */

struct auditlog__tail {
    bool found;
    uint64_t seq;
    char head[AL_AUDITLOG_HASH_HEX + 1];
    uint64_t valid_end; /* offset just after the last valid record's '\n' */
    uint64_t size;
    bool has_newline; /* the file holds at least one '\n' */
    bool all_nul;     /* every byte is NUL (or the file is empty) */
};

/* Finds the last complete line of this log in path, scanning back at most
 * AUDITLOG__TAIL_SCAN bytes. */
static int auditlog__scan_tail(const char *path, const char *log_id, struct auditlog__tail *t,
                               struct al_error *err)
{
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return al_error_set(err, -e, "cannot stat %s: %s", path, strerror(e));
    }
    t->size = (uint64_t)st.st_size;
    uint64_t start = t->size > AUDITLOG__TAIL_SCAN ? t->size - AUDITLOG__TAIL_SCAN : 0;
    size_t len = (size_t)(t->size - start);
    char *buf = malloc(len + 1);
    if (!buf) {
        close(fd);
        return al_error_set(err, -ENOMEM, "out of memory");
    }
    ssize_t r = pread(fd, buf, len, (off_t)start);
    close(fd);
    if (r < 0 || (size_t)r != len) {
        free(buf);
        return al_error_set(err, -EIO, "cannot read %s", path);
    }
    t->all_nul = true;
    for (size_t i = 0; i < len && t->all_nul; i++)
        t->all_nul = buf[i] == '\0';
    t->has_newline = memchr(buf, '\n', len) != NULL;
    /* Walk complete lines backwards. */
    size_t end = len;
    while (end > 0) {
        char *nl = memrchr(buf, '\n', end);
        if (!nl)
            break;
        size_t lend = (size_t)(nl - buf);
        char *pnl = lend ? memrchr(buf, '\n', lend) : NULL;
        size_t lstart = pnl ? (size_t)(pnl - buf) + 1 : 0;
        if (!pnl && start > 0)
            break; /* the line may start before the scanned window */
        json_t *j = json_loadb(buf + lstart, lend - lstart, AUDITLOG__JSON_FLAGS, NULL);
        struct auditlog__fields f;
        const char *why;
        bool ok = j && auditlog__fields(j, &f, &why) == 0 && strcmp(f.log_id, log_id) == 0;
        if (ok) {
            t->found = true;
            t->seq = f.seq;
            auditlog__hash_hex(buf + lstart, lend - lstart, t->head);
            t->valid_end = start + lend + 1;
        }
        json_decref(j);
        if (ok)
            break;
        end = lstart;
    }
    free(buf);
    return 0;
}

static int auditlog__ckpt_file_last(const char *path, uint64_t *covers)
{
    *covers = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size == 0) {
        close(fd);
        return 0;
    }
    size_t len = st.st_size > 8192 ? 8192 : (size_t)st.st_size;
    char buf[8193];
    ssize_t r = pread(fd, buf, len, st.st_size - (off_t)len);
    close(fd);
    if (r != (ssize_t)len)
        return -EIO;
    size_t end = len;
    while (end > 0 && buf[end - 1] != '\n')
        end--; /* ignore an incomplete last line */
    if (end == 0)
        return 0;
    end--;
    char *pnl = end ? memrchr(buf, '\n', end) : NULL;
    size_t lstart = pnl ? (size_t)(pnl - buf) + 1 : 0;
    json_t *j = json_loadb(buf + lstart, end - lstart, AUDITLOG__JSON_FLAGS, NULL);
    json_t *s = json_object_get(j, "seq");
    if (json_is_integer(s) && json_integer_value(s) > 0)
        *covers = (uint64_t)json_integer_value(s);
    json_decref(j);
    return 0;
}

static void auditlog__free(struct al_auditlog *l)
{
    auditlog__segs_free(l->pend_head);
    auditlog__segs_free(l->free_segs);
    if (l->fd >= 0)
        close(l->fd);
    if (l->ckpt_fd >= 0)
        close(l->ckpt_fd);
    if (l->lock_fd >= 0)
        close(l->lock_fd); /* releases the flock */
    if (l->sk)
        sodium_free(l->sk);
    auditlog__prune_free(&l->prune);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->wake);
    pthread_cond_destroy(&l->synced);
    free(l);
}

static int auditlog__lock(struct al_auditlog *l, struct al_error *err)
{
    char path[AL_AUDITLOG_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/%s.lock", l->dir, l->prefix);
    l->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (l->lock_fd < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
    if (flock(l->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t r = pread(l->lock_fd, pid, sizeof pid - 1, 0);
        pid[r > 0 ? r : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (e == EWOULDBLOCK)
            return al_error_set(err, -EBUSY,
                                "the audit log %s/%s is being written by another process%s%s%s; "
                                "only one writer may hold it: stop that process or use another "
                                "directory",
                                l->dir, l->prefix, *pid ? " (pid " : "", pid, *pid ? ")" : "");
        return al_error_set(err, -e, "cannot lock %s: %s", path, strerror(e));
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(l->lock_fd, 0) == 0 && pwrite(l->lock_fd, pid, (size_t)n, 0) != n)
        al_debug("audit log: cannot record the pid in %s", path);
    return 0;
}

int al_auditlog_open(const struct al_auditlog_opts *o, struct al_auditlog **out,
                     struct al_error *err)
{
    *out = NULL;
    if (!o || !o->dir || !*o->dir)
        return al_error_set(err, -EINVAL, "audit log: a directory is required");
    if (!auditlog__prefix_ok(o->prefix))
        return al_error_set(err, -EINVAL,
                            "audit log: invalid prefix '%s' (use 1-32 characters of a-z 0-9 _ -)",
                            o->prefix ? o->prefix : "");
    if (sodium_init() < 0)
        return al_error_set(err, -EIO, "libsodium failed to initialise");
    struct al_auditlog *l = calloc(1, sizeof *l);
    if (!l)
        return al_error_set(err, -ENOMEM, "out of memory");
    l->fd = l->ckpt_fd = l->lock_fd = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->wake, &ca);
    pthread_cond_init(&l->synced, &ca);
    pthread_condattr_destroy(&ca);

    int rc = 0;
    if (snprintf(l->dir, sizeof l->dir, "%s", o->dir) >= (int)sizeof l->dir - 80) {
        rc = al_error_set(err, -ENAMETOOLONG, "audit log: directory path too long");
        goto fail;
    }
    snprintf(l->prefix, sizeof l->prefix, "%s", o->prefix);
    if (o->key_file && *o->key_file)
        snprintf(l->key_path, sizeof l->key_path, "%s", o->key_file);
    else
        snprintf(l->key_path, sizeof l->key_path, "%s/%s.key", l->dir, l->prefix);
    if (o->checkpoint_file)
        snprintf(l->ckpt_path, sizeof l->ckpt_path, "%s", o->checkpoint_file);
    else
        snprintf(l->ckpt_path, sizeof l->ckpt_path, "%s/%s.checkpoints", l->dir, l->prefix);
    l->sync_ms = o->sync_interval_ms && o->sync_interval_ms < 100 ? o->sync_interval_ms : 100;
    l->ckpt_records = o->checkpoint_records ? o->checkpoint_records : 10000;
    l->ckpt_ms = o->checkpoint_interval_ms ? o->checkpoint_interval_ms : 60000;
    l->rotate_bytes = o->rotate_bytes ? o->rotate_bytes : 64ull * 1024 * 1024;
    l->rotate_ms = o->rotate_interval_ms;
    l->retain.max_files = o->retain_files;
    l->retain.max_age_ms = o->retain_age_ms;
    l->retain.max_bytes = o->retain_bytes;
    snprintf(l->hist_path, sizeof l->hist_path, "%s/%s.retention", l->dir, l->prefix);
    l->max_pending = o->max_pending_bytes ? o->max_pending_bytes : 64u * 1024 * 1024;
    l->file_mode = o->file_mode ? o->file_mode : 0640;
    l->on_state = o->on_state;
    l->arg = o->arg;

    rc = al_mkdir_p(l->dir, 0750);
    if (rc) {
        al_error_set(err, rc, "cannot create the audit log directory %s: %s", l->dir,
                     strerror(-rc));
        goto fail;
    }
    if ((rc = auditlog__lock(l, err)) != 0)
        goto fail;

    struct auditlog__file *files = NULL;
    size_t nfiles = 0;
    if ((rc = auditlog__list(l->dir, l->prefix, &files, &nfiles, err)) != 0)
        goto fail;

    l->sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
    if (!l->sk) {
        free(files);
        rc = al_error_set(err, -ENOMEM, "out of memory");
        goto fail;
    }
    struct stat kst;
    if (stat(l->key_path, &kst) == 0) {
        rc = auditlog__key_load(l->key_path, l->log_id, l->pk, l->sk, err);
    } else if (nfiles > 0) {
        rc = al_error_set(err, -ENOENT,
                          "the audit log %s/%s has %zu file(s) but its signing key %s is "
                          "missing: restore the key (a new key would break verification), or "
                          "move the old files away to start a new log",
                          l->dir, l->prefix, nfiles, l->key_path);
    } else {
        char pub[AL_AUDITLOG_PATH_MAX + 48];
        snprintf(pub, sizeof pub, "%s/%s.pub", l->dir, l->prefix);
        rc = auditlog__key_create(l->key_path, pub, l->log_id, l->pk, l->sk, err);
        if (rc == 0)
            al_info("audit log %s/%s: created signing key %s (public key %s)", l->dir, l->prefix,
                    l->key_path, pub);
    }
    if (rc) {
        free(files);
        goto fail;
    }
    auditlog__key_id(l->pk, l->key_id);

    /* Find where the chain ends. */
    json_t *recovered = NULL;
    bool found = false, new_file = true;
    struct auditlog__tail t = {0};
    while (nfiles > 0 && !found) {
        struct auditlog__file *f = &files[nfiles - 1];
        rc = auditlog__scan_tail(f->path, l->log_id, &t, err);
        if (rc) {
            free(files);
            json_decref(recovered);
            goto fail;
        }
        if (t.found) {
            found = true;
            if (t.valid_end == t.size) {
                new_file = false;
                rc = open(f->path, O_WRONLY | O_APPEND | O_CLOEXEC);
                if (rc < 0) {
                    rc = al_error_set(err, -errno, "cannot open %s for appending: %s", f->path,
                                      strerror(errno));
                    free(files);
                    json_decref(recovered);
                    goto fail;
                }
                l->fd = rc;
                rc = 0;
                snprintf(l->cur_name, sizeof l->cur_name, "%s", f->name);
                l->file_bytes = t.size;
            } else if (!recovered) {
                recovered =
                    json_pack("{s:s,s:I,s:I}", "file", f->name, "offset", (json_int_t)t.valid_end,
                              "bytes", (json_int_t)(t.size - t.valid_end));
                al_warn("audit log: %s ends with %" PRIu64 " bytes of an interrupted write "
                        "after seq %" PRIu64 "; continuing the chain in a new file",
                        f->path, t.size - t.valid_end, t.seq);
            }
        } else if (t.size == 0 || t.all_nul) {
            /* A file created just before a crash: nothing in it to keep. */
            al_warn("audit log: removing %s (%" PRIu64 " bytes, no record: created just "
                    "before a crash)",
                    f->path, t.size);
            unlink(f->path);
            al_fsync_dir(l->dir);
            nfiles--;
        } else if (!t.has_newline && t.size < AL_AUDITLOG_MAX_RECORD) {
            /* Only a torn first line: keep it for inspection, out of the chain. */
            char torn[AL_AUDITLOG_PATH_MAX + 8];
            snprintf(torn, sizeof torn, "%s.torn", f->path);
            if (rename(f->path, torn) < 0) {
                rc = al_error_set(err, -errno, "cannot rename %s: %s", f->path, strerror(errno));
                free(files);
                json_decref(recovered);
                goto fail;
            }
            al_fsync_dir(l->dir);
            al_warn("audit log: %s held only a torn line (%" PRIu64 " bytes); kept as %s", f->path,
                    t.size, torn);
            json_decref(recovered);
            recovered = json_pack("{s:s,s:I,s:I}", "file", strrchr(torn, '/') + 1, "offset",
                                  (json_int_t)0, "bytes", (json_int_t)t.size);
            nfiles--;
        } else {
            rc = al_error_set(err, -EBADMSG,
                              "%s holds no record of this log (log id %s) near its end: it is "
                              "corrupted or belongs to another log; run `airlock audit verify` "
                              "and move the file away before writing again",
                              f->path, l->log_id);
            free(files);
            json_decref(recovered);
            goto fail;
        }
    }
    uint64_t oldest = nfiles ? files[0].first_seq : 0;
    free(files);
    auditlog__history_load(l->hist_path, l->log_id, &l->hist);
    if (!found) {
        auditlog__history_reset(&l->hist); /* a new log */
    } else if (oldest > l->hist.retained_from) {
        /* The log starts later than what retention deleted: someone else deleted files (or
         * the history file was lost). The next retention record says so. */
        al_warn("audit log %s/%s: seq %" PRIu64 "..%" PRIu64 " are missing from the start of "
                "the log and retention did not delete them (%s says it deleted up to seq "
                "%" PRIu64 "): they are recorded as unaccounted, and verification reports them",
                l->dir, l->prefix, l->hist.retained_from, oldest - 1, l->hist_path,
                l->hist.retained_from - 1);
        auditlog__history_add(&l->hist,
                              &(struct auditlog__range){.first_seq = l->hist.retained_from,
                                                        .last_seq = oldest - 1,
                                                        .rule = "unaccounted"});
        l->hist_dirty = true;
    } else if (oldest < l->hist.retained_from) {
        /* Announced but not deleted (a crash in between): they are still part of the log. */
        while (l->hist.n && l->hist.r[l->hist.n - 1].first_seq >= oldest)
            l->hist.n--;
        if (l->hist.n && l->hist.r[l->hist.n - 1].last_seq >= oldest)
            l->hist.r[l->hist.n - 1].last_seq = oldest - 1;
        l->hist.retained_from = oldest;
    }
    if (found) {
        l->next_seq = t.seq + 1;
        memcpy(l->head, t.head, sizeof l->head);
    } else {
        l->next_seq = 1;
        memset(l->head, '0', AL_AUDITLOG_HASH_HEX);
        l->head[AL_AUDITLOG_HASH_HEX] = '\0';
    }

    if (l->ckpt_path[0]) {
        uint64_t last_ckpt = 0;
        auditlog__ckpt_file_last(l->ckpt_path, &last_ckpt);
        if (last_ckpt >= l->next_seq) {
            rc = al_error_set(err, -EBADMSG,
                              "the audit log %s/%s ends at seq %" PRIu64 " but its checkpoint "
                              "file %s shows that seq %" PRIu64 " was written: log files were "
                              "deleted or truncated; restore them (refusing to write a second "
                              "history)",
                              l->dir, l->prefix, l->next_seq - 1, l->ckpt_path, last_ckpt);
            json_decref(recovered);
            goto fail;
        }
        l->ckpt_fd = open(l->ckpt_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (l->ckpt_fd < 0) {
            rc = al_error_set(err, -errno, "cannot open the checkpoint file %s: %s", l->ckpt_path,
                              strerror(errno));
            json_decref(recovered);
            goto fail;
        }
    }

    l->last_ckpt_ns = l->file_opened_ns = al_now_ns();
    if (!new_file) {
        /* A continued file is as old as the time in its name (for rotation by age). */
        uint64_t born = auditlog__name_time(l->cur_name);
        uint64_t wall = al_wall_ns();
        if (born && born < wall && wall - born < l->file_opened_ns)
            l->file_opened_ns -= wall - born;
    }
    pthread_mutex_lock(&l->mu);
    rc = auditlog__checkpoint_locked(l, found ? "open" : "start",
                                     new_file ? SEG_NEWFILE : SEG_CHECKPOINT, recovered);
    l->st_rotations = 0;
    pthread_mutex_unlock(&l->mu);
    json_decref(recovered);
    if (rc) {
        al_error_set(err, rc, "audit log: cannot write the opening checkpoint");
        goto fail;
    }
    l->durable_seq = l->next_seq - 2;
    l->retention_due = true;
    if ((rc = -pthread_create(&l->thread, NULL, auditlog__thread, l)) != 0) {
        al_error_set(err, rc, "audit log: cannot start the writer thread");
        goto fail;
    }
    l->thread_started = true;
    *out = l;
    return 0;
fail:
    auditlog__free(l);
    return rc;
}

int al_auditlog_close(struct al_auditlog *l)
{
    if (!l)
        return 0;
    /* The writer thread finishes a retention pass that is due, then writes the "close"
     * checkpoint (the last record) and stops. */
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    if (l->thread_started)
        pthread_join(l->thread, NULL);
    int rc = l->status;
    if (rc == 0 && l->pend_head)
        rc = -EIO;
    auditlog__free(l);
    return rc;
}

/* ==== redaction helpers ==================================================================== */

size_t al_audit_redact_path(const char *target, char *out, size_t outlen)
{
    if (!outlen)
        return 0;
    const char *p = target ? target : "";
    const char *scheme = strstr(p, "://");
    if (scheme && p[0] != '/') {
        /* absolute URI: drop scheme://userinfo@authority */
        const char *auth = scheme + 3;
        const char *path = auth + strcspn(auth, "/?#");
        p = path;
    }
    size_t n = strcspn(p, "?#");
    if (n == 0 && (*p == '?' || *p == '#' || *p == '\0')) {
        snprintf(out, outlen, "/");
        return strlen(out);
    }
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return n;
}

void al_audit_keyed_id(const unsigned char key[32], const void *value, size_t len, char *out)
{
    unsigned char h[16];
    crypto_generichash(h, sizeof h, value, len, key, 32);
    memcpy(out, "b2k:", 4);
    sodium_bin2hex(out + 4, 33, h, sizeof h);
    sodium_memzero(h, sizeof h);
}

static bool auditlog__memmem(const char *hay, size_t hl, const char *needle, size_t nl)
{
    return nl > 0 && nl <= hl && memmem(hay, hl, needle, nl) != NULL;
}

bool al_audit_line_contains_secret(const char *line, size_t len, const void *secret,
                                   size_t secret_len)
{
    if (!secret_len)
        return false;
    if (auditlog__memmem(line, len, secret, secret_len))
        return true;
    bool found = false;
    size_t hl = secret_len * 2 + 1;
    char *hex = malloc(hl);
    if (hex) {
        sodium_bin2hex(hex, hl, secret, secret_len);
        found = auditlog__memmem(line, len, hex, secret_len * 2);
        for (size_t i = 0; i < secret_len * 2 && !found; i++)
            hex[i] = (char)toupper((unsigned char)hex[i]);
        found = found || auditlog__memmem(line, len, hex, secret_len * 2);
        free(hex);
    }
    /* Base64 at each of the three alignments, both alphabets: compare the characters that
     * depend only on the secret's bytes. */
    static const int variants[] = {sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
                                   sodium_base64_VARIANT_URLSAFE_NO_PADDING};
    unsigned char *tmp = malloc(secret_len + 2);
    size_t bl = sodium_base64_ENCODED_LEN(secret_len + 2, sodium_base64_VARIANT_ORIGINAL);
    char *b64 = malloc(bl);
    for (int shift = 0; shift < 3 && !found && tmp && b64; shift++) {
        memset(tmp, 0, 2);
        memcpy(tmp + shift, secret, secret_len);
        size_t total = secret_len + (size_t)shift;
        for (size_t v = 0; v < 2 && !found; v++) {
            sodium_bin2base64(b64, bl, tmp, total, variants[v]);
            size_t skip = shift ? 4 : 0;   /* group mixing the padding */
            size_t keep = (total / 3) * 4; /* complete groups */
            if (keep > skip + 4)
                found = auditlog__memmem(line, len, b64 + skip, keep - skip);
        }
    }
    if (tmp)
        sodium_memzero(tmp, secret_len + 2);
    if (b64)
        sodium_memzero(b64, bl);
    free(tmp);
    free(b64);
    return found;
}
