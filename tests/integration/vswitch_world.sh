# tests/integration/vswitch_world.sh: the world of the vswitch integration tests (sourced).
#
#   "host"  namespace: the switch (al-vswitch-tool as loader), its ip rule, local route table
#           and nftables guard; a stand-in proxy (al-vswitch-tool proxy: transparent sockets
#           registered in the sockmap); a host service on 0.0.0.0:443 and 192.0.2.1:22 that
#           must never see a sandbox; a route to 203.0.113.0/24 through "up".
#   "up"    namespace: owns 203.0.113.0/24 (TEST-NET-3) with a TCP server on
#           203.0.113.7:443 and a UDP server on :53 and :443. Its link's rx counter proves
#           that no sandbox packet ever reaches it.
#   sandboxes: created by the switch itself (al-vswitch-tool create), their namespaces bind-
#           mounted at /run/netns/$AL_WORLD-<name>.
# Nothing has a route out of the machine; everything is removed by netns.sh's trap.
# shellcheck shell=bash
# shellcheck source=../lib/netns.sh
source "${AIRLOCK_SOURCE_DIR:?}/tests/lib/netns.sh"

VS_TOOL="${AIRLOCK_BIN:?}/al-vswitch-tool"
VS_CLI="$AIRLOCK_BIN/airlock"

vs_world() {
  al_world_init "$1"
  VS_PREFIX="t$(($$ % 100000))"
  VS_PIN="/sys/fs/bpf/airlock-test-$$"
  VS_STATE="$AL_TMP/state"
  VS_ATTACH=${VS_ATTACH:-auto} # the product's default; the lifecycle runs tcx and clsact
  al_cleanup_path "$VS_PIN"
  al_ns_add host
  al_ns_add up
  al_link host 192.0.2.1/30 up 192.0.2.2/30 "up$(($$ % 100000))"
  VS_UP_IF=$AL_LINK_B
  ip -n "$(al_ns up)" addr add 203.0.113.7/24 dev lo
  ip -n "$(al_ns host)" route add 203.0.113.0/24 via 192.0.2.2
  al_bg up_tcp ip netns exec "$(al_ns up)" python3 "$AL_NETTOOL" serve-tcp 203.0.113.7 443 --name upstream
  al_bg up_udp ip netns exec "$(al_ns up)" python3 "$AL_NETTOOL" serve-udp 203.0.113.7 443 --name upstream
  al_bg host_svc ip netns exec "$(al_ns host)" python3 "$AL_NETTOOL" serve-tcp 0.0.0.0 443 --name host-service
  al_bg host_ssh ip netns exec "$(al_ns host)" python3 "$AL_NETTOOL" serve-tcp 192.0.2.1 22 --name host-ssh
  al_wait_line up_tcp LISTEN && al_wait_line up_udp LISTEN && al_wait_line host_svc LISTEN &&
    al_wait_line host_ssh LISTEN || { echo "world: servers did not start" >&2; exit 1; }
}

vs_tool() {
  nsenter --net="/run/netns/$(al_ns host)" -- "$VS_TOOL" --state-dir "$VS_STATE" \
    --pin-dir "$VS_PIN" --prefix "$VS_PREFIX" --attach "$VS_ATTACH" "$@"
}

vs_cli() {
  nsenter --net="/run/netns/$(al_ns host)" -- "$VS_CLI" --state-dir "$VS_STATE" vswitch "$@"
}

vs_start_proxy() {
  al_bg proxy nsenter --net="/run/netns/$(al_ns host)" -- "$VS_TOOL" --state-dir "$VS_STATE" \
    proxy --tcp-port 15001 --dns-port 53 "$@"
  al_wait_line proxy '^ready'
}

# vs_sandbox SHORT ID LABEL: a sandbox network; its JSON lands in $AL_TMP/SHORT.json.
vs_sandbox() {
  local ns
  ns=$(al_ns "$1")
  vs_tool create --id "$2" --label "$3" --netns-path "/run/netns/$ns" >"$AL_TMP/$1.json" || return 1
  al_ns_adopt "$ns"
}

# vs_field SHORT KEY: a field of a sandbox's JSON.
vs_field() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$AL_TMP/$1.json" "$2"
}

# vs_counter IFNAME REASON: packets counted for REASON on the host interface IFNAME.
vs_counter() {
  vs_cli status --json | python3 -c '
import json, sys
st = json.load(sys.stdin)
for i in st["interfaces"]:
    if i["ifname"] == sys.argv[1]:
        print(i["counters"].get(sys.argv[2], {}).get("packets", 0)); break
else:
    print(-1)' "$1" "$2"
}

# vs_counter_ge IFNAME REASON MIN: assert the counter reached MIN.
vs_counter_ge() {
  local got
  got=$(vs_counter "$1" "$2")
  if [ "$got" -ge "$3" ] 2>/dev/null; then
    AL_PASSED=$((AL_PASSED + 1)); printf 'ok   counter %s on %s = %s (>= %s)\n' "$2" "$1" "$got" "$3"
  else
    AL_FAILED=$((AL_FAILED + 1)); printf 'FAIL counter %s on %s = %s, want >= %s\n' "$2" "$1" "$got" "$3"
  fi
}

# vs_no_sandbox_in LOGNAME: assert a server never logged a connection from a sandbox.
vs_no_sandbox_in() {
  if grep -Eq '(CONN|DGRAM) 10\.200\.' "$AL_TMP/$1.log"; then
    AL_FAILED=$((AL_FAILED + 1)); printf 'FAIL %s saw a sandbox:\n' "$1"; sed 's/^/     | /' "$AL_TMP/$1.log"
  else
    AL_PASSED=$((AL_PASSED + 1)); printf 'ok   %s never saw a sandbox\n' "$1"
  fi
}
