#!/usr/bin/env bash
# tests/integration/jail_vswitch.sh: a jail sandbox on a network prepared by the vswitch
# (spec network.mode "netns"), in the vswitch tests' world (no route out; a stand-in proxy
# registered in the switch). airlock-vmm joins the namespace the switch made; inside, the
# sandbox sees eth0 with its address, the gateway as its resolver, reaches "the internet"
# only as the proxy, and root of the sandbox cannot change any of it (the namespace belongs
# to the host's user namespace). Stopping the sandbox leaves the network to the switch,
# which destroys it.
set -uo pipefail
source "$(dirname "$0")/vswitch_world.sh"
source "$(dirname "$0")/jail_busybox.sh"
vs_world jail_vswitch
VMM=$AIRLOCK_BINARY_DIR/bin/airlock-vmm
AGENT_DIR=$AIRLOCK_BINARY_DIR/agent-root/.airlock
[ -x "$AGENT_DIR/bin/airlock-agent" ] || AGENT_DIR=$AIRLOCK_BINARY_DIR/testinit-root
STATE=$AL_TMP/state
CGP=al-test/jail_vswitch-$$
TOKEN=tok-$$
al_on_cleanup "'$VMM' --state-dir '$STATE' --sweep --cgroup-parent '$CGP' >/dev/null 2>&1; for h in /sys/fs/cgroup/*/; do rmdir \${h}$CGP \${h}al-test 2>/dev/null; done"

al_note "switch, proxy, a sandbox network, a busybox template"
al_ok "the switch opens" vs_tool open
vs_start_proxy || exit 1
vs_sandbox sb1 1 jail-one || exit 1
ADDR=$(vs_field sb1 addr)
GW=$(vs_field sb1 gateway)
make_busybox_template "$AL_TMP/bb" || exit 1
chmod 0755 "$AL_TMP"

cat >"$AL_TMP/spec.json" <<EOF
{"id":"vsw1","template":"$AL_TMP/bb","access_token":"$TOKEN",
 "network":{"mode":"netns","netns":"/run/netns/$(al_ns sb1)","dns":["$GW"]},
 "agent":{"dir":"$AGENT_DIR"},"jail":{"cgroup_parent":"$CGP"}}
EOF
exec 3>"$AL_TMP/ready"
al_bg vmm "$VMM" --state-dir "$STATE" --spec "$AL_TMP/spec.json" --ready-fd 3
exec 3>&-
al_wait_until 120 test -s "$AL_TMP/ready" || true
al_match "airlock-vmm starts the sandbox in the switch's namespace" '"ready":true' cat "$AL_TMP/ready"
APID=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["agent_pid"])' "$AL_TMP/ready")
al_eq "the agent is in the switch's network namespace" \
  "$(stat -L -c %i "/proc/$APID/ns/net")" "$(stat -L -c %i "/run/netns/$(al_ns sb1)")"

jx() { # jx USER CMD: a command in the sandbox
  local u=$1
  shift
  python3 "$(dirname "$0")/jail_exec.py" "$STATE/sandboxes/vsw1/agent.sock" --user "$u" \
    --token "$TOKEN" --timeout 20 -- "$*"
}

al_note "inside"
al_match "eth0 carries the sandbox's address" "inet $ADDR/" jx user ip -4 addr show eth0
al_match "the default route goes to the gateway" "default via $GW" jx user ip route
al_match "the gateway is the resolver" "nameserver $GW" jx user cat /etc/resolv.conf
al_match "TCP to 203.0.113.7:443 is answered by the proxy, with the original destination" \
  "^TCP ORIG 203\.0\.113\.7:443 PEER $ADDR:[0-9]+ SANDBOX 1 jail-one" \
  jx user 'echo hello | nc -w 3 203.0.113.7 443'
al_fail "no ping to the internet" jx user ping -c 1 -W 1 203.0.113.7
al_fail "root of the sandbox cannot add an address" jx root ip addr add 10.9.9.9/32 dev eth0
al_fail "root of the sandbox cannot take eth0 down" jx root ip link set eth0 down
al_fail "root of the sandbox cannot change the routes" jx root ip route add 192.0.2.0/24 via "$GW"
al_fail "root of the sandbox cannot create interfaces" jx root ip link add x0 type dummy
al_match "eth0 is still up and addressed" "inet $ADDR/" jx user ip -4 addr show eth0
vs_no_sandbox_in up_tcp

al_note "stop"
al_ok "POST /stop" curl -sf -X POST --unix-socket "$STATE/sandboxes/vsw1/vmm.sock" http://vmm/stop
al_wait_until 60 eval '! kill -0 "$(al_pid vmm)" 2>/dev/null' || true
al_fail "airlock-vmm has exited" kill -0 "$(al_pid vmm)"
al_fail "no sandbox directory is left" test -e "$STATE/sandboxes/vsw1"
al_ok "the network stays the switch's (its namespace still exists)" test -e "/run/netns/$(al_ns sb1)"
al_ok "the switch destroys the sandbox network" vs_tool destroy --id 1
al_ok "the switch tears down" vs_tool teardown
al_done
