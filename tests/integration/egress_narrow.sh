#!/usr/bin/env bash
# tests/integration/egress_narrow.sh: a sandbox's E2B network fields (issue 6) in
# airlock-egress. The registration's "network" object ({"allow_internet_access",
# "allow_out", "deny_out"}) narrows the sandbox's policy (inline or file) and keeps narrowing
# every later one: PUT .../policy, POST /v1/reload, SIGHUP. Denials by the filter carry
# sandbox_network_denies (also in report mode), DNS follows it, GET /v1/sandboxes/{id} shows
# it, the audit records carry the narrowed hash and the base hash, malformed fields are a 400
# and register nothing.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
ew_world narrow

cat >"$EW_TMP/np.yaml" <<'YAML'
version: 1
name: narrow-base
rules:
  - name: web
    hosts: [allowed.test, other.test, "**.allowed.test"]
    ports: [80]
    scheme: http
YAML
cat >"$EW_TMP/np2.yaml" <<'YAML'
version: 1
name: narrow-v2
rules:
  - name: web
    hosts: [allowed.test, other.test, evil.test, "**.allowed.test"]
    ports: [80]
    scheme: http
YAML
cat >"$EW_TMP/npr.yaml" <<'YAML'
version: 1
name: narrow-report
mode: report
rules: []
YAML

# reg ID N NETWORK-JSON (inline policy np.yaml) / reg_file ID N FILE NETWORK-JSON
reg() {
  local body
  body=$(python3 -c 'import json,sys; print(json.dumps({"id": sys.argv[1], "template": "base",
    "addresses": ["10.200.%s.2" % sys.argv[2]], "policy": {"yaml": open(sys.argv[3]).read(),
    "origin": "np.yaml"}, "network": json.loads(sys.argv[4])}))' "$1" "$2" "$EW_TMP/np.yaml" "$3")
  ew_admin POST /v1/sandboxes "$body"
}
reg_file() {
  ew_admin POST /v1/sandboxes "{\"id\":\"$1\",\"addresses\":[\"10.200.$2.2\"],\"policy_file\":\"$3\",\"network\":$4}"
}
field() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read().split("\n")[0]); 
for k in sys.argv[1].split("."): d = d[k]
print(json.dumps(d) if isinstance(d, (dict, list)) else d)' "$1"; }
BASE_HASH=$("$EW_BIN/airlock" policy hash "$EW_TMP/np.yaml" | awk '{print $1}')

ew_note "malformed network fields: 400, nothing registered"
ew_match "an unknown key" 'unknown field.*allowOut.*HTTP 400' reg sbx-x 1 '{"allowOut":["a.test"]}'
ew_match "not a list" 'allow_out must be a list.*HTTP 400' reg sbx-x 1 '{"allow_out":"a.test"}'
ew_match "not strings" 'deny_out\[0\] must be a string.*HTTP 400' reg sbx-x 1 '{"deny_out":[7]}'
ew_match "not a boolean" 'allow_internet_access must be true or false.*HTTP 400' \
  reg sbx-x 1 '{"allow_internet_access":"no"}'
ew_match "allowOut of everything (narrowing cannot widen)" 'would allow all traffic.*HTTP 400' \
  reg sbx-x 1 '{"allow_out":["0.0.0.0/0"]}'
ew_match "a malformed entry" "deny_out|denyOut.*HTTP 400" reg sbx-x 1 '{"deny_out":["bad name!"]}'
ew_match "nothing was registered" '^\[\]' ew_admin GET /v1/sandboxes
ew_audit_has "the refusal is audited" type=sandbox event=register_refused sandbox=sbx-x reason=invalid_network

ew_note "denyOut: an address (inline policy)"
ew_match "register with deny_out [203.0.113.11/32]: 201" 'HTTP 201' \
  reg sbx-d 1 '{"deny_out":["203.0.113.11/32"]}'
OUT=$(ew_admin GET /v1/sandboxes/sbx-d)
ew_eq "GET shows the network fields" "$(field network <<<"$OUT")" '{"deny_out": ["203.0.113.11/32"]}'
NARROW_HASH=$(field policy.hash <<<"$OUT")
ew_ok "its policy hash is the narrowed policy's (not the base's)" \
  test -n "$NARROW_HASH" -a "$NARROW_HASH" != "$BASE_HASH"
ew_match "allowed.test (not denied) passes" '"server": "good"' ew_curl 1 http://allowed.test/d1
ew_match "other.test resolves (names are not denied)..." 'RCODE NOERROR ANSWERS 203.0.113.11' \
  ew_dns 1 10.200.1.1 other.test A
ew_match "... but its address is: 403 sandbox_network_denies" '"reason":"sandbox_network_denies"' \
  ew_curl 1 http://other.test/d2
ew_fail "it never reached the upstream" ew_upstream_saw 'GET /d2'
ew_audit_has "the denial is audited with the narrowed hash" type=http_request sandbox=sbx-d \
  decision=deny reason=sandbox_network_denies host=other.test "policy.hash=$NARROW_HASH"
ew_audit_has "the registration is audited with both hashes and the fields" type=sandbox \
  event=register sandbox=sbx-d "policy.hash=$NARROW_HASH" "base_policy_hash=$BASE_HASH" \
  'network.deny_out.0=203.0.113.11/32'

ew_note "PUT .../policy keeps the narrowing"
ew_match "a new inline policy (allows evil.test too): 200" 'narrow-v2.*HTTP 200' ew_set_policy sbx-d "$EW_TMP/np2.yaml"
ew_match "evil.test (on the denied address) is still denied by the network fields" \
  '"reason":"sandbox_network_denies"' ew_curl 1 http://evil.test/d3
ew_match "allowed.test still passes" '"server": "good"' ew_curl 1 http://allowed.test/d4
ew_audit_has "the replacement is audited with the base hash" type=policy event=reload sandbox=sbx-d \
  policy.name=narrow-v2 "base_policy_hash=$("$EW_BIN/airlock" policy hash "$EW_TMP/np2.yaml" | awk '{print $1}')"
ew_match "report mode: the policy would allow anything..." 'HTTP 200' ew_set_policy sbx-d "$EW_TMP/npr.yaml"
ew_match "... what it does not name passes as would_deny" '"server": "good"' \
  ew_curl 1 http://allowed.test/d5
ew_match "... but the network fields are enforced in report mode too" \
  '"reason":"sandbox_network_denies"' ew_curl 1 http://other.test/d6
ew_fail "nothing denied reached an upstream" ew_upstream_saw 'GET /d[236] '

ew_note "no internet, allowOut *.allowed.test (a policy file)"
cp "$EW_TMP/np.yaml" "$EW_TMP/file.yaml"
ew_match "register: 201" 'HTTP 201' \
  reg_file sbx-a 2 "$EW_TMP/file.yaml" '{"allow_internet_access":false,"allow_out":["*.allowed.test"]}'
ew_match "a subdomain passes" '"server": "good"' ew_curl 2 http://api.allowed.test/a1
ew_match "at any depth (E2B's *.)" '"server": "good"' ew_curl 2 http://deep.api.allowed.test/a2
ew_match "the parent name does not even resolve" 'RCODE NXDOMAIN' ew_dns 2 10.200.2.1 allowed.test A
ew_audit_has "the refused name is audited" type=dns_query sandbox=sbx-a qname=allowed.test reason=sandbox_network_denies
ew_match "by address: 403 sandbox_network_denies" '"reason":"sandbox_network_denies"' \
  ew_curl 2 --resolve allowed.test:80:203.0.113.10 http://allowed.test/a3
ew_match "other.test likewise" '"reason":"sandbox_network_denies"' \
  ew_curl 2 --resolve other.test:80:203.0.113.11 http://other.test/a4
H1=$(field policy.hash <<<"$(ew_admin GET /v1/sandboxes/sbx-a)")
cp "$EW_TMP/np2.yaml" "$EW_TMP/file.yaml"
ew_match "POST /v1/reload re-reads the file" '"reloaded":\[[^]]*"sbx-a"' ew_admin POST /v1/reload
H2=$(field policy.hash <<<"$(ew_admin GET /v1/sandboxes/sbx-a)")
ew_ok "the narrowed hash changed with the file" test -n "$H2" -a "$H1" != "$H2"
ew_match "the file now allows evil.test: the network fields still deny it" \
  '"reason":"sandbox_network_denies"' ew_curl 2 --resolve evil.test:80:203.0.113.11 http://evil.test/a5
ew_match "and the subdomain still passes" '"server": "good"' ew_curl 2 http://api.allowed.test/a6
cp "$EW_TMP/np.yaml" "$EW_TMP/file.yaml"
kill -HUP "${EW_PIDS[egress]}"
al_wait_until 60 eval '[ "$(field policy.hash <<<"$(ew_admin GET /v1/sandboxes/sbx-a)")" = "$H1" ]' || true
ew_eq "SIGHUP: back to the first narrowed hash" "$(field policy.hash <<<"$(ew_admin GET /v1/sandboxes/sbx-a)")" "$H1"
ew_match "still narrowed" '"reason":"sandbox_network_denies"' \
  ew_curl 2 --resolve allowed.test:80:203.0.113.10 http://allowed.test/a7
ew_match "GET lists the fields" '"allow_internet_access": false' field network <<<"$(ew_admin GET /v1/sandboxes/sbx-a)"
ew_fail "nothing denied reached an upstream" ew_upstream_saw 'GET /a[3457] '

ew_note "a sandbox without network fields is not narrowed"
ew_match "unregister both" 'HTTP 204' ew_admin DELETE /v1/sandboxes/sbx-a
ew_match "register without network" 'HTTP 201' reg_file sbx-p 2 "$EW_TMP/file.yaml" null
OUT=$(ew_admin GET /v1/sandboxes/sbx-p)
ew_eq "its hash is the base's" "$(field policy.hash <<<"$OUT")" "$BASE_HASH"
ew_nomatch "no network in GET" '"network"' echo "$OUT"
ew_match "allowed.test passes" '"server": "good"' ew_curl 2 http://allowed.test/p1
ew_done
