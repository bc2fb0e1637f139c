#!/usr/bin/env python3
"""tests/integration/cp_intercept_scan.py: looks for byte strings in a sandbox from the host
(root), where the sandbox itself cannot hide them (tests/integration/cp_intercept.sh).

  procs CGROUP-GLOB --needle NAME=VALUE ...
      every process of the cgroups matching the glob (their cgroup.procs): its memory (every
      readable mapping, through /proc/PID/mem), environment and command line. Prints JSON
      {"pids": [...], "found": {NAME: ["PID:where", ...]}, "bytes": N}.
  files PID SINCE --needle NAME=VALUE ...
      the sandbox's writable layer, seen through /proc/PID/root: every regular file of the
      root file system whose inode changed at or after SINCE (Unix seconds: what the
      sandbox wrote or copied up into its upper layer; the template's files are older), and
      every file under /tmp and /dev/shm (they live on the same writable tmpfs). Symbolic
      links are not followed. Prints JSON {"files": N, "scanned": [the first 64 paths],
      "found": {NAME: [paths]}}.

Each needle is looked for raw, in base64 and in hex, so that a simple encoding does not hide
it. Exit status 0 when the scan ran (whatever it found), 1 when it could not.
"""
import base64
import binascii
import glob
import json
import os
import stat
import sys


def spellings(value):
    v = value.encode()
    return [v, base64.b64encode(v).rstrip(b"="), binascii.hexlify(v)]


def parse_needles(argv):
    needles = {}
    i = 0
    while i < len(argv):
        if argv[i] == "--needle" and i + 1 < len(argv):
            name, _, value = argv[i + 1].partition("=")
            needles[name] = spellings(value)
            i += 2
        else:
            raise SystemExit("unexpected argument: %s" % argv[i])
    return needles


def hits(data, needles):
    return [n for n, sp in needles.items() if any(s in data for s in sp)]


def scan_procs(pattern, needles):
    pids = set()
    for f in glob.glob(pattern + "/cgroup.procs") + glob.glob(pattern + "/**/cgroup.procs", recursive=True):
        try:
            pids.update(int(x) for x in open(f).read().split())
        except OSError:
            pass
    found = {n: [] for n in needles}
    total = 0
    keep = max(len(s) for sp in needles.values() for s in sp) if needles else 0
    for pid in sorted(pids):
        for where in ("environ", "cmdline"):
            try:
                data = open("/proc/%d/%s" % (pid, where), "rb").read()
            except OSError:
                continue
            for n in hits(data, needles):
                found[n].append("%d:%s" % (pid, where))
        try:
            maps = open("/proc/%d/maps" % pid).read().splitlines()
            mem = open("/proc/%d/mem" % pid, "rb", buffering=0)
        except OSError:
            continue
        seen = set()
        for line in maps:
            parts = line.split()
            if len(parts) < 2 or parts[1][0] != "r" or line.endswith("[vvar]") or line.endswith("[vsyscall]"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            tail = b""
            addr = lo
            while addr < hi:
                n = min(1 << 20, hi - addr)
                try:
                    mem.seek(addr)
                    chunk = mem.read(n)
                except OSError:
                    break
                if not chunk:
                    break
                total += len(chunk)
                data = tail + chunk
                for name in hits(data, needles):
                    if name not in seen:
                        seen.add(name)
                        found[name].append("%d:mem" % pid)
                tail = data[-keep:] if keep else b""
                addr += len(chunk)
        mem.close()
    return {"pids": sorted(pids), "found": found, "bytes": total}


def scan_files(pid, since, needles):
    root = "/proc/%d/root" % pid
    found = {n: [] for n in needles}
    count = 0
    scanned = []
    rootdev = os.lstat(root + "/").st_dev

    def check(path):
        nonlocal count
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return
            count += 1
            if len(scanned) < 64:
                scanned.append(path[len(root):])
            data = b""
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                data += b
            for n in hits(data, needles):
                found[n].append(path[len(root):])
        finally:
            os.close(fd)

    def walk(top, one_fs, newer):
        for d, dirs, files in os.walk(top):
            if one_fs:
                dirs[:] = [x for x in dirs if os.lstat(os.path.join(d, x)).st_dev == rootdev]
            for f in files:
                p = os.path.join(d, f)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and (not newer or st.st_ctime >= since):
                    check(p)

    walk(root + "/", True, True)
    for sub in ("/tmp", "/dev/shm"):
        walk(root + sub, False, False)
    return {"files": count, "scanned": scanned, "found": found}


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "procs":
        res = scan_procs(sys.argv[2], parse_needles(sys.argv[3:]))
    elif sys.argv[1] == "files":
        res = scan_files(int(sys.argv[2]), float(sys.argv[3]), parse_needles(sys.argv[4:]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
