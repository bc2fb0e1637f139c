#!/usr/bin/env bash
# tests/integration/templates_oci.sh: `airlock template pull` against a real registry (Debian's
# docker-registry, the CNCF distribution registry) in a network namespace, over TLS from a
# test CA with htpasswd auth, and against a tampering registry (tests/integration/oci_tool.py).
# Images are made by umoci from a small busybox root filesystem and pushed with skopeo; the
# hostile ones are OCI layouts written by oci_tool.py. Every hostile layer must be refused with
# a clear error and leave nothing outside the template directory (canary names are looked
# for around it and in /tmp).
set -uo pipefail
. "$AIRLOCK_SOURCE_DIR/tests/lib/netns.sh"
al_world_init templates_oci
T=$AL_TMP
BIN=${AIRLOCK_BIN:?}
TOOL=$AIRLOCK_SOURCE_DIR/tests/integration/oci_tool.py
for p in docker-registry skopeo umoci htpasswd zstd busybox; do
  command -v "$p" >/dev/null || { echo "SKIP: $p is not installed (deploy/setup installs it)"; exit 77; }
done

al_ns_add cli
al_ns_add reg
al_link cli 203.0.113.1/24 reg 203.0.113.10/24
al_nsx reg ip addr add 203.0.113.11/24 dev "$(al_nsx reg ls /sys/class/net | grep -v lo | head -1)"
printf '203.0.113.10 registry.test\n203.0.113.11 tamper.test\n' > "$T/hosts"
# Commands of the test world see registry.test and tamper.test through their own /etc/hosts.
inworld() { al_nsx cli unshare -m --propagation private sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" "$@"; }

# --- the test CA and the registry's certificate --------------------------------------------
mkdir -p "$T/certs" && cd "$T/certs" || exit 1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=airlock test CA" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=registry.test" \
  -keyout reg.key -out reg.csr 2>/dev/null
printf 'subjectAltName=DNS:registry.test,DNS:tamper.test\n' > ext.cnf
openssl x509 -req -in reg.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf \
  -out reg.crt 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=other CA" \
  -keyout other.key -out other.crt 2>/dev/null
cd - >/dev/null || exit 1
mkdir -p "$T/trust" && cp "$T/certs/ca.crt" "$T/trust/ca.crt" # skopeo's --dest-cert-dir: the CA only
htpasswd -Bbc "$T/htpasswd" tester 'S3cret-pw-9f2a' 2>/dev/null

cat > "$T/registry.yml" <<EOF
version: 0.1
log: {level: info, formatter: text}
storage:
  filesystem: {rootdirectory: $T/regdata}
http:
  addr: 203.0.113.10:5000
  tls: {certificate: $T/certs/reg.crt, key: $T/certs/reg.key}
auth:
  htpasswd: {realm: airlock-test, path: $T/htpasswd}
EOF
al_bg registry ip netns exec "$(al_ns reg)" docker-registry serve "$T/registry.yml"
al_wait_line registry "listening on" 30 || { cat "$AL_TMP/registry.log"; exit 1; }

# --- images --------------------------------------------------------------------------------
R=$T/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/home/user" "$R/usr/bin" "$R/opt/keep"
cp "$(command -v busybox)" "$R/bin/busybox"
for a in sh ls cat echo id pwd; do ln -s busybox "$R/bin/$a"; done
# The agent runs commands as E2B's envd does, with /bin/bash -l -c: busybox's sh stands in.
printf '#!/bin/sh\nexec /bin/sh "$@"\n' > "$R/bin/bash" && chmod 755 "$R/bin/bash"
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' > "$R/etc/group"
echo hello > "$R/home/user/hello.txt"
chown -R 1000:1000 "$R/home/user"
cp "$R/bin/busybox" "$R/usr/bin/su-test" && chmod 4755 "$R/usr/bin/su-test"
ln -s /etc/passwd "$R/etc/abs-link"
echo doomed > "$R/etc/doomed"
L=$T/oci
umoci init --layout "$L" && umoci new --image "$L:base" &&
  umoci unpack --image "$L:base" "$T/bundle" >/dev/null &&
  cp -a "$R/." "$T/bundle/rootfs/" && umoci repack --image "$L:base" "$T/bundle" &&
  umoci config --image "$L:base" --config.env PATH=/bin:/usr/bin --config.env GREETING=hi \
    --config.cmd /bin/sh --config.workingdir /home/user --config.user 1000:1000 &&
  umoci unpack --image "$L:base" "$T/bundle2" >/dev/null &&
  rm "$T/bundle2/rootfs/etc/doomed" && umoci repack --image "$L:base2" "$T/bundle2" ||
  { echo "umoci failed"; exit 1; }
python3 "$TOOL" multiarch "$L" base multi || exit 1
P=$T/py
for k in hostile-dotdot hostile-abs hostile-symlink-abs hostile-symlink-escape hostile-hardlink \
         hostile-hardlink-abs hostile-device bomb zstd opaque devnull; do
  python3 "$TOOL" layout "$P" "$k" "$k" || exit 1
done
push() { # push LAYOUT:TAG REPO [--all]
  inworld skopeo copy -q ${3:-} --dest-creds 'tester:S3cret-pw-9f2a' --dest-cert-dir "$T/trust" \
    "oci:$1" "docker://registry.test:5000/$2" >>"$T/skopeo.log" 2>&1
}
ok=1
push "$L:base" test/base:1 || ok=0
push "$L:base2" test/base:2 || ok=0
push "$L:multi" test/multi:1 --all || ok=0
for k in hostile-dotdot hostile-abs hostile-symlink-abs hostile-symlink-escape hostile-hardlink \
         hostile-hardlink-abs hostile-device bomb zstd opaque devnull; do
  push "$P:$k" "test/$k:1" || ok=0
done
[ $ok = 1 ] || { tail -20 "$T/skopeo.log"; echo "skopeo could not push the images"; exit 1; }
al_note "images pushed: base, base2 (a whiteout), multi (index), zstd, opaque, hostile ones"

al_bg tamper ip netns exec "$(al_ns reg)" python3 "$TOOL" serve 203.0.113.11 5443 "$L" "$T/certs/reg.crt" "$T/certs/reg.key"
al_wait_line tamper LISTEN 30

# --- airlock -------------------------------------------------------------------------------
S=$T/state
mkdir -p "$S"
cat > "$T/airlockd.yaml" <<EOF
state_dir: $S
templates:
  registries: [registry.test:5000, tamper.test:5443]
  registry_ca: $T/certs/ca.crt
EOF
pull() { inworld "$BIN/airlock" --state-dir "$S" template pull --config "$T/airlockd.yaml" --quiet "$@"; }
pullc() { echo 'S3cret-pw-9f2a' | pull --username tester "$@"; }
# The same, succeeding when the pull fails (its message on stdout for al_match).
nopull() { if pull "$@" 2>&1; then return 1; fi; return 0; }
nopullc() { if echo 'S3cret-pw-9f2a' | pull --username tester "$@" 2>&1; then return 1; fi; return 0; }
nopullw() { if echo wrong | pull --username tester "$@" 2>&1; then return 1; fi; return 0; }
REG=registry.test:5000/test

al_match "an anonymous pull of a private repository is refused, saying credentials are needed" \
  "the registry wants a username and password \(basic auth\): give them" nopull "$REG/base:1"
al_match "wrong credentials are refused" "refused" nopullw "$REG/base:1"
al_match "a registry the configuration does not list is refused" \
  "registry 'docker.io' is not allowed.*templates.registries" nopull busybox

al_ok "pull with credentials into the template t-base" pullc "$REG/base:1" --name t-base --json
echo "$AL_OUT" > "$T/base.json"
TB=$S/templates/t-base
al_ok "the root filesystem has the image's files" test -x "$TB/rootfs/bin/busybox"
al_eq "ownership from the image (1000:1000)" "$(stat -c %u:%g "$TB/rootfs/home/user/hello.txt")" 1000:1000
al_eq "the setuid bit is kept" "$(stat -c %a "$TB/rootfs/usr/bin/su-test")" 4755
al_eq "an absolute symlink stays a link" "$(readlink "$TB/rootfs/etc/abs-link")" /etc/passwd
al_ok "template.json has the image config" python3 - "$TB/template.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
assert t["name"] == "t-base", t
assert t["env"]["GREETING"] == "hi" and t["env"]["PATH"] == "/bin:/usr/bin", t["env"]
assert t["cmd"] == ["/bin/sh"] and t["workdir"] == "/home/user" and t["user"] == "1000:1000", t
assert t["image"]["reference"] == "registry.test:5000/test/base:1", t["image"]
assert t["image"]["digest"].startswith("sha256:") and len(t["image"]["layers"]) == 1, t["image"]
PY
DIGEST=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"]["digest"])' "$T/base.json")
al_match "a second pull comes from the cache" '"bytes_pulled": 0' pullc "$REG/base:1" --json
al_ok "a pull by digest" pullc "$REG/base@$DIGEST" --name t-digest
pullcfg() { echo 'S3cret-pw-9f2a' | inworld env -u AIRLOCK_STATE_DIR "$BIN/airlock" template pull --config "$T/airlockd.yaml" --quiet --username tester "$@"; }
al_ok "without --state-dir, a pull uses the configuration's state_dir" pullcfg "$REG/base:1" --name t-cfgstate
al_ok "... and the template is there" test -x "$S/templates/t-cfgstate/rootfs/bin/busybox"
al_ok "the audit log has every pull, with reference, digest, size and who asked" python3 - "$S/audit" "$DIGEST" <<'PY'
import glob, json, sys
recs = [json.loads(l) for f in sorted(glob.glob(sys.argv[1] + "/templates-*.jsonl")) for l in open(f)]
pulls = [r for r in recs if r.get("event") == "template_pull"]
ok = [r for r in pulls if r["result"] == "ok" and r["digest"] == sys.argv[2]]
assert len(ok) >= 3, pulls
assert all(r["requested_by"].startswith("cli:uid ") and r["bytes"] > 0 for r in ok), ok
assert any(r["result"] == "error" and "registry 'docker.io'" in r["error"] for r in pulls), pulls
PY
al_fail "the password is in no file of the state directory" grep -rq 'S3cret-pw-9f2a' "$S"
al_ok "the audit log verifies" sh -c "'$BIN/airlock' audit verify $S/audit/templates-*.jsonl --pubkey $S/audit/templates.pub"

al_ok "an index is resolved to linux/amd64" pullc "$REG/multi:1" --name t-multi --json
al_match "... which is the amd64 manifest" "\"digest\": \"$DIGEST\"" cat "$S/templates/t-multi/template.json"
al_ok "a layer with a whiteout" pullc "$REG/base:2" --name t-wh
al_ok "... removes the file of the lower layer" test ! -e "$S/templates/t-wh/rootfs/etc/doomed" -a -e "$S/templates/t-wh/rootfs/etc/passwd"
al_ok "an opaque directory over a lower layer" pullc "$REG/opaque:1" --name t-opq
al_ok "... keeps only the upper layer's entries" sh -c "cd $S/templates/t-opq/rootfs && test -e opt/new -a ! -e opt/old1 -a ! -e opt/old2 -a ! -e etc/gone -a ! -e opt/.wh..wh..opq"
al_ok "a zstd layer" pullc "$REG/zstd:1" --name t-zstd
al_ok "... is unpacked" test -e "$S/templates/t-zstd/rootfs/etc/zstd-was-here"
al_match "a device node under /dev is skipped and counted" '"devices_skipped": 1' pullc "$REG/devnull:1" --name t-dev --json
al_ok "... and not made" test ! -e "$S/templates/t-dev/rootfs/dev/null"

# --- hostile layers ------------------------------------------------------------------------
refuse() { # refuse MSG REGEX TAG
  al_match "$1" "$2" nopullc "$REG/$3:1" --name "x-$3"
  al_ok "... leaves no template x-$3 and nothing half-made" sh -c "test ! -e $S/templates/x-$3 && ! ls -A $S/templates | grep -q '^\.x-$3'"
}
refuse "a '../' entry is refused" "entry '../escaped-dotdot'.*'\.\.' component" hostile-dotdot
refuse "an absolute entry is refused" "absolute path '/escaped-abs'" hostile-abs
refuse "a file written through an absolute symlink is refused" "'tmpl' is a symbolic link: entries are never written through links" hostile-symlink-abs
refuse "a file written through an escaping symlink of a lower layer is refused" "'up' is a symbolic link" hostile-symlink-escape
refuse "a hard link out of the root is refused" "hard link target.*'\.\.' component" hostile-hardlink
refuse "a hard link to a host path is refused" "hard link target '/etc/shadow' does not exist in the image" hostile-hardlink-abs
refuse "a device node is refused" "device node outside /dev" hostile-device
refuse "a decompression bomb is refused" "compression ratio" bomb
rm -rf "$S/cache" # the layer is cached from the real registry under the same digest
al_match "a layer whose bytes do not match its digest is refused" "has the digest sha256:[0-9a-f]+: refused" \
  nopull tamper.test:5443/tamper:1
al_ok "... and nothing of it is kept in the cache" sh -c "! ls $S/cache/oci/blobs/sha256 | grep -q partial"
al_match "an oversized manifest is refused" "manifest of .* is 8388608 bytes, more than the 4194304 allowed" \
  nopull tamper.test:5443/huge:1
al_fail "no canary escaped into the test directory, /tmp or the state directory's parent" \
  sh -c "find $T /tmp -maxdepth 4 -name 'escaped-*' 2>/dev/null | grep ."
al_eq "the host's /etc/shadow has no new link" "$(stat -c %h /etc/shadow)" 1

# --- TLS --------------------------------------------------------------------------------------
sed "s#registry_ca: .*#registry_ca: $T/certs/other.crt#" "$T/airlockd.yaml" > "$T/other.yaml"
nopull_other() { if inworld "$BIN/airlock" --state-dir "$S" template pull --config "$T/other.yaml" --quiet "$@" 2>&1; then return 1; fi; }
al_match "a registry whose certificate the configured roots do not verify is refused" \
  "certificate of registry.test does not verify" nopull_other "$REG/base:1"

# --- concurrency: two pulls of one image into an empty cache share the blobs ----------------
rm -rf "$S/cache"
( pullc "$REG/zstd:1" > "$T/c1.log" 2>&1; echo $? > "$T/c1.rc" ) &
c1=$!
( pullc "$REG/zstd:1" > "$T/c2.log" 2>&1; echo $? > "$T/c2.rc" ) &
c2=$!
wait "$c1" "$c2"
al_eq "two concurrent pulls of one image both succeed" "$(cat "$T/c1.rc")$(cat "$T/c2.rc")" 00
[ "$(cat "$T/c1.rc")$(cat "$T/c2.rc")" = 00 ] || cat "$T/c1.log" "$T/c2.log"
al_eq "... and leave one copy of each blob, no partial file" \
  "$(ls "$S/cache/oci/blobs/sha256" | grep -vc '\.lock$')" 2

# --- airlockd's builds: the real SDK's Template.build (tests/e2b/template-build.mjs) ---------
# airlockd in the cli namespace, which sees registry.test, with jail sandboxes (airlock-vmm)
# under a cgroup parent of this run's own; the SDK talks to it over that namespace's loopback.
if "$AIRLOCK_SOURCE_DIR/tests/e2b/setup" >"$T/npm.log" 2>&1; then
  S2=$T/state2
  CG=al-tplbuild-$$
  mkdir -p "$S2" && chmod 0711 "$T" "$S2"
  cat > "$T/airlockd-build.yaml" <<EOF
state_dir: $S2
sandboxes: {backend: jail, cgroup_parent: $CG, ready_timeout: 5s}
network: {mode: "off"}
templates:
  build: off
  registries: [registry.test:5000]
  registry_ca: $T/certs/ca.crt
  max_upload_size: 64KiB
EOF
  cg_cleanup() {
    "$BIN/airlock-vmm" --state-dir "$S2" --sweep --cgroup-parent "$CG" >/dev/null 2>&1
    for d in /sys/fs/cgroup/*/"$CG" /sys/fs/cgroup/"$CG"; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
    return 0
  }
  al_on_cleanup cg_cleanup
  KEY=e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
  # nsenter --net, not ip netns exec: that one mounts a sysfs of the namespace over /sys,
  # which hides the cgroup hierarchies the jail needs.
  al_bg airlockd nsenter --net="/run/netns/$(al_ns cli)" unshare -m --propagation private \
    sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" \
    env AIRLOCK_API_KEY="$KEY" AIRLOCK_LOG_FORMAT=json "$BIN/airlockd" --listen 127.0.0.1:0 \
    --state-dir "$S2" --config "$T/airlockd-build.yaml"
  al_wait_line airlockd '^export E2B_API_URL=' 120 || { tail -30 "$AL_TMP/airlockd.log"; exit 1; }
  URL=$(sed -n 's/^export E2B_API_URL=//p' "$AL_TMP/airlockd.log" | head -1)
  sdk() {
    al_nsx cli env -u E2B_DEBUG E2B_API_URL="$URL" E2B_SANDBOX_URL="$URL" E2B_API_KEY="$KEY" \
      AIRLOCK_IMAGE="$REG/base:1" AIRLOCK_REG_USER=tester AIRLOCK_REG_PASSWORD='S3cret-pw-9f2a' \
      AIRLOCK_E2B_BACKEND=jail \
      node "$AIRLOCK_SOURCE_DIR/tests/e2b/template-build.mjs" 2>&1
  }
  al_ok "the SDK builds a template from the registry, is told of a failing step, rebuilds from the cache, starts a sandbox of it" sdk
  echo "$AL_OUT" | sed 's/^/   /'
  SDK_OUT=$AL_OUT
  al_ok "the COPY steps' archives are stored under their files hashes, with the files the SDK sent" sh -c \
    "test \"\$(ls $S2/cache/files | grep -c '^sdk-copy\.[0-9a-f]\{64\}\.tar\$')\" = 3 && for f in $S2/cache/files/sdk-copy.*.tar; do tar -xzOf \$f hello.txt 2>/dev/null; done | grep -qx 'copied by the sdk'"
  # The upload grant, by hand: what GET .../files/{hash} answers, and what a PUT is refused for.
  H=$(printf 'upload-test' | sha256sum | cut -d' ' -f1)
  api() { al_nsx cli curl -s -H "X-API-KEY: $KEY" "$@"; }
  al_match "GET files of an unknown hash: not present, an upload URL and its grant header" \
    "\"present\": ?false.*\"url\": ?\"http://127.0.0.1:[0-9]+/templates/sdk-copy/files/$H\"" \
    api "$URL/templates/sdk-copy/files/$H"
  GRANT=$(echo "$AL_OUT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["headers"]["X-Airlock-Upload-Token"])')
  put() { al_nsx cli curl -s -o /dev/null -w '%{http_code}' -X PUT --data-binary "@$1" "${@:3}" "$URL/templates/sdk-copy/files/$2"; }
  head -c 1000 /dev/urandom > "$T/small.bin"
  head -c 100000 /dev/urandom > "$T/big.bin"
  al_eq "a PUT without the grant is refused (401)" "$(put "$T/small.bin" "$H")" 401
  al_eq "... with a wrong grant too" "$(put "$T/small.bin" "$H" -H "X-Airlock-Upload-Token: $(printf %064d 0)")" 401
  al_eq "a PUT over templates.max_upload_size is refused (413)" \
    "$(put "$T/big.bin" "$H" -H "X-Airlock-Upload-Token: $GRANT")" 413
  al_eq "... which used its grant: a second PUT is refused" \
    "$(put "$T/small.bin" "$H" -H "X-Airlock-Upload-Token: $GRANT")" 401
  grant() { api "$URL/templates/sdk-copy/files/$H" | python3 -c 'import json,sys; print(json.load(sys.stdin)["headers"]["X-Airlock-Upload-Token"])'; }
  al_eq "a chunked PUT (no length given) is cut off at templates.max_upload_size (413)" \
    "$(put "$T/big.bin" "$H" -H "X-Airlock-Upload-Token: $(grant)" -H 'Transfer-Encoding: chunked')" 413
  al_fail "... and neither left a file" sh -c "ls $S2/cache/files | grep -e $H"
  al_eq "a PUT of the size allowed with a fresh grant is stored" \
    "$(put "$T/small.bin" "$H" -H "X-Airlock-Upload-Token: $(grant)")" 200
  al_ok "... as the bytes sent" cmp "$T/small.bin" "$S2/cache/files/sdk-copy.$H.tar"
  al_match "... and GET files says it is present, with an upload URL still (for forceUpload)" \
    "\"present\": ?true.*\"url\": ?\"http://127.0.0.1:[0-9]+/templates/sdk-copy/files/$H\"" \
    api "$URL/templates/sdk-copy/files/$H"
  al_match "... for that template only: another template's COPY of the same hash gets its own upload" \
    '"present": ?false' api "$URL/templates/sdk-tpl/files/$H"
  al_match "GET files of a bad hash is a 400 naming it" "is not a files hash" api "$URL/templates/sdk-copy/files/abc"
  al_match "GET files of a template never requested is a 404" "has not been requested" \
    api "$URL/templates/no-such/files/$H"
  TS=$S2/templates/sdk-tpl
  al_ok "the template has the image's files" test -x "$TS/rootfs/bin/busybox"
  al_ok "WORKDIR made its directory in the image, owned by the image's root" \
    sh -c "test -d $TS/rootfs/srv/app && test \"\$(stat -c %u $TS/rootfs/srv/app)\" = 0"
  al_ok "template.json has the image's config and the build's steps" python3 - "$TS/template.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
assert t["name"] == "sdk-tpl", t
assert t["env"]["GREETING"] == "hello" and t["env"]["BUILT_BY"] == "sdk", t["env"]
assert t["env"]["PATH"] == "/bin:/usr/bin", t["env"]
assert t["workdir"] == "/srv/app" and t["user"] == "user", t
assert t["start_cmd"] == "sleep 3600" and t["ready_cmd"] == "true", t
assert t["image"]["reference"] == "registry.test:5000/test/base:1", t["image"]
assert t["build"]["from_image"] == "registry.test:5000/test/base:1", t["build"]
PY
  # What stays of the builds: each template's link to its default version, those versions,
  # and sdk-tags' version tagged rc; every other version went once no tag named it and no
  # sandbox used it, and nothing half-made is left.
  read -r _ TB1 TB2 TB3 <<< "$(echo "$SDK_OUT" | grep '^tags ')"
  kept() {
    want=$( (for l in "$S2"/templates/*; do [ -L "$l" ] && readlink "$l"; done; echo ".sdk-tags.v-$TB3") | sort)
    [ "$(ls -A "$S2/templates" | grep '^\.' | sort)" = "$want" ]
  }
  al_ok "the versions kept are those a tag names; the others went, nothing half-made is left" \
    al_wait_until 30 kept
  [ -n "$TB1" ] && al_fail "... so sdk-tags' first build went with its tags" test -e "$S2/templates/.sdk-tags.v-$TB1"
  al_ok "... and sdk-tags is a link to its default version, the second build" \
    test "$(readlink "$S2/templates/sdk-tags")" = ".sdk-tags.v-$TB2"
  al_ok "each pull of the builds is in the audit log, naming the API key that asked" \
    sh -c "test \"\$(cat $S2/audit/templates-*.jsonl | grep -c '\"requested_by\":\"api-key:')\" -ge 2"
  al_fail "the registry password is in no log or state file" \
    sh -c "grep -rl 'S3cret-pw-9f2a' $S2 $AL_TMP/airlockd.log 2>/dev/null | grep ."
  # The CLI: the same API on airlockd's local socket, from a Dockerfile or the SDK's JSON.
  tcli() { "$BIN/airlock" --state-dir "$S2" template "$@" 2>&1; }
  # Hostile archives, uploaded with a grant as the SDK does and applied by a build's COPY
  # step: each refused naming the entry, nothing written outside the template, the template's
  # previous version still in use.
  mkarchive() { # mkarchive KIND: $T/KIND.tar.gz
    python3 - "$T/$1.tar.gz" "$1" <<'PY'
import io, sys, tarfile
out, kind = sys.argv[1], sys.argv[2]
with tarfile.open(out, "w:gz") as t:
    def add(name, type=tarfile.REGTYPE, link=""):
        i = tarfile.TarInfo(name)
        i.type, i.linkname = type, link
        data = b"canary\n" if type == tarfile.REGTYPE else b""
        i.size = len(data)
        t.addfile(i, io.BytesIO(data) if data else None)
    if kind == "dotdot":
        add("d/../../../escaped-copy-dotdot")
    elif kind == "symlink":
        add("d/l", tarfile.SYMTYPE, "/tmp")
        add("d/l/escaped-copy-symlink")
    elif kind == "hardlink":
        add("d/h", tarfile.LNKTYPE, "../../../../etc/shadow")
    elif kind == "device":
        add("d/null", tarfile.CHRTYPE)
PY
  }
  hostile_copy() { # hostile_copy KIND: uploads the archive, builds sdk-copy with it (must fail)
    local h
    h=$(printf 'hostile-%s' "$1" | sha256sum | cut -d' ' -f1)
    [ "$1" = notatar ] && h=$H # the random bytes stored above
    if [ "$1" != notatar ]; then
      mkarchive "$1" || return 1
      local g
      g=$(api "$URL/templates/sdk-copy/files/$h" | python3 -c 'import json,sys; print(json.load(sys.stdin)["headers"]["X-Airlock-Upload-Token"])')
      [ "$(put "$T/$1.tar.gz" "$h" -H "X-Airlock-Upload-Token: $g")" = 200 ] || return 1
    fi
    printf '{"fromTemplate":"sdk-tpl","steps":[{"type":"COPY","args":["d","/srv/"],"filesHash":"%s"}]}' "$h" > "$T/hostile.json"
    if tcli build sdk-copy --json "$T/hostile.json"; then return 1; fi
    return 0
  }
  al_match "a COPY archive with a '..' entry is refused, naming it" \
    "sdk-copy failed at step 1: step 1 \(COPY d /srv/\): refused: archive entry 'd/\.\./\.\./\.\./escaped-copy-dotdot'.*'\.\.' component" \
    hostile_copy dotdot
  al_match "a COPY archive writing through its own link is refused" \
    "refused: archive entry 'd/l/escaped-copy-symlink': 'l' is a symbolic link: entries are never written through links" \
    hostile_copy symlink
  al_match "a COPY archive with a hard link out of what it copies is refused" \
    "refused: archive entry 'd/h': a hard link to '\.\./\.\./\.\./\.\./etc/shadow', which this COPY does not copy" \
    hostile_copy hardlink
  al_match "a COPY archive with a device node is refused" \
    "refused: archive entry 'd/null': a device node: device nodes cannot be copied" hostile_copy device
  al_match "an upload that is not a tar archive is refused" \
    "sdk-copy failed at step 1: step 1 \(COPY d /srv/\): refused: " hostile_copy notatar
  al_fail "no canary of a COPY escaped" sh -c "find $T /tmp $S2 -maxdepth 6 -name 'escaped-copy-*' 2>/dev/null | grep ."
  al_eq "the host's /etc/shadow has no new link" "$(stat -c %h /etc/shadow)" 1
  al_ok "... and sdk-copy is still the version the SDK built" \
    grep -qx 'copied by the sdk' "$S2/templates/sdk-copy/rootfs/srv/hello.txt"
  al_ok "... nothing half-made left" kept
  printf 'FROM %s\n# a comment\nENV A=1 B=two\nWORKDIR /opt/x\nUSER user\nEXPOSE 80\nCMD ["sleep", \\\n  "3600"]\n' \
    "$REG/base:1" > "$T/Dockerfile"
  cbuild() { echo 'S3cret-pw-9f2a' | tcli build cli-tpl --dockerfile "$T/Dockerfile" --username tester; }
  al_match "template build --dockerfile builds it" "^cli-tpl [0-9a-f-]{36} ready \(" cbuild
  al_ok "... showing the log with step n/N" grep -q "step 3/3 info: USER user" <<<"$AL_OUT"
  al_match "template ls lists it, ready" "cli-tpl +ready +[0-9a-f-]{36}" tcli ls
  al_ok "template inspect shows its builds and template.json" sh -c \
    "'$BIN/airlock' --state-dir '$S2' template inspect cli-tpl | python3 -c 'import json,sys; t=json.load(sys.stdin); j=t[\"templateJson\"]; assert j[\"env\"][\"A\"]==\"1\" and j[\"env\"][\"B\"]==\"two\" and j[\"workdir\"]==\"/opt/x\" and j[\"start_cmd\"]==\"sleep 3600\", j; assert t[\"builds\"][0][\"status\"]==\"ready\"'"
  printf '{"fromTemplate":"cli-tpl","steps":[{"type":"ENV","args":["C","3"]}]}' > "$T/def.json"
  al_match "template build --json takes the SDK's definition" "cli-json [0-9a-f-]{36} ready" \
    tcli build cli-json --json "$T/def.json"
  printf 'FROM %s\nUSER root\nRUN echo made by run > /made-by-run && echo run-output\n' "$REG/base:1" > "$T/Dockerfile.run"
  crun() { echo 'S3cret-pw-9f2a' | tcli build cli-run --dockerfile "$T/Dockerfile.run" --username tester; }
  al_match "a Dockerfile RUN step runs, its output in the log" "step 2/2 info: run-output" crun
  al_ok "... and its file is in the template" grep -qx 'made by run' "$S2/templates/cli-run/rootfs/made-by-run"
  # The progress of a pull: base:2's first layer is base:1's, in the blob cache already; its
  # second is not. The CLI says the bytes pulled of the image's (once the pull is done, so
  # whatever the pace of its polls); the status answer has them as the pull's audit record.
  printf 'FROM %s\nUSER root\nRUN echo after the pull\n' "$REG/base:2" > "$T/Dockerfile.pull"
  cpull() { echo 'S3cret-pw-9f2a' | tcli build cli-pull --dockerfile "$T/Dockerfile.pull" --username tester; }
  al_match "template build shows the base image's pull: bytes pulled of the image's, elapsed" \
    '^\[ *[0-9]+\.[0-9]s\] base: pulled ([0-9]+\.[0-9]) of \1 MiB \(2 layers\), [0-9]+\.[0-9] MiB downloaded$' cpull
  PULL_OUT=$AL_OUT
  al_eq "... once, not before the layers' sizes are known" "$(grep -c '\] base: pulled' <<<"$PULL_OUT")" 1
  al_ok "... then the steps, n/N" grep -q "step 2/2 info: after the pull" <<<"$PULL_OUT"
  PBID=$(awk '$1 == "cli-pull" && $3 == "ready" {print $2}' <<<"$PULL_OUT")
  api "$URL/templates/cli-pull/builds/$PBID/status" > "$T/pull.status"
  al_ok "the build's status has the pull's progress: all layer bytes in the cache, the second layer's downloaded" \
    python3 - "$T/pull.status" "$S2/audit" <<'PY'
import glob, json, sys
st = json.load(open(sys.argv[1]))
p = st["progress"]
assert p["step"] == "finalize" and p["steps"] == 2, p
img = p["image"]
recs = [json.loads(l) for f in sorted(glob.glob(sys.argv[2] + "/templates-*.jsonl")) for l in open(f)]
pull = [r for r in recs if r.get("event") == "template_pull" and r.get("reference", "").endswith("/test/base:2")][-1]
assert img["layers"] == pull["layers"] == 2, (img, pull)
assert img["bytes"] == img["bytesCached"] == pull["bytes"], (img, pull)
assert img["bytesPulled"] == pull["bytes_pulled"] and 0 < img["bytesPulled"] < img["bytes"], (img, pull)
PY
  # On a terminal (script(1) gives it one) the progress line is redrawn below the log and
  # erased before each line that stays: what the terminal shows is the same lines.
  printf '{"fromImage":"%s","fromImageRegistry":{"type":"registry","username":"tester","password":"S3cret-pw-9f2a"},"steps":[{"type":"RUN","args":["echo on a terminal","root"]}]}' \
    "$REG/base:2" > "$T/tty.json"
  script -qec "'$BIN/airlock' --state-dir '$S2' template build cli-tty --json '$T/tty.json'" /dev/null \
    > "$T/tty.out" 2>&1 </dev/null
  al_ok "template build on a terminal: every line shown is a log line, the pull's or the result, none a leftover progress line" \
    python3 - "$T/tty.out" <<'PY'
import re, sys
raw = open(sys.argv[1], "rb").read().decode()
shown = [l.split("\r")[-1].replace("\x1b[K", "") for l in raw.replace("\r\n", "\n").split("\n")]
shown = [l for l in shown if l]
log = re.compile(r"^\[ *\d+\.\ds\] ((step \d+/1|base|finalize) )?(debug|info|warn|error): ")
pull = re.compile(r"^\[ *\d+\.\ds\] base: pulled ")
other = [l for l in shown if not (log.match(l) or pull.match(l) or l.startswith("build ")
                                  or re.match(r"^cli-tty [0-9a-f-]{36} ready ", l))]
assert not other, (other, raw)
assert any(pull.match(l) for l in shown) and "step 1/1 info: on a terminal" in raw, raw
assert re.search(r"^cli-tty [0-9a-f-]{36} ready ", "\n".join(shown), re.M), raw
PY
  printf 'FROM %s\nRUN echo before; exit 4\n' "$REG/base:1" > "$T/Dockerfile.fail"
  cfail() { if echo 'S3cret-pw-9f2a' | tcli build cli-fail --dockerfile "$T/Dockerfile.fail" --username tester; then return 1; fi; }
  al_match "a failing RUN step fails the build, naming the step and its exit code" \
    "cli-fail failed at step 1: step 1 \(RUN echo before; exit 4\): the command failed with exit code 4" cfail
  al_fail "... and leaves no build sandbox, snapshot or version behind" sh -c \
    "ls -a $S2/templates | grep -e '\.build-' -e '\.step-'; ls $S2/templates | grep -x cli-fail"
  printf 'FROM %s\nCOPY a /b\n' "$REG/base:1" > "$T/Dockerfile.copy"
  ccopy() { if tcli build cli-copy --dockerfile "$T/Dockerfile.copy"; then return 1; fi; }
  al_match "COPY in a Dockerfile is refused before anything is sent" "line 2: COPY needs file uploads" ccopy
  al_match "template rm removes a template" "cli-json removed" tcli rm cli-json
  al_match "template rm of a template with COPY files" "sdk-copy removed" tcli rm sdk-copy
  al_fail "... removes its COPY archives" sh -c "ls $S2/cache/files | grep '^sdk-copy\.'"
  al_ok "a template requested anew under its name" api -f -X POST -H 'Content-Type: application/json' \
    -d '{"name":"sdk-copy"}' "$URL/v3/templates"
  al_match "... has none of the old one's files" '"present": ?false' api "$URL/templates/sdk-copy/files/$H"
  crm() { if tcli rm cli-json; then return 1; fi; }
  al_match "... and a second rm says it is not there" "404: template 'cli-json' not found" crm
  al_kill airlockd
else
  al_fail "tests/e2b/setup (npm ci of the SDK) failed: $(tail -3 "$T/npm.log")" true
fi

al_done
