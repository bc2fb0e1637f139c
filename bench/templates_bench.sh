#!/usr/bin/env bash
# bench/templates_bench.sh: pulling an image from a registry and unpacking it, against the
# references measured in the same run, one JSON line per figure:
#
#   pull_s            `airlock template pull REF` into an empty blob cache (download, TLS,
#                     sha256 of every blob, the cache's fsync and rename)
#   skopeo_s          `skopeo copy docker://REF dir:D` of the same image (the reference)
#   pull_ratio        pull_s / skopeo_s (median of each; goal <= 1.0)
#   unpack_mib_s      `airlock template pull REF --name N` with the blobs cached: the
#                     confined unpacker's throughput in MiB of layer data (the cached pull,
#                     the helper's start and the final syncfs included)
#   tar_mib_s         `tar -xzf` of the same layers into a directory (the reference)
#
# The registry is Debian's docker-registry in a network namespace, over TLS from a test CA;
# the image has three layers of incompressible data (SIZE_MIB in all, default 300), made by
# umoci and pushed with skopeo. Series are interleaved (A B A B ...) so the machine's drift
# hits both sides alike.
#
#   AIRLOCK_SOURCE_DIR=$PWD AIRLOCK_BIN=$PWD/build/bin bench/templates_bench.sh [ROUNDS] [SIZE_MIB]
set -uo pipefail
: "${AIRLOCK_SOURCE_DIR:?}" "${AIRLOCK_BIN:?}"
ROUNDS=${1:-3}
SIZE=${2:-300}
. "$AIRLOCK_SOURCE_DIR/tests/lib/netns.sh"
al_world_init templates_bench
T=$AL_TMP
BIN=$AIRLOCK_BIN
al_ns_add cli
al_ns_add reg
al_link cli 203.0.113.1/24 reg 203.0.113.10/24
printf '203.0.113.10 registry.test\n' > "$T/hosts"
inworld() { al_nsx cli unshare -m --propagation private sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts" "$@"; }

mkdir -p "$T/certs" "$T/trust" && cd "$T/certs" || exit 1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=registry.test" \
  -keyout reg.key -out reg.csr 2>/dev/null
printf 'subjectAltName=DNS:registry.test\n' > ext.cnf
openssl x509 -req -in reg.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf \
  -out reg.crt 2>/dev/null
cp ca.crt "$T/trust/ca.crt"
cd - >/dev/null || exit 1
cat > "$T/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $T/regdata}}
http:
  addr: 203.0.113.10:5000
  tls: {certificate: $T/certs/reg.crt, key: $T/certs/reg.key}
EOF
al_bg registry ip netns exec "$(al_ns reg)" docker-registry serve "$T/registry.yml"
for _ in $(seq 100); do al_nsx cli bash -c 'exec 3<>/dev/tcp/203.0.113.10/5000' 2>/dev/null && break; sleep 0.1; done

L=$T/oci
umoci init --layout "$L" && umoci new --image "$L:big" || exit 1
per=$((SIZE / 3))
for i in 1 2 3; do
  umoci unpack --image "$L:big" "$T/b$i" >/dev/null || exit 1
  head -c "$((per << 20))" /dev/urandom > "$T/b$i/rootfs/data$i"
  umoci repack --image "$L:big" "$T/b$i" || exit 1
  rm -rf "$T/b$i"
done
inworld skopeo copy -q --dest-cert-dir "$T/trust" "oci:$L:big" docker://registry.test:5000/bench/big:1 ||
  exit 1
REF=registry.test:5000/bench/big:1
S=$T/state
mkdir -p "$S"
printf 'state_dir: %s\ntemplates:\n  registries: [registry.test:5000]\n  registry_ca: %s\n' \
  "$S" "$T/certs/ca.crt" > "$T/airlockd.yaml"
pull() { inworld "$BIN/airlock" --state-dir "$S" template pull --config "$T/airlockd.yaml" --quiet "$@" >/dev/null; }
now() { date +%s.%N; }

pulls=() skopeos=() unpacks=() tars=()
for r in $(seq "$ROUNDS"); do
  rm -rf "$S/cache" "$T/skopeo"
  t0=$(now); pull "$REF" || exit 1; t1=$(now)
  pulls+=("$(echo "$t1 - $t0" | bc)")
  t0=$(now)
  inworld skopeo copy -q --src-cert-dir "$T/trust" "docker://$REF" "dir:$T/skopeo" || exit 1
  t1=$(now)
  skopeos+=("$(echo "$t1 - $t0" | bc)")
  rm -rf "$S/templates/big$r"
  sync
  t0=$(now); pull "$REF" --name "big$r" || exit 1; t1=$(now)
  unpacks+=("$(echo "$t1 - $t0" | bc)")
  rm -rf "$S/templates/big$r" "$T/tarx" && mkdir -p "$T/tarx"
  t0=$(now)
  for b in $(ls "$S/cache/oci/blobs/sha256" | grep -v '\.lock$'); do # the layers (and the config, which is no gzip)
    tar -xzf "$S/cache/oci/blobs/sha256/$b" -C "$T/tarx" 2>/dev/null
  done
  sync -f "$T/tarx"
  t1=$(now)
  tars+=("$(echo "$t1 - $t0" | bc)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(median "${pulls[@]}") ms=$(median "${skopeos[@]}") mu=$(median "${unpacks[@]}") mt=$(median "${tars[@]}")
mib=$(du -sm --apparent-size "$S/cache/oci/blobs/sha256" | cut -f1)
j() { printf '{"bench":"templates","metric":"%s","value":%s,"unit":"%s","samples":%d,"image_mib":%d}\n' "$1" "$2" "$3" "$ROUNDS" "$mib"; }
div() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN {printf f, a / b}'; }
j pull_s "$(div "$mp" 1 %.3f)" s
j skopeo_s "$(div "$ms" 1 %.3f)" s
j pull_ratio "$(div "$mp" "$ms" %.3f)" ratio
j unpack_mib_s "$(div "$mib" "$mu" %.1f)" MiB/s
j tar_mib_s "$(div "$mib" "$mt" %.1f)" MiB/s
al_done >/dev/null
