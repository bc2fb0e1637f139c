# tests/integration/jail_lib.sh: shared helpers of the jail_* integration tests (sourced).
#
# Every test gets its own temporary directory (state dir, templates, logs), its own cgroup
# parent (al-test/<test>-<pid>) and unique sandbox ids, so tests can run next to each other
# and next to a real airlock. The EXIT trap kills the airlock-vmm processes the test started
# (by PID), sweeps what they left and removes the cgroup parent and the directory.
#
# The agent: the real airlock-agent when it is built (<build>/agent-root/.airlock), else
# the static stand-in tests/integration/jail_testinit (JAIL_AGENT=testinit forces it).
set -euo pipefail

: "${AIRLOCK_SOURCE_DIR:?run through ctest (AIRLOCK_SOURCE_DIR is not set)}"
: "${AIRLOCK_BINARY_DIR:?run through ctest (AIRLOCK_BINARY_DIR is not set)}"
if [ "$(id -u)" != 0 ]; then
  echo "$0: the jail tests need root (namespaces, cgroups, id-mapped mounts)" >&2
  exit 1
fi

JAIL_TEST=$(basename "$0" .sh)
VMM=$AIRLOCK_BINARY_DIR/bin/airlock-vmm
JAIL_EXEC=$AIRLOCK_SOURCE_DIR/tests/integration/jail_exec.py
T=$(mktemp -d "/tmp/al-${JAIL_TEST#jail_}-$$.XXXX")
chmod 0755 "$T"
STATE=$T/state
CGP=al-test/${JAIL_TEST}-$$
TOKEN=tok-$$-$RANDOM
declare -A VMM_PID=()

REAL_AGENT_DIR=$AIRLOCK_BINARY_DIR/agent-root/.airlock
if [ -x "$REAL_AGENT_DIR/bin/airlock-agent" ] && [ "${JAIL_AGENT:-}" != testinit ]; then
  AGENT_DIR=$REAL_AGENT_DIR
  AGENT_KIND=airlock-agent
else
  AGENT_DIR=$AIRLOCK_BINARY_DIR/testinit-root
  AGENT_KIND=testinit
fi
[ -x "$VMM" ] || { echo "$0: $VMM is not built" >&2; exit 1; }


fail() {
  echo "FAIL: $*" >&2
  for f in "$T"/vmm-*.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }
  done
  exit 1
}
ok() { echo "ok: $*"; }

jail__cleanup() {
  local rc=$?
  set +e
  for id in "${!VMM_PID[@]}"; do
    local pid=${VMM_PID[$id]}
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  [ -d "$STATE" ] && "$VMM" --state-dir "$STATE" --sweep --cgroup-parent "$CGP" >/dev/null 2>&1
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    rmdir "$h$CGP" 2>/dev/null
    rmdir "${h}al-test" 2>/dev/null
  done
  rm -rf "$T"
  exit $rc
}
trap jail__cleanup EXIT

# al_wait_until SECS CMD...: see tests/lib/wait.sh.
. "$AIRLOCK_SOURCE_DIR/tests/lib/wait.sh"

# make_busybox_template DIR: see jail_busybox.sh.
. "$(dirname "${BASH_SOURCE[0]}")/jail_busybox.sh"

# A Debian template from deploy/templates (built once, then cached), installed in $STATE.
ensure_template() {
  "$AIRLOCK_SOURCE_DIR/deploy/templates/build" --state-dir "$STATE" "$1" >&2 ||
    fail "cannot build the $1 template"
}

# jail_spec ID TEMPLATE [EXTRA]: the spec JSON; EXTRA is a JSON fragment of more fields
# (',"binds":[...]'), resources can be overridden with MEM/DISK/PIDS/CPUS, and JAIL_OPTS is
# a fragment of more spec.jail fields (',"restore":"/dir"'), JAIL_ENV one of more env
# variables (',"K":"v"').
jail_spec() {
  local id=$1 tpl=$2 extra=${3:-}
  printf '{"id":"%s","template":"%s",%s"env":{"AL_TEST":"%s"%s},' \
    "$id" "$tpl" "\"access_token\":\"$TOKEN\"," "$JAIL_TEST" "${JAIL_ENV:-}"
  printf '"resources":{"memory_mib":%s,"disk_mib":%s,"pids":%s,"cpus":%s},' \
    "${MEM:-256}" "${DISK:-128}" "${PIDS:-256}" "${CPUS:-1}"
  printf '"agent":{"dir":"%s","start_timeout_ms":15000,"log_max_bytes":%s},' \
    "$AGENT_DIR" "${LOGMAX:-1048576}"
  printf '"jail":{"cgroup_parent":"%s"%s}%s}\n' "$CGP" "${JAIL_OPTS:-}" "$extra"
}

# jail_start ID TEMPLATE [EXTRA]: starts airlock-vmm (spec on stdin) and waits until the
# agent is healthy. Sets AGENT_PID_<id> is not possible in bash for ids with '-': use
# jail_agent_pid ID.
jail_start() {
  local id=$1
  jail_spec "$@" > "$T/spec-$id.json"
  : > "$T/ready-$id"
  "$VMM" --state-dir "$STATE" --spec - --ready-fd 3 < "$T/spec-$id.json" \
    3>"$T/ready-$id" 2>>"$T/vmm-$id.log" >/dev/null &
  VMM_PID[$id]=$!
  local i
  for i in $(seq 600); do
    [ -s "$T/ready-$id" ] && break
    kill -0 "${VMM_PID[$id]}" 2>/dev/null || break
    sleep 0.05
  done
  grep -q '"ready":true' "$T/ready-$id" ||
    fail "sandbox $id did not start: $(cat "$T/ready-$id")"
}

jail_ready_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$T/ready-$1" "$2"; }
jail_agent_pid() { jail_ready_field "$1" agent_pid; }
jail_sock() { echo "$STATE/sandboxes/$1/agent.sock"; }
jail_host_uid() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["backend_record"]["host_uid"])' \
    "$STATE/sandboxes/$1/vmm.json"
}

# jail_exec ID USER CMD: runs CMD with /bin/sh -c as USER; prints its output, returns its
# status. JAIL_TIMEOUT (seconds) bounds it.
jail_exec() {
  local id=$1 user=$2
  shift 2
  python3 "$JAIL_EXEC" "$(jail_sock "$id")" --user "$user" --token "$TOKEN" \
    --timeout "${JAIL_TIMEOUT:-60}" -- "$*"
}

# jail_api ID METHOD PATH [BODY]: the airlock-vmm API; prints the body, returns 0 on 2xx.
jail_api() {
  local id=$1 method=$2 path=$3 body=${4:-}
  local code
  code=$(curl -s -o "$T/api.out" -w '%{http_code}' --max-time 30 \
    --unix-socket "$STATE/sandboxes/$id/vmm.sock" -X "$method" \
    ${body:+-H 'Content-Type: application/json' --data "$body"} "http://vmm$path") || code=000
  cat "$T/api.out"
  [ "${code:0:1}" = 2 ]
}

jail_has_api() { [ -S "$STATE/sandboxes/$1/vmm.sock" ]; }

# jail_stop ID: stops through the API (or SIGTERM without one) and waits for airlock-vmm;
# fails unless it exits 0.
jail_stop() {
  local id=$1 pid=${VMM_PID[$1]} rc=0
  if jail_has_api "$id"; then
    jail_api "$id" POST /stop >/dev/null || fail "POST /stop on $id failed"
  else
    kill -TERM "$pid"
  fi
  wait "$pid" || rc=$?
  unset "VMM_PID[$id]"
  [ "$rc" = 0 ] || fail "airlock-vmm of $id exited with $rc after stop"
}

jail_netns_inode() { readlink "/proc/$1/ns/net" | tr -dc 0-9; }

# jail_assert_gone ID HOST_UID AGENT_PID NETNS_INODE: nothing of the sandbox is left.
jail_assert_gone() {
  local id=$1 huid=$2 apid=$3 netino=$4 i
  al_wait_until 60 eval '[ ! -e "/proc/$apid" ] || grep -q "^State:.*Z" "/proc/$apid/status" 2>/dev/null' || true
  [ ! -e "$STATE/sandboxes/$id" ] || fail "$id: $STATE/sandboxes/$id is still there: $(ls -A "$STATE/sandboxes/$id")"
  local d
  for d in /sys/fs/cgroup/*/"$CGP/$id" "/sys/fs/cgroup/$CGP/$id"; do
    [ ! -e "$d" ] || fail "$id: cgroup $d is still there"
  done
  if grep -rlx "$id" "$STATE/jail/idslots" 2>/dev/null | grep -q .; then
    fail "$id: its id slot is still held"
  fi
  # The sandbox's processes: its host ids and its network namespace. The ids alone are not
  # this sandbox's: another run's state directory hands out the same ranges, and its sandbox
  # may be running now. While a process of this one lives, so does its namespace, whose
  # inode therefore names it (and no other).
  local left="" pid uid
  while read -r pid uid; do
    [ "$uid" -ge "$huid" ] && [ "$uid" -lt $((huid + 65536)) ] || continue
    [ "$(jail_netns_inode "$pid" 2>/dev/null)" = "$netino" ] && left+=" $pid"
  done < <(ps -e -o pid=,uid=)
  [ -z "$left" ] || fail "$id: processes with the sandbox's host ids are alive:$left"
  if [ -e "/proc/$apid" ] && ! grep -q '^State:.*Z' "/proc/$apid/status" 2>/dev/null; then
    fail "$id: the agent (pid $apid) is alive"
  fi
  # The network namespace ("none" mode) lives exactly as long as a process is in it: with
  # every process of the sandbox gone (above) it is gone. (Looking for its inode number
  # among other processes' namespaces is not a test: freed numbers are reused.)
  [ -n "$netino" ] || fail "$id: no network namespace recorded"
  ! grep -q "$T" /proc/self/mountinfo || fail "$id: a mount under $T is left in the host namespace"
  return 0
}
