#!/usr/bin/env bash
# tests/integration/egress_limits.sh: the limits egress_abuse.sh does not reach, with short
# values: --max-connections (all sandboxes together: 503 for HTTP, reset for TLS, audited,
# and served again once connections close), --idle-timeout (a quiet tunnel is closed, not
# before), --keepalive-timeout (a quiet client between requests is closed, not before).
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
# (--header-timeout is long: the held silent connections below must outlive the checks made
# while they are held, however slow the machine is.)
ew_world limits --max-connections 4 --idle-timeout 2s --keepalive-timeout 2s --header-timeout 120s

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: egress-limits-test
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: tls
    hosts: [allowed.test]
  - name: banner
    cidrs: [203.0.113.12/32]
    ports: [22]
    scheme: tcp
YAML
ew_match "sandbox 1 registered" "HTTP 201" ew_register sbx-one 1 "$EW_TMP/policy.yaml"
ew_match "sandbox 2 registered" "HTTP 201" ew_register sbx-two 2 "$EW_TMP/policy.yaml"

# ew_timed VAR CMD...: runs CMD, its output in EW_OUT, its duration (seconds) in VAR.
ew_timed() {
  local var=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  EW_OUT=$("$@" 2>&1)
  t1=$(date +%s.%N)
  printf -v "$var" '%s' "$(python3 -c "print(round($t1 - $t0, 2))")"
}
# ew_atleast T MIN: T >= MIN. The deadlines below are checked from below only: a close
# before its time is a bug whatever the load, one after it is what a loaded machine does
# (the client's own --timeout 8 bounds it, and the audit record names the deadline).
ew_atleast() { python3 -c "import sys; sys.exit(0 if $1 >= $2 else 1)"; }

# sb_conns ID N: the proxy counts N open connections of sandbox ID.
sb_conns() { ew_admin GET "/v1/sandboxes/$1" | grep -Eq "\"connections\": ?$2,"; }

ew_note "--max-connections 4: every sandbox together"
# The four connections are held until the test closes the hold's input (fd 8), not for a
# fixed time: the checks below run while they are open, however long they take.
mkfifo "$EW_TMP/hold.in"
ew_hold 1 203.0.113.10 80 4 0 --until-eof <"$EW_TMP/hold.in" >"$EW_TMP/hold.log" 2>&1 &
hold_pid=$!
exec 8>"$EW_TMP/hold.in"
ew_wait_line hold 'OPENED 4' 60
# (OPENED is the client's side: the proxy accepts them on its own time.)
al_wait_until 60 sb_conns sbx-one 4 || true
ew_match "four silent connections held: the proxy keeps no buffer for them before they speak" \
  '"connections": ?4, ?"connections_peak": ?[0-9]+, ?"memory": ?0[,}]' ew_admin GET /v1/sandboxes/sbx-one
ew_match "another sandbox's HTTP request over the proxy's cap: 503" \
  '^HTTP/1.1 503 .*"reason":"proxy_connection_limit"' \
  ew_raw 2 203.0.113.10 80 'GET /over-global HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "and its TLS: reset" RESET ew_hello 2 203.0.113.10 443 --sni allowed.test
ew_audit_has "the limit is audited" type=security_event event=limit reason=proxy_connection_limit sandbox=sbx-two
ew_audit_has "the request is audited with the reason" type=http_request decision=deny \
  reason=proxy_connection_limit status=503 sandbox=sbx-two
exec 8>&-
wait "$hold_pid"
ew_match "the held connections stayed open throughout" 'ALIVE 4' cat "$EW_TMP/hold.log"
al_wait_until 60 sb_conns sbx-one 0 || true
ew_match "once the held connections are gone, the other sandbox is served" '"server": "good"' \
  ew_curl 2 http://allowed.test/after-global
ew_fail "nothing over the cap reached the upstream" ew_upstream_saw 'GET /over-global'

ew_note "--idle-timeout 2s: a quiet tunnel"
ew_timed took ew_raw 1 203.0.113.12 22 '' --timeout 8
ew_match "a raw TCP tunnel that stays quiet after the banner is closed" '^BANNER.*END (reset|eof)' echo "$EW_OUT"
ew_ok "not before 2 s (took $took s)" ew_atleast "$took" 1.8
ew_audit_has "its end is audited as idle_timeout" type=connection_end end=idle_timeout sandbox=sbx-one
ew_timed took ew_raw 1 203.0.113.12 22 'ping-1' --slow 0.5 --timeout 8
ew_match "a tunnel with a byte every 0.5 s stays open past the deadline" 'ping-1.*END (reset|eof)' echo "$EW_OUT"
ew_ok "and is closed not before 2 s after the last byte, sent at 2.5 s (took $took s)" ew_atleast "$took" 4.3
ew_timed took ew_hello 1 203.0.113.10 443 --sni allowed.test --timeout 8
ew_match "a TLS passthrough that stays quiet after the server's hello" 'SERVERHELLO' echo "$EW_OUT"
ew_audit_has "is closed as idle_timeout too" type=connection_end end=idle_timeout proto=tls sandbox=sbx-one

ew_note "--keepalive-timeout 2s: a quiet client between requests"
ka=$(ew_sb 1 python3 - "$EW_TOOL" <<'PY'
import os, socket, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import egress_tool

def response(s):
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d:
            return data
        data += d
    head, _, body = data.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    while len(body) < n:
        body += s.recv(65536)
    return head

s = socket.create_connection(("203.0.113.10", 80), timeout=8)
s.sendall(b"GET /ka1 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
r1 = response(s)
time.sleep(0.5)
s.sendall(b"GET /ka2 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
r2 = response(s)
t0 = time.time()
_, how = egress_tool.read_until_end(s, 8)
print("FIRST %s SECOND %s CLOSED %s AFTER %.2f" % (r1.split(b"\r\n")[0].decode(), r2.split(b"\r\n")[0].decode(),
                                                   how, time.time() - t0))
PY
)
ew_match "a second request 0.5 s after the first is served on the same connection" \
  'FIRST HTTP/1.1 200 OK SECOND HTTP/1.1 200 OK CLOSED eof' echo "$ka"
after=$(sed -n 's/.*AFTER \([0-9.]*\).*/\1/p' <<<"$ka")
ew_ok "then the quiet connection is closed, not before 2 s (after $after s)" ew_atleast "${after:-0}" 1.8
ew_audit_has "both requests audited" type=http_request decision=allow path=/ka2 status=200 sandbox=sbx-one
ew_match "the proxy is still up" '"status":"ok"' ew_admin GET /v1/health
ew_done
