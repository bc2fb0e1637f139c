/* controlplane/record: see record.h. */
#include "record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "common/util.h"

static const char *const record__states[] = {"creating", "running", "paused", "stopping"};

const char *cp_sb_state_name(enum cp_sb_state s)
{
    return (unsigned)s < sizeof record__states / sizeof *record__states ? record__states[s]
                                                                        : "unknown";
}

int cp_sb_state_parse(const char *s, enum cp_sb_state *out)
{
    for (unsigned i = 0; i < sizeof record__states / sizeof *record__states; i++) {
        if (strcmp(s, record__states[i]) == 0) {
            *out = (enum cp_sb_state)i;
            return 0;
        }
    }
    return -EINVAL;
}

void cp_sb_record_init(struct cp_sb_record *r)
{
    memset(r, 0, sizeof *r);
    r->allow_internet = -1;
    r->metadata = json_object();
}

void cp_sb_record_free(struct cp_sb_record *r)
{
    json_decref(r->metadata);
    json_decref(r->network);
    json_decref(r->intercept);
    json_decref(r->volumes);
    r->metadata = r->network = r->intercept = r->volumes = NULL;
}

void cp_sb_record_copy(struct cp_sb_record *dst, const struct cp_sb_record *src)
{
    *dst = *src;
    dst->metadata = src->metadata ? json_deep_copy(src->metadata) : json_object();
    dst->network = src->network ? json_deep_copy(src->network) : NULL;
    dst->intercept = src->intercept ? json_deep_copy(src->intercept) : NULL;
    dst->volumes = src->volumes ? json_deep_copy(src->volumes) : NULL;
}

json_t *cp_sb_record_doc(const struct cp_sb_record *r)
{
    json_t *d = json_object();
    json_object_set_new(d, "template_id", json_string(r->template_id));
    if (r->template_build[0])
        json_object_set_new(d, "template_build", json_string(r->template_build));
    if (r->snapshot_id[0])
        json_object_set_new(d, "snapshot_id", json_string(r->snapshot_id));
    json_object_set_new(d, "backend", json_string(r->backend));
    json_object_set_new(d, "key_id", json_string(r->key_id));
    json_object_set_new(d, "token", json_string(r->token));
    json_object_set_new(d, "created_ns", json_integer((json_int_t)r->created_ns));
    json_object_set_new(d, "started_ns", json_integer((json_int_t)r->started_ns));
    json_object_set_new(d, "end_ns", json_integer((json_int_t)r->end_ns));
    json_object_set_new(d, "on_timeout", json_string(r->on_timeout_pause ? "pause" : "kill"));
    json_object_set_new(d, "auto_resume", json_boolean(r->auto_resume));
    if (r->auto_pause_fs)
        json_object_set_new(d, "auto_pause_memory", json_false());
    if (r->paused_fs)
        json_object_set_new(d, "paused_fs", json_true());
    if (r->allow_internet >= 0)
        json_object_set_new(d, "allow_internet", json_boolean(r->allow_internet));
    json_object_set_new(d, "cpu_count", json_integer(r->cpu_count));
    json_object_set_new(d, "memory_mb", json_integer(r->memory_mb));
    json_object_set_new(d, "disk_mb", json_integer(r->disk_mb));
    json_object_set(d, "metadata", r->metadata ? r->metadata : json_object());
    if (r->network)
        json_object_set(d, "network", r->network);
    if (r->volumes)
        json_object_set(d, "volumes", r->volumes);
    json_object_set_new(d, "net_generation", json_integer((json_int_t)r->net_generation));
    json_object_set_new(d, "policy_name", json_string(r->policy_name));
    json_object_set_new(d, "policy_hash", json_string(r->policy_hash));
    json_object_set_new(d, "pid", json_integer(r->pid));
    json_object_set_new(d, "pid_start", json_integer((json_int_t)r->pid_start));
    json_object_set_new(d, "addr", json_string(r->addr));
    if (r->intercept)
        json_object_set(d, "intercept", r->intercept);
    return d;
}

static int record__str(const json_t *d, const char *key, char *out, size_t len,
                       struct al_error *err)
{
    const char *s = "";
    int rc = al_json_get_str(d, key, false, &s, "stored sandbox", err);
    if (rc)
        return rc;
    if (strlen(s) >= len)
        return al_error_set(err, -EINVAL, "stored sandbox: \"%s\" is too long", key);
    snprintf(out, len, "%s", s);
    return 0;
}

static int record__u64(const json_t *d, const char *key, uint64_t *out, struct al_error *err)
{
    int64_t v = 0;
    int rc = al_json_get_int(d, key, false, 0, INT64_MAX, &v, "stored sandbox", err);
    if (rc)
        return rc;
    *out = (uint64_t)v;
    return 0;
}

int cp_sb_record_from_doc(struct cp_sb_record *r, const json_t *d, struct al_error *err)
{
    int rc;
    int64_t v;
    const char *ot = "kill";
    bool b = false;
    json_t *o = NULL;
    if ((rc = record__str(d, "template_id", r->template_id, sizeof r->template_id, err)) ||
        (rc = record__str(d, "template_build", r->template_build, sizeof r->template_build, err)) ||
        (rc = record__str(d, "snapshot_id", r->snapshot_id, sizeof r->snapshot_id, err)) ||
        (rc = record__str(d, "backend", r->backend, sizeof r->backend, err)) ||
        (rc = record__str(d, "key_id", r->key_id, sizeof r->key_id, err)) ||
        (rc = record__str(d, "token", r->token, sizeof r->token, err)) ||
        (rc = record__str(d, "policy_name", r->policy_name, sizeof r->policy_name, err)) ||
        (rc = record__str(d, "policy_hash", r->policy_hash, sizeof r->policy_hash, err)) ||
        (rc = record__str(d, "addr", r->addr, sizeof r->addr, err)) ||
        (rc = record__u64(d, "created_ns", &r->created_ns, err)) ||
        (rc = record__u64(d, "started_ns", &r->started_ns, err)) ||
        (rc = record__u64(d, "end_ns", &r->end_ns, err)) ||
        (rc = record__u64(d, "pid_start", &r->pid_start, err)) ||
        (rc = record__u64(d, "net_generation", &r->net_generation, err)))
        return rc;
    if ((rc = al_json_get_str(d, "on_timeout", false, &ot, "stored sandbox", err)))
        return rc;
    r->on_timeout_pause = strcmp(ot, "pause") == 0;
    if ((rc = al_json_get_bool(d, "auto_resume", false, &b, "stored sandbox", err)))
        return rc;
    r->auto_resume = b;
    b = true;
    if ((rc = al_json_get_bool(d, "auto_pause_memory", false, &b, "stored sandbox", err)))
        return rc;
    r->auto_pause_fs = !b;
    b = false;
    if ((rc = al_json_get_bool(d, "paused_fs", false, &b, "stored sandbox", err)))
        return rc;
    r->paused_fs = b;
    if (json_object_get(d, "allow_internet")) {
        if ((rc = al_json_get_bool(d, "allow_internet", true, &b, "stored sandbox", err)))
            return rc;
        r->allow_internet = b;
    } else {
        r->allow_internet = -1;
    }
    if ((rc = al_json_get_int(d, "cpu_count", false, 0, 1024, &v, "stored sandbox", err)))
        return rc;
    r->cpu_count = (int)v;
    v = 0;
    if ((rc = al_json_get_int(d, "memory_mb", false, 0, 1 << 24, &v, "stored sandbox", err)))
        return rc;
    r->memory_mb = (int)v;
    v = 0;
    if ((rc = al_json_get_int(d, "disk_mb", false, 0, 1 << 24, &v, "stored sandbox", err)))
        return rc;
    r->disk_mb = (int)v;
    v = 0;
    if ((rc = al_json_get_int(d, "pid", false, 0, INT32_MAX, &v, "stored sandbox", err)))
        return rc;
    r->pid = (pid_t)v;
    if ((rc = al_json_get_obj(d, "metadata", false, &o, "stored sandbox", err)))
        return rc;
    json_decref(r->metadata);
    r->metadata = o ? json_deep_copy(o) : json_object();
    o = NULL;
    if ((rc = al_json_get_obj(d, "network", false, &o, "stored sandbox", err)))
        return rc;
    json_decref(r->network);
    r->network = o ? json_deep_copy(o) : NULL;
    o = NULL;
    if ((rc = al_json_get_obj(d, "intercept", false, &o, "stored sandbox", err)))
        return rc;
    json_decref(r->intercept);
    r->intercept = o ? json_deep_copy(o) : NULL;
    json_t *a = NULL;
    if ((rc = al_json_get_arr(d, "volumes", false, &a, "stored sandbox", err)))
        return rc;
    json_decref(r->volumes);
    r->volumes = a ? json_deep_copy(a) : NULL;
    return 0;
}

static bool record__policy_name_ok(const char *s, size_t n)
{
    if (n == 0 || n >= CP_POLICY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return s[0] != '.';
}

const char *cp_role_name(unsigned role)
{
    switch (role) {
    case CP_ROLE_ADMIN:
        return "admin";
    case CP_ROLE_OPERATOR:
        return "operator";
    case CP_ROLE_AUDITOR:
        return "auditor";
    default:
        return "none";
    }
}

unsigned cp_role_parse(const char *s, struct al_error *err)
{
    static const unsigned roles[] = {CP_ROLE_ADMIN, CP_ROLE_OPERATOR, CP_ROLE_AUDITOR};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (s && strcmp(s, cp_role_name(roles[i])) == 0)
            return roles[i];
    al_error_set(err, -EINVAL, "\"%.32s\" is not a role: admin, operator or auditor", s ? s : "");
    return 0;
}

int cp_apikey_make(struct cp_apikey *k, char key[CP_APIKEY_LEN + 1], const char *name,
                   const char *role, const char *policies, struct al_error *err)
{
    memset(k, 0, sizeof *k);
    key[0] = '\0';
    if (!(k->role = cp_role_parse(role ? role : "admin", err)))
        return -EINVAL;
    if (!policies)
        policies = "*";
    if (strlen(policies) >= sizeof k->policies)
        return al_error_set(err, -EINVAL, "the list of policies is longer than %zu bytes",
                            sizeof k->policies - 1);
    int rc = cp_apikey_policies_check(policies, err);
    if (rc)
        return rc;
    if (name && (strlen(name) == 0 || strlen(name) >= sizeof k->name))
        return al_error_set(err, -EINVAL, "the name must have 1..%zu bytes", sizeof k->name - 1);
    cp_keyid_new(k->id);
    snprintf(k->name, sizeof k->name, "%s", name ? name : k->id);
    snprintf(k->policies, sizeof k->policies, "%s", policies);
    k->created_ns = al_wall_ns();
    cp_apikey_new(key);
    cp_digest(key, strlen(key), k->digest);
    return 0;
}

bool cp_apikey_allows_policy(const char *policies, const char *policy)
{
    if (strcmp(policies, "*") == 0)
        return true;
    size_t pl = strlen(policy);
    const char *p = policies;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == pl && memcmp(p, policy, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

int cp_apikey_policies_check(const char *policies, struct al_error *err)
{
    if (strcmp(policies, "*") == 0)
        return 0;
    if (!*policies)
        return al_error_set(err, -EINVAL,
                            "the list of policies is empty: give \"*\" (any policy) "
                            "or policy names separated by commas");
    const char *p = policies;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (!record__policy_name_ok(p, n))
            return al_error_set(err, -EINVAL,
                                "\"%.*s\" is not a policy name (letters, digits, "
                                "'.', '_' and '-'; names separated by commas, no spaces)",
                                (int)n, p);
        if (!e)
            return 0;
        p = e + 1;
    }
}

uint64_t cp_proc_start_time(pid_t pid)
{
    if (pid <= 0)
        return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name (field 2) may contain spaces and parentheses: start after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++;
    /* Fields 3.. follow; the start time is field 22, i.e. the 20th after the ')'. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return 0;
    }
    return strtoull(p + 1, NULL, 10);
}
