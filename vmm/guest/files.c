/* vmm/guest/files: envd's GET /files (download) and POST /files (upload).
 *
 * Authorization: with an access token configured, X-Access-Token (when sent) must match;
 * otherwise the signature parameters must (v1_ + unpadded base64 of
 * SHA-256("path:op:user:token[:expiration]"), op read|write), as envd's uploadUrl()/
 * downloadUrl() produce them. Without a token, /files is open, as in envd.
 * Downloads stream the file in 64 KiB reads (chunked), gzip-compressed when the client
 * accepts gzip, and stop reading while the client is slow (drain callback). Uploads stream
 * the body (optionally gzip) through the multipart parser or straight into the file: memory
 * per upload is bounded by the parser window and one inflate buffer. A file created by an
 * upload that fails is removed; an existing file that is being overwritten is, as in envd,
 * written in place (watchers see WRITE events) and is truncated if the upload fails.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <zlib.h>

#include "common/log.h"
#include "common/util.h"
#include "fspath.h"
#include "multipart.h"

#define FILES_CHUNK      65536
#define FILES_HIGH_WATER (512u << 10)
#define FILES_XATTR      "user.e2b."
#define FILES_MAX_MD     4096

/* ---- authorization ------------------------------------------------------------------- */

static int files__check_auth(struct agent *a, struct al_http_req *req, const char *op, char *msg,
                             size_t msglen)
{
    if (!a->token)
        return 0;
    const char *hdr = al_http_req_header(req, "X-Access-Token");
    if (hdr) {
        if (agent_token_ok(a, hdr))
            return 0;
        snprintf(msg, msglen, "access token present in header but does not match");
        return -EACCES;
    }
    char sig[256], exp[32], path[PATH_MAX], user[256] = "";
    if (al_http_query_get(req->query, "signature", sig, sizeof sig) < 0) {
        snprintf(msg, msglen, "missing signature query parameter (or X-Access-Token header)");
        return -EACCES;
    }
    if (al_http_query_get(req->query, "path", path, sizeof path) < 0)
        path[0] = '\0';
    al_http_query_get(req->query, "username", user, sizeof user);
    bool has_exp = al_http_query_get(req->query, "signature_expiration", exp, sizeof exp) == 0;
    /* path:op:user:token[:exp] */
    size_t n = strlen(path) + strlen(op) + strlen(user) + a->token_len + strlen(exp) + 8;
    char *plain = sodium_malloc(n);
    if (!plain) {
        snprintf(msg, msglen, "out of memory");
        return -ENOMEM;
    }
    int len = snprintf(plain, n, "%s:%s:%s:%s%s%s", path, op, user, a->token, has_exp ? ":" : "",
                       has_exp ? exp : "");
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(h, (const unsigned char *)plain, (unsigned long long)len);
    sodium_memzero(plain, n);
    sodium_free(plain);
    char expect[3 + sodium_base64_ENCODED_LEN(crypto_hash_sha256_BYTES,
                                              sodium_base64_VARIANT_ORIGINAL_NO_PADDING)];
    memcpy(expect, "v1_", 3);
    sodium_bin2base64(expect + 3, sizeof expect - 3, h, sizeof h,
                      sodium_base64_VARIANT_ORIGINAL_NO_PADDING);
    size_t el = strlen(expect);
    if (strlen(sig) != el || sodium_memcmp(expect, sig, el) != 0) {
        snprintf(msg, msglen, "invalid signature");
        return -EACCES;
    }
    if (has_exp) {
        char *end;
        long long e = strtoll(exp, &end, 10);
        if (!*exp || *end || e < (long long)time(NULL)) {
            snprintf(msg, msglen, "signature is already expired");
            return -EACCES;
        }
    }
    return 0;
}

static int files__user(struct agent *a, struct al_http_req *req, struct agent_user *u)
{
    char name[256];
    int r = al_http_query_get(req->query, "username", name, sizeof name);
    if (r == -E2BIG || r == -EINVAL) {
        agent_reply_error(req, 400, "invalid username parameter");
        return -EINVAL;
    }
    struct al_error e = {0};
    r = agent_resolve_user(a, r == 0 && name[0] ? name : NULL, u, &e);
    if (r == -ENOENT) {
        agent_reply_error(req, 401, "error looking up user: %s", al_error_str(&e));
        return r;
    }
    if (r < 0) {
        agent_reply_error(req, 403, "%s", al_error_str(&e));
        return r;
    }
    return 0;
}

/* ---- download ------------------------------------------------------------------------ */

struct files__dl {
    struct agent *a;
    struct al_http_req *req;
    int fd;
    bool gzip;
    z_stream z;
    bool z_init;
    bool done;
    uint64_t sent;
};

static void files__dl_free(struct files__dl *d)
{
    if (d->fd >= 0)
        close(d->fd);
    if (d->z_init)
        deflateEnd(&d->z);
    free(d);
}

static void files__dl_on_close(struct al_http_req *req)
{
    struct files__dl *d = req->user;
    req->user = NULL;
    if (d)
        files__dl_free(d);
}

static void files__dl_pump(struct files__dl *d);

static void files__dl_on_drain(struct al_http_req *req)
{
    struct files__dl *d = req->user;
    if (d)
        files__dl_pump(d);
}

static void files__dl_finish(struct files__dl *d)
{
    d->done = true;
    d->req->user = NULL;
    al_http_resp_end(d->req);
    files__dl_free(d);
}

static void files__dl_pump(struct files__dl *d)
{
    char in[FILES_CHUNK], out[FILES_CHUNK];
    while (!d->done && al_http_resp_queued(d->req) < FILES_HIGH_WATER) {
        ssize_t n = read(d->fd, in, sizeof in);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            n = 0; /* not a regular file after all: end here */
        }
        if (n < 0) {
            /* Never end it as if complete: the client must see a broken download. */
            al_warn("download: read error after %llu bytes: %s; aborting the response",
                    (unsigned long long)d->sent, strerror(errno));
            d->done = true;
            d->req->user = NULL;
            al_http_resp_abort(d->req);
            files__dl_free(d);
            return;
        }
        if (!d->gzip) {
            if (n == 0) {
                files__dl_finish(d);
                return;
            }
            al_http_resp_write(d->req, in, (size_t)n);
            d->sent += (uint64_t)n;
            continue;
        }
        d->z.next_in = (Bytef *)in;
        d->z.avail_in = (uInt)n;
        int flush = n == 0 ? Z_FINISH : Z_NO_FLUSH;
        int zr;
        do {
            d->z.next_out = (Bytef *)out;
            d->z.avail_out = sizeof out;
            zr = deflate(&d->z, flush);
            size_t have = sizeof out - d->z.avail_out;
            if (have)
                al_http_resp_write(d->req, out, have);
        } while (d->z.avail_out == 0 || (flush == Z_FINISH && zr == Z_OK));
        d->sent += (uint64_t)n;
        if (n == 0) {
            files__dl_finish(d);
            return;
        }
    }
    if (!d->done)
        al_http_resp_on_drain(d->req, FILES_HIGH_WATER / 4, files__dl_on_drain);
}

/* envd's choice: the best q among gzip/identity/'*', header order breaking ties. Returns
 * 1 for gzip, 0 for identity, -1 when nothing acceptable. */
static int files__accept_gzip(const char *h)
{
    if (!h || !*h)
        return 0;
    double best_q = -1, id_q = -1, star_q = -1;
    int best = 0;
    const char *p = h;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *s = p;
        while (*p && *p != ',' && *p != ';')
            p++;
        size_t l = (size_t)(p - s);
        while (l && s[l - 1] == ' ')
            l--;
        double q = 1.0;
        if (*p == ';') {
            const char *qs = strstr(p, "q=");
            const char *comma = strchr(p, ',');
            if (qs && (!comma || qs < comma))
                q = strtod(qs + 2, NULL);
            while (*p && *p != ',')
                p++;
        }
        int kind = -1;
        if (l == 4 && strncasecmp(s, "gzip", 4) == 0)
            kind = 1;
        else if (l == 8 && strncasecmp(s, "identity", 8) == 0) {
            kind = 0;
            id_q = q;
        } else if (l == 1 && s[0] == '*') {
            kind = 2;
            star_q = q;
        }
        if (kind >= 0 && q > 0 && q > best_q) {
            best_q = q;
            best = kind;
        }
    }
    bool id_rejected = id_q == 0 || (star_q == 0 && id_q < 0);
    if (best_q <= 0)
        return id_rejected ? -1 : 0;
    if (best == 2)
        return id_rejected ? 1 : 0;
    return best;
}

static void files__content_disposition(const char *name, char *out, size_t outlen)
{
    bool token = *name != '\0', ascii = true;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p < 0x20 || *p >= 0x7f)
            ascii = token = false;
        else if (strchr("()<>@,;:\\\"/[]?= ", *p))
            token = false;
    }
    if (token) {
        snprintf(out, outlen, "inline; filename=%s", name);
    } else if (ascii) {
        size_t o = (size_t)snprintf(out, outlen, "inline; filename=\"");
        for (const char *p = name; *p && o + 3 < outlen; p++) {
            if (*p == '"' || *p == '\\')
                out[o++] = '\\';
            out[o++] = *p;
        }
        snprintf(out + o, outlen - o, "\"");
    } else {
        size_t o = (size_t)snprintf(out, outlen, "inline; filename*=utf-8''");
        for (const unsigned char *p = (const unsigned char *)name; *p && o + 4 < outlen; p++) {
            if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("!#$&+-.^_`|~", *p))
                out[o++] = (char)*p;
            else
                o += (size_t)snprintf(out + o, outlen - o, "%%%02X", *p);
        }
        out[o] = '\0';
    }
}

static void files__get(struct agent *a, struct al_http_req *req)
{
    struct agent_user u;
    if (files__user(a, req, &u) < 0)
        return;
    char raw[PATH_MAX], path[PATH_MAX];
    int r = al_http_query_get(req->query, "path", raw, sizeof raw);
    if (r == -E2BIG || r == -EINVAL) {
        agent_reply_error(req, 400, "invalid path parameter");
        return;
    }
    if (r == -ENOENT)
        raw[0] = '\0';
    struct al_error e = {0};
    if (agent_path_resolve(raw, u.home, a->default_workdir, path, sizeof path, &e) < 0) {
        agent_reply_error(req, 400, "error expanding and resolving path '%s': %s", raw,
                          al_error_str(&e));
        return;
    }
    struct stat st;
    if (stat(path, &st) < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            agent_reply_error(req, 404, "path '%s' does not exist", path);
        else
            agent_reply_error(req, 500, "error checking if path exists '%s': %s", path,
                              strerror(errno));
        return;
    }
    if (S_ISDIR(st.st_mode)) {
        agent_reply_error(req, 400, "path '%s' is a directory", path);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        agent_reply_error(req, 400,
                          "path '%s' is not a regular file (a device, pipe or socket "
                          "cannot be downloaded)",
                          path);
        return;
    }
    int gz = files__accept_gzip(al_http_req_header(req, "Accept-Encoding"));
    if (gz < 0) {
        agent_reply_error(req, 406, "no acceptable encoding found, supported: [gzip identity]");
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        agent_reply_error(req, errno == ENOENT ? 404 : 500, "error opening file '%s': %s", path,
                          strerror(errno));
        return;
    }
    struct files__dl *d = calloc(1, sizeof *d);
    d->a = a;
    d->req = req;
    d->fd = fd;
    d->gzip = gz == 1;
    if (d->gzip) {
        if (deflateInit2(&d->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                         Z_DEFAULT_STRATEGY) != Z_OK) {
            files__dl_free(d);
            agent_reply_error(req, 500, "cannot start gzip compression");
            return;
        }
        d->z_init = true;
    }
    char cd[1024];
    files__content_disposition(agent_path_base(path), cd, sizeof cd);
    struct al_http_header h[5] = {
        {"Content-Type", "application/octet-stream"},
        {"Content-Disposition", cd},
        {"Vary", "Accept-Encoding"},
        {"Cache-Control", "no-store"},
        {"Content-Encoding", "gzip"},
    };
    req->user = d;
    al_http_req_on_close(req, files__dl_on_close);
    al_http_resp_start(req, 200, h, d->gzip ? 5 : 4, -1);
    al_debug("download %s (%lld bytes%s)", path, (long long)st.st_size, d->gzip ? ", gzip" : "");
    files__dl_pump(d);
}

/* ---- upload -------------------------------------------------------------------------- */

struct files__up {
    struct agent *a;
    struct al_http_req *req;
    struct agent_user u;
    bool have_query_path;
    char query_path[PATH_MAX];
    bool multipart;
    struct agent_mp mp;
    bool mp_init;
    bool gzip;
    z_stream z;
    bool z_init;
    int fd;
    bool skip_part;
    bool cur_new;
    char cur[PATH_MAX];
    uint64_t total;
    json_t *results;
    json_t *metadata;
    int status; /* 0 while fine, else the HTTP error to answer */
    char msg[768];
};

static void files__up_fail(struct files__up *up, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void files__up_fail(struct files__up *up, int status, const char *fmt, ...)
{
    if (up->status)
        return;
    up->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(up->msg, sizeof up->msg, fmt, ap);
    va_end(ap);
    if (up->fd >= 0) {
        close(up->fd);
        up->fd = -1;
        if (up->cur_new)
            unlink(up->cur); /* never leave a half-written new file behind */
    }
}

static int files__open_target(struct files__up *up, const char *path)
{
    struct al_error e = {0};
    char parent[PATH_MAX];
    agent_path_dir(path, parent, sizeof parent);
    if (agent_ensure_dirs(parent, up->u.uid, up->u.gid, true, &e) < 0) {
        files__up_fail(up, 500, "error ensuring directories: %s", al_error_str(&e));
        return -1;
    }
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) {
        files__up_fail(up, 400, "path is a directory: %s", path);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
    if (fd < 0) {
        int err = errno;
        if (err == ENOSPC || err == EDQUOT)
            files__up_fail(up, 507, "not enough inodes available: %s", strerror(err));
        else
            files__up_fail(up, 500, "error opening file '%s': %s", path, strerror(err));
        return -1;
    }
    if (fchown(fd, up->u.uid, up->u.gid) < 0 && up->u.uid != getuid()) {
        int err = errno;
        close(fd);
        if (!exists)
            unlink(path);
        files__up_fail(up, 500, "error changing file ownership: %s", strerror(err));
        return -1;
    }
    up->fd = fd;
    up->cur_new = !exists;
    snprintf(up->cur, sizeof up->cur, "%s", path);
    return 0;
}

static int files__write_all(struct files__up *up, const char *data, size_t len)
{
    if (up->status || up->fd < 0)
        return 0;
    up->total += len;
    if (up->total > up->a->lim.max_upload_bytes) {
        files__up_fail(up, 413, "upload exceeds %llu bytes",
                       (unsigned long long)up->a->lim.max_upload_bytes);
        return 0;
    }
    while (len) {
        ssize_t n = write(up->fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;
            if (err == ENOSPC || err == EDQUOT)
                files__up_fail(up, 507,
                               "attempted to write %llu bytes: not enough disk space available",
                               (unsigned long long)up->total);
            else
                files__up_fail(up, 500, "error writing file: %s", strerror(err));
            return 0;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

static void files__finish_file(struct files__up *up)
{
    if (up->status || up->fd < 0)
        return;
    /* Replace the file's metadata with exactly what this request carried. */
    char names[8192];
    ssize_t nl = flistxattr(up->fd, names, sizeof names);
    for (ssize_t off = 0; off < nl;) {
        const char *n = names + off;
        off += (ssize_t)strlen(n) + 1;
        if (strncmp(n, FILES_XATTR, strlen(FILES_XATTR)) == 0 &&
            !(up->metadata && json_object_get(up->metadata, n + strlen(FILES_XATTR))))
            fremovexattr(up->fd, n);
    }
    const char *k;
    json_t *v;
    json_object_foreach(up->metadata, k, v)
    {
        char xn[300];
        snprintf(xn, sizeof xn, FILES_XATTR "%s", k);
        if (fsetxattr(up->fd, xn, json_string_value(v), json_string_length(v), 0) < 0 &&
            errno != ENOTSUP) {
            if (errno == ENOSPC || errno == EDQUOT)
                files__up_fail(up, 507, "not enough space for file metadata");
            else
                files__up_fail(up, 500, "error writing file metadata: %s", strerror(errno));
            return;
        }
    }
    if (close(up->fd) < 0) {
        up->fd = -1;
        files__up_fail(up, 500, "error writing file: %s", strerror(errno));
        return;
    }
    up->fd = -1;
    json_t *entry = json_object();
    json_object_set_new(entry, "path", json_string(up->cur));
    json_object_set_new(entry, "name", json_string(agent_path_base(up->cur)));
    json_object_set_new(entry, "type", json_string("file"));
    if (up->metadata && json_object_size(up->metadata))
        json_object_set_new(entry, "metadata", json_deep_copy(up->metadata));
    json_array_append_new(up->results, entry);
    al_info("upload: wrote %s", up->cur);
}

static int files__on_part_begin(void *ctx, const struct agent_mp_part *part)
{
    struct files__up *up = ctx;
    up->skip_part = strcmp(part->name, "file") != 0;
    if (up->skip_part || up->status)
        return 0;
    const char *want = up->have_query_path ? up->query_path : part->filename;
    if (!up->have_query_path && !part->has_filename) {
        files__up_fail(up, 400, "filename not found in Content-Disposition header");
        return 0;
    }
    char path[PATH_MAX];
    struct al_error e = {0};
    if (agent_path_resolve(want, up->u.home, up->a->default_workdir, path, sizeof path, &e) < 0) {
        files__up_fail(up, 400, "error resolving path: %s", al_error_str(&e));
        return 0;
    }
    size_t i;
    json_t *prev;
    json_array_foreach(up->results, i, prev)
    {
        if (strcmp(json_string_value(json_object_get(prev, "path")), path) == 0) {
            files__up_fail(up, 400,
                           "you cannot upload multiple files to the same path '%s' in one upload "
                           "request, only the first specified file was uploaded",
                           path);
            return 0;
        }
    }
    files__open_target(up, path);
    return 0;
}

static int files__on_part_data(void *ctx, const char *data, size_t len)
{
    struct files__up *up = ctx;
    if (!up->skip_part)
        files__write_all(up, data, len);
    return 0;
}

static int files__on_part_end(void *ctx)
{
    struct files__up *up = ctx;
    if (!up->skip_part)
        files__finish_file(up);
    return 0;
}

static const struct agent_mp_callbacks files__mp_cb = {files__on_part_begin, files__on_part_data,
                                                       files__on_part_end};

static void files__sink(struct files__up *up, const char *data, size_t len)
{
    if (up->status)
        return;
    if (up->multipart) {
        if (agent_mp_feed(&up->mp, data, len) < 0)
            files__up_fail(up, 400, "error reading form: %s", up->mp.err);
    } else {
        files__write_all(up, data, len);
    }
}

static int files__up_on_data(struct al_http_req *req, const char *data, size_t len)
{
    struct files__up *up = req->user;
    if (up->status)
        return 0; /* already failed: discard the rest of the body */
    if (!up->gzip) {
        files__sink(up, data, len);
        return 0;
    }
    char out[FILES_CHUNK];
    up->z.next_in = (Bytef *)data;
    up->z.avail_in = (uInt)len;
    while (up->z.avail_in > 0 && !up->status) {
        up->z.next_out = (Bytef *)out;
        up->z.avail_out = sizeof out;
        int zr = inflate(&up->z, Z_NO_FLUSH);
        size_t have = sizeof out - up->z.avail_out;
        if (have)
            files__sink(up, out, have);
        if (zr == Z_STREAM_END) {
            /* concatenated gzip members are valid gzip */
            if (up->z.avail_in > 0)
                inflateReset(&up->z);
            else
                break;
        } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
            files__up_fail(up, 400, "error decompressing request body: %s",
                           up->z.msg ? up->z.msg : "invalid gzip data");
        } else if (zr == Z_BUF_ERROR && have == 0) {
            break;
        }
    }
    return 0;
}

static void files__up_free(struct files__up *up)
{
    if (up->fd >= 0) {
        close(up->fd);
        if (up->cur_new)
            unlink(up->cur);
    }
    if (up->mp_init)
        agent_mp_free(&up->mp);
    if (up->z_init)
        inflateEnd(&up->z);
    json_decref(up->results);
    json_decref(up->metadata);
    free(up);
}

static void files__up_on_end(struct al_http_req *req, int err)
{
    struct files__up *up = req->user;
    req->user = NULL;
    if (err < 0 && !up->status)
        files__up_fail(up, 400, "the upload body was cut off: %s", strerror(-err));
    if (!up->status && up->multipart && agent_mp_finish(&up->mp) < 0)
        files__up_fail(up, 400, "error reading form: %s", up->mp.err);
    if (!up->status && !up->multipart)
        files__finish_file(up);
    if (!up->status && json_array_size(up->results) == 0)
        files__up_fail(up, 400, "the upload contained no file (a multipart part named 'file')");
    if (err < 0) {
        /* a broken body means a broken connection: nobody to answer */
        al_warn("upload aborted after %llu bytes: %s", (unsigned long long)up->total,
                strerror(-err));
        files__up_free(up);
        return;
    }
    if (up->status) {
        al_warn("upload failed (%d): %s", up->status, up->msg);
        agent_reply_error(req, up->status, "%s", up->msg);
    } else {
        al_http_reply_json(req, 200, json_incref(up->results));
    }
    files__up_free(up);
}

static void files__post(struct agent *a, struct al_http_req *req)
{
    struct files__up *up = calloc(1, sizeof *up);
    up->a = a;
    up->req = req;
    up->fd = -1;
    up->results = json_array();
    if (files__user(a, req, &up->u) < 0) {
        files__up_free(up);
        return;
    }
    int r = al_http_query_get(req->query, "path", up->query_path, sizeof up->query_path);
    if (r == -E2BIG || r == -EINVAL) {
        files__up_free(up);
        agent_reply_error(req, 400, "invalid path parameter");
        return;
    }
    up->have_query_path = r == 0;
    /* X-Metadata-<key>: value -> user.e2b.<key> (lower-cased), printable ASCII only. */
    size_t total = 0;
    for (size_t i = 0; i < req->n_headers; i++) {
        const char *n = req->headers[i].name, *v = req->headers[i].value;
        if (strncasecmp(n, "X-Metadata-", 11) != 0 || !n[11])
            continue;
        char key[256];
        size_t kl = strlen(n + 11);
        if (kl >= sizeof key - strlen(FILES_XATTR)) {
            files__up_free(up);
            agent_reply_error(req, 400, "invalid metadata: key '%.64s' is too long", n + 11);
            return;
        }
        for (size_t k = 0; k <= kl; k++)
            key[k] = (char)((n[11 + k] >= 'A' && n[11 + k] <= 'Z') ? n[11 + k] + 32 : n[11 + k]);
        for (const char *p = v; *p; p++) {
            if (*p < 0x20 || *p > 0x7e) {
                files__up_free(up);
                agent_reply_error(req, 400,
                                  "invalid metadata: value for key \"%s\" contains "
                                  "non-printable-ASCII bytes",
                                  key);
                return;
            }
        }
        total += strlen(FILES_XATTR) + kl + strlen(v);
        if (total > FILES_MAX_MD) {
            files__up_free(up);
            agent_reply_error(req, 400, "invalid metadata: total metadata size exceeds %d bytes",
                              FILES_MAX_MD);
            return;
        }
        if (!up->metadata)
            up->metadata = json_object();
        if (!json_object_get(up->metadata, key))
            json_object_set_new(up->metadata, key, json_string(v));
    }
    const char *ce = al_http_req_header(req, "Content-Encoding");
    if (ce && *ce && strcasecmp(ce, "identity") != 0) {
        if (strcasecmp(ce, "gzip") != 0) {
            files__up_free(up);
            agent_reply_error(req, 400, "unsupported Content-Encoding: %.64s, supported: [gzip]",
                              ce);
            return;
        }
        up->gzip = true;
        if (inflateInit2(&up->z, 16 + MAX_WBITS) != Z_OK) {
            files__up_free(up);
            agent_reply_error(req, 500, "cannot start gzip decompression");
            return;
        }
        up->z_init = true;
    }
    const char *ct = al_http_req_header(req, "Content-Type");
    if (ct && strncasecmp(ct, "application/octet-stream", 24) == 0) {
        if (!up->have_query_path) {
            files__up_free(up);
            agent_reply_error(req, 400, "path query parameter is required for raw body upload");
            return;
        }
        char path[PATH_MAX];
        struct al_error e = {0};
        if (agent_path_resolve(up->query_path, up->u.home, a->default_workdir, path, sizeof path,
                               &e) < 0) {
            files__up_free(up);
            agent_reply_error(req, 400, "error resolving path: %s", al_error_str(&e));
            return;
        }
        if (files__open_target(up, path) < 0) {
            int st = up->status;
            char msg[768];
            snprintf(msg, sizeof msg, "%s", up->msg);
            files__up_free(up);
            agent_reply_error(req, st, "%s", msg);
            return;
        }
    } else if (ct && strncasecmp(ct, "multipart/", 10) == 0) {
        if (agent_mp_init(&up->mp, ct, &files__mp_cb, up) < 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s", up->mp.err);
            files__up_free(up);
            agent_reply_error(req, 400, "error parsing multipart form: %s", msg);
            return;
        }
        up->mp_init = true;
        up->multipart = true;
    } else {
        files__up_free(up);
        agent_reply_error(req, 400,
                          "unsupported content type: %.100s, expected multipart/form-data "
                          "or application/octet-stream",
                          ct ? ct : "(none)");
        return;
    }
    req->user = up;
    r = al_http_req_stream_body(req, files__up_on_data, files__up_on_end);
    if (r < 0) {
        req->user = NULL;
        files__up_free(up);
        agent_reply_error(req, 500, "cannot read the upload body: %s", strerror(-r));
    }
}

void agent_files_request(struct agent *a, struct al_http_req *req)
{
    bool get = strcmp(req->method, "GET") == 0;
    char msg[256];
    if (files__check_auth(a, req, get ? "read" : "write", msg, sizeof msg) < 0) {
        al_warn("%s /files refused: %s", req->method, msg);
        agent_reply_error(req, 401, "%s", msg);
        return;
    }
    if (get)
        files__get(a, req);
    else
        files__post(a, req);
}
