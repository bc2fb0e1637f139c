# tests/kvm/lib.sh: the nested-virtualisation harness, sourced by the tests in tests/kvm/.
#
# This machine has no usable /dev/kvm for ordinary guests, but QEMU's TCG emulates AMD SVM:
# a Debian cloud kernel inside a TCG guest ("L1") loads kvm-amd and offers /dev/kvm, and the
# airlock VMM runs there, booting its own guest ("L2"). Each test:
#   1. assembles an L1 initramfs: static busybox, irqbypass/kvm/kvm-amd (+tun) modules from
#      Debian's linux-image-*-cloud-amd64 (dpkg-deb -x into the cache), the VMM binary with
#      its shared libraries, the guest kernel, the guest payload, and a scenario script;
#   2. boots qemu-system-x86_64 -cpu max (TCG) with no network device at all, no reboot,
#      a hard timeout, the serial console written to a file;
#   3. reads the verdict the scenario printed on the serial console:
#        AIRLOCK-KVM-VERDICT: PASS            or   AIRLOCK-KVM-VERDICT: FAIL <reason>
#
# Cache: $AIRLOCK_KVM_CACHE (default /var/cache/airlock/kvm): downloaded .debs, the extracted
# L1 kernel, the built guest kernel. QEMU runs only as a child of this script, by PID.
set -euo pipefail

kvm_top=${AIRLOCK_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
kvm_bin=${AIRLOCK_BIN:-$kvm_top/build-asan/bin}
kvm_cache=${AIRLOCK_KVM_CACHE:-/var/cache/airlock/kvm}
kvm_timeout=${AIRLOCK_KVM_TIMEOUT:-240}
kvm_qemu_pid=
kvm_tmp=

kvm_log() { printf 'kvm-harness: %s\n' "$*" >&2; }
kvm_fail() { printf 'kvm-harness: FAIL: %s\n' "$*" >&2; exit 1; }

kvm_cleanup() {
  if [ -n "$kvm_qemu_pid" ] && kill -0 "$kvm_qemu_pid" 2>/dev/null; then
    kill -KILL "$kvm_qemu_pid" 2>/dev/null || true
    wait "$kvm_qemu_pid" 2>/dev/null || true
  fi
  if [ -n "$kvm_tmp" ] && [ -z "${AIRLOCK_KVM_KEEP:-}" ]; then
    rm -rf "$kvm_tmp"
  fi
}

kvm_require() {
  local missing=()
  for t in qemu-system-x86_64 busybox dpkg-deb apt-get cpio gzip cc; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  [ "${#missing[@]}" = 0 ] || kvm_fail "missing tools: ${missing[*]} (run deploy/setup)"
  # (no "| grep -q": with pipefail, grep's early exit can fail the pipeline by SIGPIPE)
  local applets
  applets=$(busybox --list 2>/dev/null || true)
  grep -qx insmod <<<"$applets" || kvm_fail "busybox has no insmod (install busybox-static)"
  ldd "$(command -v busybox)" >/dev/null 2>&1 && kvm_fail "busybox is dynamically linked; install busybox-static"
  return 0
}

# Prints the directory holding the extracted L1 kernel (boot/vmlinuz-*, lib/modules/*).
kvm_l1_kernel() {
  local pkg deb dir
  pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[^ ]*-cloud-amd64\)$/\1/p' | awk 'NR==1')
  [ -n "$pkg" ] || kvm_fail "cannot resolve linux-image-cloud-amd64 (run apt-get update)"
  dir="$kvm_cache/l1/$pkg"
  if [ ! -f "$dir/.done" ]; then
    mkdir -p "$kvm_cache/debs"
    deb=$(ls "$kvm_cache"/debs/"$pkg"_*.deb 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$deb" ]; then
      kvm_log "downloading $pkg from Debian's archive"
      (cd "$kvm_cache/debs" && apt-get download -q "$pkg" >&2) || kvm_fail "apt-get download $pkg failed"
      deb=$(ls "$kvm_cache"/debs/"$pkg"_*.deb | sort -V | tail -1)
    fi
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    dpkg-deb -x "$deb" "$dir.tmp"
    touch "$dir.tmp/.done"
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

# kvm_copy_bin ROOT BIN [NAME]: copies BIN to ROOT/bin/NAME with the shared libraries it
# needs (at their original paths, so the dynamic loader finds them).
kvm_copy_bin() {
  local root=$1 bin=$2 name=${3:-$(basename "$2")} lib
  install -D -m 0755 "$bin" "$root/bin/$name"
  for lib in $(ldd "$bin" 2>/dev/null | grep -oE '/[^ ]+' || true); do
    [ -f "$lib" ] || continue
    [ -f "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
}

# kvm_cpio DIR OUT: a gzip'd newc cpio of DIR.
kvm_cpio() {
  (cd "$1" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$2"
}

# kvm_guest_kernel: path of the L2 guest bzImage (built and cached on first use).
kvm_guest_kernel() {
  if [ -n "${AIRLOCK_KVM_GUEST_KERNEL:-}" ]; then
    echo "$AIRLOCK_KVM_GUEST_KERNEL"   # a prebuilt bzImage (debugging)
  else
    "$kvm_top/vmm/kvm/guest-kernel/build"
  fi
}

# kvm_l1_root: creates $kvm_tmp/l1 with busybox, modules, /init; prints the root path.
# The scenario script is /scenario (copied by the caller); /init runs it and powers off.
kvm_l1_root() {
  local kdir=$1 root="$kvm_tmp/l1" kver m
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,lib/modules,airlock}
  cp "$(command -v busybox)" "$root/bin/busybox"
  kver=$(ls "$kdir/lib/modules")
  for m in virt/lib/irqbypass.ko arch/x86/kvm/kvm.ko arch/x86/kvm/kvm-amd.ko drivers/net/tun.ko; do
    cp "$kdir/lib/modules/$kver/kernel/$m" "$root/lib/modules/"
  done
  cat > "$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
for m in irqbypass kvm kvm-amd tun; do
  insmod /lib/modules/$m.ko || echo "AIRLOCK-KVM-VERDICT: FAIL insmod $m"
done
if [ ! -c /dev/kvm ]; then
  echo "AIRLOCK-KVM-VERDICT: FAIL no /dev/kvm in L1 (does -cpu max offer svm?)"
  poweroff -f
fi
[ -f /env ] && . /env
echo "l1: /dev/kvm ready, running scenario"
if sh /scenario; then
  echo "AIRLOCK-KVM-VERDICT: PASS"
else
  echo "AIRLOCK-KVM-VERDICT: FAIL scenario exited $?"
fi
poweroff -f
INIT
  chmod +x "$root/init"
  # Debug knobs reach the scenario: AIRLOCK_KVM_VERBOSE (stream the guest console),
  # AIRLOCK_KVM_QUIET (kernel "quiet" flag; set to empty for full kernel logs).
  # The guest console is streamed into L1's serial log by default: it is only shown when a
  # test fails (or with -v), and then it is what explains a guest that hung.
  printf 'export AIRLOCK_KVM_VERBOSE=1\n' > "$root/env"
  for v in AIRLOCK_KVM_VERBOSE AIRLOCK_KVM_QUIET AIRLOCK_KVM_FORCE_ASAN_VMM AIRLOCK_KVM_STRESS_N AIRLOCK_KVM_STRESS_VCPUS AIRLOCK_KVM_STRESS_WAIT AIRLOCK_KVM_STRESS_CMDLINE AIRLOCK_KVM_STRESS_SHOW AIRLOCK_KVM_STRESS_CHURN AIRLOCK_KVM_BENCH_RUNS AIRLOCK_KVM_BENCH_CREATES; do
    if [ -n "${!v+x}" ]; then printf 'export %s=%q\n' "$v" "${!v}" >> "$root/env"; fi
  done
  echo "$root"
}

# kvm_boot_l1 KERNEL_DIR INITRD SERIAL_LOG: boots L1 under TCG with a hard timeout; returns
# 0 when the scenario printed PASS, 1 otherwise (the serial log says why).
kvm_boot_l1() {
  local kdir=$1 initrd=$2 serial=$3 kernel start rc=0
  kernel=$(ls "$kdir"/boot/vmlinuz-* | awk 'NR==1')
  start=$(date +%s.%N)
  # No network device of any kind (-nodefaults, -nic none); no reboot; serial to a file.
  qemu-system-x86_64 -M pc -accel tcg -cpu max -m 1024 -smp 1 \
    -nodefaults -nic none -display none -monitor none -no-reboot \
    -serial "file:$serial" \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 reboot=t oops=panic" </dev/null &
  kvm_qemu_pid=$!
  local waited=0
  while kill -0 "$kvm_qemu_pid" 2>/dev/null; do
    if [ "$waited" -ge $((kvm_timeout * 10)) ]; then
      kvm_log "timeout after ${kvm_timeout}s: killing QEMU (pid $kvm_qemu_pid)"
      kill -KILL "$kvm_qemu_pid" 2>/dev/null || true
      break
    fi
    sleep 0.1; waited=$((waited + 1))
  done
  wait "$kvm_qemu_pid" 2>/dev/null || true
  kvm_qemu_pid=
  kvm_log "L1 ran $(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s wall"
  grep -q '^AIRLOCK-KVM-VERDICT: PASS' "$serial" || rc=1
  return "$rc"
}
