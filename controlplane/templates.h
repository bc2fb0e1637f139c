/* controlplane/templates: the templates airlockd can start sandboxes from.
 *
 * Owns: resolving a template id (as E2B clients send it: "base", "code-interpreter-v1")
 * to its directory (<templates>/<id>/ with rootfs/ and template.json, built by
 * deploy/templates/), making sure the default templates exist at start (missing ones are
 * built with the builder script, whose progress is shown), and a template from a registry's
 * image: the pull with the operator's registries and bounds, audited, and the unpacking
 * (`airlock template pull` and airlockd's builds both use these).
 */
#ifndef AIRLOCK_CP_TEMPLATES_H
#define AIRLOCK_CP_TEMPLATES_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "common/error.h"

struct cp;
struct cp_config;
struct tpl_creds;
struct tpl_image;
struct tpl_pull_opts;
struct tpl_unpack_result;
struct tpl_unpack_copy;
struct tpl_unpack_copy_result;

/* A template id as a client may send it: 1..64 of [a-z0-9._-], starting with a letter or
 * digit. */
bool cp_template_id_valid(const char *id);
/* The tag a template name without one means: the version `Sandbox.create('NAME')` gets. */
#define CP_TEMPLATE_DEFAULT_TAG "default"
/* A tag (E2B's NAME:TAG): 1..64 of [A-Za-z0-9._-], starting with a letter or digit, no "..". */
bool cp_template_tag_valid(const char *tag);
/* "NAME" or "NAME:TAG" into id and tag ("" without one); -EINVAL unless both are valid. */
int cp_template_ref_split(const char *ref, char *id, size_t idlen, char *tag, size_t taglen);
bool cp_template_ref_valid(const char *ref);
/* <templates>/.<id>.v-<bid>: the files of build bid of template id while they are kept (a
 * tag names the build or a sandbox uses it). <templates>/<id> is a link to the version of the
 * default tag, or (a template made without the build API) its one version. */
void cp_template_version_dir(const struct cp *cp, const char *id, const char *bid, char *out,
                             size_t len);
/* The build id dir/template.json names ("" if none: a template made without the build API). */
void cp_template_json_build(const char *dir, char *bid, size_t blen);
/* Resolves "NAME" (its default tag) or "NAME:TAG" (a tag, or a build id whose files are
 * kept) to the version's directory, and bid (if not NULL) to its build ("" for a template
 * made without the build API). -ENOENT, with a message naming what exists, if none. */
int cp_template_resolve_build(struct cp *cp, const char *ref, char *dir, size_t len, char *bid,
                              size_t blen, struct al_error *err);
int cp_template_resolve(struct cp *cp, const char *ref, char *dir, size_t len,
                        struct al_error *err);
/* Calls fn for every template of the templates directory (a directory with rootfs/ and
 * template.json), in name order, until fn returns non-zero; returns that value or 0. */
int cp_templates_foreach(const struct cp *cp, int (*fn)(const char *id, const char *dir, void *arg),
                         void *arg);
/* Pulls o->reference into the blob cache with o's creds, requested_by, concurrency and
 * progress, and the configuration's registries, CA, bounds and cache (what o says of those
 * is not used), and writes the pull's audit record (<state>/audit/templates-*.jsonl).
 * Blocking: a CLI or a worker thread. tpl_image_free img afterwards, also after a failure. */
int cp_template_pull(const struct cp_config *cfg, const struct tpl_pull_opts *o,
                     struct tpl_image *img, struct al_error *err);
/* Unpacks a pulled image into dir/rootfs (dir exists, rootfs does not) with airlock-unpack;
 * returns the template.json of template name (what the image says, its reference as the
 * description; a new reference), or NULL with err. Nothing half-made stays in dir on
 * failure. Blocking. */
json_t *cp_template_unpack(const struct cp_config *cfg, const char *name,
                           const struct tpl_image *img, const char *dir,
                           struct tpl_unpack_result *ur, struct al_error *err);
/* Applies a COPY step's archive (the SDK's upload) to dir/rootfs with airlock-unpack
 * --copy (controlplane/templates/copy.h). Blocking. */
int cp_template_copy(const struct cp_config *cfg, const char *dir, const char *archive,
                     const struct tpl_unpack_copy *c, struct tpl_unpack_copy_result *res,
                     struct al_error *err);
/* Applies one layer (a RUN step's changes, templates/layerdiff.h; diff_id its sha256) to
 * dir/rootfs with airlock-unpack --layer. Blocking. */
int cp_template_layer(const struct cp_config *cfg, const char *dir, const char *layer,
                      const char *diff_id, struct tpl_unpack_result *res, struct al_error *err);
/* Makes dst_dir/rootfs (dst_dir exists, rootfs does not) hold the files of src_dir/rootfs:
 * directories made anew with their owners, modes and times, every other entry hard-linked
 * (the files are shared: a template's root is never written once built). Links are never
 * followed. Nothing half-made stays on failure. Blocking. */
int cp_template_link_copy(const char *src_dir, const char *dst_dir, struct al_error *err);
/* Writes t as dir/template.json, atomically. */
int cp_template_write_json(const char *dir, const json_t *t, struct al_error *err);
/* Checks the default templates and builds missing ones (blocking; at start). */
int cp_templates_ensure(struct cp *cp, struct al_error *err);

#endif
