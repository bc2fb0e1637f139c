#!/usr/bin/env python3
"""tests/lib/nettool.py: tiny network clients and servers for the integration worlds.

Run inside a namespace (tests/lib/netns.sh wraps it as `al_net NS ...`). Every client is
bounded by --timeout and exits 0 when it got what it waited for, 1 otherwise (printing
"ERR <reason>"), so a test can assert both success and failure.

  tcp HOST PORT [--bind ADDR] [--send TEXT]   connect, print the first line received
  udp HOST PORT [--bind ADDR] [--payload T]   send one datagram, print the reply
  icmp HOST                                   one ICMP echo (raw socket), print "REPLY from"
  rawip HOST --proto udp|tcp [--src ADDR] [--frag] [--options] [--dport N] [--count N]
        [--tcp-flags 0x02]                    hand-made IPv4 packets (IP_HDRINCL): spoofed
                                              sources, fragments, IP options; send only
  frame IFACE --ethertype 0x86dd|0x88b5|0x0800 [--count N] [--dst-mac M] [--bytes N]
                                              raw Ethernet frames (AF_PACKET)
  serve-tcp ADDR PORT [--name N]              accept forever; answer "HELLO <name>" and
                                              print "CONN <peer>" for every connection
  serve-udp ADDR PORT [--name N]              answer every datagram, print "DGRAM <peer>"
"""
import argparse
import os
import select
import socket
import struct
import sys
import time


def err(msg):
    print("ERR " + msg, flush=True)
    return 1


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return (~s) & 0xFFFF


def cmd_tcp(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(a.timeout)
    try:
        if a.bind:
            s.bind((a.bind, 0))
        s.connect((a.host, a.port))
        if a.send:
            s.sendall(a.send.encode())
        data = b""
        while b"\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        return err("%s:%d %s" % (a.host, a.port, e))
    finally:
        s.close()
    if not data:
        return err("%s:%d closed without data" % (a.host, a.port))
    print(data.decode(errors="replace").strip(), flush=True)
    return 0


def cmd_udp(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(a.timeout)
    try:
        if a.bind:
            s.bind((a.bind, 0))
        s.sendto(a.payload.encode(), (a.host, a.port))
        data, peer = s.recvfrom(4096)
    except OSError as e:
        return err("%s:%d %s" % (a.host, a.port, e))
    finally:
        s.close()
    print("%s FROM %s:%d" % (data.decode(errors="replace").strip(), peer[0], peer[1]), flush=True)
    return 0


def cmd_icmp(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    hdr = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + b"airlock-test"
    pkt = struct.pack("!BBHHH", 8, 0, csum(hdr), ident, 1) + b"airlock-test"
    try:
        s.sendto(pkt, (a.host, 0))
        deadline = time.time() + a.timeout
        while time.time() < deadline:
            r, _, _ = select.select([s], [], [], max(0, deadline - time.time()))
            if not r:
                break
            data, peer = s.recvfrom(2048)
            ihl = (data[0] & 0xF) * 4
            typ, _, _, rid, _ = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if typ == 0 and rid == ident:
                print("REPLY from %s" % peer[0], flush=True)
                return 0
    except OSError as e:
        return err("icmp %s: %s" % (a.host, e))
    finally:
        s.close()
    return err("icmp %s: no reply" % a.host)


def ip_header(src, dst, proto, payload_len, frag=False, options=False):
    opts = b""
    if options:
        # Record Route with room for two addresses, padded to 4 bytes.
        opts = bytes([7, 11, 4]) + b"\0" * 8 + b"\0"
    ihl = 5 + len(opts) // 4
    flags_frag = 0x2000 if frag else 0  # MF
    hdr = struct.pack("!BBHHHBBH4s4s", (4 << 4) | ihl, 0, ihl * 4 + payload_len,
                      os.getpid() & 0xFFFF, flags_frag, 64, proto, 0,
                      socket.inet_aton(src), socket.inet_aton(dst)) + opts
    return hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]


def cmd_rawip(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    src = a.src
    if not src:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect((a.host, 9))
        src = probe.getsockname()[0]
        probe.close()
    if a.proto == "udp":
        proto = 17
        payload = struct.pack("!HHHH", 40000, a.dport, 8 + 4, 0) + b"test"
    else:
        proto = 6
        payload = struct.pack("!HHLLBBHHH", 40001, a.dport, 1, 0, 5 << 4, a.tcp_flags, 65535, 0, 0)
        pseudo = socket.inet_aton(src) + socket.inet_aton(a.host) + struct.pack("!BBH", 0, 6,
                                                                                len(payload))
        payload = payload[:16] + struct.pack("!H", csum(pseudo + payload)) + payload[18:]
    pkt = ip_header(src, a.host, proto, len(payload), a.frag, a.options) + payload
    try:
        for _ in range(a.count):
            s.sendto(pkt, (a.host, 0))
    except OSError as e:
        return err("rawip %s: %s" % (a.host, e))
    finally:
        s.close()
    print("SENT %d" % a.count, flush=True)
    return 0


def cmd_frame(a):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    with open("/sys/class/net/%s/address" % a.iface) as f:
        mac = bytes.fromhex(f.read().strip().replace(":", ""))
    etype = int(a.ethertype, 0)
    if etype == 0x86DD:
        # IPv6 UDP to 2001:db8::1 port 53 (documentation prefix).
        body = struct.pack("!IHBB", 6 << 28, 8, 17, 64) + socket.inet_pton(
            socket.AF_INET6, "fe80::1") + socket.inet_pton(socket.AF_INET6, "2001:db8::1")
        body += struct.pack("!HHHH", 40000, 53, 8, 0)
    else:
        body = b"airlock raw frame".ljust(46, b"\0")
    if a.bytes is not None:
        body = body[:a.bytes]
    dst = bytes.fromhex(a.dst_mac.replace(":", "")) if a.dst_mac else b"\xff" * 6
    frame = dst + mac + struct.pack("!H", etype) + body
    for _ in range(a.count):
        s.send(frame)
    s.close()
    print("SENT %d" % a.count, flush=True)
    return 0


def cmd_serve_tcp(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((a.addr, a.port))
    s.listen(64)
    print("LISTEN %s:%d" % (a.addr, a.port), flush=True)
    while True:
        c, peer = s.accept()
        print("CONN %s:%d" % peer, flush=True)
        try:
            c.sendall(("HELLO %s\n" % a.name).encode())
        except OSError:
            pass
        c.close()


def cmd_serve_udp(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((a.addr, a.port))
    print("LISTEN %s:%d" % (a.addr, a.port), flush=True)
    while True:
        data, peer = s.recvfrom(4096)
        print("DGRAM %s:%d" % peer, flush=True)
        s.sendto(("HELLO %s\n" % a.name).encode(), peer)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--timeout", type=float, default=3.0)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tcp")
    t.add_argument("host")
    t.add_argument("port", type=int)
    t.add_argument("--bind")
    t.add_argument("--send")
    u = sub.add_parser("udp")
    u.add_argument("host")
    u.add_argument("port", type=int)
    u.add_argument("--bind")
    u.add_argument("--payload", default="query")
    i = sub.add_parser("icmp")
    i.add_argument("host")
    r = sub.add_parser("rawip")
    r.add_argument("host")
    r.add_argument("--proto", choices=["udp", "tcp"], default="udp")
    r.add_argument("--src")
    r.add_argument("--dport", type=int, default=53)
    r.add_argument("--frag", action="store_true")
    r.add_argument("--options", action="store_true")
    r.add_argument("--count", type=int, default=1)
    r.add_argument("--tcp-flags", type=lambda v: int(v, 0), default=0x02, help="default SYN")
    f = sub.add_parser("frame")
    f.add_argument("iface")
    f.add_argument("--ethertype", default="0x88b5")
    f.add_argument("--count", type=int, default=1)
    f.add_argument("--dst-mac", help="default broadcast")
    f.add_argument("--bytes", type=int, help="truncate the payload to this many bytes")
    st = sub.add_parser("serve-tcp")
    st.add_argument("addr")
    st.add_argument("port", type=int)
    st.add_argument("--name", default="server")
    su = sub.add_parser("serve-udp")
    su.add_argument("addr")
    su.add_argument("port", type=int)
    su.add_argument("--name", default="server")
    a = p.parse_args()
    fn = {"tcp": cmd_tcp, "udp": cmd_udp, "icmp": cmd_icmp, "rawip": cmd_rawip,
          "frame": cmd_frame, "serve-tcp": cmd_serve_tcp, "serve-udp": cmd_serve_udp}[a.cmd]
    sys.exit(fn(a))


if __name__ == "__main__":
    main()
