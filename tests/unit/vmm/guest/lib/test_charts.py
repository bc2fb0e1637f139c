# tests/unit/vmm/guest/lib/test_charts.py: vmm/guest/lib/airlock_charts.py (E2B's `chart` result
# from matplotlib figures) and its use by the kernel's display path (airlock_kernel
# format_bundle: IPython's formatters with the inline backend's PNG and E2B's chart). Run by tests/unit/vmm/guest/lib/run-py, which finds a Python with matplotlib.
import datetime
import io
import json
import os
import sys
import types
import unittest

sys.path.insert(0, os.environ["AIRLOCK_KERNEL_LIB"])

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import airlock_charts as ac  # noqa: E402
import airlock_kernel as ak  # noqa: E402


def chart_of(fig):
    # As in the kernel: the PNG is drawn first, then the chart is read.
    fig.canvas.print_figure(io.BytesIO(), format="png", bbox_inches="tight")
    c = ac.figure_chart(fig)
    json.dumps(c, allow_nan=False)  # strict JSON, as the kernel sends it
    plt.close(fig)
    return c


POINT_KEYS = {"type", "title", "elements", "x_label", "y_label", "x_unit", "y_unit",
              "x_ticks", "x_tick_labels", "x_scale", "y_ticks", "y_tick_labels", "y_scale"}
KEYS_2D = {"type", "title", "elements", "x_label", "y_label", "x_unit", "y_unit"}


class Charts(unittest.TestCase):
    def tearDown(self):
        plt.close("all")

    def test_line(self):
        fig = plt.figure()
        plt.plot([1, 2, 3], [4, 5, 6], label="rising")
        plt.plot([1, 2], [0, 1])
        plt.axhline(2)  # a reference line, not a series
        plt.title("Lines")
        plt.xlabel("Time (s)")
        plt.ylabel("Speed [m/s]")
        c = chart_of(fig)
        self.assertEqual(set(c), POINT_KEYS)
        self.assertEqual(c["type"], "line")
        self.assertEqual(c["title"], "Lines")
        self.assertEqual((c["x_label"], c["x_unit"]), ("Time (s)", "s"))
        self.assertEqual((c["y_label"], c["y_unit"]), ("Speed [m/s]", "m/s"))
        self.assertEqual((c["x_scale"], c["y_scale"]), ("linear", "linear"))
        self.assertEqual(len(c["x_ticks"]), len(c["x_tick_labels"]))
        self.assertTrue(all(isinstance(t, float) for t in c["x_ticks"]))
        self.assertIn("2.00", c["x_tick_labels"])
        self.assertEqual(c["elements"], [
            {"label": "rising", "points": [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]},
            {"label": "Line 1", "points": [[1.0, 0.0], [2.0, 1.0]]},
        ])

    def test_line_datetime_and_log(self):
        fig = plt.figure()
        days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in range(3)]
        plt.plot(days, [1, 10, 100], label="growth")
        plt.yscale("log")
        c = chart_of(fig)
        self.assertEqual((c["x_scale"], c["y_scale"]), ("datetime", "log"))
        self.assertTrue(all(isinstance(t, str) for t in c["x_ticks"]))
        datetime.datetime.fromisoformat(c["x_ticks"][0])
        self.assertEqual(c["elements"][0]["points"],
                         [["2024-01-01", 1.0], ["2024-01-02", 10.0], ["2024-01-03", 100.0]])

    def test_line_categorical(self):
        fig = plt.figure()
        plt.plot(["mon", "tue"], [3, 4])
        c = chart_of(fig)
        self.assertEqual(c["x_scale"], "categorical")
        self.assertEqual(c["x_tick_labels"], ["mon", "tue"])
        self.assertEqual(c["elements"][0]["points"], [["mon", 3.0], ["tue", 4.0]])

    def test_scatter(self):
        fig = plt.figure()
        plt.scatter([1, 2, 3], [3, 2, 1], label="A")
        plt.scatter([5], [6], label="B")
        plt.grid(True)
        plt.xlabel("x")
        c = chart_of(fig)
        self.assertEqual(set(c), POINT_KEYS)
        self.assertEqual(c["type"], "scatter")
        self.assertIsNone(c["title"])
        self.assertEqual((c["x_label"], c["y_label"]), ("x", None))
        self.assertEqual(c["elements"], [
            {"label": "A", "points": [[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]]},
            {"label": "B", "points": [[5.0, 6.0]]},
        ])

    def test_not_finite_values_are_null(self):
        fig = plt.figure()
        plt.plot([1, 2, 3], [1, np.nan, np.inf])
        self.assertEqual(chart_of(fig)["elements"][0]["points"], [[1.0, 1.0], [2.0, None], [3.0, None]])

    def test_bar_vertical(self):
        fig = plt.figure()
        plt.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
        plt.bar_label(plt.gca().containers[0])  # text: ignored
        plt.xlabel("Authors")
        plt.ylabel("Books")
        plt.title("Sales")
        c = chart_of(fig)
        self.assertEqual(set(c), KEYS_2D)
        self.assertEqual((c["type"], c["title"], c["x_label"], c["y_label"]),
                         ("bar", "Sales", "Authors", "Books"))
        self.assertEqual(c["elements"], [
            {"label": "Author A", "group": "Books Sold", "value": 100.0},
            {"label": "Author B", "group": "Books Sold", "value": 200.0},
            {"label": "Author C", "group": "Books Sold", "value": 300.0},
        ])

    def test_bar_horizontal_grouped_numeric(self):
        fig = plt.figure()
        plt.barh(["a", "b"], [5, 6])
        plt.xlabel("value")
        plt.ylabel("category")
        c = chart_of(fig)
        # The chart's x is the axis of the categories (as in E2B).
        self.assertEqual((c["x_label"], c["y_label"]), ("category", "value"))
        self.assertEqual(c["elements"], [{"label": "a", "group": "Group 0", "value": 5.0},
                                         {"label": "b", "group": "Group 0", "value": 6.0}])
        fig = plt.figure()
        x = np.arange(2)
        plt.bar(x - 0.2, [1, 2], 0.4, label="2023")
        plt.bar(x + 0.2, [3, 4], 0.4, label="2024")
        plt.xticks(x, ["Q1", "Q2"])
        c = chart_of(fig)
        self.assertEqual([(e["label"], e["group"], e["value"]) for e in c["elements"]],
                         [("Q1", "2023", 1.0), ("Q2", "2023", 2.0),
                          ("Q1", "2024", 3.0), ("Q2", "2024", 4.0)])
        fig = plt.figure()
        plt.bar([1, 2], [3, 4])
        c = chart_of(fig)
        self.assertEqual([(e["label"], e["value"]) for e in c["elements"]],
                         [("1.00", 3.0), ("2.00", 4.0)])

    def test_pie(self):
        fig, ax = plt.subplots()
        ax.pie([90, 10], labels=["No", "Yes"], autopct="%1.1f%%", startangle=90)
        ax.set_title("Pie")
        c = chart_of(fig)
        self.assertEqual(c, {"type": "pie", "title": "Pie", "elements": [
            {"label": "No", "angle": 324.0, "radius": 1.0},
            {"label": "Yes", "angle": 36.0, "radius": 1.0}]})

    def test_box_and_whisker(self):
        data = [[1, 2, 3, 4, 5, 20], [2, 3, 4, 5, 6]]
        want = [{"label": "A", "min": 1.0, "first_quartile": 2.25, "median": 3.5,
                 "third_quartile": 4.75, "max": 5.0, "outliers": [20.0]},
                {"label": "B", "min": 2.0, "first_quartile": 3.0, "median": 4.0,
                 "third_quartile": 5.0, "max": 6.0, "outliers": []}]
        fig = plt.figure()
        plt.boxplot(data, labels=["A", "B"])  # boxes drawn as lines
        plt.xlabel("Class")
        plt.ylabel("Score")
        c = chart_of(fig)
        self.assertEqual(set(c), KEYS_2D)
        self.assertEqual((c["type"], c["x_label"], c["y_label"]), ("box_and_whisker", "Class", "Score"))
        self.assertEqual(c["elements"], want)
        fig = plt.figure()
        plt.boxplot(data, labels=["A", "B"], patch_artist=True, vert=False)  # patches, sideways
        plt.xlabel("Score")
        plt.ylabel("Class")
        c = chart_of(fig)
        self.assertEqual((c["type"], c["x_label"], c["y_label"]), ("box_and_whisker", "Class", "Score"))
        self.assertEqual(c["elements"], want)

    def test_rectangle_of_lines_is_a_line_chart(self):
        fig = plt.figure()
        plt.plot([0, 1, 1, 0, 0], [0, 0, 1, 1, 0])
        self.assertEqual(chart_of(fig)["type"], "line")

    def test_superchart(self):
        fig, axs = plt.subplots(1, 2)
        fig.suptitle("Two")
        axs[0].plot([0, 1], [1, 2])
        axs[0].set_title("left")
        axs[1].bar(["u"], [3])
        c = chart_of(fig)
        self.assertEqual((c["type"], c["title"]), ("superchart", "Two"))
        self.assertEqual([(e["type"], e["title"]) for e in c["elements"]], [("line", "left"), ("bar", None)])
        self.assertEqual(c["elements"][1]["elements"], [{"label": "u", "group": "Group 0", "value": 3.0}])

    def test_unknown_and_blank(self):
        fig, ax = plt.subplots()
        ax.add_artist(plt.Circle((0, 0), 1))
        ax.set_title("Circle")
        self.assertEqual(chart_of(fig), {"type": "unknown", "title": "Circle", "elements": []})
        fig, ax = plt.subplots()
        ax.imshow(np.eye(3))
        self.assertEqual(chart_of(fig)["type"], "unknown")
        fig, ax = plt.subplots()
        ax.set_title("nothing drawn")
        self.assertIsNone(chart_of(fig))
        self.assertIsNone(chart_of(plt.figure()))

    def test_bounds(self):
        fig = plt.figure()
        n = 1_000_000
        plt.plot(np.arange(n), np.arange(n) * 2.0)
        pts = chart_of(fig)["elements"][0]["points"]
        self.assertLessEqual(len(pts), ac.MAX_POINTS)
        self.assertGreater(len(pts), ac.MAX_POINTS // 2)
        self.assertEqual(pts[0], [0.0, 0.0])
        self.assertEqual(pts[-1], [n - 1.0, 2.0 * (n - 1)])
        self.assertTrue(all(a[0] < b[0] for a, b in zip(pts, pts[1:])))
        fig = plt.figure()
        for i in range(ac.MAX_ELEMENTS + 5):
            plt.plot([0, 1, 2], [i, i + 1, i])
        c = chart_of(fig)
        self.assertEqual(len(c["elements"]), ac.MAX_ELEMENTS)
        self.assertLessEqual(sum(len(e["points"]) for e in c["elements"]), ac.MAX_POINTS)
        fig = plt.figure()
        plt.plot([1, 2])
        plt.title("t" * 5000)  # not drawn: Agg cannot render that wide a text
        self.assertEqual(len(ac.figure_chart(fig)["title"]), ac.MAX_TEXT)
        # Long category names in many points: more than MAX_BYTES of JSON, so no chart.
        fig = plt.figure()
        plt.plot(["%0999d" % i for i in range(5000)], np.arange(5000))
        self.assertIsNone(ac.figure_chart(fig))
        fig = plt.figure()
        plt.plot(["%09d" % i for i in range(5000)], np.arange(5000))
        self.assertEqual(len(ac.figure_chart(fig)["elements"][0]["points"]), 5000)


class KernelDisplay(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The kernel's shell with the inline backend, as in a context (which selects it
        # through MPLBACKEND before matplotlib is imported).
        ak._make_shell().run_line_magic("matplotlib", "inline")

    @classmethod
    def tearDownClass(cls):
        plt.switch_backend("Agg")

    def tearDown(self):
        plt.close("all")
        sys.modules.pop("airlock_charts", None)

    def test_figure_result_has_png_and_chart(self):
        fig = plt.figure()
        plt.plot([1, 2], [3, 4], label="s")
        res = ak._result(ak.format_bundle(fig), False)
        self.assertTrue(res["png"])
        self.assertEqual(res["chart"]["type"], "line")
        self.assertEqual(res["chart"]["elements"][0], {"label": "s", "points": [[1.0, 3.0], [2.0, 4.0]]})
        self.assertNotIn("extra", res)

    def test_figure_without_data_has_png_only(self):
        fig = plt.figure()
        fig.add_subplot()
        res = ak._result(ak.format_bundle(fig), False)
        self.assertTrue(res["png"])
        self.assertNotIn("chart", res)
        # A figure without axes is shown as text only (IPython draws no image of it).
        res = ak._result(ak.format_bundle(plt.figure()), False)
        self.assertNotIn("png", res)
        self.assertNotIn("chart", res)
        self.assertRegex(res["text"], r"^<Figure size \d+x\d+ with 0 Axes>$")

    def test_failing_extractor_keeps_png(self):
        broken = types.ModuleType("airlock_charts")

        def boom(fig):
            raise RuntimeError("extractor bug")
        broken.figure_chart = boom
        sys.modules["airlock_charts"] = broken
        fig = plt.figure()
        plt.plot([1, 2])
        res = ak._result(ak.format_bundle(fig), False)
        self.assertTrue(res["png"])
        self.assertNotIn("chart", res)


if __name__ == "__main__":
    unittest.main(verbosity=2)
