# Scenario (runs in L1) for bench/kvm_bench.sh: sandboxes created through
# airlock-vmm --backend kvm (spec on stdin, ready fd), the way the control plane does it.
#   template_first_create_ms   the first sandbox of a template: root image, template boot to
#                              agent healthy, snapshot, restore, init (once per template)
#   template_snapshot_ms       the VMM's snapshot of the template VM (from airlock-vmm's log)
#   vmm_create_restore_p50/p99_ms   create -> ready line (restore + POST /init + /health),
#                              AIRLOCK_KVM_BENCH_CREATES sandboxes one after the other
#   vmm_rss_overhead_kib       the VMM process's RSS beyond the guest memory it maps
#   supervisor_rss_kib / supervisor_pss_kib   airlock-vmm itself (the supervisor)
#   api_snapshot_ms            POST /snapshot of a running (restored) sandbox
# TCG-nested figures: relative costs, not bare-metal speed.
set -e
S=/tmp/state
n=${AIRLOCK_KVM_BENCH_CREATES:-20}
mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup
mkdir -p $S
export MKE2FS=/bin/e2fs-mke2fs
[ -x /bin/airlock-vmm-kvm-release ] && export AIRLOCK_VMM_KVM=/bin/airlock-vmm-kvm-release
[ -x /bin/airlock-vmm-release ] && vmm=/bin/airlock-vmm-release || vmm=/bin/airlock-vmm
emit() { echo "bench-json: {\"bench\":\"kvm\",\"metric\":\"$1\",\"value\":$2,\"unit\":\"$3\",\"env\":\"tcg-nested\"$4}"; }
fail() { echo "FAILED: $*"; for f in /tmp/vmm-*.log; do echo "--- $f"; tail -20 $f; done; exit 1; }
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
spec() {
  printf '{"id":"%s","backend":"kvm","template":"/airlock/template","resources":{"cpus":1,"memory_mib":256,"disk_mib":64},"access_token":"token-%s-0123456789","agent":{"start_timeout_ms":60000},"kvm":{"kernel":"/airlock/bzImage"}}' "$1" "$1"
}
start() {
  spec $1 > /tmp/spec-$1.json
  rm -f /tmp/ready-$1
  $vmm --state-dir $S --spec - --ready-fd 3 < /tmp/spec-$1.json 3> /tmp/ready-$1 2>> /tmp/vmm-$1.log &
  eval "pid_$1=\$!"
  w=0
  while [ ! -s /tmp/ready-$1 ] && [ $w -lt 3600 ]; do sleep 0.05; w=$((w + 1)); done
  grep -q '"ready":true' /tmp/ready-$1 || fail "sandbox $1: $(cat /tmp/ready-$1)"
}
stop() {
  [ "$(/bin/l1_tool http $S/sandboxes/$1/vmm.sock POST /stop | head -1)" = "status 204" ] || fail "stop $1"
  eval "wait \$pid_$1" || fail "airlock-vmm of $1 exited $?"
}
ms_of() { sed -n 's/.*"startup_ms":\([0-9]*\).*/\1/p' /tmp/ready-$1; }
# VmRSS minus the resident part of the guest-memory mapping (the mapping of exactly the
# guest's size), in KiB.
overhead_kib() {
  awk -v want="$2" '
    /^[0-9a-f]+-[0-9a-f]+ / { inmap = 0 }
    /^Size:/ { inmap = ($2 == want) }
    /^Rss:/ { total += $2; if (inmap) guest += $2 }
    END { print total - guest }' /proc/$1/smaps
}

t0=$(now_ms)
start first
emit template_first_create_ms $(($(now_ms) - t0)) ms
snap=$(sed -n 's/.*template snapshot taken (ok \([0-9.]*\) ms).*/\1/p' /tmp/vmm-first.log | head -1)
[ -n "$snap" ] && emit template_snapshot_ms "$snap" ms
# Memory of a running restored sandbox (after it settled).
sleep 1
vpid=$(sed -n 's/.*"agent_pid":\([0-9]*\).*/\1/p' /tmp/ready-first)
[ -n "$vpid" ] || fail "no VMM pid in the ready line"
emit vmm_rss_overhead_kib "$(overhead_kib $vpid $((256 * 1024)))" KiB
emit vmm_rss_total_kib "$(awk '/^Rss:/{t+=$2} END{print t}' /proc/$vpid/smaps)" KiB
emit supervisor_rss_kib "$(awk '/^Rss:/{t+=$2} END{print t}' /proc/$pid_first/smaps)" KiB
emit supervisor_pss_kib "$(awk '/^Pss:/{t+=$2} END{print t}' /proc/$pid_first/smaps)" KiB
printf '{"path":"/tmp/snap-first"}' > /tmp/snapreq.json
t1=$(now_ms)
st=$(/bin/l1_tool http $S/sandboxes/first/vmm.sock POST /snapshot /tmp/snapreq.json application/json /tmp/snap.out)
[ "$st" = "status 200" ] || fail "POST /snapshot -> $st $(cat /tmp/snap.out)"
emit api_snapshot_ms "$(sed -n 's/.*"ms":\([0-9]*\).*/\1/p' /tmp/snap.out)" ms
v=$(sed -n 's/.*guest written to \/api-snap-1 in \([0-9.]*\) ms.*/\1/p' /tmp/vmm-first.log | head -1)
[ -n "$v" ] && emit api_snapshot_vmm_ms "$v" ms
emit api_snapshot_memory_file_kib "$(du -k /tmp/snap-first/memory | cut -f1)" KiB
stop first

i=0
: > /tmp/create-ms
while [ $i -lt $n ]; do
  start s$i
  ms_of s$i >> /tmp/create-ms
  stop s$i
  i=$((i + 1))
done
sort -n /tmp/create-ms > /tmp/create-sorted
p50=$(awk -v n=$n 'NR == int((n + 1) / 2) {print}' /tmp/create-sorted)
p99=$(awk -v n=$n 'NR == int((n * 99 + 99) / 100) {print}' /tmp/create-sorted)
emit vmm_create_restore_p50_ms "$p50" ms ",\"samples\":$n"
emit vmm_create_restore_p99_ms "$p99" ms ",\"samples\":$n"
echo "benchvmm: creates (ms): $(tr '\n' ' ' < /tmp/create-sorted)"
