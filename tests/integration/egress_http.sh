#!/usr/bin/env bash
# tests/integration/egress_http.sh: plain HTTP through airlock-egress, and the items of the
# bypass list (EGRESS.md) that plain HTTP can show: each expected decision, the audit reason,
# and proof that a denied request never reached any upstream.
#   3 forged destination, 5 IP literals, 6 the proxy as target, 7 ports, 8 normalisation,
#   9 wildcard over-match, 10 authority tricks, 11 smuggling, 12 upgrades, 13 redirects,
#   14 Proxy-Authorization, 19 CONNECT.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
ew_world http

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: egress-http-test
rules:
  - name: allowed-http
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: api-v1
    hosts: ["*.allowed.test"]
    ports: [80]
    scheme: http
    methods: [GET]
    paths: ["/v1/**"]
  - name: websocket
    hosts: [ws.allowed.test]
    ports: [80]
    scheme: http
    websocket: true
YAML
python3 - "$EW_TMP/zone.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
z["ws.allowed.test"] = {"A": ["203.0.113.10"], "ttl": 30}
z["proxy.allowed.test"] = {"A": ["10.200.1.1"], "ttl": 30}
json.dump(z, open(sys.argv[1], "w"))
PY
ew_match "sandbox registered" "HTTP 201" ew_register sbx-1 1 "$EW_TMP/policy.yaml"

ew_note "allowed traffic"
ew_match "GET to an allowed host reaches it" '"server": "good".*"target": "/hello"' ew_curl 1 http://allowed.test/hello
ew_audit_has "audited as allowed with rule, host, path and status" type=http_request decision=allow \
  rule=allowed-http host=allowed.test path=/hello status=200 sandbox=sbx-1
ew_match "query strings pass" '"target": "/q\?token=s3cr3t"' ew_curl 1 'http://allowed.test/q?token=s3cr3t'
ew_audit_sync
ew_fail "query strings are not logged" grep -q s3cr3t "$EW_STATE"/audit/egress-*.jsonl
ew_match "keep-alive: two requests on one connection" 'HTTP/1.1 200.*HTTP/1.1 200' \
  ew_raw 1 203.0.113.10 80 'GET /a HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /b HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n'
EW_OUT=$(ew_curl 1 http://allowed.test/ka1 http://allowed.test/ka2)
p1=$(grep -o 'GET /ka1 .*peer=[0-9.:]*' "$EW_TMP/up.req" | sed 's/.*peer=//')
p2=$(grep -o 'GET /ka2 .*peer=[0-9.:]*' "$EW_TMP/up.req" | sed 's/.*peer=//')
ew_eq "keep-alive: a client's second request reuses the upstream connection" "$p2" "$p1"
ew_match "a POST body arrives whole (Content-Length)" '"body_len": 5' \
  ew_raw 1 203.0.113.10 80 'POST /p HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello'
ew_match "a chunked body is re-framed and arrives whole" '"body_len": 11' \
  ew_raw 1 203.0.113.10 80 'POST /p HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n'
ew_match "HEAD gets no body and the connection stays usable" 'HTTP/1.1 200 OK.*HTTP/1.1 200 OK' \
  ew_raw 1 203.0.113.10 80 'HEAD /h HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /g HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n'
ew_match "a chunked response is forwarded" '"target": "/chunked"' ew_curl 1 http://allowed.test/chunked
ew_match "an HTTP/1.0 response delimited by close is forwarded" '"target": "/http10"' ew_curl 1 http://allowed.test/http10
ew_match "path rule: GET /v1/... on *.allowed.test" '"target": "/v1/items"' ew_curl 1 http://api.allowed.test/v1/items
ew_match "path rule: other path denied" '"reason":"path_not_allowed"' ew_curl 1 http://api.allowed.test/admin
ew_match "method rule: POST denied" '"reason":"method_not_allowed"' ew_curl 1 -X POST http://api.allowed.test/v1/items
ew_match "dot segments are refused, not normalised into an allowed path" '"reason":"(invalid_path|path_not_allowed)"' \
  ew_raw 1 203.0.113.10 80 'GET /v1/../admin HTTP/1.1\r\nHost: api.allowed.test\r\n\r\n'

ew_note "a name outside the policy"
ew_match "DNS: NXDOMAIN for evil.test" "RCODE NXDOMAIN" ew_dns 1 10.200.1.1 evil.test A
ew_fail "curl cannot even resolve it" ew_curl 1 http://evil.test/
ew_audit_has "DNS denial audited" type=dns_query qname=evil.test decision=deny
ew_match "Host: evil.test to its real address: 403 JSON" \
  '^\{"error":"blocked_by_policy","rule":null,"reason":"no_rule_matched","request_id":"[^"]+"\}' \
  ew_curl 1 -H 'Host: evil.test' http://203.0.113.11/x

ew_note "3: forged destination"
ew_match "allowed Host sent to another address: denied" '"reason":"destination_mismatch"' \
  ew_curl 1 --resolve allowed.test:80:203.0.113.11 http://allowed.test/forged
ew_audit_has "audited" type=http_request decision=deny reason=destination_mismatch dst=203.0.113.11:80

ew_note "5: IP literals in every spelling"
for host in 203.0.113.10 3405803786 0313.0.0161.012 0xcb.0x0.0x71.0xa 203.29450 '[::ffff:203.0.113.10]' \
            '[::ffff:cb00:710a]' '[64:ff9b::cb00:710a]' '[fe80::1%25eth0]'; do
  ew_match "Host: $host denied" 'HTTP/1.1 (400|403)' \
    ew_raw 1 203.0.113.10 80 "GET /lit HTTP/1.1\\r\\nHost: $host\\r\\n\\r\\n"
done
ew_match "internal destination with an allowed Host: denied" '"reason":"(internal_address|destination_mismatch)"' \
  ew_raw 1 10.0.0.5 80 'GET /internal HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "metadata address: denied" 'HTTP/1.1 403' \
  ew_raw 1 169.254.169.254 80 'GET /latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n'

ew_note "6: the proxy itself as target"
ew_match "the gateway (the proxy's own address) with an allowed Host" 'HTTP/1.1 403' \
  ew_raw 1 10.200.1.1 80 'GET /self HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "a name that resolves to the proxy gets no address" "RCODE NOERROR ANSWERS - " \
  ew_dns 1 10.200.1.1 proxy.allowed.test A
ew_audit_has "the filtered answer is a security event" type=security_event event=dns_answer_filtered qname=proxy.allowed.test

ew_note "7: ports"
ew_match "allowed host on a port the policy does not allow" '"reason":"port_not_allowed"' \
  ew_raw 1 203.0.113.10 8080 'GET / HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n'
for port in 80x '' 99999 +80 0 -1; do
  ew_match "malformed port 'allowed.test:$port'" 'HTTP/1.1 400' \
    ew_raw 1 203.0.113.10 80 "GET / HTTP/1.1\\r\\nHost: allowed.test:$port\\r\\n\\r\\n"
done
ew_match "Host port different from the destination port" '"reason":"port_mismatch"' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n'

ew_note "8: normalisation"
ew_match "upper case is the same name" '"server": "good"' ew_raw 1 203.0.113.10 80 'GET /up HTTP/1.1\r\nHost: ALLOWED.Test\r\nConnection: close\r\n\r\n'
ew_match "one trailing dot is the same name" '"server": "good"' ew_raw 1 203.0.113.10 80 'GET /dot HTTP/1.1\r\nHost: allowed.test.\r\nConnection: close\r\n\r\n'
ew_match "full-width dot: denied" 'HTTP/1.1 (400|403)' ew_raw 1 203.0.113.10 80 $'GET / HTTP/1.1\\r\\nHost: allowed\xef\xbc\x8etest\\r\\n\\r\\n'
ew_match "homograph (Cyrillic a): denied" 'HTTP/1.1 (400|403)' ew_raw 1 203.0.113.10 80 $'GET / HTTP/1.1\\r\\nHost: \xd0\xb0llowed.test\\r\\n\\r\\n'
ew_match "its punycode form: denied" 'HTTP/1.1 (400|403)' ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: xn--llowed-4fg.test\r\n\r\n'

ew_note "9: wildcard over-match"
for host in evilallowed.test allowed.test.evil.net deep.api.allowed.test xallowed.test; do
  ew_match "$host denied" 'HTTP/1.1 403' ew_raw 1 203.0.113.10 80 "GET /v1/x HTTP/1.1\\r\\nHost: $host\\r\\n\\r\\n"
done

ew_note "10: authority tricks"
ew_match "userinfo in an absolute URI" '"reason":"userinfo_in_authority"' \
  ew_raw 1 203.0.113.10 80 'GET http://allowed.test@evil.test/ HTTP/1.1\r\nHost: allowed.test@evil.test\r\n\r\n'
ew_match "userinfo in Host" '"reason":"userinfo_in_authority"' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test@evil.test\r\n\r\n'
ew_match "fragment in the target" '"reason":"fragment_in_target"' \
  ew_raw 1 203.0.113.10 80 'GET /x#@evil.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "backslash in the target" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'GET /\\evil.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "absolute-URI host differs from Host" '"reason":"authority_mismatch"' \
  ew_raw 1 203.0.113.10 80 'GET http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "absolute-URI that agrees with Host is fine" '"server": "good"' \
  ew_raw 1 203.0.113.10 80 'GET http://allowed.test/abs HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n'
ew_match "absolute https URI on plain HTTP" '"reason":"scheme_mismatch"' \
  ew_raw 1 203.0.113.10 80 'GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "duplicate Host" '"reason":"duplicate_host"' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n'
ew_match "no Host" '"reason":"missing_host"' ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\n\r\n'

ew_note "11: request smuggling"
ew_match "Content-Length with Transfer-Encoding" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
ew_match "Transfer-Encoding: chunked, identity" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n'
ew_match "Transfer-Encoding: xchunked" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n'
ew_match "two Transfer-Encoding headers" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n'
ew_match "two Content-Length headers" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab'
ew_match "obs-fold" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: a\r\n b\r\n\r\n'
ew_match "space before the colon" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost : allowed.test\r\n\r\n'
ew_match "bare LF line endings" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\nHost: allowed.test\n\n'
ew_match "NUL in a header value" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: a\x00b\r\n\r\n'
ew_match "CR inside a header value" 'HTTP/1.1 400' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: a\rb\r\n\r\n'
EW_OUT=$(ew_raw 1 203.0.113.10 80 'GET /first HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /second HTTP/1.1\r\nHost: evil.test\r\n\r\n')
ew_match "pipelined second host: the first answered" '"target": "/first"' echo "$EW_OUT"
ew_match "pipelined second host: the second denied" '"reason":"host_changed_on_connection"' echo "$EW_OUT"
ew_fail "no request with a smuggling shape reached an upstream" ew_upstream_saw 'evil GET /second|REQ [a-z]+ POST / host=allowed.test.*len=[1-9]|X-A'

ew_note "12: upgrades"
ew_match "h2c upgrade" '"reason":"h2c_upgrade_refused"' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n'
ew_match "HTTP/2 prior knowledge" 'HTTP/1.1 (400|403)' \
  ew_raw 1 203.0.113.10 80 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
ew_match "WebSocket where no rule allows it" '"reason":"websocket_not_allowed"' \
  ew_raw 1 203.0.113.10 80 'GET /ws HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n'
ew_match "CONNECT-UDP style upgrade" '"reason":"upgrade_refused"' \
  ew_raw 1 203.0.113.10 80 'GET /.well-known/masque/udp/1.2.3.4/53/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: connect-udp\r\n\r\n'
ew_match "WebSocket where the rule allows it: upgraded, bytes flow both ways" 'HTTP/1.1 101.*ping-through-tunnel' \
  ew_raw 1 203.0.113.10 80 'GET /ws HTTP/1.1\r\nHost: ws.allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nping-through-tunnel' --timeout 2
ew_audit_has "upgrade audited" type=http_request decision=allow rule=websocket websocket=true

ew_note "13: redirects are the client's new request"
ew_match "a redirect to another host is passed to the client" 'Location: http://evil.test/stolen' \
  ew_curl 1 -i http://allowed.test/redirect?to=http://evil.test/stolen
ew_match "following it is decided afresh (denied)" '"reason":"no_rule_matched"' \
  ew_curl 1 -L --resolve evil.test:80:203.0.113.11 'http://allowed.test/redirect?to=http://evil.test/stolen'
ew_fail "the evil upstream never saw it" ew_upstream_saw 'REQ evil GET /stolen'

ew_note "14: Proxy-Authorization is never forwarded"
ew_match "request with Proxy-Authorization passes" '"server": "good"' \
  ew_curl 1 -H 'Proxy-Authorization: Basic c2VjcmV0OnNlY3JldA==' http://allowed.test/pauth
ew_ok "upstream saw no Proxy-Authorization" ew_upstream_saw 'REQ good GET /pauth host=allowed.test auth=- pauth=- '
ew_match "headers named in Connection are removed" '"target": "/conn"' \
  ew_curl 1 -H 'Connection: X-Hop' -H 'X-Hop: 1' http://allowed.test/conn
ew_nomatch "X-Hop did not reach the upstream" 'X-Hop' ew_curl 1 -H 'Connection: X-Hop' -H 'X-Hop: 1' http://allowed.test/conn

ew_note "19: relays"
ew_match "CONNECT is refused" '"reason":"connect_refused"' \
  ew_raw 1 203.0.113.10 80 'CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n'
ew_match "CONNECT to a proxy address: refused" '"reason":"connect_refused"' \
  ew_raw 1 203.0.113.11 3128 'CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n'

ew_fail "no denied request reached an upstream" ew_upstream_saw 'REQ evil|host=evil|/lit|/self|/internal|/forged'
ew_audit_has "every deny carries the sandbox and the policy hash" type=http_request decision=deny sandbox=sbx-1 'policy.hash=/^[0-9a-f]{64}$/'
ew_done
