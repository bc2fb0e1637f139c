/* controlplane/volumes: named persistent volumes, E2B's Volume API.
 *
 * Owns: POST/GET /volumes and GET/DELETE /volumes/{volumeID} (Volume.create, list, getInfo,
 * destroy: the caller's key's volumes, names unique per key), the content API
 * /volumecontent/{volumeID}/file|dir|path (read and write files, list and make directories,
 * stat, change and remove entries, without a sandbox; authenticated by the volume's own
 * token as E2B's SDK sends it, "Authorization: Bearer <token>"), the volume store's
 * directory <state>/volumes and its sweep at start.
 *
 * A volume is an ext4 file system in a sparse image, <state>/volumes/<id>.img, of the size
 * its creation asked for ("sizeMB", up to volumes.max_size) or volumes.size: that size is
 * its quota, enforced by the kernel for every writer (the
 * content API here, a sandbox's processes through a mount of it), and what a KVM guest could
 * take as a block device. It is attached to a loop device and mounted at
 * <state>/volumes/<id> (nosuid, nodev) when first used after airlockd's or the host's start,
 * and stays mounted while it exists. Its row in the store's volumes table is written once
 * its image is complete: an image without a row is incomplete or deleted and goes at the
 * next start. The directory is encrypted at rest by its file system where it can be
 * (atrest.h, at start), so the images reach the disk encrypted.
 *
 * Every path the content API is given is resolved inside the volume's mount with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), and the last component
 * is never followed when it is changed or removed: a symbolic link a sandbox left in the
 * volume ("/etc" -> "../../../../etc", "/x" -> "/proc/self/root") resolves inside the volume
 * or not at all, never on the host.
 */
#ifndef AIRLOCK_CONTROLPLANE_VOLUMES_H
#define AIRLOCK_CONTROLPLANE_VOLUMES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct cp;
struct cp_principal;
struct al_http_req;

#define CP_VOL_PREFIX "vol_"

/* 1..63 of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit. */
bool cp_volume_name_valid(const char *name);

/* A path of the content API ("/a/b", "a/b", "/" for the root) as the relative path it is
 * resolved by ("a/b", "." for the root) into out. -EINVAL (err says why) for an empty path,
 * a NUL byte or a component longer than 255 bytes. */
int cp_volume_path_norm(const char *path, char *out, size_t len, struct al_error *err);

/* /volumes and /volumes/{id} (after authentication); false if the path is not one. */
bool cp_volumes_route(struct cp *cp, struct al_http_req *req, const struct cp_principal *who);
/* /volumecontent/{id}/... (before API-key authentication: the volume's token is its
 * credential); false if the path is not one. */
bool cp_volumes_content_route(struct cp *cp, struct al_http_req *req);

/* E2B's volumeMounts of a creation by key_id (mounts: the request's array) as the record
 * keeps them, [{"volumeID", "name", "path"}] into *out (NULL for none or an empty array),
 * each volume mounted on the host. -EINVAL (a 400: err names the entry) for a malformed
 * entry, an unknown volume, a path that is not absolute and normalised, is "/", is inside
 * /proc, /dev, /sys, /tmp or /.airlock, or is given twice, more than CP_VOL_MOUNTS_MAX entries,
 * or a backend without volumes (only the jail backend mounts them); -EIO (500) when a
 * volume cannot be mounted. */
#define CP_VOL_MOUNTS_MAX 8
int cp_volumes_resolve(struct cp *cp, const json_t *mounts, const char *key_id, json_t **out,
                       struct al_error *err);
/* E2B's SandboxVolumeMount list of a sandbox's record ([{"name", "path"}]). */
json_t *cp_volumes_mounts_json(const json_t *rec_volumes);

/* Audit records (docs/audit.md, "volume") of the volumes sandbox sb mounts: "mount" before
 * it starts (mounted true), "unmount" when it is gone; key_id the API key that asked (NULL for
 * none), cause (may be NULL) why it went. Written by airlock-egress's audit log, as the
 * records of Volume.create ("create") and Volume.destroy ("delete"), which answer only once
 * theirs is on disk. done(arg, rc, msg) runs (perhaps before this returns) once every record
 * is on disk or none is to be written (rc 0: no volumes, or no airlock-egress to write them,
 * logged), or once they are all answered and one was not written (rc < 0, msg why). */
typedef void (*cp_volumes_audited_cb)(void *arg, int rc, const char *msg);
struct cp_sandbox;
void cp_volumes_audit_mounts(struct cp *cp, const struct cp_sandbox *sb, bool mounted,
                             const char *key_id, const char *cause, cp_volumes_audited_cb done,
                             void *arg);

/* Removes what no row names from <state>/volumes (an image being made or deleted when
 * airlockd stopped), at start. */
void cp_volumes_sweep(struct cp *cp);

/* The host directory where volume id (a row of the store) is mounted, mounting it first if
 * it is not (a loop device and ext4 mount). 0, or -errno with err saying why. */
int cp_volume_mount(struct cp *cp, const char *id, char *dir, size_t len, struct al_error *err);

#endif
