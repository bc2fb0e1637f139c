#!/usr/bin/env bash
# tests/integration/snap_atrest.sh: airlockd's snapshot store encrypted at rest by its file
# system. The state directory is a private ext4 image made with its encrypt feature;
# airlockd runs with at_rest.encrypt: on. A file a jail sandbox wrote (its content made
# inside the sandbox, so that no command line or log holds it) is in a snapshot that a new
# sandbox starts from; once everything stopped and the file system is unmounted, the image
# does not hold the file's content, while a file of the state written in clear (the
# policies) is found by the same search; mounted again, the store's entries are hidden (their
# names are encrypted too; the snapshot's id itself is no secret: the state database has it)
# until airlockd starts and unlocks the store with its key, and then the snapshot serves
# again; with another key airlockd refuses to start and says why. And the store's quota
# (snapshots.quota_per_key): a snapshot that would go beyond it is refused with 507 and
# nothing of it kept; a key already at it is refused before any copy.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
[ -x "$AIRLOCK_BIN/airlock-vmm" ] || { echo "snap_atrest: airlock-vmm is not built: SKIP"; exit 0; }
CP_SANDBOXES_EXTRA="at_rest:
  encrypt: \"on\"
snapshots:
  quota_per_key: 4MiB"
cp_world snap_atrest jail off

cp_state_image || exit 1

cp_start || exit 1
al_match "the banner says the store is encrypted" \
  "snapshots +$CP_STATE/snapshots \(encrypted at rest, key $CP_STATE/at_rest.key\)" \
  cat "$AL_TMP/airlockd.log"
al_ok "the key file is 64 bytes, 0600" \
  test "$(stat -c '%s %a' "$CP_STATE/at_rest.key")" = "64 600"

A=$(cp_create '{"templateID":"base","timeout":600}')
al_note "sandbox $A"
# The canary is joined in the sandbox only: "AIRLOCKCANARY" "-" "5e1f9c".
al_ok "a file written in $A" cp_exec "$A" sh -c \
  'a=AIRLOCK; b=CANARY; printf "%s%s-%s\n" "$a" "$b" 5e1f9c > /home/user/canary'
out=$(cp_api -X POST "$CP_URL/sandboxes/$A/snapshots" -d '{}')
S=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["snapshotID"])' "$out" 2>/dev/null)
al_match "snapshot of $A taken" '^snap_' echo "$S"
B=$(cp_create "{\"templateID\":\"$S\",\"timeout\":600}")
al_eq "a sandbox from it has the file" "$(cp_exec "$B" cat /home/user/canary)" AIRLOCKCANARY-5e1f9c

al_note "the quota: 4 MiB of snapshots per key"
al_ok "8 MiB more in $A" cp_exec "$A" sh -c 'head -c 8M /dev/urandom > /home/user/big'
code=$(cp_api -o "$AL_TMP/quota.out" -w '%{http_code}' -X POST "$CP_URL/sandboxes/$A/snapshots" -d '{}')
al_eq "a snapshot beyond the quota is refused" "$code" 507
al_match "saying why" 'beyond snapshots.quota_per_key \(4194304\); nothing was kept' cat "$AL_TMP/quota.out"
al_eq "nothing of it is kept" "$(cp_entries "$CP_STATE/snapshots" | wc -w)" 1
al_ok "kill $A" cp_cli sandbox kill "$A"
al_ok "kill $B" cp_cli sandbox kill "$B"

al_note "at rest: everything stopped, the file system unmounted"
al_kill airlockd TERM
cp_kill_world
al_ok "unmounted" cp_state_unmount
has() { grep -aqF -- "$1" "$CP_IMG"; }
al_ok "the search finds a file of the state written in clear" has "the control-plane tests' policy"
al_fail "the image does not hold the sandbox's file" has AIRLOCKCANARY-5e1f9c

al_note "mounted again: locked until airlockd unlocks it"
al_ok "mounted" cp_state_mount
al_fail "the store's names are hidden" test -e "$CP_STATE/snapshots/$S"
# A quota the key is already at: refused before any copy.
sed -i 's/quota_per_key: 4MiB/quota_per_key: 16/' "$AL_TMP/airlockd.yaml"
cp_start || exit 1
al_eq "listed after the restart" "$(cp_api "$CP_URL/snapshots" |
  python3 -c 'import json,sys; print(" ".join(s["snapshotID"] for s in json.load(sys.stdin)))')" "$S"
C=$(cp_create "{\"templateID\":\"$S\",\"timeout\":600}")
al_eq "a sandbox from it has the file again" "$(cp_exec "$C" cat /home/user/canary)" AIRLOCKCANARY-5e1f9c
code=$(cp_api -o "$AL_TMP/quota.out" -w '%{http_code}' -X POST "$CP_URL/sandboxes/$C/snapshots" -d '{}')
al_eq "a key at its quota: refused" "$code" 507
al_match "before any copy, saying why" 'snapshots of key [a-z_0-9]+ take [0-9]+ bytes of snapshots.quota_per_key \(16\)' cat "$AL_TMP/quota.out"
al_ok "kill $C" cp_cli sandbox kill "$C"

al_note "the key is checked"
al_kill airlockd TERM
cp_kill_world
cp_state_unmount && cp_state_mount
cp "$CP_STATE/at_rest.key" "$AL_TMP/key.saved"
head -c 64 /dev/urandom >"$CP_STATE/at_rest.key"
al_fail "with another key airlockd refuses to start" \
  timeout 120 nsenter --net="/run/netns/$CP_HOSTNS" env AIRLOCK_API_KEY="$CP_KEY" \
  "$AIRLOCK_BIN/airlockd" --listen 127.0.0.1:0 --state-dir "$CP_STATE" \
  --config "$AL_TMP/airlockd.yaml"
printf '%s\n' "$AL_OUT" >"$AL_TMP/wrongkey.log"
al_eq "it did not time out" "$(grep -c 'export E2B_API_URL' "$AL_TMP/wrongkey.log")" 0
al_match "and says why" "is not the key $CP_STATE/snapshots is encrypted with" cat "$AL_TMP/wrongkey.log"
cp "$AL_TMP/key.saved" "$CP_STATE/at_rest.key"
al_done
