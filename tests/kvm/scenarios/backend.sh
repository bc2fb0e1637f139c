# Scenario (runs in L1): airlock-vmm --backend kvm driven the way the control plane drives
# it: the spec on standard input, the ready line on fd 3, the agent at
# <state>/sandboxes/<id>/agent.sock, the control API at vmm.sock, --cleanup after a crash.
#   A: the first sandbox of the template: the root image is built and the template
#      snapshot made (boot to agent healthy, snapshot before any POST /init), then A is
#      restored from it with a vswitch tap: command, file round trip, TCP from the guest
#      steered by the switch to the stand-in proxy, stats, pause/resume, POST /snapshot.
#   B, C: restored from the same snapshot (no network): independent tokens, files, clocks
#      (set from the host, not the snapshot's), RNG output; B stops through the API and
#      leaves nothing behind; C's airlock-vmm is SIGKILLed and --cleanup leaves nothing.
#   A2: A resumed from its own POST /snapshot (kvm.restore) keeps its file.
# The vswitch (l1-vswitch) runs the inner part as its child with the tap inherited.
set -e
. /scenario-lib.sh
S=/tmp/state
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
fail() { echo "FAILED: $*"; exit 1; }

if [ "${1:-}" != inner ]; then
  depmod -a 2>/dev/null || busybox depmod
  modprobe nf_tables
  modprobe sch_ingress
  modprobe cls_bpf
  mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf
  mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup
  mkdir -p $S
  trap 'rc=$?; [ $rc = 0 ] || { for f in /tmp/vmm-*.log $S/sandboxes/*/agent.log; do [ -f $f ] && { echo "--- $f"; tr -cd "\11\12\15\40-\176" < $f | tail -40; }; done; echo "--- dmesg"; dmesg | tail -15; }' EXIT
  /bin/l1-vswitch /tmp/vs-state /tmp/proxy.log -- /bin/sh /scenario inner
  cat /tmp/proxy.log
  grep -qE '^TCP ORIG 192\.0\.2\.1:7777 PEER 10\.200\.0\.2:[0-9]+ SANDBOX 1 kvm-test$' /tmp/proxy.log \
    || fail "the proxy did not see the guest's connection with its original destination"
  ip link | grep -q alsb && fail "a sandbox interface was left behind"
  echo "backend scenario ok"
  exit 0
fi

# ---- inner: the tap and its addresses come from l1-vswitch's environment ----
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export MKE2FS=/bin/e2fs-mke2fs # e2fsprogs' mke2fs for the image builder
# The VMM confines itself (pivot_root into an empty directory, seccomp): the Release build
# is what runs there (a violation kills it); a sanitized VMM cannot run its leak check
# without /proc, so it runs with the leak check off.
if [ -z "${AIRLOCK_KVM_FORCE_ASAN_VMM:-}" ] && [ -x /bin/airlock-vmm-kvm-release ]; then
  export AIRLOCK_VMM_KVM=/bin/airlock-vmm-kvm-release
else
  printf '#!/bin/sh\nASAN_OPTIONS=detect_leaks=0:abort_on_error=1 exec /bin/airlock-vmm-kvm "$@"\n' > /bin/vmm-noleak
  chmod +x /bin/vmm-noleak
  export AIRLOCK_VMM_KVM=/bin/vmm-noleak
fi
[ -n "$L1VS_TAP_FD" ] || fail "no tap from l1-vswitch"

spec() { # spec ID EXTRA-JSON > file
  printf '{"id":"%s","backend":"kvm","template":"/airlock/template","resources":{"cpus":1,"memory_mib":256,"disk_mib":64},"access_token":"token-%s-0123456789","env":{"SANDBOX":"%s"},"agent":{"start_timeout_ms":600000},"kvm":{"kernel":"/airlock/bzImage"%s}%s}' \
    "$1" "$1" "$1" "${3:-}" "${2:-}"
}
# The bounds on the guest (the agent's start, the ready line) are in minutes: L1's clock is the
# host's wall clock, and on a loaded host the first start (image, template snapshot, restore)
# took 3 minutes where an idle one takes 30 s. The harness's bound on QEMU's CPU time is the one
# that ends a guest that loops.
start() { # start ID SPECFILE: airlock-vmm in the background; waits for its ready line
  rm -f /tmp/ready-$1
  /bin/airlock-vmm --state-dir $S --spec - --ready-fd 3 < "$2" 3> /tmp/ready-$1 2>> /tmp/vmm-$1.log &
  eval "pid_$1=\$!"
  wait_for 900 "sandbox $1's ready line" test -s /tmp/ready-$1 || true
  grep -q '"ready":true' /tmp/ready-$1 || { cat /tmp/ready-$1; fail "sandbox $1 not ready"; }
}
ms_of() { sed -n 's/.*"startup_ms":\([0-9]*\).*/\1/p' /tmp/ready-$1; }
agent() { # agent ID METHOD TARGET [BODY] [TYPE] [OUT] (with the sandbox's token)
  id=$1; shift
  L1_TOOL_HEADER="X-Access-Token: token-$id-0123456789" /bin/l1_tool http $S/sandboxes/$id/agent.sock "$@"
}
api() { id=$1; shift; /bin/l1_tool http $S/sandboxes/$id/vmm.sock "$@"; }
run() { # run ID OUT CMD: sh -c CMD in the sandbox through process.Process/Start
  id=$1 out=$2; shift 2
  printf '{"process":{"cmd":"/bin/sh","args":["-c","%s"]}}' "$*" > /tmp/run.json
  st=$(agent $id POST /process.Process/Start /tmp/run.json application/connect+json /tmp/run.out)
  [ "$st" = "status 200" ] || fail "process start in $id -> $st"
  # stdout: base64 in the data events; decode every "stdout" value
  tr ',{}' '\n\n\n' < /tmp/run.out | sed -n 's/.*"stdout": *"\([^"]*\)".*/\1/p' | while read -r b; do
    echo "$b" | base64 -d
  done > "$out"
}
vmm_alive() { # vmm_alive ID: is a VMM of sandbox ID running?
  for p in /proc/[0-9]*; do
    [ "$(cat $p/comm 2>/dev/null)" = airlock-vmm-kvm ] && grep -q -- "$S/sandboxes/$1/" $p/cmdline 2>/dev/null && return 0
  done
  return 1
}
leftovers() { # leftovers ID: nothing of sandbox ID may remain
  [ ! -e $S/sandboxes/$1 ] || { ls -la $S/sandboxes/$1; fail "$S/sandboxes/$1 left behind"; }
  [ ! -e /sys/fs/cgroup/airlock/$1 ] || fail "cgroup of $1 left behind"
  grep -lx "$1" $S/jail/idslots/* 2>/dev/null && fail "id slot of $1 left behind"
  vmm_alive $1 && fail "the VMM of $1 is still running"
  return 0
}

# ---- A: first of its template, with the vswitch's tap ----
spec a ",\"network\":{\"mode\":\"tap\",\"tap_fd\":$L1VS_TAP_FD,\"mac\":\"$L1VS_MAC\",\"address\":\"$L1VS_ADDR\",\"gateway\":\"$L1VS_GW\"}" > /tmp/spec-a.json
t0=$(now_ms)
start a /tmp/spec-a.json
t_snap=$(date +%s)
echo "ok: A ready after $(($(now_ms) - t0)) ms (image + template boot + snapshot + restore): $(cat /tmp/ready-a)"
grep -q '"template_built":true' /tmp/ready-a || fail "A did not build the template snapshot"
ls /tmp/state/kvm/images/*/rootfs.img /tmp/state/kvm/snapshots/*/vm.state > /dev/null || fail "cache entries missing"
ls -d /tmp/state/kvm/*/.tmp-* 2>/dev/null && fail "temporary cache entries left"
# Only A's airlock-vmm gets the tap: this shell's copy goes (so that B and C do not inherit
# it, and the device disappears once A's VMM is gone).
eval "exec $L1VS_TAP_FD>&-"

st=$(agent a GET /health | head -1)
[ "$st" = "status 204" ] || [ "$st" = "status 200" ] || fail "A /health -> $st"
printf '{"process":{"cmd":"/bin/sh","args":["-c","echo hello-from-kvm; hostname; exit 3"]}}' > /tmp/start.json
agent a POST /process.Process/Start /tmp/start.json application/connect+json /tmp/start.out >/dev/null
tr -c '\40-\176' '\n' < /tmp/start.out > /tmp/start.txt
grep -q 'aGVsbG8tZnJvbS1rdm0K' /tmp/start.txt || grep -q 'aGVsbG8tZnJvbS1rdm0KYQo' /tmp/start.txt \
  || { cat /tmp/start.txt; fail "no stdout from the command"; }
grep -qE '"exitCode": ?3|exit status 3' /tmp/start.txt || { cat /tmp/start.txt; fail "exit code 3 not reported"; }
run a /tmp/host-a.txt 'hostname'
[ "$(cat /tmp/host-a.txt)" = a ] || fail "A's hostname is '$(cat /tmp/host-a.txt)', not a (init not applied)"
echo "ok: command through the agent (stdout, exit code 3, hostname from init)"
dd if=/dev/urandom of=/tmp/up.bin bs=1024 count=300 2>/dev/null
st=$(agent a POST '/files?path=/home/user/rt.bin' /tmp/up.bin application/octet-stream /tmp/post.out)
[ "$st" = "status 200" ] || fail "upload -> $st"
st=$(agent a GET '/files?path=/home/user/rt.bin' - application/octet-stream /tmp/down.bin)
[ "$st" = "status 200" ] || fail "download -> $st"
cmp /tmp/up.bin /tmp/down.bin || fail "file differs after the round trip"
echo "ok: 300 KiB file round trip"

# TCP from the guest to any address: the switch hands it to the stand-in proxy.
run a /tmp/nc.txt 'nc -w 10 192.0.2.1 7777 </dev/null && echo connected'
grep -q connected /tmp/nc.txt || fail "the guest's TCP connection did not complete: $(cat /tmp/nc.txt)"
echo "ok: TCP from the guest reached the stand-in proxy"

api a GET /stats - application/json /tmp/stats-a.json >/dev/null
cat /tmp/stats-a.json; echo
grep -q '"vcpus":1' /tmp/stats-a.json || fail "stats: vcpus"
grep -q '"guest_memory_bytes":268435456' /tmp/stats-a.json || fail "stats: guest memory"
mem=$(sed -n 's/.*"memory_bytes":\([0-9]*\).*/\1/p' /tmp/stats-a.json)
[ "${mem:-0}" -gt 4000000 ] || fail "stats: memory_bytes $mem"
grep -q '"cpu_usage_ns":[1-9]' /tmp/stats-a.json || fail "stats: cpu usage"
echo "ok: stats (cgroup memory $mem bytes)"

[ "$(api a POST /pause | head -1)" = "status 204" ] || fail "pause"
api a GET /status - application/json /tmp/status-a.json >/dev/null
grep -q '"state":"paused"' /tmp/status-a.json || fail "status after pause: $(cat /tmp/status-a.json)"
if L1_TOOL_TIMEOUT=3 /bin/l1_tool http $S/sandboxes/a/agent.sock GET /health >/dev/null 2>&1; then
  fail "the paused guest answered"
fi
[ "$(api a POST /resume | head -1)" = "status 204" ] || fail "resume"
st=$(agent a GET /health | head -1)
[ "$st" = "status 204" ] || [ "$st" = "status 200" ] || fail "A /health after resume -> $st"
echo "ok: pause (the guest does not answer) and resume"

printf '{"path":"/tmp/snap-a"}' > /tmp/snapreq.json
st=$(api a POST /snapshot /tmp/snapreq.json application/json /tmp/snap-a.out)
[ "$st" = "status 200" ] || { cat /tmp/snap-a.out; fail "POST /snapshot -> $st"; }
[ -f /tmp/snap-a/vm.state ] && [ -f /tmp/snap-a/memory ] && [ -f /tmp/snap-a/info.json ] || fail "snapshot files"
[ "$(stat -c %u /tmp/snap-a/memory)" = 0 ] || fail "snapshot not owned by root"
echo "ok: POST /snapshot $(cat /tmp/snap-a.out)"

# ---- B and C: restored from the same template snapshot ----
# The snapshot's clock must be visibly behind, so that a guest whose clock was not set
# from the host would be caught.
while [ $(( $(date +%s) - t_snap )) -lt 6 ]; do sleep 1; done
for id in b c; do
  spec $id > /tmp/spec-$id.json
  start $id /tmp/spec-$id.json
  grep -q '"template_built":false' /tmp/ready-$id || fail "$id did not reuse the template snapshot"
  echo "ok: $id restored to agent healthy + init in $(ms_of $id) ms"
  echo "bench-json: {\"bench\":\"kvm\",\"metric\":\"vmm_create_restore_to_healthy_ms\",\"value\":$(ms_of $id),\"unit\":\"ms\",\"env\":\"tcg-nested\"}"
done
echo only-in-b > /tmp/b.txt
[ "$(agent b POST '/files?path=/home/user/only-b.txt' /tmp/b.txt application/octet-stream /dev/null)" = "status 200" ] \
  || fail "write in b"
[ "$(agent c GET '/files?path=/home/user/only-b.txt' - application/octet-stream /dev/null)" = "status 404" ] \
  || fail "c sees b's file"
[ "$(agent c GET '/files?path=/home/user/rt.bin' - application/octet-stream /dev/null)" = "status 404" ] \
  || fail "c sees a's file (written after the template snapshot)"
printf '{"process":{"cmd":"/bin/sh","args":["-c","echo $SANDBOX"]}}' > /tmp/env.json
st=$(L1_TOOL_HEADER="X-Access-Token: token-b-0123456789" /bin/l1_tool http $S/sandboxes/c/agent.sock POST \
  /process.Process/Start /tmp/env.json application/connect+json /dev/null)
[ "$st" = "status 401" ] || fail "b's token accepted by c ($st)"
for id in b c; do
  run $id /tmp/env-$id.txt 'echo $SANDBOX'
  [ "$(cat /tmp/env-$id.txt)" = $id ] || fail "$id has SANDBOX=$(cat /tmp/env-$id.txt)"
  run $id /tmp/date-$id.txt 'date +%s'
  d=$(( $(cat /tmp/date-$id.txt) - $(date +%s) ))
  [ $d -ge -3 ] && [ $d -le 3 ] || fail "$id's clock is $d s off the host's (the snapshot is $(( $(date +%s) - t_snap )) s old)"
  run $id /tmp/rng-$id.txt 'od -An -tx1 -N32 /dev/urandom'
  [ -s /tmp/rng-$id.txt ] || fail "no random bytes from $id"
  grep -q 'kernel RNG reseeded' $S/sandboxes/$id/agent.log || fail "$id's agent did not reseed"
  grep -q 'clock set from the host' $S/sandboxes/$id/agent.log || fail "$id's agent did not set the clock"
done
cmp -s /tmp/rng-b.txt /tmp/rng-c.txt && fail "b and c produced the same random bytes"
echo "ok: b and c are independent (tokens, files, env, clocks within 3 s of the host's, RNG output)"

# B stops through the API and leaves nothing behind.
[ "$(api b POST /stop | head -1)" = "status 204" ] || fail "stop b"
wait_exit $pid_b stop || fail "airlock-vmm of b exited $?"
leftovers b
echo "ok: b stopped, nothing left"

# C's airlock-vmm dies by SIGKILL: its VMM dies with it; --cleanup reclaims the rest.
kill -KILL $pid_c
wait $pid_c 2>/dev/null || true
i=0
while vmm_alive c && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
vmm_alive c && fail "c's VMM outlived its airlock-vmm"
/bin/airlock-vmm --state-dir $S --cleanup c || fail "--cleanup c"
leftovers c
echo "ok: c killed, --cleanup left nothing"

# A ends by SIGTERM: exit 0, its tap is gone with its VMM.
kill -TERM $pid_a
wait_exit $pid_a SIGTERM || fail "airlock-vmm of a exited $?"
leftovers a
ip link show "$L1VS_IFNAME" >/dev/null 2>&1 && fail "A's tap $L1VS_IFNAME still exists"
echo "ok: a stopped by SIGTERM, its tap is gone"

# A2: A resumed from its own snapshot keeps its file and its token.
spec a2 "" ",\"restore\":\"/tmp/snap-a\"" | sed 's/token-a2-/token-a-/' > /tmp/spec-a2.json
start a2 /tmp/spec-a2.json
L1_TOOL_HEADER="X-Access-Token: token-a-0123456789" /bin/l1_tool http $S/sandboxes/a2/agent.sock GET \
  '/files?path=/home/user/rt.bin' - application/octet-stream /tmp/down-a2.bin >/dev/null
cmp /tmp/up.bin /tmp/down-a2.bin || fail "a2 lost the file of a's snapshot"
[ "$(api a2 POST /stop | head -1)" = "status 204" ] || fail "stop a2"
wait_exit $pid_a2 stop || fail "airlock-vmm of a2 exited $?"
leftovers a2
echo "ok: a2 resumed from POST /snapshot with its file"

/bin/airlock-vmm --state-dir $S --sweep || fail "sweep"
echo "inner backend scenario ok"
