#!/usr/bin/env bash
# tests/integration/intercept_reflect.sh: bypass list 15 (reflection): an upstream that echoes
# the injected secret back, in headers or body, plain or encoded (base64, base64url, hex,
# percent, JSON escapes, inside gzip), must not hand it to the sandbox; each occurrence is a
# security_event; a body the proxy cannot read fails closed under strict scrubbing. Also: the
# sandbox's environment and files never hold the token.
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
iw_done
