// The code interpreter through airlockd (@e2b/code-interpreter 2.8.0, port 49999 routed on
// E2b-Sandbox-Port): runCode results, output streams, errors, contexts, bash.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { NotFoundError, Sandbox } from '@e2b/code-interpreter'
import { BACKEND, CI_TEMPLATE, TEMPLATE, create } from './helpers.mjs'

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

test('contexts: the defaults exist from the start and are listed first, in creation order', async () => {
  // A fresh sandbox: nothing has run in it yet.
  const s = await create({}, CI_TEMPLATE, Sandbox)
  if (BACKEND === 'jail') {
    // The template asks for the code interpreter: its kernels start with the sandbox.
    const ps = await s.commands.run('ps -eo args')
    assert.match(ps.stdout, /airlock_kernel/, `no kernel running at start:\n${ps.stdout}`)
  }
  const c = await s.createCodeContext({ language: 'python', cwd: '/tmp' })
  const list = await s.listCodeContexts()
  assert.equal(list[0].language, 'python', `the default python context comes first: ${JSON.stringify(list)}`)
  assert.notEqual(list[0].id, c.id)
  // (its cwd is the user's home: /home/user, or the test backend's per-sandbox home)
  assert.equal(list[0].cwd, (await s.runCode('import os; os.getcwd()')).text)
  assert.deepEqual(list[list.length - 1], { id: c.id, language: 'python', cwd: '/tmp' })
  assert.equal(list.filter((x) => x.id === c.id).length, 1)
  // The default context is the one runCode uses without a context, and stays first.
  await s.runCode('marker = 7')
  const d = await s.createCodeContext()
  const again = await s.listCodeContexts()
  assert.deepEqual(again.slice(0, list.length).map((x) => x.id), list.map((x) => x.id))
  assert.equal(again[again.length - 1].id, d.id)
  assert.equal((await s.runCode('marker', { context: d })).error.name, 'NameError')
  await s.kill()
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

test('IPython: display, a magic, a ! line, _ and Out through airlockd', async () => {
  const s = await sbx()
  const d = await s.runCode("from IPython.display import display, Markdown\ndisplay(Markdown('**md**'))\n6 * 7")
  assert.equal(d.error, undefined, d.error && d.error.traceback)
  assert.deepEqual(d.results.map((r) => [r.markdown, r.text, r.isMainResult]),
    [['**md**', '<IPython.core.display.Markdown object>', false], [undefined, '42', true]])
  assert.equal((await s.runCode(`_ + Out[${d.executionCount}]`)).text, '84')
  const m = await s.runCode('%env AL_MAGIC=set\n%pwd')
  assert.equal(m.error, undefined)
  assert.equal((await s.runCode("import os; os.environ['AL_MAGIC']")).text, 'set')
  const sh = await s.runCode('who = !whoami\nwho')
  const me = (await s.runCode('import getpass; getpass.getuser()')).text
  assert.equal(sh.text, `['${me}']`)
})

// A user's "!pip install" (pip defaults to the user's site-packages, which the kernel
// imports from at once) of a wheel made in the sandbox: no index, nothing leaves it.
test('IPython: !pip install of a local wheel, then import', async (t) => {
  if (BACKEND === 'test') {
    t.skip('SKIP: the test backend runs the host\'s python (tested with the jail backend)')
    return
  }
  const s = await sbx()
  const mk = await s.runCode(`
import base64, hashlib, os, zipfile
def rec(name, data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, h, len(data))
files = {"al_sdk_demo.py": b"VALUE = 'from the wheel'\\n",
         "al_sdk_demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: al-sdk-demo\\nVersion: 1.0\\n",
         "al_sdk_demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
os.makedirs("/tmp/wheels", exist_ok=True)
with zipfile.ZipFile("/tmp/wheels/al_sdk_demo-1.0-py3-none-any.whl", "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
    z.writestr("al_sdk_demo-1.0.dist-info/RECORD",
               "\\n".join([rec(n, d) for n, d in files.items()] + ["al_sdk_demo-1.0.dist-info/RECORD,,"]))
`)
  assert.equal(mk.error, undefined, mk.error && mk.error.traceback)
  const r = await s.runCode('!pip install --no-index /tmp/wheels/al_sdk_demo-1.0-py3-none-any.whl\n' +
                            'import al_sdk_demo\nal_sdk_demo.VALUE', { timeoutMs: 120000 })
  assert.equal(r.error, undefined, `${r.logs.stdout.join('')}${r.logs.stderr.join('')}`)
  assert.match(r.logs.stdout.join(''), /Successfully installed al-sdk-demo-1\.0/)
  assert.equal(r.text, 'from the wheel')
})

test('javascript and typescript through airlockd: results, errors, default contexts', async () => {
  const s = await sbx()
  const list = await s.listCodeContexts()
  assert.deepEqual(list.slice(0, 2).map((x) => x.language), ['python', 'javascript'], JSON.stringify(list))
  const r = await s.runCode('const xs = [1, 2, 3]\nconsole.log(xs.length)\nxs.map((x) => x * 2)', { language: 'js' })
  assert.deepEqual(r.logs.stdout, ['3\n'])
  assert.equal(r.text, '[ 2, 4, 6 ]')
  const e = await s.runCode('JSON.parse("{")', { language: 'javascript' })
  assert.equal(e.error.name, 'SyntaxError')
  assert.match(e.error.value, /JSON/)
  assert.equal((await s.runCode('process.cwd()', { language: 'ts' })).text, list[0].cwd, 'the home')
  const t = await s.runCode('type N = number\nconst n: N = 41\nn + 1', { language: 'typescript' })
  assert.equal(t.text, '42', t.error && t.error.traceback)
})

test('javascript: a template without Node.js answers NotFoundError', async (t) => {
  if (BACKEND === 'test') {
    t.skip('SKIP: the test backend runs the host\'s Node.js (tested with the jail backend)')
    return
  }
  const s = await create({}, TEMPLATE, Sandbox) // base: no Node.js
  await assert.rejects(s.runCode('1', { language: 'js' }), (err) => err instanceof NotFoundError &&
    /needs Node\.js/.test(err.message))
  assert.deepEqual((await s.listCodeContexts()).map((x) => x.language), ['python'])
  await s.kill()
})

test('runCode: input() is refused like in Jupyter', async () => {
  const s = await sbx()
  const r = await s.runCode('input("name? ")')
  assert.equal(r.error.name, 'StdinNotImplementedError')
})
