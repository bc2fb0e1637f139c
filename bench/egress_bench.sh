#!/usr/bin/env bash
# bench/egress_bench.sh: airlock-egress against a direct connection and a reference proxy
# from Debian (nginx: http proxy_pass with an allowlisted server_name, and stream with
# ssl_preread allowlisting on SNI), all measured in the same run, in a namespace world with
# no route out (needs root). Prints JSON lines; every figure has its references next to it.
#
#   bench/egress_bench.sh [--build DIR] [--duration S] [--rounds N] [--quick] [--only GROUP]
#                         [--perf] [--perf-stat] [--strace] [--callgrind] [--nginx-log]
#                         [--nginx-half-close] [--aggregation-ab] [--ab BUILD]
#   GROUP: http, http_conns (one request per connection, no keep-alive), latency, tls_conns,
#   tls_bulk, idle, copy, intercept (only when asked: TLS
#   interception through airlock-egress, an inspect rule toward a TLS nginx upstream;
#   bench/icpt_client.py: new connections with a full handshake each, and keep-alive
#   requests; the proxy's CPU per connection and per request).
#   The reference nginx does less than airlock-egress unless told: --nginx-log makes it write
#   an access log of every HTTP request (buffered, as in production; airlock-egress audits
#   every request), --nginx-half-close forwards a TCP half-close in its stream proxy
#   (proxy_half_close on; airlock-egress always does, where nginx by default closes both
#   sides at the first end of stream).
#   --aggregation-ab: the HTTP group also runs airlock-egress with the audit budgets off
#   (--audit-allow-rate 0: every request a record of its own, as "egress_noagg") in the same
#   rounds as the default run, whose one sandbox is far beyond its budget (its requests are
#   counted into aggregate records), so both are measured beside nginx in one run.
#   --ab BUILD: the groups http, http_conns and tls_conns also run BUILD's airlock-egress
#   (another build of the tree, e.g. the one before a change: "egress_base") in the same
#   rounds, right after this build's; each round's ratio of the two is printed as
#   "<group>_egress_vs_egress_base" (above 1: this build did better).
#   --perf records the proxies with `perf record` (PERF_CALLGRAPH, default -g; e.g.
#   "--call-graph dwarf,16384") into perf.data.egress and perf.data.ref (with --only
#   intercept: perf.data.<run>) in the current directory; --perf-stat counts the proxy's
#   system calls and CPU per request (perf stat); --strace counts the proxies' system calls
#   (strace.out.egress and strace.out.ref; STRACE_ARGS replaces the default -c); --callgrind runs the proxy under
#   valgrind's callgrind for the HTTP group (callgrind.out.* in the current directory).
#   Requests/s share the machine with the load generator and the upstreams (all on the
#   same cores): "proxy_cpu_us_per_request" is what the proxy itself spent.
#   --rounds N (default 3; 1 with --quick or a profiler): the groups http, http_conns and
#   tls_conns run direct, airlock-egress and nginx in turn, N times; besides the medians,
#   each round's egress/nginx ratio is printed ("<group>_egress_vs_nginx", metric
#   "<figure>_round_<r>", and its min/median/max over the rounds), so that a verdict such as
#   "at least 1.0 of nginx in every round" reads off the minimum. Per proxy CPU the ratio is
#   nginx's CPU per request over airlock-egress's (above 1: airlock-egress spent less).
#
#   sb1 --TPROXY--> airlock-egress (host ns) --> upstreams (up ns, 203.0.113.10)
#   sb2 -----------> nginx (host ns, 10.200.2.1:8080 http, :8443/:8444 stream) --> upstreams
#   sb2 ---routed--> upstreams directly
# Upstreams and clients are bench/egress_load (single-threaded epoll). Measured:
#   HTTP keep-alive requests/s (closed loop, 32 connections) and latency at 1,000 req/s
#   (open loop, latency from the scheduled send time); TLS passthrough connections/s (a
#   ClientHello and a 1 KiB server flight per connection) and throughput (MB/s, splice and
#   read/write relays); memory per idle proxied connection (RSS of the proxy, and the
#   kernel's TCP memory, per connection).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build="$top/build"
dur=5
quick=0
only=""
perf=0
nginx_log="access_log off;"
nginx_half_close=""
agg_ab=0
rounds_opt=""
ab_build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nginx-log) nginx_log="LOG"; shift ;;
    --nginx-half-close) nginx_half_close="proxy_half_close on;"; shift ;;
    --aggregation-ab) agg_ab=1; shift ;;
    --ab) ab_build=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --perf) perf=1; shift ;;
    --strace) perf=2; shift ;;
    --perf-stat) perf=3; shift ;;
    --callgrind) perf=4; only=${only:-http}; shift ;;
    --build) build=$2; shift 2 ;;
    --duration) dur=$2; shift 2 ;;
    --rounds) rounds_opt=$2; shift 2 ;;
    --quick) quick=1; dur=2; shift ;;
    -h|--help) awk 'NR > 1 && /^set -euo/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "egress_bench: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$rounds_opt" in
  "") ;;
  *[!0-9]*|0) echo "egress_bench: --rounds wants a positive integer, not '$rounds_opt'" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || { echo "egress_bench: needs root (network namespaces)" >&2; exit 1; }
BIN="$build/bin"
LOAD="$build/bench/egress_load"
[ -x "$LOAD" ] || LOAD="$BIN/egress_load"
for f in "$BIN/airlock-egress" "$LOAD"; do
  [ -x "$f" ] || { echo "egress_bench: $f not built (cmake --build $build)" >&2; exit 1; }
done
EGRESS_BIN="$BIN/airlock-egress"
if [ -n "$ab_build" ]; then
  AB_BIN="$ab_build/bin/airlock-egress"
  [ -x "$AB_BIN" ] || { echo "egress_bench: --ab $ab_build has no bin/airlock-egress (build it first)" >&2; exit 1; }
fi
STREAM_MOD=/usr/lib/nginx/modules/ngx_stream_module.so
have_nginx=1
if ! command -v nginx >/dev/null || [ ! -f "$STREAM_MOD" ]; then
  echo "egress_bench: nginx with the stream module not found (deploy/setup installs nginx-light and libnginx-mod-stream); reference skipped" >&2
  have_nginx=0
fi

W="al-egb$(($$ % 100000))"
TMP=$(mktemp -d "/tmp/$W.XXXXXX")
PIDS=()
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for n in host up sb1 sb2; do ip netns del "$W-$n" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
bg() { local log=$1; shift; "$@" >"$TMP/$log" 2>&1 & PIDS+=($!); }
wait_for() { for _ in $(seq 1 "${3:-100}"); do grep -q "$2" "$TMP/$1" 2>/dev/null && return 0; sleep 0.1; done; echo "timeout: $1" >&2; cat "$TMP/$1" >&2; exit 1; }

H=$W-host; U=$W-up
for n in host up sb1 sb2; do ip netns add "$W-$n"; ip -n "$W-$n" link set lo up; done
p="b$(($$ % 100000))"
ip link add "${p}u" type veth peer name "${p}d"
ip link set "${p}u" netns "$H"; ip link set "${p}d" netns "$U"
ip -n "$H" addr add 192.0.2.1/30 dev "${p}u"; ip -n "$H" link set "${p}u" up
ip -n "$U" addr add 192.0.2.2/30 dev "${p}d"; ip -n "$U" link set "${p}d" up
ip -n "$U" addr add 203.0.113.10/32 dev lo; ip -n "$U" addr add 203.0.113.53/32 dev lo
ip -n "$U" route add 10.200.0.0/16 via 192.0.2.1
ip -n "$H" route add 203.0.113.0/24 via 192.0.2.2
for n in 1 2; do
  ip link add "${p}h$n" type veth peer name "${p}s$n"
  ip link set "${p}h$n" netns "$H"; ip link set "${p}s$n" netns "$W-sb$n"
  ip -n "$H" addr add "10.200.$n.1/30" dev "${p}h$n"; ip -n "$H" link set "${p}h$n" up
  ip -n "$W-sb$n" addr add "10.200.$n.2/30" dev "${p}s$n"; ip -n "$W-sb$n" link set "${p}s$n" up
  ip -n "$W-sb$n" route add default via "10.200.$n.1"
done
# New connections at tens of thousands per second: every namespace that connects gets the
# whole port range and reuses its TIME_WAIT ports (these namespaces are the bench's own).
for n in host sb1 sb2; do
  ip netns exec "$W-$n" sysctl -qw net.ipv4.ip_local_port_range="1024 65535" net.ipv4.tcp_tw_reuse=1
done
ip netns exec "$H" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
ip -n "$H" rule add fwmark 1 lookup 100
ip -n "$H" route add local 0.0.0.0/0 dev lo table 100
ip netns exec "$H" nft -f - <<NFT
table ip egress_bench {
  chain pre {
    type filter hook prerouting priority mangle; policy accept;
    iifname "${p}h1" udp dport 53 tproxy to 127.0.0.1:15053 meta mark set 1 accept
    iifname "${p}h1" meta l4proto tcp tproxy to 127.0.0.1:15001 meta mark set 1 accept
  }
}
NFT

# Upstreams.
echo '{"allowed.test": {"A": ["203.0.113.10"], "ttl": 300}, "icpt.test": {"A": ["203.0.113.10"], "ttl": 300}}' >"$TMP/zone.json"
bg dns.log ip netns exec "$U" python3 "$top/tests/integration/egress_tool.py" dns-server 203.0.113.53 53 "$TMP/zone.json"
bg up_http.log ip netns exec "$U" "$LOAD" serve-http 203.0.113.10 80
bg up_tls.log ip netns exec "$U" "$LOAD" serve-tls 203.0.113.10 443 --bytes 1024
bg up_bulk.log ip netns exec "$U" "$LOAD" serve-tls 203.0.113.10 8443 --bytes 0
wait_for dns.log LISTEN; wait_for up_http.log LISTEN; wait_for up_tls.log LISTEN; wait_for up_bulk.log LISTEN

# The reference proxy.
if [ "$have_nginx" = 1 ]; then
  mkdir -p "$TMP/nginx"
  cat >"$TMP/nginx/nginx.conf" <<CONF
load_module $STREAM_MOD;
worker_processes 2;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 20000; }
http {
  ${nginx_log/LOG/access_log $TMP/nginx/access.log combined buffer=64k flush=1s;} keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path $TMP/nginx; proxy_temp_path $TMP/nginx; fastcgi_temp_path $TMP/nginx;
  uwsgi_temp_path $TMP/nginx; scgi_temp_path $TMP/nginx;
  upstream up { server 203.0.113.10:80; keepalive 64; }
  server { listen 10.200.2.1:8080 default_server; return 403; }
  server {
    listen 10.200.2.1:8080; server_name allowed.test;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
stream {
  map \$ssl_preread_server_name \$tls_up { allowed.test 203.0.113.10:443; default 127.0.0.1:1; }
  map \$ssl_preread_server_name \$bulk_up { allowed.test 203.0.113.10:8443; default 127.0.0.1:1; }
  server { listen 10.200.2.1:8443; ssl_preread on; $nginx_half_close proxy_pass \$tls_up; }
  server { listen 10.200.2.1:8444; ssl_preread on; $nginx_half_close proxy_pass \$bulk_up; }
}
CONF
  bg nginx.log ip netns exec "$H" nginx -c "$TMP/nginx/nginx.conf" -g 'daemon off;'
  NGINX_PID=${PIDS[-1]}
  sleep 0.5
fi

start_egress() {
  mkdir -p "$TMP/state"
  local wrap=()
  [ "$perf" = 4 ] && wrap=(valgrind --tool=callgrind --instr-atstart=no
                           --callgrind-out-file="$PWD/callgrind.out.egress.%p")
  bg egress.log ip netns exec "$H" "${wrap[@]}" "$EGRESS_BIN" --state-dir "$TMP/state" --resolver 203.0.113.53 \
    --listen 127.0.0.1:15001 --dns 127.0.0.1:15053 --vswitch off --workers "${EGRESS_WORKERS:-2}" \
    --max-connections 20000 --max-sandbox-connections 10000 --memory-budget 1GiB --log-level warn "$@"
  EGRESS_PID=${PIDS[-1]}
  wait_for egress.log ready 600
  cat >"$TMP/policy.yaml" <<'YAML'
version: 1
name: bench
rules:
  - name: http
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: tls
    hosts: [allowed.test]
    ports: [443, 8443]
YAML
  python3 -c 'import json,sys; print(json.dumps({"id":"bench","addresses":["10.200.1.2"],"policy":{"yaml":open(sys.argv[1]).read()}}))' \
    "$TMP/policy.yaml" >"$TMP/reg.json"
  curl -sf --unix-socket "$TMP/state/run/egress.sock" -X POST --data-binary @"$TMP/reg.json" http://egress/v1/sandboxes >/dev/null
}
stop_egress() { kill "$EGRESS_PID"; wait "$EGRESS_PID" 2>/dev/null || true; }
# warm_egress: the DNS answer and the caches of a proxy just started.
warm_egress() {
  "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 2 --duration 0.5 --name warmup >/dev/null
  "${SB1[@]}" "$LOAD" tls-conns 203.0.113.10 443 --conns 2 --duration 0.5 --name warmup >/dev/null
}

SB1=(ip netns exec "$W-sb1"); SB2=(ip netns exec "$W-sb2")
OUT="$TMP/results.jsonl"
run() { "$@" | tee -a "$OUT"; }
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
want_only() { [ "$only" = "$1" ]; }
# run_egress CMD...: a run through the proxy (recorded by perf when asked).
run_egress() { run_traced "$EGRESS_PID" "$@"; }
# run_traced PIDS CMD...: PIDS (comma-separated) are the proxy's processes.
run_traced() {
  local pids=$1; shift
  if [ "$perf" = 3 ]; then
    perf stat -x, -e raw_syscalls:sys_enter,task-clock,context-switches -p "$pids" -o "$TMP/pstat" &
    local sp=$!
    sleep 0.2
    local out
    out=$("$@")
    kill -INT "$sp"; wait "$sp" 2>/dev/null || true
    printf '%s\n' "$out" >"$TMP/run.out"; tee -a "$OUT" <"$TMP/run.out"
    python3 - "$TMP/pstat" "$TMP/run.out" <<'PY' | tee -a "$OUT"
import json, sys
n, name = 0, "egress"
for line in open(sys.argv[2]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    name = j["bench"]
    if j["metric"] == "requests":
        n = j["value"]
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) < 3 or not n:
        continue
    try:
        val = float(f[0])
    except ValueError:
        continue
    ev = f[2]
    metric = {"raw_syscalls:sys_enter": "syscalls_per_request", "task-clock": "task_clock_us_per_request",
              "context-switches": "context_switches_per_request"}.get(ev)
    if metric:
        scale = 1000.0 if ev == "task-clock" else 1.0   # task-clock is in ms
        print(json.dumps({"bench": name, "metric": metric, "value": round(val * scale / n, 3), "unit": "per_request"}))
PY
  elif [ "$perf" = 4 ]; then
    callgrind_control -z "$EGRESS_PID" >/dev/null 2>&1 || true
    callgrind_control -i on "$EGRESS_PID" >/dev/null
    run "$@"
    callgrind_control -i off "$EGRESS_PID" >/dev/null
    callgrind_control -d "$EGRESS_PID" >/dev/null
  elif [ "$perf" = 2 ]; then
    local tag=egress
    [ "$pids" = "$EGRESS_PID" ] || tag=ref
    strace ${STRACE_ARGS:--c} -f -o "strace.out.$tag" -p "$pids" &
    local sp=$!
    sleep 0.5
    run "$@"
    kill -INT "$sp"; wait "$sp" 2>/dev/null || true
  elif [ "$perf" = 1 ]; then
    local tag=egress
    [ "$pids" = "$EGRESS_PID" ] || tag=ref
    perf record -q ${PERF_CALLGRAPH:--g} -o "perf.data.$tag" -p "$pids" >/dev/null 2>&1 &
    local pp=$!
    sleep 0.2
    run "$@"
    kill -INT "$pp"; wait "$pp" 2>/dev/null || true
  else
    run "$@"
  fi
}

start_egress
warm_egress

# CPU time (clock ticks, user + system, all threads) of processes and their children's
# processes (nginx workers), to state what each proxy spent per request: a figure that the
# other load of a shared machine does not inflate, unlike requests/s.
cpu_ticks() {
  local t=0 p c
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
    for c in $(pgrep -P "$p" 2>/dev/null); do
      [ -r "/proc/$c/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat")))
    done
  done
  echo "$t"
}
HZ=$(getconf CLK_TCK)
# run_cpu NAME PID CMD...: runs CMD (a load generator printing "requests"), then prints the
# CPU the proxy PID spent per request.
# Busy ticks of the whole machine (everything but idle and iowait): the load generator, the
# upstreams, the proxy, and the kernel's own threads (e.g. writing the audit log back to disk).
sys_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
run_cpu() {
  local name=$1 pid=$2; shift 2
  local c0 c1 s0 s1 out
  local pp=0
  # --perf with --only intercept: the proxy is profiled here (perf.data.<name>).
  if [ "$perf" = 1 ] && want_only intercept && [ "$pid" = "${EGRESS_PID:-}" ]; then
    perf record -q ${PERF_CALLGRAPH:--g} -o "perf.data.$name" -p "$pid" >/dev/null 2>&1 &
    pp=$!
    sleep 0.2
  fi
  c0=$(cpu_ticks "$pid"); s0=$(sys_ticks)
  out=$("$@")
  c1=$(cpu_ticks "$pid"); s1=$(sys_ticks)
  if [ "$pp" != 0 ]; then kill -INT "$pp"; wait "$pp" 2>/dev/null || true; fi
  printf '%s\n' "$out" >"$TMP/run.out"; tee -a "$OUT" <"$TMP/run.out"
  python3 - "$name" "$c0" "$c1" "$HZ" "$TMP/run.out" "$s0" "$s1" <<'PY' | tee -a "$OUT"
import json, sys
name, c0, c1, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s0, s1 = int(sys.argv[6]), int(sys.argv[7])
n, what, unit = 0, "request", "req/s"
for line in open(sys.argv[5]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if j.get("metric") == "requests":
        n = j["value"]
    elif j.get("metric") == "connections":   # tls-conns: one connection is the unit of work
        n, what, unit = j["value"], "connection", "conn/s"
cpu = (c1 - c0) / hz
if n > 0 and cpu > 0:
    print(json.dumps({"bench": name, "metric": "proxy_cpu_us_per_" + what, "value": round(cpu / n * 1e6, 2), "unit": "us"}))
    print(json.dumps({"bench": name, "metric": what + "s_per_proxy_cpu_s", "value": round(n / cpu, 1), "unit": unit}))
if n > 0:
    print(json.dumps({"bench": name, "metric": "machine_cpu_us_per_" + what, "value": round((s1 - s0) / hz / n * 1e6, 2), "unit": "us"}))
PY
}
NGINX_PID=${NGINX_PID:-0}
# run_base NAME CMD...: with --ab, CMD through the other build's airlock-egress (started for
# it, with the same options), then this build's again.
run_base() {
  [ -n "$ab_build" ] || return 0
  local name=$1; shift
  stop_egress; EGRESS_BIN=$AB_BIN; start_egress; warm_egress
  run_cpu "$name" "$EGRESS_PID" "$@"
  stop_egress; EGRESS_BIN="$BIN/airlock-egress"; start_egress; warm_egress
}

echo "{\"bench\":\"egress_machine\",\"metric\":\"load_1min_at_start\",\"value\":$(cut -d' ' -f1 /proc/loadavg),\"unit\":\"load\"}" | tee -a "$OUT"
echo "{\"bench\":\"egress_machine\",\"metric\":\"nginx_access_log\",\"value\":$([ "$nginx_log" = LOG ] && echo 1 || echo 0),\"unit\":\"bool\"}" | tee -a "$OUT"

# medians GROUP ROUNDS METRIC...: the median over rounds GROUP_<path>_<round> of each metric,
# printed as GROUP_<path> (paths direct, egress, nginx).
medians() {
  python3 - "$OUT" "$@" <<'PY' | tee -a "$OUT"
import json, statistics, sys
v = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    v[(j["bench"], j["metric"])] = (j["value"], j["unit"])
group, rounds, metrics = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
for path in ("direct", "egress", "egress_base", "egress_noagg", "nginx"):
    for m in metrics:
        got = [v[("%s_%s_%d" % (group, path, r), m)] for r in range(1, rounds + 1)
               if ("%s_%s_%d" % (group, path, r), m) in v]
        if got:
            print(json.dumps({"bench": "%s_%s" % (group, path), "metric": m,
                              "value": round(statistics.median(x[0] for x in got), 3), "unit": got[0][1]}))
PY
}

# ratios GROUP ROUNDS METRIC...: each round's airlock-egress/nginx ratio of each metric (for a
# CPU-per-unit metric the inverse, so that above 1 always means airlock-egress did better),
# and their min, median and max: the rounds are pairs measured back to back, so a burst of
# other load moves both sides of one ratio. With --ab, the same of airlock-egress over
# egress_base. (ratios_of GROUP ROUNDS A B METRIC...: paths A over B.)
ratios() {
  ratios_of "$1" "$2" egress nginx "${@:3}"
  [ -z "$ab_build" ] || ratios_of "$1" "$2" egress egress_base "${@:3}"
}
ratios_of() {
  python3 - "$OUT" "$@" <<'PY' | tee -a "$OUT"
import json, statistics, sys
v = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    v[(j["bench"], j["metric"])] = j["value"]
group, rounds, a, ref, metrics = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
b = "%s_%s_vs_%s" % (group, a, ref)
for m in metrics:
    got = []
    for r in range(1, rounds + 1):
        e, n = v.get(("%s_%s_%d" % (group, a, r), m)), v.get(("%s_%s_%d" % (group, ref, r), m))
        if not e or not n:
            continue
        x = n / e if "_cpu_us_per_" in m else e / n
        got.append(x)
        print(json.dumps({"bench": b, "metric": "%s_round_%d" % (m, r), "value": round(x, 3), "unit": "ratio"}))
    if got:
        for what, x in (("min", min(got)), ("median", statistics.median(got)), ("max", max(got))):
            print(json.dumps({"bench": b, "metric": "%s_%s" % (m, what), "value": round(x, 3), "unit": "ratio"}))
PY
}
# The paths take turns for several rounds (one with --quick or a profiler): each figure is
# the median over the rounds, so that a burst of other load on the shared machine does not
# decide the comparison.
nrounds=$([ "$quick" = 1 ] || [ "$perf" != 0 ] && echo 1 || echo 3)
nrounds=${rounds_opt:-$nrounds}

if want http; then
hrounds=$nrounds
echo "# HTTP keep-alive, 32 connections, $hrounds rounds of ${dur}s per path" >&2
for r in $(seq 1 "$hrounds"); do
  run_cpu "http_keepalive_direct_$r" 0 "${SB2[@]}" "$LOAD" http 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_keepalive_direct_$r"
  if [ "$perf" != 0 ]; then
    run_egress "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_keepalive_egress_$r"
  else
    run_cpu "http_keepalive_egress_$r" "$EGRESS_PID" "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_keepalive_egress_$r"
    run_base "http_keepalive_egress_base_$r" "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_keepalive_egress_base_$r"
  fi
  if [ "$agg_ab" = 1 ] && [ "$perf" = 0 ]; then
    # The same proxy with every request a record of its own, then back to the default.
    stop_egress; start_egress --audit-allow-rate 0 --audit-deny-rate 0
    "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 2 --duration 0.5 --name warmup >/dev/null
    run_cpu "http_keepalive_egress_noagg_$r" "$EGRESS_PID" "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_keepalive_egress_noagg_$r"
    stop_egress; start_egress
    "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 2 --duration 0.5 --name warmup >/dev/null
  fi
  if [ "$have_nginx" = 1 ] && { [ "$perf" = 3 ] || [ "$perf" = 1 ]; }; then
    run_traced "$NGINX_PID,$(pgrep -P "$NGINX_PID" | paste -sd,)" "${SB2[@]}" "$LOAD" http 10.200.2.1 8080 --conns 32 --duration "$dur" --name "http_keepalive_nginx_$r"
  elif [ "$have_nginx" = 1 ]; then
    run_cpu "http_keepalive_nginx_$r" "$NGINX_PID" "${SB2[@]}" "$LOAD" http 10.200.2.1 8080 --conns 32 --duration "$dur" --name "http_keepalive_nginx_$r"
  fi
done
medians http_keepalive "$hrounds" requests_per_s errors latency_p50 latency_p99 proxy_cpu_us_per_request \
  client_cpu_us_per_request machine_cpu_us_per_request requests_per_proxy_cpu_s syscalls_per_request \
  task_clock_us_per_request
ratios http_keepalive "$hrounds" requests_per_s proxy_cpu_us_per_request
fi

if want http_conns; then
# One request per connection ("Connection: close", the client closes after the response):
# the proxy's accept, decision, upstream connect and teardown for every request. nginx keeps
# its upstream connections alive (keepalive 64) where airlock-egress dials one per client
# connection, as a transparent proxy must (the upstream is the client's own destination).
echo "# HTTP new connections, 32 at a time, $nrounds rounds of ${dur}s per path" >&2
for r in $(seq 1 "$nrounds"); do
  run_cpu "http_conns_direct_$r" 0 "${SB2[@]}" "$LOAD" http-conns 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_conns_direct_$r"
  if [ "$perf" != 0 ]; then
    run_egress "${SB1[@]}" "$LOAD" http-conns 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_conns_egress_$r"
  else
    run_cpu "http_conns_egress_$r" "$EGRESS_PID" "${SB1[@]}" "$LOAD" http-conns 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_conns_egress_$r"
    run_base "http_conns_egress_base_$r" "${SB1[@]}" "$LOAD" http-conns 203.0.113.10 80 --conns 32 --duration "$dur" --name "http_conns_egress_base_$r"
  fi
  if [ "$have_nginx" = 1 ] && [ "$perf" != 0 ]; then
    run_traced "$NGINX_PID,$(pgrep -P "$NGINX_PID" | paste -sd,)" "${SB2[@]}" "$LOAD" http-conns 10.200.2.1 8080 --conns 32 --duration "$dur" --name "http_conns_nginx_$r"
  elif [ "$have_nginx" = 1 ]; then
    run_cpu "http_conns_nginx_$r" "$NGINX_PID" "${SB2[@]}" "$LOAD" http-conns 10.200.2.1 8080 --conns 32 --duration "$dur" --name "http_conns_nginx_$r"
  fi
done
medians http_conns "$nrounds" requests_per_s errors latency_p50 latency_p99 proxy_cpu_us_per_request \
  machine_cpu_us_per_request requests_per_proxy_cpu_s
ratios http_conns "$nrounds" requests_per_s proxy_cpu_us_per_request
fi

if want latency; then
# Open loop at 1,000 requests/s; latency counted from each request's scheduled time (and one
# connection in a closed loop, for the latency of one request alone). The
# paths take turns (direct, egress, nginx) for several rounds so that a burst of other load
# on the machine hits all of them alike; each path's p50/p99 is the median over the rounds,
# and the added latency is the median of the per-round differences to the direct path.
rounds=$([ "$quick" = 1 ] && echo 1 || echo 3)
rounds=${rounds_opt:-$rounds}
ldur=$([ "$quick" = 1 ] && echo 3 || echo $((dur * 2)))
echo "# HTTP latency at 1,000 requests/s (20 connections), $rounds rounds of ${ldur}s per path" >&2
for r in $(seq 1 "$rounds"); do
  "${SB2[@]}" "$LOAD" http 203.0.113.10 80 --conns 20 --rate 1000 --duration "$ldur" --name "lat_direct_$r" >>"$TMP/lat.jsonl"
  "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 20 --rate 1000 --duration "$ldur" --name "lat_egress_$r" >>"$TMP/lat.jsonl"
  [ "$have_nginx" = 1 ] && "${SB2[@]}" "$LOAD" http 10.200.2.1 8080 --conns 20 --rate 1000 --duration "$ldur" --name "lat_nginx_$r" >>"$TMP/lat.jsonl"
  # One connection, closed loop: each request sent when the last answer came, so that its
  # latency is the path's own round trip with nothing queued behind it.
  "${SB2[@]}" "$LOAD" http 203.0.113.10 80 --conns 1 --duration "$dur" --name "lat1_direct_$r" >>"$TMP/lat.jsonl"
  "${SB1[@]}" "$LOAD" http 203.0.113.10 80 --conns 1 --duration "$dur" --name "lat1_egress_$r" >>"$TMP/lat.jsonl"
  [ "$have_nginx" = 1 ] && "${SB2[@]}" "$LOAD" http 10.200.2.1 8080 --conns 1 --duration "$dur" --name "lat1_nginx_$r" >>"$TMP/lat.jsonl"
done
python3 - "$TMP/lat.jsonl" "$rounds" <<'PY' | tee -a "$OUT"
import json, statistics, sys
v = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    v[(j["bench"], j["metric"])] = j["value"]
rounds = int(sys.argv[2])
def out(bench, metric, value, unit):
    print(json.dumps({"bench": bench, "metric": metric, "value": round(value, 3), "unit": unit}))
# lat: open loop at 1,000 req/s (http_1000rps_*); lat1: one connection, closed loop (http_c1_*).
for pre, bench in (("lat", "http_1000rps_"), ("lat1", "http_c1_")):
  for path in ("direct", "egress", "nginx"):
    got = [r for r in range(1, rounds + 1) if ("%s_%s_%d" % (pre, path, r), "latency_p99") in v]
    if not got:
        continue
    b = bench + path
    for m in ("latency_p50", "latency_p90", "latency_p99", "latency_max"):
        out(b, m, statistics.median(v[("%s_%s_%d" % (pre, path, r), m)] for r in got), "ms")
    out(b, "samples", sum(v[("%s_%s_%d" % (pre, path, r), "requests")] for r in got), "count")
    out(b, "errors", sum(v[("%s_%s_%d" % (pre, path, r), "errors")] for r in got), "count")
    if path != "direct":
        for p in ("p50", "p99"):
            d = [v[("%s_%s_%d" % (pre, path, r), "latency_" + p)] - v[("%s_direct_%d" % (pre, r), "latency_" + p)]
                 for r in got if ("%s_direct_%d" % (pre, r), "latency_" + p) in v]
            if d:
                out(b, "added_%s_median_of_rounds" % p, statistics.median(d), "ms")
  # Per round, nginx's p50 over airlock-egress's (above 1: airlock-egress answered sooner).
  got = [r for r in range(1, rounds + 1)
         if all(("%s_%s_%d" % (pre, x, r), "latency_p50") in v for x in ("egress", "nginx"))]
  x = [v[("%s_nginx_%d" % (pre, r), "latency_p50")] / v[("%s_egress_%d" % (pre, r), "latency_p50")]
       for r in got if v[("%s_egress_%d" % (pre, r), "latency_p50")] > 0]
  if x:
    for what, y in (("min", min(x)), ("median", statistics.median(x)), ("max", max(x))):
        out(bench + "egress_vs_nginx", "latency_p50_%s" % what, y, "ratio")
PY
fi

if want tls_conns; then
echo "# TLS passthrough: new connections/s (16 at a time)" >&2
# Rounds and medians as for HTTP; the proxies' own CPU per connection beside the rates.
crounds=$nrounds
for r in $(seq 1 "$crounds"); do
  run "${SB2[@]}" "$LOAD" tls-conns 203.0.113.10 443 --conns 16 --duration "$dur" --name "tls_conns_direct_$r"
  if [ "$perf" != 0 ]; then
    run_egress "${SB1[@]}" "$LOAD" tls-conns 203.0.113.10 443 --conns 16 --duration "$dur" --name "tls_conns_egress_$r"
  else
    run_cpu "tls_conns_egress_$r" "$EGRESS_PID" "${SB1[@]}" "$LOAD" tls-conns 203.0.113.10 443 --conns 16 --duration "$dur" --name "tls_conns_egress_$r"
    run_base "tls_conns_egress_base_$r" "${SB1[@]}" "$LOAD" tls-conns 203.0.113.10 443 --conns 16 --duration "$dur" --name "tls_conns_egress_base_$r"
  fi
  if [ "$have_nginx" = 1 ] && [ "$perf" != 0 ]; then
    run_traced "$NGINX_PID,$(pgrep -P "$NGINX_PID" | paste -sd,)" "${SB2[@]}" "$LOAD" tls-conns 10.200.2.1 8443 --conns 16 --duration "$dur" --name "tls_conns_nginx_$r"
  elif [ "$have_nginx" = 1 ]; then
    run_cpu "tls_conns_nginx_$r" "$NGINX_PID" "${SB2[@]}" "$LOAD" tls-conns 10.200.2.1 8443 --conns 16 --duration "$dur" --name "tls_conns_nginx_$r"
  fi
done
medians tls_conns "$crounds" connections_per_s errors proxy_cpu_us_per_connection connections_per_proxy_cpu_s \
  machine_cpu_us_per_connection
ratios tls_conns "$crounds" connections_per_s proxy_cpu_us_per_connection
fi

if want tls_bulk; then
echo "# TLS passthrough throughput (4 connections)" >&2
run "${SB2[@]}" "$LOAD" tls-bulk 203.0.113.10 8443 --conns 4 --duration "$dur" --name tls_bulk_direct
run_egress "${SB1[@]}" "$LOAD" tls-bulk 203.0.113.10 8443 --conns 4 --duration "$dur" --name tls_bulk_egress_splice
[ "$have_nginx" = 1 ] && run "${SB2[@]}" "$LOAD" tls-bulk 10.200.2.1 8444 --conns 4 --duration "$dur" --name tls_bulk_nginx
fi

if want idle; then
echo "# memory per idle proxied connection" >&2
n_idle=$([ "$quick" = 1 ] && echo 500 || echo 2000)
rss() { awk '/^VmRSS/ {print $2 * 1024}' "/proc/$EGRESS_PID/status"; }
tcpmem() { ip netns exec "$H" awk '/^TCP:/ {for (i = 1; i < NF; i++) if ($i == "mem") print $(i + 1) * 4096}' /proc/net/sockstat; }
rss0=$(rss); mem0=$(tcpmem)
bg idle.log "${SB1[@]}" "$LOAD" idle 203.0.113.10 443 --count "$n_idle" --hold 6
wait_for idle.log READY
sleep 1
rss1=$(rss); mem1=$(tcpmem)
ready=$(awk '/READY/ {print $2}' "$TMP/idle.log")
python3 - "$rss0" "$rss1" "$mem0" "$mem1" "$ready" <<'PY' | tee -a "$OUT"
import sys
rss0, rss1, mem0, mem1, n = (int(x) for x in sys.argv[1:])
n = max(n, 1)
for metric, value in (("idle_connections", n), ("proxy_rss_per_idle_conn", (rss1 - rss0) / n),
                      ("kernel_tcp_mem_per_idle_conn", (mem1 - mem0) / n)):
    print('{"bench":"egress_idle_memory","metric":"%s","value":%.1f,"unit":"%s"}' %
          (metric, value, "count" if metric == "idle_connections" else "bytes"))
PY
fi
stop_egress

if want copy || want tls_bulk; then
echo "# TLS throughput with the read/write relay (for comparison with splice)" >&2
start_egress --relay copy
"${SB1[@]}" "$LOAD" tls-conns 203.0.113.10 443 --conns 2 --duration 0.5 --name warmup >/dev/null
run "${SB1[@]}" "$LOAD" tls-bulk 203.0.113.10 8443 --conns 4 --duration "$dur" --name tls_bulk_egress_copy
stop_egress
fi

if want_only intercept; then
echo "# TLS interception through airlock-egress (inspect rule, TLS nginx upstream)" >&2
(cd "$TMP" &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=bench-ca -days 2 \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
    -keyout bca.key -out bca.pem 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=icpt.test \
    -keyout icpt.key -out icpt.csr 2>/dev/null &&
  printf 'subjectAltName=DNS:icpt.test\n' >icpt.ext &&
  openssl x509 -req -in icpt.csr -CA bca.pem -CAkey bca.key -CAcreateserial -days 2 \
    -extfile icpt.ext -out icpt.pem 2>/dev/null) || { echo "egress_bench: test certificates failed" >&2; exit 1; }
mkdir -p "$TMP/upnginx"
cat >"$TMP/upnginx/nginx.conf" <<CONF
worker_processes 1;
pid $TMP/upnginx/nginx.pid;
error_log $TMP/upnginx/error.log warn;
events { worker_connections 20000; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 300s;
  client_body_temp_path $TMP/upnginx; proxy_temp_path $TMP/upnginx; fastcgi_temp_path $TMP/upnginx;
  uwsgi_temp_path $TMP/upnginx; scgi_temp_path $TMP/upnginx;
  server {
    listen 203.0.113.10:9443 ssl; server_name icpt.test;
    ssl_certificate $TMP/icpt.pem; ssl_certificate_key $TMP/icpt.key;
    location / { return 200 "ok\n"; }
  }
}
CONF
bg upnginx.log ip netns exec "$U" nginx -c "$TMP/upnginx/nginx.conf" -g 'daemon off;'
sleep 0.5
start_egress --upstream-ca "$TMP/bca.pem"
cat >"$TMP/policy-icpt.yaml" <<'YAML'
version: 1
name: bench-intercept
rules:
  - name: icpt
    hosts: [icpt.test]
    ports: [9443]
    tls: inspect
YAML
curl -sf --unix-socket "$TMP/state/run/egress.sock" -X DELETE http://egress/v1/sandboxes/bench >/dev/null || true
python3 -c 'import json,sys; print(json.dumps({"id":"bench","addresses":["10.200.1.2"],"policy":{"yaml":open(sys.argv[1]).read()}}))' \
  "$TMP/policy-icpt.yaml" >"$TMP/reg-icpt.json"
curl -sf --unix-socket "$TMP/state/run/egress.sock" -X POST --data-binary @"$TMP/reg-icpt.json" \
  http://egress/v1/sandboxes >"$TMP/reg-icpt.out" || { echo "egress_bench: registration failed" >&2; exit 1; }
python3 -c 'import json,sys; open(sys.argv[2], "w").write(json.load(open(sys.argv[1]))["caCertPem"])' \
  "$TMP/reg-icpt.out" "$TMP/sbca.pem"
ICPT=(python3 "$top/bench/icpt_client.py")
"${SB1[@]}" "${ICPT[@]}" conns 203.0.113.10 9443 icpt.test "$TMP/sbca.pem" --duration 1 --procs 2 --name warmup >/dev/null
run_cpu intercept_new_connections "$EGRESS_PID" "${SB1[@]}" "${ICPT[@]}" conns 203.0.113.10 9443 icpt.test \
  "$TMP/sbca.pem" --duration "$dur" --procs 4 --name intercept_new_connections
run_cpu intercept_keepalive "$EGRESS_PID" "${SB1[@]}" "${ICPT[@]}" keepalive 203.0.113.10 9443 icpt.test \
  "$TMP/sbca.pem" --duration "$dur" --procs 4 --name intercept_keepalive
stop_egress
fi

# Summary: overheads and ratios computed from figures of this run.
python3 - "$OUT" <<'PY'
import json, sys
v = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    v[(j["bench"], j["metric"])] = j["value"]
def out(metric, value, unit):
    print(json.dumps({"bench": "egress_summary", "metric": metric, "value": round(value, 3), "unit": unit}))
g = lambda b, m: v.get((b, m))
for p in ("p50", "p99"):
    e, n = g("http_1000rps_egress", "added_%s_median_of_rounds" % p), g("http_1000rps_nginx", "added_%s_median_of_rounds" % p)
    if e is not None:
        out("http_added_latency_%s_egress" % p, e, "ms")
    if n is not None:
        out("http_added_latency_%s_nginx" % p, n, "ms")
e, n = g("http_keepalive_egress", "requests_per_proxy_cpu_s"), g("http_keepalive_nginx", "requests_per_proxy_cpu_s")
if e and n:
    out("http_keepalive_per_proxy_cpu_egress_vs_nginx", e / n, "ratio")
e, n = g("tls_conns_egress", "connections_per_proxy_cpu_s"), g("tls_conns_nginx", "connections_per_proxy_cpu_s")
if e and n:
    out("tls_conns_per_proxy_cpu_egress_vs_nginx", e / n, "ratio")
e, n = g("http_conns_egress", "requests_per_proxy_cpu_s"), g("http_conns_nginx", "requests_per_proxy_cpu_s")
if e and n:
    out("http_conns_per_proxy_cpu_egress_vs_nginx", e / n, "ratio")
for b, m, unit in (("http_keepalive", "requests_per_s", "ratio"), ("http_conns", "requests_per_s", "ratio"),
                   ("tls_conns", "connections_per_s", "ratio")):
    e, n, d = g(b + "_egress", m), g(b + "_nginx", m), g(b + "_direct", m)
    if e and d:
        out(b + "_egress_vs_direct", e / d, unit)
    if e and n:
        out(b + "_egress_vs_nginx", e / n, unit)
e, n, d, c = g("tls_bulk_egress_splice", "throughput"), g("tls_bulk_nginx", "throughput"), g("tls_bulk_direct", "throughput"), g("tls_bulk_egress_copy", "throughput")
if e and d:
    out("tls_bulk_egress_vs_direct", e / d, "ratio")
if e and n:
    out("tls_bulk_egress_vs_nginx", e / n, "ratio")
if e and c:
    out("tls_bulk_splice_vs_copy", e / c, "ratio")
PY
