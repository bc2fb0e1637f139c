# Scenario (runs in L1): the real airlock-agent as the sandbox's PID 1 (exec'd by
# airlock-kvm-init from a template image), reached only through the VMM's agent.sock:
# /health answers, a command runs through process.Process/Start (stdout, exit code), and
# a 300 KiB file makes the round trip through POST and GET /files. Then the VM is stopped
# and leaves no socket behind.
set -e
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
now_ms() { awk '{printf "%d", $1 * 1000}' /proc/uptime; }
trap 'rc=$?; [ $rc = 0 ] || { echo "--- console"; tr -cd "\11\12\15\40-\176" < /tmp/console.log | tail -40; }' EXIT
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

[ "$(/bin/l1_tool cmd /tmp/ctl.sock stop)" = ok ] || { echo "FAILED: stop"; exit 1; }
wait $vmm || { echo "FAILED: VMM exited $?"; exit 1; }
[ ! -e /tmp/agent.sock ] && [ ! -e /tmp/ctl.sock ] || { echo "FAILED: sockets left behind"; exit 1; }
echo "agent scenario ok"
