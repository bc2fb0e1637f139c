# Scenario (runs in L1): airlockd itself chooses the KVM backend and runs a KVM sandbox.
#   - sandboxes.backend: auto; L1's /dev/kvm boots the guest kernel, so airlockd's probe
#     (airlock-vmm --probe-kvm) says usable and airlockd picks kvm, printing why;
#   - a sandbox created through airlockd's API (its local socket, as the CLI uses it) is a
#     microVM on a vswitch tap: its guest has the address the switch assigned and the
#     switch answers its ARP for the gateway through the tap;
#     a command runs through airlockd (airlock sandbox exec), metrics, pause/resume, info;
#   - airlockd restarts (on_shutdown: keep) and re-adopts the running KVM sandbox;
#   - kill leaves no VMM, tap, cgroup or sandbox directory; airlockd stops cleanly.
#   - airlock-egress runs under airlockd (egress.mode: on) and the guest's HTTP goes through
#     it: to an allowed fake upstream (a namespace "up" of L1 holding 203.0.113.10/.11) it is
#     answered, to a denied one the proxy refuses it (403) and nothing reaches that upstream;
#     L1's kernel decides airlock-egress's listener layout: before 6.5 (Debian 12's 6.1)
#     bpf_sk_assign refuses SO_REUSEPORT sockets, so it must say "shared", the switch counts
#     no assign_failed, a second airlock-egress forced to --listener-mode reuseport is refused
#     at registration, and a raw SO_REUSEPORT socket put in the sockmap behind the switch's
#     back (l1-vswitch --reuseport-probe) gets nothing while assign_failed counts the drops
#     (the kernel rule itself, seen from a guest); from 6.5 "reuseport" and the probe is served.
# Every wait is for a condition, bounded in minutes: the guest's clock runs at the host's wall
# clock, and a TCG guest on a loaded host does the same work several times slower (the
# harness bounds the whole run by QEMU's CPU time, which load does not move).
# l1-cpu-seconds: 600 (the first sandbox of the template builds its image and snapshot)
# l1-wall-seconds: 3000 (the same work on a loaded host: several times the CPU time)
set -e
. /scenario-lib.sh
S=/tmp/state
fail() { echo "FAILED: $*"; exit 1; }
depmod -a 2>/dev/null || busybox depmod
modprobe nf_tables
modprobe sch_ingress
modprobe cls_bpf
modprobe veth
mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf
mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup
mkdir -p $S
ip link set lo up
trap 'rc=$?; [ $rc = 0 ] || { for f in /tmp/airlockd.history.log /tmp/airlockd.log /tmp/airlockd.out /tmp/good.log /tmp/evil.log /tmp/probe.out /tmp/egress2.log $S/sandboxes/*/agent.log; do [ -f $f ] && { echo "--- $f"; tr -cd "\11\12\15\40-\176" < $f | tail -60; }; done; echo "--- dmesg"; dmesg | tail -15; }' EXIT

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
  kvm_probe_timeout: 120s # the most airlockd accepts
  cpu_count: 1
  memory: 256MiB
  disk: 64MiB
  start_timeout: 600s # the most airlockd accepts
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
  mode: "on"
  args: ["--resolver", "203.0.113.53", "--workers", "2"]
vault:
  mode: "off"
# L1's /tmp is a tmpfs of half its 1 GiB: less than the default reserve of 1 GiB.
disk:
  reserve: 32MiB
policies:
  default: e2e
log:
  format: text
CFG
# The policy: plain HTTP to 203.0.113.10 only.
mkdir -p $S/policies
cat > $S/policies/e2e.yaml <<'POL'
version: 1
name: e2e
description: the nested airlockd scenario's policy
rules:
  - name: good
    cidrs: [203.0.113.10/32]
    ports: [80]
    scheme: http
POL
# The fake internet: a namespace "up" behind a veth, with documentation addresses and two
# busybox web servers (good, evil). L1 itself has no network device to the outside at all.
IP=/bin/ip2
$IP netns add up
$IP link add upa type veth peer name upb netns up
$IP addr add 192.0.2.1/30 dev upa
$IP link set upa up
$IP -n up addr add 192.0.2.2/30 dev upb
$IP -n up link set upb up
$IP -n up link set lo up
for a in 203.0.113.10 203.0.113.11 203.0.113.53; do $IP -n up addr add $a/32 dev lo; done
$IP route add 203.0.113.0/24 via 192.0.2.2
mkdir -p /tmp/www-good /tmp/www-evil
echo good-upstream > /tmp/www-good/index.html
echo evil-upstream > /tmp/www-evil/index.html
$IP netns exec up /bin/busybox httpd -f -vv -p 203.0.113.10:80 -h /tmp/www-good > /tmp/good.log 2>&1 &
$IP netns exec up /bin/busybox httpd -f -vv -p 203.0.113.11:80 -h /tmp/www-evil > /tmp/evil.log 2>&1 &
kmaj=$(uname -r | cut -d. -f1); kmin=$(uname -r | cut -d. -f2)
if [ "$kmaj" -gt 6 ] || { [ "$kmaj" = 6 ] && [ "$kmin" -ge 5 ]; }; then old_kernel=0; else old_kernel=1; fi
echo "L1 kernel $(uname -r) (before 6.5: $old_kernel)"
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
st=$(L1_TOOL_TIMEOUT=700 /bin/l1_tool http $S/run/airlockd.sock POST /v2/sandboxes /tmp/create.json application/json /tmp/create.out)
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

# airlock-egress: its listener layout, chosen by L1's kernel, and why.
if [ $old_kernel = 1 ]; then
  grep -q 'listeners: shared (one socket per address, polled by every worker): auto; kernel .* < 6.5: bpf_sk_assign refuses SO_REUSEPORT' /tmp/airlockd.log \
    || fail "airlock-egress did not choose the shared listener mode on kernel $(uname -r)"
  grep -q "^  kernel      $(uname -r) (older than 6.5: bpf_sk_assign refuses SO_REUSEPORT" /tmp/airlockd.log \
    || fail "airlockd's host summary does not say what kernel $(uname -r) means for egress"
else
  grep -q 'listeners: reuseport (one socket per worker per address, SO_REUSEPORT): auto; kernel' /tmp/airlockd.log \
    || fail "airlock-egress did not choose the reuseport listener mode on kernel $(uname -r)"
fi
grep 'listeners: ' /tmp/airlockd.log | head -1
echo "ok: airlock-egress chose its listener layout by the kernel and said why"
# The guest's HTTP through the switch and the proxy: allowed is answered by the upstream...
cli sandbox exec "$id" -- /bin/busybox timeout 300 /bin/busybox wget -q -O - http://203.0.113.10/index.html > /tmp/http.out 2>&1 \
  || { cat /tmp/http.out; /bin/airlock --state-dir $S vswitch status; fail "HTTP from the guest to the allowed upstream"; }
grep -q '^good-upstream$' /tmp/http.out || { cat /tmp/http.out; fail "the allowed upstream's answer did not reach the guest"; }
grep -q 'url:/index.html' /tmp/good.log || fail "the allowed upstream saw no request"
echo "ok: the guest's HTTP to the allowed upstream went through airlock-egress and was answered"
# ... denied is refused by the proxy (403: it was accepted and decided, not lost in the switch).
cli sandbox exec "$id" -- /bin/busybox sh -c '/bin/busybox timeout 300 /bin/busybox wget -q -O - http://203.0.113.11/denied 2>&1; echo "rc=$?"' > /tmp/deny.out 2>&1 || true
cat /tmp/deny.out
grep -q '403' /tmp/deny.out || fail "the denied request was not refused by the proxy with 403"
grep -q 'evil-upstream' /tmp/deny.out && fail "the denied upstream answered the guest"
grep -q 'url:' /tmp/evil.log && fail "a request reached the denied upstream"
/bin/airlock --state-dir $S vswitch status > /tmp/vs2.out 2>&1 || true
grep -q 'assign_failed' /tmp/vs2.out && { cat /tmp/vs2.out; fail "the switch counted assign_failed with airlock-egress's own sockets"; }
echo "ok: the denied request was refused by airlock-egress (403), nothing reached that upstream, no assign_failed"

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
wait_exit $apid SIGTERM || fail "airlockd exited $? on SIGTERM (keep)"
[ -e $S/sandboxes/$id ] || fail "the sandbox did not outlive airlockd (on_shutdown: keep)"
ip link show "$tap" >/dev/null 2>&1 || fail "the tap went with airlockd"
start_airlockd
grep -q '^  backend     kvm: ' /tmp/airlockd.log || fail "the restarted airlockd did not choose kvm"
cli sandbox ls > /tmp/ls2.out
grep "$id" /tmp/ls2.out | grep -q running || { cat /tmp/ls2.out; fail "not re-adopted as running"; }
cli sandbox exec "$id" -- /bin/busybox echo after-restart > /tmp/exec3.out 2>&1 || { cat /tmp/exec3.out; fail "exec after the restart"; }
grep -q after-restart /tmp/exec3.out || fail "no output after the restart"
echo "ok: airlockd restarted; the KVM sandbox was re-adopted and runs commands"

# The kernel rule itself. A second airlock-egress forced to SO_REUSEPORT listeners: on a
# kernel before 6.5 the switch refuses its sockets, and it stops saying why (fail closed).
/bin/airlock-egress --state-dir $S --vswitch on --listener-mode reuseport --listen 127.0.0.1:0 \
  --dns 127.0.0.1:0 --admin-socket none --audit-dir /tmp/audit2 --vault-socket none \
  --resolver 203.0.113.53 --workers 2 > /tmp/egress2.log 2>&1 &
e2pid=$!
if [ $old_kernel = 1 ]; then
  w=0
  while kill -0 $e2pid 2>/dev/null && [ $w -lt 3000 ]; do sleep 0.1; w=$((w + 1)); done
  kill -0 $e2pid 2>/dev/null && { kill $e2pid; fail "airlock-egress --listener-mode reuseport kept running on kernel $(uname -r)"; }
  wait $e2pid && fail "airlock-egress --listener-mode reuseport exited 0 on kernel $(uname -r)"
  grep -q 'has SO_REUSEPORT, and this kernel .* cannot hand packets to such sockets' /tmp/egress2.log \
    || { cat /tmp/egress2.log; fail "the refusal does not say why"; }
  grep 'has SO_REUSEPORT' /tmp/egress2.log | head -1
  echo "ok: a forced --listener-mode reuseport is refused at registration on kernel $(uname -r)"
else
  w=0
  while ! grep -q 'listening sockets registered' /tmp/egress2.log && [ $w -lt 3000 ]; do sleep 0.1; w=$((w + 1)); done
  grep -q 'listening sockets registered' /tmp/egress2.log || { cat /tmp/egress2.log; fail "--listener-mode reuseport was not registered"; }
  kill -TERM $e2pid; wait_exit $e2pid SIGTERM || true
  echo "ok: --listener-mode reuseport registers on kernel $(uname -r)"
fi
# A raw SO_REUSEPORT socket put into the sockmap behind the switch's back (it replaces the
# proxy's TCP socket for the rest of the run): the guest's connection to it.
pin=$(sed -n 's/^vswitch \(.*\)$/\1/p' /tmp/vs2.out)
[ -n "$pin" ] || { cat /tmp/vs2.out; fail "no pin directory in vswitch status"; }
af0=$(sed -n 's/.*assign_failed[^0-9]*\([0-9][0-9]*\).*/\1/p' /tmp/vs2.out | head -1); af0=${af0:-0}
: > /tmp/probe.out
/bin/l1-vswitch --reuseport-probe "$pin" 15099 1800 >> /tmp/probe.out 2>&1 &
ppid=$!
w=0
while ! grep -q 'probe registered' /tmp/probe.out && [ $w -lt 3000 ]; do sleep 0.1; w=$((w + 1)); done
grep -q 'probe registered' /tmp/probe.out || fail "the probe could not register its socket"
cli sandbox exec "$id" -- /bin/busybox sh -c '/bin/busybox nc -w 5 203.0.113.10 80 </dev/null; echo "rc=$?"' > /tmp/nc.out 2>&1 || true
# Where the kernel hands the connection over, nc can return before the probe says so.
if [ $old_kernel = 0 ]; then
  w=0
  while ! grep -q 'probe accepted' /tmp/probe.out && kill -0 $ppid 2>/dev/null && [ $w -lt 3000 ]; do sleep 0.1; w=$((w + 1)); done
fi
kill $ppid 2>/dev/null || true
wait_exit $ppid SIGTERM || true
/bin/airlock --state-dir $S vswitch status > /tmp/vs3.out 2>&1 || true
af1=$(sed -n 's/.*assign_failed[^0-9]*\([0-9][0-9]*\).*/\1/p' /tmp/vs3.out | head -1); af1=${af1:-0}
cat /tmp/probe.out
grep -A12 "$tap" /tmp/vs3.out | head -14
if [ $old_kernel = 1 ]; then
  grep -q 'probe accepted' /tmp/probe.out && fail "kernel $(uname -r) handed a connection to a SO_REUSEPORT socket: the shared mode would not be needed"
  [ "$af1" -gt "$af0" ] || fail "the switch did not count assign_failed ($af0 -> $af1) for the SO_REUSEPORT socket"
  echo "ok: kernel $(uname -r): bpf_sk_assign refuses a SO_REUSEPORT socket (assign_failed $af0 -> $af1; the guest's connection never arrived)"
else
  grep -q 'probe accepted' /tmp/probe.out || fail "kernel $(uname -r) did not hand the connection to the SO_REUSEPORT socket"
  echo "ok: kernel $(uname -r): bpf_sk_assign hands connections to a SO_REUSEPORT socket"
fi

cli sandbox kill "$id" || fail "kill"
i=0
while { [ -e $S/sandboxes/$id ] || ip link show "$tap" >/dev/null 2>&1; } && [ $i -lt 3000 ]; do sleep 0.1; i=$((i + 1)); done
[ ! -e $S/sandboxes/$id ] || fail "$S/sandboxes/$id left behind"
ip link show "$tap" >/dev/null 2>&1 && fail "the tap $tap is still there"
[ ! -e /sys/fs/cgroup/airlock/$id ] || fail "cgroup of $id left behind"
ps | grep -q "[a]irlock-vmm-kvm" && fail "a VMM still runs"
echo "ok: kill left no VMM, tap, cgroup or directory"

kill -TERM $apid
wait_exit $apid SIGTERM || fail "airlockd exited $? on SIGTERM"
echo "airlockd scenario ok"
