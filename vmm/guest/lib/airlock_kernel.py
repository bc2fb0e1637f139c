# airlock_kernel: one persistent Python context of airlock's code interpreter.
#
# Started by airlock-agent (as the context's user, without privileges) with:
#   fd 0  /dev/null            fd 1/2  stdout/stderr, read by the agent and streamed as-is
#   fd 3  requests (agent ->)  fd 4    messages (-> agent)
# Each request and message is a 4-byte big-endian length followed by a UTF-8 JSON object.
#   request:  {"op": "execute", "code": "...", "env_vars": {...}}
#   messages: {"type": "ready"} once, then per execution
#             {"type": "number_of_executions", "execution_count": n}
#             {"type": "result", "is_main_result": bool, "text": ..., "html": ..., "png": ...}
#             {"type": "error", "name": ..., "value": ..., "traceback": ...}
#             {"type": "done"}
#             {"type": "stdout"|"stderr", "text": ..., "timestamp": ...} (print & co)
# print() output travels on fd 4 with the results, so their order is exact; what
# subprocesses write to fd 1/2 is read by the agent before each message (approximately in
# order, as in Jupyter).
# Semantics follow IPython where the E2B SDK can see them: the value of the last expression
# is the main result (not shown when the cell ends with ';'), rich representations
# (_repr_html_, _repr_png_, ... and _repr_mimebundle_), matplotlib figures shown by
# plt.show() and at the end of a cell (PNG, plus E2B's `chart` from lib/airlock_charts.py),
# leading indentation removed, "!cmd" shell escapes, %cd/%pwd/%env/%pip, top-level await,
# SIGINT interrupts the running code.
# It depends on nothing but the standard library (IPython is not required).

import ast
import asyncio
import base64
import builtins
import importlib.abc
import importlib.util
import inspect
import io
import json
import math
import os
import pprint
import shlex
import signal
import struct
import subprocess
import sys
import traceback
import types

REQ_FD = 3
MSG_FD = 4
MAX_MESSAGE = 32 << 20
CELL = "<cell>"


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
    """sys.stdout/sys.stderr: line-buffered text onto fd 1/2 (one write per line or block)."""

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


# ---- display ----------------------------------------------------------------------------

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

_REPR_METHODS = [
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
    ("application/pdf", "_repr_pdf_"),
]


def _plain(obj):
    if isinstance(obj, (dict, list, tuple, set, frozenset)):
        try:
            return pprint.pformat(obj, width=79, sort_dicts=False)
        except Exception:
            pass
    return repr(obj)


def _is_figure(obj):
    mpl = sys.modules.get("matplotlib.figure")
    return mpl is not None and isinstance(obj, mpl.Figure)


def _figure_png(fig):
    buf = io.BytesIO()
    fig.canvas.print_figure(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


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


def _dataframe_data(obj):
    pd = sys.modules.get("pandas")
    if pd is None or not isinstance(obj, pd.DataFrame):
        return None
    try:
        d = obj.to_dict(orient="list")
        return {str(k): [x.isoformat() if hasattr(x, "isoformat") else x for x in v] for k, v in d.items()}
    except Exception:
        return None


def format_bundle(obj):
    """The MIME bundle of obj, as IPython's display formatter builds it."""
    data = {}
    mb = getattr(obj, "_repr_mimebundle_", None)
    if callable(mb) and not isinstance(obj, type):
        try:
            r = mb()
            if isinstance(r, tuple):
                r = r[0]
            if isinstance(r, dict):
                data.update(r)
        except Exception:
            pass
    for mime, meth in _REPR_METHODS:
        if mime in data:
            continue
        f = getattr(obj, meth, None)
        if not callable(f) or isinstance(obj, type):
            continue
        try:
            v = f()
        except Exception:
            continue
        if isinstance(v, tuple):
            v = v[0]
        if v is None:
            continue
        data[mime] = v
    if _is_figure(obj) and "image/png" not in data:
        try:
            data["image/png"] = _figure_png(obj)
        except Exception:
            pass
    if _is_figure(obj) and "e2b/chart" not in data:
        chart = _figure_chart(obj)
        if chart is not None:
            data["e2b/chart"] = chart
    dfd = _dataframe_data(obj)
    if dfd is not None:
        data["e2b/data"] = dfd
    if "text/plain" not in data:
        try:
            data["text/plain"] = _plain(obj)
        except Exception as e:
            data["text/plain"] = "<unrepresentable object: %s>" % type(e).__name__
    for mime in ("image/png", "image/jpeg", "application/pdf"):
        if isinstance(data.get(mime), (bytes, bytearray)):
            data[mime] = base64.b64encode(bytes(data[mime])).decode("ascii")
    return data


def _result(data, is_main):
    msg = {"type": "result", "is_main_result": bool(is_main)}
    extra = {}
    for mime, v in data.items():
        key = _MIME_KEYS.get(mime)
        if key is None:
            extra[mime] = v
        else:
            msg[key] = v
    text = msg.get("text")
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        msg["text"] = text[1:-1]  # what the reference server does with repr(str)
    if extra:
        msg["extra"] = extra
    return msg


def display(*objs, **kwargs):
    """Show objects as results of the running cell (IPython's display())."""
    for obj in objs:
        if kwargs.get("raw") and isinstance(obj, dict):
            send(_result(dict(obj), False))
        else:
            send(_result(format_bundle(obj), False))


def _flush_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        nums = plt.get_fignums()
        for n in nums:
            display(plt.figure(n))
    except Exception:
        traceback.print_exc()
    finally:
        try:
            plt.close("all")
        except Exception:
            pass


_display_mod = types.ModuleType("airlock_display")
_display_mod.display = display
sys.modules["airlock_display"] = _display_mod


# ---- post-import hooks (matplotlib backend, PIL show/save) -------------------------------

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


def _hook_matplotlib(mpl):
    # Figures become results, as with Jupyter's inline backend. A headless default (Agg,
    # which the code-interpreter template sets so that plain scripts never look for a
    # display) is replaced like Jupyter replaces it; another backend the user chose is kept.
    if os.environ.get("MPLBACKEND", "").strip().lower() in ("", "agg"):
        mpl.use("module://airlock_mpl_backend")


def _hook_pil_image(mod):
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


sys.meta_path.insert(0, _PostImport({"matplotlib": _hook_matplotlib, "PIL.Image": _hook_pil_image}))


# ---- cells ------------------------------------------------------------------------------

def _strip_leading_indent(code):
    lines = code.split("\n")
    first = next((l for l in lines if l.strip()), "")
    indent = first[: len(first) - len(first.lstrip())]
    if not indent:
        return code
    return "\n".join(l[len(indent):] if l.startswith(indent) else l for l in lines)


def _transform_magics(code):
    out = []
    for line in code.split("\n"):
        stripped = line.lstrip()
        ind = line[: len(line) - len(stripped)]
        if stripped.startswith("!") and not stripped.startswith("!="):
            out.append("%s__airlock_system__(%r)" % (ind, stripped[1:]))
        elif stripped.startswith("%"):
            name, _, arg = stripped[1:].partition(" ")
            if name in ("cd", "pwd", "env", "pip", "conda", "sx", "system"):
                out.append("%s__airlock_magic__(%r, %r)" % (ind, name, arg.strip()))
            else:
                out.append(line)
        else:
            out.append(line)
    return "\n".join(out)


def _system(cmd):
    _flush_streams()
    return subprocess.call(cmd, shell=True, stdin=subprocess.DEVNULL)


def _magic(name, arg):
    if name == "cd":
        target = os.path.expanduser(arg.strip("'\"")) if arg else os.path.expanduser("~")
        os.chdir(target)
        print(os.getcwd())
    elif name == "pwd":
        return os.getcwd()
    elif name == "env":
        if not arg:
            return dict(os.environ)
        if "=" in arg:
            k, _, v = arg.partition("=")
            os.environ[k.strip()] = v.strip()
        else:
            return os.environ.get(arg)
    elif name in ("pip", "conda"):
        _system("%s -m pip %s" % (shlex.quote(sys.executable), arg) if name == "pip" else "conda " + arg)
    elif name in ("sx", "system"):
        _system(arg)
    return None


class StdinNotImplementedError(RuntimeError):
    pass


def _no_input(prompt=""):
    raise StdinNotImplementedError("raw_input was called, but this frontend does not support input requests.")


def _format_traceback(etype, value, tb):
    # Drop the kernel's own frames: the traceback starts in the cell.
    while tb is not None and tb.tb_frame.f_code.co_filename != CELL and \
            os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(__file__):
        tb = tb.tb_next
    return "".join(traceback.format_exception(etype, value, tb))


class Kernel:
    def __init__(self):
        self.count = 0
        self.ns = {"__name__": "__main__", "__builtins__": builtins}
        self.ns.update({
            "display": display,
            "__airlock_system__": _system,
            "__airlock_magic__": _magic,
        })
        sys.modules["__main__"] = types.ModuleType("__main__")
        sys.modules["__main__"].__dict__.update(self.ns)
        self.ns = sys.modules["__main__"].__dict__
        self.loop = None
        self.in_user_code = False
        self.interrupted = False
        builtins.input = _no_input
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame):
        if self.in_user_code:
            raise KeyboardInterrupt
        self.interrupted = True

    def _run(self, code_obj):
        if code_obj.co_flags & inspect.CO_COROUTINE:
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            return self.loop.run_until_complete(eval(code_obj, self.ns))
        return eval(code_obj, self.ns)

    def execute(self, code, env_vars):
        self.count += 1
        send({"type": "number_of_executions", "execution_count": self.count})
        saved = {}
        for k, v in (env_vars or {}).items():
            if isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v:
                saved[k] = os.environ.get(k)
                os.environ[k] = v
        try:
            self._execute(code)
        finally:
            for k, old in saved.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old
            _flush_streams()

    def _execute(self, code):
        src = _transform_magics(_strip_leading_indent(code))
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        try:
            tree = ast.parse(src, filename=CELL, mode="exec")
        except (SyntaxError, ValueError, OverflowError) as e:
            self._error(type(e), e, None)
            return
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not src.rstrip().endswith(";"):
            last = tree.body.pop()
        try:
            body = compile(tree, CELL, "exec", flags=flags, dont_inherit=True)
            expr = compile(ast.Expression(last.value), CELL, "eval", flags=flags, dont_inherit=True) if last else None
        except (SyntaxError, ValueError) as e:
            self._error(type(e), e, None)
            return
        value = None
        self.in_user_code = True
        try:
            self._run(body)
            if expr is not None:
                value = self._run(expr)
        except BaseException as e:  # noqa: B902 - the cell's exception is the result
            self.in_user_code = False
            _flush_streams()
            self._error(type(e), e, e.__traceback__)
            _flush_figures()
            return
        finally:
            self.in_user_code = False
        if value is not None:
            self.ns["_"] = value
            try:
                send(_result(format_bundle(value), True))
            except Exception as e:
                self._error(type(e), e, e.__traceback__)
        _flush_figures()

    def _error(self, etype, value, tb):
        _flush_streams()
        text = str(value)
        if etype is KeyboardInterrupt:
            text = text or ""
        send({"type": "error", "name": etype.__name__, "value": text,
              "traceback": _format_traceback(etype, value, tb)})

    def serve(self):
        send({"type": "ready"})
        while True:
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


def main():
    for fd in (REQ_FD, MSG_FD):
        os.set_inheritable(fd, False)
    sys.stdout = _Out(1, "<stdout>", "stdout")
    sys.stderr = _Out(2, "<stderr>", "stderr")
    sys.stdin = open(os.devnull, "r")
    lib = os.path.dirname(os.path.abspath(__file__))
    if lib not in sys.path:
        sys.path.insert(0, lib)
    sys.path.insert(0, "")  # like IPython: modules in the working directory are importable
    Kernel().serve()


if __name__ == "__main__":
    main()
