# Scenario (runs in L1): snapshot and restore. VM A (2 vCPUs) boots, gets state (a value in guest
# memory, a sector on its disk), is snapshotted through the control socket and carries on.
# VMs B and C are restored from the same snapshot: both see A's state as of the snapshot,
# and what B changes (memory and disk) C does not see. Every VMM exits 0.
set -e
. /scenario-lib.sh
# l1-cpus: 2 (VM A has two vCPUs; see kvm_boot_l1 in lib.sh)
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
dd if=/dev/zero of=/tmp/disk.img bs=1M count=4 2>/dev/null
expect() { # expect WANT CMD...
  want=$1; shift
  got=$("$@") || { echo "FAILED: $*"; return 1; }
  [ "$got" = "$want" ] || { echo "FAILED: $* -> '$got', wanted '$want'"; return 1; }
  echo "ok: $* -> $got"
}
now() { cut -d' ' -f1 /proc/uptime; }
trap 'rc=$?; if [ $rc != 0 ]; then for f in /tmp/a.log /tmp/b.log /tmp/c.log; do
  [ -f $f ] && { echo "--- $f"; tr -cd "\11\12\15\40-\176" < $f | tail -40; }; done; fi' EXIT

t0=$(now)
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --vcpus 2 --console /tmp/a.log --disk /tmp/disk.img --overlay /tmp/a.ovl --cid 3 \
  --vsock 1234=/tmp/a.sock --control /tmp/a.ctl \
  --cmdline "console=ttyS0 reboot=k panic=-1 ${AIRLOCK_KVM_QUIET-quiet} airlock.test=state" &
a=$!
[ -n "${AIRLOCK_KVM_VERBOSE:-}" ] && wait_for 60 "VM A's console file" test -e /tmp/a.log && { tail -f /tmp/a.log & }
expect ok /bin/l1_tool cmd /tmp/a.sock "set alpha"
t1=$(now)
expect ok /bin/l1_tool cmd /tmp/a.sock "disk-write disk-alpha"
snap=$(/bin/l1_tool cmd /tmp/a.ctl "snapshot /tmp/snap")
echo "snapshot: $snap"
case "$snap" in ok*) ;; *) echo "snapshot failed"; exit 1;; esac
expect ok /bin/l1_tool cmd /tmp/a.sock "set after-snapshot"
expect after-snapshot /bin/l1_tool cmd /tmp/a.sock get
expect bye /bin/l1_tool cmd /tmp/a.sock quit
wait_exit $a "quit (A's reset)" || { echo "VMM A exited $?"; cat /tmp/a.log; exit 1; }
ls -ls /tmp/snap

t2=$(now)
for vm in b c; do
  /bin/airlock-vmm-kvm --restore /tmp/snap --console /tmp/$vm.log --disk /tmp/disk.img \
    --overlay /tmp/$vm.ovl --cid 3 --vsock 1234=/tmp/$vm.sock &
  eval "pid_$vm=\$!"
done
expect alpha /bin/l1_tool cmd /tmp/b.sock get
t3=$(now)
expect ok /bin/l1_tool cmd /tmp/b.sock "set beta"
expect ok /bin/l1_tool cmd /tmp/b.sock "disk-write disk-beta"
expect alpha /bin/l1_tool cmd /tmp/c.sock get
expect disk-alpha /bin/l1_tool cmd /tmp/c.sock disk-read
expect beta /bin/l1_tool cmd /tmp/b.sock get
expect disk-beta /bin/l1_tool cmd /tmp/b.sock disk-read
expect bye /bin/l1_tool cmd /tmp/b.sock quit
expect bye /bin/l1_tool cmd /tmp/c.sock quit
wait_exit $pid_b "quit (B's reset)" || { echo "VMM B exited $?"; cat /tmp/b.log; exit 1; }
wait_exit $pid_c "quit (C's reset)" || { echo "VMM C exited $?"; cat /tmp/c.log; exit 1; }
cat /tmp/b.log
echo "bench: boot_to_guest_answer_s $(echo "$t1 $t0" | awk '{print $1-$2}')"
echo "bench: restore_to_guest_answer_s $(echo "$t3 $t2" | awk '{print $1-$2}')"
[ ! -e /tmp/b.sock ] && [ ! -e /tmp/c.sock ] && [ ! -e /tmp/a.ctl ] || { echo "sockets left behind"; exit 1; }
echo "snapshot scenario ok"
