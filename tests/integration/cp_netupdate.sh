#!/usr/bin/env bash
# tests/integration/cp_netupdate.sh: sbx.updateNetwork() end to end, with a real sandbox and
# the real SDK (tests/e2b/sdk-driver.mjs: create, updateNetwork, getInfo, commands.run).
#
# airlockd (jail sandboxes, the vswitch, airlock-egress) in cp_world's namespaces. A sandbox
# whose policy allows allowed.test and evil.test holds a keep-alive HTTP connection to each;
# PUT /sandboxes/{id}/network then leaves it allowed.test only:
#   - the connection to evil.test is reset (the sandbox's next request on it fails), the one
#     to allowed.test keeps working, and the audit log names the update on the reset one;
#   - new requests to evil.test are refused (403 sandbox_network_denies) and its name no
#     longer resolves; the update is audited with the API key and is an updated event;
#   - getInfo shows the new fields, and they hold after airlockd is killed and started again
#     (the sandbox adopted) and after airlock-egress is killed (registered again with them);
#   - an update that would widen is a 400 and changes nothing; {} clears the fields.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_netupdate: $b is not built: SKIP"; exit 0; }
done
E2B_DIR="$AIRLOCK_SOURCE_DIR/tests/e2b"
"$E2B_DIR/setup" || { echo "cp_netupdate: the E2B SDK cannot be installed (tests/e2b/setup)" >&2; exit 1; }
cp_world cp_netupdate jail on
cat >"$CP_STATE/policies/both.yaml" <<'YAML'
version: 1
name: both
rules:
  - name: web
    hosts: [allowed.test, evil.test]
    ports: [80]
    scheme: http
YAML
cp_start || exit 1
code() { cp_api -o /dev/null -w '%{http_code}' "$@"; }
# sdk OP ARGS...: the real SDK (tests/e2b/sdk-driver.mjs), from the host namespace.
sdk() {
  nsenter --net="/run/netns/$CP_HOSTNS" -- env -u E2B_DEBUG E2B_API_URL="$CP_URL" \
    E2B_SANDBOX_URL="$CP_URL" E2B_API_KEY="$CP_KEY" timeout 120 node "$E2B_DIR/sdk-driver.mjs" "$@"
}
# sdk_refused OP ARGS...: an SDK call that is expected to fail (its JSON error is the output).
sdk_refused() { ! sdk "$@"; }
# srun ID CMD: stdout and stderr of CMD in the sandbox, through the SDK's commands.run.
srun() {
  sdk run "$1" "$2" | python3 -c 'import json,sys; r=json.load(sys.stdin)
print(r.get("stdout", ""), r.get("stderr", ""), r.get("error") or "")'
}
# info: the network fields of the SDK's getInfo.
info() { sdk info "$SB" | python3 -c 'import json,sys; d=json.load(sys.stdin)
print(json.dumps({"network": d.get("network"), "allowInternetAccess": d.get("allowInternetAccess")}, sort_keys=True))'; }
gen() { cp_api "$CP_URL/sandboxes/$SB" | python3 -c 'import json,sys; print(json.load(sys.stdin)["networkGeneration"])'; }
egress_pid() {
  python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT value FROM meta WHERE key=?", ("daemon.egress.pid",)).fetchone()[0])' "$CP_STATE/airlockd.db"
}

SB=$(sdk create base '{"timeoutMs":900000,"metadata":{"airlock.policy":"both"}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin).get("sandboxId", ""))')
al_check "a sandbox with policy both" test -n "$SB"
al_note "sandbox $SB"

# The sandbox's client: one keep-alive connection to each host, one request each, READY;
# once ./go exists one more request on each: "NAME alive" or "NAME closed HOW".
HOLD='
import os, socket, time
def ex(host, s, n):
    s.sendall(("GET /hold-%s-%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, n, host)).encode())
    d = b""
    while b"\r\n\r\n" not in d:
        c = s.recv(65536)
        if not c:
            return "eof"
        d += c
    head, _, body = d.partition(b"\r\n\r\n")
    cl = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
    while cl and len(body) < cl[0]:
        c = s.recv(65536)
        if not c:
            return "eof"
        body += c
    return None if head.startswith(b"HTTP/1.1 200") else "status " + head[:12].decode()
conns = [(n, h, socket.create_connection((h, 80), timeout=10)) for n, h in (("keep", "allowed.test"), ("drop", "evil.test"))]
for n, h, s in conns:
    print(n, "first", ex(h, s, 1) or "ok", flush=True)
print("READY", flush=True)
t = time.time() + 300
while not os.path.exists("go") and time.time() < t:
    time.sleep(0.05)
for n, h, s in conns:
    try:
        r = ex(h, s, 2)
    except ConnectionResetError:
        r = "reset"
    except OSError as e:
        r = type(e).__name__
    print(n, "alive" if r is None else "closed " + r, flush=True)
print("DONE", flush=True)
'
al_ok "the sandbox opens its two connections" cp_exec "$SB" sh -c 'python3 -c "$1" >hold.log 2>&1 &' sh "$HOLD"
al_check "both made their first request" al_wait_until 120 eval 'grep -q READY <<<"$(cp_exec "$SB" cat hold.log 2>/dev/null)"'
al_match "... allowed.test answered" 'keep first ok' cp_exec "$SB" cat hold.log
al_match "... evil.test answered" 'drop first ok' cp_exec "$SB" cat hold.log

al_note "the update: allowed.test only"
al_match "sbx.updateNetwork that would widen: a 400 naming it" \
  "would allow all traffic.*\"statusCode\":400" sdk_refused network "$SB" '{"allowOut":["0.0.0.0/0"]}'
al_match "sbx.updateNetwork({allowOut: [allowed.test], allowInternetAccess: false})" '"updated":true' \
  sdk network "$SB" '{"allowOut":["allowed.test"],"allowInternetAccess":false}'
WANT='{"allowInternetAccess": false, "network": {"allowOut": ["allowed.test"]}}'
al_eq "getInfo shows the new fields" "$(info)" "$WANT"
al_eq "... and the update's generation (the refused one took none)" "$(gen)" 1
UPDATE=$(sed -n 's/.*network fields replaced (update \(nu_[0-9a-f]*\), key env.*/\1/p' "$AL_TMP/airlockd.log" | tail -1)
al_check "airlockd logged the update with the key ($UPDATE)" test -n "$UPDATE"
cp_audit_match "the update is audited by airlock-egress with the key" \
  "\"event\":\"network_update\".*\"update\":\"$UPDATE\"|\"update\":\"$UPDATE\".*\"event\":\"network_update\"" \
  --sandbox "$SB" --type sandbox --json
al_match "... with the key that asked" "\"update\":\"$UPDATE\".*\"api_key_id\":\"env\"|\"api_key_id\":\"env\".*\"update\":\"$UPDATE\"" \
  cp_cli audit query --sandbox "$SB" --type sandbox --json
al_match "... with its generation" "\"update\":\"$UPDATE\".*\"generation\":1[,}]|\"generation\":1,.*\"update\":\"$UPDATE\"" \
  cp_cli audit query --sandbox "$SB" --type sandbox --json
cp_audit_match "the connection to evil.test ended by the update" \
  "\"end\":\"network_update\"" --sandbox "$SB" --type connection_end --json
al_match "... naming it" "\"network_update\":\"$UPDATE\"" cp_cli audit query --sandbox "$SB" --type connection_end --json
al_ok "the sandbox uses its connections again" cp_exec "$SB" touch go
al_check "it has tried" al_wait_until 60 eval 'grep -q DONE <<<"$(cp_exec "$SB" cat hold.log 2>/dev/null)"'
al_match "allowed.test: still alive" 'keep alive' cp_exec "$SB" cat hold.log
al_match "evil.test: closed" 'drop closed' cp_exec "$SB" cat hold.log
al_fail "the second request to evil.test never reached it" grep -q 'GET /hold-evil.test-2 ' "$AL_TMP/up.req"
al_match "the second request to allowed.test did" 'GET /hold-allowed.test-2 ' cat "$AL_TMP/up.req"
al_match "a new request to evil.test: 403 sandbox_network_denies" '"reason":"sandbox_network_denies"' \
  srun "$SB" "curl -sS -m 10 -H 'Host: evil.test' http://203.0.113.11/after"
al_match "evil.test no longer resolves" 'NXDOMAIN' srun "$SB" 'dig +time=3 +tries=1 evil.test'
al_match "allowed.test still works" '"server": "good"' srun "$SB" 'curl -sS -m 10 http://allowed.test/after'
al_match "an updated event with the update's id" "\"network_update\": *\\{\"updateId\": *\"$UPDATE\"" \
  cp_api "$CP_URL/events/sandboxes/$SB?types=sandbox.lifecycle.updated"

al_note "kept across restarts"
al_kill airlockd KILL
cp_start || exit 1
al_eq "after airlockd's restart: getInfo" "$(info)" "$WANT"
al_eq "... the same generation" "$(gen)" 1
al_match "evil.test is still refused" '"reason":"sandbox_network_denies"' \
  cp_exec "$SB" curl -sS -m 10 -H 'Host: evil.test' http://203.0.113.11/after-restart
EPID=$(egress_pid)
al_ok "kill -9 airlock-egress ($EPID)" kill -KILL "$EPID"
back() { grep -q '"server": "good"' <<<"$(cp_exec "$SB" curl -sS -m 5 http://allowed.test/back 2>/dev/null)"; }
al_check "airlockd restarts it and registers the sandbox again" al_wait_until 120 back
al_match "registered with the stored fields: evil.test refused" '"reason":"sandbox_network_denies"' \
  cp_exec "$SB" curl -sS -m 10 -H 'Host: evil.test' http://203.0.113.11/after-egress

al_note "{} clears the fields"
al_match "sbx.updateNetwork({}): every field cleared" '"updated":true' sdk network "$SB" '{}'
al_eq "getInfo: no network fields" "$(info)" '{"allowInternetAccess": null, "network": null}'
al_eq "... generation 2" "$(gen)" 2
al_match "evil.test is reachable again (the policy allows it)" '"server": "evil"' \
  srun "$SB" 'curl -sS -m 10 http://evil.test/cleared'
al_ok "airlock audit verify passes" cp_cli audit verify

al_ok "kill" cp_cli sandbox kill "$SB"
al_kill airlockd TERM
al_eq "nothing left behind" "$(cp_leaks_settled)" ""
al_done
