# bench/kernel_bench.py: what a Python context costs: the kernel's start (spawn to ready), its
# memory (VmRSS once ready, and after the measured executions) and the latency of one
# execution (request to "done", p50 and p90) for an expression and for a print.
#
# Kernels compared in the same run, interleaved (A B A B ...):
#   airlock      vmm/guest/lib/airlock_kernel.py (the kernel the agent runs)
#   ref          another airlock_kernel.py (--ref DIR: bench/kernel_bench.sh --ref REV)
#   javascript   vmm/guest/lib/airlock_kernel.js, and typescript (--typescript), when the
#                Python's root file system has node
#   ipykernel    Jupyter's ipykernel (python3 -m ipykernel_launcher) driven by jupyter_client
#                over ZeroMQ, as a Jupyter server drives it (only when importable)
# Run by bench/kernel_bench.sh in the code-interpreter-v1 template's Python. One JSON object
# per line: {"bench":"kernel","kernel":K,"metric":M,"value":V,"unit":U}.
import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_kernel  # noqa: E402  (the kernel's own test driver: fd 3/4 protocol)

AIRLOCK_KERNEL = test_kernel.KERNEL


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Airlock:
    PRINT = "print(x)"

    def __init__(self, path, argv=None):
        test_kernel.KERNEL = path
        t0 = time.perf_counter()
        self.k = test_kernel.Kernel(argv=argv)
        self.start_ms = (time.perf_counter() - t0) * 1000
        self.pid = self.k.p.pid

    def run(self, code):
        msgs = self.k.run(code)
        assert not test_kernel.errors(msgs), msgs

    def close(self):
        self.k.close()


class AirlockJS(Airlock):
    PRINT = "console.log(x)"

    def __init__(self, typescript=False):
        js = os.path.join(os.path.dirname(AIRLOCK_KERNEL), "airlock_kernel.js")
        super().__init__(js, ["node", js] + (["--typescript"] if typescript else []))


class IPyKernel:
    PRINT = "print(x)"

    def __init__(self):
        from jupyter_client import KernelManager
        t0 = time.perf_counter()
        self.km = KernelManager(kernel_name="python3")
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.km.start_kernel()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.start_ms = (time.perf_counter() - t0) * 1000
        self.pid = self.km.provisioner.process.pid

    def run(self, code):
        mid = self.kc.execute(code)
        while True:
            m = self.kc.get_iopub_msg(timeout=60)
            if (m["parent_header"].get("msg_id") == mid and m["msg_type"] == "status"
                    and m["content"]["execution_state"] == "idle"):
                return

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--ref", help="directory holding a reference airlock_kernel.py")
    a = ap.parse_args()
    kinds = {"airlock": lambda: Airlock(AIRLOCK_KERNEL)}
    if a.ref:
        kinds["ref"] = lambda: Airlock(os.path.join(a.ref, "airlock_kernel.py"))
    if shutil.which("node"):
        kinds["javascript"] = AirlockJS
        kinds["typescript"] = lambda: AirlockJS(typescript=True)
    try:
        import ipykernel  # noqa: F401
        import jupyter_client  # noqa: F401
        kinds["ipykernel"] = IPyKernel
    except ImportError:
        print("kernel_bench: no ipykernel/jupyter_client in this Python: not measured", file=sys.stderr)
    samples = {k: {"start_ms": [], "rss_ready_mib": [], "rss_after_mib": [], "expr_us": [], "print_us": []}
               for k in kinds}
    names = list(kinds)
    for r in range(a.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            k = kinds[name]()
            s = samples[name]
            s["start_ms"].append(k.start_ms)
            s["rss_ready_mib"].append(rss_kib(k.pid) / 1024)
            k.run("x = 1")  # warm up: the first cell imports what executions need
            for _ in range(a.execs):
                t0 = time.perf_counter()
                k.run("x + 1")
                s["expr_us"].append((time.perf_counter() - t0) * 1e6)
                t0 = time.perf_counter()
                k.run(k.PRINT)
                s["print_us"].append((time.perf_counter() - t0) * 1e6)
            s["rss_after_mib"].append(rss_kib(k.pid) / 1024)
            k.close()
    for name in names:
        s = samples[name]
        out = [("start_ms", statistics.median(s["start_ms"]), "ms"),
               ("rss_ready_mib", statistics.median(s["rss_ready_mib"]), "MiB"),
               ("rss_after_mib", statistics.median(s["rss_after_mib"]), "MiB"),
               ("expr_p50_us", pct(s["expr_us"], 0.5), "us"),
               ("expr_p90_us", pct(s["expr_us"], 0.9), "us"),
               ("print_p50_us", pct(s["print_us"], 0.5), "us")]
        for metric, v, unit in out:
            print(json.dumps({"bench": "kernel", "kernel": name, "metric": metric,
                              "value": round(v, 1), "unit": unit}))


if __name__ == "__main__":
    main()
