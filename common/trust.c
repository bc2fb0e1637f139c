/* common/trust: see trust.h. */
#include "trust.h"

#include <string.h>

int al_trust_bundle_strip(const char *b, size_t len, struct al_buf *out, bool *had)
{
    const char *bb = b ? memmem(b, len, AL_TRUST_MARK_BEGIN, sizeof AL_TRUST_MARK_BEGIN - 1) : NULL;
    const char *be =
        bb ? memmem(bb, len - (size_t)(bb - b), AL_TRUST_MARK_END, sizeof AL_TRUST_MARK_END - 1)
           : NULL;
    *had = bb && be;
    if (!*had)
        return len ? al_buf_append(out, b, len) : 0;
    int r = al_buf_append(out, b, (size_t)(bb - b));
    const char *rest = be + sizeof AL_TRUST_MARK_END - 1;
    if (!r)
        r = al_buf_append(out, rest, len - (size_t)(rest - b));
    return r;
}
