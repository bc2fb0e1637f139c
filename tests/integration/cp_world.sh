# tests/integration/cp_world.sh: the world of the control-plane integration tests (sourced).
#
#   cp_world NAME [BACKEND] [NETWORK]
#       "host" namespace: airlockd runs here (with the vswitch, airlock-egress and
#       airlock-vault it starts itself); a link to "up".
#       "up" namespace: the fake internet on 203.0.113.0/24: DNS at 203.0.113.53 (allowed.test
#       -> .10, evil.test -> .11), HTTP servers "good" (.10:80) and "evil" (.11:80), a UDP
#       server on .10:443.
#       BACKEND: jail (default) or test (the test backend, which only airlockd-test has: cp_start
#       runs that one then); NETWORK: on (default) or
#       off. Sets CP_STATE, CP_CG (this instance's cgroup parent), CP_PREFIX (its interface
#       prefix), CP_KEY; writes $AL_TMP/airlockd.yaml (CP_SANDBOXES_EXTRA and CP_NETWORK_EXTRA:
#       more lines, indented by two spaces, for its "sandboxes:" and "network:" sections);
#       registers cleanups.
#   cp_egress_args ARGS...  more arguments of airlock-egress (egress.args; before cp_start),
#                         e.g. --upstream-ca FILE
#   cp_start [NAME]       starts airlockd (background job NAME, default airlockd), waits for
#                         its banner, sets CP_URL; earlier runs' logs go to NAME.history.log;
#                         with CP_NETNS_EXEC=1 through `ip netns exec` (/etc/netns/<ns>/hosts
#                         is then its /etc/hosts)
#   cp_cli ARGS...        `airlock --state-dir $CP_STATE ARGS...`
#   cp_api ARGS...        curl against the API (in the host namespace, with the key)
#   cp_create [JSON]      POST /v2/sandboxes; echoes the sandbox id
#   cp_exec ID CMD...     runs CMD in the sandbox (airlock sandbox exec)
#   cp_audit_match MSG RE QUERY-ARGS...
#                         al_match of `airlock audit query QUERY-ARGS...` against RE, once the
#                         record is there or after 60 s: airlock-egress writes a request's
#                         record when it has relayed the response, so the client can have the
#                         answer before the log has the record
#   cp_kill_world         every process of this instance killed, its runtime tmpfs, switch
#                         and cgroups removed, as a restart of the host leaves it
#   cp_state_image [NAME] (after cp_world, before cp_start) puts CP_STATE on a private 4 GiB
#                         ext4 image made with its encrypt feature (CP_IMG, $AL_TMP/NAME.img,
#                         NAME "state" by default; one per NAME), on a loop device,
#                         for the tests of encryption at rest; what is mounted below it and
#                         the image itself are unmounted at exit, after cp_kill_world
#   cp_state_unmount      unmounts the state image: first what is mounted below it (the
#                         volumes' mounts), then, once their loop devices let the volumes'
#                         images go, the image itself; fails if it stays mounted
#   cp_state_mount        mounts the image again (a new mount: no key is added to it)
#   cp_atrest_images SETTINGS...  (benchmarks of at_rest.encrypt; after cp_world, whose
#                         configuration has an at_rest section with its encrypt line) one state
#                         image per setting (off, on), each holding the state cp_world made
#   cp_atrest_up SETTING DIR  airlockd on that setting's image, at_rest.encrypt set to it;
#                         with on, the banner's line of <state>/DIR must say it is encrypted
#   cp_atrest_down        airlockd stopped, the world killed, the image unmounted
#   cp_atrest_series SIZES ROUNDS SETTINGS DIR FN  a benchmark's series: `FN SIZE ROUND
#                         SETTING` for every size and round, once per setting in turn, each
#                         on its image with airlockd restarted (cp_atrest_up/down: the drift of
#                         the machine falls on every setting alike); SETTINGS empty: once
#                         each, airlockd as configured, SETTING "". Stops at the first failure
#   cp_leaks              echoes what this instance left (interfaces, cgroups, sandbox
#                         directories, mounts, processes); empty = nothing
#   cp_leaks_settled      the same once it is empty, or after 60 s: what ends after airlockd
#                         (warm airlock-vmm processes leave when their standard input closes)
#                         is given the time it takes, not a fixed one
#   cp_entries DIR        the entries of a store directory (<state>/snapshots, paused, ...),
#                         one line, once airlockd's background removals there are done (a
#                         deletion renames an entry to ".NAME.deleted-RANDOM" at once and
#                         removes its files on a worker thread), or after 60 s with them
# Nothing has a route out of the machine; netns.sh's trap removes everything.
# shellcheck shell=bash
source "${AIRLOCK_SOURCE_DIR:?}/tests/lib/netns.sh"
CP_ET="$AIRLOCK_SOURCE_DIR/tests/integration/egress_tool.py"

cp_world() {
  local name=$1
  CP_BACKEND=${2:-jail}
  CP_NETWORK=${3:-on}
  al_world_init "$name"
  al_ns_add host
  al_ns_add up
  al_link host 192.0.2.1/30 up 192.0.2.2/30 "cpup$(($$ % 100000))"
  CP_HOSTNS=$(al_ns host)
  CP_UPNS=$(al_ns up)
  ip -n "$CP_HOSTNS" route add 203.0.113.0/24 via 192.0.2.2
  for a in 203.0.113.10 203.0.113.11 203.0.113.53; do ip -n "$CP_UPNS" addr add "$a/32" dev lo; done
  cat >"$AL_TMP/zone.json" <<'ZONE'
{"allowed.test": {"A": ["203.0.113.10"], "ttl": 30}, "evil.test": {"A": ["203.0.113.11"], "ttl": 30}}
ZONE
  if [ "$CP_NETWORK" = on ]; then
    al_bg dns ip netns exec "$CP_UPNS" python3 "$CP_ET" dns-server 203.0.113.53 53 \
      "$AL_TMP/zone.json" --log "$AL_TMP/dns.q"
    al_bg good ip netns exec "$CP_UPNS" python3 "$CP_ET" http-server 203.0.113.10 80 --name good \
      --log "$AL_TMP/up.req"
    al_bg evil ip netns exec "$CP_UPNS" python3 "$CP_ET" http-server 203.0.113.11 80 --name evil \
      --log "$AL_TMP/up.req"
    al_bg udp ip netns exec "$CP_UPNS" python3 "$AL_NETTOOL" serve-udp 203.0.113.10 443 \
      --name upstream-udp
    al_wait_line dns LISTEN && al_wait_line good LISTEN && al_wait_line evil LISTEN &&
      al_wait_line udp LISTEN || { echo "cp_world: servers did not start" >&2; exit 1; }
  fi
  CP_STATE="$AL_TMP/state"
  CP_CG="al-cp-$name-$$"
  CP_PREFIX="c$(($$ % 100000))"
  CP_KEY=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
  mkdir -p "$CP_STATE/policies"
  chmod 0711 "$AL_TMP" "$CP_STATE"
  cat >"$CP_STATE/policies/e2e.yaml" <<'YAML'
version: 1
name: e2e
description: the control-plane tests' policy
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
YAML
  cat >"$AL_TMP/airlockd.yaml" <<CFG
sandboxes:
  backend: $CP_BACKEND
  cgroup_parent: $CP_CG
${CP_SANDBOXES_EXTRA:-}
network:
  mode: "$CP_NETWORK"
  ifname_prefix: $CP_PREFIX
  range: 10.201.0.0/16
  pool_size: 2
${CP_NETWORK_EXTRA:-}
egress:
  args: ["--resolver", "203.0.113.53", "--workers", "1"]
CFG
  al_on_cleanup "cp__cleanup"
}

# What airlockd could leave behind if a test fails half-way: sandboxes (airlock-vmm kills
# them with itself), helper daemons, the switch, the cgroup parent.
cp__cleanup() {
  # CP_KEEP_LOGS=DIR keeps airlockd's logs of a run for a post-mortem.
  [ -n "${CP_KEEP_LOGS:-}" ] && mkdir -p "$CP_KEEP_LOGS" && cp "$AL_TMP"/*.log "$CP_KEEP_LOGS"/ 2>/dev/null
  cp_kill_world
}

# Everything of this instance ends as in a restart of the host: every process (airlockd,
# airlock-vmm, the helpers, the sandboxes' processes) killed, and what the kernel would not
# keep across a reboot (the runtime tmpfs, the switch, the cgroups) removed. The state
# directory stays. (The job airlockd, if it runs, is killed first: al_kill airlockd KILL.)
cp_kill_world() {
  local p
  for p in $(pgrep -f -- "$CP_STATE" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
  al_wait_until 10 eval '[ -z "$(pgrep -f -- "$CP_STATE")" ]' || true
  # airlockd's tmpfs for the live sandboxes' files (sandboxes.runtime_tmpfs): a killed
  # airlockd leaves it mounted (the next one would re-adopt it), and the state directory
  # could not be removed.
  mountpoint -q "$CP_STATE/sandboxes" 2>/dev/null && umount -l "$CP_STATE/sandboxes" 2>/dev/null
  if [ -x "$AIRLOCK_BIN/airlock-vmm" ] && [ -d "$CP_STATE/sandboxes" ]; then
    "$AIRLOCK_BIN/airlock-vmm" --state-dir "$CP_STATE" --sweep --cgroup-parent "$CP_CG" >/dev/null 2>&1
  fi
  if [ -f "$CP_STATE/vswitch/instance.json" ]; then
    nsenter --net="/run/netns/$CP_HOSTNS" "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE" \
      vswitch teardown --force >/dev/null 2>&1
  fi
  local d
  for d in /sys/fs/cgroup/*/"$CP_CG" /sys/fs/cgroup/"$CP_CG"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  true
}

cp_state_image() {
  CP_IMG="$AL_TMP/${1:-state}.img"
  truncate -s 4G "$CP_IMG" && mkfs.ext4 -q -F -O encrypt "$CP_IMG" ||
    { echo "cp_state_image: mkfs.ext4 -O encrypt failed" >&2; return 1; }
  # A second image (another NAME) starts from the same state cp_world made.
  if [ ! -d "$AL_TMP/state.pre" ]; then
    mv "$CP_STATE" "$AL_TMP/state.pre" && mkdir "$CP_STATE" || return 1
    # Registered after cp_world's: runs before it (last registered first), so killed
    # first, then unmounted.
    al_on_cleanup cp__state_cleanup
  fi
  mount -o loop "$CP_IMG" "$CP_STATE" ||
    { echo "cp_state_image: cannot mount the state image" >&2; return 1; }
  cp -a "$AL_TMP/state.pre/." "$CP_STATE/" && chmod 0711 "$CP_STATE"
}

# Mount points below the state, deepest first; loop devices whose file is below it.
cp__mounts_below() { awk -v s="$CP_STATE/" 'index($5, s) == 1 { print $5 }' /proc/self/mountinfo | sort -r; }
cp__loops_below() { losetup -l -n -O BACK-FILE 2>/dev/null | grep -F -- "$CP_STATE/"; }

cp__state_cleanup() {
  cp_kill_world
  local m
  for m in $(cp__mounts_below); do umount -l "$m" 2>/dev/null; done
  umount -l "$CP_STATE" 2>/dev/null
  true
}

cp_state_unmount() {
  local m
  for m in $(cp__mounts_below); do umount "$m" || return 1; done
  # A volume's loop device lets its image go after the unmount, not at once (autoclear):
  # the state's file system is busy until then.
  al_wait_until 60 eval '[ -z "$(cp__loops_below)" ]' || { cp__loops_below >&2; return 1; }
  sync
  umount "$CP_STATE" || return 1
  ! mountpoint -q "$CP_STATE"
}

cp_state_mount() { mount -o loop "$CP_IMG" "$CP_STATE"; }

# cp_atrest_config TOOL "off on": checks the --encrypt settings of a benchmark before any world
# exists, and when there are some, makes airlockd.yaml carry the at_rest.encrypt key that
# cp_atrest_up then sets per run.
cp_atrest_config() {
  local m
  for m in $2; do
    case $m in off | on) ;; *) echo "$1: --encrypt takes off and/or on, not $m" >&2; return 2 ;; esac
  done
  [ -z "$2" ] || CP_SANDBOXES_EXTRA="at_rest:
  encrypt: \"off\""
}

declare -A CP__ATREST_IMG
cp_atrest_images() {
  local m
  for m in "$@"; do
    case $m in off | on) ;; *) echo "cp_atrest_images: off or on, not $m" >&2; return 1 ;; esac
    cp_state_image "state-$m" >&2 && CP__ATREST_IMG[$m]=$CP_IMG && cp_state_unmount || return 1
  done
}

cp_atrest_up() {
  CP_IMG=${CP__ATREST_IMG[$1]:?cp_atrest_up: no image of setting $1}
  cp_state_mount || return 1
  sed -i "s/^\( *encrypt: \).*/\1\"$1\"/" "$AL_TMP/airlockd.yaml"
  cp_start airlockd >&2 || return 1
  if [ "$1" = on ] && ! grep -q "^  $2 .*(encrypted at rest" "$AL_TMP/airlockd.log"; then
    echo "cp_atrest_up: <state>/$2 is not encrypted with encrypt: on" >&2
    return 1
  fi
}

cp_atrest_down() {
  al_kill airlockd TERM
  cp_kill_world
  cp_state_unmount
}

cp_atrest_series() {
  local sizes=$1 rounds=$2 settings=$3 dir=$4 fn=$5 mb r m
  if [ -z "$settings" ]; then cp_start airlockd >&2 || return 1; fi
  for mb in $sizes; do
    for r in $(seq "$rounds"); do
      for m in ${settings:-as-configured}; do
        if [ -n "$settings" ]; then cp_atrest_up "$m" "$dir" || return 1; else m=""; fi
        "$fn" "$mb" "$r" "$m" || return 1
        if [ -n "$settings" ]; then cp_atrest_down || return 1; fi
      done
    done
  done
  if [ -z "$settings" ]; then al_kill airlockd TERM; fi
}

cp_egress_args() {
  python3 - "$AL_TMP/airlockd.yaml" "$@" <<'PY'
import json, re, sys
path = sys.argv[1]
text = open(path).read()
m = re.search(r"^  args: (\[.*\])$", text, re.M)
args = json.loads(m.group(1)) + sys.argv[2:]
open(path, "w").write(text[:m.start(1)] + json.dumps(args) + text[m.end(1):])
PY
}

cp_start() {
  local job=${1:-airlockd}
  # Each start truncates the job's log: keep the earlier runs' lines in <job>.history.log.
  # al_bg's redirection happens in the background job: empty the log here first, or the
  # wait below could find the previous run's banner.
  [ -f "$AL_TMP/$job.log" ] && cat "$AL_TMP/$job.log" >>"$AL_TMP/$job.history.log"
  : >"$AL_TMP/$job.log"
  local daemon=airlockd
  [ "$CP_BACKEND" = test ] && daemon=airlockd-test
  # CP_NETNS_EXEC=1: `ip netns exec` instead of nsenter, so that /etc/netns/<host ns>/
  # (hosts, resolv.conf) is airlockd's /etc (a test that controls its name resolution).
  local enter=(nsenter --net="/run/netns/$CP_HOSTNS" --)
  [ "${CP_NETNS_EXEC:-0}" = 1 ] && enter=(ip netns exec "$CP_HOSTNS")
  al_bg "$job" "${enter[@]}" env AIRLOCK_API_KEY="$CP_KEY" \
    AIRLOCK_LOG_FORMAT=json "$AIRLOCK_BIN/$daemon" --listen 127.0.0.1:0 --state-dir "$CP_STATE" \
    --config "$AL_TMP/airlockd.yaml"
  al_wait_line "$job" '^export E2B_API_URL=' 600 || { tail -40 "$AL_TMP/$job.log" >&2; return 1; }
  CP_URL=$(sed -n 's/^export E2B_API_URL=//p' "$AL_TMP/$job.log" | tail -1)
}

cp_cli() { "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE" "$@"; }

cp_api() { nsenter --net="/run/netns/$CP_HOSTNS" curl -sS -H "X-API-KEY: $CP_KEY" "$@"; }

cp_create() {
  local body=${1:-'{"templateID":"base","timeout":600}'}
  cp_api -X POST "$CP_URL/v2/sandboxes" -d "$body" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])'
}

cp_exec() {
  local id=$1
  shift
  cp_cli sandbox exec "$id" -- "$@"
}

cp__audit_has() {
  local re=$1
  shift
  grep -Eq -- "$re" <<<"$(cp_cli audit query "$@" 2>/dev/null)"
}

cp_audit_match() {
  local msg=$1 re=$2
  shift 2
  al_wait_until 60 cp__audit_has "$re" "$@" || true
  al_match "$msg" "$re" cp_cli audit query "$@"
}

cp_leaks() {
  ip -n "$CP_HOSTNS" -o link 2>/dev/null | grep -o " $CP_PREFIX[0-9a-z]*" | sed 's/^/interface/'
  find /sys/fs/cgroup/*/"$CP_CG" /sys/fs/cgroup/"$CP_CG" -mindepth 1 -type d 2>/dev/null |
    sed 's/^/cgroup /'
  ls -A "$CP_STATE/sandboxes" 2>/dev/null | sed 's/^/sandbox-dir /'
  grep -F "$CP_STATE" /proc/self/mountinfo | sed 's/^/mount /'
  pgrep -af -- "$CP_STATE/" | sed 's/^/process /'
  true
}

cp__removed() { ! ls -A "$1" 2>/dev/null | grep -q '^\..*\.deleted-'; }

cp_entries() {
  al_wait_until 60 cp__removed "$1" || true
  ls -A "$1" 2>/dev/null | tr '\n' ' ' | sed 's/ $//'
}

cp_leaks_settled() {
  al_wait_until 60 eval '[ -z "$(cp_leaks)" ]' || true
  cp_leaks
}
