/* vmm/guest/fs: filesystem.Filesystem's unary calls (Stat, ListDir, MakeDir, Move, Remove)
 * and EntryInfo, exactly as envd fills it: lstat of the path; a symlink reports its
 * target's type and permission bits and the fully resolved target path; `permissions` is
 * Go's FileMode.String() of the entry itself; owner and group by name (numbers when
 * unknown); size as an int64 string; modifiedTime as an RFC 3339 timestamp; metadata from
 * user.e2b.* extended attributes.
 * The agent acts as root of the sandbox: paths are resolved against the user's home and
 * whatever it creates is handed to that user (chown), as envd does.
 */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "common/log.h"
#include "common/util.h"
#include "fspath.h"
#include "protojson.h"

#define FS_XATTR_PREFIX "user.e2b."

static const char *fs__type_name(mode_t m)
{
    switch (m & S_IFMT) {
    case S_IFREG:
        return "FILE_TYPE_FILE";
    case S_IFDIR:
        return "FILE_TYPE_DIRECTORY";
    default:
        return NULL; /* envd: anything else is UNSPECIFIED (omitted) */
    }
}

static json_t *fs__metadata(const char *path)
{
    char names[8192];
    ssize_t n = llistxattr(path, names, sizeof names);
    if (n <= 0)
        return NULL;
    json_t *md = NULL;
    size_t pl = strlen(FS_XATTR_PREFIX);
    for (ssize_t off = 0; off < n;) {
        const char *name = names + off;
        size_t nl = strnlen(name, (size_t)(n - off));
        off += (ssize_t)nl + 1;
        if (nl <= pl || strncmp(name, FS_XATTR_PREFIX, pl) != 0)
            continue;
        char val[4097];
        ssize_t vl = lgetxattr(path, name, val, sizeof val - 1);
        if (vl < 0)
            continue;
        val[vl] = '\0';
        json_t *s = json_stringn(val, (size_t)vl);
        if (!s)
            continue; /* not UTF-8: skipped, as envd does */
        if (!md)
            md = json_object();
        json_object_set_new(md, name + pl, s);
    }
    return md;
}

int agent_entry_info(struct agent *a, const char *path, json_t **out, struct al_error *err)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        int e = errno;
        return al_error_set(err, -e, "%s '%s': %s",
                            e == ENOENT ? "file not found" : "error getting file info", path,
                            strerror(e));
    }
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(agent_path_base(path)));
    mode_t type_mode = st.st_mode;
    mode_t perm = st.st_mode & 0777;
    if (S_ISLNK(st.st_mode)) {
        char real[PATH_MAX];
        const char *target = path;
        if (realpath(path, real))
            target = real;
        json_object_set_new(o, "symlinkTarget", json_string(target));
        struct stat ts;
        if (stat(target, &ts) == 0) {
            type_mode = ts.st_mode;
            perm = ts.st_mode & 0777;
        } else {
            type_mode = 0;
            perm = 0;
        }
    }
    const char *tn = fs__type_name(type_mode);
    if (tn)
        json_object_set_new(o, "type", json_string(tn));
    json_object_set_new(o, "path", json_string(path));
    if (st.st_size)
        json_object_set_new(o, "size", agent_pj_int64((int64_t)st.st_size));
    if (perm)
        json_object_set_new(o, "mode", json_integer(perm));
    char pstr[32];
    agent_go_mode_string(st.st_mode, pstr, sizeof pstr);
    json_object_set_new(o, "permissions", json_string(pstr));
    char name[256];
    agent_uid_name(&a->users, st.st_uid, name, sizeof name);
    json_object_set_new(o, "owner", json_string(name));
    agent_gid_name(&a->users, st.st_gid, name, sizeof name);
    json_object_set_new(o, "group", json_string(name));
    if (st.st_mtim.tv_sec || st.st_mtim.tv_nsec) {
        /* Years outside 0000..9999 have no RFC 3339 form: the field is left out. */
        char ts[AL_TIME_FORMAT_MAX];
        if (al_time_format(ts, sizeof ts, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                           AL_TIME_RFC3339_EXACT) > 0)
            json_object_set_new(o, "modifiedTime", json_string(ts));
    }
    json_t *md = fs__metadata(path);
    if (md)
        json_object_set_new(o, "metadata", md);
    /* Paths that are not UTF-8 make json_string fail: drop such entries. */
    if (!json_object_get(o, "name") || !json_object_get(o, "path")) {
        json_decref(o);
        return al_error_set(err, -EILSEQ, "path '%s' is not valid UTF-8", path);
    }
    *out = o;
    return 0;
}

int agent_ensure_dirs(const char *path, uid_t uid, gid_t gid, bool chown_new, struct al_error *err)
{
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof buf)
        return al_error_set(err, -ENAMETOOLONG, "path too long");
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        struct stat st;
        if (stat(buf, &st) < 0) {
            if (errno != ENOENT)
                return al_error_set(err, -errno, "failed to stat directory '%s': %s", buf,
                                    strerror(errno));
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                return al_error_set(err, -errno, "failed to create directory '%s': %s", buf,
                                    strerror(errno));
            if (chown_new && chown(buf, uid, gid) < 0)
                return al_error_set(err, -errno, "failed to chown directory '%s': %s", buf,
                                    strerror(errno));
        } else if (!S_ISDIR(st.st_mode)) {
            return al_error_set(err, -ENOTDIR, "path is a file: %s", buf);
        }
        *p = saved;
        if (!saved)
            break;
    }
    return 0;
}

static int fs__user(struct agent_call *c, struct agent_user *u)
{
    struct al_error e = {0};
    int r = agent_resolve_user(c->a, c->has_user ? c->user : NULL, u, &e);
    if (r == 0)
        return 0;
    if (r == -ENOENT && c->has_user)
        agent_rpc_error(c, AGENT_CONNECT_UNAUTHENTICATED, "invalid username: '%.128s'", c->user);
    else if (r == -ENOENT)
        agent_rpc_error(c, AGENT_CONNECT_UNAUTHENTICATED, "invalid default user: %s",
                        al_error_str(&e));
    else
        agent_rpc_error(c, AGENT_CONNECT_PERMISSION_DENIED, "%s", al_error_str(&e));
    return r;
}

static int fs__path(struct agent_call *c, const struct agent_user *u, const char *field, char *out)
{
    struct al_error e = {0};
    const char *p = "";
    int r = agent_pj_string(c->msg, field, NULL, &p, &e);
    if (r == -EINVAL) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return r;
    }
    if (memchr(p, '\0', strlen(p) + 1) != p + strlen(p)) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s contains a NUL byte", field);
        return -EINVAL;
    }
    r = agent_path_resolve(p, u->home, c->a->default_workdir, out, PATH_MAX, &e);
    if (r < 0)
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
    return r;
}

static void fs__reply_entry(struct agent_call *c, const char *path)
{
    struct al_error e = {0};
    json_t *entry;
    int r = agent_entry_info(c->a, path, &entry, &e);
    if (r < 0) {
        agent_rpc_error(c, r == -ENOENT ? AGENT_CONNECT_NOT_FOUND : AGENT_CONNECT_INTERNAL, "%s",
                        al_error_str(&e));
        return;
    }
    json_t *res = json_object();
    json_object_set_new(res, "entry", entry);
    agent_rpc_reply(c, res);
}

static void fs__stat(struct agent_call *c)
{
    struct agent_user u;
    char path[PATH_MAX];
    if (fs__user(c, &u) < 0 || fs__path(c, &u, "path", path) < 0)
        return;
    fs__reply_entry(c, path);
}

static void fs__make_dir(struct agent_call *c)
{
    struct agent_user u;
    char path[PATH_MAX];
    if (fs__user(c, &u) < 0 || fs__path(c, &u, "path", path) < 0)
        return;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            agent_rpc_error(c, AGENT_CONNECT_ALREADY_EXISTS, "directory already exists: %s", path);
        else
            agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT,
                            "path already exists but it is not a directory: %s", path);
        return;
    }
    if (errno != ENOENT) {
        agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "error getting file info: %s", strerror(errno));
        return;
    }
    struct al_error e = {0};
    if (agent_ensure_dirs(path, u.uid, u.gid, true, &e) < 0) {
        agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "%s", al_error_str(&e));
        return;
    }
    fs__reply_entry(c, path);
}

static void fs__move(struct agent_call *c)
{
    struct agent_user u;
    char src[PATH_MAX], dst[PATH_MAX], parent[PATH_MAX];
    if (fs__user(c, &u) < 0 || fs__path(c, &u, "source", src) < 0 ||
        fs__path(c, &u, "destination", dst) < 0)
        return;
    struct al_error e = {0};
    agent_path_dir(dst, parent, sizeof parent);
    if (agent_ensure_dirs(parent, u.uid, u.gid, true, &e) < 0) {
        agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "%s", al_error_str(&e));
        return;
    }
    if (rename(src, dst) < 0) {
        int err = errno;
        agent_rpc_error(c, err == ENOENT ? AGENT_CONNECT_NOT_FOUND : AGENT_CONNECT_INTERNAL,
                        "%s: rename %s %s: %s",
                        err == ENOENT ? "source file not found" : "error renaming", src, dst,
                        strerror(err));
        return;
    }
    fs__reply_entry(c, dst);
}

/* rm -rf without following symlinks; a missing path is success. */
static int fs__remove_at(int parent, const char *name, int depth)
{
    if (depth > 256)
        return -ELOOP;
    if (unlinkat(parent, name, 0) == 0)
        return 0;
    if (errno == ENOENT)
        return 0;
    if (errno != EISDIR && errno != EPERM)
        return -errno;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    int r = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        int rr = fs__remove_at(dirfd(d), de->d_name, depth + 1);
        if (rr < 0 && r == 0)
            r = rr;
    }
    closedir(d);
    if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
        r = -errno;
    return r;
}

static void fs__remove(struct agent_call *c)
{
    struct agent_user u;
    char path[PATH_MAX];
    if (fs__user(c, &u) < 0 || fs__path(c, &u, "path", path) < 0)
        return;
    if (strcmp(path, "/") == 0) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "refusing to remove '/'");
        return;
    }
    int r = fs__remove_at(AT_FDCWD, path, 0);
    if (r < 0) {
        agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "error removing file or directory '%s': %s",
                        path, strerror(-r));
        return;
    }
    agent_rpc_reply(c, NULL);
}

struct fs__walk {
    struct agent *a;
    json_t *entries;
    size_t count;
    size_t max;
    int err;
    char errmsg[512];
};

static int fs__name_cmp(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Go's filepath.WalkDir: lexical order, pre-order, symlinks not followed. */
static void fs__walk(struct fs__walk *w, const char *real_dir, const char *req_dir, int depth,
                     int max_depth)
{
    DIR *d = opendir(real_dir);
    if (!d) {
        if (!w->err) {
            w->err = -errno;
            snprintf(w->errmsg, sizeof w->errmsg, "error reading directory %s: %s", real_dir,
                     strerror(errno));
        }
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        names[n++] = strdup(de->d_name);
        if (w->count + n > w->max)
            break;
    }
    closedir(d);
    qsort(names, n, sizeof *names, fs__name_cmp);
    for (size_t i = 0; i < n; i++) {
        if (w->err || w->count >= w->max) {
            if (!w->err && w->count >= w->max) {
                w->err = -E2BIG;
                snprintf(w->errmsg, sizeof w->errmsg,
                         "the listing exceeds %zu entries: list a smaller depth or a subdirectory",
                         w->max);
            }
            break;
        }
        char rp[PATH_MAX], qp[PATH_MAX];
        if (snprintf(rp, sizeof rp, "%s/%s", strcmp(real_dir, "/") ? real_dir : "", names[i]) >=
                (int)sizeof rp ||
            snprintf(qp, sizeof qp, "%s/%s", strcmp(req_dir, "/") ? req_dir : "", names[i]) >=
                (int)sizeof qp)
            continue;
        json_t *entry;
        if (agent_entry_info(w->a, rp, &entry, NULL) == 0) {
            json_object_set_new(entry, "path", json_string(qp));
            if (json_object_get(entry, "path")) {
                json_array_append_new(w->entries, entry);
                w->count++;
            } else {
                json_decref(entry);
            }
        }
        struct stat st;
        if (depth < max_depth && lstat(rp, &st) == 0 && S_ISDIR(st.st_mode))
            fs__walk(w, rp, qp, depth + 1, max_depth);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void fs__list_dir(struct agent_call *c)
{
    struct agent_user u;
    char path[PATH_MAX];
    if (fs__user(c, &u) < 0 || fs__path(c, &u, "path", path) < 0)
        return;
    struct al_error e = {0};
    uint32_t depth = 0;
    if (agent_pj_uint32(c->msg, "depth", NULL, &depth, &e) == -EINVAL) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    if (depth == 0)
        depth = 1;
    if (depth > 4096)
        depth = 4096;
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        int err = errno;
        if (err == ENOENT)
            agent_rpc_error(c, AGENT_CONNECT_NOT_FOUND, "path not found: %s", path);
        else if (err == ELOOP)
            agent_rpc_error(c, AGENT_CONNECT_FAILED_PRECONDITION,
                            "cyclic symlink or chain >255 links at \"%s\"", path);
        else
            agent_rpc_error(c, AGENT_CONNECT_INTERNAL, "error resolving symlink: %s",
                            strerror(err));
        return;
    }
    struct stat st;
    if (stat(real, &st) < 0) {
        agent_rpc_error(c, errno == ENOENT ? AGENT_CONNECT_NOT_FOUND : AGENT_CONNECT_INTERNAL,
                        "directory not found: %s", real);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "path is not a directory: %s", real);
        return;
    }
    struct fs__walk w = {c->a, json_array(), 0, c->a->lim.max_list_entries, 0, ""};
    fs__walk(&w, real, path, 1, (int)depth);
    if (w.err) {
        json_decref(w.entries);
        agent_rpc_error(c,
                        w.err == -E2BIG ? AGENT_CONNECT_RESOURCE_EXHAUSTED : AGENT_CONNECT_INTERNAL,
                        "%s", w.errmsg);
        return;
    }
    json_t *res = json_object();
    json_object_set_new(res, "entries", w.entries);
    agent_rpc_reply(c, res);
}

void agent_fs_call(struct agent_call *c)
{
    const char *m = c->method;
    if (strcmp(m, "Stat") == 0)
        fs__stat(c);
    else if (strcmp(m, "ListDir") == 0)
        fs__list_dir(c);
    else if (strcmp(m, "MakeDir") == 0)
        fs__make_dir(c);
    else if (strcmp(m, "Move") == 0)
        fs__move(c);
    else if (strcmp(m, "Remove") == 0)
        fs__remove(c);
    else
        agent_rpc_error(c, AGENT_CONNECT_UNIMPLEMENTED,
                        "filesystem.Filesystem/%s is not implemented", m);
}
