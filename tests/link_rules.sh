#!/usr/bin/env bash
# tests/link_rules.sh: what the built programs contain, against the rules of the design.
#   - airlockd has no test backend (controlplane/backend_test.c: sandboxes with no isolation):
#     no symbol of it, and `sandboxes.backend: test` is refused at start; only airlockd-test
#     (the test build's, never installed) has it.
#   - the vault library (the code that decrypts secrets) is linked by airlock-vault only: not
#     by the airlock CLI, airlock-egress or airlockd.
# Each check is also made where it must hold the other way (airlockd-test has the backend,
# airlock-vault has the library), so that a symbol table nm cannot read fails the test
# rather than passing it.
set -uo pipefail
bin=${AIRLOCK_BIN:-${AIRLOCK_BINARY_DIR:?AIRLOCK_BINARY_DIR or AIRLOCK_BIN}/bin}
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
# defined NAME BIN: whether BIN defines the function or object NAME
defined() { nm --defined-only "$2" 2>/dev/null | awk -v n="$1" '$3 == n { f = 1 } END { exit !f }'; }
vault_syms() { nm --defined-only "$1" 2>/dev/null | awk '{print $3}' | grep -c '^vault_'; }

for b in airlockd airlockd-test airlock airlock-egress airlock-vault; do
  [ -x "$bin/$b" ] || { echo "link_rules: $bin/$b is not built" >&2; exit 1; }
done

if defined cp_backend_test "$bin/airlockd-test"; then ok "airlockd-test has the test backend"
else bad "airlockd-test has no cp_backend_test (or nm cannot read it)"; fi
if defined cp_backend_test "$bin/airlockd"; then bad "airlockd links the test backend"
else ok "airlockd has no test backend symbol"; fi

tmp=$(mktemp -d /tmp/al-linkrules-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf 'sandboxes:\n  backend: test\n' >"$tmp/airlockd.yaml"
# It stops at the backend choice, before it listens, mounts or starts anything.
timeout 60 "$bin/airlockd" --listen 127.0.0.1:0 --state-dir "$tmp/state" \
  --config "$tmp/airlockd.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" = 1 ] && grep -q 'which this airlockd does not have' "$tmp/err"; then
  ok "airlockd refuses sandboxes.backend: test and says why"
else
  bad "airlockd with sandboxes.backend: test exited $rc:"; tail -5 "$tmp/err"
fi

n=$(vault_syms "$bin/airlock-vault")
if [ "$n" -gt 0 ]; then ok "airlock-vault has the vault library ($n vault_ symbols)"
else bad "airlock-vault has no vault_ symbols (or nm cannot read it)"; fi
for b in airlock airlock-egress airlockd; do
  n=$(vault_syms "$bin/$b")
  if [ "$n" = 0 ]; then ok "$b does not link the vault library"
  else bad "$b defines $n vault_ symbols: it links the vault library"; fi
done
exit $fail
