#!/usr/bin/env bash
# tests/integration/templates_net.sh: template builds with a network. airlockd (jail sandboxes,
# the vswitch, airlock-egress) in cp_world.sh's namespace world, whose fake internet adds a
# package index: https://pypi.test (203.0.113.20:443, a certificate of a test CA that
# airlock-egress trusts through --upstream-ca) serving PEP 503 pages and one tiny wheel made
# here. A RUN step's `pip install` from it:
#   - under the default build policy (deny-all) fails: the build is an error naming the step,
#     the template is not made, the refusal is in the audit log under the build's name
#     (TEMPLATE/builds/BUILD in the record's template field);
#   - under a build policy that opens pypi.test with TLS interception (so the step trusts the
#     build sandbox's CA) installs the wheel: the request is audited under the build's name,
#     the template has the package and not the build sandbox's CA, and a sandbox of the
#     template imports the package;
#   - started by an API key that may use deny-all only: asking for the open policy
#     (X-Airlock-Build-Policy) is a 403 naming the key's policies; under deny-all the step
#     fails with an error that names the step and the proxy's denial, and the audit log has
#     the deny under the build sandbox's id.
# Nothing has a route out of the machine.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "templates_net: $b is not built: SKIP"; exit 0; }
done

cp_world templates_net jail on
STATE=$CP_STATE
T=$AL_TMP

al_note "the fake package index: https://pypi.test with a test CA"
source "$AIRLOCK_SOURCE_DIR/tests/lib/certs.sh"
{ al_cert_ca "$T" "airlock templates_net test CA $$" && al_cert_leaf "$T" pypi pypi.test; } || exit 1
ip -n "$CP_UPNS" addr add 203.0.113.20/32 dev lo
python3 - "$T/zone.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
z["pypi.test"] = {"A": ["203.0.113.20"], "ttl": 30}
json.dump(z, open(sys.argv[1], "w"))
PY
# A wheel of one module (its RECORD with the files' hashes, as pip expects), and the index.
python3 - "$T/index" <<'PY'
import base64, hashlib, os, sys, zipfile
root = sys.argv[1]
name, ver = "airlock_tiny", "1.0"
whl = "%s-%s-py3-none-any.whl" % (name, ver)
di = "%s-%s.dist-info" % (name, ver)
files = {
    name + "/__init__.py": b"MAGIC = 'tiny-from-the-fake-index'\n",
    di + "/METADATA": b"Metadata-Version: 2.1\nName: airlock-tiny\nVersion: 1.0\n",
    di + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: templates_net\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
rec = ""
for p, d in files.items():
    h = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
    rec += "%s,sha256=%s,%d\n" % (p, h, len(d))
rec += di + "/RECORD,,\n"
files[di + "/RECORD"] = rec.encode()
os.makedirs(root + "/packages", exist_ok=True)
os.makedirs(root + "/simple/airlock-tiny", exist_ok=True)
with zipfile.ZipFile(root + "/packages/" + whl, "w") as z:
    for p, d in files.items():
        z.writestr(p, d)
sha = hashlib.sha256(open(root + "/packages/" + whl, "rb").read()).hexdigest()
open(root + "/simple/index.html", "w").write('<a href="/simple/airlock-tiny/">airlock-tiny</a>\n')
open(root + "/simple/airlock-tiny/index.html", "w").write(
    '<a href="/packages/%s#sha256=%s">%s</a>\n' % (whl, sha, whl))
PY
cat >"$T/index.py" <<'PY'
import functools, http.server, ssl, sys
addr, port, root, cert, key, log = sys.argv[1:7]
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):
        with open(log, "a") as f:
            f.write("REQ %s %s\n" % (self.command, self.path))
srv = http.server.ThreadingHTTPServer((addr, int(port)), functools.partial(H, directory=root))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print("LISTEN", flush=True)
srv.serve_forever()
PY
al_bg index ip netns exec "$CP_UPNS" python3 "$T/index.py" 203.0.113.20 443 "$T/index" \
  "$T/pypi.pem" "$T/pypi.key" "$T/index.req"
al_wait_line index LISTEN || { echo "templates_net: the index did not start" >&2; exit 1; }

# The build policy: reads of the index, intercepted (TLS ends at the proxy with the build
# sandbox's CA, which the step's pip must trust).
cat >"$STATE/policies/build-pkgs.yaml" <<'YAML'
version: 1
name: build-pkgs
description: templates_net's build policy (the fake package index)
rules:
  - name: index
    hosts: [pypi.test]
    methods: [GET, HEAD]
    paths: ["/simple/**", "/packages/**"]
    tls: inspect
YAML
cp_egress_args --upstream-ca "$T/ca.pem"
cp "$T/airlockd.yaml" "$T/airlockd-base.yaml"

tcli() { cp_cli template "$@" 2>&1; }
PIP='pip install --break-system-packages --no-cache-dir --retries 0 --timeout 20 --index-url https://pypi.test/simple airlock-tiny'
printf '{"fromTemplate":"base","steps":[{"type":"RUN","args":["%s","root"]}]}' "$PIP" >"$T/pip.json"
audit_sync() { curl -s --unix-socket "$STATE/run/egress.sock" -X POST http://egress/v1/audit/sync >/dev/null; }
# audit_build DECISION TEMPLATE: a record of that decision naming a build of TEMPLATE as
# TEMPLATE/builds/<build id> (the build id, when given as $3, exactly).
audit_build_once() {
  audit_sync
  cp_cli audit query --decision "$1" --json 2>/dev/null | python3 -c '
import json, re, sys
want, bid = sys.argv[1], sys.argv[2]
pat = re.compile("^" + re.escape(want) + "/builds/" + (re.escape(bid) if bid else "[0-9a-f-]{36}") + "$")
recs = [json.loads(l) for l in sys.stdin if l.strip().startswith("{")]
hits = [r for r in recs if pat.match(str(r.get("template", "")))]
print(json.dumps(hits[:3]))
sys.exit(0 if hits else 1)' "$2" "${3:-}"
}
audit_build() { al_wait_until 60 audit_build_once "$@" >/dev/null; audit_build_once "$@"; }

al_note "the default build policy (deny-all)"
cp_start || exit 1
denied() { if tcli build tpl-deny --json "$T/pip.json"; then return 1; fi; }
al_match "a RUN step's pip install fails under deny-all, the build error naming the step" \
  "tpl-deny failed at step 1: step 1 \(RUN pip install .*\): the command failed with exit code [1-9]" denied
al_fail "... the template is not made" test -e "$STATE/templates/tpl-deny"
al_fail "... nothing reached the index" grep -q REQ "$T/index.req"
al_ok "... the refusal is in the audit log, naming the build (tpl-deny/builds/<id>)" audit_build deny tpl-deny
al_kill airlockd TERM

al_note "a build policy that opens the index (templates.build_policy: build-pkgs)"
{ cat "$T/airlockd-base.yaml"; printf 'templates:\n  build_policy: build-pkgs\n'; } >"$T/airlockd.yaml"
cp_start || exit 1
al_match "the RUN step installs the wheel from the fake index" "^tpl-pip [0-9a-f-]{36} ready" \
  tcli build tpl-pip --json "$T/pip.json"
BUILD_OUT=$AL_OUT
echo "$AL_OUT" | sed 's/^/   /'
BID=$(echo "$AL_OUT" | awk '$1 == "tpl-pip" && $3 == "ready" {print $2}')
al_match "... pip said so in the build log" "Successfully installed airlock-tiny-1.0" echo "$AL_OUT"
al_match "... the index served the page and the wheel" "REQ GET /packages/airlock_tiny-1.0-py3-none-any.whl" \
  cat "$T/index.req"
al_ok "... each request is in the audit log as allowed, naming the build (tpl-pip/builds/$BID)" \
  audit_build allow tpl-pip "$BID"
AUD=$AL_OUT
al_match "... with the index's host" '"host": ?"pypi.test"' echo "$AUD"
BSB=$(echo "$BUILD_OUT" | sed -n 's/.* in build sandbox \([^,]*\), egress under the policy build-pkgs$/\1/p' | head -1)
al_ok "the build log names the build sandbox and its policy ($BSB)" test -n "$BSB"
al_match "... which is the audit records' sandbox" "\"sandbox\": ?\"$BSB\"" echo "$AUD"
TP=$STATE/templates/tpl-pip/rootfs
al_ok "the template has the package" sh -c "ls $TP/usr/local/lib/python3*/dist-packages/airlock_tiny/__init__.py"
al_fail "... not the build sandbox's CA" test -e "$TP/etc/ssl/certs/airlock-sandbox-ca.pem"
al_fail "... nor its block in the system bundle" grep -q "airlock sandbox CA" "$TP/etc/ssl/certs/ca-certificates.crt"
al_ok "... whose other roots are the base template's" \
  cmp "$TP/etc/ssl/certs/ca-certificates.crt" "$STATE/templates/base/rootfs/etc/ssl/certs/ca-certificates.crt"
SB=$(cp_create '{"templateID":"tpl-pip","timeout":300}')
al_match "a sandbox of the template imports it" "tiny-from-the-fake-index" \
  cp_exec "$SB" python3 -c 'import airlock_tiny; print(airlock_tiny.MAGIC)'
al_ok "kill it" cp_cli sandbox kill "$SB"

al_note "the build policy an API key asks for (X-Airlock-Build-Policy)"
al_ok "a key that may use deny-all only" cp_cli apikey create builder --policies deny-all
KEY2=$(grep -E '^e2b_[0-9a-f]{40}$' <<<"$AL_OUT")
kapi() { nsenter --net="/run/netns/$CP_HOSTNS" curl -sS -H "X-API-KEY: $KEY2" -H 'Content-Type: application/json' "$@"; }
# kbuild NAME POLICY: a build of NAME as that key, started under POLICY: the start's status
# and answer (the build id in $T/NAME.bid).
kbuild() {
  local bid
  bid=$(kapi -X POST "$CP_URL/v3/templates" -d "{\"name\":\"$1\"}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["buildID"])') || return 1
  echo "$bid" >"$T/$1.bid"
  kapi -o "$T/$1.start" -w '%{http_code} ' -X POST "$CP_URL/v2/templates/$1/builds/$bid" \
    -H "X-Airlock-Build-Policy: $2" --data-binary @"$T/pip.json"
  cat "$T/$1.start"
}
al_match "it may not start a build under build-pkgs: a 403 naming its policies" \
  '^403 .*may not use policy \\"build-pkgs\\" \(it may use: deny-all\)' kbuild tpl-key1 build-pkgs
al_match "... nor under one it does not list (its list is checked first: a 403)" \
  '^403 .*may not use policy \\"no-such-policy\\"' kbuild tpl-key1b no-such-policy
al_match "it may start one under deny-all" '^202 ' kbuild tpl-key2 deny-all
BID2=$(cat "$T/tpl-key2.bid")
kstatus() { kapi "$CP_URL/templates/tpl-key2/builds/$BID2/status?limit=1000"; }
kended() {
  kstatus | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin)["status"] not in ("ready","error"))'
}
al_ok "... which ends" al_wait_until 300 kended
KST=$(kstatus)
kreason() {
  python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["status"], r["reason"]["step"], r["reason"]["message"])' <<<"$KST"
}
al_match "... in error at step 1, naming the step and the proxy's denial of pypi.test" \
  '^error 1 step 1 \(RUN pip install .*\): the command failed with exit code [1-9]; airlock-egress denied its traffic under the build policy deny-all \([a-z_]+ pypi\.test: [a-z_]+;' kreason
BSB2=$(python3 -c 'import json,re,sys
for e in json.load(sys.stdin)["logEntries"]:
    m = re.search(r"in build sandbox (\S+), egress under the policy deny-all$", e["message"])
    if m:
        print(m.group(1))
        break' <<<"$KST")
al_ok "the build log names its build sandbox, under deny-all ($BSB2)" test -n "$BSB2"
al_ok "... the deny is in the audit log, naming the build" audit_build deny tpl-key2 "$BID2"
al_match "... under the build sandbox's id" "\"sandbox\": ?\"$BSB2\"" echo "$AL_OUT"
al_fail "... the template is not made" test -e "$STATE/templates/tpl-key2"
al_ok "airlock audit verify passes" cp_cli audit verify
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
