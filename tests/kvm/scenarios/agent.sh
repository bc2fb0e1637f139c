# Scenario (runs in L1): the real airlock-agent as the sandbox's PID 1 (exec'd by
# airlock-kvm-init from a template image), reached only through the VMM's agent.sock:
# /health answers, a command runs through process.Process/Start (stdout, exit code), and
# a 300 KiB file makes the round trip through POST and GET /files. Then the VM is stopped
# and leaves no socket behind.
set -e
. /scenario-lib.sh
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
trap 'rc=$?; [ $rc = 0 ] || for f in /tmp/console*.log; do echo "--- $f"; tr -cd "\11\12\15\40-\176" < $f | tail -25; done' EXIT
t0=$(now_ms)
/bin/airlock-vmm-kvm --kernel /airlock/bzImage --mem 256MiB --console /tmp/console.log \
  --disk /airlock/rootfs.img --overlay /tmp/overlay.img --cid 3 --vsock 1024=/tmp/agent.sock \
  --control /tmp/ctl.sock \
  --cmdline "console=ttyS0 reboot=k panic=-1 quiet root=/dev/vda rw init=/.airlock/bin/airlock-kvm-init airlock.hostname=sbx-agent" &
vmm=$!
st=$(/bin/l1_tool http /tmp/agent.sock GET /health | head -1)
t1=$(now_ms)
[ "$st" = "status 204" ] || [ "$st" = "status 200" ] || { echo "FAILED: /health -> $st"; exit 1; }
echo "ok: agent healthy after $((t1 - t0)) ms"
echo "bench-json: {\"bench\":\"kvm\",\"metric\":\"boot_to_agent_healthy_ms\",\"value\":$((t1 - t0)),\"unit\":\"ms\",\"env\":\"tcg-nested\"}"

printf '{"process":{"cmd":"/bin/sh","args":["-c","echo hello-from-kvm; hostname; exit 3"]}}' > /tmp/start.json
/bin/l1_tool http /tmp/agent.sock POST /process.Process/Start /tmp/start.json application/connect+json /tmp/start.out
tr -c '\40-\176' '\n' < /tmp/start.out > /tmp/start.txt
# base64 of "hello-from-kvm\nsbx-agent\n" may arrive in one or two data events: check both lines.
grep -q 'aGVsbG8tZnJvbS1rdm0K' /tmp/start.txt || grep -q 'aGVsbG8tZnJvbS1rdm0Kc2J4LWFnZW50Cg' /tmp/start.txt \
  || { echo "FAILED: no stdout from the command"; cat /tmp/start.txt; exit 1; }
grep -qE '"exitCode": ?3|exit status 3' /tmp/start.txt || { echo "FAILED: exit code 3 not reported"; cat /tmp/start.txt; exit 1; }
echo "ok: command through the agent (stdout, exit code 3)"

dd if=/dev/urandom of=/tmp/up.bin bs=1024 count=300 2>/dev/null
st=$(/bin/l1_tool http /tmp/agent.sock POST '/files?path=/home/user/rt.bin' /tmp/up.bin application/octet-stream /tmp/post.out)
[ "$st" = "status 200" ] || { echo "FAILED: upload -> $st"; cat /tmp/post.out; exit 1; }
st=$(/bin/l1_tool http /tmp/agent.sock GET '/files?path=/home/user/rt.bin' - application/octet-stream /tmp/down.bin)
[ "$st" = "status 200" ] || { echo "FAILED: download -> $st"; exit 1; }
cmp /tmp/up.bin /tmp/down.bin || { echo "FAILED: file differs after the round trip"; exit 1; }
echo "ok: 300 KiB file round trip"

# Template snapshot: taken before any POST /init, so every restored sandbox gets its own
# identity and token afterwards.
snap=$(/bin/l1_tool cmd /tmp/ctl.sock "snapshot /tmp/snap")
case "$snap" in ok*) echo "ok: snapshot $snap" ;; *) echo "FAILED: snapshot: $snap"; exit 1 ;; esac
[ "$(/bin/l1_tool cmd /tmp/ctl.sock stop)" = ok ] || { echo "FAILED: stop"; exit 1; }
wait_exit $vmm stop || { echo "FAILED: VMM exited $?"; exit 1; }
[ ! -e /tmp/agent.sock ] && [ ! -e /tmp/ctl.sock ] || { echo "FAILED: sockets left behind"; exit 1; }

for vm in b c; do
  t0=$(now_ms)
  /bin/airlock-vmm-kvm --restore /tmp/snap --console /tmp/console-$vm.log --disk /airlock/rootfs.img \
    --overlay /tmp/overlay-$vm.img --cid 3 --vsock 1024=/tmp/agent-$vm.sock --control /tmp/ctl-$vm.sock &
  eval "pid_$vm=\$!"
  st=$(/bin/l1_tool http /tmp/agent-$vm.sock GET /health | head -1)
  t1=$(now_ms)
  [ "$st" = "status 204" ] || [ "$st" = "status 200" ] || { echo "FAILED: restored $vm /health -> $st"; exit 1; }
  echo "ok: restored $vm healthy after $((t1 - t0)) ms"
  echo "bench-json: {\"bench\":\"kvm\",\"metric\":\"restore_to_agent_healthy_ms\",\"value\":$((t1 - t0)),\"unit\":\"ms\",\"env\":\"tcg-nested\"}"
  printf '{"accessToken":"token-%s-0123456789","sandboxID":"sbx-%s","hostname":"sbx-%s","envVars":{"SANDBOX":"%s"}}' \
    $vm $vm $vm $vm > /tmp/init-$vm.json
  st=$(/bin/l1_tool http /tmp/agent-$vm.sock POST /init /tmp/init-$vm.json application/json | head -1)
  [ "$st" = "status 204" ] || { echo "FAILED: POST /init on $vm -> $st"; exit 1; }
done
# State from before the snapshot is there in both.
for vm in b c; do
  L1_TOOL_HEADER="X-Access-Token: token-$vm-0123456789" /bin/l1_tool http /tmp/agent-$vm.sock GET \
    '/files?path=/home/user/rt.bin' - application/octet-stream /tmp/down-$vm.bin >/dev/null
  cmp /tmp/up.bin /tmp/down-$vm.bin || { echo "FAILED: $vm lost the file written before the snapshot"; exit 1; }
done
echo "ok: both restored sandboxes have the pre-snapshot file"
# What one restored sandbox writes, the other does not see; each got its own identity and
# token (B's token does not open C).
echo only-in-b > /tmp/b.txt
st=$(L1_TOOL_HEADER="X-Access-Token: token-b-0123456789" /bin/l1_tool http /tmp/agent-b.sock POST \
  '/files?path=/home/user/only-b.txt' /tmp/b.txt application/octet-stream /dev/null)
[ "$st" = "status 200" ] || { echo "FAILED: write in b -> $st"; exit 1; }
st=$(L1_TOOL_HEADER="X-Access-Token: token-c-0123456789" /bin/l1_tool http /tmp/agent-c.sock GET \
  '/files?path=/home/user/only-b.txt' - application/octet-stream /dev/null)
[ "$st" = "status 404" ] || { echo "FAILED: c sees b's file ($st)"; exit 1; }
printf '{"process":{"cmd":"/bin/sh","args":["-c","echo $SANDBOX"]}}' > /tmp/env.json
st=$(L1_TOOL_HEADER="X-Access-Token: token-b-0123456789" /bin/l1_tool http /tmp/agent-c.sock POST \
  /process.Process/Start /tmp/env.json application/connect+json /dev/null)
[ "$st" = "status 401" ] || { echo "FAILED: b's token accepted by c ($st)"; exit 1; }
for vm in b c; do
  L1_TOOL_HEADER="X-Access-Token: token-$vm-0123456789" /bin/l1_tool http /tmp/agent-$vm.sock POST \
    /process.Process/Start /tmp/env.json application/connect+json /tmp/env-$vm.out >/dev/null
done
# base64 of "b\n" is Ygo=, of "c\n" Ywo=
grep -q 'Ygo=' /tmp/env-b.out && grep -q 'Ywo=' /tmp/env-c.out \
  || { echo "FAILED: per-sandbox init not applied"; tr -c '\40-\176' '\n' < /tmp/env-b.out; exit 1; }
echo "ok: restored sandboxes are independent (files, their own init and token)"
for vm in b c; do
  [ "$(/bin/l1_tool cmd /tmp/ctl-$vm.sock stop)" = ok ] || { echo "FAILED: stop $vm"; exit 1; }
done
wait_exit $pid_b stop && wait_exit $pid_c stop || { echo "FAILED: a restored VMM exited non-zero"; exit 1; }
echo "agent scenario ok"
