#!/usr/bin/env bash
# tests/integration/cp_load.sh: many sandboxes created and killed concurrently.
#
#   cp_load.sh [jail|test] [COUNT] [CONCURRENCY]     default: jail 200 50
#
# COUNT sandboxes are created through the API by CONCURRENCY clients at once (every one must
# answer 201 and be usable), listed, spot-checked, then killed by CONCURRENCY clients at
# once. Afterwards nothing may remain: network interfaces, cgroups, sandbox directories,
# mounts, processes, and airlockd's own descriptors must be back where they were. Bounded:
# the whole test stops by itself within its ctest timeout, and the world's trap removes
# whatever a failure leaves.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
BACKEND=${1:-jail}
COUNT=${2:-200}
CONC=${3:-50}
NET=on
if [ "$BACKEND" = test ]; then
  NET=off
else
  for b in airlock-vmm airlock-egress; do
    [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_load: $b is not built: SKIP"; exit 0; }
  done
fi
CP_SANDBOXES_EXTRA="  max: $((COUNT + 50))
  max_creating: $CONC
  memory: 64MiB
  disk: 32MiB
  warm_pool: 8"
cp_world "cp_load_$BACKEND" "$BACKEND" "$NET"
cp_start || exit 1
APID=$(al_pid airlockd)
# airlockd's descriptors, once its warm pool (8 airlock-vmm processes, each with a few
# descriptors in airlockd) is full and the count has held still for a second: the pool
# refills two at a time after bursts, so a count taken mid-refill says nothing about leaks.
settled_fds() {
  local i n prev=-1 same=0
  for i in $(seq 150); do
    n=$(ls /proc/"$APID"/fd | wc -l)
    if [ "$BACKEND" != jail ] || [ "$(pgrep -P "$APID" -fc -- '--warm' || true)" -ge 8 ]; then
      if [ "$n" = "$prev" ]; then same=$((same + 1)); else same=0; fi
      [ "$same" -ge 5 ] && break
    fi
    prev=$n
    sleep 0.2
  done
  echo "$n"
}
FD0=$(settled_fds)
al_note "airlockd (pid $APID) holds $FD0 descriptors before the load"

cat >"$AL_TMP/load.py" <<'PY'
import concurrent.futures, json, sys, time, urllib.request
url, key, count, conc, what, idfile = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                      int(sys.argv[4]), sys.argv[5], sys.argv[6])
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=body,
                                 headers={"X-API-KEY": key, "Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read(), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, e.read(), time.monotonic() - t0
if what == "create":
    body = json.dumps({"templateID": "base", "timeout": 900,
                       "metadata": {"load": "1", "airlock.policy": "e2e"}}).encode()
    with concurrent.futures.ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(lambda _: call("POST", "/v2/sandboxes", body), range(count)))
    bad = [(s, b[:200]) for s, b, _ in res if s != 201]
    with open(idfile, "w") as f:
        for s, b, _ in res:
            if s == 201:
                f.write(json.loads(b)["sandboxID"] + "\n")
    lat = sorted(t for s, _, t in res if s == 201)
    if lat:
        print("created %d, p50 %.0f ms, p95 %.0f ms, max %.0f ms" % (len(lat), lat[len(lat)//2]*1000,
              lat[int(len(lat)*0.95)-1]*1000, lat[-1]*1000))
    for s, b in bad[:5]:
        print("FAILED %d %s" % (s, b))
    sys.exit(1 if bad else 0)
else:
    ids = [l.strip() for l in open(idfile) if l.strip()]
    with concurrent.futures.ThreadPoolExecutor(conc) as ex:
        res = list(ex.map(lambda i: call("DELETE", "/sandboxes/" + i), ids))
    bad = [(s, b[:200]) for s, b, _ in res if s != 204]
    lat = sorted(t for _, _, t in res)
    print("killed %d, p50 %.0f ms, max %.0f ms" % (len(ids), lat[len(lat)//2]*1000, lat[-1]*1000))
    for s, b in bad[:5]:
        print("FAILED %d %s" % (s, b))
    sys.exit(1 if bad else 0)
PY
LOAD=(nsenter --net="/run/netns/$CP_HOSTNS" timeout 600 python3 "$AL_TMP/load.py" "$CP_URL"
      "$CP_KEY" "$COUNT" "$CONC")
al_ok "$COUNT sandboxes created by $CONC clients at once" "${LOAD[@]}" create "$AL_TMP/ids"
al_note "$AL_OUT"
al_eq "every one listed" "$(cp_cli sandbox ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" "$COUNT"
FIRST=$(head -1 "$AL_TMP/ids")
LAST=$(tail -1 "$AL_TMP/ids")
al_match "the first one works" '^ok$' cp_exec "$FIRST" echo ok
al_match "the last one works" '^ok$' cp_exec "$LAST" echo ok
if [ "$NET" = on ]; then
  al_match "the last one reaches the allowed upstream (switch, proxy)" '"server": "good"' \
    cp_cli sandbox exec "$LAST" -- curl -sS -m 10 http://allowed.test/load
fi
al_ok "all killed by $CONC clients at once" "${LOAD[@]}" kill "$AL_TMP/ids"
al_note "$AL_OUT"
al_eq "none listed" "$(cp_cli sandbox ls --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 0
# Networks are released on the thread pool after the kill answers; pooled networks (and as
# many made ahead, down) and warm airlock-vmm processes are airlockd's own (pool_size,
# warm_pool) and stay.
n_links() { ip -n "$CP_HOSTNS" -o link | grep -c " $CP_PREFIX" || true; }
al_wait_until 120 eval '[ "$(n_links)" -le 4 ]' || true
n=$(n_links)
al_check "only the pooled networks and those made ahead remain ($n)" test "$n" -le 4
al_eq "no sandbox directory left" "$(ls -A "$CP_STATE/sandboxes" | wc -l)" 0
al_eq "no sandbox cgroup left (warm ones aside)" \
  "$(find /sys/fs/cgroup/*/"$CP_CG" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | grep -vc '/warm' || true)" 0
al_eq "no sandbox mount left" "$(grep -cF "$CP_STATE/sandboxes/" /proc/self/mountinfo || true)" 0
al_eq "no agent left" "$(pgrep -fc -- "$CP_STATE/sandboxes" || true)" 0
FD1=$(settled_fds)
al_note "airlockd holds $FD1 descriptors after the load"
al_check "airlockd's descriptors are back (at most 10 more than before: pooled connections)" \
  test "$FD1" -le $((FD0 + 10))
al_kill airlockd TERM
al_eq "nothing left after airlockd stopped" "$(cp_leaks_settled)" ""
al_done
