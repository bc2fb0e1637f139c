#!/usr/bin/env python3
"""tests/integration/webhook_receiver.py: a webhook receiver for cp_webhooks.sh.

  webhook_receiver.py ADDR PORT --secrets FILE --log FILE [--cert C --key K] [--hold FILE]

Every POST is checked and logged as one JSON line: path, the signatures (e2b: base64url of
SHA-256(secret || body); airlock: v1= hex HMAC-SHA256(secret, timestamp "." body), timestamp
within 300 s), the e2b-* headers, the event's id and type, the SNI (TLS), the answer given.
FILE maps a path to the secret its webhook signs with ({"/flaky": "..."}); it is read at each
request (the test writes it once it knows a secret airlockd made).
Paths: /flaky answers 500 to the first two attempts of each event, then 200; /redirect
answers 302 to /elsewhere; /hold waits (at most 60 s) until the file --hold exists, then 200;
anything else 200. Prints LISTEN once it accepts connections.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SEEN = {}
SNI = threading.local()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("addr")
    p.add_argument("port", type=int)
    p.add_argument("--secrets", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--hold")
    a = p.parse_args()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, code, extra=None):
            self.send_response(code)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            path = self.path.split("?")[0]
            try:
                secrets = json.load(open(a.secrets))
            except (OSError, ValueError):
                secrets = {}
            sec = secrets.get(path, "").encode()
            e2b = base64.urlsafe_b64encode(hashlib.sha256(sec + body).digest()).decode().rstrip("=")
            ts = self.headers.get("airlock-timestamp") or ""
            mine = "v1=" + hmac.new(sec, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
            try:
                ev = json.loads(body)
            except ValueError:
                ev = {}
            rec = {
                "path": path,
                "e2b_ok": bool(sec) and hmac.compare_digest(e2b, self.headers.get("e2b-signature") or ""),
                "sig_ok": bool(sec) and hmac.compare_digest(mine, self.headers.get("airlock-signature") or ""),
                "ts_ok": ts.isdigit() and abs(time.time() - int(ts)) < 300,
                "version": self.headers.get("e2b-signature-version"),
                "webhook": self.headers.get("e2b-webhook-id"),
                "delivery": self.headers.get("e2b-delivery-id"),
                "host": self.headers.get("Host"),
                "sni": getattr(self.connection, "sni", None),
                "event": ev.get("id"),
                "type": ev.get("type"),
                "sandbox": ev.get("sandboxId"),
            }
            code, extra = 200, None
            if path == "/flaky":
                with LOCK:
                    SEEN[rec["event"]] = SEEN.get(rec["event"], 0) + 1
                    if SEEN[rec["event"]] <= 2:
                        code = 500
            elif path == "/redirect":
                code, extra = 302, {"Location": "/elsewhere"}
            elif path == "/hold":
                deadline = time.time() + 60
                while a.hold and not os.path.exists(a.hold) and time.time() < deadline:
                    time.sleep(0.05)
            rec["answer"] = code
            with LOCK:
                with open(a.log, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            self.answer(code, extra)

    srv = ThreadingHTTPServer((a.addr, a.port), H)
    srv.daemon_threads = True
    if a.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)

        def on_sni(sock, name, _ctx):
            sock.sni = name

        ctx.sni_callback = on_sni
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("LISTEN", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
