/* common/http_parser: the tree's one HTTP/1 parser, llhttp built strict by cmake/llhttp.cmake
 * (bare LF or CR, a chunk whose data runs past its size, data after "Connection: close",
 * non-canonical URL bytes are errors; no lenient flag is ever set). Include this, never
 * <llhttp.h> directly: it refuses to compile against any other configuration.
 *
 * Owns: that guard, and what llhttp's own errors mean as a refusal (status and reason
 * code), so that every path that refuses a malformed message says the same thing.
 */
#ifndef AIRLOCK_COMMON_HTTP_PARSER_H
#define AIRLOCK_COMMON_HTTP_PARSER_H

#include <llhttp.h>

#if !LLHTTP_STRICT_MODE
#error "llhttp must be the strict build: link airlock::llhttp (cmake/llhttp.cmake), never another"
#endif

/* The refusal for an error llhttp itself found (anything but HPE_USER, whose reason is the
 * callback's own): *status 400 (403 for an HTTP/2 preface) and a reason code such as
 * "ambiguous_framing", "invalid_header", "invalid_line_ending", "invalid_chunk". */
const char *al_http_parse_error_reason(llhttp_errno_t err, int *status);

#endif
