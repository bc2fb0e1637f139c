/* tests/fuzz/fuzz_name_canon: the canonicaliser and everything else that reads names and paths from
 * the wire: host names and IP literals, host patterns, request paths and path patterns, secret
 * names, the address classifier. */
#include "policy/policy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    struct al_error err;
    struct policy_host h;
    if (policy_host_canon(s, size, &h, &err) == 0) {
        /* Canonical forms are fixed points. */
        struct policy_host h2;
        if (policy_host_canon(h.text, h.len, &h2, NULL) != 0 || strcmp(h.text, h2.text) != 0)
            abort();
        if (h.kind == POLICY_HOST_ADDR) {
            struct policy_addr_info info;
            policy_addr_classify(&h.addr, &info);
            char buf[64];
            policy_addr_format(&h.addr, buf, sizeof buf);
        } else if (h.len > POLICY_NAME_MAX) {
            abort();
        }
    }
    struct policy_pattern pat;
    if (policy_pattern_canon(s, size, &pat, &err) == 0) {
        if (pat.kind == POLICY_PATTERN_EXACT &&
            !policy_pattern_match(&pat, pat.text, strlen(pat.text)))
            abort();
        policy_pattern_match(&pat, "a.b.example.com", 15);
    }
    /* Vault bound hosts: canonical forms are fixed points and match themselves (an address
     * entry matches its address, a name entry the name it names). */
    char bh[POLICY_BOUND_HOST_MAX + 1];
    if (policy_bound_host_canon(s, size, false, bh, &err) == 0) {
        char bh2[POLICY_BOUND_HOST_MAX + 1];
        if (policy_bound_host_canon(bh, strlen(bh), false, bh2, NULL) != 0 || strcmp(bh, bh2) != 0)
            abort();
        const char *list[1] = {bh};
        if (!strchr(bh, '*') && !policy_bound_host_match(list, 1, bh, strlen(bh)))
            abort();
        policy_bound_host_match(list, 1, "a.b.example.com", 15);
        policy_bound_host_canon(s, size, true, bh2, NULL);
    }
    char path[POLICY_PATH_MAX + 1];
    if (policy_path_normalize(s, size, path, sizeof path, &err) == 0) {
        char again[POLICY_PATH_MAX + 1];
        if (policy_path_normalize(path, strlen(path), again, sizeof again, NULL) != 0 ||
            strcmp(path, again) != 0)
            abort();
        policy_path_match("/a/**/b/*.json", path);
    }
    char *z = malloc(size + 1);
    memcpy(z, data, size);
    z[size] = '\0';
    if (policy_path_pattern_check(z, &err) == 0)
        policy_path_match(z, "/repos/a/b/c");
    policy_secret_name_valid(s, size);
    free(z);
    return 0;
}
