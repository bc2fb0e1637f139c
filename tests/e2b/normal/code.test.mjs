// The code interpreter through airlockd (@e2b/code-interpreter 2.8.0, port 49999 routed on
// E2b-Sandbox-Port): runCode results, output streams, errors, contexts, bash.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'
import { CI_TEMPLATE, create } from './helpers.mjs'

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
