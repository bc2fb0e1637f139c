#!/usr/bin/env bash
# bench/pause_bench.sh: pause and resume of jail sandboxes through airlockd's E2B API, with
# and without memory, against the sandbox's dirty size. One JSON line per size and round:
#   {"bench":"pause","dirty_mb":N,"round":R,"pause_memory_ms","resume_memory_ms",
#    "pause_files_ms","resume_boot_ms","kept_bytes"}
# pause_memory_ms: POST /sandboxes/{id}/pause {} until its 204 (freeze, and its files written
# to <state>/paused for a restart of the host); resume_memory_ms: POST /v2/sandboxes/{id}/
# connect until its 201 (thaw); pause_files_ms: the pause with {"memory": false} (the files
# copied, then its processes, cgroups and network released); kept_bytes: what
# <state>/paused/<id> holds then; resume_boot_ms: the connect that boots it over its files
# (network, egress registration, start, agent healthy). airlockd runs in a network namespace
# of its own (network on, so that the release and the boot include the vswitch and
# airlock-egress), on the template base.
# --encrypt "off on": the cost of encryption at rest (at_rest.encrypt) for the files kept in
# <state>/paused. The state directory is then one of two ext4 images made with the encrypt
# feature (cp_state_image, one per setting, the same file system either way), and every size
# and round is measured once per setting in turn, airlockd restarted on that setting's image
# (interleaved: the machine's drift falls on both alike); each line gets "encrypt". The
# encrypted setting is checked on airlockd's banner. Needs root and a built tree:
#   AIRLOCK_SOURCE_DIR=. AIRLOCK_BIN=build/bin bench/pause_bench.sh [--sizes "1 10 100"] [--rounds 3] [--encrypt "off on"]
set -uo pipefail
SIZES="1 10 100"
ROUNDS=3
ENCRYPT=""
while [ $# -gt 0 ]; do
  case $1 in
  --sizes) SIZES=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --encrypt) ENCRYPT=$2; shift 2 ;;
  *) echo "usage: $0 [--sizes \"1 10 100\"] [--rounds N] [--encrypt \"off on\"]" >&2; exit 2 ;;
  esac
done
export AIRLOCK_BIN=${AIRLOCK_BIN:-${AIRLOCK_SOURCE_DIR:?set AIRLOCK_SOURCE_DIR}/build/bin}
source "${AIRLOCK_SOURCE_DIR:?set AIRLOCK_SOURCE_DIR}/tests/integration/cp_world.sh"
cp_atrest_config pause_bench "$ENCRYPT" || exit 2
cp_world pause_bench jail on >&2
# shellcheck disable=SC2086 # the settings are words
cp_atrest_images $ENCRYPT || exit 1

# ms of one API call; its body into $AL_TMP/body, its status into $AL_TMP/code.
timed() {
  local t0 t1
  t0=$(date +%s%N)
  cp_api -o "$AL_TMP/body" -w '%{http_code}' "$@" >"$AL_TMP/code"
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}
want() { [ "$(cat "$AL_TMP/code")" = "$1" ] || { echo "pause_bench: $2: HTTP $(cat "$AL_TMP/code") $(cat "$AL_TMP/body")" >&2; exit 1; }; }

# One measurement of dirty size $1 (MB), round $2, setting $3 ("" without --encrypt).
round() {
  local mb=$1 r=$2 enc=$3 A pm rm_ pf rb kept e=""
    A=$(cp_create '{"templateID":"base","timeout":600}')
    cp_exec "$A" sh -c "head -c ${mb}M /dev/urandom > /home/user/blob" >/dev/null ||
      { echo "pause_bench: cannot write $mb MB" >&2; exit 1; }
    pm=$(timed -X POST "$CP_URL/sandboxes/$A/pause" -d '{}')
    want 204 "pause $A"
    rm_=$(timed -X POST "$CP_URL/v2/sandboxes/$A/connect" -d '{"timeout":600}')
    want 201 "resume $A"
    pf=$(timed -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":false}')
    want 204 "pause $A without memory"
    kept=$(du -sb "$CP_STATE/paused/$A" | cut -f1)
    rb=$(timed -X POST "$CP_URL/v2/sandboxes/$A/connect" -d '{"timeout":600}')
    want 201 "boot $A"
    [ -z "$enc" ] || e=$(printf ',"encrypt":"%s"' "$enc")
    printf '{"bench":"pause"%s,"dirty_mb":%s,"round":%s,"pause_memory_ms":%s,"resume_memory_ms":%s,"pause_files_ms":%s,"resume_boot_ms":%s,"kept_bytes":%s}\n' \
      "$e" "$mb" "$r" "$pm" "$rm_" "$pf" "$rb" "$kept"
    cp_cli sandbox kill "$A" >/dev/null
}

cp_atrest_series "$SIZES" "$ROUNDS" "$ENCRYPT" paused round || exit 1
