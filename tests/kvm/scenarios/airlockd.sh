# Scenario (runs in L1): airlockd itself chooses the KVM backend and runs a KVM sandbox.
#   - sandboxes.backend: auto; L1's /dev/kvm boots the guest kernel, so airlockd's probe
#     (airlock-vmm --probe-kvm) says usable and airlockd picks kvm, printing why;
#   - a sandbox created through airlockd's API (its local socket, as the CLI uses it) is a
#     microVM on a vswitch tap: its guest has the address the switch assigned and the
#     switch answers its ARP for the gateway through the tap;
#     a command runs through airlockd (airlock sandbox exec), metrics, pause/resume, info;
#   - airlockd restarts (on_shutdown: keep) and re-adopts the running KVM sandbox;
#   - kill leaves no VMM, tap, cgroup or sandbox directory; airlockd stops cleanly.
# No airlock-egress here (the guest's connections have no proxy to go to): the steering of a
# tap's traffic to the proxy is the backend scenario's.
set -e
S=/tmp/state
fail() { echo "FAILED: $*"; exit 1; }
depmod -a 2>/dev/null || busybox depmod
modprobe nf_tables
modprobe sch_ingress
modprobe cls_bpf
mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf
mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup
mkdir -p $S
ip link set lo up
trap 'rc=$?; [ $rc = 0 ] || { for f in /tmp/airlockd.history.log /tmp/airlockd.log /tmp/airlockd.out $S/sandboxes/*/agent.log; do [ -f $f ] && { echo "--- $f"; tr -cd "\11\12\15\40-\176" < $f | tail -60; }; done; echo "--- dmesg"; dmesg | tail -15; }' EXIT

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export MKE2FS=/bin/e2fs-mke2fs
# The VMM confines itself (pivot_root, seccomp): the Release build runs there when present.
if [ -x /bin/airlock-vmm-kvm-release ]; then
  export AIRLOCK_VMM_KVM=/bin/airlock-vmm-kvm-release
else
  export AIRLOCK_VMM_KVM=/bin/airlock-vmm-kvm
fi

cat > /tmp/airlockd.yaml <<'CFG'
sandboxes:
  backend: auto
  kvm_kernel: /airlock/bzImage
  kvm_probe_timeout: 60s
  cpu_count: 1
  memory: 256MiB
  disk: 64MiB
  start_timeout: 300s
  warm_pool: 0
  on_shutdown: keep
templates:
  dir: /airlock
  defaults: [template]
  build: "off"
network:
  mode: "on"
  pool_size: 0
egress:
  mode: "off"
vault:
  mode: "off"
log:
  format: text
CFG
start_airlockd() {
  [ -f /tmp/airlockd.log ] && cat /tmp/airlockd.log >> /tmp/airlockd.history.log
  # Emptied here: the background job's own redirection may come after the wait below looks.
  : > /tmp/airlockd.log
  : > /tmp/airlockd.out
  AIRLOCK_API_KEY=e2b_0123456789abcdef0123456789abcdef01234567 \
    /bin/airlockd --listen 127.0.0.1:0 --state-dir $S --config /tmp/airlockd.yaml \
    > /tmp/airlockd.out 2> /tmp/airlockd.log &
  apid=$!
  w=0
  while ! grep -q '^export E2B_API_URL=' /tmp/airlockd.out 2>/dev/null; do
    kill -0 $apid 2>/dev/null || fail "airlockd exited during its start"
    [ $w -lt 1800 ] || fail "airlockd did not get ready"
    sleep 0.1; w=$((w + 1))
  done
}
start_airlockd
sed -n '/^host:/,/^  templates/p' /tmp/airlockd.log
grep -q '^  KVM probe   usable: ' /tmp/airlockd.log || fail "the probe did not say usable"
grep -q '^  backend     kvm: KVM microVMs, one guest kernel per sandbox (sandboxes.backend: auto; KVM probe: usable: ' /tmp/airlockd.log \
  || fail "airlockd did not choose kvm in auto"
echo "ok: airlockd chose kvm (auto) after its probe"

cli() { /bin/airlock --state-dir $S "$@"; }
printf '{"templateID":"template","timeout":900,"envVars":{"SANDBOX_ENV":"from-airlockd"}}' > /tmp/create.json
t0=$(awk '{printf "%d", $1 * 1000}' /proc/uptime)
st=$(L1_TOOL_TIMEOUT=400 /bin/l1_tool http $S/run/airlockd.sock POST /v2/sandboxes /tmp/create.json application/json /tmp/create.out)
[ "$st" = "status 201" ] || { cat /tmp/create.out; fail "create -> $st"; }
id=$(sed -n 's/.*"sandboxID": *"\([^"]*\)".*/\1/p' /tmp/create.out)
[ -n "$id" ] || { cat /tmp/create.out; fail "no sandboxID"; }
echo "ok: sandbox $id created through airlockd in $(($(awk '{printf "%d", $1 * 1000}' /proc/uptime) - t0)) ms (first of its template: image + snapshot + restore)"

ps -o pid,args 2>/dev/null | grep -q "[a]irlock-vmm-kvm" || ps | grep -q "[a]irlock-vmm-kvm" || fail "no KVM VMM process runs"
tap=$(ip -o link | sed -n 's/^[0-9]*: \(alsb[^:@]*\).*/\1/p' | head -1)
[ -n "$tap" ] || { ip link; fail "no vswitch tap on the host side"; }
echo "ok: the VMM runs; its tap $tap is on the switch"

cli sandbox exec "$id" -- /bin/busybox sh -c 'echo hello-from-kvm-via-airlockd; echo "env=$SANDBOX_ENV"; cat /sys/class/net/eth0/address; /bin/busybox ip -4 -o addr show eth0; /bin/busybox ip route' > /tmp/exec.out 2>&1 \
  || { cat /tmp/exec.out; fail "exec through airlockd"; }
cat /tmp/exec.out
grep -q '^hello-from-kvm-via-airlockd$' /tmp/exec.out || fail "no output from the guest"
grep -q '^env=from-airlockd$' /tmp/exec.out || fail "the sandbox's envVars did not reach the guest"
addr=$(sed -n 's/.* inet \([0-9.]*\/[0-9]*\) .*/\1/p' /tmp/exec.out)
[ -n "$addr" ] || fail "the guest has no IPv4 address on eth0"
cli sandbox info "$id" > /tmp/info.out || fail "sandbox info"
echo "ok: command in the guest through airlockd; guest eth0 $addr"
# The vswitch's record of the sandbox: the same address, the tap as its interface.
/bin/airlock --state-dir $S vswitch status > /tmp/vs.out 2>&1 || true
grep -q "${addr%/*}" /tmp/vs.out || { cat /tmp/vs.out; fail "the switch does not list the guest's address ${addr%/*}"; }
grep -q "$tap" /tmp/vs.out || { cat /tmp/vs.out; fail "the switch does not list the tap $tap"; }
echo "ok: the switch lists the sandbox on $tap with ${addr%/*}"
# Frames through the tap: the guest's connection attempt to its gateway makes it ask for the
# gateway's MAC, which only the switch answers (ARP, through the tap); the tap's counters on
# the host side move. (The connection itself has no proxy here: egress is off.)
gw=$(sed -n 's/^default via \([0-9.]*\) .*/\1/p' /tmp/exec.out)
rx0=$(cat /sys/class/net/$tap/statistics/rx_packets)
cli sandbox exec "$id" -- /bin/busybox sh -c "/bin/busybox nc -w 3 $gw 80 </dev/null; cat /proc/net/arp" > /tmp/arp.out 2>&1 || true
rx1=$(cat /sys/class/net/$tap/statistics/rx_packets)
cat /tmp/arp.out
grep -E "^$gw +0x1 +0x2 +([0-9a-f]{2}:){5}[0-9a-f]{2} " /tmp/arp.out | grep -qv '00:00:00:00:00:00' \
  || fail "the guest did not resolve its gateway $gw (no ARP answer through the tap)"
[ "$rx1" -gt "$rx0" ] || fail "the tap's host side received nothing ($rx0 -> $rx1)"
echo "ok: the switch answered the guest's ARP for $gw through the tap ($((rx1 - rx0)) packets from the guest)"

st=$(/bin/l1_tool http $S/run/airlockd.sock GET /sandboxes/$id/metrics - application/json /tmp/metrics.out)
[ "$st" = "status 200" ] || { cat /tmp/metrics.out; fail "metrics -> $st"; }
cat /tmp/metrics.out; echo
grep -qE '"cpuCount": ?1[,}]' /tmp/metrics.out || fail "metrics: cpuCount"
grep -qE '"memUsed": ?[1-9]' /tmp/metrics.out || fail "metrics: memUsed"
echo "ok: metrics through airlockd (the VMM's stats)"

cli sandbox pause "$id" || fail "pause"
cli sandbox ls > /tmp/ls.out
grep "$id" /tmp/ls.out | grep -q paused || { cat /tmp/ls.out; fail "not paused"; }
cli sandbox resume "$id" --timeout 900 || fail "resume"
cli sandbox exec "$id" -- /bin/busybox echo after-resume > /tmp/exec2.out 2>&1 || { cat /tmp/exec2.out; fail "exec after resume"; }
grep -q after-resume /tmp/exec2.out || fail "no output after resume"
echo "ok: pause, resume, exec again"

# airlockd restarts (on_shutdown: keep): the KVM sandbox goes on and is re-adopted, with its
# network (the switch's record of its tap).
kill -TERM $apid
wait $apid || fail "airlockd exited $? on SIGTERM (keep)"
[ -e $S/sandboxes/$id ] || fail "the sandbox did not outlive airlockd (on_shutdown: keep)"
ip link show "$tap" >/dev/null 2>&1 || fail "the tap went with airlockd"
start_airlockd
grep -q '^  backend     kvm: ' /tmp/airlockd.log || fail "the restarted airlockd did not choose kvm"
cli sandbox ls > /tmp/ls2.out
grep "$id" /tmp/ls2.out | grep -q running || { cat /tmp/ls2.out; fail "not re-adopted as running"; }
cli sandbox exec "$id" -- /bin/busybox echo after-restart > /tmp/exec3.out 2>&1 || { cat /tmp/exec3.out; fail "exec after the restart"; }
grep -q after-restart /tmp/exec3.out || fail "no output after the restart"
echo "ok: airlockd restarted; the KVM sandbox was re-adopted and runs commands"

cli sandbox kill "$id" || fail "kill"
i=0
while { [ -e $S/sandboxes/$id ] || ip link show "$tap" >/dev/null 2>&1; } && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
[ ! -e $S/sandboxes/$id ] || fail "$S/sandboxes/$id left behind"
ip link show "$tap" >/dev/null 2>&1 && fail "the tap $tap is still there"
[ ! -e /sys/fs/cgroup/airlock/$id ] || fail "cgroup of $id left behind"
ps | grep -q "[a]irlock-vmm-kvm" && fail "a VMM still runs"
echo "ok: kill left no VMM, tap, cgroup or directory"

kill -TERM $apid
wait $apid || fail "airlockd exited $? on SIGTERM"
echo "airlockd scenario ok"
