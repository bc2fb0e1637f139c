/* vmm/kvm/cache: what KVM sandboxes of one template share, built once and cached.
 *
 * Owns the cache directory (spec.kvm.cache_dir, default <state>/kvm):
 *   images/<key>/rootfs.img     a template's root disk image (vmm/kvm/mkrootfs), read-only,
 *                               shared by every sandbox of the template; key = the template
 *                               (its build hash, or a walk of its rootfs), the agent
 *                               directory, airlock-kvm-init, mkrootfs and the free space
 *   images/<key>/info.json
 *   snapshots/<key>/            a template snapshot (vm.state, memory, disk.overlay,
 *                               info.json) taken once the agent answered /health and before
 *                               any POST /init; key = the image, the guest kernel, the VMM
 *                               binary, memory size, vCPUs and the boot command line
 *   <kind>/<key>.lock           flock held while an entry is built (others wait)
 *   <kind>/.tmp-<key>-<pid>     an entry being built; renamed into place when complete, so
 *                               an entry that exists is complete. Leftovers of a crashed
 *                               builder are removed by the next builder and by the sweep.
 * Entries are never modified; a changed input gives a new key. Nothing here is secret (a
 * template snapshot holds no token, identity or user data).
 *
 * Also: moving a directory that a confined VMM wrote (its snapshot) out of its reach without
 * trusting it (kvm_cache_take_dir), and removing a tree without following symlinks.
 */
#ifndef AIRLOCK_VMM_KVM_CACHE_H
#define AIRLOCK_VMM_KVM_CACHE_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define KVM_CACHE_KEY_LEN 16 /* hex characters */

/* Runs a helper (argv[0] is the program) to completion; 0 if it exited 0. */
typedef int (*kvm_cache_run_fn)(void *ctx, char *const argv[], struct al_error *err);

struct kvm_image_req {
    const char *template_dir;
    const json_t *template_json; /* its build.hash, when present, identifies the template */
    const char *agent_dir;
    const char *init_bin; /* airlock-kvm-init */
    const char *mkrootfs;
    uint64_t slack_mib;   /* free space in the image for the sandbox's writes */
    kvm_cache_run_fn run; /* runs mkrootfs */
    void *ctx;            /* run's */
};

/* The image for r: cached, or built now with r->run(r->ctx, [mkrootfs ...]). out: its path. */
int kvm_cache_image(const char *cache, const struct kvm_image_req *r, char *out, size_t outlen,
                    char key[KVM_CACHE_KEY_LEN + 1], struct al_error *err);

/* Where a snapshot maker left a complete snapshot: parent/name, written by owner. */
struct kvm_snap_made {
    char parent[PATH_MAX];
    char name[128];
    uid_t owner;
};

struct kvm_snap_req {
    const char *image_key;
    const char *image;
    const char *kernel;
    const char *vmm; /* the VMM binary (its build is part of the key) */
    const char *cmdline;
    uint64_t mem_bytes;
    uint32_t vcpus;
    /* Makes the snapshot: leaves it complete in a directory it chooses and says which in
     * *made; 0 or -errno. */
    int (*make)(void *ctx, struct kvm_snap_made *made, struct al_error *err);
    void *ctx; /* make's */
};

/* The template snapshot for r: cached, or made now with r->make (then this function moves
 * what it made into the cache with kvm_cache_take_dir). out: the snapshot directory. built:
 * whether it was made now. */
int kvm_cache_snapshot(const char *cache, const struct kvm_snap_req *r, char *out, size_t outlen,
                       bool *built, struct al_error *err);

/* Moves parent/name (a snapshot directory written by an untrusted process running as
 * owner) to dest: it must be a directory owned by owner holding only regular files among
 * vm.state, memory, disk.overlay (single links); each becomes root's, mode 0600. dest must
 * not exist. Renamed when on the same file system, else copied (sparse). */
int kvm_cache_take_dir(const char *parent, const char *name, uid_t owner, const char *dest,
                       struct al_error *err);

/* rm -r of path without following symlinks; missing is fine. */
int kvm_cache_rmtree(const char *path);

/* Removes leftovers of crashed builders (.tmp-* whose lock is free). Returns how many. */
int kvm_cache_sweep(const char *cache);

/* The key of a file: realpath, size, mtime, inode, device (a rebuilt file gets a new key). */
int kvm_cache_file_id(const char *path, char *out, size_t outlen);

#endif
