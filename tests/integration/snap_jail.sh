#!/usr/bin/env bash
# tests/integration/snap_jail.sh: file system snapshots of jail sandboxes through
# airlock-vmm's API (POST /snapshot) and new sandboxes started from them (spec.jail.restore):
# what a snapshot keeps (files, owners, modes, links, holes, deletions of template files),
# what it never holds (the sandbox's identity files, its token and environment), that the
# sandbox goes on running afterwards (and a paused one stays paused), that a snapshot is
# never left half-written (also after kill -9 of airlock-vmm while it copies), and the clear
# refusals.
. "$(dirname "$0")/jail_lib.sh"

make_busybox_template "$T/bb"
echo 'from the template' > "$T/bb/rootfs/etc/motd"
mkdir -p "$T/snaps"
CANARY=canary-$$-$RANDOM$RANDOM
JAIL_ENV=",\"SECRET_CANARY\":\"$CANARY\"" jail_start s1 "$T/bb"
jail_has_api s1 || fail "airlock-vmm has no API socket"

out=$(jail_exec s1 user 'set -e
cd /home/user
echo hello > keep.txt
mkdir -p deep/a/b
echo inner > deep/a/b/file
ln -s keep.txt link
ln keep.txt hard
dd if=/dev/zero of=sparse bs=1 count=1 seek=104857599 2>/dev/null
mkfifo pipe
printf "%s" "$SECRET_CANARY" | wc -c > canary-len
echo ok' 2>&1) || fail "cannot write files in s1: $out"
out=$(jail_exec s1 root 'set -e
rm /etc/motd
echo rootfile > /root/secret.txt
chmod 0600 /root/secret.txt
cp /bin/busybox /usr/bin/suid && chmod 4755 /usr/bin/suid
echo ok' 2>&1) || fail "cannot write files in s1 as root: $out"

out=$(jail_api s1 POST /snapshot "{\"path\":\"$T/snaps/one\"}") || fail "POST /snapshot: $out"
grep -q '"format":"airlock-jail-fs-1"' <<<"$out" || fail "snapshot answer: $out"
[ -f "$T/snaps/one/snapshot.json" ] || fail "no snapshot.json"
[ "$(cat "$T/snaps/one/upper/home/user/keep.txt")" = hello ] || fail "keep.txt not in the snapshot"
[ ! -e "$T/snaps/one/upper/etc/hostname" ] && [ ! -e "$T/snaps/one/upper/etc/hosts" ] ||
  fail "the sandbox's identity files are in the snapshot"
# A 100 MiB hole costs nothing.
used=$(du -k "$T/snaps/one/upper/home/user/sparse" | cut -f1)
[ "$used" -lt 1024 ] || fail "the sparse file takes $used KiB in the snapshot"
# Neither the token nor an environment value of the sandbox is in any file of it.
! grep -rqa -e "$CANARY" -e "$TOKEN" "$T/snaps/one" || fail "a secret of the sandbox is in the snapshot"
ls -a "$T/snaps" | grep -q '^\.tmp-' && fail "a temporary directory is left: $(ls -a "$T/snaps")"
ok "snapshot written: files kept, identity files, token and environment not"

grep -qx alive <<<"$(jail_exec s1 user 'echo alive')" || fail "s1 does not answer after the snapshot"
grep -q '"state":"running"' <<<"$(jail_api s1 GET /status)" || fail "s1 is not running after the snapshot"
out=$(jail_api s1 POST /snapshot "{\"path\":\"$T/snaps/one\"}") && fail "a snapshot over an existing one succeeded"
grep -q '"code":400' <<<"$out" || fail "snapshot onto an existing path: $out"
out=$(jail_api s1 POST /snapshot "{\"path\":\"$T/nowhere/x\"}") && fail "a snapshot into a missing directory succeeded"
grep -q 'does not exist' <<<"$out" || fail "snapshot into a missing directory: $out"
# Paused: the snapshot leaves it paused.
jail_api s1 POST /pause >/dev/null || fail "pause"
jail_api s1 POST /snapshot "{\"path\":\"$T/snaps/paused\"}" >/dev/null || fail "snapshot of a paused sandbox"
grep -q '"state":"paused"' <<<"$(jail_api s1 GET /status)" || fail "the snapshot resumed a paused sandbox"
jail_api s1 POST /resume >/dev/null || fail "resume"
ok "the sandbox runs on after a snapshot, a paused one stays paused; clear refusals"

# A new sandbox from the snapshot: another id slot, the same files.
JAIL_OPTS=",\"restore\":\"$T/snaps/one\"" jail_start s2 "$T/bb"
h1=$(jail_host_uid s1)
h2=$(jail_host_uid s2)
[ "$h1" != "$h2" ] || fail "s1 and s2 share host ids"
got=$(jail_exec s2 user 'cd /home/user
cat keep.txt deep/a/b/file
readlink link
stat -c "%h %u:%g %s" hard sparse
[ -p pipe ] && echo fifo
cat canary-len
[ -e /etc/motd ] && echo motd-back || echo motd-gone
cat /etc/hostname
stat -c "%a %u" /usr/bin/suid') || fail "cannot read s2's files"
want="hello
inner
keep.txt
2 1000:1000 6
1 1000:1000 104857600
fifo
${#CANARY}
motd-gone
s2
4755 0"
[ "$got" = "$want" ] || fail "s2's files: got
$got
want
$want"
grep -qx rootfile <<<"$(jail_exec s2 root 'cat /root/secret.txt')" || fail "root's file in s2"
# On the host: owned by s2's ids, none by s1's.
apid2=$(jail_agent_pid s2)
st=$(stat -c '%u' "/proc/$apid2/root/home/user/keep.txt")
[ "$st" = $((h2 + 1000)) ] || fail "keep.txt in s2 is owned by host uid $st, not $((h2 + 1000))"
jail_exec s2 user 'echo more > /home/user/keep.txt' >/dev/null || fail "s2 cannot write"
[ "$(cat "$T/snaps/one/upper/home/user/keep.txt")" = hello ] || fail "s2's write changed the snapshot"
ok "a sandbox from the snapshot has its files, owners, links, holes and deletions, its own identity"

# Refusals at start: no snapshot there, or not one of this format.
start_refused() { # ID TEMPLATE: airlock-vmm refuses the spec (its ready line: $T/ready-ID)
  local id=$1 rc=0
  jail_spec "$@" > "$T/spec-$id.json"
  timeout 60 "$VMM" --state-dir "$STATE" --spec - --ready-fd 3 < "$T/spec-$id.json" \
    3>"$T/ready-$id" 2>>"$T/vmm-$id.log" >/dev/null || rc=$?
  [ "$rc" != 0 ] || fail "$id started: $(cat "$T/ready-$id")"
}
JAIL_OPTS=",\"restore\":\"$T/snaps/none\"" start_refused s3 "$T/bb"
grep -q 'spec.jail.restore' "$T/ready-s3" || fail "missing snapshot: $(cat "$T/ready-s3")"
mkdir -p "$T/snaps/bad/upper"
echo '{"format":"something-else","id_base":1}' > "$T/snaps/bad/snapshot.json"
JAIL_OPTS=",\"restore\":\"$T/snaps/bad\"" start_refused s4 "$T/bb"
grep -q 'not a jail snapshot' "$T/ready-s4" || fail "foreign snapshot: $(cat "$T/ready-s4")"
ok "a missing or foreign snapshot is refused with a clear error"

# kill -9 of airlock-vmm in the middle of a snapshot (the sandbox frozen, 64 MB being
# copied): the target name never holds a half snapshot, and --cleanup reclaims the sandbox.
MEM=512 DISK=256 jail_start s5 "$T/bb"
h5=$(jail_host_uid s5)
apid5=$(jail_agent_pid s5)
net5=$(jail_netns_inode "$apid5")
jail_exec s5 user 'dd if=/dev/urandom of=/home/user/blob bs=1048576 count=64 2>/dev/null && echo ok' \
  >/dev/null || fail "cannot write 64 MB in s5"
curl -s -o /dev/null --max-time 60 --unix-socket "$STATE/sandboxes/s5/vmm.sock" -X POST \
  -H 'Content-Type: application/json' --data "{\"path\":\"$T/snaps/killed\"}" http://vmm/snapshot &
curl_pid=$!
copying() { compgen -G "$T/snaps/.tmp-killed.*/upper/home" >/dev/null; }
al_wait_until 60 copying || fail "the snapshot of s5 did not begin"
kill -KILL "${VMM_PID[s5]}"
wait "${VMM_PID[s5]}" 2>/dev/null || true
unset "VMM_PID[s5]"
wait "$curl_pid" 2>/dev/null || true
if [ -e "$T/snaps/killed" ]; then
  # It finished just before the kill: then it is whole.
  [ -f "$T/snaps/killed/snapshot.json" ] &&
    [ "$(stat -c %s "$T/snaps/killed/upper/home/user/blob")" = 67108864 ] ||
    fail "a half-written snapshot is in place after kill -9"
fi
"$VMM" --state-dir "$STATE" --cleanup s5 || fail "--cleanup s5 failed"
jail_assert_gone s5 "$h5" "$apid5" "$net5"
rm -rf "$T"/snaps/.tmp-killed.*
ok "kill -9 in the middle of a snapshot: no half snapshot in place, --cleanup reclaims the frozen sandbox"

# Rollback of s1 to its snapshot "one" in place: its files as they were then, the same
# sandbox (id slot, network namespace, hostname, token), a new agent.
out=$(jail_exec s1 user 'set -e
rm /home/user/keep.txt
echo later > /home/user/later.txt
sleep 600 </dev/null >/dev/null 2>&1 &
echo ok' 2>&1) || fail "cannot change s1's files: $out"
out=$(jail_exec s1 root 'echo back > /etc/motd && echo ok' 2>&1) || fail "cannot write /etc/motd in s1: $out"
agent_now() { jail_api "$1" GET /status | python3 -c 'import json,sys; print(json.load(sys.stdin)["agent_pid"])'; }
apid_before=$(agent_now s1)
net_before=$(jail_netns_inode "$apid_before")
rb() { # ID PATH [TOKEN]: POST /rollback
  jail_api "$1" POST /rollback "{\"path\":\"$2\",\"access_token\":\"${3:-$TOKEN}\"}"
}
out=$(rb s1 "$T/snaps/one") || fail "POST /rollback: $out"
grep -q '"restore_ms":' <<<"$out" || fail "rollback answer: $out"
got=$(jail_exec s1 user 'cd /home/user
cat keep.txt
[ -e later.txt ] && echo later-kept || echo later-gone
[ -e /etc/motd ] && echo motd-back || echo motd-gone
cat /etc/hostname
cat /proc/[0-9]*/comm | grep -qx sleep && echo sleep-alive || echo no-sleep') || fail "s1 does not answer after the rollback"
want="hello
later-gone
motd-gone
s1
no-sleep"
[ "$got" = "$want" ] || fail "s1 after the rollback: got
$got
want
$want"
apid_after=$(agent_now s1)
[ "$apid_after" != "$apid_before" ] || fail "the agent was not started again"
[ "$(jail_netns_inode "$apid_after")" = "$net_before" ] || fail "s1 has another network namespace after the rollback"
[ "$(jail_host_uid s1)" = "$h1" ] || fail "s1 has another id slot after the rollback"
[ "$(stat -c %u "/proc/$apid_after/root/home/user/keep.txt")" = $((h1 + 1000)) ] ||
  fail "keep.txt is not owned by s1's user after the rollback"
grep -q '"state":"running"' <<<"$(jail_api s1 GET /status)" || fail "s1 is not running after the rollback"
ok "rollback: the snapshot's files in place, same sandbox (slot, network, hostname, token), processes started afresh"

# Refusals change nothing: another sandbox's snapshot, no snapshot, paused.
jail_api s2 POST /snapshot "{\"path\":\"$T/snaps/two\"}" >/dev/null || fail "snapshot of s2"
out=$(rb s1 "$T/snaps/two") && fail "a rollback to another sandbox's snapshot succeeded"
grep -q '"code":400' <<<"$out" && grep -q 'snapshot of sandbox s2, not of s1' <<<"$out" ||
  fail "rollback to s2's snapshot: $out"
out=$(rb s1 "$T/snaps/none") && fail "a rollback to no snapshot succeeded"
grep -q '"code":400' <<<"$out" || fail "rollback to a missing snapshot: $out"
jail_api s1 POST /pause >/dev/null || fail "pause"
out=$(rb s1 "$T/snaps/one") && fail "a rollback of a paused sandbox succeeded"
grep -q '"code":409' <<<"$out" && grep -q 'paused' <<<"$out" || fail "rollback when paused: $out"
jail_api s1 POST /resume >/dev/null || fail "resume"
[ "$(agent_now s1)" = "$apid_after" ] || fail "a refused rollback restarted the agent"
grep -qx hello <<<"$(jail_exec s1 user 'cat /home/user/keep.txt')" || fail "s1 after the refusals"
ok "a rollback to another sandbox's snapshot, to none, or of a paused sandbox is refused and changes nothing"

apid1=$(agent_now s1)
net1=$(jail_netns_inode "$apid1")
net2=$(jail_netns_inode "$apid2")
jail_stop s1
jail_stop s2
jail_assert_gone s1 "$h1" "$apid1" "$net1"
jail_assert_gone s2 "$h2" "$apid2" "$net2"
ok "both stopped; nothing left"
