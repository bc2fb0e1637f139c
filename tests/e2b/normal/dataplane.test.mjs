// The data plane through airlockd (e2b 2.51.0): commands (streams, exit codes, stdin,
// background + kill + connect, deadlines), pty, files (text, binary, multi-file, gzip, large
// streamed uploads and downloads), watchDir, and routing (two sandboxes never see each
// other's files; a wrong access token is refused; a sandbox that is gone is answered as
// E2B answers).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { CommandExitError, FileNotFoundError, FilesystemEventType, TimeoutError } from 'e2b'
import { API_URL, create, sleep, until, uniq } from './helpers.mjs'

let shared
async function sbx() {
  if (!shared) shared = await create({ envs: { AL_SANDBOX_ENV: 'from-create' } })
  return shared
}

test('commands: stdout, stderr, exit codes, envs', async () => {
  const s = await sbx()
  const r = await s.commands.run('echo out; echo err >&2; echo "$AL_SANDBOX_ENV $X"',
                                 { envs: { X: 'per-command' } })
  assert.equal(r.stdout, 'out\nfrom-create per-command\n')
  assert.equal(r.stderr, 'err\n')
  await assert.rejects(s.commands.run('exit 7'), (e) => e instanceof CommandExitError &&
                       e.exitCode === 7)
})

test('commands: streaming callbacks see output as it comes', async () => {
  const s = await sbx()
  const chunks = []
  const t0 = Date.now()
  let firstAt = 0
  await s.commands.run('echo one; sleep 1; echo two', {
    onStdout: (d) => { if (!firstAt) firstAt = Date.now(); chunks.push(d) } })
  assert.equal(chunks.join(''), 'one\ntwo\n')
  assert.ok(firstAt - t0 < 900, `the first line arrived after ${firstAt - t0} ms (buffered?)`)
})

test('commands: background, list, stdin, connect, kill', async () => {
  const s = await sbx()
  const h = await s.commands.run('cat', { background: true, stdin: true })
  const list = await s.commands.list()
  assert.ok(list.some((p) => p.pid === h.pid))
  await s.commands.sendStdin(h.pid, 'hello stdin\n')
  await until(() => h.stdout.includes('hello stdin'), { what: 'stdin echoed' })
  const c = await s.commands.connect(h.pid)
  assert.equal(c.pid, h.pid)
  assert.equal(await s.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), CommandExitError)
  assert.equal(await s.commands.kill(h.pid), false)
})

// Deadlines (Connect-Timeout-Ms, which the SDK sends with every stream's timeoutMs): the JS
// client enforces its own as well, so what it sees is a TimeoutError either way; what the
// server does at the deadline is visible in what is left running. The wire-level answer
// (deadline_exceeded, which the Python SDK depends on) is in python-wire.test.mjs.
test('commands: timeoutMs ends the command (TimeoutError) and kills it', async () => {
  const s = await sbx()
  const tag = uniq('deadline')
  await assert.rejects(s.commands.run(`echo ${tag}; exec sleep 120`, { timeoutMs: 1500 }),
                       (e) => e instanceof TimeoutError)
  await until(async () => !(await s.commands.list()).some((p) => p.args.join(' ').includes(tag)),
              { what: 'the command to be killed at its deadline' })
})

test('commands.connect: its timeoutMs ends the stream, not the command', async () => {
  const s = await sbx()
  const h = await s.commands.run('exec sleep 120', { background: true, timeoutMs: 0 })
  const c = await s.commands.connect(h.pid, { timeoutMs: 1500 })
  await assert.rejects(c.wait(), (e) => e instanceof TimeoutError)
  assert.ok((await s.commands.list()).some((p) => p.pid === h.pid))
  assert.equal(await s.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), CommandExitError)
})

test('pty: interactive shell, input, resize, kill', async () => {
  const s = await sbx()
  let out = ''
  const dec = new TextDecoder()
  const p = await s.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
  await s.pty.sendInput(p.pid, new TextEncoder().encode('echo pty-$((6*7)); stty size\n'))
  await until(() => out.includes('pty-42') && /24 80/.test(out), { what: 'pty output' })
  await s.pty.resize(p.pid, { cols: 100, rows: 30 })
  await s.pty.sendInput(p.pid, new TextEncoder().encode('stty size\n'))
  await until(() => /30 100/.test(out), { what: 'resized pty' })
  assert.equal(await s.pty.kill(p.pid), true)
})

test('files: write/read text and bytes, list, exists, makeDir, rename, remove', async () => {
  const s = await sbx()
  const dir = uniq('fdir')
  assert.equal(await s.files.makeDir(dir), true)
  assert.equal(await s.files.makeDir(dir), false)
  await s.files.write(`${dir}/a.txt`, 'ünï 🙂\n')
  assert.equal(await s.files.read(`${dir}/a.txt`), 'ünï 🙂\n')
  const bin = randomBytes(1000)
  await s.files.write(`${dir}/b.bin`, bin)
  assert.deepEqual(Buffer.from(await s.files.read(`${dir}/b.bin`, { format: 'bytes' })), bin)
  const multi = await s.files.write([{ path: `${dir}/m1`, data: '1' }, { path: `${dir}/m2`, data: '2' }])
  assert.equal(multi.length, 2)
  const names = (await s.files.list(dir)).map((e) => e.name).sort()
  assert.deepEqual(names, ['a.txt', 'b.bin', 'm1', 'm2'])
  assert.equal(await s.files.exists(`${dir}/m1`), true)
  await s.files.rename(`${dir}/m1`, `${dir}/m3`)
  assert.equal(await s.files.exists(`${dir}/m1`), false)
  await s.files.remove(`${dir}/m3`)
  assert.equal(await s.files.exists(`${dir}/m3`), false)
  await assert.rejects(s.files.read(`${dir}/nope`), FileNotFoundError)
  const gz = await s.files.read(`${dir}/a.txt`, { gzip: true })
  assert.equal(gz, 'ünï 🙂\n')
})

test('files: 24 MiB up and down, streamed (never buffered whole)', async () => {
  const s = await sbx()
  const big = randomBytes(24 << 20)
  const want = createHash('sha256').update(big).digest('hex')
  const name = uniq('big')
  const stream = new ReadableStream({
    start(c) {
      for (let o = 0; o < big.length; o += 1 << 20) c.enqueue(big.subarray(o, o + (1 << 20)))
      c.close()
    },
  })
  await s.files.write(name, stream)
  const r = await s.commands.run(`sha256sum ${name}`)
  assert.equal(r.stdout.split(' ')[0], want)
  const back = await s.files.read(name, { format: 'stream' })
  const h = createHash('sha256')
  let n = 0
  for await (const chunk of back) {
    h.update(chunk)
    n += chunk.length
  }
  assert.equal(n, big.length)
  assert.equal(h.digest('hex'), want)
  await s.files.remove(name)
})

test('watchDir: create, write, rename, remove events through the proxy', async () => {
  const s = await sbx()
  const dir = uniq('watch')
  await s.files.makeDir(dir)
  const events = []
  const w = await s.files.watchDir(dir, (e) => events.push(e), { timeoutMs: 0 })
  await s.files.write(`${dir}/x.txt`, 'x')
  await s.commands.run(`mv ${dir}/x.txt ${dir}/y.txt && rm ${dir}/y.txt`)
  await until(() => events.some((e) => e.type === FilesystemEventType.REMOVE && e.name === 'y.txt'),
              { what: 'the remove event' })
  assert.ok(events.some((e) => e.type === FilesystemEventType.CREATE && e.name === 'x.txt'))
  assert.ok(events.some((e) => e.type === FilesystemEventType.RENAME))
  await w.stop()
})

test('routing: each sandbox sees only its own files; a wrong token is refused', async () => {
  const a = await sbx()
  const b = await create()
  const name = uniq('mine')
  await a.files.write(name, 'a')
  assert.equal(await b.files.exists(name), false)
  // The same request with b's id and a's token: refused by b's agent.
  const r = await fetch(`${API_URL}/files?path=${name}`, {
    headers: { 'E2b-Sandbox-Id': b.sandboxId, 'E2b-Sandbox-Port': '49983',
               'X-Access-Token': 'x'.repeat(64) } })
  assert.ok(r.status === 401 || r.status === 404, `status ${r.status}`)
  // Unknown sandbox: E2B's proxy's 502 and body.
  const g = await fetch(`${API_URL}/health`, { headers: { 'E2b-Sandbox-Id': 'gone0000000000000000',
                                                          'E2b-Sandbox-Port': '49983' } })
  assert.equal(g.status, 502)
  assert.match(g.headers.get('content-type'), /^application\/json/)
  assert.deepEqual(await g.json(),
                   { sandboxId: 'gone0000000000000000', message: 'The sandbox was not found', code: 502 })
  await sleep(0)
})

test('a killed sandbox: the SDK reports what E2B reports', async () => {
  const s = await create()
  await s.files.write('gone.txt', 'x')
  assert.equal(await s.kill(), true)
  // The SDK builds its error from E2B's body: "The sandbox was not found: ...".
  await assert.rejects(s.files.read('gone.txt'),
                       (e) => e instanceof TimeoutError && /^The sandbox was not found/.test(e.message))
  assert.equal(await s.isRunning(), false)
  const r = await fetch(`${API_URL}/health`, { headers: { 'E2b-Sandbox-Id': s.sandboxId,
                                                          'E2b-Sandbox-Port': '49983' } })
  assert.equal(r.status, 502)
  assert.deepEqual(await r.json(),
                   { sandboxId: s.sandboxId, message: 'The sandbox was not found', code: 502 })
})

test('signed file URLs (uploadUrl/downloadUrl) are routed by their signature', async () => {
  const s = await sbx()
  const name = uniq('signed')
  const up = await s.uploadUrl(name)
  assert.ok(up.includes('signature=v1_'), up)
  const form = new FormData()
  form.append('file', new Blob(['through a signed URL']), name)
  const r = await fetch(up, { method: 'POST', body: form })
  assert.equal(r.status, 200, await r.text())
  const down = await s.downloadUrl(name)
  const g = await fetch(down)
  assert.equal(g.status, 200)
  assert.equal(await g.text(), 'through a signed URL')
  // A signature made with another token matches no sandbox.
  const forged = down.replace(/signature=v1_[^&]+/, 'signature=v1_AAAA')
  assert.equal((await fetch(forged)).status, 502)
})
