#!/usr/bin/env bash
# bench/snap_bench.sh: jail file system snapshots through airlock-vmm (POST /snapshot) and
# sandboxes started from them (spec.jail.restore), against the sandbox's dirty size. One JSON
# line per size and round:
#   {"bench":"snap_jail","dirty_mb":N,"round":R,"snapshot_ms","frozen_ms","copied_bytes",
#    "stored_kib","restore_ms","startup_ms","startup_plain_ms"}
# snapshot_ms: the whole POST /snapshot (copy, snapshot.json, syncfs, rename); frozen_ms: how
# long the sandbox was frozen; stored_kib: what the snapshot takes on disk; restore_ms: the
# copy into the new sandbox's tmpfs; startup_ms: airlock-vmm's start to a healthy agent from
# the snapshot, startup_plain_ms the same without one (same template, same moment).
# Needs root and a built tree:
#   AIRLOCK_SOURCE_DIR=. AIRLOCK_BINARY_DIR=build bench/snap_bench.sh [--sizes "1 10 100"] [--rounds 3]
set -euo pipefail
SIZES="1 10 100"
ROUNDS=3
while [ $# -gt 0 ]; do
  case $1 in
  --sizes) SIZES=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  *) echo "usage: $0 [--sizes \"1 10 100\"] [--rounds N]" >&2; exit 2 ;;
  esac
done
# The jail tests' helpers: their state directory, cgroup parent, cleanup and sandbox start.
JAIL_LIB=${AIRLOCK_SOURCE_DIR:?set AIRLOCK_SOURCE_DIR}/tests/integration/jail_lib.sh
. "$JAIL_LIB"
JAIL_TEST=snap_bench
MEM=1024
DISK=512
make_busybox_template "$T/bb"
mkdir -p "$T/snaps"
field() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval("d" + sys.argv[1]))' "$1"; }

n=0
for mb in $SIZES; do
  for r in $(seq "$ROUNDS"); do
    n=$((n + 1))
    jail_start "a$n" "$T/bb"
    jail_exec "a$n" user "dd if=/dev/urandom of=/home/user/blob bs=1048576 count=$mb 2>/dev/null && echo ok" \
      >/dev/null || fail "cannot write $mb MB"
    out=$(jail_api "a$n" POST /snapshot "{\"path\":\"$T/snaps/s$n\"}") || fail "snapshot: $out"
    snap_ms=$(field '["ms"]' <<<"$out")
    frozen_ms=$(field '["frozen_ms"]' <<<"$out")
    bytes=$(field '["copied"]["bytes"]' <<<"$out")
    stored=$(du -sk "$T/snaps/s$n" | cut -f1)
    jail_stop "a$n"
    JAIL_OPTS=",\"restore\":\"$T/snaps/s$n\"" jail_start "b$n" "$T/bb"
    restore_us=$(field '["timing"]["restore_us"]' <"$T/ready-b$n" 2>/dev/null || echo null)
    startup=$(field '["startup_ms"]' <"$T/ready-b$n")
    jail_stop "b$n"
    jail_start "c$n" "$T/bb"
    plain=$(field '["startup_ms"]' <"$T/ready-c$n")
    jail_stop "c$n"
    rm -rf "$T/snaps/s$n"
    restore_ms=null
    [ "$restore_us" = null ] || restore_ms=$(python3 -c "print(round($restore_us / 1000, 2))")
    printf '{"bench":"snap_jail","dirty_mb":%s,"round":%s,"snapshot_ms":%.2f,"frozen_ms":%.2f,"copied_bytes":%s,"stored_kib":%s,"restore_ms":%s,"startup_ms":%.2f,"startup_plain_ms":%.2f}\n' \
      "$mb" "$r" "$snap_ms" "$frozen_ms" "$bytes" "$stored" "$restore_ms" "$startup" "$plain"
  done
done
