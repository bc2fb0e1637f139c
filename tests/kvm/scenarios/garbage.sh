# Scenario (runs in L1): a hostile guest writes garbage to every device register, port and
# queue (see check_garbage in the payload). The VMM (ASan+UBSan build under tests/run) must
# not crash or hang: the guest then reports and resets, and the VMM exits 0.
set -e
. /scenario-lib.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
dd if=/dev/zero of=/tmp/disk.img bs=1M count=4 2>/dev/null
tunctl -t tap0 >/dev/null
ip link set tap0 up
rc=0
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --console /tmp/console.log --disk /tmp/disk.img --overlay /tmp/overlay.img --tap tap0 \
  --cid 3 --vsock 1234=/tmp/agent.sock \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=garbage" &
wait_exit $! "the hostile guest's run and reset" 900 || rc=$?
cat /tmp/console.log | tr -cd '\11\12\15\40-\176' | grep -a 'AIRLOCK-GUEST' || true
[ "$rc" = 0 ] || { echo "VMM exited $rc"; exit 1; }
grep -aq '^AIRLOCK-GUEST: ok garbage' /tmp/console.log || { echo "the guest did not finish"; exit 1; }
echo "garbage scenario ok"
