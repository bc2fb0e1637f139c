#!/usr/bin/env python3
"""bench/icpt_client.py: HTTPS load for an intercepted name (bench/egress_bench.sh, group
intercept). Verifies the proxy's certificate against the sandbox's CA, as a sandbox would.

  icpt_client.py conns|keepalive HOST PORT NAME CAFILE --duration S [--procs N] [--name B]

conns: each request on a new TLS connection (a full handshake: no session reuse);
keepalive: N connections, requests one after the other on each. Prints JSON lines
({"bench": B, "metric": "requests", ...}, errors, per second) for run_cpu, which divides the
proxy's CPU by the requests.
"""
import argparse
import json
import multiprocessing as mp
import socket
import ssl
import time


def one_conn(a, ctx):
    s = socket.create_connection((a.host, a.port), timeout=10)
    t = ctx.wrap_socket(s, server_hostname=a.sni)
    return t


def request(t, sni, close):
    t.sendall(("GET /bench HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (sni, "Connection: close\r\n" if close else "")).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = t.recv(65536)
        if not d:
            raise OSError("closed")
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise OSError("status " + head.split(b"\r\n", 1)[0].decode("latin-1"))
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":", 1)[1])
    while len(body) < n:
        d = t.recv(65536)
        if not d:
            raise OSError("short body")
        body += d


def worker(a, q):
    ctx = ssl.create_default_context(cafile=a.cafile)
    ctx.options |= ssl.OP_NO_TICKET  # full handshakes only
    end = time.monotonic() + a.duration
    ok = err = 0
    if a.mode == "conns":
        while time.monotonic() < end:
            try:
                t = one_conn(a, ctx)
                request(t, a.sni, True)
                t.close()
                ok += 1
            except (OSError, ssl.SSLError):
                err += 1
    else:
        t = None
        while time.monotonic() < end:
            try:
                if t is None:
                    t = one_conn(a, ctx)
                request(t, a.sni, False)
                ok += 1
            except (OSError, ssl.SSLError):
                err += 1
                t = None
    q.put((ok, err))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["conns", "keepalive"])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("sni")
    p.add_argument("cafile")
    p.add_argument("--duration", type=float, default=5)
    p.add_argument("--procs", type=int, default=4)
    p.add_argument("--name", default="intercept")
    a = p.parse_args()
    q = mp.Queue()
    ps = [mp.Process(target=worker, args=(a, q)) for _ in range(a.procs)]
    t0 = time.monotonic()
    for x in ps:
        x.start()
    ok = err = 0
    for _ in ps:
        o, e = q.get()
        ok, err = ok + o, err + e
    for x in ps:
        x.join()
    wall = time.monotonic() - t0
    for m, v, u in (("requests", ok, "count"), ("errors", err, "count"), ("per_s", ok / wall, "requests/s")):
        print(json.dumps({"bench": a.name, "metric": m, "value": round(v, 3), "unit": u}))


if __name__ == "__main__":
    main()
