/* controlplane/templates/unpack: see unpack.h. */
#include "unpack.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apply.h"
#include "common/buf.h"
#include "common/json.h"
#include "common/log.h"
#include "common/util.h"
#include "controlplane/proc.h"
#include "vmm/jail/idmap.h"

#define UNPACK_OUT_MAX (1u << 20) /* the helper's JSON lines */

/* Reads the helper's output until EOF, for at most timeout_s. */
static int unpack__collect(int fd, int pidfd, uint32_t timeout_s, struct al_buf *out)
{
    uint64_t deadline = al_now_ns() + (uint64_t)timeout_s * 1000000000ull;
    char buf[4096];
    for (;;) {
        uint64_t now = al_now_ns();
        if (now >= deadline) {
            cp_proc_signal(pidfd, SIGKILL);
            return -ETIMEDOUT;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int n = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            continue;
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        if (al_buf_append(out, buf, (size_t)r) < 0) {
            cp_proc_signal(pidfd, SIGKILL);
            return -E2BIG;
        }
    }
}

/* Checks the helper's lines: every layer's diff_id, then its result. */
static int unpack__check(const struct tpl_image *img, const char *data,
                         struct tpl_unpack_result *res, struct al_error *err)
{
    size_t layers = 0;
    bool ok = false;
    const char *p = data;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        json_t *j = json_loadb(p, len, 0, NULL);
        p += len + (nl ? 1 : 0);
        if (!json_is_object(j)) {
            json_decref(j);
            continue;
        }
        const char *result = json_string_value(json_object_get(j, "result"));
        if (result && strcmp(result, "error") == 0) {
            int rc = al_error_set(err, -EPERM, "%s: refused: %s", img->reference,
                                  json_string_value(json_object_get(j, "error"))
                                      ? json_string_value(json_object_get(j, "error"))
                                      : "the unpacker failed");
            json_decref(j);
            return rc;
        }
        if (result && strcmp(result, "ok") == 0) {
            res->entries = (uint64_t)json_integer_value(json_object_get(j, "entries"));
            res->bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
            res->whiteouts = (uint64_t)json_integer_value(json_object_get(j, "whiteouts"));
            res->devices_skipped =
                (uint64_t)json_integer_value(json_object_get(j, "devices_skipped"));
            res->xattrs_skipped =
                (uint64_t)json_integer_value(json_object_get(j, "xattrs_skipped"));
            res->ids_clamped = (uint64_t)json_integer_value(json_object_get(j, "ids_clamped"));
            ok = true;
            json_decref(j);
            continue;
        }
        json_int_t li = json_integer_value(json_object_get(j, "layer"));
        const char *diff = json_string_value(json_object_get(j, "diff_id"));
        if (li < 1 || (size_t)li > img->n_layers || (size_t)li != layers + 1 || !diff) {
            json_decref(j);
            return al_error_set(err, -EPROTO, "%s: the unpacker reported layers out of order",
                                img->reference);
        }
        if (strcmp(diff, img->layers[li - 1].diff_id) != 0) {
            int rc = al_error_set(err, -EBADMSG,
                                  "%s: layer %lld unpacks to the digest %s, but the image config "
                                  "says %s: refused (the layer does not belong to this image)",
                                  img->reference, (long long)li, diff, img->layers[li - 1].diff_id);
            json_decref(j);
            return rc;
        }
        layers++;
        json_decref(j);
    }
    if (!ok || layers != img->n_layers)
        return al_error_set(err, -EPROTO, "%s: the unpacker ended after %zu of %zu layers",
                            img->reference, layers, img->n_layers);
    return 0;
}

/* One run of airlock-unpack: the arguments after its common options, fd 3 (root) and fd 4
 * (fd4: the blob directory, a layer or a COPY's archive), and what names the work in errors. */
struct unpack__job {
    char *const *extra;
    size_t n_extra;
    int root, fd4;
    const char *what;
};

/* What the helper wrote (out: the caller frees it) and its exit status (ws). */
struct unpack__done {
    struct al_buf out;
    int ws;
};

/* Runs job and collects what the helper writes (until it exits or the time bound): 0 with
 * *done filled, or < 0. */
static int unpack__run(const struct tpl_unpack_opts *o, const struct tpl_limits *lim,
                       const struct unpack__job *job, struct unpack__done *done,
                       struct al_error *err)
{
    const char *what = job->what;
    struct al_buf *outb = &done->out;
    int *ws = &done->ws;
    char n_base[16], n_slots[16], n_path[16], n_ratio[16], n_entries[24], n_bytes[24];
    snprintf(n_base, sizeof n_base, "%u", o->uid_base ? o->uid_base : JAIL_ID_BASE_DEFAULT);
    snprintf(n_slots, sizeof n_slots, "%u", o->uid_slots ? o->uid_slots : JAIL_ID_SLOTS_DEFAULT);
    snprintf(n_path, sizeof n_path, "%u", lim->max_path);
    snprintf(n_ratio, sizeof n_ratio, "%u", lim->max_ratio);
    snprintf(n_entries, sizeof n_entries, "%llu", (unsigned long long)lim->max_entries);
    snprintf(n_bytes, sizeof n_bytes, "%llu", (unsigned long long)lim->max_unpacked_bytes);
    char *argv[16 + TPL_MAX_LAYERS];
    size_t n = 0;
    argv[n++] = "airlock-unpack";
    argv[n++] = "--ids-dir";
    argv[n++] = (char *)o->ids_dir;
    argv[n++] = "--uid-base";
    argv[n++] = n_base;
    argv[n++] = "--uid-slots";
    argv[n++] = n_slots;
    argv[n++] = "--max-path";
    argv[n++] = n_path;
    argv[n++] = "--max-ratio";
    argv[n++] = n_ratio;
    argv[n++] = "--max-entries";
    argv[n++] = n_entries;
    argv[n++] = "--max-bytes";
    argv[n++] = n_bytes;
    for (size_t i = 0; i < job->n_extra && n + 1 < sizeof argv / sizeof argv[0]; i++)
        argv[n++] = job->extra[i];
    argv[n] = NULL;
    int pipefd[2], pidfd = -1;
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return al_error_set(err, -errno, "pipe: %s", strerror(errno));
    char *envp[] = {NULL};
    struct al_spawn sp = {
        .path = o->helper,
        .argv = argv,
        .envp = envp,
        .fds = {-1, pipefd[1], STDERR_FILENO, job->root, job->fd4},
        .nfds = 5,
        .new_session = true,
    };
    pid_t pid;
    int rc = al_spawn(&sp, &pid, &pidfd, err);
    close(pipefd[1]);
    if (rc) {
        close(pipefd[0]);
        return rc;
    }
    al_buf_init(outb, UNPACK_OUT_MAX);
    int crc = unpack__collect(pipefd[0], pidfd, lim->timeout_s, outb);
    close(pipefd[0]);
    struct pollfd pp = {pidfd, POLLIN, 0};
    while (poll(&pp, 1, -1) < 0 && errno == EINTR)
        ;
    *ws = -1;
    cp_proc_reap(pidfd, ws);
    close(pidfd);
    if (crc == -ETIMEDOUT)
        rc = al_error_set(err, -ETIMEDOUT, "%s: unpacking took longer than %u s", what,
                          lim->timeout_s);
    else if (crc < 0)
        rc = al_error_set(err, crc, "%s: the unpacker said too much", what);
    if (rc)
        al_buf_free(outb);
    return rc;
}

/* After the helper's result was read: a helper that did not exit 0 fails the work. */
static int unpack__exit_status(int ws, const char *what, struct al_error *err)
{
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
        return 0;
    char how[64];
    cp_proc_describe(ws, how, sizeof how);
    return al_error_set(err, -EIO, "%s: the unpacker %s", what, how);
}

/* What the helper wrote is durable before a template names it. */
static void unpack__sync(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        syncfs(fd);
        close(fd);
    }
}

int tpl_unpack_image(const struct tpl_unpack_opts *o, const struct tpl_image *img,
                     const char *rootfs, struct tpl_unpack_result *res, struct al_error *err)
{
    memset(res, 0, sizeof *res);
    struct tpl_limits lim;
    tpl_limits_resolve(o->limits, &lim);
    if (!img->n_layers)
        return al_error_set(err, -EINVAL, "%s has no layers", img->reference);
    if (mkdir(rootfs, 0755) < 0)
        return al_error_set(err, -errno, "cannot make %s: %s", rootfs, strerror(errno));
    int rc = 0, root = -1, blobs = -1;
    char blobdir[4200];
    snprintf(blobdir, sizeof blobdir, "%s/blobs/sha256", img->cache_dir);
    root = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    blobs = open(blobdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0 || blobs < 0) {
        rc = al_error_set(err, -errno, "cannot open %s: %s", root < 0 ? rootfs : blobdir,
                          strerror(errno));
        goto out;
    }
    char *digests[TPL_MAX_LAYERS];
    for (size_t i = 0; i < img->n_layers; i++)
        digests[i] = (char *)img->layers[i].digest;
    struct unpack__done d;
    if ((rc = unpack__run(
             o, &lim, &(struct unpack__job){digests, img->n_layers, root, blobs, img->reference},
             &d, err)))
        goto out;
    rc = unpack__check(img, d.out.data ? d.out.data : "", res, err);
    if (rc == 0)
        rc = unpack__exit_status(d.ws, img->reference, err);
    al_buf_free(&d.out);
out:
    if (root >= 0)
        close(root);
    if (blobs >= 0)
        close(blobs);
    if (rc) {
        int r = al_rmtree(rootfs);
        if (r)
            al_warn("templates: cannot remove the failed root filesystem %s: %s", rootfs,
                    strerror(-r));
    } else {
        unpack__sync(rootfs);
    }
    return rc;
}

int tpl_unpack_copy(const struct tpl_unpack_opts *o, const char *rootfs, const char *archive,
                    const struct tpl_unpack_copy *c, struct tpl_unpack_copy_result *res,
                    struct al_error *err)
{
    memset(res, 0, sizeof *res);
    struct tpl_limits lim;
    tpl_limits_resolve(o->limits, &lim);
    int root = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0)
        return al_error_set(err, -errno, "cannot open %s: %s", rootfs, strerror(errno));
    int fd = open(archive, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int rc = al_error_set(err, -errno, "cannot open the files' archive %s: %s", archive,
                              strerror(errno));
        close(root);
        return rc;
    }
    char mode[8];
    snprintf(mode, sizeof mode, "%o", c->mode >= 0 ? (unsigned)c->mode : 0u);
    char *extra[] = {"--copy",
                     "--src",
                     (char *)c->src,
                     "--dest",
                     (char *)c->dest,
                     "--owner",
                     (char *)c->owner,
                     "--dest-dir",
                     c->dest_is_dir ? "1" : "0",
                     "--mode",
                     mode};
    size_t n_extra = sizeof extra / sizeof extra[0] - (c->mode >= 0 ? 0 : 2);
    struct unpack__done d;
    int rc = unpack__run(o, &lim, &(struct unpack__job){extra, n_extra, root, fd, "COPY"}, &d, err);
    close(fd);
    close(root);
    if (rc)
        return rc;
    /* One line: the result. */
    json_t *j = json_loads(d.out.data ? d.out.data : "", JSON_DISABLE_EOF_CHECK, NULL);
    const char *result = json_string_value(json_object_get(j, "result"));
    if (result && strcmp(result, "ok") == 0) {
        res->entries = (uint64_t)json_integer_value(json_object_get(j, "entries"));
        res->files = (uint64_t)json_integer_value(json_object_get(j, "files"));
        res->bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
        res->single = json_is_true(json_object_get(j, "single"));
        snprintf(res->where, sizeof res->where, "%s",
                 json_string_value(json_object_get(j, "where"))
                     ? json_string_value(json_object_get(j, "where"))
                     : "");
        rc = unpack__exit_status(d.ws, "COPY", err);
    } else if (result && strcmp(result, "error") == 0) {
        const char *m = json_string_value(json_object_get(j, "error"));
        rc = al_error_set(err, -EPERM, "refused: %s", m ? m : "the unpacker failed");
    } else {
        rc = unpack__exit_status(d.ws, "COPY", err);
        if (!rc)
            rc = al_error_set(err, -EPROTO, "the unpacker gave no result");
    }
    json_decref(j);
    al_buf_free(&d.out);
    if (rc == 0)
        unpack__sync(rootfs);
    return rc;
}

int tpl_unpack_layer(const struct tpl_unpack_opts *o, const char *rootfs, const char *layer,
                     const char *diff_id, struct tpl_unpack_result *res, struct al_error *err)
{
    memset(res, 0, sizeof *res);
    struct tpl_limits lim;
    tpl_limits_resolve(o->limits, &lim);
    struct tpl_image *img = calloc(1, sizeof *img);
    if (!img)
        return al_error_set(err, -ENOMEM, "out of memory");
    snprintf(img->reference, sizeof img->reference, "the step's layer");
    snprintf(img->layers[0].diff_id, sizeof img->layers[0].diff_id, "%s", diff_id);
    img->n_layers = 1;
    int rc = 0, root = open(rootfs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int fd = open(layer, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (root < 0 || fd < 0) {
        rc = al_error_set(err, -errno, "cannot open %s: %s", root < 0 ? rootfs : layer,
                          strerror(errno));
        goto out;
    }
    char *extra[] = {"--layer"};
    struct unpack__done d;
    if ((rc = unpack__run(o, &lim, &(struct unpack__job){extra, 1, root, fd, img->reference}, &d,
                          err)))
        goto out;
    rc = unpack__check(img, d.out.data ? d.out.data : "", res, err);
    if (rc == 0)
        rc = unpack__exit_status(d.ws, img->reference, err);
    al_buf_free(&d.out);
    if (rc == 0)
        unpack__sync(rootfs);
out:
    if (root >= 0)
        close(root);
    if (fd >= 0)
        close(fd);
    free(img);
    return rc;
}
