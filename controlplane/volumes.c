/* controlplane/volumes: see volumes.h. */
#include "volumes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/openat2.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/http.h"
#include "common/json.h"
#include "common/log.h"
#include "common/spawn.h"
#include "common/util.h"
#include "cp.h"
#include "egressreg.h"
#include "events.h"
#include "ids.h"
#include "proc.h"
#include "store.h"
#include "sweep.h"

/* The owner of the volume's root and of what the content API makes when the request names
 * none: the sandbox's default user ("user", 1000:1000 inside every sandbox). */
#define VOL_DEFAULT_ID 1000
/* How deep GET /volumecontent/{id}/dir may recurse, and how many entries it lists. */
#define VOL_MAX_DEPTH   16
#define VOL_MAX_ENTRIES 100000
/* The smallest quota: ext4's own structures take about 2 MiB of it. */
#define VOL_MIN_MB 16

static void vol__paths(const struct cp *cp, const char *id, char *img, size_t ilen, char *dir,
                       size_t dlen)
{
    if (img)
        snprintf(img, ilen, "%s/volumes/%s.img", cp->cfg.state_dir, id);
    if (dir)
        snprintf(dir, dlen, "%s/volumes/%s", cp->cfg.state_dir, id);
}

bool cp_volume_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-')))
            return false;
    }
    return true;
}

static bool vol__id_valid(const char *s)
{
    size_t n = strlen(CP_VOL_PREFIX);
    return strncmp(s, CP_VOL_PREFIX, n) == 0 && cp_sandbox_id_valid(s + n);
}

int cp_volume_path_norm(const char *path, char *out, size_t len, struct al_error *err)
{
    if (!path[0])
        return al_error_set(err, -EINVAL, "\"path\" is required (e.g. path=/data/file.txt)");
    size_t o = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchrnul(p, '/');
        size_t n = (size_t)(e - p);
        if (n > 255)
            return al_error_set(err, -EINVAL, "path \"%.64s...\": a component is over 255 bytes",
                                path);
        if (!(n == 1 && p[0] == '.')) {
            if (o + n + 2 > len)
                return al_error_set(err, -ENAMETOOLONG, "path \"%.64s...\" is too long", path);
            if (o)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p = e;
    }
    if (!o)
        out[o++] = '.';
    out[o] = '\0';
    return 0;
}

/* ---- images and mounts ------------------------------------------------------------------- */

static bool vol__mounted(const char *dir)
{
    struct stat a, b;
    char parent[4300];
    snprintf(parent, sizeof parent, "%s/..", dir);
    return stat(dir, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* The image as a loop device (LOOP_CONFIGURE with autoclear: the device goes with the last
 * unmount) mounted at dir. */
static int vol__attach(const char *img, const char *dir, struct al_error *err)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return al_error_set(err, -errno, "create %s: %s", dir, strerror(errno));
    if (vol__mounted(dir))
        return 0;
    al_autoclose int bfd = open(img, O_RDWR | O_CLOEXEC);
    if (bfd < 0)
        return al_error_set(err, -errno, "open volume image %s: %s", img, strerror(errno));
    al_autoclose int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return al_error_set(err, -errno,
                            "open /dev/loop-control: %s (volumes are ext4 images on loop "
                            "devices: airlockd needs root and the loop module)",
                            strerror(errno));
    for (int tries = 0; tries < 16; tries++) {
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
            return al_error_set(err, -errno, "no free loop device: %s", strerror(errno));
        char dev[32];
        snprintf(dev, sizeof dev, "/dev/loop%d", n);
        al_autoclose int lfd = open(dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0)
            return al_error_set(err, -errno, "open %s: %s", dev, strerror(errno));
        struct loop_config lc = {.fd = (unsigned)bfd};
        lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        if (ioctl(lfd, LOOP_CONFIGURE, &lc) < 0) {
            if (errno == EBUSY)
                continue; /* another process took it between GET_FREE and here */
            return al_error_set(err, -errno, "attach %s to %s: %s", img, dev, strerror(errno));
        }
        if (mount(dev, dir, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "errors=remount-ro") < 0)
            return al_error_set(err, -errno, "mount %s (%s) at %s: %s", img, dev, dir,
                                strerror(errno));
        return 0;
    }
    return al_error_set(err, -EBUSY, "no free loop device for %s after 16 attempts", img);
}

static void vol__detach(const char *dir)
{
    while (vol__mounted(dir))
        if (umount2(dir, MNT_DETACH) < 0) {
            al_warn("cannot unmount volume %s: %s", dir, strerror(errno));
            return;
        }
}

int cp_volume_mount(struct cp *cp, const char *id, char *dir, size_t len, struct al_error *err)
{
    char img[4300];
    vol__paths(cp, id, img, sizeof img, dir, len);
    return vol__attach(img, dir, err);
}

/* A new image of size bytes: a sparse file under a temporary name, ext4 made in it (the root
 * directory owned by the sandbox's user), synced and renamed into place. */
static int vol__make_image(const char *img, uint64_t size, struct al_error *err)
{
    char tmp[4400];
    const char *slash = strrchr(img, '/');
    snprintf(tmp, sizeof tmp, "%.*s/.tmp-%s", (int)(slash - img), img, slash + 1);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return al_error_set(err, -errno, "create %s: %s", tmp, strerror(errno));
    int rc = 0;
    if (ftruncate(fd, (off_t)size) < 0)
        rc = al_error_set(err, -errno, "size %s: %s", tmp, strerror(errno));
    close(fd);
    char mkfs[256] = "";
    const char *pp = AL_SPAWN_DEFAULT_PATH;
    while (!rc && al_spawn_path_next(&pp, "mkfs.ext4", mkfs, sizeof mkfs) &&
           access(mkfs, X_OK) != 0)
        mkfs[0] = '\0';
    if (!rc && !mkfs[0])
        rc = al_error_set(err, -ENOENT,
                          "mkfs.ext4 not found in %s: volumes need e2fsprogs (apt-get install "
                          "e2fsprogs)",
                          AL_SPAWN_DEFAULT_PATH);
    if (!rc) {
        char owner[64];
        snprintf(owner, sizeof owner, "root_owner=%d:%d", VOL_DEFAULT_ID, VOL_DEFAULT_ID);
        /* No reserved blocks: the quota is all the volume's. mkfs always makes lost+found;
         * it is removed after the first mount, so listings show only what was written. */
        char *argv[] = {mkfs, "-q", "-F", "-m", "0", "-E", owner, "-L", "airlock-volume",
                        tmp,  NULL};
        struct al_spawn s = {.path = mkfs, .argv = argv, .fds = {-1, -1, -1}, .nfds = 3};
        pid_t pid;
        rc = al_spawn(&s, &pid, NULL, err);
        if (!rc) {
            int st = 0;
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                char how[128];
                cp_proc_describe(st, how, sizeof how);
                rc = al_error_set(err, -EIO, "%s %s failed (%s)", mkfs, tmp, how);
            }
        }
    }
    if (!rc && ((fd = open(tmp, O_RDONLY | O_CLOEXEC)) < 0 || fsync(fd) < 0))
        rc = al_error_set(err, -errno, "sync %s: %s", tmp, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (!rc && rename(tmp, img) < 0)
        rc = al_error_set(err, -errno, "rename %s: %s", tmp, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

/* ---- audit records ------------------------------------------------------------------------- */

/* A record of a volume operation goes into airlock-egress's audit log, in the chain every
 * other record is in (docs/audit.md, "volume"), through cp_audit_record. */
typedef cp_egress_done_cb vol_audited_cb;

/* rec: {"event", ...} (stolen), made a "volume" record of volume r by key_id. */
static void vol__audit(struct cp *cp, const char *id, const char *name, const char *key_id,
                       json_t *rec, vol_audited_cb then, void *arg)
{
    char what[160];
    snprintf(what, sizeof what, "volume %s (%s): %s", name, id,
             json_string_value(json_object_get(rec, "event")));
    json_object_set_new(rec, "type", json_string("volume"));
    json_object_set_new(rec, "volume", json_pack("{s:s,s:s}", "id", id, "name", name));
    json_object_set_new(rec, "api_key_id", key_id && *key_id ? json_string(key_id) : json_null());
    cp_audit_record(cp, rec, what, then, arg);
}

/* The records of one cp_volumes_audit_mounts: done runs once the last is answered. */
struct vol_mounts_audit {
    size_t pending;
    int rc;
    char msg[256];
    cp_volumes_audited_cb done;
    void *arg;
};

static void vol__mount_audited(void *arg, int rc, const char *msg)
{
    struct vol_mounts_audit *g = arg;
    if (rc && !g->rc) {
        g->rc = rc;
        snprintf(g->msg, sizeof g->msg, "%s", msg && *msg ? msg : strerror(-rc));
    }
    if (--g->pending)
        return;
    if (g->done)
        g->done(g->arg, g->rc, g->msg);
    free(g);
}

void cp_volumes_audit_mounts(struct cp *cp, const struct cp_sandbox *sb, bool mounted,
                             const char *key_id, const char *cause, cp_volumes_audited_cb done,
                             void *arg)
{
    size_t n = json_array_size(sb->rec.volumes);
    struct vol_mounts_audit *g = n ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        if (n)
            al_error("sandbox %s: its volumes' audit records were not written: out of memory",
                     sb->rec.id);
        if (done)
            done(arg, n ? -ENOMEM : 0, n ? strerror(ENOMEM) : "");
        return;
    }
    g->done = done;
    g->arg = arg;
    /* One more than the records until all are sent: an answer on this turn does not end
     * the group early. */
    g->pending = n + 1;
    size_t i;
    json_t *m;
    json_array_foreach(sb->rec.volumes, i, m)
    {
        json_t *rec = json_pack("{s:s,s:s,s:O}", "event", mounted ? "mount" : "unmount", "sandbox",
                                sb->rec.id, "mount_path", json_object_get(m, "path"));
        if (cause)
            json_object_set_new(rec, "cause", json_string(cause));
        vol__audit(cp, json_string_value(json_object_get(m, "volumeID")),
                   json_string_value(json_object_get(m, "name")), key_id, rec, vol__mount_audited,
                   g);
    }
    vol__mount_audited(g, 0, "");
}

/* ---- POST /volumes: made on a worker thread (mkfs and the mount take tens of ms) --------- */

struct vol_new {
    uv_work_t w;
    struct cp *cp;
    struct al_http_req *req;
    bool gone; /* the client went away: the volume is still made, nobody is answered */
    struct cp_store_vol r;
    char img[4300], dir[4300];
    int rc;
    struct al_error err;
};

static void vol__new_work(uv_work_t *w)
{
    struct vol_new *x = w->data;
    x->rc = vol__make_image(x->img, x->r.size_bytes, &x->err);
    if (!x->rc)
        x->rc = vol__attach(x->img, x->dir, &x->err);
    if (!x->rc) {
        char lf[4400];
        snprintf(lf, sizeof lf, "%s/lost+found", x->dir);
        rmdir(lf);
    }
}

static void vol__new_closed(struct al_http_req *req)
{
    struct vol_new *x = req->user;
    if (x)
        x->gone = true;
}

static json_t *vol__json(const struct cp_store_vol *r, bool token)
{
    json_t *o = json_pack("{s:s,s:s,s:I}", "volumeID", r->id, "name", r->name, "sizeMB",
                          (json_int_t)(r->size_bytes >> 20));
    if (token)
        json_object_set_new(o, "token", json_string(r->token));
    return o;
}

static void vol__new_free(struct vol_new *x)
{
    sodium_memzero(x->r.token, sizeof x->r.token);
    free(x);
}

/* (A volume made is made, its record written or not: the failure is logged.) */
static void vol__new_answer(void *arg, int rc, const char *msg)
{
    (void)rc, (void)msg;
    struct vol_new *x = arg;
    if (!x->gone) {
        x->req->user = NULL;
        al_http_req_on_close(x->req, NULL);
        al_http_reply_json(x->req, 201, vol__json(&x->r, true));
    }
    vol__new_free(x);
}

static void vol__new_done(uv_work_t *w, int status)
{
    struct vol_new *x = w->data;
    struct cp *cp = x->cp;
    struct al_error err = {0};
    int rc = status < 0 ? status : x->rc;
    if (rc && status == 0)
        err = x->err;
    if (!rc && (rc = cp_store_vol_insert(cp->store, &x->r, &err))) {
        vol__detach(x->dir);
        unlink(x->img);
        rmdir(x->dir);
    }
    if (rc && status < 0)
        al_error_set(&err, status, "the worker pool refused the job: %s", uv_strerror(status));
    if (rc) {
        al_warn("volume %s (%s) of key %s not made: %s", x->r.name, x->r.id, x->r.key_id,
                al_error_str(&err));
        if (!x->gone) {
            x->req->user = NULL;
            al_http_req_on_close(x->req, NULL);
            cp_rest_error(x->req,
                          rc == -EEXIST   ? 409
                          : rc == -ENOSPC ? 507
                                          : 500,
                          "volume \"%s\" not created: %s", x->r.name, al_error_str(&err));
        }
        vol__new_free(x);
        return;
    }
    al_info("volume %s (%s, %llu MiB) made for key %s", x->r.name, x->r.id,
            (unsigned long long)(x->r.size_bytes >> 20), x->r.key_id);
    /* Answered once the audit log has it: a client that saw the volume can find its record. */
    vol__audit(
        cp, x->r.id, x->r.name, x->r.key_id,
        json_pack("{s:s,s:I}", "event", "create", "size_mb", (json_int_t)(x->r.size_bytes >> 20)),
        vol__new_answer, x);
}

struct vol_count {
    size_t n;
};

static int vol__count(const struct cp_store_vol *r, void *arg)
{
    (void)r;
    ((struct vol_count *)arg)->n++;
    return 0;
}

static void vol__create(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                        const json_t *b)
{
    static const char *const keys[] = {"name", "sizeMB", NULL};
    struct al_error err = {0};
    if (al_json_check_keys(b, keys, "volume creation", &err)) {
        cp_rest_error(req, 400, "%s (a volume creation has \"name\" and \"sizeMB\")",
                      al_error_str(&err));
        return;
    }
    /* E2B's SDK sends only the name; "sizeMB" (MiB, as E2B's memoryMB and diskSizeMB) is
     * airlock's, for clients that want another quota than volumes.size. */
    int64_t max_mb = (int64_t)(cp->cfg.volume_max_bytes >> 20);
    int64_t size_mb = (int64_t)(cp->cfg.volume_bytes >> 20);
    if (al_json_get_int(b, "sizeMB", false, VOL_MIN_MB, max_mb, &size_mb, "volume creation",
                        &err)) {
        cp_rest_error(req, 400,
                      "%s: the volume's quota in MiB, from %d to %lld (volumes.max_size); "
                      "leave it out for the default %llu MiB (volumes.size)",
                      al_error_str(&err), VOL_MIN_MB, (long long)max_mb,
                      (unsigned long long)(cp->cfg.volume_bytes >> 20));
        return;
    }
    const char *name = json_string_value(json_object_get(b, "name"));
    if (!name || !cp_volume_name_valid(name)) {
        cp_rest_error(req, 400,
                      "\"name\" must be 1 to 63 of A-Z, a-z, 0-9, '.', '_' and '-', starting "
                      "with a letter or digit");
        return;
    }
    struct cp_store_vol have;
    int rc = cp_store_vol_by_name(cp->store, who->key_id, name, &have, &err);
    if (rc == 0) {
        sodium_memzero(have.token, sizeof have.token);
        cp_rest_error(req, 409, "a volume named \"%s\" exists (%s): pick another name", name,
                      have.id);
        return;
    }
    if (rc != -ENOENT) {
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    struct vol_count c = {0};
    if ((rc = cp_store_vol_list(cp->store, who->key_id, vol__count, &c, &err))) {
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    if (c.n >= (size_t)cp->cfg.max_volumes) {
        cp_rest_error(req, 400,
                      "API key %s owns %zu volumes, the most this server allows (volumes.max): "
                      "destroy one first",
                      who->key_id, c.n);
        return;
    }
    struct vol_new *x = calloc(1, sizeof *x);
    if (!x) {
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    x->cp = cp;
    x->req = req;
    x->w.data = x;
    char rnd[CP_ID_LEN + 1];
    cp_sandbox_id_new(rnd);
    snprintf(x->r.id, sizeof x->r.id, "%s%s", CP_VOL_PREFIX, rnd);
    snprintf(x->r.name, sizeof x->r.name, "%s", name);
    snprintf(x->r.key_id, sizeof x->r.key_id, "%s", who->key_id);
    cp_token_new(x->r.token);
    x->r.size_bytes = (uint64_t)size_mb << 20;
    x->r.created_ns = al_wall_ns();
    vol__paths(cp, x->r.id, x->img, sizeof x->img, x->dir, sizeof x->dir);
    char top[4200];
    snprintf(top, sizeof top, "%s/volumes", cp->cfg.state_dir);
    if (mkdir(top, 0700) < 0 && errno != EEXIST) {
        cp_rest_error(req, 500, "cannot create %s: %s", top, strerror(errno));
        free(x);
        return;
    }
    req->user = x;
    al_http_req_on_close(req, vol__new_closed);
    if ((rc = uv_queue_work(cp->loop, &x->w, vol__new_work, vol__new_done)) < 0) {
        req->user = NULL;
        al_http_req_on_close(req, NULL);
        cp_rest_error(req, 500, "cannot queue the volume's creation: %s", uv_strerror(rc));
        free(x);
    }
}

/* ---- GET /volumes, GET and DELETE /volumes/{id} ------------------------------------------ */

static int vol__list_one(const struct cp_store_vol *r, void *arg)
{
    json_array_append_new(arg, vol__json(r, false));
    return 0;
}

/* The key's volume id, or a 404 answered. */
static int vol__owned(struct cp *cp, struct al_http_req *req, const char *key_id, const char *id,
                      struct cp_store_vol *r)
{
    struct al_error err = {0};
    int rc = vol__id_valid(id) ? cp_store_vol_load(cp->store, id, r, &err) : -ENOENT;
    if (rc == 0 && key_id && strcmp(r->key_id, key_id) != 0)
        rc = -ENOENT;
    if (rc == -ENOENT)
        cp_rest_error(req, 404, "volume \"%.64s\" not found", id);
    else if (rc)
        cp_rest_error(req, 500, "%s", al_error_str(&err));
    return rc;
}

struct vol_user {
    const char *id;
    char sandbox[64];
};

static int vol__uses(void *v, void *arg)
{
    const struct cp_sandbox *sb = v;
    struct vol_user *u = arg;
    size_t i;
    json_t *m;
    json_array_foreach(sb->rec.volumes, i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "volumeID")), u->id) == 0) {
            snprintf(u->sandbox, sizeof u->sandbox, "%s", sb->rec.id);
            return 1;
        }
    }
    return 0;
}

/* A deletion done, its answer waiting for the audit record (req NULL: the client left). */
struct vol_deleted {
    struct al_http_req *req;
};

static void vol__deleted_closed(struct al_http_req *req)
{
    struct vol_deleted *d = req->user;
    if (d)
        d->req = NULL;
}

static void vol__deleted_answer(void *arg, int rc, const char *msg)
{
    (void)rc, (void)msg;
    struct vol_deleted *d = arg;
    if (d->req) {
        d->req->user = NULL;
        al_http_req_on_close(d->req, NULL);
        al_http_reply(d->req, 204, NULL, NULL, 0);
    }
    free(d);
}

static void vol__delete(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                        const char *id)
{
    struct cp_store_vol r;
    if (vol__owned(cp, req, who->key_id, id, &r))
        return;
    sodium_memzero(r.token, sizeof r.token);
    /* Every sandbox in the registry, paused ones too (their resume mounts it again). */
    struct vol_user u = {.id = id};
    if (cp_map_foreach(&cp->sandboxes, vol__uses, &u)) {
        cp_rest_error(req, 409,
                      "volume \"%s\" is mounted in sandbox %s: kill that sandbox first (every "
                      "sandbox that mounts it)",
                      r.name, u.sandbox);
        return;
    }
    struct al_error err = {0};
    /* The row first: no sandbox mounts it and no content request finds it afterwards. */
    if (cp_store_vol_delete(cp->store, id, &err)) {
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    char img[4300], dir[4300];
    vol__paths(cp, id, img, sizeof img, dir, sizeof dir);
    vol__detach(dir);
    if (unlink(img) < 0 && errno != ENOENT)
        al_warn("volume %s: cannot remove %s: %s (removed at the next start)", id, img,
                strerror(errno));
    rmdir(dir);
    al_info("volume %s (%s) destroyed (key %s)", r.name, id, who->key_id);
    struct vol_deleted *d = calloc(1, sizeof *d);
    if (!d) {
        al_http_reply(req, 204, NULL, NULL, 0);
        return;
    }
    d->req = req;
    req->user = d;
    al_http_req_on_close(req, vol__deleted_closed);
    vol__audit(cp, id, r.name, who->key_id, json_pack("{s:s}", "event", "delete"),
               vol__deleted_answer, d);
}

struct vol_body {
    struct cp *cp;
    struct cp_principal who;
};

static void vol__on_body(struct al_http_req *req, int status)
{
    struct vol_body *x = req->user;
    req->user = NULL;
    if (status < 0) {
        free(x);
        return;
    }
    struct al_error err = {0};
    json_t *b = req->body.len ? al_json_parse(req->body.data, req->body.len, &err) : NULL;
    if (!b || !json_is_object(b))
        cp_rest_error(req, 400, "the body must be a JSON object {\"name\": \"...\"}%s%s",
                      b ? "" : ": ", b ? "" : (req->body.len ? al_error_str(&err) : "it is empty"));
    else
        vol__create(x->cp, req, &x->who, b);
    json_decref(b);
    free(x);
}

bool cp_volumes_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    const char *p = req->path, *m = req->method;
    if (strcmp(p, "/volumes") == 0) {
        if (strcmp(m, "GET") == 0) {
            json_t *arr = json_array();
            struct al_error err = {0};
            if (cp_store_vol_list(cp->store, who->key_id, vol__list_one, arr, &err)) {
                json_decref(arr);
                cp_rest_error(req, 500, "%s", al_error_str(&err));
            } else {
                al_http_reply_json(req, 200, arr);
            }
        } else if (strcmp(m, "POST") == 0) {
            struct vol_body *x = calloc(1, sizeof *x);
            if (!x) {
                cp_rest_error(req, 500, "out of memory");
                return true;
            }
            x->cp = cp;
            x->who = *who;
            req->user = x;
            int rc = al_http_req_read_body(req, 4096, vol__on_body);
            if (rc < 0) {
                req->user = NULL;
                free(x);
                cp_rest_error(req, 400, "cannot read the request body: %s", strerror(-rc));
            }
        } else {
            cp_rest_error(req, 405, "%s is not allowed on /volumes (GET lists, POST creates)", m);
        }
        return true;
    }
    if (strncmp(p, "/volumes/", 9) != 0)
        return false;
    const char *rest = p + 9;
    char id[72];
    if (!cp_rest_path_part(&rest, id, sizeof id) || *rest) {
        cp_rest_error(req, 404, "no such endpoint: %s %s (a volume is /volumes/{volumeID})", m, p);
        return true;
    }
    if (strcmp(m, "GET") == 0) {
        struct cp_store_vol r;
        if (vol__owned(cp, req, who->key_id, id, &r) == 0) {
            al_http_reply_json(req, 200, vol__json(&r, true));
            sodium_memzero(r.token, sizeof r.token);
        }
    } else if (strcmp(m, "DELETE") == 0) {
        vol__delete(cp, req, who, id);
    } else {
        cp_rest_error(req, 405, "%s is not allowed on /volumes/{volumeID} (GET, DELETE)", m);
    }
    return true;
}

/* ---- volumeMounts ------------------------------------------------------------------------ */

static bool vol__path_ok(const char *p)
{
    if (p[0] != '/' || !p[1] || strlen(p) > 255)
        return false;
    for (const char *c = p; *c;) {
        const char *e = strchrnul(c + 1, '/');
        size_t n = (size_t)(e - c - 1);
        if (n == 0 || (n == 1 && c[1] == '.') || (n == 2 && c[1] == '.' && c[2] == '.'))
            return false;
        c = e;
    }
    return true;
}

int cp_volumes_resolve(struct cp *cp, const json_t *mounts, const char *key_id, json_t **out,
                       struct al_error *err)
{
    *out = NULL;
    if (!mounts || json_is_null(mounts))
        return 0;
    if (!json_is_array(mounts))
        return al_error_set(err, -EINVAL,
                            "\"volumeMounts\" must be a list of {\"name\", \"path\"}");
    if (!json_array_size(mounts))
        return 0;
    if (json_array_size(mounts) > CP_VOL_MOUNTS_MAX)
        return al_error_set(err, -EINVAL, "\"volumeMounts\": at most %d volumes per sandbox",
                            CP_VOL_MOUNTS_MAX);
    if (strcmp(cp->backend_kind, "jail") != 0)
        return al_error_set(err, -EINVAL,
                            "\"volumeMounts\": the %s backend cannot mount volumes (the jail "
                            "backend does; docs/volumes.md)",
                            cp->backend_kind);
    static const char *const reserved[] = {"/proc", "/dev", "/sys", "/.airlock", "/tmp", NULL};
    json_t *res = json_array();
    size_t i;
    json_t *m;
    int rc = 0;
    json_array_foreach((json_t *)mounts, i, m)
    {
        static const char *const keys[] = {"name", "path", NULL};
        char what[64];
        snprintf(what, sizeof what, "volumeMounts[%zu]", i);
        const char *name = NULL, *path = NULL;
        if (!json_is_object(m)) {
            rc = al_error_set(err, -EINVAL, "%s must be {\"name\", \"path\"}", what);
            break;
        }
        if ((rc = al_json_check_keys(m, keys, what, err)) ||
            (rc = al_json_get_str(m, "name", true, &name, what, err)) ||
            (rc = al_json_get_str(m, "path", true, &path, what, err)))
            break;
        if (!vol__path_ok(path)) {
            rc = al_error_set(err, -EINVAL,
                              "%s: path \"%.64s\" must be an absolute path other than \"/\", "
                              "without \".\", \"..\", \"//\" or a trailing \"/\"",
                              what, path);
            break;
        }
        for (const char *const *r = reserved; *r && !rc; r++) {
            size_t rl = strlen(*r);
            if (strncmp(path, *r, rl) == 0 && (path[rl] == '\0' || path[rl] == '/'))
                rc = al_error_set(err, -EINVAL, "%s: path %s is inside %s, which airlock manages",
                                  what, path, *r);
        }
        size_t k;
        json_t *o;
        json_array_foreach(res, k, o)
        {
            const char *op = json_string_value(json_object_get(o, "path"));
            size_t ol = strlen(op), pl = strlen(path);
            if (!rc && strcmp(op, path) == 0)
                rc = al_error_set(err, -EINVAL, "%s: two volumes are mounted at %s", what, path);
            /* One inside another would hide it or make its mount point in the other volume,
             * depending on the order the mounts are made in. */
            else if (!rc && ((pl > ol && strncmp(path, op, ol) == 0 && path[ol] == '/') ||
                             (ol > pl && strncmp(op, path, pl) == 0 && op[pl] == '/')))
                rc = al_error_set(err, -EINVAL,
                                  "%s: path %s and volumeMounts[%zu]'s %s are one inside the "
                                  "other; mount volumes at separate paths",
                                  what, path, k, op);
        }
        if (rc)
            break;
        struct cp_store_vol r;
        struct al_error e2 = {0};
        int lr = cp_volume_name_valid(name) ? cp_store_vol_by_name(cp->store, key_id, name, &r, &e2)
                                            : -ENOENT;
        if (lr == -ENOENT) {
            rc = al_error_set(err, -EINVAL,
                              "%s: no volume named \"%.64s\" (Volume.create makes one; "
                              "Volume.list shows this key's)",
                              what, name);
            break;
        }
        if (lr) {
            rc = al_error_set(err, -EIO, "%s", al_error_str(&e2));
            break;
        }
        sodium_memzero(r.token, sizeof r.token);
        char dir[4300];
        if ((lr = cp_volume_mount(cp, r.id, dir, sizeof dir, &e2))) {
            rc =
                al_error_set(err, -EIO, "volume %s cannot be mounted: %s", name, al_error_str(&e2));
            break;
        }
        json_array_append_new(
            res, json_pack("{s:s,s:s,s:s}", "volumeID", r.id, "name", name, "path", path));
    }
    if (rc) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

json_t *cp_volumes_mounts_json(const json_t *rec_volumes)
{
    json_t *a = json_array();
    size_t i;
    json_t *m;
    json_array_foreach((json_t *)rec_volumes, i, m)
        json_array_append_new(a, json_pack("{s:O,s:O}", "name", json_object_get(m, "name"), "path",
                                           json_object_get(m, "path")));
    return a;
}

/* ---- the content API ------------------------------------------------------------------------ */

static long vol__openat2(int dirfd, const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (uint64_t)flags | O_CLOEXEC,
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    return syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

/* One content request: the volume's mount (root, an O_PATH descriptor), the path asked for
 * split into its parent (rel up to the last '/') and its last component (leaf). */
struct vol_req {
    struct cp *cp;
    char id[64];
    uint64_t size_mb; /* its quota */
    int root;
    char rel[4096];   /* normalised, "." for the root */
    char leaf[256];   /* "" for the root */
    char shown[4100]; /* the path as answers show it: "/a/b" */
    /* PUT file, streaming */
    int pfd; /* the parent directory */
    int fd;  /* the temporary file */
    char tmp[64];
    uint64_t bytes;
    int wuid, wgid;
    int wmode;
};

static void vol__req_free(struct vol_req *x)
{
    if (x->fd >= 0) {
        close(x->fd);
        unlinkat(x->pfd, x->tmp, 0);
    }
    if (x->pfd >= 0)
        close(x->pfd);
    if (x->root >= 0)
        close(x->root);
    free(x);
}

static int vol__status(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return 404;
    case ENOSPC:
    case EDQUOT:
        return 507;
    case EEXIST:
    case ENOTEMPTY:
        return 409;
    case ELOOP:
    case EXDEV:
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
        return 400;
    default:
        return 500;
    }
}

static void vol__errno(struct al_http_req *req, const struct vol_req *x, const char *what, int e)
{
    char full[160];
    snprintf(full, sizeof full,
             " (the volume is full: its quota is %llu MiB, its sizeMB; remove files first)",
             (unsigned long long)x->size_mb);
    const char *hint = e == ENOSPC || e == EDQUOT ? full
                       : e == ELOOP || e == EXDEV ? " (a symbolic link on the way leads out of "
                                                    "the volume or to another file system)"
                                                  : "";
    cp_rest_error(req, vol__status(e), "%s %s in volume %s: %s%s", what, x->shown, x->id,
                  strerror(e), hint);
}

static json_t *vol__time(const struct timespec *ts)
{
    char b[40];
    al_time_rfc3339(b, sizeof b, (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec);
    return json_string(b);
}

/* E2B's VolumeEntryStat of name under dirfd (not followed), shown at path. */
static json_t *vol__stat_json(int dirfd, const char *name, const char *path, int *err)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW | (name[0] ? 0 : AT_EMPTY_PATH)) < 0) {
        *err = errno;
        return NULL;
    }
    const char *type = S_ISREG(st.st_mode)   ? "file"
                       : S_ISDIR(st.st_mode) ? "directory"
                       : S_ISLNK(st.st_mode) ? "symlink"
                                             : "unknown";
    const char *base = strrchr(path, '/');
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(base && base[1] ? base + 1 : path));
    json_object_set_new(o, "path", json_string(path));
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "size", json_integer((json_int_t)st.st_size));
    json_object_set_new(o, "mode", json_integer((json_int_t)(st.st_mode & 07777)));
    json_object_set_new(o, "uid", json_integer((json_int_t)st.st_uid));
    json_object_set_new(o, "gid", json_integer((json_int_t)st.st_gid));
    json_object_set_new(o, "atime", vol__time(&st.st_atim));
    json_object_set_new(o, "mtime", vol__time(&st.st_mtim));
    json_object_set_new(o, "ctime", vol__time(&st.st_ctim));
    if (S_ISLNK(st.st_mode)) {
        char t[4096];
        ssize_t n = readlinkat(dirfd, name, t, sizeof t - 1);
        if (n >= 0) {
            t[n] = '\0';
            json_object_set_new(o, "target", json_string(t));
        }
    }
    return o;
}

/* The parent of the path, opened inside the volume (never leaving it). */
static int vol__parent(const struct vol_req *x, bool create)
{
    char parent[4096];
    const char *slash = strrchr(x->rel, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - x->rel), x->rel);
    if (create && strcmp(parent, ".") != 0) {
        /* mkdir -p, one component at a time, each resolved inside the volume. */
        char part[4096];
        for (char *p = parent;; p++) {
            if (*p != '/' && *p != '\0')
                continue;
            snprintf(part, sizeof part, "%.*s", (int)(p - parent), parent);
            long d = vol__openat2(x->root, part, O_PATH | O_DIRECTORY, 0);
            if (d < 0 && errno == ENOENT) {
                const char *s = strrchr(part, '/');
                char up[4096];
                snprintf(up, sizeof up, "%.*s", s ? (int)(s - part) : 1, s ? part : ".");
                long u = vol__openat2(x->root, up, O_PATH | O_DIRECTORY, 0);
                if (u < 0)
                    return -errno;
                int rc = mkdirat((int)u, s ? s + 1 : part, 0755);
                if (rc == 0 && fchownat((int)u, s ? s + 1 : part, (uid_t)x->wuid, (gid_t)x->wgid,
                                        AT_SYMLINK_NOFOLLOW) < 0)
                    rc = -1;
                int e = errno;
                close((int)u);
                if (rc < 0 && e != EEXIST)
                    return -e;
            } else if (d < 0) {
                return -errno;
            } else {
                close((int)d);
            }
            if (!*p)
                break;
        }
    }
    long fd = vol__openat2(x->root, parent, O_PATH | O_DIRECTORY, 0);
    return fd < 0 ? -errno : (int)fd;
}

/* An integer query parameter (absent: *out unchanged); false after a 400. */
static bool vol__int_param(struct al_http_req *req, const char *name, long min, long max, int base,
                           int *out)
{
    char buf[32];
    int rc = al_http_query_get(req->query, name, buf, sizeof buf);
    if (rc == -ENOENT || (rc == 0 && !buf[0]))
        return true;
    char *end = NULL;
    errno = 0;
    long v = rc == 0 ? strtol(buf, &end, base) : 0;
    if (rc || errno || !end || *end || v < min || v > max) {
        cp_rest_error(req, 400, "%s must be a number from %ld to %ld", name, min, max);
        return false;
    }
    *out = (int)v;
    return true;
}

/* uid, gid and mode of what a request makes (the sandbox's user and 0644/0755 by default). */
static bool vol__owner_params(struct al_http_req *req, struct vol_req *x, int def_mode)
{
    x->wuid = x->wgid = VOL_DEFAULT_ID;
    x->wmode = def_mode;
    return vol__int_param(req, "uid", 0, 65535, 10, &x->wuid) &&
           vol__int_param(req, "gid", 0, 65535, 10, &x->wgid) &&
           vol__int_param(req, "mode", 0, 07777, 0, &x->wmode);
}

static void vol__reply_stat(struct al_http_req *req, struct vol_req *x, int status, int dirfd,
                            const char *name)
{
    int e = 0;
    json_t *o = vol__stat_json(dirfd, name, x->shown, &e);
    if (!o)
        vol__errno(req, x, "stat", e);
    else
        al_http_reply_json(req, status, o);
}

/* GET file: the bytes, read on the loop thread (a local file system) and queued. */
static void vol__read_file(struct al_http_req *req, struct vol_req *x)
{
    long fd = vol__openat2(x->root, x->rel, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
    if (fd < 0) {
        vol__errno(req, x, "open", errno);
        return;
    }
    struct stat st;
    if (fstat((int)fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        close((int)fd);
        cp_rest_error(req, vol__status(e), "%s in volume %s is %s, not a file", x->shown, x->id,
                      e == EISDIR ? "a directory" : "not a regular file");
        return;
    }
    const struct al_http_header h = {"Content-Type", "application/octet-stream"};
    if (al_http_resp_start(req, 200, &h, 1, (int64_t)st.st_size) < 0) {
        close((int)fd);
        return;
    }
    char buf[65536];
    uint64_t left = (uint64_t)st.st_size;
    while (left) {
        ssize_t n = read((int)fd, buf, left < sizeof buf ? left : sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || al_http_resp_write(req, buf, (size_t)n) < 0) {
            close((int)fd);
            al_http_resp_abort(req); /* shorter than it said: the client sees it cut */
            return;
        }
        left -= (uint64_t)n;
    }
    close((int)fd);
    al_http_resp_end(req);
}

static int vol__put_data(struct al_http_req *req, const char *data, size_t len)
{
    struct vol_req *x = req->user;
    int rc = al_write_all(x->fd, data, len);
    if (rc < 0) {
        req->user = NULL;
        vol__errno(req, x, "write", -rc);
        vol__req_free(x);
        return 0;
    }
    x->bytes += len;
    return 0;
}

static void vol__put_end(struct al_http_req *req, int err)
{
    struct vol_req *x = req->user;
    req->user = NULL;
    if (err < 0) {
        vol__req_free(x);
        return;
    }
    int e = 0;
    if (fchown(x->fd, (uid_t)x->wuid, (gid_t)x->wgid) < 0 || fchmod(x->fd, (mode_t)x->wmode) < 0 ||
        fsync(x->fd) < 0)
        e = errno;
    /* Renamed over the old file (or a link of that name): never written through it. */
    if (!e && renameat(x->pfd, x->tmp, x->pfd, x->leaf) < 0)
        e = errno;
    if (e) {
        vol__errno(req, x, "write", e);
        vol__req_free(x);
        return;
    }
    close(x->fd);
    x->fd = -1;
    fsync(x->pfd);
    vol__reply_stat(req, x, 200, x->pfd, x->leaf);
    vol__req_free(x);
}

static void vol__write_file(struct al_http_req *req, struct vol_req *x)
{
    bool force;
    if (!x->leaf[0]) {
        cp_rest_error(req, 400, "cannot write a file at the volume's root directory");
        vol__req_free(x);
        return;
    }
    if (!vol__owner_params(req, x, 0644) || !cp_rest_bool_param(req, "force", &force)) {
        vol__req_free(x);
        return;
    }
    x->pfd = vol__parent(x, force);
    if (x->pfd < 0) {
        int e = -x->pfd;
        x->pfd = -1;
        cp_rest_error(req, vol__status(e), "the directory of %s in volume %s: %s%s", x->shown,
                      x->id, strerror(e),
                      e == ENOENT ? " (make it first, or pass force=true to make it)" : "");
        vol__req_free(x);
        return;
    }
    char rnd[CP_ID_LEN + 1];
    cp_sandbox_id_new(rnd);
    snprintf(x->tmp, sizeof x->tmp, ".airlock-upload-%s", rnd);
    x->fd = openat(x->pfd, x->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (x->fd < 0) {
        vol__errno(req, x, "create", errno);
        vol__req_free(x);
        return;
    }
    req->user = x;
    int rc = al_http_req_stream_body(req, vol__put_data, vol__put_end);
    if (rc < 0) {
        req->user = NULL;
        cp_rest_error(req, 500, "cannot read the upload: %s", strerror(-rc));
        vol__req_free(x);
    }
}

/* GET dir: the entries to depth levels, each level sorted by name. */
static int vol__name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int vol__list_dir(int dfd, const char *shown, int depth, json_t *out)
{
    int dup = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dup < 0)
        return -errno;
    DIR *d = fdopendir(dup);
    if (!d) {
        close(dup);
        return -errno;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **v = realloc(names, cap * sizeof *v);
            if (!v) {
                rc = -ENOMEM;
                break;
            }
            names = v;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        n++;
    }
    if (n)
        qsort(names, n, sizeof *names, vol__name_cmp);
    for (size_t i = 0; i < n && !rc; i++) {
        if (json_array_size(out) >= VOL_MAX_ENTRIES) {
            rc = -E2BIG;
            break;
        }
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", strcmp(shown, "/") == 0 ? "" : shown, names[i]);
        int e = 0;
        json_t *o = vol__stat_json(dirfd(d), names[i], path, &e);
        if (!o)
            continue; /* gone meanwhile */
        bool is_dir = strcmp(json_string_value(json_object_get(o, "type")), "directory") == 0;
        json_array_append_new(out, o);
        if (is_dir && depth > 1) {
            int sub = openat(dirfd(d), names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                rc = vol__list_dir(sub, path, depth - 1, out);
                close(sub);
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

static void vol__get_dir(struct al_http_req *req, struct vol_req *x)
{
    int depth = 1;
    if (!vol__int_param(req, "depth", 1, VOL_MAX_DEPTH, 10, &depth))
        return;
    long fd = vol__openat2(x->root, x->rel, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) {
        vol__errno(req, x, "list", errno);
        return;
    }
    json_t *out = json_array();
    int rc = vol__list_dir((int)fd, x->shown, depth, out);
    close((int)fd);
    if (rc == -E2BIG) {
        json_decref(out);
        cp_rest_error(req, 400,
                      "%s in volume %s has more than %d entries to depth %d: ask for "
                      "less depth",
                      x->shown, x->id, VOL_MAX_ENTRIES, depth);
    } else if (rc) {
        json_decref(out);
        vol__errno(req, x, "list", -rc);
    } else {
        al_http_reply_json(req, 200, out);
    }
}

static void vol__make_dir(struct al_http_req *req, struct vol_req *x)
{
    bool force;
    if (!vol__owner_params(req, x, 0755) || !cp_rest_bool_param(req, "force", &force))
        return;
    if (!x->leaf[0]) {
        if (force)
            vol__reply_stat(req, x, 201, x->root, "");
        else
            cp_rest_error(req, 409, "the volume's root directory exists");
        return;
    }
    int pfd = vol__parent(x, force);
    if (pfd < 0) {
        cp_rest_error(req, vol__status(-pfd), "the directory of %s in volume %s: %s%s", x->shown,
                      x->id, strerror(-pfd),
                      pfd == -ENOENT ? " (pass force=true to make the missing ones)" : "");
        return;
    }
    int rc = mkdirat(pfd, x->leaf, (mode_t)x->wmode);
    if (rc < 0 && errno == EEXIST && force) {
        struct stat st;
        if (fstatat(pfd, x->leaf, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
            vol__reply_stat(req, x, 201, pfd, x->leaf);
            close(pfd);
            return;
        }
    }
    if (rc < 0 || fchownat(pfd, x->leaf, (uid_t)x->wuid, (gid_t)x->wgid, AT_SYMLINK_NOFOLLOW) < 0 ||
        fchmodat(pfd, x->leaf, (mode_t)x->wmode, 0) < 0)
        vol__errno(req, x, "make directory", errno);
    else
        vol__reply_stat(req, x, 201, pfd, x->leaf);
    close(pfd);
}

/* PATCH path: {"uid"?, "gid"?, "mode"?} */
static void vol__patch_body(struct al_http_req *req, int status)
{
    struct vol_req *x = req->user;
    req->user = NULL;
    if (status < 0) {
        vol__req_free(x);
        return;
    }
    struct al_error err = {0};
    json_t *b = req->body.len ? al_json_parse(req->body.data, req->body.len, &err) : json_object();
    int64_t uid = -1, gid = -1, mode = -1;
    const char *k;
    json_t *v;
    int rc = b && json_is_object(b) ? 0
                                    : al_error_set(&err, -EINVAL,
                                                   "the body must be a JSON "
                                                   "object {uid, gid, mode}");
    if (!rc)
        json_object_foreach(b, k, v)
        {
            if (!rc && strcmp(k, "uid") && strcmp(k, "gid") && strcmp(k, "mode"))
                rc = al_error_set(&err, -EINVAL, "\"%.64s\" is not uid, gid or mode", k);
        }
    if (!rc && json_object_get(b, "uid") && !json_is_null(json_object_get(b, "uid")))
        rc = al_json_get_int(b, "uid", false, 0, 65535, &uid, "metadata", &err);
    if (!rc && json_object_get(b, "gid") && !json_is_null(json_object_get(b, "gid")))
        rc = al_json_get_int(b, "gid", false, 0, 65535, &gid, "metadata", &err);
    if (!rc && json_object_get(b, "mode") && !json_is_null(json_object_get(b, "mode")))
        rc = al_json_get_int(b, "mode", false, 0, 07777, &mode, "metadata", &err);
    json_decref(b);
    if (rc) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        vol__req_free(x);
        return;
    }
    int pfd = x->leaf[0] ? vol__parent(x, false) : dup(x->root);
    const char *name = x->leaf[0] ? x->leaf : "";
    if (pfd < 0) {
        vol__errno(req, x, "change", pfd < 0 && x->leaf[0] ? -pfd : errno);
        vol__req_free(x);
        return;
    }
    struct stat st;
    int e = 0;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW | (name[0] ? 0 : AT_EMPTY_PATH)) < 0)
        e = errno;
    else if ((uid >= 0 || gid >= 0) &&
             fchownat(pfd, name, uid >= 0 ? (uid_t)uid : (uid_t)-1,
                      gid >= 0 ? (gid_t)gid : (gid_t)-1,
                      AT_SYMLINK_NOFOLLOW | (name[0] ? 0 : AT_EMPTY_PATH)) < 0)
        e = errno;
    else if (mode >= 0 && S_ISLNK(st.st_mode))
        e = ELOOP; /* a link has no mode of its own; changing it would change its target */
    else if (mode >= 0 && fchmodat(pfd, name[0] ? name : ".", (mode_t)mode, 0) < 0)
        e = errno;
    if (e)
        vol__errno(req, x, "change", e);
    else
        vol__reply_stat(req, x, 200, pfd, name);
    close(pfd);
    vol__req_free(x);
}

static void vol__remove(struct al_http_req *req, struct vol_req *x)
{
    if (!x->leaf[0]) {
        cp_rest_error(req, 400, "cannot remove the volume's root directory (destroy the volume)");
        return;
    }
    int pfd = vol__parent(x, false);
    if (pfd < 0) {
        vol__errno(req, x, "remove", -pfd);
        return;
    }
    struct stat st;
    int rc = 0;
    if (fstatat(pfd, x->leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
        rc = -errno;
    else
        rc = al_rmtree_at(pfd, x->leaf); /* never follows a link */
    close(pfd);
    if (rc)
        vol__errno(req, x, "remove", -rc);
    else
        al_http_reply(req, 204, NULL, NULL, 0);
}

bool cp_volumes_content_route(struct cp *cp, struct al_http_req *req)
{
    const char *p = req->path, *m = req->method;
    if (strncmp(p, "/volumecontent/", 15) != 0)
        return false;
    p += 15;
    char id[72];
    if (!cp_rest_path_part(&p, id, sizeof id) || *p != '/') {
        cp_rest_error(req, 404,
                      "no such endpoint: %s %s (/volumecontent/{volumeID}/file, /dir "
                      "or /path)",
                      m, req->path);
        return true;
    }
    const char *what = p + 1;
    int kind = strcmp(what, "file") == 0   ? 'f'
               : strcmp(what, "dir") == 0  ? 'd'
               : strcmp(what, "path") == 0 ? 'p'
                                           : 0;
    if (!kind) {
        cp_rest_error(req, 404,
                      "no such endpoint: %s %s (/volumecontent/{volumeID}/file, /dir "
                      "or /path)",
                      m, req->path);
        return true;
    }
    /* The volume's token, as E2B's SDK sends it; the same answer for a wrong token and an
     * unknown volume, so that ids cannot be probed. */
    const char *auth = al_http_req_header(req, "Authorization");
    const char *tok = auth && strncasecmp(auth, "Bearer ", 7) == 0 ? auth + 7 : NULL;
    struct cp_store_vol r;
    struct al_error err = {0};
    int rc = vol__id_valid(id) ? cp_store_vol_load(cp->store, id, &r, &err) : -ENOENT;
    if (rc && rc != -ENOENT) {
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return true;
    }
    bool ok = rc == 0 && tok && al_http_req_header_count(req, "Authorization") == 1 &&
              cp_secret_equal(tok, strlen(tok), r.token, strlen(r.token));
    sodium_memzero(r.token, sizeof r.token);
    if (!ok) {
        cp_rest_error(req, 401,
                      "volume content requests need the volume's token as \"Authorization: "
                      "Bearer <token>\" (Volume.create and Volume.getInfo give it): none "
                      "valid for volume \"%.64s\"",
                      id);
        return true;
    }
    struct vol_req *x = calloc(1, sizeof *x);
    if (!x) {
        cp_rest_error(req, 500, "out of memory");
        return true;
    }
    x->cp = cp;
    x->root = x->pfd = x->fd = -1;
    snprintf(x->id, sizeof x->id, "%s", id);
    x->size_mb = r.size_bytes >> 20;
    char raw[4096];
    int q = al_http_query_get(req->query, "path", raw, sizeof raw);
    if (q == -ENOENT)
        raw[0] = '\0';
    if (q == -E2BIG || (q && q != -ENOENT) ||
        cp_volume_path_norm(raw, x->rel, sizeof x->rel, &err)) {
        cp_rest_error(req, 400, "%s",
                      q == -E2BIG         ? "path is too long"
                      : q && q != -ENOENT ? "path is not a valid query parameter"
                                          : al_error_str(&err));
        vol__req_free(x);
        return true;
    }
    const char *slash = strrchr(x->rel, '/');
    snprintf(x->leaf, sizeof x->leaf, "%s",
             strcmp(x->rel, ".") == 0 ? ""
             : slash                  ? slash + 1
                                      : x->rel);
    snprintf(x->shown, sizeof x->shown, "/%s", strcmp(x->rel, ".") == 0 ? "" : x->rel);
    char dir[4300];
    if ((rc = cp_volume_mount(cp, id, dir, sizeof dir, &err))) {
        al_warn("volume %s: %s", id, al_error_str(&err));
        cp_rest_error(req, 500, "volume %s cannot be mounted: %s", id, al_error_str(&err));
        vol__req_free(x);
        return true;
    }
    x->root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (x->root < 0) {
        cp_rest_error(req, 500, "open %s: %s", dir, strerror(errno));
        vol__req_free(x);
        return true;
    }
    bool get = strcmp(m, "GET") == 0;
    if (kind == 'f' && get) {
        vol__read_file(req, x);
    } else if (kind == 'f' && strcmp(m, "PUT") == 0) {
        vol__write_file(req, x); /* x is the upload's now */
        return true;
    } else if (kind == 'd' && get) {
        vol__get_dir(req, x);
    } else if (kind == 'd' && strcmp(m, "POST") == 0) {
        vol__make_dir(req, x);
    } else if (kind == 'p' && get) {
        if (!x->leaf[0]) {
            vol__reply_stat(req, x, 200, x->root, "");
        } else {
            int pfd = vol__parent(x, false);
            if (pfd < 0)
                vol__errno(req, x, "stat", -pfd);
            else
                vol__reply_stat(req, x, 200, pfd, x->leaf);
            if (pfd >= 0)
                close(pfd);
        }
    } else if (kind == 'p' && strcmp(m, "PATCH") == 0) {
        req->user = x;
        if ((rc = al_http_req_read_body(req, 4096, vol__patch_body)) < 0) {
            req->user = NULL;
            cp_rest_error(req, 400, "cannot read the request body: %s", strerror(-rc));
            vol__req_free(x);
        }
        return true;
    } else if (kind == 'p' && strcmp(m, "DELETE") == 0) {
        vol__remove(req, x);
    } else {
        cp_rest_error(req, 405, "%s is not allowed on /volumecontent/{volumeID}/%s (%s)", m, what,
                      kind == 'f'   ? "GET reads, PUT writes"
                      : kind == 'd' ? "GET lists, POST makes"
                                    : "GET stats, PATCH changes, DELETE removes");
    }
    vol__req_free(x);
    return true;
}

/* ---- at start ------------------------------------------------------------------------------ */

/* An image "<id>.img" or a mount directory "<id>" of a volume with a row. */
static bool vol__recorded(const char *name, void *arg)
{
    struct cp *cp = arg;
    char id[72];
    snprintf(id, sizeof id, "%s", name);
    char *dot = strstr(id, ".img");
    if (dot && !dot[4])
        *dot = '\0';
    struct cp_store_vol r;
    if (!vol__id_valid(id) || cp_store_vol_load(cp->store, id, &r, NULL) != 0)
        return false;
    sodium_memzero(r.token, sizeof r.token);
    return true;
}

/* A volume's mount directory is unmounted before it goes (never removed through). */
static void vol__release(const char *path, void *arg)
{
    (void)arg;
    vol__detach(path);
}

void cp_volumes_sweep(struct cp *cp)
{
    char top[4200];
    snprintf(top, sizeof top, "%s/volumes", cp->cfg.state_dir);
    cp_sweep_dir(top, &(struct cp_sweep){.what = "volume",
                                         .create = true,
                                         .recorded = vol__recorded,
                                         .release = vol__release,
                                         .arg = cp});
}
