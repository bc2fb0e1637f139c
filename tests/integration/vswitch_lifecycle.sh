#!/usr/bin/env bash
# vswitch_lifecycle: a switch instance from start to teardown, with either attach mode
# (VS_ATTACH=tcx or clsact; ctest runs both). Pool networks are created attached and are given
# back at close; a sandbox's network is configured as documented (eth0, /30, default route,
# no IPv6) and attached before it is up; ending a sandbox removes its interface, pins and
# counters and frees its address; teardown refuses while sandboxes live, and afterwards
# nothing is left: no pins, rule, route table, guard, interfaces or instance record.
set -uo pipefail
source "$(dirname "$0")/vswitch_world.sh"
VS_ATTACH=${VS_ATTACH:-tcx}
vs_world "vswitch_lifecycle_$VS_ATTACH"
host=$(al_ns host)

al_match "the switch opens with a pool of 2" '"pool":2' vs_tool open --pool 2
al_eq "the pool was given back at close" "$(ip -n "$host" -o link show | grep -c " ${VS_PREFIX}[0-9]")" 0
al_match "the instance records its pin directory" "\"pin_dir\":\"$VS_PIN\"" cat "$VS_STATE/vswitch/instance.json"
al_match "the attach mode is $VS_ATTACH" "attach $VS_ATTACH" vs_cli status

vs_sandbox sb1 11 first || exit 1
vs_sandbox sb2 12 second || exit 1
IF1=$(vs_field sb1 host_ifname); IDX1=$(vs_field sb1 host_ifindex)
al_note "the sandbox side"
al_match "eth0 has the sandbox address" "inet 10\.200\.0\.2/30" al_nsx sb1 ip -4 addr show eth0
al_match "default route via the gateway" "default via 10\.200\.0\.1 dev eth0" al_nsx sb1 ip route
al_match "loopback is up" "LOOPBACK,UP" al_nsx sb1 ip link show lo
al_eq "no IPv6 inside" "$(al_nsx sb1 cat /proc/sys/net/ipv6/conf/eth0/disable_ipv6)" 1
al_note "the host side"
al_match "the host side has no address" "^$" ip -n "$host" -o addr show dev "$IF1"
al_match "a /32 route to the sandbox" "10\.200\.0\.2 dev $IF1" ip -n "$host" route show 10.200.0.2
al_match "a permanent neighbour entry" "PERMANENT" ip -n "$host" neigh show 10.200.0.2
al_match "no IPv6 link-local on the host side" "addrgenmode none" ip -n "$host" -d link show "$IF1"
# (a veth gets a queue pair per possible CPU unless told otherwise: sysfs objects at creation)
al_match "one queue each way (host side)" "numtxqueues 1 numrxqueues 1 " ip -n "$host" -d link show "$IF1"
al_match "one queue each way (sandbox side)" "numtxqueues 1 numrxqueues 1 " al_nsx sb1 ip -d link show eth0
if [ "$VS_ATTACH" = tcx ]; then
  al_ok "links are pinned per interface" test -e "$VS_PIN/links/${IDX1}_in" -a -e "$VS_PIN/links/${IDX1}_eg"
else
  al_match "ingress filter attached (clsact)" "vs_from_sandbox" tc -n "$host" filter show dev "$IF1" ingress
  al_match "egress filter attached (clsact)" "vs_to_sandbox" tc -n "$host" filter show dev "$IF1" egress
fi

vs_start_proxy || exit 1
al_match "traffic is steered ($VS_ATTACH)" "^TCP ORIG 203\.0\.113\.7:443 PEER 10\.200\.0\.2:[0-9]+ SANDBOX 11 first" \
  al_net sb1 tcp 203.0.113.7 443
al_fail "and dropped ($VS_ATTACH)" al_net sb1 --timeout 1 udp 203.0.113.7 443

al_note "re-opening keeps everything"
al_ok "re-open" vs_tool open
al_match "traffic still steered after re-open" "^TCP ORIG" al_net sb1 tcp 203.0.113.7 443
al_match "both sandboxes still listed" '"sandboxes":2' vs_cli status --json
al_fail "a second sandbox with the same id is refused" vs_tool create --id 11 --netns-path "/run/netns/$AL_WORLD-dup"
al_match "... saying so" "already has a network" printf '%s' "$AL_OUT"

al_note "ending a sandbox"
al_fail "teardown refuses while sandboxes are attached" vs_tool teardown
al_match "... saying why" "still attached" printf '%s' "$AL_OUT"
al_ok "sandbox 1 ends" vs_tool destroy --id 11
al_fail "its host interface is gone" ip -n "$host" link show "$IF1"
al_fail "its sandbox side is gone" al_nsx sb1 ip link show eth0
al_ok "its link pins are gone" test ! -e "$VS_PIN/links/${IDX1}_in" -a ! -e "$VS_PIN/links/${IDX1}_eg"
al_fail "its route is gone" sh -c "ip -n '$host' route show 10.200.0.2 | grep -q ."
al_match "only sandbox 2 is left" '"sandboxes":1' vs_cli status --json
al_fail "ending it twice is an error" vs_tool destroy --id 11
al_match "... that says so" "has no network" printf '%s' "$AL_OUT"
vs_sandbox sb3 13 third || exit 1
al_eq "the freed address is reused" "$(vs_field sb3 addr)" 10.200.0.2
al_match "the new sandbox works" "SANDBOX 13 third" al_net sb3 tcp 203.0.113.7 443

al_note "teardown"
al_fail "airlock vswitch teardown refuses while sandboxes are attached" vs_cli teardown
al_match "... and says how to force it" "still attached.*--force" printf '%s' "$AL_OUT"
al_ok "sandbox 2 ends" vs_tool destroy --id 12
al_ok "airlock vswitch teardown --force ends the last one too" vs_cli teardown --force
al_fail "sandbox 3's interface is gone" al_nsx sb3 ip link show eth0
al_fail "no pins left" test -e "$VS_PIN"
al_fail "no instance record left" test -e "$VS_STATE/vswitch/instance.json"
al_fail "no fwmark rule left" sh -c "ip -n '$host' rule | grep -q 0x414c0001"
al_fail "no route table left" sh -c "ip -n '$host' route show table 16716 | grep -q ."
al_fail "no guard left (inet)" al_nsx host nft list table inet "airlock_$VS_PREFIX"
al_fail "no guard left (arp)" al_nsx host nft list table arp "airlock_$VS_PREFIX"
al_eq "no sandbox interface left" "$(ip -n "$host" -o link show | grep -c " ${VS_PREFIX}")" 0
al_fail "the CLI says there is no switch" vs_cli status
al_match "... clearly" "no virtual switch was started|no switch is pinned" printf '%s' "$AL_OUT"
al_ok "a new instance can start again" vs_tool open
al_ok "and be torn down again" vs_tool teardown
al_done
