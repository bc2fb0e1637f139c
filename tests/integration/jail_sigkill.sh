#!/usr/bin/env bash
# tests/integration/jail_sigkill.sh: SIGKILL of airlock-vmm. The sandbox dies with it (the
# agent's parent-death signal, then the kernel ends its PID namespace); what stays on the
# host (cgroups, id slot, state files) is reclaimed by `airlock-vmm --cleanup ID`, by
# `--sweep`, or by the next airlock-vmm started with the same id. Nothing is left.
. "$(dirname "$0")/jail_lib.sh"

make_busybox_template "$T/bb"

# crash_one ID: starts ID with busy background work, SIGKILLs its airlock-vmm and checks
# the sandbox's processes are gone within 2 s (before any cleanup ran).
crash_one() {
  local id=$1
  jail_start "$id" "$T/bb"
  apid=$(jail_agent_pid "$id")
  huid=$(jail_host_uid "$id")
  netino=$(jail_netns_inode "$apid")
  jail_exec "$id" user 'for i in 1 2 3 4; do (while :; do :; done) >/dev/null 2>&1 & done; sleep 600 >/dev/null 2>&1 & echo started' >/dev/null
  local n
  n=$(ps -e -o uid= | awk -v lo="$huid" -v hi=$((huid + 65536)) '$1 >= lo && $1 < hi' | wc -l)
  [ "$n" -ge 6 ] || fail "$id: expected the agent and 5 workers, found $n processes"
  kill -KILL "${VMM_PID[$id]}"
  wait "${VMM_PID[$id]}" 2>/dev/null || true
  unset "VMM_PID[$id]"
  local i
  sandbox_procs() { ps -e -o uid= | awk -v lo="$huid" -v hi=$((huid + 65536)) '$1 >= lo && $1 < hi' | wc -l; }
  al_wait_until 60 eval '[ "$(sandbox_procs)" = 0 ]' || true
  n=$(sandbox_procs)
  [ "$n" = 0 ] || fail "$id: $n sandbox processes survived SIGKILL of airlock-vmm"
  # The host side is still there until someone cleans up.
  [ -e "$STATE/sandboxes/$id/vmm.json" ] || fail "$id: the record vanished without a cleanup"
  ls -d /sys/fs/cgroup/pids/"$CGP/$id" >/dev/null 2>&1 ||
    [ -d "/sys/fs/cgroup/$CGP/$id" ] || fail "$id: its cgroup vanished without a cleanup"
}

crash_one k1
ok "k1: SIGKILL of airlock-vmm killed the whole sandbox within 2 s"
"$VMM" --state-dir "$STATE" --cleanup k1 || fail "--cleanup k1 failed"
jail_assert_gone k1 "$huid" "$apid" "$netino"
"$VMM" --state-dir "$STATE" --cleanup k1 || fail "a second --cleanup k1 failed (must be idempotent)"
ok "k1: --cleanup reclaimed everything (and is idempotent)"

crash_one k2
k2=("$huid" "$apid" "$netino")
crash_one k3
k3=("$huid" "$apid" "$netino")
out=$("$VMM" --state-dir "$STATE" --sweep --cgroup-parent "$CGP") || fail "--sweep failed: $out"
jail_assert_gone k2 "${k2[@]}"
jail_assert_gone k3 "${k3[@]}"
for id in k2 k3; do
  ls -d /sys/fs/cgroup/*/"$CGP/$id" 2>/dev/null | grep -q . && fail "--sweep left the cgroups of $id"
done
[ -z "$(ls -A "$STATE/jail/idslots")" ] || fail "--sweep left id slots: $(ls "$STATE/jail/idslots")"
ok "k2, k3: --sweep reclaimed both"

# A crash before the record was written leaves only a cgroup and an id slot: the sweep
# finds those by listing the cgroup parent and the slot files.
mkdir -p /sys/fs/cgroup/pids/"$CGP"/orphan /sys/fs/cgroup/memory/"$CGP"/orphan 2>/dev/null ||
  mkdir -p "/sys/fs/cgroup/$CGP/orphan"
mkdir -p "$STATE/jail/idslots"
echo orphan > "$STATE/jail/idslots/4242"
"$VMM" --state-dir "$STATE" --sweep --cgroup-parent "$CGP" >/dev/null || fail "--sweep of orphans failed"
ls -d /sys/fs/cgroup/*/"$CGP"/orphan 2>/dev/null | grep -q . && fail "--sweep left an orphan cgroup"
[ ! -e "$STATE/jail/idslots/4242" ] || fail "--sweep left an orphan id slot"
ok "orphaned cgroups and id slots without a record are swept"

# The next airlock-vmm for a crashed id reclaims the leftovers itself and starts.
crash_one k4
jail_start k4 "$T/bb"
grep -q 'reclaiming what a previous airlock-vmm left' "$T/vmm-k4.log" || fail "k4: no reclaim logged"
jail_exec k4 user true || fail "k4: the restarted sandbox does not work"
apid=$(jail_agent_pid k4)
huid=$(jail_host_uid k4)
netino=$(jail_netns_inode "$apid")
jail_stop k4
jail_assert_gone k4 "$huid" "$apid" "$netino"
ok "k4: restarting a crashed id reclaims first, then runs and stops cleanly"

echo "PASS: $JAIL_TEST"
