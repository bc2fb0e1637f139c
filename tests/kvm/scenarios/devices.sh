# Scenario (runs in L1): one guest exercises every device: virtio-blk (a marker in the
# base image, a write that must land in the overlay only), virtio-net (TCP from the guest
# to a listener on the tap's host side), virtio-vsock (two echo connections through the
# VMM's unix socket, one of 1 MiB to exercise credit flow control), virtio-rng (the guest's
# hwrng), then a clean reset.
set -e
. /scenario-lib.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
dd if=/dev/zero of=/tmp/disk.img bs=1M count=4 2>/dev/null
printf 'AIRLOCK-DISK-v1' | dd of=/tmp/disk.img conv=notrunc 2>/dev/null
base_sum=$(md5sum /tmp/disk.img | cut -d' ' -f1)
tunctl -t tap0 >/dev/null
ip addr add 192.0.2.1/24 dev tap0
ip link set tap0 up
nc -l -p 7777 > /tmp/net.txt &
nc_pid=$!
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --console /tmp/console.log --disk /tmp/disk.img --overlay /tmp/overlay.img --tap tap0 \
  --cid 3 --vsock 1234=/tmp/agent.sock \
  --cmdline "console=ttyS0 reboot=k panic=-1 ${AIRLOCK_KVM_QUIET-quiet} airlock.test=boot,disk,net,rng,vsock" &
vmm_pid=$!
[ -n "${AIRLOCK_KVM_VERBOSE:-}" ] && wait_for 60 "the VMM's console file" test -e /tmp/console.log && { tail -f /tmp/console.log & }
ok=1
/bin/l1_tool echo /tmp/agent.sock 100 || ok=0
/bin/l1_tool echo /tmp/agent.sock 1048576 || ok=0
rc=0
wait_exit $vmm_pid "the guest's checks and reset" 900 || rc=$?
kill $nc_pid 2>/dev/null || true
cat /tmp/console.log
[ "$rc" = 0 ] || { echo "VMM exited $rc"; exit 1; }
[ "$ok" = 1 ] || { echo "vsock echo failed"; exit 1; }
grep -q '^AIRLOCK-GUEST: done 6/6' /tmp/console.log || { echo "guest checks failed"; exit 1; }
grep -q 'hello-from-the-guest' /tmp/net.txt || { echo "no TCP data from the guest"; exit 1; }
[ "$(md5sum /tmp/disk.img | cut -d' ' -f1)" = "$base_sum" ] || { echo "base image was modified"; exit 1; }
dd if=/tmp/overlay.img bs=4096 skip=1 count=1 2>/dev/null | grep -q GUEST-WROTE-THIS || { echo "write not in overlay"; exit 1; }
[ ! -e /tmp/agent.sock ] || { echo "agent socket left behind"; exit 1; }
echo "devices scenario ok"
