// The code interpreter through airlockd (@e2b/code-interpreter 2.8.0, port 49999 routed on
// E2b-Sandbox-Port): runCode results, output streams, errors, contexts, bash.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { BACKEND, CI_TEMPLATE, create } from './helpers.mjs'

let shared
async function sbx() {
  if (!shared) shared = await create({}, CI_TEMPLATE, Sandbox)
  return shared
}

test('runCode: the last expression is the result; print goes to stdout', async () => {
  const s = await sbx()
  const e = await s.runCode('x = 6 * 7\nprint("hi")\nx')
  assert.equal(e.text, '42')
  assert.deepEqual(e.logs.stdout, ['hi\n'])
  assert.equal(e.error, undefined)
  assert.ok(e.executionCount >= 1)
})

test('runCode: state persists between executions; errors are values, not HTTP errors', async () => {
  const s = await sbx()
  await s.runCode('y = 10')
  assert.equal((await s.runCode('y + 1')).text, '11')
  const e = await s.runCode('1 / 0')
  assert.equal(e.error.name, 'ZeroDivisionError')
  assert.match(e.error.traceback, /ZeroDivisionError/)
})

test('runCode: streaming callbacks and environment', async () => {
  const s = await sbx()
  const seen = []
  const e = await s.runCode('import os, sys\nprint(os.environ["AL_V"]); print("e", file=sys.stderr)',
                            { envs: { AL_V: 'v1' }, onStdout: (m) => seen.push(m.line) })
  assert.deepEqual(e.logs.stdout, ['v1\n'])
  assert.deepEqual(e.logs.stderr, ['e\n'])
  assert.ok(seen.length >= 1)
})

test('contexts: python and bash, isolated from each other', async () => {
  const s = await sbx()
  const c = await s.createCodeContext({ language: 'python' })
  await s.runCode('z = 1234', { context: c })
  assert.equal((await s.runCode('z + 1', { context: c })).text, '1235')
  const d = await s.runCode('"z" in dir()')
  assert.equal(d.text, 'False')
  const b = await s.runCode('echo $((2+3))', { language: 'bash' })
  assert.deepEqual(b.logs.stdout, ['5\n'])
  const list = await s.listCodeContexts()
  assert.ok(list.some((x) => x.id === c.id))
  await s.removeCodeContext(c)
})

// The scientific stack of the code-interpreter-v1 template (whose environment sets
// MPLBACKEND=Agg for plain scripts: the kernel still shows figures as results).
test('rich results: matplotlib figures become PNG results (plt.show and end of cell)', async (t) => {
  if (BACKEND === 'test') {
    // The test backend runs the agent on the host, with the host's python (no numpy).
    t.skip('SKIP: the test backend has no template file system (runs with the jail backend)')
    return
  }
  const s = await sbx()
  const r = await s.runCode(`
        import matplotlib.pyplot as plt
        import numpy as np

        x = np.linspace(0, 20, 100)
        plt.plot(x, np.sin(x))
        plt.show()

        x[:3].tolist()
        `)
  assert.equal(r.error, undefined)
  assert.equal(r.results.length, 2)
  assert.ok(r.results[0].png && Buffer.from(r.results[0].png, 'base64').subarray(1, 4).toString() === 'PNG')
  assert.equal(r.results[0].isMainResult, false)
  assert.equal(r.results[1].isMainResult, true)
  const r2 = await s.runCode('import matplotlib.pyplot as plt\nplt.figure()\nplt.bar([1, 2], [3, 4]);')
  assert.equal(r2.results.length, 1, 'an open figure is shown at the end of the cell')
  assert.ok(r2.results[0].png)
  const plain = await s.commands.run('python3 -c "import matplotlib; print(matplotlib.get_backend())"')
  assert.match(plain.stdout, /agg/i, 'plain scripts keep the headless backend')
})

test('rich results: pandas DataFrame has HTML and data', async (t) => {
  if (BACKEND === 'test') {
    // The test backend runs the agent on the host, with the host's python (no numpy).
    t.skip('SKIP: the test backend has no template file system (runs with the jail backend)')
    return
  }
  const s = await sbx()
  const r = await s.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2, 3], "b": [1.5, float("nan"), 3]})')
  const m = r.results[0]
  assert.match(m.html, /<table/)
  assert.deepEqual(m.data.a, [1, 2, 3])
  assert.match(m.text, /a\s+b/)
})

test('runCode: a client timeout interrupts the kernel; the next execution runs', async () => {
  const s = await sbx()
  await assert.rejects(s.runCode('import time; time.sleep(300)', { timeoutMs: 1500 }))
  const r = await s.runCode('1 + 1', { timeoutMs: 20000 })
  assert.equal(r.text, '2')
})

test('runCode: input() is refused like in Jupyter', async () => {
  const s = await sbx()
  const r = await s.runCode('input("name? ")')
  assert.equal(r.error.name, 'StdinNotImplementedError')
})
