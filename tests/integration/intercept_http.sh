#!/usr/bin/env bash
# tests/integration/intercept_http.sh: HTTP inside intercepted TLS, through airlock-egress, in a
# namespace world (intercept_world.sh). Bypass list 2 (another name inside the tunnel), 10
# (authority tricks), 11 (smuggling inside TLS), 12 (upgrades: h2c, WebSocket where not
# allowed, CONNECT-UDP), 13 (redirects are the client's new requests), 18 (ECH, no SNI, IP as
# SNI toward an inspected name), 19 (relays: CONNECT inside the tunnel, an absolute URI to
# another host); per-request decisions; the CA's limits; upstream verification and reuse.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/intercept_world.sh"
ew_world icpthttp

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: intercept-http-test
rules:
  - name: github-read
    hosts: [api.github.test]
    methods: [GET]
    paths: ["/repos/**", "/user", "/redirect", "/big"]
  - name: echo
    hosts: [echo.test]
    tls: inspect
  - name: ws
    hosts: [ws.test]
    tls: inspect
    websocket: true
YAML
ew_match "sandbox registered" "HTTP 201" iw_register sbx-http 1 "$EW_TMP/policy.yaml"

ew_note "per request: method and path"
ew_match "GET on an allowed path" 'HTTP 401' iw_curl 1 https://api.github.test/user
ew_match "a path the rule does not name: 403" '"reason": *"path_not_allowed"' iw_curl 1 https://api.github.test/admin
ew_match "a method it does not name: 403" '"reason": *"method_not_allowed"' iw_curl 1 -X POST -d x https://api.github.test/user
ew_match "a traversal: refused" '"reason": *"invalid_path"' iw_curl 1 --path-as-is 'https://api.github.test/repos/../admin'
ew_fail "none of them reached the upstream" iw_upstream_saw '"path": "/admin"'
ew_audit_has "audited with the rule that named the host" type=http_request decision=deny reason=path_not_allowed rule=github-read path=/admin

ew_note "1, 2, 10: the tunnel's name is the only name"
ew_match "Host of another allowed name inside TLS for api.github.test: 403" 'host_sni_mismatch' \
  iw_curl 1 -H 'Host: echo.test' https://api.github.test/user
ew_match "an absolute URI naming another host than Host: 400, as on the plain path" '"reason":"authority_mismatch"' \
  iw_tls_raw 1 api.github.test 'GET https://evil.test/user HTTP/1.1\r\nHost: api.github.test\r\nConnection: close\r\n\r\n'
ew_match "userinfo in the authority: refused" 'HTTP/1.1 40[03]' \
  iw_tls_raw 1 api.github.test 'GET https://api.github.test@evil.test/user HTTP/1.1\r\nHost: api.github.test\r\nConnection: close\r\n\r\n'
ew_match "a pipelined request for another host on the same connection: refused" 'host_sni_mismatch' \
  iw_tls_raw 1 api.github.test 'GET /user HTTP/1.1\r\nHost: api.github.test\r\n\r\nGET /user HTTP/1.1\r\nHost: echo.test\r\nConnection: close\r\n\r\n'

ew_note "11: smuggling inside TLS"
ew_match "Content-Length and Transfer-Encoding together: 400" 'HTTP/1.1 400' \
  iw_tls_raw 1 echo.test 'POST /echo HTTP/1.1\r\nHost: echo.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
ew_match "obs-fold: 400" 'obs_fold' \
  iw_tls_raw 1 echo.test 'GET /echo HTTP/1.1\r\nHost: echo.test\r\nX-A: 1\r\n  2\r\n\r\n'
ew_match "bare LF: 400, for the plain path's reason" 'invalid_header' \
  iw_tls_raw 1 echo.test 'GET /echo HTTP/1.1\nHost: echo.test\n\n'
ew_match "two Host headers: 400" 'duplicate_host' \
  iw_tls_raw 1 echo.test 'GET /echo HTTP/1.1\r\nHost: echo.test\r\nHost: evil.test\r\n\r\n'
ew_match "a transfer coding other than chunked: 400, as on the plain path" 'unsupported_transfer_encoding' \
  iw_tls_raw 1 echo.test 'POST /echo HTTP/1.1\r\nHost: echo.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n'
ew_match "an absolute URI with the http scheme inside TLS: 403" 'scheme_mismatch' \
  iw_tls_raw 1 echo.test 'GET http://echo.test/echo HTTP/1.1\r\nHost: echo.test\r\nConnection: close\r\n\r\n'

ew_note "12: upgrades"
ew_match "h2c: refused" 'h2c_upgrade_refused' \
  iw_curl 1 --http1.1 -H 'Connection: Upgrade, HTTP2-Settings' -H 'Upgrade: h2c' -H 'HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA' https://echo.test/echo
ew_match "HTTP/2 prior knowledge inside the tunnel: refused" 'HTTP/1.1 40[03]' \
  iw_tls_raw 1 echo.test 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
ew_match "WebSocket where the rule does not allow it: refused" 'websocket_not_allowed' \
  iw_curl 1 -H 'Upgrade: websocket' -H 'Connection: Upgrade' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' https://echo.test/ws
ew_match "CONNECT-UDP style upgrade: refused" 'upgrade_refused' \
  iw_curl 1 -H 'Upgrade: connect-udp' -H 'Connection: Upgrade' https://echo.test/.well-known/masque/udp/1.1.1.1/53/
ew_match "WebSocket on the rule that allows it: 101" 'HTTP/1.1 101' \
  iw_tls_raw 1 ws.test 'GET /ws HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n'

ew_note "19: relays"
ew_match "CONNECT inside the intercepted tunnel: refused" 'connect_in_tunnel' \
  iw_tls_raw 1 echo.test 'CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n'
ew_audit_has "audited" type=http_request decision=deny reason=connect_in_tunnel
ew_match "the answer is the plain path's: it names its request id" 'X-Airlock-Request-Id: ' \
  iw_tls_raw 1 echo.test 'CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n'

ew_note "13: the proxy never follows a redirect"
ew_match "302 to another host reaches the sandbox as it came" 'Location: https://evil.test/steal' \
  iw_curl 1 -D - https://api.github.test/redirect
ew_fail "following it is a new request to evil.test: refused at its own decision" \
  iw_curl 1 -L https://api.github.test/redirect
ew_audit_has "the new request was decided afresh (no rule for evil.test: no DNS answer)" type=dns_query qname=evil.test decision=deny
ew_fail "the upstream never saw /steal" iw_upstream_saw '/steal'

ew_note "18: ECH, no SNI, an IP as SNI toward an inspected name"
ew_match "ECH with an inspected name: reset" RESET ew_hello 1 203.0.113.20 443 --sni api.github.test --ech
ew_audit_has "audited" type=connection decision=deny reason=ech_present
ew_match "no SNI: reset" RESET ew_hello 1 203.0.113.20 443 --no-sni
ew_match "an IP as SNI: reset" RESET ew_hello 1 203.0.113.20 443 --sni 203.0.113.20

ew_note "the sandbox's trust and the CA's limits"
ew_fail "a client without the sandbox CA refuses the proxy's certificate" ew_curl 1 https://echo.test/echo
ew_audit_has "the connection end says why" type=connection_end end=sandbox_tls_failed 'error=/unknown_ca|bad_certificate|peer_alert/'
cat >"$EW_TMP/policy2.yaml" <<'YAML'
version: 1
name: intercept-http-test
rules:
  - name: echo
    hosts: [echo.test]
    tls: inspect
  - name: svc-new
    hosts: [svc.test]
    tls: inspect
YAML
ew_match "a reload adds an intercepted name" "HTTP 200" ew_set_policy sbx-http "$EW_TMP/policy2.yaml"
ew_fail "the CA (made for the old names) cannot certify it: refused with an alert" iw_curl 1 https://svc.test/svc
ew_audit_has "audited" type=connection decision=deny reason=outside_ca_constraints sni=svc.test
ew_match "the names it was made for still work" 'HTTP 200' iw_curl 1 https://echo.test/echo

ew_note "a policy that intercepts nothing: the sandbox gets no CA at all"
cat >"$EW_TMP/policy-pass.yaml" <<'YAML'
version: 1
name: intercept-http-pass
rules:
  - name: echo
    hosts: [echo.test]
YAML
ew_match "registered" "HTTP 201" iw_register sbx-pass 2 "$EW_TMP/policy-pass.yaml"
ew_fail "... and its answer has no CA (nothing to install, nothing minted)" \
  grep -q 'BEGIN CERTIFICATE' "$EW_TMP/sb2-ca.pem"
cat >"$EW_TMP/policy-pass2.yaml" <<'YAML'
version: 1
name: intercept-http-pass
rules:
  - name: echo
    hosts: [echo.test]
    tls: inspect
YAML
ew_match "a reload makes it intercept echo.test" "HTTP 200" ew_set_policy sbx-pass "$EW_TMP/policy-pass2.yaml"
ew_fail "without a CA that connection is refused (even by a client that trusts anything)" \
  ew_curl 2 -k https://echo.test/echo
ew_audit_has "audited" type=connection decision=deny reason=outside_ca_constraints sandbox=sbx-pass sni=echo.test
ew_ok "the proxy says why" grep -q 'sandbox sbx-pass: interception of echo.test refused: the sandbox has no CA' "$EW_TMP/egress.err"

ew_note "upstreams: verified, and reused per sandbox and host"
for i in 1 2 3 4 5 6; do iw_curl 1 https://echo.test/echo >/dev/null; done
ew_match "more requests, one connection each" 'HTTP 200' iw_curl 1 https://echo.test/echo
ew_audit_has "the later one went over a pooled upstream connection" type=http_request rule=echo upstream_reused=true
ew_audit_has "... so its record has no upstream handshake time, but the sandbox's" type=http_request rule=echo \
  upstream_reused=true timing_us.tls_upstream=None 'timing_us.tls_sandbox=/^[0-9]+$/'
ew_audit_has "a fresh upstream connection: TCP connect and TLS handshake timed apart" type=http_request rule=echo \
  upstream_reused=None 'timing_us.connect=/^[0-9]+$/' 'timing_us.tls_upstream=/^[0-9]+$/' \
  'timing_us.tls_sandbox=/^[0-9]+$/'
iw_done
