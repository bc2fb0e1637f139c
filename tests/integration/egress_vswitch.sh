#!/usr/bin/env bash
# tests/integration/egress_vswitch.sh: airlock-egress behind the real vswitch (eBPF steering
# with bpf_sk_assign into the sockets egress registers), end to end: real DNS from the
# sandbox's resolver (its gateway) and from any other address, HTTP decided per request,
# TLS passthrough with the certificate verified by the sandbox, denials audited with the
# sandbox's identity; and what the switch drops never reaches the proxy or the upstream
# (bypass item 17: UDP/QUIC, ICMP to the outside).
# Argument: the proxy's listener mode. auto (the default; on this kernel >= 6.5: one
# SO_REUSEPORT socket per worker) or shared (egress_vswitch_shared: one plain socket per
# address polled by every worker, the layout kernels before 6.5 need; forced here so that
# it is tested on a new kernel too, and the same checks run through it).
set -uo pipefail
mode=${1:-auto}
case "$mode" in auto|shared) ;; *) echo "usage: egress_vswitch.sh [auto|shared]" >&2; exit 2 ;; esac
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/vswitch_world.sh"
source "$AIRLOCK_SOURCE_DIR/tests/integration/egress_world.sh"
if [ "$mode" = auto ]; then vs_world egress_vswitch; else vs_world "egress_vs_$mode"; fi
ET="$AIRLOCK_SOURCE_DIR/tests/integration/egress_tool.py"

al_note "the fake internet (next to the switch's own test servers)"
UPNS=$(al_ns up)
for a in 203.0.113.10 203.0.113.11 203.0.113.53; do ip -n "$UPNS" addr add "$a/32" dev lo; done
ew_make_certs "$AL_TMP" || exit 1
cat >"$AL_TMP/zone.json" <<'ZONE'
{"allowed.test": {"A": ["203.0.113.10"], "ttl": 30}, "evil.test": {"A": ["203.0.113.11"], "ttl": 30}}
ZONE
al_bg dns ip netns exec "$UPNS" python3 "$ET" dns-server 203.0.113.53 53 "$AL_TMP/zone.json" --log "$AL_TMP/dns.q"
al_bg good ip netns exec "$UPNS" python3 "$ET" http-server 203.0.113.10 80 --name good --log "$AL_TMP/up.req"
al_bg evil ip netns exec "$UPNS" python3 "$ET" http-server 203.0.113.11 80 --name evil --log "$AL_TMP/up.req"
al_bg tls ip netns exec "$UPNS" python3 "$ET" tls-server 203.0.113.10 443 --cert "$AL_TMP/up.pem" \
  --key "$AL_TMP/up.key" --name tls --log "$AL_TMP/up.req"
al_wait_line dns LISTEN && al_wait_line good LISTEN && al_wait_line evil LISTEN && al_wait_line tls LISTEN || exit 1

al_note "switch and proxy"
al_ok "the switch opens" vs_tool open
al_bg egress nsenter --net="/run/netns/$(al_ns host)" -- "$AIRLOCK_BIN/airlock-egress" \
  --state-dir "$VS_STATE" --vswitch on --vswitch-pins "$VS_PIN" --resolver 203.0.113.53 \
  --listen 127.0.0.1:15001 --dns 127.0.0.1:53 --workers 2 --listener-mode "$mode"
al_wait_line egress 'ready' 30 || exit 1
HOSTNS=(ip netns exec "$(al_ns host)")
kmaj=$(uname -r | cut -d. -f1); kmin=$(uname -r | cut -d. -f2)
if [ "$mode" = shared ]; then
  al_ok "the proxy says it listens in the shared mode, and why" \
    grep -q 'listeners: shared (one socket per address, polled by every worker): --listener-mode' "$AL_TMP/egress.log"
  al_eq "one TCP listening socket (no SO_REUSEPORT group) on :15001" \
    "$("${HOSTNS[@]}" ss -Htln 'sport = :15001' | wc -l)" 1
  al_eq "one DNS UDP socket on :53" "$("${HOSTNS[@]}" ss -Huln 'sport = :53' | wc -l)" 1
elif [ "$kmaj" -gt 6 ] || { [ "$kmaj" = 6 ] && [ "$kmin" -ge 5 ]; }; then
  al_ok "auto on kernel >= 6.5: one SO_REUSEPORT socket per worker, and why" \
    grep -q 'listeners: reuseport (one socket per worker per address, SO_REUSEPORT): auto; kernel .* >= 6.5' "$AL_TMP/egress.log"
  al_eq "two TCP listening sockets (one per worker) on :15001" \
    "$("${HOSTNS[@]}" ss -Htln 'sport = :15001' | wc -l)" 2
else
  al_ok "auto on kernel < 6.5: the shared mode, and why" \
    grep -q 'listeners: shared (.*): auto; kernel .* < 6.5' "$AL_TMP/egress.log"
fi
al_match "the proxy's sockets are registered with the switch" \
  "tcp=registered dns_udp=registered dns_tcp=registered" vs_cli status
vs_sandbox sb1 1 sbx-one || exit 1
SB1=$(vs_field sb1 addr)
GW1=$(vs_field sb1 gateway)
mkdir -p "/etc/netns/$(al_ns sb1)"
al_on_cleanup "rm -rf '/etc/netns/$(al_ns sb1)'"
echo "nameserver $GW1" >"/etc/netns/$(al_ns sb1)/resolv.conf"
cat >"$AL_TMP/policy.yaml" <<'YAML'
version: 1
name: vswitch-e2e
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: tls
    hosts: [allowed.test]
YAML
body=$(python3 -c 'import json,sys; print(json.dumps({"id": "sbx-one", "template": "base",
  "addresses": [sys.argv[1]], "policy": {"yaml": open(sys.argv[2]).read()}}))' "$SB1" "$AL_TMP/policy.yaml")
al_match "the sandbox is registered with the proxy" '"id":"sbx-one"' \
  curl -sf --unix-socket "$VS_STATE/run/egress.sock" -X POST --data-binary "$body" http://egress/v1/sandboxes
SBX=(ip netns exec "$(al_ns sb1)")

al_note "end to end"
al_match "DNS at the gateway" "RCODE NOERROR ANSWERS 203.0.113.10" "${SBX[@]}" python3 "$ET" dns-query "$GW1" allowed.test A
al_match "DNS at any address, answered from it" "RCODE NOERROR ANSWERS 203.0.113.10" \
  "${SBX[@]}" python3 "$ET" dns-query 9.9.9.9 allowed.test A
al_match "DNS over TCP" "RCODE NOERROR" "${SBX[@]}" python3 "$ET" dns-query 9.9.9.9 allowed.test A --tcp
al_match "a name outside the policy: NXDOMAIN" "RCODE NXDOMAIN" "${SBX[@]}" python3 "$ET" dns-query "$GW1" evil.test A
al_match "HTTP to an allowed name" '"server": "good"' "${SBX[@]}" curl -sS -m 8 http://allowed.test/e2e
# Connections in parallel: with two workers on one shared socket, each is accepted by exactly
# one of them (the other sees EAGAIN) and every one is answered.
par() {
  local i pids=() rc=0
  for i in 1 2 3 4 5 6 7 8; do
    "${SBX[@]}" curl -sS -m 8 -o "$AL_TMP/par.$i" "http://allowed.test/par$i" & pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  [ $rc = 0 ] && [ "$(cat "$AL_TMP"/par.* | grep -c '"server": "good"')" = 8 ]
}
al_ok "8 parallel HTTP requests, all answered" par
al_match "TLS passthrough, certificate verified in the sandbox" '"server": "tls"' \
  "${SBX[@]}" curl -sS -m 8 --cacert "$AL_TMP/ca.pem" https://allowed.test/e2e-tls
al_match "a denied Host gets the JSON answer" '"reason":"no_rule_matched"' \
  "${SBX[@]}" curl -sS -m 8 -H 'Host: evil.test' http://203.0.113.11/e2e
al_fail "QUIC (UDP 443) goes nowhere" "${SBX[@]}" python3 "$AL_NETTOOL" --timeout 1 udp 203.0.113.10 443
al_fail "ICMP to the outside goes nowhere" "${SBX[@]}" python3 "$AL_NETTOOL" --timeout 1 icmp 203.0.113.10
# airlock-egress writes the record once it has answered: wait for it, not for the answer.
denied() {
  "$AIRLOCK_BIN/airlock" --state-dir "$VS_STATE" audit query --decision deny --host evil.test --json |
    grep -q '"sandbox":"sbx-one"'
}
al_wait_until 60 denied || true
al_match "the denial is audited with the sandbox's identity" '"decision":"deny".*"sandbox":"sbx-one"|"sandbox":"sbx-one".*"decision":"deny"' \
  "$AIRLOCK_BIN/airlock" --state-dir "$VS_STATE" audit query --decision deny --host evil.test --json
al_ok "the audit log verifies" "$AIRLOCK_BIN/airlock" --state-dir "$VS_STATE" audit verify
al_fail "nothing denied reached an upstream" grep -q 'REQ evil' "$AL_TMP/up.req"
al_kill egress
al_done
