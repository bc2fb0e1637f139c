# Scenario (runs in L1): the KVM guest's network is a tap attached by the airlock vswitch,
# exactly as the control plane will do it (vswitch_tap_create, the guest MAC and address the
# switch assigned). A TCP connection the guest opens to 192.0.2.1:7777 (nobody listens
# there) is handed by the switch to the stand-in proxy, which sees the original destination
# and identifies the sandbox. Then the guest resets and the switch is torn down.
set -e
. /scenario-lib.sh
depmod -a 2>/dev/null || busybox depmod
modprobe nf_tables
modprobe sch_ingress
modprobe cls_bpf
mkdir -p /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf
trap 'rc=$?; [ $rc = 0 ] || { echo "--- console"; tr -cd "\11\12\15\40-\176" < /tmp/console.log | tail -30; }' EXIT
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
/bin/l1-vswitch /tmp/vs-state /tmp/proxy.log -- /bin/airlock-vmm-kvm --kernel /airlock/bzImage \
  --mem 128MiB --console /tmp/console.log --disk /airlock/rootfs.img --overlay /tmp/overlay.img \
  --cid 3 --vsock 1024=/tmp/agent.sock \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet root=/dev/vda rw init=/.airlock/bin/airlock-kvm-init" &
pid=$!
got=$(/bin/l1_tool cmd /tmp/agent.sock net) || true
echo "guest net: $got"
[ "$got" = ok ] || { echo "FAILED: the guest's TCP connection did not complete (the agent stand-in's 'net')"; exit 1; }
cat /tmp/proxy.log
grep -qE '^TCP ORIG 192\.0\.2\.1:7777 PEER 10\.200\.0\.2:[0-9]+ SANDBOX 1 kvm-test$' /tmp/proxy.log \
  || { echo "FAILED: the proxy did not see the guest's connection with its original destination"; exit 1; }
[ "$(/bin/l1_tool cmd /tmp/agent.sock quit)" = bye ] || { echo "FAILED: quit"; exit 1; }
wait_exit $pid "quit (the guest's reset)" || { echo "FAILED: l1-vswitch/VMM exited $?"; exit 1; }
ip link | grep -q alsb && { echo "FAILED: a sandbox interface was left behind"; exit 1; }
echo "vswitch scenario ok"
