/* egress/intercept/ca: the per-sandbox certificate authority and its leaf certificates.
 *
 * Owns: creating a sandbox's CA (ECDSA P-256, self-signed, created when the sandbox is
 * registered), whose X.509 name constraints (critical) permit only the DNS subtrees of the
 * names the sandbox's policy intercepts and exclude every IPv4 and IPv6 address, so that
 * the CA is worthless outside its purpose even if its key leaked; keeping its private key
 * in guarded memory; minting leaf certificates per SNI (P-256, short validity, SAN = the
 * name) and caching them per name with a bound.
 *
 * The CA's private key: its DER encoding lives in one sodium_malloc'd block (guard pages,
 * mlock'd, excluded from core dumps), kept PROT_NONE between uses. Signing a leaf (a cache
 * miss) makes it readable under a lock, loads it into a transient mbedtls key, signs, and
 * frees that key (mbedtls wipes its bignums on free) before making the block PROT_NONE
 * again; sodium_free wipes it when the last reference to the CA goes (the sandbox was
 * removed and its last connection closed). The key is never written anywhere: a restarted
 * proxy creates a new CA, and the control plane hands its certificate to the agent again.
 *
 * Leaves: one key pair per name, valid from 1 h before minting (clock skew) for
 * leaf_validity_s, re-minted once half of that has passed; at most max_leaves per CA (least
 * recently used evicted). Leaf keys live in ordinary memory (each can only impersonate one
 * name toward one sandbox that trusts this CA); mbedtls wipes them when freed.
 *
 * Thread safety: a CA is reference-counted and may be used from any thread; the cache has
 * its own lock and minting happens outside it.
 */
#ifndef AIRLOCK_EGRESS_INTERCEPT_CA_H
#define AIRLOCK_EGRESS_INTERCEPT_CA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include "common/error.h"

#define INTERCEPT_CA_MAX_SUBTREES       512
#define INTERCEPT_CA_LEAVES_DEFAULT     128
#define INTERCEPT_CA_VALIDITY_DEFAULT   (90u * 86400u) /* seconds */
#define INTERCEPT_LEAF_VALIDITY_DEFAULT (7u * 86400u)  /* seconds */
/* The subtree a CA permits when its policy intercepts nothing: the reserved TLD
 * "invalid" (RFC 6761), so that the CA can sign for no real name. */
#define INTERCEPT_CA_NOTHING "invalid"

struct intercept_ca;
struct intercept_leaf;

struct intercept_ca_opts {
    const char *sandbox_id;   /* required; shown in the CA's subject */
    const char *const *names; /* host patterns the policy intercepts (canonical, as from
                                     policy_intercepted_names); none: the CA permits nothing */
    size_t n_names;
    uint32_t ca_validity_s;   /* 0 = INTERCEPT_CA_VALIDITY_DEFAULT */
    uint32_t leaf_validity_s; /* 0 = INTERCEPT_LEAF_VALIDITY_DEFAULT; clamped to the CA's */
    size_t max_leaves;        /* 0 = INTERCEPT_CA_LEAVES_DEFAULT */
};

/* Creates a CA. Fails with -EINVAL (err says which pattern) for names that are not host
 * patterns, -ENOMEM, or -EIO for a crypto failure. */
int intercept_ca_new(const struct intercept_ca_opts *o, struct intercept_ca **out,
                     struct al_error *err);
struct intercept_ca *intercept_ca_ref(struct intercept_ca *ca);
void intercept_ca_unref(struct intercept_ca *ca); /* NULL is fine */

/* The certificate the sandbox installs in its trust stores (PEM, NUL-terminated), and the
 * same in DER. Valid as long as the CA. */
const char *intercept_ca_pem(const struct intercept_ca *ca);
const unsigned char *intercept_ca_der(const struct intercept_ca *ca, size_t *len);
/* "sha256:<64 lowercase hex>" of the DER (audit records, the register answer). */
const char *intercept_ca_fingerprint(const struct intercept_ca *ca);
/* The permitted DNS subtrees written into the name constraints. */
size_t intercept_ca_subtrees(const struct intercept_ca *ca, const char *const **out);
/* Whether a canonical name lies inside the name constraints (only then is a leaf minted). */
bool intercept_ca_permits(const struct intercept_ca *ca, const char *name);

/* The leaf for a canonical host name: from the cache, or minted now. Returns a reference
 * (intercept_leaf_unref). -EPERM when the name is outside the CA's constraints (a policy
 * reloaded with new intercepted names: the sandbox's CA cannot sign for them), -EINVAL for a
 * name that is not a canonical host name, -EIO on a crypto failure. */
int intercept_ca_leaf(struct intercept_ca *ca, const char *name, struct intercept_leaf **out,
                      struct al_error *err);
struct intercept_leaf *intercept_leaf_ref(struct intercept_leaf *l);
void intercept_leaf_unref(struct intercept_leaf *l); /* NULL is fine */
const char *intercept_leaf_name(const struct intercept_leaf *l);
/* For mbedtls_ssl_set_hs_own_cert: the leaf certificate (chain of one) and its key. */
mbedtls_x509_crt *intercept_leaf_crt(struct intercept_leaf *l);
mbedtls_pk_context *intercept_leaf_key(struct intercept_leaf *l);

struct intercept_ca_stats {
    uint64_t minted;        /* leaves minted (misses and renewals) */
    uint64_t hits;          /* served from the cache */
    uint64_t evicted;       /* dropped to stay within max_leaves */
    uint64_t refused;       /* names outside the constraints */
    uint64_t mint_ns_total; /* time spent minting */
    size_t cached;
};
void intercept_ca_get_stats(struct intercept_ca *ca, struct intercept_ca_stats *st);

/* ---- pieces, exposed for tests and tools --------------------------------------------- */

/* The DNS subtree bases for host patterns: "api.github.com" -> itself; "*.example.com",
 * "**.example.com", "api-*.example.com" -> "example.com". Deduplicated, and a base covered
 * by another (a.example.com under example.com) is dropped. The caller frees *out with
 * intercept_strv_free. */
int intercept_ca_subtrees_for(const char *const *patterns, size_t n, char ***out, size_t *n_out,
                              struct al_error *err);
void intercept_strv_free(char **v, size_t n);
/* The DER of a NameConstraints extension value: permitted dNSName subtrees (bases), excluded
 * iPAddress 0.0.0.0/0 and ::/0. Written at the end of buf (mbedtls asn1write style);
 * start and len describe it. -ENOSPC when buf is too small. */
int intercept_name_constraints_der(const char *const *bases, size_t n, unsigned char *buf,
                                   size_t size, unsigned char **start, size_t *len);
/* RFC 5280 dNSName constraint check: name equals base or ends with "." base. */
bool intercept_name_in_subtree(const char *name, const char *base);
/* Tests only: mints a leaf for any name, skipping the constraint check (what a leaked CA key
 * could do; the name constraints must make such a leaf worthless to verifiers). Not cached. */
int intercept_ca__mint_unchecked(struct intercept_ca *ca, const char *name,
                                 struct intercept_leaf **out);

#endif
