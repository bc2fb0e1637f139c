#!/usr/bin/env bash
# tests/integration/cp_forward.sh: a sandbox's other ports (getHost), end to end.
#
# airlockd (jail sandboxes, network on: the vswitch, airlock-egress) in the cp_world. A server
# started inside a sandbox (python3 -m http.server, in the background) is reached through
# airlockd by port, as the SDK's E2B_SANDBOX_URL traffic names it (E2b-Sandbox-Id/-Port) and
# as getHost(port) builds it (Host "<port>-<id>.<domain>"):
#   - only with the sandbox's traffic access token (or its envd token); the traffic token
#     does not open envd;
#   - a 48 MiB file streams through byte for byte, a closed port is a 502 that says so,
#     a server dying mid-download makes the client's download fail (never a short file),
#     a WebSocket echo on a loopback-only server works;
#   - none of it touches the sandbox network: the sandbox interface's counters on the host
#     side do not move, and the egress audit log has no record of it.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_forward: $b is not built: SKIP"; exit 0; }
done
FT="$AIRLOCK_SOURCE_DIR/tests/integration/fwd_tool.py"

cp_world cp_forward jail on
printf 'api:\n  domain: sbx.test\n' >>"$AL_TMP/airlockd.yaml"
cp_start || exit 1
HOSTNS=$CP_HOSTNS
URL=$CP_URL
ADDR=${URL#http://}
api() { cp_api "$@"; }
in_host() { nsenter --net="/run/netns/$HOSTNS" "$@"; }

al_note "a sandbox, with its tokens"
CREATED=$(api -X POST "$URL/v2/sandboxes" -d '{"templateID":"base","timeout":600,"metadata":{"airlock.policy":"e2e"}}')
SB=$(echo "$CREATED" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])')
TOK=$(echo "$CREATED" | python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])')
TT=$(echo "$CREATED" | python3 -c 'import json,sys; print(json.load(sys.stdin)["trafficAccessToken"] or "")')
al_note "sandbox $SB"
al_match "its trafficAccessToken is set (64 hex digits)" '^[0-9a-f]{64}$' echo "$TT"
sbx() { cp_exec "$SB" "$@"; }
# Files go in through the data plane (envd /files), as the SDK's files.write does.
upload() {
  in_host curl -sS -f -H "E2b-Sandbox-Id: $SB" -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $TOK" \
    -F "file=@$1;filename=$2" "$URL/files?path=$2" >/dev/null
}
# Through airlockd to a port of the sandbox: by the sandbox headers.
fwd() {
  local port=$1
  shift
  in_host curl -sS -H "E2b-Sandbox-Id: $SB" -H "E2b-Sandbox-Port: $port" "$@"
}

# "<status> <body>" of a forwarded request.
fwd_sb() {
  local port=$1 out
  shift
  out=$(fwd "$port" -w '\n%{http_code}' "$@") || return 1
  printf '%s %s\n' "$(tail -n1 <<<"$out")" "$(sed '$d' <<<"$out")"
}

al_note "servers inside the sandbox, started in the background"
al_ok "a 48 MiB file" sbx sh -c 'head -c 50331648 /dev/urandom >/tmp/big.bin'
SUM=$(sbx sha256sum /tmp/big.bin | awk '{print $1}')
al_ok "python3 -m http.server 8000 (in the background)" \
  sbx sh -c 'cd /tmp && setsid python3 -m http.server 8000 >/tmp/http.log 2>&1 </dev/null &'
al_ok "the tool" upload "$FT" /tmp/fwd_tool.py
al_ok "a WebSocket echo on 127.0.0.1:8765 only" \
  sbx sh -c 'setsid python3 /tmp/fwd_tool.py ws-server 8765 >/tmp/ws.log 2>&1 </dev/null &'
al_ok "a server that dies mid-download on 127.0.0.1:8766" \
  sbx sh -c 'setsid python3 /tmp/fwd_tool.py cut-server 8766 >/tmp/cut.log 2>&1 </dev/null &'
up=no
answers() { [ "$(fwd 8000 -H "E2B-Traffic-Access-Token: $TT" -o /dev/null -w '%{http_code}' "$URL/" 2>/dev/null)" = 200 ]; }
al_wait_until 120 answers && up=yes
al_eq "the server answers through airlockd" "$up" yes

# What the sandbox network sees from here on: the host side of its interface, and the
# egress proxy's audit records for the sandbox.
iface_bytes() {
  ip -n "$HOSTNS" -s -j link show | python3 -c '
import json, sys
n = 0
for l in json.load(sys.stdin):
    if l["ifname"].startswith(sys.argv[1]):
        s = l.get("stats64") or l.get("stats") or {}
        n += s["rx"]["bytes"] + s["tx"]["bytes"]
print(n)' "$CP_PREFIX"
}
# Packets the vswitch saw from or to the sandbox (every reason, its label).
vswitch_packets() {
  in_host "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE" vswitch status --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
def ifaces(x):
    if isinstance(x, dict):
        if "label" in x and "counters" in x: yield x
        for v in x.values(): yield from ifaces(v)
    elif isinstance(x, list):
        for v in x: yield from ifaces(v)
found = [i for i in ifaces(doc) if i["label"] == sys.argv[1]]
if not found: sys.exit("no vswitch interface labelled " + sys.argv[1])
print(sum(c.get("packets", 0) for i in found for c in i["counters"].values()))' "$SB"
}
audit_count() {
  curl -s --unix-socket "$CP_STATE/run/egress.sock" -X POST http://egress/v1/audit/sync >/dev/null
  cp_cli audit query --sandbox "$SB" --json 2>/dev/null | grep -c '"sandbox"' || true
}
NET0=$(iface_bytes)
VS0=$(vswitch_packets) || { echo "cp_forward: cannot read the vswitch counters" >&2; exit 1; }
AUD0=$(audit_count)
al_note "before: interface bytes $NET0, vswitch packets $VS0, audit records $AUD0"

al_note "tokens"
al_match "without a token: 403 (E2B's status), saying which token" '^403 .*E2B-Traffic-Access-Token' \
  fwd_sb 8000 "$URL/"
al_match "a wrong traffic token: 403" '^403$' \
  fwd 8000 -H "E2B-Traffic-Access-Token: 00" -o /dev/null -w '%{http_code}' "$URL/"
al_match "the envd token works too" '^200$' \
  fwd 8000 -H "X-Access-Token: $TOK" -o /dev/null -w '%{http_code}' "$URL/"
al_match "the traffic token does not open envd" '^401$' \
  fwd 49983 -H "E2B-Traffic-Access-Token: $TT" -X POST -H 'Content-Type: application/json' \
  -H 'Connect-Protocol-Version: 1' -d '{}' -o /dev/null -w '%{http_code}' "$URL/process.Process/List"

al_note "by port (E2B_SANDBOX_URL traffic) and by Host (getHost)"
al_ok "48 MiB through airlockd" \
  fwd 8000 -H "E2B-Traffic-Access-Token: $TT" -o "$AL_TMP/big.bin" "$URL/big.bin"
al_eq "byte for byte" "$(sha256sum "$AL_TMP/big.bin" | awk '{print $1}')" "$SUM"
rm -f "$AL_TMP/big.bin"
al_match "by Host 8000-<id>.sbx.test: the directory listing" 'big\.bin' \
  in_host curl -sS -H "Host: 8000-$SB.sbx.test" -H "E2B-Traffic-Access-Token: $TT" "$URL/"
al_match "it reached the sandbox's own server (its log)" "\"GET /big.bin HTTP/1.1\" 200" \
  sbx cat /tmp/http.log
al_match "a closed port: 502, saying so" '^502 .*port 8001 is not open in the sandbox' \
  fwd_sb 8001 -H "E2B-Traffic-Access-Token: $TT" "$URL/"

al_note "a server that dies in the middle of a download"
for kind in length chunked; do
  fwd 8766 -H "E2B-Traffic-Access-Token: $TT" -o "$AL_TMP/cut.bin" "$URL/$kind" 2>"$AL_TMP/cut.err"
  rc=$?
  al_check "($kind) the client's download fails (curl exit $rc: $(tr -d '\n' <"$AL_TMP/cut.err"))" \
    test "$rc" -ne 0
  al_check "($kind) after what did arrive" test "$(stat -c %s "$AL_TMP/cut.bin" 2>/dev/null || echo 0)" -gt 0
done

al_note "WebSocket (a loopback-only server, as dev servers with live reload run)"
al_match "by port" '^WS OK$' \
  in_host python3 "$FT" ws-client "$ADDR" "$ADDR" "E2b-Sandbox-Id: $SB" "E2b-Sandbox-Port: 8765" \
  "E2B-Traffic-Access-Token: $TT"
al_match "by Host" '^WS OK$' \
  in_host python3 "$FT" ws-client "$ADDR" "8765-$SB.sbx.test" "E2B-Traffic-Access-Token: $TT"
al_fail "without a token the switch is refused" \
  in_host python3 "$FT" ws-client "$ADDR" "8765-$SB.sbx.test"

al_note "none of it used the sandbox network"
NET1=$(iface_bytes)
VS1=$(vswitch_packets)
AUD1=$(audit_count)
al_note "after: interface bytes $NET1, vswitch packets $VS1, audit records $AUD1"
al_eq "the sandbox interface's counters did not move (over 100 MiB were forwarded)" "$NET1" "$NET0"
al_eq "the vswitch counted no packet of the sandbox" "$VS1" "$VS0"
al_eq "no egress audit record for the forwarded traffic" "$AUD1" "$AUD0"
al_note "(the same instruments do see the sandbox's own network traffic)"
al_match "the sandbox reaches its allowed upstream" '"server": "good"' \
  sbx curl -sS -m 10 http://allowed.test/cp-forward-proof
al_check "... and the interface counters moved" test "$(iface_bytes)" -gt "$NET1"
al_check "... and the vswitch counted it" test "$(vswitch_packets)" -gt "$VS1"
# (airlock-egress writes the record once it has relayed the answer: wait for it.)
al_wait_until 60 eval '[ "$(audit_count)" -gt "$AUD1" ]' || true
al_check "... and it is in the audit log" test "$(audit_count)" -gt "$AUD1"

al_note "teardown"
al_ok "kill" cp_cli sandbox kill "$SB"
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
