#!/usr/bin/env bash
# tests/integration/jail_lifecycle.sh: a jail sandbox starts with the agent as PID 1 under the
# documented contract (fds, init data, capabilities, no_new_privs, seccomp, mounts, ids),
# stops cleanly with nothing left (files, cgroups, id slot, processes, network namespace,
# mounts), and every failure path (bad template, agent that dies, agent that never answers,
# duplicate id) cleans up after itself and says why.
. "$(dirname "$0")/jail_lib.sh"

make_busybox_template "$T/bb"
echo "agent: $AGENT_KIND"

# --- start ------------------------------------------------------------------------------
jail_start life "$T/bb"
apid=$(jail_agent_pid life)
huid=$(jail_host_uid life)
netino=$(jail_netns_inode "$apid")
[ "$netino" != "$(jail_netns_inode $$)" ] || fail "the sandbox shares the host's network namespace"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["startup_ms"] > 0 and d["timing"]["total_us"] > 0' \
  "$T/ready-life" || fail "the ready line lacks timings"
ok "started in $(jail_ready_field life startup_ms) ms (agent pid $apid, host uid $huid)"

# The agent's side of the contract, seen from the host.
st=/proc/$apid/status
grep -q '^NoNewPrivs:[[:space:]]*1' "$st" || fail "the agent has no no_new_privs"
grep -q '^Seccomp:[[:space:]]*2' "$st" || fail "the agent runs without a seccomp filter"
# CHOWN DAC_OVERRIDE FOWNER KILL SETGID SETUID SETPCAP = 0x1eb, nothing else.
grep -q '^CapBnd:[[:space:]]*00000000000001eb' "$st" || fail "agent bounding set: $(grep CapBnd "$st")"
grep -q '^CapEff:[[:space:]]*00000000000001eb' "$st" || fail "agent effective set: $(grep CapEff "$st")"
grep -q '^CapInh:[[:space:]]*0000000000000000' "$st" || fail "agent inheritable set: $(grep CapInh "$st")"
awk '/^Uid:/ {exit !($2 == '"$huid"')}' "$st" || fail "the agent is not host uid $huid"
[ "$(cat /proc/$apid/uid_map | awk '{print $1, $2, $3}')" = "0 $huid 65536" ] ||
  fail "uid_map: $(cat /proc/$apid/uid_map)"
[ "$(readlink /proc/$apid/exe)" = "/.airlock/bin/airlock-agent" ] ||
  fail "PID 1 of the sandbox is $(readlink /proc/$apid/exe)"
# Descriptors: 0 /dev/null, 1+2 the log pipe, 3 the listening socket; nothing of the host.
fds=$(ls -l /proc/$apid/fd | awk 'NR > 1 {print $NF}')
grep -q "$STATE" <<<"$fds" && fail "the agent holds a host file: $fds"
grep -Eq 'vmm.lock|vmm.json|idslots' <<<"$fds" && fail "the agent holds airlock-vmm's files: $fds"
[ "$(readlink /proc/$apid/fd/0)" = /dev/null ] || fail "fd 0 is $(readlink /proc/$apid/fd/0)"
readlink /proc/$apid/fd/2 | grep -q '^pipe:' || fail "fd 2 is not the log pipe"
# Inside: PID 1, ids, no capabilities for user processes, the masked /proc, /sys, /dev.
out=$(jail_exec life user 'id -u; id -g; echo pid1=$(cat /proc/1/comm); grep -E "^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):" /proc/self/status; hostname') ||
  fail "exec as user failed: $out"
grep -qx 1000 <<<"$out" || fail "user is not uid 1000: $out"
grep -q 'pid1=airlock-agent' <<<"$out" || fail "PID 1 is not the agent: $out"
grep -q 'CapEff:[[:space:]]*0000000000000000' <<<"$out" || fail "user process has capabilities: $out"
grep -q 'CapBnd:[[:space:]]*0000000000000000' <<<"$out" || fail "user process bounding set not empty: $out"
grep -q 'NoNewPrivs:[[:space:]]*1' <<<"$out" || fail "user process without no_new_privs: $out"
grep -qx life <<<"$out" || fail "hostname: $out"
out=$(jail_exec life user 'cat /etc/hostname; stat -c "%a %u" /etc/hostname /etc/hosts') || fail "exec failed: $out"
[ "$out" = "$(printf 'life\n644 0\n644 0')" ] || fail "/etc/hostname and /etc/hosts (want life, 0644 root): $out"
# The files went into the upper layer before the overlay: the merged /etc is still the
# template's (its mode, owner and other files), and the template itself is unchanged.
out=$(jail_exec life user 'stat -c "%a %u %g" /etc; grep -c "^root:" /etc/passwd') || fail "exec failed: $out"
[ "$out" = "$(printf '%s\n1' "$(stat -c '%a 0 0' "$T/bb/rootfs/etc")")" ] ||
  fail "the merged /etc lost the template's mode, owner or files: $out"
[ "$(cat "$T/bb/rootfs/etc/hostname" 2>/dev/null)" != life ] || fail "the template's /etc/hostname was written"
out=$(jail_exec life root 'id -u; grep CapEff /proc/self/status') || fail "exec as root failed: $out"
grep -qx 0 <<<"$out" || fail "root is not uid 0: $out"
grep -q 'CapEff:[[:space:]]*0000000000000000' <<<"$out" || fail "root in the sandbox has capabilities: $out"
# Root of an ordinary sandbox owns what root owns, nothing of another user's.
out=$(jail_exec life root 'touch /tmp/r; chown 1000:1000 /tmp/r && echo CHOWNED; echo x > /home/user/by-root && echo WROTE; stat -c "%u" /tmp/r; grep CapBnd /proc/self/status') || true
grep -q 'CHOWNED\|WROTE' <<<"$out" && fail "root of an ordinary sandbox changed another user's files: $out"
grep -qx 0 <<<"$out" || fail "root's file changed owner: $out"
grep -q 'CapBnd:[[:space:]]*0000000000000000' <<<"$out" || fail "root's bounding set is not empty: $out"
ok "agent and user processes run under the contract (root cannot chown or write another user's files)"

# A build sandbox (spec.jail.build, a template build's RUN step): the agent also holds
# CAP_FSETID, root's processes keep what a package manager needs (CHOWN DAC_OVERRIDE FOWNER
# FSETID KILL SETGID SETUID = 0xfb) in the sandbox's user namespace, another user's none.
if [ "$AGENT_KIND" = airlock-agent ]; then
  JAIL_OPTS=',"build":true' jail_start build "$T/bb"
  bst=/proc/$(jail_agent_pid build)/status
  grep -q '^CapBnd:[[:space:]]*00000000000001fb' "$bst" || fail "build agent bounding set: $(grep CapBnd "$bst")"
  grep -q '^NoNewPrivs:[[:space:]]*1' "$bst" || fail "the build agent has no no_new_privs"
  grep -q -- '--build-sandbox' "/proc/$(jail_agent_pid build)/cmdline" || fail "the agent was not told it is a build sandbox"
  out=$(jail_exec build root 'grep -E "^(CapEff|CapPrm|CapBnd|CapInh|CapAmb|NoNewPrivs):" /proc/self/status; touch /tmp/r && chown 1000:1000 /tmp/r && stat -c "owner %u:%g" /tmp/r; echo x > /home/user/by-root && stat -c "wrote %u" /home/user/by-root') ||
    fail "root's commands in a build sandbox failed: $out"
  for want in 'CapEff:[[:space:]]*00000000000000fb' 'CapPrm:[[:space:]]*00000000000000fb' \
    'CapBnd:[[:space:]]*00000000000000fb' 'CapInh:[[:space:]]*0000000000000000' \
    'CapAmb:[[:space:]]*0000000000000000' 'NoNewPrivs:[[:space:]]*1' '^owner 1000:1000$' '^wrote 0$'; do
    grep -q "$want" <<<"$out" || fail "build sandbox root: want $want: $out"
  done
  out=$(jail_exec build user 'grep -E "^(CapEff|CapBnd):" /proc/self/status; chown 0:0 /home/user/by-root 2>&1 && echo CHOWNED') || true
  grep -q CHOWNED <<<"$out" && fail "a user process of a build sandbox chowned a file: $out"
  grep -q 'CapEff:[[:space:]]*0000000000000000' <<<"$out" || fail "a user process of a build sandbox has capabilities: $out"
  grep -q 'CapBnd:[[:space:]]*0000000000000000' <<<"$out" || fail "a user process of a build sandbox has a bounding set: $out"
  jail_stop build
  ok "a build sandbox: root keeps chown, dac_override, fowner, fsetid, kill, setgid, setuid; users get nothing"
fi

out=$(jail_exec life user 'cat /proc/self/mountinfo; ls -A /dev; ls -A /sys | wc -l; stat -c "%u %g" /home/user /etc/passwd')
grep -q ' / rw,nosuid,nodev.* - overlay ' <<<"$out" || fail "/ is not a nosuid overlay: $out"
grep -q ' /sys ro,' <<<"$out" || fail "/sys is not read-only: $out"
grep -q ' /proc/sys ro,' <<<"$out" || fail "/proc/sys is not read-only: $out"
grep -q ' /.airlock ro,nosuid,nodev' <<<"$out" || fail "/.airlock is not read-only: $out"
grep -q ' /dev/pts .* - devpts ' <<<"$out" || fail "no devpts instance: $out"
grep -q ' /tmp rw,nosuid,nodev' <<<"$out" || fail "/tmp is not nosuid,nodev: $out"
for n in null zero full random urandom tty pts ptmx shm fd stdin stdout stderr; do
  grep -qx "$n" <<<"$out" || fail "/dev/$n missing: $out"
done
[ "$(grep -cxE 'null|zero|full|random|urandom|tty|pts|ptmx|shm|fd|stdin|stdout|stderr' <<<"$out")" = 13 ] ||
  fail "unexpected /dev content: $out"
grep -qx '1000 1000' <<<"$out" || fail "/home/user is not owned by user (id mapping): $out"
grep -qx '0 0' <<<"$out" || fail "/etc/passwd is not owned by root (id mapping): $out"
ok "root file system: overlay, /proc masked, /sys read-only, minimal /dev, id-mapped template"

# The init data reached the agent: env vars are set for commands, the token is enforced.
if [ "$AGENT_KIND" = testinit ]; then
  init=$(curl -s --unix-socket "$(jail_sock life)" http://x/init)
  for k in '"sandboxID":"life"' '"templateID":"busybox"' '"hostname":"life"' \
           "\"accessToken\":\"$TOKEN\"" '"defaultUser":"user"' '"defaultWorkdir":"/home/user"' \
           "\"AL_TEST\":\"$JAIL_TEST\""; do
    grep -qF "$k" <<<"$init" || fail "init data lacks $k: $init"
  done
else
  out=$(jail_exec life user 'echo "AL_TEST=$AL_TEST"; pwd')
  grep -qx "AL_TEST=$JAIL_TEST" <<<"$out" || fail "envVars did not reach commands: $out"
  grep -qx /home/user <<<"$out" || fail "defaultWorkdir not used: $out"
  code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$(jail_sock life)" \
    -H 'Content-Type: application/json' -H 'Connect-Protocol-Version: 1' \
    --data '{"path":"/"}' http://x/filesystem.Filesystem/Stat)
  [ "$code" = 401 ] || fail "the agent accepted a request without the access token ($code)"
fi
ok "init data delivered ($AGENT_KIND)"

if jail_has_api life; then
  s=$(jail_api life GET /status) || fail "GET /status: $s"
  grep -q '"state":"running"' <<<"$s" || fail "status: $s"
  grep -q "\"agent_pid\":$apid" <<<"$s" || fail "status: $s"
  s=$(jail_api life GET /stats) || fail "GET /stats: $s"
  for k in memory_bytes memory_limit_bytes pids pids_limit cpu_usage_ns disk_used_bytes; do
    grep -q "\"$k\":" <<<"$s" || fail "stats lack $k: $s"
  done
  jail_api life GET /nope >/dev/null && fail "an unknown endpoint answered 2xx"
  jail_api life GET /stop >/dev/null && fail "GET /stop answered 2xx"
  ok "API: status and stats"
fi

# A second airlock-vmm for the same id is refused (and does not disturb the first).
rc=0
"$VMM" --state-dir "$STATE" --spec "$T/spec-life.json" 2>"$T/dup.err" || rc=$?
[ "$rc" = 1 ] || fail "a duplicate id started (exit $rc)"
grep -q 'already runs' "$T/dup.err" || fail "duplicate id: $(cat "$T/dup.err")"
jail_exec life user true || fail "the sandbox is hurt by the duplicate attempt"
"$VMM" --state-dir "$STATE" --cleanup life 2>"$T/cl.err" && fail "--cleanup of a live sandbox succeeded"
grep -q 'is running' "$T/cl.err" || fail "--cleanup of a live sandbox: $(cat "$T/cl.err")"
ok "duplicate id and --cleanup of a live sandbox are refused"

# --- stop ----------------------------------------------------------------------------------
jail_exec life user 'sleep 600 >/dev/null 2>&1 & sleep 600 >/dev/null 2>&1 & echo bg' >/dev/null
# A spec bind at or under /etc: the files are written through the overlay after the mounts
# (the other path), with the same result.
mkdir -p "$T/etcbind" && echo probe > "$T/etcbind/probe"
jail_start etcb "$T/bb" ',"hostname":"etcb","binds":[{"source":"'"$T/etcbind"'","target":"/etc/airlock-probe"}]'
out=$(jail_exec etcb user 'cat /etc/hostname /etc/airlock-probe/probe; stat -c "%a %u" /etc/hosts') || fail "exec failed: $out"
[ "$out" = "$(printf 'etcb\nprobe\n644 0')" ] || fail "with a bind under /etc: $out"
jail_stop etcb
ok "/etc/hostname, /etc/hosts: written before the overlay, or after the mounts with a bind under /etc"

jail_stop life
jail_assert_gone life "$huid" "$apid" "$netino"
ok "stopped with background processes; nothing left"

# --- failures clean up after themselves ------------------------------------------------------
rc=0
"$VMM" --state-dir "$STATE" --spec - --ready-fd 3 3>"$T/ready-bad" 2>"$T/bad.err" <<EOF || rc=$?
$(jail_spec badtpl "$T/no-such-template")
EOF
[ "$rc" = 1 ] || fail "a missing template gave exit $rc"
grep -q '"ready":false' "$T/ready-bad" && grep -q 'no-such-template' "$T/ready-bad" ||
  fail "ready line for a missing template: $(cat "$T/ready-bad")"
[ ! -e "$STATE/sandboxes/badtpl" ] || fail "a failed start left its directory"
ok "missing template: exit 1, reason on the ready fd, nothing left"

rc=0
"$VMM" --state-dir "$STATE" --spec - 2>"$T/bad.err" <<<'{"id":"x","template":"b","resources":{"memory_mib":"lots"}}' || rc=$?
[ "$rc" = 1 ] && grep -q 'memory_mib' "$T/bad.err" || fail "bad spec: exit $rc: $(cat "$T/bad.err")"
ok "invalid spec: exit 1 with the field named"

# A bind's source must be a directory (the sandbox sees it as an overlay, which a file
# cannot be): refused before anything is made, saying why.
echo probe > "$T/filebind"
rc=0
"$VMM" --state-dir "$STATE" --spec - --ready-fd 3 3>"$T/ready-fb" 2>"$T/fb.err" <<EOF || rc=$?
$(jail_spec filebind "$T/bb" ',"binds":[{"source":"'"$T/filebind"'","target":"/opt/f"}]')
EOF
[ "$rc" = 1 ] && grep -q 'spec.binds\[0\]: source .*/filebind is not a directory' "$T/ready-fb" ||
  fail "a file as a bind's source: exit $rc: $(cat "$T/ready-fb" "$T/fb.err")"
[ ! -e "$STATE/sandboxes/filebind" ] || fail "a refused bind left the sandbox's directory"
ok "a file as a bind's source: refused, saying why, nothing left"

# The agent dies on its own: airlock-vmm reclaims everything and exits 3.
jail_start crash "$T/bb"
apid=$(jail_agent_pid crash)
huid=$(jail_host_uid crash)
netino=$(jail_netns_inode "$apid")
kill -KILL "$apid"
rc=0
wait "${VMM_PID[crash]}" || rc=$?
unset "VMM_PID[crash]"
[ "$rc" = 3 ] || fail "after the agent died airlock-vmm exited $rc, not 3"
jail_assert_gone crash "$huid" "$apid" "$netino"
ok "agent died: exit 3, nothing left"

# An agent that never answers /health: exit 4 after the start timeout, nothing left.
mkdir -p "$T/deadagent/bin"
printf '#!/bin/sh\nexec sleep 600\n' > "$T/deadagent/bin/airlock-agent"
chmod 0755 "$T/deadagent/bin/airlock-agent" "$T/deadagent" "$T/deadagent/bin"
sed -e "s|\"dir\":\"$AGENT_DIR\",\"start_timeout_ms\":15000|\"dir\":\"$T/deadagent\",\"start_timeout_ms\":800|" \
  <(jail_spec mute "$T/bb") > "$T/spec-mute.json"
rc=0
"$VMM" --state-dir "$STATE" --spec "$T/spec-mute.json" --ready-fd 3 3>"$T/ready-mute" 2>"$T/mute.err" || rc=$?
[ "$rc" = 4 ] || fail "a mute agent gave exit $rc: $(cat "$T/mute.err")"
grep -q 'did not answer GET /health' "$T/ready-mute" || fail "mute agent: $(cat "$T/ready-mute")"
[ ! -e "$STATE/sandboxes/mute" ] || fail "the mute agent's sandbox left its directory"
ls /sys/fs/cgroup/pids/"$CGP"/mute >/dev/null 2>&1 && fail "the mute agent's cgroup is left"
ok "agent never healthy: exit 4 after the timeout, nothing left"

# --- warm start: cgroups made and joined before the spec, renamed, left after ready ---------
mkfifo "$T/warm-in"
"$VMM" --state-dir "$STATE" --warm --cgroup-parent "$CGP" --spec - --ready-fd 3 \
  <"$T/warm-in" 3>"$T/ready-warm" 2>>"$T/vmm-warm.log" >/dev/null &
wpid=$!
VMM_PID[warm]=$wpid
exec 7>"$T/warm-in"
al_wait_until 120 grep -q '"warm":true' "$T/ready-warm" || true
grep -q "\"warm\":true,\"vmm_pid\":$wpid" "$T/ready-warm" || fail "no warm line: $(cat "$T/ready-warm")"
grep -q "/$CGP/warm-$wpid\$" "/proc/$wpid/cgroup" || fail "the warm airlock-vmm is not in its cgroups: $(cat /proc/$wpid/cgroup)"
# The warm cgroups carry the expected limits (the spec's defaults here) before any spec.
cgv1=/sys/fs/cgroup/memory/$CGP
if [ -d "$cgv1/warm-$wpid" ]; then
  [ "$(cat "$cgv1/warm-$wpid/memory.limit_in_bytes")" = $((512 << 20)) ] ||
    fail "warm memory limit: $(cat "$cgv1/warm-$wpid/memory.limit_in_bytes")"
  [ "$(cat /sys/fs/cgroup/pids/$CGP/warm-$wpid/pids.max)" = 1024 ] || fail "warm pids.max"
fi
jail_spec warm "$T/bb" >&7
exec 7>&-
al_wait_until 120 grep -q '"ready"' "$T/ready-warm" || true
grep -q '"ready":true' "$T/ready-warm" || fail "warm start failed: $(cat "$T/ready-warm")"
ls -d /sys/fs/cgroup/*/"$CGP/warm-$wpid" 2>/dev/null | grep -q . && fail "the warm cgroups were not renamed"
apid=$(python3 -c 'import json,sys; [print(json.loads(l)["agent_pid"]) for l in open(sys.argv[1]) if "ready" in l]' "$T/ready-warm")
grep -q "/$CGP/warm\$" "/proc/$apid/cgroup" || fail "the agent is not in the sandbox's cgroups: $(cat /proc/$apid/cgroup)"
# The spec asked for other limits than the warm process expected: they were rewritten.
if [ -d "$cgv1/warm" ]; then
  [ "$(cat "$cgv1/warm/memory.limit_in_bytes")" = $((256 << 20)) ] ||
    fail "the spec's memory limit was not applied: $(cat "$cgv1/warm/memory.limit_in_bytes")"
  [ "$(cat /sys/fs/cgroup/pids/$CGP/warm/pids.max)" = 256 ] || fail "the spec's pids.max was not applied"
  [ "$(cat /sys/fs/cgroup/cpu/$CGP/warm/cpu.cfs_quota_us)" = 100000 ] || fail "the spec's CPU quota was not applied"
fi
al_wait_until 60 eval '! grep -q "/$CGP/" "/proc/$wpid/cgroup"' || true
grep -q "/$CGP/" "/proc/$wpid/cgroup" && fail "airlock-vmm stayed in the sandbox's cgroups: $(cat /proc/$wpid/cgroup)"
huid=$(jail_host_uid warm)
netino=$(jail_netns_inode "$apid")
grep -qx warm-ok <<<"$(jail_exec warm user 'echo warm-ok')" || fail "the warm-started sandbox does not work"
jail_stop warm
jail_assert_gone warm "$huid" "$apid" "$netino"
ok "warm start: joined its cgroups before the spec, renamed them, left them after ready"

# A warm airlock-vmm released unused (stdin closed) exits 0 and removes its cgroups; one
# that is SIGKILLed leaves them to the sweep.
"$VMM" --state-dir "$STATE" --warm --cgroup-parent "$CGP" --spec - --ready-fd 3 \
  </dev/null 3>"$T/ready-w2" 2>>"$T/vmm-w2.log" >/dev/null || fail "an unused warm airlock-vmm exited $?"
ls -d /sys/fs/cgroup/*/"$CGP"/warm-* 2>/dev/null | grep -q . && fail "an unused warm airlock-vmm left its cgroups"
mkfifo "$T/w3-in"
"$VMM" --state-dir "$STATE" --warm --cgroup-parent "$CGP" --spec - --ready-fd 3 \
  <"$T/w3-in" 3>"$T/ready-w3" 2>>"$T/vmm-w3.log" >/dev/null &
VMM_PID[w3]=$!
exec 8>"$T/w3-in"
al_wait_until 120 grep -q '"warm":true' "$T/ready-w3" || true
w3=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["vmm_pid"])' "$T/ready-w3")
"$VMM" --state-dir "$STATE" --sweep --cgroup-parent "$CGP" >/dev/null || fail "sweep with a live warm process failed"
ls -d /sys/fs/cgroup/*/"$CGP/warm-$w3" 2>/dev/null | grep -q . || fail "the sweep removed a live warm process's cgroups"
kill -KILL "$w3"
wait "$w3" 2>/dev/null || true
unset "VMM_PID[w3]"
exec 8>&-
"$VMM" --state-dir "$STATE" --sweep --cgroup-parent "$CGP" >/dev/null || fail "sweep failed"
ls -d /sys/fs/cgroup/*/"$CGP/warm-$w3" 2>/dev/null | grep -q . && fail "the sweep left a dead warm process's cgroups"
ok "warm processes: released unused cleanly; the sweep spares live ones and reclaims dead ones"

echo "PASS: $JAIL_TEST"
