/* tests/fuzz/fuzz_vault_file: the vault file parser (vault_file_header + vault_file_body) on
 * arbitrary bytes, with fixed keys so that the seeds (made by vault_gen_fuzz_corpus) verify and
 * mutations reach every check. A file that parses must serialise and parse again to the same
 * catalog, and decrypting its values must fail cleanly or succeed. */
#include "fuzz_keys.h"
#include "vault/vault_file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct vault_keys *k;
    static unsigned char mk[32];
    if (!k) {
        if (sodium_init() < 0 || vault_keys_alloc(&k) != 0)
            abort();
        memset(mk, FUZZ_MASTER_BYTE, sizeof mk);
    }
    const char *d = (const char *)data;
    struct vault_header h;
    size_t off = 0;
    if (vault_file_header(d, size, &h, &off, NULL) != 0)
        return 0;
    if (h.kdf != VAULT_KDF_KEYFILE || vault_dk_unwrap(mk, &h, k) != 0) {
        memset(k->dk, FUZZ_DATA_BYTE, sizeof k->dk);
        vault_keys_derive(k);
    }
    struct vault_catalog c;
    struct al_error e = {0};
    int rc = vault_file_body(d, size, off, k, &c, &e);
    if (getenv("FUZZ_DEBUG"))
        fprintf(stderr, "fuzz_vault_file: %s\n", rc ? al_error_str(&e) : "parsed");
    if (rc)
        return 0;
    char *out = NULL;
    size_t len = 0;
    if (vault_file_write(&h, k, &c, "2026-01-01T00:00:00.000Z", &out, &len) == 0) {
        struct vault_header h2;
        size_t off2 = 0;
        struct vault_catalog c2;
        if (vault_file_header(out, len, &h2, &off2, NULL) != 0 ||
            vault_file_body(out, len, off2, k, &c2, NULL) != 0)
            abort(); /* what we write, we must read */
        if (c2.n != c.n || c2.n_tombs != c.n_tombs || c2.generation != c.generation)
            abort();
        for (size_t i = 0; i < c.n; i++) {
            if (strcmp(c.secrets[i].name, c2.secrets[i].name) != 0 ||
                c.secrets[i].n_versions != c2.secrets[i].n_versions)
                abort();
        }
        vault_catalog_free(&c2);
        free(out);
    }
    for (size_t i = 0; i < c.n; i++) {
        for (size_t v = 0; v < c.secrets[i].n_versions; v++) {
            struct vault_value val;
            if (vault_value_open(k, h.file_id, c.secrets[i].name, &c.secrets[i].versions[v],
                                 &val) == 0)
                vault_value_free(&val);
        }
    }
    vault_catalog_free(&c);
    return 0;
}
