#!/usr/bin/env bash
# tests/integration/cp_backend.sh: how airlockd chooses its sandbox backend, and the KVM
# sandbox spec it hands to airlock-vmm, in the cp_world (network on: the vswitch, egress).
#   auto    on this host: airlockd runs the real `airlock-vmm --probe-kvm` and picks what
#           its verdict says (here: a PVM /dev/kvm, so jail), printing the probe's reason;
#   kvm     forced where the probe says unusable: airlockd refuses to start, naming the
#           reason, and leaves nothing behind;
#   jail    forced: no probe;
#   kvm     with a fake airlock-vmm (its probe says usable; its "run" records what it got
#           and reports a failure): the sandbox's spec has a vswitch tap inherited as
#           descriptor 4 (a real tap of this instance, attached while the VMM starts),
#           the guest's MAC/address/gateway/DNS and the kvm section; the failed start
#           leaves no tap, cgroup or directory behind.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "cp_backend: $b is not built: SKIP"; exit 0; }
done

cp_world cp_backend auto on
# A template directory of our own (no template build: nothing here starts a real sandbox).
mkdir -p "$AL_TMP/tpl/fake/rootfs"
printf '{"name":"fake"}\n' >"$AL_TMP/tpl/fake/template.json"
cat >>"$AL_TMP/airlockd.yaml" <<CFG
templates:
  dir: $AL_TMP/tpl
  defaults: [fake]
  build: "off"
CFG
set_backend() { sed -i "s/^  backend: .*/  backend: $1/" "$AL_TMP/airlockd.yaml"; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

al_note "auto: the real probe decides"
"$AIRLOCK_BIN/airlock-vmm" --probe-kvm >"$AL_TMP/probe.json" 2>/dev/null
PROBE_RC=$?
USABLE=$(json "$AL_TMP/probe.json" 'd["usable"]')
REASON=$(json "$AL_TMP/probe.json" 'd["reason"]')
al_note "airlock-vmm --probe-kvm: exit $PROBE_RC, usable $USABLE: $REASON"
if [ "$USABLE" = True ]; then WANT=kvm; VERDICT=usable; else WANT=jail; VERDICT="NOT usable"; fi
cp_start || exit 1
LOG="$AL_TMP/airlockd.log"
al_ok "airlockd reports the probe's verdict and reason" grep -F -- "  KVM probe   $VERDICT: $REASON" "$LOG"
al_ok "airlockd chose $WANT and says why" \
  grep -F -- "sandboxes.backend: auto; KVM probe: $VERDICT: $REASON" "$LOG"
al_match "... on its backend line" "^  backend     $WANT: " cat "$LOG"
al_match "... and in its log" "\"sandbox backend: $WANT \(sandboxes.backend: auto" cat "$LOG"
al_kill airlockd TERM

if [ "$USABLE" != True ]; then
  al_note "kvm forced on a host whose probe says unusable: airlockd refuses to start"
  set_backend kvm
  nsenter --net="/run/netns/$CP_HOSTNS" -- env AIRLOCK_API_KEY="$CP_KEY" timeout 120 \
    "$AIRLOCK_BIN/airlockd" --listen 127.0.0.1:0 --state-dir "$CP_STATE" \
    --config "$AL_TMP/airlockd.yaml" >"$AL_TMP/forced.log" 2>&1
  RC=$?
  al_eq "airlockd exits 1 (not a timeout, not a crash)" "$RC" 1
  al_ok "its error names the forced backend and the probe's reason" grep -F -- \
    "sandboxes.backend is kvm, but this host cannot run KVM sandboxes: $REASON" "$AL_TMP/forced.log"
  al_ok "... and says how to fix it" grep -F -- "set sandboxes.backend to jail or auto" \
    "$AL_TMP/forced.log"
  al_fail "it never served" grep -q '^export E2B_API_URL=' "$AL_TMP/forced.log"
  al_eq "nothing left behind" "$(cp_leaks_settled)" ""
else
  al_note "(this host's probe says usable: the forced-kvm refusal is covered by test_cp_backend)"
fi

al_note "jail forced: no probe"
set_backend jail
cp_start || exit 1
al_ok "backend jail, as configured" grep -F -- \
  "  backend     jail: namespaces, cgroups, seccomp, Landlock (sandboxes.backend: jail; KVM not probed)" "$LOG"
al_fail "no KVM probe ran" grep -F "KVM probe" "$LOG"
al_kill airlockd TERM

al_note "kvm with a fake airlock-vmm: the spec and the tap airlockd hands over"
FAKE="$AL_TMP/fakebin"
OUT="$AL_TMP/fake"
mkdir -p "$FAKE" "$OUT"
for b in airlock airlock-egress airlock-vault; do
  [ -x "$AIRLOCK_BIN/$b" ] && ln -s "$AIRLOCK_BIN/$b" "$FAKE/$b"
done
cat >"$FAKE/airlock-vmm" <<EOF
#!/bin/sh
case " \$* " in
*" --probe-kvm "*)
  echo "\$*" >"$OUT/probe.args"
  echo '{"usable":true,"reason":"fake probe: the guest boots"}'
  exit 0 ;;
*" --spec "*)
  cat >"$OUT/spec.json"
  echo "\$*" >"$OUT/run.args"
  readlink /proc/\$\$/fd/4 >"$OUT/fd4.link" 2>&1
  cat /proc/\$\$/fdinfo/4 >"$OUT/fd4.info" 2>&1
  ifn=\$(sed -n 's/^iff:[[:space:]]*//p' "$OUT/fd4.info")
  echo "\$ifn" >"$OUT/tap.name"
  ip -o link show "\$ifn" >"$OUT/tap.link" 2>&1
  echo '{"ready":false,"error":"fake airlock-vmm: spec captured"}' >&3
  exit 1 ;;
*) exec "$AIRLOCK_BIN/airlock-vmm" "\$@" ;;
esac
EOF
chmod 755 "$FAKE/airlock-vmm"
set_backend kvm
sed -i "s|^  cgroup_parent: .*|&\n  kvm_kernel: /nonexistent/fake-bzImage|" "$AL_TMP/airlockd.yaml"
printf 'bin_dir: %s\n' "$FAKE" >>"$AL_TMP/airlockd.yaml"
cp_start || exit 1
al_ok "backend kvm with the probe's reason" grep -F -- \
  "  backend     kvm: KVM microVMs, one guest kernel per sandbox (sandboxes.backend: kvm; KVM probe: fake probe: the guest boots)" "$LOG"
al_ok "the probe was given the configured kernel" grep -F -- "--probe-kvm --kernel /nonexistent/fake-bzImage --timeout-ms 5000" "$OUT/probe.args"
RESP=$(cp_api -X POST "$CP_URL/v2/sandboxes" -d '{"templateID":"fake","timeout":60}')
al_match "the create fails with the fake VMM's error" 'fake airlock-vmm: spec captured' echo "$RESP"
al_ok "airlock-vmm ran cold (no warm pool for kvm), spec on stdin" grep -Fx -- \
  "--state-dir $CP_STATE --spec - --ready-fd 3" "$OUT/run.args"
al_ok "descriptor 4 of airlock-vmm is a tap" grep -Fx /dev/net/tun "$OUT/fd4.link"
TAP=$(cat "$OUT/tap.name")
al_match "... of this instance's switch ($TAP)" "^$CP_PREFIX" echo "$TAP"
al_match "... which existed while airlock-vmm started" "$TAP" cat "$OUT/tap.link"
S="$OUT/spec.json"
al_eq "spec: backend" "$(json "$S" 'd["backend"]')" kvm
al_eq "spec: network mode" "$(json "$S" 'd["network"]["mode"]')" tap
al_eq "spec: the tap's descriptor" "$(json "$S" 'd["network"]["tap_fd"]')" 4
al_match "spec: the guest's MAC" '^[0-9a-f]{2}(:[0-9a-f]{2}){5}$' json "$S" 'd["network"]["mac"]'
al_match "spec: the guest's address in the configured range" '^10\.201\.[0-9]+\.[0-9]+/30$' \
  json "$S" 'd["network"]["address"]'
GW=$(json "$S" 'd["network"]["gateway"]')
al_match "spec: its gateway" '^10\.201\.[0-9]+\.[0-9]+$' echo "$GW"
al_eq "spec: its DNS server is the gateway" "$(json "$S" 'd["network"]["dns"]')" "['$GW']"
al_eq "spec: no network namespace" "$(json "$S" '"netns" in d["network"]')" False
al_eq "spec: the kvm section's kernel" "$(json "$S" 'd["kvm"]["kernel"]')" /nonexistent/fake-bzImage
al_eq "spec: the VMM's cgroup parent" "$(json "$S" 'd["jail"]["cgroup_parent"]')" "$CP_CG"
al_eq "spec: resources" "$(json "$S" '(d["resources"]["cpus"], d["resources"]["memory_mib"])')" "(2, 512)"
gone=no
al_wait_until 60 eval '! ip -n "$CP_HOSTNS" link show "$TAP" >/dev/null 2>&1' && gone=yes
al_eq "the failed sandbox's tap is gone" "$gone" yes
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
