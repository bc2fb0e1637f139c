#!/usr/bin/env bash
# tests/integration/cluster_gateway.sh: one PostgreSQL 15 (tests/lib/pg.sh), two nodes and a
# gateway, all airlockd-test (test backend) on loopback in the test's own namespace:
#   - nodes refuse API requests over TCP without the cluster token (403), /health needs none;
#   - creations through the gateway spread over the nodes (placement in PostgreSQL), the
#     owner is recorded under the sandbox's id, the control plane (GET, DELETE) and the data
#     plane (envd files by the sandbox headers and by a "<port>-<id>.<domain>" Host) reach the
#     owner node through the gateway;
#   - lists across nodes (GET /v2/sandboxes with filters and pages of nextToken, v1, the
#     metrics of many; the real SDK's Sandbox.list when tests/e2b/setup installed it);
#   - a start that fails on a node is retried once on another node;
#   - cordon: a cordoned node gets no placements (`airlock cluster cordon`, uncordon); drain
#     reports the sandboxes that remain, and ends once they are gone;
#   - a sandbox that ends on its node (not through the gateway) is forgotten by the database
#     through the node's heartbeats;
#   - a PostgreSQL outage: creations 503, routed sandboxes keep answering, then recovery;
#   - kill -9 of a node: once its lease is gone its sandboxes answer 404 (control plane) and
#     E2B's 502 (data plane), lists leave them out, and each gets a node_lost event on the
#     gateway (/events, and a webhook to a receiver on the test's loopback).
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/pg.sh"
source "$AIRLOCK_SOURCE_DIR/tests/integration/cluster_world.sh"
[ -x "$AIRLOCK_BIN/airlockd-test" ] || { echo "cluster_gateway: airlockd-test is not built: SKIP"; exit 0; }
[ "$(nproc)" -ge 2 ] || { echo "cluster_gateway: needs 2 CPUs (a node's capacity): SKIP"; exit 0; }
# Two sandbox slots per node: sandboxes.max 2, one vCPU each (nodes have 2 CPUs or more).
CP_SANDBOXES_EXTRA="  max: 2
  cpu_count: 1
  metrics_interval: 1s" cp_world cluster_gateway test off
al_on_cleanup al_pg_stop
al_pg_start || exit 1
BASE_CFG=$(cat "$AL_TMP/airlockd.yaml")
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$AL_TMP/cluster.token"
chmod 0600 "$AL_TMP/cluster.token"
DOMAIN=sandboxes.test

# cfg FILE ROLE [LINES...]: the world's configuration with an api and a cluster section.
cfg() {
  local file=$1 role=$2
  shift 2
  {
    printf '%s\n' "$BASE_CFG"
    printf 'api:\n  domain: %s\n' "$DOMAIN"
    printf 'cluster:\n  role: %s\n  database: "%s"\n  token_file: %s\n  lease: 3s\n  heartbeat_interval: 300ms\n' \
      "$role" "$AL_PG_CONNINFO" "$AL_TMP/cluster.token"
    printf '  %s\n' "$@"
  } >"$file"
}
gwcli() { "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE" "$@"; }
owner() { sql "SELECT node_id FROM sandboxes WHERE id = '$1'"; }
live() { sql "SELECT count(*) FROM nodes WHERE lease_expires_at > now() AND id LIKE 'node-%'"; }
# create [BODY]: POST /v2/sandboxes through the gateway; "<status> <sandboxID> <envdAccessToken>".
create() {
  local out
  local body=${1:-'{"templateID":"base","timeout":600}'}
  out=$(api -w '\n%{http_code}' -X POST "$URL_gateway/v2/sandboxes" -d "$body")
  printf '%s %s %s\n' "$(tail -n1 <<<"$out")" "$(sed '$d' <<<"$out" | field sandboxID)" \
    "$(sed '$d' <<<"$out" | field envdAccessToken)"
}
GW_STATE=$CP_STATE
N1_STATE=$CP_STATE-node-1
N2_STATE=$CP_STATE-node-2

al_note "two nodes and a gateway"
al_eq "a gateway without the cluster token is refused" "$(
  cfg "$AL_TMP/bad.yaml" gateway
  sed -i '/token_file/d' "$AL_TMP/bad.yaml"
  timeout 60 "$AIRLOCK_BIN/airlockd-test" --listen 127.0.0.1:0 --state-dir "$GW_STATE" \
    --config "$AL_TMP/bad.yaml" >"$AL_TMP/bad.log" 2>&1
  echo $?)" 2
al_match "... saying what it needs" 'needs the cluster token' cat "$AL_TMP/bad.log"
cfg "$AL_TMP/node-1.yaml" node "node_id: node-1"
cfg "$AL_TMP/node-2.yaml" node "node_id: node-2"
cfg "$AL_TMP/gateway.yaml" gateway
# The gateway's webhooks reach a receiver on the test's own loopback (plain HTTP).
printf 'webhooks:\n  allow_private: true\n  allow_http: true\n' >>"$AL_TMP/gateway.yaml"
HOOK_SECRET=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '{"/lost": "%s"}\n' "$HOOK_SECRET" >"$AL_TMP/secrets.json"
al_bg recv nsenter --net="/run/netns/$CP_HOSTNS" python3 "$AIRLOCK_SOURCE_DIR/tests/integration/webhook_receiver.py" 127.0.0.1 18080 \
  --secrets "$AL_TMP/secrets.json" --log "$AL_TMP/hooks.jsonl"
al_wait_line recv LISTEN || exit 1
start node-1 "$N1_STATE" "$AL_TMP/node-1.yaml" || exit 1
start node-2 "$N2_STATE" "$AL_TMP/node-2.yaml" || exit 1
start gateway "$GW_STATE" "$AL_TMP/gateway.yaml" || exit 1
al_check "both nodes are live" al_wait_until 60 eval '[ "$(live)" = 2 ]'
al_eq "a node refuses API requests without the cluster token" "$(code "$URL_node_1/v2/sandboxes")" 403
al_match "... saying so" 'serves the cluster.s gateways only' api "$URL_node_1/v2/sandboxes"
al_eq "... and a wrong token" "$(code -H "X-Airlock-Cluster-Token: x$TOKEN" "$URL_node_1/v2/sandboxes")" 403
al_eq "... but takes the gateways'" "$(code -H "X-Airlock-Cluster-Token: $TOKEN" "$URL_node_1/v2/sandboxes")" 200
al_eq "its /health needs none" "$(in_host curl -s -o /dev/null -w '%{http_code}' "$URL_node_1/health")" 200
al_eq "the gateway's CLI lists the nodes" "$(gwcli cluster nodes | awk 'NR > 1 {print $1, $3, $4}' | sort | tr '\n' ' ')" \
  "node-1 valid no node-2 valid no "

al_note "creations spread, and are routed"
read -r ST A TOKA <<<"$(create)"
al_eq "a creation through the gateway" "$ST" 201
read -r ST B TOKB <<<"$(create)"
al_eq "a second one" "$ST" 201
al_eq "one on each node (the least loaded first)" "$( (owner "$A"; owner "$B") | sort | tr '\n' ' ')" "node-1 node-2 "
al_eq "no reservation is left" "$(sql "SELECT count(*) FROM sandboxes WHERE id LIKE 'pending-%'")" 0
NA=$(owner "$A")
NB=$(owner "$B")
al_eq "GET /sandboxes/{id} reaches its node" "$(api "$URL_gateway/sandboxes/$A" | field sandboxID)" "$A"
al_eq "... for the other too" "$(api "$URL_gateway/sandboxes/$B" | field sandboxID)" "$B"
al_eq "a sandbox no node has is a 404" "$(code "$URL_gateway/sandboxes/nosuchsandbox0000000")" 404
printf 'through the gateway to %s\n' "$A" >"$AL_TMP/up.txt"
al_ok "a file goes up through the gateway (sandbox headers)" api -f -H "E2b-Sandbox-Id: $A" \
  -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $TOKA" \
  -F "file=@$AL_TMP/up.txt;filename=up.txt" "$URL_gateway/files?path=up.txt" -o /dev/null
al_eq "... and comes down again" "$(api -f -H "E2b-Sandbox-Id: $A" -H "E2b-Sandbox-Port: 49983" \
  -H "X-Access-Token: $TOKA" "$URL_gateway/files?path=up.txt")" "through the gateway to $A"
GWPORT=${URL_gateway##*:}
al_eq "... and by a getHost name" "$(in_host curl -sS -f --resolve "49983-$A.$DOMAIN:$GWPORT:127.0.0.1" \
  -H "X-Access-Token: $TOKA" "http://49983-$A.$DOMAIN:$GWPORT/files?path=up.txt")" \
  "through the gateway to $A"
al_check "the file is on the owner node" test -f "$CP_STATE-$NA/sandboxes/$A/home/up.txt"
al_eq "a client cannot pass its own cluster token on" "$(api -H "E2b-Sandbox-Id: $A" -H "E2b-Sandbox-Port: 49983" \
  -H "X-Access-Token: $TOKA" -H "X-Airlock-Cluster-Token: forged" -o /dev/null -w '%{http_code}' \
  "$URL_gateway/files?path=up.txt")" 200

al_note "lists across nodes"
read -r ST M1 _ <<<"$(create '{"templateID":"base","timeout":600,"metadata":{"team":"x y"}}')"
al_eq "a creation with metadata" "$ST" 201
read -r ST M2 _ <<<"$(create '{"templateID":"base","timeout":600,"metadata":{"team":"x y"}}')"
al_eq "... and another" "$ST" 201
al_eq "... one on each node" "$( (owner "$M1"; owner "$M2") | sort | tr '\n' ' ')" "node-1 node-2 "
ALL=$(printf '%s\n' "$A" "$B" "$M1" "$M2" | sort | tr '\n' ' ')
# ids LIST-JSON: the sandboxIDs of a list, sorted, on one line.
ids() { python3 -c 'import json,sys; print(" ".join(sorted(s["sandboxID"] for s in json.load(sys.stdin))), end=" ")'; }
al_eq "GET /v2/sandboxes through the gateway lists the sandboxes of both nodes" \
  "$(api -f "$URL_gateway/v2/sandboxes" | ids)" "$ALL"
al_eq "... and so does GET /sandboxes (v1)" "$(api -f "$URL_gateway/sandboxes" | ids)" "$ALL"
al_eq "... each node itself has only its own" "$(api -f -H "X-Airlock-Cluster-Token: $TOKEN" "$URL_node_1/v2/sandboxes" | ids)" \
  "$(for s in $ALL; do [ "$(owner "$s")" = node-1 ] && echo "$s"; done | sort | tr '\n' ' ')"
al_fail "the nodes' start times in nanoseconds stay between gateway and node" \
  eval 'api -f "$URL_gateway/v2/sandboxes" | grep -q airlockStartedNs'
al_eq "a metadata filter (the SDK's encoding) across nodes" \
  "$(api -f "$URL_gateway/v2/sandboxes?metadata=team%3Dx%252520y" | ids)" "$(printf '%s\n' "$M1" "$M2" | sort | tr '\n' ' ')"
al_eq "... and with v1" "$(api -f "$URL_gateway/sandboxes?metadata=team%3Dx%252520y" | ids)" \
  "$(printf '%s\n' "$M1" "$M2" | sort | tr '\n' ' ')"
al_eq "a filter nothing matches" "$(api -f "$URL_gateway/v2/sandboxes?metadata=team%3Dz" | ids)" " "
# Pages of one across both nodes: each sandbox once, newest first, as one airlockd pages.
walk() {
  local tok="" order=${1:-} seen="" page hdr
  for _ in 1 2 3 4 5 6 7 8; do
    hdr=$(mktemp -p "$AL_TMP")
    page=$(api -f -D "$hdr" "$URL_gateway/v2/sandboxes?limit=1${order:+&order=$order}${tok:+&nextToken=$tok}") || return 1
    seen+="$(ids <<<"$page")"
    tok=$(sed -n 's/^x-next-token: *//Ip' "$hdr" | tr -d '\r')
    rm -f "$hdr"
    [ -n "$tok" ] || break
  done
  printf '%s' "$seen"
}
FULL=$(api -f "$URL_gateway/v2/sandboxes" | python3 -c 'import json,sys; print(" ".join(s["sandboxID"] for s in json.load(sys.stdin)), end=" ")')
al_eq "pages of one (nextToken) walk all sandboxes of both nodes in the list's order" "$(walk)" "$FULL"
al_eq "... and in ascending order" "$(walk asc)" "$(python3 -c 'import sys; print(" ".join(reversed(sys.argv[1].split())), end=" ")' "$FULL")"
al_eq "a bad query is refused by the gateway" "$(code "$URL_gateway/v2/sandboxes?limit=0")" 400
al_eq "a token no server issued too" "$(code "$URL_gateway/v2/sandboxes?nextToken=bad")" 400
al_eq "a key the cluster does not know lists nothing" \
  "$(in_host curl -s -o /dev/null -w '%{http_code}' -H 'X-API-KEY: e2b_notakey' "$URL_gateway/v2/sandboxes")" 401
metrics_of() { api -f "$URL_gateway/sandboxes/metrics?sandbox_ids=$A,$B,nosuchsandbox0000000" |
  python3 -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin)["sandboxes"])), end=" ")'; }
al_check "GET /sandboxes/metrics merges the nodes' answers" \
  al_wait_until 30 eval '[ "$(metrics_of)" = "$(printf "%s\n" "$A" "$B" | sort | tr "\n" " ")" ]'
SDK=$AIRLOCK_SOURCE_DIR/tests/e2b/node_modules/e2b/dist/index.mjs
if [ -f "$SDK" ] && command -v node >/dev/null; then
  # The real SDK's paginator (e2b 2.51: GET /v2/sandboxes, x-next-token) through the gateway.
  al_eq "the E2B SDK's Sandbox.list pages through both nodes" "$(in_host env E2B_API_URL="$URL_gateway" \
    E2B_API_KEY="$CP_KEY" node --input-type=module -e '
      const { Sandbox } = await import(process.argv[1]);
      const seen = [];
      const p = Sandbox.list({ limit: 1 });
      while (p.hasNext) for (const s of await p.nextItems()) seen.push(s.sandboxId);
      const f = Sandbox.list({ query: { metadata: { team: "x y" } } });
      const tagged = (await f.nextItems()).map((s) => s.sandboxId).sort();
      console.log(seen.sort().join(" ") + " | " + tagged.join(" "));' "$SDK" 2>&1)" \
    "$(sed 's/ $//' <<<"$ALL") | $(printf '%s\n' "$M1" "$M2" | sort | tr '\n' ' ' | sed 's/ $//')"
else
  al_note "the E2B SDK is not installed (tests/e2b/setup): its Sandbox.list is not run"
fi
al_eq "the tagged ones are killed" "$(code -X DELETE "$URL_gateway/sandboxes/$M1") $(code -X DELETE "$URL_gateway/sandboxes/$M2")" "204 204"
al_check "... and their placements end" al_wait_until 30 eval '[ -z "$(owner "$M1")$(owner "$M2")" ]'

al_note "cordon"
al_ok "cordon $NA (the gateway's CLI)" gwcli cluster cordon "$NA"
read -r ST C _ <<<"$(create)"
al_eq "a creation while $NA is cordoned" "$ST" 201
al_eq "... goes to $NB" "$(owner "$C")" "$NB"
OUT=$(api -X POST "$URL_gateway/v2/sandboxes" -d '{"templateID":"base"}' -w '\n%{http_code}')
al_eq "$NB is full and $NA cordoned: 503" "$(tail -n1 <<<"$OUT")" 503
al_match "... saying why" '1 are cordoned' echo "$OUT"
al_ok "uncordon $NA" gwcli cluster uncordon "$NA"
read -r ST D _ <<<"$(create)"
al_eq "... then it takes creations again" "$(owner "$D")" "$NA"

al_note "drain"
al_fail "drain $NB: its sandboxes remain" gwcli cluster drain "$NB" --timeout 1s
al_match "... named" "$B" eval 'gwcli cluster drain "$NB" --timeout 0 || true'
al_eq "a kill through the gateway" "$(code -X DELETE "$URL_gateway/sandboxes/$C")" 204
al_check "... ends the placement" al_wait_until 30 eval '[ -z "$(owner "$C")" ]'
al_eq "... and the sandbox is gone" "$(code "$URL_gateway/sandboxes/$C")" 404
# B ends on its node by itself (a kill on the node's own socket, as a timeout would): the
# node's heartbeats tell the database, after the grace a young placement gets.
al_ok "B killed on its node" "$AIRLOCK_BIN/airlock" --state-dir "$CP_STATE-$NB" sandbox kill "$B"
sql "UPDATE sandboxes SET placed_at = now() - interval '2 minutes' WHERE id = '$B'" >/dev/null
al_ok "drain $NB ends once it holds nothing" gwcli cluster drain "$NB" --timeout 60s
al_eq "... the database forgot B" "$(owner "$B")" ""
al_eq "... and booked its slot back" "$(sql "SELECT sandboxes_booked FROM nodes WHERE id = '$NB'")" 0
al_ok "uncordon $NB" gwcli cluster uncordon "$NB"

al_note "a failed start is tried once more elsewhere"
# A node that holds a lease but does not serve (its address refuses): the least loaded.
sql "INSERT INTO nodes (id, address, instance, cpu, memory_bytes, sandboxes_max, airlockd_version,
     schema_version, lease_expires_at, templates) VALUES ('dead-1', '127.0.0.1:1', 'x', 64,
     1099511627776, 100, 'test', 2, now() + interval '1 hour', '{\"base\": 5}')" >/dev/null
read -r ST E _ <<<"$(create)"
al_eq "the creation succeeds" "$ST" 201
al_eq "... on a real node" "$(owner "$E")" "$NB"
al_check "the failure on dead-1 was retried" grep -q 'dead-1 failed.*trying another node' "$AL_TMP/gateway.log"
al_eq "... and its booking went back" "$(sql "SELECT sandboxes_booked FROM nodes WHERE id = 'dead-1'")" 0
# Committed before the outage below (the test's server commits asynchronously, and its
# immediate stop would lose a young commit), and seen by the gateway: a node list it answers
# is its snapshot of the nodes through an outage.
sql "SET synchronous_commit = on; DELETE FROM nodes WHERE id = 'dead-1'" >/dev/null
al_fail "the gateway sees dead-1 gone" eval 'gwcli cluster nodes | grep -q dead-1'

al_note "PostgreSQL goes away"
al_pg_kill_server
al_eq "creations are refused" "$(create | cut -d' ' -f1)" 503
al_eq "a routed sandbox keeps answering (data plane)" "$(api -f -H "E2b-Sandbox-Id: $A" -H "E2b-Sandbox-Port: 49983" \
  -H "X-Access-Token: $TOKA" "$URL_gateway/files?path=up.txt")" "through the gateway to $A"
al_eq "... and its control plane" "$(api "$URL_gateway/sandboxes/$A" | field sandboxID)" "$A"
al_match "the list asks the nodes live at the gateway's last look" "$A" eval 'api "$URL_gateway/v2/sandboxes"'
al_pg_start_again || exit 1
# One creation at a time until the database answers again; the one that worked is killed.
created_again() {
  local st id
  read -r st id _ <<<"$(create)"
  [ "$st" = 201 ] && printf '%s\n' "$id" >"$AL_TMP/again"
}
al_check "creations work again" al_wait_until 60 created_again
al_eq "... (that one is killed again)" "$(code -X DELETE "$URL_gateway/sandboxes/$(cat "$AL_TMP/again")")" 204

al_note "kill -9 of a node"
al_eq "a webhook for node_lost events on the gateway" "$(code -X POST "$URL_gateway/events/webhooks" -d '{
  "name": "lost", "url": "http://127.0.0.1:18080/lost", "enabled": true,
  "events": ["sandbox.lifecycle.node_lost"], "signatureSecret": "'"$HOOK_SECRET"'"}')" 201
al_kill "$NA" KILL
al_check "its lease runs out" al_wait_until 30 eval '[ "$(sql "SELECT lease_expires_at <= now() FROM nodes WHERE id = '"'$NA'"'")" = t ]'
al_check "its sandboxes answer 404 on the control plane" \
  al_wait_until 30 eval '[ "$(code "$URL_gateway/sandboxes/$A")" = 404 ]'
al_match "... saying why" 'lost its lease' api "$URL_gateway/sandboxes/$A"
OUT=$(api -H "E2b-Sandbox-Id: $A" -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $TOKA" \
  -w '\n%{http_code}' "$URL_gateway/files?path=up.txt")
al_eq "... and E2B's 502 on the data plane" "$(tail -n1 <<<"$OUT")" 502
al_match "... 'The sandbox was not found'" 'The sandbox was not found' echo "$OUT"
read -r ST F _ <<<"$(create)"
al_eq "new creations go to the live node" "$(owner "$F")" "$NB"
# lost ID: the last node_lost event of sandbox ID on the gateway: "<node_id> <cause>".
lost() { api -f "$URL_gateway/events/sandboxes/$1?types=sandbox.lifecycle.node_lost&limit=1" |
  python3 -c 'import json,sys; e=json.load(sys.stdin); d=e[0]["eventData"] if e else {}; print(d.get("node_id", ""), d.get("cause", ""), end="")'; }
al_check "each sandbox of $NA gets a node_lost event on the gateway" \
  al_wait_until 30 eval '[ "$(lost "$A")" = "$NA node" ] && [ "$(lost "$D")" = "$NA node" ]'
al_match "... saying why" 'lost its lease at .*last heartbeat' eval \
  'api -f "$URL_gateway/events/sandboxes/$A?types=sandbox.lifecycle.node_lost&limit=1"'
al_eq "... none for the live node's" "$(lost "$F")" " "
al_check "the webhook delivers it, signed" al_wait_until 30 eval \
  'grep -q "\"sig_ok\": true.*\"type\": \"sandbox.lifecycle.node_lost\", \"sandbox\": \"$A\"" "$AL_TMP/hooks.jsonl"'
al_match "the gateway logs the loss" "node $NA lost its lease: [0-9]+ of its sandboxes" cat "$AL_TMP/gateway.log"
OUT=$(api "$URL_gateway/v2/sandboxes")
al_eq "the list has the live node's sandboxes and none of the lost one's" "$(ids <<<"$OUT" || echo "$OUT")" \
  "$(sql "SELECT id FROM sandboxes WHERE node_id = '$NB' ORDER BY id" | tr '\n' ' ')"
al_match "... (the lost node still holds placements)" '^[1-9]' sql "SELECT count(*) FROM sandboxes WHERE node_id = '$NA'"

al_kill gateway TERM
al_kill "$NB" TERM
al_check "the password-less conninfo and the token are in no log" eval '! grep -rq -- "$TOKEN" "$AL_TMP"/*.log'
al_done
