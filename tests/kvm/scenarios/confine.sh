# Scenario (runs in L1): the Release VMM confines itself after setup: its own cgroup, a
# pivot_root into a jail directory, uid/gid 1000, no capabilities, no_new_privs, a seccomp
# filter on every thread (kill on violation). The guest still boots and echoes over vsock,
# a snapshot is written inside the jail, and the sockets are removed at the end.
set -e
. /scenario-lib.sh
vmm=/bin/airlock-vmm-kvm-release
[ -x "$vmm" ] || { echo "no Release build of airlock-vmm-kvm (tests/run builds build/ first)"; exit 1; }
mount -t cgroup2 cg /sys/fs/cgroup
mkdir /sys/fs/cgroup/al-vm
mkdir -p /tmp/jail
chown 1000:1000 /tmp/jail
$vmm --kernel /airlock/bzImage --initrd /airlock/guest.cpio.gz --mem 128MiB \
  --console /tmp/console.log --cid 3 --vsock 1234=/tmp/jail/agent.sock --control /tmp/jail/ctl.sock \
  --jail /tmp/jail --uid 1000 --gid 1000 --cgroup /sys/fs/cgroup/al-vm --seccomp \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet airlock.test=boot,vsock" &
pid=$!
trap 'dmesg | grep -iE "audit|seccomp|segfault" | tail -20' EXIT
fail=0
/bin/l1_tool echo /tmp/jail/agent.sock 100 || { echo "FAILED: first echo"; fail=1; }
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi; }
st=/proc/$pid/status
check "uid 1000" "grep -q '^Uid:[[:space:]]*1000[[:space:]]*1000[[:space:]]*1000' $st"
check "gid 1000" "grep -q '^Gid:[[:space:]]*1000[[:space:]]*1000[[:space:]]*1000' $st"
check "no effective caps" "grep -q '^CapEff:[[:space:]]*0000000000000000' $st"
check "no permitted caps" "grep -q '^CapPrm:[[:space:]]*0000000000000000' $st"
check "empty bounding set" "grep -q '^CapBnd:[[:space:]]*0000000000000000' $st"
check "no_new_privs" "grep -q '^NoNewPrivs:[[:space:]]*1' $st"
check "own cgroup" "grep -q '^0::/al-vm$' /proc/$pid/cgroup"
n=0; for t in /proc/$pid/task/*; do
  n=$((n+1))
  grep -q '^Seccomp:[[:space:]]*2' $t/status || { echo "thread $(cat $t/comm) has no filter"; fail=1; }
done
check "every thread filtered ($n threads)" "[ $n -ge 3 ]"
check "host files out of reach" "[ ! -e /proc/$pid/root/bin/busybox ]"
snap=$(/bin/l1_tool cmd /tmp/jail/ctl.sock "snapshot /snap")
echo "snapshot: $snap"
check "snapshot inside the jail" "[ -f /tmp/jail/snap/vm.state ] && [ -f /tmp/jail/snap/memory ]"
/bin/l1_tool echo /tmp/jail/agent.sock 65536 || { echo "FAILED: second echo"; fail=1; }
rc=0
wait_exit $pid "the guest's checks and reset" 900 || rc=$?
cat /tmp/console.log
check "VMM exited 0 (no seccomp kill)" "[ $rc = 0 ]"
check "guest checks passed" "grep -q '^AIRLOCK-GUEST: done 2/2' /tmp/console.log"
check "sockets removed" "[ ! -e /tmp/jail/agent.sock ] && [ ! -e /tmp/jail/ctl.sock ]"
[ "$fail" = 0 ]
