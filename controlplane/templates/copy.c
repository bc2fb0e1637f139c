/* controlplane/templates/copy: see copy.h. */
#include "copy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apply.h"
#include "common/util.h"
#include "vmm/guest/users.h"

static int copy__err(char *msg, size_t len, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int copy__err(char *msg, size_t len, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return rc;
}

int tpl_copy_source(const char *src, char *out, size_t len, char *msg, size_t msglen)
{
    /* As doublestar's SplitPattern, which E2B's builder applies to the source with a '/'
     * appended: the base ends at the last '/' before the first glob character. */
    char tmp[4098];
    int n = snprintf(tmp, sizeof tmp, "%s/", src);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return copy__err(msg, msglen, -ENAMETOOLONG, "the source is too long");
    if (src[0] == '/')
        return copy__err(msg, msglen, -EINVAL,
                         "the source '%.200s' is absolute: a COPY source is relative to the "
                         "files the SDK uploaded",
                         src);
    ssize_t split = -1;
    for (size_t i = 0; tmp[i]; i++) {
        char c = tmp[i];
        if (c == '\\' && tmp[i + 1])
            i++;
        else if (c == '/')
            split = (ssize_t)i;
        else if (c == '*' || c == '?' || c == '[' || c == '{')
            break;
    }
    if (split >= 0)
        tmp[split] = '\0';
    else
        tmp[0] = '\0';
    char why[256];
    int rc = tpl_path_clean(tmp, out, len, 4096, why, sizeof why);
    if (rc)
        return copy__err(msg, msglen, rc, "the source '%.200s': %s", src, why);
    return 0;
}

enum tpl_copy_rel tpl_copy_relate(const char *base, const char *path, const char **rel)
{
    size_t n = strlen(base);
    if (strcmp(path, base) == 0) {
        *rel = "";
        return TPL_COPY_SELF;
    }
    if (n == 0) {
        *rel = path;
        return TPL_COPY_BENEATH;
    }
    if (strncmp(path, base, n) == 0 && path[n] == '/') {
        *rel = path + n + 1;
        return TPL_COPY_BENEATH;
    }
    return TPL_COPY_SKIP;
}

/* etc/<name> of the root, as the sandbox will read it (its own links resolved in it). */
static int copy__read_etc(int root, const char *name, char **data, size_t *len)
{
    char p[64];
    snprintf(p, sizeof p, "/etc/%s", name);
    *data = NULL;
    *len = 0;
    int fd = tpl_open_in_root(root, p, O_RDONLY);
    if (fd < 0)
        return fd;
    int rc = al_read_fd(fd, p, AGENT_USERDB_MAX_FILE, data, len, NULL);
    close(fd);
    return rc;
}

static bool copy__number(const char *s, uint32_t *out)
{
    if (!s[0] || strlen(s) > 10)
        return false;
    unsigned long long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

int tpl_copy_owner(int root, const char *spec, uint32_t *uid, uint32_t *gid, char *msg,
                   size_t msglen)
{
    char user[256], group[256] = "";
    const char *colon = strchr(spec, ':');
    size_t ul = colon ? (size_t)(colon - spec) : strlen(spec);
    if (!ul || ul >= sizeof user || (colon && (!colon[1] || strlen(colon + 1) >= sizeof group)))
        return copy__err(msg, msglen, -EINVAL,
                         "the owner '%.100s' is not user or user:group (names or ids)", spec);
    memcpy(user, spec, ul);
    user[ul] = '\0';
    if (colon)
        snprintf(group, sizeof group, "%s", colon + 1);
    char *pw = NULL, *gr = NULL;
    size_t pwl = 0, grl = 0;
    copy__read_etc(root, "passwd", &pw, &pwl);
    copy__read_etc(root, "group", &gr, &grl);
    int rc = 0;
    struct agent_user u;
    bool user_num = copy__number(user, uid);
    if (!user_num) {
        if (!pw || agent_passwd_parse(pw, pwl, user, 0, &u) < 0) {
            rc = copy__err(msg, msglen, -ENOENT,
                           "the user '%s' is not in the image's /etc/passwd: name one it has, "
                           "or give ids (uid:gid)",
                           user);
            goto out;
        }
        *uid = (uint32_t)u.uid;
    }
    if (group[0]) {
        gid_t g;
        if (copy__number(group, gid))
            ;
        else if (gr && agent_group_parse_gid(gr, grl, group, &g) == 0)
            *gid = (uint32_t)g;
        else {
            rc = copy__err(msg, msglen, -ENOENT,
                           "the group '%s' is not in the image's /etc/group: name one it has, "
                           "or give its id",
                           group);
            goto out;
        }
    } else if (user_num) {
        *gid = *uid;
    } else {
        gid_t g;
        *gid = gr && agent_group_parse_gid(gr, grl, user, &g) == 0 ? (uint32_t)g : (uint32_t)u.gid;
    }
    if (*uid > TPL_ID_MAX || *gid > TPL_ID_MAX)
        rc = copy__err(msg, msglen, -ERANGE,
                       "the owner '%s' is %u:%u: a template's files have ids 0 to %u", spec, *uid,
                       *gid, TPL_ID_MAX);
out:
    free(pw);
    free(gr);
    return rc;
}

/* Where the source goes, opened once its first entry says whether it is a file or a
 * directory. */
struct copy_target {
    int fd;         /* the directory entries are applied beneath (-1: not yet) */
    bool single;    /* the source is a file: it becomes name in fd */
    char name[256]; /* its name there */
};

static int copy__open_target(int root, const struct tpl_copy_opts *o, const char *base, bool single,
                             struct copy_target *tg, struct tpl_copy_result *res, char *msg,
                             size_t msglen)
{
    tg->single = single;
    const char *dir = o->dest;
    char parent[4097];
    if (single) {
        /* A file: into the destination when it is (or is said to be) a directory, else as
         * the destination itself. */
        bool into = o->dest_is_dir || strcmp(o->dest, "/") == 0;
        if (!into) {
            int fd = tpl_open_in_root(root, o->dest, O_PATH | O_DIRECTORY);
            if (fd >= 0)
                close(fd);
            into = fd >= 0;
        }
        const char *slash;
        if (into) {
            slash = strrchr(base, '/');
            snprintf(tg->name, sizeof tg->name, "%s", slash ? slash + 1 : base);
        } else {
            slash = strrchr(o->dest, '/');
            snprintf(tg->name, sizeof tg->name, "%s", slash + 1);
            snprintf(parent, sizeof parent, "%.*s", (int)(slash - o->dest), o->dest);
            dir = parent[0] ? parent : "/";
        }
        snprintf(res->where, sizeof res->where, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "",
                 tg->name);
    } else {
        snprintf(res->where, sizeof res->where, "%s", dir);
    }
    res->single = single;
    return tpl_mkdir_in_root(root, dir, &tg->fd, msg, msglen);
}

int tpl_copy_apply(int root, struct tpl_tar *t, const struct tpl_copy_opts *o,
                   struct tpl_copy_result *res, char *msg, size_t msglen)
{
    memset(res, 0, sizeof *res);
    msg[0] = '\0';
    char base[4097], why[512];
    int rc = tpl_copy_source(o->src, base, sizeof base, msg, msglen);
    if (rc)
        return rc;
    struct copy_target tg = {.fd = -1};
    struct tpl_apply *a = NULL;
    uint64_t seen = 0;
    const struct tpl_tar_entry *e;
    char path[4097], link[4097];
    while ((rc = tpl_tar_next(t, &e)) == 1) {
        if (++seen > o->max_entries) {
            rc = copy__err(msg, msglen, -E2BIG, "the archive has more than %llu entries",
                           (unsigned long long)o->max_entries);
            break;
        }
        if ((rc = tpl_path_clean(e->path, path, sizeof path, o->max_path, why, sizeof why))) {
            rc = copy__err(msg, msglen, rc, "archive entry '%.200s': %s", e->path, why);
            break;
        }
        const char *rel;
        enum tpl_copy_rel how = tpl_copy_relate(base, path, &rel);
        if (how == TPL_COPY_SKIP)
            continue;
        if (e->type == TPL_TAR_CHR || e->type == TPL_TAR_BLK) {
            rc = copy__err(msg, msglen, -EPERM,
                           "archive entry '%.200s': a device node: device nodes cannot be "
                           "copied into a template",
                           path);
            break;
        }
        bool single = how == TPL_COPY_SELF && e->type != TPL_TAR_DIR;
        if (how == TPL_COPY_SELF && !base[0] && single) {
            rc = copy__err(msg, msglen, -EINVAL, "the archive's root is not a directory");
            break;
        }
        if (tg.fd < 0) {
            if ((rc = copy__open_target(root, o, base, single, &tg, res, msg, msglen)))
                break;
            if ((rc = tpl_apply_new(tg.fd, o->max_path, o->max_entries, o->max_bytes, &a))) {
                rc = copy__err(msg, msglen, rc, "out of memory");
                break;
            }
            tpl_apply_no_whiteouts(a);
        } else if (tg.single || single) {
            rc = copy__err(msg, msglen, -EINVAL,
                           "archive entry '%.200s': the archive has the source '%s' as a file "
                           "and as a directory",
                           path, base);
            break;
        }
        if (how == TPL_COPY_SELF && !single)
            continue; /* the destination directory itself: made, not changed */
        struct tpl_tar_entry c = *e;
        c.path = single ? tg.name : (char *)rel;
        c.uid = o->uid;
        c.gid = o->gid;
        c.n_xattrs = 0;
        if (o->mode >= 0 && e->type != TPL_TAR_SYMLINK)
            c.mode = (uint32_t)o->mode;
        if (e->type == TPL_TAR_HARDLINK) {
            /* The target is a path of the archive: it must be something this step copies,
             * named as it is named in the destination. */
            const char *tgt = e->link, *lrel = NULL;
            while (tgt[0] == '/')
                tgt++;
            enum tpl_copy_rel lh = TPL_COPY_SKIP;
            if (tpl_path_clean(tgt, link, sizeof link, o->max_path, why, sizeof why) == 0)
                lh = tpl_copy_relate(base, link, &lrel);
            if (lh == TPL_COPY_SKIP || (lh == TPL_COPY_SELF) != single) {
                rc = copy__err(msg, msglen, -EINVAL,
                               "archive entry '%.200s': a hard link to '%.200s', which this COPY "
                               "does not copy",
                               path, e->link);
                break;
            }
            c.link = single ? tg.name : (char *)lrel;
        }
        char amsg[700];
        if ((rc = tpl_apply_entry(a, t, &c, amsg, sizeof amsg)) < 0) {
            rc = copy__err(msg, msglen, rc, "archive entry '%.200s': %s", path, amsg);
            break;
        }
        res->entries++;
        if (e->type == TPL_TAR_REG)
            res->files++;
    }
    if (rc < 0 && !msg[0])
        copy__err(msg, msglen, rc, "%s", tpl_tar_error(t));
    else if (rc == 0 && tg.fd < 0)
        rc = copy__err(msg, msglen, -ENOENT,
                       "nothing in the uploaded archive is at '%s' (the archive holds the files "
                       "the SDK found for the source)",
                       base[0] ? base : ".");
    if (a)
        res->bytes = tpl_apply_stats(a)->bytes;
    tpl_apply_free(a);
    if (tg.fd >= 0)
        close(tg.fd);
    return rc < 0 ? rc : 0;
}
