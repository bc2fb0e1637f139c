#!/usr/bin/env bash
# vswitch_failclosed: the switch stays closed when the pieces around it are not there.
# No proxy registered: every packet is dropped (no_proxy). The loader killed with SIGKILL:
# the pinned programs keep steering and dropping. A new loader re-adopts the pinned state
# with traffic flowing and no window (the upstream never sees a packet, connections keep
# working). The nftables guard alone stops an interface the programs are not attached to.
# Unsafe host settings make the switch refuse to start, with a message naming the setting.
set -uo pipefail
source "$(dirname "$0")/vswitch_world.sh"
vs_world vswitch_failclosed

al_ok "the switch opens" vs_tool open
vs_sandbox sb1 1 sb-one || exit 1
SB1=$(vs_field sb1 addr); IF1=$(vs_field sb1 host_ifname)
UP0=$(al_rx_packets up "$VS_UP_IF")

al_note "no proxy registered"
al_fail "TCP goes nowhere before the proxy registers" al_net sb1 --timeout 1 tcp 203.0.113.7 443
al_fail "DNS goes nowhere before the proxy registers" al_net sb1 --timeout 1 udp 9.9.9.9 53
vs_counter_ge "$IF1" no_proxy 2
vs_start_proxy --no-dns-tcp || exit 1
al_match "TCP works once the proxy registered" "^TCP ORIG 203\.0\.113\.7:443 " al_net sb1 tcp 203.0.113.7 443
al_fail "TCP/53 is dropped while its own listener is missing (no fallback to the TCP one)" \
  al_net sb1 --timeout 1 tcp 9.9.9.9 53
al_match "status reports the missing DNS/TCP socket" "dns_tcp=MISSING" vs_cli status
al_kill proxy KILL
al_fail "a dead proxy means nothing gets through" al_net sb1 --timeout 1 tcp 203.0.113.7 443
al_match "status reports no proxy sockets after it died" "tcp=MISSING dns_udp=MISSING" vs_cli status
vs_start_proxy || exit 1
al_match "a restarted proxy registers again" "^TCP ORIG 203\.0\.113\.7:443 " al_net sb1 tcp 203.0.113.7 443

al_note "the loader dies"
al_bg loader nsenter --net="/run/netns/$(al_ns host)" -- "$VS_TOOL" --state-dir "$VS_STATE" \
  --pin-dir "$VS_PIN" --prefix "$VS_PREFIX" --attach "$VS_ATTACH" serve
al_wait_line loader '^ready' || exit 1
al_kill loader KILL
al_match "after SIGKILL of the loader TCP is still steered" "^TCP ORIG 203\.0\.113\.7:443 " al_net sb1 tcp 203.0.113.7 443
al_fail "after SIGKILL of the loader UDP/443 is still dropped" al_net sb1 --timeout 1 udp 203.0.113.7 443
al_fail "after SIGKILL of the loader ping to the internet is still dropped" al_net sb1 --timeout 1 icmp 203.0.113.7
al_match "counters are readable without a loader" '"sandboxes":1' vs_cli status --json

al_note "re-adoption under traffic"
# Probes that would reach the upstream if anything opened: raw UDP and TCP SYNs, plus real
# connections that must keep working while the loader is restarted five times.
al_bg flood ip netns exec "$(al_ns sb1)" bash -c "for i in \$(seq 60); do
    python3 '$AL_NETTOOL' rawip 203.0.113.7 --proto udp --dport 443 --count 20 >/dev/null
    python3 '$AL_NETTOOL' rawip 203.0.113.7 --proto tcp --dport 8443 --count 5 >/dev/null
    sleep 0.05; done; echo flood-done"
ok_conn=0
for round in 1 2 3 4 5; do
  vs_tool open >/dev/null || echo "re-open $round failed"
  if al_net sb1 tcp 203.0.113.7 443 >/dev/null 2>&1; then ok_conn=$((ok_conn + 1)); fi
done
al_wait_line flood flood-done 60
al_eq "every connection made while the loader restarted succeeded" "$ok_conn" 5
al_eq "no packet reached the upstream while the loader restarted" "$(al_rx_packets up "$VS_UP_IF")" "$UP0"
vs_counter_ge "$IF1" udp 100
al_match "the guard is still in place" "guard: nftables tables inet/arp airlock_$VS_PREFIX present" vs_cli status

al_note "the guard alone (an interface without the programs)"
# A veth named like a sandbox interface but not attached: what a window would look like.
al_ns_add rogue
ip link add "${VS_PREFIX}r" netns "$(al_ns host)" type veth peer name eth0 netns "$(al_ns rogue)"
ip -n "$(al_ns rogue)" addr add 10.200.250.2/30 dev eth0
ip -n "$(al_ns rogue)" link set eth0 up
ip -n "$(al_ns rogue)" route add default via 10.200.250.1 dev eth0 onlink
ip -n "$(al_ns host)" link set "${VS_PREFIX}r" up
ip -n "$(al_ns host)" route add 10.200.250.2/32 dev "${VS_PREFIX}r"
ip -n "$(al_ns rogue)" neigh replace 10.200.250.1 lladdr "$(al_nsx host cat "/sys/class/net/${VS_PREFIX}r/address")" dev eth0
al_fail "the guard stops the unattached interface from reaching a host service" \
  al_net rogue --timeout 1 tcp 192.0.2.1 22
al_fail "the guard stops it from reaching the upstream" al_net rogue --timeout 1 tcp 203.0.113.7 443
al_match "the guard counted the drops" "counter packets [1-9]" al_nsx host nft list chain inet "airlock_$VS_PREFIX" sandbox_prerouting
vs_no_sandbox_in host_ssh
al_fail "the switch refuses to start next to a foreign interface with its prefix" vs_tool open
al_match "... and says which interface" "${VS_PREFIX}r" printf '%s' "$AL_OUT"
ip -n "$(al_ns host)" link del "${VS_PREFIX}r"

al_note "an interface left unattached by a crash is cleaned up"
ip -n "$(al_ns host)" link add "${VS_PREFIX}9999" address 02:41:4c:ff:ff:ff type veth peer name "${VS_PREFIX}p"
ip -n "$(al_ns host)" link set "${VS_PREFIX}p" address 02:41:4c:ff:ff:fe
al_ok "the switch opens and removes it" vs_tool open
al_fail "the orphan is gone" ip -n "$(al_ns host)" link show "${VS_PREFIX}9999"

al_note "unsafe host settings"
al_nsx host sysctl -qw net.ipv4.ip_forward=1
al_fail "ip_forward=1: the switch refuses to start" vs_tool open
al_match "... naming the setting and the fix" "net.ipv4.ip_forward.*Set it to 0" printf '%s' "$AL_OUT"
al_fail "airlock vswitch check flags it" vs_cli check
al_match "... with the fix" "FAIL +net.ipv4.ip_forward" printf '%s' "$AL_OUT"
al_ok "with --allow-ip-forward it starts" vs_tool --allow-ip-forward open
al_fail "and with forwarding on, UDP still goes nowhere" al_net sb1 --timeout 1 udp 203.0.113.7 443
al_fail "and ping to the internet still goes nowhere" al_net sb1 --timeout 1 icmp 203.0.113.7
al_match "TCP is still steered" "^TCP ORIG 203\.0\.113\.7:443 " al_net sb1 tcp 203.0.113.7 443
al_nsx host sysctl -qw net.ipv4.ip_forward=0
al_nsx host sysctl -qw net.ipv4.tcp_fwmark_accept=1
al_fail "tcp_fwmark_accept=1: the switch refuses to start" vs_tool open
al_match "... naming it" "tcp_fwmark_accept" printf '%s' "$AL_OUT"
al_nsx host sysctl -qw net.ipv4.tcp_fwmark_accept=0
al_nsx host sysctl -qw net.ipv4.conf.all.src_valid_mark=1
al_fail "src_valid_mark=1: the switch refuses to start" vs_tool open
al_match "... naming it" "src_valid_mark" printf '%s' "$AL_OUT"
al_nsx host sysctl -qw net.ipv4.conf.all.src_valid_mark=0
ip -n "$(al_ns host)" addr add 10.200.7.1/24 dev lo
al_fail "a host address inside the range: the switch refuses to start" vs_tool open
al_match "... naming what overlaps" "overlaps .*10\.200\.7\." printf '%s' "$AL_OUT"
ip -n "$(al_ns host)" addr del 10.200.7.1/24 dev lo
al_ok "check passes again" vs_cli check

al_eq "no packet reached the upstream namespace in the whole test" "$(al_rx_packets up "$VS_UP_IF")" "$UP0"
vs_no_sandbox_in up_tcp
vs_no_sandbox_in host_svc
al_ok "sandbox ends" vs_tool destroy --id 1
al_ok "the switch tears down" vs_tool teardown
al_done
