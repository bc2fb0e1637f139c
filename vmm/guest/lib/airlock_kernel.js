// airlock_kernel.js: one persistent JavaScript or TypeScript context of airlock's code
// interpreter, run by Node.js (`node airlock_kernel.js [--typescript]`).
//
// Started by airlock-agent (as the context's user, without privileges) with the same pipes
// and messages as the Python kernel (airlock_kernel.py):
//   fd 0  /dev/null            fd 1/2  stdout/stderr of subprocesses, read by the agent
//   fd 3  requests (agent ->)  fd 4    messages (-> agent)
// each a 4-byte big-endian length and a UTF-8 JSON object.
//   request:  {"op": "execute", "code": "...", "env_vars": {...}}, {"op": "interrupt"}
//   messages: {"type": "ready"} (or {"type": "unavailable", "reason": ...} and exit 3), then
//             per execution number_of_executions, stdout/stderr, result, error, done.
//
// A cell is a module-like script as in E2B's JavaScript kernel: the value of its last
// expression is the main result (util.inspect as text), top-level await, `import` of
// built-in, installed and relative modules (ESM or CommonJS), `require`. What a cell declares
// (var, let, const, function, class, imported names) stays defined for the next cells and
// may be declared again there. TypeScript (--typescript) is compiled by esbuild (types
// removed, enums and parameter properties compiled; no type checking); parsing uses acorn
// (Debian: esbuild, node-acorn). console output travels with the results, in order.
// The interrupt request ({"op": "interrupt"}) stops the running cell, in its synchronous
// part (a SIGINT the kernel sends itself) or while it awaits.
'use strict'

const fs = require('fs')
const path = require('path')
const util = require('util')
const vm = require('vm')
const { createRequire, builtinModules } = require('module')
const { pathToFileURL } = require('url')

const REQ_FD = 3
const MSG_FD = 4
const MAX_MESSAGE = 32 << 20
const CELL = '<cell>'
const TYPESCRIPT = process.argv.includes('--typescript')

// ---- wire -----------------------------------------------------------------------------

function wellFormed (s) {
  // lone surrogates are not UTF-8: the agent's JSON parser would refuse the message
  return s.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD')
}

function writeAll (fd, buf) {
  let off = 0
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off)
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e
    }
  }
}

function send (msg) {
  let data = Buffer.from(JSON.stringify(msg, (k, v) => typeof v === 'string' ? wellFormed(v) : v))
  if (data.length > MAX_MESSAGE && msg.type === 'result') {
    data = Buffer.from(JSON.stringify({
      type: 'error',
      name: 'ResultTooLarge',
      value: `a result of ${data.length} bytes is larger than the ${MAX_MESSAGE} bytes the interpreter forwards`,
      traceback: ''
    }))
  }
  const hdr = Buffer.alloc(4)
  hdr.writeUInt32BE(data.length)
  writeAll(MSG_FD, Buffer.concat([hdr, data]))
}

// ---- output: console and process.stdout/stderr become messages ------------------------

function streamWrite (kind) {
  return function (chunk, encoding, cb) {
    if (typeof encoding === 'function') {
      cb = encoding
      encoding = undefined
    }
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8')
    if (text) send({ type: kind, text, timestamp: new Date().toISOString() })
    if (cb) process.nextTick(cb)
    return true
  }
}

// ---- modules ----------------------------------------------------------------------------

// Where Debian puts Node modules (also for a Node.js not built by Debian).
const SYSTEM_MODULE_DIRS = ['/usr/share/nodejs', '/usr/lib/nodejs',
  ...(() => { try { return fs.readdirSync('/usr/lib').map((d) => `/usr/lib/${d}/nodejs`) } catch { return [] } })()]

function systemModule (name) {
  for (const d of SYSTEM_MODULE_DIRS) {
    const p = path.join(d, name)
    if (fs.existsSync(path.join(p, 'package.json'))) return p
  }
  return null
}

function cellRequire () {
  return createRequire(path.join(process.cwd(), CELL))
}

// import() of what a cell names: built-ins as they are, anything else resolved from the
// working directory (then the system's module directories), as `require` would find it.
async function importModule (spec) {
  if (spec.startsWith('node:') || builtinModules.includes(spec)) return import(spec)
  if (/^[a-z][a-z0-9+.-]*:/i.test(spec)) return import(spec) // file:, data: URLs
  let resolved
  try {
    resolved = cellRequire().resolve(spec)
  } catch (e) {
    const sys = !spec.startsWith('.') && !spec.startsWith('/') && systemModule(spec.split('/')[0])
    if (!sys) throw e
    resolved = createRequire(path.join(path.dirname(sys), CELL)).resolve(spec)
  }
  return import(pathToFileURL(resolved).href)
}

// ---- cells ------------------------------------------------------------------------------

let acorn = null
let esbuild = null

function declaredNames (pattern, out) {
  if (!pattern) return out
  switch (pattern.type) {
    case 'Identifier': out.push(pattern.name); break
    case 'ObjectPattern':
      for (const p of pattern.properties) declaredNames(p.type === 'RestElement' ? p.argument : p.value, out)
      break
    case 'ArrayPattern': for (const e of pattern.elements) declaredNames(e, out); break
    case 'RestElement': declaredNames(pattern.argument, out); break
    case 'AssignmentPattern': declaredNames(pattern.left, out); break
  }
  return out
}

class CellSyntaxError extends SyntaxError {}

// The cell as a script: its top-level names become globals (var), the rest runs in an async
// function (top-level await) that returns the value of the last expression statement.
function rewrite (src) {
  const comments = []
  let ast
  try {
    ast = acorn.parse(src, {
      ecmaVersion: 'latest',
      sourceType: 'module',
      allowAwaitOutsideFunction: true,
      allowHashBang: true,
      locations: true,
      onComment: comments
    })
  } catch (e) {
    const err = new CellSyntaxError(e.message)
    err.stack = `SyntaxError: ${e.message}` + (e.loc ? `\n    at ${CELL}:${e.loc.line}:${e.loc.column + 1}` : '')
    throw err
  }
  const names = new Set()
  const edits = [] // [start, end, text]
  const hoisted = [] // function declarations, made global before the rest of the cell runs
  let returnFirst = false // the last expression is on the cell's first line: "return (" ends the prologue
  const text = (n) => src.slice(n.start, n.end)
  const body = ast.body
  let n = 0
  for (const node of body) {
    n++
    const last = n === body.length
    let decl = node
    if (node.type === 'ExportNamedDeclaration' || node.type === 'ExportDefaultDeclaration') {
      if (!node.declaration) {
        edits.push([node.start, node.end, ''])
        continue
      }
      decl = node.declaration
      edits.push([node.start, decl.start, ''])
    }
    if (node.type === 'ExportAllDeclaration') {
      edits.push([node.start, node.end, ''])
      continue
    }
    if (node.type === 'ImportDeclaration') {
      const parts = []
      for (const s of node.specifiers) {
        names.add(s.local.name)
        if (s.type === 'ImportDefaultSpecifier') parts.push(`${s.local.name} = __m.default;`)
        else if (s.type === 'ImportNamespaceSpecifier') parts.push(`${s.local.name} = __m;`)
        else parts.push(`${s.local.name} = __m[${JSON.stringify(s.imported.name ?? s.imported.value)}];`)
      }
      edits.push([node.start, node.end,
        `{ const __m = await globalThis.__airlock.import(${JSON.stringify(node.source.value)}); ${parts.join(' ')} }`])
      continue
    }
    if (decl.type === 'VariableDeclaration') {
      const assigns = []
      for (const d of decl.declarations) {
        declaredNames(d.id, []).forEach((x) => names.add(x))
        if (d.init) assigns.push(`${text(d.id)} = ${text(d.init)}`)
        else if (decl.kind !== 'var') assigns.push(`${text(d.id)} = undefined`)
      }
      edits.push([decl.start, decl.end, assigns.length ? `(${assigns.join(', ')});` : ''])
      continue
    }
    if (decl.type === 'FunctionDeclaration' && decl.id) {
      // stays in place, hoisted in the cell's function, and is published first
      names.add(decl.id.name)
      hoisted.push(`globalThis[${JSON.stringify(decl.id.name)}] = ${decl.id.name};`)
      continue
    }
    if (decl.type === 'ClassDeclaration' && decl.id) {
      names.add(decl.id.name)
      edits.push([decl.start, decl.end, `${decl.id.name} = ${text(decl)};`])
      continue
    }
    if (last && node.type === 'ExpressionStatement') {
      // "return (" goes at the end of the statement before when the expression begins a
      // line of its own, so that its columns stay the cell's
      const prevEnd = n >= 2 ? body[n - 2].end : 0
      const gap = src.slice(prevEnd, node.start)
      const commented = comments.some((c) => c.start >= prevEnd && c.end <= node.start)
      if ((n === 1 || gap.includes('\n')) && !commented) {
        if (n === 1) returnFirst = true
        else edits.push([prevEnd, prevEnd, ';return ('])
        // after the statement's text (its parentheses included), before its semicolon
        const end = src[node.end - 1] === ';' ? node.end - 1 : node.end
        edits.push([end, node.end, ');'])
      } else {
        edits.push([node.start, node.end, `return (${text(node.expression)});`])
      }
    } else if (last && decl.type !== node.type && /Expression$|Literal$|Identifier$/.test(decl.type)) {
      edits.push([decl.start, decl.end, `return (${text(decl)});`]) // export default <expr>
    }
  }
  let out = ''
  let pos = 0
  for (const [s, e, t] of edits.sort((a, b) => a[0] - b[0])) {
    // as many lines as the text replaced: the cell's line numbers stay its own
    const lines = (src.slice(s, e).match(/\n/g) || []).length - (t.match(/\n/g) || []).length
    out += src.slice(pos, s) + t + '\n'.repeat(Math.max(0, lines))
    pos = e
  }
  out += src.slice(pos)
  // One line of prologue, run with a line offset of -1: the cell's lines and columns are
  // its own in errors.
  const vars = names.size ? `var ${[...names].join(', ')}; ` : ''
  return `${vars}(async () => { ${hoisted.join(' ')}${returnFirst ? ' return (' : ''}\n${out}\n})()`
}

async function compileTypeScript (code) {
  try {
    const r = await esbuild.transform(code, {
      loader: 'ts',
      sourcefile: CELL,
      target: `node${process.versions.node.split('.')[0]}`,
      // imports stay even when a cell does not use them (a later cell may)
      tsconfigRaw: { compilerOptions: { preserveValueImports: true } }
    })
    return r.code
  } catch (e) {
    const m = e.errors && e.errors[0]
    if (!m) throw e
    const err = new CellSyntaxError(m.text)
    err.stack = `SyntaxError: ${m.text}` + (m.location ? `\n    at ${CELL}:${m.location.line}:${m.location.column + 1}` : '')
    throw err
  }
}

// ---- results and errors -----------------------------------------------------------------

// text/plain with util.inspect (as E2B's kernel); the _toHtml/_toSvg/_toPng/_toJpeg/
// _toMime methods of a value (ijavascript's conventions) add their MIME types.
function bundle (value) {
  const data = { 'text/plain': util.inspect(value, { depth: 4, maxArrayLength: 1000, maxStringLength: 1 << 20 }) }
  if (value !== null && (typeof value === 'object' || typeof value === 'function')) {
    const rich = [['_toHtml', 'text/html'], ['_toSvg', 'image/svg+xml'], ['_toPng', 'image/png'],
      ['_toJpeg', 'image/jpeg'], ['_toMarkdown', 'text/markdown'], ['_toLatex', 'text/latex']]
    for (const [m, mime] of rich) {
      if (typeof value[m] === 'function') {
        try { data[mime] = String(value[m]()) } catch {}
      }
    }
    if (typeof value._toMime === 'function') {
      try { Object.assign(data, value._toMime()) } catch {}
    }
  }
  return data
}

const MIME_KEYS = {
  'text/plain': 'text',
  'text/html': 'html',
  'text/markdown': 'markdown',
  'image/svg+xml': 'svg',
  'image/png': 'png',
  'image/jpeg': 'jpeg',
  'application/pdf': 'pdf',
  'text/latex': 'latex',
  'application/json': 'json',
  'application/javascript': 'javascript'
}

function result (data, isMain) {
  const msg = { type: 'result', is_main_result: isMain }
  const extra = {}
  for (const [mime, v] of Object.entries(data)) {
    const val = Buffer.isBuffer(v) ? v.toString('base64') : v
    if (MIME_KEYS[mime]) msg[MIME_KEYS[mime]] = val
    else extra[mime] = val
  }
  if (Object.keys(extra).length) msg.extra = extra
  return msg
}

// $$: results that are not the main one (display data), in the spirit of ijavascript's $$.
const display = {
  html: (s) => send(result({ 'text/plain': '<HTML>', 'text/html': String(s) }, false)),
  svg: (s) => send(result({ 'text/plain': '<SVG>', 'image/svg+xml': String(s) }, false)),
  png: (b) => send(result({ 'text/plain': '<PNG>', 'image/png': Buffer.isBuffer(b) ? b.toString('base64') : String(b) }, false)),
  jpeg: (b) => send(result({ 'text/plain': '<JPEG>', 'image/jpeg': Buffer.isBuffer(b) ? b.toString('base64') : String(b) }, false)),
  markdown: (s) => send(result({ 'text/plain': String(s), 'text/markdown': String(s) }, false)),
  text: (s) => send(result({ 'text/plain': String(s) }, false)),
  mime: (b) => send(result(Object.assign({ 'text/plain': '' }, b), false)),
  display: (v) => send(result(bundle(v), false))
}

let wrapperFrame = null // "<cell>:N:" of the line that calls the cell's function

function cleanStack (stack) {
  // Without the kernel's frames, Node's internals and the call of the cell's function:
  // they say nothing about the cell.
  return String(stack).split('\n').filter((l) => !l.includes(__filename) && !/[( ]node:/.test(l) &&
    !(wrapperFrame && l.includes(wrapperFrame))).join('\n')
}

function errorMessage (e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'message' in e && 'name' in e)) {
    return { type: 'error', name: String(e.name || 'Error'), value: String(e.message), traceback: cleanStack(e.stack || '') }
  }
  return { type: 'error', name: 'Error', value: util.inspect(e), traceback: `Uncaught ${util.inspect(e)}` }
}

// ---- the kernel -------------------------------------------------------------------------

// Requests are read by a thread of their own, so that an interrupt request is seen while a
// cell keeps the main thread busy. Shared with it (Int32Array over a SharedArrayBuffer):
const RUNNING = 0 // the id of the running execution (0: none)
const SYNC = 1 // 1 while its synchronous part runs (vm.runInThisContext)
const STOP = 2 // the id of the execution an interrupt was asked for
const shared = new Int32Array(new SharedArrayBuffer(12))

// The reader: frames from fd 3 to the main thread. An interrupt is posted (which ends a
// pending await); when the cell is still in its synchronous part 100 ms later (a loop the
// main thread cannot leave), it raises SIGINT, which Node's watchdog turns into an
// exception there.
const READER = `
const { parentPort, workerData } = require('worker_threads')
const fs = require('fs')
const shared = workerData.shared
function readExact (n) {
  const buf = Buffer.alloc(n)
  let off = 0
  while (off < n) {
    let r
    try {
      r = fs.readSync(workerData.fd, buf, off, n - off, null)
    } catch (e) {
      if (e.code !== 'EAGAIN') return null
      Atomics.wait(shared, 0, Atomics.load(shared, 0), 10)
      continue
    }
    if (r === 0) return null
    off += r
  }
  return buf
}
for (;;) {
  const hdr = readExact(4)
  const n = hdr && hdr.readUInt32BE(0)
  const body = hdr && n <= workerData.max ? readExact(n) : null
  if (!body) break
  const req = JSON.parse(body.toString('utf8'))
  if (req.op === 'interrupt') {
    const id = Atomics.load(shared, ${RUNNING})
    if (!id) continue
    Atomics.store(shared, ${STOP}, id)
    parentPort.postMessage({ op: 'interrupt', id })
    // still in its synchronous part a moment later: a loop, which only SIGINT can stop
    const end = Date.now() + 100
    while (Atomics.load(shared, ${SYNC}) === id && Date.now() < end) {
      Atomics.wait(shared, ${SYNC}, id, end - Date.now())
    }
    if (Atomics.load(shared, ${SYNC}) === id) process.kill(process.pid, 'SIGINT')
  } else if (req.op === 'execute') {
    parentPort.postMessage(req)
  }
}
parentPort.postMessage({ op: 'eof' })
`

let count = 0
let current = null // the running execution: { id, interrupt }

class Interrupted extends Error {
  constructor () {
    super('Script execution interrupted.')
    this.name = 'Error'
  }
}

function interruptIfAsked () {
  if (current && Atomics.load(shared, STOP) === current.id) current.interrupt()
}

async function execute (code, envVars) {
  count++
  send({ type: 'number_of_executions', execution_count: count })
  const saved = new Map()
  for (const [k, v] of Object.entries(envVars || {})) {
    if (typeof v === 'string' && k && !k.includes('=') && !(k + v).includes('\0')) {
      saved.set(k, Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined)
      process.env[k] = v
    }
  }
  let stop
  const interrupted = new Promise((resolve, reject) => { stop = reject })
  interrupted.catch(() => {})
  current = { id: count, interrupt: () => stop(new Interrupted()) }
  Atomics.store(shared, RUNNING, count)
  try {
    const js = TYPESCRIPT ? await Promise.race([compileTypeScript(code), interrupted]) : code
    const script = rewrite(js)
    wrapperFrame = `${CELL}:${script.split('\n').length - 1}:`
    globalThis.require = cellRequire()
    globalThis.module = { exports: {}, require: globalThis.require }
    globalThis.exports = globalThis.module.exports
    globalThis.__filename = path.join(process.cwd(), CELL)
    globalThis.__dirname = process.cwd()
    let running
    Atomics.store(shared, SYNC, count)
    try {
      running = vm.runInThisContext(script, { filename: CELL, lineOffset: -1, breakOnSigint: true })
    } finally {
      Atomics.store(shared, SYNC, 0)
      Atomics.notify(shared, SYNC)
    }
    interruptIfAsked()
    const value = await Promise.race([running, interrupted])
    if (value !== undefined) send(result(bundle(value), true))
  } catch (e) {
    if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') send(errorMessage(new Interrupted()))
    else send(errorMessage(e))
  } finally {
    Atomics.store(shared, RUNNING, 0)
    if (Atomics.load(shared, STOP) === current.id) {
      // A SIGINT sent as the synchronous part ended may be held by Node for the next
      // script that listens for it: let it land here, not in the next cell.
      try { vm.runInThisContext('undefined', { breakOnSigint: true }) } catch {}
    }
    current = null
    for (const [k, old] of saved) {
      if (old === undefined) delete process.env[k]
      else process.env[k] = old
    }
    send({ type: 'done' })
  }
}

function serve () {
  const { Worker } = require('worker_threads')
  const queue = []
  let busy = false
  const next = () => {
    if (busy || !queue.length) return
    busy = true
    const req = queue.shift()
    execute(req.code || '', req.env_vars).finally(() => {
      busy = false
      next()
    })
  }
  const reader = new Worker(READER, { eval: true, workerData: { fd: REQ_FD, shared, max: MAX_MESSAGE * 2 } })
  reader.on('message', (req) => {
    if (req.op === 'execute') {
      queue.push(req)
      next()
    } else if (req.op === 'interrupt' && current && current.id === req.id) {
      current.interrupt()
    } else if (req.op === 'eof') {
      process.exit(0)
    }
  })
  reader.on('error', () => process.exit(2))
  send({ type: 'ready' })
}

function loadTools () {
  const acornDir = systemModule('acorn')
  if (!acornDir) return 'JavaScript contexts need acorn (Debian: node-acorn), which this sandbox lacks'
  acorn = require(acornDir)
  if (TYPESCRIPT) {
    const dir = systemModule('esbuild')
    const bin = ['/usr/bin/esbuild', '/usr/local/bin/esbuild'].find((p) => fs.existsSync(p))
    if (!dir || !bin) return 'TypeScript contexts need esbuild (Debian: esbuild), which this sandbox lacks'
    // esbuild's Node API finds its binary through Node's module path, which a Node.js not
    // built by Debian lacks: it is named while the API loads (which reads it once), and
    // not left in the environment that user code and its processes inherit.
    const had = Object.prototype.hasOwnProperty.call(process.env, 'ESBUILD_BINARY_PATH')
    if (!had) process.env.ESBUILD_BINARY_PATH = bin
    try {
      esbuild = require(dir)
    } finally {
      if (!had) delete process.env.ESBUILD_BINARY_PATH
    }
  }
  return null
}

function main () {
  const missing = loadTools()
  if (missing) {
    send({ type: 'unavailable', reason: `${missing} (node ${process.version})` })
    process.exit(3)
  }
  process.stdout.write = streamWrite('stdout')
  process.stderr.write = streamWrite('stderr')
  globalThis.__airlock = { import: importModule }
  Object.defineProperty(globalThis, '__airlock', { enumerable: false })
  globalThis.$$ = display
  // SIGINT is the reader's (an interrupt request): any other is ignored
  process.on('SIGINT', interruptIfAsked)
  // What a cell leaves running and fails later is reported, never the end of the kernel.
  process.on('uncaughtException', (e) => process.stderr.write(`Uncaught ${cleanStack(e && e.stack ? e.stack : util.inspect(e))}\n`))
  process.on('unhandledRejection', (e) => process.stderr.write(`Unhandled rejection: ${cleanStack(e && e.stack ? e.stack : util.inspect(e))}\n`))
  serve()
}

main()
