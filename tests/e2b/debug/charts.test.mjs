// E2B's `chart` results from matplotlib figures (cases in ../chart-cases.mjs), in debug mode.
// The agent's Python here is the host's: without numpy/matplotlib the cases SKIP, saying so
// (normal/charts.test.mjs runs them in the code-interpreter-v1 template).
import { test } from 'node:test'
import { brokenExtractor, cases, plainPng } from '../chart-cases.mjs'
import { sandbox } from './helpers.mjs'

let stack
async function haveMatplotlib(s) {
  if (stack === undefined) {
    const r = await s.runCode('import importlib.util as u\nall(u.find_spec(m) for m in ("numpy", "matplotlib"))')
    stack = r.text === 'True'
  }
  return stack
}

for (const c of [...cases, brokenExtractor]) {
  test(`chart: ${c.name}`, async (t) => {
    const s = await sandbox()
    if (!(await haveMatplotlib(s))) {
      t.skip('SKIP: numpy/matplotlib are not installed for this python (tested in the code-interpreter-v1 template)')
      return
    }
    const ctx = await s.createCodeContext({ language: 'python' })
    try {
      c.check(await s.runCode(c.code, { context: ctx, timeoutMs: 60000 }))
    } finally {
      await s.removeCodeContext(ctx)
    }
  })
}

test(`chart: ${plainPng.name}`, async () => {
  const s = await sandbox()
  plainPng.check(await s.runCode(plainPng.code, { timeoutMs: 60000 }))
})
