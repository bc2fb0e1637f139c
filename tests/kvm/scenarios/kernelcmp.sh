# Scenario (runs in L1; a measurement, not a ctest test): time from VMM start to the test
# init running, for the airlock microVM kernel and for Debian's cloud kernel as the guest
# (serial only; Debian's kernel has its virtio drivers as modules). docs/kvm.md quotes it.
set -e
vmm=/bin/airlock-vmm-kvm-release
[ -x "$vmm" ] || vmm=/bin/airlock-vmm-kvm
for k in /airlock/bzImage /airlock/debian-vmlinuz; do
  for i in 1 2 3; do
    t0=$(awk '{printf "%d", $1 * 1000}' /proc/uptime)
    $vmm --kernel $k --initrd /airlock/guest.cpio.gz --mem 256MiB --console /tmp/c.log \
      --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=boot"
    t1=$(awk '{printf "%d", $1 * 1000}' /proc/uptime)
    echo "bench: kernel $k run $i: vmm start to reset $((t1 - t0)) ms, $(grep boottime /tmp/c.log)"
    rm -f /tmp/c.log
  done
done
