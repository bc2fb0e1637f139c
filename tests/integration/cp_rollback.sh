#!/usr/bin/env bash
# tests/integration/cp_rollback.sh: a creation that fails half-way is undone, whole.
#
# airlockd with the jail backend, the vswitch and airlock-egress (cp_world). Creations fail
# after the network was taken and the sandbox registered with the egress proxy:
#   - a template whose root file system is empty (airlock-vmm cannot build the sandbox).
# Each answers an error that says why, and leaves nothing: no sandbox listed, no
# registration in airlock-egress, no sandbox directory, cgroup, mount or process, and only
# the pooled interfaces; the network goes back to the pool and the next creation works.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_rollback: $b is not built: SKIP"; exit 0; }
done
[ -f "$CP_ET" ] || { echo "cp_rollback: egress_tool.py is missing: SKIP"; exit 0; }

CP_SANDBOXES_EXTRA="  warm_pool: 0"
cp_world cp_rollback jail on
cp_start || exit 1

# Left by a failed creation (while airlockd runs: pooled interfaces, and as many made ahead,
# are expected).
leftovers() {
  local n
  n=$(ip -n "$CP_HOSTNS" -o link 2>/dev/null | grep -c " $CP_PREFIX[0-9a-z]*" || true)
  [ "$n" -le 4 ] || echo "interfaces $n (pool size 2, and 2 made ahead)"
  ls -A "$CP_STATE/sandboxes" 2>/dev/null | sed 's/^/sandbox-dir /'
  find /sys/fs/cgroup/*/"$CP_CG" /sys/fs/cgroup/"$CP_CG" -mindepth 1 -maxdepth 1 -type d \
    2>/dev/null | grep -v '/warm' | sed 's/^/cgroup /'
  grep -F "$CP_STATE/sandboxes/" /proc/self/mountinfo | sed 's/^/mount /'
  pgrep -af -- "$CP_STATE/sandboxes" | sed 's/^/process /'
  local regs
  regs=$(curl -s --unix-socket "$CP_STATE/run/egress.sock" http://egress/v1/sandboxes |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
  [ "$regs" = 0 ] || echo "egress registrations $regs"
  local listed
  listed=$(cp_api "$CP_URL/v2/sandboxes" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
  [ "$listed" = 0 ] || echo "listed $listed"
  true
}
settle() { # settle: waits (60 s at most) until nothing is left; prints what is
  local left i
  al_wait_until 60 eval '[ -z "$(leftovers)" ]' || true
  left=$(leftovers)
  echo "$left"
}
create_status() { # create_status BODY: "<HTTP status> <message>"
  cp_api -o "$AL_TMP/create.out" -w '%{http_code}' -X POST "$CP_URL/v2/sandboxes" -d "$1"
  printf ' %s\n' "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("message",""))' "$AL_TMP/create.out" 2>/dev/null)"
}

al_eq "nothing before" "$(settle)" ""

al_note "a template with an empty root file system"
mkdir -p "$CP_STATE/templates/broken/rootfs"
echo '{"name":"broken","user":"user","workdir":"/home/user","env":{},"agent":{}}' \
  >"$CP_STATE/templates/broken/template.json"
al_match "the creation fails with a 5xx that says why (airlock-vmm's reason)" '^5[0-9][0-9] the sandbox did not start: sandbox setup failed at .+' \
  create_status '{"templateID":"broken","metadata":{"airlock.policy":"e2e"}}'
al_eq "... and is undone whole (listing, egress, directories, cgroups, mounts, processes, interfaces)" \
  "$(settle)" ""

al_note "the next creation works (the network went back to the pool)"
SB=$(cp_create '{"templateID":"base","timeout":300,"metadata":{"airlock.policy":"e2e"}}')
al_match "created" '^[a-z0-9]+$' echo "$SB"
al_match "it reaches the allowed upstream" '"server": "good"' \
  cp_exec "$SB" curl -sS -m 10 http://allowed.test/after-rollback
al_ok "kill it" cp_cli sandbox kill "$SB"
al_eq "nothing left" "$(settle)" ""
al_kill airlockd TERM
al_eq "nothing left after airlockd stopped" "$(cp_leaks_settled)" ""
al_done
