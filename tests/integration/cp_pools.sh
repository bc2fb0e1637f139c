#!/usr/bin/env bash
# tests/integration/cp_pools.sh: the pools after a burst, and the timing of each creation's
# stages (jail sandboxes, network on, in the cp_world).
#   - both pools (networks: pool_size 2; warm airlock-vmm processes: warm_pool 2) are full
#     after the start;
#   - a burst of three creations empties them; once it is over both are full again within a
#     few seconds. metrics_interval is an hour here, so the periodic tick cannot be what
#     refilled them: the network pool used to wait for it (5 s by default), and a burst
#     arriving meanwhile made every network on demand, one at a time;
#   - /metrics's airlock_pool_ready and airlock_pool_size say so too;
#   - /metrics has airlock_sandbox_create_stage_duration_seconds for each stage (accept,
#     network, egress, queue, start), three creations each, whose times add up to the creations'
#     total; each creation's log line names its stages;
#   - a template with startCmd/readyCmd is created from a warm airlock-vmm too, and its
#     creation answers once the readyCmd succeeded.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_pools: $b is not built: SKIP"; exit 0; }
done
CP_SANDBOXES_EXTRA="  warm_pool: 2
  metrics_interval: 1h" cp_world cp_pools jail on
cp_start || exit 1
APID=$(al_pid airlockd)

n_ifaces() { ip -n "$CP_HOSTNS" -o link 2>/dev/null | grep -c " $CP_PREFIX[0-9a-z]*[:@]" || true; }
# Warm airlock-vmm processes still waiting: started with --warm and without a sandbox (a
# process that took one has its sandbox's first process as a child).
n_warm() {
  local p n=0
  for p in $(pgrep -P "$APID" -f -- '--warm'); do pgrep -P "$p" >/dev/null || n=$((n + 1)); done
  echo "$n"
}
# Waits up to $1 tenths of a second for "$(n_ifaces) $(n_warm)" to be $2.
wait_pools() {
  local i
  for i in $(seq "$1"); do
    [ "$(n_ifaces) $(n_warm)" = "$2" ] && break
    sleep 0.1
  done
  echo "$(n_ifaces) $(n_warm)"
}
# The network pool keeps 2 ready, and 2 more half-made (down, see vswitch/net.c).
al_eq "after the start: 2 pooled networks (+2 made ahead), 2 warm airlock-vmm" \
  "$(wait_pools 300 '4 2')" "4 2"

IDS=$AL_TMP/ids
: >"$IDS"
PIDS=()
# One file per creation: concurrent appends to one file can interleave (python's print writes
# the id and its newline separately), which once made two ids one line.
for i in 1 2 3; do
  cp_create >"$IDS.$i" &
  PIDS+=($!)
done
wait "${PIDS[@]}" # (not a bare wait: the world's servers are background jobs too)
cat "$IDS".1 "$IDS".2 "$IDS".3 >"$IDS"
al_eq "a burst of three creations" "$(grep -c . "$IDS")" 3
# Three sandboxes hold a network each; the pool has two more again (and two made ahead), and
# two warm processes.
al_eq "after the burst, both pools are full again (3 sandboxes' networks + 2 pooled + 2 made ahead, 2 warm)" \
  "$(wait_pools 50 '7 2')" "7 2"

M=$(cp_api "$CP_URL/metrics")
# The pools' gauges say what the processes and interfaces counted above say.
for pool in airlock-vmm network; do
  al_match "/metrics: the $pool pool keeps 2" "^airlock_pool_size\{pool=\"$pool\"\} 2$" echo "$M"
  al_match "/metrics: the $pool pool has 2 ready" "^airlock_pool_ready\{pool=\"$pool\"\} 2$" echo "$M"
done
for st in accept network egress queue start; do
  al_match "stage $st: three creations timed" \
    "^airlock_sandbox_create_stage_duration_seconds_count\{stage=\"$st\"\} 3$" echo "$M"
  al_match "stage $st: its +Inf bucket has them all" \
    "^airlock_sandbox_create_stage_duration_seconds_bucket\{stage=\"$st\",le=\"\+Inf\"\} 3$" echo "$M"
done
SUMS=$(echo "$M" | python3 -c '
import re, sys
t = sys.stdin.read()
stages = sum(float(v) for v in re.findall(
    r"^airlock_sandbox_create_stage_duration_seconds_sum\{stage=\"\w+\"\} ([\d.]+)$", t, re.M))
total = float(re.search(r"^airlock_sandbox_create_duration_seconds_sum ([\d.]+)$", t, re.M)[1])
# The stages cover a creation from its request to its healthy agent; what they leave out is
# the bookkeeping after the start (microseconds).
print("ok" if total > 0 and 0.9 * total <= stages <= total + 1e-6 else f"stages {stages} total {total}")
')
al_eq "the stages add up to the creations' total time" "$SUMS" ok
al_eq "each creation's log line names its stages" \
  "$(grep -cE 'created in [0-9.]+ ms .*stages: accept [0-9.]+, network [0-9.]+, egress [0-9.]+, queue [0-9.]+, start [0-9.]+ ms' "$AL_TMP/airlockd.log")" 3

# A template with startCmd/readyCmd (built from base through the build API, as the SDK does):
# a creation takes a warm airlock-vmm like any other (the template is given when it is
# claimed, so the agent it starts runs the start command), and answers once the readyCmd
# succeeded: the sandbox's first command reaches the server the start command brought up.
BID=$(cp_api -X POST "$CP_URL/v3/templates" -d '{"name":"svc"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["buildID"])')
cp_api -X POST "$CP_URL/v2/templates/svc/builds/$BID" -d '{"fromTemplate":"base",
  "startCmd":"sleep 1; echo up > /tmp/www.txt; cd /tmp && exec python3 -m http.server 8000 --bind 127.0.0.1",
  "readyCmd":"curl -fs http://127.0.0.1:8000/www.txt","steps":[]}' >/dev/null
svc_ready() { cp_api "$CP_URL/templates/svc/builds/$BID/status" | grep -q '"status": *"ready"'; }
al_ok "the template svc is built" al_wait_until 120 svc_ready
al_eq "the pools are full before its creation" "$(wait_pools 50 '7 2')" "7 2"
SVC=$(cp_create '{"templateID":"svc","timeout":600}')
al_match "a sandbox of svc is created from a warm airlock-vmm" \
  "sandbox $SVC created in .*template svc, .*\(warm airlock-vmm\)" cat "$AL_TMP/airlockd.log"
al_eq "... its first command reaches the start command's server" \
  "$(cp_exec "$SVC" curl -fs http://127.0.0.1:8000/www.txt)" up
[ -n "$SVC" ] && echo "$SVC" >>"$IDS"

while read -r id; do cp_cli sandbox kill "$id" >/dev/null; done <"$IDS"
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
