#!/usr/bin/env bash
# tests/integration/intercept_smuggle.sh: request smuggling through bodies on methods that
# have no use for one ("CL.0"), fields named in Connection, and method-override fields, on
# the plain HTTP path and inside intercepted TLS alike. The upstream for cl0.test
# (203.0.113.30, plain and TLS) ignores Content-Length on GET as several frameworks do, so a
# body there is run as a second request; the policy allows only GET /public/** on it, and a
# smuggled GET /private/... must never reach it.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/intercept_world.sh"
ew_world icptsmug

iw_leaf cl0 cl0.test || exit 1
ip -n "$(ew_ns up)" addr add 203.0.113.30/32 dev lo || exit 1
python3 - "$EW_TMP/zone.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
z["cl0.test"] = {"A": ["203.0.113.30"], "ttl": 30}
json.dump(z, open(sys.argv[1], "w"))
PY
ew_bg cl0 ip netns exec "$(ew_ns up)" python3 "$EW_TOOL" http-server 203.0.113.30 80 --name cl0 \
  --log "$EW_TMP/cl0.req" --cl0
ew_bg cl0tls ip netns exec "$(ew_ns up)" python3 "$EW_TOOL" tls-server 203.0.113.30 443 --name cl0tls \
  --cert "$EW_TMP/cl0.pem" --key "$EW_TMP/cl0.key" --log "$EW_TMP/cl0.req" --cl0
ew_wait_line cl0 LISTEN && ew_wait_line cl0tls LISTEN || exit 1

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: smuggle-test
rules:
  - name: public-http
    hosts: [cl0.test]
    scheme: http
    methods: [GET]
    paths: ["/public/**"]
  - name: public-https
    hosts: [cl0.test]
    methods: [GET]
    paths: ["/public/**"]
  - name: any-http
    hosts: [allowed.test]
    scheme: http
    body_methods: [DELETE]
  - name: any-https
    hosts: [allowed.test]
    tls: inspect
    body_methods: [DELETE]
YAML
ew_match "sandbox registered" "HTTP 201" iw_register sbx-smug 1 "$EW_TMP/policy.yaml"

# A GET /public/a whose body is a whole second request.
SMUGGLED='GET /private/secret HTTP/1.1\r\nHost: cl0.test\r\n\r\n'
SMUGGLED_LEN=$(python3 -c 'import sys; print(len(sys.argv[1].encode().decode("unicode_escape")))' "$SMUGGLED")
CL0="GET /public/a HTTP/1.1\r\nHost: cl0.test\r\nContent-Length: $SMUGGLED_LEN\r\n\r\n$SMUGGLED"
# the upstream's view (fields=... of its log line) of the request for PATH
upstream_line() { grep -h "REQ .* GET $1 " "$EW_TMP/cl0.req" "$EW_TMP/up.req" 2>/dev/null; }

ew_note "the fake upstream is a CL.0 server (asked directly, not through the proxy)"
ew_match "a body on GET is run as the next request" 'HTTP/1.1 200.*HTTP/1.1 200' \
  ew_up python3 "$EW_TOOL" raw 203.0.113.30 80 "${CL0/\/public\/a/\/direct\/a}"
ew_ok "... so it saw the smuggled request" grep -q 'REQ cl0 GET /private/secret' "$EW_TMP/cl0.req"
: >"$EW_TMP/cl0.req"

ew_note "CL.0 through the proxy: refused before any byte reaches the upstream"
ew_match "plain HTTP: GET with a body is 400, with a JSON reason" \
  'HTTP/1.1 400.*"reason":"request_body_not_allowed"' ew_raw 1 cl0.test 80 "$CL0"
ew_audit_has "audited" type=http_request decision=deny reason=request_body_not_allowed status=400 \
  rule=public-http path=/public/a
ew_match "intercepted TLS: the same" 'HTTP/1.1 400.*"reason": *"request_body_not_allowed"' \
  iw_tls_raw 1 cl0.test "$CL0"
ew_audit_has "audited" type=http_request decision=deny reason=request_body_not_allowed status=400 \
  rule=public-https inspected=true path=/public/a
ew_fail "the smuggled GET /private never reached the upstream" grep -q '/private' "$EW_TMP/cl0.req"
ew_fail "nor did the GET that carried it" grep -q '/public/a' "$EW_TMP/cl0.req"
for how in "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" "Content-Length: 4\r\n\r\nabcd"; do
  ew_match "plain HTTP: GET with ${how%%:*}: 400" 'HTTP/1.1 400.*request_body_not_allowed' \
    ew_raw 1 cl0.test 80 "GET /public/b HTTP/1.1\r\nHost: cl0.test\r\n$how"
  ew_match "intercepted TLS: GET with ${how%%:*}: 400" 'HTTP/1.1 400.*request_body_not_allowed' \
    iw_tls_raw 1 cl0.test "GET /public/b HTTP/1.1\r\nHost: cl0.test\r\n$how"
done
ew_match "GET with Content-Length: 0 is no body: allowed" 'HTTP/1.1 200' \
  ew_raw 1 cl0.test 80 'GET /public/empty HTTP/1.1\r\nHost: cl0.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'

ew_note "every method without body semantics, and a rule's body_methods"
for m in GET HEAD OPTIONS TRACE; do
  ew_match "plain HTTP: $m with a body: 400" 'HTTP/1.1 400.*request_body_not_allowed' \
    ew_raw 1 allowed.test 80 "$m /m HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\n\r\nabcd"
done
ew_match "intercepted TLS: OPTIONS with a body: 400" 'HTTP/1.1 400.*request_body_not_allowed' \
  iw_tls_raw 1 allowed.test 'OPTIONS /m HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\n\r\nabcd'
ew_match "plain HTTP: DELETE with a body, listed in body_methods: forwarded" 'HTTP/1.1 200' \
  ew_raw 1 allowed.test 80 'DELETE /del HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd'
ew_ok "... with its body" grep -q 'REQ good DELETE /del .* len=4' "$EW_TMP/up.req"
ew_match "intercepted TLS: the same" 'HTTP/1.1 200' \
  iw_tls_raw 1 allowed.test 'DELETE /del-tls HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd'
ew_ok "... with its body" grep -q 'REQ tls DELETE /del-tls .* len=4' "$EW_TMP/up.req"
ew_match "POST always may carry one" 'HTTP/1.1 200' \
  ew_raw 1 allowed.test 80 'POST /post HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd'

ew_note "fields named in Connection, and method overrides, are not forwarded"
HOPS='Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nconnection: X-Second\r\nX-Second: 2\r\nX-Kept: 3\r\n'
OVR='X-HTTP-Method-Override: DELETE\r\nX-HTTP-Method: DELETE\r\nX-Method-Override: DELETE\r\n'
ew_match "plain HTTP: allowed" 'HTTP/1.1 200' \
  ew_raw 1 cl0.test 80 "GET /public/c HTTP/1.1\r\nHost: cl0.test\r\n$HOPS${OVR}Connection: close\r\n\r\n"
ew_match "... the upstream got the other fields" 'fields=.*x-kept' upstream_line /public/c
ew_nomatch "... not those named in either Connection field, nor the overrides" \
  'x-hop|x-second|x-http-method|x-method-override' upstream_line /public/c
ew_match "intercepted TLS: allowed" 'HTTP/1.1 200' \
  iw_tls_raw 1 cl0.test "GET /public/d HTTP/1.1\r\nHost: cl0.test\r\n$HOPS${OVR}Connection: close\r\n\r\n"
ew_match "... the upstream got the other fields" 'fields=.*x-kept' upstream_line /public/d
ew_nomatch "... not those named in either Connection field, nor the overrides" \
  'x-hop|x-second|x-http-method|x-method-override' upstream_line /public/d
iw_done
