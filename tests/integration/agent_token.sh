#!/usr/bin/env bash
# The agent with an access token from AIRLOCK_AGENT_INIT_FD: envd calls without the token
# are refused (401), with it they work, and /health needs none. (Regression: the token lives
# in sodium_malloc'd memory, which needs sodium_init.)
set -euo pipefail
. "${AIRLOCK_SOURCE_DIR:?}/tests/lib/wait.sh"
bin=${AIRLOCK_BIN:?}
agent=$bin/airlock-agent-dev
[ -x "$agent" ] || agent=$bin/airlock-agent
dir=$(mktemp -d /tmp/al-agent-token-$$.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '{"accessToken":"%s","envVars":{"A":"1"}}' "$token" > "$dir/init.json"
exec 5<"$dir/init.json"
ASAN_OPTIONS=detect_leaks=0 AIRLOCK_AGENT_INIT_FD=5 "$agent" --listen "unix:$dir/a.sock" \
    --home "$dir" >"$dir/log" 2>&1 &
pid=$!
exec 5<&-
al_wait_until 60 test -S "$dir/a.sock" || true
call() { curl -s -o "$dir/out" -w '%{http_code}' --unix-socket "$dir/a.sock" "$@"; }
rpc=(-X POST -H 'Content-Type: application/json' -H 'Connect-Protocol-Version: 1' -d '{"path":"/"}'
     http://sandbox/filesystem.Filesystem/Stat)
fail() { echo "FAIL: $*"; cat "$dir/log"; exit 1; }
[ "$(call http://sandbox/health)" = 204 ] || fail "/health should answer 204 without a token"
[ "$(call "${rpc[@]}")" = 401 ] || fail "Stat without a token should be 401"
[ "$(call -H "X-Access-Token: wrong$token" "${rpc[@]}")" = 401 ] || fail "a wrong token should be 401"
[ "$(call -H "X-Access-Token: $token" "${rpc[@]}")" = 200 ] || fail "Stat with the token should be 200"
grep -q '"FILE_TYPE_DIRECTORY"' "$dir/out" || fail "Stat / did not return a directory entry"
kill -0 "$pid" || fail "the agent died"
! grep -q "$token" "$dir/log" || fail "the token appears in the agent's log"
echo "ok: access token enforced"
