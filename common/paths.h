/* common/paths: where every daemon and the CLI find each other's files and sockets.
 *
 * One state directory (default /var/lib/airlock; --state-dir DIR or AIRLOCK_STATE_DIR
 * override it) holds everything, so several instances can run side by side:
 *
 *   <state>/airlockd.db          control-plane state (SQLite, WAL)
 *   <state>/run/                 sockets: airlockd.sock egress.sock vault.sock
 *   <state>/audit/               egress audit log (JSON Lines, hash-chained) + keys
 *   <state>/vault/               vault file, key file, vault access log
 *   <state>/sandboxes/<id>/      per-sandbox runtime files (agent socket, vmm socket, logs)
 *   <state>/templates/           built templates
 *   <state>/policies/            policies (airlockd's default policies directory)
 */
#ifndef AIRLOCK_COMMON_PATHS_H
#define AIRLOCK_COMMON_PATHS_H

#include <stddef.h>

#define AL_DEFAULT_STATE_DIR "/var/lib/airlock"

/* The state dir in effect: set explicitly, else $AIRLOCK_STATE_DIR, else the default. */
const char *al_state_dir(void);
void al_set_state_dir(const char *dir);
/* The state dir set explicitly (--state-dir), or NULL: for a CLI reading a configuration
 * file, whose state_dir (and $AIRLOCK_STATE_DIR over it) must win over the default. */
const char *al_state_dir_arg(void);
/* <state>/<rel> into out; returns out, or NULL if it does not fit. */
char *al_state_path(char *out, size_t outlen, const char *rel);

/* Well-known relative paths. */
#define AL_SOCK_AIRLOCKD "run/airlockd.sock"
#define AL_SOCK_EGRESS   "run/egress.sock"
#define AL_SOCK_VAULT    "run/vault.sock"
#define AL_DIR_AUDIT     "audit"
#define AL_DIR_VAULT     "vault"
#define AL_DIR_SANDBOXES "sandboxes"
#define AL_DIR_TEMPLATES "templates"
#define AL_DIR_POLICIES  "policies"

/* The directory of the running executable (/proc/self/exe, symlinks resolved) into out:
 * where the build tree and an installation keep airlock's programs side by side. 0, or
 * -ENAMETOOLONG, or -errno of readlink. */
int al_self_dir(char *out, size_t len);

/* Strips a "--state-dir DIR" / "--state-dir=DIR" pair from argv (anywhere), applying it;
 * returns the new argc. For CLIs. */
int al_take_state_dir_arg(int argc, char **argv);

#endif
