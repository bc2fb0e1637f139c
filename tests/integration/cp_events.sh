#!/usr/bin/env bash
# tests/integration/cp_events.sh: sandbox lifecycle events (GET /events/sandboxes), end to
# end through airlockd (test backend, loopback-only world):
#   - every change is an event with its cause: created, updated (setTimeout, with
#     set_timeout; updateNetwork, with network_update), paused, resumed, killed (by the API key; by the timeout; by a crash;
#     by the stop);
#   - E2B's query: offset, limit, orderAsc, repeated types; bad values are a 400 saying why;
#   - `airlock events tail` prints each event as it happens; the stream resumes after
#     Last-Event-ID with exactly the events after it;
#   - events outlive their sandbox and airlockd's restart.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
[ -x "$AIRLOCK_BIN/airlock-agent-dev" ] || { echo "cp_events: airlock-agent-dev is not built: SKIP"; exit 0; }
cp_world cp_events test off
cp_start || exit 1

# The events as "type cause" lines, oldest first.
ev_summary() {
  python3 -c '
import json, sys
for e in json.load(sys.stdin):
    d = e.get("eventData") or {}
    print(e["type"].rsplit(".", 1)[1], d.get("cause"), d.get("apiKeyId", "-"))'
}
code() { cp_api -o /dev/null -w '%{http_code}' "$@"; }

al_bg tail "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE" events tail --json
al_wait_line tail 'following' 60 || exit 1

al_note "a sandbox's life"
SB=$(cp_create '{"templateID":"base","timeout":600}')
al_check "created" test -n "$SB"
al_eq "setTimeout" "$(code -X POST "$CP_URL/sandboxes/$SB/timeout" -d '{"timeout":900}')" 204
al_ok "pause" cp_cli sandbox pause "$SB"
al_ok "resume" cp_cli sandbox resume "$SB"
al_ok "kill" cp_cli sandbox kill "$SB"
al_eq "its events, oldest first, each with its cause and key" \
  "$(cp_api "$CP_URL/events/sandboxes/$SB?orderAsc=true" | ev_summary)" \
  "created api env
updated api env
paused api local
resumed api local
killed api local"
al_match "E2B's fields" '"version": *"v1".*"type": *"sandbox.lifecycle.created".*"sandboxId": *"'"$SB"'".*"sandboxTemplateId": *"base".*"timestamp": *"20' \
  cp_api "$CP_URL/events/sandboxes/$SB?orderAsc=true&limit=1"
al_match "updated carries the new expiry" '"set_timeout": *"20[0-9-]+T' \
  cp_api "$CP_URL/events/sandboxes/$SB?types=sandbox.lifecycle.updated"
al_eq "newest first by default" "$(cp_api "$CP_URL/events/sandboxes/$SB?limit=1" | ev_summary)" \
  "killed api local"
al_eq "offset" "$(cp_api "$CP_URL/events/sandboxes/$SB?limit=2&offset=1" | ev_summary)" \
  "resumed api local
paused api local"
al_eq "types, repeated" \
  "$(cp_api "$CP_URL/events/sandboxes/$SB?types=sandbox.lifecycle.created&types=sandbox.lifecycle.killed" | ev_summary)" \
  "killed api local
created api env"
al_eq "a sandbox without events: an empty list" "$(cp_api "$CP_URL/events/sandboxes/nosuchsandbox0000000")" "[]"

al_note "bad queries"
al_eq "limit 0" "$(code "$CP_URL/events/sandboxes?limit=0")" 400
al_eq "limit 101" "$(code "$CP_URL/events/sandboxes?limit=101")" 400
al_match "an unknown type is named" 'unknown event type \\"sandbox.lifecycle.exploded\\"' \
  cp_api "$CP_URL/events/sandboxes?types=sandbox.lifecycle.exploded"
al_eq "orderAsc not a boolean" "$(code "$CP_URL/events/sandboxes?orderAsc=yes")" 400
al_eq "a bad sandbox id" "$(code "$CP_URL/events/sandboxes/a%2Fb")" 400
al_eq "POST" "$(code -X POST "$CP_URL/events/sandboxes")" 405
al_eq "without an API key" "$(nsenter --net="/run/netns/$CP_HOSTNS" curl -s -o /dev/null -w '%{http_code}' "$CP_URL/events/sandboxes")" 401

al_note "the live stream"
al_check "tail printed the five events as they happened" \
  al_wait_until 60 eval '[ "$(grep -c "\"sandboxId\":\"$SB\"" "$AL_TMP/tail.log")" -ge 5 ]'
al_eq "in order" "$(grep "\"sandboxId\":\"$SB\"" "$AL_TMP/tail.log" | python3 -c '
import json, sys
print(" ".join(json.loads(l)["type"].rsplit(".", 1)[1] for l in sys.stdin))')" \
  "created updated paused resumed killed"
# Last-Event-ID: the stream's ids come from a replay of everything (id 0), then a replay
# after the third one gives exactly the fourth and the fifth. curl ends when head has its
# lines and the stream's next write (an event or the keep-alive) finds the pipe closed.
sse() {
  nsenter --net="/run/netns/$CP_HOSTNS" timeout 120 curl -sN -H "X-API-KEY: $CP_KEY" \
    -H 'Accept: text/event-stream' -H "Last-Event-ID: $1" "$CP_URL/events/sandboxes/$SB" |
    head -n "$2"
}
ALL=$(sse 0 22)
al_eq "a replay from the start: the five events" "$(grep -c '^data: ' <<<"$ALL")" 5
THIRD=$(echo "$ALL" | sed -n 's/^id: //p' | sed -n 3p)
AFTER=$(sse "$THIRD" 10)
al_eq "after the third: the fourth and the fifth" \
  "$(echo "$AFTER" | sed -n 's/^event: sandbox.lifecycle.//p' | tr '\n' ' ')" "resumed killed "
al_eq "a Last-Event-ID that is not one" "$(code -H 'Accept: text/event-stream' -H 'Last-Event-ID: x' "$CP_URL/events/sandboxes")" 400

al_match "/metrics counts them" '^airlock_lifecycle_events_total [1-9]' cp_api "$CP_URL/metrics"

al_note "a network update (sbx.updateNetwork())"
SB5=$(cp_create '{"templateID":"base","timeout":600,"network":{"denyOut":["203.0.113.0/24"]}}')
al_eq "PUT .../network: 204" "$(code -X PUT "$CP_URL/sandboxes/$SB5/network" -d '{"allowOut":["pypi.org"],"allow_internet_access":false}')" 204
al_eq "a refused one (allowOut of everything): 400" "$(code -X PUT "$CP_URL/sandboxes/$SB5/network" -d '{"allowOut":["::/0"]}')" 400
al_eq "an updated event, by the key, and none for the refusal" \
  "$(cp_api "$CP_URL/events/sandboxes/$SB5?orderAsc=true" | ev_summary)" \
  "created api env
updated api env"
al_match "its eventData names the update and the new fields" \
  '"network_update": *\{"updateId": *"nu_[0-9a-f]{16}", *"allow_internet_access": *false, *"allowOut": *\["pypi.org"\], *"denyOut": *null, *"generation": *1\}' \
  cp_api "$CP_URL/events/sandboxes/$SB5?types=sandbox.lifecycle.updated"
al_match "airlockd's log names it with the key" "network fields replaced \\(update nu_[0-9a-f]{16}, key env" \
  cat "$AL_TMP/airlockd.log"

al_note "causes other than the API"
SB2=$(cp_create '{"templateID":"base","timeout":1}')
al_check "a sandbox past its timeout: killed by the timeout" \
  al_wait_until 120 eval '[ "$(cp_api "$CP_URL/events/sandboxes/$SB2?limit=1" | ev_summary)" = "killed timeout -" ]'
SB4=$(cp_create '{"templateID":"base","timeout":600}')
cp_exec "$SB4" 'kill -KILL $PPID' >/dev/null 2>&1 # the agent: the sandbox's process
al_check "a sandbox whose process died: killed by the crash" \
  al_wait_until 120 eval '[ "$(cp_api "$CP_URL/events/sandboxes/$SB4?limit=1" | ev_summary)" = "killed crash -" ]'
SB3=$(cp_create '{"templateID":"base","timeout":600}')
al_check "one more, left running" test -n "$SB3"
al_kill airlockd TERM
al_check "the stream ends when airlockd stops" al_wait_until 60 eval '! kill -0 "$(al_pid tail)" 2>/dev/null'
al_match "... and tail says why" 'the stream ended: airlockd is stopping' cat "$AL_TMP/tail.log"
cp_start || exit 1
al_eq "the stop killed it, and its events survive the restart" \
  "$(cp_api "$CP_URL/events/sandboxes/$SB3?orderAsc=true" | ev_summary)" \
  "created api env
killed shutdown -"
al_match "airlock events ls" "sandbox.lifecycle.killed|killed +$SB3 +shutdown" cp_cli events ls --sandbox "$SB3"
al_match "airlock events ls --type" "created +$SB " cp_cli events ls --sandbox "$SB" --type created
al_fail "airlock events ls: a bad type is refused" cp_cli events ls --type exploded
al_done
