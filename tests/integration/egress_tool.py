#!/usr/bin/env python3
"""tests/integration/egress_tool.py: fake servers and crafted clients for the egress tests.

Servers (run inside the test world's namespaces, never anywhere else):
  dns-server ADDR PORT ZONE.json --log FILE
      UDP+TCP DNS with answers from ZONE.json (re-read on change):
      {"name": {"A": ["203.0.113.10"], "AAAA": [], "ttl": 30,
                "seq": [{"A": [...]}, {"A": [...]}],   # answers per query, cycling (rebinding)
                "cname": "other.name", "rcode": "NXDOMAIN", "delay": 1.5, "hold": "/tmp/go"}}
      "*.name" answers every name one label below (when no exact entry); "delay" answers
      UDP queries that many seconds late, "hold" once the file it names exists (both without
      holding up other queries).
      Every query is logged: "QUERY <name> <type> <peer>".
  http-server ADDR PORT --log FILE [--name N] [--cl0]
      HTTP/1.1 keep-alive server. Every request is logged ("REQ <name> <method> <target>
      host=<Host> auth=<Authorization|-> ... fields=<its field names, lower case>") and
      answered with a JSON echo. --cl0: Content-Length is ignored on GET, HEAD, OPTIONS,
      DELETE and TRACE, as some frameworks do, so a body there is read as the next request
      (request smuggling, "CL.0"). Paths:
      /redirect?to=URL (302), /big?n=BYTES, /close (Connection: close), /http10 (HTTP/1.0
      reply, no length), /ws (WebSocket-style 101 then echo), /chunked (chunked reply),
      /once (answered only as a connection's first request; later on one connection it is
      closed unanswered, logged "DROPPED <method> <target> peer=<peer>"), /bye (answered
      as a kept connection, which the server closes 0.5 s later, logged "BYE <name>
      peer=<peer>"). A connection the client ends between requests is logged "CLOSED
      <name> peer=<peer>".
  tls-server ADDR PORT --cert C --key K --log FILE [--name N] [--cl0]
      TLS server (HTTP inside); logs "TLS <name> sni=<SNI>" per handshake.
  tcp-banner ADDR PORT --log FILE
      Server-first TCP: sends "BANNER\\n" on accept, then echoes.

Clients (run inside a sandbox namespace):
  dns-query SERVER NAME TYPE [--tcp] [--timeout S] [--hex]
      prints "RCODE <rcode> ANSWERS <a,b|-> TTL <ttl>" (exit 0), or "TIMEOUT" (exit 1);
      --hex adds "REPLY <hex>": the whole reply but its id (every other field of it)
  dns-flood SERVER COUNT NAME [--type T] [--wait S] [--window W]
      sends COUNT UDP queries from one socket ("{i}" in NAME becomes the query's index) as
      fast as the answers come, W (64) unanswered at most so that no socket buffer on either
      side overflows; gives up when no answer came for S seconds; prints
      "SENT <n> NOERROR <a> NXDOMAIN <b> REFUSED <c> SERVFAIL <d> NOANSWER <e> ELAPSED_MS <t>"
      (t: from the first query sent to the last answer received, the span within which the
      server saw and answered them)
  raw HOST PORT DATA [--timeout S] [--until TEXT]
      sends DATA (Python escapes: \\r\\n, \\x00) and prints what comes back; the last line is
      "END eof|reset|timeout|until" (until: TEXT, same escapes, has arrived; for a connection
      that stays open, so the wait ends on what is expected, not on S seconds of silence)
  tls-hello HOST PORT [--sni NAME] [--ech] [--alpn P] [--timeout S]
      sends a TLS 1.3 ClientHello; prints "SERVERHELLO" when a TLS server answers through
      the proxy, "RESET" or "CLOSED" when the connection was refused
  session GO NAME=KIND:HOST[:PORT]... [--ca CA.pem] [--wait S]
      established connections (KIND http: keep-alive HTTP on 80; tls: HTTPS on 443 through
      CA.pem; tcp: the banner service, then an echo), one exchange each, then "READY"; once
      the file GO exists, one more exchange each: "NAME alive" or "NAME closed <how>"
"""
import argparse
import json
import os
import select
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time

TYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "NULL": 10, "MX": 15, "TXT": 16, "AAAA": 28,
         "SRV": 33, "HTTPS": 65, "ANY": 255}
RCODES = {"NOERROR": 0, "FORMERR": 1, "SERVFAIL": 2, "NXDOMAIN": 3, "NOTIMP": 4, "REFUSED": 5}
RNAMES = {v: k for k, v in RCODES.items()}


def log_line(path, line):
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
    print(line, flush=True)


# ---- DNS --------------------------------------------------------------------------------

def dns_name(name):
    out = b""
    for label in name.strip(".").split("."):
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def dns_read_name(msg, off):
    labels = []
    jumps = 0
    end = None
    while True:
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if end is None:
                end = off + 2
            off = ((n & 0x3F) << 8) | msg[off + 1]
            jumps += 1
            if jumps > 20:
                raise ValueError("loop")
            continue
        if n == 0:
            off += 1
            break
        labels.append(msg[off + 1:off + 1 + n].decode("latin-1"))
        off += 1 + n
    return ".".join(labels), (end if end is not None else off)


class Zone:
    def __init__(self, path):
        self.path = path
        self.mtime = None
        self.data = {}
        self.count = {}
        self.lock = threading.Lock()

    def get(self, name):
        with self.lock:
            try:
                m = os.stat(self.path).st_mtime_ns
                if m != self.mtime:
                    with open(self.path) as f:
                        self.data = {k.lower().rstrip("."): v for k, v in json.load(f).items()}
                    self.mtime = m
            except (OSError, ValueError):
                pass
            key = name.lower().rstrip(".")
            entry = self.data.get(key)
            if entry is None and "." in key:
                entry = self.data.get("*." + key.split(".", 1)[1])
            if entry and "seq" in entry:
                i = self.count.get(name, 0)
                self.count[name] = i + 1
                merged = dict(entry)
                merged.update(entry["seq"][i % len(entry["seq"])])
                return merged
            return entry


def dns_answer(zone, q, logpath, peer, delays=None):
    qid, flags, qd = struct.unpack(">HHH", q[:6])
    name, off = dns_read_name(q, 12)
    qtype, qclass = struct.unpack(">HH", q[off:off + 4])
    tname = next((k for k, v in TYPES.items() if v == qtype), str(qtype))
    log_line(logpath, "QUERY %s %s %s" % (name.lower(), tname, peer))
    question = q[12:off + 4]
    entry = zone.get(name)
    rcode = 3
    answers = b""
    count = 0
    if entry is not None:
        if delays is not None and (entry.get("delay") or entry.get("hold")):
            delays.append((float(entry.get("delay") or 0), entry.get("hold")))
        rcode = RCODES.get(entry.get("rcode", "NOERROR"), 0)
        ttl = int(entry.get("ttl", 30))
        owner = b"\xc0\x0c"
        if entry.get("cname"):
            target = dns_name(entry["cname"])
            answers += owner + struct.pack(">HHIH", 5, 1, ttl, len(target)) + target
            count += 1
            owner = target
        fam = {1: (socket.AF_INET, "A"), 28: (socket.AF_INET6, "AAAA")}.get(qtype)
        if fam and rcode == 0:
            for a in entry.get(fam[1], []):
                raw = socket.inet_pton(fam[0], a)
                answers += owner + struct.pack(">HHIH", qtype, 1, ttl, len(raw)) + raw
                count += 1
        if qtype == 16 and entry.get("TXT"):
            for t in entry["TXT"]:
                raw = bytes([len(t)]) + t.encode()
                answers += owner + struct.pack(">HHIH", 16, 1, ttl, len(raw)) + raw
                count += 1
    hdr = struct.pack(">HHHHHH", qid, 0x8180 | (flags & 0x0100) | rcode, 1, count, 0, 0)
    return hdr + question + answers


def late_answer(u, resp, peer, delay, hold):
    time.sleep(delay)
    while hold and not os.path.exists(hold):
        time.sleep(0.02)  # a condition (the test's go file), not a duration
    u.sendto(resp, peer)


def cmd_dns_server(a):
    zone = Zone(a.zone)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((a.addr, a.port))
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((a.addr, a.port))
    t.listen(16)

    def tcp_conn(c, peer):
        try:
            while True:
                h = c.recv(2)
                if len(h) < 2:
                    return
                n = struct.unpack(">H", h)[0]
                q = b""
                while len(q) < n:
                    d = c.recv(n - len(q))
                    if not d:
                        return
                    q += d
                r = dns_answer(zone, q, a.log, "%s:%d/tcp" % peer)
                c.sendall(struct.pack(">H", len(r)) + r)
        except (OSError, ValueError, IndexError, struct.error):
            pass
        finally:
            c.close()

    log_line(a.log, "LISTEN dns %s:%d" % (a.addr, a.port))
    while True:
        r, _, _ = select.select([u, t], [], [])
        if u in r:
            q, peer = u.recvfrom(4096)
            try:
                delays = []
                resp = dns_answer(zone, q, a.log, "%s:%d" % peer, delays)
                if delays:
                    threading.Thread(target=late_answer, args=(u, resp, peer) + delays[0],
                                     daemon=True).start()
                else:
                    u.sendto(resp, peer)
            except (ValueError, IndexError, struct.error):
                pass
        if t in r:
            c, peer = t.accept()
            threading.Thread(target=tcp_conn, args=(c, peer), daemon=True).start()


def cmd_dns_query(a):
    qid = int.from_bytes(os.urandom(2), "big")
    qname = dns_name(a.name) if not a.name_hex else bytes.fromhex(a.name_hex)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + qname + \
        struct.pack(">HH", TYPES.get(a.type.upper(), 1) if not a.type.isdigit() else int(a.type), 1)
    if a.raw_hex is not None:
        q = bytes.fromhex(a.raw_hex)
        qid = int.from_bytes(q[:2], "big") if len(q) >= 2 else 0
    try:
        if a.tcp:
            s = socket.create_connection((a.server, 53), timeout=a.timeout)
            s.sendall(struct.pack(">H", len(q)) + q)
            n = struct.unpack(">H", s.recv(2))[0]
            r = b""
            while len(r) < n:
                r += s.recv(n - len(r))
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(a.timeout)
            s.sendto(q, (a.server, 53))
            r, peer = s.recvfrom(4096)
            if peer[0] != a.server or peer[1] != 53:
                print("WRONG_SOURCE %s:%d" % peer)
                return 1
    except socket.timeout:
        print("TIMEOUT")
        return 1
    except ConnectionRefusedError:
        print("REFUSED_CONNECTION")
        return 1
    rid, flags, qd, an = struct.unpack(">HHHH", r[:8])
    if rid != qid:
        print("BAD_ID")
        return 1
    off = 12
    for _ in range(qd):
        _, off = dns_read_name(r, off)
        off += 4
    answers, ttl = [], "-"
    for _ in range(an):
        _, off = dns_read_name(r, off)
        t, c, tt, rl = struct.unpack(">HHIH", r[off:off + 10])
        off += 10
        data = r[off:off + rl]
        off += rl
        if t == 1:
            answers.append(socket.inet_ntop(socket.AF_INET, data))
        elif t == 28:
            answers.append(socket.inet_ntop(socket.AF_INET6, data))
        else:
            answers.append("type%d" % t)
        ttl = str(tt)
    print("RCODE %s ANSWERS %s TTL %s" % (RNAMES.get(flags & 15, str(flags & 15)),
                                          ",".join(answers) or "-", ttl))
    if a.hex:
        print("REPLY %s" % r[2:].hex())
    return 0


def cmd_dns_flood(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:  # as root, beyond net.core.rmem_max
        s.setsockopt(socket.SOL_SOCKET, 33, 1 << 20)  # SO_RCVBUFFORCE
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    qtype = TYPES.get(a.type.upper(), 1)
    pending = {}
    counts = {k: 0 for k in ("NOERROR", "NXDOMAIN", "REFUSED", "SERVFAIL", "OTHER")}
    sent = 0
    t0 = last = time.monotonic()
    while sent < a.count or pending:
        while sent < a.count and len(pending) < a.window:
            qid = sent & 0xffff
            name = a.name.replace("{i}", str(sent))
            q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + dns_name(name) + \
                struct.pack(">HH", qtype, 1)
            pending[qid] = True
            if sent == 0:
                t0 = last = time.monotonic()
            s.sendto(q, (a.server, 53))
            sent += 1
        s.settimeout(a.wait)
        try:
            r, peer = s.recvfrom(4096)
        except socket.timeout:
            break
        if len(r) < 12:
            continue
        rid, flags = struct.unpack(">HH", r[:4])
        if pending.pop(rid, None) is None:
            continue
        last = time.monotonic()
        name = RNAMES.get(flags & 15, "OTHER")
        counts[name if name in counts else "OTHER"] += 1
    print("SENT %d NOERROR %d NXDOMAIN %d REFUSED %d SERVFAIL %d NOANSWER %d ELAPSED_MS %d" % (
        sent, counts["NOERROR"], counts["NXDOMAIN"], counts["REFUSED"], counts["SERVFAIL"],
        len(pending) + a.count - sent, int((last - t0) * 1000) + 1))
    return 0


# ---- HTTP -------------------------------------------------------------------------------

class HTTPHandler(socketserver.StreamRequestHandler):
    def handle(self):
        srv = self.server
        served = 0  # requests answered on this connection
        while True:
            line = self.rfile.readline(65536)
            if not line:
                log_line(srv.logpath, "CLOSED %s peer=%s:%d" % (
                    srv.name, self.client_address[0], self.client_address[1]))
                return
            parts = line.decode("latin-1").rstrip("\r\n").split(" ")
            if len(parts) != 3:
                return
            method, target, version = parts
            headers = []
            while True:
                h = self.rfile.readline(65536)
                if not h or h in (b"\r\n", b"\n"):
                    break
                k, _, v = h.decode("latin-1").partition(":")
                headers.append((k.strip(), v.strip()))
            hd = {k.lower(): v for k, v in headers}
            body = b""
            cl0 = srv.cl0 and method in ("GET", "HEAD", "OPTIONS", "DELETE", "TRACE")
            if cl0:
                pass  # the body stays in the stream: the next request line comes from it
            elif "content-length" in hd:
                body = self.rfile.read(int(hd["content-length"]))
            elif hd.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    n = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if n == 0:
                        self.rfile.readline()
                        break
                    body += self.rfile.read(n)
                    self.rfile.readline()
            log_line(srv.logpath, "REQ %s %s %s host=%s auth=%s pauth=%s len=%d peer=%s:%d "
                     "fields=%s" % (
                         srv.name, method, target, hd.get("host", "-"), hd.get("authorization", "-"),
                         hd.get("proxy-authorization", "-"), len(body), self.client_address[0],
                         self.client_address[1], ",".join(k.lower() for k, _ in headers)))
            path = target.split("?")[0]
            query = target.split("?")[1] if "?" in target else ""
            if path == "/once" and served:
                # as a server whose idle timeout ends the connection just as a request
                # arrives: closed, nothing answered
                log_line(srv.logpath, "DROPPED %s %s peer=%s:%d" % (
                    method, target, self.client_address[0], self.client_address[1]))
                return
            served += 1
            params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
            if path == "/ws" and hd.get("upgrade", "").lower() == "websocket":
                self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                 b"Connection: Upgrade\r\n\r\n")
                self.wfile.flush()
                while True:
                    d = self.rfile.read1(4096)  # bytes already buffered come first
                    if not d:
                        return
                    self.connection.sendall(d)
            echo = json.dumps({"server": srv.name, "method": method, "target": target,
                               "headers": headers, "body_len": len(body)}).encode() + b"\n"
            extra = b""
            close = hd.get("connection", "").lower() == "close" or version == "HTTP/1.0"
            status = b"200 OK"
            if path == "/redirect":
                status = b"302 Found"
                extra += b"Location: " + params.get("to", "/").encode() + b"\r\n"
            if path == "/big":
                echo = b"x" * int(params.get("n", "1000"))
            if path == "/close":
                close = True
            if path == "/hop":
                # hop-by-hop response fields, one named only by Connection
                extra += (b"Connection: X-Hop-Secret\r\nX-Hop-Secret: 1\r\nKeep-Alive: timeout=5\r\n"
                          b"Proxy-Authenticate: Basic\r\nX-End-To-End: kept\r\n")
            if path == "/http10":
                self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + echo)
                self.wfile.flush()
                return
            if path == "/chunked":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                 b"%x\r\n" % len(echo) + echo + b"\r\n0\r\n\r\n")
                self.wfile.flush()
                if close:
                    return
                continue
            resp = b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n" + extra + \
                b"Content-Length: %d\r\n" % len(echo)
            if close:
                resp += b"Connection: close\r\n"
            self.wfile.write(resp + b"\r\n" + (b"" if method == "HEAD" else echo))
            self.wfile.flush()
            if close:
                return
            if path == "/bye":
                # as a server whose idle timeout ends a kept connection: answered as kept,
                # closed a moment later
                time.sleep(0.5)
                log_line(srv.logpath, "BYE %s peer=%s:%d" % (
                    srv.name, self.client_address[0], self.client_address[1]))
                return


class ThreadingServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def cmd_http_server(a):
    srv = ThreadingServer((a.addr, a.port), HTTPHandler)
    srv.logpath, srv.name, srv.cl0 = a.log, a.name, a.cl0
    log_line(a.log, "LISTEN http %s:%d" % (a.addr, a.port))
    srv.serve_forever()


def cmd_tls_server(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)

    def sni_cb(sock, name, _ctx):
        log_line(a.log, "TLS %s sni=%s" % (a.name, name))
    ctx.sni_callback = sni_cb

    class TLSServer(ThreadingServer):
        def get_request(self):
            c, peer = self.socket.accept()
            c.settimeout(10)
            return ctx.wrap_socket(c, server_side=True), peer

        def handle_error(self, request, client_address):
            pass
    srv = TLSServer((a.addr, a.port), HTTPHandler, bind_and_activate=False)
    srv.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.server_bind()
    srv.server_activate()
    srv.logpath, srv.name, srv.cl0 = a.log, a.name, a.cl0
    log_line(a.log, "LISTEN tls %s:%d" % (a.addr, a.port))
    srv.serve_forever()


def cmd_tcp_banner(a):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a.addr, a.port))
    s.listen(64)
    log_line(a.log, "LISTEN banner %s:%d" % (a.addr, a.port))

    def serve(c, peer):
        log_line(a.log, "BANNERCONN %s:%d" % peer)
        try:
            c.sendall(b"BANNER\n")
            while True:
                d = c.recv(4096)
                if not d:
                    break
                c.sendall(d)
        except OSError:
            pass
        c.close()
    while True:
        c, peer = s.accept()
        threading.Thread(target=serve, args=(c, peer), daemon=True).start()


# ---- raw clients ------------------------------------------------------------------------

def read_until_end(s, timeout, until=None):
    s.settimeout(timeout)
    data = b""
    how = "eof"
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
            if until and until in data:
                how = "until"
                break
    except socket.timeout:
        how = "timeout"
    except ConnectionResetError:
        how = "reset"
    return data, how


def cmd_raw(a):
    import codecs
    data = codecs.escape_decode(os.fsencode(a.data))[0]
    try:
        s = socket.create_connection((a.host, a.port), timeout=a.timeout)
    except OSError as e:
        print("CONNECT_FAILED %s" % e)
        return 1
    try:
        if a.slow:
            for b in data:
                s.sendall(bytes([b]))
                time.sleep(a.slow)
        else:
            s.sendall(data)
    except OSError as e:
        print("SEND_FAILED %s" % e)
    until = codecs.escape_decode(os.fsencode(a.until))[0] if a.until else None
    out, how = read_until_end(s, a.timeout, until)
    sys.stdout.write(out.decode("latin-1"))
    if out and not out.endswith(b"\n"):
        sys.stdout.write("\n")
    print("END %s" % how)
    return 0


def client_hello(sni, ech=False, alpn=None):
    ext = b""
    if sni is not None:
        n = sni.encode()
        ext += struct.pack(">HHHBH", 0, len(n) + 5, len(n) + 3, 0, len(n)) + n
    ext += struct.pack(">HHB", 43, 3, 2) + b"\x03\x04"                      # TLS 1.3
    ext += struct.pack(">HHH", 10, 4, 2) + b"\x00\x1d"                      # x25519
    ext += struct.pack(">HHH", 13, 6, 4) + b"\x04\x03\x08\x04"              # ecdsa_p256, rsa_pss
    key = os.urandom(32)
    ext += struct.pack(">HHHHH", 51, 38, 36, 0x1d, 32) + key                # key_share
    if alpn:
        p = b"".join(bytes([len(x)]) + x.encode() for x in alpn.split(","))
        ext += struct.pack(">HHH", 16, len(p) + 2, len(p)) + p
    if ech:
        ext += struct.pack(">HH", 0xfe0d, 8) + b"\x00\x00\x01\x00\x01\x01\x00\x00"
    body = b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32) + b"\x00\x02\x13\x01" + \
        b"\x01\x00" + struct.pack(">H", len(ext)) + ext
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


def cmd_tls_hello(a):
    try:
        s = socket.create_connection((a.host, a.port), timeout=a.timeout)
    except OSError as e:
        print("CONNECT_FAILED %s" % e)
        return 1
    hello = client_hello(None if a.no_sni else a.sni, a.ech, a.alpn)
    if a.record_size:
        hs = hello[5:]
        hello = b""
        for i in range(0, len(hs), a.record_size):
            part = hs[i:i + a.record_size]
            hello += b"\x16\x03\x01" + struct.pack(">H", len(part)) + part
    if a.garbage:
        hello = b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\xff" + os.urandom(64)
    if a.slow:
        for b in hello:
            s.sendall(bytes([b]))
            time.sleep(a.slow)
    else:
        s.sendall(hello)
    out, how = read_until_end(s, a.timeout)
    if out[:1] == b"\x16":
        print("SERVERHELLO")
    elif out[:1] == b"\x15":
        print("ALERT")
    elif how == "reset":
        print("RESET")
    elif how == "timeout":
        print("TIMEOUT")
    else:
        print("CLOSED")
    return 0


def cmd_hold(a):
    """Opens N connections and keeps them (idle) for S seconds, or with --until-eof until its
    standard input ends (the test says when it is done with them); prints how many opened."""
    socks = []
    for _ in range(a.n):
        try:
            s = socket.create_connection((a.host, a.port), timeout=2)
            socks.append(s)
        except OSError:
            pass
    print("OPENED %d" % len(socks), flush=True)
    if a.until_eof:
        sys.stdin.buffer.read()
    else:
        time.sleep(a.seconds)
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            d = s.recv(1)
            if d:
                alive += 1
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    print("ALIVE %d" % alive, flush=True)
    return 0


def cmd_session(a):
    """Opens named connections that stay established: NAME=http:HOST (keep-alive HTTP on port
    80), NAME=tls:HOST (HTTPS on 443 through the test CA, keep-alive), NAME=tcp:HOST:PORT (the
    banner service, then an echo). Each makes one exchange, then READY is printed; once the
    file GO exists (polled, bounded by --wait s) each is used once more and "NAME alive" or
    "NAME closed HOW" (reset, eof, or the error) is printed."""
    conns = []
    for spec in a.conns:
        name, _, rest = spec.partition("=")
        kind, _, target = rest.partition(":")
        host, _, port = target.partition(":")
        port = int(port or {"http": 80, "tls": 443}[kind])
        s = socket.create_connection((host, port), timeout=5)
        if kind == "tls":
            ctx = ssl.create_default_context(cafile=a.ca)
            s = ctx.wrap_socket(s, server_hostname=host)
        conns.append((name, kind, host, s))

    def exchange(name, kind, host, s, n):
        if kind == "tcp":
            if n == 1:
                want = b"BANNER\n"
            else:
                s.sendall(b"ping\n")
                want = b"ping\n"
        else:
            s.sendall(b"GET /%s-%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (name.encode(), n, host.encode()))
            want = b"HTTP/1.1 200"
        got = b""
        while len(got) < len(want) or (kind != "tcp" and b"\r\n\r\n" not in got):
            d = s.recv(65536)
            if not d:
                return "eof"
            got += d
            if kind != "tcp" and b"Content-Length:" in got and b"\r\n\r\n" in got:
                head, _, body = got.partition(b"\r\n\r\n")
                cl = int(head.split(b"Content-Length:")[1].split(b"\r\n")[0])
                while len(body) < cl:
                    d = s.recv(65536)
                    if not d:
                        return "eof"
                    body += d
                break
        return None if got.startswith(want) else "unexpected " + repr(got[:40])

    for name, kind, host, s in conns:
        why = exchange(name, kind, host, s, 1)
        if why:
            print("%s failed %s" % (name, why), flush=True)
            return 1
    print("READY", flush=True)
    deadline = time.time() + a.wait
    while not os.path.exists(a.go):
        if time.time() > deadline:
            print("NO GO", flush=True)
            return 1
        time.sleep(0.05)
    for name, kind, host, s in conns:
        try:
            s.settimeout(5)
            why = exchange(name, kind, host, s, 2)
        except ConnectionResetError:
            why = "reset"
        except (OSError, ssl.SSLError) as e:
            why = type(e).__name__
        print("%s %s" % (name, "alive" if why is None else "closed " + why), flush=True)
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    x = sub.add_parser("dns-server")
    x.add_argument("addr"); x.add_argument("port", type=int); x.add_argument("zone")
    x.add_argument("--log")
    x = sub.add_parser("dns-query")
    x.add_argument("server"); x.add_argument("name"); x.add_argument("type")
    x.add_argument("--tcp", action="store_true"); x.add_argument("--timeout", type=float, default=3)
    x.add_argument("--name-hex", help="the question name in wire form, hex")
    x.add_argument("--raw-hex", help="send these bytes as the whole message")
    x.add_argument("--hex", action="store_true", help="also print the reply but its id, in hex")
    x = sub.add_parser("dns-flood")
    x.add_argument("server"); x.add_argument("count", type=int); x.add_argument("name")
    x.add_argument("--type", default="A"); x.add_argument("--wait", type=float, default=3)
    x.add_argument("--window", type=int, default=64)
    x = sub.add_parser("http-server")
    x.add_argument("addr"); x.add_argument("port", type=int)
    x.add_argument("--log"); x.add_argument("--name", default="http")
    x.add_argument("--cl0", action="store_true")
    x = sub.add_parser("tls-server")
    x.add_argument("addr"); x.add_argument("port", type=int)
    x.add_argument("--cert", required=True); x.add_argument("--key", required=True)
    x.add_argument("--log"); x.add_argument("--name", default="tls")
    x.add_argument("--cl0", action="store_true")
    x = sub.add_parser("tcp-banner")
    x.add_argument("addr"); x.add_argument("port", type=int); x.add_argument("--log")
    x = sub.add_parser("raw")
    x.add_argument("host"); x.add_argument("port", type=int); x.add_argument("data")
    x.add_argument("--timeout", type=float, default=3); x.add_argument("--slow", type=float, default=0)
    x.add_argument("--until", default="")
    x = sub.add_parser("tls-hello")
    x.add_argument("host"); x.add_argument("port", type=int)
    x.add_argument("--sni", default="example.test"); x.add_argument("--no-sni", action="store_true")
    x.add_argument("--ech", action="store_true"); x.add_argument("--alpn")
    x.add_argument("--timeout", type=float, default=3)
    x.add_argument("--record-size", type=int, default=0)
    x.add_argument("--slow", type=float, default=0)
    x.add_argument("--garbage", action="store_true")
    x = sub.add_parser("hold")
    x.add_argument("host"); x.add_argument("port", type=int); x.add_argument("n", type=int)
    x.add_argument("seconds", type=float)
    x.add_argument("--until-eof", action="store_true")
    x = sub.add_parser("session")
    x.add_argument("go"); x.add_argument("conns", nargs="+")
    x.add_argument("--ca"); x.add_argument("--wait", type=float, default=60)
    a = p.parse_args()
    fn = {"dns-server": cmd_dns_server, "dns-query": cmd_dns_query, "http-server": cmd_http_server,
          "tls-server": cmd_tls_server, "tcp-banner": cmd_tcp_banner, "raw": cmd_raw,
          "tls-hello": cmd_tls_hello, "hold": cmd_hold, "dns-flood": cmd_dns_flood,
          "session": cmd_session}[a.cmd]
    sys.exit(fn(a) or 0)


if __name__ == "__main__":
    main()
