/* controlplane/templates/oci: images from OCI/Docker registries (the distribution API), the
 * first layer of custom templates: a template builder calls tpl_oci_pull to have an image's
 * blobs in the local cache, then tpl_unpack_image (unpack.h) to make its root filesystem,
 * then tpl_image_template_json for what goes into its template.json.
 *
 * Owns: image references (Docker's short names included), which registries may be pulled
 * from (the operator's list; nothing else), the pull itself (HTTPS, or HTTP for registries
 * listed as insecure; bearer-token challenges and basic auth with the request's credentials;
 * manifest lists and OCI indexes resolved to linux/amd64; Docker v2 schema 2 and OCI
 * manifests; every blob's sha256 checked while it streams; redirects; resumed downloads),
 * the content-addressed blob cache shared by every pull (cache.c), every size bound, and the
 * audit record of each pull.
 *
 * Credentials are the user's: they live in sodium memory (struct tpl_creds), are sent only to
 * the registry and its token service (never to a redirect's other host), are never stored,
 * logged or put in an error, and the caller wipes them with tpl_creds_free after the pull.
 *
 * Threading: tpl_oci_pull blocks (it runs a private event loop, like al_http_call): call it
 * from a thread that is not airlockd's loop (uv_queue_work) or from a CLI. Pulls may run in
 * parallel in threads and processes; the cache makes concurrent pulls of one blob safe (one
 * downloads, the others wait for it and use the result).
 */
#ifndef AIRLOCK_CP_TEMPLATES_OCI_H
#define AIRLOCK_CP_TEMPLATES_OCI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/auditlog.h"
#include "common/error.h"

#define TPL_DIGEST_LEN 71 /* "sha256:" + 64 hex */
#define TPL_REF_MAX    512
#define TPL_DOCKER_HUB "docker.io"
#define TPL_MAX_LAYERS 128

/* ---- references ------------------------------------------------------------------------ */
struct tpl_ref {
    char registry[256];   /* as the user names it: "docker.io", "ghcr.io", "reg.test:5000" */
    char repository[256]; /* "library/busybox" */
    char tag[129];        /* "latest" when neither tag nor digest is given; "" with a digest
                              only */
    char digest[TPL_DIGEST_LEN + 1]; /* "sha256:<hex>" or "" */
};
/* Parses a reference as Docker does: "busybox" is docker.io/library/busybox:latest,
 * "user/app" is docker.io/user/app, a first component with a '.' or ':' or "localhost" is a
 * registry ("reg.test:5000/team/app:1.2"), "@sha256:<hex>" pins a digest (a tag may stand
 * before it; the digest wins). Repositories are lowercase [a-z0-9] separated by '.', '_',
 * '__', '-' runs and '/'; tags [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}. */
int tpl_ref_parse(const char *s, struct tpl_ref *out, struct al_error *err);
/* "docker.io/library/busybox:latest", "reg.test:5000/app@sha256:..." (tag and digest when both). */
void tpl_ref_format(const struct tpl_ref *r, char *out, size_t len);
/* Whether s is "sha256:" and 64 lowercase hex digits. */
bool tpl_digest_valid(const char *s);

/* ---- URLs a registry names (a redirect's Location, a Bearer challenge's realm) ---------- */
#define TPL_URL_MAX 4096
struct tpl_url {
    bool tls;
    char target[300];    /* "https://authority": where requests go */
    char authority[264]; /* "host[:port]" as the URL writes it (insecure_registries lists these) */
    char host[258];      /* its host, lowercased, an IPv6 literal in brackets: which host it is */
    char path[TPL_URL_MAX]; /* "/path?query" as sent: "http://h" asks for "/" */
};
/* Parses an absolute http:// or https:// URL (the request-target parser of common/http_head.h
 * reads it: no userinfo, a host and a port as every component reads them), or, with base,
 * also a reference relative to base: "/path?q" on base's authority, "//host/path" with base's
 * scheme. A fragment is dropped (it is never sent). Returns 0, or -EINVAL / -ENAMETOOLONG with
 * a message saying what is wrong. */
int tpl_url_parse(const char *url, const struct tpl_url *base, struct tpl_url *out,
                  struct al_error *err);

/* ---- registries: the operator's configuration ------------------------------------------ */
struct tpl_registries {
    /* Registries that may be pulled from, as references name them ("docker.io", "ghcr.io",
     * "reg.internal:5000"); nothing else. "*" allows any (not recommended). */
    const char *const *allowed;
    size_t n_allowed;
    /* Of those, the ones spoken to over plain HTTP (and whose token service may be HTTP). */
    const char *const *insecure;
    size_t n_insecure;
    const char *ca_file; /* trusted roots for registries; NULL = the system's bundle */
};
/* 0 if ref's registry may be pulled from; -EACCES with a message naming the setting. */
int tpl_registry_check(const struct tpl_registries *r, const char *registry, struct al_error *err);

/* ---- bounds ----------------------------------------------------------------------------- */
struct tpl_limits {
    uint64_t max_manifest_bytes; /* manifest or index; 0 = 4 MiB */
    uint64_t max_config_bytes;   /* image config; 0 = 8 MiB */
    uint64_t max_layer_bytes;    /* one compressed layer; 0 = 8 GiB */
    uint64_t max_image_bytes;    /* all compressed layers; 0 = 16 GiB */
    uint32_t max_layers;         /* 0 = TPL_MAX_LAYERS */
    uint32_t timeout_s;          /* a whole pull; 0 = 3600 */
    /* Unpacking (unpack.h): */
    uint64_t max_unpacked_bytes; /* file data of the whole root filesystem; 0 = 32 GiB */
    uint64_t max_entries;        /* tar entries of all layers; 0 = 1,000,000 */
    uint32_t max_path;           /* bytes of an entry's path or link target; 0 = 4096 */
    uint32_t max_ratio;          /* uncompressed / compressed bytes of a layer; 0 = 200 */
};
/* The limits with every 0 replaced by its default. */
void tpl_limits_resolve(const struct tpl_limits *in, struct tpl_limits *out);

/* ---- credentials ------------------------------------------------------------------------ */
/* A username and password in sodium memory (guarded, locked, wiped on free). */
struct tpl_creds;
/* From E2B's fromImageRegistry object: {"type":"registry","username","password"} and
 * {"type":"gcp","serviceAccountJson"} (basic auth as "_json_key", what Google's registries
 * take). {"type":"aws",...} needs an ECR token exchange this client does not make: -ENOTSUP
 * with a message saying what to send instead. The strings of obj are wiped in place. */
int tpl_creds_from_json(json_t *obj, struct tpl_creds **out, struct al_error *err);
int tpl_creds_new(const char *username, const char *password, struct tpl_creds **out);
void tpl_creds_free(struct tpl_creds *c); /* wipes; NULL is fine */

/* ---- pulling ---------------------------------------------------------------------------- */
enum tpl_compression { TPL_COMP_NONE = 0, TPL_COMP_GZIP, TPL_COMP_ZSTD };

struct tpl_layer {
    char digest[TPL_DIGEST_LEN + 1];  /* of the blob as stored (compressed) */
    char diff_id[TPL_DIGEST_LEN + 1]; /* of the uncompressed tar (from the config) */
    uint64_t size;
    enum tpl_compression compression;
};

struct tpl_image {
    char reference[TPL_REF_MAX];           /* canonical, as pulled */
    char digest[TPL_DIGEST_LEN + 1];       /* the manifest's (for an index: the chosen one) */
    char index_digest[TPL_DIGEST_LEN + 1]; /* the index's, if the reference named one */
    char config_digest[TPL_DIGEST_LEN + 1];
    struct tpl_layer layers[TPL_MAX_LAYERS];
    size_t n_layers;
    uint64_t bytes;        /* compressed size of every layer */
    uint64_t bytes_pulled; /* of which downloaded now (the rest was in the cache) */
    json_t *config;        /* the image config (its "config" object has Env, Cmd, ...) */
    char cache_dir[4096];  /* where the blobs are */
};
void tpl_image_free(struct tpl_image *img); /* the config; the struct is the caller's */

struct tpl_progress {
    const char *phase;    /* "manifest", "layers", "done" */
    uint64_t done, total; /* layer bytes in the cache / of the image */
    uint64_t pulled;      /* of done, the bytes downloaded by this pull (not already cached) */
    size_t layers_done, layers;
};

struct tpl_pull_opts {
    const char *reference;
    const struct tpl_registries *registries; /* required */
    const struct tpl_limits *limits;         /* NULL = defaults */
    const char *cache_dir;                   /* required: <state>/cache/oci */
    const struct tpl_creds *creds;           /* NULL = anonymous */
    /* Required: writes the pull's audit record (one per pull, success or not) through the
     * tree's audit writer; < 0 fails the pull. tpl_audit_to_log appends to an open
     * al_auditlog (arg); a short-lived process opens the log just for the record. */
    int (*audit)(const json_t *record, void *audit_arg);
    void *audit_arg;
    const char *requested_by; /* for the audit record: "api-key:...", "cli:uid 0" */
    unsigned concurrency;     /* layers downloaded at once; 0 = 4 */
    void (*progress)(const struct tpl_progress *p, void *arg); /* may be NULL */
    void *arg;
};
/* Pulls reference into the cache and describes it in *out (zeroed first; tpl_image_free it
 * also after a failure). Errors say what was refused and why (a registry not allowed, a
 * digest mismatch, a manifest over its bound, no linux/amd64 image, a credential refused,
 * ...). The pull is audited whether it succeeds or not; if the audit record cannot be
 * written the pull fails. */
int tpl_oci_pull(const struct tpl_pull_opts *o, struct tpl_image *out, struct al_error *err);

/* An audit function for tpl_pull_opts: appends to the al_auditlog arg. */
int tpl_audit_to_log(const json_t *record, void *log);

/* Path of a cached blob (<cache>/blobs/sha256/<hex>). */
int tpl_cache_blob_path(const char *cache_dir, const char *digest, char *out, size_t len);

/* What the image says about running it, as template.json's fields: "env" (object),
 * "workdir", "user", "cmd" and "entrypoint" (arrays, when set), and "image" (reference,
 * digest, config digest, layers, bytes). New reference. */
json_t *tpl_image_template_json(const struct tpl_image *img);

#endif
