/* controlplane/atrest: encryption at rest of a directory of airlockd's state by its file
 * system (Linux fscrypt, a v2 policy: AES-256-XTS for contents, AES-256-CTS for names).
 *
 * Owns: making a directory encrypted when it is new (a policy set while it is empty, so that
 * everything made in it afterwards is encrypted), unlocking an encrypted one at start (its
 * key added to the file system's keyring), the key kept in a file outside that directory
 * (64 random bytes, 0600; common/util.h al_key_file), and the decision of what to do where
 * the file system cannot encrypt (auto: go on unencrypted and say why; on: refuse; off:
 * never encrypt a new directory).
 *
 * Why the file system and not our own cipher: the snapshot store is written and read by
 * airlock-vmm with ordinary file operations (copies of a sandbox's writable layer with
 * owners, modes, links, holes and whiteouts); fscrypt encrypts all of it, names included,
 * without a second copy of that code. The key is the kernel's once added: every process of the host that may read the
 * directory reads clear files until the file system is unmounted or the host restarts.
 * What it protects is the directory away from this host's running kernel: a disk or image
 * taken offline, a backup or copy of the directory without the key file.
 */
#ifndef AIRLOCK_CP_ATREST_H
#define AIRLOCK_CP_ATREST_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define CP_ATREST_KEY_LEN 64

struct cp_atrest_opts {
    const char *dir;      /* made 0700 if missing */
    const char *key_path; /* its key's file, outside dir */
    int mode;             /* enum cp_tri: CP_TRI_AUTO, CP_TRI_ON, CP_TRI_OFF */
    const char *setting;  /* the configuration key of mode, for the errors */
};
/* o->dir encrypted with the key in o->key_path, per o->mode. 1: it is encrypted and unlocked
 * (a new key is made for a new directory; an encrypted one needs its key, whatever the
 * mode). 0: it is not encrypted, why in why (auto and off). < 0 with err: on and the file
 * system cannot, an encrypted directory whose key is missing or another, or an I/O error;
 * nothing changed. */
int cp_atrest_open(const struct cp_atrest_opts *o, char *why, size_t why_len, struct al_error *err);

#endif
