# Scenario (runs in L1): the VMM boots the airlock guest kernel with the test payload as
# init; the payload reports over serial and resets through the i8042; the VMM exits 0.
set -e
# l1-cpus: 2 (the second guest has two vCPUs; see kvm_boot_l1 in lib.sh)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
. /scenario-lib.sh
# The probe airlockd will use: capabilities, a tiny guest, then this kernel's first words
# (within 2 minutes: under TCG on a loaded host they took more than the default 10 s).
/bin/airlock-vmm-kvm --probe --kernel /airlock/bzImage --timeout-ms 120000
t0=$(cut -d' ' -f1 /proc/uptime)
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --console /tmp/console.log --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=boot" &
rc=0
wait_exit $! "the start of a guest that resets once booted" 900 || rc=$?
t1=$(cut -d' ' -f1 /proc/uptime)
cat /tmp/console.log
echo "bench: vmm_boot_to_reset_s $(echo "$t1 $t0" | awk '{print $1-$2}')"
[ "$rc" = 0 ] || { echo "VMM exited $rc"; exit 1; }
grep -q '^AIRLOCK-GUEST: ok boot' /tmp/console.log
grep -q '^AIRLOCK-GUEST: done 1/1' /tmp/console.log
# Two vCPUs: the MP table must bring the second one up.
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --vcpus 2 --console /tmp/console2.log \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=boot" &
wait_exit $! "the start of a two-vCPU guest that resets once booted" 900 \
  || { echo "two-vCPU VMM exited $?"; cat /tmp/console2.log; exit 1; }
grep -a 'AIRLOCK-GUEST' /tmp/console2.log
grep -q '^AIRLOCK-GUEST: cpus 2' /tmp/console2.log || { echo "second vCPU not online"; exit 1; }
# Descriptors handed in by a supervisor (agent socket, console), stopped through the
# control socket: exit 0, the VMM's own socket gone, nothing left running.
/bin/l1_tool listen-exec /tmp/agent.sock 5 /bin/airlock-vmm-kvm --kernel /airlock/bzImage \
  --initrd /airlock/guest.cpio.gz --mem 128MiB --cid 3 --vsock-fd 1234=5 --console-fd 6 \
  --control /tmp/ctl.sock --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=state" \
  6>/tmp/console3.log &
pid=$!
[ "$(/bin/l1_tool cmd /tmp/agent.sock get)" = unset ] || { echo "agent channel from a handed-in fd failed"; exit 1; }
[ "$(/bin/l1_tool cmd /tmp/ctl.sock stop)" = ok ] || { echo "stop command failed"; exit 1; }
wait_exit $pid stop || { echo "VMM exited $? after stop"; exit 1; }
[ ! -e /tmp/ctl.sock ] || { echo "control socket left behind"; exit 1; }
grep -q 'state server listening' /tmp/console3.log || { echo "console fd not used"; exit 1; }
# SIGTERM ends it cleanly too.
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --cid 3 --vsock 1234=/tmp/agent4.sock --console /tmp/console4.log \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=state" &
pid=$!
[ "$(/bin/l1_tool cmd /tmp/agent4.sock get)" = unset ] || { echo "fourth VM did not answer"; exit 1; }
kill -TERM $pid
wait_exit $pid SIGTERM || { echo "VMM exited $? after SIGTERM"; exit 1; }
[ ! -e /tmp/agent4.sock ] || { echo "agent socket left behind after SIGTERM"; exit 1; }
for p in /proc/[0-9]*; do
  case "$(cat $p/comm 2>/dev/null)" in airlock-vmm-kvm|vcpu*|devices) echo "leftover $(cat $p/comm)"; exit 1;; esac
done
echo "boot scenario ok"
