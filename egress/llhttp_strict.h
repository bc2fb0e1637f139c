/* egress/llhttp_strict: include this (never <llhttp.h> directly) in egress code. It maps
 * llhttp's names to egress's private build compiled with LLHTTP_STRICT_MODE=1 (bare LF,
 * stray CR, data after "Connection: close" and non-canonical URL bytes are errors). No
 * lenient flag is ever set. */
#ifndef AIRLOCK_EGRESS_LLHTTP_STRICT_H
#define AIRLOCK_EGRESS_LLHTTP_STRICT_H

#include "egress/llhttp_names.h" /* generated into the build tree */

#include <llhttp.h>

#endif
