#!/usr/bin/env bash
# tests/integration/jail_persist_pause.sh: pauses that survive airlockd's and the host's restart.
#
# A jail sandbox paused with {"memory": false} keeps only its files: none of its processes,
# its cgroups, its network or its egress registration remain, and traffic does not wake it
# (autoResume or not). After SIGKILL of airlockd and a restart it is still paused; its resume
# boots it again over its files with the same id and access token, its policy registration
# again, and commands work. The same after "the host rebooted": airlockd, airlock-vmm,
# airlock-egress, airlock-vault and every process of the world stopped, the runtime tmpfs,
# the switch and the cgroups gone, everything started again. A sandbox paused with its memory
# survives airlockd's SIGKILL with its processes; after the host's restart its memory is gone
# and its resume is a boot over the files it had when it was paused. connect with
# {"memory": false} reboots a memory pause. A timeout's pause with autoPauseMemory: false
# keeps files only, and the boot runs the template's startCmd again. airlockd's stop
# (SIGTERM, on_shutdown: kill) kills running sandboxes and keeps paused ones. At the end
# nothing is left.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "jail_persist_pause: $b is not built: SKIP"; exit 0; }
done
cp_world persist_pause jail on
cp_start || exit 1

ESOCK=$CP_STATE/run/egress.sock
field() { cp_api "$CP_URL/sandboxes/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$2"; }
code() { cp_api -o /dev/null -w '%{http_code}' "$@"; }
registered() { curl -s -o /dev/null -w '%{http_code}' --unix-socket "$ESOCK" "http://egress/v1/sandboxes/$1"; }
# Its cgroups are named after its id; its processes run under <state>/sandboxes/<id>.
cgroups_of() { find /sys/fs/cgroup/*/"$CP_CG" /sys/fs/cgroup/"$CP_CG" -mindepth 1 -type d -name "*$1*" 2>/dev/null; }
# A process marked with this test's own number: a sleep of that many seconds.
MARK=$((900000 + $$ % 100000))
marked() { pgrep -f "sleep $MARK" 2>/dev/null; }
# Data-plane traffic through airlockd, with the sandbox's access token.
traffic() {
  cp_api -o "$AL_TMP/traffic.out" -w '%{http_code}' -H "E2b-Sandbox-Id: $1" \
    -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $2" "$CP_URL/health"
}
# "The host rebooted": every process of this world ends, what the kernel would forget goes.
host_reboot() {
  al_kill airlockd KILL
  cp_kill_world
}

al_note "a sandbox with files and a background process"
OUT=$(cp_api -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":900,"autoPause":true,"autoResume":{"enabled":true},"metadata":{"airlock.policy":"e2e","who":"a"}}')
A=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["sandboxID"])' "$OUT")
TOKEN=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["envdAccessToken"])' "$OUT")
al_note "sandbox $A"
al_ok "files written in $A" cp_exec "$A" sh -c 'echo kept > /home/user/marker && head -c 3M /dev/urandom > /home/user/blob && sha256sum /home/user/blob > /home/user/blob.sum'
SUM=$(cp_exec "$A" cat /home/user/blob.sum)
al_ok "a background process in $A" cp_exec "$A" sh -c "(sleep $MARK &) ; true"
al_ok "it runs" marked
al_eq "$A is registered with airlock-egress" "$(registered "$A")" 200

al_note "pause without memory"
al_eq "a pause with a field it does not know: 400" \
  "$(code -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":false,"keep":1}')" 400
al_eq "\"memory\" not a boolean: 400" "$(code -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":"no"}')" 400
al_eq "POST /sandboxes/$A/pause {\"memory\":false}: 204" \
  "$(code -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":false}')" 204
al_eq "$A is paused" "$(field "$A" state)" paused
al_eq "again: 409 (already paused)" "$(code -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":false}')" 409
al_ok "its files are kept in <state>/paused/$A" test -f "$CP_STATE/paused/$A/upper/home/user/marker"
al_eq "no process of it remains" "$(marked; pgrep -af -- "$CP_STATE/sandboxes/$A")" ""
al_eq "its cgroups are gone" "$(cgroups_of "$A")" ""
al_ok "its sandbox directory is gone" test ! -e "$CP_STATE/sandboxes/$A"
al_eq "its egress registration is gone" "$(registered "$A")" 404
al_eq "traffic with its token does not wake it (autoResume): 502" "$(traffic "$A" "$TOKEN")" 502
al_match "and says why" 'paused without its memory' cat "$AL_TMP/traffic.out"
al_eq "a snapshot of it: 409" "$(code -X POST "$CP_URL/sandboxes/$A/snapshots" -d '{}')" 409
al_match "a sandbox.lifecycle.paused event with memory false" '"memory":false' \
  cp_api "$CP_URL/events/sandboxes/$A?types=sandbox.lifecycle.paused"

al_note "SIGKILL of airlockd, restart: still paused"
al_kill airlockd KILL
cp_start || exit 1
al_eq "$A is paused after the restart" "$(field "$A" state)" paused
al_match "adopted as paused without memory" "sandbox $A adopted \(paused without memory\)" \
  cat "$AL_TMP/airlockd.log"
al_eq "still nothing of it runs" "$(pgrep -af -- "$CP_STATE/sandboxes/$A"; cgroups_of "$A")" ""

al_note "resume: a boot over its files"
OUT=$(cp_api -w ' %{http_code}' -X POST "$CP_URL/v2/sandboxes/$A/connect" -d '{"timeout":600}')
al_match "connect: 201 with the same id" "\"sandboxID\":\"$A\".* 201\$" echo "$OUT"
al_match "and the same access token" "\"envdAccessToken\":\"$TOKEN\"" echo "$OUT"
al_eq "$A is running" "$(field "$A" state)" running
al_eq "its marker" "$(cp_exec "$A" cat /home/user/marker)" kept
al_eq "its 3 MB file" "$(cp_exec "$A" sha256sum /home/user/blob)" "$SUM"
al_eq "its background process did not survive (a boot)" "$(marked)" ""
al_eq "traffic with its token reaches it (its /health)" "$(traffic "$A" "$TOKEN")" 204
al_eq "registered with airlock-egress again" "$(registered "$A")" 200
al_match "$A reaches the allowed upstream under its policy" '"server": "good"' \
  cp_exec "$A" curl -sS -m 8 http://allowed.test/after-boot
al_match "and is denied the rest" '"reason":"[a-z_]+"' \
  cp_exec "$A" curl -sS -m 8 http://203.0.113.11/after-boot
al_ok "its kept files are removed once it runs" test ! -e "$CP_STATE/paused/$A"
al_ok "files written after the boot" cp_exec "$A" sh -c 'echo second > /home/user/marker2'

al_note "a memory pause of another sandbox"
B=$(cp_create '{"templateID":"base","timeout":900,"metadata":{"who":"b"}}')
al_note "sandbox $B"
al_ok "files and a process in $B" cp_exec "$B" sh -c "echo b-kept > /home/user/marker && (sleep $((MARK + 1)) &) ; true"
al_eq "POST /sandboxes/$B/pause {}: 204 (memory kept)" "$(code -X POST "$CP_URL/sandboxes/$B/pause" -d '{}')" 204
al_ok "its files are kept on disk too" test -f "$CP_STATE/paused/$B/upper/home/user/marker"
al_kill airlockd KILL
cp_start || exit 1
al_eq "after SIGKILL of airlockd $B is paused" "$(field "$B" state)" paused
al_ok "connect resumes it with its memory" cp_api -f -X POST "$CP_URL/v2/sandboxes/$B/connect" -d '{}'
al_ok "its process survived" pgrep -f "sleep $((MARK + 1))"
al_ok "its kept files go once it runs" test ! -e "$CP_STATE/paused/$B"
al_eq "pause $B with memory again" "$(code -X POST "$CP_URL/sandboxes/$B/pause" -d '{"memory":true}')" 204
al_eq "pause $A without memory again" "$(code -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":false}')" 204

al_note "the host restarts: everything stopped, started again"
host_reboot
al_eq "nothing of the world runs" "$(pgrep -af -- "$CP_STATE")" ""
cp_start || exit 1
al_eq "$A is paused" "$(field "$A" state)" paused
al_eq "$B is paused: its memory is gone, its files are kept" "$(field "$B" state)" paused
al_match "airlockd says so" "sandbox $B: its processes ended while it was paused with its memory" \
  cat "$AL_TMP/airlockd.log"
OUT=$(cp_api -w ' %{http_code}' -X POST "$CP_URL/v2/sandboxes/$A/connect" -d '{}')
al_match "$A resumes: 201, the same token" "\"envdAccessToken\":\"$TOKEN\".* 201\$" echo "$OUT"
al_eq "its files from before the first pause" "$(cp_exec "$A" cat /home/user/marker)" kept
al_eq "and from after the first boot" "$(cp_exec "$A" cat /home/user/marker2)" second
al_eq "its 3 MB file" "$(cp_exec "$A" sha256sum /home/user/blob)" "$SUM"
al_match "$A reaches the allowed upstream" '"server": "good"' \
  cp_exec "$A" curl -sS -m 8 http://allowed.test/after-reboot
al_ok "$B resumes (a boot)" cp_api -f -X POST "$CP_URL/v2/sandboxes/$B/connect" -d '{}'
al_eq "its files" "$(cp_exec "$B" cat /home/user/marker)" b-kept
al_eq "its process did not survive the host's restart" "$(pgrep -f "sleep $((MARK + 1))")" ""

al_note "connect {\"memory\": false} reboots a memory pause"
al_ok "a process in $B" cp_exec "$B" sh -c "(sleep $((MARK + 2)) &) ; true"
al_eq "pause $B with memory" "$(code -X POST "$CP_URL/sandboxes/$B/pause" -d '{}')" 204
al_ok "connect {\"memory\":false}" cp_api -f -X POST "$CP_URL/v2/sandboxes/$B/connect" -d '{"memory":false}'
al_eq "$B runs" "$(field "$B" state)" running
al_eq "its files" "$(cp_exec "$B" cat /home/user/marker)" b-kept
al_eq "its process is gone (rebooted)" "$(pgrep -f "sleep $((MARK + 2))")" ""

al_note "onTimeout pause with keepMemory: false (autoPauseMemory), a template with a startCmd"
al_eq "autoResume with autoPauseMemory false: 400" \
  "$(code -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}')" 400
BID=$(cp_api -X POST "$CP_URL/v3/templates" -d '{"name":"svc"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["buildID"])')
cp_api -X POST "$CP_URL/v2/templates/svc/builds/$BID" -d '{"fromTemplate":"base",
  "startCmd":"echo up >> /home/user/boots; exec sleep 100000","readyCmd":"test -s /home/user/boots","steps":[]}' >/dev/null
svc_ready() { cp_api "$CP_URL/templates/svc/builds/$BID/status" | grep -q '"status": *"ready"'; }
al_ok "the template svc is built" al_wait_until 120 svc_ready
C=$(cp_create '{"templateID":"svc","timeout":2,"autoPause":true,"autoPauseMemory":false}')
al_note "sandbox $C"
al_eq "its startCmd ran once" "$(cp_exec "$C" cat /home/user/boots)" up
al_ok "it pauses at its timeout" al_wait_until 60 eval '[ "$(field "$C" state)" = paused ]'
al_ok "without memory: its files are kept" al_wait_until 60 test -f "$CP_STATE/paused/$C/upper/home/user/boots"
al_eq "nothing of it runs" "$(pgrep -af -- "$CP_STATE/sandboxes/$C"; cgroups_of "$C")" ""
al_ok "connect boots it" cp_api -f -X POST "$CP_URL/v2/sandboxes/$C/connect" -d '{"timeout":600}'
al_eq "its startCmd ran again, over its files" "$(cp_exec "$C" cat /home/user/boots)" "up
up"
al_ok "kill $C" cp_cli sandbox kill "$C"

al_note "airlockd's stop (SIGTERM, on_shutdown: kill) keeps paused sandboxes"
al_ok "a process in $B" cp_exec "$B" sh -c "(sleep $((MARK + 3)) &) ; true"
al_eq "pause $A without memory" "$(code -X POST "$CP_URL/sandboxes/$A/pause" -d '{"memory":false}')" 204
al_eq "pause $B with memory" "$(code -X POST "$CP_URL/sandboxes/$B/pause" -d '{}')" 204
D=$(cp_create '{"templateID":"base","timeout":900}')
al_kill airlockd TERM
al_eq "nothing of airlock is left running" "$(cp_leaks_settled)" ""
al_eq "the files of both are kept" "$(ls "$CP_STATE/paused" | sort | tr '\n' ' ')" "$(printf '%s\n' "$A" "$B" | sort | tr '\n' ' ')"
cp_start || exit 1
al_eq "$A is paused" "$(field "$A" state)" paused
al_eq "$B is paused" "$(field "$B" state)" paused
al_eq "the running one was killed" "$(code "$CP_URL/sandboxes/$D")" 404
al_ok "$B resumes (a boot: its memory went with the stop)" cp_api -f -X POST "$CP_URL/v2/sandboxes/$B/connect" -d '{}'
al_eq "its files" "$(cp_exec "$B" cat /home/user/marker)" b-kept
al_eq "its process did not survive the stop" "$(pgrep -f "sleep $((MARK + 3))")" ""

al_note "kill of a sandbox paused without memory"
al_ok "kill $A" cp_cli sandbox kill "$A"
al_ok "its kept files are gone" test ! -e "$CP_STATE/paused/$A"
al_eq "$A is gone" "$(code "$CP_URL/sandboxes/$A")" 404

al_note "the end"
al_ok "kill $B" cp_cli sandbox kill "$B"
al_kill airlockd TERM
al_eq "no kept files left" "$(cp_entries "$CP_STATE/paused")" ""
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
