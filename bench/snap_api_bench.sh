#!/usr/bin/env bash
# bench/snap_api_bench.sh: jail snapshots through airlockd's E2B API, against the sandbox's
# dirty size. One JSON line per size and round:
#   {"bench":"snap_api","dirty_mb":N,"round":R,"snapshot_ms","size_bytes",
#    "create_from_snapshot_ms","create_plain_ms","rollback_ms","fork_N_ms"...,"delete_ms"}
# snapshot_ms: POST /sandboxes/{id}/snapshots until its 201 (freeze, copy, thaw, sync,
# record); create_from_snapshot_ms: POST /v2/sandboxes with the snapshot id until its 201
# (the sandbox's agent answers /health), create_plain_ms the same from the template, at the
# same moment; rollback_ms: POST /sandboxes/{id}/rollback to the snapshot until its 200 (the
# processes stopped, the files copied back, the new agent answering); fork_N_ms, for each N
# of --forks: POST /sandboxes/{id}/fork with count N until its 201 (the checkpoint, a
# snapshot of the same dirty size, and N starts from it, every copy's agent answering; each
# copy must have started); delete_ms: DELETE /templates/{snapshotID}. The snapshot, in the
# same round, is the reference for the rollback and the fork. airlockd runs in a network
# namespace of its own (network off), on the template base.
# --encrypt "off on": the cost of encryption at rest (at_rest.encrypt). The state directory
# is then one of two private ext4 images made with the encrypt feature (one per setting, the
# same file system either way), and every size and round is measured once per setting in
# turn, airlockd restarted on that setting's image (interleaved: the machine's drift falls on
# both alike); each line gets "encrypt". The encrypted setting is checked on airlockd's banner.
# Needs root and a built tree:
#   AIRLOCK_SOURCE_DIR=. AIRLOCK_BIN=build/bin bench/snap_api_bench.sh [--sizes "1 10 100"] [--rounds 3] [--forks "1 10"] [--encrypt "off on"]
set -uo pipefail
SIZES="1 10 100"
ROUNDS=3
FORKS="1 10"
ENCRYPT=""
while [ $# -gt 0 ]; do
  case $1 in
  --sizes) SIZES=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --forks) FORKS=$2; shift 2 ;;
  --encrypt) ENCRYPT=$2; shift 2 ;;
  *) echo "usage: $0 [--sizes \"1 10 100\"] [--rounds N] [--forks \"1 10\"] [--encrypt \"off on\"]" >&2; exit 2 ;;
  esac
done
export AIRLOCK_BIN=${AIRLOCK_BIN:-${AIRLOCK_SOURCE_DIR:?set AIRLOCK_SOURCE_DIR}/build/bin}
source "${AIRLOCK_SOURCE_DIR:?set AIRLOCK_SOURCE_DIR}/tests/integration/cp_world.sh"
cp_atrest_config snap_api_bench "$ENCRYPT" || exit 2
cp_world snap_api_bench jail off >&2
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
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$AL_TMP/body" "$1"; }
want() { [ "$(cat "$AL_TMP/code")" = "$1" ] || { echo "snap_api_bench: $2: HTTP $(cat "$AL_TMP/code") $(cat "$AL_TMP/body")" >&2; exit 1; }; }

# One measurement of dirty size $1 (MB), round $2, setting $3 ("" without --encrypt).
round() {
  local mb=$1 r=$2 enc=$3 A B C S size snap_ms from_ms plain_ms rb_ms f_ms del_ms forks ids n s
  local -a copies got
  A=$(cp_create '{"templateID":"base","timeout":600}')
  cp_exec "$A" sh -c "head -c ${mb}M /dev/urandom > /home/user/blob" >/dev/null ||
    { echo "snap_api_bench: cannot write $mb MB" >&2; exit 1; }
  snap_ms=$(timed -X POST "$CP_URL/sandboxes/$A/snapshots" -d '{}')
  want 201 snapshot
  S=$(field snapshotID)
  size=$(cp_api "$CP_URL/snapshots?sandboxID=$A" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["sizeBytes"])')
  from_ms=$(timed -X POST "$CP_URL/v2/sandboxes" -d "{\"templateID\":\"$S\",\"timeout\":600}")
  want 201 "create from $S"
  B=$(field sandboxID)
  plain_ms=$(timed -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":600}')
  want 201 "create plain"
  C=$(field sandboxID)
  cp_exec "$A" sh -c 'echo after > /home/user/after' >/dev/null
  rb_ms=$(timed -X POST "$CP_URL/sandboxes/$A/rollback" -d "{\"snapshotID\":\"$S\"}")
  want 200 "rollback to $S"
  forks=""
  copies=()
  for n in $FORKS; do
    f_ms=$(timed -X POST "$CP_URL/sandboxes/$A/fork" -d "{\"count\":$n,\"timeout\":600}")
    want 201 "fork of $n"
    ids=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
bad = [e["error"] for e in r if "sandbox" not in e]
if bad or len(r) != int(sys.argv[2]):
  sys.exit("snap_api_bench: fork of %s: %s" % (sys.argv[2], bad or r))
print(" ".join(e["sandbox"]["sandboxID"] for e in r))' "$AL_TMP/body" "$n") || exit 1
    read -r -a got <<<"$ids"
    copies+=("${got[@]}")
    forks+=$(printf ',"fork_%s_ms":%s' "$n" "$f_ms")
  done
  del_ms=$(timed -X DELETE "$CP_URL/templates/$S")
  want 204 "delete $S"
  local e=""
  [ -z "$enc" ] || e=$(printf ',"encrypt":"%s"' "$enc")
  printf '{"bench":"snap_api"%s,"dirty_mb":%s,"round":%s,"snapshot_ms":%s,"size_bytes":%s,"create_from_snapshot_ms":%s,"create_plain_ms":%s,"rollback_ms":%s%s,"delete_ms":%s}\n' \
    "$e" "$mb" "$r" "$snap_ms" "$size" "$from_ms" "$plain_ms" "$rb_ms" "$forks" "$del_ms"
  for s in "$A" "$B" "$C" "${copies[@]}"; do cp_cli sandbox kill "$s" >/dev/null; done
}

cp_atrest_series "$SIZES" "$ROUNDS" "$ENCRYPT" snapshots round || exit 1
