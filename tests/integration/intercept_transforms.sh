#!/usr/bin/env bash
# tests/integration/intercept_transforms.sh: API-given header transforms (E2B network.rules,
# as airlockd hands them to airlock-egress: the narrowing's "transforms", each header's value
# a vault secret of the sandbox) in the interception world (intercept_world.sh).
#   - Only a rule with `api_transforms: allow` covers a domain: a registration or an update
#     naming another is a 400 naming it, and nothing changes.
#   - The header reaches echo.test (an exact transform), replacing the sandbox's own copy,
#     and api.github.test (a wildcard one, *.github.test); ws.test (same upstream, a rule
#     without the flag) never gets one; the echo comes back scrubbed; the audit names the
#     header, the secret and its id, never the value.
#   - An update replaces the transforms (new value), one without them removes the header.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/intercept_world.sh"
TF_VALUE="tfv-$$-Kq83ZpW0xR5mLs2NdQ"
TF_WILD="tfw-$$-Hy61QtB7cJ4vXe9PwR"
TF_NEXT="tfn-$$-Ma27LsE5nF8kRt0YuS"
IW_VAULT_EXTRA=(--secret "sandboxes/sbx-tf/c-0=$TF_VALUE@echo.test"
  --secret "sandboxes/sbx-tf/c-1=$TF_WILD@api.github.test"
  --secret "sandboxes/sbx-tf/nu_1-0=$TF_NEXT@echo.test")
ew_world icpttf

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: intercept-transforms-test
rules:
  - name: echo
    hosts: [echo.test]
    api_transforms: allow
  - name: github
    hosts: ["**.github.test"]
    api_transforms: allow
  - name: ws
    hosts: [ws.test]
    tls: inspect
YAML
# register ID N NETWORK-JSON: sandbox N with the policy above, narrowed by NETWORK.
register() {
  local body
  body=$(python3 -c 'import json,sys; print(json.dumps({"id": sys.argv[1], "template": "base",
    "addresses": ["10.200.%s.2" % sys.argv[2]], "policy": {"yaml": open(sys.argv[3]).read(),
    "origin": sys.argv[3]}, "network": json.loads(sys.argv[4])}))' "$1" "$2" "$EW_TMP/policy.yaml" "$3")
  ew_admin POST /v1/sandboxes "$body"
}
tf() { printf '{"domain":"%s","headers":[{"name":"X-Tf-Key","secret":"%s"}]}' "$1" "$2"; }
# got PATH: the X-Tf-Key the upstream received with the request for PATH ("none" without).
got() {
  python3 - "$EW_TMP/iwup.log" "$1" <<'PY'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("path") == sys.argv[2]:
        h = {k.lower(): v for k, v in r["headers"].items()}
        print(h.get("x-tf-key", "none"))
PY
}

ew_note "the policy decides which domains may get headers"
ew_match "a transform for ws.test (no api_transforms): 400 naming it" \
  "'ws.test'.*api_transforms: allow.*HTTP 400" \
  register sbx-tf 1 "{\"transforms\":[$(tf ws.test sandboxes/sbx-tf/c-0)]}"
ew_match "a wildcard wider than the flag's rule (*.test): 400" "'\\*.test'.*HTTP 400" \
  register sbx-tf 1 "{\"transforms\":[$(tf '*.test' sandboxes/sbx-tf/c-0)]}"
ew_match "... nothing was registered" '^\[\]' ew_admin GET /v1/sandboxes
ew_match "echo.test and *.github.test: registered" '"caCertPem"' \
  register sbx-tf 1 "{\"transforms\":[$(tf '*.github.test' sandboxes/sbx-tf/c-1),$(tf echo.test sandboxes/sbx-tf/c-0)]}"
printf '%s\n' "$EW_OUT" | head -1 | python3 -c 'import json,sys; open(sys.argv[1], "w").write(json.loads(sys.stdin.readline())["caCertPem"])' "$EW_TMP/sb1-ca.pem"

ew_note "the header goes where the transforms say, and only there"
ew_match "echo.test: the echo comes back scrubbed" '"X-Tf-Key": *"[^"]*REDACTED' \
  iw_curl 1 -H 'X-Tf-Key: sandbox-guess' 'https://echo.test/echo?tf-1'
ew_nomatch "... never with the value" "$TF_VALUE" echo "$EW_OUT"
ew_eq "the upstream got the value, not the sandbox's copy" "$(got '/echo?tf-1')" "$TF_VALUE"
ew_fail "... and never the sandbox's guess" iw_upstream_saw "sandbox-guess"
ew_match "api.github.test (under *.github.test): reached" 'HTTP 200' \
  iw_curl 1 -o /dev/null 'https://api.github.test/echo?tf-2'
ew_eq "... with the wildcard's value" "$(got '/echo?tf-2')" "$TF_WILD"
ew_match "ws.test (a rule without the flag): reached" 'HTTP 200' \
  iw_curl 1 -o /dev/null 'https://ws.test/echo?tf-3'
ew_eq "... without the header" "$(got '/echo?tf-3')" "none"
ew_audit_has "audited: header, the sandbox's secret and its id" type=http_request decision=allow \
  rule=echo inject.0.header=X-Tf-Key inject.0.secret=sandboxes/sbx-tf/c-0 \
  inject.0.outcome=injected 'inject.0.secret_id=/^b2k:/'
ew_audit_has "the reflection is a security event" type=security_event event=secret_reflected

ew_note "updates"
ew_match "an update naming ws.test: 400, the transforms stay" "'ws.test'.*HTTP 400" \
  ew_admin PUT /v1/sandboxes/sbx-tf/network "{\"update\":\"nu_0\",\"network\":{\"transforms\":[$(tf ws.test sandboxes/sbx-tf/c-0)]}}"
ew_match "... (still injected)" 'HTTP 200' iw_curl 1 -o /dev/null 'https://echo.test/echo?tf-4'
ew_eq "... the first value" "$(got '/echo?tf-4')" "$TF_VALUE"
ew_match "an update with a new secret for echo.test" 'HTTP 200' \
  ew_admin PUT /v1/sandboxes/sbx-tf/network "{\"update\":\"nu_1\",\"network\":{\"transforms\":[$(tf echo.test sandboxes/sbx-tf/nu_1-0)]}}"
ew_match "... a new request" 'HTTP 200' iw_curl 1 -o /dev/null 'https://echo.test/echo?tf-5'
ew_eq "... gets the new value" "$(got '/echo?tf-5')" "$TF_NEXT"
ew_match "... api.github.test: no transform any more" 'HTTP 200' \
  iw_curl 1 -o /dev/null 'https://api.github.test/echo?tf-6'
ew_eq "... no header" "$(got '/echo?tf-6')" "none"
ew_match "an update without transforms" 'HTTP 200' \
  ew_admin PUT /v1/sandboxes/sbx-tf/network '{"update":"nu_2","network":null}'
ew_match "... a new request" 'HTTP 200' iw_curl 1 -o /dev/null 'https://echo.test/echo?tf-7'
ew_eq "... has no header" "$(got '/echo?tf-7')" "none"

ew_note "the auditor never sees a value"
ew_audit_sync
ew_fail "no audit file holds one" grep -rqE "$TF_VALUE|$TF_WILD|$TF_NEXT" "$EW_STATE/audit"

iw_done
