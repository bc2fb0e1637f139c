#!/usr/bin/env bash
# tests/integration/egress_audit.sh: the audit log as an auditor uses it. `airlock audit
# verify` passes on a real log and fails, naming the first bad record and why, after each
# kind of tampering (edited, removed, reordered, inserted, truncated, bad signature);
# tail/query/export --ocsf read it; rotation seals every file and retention deletes the oldest,
# which verify accounts for by rule (and tampering in what is kept, a deleted middle file or
# a file deleted by hand are still caught); a full audit disk fails closed (bypass item 22)
# and recovers when space is back.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
ew_world audit
AIRLOCK="$EW_BIN/airlock"

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: audit-test
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
YAML
ew_match "sandbox registered" "HTTP 201" ew_register sbx-a 1 "$EW_TMP/policy.yaml"
for i in 1 2 3; do ew_curl 1 "http://allowed.test/ok$i?secret=hunter$i" >/dev/null; done
ew_curl 1 -H 'Host: evil.test' http://203.0.113.11/denied >/dev/null
ew_dns 1 10.200.1.1 evil.test A >/dev/null
ew_hello 1 203.0.113.10 443 --sni allowed.test >/dev/null
ew_match "a checkpoint on request" 'HTTP 204' ew_admin POST /v1/audit/checkpoint
ew_audit_sync
A="$EW_STATE/audit"

ew_note "verify"
ew_match "a real log verifies" 'intact|INTACT|ok' "$AIRLOCK" --state-dir "$EW_STATE" audit verify
ew_ok "exit status 0" "$AIRLOCK" --state-dir "$EW_STATE" audit verify
ew_match "--json says intact" '"verdict":"intact"' "$AIRLOCK" --state-dir "$EW_STATE" audit verify --json

# tamper DIR KIND: a copy of the log, changed one way.
tamper() {
  local d="$EW_TMP/t-$1"
  rm -rf "$d"
  cp -a "$A" "$d"
  local f
  f=$(ls "$d"/egress-*.jsonl | tail -1)
  python3 - "$f" "$1" <<'PY'
import json, sys
path, kind = sys.argv[1], sys.argv[2]
lines = open(path, "rb").read().split(b"\n")
assert lines[-1] == b""
body = lines[:-1]
# a record of the egress (not a checkpoint) in the middle
idx = [i for i, l in enumerate(body) if b'"type":"http_request"' in l][1]
if kind == "edited":
    body[idx] = body[idx].replace(b'"decision":"allow"', b'"decision":"deny"')
elif kind == "removed":
    del body[idx]
elif kind == "reordered":
    body[idx], body[idx + 1] = body[idx + 1], body[idx]
elif kind == "inserted":
    body.insert(idx, body[idx])
elif kind == "truncated":
    body = body[:idx]
elif kind == "badsig":
    cp = [i for i, l in enumerate(body) if b'"auditlog"' in l][0]
    j = json.loads(body[cp])
    s = j["auditlog"]["sig"]
    j["auditlog"]["sig"] = ("0" if s[0] != "0" else "1") + s[1:]
    body[cp] = json.dumps(j, separators=(",", ":")).encode()
open(path, "wb").write(b"\n".join(body) + b"\n")
PY
  echo "$d"
}
for kind in edited removed reordered inserted badsig; do
  d=$(tamper $kind)
  ew_fail "$kind record: verify fails" "$AIRLOCK" audit verify --dir "$d"
  ew_match "$kind record: named with file and line" 'egress-[0-9]+-[0-9TZ]+\.jsonl.*(line|:)[ ]?[0-9]+' \
    "$AIRLOCK" audit verify --dir "$d"
done
ew_match "edited: the verdict says edited" '"verdict":"edited"' "$AIRLOCK" audit verify --dir "$EW_TMP/t-edited" --json
ew_match "removed: the verdict says removed" '"verdict":"removed"' "$AIRLOCK" audit verify --dir "$EW_TMP/t-removed" --json
ew_match "reordered: the verdict says reordered" '"verdict":"reordered"' "$AIRLOCK" audit verify --dir "$EW_TMP/t-reordered" --json
ew_match "bad signature: the verdict says so" '"verdict":"bad_signature"' "$AIRLOCK" audit verify --dir "$EW_TMP/t-badsig" --json
d=$(tamper truncated)
ew_fail "records cut from the end are caught with the shipped checkpoints" \
  "$AIRLOCK" audit verify --dir "$d" --checkpoints "$A/egress.checkpoints"
ew_match "and named as truncated" '"verdict":"truncated"' \
  "$AIRLOCK" audit verify --dir "$d" --checkpoints "$A/egress.checkpoints" --json

ew_note "read"
ew_match "tail shows the last records" 'dns_query +deny' "$AIRLOCK" --state-dir "$EW_STATE" audit tail -n 5
ew_match "query by decision and host" '"host":"evil.test"' \
  "$AIRLOCK" --state-dir "$EW_STATE" audit query --decision deny --host evil.test --json
ew_nomatch "query returns only what matches" '"decision":"allow"' \
  "$AIRLOCK" --state-dir "$EW_STATE" audit query --decision deny --json
ew_match "query by sandbox and type" '"qname":"evil.test"' \
  "$AIRLOCK" --state-dir "$EW_STATE" audit query --sandbox sbx-a --type dns_query --json
ew_eq "query --since in the future finds nothing" \
  "$("$AIRLOCK" --state-dir "$EW_STATE" audit query --since 2999-01-01T00:00:00Z --json | wc -l)" 0
ew_fail "no secret from a query string is in the log" grep -q hunter "$A"/egress-*.jsonl
ew_match "usage errors exit 2" 'decision is allow' "$AIRLOCK" --state-dir "$EW_STATE" audit query --decision maybe
ocsf=$("$AIRLOCK" --state-dir "$EW_STATE" audit export --ocsf)
ew_match "OCSF: HTTP Activity for requests" '"class_uid":4002,"category_uid":4,"activity_id":3,"type_uid":400203' echo "$ocsf"
ew_match "OCSF: DNS Activity for queries" '"class_uid":4003' echo "$ocsf"
ew_match "OCSF: Network Activity for connections" '"class_uid":4001' echo "$ocsf"
ew_match "OCSF: a deny is Blocked/Denied" '"action_id":2,"disposition_id":2' echo "$ocsf"
ew_ok "OCSF: every line is a JSON object" python3 -c '
import json, sys
for l in sys.stdin.read().splitlines():
    o = json.loads(l)
    assert o["class_uid"] in (4001, 4002, 4003) and o["metadata"]["product"]["name"] == "airlock"
' <<<"$ocsf"

ew_note "rotation and retention"
ew_kill egress
ew_start_proxy --audit-rotate-size 8KiB --audit-retain-size 32KiB --audit-allow-rate 0
ew_match "registered again" "HTTP 201" ew_register sbx-a 1 "$EW_TMP/policy.yaml"
ew_match "150 requests served" 'STATUS200 150' ew_sb 1 python3 - <<'PY'
import http.client
ok = 0
for i in range(150):
    c = http.client.HTTPConnection("203.0.113.10", 80, timeout=5)
    c.request("GET", "/rot%d" % i, headers={"Host": "allowed.test"})
    r = c.getresponse()
    r.read()
    ok += r.status == 200
    c.close()
print("STATUS200 %d" % ok)
PY
ew_audit_sync
ew_ok "every closed file ends with its signed seal" python3 - "$A" <<'PY'
import glob, json, sys
files = sorted(glob.glob(sys.argv[1] + "/egress-*.jsonl"))
assert len(files) >= 3, files
for f in files[:-1]:
    last = json.loads(open(f).read().splitlines()[-1])
    assert last["auditlog"]["reason"] == "seal", (f, last)
PY
stats=$(curl -s --unix-socket "$EW_STATE/run/egress.sock" http://egress/v1/stats)
ew_match "/v1/stats counts what retention deleted" '"pruned_files": *[1-9]' echo "$stats"
ew_ok "what is left is bounded (32 KiB, plus the file being written)" \
  test "$(cat "$A"/egress-*.jsonl | wc -c)" -le $((32768 + 8192 + 4096))
ew_match "verify: intact, and says what retention deleted and why" \
  'seq 1\.\.[0-9]+ are not in the log, and the retention record seq [0-9]+ .* accounts for them:.*max_bytes \(the log was over 32768 bytes\).*INTACT' \
  "$AIRLOCK" --state-dir "$EW_STATE" audit verify
ew_match "--json names the ranges and the rule" '"retention":\{"record_seq":[0-9]+.*"rule":"max_bytes","limit":32768' \
  "$AIRLOCK" --state-dir "$EW_STATE" audit verify --json
ew_ok "with the shipped checkpoints too" "$AIRLOCK" audit verify --dir "$A" --checkpoints "$A/egress.checkpoints"
ew_match "tail --all shows the retention records" 'retention .* deletes up to seq [0-9]+: egress-[0-9]+-[0-9TZ]+\.jsonl \(max_bytes\)' \
  "$AIRLOCK" --state-dir "$EW_STATE" audit query --all
# pruned DIR KIND: a copy of the retained log, changed one way.
pruned() {
  local d="$EW_TMP/p-$1"
  rm -rf "$d"
  cp -a "$A" "$d"
  local files
  mapfile -t files < <(ls "$d"/egress-*.jsonl)
  local mid=${files[$((${#files[@]} / 2))]}
  case $1 in
    edited) python3 - "$mid" <<'PY' ;;
import sys
p = sys.argv[1]
lines = open(p, "rb").read().split(b"\n")
i = [k for k, l in enumerate(lines) if b'"type":"http_request"' in l][0]
lines[i] = lines[i].replace(b'"status":200', b'"status":201')
open(p, "wb").write(b"\n".join(lines))
PY
    middle) rm -f "$mid" ;;
    oldest) rm -f "${files[0]}" ;;
  esac
  echo "$d"
}
ew_match "an edit in a retained file is caught" '"verdict":"edited"' \
  "$AIRLOCK" audit verify --dir "$(pruned edited)" --json
ew_match "a deleted middle file is caught" '"verdict":"missing_file"' \
  "$AIRLOCK" audit verify --dir "$(pruned middle)" --json
ew_match "the oldest file deleted by hand is caught (not retention's doing)" \
  '"verdict":"removed".*deleted outside retention' "$AIRLOCK" audit verify --dir "$(pruned oldest)" --json

ew_note "a full audit disk fails closed"
ew_kill egress
mkdir -p "$EW_TMP/small"
# The proxy in its own mount namespace with the audit log on a 512 KiB tmpfs.
ip netns exec "$(ew_ns host)" unshare -m --propagation private sh -c '
  mount -t tmpfs -o size=512k tmpfs "$1" && exec "$2" --state-dir "$3" --audit-dir "$1" \
    --resolver 203.0.113.53 --listen 127.0.0.1:15001 --dns 127.0.0.1:15053 --vswitch off --workers 1' \
  sh "$EW_TMP/small" "$EW_BIN/airlock-egress" "$EW_STATE" >"$EW_TMP/egress.log" 2>"$EW_TMP/egress.err" &
EW_PIDS[egress]=$!
ew_wait_line egress ready 30
ew_match "registered again" "HTTP 201" ew_register sbx-a 1 "$EW_TMP/policy.yaml"
ew_match "served while the log has room" '"server": "good"' ew_curl 1 http://allowed.test/room
mnt() { nsenter -t "${EW_PIDS[egress]}" -m -- "$@"; }
mnt sh -c "dd if=/dev/zero of='$EW_TMP/small/fill' bs=4k 2>/dev/null; true"
# The writer notices at its next write; from then on nothing is allowed.
got=""
for i in $(seq 1 40); do
  out=$(ew_curl 1 --resolve allowed.test:80:203.0.113.10 "http://allowed.test/full$i" 2>&1)
  if grep -q '"reason":"audit_unavailable"' <<<"$out"; then got=$i; break; fi
  sleep 0.1
done
[ -n "$got" ] && ew__result 1 "once the disk is full, requests get 503 audit_unavailable" ||
  ew__result 0 "once the disk is full, requests get 503 audit_unavailable"
ew_match "and keep getting it" 'HTTP/1.1 503.*"reason":"audit_unavailable"' \
  ew_raw 1 203.0.113.10 80 'GET /still-full HTTP/1.1\r\nHost: allowed.test\r\n\r\n'
ew_match "TLS is reset" 'RESET' ew_hello 1 203.0.113.10 443 --sni allowed.test
ew_match "DNS is refused" 'RCODE REFUSED' ew_dns 1 10.200.1.1 allowed.test A
ew_fail "no request after the failure reached the upstream" ew_upstream_saw 'GET /still-full'
ew_match "health says so" '"status":"audit_failing".*HTTP 503' ew_admin GET /v1/health
mnt rm -f "$EW_TMP/small/fill"
ok=""
for i in $(seq 1 50); do
  if ew_curl 1 --resolve allowed.test:80:203.0.113.10 "http://allowed.test/back$i" 2>/dev/null | grep -q '"server": "good"'; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] && ew__result 1 "with space back, traffic flows again" || ew__result 0 "with space back, traffic flows again"
ew_kill egress
ew_done
