#!/usr/bin/env bash
# bench/volume_bench.sh: writes into a volume, from a jail sandbox that mounts it and through
# the content API, against the size written. One JSON line per size and round:
#   {"bench":"volume","write_mb":N,"round":R,"sandbox_write_ms","api_write_ms"}
# sandbox_write_ms: `dd if=/dev/zero of=/data/blob bs=1M count=N conv=fsync` inside the
# sandbox, timed there (the blocks written through the volume's ext4 and its loop device to
# the image file, and synced); api_write_ms: PUT /volumecontent/{id}/file of N MB until its
# 200 (written to a temporary file, synced, renamed). Each round makes a volume of 2N + 64 MiB (both writes stay in it)
# and a sandbox that mounts it, and removes both after. airlockd runs in a network namespace
# of its own, on the template base.
# --encrypt "off on": the cost of encryption at rest (at_rest.encrypt) for volumes, whose
# images are files of <state>/volumes. The state directory is then one of two ext4 images
# made with the encrypt feature (cp_state_image, one per setting, the same file system either
# way), and every size and round is measured once per setting in turn, airlockd restarted on
# that setting's image (interleaved: the machine's drift falls on both alike; "off" is the
# reference); each line gets "encrypt". The encrypted setting is checked on airlockd's
# banner. Needs root and a built tree:
#   AIRLOCK_SOURCE_DIR=. AIRLOCK_BIN=build/bin bench/volume_bench.sh [--sizes "16 64"] [--rounds 3] [--encrypt "off on"]
set -uo pipefail
SIZES="16 64"
ROUNDS=3
ENCRYPT=""
while [ $# -gt 0 ]; do
  case $1 in
  --sizes) SIZES=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --encrypt) ENCRYPT=$2; shift 2 ;;
  *) echo "usage: $0 [--sizes \"16 64\"] [--rounds N] [--encrypt \"off on\"]" >&2; exit 2 ;;
  esac
done
export AIRLOCK_BIN=${AIRLOCK_BIN:-${AIRLOCK_SOURCE_DIR:?set AIRLOCK_SOURCE_DIR}/build/bin}
for mb in $SIZES; do
  case $mb in '' | *[!0-9]*) echo "volume_bench: --sizes takes MB as whole numbers, not $mb" >&2; exit 2 ;; esac
done
source "${AIRLOCK_SOURCE_DIR:?set AIRLOCK_SOURCE_DIR}/tests/integration/cp_world.sh"
cp_atrest_config volume_bench "$ENCRYPT" || exit 2
cp_world volume_bench jail on >&2
# shellcheck disable=SC2086 # the settings are words
cp_atrest_images $ENCRYPT || exit 1

head -c "$(($(echo "$SIZES" | tr ' ' '\n' | sort -n | tail -1) << 20))" /dev/zero >"$AL_TMP/blob"
json() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
fail() { echo "volume_bench: $*" >&2; exit 1; }

# One measurement of $1 MB, round $2, setting $3 ("" without --encrypt).
round() {
  local mb=$1 r=$2 enc=$3 out id tok A sw t0 t1 code e=""
  out=$(cp_api -X POST "$CP_URL/volumes" -d "{\"name\":\"bench$r\",\"sizeMB\":$((2 * mb + 64))}")
  id=$(json "$out" volumeID) && tok=$(json "$out" token) || fail "create a volume: $out"
  A=$(cp_create "{\"templateID\":\"base\",\"timeout\":600,\"volumeMounts\":[{\"name\":\"bench$r\",\"path\":\"/data\"}]}") ||
    fail "create a sandbox that mounts $id"
  sw=$(cp_exec "$A" sh -c "t0=\$(date +%s%N); dd if=/dev/zero of=/data/blob bs=1M count=$mb conv=fsync 2>/dev/null || exit 1; t1=\$(date +%s%N); echo \$(((t1 - t0) / 1000000))") ||
    fail "write $mb MB in $A"
  head -c "$((mb << 20))" "$AL_TMP/blob" >"$AL_TMP/part"
  t0=$(date +%s%N)
  code=$(nsenter --net="/run/netns/$CP_HOSTNS" curl -sS -o /dev/null -w '%{http_code}' -X PUT \
    -H "Authorization: Bearer $tok" -H 'Content-Type: application/octet-stream' \
    --data-binary "@$AL_TMP/part" "$CP_URL/volumecontent/$id/file?path=/api-blob")
  t1=$(date +%s%N)
  [ "$code" = 200 ] || fail "PUT $mb MB into $id: HTTP $code"
  cp_cli sandbox kill "$A" >/dev/null || fail "kill $A"
  [ "$(cp_api -o /dev/null -w '%{http_code}' -X DELETE "$CP_URL/volumes/$id")" = 204 ] ||
    fail "destroy $id"
  [ -z "$enc" ] || e=$(printf ',"encrypt":"%s"' "$enc")
  printf '{"bench":"volume"%s,"write_mb":%s,"round":%s,"sandbox_write_ms":%s,"api_write_ms":%s}\n' \
    "$e" "$mb" "$r" "$sw" "$(((t1 - t0) / 1000000))"
}

cp_atrest_series "$SIZES" "$ROUNDS" "$ENCRYPT" volumes round || exit 1
