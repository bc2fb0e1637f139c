#!/usr/bin/env bash
# vswitch_steering: every verdict of the switch on live traffic, in a world with no route out.
# TCP to anything reaches the proxy with its original destination (never the upstream, never
# a host service); DNS over UDP and TCP to any address reaches the DNS sockets and is answered
# from the address it was sent to; ping reaches only the gateway; other UDP, ICMP, IPv6, raw
# frames, spoofed sources, fragments, IP options and sandbox-to-sandbox traffic are dropped
# and counted per sandbox and reason; nothing the host sends gets into a sandbox.
set -uo pipefail
source "$(dirname "$0")/vswitch_world.sh"
vs_world vswitch_steering

al_note "switch, stand-in proxy, two sandboxes"
al_ok "the switch opens in the host namespace" vs_tool open
vs_start_proxy || exit 1
vs_sandbox sb1 1 sb-one || exit 1
vs_sandbox sb2 2 sb-two || exit 1
SB1=$(vs_field sb1 addr); GW1=$(vs_field sb1 gateway); IF1=$(vs_field sb1 host_ifname)
SB2=$(vs_field sb2 addr); IF2=$(vs_field sb2 host_ifname)
al_eq "sandbox 1 has the first /30" "$SB1/$GW1" "10.200.0.2/10.200.0.1"
al_eq "sandbox 2 has the second /30" "$SB2" "10.200.0.6"
UP0=$(al_rx_packets up "$VS_UP_IF")

al_note "steered to the proxy"
al_match "TCP to 203.0.113.7:443 reaches the proxy with the original destination" \
  "^TCP ORIG 203\.0\.113\.7:443 PEER $SB1:[0-9]+ SANDBOX 1 sb-one$" al_net sb1 tcp 203.0.113.7 443
al_match "TCP to the host's own address reaches the proxy, not the host service" \
  "^TCP ORIG 192\.0\.2\.1:22 PEER $SB1:" al_net sb1 tcp 192.0.2.1 22
al_match "TCP to the gateway reaches the proxy" "^TCP ORIG $GW1:443 " al_net sb1 tcp "$GW1" 443
al_match "TCP to a host address and port with a host listener (0.0.0.0:443) reaches the proxy" \
  "^TCP ORIG 192\.0\.2\.1:443 " al_net sb1 tcp 192.0.2.1 443
al_match "second sandbox is identified as itself" "^TCP ORIG 203\.0\.113\.7:443 PEER $SB2:[0-9]+ SANDBOX 2 sb-two$" \
  al_net sb2 tcp 203.0.113.7 443
al_match "DNS over UDP to any address reaches the DNS socket, answered from that address" \
  "^DNS ORIG 9\.9\.9\.9:53 PEER $SB1:[0-9]+ SANDBOX 1 sb-one FROM 9\.9\.9\.9:53$" al_net sb1 udp 9.9.9.9 53
al_match "DNS over UDP to the gateway" "FROM $GW1:53$" al_net sb1 udp "$GW1" 53
al_match "DNS over TCP reaches the DNS listener" "^DNSTCP ORIG 9\.9\.9\.9:53 PEER $SB1:" \
  al_net sb1 tcp 9.9.9.9 53
al_match "ping to the gateway is answered by the switch" "REPLY from $GW1" al_net sb1 icmp "$GW1"
al_nsx host sysctl -qw net.ipv4.tcp_syncookies=2
al_match "with SYN cookies forced, the handshake still completes (the bare ACK reaches the proxy's listener)" \
  "^TCP ORIG 203\.0\.113\.7:443 " al_net sb1 tcp 203.0.113.7 443
al_nsx host sysctl -qw net.ipv4.tcp_syncookies=1

al_note "dropped"
al_fail "no ping to the internet" al_net sb1 --timeout 1 icmp 203.0.113.7
al_fail "no ping to the host" al_net sb1 --timeout 1 icmp 192.0.2.1
al_fail "no UDP/443 (QUIC)" al_net sb1 --timeout 1 udp 203.0.113.7 443
al_fail "no UDP/123 (NTP)" al_net sb1 --timeout 1 udp 203.0.113.7 123
SB2RX0=$(al_nsx sb2 cat /sys/class/net/eth0/statistics/rx_packets)
al_fail "no TCP from sandbox 1 to sandbox 2" al_net sb1 --timeout 1 tcp "$SB2" 443
al_fail "no DNS from sandbox 1 to sandbox 2" al_net sb1 --timeout 1 udp "$SB2" 53
al_fail "no ping from sandbox 1 to sandbox 2's gateway" al_net sb1 --timeout 1 icmp 10.200.0.5
al_eq "sandbox 2 received nothing from sandbox 1" \
  "$(al_nsx sb2 cat /sys/class/net/eth0/statistics/rx_packets)" "$SB2RX0"
al_ok "spoofed source (sandbox 2's address) sent" al_net sb1 rawip 203.0.113.7 --proto tcp --dport 443 --src "$SB2" --count 3
al_ok "spoofed source (outside the range) sent" al_net sb1 rawip 203.0.113.7 --proto udp --src 198.18.0.1
al_ok "IPv4 fragment sent" al_net sb1 rawip 203.0.113.7 --proto udp --frag --count 2
al_ok "IPv4 with options sent" al_net sb1 rawip 203.0.113.7 --proto udp --options --count 2
al_ok "IPv6 frames sent" al_net sb1 frame eth0 --ethertype 0x86dd --count 2
al_ok "raw frames sent" al_net sb1 frame eth0 --ethertype 0x88b5 --count 2
HMAC1=$(al_nsx host cat "/sys/class/net/$IF1/address")
al_ok "a truncated IPv4 frame sent" al_net sb1 frame eth0 --ethertype 0x0800 --dst-mac "$HMAC1" --bytes 10
al_ok "TCP FIN without a flow sent" al_net sb1 rawip 203.0.113.7 --proto tcp --tcp-flags 0x01 --dport 80
al_match "the switch still serves sandbox 1 after all that" "^TCP ORIG 203\.0\.113\.7:443 " \
  al_net sb1 tcp 203.0.113.7 443

al_note "nothing inbound"
al_bg sb1_srv ip netns exec "$(al_ns sb1)" python3 "$AL_NETTOOL" serve-tcp 0.0.0.0 8080 --name sandbox
al_wait_line sb1_srv LISTEN
al_fail "the host cannot connect into a sandbox" al_net host --timeout 1 tcp "$SB1" 8080
al_fail "another sandbox cannot connect into a sandbox" al_net sb2 --timeout 1 tcp "$SB1" 8080
vs_no_sandbox_in sb1_srv
if grep -q CONN "$AL_TMP/sb1_srv.log"; then
  AL_FAILED=$((AL_FAILED + 1)); echo "FAIL the sandbox's server accepted a connection"
else
  AL_PASSED=$((AL_PASSED + 1)); echo "ok   the sandbox's server never accepted a connection"
fi

al_note "counters, per sandbox and reason"
vs_counter_ge "$IF1" tcp_syn 6
vs_counter_ge "$IF1" tcp_flow 6
vs_counter_ge "$IF1" dns_udp 2
vs_counter_ge "$IF1" dns_tcp_syn 1
vs_counter_ge "$IF1" icmp_gateway 1
vs_counter_ge "$IF1" arp_reply 1
vs_counter_ge "$IF1" icmp 2
vs_counter_ge "$IF1" udp 2
vs_counter_ge "$IF1" to_sandbox 3
vs_counter_ge "$IF1" spoofed_source 4
vs_counter_ge "$IF1" fragment 2
vs_counter_ge "$IF1" ip_options 2
vs_counter_ge "$IF1" ipv6 2
vs_counter_ge "$IF1" raw_frame 2
vs_counter_ge "$IF1" malformed 1
vs_counter_ge "$IF1" tcp_no_flow 1
vs_counter_ge "$IF1" tcp_ack_listener 1
vs_counter_ge "$IF1" in_reply 10
vs_counter_ge "$IF2" tcp_syn 1
al_eq "sandbox 2 was never charged for sandbox 1's drops" "$(vs_counter "$IF2" spoofed_source)" 0
al_match "status names both sandboxes" "sandbox 2 \(sb-two\)" vs_cli status
al_match "status shows the registered proxy sockets" "tcp=registered dns_udp=registered dns_tcp=registered" vs_cli status
al_match "status --json is JSON with both interfaces" '"sandboxes":2' vs_cli status --json

al_note "the upstream and the host services never saw a sandbox"
al_eq "no packet reached the upstream namespace" "$(al_rx_packets up "$VS_UP_IF")" "$UP0"
vs_no_sandbox_in up_tcp
vs_no_sandbox_in up_udp
vs_no_sandbox_in host_svc
vs_no_sandbox_in host_ssh

al_ok "sandboxes end cleanly" vs_tool destroy --id 1
al_ok "second sandbox ends cleanly" vs_tool destroy --id 2
al_ok "the switch tears down" vs_tool teardown
al_done
