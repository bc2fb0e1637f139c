/* tests/fuzz/fuzz_clienthello: the ClientHello parser on arbitrary bytes, whole and as every
 * growing prefix a socket could deliver. */
#include "egress/clienthello.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > EGRESS_CH_MAX_BUFFER + 64)
        size = EGRESS_CH_MAX_BUFFER + 64;
    struct egress_clienthello ch;
    int rc = egress_clienthello_parse(data, size, &ch);
    if (rc == EGRESS_CH_OK) {
        if (ch.consumed > size || (ch.has_sni && strlen(ch.sni) != ch.sni_len))
            abort();
        if (ch.n_alpn > EGRESS_CH_MAX_ALPN)
            abort();
    } else if (rc < 0 && !ch.error) {
        abort();
    }
    if (size >= EGRESS_CH_MAX_BUFFER && rc == EGRESS_CH_MORE)
        abort(); /* the caller's buffer bound must be enough */
    /* A few prefixes, each in an exact-size copy so that ASan sees overreads. */
    for (size_t cut = 1; cut < size; cut += 1 + size / 8) {
        uint8_t *p = malloc(cut);
        memcpy(p, data, cut);
        int r2 = egress_clienthello_parse(p, cut, &ch);
        free(p);
        /* A prefix of a complete hello can never be complete on its own with more
         * bytes consumed than it holds. */
        if (r2 == EGRESS_CH_OK && ch.consumed > cut)
            abort();
    }
    return 0;
}
