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
#     `airlock audit verify` passes;
# and after the sandbox is killed and airlockd is stopped nothing is left: interfaces,
# cgroups, mounts, processes, bpffs pins.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/lib/netns.sh"
ET="$AIRLOCK_SOURCE_DIR/tests/integration/egress_tool.py"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_egress: $b is not built: SKIP"; exit 0; }
done
[ -f "$ET" ] || { echo "cp_egress: egress_tool.py is missing: SKIP"; exit 0; }

al_world_init cp_egress
al_ns_add host
al_ns_add up
al_link host 192.0.2.1/30 up 192.0.2.2/30 "cpup$(($$ % 100000))"
HOSTNS=$(al_ns host)
UPNS=$(al_ns up)
ip -n "$HOSTNS" route add 203.0.113.0/24 via 192.0.2.2
for a in 203.0.113.10 203.0.113.11 203.0.113.53; do ip -n "$UPNS" addr add "$a/32" dev lo; done

al_note "the fake internet"
cat >"$AL_TMP/zone.json" <<'ZONE'
{"allowed.test": {"A": ["203.0.113.10"], "ttl": 30}, "evil.test": {"A": ["203.0.113.11"], "ttl": 30}}
ZONE
al_bg dns ip netns exec "$UPNS" python3 "$ET" dns-server 203.0.113.53 53 "$AL_TMP/zone.json" --log "$AL_TMP/dns.q"
al_bg good ip netns exec "$UPNS" python3 "$ET" http-server 203.0.113.10 80 --name good --log "$AL_TMP/up.req"
al_bg evil ip netns exec "$UPNS" python3 "$ET" http-server 203.0.113.11 80 --name evil --log "$AL_TMP/up.req"
al_bg udp ip netns exec "$UPNS" python3 "$AL_NETTOOL" serve-udp 203.0.113.10 443 --name upstream-udp
al_wait_line dns LISTEN && al_wait_line good LISTEN && al_wait_line evil LISTEN &&
  al_wait_line udp LISTEN || exit 1

al_note "airlockd, as deploy/up runs it, plus this world's settings"
STATE="$AL_TMP/state"
CG="al-cpe-$$"
mkdir -p "$STATE/policies"
chmod 0711 "$AL_TMP" "$STATE"
cat >"$STATE/policies/e2e.yaml" <<'YAML'
version: 1
name: e2e
description: the end-to-end test's policy
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
YAML
cat >"$AL_TMP/airlockd.yaml" <<CFG
sandboxes:
  backend: jail
  cgroup_parent: $CG
network:
  mode: "on"
  ifname_prefix: c$(($$ % 100000))
  range: 10.201.0.0/16
  pool_size: 2
egress:
  args: ["--resolver", "203.0.113.53", "--workers", "1"]
CFG
al_on_cleanup "for d in /sys/fs/cgroup/*/$CG /sys/fs/cgroup/$CG; do [ -d \"\$d\" ] && rmdir \"\$d\"; done 2>/dev/null; true"
al_bg airlockd nsenter --net="/run/netns/$HOSTNS" -- env AIRLOCK_API_KEY=e2b_"$(printf '%040d' 7)" \
  AIRLOCK_LOG_FORMAT=json "$AIRLOCK_BIN/airlockd" --listen 127.0.0.1:0 --state-dir "$STATE" \
  --config "$AL_TMP/airlockd.yaml"
al_wait_line airlockd '^export E2B_API_URL=' 600 || { tail -40 "$AL_TMP/airlockd.log"; exit 1; }
cli() { "$AIRLOCK_BIN/airlock" --state-dir "$STATE" "$@"; }
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
al_match "a denied host by address: 403 with the reason" '"reason":"[a-z_]+"' \
  sbx_exec curl -sS -m 10 http://203.0.113.11/cp-e2e-raw-ip
al_fail "a denied Host header is refused" sbx_exec curl -fsS -m 10 -H 'Host: evil.test' http://203.0.113.11/x
al_ok "UDP datagrams can be sent (the sandbox cannot tell)..." \
  sbx_exec python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(b"leak", ("203.0.113.10", 443)) for _ in range(5)]'
sleep 1
al_fail "... but none reaches the upstream" grep -q '^DGRAM' "$AL_TMP/udp.log"
al_fail "nothing denied reached an upstream" grep -q 'REQ evil' "$AL_TMP/up.req"

al_note "E2B network fields only narrow: allow_internet_access=false under the same policy"
URL=$(sed -n 's/^export E2B_API_URL=//p' "$AL_TMP/airlockd.log")
KEY=e2b_$(printf '%040d' 7)
api() { nsenter --net="/run/netns/$HOSTNS" curl -sS -H "X-API-KEY: $KEY" "$@"; }
SB2=$(api -X POST "$URL/v2/sandboxes" -d '{"templateID":"base","timeout":300,
  "metadata":{"airlock.policy":"e2e"},"allow_internet_access":false}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])')
al_note "sandbox $SB2 (no internet)"
sb2_exec() { cli sandbox exec "$SB2" -- "$@"; }
al_fail "the allowed name does not resolve any more" sb2_exec curl -sS -m 8 http://allowed.test/no
al_match "nor does the allowed address answer" '"reason":"[a-z_]+"' \
  sb2_exec curl -sS -m 8 -H 'Host: allowed.test' http://203.0.113.10/no-internet
al_match "its details say so" '"allowInternetAccess":false' api "$URL/sandboxes/$SB2"
al_fail "nothing of it reached an upstream" grep -q 'REQ good GET /no' "$AL_TMP/up.req"
al_ok "kill it" cli sandbox kill "$SB2"

al_note "the audit log"
curl -s --unix-socket "$STATE/run/egress.sock" -X POST http://egress/v1/audit/sync >/dev/null
al_match "the allowed request, with the sandbox's id" "\"sandbox\":\"$SB\"" \
  cli audit query --sandbox "$SB" --decision allow --json
al_match "the denied address, with the sandbox's id and a reason" '"reason":"[a-z_]+"' \
  cli audit query --sandbox "$SB" --decision deny --json
al_match "the refused DNS name" "evil.test" cli audit query --sandbox "$SB" --decision deny --json
al_ok "airlock audit verify passes" cli audit verify

al_note "metrics and teardown"
scrape() {
  # The proxy's counters are fetched in the background: the first scrape may predate them.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    out=$(nsenter --net="/run/netns/$HOSTNS" curl -s "$URL/metrics")
    echo "$out" | grep -qE "$1" && { echo "$out" | grep -E "$1"; return 0; }
    sleep 0.5
  done
  return 1
}
al_ok "Prometheus shows the egress decisions" \
  scrape 'airlock_egress_decisions_total\{kind="(http|dns)",decision="deny"\} [1-9]'
al_ok "... and the sandboxes" scrape 'airlock_sandboxes\{state="running"\} 1'
PINS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pin_dir"])' \
  "$STATE/vswitch/instance.json" 2>/dev/null)
al_note "the switch's pins: ${PINS:-?}"
al_ok "kill" cli sandbox kill "$SB"
al_kill airlockd TERM
al_eq "airlockd stopped" "$(kill -0 "$(al_pid airlockd)" 2>/dev/null && echo running || echo gone)" gone
al_eq "no sandbox interface left" "$(ip -n "$HOSTNS" -o link | grep -c " c$(($$ % 100000))" || true)" 0
al_eq "no sandbox directory left" "$(ls -A "$STATE/sandboxes" 2>/dev/null | wc -l)" 0
al_eq "no cgroup left" "$(find /sys/fs/cgroup/*/"$CG" /sys/fs/cgroup/"$CG" -mindepth 1 -type d 2>/dev/null | wc -l)" 0
al_eq "no mount of this state left" "$(grep -c "$STATE" /proc/self/mountinfo || true)" 0
al_eq "no process of this state left" "$(pgrep -fc -- "$STATE/" || true)" 0
al_eq "the switch is removed (no bpffs pins left)" "$([ -n "$PINS" ] && [ -e "$PINS" ] && echo left || echo gone)" gone
al_done
