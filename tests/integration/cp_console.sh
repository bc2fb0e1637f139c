#!/usr/bin/env bash
# tests/integration/cp_console.sh: the web console in a real browser (Debian's chromium driven
# by puppeteer-core, tests/console/browser.mjs), against airlockd-test (test backend, network
# off) in the world's namespace, where the browser runs too (loopback only):
#   - sign-in (a wrong key refused with the API's reason), the overview, the session cookie's
#     attributes as the browser holds them, unreadable from script;
#   - the overview's latency chart has the creations, and one made meanwhile at its next
#     redrawing; without airlock-egress it says there are no decisions to chart; the egress
#     chart's drawing, from a series answered by the test (two runs of buckets: each series
#     two lines through a point per bucket at its time and value, titles, scale, legend);
#   - the sandboxes page lists a created sandbox whose metadata is hostile (<img onerror>,
#     "><script>, a bidi control): shown as text, no element made, nothing run;
#   - a POST with the cookie and without the CSRF token is refused; the detail page, its
#     logs live (lines written meanwhile at the bottom, hostile ones as text), its CPU, memory
#     and disk charted (a point per sample, titled with it); kill;
#   - the templates page: each template's latest build and what it is made from; a build's
#     log followed live from before its definition is sent (its entries in order, a hostile
#     one as text, its status turning ready, the stream's end), whole once it ended; the list
#     then has its base and build time;
#   - the audit page's verification answers; followed live with a filter, a record written
#     meanwhile appears (rule, reason, a hostile host as text), one filtered out does not; its
#     export links download what the filters select, as the log's lines (JSONL) and as OCSF
#     events (fields checked); the host filter narrows the listing and the export;
#   - the policies page: each policy valid or with its errors, a policy's YAML with each lint
#     finding under its line and column (a hostile string in it as text), the sandboxes using
#     one, explain (allowed by rule web and why, another port denied naming the rule, a hostile
#     host refused and quoted as text, an unreadable URL refused with why); its test cases
#     (expected and actual decision and rule, a failing one's why, a hostile name as text);
#     its reloads (airlockd's first reading, an edit read again from the page: key, hashes,
#     lint result);
#   - the vault page: a secret added (its value in a password field, never shown or answered
#     back), listed with its version, bound host and the policy rule injecting it (a hostile
#     description as text); rotated (version 2), a bad name refused with why, deleted; an
#     auditor sees the names but no way to change them, and the API refuses its write;
#   - the API keys page creates a key (shown once, working) and revokes it (refused at once);
#     sign-out ends the session;
#   - a sandbox's page lists its egress decisions and follows them live (not another's);
#   - the terminal: `echo hi` typed shows `hi`, hostile output shows as text, the pty has the
#     page's size, its start and end are lifecycle events with the key (and nothing typed),
#     closing it kills the shell;
#   - an auditor key: its role shown, no kill/pause/resume, terminal or logs offered, the API refusing
#     the kill (403) and the terminal's upgrade, the sandbox still there; the policies and
#     their explain and reloads offered, reloading not; the audit export offered;
#   - the page asks nothing of any host but airlockd, and no script error or CSP violation.
# Screenshots of each page, kept: $CONSOLE_SHOTS (default <build>/artifacts/cp_console).
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
CONSOLE_DIR="$AIRLOCK_SOURCE_DIR/tests/console"
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$AIRLOCK_BIN/airlock-agent-dev" ] || { echo "cp_console: airlock-agent-dev is not built: SKIP"; exit 0; }
if [ ! -x "$CHROMIUM" ]; then
  # deploy/setup installs it: in CI a missing browser is a broken set-up, not a reason to skip.
  [ "${CI:-}" = true ] && { echo "cp_console: $CHROMIUM is missing (deploy/setup installs chromium)" >&2; exit 1; }
  echo "cp_console: $CHROMIUM is missing (apt-get install chromium): SKIP"; exit 0
fi
"$AIRLOCK_SOURCE_DIR/tests/e2b/setup" "$CONSOLE_DIR" >/dev/null ||
  { echo "cp_console: puppeteer-core cannot be installed (tests/e2b/setup tests/console)" >&2; exit 1; }
cp_world cp_console test off
cp_start || exit 1

al_note "a sandbox with hostile metadata"
SB=$(cp_create '{"templateID":"base","timeout":600,"metadata":{"note":"<img src=x onerror=\"window.__pwned=1\">","tag":"\"><script>window.__pwned=2</script>","bidi":"abc\u202edcba"}}')
al_check "created" test -n "$SB"
SB2=$(cp_create)
al_check "a second sandbox, for the auditor" test -n "$SB2"
al_ok "an auditor key" cp_cli apikey create watcher --role auditor
AUDITOR=$(grep -E '^e2b_[0-9a-f]{40}$' <<<"$AL_OUT")

# No airlock-egress in this world: the log the audit page follows is begun here, one record
# in the writer's layout (common/auditlog.c), and browser.mjs appends more.
mkdir -p "$CP_STATE/audit"
AUDIT_FILE="$CP_STATE/audit/egress-00000000000000000001-console.jsonl"
printf '{"seq":1,"type":"http_request","sandbox":"%s","decision":"deny","reason":"no_rule_matched","host":"before.test"}\n' "$SB2" >"$AUDIT_FILE"

# A policy with two lint errors (a rule without hosts, line 6; an unknown key, line 7) and a
# hostile string in its text, for the policies page.
cat >"$CP_STATE/policies/broken.yaml" <<'YAML'
version: 1
name: broken
description: "<img src=x onerror=window.__pwned=7>"
rules:
  # misspelt
  - name: r
    hostz: [x.test]
YAML

# A template made without the build API, as `airlock template pull` leaves one (its image's
# reference and size in its template.json; the test backend needs no files in it), and one
# whose build waits for its definition: browser.mjs follows its log, then sends it (from mini).
mkdir -p "$CP_STATE/templates/mini/rootfs/etc"
echo 'root:x:0:0::/root:/bin/sh' >"$CP_STATE/templates/mini/rootfs/etc/passwd"
printf '{"image":{"reference":"registry.test/mini:1","digest":"sha256:%064d","bytes":2048},"workdir":"/","user":"root"}\n' 0 \
  >"$CP_STATE/templates/mini/template.json"
TPL_BUILD=$(cp_api -X POST "$CP_URL/v3/templates" -d '{"name":"tpl-live"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["buildID"])')
al_check "a template build waiting for its definition" test -n "$TPL_BUILD"

# A policy whose rule injects a vault secret, for the vault page (which rules use a secret).
cat >"$CP_STATE/policies/vaulted.yaml" <<'YAML'
version: 1
name: vaulted
rules:
  - name: gh
    hosts: [api.github.test]
    inject:
      - header: Authorization
        value: "Bearer ${secret:console/token}"
YAML

# The policy e2e's test cases (cp_world.sh writes the policy): two that pass, one that fails,
# one with a hostile name.
mkdir -p "$CP_STATE/policies/tests"
cat >"$CP_STATE/policies/tests/e2e.yaml" <<'YAML'
cases:
  - name: reads the site
    url: http://allowed.test/x
    expect: allow
    rule: web
  - name: another port
    url: http://allowed.test:8080/x
    expect: allow
  - name: "<img src=x onerror=window.__pwned=12>"
    url: https://elsewhere.test/
    expect: deny
    rule: null
YAML

al_note "the console in chromium"
SHOTS=${CONSOLE_SHOTS:-$AIRLOCK_BIN/../artifacts/cp_console}
rm -rf "$SHOTS" && mkdir -p "$SHOTS"
al_ok "browser checks (tests/console/browser.mjs)" \
  nsenter --net="/run/netns/$CP_HOSTNS" env CONSOLE_URL="$CP_URL" API_KEY="$CP_KEY" SANDBOX="$SB" \
  AUDITOR_KEY="$AUDITOR" SANDBOX2="$SB2" AUDIT_FILE="$AUDIT_FILE" TEMPLATE_BUILD="$TPL_BUILD" \
  SANDBOX_LOG="$CP_STATE/sandboxes/$SB/agent.log" POLICY_FILE="$CP_STATE/policies/e2e.yaml" \
  SHOTS="$SHOTS" CHROMIUM="$CHROMIUM" HOME="$AL_TMP" timeout 300 node "$CONSOLE_DIR/browser.mjs"
printf '%s\n' "$AL_OUT" | sed 's/^/     /'
# The test backend's agent is a host process: its shell's pid is one of ours.
SHELL_PID=$(sed -n 's/^shell-pid \([0-9][0-9]*\)$/\1/p' <<<"$AL_OUT")
al_check "the terminal's shell pid was reported" test -n "$SHELL_PID"
for _ in $(seq 100); do kill -0 "$SHELL_PID" 2>/dev/null || break; sleep 0.1; done
al_check "the terminal's shell was killed when the page closed it" bash -c "! kill -0 $SHELL_PID 2>/dev/null"
al_match "the auditor did not kill it" "\"sandboxID\": *\"$SB2\"" cp_api "$CP_URL/sandboxes/$SB2"
for p in signin overview overview-charts overview-egress-chart sandboxes sandbox templates template-build audit audit-live audit-export \
  policies policy-broken policy policy-tests policy-reloads vault keys terminal \
  sandbox-auditor vault-auditor; do
  al_check "screenshot of $p" test -s "$SHOTS/$p.png"
done
al_done
