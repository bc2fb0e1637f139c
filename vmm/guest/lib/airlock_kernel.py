# airlock_kernel: one persistent Python context of airlock's code interpreter, an IPython
# InteractiveShell (the shell Jupyter's ipykernel runs) behind the agent's own pipe protocol.
#
# Started by airlock-agent (as the context's user, without privileges) with:
#   fd 0  /dev/null            fd 1/2  stdout/stderr, read by the agent and streamed as-is
#   fd 3  requests (agent ->)  fd 4    messages (-> agent)
# Each request and message is a 4-byte big-endian length followed by a UTF-8 JSON object.
#   request:  {"op": "execute", "code": "...", "env_vars": {...}} (others are ignored: the
#             agent's {"op": "interrupt"} is for the JavaScript kernel, SIGINT does it here)
#   messages: {"type": "ready"} once (or {"type": "unavailable", "reason": ...} and exit 3
#             when this Python has no IPython), then per execution
#             {"type": "number_of_executions", "execution_count": n}
#             {"type": "result", "is_main_result": bool, "text": ..., "html": ..., "png": ...}
#             {"type": "error", "name": ..., "value": ..., "traceback": ...}
#             {"type": "done"}
#             {"type": "stdout"|"stderr", "text": ..., "timestamp": ...} (print & co)
# print() output travels on fd 4 with the results, so their order is exact; what
# subprocesses write to fd 1/2 is read by the agent before each message (approximately in
# order, as in Jupyter).
#
# IPython gives what a Jupyter kernel gives: magics (%, %%), "!cmd" and "x = !cmd", _, __,
# Out[n], In[n], display() and IPython.display, its formatters (_repr_*_ methods,
# _repr_mimebundle_), top-level await, leading indentation removed, tracebacks. On top, as
# ipykernel and E2B's code-interpreter server set up their kernels: matplotlib's inline
# backend (figures shown by plt.show() and at the end of a cell), E2B's MIME types
# "e2b/data" (pandas DataFrames) and "e2b/chart" (lib/airlock_charts.py), application/json
# for lists and dicts, PIL images shown on show()/save(), startup files of the IPython
# profile, input() refused. SIGINT interrupts the running cell.

import base64
import builtins
import glob
import importlib.abc
import importlib.util
import io
import json
import math
import os
import signal
import struct
import sys
import types

REQ_FD = 3
MSG_FD = 4
MAX_MESSAGE = 32 << 20


# ---- wire -------------------------------------------------------------------------------

def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def _clean_json(v, depth=0):
    """Replace what strict JSON cannot carry (NaN, infinities, bytes, numpy scalars)."""
    if depth > 64:
        return None
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _clean_json(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean_json(x, depth + 1) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    item = getattr(v, "item", None)
    if callable(item):
        try:
            return _clean_json(item(), depth + 1)
        except Exception:
            pass
    if hasattr(v, "isoformat"):
        try:
            return v.isoformat()
        except Exception:
            pass
    return str(v)


def send(msg):
    _flush_streams()
    data = json.dumps(_clean_json(msg), ensure_ascii=False, allow_nan=False).encode("utf-8", "replace")
    if len(data) > MAX_MESSAGE and msg.get("type") == "result":
        data = json.dumps({"type": "error", "name": "ResultTooLarge",
                           "value": "a result of %d bytes is larger than the %d bytes the "
                                    "interpreter forwards" % (len(data), MAX_MESSAGE),
                           "traceback": ""}).encode()
    _write_all(MSG_FD, struct.pack(">I", len(data)) + data)


def _read_exact(n):
    buf = b""
    while len(buf) < n:
        try:
            chunk = os.read(REQ_FD, n - len(buf))
        except InterruptedError:
            continue
        if not chunk:
            return None
        buf += chunk
    return buf


# ---- output -----------------------------------------------------------------------------

def _timestamp():
    import datetime
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Out(io.TextIOBase):
    """sys.stdout/sys.stderr: line-buffered text onto fd 4 (one message per line or block)."""

    def __init__(self, fd, name, kind):
        super().__init__()
        self._fd = fd
        self._name = name
        self._kind = kind
        self._buf = []
        self._len = 0

    @property
    def encoding(self):
        return "utf-8"

    @property
    def errors(self):
        return "replace"

    @property
    def name(self):
        return self._name

    def fileno(self):
        return self._fd

    def isatty(self):
        return False

    def writable(self):
        return True

    def readable(self):
        return False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        if not s:
            return 0
        self._buf.append(s)
        self._len += len(s)
        if "\n" in s or self._len >= 8192:
            self.flush()
        return len(s)

    def flush(self):
        if not self._buf:
            return
        text = "".join(self._buf)
        self._buf = []
        self._len = 0
        # Python-level output travels with the results (one ordered channel); fd 1/2 carry
        # only what subprocesses and C code write there.
        send({"type": self._kind, "text": text.encode("utf-8", "replace").decode("utf-8"),
              "timestamp": _timestamp()})


def _flush_streams():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


# ---- results ----------------------------------------------------------------------------

_MIME_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


def _result(data, is_main):
    """A MIME bundle as a result message (the agent takes the quotes off a string's repr,
    as E2B's server does)."""
    msg = {"type": "result", "is_main_result": bool(is_main)}
    extra = {}
    for mime, v in data.items():
        if mime in ("image/png", "image/jpeg", "application/pdf") and isinstance(v, (bytes, bytearray)):
            v = base64.b64encode(bytes(v)).decode("ascii")
        key = _MIME_KEYS.get(mime)
        if key is None:
            extra[mime] = v
        else:
            msg[key] = v
    if extra:
        msg["extra"] = extra
    return msg


def _figure_chart(fig):
    """E2B's chart of a figure (lib/airlock_charts.py), or None: no data, or the extractor
    failed (a figure it cannot read never costs the cell its PNG or an error)."""
    try:
        import warnings
        mod = sys.modules.get("airlock_charts")
        if mod is None:
            # From the kernel's own directory (a user's airlock_charts.py in the working
            # directory, which is first on sys.path, must not stand in for it).
            path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "airlock_charts.py")
            spec = importlib.util.spec_from_file_location("airlock_charts", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules["airlock_charts"] = mod
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return mod.figure_chart(fig)
    except Exception:
        return None


def _json_native(v, depth=0):
    """v as JSON (numpy scalars and arrays as their values, NaN as null), or raise TypeError
    for anything else, like the orjson serialisation E2B's formatter uses."""
    if depth > 64:
        raise TypeError("too deeply nested")
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k if isinstance(k, str) else str(_json_native(k, depth + 1)): _json_native(x, depth + 1)
                for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_native(x, depth + 1) for x in v]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, (np.generic, np.ndarray)):
        return _json_native(v.tolist(), depth + 1)
    raise TypeError("%s is not JSON" % type(v).__name__)


# ---- the shell --------------------------------------------------------------------------

def _no_input(*args, **kwargs):
    from IPython.core.error import StdinNotImplementedError
    raise StdinNotImplementedError("raw_input was called, but this frontend does not support input requests.")


_SHELL = None


def _make_shell():
    """The process's IPython shell (created once; also what format_bundle uses)."""
    global _SHELL
    if _SHELL is not None:
        return _SHELL
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.error import UsageError
    from IPython.core.formatters import BaseFormatter, JSONFormatter
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets import ObjectName, Type, Unicode
    from traitlets.config import Config

    class Publisher(DisplayPublisher):
        """display() and IPython.display: a result that is not the main one."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kw):
            send(_result(data, False))

        def clear_output(self, wait=False):
            pass  # no output area to clear (E2B's server drops the message too)

    class Hook(DisplayHook):
        """The value of the cell's last expression: the main result (and _, Out[n])."""

        def start_displayhook(self):
            self._bundle = None

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            self._bundle = format_dict

        def finish_displayhook(self):
            bundle, self._bundle = getattr(self, "_bundle", None), None
            if bundle:
                send(_result(bundle, True))

    class DataFormatter(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pd = sys.modules.get("pandas")
            if pd is None or not isinstance(obj, pd.DataFrame):
                return super().__call__(obj)
            d = obj.to_dict(orient="list")
            return {str(k): [x.isoformat() if hasattr(x, "isoformat") else x for x in v]
                    for k, v in d.items()}

    class ChartFormatter(BaseFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        _return_type = (dict, str)

        def __call__(self, obj):
            mf = sys.modules.get("matplotlib.figure")
            if mf is None or not isinstance(obj, mf.Figure):
                return super().__call__(obj)
            return _figure_chart(obj)

    class ListJSONFormatter(JSONFormatter):
        def __call__(self, obj):
            if isinstance(obj, (list, dict)):
                try:
                    return _json_native(obj), {"expanded": True}
                except TypeError:
                    pass
            return super().__call__(obj)

    class Shell(InteractiveShell):
        displayhook_class = Type(Hook)
        display_pub_class = Type(Publisher)
        error_sent = False

        def _showtraceback(self, etype, evalue, stb):
            self.error_sent = True
            send({"type": "error", "name": etype.__name__, "value": str(evalue),
                  "traceback": self.InteractiveTB.stb2text(stb)})

        def system_piped(self, cmd):
            try:
                super().system_piped(cmd)
            finally:
                _forget_missing_paths()  # "!pip install x" then "import x" in one cell

        system = system_piped

        def ask_exit(self):
            self.exit_now = True  # exit(): the kernel ends after this cell (a new one next)

        def enable_gui(self, gui=None):
            if gui not in (None, "inline"):
                raise UsageError("there is no display in a sandbox for the %r event loop: "
                                 "use %%matplotlib inline" % gui)

    c = Config()
    c.InteractiveShell.colors = "NoColor"
    c.HistoryManager.hist_file = ":memory:"  # In/_i work; no database in the user's home
    c.PlainTextFormatter.max_seq_length = 0
    shell = Shell.instance(config=c)
    df = shell.display_formatter
    df.formatters["e2b/data"] = DataFormatter(parent=df)
    df.formatters["e2b/chart"] = ChartFormatter(parent=df)
    df.formatters["application/json"] = ListJSONFormatter(parent=df)
    _SHELL = shell
    return shell


def format_bundle(obj):
    """The MIME bundle the kernel shows for obj (IPython's formatters plus E2B's)."""
    return _make_shell().display_formatter.format(obj)[0]


# ---- PIL images are shown when shown or saved (as on E2B) -------------------------------

class _HookLoader(importlib.abc.Loader):
    def __init__(self, loader, hook):
        self._loader = loader
        self._hook = hook

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._hook(module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PostImport(importlib.abc.MetaPathFinder):
    def __init__(self, hooks):
        self._hooks = hooks
        self._busy = set()

    def find_spec(self, name, path=None, target=None):
        hook = self._hooks.get(name)
        if hook is None or name in self._busy:
            return None
        self._busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HookLoader(spec.loader, hook)
        return spec


def _hook_pil_image(mod):
    from IPython.display import display
    img = mod.Image
    orig_save = img.save

    def show(self, *args, **kwargs):
        display(self)

    def save(self, fp, format=None, **params):
        if isinstance(fp, (str, os.PathLike)):
            display(self)
        return orig_save(self, fp, format, **params)

    img.show = show
    img.save = save


# ---- the kernel -------------------------------------------------------------------------

class Kernel:
    def __init__(self, shell):
        self.shell = shell
        self.in_user_code = False
        builtins.input = _no_input
        try:
            import getpass
            getpass.getpass = _no_input
        except Exception:
            pass
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame):
        if self.in_user_code:
            raise KeyboardInterrupt
        # idle, or between cells: nothing to interrupt

    def run_startup_files(self):
        """PYTHONSTARTUP and the profile's startup files, as ipykernel runs them."""
        from IPython.core.application import ENV_CONFIG_DIRS, SYSTEM_CONFIG_DIRS
        sh = self.shell
        files = []
        if os.environ.get("PYTHONSTARTUP"):
            files.append(os.environ["PYTHONSTARTUP"])
        dirs = [sh.profile_dir.startup_dir] + [os.path.join(p, "startup") for p in
                                               list(ENV_CONFIG_DIRS) + list(SYSTEM_CONFIG_DIRS)]
        found = []
        for d in dirs[::-1]:
            found += glob.glob(os.path.join(d, "*.py")) + glob.glob(os.path.join(d, "*.ipy"))
        files += sorted(found)
        if not files:
            return
        before = set(sh.user_ns)
        self.in_user_code = True
        try:
            for f in files:
                if f.endswith(".ipy"):
                    sh.safe_execfile_ipy(f)
                else:
                    sh.safe_execfile(f, sh.user_ns, raise_exceptions=False)
        except BaseException:
            pass
        finally:
            self.in_user_code = False
        # like %who after a kernel's start: what the startup files defined stays hidden
        sh.user_ns_hidden.update({k: sh.user_ns[k] for k in set(sh.user_ns) - before})

    def execute(self, code, env_vars):
        sh = self.shell
        send({"type": "number_of_executions", "execution_count": sh.execution_count})
        saved = {}
        for k, v in (env_vars or {}).items():
            if isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v:
                saved[k] = os.environ.get(k)
                os.environ[k] = v
        sh.error_sent = False
        _forget_missing_paths()
        self.in_user_code = True
        try:
            res = sh.run_cell(code, store_history=True)
        finally:
            self.in_user_code = False
            for k, old in saved.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old
            _flush_streams()
        if not res.success and not sh.error_sent:
            # errors IPython reports without a traceback (a UsageError, for one)
            err = res.error_before_exec or res.error_in_exec
            if err is not None:
                send({"type": "error", "name": type(err).__name__, "value": str(err), "traceback": ""})

    def serve(self):
        send({"type": "ready"})
        while not self.shell.exit_now:
            try:
                hdr = _read_exact(4)
                if hdr is None:
                    return
                (n,) = struct.unpack(">I", hdr)
                if n > MAX_MESSAGE * 2:
                    return
                body = _read_exact(n)
                if body is None:
                    return
                req = json.loads(body.decode("utf-8"))
            except KeyboardInterrupt:
                continue  # an interrupt while idle does nothing
            if req.get("op") == "execute":
                try:
                    self.execute(req.get("code") or "", req.get("env_vars"))
                except KeyboardInterrupt:
                    pass
                finally:
                    send({"type": "done"})


def _add_user_site():
    """The user's site-packages on sys.path even before it exists: "!pip install x" as a
    user (not root, as on E2B) installs there, and "import x" must find it in this kernel."""
    import site
    if not site.ENABLE_USER_SITE:
        return
    user = site.getusersitepackages()
    if user in sys.path:
        return
    at = next((i for i, p in enumerate(sys.path) if p.endswith(("site-packages", "dist-packages"))),
              len(sys.path))
    sys.path.insert(at, user)  # before the system's packages, where site puts it


def _forget_missing_paths():
    """Let imports look again at path entries that did not exist when last tried (the user
    site-packages before the first "pip install"): the import system caches their absence."""
    cache = sys.path_importer_cache
    for p in [p for p, f in cache.items() if f is None and os.path.isdir(p)]:
        del cache[p]


def _prepare_environment():
    # What ipykernel sets for a kernel's subprocesses: no pager can block a cell.
    os.environ.update({"PAGER": "cat", "GIT_PAGER": "cat", "CLICOLOR": "1", "TERM": "xterm-color"})
    # Figures become results (Jupyter's inline backend). A headless default (Agg, which the
    # code-interpreter template sets so that plain scripts never look for a display) is
    # replaced as ipykernel replaces an unset one; a backend the user chose is kept.
    if os.environ.get("MPLBACKEND", "").strip().lower() in ("", "agg"):
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"


class _LazyEmbed(types.ModuleType):
    """IPython.terminal.embed until something uses it. "import IPython" imports it for
    IPython.embed, and with it the whole terminal front end (prompt_toolkit & co.), which a
    kernel never uses: a third of its start. The first use imports the real module."""

    @staticmethod
    def _real():
        if sys.modules.get("IPython.terminal.embed") is _EMBED_STUB:
            del sys.modules["IPython.terminal.embed"]
        return importlib.import_module("IPython.terminal.embed")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._real(), name)


def _embed(*args, **kwargs):
    return _LazyEmbed._real().embed(*args, **kwargs)


_embed.__name__ = _embed.__qualname__ = "embed"
_embed.__module__ = "IPython.terminal.embed"
_EMBED_STUB = _LazyEmbed("IPython.terminal.embed")
_EMBED_STUB.embed = _embed


class _NoJedi(importlib.abc.MetaPathFinder):
    """Hides jedi while IPython loads: its completer imports it for completions, which this
    kernel never serves (another fifth of the start). User code imports jedi normally."""

    def find_spec(self, name, path=None, target=None):
        if name == "jedi" or name.startswith("jedi."):
            raise ImportError("not while the kernel starts")
        return None


def _import_ipython():
    sys.modules.setdefault("IPython.terminal.embed", _EMBED_STUB)
    hide = _NoJedi()
    sys.meta_path.insert(0, hide)
    try:
        import IPython
        import IPython.core.completer  # noqa: F401  (loaded now, without jedi)
        return IPython
    finally:
        sys.meta_path.remove(hide)


def main():
    for fd in (REQ_FD, MSG_FD):
        os.set_inheritable(fd, False)
    sys.stdout = _Out(1, "<stdout>", "stdout")
    sys.stderr = _Out(2, "<stderr>", "stderr")
    sys.stdin = open(os.devnull, "r")
    sys.path.insert(0, "")  # like IPython: modules in the working directory are importable
    _add_user_site()
    try:
        IPython = _import_ipython()
    except Exception as e:
        send({"type": "unavailable",
              "reason": "%s cannot import IPython (%s: %s): Python contexts need IPython in the "
                        "template (Debian: python3-ipython)" % (sys.executable, type(e).__name__, e)})
        sys.exit(3)
    _prepare_environment()
    sys.meta_path.insert(0, _PostImport({"PIL.Image": _hook_pil_image}))
    try:
        kernel = Kernel(_make_shell())
    except Exception as e:
        send({"type": "unavailable",
              "reason": "IPython %s failed to start in %s (%s: %s)" % (
                  getattr(IPython, "__version__", "?"), sys.executable, type(e).__name__, e)})
        sys.exit(3)
    kernel.run_startup_files()
    kernel.serve()


if __name__ == "__main__":
    main()
