#!/usr/bin/env python3
"""tests/integration/jail_exec.py: run a command in a jail sandbox through its agent socket.

  jail_exec.py SOCKET [--user U] [--timeout S] [--token T] [--discard] [--stall S] -- COMMAND

Speaks to whichever agent runs as PID 1: the real airlock-agent (envd Connect-RPC
process.Process/Start, JSON codec, over the unix socket) or the tests' stand-in
(jail_testinit: POST /run). Prints the command's output (stdout and stderr interleaved as
they arrive) and exits with its exit status (128+N when killed by signal N). --discard
counts the output instead of printing it (for floods). --stall S stops reading for S
seconds after the first output (a slow client: the agent must hold back, not buffer).
Exit 125 = could not talk to the agent at all.
"""
import argparse
import base64
import http.client
import json
import socket
import struct
import sys


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("sandbox", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def out(data, counter, discard):
    counter[0] += len(data)
    if not discard:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def via_testinit(a, conn, counter):
    conn.request("POST", "/run?user=%s&timeout_ms=%d" % (a.user, int(a.timeout * 1000)),
                 body=a.command.encode())
    r = conn.getresponse()
    while True:
        chunk = r.read(65536)
        if not chunk:
            break
        out(chunk, counter, a.discard)
    code = int(r.getheader("X-Exit-Code", "125"))
    return 128 - code if code < 0 else code


def via_envd(a, conn, counter):
    msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", a.command]},
                      "stdin": False}).encode()
    body = struct.pack(">BI", 0, len(msg)) + msg
    headers = {
        "Content-Type": "application/connect+json",
        "Connect-Protocol-Version": "1",
        "Connect-Timeout-Ms": str(int(a.timeout * 1000)),
        "Authorization": "Basic " + base64.b64encode((a.user + ":").encode()).decode(),
    }
    if a.token:
        headers["X-Access-Token"] = a.token
    conn.request("POST", "/process.Process/Start", body=body, headers=headers)
    r = conn.getresponse()
    if r.status != 200:
        sys.stderr.write("jail_exec: agent answered %d: %s\n" % (r.status, r.read(2000)))
        return 125
    code = None
    import time
    while True:
        if a.stall and counter[0] > 0:
            sys.stderr.write("jail_exec: stalled after %d bytes\n" % counter[0])
            sys.stderr.flush()
            time.sleep(a.stall)
            a.stall = 0
            sys.stderr.write("jail_exec: reading again\n")
            sys.stderr.flush()
        hdr = r.read(5)
        if len(hdr) < 5:
            break
        flags, n = struct.unpack(">BI", hdr)
        payload = json.loads(r.read(n) or b"{}")
        if flags & 0x02:
            err = payload.get("error")
            if err:
                sys.stderr.write("jail_exec: %s: %s\n" % (err.get("code"), err.get("message")))
                if code is None:
                    code = 125
            break
        ev = payload.get("event", {})
        if "data" in ev:
            d = ev["data"]
            for k in ("stdout", "stderr", "pty"):
                if k in d:
                    out(base64.b64decode(d[k]), counter, a.discard)
        elif "end" in ev:
            e = ev["end"]
            status = e.get("status", "")
            if status.startswith("signal: "):
                sig = {"killed": 9, "terminated": 15, "aborted": 6,
                       "segmentation fault": 11}.get(status[8:], 9)
                code = 128 + sig
            else:
                code = int(e.get("exitCode", 0))
    return 125 if code is None else code


def main():
    p = argparse.ArgumentParser()
    p.add_argument("socket")
    p.add_argument("--user", default="user")
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--token", default="")
    p.add_argument("--discard", action="store_true")
    p.add_argument("--stall", type=float, default=0)
    argv = sys.argv[1:]
    if "--" not in argv:
        p.error("separate the command with --")
    i = argv.index("--")
    a = p.parse_args(argv[:i])
    a.command = " ".join(argv[i + 1:])
    counter = [0]
    try:
        conn = UnixConnection(a.socket, a.timeout + 10)
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        conn.close()
        conn = UnixConnection(a.socket, a.timeout + 10)
        testinit = r.getheader("X-Airlock-Testinit") == "1"
        code = via_testinit(a, conn, counter) if testinit else via_envd(a, conn, counter)
    except (OSError, http.client.HTTPException) as e:
        sys.stderr.write("jail_exec: %s: %s\n" % (a.socket, e))
        code = 125
    if a.discard:
        sys.stderr.write("jail_exec: %d bytes of output\n" % counter[0])
    sys.exit(code)


if __name__ == "__main__":
    main()
