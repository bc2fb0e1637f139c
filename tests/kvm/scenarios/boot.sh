# Scenario (runs in L1): the VMM boots the airlock guest kernel with the test payload as
# init; the payload reports over serial and resets through the i8042; the VMM exits 0.
set -e
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
# The probe airlockd will use: capabilities, a tiny guest, then this kernel's first words.
/bin/airlock-vmm-kvm --probe --kernel /airlock/bzImage
t0=$(cut -d' ' -f1 /proc/uptime)
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --console /tmp/console.log --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=boot"
rc=$?
t1=$(cut -d' ' -f1 /proc/uptime)
cat /tmp/console.log
echo "bench: vmm_boot_to_reset_s $(echo "$t1 $t0" | awk '{print $1-$2}')"
[ "$rc" = 0 ] || { echo "VMM exited $rc"; exit 1; }
grep -q '^AIRLOCK-GUEST: ok boot' /tmp/console.log
grep -q '^AIRLOCK-GUEST: done 1/1' /tmp/console.log
# Two vCPUs: the MP table must bring the second one up.
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --vcpus 2 --console /tmp/console2.log \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=boot"
grep -a 'AIRLOCK-GUEST' /tmp/console2.log
grep -q '^AIRLOCK-GUEST: cpus 2' /tmp/console2.log || { echo "second vCPU not online"; exit 1; }
