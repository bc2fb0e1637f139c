// The Python SDK's own exchanges with envd, through airlockd, where its behaviour differs from
// the JS SDK's (the Python SDK cannot be installed here: it needs PyPI). Taken from e2b 2.45.1
// (packages/python-sdk: sandbox_sync/commands, sandbox_sync/filesystem, envd/rpc.py) on
// connectrpc 0.11 (its Connect client, _protocol_connect.py), with the SDK's JSON codec and
// compression off:
//   - commands.run(cmd, timeout=T) is process.Process/Start with Connect-Timeout-Ms: T*1000;
//     envd ends the stream at the deadline with the Connect error deadline_exceeded, which
//     envd/rpc.py turns into TimeoutException (an end event instead would make
//     CommandExitException; commands.connect and the async watch_dir stream likewise);
//   - the synchronous files.watch_dir polls: CreateWatcher, GetWatcherEvents, RemoveWatcher,
//     each a unary call carrying Connect-Timeout-Ms (the request timeout, 60 s).
// The client here sends the same requests byte for byte (HTTP/1.1, as pyqwest speaks to an
// http:// URL) and decodes the answers as connectrpc does.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { create, until, uniq } from './helpers.mjs'

const SANDBOX_URL = new URL(process.env.E2B_SANDBOX_URL)

// envd/rpc.py's _DEFAULT_RPC_ERROR_MAP: Connect code -> the exception the user gets.
const PY_EXCEPTION = {
  invalid_argument: 'InvalidArgumentException', unauthenticated: 'AuthenticationException',
  not_found: 'NotFoundException', unavailable: 'TimeoutException',
  resource_exhausted: 'RateLimitException', canceled: 'TimeoutException',
  deadline_exceeded: 'TimeoutException',
}

function headers(s, stream, timeoutMs, extra = {}) {
  const h = {
    'user-agent': 'e2b-python-sdk/2.45.1',
    'connect-protocol-version': '1',
    // connectrpc sends its accepted encodings; the SDK accepts none.
    [stream ? 'connect-accept-encoding' : 'accept-encoding']: '',
    'content-type': stream ? 'application/connect+json' : 'application/json',
    'E2b-Sandbox-Id': s.sandboxId,
    'E2b-Sandbox-Port': '49983',
    'X-Access-Token': s.envdAccessToken,
    ...extra,
  }
  if (timeoutMs !== undefined) h['connect-timeout-ms'] = String(timeoutMs)
  return h
}

function post(path, hdrs, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: SANDBOX_URL.hostname, port: SANDBOX_URL.port, path,
                               method: 'POST', headers: { ...hdrs, 'content-length': body.length } },
    (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers,
                                    body: Buffer.concat(chunks) }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

function envelope(msg) {
  const data = Buffer.from(JSON.stringify(msg))
  const h = Buffer.alloc(5)
  h.writeUInt32BE(data.length, 1)
  return Buffer.concat([h, data])
}

// connectrpc's ConnectEnvelopeReader: messages, then the end-stream message.
function frames(buf) {
  const msgs = []
  let end = null
  for (let off = 0; off < buf.length;) {
    const flags = buf[off]
    const len = buf.readUInt32BE(off + 1)
    const data = JSON.parse(buf.subarray(off + 5, off + 5 + len).toString())
    off += 5 + len
    assert.equal(end, null, 'a message after the end-stream message')
    if (flags & 2) end = data
    else msgs.push(data)
  }
  assert.ok(end, 'no end-stream message')
  return { msgs, end }
}

async function stream(s, method, msg, timeoutMs) {
  const r = await post(`/${method}`, headers(s, true, timeoutMs, { 'Keepalive-Ping-Interval': '50' }),
                       envelope(msg))
  assert.equal(r.status, 200)
  assert.match(r.headers['content-type'], /^application\/connect\+json/)
  return frames(r.body)
}

async function unary(s, method, msg, extra = {}) {
  const r = await post(`/filesystem.Filesystem/${method}`, headers(s, false, 60000, extra),
                       Buffer.from(JSON.stringify(msg)))
  assert.match(r.headers['content-type'], /^application\/json/)
  return { status: r.status, body: JSON.parse(r.body.toString() || '{}') }
}

let shared
async function sbx() {
  if (!shared) shared = await create()
  return shared
}

test('commands.run(timeout=2): the stream ends with deadline_exceeded -> TimeoutException', async () => {
  const s = await sbx()
  const tag = uniq('pydeadline')
  const { msgs, end } = await stream(s, 'process.Process/Start', {
    process: { cmd: '/bin/bash', args: ['-l', '-c', `echo ${tag}; exec sleep 120`] }, stdin: false,
  }, 2000)
  assert.ok(msgs[0].event.start.pid > 0, 'the start event comes first')
  assert.ok(!msgs.some((m) => m.event.end), `no end event: ${JSON.stringify(msgs)}`)
  assert.deepEqual(end, { error: { code: 'deadline_exceeded', message: 'context deadline exceeded' } })
  assert.equal(PY_EXCEPTION[end.error.code], 'TimeoutException')
  await until(async () => !(await s.commands.list()).some((p) => p.args.join(' ').includes(tag)),
              { what: 'the command to be killed at its deadline' })
})

test('commands.connect(pid, timeout=1): the stream ends with deadline_exceeded, the command goes on', async () => {
  const s = await sbx()
  const h = await s.commands.run('exec sleep 120', { background: true, timeoutMs: 0 })
  const { msgs, end } = await stream(s, 'process.Process/Connect',
                                     { process: { pid: h.pid } }, 1000)
  assert.equal(msgs[0].event.start.pid, h.pid)
  assert.equal(end.error.code, 'deadline_exceeded')
  assert.ok((await s.commands.list()).some((p) => p.pid === h.pid))
  await s.commands.kill(h.pid)
})

test('AsyncSandbox files.watch_dir(timeout=1): the WatchDir stream ends with deadline_exceeded', async () => {
  const s = await sbx()
  const dir = uniq('pywatchstream')
  await s.files.makeDir(dir)
  const { msgs, end } = await stream(s, 'filesystem.Filesystem/WatchDir', { path: dir }, 1000)
  assert.deepEqual(msgs[0], { start: {} })
  assert.equal(end.error.code, 'deadline_exceeded')
})

test('Sandbox files.watch_dir: CreateWatcher, GetWatcherEvents, RemoveWatcher', async () => {
  const s = await sbx()
  const dir = uniq('pywatch')
  await s.files.makeDir(dir)
  // filesystem.py watch_dir: CreateWatcher with the keepalive header, as the SDK sends it.
  const c = await unary(s, 'CreateWatcher', { path: dir, recursive: true, includeEntry: true },
                        { 'Keepalive-Ping-Interval': '50' })
  assert.equal(c.status, 200, JSON.stringify(c.body))
  assert.match(c.body.watcherId, /^w[a-z0-9]{20}$/)
  const id = c.body.watcherId
  await s.files.write(`${dir}/a.txt`, 'hello')
  await s.files.makeDir(`${dir}/sub`)
  await s.files.write(`${dir}/sub/b.txt`, 'below')
  // watch_handle.py get_new_events: each call returns what came since the last one.
  const seen = []
  await until(async () => {
    const g = await unary(s, 'GetWatcherEvents', { watcherId: id })
    assert.equal(g.status, 200, JSON.stringify(g.body))
    seen.push(...(g.body.events ?? []))
    return seen.some((e) => e.name === 'sub/b.txt' && e.type === 'EVENT_TYPE_CREATE')
  }, { what: 'the events of the writes' })
  const a = seen.find((e) => e.name === 'a.txt' && e.type === 'EVENT_TYPE_CREATE')
  assert.ok(a, JSON.stringify(seen))
  assert.equal(a.entry.name, 'a.txt')
  assert.equal(a.entry.type, 'FILE_TYPE_FILE')
  assert.ok(seen.some((e) => e.name === 'sub' && e.type === 'EVENT_TYPE_CREATE'))
  const again = await unary(s, 'GetWatcherEvents', { watcherId: id })
  assert.deepEqual(again, { status: 200, body: {} })
  // stop(): RemoveWatcher; the watcher is gone afterwards (NotFoundException).
  const rm = await unary(s, 'RemoveWatcher', { watcherId: id })
  assert.deepEqual(rm, { status: 200, body: {} })
  const gone = await unary(s, 'GetWatcherEvents', { watcherId: id })
  assert.equal(gone.status, 404)
  assert.equal(gone.body.code, 'not_found')
  assert.equal(PY_EXCEPTION[gone.body.code], 'NotFoundException')
  // envd's errors for a bad path, as the SDK maps them.
  const missing = await unary(s, 'CreateWatcher', { path: `${dir}/nope` })
  assert.equal(missing.status, 404)
  assert.equal(PY_EXCEPTION[missing.body.code], 'NotFoundException')
  const file = await unary(s, 'CreateWatcher', { path: `${dir}/a.txt` })
  assert.equal(file.status, 400)
  assert.equal(PY_EXCEPTION[file.body.code], 'InvalidArgumentException')
})
