#!/usr/bin/env bash
# tests/integration/cp_hostlimits.sh: the limits of all sandboxes together, end to end (jail
# sandboxes, network on, in the cp_world).
#   - airlockd sets pids.max on its cgroup parent (sandboxes.total_pids) and says at start
#     that sandboxes.max x sandboxes.pids overcommits it, and what happens then;
#   - a sandbox that forks whenever it can fills the parent's limit (never its own: 1024);
#   - a new sandbox is then refused with a 503 that names the limit, while airlockd,
#     airlock-egress and a neighbour sandbox keep answering: the neighbour's agent (a file
#     read), and a server in the neighbour started before, reached through airlockd, whose
#     request to the fake internet goes through airlock-egress;
#   - once the hog is gone, sandboxes start again;
#   - the vswitch's interface table has network.max_interfaces entries (4 here): with four
#     sandboxes, a fifth is refused with a 503 naming the key;
#   - airlockd's open files: with its RLIMIT_NOFILE lowered (prlimit) to room for the four,
#     a fifth is refused with a 503 naming the limit and the fix, before anything starts;
#   - restarted under a low `ulimit -n` and with sandboxes.uid_slots 2: the start summary says
#     how many sandboxes the open files allow, and a third sandbox is a 503 naming
#     sandboxes.uid_slots; nothing is left behind.
# A configuration that leaves the host too few processes is refused at start.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_hostlimits: $b is not built: SKIP"; exit 0; }
done
TOTAL=160
IFACES=4
CP_NETWORK_EXTRA="  max_interfaces: $IFACES" CP_SANDBOXES_EXTRA="  warm_pool: 0
  total_pids: $TOTAL" cp_world cp_hostlimits jail on
pid_max=$(cat /proc/sys/kernel/pid_max)

al_note "a total_pids that leaves the host nothing is refused at start"
cp "$AL_TMP/airlockd.yaml" "$AL_TMP/airlockd.good.yaml"
sed -i "s/^  total_pids: .*/  total_pids: $pid_max/" "$AL_TMP/airlockd.yaml"
al_fail "airlockd refuses to start" nsenter --net="/run/netns/$CP_HOSTNS" -- env \
  AIRLOCK_API_KEY="$CP_KEY" "$AIRLOCK_BIN/airlockd" --listen 127.0.0.1:0 --state-dir "$CP_STATE" \
  --config "$AL_TMP/airlockd.yaml"
al_match "... saying why and what to set" "sandboxes.total_pids $pid_max leaves the host none of its" \
  echo "$AL_OUT"
cp "$AL_TMP/airlockd.good.yaml" "$AL_TMP/airlockd.yaml"

cp_start || exit 1
al_match "the start summary states the limit of all sandboxes together" \
  "all sandboxes together \(cgroup $CP_CG\): $TOTAL processes" cat "$AL_TMP/airlockd.log"
al_match "... and the overcommit, with what happens then" \
  "overcommit  processes: sandboxes.max 1000 x 1024 \(sandboxes.pids\) = 1024000 > $TOTAL.*new sandboxes are refused \(503\)" \
  cat "$AL_TMP/airlockd.log"
if [ -f "/sys/fs/cgroup/$CP_CG/pids.max" ]; then PG="/sys/fs/cgroup/$CP_CG"; else PG="/sys/fs/cgroup/pids/$CP_CG"; fi
al_eq "the parent's pids.max" "$(cat "$PG/pids.max" 2>&1)" "$TOTAL"

created() { python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }
N_JSON=$(cp_api -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":600,"metadata":{"airlock.policy":"e2e"}}')
N=$(created sandboxID <<<"$N_JSON")
NTOK=$(created envdAccessToken <<<"$N_JSON")
NTT=$(created trafficAccessToken <<<"$N_JSON")
al_note "neighbour $N"
in_host() { nsenter --net="/run/netns/$CP_HOSTNS" "$@"; }
upload() { # SANDBOX TOKEN FILE PATH
  in_host curl -sS -f -H "E2b-Sandbox-Id: $1" -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $2" \
    -F "file=@$3;filename=$4" "$CP_URL/files?path=$4" >/dev/null
}
# The neighbour's server: one process, started now, that answers /probe with what
# http://allowed.test gives it (through airlock-egress), forking nothing.
cat >"$AL_TMP/probe.py" <<'PY'
import http.server, urllib.request
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        try:
            body = urllib.request.urlopen("http://allowed.test/hostlimits", timeout=20).read()
            code = 200
        except Exception as e:
            body, code = ("upstream: %r" % e).encode(), 502
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
PY
al_ok "the neighbour's server, uploaded" upload "$N" "$NTOK" "$AL_TMP/probe.py" /tmp/probe.py
al_ok "... and started in the background" \
  cp_exec "$N" sh -c 'setsid python3 /tmp/probe.py >/tmp/probe.log 2>&1 </dev/null &'
# "<status> <body>" on one line.
probe() {
  local out
  out=$(in_host curl -sS -m 60 -H "E2b-Sandbox-Id: $N" -H "E2b-Sandbox-Port: 8000" \
    -H "E2B-Traffic-Access-Token: $NTT" -w '\n%{http_code}' "$CP_URL/probe") || return 1
  printf '%s %s\n' "$(tail -n1 <<<"$out")" "$(sed '$d' <<<"$out" | tr -d '\n')"
}
# Wait for it to listen: its log says nothing, but the port answers once it is up (the
# agent's own ss, forking nothing here, would do too; a forwarded request is what we test).
up=no
deadline=$((SECONDS + 120))
while [ $SECONDS -lt $deadline ]; do
  cp_exec "$N" sh -c 'ss -ltn | grep -q 127.0.0.1:8000' 2>/dev/null && { up=yes; break; }
  sleep 0.2
done
al_eq "the neighbour's server listens" "$up" yes
al_match "... and answers, through airlock-egress, before the hog" '^200 .*"server": "good".*"target": "/hostlimits"' probe

H_JSON=$(cp_api -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":600}')
H=$(created sandboxID <<<"$H_JSON")
HTOK=$(created envdAccessToken <<<"$H_JSON")
al_note "hog $H"
# It keeps asking (not: forks until the first refusal, then stops): a process of the parent
# that ends after the hog's last fork (the shell that started it, an agent's helper) would
# otherwise leave the parent one short of its limit for the rest of the test.
cat >"$AL_TMP/hog.py" <<'PY'
import os, time
while True:
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.01)
        continue
    if pid == 0:
        time.sleep(3600)
        os._exit(0)
PY
al_ok "the hog, uploaded" upload "$H" "$HTOK" "$AL_TMP/hog.py" /tmp/hog.py
al_ok "... and started: it forks whenever it can" \
  cp_exec "$H" sh -c 'setsid python3 /tmp/hog.py >/dev/null 2>&1 </dev/null &'
full=no
deadline=$((SECONDS + 180))
while [ $SECONDS -lt $deadline ]; do
  [ "$(cat "$PG/pids.current")" -ge "$TOTAL" ] && { full=yes; break; }
  sleep 0.2
done
al_eq "the sandboxes together are at their limit ($PG/pids.current)" "$full" yes
HG=$(dirname "$PG")/$CP_CG/$H
al_match "... the hog is below its own limit (1024)" '^[0-9]{2,3}$' cat "$HG/pids.current"

al_note "a new sandbox is refused, clearly"
out=$(cp_api -w '\n%{http_code}' -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":60}')
al_match "503" '^503$' tail -n1 <<<"$out"
al_match "... naming the limit and what to do" \
  "the sandboxes together are at their process limit: cgroup .*$CP_CG has [0-9]+ of $TOTAL processes.*sandboxes.total_pids.*try again" \
  echo "$out"
al_note "what keeps answering"
al_match "airlockd (the sandbox list)" "$N +[^ ]+ +running" cp_cli sandbox ls
al_match "the neighbour's agent (a file read through envd)" 'import http.server' \
  in_host curl -sS -f -H "E2b-Sandbox-Id: $N" -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $NTOK" \
  "$CP_URL/files?path=/tmp/probe.py"
al_match "the neighbour's server, and airlock-egress for it" '^200 .*"server": "good".*"target": "/hostlimits"' probe
al_eq "(the limit was still full meanwhile)" "$(cat "$PG/pids.current")" "$TOTAL"

al_note "the hog goes: sandboxes start again"
al_ok "kill the hog" cp_cli sandbox kill "$H"
al_ok "a new sandbox starts" cp_create '{"templateID":"base","timeout":60}'
al_match "... and runs commands" '^after$' cp_exec "$AL_OUT" echo after

al_note "the interface table: network.max_interfaces"
al_match "airlock vswitch status says its size" "^$IFACES\$" python3 -c '
import json, sys; print(json.loads(sys.argv[1])["max_interfaces"])' \
  "$(in_host "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE" vswitch status --json)"
al_ok "a third sandbox" cp_create '{"templateID":"base","timeout":60}'
al_ok "a fourth" cp_create '{"templateID":"base","timeout":60}'
out=$(cp_api -w '\n%{http_code}' -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":60}')
al_match "a fifth: 503" '^503$' tail -n1 <<<"$out"
al_match "... naming the limit and what to do" \
  "no network for the sandbox: the switch's interface table is full \($IFACES networks.*network.max_interfaces" \
  echo "$out"

al_note "airlockd's open files: 2 per sandbox after a reserve of 2048 and the pools (2 networks)"
al_ok "airlockd's RLIMIT_NOFILE lowered to room for four" \
  prlimit --pid "$(al_pid airlockd)" --nofile=$((2048 + 2 + 2 * 4))
out=$(cp_api -w '\n%{http_code}' -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":60}')
al_match "a fifth: 503" '^503$' tail -n1 <<<"$out"
al_match "... naming the limit and the fix" \
  "RLIMIT_NOFILE 2058\) has room for 4 sandboxes .* and [0-9]+ exist: raise LimitNOFILE= .*ulimit -n" \
  echo "$out"
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""

al_note "restarted under ulimit -n $((2048 + 2 + 2 * 3)), with sandboxes.uid_slots 2"
sed -i "s/^  total_pids: .*/&\n  uid_slots: 2/" "$AL_TMP/airlockd.yaml"
ulimit -n $((2048 + 2 + 2 * 3))
cp_start || exit 1
al_match "the start summary says what the open files allow" \
  "overcommit  airlockd's open files: RLIMIT_NOFILE 2056 has room for 3 sandboxes .* < sandboxes.max 1000.*LimitNOFILE=" \
  cat "$AL_TMP/airlockd.log"
al_ok "a sandbox" cp_create '{"templateID":"base","timeout":60}'
al_ok "a second" cp_create '{"templateID":"base","timeout":60}'
out=$(cp_api -w '\n%{http_code}' -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":60}')
al_match "a third: 503" '^503$' tail -n1 <<<"$out"
al_match "... naming sandboxes.uid_slots" \
  "2 sandboxes hold all 2 of the jail's user-id ranges \(sandboxes.uid_slots\): raise it" echo "$out"
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
