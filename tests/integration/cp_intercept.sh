#!/usr/bin/env bash
# tests/integration/cp_intercept.sh: credential injection and E2B network narrowing end to end
# (issues 8 and 6): the real E2B SDK (tests/e2b/sdk-driver.mjs, normal mode) against airlockd
# with the jail backend, the vswitch, airlock-egress and airlock-vault as airlockd runs them,
# in cp_world.sh's namespace world (no route out of the machine). The fake internet adds, on
# 203.0.113.20:443, tests/unit/egress/intercept/fake_servers.py's HTTPS upstream (its certificate
# from a test CA that airlock-egress trusts through egress.args --upstream-ca) for
# api.github.test (checks the injected token), echo.test (echoes the request's headers) and
# svc.test (checks a key sent as a placeholder).
#
#   - A secret put with `airlock vault put`, a policy that injects it: curl and Python
#     requests (a command and the code interpreter) in a sandbox made by the SDK reach
#     https://api.github.test with the token, which the sandbox never has: an echo of it
#     comes back scrubbed; `env`, /proc/*/environ, the files of the sandbox's writable layer
#     and the memory of its processes (read from the host, with a canary proving the scans
#     see what the sandbox holds) never contain it.
#   - Placeholder mode: the placeholder in the sandbox's environment works toward the bound
#     host and is refused elsewhere.
#   - The audit log: the inject record names the secret id (the vault's keyed hash of the
#     value), never the value; `airlock audit verify` passes.
#   - airlock-egress killed: airlockd restarts it, registers the sandbox again with its
#     placeholders and gives the agent the new CA; airlockd killed too (with the proxy): the
#     next airlockd does the same from its state database.
#   - E2B allowOut / denyOut / allowInternetAccess narrow the policy exactly; what they deny
#     is audited with sandbox_network_denies.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress airlock-vault; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_intercept: $b is not built: SKIP"; exit 0; }
done
E2B_DIR="$AIRLOCK_SOURCE_DIR/tests/e2b"
FAKE="$AIRLOCK_SOURCE_DIR/tests/unit/egress/intercept/fake_servers.py"
SCAN="$AIRLOCK_SOURCE_DIR/tests/integration/cp_intercept_scan.py"
"$E2B_DIR/setup" || { echo "cp_intercept: the E2B SDK cannot be installed (tests/e2b/setup)" >&2; exit 1; }

cp_world cp_intercept jail on
TOKEN="ghp_cpIntercept$$Zq7RkT0pW3xYvN5mLs8"
# The canary: something the sandbox does hold (so that the scans below are seen to work).
# The processes build it at run time from its reverse, so that their command lines do not
# hold it: the memory scan must find it in their memory.
CANARY="canary-cp-intercept-$$-Xw9Pq"
YRANAC=$(rev <<<"$CANARY")

al_note "the fake internet: an HTTPS upstream with a test CA"
source "$AIRLOCK_SOURCE_DIR/tests/lib/certs.sh"
{ al_cert_ca "$AL_TMP" "airlock cp_intercept test CA $$" &&
  al_cert_leaf "$AL_TMP" up api.github.test echo.test svc.test; } || exit 1
ip -n "$CP_UPNS" addr add 203.0.113.20/32 dev lo
python3 - "$AL_TMP/zone.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
for n in ["api.github.test", "echo.test", "svc.test"]:
    z[n] = {"A": ["203.0.113.20"], "ttl": 30}
json.dump(z, open(sys.argv[1], "w"))
PY
# /user checks "Authorization: Bearer <token>", /svc "X-Api-Key: <token>" (the placeholder
# rule injects the same secret), /echo* reflect what they got.
al_bg https ip netns exec "$CP_UPNS" python3 "$FAKE" upstream --listen 203.0.113.20:443 \
  --cert "$AL_TMP/up.pem" --key "$AL_TMP/up.key" --token "$TOKEN"
al_wait_line https LISTEN || { echo "cp_intercept: the upstream did not start" >&2; exit 1; }

cat >"$CP_STATE/policies/icpt.yaml" <<'YAML'
version: 1
name: icpt
description: cp_intercept's policy (GitHub token injected, an echo host, a placeholder)
rules:
  - name: github-api
    hosts: [api.github.test]
    methods: [GET, POST]
    inject:
      - header: Authorization
        value: "Bearer ${secret:github/token}"
  - name: echo
    hosts: [echo.test]
    inject:
      - header: Authorization
        value: "Bearer ${secret:github/token}"
  - name: svc
    hosts: [svc.test]
    tls: inspect
    inject:
      - header: X-Api-Key
        placeholder: SERVICE_KEY
        secret: github/token
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
YAML
cp_egress_args --upstream-ca "$AL_TMP/ca.pem"
cp_start || exit 1
al_ok "airlock vault put github/token (bound to api.github.test, echo.test, svc.test)" \
  bash -c "printf %s '$TOKEN' | '$AIRLOCK_BIN/airlock' --state-dir '$CP_STATE' vault put github/token \
    --bound-host api.github.test --bound-host echo.test --bound-host svc.test"
SECRET_ID=$(printf %s "$TOKEN" | cp_cli vault hash-secret 2>/dev/null | grep -o 'b2k:[0-9a-f]*' | sed -n 1p)
al_note "the token's secret id: ${SECRET_ID:-?}"

# sdk OP ARGS...: the real SDK, from the host namespace where airlockd listens.
sdk() {
  nsenter --net="/run/netns/$CP_HOSTNS" -- env -u E2B_DEBUG E2B_API_URL="$CP_URL" \
    E2B_SANDBOX_URL="$CP_URL" E2B_API_KEY="$CP_KEY" timeout 120 node "$E2B_DIR/sdk-driver.mjs" "$@"
}
# run ID CMD: stdout of CMD in the sandbox (through the SDK), then "EXIT <code>".
run() {
  sdk run "$1" "$2" | python3 -c 'import json,sys
r = json.load(sys.stdin)
if "error" in r and "exitCode" not in r: print("SDK ERROR", r["error"]); sys.exit(1)
o = r["stdout"] + r["stderr"]
sys.stdout.write(o + ("" if not o or o.endswith("\n") else "\n")); print("EXIT %d" % r["exitCode"])'
}
code() { sdk code "$1" "$2"; }
sbx_pids_glob() {
  local d
  for d in "/sys/fs/cgroup/pids/$CP_CG" "/sys/fs/cgroup/$CP_CG"; do
    [ -d "$d" ] && { echo "$d/*$1*"; return; }
  done
  echo "/nonexistent"
}

al_note "a sandbox made by the SDK, with the icpt policy"
T0=$(($(date +%s) - 2))
SB=$(sdk create code-interpreter-v1 '{"metadata":{"airlock.policy":"icpt"},"envs":{"FOO":"bar"}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin).get("sandboxId",""))')
al_ok "created ($SB)" test -n "$SB"
al_match "the agent installed the sandbox's CA" 'BEGIN CERTIFICATE' \
  run "$SB" 'cat /etc/ssl/certs/airlock-sandbox-ca.pem'
al_match "processes get the trust variables" 'REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt' \
  run "$SB" 'env'
al_match "the placeholder is in the environment" '^SERVICE_KEY=alph_[0-9a-f]{40}$' run "$SB" 'env'
al_match "... next to the caller's envs" '^FOO=bar$' run "$SB" 'env'

al_note "injection"
al_match "curl: the upstream accepts the token the proxy injected" '"login": *"octocat"' \
  run "$SB" 'curl -sS -m 20 https://api.github.test/user'
al_match "... also when the sandbox sends a token of its own (replaced)" '"login": *"octocat"' \
  run "$SB" 'curl -sS -m 20 -H "Authorization: Bearer sandbox-guess" https://api.github.test/user'
al_fail "the upstream never saw the sandbox's guess" grep -q 'sandbox-guess' "$AL_TMP/https.log"
al_match "Python requests (a command)" 'STATUS 200 octocat' \
  run "$SB" 'python3 -c "import requests; r = requests.get(\"https://api.github.test/user\", timeout=20); print(\"STATUS\", r.status_code, r.json().get(\"login\"))"'
al_match "Python requests (the code interpreter)" '"text": *"[^"]*200 octocat' \
  code "$SB" 'import requests
r = requests.get("https://api.github.test/user", timeout=20)
str(r.status_code) + " " + r.json().get("login")'
al_match "the upstream got it every time" "Bearer $TOKEN" cat "$AL_TMP/https.log"

al_note "role separation: only airlock-egress reads values, not root nor airlockd (same uid)"
# airlockd runs airlock-egress with its own uid (root here) and starts airlock-vault with
# --egress-user <that uid> --egress-exe <airlock-egress> --airlockd-user <that uid>: a root
# shell asking the vault's socket for the value is refused and logged, while injection (the
# proxy fetched the token above) works.
VSOCK="$CP_STATE/run/vault.sock"
FETCH_BODY='{"name":"github/token","sandbox":"'"$SB"'","rule":"github-api","host":"api.github.test"}'
vault_curl() { curl -sS -m 10 --unix-socket "$VSOCK" -w '\nHTTP %{http_code}\n' "$@"; }
al_match "POST /v1/fetch from a root shell (curl): 403, the vault is write-only for it" \
  'HTTP 403' vault_curl -X POST -H 'Content-Type: application/json' -d "$FETCH_BODY" http://vault/v1/fetch
ANS=$(vault_curl -X POST -H 'Content-Type: application/json' -d "$FETCH_BODY" http://vault/v1/fetch 2>&1)
al_match "... it says why" 'write-only' printf '%s\n' "$ANS"
al_fail "... and the answer holds no value" bash -c 'grep -qE "$1" <<<"$2"' _ "$TOKEN|value_b64" "$ANS"
al_match "whoami from root: admin and airlockd (metadata), not egress" \
  '"roles": *\[ *"admin", *"airlockd" *\]' vault_curl http://vault/v1/whoami
al_match "... root may still list names and metadata" '"name": *"github/token"' \
  vault_curl http://vault/v1/secrets
# vault_fetches RESULT: the access log's fetch records with that result (the log is written
# by a group-commit thread: wait for the one asked for to reach the file).
vault_fetches() {
  local result=$1 want=$2 out
  fetched() { grep -rhaE '"op": *"fetch"' "$CP_STATE/vault/audit" | grep -E "\"result\": *\"$result\""; }
  al_wait_until 60 eval 'grep -q "$want" <<<"$(fetched)"' || true
  out=$(fetched)
  printf '%s\n' "$out"
}
al_match "the refused fetch is in the vault's access log, with why" \
  '"roles": *\["admin", *"airlockd"\].*not the configured airlock-egress' \
  vault_fetches denied 'not the configured airlock-egress'
al_match "the proxy's fetches are logged with the egress role, ok" '"roles": *\[[^]]*"egress"' \
  vault_fetches ok egress
al_match "injection still works after the refusal" '"login": *"octocat"' \
  run "$SB" 'curl -sS -m 20 https://api.github.test/user'

al_note "reflection: a host that echoes the request's headers"
al_match "the echo comes back with the token scrubbed" '"Authorization": *"Bearer REDACTED' \
  run "$SB" 'curl -sS -m 20 https://echo.test/echo'
# al_nomatch MSG BAD GOOD CMD...: CMD's output matches GOOD (it did its job) and never BAD.
al_nomatch() {
  local m=$1 bad=$2 good=$3 out
  shift 3
  out=$("$@" 2>&1)
  if grep -Eq -- "$good" <<<"$out" && ! grep -Eq -- "$bad" <<<"$out"; then
    al_ok "$m" true
  else
    al_fail "$m (want /$good/, never the token)" true
    printf '%s\n' "$out" | head -20 | sed 's/^/     | /'
  fi
}
TOKEN_B64=$(printf %s "$TOKEN" | base64 -w0 | tr -d '=')
al_nomatch "... never the token (body)" "$TOKEN|$TOKEN_B64" 'REDACTED' \
  run "$SB" 'curl -sS -m 20 https://echo.test/echo'
al_nomatch "... nor in a response header" "$TOKEN|$TOKEN_B64" '^[Xx]-[Ee]cho: .*REDACTED' \
  run "$SB" 'curl -sS -m 20 -D - -o /dev/null https://echo.test/echo-header'
al_nomatch "... nor base64-encoded in a body (scrubbed encoded, decodes to no token)" \
  "$TOKEN|$TOKEN_B64" 'REDACTED' \
  run "$SB" 'b=$(curl -sS -m 20 https://echo.test/echo-b64); echo "$b"; echo "$b" | base64 -d 2>/dev/null | tr -c "[:print:]" .'
al_nomatch "... nor through the code interpreter" "$TOKEN|$TOKEN_B64" 'REDACTED' \
  code "$SB" 'import requests
requests.get("https://echo.test/echo", timeout=20).text'

al_note "placeholder mode"
al_match "the placeholder toward the bound host: swapped for the secret" '"ok": *true' \
  run "$SB" 'curl -sS -m 20 -H "X-Api-Key: $SERVICE_KEY" https://svc.test/svc'
al_match "the placeholder elsewhere: refused" 'placeholder_misuse' \
  run "$SB" 'curl -sS -m 20 -H "X-Api-Key: $SERVICE_KEY" https://echo.test/echo'
al_match "... also in a body" 'placeholder_misuse' \
  run "$SB" 'curl -sS -m 20 -X POST --data "k=$SERVICE_KEY" https://api.github.test/user'

al_note "the token is nowhere in the sandbox"
# Nothing below sends the token into the sandbox (a check made inside the sandbox would
# carry it there): outputs are brought back and looked at here.
al_ok "a process that holds a canary and made requests stays alive" \
  sdk background "$SB" "python3 -c 'import requests, time; c = \"$YRANAC\"[::-1]; r = requests.get(\"https://api.github.test/user\", timeout=20); e = requests.get(\"https://echo.test/echo\", timeout=20).text; open(\"/tmp/requests-done\", \"w\").close(); time.sleep(600)'"
al_match "a file with the canary, and one in /tmp" 'EXIT 0' \
  run "$SB" "rev <<<'$YRANAC' > /home/user/canary.txt && rev <<<'$YRANAC' > /tmp/canary.txt"
# The scans below look at that process once it holds what they look for: its requests made.
requests_done() { grep -qx 'EXIT 0' <<<"$(run "$SB" 'test -e /tmp/requests-done')"; }
al_ok "the process made its requests" al_wait_until 120 requests_done
al_nomatch "env: the placeholder, never the token" "$TOKEN|$TOKEN_B64" '^SERVICE_KEY=alph_' run "$SB" 'env'
al_nomatch "/proc/*/environ of every process (inside): likewise" "$TOKEN|$TOKEN_B64" '^SERVICE_KEY=alph_' \
  run "$SB" "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | sort -u"
PGLOB=$(sbx_pids_glob "$SB")
SCANP=$(python3 "$SCAN" procs "$PGLOB" --needle "token=$TOKEN" --needle "canary=$CANARY")
al_note "processes scanned from the host: $(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(len(d["pids"]), "processes,", d["bytes"]>>20, "MiB")' "$SCANP")"
found() { python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["found"][sys.argv[2]]))' "$1" "$2"; }
al_match "the memory scan finds the canary in memory (it sees what the sandbox holds)" ':mem' \
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])["found"]["canary"])' "$SCANP"
al_eq "no process of the sandbox holds the token (memory, environ, cmdline)" "$(found "$SCANP" token)" 0
APID=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["pids"][0])' "$SCANP")
SCANF=$(python3 "$SCAN" files "$APID" "$T0" --needle "token=$TOKEN" --needle "canary=$CANARY")
al_note "files of the writable layer scanned: $(python3 -c 'import json,sys; d = json.loads(sys.argv[1]); print(d["files"], " ".join(d["scanned"]))' "$SCANF")"
al_check "the file scan finds the canary in the writable layer and /tmp" test "$(found "$SCANF" canary)" -ge 2
al_eq "no file of the sandbox holds the token" "$(found "$SCANF" token)" 0

al_note "the audit log"
curl -s --unix-socket "$CP_STATE/run/egress.sock" -X POST http://egress/v1/audit/sync >/dev/null
cp_audit_match "the inject record names the header and the secret id" \
  "\"header\":\"Authorization\",\"secret\":\"github/token\",\"secret_id\":\"$SECRET_ID\"" \
  --sandbox "$SB" --json
al_check "the secret id is the vault's keyed hash of the value" test -n "$SECRET_ID"
cp_audit_match "the refused placeholder is a security event" '"event":"placeholder_misuse"' \
  --sandbox "$SB" --json
cp_audit_match "the reflection is a security event" '"event":"secret_reflected"' --sandbox "$SB" --json
al_fail "no audit file holds the token (raw or base64)" \
  grep -rqaE "$TOKEN|$(printf %s "$TOKEN" | base64 | tr -d '=')" "$CP_STATE/audit" "$CP_STATE/vault/audit"
al_ok "the audit log has the secret id (the search above reads it)" grep -rqa "$SECRET_ID" "$CP_STATE/audit"
al_fail "nor airlockd's state or logs" grep -sqa "$TOKEN" "$CP_STATE"/airlockd.db* "$AL_TMP/airlockd.log"
al_ok "airlock audit verify passes" cp_cli audit verify

al_note "airlock-egress restarts: the sandbox keeps its placeholder and gets the new CA"
ca_fp() { run "$SB" 'openssl x509 -noout -fingerprint -sha256 -in /etc/ssl/certs/airlock-sandbox-ca.pem' | sed -n 1p; }
PH=$(run "$SB" 'printf %s "$SERVICE_KEY"' | sed -n 1p)
FP1=$(ca_fp)
al_match "the sandbox's placeholder (read back)" '^alph_[0-9a-f]{40}$' echo "$PH"
EPID=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT value FROM meta WHERE key=?", ("daemon.egress.pid",)).fetchone()[0])' "$CP_STATE/airlockd.db")
al_ok "kill -9 airlock-egress ($EPID)" kill -KILL "$EPID"
back=no
for _ in $(seq 60); do
  sleep 0.5
  grep -q octocat <<<"$(run "$SB" 'curl -sS -m 5 https://api.github.test/user' 2>/dev/null)" && { back=yes; break; }
done
al_eq "injection works again (new registration, new CA in the sandbox)" "$back" yes
al_match "airlockd gave the agent the new CA" 'the agent installed the egress proxy.s new CA' cat "$AL_TMP/airlockd.log"
FP2=$(ca_fp)
al_check "the sandbox's CA changed ($FP1 -> $FP2)" test -n "$FP2" -a "$FP1" != "$FP2"
al_match "the placeholder still works toward the bound host" '"ok": *true' \
  run "$SB" 'curl -sS -m 20 -H "X-Api-Key: $SERVICE_KEY" https://svc.test/svc'
al_match "the code interpreter's Python (started before) trusts the new CA too" '"text": *"200"' \
  code "$SB" 'import requests
str(requests.get("https://api.github.test/user", timeout=20).status_code)'

al_note "airlockd and airlock-egress both die: the next airlockd works from its state database"
EPID=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT value FROM meta WHERE key=?", ("daemon.egress.pid",)).fetchone()[0])' "$CP_STATE/airlockd.db")
al_ok "airlockd's state database keeps the placeholder (public), read above" \
  grep -sqa "$PH" "$CP_STATE"/airlockd.db*
al_kill airlockd KILL
al_ok "kill -9 airlockd, then kill -9 airlock-egress ($EPID)" kill -KILL "$EPID"
cp_start || exit 1
back=no
for _ in $(seq 60); do
  grep -q octocat <<<"$(run "$SB" 'curl -sS -m 5 https://api.github.test/user' 2>/dev/null)" && { back=yes; break; }
  sleep 0.5
done
al_eq "injection works again" "$back" yes
al_eq "the placeholder in the sandbox is the one it had" "$(run "$SB" 'printf %s "$SERVICE_KEY"' | sed -n 1p)" "$PH"
al_match "and the proxy still swaps it (kept across the re-registration)" '"ok": *true' \
  run "$SB" 'curl -sS -m 20 -H "X-Api-Key: $SERVICE_KEY" https://svc.test/svc'
FP3=$(ca_fp)
al_check "the sandbox has the third proxy's CA" test -n "$FP3" -a "$FP3" != "$FP2"

al_note "a paused sandbox gets the new CA when it is resumed"
al_match "pause it (SDK)" '"paused": *true' sdk pause "$SB"
egress_pid() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT value FROM meta WHERE key=?", ("daemon.egress.pid",)).fetchone()[0])' "$CP_STATE/airlockd.db"; }
EPID=$(egress_pid)
al_ok "kill -9 airlock-egress ($EPID)" kill -KILL "$EPID"
back=no
for _ in $(seq 60); do
  sleep 0.5
  [ "$(egress_pid)" != "$EPID" ] &&
    curl -sf --unix-socket "$CP_STATE/run/egress.sock" "http://egress/v1/sandboxes/$SB" >/dev/null &&
    { back=yes; break; }
done
al_eq "the paused sandbox is registered again" "$back" yes
al_match "resumed by the SDK (connect): injection works at once" '"login": *"octocat"' \
  run "$SB" 'curl -sS -m 20 https://api.github.test/user'
FP4=$(ca_fp)
al_check "it has the fourth proxy's CA" test -n "$FP4" -a "$FP4" != "$FP3"
al_ok "kill it" sdk kill "$SB"

al_note "E2B network fields narrow the policy exactly"
N1=$(sdk create code-interpreter-v1 '{"metadata":{"airlock.policy":"icpt"},"network":{"denyOut":["echo.test","203.0.113.10/32"]}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin).get("sandboxId",""))')
al_ok "denyOut [echo.test, 203.0.113.10/32]: created ($N1)" test -n "$N1"
al_match "the SDK sees its network fields" '"denyOut"' sdk info "$N1"
al_match "api.github.test (not denied): injected as before" '"login": *"octocat"' \
  run "$N1" 'curl -sS -m 20 https://api.github.test/user'
al_match "echo.test (denied by name) does not resolve" 'NXDOMAIN' run "$N1" 'dig +time=3 +tries=1 echo.test'
al_match "... nor can it be reached by its address (TLS reset)" 'EXIT [1-9]' \
  run "$N1" 'curl -sS -m 20 --resolve echo.test:443:203.0.113.20 https://echo.test/n1-echo'
al_match "allowed.test (its address denied): 403 sandbox_network_denies" '"reason":"sandbox_network_denies"' \
  run "$N1" 'curl -sS -m 20 http://allowed.test/n1-plain'
al_fail "nothing denied reached an upstream" grep -q 'GET /n1' "$AL_TMP/up.req"
N2=$(sdk create code-interpreter-v1 '{"metadata":{"airlock.policy":"icpt"},"allowInternetAccess":false,"network":{"allowOut":["api.github.test"]}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin).get("sandboxId",""))')
al_ok "allowInternetAccess false, allowOut [api.github.test]: created ($N2)" test -n "$N2"
al_match "api.github.test: allowed, injected" '"login": *"octocat"' \
  run "$N2" 'curl -sS -m 20 https://api.github.test/user'
al_match "echo.test does not resolve" 'NXDOMAIN' run "$N2" 'dig +time=3 +tries=1 echo.test'
al_match "allowed.test (the policy allows it): denied by the network fields" 'sandbox_network_denies' \
  run "$N2" 'curl -sS -m 20 -H "Host: allowed.test" http://203.0.113.10/n2'
N3=$(sdk create code-interpreter-v1 '{"metadata":{"airlock.policy":"icpt"},"network":{"allowOut":["0.0.0.0/0"]}}')
al_match "allowOut of everything is refused (it would widen, not narrow)" 'would allow all traffic' echo "$N3"
N4=$(sdk create base '{"metadata":{"airlock.policy":"e2e"}}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin).get("sandboxId",""))')
al_ok "a policy that intercepts nothing (e2e): created ($N4)" test -n "$N4"
al_match "... its sandbox gets no CA (one that can certify nothing is not installed)" \
  'NO-CA 0' run "$N4" 'test -e /etc/ssl/certs/airlock-sandbox-ca.pem || echo NO-CA $(env | grep -c REQUESTS_CA_BUNDLE)'
al_ok "kill it" sdk kill "$N4"
curl -s --unix-socket "$CP_STATE/run/egress.sock" -X POST http://egress/v1/audit/sync >/dev/null
cp_audit_match "the narrowed denials are audited with sandbox_network_denies (TLS)" \
  '"sni":"echo.test".*"reason":"sandbox_network_denies"|"reason":"sandbox_network_denies".*"sni":"echo.test"' \
  --sandbox "$N1" --decision deny --json
cp_audit_match "... (HTTP)" '"host":"allowed.test".*"reason":"sandbox_network_denies"|"reason":"sandbox_network_denies".*"host":"allowed.test"' \
  --sandbox "$N1" --decision deny --json
cp_audit_match "... for the second sandbox too (DNS)" '"qname":"echo.test".*"reason":"sandbox_network_denies"' \
  --sandbox "$N2" --decision deny --json
EG=$(curl -s --unix-socket "$CP_STATE/run/egress.sock" "http://egress/v1/sandboxes/$N2")
al_match "airlock-egress holds the fields" '"allow_internet_access": *false' echo "$EG"
al_ok "airlock audit verify passes" cp_cli audit verify
al_ok "kill them" sdk kill "$N1"
sdk kill "$N2" >/dev/null

al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
