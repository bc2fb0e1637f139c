/* tests/lib/fuzz_main: drives a libFuzzer entry point without libFuzzer.
 *
 * Used when AIRLOCK_FUZZ=OFF (gcc builds, CI's sanitizer run): every file of the seed
 * corpus directories given on the command line is fed to LLVMFuzzerTestOneInput, then a
 * bounded number of deterministic mutations of each (bit flips, truncations, splices,
 * byte insertions) so that the regression run exercises more than the seeds. The count is
 * AIRLOCK_FUZZ_MUTATIONS (default 2000 per seed).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int main(int argc, char **argv);

static uint64_t fuzz__state = 0x9e3779b97f4a7c15ull;

static uint64_t fuzz__rand(void)
{
    fuzz__state ^= fuzz__state << 13;
    fuzz__state ^= fuzz__state >> 7;
    fuzz__state ^= fuzz__state << 17;
    return fuzz__state;
}

static void fuzz__run_one(const uint8_t *data, size_t len, long mutations)
{
    /* The entry point gets an exact-size heap copy so ASan sees any overread. */
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, data, len);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);

    size_t cap = len * 2 + 64;
    uint8_t *m = malloc(cap);
    for (long i = 0; i < mutations; i++) {
        size_t n = len;
        memcpy(m, data, len);
        int ops = 1 + (int)(fuzz__rand() % 4);
        for (int k = 0; k < ops; k++) {
            switch (fuzz__rand() % 6) {
            case 0: /* flip a bit */
                if (n)
                    m[fuzz__rand() % n] ^= (uint8_t)(1u << (fuzz__rand() % 8));
                break;
            case 1: /* set an interesting byte */
                if (n) {
                    static const uint8_t v[] = {0, 0xff, 0x7f, 0x80, '\r', '\n', ':', '.', 0x20};
                    m[fuzz__rand() % n] = v[fuzz__rand() % sizeof v];
                }
                break;
            case 2: /* truncate */
                if (n)
                    n = fuzz__rand() % n;
                break;
            case 3: /* insert a byte */
                if (n + 1 < cap) {
                    size_t at = n ? fuzz__rand() % n : 0;
                    memmove(m + at + 1, m + at, n - at);
                    m[at] = (uint8_t)fuzz__rand();
                    n++;
                }
                break;
            case 4: /* duplicate a chunk */
                if (n && n * 2 < cap) {
                    size_t at = fuzz__rand() % n, l = 1 + fuzz__rand() % (n - at);
                    memmove(m + at + l, m + at, n - at);
                    n += l;
                }
                break;
            case 5: /* big value in a 16/32-bit field */
                if (n >= 4) {
                    size_t at = fuzz__rand() % (n - 3);
                    m[at] = 0xff;
                    m[at + 1] = 0xff;
                }
                break;
            }
        }
        uint8_t *exact = malloc(n ? n : 1);
        memcpy(exact, m, n);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
    }
    free(m);
}

static int fuzz__file(const char *path, long mutations)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = malloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    fuzz__run_one(buf, n, mutations);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *env = getenv("AIRLOCK_FUZZ_MUTATIONS");
    long mutations = env ? atol(env) : 2000;
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (fuzz__file(argv[i], mutations) < 0)
                return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            if (fuzz__file(p, mutations) < 0)
                return 1;
            files++;
        }
        closedir(d);
    }
    if (files == 0) {
        fprintf(stderr, "fuzz_main: no corpus files given or found\n");
        return 1;
    }
    printf("fuzz_main: %d seed(s), %ld mutations each, no crash\n", files, mutations);
    return 0;
}
