/* tests/fuzz/fuzz_cp_build_definition: the definition of a template build (POST
 * /v2/templates/{id}/builds/{buildID}, the SDK's TemplateBuildStartV2), a client's JSON:
 * cp_builds_check_definition and, as the trigger does, the credentials of fromImageRegistry. A
 * definition it accepts must have exactly one base and steps of the five known types. */
#include <sodium.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "controlplane/builds.h"
#include "controlplane/cp.h"
#include "controlplane/templates/oci.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct cp fz_cp;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    if (!fz_cp.cfg.templates_path[0]) {
        if (sodium_init() < 0)
            abort();
        snprintf(fz_cp.cfg.templates_path, sizeof fz_cp.cfg.templates_path,
                 "/nonexistent/airlock-fuzz-templates");
    }
    json_t *d = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(d)) {
        json_decref(d);
        return 0;
    }
    json_t *reg = json_object_get(d, "fromImageRegistry");
    if (json_is_object(reg)) {
        struct tpl_creds *c = NULL;
        tpl_creds_from_json(reg, &c, NULL);
        tpl_creds_free(c);
        json_object_del(d, "fromImageRegistry");
    }
    struct al_error err = {0};
    if (cp_builds_check_definition(&fz_cp, "fuzzed", d, &err) == 0) {
        const char *img = json_string_value(json_object_get(d, "fromImage"));
        const char *from = json_string_value(json_object_get(d, "fromTemplate"));
        if (!(img && img[0]) == !(from && from[0]))
            abort();
        json_t *steps = json_object_get(d, "steps");
        if (json_array_size(steps) > 256)
            abort();
        size_t i;
        json_t *st;
        json_array_foreach(steps, i, st)
        {
            const char *t = json_string_value(json_object_get(st, "type"));
            if (!t || (strcmp(t, "RUN") && strcmp(t, "COPY") && strcmp(t, "ENV") &&
                       strcmp(t, "WORKDIR") && strcmp(t, "USER")))
                abort();
        }
    } else if (!err.msg[0]) {
        abort(); /* a refusal always says why */
    }
    json_decref(d);
    return 0;
}
