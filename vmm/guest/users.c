/* vmm/guest/users: see users.h. */
#include "users.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/util.h"

void agent_userdb_init(struct agent_userdb *db, const char *passwd_path, const char *group_path)
{
    memset(db, 0, sizeof *db);
    snprintf(db->passwd.path, sizeof db->passwd.path, "%s", passwd_path);
    snprintf(db->group.path, sizeof db->group.path, "%s", group_path);
}

void agent_userdb_free(struct agent_userdb *db)
{
    free(db->passwd.data);
    free(db->group.data);
    db->passwd.data = db->group.data = NULL;
}

/* (Re)loads the file when it changed; a missing file reads as empty. */
static int users__refresh(struct agent_userdb_file *f)
{
    struct stat st;
    if (stat(f->path, &st) < 0) {
        free(f->data);
        f->data = NULL;
        f->len = 0;
        f->loaded = true;
        memset(&f->mtime, 0, sizeof f->mtime);
        f->ino = 0;
        return -errno;
    }
    if (f->loaded && f->data && st.st_dev == f->dev && st.st_ino == f->ino &&
        st.st_size == f->size && st.st_mtim.tv_sec == f->mtime.tv_sec &&
        st.st_mtim.tv_nsec == f->mtime.tv_nsec)
        return 0;
    char *data = NULL;
    size_t len = 0;
    int r = al_read_file(f->path, AGENT_USERDB_MAX_FILE, &data, &len, NULL);
    if (r < 0)
        return r;
    free(f->data);
    f->data = data;
    f->len = len;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->size = st.st_size;
    f->mtime = st.st_mtim;
    f->loaded = true;
    return 0;
}

/* Splits one line into at most n ':'-separated fields (pointers into line, NUL-terminated). */
static size_t users__fields(char *line, char **f, size_t n)
{
    size_t k = 0;
    f[k++] = line;
    for (char *p = line; *p && k < n; p++) {
        if (*p == ':') {
            *p = '\0';
            f[k++] = p + 1;
        }
    }
    return k;
}

static int users__id(const char *s, unsigned long *out)
{
    if (!*s || strlen(s) > 10)
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > UINT_MAX - 1)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Iterates over lines of a buffer: calls fn(line copy) until it returns non-zero. */
static int users__each_line(const char *data, size_t len, int (*fn)(char *line, void *arg),
                            void *arg)
{
    size_t i = 0;
    char line[4096];
    while (i < len) {
        const char *nl = memchr(data + i, '\n', len - i);
        size_t ll = nl ? (size_t)(nl - (data + i)) : len - i;
        if (ll < sizeof line && !memchr(data + i, '\0', ll)) {
            memcpy(line, data + i, ll);
            line[ll] = '\0';
            if (ll && line[ll - 1] == '\r')
                line[ll - 1] = '\0';
            if (line[0] && line[0] != '#' && line[0] != '+' && line[0] != '-') {
                int r = fn(line, arg);
                if (r)
                    return r;
            }
        } /* over-long or binary lines are skipped, never truncated into a false match */
        i += ll + 1;
    }
    return 0;
}

struct users__pw_query {
    const char *name;
    uid_t uid;
    struct agent_user *out;
};

static int users__pw_line(char *line, void *arg)
{
    struct users__pw_query *q = arg;
    char *f[7];
    if (users__fields(line, f, 7) != 7)
        return 0;
    unsigned long uid, gid;
    if (users__id(f[2], &uid) < 0 || users__id(f[3], &gid) < 0)
        return 0;
    if (q->name ? strcmp(f[0], q->name) != 0 : (uid_t)uid != q->uid)
        return 0;
    if (strlen(f[0]) >= sizeof q->out->name || strlen(f[5]) >= sizeof q->out->home ||
        strlen(f[6]) >= sizeof q->out->shell)
        return 0;
    memset(q->out, 0, sizeof *q->out);
    strcpy(q->out->name, f[0]);
    q->out->uid = (uid_t)uid;
    q->out->gid = (gid_t)gid;
    strcpy(q->out->home, f[5][0] ? f[5] : "/");
    strcpy(q->out->shell, f[6]);
    q->out->groups[0] = (gid_t)gid;
    q->out->ngroups = 1;
    return 1;
}

int agent_passwd_parse(const char *data, size_t len, const char *name, uid_t uid,
                       struct agent_user *out)
{
    struct users__pw_query q = {name, uid, out};
    return users__each_line(data, len, users__pw_line, &q) == 1 ? 0 : -ENOENT;
}

static int users__gr_member_line(char *line, void *arg)
{
    struct agent_user *u = arg;
    char *f[4];
    if (users__fields(line, f, 4) != 4)
        return 0;
    unsigned long gid;
    if (users__id(f[2], &gid) < 0)
        return 0;
    char *save = NULL;
    for (char *m = strtok_r(f[3], ",", &save); m; m = strtok_r(NULL, ",", &save)) {
        if (strcmp(m, u->name) != 0)
            continue;
        for (size_t i = 0; i < u->ngroups; i++)
            if (u->groups[i] == (gid_t)gid)
                return 0;
        if (u->ngroups < AGENT_USER_MAX_GROUPS)
            u->groups[u->ngroups++] = (gid_t)gid;
        return 0;
    }
    return 0;
}

void agent_group_members(const char *data, size_t len, struct agent_user *u)
{
    users__each_line(data, len, users__gr_member_line, u);
}

struct users__gr_query {
    gid_t gid;
    char *out;
    size_t outlen;
};

static int users__gr_name_line(char *line, void *arg)
{
    struct users__gr_query *q = arg;
    char *f[4];
    if (users__fields(line, f, 4) < 3)
        return 0;
    unsigned long gid;
    if (users__id(f[2], &gid) < 0 || (gid_t)gid != q->gid)
        return 0;
    if (strlen(f[0]) >= q->outlen)
        return 0;
    strcpy(q->out, f[0]);
    return 1;
}

int agent_group_parse_name(const char *data, size_t len, gid_t gid, char *out, size_t outlen)
{
    struct users__gr_query q = {gid, out, outlen};
    return users__each_line(data, len, users__gr_name_line, &q) == 1 ? 0 : -ENOENT;
}

struct users__gid_query {
    const char *name;
    gid_t *gid;
};

static int users__gr_gid_line(char *line, void *arg)
{
    struct users__gid_query *q = arg;
    char *f[4];
    if (users__fields(line, f, 4) < 3 || strcmp(f[0], q->name) != 0)
        return 0;
    unsigned long gid;
    if (users__id(f[2], &gid) < 0)
        return 0;
    *q->gid = (gid_t)gid;
    return 1;
}

int agent_group_parse_gid(const char *data, size_t len, const char *name, gid_t *gid)
{
    struct users__gid_query q = {name, gid};
    return users__each_line(data, len, users__gr_gid_line, &q) == 1 ? 0 : -ENOENT;
}

int agent_gid_by_name(struct agent_userdb *db, const char *name, gid_t *gid)
{
    users__refresh(&db->group);
    if (!db->group.data)
        return -ENOENT;
    return agent_group_parse_gid(db->group.data, db->group.len, name, gid);
}

static int users__lookup(struct agent_userdb *db, const char *name, uid_t uid,
                         struct agent_user *out, struct al_error *err)
{
    users__refresh(&db->passwd);
    users__refresh(&db->group);
    if (!db->passwd.data ||
        agent_passwd_parse(db->passwd.data, db->passwd.len, name, uid, out) < 0) {
        if (name)
            return al_error_set(err, -ENOENT, "user '%.64s' does not exist in %s", name,
                                db->passwd.path);
        return al_error_set(err, -ENOENT, "uid %u does not exist in %s", (unsigned)uid,
                            db->passwd.path);
    }
    if (db->group.data)
        agent_group_members(db->group.data, db->group.len, out);
    return 0;
}

int agent_user_by_name(struct agent_userdb *db, const char *name, struct agent_user *out,
                       struct al_error *err)
{
    return users__lookup(db, name, 0, out, err);
}

int agent_user_by_uid(struct agent_userdb *db, uid_t uid, struct agent_user *out,
                      struct al_error *err)
{
    return users__lookup(db, NULL, uid, out, err);
}

int agent_user_by_spec(struct agent_userdb *db, const char *spec, struct agent_user *out,
                       struct al_error *err)
{
    /* A plain name first: a user may be called "1000" (then it wins, as it does in Docker). */
    struct al_error nerr = {0};
    int r = users__lookup(db, spec, 0, out, &nerr);
    if (r == 0)
        return 0;
    char u[256], *g = NULL;
    unsigned long id;
    if (strlen(spec) >= sizeof u)
        return al_error_set(err, nerr.code, "%s", nerr.msg);
    strcpy(u, spec);
    if ((g = strchr(u, ':')))
        *g++ = '\0';
    bool numeric = users__id(u, &id) == 0;
    if (!g && !numeric)
        return al_error_set(err, nerr.code, "%s", nerr.msg);
    if (numeric) {
        if (users__lookup(db, NULL, (uid_t)id, out, NULL) < 0) {
            /* A uid without a passwd entry: itself, its own group, home "/" (Docker's). */
            memset(out, 0, sizeof *out);
            snprintf(out->name, sizeof out->name, "%lu", id);
            out->uid = (uid_t)id;
            out->gid = (gid_t)id;
            snprintf(out->home, sizeof out->home, "/");
            out->groups[0] = out->gid;
            out->ngroups = 1;
        }
    } else if ((r = users__lookup(db, u, 0, out, err)) < 0) {
        return r;
    }
    if (!g)
        return 0;
    gid_t gid;
    if (users__id(g, &id) == 0)
        gid = (gid_t)id;
    else if (agent_gid_by_name(db, g, &gid) < 0)
        return al_error_set(err, -ENOENT, "user '%.64s': group '%.64s' does not exist in %s", spec,
                            g, db->group.path);
    /* USER u:g runs with that group and no other (Docker's). */
    out->gid = gid;
    out->groups[0] = gid;
    out->ngroups = 1;
    return 0;
}

void agent_uid_name(struct agent_userdb *db, uid_t uid, char *out, size_t outlen)
{
    struct agent_user u;
    users__refresh(&db->passwd);
    if (db->passwd.data && agent_passwd_parse(db->passwd.data, db->passwd.len, NULL, uid, &u) == 0)
        snprintf(out, outlen, "%s", u.name);
    else
        snprintf(out, outlen, "%u", (unsigned)uid);
}

void agent_gid_name(struct agent_userdb *db, gid_t gid, char *out, size_t outlen)
{
    users__refresh(&db->group);
    if (!db->group.data ||
        agent_group_parse_name(db->group.data, db->group.len, gid, out, outlen) < 0)
        snprintf(out, outlen, "%u", (unsigned)gid);
}
