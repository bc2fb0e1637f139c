#!/usr/bin/env bash
# tests/integration/cluster_node.sh: airlockd as a cluster node against a private PostgreSQL
# 15 (tests/lib/pg.sh), test backend, loopback-only world:
#   - the node registers (id, advertised address, capacity, versions) and renews its lease;
#     GET /admin/cluster/nodes lists it with its lease state; its running sandboxes are
#     reported; the conninfo's password appears nowhere (log, API);
#   - a database outage: logged, the node keeps serving (API, sandboxes), /admin/cluster/nodes
#     is a 503 saying why; when the database is back the node is live again, and a lease lost
#     meanwhile is taken again by registering;
#   - kill -9: the lease expires by the database's clock; a gateway lists the node as not
#     live; a clean stop releases the lease at once;
#   - bad configurations are refused before anything starts; a standalone airlockd has no
#     node list.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/pg.sh"
[ -x "$AIRLOCK_BIN/airlockd-test" ] || { echo "cluster_node: airlockd-test is not built: SKIP"; exit 0; }
CP_SANDBOXES_EXTRA="  metrics_interval: 1s" cp_world cluster_node test off
al_on_cleanup al_pg_stop
al_pg_start || exit 1
PW=pw-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
BASE_CFG=$(cat "$AL_TMP/airlockd.yaml")
# A node serves requests over TCP only with the cluster token (as from a gateway).
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$AL_TMP/cluster.token"
chmod 0600 "$AL_TMP/cluster.token"
cp_api() { nsenter --net="/run/netns/$CP_HOSTNS" curl -sS -H "X-API-KEY: $CP_KEY" -H "X-Airlock-Cluster-Token: $TOKEN" "$@"; }
bare() { nsenter --net="/run/netns/$CP_HOSTNS" curl -s -H "X-Airlock-Cluster-Token: $TOKEN" "$@"; }

# The configuration with a cluster section (role, then more lines; DB, when set, is the
# database line's value).
cluster_cfg() {
  local role=$1
  shift
  {
    printf '%s\n' "$BASE_CFG"
    printf 'cluster:\n  role: %s\n  database: "%s"\n  token_file: %s\n' "$role" \
      "${DB-$AL_PG_CONNINFO password=$PW}" "$AL_TMP/cluster.token"
    printf '  %s\n' "$@"
  } >"$AL_TMP/airlockd.yaml"
}
nodes() { cp_api "$CP_URL/admin/cluster/nodes$1"; }
code() { cp_api -o /dev/null -w '%{http_code}' "$@"; }
sql() { al__pg_as "$AL_PG_BIN/psql" -X -At "$AL_PG_CONNINFO" -c "$1"; }
# A field of node-1 in the list (python expression on n), or "absent".
node1() {
  nodes "${2:-}" | python3 -c '
import json, sys
d = json.load(sys.stdin)
n = [x for x in d["nodes"] if x["nodeID"] == "node-1"]
print(eval(sys.argv[1], {"n": n[0], "d": d}) if n else "absent")' "$1" 2>/dev/null
}
self() { nodes "" | python3 -c 'import json,sys; print(eval(sys.argv[1], {"s": json.load(sys.stdin)["self"]}))' "$1" 2>/dev/null; }

al_note "configurations refused before anything starts"
refused() {
  local want=$1
  shift
  cluster_cfg "$@"
  local out
  out=$(timeout 60 nsenter --net="/run/netns/$CP_HOSTNS" "$AIRLOCK_BIN/airlockd-test" --listen "${LISTEN:-127.0.0.1:0}" \
    --state-dir "$CP_STATE" --config "$AL_TMP/airlockd.yaml" 2>&1)
  [ $? -eq 2 ] && grep -q -- "$want" <<<"$out" || { echo "$out" >&2; return 1; }
}
DB="" al_ok "a node without a database" refused "cluster.role node needs cluster.database" node
al_ok "a heartbeat as long as the lease" refused "heartbeat_interval must be shorter" node \
  "lease: 2s" "heartbeat_interval: 2s"
al_ok "a bad node id" refused 'cluster.node_id "Node_1" is not valid' node "node_id: Node_1"
LISTEN=0.0.0.0:0 al_ok "a node on every address without advertise" refused "set cluster.advertise" \
  node "node_id: node-1"

al_note "a node registers and keeps its lease"
cluster_cfg node "node_id: node-1" "advertise: 192.0.2.1:3000" "lease: 3s" "heartbeat_interval: 300ms"
cp_start || exit 1
al_check "listed with a valid lease" al_wait_until 60 eval '[ "$(node1 "n[\"lease\"][\"valid\"]")" = True ]'
al_eq "its advertised address" "$(node1 'n["address"]')" "192.0.2.1:3000"
al_eq "its CPUs" "$(node1 'n["cpuCount"]')" "$(nproc)"
al_eq "its sandboxes at most" "$(node1 'n["sandboxesMax"]')" 1000
al_eq "the schema it knows" "$(node1 'n["schemaVersion"]')" "$(sql "SELECT max(version) FROM schema_version")"
al_eq "the templates it has, none warm (this backend warms none)" \
  "$(node1 'sorted(n["templatesWarmReady"].items())[:1]')" "[('base', 0)]"
al_eq "... in the database, for placements" "$(sql "SELECT templates ? 'base' FROM nodes WHERE id = 'node-1'")" t
al_eq "nothing booked yet" "$(node1 'n["booked"]')" "{'sandboxes': 0, 'cpuCount': 0, 'memoryMB': 0}"
al_check "its memory" test "$(node1 'n["memoryMB"]')" -gt 0
al_eq "self: a registered node" "$(self '[s["role"], s["nodeID"], s["registered"], s["databaseUp"], s["error"]]')" \
  "['node', 'node-1', True, True, None]"
al_match "self names the database without its password" "host=$AL_PG_DIR/sock dbname=airlock user=airlock" \
  self 's["database"]'
HB=$(node1 'n["heartbeatAt"]')
al_check "heartbeats renew the lease" al_wait_until 60 eval '[ "$(node1 "n[\"heartbeatAt\"]")" != "$HB" ]'
al_check "the lease is the database's: valid there" test "$(sql "SELECT lease_expires_at > now() FROM nodes WHERE id = 'node-1'")" = t
al_eq "live=true lists it" "$(node1 'n["nodeID"]' '?live=true')" node-1
al_eq "live=maybe" "$(code "$CP_URL/admin/cluster/nodes?live=maybe")" 400
al_eq "POST" "$(code -X POST "$CP_URL/admin/cluster/nodes")" 405
al_eq "another path" "$(code "$CP_URL/admin/cluster/other")" 404
al_eq "without an API key" "$(bare -o /dev/null -w '%{http_code}' "$CP_URL/admin/cluster/nodes")" 401
al_ok "an operator key" cp_cli apikey create runner --role operator
OPKEY=$(grep -E '^e2b_[0-9a-f]{40}$' <<<"$AL_OUT")
al_eq "... may not read the cluster's hosts" "$(bare -o /dev/null -w '%{http_code}' -H "X-API-KEY: $OPKEY" "$CP_URL/admin/cluster/nodes")" 403
SB=$(cp_create '{"templateID":"base","timeout":600}')
al_check "a sandbox runs" test -n "$SB"
al_check "its running sandboxes reach the database" \
  al_wait_until 60 eval '[ "$(sql "SELECT sandboxes_running FROM nodes WHERE id = '"'node-1'"'")" = 1 ]'

al_note "the database goes away"
al_pg_kill_server
al_check "the outage is logged" al_wait_line airlockd 'cluster database.*(cannot connect|server closed|terminat|no connection)' 60
al_eq "the node list says why" "$(code "$CP_URL/admin/cluster/nodes")" 503
al_match "... in its message" 'cluster database is unreachable' nodes ""
al_eq "the API keeps serving" "$(code "$CP_URL/v2/sandboxes")" 200
al_ok "the sandbox keeps answering" cp_exec "$SB" echo still-here
# Every request of the node list tries the database again (as each heartbeat does): five more
# attempts, yet the outage stays a line or two (the heartbeat's failure, then the connection
# refused; a third when a retry met the server shutting down), not one per attempt.
for _ in 1 2 3 4 5; do code "$CP_URL/admin/cluster/nodes" >/dev/null; done
al_check "the outage is logged once, not at every attempt" \
  test "$(grep -c '"level":"warn".*cluster database' "$AL_TMP/airlockd.log")" -le 3
al_pg_start_again || exit 1
# The row written before the outage can still hold a valid lease (the outage is shorter than
# the lease), so the listing alone does not show that the node is back: its log line, written
# once it has registered again, does. Only then is the lease below taken from under it.
al_check "the recovery is logged" al_wait_line airlockd 'answers again' 60
al_check "back: listed with a valid lease again" \
  al_wait_until 60 eval '[ "$(node1 "n[\"lease\"][\"valid\"]")" = True ]'
# A lease lost while the node could not renew it (here: ended by hand) is taken again.
sql "UPDATE nodes SET lease_expires_at = now() - interval '1 s' WHERE id = 'node-1'" >/dev/null
al_check "a lost lease: the node registers again" al_wait_line airlockd 'lost its lease.*registering again' 60
al_check "... and is live" al_wait_until 60 eval '[ "$(sql "SELECT lease_expires_at > now() FROM nodes WHERE id = '"'node-1'"'")" = t ]'

al_note "kill -9: the lease runs out"
al_kill airlockd KILL
al_check "expired by the database's clock within the lease" \
  al_wait_until 30 eval '[ "$(sql "SELECT lease_expires_at <= now() FROM nodes WHERE id = '"'node-1'"'")" = t ]'
cluster_cfg gateway "lease: 3s"
cp_start gateway || exit 1
al_eq "a gateway lists the node as not live" "$(node1 '[n["lease"]["valid"], n["lease"]["remainingMs"]]')" "[False, 0]"
al_eq "... and not among the live ones" "$(node1 'n' '?live=true')" absent
al_eq "self: a gateway, not registered" "$(self '[s["role"], s["registered"], s["databaseUp"]]')" \
  "['gateway', False, True]"
al_kill gateway TERM

al_note "a clean stop releases the lease"
cluster_cfg node "node_id: node-1" "advertise: 192.0.2.1:3000" "lease: 60s" "heartbeat_interval: 300ms"
cp_start || exit 1
al_check "registered (lease 60 s)" al_wait_until 60 eval '[ "$(sql "SELECT lease_expires_at > now() + interval '"'30 s'"' FROM nodes WHERE id = '"'node-1'"'")" = t ]'
al_kill airlockd TERM
al_eq "released at once" "$(sql "SELECT lease_expires_at <= now() FROM nodes WHERE id = 'node-1'")" t
al_check "the release is logged" grep -q 'released its lease' "$AL_TMP/airlockd.log"

al_note "standalone: no cluster"
DB="" cluster_cfg standalone
cp_start standalone || exit 1
al_match "the node list says there is no cluster database" 'no cluster database.*standalone' nodes ""
al_eq "... as a 404" "$(code "$CP_URL/admin/cluster/nodes")" 404
al_kill standalone TERM

al_note "secrets"
al_check "the password is in no log" eval '! grep -rq -- "$PW" "$AL_TMP"/*.log'
al_eq "nothing left behind" "$(cp_leaks_settled)" ""
al_done
