/* vault/vault_service: who may do what, and the operations behind the daemon's API and the
 * offline CLI. Every operation checks the caller's roles (from peer credentials), refuses
 * what the role does not allow, and writes one record to the vault's access log before it
 * answers (fail closed: when the log cannot be written, nothing is answered but 503). Values
 * leave only through vault_service_fetch, only to the egress role, only toward a bound host. */
#include "vault/vault.h"

#include "common/confine.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"

#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <malloc.h>
#include <pwd.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>
#include <sys/stat.h>

/* What the user database says about a uid, cached: looking it up costs ~10 us per call and
 * every request needs it. */
#define SVC__UIDS           32
#define SVC__UID_TTL        (60ull * 1000000000ull)
#define SVC__DENY_LOG_PER_S 20
struct svc__uid {
    uid_t uid;
    bool used;
    bool in_admin_group;
    char actor[64];
    uint64_t expires;
    uint64_t deny_window;     /* start of the current second of refusals */
    uint32_t deny_count;      /* refusals in it */
    uint64_t deny_suppressed; /* refusals not logged one by one */
};

struct vault_service {
    struct vault_store *store;
    struct al_auditlog *audit;
    struct vault_roles roles;
    uint32_t max_age_ms;
    struct svc__uid uids[SVC__UIDS];
    unsigned next_uid;
};

/* ---- process hardening -------------------------------------------------------------------------- */

static void svc__wipe_free(void *p)
{
    if (p) {
        sodium_memzero(p, malloc_usable_size(p));
        free(p);
    }
}

void vault_harden_process(void)
{
    struct al_error e = {0};
    if (al_confine_no_dumps(&e) < 0)
        al_die("vault: %s: refusing to hold secrets in a process that can dump them",
               al_error_str(&e));
    /* jansson holds request bodies (base64 values) and answers: wipe every block it frees.
     * malloc_usable_size works for blocks allocated before this call too. */
    json_set_alloc_funcs(malloc, svc__wipe_free);
    if (sodium_init() < 0)
        al_die("libsodium failed to initialise");
}

/* ---- roles ---------------------------------------------------------------------------------------- */

int vault_roles_set_user(uid_t *uid, bool *set, const char *spec, struct al_error *err)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(spec, &end, 10);
    if (*spec && !*end && !errno && v < (unsigned long)(uid_t)-1) {
        *uid = (uid_t)v;
        *set = true;
        return 0;
    }
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwnam_r(spec, &pw, buf, sizeof buf, &res) != 0 || !res)
        return al_error_set(err, -ENOENT, "no user named '%s' (give a user name or a uid)", spec);
    *uid = res->pw_uid;
    *set = true;
    return 0;
}

int vault_roles_set_group(struct vault_roles *r, const char *spec, struct al_error *err)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(spec, &end, 10);
    if (*spec && !*end && !errno && v < (unsigned long)(gid_t)-1) {
        r->admin_gid = (gid_t)v;
        r->admin_group_set = true;
        return 0;
    }
    struct group gr, *res = NULL;
    char buf[16384];
    if (getgrnam_r(spec, &gr, buf, sizeof buf, &res) != 0 || !res)
        return al_error_set(err, -ENOENT, "no group named '%s' (give a group name or a gid)", spec);
    r->admin_gid = res->gr_gid;
    r->admin_group_set = true;
    return 0;
}

/* Whether uid's user is a member of gid (primary or supplementary, from the user database). */
static bool svc__in_group(uid_t uid, gid_t gid)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) != 0 || !res)
        return false;
    if (res->pw_gid == gid)
        return true;
    gid_t groups[256];
    int n = 256;
    if (getgrouplist(res->pw_name, res->pw_gid, groups, &n) < 0)
        return false;
    for (int i = 0; i < n; i++) {
        if (groups[i] == gid)
            return true;
    }
    return false;
}

int vault_roles_set_egress_exe(struct vault_roles *r, const char *path, struct al_error *err)
{
    char abs[PATH_MAX];
    struct stat st;
    if (!path || !*path)
        return al_error_set(err, -EINVAL, "--egress-exe: give the path of airlock-egress");
    if (!realpath(path, abs))
        return al_error_set(err, -errno, "--egress-exe %s: %s", path, strerror(errno));
    if (stat(abs, &st) != 0 || !S_ISREG(st.st_mode) || access(abs, X_OK) != 0)
        return al_error_set(err, -EINVAL, "--egress-exe %s: not an executable file", abs);
    if (strlen(abs) >= sizeof r->egress_exe)
        return al_error_set(err, -ENAMETOOLONG, "--egress-exe: path too long");
    snprintf(r->egress_exe, sizeof r->egress_exe, "%s", abs);
    r->egress_exe_dev = st.st_dev;
    r->egress_exe_ino = st.st_ino;
    r->egress_exe_set = true;
    return 0;
}

bool vault_roles_exe_ok(const struct vault_roles *r, pid_t pid, char *seen, size_t n)
{
    if (seen && n)
        snprintf(seen, n, "?");
    if (!r->egress_exe_set)
        return true;
    if (pid <= 0)
        return false;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/%d/exe", (int)pid);
    struct stat st;
    if (stat(proc, &st) == 0 && st.st_dev == r->egress_exe_dev && st.st_ino == r->egress_exe_ino)
        return true;
    /* Not the same file: the same path still counts when the binary was replaced (an upgrade
     * while airlock-egress runs); the kernel then says "<path> (deleted)". Any other program,
     * whoever runs it, is not the egress proxy. */
    char link[PATH_MAX + 16];
    ssize_t l = readlink(proc, link, sizeof link - 1);
    if (l <= 0) {
        if (seen && n)
            snprintf(seen, n, "? (%s unreadable: %s%s)", proc, strerror(errno),
                     errno == EACCES || errno == EPERM
                         ? "; with --egress-exe airlock-vault must run as root or with "
                           "CAP_SYS_PTRACE"
                         : "");
        return false;
    }
    link[l] = '\0';
    if (seen && n)
        snprintf(seen, n, "%s", link);
    static const char del[] = " (deleted)";
    size_t dl = sizeof del - 1;
    if ((size_t)l > dl && strcmp(link + l - dl, del) == 0)
        link[l - dl] = '\0';
    return strcmp(link, r->egress_exe) == 0;
}

unsigned vault_roles_of(const struct vault_roles *r, const struct vault_peer *p)
{
    unsigned m = 0;
    if (p->uid == 0 ||
        (r->admin_group_set && (p->gid == r->admin_gid || svc__in_group(p->uid, r->admin_gid))))
        m |= VAULT_ROLE_ADMIN;
    if (r->egress_set && p->uid == r->egress_uid && vault_roles_exe_ok(r, p->pid, NULL, 0))
        m |= VAULT_ROLE_EGRESS;
    if (r->reader_set && p->uid == r->reader_uid)
        m |= VAULT_ROLE_READER;
    return m;
}

static json_t *svc__roles_json(unsigned m)
{
    json_t *a = json_array();
    if (m & VAULT_ROLE_ADMIN)
        json_array_append_new(a, json_string("admin"));
    if (m & VAULT_ROLE_EGRESS)
        json_array_append_new(a, json_string("egress"));
    if (m & VAULT_ROLE_READER)
        json_array_append_new(a, json_string("airlockd"));
    return a;
}

static void svc__actor_lookup(uid_t uid, char *out, size_t n)
{
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res)
        snprintf(out, n, "uid %u (%.32s)", (unsigned)uid, res->pw_name);
    else
        snprintf(out, n, "uid %u", (unsigned)uid);
}

static struct svc__uid *svc__uid(struct vault_service *svc, uid_t uid)
{
    uint64_t now = al_now_ns();
    for (int i = 0; i < SVC__UIDS; i++) {
        struct svc__uid *u = &svc->uids[i];
        if (u->used && u->uid == uid && now < u->expires)
            return u;
    }
    struct svc__uid *u = &svc->uids[svc->next_uid++ % SVC__UIDS];
    for (int i = 0; i < SVC__UIDS; i++) { /* refresh an expired entry in place */
        if (svc->uids[i].used && svc->uids[i].uid == uid)
            u = &svc->uids[i];
    }
    if (!u->used || u->uid != uid) {
        memset(u, 0, sizeof *u);
        u->used = true;
        u->uid = uid;
    }
    u->expires = now + SVC__UID_TTL;
    svc__actor_lookup(uid, u->actor, sizeof u->actor);
    u->in_admin_group = svc->roles.admin_group_set && svc__in_group(uid, svc->roles.admin_gid);
    return u;
}

static unsigned svc__roles(struct vault_service *svc, const struct vault_peer *p)
{
    const struct vault_roles *r = &svc->roles;
    unsigned m = 0;
    if (p->uid == 0 ||
        (r->admin_group_set && (p->gid == r->admin_gid || svc__uid(svc, p->uid)->in_admin_group)))
        m |= VAULT_ROLE_ADMIN;
    if (r->egress_set && p->uid == r->egress_uid && vault_roles_exe_ok(r, p->pid, NULL, 0))
        m |= VAULT_ROLE_EGRESS;
    if (r->reader_set && p->uid == r->reader_uid)
        m |= VAULT_ROLE_READER;
    return m;
}

static void svc__actor(struct vault_service *svc, const struct vault_peer *p, char *out, size_t n)
{
    snprintf(out, n, "%s", svc__uid(svc, p->uid)->actor);
}

/* ---- service ---------------------------------------------------------------------------------------- */

int vault_service_new(const struct vault_service_opts *o, struct vault_service **out)
{
    struct vault_service *svc = calloc(1, sizeof *svc);
    if (!svc)
        return -ENOMEM;
    svc->store = o->store;
    svc->audit = o->audit;
    svc->roles = o->roles;
    svc->max_age_ms = o->cache_max_age_ms ? o->cache_max_age_ms : 60000;
    *out = svc;
    return 0;
}

void vault_service_free(struct vault_service *svc)
{
    free(svc);
}

uint64_t vault_service_generation(const struct vault_service *svc)
{
    return vault_store_catalog(svc->store)->generation;
}

__attribute__((format(printf, 3, 4))) static int svc__error(json_t **out, int status,
                                                            const char *fmt, ...)
{
    char msg[AL_ERROR_MSG_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *out = json_pack("{s:i,s:s}", "code", status, "message", msg);
    return status;
}

/* What an access-log record says of an operation: who asked (p, with the roles they hold)
 * for what (op on secret, version, secret_id; on_behalf: the egress proxy's context of a
 * fetch, borrowed). Unset fields are left out of the record. */
struct svc__rec {
    const char *op;
    const struct vault_peer *p;
    unsigned roles;
    const char *secret;
    uint32_t version;
    const char *secret_id;
    json_t *on_behalf;
};

/* Appends one access-log record: rec and how the operation ended (result, status, reason).
 * Returns the append's result. */
static int svc__audit(struct vault_service *svc, const struct svc__rec *rec, const char *result,
                      int status, const char *reason)
{
    assert(rec->op && rec->p && result);
    const struct vault_peer *p = rec->p;
    char actor[64];
    svc__actor(svc, p, actor, sizeof actor);
    json_t *r =
        json_pack("{s:s,s:s,s:i,s:{s:I,s:I,s:I,s:s},s:o}", "op", rec->op, "result", result,
                  "status", status, "peer", "uid", (json_int_t)p->uid, "gid", (json_int_t)p->gid,
                  "pid", (json_int_t)p->pid, "who", actor, "roles", svc__roles_json(rec->roles));
    if (!r)
        return -ENOMEM;
    if (rec->secret)
        json_object_set_new(r, "secret", json_string(rec->secret));
    if (rec->version)
        json_object_set_new(r, "version", json_integer(rec->version));
    if (rec->secret_id && *rec->secret_id)
        json_object_set_new(r, "secret_id", json_string(rec->secret_id));
    if (rec->on_behalf)
        json_object_set(r, "on_behalf", rec->on_behalf);
    if (reason && *reason)
        json_object_set_new(r, "reason", json_string(reason));
    json_object_set_new(r, "generation", json_integer((json_int_t)vault_service_generation(svc)));
    int rc = svc->audit ? al_auditlog_append(svc->audit, r, NULL) : 0;
    json_decref(r);
    if (rc)
        al_error("vault: cannot write the access log (%s): %s refused", strerror(-rc), rec->op);
    return rc;
}

/* The checks every operation starts with: sets rec->roles (from rec->p) and, when they are
 * not enough or the vault cannot answer, logs rec. Returns 0 to go on, else the status (and
 * *out). */
static int svc__begin(struct vault_service *svc, struct svc__rec *rec, unsigned need, json_t **out)
{
    const char *op = rec->op;
    const struct vault_peer *p = rec->p;
    rec->roles = svc__roles(svc, p);
    int arc = svc->audit ? al_auditlog_status(svc->audit) : 0;
    if (arc)
        return svc__error(out, 503,
                          "the vault's access log cannot be written (%s): every access is "
                          "refused until it can (check the disk under %s/" VAULT_AUDIT_DIR ")",
                          strerror(-arc), vault_store_dir(svc->store));
    if (!(rec->roles & need)) {
        char actor[64];
        svc__actor(svc, p, actor, sizeof actor);
        const char *who = need == VAULT_ROLE_ADMIN ? "administrators (root or the admin group)"
                          : need == (VAULT_ROLE_ADMIN | VAULT_ROLE_READER)
                              ? "administrators and airlockd"
                              : "the egress proxy, airlockd and administrators";
        /* Refusals are logged, but one uid cannot flood the log (and fill the disk, which
         * would close the vault for everyone): beyond SVC__DENY_LOG_PER_S a second they are
         * counted, and the count goes into the next logged refusal. */
        struct svc__uid *u = svc__uid(svc, p->uid);
        uint64_t now = al_now_ns();
        if (now - u->deny_window >= 1000000000ull) {
            u->deny_window = now;
            u->deny_count = 0;
        }
        if (++u->deny_count <= SVC__DENY_LOG_PER_S) {
            char reason[1024], seen[256];
            int n;
            if ((need & VAULT_ROLE_EGRESS) && svc->roles.egress_set &&
                p->uid == svc->roles.egress_uid &&
                !vault_roles_exe_ok(&svc->roles, p->pid, seen, sizeof seen))
                n = snprintf(reason, sizeof reason,
                             "%s has the egress proxy's uid, but pid %d runs %s, not the "
                             "configured airlock-egress (%s): only that program may %s",
                             actor, (int)p->pid, seen, svc->roles.egress_exe, op);
            else
                n = snprintf(reason, sizeof reason, "%s is not allowed to %s", actor, op);
            if (u->deny_suppressed && n > 0 && (size_t)n < sizeof reason)
                snprintf(reason + n, sizeof reason - (size_t)n,
                         " (and %llu earlier refusals of this uid were not logged one by one)",
                         (unsigned long long)u->deny_suppressed);
            if (svc__audit(svc, rec, "denied", 403, reason))
                return svc__error(out, 503, "the vault's access log cannot be written");
            u->deny_suppressed = 0;
            al_warn("vault: refused %s: %s (pid %d)", op, reason, (int)p->pid);
        } else {
            u->deny_suppressed++;
        }
        if (need == VAULT_ROLE_EGRESS)
            return svc__error(out, 403,
                              "%s may not read secret values: only the egress proxy can, for "
                              "injection (the vault is write-only for everyone else)",
                              actor);
        return svc__error(out, 403, "%s may not %s: only %s may (see docs/vault.md)", actor, op,
                          who);
    }
    struct al_error e = {0};
    if (vault_store_refresh(svc->store, NULL, &e) != 0) {
        al_error("vault: %s", al_error_str(&e));
        svc__audit(svc, rec, "error", 503, al_error_str(&e));
        return svc__error(out, 503, "%s", al_error_str(&e));
    }
    return 0;
}

/* The access log's result for a failed change's status. */
static const char *svc__result_of(int status)
{
    return status == 404 ? "not_found" : status < 500 ? "invalid" : "error";
}

static int svc__status_of(int rc)
{
    switch (rc) {
    case -EINVAL:
    case -E2BIG:
        return 400;
    case -ENOENT:
        return 404;
    case -EEXIST:
        return 409;
    case -ENOSPC:
        return 507;
    default:
        return 500;
    }
}

int vault_service_whoami(struct vault_service *svc, const struct vault_peer *p, json_t **out)
{
    unsigned roles = svc__roles(svc, p);
    char actor[64];
    svc__actor(svc, p, actor, sizeof actor);
    if (!roles)
        svc__audit(svc, &(struct svc__rec){.op = "whoami", .p = p}, "no_role", 200, NULL);
    *out = json_pack("{s:I,s:I,s:s,s:o,s:I}", "uid", (json_int_t)p->uid, "gid", (json_int_t)p->gid,
                     "who", actor, "roles", svc__roles_json(roles), "generation",
                     (json_int_t)vault_service_generation(svc));
    return 200;
}

int vault_service_list(struct vault_service *svc, const struct vault_peer *p, json_t **out)
{
    struct svc__rec rec = {.op = "list", .p = p};
    int st = svc__begin(svc, &rec, VAULT_ROLE_ADMIN | VAULT_ROLE_READER, out);
    if (st)
        return st;
    const struct vault_catalog *c = vault_store_catalog(svc->store);
    json_t *arr = json_array();
    for (size_t i = 0; i < c->n; i++)
        json_array_append_new(arr, vault_secret_json(&c->secrets[i], false));
    if (svc__audit(svc, &rec, "ok", 200, NULL)) {
        json_decref(arr);
        return svc__error(out, 503, "the vault's access log cannot be written");
    }
    *out = json_pack("{s:o,s:I}", "secrets", arr, "generation", (json_int_t)c->generation);
    return 200;
}

static const char *svc__loggable_name(const char *name)
{
    return name && vault_name_check(name, NULL) == 0 ? name : "(invalid name)";
}

int vault_service_show(struct vault_service *svc, const struct vault_peer *p, const char *name,
                       bool history, json_t **out)
{
    struct svc__rec rec = {
        .op = history ? "history" : "show", .p = p, .secret = svc__loggable_name(name)};
    int st = svc__begin(svc, &rec, VAULT_ROLE_ADMIN | VAULT_ROLE_READER, out);
    if (st)
        return st;
    struct al_error e = {0};
    if (vault_name_check(name, &e)) {
        svc__audit(svc, &rec, "invalid", 400, al_error_str(&e));
        return svc__error(out, 400, "%s", al_error_str(&e));
    }
    const struct vault_secret *s = vault_catalog_find(vault_store_catalog(svc->store), name);
    if (!s) {
        svc__audit(svc, &rec, "not_found", 404, NULL);
        return svc__error(out, 404, "no secret named \"%s\" (see `airlock vault ls`)", name);
    }
    rec.version = s->current;
    if (svc__audit(svc, &rec, "ok", 200, NULL))
        return svc__error(out, 503, "the vault's access log cannot be written");
    *out = vault_secret_json(s, history);
    return 200;
}

static int svc__put(struct vault_service *svc, const struct vault_peer *p,
                    const struct vault_put *put, bool create, json_t **out)
{
    struct svc__rec rec = {
        .op = create ? "create" : "rotate", .p = p, .secret = svc__loggable_name(put->name)};
    int st = svc__begin(svc, &rec, VAULT_ROLE_ADMIN, out);
    if (st)
        return st;
    if (put->invalid) {
        svc__audit(svc, &rec, "invalid", 400, put->invalid);
        return svc__error(out, 400, "%s", put->invalid);
    }
    char actor[64];
    svc__actor(svc, p, actor, sizeof actor);
    struct al_error e = {0};
    uint32_t version = 0;
    int rc = create ? vault_store_create(svc->store, put, actor, &version, &e)
                    : vault_store_rotate(svc->store, put, actor, &version, &e);
    if (rc) {
        int status = svc__status_of(rc);
        svc__audit(svc, &rec, svc__result_of(status), status, al_error_str(&e));
        return svc__error(out, status, "%s", al_error_str(&e));
    }
    const struct vault_secret *s = vault_catalog_find(vault_store_catalog(svc->store), put->name);
    rec.version = version;
    rec.secret_id = s && s->n_versions ? s->versions[0].secret_id : NULL;
    if (svc__audit(svc, &rec, "ok", create ? 201 : 200, NULL) == 0 && svc->audit)
        al_auditlog_sync(svc->audit, 2000); /* changes are rare: make their record durable */
    *out = s ? vault_secret_json(s, false) : json_object();
    return create ? 201 : 200;
}

int vault_service_create(struct vault_service *svc, const struct vault_peer *p,
                         const struct vault_put *put, json_t **out)
{
    return svc__put(svc, p, put, true, out);
}

int vault_service_rotate(struct vault_service *svc, const struct vault_peer *p,
                         const struct vault_put *put, json_t **out)
{
    return svc__put(svc, p, put, false, out);
}

int vault_service_delete(struct vault_service *svc, const struct vault_peer *p, const char *name,
                         json_t **out)
{
    struct svc__rec rec = {.op = "delete", .p = p, .secret = svc__loggable_name(name)};
    int st = svc__begin(svc, &rec, VAULT_ROLE_ADMIN, out);
    if (st)
        return st;
    char actor[64];
    svc__actor(svc, p, actor, sizeof actor);
    struct al_error e = {0};
    const struct vault_secret *s = vault_catalog_find(vault_store_catalog(svc->store), name);
    uint32_t version = s ? s->current : 0;
    int rc = vault_store_delete(svc->store, name, actor, &e);
    if (rc) {
        int status = svc__status_of(rc);
        svc__audit(svc, &rec, svc__result_of(status), status, al_error_str(&e));
        return svc__error(out, status, "%s", al_error_str(&e));
    }
    rec.version = version;
    if (svc__audit(svc, &rec, "ok", 200, NULL) == 0 && svc->audit)
        al_auditlog_sync(svc->audit, 2000);
    *out = json_pack("{s:s,s:b,s:I}", "name", name, "deleted", 1, "generation",
                     (json_int_t)vault_service_generation(svc));
    return 200;
}

int vault_service_changes(struct vault_service *svc, const struct vault_peer *p, uint64_t since,
                          json_t **out)
{
    struct svc__rec rec = {.op = "changes", .p = p};
    int st = svc__begin(svc, &rec, VAULT_ROLE_EGRESS | VAULT_ROLE_ADMIN | VAULT_ROLE_READER, out);
    if (st)
        return st;
    const struct vault_catalog *c = vault_store_catalog(svc->store);
    bool full = since > c->generation || since < c->tomb_horizon;
    json_t *names = json_array();
    if (!full) {
        for (size_t i = 0; i < c->n; i++) {
            if (c->secrets[i].generation > since)
                json_array_append_new(names, json_string(c->secrets[i].name));
        }
        for (size_t i = 0; i < c->n_tombs; i++) {
            if (c->tombs[i].generation > since && !vault_catalog_find(c, c->tombs[i].name))
                json_array_append_new(names, json_string(c->tombs[i].name));
        }
    }
    *out = json_pack("{s:I,s:I,s:b,s:o}", "since", (json_int_t)since, "generation",
                     (json_int_t)c->generation, "full", full, "changed", names);
    return 200;
}

/* Caller-supplied context for the log: bounded, printable. */
static bool svc__field_ok(const char *s, size_t max)
{
    if (!s || !*s || strlen(s) > max)
        return false;
    for (const char *c = s; *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            return false;
    }
    return true;
}

int vault_service_fetch(struct vault_service *svc, const struct vault_peer *p,
                        const struct vault_fetch_req *rq, struct vault_fetched *f, json_t **out)
{
    memset(f, 0, sizeof *f);
    struct svc__rec rec = {.op = "fetch", .p = p, .secret = svc__loggable_name(rq->name)};
    int st = svc__begin(svc, &rec, VAULT_ROLE_EGRESS, out);
    if (st)
        return st;
    struct al_error e = {0};
    const char *bad = rq->invalid;
    if (bad)
        ;
    else if (vault_name_check(rq->name, &e))
        bad = al_error_str(&e);
    else if (!svc__field_ok(rq->sandbox, 128))
        bad = "\"sandbox\" (on whose behalf) is required: printable, at most 128 bytes";
    else if (!svc__field_ok(rq->rule, 256))
        bad = "\"rule\" (the policy rule asking) is required: printable, at most 256 bytes";
    else if (!svc__field_ok(rq->host, VAULT_HOST_MAX + 1))
        bad = "\"host\" (where the value will be sent) is required";
    else if (rq->request_id && !svc__field_ok(rq->request_id, 128))
        bad = "\"request_id\" must be printable, at most 128 bytes";
    if (bad) {
        svc__audit(svc, &rec, "invalid", 400, bad);
        return svc__error(out, 400, "%s", bad);
    }
    /* From here on the record says on whose behalf the value was asked for. */
    al_autojson json_t *ob =
        json_pack("{s:s,s:s,s:s}", "sandbox", rq->sandbox, "rule", rq->rule, "host", rq->host);
    if (ob && rq->request_id)
        json_object_set_new(ob, "request_id", json_string(rq->request_id));
    rec.on_behalf = ob;
    const struct vault_secret *s = vault_catalog_find(vault_store_catalog(svc->store), rq->name);
    if (!s) {
        svc__audit(svc, &rec, "not_found", 404, NULL);
        return svc__error(out, 404, "no secret named \"%s\"", rq->name);
    }
    /* Secrets under sandboxes/<id>/ (the values of a sandbox's API-given header transforms,
     * written by airlockd) are released only on behalf of that sandbox. */
    if (strncmp(rq->name, VAULT_SANDBOX_PREFIX, strlen(VAULT_SANDBOX_PREFIX)) == 0) {
        const char *id = rq->name + strlen(VAULT_SANDBOX_PREFIX);
        size_t il = strcspn(id, "/");
        if (strlen(rq->sandbox) != il || memcmp(id, rq->sandbox, il) != 0) {
            char reason[200];
            snprintf(reason, sizeof reason, "secret belongs to sandbox %.*s, not to %s",
                     (int)(il > 64 ? 64 : il), id, rq->sandbox);
            svc__audit(svc, &rec, "denied", 403, reason);
            al_warn("vault: refused %s for sandbox %s (%s)", rq->name, rq->sandbox, reason);
            return svc__error(out, 403, "secret \"%s\" is scoped to another sandbox", rq->name);
        }
    }
    if (s->n_hosts && !vault_host_allowed((const char *const *)s->hosts, s->n_hosts, rq->host)) {
        char reason[160];
        snprintf(reason, sizeof reason, "secret is bound to %zu host(s) and \"%s\" is not one",
                 s->n_hosts, rq->host);
        svc__audit(svc, &rec, "denied", 403, reason);
        al_warn("vault: refused %s toward %s (not a bound host; sandbox %s, rule %s)", rq->name,
                rq->host, rq->sandbox, rq->rule);
        return svc__error(out, 403,
                          "secret \"%s\" is bound to other hosts: refusing to release it for "
                          "\"%s\" (see `airlock vault show %s`)",
                          rq->name, rq->host, rq->name);
    }
    int rc = vault_store_value(svc->store, s, rq->version, &f->value, &e);
    if (rc) {
        int status = rc == -ENOENT ? 404 : 500;
        rec.version = rq->version;
        svc__audit(svc, &rec, status == 404 ? "not_found" : "error", status, al_error_str(&e));
        if (status == 500)
            al_error("vault: %s", al_error_str(&e));
        return svc__error(out, status, "%s", al_error_str(&e));
    }
    const struct vault_version *v = NULL;
    for (size_t i = 0; i < s->n_versions && !v; i++) {
        if (rq->version == 0 || s->versions[i].version == rq->version)
            v = &s->versions[i];
    }
    /* The record is appended before the value leaves: no unaudited read. */
    rec.version = v->version;
    rec.secret_id = v->secret_id;
    if (svc__audit(svc, &rec, "ok", 200, NULL)) {
        vault_value_free(&f->value);
        return svc__error(out, 503, "the vault's access log cannot be written");
    }
    f->version = v->version;
    f->generation = vault_service_generation(svc);
    f->max_age_ms = svc->max_age_ms;
    snprintf(f->secret_id, sizeof f->secret_id, "%s", v->secret_id);
    json_t *hosts = json_array();
    for (size_t i = 0; i < s->n_hosts; i++)
        json_array_append_new(hosts, json_string(s->hosts[i]));
    *out = json_pack("{s:s,s:i,s:I,s:s,s:i,s:o}", "name", s->name, "version", (int)v->version,
                     "generation", (json_int_t)f->generation, "secret_id", v->secret_id,
                     "max_age_ms", (int)f->max_age_ms, "bound_hosts", hosts);
    return 200;
}

int vault_put_from_json(const json_t *body, const char *name, struct vault_put *put,
                        struct vault_value *value, const char ***hosts, struct al_error *err)
{
    static const char *const keys[] = {"value_b64",   "description", "metadata",
                                       "bound_hosts", "keep",        NULL};
    memset(put, 0, sizeof *put);
    value->data = NULL;
    value->len = value->cap = 0;
    *hosts = NULL;
    if (!json_is_object(body))
        return al_error_set(err, -EINVAL, "the request body must be a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        bool ok = false;
        for (const char *const *a = keys; *a && !ok; a++)
            ok = strcmp(*a, k) == 0;
        if (!ok)
            return al_error_set(err, -EINVAL,
                                "unknown field \"%.64s\" (allowed: value_b64, description, "
                                "metadata, bound_hosts, keep)",
                                k);
    }
    json_t *b64 = json_object_get(body, "value_b64");
    if (!json_is_string(b64))
        return al_error_set(err, -EINVAL, "\"value_b64\" (the value, base64) is required");
    size_t bl = json_string_length(b64);
    if (bl > 4 * ((VAULT_VALUE_MAX + 2) / 3) + 4)
        return al_error_set(err, -E2BIG, "the value is too large (at most %d bytes)",
                            VAULT_VALUE_MAX);
    if (vault_value_alloc(value, bl ? bl : 1))
        return al_error_set(err, -ENOMEM, "out of memory");
    size_t vl = 0;
    if (sodium_base642bin(value->data, value->len, json_string_value(b64), bl, NULL, &vl, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0) {
        vault_value_free(value);
        return al_error_set(err, -EINVAL, "\"value_b64\" is not valid base64");
    }
    value->len = vl;
    json_t *d = json_object_get(body, "description");
    if (d && !json_is_string(d)) {
        vault_value_free(value);
        return al_error_set(err, -EINVAL, "\"description\" must be a string");
    }
    json_t *h = json_object_get(body, "bound_hosts");
    if (h && (!json_is_array(h) || json_array_size(h) > VAULT_HOSTS_MAX)) {
        vault_value_free(value);
        return al_error_set(err, -EINVAL, "\"bound_hosts\" must be an array of at most %d names",
                            VAULT_HOSTS_MAX);
    }
    json_t *meta = json_object_get(body, "metadata");
    if (meta && vault_metadata_check(meta, err)) {
        vault_value_free(value);
        return -EINVAL;
    }
    put->metadata = meta;
    json_t *kp = json_object_get(body, "keep");
    if (kp && (!json_is_integer(kp) || json_integer_value(kp) < 1 ||
               json_integer_value(kp) > VAULT_KEEP_MAX)) {
        vault_value_free(value);
        return al_error_set(err, -EINVAL, "\"keep\" must be an integer 1..%d", VAULT_KEEP_MAX);
    }
    if (h) {
        *hosts = calloc(json_array_size(h) + 1, sizeof **hosts);
        if (!*hosts) {
            vault_value_free(value);
            return al_error_set(err, -ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < json_array_size(h); i++) {
            if (!json_is_string(json_array_get(h, i))) {
                free(*hosts);
                *hosts = NULL;
                vault_value_free(value);
                return al_error_set(err, -EINVAL, "\"bound_hosts\" must contain strings");
            }
            (*hosts)[i] = json_string_value(json_array_get(h, i));
        }
        put->hosts = *hosts;
        put->n_hosts = json_array_size(h);
        put->set_hosts = true;
    }
    put->name = name;
    put->value = value;
    put->description = d ? json_string_value(d) : NULL;
    put->keep = kp ? (uint32_t)json_integer_value(kp) : 0;
    return 0;
}
