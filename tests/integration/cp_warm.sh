#!/usr/bin/env bash
# tests/integration/cp_warm.sh: warm sandboxes (sandboxes.warm), jail backend, network on, in
# the cp_world; "base" keeps one warm sandbox, "plain" (the same files under another name)
# none.
#   - after the start one warm sandbox of base is ready (/metrics), running (its directory,
#     its agent healthy) and invisible: GET /v2/sandboxes lists nothing;
#   - a process started in it before the claim (through its agent, as the pool starts what
#     a template asks) cannot reach the network: the warm sandbox is not registered with
#     airlock-egress, whose DNS and proxy refuse it;
#   - a creation claims it: the sandbox's id is the warm one's; it works like a cold one:
#     commands, envVars given at the creation, files up and down, egress allowed and denied
#     per its policy, the sandbox CA of its policy installed in its trust stores (none before
#     the claim); its agent now wants the creation's access token;
#   - the process started before the claim, woken after it, finds neither the creation's
#     envVars nor its token: not in its environment, not in /proc/1/environ, not in the
#     agent's memory (/proc/1/mem), not in the files of /etc, /home, /root, /tmp, /run;
#     (as the default user and as root of the sandbox);
#   - the pool refills with a new warm sandbox (another id), once the creation is over;
#   - /metrics counts one warm claim of base and one cold creation of plain;
#   - airlockd killed with SIGKILL leaves its warm sandbox running; the next airlockd tears
#     it down (it was never claimed, nobody may have it) and makes a new one;
#   - a warm sandbox of the code interpreter's template, claimed: code run in its default
#     Python context (started at the claim, not before) sees the creation's envVars;
#   - after the sandboxes are killed and airlockd is stopped nothing is left: interfaces,
#     cgroups, sandbox directories, mounts, processes.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_warm: $b is not built: SKIP"; exit 0; }
done
EXEC="$AIRLOCK_SOURCE_DIR/tests/integration/jail_exec.py"
CP_SANDBOXES_EXTRA='  warm:
    templates: ["base=1", "plain=0"]
    memory: 256MiB
  metrics_interval: 1h' cp_world cp_warm jail on
# The e2e rules, and TLS inspected for one more name: the sandbox gets a CA to install.
cat >"$CP_STATE/policies/warmix.yaml" <<'YAML'
version: 1
name: warmix
description: cp_warm's policy (plain HTTP to allowed.test, TLS inspected for inspect.test)
rules:
  - name: web
    hosts: [allowed.test]
    ports: [80]
    scheme: http
  - name: inspected
    hosts: [inspect.test]
    tls: inspect
YAML
cp_start || exit 1
in_host() { nsenter --net="/run/netns/$CP_HOSTNS" "$@"; }
metric() { cp_api "$CP_URL/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
READY='airlock_warm_sandboxes{template="base",state="ready"}'
warm_ready() { [ "$(metric "$READY")" = 1 ]; }
# The one sandbox directory of the state (the warm sandbox, when no other exists).
warm_ids() { ls "$CP_STATE/sandboxes" 2>/dev/null | grep -v '^\.' || true; }

al_check "a warm sandbox of base is ready after the start" al_wait_until 120 warm_ready
W=$(warm_ids)
al_eq "exactly one sandbox directory: the warm sandbox's" "$(wc -w <<<"$W")" 1
al_note "warm sandbox $W"
al_eq "nobody sees it: GET /v2/sandboxes is empty" "$(cp_api "$CP_URL/v2/sandboxes")" "[]"
WSOCK="$CP_STATE/sandboxes/$W/agent.sock"
al_ok "its agent answers /health" curl -sS -f --unix-socket "$WSOCK" http://sandbox/health

# Processes started before the claim (as a template's start command would be): each tries the
# network at once, then waits (bounded) for /tmp/go, which only the claimed sandbox can make,
# and then looks for the claim's secrets wherever it can.
PROBE='
echo "PRE-START $(id -un)"
if getent hosts allowed.test >/dev/null 2>&1; then echo PRE-DNS-OK; else echo PRE-DNS-FAIL; fi
if curl -sS -m 5 -o /dev/null http://203.0.113.10/pre-claim 2>/dev/null; then echo PRE-HTTP-OK; else echo PRE-HTTP-FAIL; fi
if [ -e /etc/ssl/certs/airlock-sandbox-ca.pem ]; then echo PRE-CA; else echo PRE-NO-CA; fi
echo PRE-WAITING
i=0; while [ ! -e /tmp/go ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
[ -e /tmp/go ] || { echo PRE-NO-GO; exit 1; }
echo "--- env"; env
echo "--- /proc/1/environ"; tr "\0" "\n" </proc/1/environ 2>&1
echo "--- /proc/1/mem"
python3 - <<PY 2>&1
pats = [l.encode() for l in open("/tmp/go").read().split() if l]
try:
    maps = open("/proc/1/maps").read().splitlines()
    mem = open("/proc/1/mem", "rb")
except OSError as e:
    print("mem: cannot open:", e); raise SystemExit
for line in maps:
    a, b = (int(x, 16) for x in line.split()[0].split("-"))
    try:
        mem.seek(a); chunk = mem.read(b - a)
    except OSError:
        continue
    for p in pats:
        if p in chunk:
            print("FOUND-IN-MEM", line)
PY
echo "--- files"
grep -rIl -F -f /tmp/go /etc /home /root /tmp /run 2>/dev/null | grep -vx /tmp/go | sed "s/^/FOUND-IN-FILE /"
echo PRE-DONE'
al_bg pre_user python3 "$EXEC" "$WSOCK" --timeout 300 -- "$PROBE"
al_bg pre_root python3 "$EXEC" "$WSOCK" --user root --timeout 300 -- "$PROBE"
al_wait_line pre_user PRE-WAITING 60 && al_wait_line pre_root PRE-WAITING 60 ||
  { cat "$AL_TMP/pre_user.log" "$AL_TMP/pre_root.log" >&2; exit 1; }
for who in pre_user pre_root; do
  al_match "$who, before the claim: no DNS (not registered with the egress proxy)" PRE-DNS-FAIL \
    cat "$AL_TMP/$who.log"
  al_match "$who, before the claim: no HTTP either" PRE-HTTP-FAIL cat "$AL_TMP/$who.log"
  al_match "$who, before the claim: no sandbox CA installed" PRE-NO-CA cat "$AL_TMP/$who.log"
done
al_fail "nothing of it reached an upstream" grep -q 'pre-claim' "$AL_TMP/up.req"

SECRET="warm-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
CREATED=$(cp_api -X POST "$CP_URL/v2/sandboxes" -d "{\"templateID\":\"base\",\"timeout\":600,
  \"metadata\":{\"airlock.policy\":\"warmix\"},\"envVars\":{\"WARM_SECRET\":\"$SECRET\"}}")
SB=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])' <<<"$CREATED")
TOK=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])' <<<"$CREATED")
al_eq "the creation claimed the warm sandbox (its id)" "$SB" "$W"
al_ok "its log line says so" grep -aqE "sandbox $SB created .*warm sandbox claimed" "$AL_TMP/airlockd.log"

al_note "it works like a cold one"
al_eq "a command runs" "$(cp_exec "$SB" sh -c 'echo hello; id -un')" "hello
user"
al_eq "the creation's envVars reach its processes" "$(cp_exec "$SB" sh -c 'echo "$WARM_SECRET"')" "$SECRET"
al_eq "so do its template's" "$(cp_exec "$SB" sh -c 'echo "$LANG"')" "C.UTF-8"
printf 'uploaded %s\n' "$SB" >"$AL_TMP/up.txt"
al_ok "a file goes up" in_host curl -sS -f -H "E2b-Sandbox-Id: $SB" -H "E2b-Sandbox-Port: 49983" \
  -H "X-Access-Token: $TOK" -F "file=@$AL_TMP/up.txt;filename=/home/user/up.txt" \
  "$CP_URL/files?path=/home/user/up.txt" -o /dev/null
al_eq "and down again" "$(in_host curl -sS -f -H "E2b-Sandbox-Id: $SB" -H "E2b-Sandbox-Port: 49983" \
  -H "X-Access-Token: $TOK" "$CP_URL/files?path=/home/user/up.txt")" "uploaded $SB"
al_ok "its CA (the claim's) is in its trust stores" cp_exec "$SB" sh -c \
  'test -s /etc/ssl/certs/airlock-sandbox-ca.pem && grep -qF "$(sed -n 2p /etc/ssl/certs/airlock-sandbox-ca.pem)" /etc/ssl/certs/ca-certificates.crt'
al_eq "and its processes are pointed at them" "$(cp_exec "$SB" sh -c 'echo "$SSL_CERT_FILE"')" \
  /etc/ssl/certs/ca-certificates.crt
al_fail "its agent wants the creation's token now" python3 "$EXEC" "$WSOCK" --timeout 20 -- true
al_ok "and takes it" python3 "$EXEC" "$WSOCK" --token "$TOK" --timeout 20 -- true
al_match "egress: an allowed upstream by name" '"server": "good"' \
  cp_exec "$SB" curl -sS -m 10 http://allowed.test/cp-warm
al_match "egress: a name outside its policy is NXDOMAIN" NXDOMAIN \
  cp_exec "$SB" dig +time=3 +tries=1 evil.test
al_match "egress: a denied host by address: 403 with the reason" '"error":"blocked_by_policy"' \
  cp_exec "$SB" curl -sS -m 10 http://203.0.113.11/cp-warm-raw-ip

al_note "what ran before the claim saw nothing of it"
# /tmp/go names what to look for (the creation's secrets: so a probe that finds them says so).
al_ok "the claimed sandbox wakes them" cp_exec "$SB" sh -c "printf '%s\n%s\n' '$SECRET' '$TOK' >/tmp/go.new && mv /tmp/go.new /tmp/go"
for who in pre_user pre_root; do
  al_wait_line "$who" PRE-DONE 120 || { cat "$AL_TMP/$who.log" >&2; }
  al_match "$who ran to its end" PRE-DONE cat "$AL_TMP/$who.log"
  al_fail "$who: the creation's envVars are nowhere it can look" grep -aqF "$SECRET" "$AL_TMP/$who.log"
  al_fail "$who: nor the creation's access token" grep -aqF "$TOK" "$AL_TMP/$who.log"
  al_fail "$who: not in the agent's memory, not in a file" grep -aqE 'FOUND-IN-(MEM|FILE)' "$AL_TMP/$who.log"
done
al_match "root of the sandbox cannot read the agent's memory" 'mem: cannot open' \
  cat "$AL_TMP/pre_root.log"

al_note "a rollback of the claimed sandbox is refused (its identity came by /init)"
SNAP=$(cp_api -X POST "$CP_URL/sandboxes/$SB/snapshots" -d '{}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshotID"])')
al_ok "a snapshot of it: $SNAP" test -n "$SNAP"
al_match "POST /sandboxes/$SB/rollback: 501 naming why" '"code":501.*warm sandbox' \
  cp_api -X POST "$CP_URL/sandboxes/$SB/rollback" -d "{\"snapshotID\":\"$SNAP\"}"
al_eq "it runs on, its envVars with it" "$(cp_exec "$SB" sh -c 'echo "$WARM_SECRET"')" "$SECRET"
al_eq "the snapshot deleted" "$(cp_api -o /dev/null -w '%{http_code}' -X DELETE "$CP_URL/templates/$SNAP")" 204

al_note "the pool refills"
al_check "a new warm sandbox of base is ready" al_wait_until 120 warm_ready
W2=$(warm_ids | grep -vx "$SB")
al_eq "one more sandbox directory, of another id" "$(wc -w <<<"$W2")" 1

al_note "a template without warm sandboxes is created cold"
ln -s "$(readlink -f "$CP_STATE/templates/base")" "$CP_STATE/templates/plain"
P=$(cp_create '{"templateID":"plain","timeout":600}')
al_ok "the cold sandbox works" cp_exec "$P" true
al_eq "metrics: one warm claim of base" \
  "$(metric 'airlock_warm_claims_total{template="base",how="warm"}')" 1
al_eq "metrics: no cold creation of base" \
  "$(metric 'airlock_warm_claims_total{template="base",how="cold"}')" 0
al_eq "metrics: one cold creation of plain" \
  "$(metric 'airlock_warm_claims_total{template="plain",how="cold"}')" 1
al_eq "metrics: two warm starts of base" \
  "$(metric 'airlock_warm_starts_total{template="base",result="ok"}')" 2

al_note "an airlockd killed with SIGKILL: the next one tears its warm sandbox down"
al_kill airlockd KILL
# The next one warms the code interpreter's template too.
sed -i 's/templates: \["base=1", "plain=0"\]/templates: ["base=1", "plain=0", "code-interpreter-v1=1"]/' \
  "$AL_TMP/airlockd.yaml"
# (its airlock-vmm holds the sandbox's lock for as long as it lives)
al_fail "the warm sandbox's airlock-vmm outlives it" flock -n "$CP_STATE/sandboxes/$W2/vmm.lock" true
cp_start || exit 1
al_ok "the next airlockd tears it down" \
  grep -aq "sandbox $W2 was being created when airlockd stopped" "$AL_TMP/airlockd.log"
al_check "and starts a new one" al_wait_until 120 warm_ready
gone_w2() { [ ! -e "$CP_STATE/sandboxes/$W2" ]; }
al_check "the old one is gone" al_wait_until 60 gone_w2
al_eq "the claimed sandboxes were adopted: they still run" "$(cp_exec "$SB" echo up)" up

al_note "a warm sandbox of the code interpreter: its kernels start at the claim, with its envVars"
CI_READY='airlock_warm_sandboxes{template="code-interpreter-v1",state="ready"}'
ci_ready() { [ "$(metric "$CI_READY")" = 1 ]; }
al_check "a warm sandbox of code-interpreter-v1 is ready" al_wait_until 120 ci_ready
CI_JSON=$(cp_api -X POST "$CP_URL/v2/sandboxes" -d "{\"templateID\":\"code-interpreter-v1\",
  \"timeout\":600,\"envVars\":{\"WARM_SECRET\":\"$SECRET\"}}")
CI=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["sandboxID"])' <<<"$CI_JSON")
CITOK=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["envdAccessToken"])' <<<"$CI_JSON")
al_eq "it was claimed warm" \
  "$(metric 'airlock_warm_claims_total{template="code-interpreter-v1",how="warm"}')" 1
al_match "code run in its default Python context sees the creation's envVars" "$SECRET" \
  in_host curl -sS -m 180 -H "E2b-Sandbox-Id: $CI" -H "E2b-Sandbox-Port: 49999" \
  -H "X-Access-Token: $CITOK" -H "Content-Type: application/json" \
  -d '{"code":"import os; print(os.environ.get(\"WARM_SECRET\"))"}' "$CP_URL/execute"
cp_api -X DELETE "$CP_URL/v2/sandboxes/$CI" -o /dev/null

cp_api -X DELETE "$CP_URL/v2/sandboxes/$SB" -o /dev/null
cp_api -X DELETE "$CP_URL/v2/sandboxes/$P" -o /dev/null
al_kill airlockd TERM
al_ok "airlockd stopped its warm sandbox" \
  grep -aqE "warm sandbox .* torn down: airlockd is stopping" "$AL_TMP/airlockd.log"
al_eq "nothing is left" "$(cp_leaks_settled)" ""
al_done
