#!/usr/bin/env bash
# tests/integration/cp_disk.sh: the disk reserve, end to end. airlockd (jail sandboxes, the
# vswitch, airlock-egress) runs with its state directory, and so the egress audit log, on a
# 96 MiB tmpfs made for this test, with disk.reserve 32 MiB. A neighbour sandbox is created
# and served; then the file system is filled:
#   - below the reserve: a new sandbox is refused with a 503 whose JSON message says why (the
#     real E2B SDK raises it with that message), /metrics and airlockd's log say so, and the
#     neighbour's egress is still served and audited;
#   - the reserve used up too (the disk full): the neighbour's egress fails closed (503
#     audit_unavailable from the proxy, nothing reaches the upstream);
#   - space freed: traffic flows again and new sandboxes are accepted.
# The tmpfs, like everything of the world, is removed by the trap.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_disk: $b is not built: SKIP"; exit 0; }
done
E2B_DIR="$AIRLOCK_SOURCE_DIR/tests/e2b"
"$E2B_DIR/setup" >/dev/null || { echo "cp_disk: the E2B SDK cannot be installed (tests/e2b/setup)" >&2; exit 1; }

cp_world cp_disk jail on
# The state directory on its own small file system (what the world wrote into it first).
cp -a "$CP_STATE" "$AL_TMP/state.seed"
mount -t tmpfs -o size=96m,mode=0711 "al-cp-disk-$$" "$CP_STATE" || { echo "cp_disk: cannot mount a tmpfs" >&2; exit 1; }
cp_disk__cleanup() {
  cp__cleanup # everything airlockd left, while its state directory is still there
  mountpoint -q "$CP_STATE/sandboxes" 2>/dev/null && umount -l "$CP_STATE/sandboxes"
  mountpoint -q "$CP_STATE" 2>/dev/null && umount -l "$CP_STATE"
  true
}
al_on_cleanup cp_disk__cleanup
cp -a "$AL_TMP/state.seed/." "$CP_STATE/"
cat >>"$AL_TMP/airlockd.yaml" <<'CFG'
disk:
  reserve: 32MiB
  check_interval: 200ms
CFG
cp_start || exit 1
api() { cp_api "$@"; }
sdk() {
  nsenter --net="/run/netns/$CP_HOSTNS" -- env -u E2B_DEBUG E2B_API_URL="$CP_URL" \
    E2B_SANDBOX_URL="$CP_URL" E2B_API_KEY="$CP_KEY" timeout 120 node "$E2B_DIR/sdk-driver.mjs" "$@"
}
sdk_error() { sdk "$@"; true; } # the SDK's error output (it exits 1 then)
metric() { api "$CP_URL/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
avail() { df -B1 --output=avail "$CP_STATE" | tail -1 | tr -d ' '; }
# The neighbour's request through its egress (the name resolved, so that a refused DNS query
# does not hide the proxy's answer): prints the proxy's or the upstream's answer.
neighbour() {
  cp_cli sandbox exec "$SB" -- curl -sS -m 10 --resolve allowed.test:80:203.0.113.10 \
    "http://allowed.test/$1" 2>&1
}

al_ok "the neighbour sandbox is created" cp_cli sandbox create base --policy e2e --timeout 600
SB=$(cp_cli sandbox ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["sandboxID"])')
al_match "and served" '"server": "good"' neighbour before
al_eq "/metrics: the reserve is not low" "$(metric airlock_disk_reserve_low)" 0
al_eq "/metrics: the reserve" "$(metric airlock_disk_reserve_bytes)" $((32 << 20))

al_note "below the reserve"
fill=$(($(avail) - (24 << 20)))
[ "$fill" -gt 0 ] || { echo "cp_disk: the tmpfs is already nearly full" >&2; exit 1; }
head -c "$fill" /dev/zero >"$CP_STATE/fill-1"
out=$(api -w '\nHTTP %{http_code}\n' -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"base","timeout":60}')
al_match "a new sandbox: 503" 'HTTP 503' echo "$out"
al_ok "with a JSON body the SDK reads: code and message, naming the reserve" python3 -c '
import json, sys
b = json.loads(sys.argv[1].rsplit("\nHTTP", 1)[0])
assert b["code"] == 503, b
assert "disk.reserve" in b["message"] and "not enough disk space" in b["message"], b' "$out"
al_match "the E2B SDK raises it with the reason" \
  'ServiceBusyError: Service temporarily unavailable, please retry - not enough disk space: .*\(disk\.reserve 32\.0 MiB\)' \
  sdk_error create base
al_eq "/metrics: the reserve is low" "$(metric airlock_disk_reserve_low)" 1
al_check "/metrics: the refusals are counted" \
  test "$(metric 'airlock_sandbox_create_refused_total{reason="disk_reserve"}')" -ge 2
al_check "/metrics: the free space is below the reserve" \
  test "$(metric "airlock_disk_free_bytes{path=\"$CP_STATE\"}")" -lt $((32 << 20))
al_match "airlockd's log says so" '"level":"warn".*disk reserve: .* less than disk.reserve' cat "$AL_TMP/airlockd.log"
al_match "the neighbour is still served" '"server": "good"' neighbour in-reserve
cp_audit_match "and still audited" '"path":"/in-reserve"' --sandbox "$SB" --type http_request --json
al_ok "its log verifies" cp_cli audit verify

al_note "the reserve used up: the disk is full"
head -c "$(avail)" /dev/zero >"$CP_STATE/fill-2" 2>/dev/null
got=""
for i in $(seq 1 150); do
  if grep -q '"reason":"audit_unavailable"' <<<"$(neighbour "full$i")"; then got=$i; break; fi
  sleep 0.2
done
[ -n "$got" ] && al_check "the neighbour's egress fails closed (503 audit_unavailable)" true ||
  al_check "the neighbour's egress fails closed (503 audit_unavailable)" false
al_match "and keeps failing closed" 'HTTP/1.1 503|"reason":"audit_unavailable"' neighbour still-full
al_match "its DNS is refused too" 'status: REFUSED' cp_cli sandbox exec "$SB" -- dig +time=3 +tries=1 allowed.test
al_fail "no request after the failure reached the upstream" grep -q "GET /still-full" "$AL_TMP/up.req"

al_note "space freed"
rm -f "$CP_STATE/fill-1" "$CP_STATE/fill-2"
ok=""
for i in $(seq 1 150); do
  if grep -q '"server": "good"' <<<"$(neighbour "back$i")"; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] && al_check "the neighbour is served again" true || al_check "the neighbour is served again" false
al_ok "a new sandbox is accepted" cp_cli sandbox create base --policy e2e --timeout 60
al_eq "/metrics: the reserve is not low" "$(metric airlock_disk_reserve_low)" 0
al_match "airlockd's log says so" 'disk reserve: .* free again' cat "$AL_TMP/airlockd.log"
al_ok "the audit log verifies (the failed writes left no damage)" cp_cli audit verify
al_done
