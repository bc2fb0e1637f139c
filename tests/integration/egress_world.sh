# tests/integration/egress_world.sh: the world of the egress integration tests (sourced).
#
#   "host"  namespace: airlock-egress (transparent listener 127.0.0.1:15001, DNS on
#           127.0.0.1:15053, admin socket in the test's state dir). Sandbox traffic is
#           steered to it by nftables TPROXY (what the vswitch does with bpf_sk_assign;
#           egress_vswitch.sh runs the same checks behind the real vswitch): TCP and UDP to
#           port 53 -> DNS, other TCP -> the transparent listener, everything else dropped.
#           A route to 203.0.113.0/24 through "up"; nothing else.
#   "up"    namespace: the fake internet on 203.0.113.0/24 (TEST-NET-3): a fake DNS with a
#           zone file the test edits (203.0.113.53), HTTP servers (203.0.113.10 "good",
#           203.0.113.11 "evil"), a TLS server with a certificate from a test CA made by
#           openssl at test time (203.0.113.10:443), a server-first TCP service
#           (203.0.113.12:22). Every request they see is logged, so a test can prove that a
#           denied request never reached an upstream.
#   "sb1", "sb2": sandboxes 10.200.1.2 and 10.200.2.2 (gateway/DNS .1), each on a veth.
# No namespace has a route out of the machine; names carry the PID; the EXIT trap removes
# namespaces, /etc/netns entries and processes (by PID) also when a test fails.
# shellcheck shell=bash

set -u
EW_TOOL="${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_tool.py"
# al_wait_until SECS CMD...: see tests/lib/wait.sh.
source "$AIRLOCK_SOURCE_DIR/tests/lib/wait.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/certs.sh"
EW_BIN="${AIRLOCK_BIN:?}"
EW_PASS=0
EW_FAIL=0
EW_NS=()
declare -A EW_PIDS=()
EW_CLEAN=()

ew_note() { printf '== %s\n' "$*"; }

ew__cleanup() {
  local rc=$?
  set +e
  for name in "${!EW_PIDS[@]}"; do
    kill "${EW_PIDS[$name]}" 2>/dev/null
  done
  for name in "${!EW_PIDS[@]}"; do
    wait "${EW_PIDS[$name]}" 2>/dev/null
  done
  local i
  for ((i = ${#EW_CLEAN[@]} - 1; i >= 0; i--)); do eval "${EW_CLEAN[$i]}"; done
  for ns in "${EW_NS[@]}"; do
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  if [ -n "${EW_TMP:-}" ] && [ -d "$EW_TMP" ]; then
    if [ "$rc" != 0 ] || [ "$EW_FAIL" != 0 ]; then
      echo "-- egress log (last 40 lines) --"; tail -40 "$EW_TMP/egress.err" 2>/dev/null
      mkdir -p /tmp/airlock-egress-failures && cp -r "$EW_TMP" /tmp/airlock-egress-failures/ 2>/dev/null
      echo "(world kept in /tmp/airlock-egress-failures/$(basename "$EW_TMP"))"
    fi
    rm -rf "$EW_TMP"
  fi
  exit "$rc"
}

ew_on_cleanup() { EW_CLEAN+=("$1"); }

ew_ns() { printf '%s-%s' "$EW_WORLD" "$1"; }

ew_ns_add() {
  local ns
  ns=$(ew_ns "$1")
  ip netns add "$ns" || return 1
  EW_NS+=("$ns")
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
}

# ew_bg NAME CMD...: background process, log in $EW_TMP/NAME.log, killed at exit by PID.
ew_bg() {
  local name=$1
  shift
  "$@" >"$EW_TMP/$name.log" 2>&1 &
  EW_PIDS[$name]=$!
}

ew_kill() {
  local pid=${EW_PIDS[$1]:-}
  [ -n "$pid" ] || return 0
  kill "${2:--TERM}" "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "EW_PIDS[$1]"
}

ew_wait_line() {
  local name=$1 re=$2 t=${3:-15} i
  for ((i = 0; i < t * 10; i++)); do
    grep -Eq "$re" "$EW_TMP/$name.log" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timeout waiting for /$re/ in $name.log:" >&2
  tail -5 "$EW_TMP/$name.log" >&2
  return 1
}

ew_up() { ip netns exec "$(ew_ns up)" "$@"; }
ew_host() { ip netns exec "$(ew_ns host)" "$@"; }
# ew_sb N CMD...: run in sandbox N (its resolv.conf points at its gateway).
ew_sb() {
  local n=$1
  shift
  ip netns exec "$(ew_ns "sb$n")" "$@"
}
# ew_raw N HOST PORT DATA [opts]: raw bytes from sandbox N; prints the answer and "END ...".
ew_raw() {
  local n=$1
  shift
  ip netns exec "$(ew_ns "sb$n")" python3 "$EW_TOOL" raw "$@"
}
# ew_curl N ARGS...: curl in sandbox N (bounded).
ew_curl() {
  local n=$1
  shift
  ip netns exec "$(ew_ns "sb$n")" curl -sS -m 8 "$@"
}
ew_dns() {
  local n=$1
  shift
  ip netns exec "$(ew_ns "sb$n")" python3 "$EW_TOOL" dns-query "$@"
}
# ew_hold N HOST PORT COUNT SECONDS [--until-eof]: COUNT idle connections from sandbox N,
# for SECONDS or until its standard input ends.
ew_hold() {
  local n=$1
  shift
  ip netns exec "$(ew_ns "sb$n")" python3 "$EW_TOOL" hold "$@"
}
ew_hello() {
  local n=$1
  shift
  ip netns exec "$(ew_ns "sb$n")" python3 "$EW_TOOL" tls-hello "$@"
}

# ---- assertions ------------------------------------------------------------------------
ew__result() {
  local ok=$1 msg=$2
  if [ "$ok" = 1 ]; then
    EW_PASS=$((EW_PASS + 1))
    printf 'ok   %s\n' "$msg"
  else
    EW_FAIL=$((EW_FAIL + 1))
    printf 'FAIL %s\n' "$msg"
    [ -n "${EW_OUT:-}" ] && printf '     output: %s\n' "$(head -c 600 <<<"$EW_OUT" | tr '\n' '|')"
    # Kept with the world (a failed run keeps its directory): which check failed, and how.
    [ -n "${EW_TMP:-}" ] && [ -d "$EW_TMP" ] &&
      printf 'FAIL %s\n%s\n' "$msg" "$(head -c 4000 <<<"${EW_OUT:-}")" >>"$EW_TMP/failures.txt"
  fi
}
ew_ok() { local m=$1; shift; EW_OUT=$("$@" 2>&1) && ew__result 1 "$m" || ew__result 0 "$m"; }
ew_fail() { local m=$1; shift; EW_OUT=$("$@" 2>&1) && ew__result 0 "$m" || ew__result 1 "$m"; }
ew_match() {
  local m=$1 re=$2
  shift 2
  EW_OUT=$("$@" 2>&1)
  grep -Ezq -- "$re" <<<"$EW_OUT" && ew__result 1 "$m" || ew__result 0 "$m (want /$re/)"
}
ew_nomatch() {
  local m=$1 re=$2
  shift 2
  EW_OUT=$("$@" 2>&1)
  grep -Ezq -- "$re" <<<"$EW_OUT" && ew__result 0 "$m (unexpected /$re/)" || ew__result 1 "$m"
}
ew_eq() { EW_OUT="got '$2'"; [ "$2" = "$3" ] && ew__result 1 "$1" || ew__result 0 "$1 (got '$2', want '$3')"; }
ew_done() {
  echo "egress $EW_NAME: $EW_PASS passed, $EW_FAIL failed"
  [ "$EW_FAIL" = 0 ]
  exit $?
}

# ---- the world ----------------------------------------------------------------------------
# ew_world NAME [proxy options...]: builds everything and starts the proxy.
ew_world() {
  EW_NAME=$1
  shift
  if [ "$(id -u)" != 0 ]; then
    echo "egress $EW_NAME: needs root (network namespaces, nftables)" >&2
    exit 1
  fi
  EW_WORLD="al-eg$(($$ % 1000000))"
  EW_TMP=$(mktemp -d "/tmp/al-egress-$EW_NAME-$$.XXXXXX")
  trap ew__cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  local p="e$(($$ % 1000000))"
  ew_ns_add host && ew_ns_add up && ew_ns_add sb1 && ew_ns_add sb2 || exit 1
  local H U
  H=$(ew_ns host)
  U=$(ew_ns up)
  # host <-> up
  ip link add "${p}u" type veth peer name "${p}d" || exit 1
  ip link set "${p}u" netns "$H"
  ip link set "${p}d" netns "$U"
  ip -n "$H" addr add 192.0.2.1/30 dev "${p}u"
  ip -n "$H" link set "${p}u" up
  ip -n "$U" addr add 192.0.2.2/30 dev "${p}d"
  ip -n "$U" link set "${p}d" up
  for a in 203.0.113.10 203.0.113.11 203.0.113.12 203.0.113.53; do
    ip -n "$U" addr add "$a/32" dev lo
  done
  ip -n "$U" route add 10.200.0.0/16 via 192.0.2.1
  ip -n "$H" route add 203.0.113.0/24 via 192.0.2.2
  # sandboxes
  local n
  for n in 1 2; do
    local S
    S=$(ew_ns "sb$n")
    ip link add "${p}h$n" type veth peer name "${p}s$n" || exit 1
    ip link set "${p}h$n" netns "$H"
    ip link set "${p}s$n" netns "$S"
    ip -n "$H" addr add "10.200.$n.1/30" dev "${p}h$n"
    ip -n "$H" link set "${p}h$n" up
    ip -n "$S" link set "${p}s$n" name eth0
    ip -n "$S" addr add "10.200.$n.2/30" dev eth0
    ip -n "$S" link set eth0 up
    ip -n "$S" route add default via "10.200.$n.1"
    mkdir -p "/etc/netns/$S"
    echo "nameserver 10.200.$n.1" >"/etc/netns/$S/resolv.conf"
  done
  # Steering (stand-in for the vswitch): TPROXY in the host namespace.
  ew_host sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
  ip -n "$H" rule add fwmark 1 lookup 100
  ip -n "$H" route add local 0.0.0.0/0 dev lo table 100
  ew_host nft -f - <<NFT || exit 1
table ip egress_test {
  chain pre {
    type filter hook prerouting priority mangle; policy accept;
    iifname "${p}h*" tcp dport 53 tproxy to 127.0.0.1:${EW_DNS_PORT:-15053} meta mark set 1 accept
    iifname "${p}h*" udp dport 53 tproxy to 127.0.0.1:${EW_DNS_PORT:-15053} meta mark set 1 accept
    iifname "${p}h*" meta l4proto tcp tproxy to 127.0.0.1:15001 meta mark set 1 accept
    iifname "${p}h*" drop
  }
}
NFT
  ew_make_certs "$EW_TMP" || { echo "openssl failed" >&2; exit 1; }
  # The fake internet.
  cat >"$EW_TMP/zone.json" <<'ZONE'
{
  "allowed.test": {"A": ["203.0.113.10"], "ttl": 30},
  "other.test": {"A": ["203.0.113.11"], "ttl": 30},
  "api.allowed.test": {"A": ["203.0.113.10"], "ttl": 30},
  "deep.api.allowed.test": {"A": ["203.0.113.10"], "ttl": 30},
  "evil.test": {"A": ["203.0.113.11"], "ttl": 30}
}
ZONE
  local UPX=(ip netns exec "$U" python3 "$EW_TOOL")
  ew_bg dns "${UPX[@]}" dns-server 203.0.113.53 53 "$EW_TMP/zone.json" --log "$EW_TMP/dns.q"
  ew_bg good "${UPX[@]}" http-server 203.0.113.10 80 --name good --log "$EW_TMP/up.req"
  ew_bg evil "${UPX[@]}" http-server 203.0.113.11 80 --name evil --log "$EW_TMP/up.req"
  ew_bg tls "${UPX[@]}" tls-server 203.0.113.10 443 --cert "$EW_TMP/up.pem" \
    --key "$EW_TMP/up.key" --name tls --log "$EW_TMP/up.req"
  ew_bg banner "${UPX[@]}" tcp-banner 203.0.113.12 22 --log "$EW_TMP/up.req"
  ew_wait_line dns LISTEN && ew_wait_line good LISTEN && ew_wait_line evil LISTEN &&
    ew_wait_line tls LISTEN && ew_wait_line banner LISTEN || exit 1
  ew_start_proxy "$@"
}

# ew_make_certs DIR: a test CA (ca.pem) and the upstreams' certificate (up.pem, up.key) for
# allowed.test and friends (tests/lib/certs.sh).
ew_make_certs() {
  al_cert_ca "$1" "airlock egress test CA $$" &&
    al_cert_leaf "$1" up allowed.test other.test '*.allowed.test' rebind.test
}

ew_start_proxy() {
  EW_STATE="$EW_TMP/state"
  mkdir -p "$EW_STATE"
  "$EW_BIN/airlock-egress" --help >/dev/null || exit 1
  ip netns exec "$(ew_ns host)" "$EW_BIN/airlock-egress" --state-dir "$EW_STATE" \
    --resolver 203.0.113.53 --listen 127.0.0.1:15001 --dns "127.0.0.1:${EW_DNS_PORT:-15053}" --vswitch off \
    --workers 2 "$@" >"$EW_TMP/egress.log" 2>"$EW_TMP/egress.err" &
  EW_PIDS[egress]=$!
  ew_wait_line egress 'ready' 30 || { cat "$EW_TMP/egress.err" >&2; exit 1; }
}

# ew_admin METHOD PATH [JSON]: the admin API; prints the body, then "HTTP <status>".
ew_admin() {
  local args=(-s -o "$EW_TMP/admin.out" -w '%{http_code}' --unix-socket "$EW_STATE/run/egress.sock"
    -X "$1" "http://egress$2")
  [ $# -ge 3 ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
  local code
  code=$(curl "${args[@]}")
  cat "$EW_TMP/admin.out"
  echo
  echo "HTTP $code"
}

# ew_register ID N POLICY.yaml: registers sandbox N (10.200.N.2) with a policy file's text.
ew_register() {
  local body
  body=$(python3 -c 'import json,sys; print(json.dumps({"id": sys.argv[1], "template": "base",
    "addresses": ["10.200.%s.2" % sys.argv[2]], "policy": {"yaml": open(sys.argv[3]).read(),
    "origin": sys.argv[3]}}))' "$1" "$2" "$3")
  ew_admin POST /v1/sandboxes "$body"
}

ew_set_policy() {
  local body
  body=$(python3 -c 'import json,sys; print(json.dumps({"yaml": open(sys.argv[1]).read(),
    "origin": sys.argv[1]}))' "$2")
  ew_admin PUT "/v1/sandboxes/$1/policy" "$body"
}

# ew_audit_sync: every record so far on disk.
ew_audit_sync() { ew_admin POST /v1/audit/sync >/dev/null; }

# ew_audit FILTER...: records matching key=value filters (value may be a /regex/), as JSON
# lines; "decision=deny reason=destination_mismatch host=allowed.test"; dotted keys reach into
# objects and lists ("inject.0.header=Authorization").
ew_audit() {
  ew_audit_sync
  python3 - "$EW_STATE/audit" "$@" <<'PY'
import glob, json, re, sys
d, filters = sys.argv[1], sys.argv[2:]
want = []
for f in filters:
    k, _, v = f.partition("=")
    want.append((k, v))
def get(j, k):
    for part in k.split("."):
        if isinstance(j, list) and part.isdigit():
            j = j[int(part)] if int(part) < len(j) else None
            continue
        if not isinstance(j, dict):
            return None
        j = j.get(part)
    return j
for path in sorted(glob.glob(d + "/egress-*.jsonl")):
    for line in open(path):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        ok = True
        for k, v in want:
            x = get(j, k)
            if v.startswith("/") and v.endswith("/") and len(v) > 1:
                ok = x is not None and re.search(v[1:-1], str(x)) is not None
            else:
                ok = str(x) == v if not isinstance(x, bool) else str(x).lower() == v
            if not ok:
                break
        if ok:
            print(line.rstrip())
PY
}

# ew_audit_has MSG FILTER...: asserts at least one matching record. airlock-egress writes a
# request's record once it has relayed the answer (and a connection's once it has closed
# it), so the client can see the end before the log holds the record: the record is waited
# for (al_wait_until, 60 s bound), not looked for once.
ew__audit_found() { EW_OUT=$(ew_audit "$@") && [ -n "$EW_OUT" ]; }
ew_audit_has() {
  local m=$1
  shift
  if al_wait_until 60 ew__audit_found "$@"; then
    ew__result 1 "$m (audit: $*)"
  else
    ew__result 0 "$m (no audit record with: $*)"
  fi
}

# ew_upstream_saw PATTERN: has any upstream logged a line matching it?
ew_upstream_saw() { grep -Eq -- "$1" "$EW_TMP/up.req" 2>/dev/null; }
