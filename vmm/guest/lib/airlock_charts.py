# airlock_charts: the data of a matplotlib figure as E2B's `chart` result (MIME e2b/chart),
# the dict the E2B SDKs deserialise into LineChart, ScatterChart, BarChart, PieChart,
# BoxAndWhiskerChart, SuperChart or a plain Chart of type "unknown".
#
# figure_chart(fig) returns that dict, or None for a figure without data (no axes, or no
# axes with data). One axes gives one chart, several axes a "superchart" whose elements are
# the charts of each axes (in figure order) and whose title is the figure's suptitle.
# An axes is classified by its artists (text ignored; reference lines such as axhline, which
# are not drawn in data coordinates, ignored): only lines -> line (or box_and_whisker when
# the lines form matplotlib boxplots), only point collections -> scatter, only wedges ->
# pie, only rectangles -> bar, boxplot boxes (patches) with their lines -> box_and_whisker,
# anything else -> unknown (title only).
#
# Output is bounded so that a figure of millions of points cannot blow up the result:
# at most MAX_POINTS points per figure (each series of a chart gets an equal share and is
# thinned evenly, its first and last points kept), MAX_ELEMENTS elements (series, bars,
# wedges, boxes) per chart, MAX_OUTLIERS outliers per box, MAX_TICKS ticks per axis,
# MAX_CHARTS charts in a superchart, MAX_TEXT characters per title or label; a chart whose
# JSON would still exceed MAX_BYTES (4 MiB: long strings as points) is left out.
# It only reads the figure (which the caller has already drawn for its PNG).

import datetime
import json
import math
import re

import matplotlib.dates as mdates
import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import PathPatch, Rectangle, Wedge
from matplotlib.text import Text

MAX_POINTS = 20000
MAX_ELEMENTS = 1000
MAX_OUTLIERS = 1000
MAX_TICKS = 200
MAX_CHARTS = 64
MAX_TEXT = 1000
MAX_BYTES = 4 << 20

_UNIT = re.compile(r"\s\(([^()]*)\)|\[([^\[\]]*)\]")


def _text(s):
    s = "" if s is None else str(s)
    return s[:MAX_TEXT]


def _opt_text(s):
    s = _text(s)
    return s or None


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _round(v, digits):
    """v rounded to digits decimals (hides float noise such as 323.99999 for 324 degrees)."""
    f = _num(v)
    return None if f is None else round(f, digits) + 0.0


# ---- axes -------------------------------------------------------------------------------

def _converter(axis):
    get = getattr(axis, "get_converter", None)
    if callable(get):
        return get()
    return getattr(axis, "converter", None)


def _is_datetime(axis):
    if isinstance(axis.get_major_locator(), mdates.DateLocator):
        return True
    conv = _converter(axis)
    kinds = tuple(c for c in (getattr(mdates, n, None) for n in
                              ("DateConverter", "ConciseDateConverter", "_SwitchableDateConverter"))
                  if isinstance(c, type))
    return bool(kinds) and isinstance(conv, kinds)


def _categories(axis):
    """{position: category} when the axis holds strings (matplotlib's categorical units)."""
    units = getattr(axis, "units", None)
    mapping = getattr(units, "_mapping", None)
    if not isinstance(mapping, dict) or not mapping:
        return None
    out = {}
    for k, v in mapping.items():
        out[float(v)] = k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)
    return out


def _scale(axis, scale_name):
    if _is_datetime(axis):
        return "datetime"
    if scale_name != "linear":
        return scale_name
    if _categories(axis) is not None:
        return "categorical"
    return "linear"


def _tick_locs(axis):
    # 12 significant digits: 1.2 rather than 1.2000000000000002 from the tick locator.
    return [float("%.12g" % t) for t in list(axis.get_majorticklocs())[:MAX_TICKS]]


def _tick_labels(axis, locs):
    texts = [_text(t.get_text()) for t in axis.get_majorticklabels()][:len(locs)]
    if len(texts) == len(locs) and any(texts):
        return texts
    # Not drawn yet: ask the formatter, which is what drawing would show.
    try:
        return [_text(s) for s in axis.get_major_formatter().format_ticks(locs)]
    except Exception:
        return [""] * len(locs)


def _ticks_out(axis, locs, scale):
    if scale == "datetime":
        out = []
        for t in locs:
            try:
                out.append(mdates.num2date(t).isoformat())
            except Exception:
                out.append(t)
        return out
    return locs


def _label_at(locs, labels, lo, hi):
    """The tick label of the tick inside [lo, hi] closest to its middle, or None."""
    mid = (lo + hi) / 2.0
    best = None
    eps = 1e-9 * max(1.0, abs(lo), abs(hi))
    for loc, lab in zip(locs, labels):
        if lo - eps <= loc <= hi + eps and (best is None or abs(loc - mid) < abs(best[0] - mid)):
            best = (loc, lab)
    return None if best is None else best[1]


def _fmt_num(v):
    f = _num(v)
    return "" if f is None else "%g" % f


def _unit(label):
    if not label:
        return None
    m = _UNIT.search(label)
    if not m:
        return None
    return m.group(1) if m.group(1) is not None else m.group(2)


def _title(ax):
    for loc in ("center", "left", "right"):
        t = ax.get_title(loc=loc)
        if t:
            return _text(t)
    return None


def _base(kind, ax):
    return {"type": kind, "title": _title(ax), "elements": []}


def _add_2d(chart, ax, swap=False):
    xl, yl = _opt_text(ax.get_xlabel()), _opt_text(ax.get_ylabel())
    if swap:  # bars and boxes: the chart's x is the axis of the categories
        xl, yl = yl, xl
    chart.update({"x_label": xl, "y_label": yl, "x_unit": _unit(xl), "y_unit": _unit(yl)})
    return chart


def _add_point_axes(chart, ax):
    for name, axis, scale_name in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        locs = _tick_locs(axis)
        scale = _scale(axis, scale_name)
        chart[name + "_ticks"] = _ticks_out(axis, locs, scale)
        chart[name + "_tick_labels"] = _tick_labels(axis, locs)
        chart[name + "_scale"] = scale
    return chart


# ---- values -----------------------------------------------------------------------------

def _value(v, cats=None, dates=False):
    """One coordinate as E2B sends it: a number, or a string for dates and categories."""
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", "replace")[:MAX_TEXT]
    if isinstance(v, (str, np.str_)):
        return str(v)[:MAX_TEXT]
    if isinstance(v, np.datetime64):
        if np.isnat(v):
            return None
        return str(v.astype("datetime64[s]"))
    if isinstance(v, (datetime.date, datetime.datetime)) or hasattr(v, "isoformat"):
        try:
            return v.isoformat()
        except Exception:
            return str(v)[:MAX_TEXT]
    f = _num(v)
    if f is None:
        return None
    if dates:
        try:
            return mdates.num2date(f).isoformat()
        except Exception:
            return f
    if cats is not None and f in cats:
        return cats[f]
    return f


def _thin(n, budget):
    """Indices of at most budget of n items, evenly spread, first and last kept."""
    budget = max(2, int(budget))
    if n <= budget:
        return range(n)
    step = (n - 1) / float(budget - 1)
    return sorted({int(round(i * step)) for i in range(budget)})


def _seq(a):
    if isinstance(a, np.ndarray):
        return a.ravel()
    try:
        return list(a)
    except TypeError:
        return [a]


# ---- classification ---------------------------------------------------------------------

def _children(ax):
    kids = getattr(ax, "_children", None)
    if kids is None:
        kids = []
        for attr in ("lines", "collections", "patches", "images", "tables", "artists", "texts"):
            kids.extend(getattr(ax, attr, []))
    return [k for k in kids if not isinstance(k, Text)]


def _is_reference_line(ax, line):
    # axhline/axvline/axline: drawn in axes coordinates along one axis, not data series.
    return isinstance(line, Line2D) and line.get_transform() is not ax.transData


def _rect_of_line(line):
    """(x0, x1, y0, y1) when the line is a closed axis-aligned rectangle (a boxplot box)."""
    try:
        xs = np.asarray(line.get_xdata(), dtype=float)
        ys = np.asarray(line.get_ydata(), dtype=float)
    except (TypeError, ValueError):
        return None
    if xs.shape != (5,) or ys.shape != (5,) or not (np.isfinite(xs).all() and np.isfinite(ys).all()):
        return None
    if xs[0] != xs[4] or ys[0] != ys[4]:
        return None
    for i in range(4):
        if xs[i] != xs[i + 1] and ys[i] != ys[i + 1]:
            return None
    if len(set(xs.tolist())) != 2 or len(set(ys.tolist())) != 2:
        return None
    return (xs.min(), xs.max(), ys.min(), ys.max())


def _rect_of_patch(patch):
    try:
        v = patch.get_path().vertices
        v = np.asarray(v, dtype=float)
        if v.ndim != 2 or v.shape[0] < 4 or not np.isfinite(v).all():
            return None
        return (v[:, 0].min(), v[:, 0].max(), v[:, 1].min(), v[:, 1].max())
    except Exception:
        return None


def _segments(lines):
    """2-point lines as (xa, xb, ya, yb), and marker-only lines (flier points)."""
    segs, markers = [], []
    for line in lines:
        try:
            xs = np.asarray(line.get_xdata(), dtype=float).ravel()
            ys = np.asarray(line.get_ydata(), dtype=float).ravel()
        except (TypeError, ValueError):
            return None
        if line.get_linestyle() in ("None", "", " ", "none"):
            markers.append((xs, ys))
        elif xs.shape == (2,) and ys.shape == (2,):
            segs.append((xs[0], xs[1], ys[0], ys[1]))
        else:
            return None
    return segs, markers


def _box_layout(ax, objs):
    """The boxes of a boxplot as a list of dicts, or None when objs are not a boxplot."""
    boxes, lines = [], []
    for o in objs:
        if isinstance(o, PathPatch):
            r = _rect_of_patch(o)
            if r is None:
                return None
            boxes.append(r)
        elif isinstance(o, Line2D):
            r = _rect_of_line(o)
            if r is not None:
                boxes.append(r)
            else:
                lines.append(o)
        else:
            return None
    if not boxes:
        return None
    sl = _segments(lines)
    if sl is None:
        return None
    segs, markers = sl
    best = None
    for vertical in (True, False):
        stats = [_box_stats(b, segs, markers, vertical) for b in boxes]
        found = sum(1 for s in stats if s["median"] is not None)
        if best is None or found > best[0]:
            best = (found, vertical, stats)
    found, vertical, stats = best
    if found == 0:
        return None  # rectangles drawn as lines, but no medians: not a boxplot
    return vertical, stats


def _box_stats(box, segs, markers, vertical):
    x0, x1, y0, y1 = box
    # p: the axis along which boxes are placed; v: the data values.
    p0, p1, q1, q3 = (x0, x1, y0, y1) if vertical else (y0, y1, x0, x1)
    eps = 1e-9 * max(1.0, abs(p0), abs(p1), abs(q1), abs(q3))
    st = {"p0": p0, "p1": p1, "q1": q1, "q3": q3, "median": None, "lo": None, "hi": None,
          "outliers": []}
    for xa, xb, ya, yb in segs:
        pa, pb, va, vb = (xa, xb, ya, yb) if vertical else (ya, yb, xa, xb)
        if va == vb and p0 - eps <= min(pa, pb) and max(pa, pb) <= p1 + eps and \
                q1 - eps <= va <= q3 + eps and st["median"] is None:
            st["median"] = va
        elif pa == pb and p0 - eps <= pa <= p1 + eps and va != vb:
            lo, hi = min(va, vb), max(va, vb)
            if abs(hi - q1) <= eps:
                st["lo"] = lo
            elif abs(lo - q3) <= eps:
                st["hi"] = hi
    for xs, ys in markers:
        ps, vs = (xs, ys) if vertical else (ys, xs)
        for p, v in zip(ps, vs):
            if p0 - eps <= p <= p1 + eps and math.isfinite(v) and len(st["outliers"]) < MAX_OUTLIERS:
                st["outliers"].append(float(v))
    return st


def classify(ax):
    """The E2B chart type of one axes: line, scatter, bar, pie, box_and_whisker or unknown."""
    objs = [o for o in _children(ax) if not _is_reference_line(ax, o)]
    if all(isinstance(o, (Line2D, PathPatch)) for o in objs) and _box_layout(ax, objs) is not None:
        return "box_and_whisker"
    if all(isinstance(o, Line2D) for o in objs):
        return "line"
    if all(isinstance(o, PathCollection) for o in objs):
        return "scatter"
    if all(isinstance(o, Wedge) for o in objs):
        return "pie"
    if all(isinstance(o, Rectangle) for o in objs):
        return "bar"
    return "unknown"


# ---- charts -----------------------------------------------------------------------------

def _line_label(line):
    label = _text(line.get_label())
    if label.startswith("_child") and label[6:].isdigit():
        return "Line %d" % int(label[6:])
    return label


def _line_chart(ax, budget):
    chart = _add_point_axes(_add_2d(_base("line", ax), ax), ax)
    lines = [l for l in ax.get_lines() if not _is_reference_line(ax, l)][:MAX_ELEMENTS]
    share = budget // max(1, len(lines))
    for line in lines:
        xs = _seq(line.get_xdata())
        ys = _seq(line.get_ydata())
        n = min(len(xs), len(ys))
        pts = [[_value(xs[i]), _value(ys[i])] for i in _thin(n, share)]
        chart["elements"].append({"label": _line_label(line), "points": pts})
    return chart


def _scatter_chart(ax, budget):
    chart = _add_point_axes(_add_2d(_base("scatter", ax), ax), ax)
    xd, yd = chart["x_scale"] == "datetime", chart["y_scale"] == "datetime"
    xc, yc = _categories(ax.xaxis), _categories(ax.yaxis)
    colls = [c for c in ax.collections if isinstance(c, PathCollection)][:MAX_ELEMENTS]
    share = budget // max(1, len(colls))
    for c in colls:
        offs = np.ma.filled(np.ma.asarray(c.get_offsets(), dtype=float), np.nan)
        if offs.ndim != 2 or offs.shape[1] != 2:
            offs = np.zeros((0, 2))
        pts = [[_value(offs[i, 0], xc, xd), _value(offs[i, 1], yc, yd)]
               for i in _thin(offs.shape[0], share)]
        chart["elements"].append({"label": _text(c.get_label()), "points": pts})
    return chart


def _group_label(container):
    label = _text(container.get_label())
    if label.startswith("_container") and label[10:].isdigit():
        return "Group %d" % int(label[10:])
    return label


def _bar_chart(ax):
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    horizontal = False
    if containers:
        o = getattr(containers[0], "orientation", None)
        if o in ("vertical", "horizontal"):
            horizontal = o == "horizontal"
        else:  # matplotlib < 3.4: horizontal bars share their height
            hs = [r.get_height() for r in containers[0]]
            horizontal = len(hs) > 1 and all(h == hs[0] for h in hs)
    chart = _add_2d(_base("bar", ax), ax, swap=horizontal)
    axis = ax.yaxis if horizontal else ax.xaxis
    locs = _tick_locs(axis)
    labels = _tick_labels(axis, locs)
    for c in containers:
        group = _group_label(c)
        rects = list(c)
        for i, r in enumerate(rects):
            if len(chart["elements"]) >= MAX_ELEMENTS:
                return chart
            if horizontal:
                lo, size, value = r.get_y(), r.get_height(), r.get_width()
            else:
                lo, size, value = r.get_x(), r.get_width(), r.get_height()
            lo, hi = sorted((float(lo), float(lo) + float(size)))
            label = _label_at(locs, labels, lo, hi)
            if label is None:
                label = labels[i] if len(labels) == len(rects) else _fmt_num((lo + hi) / 2.0)
            chart["elements"].append({"label": label, "group": group, "value": _num(value)})
    return chart


def _pie_chart(ax):
    chart = _base("pie", ax)
    for w in [p for p in ax.patches if isinstance(p, Wedge)][:MAX_ELEMENTS]:
        chart["elements"].append({"label": _text(w.get_label()),
                                  "angle": _round(abs(float(w.theta2) - float(w.theta1)), 4),
                                  "radius": _num(w.r)})
    return chart


def _box_chart(ax):
    objs = [o for o in _children(ax) if not _is_reference_line(ax, o)]
    layout = _box_layout(ax, objs)
    vertical, stats = layout if layout else (True, [])
    chart = _add_2d(_base("box_and_whisker", ax), ax, swap=not vertical)
    axis = ax.xaxis if vertical else ax.yaxis
    locs = _tick_locs(axis)
    labels = _tick_labels(axis, locs)
    stats = sorted(stats, key=lambda s: s["p0"])[:MAX_ELEMENTS]
    for i, s in enumerate(stats):
        label = _label_at(locs, labels, s["p0"], s["p1"])
        if label is None:
            label = labels[i] if len(labels) == len(stats) else _fmt_num((s["p0"] + s["p1"]) / 2.0)
        chart["elements"].append({
            "label": label,
            "min": _num(s["lo"] if s["lo"] is not None else s["q1"]),
            "first_quartile": _num(s["q1"]),
            "median": _num(s["median"]),
            "third_quartile": _num(s["q3"]),
            "max": _num(s["hi"] if s["hi"] is not None else s["q3"]),
            "outliers": s["outliers"],
        })
    return chart


def axes_chart(ax, budget=MAX_POINTS):
    kind = classify(ax)
    if kind == "line":
        return _line_chart(ax, budget)
    if kind == "scatter":
        return _scatter_chart(ax, budget)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    if kind == "box_and_whisker":
        return _box_chart(ax)
    return _base("unknown", ax)


def _suptitle(fig):
    get = getattr(fig, "get_suptitle", None)
    if callable(get):
        return _opt_text(get())
    st = getattr(fig, "_suptitle", None)
    return _opt_text(st.get_text()) if st is not None else None


def _chart(fig):
    axes = list(fig.get_axes())
    if not axes or not any(ax.has_data() for ax in axes):
        return None
    if len(axes) == 1:
        return axes_chart(axes[0])
    axes = axes[:MAX_CHARTS]
    share = MAX_POINTS // len(axes)
    return {"type": "superchart", "title": _suptitle(fig),
            "elements": [axes_chart(ax, share) for ax in axes]}


def figure_chart(fig):
    """E2B's chart dict for a matplotlib figure, or None when it shows no data or its JSON
    would exceed MAX_BYTES (long category names in many points: the PNG still goes out)."""
    chart = _chart(fig)
    if chart is None:
        return None
    if len(json.dumps(chart, ensure_ascii=False, default=str)) > MAX_BYTES:
        return None
    return chart

