#!/usr/bin/env bash
# tests/integration/cp_egress.sh: the whole system end to end, egress included.
#
# airlockd (jail sandboxes, the vswitch, airlock-egress and airlock-vault as it runs them by
# itself) in a "host" namespace whose only other link goes to an "up" namespace: the fake
# internet on documentation addresses (203.0.113.0/24) with a fake DNS and fake HTTP
# servers. No namespace has a route out of the machine. A sandbox created through the API
# with a policy named in its metadata then:
#   - reaches an allowed fake upstream by name (DNS from its gateway, HTTP through the proxy);
#   - cannot resolve a name outside its policy (NXDOMAIN), cannot reach a denied host by
#     address (403 with the reason), cannot send UDP anywhere, cannot use a DNS server of
#     its own choosing to learn a name the policy does not allow;
#   - each of these is in the audit log with the sandbox's id and the reason, and
#     `airlock audit verify` passes; Prometheus and the overview's series count the denials;
# and after the sandbox is killed and airlockd is stopped nothing is left: interfaces,
# cgroups, mounts, processes, bpffs pins.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_egress: $b is not built: SKIP"; exit 0; }
done
[ -f "$CP_ET" ] || { echo "cp_egress: egress_tool.py is missing: SKIP"; exit 0; }

cp_world cp_egress jail on
STATE=$CP_STATE
HOSTNS=$CP_HOSTNS
al_note "airlockd, as deploy/up runs it, plus this world's settings"
cp_start || exit 1
cli() { cp_cli "$@"; }
sbx_exec() { cli sandbox exec "$SB" -- "$@"; }

al_ok "a sandbox with the e2e policy" cli sandbox create base --policy e2e --timeout 600
SB=$(cli sandbox ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["sandboxID"])')
al_note "sandbox $SB"
GW=$(sbx_exec sh -c "awk '/^nameserver/ {print \$2; exit}' /etc/resolv.conf")
al_note "its DNS server (the gateway): $GW"

al_note "allowed"
al_match "DNS for an allowed name" "203.0.113.10" sbx_exec dig +short +time=3 +tries=1 allowed.test
al_match "HTTP to the allowed upstream by name" '"server": "good"' \
  sbx_exec curl -sS -m 10 http://allowed.test/cp-e2e
al_match "the upstream saw it" "REQ good GET /cp-e2e" cat "$AL_TMP/up.req"

al_note "denied"
al_match "DNS for a name outside the policy: NXDOMAIN" "NXDOMAIN" \
  sbx_exec dig +time=3 +tries=1 evil.test
al_match "DNS asked of another server is still the proxy's answer" "NXDOMAIN" \
  sbx_exec dig +time=3 +tries=1 @203.0.113.53 evil.test
al_match "a denied host by address: 403 with the reason" '"error":"blocked_by_policy".*"reason":"no_rule_matched"' \
  sbx_exec curl -sS -m 10 http://203.0.113.11/cp-e2e-raw-ip
al_match "a denied TLS name: reset, not answered (curl 35 or 56)" '\((35|56)\)$' \
  sbx_exec sh -c 'curl -sS -m 10 -k --resolve evil.test:443:203.0.113.10 https://evil.test/cp-e2e-tls 2>&1; echo "($?)"'
al_fail "a denied Host header is refused" sbx_exec curl -fsS -m 10 -H 'Host: evil.test' http://203.0.113.11/x
al_ok "UDP datagrams can be sent (the sandbox cannot tell)..." \
  sbx_exec python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b"leak", ("203.0.113.10", 443)) for _ in range(5)]'
udp_drops() {
  nsenter --net="/run/netns/$HOSTNS" "$AIRLOCK_BIN/airlock" --state-dir "$STATE" vswitch status --json |
    python3 -c 'import json,sys
doc = json.load(sys.stdin)
def ifaces(x):
    if isinstance(x, dict):
        if "label" in x and "counters" in x: yield x
        for v in x.values(): yield from ifaces(v)
    elif isinstance(x, list):
        for v in x: yield from ifaces(v)
print(sum(i["counters"].get("udp", {}).get("packets", 0) for i in ifaces(doc) if i["label"] == sys.argv[1]))' "$SB"
}
udp_dropped() { [ "$(udp_drops)" -ge 5 ]; }
# Once the switch has counted all five as dropped, none of them can still be on its way.
al_check "... they are dropped by the switch and counted for this sandbox as \"udp\"" \
  al_wait_until 60 udp_dropped
al_fail "... and none reaches the upstream" grep -q '^DGRAM' "$AL_TMP/udp.log"
al_fail "nothing denied reached an upstream" grep -q 'REQ evil' "$AL_TMP/up.req"

al_note "E2B network fields only narrow: allow_internet_access=false under the same policy"
URL=$CP_URL
api() { cp_api "$@"; }
SB2=$(api -X POST "$URL/v2/sandboxes" -d '{"templateID":"base","timeout":300,
  "metadata":{"airlock.policy":"e2e"},"allow_internet_access":false}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])')
al_note "sandbox $SB2 (no internet)"
sb2_exec() { cli sandbox exec "$SB2" -- "$@"; }
al_fail "the allowed name does not resolve any more" sb2_exec curl -sS -m 8 http://allowed.test/no
al_match "nor does the allowed address answer" '"reason":"sandbox_network_denies"' \
  sb2_exec curl -sS -m 8 -H 'Host: allowed.test' http://203.0.113.10/no-internet
al_match "its details say so" '"allowInternetAccess":false' api "$URL/sandboxes/$SB2"
al_fail "nothing of it reached an upstream" grep -q 'REQ good GET /no' "$AL_TMP/up.req"
al_ok "kill it" cli sandbox kill "$SB2"

al_note "airlock-egress dies: airlockd restarts it and registers the sandbox again"
EPID=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT value FROM meta WHERE key=?", ("daemon.egress.pid",)).fetchone()[0])' "$STATE/airlockd.db")
al_ok "kill -9 airlock-egress ($EPID)" kill -KILL "$EPID"
served_again() {
  grep -q '"server": "good"' <<<"$(sbx_exec curl -sS -m 3 http://allowed.test/after-egress-restart 2>/dev/null)"
}
al_check "the sandbox reaches the allowed upstream again" al_wait_until 120 served_again
al_match "airlockd restarted it" "airlock-egress \\(pid $EPID\\) killed by signal 9" cat "$AL_TMP/airlockd.log"
al_match "... and it still denies the rest" '"reason":"no_rule_matched"' \
  sbx_exec curl -sS -m 8 http://203.0.113.11/after-egress-restart

al_note "the audit log"
curl -s --unix-socket "$STATE/run/egress.sock" -X POST http://egress/v1/audit/sync >/dev/null
al_match "the allowed request, with the sandbox's id" "\"sandbox\":\"$SB\"" \
  cli audit query --sandbox "$SB" --decision allow --json
DENIES=$(cli audit query --sandbox "$SB" --decision deny --json)
audit_has() { # audit_has WHAT FIELD=VALUE...: one deny record of $SB has every field
  local what=$1
  shift
  al_ok "$what" python3 -c 'import json,sys
want = dict(a.split("=", 1) for a in sys.argv[2:])
recs = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip().startswith("{")]
def flat(r, p=""):
    for k, v in r.items():
        if isinstance(v, dict): yield from flat(v, p + k + ".")
        else: yield p + k, str(v)
ok = any(all(dict(flat(r)).get(k) == v or r.get(k) == v for k, v in want.items()) for r in recs)
sys.exit(0 if ok else 1)' "$DENIES" "$@"
}
audit_has "the denied address: an http_request record, no_rule_matched" \
  type=http_request reason=no_rule_matched sandbox="$SB"
audit_has "the refused DNS name: a dns record for evil.test" type=dns_query qname=evil.test sandbox="$SB"
audit_has "the denied TLS name: a connection record with its SNI" sni=evil.test reason=no_rule_matched
al_match "the refused DNS name" "evil.test" echo "$DENIES"
al_ok "airlock audit verify passes" cli audit verify

al_note "metrics and teardown"
scrape_once() { nsenter --net="/run/netns/$HOSTNS" curl -s "$URL/metrics" | grep -E "$1"; }
# The proxy's counters are fetched in the background: the first scrape may predate them.
scrape() { al_wait_until 60 scrape_once "$1"; }
al_ok "Prometheus shows the egress decisions" \
  scrape 'airlock_egress_decisions_total\{kind="(http|dns)",decision="deny"\} [1-9]'
al_ok "... and the sandboxes" scrape 'airlock_sandboxes\{state="running"\} 1'
# The overview's chart of decisions follows the same counters: they have answered (the scrape
# above), so a denial made now is in the series as their growth.
series_denied() {
  cp_api "$URL/admin/overview/series" | python3 -c 'import json,sys
d = json.load(sys.stdin)
assert d["egressProxy"] is True
print(sum(b["connectionDeny"] + b["httpDeny"] + b["dnsDeny"] for b in d["egress"]))'
}
DENIED0=$(series_denied)
al_check "the overview's series of egress decisions answers" test -n "$DENIED0"
al_match "one more denied request" '"reason":"no_rule_matched"' \
  sbx_exec curl -sS -m 8 http://203.0.113.11/for-the-chart
more_denied() { [ "$(series_denied)" -gt "${DENIED0:-0}" ]; }
al_check "... is counted in it (GET /admin/overview/series)" al_wait_until 60 more_denied
PINS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pin_dir"])' \
  "$STATE/vswitch/instance.json" 2>/dev/null)
al_note "the switch's pins: ${PINS:-?}"
al_match "the sandbox's logs (its agent's output)" "process [0-9]+ started" cli sandbox logs "$SB"
al_ok "kill" cli sandbox kill "$SB"
al_kill airlockd TERM
al_eq "airlockd stopped" "$(kill -0 "$(al_pid airlockd)" 2>/dev/null && echo running || echo gone)" gone
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_eq "the switch is removed (no bpffs pins left)" "$([ -n "$PINS" ] && [ -e "$PINS" ] && echo left || echo gone)" gone
al_done
