/* tests/fuzz/fuzz_vmm_spec: vmm/spec's parser (the sandbox spec airlock-vmm reads) and the agent
 * init object built from what it accepted. The spec comes from the control plane, not from a
 * sandbox, but it carries caller-supplied values (env vars, ids, binds), so it gets the same
 * treatment as any parser of outside input: bounded, no crash, no leak, on any bytes. */
#include <stdint.h>
#include <stdlib.h>

#include "vmm/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        setenv("AIRLOCK_AGENT_DIR", "/nonexistent-agent", 1);
        once = 1;
    }
    struct vmm_spec s;
    struct al_error e = {0};
    if (vmm_spec_parse((const char *)data, size, &s, &e) == 0) {
        json_t *o = vmm_spec_init_object(&s);
        json_decref(o);
        vmm_spec_free(&s);
    }
    /* The same bytes as a template.json. */
    json_t *t = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (t) {
        vmm_template_validate(t, "template.json", &e);
        json_decref(t);
    }
    return 0;
}
