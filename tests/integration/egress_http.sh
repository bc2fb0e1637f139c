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
  - name: by-address
    cidrs: [203.0.113.10/32]
    ports: [80]
    scheme: http
YAML
python3 - "$EW_TMP/zone.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
z["ws.allowed.test"] = {"A": ["203.0.113.10"], "ttl": 30}
z["proxy.allowed.test"] = {"A": ["10.200.1.1"], "ttl": 30}
json.dump(z, open(sys.argv[1], "w"))
PY
ew_match "sandbox registered" "HTTP 201" ew_register sbx-1 1 "$EW_TMP/policy.yaml"

# ew_denied MSG STATUS REASON N IP PORT DATA: sandbox N's raw request is answered STATUS with
# REASON, and the audit record with the answer's request_id says deny, REASON, STATUS.
ew_denied() {
  local m=$1 st=$2 reason=$3 rid
  shift 3
  EW_OUT=$(ew_raw "$@" 2>&1)
  rid=$(grep -o '"request_id":"[^"]*"' <<<"$EW_OUT" | head -1 | cut -d'"' -f4)
  if grep -Ezq -- "^HTTP/1.1 $st .*\"reason\":\"$reason\"" <<<"$EW_OUT" && [ -n "$rid" ] &&
    [ -n "$(ew_audit type=http_request request_id="$rid" decision=deny reason="$reason" status="$st")" ]; then
    ew__result 1 "$m: $st $reason, audited"
  else
    ew__result 0 "$m (want $st $reason in the answer and in its audit record)"
  fi
}

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

ew_note "upstream connections outlive the client's (the worker's pool)"
# Two workers, each with its own pool: of three connections one after another, two are
# accepted by the same worker, and the later of those finds the upstream the earlier left.
for i in 1 2 3; do
  ew_raw 1 203.0.113.10 80 "GET /pool$i HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n" >"$EW_TMP/pool$i.out"
done
ew_match "a client asking to close is answered so" '^HTTP/1.1 200 .*Connection: close' cat "$EW_TMP/pool1.out"
ew_fail "its close is not passed on: the upstream hop is the proxy's" \
  grep -Eq 'GET /pool1 .*fields=([^ ]*,)?connection' "$EW_TMP/up.req"
peers=$(for i in 1 2 3; do grep -o "GET /pool$i .*peer=[0-9.:]*" "$EW_TMP/up.req" | sed 's/.*peer=//'; done)
ew_eq "three client connections, fewer upstream connections" \
  "$(sort -u <<<"$peers" | wc -l | awk '{print ($1 < 3 && $1 > 0) ? "fewer" : $1}')" fewer
ew_audit_has "a request on a reused upstream says so" type=http_request 'path=/^\/pool[23]$/' upstream_reused=true
ew_eq "each request audited once" "$(ew_audit type=http_request 'path=/^\/pool[123]$/' | wc -l)" 3
# /once: the upstream closes, unanswered, a connection that already served a request, as a
# server whose idle timeout ends a pooled connection just as the proxy sends on it.
for i in 1 2 3; do
  ew_raw 1 203.0.113.10 80 "GET /once?g$i HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n" >"$EW_TMP/once$i.out"
done
ew_eq "a GET that a pooled upstream dropped is sent again on a new one and answered" \
  "$(grep -l '^HTTP/1.1 200 ' "$EW_TMP"/once[123].out | wc -l)" 3
ew_eq "(the upstream did drop a GET on a pooled connection: the resend was exercised)" \
  "$(grep -c '^DROPPED GET /once' "$EW_TMP/up.req" | awk '{print ($1 > 0) ? "dropped" : "none"}')" dropped
for i in 1 2 3; do
  ew_raw 1 203.0.113.10 80 "POST /once?p$i HTTP/1.1\\r\\nHost: allowed.test\\r\\nContent-Length: 1\\r\\nConnection: close\\r\\n\\r\\nx" >"$EW_TMP/post$i.out"
done
ew_eq "a POST the upstream dropped is not sent again: 502" \
  "$(grep -lEz '^HTTP/1.1 502 .*upstream_closed_before_response' "$EW_TMP"/post[123].out | wc -l | awk '{print ($1 > 0) ? "some" : "none"}')" some
ew_eq "each POST reached the upstream once" \
  "$(grep -Ec '^REQ [^ ]+ POST /once\?p[123] ' "$EW_TMP/up.req")" 3
# A kept upstream that its server closes while idle is closed by the proxy then (its socket
# is watched in the pool), not left half-closed until it would be taken or expire (30 s).
ew_raw 1 203.0.113.10 80 "GET /bye HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n" >"$EW_TMP/bye.out"
ew_match "a request whose server closes its kept connection soon after is answered" \
  '^HTTP/1.1 200 ' cat "$EW_TMP/bye.out"
bye_port=$(grep -o 'GET /bye .*peer=[0-9.:]*' "$EW_TMP/up.req" | sed 's/.*://')
for ((i = 0; i < 100; i++)); do
  grep -Eq "^BYE good peer=[0-9.]+:$bye_port\$" "$EW_TMP/up.req" && break
  sleep 0.1
done
ew_ok "(the server closed it)" grep -Eq "^BYE good peer=[0-9.]+:${bye_port:-none}\$" "$EW_TMP/up.req"
bye_left=open
for ((i = 0; i < 100; i++)); do
  [ -z "$(ew_host ss -Htn state established state close-wait "( sport = :${bye_port:-0} )")" ] &&
    bye_left=closed && break
  sleep 0.1
done
ew_eq "the proxy closes its end of a pooled upstream the server closed (within 10 s)" \
  "${bye_port:+$bye_left}" closed
# A removed sandbox's idle upstreams are closed with it, not when they would expire (30 s).
ew_match "a second sandbox registered" "HTTP 201" ew_register sbx-2 2 "$EW_TMP/policy.yaml"
ew_raw 2 203.0.113.10 80 "GET /gone HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n" >"$EW_TMP/gone.out"
gone_peer=$(grep -o 'GET /gone .*peer=[0-9.:]*' "$EW_TMP/up.req" | sed 's/.*peer=//')
ew_match "its request is answered" '^HTTP/1.1 200 ' cat "$EW_TMP/gone.out"
ew_fail "its upstream stays open after the client's close (pooled)" \
  grep -q "^CLOSED good peer=$gone_peer\$" "$EW_TMP/up.req"
ew_match "the sandbox unregistered" 'HTTP 204' ew_admin DELETE /v1/sandboxes/sbx-2
gone_closed=no
for ((i = 0; i < 100; i++)); do
  grep -q "^CLOSED good peer=$gone_peer\$" "$EW_TMP/up.req" && gone_closed=yes && break
  sleep 0.1
done
ew_eq "its pooled upstream is closed by the unregister (within 10 s, not at 30 s)" \
  "${gone_peer:+$gone_closed}" yes
ew_match "a POST body arrives whole (Content-Length)" '"body_len": 5' \
  ew_raw 1 203.0.113.10 80 'POST /p HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello'
ew_match "a chunked body is re-framed and arrives whole" '"body_len": 11' \
  ew_raw 1 203.0.113.10 80 'POST /p HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n'
ew_match "HEAD gets no body and the connection stays usable" 'HTTP/1.1 200 OK.*HTTP/1.1 200 OK' \
  ew_raw 1 203.0.113.10 80 'HEAD /h HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /g HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n'
ew_match "a chunked response is forwarded" '"target": "/chunked"' ew_curl 1 http://allowed.test/chunked
ew_match "an HTTP/1.0 response delimited by close is forwarded" '"target": "/http10"' ew_curl 1 http://allowed.test/http10
EW_OUT=$(ew_curl 1 -i http://allowed.test/hop)
ew_match "a response's end-to-end fields are forwarded" 'X-End-To-End: kept' echo "$EW_OUT"
ew_fail "its hop-by-hop fields, and those its Connection names, are not" \
  grep -qiE '^(X-Hop-Secret|Keep-Alive|Proxy-Authenticate|Connection: X-Hop)' <<<"$EW_OUT"
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
# The by-address rule opens 203.0.113.10:80: every spelling of that address is that address
# (canonical in the record) and lands on that rule; no spelling reaches anything else.
spellings=(203.0.113.10 3405803786 0313.0.0161.012 0xcb.0x0.0x71.0xa 0xCB00710A 203.28938 203.0.28938
  '[::ffff:203.0.113.10]' '[::ffff:cb00:710a]')
for host in "${spellings[@]}"; do
  ew_match "Host: $host is 203.0.113.10: allowed" '^HTTP/1.1 200 .*"server": "good"' \
    ew_raw 1 203.0.113.10 80 "GET /lit-ok HTTP/1.1\\r\\nHost: $host\\r\\nConnection: close\\r\\n\\r\\n"
done
ew_eq "each spelling audited on the address rule with the canonical host" \
  "$(ew_audit type=http_request decision=allow rule=by-address host=203.0.113.10 path=/lit-ok status=200 | wc -l)" \
  "${#spellings[@]}"
ew_denied "Host: NAT64 [64:ff9b::cb00:710a] is another address than the IPv4 one" 403 address_mismatch \
  1 203.0.113.10 80 'GET /lit HTTP/1.1\r\nHost: [64:ff9b::cb00:710a]\r\n\r\n'
ew_denied "Host: another public address than the destination" 403 address_mismatch \
  1 203.0.113.10 80 'GET /lit HTTP/1.1\r\nHost: 203.0.113.11\r\n\r\n'
ew_denied "Host: 0313.0.0161.013 (octal 203.0.113.11)" 403 address_mismatch \
  1 203.0.113.10 80 'GET /lit HTTP/1.1\r\nHost: 0313.0.0161.013\r\n\r\n'
ew_denied "Host: a zone id ([fe80::1%25eth0])" 400 invalid_host \
  1 203.0.113.10 80 'GET /lit HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n'
for host in 0x7f.1 2130706433 '[::ffff:127.0.0.1]' 017700000001 127.1 '[::1]' 0xa9.254.169.254 \
            '[::ffff:a9fe:a9fe]' 012.0.0.5 '[::203.0.113.10]'; do
  ew_denied "Host: $host (internal) sent to an opened address" 403 internal_address \
    1 203.0.113.10 80 "GET /lit HTTP/1.1\\r\\nHost: $host\\r\\n\\r\\n"
done
ew_denied "internal destination with an allowed Host" 403 internal_address \
  1 10.0.0.5 80 'GET /internal HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_denied "metadata address" 403 internal_address \
  1 169.254.169.254 80 'GET /latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n'
ew_denied "metadata address as a decimal Host" 403 internal_address \
  1 169.254.169.254 80 'GET /latest/meta-data/ HTTP/1.1\r\nHost: 2852039166\r\n\r\n'

ew_note "6: the proxy itself as target"
ew_denied "the gateway (the proxy's own address) with an allowed Host" 403 internal_address \
  1 10.200.1.1 80 'GET /self HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_denied "the gateway as an IP-literal Host" 403 internal_address \
  1 10.200.1.1 80 'GET /self HTTP/1.1\r\nHost: 10.200.1.1\r\n\r\n'
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
ew_denied "full-width dot" 400 invalid_host 1 203.0.113.10 80 $'GET / HTTP/1.1\\r\\nHost: allowed\xef\xbc\x8etest\\r\\n\\r\\n'
ew_denied "homograph (Cyrillic a)" 400 invalid_host 1 203.0.113.10 80 $'GET / HTTP/1.1\\r\\nHost: \xd0\xb0llowed.test\\r\\n\\r\\n'
ew_denied "its punycode form" 400 invalid_host 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: xn--llowed-4fg.test\r\n\r\n'

ew_note "9: wildcard over-match"
for host in evilallowed.test allowed.test.evil.net deep.api.allowed.test xallowed.test; do
  ew_denied "$host" 403 no_rule_matched 1 203.0.113.10 80 "GET /v1/x HTTP/1.1\\r\\nHost: $host\\r\\n\\r\\n"
done

ew_note "10: authority tricks"
ew_match "userinfo in an absolute URI" '"reason":"userinfo_in_authority"' \
  ew_raw 1 203.0.113.10 80 'GET http://allowed.test@evil.test/ HTTP/1.1\r\nHost: allowed.test@evil.test\r\n\r\n'
ew_match "userinfo in Host" '"reason":"userinfo_in_authority"' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test@evil.test\r\n\r\n'
ew_match "fragment in the target" '"reason":"fragment_in_target"' \
  ew_raw 1 203.0.113.10 80 'GET /x#@evil.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_denied "backslash in the target" 400 backslash_in_target \
  1 203.0.113.10 80 'GET /\\evil.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
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
ew_denied "Content-Length with Transfer-Encoding" 400 ambiguous_framing \
  1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
ew_denied "Transfer-Encoding: chunked, identity" 400 ambiguous_framing \
  1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n'
ew_denied "Transfer-Encoding: xchunked" 400 unsupported_transfer_encoding \
  1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n'
ew_denied "two Transfer-Encoding headers" 400 ambiguous_framing \
  1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n'
ew_denied "two Content-Length headers" 400 ambiguous_framing \
  1 203.0.113.10 80 'POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab'
ew_denied "obs-fold" 400 obs_fold \
  1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: a\r\n b\r\n\r\n'
ew_denied "space before the colon" 400 invalid_header \
  1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost : allowed.test\r\n\r\n'
ew_denied "bare LF line endings" 400 invalid_header \
  1 203.0.113.10 80 'GET / HTTP/1.1\nHost: allowed.test\n\n'
ew_denied "NUL in a header value" 400 invalid_header \
  1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: a\x00b\r\n\r\n'
ew_denied "CR inside a header value" 400 invalid_line_ending \
  1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: a\rb\r\n\r\n'
EW_OUT=$(ew_raw 1 203.0.113.10 80 'GET /first HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /second HTTP/1.1\r\nHost: evil.test\r\n\r\n')
ew_match "pipelined second host: the first answered" '"target": "/first"' echo "$EW_OUT"
ew_match "pipelined second host: the second denied" '"reason":"host_changed_on_connection"' echo "$EW_OUT"
ew_audit_has "pipelined second host: audited with the host it asked for and its own timings" type=http_request \
  decision=deny reason=host_changed_on_connection host=evil.test path=/second 'timing_us.decide=/^[0-9]{1,7}$/' \
  timing_us.upstream=None
ew_fail "no request with a smuggling shape reached an upstream" ew_upstream_saw 'evil GET /second|REQ [a-z]+ POST / host=allowed.test.*len=[1-9]|X-A'

ew_note "12: upgrades"
ew_match "h2c upgrade" '"reason":"h2c_upgrade_refused"' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n'
ew_denied "HTTP/2 prior knowledge" 403 h2_prior_knowledge_refused \
  1 203.0.113.10 80 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
ew_match "WebSocket where no rule allows it" '"reason":"websocket_not_allowed"' \
  ew_raw 1 203.0.113.10 80 'GET /ws HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n'
ew_match "CONNECT-UDP style upgrade" '"reason":"upgrade_refused"' \
  ew_raw 1 203.0.113.10 80 'GET /.well-known/masque/udp/1.2.3.4/53/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: connect-udp\r\n\r\n'
ew_match "WebSocket where the rule allows it: upgraded, bytes flow both ways" 'HTTP/1.1 101.*ping-through-tunnel' \
  ew_raw 1 203.0.113.10 80 'GET /ws HTTP/1.1\r\nHost: ws.allowed.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nping-through-tunnel' --timeout 10 --until ping-through-tunnel
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

ew_fail "no denied request reached an upstream" ew_upstream_saw 'REQ evil|host=evil|/lit |/self|/internal|/forged|/latest'
ew_audit_has "every deny carries the sandbox and the policy hash" type=http_request decision=deny sandbox=sbx-1 'policy.hash=/^[0-9a-f]{64}$/'
ew_done
