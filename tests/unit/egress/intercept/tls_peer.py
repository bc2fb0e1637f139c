#!/usr/bin/env python3
"""tests/unit/egress/intercept/tls_peer.py: the other end of the TLS unit tests, with OpenSSL (what
sandboxes and upstreams mostly run), on loopback only.

  client --port P --name N --ca FILE [--max12] [--alpn a,b] [--conns K] [--send TEXT]
         [--expect-bytes N]
      connects K times (the 2nd and later offer the 1st connection's session), sends TEXT
      (or nothing), reads until the server closes or N bytes arrived; prints one JSON line
      per connection: {"ok","version","alpn","cipher","reused","reply","error"}.
  server --port-file F --cert C --key K [--max12] [--alpn a,b] [--count N]
         [--no-close-notify] [--big N]
      accepts N connections; on each reads one line and answers "echo:<line>" (or N bytes
      of 'x' followed by the line when --big), then closes (with close_notify unless told).
"""
import argparse
import json
import os
import socket
import ssl
import sys


def client(a):
    ctx = ssl.create_default_context(cafile=a.ca) if a.ca else ssl.create_default_context()
    if a.max12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if a.alpn:
        ctx.set_alpn_protocols(a.alpn.split(","))
    session = None
    for i in range(a.conns):
        res = {"ok": False}
        try:
            raw = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            s = ctx.wrap_socket(raw, server_hostname=a.name, session=session)
            res.update(version=s.version(), alpn=s.selected_alpn_protocol(),
                       cipher=s.cipher()[0], reused=s.session_reused)
            if a.send:
                s.sendall(a.send.encode())
            got = b""
            try:
                while True:
                    if a.expect_bytes and len(got) >= a.expect_bytes:
                        break
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
            except ssl.SSLError as e:
                res["read_error"] = str(e)
            res["reply"] = got[:200].decode(errors="replace")
            res["reply_len"] = len(got)
            if session is None:
                session = s.session
            res["ok"] = True
            s.close()
        except Exception as e:  # noqa: BLE001 - reported to the C test
            res["error"] = "%s: %s" % (type(e).__name__, e)
        print(json.dumps(res), flush=True)


def server(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    if a.max12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if a.alpn:
        ctx.set_alpn_protocols(a.alpn.split(","))
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    ls.settimeout(20)
    for _ in range(a.count):
        try:
            c, _ = ls.accept()
            c.settimeout(10)
            s = ctx.wrap_socket(c, server_side=True)
            line = b""
            while not line.endswith(b"\n"):
                d = s.recv(4096)
                if not d:
                    break
                line += d
            if a.big:
                s.sendall(b"x" * a.big + line)
            else:
                s.sendall(b"echo:" + line)
            if a.no_close_notify:
                os.close(s.detach())  # no close_notify: a truncation
            else:
                s.unwrap()
                s.close()
        except Exception as e:  # noqa: BLE001
            print("server: %s: %s" % (type(e).__name__, e), file=sys.stderr, flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("client")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--name", required=True)
    c.add_argument("--ca")
    c.add_argument("--max12", action="store_true")
    c.add_argument("--alpn")
    c.add_argument("--conns", type=int, default=1)
    c.add_argument("--send")
    c.add_argument("--expect-bytes", type=int, default=0)
    s = sub.add_parser("server")
    s.add_argument("--port-file", required=True)
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--max12", action="store_true")
    s.add_argument("--alpn")
    s.add_argument("--count", type=int, default=1)
    s.add_argument("--no-close-notify", action="store_true")
    s.add_argument("--big", type=int, default=0)
    a = p.parse_args()
    client(a) if a.cmd == "client" else server(a)


if __name__ == "__main__":
    main()
