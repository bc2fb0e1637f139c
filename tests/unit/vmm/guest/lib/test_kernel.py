# Unit tests of the agent's Python kernel (vmm/guest/lib/airlock_kernel.py) through its own
# wire protocol (fd 3 requests, fd 4 messages), as airlock-agent drives it: IPython
# semantics (display, magics, shell escapes, _ and Out, formatters), errors, streams and
# their order, interrupts, per-execution environment. Run by tests/unit/vmm/guest/lib/run-py.
import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import unittest

LIB = os.environ.get("AIRLOCK_KERNEL_LIB") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "..", "vmm", "guest", "lib")
KERNEL = os.path.join(LIB, "airlock_kernel.py")


class Kernel:
    """One kernel process (argv: another kernel speaking the same protocol); run(code)
    returns its messages up to "done"."""

    def __init__(self, cwd=None, env=None, argv=None):
        req_r, self.req_w = os.pipe()
        self.msg_r, msg_w = os.pipe()
        e = dict(os.environ)
        e.update(env or {})
        # the kernel's fds 3 and 4, as the agent arranges them
        self.p = subprocess.Popen(
            argv or [sys.executable, "-X", "utf8", KERNEL], cwd=cwd or tempfile.gettempdir(), env=e,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(3, 4), preexec_fn=lambda: (os.dup2(req_r, 3), os.dup2(msg_w, 4)))
        os.close(req_r)
        os.close(msg_w)
        self.out = []
        self.drains = [threading.Thread(target=self._drain, args=(st,), daemon=True)
                       for st in (self.p.stdout, self.p.stderr)]
        for t in self.drains:
            t.start()
        first, said = self._read(), []
        while first.get("type") in ("stdout", "stderr"):
            said.append(first["text"])
            first = self._read()
        assert first == {"type": "ready"}, (first, "".join(said))

    def _drain(self, stream):
        with stream:
            for chunk in iter(lambda: stream.read1(65536), b""):
                self.out.append(chunk)

    def _read_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = os.read(self.msg_r, n - len(buf))
            if not chunk:
                raise EOFError("the kernel closed its message pipe")
            buf += chunk
        return buf

    def _read(self):
        (n,) = struct.unpack(">I", self._read_exact(4))
        return json.loads(self._read_exact(n))

    def send(self, code, env_vars=None):
        body = json.dumps({"op": "execute", "code": code, "env_vars": env_vars}).encode()
        os.write(self.req_w, struct.pack(">I", len(body)) + body)

    def collect(self):
        msgs = []
        while True:
            m = self._read()
            if m["type"] == "done":
                return msgs
            msgs.append(m)

    def run(self, code, env_vars=None):
        self.send(code, env_vars)
        return self.collect()

    def close(self):
        os.close(self.req_w)
        try:
            self.p.wait(timeout=60)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
            os.close(self.msg_r)
            for t in self.drains:
                t.join()


def results(msgs):
    return [m for m in msgs if m["type"] == "result"]


def main_text(msgs):
    r = [m for m in results(msgs) if m["is_main_result"]]
    return r[0]["text"] if r else None


def stdout(msgs):
    return "".join(m["text"] for m in msgs if m["type"] == "stdout")


def errors(msgs):
    return [m for m in msgs if m["type"] == "error"]


class IPythonSemantics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.k = Kernel()

    @classmethod
    def tearDownClass(cls):
        cls.k.close()

    def test_execution_count_and_main_result(self):
        m = self.k.run("6 * 7")
        self.assertEqual(m[0]["type"], "number_of_executions")
        n = m[0]["execution_count"]
        self.assertEqual(main_text(m), "42")
        m2 = self.k.run("x = 1")
        self.assertEqual(m2[0]["execution_count"], n + 1)
        self.assertEqual(results(m2), [])

    def test_underscore_and_out(self):
        m = self.k.run("21 * 2")
        n = m[0]["execution_count"]
        self.assertEqual(main_text(self.k.run("_ + 1")), "43")
        self.assertEqual(main_text(self.k.run("Out[%d] * 10" % n)), "420")
        self.assertEqual(main_text(self.k.run("_%d" % n)), "42")
        self.assertEqual(main_text(self.k.run("In[%d]" % n)), "'21 * 2'")

    def test_display_from_ipython_display(self):
        m = self.k.run("from IPython.display import display, HTML, Markdown\n"
                       "print('before')\n"
                       "display(HTML('<b>hi</b>'))\n"
                       "display(Markdown('**md**'), {'k': 1})\n"
                       "print('after')\n"
                       "'main'")
        kinds = [(x["type"], x.get("text")) for x in m[1:]]
        self.assertEqual(kinds[0], ("stdout", "before\n"))
        self.assertEqual(kinds[-2], ("stdout", "after\n"))
        res = results(m)
        self.assertEqual(len(res), 4)
        self.assertEqual(res[0]["html"], "<b>hi</b>")
        self.assertFalse(res[0]["is_main_result"])
        self.assertEqual(res[1]["markdown"], "**md**")
        self.assertEqual(res[2]["json"], {"k": 1})  # lists and dicts carry JSON, as on E2B
        self.assertEqual(res[3]["text"], "'main'")  # the agent takes off the quotes
        self.assertTrue(res[3]["is_main_result"])

    def test_line_and_cell_magics(self):
        with tempfile.TemporaryDirectory() as d:
            m = self.k.run("%cd " + d)
            self.assertIn(d, stdout(m))
            self.assertEqual(main_text(self.k.run("%pwd")), repr(d))
            m = self.k.run("%%writefile magic.txt\nwritten by a cell magic\n")
            self.assertIn("Writing magic.txt", stdout(m))
            with open(os.path.join(d, "magic.txt")) as f:
                self.assertEqual(f.read(), "written by a cell magic\n")
            self.k.run("%cd /")
        m = self.k.run("%env AIRLOCK_MAGIC=yes")
        self.assertEqual(main_text(self.k.run("import os; os.environ['AIRLOCK_MAGIC']")), "'yes'")
        m = self.k.run("%timeit -n1 -r1 sum(range(10))")
        self.assertIn("loop", stdout(m))
        m = self.k.run("%no_such_magic")
        self.assertEqual(errors(m)[0]["name"], "UsageError")

    def test_shell_escapes(self):
        m = self.k.run("!echo from-shell\nlines = !printf 'a\\nb\\n'\nlines")
        self.assertEqual(stdout(m), "from-shell\r\n")  # through a pty, as in Jupyter
        self.assertEqual(main_text(m), "['a', 'b']")
        m = self.k.run("v = 'expanded'\n!echo $v {1 + 1}")
        self.assertEqual(stdout(m), "expanded 2\r\n")
        self.assertEqual(main_text(self.k.run("!exit 3\n_exit_code")), "3")

    def test_rich_reprs_and_mimebundle(self):
        m = self.k.run("class R:\n"
                       "    def _repr_html_(self): return '<i>r</i>'\n"
                       "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
                       "        return {'text/plain': 'R!', 'application/x-custom': 'c'}\n"
                       "R()")
        r = results(m)[0]
        self.assertEqual(r["text"], "R!")
        self.assertEqual(r["html"], "<i>r</i>")
        self.assertEqual(r["extra"], {"application/x-custom": "c"})

    def test_errors(self):
        m = self.k.run("print('partial')\n1/0")
        self.assertEqual(stdout(m), "partial\n")
        e = errors(m)
        self.assertEqual(len(e), 1)
        self.assertEqual(e[0]["name"], "ZeroDivisionError")
        self.assertEqual(e[0]["value"], "division by zero")
        self.assertIn("ZeroDivisionError", e[0]["traceback"])
        self.assertNotIn("\x1b[", e[0]["traceback"])  # no colours
        self.assertEqual(errors(self.k.run("def (:"))[0]["name"], "SyntaxError")
        self.assertEqual(errors(self.k.run("undefined_xyz"))[0]["value"],
                         "name 'undefined_xyz' is not defined")
        self.assertEqual(errors(self.k.run("input('?')"))[0]["name"], "StdinNotImplementedError")

    def test_suppressed_result_and_indentation(self):
        self.assertEqual(results(self.k.run("1 + 1;")), [])
        m = self.k.run("\n    def f(a):\n        return a * 2\n\n    f(21)\n    ")
        self.assertEqual(main_text(m), "42")

    def test_top_level_await(self):
        m = self.k.run("import asyncio\nawait asyncio.sleep(0)\n'awaited'")
        self.assertEqual(main_text(m), "'awaited'")

    def test_env_vars_for_one_execution(self):
        m = self.k.run("import os; os.environ.get('AIRLOCK_T')", {"AIRLOCK_T": "v"})
        self.assertEqual(main_text(m), "'v'")
        self.assertEqual(main_text(self.k.run("os.environ.get('AIRLOCK_T', 'unset')")), "'unset'")


WHEEL = """
import base64, hashlib, zipfile
def rec(name, data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, h, len(data))
files = {"airlock_wheel_demo.py": b"VALUE = 'installed'\\n",
         "airlock_wheel_demo-1.0.dist-info/METADATA":
             b"Metadata-Version: 2.1\\nName: airlock-wheel-demo\\nVersion: 1.0\\n",
         "airlock_wheel_demo-1.0.dist-info/WHEEL":
             b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
with zipfile.ZipFile(WHL, "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
    z.writestr("airlock_wheel_demo-1.0.dist-info/RECORD",
               "\\n".join([rec(n, d) for n, d in files.items()] +
                         ["airlock_wheel_demo-1.0.dist-info/RECORD,,"]) + "\\n")
"""


class PipInstall(unittest.TestCase):
    @unittest.skipIf(importlib.util.find_spec("pip") is None, "this Python has no pip")
    def test_pip_install_of_a_local_wheel_is_importable_at_once(self):
        with tempfile.TemporaryDirectory() as d:
            # A user installation (the sandbox's user is no root) into a site-packages that
            # does not exist yet; --no-index: nothing is fetched.
            k = Kernel(env={"PYTHONUSERBASE": os.path.join(d, "userbase"),
                            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_BREAK_SYSTEM_PACKAGES": "1"})
            try:
                whl = os.path.join(d, "airlock_wheel_demo-1.0-py3-none-any.whl")
                self.assertEqual(errors(k.run("WHL = %r\n%s" % (whl, WHEEL))), [])
                self.assertEqual(errors(k.run("import airlock_wheel_demo"))[0]["name"],
                                 "ModuleNotFoundError")
                m = k.run("!pip install --user --no-index %s\nimport airlock_wheel_demo\n"
                          "airlock_wheel_demo.VALUE" % whl)
                self.assertIn("Successfully installed airlock-wheel-demo-1.0", stdout(m))
                self.assertEqual(main_text(m), "'installed'", m)
            finally:
                k.close()


class Interrupts(unittest.TestCase):
    def test_sigint_interrupts_the_cell_and_the_kernel_goes_on(self):
        k = Kernel()
        try:
            k.send("print('started', flush=True)\nimport time\ntime.sleep(300)")
            first = k._read()
            self.assertEqual(first["type"], "number_of_executions")
            self.assertEqual(k._read()["text"], "started\n")
            k.p.send_signal(signal.SIGINT)
            e = errors(k.collect())
            self.assertEqual(e[0]["name"], "KeyboardInterrupt")
            self.assertEqual(main_text(k.run("'alive'")), "'alive'")
        finally:
            k.close()


class Exit(unittest.TestCase):
    def test_exit_ends_the_kernel_after_the_cell(self):
        k = Kernel()
        try:
            m = k.run("print('bye')\nexit()")
            self.assertEqual(errors(m), [])
            self.assertEqual(stdout(m), "bye\n")
            self.assertEqual(k.p.wait(timeout=60), 0)
        finally:
            k.close()


class Startup(unittest.TestCase):
    def test_profile_startup_files_run_and_stay_hidden(self):
        with tempfile.TemporaryDirectory() as d:
            start = os.path.join(d, "profile_default", "startup")
            os.makedirs(start)
            with open(os.path.join(start, "00-first.py"), "w") as f:
                f.write("STARTUP_VALUE = 41\n")
            k = Kernel(env={"IPYTHONDIR": d})
            try:
                self.assertEqual(main_text(k.run("STARTUP_VALUE + 1")), "42")
                self.assertNotIn("STARTUP_VALUE", stdout(k.run("%who")))
            finally:
                k.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
