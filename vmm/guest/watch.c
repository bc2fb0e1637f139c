/* vmm/guest/watch: filesystem.Filesystem's directory watches on inotify, as envd's fsnotify
 * does them: the WatchDir stream, and the polled watchers (CreateWatcher, GetWatcherEvents,
 * RemoveWatcher) that the Python SDK's synchronous watch_dir uses. Both are one agent_watch
 * whose events go either to its stream or to its buffer.
 *
 * One inotify instance per watch. Recursive watches add every directory below the root at
 * start and each directory that appears later (created or moved in), up to max_watches. What
 * was created inside a new directory before its watch was added is reported from a scan of it
 * (envd loses those events: `mkdir -p a/b && touch a/b/c` shows only `a`).
 * Event mapping (fsnotify): IN_CREATE/IN_MOVED_TO -> CREATE, IN_MODIFY -> WRITE,
 * IN_ATTRIB -> CHMOD, IN_DELETE/IN_DELETE_SELF -> REMOVE, IN_MOVED_FROM/IN_MOVE_SELF ->
 * RENAME; `name` is relative to the watched directory. When the stream's queue passes the
 * high-water mark the agent stops reading inotify; if the kernel queue then overflows, the
 * stream ends with an error (as envd's watcher does on overflow).
 * Polled watchers (ids "w" + 20 of [a-z0-9], as envd's) buffer their events until
 * GetWatcherEvents takes them. Unlike envd's, the buffer is bounded (max_watcher_events:
 * past it the watcher fails as on an inotify overflow, and GetWatcherEvents returns that
 * error until it is removed) and a watcher nobody polls for watcher_idle_ms is removed.
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

#include <sodium.h>

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

#define WATCH_ID_LEN 21 /* "w" + 20 characters */

struct agent_watch {
    struct agent_watch *next;
    struct agent *a;
    struct agent_stream *s; /* WatchDir: where events go */
    struct agent_fdio io;
    bool io_open; /* inotify is still read */
    char root[PATH_MAX];
    bool recursive;
    bool include_entry;
    struct watch__wd *wds;
    size_t nwds, capwds;
    bool closing;
    int handles; /* fdio + idle timer not yet closed */
    /* Polled watchers (CreateWatcher): */
    bool polled;
    char id[WATCH_ID_LEN + 1];
    json_t *events; /* FilesystemEvent[] waiting for GetWatcherEvents */
    enum agent_connect_code err_code;
    char *err_msg; /* the failure GetWatcherEvents returns (NULL: none) */
    uv_timer_t idle;
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

static void watch__emit(struct agent_watch *w, const char *name, const char *type, bool entry);

/* Adds watches for rel and every directory below it (no symlinks followed). With `emit`, rel is
 * a directory that has just been created: whatever was created in it before its watch existed
 * produced no event, so each entry found below it is reported as created. An entry created
 * between the watch and the scan is then reported twice; one never reported would be worse. */
static int watch__add_tree(struct agent_watch *w, const char *rel, int depth, bool emit)
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
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
            (int)sizeof sub)
            continue;
        if (emit)
            watch__emit(w, sub, "EVENT_TYPE_CREATE", true);
        if (!isdir)
            continue;
        r = watch__add_tree(w, sub, depth + 1, emit);
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

static void watch__release(struct agent_watch *w)
{
    if (--w->handles > 0)
        return;
    for (size_t i = 0; i < w->nwds; i++)
        free(w->wds[i].rel);
    free(w->wds);
    json_decref(w->events);
    free(w->err_msg);
    free(w);
}

static void watch__io_closed(struct agent_fdio *io)
{
    watch__release(io->owner);
}

static void watch__timer_closed(uv_handle_t *h)
{
    watch__release(h->data);
}

/* Stops reading inotify (the watch reports nothing more). */
static void watch__stop_io(struct agent_watch *w)
{
    if (!w->io_open)
        return;
    w->io_open = false;
    agent_fdio_close(&w->io, false, watch__io_closed);
}

/* Removes the watch and, once its handles are closed, frees it. */
static void watch__close(struct agent_watch *w)
{
    if (w->closing)
        return;
    w->closing = true;
    watch__unlink(w);
    if (w->s) {
        w->s->owner = NULL;
        w->s->on_gone = NULL;
        w->s->on_drain = NULL;
        w->s = NULL;
    }
    if (w->polled) {
        uv_timer_stop(&w->idle);
        uv_close((uv_handle_t *)&w->idle, watch__timer_closed);
    }
    watch__stop_io(w);
}

/* The watch can report nothing more: a stream ends (with the error, if any) and goes; a
 * polled watcher keeps what it has for GetWatcherEvents, the first error winning over its
 * events (envd's FileWatcher.Error), until it is removed. */
static void watch__end(struct agent_watch *w, enum agent_connect_code code, const char *msg)
{
    if (!w->polled) {
        if (w->s && msg)
            agent_stream_end(w->s, code, "%s", msg);
        else if (w->s)
            agent_stream_end(w->s, code, NULL);
        w->s = NULL;
        watch__close(w);
        return;
    }
    if (code != AGENT_CONNECT_OK && !w->err_msg) {
        w->err_code = code;
        w->err_msg = strdup(msg ? msg : "watcher error");
        json_array_clear(w->events);
        al_warn("watcher %s on %s failed: %s", w->id, w->root, msg ? msg : "");
    }
    watch__stop_io(w);
}

static void watch__emit(struct agent_watch *w, const char *name, const char *type, bool entry)
{
    if (w->polled && (w->err_msg || w->closing))
        return;
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
    if (w->polled) {
        if (json_array_size(w->events) >= w->a->lim.max_watcher_events) {
            json_decref(fe);
            char msg[256];
            snprintf(msg, sizeof msg,
                     "watcher error: more than %zu events waited for GetWatcherEvents (call "
                     "it more often, or watch a smaller tree); remove this watcher and create "
                     "another",
                     w->a->lim.max_watcher_events);
            watch__end(w, AGENT_CONNECT_INTERNAL, msg);
            return;
        }
        json_array_append_new(w->events, fe);
        return;
    }
    json_t *msg = json_object();
    json_object_set_new(msg, "filesystem", fe);
    agent_stream_send(w->s, msg);
}

static void watch__on_drain(struct agent_stream *s)
{
    struct agent_watch *w = s->owner;
    if (w && w->io_open)
        agent_fdio_resume(&w->io);
}

static void watch__on_gone(struct agent_stream *s)
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
            int r = watch__add_tree(w, name, 0, (ev->mask & IN_CREATE) != 0);
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
    if (!w->io_open)
        return;
    if (n <= 0) {
        watch__end(w, AGENT_CONNECT_INTERNAL, "watcher error: the inotify descriptor failed");
        return;
    }
    /* inotify returns whole events per read. */
    size_t off = 0;
    while (off + sizeof(struct inotify_event) <= (size_t)n && w->io_open) {
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
    if (w->io_open && w->s && agent_stream_queued(w->s) > w->a->lim.stream_high_water) {
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

/* What CreateWatcher and WatchDir share, envd's checks in envd's order: the user, the path
 * (resolved like every path), a directory, not a network mount unless allowed, then the
 * inotify watches. On failure *code and err say what to answer. */
static struct agent_watch *watch__open(struct agent_call *c, enum agent_connect_code *code,
                                       struct al_error *err)
{
    struct agent *a = c->a;
    struct agent_user u;
    int r = agent_resolve_user(a, c->has_user ? c->user : NULL, &u, err);
    if (r < 0) {
        *code = r == -ENOENT ? AGENT_CONNECT_UNAUTHENTICATED : AGENT_CONNECT_PERMISSION_DENIED;
        return NULL;
    }
    const char *p = "";
    bool recursive = false, include_entry = false, allow_net = false;
    *code = AGENT_CONNECT_INVALID_ARGUMENT;
    if (agent_pj_string(c->msg, "path", NULL, &p, err) == -EINVAL ||
        agent_pj_bool(c->msg, "recursive", NULL, &recursive, err) == -EINVAL ||
        agent_pj_bool(c->msg, "includeEntry", "include_entry", &include_entry, err) == -EINVAL ||
        agent_pj_bool(c->msg, "allowNetworkMounts", "allow_network_mounts", &allow_net, err) ==
            -EINVAL)
        return NULL;
    memset(err, 0, sizeof *err);
    char path[PATH_MAX];
    if (agent_path_resolve(p, u.home, a->default_workdir, path, sizeof path, err) < 0)
        return NULL;
    struct stat st;
    if (stat(path, &st) < 0) {
        *code = errno == ENOENT ? AGENT_CONNECT_NOT_FOUND : AGENT_CONNECT_INTERNAL;
        al_error_set(err, -errno, "path %s not found: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) {
        al_error_set(err, -ENOTDIR, "path %s not a directory", path);
        return NULL;
    }
    if (!allow_net && watch__network_fs(path)) {
        al_error_set(err, -EINVAL, "cannot watch path on network filesystem: %s", path);
        return NULL;
    }
    if (a->watchers->n >= a->lim.max_watchers) {
        *code = AGENT_CONNECT_RESOURCE_EXHAUSTED;
        al_error_set(err, -ENOSPC,
                     "too many directory watches (%zu); stop some (or RemoveWatcher) first",
                     a->watchers->n);
        return NULL;
    }
    *code = AGENT_CONNECT_INTERNAL;
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
        al_error_set(err, -errno, "error creating watcher: %s", strerror(errno));
        return NULL;
    }
    struct agent_watch *w = calloc(1, sizeof *w);
    if (!w) {
        close(fd);
        al_error_set(err, -ENOMEM, "error creating watcher: out of memory");
        return NULL;
    }
    w->a = a;
    w->recursive = recursive;
    w->include_entry = include_entry;
    snprintf(w->root, sizeof w->root, "%s", path);
    if (agent_fdio_open(a->loop, &w->io, fd, 0, watch__on_read, w) < 0) {
        free(w);
        al_error_set(err, -EIO, "error creating watcher");
        return NULL;
    }
    w->io_open = true;
    w->handles = 1;
    r = recursive ? watch__add_tree(w, "", 0, false) : watch__add(w, "");
    if (r < 0 && !(r == -ENOSPC && w->nwds > 0)) {
        w->closing = true;
        watch__stop_io(w);
        al_error_set(err, r, "error adding path %s to watcher: %s", path, strerror(-r));
        return NULL;
    }
    w->next = a->watchers->list;
    a->watchers->list = w;
    a->watchers->n++;
    return w;
}

static void watch__dir(struct agent_call *c)
{
    enum agent_connect_code code;
    struct al_error e = {0};
    struct agent_watch *w = watch__open(c, &code, &e);
    if (!w) {
        agent_stream_fail(c, code, "%s", al_error_str(&e));
        return;
    }
    struct agent_stream *s = agent_stream_start(c, "{\"keepalive\":{}}");
    if (!s) {
        watch__close(w);
        return;
    }
    w->s = s;
    s->owner = w;
    s->on_gone = watch__on_gone;
    s->on_drain = watch__on_drain;
    json_t *start = json_object();
    json_object_set_new(start, "start", json_object());
    agent_stream_send(s, start);
    al_info("watching %s%s (%zu directories)", w->root, w->recursive ? " recursively" : "",
            w->nwds);
}

static void watch__on_idle(uv_timer_t *t)
{
    struct agent_watch *w = t->data;
    al_info("watcher %s on %s removed: no GetWatcherEvents for %llu s", w->id, w->root,
            (unsigned long long)(w->a->lim.watcher_idle_ms / 1000));
    watch__close(w);
}

static void watch__create(struct agent_call *c)
{
    enum agent_connect_code code;
    struct al_error e = {0};
    struct agent_watch *w = watch__open(c, &code, &e);
    if (!w) {
        agent_rpc_error(c, code, "%s", al_error_str(&e));
        return;
    }
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz1234567890";
    w->polled = true;
    w->id[0] = 'w';
    for (size_t i = 1; i < WATCH_ID_LEN; i++)
        w->id[i] = alphabet[randombytes_uniform(sizeof alphabet - 1)];
    w->events = json_array();
    uv_timer_init(c->a->loop, &w->idle);
    w->idle.data = w;
    w->handles++;
    uv_timer_start(&w->idle, watch__on_idle, c->a->lim.watcher_idle_ms, 0);
    al_info("watcher %s on %s%s (%zu directories)", w->id, w->root,
            w->recursive ? " recursively" : "", w->nwds);
    json_t *res = json_object();
    json_object_set_new(res, "watcherId", json_string(w->id));
    agent_rpc_reply(c, res);
}

/* The polled watcher a request names ({"watcherId"}), or NULL after answering not_found. */
static struct agent_watch *watch__find(struct agent_call *c)
{
    struct al_error e = {0};
    const char *id = "";
    if (agent_pj_string(c->msg, "watcherId", "watcher_id", &id, &e) == -EINVAL) {
        agent_rpc_error(c, AGENT_CONNECT_INVALID_ARGUMENT, "%s", al_error_str(&e));
        return NULL;
    }
    for (struct agent_watch *w = c->a->watchers->list; w; w = w->next)
        if (w->polled && strcmp(w->id, id) == 0)
            return w;
    agent_rpc_error(c, AGENT_CONNECT_NOT_FOUND,
                    "watcher with id %.64s not found (watchers go with RemoveWatcher, or after "
                    "%llu s without GetWatcherEvents)",
                    id, (unsigned long long)(c->a->lim.watcher_idle_ms / 1000));
    return NULL;
}

static void watch__get_events(struct agent_call *c)
{
    struct agent_watch *w = watch__find(c);
    if (!w)
        return;
    uv_timer_start(&w->idle, watch__on_idle, c->a->lim.watcher_idle_ms, 0);
    if (w->err_msg) {
        agent_rpc_error(c, w->err_code, "%s", w->err_msg);
        return;
    }
    json_t *res = json_object();
    if (json_array_size(w->events)) { /* envd (protojson) leaves an empty list out */
        json_object_set_new(res, "events", w->events);
        w->events = json_array();
    }
    agent_rpc_reply(c, res);
}

static void watch__remove(struct agent_call *c)
{
    struct agent_watch *w = watch__find(c);
    if (!w)
        return;
    al_info("watcher %s on %s removed", w->id, w->root);
    watch__close(w);
    agent_rpc_reply(c, NULL);
}

void agent_watch_call(struct agent_call *c)
{
    if (strcmp(c->method, "WatchDir") == 0)
        watch__dir(c);
    else if (strcmp(c->method, "CreateWatcher") == 0)
        watch__create(c);
    else if (strcmp(c->method, "GetWatcherEvents") == 0)
        watch__get_events(c);
    else
        watch__remove(c);
}
