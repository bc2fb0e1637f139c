#!/usr/bin/env bash
# tests/integration/templates_apt.sh: a template build's RUN step as root is a package
# manager's root. airlockd (jail sandboxes, the vswitch, airlock-egress) in cp_world.sh's
# namespace world, whose fake internet adds a Debian repository: http://deb.test
# (203.0.113.21:80) serving one package made here, whose files belong to uid 1000 and whose
# maintainer script makes a directory of that user's. Under a build policy that opens it:
#   - `apt-get install` in a RUN step as root installs it (dpkg's chown of the files, the
#     script's `install -o`): the template has the files with their owners and modes
#     (setgid kept);
#   - the step's root has the build set (CapEff 0xfb) and a step as user none;
#   - a sandbox of the template is as confined as any: root has no capability and cannot
#     chown or write another user's files.
# Nothing has a route out of the machine.
set -uo pipefail
source "${AIRLOCK_SOURCE_DIR:?}/tests/integration/cp_world.sh"
for b in airlockd airlock airlock-vmm airlock-egress; do
  [ -x "$AIRLOCK_BIN/$b" ] || { echo "templates_apt: $b is not built: SKIP"; exit 0; }
done
command -v dpkg-deb >/dev/null && command -v dpkg-scanpackages >/dev/null ||
  { echo "templates_apt: dpkg-deb and dpkg-scanpackages (dpkg-dev) are needed: SKIP"; exit 0; }

cp_world templates_apt jail on
STATE=$CP_STATE
T=$AL_TMP

al_note "the fake Debian repository: http://deb.test, one package of uid 1000's files"
P=$T/pkg
mkdir -p "$P/DEBIAN" "$P/opt/airlock-owned/shared"
cat >"$P/DEBIAN/control" <<'CTL'
Package: airlock-owned
Version: 1.0
Architecture: all
Maintainer: airlock tests <tests@airlock.invalid>
Description: files of another user (templates_apt)
CTL
cat >"$P/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
install -d -o 1000 -g 1000 -m 0750 /var/lib/airlock-owned
echo made-by-postinst > /var/lib/airlock-owned/state
chown 1000:1000 /var/lib/airlock-owned/state
SH
chmod 0755 "$P/DEBIAN/postinst"
echo owned-by-1000 >"$P/opt/airlock-owned/data"
chown -R 1000:1000 "$P/opt/airlock-owned"
chmod 2775 "$P/opt/airlock-owned/shared"
# A repository as Debian's mirrors lay one out: dists/test/{Release,main/binary-amd64/Packages}
# and the package under pool/ (unsigned: the step's source line says [trusted=yes]).
D=$T/repo/debian
mkdir -p "$D/pool" "$D/dists/test/main/binary-amd64"
dpkg-deb -Zgzip --build "$P" "$D/pool/airlock-owned_1.0_all.deb" >/dev/null || exit 1
(cd "$D" && dpkg-scanpackages --multiversion pool /dev/null 2>/dev/null >dists/test/main/binary-amd64/Packages) ||
  exit 1
python3 - "$D/dists/test" <<'PY'
import email.utils, hashlib, os, sys
d = sys.argv[1]
data = open(os.path.join(d, "main/binary-amd64/Packages"), "rb").read()
open(os.path.join(d, "Release"), "w").write(
    "Origin: airlock-test\nLabel: airlock-test\nSuite: test\nCodename: test\n"
    "Date: %s\nArchitectures: amd64 all\nComponents: main\nSHA256:\n %s %d main/binary-amd64/Packages\n"
    % (email.utils.formatdate(usegmt=True), hashlib.sha256(data).hexdigest(), len(data)))
PY
ip -n "$CP_UPNS" addr add 203.0.113.21/32 dev lo
python3 - "$T/zone.json" <<'PY'
import json, sys
z = json.load(open(sys.argv[1]))
z["deb.test"] = {"A": ["203.0.113.21"], "ttl": 30}
json.dump(z, open(sys.argv[1], "w"))
PY
al_bg repo ip netns exec "$CP_UPNS" python3 -u -m http.server 80 --bind 203.0.113.21 --directory "$T/repo"
al_wait_line repo "^Serving HTTP" || { echo "templates_apt: the repository did not start" >&2; exit 1; }

cat >"$STATE/policies/build-deb.yaml" <<'YAML'
version: 1
name: build-deb
description: templates_apt's build policy (the fake Debian repository)
rules:
  - name: repo
    hosts: [deb.test]
    ports: [80]
    scheme: http
    methods: [GET, HEAD]
YAML
{ cat "$T/airlockd.yaml"; printf 'templates:\n  build_policy: build-deb\n'; } >"$T/airlockd.yaml.new"
mv "$T/airlockd.yaml.new" "$T/airlockd.yaml"

# The steps: the repository alone as apt's source (the base template's Debian mirror is not
# reachable here), apt-get install as root, then what each user's capabilities are.
APT='-o Dir::Etc::sourcelist=/etc/apt/sources.list.d/test.list -o Dir::Etc::sourceparts=- -o Acquire::Retries=0 -o Acquire::Languages=none'
python3 - "$T/apt.json" "$APT" <<'PY'
import json, sys
out, apt = sys.argv[1:3]
steps = [
    ["echo 'deb [trusted=yes] http://deb.test/debian test main' > /etc/apt/sources.list.d/test.list"
     " && apt-get %s update -q && DEBIAN_FRONTEND=noninteractive apt-get %s install -y -q airlock-owned"
     " && rm -rf /var/lib/apt/lists/* /etc/apt/sources.list.d/test.list" % (apt, apt), "root"],
    ["echo root-caps $(awk '/^CapEff/ {print $2}' /proc/self/status)", "root"],
    ["echo user-caps $(awk '/^CapEff/ {print $2}' /proc/self/status)", "user"],
]
json.dump({"fromTemplate": "base",
           "steps": [{"type": "RUN", "args": a} for a in steps]}, open(out, "w"))
PY

cp_start || exit 1
tcli() { cp_cli template "$@" 2>&1; }
al_match "a RUN step as root installs the package with apt-get" "^tpl-apt [0-9a-f-]{36} ready" \
  tcli build tpl-apt --json "$T/apt.json"
LOG=$AL_OUT
echo "$LOG" | sed 's/^/   /'
al_match "... apt set it up (dpkg and its maintainer script ran)" "Setting up airlock-owned \(1\.0\)" echo "$LOG"
al_match "... apt fetched it from the repository through airlock-egress" \
  '"GET /debian/pool/airlock-owned_1\.0_all\.deb HTTP/1\.1" 200' cat "$T/repo.log"
al_match "... the step's root had the build set (chown dac_override fowner fsetid kill setgid setuid)" \
  "info: root-caps 00000000000000fb$" echo "$LOG"
al_match "... a step as user had none" "info: user-caps 0000000000000000$" echo "$LOG"
TP=$STATE/templates/tpl-apt/rootfs
al_eq "the package's files are uid 1000's in the template" \
  "$(stat -c '%u:%g %a' "$TP/opt/airlock-owned/data" "$TP/opt/airlock-owned/shared")" \
  "$(printf '1000:1000 644\n1000:1000 2775')"
al_eq "... and what its maintainer script made for that user" \
  "$(stat -c '%u:%g %a' "$TP/var/lib/airlock-owned" "$TP/var/lib/airlock-owned/state")" \
  "$(printf '1000:1000 750\n1000:1000 644')"
al_ok "... dpkg recorded it as installed" grep -qx 'Package: airlock-owned' "$TP/var/lib/dpkg/status"

SB=$(cp_create '{"templateID":"tpl-apt","timeout":300}')
al_ok "a sandbox of the template starts ($SB)" test -n "$SB"
al_match "... its user reads the package's files" "^made-by-postinst$" \
  cp_exec "$SB" cat /var/lib/airlock-owned/state
al_match "... its root has no capability" "^CapEff:[[:space:]]*0000000000000000$" \
  cp_cli sandbox exec "$SB" --user root -- grep CapEff /proc/self/status
al_match "... and cannot chown another user's file" "Operation not permitted.*rc=1" \
  cp_cli sandbox exec "$SB" --user root -- sh -c 'out=$(chown 0:0 /opt/airlock-owned/data 2>&1); echo "$out rc=$?"'
al_match "... nor write into another user's directory" "Permission denied.*rc=[12]" \
  cp_cli sandbox exec "$SB" --user root -- sh -c 'out=$( (echo x > /var/lib/airlock-owned/by-root) 2>&1); echo "$out rc=$?"'
al_ok "kill it" cp_cli sandbox kill "$SB"
al_kill airlockd TERM
al_eq "nothing left (interfaces, cgroups, sandbox directories, mounts, processes)" "$(cp_leaks_settled)" ""
al_done
