#!/usr/bin/env bash
# tests/integration/egress_abuse.sh: bypass item 21. Slowloris, silent connections, huge
# header blocks and bodies, thousands of connections, DNS floods, floods of allowed requests
# and of denials: the abuser gets 408/413/431/429/REFUSED (or a reset), the event is audited
# (floods beyond the sandbox's audit budgets as aggregate records, so the audit log grows by
# a bounded amount), and the other sandbox is served, and its records written one by one,
# all along.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
source "$AIRLOCK_SOURCE_DIR/tests/lib/wait.sh"
ew_world abuse --header-timeout 2s --max-body 1MiB --max-header-bytes 8KiB \
  --max-sandbox-connections 20 --body-timeout 2s \
  --dns-rate 20 --dns-burst 40 --dns-inflight 8 --dns-timeout 60s \
  --audit-allow-rate 20 --audit-allow-burst 40 --audit-deny-rate 5 --audit-deny-burst 10

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
  - name: slow
    hosts: ["*.slow.test"]
  - name: flood
    hosts: [flood.test]
YAML
python3 - "$EW_TMP/zone.json" <<'PY2'
import json, sys
z = json.load(open(sys.argv[1]))
# The abuser's slow names are answered once the test says so (the go file): its in-flight
# share is full for as long as the test needs, however slow the machine; the bystander's is
# answered at once.
z["*.slow.test"] = {"A": ["203.0.113.10"], "ttl": 30, "hold": sys.argv[1] + ".slow-go"}
z["b1.slow.test"] = {"A": ["203.0.113.10"], "ttl": 30}
# The DNS flood's name: asked for the first time by the flood's warm-up, and cached for the
# proxy's longest TTL (300 s).
z["flood.test"] = {"A": ["203.0.113.10"], "ttl": 3600}
json.dump(z, open(sys.argv[1], "w"))
PY2
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

ew_note "a DNS flood: the sandbox's query rate (20/s, burst 40)"
# ew_sum FIELD FILTER...: the sum of FIELD over the matching audit records.
ew_sum() {
  local f=$1
  shift
  ew_audit "$@" | python3 -c 'import json,sys; print(sum(int(json.loads(l).get(sys.argv[1]) or 0) for l in sys.stdin))' "$f"
}
ew_count() { ew_audit "$@" | wc -l; }
ew_field() { sed -n "s/.* $1 \([0-9]*\).*/\1/p" <<<"$2"; }
# ew_bucket NAME [SANDBOX]: the tokens left now in one of the sandbox's buckets (dns,
# audit_allow, audit_deny), as the proxy counts them.
ew_bucket() {
  curl -s --unix-socket "$EW_STATE/run/egress.sock" "http://egress/v1/sandboxes/${2:-sbx-abuser}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["buckets"][sys.argv[1]])' "$1"
}
# ew_full NAME BURST...: wait until the abuser's buckets are full (a refill is the proxy's
# clock, not the test's: ask it instead of sleeping).
ew_full() {
  local ok=0
  full() { [ "$(ew_bucket "$1")" = "$2" ]; }
  while [ $# -ge 2 ]; do
    al_wait_until 60 full "$1" "$2" || ok=1
    shift 2
  done
  return $ok
}
# The flood's name in the abuser's cache first, so that the flood costs no upstream query: a
# name nothing asked before (allowed.test is in the cache already, resolved by the proxy for
# the requests above with its 30 s TTL, and on a loaded machine it ran out during the flood:
# the queries after that joined one upstream resolution within the in-flight share, 8, and
# were REFUSED beyond it). Waited for: the proxy caches an answer before it sends it.
ew_match "the flood's name is in the abuser's cache" "RCODE NOERROR ANSWERS 203.0.113.10 TTL 300" \
  ew_dns 1 10.200.1.1 flood.test A --timeout 60
ew_ok "the abuser's DNS bucket is full (40)" ew_full dns 40
q_before=$(ew_count type=dns_query sandbox=sbx-abuser)
qa_before=$(ew_sum count type=aggregate of=dns_query decision=allow sandbox=sbx-abuser)
ev_before=$(ew_count type=security_event event=limit sandbox=sbx-abuser)
for i in $(seq 1 10); do ew_dns 2 10.200.2.1 allowed.test A --timeout 30; done >"$EW_TMP/bystander-dns.log" 2>&1 &
by_pid=$!
flood=$(ew_sb 1 python3 "$EW_TOOL" dns-flood 10.200.1.1 400 flood.test --wait 10)
wait "$by_pid"
echo "     flood: $flood"
ok=$(ew_field NOERROR "$flood")
refused=$(ew_field REFUSED "$flood")
elapsed=$(ew_field ELAPSED_MS "$flood")
EW_OUT=$flood
ew_match "every query of the flood was answered (none lost)" 'SENT 400 .*NOANSWER 0 ' echo "$flood"
# What the bucket guarantees at any speed: a full bucket answers its burst (40), and over the
# flood's span at most burst + rate x span (+1 for the token being refilled at the start).
max_ok=$((40 + 20 * elapsed / 1000 + 1))
[ "${ok:-0}" -ge 40 ] && [ "$ok" -le "$max_ok" ] && [ "$((ok + ${refused:-0}))" = 400 ] &&
  ew__result 1 "400 queries: $ok answered (40..$max_ok over ${elapsed} ms), the rest REFUSED ($refused)" ||
  ew__result 0 "400 queries: 40..$max_ok answered over ${elapsed} ms, the rest REFUSED (got $ok, $refused)"
ew_eq "the bystander's 10 queries were all answered during the flood" \
  "$(grep -c 'RCODE NOERROR ANSWERS 203.0.113.10' "$EW_TMP/bystander-dns.log")" 10
# The sweep (every second, for counts at least a second old) writes what is still counted:
# wait until the records account for the flood (a bound, not the sweep's period, which a
# loaded machine stretches).
dns_recorded() {
  [ "$(($(ew_count type=dns_query sandbox=sbx-abuser) - q_before + \
    $(ew_sum count type=aggregate of=dns_query decision=allow sandbox=sbx-abuser) - qa_before))" = "$ok" ] &&
    [ "$(ew_sum suppressed type=security_event event=limit reason=dns_rate_limit sandbox=sbx-abuser)" = "$refused" ]
}
al_wait_until 60 dns_recorded || true
ew_eq "one record per answered query (or counted in an aggregate), none per refused one" \
  "$(($(ew_count type=dns_query sandbox=sbx-abuser) - q_before + \
    $(ew_sum count type=aggregate of=dns_query decision=allow sandbox=sbx-abuser) - qa_before))" "$ok"
# One limit record per second at most while the flood lasts, and one by the sweep after it.
events=$(($(ew_count type=security_event event=limit sandbox=sbx-abuser) - ev_before))
max_ev=$((elapsed / 1000 + 2))
[ "$events" -ge 1 ] && [ "$events" -le "$max_ev" ] && ew__result 1 "the refused queries: $events aggregated records" ||
  ew__result 0 "the refused queries: 1..$max_ev aggregated records (got $events)"
ew_eq "the aggregated records count every refused query" \
  "$(ew_sum suppressed type=security_event event=limit reason=dns_rate_limit sandbox=sbx-abuser)" "$refused"
stats=$(curl -s --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/stats)
ew_eq "/v1/stats counts them (limits.dns_rate)" \
  "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["limits"]["dns_rate"])' "$stats")" "$refused"
ew_audit_has "the aggregated record names the limit" type=security_event event=limit reason=dns_rate_limit \
  decision=deny limit=20 interval_ms=1000 sandbox=sbx-abuser 'policy.hash=/^[0-9a-f]{64}$/'

ew_note "a DNS flood of names that need the upstream: the sandbox's in-flight share (8)"
ew_ok "the abuser's DNS bucket is full again" ew_full dns 40
inflight() { curl -s --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/stats |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["limits"]["dns_inflight"])'; }
if_before=$(inflight)
ew_sb 1 python3 "$EW_TOOL" dns-flood 10.200.1.1 30 'a{i}.slow.test' --wait 60 >"$EW_TMP/slow-flood.log" 2>&1 &
fl_pid=$!
# The upstream holds the abuser's names: once 22 are refused, 8 are in flight and stay so.
refused22() { [ "$(($(inflight) - if_before))" -ge 22 ]; }
al_wait_until 60 refused22 || true
ew_eq "22 refused while 8 are in flight (not queued behind the slow upstream)" "$(($(inflight) - if_before))" 22
ew_match "the bystander's uncached name is resolved meanwhile" "RCODE NOERROR ANSWERS 203.0.113.10" \
  ew_dns 2 10.200.2.1 b1.slow.test A --timeout 10
touch "$EW_TMP/zone.json.slow-go"
wait "$fl_pid"
flood=$(cat "$EW_TMP/slow-flood.log")
ew_match "8 resolved, 22 REFUSED at once" \
  'NOERROR 8 NXDOMAIN 0 REFUSED 22 SERVFAIL 0 NOANSWER 0' echo "$flood"
inflight_recorded() {
  [ "$(ew_sum suppressed type=security_event event=limit reason=dns_inflight_limit sandbox=sbx-abuser)" = 22 ]
}
al_wait_until 60 inflight_recorded || true
ew_eq "aggregated as dns_inflight_limit with the count" \
  "$(ew_sum suppressed type=security_event event=limit reason=dns_inflight_limit sandbox=sbx-abuser)" 22

# ew_requests N PATH: N requests of sandbox 1 to allowed.test, one connection each; prints
# "STATUS200 n ELAPSED_MS t" (t: from the first request sent to the last answer).
ew_requests() {
  ew_sb 1 python3 - "$@" <<'PY2'
import http.client, sys, time
n, path = int(sys.argv[1]), sys.argv[2]
ok = 0
t0 = time.monotonic()
for i in range(n):
    c = http.client.HTTPConnection("203.0.113.10", 80, timeout=5)
    c.request("GET", path, headers={"Host": "allowed.test"})
    r = c.getresponse()
    r.read()
    ok += r.status == 200
    c.close()
print("STATUS200 %d ELAPSED_MS %d" % (ok, int((time.monotonic() - t0) * 1000) + 1))
PY2
}

ew_note "a flood of allowed requests: 40 records at once and 20 per second written, the rest aggregated"
ew_ok "both audit budgets of the abuser are full (40, 10)" ew_full audit_allow 40 audit_deny 10
by_before=$(ew_count type=http_request sandbox=sbx-bystander)
ends_before=$(($(ew_count type=connection_end sandbox=sbx-abuser) + \
  $(ew_sum count type=aggregate of=connection_end sandbox=sbx-abuser)))
# 10 requests: 30 records (query, request and connection end), within its own burst of 40
for i in $(seq 1 10); do ew_curl 2 "http://allowed.test/by$i"; done >"$EW_TMP/bystander-http.log" 2>&1 &
by_pid=$!
rep=$(ew_requests 300 /flood)
wait "$by_pid"
ew_match "every request of the flood was served" 'STATUS200 300' echo "$rep"
elapsed=$(ew_field ELAPSED_MS "$rep")
# The sweep writes the aggregates whose interval ended: wait until they account for the flood.
flood_written() { ew_count type=http_request decision=allow path=/flood sandbox=sbx-abuser; }
flood_counted() {
  ew_sum count type=aggregate of=http_request decision=allow rule=web host=allowed.test sandbox=sbx-abuser
}
flood_ends() {
  echo $(($(ew_count type=connection_end sandbox=sbx-abuser) + \
    $(ew_sum count type=aggregate of=connection_end sandbox=sbx-abuser) - ends_before))
}
flood_recorded() { [ $(($(flood_written) + $(flood_counted))) = 300 ] && [ "$(flood_ends)" = 300 ]; }
al_wait_until 60 flood_recorded || true
written=$(flood_written)
counted=$(flood_counted)
EW_OUT="written $written counted $counted over $elapsed ms"
# The burst of 40 records is shared with the connections' ends: at least 20 requests; and at
# most what the budget admits over the flood's span, at any speed.
max_w=$((40 + 20 * elapsed / 1000 + 1))
[ "$written" -ge 20 ] && [ "$written" -le "$max_w" ] && [ "$((written + counted))" = 300 ] &&
  ew__result 1 "$written written one by one, $counted counted in aggregates: every request accounted for" ||
  ew__result 0 "20..$max_w written, written + counted = 300 (got $written + $counted over $elapsed ms)"
# One aggregate per second of the flood (its intervals), one more for the interval it ended in.
aggs=$(ew_count type=aggregate of=http_request decision=allow sandbox=sbx-abuser)
max_a=$((elapsed / 1000 + 2))
[ "$aggs" -ge 1 ] && [ "$aggs" -le "$max_a" ] && ew__result 1 "as $aggs aggregate records (one per second at most)" ||
  ew__result 0 "1..$max_a aggregate records over $elapsed ms (got $aggs)"
bytes_w=$(ew_sum bytes_down type=http_request decision=allow path=/flood sandbox=sbx-abuser)
bytes_a=$(ew_sum bytes_down type=aggregate of=http_request decision=allow sandbox=sbx-abuser)
per=$(ew_audit type=http_request decision=allow path=/flood sandbox=sbx-abuser |
  python3 -c 'import json,sys; print(json.loads(sys.stdin.readlines()[0])["bytes_down"])')
ew_eq "the aggregates carry the bytes of the requests they count" "$((bytes_w + bytes_a))" "$((per * 300))"
ew_audit_has "an aggregate names the sandbox, policy, rule, host, status classes and request ids" \
  type=aggregate of=http_request decision=allow rule=web reason=rule_allows host=allowed.test \
  sandbox=sbx-abuser template=base 'policy.hash=/^[0-9a-f]{64}$/' limit=20 interval_ms=1000 \
  'first_request_id=/^[0-9a-f]{8}-[0-9a-f]+$/' 'last_request_id=/^[0-9a-f]{8}-[0-9a-f]+$/' 'status.2xx=/^[1-9]/' \
  'first_time=/Z$/' 'last_time=/Z$/'
ew_eq "so are the ends of its 300 connections" "$(flood_ends)" 300
AIRLOCK="$EW_BIN/airlock"
ew_match "audit query --type http_request shows the aggregates that count requests" \
  '"type":"aggregate".*"of":"http_request"' "$AIRLOCK" audit query --dir "$EW_STATE/audit" \
  --type http_request --sandbox sbx-abuser --decision allow --json
ew_nomatch "--type aggregate shows only aggregates" '"type":"http_request"' \
  "$AIRLOCK" audit query --dir "$EW_STATE/audit" --type aggregate --json
ew_match "the human view prints the count and the request ids" \
  'aggregate +allow +rule_allows +sbx-abuser +[0-9]+ x http_request allowed.test [0-9a-f]+-[0-9a-f]+\.\.[0-9a-f]+-' \
  "$AIRLOCK" audit query --dir "$EW_STATE/audit" --type aggregate --sandbox sbx-abuser
ew_ok "OCSF: an aggregate is an HTTP Activity with its count and time span" python3 -c '
import json, sys
evs = [json.loads(l) for l in sys.stdin.read().splitlines()]
agg = [e for e in evs if e["unmapped"].get("type") == "aggregate" and e["unmapped"].get("of") == "http_request"]
assert agg, "no aggregate exported"
for e in agg:
    assert e["class_uid"] == 4002 and e["activity_id"] == 99 and e["count"] == e["unmapped"]["count"]
    assert e["start_time"] <= e["end_time"] and e["metadata"]["uid"] == e["unmapped"]["first_request_id"]
' <<<"$("$AIRLOCK" audit export --ocsf --dir "$EW_STATE/audit" --sandbox sbx-abuser)"
ew_eq "the bystander's 10 requests were all served" "$(grep -c '"server": "good"' "$EW_TMP/bystander-http.log")" 10
ew_eq "and all written one by one (its budget is its own)" \
  "$(($(ew_count type=http_request sandbox=sbx-bystander) - by_before))" 10
ew_eq "no aggregate of the bystander" "$(ew_count type=aggregate sandbox=sbx-bystander)" 0

ew_note "repeated identical denials (10 at once and 5 per second written, the rest counted)"
ew_ok "both audit budgets of the abuser are full again" ew_full audit_allow 40 audit_deny 10
rep=$(ew_sb 1 python3 - "$EW_TOOL" <<'PY2'
import os, socket, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import egress_tool
http403 = resets = 0
t0 = time.monotonic()
for _ in range(30):
    s = socket.create_connection(("203.0.113.11", 80), timeout=3)
    s.sendall(b"GET /rep HTTP/1.1\r\nHost: evil.test\r\n\r\n")
    out, _ = egress_tool.read_until_end(s, 3)
    http403 += out.startswith(b"HTTP/1.1 403")
    s = socket.create_connection(("203.0.113.10", 443), timeout=3)
    s.sendall(egress_tool.client_hello("evil.test"))
    out, how = egress_tool.read_until_end(s, 3)
    resets += how == "reset"
print("HTTP403 %d RESETS %d ELAPSED_MS %d" % (http403, resets, int((time.monotonic() - t0) * 1000) + 1))
PY2
)
ew_match "every one is still denied" 'HTTP403 30 RESETS 30' echo "$rep"
elapsed=$(ew_field ELAPSED_MS "$rep")
rep_counts() {
  written=$(ew_count type=http_request decision=deny host=evil.test path=/rep sandbox=sbx-abuser)
  counted=$(ew_sum count type=aggregate of=http_request decision=deny reason=no_rule_matched host=evil.test \
    sandbox=sbx-abuser)
  w_tls=$(ew_count type=connection decision=deny sni=evil.test reason=no_rule_matched sandbox=sbx-abuser)
  c_tls=$(ew_sum count type=aggregate of=connection decision=deny reason=no_rule_matched host=evil.test \
    sandbox=sbx-abuser)
  [ "$((written + counted))" = 30 ] && [ "$((w_tls + c_tls))" = 30 ]
}
al_wait_until 60 rep_counts || true
EW_OUT="http: written $written counted $counted; tls: written $w_tls counted $c_tls; over $elapsed ms"
# At most the deny budget's burst + rate x the span written one by one, at any speed.
max_w=$((10 + 5 * elapsed / 1000 + 1))
[ "$((written + w_tls))" -ge 10 ] && [ "$((written + w_tls))" -le "$max_w" ] &&
  [ "$((written + counted))" = 30 ] && [ "$((w_tls + c_tls))" = 30 ] &&
  ew__result 1 "HTTP: $written + $counted, TLS: $w_tls + $c_tls (written one by one + counted in aggregates)" ||
  ew__result 0 "written + counted = 30 for each, 10..$max_w written (got $EW_OUT)"
ew_audit_has "a denial aggregate has the counts and the rate" type=aggregate of=http_request decision=deny \
  reason=no_rule_matched host=evil.test rule=None limit=5 'count=/^[1-9]/'

ew_note "denials that all differ (a new name each): merged beyond 16 names per second"
ew_ok "both audit budgets of the abuser are full again" ew_full audit_allow 40 audit_deny 10
a_before=$(ew_count type=aggregate sandbox=sbx-abuser)
c_before=$(ew_sum count type=aggregate of=http_request decision=deny sandbox=sbx-abuser)
rep=$(ew_sb 1 python3 - "$EW_TOOL" <<'PY2'
import os, socket, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import egress_tool, time
http403 = 0
t0 = time.monotonic()
for i in range(120):
    s = socket.create_connection(("203.0.113.11", 80), timeout=3)
    s.sendall(b"GET /many HTTP/1.1\r\nHost: n%d.evil.test\r\n\r\n" % i)
    out, _ = egress_tool.read_until_end(s, 3)
    http403 += out.startswith(b"HTTP/1.1 403")
print("HTTP403 %d ELAPSED_MS %d" % (http403, int((time.monotonic() - t0) * 1000) + 1))
PY2
)
ew_match "every one is still denied" 'HTTP403 120' echo "$rep"
elapsed=$(ew_field ELAPSED_MS "$rep")
many_counts() {
  written=$(ew_count type=http_request decision=deny path=/many sandbox=sbx-abuser)
  counted=$(($(ew_sum count type=aggregate of=http_request decision=deny sandbox=sbx-abuser) - c_before))
  [ "$((written + counted))" = 120 ]
}
al_wait_until 60 many_counts || true
EW_OUT="written $written counted $counted over $elapsed ms"
max_w=$((10 + 5 * elapsed / 1000 + 1))
[ "$written" -le "$max_w" ] && [ "$((written + counted))" = 120 ] &&
  ew__result 1 "$written written one by one, $counted counted in aggregates" ||
  ew__result 0 "at most $max_w written, written + counted = 120 (got $EW_OUT)"
ew_audit_has "names beyond the table are merged (rule, reason, host null)" type=aggregate of=http_request \
  decision=deny merged=true host=None sandbox=sbx-abuser
aggs=$(($(ew_count type=aggregate sandbox=sbx-abuser) - a_before))
secs=$(ew_audit type=aggregate sandbox=sbx-abuser | tail -n "$aggs" |
  python3 -c 'import json,sys; print(len({json.loads(l)["first_time"][:19] for l in sys.stdin}))')
[ "$aggs" -le $((17 * secs)) ] && ew__result 1 "$aggs aggregate records over $secs second(s): at most 16 + 1 merged per second" ||
  ew__result 0 "at most 17 aggregate records per second (got $aggs over $secs)"
stats=$(curl -s --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/stats)
ew_match "/v1/stats counts the records counted into aggregates (limits.audit_aggregated)" \
  '"audit_aggregated": *[1-9]' echo "$stats"
ew_ok "the log with its aggregates verifies" "$EW_BIN/airlock" audit verify --dir "$EW_STATE/audit"

ew_note "thousands of connections"
# Idle connections live until the header deadline: the proxy starts again with one of 60 s,
# so that the held connections are open for as long as the test acts on them however busy
# the machine is, and the holders close them when the test says (their input ends).
# Beyond the cap (20) a connection is still read so that HTTP gets a 429 answer; beyond the
# cap + 64 it is reset at once, so a flood costs the proxy a bounded amount.
ew_kill egress
ew_start_proxy --max-sandbox-connections 20 --header-timeout 60s
ew_match "abuser registered again" "HTTP 201" ew_register sbx-abuser 1 "$EW_TMP/policy.yaml"
ew_match "bystander registered again" "HTTP 201" ew_register sbx-bystander 2 "$EW_TMP/policy.yaml"
exec {hold_in}> >(ip netns exec "$(ew_ns sb1)" python3 "$EW_TOOL" hold 203.0.113.10 80 30 1 --until-eof \
  >"$EW_TMP/hold.log" 2>&1)
hold_pid=$!
ew_wait_line hold OPENED 60
ew_match "over the cap, the abuser's request gets 429" '^HTTP/1.1 429 .*"reason":"sandbox_connection_limit"' \
  ew_raw 1 203.0.113.10 80 'GET /over HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "the bystander is served meanwhile" '"server": "good"' ew_curl 2 http://allowed.test/bystander
exec {hold_in}>&-
wait "$hold_pid"
ew_host_peak() { curl -s --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/sandboxes/sbx-abuser |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["stats"]["connections_peak"])'; }
peak_before=$(ew_host_peak)
exec {hold_in}> >(ip netns exec "$(ew_ns sb1)" python3 "$EW_TOOL" hold 203.0.113.10 443 300 1 --until-eof \
  >"$EW_TMP/flood.log" 2>&1)
hold_pid=$!
ew_wait_line flood OPENED 120
# The proxy's own peak, not a sample that a slow machine could take between the connections.
max=$(ew_host_peak)
[ "$max" -gt 20 ] && [ "$max" -gt "$peak_before" ] && [ "$max" -le 84 ] &&
  ew__result 1 "a flood of 300: the proxy holds at most cap + 64 (peak $max)" ||
  ew__result 0 "a flood of 300: the proxy holds at most cap + 64 (peak $max, before $peak_before)"
ew_match "the bystander's TLS is served during the flood" '"server": "tls"' \
  ew_curl 2 --cacert "$EW_TMP/ca.pem" https://allowed.test/bystander-tls
exec {hold_in}>&-
wait "$hold_pid"
ew_audit_has "the limit is audited (rate-limited)" type=security_event event=limit reason=sandbox_connection_limit sandbox=sbx-abuser
ew_fail "no /over request reached the upstream" ew_upstream_saw 'GET /over'
# The flood's connections close as its holder exits; the proxy counts them down as it sees
# them close: wait for that, not for a second.
served() { ew_curl 1 http://allowed.test/after 2>/dev/null | grep -q '"server": "good"'; }
al_wait_until 60 served || true
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
