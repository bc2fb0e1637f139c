/* vmm/guest/users: users and groups of the sandbox, read from its own /etc/passwd and
 * /etc/group (never NSS: the agent is static and must not load the template's libraries).
 *
 * Owns: bounded parsing of passwd/group lines, a cache that re-reads a file only when its
 * inode, size or mtime changed, name<->id lookups and a user's supplementary groups.
 */
#ifndef AIRLOCK_GUEST_USERS_H
#define AIRLOCK_GUEST_USERS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "common/error.h"

#define AGENT_USER_MAX_GROUPS 64
#define AGENT_USERDB_MAX_FILE (4u << 20)

struct agent_user {
    char name[256];
    uid_t uid;
    gid_t gid;
    char home[1024];
    char shell[256];
    gid_t groups[AGENT_USER_MAX_GROUPS]; /* primary group first, then supplementary */
    size_t ngroups;
};

struct agent_userdb_file {
    char path[1024];
    char *data;
    size_t len;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    bool loaded;
};

struct agent_userdb {
    struct agent_userdb_file passwd;
    struct agent_userdb_file group;
};

void agent_userdb_init(struct agent_userdb *db, const char *passwd_path, const char *group_path);
void agent_userdb_free(struct agent_userdb *db);

/* -ENOENT (with a message naming the file) when there is no such user. */
int agent_user_by_name(struct agent_userdb *db, const char *name, struct agent_user *out,
                       struct al_error *err);
int agent_user_by_uid(struct agent_userdb *db, uid_t uid, struct agent_user *out,
                      struct al_error *err);
/* A user as an image's USER names it: "name", "uid", "name:group", "uid:gid" (also mixed);
 * a uid without a passwd entry is itself with home "/"; an explicit group replaces the
 * user's groups. -ENOENT when a name or group does not exist. */
int agent_user_by_spec(struct agent_userdb *db, const char *spec, struct agent_user *out,
                       struct al_error *err);
/* Name of a uid/gid into out, or the decimal number when unknown (as envd reports it). */
void agent_uid_name(struct agent_userdb *db, uid_t uid, char *out, size_t outlen);
void agent_gid_name(struct agent_userdb *db, gid_t gid, char *out, size_t outlen);

/* Pure parsers over a buffer (exposed for tests): find the passwd line for name (or uid when
 * name is NULL) and fill out (without groups); add the groups listing the user. */
int agent_passwd_parse(const char *data, size_t len, const char *name, uid_t uid,
                       struct agent_user *out);
void agent_group_members(const char *data, size_t len, struct agent_user *u);
/* Group name for gid; -ENOENT when absent. */
int agent_group_parse_name(const char *data, size_t len, gid_t gid, char *out, size_t outlen);
/* Gid of the group called name; -ENOENT when absent. */
int agent_group_parse_gid(const char *data, size_t len, const char *name, gid_t *gid);
int agent_gid_by_name(struct agent_userdb *db, const char *name, gid_t *gid);

#endif
