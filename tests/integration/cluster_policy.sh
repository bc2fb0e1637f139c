#!/usr/bin/env bash
# tests/integration/cluster_policy.sh: policy publication (docs/cluster.md, "Policies across
# nodes") on one PostgreSQL 15 (tests/lib/pg.sh), three nodes, each with its own
# airlock-egress, and a gateway, all airlockd-test on loopback in the test's own namespace:
#   - a policy published through the gateway (`airlock cluster policy publish`) reaches every
#     node: its file in each node's policies directory, the version in force in each node's
#     report (GET /admin/cluster/nodes), each node's audit log records it; a sandbox
#     registered with a node's airlock-egress under that file gets the new version at once
#     (the proxy re-read it);
#   - a policy with lint errors is refused with its findings and changes nothing;
#   - a version written into the database without the cluster token's signature is refused
#     by every node, which keeps the version before and says why (report, audit);
#   - rollback (an earlier version published again), and a node stopped meanwhile applies
#     the newest version when it starts again.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/pg.sh"
source "$AIRLOCK_SOURCE_DIR/tests/integration/cluster_world.sh"
[ -x "$AIRLOCK_BIN/airlockd-test" ] || { echo "cluster_policy: airlockd-test is not built: SKIP"; exit 0; }
CP_SANDBOXES_EXTRA="  max: 2" cp_world cluster_policy test off
al_on_cleanup al_pg_stop
al_pg_start || exit 1
# Each node runs its airlock-egress (no sandbox network: the test backend has none).
BASE_CFG=$(sed 's/^egress:$/egress:\n  mode: "on"/' "$AL_TMP/airlockd.yaml")
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$AL_TMP/cluster.token"
chmod 0600 "$AL_TMP/cluster.token"

cfg() {
  local file=$1 role=$2
  shift 2
  {
    printf '%s\n' "$BASE_CFG"
    printf 'cluster:\n  role: %s\n  database: "%s"\n  token_file: %s\n  lease: 3s\n  heartbeat_interval: 300ms\n' \
      "$role" "$AL_PG_CONNINFO" "$AL_TMP/cluster.token"
    printf '  %s\n' "$@"
  } >"$file"
}
gwcli() { "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE" "$@"; }
nodecli() { local st=$1; shift; "$AIRLOCK_BIN/airlock" --state-dir "$st" "$@"; }
live() { sql "SELECT count(*) FROM nodes WHERE lease_expires_at > now()"; }
# applied NODE POLICY FIELD: the field of the node's report of POLICY, as the gateway lists it.
applied() {
  api "$URL_gateway/admin/cluster/nodes" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for n in d["nodes"]:
    if n["nodeID"] == sys.argv[1]:
        v = n.get("policies", {}).get(sys.argv[2], {}).get(sys.argv[3])
        print("" if v is None else v)' "$@"
}
# everywhere POLICY FIELD VALUE: every node reports VALUE.
everywhere() {
  local n
  for n in node-1 node-2 node-3; do [ "$(applied "$n" "$1" "$2")" = "$3" ] || return 1; done
}
# egress_hash STATE ID: the policy hash a sandbox has in that node's airlock-egress.
egress_hash() {
  curl -sS --unix-socket "$1/run/egress.sock" "http://egress/v1/sandboxes/$2" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["policy"]["hash"])'
}
STATES=("$CP_STATE-node-1" "$CP_STATE-node-2" "$CP_STATE-node-3")

cat >"$AL_TMP/team.yaml" <<'YAML'
version: 1
name: team
description: published to every node
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
YAML
cat >"$AL_TMP/team-v2.yaml" <<'YAML'
version: 1
name: team
description: published to every node, second version
rules:
  - name: web
    hosts: [allowed.test, other.test]
    ports: [80]
    scheme: http
YAML
cat >"$AL_TMP/team-bad.yaml" <<'YAML'
version: 1
name: team
rules:
  - name: web
    hosts: [allowed.test]
    portz: [80]
YAML

al_note "three nodes, each with its airlock-egress, and a gateway"
for i in 1 2 3; do
  cfg "$AL_TMP/node-$i.yaml" node "node_id: node-$i"
  start "node-$i" "${STATES[$((i - 1))]}" "$AL_TMP/node-$i.yaml" || exit 1
done
cfg "$AL_TMP/gateway.yaml" gateway
start gateway "$CP_STATE" "$AL_TMP/gateway.yaml" || exit 1
al_check "the three nodes are live" al_wait_until 60 eval '[ "$(live)" = 3 ]'
al_check "each node's airlock-egress answers" al_wait_until 60 eval \
  'for s in "${STATES[@]}"; do curl -sf --unix-socket "$s/run/egress.sock" http://egress/v1/health >/dev/null || exit 1; done'
al_eq "nothing is published yet" "$(api "$URL_gateway/admin/cluster/policies")" '{"policies":[]}'

al_note "publish reaches every node"
al_match "a policy is published through the gateway" 'policy team version 1 published' \
  gwcli cluster policy publish "$AL_TMP/team.yaml"
al_eq "... once, signed" "$(sql "SELECT version || ' ' || (signature ~ '^[0-9a-f]{64}$') FROM policies WHERE name = 'team'")" "1 true"
BY=$(sql "SELECT published_by FROM policies WHERE name = 'team'")
al_check "... with who published it" test -n "$BY"
al_eq "... as the API shows it" "$(api "$URL_gateway/admin/cluster/policies/team/1" | field publishedBy)" "$BY"
al_eq "... its digest is the document's SHA-256" "$(api "$URL_gateway/admin/cluster/policies/team/1" | field digest)" \
  "$(sha256sum "$AL_TMP/team.yaml" | cut -d' ' -f1)"
al_check "every node reports version 1 in force" al_wait_until 30 everywhere team version 1
al_eq "... without an error" "$(applied node-2 team error)" ""
for i in 1 2 3; do
  al_check "node-$i's policies directory holds the document" cmp "$AL_TMP/team.yaml" "${STATES[$((i - 1))]}/policies/team.yaml"
done
al_match "the CLI lists the version in force per node" 'node-3 +version 1 \(the newest\)' gwcli cluster policy ls
al_match "each node's audit log records the version it applied" '"event":"policy_applied".*"version":1' \
  nodecli "${STATES[0]}" audit query --type cluster --json

al_note "a new version reaches a node's airlock-egress"
al_match "a sandbox registered with node-1's airlock-egress under the published file" 'HTTP 201|^201' \
  curl -sS -o /dev/null -w '%{http_code}' --unix-socket "${STATES[0]}/run/egress.sock" -X POST \
  -H 'Content-Type: application/json' http://egress/v1/sandboxes \
  -d "{\"id\":\"sbx-pol\",\"addresses\":[\"10.201.9.2\"],\"policy_file\":\"${STATES[0]}/policies/team.yaml\"}"
al_eq "... has version 1" "$(egress_hash "${STATES[0]}" sbx-pol)" "$("$AIRLOCK_BIN/airlock" policy hash "$AL_TMP/team.yaml")"
al_match "version 2 is published" 'policy team version 2 published' gwcli cluster policy publish --name team "$AL_TMP/team-v2.yaml"
al_check "every node reports version 2 in force" al_wait_until 30 everywhere team version 2
al_check "... and the sandbox's airlock-egress re-read it" al_wait_until 30 eval \
  '[ "$(egress_hash "${STATES[0]}" sbx-pol)" = "$("$AIRLOCK_BIN/airlock" policy hash "$AL_TMP/team-v2.yaml")" ]'

al_note "a policy with errors is refused and changes nothing"
al_eq "publishing it fails" "$(gwcli cluster policy publish --name team "$AL_TMP/team-bad.yaml" 2>"$AL_TMP/bad.err"; echo $?)" 1
al_match "... naming the finding at its line and column" 'team-bad.yaml:6:5: error: .*portz' cat "$AL_TMP/bad.err"
al_match "... and that nothing was published" 'nothing was published' cat "$AL_TMP/bad.err"
al_eq "the API answers 400 with the findings" "$(api -X PUT "$URL_gateway/admin/cluster/policies/team" \
  -d "$(python3 -c 'import json,sys; print(json.dumps({"document": open(sys.argv[1]).read()}))' "$AL_TMP/team-bad.yaml")" \
  -o "$AL_TMP/bad.json" -w '%{http_code}')" 400
al_match "... each with its code" '"severity":"error","line":6,"col":5,"code":"unknown_key"' cat "$AL_TMP/bad.json"
al_eq "no version was added" "$(sql "SELECT max(version) FROM policies WHERE name = 'team'")" 2
al_check "the nodes keep version 2" everywhere team version 2
al_check "... and its file" cmp "$AL_TMP/team-v2.yaml" "${STATES[2]}/policies/team.yaml"
al_eq "an operator key may not publish" "$(
  OPKEY=$(nodecli "$CP_STATE" apikey create op --role operator 2>/dev/null | grep -o 'e2b_[0-9a-f]*' | head -1)
  in_host curl -s -o /dev/null -w '%{http_code}' -H "X-API-KEY: $OPKEY" -X PUT \
    "$URL_gateway/admin/cluster/policies/team" -d '{"document": "version: 1\n"}')" 403

al_note "a version not published through the cluster is refused by every node"
sql "INSERT INTO policies (name, version, digest, document, published_by)
     VALUES ('team', 3, encode(sha256(convert_to('version: 1
name: team
rules:
  - name: all
    hosts: [\"*\"]
', 'UTF8')), 'hex'), 'version: 1
name: team
rules:
  - name: all
    hosts: [\"*\"]
', 'intruder')" >/dev/null
al_check "every node refuses version 3" al_wait_until 30 everywhere team failedVersion 3
al_check "... keeping version 2" everywhere team version 2
al_match "... saying why" 'version 3 was not applied: it is not signed with this cluster.s token' applied node-1 team error
al_check "... and its file" cmp "$AL_TMP/team-v2.yaml" "${STATES[1]}/policies/team.yaml"
al_match "... and its audit log records the refusal" '"event":"policy_refused".*"in_force":2' \
  nodecli "${STATES[1]}" audit query --type cluster --json

al_note "roll back, with a node stopped meanwhile"
al_kill node-3 TERM
al_match "rollback publishes version 1's document again" 'policy team version 4 published' \
  gwcli cluster policy rollback team 1
al_check "the live nodes apply version 4" al_wait_until 30 eval \
  '[ "$(applied node-1 team version)" = 4 ] && [ "$(applied node-2 team version)" = 4 ]'
al_eq "... which is version 1's document" "$(gwcli cluster policy show team 4 | sha256sum)" "$(sha256sum <"$AL_TMP/team.yaml")"
al_eq "the stopped node still has version 2" "$(applied node-3 team version)" 2
start node-3 "${STATES[2]}" "$AL_TMP/node-3.yaml" || exit 1
al_check "started again, it applies the newest version" al_wait_until 30 everywhere team version 4
al_check "... its file is version 4's" cmp "$AL_TMP/team.yaml" "${STATES[2]}/policies/team.yaml"
al_eq "... and it refuses version 3 no more (a newer one is in force)" "$(applied node-3 team failedVersion)" ""

al_check "the cluster token is in no log" eval '! grep -rq -- "$TOKEN" "$AL_TMP"/*.log'
al_kill gateway TERM
for i in 1 2 3; do al_kill "node-$i" TERM; done
al_eq "nothing left behind" "$(cp_leaks_settled)" ""
al_done
