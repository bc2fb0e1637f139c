// E2B's `chart` results from matplotlib figures (cases in ../chart-cases.mjs) through
// airlockd, in the code-interpreter-v1 template (numpy, matplotlib): @e2b/code-interpreter
// 2.8.0's runCode, result.chart next to result.png.
import { test } from 'node:test'
import { Sandbox } from '@e2b/code-interpreter'
import { brokenExtractor, cases, plainPng } from '../chart-cases.mjs'
import { BACKEND, CI_TEMPLATE, create } from './helpers.mjs'

let shared
async function sbx() {
  if (!shared) shared = await create({}, CI_TEMPLATE, Sandbox)
  return shared
}

for (const c of [...cases, brokenExtractor, plainPng]) {
  test(`chart: ${c.name}`, async (t) => {
    if (BACKEND === 'test' && c !== plainPng) {
      // The test backend runs the agent on the host, with the host's python (no numpy).
      t.skip('SKIP: the test backend has no template file system (runs with the jail backend)')
      return
    }
    const s = await sbx()
    // Each case in its own context: no figure or module state leaks from one to the next.
    const ctx = await s.createCodeContext({ language: 'python' })
    try {
      c.check(await s.runCode(c.code, { context: ctx, timeoutMs: 60000 }))
    } finally {
      await s.removeCodeContext(ctx)
    }
  })
}
