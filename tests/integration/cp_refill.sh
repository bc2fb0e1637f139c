#!/usr/bin/env bash
# tests/integration/cp_refill.sh: when the pools refill (sandboxes.refill_quiet), jail backend,
# network off; "base" keeps two warm sandboxes, the quiet time is 10 s.
#   - a creation claims one of two: the pool is at half, so its replacement waits for the
#     creations to pause: right after the 201 one is ready and none is starting (an
#     immediate refill would already have started one: its start is counted before airlockd
#     reads the next request);
#   - once no creation has been in flight for the quiet time, the pool is full again;
#   - two creations in a row: the second takes the pool below half, which refills at once
#     (right after its 201 a replacement is starting or ready) rather than after the quiet time;
#   - a negative quiet time is refused at the start, naming the key;
#   - after the sandboxes are killed and airlockd is stopped nothing is left.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_refill: $b is not built: SKIP"; exit 0; }
done
CP_SANDBOXES_EXTRA='  warm_pool: 4
  refill_quiet: 10s
  warm:
    templates: ["base=2"]
    memory: 256MiB
  metrics_interval: 1h' cp_world cp_refill jail off
cp_start || exit 1
metric() { cp_api "$CP_URL/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
ready() { metric 'airlock_warm_sandboxes{template="base",state="ready"}'; }
# Ready plus starting: what the pool holds.
held() {
  cp_api "$CP_URL/metrics" | awk '
    $1 == "airlock_warm_sandboxes{template=\"base\",state=\"ready\"}" ||
    $1 == "airlock_warm_sandboxes{template=\"base\",state=\"starting\"}" {n += $2}
    END {print n + 0}'
}
full() { [ "$(ready)" = 2 ]; }
claims() { metric 'airlock_warm_claims_total{template="base",how="warm"}'; }

al_check "two warm sandboxes of base are ready after the start" al_wait_until 120 full

al_note "one claim: the pool at half waits for the creations to pause"
A=$(cp_create)
al_eq "right after the claim of $A: one held (ready), its replacement not started" "$(held)" 1
al_eq "it was a warm claim" "$(claims)" 1
al_check "after the quiet time the pool is full again" al_wait_until 60 full

al_note "two claims in a row: the second takes the pool below half"
B=$(cp_create)
C=$(cp_create)
al_eq "both were warm claims" "$(claims)" 3
al_ok "right after $C a replacement is under way at once (held: $(held))" test "$(held)" -ge 1
al_check "and the pool is full again" al_wait_until 60 full

for s in "$A" "$B" "$C"; do al_ok "kill $s" cp_cli sandbox kill "$s"; done
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""

al_note "a negative quiet time is refused"
sed -i 's/^  refill_quiet: 10s$/  refill_quiet: -5ms/' "$AL_TMP/airlockd.yaml"
al_fail "airlockd does not start" cp_start
al_match "saying which key" "sandboxes.refill_quiet" cat "$AL_TMP/airlockd.log"
al_done
