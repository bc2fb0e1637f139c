# tests/lib/certs.sh: test certificates, made by openssl when the test runs (never a fixed key
# in the repository). P-256 keys, valid for two days.
#
#   al_cert_ca DIR CN              a self-signed CA: DIR/ca.pem, DIR/ca.key
#   al_cert_leaf DIR BASE NAME...  a certificate for the DNS names (CN the first) issued by
#                                  DIR's CA: DIR/BASE.pem, DIR/BASE.key (and BASE.csr, BASE.ext)
# Each returns non-zero when openssl fails, after showing what openssl said (on success it
# says nothing).
# shellcheck shell=bash

# al_cert__openssl DIR ARGS...: openssl ARGS in DIR, its output shown only when it fails.
al_cert__openssl() {
  local dir=$1 out
  shift
  if ! out=$(cd "$dir" && openssl "$@" 2>&1 </dev/null); then
    printf 'openssl %s (in %s) failed:\n%s\n' "$1" "$dir" "$out" >&2
    return 1
  fi
}

al_cert_ca() {
  al_cert__openssl "$1" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=$2" -keyout ca.key -out ca.pem
}

al_cert_leaf() {
  local dir=$1 base=$2 san
  shift 2
  san=$(printf 'DNS:%s,' "$@")
  al_cert__openssl "$dir" req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=$1" -keyout "$base.key" -out "$base.csr" &&
    printf 'subjectAltName=%s\n' "${san%,}" >"$dir/$base.ext" &&
    al_cert__openssl "$dir" x509 -req -in "$base.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
      -days 2 -extfile "$base.ext" -out "$base.pem"
}
