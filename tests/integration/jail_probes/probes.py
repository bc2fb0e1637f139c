#!/usr/bin/env python3
"""tests/integration/jail_probes/probes.py: hostile probes run inside a jail sandbox.

Mounted read-only at /opt/probes by jail_hostile.sh (a spec "binds" entry). Each probe
tries something a sandbox must not be able to do and prints one line per attempt:

  BLOCKED <what> <errno name or reason>     the attempt failed, as it must
  ESCAPED <what> <detail>                   the attempt succeeded: a containment failure
  OK <what>                                 a positive control that must work did work
  BROKEN <what> <detail>                    a positive control failed (the probe is wrong)

The exit status is 0 only if there is no ESCAPED and no BROKEN line.
"""
import ctypes
import errno
import fcntl
import os
import pty
import socket
import struct
import subprocess
import sys
import termios

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
bad = [0]

# x86_64 syscall numbers
NR = {"mount": 165, "umount2": 166, "pivot_root": 155, "init_module": 175,
      "finit_module": 313, "delete_module": 176, "ptrace": 101, "unshare": 272,
      "setns": 308, "fsopen": 430, "open_tree": 428, "process_vm_readv": 310,
      "kexec_load": 246, "bpf": 321, "perf_event_open": 298, "keyctl": 250,
      "userfaultfd": 323, "io_uring_setup": 425, "open_by_handle_at": 304,
      "iopl": 172, "reboot": 169, "swapon": 167, "settimeofday": 164}


def blocked(what, err):
    print("BLOCKED %s %s" % (what, err))


def escaped(what, detail=""):
    print("ESCAPED %s %s" % (what, detail))
    bad[0] = 1


def ok(what):
    print("OK %s" % what)


def broken(what, detail):
    print("BROKEN %s %s" % (what, detail))
    bad[0] = 1


def sys_expect_fail(what, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(NR[nr]), *[ctypes.c_long(a) if isinstance(a, int)
                                                else a for a in args])
    if r == -1:
        blocked(what, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
    else:
        escaped(what, "returned %d" % r)


def expect_oserror(what, fn):
    try:
        fn()
    except OSError as e:
        blocked(what, errno.errorcode.get(e.errno, e.errno))
        return
    escaped(what)


def probe_mount():
    sys_expect_fail("mount(tmpfs)", "mount", b"none", b"/mnt", b"tmpfs", 0, 0)
    sys_expect_fail("mount(remount / rw)", "mount", b"none", b"/", 0, 32 | 0x20, 0)
    sys_expect_fail("mount(sysfs)", "mount", b"sysfs", b"/sys", b"sysfs", 0, 0)
    sys_expect_fail("mount(proc)", "mount", b"proc", b"/mnt", b"proc", 0, 0)
    sys_expect_fail("umount2(/proc)", "umount2", b"/proc", 2)
    sys_expect_fail("umount2(/.airlock)", "umount2", b"/.airlock", 2)
    sys_expect_fail("pivot_root", "pivot_root", b"/tmp", b"/tmp")
    sys_expect_fail("fsopen(tmpfs)", "fsopen", b"tmpfs", 0)
    sys_expect_fail("open_tree(/)", "open_tree", -100, b"/", 1)
    r = subprocess.run(["mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True)
    (blocked if r.returncode else escaped)("mount(8) -t tmpfs", "exit %d" % r.returncode)


def probe_unshare():
    for name, flag in (("CLONE_NEWUSER", 0x10000000), ("CLONE_NEWNS", 0x20000),
                       ("CLONE_NEWNET", 0x40000000), ("CLONE_NEWPID", 0x20000000),
                       ("CLONE_NEWUTS", 0x04000000), ("CLONE_NEWIPC", 0x08000000),
                       ("CLONE_NEWCGROUP", 0x02000000), ("CLONE_NEWTIME", 0x80)):
        sys_expect_fail("unshare(%s)" % name, "unshare", flag)
    fd = os.open("/proc/self/ns/user", os.O_RDONLY)
    sys_expect_fail("setns(own user ns)", "setns", fd, 0)
    os.close(fd)
    for cmd in (["unshare", "-U", "-r", "id"], ["unshare", "-U", "--map-root-user", "cat",
                                                "/proc/self/status"],
                ["unshare", "-m", "true"], ["unshare", "-n", "true"]):
        r = subprocess.run(cmd, capture_output=True)
        if r.returncode == 0:
            escaped(" ".join(cmd), r.stdout.decode(errors="replace")[:200])
        else:
            blocked(" ".join(cmd), "exit %d" % r.returncode)
    # No capability can be regained: the bounding set is empty.
    caps = {l.split(":")[0]: l.split(":")[1].strip() for l in open("/proc/self/status")
            if l.startswith("Cap")}
    for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        if int(caps[k], 16):
            escaped("capabilities", "%s=%s" % (k, caps[k]))
    blocked("capabilities", "all sets empty")


def probe_ptrace():
    PTRACE_ATTACH, PTRACE_SEIZE, PTRACE_TRACEME, PTRACE_CONT = 16, 0x4206, 0, 7
    sys_expect_fail("ptrace(ATTACH, 1)", "ptrace", PTRACE_ATTACH, 1, 0, 0)
    sys_expect_fail("ptrace(SEIZE, 1)", "ptrace", PTRACE_SEIZE, 1, 0, 0)
    host_pid = int(os.environ.get("HOST_PID", "0"))
    if host_pid:
        sys_expect_fail("ptrace(ATTACH, host pid %d)" % host_pid, "ptrace", PTRACE_ATTACH,
                        host_pid, 0, 0)
        if os.path.exists("/proc/%d/environ" % host_pid):
            try:
                data = open("/proc/%d/environ" % host_pid, "rb").read()
                if b"AL_HOST_MARKER" in data:
                    escaped("/proc/<host pid>/environ", "host environment readable")
            except OSError as e:
                blocked("/proc/<host pid>/environ", errno.errorcode.get(e.errno))
        else:
            blocked("/proc/<host pid>", "not visible")
    iov = (ctypes.c_char * 8)()
    sys_expect_fail("process_vm_readv(1)", "process_vm_readv", 1, ctypes.addressof(iov), 1,
                    ctypes.addressof(iov), 1, 0)
    # Positive control: a debugger may still trace its own child.
    pid = os.fork()
    if pid == 0:
        libc.syscall(ctypes.c_long(NR["ptrace"]), ctypes.c_long(PTRACE_TRACEME), 0, 0, 0)
        os.kill(os.getpid(), 19)
        os._exit(7)
    _, st = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(st):
        libc.syscall(ctypes.c_long(NR["ptrace"]), ctypes.c_long(PTRACE_CONT),
                     ctypes.c_long(pid), 0, 0)
        _, st = os.waitpid(pid, 0)
        (ok if os.WIFEXITED(st) and os.WEXITSTATUS(st) == 7 else
         lambda w: broken(w, "status %d" % st))("ptrace of own child (TRACEME)")
    else:
        broken("ptrace of own child (TRACEME)", "not stopped: %d" % st)
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    if len(pids) > 200:
        escaped("/proc", "%d processes visible" % len(pids))
    else:
        blocked("host processes in /proc", "only %d sandbox processes visible" % len(pids))


def probe_raw():
    for what, args in (("socket(AF_INET, SOCK_RAW, ICMP)", (socket.AF_INET, socket.SOCK_RAW, 1)),
                       ("socket(AF_INET6, SOCK_RAW, ICMPV6)", (socket.AF_INET6, socket.SOCK_RAW, 58)),
                       ("socket(AF_INET, SOCK_RAW, RAW)", (socket.AF_INET, socket.SOCK_RAW, 255)),
                       ("socket(AF_PACKET, SOCK_RAW)", (17, socket.SOCK_RAW, 0x0300)),
                       ("socket(AF_PACKET, SOCK_DGRAM)", (17, socket.SOCK_DGRAM, 0x0300)),
                       ("socket(AF_NETLINK, NETLINK_AUDIT)", (16, socket.SOCK_RAW, 9)),
                       ("socket(AF_ALG)", (38, socket.SOCK_SEQPACKET, 0)),
                       ("socket(AF_VSOCK)", (40, socket.SOCK_STREAM, 0))):
        expect_oserror(what, lambda a=args: socket.socket(*a).close())
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.close()
    ok("socket(AF_INET, SOCK_STREAM)")
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.close()
    ok("socket(AF_NETLINK, NETLINK_ROUTE)")


def probe_tiocsti():
    master, slave = pty.openpty()
    expect_oserror("TIOCSTI on a pty slave", lambda: fcntl.ioctl(slave, termios.TIOCSTI, b"x"))
    expect_oserror("TIOCSTI on a pty master", lambda: fcntl.ioctl(master, termios.TIOCSTI, b"x"))
    try:
        fcntl.ioctl(slave, termios.TIOCGWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
        ok("TIOCGWINSZ on a pty")
    except OSError as e:
        broken("TIOCGWINSZ on a pty", e)
    os.close(master)
    os.close(slave)


def probe_modules():
    buf = ctypes.create_string_buffer(b"\x7fELF" + b"\0" * 60)
    sys_expect_fail("init_module", "init_module", buf, 64, b"")
    fd = os.open("/bin/true", os.O_RDONLY)
    sys_expect_fail("finit_module", "finit_module", fd, b"", 0)
    os.close(fd)
    sys_expect_fail("delete_module", "delete_module", b"ext4", 0)
    sys_expect_fail("kexec_load", "kexec_load", 0, 0, 0, 0)
    for cmd in (["modprobe", "dummy"], ["insmod", "/nonexistent.ko"]):
        try:
            r = subprocess.run(cmd, capture_output=True)
            (blocked if r.returncode else escaped)(" ".join(cmd), "exit %d" % r.returncode)
        except FileNotFoundError:
            blocked(" ".join(cmd), "not installed")


def probe_kernel_files():
    for path in ("/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches",
                 "/proc/sys/net/ipv4/ip_forward", "/proc/sys/kernel/modprobe",
                 "/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger",
                 "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/new-file"):
        def w(p=path):
            with open(p, "w") as f:
                f.write("1\n")
        expect_oserror("write %s" % path, w)
    for path in ("/proc/kcore", "/proc/keys", "/proc/kallsyms", "/proc/timer_list",
                 "/proc/sched_debug"):
        try:
            data = open(path, "rb").read(4096)
            if data:
                escaped("read %s" % path, "%d bytes" % len(data))
            else:
                blocked("read %s" % path, "masked (empty)")
        except OSError as e:
            blocked("read %s" % path, errno.errorcode.get(e.errno))
    entries = os.listdir("/sys")
    if entries:
        escaped("/sys", "has %s" % entries[:5])
    else:
        blocked("/sys", "empty and read-only")
    for what, nr, args in (("bpf", "bpf", (0, 0, 0)), ("perf_event_open", "perf_event_open",
                                                       (0, 0, -1, -1, 0)),
                           ("keyctl", "keyctl", (0, 0)), ("userfaultfd", "userfaultfd", (0,)),
                           ("io_uring_setup", "io_uring_setup", (1, 0)),
                           ("open_by_handle_at", "open_by_handle_at", (3, 0, 0)),
                           ("iopl", "iopl", (3,)), ("reboot", "reboot", (0, 0, 0, 0)),
                           ("swapon", "swapon", (b"/tmp/x", 0)),
                           ("settimeofday", "settimeofday", (0, 0))):
        sys_expect_fail(what, nr, *args)


def probe_devices():
    for what, mode, dev in (("mknod char 1:1 (/dev/mem)", 0o20600, os.makedev(1, 1)),
                            ("mknod block 254:0 (a disk)", 0o60600, os.makedev(254, 0)),
                            ("mknod char 10:200 (/dev/net/tun)", 0o20600, os.makedev(10, 200))):
        p = "/tmp/dev-probe-%d" % os.getpid()
        expect_oserror(what, lambda m=mode, d=dev: os.mknod(p, m, d))
        if os.path.exists(p):
            os.unlink(p)
    for path in ("/dev/mem", "/dev/kmem", "/dev/port", "/dev/vda", "/dev/sda", "/dev/kvm",
                 "/dev/net/tun", "/dev/fuse", "/dev/console", "/dev/tty0"):
        expect_oserror("open %s" % path, lambda p=path: os.close(os.open(p, os.O_RDONLY)))
    want = {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm", "fd",
            "stdin", "stdout", "stderr"}
    have = set(os.listdir("/dev"))
    if have - want:
        escaped("/dev", "extra entries %s" % sorted(have - want))
    else:
        blocked("/dev", "only the minimal set")
    expect_oserror("create a file in /dev", lambda: open("/dev/evil", "w"))
    with open("/dev/null", "w") as f:
        f.write("x")
    ok("write /dev/null")


def probe_fds():
    fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
    extra = []
    for fd in fds:
        if fd <= 2:
            continue
        try:
            target = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            continue  # the directory being listed
        if target.startswith("/proc/") and target.endswith("/fd"):
            continue
        extra.append("%d->%s" % (fd, target))
    if extra:
        escaped("inherited descriptors", " ".join(extra))
    else:
        blocked("inherited descriptors", "only 0, 1, 2")
    for fd in (0, 1, 2):
        t = os.readlink("/proc/self/fd/%d" % fd)
        if t.startswith("/") and not t.startswith("/dev/") and not t.startswith("/tmp"):
            escaped("fd %d" % fd, t)
    # The agent's descriptors (the agent channel among them): root of the sandbox may see
    # their numbers (same uid, DAC), but neither what they are nor open them (that takes
    # ptrace access, which the agent's capabilities forbid); the user cannot even list them.
    try:
        agent_fds = os.listdir("/proc/1/fd")
    except OSError as e:
        agent_fds = []
        blocked("list /proc/1/fd (the agent's descriptors)", errno.errorcode.get(e.errno))
    if agent_fds and os.geteuid() != 0:
        escaped("/proc/1/fd", "the agent's descriptors are listable by the user")
    for fd in agent_fds:
        expect_oserror("readlink /proc/1/fd/%s" % fd,
                       lambda f=fd: os.readlink("/proc/1/fd/%s" % f))
        expect_oserror("open /proc/1/fd/%s" % fd,
                       lambda f=fd: os.close(os.open("/proc/1/fd/%s" % f, os.O_RDONLY)))
    for path in ("/proc/1/root/etc", "/proc/1/cwd", "/proc/1/environ", "/proc/1/mem"):
        expect_oserror("open %s" % path, lambda p=path: os.close(os.open(p, os.O_RDONLY)))


def probe_exe():
    expect_oserror("open /proc/1/exe for writing", lambda: open("/proc/1/exe", "ab").close())
    expect_oserror("open /.airlock/bin/airlock-agent for writing",
                   lambda: open("/.airlock/bin/airlock-agent", "ab").close())
    expect_oserror("create /.airlock/x", lambda: open("/.airlock/x", "w").close())
    expect_oserror("chmod /.airlock/bin/airlock-agent",
                   lambda: os.chmod("/.airlock/bin/airlock-agent", 0o777))
    expect_oserror("open /proc/self/exe for writing", lambda: open("/proc/self/exe", "ab").close())
    try:
        os.readlink("/proc/1/exe")
        if os.geteuid() != 0:
            escaped("readlink /proc/1/exe", "the agent's executable is reachable by the user")
        else:
            blocked("readlink /proc/1/exe", "visible to root, read-only")
    except OSError as e:
        blocked("readlink /proc/1/exe", errno.errorcode.get(e.errno))


def probe_whoami():
    print("UID %d EUID %d" % (os.getuid(), os.geteuid()))


PROBES = {"mount": probe_mount, "unshare": probe_unshare, "ptrace": probe_ptrace,
          "raw": probe_raw, "tiocsti": probe_tiocsti, "modules": probe_modules,
          "kernel": probe_kernel_files, "devices": probe_devices, "fds": probe_fds,
          "exe": probe_exe, "whoami": probe_whoami}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        PROBES[name]()
    sys.exit(bad[0])
