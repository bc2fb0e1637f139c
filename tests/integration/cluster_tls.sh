#!/usr/bin/env bash
# tests/integration/cluster_tls.sh: mutual TLS between a gateway and a node (cluster.tls,
# docs/cluster.md "Mutual TLS"), one PostgreSQL 15 (tests/lib/pg.sh), airlockd-test (test
# backend) on loopback in the test's own namespace, certificates from deploy/cluster-certs:
#   - the node's API port speaks TLS only; a client without a certificate, with one of
#     another CA, with a node's certificate or one that says no usage gets a 403 saying why
#     (its /health needs none); the gateway's certificate is served;
#   - creations through the gateway, the control plane, the data plane (envd files, a
#     WebSocket to a port) and lists reach the node over TLS, with no cluster token; the
#     real E2B SDK's commands and files through the gateway (when tests/e2b/setup ran);
#   - a node presenting another node's certificate, and a gateway that trusts another CA,
#     are refused by the gateway, saying why (the 502 of its connector, the 503 of a
#     creation with no other node);
#   - with the cluster token set as well, nodes want both;
#   - a half-configured cluster.tls and a key readable by others stop airlockd at start.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/pg.sh"
source "$AIRLOCK_SOURCE_DIR/tests/integration/cluster_world.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/certs.sh"
[ -x "$AIRLOCK_BIN/airlockd-test" ] || { echo "cluster_tls: airlockd-test is not built: SKIP"; exit 0; }
CP_SANDBOXES_EXTRA="  max: 2
  cpu_count: 1" cp_world cluster_tls test off
al_on_cleanup al_pg_stop
al_pg_start || exit 1
BASE_CFG=$(cat "$AL_TMP/airlockd.yaml")
CERTS=$AL_TMP/certs
OTHER=$AL_TMP/other
MKCERT=$AIRLOCK_SOURCE_DIR/deploy/cluster-certs
al_ok "the cluster CA" "$MKCERT" "$CERTS" ca
al_ok "a node's certificate" "$MKCERT" "$CERTS" node node-1
al_ok "another node's" "$MKCERT" "$CERTS" node node-9
al_ok "a gateway's" "$MKCERT" "$CERTS" gateway gw-1
al_ok "another CA, and a gateway's certificate of it" eval \
  '"$MKCERT" "$OTHER" ca && "$MKCERT" "$OTHER" gateway gw-1'
# A certificate of the cluster CA that says nothing of its usage (tests/lib/certs.sh's).
cp "$CERTS/ca.pem" "$CERTS/ca.key" "$AL_TMP/" && mkdir -p "$AL_TMP/plain" &&
  cp "$CERTS/ca.key" "$AL_TMP/plain/ca.key" && cp "$CERTS/ca.pem" "$AL_TMP/plain/ca.pem"
al_ok "... and one that says no usage" al_cert_leaf "$AL_TMP/plain" nousage gw-2

# cfg FILE ROLE CERT [LINES...]: the world's configuration with a cluster section, TLS with
# CERT's files (no cluster token).
cfg() {
  local file=$1 role=$2 cert=$3
  shift 3
  {
    printf '%s\n' "$BASE_CFG"
    printf 'cluster:\n  role: %s\n  database: "%s"\n  lease: 3s\n  heartbeat_interval: 300ms\n' \
      "$role" "$AL_PG_CONNINFO"
    printf '  tls:\n    ca_file: %s\n    cert_file: %s.pem\n    key_file: %s.key\n' \
      "${CA:-$CERTS/ca.pem}" "$cert" "$cert"
    printf '  %s\n' "$@"
  } >"$file"
}
GW_STATE=$CP_STATE
N1_STATE=$CP_STATE-node-1

al_note "configuration"
al_eq "a cluster.tls without its key is refused" "$(
  cfg "$AL_TMP/bad.yaml" gateway "$CERTS/gateway-gw-1"
  sed -i '/key_file/d' "$AL_TMP/bad.yaml"
  timeout 60 "$AIRLOCK_BIN/airlockd-test" --listen 127.0.0.1:0 --state-dir "$GW_STATE" \
    --config "$AL_TMP/bad.yaml" >"$AL_TMP/bad.log" 2>&1
  echo $?)" 2
al_match "... saying what it needs" 'needs all of ca_file, cert_file and key_file' cat "$AL_TMP/bad.log"
cp "$CERTS/gateway-gw-1.key" "$AL_TMP/open.key" && chmod 0644 "$AL_TMP/open.key" &&
  cp "$CERTS/gateway-gw-1.pem" "$AL_TMP/open.pem"
cfg "$AL_TMP/bad.yaml" gateway "$AL_TMP/open"
al_eq "a key readable by others stops airlockd" "$(timeout 60 "$AIRLOCK_BIN/airlockd-test" \
  --listen 127.0.0.1:0 --state-dir "$GW_STATE" --config "$AL_TMP/bad.yaml" >"$AL_TMP/bad.log" 2>&1
  echo $?)" 1
al_match "... saying so" 'open.key \(cluster.tls.key_file\) is readable by group or others' cat "$AL_TMP/bad.log"

al_note "a node behind TLS"
cfg "$AL_TMP/node-1.yaml" node "$CERTS/node-node-1" "node_id: node-1"
cfg "$AL_TMP/gateway.yaml" gateway "$CERTS/gateway-gw-1"
start node-1 "$N1_STATE" "$AL_TMP/node-1.yaml" || exit 1
start gateway "$GW_STATE" "$AL_TMP/gateway.yaml" || exit 1
al_check "the node registers" al_wait_until 60 eval \
  '[ "$(sql "SELECT count(*) FROM nodes WHERE id = '"'node-1'"' AND lease_expires_at > now()")" = 1 ]'
al_match "its banner's URL is https" '^https://127\.0\.0\.1:[0-9]+$' echo "$URL_node_1"
NPORT=${URL_node_1##*:}
# node ARGS...: curl to the node by its name (its certificate's), trusting the cluster CA.
node() { api --resolve "node-1:$NPORT:127.0.0.1" --cacert "$CERTS/ca.pem" "$@"; }
NURL=https://node-1:$NPORT
al_eq "plain HTTP to the node gets nothing" "$(in_host curl -s -o /dev/null -w '%{http_code}' \
  -H "X-API-KEY: $CP_KEY" "http://127.0.0.1:$NPORT/v2/sandboxes")" 000
al_eq "a client without a certificate is refused" "$(node -o /dev/null -w '%{http_code}' "$NURL/v2/sandboxes")" 403
al_match "... saying why" 'no certificate was presented' node "$NURL/v2/sandboxes"
al_eq "its /health needs none" "$(node -o /dev/null -w '%{http_code}' "$NURL/health")" 200
al_eq "a gateway's certificate of another CA is refused" "$(node -o /dev/null -w '%{http_code}' \
  --cert "$OTHER/gateway-gw-1.pem" --key "$OTHER/gateway-gw-1.key" "$NURL/v2/sandboxes")" 403
al_match "... saying why" 'not correctly signed by the trusted CA' node \
  --cert "$OTHER/gateway-gw-1.pem" --key "$OTHER/gateway-gw-1.key" "$NURL/v2/sandboxes"
al_eq "a node's certificate is not a gateway's" "$(node -o /dev/null -w '%{http_code}' \
  --cert "$CERTS/node-node-9.pem" --key "$CERTS/node-node-9.key" "$NURL/v2/sandboxes")" 403
al_match "... saying why" 'does not match the extendedKeyUsage' node \
  --cert "$CERTS/node-node-9.pem" --key "$CERTS/node-node-9.key" "$NURL/v2/sandboxes"
al_eq "nor one that says no usage" "$(node -o /dev/null -w '%{http_code}' \
  --cert "$AL_TMP/plain/nousage.pem" --key "$AL_TMP/plain/nousage.key" "$NURL/v2/sandboxes")" 403
al_eq "the gateway's certificate is served" "$(node -o /dev/null -w '%{http_code}' \
  --cert "$CERTS/gateway-gw-1.pem" --key "$CERTS/gateway-gw-1.key" "$NURL/v2/sandboxes")" 200
al_match "the node logs the refusals" 'refused GET /v2/sandboxes from a client without a gateway.s certificate' \
  cat "$AL_TMP/node-1.log"

al_note "through the gateway, over TLS"
OUT=$(api -w '\n%{http_code}' -X POST "$URL_gateway/v2/sandboxes" -d '{"templateID":"base","timeout":600}')
al_eq "a creation through the gateway" "$(tail -n1 <<<"$OUT")" 201
A=$(sed '$d' <<<"$OUT" | field sandboxID)
TOKA=$(sed '$d' <<<"$OUT" | field envdAccessToken)
TT=$(sed '$d' <<<"$OUT" | field trafficAccessToken)
al_eq "... placed on the node" "$(sql "SELECT node_id FROM sandboxes WHERE id = '$A'")" node-1
al_eq "GET /sandboxes/{id} reaches it" "$(api "$URL_gateway/sandboxes/$A" | field sandboxID)" "$A"
al_eq "the list too" "$(api -f "$URL_gateway/v2/sandboxes" | python3 -c 'import json,sys; print(" ".join(s["sandboxID"] for s in json.load(sys.stdin)))')" "$A"
head -c 300000 /dev/urandom | od -An -tx1 >"$AL_TMP/up.txt"
al_ok "a file goes up through the gateway (data plane)" api -f -H "E2b-Sandbox-Id: $A" \
  -H "E2b-Sandbox-Port: 49983" -H "X-Access-Token: $TOKA" \
  -F "file=@$AL_TMP/up.txt;filename=up.txt" "$URL_gateway/files?path=up.txt" -o /dev/null
al_ok "... and comes down the same" eval 'api -f -H "E2b-Sandbox-Id: $A" -H "E2b-Sandbox-Port: 49983" \
  -H "X-Access-Token: $TOKA" "$URL_gateway/files?path=up.txt" | cmp - "$AL_TMP/up.txt"'
al_check "the gateway dials the node through its connector" test -S "$GW_STATE/run/cluster-tls/0.sock"
# A WebSocket to a port of the sandbox (the test backend's agent forwards to the host's
# loopback, where the test's echo server listens): an upgrade over the node's TLS.
FT=$AIRLOCK_SOURCE_DIR/tests/integration/fwd_tool.py
al_bg ws nsenter --net="/run/netns/$CP_HOSTNS" python3 "$FT" ws-server 18765
al_check "an echo server" al_wait_until 30 eval 'in_host bash -c "exec 3<>/dev/tcp/127.0.0.1/18765"'
GWADDR=${URL_gateway#http://}
al_match "a WebSocket to the sandbox's port through the gateway" '^WS OK$' \
  in_host python3 "$FT" ws-client "$GWADDR" "$GWADDR" "E2b-Sandbox-Id: $A" "E2b-Sandbox-Port: 18765" \
  "E2B-Traffic-Access-Token: $TT"
al_kill ws
SDK=$AIRLOCK_SOURCE_DIR/tests/e2b/node_modules/e2b/dist/index.mjs
if [ -f "$SDK" ] && command -v node >/dev/null; then
  # The real SDK (e2b 2.51) against the gateway as a user's program runs it: a creation,
  # a command (Connect-RPC streams), a file written and read back (envd), getInfo, kill.
  al_eq "the E2B SDK: a command and a file through the gateway, over the node's TLS" \
    "$(in_host env -u E2B_DEBUG E2B_API_URL="$URL_gateway" E2B_SANDBOX_URL="$URL_gateway" \
      E2B_API_KEY="$CP_KEY" node --input-type=module -e '
      const { Sandbox } = await import(process.argv[1]);
      const s = await Sandbox.create("base", { timeoutMs: 120000 });
      const r = await s.commands.run("echo hello $((6 * 7))");
      await s.files.write("sdk.txt", "written by the SDK");
      const back = await s.files.read("sdk.txt");
      const info = await Sandbox.getInfo(s.sandboxId);
      await s.kill();
      console.log([r.exitCode, r.stdout.trim(), back, info.sandboxId === s.sandboxId].join("|"));' \
      "$SDK" 2>&1)" "0|hello 42|written by the SDK|true"
else
  al_note "the E2B SDK is not installed (tests/e2b/setup): its commands and files are not run"
fi
al_eq "DELETE through the gateway" "$(code -X DELETE "$URL_gateway/sandboxes/$A")" 204

al_note "a node that is not who it says"
al_kill node-1 TERM
# The same node id and port, another node's certificate.
LISTEN=127.0.0.1:$NPORT cfg "$AL_TMP/node-1.yaml" node "$CERTS/node-node-9" "node_id: node-1"
LISTEN=127.0.0.1:$NPORT start node-1 "$N1_STATE" "$AL_TMP/node-1.yaml" || exit 1
al_check "the node registers again" al_wait_until 60 eval \
  '[ "$(sql "SELECT count(*) FROM nodes WHERE id = '"'node-1'"' AND lease_expires_at > now()")" = 1 ]'
OUT=$(api -w '\n%{http_code}' -X POST "$URL_gateway/v2/sandboxes" -d '{"templateID":"base","timeout":600}')
al_eq "a creation is refused by the gateway (no other node)" "$(tail -n1 <<<"$OUT")" 503
al_match "... saying the node's certificate does not name it" \
  'certificate of node-1 does not verify.*does not name this host' echo "$OUT"
al_match "the gateway logs it" 'cluster tls: the TLS handshake with node node-1 .* does not verify' \
  cat "$AL_TMP/gateway.log"
al_kill node-1 TERM
cfg "$AL_TMP/node-1.yaml" node "$CERTS/node-node-1" "node_id: node-1"
LISTEN=127.0.0.1:$NPORT start node-1 "$N1_STATE" "$AL_TMP/node-1.yaml" || exit 1

al_note "a gateway that trusts another CA"
al_kill gateway TERM
CA=$OTHER/ca.pem cfg "$AL_TMP/gateway.yaml" gateway "$CERTS/gateway-gw-1"
start gateway "$GW_STATE" "$AL_TMP/gateway.yaml" || exit 1
al_check "the node is live" al_wait_until 60 eval \
  '[ "$(sql "SELECT count(*) FROM nodes WHERE id = '"'node-1'"' AND lease_expires_at > now()")" = 1 ]'
OUT=$(api -w '\n%{http_code}' -X POST "$URL_gateway/v2/sandboxes" -d '{"templateID":"base","timeout":600}')
al_eq "a creation is refused by the gateway (no other node)" "$(tail -n1 <<<"$OUT")" 503
al_match "... saying the node's certificate is not of its CA" \
  'certificate of node-1 does not verify.*not correctly signed by the trusted CA.*trusted roots' echo "$OUT"
al_kill gateway TERM
cfg "$AL_TMP/gateway.yaml" gateway "$CERTS/gateway-gw-1"
start gateway "$GW_STATE" "$AL_TMP/gateway.yaml" || exit 1
OUT=$(api -w '\n%{http_code}' -X POST "$URL_gateway/v2/sandboxes" -d '{"templateID":"base","timeout":600}')
al_eq "with the cluster CA again, creations work" "$(tail -n1 <<<"$OUT")" 201

al_note "the cluster token as well"
al_kill gateway TERM
al_kill node-1 TERM
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$AL_TMP/cluster.token"
chmod 0600 "$AL_TMP/cluster.token"
cfg "$AL_TMP/node-1.yaml" node "$CERTS/node-node-1" "node_id: node-1" "token_file: $AL_TMP/cluster.token"
cfg "$AL_TMP/gateway.yaml" gateway "$CERTS/gateway-gw-1" "token_file: $AL_TMP/cluster.token"
LISTEN=127.0.0.1:$NPORT start node-1 "$N1_STATE" "$AL_TMP/node-1.yaml" || exit 1
start gateway "$GW_STATE" "$AL_TMP/gateway.yaml" || exit 1
al_check "the node is live" al_wait_until 60 eval \
  '[ "$(sql "SELECT count(*) FROM nodes WHERE id = '"'node-1'"' AND lease_expires_at > now()")" = 1 ]'
OUT=$(api -w '\n%{http_code}' -X POST "$URL_gateway/v2/sandboxes" -d '{"templateID":"base","timeout":600}')
al_eq "a creation through the gateway (certificate and token)" "$(tail -n1 <<<"$OUT")" 201
GW_CERT=(--cert "$CERTS/gateway-gw-1.pem" --key "$CERTS/gateway-gw-1.key")
al_eq "the node wants the token too" "$(node -o /dev/null -w '%{http_code}' "${GW_CERT[@]}" "$NURL/v2/sandboxes")" 403
al_eq "... and takes both" "$(node -o /dev/null -w '%{http_code}' "${GW_CERT[@]}" \
  -H "X-Airlock-Cluster-Token: $TOKEN" "$NURL/v2/sandboxes")" 200
al_eq "... but not the token without the certificate" "$(node -o /dev/null -w '%{http_code}' \
  -H "X-Airlock-Cluster-Token: $TOKEN" "$NURL/v2/sandboxes")" 403

al_kill gateway TERM
al_kill node-1 TERM
al_check "no key is in any log" eval '! grep -rlq -- "PRIVATE KEY" "$AL_TMP"/*.log'
al_check "nor the token" eval '! grep -rq -- "$TOKEN" "$AL_TMP"/*.log'
al_done
