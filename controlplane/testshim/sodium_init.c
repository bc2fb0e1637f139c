/* controlplane/testshim/sodium_init: a preload library for the TEST BACKEND only.
 *
 * airlock-agent (vmm/guest) calls sodium_malloc for the access token without having called
 * sodium_init, which makes libsodium abort (sodium_misuse) as soon as an init object carries
 * a token. Until the agent initialises libsodium itself, the test backend preloads this
 * library into airlock-agent-dev so that its sandboxes can have access tokens. It does
 * nothing else. (Reported to the coordinator; delete this file once the agent is fixed.)
 */
#include <sodium.h>

void airlock_test_sodium_shim(void);

__attribute__((constructor)) void airlock_test_sodium_shim(void)
{
    if (sodium_init() < 0)
        return;
}
