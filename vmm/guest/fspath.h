/* vmm/guest/fspath: how envd turns a path from a request into an absolute path.
 *
 * Owns: the rules (empty -> the default workdir, else the user's home; "~" and "~/x" ->
 * the home; "~other" is refused; relative -> joined to the home, never to the workdir;
 * absolute -> as given), lexical cleaning (Go's filepath.Clean for absolute paths), and
 * the split into parent and base name, and Go's spelling of file modes.
 */
#ifndef AIRLOCK_GUEST_FSPATH_H
#define AIRLOCK_GUEST_FSPATH_H

#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

/* Cleans an absolute path in place: collapses '//', drops '.', resolves '..' lexically
 * (never above '/'), removes a trailing '/'. */
void agent_path_clean(char *path);
/* Resolves as envd does into out (absolute and clean). workdir may be NULL or "". */
int agent_path_resolve(const char *path, const char *home, const char *workdir, char *out,
                       size_t outlen, struct al_error *err);
/* The last element of a clean absolute path ("/" for "/"), as a pointer into path. */
const char *agent_path_base(const char *path);
/* The parent of a clean absolute path into out ("/" for "/x" and "/"). */
void agent_path_dir(const char *path, char *out, size_t outlen);
/* Relative path of child below parent ("a/b"), both clean and absolute; -EINVAL if not below. */
int agent_path_rel(const char *parent, const char *child, char *out, size_t outlen);

/* Go's os.FileMode.String() for a stat mode ("-rw-r--r--", "dtrwxrwxrwx", "Lrwxrwxrwx"). */
void agent_go_mode_string(mode_t mode, char *out, size_t outlen);

#endif
