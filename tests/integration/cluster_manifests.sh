#!/usr/bin/env bash
# tests/integration/cluster_manifests.sh: deploy/kubernetes without a Kubernetes server.
#   - every file parses as YAML (python3-yaml); `kubectl kustomize` renders the base and both
#     overlays (kubectl: Debian's kubernetes-client, deploy/setup installs it when no kubectl
#     is there); the rendered objects hold together (k8s_tool.py check: selectors, probes,
#     resources, securityContext, references), and the check fails on a broken selector;
#   - the rendered gateway and node run as the kubelet would start them: each in a network
#     namespace of its own (a pod's) on 198.51.100.0/24, their ConfigMap and Secret files
#     laid out with the rendered modes, the rendered env (the downward API's node name and
#     pod address given by the test), the gateway under its securityContext (uid 0, no
#     capability, no_new_privs). PostgreSQL is the test's (tests/lib/pg.sh): its address is
#     the one value of the rendering replaced. The node runs airlockd-test with
#     AIRLOCK_BACKEND=test (jail sandboxes are the jail tests' subject), the rest as rendered;
#   - the probes' endpoints answer on the pods' addresses, the node registers under the
#     Kubernetes node's name at the pod's address, and a creation through the gateway's
#     port lands on it and is routed.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/lib/netns.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/wait.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/pg.sh"
TOOL="$AIRLOCK_SOURCE_DIR/tests/integration/k8s_tool.py"
command -v kubectl >/dev/null || { echo "cluster_manifests: no kubectl (deploy/setup installs Debian's kubernetes-client)" >&2; exit 1; }
[ -x "$AIRLOCK_BIN/airlockd-test" ] || { echo "cluster_manifests: airlockd-test is not built: SKIP"; exit 0; }
command -v setpriv >/dev/null || { echo "cluster_manifests: no setpriv (util-linux)" >&2; exit 1; }
al_world_init cluster_manifests
al_on_cleanup al_pg_stop

al_note "the manifests parse and render (kubectl: $(kubectl version --client 2>/dev/null | head -1))"
mapfile -t FILES < <(find "$AIRLOCK_SOURCE_DIR/deploy/kubernetes" -name '*.yaml' | sort)
al_match "every file is YAML" "parsed ${#FILES[@]} files" python3 "$TOOL" parse "${FILES[@]}"
K="$AL_TMP/kubernetes"
cp -r "$AIRLOCK_SOURCE_DIR/deploy/kubernetes" "$K"
# (Without the Secrets' files a checkout may hold: the test makes its own.)
find "$K" -path '*/secrets/*' ! -name .gitignore -delete
al_fail "kustomize refuses to render without the Secrets' files" kubectl kustomize "$K/base"
TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
KEY=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$K/base/secrets/cluster.token"
printf '%s\n' "$KEY" >"$K/base/secrets/api-key"
printf '*:*:*:airlock:test-password\n' >"$K/base/secrets/pgpass"
printf 'test-password\n' >"$K/overlays/postgres/secrets/postgres-password"
printf 'not a real CA\n' >"$K/overlays/external-database/secrets/root.crt"
for o in base overlays/postgres overlays/external-database; do
  n=$(basename "$o")
  al_ok "kubectl kustomize $o" eval 'kubectl kustomize "$K/$o" >"$AL_TMP/$n.yaml" 2>"$AL_TMP/$n.err"'
  al_ok "... holds together" python3 "$TOOL" check "$AL_TMP/$n.yaml"
done
kinds() { python3 -c 'import sys, yaml; print(" ".join(sorted(d["kind"] + "/" + d["metadata"]["name"].rsplit("-", 1)[0] if d["kind"] in ("ConfigMap", "Secret") else d["kind"] + "/" + d["metadata"]["name"] for d in yaml.safe_load_all(open(sys.argv[1])) if d)))' "$1"; }
al_eq "the postgres overlay's objects" "$(kinds "$AL_TMP/postgres.yaml")" \
  "ConfigMap/airlock-cluster ConfigMap/airlock-config DaemonSet/airlock-node Deployment/airlock-gateway Namespace/airlock PodDisruptionBudget/airlock-gateway Secret/airlock-api-key Secret/airlock-cluster-token Secret/airlock-database Secret/airlock-postgres Service/airlock-gateway Service/airlock-postgres StatefulSet/airlock-postgres"
al_match "the external database is verified over TLS" 'sslmode=verify-full' grep database: "$AL_TMP/external-database.yaml"
al_match "... with its CA in the database Secret" 'root.crt:' cat "$AL_TMP/external-database.yaml"
al_fail "... and has no PostgreSQL of its own" grep -q 'kind: StatefulSet' "$AL_TMP/external-database.yaml"
sed 's/^\(        app.kubernetes.io\/name: airlock-gateway\)$/\1-typo/' "$AL_TMP/postgres.yaml" >"$AL_TMP/broken.yaml"
al_match "the check finds a selector that matches no pod" 'does not match its pods' \
  eval 'python3 "$TOOL" check "$AL_TMP/broken.yaml" || true'

al_note "the rendered gateway and node run (postgres overlay)"
R="$AL_TMP/postgres.yaml"
al_ns_add gw
al_ns_add node
al_link gw 198.51.100.1/24 node 198.51.100.2/24 "k8s$(($$ % 100000))"
al_pg_start || exit 1
# The pods reach the test's PostgreSQL on its unix socket: the gateway, uid 0 without
# CAP_DAC_OVERRIDE, cannot enter the server's 0700 directory. Trust authentication on a
# socket of a server that lives for this test only.
chmod 0711 "$AL_PG_DIR/sock"
sql() { al__pg_as "$AL_PG_BIN/psql" -X -At "$AL_PG_CONNINFO" -c "$1"; }
pod() {
  local target=$1 root=$2
  shift 2
  python3 "$TOOL" pod "$R" "$target" "$root" --set "airlock-cluster/database=$AL_PG_CONNINFO" \
    --bin "/usr/lib/airlock=$AIRLOCK_BIN" "$@"
}
GW_CMD=$(pod Deployment/airlock-gateway "$AL_TMP/gw" --field status.podIP=198.51.100.1) || exit 1
NODE_CMD=$(pod DaemonSet/airlock-node "$AL_TMP/node" --field spec.nodeName=k8s-worker-1 \
  --field status.podIP=198.51.100.2 --argv0 "$AIRLOCK_BIN/airlockd-test" --env AIRLOCK_BACKEND=test) || exit 1
# The test backend runs a sandbox's agent as nobody in the node's state directory.
chmod 0711 "$AL_TMP"
al_match "the gateway runs without capabilities" 'setpriv .*--bounding-set -all .*--no-new-privs' echo "$GW_CMD"
al_fail "the node is privileged (no setpriv)" grep -q setpriv <<<"$NODE_CMD"
eval "al_bg node nsenter --net=/run/netns/$(al_ns node) -- $NODE_CMD"
eval "al_bg gateway nsenter --net=/run/netns/$(al_ns gw) -- $GW_CMD"
al_wait_line node 'is ready' 300 || { tail -30 "$AL_TMP/node.log" >&2; exit 1; }
al_wait_line gateway 'is ready' 300 || { tail -30 "$AL_TMP/gateway.log" >&2; exit 1; }
al_eq "the gateway process has no capability" "$(awk '/^CapEff/ {print $2}' "/proc/$(al_pid gateway)/status")" 0000000000000000
al_eq "... and no_new_privs" "$(awk '/^NoNewPrivs/ {print $2}' "/proc/$(al_pid gateway)/status")" 1
# probe NS IP POD: every httpGet probe of the pod, as the kubelet sends it (to the pod's IP).
probe() {
  local ns=$1 ip=$2 pod=$3
  python3 -c 'import json, sys; [print(p["path"], p["port"]) for p in json.load(open(sys.argv[1]))["probes"].values()]' \
    "$AL_TMP/$pod/pod.json" | while read -r path port; do
    al_nsenter "$ns" curl -s -o /dev/null -w '%{http_code} ' "http://$ip:$port$path"
  done
}
al_eq "the gateway's probes answer" "$(probe gw 198.51.100.1 gw)" "200 200 "
al_eq "the node's probes answer (startup, readiness, liveness)" "$(probe node 198.51.100.2 node)" "200 200 200 "
api() { al_nsenter gw curl -sS -H "X-API-KEY: $KEY" "$@"; }
field() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1]) or "")' "$1"; }
al_check "the node registers as the Kubernetes node, at the pod's address" al_wait_until 60 eval \
  '[ "$(sql "SELECT id, address FROM nodes WHERE lease_expires_at > now()")" = "k8s-worker-1|198.51.100.2:3000" ]'
al_match "the gateway lists it" '"nodeID": *"k8s-worker-1"' api "http://198.51.100.1:3000/admin/cluster/nodes"
al_eq "the node refuses a client without the cluster token" "$(api -o /dev/null -w '%{http_code}' http://198.51.100.2:3000/v2/sandboxes)" 403
OUT=$(api -w '\n%{http_code}' -X POST http://198.51.100.1:3000/v2/sandboxes -d '{"templateID":"base","timeout":120}')
al_eq "a creation through the gateway's port" "$(tail -n1 <<<"$OUT")" 201
[ "$(tail -n1 <<<"$OUT")" = 201 ] || printf "     | %s\n" "$OUT"
ID=$(sed '$d' <<<"$OUT" | field sandboxID)
al_eq "... is placed on the node" "$(sql "SELECT node_id FROM sandboxes WHERE id = '$ID'")" k8s-worker-1
al_eq "... and routed to it" "$(api "http://198.51.100.1:3000/sandboxes/${ID:-none}" | field sandboxID)" "${ID:-(a sandbox id)}"
al_eq "a kill through the gateway" "$(api -o /dev/null -w '%{http_code}' -X DELETE "http://198.51.100.1:3000/sandboxes/$ID")" 204
al_kill gateway TERM
al_kill node TERM
al_check "the node released its lease on SIGTERM" al_wait_until 30 eval \
  '[ "$(sql "SELECT count(*) FROM nodes WHERE lease_expires_at > now()")" = 0 ]'
al_check "the token and the API key are in no log" eval '! grep -rqe "$TOKEN" -e "$KEY" "$AL_TMP"/*.log'
al_done
