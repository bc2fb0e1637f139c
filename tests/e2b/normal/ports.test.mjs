// The sandbox's own servers through airlockd (e2b 2.51.0), as getHost(port) users reach
// them: a server started with commands.run(..., { background: true }), fetched by Host
// (getHost, the way wildcard DNS would send it) and by the sandbox headers on
// E2B_SANDBOX_URL, with the sandbox's trafficAccessToken; a large file byte for byte; a
// WebSocket with a real client library (undici); 403 without the token or with a wrong one
// (E2B's status); 502 for a closed port and once the server is killed; the base template's
// python and pip commands (python -m http.server, as E2B users run it).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import { createHash } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { readFile } from 'node:fs/promises'
import { WebSocket } from 'undici'
import { BACKEND, create, until } from './helpers.mjs'

const SANDBOX_URL = new URL(process.env.E2B_SANDBOX_URL)
const TOOL = fileURLToPath(new URL('../../integration/fwd_tool.py', import.meta.url))

// A request to airlockd carrying the Host that getHost(port) names.
function viaHost(host, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: SANDBOX_URL.hostname, port: SANDBOX_URL.port, path,
                               headers: { Host: host, ...headers } }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }))
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
}

function byHeaders(s, port, path, extra = {}) {
  return fetch(new URL(path, SANDBOX_URL), {
    headers: { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': String(port), ...extra } })
}

test('getHost(port): a background server in the sandbox, through airlockd', async () => {
  const s = await create()
  assert.match(s.trafficAccessToken, /^[0-9a-f]{64}$/)
  const auth = { 'E2B-Traffic-Access-Token': s.trafficAccessToken }
  const port = 8123
  await s.files.write('/tmp/ports/hello.txt', 'hello from the sandbox\n')
  const srv = await s.commands.run(
    `python3 -m http.server ${port} --bind 127.0.0.1 --directory /tmp/ports`, { background: true })
  const host = s.getHost(port)
  assert.equal(host, `${port}-${s.sandboxId}.${s.sandboxDomain}`)
  await until(async () => (await viaHost(host, '/hello.txt', auth)).status === 200,
              { what: 'the server to answer', timeoutMs: 15000 })

  // By Host (getHost) and by the sandbox headers (E2B_SANDBOX_URL).
  const r = await viaHost(host, '/hello.txt', auth)
  assert.equal(r.body.toString(), 'hello from the sandbox\n')
  const f = await byHeaders(s, port, '/hello.txt', auth)
  assert.equal(f.status, 200)
  assert.equal(await f.text(), 'hello from the sandbox\n')
  assert.equal(f.headers.get('via'), '1.1 airlock')

  // 20 MB byte for byte.
  const sum = (await s.commands.run(
    'head -c 20000000 /dev/urandom >/tmp/ports/big.bin && sha256sum /tmp/ports/big.bin')).stdout.split(' ')[0]
  const big = Buffer.from(await (await byHeaders(s, port, '/big.bin', auth)).arrayBuffer())
  assert.equal(big.length, 20000000)
  assert.equal(createHash('sha256').update(big).digest('hex'), sum)

  // The token is needed; a port nobody serves is a 502 that says so.
  const no = await byHeaders(s, port, '/hello.txt')
  assert.equal(no.status, 403)
  assert.match((await no.json()).message, /E2B-Traffic-Access-Token/)
  const wrong = await viaHost(host, '/hello.txt', { 'E2B-Traffic-Access-Token': '0'.repeat(64) })
  assert.equal(wrong.status, 403)
  const closed = await byHeaders(s, 8124, '/', auth)
  assert.equal(closed.status, 502)
  assert.match((await closed.json()).message, /port 8124 is not open in the sandbox/)

  // Killed: the port closes.
  assert.equal(await srv.kill(), true)
  await until(async () => (await byHeaders(s, port, '/', auth)).status === 502,
              { what: 'the port to close' })
})

test('getHost(port): WebSocket to a loopback-only server (undici client)', async () => {
  const s = await create()
  await s.files.write('/tmp/fwd_tool.py', await readFile(TOOL))
  await s.commands.run('python3 /tmp/fwd_tool.py ws-server 8765', { background: true })
  const url = new URL('/live', SANDBOX_URL)
  url.protocol = 'ws:'
  const open = () => new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { 'E2b-Sandbox-Id': s.sandboxId,
      'E2b-Sandbox-Port': '8765', 'E2B-Traffic-Access-Token': s.trafficAccessToken } })
    ws.onopen = () => resolve(ws)
    ws.onerror = (e) => reject(e.error || new Error('websocket error'))
  })
  let ws
  await until(async () => { try { ws = await open(); return true } catch { return false } },
              { what: 'the WebSocket server', timeoutMs: 15000 })
  const got = []
  ws.onmessage = (m) => got.push(m.data)
  ws.send('hello airlock')
  ws.send('live reload')
  await until(() => got.length === 2, { what: 'the echoes' })
  assert.deepEqual(got, ['hello airlock', 'live reload'])
  const closed = new Promise((resolve) => { ws.onclose = (e) => resolve(e.code) })
  ws.close(1000)
  assert.equal(await closed, 1000)
})

test('base template: python and pip commands as in E2B\'s base image; python -m http.server via getHost', async (t) => {
  if (BACKEND === 'test') {
    t.skip('SKIP: the test backend runs the host\'s commands (tested with the jail backend)')
    return
  }
  const s = await create()
  const v = await s.commands.run('python --version && pip --version')
  assert.match(v.stdout, /^Python 3\.\d+\.\d+\npip \d+[.\d]* from .* \(python 3\.\d+\)\n$/)
  // root: a user of commands.run (sudo: sudo.test.mjs)
  assert.equal((await s.commands.run('id -u', { user: 'root' })).stdout, '0\n')
  const auth = { 'E2B-Traffic-Access-Token': s.trafficAccessToken }
  const port = 8125
  await s.files.write('/tmp/py/index.txt', 'served by python\n')
  const srv = await s.commands.run(`cd /tmp/py && python -m http.server ${port}`, { background: true })
  await until(async () => (await viaHost(s.getHost(port), '/index.txt', auth)).status === 200,
              { what: 'python -m http.server to answer', timeoutMs: 15000 })
  assert.equal((await viaHost(s.getHost(port), '/index.txt', auth)).body.toString(), 'served by python\n')
  assert.equal(await srv.kill(), true)
  await s.kill()
})
