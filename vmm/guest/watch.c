/* vmm/guest/watch: filesystem.Filesystem/WatchDir on inotify, as envd's fsnotify does it.
 *
 * One inotify instance per stream. Recursive watches add every directory below the root at
 * start and each directory that appears later (created or moved in), up to max_watches.
 * Event mapping (fsnotify): IN_CREATE/IN_MOVED_TO -> CREATE, IN_MODIFY -> WRITE,
 * IN_ATTRIB -> CHMOD, IN_DELETE/IN_DELETE_SELF -> REMOVE, IN_MOVED_FROM/IN_MOVE_SELF ->
 * RENAME; `name` is relative to the watched directory. When the stream's queue passes the
 * high-water mark the agent stops reading inotify; if the kernel queue then overflows, the
 * stream ends with an error (as envd's watcher does on overflow).
 */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "common/log.h"
#include "fdio.h"
#include "fspath.h"
#include "protojson.h"

#define WATCH_MASK                                                                                \
    (IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_ATTRIB | IN_MODIFY | IN_MOVE_SELF | IN_DELETE | \
     IN_DELETE_SELF)

struct watch__wd {
    int wd;
    char *rel; /* "" for the root */
};

struct agent_watch {
    struct agent_watch *next;
    struct agent *a;
    struct agent_stream *s;
    struct agent_fdio io;
    char root[PATH_MAX];
    bool recursive;
    bool include_entry;
    struct watch__wd *wds;
    size_t nwds, capwds;
    bool closing;
    struct al_buf partial; /* an event split across reads */
};

struct agent_watchers {
    struct agent_watch *list;
    size_t n;
};

int agent_watchers_init(struct agent *a)
{
    a->watchers = calloc(1, sizeof *a->watchers);
    return a->watchers ? 0 : -ENOMEM;
}

void agent_watchers_free(struct agent *a)
{
    free(a->watchers);
    a->watchers = NULL;
}

static const char *watch__rel_of(struct agent_watch *w, int wd)
{
    for (size_t i = 0; i < w->nwds; i++)
        if (w->wds[i].wd == wd)
            return w->wds[i].rel;
    return NULL;
}

static int watch__add(struct agent_watch *w, const char *rel)
{
    if (w->nwds >= w->a->lim.max_watches)
        return -ENOSPC;
    char path[PATH_MAX];
    if (!*rel)
        snprintf(path, sizeof path, "%s", w->root);
    else if (snprintf(path, sizeof path, "%s/%s", strcmp(w->root, "/") ? w->root : "", rel) >=
             (int)sizeof path)
        return -ENAMETOOLONG;
    int wd = inotify_add_watch(w->io.fd, path, WATCH_MASK | IN_DONT_FOLLOW | IN_EXCL_UNLINK);
    if (wd < 0)
        return -errno;
    for (size_t i = 0; i < w->nwds; i++) {
        if (w->wds[i].wd == wd) { /* the same directory again (renamed): update its name */
            free(w->wds[i].rel);
            w->wds[i].rel = strdup(rel);
            return 0;
        }
    }
    if (w->nwds == w->capwds) {
        size_t nc = w->capwds ? w->capwds * 2 : 16;
        struct watch__wd *n = realloc(w->wds, nc * sizeof *n);
        if (!n)
            return -ENOMEM;
        w->wds = n;
        w->capwds = nc;
    }
    w->wds[w->nwds].wd = wd;
    w->wds[w->nwds].rel = strdup(rel);
    w->nwds++;
    return 0;
}

static void watch__remove_wd(struct agent_watch *w, int wd)
{
    for (size_t i = 0; i < w->nwds; i++) {
        if (w->wds[i].wd == wd) {
            free(w->wds[i].rel);
            w->wds[i] = w->wds[--w->nwds];
            return;
        }
    }
}

/* Adds watches for rel and every directory below it (no symlinks followed). */
static int watch__add_tree(struct agent_watch *w, const char *rel, int depth)
{
    int r = watch__add(w, rel);
    if (r < 0 || depth > 128)
        return r;
    char path[PATH_MAX];
    if (!*rel)
        snprintf(path, sizeof path, "%s", w->root);
    else
        snprintf(path, sizeof path, "%s/%s", strcmp(w->root, "/") ? w->root : "", rel);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        bool isdir = de->d_type == DT_DIR;
        if (de->d_type == DT_UNKNOWN) {
            struct stat st;
            isdir =
                fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
        }
        if (!isdir)
            continue;
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
            (int)sizeof sub)
            continue;
        r = watch__add_tree(w, sub, depth + 1);
        if (r == -ENOSPC)
            break;
    }
    closedir(d);
    return r == -ENOSPC ? r : 0;
}

static void watch__unlink(struct agent_watch *w)
{
    for (struct agent_watch **pp = &w->a->watchers->list; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            w->a->watchers->n--;
            return;
        }
    }
}

static void watch__io_closed(struct agent_fdio *io)
{
    struct agent_watch *w = io->owner;
    for (size_t i = 0; i < w->nwds; i++)
        free(w->wds[i].rel);
    free(w->wds);
    al_buf_free(&w->partial);
    free(w);
}

static void watch__close(struct agent_watch *w)
{
    if (w->closing)
        return;
    w->closing = true;
    watch__unlink(w);
    if (w->s) {
        w->s->owner = NULL;
        w->s->on_peer_gone = NULL;
        w->s->on_drain = NULL;
        w->s = NULL;
    }
    agent_fdio_close(&w->io, false, watch__io_closed);
}

static void watch__end(struct agent_watch *w, enum agent_connect_code code, const char *msg)
{
    if (w->s && msg)
        agent_stream_end(w->s, code, "%s", msg);
    else if (w->s)
        agent_stream_end(w->s, code, NULL);
    w->s = NULL;
    watch__close(w);
}

static void watch__emit(struct agent_watch *w, const char *name, const char *type, bool entry)
{
    json_t *fe = json_object();
    json_t *n = json_string(name);
    if (!n) {
        json_decref(fe);
        return; /* not UTF-8 */
    }
    json_object_set_new(fe, "name", n);
    json_object_set_new(fe, "type", json_string(type));
    if (entry && w->include_entry) {
        char path[PATH_MAX];
        json_t *info;
        if (snprintf(path, sizeof path, "%s/%s", strcmp(w->root, "/") ? w->root : "", name) <
                (int)sizeof path &&
            agent_entry_info(w->a, path, &info, NULL) == 0)
            json_object_set_new(fe, "entry", info);
    }
    json_t *msg = json_object();
    json_object_set_new(msg, "filesystem", fe);
    agent_stream_send(w->s, msg);
}

static void watch__on_drain(struct agent_stream *s)
{
    struct agent_watch *w = s->owner;
    if (w && !w->closing)
        agent_fdio_resume(&w->io);
}

static void watch__on_peer_gone(struct agent_stream *s)
{
    struct agent_watch *w = s->owner;
    if (!w)
        return;
    w->s = NULL;
    watch__close(w);
}

static void watch__event(struct agent_watch *w, const struct inotify_event *ev)
{
    if (ev->mask & IN_Q_OVERFLOW) {
        watch__end(w, AGENT_CONNECT_INTERNAL,
                   "watcher error: fsnotify: queue or buffer overflow (too many events; the "
                   "client did not keep up)");
        return;
    }
    if (ev->mask & IN_IGNORED) {
        watch__remove_wd(w, ev->wd);
        return;
    }
    const char *dir = watch__rel_of(w, ev->wd);
    if (!dir)
        return;
    char name[PATH_MAX];
    if (ev->len && ev->name[0])
        snprintf(name, sizeof name, "%s%s%s", dir, *dir ? "/" : "", ev->name);
    else
        snprintf(name, sizeof name, "%s", *dir ? dir : ".");
    bool self = !(ev->len && ev->name[0]);
    if (self && *dir && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)))
        return; /* a subdirectory's own events are reported by its parent's watch */
    if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
        watch__emit(w, name, "EVENT_TYPE_CREATE", true);
        if (w->recursive && (ev->mask & IN_ISDIR) && !self) {
            int r = watch__add_tree(w, name, 0);
            if (r == -ENOSPC)
                al_warn(
                    "watch: more than %zu directories below %s; deeper changes are not reported",
                    w->a->lim.max_watches, w->root);
        }
    }
    if (ev->mask & (IN_MOVED_FROM | IN_MOVE_SELF))
        watch__emit(w, name, "EVENT_TYPE_RENAME", false);
    if (ev->mask & IN_ATTRIB)
        watch__emit(w, name, "EVENT_TYPE_CHMOD", true);
    if (ev->mask & IN_MODIFY)
        watch__emit(w, name, "EVENT_TYPE_WRITE", true);
    if (ev->mask & (IN_DELETE | IN_DELETE_SELF))
        watch__emit(w, name, "EVENT_TYPE_REMOVE", false);
    if (self && !*dir && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)))
        watch__end(w, AGENT_CONNECT_OK, NULL); /* the watched directory itself went away */
}

static void watch__on_read(struct agent_fdio *io, const char *data, ssize_t n)
{
    struct agent_watch *w = io->owner;
    if (w->closing)
        return;
    if (n <= 0) {
        watch__end(w, AGENT_CONNECT_INTERNAL, "watcher error: the inotify descriptor failed");
        return;
    }
    /* inotify returns whole events per read; keep a defensive buffer anyway. */
    size_t off = 0;
    while (off + sizeof(struct inotify_event) <= (size_t)n && !w->closing) {
        const struct inotify_event *ev = (const void *)(data + off);
        size_t sz = sizeof *ev + ev->len;
        if (off + sz > (size_t)n)
            break;
        struct inotify_event *copy = malloc(sz + 1);
        if (!copy)
            break;
        memcpy(copy, ev, sz);
        ((char *)copy)[sz] = '\0';
        watch__event(w, copy);
        free(copy);
        off += sz;
    }
    if (!w->closing && w->s && agent_stream_queued(w->s) > w->a->lim.stream_high_water) {
        agent_fdio_pause(&w->io);
        agent_stream_want_drain(w->s);
    }
}

static bool watch__network_fs(const char *path)
{
    struct statfs sf;
    if (statfs(path, &sf) < 0)
        return false;
    switch ((unsigned long)sf.f_type) {
    case 0x6969UL:     /* NFS */
    case 0xFF534D42UL: /* CIFS */
    case 0x517BUL:     /* SMB */
    case 0xFE534D42UL: /* SMB2 */
    case 0x65735546UL: /* FUSE */
        return true;
    default:
        return false;
    }
}

void agent_watch_call(struct agent_call *c)
{
    struct agent *a = c->a;
    struct al_error e = {0};
    struct agent_user u;
    int r = agent_resolve_user(a, c->has_user ? c->user : NULL, &u, &e);
    if (r < 0) {
        agent_stream_fail(
            c, r == -ENOENT ? AGENT_CONNECT_UNAUTHENTICATED : AGENT_CONNECT_PERMISSION_DENIED, "%s",
            al_error_str(&e));
        return;
    }
    const char *p = "";
    bool recursive = false, include_entry = false, allow_net = false;
    if (agent_pj_string(c->msg, "path", NULL, &p, &e) == -EINVAL ||
        agent_pj_bool(c->msg, "recursive", NULL, &recursive, &e) == -EINVAL ||
        agent_pj_bool(c->msg, "includeEntry", "include_entry", &include_entry, &e) == -EINVAL ||
        agent_pj_bool(c->msg, "allowNetworkMounts", "allow_network_mounts", &allow_net, &e) ==
            -EINVAL) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    char path[PATH_MAX];
    if (agent_path_resolve(p, u.home, a->default_workdir, path, sizeof path, &e) < 0) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return;
    }
    struct stat st;
    if (stat(path, &st) < 0) {
        agent_stream_fail(c, errno == ENOENT ? AGENT_CONNECT_NOT_FOUND : AGENT_CONNECT_INTERNAL,
                          "path %s not found: %s", path, strerror(errno));
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT, "path %s not a directory", path);
        return;
    }
    if (!allow_net && watch__network_fs(path)) {
        agent_stream_fail(c, AGENT_CONNECT_INVALID_ARGUMENT,
                          "cannot watch path on network filesystem: %s", path);
        return;
    }
    if (a->watchers->n >= a->lim.max_watchers) {
        agent_stream_fail(c, AGENT_CONNECT_RESOURCE_EXHAUSTED,
                          "too many directory watches (%zu); stop some first", a->watchers->n);
        return;
    }
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
        agent_stream_fail(c, AGENT_CONNECT_INTERNAL, "error creating watcher: %s", strerror(errno));
        return;
    }
    struct agent_watch *w = calloc(1, sizeof *w);
    w->a = a;
    w->recursive = recursive;
    w->include_entry = include_entry;
    snprintf(w->root, sizeof w->root, "%s", path);
    al_buf_init(&w->partial, 0);
    if (agent_fdio_open(a->loop, &w->io, fd, 0, watch__on_read, w) < 0) {
        free(w);
        agent_stream_fail(c, AGENT_CONNECT_INTERNAL, "error creating watcher");
        return;
    }
    r = recursive ? watch__add_tree(w, "", 0) : watch__add(w, "");
    if (r < 0 && !(r == -ENOSPC && w->nwds > 0)) {
        w->closing = true;
        agent_fdio_close(&w->io, false, watch__io_closed);
        agent_stream_fail(c, AGENT_CONNECT_INTERNAL, "error adding path %s to watcher: %s", path,
                          strerror(-r));
        return;
    }
    w->next = a->watchers->list;
    a->watchers->list = w;
    a->watchers->n++;
    struct agent_stream *s = agent_stream_start(c, "{\"keepalive\":{}}");
    if (!s) {
        watch__close(w);
        return;
    }
    w->s = s;
    s->owner = w;
    s->on_peer_gone = watch__on_peer_gone;
    s->on_drain = watch__on_drain;
    json_t *start = json_object();
    json_object_set_new(start, "start", json_object());
    agent_stream_send(s, start);
    al_info("watching %s%s (%zu directories)", path, recursive ? " recursively" : "", w->nwds);
}
