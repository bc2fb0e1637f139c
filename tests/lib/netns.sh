# tests/lib/netns.sh: building network-namespace worlds for integration tests (bash).
#
#   source "$AIRLOCK_SOURCE_DIR/tests/lib/netns.sh"
#   al_world_init vswitch_steering        # names, temp dir, cleanup trap; needs root
#   al_ns_add host; al_ns_add up          # namespaces "$AL_WORLD-host", "$AL_WORLD-up"
#   al_link host 192.0.2.1/30 up 192.0.2.2/30
#   al_bg web al_nsx up python3 "$AL_NETTOOL" serve-tcp 203.0.113.7 443 --name upstream
#   al_wait_line web LISTEN
#   al_ok  "sandbox reaches the proxy"   al_net sb1 tcp 203.0.113.7 443
#   al_fail "no ping to the internet"    al_net sb1 icmp 203.0.113.7
#   al_done                               # prints the summary; exit status = failures
#
# Rules this file enforces (docs/development.md, "Test worlds"): every name carries the test
# name and the PID ($AL_WORLD = al-<test>-<pid>), so tests run in parallel; nothing is
# routed to the real network (namespaces start empty: only loopback, IPv6 off); everything
# created here is removed by the EXIT trap, also on failure or Ctrl-C; background processes
# are ended by the PIDs recorded when they were started, never by name.
#
# Reference
#   al_world_init TEST        AL_WORLD=al-TEST-$$, AL_TMP (temp dir, removed), traps, root check
#   al_ns_add SHORT           create namespace $AL_WORLD-SHORT (lo up, IPv6 disabled); removed
#                             at exit. Echoes nothing; use "$(al_ns SHORT)" for the full name.
#   al_ns SHORT               the full name of a namespace
#   al_ns_adopt NAME          register a namespace created by someone else (e.g. a bind mount
#                             made by a loader in /run/netns) for removal at exit
#   al_nsx SHORT CMD...       run CMD in the namespace with `ip netns exec` (own /sys view:
#                             right for /sys/class/net, sysctl, nft)
#   al_nsenter SHORT CMD...   run CMD with `nsenter --net` only: mounts are the caller's, so
#                             bpffs pins under /sys/fs/bpf stay visible (loaders, CLIs reading
#                             pins); /sys/class/net then shows the caller's namespace
#   al_link S1 CIDR1 S2 CIDR2 [NAME]   veth pair between two namespaces, addressed and up
#   al_bg NAME CMD...         start CMD in the background, output to $AL_TMP/NAME.log;
#                             its PID is recorded and it is killed at exit. CMD must be a
#                             program, not a shell function, so the PID is the program's:
#                             `ip netns exec` and `nsenter` exec their command in place.
#   al_wait_line NAME REGEX [SECONDS]  wait until NAME's log has a line matching REGEX
#                             (fails at once if NAME, started with al_bg, has exited)
#   al_wait_until SECS CMD... run CMD until it succeeds, at most SECS seconds (tests/lib/wait.sh)
#   al_kill NAME [SIGNAL]     signal the recorded PID (default TERM) and reap it
#   al_pid NAME               the recorded PID
#   al_on_cleanup CMD         run CMD (a string, eval'ed) at exit, last registered first
#   al_cleanup_path PATH      rm -rf PATH at exit (refuses "/" and empty)
#   al_net SHORT ARGS...      tests/lib/nettool.py ARGS... inside the namespace (clients:
#                             tcp, udp, icmp, rawip, frame; servers: serve-tcp, serve-udp)
#   al_rx_packets SHORT IFACE rx packet counter of an interface (reads the namespace's sysfs)
#   al_ok MSG CMD...          assert CMD succeeds;  al_fail MSG CMD...  assert it fails
#   al_match MSG REGEX CMD... assert CMD succeeds and its output matches REGEX (grep -E)
#                             (after any al_ok/al_fail/al_match, $AL_OUT holds the output)
#   al_eq MSG GOT WANT        assert equality;      al_check MSG COND-CMD...  alias of al_ok
#   al_note MSG               print a progress line
#   al_done                   print "N passed, M failed" and exit with the failure count
#
# Sandboxes and daemons that need a python helper use $AL_NETTOOL (tests/lib/nettool.py).

AL_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$AL_LIB_DIR/wait.sh"
AL_NETTOOL="$AL_LIB_DIR/nettool.py"
AL_PASSED=0
AL_FAILED=0
AL__NS=()
AL__CLEANUP=()
declare -A AL__PIDS=()

al_note() { printf '== %s\n' "$*"; }

al_world_init() {
  local test=$1
  if [ "$(id -u)" != 0 ]; then
    echo "$test: needs root (network namespaces, bpf, nftables); run it as root" >&2
    exit 1
  fi
  AL_WORLD="al-$test-$$"
  AL_TMP=$(mktemp -d "/tmp/$AL_WORLD.XXXXXX")
  trap al__cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

al_ns() { printf '%s-%s' "$AL_WORLD" "$1"; }

al_ns_add() {
  local ns
  ns=$(al_ns "$1")
  ip netns add "$ns" || return 1
  AL__NS+=("$ns")
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1 || true
  ip -n "$ns" link set lo up
}

al_ns_adopt() { AL__NS+=("$1"); }

al_nsx() {
  local ns
  ns=$(al_ns "$1"); shift
  ip netns exec "$ns" "$@"
}

al_nsenter() {
  local ns
  ns=$(al_ns "$1"); shift
  nsenter --net="/run/netns/$ns" -- "$@"
}

al_link() {
  local s1=$1 c1=$2 s2=$3 c2=$4 name=${5:-}
  local a b
  name=${name:-ln$RANDOM}
  a="${name}a"; b="${name}b"
  ip link add "$a" netns "$(al_ns "$s1")" type veth peer name "$b" netns "$(al_ns "$s2")" || return 1
  ip -n "$(al_ns "$s1")" addr add "$c1" dev "$a"
  ip -n "$(al_ns "$s2")" addr add "$c2" dev "$b"
  ip -n "$(al_ns "$s1")" link set "$a" up
  ip -n "$(al_ns "$s2")" link set "$b" up
  AL_LINK_A=$a
  AL_LINK_B=$b
}

al_bg() {
  local name=$1; shift
  if declare -F "$1" >/dev/null; then
    echo "al_bg: '$1' is a shell function; give a program (its PID is what gets killed)" >&2
    return 1
  fi
  "$@" >"$AL_TMP/$name.log" 2>&1 &
  AL__PIDS[$name]=$!
}

al_pid() { printf '%s' "${AL__PIDS[$1]:-}"; }

al_wait_line() {
  local name=$1 re=$2 secs=${3:-10} i pid=${AL__PIDS[$1]:-} why="timeout waiting for"
  for ((i = 0; i < secs * 10; i++)); do
    grep -Eq -- "$re" "$AL_TMP/$name.log" 2>/dev/null && return 0
    # A job that has exited will not write the line: say so now, not at the timeout.
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      grep -Eq -- "$re" "$AL_TMP/$name.log" 2>/dev/null && return 0
      why="$name exited without writing"
      break
    fi
    sleep 0.1
  done
  echo "$why /$re/ in $name.log:" >&2
  sed 's/^/    /' "$AL_TMP/$name.log" >&2 2>/dev/null || true
  return 1
}

al_kill() {
  local name=$1 sig=${2:-TERM} pid
  pid=${AL__PIDS[$name]:-}
  [ -n "$pid" ] || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset "AL__PIDS[$name]"
}

al_on_cleanup() { AL__CLEANUP+=("$1"); }

al_cleanup_path() {
  case "$1" in ""|/) echo "al_cleanup_path: refusing '$1'" >&2; return 1 ;; esac
  AL__CLEANUP+=("rm -rf -- '$1'")
}

al_net() {
  local ns
  ns=$(al_ns "$1"); shift
  ip netns exec "$ns" python3 "$AL_NETTOOL" "$@"
}

al_rx_packets() {
  ip netns exec "$(al_ns "$1")" cat "/sys/class/net/$2/statistics/rx_packets"
}

al_ok() {
  local msg=$1; shift
  local out
  if out=$("$@" 2>&1); then
    AL_PASSED=$((AL_PASSED + 1)); printf 'ok   %s\n' "$msg"
    [ -z "${AL_VERBOSE:-}" ] || printf '     %s\n' "$out"
  else
    AL_FAILED=$((AL_FAILED + 1)); printf 'FAIL %s\n     command: %s\n' "$msg" "$*"
    printf '%s\n' "$out" | sed 's/^/     | /'
  fi
  AL_OUT=$out
}

al_fail() {
  local msg=$1; shift
  local out
  if out=$("$@" 2>&1); then
    AL_FAILED=$((AL_FAILED + 1)); printf 'FAIL %s (succeeded, should have failed)\n     command: %s\n' "$msg" "$*"
    printf '%s\n' "$out" | sed 's/^/     | /'
  else
    AL_PASSED=$((AL_PASSED + 1)); printf 'ok   %s\n' "$msg"
  fi
  AL_OUT=$out
}

al_check() { al_ok "$@"; }

al_match() {
  local msg=$1 re=$2; shift 2
  local out
  if out=$("$@" 2>&1) && grep -Eq -- "$re" <<<"$out"; then
    AL_PASSED=$((AL_PASSED + 1)); printf 'ok   %s\n' "$msg"
    [ -z "${AL_VERBOSE:-}" ] || printf '     %s\n' "$out"
  else
    AL_FAILED=$((AL_FAILED + 1)); printf 'FAIL %s\n     command: %s\n     want: /%s/\n' "$msg" "$*" "$re"
    printf '%s\n' "$out" | sed 's/^/     | /'
  fi
  AL_OUT=$out
}

al_eq() {
  local msg=$1 got=$2 want=$3
  if [ "$got" = "$want" ]; then
    AL_PASSED=$((AL_PASSED + 1)); printf 'ok   %s\n' "$msg"
  else
    AL_FAILED=$((AL_FAILED + 1)); printf 'FAIL %s: got "%s", want "%s"\n' "$msg" "$got" "$want"
  fi
}

al_done() {
  printf '%d passed, %d failed\n' "$AL_PASSED" "$AL_FAILED"
  exit "$AL_FAILED"
}

al__cleanup() {
  local rc=$? name i ns
  for name in "${!AL__PIDS[@]}"; do
    kill -TERM "${AL__PIDS[$name]}" 2>/dev/null || true
  done
  for name in "${!AL__PIDS[@]}"; do
    for i in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "${AL__PIDS[$name]}" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "${AL__PIDS[$name]}" 2>/dev/null || true
    wait "${AL__PIDS[$name]}" 2>/dev/null || true
  done
  for ((i = ${#AL__CLEANUP[@]} - 1; i >= 0; i--)); do
    eval "${AL__CLEANUP[$i]}" || true
  done
  for ns in "${AL__NS[@]}"; do
    ip netns del "$ns" 2>/dev/null || true
  done
  [ -z "${AL_TMP:-}" ] || rm -rf -- "$AL_TMP"
  exit "$rc"
}
