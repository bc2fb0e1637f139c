/* controlplane/templates: see templates.h. */
#include "templates.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "cp.h"
#include "proc.h"

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

/* "base, code-interpreter-v1" into out. */
static void tpl__list(const struct cp *cp, char *out, size_t len)
{
    out[0] = '\0';
    size_t o = 0;
    DIR *d = opendir(cp->cfg.templates_path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) && o + 70 < len) {
            if (e->d_name[0] == '.')
                continue;
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", cp->cfg.templates_path, e->d_name);
            if (!tpl__exists(p))
                continue;
            o += (size_t)snprintf(out + o, len - o, "%s%s", o ? ", " : "", e->d_name);
        }
        closedir(d);
    }
    if (!o)
        snprintf(out, len, "none");
}

int cp_template_resolve(struct cp *cp, const char *id, char *dir, size_t len, struct al_error *err)
{
    if (!cp_template_id_valid(id))
        return al_error_set(err, -EINVAL, "template \"%.64s\" is not a valid template name", id);
    snprintf(dir, len, "%s/%s", cp->cfg.templates_path, id);
    if (tpl__exists(dir))
        return 0;
    /* The test backend runs the agent on the host: it needs no root file system, and takes
     * the default template names as labels. */
    if (cp->backend == &cp_backend_test && tpl__is_default(cp, id))
        return 0;
    char have[1024];
    tpl__list(cp, have, sizeof have);
    return al_error_set(err, -ENOENT,
                        "template '%s' not found (templates available: %s; build "
                        "more with deploy/templates/build)",
                        id, have);
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
    if (cp->backend == &cp_backend_test)
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
        struct cp_spawn s = {.path = builder, .argv = argv, .fds = {-1, 2, 2}, .nfds = 3};
        pid_t pid;
        int rc = cp_proc_spawn(&s, &pid, NULL, err);
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
