# Scenario (runs in L1) for bench/kvm_bench.sh: boot to guest-answering, snapshot time,
# restore to guest-answering, and the VMM's memory beyond guest RAM, with the Release VMM.
# Prints "bench-json: {...}" lines; these are TCG-nested figures, not bare-metal ones.
set -e
vmm=/bin/airlock-vmm-kvm-release
[ -x "$vmm" ] || vmm=/bin/airlock-vmm-kvm
runs=${AIRLOCK_KVM_BENCH_RUNS:-3}
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
emit() { echo "bench-json: {\"bench\":\"kvm\",\"metric\":\"$1\",\"value\":$2,\"unit\":\"$3\",\"env\":\"tcg-nested\"}"; }
# VmRSS minus the resident part of the guest-memory mapping (the one mapping of exactly
# the guest's size), in KiB.
overhead_kib() {
  awk -v want="$2" '
    /^[0-9a-f]+-[0-9a-f]+ / { inmap = 0 }
    /^Size:/ { inmap = ($2 == want) }
    /^Rss:/ { total += $2; if (inmap) guest += $2 }
    END { print total - guest }' /proc/$1/smaps
}
mem_mib=128
dd if=/dev/zero of=/tmp/disk.img bs=1M count=4 2>/dev/null
boot_sum=0; i=0
while [ $i -lt $runs ]; do
  t0=$(now_ms)
  $vmm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem ${mem_mib}MiB \
    --console /tmp/console-$i.log --disk /tmp/disk.img --overlay /tmp/ovl-$i --cid 3 \
    --vsock 1234=/tmp/a.sock --control /tmp/a.ctl \
    --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=state" &
  pid=$!
  /bin/l1_tool fastcmd /tmp/a.sock get >/dev/null
  t1=$(now_ms)
  emit boot_to_guest_answer_ms $((t1 - t0)) ms
  boot_sum=$((boot_sum + t1 - t0))
  if [ $i = 0 ]; then
    sleep 1
    emit vmm_rss_overhead_kib "$(overhead_kib $pid $((mem_mib * 1024)))" KiB
    out=$(/bin/l1_tool cmd /tmp/a.ctl "snapshot /tmp/snap")
    case "$out" in ok*) emit snapshot_ms "$(echo "$out" | awk '{print $2}')" ms ;; *) echo "snapshot failed: $out"; exit 1 ;; esac
    emit snapshot_memory_file_kib "$(du -k /tmp/snap/memory | cut -f1)" KiB
  fi
  /bin/l1_tool cmd /tmp/a.sock quit >/dev/null
  wait $pid
  i=$((i + 1))
done
emit boot_to_guest_answer_mean_ms $((boot_sum / runs)) ms
restore_sum=0; i=0
while [ $i -lt $runs ]; do
  t0=$(now_ms)
  $vmm --restore /tmp/snap --console /tmp/r-$i.log --disk /tmp/disk.img --overlay /tmp/rovl-$i \
    --cid 3 --vsock 1234=/tmp/r.sock &
  pid=$!
  /bin/l1_tool fastcmd /tmp/r.sock get >/dev/null
  t1=$(now_ms)
  emit restore_to_guest_answer_ms $((t1 - t0)) ms
  restore_sum=$((restore_sum + t1 - t0))
  if [ $i = 0 ]; then
    sleep 1
    emit vmm_rss_overhead_restored_kib "$(overhead_kib $pid $((mem_mib * 1024)))" KiB
    emit restored_guest_rss_kib "$(awk '/^Rss:/{t+=$2} END{print t}' /proc/$pid/smaps)" KiB
  fi
  /bin/l1_tool cmd /tmp/r.sock quit >/dev/null
  wait $pid
  i=$((i + 1))
done
emit restore_to_guest_answer_mean_ms $((restore_sum / runs)) ms
