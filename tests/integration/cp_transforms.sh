#!/usr/bin/env bash
# tests/integration/cp_transforms.sh: what airlockd does with E2B header transforms
# (network.rules), through the real E2B SDK (tests/e2b/sdk-driver.mjs: create, getInfo,
# updateNetwork, kill) against airlockd with the test backend and airlock-vault as airlockd
# runs it (loopback-only world; the injection itself is intercept_transforms.sh's):
#   - the sandbox's policy decides: a domain no rule with `api_transforms: allow` covers, or a
#     header that routes the request, is a 400 naming it (never quoting the value), and
#     nothing is left in the vault;
#   - an accepted value is sealed in the vault as a secret of the sandbox, bound to the
#     domain; getInfo shows the domain and the header name, "[sealed]" for the value; the
#     value is in neither airlockd's state directory (its database, the vault's file) nor its
#     log;
#   - updateNetwork replaces the secret (the old one deleted), {} clears it, a domain outside
#     the flag is a 400; the kill deletes the sandbox's secrets; "${e2b.secrets.NAME}" names a
#     vault secret without a value passing through the API: the caller's own (Secret.create,
#     keys/<key id>/NAME) before the operator's NAME, never another key's.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vault airlock-agent-dev; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_transforms: $b is not built: SKIP"; exit 0; }
done
E2B_DIR="$AIRLOCK_SOURCE_DIR/tests/e2b"
"$E2B_DIR/setup" || { echo "cp_transforms: the E2B SDK cannot be installed (tests/e2b/setup)" >&2; exit 1; }
cp_world cp_transforms test off
VALUE="tfv-$$-Kq83ZpW0xR5mLs2Nd"
VALUE2="tfv2-$$-Hy61QtB7cJ4vXe9Pw"
B64() { printf %s "$1" | base64 -w0 | tr -d '='; }
cat >"$CP_STATE/policies/tfm.yaml" <<'YAML'
version: 1
name: tfm
description: cp_transforms's policy (API-given headers toward echo.test only)
rules:
  - name: echo
    hosts: [echo.test]
    api_transforms: allow
  - name: github
    hosts: [api.github.test]
    tls: inspect
YAML
cp_start || exit 1

sdk() {
  nsenter --net="/run/netns/$CP_HOSTNS" -- env -u E2B_DEBUG E2B_API_URL="$CP_URL" \
    E2B_SANDBOX_URL="$CP_URL" E2B_API_KEY="$CP_KEY" timeout 120 node "$E2B_DIR/sdk-driver.mjs" "$@"
}
sbid() { python3 -c 'import json,sys; print(json.load(sys.stdin).get("sandboxId",""))'; }
rules() { printf '{"%s":[{"transform":{"headers":{"%s":"%s"}}}]}' "$1" "$2" "$3"; }
create() { sdk create base "{\"metadata\":{\"airlock.policy\":\"tfm\"},\"network\":{\"rules\":$1}}"; }
vault_names() { cp_cli vault ls 2>&1 | grep -o 'sandboxes/[^ ]*' || true; }

al_note "the policy decides which domains may get headers"
OUT=$(create "$(rules api.github.test X-Tf-Key "$VALUE")")
al_match "a transform for api.github.test (no api_transforms): refused, naming it" \
  "'api.github.test'.*api_transforms: allow" echo "$OUT"
al_fail "... the refusal does not repeat the value" grep -q "$VALUE" <<<"$OUT"
OUT=$(create "$(rules echo.test Host "$VALUE")")
al_match "a header that routes the request (Host): refused" "header 'Host' cannot be set" echo "$OUT"
OUT=$(create "$(rules echo.test X-A 'Bearer ${e2b.identity.tokens.aws}')")
al_match "an identity placeholder: refused, saying why" 'placeholder airlock cannot resolve' echo "$OUT"
al_eq "nothing was left in the vault by the refusals" "$(vault_names)" ""

SB=$(create "$(rules echo.test X-Tf-Key "$VALUE")" | sbid)
al_ok "a transform for echo.test: created ($SB)" test -n "$SB"
al_eq "its value is sealed in the vault as a secret of the sandbox" "$(vault_names)" "sandboxes/$SB/c-0"
al_match "... bound to echo.test" 'echo.test' cp_cli vault show "sandboxes/$SB/c-0"
INFO=$(sdk info "$SB")
al_match "getInfo shows the domain and the header name" '"echo.test".*"X-Tf-Key": *"\[sealed\]"' \
  python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["network"]["rules"]))' "$INFO"
al_fail "... never the value" grep -q "$VALUE" <<<"$INFO"
al_fail "... nor the secret's name (the proxy's business)" grep -q "sandboxes/" <<<"$INFO"
al_fail "the value is not in airlockd's state directory (database, vault file, logs)" \
  grep -rqaE "$VALUE|$(B64 "$VALUE")" "$CP_STATE"
al_fail "nor in airlockd's log" grep -qaE "$VALUE|$(B64 "$VALUE")" "$AL_TMP/airlockd.log"

al_note "updateNetwork replaces the transforms"
OUT=$(sdk network "$SB" "{\"rules\":$(rules api.github.test X-Tf-Key "$VALUE2")}")
al_match "a domain outside the flag: 400 naming it" "400.*'api.github.test'" echo "$OUT"
al_eq "... the sandbox's secret stays" "$(vault_names)" "sandboxes/$SB/c-0"
al_match "a new value (SDK)" '"updated": *true' sdk network "$SB" "{\"rules\":$(rules echo.test X-Tf-Key "$VALUE2")}"
al_match "... sealed under the update's id, the replaced one deleted" "^sandboxes/$SB/nu_[0-9a-f]{16}-0\$" vault_names
al_fail "... not in the state directory either" grep -rqaE "$VALUE2|$(B64 "$VALUE2")" "$CP_STATE"
al_match "getInfo: still the domain and header name" '"X-Tf-Key": *"\[sealed\]"' sdk info "$SB"
al_match "an update with no rules clears them" '"updated": *true' sdk network "$SB" '{}'
al_eq "... and deletes the secret" "$(vault_names)" ""

al_note "\${e2b.secrets.NAME}: a vault secret, its value never through the API"
al_ok "airlock vault put tf/key (bound to echo.test)" \
  bash -c "printf %s '$VALUE' | '$AIRLOCK_BIN/airlock' --state-dir '$CP_STATE' vault put tf/key --bound-host echo.test"
S2=$(create "$(rules echo.test X-Tf-Key '${e2b.secrets.tf/key}')" | sbid)
al_ok "created ($S2)" test -n "$S2"
al_eq "no secret of the sandbox was made for it" "$(vault_names)" ""

al_note "\${e2b.secrets.NAME}: the caller's own Secret (Secret.create) before the operator's"
# The vault secret a sandbox's transform reads (airlockd's record: the proxy's business).
tf_secret() {
  sqlite3 "$CP_STATE/airlockd.db" "SELECT doc FROM sandboxes WHERE id='$1'" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["network"]["transforms"][0]["headers"][0]["secret"])'
}
al_match "Secret.create TF/Key through the API (this key: env)" '"name": *"tf/key"' \
  cp_api -X POST "$CP_URL/secrets" -d "{\"name\":\"TF/Key\",\"value\":\"$VALUE2\"}"
al_eq "... kept by the vault in the key's namespace" \
  "$(cp_cli vault ls 2>&1 | grep -o 'keys/[^ ]*')" "keys/env/tf/key"
S4=$(create "$(rules echo.test X-Tf-Key '${e2b.secrets.TF/Key}')" | sbid)
al_ok "a sandbox naming it ($S4)" test -n "$S4"
al_eq "... reads the key's own secret" "$(tf_secret "$S4")" "keys/env/tf/key"
al_eq "... the earlier one still the operator's" "$(tf_secret "$S2")" "tf/key"
OUT=$(create "$(rules echo.test X-Tf-Key '${e2b.secrets.keys/key_0/tf/key}')")
al_match "another key's namespace cannot be named" 'placeholder airlock cannot resolve' echo "$OUT"
al_match "Secret.destroy it" '^204$' \
  cp_api -o /dev/null -w '%{http_code}' -X DELETE "$CP_URL/secrets/tf%2Fkey"
S5=$(create "$(rules echo.test X-Tf-Key '${e2b.secrets.tf/key}')" | sbid)
al_eq "without it, the operator's is read" "$(tf_secret "$S5")" "tf/key"
sdk kill "$S4" >/dev/null
sdk kill "$S5" >/dev/null

al_note "the kill deletes the sandbox's secrets"
S3=$(create "$(rules echo.test X-Tf-Key "$VALUE")" | sbid)
al_ok "a third sandbox ($S3)" test -n "$S3"
al_eq "... its secret" "$(vault_names)" "sandboxes/$S3/c-0"
al_match "kill it (SDK)" '"killed": *true' sdk kill "$S3"
al_eq "... its secret is gone" "$(vault_names)" ""
sdk kill "$SB" >/dev/null
sdk kill "$S2" >/dev/null

al_kill airlockd TERM
al_eq "nothing left (processes, sandbox directories)" "$(cp_leaks_settled)" ""
al_done
