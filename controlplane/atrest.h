/* controlplane/atrest: encryption at rest of the directories of airlockd's state that hold
 * what sandboxes wrote, by their file system (Linux fscrypt, a v2 policy: AES-256-XTS for
 * contents, AES-256-CTS for names).
 *
 * Owns: making a directory encrypted when it is new (a policy set while it is empty, so that
 * everything made in it afterwards is encrypted), unlocking an encrypted one at start (its
 * key added to the file system's keyring), the key kept in a file outside those directories
 * (64 random bytes, 0600; common/util.h al_key_file), the decision of what to do where the
 * file system cannot encrypt (auto: go on unencrypted and say why; on: refuse; off: never
 * encrypt a new directory), and which directories of the state those are, with their lines
 * of the start banner (at_rest.encrypt, at_rest.key_file): <state>/snapshots (snapshots),
 * <state>/paused (the files of sandboxes paused without their memory) and <state>/volumes
 * (each volume's ext4 image, so its files and their names too).
 *
 * Why the file system and not our own cipher: the snapshot store and the paused files are
 * written and read by airlock-vmm with ordinary file operations (copies of a sandbox's
 * writable layer with owners, modes, links, holes and whiteouts), and a volume is an image
 * on a loop device that sandboxes and the content API write through the kernel; fscrypt
 * encrypts all of it, names included, without a second copy of that code. The key is the
 * kernel's once added: every process of the host that may read the directory reads clear
 * files until the file system is unmounted or the host restarts. What it protects is the
 * directory away from this host's running kernel: a disk or image taken offline, a backup
 * or copy of the directory without the key file.
 *
 * Why one key for the three: they are one kind of data (files a sandbox wrote, which move
 * between them: a paused sandbox's files become a sandbox's again, a snapshot's a new
 * sandbox's) under one protection, so one mode and one key file decide it: one secret to
 * keep out of the backups and to restore, and what unlocks one unlocks the others anyway
 * (the same root on the same host). Each directory still gets its own policy, set and
 * checked on its own: they may be on different file systems, and one that cannot encrypt
 * (or holds files from before) is said by its own banner line.
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

/* One of the directories cp_atrest_open_all serves. */
struct cp_atrest_dir {
    const char *dir; /* an absolute path */
    int encrypted;   /* out: 1 encrypted and unlocked, 0 not (why says why) */
    char why[1024];
};
/* Each of dirs[0..n) opened as cp_atrest_open does, with the one key of key_path (made with
 * the first directory that is encrypted new) and the one mode: 0 when all could go on
 * (each dir's encrypted and why say how), < 0 with err naming the directory at the first
 * that cannot (the ones before it stay as they are opened: encrypted while empty does no
 * harm). key_path must be absolute and inside none of them (-EINVAL, before anything). */
int cp_atrest_open_all(struct cp_atrest_dir *dirs, size_t n, const char *key_path, int mode,
                       const char *setting, struct al_error *err);

struct cp;
/* At start (blocking), before anything is written into them: <state>/snapshots,
 * <state>/paused and <state>/volumes made, encrypted or unlocked per at_rest.encrypt with
 * at_rest.key_file, each one's state on a banner line and a warning for one left
 * unencrypted under auto. < 0 with err: airlockd must not start. */
int cp_atrest_open_state(struct cp *cp, struct al_error *err);

#endif
