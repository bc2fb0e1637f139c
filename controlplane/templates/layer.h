/* controlplane/templates/layer: a layer blob as the stream of its uncompressed tar.
 *
 * Owns: recognising the compression by its magic bytes (gzip, including several members;
 * zstd, with its window bounded to 128 MiB; or none), decompressing, the sha256 of the
 * uncompressed bytes (the layer's diff_id, which the image config names), and the bounds on
 * what decompression may produce: at most max_out bytes, and, once 16 MiB have come out, at
 * most max_ratio times the compressed bytes read so far (a decompression bomb is stopped
 * early, not after it filled the disk).
 */
#ifndef AIRLOCK_CP_TEMPLATES_LAYER_H
#define AIRLOCK_CP_TEMPLATES_LAYER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "oci.h"

#define TPL_LAYER_RATIO_FROM (16u << 20)

struct tpl_layer_stream;

int tpl_layer_open(int fd, uint32_t max_ratio, uint64_t max_out, struct tpl_layer_stream **out);
/* The tar reader's read function (tar.h): arg is the stream. */
ssize_t tpl_layer_read(void *arg, void *buf, size_t len);
/* Reads what follows the archive's end (it counts in the digest), then gives the diff_id. */
int tpl_layer_finish(struct tpl_layer_stream *s, char diff_id[TPL_DIGEST_LEN + 1]);
const char *tpl_layer_error(const struct tpl_layer_stream *s);
enum tpl_compression tpl_layer_compression(const struct tpl_layer_stream *s);
uint64_t tpl_layer_in_bytes(const struct tpl_layer_stream *s);
uint64_t tpl_layer_out_bytes(const struct tpl_layer_stream *s);
void tpl_layer_free(struct tpl_layer_stream *s);

#endif
