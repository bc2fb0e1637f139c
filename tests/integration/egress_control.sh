#!/usr/bin/env bash
# tests/integration/egress_control.sh: the control plane side of the proxy, bypass item 22.
# Traffic before a sandbox is registered is refused; an invalid policy is refused with its
# position and the old one stays; a reload is atomic and applies to the next request, also
# on a kept-alive connection; report mode allows and audits "would_deny"; removing a
# sandbox closes its connections; file policies reload on request (and SIGHUP).
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
ew_world control

ew_note "the daemon holds secrets: it never writes a core file"
# (al_confine_no_dumps sets this and PR_SET_DUMPABLE 0 together; test_common checks both)
ew_match "airlock-egress: no core dumps (RLIMIT_CORE 0, soft and hard)" 'Max core file size +0 +0 ' \
  cat "/proc/${EW_PIDS[egress]}/limits"

cat >"$EW_TMP/p1.yaml" <<'YAML'
version: 1
name: control-v1
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: banner
    cidrs: [203.0.113.12/32]
    ports: [22]
    scheme: tcp
YAML
cat >"$EW_TMP/p2.yaml" <<'YAML'
version: 1
name: control-v2
rules:
  - name: other-only
    hosts: [other.test]
    ports: [80]
    scheme: http
YAML
cat >"$EW_TMP/bad.yaml" <<'YAML'
version: 1
name: broken
rules:
  - name: typo
    hostz: [allowed.test]
YAML
cat >"$EW_TMP/report.yaml" <<'YAML'
version: 1
name: report-mode
mode: report
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
YAML
cat >"$EW_TMP/rule-report.yaml" <<'YAML'
version: 1
name: rule-report
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: trial
    hosts: [other.test]
    ports: [80]
    scheme: http
    methods: [GET]
    mode: report
YAML

ew_note "before registration"
ew_match "admin API healthy" '"status":"ok"' ew_admin GET /v1/health
ew_match "traffic from an unregistered sandbox is refused (reset)" '[Rr]eset' \
  ew_raw 1 203.0.113.10 80 'GET /early HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_audit_has "audited as unknown_source" type=security_event event=unknown_source
ew_fail "it never reached an upstream" ew_upstream_saw 'GET /early'

ew_note "invalid policies"
ew_match "registering with an invalid policy: 400 naming file:line:col" 'bad.yaml:5:[0-9]+.*HTTP 400' \
  ew_register sbx-c 1 "$EW_TMP/bad.yaml"
ew_match "nothing was registered" '[Rr]eset' ew_raw 1 203.0.113.10 80 'GET /still HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "registering with a valid policy: 201" 'control-v1.*HTTP 201' ew_register sbx-c 1 "$EW_TMP/p1.yaml"
ew_match "the same id again: 409" 'HTTP 409' ew_register sbx-c 2 "$EW_TMP/p1.yaml"
ew_match "the same address again: 409" 'already belongs to sandbox.*HTTP 409' ew_register sbx-dup 1 "$EW_TMP/p1.yaml"
ew_match "registration without addresses: 400" 'HTTP 400' ew_admin POST /v1/sandboxes '{"id":"x","addresses":[],"policy":{"yaml":"version: 1"}}'
ew_match "unknown keys in the request: 400" 'HTTP 400' ew_admin POST /v1/sandboxes '{"id":"x","addresses":["10.200.9.2"],"polcy":{}}'
ew_match "allowed traffic flows" '"server": "good"' ew_curl 1 http://allowed.test/v1
ew_match "an invalid reload: 400, the old policy stays" 'bad.yaml:5:.*previous policy stays.*HTTP 400' \
  ew_set_policy sbx-c "$EW_TMP/bad.yaml"
ew_match "traffic still decided by the old policy" '"server": "good"' ew_curl 1 http://allowed.test/still-v1
ew_audit_has "the refused reload is audited" type=policy event=reload_refused sandbox=sbx-c policy.name=control-v1

ew_note "hot reload"
# A kept-alive connection: the same request twice before the reload and once after, on the
# same socket (the connection keeps its last decision for a repeated question: not across a
# reload).
ip netns exec "$(ew_ns sb1)" python3 - "$EW_TMP/ka.sig" >"$EW_TMP/ka.log" 2>&1 <<'PY' &
import os, socket, sys, time
s = socket.create_connection(("203.0.113.10", 80), timeout=10)
def req(path):
    s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
    while len(body) < n:
        body += s.recv(65536)
    return head.split(b"\r\n")[0].decode() + " " + body.decode()
print("FIRST", req(b"/ka"), flush=True)
print("REPEAT", req(b"/ka"), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print("SECOND", req(b"/ka"), flush=True)
PY
ka_pid=$!
ew_wait_line ka REPEAT 10
ew_match "reload to a policy without allowed.test: 200 with the new hash" '"name":"control-v2".*HTTP 200' \
  ew_set_policy sbx-c "$EW_TMP/p2.yaml"
touch "$EW_TMP/ka.sig"
wait "$ka_pid"
ew_match "the kept-alive connection's next request is decided on the new policy" \
  'FIRST HTTP/1.1 200.*REPEAT HTTP/1.1 200.*SECOND HTTP/1.1 403.*no_rule_matched' cat "$EW_TMP/ka.log"
ew_audit_has "the reload is audited with both hashes" type=policy event=reload policy.name=control-v2 'old_policy_hash=/^[0-9a-f]{64}$/'
ew_match "new connections too (and the name no longer resolves)" '"reason":"no_rule_matched"' \
  ew_curl 1 --resolve allowed.test:80:203.0.113.10 http://allowed.test/after
ew_match "DNS follows the new policy" 'RCODE NXDOMAIN' ew_dns 1 10.200.1.1 allowed.test A
ew_match "and what it allows works" '"server": "evil"' ew_curl 1 --resolve other.test:80:203.0.113.11 http://other.test/v2

ew_note "report mode"
ew_match "policy in report mode" 'HTTP 200' ew_set_policy sbx-c "$EW_TMP/report.yaml"
ew_match "what it would deny is allowed" '"server": "evil"' ew_curl 1 --resolve other.test:80:203.0.113.11 http://other.test/report
ew_audit_has "and audited as would_deny" type=http_request decision=would_deny host=other.test mode=report reason=no_rule_matched
ew_match "a destination check still applies in report mode (not a policy rule)" '"reason":"destination_mismatch"' \
  ew_curl 1 --resolve allowed.test:80:203.0.113.11 http://allowed.test/forged
ew_match "rule in report mode" 'HTTP 200' ew_set_policy sbx-c "$EW_TMP/rule-report.yaml"
ew_match "a request that rule would deny (POST) is allowed" '"server": "evil"' \
  ew_curl 1 -X POST --resolve other.test:80:203.0.113.11 http://other.test/rule-report
ew_audit_has "audited as would_deny" type=http_request decision=would_deny rule=trial method=POST

ew_note "removal"
ew_match "back to v1" 'HTTP 200' ew_set_policy sbx-c "$EW_TMP/p1.yaml"
ip netns exec "$(ew_ns sb1)" python3 -c '
import socket, sys, time
s = socket.create_connection(("203.0.113.12", 22), timeout=20)
print(s.recv(100).decode().strip(), flush=True)
t = time.time()
try:
    d = s.recv(100)
    print("EOF" if not d else "DATA", flush=True)
except ConnectionResetError:
    print("RESET", flush=True)
print("after %.1fs" % (time.time() - t), flush=True)
' >"$EW_TMP/tunnel.log" 2>&1 &
tun_pid=$!
ew_wait_line tunnel BANNER 10
ew_match "unregister: 204" 'HTTP 204' ew_admin DELETE /v1/sandboxes/sbx-c
wait "$tun_pid"
ew_match "its open tunnel was closed at once" '(RESET|EOF).*after [0-4]\.' cat "$EW_TMP/tunnel.log"
ew_audit_has "the end is audited" type=connection_end end=sandbox_removed sandbox=sbx-c
ew_audit_has "the removal is audited" type=sandbox event=unregister sandbox=sbx-c
ew_match "its traffic is refused again" '[Rr]eset' ew_raw 1 203.0.113.10 80 'GET /gone HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "unknown sandbox: 404" 'HTTP 404' ew_admin DELETE /v1/sandboxes/sbx-c

ew_note "file policies"
cp "$EW_TMP/p1.yaml" "$EW_TMP/file-policy.yaml"
ew_match "register with a policy file" 'HTTP 201' ew_admin POST /v1/sandboxes \
  "{\"id\":\"sbx-f\",\"addresses\":[\"10.200.2.2\"],\"policy_file\":\"$EW_TMP/file-policy.yaml\"}"
ew_match "allowed by the file" '"server": "good"' ew_curl 2 http://allowed.test/file1
cp "$EW_TMP/p2.yaml" "$EW_TMP/file-policy.yaml"
ew_match "reload re-reads it" '"reloaded":\["sbx-f"\]' ew_admin POST /v1/reload
ew_match "now denied" '"reason":"no_rule_matched"' ew_curl 2 --resolve allowed.test:80:203.0.113.10 http://allowed.test/file2
cp "$EW_TMP/bad.yaml" "$EW_TMP/file-policy.yaml"
ew_match "a broken file on reload is reported, the policy stays" '"failed":\[\{"sandbox":"sbx-f","error":"[^"]*file-policy.yaml:5' \
  ew_admin POST /v1/reload
ew_match "still the last good one" '"server": "evil"' ew_curl 2 --resolve other.test:80:203.0.113.11 http://other.test/file3
cp "$EW_TMP/p1.yaml" "$EW_TMP/file-policy.yaml"
reloads() { ew_audit type=policy event=reload sandbox=sbx-f | wc -l; }
reloads_before=$(reloads)
kill -HUP "${EW_PIDS[egress]}"
# The reload's own record says it happened (not a pause that a busy machine could outlast).
hup_done() { [ "$(reloads)" -gt "$reloads_before" ]; }
al_wait_until 60 hup_done || true
ew_match "SIGHUP reloads too" '"server": "good"' ew_curl 2 http://allowed.test/file4

ew_note "admin API access"
ew_fail "another user cannot use the admin API" runuser -u nobody -- curl -sf --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/stats
ew_done
