#!/usr/bin/env bash
# tests/integration/jail_hostile.sh: hostile workloads in a jail sandbox, each contained,
# with the host and a neighbour sandbox unaffected.
#
# Workloads (each in a fresh sandbox "A", stopped and checked for leftovers afterwards):
# fork bomb, memory bomb, disk fill, CPU spin, stdout flood (and an agent log flood),
# writing /proc/sys and /sys, mount, ptrace of host processes, reading host files and the
# neighbour's files, device nodes, loading modules, raw sockets, setuid binaries, TIOCSTI,
# `unshare -U` to regain capabilities, escaping through /proc/self/exe or leaked fds; the
# same probes as root through the template's sudo (the agent's, not setuid), whose processes
# have exactly what the API's root processes have.
# The probes are tests/integration/jail_probes/probes.py, bound read-only at /opt/probes.
# Runs on the Debian "base" template (built by deploy/templates/build, cached).
. "$(dirname "$0")/jail_lib.sh"

ensure_template base
TPL=$STATE/templates/base
PROBES=',"binds":[{"source":"'"$AIRLOCK_SOURCE_DIR"'/tests/integration/jail_probes","target":"/opt/probes"}]'
export AL_HOST_MARKER=host-secret-$$
echo "agent: $AGENT_KIND"

# The neighbour runs through the whole test.
jail_start nb "$TPL" "$PROBES"
jail_exec nb user "echo neighbour-secret-$$ > /tmp/neighbour-secret-$$; echo x > /home/user/nb-$$" ||
  fail "neighbour setup"
nb_uid=$(jail_host_uid nb)

# (It must answer, within jail_exec's generous bound: how fast it answers on a machine
# loaded by others is not this test's to judge.)
neighbour_ok() {
  local out
  out=$(jail_exec nb user "cat /tmp/neighbour-secret-$$") ||
    fail "the neighbour sandbox stopped working during: $1"
  [ "$out" = "neighbour-secret-$$" ] || fail "the neighbour's files changed during $1: $out"
  /bin/true || fail "the host cannot run a process during $1"
}

# cg ID CONTROLLER FILE: a cgroup file of sandbox ID (v1 or v2 layout).
cg() {
  if [ -d "/sys/fs/cgroup/$2/$CGP/$1" ]; then echo "/sys/fs/cgroup/$2/$CGP/$1/$3"
  else echo "/sys/fs/cgroup/$CGP/$1/$3"; fi
}

# start_a NAME: a fresh attacker sandbox; stop_a NAME: stop it and check nothing is left.
start_a() {
  jail_start "$1" "$TPL" "$PROBES"
  A_PID=$(jail_agent_pid "$1")
  A_UID=$(jail_host_uid "$1")
  A_NET=$(jail_netns_inode "$A_PID")
  [ "$A_UID" != "$nb_uid" ] || fail "$1 and the neighbour share host ids"
  [ $((A_UID - nb_uid)) -ge 65536 ] || [ $((nb_uid - A_UID)) -ge 65536 ] ||
    fail "the host id ranges of $1 and the neighbour overlap"
}
stop_a() {
  jail_stop "$1"
  jail_assert_gone "$1" "$A_UID" "$A_PID" "$A_NET"
}

probe() { # probe ID USER NAMES...: runs probes, fails on ESCAPED/BROKEN; USER "sudo" is
  # the user becoming root with sudo
  local id=$1 user=$2 out rc=0
  shift 2
  if [ "$user" = sudo ]; then
    out=$(jail_exec "$id" user "sudo HOST_PID=$$ python3 /opt/probes/probes.py $*") || rc=$?
  else
    out=$(jail_exec "$id" "$user" "HOST_PID=$$ python3 /opt/probes/probes.py $*") || rc=$?
  fi
  echo "$out" | sed "s/^/    [$user] /"
  grep -q '^BLOCKED' <<<"$out" || fail "probes $* as $user printed nothing blocked"
  [ "$rc" = 0 ] || fail "probes $* as $user: containment failure (exit $rc)"
}

# --- kernel interfaces, as the user and as root of the sandbox --------------------------
start_a a-kernel
for u in user root sudo; do
  probe a-kernel "$u" mount unshare ptrace raw tiocsti modules kernel devices fds exe
done
# Root through sudo is the API's root: the same capabilities (none), no_new_privs, seccomp
# filter, namespaces and cgroup; sudo is refused to a user outside the group "sudo".
self='grep -E "^(Cap|NoNewPrivs|Seccomp)" /proc/self/status; for n in user pid net mnt ipc uts cgroup; do readlink /proc/self/ns/$n; done; cat /proc/self/cgroup; id -u'
as_api=$(jail_exec a-kernel root "$self") || fail "root's view of itself"
as_sudo=$(jail_exec a-kernel user "sudo sh -c '$self'") || fail "sudo's view of itself"
[ "$as_api" = "$as_sudo" ] ||
  fail "a process of sudo differs from the API's root: $(diff <(echo "$as_api") <(echo "$as_sudo"))"
grep -q '^CapBnd:	0000000000000000$' <<<"$as_sudo" && grep -q '^NoNewPrivs:	1$' <<<"$as_sudo" &&
  grep -q '^Seccomp:	2$' <<<"$as_sudo" && [ "$(tail -1 <<<"$as_sudo")" = 0 ] ||
  fail "sudo's process: $as_sudo"
out=$(jail_exec a-kernel nobody 'sudo id -u 2>&1; echo rc=$?') || true
grep -q 'nobody is not allowed' <<<"$out" && grep -q 'rc=1' <<<"$out" || fail "sudo as nobody: $out"
# The host's values are untouched by the attempts.
[ "$(cat /proc/sys/kernel/hostname)" = "$(hostname)" ] || fail "the host's hostname changed"
neighbour_ok "kernel probes"
stop_a a-kernel
ok "mount, unshare -U, ptrace, raw sockets, TIOCSTI, modules, /proc/sys, /sys, devices, fds, /proc/self/exe: blocked as user, root and root through sudo; sudo's root is the API's root"

# --- what the sandbox learns about the host from /proc -----------------------------------
# Its mount table names no host path: the overlay's layers are shown as "/", "/upper",
# "/work"; /.airlock and the spec's bind are overlays whose layers are named /ro/N, not bind
# mounts naming their host directory (build tree, source tree) and device. A mount's root
# within its file system is "/" or one name (a /dev node, the tmpfs's tmp and shm, a /proc
# directory made read-only); no mount's source is a host device; and no field holds one of
# the host's paths of this run. The host's boot command line reads empty.
mi=$(jail_exec nb user 'cat /proc/self/mountinfo; echo ==; cat /proc/1/mountinfo; echo ==; cat /proc/self/mounts') ||
  fail "cannot read the mount table in the sandbox"
host_paths=("$T" "$(realpath "$T")" "$AIRLOCK_SOURCE_DIR" "$(realpath "$AIRLOCK_SOURCE_DIR")"
  "$AIRLOCK_BINARY_DIR" "$(realpath "$AIRLOCK_BINARY_DIR")" "$AGENT_DIR" "$(realpath "$AGENT_DIR")"
  "$(realpath "$TPL")" /work/ /var/lib/ /var/cache/ /usr/lib/airlock .deps/)
cat >"$T/mountinfo_check.py" <<'PY'
import sys
host = [p for p in sys.argv[1:] if p not in ("", "/")]
tables = sys.stdin.read().split("==\n")
bad = []
for n, table in enumerate(tables):
    for line in table.splitlines():
        bad += ["host path %s: %s" % (p, line) for p in host if p in line]
        f = line.split(" ")
        if n < 2:  # mountinfo: ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS] - FSTYPE SOURCE SUPER
            root, src = f[3], f[f.index("-") + 2]
            if root != "/" and (not root.startswith("/") or "/" in root[1:]):
                bad.append("a mount's root is a path in a host file system: " + line)
        else:      # mounts: SOURCE POINT FSTYPE OPTS 0 0
            src = f[0]
        if src.startswith("/"):
            bad.append("a mount's source is a host device: " + line)
print("\n".join(bad[:6]))
PY
bad=$(python3 "$T/mountinfo_check.py" "${host_paths[@]}" <<<"$mi") || fail "cannot check the mount table"
[ -z "$bad" ] || fail "the sandbox's mount table shows the host: $bad"
grep -q ' / / [^ ]* - overlay none .*lowerdir+=/,upperdir=/upper,workdir=/work' <<<"$mi" ||
  fail "the root overlay's layers: $(grep overlay <<<"$mi")"
grep -q ' / /.airlock ro,[^ ]* - overlay none ro,lowerdir+=/ro/1,lowerdir+=/ro/e' <<<"$mi" ||
  fail "/.airlock: $(grep airlock <<<"$mi")"
grep -q ' / /opt/probes ro,[^ ]* - overlay none ro,lowerdir+=/ro/2,lowerdir+=/ro/e' <<<"$mi" ||
  fail "the spec's bind: $(grep probes <<<"$mi")"
for u in user root; do
  [ -z "$(jail_exec nb "$u" 'cat /proc/cmdline')" ] || fail "/proc/cmdline is readable as $u"
done
[ -s /proc/cmdline ] || fail "(the host has no /proc/cmdline to hide: the check above proves nothing)"
ok "no host path or device in the sandbox's mount table; /proc/cmdline reads empty"

# --- files of the host and of the neighbour ---------------------------------------------
start_a a-files
echo "$AL_HOST_MARKER" > "$T/$AL_HOST_MARKER"
out=$(jail_exec a-files root "find / -xdev \\( -name '$AL_HOST_MARKER*' -o -name 'neighbour-secret-*' -o -name 'nb-$$' \\) 2>/dev/null; grep -rl '$AL_HOST_MARKER' /tmp /home /etc /root 2>/dev/null; ls /proc | grep -c '^[0-9]'" || true)
grep -Eq "$AL_HOST_MARKER|neighbour-secret|nb-$$" <<<"$out" && fail "host or neighbour files are visible: $out"
out=$(jail_exec a-files user 'cat /etc/shadow' 2>&1) && fail "the user read /etc/shadow: $out"
shadow_in=$(jail_exec a-files root 'sha256sum /etc/shadow' | cut -d' ' -f1)
[ "$shadow_in" = "$(sha256sum "$TPL/rootfs/etc/shadow" | cut -d' ' -f1)" ] ||
  fail "the sandbox's /etc/shadow is not the template's"
[ "$shadow_in" != "$(sha256sum /etc/shadow | cut -d' ' -f1)" ] || fail "the sandbox sees the host's /etc/shadow"
# Even a file the neighbour made world-writable belongs to other host ids than A's.
nb_file_uid=$(stat -c %u "/proc/$(jail_agent_pid nb)/root/tmp/neighbour-secret-$$")
[ "$nb_file_uid" -ge "$nb_uid" ] && [ "$nb_file_uid" -lt $((nb_uid + 65536)) ] ||
  fail "the neighbour's file has host uid $nb_file_uid, outside its range"
neighbour_ok "file probes"
stop_a a-files
ok "host files (/etc/shadow, a marker) and the neighbour's files are out of reach"

# --- setuid binaries ------------------------------------------------------------------------
start_a a-suid
jail_exec a-suid root 'cp /usr/bin/python3 /usr/local/bin/suidpy && chmod 4755 /usr/local/bin/suidpy && cp /usr/bin/python3 /tmp/suidpy2 && chmod 4755 /tmp/suidpy2 && ls -l /usr/local/bin/suidpy /tmp/suidpy2' ||
  fail "could not prepare setuid copies"
for b in /usr/local/bin/suidpy /tmp/suidpy2; do
  out=$(jail_exec a-suid user "$b -c 'import os; print(os.getresuid())'")
  [ "$out" = "(1000, 1000, 1000)" ] || fail "setuid-root $b ran with ids $out"
done
out=$(jail_exec a-suid user 'ls -l /usr/bin/su /usr/bin/passwd /usr/bin/mount 2>/dev/null | grep -c "^-rws"; su -c id root </dev/null 2>&1; echo su=$?; mount -t tmpfs x /mnt 2>&1; echo mount=$?')
grep -q 'su=0' <<<"$out" && fail "su as the user succeeded: $out"
grep -q 'mount=0' <<<"$out" && fail "setuid mount as the user succeeded: $out"
neighbour_ok "setuid"
stop_a a-suid
ok "setuid binaries (the template's and ones made by sandbox root) give no privileges"

# --- fork bomb -------------------------------------------------------------------------------
PIDS=128 start_a a-fork
# The bomb runs for 8 s in the background while the host samples the sandbox's process
# count and the neighbour keeps answering.
jail_exec a-fork user 'bomb() { bomb | bomb & }; (bomb) >/dev/null 2>&1 & sleep 8; echo done' \
  >/dev/null 2>&1 &
bomb_exec=$!
peak=0
for i in $(seq 60); do
  cur=$(cat "$(cg a-fork pids pids.current)")
  [ "$cur" -gt "$peak" ] && peak=$cur
  [ "$i" -ge 30 ] && [ "$peak" -ge 128 ] && break
  sleep 0.1
done
neighbour_ok "fork bomb"
wait "$bomb_exec" || true
max=$(cat "$(cg a-fork pids pids.max)")
[ "$max" = 128 ] || fail "pids.max is $max"
[ "$peak" -le 128 ] || fail "$peak processes in a sandbox limited to 128"
events=$(awk '/max/ {print $2}' "$(cg a-fork pids pids.events)")
[ "${events:-0}" -gt 0 ] || fail "the fork bomb never hit the pids limit (peak $peak processes)"
stop_a a-fork
ok "fork bomb: held at 128 processes (peak $peak, limit hit ${events:-?} times), neighbour fine, stopped cleanly"

# --- memory bomb -----------------------------------------------------------------------------
MEM=128 start_a a-mem
avail0=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
rc=0
jail_exec a-mem user "python3 -c 'a = []
while True: a.append(bytearray(8 << 20))'" >/dev/null 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "the memory bomb ended without error"
oom=$(awk '/oom_kill / {print $2}' "$(cg a-mem memory memory.oom_control)" 2>/dev/null ||
      awk '/oom_kill / {print $2}' "$(cg a-mem memory memory.events)")
peak=$(cat "$(cg a-mem memory memory.max_usage_in_bytes)" 2>/dev/null || cat "$(cg a-mem memory memory.peak)")
[ "$peak" -le $((128 << 20)) ] || fail "memory peak $peak above the 128 MiB limit"
grep -qx still-alive <<<"$(jail_exec a-mem user 'echo still-alive')" || fail "the sandbox died with its memory bomb"
kill -0 "${VMM_PID[a-mem]}" || fail "airlock-vmm died during the memory bomb"
avail1=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
neighbour_ok "memory bomb"
stop_a a-mem
ok "memory bomb: exit $rc, ${oom:-0} OOM kills inside, peak $((peak >> 20)) MiB <= 128 MiB; host available $((avail0 >> 10)) -> $((avail1 >> 10)) MiB"

# --- disk fill -------------------------------------------------------------------------------
DISK=64 MEM=256 start_a a-disk
out=$(jail_exec a-disk user 'dd if=/dev/zero of=/home/user/fill bs=1M count=500 2>&1; echo dd=$?; dd if=/dev/zero of=/tmp/fill2 bs=1M count=500 2>&1; echo dd2=$?; df -k / | tail -1')
grep -q 'No space left on device' <<<"$out" || fail "disk fill did not hit ENOSPC: $out"
grep -q 'dd=0' <<<"$out" && fail "a 500 MiB write succeeded on a 64 MiB disk: $out"
used=$(jail_exec a-disk user 'du -sk /home/user/fill /tmp/fill2' | awk '{s += $1} END {print s}')
[ "$used" -le $((64 * 1024)) ] || fail "$used KiB written on a 64 MiB disk"
mem=$(cat "$(cg a-disk memory memory.usage_in_bytes)" 2>/dev/null || cat "$(cg a-disk memory memory.current)")
[ "$mem" -ge $((50 << 20)) ] || fail "the filled disk ($used KiB) is not charged to the sandbox's memory ($mem bytes)"
jail_exec a-disk user 'rm -f /home/user/fill /tmp/fill2 && echo x > /home/user/after' || fail "cannot write after freeing space"
neighbour_ok "disk fill"
stop_a a-disk
ok "disk fill: ENOSPC at the 64 MiB cap, the pages were charged to the sandbox's memory"

# --- CPU spin --------------------------------------------------------------------------------
CPUS=0.5 start_a a-cpu
# The loops run until the sandbox is stopped (timeout only ends them should the test die
# first), so that the measurement below lies inside their life however slow the machine.
jail_exec a-cpu user 'for i in 1 2 3 4; do timeout 300 sh -c "while :; do :; done" >/dev/null 2>&1 & done; echo spinning' >/dev/null
cpu_ns() { cat "$(cg a-cpu cpuacct cpuacct.usage)" 2>/dev/null || awk '/usage_usec/ {print $2 * 1000}' "$(cg a-cpu cpu cpu.stat)"; }
u_start=$(cpu_ns)
spinning() { [ "$(cpu_ns)" -ge $((u_start + 100000000)) ]; }
al_wait_until 120 spinning || fail "the busy loops got no CPU time (100 ms) in 120 s"
u0=$(cpu_ns)
t0=$(date +%s%N)
neighbour_ok "CPU spin"
# The measurement itself: the CPU time the loops got over 3 s of wall time (30 of the
# quota's 100 ms periods), so this sleep is what is measured, not a wait for something.
sleep 3
u1=$(cpu_ns)
t1=$(date +%s%N)
share=$(python3 -c "print(round(($u1 - $u0) / ($t1 - $t0), 3))")
# Only the quota bounds it from above. From below only "they ran": a loaded machine gives the
# sandbox's cgroup about 2 CPUs / (runnable tasks beside it + 1), 0.05 at load 40.
python3 -c "import sys; sys.exit(0 if 0 < $share <= 0.5 * 1.3 else 1)" ||
  fail "4 spinning loops used $share CPUs with a quota of 0.5 (expected > 0 and <= 0.65)"
stop_a a-cpu
ok "CPU spin: 4 busy loops held to $share CPUs (quota 0.5)"

# --- stdout flood ----------------------------------------------------------------------------
start_a a-flood
vmm=${VMM_PID[a-flood]}
rss0=$(awk '/VmRSS/ {print $2}' "/proc/$vmm/status")
out=$(python3 "$JAIL_EXEC" "$(jail_sock a-flood)" --user user --token "$TOKEN" --timeout 120 --discard \
      -- 'head -c 200000000 /dev/zero | tr "\0" "x"' 2>&1 >/dev/null) || fail "the flood failed: $out"
bytes=$(echo "$out" | awk '/bytes of output/ {print $2}')
if [ "$AGENT_KIND" = testinit ]; then
  [ "$bytes" -eq $((4 << 20)) ] || fail "the stand-in agent returned $bytes bytes of a 200 MB flood (cap 4 MiB)"
  # The agent's own stderr flooding the log: rotated and rate-limited.
  log_in() { jail_api a-flood GET /stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["log_bytes"])'; }
  in0=$(log_in) || fail "airlock-vmm's /stats has no log_bytes"
  curl -s --max-time 60 --unix-socket "$(jail_sock a-flood)" -X POST 'http://x/stderr?bytes=30000000' ||
    fail "log flood request failed"
  # The size is final once airlock-vmm has taken in (written or dropped) all 30 MB.
  flood_read() { [ "$(log_in)" -ge $((in0 + 30000000)) ]; }
  al_wait_until 120 flood_read || fail "airlock-vmm took in $(($(log_in) - in0)) of the 30000000 bytes in 120 s"
  logsz=$(du -cb "$STATE/sandboxes/a-flood/agent.log"* | tail -1 | cut -f1)
  [ "$logsz" -le $((2 * 1048576 + 4096)) ] || fail "agent logs use $logsz bytes (limit 2 x 1 MiB)"
  s=$(jail_api a-flood GET /stats 2>/dev/null || true)
else
  [ "$bytes" -eq 200000000 ] || fail "200 MB of output arrived as $bytes bytes"
fi
rss1=$(awk '/VmRSS/ {print $2}' "/proc/$vmm/status")
[ "$rss1" -le $((rss0 + 16384)) ] || fail "airlock-vmm grew from $rss0 to $rss1 KiB during the flood"
if [ "$AGENT_KIND" != testinit ]; then
  # A client that stops reading a flood: the agent holds the process back (its pipe fills)
  # instead of buffering; its memory stays put, and everything arrives once reading resumes.
  apid=$(jail_agent_pid a-flood)
  arss0=$(awk '/VmRSS/ {print $2}' "/proc/$apid/status")
  python3 "$JAIL_EXEC" "$(jail_sock a-flood)" --user user --token "$TOKEN" --timeout 120 \
    --discard --stall 12 -- 'head -c 100000000 /dev/zero | tr "\0" "x"' \
    >/dev/null 2>"$T/stall.err" &
  stall_pid=$!
  al_wait_until 60 grep -q 'stalled after' "$T/stall.err" || fail "the client never stalled: $(cat "$T/stall.err")"
  # What is under test is that nothing grows while the client does not read: give a
  # producer without backpressure 3 s to grow (100 MB in much less), then look, well
  # within the 12 s stall.
  sleep 3
  arss1=$(awk '/VmRSS/ {print $2}' "/proc/$apid/status")
  wait "$stall_pid" || fail "the stalled flood failed: $(cat "$T/stall.err")"
  sbytes=$(awk '/bytes of output/ {print $2}' "$T/stall.err")
  [ "$sbytes" -eq 100000000 ] || fail "after a stalled client, 100 MB arrived as $sbytes bytes"
  [ "$arss1" -le $((arss0 + 32768)) ] ||
    fail "the agent grew from $arss0 to $arss1 KiB while its client did not read (no backpressure)"
  ok "a client that stops reading: the agent's RSS $arss0 -> $arss1 KiB while stalled, all 100 MB delivered after"
fi
neighbour_ok "stdout flood"
stop_a a-flood
ok "stdout flood: 200 MB streamed ($bytes bytes delivered), airlock-vmm RSS $rss0 -> $rss1 KiB, logs bounded"

# --- the neighbour is still fine, then stopped cleanly -------------------------------------------
nb_pid=$(jail_agent_pid nb)
nb_net=$(jail_netns_inode "$nb_pid")
neighbour_ok "the end"
jail_stop nb
jail_assert_gone nb "$nb_uid" "$nb_pid" "$nb_net"
echo "PASS: $JAIL_TEST"
