#!/usr/bin/env bash
# tests/integration/egress_netupdate.sh: a running sandbox's E2B network fields replaced in
# airlock-egress (PUT /v1/sandboxes/{id}/network, what airlockd sends for the API's
# PUT /sandboxes/{id}/network). The update replaces (never accumulates on) the previous
# fields and only narrows the policy; new connections, requests and DNS queries are decided
# on it at once; established connections are judged again: one the new fields refuse is
# reset and its end record names the update, one they still allow keeps working; the update
# is audited with who asked; a refused update (widening, malformed) is a 400 that leaves the
# previous fields in force.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
source "${AIRLOCK_SOURCE_DIR:?}/tests/lib/wait.sh"
ew_world netupdate

cat >"$EW_TMP/base.yaml" <<'YAML'
version: 1
name: update-base
rules:
  - name: web
    hosts: [allowed.test, other.test]
    ports: [80]
    scheme: http
  - name: secure
    hosts: [allowed.test]
  - name: banner
    cidrs: [203.0.113.12/32]
    ports: [22]
    scheme: tcp
YAML
field() { python3 -c 'import json,sys; d=json.loads(sys.stdin.read().split("\n")[0])
for k in sys.argv[1].split("."): d = d[k]
print(json.dumps(d) if isinstance(d, (dict, list)) else d)' "$1"; }
# update ID JSON-BODY
update() { ew_admin PUT "/v1/sandboxes/$1/network" "$2"; }

ew_match "sandbox registered without network fields" 'HTTP 201' ew_register sbx-u 1 "$EW_TMP/base.yaml"
BASE_HASH=$(field policy.hash <<<"$(ew_admin GET /v1/sandboxes/sbx-u)")

ew_note "connections established before the update"
GO="$EW_TMP/go"
ew_bg session ip netns exec "$(ew_ns sb1)" python3 "$EW_TOOL" session "$GO" --ca "$EW_TMP/ca.pem" \
  webkeep=http:allowed.test webdrop=http:other.test tlskeep=tls:allowed.test tcpdrop=tcp:203.0.113.12:22
ew_ok "four connections made one exchange each" ew_wait_line session READY 30
ew_match "other.test is reachable before" '"server": "evil"' ew_curl 1 http://other.test/before

ew_note "the update: no internet but allowed.test"
ew_match "malformed fields: 400, the old ones stay" 'deny_out must be a list.*HTTP 400' \
  update sbx-u '{"network":{"deny_out":"x"},"update":"nu-bad"}'
ew_match "allowOut of everything would widen: 400 naming it" "'0.0.0.0/0' would allow all traffic.*HTTP 400" \
  update sbx-u '{"network":{"allow_out":["0.0.0.0/0"]},"update":"nu-wide","api_key_id":"key_t1"}'
ew_audit_has "the refusal is audited with the update and the key" type=sandbox \
  event=network_update_refused sandbox=sbx-u update=nu-wide api_key_id=key_t1 \
  'requested_network.allow_out.0=0.0.0.0/0'
ew_eq "nothing changed" "$(field policy.hash <<<"$(ew_admin GET /v1/sandboxes/sbx-u)")" "$BASE_HASH"
ew_match "an unknown sandbox: 404" 'HTTP 404' update sbx-nope '{"network":null}'
ew_match "an unknown key: 400" 'unknown field.*HTTP 400' update sbx-u '{"network":null,"by":"me"}'
ew_match "a generation that is not a number: 400" 'generation.. must be an integer.*HTTP 400' \
  update sbx-u '{"network":null,"generation":"1"}'
OUT=$(update sbx-u '{"network":{"allow_internet_access":false,"allow_out":["allowed.test"]},"update":"nu-1","api_key_id":"key_t1","generation":1}')
ew_match "PUT .../network: 200 with the new fields" '"allow_out":\["allowed.test"\].*HTTP 200' echo "$OUT"
H1=$(field policy.hash <<<"$OUT")
ew_ok "the policy hash is the narrowed one" test -n "$H1" -a "$H1" != "$BASE_HASH"
ew_audit_has "the update is audited: who, which (and its generation), both hashes, the fields" \
  type=sandbox event=network_update sandbox=sbx-u update=nu-1 api_key_id=key_t1 generation=1 \
  "policy.hash=$H1" \
  "old_policy_hash=$BASE_HASH" "base_policy_hash=$BASE_HASH" network.allow_out.0=allowed.test
# The two connections the update refuses end with a record naming it: that is the moment
# the workers have judged them again.
ends() { [ "$(ew_audit type=connection_end sandbox=sbx-u end=network_update network_update=nu-1 | wc -l)" -ge 2 ]; }
ew_ok "two connections ended by the update (audited)" al_wait_until 30 ends
ew_audit_has "... the HTTP one to other.test" type=connection_end sandbox=sbx-u end=network_update \
  network_update=nu-1 dst=203.0.113.11:80 proto=http
ew_audit_has "... the raw TCP one to 203.0.113.12:22" type=connection_end sandbox=sbx-u \
  end=network_update network_update=nu-1 dst=203.0.113.12:22 proto=tcp
ew_eq "no connection to allowed.test was ended" \
  "$(ew_audit type=connection_end sandbox=sbx-u end=network_update 'dst=/^203.0.113.10:/' | wc -l)" 0
touch "$GO"
ew_ok "the session probed its connections" ew_wait_line session 'tcpdrop (alive|closed)' 30
ew_match "HTTP to allowed.test: still alive" 'webkeep alive' cat "$EW_TMP/session.log"
ew_match "HTTPS (passthrough) to allowed.test: still alive" 'tlskeep alive' cat "$EW_TMP/session.log"
ew_match "HTTP to other.test: reset" 'webdrop closed (reset|eof|BrokenPipeError)' cat "$EW_TMP/session.log"
ew_match "raw TCP to 203.0.113.12: reset" 'tcpdrop closed (reset|eof|BrokenPipeError)' cat "$EW_TMP/session.log"
ew_fail "the refused keep-alive request never reached other.test" ew_upstream_saw 'GET /webdrop-2 '

ew_note "new connections, requests and DNS queries"
ew_match "a new request to other.test: 403 sandbox_network_denies" '"reason":"sandbox_network_denies"' \
  ew_curl 1 http://203.0.113.11/after -H 'Host: other.test'
ew_match "DNS for other.test: NXDOMAIN" 'RCODE NXDOMAIN' ew_dns 1 10.200.1.1 other.test A
ew_match "DNS for allowed.test still answers" 'RCODE NOERROR ANSWERS 203.0.113.10' \
  ew_dns 1 10.200.1.1 allowed.test A
ew_match "allowed.test still passes" '"server": "good"' ew_curl 1 http://allowed.test/after
ew_match "a new TCP connection to the banner: reset" 'END (reset|eof)' ew_raw 1 203.0.113.12 22 'x'
ew_nomatch "... without its banner" 'BANNER' ew_raw 1 203.0.113.12 22 'x'
ew_audit_has "the new denial carries the narrowed hash" type=http_request sandbox=sbx-u decision=deny \
  reason=sandbox_network_denies "policy.hash=$H1"

ew_note "replace, not accumulate"
OUT=$(update sbx-u '{"network":{"deny_out":["203.0.113.10/32"]},"update":"nu-2"}')
ew_match "a second update: 200" 'HTTP 200' echo "$OUT"
ew_match "other.test passes again (the first fields are gone)" '"server": "evil"' \
  ew_curl 1 http://other.test/again
ew_match "allowed.test (now on a denied address) is refused" '"reason":"sandbox_network_denies"' \
  ew_curl 1 http://allowed.test/again
OUT=$(update sbx-u '{"network":null,"update":"nu-3"}')
ew_match "null clears the fields: 200" '"network":null.*HTTP 200' echo "$OUT"
ew_eq "the policy is the base again" "$(field policy.hash <<<"$OUT")" "$BASE_HASH"
ew_match "allowed.test passes" '"server": "good"' ew_curl 1 http://allowed.test/cleared
ew_nomatch "GET has no network fields" '"network"' ew_admin GET /v1/sandboxes/sbx-u

ew_note "the policy stays the limit"
ew_match "allowOut of a host the policy does not allow: accepted (it only narrows)" 'HTTP 200' \
  update sbx-u '{"network":{"allow_out":["evil.test"],"deny_out":["0.0.0.0/0"]},"update":"nu-4"}'
ew_match "evil.test is still refused by the policy" '"error":"blocked_by_policy"' \
  ew_curl 1 --resolve evil.test:80:203.0.113.11 http://evil.test/never
ew_nomatch "... not by the network fields" 'sandbox_network_denies' \
  ew_curl 1 --resolve evil.test:80:203.0.113.11 http://evil.test/never2
ew_fail "it never reached an upstream" ew_upstream_saw 'GET /never'
ew_match "a reload keeps the updated fields" '"reloaded"' ew_admin POST /v1/reload
ew_match "PUT .../policy keeps them too" 'HTTP 200' ew_set_policy sbx-u "$EW_TMP/base.yaml"
ew_match "still narrowed after it" '"reason":"sandbox_network_denies"' ew_curl 1 --resolve allowed.test:80:203.0.113.10 http://allowed.test/kept
ew_done
