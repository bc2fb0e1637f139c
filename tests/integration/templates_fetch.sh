#!/usr/bin/env bash
# tests/integration/templates_fetch.sh: deploy/templates/build's downloads from the mirror,
# in a network namespace of their own (loopback only, no route anywhere) and a scratch cache:
#   - a mirror that does not answer (nothing listens): a network error, retried (--retries
#     1: once, after 5 s), then the build fails naming the mirror and the last error;
#   - a mirror that answers with a Release file and a signature that are no such thing: no
#     network error, so no retry, and debootstrap's own error;
#   - --retries that is not a number: a usage error.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/lib/netns.sh"
command -v debootstrap >/dev/null || { echo "templates_fetch: debootstrap is missing: SKIP"; exit 0; }
BUILD=$AIRLOCK_SOURCE_DIR/deploy/templates/build
al_world_init tfetch
al_ns_add m
NS=$(al_ns m)
ip -n "$NS" link set lo up
build() { ip netns exec "$NS" "$BUILD" --no-install --cache "$AL_TMP/cache" "$@" base 2>&1; }

al_note "a mirror that does not answer"
out=$(build --mirror http://127.0.0.1:9/debian --retries 1)
al_eq "the build fails" "$?" 1
al_match "the network error is retried once" \
  "network error from http://127.0.0.1:9/debian \('E: Failed getting release file.*'\): retry 1 of 1 in 5 s" \
  echo "$out"
al_match "then the build fails, naming the mirror and the last error" \
  "the mirror http://127.0.0.1:9/debian failed 2 time\(s\) on a network error, the last: 'E: Failed getting release file .*'.*pass --mirror URL" \
  echo "$out"
al_fail "no retry 2" grep -q "retry 2" <<<"$out"
al_fail "nothing is left in the cache but the download cache and the lock" \
  sh -c "ls -A '$AL_TMP/cache' | grep -vxE 'debs|\\.base\\.lock'"

al_note "a mirror that answers with a broken Release file"
mkdir -p "$AL_TMP/mirror/debian/dists/bookworm"
printf 'Origin: nobody\nSuite: bookworm\n' >"$AL_TMP/mirror/debian/dists/bookworm/Release"
echo "not a signature" >"$AL_TMP/mirror/debian/dists/bookworm/Release.gpg"
al_bg mirror ip netns exec "$NS" python3 -m http.server 8089 --bind 127.0.0.1 --directory "$AL_TMP/mirror"
al_wait_until 60 ip netns exec "$NS" python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8089), 1)' ||
  { echo "templates_fetch: the mirror did not start" >&2; cat "$AL_TMP/mirror.log" >&2; exit 1; }
out=$(build --mirror http://127.0.0.1:8089/debian --retries 3)
al_eq "the build fails" "$?" 1
al_fail "without a retry" grep -q "retry 1" <<<"$out"
al_match "with debootstrap's error" "deploy/templates/build: base: debootstrap failed \(log above\)" echo "$out"
al_check "the mirror was asked" grep -q "GET /debian/dists/bookworm/Release" "$AL_TMP/mirror.log"

al_note "usage"
out=$(build --retries many)
al_eq "--retries many: a usage error" "$?" 1
al_match "--retries takes a number" "--retries takes a number of retries \(0 or more\), not 'many'" \
  echo "$out"
al_done
