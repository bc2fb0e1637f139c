/* controlplane/builds: see builds.h. */
#include "builds.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sodium.h>
#include <unistd.h>

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "buildsb.h"
#include "buildstream.h"
#include "cp.h"
#include "policysel.h"
#include "snapshots.h"
#include "sse.h"
#include "store.h"
#include "sweep.h"
#include "templates.h"
#include "controlplane/templates/apply.h"
#include "controlplane/templates/cachegc.h"
#include "controlplane/templates/copy.h"
#include "controlplane/templates/layerdiff.h"
#include "controlplane/templates/oci.h"
#include "controlplane/templates/unpack.h"

#define BUILDS_MAX_STEPS 256
#define BUILDS_MAX_ARG   (64u << 10) /* one argument of a step (a RUN's script) */
#define BUILDS_MAX_CMD   (16u << 10) /* startCmd, readyCmd */
#define BUILDS_LOG_LIMIT 100         /* entries per status answer unless ?limit= */
#define BUILDS_LOG_MAX   1000

static const char *const builds__levels[] = {"debug", "info", "warn", "error"};

static json_t *builds__time(uint64_t ns)
{
    char buf[40];
    al_time_rfc3339(buf, sizeof buf, ns);
    return json_string(buf);
}

/* Optional fields sent as null are absent (the SDKs send either). */
static void builds__drop_nulls(json_t *o)
{
    const char *k;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(o, tmp, k, v)
    {
        if (json_is_null(v))
            json_object_del(o, k);
    }
}

static bool builds__is_default(const struct cp *cp, const char *id)
{
    for (size_t i = 0; i < cp->cfg.default_templates.n; i++)
        if (strcmp(cp->cfg.default_templates.v[i], id) == 0)
            return true;
    return false;
}

static void builds__log(struct cp *cp, const char *build_id, int level, const char *step,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Appends one entry to a build's log (a failure to record is logged, never fatal). */
static void builds__log(struct cp *cp, const char *build_id, int level, const char *step,
                        const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct al_error err = {0};
    struct cp_store_build_log_entry e = {
        .time_ns = al_wall_ns(), .level = level, .step = step, .message = msg};
    if (cp_store_build_log_add(cp->store, build_id, &e, &err))
        al_warn("build %s: cannot record a log entry: %s", build_id, al_error_str(&err));
}

/* Appends the tags of given (a JSON array of tag strings, or NULL) to out, once each. */
static int builds__tags_add(json_t *out, const json_t *given, const char *what,
                            struct al_error *err)
{
    if (!given)
        return 0;
    if (!json_is_array(given) || json_array_size(given) > 64)
        return al_error_set(err, -EINVAL, "%s: \"tags\" must be an array of at most 64 tags", what);
    size_t i, k;
    json_t *t, *u;
    json_array_foreach(given, i, t)
    {
        const char *v = json_string_value(t);
        if (!v || strlen(v) != json_string_length(t) || !cp_template_tag_valid(v))
            return al_error_set(err, -EINVAL,
                                "%s: tag \"%.64s\" is not a tag (1..64 of A-Z, a-z, 0-9, '.', "
                                "'_', '-', starting with a letter or digit)",
                                what, v ? v : "(not a string)");
        bool dup = false;
        json_array_foreach(out, k, u) dup |= strcmp(json_string_value(u), v) == 0;
        if (!dup)
            json_array_append_new(out, json_string(v));
    }
    return 0;
}

/* ---- POST /v3/templates ------------------------------------------------------------------ */

void cp_builds_request(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       json_t *body)
{
    static const char *const known[] = {"name",     "alias",         "tags",   "cpuCount",
                                        "memoryMB", "minFreeDiskMb", "teamID", NULL};
    struct al_error err = {0};
    builds__drop_nulls(body);
    if (al_json_check_keys(body, known, "template build request", &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    if (json_object_get(body, "teamID")) {
        cp_rest_error(req, 400, "teamID: airlock has no teams; leave it out");
        return;
    }
    const char *name = NULL, *alias = NULL;
    if (al_json_get_str(body, "name", false, &name, "template build request", &err) ||
        al_json_get_str(body, "alias", false, &alias, "template build request", &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    if (!name || !name[0])
        name = alias;
    if (!name || !name[0]) {
        cp_rest_error(req, 400,
                      "template build request: \"name\" (the template's name) is "
                      "required");
        return;
    }
    /* The build's tags: NAME:TAG's and those of "tags"; without any, the default tag (what
     * NAME alone names), as E2B's. */
    char id[72], tag[72];
    if (cp_template_ref_split(name, id, sizeof id, tag, sizeof tag)) {
        cp_rest_error(req, 400,
                      "\"%.64s\" is not a template name (1..64 of a-z, 0-9, '.', '_', '-', "
                      "starting with a letter or digit, optionally :TAG)",
                      name);
        return;
    }
    json_t *given = json_object_get(body, "tags"), *tags = json_array();
    if (tag[0])
        json_array_append_new(tags, json_string(tag));
    if (builds__tags_add(tags, given, "template build request", &err)) {
        json_decref(tags);
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    if (!json_array_size(tags))
        json_array_append_new(tags, json_string(CP_TEMPLATE_DEFAULT_TAG));
    name = id;
    if (builds__is_default(cp, name)) {
        json_decref(tags);
        cp_rest_error(req, 409,
                      "template '%s' is a default template (templates.defaults), made by "
                      "deploy/templates/build: build yours under another name",
                      name);
        return;
    }
    /* A sandbox gets the configured size: a build asking for another is refused rather than
     * answered with a template that does not have it. */
    int64_t cpu = cp->cfg.cpu_count, mem = (int64_t)(cp->cfg.memory_bytes >> 20), disk = 0;
    int64_t disk_mb = (int64_t)(cp->cfg.disk_bytes >> 20);
    if (al_json_get_int(body, "cpuCount", false, 1, 1024, &cpu, "template build request", &err) ||
        al_json_get_int(body, "memoryMB", false, 1, INT64_MAX, &mem, "template build request",
                        &err) ||
        al_json_get_int(body, "minFreeDiskMb", false, 0, INT64_MAX, &disk, "template build request",
                        &err)) {
        json_decref(tags);
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    if (cpu != cp->cfg.cpu_count || mem != (int64_t)(cp->cfg.memory_bytes >> 20)) {
        json_decref(tags);
        cp_rest_error(req, 400,
                      "sandboxes of this server have %lld vCPUs and %lld MiB of memory "
                      "(sandboxes.cpu_count, sandboxes.memory): leave cpuCount and memoryMB out "
                      "or ask for exactly that",
                      (long long)cp->cfg.cpu_count, (long long)(cp->cfg.memory_bytes >> 20));
        return;
    }
    if (disk > disk_mb) {
        json_decref(tags);
        cp_rest_error(req, 400,
                      "minFreeDiskMb %lld: sandboxes of this server have %lld MiB of disk "
                      "(sandboxes.disk)",
                      (long long)disk, (long long)disk_mb);
        return;
    }
    uint64_t now = al_wall_ns(), created = now;
    json_t *tdoc = NULL;
    int rc = cp_store_tpl_load(cp->store, name, &created, &tdoc, &err);
    if (rc == -ENOENT) {
        tdoc = json_pack("{s:[s],s:s}", "names", name, "created_by", who->key_id);
        created = now;
    } else if (rc) {
        json_decref(tags);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    json_object_set_new(tdoc, "updated_ns", json_integer((json_int_t)now));
    struct cp_store_build b = {.created_ns = now};
    al_uuid_v4(b.id);
    snprintf(b.template_id, sizeof b.template_id, "%s", name);
    snprintf(b.status, sizeof b.status, "waiting");
    b.doc = json_pack("{s:I,s:I,s:I,s:s,s:I}", "cpuCount", (json_int_t)cpu, "memoryMB",
                      (json_int_t)mem, "diskSizeMB", (json_int_t)disk_mb, "requested_by",
                      who->key_id, "updated_ns", (json_int_t)now);
    json_object_set(b.doc, "tags", tags);
    if ((rc = cp_store_tpl_save(cp->store, name, created, tdoc, &err)) ||
        (rc = cp_store_build_save(cp->store, &b, &err))) {
        json_decref(tags);
        json_decref(tdoc);
        cp_store_build_free(&b);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    json_decref(tdoc);
    al_info("template %s: build %s requested by %s", name, b.id, who->key_id);
    al_http_reply_json(req, 202,
                       json_pack("{s:s,s:s,s:[s],s:[s],s:b,s:o}", "templateID", name, "buildID",
                                 b.id, "names", name, "aliases", name, "public", 0, "tags", tags));
    cp_store_build_free(&b);
}

/* ---- POST /v2/templates/{id}/builds/{buildID} ------------------------------------------- */

bool cp_builds_trigger_path(const char *p, char *tid, size_t tlen, char *bid, size_t blen)
{
    if (strncmp(p, "/v2/templates/", 14) != 0)
        return false;
    p += 14;
    if (!cp_rest_path_part(&p, tid, tlen) || strncmp(p, "/builds/", 8) != 0)
        return false;
    p += 8;
    return cp_rest_path_part(&p, bid, blen) && *p == '\0';
}

/* A COPY step's filesHash: the sha256 the SDK computes, 64 lowercase hex digits. */
static bool builds__hash_valid(const char *h)
{
    return strlen(h) == 64 && al_hex_is_lower(h, 64);
}

/* Checks one step of a definition; i is its number as the SDK counts (1 = the first). */
static int builds__check_step(const json_t *s, size_t i, struct al_error *err)
{
    static const char *const known[] = {
        "type", "args", "force", "filesHash", "forceUpload", "resolveSymlinks", "gzip", NULL};
    char what[64];
    snprintf(what, sizeof what, "step %zu", i);
    if (!json_is_object(s))
        return al_error_set(err, -EINVAL, "%s must be a JSON object", what);
    builds__drop_nulls((json_t *)s);
    int rc;
    const char *type = NULL;
    json_t *args = NULL;
    bool b;
    if ((rc = al_json_check_keys(s, known, what, err)) ||
        (rc = al_json_get_str(s, "type", true, &type, what, err)) ||
        (rc = al_json_get_arr(s, "args", false, &args, what, err)) ||
        (rc = al_json_get_bool(s, "force", false, &b, what, err)) ||
        (rc = al_json_get_bool(s, "forceUpload", false, &b, what, err)) ||
        (rc = al_json_get_bool(s, "resolveSymlinks", false, &b, what, err)) ||
        (rc = al_json_get_bool(s, "gzip", false, &b, what, err)))
        return rc;
    size_t n = args ? json_array_size(args) : 0;
    for (size_t k = 0; k < n; k++) {
        const json_t *a = json_array_get(args, k);
        if (!json_is_string(a) || strlen(json_string_value(a)) != json_string_length(a) ||
            json_string_length(a) > BUILDS_MAX_ARG)
            return al_error_set(err, -EINVAL,
                                "%s (%s): argument %zu must be a string of at most %u bytes "
                                "without NUL bytes",
                                what, type, k + 1, BUILDS_MAX_ARG);
    }
    const char *arg0 = n ? json_string_value(json_array_get(args, 0)) : "";
    size_t lo, hi;
    if (strcmp(type, "RUN") == 0)
        lo = 1, hi = 2; /* command, user */
    else if (strcmp(type, "COPY") == 0)
        lo = 2, hi = 4; /* source, destination, user, mode */
    else if (strcmp(type, "ENV") == 0)
        lo = 2, hi = 2 * 1024; /* name, value, ... */
    else if (strcmp(type, "WORKDIR") == 0 || strcmp(type, "USER") == 0)
        lo = 1, hi = 1;
    else
        return al_error_set(err, -EINVAL,
                            "%s: unknown step type \"%.32s\" (RUN, COPY, ENV, WORKDIR and USER "
                            "are the steps of a build)",
                            what, type);
    if (n < lo || n > hi || !arg0[0])
        return al_error_set(err, -EINVAL,
                            "%s (%s): %zu arguments; it takes %zu to %zu, the first "
                            "not empty",
                            what, type, n, lo, hi);
    if (strcmp(type, "ENV") == 0) {
        if (n % 2)
            return al_error_set(err, -EINVAL, "%s (ENV): arguments come in name, value pairs",
                                what);
        for (size_t k = 0; k < n; k += 2) {
            const char *name = json_string_value(json_array_get(args, k));
            if (!name[0] || strchr(name, '='))
                return al_error_set(err, -EINVAL,
                                    "%s (ENV): \"%.64s\" is not a variable name (not empty, "
                                    "no '=')",
                                    what, name);
        }
    }
    if (strcmp(type, "COPY") == 0) {
        char base[4097], why[300];
        const char *dest = json_string_value(json_array_get(args, 1));
        const char *mode = n > 3 ? json_string_value(json_array_get(args, 3)) : "";
        size_t ml = strlen(mode);
        if (tpl_copy_source(arg0, base, sizeof base, why, sizeof why))
            return al_error_set(err, -EINVAL, "%s (COPY %.64s): %s", what, arg0, why);
        if (!dest[0])
            return al_error_set(err, -EINVAL, "%s (COPY %.64s): the destination is empty", what,
                                arg0);
        if (ml > 4 || strspn(mode, "01234567") != ml)
            return al_error_set(err, -EINVAL,
                                "%s (COPY %.64s): the mode \"%.16s\" is not 1 to 4 octal digits",
                                what, arg0, mode);
    }
    const char *hash = NULL;
    if ((rc = al_json_get_str(s, "filesHash", false, &hash, what, err)))
        return rc;
    if (strcmp(type, "COPY") == 0) {
        if (!hash || !builds__hash_valid(hash))
            return al_error_set(err, -EINVAL,
                                "%s (COPY %.64s): \"filesHash\" (the sha256 of the files, 64 "
                                "hex digits) is required",
                                what, arg0);
    } else if (hash) {
        return al_error_set(err, -EINVAL, "%s (%s): \"filesHash\" belongs to COPY steps only", what,
                            type);
    }
    return 0;
}

int cp_builds_check_definition(struct cp *cp, const char *tid, json_t *d, struct al_error *err)
{
    static const char *const known[] = {"fromImage", "fromImageRegistry", "fromTemplate", "steps",
                                        "startCmd",  "readyCmd",          "force",        NULL};
    const char *what = "template build";
    builds__drop_nulls(d);
    int rc;
    const char *image = NULL, *from = NULL, *start = NULL, *ready = NULL;
    json_t *steps = NULL, *reg = NULL;
    bool force;
    if ((rc = al_json_check_keys(d, known, what, err)) ||
        (rc = al_json_get_str(d, "fromImage", false, &image, what, err)) ||
        (rc = al_json_get_str(d, "fromTemplate", false, &from, what, err)) ||
        (rc = al_json_get_obj(d, "fromImageRegistry", false, &reg, what, err)) ||
        (rc = al_json_get_arr(d, "steps", false, &steps, what, err)) ||
        (rc = al_json_get_str(d, "startCmd", false, &start, what, err)) ||
        (rc = al_json_get_str(d, "readyCmd", false, &ready, what, err)) ||
        (rc = al_json_get_bool(d, "force", false, &force, what, err)))
        return rc;
    bool has_image = image && image[0], has_from = from && from[0];
    if (has_image == has_from)
        return al_error_set(err, -EINVAL,
                            "template build: exactly one of fromImage (an image reference) and "
                            "fromTemplate (a template name) must be given");
    if (reg && !has_image)
        return al_error_set(err, -EINVAL,
                            "template build: fromImageRegistry goes with fromImage only");
    if ((start && strlen(start) > BUILDS_MAX_CMD) || (ready && strlen(ready) > BUILDS_MAX_CMD))
        return al_error_set(err, -EINVAL,
                            "template build: startCmd and readyCmd are at most %u "
                            "bytes",
                            BUILDS_MAX_CMD);
    if (has_image) {
        struct tpl_ref ref;
        if ((rc = tpl_ref_parse(image, &ref, err)))
            return rc;
    } else {
        char dir[4200];
        if (strcmp(from, tid) == 0)
            return al_error_set(err, -EINVAL,
                                "template build: template '%s' cannot be built from itself", tid);
        if ((rc = cp_template_resolve(cp, from, dir, sizeof dir, err)))
            return rc;
    }
    size_t n = steps ? json_array_size(steps) : 0;
    if (n > BUILDS_MAX_STEPS)
        return al_error_set(err, -EINVAL, "template build: %zu steps, at most %d", n,
                            BUILDS_MAX_STEPS);
    for (size_t i = 0; i < n; i++)
        if ((rc = builds__check_step(json_array_get(steps, i), i + 1, err)))
            return rc;
    return 0;
}

static int builds__fail(struct cp *cp, struct cp_store_build *b, const char *step,
                        const char *message, struct al_error *err)
{
    uint64_t now = al_wall_ns();
    builds__log(cp, b->id, CP_BUILD_ERROR, step, "%s", message);
    snprintf(b->status, sizeof b->status, "error");
    json_t *reason = json_pack("{s:s}", "message", message);
    if (step)
        json_object_set_new(reason, "step", json_string(step));
    json_object_set_new(b->doc, "reason", reason);
    json_object_set_new(b->doc, "updated_ns", json_integer((json_int_t)now));
    json_object_set_new(b->doc, "finished_ns", json_integer((json_int_t)now));
    return cp_store_build_save(cp->store, b, err);
}

/* The build b of tid from the path, or an answered 404. */
static int builds__find(struct cp *cp, struct al_http_req *req, const char *tid, const char *bid,
                        struct cp_store_build *b)
{
    struct al_error err = {0};
    int rc = cp_store_build_load(cp->store, bid, b, &err);
    if (rc == 0 && strcmp(b->template_id, tid) == 0)
        return 0;
    if (rc == 0)
        cp_store_build_free(b);
    if (rc && rc != -ENOENT)
        cp_rest_error(req, 500, "%s", al_error_str(&err));
    else
        cp_rest_error(req, 404, "template '%.64s' has no build '%.40s'", tid, bid);
    return rc ? rc : -ENOENT;
}

/* ---- the runner ------------------------------------------------------------------------- */

static int builds__find_running(const struct cp_store_build *b, void *arg)
{
    if (strcmp(b->status, "building") != 0)
        return 0;
    snprintf(arg, 40, "%s", b->id);
    return 1;
}

/* A 409 when a build of template id runs; true if answered. */
static bool builds__refuse_if_building(struct cp *cp, struct al_http_req *req, const char *id)
{
    char running[40] = "";
    cp_store_build_foreach(cp->store, id, builds__find_running, running, NULL);
    if (!running[0])
        return false;
    cp_rest_error(req, 409, "template '%s' is being built (build %s): wait for it to end", id,
                  running);
    return true;
}

/* One build on its way: checked and recorded on the loop thread, its base made and its
 * steps applied on a worker thread (a pull and an unpacking block for minutes), installed
 * on the loop thread. The worker never touches the database: its log entries are queued
 * here and written by the loop (async). */
struct builds_job {
    uv_work_t work;
    uv_async_t async;
    struct cp *cp;
    char tid[72], bid[40];
    json_t *def;             /* the definition (owned) */
    json_t *tags;            /* the tags the build gets once ready (owned) */
    struct tpl_creds *creds; /* fromImageRegistry's, freed by the worker after the pull */
    char requested_by[64];
    char policy[CP_POLICY_NAME_MAX]; /* the RUN steps' egress policy */
    char tmp[4300]; /* <templates>/.<tid>.build-<bid>: the new version while it is made */
    /* the result (worker) */
    int rc;
    char fail_step[16];
    char fail_msg[1536];
    /* log entries of the worker, waiting for the loop */
    pthread_mutex_t lock;
    json_t *pending;
    size_t layers_logged;
    /* Where the build is, for the status answer's "progress" (under lock: the worker writes,
     * the loop reads): the step being made and the base image's pull. */
    char at_step[16];
    bool pulling;
    struct tpl_progress pull;
    struct builds_job *next_live; /* builds__live */
    /* The steps: the worker applies them from next_step on and stops at a RUN (run_at),
     * which the loop runs in a build sandbox (buildsb.c); the worker then merges its layer
     * (snapshot) and goes on. t: template.json as the steps so far made it. */
    json_t *t;
    bool based;
    size_t next_step;
    long run_at; /* -1: none waiting */
    char snapshot[4400];
    uint32_t snap_id_base;
    /* The step cache: chain is sha256 of the base and every step so far; a RUN's layer is
     * kept under it (<state>/cache/steps/<hex>.tar), taken instead of running it again. */
    char chain[65];
    char run_key[65];
    json_t *step_layers; /* the keys of the RUN steps' layers (template.json's build) */
    char base_digest[80], base_dir[4200];
    struct builds_job *next_deferred; /* waiting for the caches' trim (builds__trim) */
    /* the RUN step's output on its way into the log (loop thread) */
    struct al_buf line[2];
    uint64_t out_bytes;
    bool out_cut;
};

static size_t builds__running;
/* The builds under way (loop thread), found by the status answer for their progress. */
static struct builds_job *builds__live;
/* The caches' size bound is applied while no build runs (nothing then reads what goes):
 * builds started meanwhile wait for it. */
static bool builds__trimming;
static struct builds_job *builds__deferred;
static void builds__files_dir(const struct cp *cp, char *out, size_t len);

static void builds__job_log(struct builds_job *j, int level, const char *step, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void builds__job_log(struct builds_job *j, int level, const char *step, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:I,s:i,s:s?,s:s}", "t", (json_int_t)al_wall_ns(), "level", level,
                          "step", step, "message", msg);
    pthread_mutex_lock(&j->lock);
    json_array_append_new(j->pending, e);
    if (step)
        snprintf(j->at_step, sizeof j->at_step, "%s", step);
    pthread_mutex_unlock(&j->lock);
    uv_async_send(&j->async);
}

/* Loop thread: the worker's entries into the build's log. */
static void builds__job_flush(uv_async_t *a)
{
    struct builds_job *j = a->data;
    pthread_mutex_lock(&j->lock);
    json_t *v = j->pending;
    j->pending = json_array();
    pthread_mutex_unlock(&j->lock);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        struct al_error err = {0};
        struct cp_store_build_log_entry le = {
            .time_ns = (uint64_t)json_integer_value(json_object_get(e, "t")),
            .level = (int)json_integer_value(json_object_get(e, "level")),
            .step = json_string_value(json_object_get(e, "step")),
            .message = json_string_value(json_object_get(e, "message")),
        };
        if (cp_store_build_log_add(j->cp->store, j->bid, &le, &err))
            al_warn("build %s: cannot record a log entry: %s", j->bid, al_error_str(&err));
    }
    json_decref(v);
}

/* The status answer's "progress" (an airlock addition; the SDK reads none of it): the step
 * being made ("base", "1".."N", "finalize"), how many there are, and the base image's pull
 * (its layer bytes, those in the blob cache so far, and of those the bytes this pull
 * downloaded, the pull audit record's bytes_pulled). Kept in the build's record once it
 * ends. */
static json_t *builds__progress(struct builds_job *j)
{
    pthread_mutex_lock(&j->lock);
    json_t *o = json_pack("{s:s,s:I}", "step", j->at_step[0] ? j->at_step : "base", "steps",
                          (json_int_t)json_array_size(json_object_get(j->def, "steps")));
    if (j->pulling)
        json_object_set_new(o, "image",
                            json_pack("{s:I,s:I,s:I,s:I}", "layers", (json_int_t)j->pull.layers,
                                      "bytes", (json_int_t)j->pull.total, "bytesCached",
                                      (json_int_t)j->pull.done, "bytesPulled",
                                      (json_int_t)j->pull.pulled));
    pthread_mutex_unlock(&j->lock);
    return o;
}

static struct builds_job *builds__live_find(const char *bid)
{
    for (struct builds_job *j = builds__live; j; j = j->next_live)
        if (strcmp(j->bid, bid) == 0)
            return j;
    return NULL;
}

static void builds__job_fail(struct builds_job *j, const char *step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void builds__job_fail(struct builds_job *j, const char *step, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->fail_msg, sizeof j->fail_msg, fmt, ap);
    va_end(ap);
    snprintf(j->fail_step, sizeof j->fail_step, "%s", step);
    j->rc = -1;
}

static void builds__pull_progress(const struct tpl_progress *p, void *arg)
{
    struct builds_job *j = arg;
    bool done = strcmp(p->phase, "done") == 0;
    if (strcmp(p->phase, "manifest") != 0) { /* (the layers' sizes are known from then on) */
        pthread_mutex_lock(&j->lock);
        j->pulling = true;
        j->pull = *p;
        j->pull.phase = NULL; /* (the pull's string) */
        pthread_mutex_unlock(&j->lock);
    }
    if ((!done && strcmp(p->phase, "layers") != 0) || (!done && p->layers_done == j->layers_logged))
        return;
    j->layers_logged = p->layers_done;
    builds__job_log(j, CP_BUILD_INFO, "base", "layers %zu/%zu, %.1f of %.1f MiB", p->layers_done,
                    p->layers, (double)p->done / 1048576.0, (double)p->total / 1048576.0);
}

/* A path made absolute against cwd and normalised ("." and empty components dropped); -1
 * if it has a ".." component or is too long. */
static int builds__join(const char *cwd, const char *path, char *out, size_t len)
{
    char in[8192];
    snprintf(in, sizeof in, "%s/%s", path[0] == '/' ? "" : cwd, path);
    size_t o = 0;
    out[0] = '\0';
    for (char *save = NULL, *c = strtok_r(in, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0)
            continue;
        if (strcmp(c, "..") == 0)
            return -1;
        int n = snprintf(out + o, len - o, "/%s", c);
        if (n < 0 || (size_t)n >= len - o)
            return -1;
        o += (size_t)n;
    }
    if (!o)
        snprintf(out, len, "/");
    return 0;
}

/* mkdir -p of an absolute path inside a root filesystem (an image's: untrusted), as
 * tpl_mkdir_in_root resolves it; new directories are root's, 0755, as Docker's WORKDIR
 * makes them. */
static int builds__mkdir_in_root(const char *rootfs, const char *path, struct al_error *err)
{
    int root = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return al_error_set(err, -errno, "opening %s: %s", rootfs, strerror(errno));
    char msg[512];
    int rc = tpl_mkdir_in_root(root, path, NULL, msg, sizeof msg);
    close(root);
    return rc ? al_error_set(err, rc, "%s", msg) : 0;
}

static void builds__archive_path(const struct cp *cp, const char *tid, const char *hash, char *out,
                                 size_t len);

/* A COPY step: its archive applied to rootfs by the confined helper, at the destination
 * made absolute against the current WORKDIR, owned by the step's user or the current USER. */
static int builds__copy(struct builds_job *j, const json_t *st, const json_t *t, const char *step)
{
    json_t *args = json_object_get(st, "args");
    const char *src = json_string_value(json_array_get(args, 0));
    const char *dest = json_string_value(json_array_get(args, 1));
    const char *owner = json_string_value(json_array_get(args, 2));
    const char *mode = json_string_value(json_array_get(args, 3));
    const char *hash = json_string_value(json_object_get(st, "filesHash"));
    const char *cwd = json_string_value(json_object_get(t, "workdir"));
    const char *user = json_string_value(json_object_get(t, "user"));
    char abs[4096], archive[4400];
    if (builds__join(cwd && cwd[0] ? cwd : "/", dest, abs, sizeof abs) < 0) {
        builds__job_fail(j, step,
                         "step %s (COPY %.200s): the destination '%.200s' is not a path "
                         "without '..'",
                         step, src, dest);
        return -1;
    }
    size_t dl = strlen(dest);
    struct tpl_unpack_copy c = {
        .src = src,
        .dest = abs,
        .dest_is_dir = dest[dl - 1] == '/' || strcmp(dest, ".") == 0 ||
                       (dl >= 2 && strcmp(dest + dl - 2, "/.") == 0),
        .owner = owner && owner[0] ? owner
                 : user && user[0] ? user
                                   : "root",
        .mode = mode && mode[0] ? (int)strtol(mode, NULL, 8) : -1,
    };
    builds__archive_path(j->cp, j->tid, hash, archive, sizeof archive);
    struct tpl_unpack_copy_result res;
    struct al_error err = {0};
    if (cp_template_copy(&j->cp->cfg, j->tmp, archive, &c, &res, &err) < 0) {
        builds__job_fail(j, step, "step %s (COPY %.200s %.200s): %s", step, src, dest,
                         al_error_str(&err));
        return -1;
    }
    if (res.single)
        builds__job_log(j, CP_BUILD_INFO, step, "COPY %s %s: %s (%llu bytes), owner %s", src, dest,
                        res.where, (unsigned long long)res.bytes, c.owner);
    else
        builds__job_log(j, CP_BUILD_INFO, step,
                        "COPY %s %s: %llu entr%s (%llu files, %llu bytes) beneath %s, owner %s",
                        src, dest, (unsigned long long)res.entries, res.entries == 1 ? "y" : "ies",
                        (unsigned long long)res.files, (unsigned long long)res.bytes, res.where,
                        c.owner);
    return 0;
}

/* chain := sha256(chain, what), as hex. */
static void builds__chain(char chain[65], const char *what, size_t len)
{
    unsigned char h[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_state st;
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, (const unsigned char *)chain, strlen(chain));
    crypto_hash_sha256_update(&st, (const unsigned char *)"\n", 1);
    crypto_hash_sha256_update(&st, (const unsigned char *)what, len);
    crypto_hash_sha256_final(&st, h);
    sodium_bin2hex(chain, 65, h, sizeof h);
}

/* A step into the chain: its type, arguments and files (not force, forceUpload: they say how
 * to build, not what). */
static void builds__chain_step(char chain[65], const json_t *st)
{
    json_t *c =
        json_pack("{s:O?,s:O?,s:O?}", "type", json_object_get(st, "type"), "args",
                  json_object_get(st, "args"), "filesHash", json_object_get(st, "filesHash"));
    char *text = c ? json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(c);
    builds__chain(chain, text ? text : "?", text ? strlen(text) : 1);
    free(text);
}

static void builds__step_cache(const struct cp *cp, const char *key, const char *ext, char *out,
                               size_t len)
{
    snprintf(out, len, "%s/cache/steps/%s%s", cp->cfg.state_dir, key, ext);
}

/* Worker thread: a RUN step whose layer is in the step cache is applied from there, without
 * running it. 1 when it was, 0 when it is not cached, -1 on failure (the build's). */
static int builds__run_cached(struct builds_job *j, const char *step, const char *cmd)
{
    char layer[4400], meta[4400];
    builds__step_cache(j->cp, j->run_key, ".tar", layer, sizeof layer);
    builds__step_cache(j->cp, j->run_key, ".json", meta, sizeof meta);
    struct al_error err = {0};
    json_t *m = al_json_load_file(meta, &err);
    const char *diff_id = json_string_value(json_object_get(m, "diff_id"));
    struct stat sb;
    if (!diff_id || lstat(layer, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        json_decref(m);
        return 0;
    }
    tpl_cache_touch(layer);
    tpl_cache_touch(meta);
    struct tpl_unpack_result ur;
    int rc = cp_template_layer(&j->cp->cfg, j->tmp, layer, diff_id, &ur, &err);
    if (rc < 0)
        builds__job_fail(j, step, "step %s (RUN %.200s): its cached layer: %s", step, cmd,
                         al_error_str(&err));
    else
        builds__job_log(j, CP_BUILD_INFO, step, "RUN %.1800s: cached (layer %s, %llu entries)", cmd,
                        diff_id, (unsigned long long)ur.entries);
    json_decref(m);
    return rc < 0 ? -1 : 1;
}

/* Worker thread, at a RUN step: the version so far gets the template.json its build sandbox
 * starts from (without the template's start and ready commands, which the build never
 * runs). */
static int builds__run_prepare(struct builds_job *j, const json_t *t, const char *step)
{
    json_t *bt = json_deep_copy(t);
    struct al_error err = {0};
    int rc = -ENOMEM;
    if (bt) {
        json_object_del(bt, "start_cmd");
        json_object_del(bt, "ready_cmd");
        rc = cp_template_write_json(j->tmp, bt, &err);
        json_decref(bt);
    }
    if (rc < 0) {
        builds__job_fail(j, step, "step %s (RUN): writing template.json: %s", step,
                         rc == -ENOMEM ? "out of memory" : al_error_str(&err));
        return -1;
    }
    snprintf(j->snapshot, sizeof j->snapshot, "%s.step-%ld", j->tmp, j->run_at + 1);
    al_rmtree(j->snapshot); /* (a leftover of nothing: the name is this build's) */
    return 0;
}

/* Worker thread, after a RUN step that exited 0: its writable layer (the build sandbox's
 * snapshot) as an image layer (templates/layerdiff.h), applied to the version by the
 * confined unpacker. */
static void builds__run_merge(struct builds_job *j)
{
    char step[16], upper[4500], layer[4500], diff_id[TPL_DIGEST_LEN + 1];
    snprintf(step, sizeof step, "%ld", j->run_at + 1);
    const json_t *st = json_array_get(json_object_get(j->def, "steps"), (size_t)j->run_at);
    const char *cmd = json_string_value(json_array_get(json_object_get(st, "args"), 0));
    snprintf(upper, sizeof upper, "%s/upper", j->snapshot);
    char dir[4400], suffix[64], final[4400], meta[4400];
    snprintf(dir, sizeof dir, "%s/cache/steps", j->cp->cfg.state_dir);
    snprintf(suffix, sizeof suffix, ".tar.partial-%s", j->bid);
    builds__step_cache(j->cp, j->run_key, suffix, layer, sizeof layer);
    builds__step_cache(j->cp, j->run_key, ".tar", final, sizeof final);
    builds__step_cache(j->cp, j->run_key, ".json", meta, sizeof meta);
    al_mkdir_p(dir, 0700);
    unlink(layer);
    struct tpl_layer_diff_stats ds;
    struct tpl_unpack_result ur;
    struct al_error err = {0};
    const struct cp_config *cfg = &j->cp->cfg;
    if (tpl_layer_diff(&(struct tpl_layer_diff_opts){upper, j->snap_id_base, layer,
                                                     (uint64_t)cfg->max_image_entries,
                                                     cfg->max_unpacked_bytes},
                       diff_id, &ds, &err) < 0 ||
        cp_template_layer(cfg, j->tmp, layer, diff_id, &ur, &err) < 0)
        builds__job_fail(j, step, "step %s (RUN %.200s): its files: %s", step, cmd,
                         al_error_str(&err));
    else
        builds__job_log(j, CP_BUILD_INFO, step,
                        "RUN: %llu entr%s changed (%llu files, %.1f MiB), %llu removed",
                        (unsigned long long)ds.entries, ds.entries == 1 ? "y" : "ies",
                        (unsigned long long)ds.files, (double)ds.bytes / 1048576.0,
                        (unsigned long long)(ds.whiteouts + ds.opaque));
    /* Kept for the next build with the same base and steps (the layer first, its record
     * last: a record names a complete layer). */
    json_t *m = j->rc ? NULL : json_pack("{s:s,s:s}", "diff_id", diff_id, "build", j->bid);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    if (!text || rename(layer, final) < 0 ||
        al_write_file_atomic(meta, text, strlen(text), 0600, &err) < 0)
        unlink(layer);
    free(text);
    if (al_rmtree(j->snapshot) < 0)
        al_warn("build %s: cannot remove %s", j->bid, j->snapshot);
    j->snapshot[0] = '\0';
    j->run_at = -1;
}

/* The steps, in order: what changes template.json (ENV, WORKDIR, USER), WORKDIR's
 * directory and COPY's files in the root. The runner refuses other steps before it starts. */
static int builds__apply_steps(struct builds_job *j, json_t *t)
{
    json_t *steps = json_object_get(j->def, "steps");
    char rootfs[4400];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", j->tmp);
    bool force = json_is_true(json_object_get(j->def, "force"));
    for (size_t i = j->next_step; i < json_array_size(steps); i++) {
        json_t *st = json_array_get(steps, i);
        builds__chain_step(j->chain, st);
        char step[16];
        snprintf(step, sizeof step, "%zu", i + 1);
        const char *type = json_string_value(json_object_get(st, "type"));
        json_t *args = json_object_get(st, "args");
        const char *a0 = json_string_value(json_array_get(args, 0));
        if (strcmp(type, "ENV") == 0) {
            json_t *env = json_object_get(t, "env");
            if (!json_is_object(env)) {
                env = json_object();
                json_object_set_new(t, "env", env);
            }
            for (size_t k = 0; k + 1 < json_array_size(args); k += 2)
                json_object_set(env, json_string_value(json_array_get(args, k)),
                                json_array_get(args, k + 1));
            builds__job_log(j, CP_BUILD_INFO, step, "ENV: %zu variable%s",
                            json_array_size(args) / 2, json_array_size(args) == 2 ? "" : "s");
        } else if (strcmp(type, "WORKDIR") == 0) {
            const char *cwd = json_string_value(json_object_get(t, "workdir"));
            char dir[4096];
            struct al_error err = {0};
            if (builds__join(cwd ? cwd : "/", a0, dir, sizeof dir) < 0) {
                builds__job_fail(j, step, "step %s (WORKDIR %.200s): not a path without '..'", step,
                                 a0);
                return -1;
            }
            if (builds__mkdir_in_root(rootfs, dir, &err)) {
                builds__job_fail(j, step, "step %s (WORKDIR %.200s): %s", step, a0,
                                 al_error_str(&err));
                return -1;
            }
            json_object_set_new(t, "workdir", json_string(dir));
            builds__job_log(j, CP_BUILD_INFO, step, "WORKDIR %s", dir);
        } else if (strcmp(type, "USER") == 0) {
            json_object_set_new(t, "user", json_string(a0));
            builds__job_log(j, CP_BUILD_INFO, step, "USER %s", a0);
        } else if (strcmp(type, "COPY") == 0) {
            if (builds__copy(j, st, t, step) < 0)
                return -1;
        } else if (strcmp(type, "RUN") == 0) {
            /* The layer depends on what the step could reach: one made under another
             * build policy is not taken (a key limited to deny-all does not get what a
             * build under an open policy downloaded). */
            char pol[CP_POLICY_NAME_MAX + 8];
            snprintf(pol, sizeof pol, "policy %s", j->policy);
            snprintf(j->run_key, sizeof j->run_key, "%s", j->chain);
            builds__chain(j->run_key, pol, strlen(pol));
            json_array_append_new(j->step_layers, json_string(j->run_key));
            int c = force || json_is_true(json_object_get(st, "force"))
                        ? 0
                        : builds__run_cached(j, step, a0);
            if (c < 0)
                return -1;
            if (c > 0)
                continue;
            j->next_step = i + 1;
            j->run_at = (long)i;
            return builds__run_prepare(j, t, step);
        }
    }
    j->next_step = json_array_size(steps);
    const char *start = json_string_value(json_object_get(j->def, "startCmd"));
    const char *ready = json_string_value(json_object_get(j->def, "readyCmd"));
    json_object_del(t, "start_cmd");
    json_object_del(t, "ready_cmd");
    if (start && start[0])
        json_object_set_new(t, "start_cmd", json_string(start));
    if (ready && ready[0])
        json_object_set_new(t, "ready_cmd", json_string(ready));
    return 0;
}

/* Worker thread: the base (an image pulled and unpacked, or a template's files linked) into
 * j->tmp and j->t. */
static void builds__base(struct builds_job *j)
{
    struct cp *cp = j->cp;
    const char *image = json_string_value(json_object_get(j->def, "fromImage"));
    const char *from = json_string_value(json_object_get(j->def, "fromTemplate"));
    json_t *t = NULL;
    struct al_error err = {0};
    if (mkdir(j->tmp, 0755) < 0) {
        builds__job_fail(j, "base", "cannot make %s: %s", j->tmp, strerror(errno));
        tpl_creds_free(j->creds);
        j->creds = NULL;
        return;
    }
    if (image) {
        builds__job_log(j, CP_BUILD_INFO, "base", "pulling %s", image);
        struct tpl_image img;
        memset(&img, 0, sizeof img);
        int rc = cp_template_pull(&cp->cfg,
                                  &(struct tpl_pull_opts){.reference = image,
                                                          .creds = j->creds,
                                                          .requested_by = j->requested_by,
                                                          .progress = builds__pull_progress,
                                                          .arg = j},
                                  &img, &err);
        tpl_creds_free(j->creds);
        j->creds = NULL;
        if (rc < 0) {
            builds__job_fail(j, "base", "pulling %s: %s", image, al_error_str(&err));
            tpl_image_free(&img);
            goto out;
        }
        snprintf(j->base_digest, sizeof j->base_digest, "%s", img.digest);
        builds__job_log(j, CP_BUILD_INFO, "base",
                        "%s is %s (%zu layers, %.1f MiB, %.1f MiB pulled)", img.reference,
                        img.digest, img.n_layers, (double)img.bytes / 1048576.0,
                        (double)img.bytes_pulled / 1048576.0);
        struct tpl_unpack_result ur = {0};
        t = cp_template_unpack(&cp->cfg, j->tid, &img, j->tmp, &ur, &err);
        tpl_image_free(&img);
        if (!t) {
            builds__job_fail(j, "base", "unpacking %s: %s", image, al_error_str(&err));
            goto out;
        }
        builds__job_log(j, CP_BUILD_INFO, "base", "unpacked: %llu entries, %.1f MiB",
                        (unsigned long long)ur.entries, (double)ur.bytes / 1048576.0);
    } else {
        char dir[4200], p[4300];
        if (cp_template_resolve(cp, from, dir, sizeof dir, &err) ||
            cp_template_link_copy(dir, j->tmp, &err)) {
            builds__job_fail(j, "base", "template %s: %s", from, al_error_str(&err));
            goto out;
        }
        snprintf(j->base_dir, sizeof j->base_dir, "%s", dir);
        snprintf(p, sizeof p, "%s/template.json", dir);
        t = al_json_load_file(p, &err);
        if (!t) {
            builds__job_fail(j, "base", "template %s: %s", from, al_error_str(&err));
            goto out;
        }
        json_object_set_new(t, "name", json_string(j->tid));
        json_object_set_new(t, "description", json_pack("s+", "from template ", from));
        builds__job_log(j, CP_BUILD_INFO, "base", "the files of template %s", from);
    }
    j->t = t;
    t = NULL;
    j->based = true;
    /* The step cache's chain starts from what the base is: the image's digest, or the
     * version of the template (its directory) the files came from. */
    char seed[4400] = "", real[4096];
    if (image)
        snprintf(seed, sizeof seed, "image %s", j->base_digest);
    else if (realpath(j->base_dir, real)) {
        /* (a directory that is rebuilt in place, as the default templates are, has a new
         * template.json then) */
        struct stat tj;
        char p[4300];
        snprintf(p, sizeof p, "%s/template.json", real);
        if (stat(p, &tj) < 0)
            memset(&tj, 0, sizeof tj);
        snprintf(seed, sizeof seed, "template %s %lld.%09ld", real, (long long)tj.st_mtim.tv_sec,
                 tj.st_mtim.tv_nsec);
    }
    j->chain[0] = '\0';
    builds__chain(j->chain, seed, strlen(seed));
out:
    json_decref(t);
}

/* Worker thread: the base, then the steps from j->next_step on, up to a RUN (the loop runs
 * it, then this goes on with its layer) or the end and template.json, all in j->tmp. A
 * failure removes j->tmp. */
static void builds__work(uv_work_t *w)
{
    struct builds_job *j = w->data;
    struct al_error err = {0};
    if (!j->based)
        builds__base(j);
    else if (j->snapshot[0])
        builds__run_merge(j);
    if (j->rc || builds__apply_steps(j, j->t) < 0)
        goto out;
    if (j->run_at >= 0)
        return;
    const char *image = json_string_value(json_object_get(j->def, "fromImage"));
    const char *from = json_string_value(json_object_get(j->def, "fromTemplate"));
    json_object_set_new(j->t, "build",
                        json_pack("{s:s,s:s?,s:s?,s:O}", "id", j->bid, "from_image", image,
                                  "from_template", from, "step_layers", j->step_layers));
    if (cp_template_write_json(j->tmp, j->t, &err) < 0)
        builds__job_fail(j, "finalize", "writing template.json: %s", al_error_str(&err));
out:
    if (j->rc && j->snapshot[0] && al_rmtree(j->snapshot) < 0)
        al_warn("build %s: cannot remove %s", j->bid, j->snapshot);
    if (j->rc && al_rmtree(j->tmp) < 0)
        al_warn("build %s: cannot remove %s", j->bid, j->tmp);
}

struct builds_users {
    const char *id;
    size_t n;
    char first[CP_ID_LEN + 1];
};

/* Whether ref ("NAME" or "NAME:TAG") names template id. */
static bool builds__ref_is(const char *ref, const char *id)
{
    size_t n = strlen(id);
    return strncmp(ref, id, n) == 0 && (ref[n] == '\0' || ref[n] == ':');
}

static int builds__count_user(void *v, void *arg)
{
    const struct cp_sandbox *sb = v;
    struct builds_users *u = arg;
    if (builds__ref_is(sb->rec.template_id, u->id) && u->n++ == 0)
        snprintf(u->first, sizeof u->first, "%s", sb->rec.id);
    return 0;
}

struct builds_build_user {
    const char *id, *bid;
    bool used;
};

static int builds__uses_build(void *v, void *arg)
{
    const struct cp_sandbox *sb = v;
    struct builds_build_user *u = arg;
    /* A sandbox whose build is not known (created before airlockd recorded it) may run on
     * any version: it keeps them all. */
    if (builds__ref_is(sb->rec.template_id, u->id) &&
        (!sb->rec.template_build[0] || strcmp(sb->rec.template_build, u->bid) == 0))
        u->used = true;
    return 0;
}

/* Sandboxes of the registry that use template id, paused ones too (they resume on its
 * files). */
static void builds__users(struct cp *cp, const char *id, struct builds_users *u)
{
    *u = (struct builds_users){.id = id};
    cp_map_foreach(&cp->sandboxes, builds__count_user, u);
}

/* Whether a tag of template id names build bid (tags: the template doc's "tags"). */
static bool builds__tagged(const json_t *tags, const char *bid)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)tags, k, v)
    {
        const char *b = json_string_value(json_object_get(v, "build"));
        if (b && strcmp(b, bid) == 0)
            return true;
    }
    return false;
}

/* Versions of a template go once nothing needs them: a version (".<id>.v-<build>") is kept
 * while a tag names its build or a sandbox of the registry, paused ones too, was made from
 * it (its root is mounted from those files); the version a pre-tags build replaced
 * (".<id>.prev-<build>", whose sandboxes are not known) while any sandbox of the template
 * exists. */
static void builds__gc(struct cp *cp, const char *id)
{
    struct builds_users u;
    builds__users(cp, id, &u);
    uint64_t created;
    json_t *doc = NULL;
    if (cp_store_tpl_load(cp->store, id, &created, &doc, NULL))
        doc = NULL;
    const json_t *tags = json_object_get(doc, "tags");
    DIR *d = opendir(cp->cfg.templates_path);
    if (!d) {
        json_decref(doc);
        return;
    }
    char prev[96], ver[96];
    snprintf(prev, sizeof prev, ".%s.prev-", id);
    snprintf(ver, sizeof ver, ".%s.v-", id);
    struct dirent *de;
    while ((de = readdir(d))) {
        bool gone;
        if (strncmp(de->d_name, prev, strlen(prev)) == 0) {
            gone = u.n == 0;
        } else if (strncmp(de->d_name, ver, strlen(ver)) == 0) {
            struct builds_build_user bu = {.id = id, .bid = de->d_name + strlen(ver)};
            cp_map_foreach(&cp->sandboxes, builds__uses_build, &bu);
            gone = !bu.used && !builds__tagged(tags, bu.bid) &&
                   !cp_snapshots_use_version(cp, id, bu.bid);
        } else {
            continue;
        }
        if (!gone)
            continue;
        char p[4400], gp[4500], rnd[CP_ID_LEN + 1];
        /* Renamed first, atomically: no creation resolves to it from here on. */
        cp_sandbox_id_new(rnd);
        snprintf(p, sizeof p, "%s/%s", cp->cfg.templates_path, de->d_name);
        snprintf(gp, sizeof gp, "%s/.%s.deleted-%s", cp->cfg.templates_path, id, rnd);
        if (rename(p, gp) < 0) {
            al_warn("template %s: cannot remove %s: %s", id, p, strerror(errno));
            continue;
        }
        al_info("template %s: removing %s (no tag names it, no sandbox uses it)", id, de->d_name);
        cp_remove_later(cp->loop, gp);
    }
    closedir(d);
    json_decref(doc);
}

void cp_builds_gc(struct cp *cp, const char *ref)
{
    char id[72], tag[72];
    if (cp_template_ref_split(ref, id, sizeof id, tag, sizeof tag) == 0)
        builds__gc(cp, id);
}

/* <templates>/<id> becomes a link to the version of build bid, atomically: a creation sees
 * the old default version or the new one, never none. A directory there (a template built
 * before versions were kept) is exchanged for the link and kept as its build's version. */
static int builds__link_default(struct cp *cp, const char *id, const char *bid,
                                struct al_error *err)
{
    const char *root = cp->cfg.templates_path;
    char top[4200], tmp[4300], target[200];
    snprintf(top, sizeof top, "%s/%s", root, id);
    snprintf(tmp, sizeof tmp, "%s/.%s.link-%s", root, id, bid);
    snprintf(target, sizeof target, ".%s.v-%s", id, bid);
    unlink(tmp);
    if (symlink(target, tmp) < 0)
        return al_error_set(err, -errno, "making %s: %s", tmp, strerror(errno));
    struct stat st;
    if (lstat(top, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, top, RENAME_EXCHANGE) < 0) {
            int e = errno;
            unlink(tmp);
            return al_error_set(err, -e, "installing %s: %s", top, strerror(e));
        }
        char ob[40], keep[4300];
        cp_template_json_build(tmp, ob, sizeof ob);
        if (ob[0] && strlen(ob) == 36 && !strchr(ob, '/'))
            cp_template_version_dir(cp, id, ob, keep, sizeof keep);
        else
            snprintf(keep, sizeof keep, "%s/.%s.prev-%s", root, id, bid);
        if (rename(tmp, keep) < 0)
            al_warn("template %s: the previous version stays as %s: %s", id, tmp, strerror(errno));
    } else if (rename(tmp, top) < 0) {
        int e = errno;
        unlink(tmp);
        return al_error_set(err, -e, "installing %s: %s", top, strerror(e));
    }
    al_fsync_dir(root);
    return 0;
}

/* Tags of template id name build bid from now on (the template doc's "tags"); the default
 * tag moves <templates>/<id> too. */
static int builds__tag(struct cp *cp, const char *id, const json_t *tags, const char *bid,
                       struct al_error *err)
{
    uint64_t created = al_wall_ns(), now = al_wall_ns();
    json_t *doc = NULL;
    int rc = cp_store_tpl_load(cp->store, id, &created, &doc, err);
    if (rc == -ENOENT)
        doc = json_pack("{s:[s]}", "names", id);
    else if (rc)
        return rc;
    json_t *t = json_object_get(doc, "tags");
    if (!json_is_object(t)) {
        t = json_object();
        json_object_set_new(doc, "tags", t);
    }
    bool deflt = false;
    size_t i;
    json_t *v;
    json_array_foreach(tags, i, v)
    {
        json_object_set_new(t, json_string_value(v),
                            json_pack("{s:s,s:I}", "build", bid, "created_ns", (json_int_t)now));
        deflt |= strcmp(json_string_value(v), CP_TEMPLATE_DEFAULT_TAG) == 0;
    }
    json_object_set_new(doc, "updated_ns", json_integer((json_int_t)now));
    rc = cp_store_tpl_save(cp->store, id, created, doc, err);
    json_decref(doc);
    if (!rc && deflt)
        rc = builds__link_default(cp, id, bid, err);
    return rc;
}

/* Loop thread: j->tmp becomes the build's version, its tags name it. */
static int builds__install(struct builds_job *j, struct al_error *err)
{
    struct cp *cp = j->cp;
    char ver[4300];
    cp_template_version_dir(cp, j->tid, j->bid, ver, sizeof ver);
    if (rename(j->tmp, ver) < 0)
        return al_error_set(err, -errno, "installing %s: %s", ver, strerror(errno));
    al_fsync_dir(cp->cfg.templates_path);
    if (builds__tag(cp, j->tid, j->tags, j->bid, err)) {
        if (rename(ver, j->tmp) < 0)
            al_warn("build %s: %s stays", j->bid, ver);
        return -1;
    }
    builds__gc(cp, j->tid);
    return 0;
}

static void builds__job_closed(uv_handle_t *h)
{
    struct builds_job *j = h->data;
    json_decref(j->pending);
    json_decref(j->t);
    al_buf_free(&j->line[0]);
    al_buf_free(&j->line[1]);
    json_decref(j->def);
    json_decref(j->tags);
    json_decref(j->step_layers);
    tpl_creds_free(j->creds);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

/* ---- the caches' size bound (templates.cache_max) ---------------------------------------- */

static void builds__finish(struct builds_job *j);
static void builds__done(uv_work_t *w, int status);

struct builds_trim {
    uv_work_t w;
    struct cp *cp;
    struct tpl_cache_trim_stats st;
    struct al_error err;
    int rc;
};

/* What the templates were made from (every version's template.json: its image's blobs, its
 * RUN steps' layers) stays: a rebuild of an existing template finds them. */
static int builds__keep_of(const char *dir, struct tpl_cache_keep *k)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/template.json", dir);
    struct al_error err = {0};
    json_t *t = al_json_load_file(p, &err);
    if (!t)
        return 0;
    json_t *im = json_object_get(t, "image"), *v;
    const char *f[] = {"digest", "index_digest", "config_digest"};
    int rc = 0;
    for (size_t i = 0; i < 3; i++) {
        const char *d = json_string_value(json_object_get(im, f[i]));
        if (d)
            rc |= tpl_cache_keep_add(k, d);
    }
    size_t i;
    json_array_foreach(json_object_get(im, "layers"), i, v) if (json_is_string(v)) rc |=
        tpl_cache_keep_add(k, json_string_value(v));
    json_array_foreach(json_object_get(json_object_get(t, "build"), "step_layers"), i,
                       v) if (json_is_string(v)) rc |= tpl_cache_keep_add(k, json_string_value(v));
    json_decref(t);
    return rc;
}

static void builds__trim_work(uv_work_t *w)
{
    struct builds_trim *x = w->data;
    const struct cp_config *cfg = &x->cp->cfg;
    struct tpl_cache_keep keep = {0};
    DIR *d = opendir(cfg->templates_path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", cfg->templates_path, de->d_name);
        if (builds__keep_of(p, &keep)) {
            x->rc = al_error_set(&x->err, -ENOMEM, "out of memory");
            break;
        }
    }
    if (d)
        closedir(d);
    char steps[4200];
    snprintf(steps, sizeof steps, "%s/cache/steps", cfg->state_dir);
    if (!x->rc)
        x->rc =
            tpl_cache_trim(cfg->image_cache_path, steps, cfg->cache_max, &keep, &x->st, &x->err);
    tpl_cache_keep_free(&keep);
}

static void builds__trim_done(uv_work_t *w, int status)
{
    struct builds_trim *x = w->data;
    struct cp *cp = x->cp;
    if (status || x->rc)
        al_warn("template caches: not trimmed: %s",
                status ? uv_strerror(status) : al_error_str(&x->err));
    else if (x->st.removed)
        al_info("template caches: %llu entries (%.1f MiB) removed, the least recently used, to "
                "stay within templates.cache_max (%.1f of %.1f MiB)",
                (unsigned long long)x->st.removed, (double)x->st.removed_bytes / 1048576.0,
                (double)x->st.bytes_after / 1048576.0, (double)cp->cfg.cache_max / 1048576.0);
    else if (x->st.bytes_after > cp->cfg.cache_max)
        al_warn("template caches: %.1f MiB, over templates.cache_max (%.1f MiB): what is left "
                "is what the existing templates were made from",
                (double)x->st.bytes_after / 1048576.0, (double)cp->cfg.cache_max / 1048576.0);
    free(x);
    builds__trimming = false;
    while (builds__deferred) {
        struct builds_job *j = builds__deferred;
        builds__deferred = j->next_deferred;
        int rc = uv_queue_work(cp->loop, &j->work, builds__work, builds__done);
        if (rc) {
            builds__job_fail(j, "base", "the build cannot start: %s", uv_strerror(rc));
            builds__finish(j);
        }
    }
}

/* Loop thread, when no build runs: the caches within templates.cache_max. */
static void builds__trim(struct cp *cp)
{
    if (builds__trimming || cp->stopping)
        return;
    struct builds_trim *x = calloc(1, sizeof *x);
    if (!x)
        return;
    x->cp = cp;
    x->w.data = x;
    builds__trimming = true;
    if (uv_queue_work(cp->loop, &x->w, builds__trim_work, builds__trim_done)) {
        builds__trimming = false;
        free(x);
    }
}

/* Loop thread: the end of the build, ready or not. */
static void builds__finish(struct builds_job *j)
{
    struct cp *cp = j->cp;
    builds__running--;
    struct al_error err = {0};
    if (!j->rc && builds__install(j, &err)) {
        builds__job_fail(j, "finalize", "%s", al_error_str(&err));
        al_rmtree(j->tmp);
    }
    if (j->rc) { /* (a RUN step failed on the loop: its version is there still) */
        struct stat sb;
        if (j->snapshot[0] && lstat(j->snapshot, &sb) == 0)
            cp_remove_later(cp->loop, j->snapshot);
        if (lstat(j->tmp, &sb) == 0)
            cp_remove_later(cp->loop, j->tmp);
    }
    builds__job_flush(&j->async);
    for (struct builds_job **p = &builds__live; *p; p = &(*p)->next_live)
        if (*p == j) {
            *p = j->next_live;
            break;
        }
    snprintf(j->at_step, sizeof j->at_step, "%s", j->rc ? j->fail_step : "finalize");
    struct cp_store_build b;
    if (cp_store_build_load(cp->store, j->bid, &b, &err)) {
        al_error("build %s: %s", j->bid, al_error_str(&err));
    } else if (j->rc) {
        json_object_set_new(b.doc, "progress", builds__progress(j));
        al_warn("template %s: build %s failed at step %s: %s", j->tid, j->bid, j->fail_step,
                j->fail_msg);
        if (builds__fail(cp, &b, j->fail_step, j->fail_msg, &err))
            al_error("build %s: %s", j->bid, al_error_str(&err));
        cp_store_build_free(&b);
    } else {
        uint64_t now = al_wall_ns();
        builds__log(cp, j->bid, CP_BUILD_INFO, "finalize", "template %s is ready (build %s)",
                    j->tid, j->bid);
        snprintf(b.status, sizeof b.status, "ready");
        json_object_set_new(b.doc, "progress", builds__progress(j));
        json_object_set_new(b.doc, "updated_ns", json_integer((json_int_t)now));
        json_object_set_new(b.doc, "finished_ns", json_integer((json_int_t)now));
        if (cp_store_build_save(cp->store, &b, &err))
            al_error("build %s: %s", j->bid, al_error_str(&err));
        al_info("template %s: build %s ready", j->tid, j->bid);
        cp_store_build_free(&b);
    }
    uv_close((uv_handle_t *)&j->async, builds__job_closed);
    if (!builds__running)
        builds__trim(cp);
}

/* ---- RUN steps (loop thread) ------------------------------------------------------------ */

static void builds__done(uv_work_t *w, int status);

/* One line of a RUN step's output into the build log: bytes that are not UTF-8 and control
 * characters but tabs become '?'. */
static void builds__out_line(struct builds_job *j, int idx)
{
    struct al_buf *b = &j->line[idx];
    char msg[1100];
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)b->data;
    size_t n = b->len;
    while (n && (p[n - 1] == '\r' || p[n - 1] == '\n'))
        n--;
    for (size_t i = 0; i < n && o + 5 < sizeof msg;) {
        size_t k = al_json_utf8_len(p + i, n - i);
        if (k == 0 || (k == 1 && p[i] < 0x20 && p[i] != '\t')) {
            msg[o++] = '?';
            i++;
            continue;
        }
        memcpy(msg + o, p + i, k);
        o += k;
        i += k;
    }
    msg[o] = '\0';
    char step[16];
    snprintf(step, sizeof step, "%ld", j->run_at + 1);
    builds__log(j->cp, j->bid, idx ? CP_BUILD_WARN : CP_BUILD_INFO, step, "%s", msg);
    al_buf_reset(b);
}

static void builds__out(void *arg, enum al_envd_stream_fd fd, const unsigned char *d, size_t n)
{
    struct builds_job *j = arg;
    int idx = fd == AL_ENVD_STDERR ? 1 : 0;
    uint64_t max = j->cp->cfg.max_step_output;
    j->out_bytes += n;
    if (j->out_cut)
        return;
    for (size_t i = 0; i < n; i++) {
        if (j->out_bytes - n + i >= max) {
            char step[16];
            snprintf(step, sizeof step, "%ld", j->run_at + 1);
            if (j->line[idx].len)
                builds__out_line(j, idx);
            builds__log(j->cp, j->bid, CP_BUILD_WARN, step,
                        "the step's output beyond %llu bytes is not kept "
                        "(templates.max_step_output)",
                        (unsigned long long)max);
            j->out_cut = true;
            return;
        }
        al_buf_append(&j->line[idx], d + i, 1);
        if (d[i] == '\n' || j->line[idx].len >= 1024)
            builds__out_line(j, idx);
    }
}

static void builds__ran(void *arg, int rc, int exit_code, const json_t *snap, const char *msg)
{
    struct builds_job *j = arg;
    struct cp *cp = j->cp;
    for (int i = 0; i < 2; i++)
        if (j->line[i].len)
            builds__out_line(j, i);
    char step[16];
    snprintf(step, sizeof step, "%ld", j->run_at + 1);
    const json_t *st = json_array_get(json_object_get(j->def, "steps"), (size_t)j->run_at);
    const char *cmd = json_string_value(json_array_get(json_object_get(st, "args"), 0));
    if (rc) {
        builds__job_fail(j, step, "step %s (RUN %.200s): %s", step, cmd, msg);
    } else if (exit_code) {
        /* (the end's status adds something only when it is not "exit status N": a signal;
         * what the proxy refused the step follows it: buildsb.c) */
        const char *deny = msg ? strstr(msg, "; airlock-egress ") : NULL;
        int wl = msg ? (deny ? (int)(deny - msg) : (int)strlen(msg)) : 0;
        bool why = wl > 0 && strncmp(msg, "exit status ", 12) != 0;
        builds__job_fail(j, step,
                         "step %s (RUN %.200s): the command failed with exit code %d%s%.*s%s%s",
                         step, cmd, exit_code, why ? " (" : "", why ? wl : 0, why ? msg : "",
                         why ? ")" : "", deny ? deny : "");
    } else {
        json_int_t base = json_integer_value(json_object_get(snap, "id_base"));
        if (base <= 0 || base > 0xffffffffll) {
            builds__job_fail(j, step,
                             "step %s (RUN %.200s): the snapshot of its files names no "
                             "id base",
                             step, cmd);
        } else {
            j->snap_id_base = (uint32_t)base;
            int qr = uv_queue_work(cp->loop, &j->work, builds__work, builds__done);
            if (qr == 0)
                return;
            builds__job_fail(j, step, "step %s: the build cannot go on: %s", step, uv_strerror(qr));
        }
    }
    builds__finish(j);
}

/* The RUN step j->run_at in a build sandbox over j->tmp (buildsb.c), as the step's user
 * (its second argument) or the current USER, in the current WORKDIR, with the ENV so far. */
static void builds__run_start(struct builds_job *j)
{
    struct cp *cp = j->cp;
    const json_t *st = json_array_get(json_object_get(j->def, "steps"), (size_t)j->run_at);
    json_t *args = json_object_get(st, "args");
    const char *cmd = json_string_value(json_array_get(args, 0));
    const char *user = json_string_value(json_array_get(args, 1));
    if (!user || !user[0])
        user = json_string_value(json_object_get(j->t, "user"));
    if (!user || !user[0])
        user = "root";
    char step[16];
    snprintf(step, sizeof step, "%ld", j->run_at + 1);
    pthread_mutex_lock(&j->lock);
    snprintf(j->at_step, sizeof j->at_step, "%s", step);
    pthread_mutex_unlock(&j->lock);
    builds__log(cp, j->bid, CP_BUILD_INFO, step, "RUN %.1800s (as %s)", cmd, user);
    j->out_bytes = 0;
    j->out_cut = false;
    struct cp_buildsb_step s = {
        .template_id = j->tid,
        .build_id = j->bid,
        .dir = j->tmp,
        .script = cmd,
        .user = user,
        .cwd = json_string_value(json_object_get(j->t, "workdir")),
        .env = json_object_get(j->t, "env"),
        .snapshot = j->snapshot,
        .policy = j->policy,
        .output = builds__out,
        .done = builds__ran,
        .arg = j,
    };
    char sbid[64];
    int rc = cp_buildsb_run(cp, &s, sbid);
    if (rc == 0) {
        if (cp->net)
            builds__log(cp, j->bid, CP_BUILD_INFO, step,
                        "in build sandbox %s, egress under the policy %s", sbid, s.policy);
        else
            builds__log(cp, j->bid, CP_BUILD_INFO, step, "in build sandbox %s, without a network",
                        sbid);
        return;
    }
    builds__job_fail(j, step, "step %s (RUN %.200s): %s", step, cmd,
                     rc == -EINVAL      ? "the build policy does not name a valid policy "
                                          "(airlockd's log says why)"
                     : rc == -ECANCELED ? "airlockd stopped while the build ran: nothing was built"
                                        : "its build sandbox cannot be made");
    builds__finish(j);
}

static void builds__done(uv_work_t *w, int status)
{
    struct builds_job *j = w->data;
    if (status && !j->rc)
        builds__job_fail(j, "base", "the build did not run: %s", uv_strerror(status));
    if (!j->rc && j->run_at >= 0) {
        builds__job_flush(&j->async);
        builds__run_start(j);
        return;
    }
    builds__finish(j);
}

/* Why a build is refused before it starts: the step and the message. */
struct builds__refusal {
    char step[16];
    char msg[1024];
};

/* The first step the runner cannot run (a COPY whose files were not uploaded), as a build
 * error in *why; 0 if there is none. Checked before anything is pulled. */
static int builds__unrunnable(const struct cp *cp, const char *tid, const json_t *def,
                              struct builds__refusal *why)
{
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(def, "steps"), i, st)
    {
        const char *type = json_string_value(json_object_get(st, "type"));
        const char *a0 = json_string_value(json_array_get(json_object_get(st, "args"), 0));
        snprintf(why->step, sizeof why->step, "%zu", i + 1);
        if (strcmp(type, "COPY") == 0) {
            const char *hash = json_string_value(json_object_get(st, "filesHash"));
            char p[4400];
            struct stat sb;
            builds__archive_path(cp, tid, hash, p, sizeof p);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
                continue;
            snprintf(why->msg, sizeof why->msg,
                     "step %zu (COPY %.200s): its files (%s) were not uploaded for template "
                     "'%s': GET /templates/%s/files/%s gives the upload URL (the SDK does this "
                     "before it starts the build); nothing was built",
                     i + 1, a0, hash, tid, tid, hash);
            return -1;
        }
        /* A RUN step's changes are taken from its sandbox's own file system: a backend
         * whose sandboxes have none (the test backend: a host process) cannot run it. */
        if (strcmp(type, "RUN") == 0 && (cp->backend->host_process || !cp->backend->snapshot)) {
            snprintf(why->msg, sizeof why->msg,
                     "step %zu (RUN %.200s): the %s backend cannot run RUN steps (its sandboxes "
                     "have no file system of their own to take the step's changes from: "
                     "sandboxes.backend jail can); nothing was built",
                     i + 1, a0, cp->backend->name);
            return -1;
        }
    }
    return 0;
}

/* Starts the build b (recorded, its definition checked). creds becomes the job's. */
static int builds__start(struct cp *cp, struct cp_store_build *b, json_t *def,
                         struct tpl_creds *creds, const char *key_id, struct al_error *err)
{
    struct builds__refusal why;
    if (builds__unrunnable(cp, b->template_id, def, &why)) {
        tpl_creds_free(creds);
        return builds__fail(cp, b, why.step, why.msg, err);
    }
    struct builds_job *j = calloc(1, sizeof *j);
    if (!j) {
        tpl_creds_free(creds);
        return builds__fail(cp, b, "base", "out of memory", err);
    }
    j->cp = cp;
    snprintf(j->tid, sizeof j->tid, "%s", b->template_id);
    snprintf(j->bid, sizeof j->bid, "%s", b->id);
    j->def = json_deep_copy(def);
    json_t *tags = json_object_get(b->doc, "tags");
    j->tags = json_is_array(tags) && json_array_size(tags)
                  ? json_deep_copy(tags)
                  : json_pack("[s]", CP_TEMPLATE_DEFAULT_TAG);
    j->creds = creds;
    j->pending = json_array();
    j->step_layers = json_array();
    j->run_at = -1;
    al_buf_init(&j->line[0], 4096);
    al_buf_init(&j->line[1], 4096);
    snprintf(j->requested_by, sizeof j->requested_by, "api-key:%s", key_id);
    const char *pol = json_string_value(json_object_get(b->doc, "build_policy"));
    snprintf(j->policy, sizeof j->policy, "%s", pol ? pol : cp->cfg.build_policy);
    snprintf(j->tmp, sizeof j->tmp, "%s/.%s.build-%s", cp->cfg.templates_path, j->tid, j->bid);
    pthread_mutex_init(&j->lock, NULL);
    uv_async_init(cp->loop, &j->async, builds__job_flush);
    j->async.data = j;
    j->work.data = j;
    int rc = al_mkdir_p(cp->cfg.templates_path, 0755) < 0 ? -errno : 0;
    if (!rc && builds__trimming) {
        j->next_deferred = builds__deferred;
        builds__deferred = j;
    } else if (!rc) {
        rc = uv_queue_work(cp->loop, &j->work, builds__work, builds__done);
    }
    if (rc) {
        uv_close((uv_handle_t *)&j->async, builds__job_closed);
        return builds__fail(cp, b, "base", "the build cannot start", err);
    }
    builds__running++;
    j->next_live = builds__live;
    builds__live = j;
    snprintf(b->status, sizeof b->status, "building");
    json_object_set_new(b->doc, "updated_ns", json_integer((json_int_t)al_wall_ns()));
    return cp_store_build_save(cp->store, b, err);
}

static int builds__recover_build(const struct cp_store_build *b, void *arg)
{
    struct cp *cp = arg;
    if (strcmp(b->status, "building") != 0 && strcmp(b->status, "waiting") != 0)
        return 0;
    struct cp_store_build c = *b;
    c.doc = json_deep_copy(b->doc);
    struct al_error err = {0};
    if (builds__fail(cp, &c, "base",
                     strcmp(b->status, "building") == 0
                         ? "airlockd stopped while the build ran: nothing was built; build again"
                         : "airlockd stopped before the build was started: build again",
                     &err))
        al_warn("build %s: %s", b->id, al_error_str(&err));
    cp_store_build_free(&c);
    return 0;
}

static int builds__recover_template(const char *id, uint64_t created_ns, const json_t *doc,
                                    void *arg)
{
    (void)created_ns;
    (void)doc;
    return cp_store_build_foreach(((struct cp *)arg)->store, id, builds__recover_build, arg, NULL) <
                   0
               ? 0
               : 0;
}

void cp_builds_recover(struct cp *cp)
{
    /* Builds that had not ended when airlockd stopped never will: they are errors, and the
     * files they were making go. */
    cp_store_tpl_foreach(cp->store, builds__recover_template, cp, NULL);
    DIR *d = opendir(cp->cfg.templates_path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        /* A build's files, a link being made, a version being removed (renamed away, then
         * removed off the loop: airlockd stopped before that ended). */
        if (de->d_name[0] != '.' ||
            (!strstr(de->d_name, ".build-") && !strstr(de->d_name, ".link-") &&
             !strstr(de->d_name, ".deleted-")))
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", cp->cfg.templates_path, de->d_name);
        al_info("removing %s, left by a build or a removal that did not end", p);
        if (strstr(de->d_name, ".link-") ? unlink(p) < 0 : al_rmtree(p) < 0)
            al_warn("cannot remove %s", p);
    }
    closedir(d);
    /* Uploads that airlockd's stop cut off: never taken for files, so they go. */
    char files[4200];
    builds__files_dir(cp, files, sizeof files);
    if (!(d = opendir(files)))
        return;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tar.partial-") && unlinkat(dirfd(d), de->d_name, 0) < 0)
            al_warn("cannot remove %s/%s: %s", files, de->d_name, strerror(errno));
    closedir(d);
}

void cp_builds_trigger(struct cp *cp, struct al_http_req *req, const struct cp_principal *who,
                       const char *tid, const char *bid, json_t *body)
{
    struct cp_store_build b;
    if (builds__find(cp, req, tid, bid, &b))
        return;
    if (strcmp(b.status, "waiting") != 0) {
        cp_rest_error(req, 409,
                      "build %s of template '%s' has already been started (it is %s): request "
                      "a new build with POST /v3/templates",
                      bid, tid, b.status);
        cp_store_build_free(&b);
        return;
    }
    if (builds__running >= (size_t)cp->cfg.max_builds) {
        cp_rest_error(req, 429,
                      "%zu template builds are running, the most this server runs at once "
                      "(templates.max_builds): start this one when one has ended",
                      builds__running);
        cp_store_build_free(&b);
        return;
    }
    if (builds__refuse_if_building(cp, req, tid)) {
        cp_store_build_free(&b);
        return;
    }
    struct al_error err = {0};
    /* The RUN steps' egress policy: templates.build_policy, or the one the request names,
     * which the key must be allowed to use (as a sandbox's metadata["airlock.policy"]). */
    if (al_http_req_header_count(req, CP_BUILD_POLICY_HEADER) > 1) {
        cp_rest_error(req, 400, "more than one %s header", CP_BUILD_POLICY_HEADER);
        cp_store_build_free(&b);
        return;
    }
    const char *asked = al_http_req_header(req, CP_BUILD_POLICY_HEADER);
    if (asked) {
        struct cp_policy_sel sel;
        int status = 500;
        struct cp_policy_ask ask = {.allow_internet = -1,
                                    .who = who,
                                    .requested = asked,
                                    .requested_what = "the " CP_BUILD_POLICY_HEADER " header"};
        if (cp_policy_select(cp, &ask, &sel, &status, &err)) {
            cp_rest_error(req, status, "the build's policy: %s", al_error_str(&err));
            cp_store_build_free(&b);
            return;
        }
        cp_policy_sel_free(&sel);
    }
    /* The registry credentials are the user's: held for the pull, never stored. */
    json_t *reg = json_object_get(body, "fromImageRegistry");
    struct tpl_creds *creds = NULL;
    bool has_creds = reg && !json_is_null(reg);
    if (has_creds) {
        int rc = tpl_creds_from_json(reg, &creds, &err);
        json_object_del(body, "fromImageRegistry");
        if (rc) {
            tpl_creds_free(creds);
            cp_rest_error(req, 400, "fromImageRegistry: %s", al_error_str(&err));
            cp_store_build_free(&b);
            return;
        }
    }
    if (cp_builds_check_definition(cp, tid, body, &err)) {
        tpl_creds_free(creds);
        cp_rest_error(req, err.code == -ENOENT ? 404 : 400, "%s", al_error_str(&err));
        cp_store_build_free(&b);
        return;
    }
    json_object_set(b.doc, "definition", body);
    json_object_set_new(b.doc, "credentials", json_boolean(has_creds));
    json_object_set_new(b.doc, "started_by", json_string(who->key_id));
    json_object_set_new(b.doc, "started_ns", json_integer((json_int_t)al_wall_ns()));
    json_object_set_new(b.doc, "build_policy", json_string(asked ? asked : cp->cfg.build_policy));
    size_t nsteps = json_array_size(json_object_get(body, "steps"));
    const char *image = json_string_value(json_object_get(body, "fromImage"));
    builds__log(cp, b.id, CP_BUILD_INFO, NULL, "build %s of template %s: from %s %s, %zu step%s",
                b.id, tid, image ? "image" : "template",
                image ? image : json_string_value(json_object_get(body, "fromTemplate")), nsteps,
                nsteps == 1 ? "" : "s");
    int rc = builds__start(cp, &b, body, creds, who->key_id, &err);
    cp_store_build_free(&b);
    if (rc) {
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    al_http_reply(req, 202, NULL, NULL, 0);
}

/* ---- GET /templates/{id}/builds/{buildID}/status ---------------------------------------- */

json_t *cp_builds_log_entry(const struct cp_store_build_log_entry *le)
{
    json_t *e = json_object();
    json_object_set_new(e, "timestamp", builds__time(le->time_ns));
    json_object_set_new(e, "level",
                        json_string(le->level >= 0 && le->level <= CP_BUILD_ERROR
                                        ? builds__levels[le->level]
                                        : "info"));
    json_object_set_new(e, "message", json_string(le->message));
    if (le->step)
        json_object_set_new(e, "step", json_string(le->step));
    return e;
}

int cp_builds_level(const char *name)
{
    for (int i = 0; i <= CP_BUILD_ERROR; i++)
        if (strcmp(name, builds__levels[i]) == 0)
            return i;
    return -1;
}

static int builds__collect_entry(const struct cp_store_build_log_entry *e, void *arg)
{
    json_array_append_new(arg, cp_builds_log_entry(e));
    return 0;
}

static void builds__status(struct cp *cp, struct al_http_req *req, const char *tid, const char *bid)
{
    uint64_t offset = 0, limit = BUILDS_LOG_LIMIT;
    bool has;
    if (!cp_rest_u64_param(req, "logsOffset", &offset, &has) ||
        !cp_rest_u64_param(req, "limit", &limit, &has))
        return;
    if (!has)
        limit = BUILDS_LOG_LIMIT;
    if (limit > BUILDS_LOG_MAX)
        limit = BUILDS_LOG_MAX;
    int min_level = CP_BUILD_DEBUG;
    char lv[16];
    int q = al_http_query_get(req->query, "level", lv, sizeof lv);
    if (q == 0 && lv[0])
        min_level = cp_builds_level(lv);
    if ((q && q != -ENOENT) || min_level < 0) {
        cp_rest_error(req, 400, "query parameter level must be debug, info, warn or error");
        return;
    }
    struct cp_store_build b;
    if (builds__find(cp, req, tid, bid, &b))
        return;
    if (cp_sse_wanted(req)) {
        /* Live: the entries from logsOffset, or after the one a reconnecting client had. */
        uint64_t last;
        int lr = cp_sse_last_event_id(req, &last);
        if (lr < 0 || (lr && last == UINT64_MAX)) {
            cp_store_build_free(&b);
            cp_rest_error(req, 400, "Last-Event-ID must be the id of an entry this stream sent");
            return;
        }
        if (lr)
            offset = last + 1;
        cp_build_stream(cp, req, &b, offset, min_level);
        cp_store_build_free(&b);
        return;
    }
    struct al_error err = {0};
    json_t *entries = json_array();
    int rc = cp_store_build_log_query(cp->store, b.id,
                                      &(struct cp_store_build_log_page){min_level, offset, limit},
                                      builds__collect_entry, entries, &err);
    if (rc) {
        json_decref(entries);
        cp_store_build_free(&b);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    json_t *o = json_object();
    json_object_set_new(o, "templateID", json_string(b.template_id));
    json_object_set_new(o, "buildID", json_string(b.id));
    json_object_set_new(o, "status", json_string(b.status));
    json_object_set_new(o, "logEntries", entries);
    json_object_set_new(o, "logs", json_array());
    struct builds_job *live = builds__live_find(b.id);
    json_t *prog = json_object_get(b.doc, "progress");
    if (live)
        json_object_set_new(o, "progress", builds__progress(live));
    else if (json_is_object(prog))
        json_object_set(o, "progress", prog);
    json_t *reason = json_object_get(b.doc, "reason");
    if (json_is_object(reason)) {
        json_t *r = json_deep_copy(reason);
        json_t *errs = json_array();
        cp_store_build_log_query(cp->store, b.id,
                                 &(struct cp_store_build_log_page){CP_BUILD_ERROR, 0, 20},
                                 builds__collect_entry, errs, NULL);
        json_object_set_new(r, "logEntries", errs);
        json_object_set_new(o, "reason", r);
    }
    cp_store_build_free(&b);
    al_http_reply_json(req, 200, o);
}

/* ---- GET /templates, GET /templates/{id} ------------------------------------------------ */

/* What a template's builds say: the newest build's status, the newest ready one, how many. */
struct builds_summary {
    size_t count;
    char latest_status[12];
    char ready_id[40];
    uint64_t ready_ns;
    json_t *list;  /* TemplateBuild objects, newest first (NULL: not wanted) */
    json_t *ready; /* the newest ready build's airlock fields (builds__build_about) */
};

/* airlock's fields of a build (the SDK ignores them; the console shows them): what it is
 * made from (fromImage or fromTemplate), its steps, the key that started it, and how long it
 * took from its start to its end (durationMs). Nothing for a build never started. */
static void builds__build_about(const struct cp_store_build *b, json_t *o)
{
    json_t *def = json_object_get(b->doc, "definition");
    if (!json_is_object(def))
        return;
    const char *from[] = {"fromImage", "fromTemplate"};
    for (size_t i = 0; i < 2; i++)
        if (json_is_string(json_object_get(def, from[i])))
            json_object_set(o, from[i], json_object_get(def, from[i]));
    json_object_set_new(o, "stepCount",
                        json_integer((json_int_t)json_array_size(json_object_get(def, "steps"))));
    json_t *by = json_object_get(b->doc, "started_by");
    if (json_is_string(by))
        json_object_set(o, "startedBy", by);
    json_t *st = json_object_get(b->doc, "started_ns"),
           *fin = json_object_get(b->doc, "finished_ns");
    if (json_is_integer(st) && json_is_integer(fin) &&
        json_integer_value(fin) >= json_integer_value(st))
        json_object_set_new(
            o, "durationMs",
            json_integer((json_integer_value(fin) - json_integer_value(st)) / 1000000));
}

static json_t *builds__build_json(const struct cp_store_build *b)
{
    json_t *o = json_object();
    json_object_set_new(o, "buildID", json_string(b->id));
    json_object_set_new(o, "status", json_string(b->status));
    json_object_set_new(o, "createdAt", builds__time(b->created_ns));
    json_t *u = json_object_get(b->doc, "updated_ns");
    json_object_set_new(o, "updatedAt",
                        builds__time(u ? (uint64_t)json_integer_value(u) : b->created_ns));
    json_t *f = json_object_get(b->doc, "finished_ns");
    if (f)
        json_object_set_new(o, "finishedAt", builds__time((uint64_t)json_integer_value(f)));
    const char *k[] = {"cpuCount", "memoryMB", "diskSizeMB"};
    for (size_t i = 0; i < 3; i++)
        json_object_set(o, k[i], json_object_get(b->doc, k[i]));
    json_object_set_new(o, "envdVersion", json_string(CP_ENVD_VERSION));
    builds__build_about(b, o);
    return o;
}

static int builds__summarise(const struct cp_store_build *b, void *arg)
{
    struct builds_summary *s = arg;
    if (s->count++ == 0)
        snprintf(s->latest_status, sizeof s->latest_status, "%s", b->status);
    if (!s->ready_id[0] && strcmp(b->status, "ready") == 0) {
        snprintf(s->ready_id, sizeof s->ready_id, "%s", b->id);
        s->ready_ns = b->created_ns;
        s->ready = json_object();
        builds__build_about(b, s->ready);
    }
    if (s->list)
        json_array_append_new(s->list, builds__build_json(b));
    return 0;
}

/* The modification time of dir/template.json (0 if none). */
static uint64_t builds__json_mtime(const char *dir)
{
    char p[4300];
    struct stat st;
    snprintf(p, sizeof p, "%s/template.json", dir);
    if (stat(p, &st) < 0)
        return 0;
    return (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
}

/* The build id of a template that has files but no build recorded: its image digest when it
 * came from a registry, else "". */
static void builds__dir_build_id(const char *dir, char *out, size_t len)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/template.json", dir);
    json_t *t = al_json_load_file(p, NULL);
    const char *digest = json_string_value(json_object_get(json_object_get(t, "image"), "digest"));
    snprintf(out, len, "%s", digest ? digest : "");
    json_decref(t);
}

/* What a template made without the API (a pull) came from: its image's reference and the
 * size of its layers (compressed), from dir/template.json; nothing for the others. */
static void builds__dir_about(const char *dir, json_t *o)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/template.json", dir);
    json_t *t = al_json_load_file(p, NULL);
    json_t *im = json_object_get(t, "image");
    if (json_is_string(json_object_get(im, "reference")))
        json_object_set(o, "fromImage", json_object_get(im, "reference"));
    if (json_is_integer(json_object_get(im, "bytes")))
        json_object_set(o, "imageBytes", json_object_get(im, "bytes"));
    json_decref(t);
}

/* One template as E2B's Template. dir is NULL for a template that has no files yet (none
 * of its builds has succeeded). */
static json_t *builds__template_json(struct cp *cp, const char *id, const char *dir,
                                     uint64_t created_ns)
{
    struct builds_summary s = {0};
    cp_store_build_foreach(cp->store, id, builds__summarise, &s, NULL);
    uint64_t mtime = dir ? builds__json_mtime(dir) : 0;
    char build_id[80] = "";
    if (s.ready_id[0])
        snprintf(build_id, sizeof build_id, "%s", s.ready_id);
    else if (dir)
        builds__dir_build_id(dir, build_id, sizeof build_id);
    json_t *o = json_object();
    json_object_set_new(o, "templateID", json_string(id));
    json_object_set_new(o, "buildID", json_string(build_id));
    json_object_set_new(o, "aliases", json_pack("[s]", id));
    json_object_set_new(o, "names", json_pack("[s]", id));
    json_object_set_new(o, "public", json_false());
    json_object_set_new(o, "buildStatus", json_string(s.count ? s.latest_status : "ready"));
    json_object_set_new(o, "buildCount", json_integer(s.count ? (json_int_t)s.count : 1));
    json_object_set_new(o, "cpuCount", json_integer(cp->cfg.cpu_count));
    json_object_set_new(o, "memoryMB", json_integer((json_int_t)(cp->cfg.memory_bytes >> 20)));
    json_object_set_new(o, "diskSizeMB", json_integer((json_int_t)(cp->cfg.disk_bytes >> 20)));
    json_object_set_new(o, "envdVersion", json_string(CP_ENVD_VERSION));
    json_object_set_new(o, "createdAt", builds__time(created_ns ? created_ns : mtime));
    json_object_set_new(o, "updatedAt",
                        builds__time(s.ready_ns ? s.ready_ns
                                     : mtime    ? mtime
                                                : created_ns));
    json_object_set_new(o, "createdBy", json_null());
    json_object_set_new(o, "lastSpawnedAt", json_null());
    json_object_set_new(o, "spawnCount", json_integer(0));
    /* airlock's: what the version sandboxes get was made from, and its build's time. */
    if (s.ready) {
        const char *k[] = {"fromImage", "fromTemplate", "durationMs"};
        for (size_t i = 0; i < 3; i++)
            if (json_object_get(s.ready, k[i]))
                json_object_set(o, i == 2 ? "buildDurationMs" : k[i],
                                json_object_get(s.ready, k[i]));
        json_decref(s.ready);
    } else if (dir) {
        builds__dir_about(dir, o);
    }
    return o;
}

struct builds_list {
    struct cp *cp;
    json_t *arr;
};

static int builds__list_dir(const char *id, const char *dir, void *arg)
{
    struct builds_list *l = arg;
    uint64_t created = 0;
    json_t *doc = NULL;
    if (cp_store_tpl_load(l->cp->store, id, &created, &doc, NULL) == 0)
        json_decref(doc);
    json_array_append_new(l->arr, builds__template_json(l->cp, id, dir, created));
    return 0;
}

/* Templates of the database that have no files (no build has succeeded yet). */
static int builds__list_stored(const char *id, uint64_t created_ns, const json_t *doc, void *arg)
{
    (void)doc;
    struct builds_list *l = arg;
    char dir[4200];
    if (cp_template_resolve(l->cp, id, dir, sizeof dir, NULL) == 0)
        return 0; /* listed with its files */
    json_array_append_new(l->arr, builds__template_json(l->cp, id, NULL, created_ns));
    return 0;
}

static int builds__by_id(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    return strcmp(json_string_value(json_object_get(x, "templateID")),
                  json_string_value(json_object_get(y, "templateID")));
}

static void builds__list(struct cp *cp, struct al_http_req *req)
{
    struct builds_list l = {cp, json_array()};
    cp_templates_foreach(cp, builds__list_dir, &l);
    cp_store_tpl_foreach(cp->store, builds__list_stored, &l, NULL);
    /* In name order, those with files and those without together. */
    size_t n = json_array_size(l.arr);
    json_t **v = calloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = json_incref(json_array_get(l.arr, i));
    json_t *out = json_array();
    if (v) {
        qsort(v, n, sizeof *v, builds__by_id);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(out, v[i]);
    }
    free(v);
    json_decref(l.arr);
    al_http_reply_json(req, 200, out);
}

/* The template id of the path segment at *pp, or an answered 400. */
static bool builds__id(struct al_http_req *req, const char **pp, char *id, size_t len)
{
    const char *raw = *pp;
    if (!cp_rest_path_part(pp, id, len) || !cp_template_id_valid(id)) {
        cp_rest_error(req, 400,
                      "\"%.64s\" is not a template name (1..64 of a-z, 0-9, '.', '_', '-', "
                      "starting with a letter or digit)",
                      raw);
        return false;
    }
    return true;
}

static void builds__get(struct cp *cp, struct al_http_req *req, const char *id)
{
    char dir[4200];
    struct al_error err = {0};
    bool has_dir = cp_template_resolve(cp, id, dir, sizeof dir, &err) == 0;
    uint64_t created = 0;
    json_t *doc = NULL;
    bool stored = cp_store_tpl_load(cp->store, id, &created, &doc, NULL) == 0;
    json_decref(doc);
    if (!has_dir && !stored) {
        cp_rest_error(req, 404, "%s", al_error_str(&err));
        return;
    }
    if (!has_dir)
        dir[0] = '\0';
    json_t *t = builds__template_json(cp, id, has_dir ? dir : NULL, created);
    struct builds_summary s = {.list = json_array()};
    cp_store_build_foreach(cp->store, id, builds__summarise, &s, NULL);
    json_decref(s.ready);
    if (!s.count && has_dir) {
        /* Files made without the API (a default template, a pull): one build, ready. */
        json_t *b = json_object();
        json_object_set(b, "buildID", json_object_get(t, "buildID"));
        json_object_set_new(b, "status", json_string("ready"));
        json_object_set(b, "createdAt", json_object_get(t, "createdAt"));
        json_object_set(b, "updatedAt", json_object_get(t, "updatedAt"));
        json_object_set(b, "finishedAt", json_object_get(t, "updatedAt"));
        json_object_set(b, "cpuCount", json_object_get(t, "cpuCount"));
        json_object_set(b, "memoryMB", json_object_get(t, "memoryMB"));
        json_object_set(b, "diskSizeMB", json_object_get(t, "diskSizeMB"));
        json_object_set(b, "envdVersion", json_object_get(t, "envdVersion"));
        json_array_append_new(s.list, b);
    }
    json_t *o = json_object();
    const char *keep[] = {"templateID", "aliases",   "names",         "public",     "createdAt",
                          "updatedAt",  "createdBy", "lastSpawnedAt", "spawnCount", NULL};
    for (const char **k = keep; *k; k++)
        json_object_set(o, *k, json_object_get(t, *k));
    json_object_set_new(o, "builds", s.list);
    json_decref(t);
    al_http_reply_json(req, 200, o);
}

/* ---- DELETE /templates/{id} ------------------------------------------------------------- */

static void builds__forget_files(struct cp *cp, const char *id);

static void builds__delete(struct cp *cp, struct al_http_req *req, const char *id)
{
    if (builds__is_default(cp, id)) {
        cp_rest_error(req, 409,
                      "template '%s' is a default template (templates.defaults): airlockd "
                      "needs it and would build it again at its next start",
                      id);
        return;
    }
    /* Every sandbox of the registry counts, paused ones too: they resume on its files. */
    struct builds_users u;
    builds__users(cp, id, &u);
    if (u.n) {
        cp_rest_error(req, 409, "template '%s' is used by %zu sandbox%s (%s%s): kill %s first", id,
                      u.n, u.n == 1 ? "" : "es", u.first, u.n > 1 ? ", ..." : "",
                      u.n == 1 ? "it" : "them");
        return;
    }
    if (builds__refuse_if_building(cp, req, id))
        return;
    char dir[4200], top[4200];
    struct al_error err = {0};
    bool has_dir = cp_template_resolve(cp, id, dir, sizeof dir, &err) == 0;
    uint64_t created;
    json_t *doc = NULL;
    bool stored = cp_store_tpl_load(cp->store, id, &created, &doc, NULL) == 0;
    json_decref(doc);
    if (!has_dir && !stored) {
        cp_rest_error(req, 404, "%s", al_error_str(&err));
        return;
    }
    /* <templates>/<id>: a link to the default version (the versions go below, with the
     * template's doc and so its tags), or a template made without the build API. */
    snprintf(top, sizeof top, "%s/%s", cp->cfg.templates_path, id);
    struct stat st;
    if (lstat(top, &st) == 0 && S_ISLNK(st.st_mode)) {
        if (unlink(top) < 0) {
            cp_rest_error(req, 500, "cannot remove template '%s': %s: %s", id, top,
                          strerror(errno));
            return;
        }
        has_dir = false;
    } else {
        snprintf(dir, sizeof dir, "%s", top);
        has_dir = lstat(top, &st) == 0;
    }
    char gone[4300] = "";
    if (has_dir) {
        /* Renamed first, atomically: from here on no sandbox can start from it (a name
         * starting with '.' is no template), then removed off the event loop. */
        char rnd[CP_ID_LEN + 1];
        cp_sandbox_id_new(rnd);
        snprintf(gone, sizeof gone, "%s/.%s.deleted-%s", cp->cfg.templates_path, id, rnd);
        if (rename(dir, gone) < 0) {
            cp_rest_error(req, 500, "cannot remove template '%s': renaming %s: %s", id, dir,
                          strerror(errno));
            return;
        }
    }
    if (stored && cp_store_tpl_delete(cp->store, id, &err))
        al_warn("template %s: its files are gone but its builds stay in the database: %s", id,
                al_error_str(&err));
    if (gone[0])
        cp_remove_later(cp->loop, gone);
    builds__gc(cp, id);
    builds__forget_files(cp, id);
    al_info("template %s deleted", id);
    al_http_reply(req, 204, NULL, NULL, 0);
}

/* ---- COPY archives: GET /templates/{id}/files/{hash} and the upload it grants ------------ */

/* The SDK asks whether the files of a COPY step (named by its filesHash) are known and, if
 * not, PUTs their tar archive to the URL it is given, with the headers it is given and no
 * API key. So the URL carries a grant instead: a random token for that template and hash,
 * good for one upload within an hour, held in memory only (an airlockd restart forgets
 * them; the SDK asks again at its next build). */
#define BUILDS_GRANTS       64
#define BUILDS_GRANT_NS     (3600ull * 1000000000ull)
#define BUILDS_TOKEN_HEADER "X-Airlock-Upload-Token"

struct builds_grant {
    char tid[72];
    char hash[65];
    char token[CP_TOKEN_LEN + 1];
    uint64_t expires_ns; /* 0: free */
};

static struct builds_grant builds__grants[BUILDS_GRANTS];

/* <state>/cache/files: the archives of COPY steps, named by their template and filesHash. The
 * hash is the SDK's, computed by the client and not checked against the archive, so an archive
 * is only ever used for the template it was uploaded for: one caller cannot plant files under a
 * hash another template's COPY step will ask for. */
static void builds__files_dir(const struct cp *cp, char *out, size_t len)
{
    snprintf(out, len, "%s/cache/files", cp->cfg.state_dir);
}

static void builds__archive_path(const struct cp *cp, const char *tid, const char *hash, char *out,
                                 size_t len)
{
    char dir[4200];
    builds__files_dir(cp, dir, sizeof dir);
    snprintf(out, len, "%s/%s.%s.tar", dir, tid, hash);
}

/* The template's COPY archives go with it, and so do its upload grants: a template made
 * later under the same name starts without files. An upload still being received loses its
 * partial file and fails when it ends. */
static void builds__forget_files(struct cp *cp, const char *id)
{
    for (size_t i = 0; i < BUILDS_GRANTS; i++) {
        struct builds_grant *g = &builds__grants[i];
        if (g->expires_ns && strcmp(g->tid, id) == 0) {
            g->expires_ns = 0;
            sodium_memzero(g->token, sizeof g->token);
        }
    }
    char dir[4200];
    builds__files_dir(cp, dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t n = strlen(id);
    struct dirent *de;
    while ((de = readdir(d))) {
        /* <id>.<64 hex>.tar or <id>.<64 hex>.tar.partial-<random>: exactly this id (another
         * template's name may start with "<id>."). */
        const char *nm = de->d_name, *h = nm + n + 1;
        if (strncmp(nm, id, n) != 0 || nm[n] != '.' || strlen(h) < 68 ||
            strspn(h, "0123456789abcdef") != 64 || strncmp(h + 64, ".tar", 4) != 0 ||
            (h[68] && strncmp(h + 68, ".partial-", 9) != 0))
            continue;
        if (unlinkat(dirfd(d), nm, 0) < 0 && errno != ENOENT)
            al_warn("template %s: cannot remove %s/%s: %s", id, dir, nm, strerror(errno));
    }
    closedir(d);
}

/* A Host header fit to be the authority of the upload URL: what the client itself reached
 * airlockd at (a name or address and a port), nothing that would change the URL's shape. */
static bool builds__host_valid(const char *h)
{
    size_t n = strlen(h);
    if (!n || n > 255)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(h[i] == '.' || h[i] == '-' || h[i] == ':' || h[i] == '[' || h[i] == ']' ||
              h[i] == '_' || (h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'z') ||
              (h[i] >= 'A' && h[i] <= 'Z')))
            return false;
    return true;
}

static void builds__files(struct cp *cp, struct al_http_req *req, const char *id, const char *hash)
{
    if (!builds__hash_valid(hash)) {
        cp_rest_error(req, 400,
                      "\"%.80s\" is not a files hash (the sha256 the SDK computes for a COPY "
                      "step: 64 lowercase hex digits)",
                      hash);
        return;
    }
    uint64_t created;
    json_t *doc = NULL;
    if (cp_store_tpl_load(cp->store, id, &created, &doc, NULL) != 0) {
        cp_rest_error(req, 404,
                      "template '%s' has not been requested (POST /v3/templates first): the "
                      "files of its COPY steps are uploaded for a build of it",
                      id);
        return;
    }
    json_decref(doc);
    char path[4400];
    struct stat st;
    builds__archive_path(cp, id, hash, path, sizeof path);
    /* Present or not, the answer has an upload URL, as E2B's does: the SDK uploads again
     * when the step says forceUpload, and skips the upload otherwise. */
    bool present = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    const char *host = al_http_req_header(req, "Host");
    if (!host || !builds__host_valid(host)) {
        cp_rest_error(req, 400,
                      "the upload URL is made from the Host header, and this request has %s: "
                      "send the host and port airlockd is reached at",
                      host ? "one that is not a host[:port]" : "none");
        return;
    }
    uint64_t now = al_wall_ns();
    struct builds_grant *g = NULL;
    for (size_t i = 0; i < BUILDS_GRANTS && !g; i++) {
        struct builds_grant *c = &builds__grants[i];
        if (c->expires_ns > now && strcmp(c->tid, id) == 0 && strcmp(c->hash, hash) == 0)
            g = c; /* asked again before it was used: the same grant */
    }
    for (size_t i = 0; i < BUILDS_GRANTS && !g; i++) {
        struct builds_grant *c = &builds__grants[i];
        if (c->expires_ns <= now)
            g = c;
    }
    if (!g) {
        g = &builds__grants[0];
        for (size_t i = 1; i < BUILDS_GRANTS; i++)
            if (builds__grants[i].expires_ns < g->expires_ns)
                g = &builds__grants[i]; /* all taken: the one that expires first makes room */
    }
    if (g->expires_ns <= now || strcmp(g->tid, id) != 0 || strcmp(g->hash, hash) != 0) {
        snprintf(g->tid, sizeof g->tid, "%s", id);
        snprintf(g->hash, sizeof g->hash, "%s", hash);
        cp_token_new(g->token);
        g->expires_ns = now + BUILDS_GRANT_NS;
    }
    char url[512];
    snprintf(url, sizeof url, "http://%s/templates/%s/files/%s", host, id, hash);
    al_http_reply_json(req, 200,
                       json_pack("{s:b,s:s,s:{s:s}}", "present", present, "url", url, "headers",
                                 BUILDS_TOKEN_HEADER, g->token));
}

/* One upload on its way: written to <template>.<hash>.tar.partial-<random> as it arrives,
 * renamed to <template>.<hash>.tar once complete, so that a half-sent archive is never taken
 * for the files. */
struct builds_upload {
    struct cp *cp;
    int fd;
    uint64_t bytes, max;
    char tid[72], hash[65];
    char partial[4500], final[4400];
};

static void builds__upload_free(struct builds_upload *u, bool keep)
{
    if (u->fd >= 0)
        close(u->fd);
    if (!keep)
        unlink(u->partial);
    free(u);
}

/* Writes on the loop thread: pieces of at most 64 KiB into a local file, as the blob
 * cache's writes of the pull do; the client's sending paces them. */
static int builds__upload_data(struct al_http_req *req, const char *data, size_t len)
{
    struct builds_upload *u = req->user;
    if (u->bytes + len > u->max) {
        al_warn("template %s: upload of files %s refused: more than %llu bytes", u->tid, u->hash,
                (unsigned long long)u->max);
        cp_rest_error(req, 413,
                      "the archive is over %llu bytes, the most one COPY step may upload "
                      "(templates.max_upload_size): copy fewer files or ask the operator",
                      (unsigned long long)u->max);
        builds__upload_free(u, false);
        return 0;
    }
    while (len) {
        ssize_t n = write(u->fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            al_warn("template %s: writing %s: %s", u->tid, u->partial, strerror(errno));
            cp_rest_error(req, 507, "cannot store the archive: %s", strerror(errno));
            builds__upload_free(u, false);
            return 0;
        }
        data += n;
        len -= (size_t)n;
        u->bytes += (uint64_t)n;
    }
    return 0;
}

static void builds__upload_end(struct al_http_req *req, int err)
{
    struct builds_upload *u = req->user;
    if (err < 0) {
        /* The body ended in error (a malformed chunk, the body deadline) or the client went
         * away. A response this code sent (the 413 of builds__upload_data) ends the callbacks
         * instead, so u is still ours here. */
        al_warn("template %s: upload of files %s ended early: %s", u->tid, u->hash, strerror(-err));
        builds__upload_free(u, false);
        return;
    }
    if (fsync(u->fd) < 0 || rename(u->partial, u->final) < 0) {
        al_warn("template %s: storing %s: %s", u->tid, u->final, strerror(errno));
        cp_rest_error(req, 507, "cannot store the archive: %s", strerror(errno));
        builds__upload_free(u, false);
        return;
    }
    char dir[4200];
    builds__files_dir(u->cp, dir, sizeof dir);
    al_fsync_dir(dir);
    al_info("template %s: files %s uploaded (%llu bytes)", u->tid, u->hash,
            (unsigned long long)u->bytes);
    al_http_reply(req, 200, NULL, NULL, 0);
    builds__upload_free(u, true);
}

bool cp_builds_upload_route(struct cp *cp, struct al_http_req *req)
{
    const char *p = req->path;
    if (strcmp(req->method, "PUT") != 0 || strncmp(p, "/templates/", 11) != 0)
        return false;
    p += 11;
    char id[72], hash[80];
    if (!cp_rest_path_part(&p, id, sizeof id) || strncmp(p, "/files/", 7) != 0)
        return false;
    p += 7;
    if (!cp_rest_path_part(&p, hash, sizeof hash) || *p)
        return false;
    const char *token = al_http_req_header(req, BUILDS_TOKEN_HEADER);
    uint64_t now = al_wall_ns();
    struct builds_grant *g = NULL;
    for (size_t i = 0; token && strlen(token) == CP_TOKEN_LEN && i < BUILDS_GRANTS; i++) {
        struct builds_grant *c = &builds__grants[i];
        if (c->expires_ns > now && strcmp(c->tid, id) == 0 && strcmp(c->hash, hash) == 0 &&
            sodium_memcmp(c->token, token, CP_TOKEN_LEN) == 0)
            g = c;
    }
    if (al_http_req_header_count(req, BUILDS_TOKEN_HEADER) != 1 || !g) {
        cp_rest_error(req, 401,
                      "no valid upload grant for files %.64s of template '%.64s': the URL and "
                      "its " BUILDS_TOKEN_HEADER " header come from GET "
                      "/templates/{id}/files/{hash} and serve one upload within an hour",
                      hash, id);
        return true;
    }
    g->expires_ns = 0; /* used once */
    sodium_memzero(g->token, sizeof g->token);
    uint64_t max = cp->cfg.max_upload_bytes;
    if (req->content_length >= 0 && (uint64_t)req->content_length > max) {
        cp_rest_error(req, 413,
                      "the archive is %lld bytes, over the %llu one COPY step may upload "
                      "(templates.max_upload_size): copy fewer files or ask the operator",
                      (long long)req->content_length, (unsigned long long)max);
        return true;
    }
    struct builds_upload *u = calloc(1, sizeof *u);
    if (!u) {
        cp_rest_error(req, 500, "out of memory");
        return true;
    }
    u->cp = cp;
    u->max = max;
    u->fd = -1;
    snprintf(u->tid, sizeof u->tid, "%s", id);
    snprintf(u->hash, sizeof u->hash, "%s", hash);
    char dir[4200], rnd[CP_ID_LEN + 1];
    builds__files_dir(cp, dir, sizeof dir);
    cp_sandbox_id_new(rnd);
    snprintf(u->partial, sizeof u->partial, "%s/%s.%s.tar.partial-%s", dir, id, hash, rnd);
    builds__archive_path(cp, id, hash, u->final, sizeof u->final);
    if (al_mkdir_p(dir, 0700) < 0 ||
        (u->fd = open(u->partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0) {
        int e = errno;
        al_warn("template %s: cannot store uploads in %s: %s", id, dir, strerror(e));
        cp_rest_error(req, 507, "cannot store the archive: %s", strerror(e));
        free(u);
        return true;
    }
    req->user = u;
    int rc = al_http_req_stream_body(req, builds__upload_data, builds__upload_end);
    if (rc < 0) {
        builds__upload_free(u, false);
        cp_rest_error(req, 500, "cannot read the upload: %s", strerror(-rc));
    }
    return true;
}

/* ---- tags: POST and DELETE /templates/tags, GET /templates/{id}/tags --------------------- */

static json_t *builds__tag_json(const char *tag, const char *bid, uint64_t ns)
{
    return json_pack("{s:s,s:s,s:o}", "tag", tag, "buildID", bid, "createdAt", builds__time(ns));
}

static int builds__by_tag(const void *a, const void *b)
{
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    return strcmp(json_string_value(json_object_get(x, "tag")),
                  json_string_value(json_object_get(y, "tag")));
}

static void builds__tags_get(struct cp *cp, struct al_http_req *req, const char *id)
{
    uint64_t created = 0;
    json_t *doc = NULL;
    bool stored = cp_store_tpl_load(cp->store, id, &created, &doc, NULL) == 0;
    char top[4200];
    struct stat st;
    snprintf(top, sizeof top, "%s/%s", cp->cfg.templates_path, id);
    bool dir = lstat(top, &st) == 0 && S_ISDIR(st.st_mode);
    if (!stored && !dir) {
        struct al_error err = {0};
        char d[4200];
        cp_template_resolve(cp, id, d, sizeof d, &err);
        cp_rest_error(req, 404, "%s", al_error_str(&err));
        return;
    }
    json_t *tags = json_object_get(doc, "tags");
    size_t n = json_object_size(tags) + 1, k = 0;
    json_t **v = calloc(n, sizeof *v);
    if (!v) {
        json_decref(doc);
        cp_rest_error(req, 500, "out of memory");
        return;
    }
    const char *tag;
    json_t *t;
    json_object_foreach(tags, tag, t)
    {
        json_t *ns = json_object_get(t, "created_ns");
        v[k++] = builds__tag_json(tag, json_string_value(json_object_get(t, "build")),
                                  ns ? (uint64_t)json_integer_value(ns) : created);
    }
    if (dir && !json_object_get(tags, CP_TEMPLATE_DEFAULT_TAG)) {
        /* A template made without the build API, or built before tags: its one version is
         * the default one. */
        char bid[80];
        cp_template_json_build(top, bid, sizeof bid);
        if (!bid[0])
            builds__dir_build_id(top, bid, sizeof bid);
        uint64_t m = builds__json_mtime(top);
        v[k++] = builds__tag_json(CP_TEMPLATE_DEFAULT_TAG, bid, m ? m : created);
    }
    qsort(v, k, sizeof *v, builds__by_tag);
    json_t *out = json_array();
    for (size_t i = 0; i < k; i++)
        json_array_append_new(out, v[i]);
    free(v);
    json_decref(doc);
    al_http_reply_json(req, 200, out);
}

/* POST /templates/tags {target: "NAME[:TAG]", tags}: the tags name the build the target
 * names (its default tag without one), moved from wherever they were. */
static void builds__tags_assign(struct cp *cp, struct al_http_req *req, json_t *body)
{
    static const char *const known[] = {"target", "tags", NULL};
    const char *what = "assigning tags";
    struct al_error err = {0};
    const char *target = NULL;
    json_t *given = NULL;
    builds__drop_nulls(body);
    if (al_json_check_keys(body, known, what, &err) ||
        al_json_get_str(body, "target", true, &target, what, &err) ||
        al_json_get_arr(body, "tags", true, &given, what, &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    char id[72], tag[72];
    if (cp_template_ref_split(target, id, sizeof id, tag, sizeof tag)) {
        cp_rest_error(req, 400,
                      "%s: target \"%.64s\" is not NAME or NAME:TAG (a template name and "
                      "optionally one of its tags or build ids)",
                      what, target);
        return;
    }
    json_t *tags = json_array();
    if (builds__tags_add(tags, given, what, &err) || !json_array_size(tags)) {
        cp_rest_error(req, 400, "%s", err.code ? al_error_str(&err) : "assigning tags: no tags");
        json_decref(tags);
        return;
    }
    if (builds__is_default(cp, id)) {
        json_decref(tags);
        cp_rest_error(req, 409,
                      "template '%s' is a default template (templates.defaults): it has one "
                      "version, made by deploy/templates/build",
                      id);
        return;
    }
    char dir[4200], bid[40];
    if (cp_template_resolve_build(cp, target, dir, sizeof dir, bid, sizeof bid, &err)) {
        json_decref(tags);
        cp_rest_error(req, err.code == -ENOENT ? 404 : 400, "%s", al_error_str(&err));
        return;
    }
    if (!bid[0]) {
        json_decref(tags);
        cp_rest_error(req, 409,
                      "template '%s' was not made by a build (airlock template pull, or "
                      "deploy/templates/build): tags name builds; build it with Template.build",
                      id);
        return;
    }
    if (builds__tag(cp, id, tags, bid, &err)) {
        json_decref(tags);
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    builds__gc(cp, id);
    char *list = json_dumps(tags, JSON_COMPACT);
    al_info("template %s: build %s tagged %s", id, bid, list ? list : "");
    free(list);
    al_http_reply_json(req, 201, json_pack("{s:s,s:o}", "buildID", bid, "tags", tags));
}

/* DELETE /templates/tags {name, tags}: the tags go (not the default tag: it moves, with POST);
 * a version no tag names and no sandbox uses goes with them. */
static void builds__tags_remove(struct cp *cp, struct al_http_req *req, json_t *body)
{
    static const char *const known[] = {"name", "tags", NULL};
    const char *what = "removing tags";
    struct al_error err = {0};
    const char *name = NULL;
    json_t *given = NULL;
    builds__drop_nulls(body);
    if (al_json_check_keys(body, known, what, &err) ||
        al_json_get_str(body, "name", true, &name, what, &err) ||
        al_json_get_arr(body, "tags", true, &given, what, &err)) {
        cp_rest_error(req, 400, "%s", al_error_str(&err));
        return;
    }
    if (!cp_template_id_valid(name)) {
        cp_rest_error(req, 400,
                      "%s: \"%.64s\" is not a template name (1..64 of a-z, 0-9, '.', '_', '-', "
                      "starting with a letter or digit)",
                      what, name);
        return;
    }
    json_t *tags = json_array();
    if (builds__tags_add(tags, given, what, &err) || !json_array_size(tags)) {
        cp_rest_error(req, 400, "%s", err.code ? al_error_str(&err) : "removing tags: no tags");
        json_decref(tags);
        return;
    }
    size_t i;
    json_t *v;
    bool deflt = false;
    json_array_foreach(tags, i, v) deflt |=
        strcmp(json_string_value(v), CP_TEMPLATE_DEFAULT_TAG) == 0;
    if (deflt) {
        json_decref(tags);
        cp_rest_error(req, 400,
                      "%s: the tag '" CP_TEMPLATE_DEFAULT_TAG "' (what '%s' alone names) cannot "
                      "be removed: assign it to another build instead",
                      what, name);
        return;
    }
    uint64_t created;
    json_t *doc = NULL;
    int rc = cp_store_tpl_load(cp->store, name, &created, &doc, &err);
    if (rc) {
        json_decref(tags);
        if (rc == -ENOENT)
            cp_rest_error(req, 404,
                          "%s: template '%s' has no tags (it was not built with "
                          "Template.build, or does not exist)",
                          what, name);
        else
            cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    json_t *have = json_object_get(doc, "tags");
    const char *missing = NULL;
    json_array_foreach(tags, i, v) if (!missing && !json_object_get(have, json_string_value(v)))
        missing = json_string_value(v);
    if (missing) {
        cp_rest_error(req, 404, "%s: template '%s' has no tag '%s'; nothing was removed", what,
                      name, missing);
        json_decref(tags);
        json_decref(doc);
        return;
    }
    json_array_foreach(tags, i, v) json_object_del(have, json_string_value(v));
    json_object_set_new(doc, "updated_ns", json_integer((json_int_t)al_wall_ns()));
    rc = cp_store_tpl_save(cp->store, name, created, doc, &err);
    json_decref(doc);
    json_decref(tags);
    if (rc) {
        cp_rest_error(req, 500, "%s", al_error_str(&err));
        return;
    }
    builds__gc(cp, name);
    al_http_reply(req, 204, NULL, NULL, 0);
}

void cp_builds_tags(struct cp *cp, struct al_http_req *req, json_t *body)
{
    if (strcmp(req->method, "POST") == 0)
        builds__tags_assign(cp, req, body);
    else
        builds__tags_remove(cp, req, body);
}

/* ---- routing ---------------------------------------------------------------------------- */

bool cp_builds_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who)
{
    (void)who;
    const char *p = req->path, *m = req->method;
    bool get = strcmp(m, "GET") == 0, del = strcmp(m, "DELETE") == 0;
    if (strcmp(p, "/templates") == 0 && get) {
        builds__list(cp, req);
        return true;
    }
    if (strcmp(p, "/templates/tags") == 0) {
        cp_rest_error(req, 405, "%s is not allowed on %s (POST assigns tags, DELETE removes them)",
                      m, p);
        return true;
    }
    if (strncmp(p, "/templates/", 11) != 0 || strncmp(p, "/templates/aliases/", 19) == 0)
        return false;
    const char *rest = p + 11, *slash = strchr(rest, '/');
    char id[72], bid[40];
    if (!slash) {
        if (!get && !del)
            return false;
        if (builds__id(req, &rest, id, sizeof id)) {
            if (get)
                builds__get(cp, req, id);
            else
                builds__delete(cp, req, id);
        }
        return true;
    }
    const char *q = slash + 1, *s2;
    if (strcmp(q, "tags") == 0) {
        /* /templates/{id}/tags */
        if (!get)
            cp_rest_error(req, 405, "%s is not allowed on %s (GET lists the tags)", m, p);
        else if (builds__id(req, &rest, id, sizeof id))
            builds__tags_get(cp, req, id);
        return true;
    }
    if (get && strncmp(q, "files/", 6) == 0) {
        /* /templates/{id}/files/{hash} */
        const char *h = q + 6;
        char hash[80];
        if (builds__id(req, &rest, id, sizeof id)) {
            if (!cp_rest_path_part(&h, hash, sizeof hash) || *h)
                cp_rest_error(req, 404, "no such endpoint: %s %s", m, p);
            else
                builds__files(cp, req, id, hash);
        }
        return true;
    }
    /* /templates/{id}/builds/{buildID}/status */
    if (!get || strncmp(q, "builds/", 7) != 0 || !(s2 = strchr(q + 7, '/')) ||
        strcmp(s2, "/status") != 0)
        return false;
    if (!builds__id(req, &rest, id, sizeof id))
        return true;
    q += 7;
    if (!cp_rest_path_part(&q, bid, sizeof bid)) {
        cp_rest_error(req, 404, "template '%s' has no build '%.40s'", id, slash + 8);
        return true;
    }
    builds__status(cp, req, id, bid);
    return true;
}
