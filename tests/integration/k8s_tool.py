#!/usr/bin/env python3
"""tests/integration/k8s_tool.py: what cluster_manifests.sh needs of Kubernetes manifests,
without a Kubernetes server.

  k8s_tool.py parse FILE...
      every file is YAML (all its documents); prints "parsed N files, M documents"
  k8s_tool.py check RENDERED.yaml
      the objects `kubectl kustomize` rendered hold together: selectors match the pods'
      labels, Services and PodDisruptionBudgets select a workload, every container has
      probes on a port it declares, resource requests and an explicit securityContext,
      every ConfigMap/Secret a pod names exists with the keys it names; one line per
      problem, exit 1 if any
  k8s_tool.py pod RENDERED.yaml KIND/NAME ROOT [--field PATH=VALUE]... [--set CM/KEY=VALUE]...
          [--bin DIR=HOSTDIR]
      lays out the pod's volumes under ROOT as the kubelet would (ConfigMap and Secret files
      with their modes, emptyDir and hostPath directories) and prints the shell command of
      its first container: env -i, the pod's env (valueFrom resolved, $(VAR) expanded), the
      securityContext as setpriv options, the command; every path under a mount rewritten
      to ROOT (in argv, env and the mounted configuration files), image binaries under DIR
      to HOSTDIR. ROOT/pod.json holds the same and the probes. --field gives the downward
      API's values (spec.nodeName, status.podIP), --set a ConfigMap key's value in place of
      the rendered one (the test's own database), --argv0 and --env K=V replace the binary
      and add a variable (what the test cannot run as it is).
"""
import base64
import json
import os
import re
import shlex
import sys

import yaml

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def pod_of(obj):
    return obj["spec"]["template"]


def containers(obj):
    return pod_of(obj)["spec"].get("containers", [])


def cmd_parse(files):
    docs = 0
    for p in files:
        try:
            docs += len(load(p))
        except yaml.YAMLError as e:
            print(f"{p}: not YAML: {e}")
            return 1
    print(f"parsed {len(files)} files, {docs} documents")
    return 0


def subset(sel, labels):
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def cmd_check(rendered):
    objs = load(rendered)
    probs = []
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    workloads = [o for o in objs if o["kind"] in WORKLOADS]
    if not workloads:
        probs.append("no workload rendered")
    for w in workloads:
        n = f"{w['kind']}/{w['metadata']['name']}"
        sel = w["spec"].get("selector", {}).get("matchLabels", {})
        labels = pod_of(w).get("metadata", {}).get("labels", {})
        if not subset(sel, labels):
            probs.append(f"{n}: selector {sel} does not match its pods' labels {labels}")
        spec = pod_of(w)["spec"]
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        vols.update({t["metadata"]["name"]: {"name": t["metadata"]["name"]}
                     for t in w["spec"].get("volumeClaimTemplates", [])})
        if w["kind"] == "DaemonSet" and "hostNetwork" not in spec:
            probs.append(f"{n}: hostNetwork is not said (false or true, with why)")
        for c in spec.get("containers", []):
            cn = f"{n} container {c['name']}"
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for pk in ("readinessProbe", "livenessProbe"):
                pr = c.get(pk)
                if not pr:
                    probs.append(f"{cn}: no {pk}")
                    continue
                hg = pr.get("httpGet")
                if hg and hg["port"] not in ports and hg["port"] not in ports.values():
                    probs.append(f"{cn}: {pk} on port {hg['port']}, which it does not declare")
                if not hg and not pr.get("exec") and not pr.get("tcpSocket"):
                    probs.append(f"{cn}: {pk} has no handler")
            req = c.get("resources", {}).get("requests", {})
            if not req.get("cpu") or not req.get("memory"):
                probs.append(f"{cn}: no cpu and memory requests")
            sc = c.get("securityContext")
            if not sc or "privileged" not in sc or "allowPrivilegeEscalation" not in sc:
                probs.append(f"{cn}: securityContext must say privileged and "
                             "allowPrivilegeEscalation")
            elif not sc["privileged"] and "ALL" not in sc.get("capabilities", {}).get("drop", []):
                probs.append(f"{cn}: an unprivileged container must drop ALL capabilities")
            for m in c.get("volumeMounts", []):
                if m["name"] not in vols:
                    probs.append(f"{cn}: mounts volume {m['name']}, which the pod lacks")
            for e in c.get("env", []):
                vf = e.get("valueFrom", {})
                for ref, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                    r = vf.get(ref)
                    if r and r["key"] not in (by_kind.get(kind, {}).get(r["name"], {})
                                              .get("data") or {}):
                        probs.append(f"{cn}: env {e['name']} names {kind} {r['name']} key "
                                     f"{r['key']}, which is not rendered")
        for v in vols.values():
            for src, kind, key in (("configMap", "ConfigMap", "name"),
                                   ("secret", "Secret", "secretName")):
                if src in v and v[src][key] not in by_kind.get(kind, {}):
                    probs.append(f"{n}: volume {v['name']} names {kind} {v[src][key]}, "
                                 "which is not rendered")
    for kind in ("Service", "PodDisruptionBudget"):
        for name, o in by_kind.get(kind, {}).items():
            sel = o["spec"]["selector"]
            sel = sel.get("matchLabels", sel) if kind == "PodDisruptionBudget" else sel
            hits = [w for w in workloads
                    if subset(sel, pod_of(w).get("metadata", {}).get("labels", {}))]
            if not hits:
                probs.append(f"{kind}/{name}: selects no workload ({sel})")
            if kind == "Service":
                for p in o["spec"]["ports"]:
                    tp = p.get("targetPort", p["port"])
                    if hits and not any(tp in {q.get("name") for q in c.get("ports", [])} |
                                        {q["containerPort"] for q in c.get("ports", [])}
                                        for w in hits for c in containers(w)):
                        probs.append(f"Service/{name}: targetPort {tp} is no port of its pods")
    for p in probs:
        print(p)
    return 1 if probs else 0


def cmd_pod(argv):
    rendered, target, root = argv[:3]
    fields, sets, bins, extra_env, argv0 = {}, {}, [], {}, None
    it = iter(argv[3:])
    for a in it:
        v = next(it)
        if a == "--field":
            k, _, val = v.partition("=")
            fields[k] = val
        elif a == "--set":
            k, _, val = v.partition("=")
            sets[k] = val
        elif a == "--argv0":
            argv0 = v
        elif a == "--env":
            k, _, val = v.partition("=")
            extra_env[k] = val
        elif a == "--bin":
            d, _, h = v.partition("=")
            bins.append((d.rstrip("/") + "/", h.rstrip("/") + "/"))
        else:
            sys.exit(f"k8s_tool: unknown option {a}")
    objs = load(rendered)
    kind, _, name = target.partition("/")
    wl = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    if not wl:
        sys.exit(f"k8s_tool: {target} is not rendered")
    spec = pod_of(wl[0])["spec"]
    c = spec["containers"][0]

    def data(kind, name):
        o = [x for x in objs if x["kind"] == kind and x["metadata"]["name"] == name]
        if not o:
            sys.exit(f"k8s_tool: {kind} {name} is not rendered")
        d = dict(o[0].get("data") or {})
        if kind == "Secret":
            d = {k: base64.b64decode(v).decode() for k, v in d.items()}
        for k in list(d):
            # --set names a generated ConfigMap without kustomize's hash suffix.
            over = sets.get(f"{name}/{k}", sets.get(f"{name.rsplit('-', 1)[0]}/{k}"))
            if kind == "ConfigMap" and over is not None:
                d[k] = over
        return d

    mounts = sorted(c.get("volumeMounts", []), key=lambda m: -len(m["mountPath"]))

    def host(path):
        for d, h in bins:
            if path.startswith(d):
                return h + path[len(d):]
        return root + path

    # One pass over all mount paths (longest first), so that no rewritten path is rewritten
    # again (ROOT may lie under a mount path such as /tmp).
    mount_re = re.compile(r"(?<![\w/.])(" + "|".join(re.escape(m["mountPath"]) for m in mounts)
                          + r")(?=/|\b|$)") if mounts else None

    def remap(s):
        return mount_re.sub(lambda mo: root + mo.group(1), s) if mount_re else s

    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for m in c.get("volumeMounts", []):
        v = vols[m["name"]]
        dst = root + m["mountPath"]
        os.makedirs(dst, exist_ok=True)
        if "configMap" in v or "secret" in v:
            sec = "secret" in v
            src = v["secret"] if sec else v["configMap"]
            d = data("Secret" if sec else "ConfigMap", src["secretName" if sec else "name"])
            mode = src.get("defaultMode", 0o644)
            for k, val in d.items():
                p = os.path.join(dst, k)
                with open(p, "w") as f:
                    f.write(val if sec else remap(val))
                os.chmod(p, mode)
        elif "hostPath" in v:
            # The host's directory is the test's: ROOT/host/PATH, seen at the mount path.
            hp = root + "/host" + v["hostPath"]["path"]
            os.makedirs(hp, exist_ok=True)
            os.rmdir(dst)
            os.symlink(hp, dst)
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            val = re.sub(r"\$\((\w+)\)", lambda mo: env.get(mo.group(1), mo.group(0)), e["value"])
        else:
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                fp = vf["fieldRef"]["fieldPath"]
                if fp not in fields:
                    sys.exit(f"k8s_tool: env {e['name']} needs --field {fp}=VALUE")
                val = fields[fp]
            elif "configMapKeyRef" in vf:
                r = vf["configMapKeyRef"]
                val = data("ConfigMap", r["name"])[r["key"]]
                if val in sets.values():
                    env[e["name"]] = val  # the test's own value: a host path already
                    continue
            else:
                r = vf["secretKeyRef"]
                val = data("Secret", r["name"])[r["key"]].strip()
        env[e["name"]] = remap(val)
    argv = [host(c["command"][0])] + [remap(a) for a in c["command"][1:] + c.get("args", [])]
    probes = {}
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    for pk in ("startupProbe", "readinessProbe", "livenessProbe"):
        hg = c.get(pk, {}).get("httpGet")
        if hg:
            probes[pk] = {"path": hg["path"], "port": ports.get(hg["port"], hg["port"])}
    sc = c.get("securityContext", {})
    if argv0:
        argv[0] = argv0
    env.update(extra_env)
    with open(os.path.join(root, "pod.json"), "w") as f:
        json.dump({"argv": argv, "env": env, "securityContext": sc,
                   "hostNetwork": spec.get("hostNetwork", False), "probes": probes}, f)
    # The container's process as the securityContext makes it: its uid and gid, its
    # capabilities (none beyond "add" once "drop: ALL"), no_new_privs when it may not
    # escalate. A privileged container keeps all of root's.
    prefix = []
    if not sc.get("privileged"):
        caps = sc.get("capabilities", {})
        keep = "-all" + "".join(",+" + x.lower() for x in caps.get("add", []))
        if "ALL" not in caps.get("drop", []):
            sys.exit("k8s_tool: an unprivileged container that keeps the default capabilities")
        prefix = ["setpriv", "--reuid", str(sc.get("runAsUser", 0)),
                  "--regid", str(sc.get("runAsGroup", sc.get("runAsUser", 0))), "--clear-groups",
                  "--bounding-set", keep, "--inh-caps", "-all"]
        if sc.get("allowPrivilegeEscalation") is False:
            prefix.append("--no-new-privs")
    # The container's environment is only what the pod gives it (and the image's PATH).
    cmd = ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"] + \
        [f"{k}={v}" for k, v in env.items()] + prefix + argv
    print(" ".join(shlex.quote(x) for x in cmd))
    return 0


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd = sys.argv[1]
    if cmd == "parse":
        return cmd_parse(sys.argv[2:])
    if cmd == "check":
        return cmd_check(sys.argv[2])
    if cmd == "pod":
        return cmd_pod(sys.argv[2:])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
