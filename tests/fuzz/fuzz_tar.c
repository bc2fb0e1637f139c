/* tests/fuzz/fuzz_tar: the tar reader (controlplane/templates/tar.c) and path cleaning under
 * arbitrary bytes, the layer data airlock-unpack reads from images. Checked after every input: no
 * crash or sanitizer report, every entry's strings bounded, no entry data beyond what its header
 * declared, and a cleaned path never absolute nor with a ".." component.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/templates/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checked in every build type (FZ_CHECK() is gone in Release). */
#define FZ_CHECK(c)  \
    do {             \
        if (!(c))    \
            abort(); \
    } while (0)

struct fz_src {
    const uint8_t *d;
    size_t n, off;
};

static ssize_t fz_read(void *arg, void *buf, size_t len)
{
    struct fz_src *s = arg;
    size_t k = s->n - s->off < len ? s->n - s->off : len;
    if (k > 7) /* short reads, as a pipe or a decompressor gives them */
        k = k / 2 + 1;
    memcpy(buf, s->d + s->off, k);
    s->off += k;
    return (ssize_t)k;
}

static void fz_clean(const char *p)
{
    char out[4200], msg[300];
    if (tpl_path_clean(p, out, sizeof out, 4096, msg, sizeof msg) == 0) {
        FZ_CHECK(out[0] != '/');
        FZ_CHECK(strcmp(out, "..") != 0 && strncmp(out, "../", 3) != 0);
        FZ_CHECK(!strstr(out, "/../") && !strstr(out, "//"));
        size_t l = strlen(out);
        FZ_CHECK(!(l >= 3 && strcmp(out + l - 3, "/..") == 0));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fz_src s = {data, size, 0};
    struct tpl_tar *t;
    if (tpl_tar_open(fz_read, &s, 1024, &t))
        return 0;
    const struct tpl_tar_entry *e;
    char buf[1000];
    while (tpl_tar_next(t, &e) == 1) {
        FZ_CHECK(strlen(e->path) <= 1024 && strlen(e->link) <= 1024);
        FZ_CHECK(e->n_xattrs <= TPL_TAR_MAX_XATTR);
        fz_clean(e->path);
        fz_clean(e->link);
        uint64_t got = 0;
        ssize_t n;
        while ((n = tpl_tar_read(t, buf, sizeof buf)) > 0)
            got += (uint64_t)n;
        FZ_CHECK(got <= e->size);
    }
    tpl_tar_free(t);
    return 0;
}
