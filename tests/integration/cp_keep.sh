#!/usr/bin/env bash
# tests/integration/cp_keep.sh: sandboxes.on_shutdown: keep, end to end (jail sandboxes,
# network on, in the cp_world).
#   - SIGTERM: airlockd leaves its running sandbox (and helpers) and exits, without waiting
#     for its airlock-vmm children to end (a reaper kept its loop alive);
#   - the next airlockd re-adopts the sandbox: it is listed as running and runs commands;
#   - kill and a final stop (on_shutdown: kill) leave nothing behind.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_keep: $b is not built: SKIP"; exit 0; }
done
CP_SANDBOXES_EXTRA="  on_shutdown: keep
  warm_pool: 0" cp_world cp_keep jail on
# (A kept instance leaves its runtime tmpfs mounted for the next airlockd: cp_world's
# cleanup unmounts it.)
cp_start || exit 1
SB=$(cp_create)
al_note "sandbox $SB"
PID=$(al_pid airlockd)
kill -TERM "$PID"
# (Its sandbox never ends: an airlockd that waited for it would never exit.)
al_wait_until 120 eval '! kill -0 "$PID" 2>/dev/null' || true
if kill -0 "$PID" 2>/dev/null; then
  al_eq "airlockd (on_shutdown: keep) exits on SIGTERM, its sandbox still running" running exited
  exit 1
fi
al_eq "airlockd (on_shutdown: keep) exits on SIGTERM, its sandbox still running" exited exited
al_ok "its sandbox's airlock-vmm still runs" pgrep -f -- "$CP_STATE/sandboxes/$SB/|--state-dir $CP_STATE --spec"
cp_start || exit 1
al_match "the next airlockd re-adopts it as running" "$SB +[^ ]+ +running" cp_cli sandbox ls
al_match "... and it runs commands" '^readopted$' cp_exec "$SB" echo readopted
al_ok "kill" cp_cli sandbox kill "$SB"
sed -i 's/^  on_shutdown: keep$/  on_shutdown: kill/' "$AL_TMP/airlockd.yaml"
al_kill airlockd TERM
cp_start || exit 1
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
