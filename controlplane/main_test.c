/* controlplane/main_test: airlockd-test, the airlockd of the test build. It is airlockd with
 * the test backend (backend_test.c: the agent as a plain host process, NO ISOLATION)
 * registered, which the control plane's tests choose with sandboxes.backend: test. Built with
 * the tests only and never installed, so that the airlockd users run has no way to run a
 * sandbox unconfined. */
#include "backend.h"
#include "cp.h"

int main(int argc, char **argv);

int main(int argc, char **argv)
{
    cp_backend_register_test(&cp_backend_test);
    return cp_main(argc, argv);
}
