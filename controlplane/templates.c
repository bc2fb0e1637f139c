/* controlplane/templates: see templates.h. */
#include "templates.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/auditlog.h"
#include "common/json.h"
#include "common/log.h"
#include "common/paths.h"
#include "common/util.h"
#include "cp.h"
#include "proc.h"
#include "store.h"
#include "templates/unpack.h"

bool cp_template_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 64)
        return false;
    if (!((id[0] >= 'a' && id[0] <= 'z') || (id[0] >= '0' && id[0] <= '9')))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return strstr(id, "..") == NULL;
}

static bool tpl__exists(const char *dir)
{
    char p[4200];
    struct stat st;
    snprintf(p, sizeof p, "%s/template.json", dir);
    if (stat(p, &st) < 0 || !S_ISREG(st.st_mode))
        return false;
    snprintf(p, sizeof p, "%s/rootfs", dir);
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool tpl__is_default(const struct cp *cp, const char *id)
{
    for (size_t i = 0; i < cp->cfg.default_templates.n; i++)
        if (strcmp(cp->cfg.default_templates.v[i], id) == 0)
            return true;
    return false;
}

int cp_templates_foreach(const struct cp *cp, int (*fn)(const char *id, const char *dir, void *arg),
                         void *arg)
{
    struct dirent **names = NULL;
    int n = scandir(cp->cfg.templates_path, &names, NULL, alphasort);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *id = names[i]->d_name;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", cp->cfg.templates_path, id);
        /* Names that are not template ids are half-made ones (".NAME...") or not ours. */
        if (!rc && cp_template_id_valid(id) && tpl__exists(dir))
            rc = fn(id, dir, arg);
        free(names[i]);
    }
    free(names);
    return rc;
}

struct tpl__names {
    char *out;
    size_t len, o;
};

static int tpl__name(const char *id, const char *dir, void *arg)
{
    (void)dir;
    struct tpl__names *x = arg;
    if (x->o + 70 >= x->len)
        return 1;
    x->o += (size_t)snprintf(x->out + x->o, x->len - x->o, "%s%s", x->o ? ", " : "", id);
    return 0;
}

/* "base, code-interpreter-v1" into out. */
static void tpl__list(const struct cp *cp, char *out, size_t len)
{
    out[0] = '\0';
    struct tpl__names x = {out, len, 0};
    cp_templates_foreach(cp, tpl__name, &x);
    if (!x.o)
        snprintf(out, len, "none");
}

bool cp_template_tag_valid(const char *tag)
{
    size_t n = strlen(tag);
    if (n == 0 || n > 64)
        return false;
    if (!((tag[0] >= 'a' && tag[0] <= 'z') || (tag[0] >= 'A' && tag[0] <= 'Z') ||
          (tag[0] >= '0' && tag[0] <= '9')))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = tag[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return strstr(tag, "..") == NULL;
}

int cp_template_ref_split(const char *ref, char *id, size_t idlen, char *tag, size_t taglen)
{
    const char *colon = strchr(ref, ':');
    size_t n = colon ? (size_t)(colon - ref) : strlen(ref);
    if (n >= idlen || (colon && strlen(colon + 1) >= taglen))
        return -EINVAL;
    memcpy(id, ref, n);
    id[n] = '\0';
    snprintf(tag, taglen, "%s", colon ? colon + 1 : "");
    if (!cp_template_id_valid(id) || (colon && !cp_template_tag_valid(tag)))
        return -EINVAL;
    return 0;
}

bool cp_template_ref_valid(const char *ref)
{
    char id[72], tag[72];
    return cp_template_ref_split(ref, id, sizeof id, tag, sizeof tag) == 0;
}

void cp_template_version_dir(const struct cp *cp, const char *id, const char *bid, char *out,
                             size_t len)
{
    snprintf(out, len, "%s/.%s.v-%s", cp->cfg.templates_path, id, bid);
}

/* A build id as the API makes them (a UUID: 36 of hex digits and '-'). */
static bool tpl__is_build_id(const char *s)
{
    return strlen(s) == 36 && strspn(s, "0123456789abcdef-") == 36;
}

void cp_template_json_build(const char *dir, char *bid, size_t blen)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/template.json", dir);
    json_t *t = al_json_load_file(p, NULL);
    const char *b = json_string_value(json_object_get(json_object_get(t, "build"), "id"));
    snprintf(bid, blen, "%s", b ? b : "");
    json_decref(t);
}

/* "default, v1" of a template's stored tags into out ("none" if it has none). */
static void tpl__tag_list(const json_t *tags, char *out, size_t len)
{
    size_t o = 0;
    const char *k;
    json_t *v;
    out[0] = '\0';
    json_object_foreach((json_t *)tags, k, v)
    {
        int w = snprintf(out + o, len - o, "%s%s", o ? ", " : "", k);
        if (w < 0 || (size_t)w >= len - o)
            break;
        o += (size_t)w;
    }
    if (!o)
        snprintf(out, len, "none");
}

int cp_template_resolve_build(struct cp *cp, const char *ref, char *dir, size_t len, char *bid,
                              size_t blen, struct al_error *err)
{
    char id[72], tag[72], b[40] = "";
    if (cp_template_ref_split(ref, id, sizeof id, tag, sizeof tag))
        return al_error_set(err, -EINVAL,
                            "template \"%.64s\" is not a valid template name (NAME or NAME:TAG)",
                            ref);
    if (bid)
        bid[0] = '\0';
    bool deflt = !tag[0] || strcmp(tag, CP_TEMPLATE_DEFAULT_TAG) == 0;
    if (deflt) {
        /* <templates>/<id>: the default tag's version (a link to it), or a template made
         * without the build API (a directory). */
        char link[4300], target[300];
        snprintf(dir, len, "%s/%s", cp->cfg.templates_path, id);
        ssize_t n = readlink(dir, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            char pre[80];
            snprintf(pre, sizeof pre, ".%s.v-", id);
            if (strncmp(target, pre, strlen(pre)) == 0 && !strchr(target, '/')) {
                snprintf(b, sizeof b, "%s", target + strlen(pre));
                snprintf(link, sizeof link, "%s/%s", cp->cfg.templates_path, target);
                snprintf(dir, len, "%s", link);
            }
        } else if (tpl__exists(dir)) {
            cp_template_json_build(dir, b, sizeof b);
        }
        if (tpl__exists(dir)) {
            if (bid)
                snprintf(bid, blen, "%s", b);
            return 0;
        }
        /* The test backend runs the agent on the host: it needs no root file system, and
         * takes the default template names as labels. A build definition is checked with no
         * backend chosen (the fuzz target's cp has none): that is not the test backend. */
        if (!tag[0] && cp->backend && cp->backend->host_process && tpl__is_default(cp, id))
            return 0;
    }
    uint64_t created;
    json_t *doc = NULL;
    json_t *tags = NULL;
    if (cp->store && cp_store_tpl_load(cp->store, id, &created, &doc, NULL) == 0)
        tags = json_object_get(doc, "tags");
    if (tag[0]) {
        const char *tb = json_string_value(json_object_get(json_object_get(tags, tag), "build"));
        if (tb || tpl__is_build_id(tag)) {
            snprintf(b, sizeof b, "%s", tb ? tb : tag);
            cp_template_version_dir(cp, id, b, dir, len);
            if (tpl__exists(dir)) {
                if (bid)
                    snprintf(bid, blen, "%s", b);
                json_decref(doc);
                return 0;
            }
            /* A template installed before versions were kept: its one version. */
            char cur[4200], cb[40];
            snprintf(cur, sizeof cur, "%s/%s", cp->cfg.templates_path, id);
            cp_template_json_build(cur, cb, sizeof cb);
            if (tpl__exists(cur) && strcmp(cb, b) == 0) {
                snprintf(dir, len, "%s", cur);
                if (bid)
                    snprintf(bid, blen, "%s", b);
                json_decref(doc);
                return 0;
            }
            if (!tb) {
                json_decref(doc);
                return al_error_set(err, -ENOENT,
                                    "template '%s' has no tag '%s', and no kept version of a "
                                    "build '%s' (a build's files are kept while a tag names it "
                                    "or a sandbox uses them)",
                                    id, tag, tag);
            }
        }
        if (doc) {
            char have[1024];
            tpl__tag_list(tags, have, sizeof have);
            json_decref(doc);
            return al_error_set(err, -ENOENT, "template '%s' has no tag '%s' (its tags: %s)", id,
                                tag, have);
        }
    } else if (doc) {
        char have[1024];
        tpl__tag_list(tags, have, sizeof have);
        json_decref(doc);
        return al_error_set(err, -ENOENT,
                            "template '%s' has no version tagged '" CP_TEMPLATE_DEFAULT_TAG
                            "' (its tags: %s): name one as '%s:TAG'",
                            id, have, id);
    }
    json_decref(doc);
    char have[1024];
    tpl__list(cp, have, sizeof have);
    return al_error_set(err, -ENOENT,
                        "template '%s' not found (templates available: %s; build "
                        "more with deploy/templates/build)",
                        id, have);
}

int cp_template_resolve(struct cp *cp, const char *ref, char *dir, size_t len, struct al_error *err)
{
    return cp_template_resolve_build(cp, ref, dir, len, NULL, 0, err);
}

/* The builder script: templates.builder, else deploy/templates/build of the source tree
 * (bin_path is <tree>/build-x/bin), else the installed copy. */
static int tpl__builder(const struct cp *cp, char *out, size_t len)
{
    if (cp->cfg.template_builder && cp->cfg.template_builder[0]) {
        snprintf(out, len, "%s", cp->cfg.template_builder);
        return access(out, X_OK) == 0 ? 0 : -ENOENT;
    }
    const char *cands[] = {"/../../deploy/templates/build", "/../lib/airlock/templates/build",
                           NULL};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        char p[4200];
        if (cands[i])
            snprintf(p, sizeof p, "%s%s", cp->cfg.bin_path, cands[i]);
        else
            snprintf(p, sizeof p, "/usr/lib/airlock/templates/build");
        char real[PATH_MAX];
        if (realpath(p, real) && access(real, X_OK) == 0) {
            snprintf(out, len, "%s", real);
            return 0;
        }
    }
    return -ENOENT;
}

int cp_templates_ensure(struct cp *cp, struct al_error *err)
{
    if (cp->backend->host_process)
        return 0;
    char *missing[64];
    size_t nm = 0;
    for (size_t i = 0; i < cp->cfg.default_templates.n && nm < 64; i++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", cp->cfg.templates_path, cp->cfg.default_templates.v[i]);
        if (!tpl__exists(dir))
            missing[nm++] = cp->cfg.default_templates.v[i];
    }
    if (!nm)
        return 0;
    char builder[4200];
    bool have_builder = tpl__builder(cp, builder, sizeof builder) == 0;
    if (cp->cfg.build_templates == CP_TRI_OFF ||
        (!have_builder && cp->cfg.build_templates == CP_TRI_AUTO)) {
        for (size_t i = 0; i < nm; i++)
            al_warn("template %s is missing from %s%s", missing[i], cp->cfg.templates_path,
                    have_builder ? " (templates.build is off)"
                                 : " and no builder was found (templates.builder)");
        return 0;
    }
    if (!have_builder)
        return al_error_set(err, -ENOENT,
                            "default templates are missing and the builder "
                            "(deploy/templates/build) was not found: set templates.builder");
    char state_arg[4200];
    snprintf(state_arg, sizeof state_arg, "%s", cp->cfg.state_dir);
    fprintf(stderr,
            "\nairlockd: building %zu default template%s (first start; a few minutes "
            "each, cached afterwards):\n",
            nm, nm == 1 ? "" : "s");
    for (size_t i = 0; i < nm; i++) {
        fprintf(stderr, "  [%zu/%zu] %s\n", i + 1, nm, missing[i]);
        char *argv[] = {builder, "--state-dir", state_arg, missing[i], NULL};
        struct al_spawn s = {.path = builder, .argv = argv, .fds = {-1, 2, 2}, .nfds = 3};
        pid_t pid;
        int rc = al_spawn(&s, &pid, NULL, err);
        if (rc)
            return rc;
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            char how[128];
            cp_proc_describe(st, how, sizeof how);
            return al_error_set(err, -EIO,
                                "building template %s failed (%s %s): see the output "
                                "above; airlockd starts once the default templates exist "
                                "(or set templates.build: off)",
                                missing[i], builder, how);
        }
    }
    return 0;
}

/* ---- images from registries ------------------------------------------------------------ */

/* A pull's audit record: the log is opened for it alone (one writer at a time: another pull
 * of this state directory may hold it for a moment), written and synced. */
static int tpl__audit(const json_t *record, void *arg)
{
    const char *dir = arg;
    struct al_auditlog_opts ao = {.dir = dir, .prefix = "templates"};
    struct al_auditlog *log = NULL;
    struct al_error err = {0};
    int rc = -EBUSY;
    for (int i = 0; i < 600 && rc < 0; i++) { /* 60 s */
        rc = al_auditlog_open(&ao, &log, &err);
        if (rc < 0 && !strstr(err.msg, "being written by another process"))
            break;
        if (rc < 0)
            usleep(100 * 1000);
    }
    if (rc < 0) {
        al_error("the templates audit log: %s", err.msg);
        return rc;
    }
    rc = al_auditlog_append(log, record, NULL);
    if (rc == 0)
        rc = al_auditlog_sync(log, 10000);
    int c = al_auditlog_close(log);
    return rc ? rc : c;
}

static void tpl__limits(const struct cp_config *cfg, struct tpl_limits *lim)
{
    *lim = (struct tpl_limits){
        .max_image_bytes = cfg->max_image_bytes,
        .max_unpacked_bytes = cfg->max_unpacked_bytes,
        .max_entries = (uint64_t)cfg->max_image_entries,
        .timeout_s = (uint32_t)(cfg->pull_timeout_ms / 1000),
    };
}

int cp_template_pull(const struct cp_config *cfg, const struct tpl_pull_opts *o,
                     struct tpl_image *img, struct al_error *err)
{
    char audit_dir[4200];
    snprintf(audit_dir, sizeof audit_dir, "%s/%s", cfg->state_dir, AL_DIR_AUDIT);
    struct tpl_registries regs = {
        .allowed = (const char *const *)cfg->registries.v,
        .n_allowed = cfg->registries.n,
        .insecure = (const char *const *)cfg->insecure_registries.v,
        .n_insecure = cfg->insecure_registries.n,
        .ca_file = cfg->registry_ca && cfg->registry_ca[0] ? cfg->registry_ca : NULL,
    };
    struct tpl_limits lim;
    tpl__limits(cfg, &lim);
    struct tpl_pull_opts po = *o;
    po.registries = &regs;
    po.limits = &lim;
    po.cache_dir = cfg->image_cache_path;
    po.audit = tpl__audit;
    po.audit_arg = audit_dir;
    return tpl_oci_pull(&po, img, err);
}

/* The helper's options from the configuration; the strings go into the caller's buffers. */
struct tpl__helper {
    char helper[4200], ids[4200];
    struct tpl_limits lim;
    struct tpl_unpack_opts uo;
};

static void tpl__helper_opts(const struct cp_config *cfg, struct tpl__helper *h)
{
    snprintf(h->helper, sizeof h->helper, "%s/airlock-unpack", cfg->bin_path);
    snprintf(h->ids, sizeof h->ids, "%s/jail/idslots", cfg->state_dir);
    tpl__limits(cfg, &h->lim);
    h->uo = (struct tpl_unpack_opts){
        .helper = h->helper,
        .ids_dir = h->ids,
        .uid_base = (uint32_t)cfg->uid_base,
        .uid_slots = (uint32_t)cfg->uid_slots,
        .limits = &h->lim,
    };
}

json_t *cp_template_unpack(const struct cp_config *cfg, const char *name,
                           const struct tpl_image *img, const char *dir,
                           struct tpl_unpack_result *ur, struct al_error *err)
{
    char rootfs[4300];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    struct tpl__helper h;
    tpl__helper_opts(cfg, &h);
    if (tpl_unpack_image(&h.uo, img, rootfs, ur, err) < 0)
        return NULL;
    json_t *t = tpl_image_template_json(img);
    if (!t) {
        al_error_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    json_object_set_new(t, "name", json_string(name));
    json_object_set_new(t, "description", json_string(img->reference));
    json_object_set_new(t, "agent", json_object());
    return t;
}

int cp_template_copy(const struct cp_config *cfg, const char *dir, const char *archive,
                     const struct tpl_unpack_copy *c, struct tpl_unpack_copy_result *res,
                     struct al_error *err)
{
    char rootfs[4300];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    struct tpl__helper h;
    tpl__helper_opts(cfg, &h);
    return tpl_unpack_copy(&h.uo, rootfs, archive, c, res, err);
}

int cp_template_layer(const struct cp_config *cfg, const char *dir, const char *layer,
                      const char *diff_id, struct tpl_unpack_result *res, struct al_error *err)
{
    char rootfs[4300];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    struct tpl__helper h;
    tpl__helper_opts(cfg, &h);
    return tpl_unpack_layer(&h.uo, rootfs, layer, diff_id, res, err);
}

int cp_template_write_json(const char *dir, const json_t *t, struct al_error *err)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/template.json", dir);
    char *text = json_dumps(t, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    int rc = text ? al_write_file_atomic(p, text, strlen(text), 0644, err)
                  : al_error_set(err, -ENOMEM, "out of memory");
    free(text);
    return rc;
}

/* ---- a template's files for another -------------------------------------------------- */

#define TPL_LINK_DEPTH 512

/* The entries of directory sfd into dfd: directories made anew (owner, mode and times
 * kept), everything else hard-linked (links themselves, never their targets). Nothing is
 * followed: every name is opened relative to its directory with O_NOFOLLOW. */
static int tpl__link_tree(int sfd, int dfd, int depth, struct al_error *err)
{
    if (depth > TPL_LINK_DEPTH)
        return al_error_set(err, -ELOOP, "directories nested deeper than %d", TPL_LINK_DEPTH);
    int fd = dup(sfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return al_error_set(err, -errno, "reading a directory: %s", strerror(errno));
    }
    int rc = 0;
    struct dirent *de;
    while (!rc && (errno = 0, de = readdir(d))) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(sfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = al_error_set(err, -errno, "%s: %s", n, strerror(errno));
            break;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (linkat(sfd, n, dfd, n, 0) < 0)
                rc = al_error_set(err, -errno, "linking %s: %s", n, strerror(errno));
            continue;
        }
        if (mkdirat(dfd, n, 0700) < 0) {
            rc = al_error_set(err, -errno, "making %s: %s", n, strerror(errno));
            break;
        }
        int s2 = openat(sfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int d2 = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s2 < 0 || d2 < 0)
            rc = al_error_set(err, -errno, "opening %s: %s", n, strerror(errno));
        else if (!(rc = tpl__link_tree(s2, d2, depth + 1, err))) {
            struct timespec ts[2] = {st.st_atim, st.st_mtim};
            if (fchown(d2, st.st_uid, st.st_gid) < 0 || fchmod(d2, st.st_mode & 07777) < 0 ||
                futimens(d2, ts) < 0)
                rc = al_error_set(err, -errno, "%s: %s", n, strerror(errno));
        }
        if (s2 >= 0)
            close(s2);
        if (d2 >= 0)
            close(d2);
        if (rc)
            al_error_prefix(err, "%s/", n);
    }
    if (!rc && errno)
        rc = al_error_set(err, -errno, "reading a directory: %s", strerror(errno));
    closedir(d);
    return rc;
}

int cp_template_link_copy(const char *src_dir, const char *dst_dir, struct al_error *err)
{
    char sp[4300], dp[4300];
    snprintf(sp, sizeof sp, "%s/rootfs", src_dir);
    snprintf(dp, sizeof dp, "%s/rootfs", dst_dir);
    int s = open(sp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (s < 0)
        return al_error_set(err, -errno, "opening %s: %s", sp, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(s, &st) < 0 || mkdir(dp, 0700) < 0) {
        rc = al_error_set(err, -errno, "making %s: %s", dp, strerror(errno));
        close(s);
        return rc;
    }
    int d = open(dp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0)
        rc = al_error_set(err, -errno, "opening %s: %s", dp, strerror(errno));
    else if (!(rc = tpl__link_tree(s, d, 0, err))) {
        struct timespec ts[2] = {st.st_atim, st.st_mtim};
        if (fchown(d, st.st_uid, st.st_gid) < 0 || fchmod(d, st.st_mode & 07777) < 0 ||
            futimens(d, ts) < 0)
            rc = al_error_set(err, -errno, "%s: %s", dp, strerror(errno));
    }
    close(s);
    if (d >= 0)
        close(d);
    if (rc) {
        al_error_prefix(err, "linking %s into %s: ", sp, dp);
        al_rmtree(dp);
    }
    return rc;
}
