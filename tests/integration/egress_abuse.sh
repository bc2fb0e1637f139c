#!/usr/bin/env bash
# tests/integration/egress_abuse.sh: bypass item 21. Slowloris, silent connections, huge
# header blocks and bodies, thousands of connections: the abuser gets 408/413/431/429 (or a
# reset), the event is audited, and the other sandbox is served all along.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
ew_world abuse --header-timeout 2s --max-body 1MiB --max-header-bytes 8KiB \
  --max-sandbox-connections 20 --body-timeout 2s

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: egress-abuse-test
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: tls
    hosts: [allowed.test]
YAML
ew_match "abuser registered" "HTTP 201" ew_register sbx-abuser 1 "$EW_TMP/policy.yaml"
ew_match "bystander registered" "HTTP 201" ew_register sbx-bystander 2 "$EW_TMP/policy.yaml"

ew_note "slowloris"
ew_match "an unfinished head: 408 after the header deadline" '^HTTP/1.1 408 .*"reason":"request_head_timeout"' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Slow: ' --timeout 5
ew_match "a head dripped byte by byte: 408 too (the deadline is absolute)" 'HTTP/1.1 408' \
  ew_raw 1 203.0.113.10 80 'GET / HTTP/1.1\r\nHost: allowed.test\r\nX-Slow-Drip: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n' --slow 0.1 --timeout 8
ew_match "a connection that never sends: closed after the deadline" 'END (reset|eof)' \
  ew_raw 1 203.0.113.10 80 '' --timeout 5
ew_audit_has "audited" type=connection decision=deny reason=no_data_timeout sandbox=sbx-abuser
ew_match "a TLS hello that stops halfway: reset" 'END reset' \
  ew_raw 1 203.0.113.10 443 '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03' --timeout 5
ew_audit_has "audited" type=connection decision=deny reason=handshake_timeout
ew_match "a body that stops: 408" 'HTTP/1.1 408' \
  ew_raw 1 203.0.113.10 80 'POST /slowbody HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 100\r\n\r\nabc' --timeout 6

ew_note "sizes"
big=$(python3 -c 'print("X-Big: " + "a" * 9000)')
ew_match "a header block over 8 KiB: 431" '^HTTP/1.1 431' ew_raw 1 203.0.113.10 80 "GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n$big\\r\\n\\r\\n"
ew_match "a declared body over 1 MiB: 413 before any byte goes upstream" '^HTTP/1.1 413 .*"reason":"request_body_too_large"' \
  ew_raw 1 203.0.113.10 80 'POST /huge HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 2147483648\r\n\r\n'
ew_fail "the upstream never saw it" ew_upstream_saw 'POST /huge'
EW_OUT=$(ip netns exec "$(ew_ns sb1)" python3 - <<'PY'
import socket
s = socket.create_connection(("203.0.113.10", 80), timeout=5)
s.sendall(b"POST /chunky HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n")
chunk = b"10000\r\n" + b"z" * 0x10000 + b"\r\n"
try:
    for _ in range(24):  # 1.5 MiB
        s.sendall(chunk)
except OSError:
    pass
data = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
except OSError:
    pass
print(data.decode("latin-1"))
PY
)
ew_match "a chunked body that grows over 1 MiB: 413" 'HTTP/1.1 413' echo "$EW_OUT"

ew_note "thousands of connections"
ew_host_conns() { curl -s --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/sandboxes/sbx-abuser |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["stats"]["connections"])'; }
# Idle connections live until the header deadline (2 s here): act while they are open.
# Beyond the cap (20) a connection is still read so that HTTP gets a 429 answer; beyond the
# cap + 64 it is reset at once, so a flood costs the proxy a bounded amount.
ip netns exec "$(ew_ns sb1)" python3 "$EW_TOOL" hold 203.0.113.10 80 30 3 >"$EW_TMP/hold.log" 2>&1 &
hold_pid=$!
ew_wait_line hold OPENED 10
ew_match "over the cap, the abuser's request gets 429" '^HTTP/1.1 429 .*"reason":"sandbox_connection_limit"' \
  ew_raw 1 203.0.113.10 80 'GET /over HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "the bystander is served meanwhile" '"server": "good"' ew_curl 2 http://allowed.test/bystander
wait "$hold_pid"
ip netns exec "$(ew_ns sb1)" python3 "$EW_TOOL" hold 203.0.113.10 443 300 1 >"$EW_TMP/flood.log" 2>&1 &
hold_pid=$!
max=0
for _ in $(seq 1 15); do
  live=$(ew_host_conns)
  [ "$live" -gt "$max" ] && max=$live
  sleep 0.1
done
[ "$max" -gt 20 ] && [ "$max" -le 84 ] && ew__result 1 "a flood of 300: the proxy holds at most cap + 64 (max $max)" ||
  ew__result 0 "a flood of 300: the proxy holds at most cap + 64 (max $max)"
ew_match "the bystander's TLS is served during the flood" '"server": "tls"' \
  ew_curl 2 --cacert "$EW_TMP/ca.pem" https://allowed.test/bystander-tls
wait "$hold_pid"
ew_audit_has "the limit is audited (rate-limited)" type=security_event event=limit reason=sandbox_connection_limit sandbox=sbx-abuser
ew_fail "no /over request reached the upstream" ew_upstream_saw 'GET /over'
sleep 1
ew_match "after the flood the abuser is served again" '"server": "good"' ew_curl 1 http://allowed.test/after
stats=$(curl -s --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/stats)
ew_match "stats count the limit hits" '"sandbox_connections":[1-9]' echo "$stats"

ew_note "memory budget"
ew_kill egress
ew_start_proxy --memory-budget 24KiB
ew_match "registered again" "HTTP 201" ew_register sbx-abuser 1 "$EW_TMP/policy.yaml"
ew_match "a request that needs more buffer than the sandbox's share: 503" \
  '^HTTP/1.1 503 .*"reason":"memory_budget"' \
  ew_raw 1 203.0.113.10 80 'GET /mem HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_audit_has "audited" type=http_request error=memory_budget status=503
ew_match "the proxy is still up" '"status":"ok"' ew_admin GET /v1/health
ew_done
