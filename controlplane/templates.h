/* controlplane/templates: the templates airlockd can start sandboxes from.
 *
 * Owns: resolving a template id (as E2B clients send it: "base", "code-interpreter-v1")
 * to its directory (<templates>/<id>/ with rootfs/ and template.json, built by
 * deploy/templates/), and making sure the default templates exist at start: missing ones
 * are built with the builder script, whose progress is shown.
 */
#ifndef AIRLOCK_CP_TEMPLATES_H
#define AIRLOCK_CP_TEMPLATES_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct cp;

/* A template id as a client may send it: 1..64 of [a-z0-9._-], starting with a letter or
 * digit. */
bool cp_template_id_valid(const char *id);
/* Resolves id to its directory. -ENOENT (with a message listing what exists) if none. */
int cp_template_resolve(struct cp *cp, const char *id, char *dir, size_t len, struct al_error *err);
/* Checks the default templates and builds missing ones (blocking; at start). */
int cp_templates_ensure(struct cp *cp, struct al_error *err);

#endif
