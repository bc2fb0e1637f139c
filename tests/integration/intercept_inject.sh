#!/usr/bin/env bash
# tests/integration/intercept_inject.sh: credential injection through airlock-egress, in a
# namespace world (intercept_world.sh). Bypass list 1 (Host != SNI, no injection), 14
# (credential hygiene: the sandbox's Authorization replaced, Proxy-Authorization never
# forwarded), the gates of issue 8 (bound hosts, plaintext, vault down), placeholders, and what
# the auditor sees (header and secret id, never the value).
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/intercept_world.sh"
ew_world icptinj

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: intercept-inject-test
rules:
  - name: github-api
    hosts: [api.github.test]
    methods: [GET, POST]
    inject:
      - header: Authorization
        value: "Bearer ${secret:github/token}"
  - name: svc
    hosts: [svc.test]
    tls: inspect
    inject:
      - header: X-Api-Key
        placeholder: SERVICE_KEY
        secret: service/key
  - name: wrong-binding
    hosts: [echo.test]
    paths: ["/bound/**"]
    inject:
      - header: Authorization
        value: "token ${secret:other/token}"
  - name: late
    hosts: [echo.test]
    paths: ["/late/**"]
    inject:
      - header: X-Late
        value: "${secret:ws/token}"
  - name: echo
    hosts: [echo.test]
    tls: inspect
  - name: rogue
    hosts: [echo.test]
    ports: [8443]
    tls: inspect
  - name: open-http
    hosts: [allowed.test]
    scheme: http
  - name: plain
    hosts: [plain.test]
    scheme: http
    allow_plaintext_inject: true
    inject:
      - header: X-Token
        value: "${secret:plain/token}"
YAML
ew_match "sandbox registered, with a CA and placeholders" '"caCertPem": *"-----BEGIN CERTIFICATE' \
  iw_register sbx-inj 1 "$EW_TMP/policy.yaml"
ew_ok "the CA permits only the intercepted names (openssl)" \
  bash -c "openssl x509 -in '$EW_TMP/sb1-ca.pem' -noout -text | grep -A4 'Name Constraints: critical' | grep -q 'DNS:api.github.test'"
ew_ok "placeholder handed out for SERVICE_KEY" grep -q '"SERVICE_KEY": *"alph_' "$EW_TMP/sb1-ph.json"

ew_note "14: the token is injected, the sandbox's own copy replaced"
ew_match "GET through the proxy: the upstream accepts the injected token" '"login": *"octocat"' \
  iw_curl 1 -H 'Authorization: Bearer sandbox-guess' -H 'Proxy-Authorization: Basic eDp5' https://api.github.test/user
ew_ok "the upstream saw the vault's token" iw_upstream_saw "Bearer $IW_TOKEN"
ew_fail "... and never the sandbox's guess" iw_upstream_saw "sandbox-guess"
ew_fail "Proxy-Authorization was not forwarded" iw_upstream_saw "Proxy-Authorization"
ew_audit_has "audited: header and secret id, injected" type=http_request decision=allow rule=github-api \
  inject.0.header=Authorization inject.0.outcome=injected 'inject.0.secret_id=/^b2k:/' inspected=true
ew_match "Python requests too" '^200 .*octocat' iw_py 1 "
import requests
r = requests.get('https://api.github.test/user', headers={'Authorization': 'token mine'})
print(r.status_code, r.text)"
ew_audit_has "the connection was audited as inspected" type=connection decision=allow rule=github-api inspected=true

ew_note "1: Host != SNI: refused, nothing injected"
ew_match "Host evil.test inside TLS for api.github.test: 403" 'host_sni_mismatch' \
  iw_curl 1 -H 'Host: evil.test' https://api.github.test/user
ew_audit_has "audited" type=http_request decision=deny reason=host_sni_mismatch sni=api.github.test

ew_note "per request: method"
ew_match "DELETE is not in the rule: 403 with the rule and reason" '"reason": *"method_not_allowed"' \
  iw_curl 1 -X DELETE https://api.github.test/user
ew_fail "the denied request never reached the upstream" iw_upstream_saw '"method": "DELETE"'

ew_note "bound hosts: the vault's binding is a second check"
ew_match "a rule injecting a secret bound elsewhere: 403" '"reason": *"vault_refused"' \
  iw_curl 1 https://echo.test/bound/x
ew_audit_has "audited" type=http_request decision=deny reason=vault_refused rule=wrong-binding

ew_note "placeholders"
PH=$(iw_placeholder 1 SERVICE_KEY)
ew_match "the placeholder is swapped for the value toward the bound host" '"ok": *true' \
  iw_curl 1 -H "X-Api-Key: $PH" https://svc.test/svc
ew_fail "the upstream never saw the placeholder" iw_upstream_saw "$PH"
ew_match "the placeholder toward another host: refused" 'placeholder_misuse' \
  iw_curl 1 -H "X-Leak: $PH" https://echo.test/echo
ew_match "the placeholder in a query string: refused" 'placeholder_misuse' \
  iw_curl 1 "https://svc.test/svc?key=$PH"
ew_audit_has "audited as a security event" type=security_event event=placeholder_misuse secret=service/key

ew_note "plain HTTP where the rule allows injecting"
ew_match "the token goes over plain HTTP only for allow_plaintext_inject" '"ok": *true' \
  ew_curl 1 -H 'X-Token: mine' http://plain.test/plain
ew_audit_has "audited as http" type=http_request proto=http rule=plain inject.0.outcome=injected

ew_note "plain HTTP toward a rule that injects over TLS only (CubeSandbox #1410)"
ew_match "http://api.github.test: refused (an injecting rule is https only)" '"reason": *"scheme_not_allowed"(.|\n)*HTTP 403' \
  iw_curl 1 -H 'Authorization: Bearer sandbox-plain' http://api.github.test/user-plain
ew_fail "the upstream never saw the token over plain HTTP" \
  bash -c "grep -F 'user-plain' '$EW_TMP/iwplain.log' | grep -qF '$IW_TOKEN'"
ew_fail "... nor the sandbox's own copy" \
  bash -c "grep -F 'user-plain' '$EW_TMP/iwplain.log' | grep -qF 'sandbox-plain'"
ew_audit_has "audited" type=http_request proto=http decision=deny reason=scheme_not_allowed \
  rule=github-api path=/user-plain

ew_note "an upstream whose certificate does not verify"
(cd "$EW_TMP" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=echo.test" -addext "subjectAltName=DNS:echo.test" -days 2 \
  -keyout rogue.key -out rogue.pem 2>/dev/null)
ew_bg rogue ip netns exec "$(ew_ns up)" python3 "$IW_FAKE" upstream --listen 203.0.113.20:8443 \
  --cert "$EW_TMP/rogue.pem" --key "$EW_TMP/rogue.key" --token "$IW_TOKEN"
ew_wait_line rogue LISTEN
ew_match "a self-signed upstream: 502 upstream_certificate_invalid" \
  'upstream_certificate_invalid(.|\n)*HTTP 502' iw_curl 1 https://echo.test:8443/rogue
ew_audit_has "audited with the code and what failed" type=http_request rule=rogue status=502 \
  error=upstream_certificate_invalid 'error_detail=/does not verify/'
ew_fail "the request never reached the rogue upstream" grep -q '/rogue' "$EW_TMP/rogue.log"

ew_note "the auditor never sees the value"
ew_audit_sync
ew_fail "no audit file holds the token" grep -rqF "$IW_TOKEN" "$EW_STATE/audit"

ew_note "registered again (as after a restart of the proxy): the placeholders it is given stay"
ew_admin DELETE /v1/sandboxes/sbx-inj >/dev/null
BODY=$(python3 -c 'import json,sys; print(json.dumps({"id": "sbx-inj", "template": "base",
  "addresses": ["10.200.1.2"], "policy": {"yaml": open(sys.argv[1]).read(), "origin": sys.argv[1]},
  "placeholders": json.load(open(sys.argv[2]))}))' "$EW_TMP/policy.yaml" "$EW_TMP/sb1-ph.json")
ew_match "the same placeholder, a new CA" "\"SERVICE_KEY\": *\"$PH\"" ew_admin POST /v1/sandboxes "$BODY"
ew_nomatch "... the CA is new (its key never left the old process)" "$(sed -n 2p "$EW_TMP/sb1-ca.pem")" echo "$EW_OUT"
# what airlockd would now send the agent with POST /init
printf '%s\n' "$EW_OUT" | head -1 | python3 -c 'import json,sys; open(sys.argv[1], "w").write(json.loads(sys.stdin.readline())["caCertPem"])' "$EW_TMP/sb1-ca.pem"

ew_note "11: injected requests are parsed and refused exactly as plain ones"
# shape_answer HOW HOST DATA: "<status> <reason>" of the answer to DATA (its Host: HOST),
# sent on the plain path (HOW=plain, no interception), the plain inject rule (HOW=inject)
# or the TLS inject rule (HOW=tls); it also checks that the answer was audited with both.
shape_answer() {
  local how=$1 host=$2 data=${3//@HOST@/$2} out st reason rid
  case $how in
  tls) out=$(iw_tls_raw 1 "$host" "$data") ;;
  *) out=$(ew_raw 1 "$host" 80 "$data") ;;
  esac
  st=$(grep -o '^HTTP/1.1 [0-9]*' <<<"$out" | head -1 | cut -d' ' -f2)
  reason=$(grep -o '"reason": *"[^"]*"' <<<"$out" | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
  rid=$(grep -o '"request_id": *"[^"]*"' <<<"$out" | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
  # a refused head is a deny with that reason; a body found malformed after the head went
  # upstream fails the allowed exchange with that error
  if [ -z "$rid" ] || { [ -z "$(ew_audit type=http_request request_id="$rid" decision=deny reason="$reason" status="$st")" ] &&
    [ -z "$(ew_audit type=http_request request_id="$rid" error="$reason" status="$st")" ]; }; then
    reason="$reason(not-audited)"
  fi
  echo "${st:-none} ${reason:-none}"
}
SHAPES=(
  "bare LF line ends|GET /shape-head HTTP/1.1\nHost: @HOST@\n\n"
  "obs-fold|GET /shape-head HTTP/1.1\r\nHost: @HOST@\r\nX-A: 1\r\n 2\r\n\r\n"
  "whitespace before the colon|GET /shape-head HTTP/1.1\r\nHost: @HOST@\r\nX-A : 1\r\n\r\n"
  "conflicting Content-Length|POST /shape-head HTTP/1.1\r\nHost: @HOST@\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"
  "Transfer-Encoding with Content-Length|POST /shape-head HTTP/1.1\r\nHost: @HOST@\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
  "chunk data longer than its size|POST /shape-body HTTP/1.1\r\nHost: @HOST@\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n"
  "bare LF after chunk data|POST /shape-body HTTP/1.1\r\nHost: @HOST@\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\n0\r\n\r\n"
  "bare CR after a chunk size|POST /shape-body HTTP/1.1\r\nHost: @HOST@\r\nTransfer-Encoding: chunked\r\n\r\n1\rx\r\n0\r\n\r\n"
)
for shape in "${SHAPES[@]}"; do
  name=${shape%%|*} data=${shape#*|}
  want=$(shape_answer plain allowed.test "$data")
  case $want in
  *not-audited*) ew__result 0 "$name, plain path: want 400 and an audited reason, got '$want'" ;;
  400\ [a-z_]*) ew__result 1 "$name, plain path: $want, audited" ;;
  *) ew__result 0 "$name, plain path: want 400 and an audited reason, got '$want'" ;;
  esac
  ew_eq "$name, plain-HTTP inject rule: the same" "$(shape_answer inject plain.test "$data")" "$want"
  ew_eq "$name, TLS inject rule: the same" "$(shape_answer tls api.github.test "$data")" "$want"
done
# (A chunk's framing is known to be wrong only after the head went upstream.)
ew_fail "no malformed head reached an upstream" grep -q 'shape-head' "$EW_TMP/iwup.log" \
  "$EW_TMP/iwplain.log" "$EW_TMP/up.req"

ew_note "the vault gone: injecting rules fail closed"
feed_losses() {
  local n
  n=$(grep -c 'vault changes feed lost' "$EW_TMP/egress.err" 2>/dev/null) || true
  echo "${n:-0}"
}
lost_before=$(feed_losses)
feed_lost() { [ "$(feed_losses)" -gt "$lost_before" ]; }
ew_kill vault
# Wait for the proxy to notice (its feed connection ends): until then a new fetch is still
# tried against the vault and fails for another reason.
al_wait_until 60 feed_lost || ew__result 0 "the proxy did not notice the vault's end within 60 s"
ew_match "a value not cached: 503 credentials_unavailable, the feed is down" 'vault_feed_down' \
  iw_curl 1 https://echo.test/late/x
ew_audit_has "audited" type=http_request decision=deny reason=vault_feed_down rule=late

iw_done
