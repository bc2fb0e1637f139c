// E2B's `chart` results (matplotlib figures, vmm/guest/lib/airlock_charts.py) through the
// real @e2b/code-interpreter SDK: shared by debug/charts.test.mjs and normal/charts.test.mjs.
// Each case runs real matplotlib code with runCode and checks what the SDK hands the user
// in result.chart (type, title, labels, units, scales, elements), next to the PNG.
import assert from 'node:assert/strict'

const PY = (s) => s.replace(/^\n/, '')

function figureResult(r, what) {
  assert.equal(r.error, undefined, `${what}: ${r.error && r.error.traceback}`)
  assert.equal(r.results.length, 1, `${what}: one result`)
  const res = r.results[0]
  assert.ok(res.png && Buffer.from(res.png, 'base64').subarray(1, 4).toString() === 'PNG', `${what}: a PNG`)
  assert.match(res.text, /Figure/)
  assert.deepEqual(res.extra, {}, `${what}: chart is not an extra`)
  return res
}

function pointAxes(c) {
  for (const a of ['x', 'y']) {
    assert.ok(Array.isArray(c[`${a}_ticks`]) && c[`${a}_ticks`].length > 0, `${a}_ticks`)
    assert.equal(c[`${a}_tick_labels`].length, c[`${a}_ticks`].length, `${a}_tick_labels`)
    assert.ok(c[`${a}_tick_labels`].every((l) => typeof l === 'string'))
  }
}

export const cases = [
  {
    name: 'line: plt.show(), labelled series, units from the axis labels',
    code: PY(`
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [4, 5, 6], label="rising")
plt.plot([1, 2, 3], [6, 5, 4])
plt.axhline(5, color="gray")
plt.title("Speed over time")
plt.xlabel("Time (s)")
plt.ylabel("Speed [m/s]")
plt.legend()
plt.show()
`),
    check(r) {
      const c = figureResult(r, 'line').chart
      assert.equal(c.type, 'line')
      assert.equal(c.title, 'Speed over time')
      assert.deepEqual([c.x_label, c.x_unit, c.y_label, c.y_unit], ['Time (s)', 's', 'Speed [m/s]', 'm/s'])
      assert.deepEqual([c.x_scale, c.y_scale], ['linear', 'linear'])
      pointAxes(c)
      assert.ok(c.x_ticks.every((t) => typeof t === 'number'))
      assert.deepEqual(c.elements, [
        { label: 'rising', points: [[1, 4], [2, 5], [3, 6]] },
        { label: 'Line 1', points: [[1, 6], [2, 5], [3, 4]] },
      ])
    },
  },
  {
    name: 'scatter: a figure left open at the end of the cell',
    code: PY(`
import matplotlib.pyplot as plt
plt.figure()
plt.scatter([1, 2, 3], [3, 1, 2], label="Dataset 1")
plt.scatter([4], [4], label="Dataset 2")
plt.xlabel("A")
plt.grid(True)
`),
    check(r) {
      const c = figureResult(r, 'scatter').chart
      assert.equal(c.type, 'scatter')
      assert.equal(c.title, null)
      assert.deepEqual([c.x_label, c.y_label, c.x_unit, c.y_unit], ['A', null, null, null])
      pointAxes(c)
      assert.deepEqual(c.elements, [
        { label: 'Dataset 1', points: [[1, 3], [2, 1], [3, 2]] },
        { label: 'Dataset 2', points: [[4, 4]] },
      ])
    },
  },
  {
    name: 'bar: categories, group label, values',
    code: PY(`
import matplotlib.pyplot as plt
plt.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
plt.xlabel("Authors")
plt.ylabel("Number of Books Sold")
plt.title("Book Sales by Authors")
plt.show()
`),
    check(r) {
      const c = figureResult(r, 'bar').chart
      assert.equal(c.type, 'bar')
      assert.equal(c.title, 'Book Sales by Authors')
      assert.deepEqual([c.x_label, c.y_label], ['Authors', 'Number of Books Sold'])
      assert.deepEqual(c.elements, [
        { label: 'Author A', group: 'Books Sold', value: 100 },
        { label: 'Author B', group: 'Books Sold', value: 200 },
        { label: 'Author C', group: 'Books Sold', value: 300 },
      ])
    },
  },
  {
    name: 'pie: wedge labels, angles in degrees, radius',
    code: PY(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.pie([90, 10], labels=["No", "Yes"], autopct="%1.1f%%", startangle=90)
ax.set_title("Will I wake up early tomorrow?")
plt.show()
`),
    check(r) {
      const c = figureResult(r, 'pie').chart
      assert.deepEqual(c, {
        type: 'pie',
        title: 'Will I wake up early tomorrow?',
        elements: [{ label: 'No', angle: 324, radius: 1 }, { label: 'Yes', angle: 36, radius: 1 }],
      })
    },
  },
  {
    name: 'box_and_whisker: quartiles, whiskers, outliers',
    code: PY(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5, 20], [2, 3, 4, 5, 6]], labels=["Class A", "Class B"])
ax.set_title("Exam Scores")
ax.set_xlabel("Class")
ax.set_ylabel("Score")
plt.show()
`),
    check(r) {
      const c = figureResult(r, 'box').chart
      assert.equal(c.type, 'box_and_whisker')
      assert.equal(c.title, 'Exam Scores')
      assert.deepEqual([c.x_label, c.y_label], ['Class', 'Score'])
      assert.deepEqual(c.elements, [
        { label: 'Class A', min: 1, first_quartile: 2.25, median: 3.5, third_quartile: 4.75, max: 5, outliers: [20] },
        { label: 'Class B', min: 2, first_quartile: 3, median: 4, third_quartile: 5, max: 6, outliers: [] },
      ])
    },
  },
  {
    name: 'superchart: two axes, the suptitle, one chart per axes',
    code: PY(`
import matplotlib.pyplot as plt
import numpy as np
fig, axs = plt.subplots(1, 2, figsize=(10, 4))
fig.suptitle("Multiple Charts Example")
x = np.linspace(0, 10, 100)
axs[0].plot(x, np.sin(x), "r")
axs[0].set_title("Sine Wave")
axs[1].bar(["a", "b"], [3, 4], label="counts")
axs[1].set_title("Bars")
plt.show()
`),
    check(r) {
      const c = figureResult(r, 'superchart').chart
      assert.equal(c.type, 'superchart')
      assert.equal(c.title, 'Multiple Charts Example')
      assert.deepEqual(c.elements.map((e) => [e.type, e.title]), [['line', 'Sine Wave'], ['bar', 'Bars']])
      const line = c.elements[0]
      assert.equal(line.elements.length, 1)
      assert.equal(line.elements[0].points.length, 100)
      assert.deepEqual(line.elements[0].points[0], [0, 0])
      assert.ok(Math.abs(line.elements[0].points[99][1] - Math.sin(10)) < 1e-9)
      assert.deepEqual(c.elements[1].elements, [
        { label: 'a', group: 'counts', value: 3 },
        { label: 'b', group: 'counts', value: 4 },
      ])
    },
  },
  {
    name: 'unknown: a figure the extractor cannot classify has type unknown and its title',
    code: PY(`
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.add_artist(plt.Circle((0, 0), 1, fill=False))
ax.add_artist(plt.Circle((0, 0), 2, fill=False))
ax.set_title("Two Concentric Circles")
plt.show()
`),
    check(r) {
      const c = figureResult(r, 'unknown').chart
      assert.deepEqual(c, { type: 'unknown', title: 'Two Concentric Circles', elements: [] })
    },
  },
  {
    name: 'PNG only: a figure without data has no chart',
    code: PY(`
import matplotlib.pyplot as plt
plt.figure()
plt.title("empty")
plt.show()
`),
    check(r) {
      const res = figureResult(r, 'blank')
      assert.equal(res.chart, undefined)
    },
  },
  {
    name: 'bounded: a million-point line comes back thinned, first and last points kept',
    code: PY(`
import matplotlib.pyplot as plt
import numpy as np
plt.plot(np.arange(1_000_000), np.arange(1_000_000) * 2.0)
plt.show()
`),
    check(r) {
      const pts = figureResult(r, 'big').chart.elements[0].points
      assert.ok(pts.length <= 20000 && pts.length > 10000, `${pts.length} points`)
      assert.deepEqual(pts[0], [0, 0])
      assert.deepEqual(pts[pts.length - 1], [999999, 1999998])
    },
  },
]

// An extractor that fails must leave the figure's PNG result (and the cell) alone.
export const brokenExtractor = {
  name: 'a failing extractor leaves the PNG and no chart, and no error',
  code: PY(`
import sys, types
broken = types.ModuleType("airlock_charts")
def figure_chart(fig):
    raise RuntimeError("extractor bug")
broken.figure_chart = figure_chart
sys.modules["airlock_charts"] = broken
import matplotlib.pyplot as plt
plt.plot([1, 2, 3])
plt.show()
del sys.modules["airlock_charts"]
`),
  check(r) {
    const res = figureResult(r, 'broken extractor')
    assert.equal(res.chart, undefined)
    assert.deepEqual(r.logs.stderr, [])
  },
}

// Not a figure (no matplotlib needed): a PNG from _repr_png_ comes back as before, no chart.
export const plainPng = {
  name: 'a PNG from _repr_png_ (not a figure) has no chart',
  code: PY(`
import base64
class Img:
    def _repr_png_(self):
        return base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
Img()
`),
  check(r) {
    assert.equal(r.error, undefined)
    assert.equal(r.results.length, 1)
    const res = r.results[0]
    assert.equal(Buffer.from(res.png, 'base64').subarray(1, 4).toString(), 'PNG')
    assert.equal(res.chart, undefined)
    assert.deepEqual(res.extra, {})
  },
}
