# tests/integration/intercept_world.sh: the world of the interception tests (sourced).
#
# egress's world (egress_world.sh: host/up/sb1/sb2 namespaces, TPROXY stand-in for the vswitch,
# fake DNS and upstreams on 203.0.113.0/24, a test CA), plus what interception needs:
#   - an HTTPS upstream with echo routes (tests/unit/egress/intercept/fake_servers.py) on
#     203.0.113.20:443 for api.github.test, svc.test, echo.test, ws.test, and the same in
#     plain HTTP on :80 for plain.test; its certificate comes from the world's test CA, which
#     airlock-egress is told to trust upstream (--upstream-ca);
#   - a fake airlock-vault on a unix socket in the test's directory (--vault-socket) holding
#     github/token (bound to api.github.test), service/key (svc.test), ws/token (ws.test),
#     plain/token (plain.test), other/token (bound to elsewhere.test), and the --secret
#     arguments a test puts in the array IW_VAULT_EXTRA before ew_world;
#   - iw_register: registers a sandbox and keeps what the control plane would hand its agent
#     (caCertPem -> $EW_TMP/sbN-ca.pem, placeholders -> $EW_TMP/sbN-ph.json);
#   - iw_curl / iw_py: curl and Python requests in a sandbox, trusting its CA.
#   - iw_leaf: a certificate from the world's test CA for another upstream a test adds.
# Names carry the PID; the EXIT trap of egress_world.sh removes everything.
# shellcheck shell=bash

source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/egress_world.sh"
IW_FAKE="$AIRLOCK_SOURCE_DIR/tests/unit/egress/intercept/fake_servers.py"
IW_TOKEN="ghp_IntegrationToken$$x0123456789abcdefXYZ"

# iw_leaf BASE NAME...: an upstream certificate for the names from the world's test CA, as
# $EW_TMP/BASE.pem and BASE.key.
iw_leaf() {
  al_cert_leaf "$EW_TMP" "$@"
}

iw__prepare() {
  iw_leaf iw api.github.test svc.test echo.test ws.test || return 1
  ip -n "$(ew_ns up)" addr add 203.0.113.20/32 dev lo || return 1
  python3 - "$EW_TMP/zone.json" <<'PY' || return 1
import json, sys
z = json.load(open(sys.argv[1]))
for n in ["api.github.test", "svc.test", "echo.test", "ws.test", "plain.test"]:
    z[n] = {"A": ["203.0.113.20"], "ttl": 30}
json.dump(z, open(sys.argv[1], "w"))
PY
  ew_bg iwup ip netns exec "$(ew_ns up)" python3 "$IW_FAKE" upstream --listen 203.0.113.20:443 \
    --cert "$EW_TMP/iw.pem" --key "$EW_TMP/iw.key" --token "$IW_TOKEN"
  ew_bg iwplain ip netns exec "$(ew_ns up)" python3 "$IW_FAKE" upstream --listen 203.0.113.20:80 \
    --cert "$EW_TMP/iw.pem" --key "$EW_TMP/iw.key" --token "$IW_TOKEN" --plain
  ew_bg vault python3 "$IW_FAKE" vault --socket "$EW_TMP/vault.sock" \
    --secret "github/token=$IW_TOKEN@api.github.test" --secret "service/key=$IW_TOKEN@svc.test" \
    --secret "ws/token=$IW_TOKEN@ws.test" --secret "plain/token=$IW_TOKEN@plain.test" \
    --secret "other/token=$IW_TOKEN@elsewhere.test" \
    ${IW_VAULT_EXTRA[@]+"${IW_VAULT_EXTRA[@]}"}
  ew_wait_line iwup LISTEN && ew_wait_line iwplain LISTEN && ew_wait_line vault LISTEN
}

# egress_world.sh starts airlock-egress at the end of ew_world: prepare first, then start it
# with the upstream CA and the vault.
eval "$(declare -f ew_start_proxy | sed '1s/ew_start_proxy/iw__egress_start_proxy/')"
ew_start_proxy() {
  iw__prepare || { echo "interception world: setup failed" >&2; exit 1; }
  iw__egress_start_proxy --upstream-ca "$EW_TMP/ca.pem" --vault-socket "$EW_TMP/vault.sock" "$@"
  # Ready is not yet serving injection: until its changes feed is up the proxy refuses every
  # fetch (vault_feed_down). The fake vault says when the feed's polls start waiting, which
  # the proxy does only after it applied an answer.
  ew_wait_line vault '"changes"' 30 || { echo "interception world: the vault feed did not come up" >&2; exit 1; }
}

# iw_register ID N POLICY.yaml: registers sandbox N and keeps its CA and placeholders.
iw_register() {
  local out
  out=$(ew_register "$@")
  echo "$out"
  printf '%s\n' "$out" | python3 -c '
import json, sys
lines = sys.stdin.read().splitlines()
body = json.loads(lines[0]) if lines and lines[0].startswith("{") else {}
open(sys.argv[1], "w").write(body.get("caCertPem", ""))
json.dump(body.get("placeholders", {}), open(sys.argv[2], "w"))
' "$EW_TMP/sb$2-ca.pem" "$EW_TMP/sb$2-ph.json"
}

# iw_placeholder N ENV: the placeholder sandbox N got for ENV.
iw_placeholder() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$EW_TMP/sb$1-ph.json" "$2"
}

# iw_curl N ARGS...: curl in sandbox N trusting its CA; the body, then "HTTP <status>".
iw_curl() {
  local n=$1
  shift
  ew_curl "$n" --cacert "$EW_TMP/sb$n-ca.pem" -w '\nHTTP %{http_code}\n' "$@"
}

# iw_py N CODE: Python in sandbox N with requests trusting its CA (REQUESTS_CA_BUNDLE).
iw_py() {
  local n=$1
  shift
  ip netns exec "$(ew_ns "sb$n")" env REQUESTS_CA_BUNDLE="$EW_TMP/sb$n-ca.pem" timeout 20 python3 -c "$1"
}

# iw_upstream_saw PATTERN: what the echo upstream logged (one JSON line per request).
iw_upstream_saw() { grep -Eq -- "$1" "$EW_TMP/iwup.log" "$EW_TMP/iwplain.log" 2>/dev/null; }

# iw_done: stops airlock-egress (SIGTERM, a clean stop: sessions aborted, pools and the vault
# client closed), checks that the sanitized build reported nothing, then ew_done.
iw_done() {
  ew_kill egress
  if grep -Eq 'Sanitizer|runtime error' "$EW_TMP/egress.err" 2>/dev/null; then
    ew__result 0 "airlock-egress stopped cleanly (see its log below)"
    grep -E -A20 'Sanitizer|runtime error' "$EW_TMP/egress.err" | head -60
  else
    ew__result 1 "airlock-egress stopped cleanly"
  fi
  ew_done
}

# iw_tls_raw N HOST DATA: a TLS connection from sandbox N to HOST:443 (trusting its CA),
# sends DATA (Python escapes), reads until the close (or the head of a 101: a tunnel stays
# open), prints the status line of each response (or what failed), then everything received
# with CRLF as " | ".
iw_tls_raw() {
  local n=$1 host=$2 data=$3
  ip netns exec "$(ew_ns "sb$n")" timeout 20 python3 - "$EW_TMP/sb$n-ca.pem" "$host" "$data" <<'PY'
import socket, ssl, sys
ca, host, data = sys.argv[1], sys.argv[2], sys.argv[3].encode().decode("unicode_escape").encode("latin-1")
ctx = ssl.create_default_context(cafile=ca)
try:
    s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=8), server_hostname=host)
    s.sendall(data)
    got = b""
    while not (got.startswith(b"HTTP/1.1 101") and b"\r\n\r\n" in got):
        d = s.recv(65536)
        if not d:
            break
        got += d
except Exception as e:  # noqa: BLE001
    got = b"" if "got" not in dir() else got
    print("ERROR", type(e).__name__, e)
for line in got.split(b"\r\n"):
    if line.startswith(b"HTTP/1."):
        print(line.decode(errors="replace"))
print(got.decode(errors="replace").replace("\r\n", " | "))
PY
}
