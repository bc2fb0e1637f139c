/* vmm/guest/trust: installs the sandbox's airlock CA (egress interception, issue 8) into the
 * sandbox's trust stores.
 *
 * The control plane passes the CA certificate in the init object ("caCertPem"); the egress
 * proxy created it for this sandbox and signs, with it, the certificates of the names its
 * policy intercepts (the CA's name constraints allow nothing else). The agent:
 *   - writes it to /etc/ssl/certs/airlock-sandbox-ca.pem (0644);
 *   - appends it to the system bundle /etc/ssl/certs/ca-certificates.crt between two marker
 *     lines, replacing an earlier airlock block (a re-sent CA after an egress restart), so the
 *     other roots stay as the template had them (creating the bundle if the template has
 *     none). Written to a temporary file and renamed: a reader never sees half a bundle;
 *   - from then on starts every process with SSL_CERT_FILE, REQUESTS_CA_BUNDLE and
 *     CURL_CA_BUNDLE naming the bundle and NODE_EXTRA_CA_CERTS naming the CA file (agent.c),
 *     before the template's and the caller's variables, which may override them.
 * The files land in the sandbox's own (upper) layer: the template is not changed.
 * Where: under ca_root ("/" when the agent is the sandbox's init; tests give a directory).
 * An agent that is not init and was given no --ca-root refuses (it would change the trust
 * store of the machine it runs on).
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/trust.h"
#include "common/util.h"

#define TRUST_PEM_MAX (64 * 1024)

int agent_ca_check(const char *pem, size_t len, struct al_error *err)
{
    static const char b[] = "-----BEGIN CERTIFICATE-----", e[] = "-----END CERTIFICATE-----";
    if (len == 0 || len > TRUST_PEM_MAX)
        return al_error_set(err, -EINVAL,
                            "caCertPem must be one PEM certificate of at most %d bytes",
                            TRUST_PEM_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)pem[i];
        if ((c < 0x20 && c != '\n' && c != '\r') || c > 0x7e)
            return al_error_set(err, -EINVAL,
                                "caCertPem has a byte that is not PEM text at offset %zu", i);
    }
    const char *pb = memmem(pem, len, b, sizeof b - 1);
    const char *pe = pb ? memmem(pb, len - (size_t)(pb - pem), e, sizeof e - 1) : NULL;
    if (!pb || !pe)
        return al_error_set(err, -EINVAL,
                            "caCertPem is not a PEM certificate (no BEGIN/END CERTIFICATE lines)");
    if (memmem(pe + sizeof e - 1, len - (size_t)(pe + sizeof e - 1 - pem), b, sizeof b - 1))
        return al_error_set(err, -EINVAL, "caCertPem holds more than one certificate");
    return 0;
}

int agent_ca_bundle_merge(const char *old, size_t old_len, const char *pem, size_t len,
                          struct al_buf *out)
{
    al_buf_reset(out);
    /* Keep everything but an earlier airlock block. */
    bool had;
    int r = al_trust_bundle_strip(old, old_len, out, &had);
    if (!r && out->len && out->data[out->len - 1] != '\n')
        r = al_buf_append(out, "\n", 1);
    if (!r)
        r = al_buf_appends(out, AL_TRUST_MARK_BEGIN);
    if (!r)
        r = al_buf_append(out, pem, len);
    if (!r && len && pem[len - 1] != '\n')
        r = al_buf_append(out, "\n", 1);
    if (!r)
        r = al_buf_appends(out, AL_TRUST_MARK_END);
    return r;
}

int agent_install_ca(struct agent *a, const char *pem, size_t len, struct al_error *err)
{
    int r = agent_ca_check(pem, len, err);
    if (r < 0)
        return r;
    if (!a->ca_root)
        return al_error_set(
            err, -EPERM,
            "installing the sandbox CA needs the agent to be the sandbox's init "
            "(or --ca-root DIR for tests): it would change this machine's trust store");
    char dir[PATH_MAX], ca[PATH_MAX], bundle[PATH_MAX];
    const char *root = strcmp(a->ca_root, "/") == 0 ? "" : a->ca_root;
    snprintf(dir, sizeof dir, "%s%s", root, AGENT_CA_DIR);
    snprintf(ca, sizeof ca, "%s%s", root, AGENT_CA_FILE);
    snprintf(bundle, sizeof bundle, "%s%s", root, AGENT_CA_BUNDLE);
    if (al_mkdir_p(dir, 0755) < 0)
        return al_error_set(err, -errno, "cannot create %s: %s", dir, strerror(errno));
    if ((r = al_write_file_atomic(ca, pem, len, 0644, err)) < 0)
        return al_error_prefix(err, "installing the sandbox CA"), r;
    char *old = NULL;
    size_t old_len = 0;
    struct al_error rerr = {0};
    if (al_read_file(bundle, 64u << 20, &old, &old_len, &rerr) < 0 && rerr.code != -ENOENT) {
        free(old);
        return al_error_set(err, rerr.code, "cannot read the trust bundle: %s",
                            al_error_str(&rerr));
    }
    struct al_buf merged = AL_BUF_INIT;
    r = agent_ca_bundle_merge(old, old_len, pem, len, &merged);
    free(old);
    if (r == 0)
        r = al_write_file_atomic(bundle, merged.data, merged.len, 0644, err);
    al_buf_free(&merged);
    if (r < 0)
        return al_error_prefix(err, "installing the sandbox CA in %s", bundle), r;
    a->ca_installed = true;
    al_info("init: sandbox CA installed in %s and %s", ca, bundle);
    return 0;
}
