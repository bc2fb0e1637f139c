#!/usr/bin/env bash
# tests/kvm/nested.sh SCENARIO: runs tests/kvm/scenarios/SCENARIO.sh inside an L1 TCG
# guest that has /dev/kvm (see lib.sh), with the airlock KVM VMM, the airlock guest kernel
# and the test payload (tests/kvm/payload/) available under /airlock. PASS/FAIL comes back
# on L1's serial console; the whole serial log is printed on failure (or with -v).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

scenario=${1:?usage: nested.sh SCENARIO [-v]}
verbose=${2:-}
[ -f "$here/scenarios/$scenario.sh" ] || kvm_fail "no scenario $here/scenarios/$scenario.sh"
# What a scenario asks for among its lines (see kvm_boot_l1), unless the environment says:
#   # l1-cpus: N           L1 vCPUs (AIRLOCK_KVM_L1_CPUS)
#   # l1-cpu-seconds: N    the bound on QEMU's CPU time (AIRLOCK_KVM_TIMEOUT)
#   # l1-wall-seconds: N   the bound on the wall clock (AIRLOCK_KVM_WALL_TIMEOUT)
kvm_scenario_opt() { sed -n "s/^# $1: \([0-9][0-9]*\).*/\1/p" "$here/scenarios/$scenario.sh" | head -n 1; }
[ -n "${AIRLOCK_KVM_L1_CPUS:-}" ] || kvm_l1_cpus=$(kvm_scenario_opt l1-cpus)
[ -n "${AIRLOCK_KVM_TIMEOUT:-}" ] || kvm_timeout=$(kvm_scenario_opt l1-cpu-seconds)
[ -n "${AIRLOCK_KVM_WALL_TIMEOUT:-}" ] || kvm_wall_timeout=$(kvm_scenario_opt l1-wall-seconds)
kvm_l1_cpus=${kvm_l1_cpus:-1} kvm_timeout=${kvm_timeout:-240} kvm_wall_timeout=${kvm_wall_timeout:-1800}
kvm_tmp=$(mktemp -d "/tmp/al-kvm-$scenario-$$.XXXXXX")
trap kvm_cleanup EXIT

kvm_require
vmm="$kvm_bin/airlock-vmm-kvm"
[ -x "$vmm" ] || kvm_fail "$vmm not built"
kdir=$(kvm_l1_kernel)
guest_kernel=$(kvm_guest_kernel) || kvm_fail "guest kernel build failed"

# L2 payload: a static init in an initramfs.
groot="$kvm_tmp/guest"
mkdir -p "$groot/dev" "$groot/proc"
cc -static -O2 -Wall -Wextra -Werror -Wno-format-truncation -o "$groot/init" "$here/payload/guest_init.c"
cc -static -O2 -Wall -Wextra -Werror -o "$kvm_tmp/l1_tool" "$here/payload/l1_tool.c"
mknod -m 600 "$groot/dev/console" c 5 1
kvm_cpio "$groot" "$kvm_tmp/guest.cpio.gz"

# L1: busybox, modules, the VMM, the guest kernel and payload, the scenario.
root=$(kvm_l1_root "$kdir")
kvm_copy_bin "$root" "$vmm"
cp "$kvm_tmp/l1_tool" "$root/bin/l1_tool"
# The Release build too (tests/run builds it first): the confinement scenario runs it, since
# sanitizer builds only log seccomp violations instead of dying of them.
release=${AIRLOCK_KVM_RELEASE_BIN:-$kvm_top/build/bin/airlock-vmm-kvm}
if [ -x "$release" ]; then
  kvm_copy_bin "$root" "$release" airlock-vmm-kvm-release
fi
cp "$guest_kernel" "$root/airlock/bzImage"
cp "$kvm_tmp/guest.cpio.gz" "$root/airlock/guest.cpio.gz"
cp "$here/scenarios/$scenario.sh" "$root/scenario"
# The rootfs scenario boots from a disk image built like a template's: a tiny template
# (static busybox), the test payload standing in for the agent, airlock-kvm-init as PID 1.
if [ "$scenario" = rootfs ]; then
  init_bin="$kvm_bin/airlock-kvm-init"
  [ -x "$init_bin" ] || kvm_fail "$init_bin not built"
  tpl="$kvm_tmp/template"
  mkdir -p "$tpl/bin" "$tpl/etc" "$kvm_tmp/agent/bin"
  cp "$(command -v busybox)" "$tpl/bin/busybox"
  ln -s busybox "$tpl/bin/sh"
  echo "root:x:0:0:root:/root:/bin/sh" > "$tpl/etc/passwd"
  cp "$groot/init" "$kvm_tmp/agent/bin/airlock-agent"
  "$kvm_top/vmm/kvm/mkrootfs" --rootfs "$tpl" --agent-dir "$kvm_tmp/agent" --init "$init_bin" \
    --out "$root/airlock/rootfs.img" --slack 16
fi
# The agent scenario: the real airlock-agent (static, from the build's agent-root) in a
# template image with busybox, PID 1 airlock-kvm-init.
if [ "$scenario" = agent ]; then
  init_bin="$kvm_bin/airlock-kvm-init"
  agent_root="$kvm_bin/../agent-root/.airlock"
  [ -x "$init_bin" ] || kvm_fail "$init_bin not built"
  [ -x "$agent_root/bin/airlock-agent" ] || kvm_fail "$agent_root/bin/airlock-agent not built"
  tpl="$kvm_tmp/template"
  mkdir -p "$tpl/bin" "$tpl/etc" "$tpl/root" "$tpl/home/user"
  cp "$(command -v busybox)" "$tpl/bin/busybox"
  for a in sh echo cat ls id; do ln -s busybox "$tpl/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' > "$tpl/etc/passwd"
  printf 'root:x:0:\nuser:x:1000:\n' > "$tpl/etc/group"
  chown 1000:1000 "$tpl/home/user"
  "$kvm_top/vmm/kvm/mkrootfs" --rootfs "$tpl" --agent-dir "$agent_root" --init "$init_bin" \
    --out "$root/airlock/rootfs.img" --slack 32
fi
# The vswitch scenario: the switch's loader and stand-in proxy (l1-vswitch), the L1 kernel's
# netfilter and traffic-control modules (busybox depmod indexes them at boot), and the same
# template image as the rootfs scenario.
if [ "$scenario" = vswitch ]; then
  [ -x "$kvm_bin/l1-vswitch" ] || kvm_fail "$kvm_bin/l1-vswitch not built"
  kvm_copy_bin "$root" "$kvm_bin/l1-vswitch"
  kver=$(ls "$kdir/lib/modules")
  for d in net/netfilter net/sched lib; do
    mkdir -p "$root/lib/modules/$kver/kernel/$d"
    cp -a "$kdir/lib/modules/$kver/kernel/$d/." "$root/lib/modules/$kver/kernel/$d/"
  done
  init_bin="$kvm_bin/airlock-kvm-init"
  tpl="$kvm_tmp/template"
  mkdir -p "$tpl/bin" "$tpl/etc" "$kvm_tmp/agent/bin"
  cp "$(command -v busybox)" "$tpl/bin/busybox"
  echo "root:x:0:0:root:/root:/bin/sh" > "$tpl/etc/passwd"
  cp "$groot/init" "$kvm_tmp/agent/bin/airlock-agent"
  "$kvm_top/vmm/kvm/mkrootfs" --rootfs "$tpl" --agent-dir "$kvm_tmp/agent" --init "$init_bin" \
    --out "$root/airlock/rootfs.img" --slack 16
fi
# The backend scenario: airlock-vmm --backend kvm as the control plane drives it (spec on
# stdin, ready fd, the control API, --cleanup), with the image builder and mke2fs (it makes
# the template's root image), the real agent's tree, a busybox template, and the vswitch.
# The airlockd scenario: the same, driven by airlockd (and the airlock CLI) instead.
# With airlock-egress (the guest's HTTP goes through it to a fake upstream in a namespace of
# L1), iproute2 for that namespace (busybox's ip has no netns) and the upstream trust roots
# airlock-egress loads at start.
if [ "$scenario" = airlockd ]; then
  for b in airlockd airlock airlock-egress; do
    [ -x "$kvm_bin/$b" ] || kvm_fail "$kvm_bin/$b not built"
    kvm_copy_bin "$root" "$kvm_bin/$b"
  done
  kvm_copy_bin "$root" "$(command -v ip)" ip2
  [ -f /etc/ssl/certs/ca-certificates.crt ] || kvm_fail "/etc/ssl/certs/ca-certificates.crt missing (install ca-certificates)"
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  kver=$(ls "$kdir/lib/modules")
  install -D -m 0644 "$kdir/lib/modules/$kver/kernel/drivers/net/veth.ko" \
    "$root/lib/modules/$kver/kernel/drivers/net/veth.ko"
fi
if [ "$scenario" = backend ] || [ "$scenario" = benchvmm ] || [ "$scenario" = airlockd ]; then
  if [ -x "$kvm_top/build/bin/airlock-vmm" ]; then
    kvm_copy_bin "$root" "$kvm_top/build/bin/airlock-vmm" airlock-vmm-release
  fi
  for b in airlock-vmm airlock-kvm-init l1-vswitch; do
    [ -x "$kvm_bin/$b" ] || kvm_fail "$kvm_bin/$b not built"
    kvm_copy_bin "$root" "$kvm_bin/$b"
  done
  install -m 0755 "$kvm_top/vmm/kvm/mkrootfs" "$root/bin/airlock-kvm-mkrootfs"
  kvm_copy_bin "$root" "$(command -v mke2fs)" e2fs-mke2fs # busybox installs its own mke2fs
  mkdir -p "$root/agent-root"
  cp -a "$kvm_bin/../agent-root/.airlock" "$root/agent-root/"
  kver=$(ls "$kdir/lib/modules")
  for d in net/netfilter net/sched lib; do
    mkdir -p "$root/lib/modules/$kver/kernel/$d"
    cp -a "$kdir/lib/modules/$kver/kernel/$d/." "$root/lib/modules/$kver/kernel/$d/"
  done
  tpl="$root/airlock/template"
  mkdir -p "$tpl/rootfs/bin" "$tpl/rootfs/etc" "$tpl/rootfs/root" "$tpl/rootfs/home/user"
  cp "$(command -v busybox)" "$tpl/rootfs/bin/busybox"
  for a in sh echo cat ls id date od head nc hostname sleep; do ln -s busybox "$tpl/rootfs/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n' > "$tpl/rootfs/etc/passwd"
  printf 'root:x:0:\nuser:x:1000:\n' > "$tpl/rootfs/etc/group"
  chown 1000:1000 "$tpl/rootfs/home/user"
  printf '{"name":"kvmtest","user":"user","workdir":"/home/user","env":{"PATH":"/bin"}}\n' > "$tpl/template.json"
fi
# The kernel comparison (docs/kvm.md) also boots Debian's cloud kernel as the guest.
if [ "$scenario" = kernelcmp ]; then
  cp "$(ls "$kdir"/boot/vmlinuz-* | awk 'NR==1')" "$root/airlock/debian-vmlinuz"
fi
kvm_cpio "$root" "$kvm_tmp/l1.cpio.gz"

serial="$kvm_tmp/serial.log"
if kvm_boot_l1 "$kdir" "$kvm_tmp/l1.cpio.gz" "$serial"; then
  [ "$verbose" = -v ] && cat "$serial"
  grep -E '^(AIRLOCK-|bench:|bench-json:)' "$serial" || true
  echo "kvm nested $scenario: PASS"
else
  cat "$serial"
  kvm_fail "kvm nested $scenario: $(grep '^AIRLOCK-KVM-VERDICT' "$serial" || echo 'no verdict (timeout or crash)')"
fi
