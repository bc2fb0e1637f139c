#!/usr/bin/env bash
# tests/integration/deploy_install.sh: deploy/install and deploy/systemd/airlockd.service.
#   - install refuses a build that is not Release, and one with a binary missing, saying why;
#   - into --destdir it installs the binaries, the agent directory, the template builder, the
#     CLI link, the example configuration and the unit, and leaves an existing
#     /etc/airlock/airlockd.yaml alone;
#   - the installed unit passes `systemd-analyze verify` (its ExecStart pointed at the
#     installed airlockd, as under / it would be); skipped, saying so, without systemd-analyze.
# The build under test is given to install through a directory of links to its binaries with
# a Release cache, so the ASan build's binaries exercise the same copying.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/lib/netns.sh"
al_world_init deploy_install
bins="airlockd airlock airlock-vmm airlock-egress airlock-vault airlock-agent airlock-unpack
      airlock-vmm-kvm airlock-kvm-init airlock-kvm-mkrootfs"
for b in $bins; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "deploy_install: $b is not built: SKIP"; exit 0; }
done
fake=$AL_TMP/build
mkdir -p "$fake/bin" "$fake/agent-root"
for b in $bins; do ln -s "$AIRLOCK_BIN/$b" "$fake/bin/$b"; done
cp -a "$AIRLOCK_BINARY_DIR/agent-root/.airlock" "$fake/agent-root/"
install=$AIRLOCK_SOURCE_DIR/deploy/install
dest=$AL_TMP/root

al_note "refusals"
echo "CMAKE_BUILD_TYPE:STRING=Debug" >"$fake/CMakeCache.txt"
al_fail "a Debug build is refused" "$install" --build "$fake" --destdir "$dest"
al_match "... saying how to make a Release one" "is not a Release build.*-DCMAKE_BUILD_TYPE=Release" echo "$AL_OUT"
echo "CMAKE_BUILD_TYPE:STRING=Release" >"$fake/CMakeCache.txt"
mv "$fake/bin/airlock-vault" "$fake/airlock-vault"
al_fail "a build without airlock-vault is refused" "$install" --build "$fake" --destdir "$dest"
al_match "... naming it" "bin/airlock-vault is missing" echo "$AL_OUT"
mv "$fake/airlock-vault" "$fake/bin/airlock-vault"
al_eq "nothing was installed" "$(ls -A "$dest" 2>/dev/null)" ""
al_fail "an unknown argument is refused" "$install" --prefix /opt

al_note "install into a destdir"
mkdir -p "$dest/etc/airlock"
echo "listen: 127.0.0.1:4000" >"$dest/etc/airlock/airlockd.yaml"
al_ok "install succeeds" "$install" --build "$fake" --destdir "$dest"
for b in $bins; do
  al_ok "usr/lib/airlock/$b is the built one" cmp "$AIRLOCK_BIN/$b" "$dest/usr/lib/airlock/$b"
done
al_ok "the agent directory" test -x "$dest/usr/lib/airlock/agent/bin/airlock-agent"
al_ok "the template builder" test -x "$dest/usr/lib/airlock/templates/build"
al_eq "the CLI link" "$(readlink "$dest/usr/bin/airlock")" /usr/lib/airlock/airlock
al_ok "the example configuration" cmp "$AIRLOCK_SOURCE_DIR/deploy/airlockd.yaml" \
  "$dest/etc/airlock/airlockd.yaml.example"
al_eq "the operator's configuration is untouched" "$(cat "$dest/etc/airlock/airlockd.yaml")" \
  "listen: 127.0.0.1:4000"
unit=$dest/etc/systemd/system/airlockd.service
al_ok "the unit" cmp "$AIRLOCK_SOURCE_DIR/deploy/systemd/airlockd.service" "$unit"
al_match "it runs the installed airlockd" "^ExecStart=/usr/lib/airlock/airlockd$" cat "$unit"
al_match "only airlockd gets SIGTERM (helpers left running survive its restart)" \
  "^KillMode=process$" cat "$unit"

if command -v systemd-analyze >/dev/null; then
  al_note "systemd-analyze verify"
  mkdir -p "$AL_TMP/verify"
  sed "s|^ExecStart=/usr/lib/airlock/airlockd|ExecStart=$dest/usr/lib/airlock/airlockd|" "$unit" \
    >"$AL_TMP/verify/airlockd.service"
  al_ok "the unit verifies" systemd-analyze verify "$AL_TMP/verify/airlockd.service"
  al_eq "... without a warning" "$AL_OUT" ""
  sed -i 's/^KillMode=process$/KillMode=proces/' "$AL_TMP/verify/airlockd.service"
  al_ok "a misspelt value still runs verify" systemd-analyze verify "$AL_TMP/verify/airlockd.service"
  al_match "... and is reported (the check can fail)" "Failed to parse kill mode" echo "$AL_OUT"
else
  echo "deploy_install: systemd-analyze is not installed: SKIP the unit's verification"
fi
al_done
