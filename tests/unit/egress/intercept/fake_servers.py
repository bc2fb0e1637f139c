#!/usr/bin/env python3
"""tests/unit/egress/intercept/fake_servers.py: the fake upstream and the fake vault of the
interception tests (loopback and unix sockets only).

  upstream [--listen ADDR:PORT] [--port-file F] --cert C --key K --token T [--plain]
      HTTPS (HTTP/1.1 keep-alive) with test routes:
        /user            200 {"login":"octocat"} if Authorization is "Bearer T" (or
                         "token T"), else 401 with what it got
        /svc             200 if X-Api-Key is T, else 401
        /plain           200 if X-Token is T, else 401
        /echo            200, the request's headers as JSON (reflection)
        /echo-header     200, Authorization echoed in the X-Echo response header
        /echo-b64        200, the headers as base64 of their JSON
        /echo-gzip       200, the headers as gzip JSON (Content-Encoding: gzip)
        /echo-chunked    200, the headers as JSON, chunked
        /echo-br         200, Content-Encoding: br (bytes nobody can inspect)
        /echo-gzip-twice 200, two Content-Encoding: gzip fields, the JSON gzipped twice
        /echo-gzip-list  200, Content-Encoding: gzip, gzip (one field), gzipped twice
        /echo-identity-gzip  200, Content-Encoding: identity and then gzip (two fields)
        /echo-te-gzip    200, Transfer-Encoding: gzip, chunked (a transfer coding)
        /echo-gzip-br    200, Content-Encoding: gzip and br (two fields)
        /echo-te-br      200, Transfer-Encoding: br, chunked
        /echo-trailer    200, chunked, the injected header echoed in a trailer field
        /echo-103        103 Early Hints with the injected header in a Link field, then /echo
        /redirect        302 to https://evil.test/steal
        /big?n=N         200, N bytes of 'x'
        /ws              101 to websocket, then echoes bytes
        /ws-deflate      the same, accepting permessage-deflate whether offered or not
      Every request is logged to stdout as JSON {"path","headers","accept_encoding"}.
  vault --socket S --secret NAME=VALUE[@HOST] ...
      POST /v1/fetch and GET /v1/changes (immediate answers) as airlock-vault. Each fetch is
      logged as JSON {"fetch"}; a poll with wait_ms after one without as {"changes"}.
"""
import argparse
import base64
import gzip
import json
import os
import socket
import socketserver
import ssl
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer


def upstream(a):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def send(self, code, body, ctype="application/json", extra=None, chunked=False):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(body), 7):
                    part = body[i:i + 7]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def send_coded(self, body, fields):
            """Raw head with the given (name, value) fields, then body chunked."""
            head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            head += "".join("%s: %s\r\n" % f for f in fields) + "\r\n"
            self.wfile.write(head.encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))

        def handle_any(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            hdrs = {k: v for k, v in self.headers.items()}
            print(json.dumps({"path": self.path, "method": self.command, "headers": hdrs,
                              "body_len": len(body)}), flush=True)
            path = self.path.split("?")[0]
            js = json.dumps({"headers": hdrs, "body": body.decode(errors="replace")}).encode()
            auth = self.headers.get("Authorization", "")
            echoed = (auth or self.headers.get("X-Token", "")).encode()  # what the proxy injected
            if path == "/user":
                ok = auth in ("Bearer " + a.token, "token " + a.token)
                self.send(200 if ok else 401,
                          json.dumps({"login": "octocat"} if ok else {"got": auth}).encode())
            elif path == "/svc":
                ok = self.headers.get("X-Api-Key", "") == a.token
                self.send(200 if ok else 401, json.dumps({"ok": ok}).encode())
            elif path == "/plain":
                ok = self.headers.get("X-Token", "") == a.token
                self.send(200 if ok else 401, json.dumps({"ok": ok}).encode())
            elif path == "/echo":
                self.send(200, js)
            elif path == "/conn-named":
                self.send(200, b"{}", extra={"Connection": "X-Hop, keep-alive", "X-Hop": "1",
                                             "X-Kept": "1"})
            elif path == "/echo-header":
                self.send(200, b"{}", extra={"X-Echo": auth})
            elif path == "/echo-b64":
                self.send(200, base64.b64encode(js), ctype="text/plain")
            elif path == "/echo-gzip":
                self.send(200, gzip.compress(js), extra={"Content-Encoding": "gzip"})
            elif path == "/echo-chunked":
                self.send(200, js, chunked=True)
            elif path == "/echo-br":
                self.send(200, os.urandom(64), extra={"Content-Encoding": "br"})
            elif path == "/echo-gzip-twice":
                self.send(200, gzip.compress(gzip.compress(js)),
                          extra={"Content-Encoding": "gzip", "content-encoding": "gzip"})
            elif path == "/echo-gzip-list":
                self.send(200, gzip.compress(gzip.compress(js)), extra={"Content-Encoding": "gzip, gzip"})
            elif path == "/echo-identity-gzip":
                self.send(200, gzip.compress(js),
                          extra={"Content-Encoding": "identity", "content-encoding": "gzip"})
            elif path == "/echo-te-gzip":
                self.send_coded(gzip.compress(js), [("Transfer-Encoding", "gzip, chunked")])
            elif path == "/echo-gzip-br":
                self.send(200, os.urandom(64),
                          extra={"Content-Encoding": "gzip", "content-encoding": "br"})
            elif path == "/echo-te-br":
                self.send_coded(os.urandom(64), [("Transfer-Encoding", "br, chunked")])
            elif path == "/echo-trailer":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Trailer: X-Echo\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"%x\r\n%s\r\n0\r\nX-Echo: %s\r\n\r\n" % (len(js), js, echoed))
            elif path == "/echo-103":
                self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </%s>; rel=preload\r\n\r\n"
                                 % echoed.replace(b" ", b"%20"))
                self.send(200, js)
            elif path == "/redirect":
                self.send(302, b"", extra={"Location": "https://evil.test/steal"})
            elif path == "/big":
                n = int(self.path.split("n=")[1]) if "n=" in self.path else 1000
                self.send(200, b"x" * n, ctype="application/octet-stream")
            elif path in ("/ws", "/ws-deflate"):
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                if path == "/ws-deflate":
                    self.send_header("Sec-WebSocket-Extensions", "permessage-deflate")
                self.end_headers()
                self.wfile.flush()
                while True:
                    d = self.connection.recv(4096)
                    if not d:
                        break
                    self.connection.sendall(d)
                self.close_connection = True
            else:
                self.send(404, b'{"error":"no route"}')

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = handle_any

    class S(ThreadingHTTPServer):
        daemon_threads = True

    host, _, port = (a.listen or "127.0.0.1:0").rpartition(":")
    srv = S((host, int(port)), H)
    if not a.plain:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        ctx.set_alpn_protocols(["http/1.1"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(a.port_file + ".tmp", a.port_file)
    print("LISTEN", flush=True)
    srv.serve_forever()


def vault(a):
    secrets = {}
    last_waited = [False]
    for s in a.secret:
        name, rest = s.split("=", 1)
        value, _, host = rest.partition("@")
        secrets[name] = (value, [host] if host else [])

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def address_string(self):
            return "unix"

        def reply(self, code, obj):
            b = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            if self.path.startswith("/v1/changes"):
                # Tests wait for a poll with wait_ms: a proxy sends one only after it applied
                # an answer, that is once its feed is up and it serves fetches. Said when the
                # polls start waiting, not for each (answered at once, they follow at once).
                waits = "wait_ms=" in self.path
                if waits and not last_waited[0]:
                    print(json.dumps({"changes": self.path}), flush=True)
                last_waited[0] = waits
                self.reply(200, {"since": 0, "generation": 1, "full": False, "changed": []})
            else:
                self.reply(404, {"code": 404, "message": "no"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            print(json.dumps({"fetch": req}), flush=True)
            s = secrets.get(req.get("name"))
            if not s:
                return self.reply(404, {"code": 404, "message": "unknown secret"})
            value, hosts = s
            if hosts and req.get("host") not in hosts:
                return self.reply(403, {"code": 403, "message": "host not bound"})
            self.reply(200, {"name": req["name"], "version": 1, "generation": 1,
                             "secret_id": "b2k:" + "%032x" % (abs(hash(value)) % (1 << 120)),
                             "max_age_ms": 60000, "bound_hosts": hosts,
                             "value_b64": base64.b64encode(value.encode()).decode()})

    class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    try:
        os.unlink(a.socket)
    except FileNotFoundError:
        pass
    srv = S(a.socket, H)
    print("LISTEN", flush=True)
    srv.serve_forever()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("upstream")
    u.add_argument("--port-file")
    u.add_argument("--listen", help="ADDR:PORT (default 127.0.0.1:0)")
    u.add_argument("--cert", required=True)
    u.add_argument("--key", required=True)
    u.add_argument("--token", required=True)
    u.add_argument("--plain", action="store_true", help="plain HTTP instead of HTTPS")
    v = sub.add_parser("vault")
    v.add_argument("--socket", required=True)
    v.add_argument("--secret", action="append", default=[])
    a = p.parse_args()
    upstream(a) if a.cmd == "upstream" else vault(a)


if __name__ == "__main__":
    main()
