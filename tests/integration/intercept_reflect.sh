#!/usr/bin/env bash
# tests/integration/intercept_reflect.sh: bypass list 15 (reflection): an upstream that echoes
# the injected secret back, in headers or body, plain or encoded (base64, base64url, hex,
# percent, JSON escapes, inside gzip), must not hand it to the sandbox; each occurrence is a
# security_event; a body the proxy cannot read fails closed under strict scrubbing. Every
# content and transfer coding of a body is decoded (several Content-Encoding fields, identity
# next to gzip, Transfer-Encoding: gzip, chunked), on intercepted HTTPS and on plain HTTP
# inject rules alike; trailers and 1xx responses never carry it through. Also: the sandbox's
# environment and files never hold the token.
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/intercept_world.sh"
ew_world icptrefl

cat >"$EW_TMP/policy.yaml" <<'YAML'
version: 1
name: intercept-reflect-test
rules:
  - name: github-api
    hosts: [api.github.test]
    inject:
      - header: Authorization
        value: "Bearer ${secret:github/token}"
  - name: ws
    hosts: [ws.test]
    websocket: true
    scrub: best_effort
    inject:
      - header: Authorization
        value: "Bearer ${secret:ws/token}"
  - name: plain
    hosts: [plain.test]
    scheme: http
    allow_plaintext_inject: true
    inject:
      - header: X-Token
        value: "${secret:plain/token}"
YAML
ew_match "sandbox registered" "HTTP 201" iw_register sbx-refl 1 "$EW_TMP/policy.yaml"

# Everything the sandbox receives goes into one file, checked for every spelling.
OUT="$EW_TMP/sandbox-received"
: >"$OUT"
got() { iw_curl 1 -D - "$@" | tee -a "$OUT"; }

ew_match "headers echoed as JSON: 200, replaced" 'REDACTED' got https://api.github.test/echo
ew_match "Authorization echoed in a response header: replaced" 'X-Echo: Bearer REDACTED' got https://api.github.test/echo-header
ew_match "base64 of the echo: 200" 'HTTP 200' got https://api.github.test/echo-b64
ew_match "chunked echo: replaced" 'REDACTED' got https://api.github.test/echo-chunked
ew_match "gzip echo: decoded, replaced, forwarded decoded" 'REDACTED' got https://api.github.test/echo-gzip
ew_ok "the upstream was asked for identity bodies" iw_upstream_saw '"Accept-Encoding": "identity"'

ew_note "spellings (the sandbox sends them, the upstream echoes them back)"
B64=$(printf 'Bearer %s' "$IW_TOKEN" | base64 -w0)
HEX=$(printf '%s' "$IW_TOKEN" | od -An -tx1 | tr -d ' \n')
PCT=$(python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "x/$IW_TOKEN+")
ew_match "echo of a base64 header value containing the token" 'REDACTED' \
  got -H "X-B64: $(printf 'user:%s' "$IW_TOKEN" | base64 -w0)" https://api.github.test/echo
ew_match "hex" 'REDACTED' got -H "X-Hex: $HEX" https://api.github.test/echo
ew_match "percent-encoded" 'REDACTED' got "https://api.github.test/echo?q=$PCT"
ew_match "base64url" 'HTTP 200' got -H "X-B64u: $(printf '%s' "$IW_TOKEN" | base64 -w0 | tr '+/' '-_')" https://api.github.test/echo
ew_audit_has "a security_event per reflection (body)" type=security_event event=secret_reflected where=response_body 'secret_ids.0=/^b2k:/'
ew_audit_has "... and in headers" type=security_event event=secret_reflected where=response_headers
ew_audit_has "... inside gzip" type=security_event event=secret_reflected decoded=true

ew_note "content and transfer codings: every layer is decoded and scrubbed"
# coded N URL: fetches URL in sandbox N, undoes every gzip layer the sandbox could undo
# itself, prints "HTTP <status> <state>": LEAK (the token is in what it decoded), redacted
# (REDACTED is, the token is not) or clean.
coded() {
  local f="$EW_TMP/coded-body" code
  rm -f "$f"
  code=$(iw_curl "$1" -sS -o "$f" "$2" | tail -1)
  cat "$f" >>"$OUT" 2>/dev/null
  python3 - "$f" "$IW_TOKEN" "$code" <<'PY'
import gzip, os, sys
data = open(sys.argv[1], "rb").read() if os.path.exists(sys.argv[1]) else b""
tok = sys.argv[2].encode()
for _ in range(8):
    if data[:2] != b"\x1f\x8b":
        break
    try:
        data = gzip.decompress(data)
    except Exception:  # noqa: BLE001
        break
state = "LEAK" if tok in data or tok.hex().encode() in data else "redacted" if b"REDACTED" in data else "clean"
print(sys.argv[3], state)
PY
}
for base in https://api.github.test http://plain.test; do
  ew_match "$base: two Content-Encoding: gzip fields: both layers decoded, replaced" 'HTTP 200 redacted' \
    coded 1 "$base/echo-gzip-twice"
  ew_match "$base: Content-Encoding: gzip, gzip in one field" 'HTTP 200 redacted' coded 1 "$base/echo-gzip-list"
  ew_match "$base: identity and gzip in separate fields" 'HTTP 200 redacted' coded 1 "$base/echo-identity-gzip"
  ew_match "$base: Transfer-Encoding: gzip, chunked" 'HTTP 200 redacted' coded 1 "$base/echo-te-gzip"
done
ew_audit_has "the two layers are named in the record" type=http_request path=/echo-gzip-twice scrub.mode=decoded \
  scrub.codings.0=gzip scrub.codings.1=gzip
ew_audit_has "a transfer coding too" type=http_request path=/echo-te-gzip scrub.mode=decoded scrub.codings.0=gzip
ew_audit_has "a reflection inside two layers is a security_event" type=security_event event=secret_reflected \
  where=response_body decoded=true codings.1=gzip
ew_audit_has "... on the plain HTTP inject rule too" type=security_event event=secret_reflected rule=plain decoded=true

ew_match "a chunked response whose trailer echoes the token: the body is scrubbed" 'REDACTED' \
  iw_tls_raw 1 api.github.test 'GET /echo-trailer HTTP/1.1\r\nHost: api.github.test\r\nConnection: close\r\n\r\n'
ew_nomatch "... and the trailer does not reach the sandbox" "$IW_TOKEN|X-Echo" echo "$EW_OUT"
ew_match "a 103 whose Link field echoes the token: only the final response reaches the sandbox" \
  '^HTTP/1.1 200 OK.*REDACTED' iw_tls_raw 1 api.github.test 'GET /echo-103 HTTP/1.1\r\nHost: api.github.test\r\nConnection: close\r\n\r\n'
ew_nomatch "... without the token" "$IW_TOKEN|Early Hints" echo "$EW_OUT"

ew_note "nothing of the token reached the sandbox"
check_spellings() {
  python3 - "$OUT" "$IW_TOKEN" <<'PY'
import base64, binascii, re, sys, urllib.parse
data = open(sys.argv[1], "rb").read()
tok = sys.argv[2].encode()
bad = [tok, tok.hex().encode(), tok.hex().upper().encode(), urllib.parse.quote(tok, safe="").encode()]
n = len(tok)
for k in range(3):
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        e = enc(b"\0" * k + tok + b"\0\0")
        # the characters that depend on the token's bytes only
        core = bytes(e[j] for j in range(len(e)) if 6 * j >= 8 * k and 6 * j + 6 <= 8 * (k + n))
        bad.append(core)
found = [b for b in bad if b in data]
# decode every base64-looking run and look inside too
for m in re.finditer(rb"[A-Za-z0-9+/_-]{16,}={0,2}", data):
    s = m.group(0)
    for dec in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            if tok in dec(s + b"=" * (-len(s) % 4)):
                found.append(b"base64:" + s[:20])
        except (binascii.Error, ValueError):
            pass
print("found" if found else "clean", found[:3])
sys.exit(1 if found else 0)
PY
}
ew_ok "the sandbox received no spelling of the token (raw, hex, percent, base64 in any alignment)" check_spellings

ew_note "strict scrubbing fails closed on what it cannot read"
ew_match "a br-encoded body: 502 response_not_inspectable, before any byte" '"error": *"response_not_inspectable"' \
  iw_curl 1 https://api.github.test/echo-br
ew_audit_has "audited" type=security_event event=response_not_inspectable reason=unsupported_content_encoding
ew_match "gzip and br in two fields: 502 before any byte" '"reason": *"unsupported_content_encoding"' \
  iw_curl 1 https://api.github.test/echo-gzip-br
ew_audit_has "audited as a scrub failure naming both codings" type=http_request path=/echo-gzip-br status=502 \
  scrub.mode=refused scrub.reason=unsupported_content_encoding scrub.codings.1=br
ew_match "Transfer-Encoding: br, chunked: 502" '"reason": *"unsupported_transfer_coding"' \
  iw_curl 1 https://api.github.test/echo-te-br
ew_match "the same on the plain HTTP inject rule" '"reason": *"unsupported_content_encoding"' \
  iw_curl 1 http://plain.test/echo-gzip-br
ew_note "best_effort passes what it cannot read, and says so"
ew_match "gzip and br on a best_effort rule: passed as it came" 'HTTP 200' iw_curl 1 -o /dev/null https://ws.test/echo-gzip-br
ew_audit_has "... audited as not inspected" type=http_request path=/echo-gzip-br rule=ws scrub.mode=passed \
  scrub.not_inspected=true

ew_note "12: WebSocket on a best_effort rule: the tunnel is scrubbed too"
ew_match "the echoed token comes back redacted over the WebSocket" 'WS ping REDACTED' iw_py 1 "
import socket, ssl, os
ctx = ssl.create_default_context(cafile=os.environ['REQUESTS_CA_BUNDLE'])
s = ctx.wrap_socket(socket.create_connection(('ws.test', 443), timeout=10), server_hostname='ws.test')
s.sendall(b'GET /ws HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
          b'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n')
head = b''
while b'\r\n\r\n' not in head:
    head += s.recv(1)
msg = b'ping $IW_TOKEN end'
s.sendall(msg)
got = b''
while len(got) < len(msg):
    got += s.recv(4096)
print('WS', got.decode()[:16], 'leak' if b'$IW_TOKEN' in got else 'none')"
ew_nomatch "... and not in clear" 'leak' echo "$EW_OUT"
ew_match "a WebSocket extension offered by the sandbox (compressed frames) is not passed on" 'HTTP/1.1 101' \
  iw_tls_raw 1 ws.test 'GET /ws HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n'
ew_fail "... the upstream never saw it" iw_upstream_saw '"path": "/ws".*Sec-WebSocket-Extensions'
ew_match "an upstream that accepts an extension anyway: 502" 'websocket_extension_not_inspectable' \
  iw_tls_raw 1 ws.test 'GET /ws-deflate HTTP/1.1\r\nHost: ws.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n'
iw_done
