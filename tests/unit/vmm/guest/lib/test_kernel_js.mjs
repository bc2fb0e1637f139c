// Unit tests of the agent's JavaScript kernel (vmm/guest/lib/airlock_kernel.js) through its
// wire protocol (fd 3 requests, fd 4 messages), as airlock-agent drives it: cell rewriting
// (declarations kept across cells, imports, exports, the last expression, line numbers),
// TypeScript, interrupts, per-execution environment. Needs Node.js with Debian's node-acorn
// and esbuild (deploy/setup installs them); SKIPs, saying so, without them.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const KERNEL = path.join(process.env.AIRLOCK_KERNEL_LIB || path.join(here, '../../../../../vmm/guest/lib'), 'airlock_kernel.js')
const missing = ['/usr/share/nodejs/acorn/package.json', '/usr/bin/esbuild'].filter((p) => !fs.existsSync(p))
const skip = missing.length ? `SKIP: no ${missing.join(', ')} (Debian's node-acorn and esbuild)` : false

class Kernel {
  constructor (args = [], opts = {}) {
    this.p = spawn(process.execPath, [KERNEL, ...args], { stdio: ['ignore', 'pipe', 'pipe', 'pipe', 'pipe'], ...opts })
    this.buf = Buffer.alloc(0)
    this.waiting = []
    this.msgs = []
    this.p.stdio[4].on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d])
      while (this.buf.length >= 4 && this.buf.length >= 4 + this.buf.readUInt32BE(0)) {
        const n = this.buf.readUInt32BE(0)
        this.msgs.push(JSON.parse(this.buf.subarray(4, 4 + n)))
        this.buf = this.buf.subarray(4 + n)
      }
      this.wake()
    })
    this.p.stdout.resume()
    this.p.stderr.resume()
  }

  wake () {
    for (const w of this.waiting.splice(0)) w()
  }

  async next () {
    while (!this.msgs.length) await new Promise((resolve) => this.waiting.push(resolve))
    return this.msgs.shift()
  }

  request (req) {
    const body = Buffer.from(JSON.stringify(req))
    const hdr = Buffer.alloc(4)
    hdr.writeUInt32BE(body.length)
    this.p.stdio[3].write(Buffer.concat([hdr, body]))
  }

  send (code, envVars) {
    this.request({ op: 'execute', code, env_vars: envVars })
  }

  async collect () {
    const out = []
    for (;;) {
      const m = await this.next()
      if (m.type === 'done') return out
      out.push(m)
    }
  }

  async run (code, envVars) {
    this.send(code, envVars)
    return this.collect()
  }

  async ready () {
    assert.deepEqual(await this.next(), { type: 'ready' })
    return this
  }

  close () {
    this.p.stdio[3].end()
    return new Promise((resolve) => this.p.on('exit', resolve))
  }
}

const text = (msgs) => (msgs.find((m) => m.type === 'result' && m.is_main_result) || {}).text
const out = (msgs) => msgs.filter((m) => m.type === 'stdout').map((m) => m.text).join('')
const error = (msgs) => msgs.find((m) => m.type === 'error')

test('cells: declarations persist and may be declared again; the last expression', { skip }, async () => {
  const k = await new Kernel([], { cwd: os.tmpdir() }).ready()
  try {
    assert.equal(text(await k.run('let a = 1, [b, { c }] = [2, { c: 3 }]\nvar d\nconst e = a + b + c')), undefined)
    assert.equal(text(await k.run('e')), '6')
    assert.equal(text(await k.run('const e = 10; e')), '10')
    assert.equal(text(await k.run('function f () { return g() }\nfunction g () { return 7 }\nf()')), '7')
    assert.equal(text(await k.run('class C { m () { return e } }\nnew C().m()')), '10')
    assert.equal(text(await k.run('export const x = 5\nexport function y () { return x }\nexport default y()')), '5')
    assert.equal(text(await k.run('x + y()')), '10')
    assert.equal(text(await k.run('// comment\n  e + 1 // trailing')), '11')
    assert.equal(text(await k.run('"use strict"')), "'use strict'", 'a lone string is a value, not a directive')
    assert.equal(text(await k.run('await new Promise((r) => setTimeout(() => r(42), 1))')), '42')
    assert.equal(text(await k.run('if (true) { 1 }')), undefined, 'only an expression statement is the result')
  } finally {
    await k.close()
  }
})

test('cells: imports of built-in, relative and CommonJS modules; require from the cwd', { skip }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'al-js-'))
  fs.writeFileSync(path.join(dir, 'esm.mjs'), 'export const v = "esm"; export default "dflt"\n')
  fs.writeFileSync(path.join(dir, 'cjs.cjs'), 'module.exports = { v: "cjs" }\n')
  const k = await new Kernel([], { cwd: dir }).ready()
  try {
    const m = await k.run('import dflt, { v } from "./esm.mjs"\nimport * as ns from "./esm.mjs"\n' +
                          'import cjs from "./cjs.cjs"\nimport { join } from "node:path"\n' +
                          '[dflt, v, ns.v, cjs.v, join("a", "b"), require("./cjs.cjs").v]')
    assert.equal(text(m), "[ 'dflt', 'esm', 'esm', 'cjs', 'a/b', 'cjs' ]", JSON.stringify(m))
    assert.equal(text(await k.run('v')), "'esm'", 'an imported name stays defined')
    assert.equal(error(await k.run('import "./nope.mjs"')).name, 'Error')
  } finally {
    await k.close()
    fs.rmSync(dir, { recursive: true })
  }
})

test('errors: name, message, the cell\'s own line and column', { skip }, async () => {
  const k = await new Kernel().ready()
  try {
    const e = error(await k.run('const o = null\n  o.x'))
    assert.equal(e.name, 'TypeError')
    assert.equal(e.value, "Cannot read properties of null (reading 'x')")
    assert.match(e.traceback, /^TypeError: .*\n {4}at <cell>:2:5$/)
    const s = error(await k.run('let = ('))
    assert.equal(s.name, 'SyntaxError')
    assert.match(s.traceback, /<cell>:1:/)
    assert.deepEqual(error(await k.run('throw 5')), { type: 'error', name: 'Error', value: '5', traceback: 'Uncaught 5' })
    assert.equal(text(await k.run('"still alive"')), "'still alive'")
  } finally {
    await k.close()
  }
})

test('output: console and process.stdout in order with results; env vars per execution', { skip }, async () => {
  const k = await new Kernel().ready()
  try {
    const m = await k.run('console.log("a"); process.stdout.write("b\\n"); $$.html("<i>h</i>"); console.error("e"); "z"')
    assert.deepEqual(m.slice(1).map((x) => [x.type, x.text]),
      [['stdout', 'a\n'], ['stdout', 'b\n'], ['result', '<HTML>'], ['stderr', 'e\n'], ['result', "'z'"]])
    assert.equal(text(await k.run('process.env.AL_T', { AL_T: 'v' })), "'v'")
    assert.equal(text(await k.run('process.env.AL_T ?? "unset"')), "'unset'")
    assert.equal(text(await k.run('"\\ud800"')), "'\\ud800'", 'util.inspect escapes a lone surrogate')
  } finally {
    await k.close()
  }
})

test('interrupts: a synchronous loop and a pending await end the cell; the kernel goes on', { skip }, async () => {
  const k = await new Kernel().ready()
  try {
    // the interrupt request (what the agent sends), in a synchronous loop and in an await
    for (const code of ['console.log("started"); while (true) {}',
      'console.log("started"); await new Promise(() => {})']) {
      k.send(code)
      assert.equal((await k.next()).type, 'number_of_executions')
      assert.equal((await k.next()).text, 'started\n')
      k.request({ op: 'interrupt' })
      const e = error(await k.collect())
      assert.equal(e.value, 'Script execution interrupted.', code)
    }
    k.request({ op: 'interrupt' }) // with nothing running: nothing happens
    assert.equal(text(await k.run('1 + 1')), '2')
  } finally {
    await k.close()
  }
})

test('typescript: types removed, enums, imports kept for later cells', { skip }, async () => {
  const k = await new Kernel(['--typescript']).ready()
  try {
    assert.equal(text(await k.run('enum E { A, B }\ninterface I { e: E }\nconst i: I = { e: E.B }\ni.e')), '1')
    assert.equal(text(await k.run('import { join } from "path"\nconst n: number = 1')), undefined)
    assert.equal(text(await k.run('join("x", String(n as number))')), "'x/1'")
    assert.equal(error(await k.run('let bad: = 1')).name, 'SyntaxError')
  } finally {
    await k.close()
  }
})
