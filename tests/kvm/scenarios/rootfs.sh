# Scenario (runs in L1): a sandbox as production boots it: no initramfs; the root is an
# ext4 image built by vmm/kvm/mkrootfs from a template directory (read-only base, the VM's
# writes in its overlay), PID 1 is airlock-kvm-init, which mounts the kernel file systems,
# sets the hostname, configures eth0 and the default route from the command line, listens
# on the agent's vsock port and execs the agent (here the test payload standing in for it).
set -e
. /scenario-lib.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
expect() { want=$1; shift; got=$("$@") || { echo "FAILED: $*"; return 1; }
  [ "$got" = "$want" ] || { echo "FAILED: $* -> '$got', wanted '$want'"; return 1; }; echo "ok: $* -> $got"; }
base_sum=$(md5sum /airlock/rootfs.img | cut -d' ' -f1)
tunctl -t tap0 >/dev/null
ip addr add 192.0.2.1/24 dev tap0
ip link set tap0 up
nc -l -p 7777 > /tmp/net.txt &
nc_pid=$!
trap 'rc=$?; [ $rc = 0 ] || { echo "--- console"; tr -cd "\11\12\15\40-\176" < /tmp/console.log | tail -30; }' EXIT
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --mem 128MiB --console /tmp/console.log \
  --disk /airlock/rootfs.img --overlay /tmp/overlay.img --tap tap0 --cid 3 \
  --vsock 1024=/tmp/agent.sock \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet root=/dev/vda rw init=/.airlock/bin/airlock-kvm-init airlock.hostname=sbx-test airlock.ip=192.0.2.2/24 airlock.gw=192.0.2.1 airlock.dns=192.0.2.53" &
vmm=$!
expect unset /bin/l1_tool cmd /tmp/agent.sock get
expect 1 /bin/l1_tool cmd /tmp/agent.sock pid
expect sbx-test /bin/l1_tool cmd /tmp/agent.sock hostname
expect ok /bin/l1_tool cmd /tmp/agent.sock net
expect ok /bin/l1_tool cmd /tmp/agent.sock "disk-write x"
expect bye /bin/l1_tool cmd /tmp/agent.sock quit
wait_exit $vmm "quit (the guest's reset)" || { echo "FAILED: VMM exited $?"; exit 1; }
kill $nc_pid 2>/dev/null || true
grep -q hello-from-the-agent /tmp/net.txt || { echo "FAILED: no TCP from the guest"; exit 1; }
[ "$(md5sum /airlock/rootfs.img | cut -d' ' -f1)" = "$base_sum" ] || { echo "FAILED: base image modified"; exit 1; }
[ -s /tmp/overlay.img ] || { echo "FAILED: no overlay"; exit 1; }
echo "rootfs scenario ok"
