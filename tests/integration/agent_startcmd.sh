#!/usr/bin/env bash
# The agent's startCmd and readyCmd (from its init, as airlock-vmm and the test backend hand
# them in from template.json): the start command runs with the sandbox's environment and
# default workdir as a process process.List shows (tag startCmd); GET /ready (token needed)
# says "starting" until a readyCmd attempt exits 0, then "ready"; a failing attempt's status
# and output are reported; a start command that fails before ready makes it "failed"; one
# without readyCmd is ready at once; an agent without either says "none".
set -euo pipefail
. "${AIRLOCK_SOURCE_DIR:?}/tests/lib/wait.sh"
bin=${AIRLOCK_BIN:?}
agent=$bin/airlock-agent-dev
[ -x "$agent" ] || agent=$bin/airlock-agent
dir=$(mktemp -d /tmp/al-agent-startcmd-$$.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
n=0
# start INIT_JSON_FIELDS: an agent with that init; sets $sock, $log, $apid.
start() {
  n=$((n + 1))
  sock=$dir/a$n.sock
  log=$dir/a$n.log
  mkdir -p "$dir/w$n"
  printf '{"accessToken":"%s","envVars":{"A":"one"},"defaultWorkdir":"%s"%s}' "$token" "$dir/w$n" "$1" \
    > "$dir/init$n.json"
  exec 5<"$dir/init$n.json"
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} AIRLOCK_AGENT_INIT_FD=5 "$agent" --listen "unix:$sock" --home "$dir" \
    >"$log" 2>&1 &
  apid=$!
  pids+=("$apid")
  exec 5<&-
  al_wait_until 60 test -S "$sock" || fail "agent $n did not listen"
}
fail() { echo "FAIL: $*"; [ -n "${log:-}" ] && cat "$log"; exit 1; }
ready() { curl -s --unix-socket "$sock" -H "X-Access-Token: $token" http://sandbox/ready; }
field() { ready | python3 -c 'import json,sys; v=json.load(sys.stdin).get(sys.argv[1]); print("" if v is None else v)' "$1"; }
state_is() { [ "$(field state)" = "$1" ]; }
json_str() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# 1. A server that comes up a second late; the readyCmd sees it.
start ",\"startCmd\":$(json_str "echo \"\$A \$(pwd)\" > $dir/started; sleep 1; touch $dir/up; exec sleep 600"),\"readyCmd\":$(json_str "test -f $dir/up")"
[ "$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$sock" http://sandbox/ready)" = 401 ] ||
  fail "/ready without the token should be 401"
al_wait_until 60 state_is ready || fail "never ready: $(ready)"
[ "$(cat "$dir/started")" = "one $dir/w1" ] || fail "startCmd saw '$(cat "$dir/started")', not the env and workdir"
[ "$(field attempts)" -ge 2 ] || fail "ready at the first attempt, before the start command was up: $(ready)"
spid=$(field startPid)
kill -0 "$spid" || fail "the start command $spid is not running"
curl -s --unix-socket "$sock" -H "X-Access-Token: $token" -H 'Content-Type: application/json' \
  -H 'Connect-Protocol-Version: 1' -d '{}' http://sandbox/process.Process/List > "$dir/list"
python3 - "$dir/list" "$spid" <<'PY' || fail "process.List: $(cat "$dir/list")"
import json, sys
ps = json.load(open(sys.argv[1]))["processes"]
p = [p for p in ps if p.get("tag") == "startCmd"]
assert len(p) == 1 and p[0]["pid"] == int(sys.argv[2]), ps
assert p[0]["config"]["cmd"] == "/bin/bash" and p[0]["config"]["args"][:2] == ["-l", "-c"], p
PY
echo "ok: startCmd runs with the env and workdir, listed as tag startCmd; ready once readyCmd succeeds"

# 2. A readyCmd that fails: starting, with the attempt's status and output.
start ",\"startCmd\":\"sleep 600\",\"readyCmd\":$(json_str 'echo not up yet >&2; exit 4')"
two_attempts() { [ "$(field attempts)" -ge 2 ]; }
al_wait_until 60 two_attempts || fail "no second attempt: $(ready)"
state_is starting || fail "not starting: $(ready)"
[ "$(field lastStatus)" = "exit status 4" ] || fail "lastStatus: $(ready)"
[ "$(field lastOutput)" = "not up yet" ] || fail "lastOutput: $(ready)"
echo "ok: a failing readyCmd keeps it starting, with the last attempt's status and output"

# 3. A start command that fails before ready.
start ",\"startCmd\":\"echo broken >&2; exit 3\",\"readyCmd\":\"sleep 0.2; false\""
al_wait_until 60 state_is failed || fail "not failed: $(ready)"
field error | grep -q "startCmd 'echo broken >&2; exit 3' ended (exit status 3) before readyCmd succeeded" ||
  fail "error: $(ready)"
echo "ok: a start command that fails first makes the start failed, saying so"

# 4. A start command without readyCmd: ready once it runs; one that exits 0 is no failure.
start ",\"startCmd\":$(json_str "touch $dir/daemonized")"
al_wait_until 60 state_is ready || fail "startCmd alone: $(ready)"
al_wait_until 60 test -e "$dir/daemonized" || fail "the start command did not run"
state_is ready || fail "a start command that exits 0 changed the state: $(ready)"
# 5. Neither.
start ""
state_is none || fail "no commands: $(ready)"
echo "ok: startCmd alone is ready at once; no commands: none"
# 6. A warm agent (AIRLOCK_AGENT_WARM=1, controlplane/warm.c): the start command waits for
# the claim's POST /init, and runs with the claim's envVars.
n=$((n + 1))
sock=$dir/a$n.sock
log=$dir/a$n.log
mkdir -p "$dir/w$n"
printf '{"envVars":{"A":"template"},"defaultWorkdir":"%s","startCmd":%s}' "$dir/w$n" \
  "$(json_str "echo \"\$A\" > $dir/warm-started; exec sleep 600")" > "$dir/init$n.json"
exec 5<"$dir/init$n.json"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} AIRLOCK_AGENT_WARM=1 AIRLOCK_AGENT_INIT_FD=5 \
  "$agent" --listen "unix:$sock" --home "$dir" >"$log" 2>&1 &
pids+=("$!")
exec 5<&-
al_wait_until 60 test -S "$sock" || fail "warm agent did not listen"
al_wait_until 60 grep -q 'ready: pid' "$log" || fail "warm agent not up"
[ ! -e "$dir/warm-started" ] || fail "a warm agent ran its start command before the claim"
state_is none || fail "warm agent before its claim: $(ready)"
code=$(curl -s -o "$dir/claim.out" -w '%{http_code}' --unix-socket "$sock" -H 'Content-Type: application/json' \
  -d "{\"accessToken\":\"$token\",\"envVars\":{\"A\":\"claimed\"}}" http://sandbox/init)
[ "$code" = 204 ] || fail "claim init: $code $(cat "$dir/claim.out")"
al_wait_until 60 state_is ready || fail "warm agent after its claim: $(ready)"
al_wait_until 60 test -s "$dir/warm-started" || fail "the start command did not run after the claim"
[ "$(cat "$dir/warm-started")" = claimed ] || fail "startCmd saw A='$(cat "$dir/warm-started")', not the claim's"
echo "ok: a warm agent starts its start command at the claim, with the claim's envVars"
# The agents stop cleanly (SIGTERM): the start commands and ready attempts go with them.
# (A process that has ended but is not yet waited for is a zombie: that counts as gone.)
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }
gone() { ! alive "$1"; }
for p in "${pids[@]}"; do kill "$p"; done
for p in "${pids[@]}"; do al_wait_until 30 gone "$p" || fail "agent $p did not stop"; done
al_wait_until 30 gone "$spid" || fail "the start command $spid outlived its agent"
pids=()
for l in "$dir"/a*.log; do
  ! grep -q 'Sanitizer' "$l" || { log=$l; fail "a sanitizer report in $l"; }
done
echo "ok: stopping the agent ends its start command"
