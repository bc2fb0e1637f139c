#!/usr/bin/env bash
# tests/integration/cp_webhooks.sh: lifecycle webhooks (/events/webhooks) end to end through
# airlockd (test backend, a world with no route out). Receivers (webhook_receiver.py) on
# 203.0.113.20 in the "up" namespace check every delivery's signatures and timestamp; airlockd
# resolves hooks.test through /etc/netns/<host ns>/hosts, which the test rewrites:
#   - registration: E2B's fields, a made secret shown once, never after; bad URLs, internal
#     targets (loopback, private, link-local, v4-mapped, a name resolving to loopback) refused;
#   - a receiver that answers 500 twice: retried with backoff, then delivered; the history
#     and the stats show the attempts; https with the certificate checked for the name while
#     the checked address is dialled; a 302 is a failure, its Location never requested;
#   - the name re-resolving to loopback: the delivery is refused, nothing reaches loopback;
#   - disabled webhooks get nothing; a full queue drops the oldest event, counted;
#   - another API key sees none of them; they survive airlockd's restart.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
[ -x "$AIRLOCK_BIN/airlock-agent-dev" ] || { echo "cp_webhooks: airlock-agent-dev is not built: SKIP"; exit 0; }
command -v openssl >/dev/null || { echo "cp_webhooks: openssl is missing: SKIP"; exit 0; }
cp_world cp_webhooks test off
RECV="$AIRLOCK_SOURCE_DIR/tests/integration/webhook_receiver.py"
HOOK=203.0.113.20
ip -n "$CP_UPNS" addr add "$HOOK/32" dev lo

# A test CA and the receiver's certificate for hooks.test, made now.
source "$AIRLOCK_SOURCE_DIR/tests/lib/certs.sh"
{ al_cert_ca "$AL_TMP" "airlock webhooks test CA $$" && al_cert_leaf "$AL_TMP" hook hooks.test; } ||
  exit 1

HOSTS_DIR="/etc/netns/$CP_HOSTNS"
mkdir -p "$HOSTS_DIR"
al_on_cleanup "rm -rf '$HOSTS_DIR'"
# Rewritten in place (the same file is bind-mounted over airlockd's /etc/hosts).
set_hosts() { printf '127.0.0.1 localhost\n%s hooks.test\n' "$1" >"$HOSTS_DIR/hosts"; }
set_hosts "$HOOK"
echo '{}' >"$AL_TMP/secrets.json"

al_bg recv ip netns exec "$CP_UPNS" python3 "$RECV" "$HOOK" 8080 --secrets "$AL_TMP/secrets.json" \
  --log "$AL_TMP/hooks.jsonl" --hold "$AL_TMP/release"
al_bg recvtls ip netns exec "$CP_UPNS" python3 "$RECV" "$HOOK" 8443 --secrets "$AL_TMP/secrets.json" \
  --log "$AL_TMP/hooks.jsonl" --cert "$AL_TMP/hook.pem" --key "$AL_TMP/hook.key"
# A receiver on airlockd's own loopback: nothing may ever reach it.
al_bg recvlo ip netns exec "$CP_HOSTNS" python3 "$RECV" 127.0.0.1 8080 --secrets "$AL_TMP/secrets.json" \
  --log "$AL_TMP/loopback.jsonl"
al_wait_line recv LISTEN && al_wait_line recvtls LISTEN && al_wait_line recvlo LISTEN ||
  { echo "cp_webhooks: receivers did not start" >&2; exit 1; }

cat >>"$AL_TMP/airlockd.yaml" <<CFG
webhooks:
  allow_http: true
  ca_file: $AL_TMP/ca.pem
  timeout: 30s
  attempts: 3
  backoff: 50ms
  backoff_max: 200ms
  queue: 3
CFG
CP_NETNS_EXEC=1
cp_start || exit 1

code() { cp_api -o /dev/null -w '%{http_code}' "$@"; }
field() { python3 -c 'import json,sys; v=json.load(sys.stdin); print(v.get(sys.argv[1], "<none>") if isinstance(v, dict) else v)' "$1"; }
register() { cp_api -X POST "$CP_URL/events/webhooks" -H 'Content-Type: application/json' -d "$1"; }
secret_for() {
  python3 - "$AL_TMP/secrets.json" "$1" "$2" <<'PY'
import json, sys
p, path, s = sys.argv[1:]
d = json.load(open(p)); d[path] = s; json.dump(d, open(p + ".new", "w"))
PY
  mv "$AL_TMP/secrets.json.new" "$AL_TMP/secrets.json"
}
# The receivers' log lines for a path, as "type answer e2b_ok sig_ok ts_ok" per line.
got() {
  python3 - "$AL_TMP/hooks.jsonl" "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]) if __import__("os").path.exists(sys.argv[1]) else []:
    r = json.loads(l)
    if r["path"] == sys.argv[2]:
        print(r["type"].rsplit(".", 1)[1], r["answer"], r["e2b_ok"], r["sig_ok"], r["ts_ok"])
PY
}
outcomes() {
  cp_api "$CP_URL/events/webhooks/$1/deliveries?limit=100" | python3 -c '
import json, sys
for d in reversed(json.load(sys.stdin)):
    print(d["eventType"].rsplit(".", 1)[1], d["attempt"], d["outcome"], d["status"])'
}
n_lines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

al_note "registration"
SECRET=test-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
OUT=$(register '{"name":"flaky","url":"http://hooks.test:8080/flaky","events":["sandbox.lifecycle.created","sandbox.lifecycle.killed","sandbox.lifecycle.created"],"signatureSecret":"'"$SECRET"'"}')
A=$(field id <<<"$OUT")
al_match "201 with E2B's fields" '"id": *"[0-9a-f-]{36}", *"teamID": *"default", *"name": *"flaky", *"createdAt": *"20[0-9-]+T.*"enabled": *true, *"url": *"http://hooks.test:8080/flaky", *"events": *\["sandbox.lifecycle.created", *"sandbox.lifecycle.killed"\]' echo "$OUT"
al_fail "a secret the caller gave is not echoed" grep -qF "$SECRET" <<<"$OUT"
secret_for /flaky "$SECRET"
OUT=$(register '{"name":"tls","url":"https://hooks.test:8443/tls"}')
B=$(field id <<<"$OUT")
MADE=$(field signatureSecret <<<"$OUT")
al_match "no secret given: one is made and shown" '^whsec_[A-Za-z0-9_-]{43}$' echo "$MADE"
al_match "no events given: all of them" '"events": *\["sandbox.lifecycle.created", *"sandbox.lifecycle.killed", *"sandbox.lifecycle.updated", *"sandbox.lifecycle.paused", *"sandbox.lifecycle.resumed", *"sandbox.lifecycle.checkpointed", *"sandbox.lifecycle.rolled_back", *"sandbox.lifecycle.forked", *"sandbox.lifecycle.terminal_opened", *"sandbox.lifecycle.terminal_closed", *"sandbox.lifecycle.snapshot_deleted", *"sandbox.lifecycle.node_lost"\]' echo "$OUT"
secret_for /tls "$MADE"
al_eq "the list has both" "$(cp_api "$CP_URL/events/webhooks" | python3 -c 'import json,sys; print(" ".join(w["name"] for w in json.load(sys.stdin)))')" "flaky tls"
al_fail "... and never a secret" eval 'cp_api "$CP_URL/events/webhooks" "$CP_URL/events/webhooks/$A" "$CP_URL/events/webhooks/$B" | grep -qE "signatureSecret|$SECRET|$MADE"'
al_fail "the database does not hold a secret in the clear" eval 'grep -qaF -e "$SECRET" -e "$MADE" "$CP_STATE"/airlockd.db*'
al_fail "... nor airlockd's log" grep -qF -e "$SECRET" -e "$MADE" "$AL_TMP/airlockd.log"
al_eq "GET one" "$(cp_api "$CP_URL/events/webhooks/$A" | field name)" flaky

bad() { # MESSAGE REGEX BODY: a 400 whose message matches
  local out
  out=$(cp_api -w ' %{http_code}' -X POST "$CP_URL/events/webhooks" -d "$3")
  al_match "$1" "$2.* 400$" echo "$out"
}
bad "no url" 'url' '{"name":"x"}'
bad "not http(s)" 'must be an https:// URL' '{"url":"ftp://hooks.test/"}'
bad "user info" 'no user name or password' '{"url":"http://a@hooks.test/"}'
bad "loopback" '127.0.0.1 is loopback.*webhooks.allow_private' '{"url":"http://127.0.0.1:8080/"}'
bad "loopback in another spelling" '127.0.0.1 is loopback' '{"url":"http://2130706433:8080/"}'
bad "v4-mapped loopback" '127.0.0.1 is loopback' '{"url":"http://[::ffff:127.0.0.1]:8080/"}'
bad "private" '10.1.2.3 is private-use' '{"url":"http://10.1.2.3/"}'
bad "cloud metadata" 'metadata' '{"url":"http://169.254.169.254/latest"}'
bad "IPv6 link-local" 'link-local' '{"url":"http://[fe80::1]/"}'
bad "a name that resolves to loopback" 'localhost resolves to 127.0.0.1 is loopback' '{"url":"http://localhost:8080/"}'
bad "an unknown event type" 'events\[0\]: not an event type' '{"url":"http://hooks.test:8080/","events":["sandbox.lifecycle.exploded"]}'
bad "no events at all" 'at least one event type' '{"url":"http://hooks.test:8080/","events":[]}'
bad "a short secret" 'signatureSecret: 16 to 256' '{"url":"http://hooks.test:8080/","signatureSecret":"short"}'
bad "an unknown field" 'unknown field \\"teamID\\"' '{"url":"http://hooks.test:8080/","teamID":"x"}'
al_eq "another key's webhook: 404" "$(code "$CP_URL/events/webhooks/00000000-0000-4000-8000-000000000000")" 404
al_eq "PUT is not a method here" "$(code -X PUT "$CP_URL/events/webhooks/$A" -d '{}')" 405

al_note "deliveries: retried after 500, then delivered, signed"
SB=$(cp_create '{"templateID":"base","timeout":600}')
al_check "a sandbox" test -n "$SB"
al_ok "kill it" cp_cli sandbox kill "$SB"
al_check "the flaky receiver got the created event three times, then the killed one three times" \
  al_wait_until 60 eval '[ "$(got /flaky | wc -l)" -ge 6 ]'
al_eq "500, 500, 200 for each, every one signed both ways and timely" "$(got /flaky)" \
  "created 500 True True True
created 500 True True True
created 200 True True True
killed 500 True True True
killed 500 True True True
killed 200 True True True"
al_wait_until 30 eval '[ "$(outcomes "$A" | tail -1)" = "killed 3 delivered 200" ]'
al_eq "the history, oldest first" "$(outcomes "$A")" \
  "created 1 retrying 500
created 2 retrying 500
created 3 delivered 200
killed 1 retrying 500
killed 2 retrying 500
killed 3 delivered 200"
al_match "its stats" '"attempts": *\{"delivered": *2, *"retrying": *4, *"failed": *0, *"dropped": *0\}, *"queued": *0' \
  cp_api "$CP_URL/events/webhooks/$A/stats"
al_eq "each attempt has its own delivery id, all with the webhook's id and v1" \
  "$(python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "\"/flaky\"" in l]
print(len({x["delivery"] for x in r}), {x["webhook"] for x in r} == {sys.argv[2]}, {x["version"] for x in r})' "$AL_TMP/hooks.jsonl" "$A")" \
  "6 True {'v1'}"
al_check "https: both events, the certificate checked for hooks.test (SNI)" \
  al_wait_until 60 eval '[ "$(got /tls | wc -l)" -ge 2 ]'
al_eq "... signed with the secret airlockd made" "$(got /tls)" "created 200 True True True
killed 200 True True True"
al_match "... SNI and Host name hooks.test" '"host": "hooks.test:8443", "sni": "hooks.test"' grep '"/tls"' "$AL_TMP/hooks.jsonl"
al_wait_until 30 eval '[ "$(outcomes "$B" | tail -1)" = "killed 1 delivered 200" ]'
al_match "the dialled address is recorded" '"address": *"203.0.113.20"' cp_api "$CP_URL/events/webhooks/$B/deliveries?limit=1"

al_note "a redirect is not followed"
OUT=$(register '{"name":"redir","url":"http://hooks.test:8080/redirect","events":["sandbox.lifecycle.created"],"signatureSecret":"'"$SECRET"'"}')
R=$(field id <<<"$OUT")
al_eq "PATCH: the others stop for a while" "$(code -X PATCH "$CP_URL/events/webhooks/$B" -d '{"enabled":false}')" 200
SB2=$(cp_create '{"templateID":"base","timeout":600}')
al_check "three attempts, then failed" al_wait_until 60 eval '[ "$(outcomes "$R" | tail -1)" = "created 3 failed 302" ]'
al_match "... saying why" 'answered 302: redirects are not followed' cp_api "$CP_URL/events/webhooks/$R/deliveries?limit=1"
al_fail "... and its Location was never asked for" grep -q '"/elsewhere"' "$AL_TMP/hooks.jsonl"
al_eq "delete it: 200" "$(code -X DELETE "$CP_URL/events/webhooks/$R")" 200
al_eq "... then it is gone" "$(code "$CP_URL/events/webhooks/$R")" 404

al_note "DNS pinned: the name now resolves to loopback"
al_check "flaky got the created event of the second sandbox first" \
  al_wait_until 60 eval '[ "$(got /flaky | wc -l)" -ge 9 ]'
set_hosts 127.0.0.1
al_ok "kill the second sandbox" cp_cli sandbox kill "$SB2"
al_check "its killed event: refused at each attempt, then failed" \
  al_wait_until 60 eval '[ "$(outcomes "$A" | tail -1)" = "killed 3 failed None" ]'
al_match "... saying why" 'refused: hooks.test resolves to 127.0.0.1 is loopback' \
  cp_api "$CP_URL/events/webhooks/$A/deliveries?limit=1"
al_eq "nothing reached loopback" "$(n_lines "$AL_TMP/loopback.jsonl")" 0
al_eq "... nor the old address after the change" "$(got /flaky | wc -l)" 9
set_hosts "$HOOK"

al_note "PATCH"
al_eq "a URL on loopback: 400" "$(code -X PATCH "$CP_URL/events/webhooks/$A" -d '{"url":"http://127.0.0.1:8080/"}')" 400
al_eq "an http URL is fine here (webhooks.allow_http)" "$(code -X PATCH "$CP_URL/events/webhooks/$A" -d '{"url":"http://hooks.test:8080/flaky","enabled":false}')" 200
al_match "the change shows" '"enabled": *false' cp_api "$CP_URL/events/webhooks/$A"

al_note "a bounded queue: the oldest event is dropped"
OUT=$(register '{"name":"hold","url":"http://hooks.test:8080/hold","events":["sandbox.lifecycle.created"],"signatureSecret":"'"$SECRET"'"}')
H=$(field id <<<"$OUT")
secret_for /hold "$SECRET"
SBS=()
for i in 1 2 3 4 5; do SBS+=("$(cp_create '{"templateID":"base","timeout":600}')"); done
al_check "five sandboxes" test "${#SBS[@]}" -eq 5
hold_stats() { cp_api "$CP_URL/events/webhooks/$H/stats"; }
al_wait_until 30 eval 'hold_stats | grep -q "\"queued\": *4"'
al_match "one in flight, three waiting, one dropped" '"dropped": *1\}, *"queued": *4' hold_stats
al_match "... recorded with why" '"outcome": *"dropped".*queue is full' cp_api "$CP_URL/events/webhooks/$H/deliveries?limit=1"
al_match "... and logged" 'webhook '"$H"': event [0-9a-f-]+ dropped: the queue is full' cat "$AL_TMP/airlockd.log"
touch "$AL_TMP/release"
al_check "the four others are delivered" al_wait_until 60 eval '[ "$(got /hold | wc -l)" -ge 4 ]'
al_eq "... in order, the second one missing" \
  "$(python3 -c '
import json, sys
print(" ".join(json.loads(l)["sandbox"] for l in open(sys.argv[1]) if "\"/hold\"" in l))' "$AL_TMP/hooks.jsonl")" \
  "${SBS[0]} ${SBS[2]} ${SBS[3]} ${SBS[4]}"
al_eq "disabled webhooks got none of the five" "$(got /flaky | wc -l) $(got /tls | wc -l)" "9 2"

al_note "per key, and kept"
al_ok "a second API key" cp_cli apikey create other
KEY2=$(grep -E '^e2b_[0-9a-f]{40}$' <<<"$AL_OUT")
other() { nsenter --net="/run/netns/$CP_HOSTNS" curl -sS -H "X-API-KEY: $KEY2" "$@"; }
al_eq "it lists none" "$(other "$CP_URL/events/webhooks")" "[]"
al_eq "... and cannot read, change or delete them" \
  "$(for m in GET PATCH DELETE; do other -o /dev/null -w '%{http_code} ' -X $m "$CP_URL/events/webhooks/$A" -d '{}'; done)" \
  "404 404 404 "
al_kill airlockd TERM
cp_start || exit 1
al_eq "after a restart: the same three" "$(cp_api "$CP_URL/events/webhooks" | python3 -c 'import json,sys; print(" ".join(w["name"] for w in json.load(sys.stdin)))')" "flaky tls hold"
al_eq "... and re-enabled, flaky signs with the same secret" "$(code -X PATCH "$CP_URL/events/webhooks/$A" -d '{"enabled":true}')" 200
SB3=$(cp_create '{"templateID":"base","timeout":600}')
al_check "its event arrives, signed" al_wait_until 60 eval '[ "$(got /flaky | wc -l)" -ge 12 ]'
al_eq "... after two 500s" "$(got /flaky | tail -3 | tr '\n' ' ')" \
  "created 500 True True True created 500 True True True created 200 True True True "
al_done
