#!/usr/bin/env bash
# tests/integration/cp_restart.sh: airlockd killed with SIGKILL and started again.
#
#   cp_restart.sh [jail|test]     (default jail; test = airlockd's test backend, no network)
#
# With sandboxes running (one paused) and creations in flight, airlockd gets SIGKILL. A new
# airlockd on the same state directory must: re-adopt every sandbox that still runs, in its
# state (files, processes, paused-ness, access tokens, timeouts, policies: nothing lost);
# tear down what was being created (nobody got its 201); keep the helper daemons it finds
# running (airlock-egress keeps every registration working across the restart); reclaim a
# sandbox whose process died while no airlockd ran; and detect a sandbox process killed
# while it runs within a second. At the end nothing is left.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
BACKEND=${1:-jail}
NET=on
if [ "$BACKEND" = test ]; then
  NET=off
else
  for b in airlock-vmm airlock-egress; do
    [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_restart: $b is not built: SKIP"; exit 0; }
  done
fi
cp_world "cp_restart_$BACKEND" "$BACKEND" "$NET"
cp_start || exit 1

al_note "before: three sandboxes with state, one of them paused"
A=$(cp_create '{"templateID":"base","timeout":900,"metadata":{"airlock.policy":"e2e","who":"a"}}')
B=$(cp_create '{"templateID":"base","timeout":900,"metadata":{"who":"b"},"envVars":{"KEEP":"kept"}}')
C=$(cp_create '{"templateID":"base","timeout":900,"metadata":{"who":"c"}}')
al_note "sandboxes $A $B $C"
for s in "$A" "$B" "$C"; do
  al_ok "state written in $s" cp_exec "$s" sh -c "echo $s > marker; (sleep 1000 &) ; true"
done
al_ok "pause $C" cp_cli sandbox pause "$C"
if [ "$NET" = on ]; then
  al_match "$A reaches the allowed upstream" '"server": "good"' \
    cp_exec "$A" curl -sS -m 8 http://allowed.test/before
fi
TOKEN_A=$(cp_api "$CP_URL/sandboxes/$A" | python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])')
END_A=$(cp_api "$CP_URL/sandboxes/$A" | python3 -c 'import json,sys; print(json.load(sys.stdin)["endAt"])')

al_note "SIGKILL while creations are in flight"
hits=0
rounds=0
for delay in 0.01 0.02 0.03 0.05 0.08 0.12 0.2 0.3; do
  [ "$hits" -ge 2 ] && break
  rounds=$((rounds + 1))
  pids=()
  for j in 1 2 3 4 5 6 7 8; do
    cp_api -o /dev/null -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base"}' 2>/dev/null &
    pids+=($!)
  done
  sleep "$delay"
  al_kill airlockd KILL
  wait "${pids[@]}" 2>/dev/null
  cp_start || exit 1
  if grep -q 'being created when airlockd stopped: tearing it down' "$AL_TMP/airlockd.log"; then
    hits=$((hits + 1))
  fi
  # Whatever was created in full (a 201 may have gone out) is a sandbox like any other:
  # keep only A, B, C for the checks below.
  for s in $(cp_cli sandbox ls --json | python3 -c 'import json,sys; print(" ".join(x["sandboxID"] for x in json.load(sys.stdin)))'); do
    case " $A $B $C " in *" $s "*) ;; *) cp_cli sandbox kill "$s" >/dev/null ;; esac
  done
done
al_note "creations caught in flight by the kill: $hits of $rounds rounds"
al_check "at least one creation was in flight when airlockd died" test "$hits" -ge 1

al_note "after: nothing lost"
al_match "A, B and C are listed, C paused" "$C +base +paused" cp_cli sandbox ls
al_eq "three sandboxes" "$(cp_cli sandbox ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 3
al_match "A's files are there" "^$A\$" cp_exec "$A" cat marker
al_match "B's environment is there" '^kept$' cp_exec "$B" sh -c 'echo $KEEP'
al_match "B's background process survived" 'sleep 1000' cp_exec "$B" ps ax
al_eq "A's access token is unchanged" \
  "$(cp_api "$CP_URL/sandboxes/$A" | python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])')" "$TOKEN_A"
al_eq "A's timeout is unchanged" \
  "$(cp_api "$CP_URL/sandboxes/$A" | python3 -c 'import json,sys; print(json.load(sys.stdin)["endAt"])')" "$END_A"
al_ok "C resumes" cp_api -f -X POST "$CP_URL/sandboxes/$C/connect" -d '{"timeout":300}'
al_match "C's files are there" "^$C\$" cp_exec "$C" cat marker
if [ "$NET" = on ]; then
  al_match "A still reaches the allowed upstream (egress and switch adopted)" '"server": "good"' \
    cp_exec "$A" curl -sS -m 8 http://allowed.test/after
  al_match "and is still denied the rest" '"reason":"[a-z_]+"' \
    cp_exec "$A" curl -sS -m 8 http://203.0.113.11/after
  al_eq "airlock-egress was adopted, not restarted" \
    "$(cat "$AL_TMP/airlockd.history.log" "$AL_TMP/airlockd.log" | grep -c 'started airlock-egress')" 1
fi

if [ "$NET" = on ]; then
  # A registration left by a sandbox airlockd no longer knows holds A's address (as when a
  # sandbox died while airlockd was away and its address went to A): when airlockd comes
  # back it must drop it and register A, never count A as registered on a conflict (A's
  # traffic would then be decided under the stale policy, or refused for good).
  al_note "a stale registration holds A's address while airlockd is away"
  ESOCK=$CP_STATE/run/egress.sock
  egress_get() { curl -s --unix-socket "$ESOCK" "http://egress/v1/sandboxes/$1"; }
  A_ADDR=$(egress_get "$A" | python3 -c 'import json,sys; print(json.load(sys.stdin)["addresses"][0])')
  al_kill airlockd KILL
  curl -s --unix-socket "$ESOCK" -X DELETE "http://egress/v1/sandboxes/$A" >/dev/null
  STALE=$(python3 -c 'import json,sys
y = "version: 1\nname: stale\nrules:\n  - name: s\n    hosts: [stale.test]\n"
print(json.dumps({"id": "zzstale", "addresses": [sys.argv[1]], "policy": {"yaml": y}}))' "$A_ADDR")
  al_match "the stale registration takes A's address ($A_ADDR)" '^201$' \
    curl -s -o /dev/null -w '%{http_code}' --unix-socket "$ESOCK" -X POST --data "$STALE" \
    http://egress/v1/sandboxes
  cp_start || exit 1
  state=""
  reg_state() {
    echo "A:$(egress_get "$A" | python3 -c 'import json,sys
try: print(",".join(json.load(sys.stdin)["addresses"]))
except Exception: print("none")') stale:$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$ESOCK" http://egress/v1/sandboxes/zzstale)"
  }
  al_wait_until 120 eval '[ "$(reg_state)" = "A:$A_ADDR stale:404" ]' || true
  state=$(reg_state)
  al_eq "the stale registration is dropped and A registered with its address" "$state" "A:$A_ADDR stale:404"
  al_match "A reaches the allowed upstream under its own policy" '"server": "good"' \
    cp_exec "$A" curl -sS -m 8 http://allowed.test/after-stale
fi

al_note "a sandbox dies while no airlockd runs"
al_kill airlockd KILL
VPID=$(python3 - "$CP_STATE/airlockd.db" "$B" <<'PY'
import json, sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute("SELECT doc FROM sandboxes WHERE id=?", (sys.argv[2],)).fetchone()
print(json.loads(row[0])["pid"])
PY
)
al_ok "its process ($VPID) is killed" kill -KILL "$VPID"
cp_start || exit 1
al_fail "B is gone" cp_api -f "$CP_URL/sandboxes/$B"
al_eq "two sandboxes" "$(cp_cli sandbox ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 2

al_note "a sandbox process dies while airlockd runs: seen within a second"
VPID=$(python3 - "$CP_STATE/airlockd.db" "$C" <<'PY'
import json, sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute("SELECT doc FROM sandboxes WHERE id=?", (sys.argv[2],)).fetchone()
print(json.loads(row[0])["pid"])
PY
)
kill -KILL "$VPID"
gone=no
c_gone() { ! cp_api -f -o /dev/null "$CP_URL/sandboxes/$C" 2>/dev/null; }
al_wait_until 60 c_gone && gone=yes
al_eq "C is gone, while airlockd runs" "$gone" yes
# ... and what it held is released while airlockd runs (not only at its next start).
c_leftovers() {
  ls -d "$CP_STATE/sandboxes/$C" 2>/dev/null | sed 's/^/sandbox-dir /'
  find /sys/fs/cgroup/*/"$CP_CG" /sys/fs/cgroup/"$CP_CG" -mindepth 1 -maxdepth 1 -type d \
    -name "$C" 2>/dev/null | sed 's/^/cgroup /'
  grep -F "$CP_STATE/sandboxes/$C/" /proc/self/mountinfo | sed 's/^/mount /'
  pgrep -af -- "$CP_STATE/sandboxes/$C" | sed 's/^/process /'
  if [ -S "$CP_STATE/run/egress.sock" ]; then
    code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$CP_STATE/run/egress.sock" \
      "http://egress/v1/sandboxes/$C")
    [ "$code" = 404 ] || echo "egress-registration HTTP $code"
  fi
  true
}
left=$(c_leftovers)
al_wait_until 60 eval '[ -z "$(c_leftovers)" ]' || true
left=$(c_leftovers)
al_eq "C's directory, cgroups, mounts, processes and egress registration are released at once" "$left" ""

al_note "the end"
al_ok "kill A" cp_cli sandbox kill "$A"
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
