# tests/kvm/lib.sh: the nested-virtualisation harness, sourced by the tests in tests/kvm/.
#
# This machine has no usable /dev/kvm for ordinary guests, but QEMU's TCG emulates AMD SVM:
# a Debian cloud kernel inside a TCG guest ("L1") loads kvm-amd and offers /dev/kvm, and the
# airlock VMM runs there, booting its own guest ("L2"). Each test:
#   1. assembles an L1 initramfs: static busybox, irqbypass/kvm/kvm-amd (+tun) modules from
#      Debian's linux-image-*-cloud-amd64 (dpkg-deb -x into the cache), the VMM binary with
#      its shared libraries, the guest kernel, the guest payload, and a scenario script;
#   2. boots qemu-system-x86_64 -cpu max (TCG) with no network device at all, no reboot,
#      a bound on its CPU time (see kvm_boot_l1), the serial console written to a file;
#   3. reads the verdict the scenario printed on the serial console:
#        AIRLOCK-KVM-VERDICT: PASS            or   AIRLOCK-KVM-VERDICT: FAIL <reason>
#
# Cache: $AIRLOCK_KVM_CACHE (default /var/cache/airlock/kvm): downloaded .debs, the extracted
# L1 kernel, the built guest kernel. QEMU runs only as a child of this script, by PID.
set -euo pipefail

kvm_top=${AIRLOCK_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
kvm_bin=${AIRLOCK_BIN:-$kvm_top/build-asan/bin}
kvm_cache=${AIRLOCK_KVM_CACHE:-/var/cache/airlock/kvm}
kvm_timeout=${AIRLOCK_KVM_TIMEOUT:-240}            # seconds of QEMU CPU (see kvm_boot_l1)
kvm_wall_timeout=${AIRLOCK_KVM_WALL_TIMEOUT:-1800} # seconds of wall clock, for the whole run
kvm_silent_timeout=${AIRLOCK_KVM_SILENT_TIMEOUT:-300} # seconds of wall clock without console output
kvm_frozen_timeout=${AIRLOCK_KVM_FROZEN_TIMEOUT:-180} # seconds of wall clock without any QEMU CPU
kvm_kick_after=${AIRLOCK_KVM_KICK_AFTER:-20}       # seconds without QEMU CPU before a kick
kvm_l1_cpus=${AIRLOCK_KVM_L1_CPUS:-1}             # L1 vCPUs: a scenario may ask for more (see kvm_boot_l1)
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
# Scenarios source /scenario-lib.sh (tests/kvm/payload/scenario_lib.sh) for shared helpers.
kvm_l1_root() {
  local kdir=$1 root="$kvm_tmp/l1" kver m
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,run,lib/modules,airlock}
  cp "$(command -v busybox)" "$root/bin/busybox"
  kver=$(ls "$kdir/lib/modules")
  for m in virt/lib/irqbypass.ko arch/x86/kvm/kvm.ko arch/x86/kvm/kvm-amd.ko drivers/net/tun.ko; do
    cp "$kdir/lib/modules/$kver/kernel/$m" "$root/lib/modules/"
  done
  install -m 0644 "$kvm_top/tests/kvm/payload/scenario_lib.sh" "$root/scenario-lib.sh"
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

# kvm_cpu_ticks PID: the CPU time (user + system, in clock ticks, all threads) PID has used.
# kvm_hmp SOCKET CMD...: runs each HMP command on QEMU's monitor socket, prints the answers.
kvm_hmp() {
  local sock=$1; shift
  python3 - "$sock" "$@" <<'PY' 2>&1 || true
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
def until_prompt():
    buf = b""
    while not buf.endswith(b"(qemu) "):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")
until_prompt()
for cmd in sys.argv[2:]:
    s.sendall(cmd.encode() + b"\n")
    out = until_prompt().replace("\r", "")
    print("(qemu) " + out.rsplit("(qemu) ", 1)[0].split("\n", 1)[-1], end="")
PY
}

# kvm_l1_report [brief]: what a frozen or spinning L1 was doing, for the test's log: every
# vCPU's registers and the instructions at RIP, the local APIC (a pending interrupt that is
# never delivered shows in IRR), and the state of every QEMU thread.
kvm_l1_report() {
  local sock="$kvm_tmp/hmp.sock" regs t
  [ -S "$sock" ] || return 0
  regs=$(kvm_hmp "$sock" "info registers -a" "info lapic" "info pic" "x/6i \$pc")
  if [ "${1:-}" = brief ]; then
    grep -E '^(RIP|RFL)=|^(CPU#|IRR|ISR|APR|LVTT|Timer)' <<<"$regs" | sed 's/^/kvm-harness: L1 state: /' >&2
  else
    printf '%s\n' "$regs" | sed 's/^/kvm-harness: L1 state: /' >&2
  fi
  for t in /proc/"$kvm_qemu_pid"/task/*; do
    kvm_log "L1 state: QEMU thread $(cat "$t/comm" 2>/dev/null) state $(awk '{print $3}' "$t/stat" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null)"
  done
}

# kvm_l1_tasks: what every L1 task was waiting for, in the serial log: the kernel's SysRq
# task dump (SysRq-T through the L1 keyboard; printk writes the console by polling, so it
# comes out even when the console's transmit interrupt is lost), and the UART's interrupt
# enable and line status registers (IER bit 1 set with LSR's THR-empty bit set is a
# transmitter that waits for an interrupt). Waits, bounded, until the dump stops growing.
kvm_l1_tasks() {
  local sock="$kvm_tmp/hmp.sock" serial=$1 size=-1 now still=0 n=0
  [ -S "$sock" ] || return 0
  kvm_hmp "$sock" "i/b 0x3f9" "i/b 0x3fc" "i/b 0x3fd" | sed 's/^/kvm-harness: L1 UART (IER, MCR, LSR): /' >&2
  # SysRq-9 first: the dump is at KERN_INFO, which L1's "quiet" keeps off the console.
  kvm_hmp "$sock" "sendkey alt-sysrq-9" "sendkey alt-sysrq-t" >/dev/null
  while [ "$n" -lt 40 ] && [ "$still" -lt 4 ]; do # up to 20 s, until it holds still for 2 s
    sleep 0.5
    now=$(stat -c %s "$serial" 2>/dev/null || echo 0)
    if [ "$now" = "$size" ]; then still=$((still + 1)); else still=0; fi
    size=$now
    n=$((n + 1))
  done
}

kvm_cpu_ticks() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }               # the fields after "(comm) ", from the state on
  set -- $stat
  echo $(( ${12} + ${13} ))       # utime, stime (fields 14 and 15 of the whole line)
}

# kvm_boot_l1 KERNEL_DIR INITRD SERIAL_LOG: boots L1 under TCG; returns 0 when the scenario
# printed PASS, 1 otherwise (the serial log says why).
# The bound is on the guest's work, not on the wall clock: the machine is shared, and a TCG
# guest given a seventh of a core takes seven times as long for the same run. QEMU is killed
# when it has used $kvm_timeout seconds of CPU without a verdict (a guest that loops, or one
# that the scenario's own bounds, which run on the guest's clock, did not end). A guest that
# hangs idle uses almost no CPU: it is ended once its console has printed nothing for
# $kvm_silent_timeout seconds (every wait of a scenario is bounded below that, or prints a
# line each minute; see scenario_lib.sh), and a run that keeps printing without a verdict
# after $kvm_wall_timeout seconds (wall clock, far beyond any loaded run). Both first dump
# what L1's tasks were waiting for (kvm_l1_tasks).
# A frozen guest (TCG's emulation of nested SVM can stop L1 for good: no timer interrupt is
# delivered any more, so QEMU uses no CPU at all) is ended after $kvm_frozen_timeout seconds
# in which QEMU's CPU time did not move: a running Linux guest takes its timer interrupts, so
# its CPU time moves within seconds even when it has nothing to do, however loaded the host.
# L1 has $kvm_l1_cpus vCPUs. A scenario that boots an L2 guest with two vCPUs gives L1 two
# (`# l1-cpus: 2` in the scenario, read by nested.sh): on one L1 CPU, each time one L2 vCPU
# spins waiting for the other (AP bring-up, IPIs with a wait, stop_machine) only L1's
# scheduler tick can let the other run, and that tick must interrupt TCG's emulation of L2:
# the path that loses timer interrupts (see docs/kvm.md). A two-vCPU boot then took 25 to
# 193 s of L1 time under load, and once in CI more than 220 s of QEMU CPU; with a CPU each the
# two L2 vCPUs run side by side and the waits end without L1 preempting anything.
kvm_boot_l1() {
  local kdir=$1 initrd=$2 serial=$3 kernel start rc=0 hz ticks=0 limit wall_end last=-1 moved
  local kicked_at=-1 kicks=0 size=0 grown longest=0 now t silent_kick=0 silent_kicks=0
  kernel=$(ls "$kdir"/boot/vmlinuz-* | awk 'NR==1')
  hz=$(getconf CLK_TCK)
  limit=$((kvm_timeout * hz))
  start=$(date +%s.%N)
  wall_end=$(($(date +%s) + kvm_wall_timeout))
  # No network device of any kind (-nodefaults, -nic none); no reboot; serial to a file.
  # no_timer_check: the kernel's boot-time check of the IO-APIC timer counts ticks over a
  # busy wait, which a loaded host that deschedules QEMU fails ("IO-APIC + timer doesn't
  # work!": L1 panicked at boot at a load of 19 on 2 cores). sysrq_always_enabled: the task
  # dump of kvm_l1_tasks.
  qemu-system-x86_64 -M pc -accel tcg -cpu max -m 1024 -smp "$kvm_l1_cpus" \
    -nodefaults -nic none -display none -no-reboot \
    -monitor "unix:$kvm_tmp/hmp.sock,server=on,wait=off" \
    -serial "file:$serial" \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 reboot=t oops=panic no_timer_check sysrq_always_enabled" </dev/null &
  kvm_qemu_pid=$!
  moved=$(date +%s)
  grown=$moved
  while kill -0 "$kvm_qemu_pid" 2>/dev/null; do
    t=$(kvm_cpu_ticks "$kvm_qemu_pid") || break
    ticks=$t
    # Silence counts from L1's first line: its boot prints nothing ("quiet"), and under load
    # it took more than 120 s (the CPU bound and the frozen detector watch the boot).
    now=$(stat -c %s "$serial" 2>/dev/null || echo 0)
    if [ "$now" -ne "$size" ]; then
      size=$now
      grown=$(date +%s)
      if [ "$silent_kicks" -gt 0 ]; then
        kvm_log "L1's console moved again after $silent_kicks silence kick(s)"
        silent_kicks=0
      fi
    fi
    if [ "$size" -gt 0 ] && [ $(($(date +%s) - grown)) -gt "$longest" ]; then
      longest=$(($(date +%s) - grown))
    fi
    if [ "$ticks" -ne "$last" ]; then
      if [ "$kicked_at" -ge 0 ]; then
        kvm_log "the kick woke L1 (vCPU running again)"
        kicked_at=-1
      fi
      last=$ticks
      moved=$(date +%s)
    elif [ "$kicked_at" -lt 0 ] && [ $(($(date +%s) - moved)) -ge "$kvm_kick_after" ]; then
      kicked_at=$(date +%s)
      kicks=$((kicks + 1))
      kvm_log "QEMU used no CPU for ${kvm_kick_after}s: kicking L1's halted vCPU (monitor stop + cont)"
      kvm_l1_report brief
      kvm_hmp "$kvm_tmp/hmp.sock" stop cont >/dev/null
    elif [ $(($(date +%s) - moved)) -ge "$kvm_frozen_timeout" ]; then
      kvm_log "QEMU used no CPU for ${kvm_frozen_timeout}s: the L1 guest is frozen; killing it (pid $kvm_qemu_pid)"
      kvm_l1_report
      kill -KILL "$kvm_qemu_pid" 2>/dev/null || true
      break
    fi
    if [ "$size" -gt 0 ] && [ $(($(date +%s) - grown)) -ge "$kvm_kick_after" ] &&
      [ $(($(date +%s) - silent_kick)) -ge "$kvm_kick_after" ]; then
      # The same lost interrupt with QEMU's own threads still using a little CPU (2% in a
      # 3000 s hang): the CPU test above never fires. Seen in CI: L1 halted with IF set and
      # its timer's vector 236 in the local APIC's IRR, which stop + cont did not deliver
      # (15 kicks); the keyboard interrupt of the SysRq dump did, at once. So a console
      # silent for the kick's period gets a key press (shift: no character, no SysRq) after
      # stop + cont, again each period while it stays silent; on a guest that is only
      # waiting it costs L1 one keyboard interrupt.
      silent_kick=$(date +%s)
      silent_kicks=$((silent_kicks + 1))
      kicks=$((kicks + 1))
      kvm_hmp "$kvm_tmp/hmp.sock" stop cont "sendkey shift" >/dev/null
    fi
    if [ "$ticks" -ge "$limit" ]; then
      kvm_log "QEMU used ${kvm_timeout}s of CPU without a verdict: killing it (pid $kvm_qemu_pid)"
      kvm_l1_report
      kvm_l1_tasks "$serial"
      kill -KILL "$kvm_qemu_pid" 2>/dev/null || true
      break
    fi
    if [ "$longest" -ge "$kvm_silent_timeout" ]; then
      kvm_log "L1 printed nothing for ${kvm_silent_timeout}s (QEMU used $((ticks / hz))s of CPU): a wait that does not end; its last line: $(tr -cd '\11\12\40-\176' < "$serial" | grep . | tail -n 1)"
      kvm_l1_report brief
      kvm_l1_tasks "$serial"
      kill -KILL "$kvm_qemu_pid" 2>/dev/null || true
      break
    fi
    if [ "$(date +%s)" -ge "$wall_end" ]; then
      kvm_log "no verdict after ${kvm_wall_timeout}s (QEMU used $((ticks / hz))s of CPU): killing it (pid $kvm_qemu_pid)"
      kvm_l1_report brief
      kvm_l1_tasks "$serial"
      kill -KILL "$kvm_qemu_pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  wait "$kvm_qemu_pid" 2>/dev/null || true
  kvm_qemu_pid=
  kvm_log "L1 ($kvm_l1_cpus vCPU) ran $(echo "$(date +%s.%N) - $start" | bc | cut -c1-5) s wall, $((ticks / hz)) s of QEMU CPU, $kicks kick(s), longest silence ${longest} s"
  grep -q '^AIRLOCK-KVM-VERDICT: PASS' "$serial" || rc=1
  return "$rc"
}
