/* common/trust: where the agent puts a sandbox's airlock CA (egress interception) in the
 * sandbox's trust stores (vmm/guest/trust.c installs it), so that what reads a sandbox's files
 * afterwards (a template build's layer of a RUN step, controlplane/templates/layerdiff.c) can
 * leave it out: the CA is the sandbox's, never part of what the sandbox made.
 *
 * The CA file is written whole; the system bundle gets the CA between the two marker lines,
 * the rest of the bundle as the template had it.
 */
#ifndef AIRLOCK_COMMON_TRUST_H
#define AIRLOCK_COMMON_TRUST_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

#define AL_TRUST_CA_DIR     "/etc/ssl/certs"
#define AL_TRUST_CA_NAME    "airlock-sandbox-ca.pem"
#define AL_TRUST_BUNDLE     "ca-certificates.crt"
#define AL_TRUST_CA_FILE    AL_TRUST_CA_DIR "/" AL_TRUST_CA_NAME
#define AL_TRUST_CA_BUNDLE  AL_TRUST_CA_DIR "/" AL_TRUST_BUNDLE
#define AL_TRUST_MARK_BEGIN "# airlock sandbox CA (egress interception) -- begin\n"
#define AL_TRUST_MARK_END   "# airlock sandbox CA (egress interception) -- end\n"

/* Appends to out the bundle b (len bytes) without its airlock block (both marker lines and
 * what is between them); *had says whether there was one. 0 or -ENOMEM. */
int al_trust_bundle_strip(const char *b, size_t len, struct al_buf *out, bool *had);

#endif
