#!/usr/bin/env bash
# tests/unit/policy/policy_cli.sh: `airlock policy lint|explain|test|hash` end to end:
# exit codes, file:line:col errors, --json output, the shipped policies and their golden
# cases. No network, no privileges; temporary files under a per-run directory.
set -euo pipefail
src=${AIRLOCK_SOURCE_DIR:?run through ctest}
bin=${AIRLOCK_BIN:?run through ctest}/airlock
tmp=$(mktemp -d "/tmp/al-policy-cli-$$.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fails=$((fails + 1)); }

# run NAME WANT_EXIT CMD...: runs CMD, keeps stdout/stderr in $out/$err.
run() {
  local name=$1 want=$2
  shift 2
  set +e
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  set -e
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else
    bad "$name: exit $rc, want $want"
    sed 's/^/     | /' "$tmp/out" "$tmp/err"
  fi
}
has() { # has NAME TEXT NEEDLE
  if grep -qF -- "$3" <<<"$2"; then ok "$1"; else
    bad "$1: missing '$3' in:"
    sed 's/^/     | /' <<<"$2"
  fi
}
# jget JSON EXPR: evaluates a JavaScript expression on the parsed object `o`.
jget() { node -e 'const o = JSON.parse(process.argv[1]); console.log(JSON.stringify(eval(process.argv[2])))' "$1" "$2"; }
jis() { # jis NAME JSON EXPR WANT
  local got
  got=$(jget "$2" "$3") || { bad "$1: not JSON: $2"; return; }
  if [ "$got" = "$4" ]; then ok "$1"; else bad "$1: $3 = $got, want $4"; fi
}

policies=$src/deploy/policies
gh=$policies/github-agent.yaml

# ---- usage ------------------------------------------------------------------------------
run "no command" 2 "$bin" policy
run "unknown command" 2 "$bin" policy frobnicate
run "lint without files" 2 "$bin" policy lint
run "explain without URL" 2 "$bin" policy explain "$gh"
run "help" 0 "$bin" policy --help
has "help lists explain" "$out" "explain FILE URL"

# ---- lint -------------------------------------------------------------------------------
run "the shipped policies lint clean" 0 "$bin" policy lint "$policies"/*.yaml
for p in "$policies"/*.yaml; do has "lint ok: $(basename "$p")" "$out" "$p: ok"; done
has "warnings are printed" "$err" "github-agent.yaml:31:13: warning: rule 'build-cache'"
run "warnings fail with --strict" 1 "$bin" policy lint --strict "$gh"
cat >"$tmp/bad.yaml" <<'EOF'
version: 1
name: bad
rules:
  - name: github
    hots: [api.github.com]
  - name: secret
    hosts: [api.example.com]
    inject:
      - header: Authorization
        value: "Bearer ghp_16C7e42F292c6912E7710c838347Ae178B4a"
  - name: wide
    hosts: ["*.com"]
    ports: [70000]
EOF
run "a bad policy fails lint" 1 "$bin" policy lint "$tmp/bad.yaml"
has "unknown key with position and hint" "$err" \
  "$tmp/bad.yaml:5:5: error: unknown key 'hots' in rule 'github'; did you mean 'hosts'?"
has "literal secret" "$err" "$tmp/bad.yaml:10:16: error: rule 'secret': the value for header 'Authorization' contains literal text that looks like a credential"
has "the secret is not echoed" "$(grep -c ghp_16C7 <<<"$err" || true)" "0"
has "public suffix wildcard" "$err" "$tmp/bad.yaml:12:13: error: rule 'wide': '*.com' would match every site under the public suffix 'com'"
has "port range" "$err" "$tmp/bad.yaml:13:13: error: rule 'wide': port is 70000, outside the allowed range 1..65535"
has "summary counts errors" "$out" "$tmp/bad.yaml: 5 errors, 0 warnings"
run "a mix of good and bad files fails" 1 "$bin" policy lint "$gh" "$tmp/bad.yaml"
run "a missing file fails" 1 "$bin" policy lint "$tmp/missing.yaml"
has "missing file is named" "$err" "$tmp/missing.yaml: error: cannot read the file"

# ---- explain ----------------------------------------------------------------------------
run "explain allow (text)" 0 "$bin" policy explain "$gh" https://api.github.com/repos/acme/app
has "text shows the decision" "$out" "decision: allow"
has "text shows the rule and position" "$out" "rule:     github-api ($gh:12)"
has "text shows injected header names" "$out" "inject:   Authorization"
run "explain --json" 0 "$bin" policy explain "$gh" https://API.GitHub.com./repos/acme/app --json
json=$out
jis "json decision" "$json" o.decision '"allow"'
jis "json rule" "$json" o.rule '"github-api"'
jis "json reason" "$json" o.reason '"rule_allows"'
jis "json tls" "$json" o.tls '"inspect"'
jis "json inject has header names only" "$json" o.inject '["Authorization"]'
jis "json canonical host" "$json" o.host '"api.github.com"'
jis "json policy hash" "$json" 'o.policy.hash.length' 64
jis "json policy name" "$json" o.policy.name '"github-agent"'
has "json never carries the secret reference" "$(grep -c 'secret:' <<<"$json" || true)" "0"
hash=$("$bin" policy hash "$gh")
jis "json hash = policy hash" "$json" o.policy.hash "\"$hash\""
run "explain deny --json" 0 "$bin" policy explain "$gh" https://api.github.com/repos/acme/app --method DELETE --json
jis "deny decision" "$out" o.decision '"deny"'
jis "deny reason" "$out" o.reason '"method_not_allowed"'
jis "deny has no inject" "$out" o.inject '[]'
run "explain no rule" 0 "$bin" policy explain "$gh" https://evil.example/ --json
jis "no rule is null" "$out" o.rule 'null'
jis "no rule reason" "$out" o.reason '"no_rule_matched"'
run "explain raw TCP host:port" 0 "$bin" policy explain "$gh" 0177.0.0.1:22 --json
jis "octal loopback is an address" "$out" o.host '"127.0.0.1"'
jis "octal loopback is internal" "$out" o.reason '"internal_address"'
jis "raw tcp query is connection-level" "$out" o.query '"connection"'
run "explain IPv6 URL" 0 "$bin" policy explain "$gh" 'http://[::ffff:169.254.169.254]/' --json
jis "mapped metadata" "$out" o.address_class '"metadata"'
run "explain --addr (name resolving inside)" 0 "$bin" policy explain "$gh" https://pypi.org --connection --addr 10.0.0.1 --json
jis "internal resolution refused" "$out" o.reason '"internal_address"'
run "explain dns:" 0 "$bin" policy explain "$gh" dns:files.pythonhosted.org --json
jis "dns allow" "$out" o.decision '"allow"'
jis "dns query kind" "$out" o.query '"dns"'
run "explain bad URL (userinfo)" 2 "$bin" policy explain "$gh" https://api.github.com@evil.example/
has "userinfo explained" "$err" "userinfo"
run "explain bad port" 2 "$bin" policy explain "$gh" https://api.github.com:99999/
has "bad port explained" "$err" "the port is not a number from 1 to 65535"
run "explain query without a path" 0 "$bin" policy explain "$gh" 'https://pypi.org?x=1' --json
jis "the path of https://h?q is /?q" "$out" o.path '"/?x=1"'
jis "https default port" "$out" o.port 443
run "explain tcp:// URL" 0 "$bin" policy explain "$gh" 'tcp://[2001:db8::1]:5432' --json
jis "tcp:// is raw TCP" "$out" o.scheme '"tcp"'
jis "tcp:// port" "$out" o.port 5432
# bad URLs: exit 2 and a sentence saying what is wrong (the proxies' parser's reasons)
while IFS='|' read -r url why; do
  run "explain bad URL $url" 2 "$bin" policy explain "$gh" "$url"
  has "bad URL $url explained" "$err" "$why"
done <<'EOF'
ftp://files.example/x|unsupported URL scheme
api.github.com|raw TCP needs host:port
tcp://db.example|raw TCP needs host:port
tcp://https://db.example:5432|raw TCP is tcp://host:port
https://api.github.com/#top|a fragment (#...) is never sent
https://2001:db8::1/|nor an IPv6 address in brackets
https://[2001:db8::1/|nor an IPv6 address in brackets
https://[2001:db8::1]x/|nor an IPv6 address in brackets
https://api.github.com:/|the port is not a number from 1 to 65535
https://api.github.com:0/|the port is not a number from 1 to 65535
https:///repos|no host
https://api.git%68ub.com/|the host is neither a name
/repos/acme/app|has no host
*|has no host
EOF
run "explain invalid policy" 1 "$bin" policy explain "$tmp/bad.yaml" https://api.github.com/

# ---- test -------------------------------------------------------------------------------
for p in default github-agent pypi deny-all build-mirrors; do
  run "golden cases: $p" 0 "$bin" policy test "$policies/$p.yaml" "$policies/tests/$p.yaml"
  has "golden cases pass: $p" "$out" "0 failed"
done
cat >"$tmp/cases.yaml" <<'EOF'
cases:
  - name: passes
    url: https://pypi.org/simple/x/
    expect: allow
  - name: wrong expectation
    url: https://api.github.com/repos/a/b
    method: DELETE
    expect: allow
    rule: github-api
EOF
run "a failing case fails the run" 1 "$bin" policy test "$gh" "$tmp/cases.yaml"
has "failure names the case, position and reason" "$out" "FAIL wrong expectation ($tmp/cases.yaml:5); expected allow, got deny"
has "failure says why" "$out" "method_not_allowed"
has "summary" "$out" "2 cases: 1 passed, 1 failed"
cat >"$tmp/cases-bad.yaml" <<'EOF'
cases:
  - url: https://pypi.org/
    expct: allow
EOF
run "a malformed case file" 1 "$bin" policy test "$gh" "$tmp/cases-bad.yaml"
has "malformed case positioned" "$err" "$tmp/cases-bad.yaml:3:5: error: unknown key 'expct' in a test case; did you mean 'expect'?"

# ---- hash -------------------------------------------------------------------------------
run "hash" 0 "$bin" policy hash "$gh"
has "hash is 64 hex" "$(grep -cE '^[0-9a-f]{64}$' <<<"$out")" "1"
sed -e 's/#.*$//' -e 's/api.github.com/API.GitHub.com./' "$gh" >"$tmp/reformatted.yaml"
run "hash of the reformatted policy" 0 "$bin" policy hash "$tmp/reformatted.yaml"
has "same hash after reformatting" "$out" "$hash"
run "canonical form" 0 "$bin" policy hash --canonical "$gh"
has "canonical json" "$out" '"name":"github-agent"'

echo "policy_cli: $fails failure(s)"
[ "$fails" = 0 ]
