/* vmm/guest/ndjson: the code interpreter's output format and the text handling under it.
 *
 * Owns: one JSON object per line (compact, \n-terminated, ASCII-only so that a client that
 * decodes each network chunk separately never splits a character), UTF-8 repair of child
 * output (invalid bytes become U+FFFD; an incomplete trailing sequence is carried over to
 * the next read), and the timestamps of stdout/stderr lines.
 */
#ifndef AIRLOCK_GUEST_NDJSON_H
#define AIRLOCK_GUEST_NDJSON_H

#include <jansson.h>
#include <stddef.h>

#include "common/buf.h"

/* Appends obj as one line. -EINVAL when obj is not an object. */
int agent_ndjson_append(struct al_buf *out, const json_t *obj);
/* Length of the prefix of buf that does not end inside a (possibly valid) UTF-8 sequence. */
size_t agent_utf8_complete_prefix(const char *buf, size_t len);
/* Appends in to out with every invalid UTF-8 sequence replaced by U+FFFD. */
int agent_utf8_sanitize(const char *in, size_t len, struct al_buf *out);

#endif
