/* tests/fuzz/fuzz_auditlog_verify: the audit log verifier (common/auditlog_verify.c) on arbitrary
 * file contents. The input is one or more log files separated by a form-feed line, each optionally
 * starting with "@name FILE" (crash recoveries name the file they recovered); the public key is
 * fixed (vault_gen_fuzz_corpus makes seed logs with it). The verdict does not matter: it must never
 * crash, hang or read out of bounds. */
#include "common/auditlog.h"
#include "common/util.h"
#include "fuzz_keys.h"

#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz__dir[256];

static void fuzz__setup(void)
{
    snprintf(fuzz__dir, sizeof fuzz__dir, "/tmp/al-fuzz-auditlog-%d", (int)getpid());
    al_mkdir_p(fuzz__dir, 0700);
    unsigned char seed[32], pk[32], sk[64];
    memset(seed, FUZZ_SIGN_SEED, sizeof seed);
    crypto_sign_seed_keypair(pk, sk, seed);
    char hex[65], path[300];
    sodium_bin2hex(hex, sizeof hex, pk, 32);
    snprintf(path, sizeof path, "%s/fz.pub", fuzz__dir);
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fprintf(f, "{\"log_id\":\"%s\",\"public_key\":\"%s\"}\n", FUZZ_LOG_ID, hex);
    fclose(f);
}

static char fuzz__files[4][400];

static void fuzz__clear(void)
{
    for (int i = 0; i < 4; i++) {
        if (fuzz__files[i][0])
            unlink(fuzz__files[i]);
        fuzz__files[i][0] = '\0';
    }
}

static void fuzz__cleanup(void)
{
    fuzz__clear();
    char p[400];
    snprintf(p, sizeof p, "%s/fz.pub", fuzz__dir);
    unlink(p);
    rmdir(fuzz__dir);
}

/* Files are named for the seq their first line claims (as the writer names them). */
static unsigned long long fuzz__first_seq(const char *p, size_t n, int i)
{
    unsigned long long v = 0;
    if (n > 7 && memcmp(p, "{\"seq\":", 7) == 0) {
        for (size_t k = 7; k < n && k < 7 + 18 && p[k] >= '0' && p[k] <= '9'; k++)
            v = v * 10 + (unsigned long long)(p[k] - '0');
    }
    return v ? v : (unsigned long long)i * 1000 + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz__dir[0]) {
        if (sodium_init() < 0)
            abort();
        fuzz__setup();
        atexit(fuzz__cleanup);
    }
    const char *p = (const char *)data, *end = p + size;
    fuzz__clear();
    for (int n = 0; n < 4; n++) {
        const char *sep = memmem(p, (size_t)(end - p), FUZZ_FILE_SPLIT, 2);
        const char *stop = sep && n < 3 ? sep : end;
        /* "@name fz-<seq>-<time>.jsonl" on the first line names the file (crash recoveries
         * refer to file names); otherwise it is named for the seq of its first record */
        const char *body = p;
        char name[200] = "";
        if ((size_t)(stop - p) > 6 && memcmp(p, "@name ", 6) == 0) {
            const char *nl = memchr(p, '\n', (size_t)(stop - p));
            size_t nlen = nl ? (size_t)(nl - p) - 6 : 0;
            bool ok = nl && nlen > 9 && nlen < sizeof name && memcmp(p + 6, "fz-", 3) == 0;
            for (size_t k = 0; ok && k < nlen; k++) {
                char ch = p[6 + k];
                ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_';
            }
            if (ok) {
                memcpy(name, p + 6, nlen);
                name[nlen] = '\0';
                for (int k = 0; k < n; k++) {
                    if (strcmp(strrchr(fuzz__files[k], '/') + 1, name) == 0)
                        name[0] = '\0'; /* a duplicate name */
                }
            }
            if (nl)
                body = nl + 1;
        }
        if (name[0])
            snprintf(fuzz__files[n], sizeof fuzz__files[n], "%s/%s", fuzz__dir, name);
        else
            snprintf(fuzz__files[n], sizeof fuzz__files[n], "%s/fz-%020llu-2026010%dT000000Z.jsonl",
                     fuzz__dir, fuzz__first_seq(body, (size_t)(stop - body), n), n);
        FILE *f = fopen(fuzz__files[n], "w");
        if (!f)
            abort();
        fwrite(body, 1, (size_t)(stop - body), f);
        fclose(f);
        if (stop == end)
            break;
        p = stop + 2;
    }
    struct al_auditlog_verify_opts o = {.dir = fuzz__dir, .prefix = "fz"};
    struct al_auditlog_verify_result r;
    if (al_auditlog_verify(&o, &r, NULL) == 0) {
        json_t *j = al_auditlog_verify_json(&r);
        json_decref(j);
        if (getenv("FUZZ_DEBUG"))
            al_auditlog_verify_print(&r, stderr);
    }
    return 0;
}
