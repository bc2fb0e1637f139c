#!/usr/bin/env python3
"""tests/integration/oci_tool.py: OCI image layouts and a tampering registry for
templates_oci.sh (nothing here reaches a network beyond the test's own namespaces).

  oci_tool.py layout DIR TAG KIND      write an image into the OCI layout DIR (made if absent)
      KIND: hostile-dotdot, hostile-abs, hostile-symlink-abs, hostile-symlink-escape,
            hostile-hardlink, hostile-device, bomb, zstd, opaque (whiteout + opaque dir over
            a lower layer), devnull (a device node under /dev: skipped)
  oci_tool.py multiarch DIR SRCTAG TAG  add an index (linux/amd64 = SRCTAG's manifest,
                                        linux/arm64 = a copy) to DIR under TAG
  oci_tool.py serve ADDR PORT DIR CERT KEY   a registry that serves DIR's images, with
      /v2/tamper/manifests/*   the image "base", whose layer bytes are altered
      /v2/huge/manifests/*     a manifest of 8 MiB
"""
import gzip
import hashlib
import http.server
import io
import json
import os
import ssl
import subprocess
import sys
import tarfile

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def put_blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d


def get_blob(layout, digest):
    with open(os.path.join(layout, "blobs", "sha256", digest[7:]), "rb") as f:
        return f.read()


def index_json(layout):
    p = os.path.join(layout, "index.json")
    if os.path.exists(p):
        return json.load(open(p))
    os.makedirs(layout, exist_ok=True)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return {"schemaVersion": 2, "manifests": []}


def add_ref(layout, tag, desc):
    idx = index_json(layout)
    idx["manifests"] = [m for m in idx["manifests"]
                        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag]
    desc = dict(desc)
    desc["annotations"] = {"org.opencontainers.image.ref.name": tag}
    idx["manifests"].append(desc)
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(idx, f)


def tar_bytes(entries):
    """entries: (name, kind, extra) with kind file/dir/symlink/hardlink/chr/fifo."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, extra in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            if kind == "file":
                data = extra if isinstance(extra, bytes) else extra.encode()
                ti.size = len(data)
                ti.mode = 0o644
                t.addfile(ti, io.BytesIO(data))
                continue
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, extra
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, extra
            elif kind == "chr":
                ti.type, ti.devmajor, ti.devminor, ti.mode = tarfile.CHRTYPE, 1, 3, 0o666
            t.addfile(ti)
    return bio.getvalue()


def write_image(layout, tag, layers, arch="amd64"):
    """layers: list of (uncompressed tar bytes, 'gzip'|'zstd'|'gzip-raw' compressed bytes)."""
    ldescs, diff_ids = [], []
    for raw, comp in layers:
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        if comp == "zstd":
            blob = subprocess.run(["zstd", "-q", "-c", "-3"], input=raw, check=True,
                                  stdout=subprocess.PIPE).stdout
            mt = "application/vnd.oci.image.layer.v1.tar+zstd"
        else:
            blob = gzip.compress(raw, 6, mtime=0) if comp == "gzip" else comp
            mt = "application/vnd.oci.image.layer.v1.tar+gzip"
        ldescs.append({"mediaType": mt, "digest": put_blob(layout, blob), "size": len(blob)})
    config = json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/bin", "HOSTILE=1"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()
    man = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": put_blob(layout, config), "size": len(config)},
        "layers": ldescs,
    }).encode()
    desc = {"mediaType": OCI_MANIFEST, "digest": put_blob(layout, man), "size": len(man)}
    add_ref(layout, tag, desc)
    return desc


BASE = [("bin", "dir", None), ("bin/hello", "file", "hello\n"), ("etc", "dir", None),
        ("etc/passwd", "file", "root:x:0:0:root:/root:/bin/sh\n")]


def kind_layers(kind):
    if kind == "hostile-dotdot":
        return [(tar_bytes(BASE + [("../escaped-dotdot", "file", "x")]), "gzip")]
    if kind == "hostile-abs":
        return [(tar_bytes(BASE + [("/escaped-abs", "file", "x")]), "gzip")]
    if kind == "hostile-symlink-abs":
        # an absolute link to the host's /tmp, then a file written "through" it
        return [(tar_bytes(BASE + [("tmpl", "symlink", "/tmp"),
                                   ("tmpl/escaped-symlink-abs", "file", "x")]), "gzip")]
    if kind == "hostile-symlink-escape":
        # the link in a lower layer, the write in the next one
        return [(tar_bytes(BASE + [("up", "symlink", "../../../../../../tmp")]), "gzip"),
                (tar_bytes([("up/escaped-symlink-escape", "file", "x")]), "gzip")]
    if kind == "hostile-hardlink":
        return [(tar_bytes(BASE + [("etc/shadow-of-host", "hardlink", "../../../../etc/shadow")]),
                 "gzip")]
    if kind == "hostile-hardlink-abs":
        return [(tar_bytes(BASE + [("etc/shadow-of-host", "hardlink", "/etc/shadow")]), "gzip")]
    if kind == "hostile-device":
        return [(tar_bytes(BASE + [("etc/mem", "chr", None)]), "gzip")]
    if kind == "devnull":
        return [(tar_bytes(BASE + [("dev", "dir", None), ("dev/null", "chr", None)]), "gzip")]
    if kind == "bomb":
        zeros = b"\0" * (64 << 20)
        entries = tar_bytes([("zeros", "file", zeros)])
        return [(entries, "gzip")]
    if kind == "zstd":
        return [(tar_bytes(BASE + [("etc/zstd-was-here", "file", "zstd\n")]), "zstd")]
    if kind == "opaque":
        lower = tar_bytes(BASE + [("opt", "dir", None), ("opt/old1", "file", "1"),
                                  ("opt/old2", "file", "2"), ("etc/gone", "file", "g")])
        upper = tar_bytes([("opt", "dir", None), ("opt/new", "file", "n"),
                           ("opt/.wh..wh..opq", "file", ""), ("etc/.wh.gone", "file", "")])
        return [(lower, "gzip"), (upper, "gzip")]
    raise SystemExit("unknown kind " + kind)


def cmd_layout(layout, tag, kind):
    write_image(layout, tag, kind_layers(kind))


def cmd_multiarch(layout, src, tag):
    idx = index_json(layout)
    amd = [m for m in idx["manifests"]
           if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == src][0]
    man = json.loads(get_blob(layout, amd["digest"]))
    cfg = json.loads(get_blob(layout, man["config"]["digest"]))
    cfg["architecture"] = "arm64"
    cb = json.dumps(cfg).encode()
    man["config"] = dict(man["config"], digest=put_blob(layout, cb), size=len(cb))
    mb = json.dumps(man).encode()
    arm = {"mediaType": OCI_MANIFEST, "digest": put_blob(layout, mb), "size": len(mb),
           "platform": {"architecture": "arm64", "os": "linux"}}
    amd_d = {"mediaType": OCI_MANIFEST, "digest": amd["digest"], "size": amd["size"],
             "platform": {"architecture": "amd64", "os": "linux"}}
    ib = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                     "manifests": [arm, amd_d]}).encode()
    add_ref(layout, tag, {"mediaType": OCI_INDEX, "digest": put_blob(layout, ib), "size": len(ib)})


def cmd_serve(addr, port, layout, cert, key):
    idx = index_json(layout)
    refs = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in idx["manifests"]}
    base = refs["base"]
    man = json.loads(get_blob(layout, base["digest"]))
    tampered = {man["layers"][0]["digest"]}

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            sys.stderr.write("tamper: " + (a[0] % a[1:]) + "\n")

        def send(self, code, body, ctype="application/octet-stream"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            p = self.path.split("?")[0]
            parts = p.split("/")
            if p == "/v2/":
                return self.send(200, b"{}", "application/json")
            if len(parts) >= 5 and parts[-2] == "manifests":
                repo = "/".join(parts[2:-2])
                if repo == "huge":
                    return self.send(200, b" " * (8 << 20), OCI_MANIFEST)
                if repo == "tamper":
                    return self.send(200, get_blob(layout, base["digest"]), OCI_MANIFEST)
            if len(parts) >= 5 and parts[-2] == "blobs":
                d = parts[-1]
                data = get_blob(layout, d)
                if d in tampered:
                    data = bytearray(data)
                    data[len(data) // 2] ^= 0xff
                    data = bytes(data)
                return self.send(200, data)
            return self.send(404, b'{"errors":[{"code":"NAME_UNKNOWN","message":"no"}]}',
                             "application/json")

    srv = http.server.ThreadingHTTPServer((addr, int(port)), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("LISTEN", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    c = sys.argv[1]
    if c == "layout":
        cmd_layout(*sys.argv[2:5])
    elif c == "multiarch":
        cmd_multiarch(*sys.argv[2:5])
    elif c == "serve":
        cmd_serve(*sys.argv[2:7])
    else:
        raise SystemExit(__doc__)
