// lifecycle (e2b 2.51.0, v2 paths): create with metadata, envs and timeout; getInfo, list
// with filters and pagination, setTimeout, connect, isRunning, pause/resume, getMetrics,
// updateNetwork (replace semantics, refusals, 404, 409); kill; errors mapped to the SDK's
// classes (unknown sandbox, bad key, bad template); Template.exists.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { AuthenticationError, Sandbox, SandboxError, SandboxNotFoundError, Template } from 'e2b'
import { API_KEY, API_URL, TEMPLATE, api, create, sleep, track, uniq, until } from './helpers.mjs'

test('create: metadata, envs and timeout reach the sandbox and getInfo', async () => {
  const tag = uniq('life')
  const t0 = Date.now()
  const s = await create({ metadata: { tag, 'a b': 'ünï çödé &=%+' }, envs: { AL_FOO: 'foo bar' },
                          timeoutMs: 120_000 })
  assert.match(s.sandboxId, /^[a-z0-9]{20}$/)
  const r = await s.commands.run('echo "$AL_FOO"')
  assert.equal(r.stdout, 'foo bar\n')
  const info = await s.getInfo()
  assert.equal(info.sandboxId, s.sandboxId)
  assert.equal(info.templateId, TEMPLATE)
  assert.deepEqual(info.metadata, { tag, 'a b': 'ünï çödé &=%+' })
  assert.equal(info.state, 'running')
  assert.ok(info.cpuCount >= 1 && info.memoryMB >= 16)
  assert.ok(Math.abs(info.startedAt.getTime() - t0) < 60_000, `startedAt ${info.startedAt}`)
  const ttl = info.endAt.getTime() - info.startedAt.getTime()
  assert.ok(ttl > 119_000 && ttl < 121_000, `endAt - startedAt = ${ttl} ms`)
  const stat = await Sandbox.getInfo(s.sandboxId)
  assert.equal(stat.sandboxId, s.sandboxId)
})

test('list: metadata filters (the SDK encodes them three times), state, pagination', async () => {
  const tag = uniq('list')
  const made = []
  for (let i = 0; i < 5; i++)
    made.push(await create({ metadata: { tag, idx: String(i), odd: i % 2 ? 'yes ✓' : 'no' } }))
  // Unfiltered (and paged one by one): all five are there.
  const seen = new Set()
  const pager = Sandbox.list({ query: { metadata: { tag } }, limit: 2 })
  let pages = 0
  while (pager.hasNext) {
    const items = await pager.nextItems()
    assert.ok(items.length <= 2)
    for (const it of items) {
      assert.ok(!seen.has(it.sandboxId), 'a sandbox came twice')
      seen.add(it.sandboxId)
      assert.equal(it.metadata.tag, tag)
      assert.equal(it.state, 'running')
    }
    pages++
  }
  assert.equal(pages, 3)
  assert.deepEqual([...seen].sort(), made.map((s) => s.sandboxId).sort())
  // Two keys, one with spaces and non-ASCII.
  const odd = await Sandbox.list({ query: { metadata: { tag, odd: 'yes ✓' } } }).nextItems()
  assert.deepEqual(odd.map((s) => s.metadata.idx).sort(), ['1', '3'])
  // Newest first by default; asc on request.
  const desc = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
  assert.equal(desc[0].sandboxId, made[4].sandboxId)
  // Paused sandboxes are listed only when asked for.
  assert.equal(await made[0].pause(), true)
  const running = await Sandbox.list({ query: { metadata: { tag }, state: ['running'] } }).nextItems()
  assert.equal(running.length, 4)
  const paused = await Sandbox.list({ query: { metadata: { tag }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [made[0].sandboxId])
  // A filter nobody matches.
  const none = await Sandbox.list({ query: { metadata: { tag: uniq('nobody') } } }).nextItems()
  assert.deepEqual(none, [])
})

test('setTimeout moves endAt; an expired sandbox is gone', async () => {
  const s = await create({ timeoutMs: 60_000 })
  await s.setTimeout(3_000)
  const info = await s.getInfo()
  const left = info.endAt.getTime() - Date.now()
  assert.ok(left > 0 && left <= 3_500, `endAt is ${left} ms away`)
  await until(async () => !(await s.isRunning()), { timeoutMs: 15_000, what: 'the timeout' })
  await assert.rejects(Sandbox.getInfo(s.sandboxId), SandboxNotFoundError)
  assert.equal(await Sandbox.kill(s.sandboxId), false)
})

test('connect: to a running sandbox (extends, never shortens, its lifetime)', async () => {
  const s = await create({ timeoutMs: 120_000 })
  await s.files.write('marker.txt', 'still me')
  const before = (await s.getInfo()).endAt.getTime()
  const c = await Sandbox.connect(s.sandboxId, { timeoutMs: 10_000 })
  assert.equal(c.sandboxId, s.sandboxId)
  assert.equal(await c.files.read('marker.txt'), 'still me')
  assert.equal((await c.getInfo()).endAt.getTime(), before)
  await c.connect({ timeoutMs: 600_000 })
  assert.ok((await c.getInfo()).endAt.getTime() > before + 60_000)
})

test('pause and resume (connect): state survives, traffic to a paused sandbox fails', async () => {
  const s = await create({ timeoutMs: 120_000 })
  await s.commands.run('echo kept > state.txt')
  assert.equal(await s.pause(), true)
  assert.equal(await s.pause(), false) // already paused: body.code 409
  assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused')
  assert.equal(await s.isRunning(), false)
  const r = await Sandbox.connect(s.sandboxId, { timeoutMs: 120_000 })
  assert.equal((await r.getInfo()).state, 'running')
  assert.equal((await r.commands.run('cat state.txt')).stdout, 'kept\n')
  assert.equal(await r.isRunning(), true)
})

test('updateNetwork: replaces the egress fields, narrows only, 404 and 409 as E2B', async () => {
  const s = await create({ timeoutMs: 120_000, allowInternetAccess: true,
                           network: { allowOut: ['pypi.org'], denyOut: ['0.0.0.0/0'] } })
  let info = await s.getInfo()
  assert.deepEqual(info.network.allowOut, ['pypi.org'])
  assert.equal(info.allowInternetAccess, true)
  // Replace semantics: what is given replaces, what is omitted is cleared.
  await s.updateNetwork({ allowOut: ['files.pythonhosted.org'], allowInternetAccess: false })
  info = await s.getInfo()
  assert.deepEqual(info.network.allowOut, ['files.pythonhosted.org'])
  assert.equal(info.network.denyOut, undefined)
  assert.equal(info.allowInternetAccess, false)
  await Sandbox.updateNetwork(s.sandboxId, { denyOut: ['203.0.113.0/24'] })
  info = await Sandbox.getInfo(s.sandboxId)
  assert.deepEqual(info.network.denyOut, ['203.0.113.0/24'])
  assert.equal(info.network.allowOut, undefined)
  assert.equal(info.allowInternetAccess, undefined)
  // Never wider than the policy: an allowOut of everything is a 400 naming it; nothing changes.
  await assert.rejects(s.updateNetwork({ allowOut: ['0.0.0.0/0'] }), (e) => {
    assert.ok(e instanceof SandboxError, `got ${e}`)
    assert.equal(e.statusCode, 400)
    assert.match(e.message, /'0\.0\.0\.0\/0' would allow all traffic/)
    return true
  })
  await assert.rejects(s.updateNetwork({ rules: { 'api.example.com': [{ transform: { headers: { A: 'b' } } }] } }),
                       (e) => e.statusCode === 400 && /network\.rules/.test(e.message))
  assert.deepEqual((await s.getInfo()).network.denyOut, ['203.0.113.0/24'])
  await assert.rejects(Sandbox.updateNetwork('nosuchsandbox0000000', {}), SandboxNotFoundError)
  // A paused sandbox: 409 (resume it first), as E2B answers.
  assert.equal(await s.pause(), true)
  await assert.rejects(s.updateNetwork({}), (e) => e.statusCode === 409 && /paused/.test(e.message))
  const r = await Sandbox.connect(s.sandboxId, { timeoutMs: 120_000 })
  await r.updateNetwork({})
  info = await r.getInfo()
  assert.equal(info.network, undefined)
  assert.equal(info.allowInternetAccess, undefined)
})

test('updateNetwork: a generation per applied update, If-Match, concurrent updates', async () => {
  const s = await create({ timeoutMs: 120_000 })
  const gen = async () => (await api('GET', `/sandboxes/${s.sandboxId}`)).body.networkGeneration
  const put = (body, ifMatch) => fetch(`${API_URL}/sandboxes/${s.sandboxId}/network`, {
    method: 'PUT', body: JSON.stringify(body),
    headers: { 'X-API-KEY': API_KEY, 'Content-Type': 'application/json',
               ...(ifMatch === undefined ? {} : { 'If-Match': ifMatch }) },
  })
  assert.equal(await gen(), 0)
  await s.updateNetwork({ allowOut: ['pypi.org'], denyOut: ['0.0.0.0/0'] })
  assert.equal(await gen(), 1)
  await assert.rejects(s.updateNetwork({ allowOut: ['0.0.0.0/0'] }), (e) => e.statusCode === 400)
  assert.equal(await gen(), 1, 'a refused update takes no generation')
  // Read-modify-write: the generation read is the precondition; a stale one changes nothing.
  let res = await put({ allowOut: ['files.pythonhosted.org'] }, '"1"')
  assert.equal(res.status, 204)
  assert.equal(res.headers.get('etag'), '"2"')
  res = await put({ denyOut: ['203.0.113.0/24'] }, '"1"')
  assert.equal(res.status, 412)
  assert.match((await res.json()).message, /at generation 2/)
  assert.deepEqual((await s.getInfo()).network.allowOut, ['files.pythonhosted.org'])
  assert.equal((await put({}, 'W/"2"')).status, 400)
  // Concurrent updates: one at a time, every other one a 409; each applied one is counted.
  const all = await Promise.allSettled(
    Array.from({ length: 6 }, (_, i) => s.updateNetwork({ allowOut: [`h${i}.example.com`] })))
  const applied = all.filter((x) => x.status === 'fulfilled').length
  for (const x of all.filter((y) => y.status === 'rejected'))
    assert.ok(x.reason.statusCode === 409 && /in progress/.test(x.reason.message), `${x.reason}`)
  assert.ok(applied >= 1)
  assert.equal(await gen(), 2 + applied)
})

test('getMetrics: CPU, memory and disk from the sandbox', async () => {
  const s = await create()
  await s.commands.run('head -c 20000000 /dev/zero | sha256sum >/dev/null')
  const m = await s.getMetrics()
  assert.ok(m.length >= 1, 'no metrics')
  const last = m[m.length - 1]
  assert.ok(last.timestamp instanceof Date)
  assert.ok(Math.abs(last.timestamp.getTime() - Date.now()) < 60_000)
  assert.ok(last.cpuCount >= 1)
  assert.ok(last.cpuUsedPct >= 0 && last.cpuUsedPct <= 100)
  assert.ok(last.memUsed > 0, `memUsed ${last.memUsed}`)
  assert.ok(last.memTotal >= last.memUsed)
  assert.ok(last.diskTotal > 0)
  const old = await s.getMetrics({ start: new Date(Date.now() - 3600_000),
                                   end: new Date(Date.now() - 3000_000) })
  assert.deepEqual(old, [])
})

test('kill: true once, then false; the sandbox is gone', async () => {
  const s = track(await Sandbox.create(TEMPLATE))
  assert.equal(await s.kill(), true)
  assert.equal(await s.kill(), false)
  assert.equal(await Sandbox.kill(s.sandboxId), false)
  assert.equal(await s.isRunning(), false)
  await assert.rejects(s.commands.run('true'), (e) => e instanceof SandboxError)
  await assert.rejects(Sandbox.connect(s.sandboxId), SandboxNotFoundError)
})

test('errors: unknown sandbox, bad API key, bad template', async () => {
  await assert.rejects(Sandbox.getInfo('nosuchsandbox0000000'), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect('nosuchsandbox0000000'), SandboxNotFoundError)
  assert.equal(await Sandbox.kill('nosuchsandbox0000000'), false)
  const bad = { apiKey: 'e2b_' + 'f'.repeat(40) }
  await assert.rejects(Sandbox.create(TEMPLATE, bad), AuthenticationError)
  await assert.rejects(Sandbox.list(bad).nextItems(), AuthenticationError)
  await assert.rejects(Sandbox.create('no-such-template', { timeoutMs: 10_000 }), (e) => {
    assert.ok(e instanceof SandboxError, `got ${e}`)
    assert.match(e.message, /404: template 'no-such-template' not found/)
    return true
  })
})

test('REST details the SDK relies on: error bodies, 204s, x-next-token, v1 list', async () => {
  const none = await api('GET', '/sandboxes/nosuchsandbox0000000')
  assert.equal(none.status, 404)
  assert.equal(none.body.code, 404)
  assert.equal(typeof none.body.message, 'string')
  const unauth = await api('GET', '/v2/sandboxes', undefined, 'e2b_' + '0'.repeat(39) + '1')
  assert.equal(unauth.status, 401)
  assert.equal(unauth.body.code, 401)
  const tag = uniq('rest')
  const a = await create({ metadata: { tag } })
  const b = await create({ metadata: { tag } })
  const q = new URLSearchParams({ metadata: new URLSearchParams({ tag }).toString(), limit: '1' })
  const p1 = await api('GET', `/v2/sandboxes?${q}`)
  assert.equal(p1.status, 200)
  assert.equal(p1.body.length, 1)
  const tok = p1.headers.get('x-next-token')
  assert.ok(tok)
  q.set('nextToken', tok)
  const p2 = await api('GET', `/v2/sandboxes?${q}`)
  assert.equal(p2.body.length, 1)
  assert.equal(p2.headers.get('x-next-token'), null)
  assert.notEqual(p1.body[0].sandboxID, p2.body[0].sandboxID)
  const v1 = await api('GET', `/sandboxes?metadata=${encodeURIComponent(`tag=${tag}`)}`)
  assert.deepEqual(v1.body.map((s) => s.sandboxID).sort(), [a.sandboxId, b.sandboxId].sort())
  const t = await fetch(`${API_URL}/sandboxes/${a.sandboxId}/timeout`, {
    method: 'POST', headers: { 'X-API-KEY': process.env.E2B_API_KEY },
    body: JSON.stringify({ timeout: 100 }) })
  assert.equal(t.status, 204)
  assert.equal(await t.text(), '')
  const refresh = await api('POST', `/sandboxes/${a.sandboxId}/refreshes`, { duration: 200 })
  assert.equal(refresh.status, 204)
  const bad = await api('POST', '/v2/sandboxes', { templateID: TEMPLATE, volumeMounts: [{ name: 'v', path: '/v' }] })
  assert.equal(bad.status, 400)
  assert.match(bad.body.message, /volumeMounts/)
  const unknown = await api('POST', '/v2/sandboxes', { templateID: TEMPLATE, frobnicate: 1 })
  assert.equal(unknown.status, 400)
  assert.match(unknown.body.message, /frobnicate/)
  // (fork itself, and the test backend's 501, are in snapshots.test.mjs)
  const fork = await api('POST', `/sandboxes/${a.sandboxId}/fork`, { count: 0 })
  assert.equal(fork.status, 400)
  assert.match(fork.body.message, /"count" must be a whole number from 1/)
  const logs = await api('GET', `/v2/sandboxes/${a.sandboxId}/logs?limit=5`)
  assert.equal(logs.status, 200)
  assert.ok(Array.isArray(logs.body.logs))
  const v1logs = await api('GET', `/sandboxes/${a.sandboxId}/logs`)
  assert.ok(Array.isArray(v1logs.body.logs) && Array.isArray(v1logs.body.logEntries))
  const prom = await (await fetch(`${API_URL}/metrics`)).text()
  assert.match(prom, /airlock_sandboxes\{state="running"\} \d+/)
  assert.match(prom, /airlock_sandbox_create_duration_seconds_count \d+/)
  await sleep(0)
})

test('autoResume: traffic to a paused sandbox resumes it', async () => {
  const s = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
  await s.files.write('auto.txt', 'awake')
  assert.equal(await s.pause(), true)
  assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused')
  assert.equal(await s.files.read('auto.txt'), 'awake')
  assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'running')
  const info = await s.getInfo()
  assert.equal(info.lifecycle?.autoResume ?? true, true)
})

test('autoPause: the timeout pauses instead of killing', async () => {
  const s = await create({ timeoutMs: 2_000, lifecycle: { onTimeout: 'pause' } })
  await s.commands.run('echo x > kept.txt')
  await until(async () => (await Sandbox.getInfo(s.sandboxId)).state === 'paused',
              { timeoutMs: 15_000, what: 'the pause at the timeout' })
  const r = await Sandbox.connect(s.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await r.commands.run('cat kept.txt')).stdout, 'x\n')
})

test('Template.exists: true for a template airlockd has, false for one it has not', async () => {
  assert.equal(await Template.exists(TEMPLATE), true)
  assert.equal(await Template.exists(uniq('no-such-template')), false)
})
