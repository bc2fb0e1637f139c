#!/usr/bin/env bash
# tests/integration/atrest_state.sh: the files of a sandbox paused without its memory
# (<state>/paused) and a volume's files (<state>/volumes) encrypted at rest by the state's
# file system, with the snapshots' one key (at_rest.encrypt: on). The state directory is a
# private ext4 image made with its encrypt feature. A jail sandbox that mounts a volume
# writes a file into the volume and one into its home, the names and contents made inside
# the sandbox (so that no command line or log holds them), and is paused without memory.
# Once everything stopped, the volume unmounted and the state's file system unmounted, the
# image holds none of the contents nor names, while a file of the state written in clear
# (the policies) is found by the same search. Mounted again without the key, the paused
# files and the volume's image are hidden; airlockd's start unlocks them, and then the
# volume's image and the paused files, read through the file system, do hold what the raw
# image did not; the sandbox resumes with its file and the volume mounted again, and the
# volume's file reads through the content API and in a new sandbox that mounts it.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
[ -x "$AIRLOCK_BIN/airlock-vmm" ] || { echo "atrest_state: airlock-vmm is not built: SKIP"; exit 0; }
CP_SANDBOXES_EXTRA="at_rest:
  encrypt: \"on\"
volumes:
  size: 64MiB"
cp_world atrest_state jail off

cp_state_image || exit 1

cp_start || exit 1
KEY="$CP_STATE/at_rest.key"
for d in snapshots paused volumes; do
  al_match "the banner says $d is encrypted" \
    "$d +$CP_STATE/$d \(encrypted at rest, key $KEY\)" cat "$AL_TMP/airlockd.log"
done
al_ok "the one key file is 64 bytes, 0600" test "$(stat -c '%s %a' "$KEY")" = "64 600"

json() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
field() { cp_api "$CP_URL/sandboxes/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }
code() { cp_api -o /dev/null -w '%{http_code}' "$@"; }
content() { nsenter --net="/run/netns/$CP_HOSTNS" curl -sS -H "Authorization: Bearer $TOKEN" "$@"; }

OUT=$(cp_api -X POST "$CP_URL/volumes" -d '{"name":"data"}')
V=$(json "$OUT" volumeID)
TOKEN=$(json "$OUT" token)
al_match "volume created" '^vol_' echo "$V"
A=$(cp_create '{"templateID":"base","timeout":600,"volumeMounts":[{"name":"data","path":"/data"}]}')
al_match "a sandbox that mounts it" '^[a-z0-9]+$' echo "$A"
al_note "sandbox $A"
# Each canary is joined in the sandbox only: "AIRLOCK" "VOLDATA" "-" "9d2c" and so on.
al_ok "a file written into the volume in $A" cp_exec "$A" sh -c \
  'a=AIRLOCK; n=VOLNAME; c=VOLDATA; printf "%s%s-%s\n" "$a" "$c" 9d2c > "/data/$a$n-9d2c"'
al_ok "a file written into its home" cp_exec "$A" sh -c \
  'a=AIRLOCK; n=PAUSENAME; c=PAUSEDATA; printf "%s%s-%s\n" "$a" "$c" 9d2c > "/home/user/$a$n-9d2c"'
al_eq "pause $A without memory: 204" \
  "$(code -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":false}')" 204
al_eq "$A is paused" "$(field "$A" state)" paused
al_ok "its files are kept in <state>/paused/$A" \
  test -f "$CP_STATE/paused/$A/upper/home/user/AIRLOCKPAUSENAME-9d2c"

al_note "at rest: everything stopped, the volume and the file system unmounted"
al_kill airlockd TERM
cp_kill_world
al_ok "unmounted" cp_state_unmount
has() { grep -aqF -- "$1" "$CP_IMG"; }
al_ok "the search finds a file of the state written in clear" has "the control-plane tests' policy"
for c in AIRLOCKVOLDATA-9d2c AIRLOCKVOLNAME-9d2c AIRLOCKPAUSEDATA-9d2c AIRLOCKPAUSENAME-9d2c; do
  al_fail "the image does not hold $c" has "$c"
done

al_note "mounted again: locked until airlockd unlocks it"
al_ok "mounted" cp_state_mount
al_fail "the paused files are hidden" test -e "$CP_STATE/paused/$A"
al_fail "the volume's image is hidden" test -e "$CP_STATE/volumes/$V.img"
cp_start || exit 1
# The control: through the unlocked file system the volume's image and the paused files
# hold what the raw image does not (the volume's ext4 does not hide it itself).
clear_has() { grep -aqF -- "$1" "$2"; }
al_ok "unlocked, the volume's image holds its file's content in clear" \
  clear_has AIRLOCKVOLDATA-9d2c "$CP_STATE/volumes/$V.img"
al_ok "and its name" clear_has AIRLOCKVOLNAME-9d2c "$CP_STATE/volumes/$V.img"
al_ok "the paused files are there in clear" \
  grep -rqF AIRLOCKPAUSEDATA-9d2c "$CP_STATE/paused/$A"
al_eq "$A is paused after the restart" "$(field "$A" state)" paused
OUT=$(cp_api -w ' %{http_code}' -X POST "$CP_URL/v2/sandboxes/$A/connect" -d '{"timeout":600}')
al_match "connect resumes it: 201" ' 201$' echo "$OUT"
al_eq "its file is back" "$(cp_exec "$A" cat /home/user/AIRLOCKPAUSENAME-9d2c)" AIRLOCKPAUSEDATA-9d2c
al_eq "and the volume's, mounted again" "$(cp_exec "$A" cat /data/AIRLOCKVOLNAME-9d2c)" AIRLOCKVOLDATA-9d2c
al_eq "the content API reads the volume's file" \
  "$(content "$CP_URL/volumecontent/$V/file?path=/AIRLOCKVOLNAME-9d2c")" AIRLOCKVOLDATA-9d2c
al_ok "kill $A" cp_cli sandbox kill "$A"
B=$(cp_create '{"templateID":"base","timeout":600,"volumeMounts":[{"name":"data","path":"/mnt/d"}]}')
al_eq "a new sandbox that mounts the volume reads it" \
  "$(cp_exec "$B" cat /mnt/d/AIRLOCKVOLNAME-9d2c)" AIRLOCKVOLDATA-9d2c
al_ok "kill $B" cp_cli sandbox kill "$B"
al_eq "the volume is destroyed" "$(code -X DELETE "$CP_URL/volumes/$V")" 204
al_eq "its image and mount are gone" "$(ls -A "$CP_STATE/volumes")" ""
al_done
