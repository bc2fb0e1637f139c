#!/usr/bin/env python3
"""tests/integration/fwd_tool.py: servers run inside a sandbox, and clients run next to
airlockd, for the forwarded-port test (cp_forward.sh). Standard library only (the sandbox
templates have python3 and nothing more).

  ws-server PORT          WebSocket echo on 127.0.0.1:PORT (text and binary frames echoed,
                          close answered): the kind of server a dev server's live reload is
  cut-server PORT         answers every request with 1 MiB of a 10 MiB body and then drops
                          the connection, as a server that dies mid-download does:
                          /length announces Content-Length, /chunked sends chunks
  ws-client ADDR HOST [HEADER: VALUE]...
                          WebSocket handshake to ADDR (host:port) with Host HOST and the
                          headers, sends two messages, checks the echoes and closes;
                          prints "WS OK" on success
"""
import base64
import hashlib
import os
import socket
import socketserver
import struct
import sys
import threading

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise EOFError("connection closed in the header block")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, rest


def recv_exact(sock, n, buf):
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed in a frame")
        buf += chunk
    return buf[:n], buf[n:]


def read_frame(sock, buf):
    hdr, buf = recv_exact(sock, 2, buf)
    op = hdr[0] & 0x0F
    masked = hdr[1] & 0x80
    ln = hdr[1] & 0x7F
    if ln == 126:
        ext, buf = recv_exact(sock, 2, buf)
        ln = struct.unpack(">H", ext)[0]
    elif ln == 127:
        ext, buf = recv_exact(sock, 8, buf)
        ln = struct.unpack(">Q", ext)[0]
    mask = b""
    if masked:
        mask, buf = recv_exact(sock, 4, buf)
    payload, buf = recv_exact(sock, ln, buf)
    if masked:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return op, payload, buf


def frame(op, payload, mask):
    head = bytes([0x80 | op])
    ln = len(payload)
    mbit = 0x80 if mask else 0
    if ln < 126:
        head += bytes([mbit | ln])
    elif ln < 65536:
        head += bytes([mbit | 126]) + struct.pack(">H", ln)
    else:
        head += bytes([mbit | 127]) + struct.pack(">Q", ln)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class WsHandler(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        line, h, buf = read_head(s)
        if h.get("upgrade", "").lower() != "websocket" or "sec-websocket-key" not in h:
            s.sendall(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n")
            return
        accept = base64.b64encode(hashlib.sha1(h["sec-websocket-key"].encode() + WS_GUID).digest())
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        while True:
            op, payload, buf = read_frame(s, buf)
            if op == 8:
                s.sendall(frame(8, payload, False))
                return
            if op in (1, 2):
                s.sendall(frame(op, payload, False))


class CutHandler(socketserver.BaseRequestHandler):
    def handle(self):
        s = self.request
        line, _, _ = read_head(s)
        piece = b"c" * 65536
        if " /chunked " in line:
            s.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(16):
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        else:
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (10 << 20))
            for _ in range(16):
                s.sendall(piece)
        s.shutdown(socket.SHUT_RDWR)  # and nothing more: the server "died"


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(handler, port):
    srv = Server(("127.0.0.1", port), handler)
    print("LISTEN", port, flush=True)
    srv.serve_forever()


def ws_client(addr, host, extra):
    h, p = addr.rsplit(":", 1)
    s = socket.create_connection((h, int(p)), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    req = ("GET /live HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n" % (host, key))
    for e in extra:
        req += e + "\r\n"
    s.sendall((req + "\r\n").encode())
    line, hdrs, buf = read_head(s)
    if " 101 " not in line:
        sys.exit("no switch: %s %s" % (line, hdrs))
    want = base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()
    if hdrs.get("sec-websocket-accept") != want:
        sys.exit("bad Sec-WebSocket-Accept: %r" % hdrs.get("sec-websocket-accept"))
    for msg in (b"hello airlock", os.urandom(70000)):
        op = 1 if msg.startswith(b"hello") else 2
        s.sendall(frame(op, msg, True))
        rop, payload, buf = read_frame(s, buf)
        if rop != op or payload != msg:
            sys.exit("echo mismatch (op %d, %d bytes)" % (rop, len(payload)))
    s.sendall(frame(8, struct.pack(">H", 1000), True))
    rop, _, buf = read_frame(s, buf)
    if rop != 8:
        sys.exit("no close frame back")
    print("WS OK")


def main():
    cmd = sys.argv[1]
    if cmd == "ws-server":
        serve(WsHandler, int(sys.argv[2]))
    elif cmd == "cut-server":
        serve(CutHandler, int(sys.argv[2]))
    elif cmd == "ws-client":
        ws_client(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
