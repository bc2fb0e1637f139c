// runCode: stdout/stderr, main results, errors, execution count, contexts, env vars, bash,
// interruption, and rich results (PNG from matplotlib, HTML and data from pandas).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { NotFoundError } from '@e2b/code-interpreter'
import { HOME, sandbox, sleep } from './helpers.mjs'

test('runCode: print goes to stdout in one chunk, with a timestamp', async () => {
  const s = await sandbox()
  const out = []
  const r = await s.runCode('print("hello")', { onStdout: (m) => out.push(m) })
  assert.deepEqual(r.logs.stdout, ['hello\n'])
  assert.equal(out.length, 1)
  assert.equal(out[0].line, 'hello\n')
  assert.equal(r.error, undefined)
  assert.equal(r.results.length, 0)
})

test('runCode: stderr', async () => {
  const s = await sandbox()
  const r = await s.runCode('import sys; print("This is an error message", file=sys.stderr)')
  assert.deepEqual(r.logs.stderr, ['This is an error message\n'])
})

test('runCode: the last expression is the main result; state persists', async () => {
  const s = await sandbox()
  const r = await s.runCode('x = 1; x')
  assert.equal(r.text, '1')
  assert.equal(r.results.length, 1)
  assert.equal(r.results[0].isMainResult, true)
  const r2 = await s.runCode('x += 41\nx')
  assert.equal(r2.text, '42')
  assert.equal((await s.runCode('"a string"')).text, 'a string')
  assert.equal((await s.runCode('{"a": [1, 2]}')).text, "{'a': [1, 2]}")
  assert.equal((await s.runCode('x = 5')).results.length, 0)
  assert.equal((await s.runCode('x;')).results.length, 0, 'a trailing ; suppresses the result')
})

test('runCode: indented code, top-level await, shell escapes', async () => {
  const s = await sandbox()
  const r = await s.runCode(`
        def f(a):
            return a * 2

        f(21)
        `)
  assert.equal(r.text, '42')
  const a = await s.runCode('import asyncio\nawait asyncio.sleep(0.01)\n"awaited"')
  assert.equal(a.text, 'awaited')
  const sh = await s.runCode('!echo from-shell')
  assert.equal(sh.logs.stdout.join(''), 'from-shell\r\n', 'through a pty, as in Jupyter')
  const cwd = await s.runCode('import os; os.getcwd()')
  assert.equal(cwd.text, HOME)
})

test('IPython: IPython.display, a cell magic, line magics, captured shell output, _ and Out', async () => {
  const s = await sandbox()
  const d = await s.runCode("from IPython.display import display, HTML\ndisplay(HTML('<p>x</p>'))\n'main'")
  assert.equal(d.error, undefined, d.error && d.error.traceback)
  assert.equal(d.results.length, 2)
  assert.equal(d.results[0].html, '<p>x</p>')
  assert.equal(d.results[0].isMainResult, false)
  assert.equal(d.results[1].text, 'main')
  const w = await s.runCode('%%writefile ipy_magic.txt\nfrom a cell magic\n')
  assert.match(w.logs.stdout.join(''), /Writing ipy_magic\.txt/)
  assert.equal((await s.runCode("open('ipy_magic.txt').read().strip()")).text, 'from a cell magic')
  const t = await s.runCode('%timeit -n1 -r1 sum(range(10))')
  assert.match(t.logs.stdout.join(''), /per loop/)
  const cap = await s.runCode("lines = !printf 'a\\nb\\n'\nlines")
  assert.equal(cap.text, "['a', 'b']")
  assert.deepEqual(cap.results[0].json, ['a', 'b'])
  const a = await s.runCode('6 * 7')
  assert.equal((await s.runCode('_ + 1')).text, '43')
  assert.equal((await s.runCode(`Out[${a.executionCount}] * 10`)).text, '420')
  assert.equal((await s.runCode(`In[${a.executionCount}]`)).text, '6 * 7')
  const bad = await s.runCode('%no_such_magic')
  assert.equal(bad.error.name, 'UsageError')
})

test('runCode: stdout and results keep their order', async () => {
  const s = await sandbox()
  const seen = []
  await s.runCode('print("before")\ndisplay("shown")\nprint("after")\n"main"', {
    onStdout: (m) => seen.push(`out:${m.line.trim()}`),
    onResult: (r) => seen.push(`result:${r.text}`),
  })
  assert.deepEqual(seen, ['out:before', 'result:shown', 'out:after', 'result:main'])
})

test('runCode: an exception is an execution error, not an HTTP error', async () => {
  const s = await sandbox()
  const errs = []
  const r = await s.runCode('print("partial")\n1/0', { onError: (e) => errs.push(e) })
  assert.equal(errs.length, 1)
  assert.equal(r.error.name, 'ZeroDivisionError')
  assert.equal(r.error.value, 'division by zero')
  assert.match(r.error.traceback, /ZeroDivisionError/)
  assert.deepEqual(r.logs.stdout, ['partial\n'])
  const n = await s.runCode('undefined_name_xyz')
  assert.equal(n.error.name, 'NameError')
  assert.equal(n.error.value, "name 'undefined_name_xyz' is not defined")
  const syn = await s.runCode('def (')
  assert.equal(syn.error.name, 'SyntaxError')
})

test('runCode: execution count increases', async () => {
  const s = await sandbox()
  const a = await s.runCode('1')
  const b = await s.runCode('2')
  assert.ok(a.executionCount >= 1)
  assert.equal(b.executionCount, a.executionCount + 1)
})

test('runCode: env vars apply to one execution only', async () => {
  const s = await sandbox()
  const r = await s.runCode('import os; os.getenv("FOO")', { envs: { FOO: 'bar' } })
  assert.equal(r.text, 'bar')
  const r2 = await s.runCode("import os; os.getenv('FOO', 'default')")
  assert.equal(r2.text, 'default')
})

test('contexts: create, list, run in it (independent), restart, remove', async () => {
  const s = await sandbox()
  await s.runCode('shared = 1')
  const c = await s.createCodeContext({ cwd: '/tmp' })
  assert.equal(c.language, 'python')
  assert.equal(c.cwd, '/tmp')
  const list = await s.listCodeContexts()
  assert.ok(list.some((x) => x.id === c.id))
  assert.ok(list.some((x) => x.language === 'python'))
  const ind = await s.runCode('shared', { context: c })
  assert.equal(ind.error.value, "name 'shared' is not defined")
  assert.equal((await s.runCode('import os; os.getcwd()', { context: c })).text, '/tmp')
  await s.runCode('y = 1', { context: c })
  await s.restartCodeContext(c)
  const after = await s.runCode('y', { context: c })
  assert.equal(after.error.name, 'NameError')
  await s.removeCodeContext(c.id)
  assert.ok(!(await s.listCodeContexts()).some((x) => x.id === c.id))
  await assert.rejects(s.runCode('1', { context: c }), NotFoundError)
})

test('contexts: context and language together are refused', async () => {
  const s = await sandbox()
  const c = await s.createCodeContext()
  await assert.rejects(s.runCode('1', { context: c, language: 'python' }))
  await s.removeCodeContext(c)
})

test('language: bash runs in a persistent shell; unknown languages are NotFoundError', async () => {
  const s = await sandbox()
  const r = await s.runCode('echo $FOO; cd /tmp; X=kept', { language: 'bash', envs: { FOO: 'bar' } })
  assert.deepEqual(r.logs.stdout, ['bar\n'])
  const r2 = await s.runCode('echo ${FOO:-default} $PWD $X', { language: 'bash' })
  assert.deepEqual(r2.logs.stdout, ['default /tmp kept\n'])
  const bad = await s.runCode('exit 3', { language: 'bash' })
  assert.ok(bad.error, 'the shell ended: an error is reported')
  const again = await s.runCode('echo alive', { language: 'bash' })
  assert.deepEqual(again.logs.stdout, ['alive\n'])
  const st = await s.runCode('false', { language: 'bash' })
  assert.equal(st.error.name, 'NonZeroExitStatus')
  await assert.rejects(s.runCode('1', { language: 'r' }), NotFoundError)
})

test('javascript: console output, results, top-level await, imports, state, errors', async () => {
  const s = await sandbox()
  const js = { language: 'js' }
  const hello = await s.runCode('console.log("Hello World!")', js)
  assert.deepEqual(hello.logs.stdout, ['Hello World!\n'])
  assert.equal(hello.results.length, 0)
  const esm = await s.runCode('\n    import { readFileSync } from "fs"\n    console.log(typeof readFileSync)\n    ', js)
  assert.deepEqual(esm.logs.stdout, ['function\n'], esm.error && esm.error.traceback)
  assert.equal((await s.runCode("await Promise.resolve('Hello World!')", { language: 'javascript' })).text, 'Hello World!')
  assert.equal((await s.runCode('process.cwd()', js)).text, HOME)
  await s.runCode('const n = 20\nfunction twice(x) { return 2 * x }\nclass K { get v() { return n } }', js)
  const st = await s.runCode('twice(n) + 2', js)
  assert.equal(st.text, '42')
  assert.equal(st.results[0].isMainResult, true)
  assert.equal((await s.runCode('const n = 1; new K().v + n', js)).text, '2', 'declared again in a later cell')
  assert.equal((await s.runCode('({ a: [1, 2], s: "x" })', js)).text, "{ a: [ 1, 2 ], s: 'x' }")
  const env = await s.runCode('process.env.FOO', { ...js, envs: { FOO: 'bar' } })
  assert.equal(env.text, 'bar')
  assert.equal((await s.runCode("process.env.FOO || 'default'", js)).text, 'default')
  const order = []
  await s.runCode('console.log("a"); $$.html("<b>b</b>"); console.log("c"); "d"', {
    ...js, onStdout: (m) => order.push(m.line.trim()), onResult: (r) => order.push(r.html || r.text) })
  assert.deepEqual(order, ['a', '<b>b</b>', 'c', 'd'])
  const err = await s.runCode('const o = null\no.x', js)
  assert.equal(err.error.name, 'TypeError')
  assert.equal(err.error.value, "Cannot read properties of null (reading 'x')")
  assert.match(err.error.traceback, /<cell>:2:3/)
  assert.equal((await s.runCode('let = (', js)).error.name, 'SyntaxError')
  const a = await s.runCode('1', js)
  assert.equal((await s.runCode('2', js)).executionCount, a.executionCount + 1)
})

test('typescript: types removed, enums and parameter properties compiled', async () => {
  const s = await sandbox()
  const ts = { language: 'ts' }
  const r = await s.runCode('const message: string = "Hello World!"; console.log(message)', ts)
  assert.deepEqual(r.logs.stdout, ['Hello World!\n'], r.error && r.error.traceback)
  const e = await s.runCode('enum Color { Red, Green }\ninterface P { c: Color }\nconst p: P = { c: Color.Green }\np.c', ts)
  assert.equal(e.text, '1', e.error && e.error.traceback)
  const c = await s.runCode('class A { constructor(private v: number) {} get(): number { return this.v } }\nnew A(5).get()', ts)
  assert.equal(c.text, '5')
  assert.equal((await s.runCode('p.c + 1', ts)).text, '2', 'state persists')
  assert.equal((await s.runCode('let bad: = 1', ts)).error.name, 'SyntaxError')
})

test('javascript: a client timeout interrupts the kernel; the next execution runs', async () => {
  const s = await sandbox()
  for (const code of ['while (true) {}', 'await new Promise(() => {})']) {
    await assert.rejects(s.runCode(code, { language: 'js', timeoutMs: 1500 }))
    assert.equal((await s.runCode('1 + 1', { language: 'js', timeoutMs: 20000 })).text, '2', code)
  }
})

test('contexts: the default javascript context is listed after python; js contexts are independent', async () => {
  const s = await sandbox()
  const list = await s.listCodeContexts()
  const langs = list.map((x) => x.language)
  assert.ok(langs.indexOf('python') === 0 && langs.indexOf('javascript') === 1, JSON.stringify(list))
  const c = await s.createCodeContext({ language: 'javascript', cwd: '/tmp' })
  assert.equal(c.language, 'javascript')
  assert.equal((await s.runCode('process.cwd()', { context: c })).text, '/tmp')
  assert.equal((await s.runCode('typeof twice', { context: c })).text, 'undefined')
  await s.removeCodeContext(c)
})

test('runCode: a client timeout interrupts the kernel; the next execution runs', async () => {
  const s = await sandbox()
  await assert.rejects(s.runCode('import time; time.sleep(300)', { timeoutMs: 1500 }))
  await sleep(500)
  const t0 = Date.now()
  const r = await s.runCode('1 + 1', { timeoutMs: 10000 })
  assert.equal(r.text, '2')
  assert.ok(Date.now() - t0 < 5000)
  const k = await s.runCode('import time\ntry:\n    time.sleep(0)\nexcept KeyboardInterrupt:\n    pass\n"ok"')
  assert.equal(k.text, 'ok')
})

test('runCode: input() is refused like in Jupyter', async () => {
  const s = await sandbox()
  const r = await s.runCode('input("name? ")')
  assert.equal(r.error.name, 'StdinNotImplementedError')
})

test('rich results: _repr_html_, _repr_markdown_, _repr_svg_, display()', async () => {
  const s = await sandbox()
  const r = await s.runCode(`
class Rich:
    def _repr_html_(self): return "<b>bold</b>"
    def _repr_markdown_(self): return "**bold**"
    def _repr_svg_(self): return "<svg></svg>"
    def _repr_json_(self): return {"k": 1}
    def __repr__(self): return "Rich()"
Rich()
`)
  const m = r.results[0]
  assert.equal(m.isMainResult, true)
  assert.equal(m.text, 'Rich()')
  assert.equal(m.html, '<b>bold</b>')
  assert.equal(m.markdown, '**bold**')
  assert.equal(m.svg, '<svg></svg>')
  assert.deepEqual(m.json, { k: 1 })
  assert.deepEqual(m.extra, {})
})

// numpy/pandas/matplotlib live in the code-interpreter-v1 template; a host without them
// skips these cases and says why (they run in the jail test of that template).
async function haveScientificStack(s) {
  const r = await s.runCode('import importlib.util as u\nall(u.find_spec(m) for m in ("numpy", "pandas", "matplotlib"))')
  return r.text === 'True'
}

test('rich results: matplotlib figures become PNG results (plt.show and end of cell)', async (t) => {
  const s = await sandbox()
  if (!(await haveScientificStack(s))) {
    t.skip('SKIP: numpy/pandas/matplotlib are not installed for this python (tested in the code-interpreter-v1 template)')
    return
  }
  const r = await s.runCode(`
        import matplotlib.pyplot as plt
        import numpy as np

        x = np.linspace(0, 20, 100)
        plt.plot(x, np.sin(x))
        plt.show()

        x[:3].tolist()
        `)
  assert.equal(r.results.length, 2)
  assert.ok(r.results[0].png && Buffer.from(r.results[0].png, 'base64').subarray(1, 4).toString() === 'PNG')
  assert.match(r.results[0].text, /Figure/)
  assert.deepEqual(r.results[0].extra, {})
  assert.equal(r.results[1].isMainResult, true)
  const r2 = await s.runCode('import matplotlib.pyplot as plt\nplt.figure()\nplt.bar([1, 2], [3, 4]);')
  assert.equal(r2.results.length, 1, 'an open figure is shown at the end of the cell')
  assert.ok(r2.results[0].png)
})

test('rich results: pandas DataFrame has HTML and data', async (t) => {
  const s = await sandbox()
  if (!(await haveScientificStack(s))) {
    t.skip('SKIP: numpy/pandas/matplotlib are not installed for this python (tested in the code-interpreter-v1 template)')
    return
  }
  const r = await s.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2, 3], "b": [1.5, float("nan"), 3]})')
  const m = r.results[0]
  assert.match(m.html, /<table/)
  assert.deepEqual(m.data.a, [1, 2, 3])
  assert.match(m.text, /a\s+b/)
})
