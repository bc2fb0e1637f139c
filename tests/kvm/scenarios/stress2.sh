# Scenario (runs in L1; not in ctest, see docs/kvm.md "The nested harness"): repeats
# what the snapshot scenario does with 2 vCPUs: boot a 2-vCPU guest to its state server,
# write state, snapshot, restore twice, read the state back from both, quit. Each guest
# answer must come within AIRLOCK_KVM_STRESS_WAIT seconds (default 60). Prints one
# "stress: ..." line per round and a summary: rounds, failures, and per-phase times.
#   AIRLOCK_KVM_STRESS_N (rounds, default 8), AIRLOCK_KVM_STRESS_VCPUS (default 2),
#   AIRLOCK_KVM_STRESS_CMDLINE (extra guest kernel parameters), AIRLOCK_KVM_STRESS_SHOW=1
#   (print the booted guest's console every round), AIRLOCK_KVM_STRESS_CHURN=N (after the
#   restore, 4 clients per VM open N short connections each; the VMMs must survive)
set -e
vmm=/bin/airlock-vmm-kvm-release
[ -x "$vmm" ] || vmm=/bin/airlock-vmm-kvm
n=${AIRLOCK_KVM_STRESS_N:-8}
vcpus=${AIRLOCK_KVM_STRESS_VCPUS:-2}
export L1_TOOL_TIMEOUT=${AIRLOCK_KVM_STRESS_WAIT:-60}
extra=${AIRLOCK_KVM_STRESS_CMDLINE:-}
churn=${AIRLOCK_KVM_STRESS_CHURN:-0}
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
dd if=/dev/zero of=/tmp/disk.img bs=1M count=4 2>/dev/null
fails=0; boot_max=0; restore_max=0; i=0
while [ $i -lt $n ]; do
  rm -rf /tmp/snap /tmp/*.ovl /tmp/*.log
  ok=1; what=
  t0=$(now_ms)
  $vmm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB --vcpus $vcpus \
    --console /tmp/a.log --disk /tmp/disk.img --overlay /tmp/a.ovl --cid 3 \
    --vsock 1234=/tmp/a.sock --control /tmp/a.ctl \
    --cmdline "console=ttyS0 reboot=k panic=-1 ${AIRLOCK_KVM_QUIET-quiet} airlock.test=state $extra" 2>>/tmp/vmm.log &
  a=$!
  [ "$(/bin/l1_tool cmd /tmp/a.sock "set alpha" 2>/dev/null)" = ok ] || { ok=0; what="boot"; }
  t1=$(now_ms)
  if [ $ok = 1 ]; then
    case "$(/bin/l1_tool cmd /tmp/a.ctl "snapshot /tmp/snap" 2>/dev/null)" in ok*) ;; *) ok=0; what=snapshot;; esac
  fi
  /bin/l1_tool cmd /tmp/a.sock quit >/dev/null 2>&1 || true
  kill $a 2>/dev/null || true
  wait $a 2>/dev/null || true
  t2=$(now_ms)
  if [ $ok = 1 ]; then
    for vm in b c; do
      $vmm --restore /tmp/snap --console /tmp/$vm.log --disk /tmp/disk.img --overlay /tmp/$vm.ovl \
        --cid 3 --vsock 1234=/tmp/$vm.sock 2>>/tmp/vmm.log &
      eval "pid_$vm=\$!"
    done
    for vm in b c; do
      [ "$(/bin/l1_tool cmd /tmp/$vm.sock get 2>/dev/null)" = alpha ] || { ok=0; what="restore $vm"; }
    done
    # Connection churn: short connections from 4 clients at once per VM (each one: the
    # guest answers and closes while the client closes too), then the VMMs must be alive.
    if [ $ok = 1 ] && [ "$churn" -gt 0 ]; then
      for vm in b c; do
        for k in 1 2 3 4; do
          ( j=0; while [ $j -lt $churn ]; do /bin/l1_tool cmd /tmp/$vm.sock get >/dev/null 2>&1; j=$((j + 1)); done ) &
        done
      done
      wait_clients=$(jobs -p | grep -v "^$pid_b$" | grep -v "^$pid_c$" || true)
      for p in $wait_clients; do wait $p 2>/dev/null || true; done
      for vm in b c; do
        eval "alive=\$pid_$vm"
        kill -0 $alive 2>/dev/null || { ok=0; what="churn: the VMM of $vm died"; }
        [ "$(/bin/l1_tool cmd /tmp/$vm.sock get 2>/dev/null)" = alpha ] || { ok=0; what="churn $vm"; }
      done
    fi
    for vm in b c; do
      /bin/l1_tool cmd /tmp/$vm.sock quit >/dev/null 2>&1 || true
      eval "kill \$pid_$vm 2>/dev/null; wait \$pid_$vm 2>/dev/null" || true
    done
  fi
  t3=$(now_ms)
  boot=$((t1 - t0)); restore=$((t3 - t2))
  [ $boot -gt $boot_max ] && boot_max=$boot
  [ $restore -gt $restore_max ] && restore_max=$restore
  [ -n "${AIRLOCK_KVM_STRESS_SHOW:-}" ] && { echo "--- console of the booted guest"; tr -cd "\11\12\15\40-\176" < /tmp/a.log; }
  if [ $ok = 1 ]; then
    echo "stress: round $i ok boot_ms=$boot restore2_ms=$restore"
  else
    fails=$((fails + 1))
    echo "stress: round $i FAILED at $what boot_ms=$boot restore2_ms=$restore"
    for f in /tmp/a.log /tmp/b.log /tmp/c.log; do
      [ -f $f ] && { echo "--- $f"; tr -cd "\11\12\15\40-\176" < $f | tail -15; }
    done
    tail -5 /tmp/vmm.log
  fi
  i=$((i + 1))
done
echo "stress: summary rounds=$n vcpus=$vcpus failures=$fails boot_max_ms=$boot_max restore2_max_ms=$restore_max"
grep -a "AddressSanitizer\|runtime error\|Segmentation" /tmp/vmm.log && exit 1
[ $fails = 0 ]
