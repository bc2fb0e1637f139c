#!/usr/bin/env bash
# tests/integration/volumes_jail.sh: per-volume sizes and the audit records of volume
# operations, on jail sandboxes, with airlock-egress writing the audit log. A volume made
# with "sizeMB": 24 has a 24 MiB image and quota: inside a sandbox that mounts it a write
# past it fails with ENOSPC while 8 MiB fit; one made without takes volumes.size; a size
# above volumes.max_size or not an integer is a 400 and makes nothing. Volume.create and
# Volume.destroy answer once their record is in the audit log (read right after the answer,
# without waiting); the mount of the volume at the sandbox's creation and its unmount when
# the sandbox is killed are recorded with the sandbox, the path and the key; the chain
# verifies with them in it; the proxy refuses a control-plane record of another type than
# "volume" (airlockd cannot write the proxy's own records). The mount is on record before
# the sandbox starts: with the audit log's file system (a 4 MiB tmpfs made here) full, a
# creation that mounts a volume is a 503 that names the record, and no sandbox runs.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
[ -x "$AIRLOCK_BIN/airlock-vmm" ] || { echo "volumes_jail: airlock-vmm is not built: SKIP"; exit 0; }
CP_SANDBOXES_EXTRA="volumes:
  size: 32MiB
  max_size: 256MiB"
cp_world volumes_jail jail
# The audit log on its own small file system, to fill it below.
AUDIT="$CP_STATE/audit"
mkdir -p "$AUDIT" && mount -t tmpfs -o size=4m,mode=0700 "al-vol-audit-$$" "$AUDIT" ||
  { echo "volumes_jail: cannot mount a tmpfs" >&2; exit 1; }
vol__cleanup() {
  cp__cleanup
  mountpoint -q "$AUDIT" 2>/dev/null && umount -l "$AUDIT"
  true
}
al_on_cleanup vol__cleanup
# (disk.reserve would refuse every sandbox on a 4 MiB audit file system: this test is of
# what the records do when the log cannot be written, with nothing before them.)
cat >>"$AL_TMP/airlockd.yaml" <<'CFG'
disk:
  reserve: 0
CFG

cp_start || exit 1

json() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
code() { cp_api -o /dev/null -w '%{http_code}' "$@"; }
# The volume records of the audit log, one compact JSON object a line.
vrecs() { cp_cli audit query --type volume --json; }

OUT=$(cp_api -X POST "$CP_URL/volumes" -d '{"name":"small","sizeMB":24}')
V=$(json "$OUT" volumeID)
al_match "a volume of 24 MiB is made" '^vol_' echo "$V"
al_eq "its answer says sizeMB 24" "$(json "$OUT" sizeMB)" 24
al_eq "its image is 24 MiB" "$(stat -c %s "$CP_STATE/volumes/$V.img")" $((24 << 20))
al_match "its creation is in the audit log when the answer comes, with the key and size" \
  "\"event\":\"create\".*\"volume\":\{\"id\":\"$V\",\"name\":\"small\"\}" vrecs
al_match "... with its size" "\"size_mb\":24.*\"volume\":\{\"id\":\"$V\"" vrecs
OUT=$(cp_api -X POST "$CP_URL/volumes" -d '{"name":"dflt"}')
D=$(json "$OUT" volumeID)
al_eq "a volume without sizeMB takes volumes.size (32 MiB)" "$(json "$OUT" sizeMB)" 32
al_eq "its image is 32 MiB" "$(stat -c %s "$CP_STATE/volumes/$D.img")" $((32 << 20))
al_eq "sizeMB above volumes.max_size: 400" \
  "$(code -X POST "$CP_URL/volumes" -d '{"name":"big","sizeMB":257}')" 400
al_match "which names the range" 'from 16 to 256 \(volumes.max_size\)' \
  cp_api -X POST "$CP_URL/volumes" -d '{"name":"big","sizeMB":257}'
al_eq "sizeMB as a string: 400" \
  "$(code -X POST "$CP_URL/volumes" -d '{"name":"big","sizeMB":"64"}')" 400
al_eq "neither made a volume" \
  "$(cp_api "$CP_URL/volumes" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 2
al_fail "nor a record" grep -q '"name":"big"' <(vrecs)

A=$(cp_create '{"templateID":"base","timeout":600,"volumeMounts":[{"name":"small","path":"/data"}]}')
al_match "a sandbox that mounts it" '^[a-z0-9]+$' echo "$A"
al_note "sandbox $A"
OUT=$(cp_exec "$A" sh -c 'dd if=/dev/zero of=/data/big bs=1M count=40 2>&1; echo "rc=$?"')
al_match "40 MiB do not fit in the 24 MiB volume inside the sandbox: ENOSPC" \
  'No space left on device' echo "$OUT"
al_match "... and dd fails" 'rc=[1-9]' echo "$OUT"
al_ok "what was written is removed" cp_exec "$A" rm /data/big
al_ok "8 MiB fit" cp_exec "$A" dd if=/dev/zero of=/data/fits bs=1M count=8
cp_audit_match "the mount is in the audit log with the sandbox, the path and the key" \
  "\"event\":\"mount\".*\"sandbox\":\"$A\".*\"mount_path\":\"/data\"" --type volume --json
al_ok "kill $A" cp_cli sandbox kill "$A"
cp_audit_match "its unmount too, with the cause" \
  "\"event\":\"unmount\".*\"sandbox\":\"$A\".*\"cause\":\"api\"" --type volume --json

al_eq "the volume is destroyed" "$(code -X DELETE "$CP_URL/volumes/$V")" 204
al_match "its deletion is in the audit log when the answer comes" \
  "\"event\":\"delete\".*\"volume\":\{\"id\":\"$V\"" vrecs
al_eq "the other one too" "$(code -X DELETE "$CP_URL/volumes/$D")" 204
al_eq "every volume record names the key that asked" \
  "$(vrecs | grep -vc '"api_key_id":"[a-z0-9_]*"')" 0
al_eq "six volume records in all (2 creations, mount, unmount, 2 deletions)" \
  "$(vrecs | wc -l)" 6
al_ok "the audit log verifies with them in its chain" cp_cli audit verify

ESOCK="$CP_STATE/run/egress.sock"
eg() { curl -sS --unix-socket "$ESOCK" -o /dev/null -w '%{http_code}' "$@"; }
al_eq "the proxy refuses a control-plane record of its own types: 400" \
  "$(eg -X POST http://egress/v1/audit/records -d '{"type":"connection","event":"x"}')" 400
al_eq "and one carrying the log's envelope: 400" \
  "$(eg -X POST http://egress/v1/audit/records -d '{"type":"volume","event":"x","seq":1}')" 400
al_eq "nothing of them is in the log" "$(vrecs | wc -l)" 6

OUT=$(cp_api -X POST "$CP_URL/volumes" -d '{"name":"late"}')
L=$(json "$OUT" volumeID)
al_match "another volume" '^vol_' echo "$L"
dd if=/dev/zero of="$AUDIT/fill" bs=64k 2>/dev/null
OUT=$(cp_api -w '\n%{http_code}' -X POST "$CP_URL/sandboxes" \
  -d '{"templateID":"base","timeout":600,"volumeMounts":[{"name":"late","path":"/data"}]}')
al_eq "with the audit log full, a sandbox that mounts a volume is not created: 503" \
  "$(tail -n1 <<<"$OUT")" 503
al_match "... because its mount could not be recorded" \
  'audit record of its volume mount was not written' echo "$OUT"
al_eq "no sandbox runs" \
  "$(cp_api "$CP_URL/sandboxes" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 0
rm -f "$AUDIT/fill"
al_eq "that volume is destroyed" "$(code -X DELETE "$CP_URL/volumes/$L")" 204

al_kill airlockd TERM
mountpoint -q "$AUDIT" && umount "$AUDIT"
al_eq "nothing is left behind" "$(cp_leaks_settled)" ""
al_done
