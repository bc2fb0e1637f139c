// Volumes through the real SDK (e2b 2.51.0): Volume.create, list, getInfo, connect, destroy,
// and the content API without a sandbox (writeFile, readFile, makeDir, list, getInfo, exists,
// updateMetadata, remove), with E2B's errors, on any backend; and volumeMounts at
// Sandbox.create (jail backend): written in one sandbox, read in the next and through the API. The
// content API is reached at E2B_VOLUME_API_URL (run-normal sets it to airlockd's URL).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b'
import { API_KEY, API_URL, BACKEND, TEMPLATE, create, uniq } from './helpers.mjs'

if (!process.env.E2B_VOLUME_API_URL) throw new Error('E2B_VOLUME_API_URL is not set: run through tests/e2b/run-normal')

test('volumes: create, list, getInfo, connect, destroy', async () => {
  const name = uniq('vol')
  const v = await Volume.create(name)
  try {
    assert.match(v.volumeId, /^vol_[a-z0-9]{20}$/)
    assert.equal(v.name, name)
    assert.match(v.token, /^[0-9a-f]{64}$/)
    const listed = await Volume.list()
    assert.deepEqual(listed.filter((x) => x.volumeId === v.volumeId), [{ volumeId: v.volumeId, name }])
    const info = await Volume.getInfo(v.volumeId)
    assert.equal(info.name, name)
    assert.equal(info.token, v.token)
    const again = await Volume.connect(v.volumeId)
    assert.equal(again.token, v.token)
    await assert.rejects(Volume.create(name), (e) => e instanceof VolumeError && /409/.test(e.message))
    await assert.rejects(Volume.create('../bad'), (e) => e instanceof VolumeError && /400/.test(e.message))
  } finally {
    assert.equal(await Volume.destroy(v.volumeId), true)
  }
  assert.equal(await Volume.destroy(v.volumeId), false)
  await assert.rejects(Volume.getInfo(v.volumeId), VolumeNotFoundError)
})

test('volumes: a size of its own (sizeMB), which the SDK connects to and the quota keeps', async () => {
  // The SDK's Volume.create sends only the name: a client sends "sizeMB" itself.
  const post = (body) => fetch(`${API_URL}/volumes`, {
    method: 'POST', headers: { 'X-API-Key': API_KEY, 'Content-Type': 'application/json' }, body: JSON.stringify(body)
  })
  const name = uniq('vol')
  const r = await post({ name, sizeMB: 20 })
  assert.equal(r.status, 201)
  const made = await r.json()
  assert.equal(made.sizeMB, 20)
  try {
    const v = await Volume.connect(made.volumeID)
    assert.equal(v.name, name)
    await assert.rejects(v.writeFile('/big.bin', new Uint8Array(24 << 20).buffer), /507|full/)
    assert.equal((await v.writeFile('/fits.bin', new Uint8Array(4 << 20).buffer)).size, 4 << 20)
    assert.ok((await Volume.list()).some((x) => x.volumeId === made.volumeID))
    const bad = await post({ name: uniq('vol'), sizeMB: 8 })
    assert.equal(bad.status, 400)
    assert.match((await bad.json()).message, /sizeMB.*from 16 to/)
  } finally {
    assert.equal(await Volume.destroy(made.volumeID), true)
  }
})

test('volumes: files and directories without a sandbox', async () => {
  const v = await Volume.create(uniq('vol'))
  try {
    const w = await v.writeFile('/hello.txt', 'hello from the SDK')
    assert.equal(w.name, 'hello.txt')
    assert.equal(w.path, '/hello.txt')
    assert.equal(w.type, 'file')
    assert.equal(w.size, 18)
    assert.ok(w.mtime instanceof Date && !Number.isNaN(w.mtime.getTime()))
    assert.equal(await v.readFile('/hello.txt'), 'hello from the SDK')
    const bytes = await v.readFile('/hello.txt', { format: 'bytes' })
    assert.equal(Buffer.from(bytes).toString(), 'hello from the SDK')

    const d = await v.makeDir('/data/sub', { force: true })
    assert.equal(d.type, 'directory')
    await v.writeFile('/data/sub/b.bin', new Uint8Array([0, 1, 2, 255]).buffer, { mode: 0o600 })
    assert.deepEqual([...(await v.readFile('/data/sub/b.bin', { format: 'bytes' }))], [0, 1, 2, 255])
    const top = await v.list('/')
    assert.deepEqual(top.map((e) => [e.path, e.type]), [['/data', 'directory'], ['/hello.txt', 'file']])
    const deep = await v.list('/', { depth: 3 })
    assert.deepEqual(deep.map((e) => e.path), ['/data', '/data/sub', '/data/sub/b.bin', '/hello.txt'])
    const st = await v.getInfo('/data/sub/b.bin')
    assert.equal(st.mode, 0o600)
    assert.equal(st.uid, 1000)
    const ch = await v.updateMetadata('/data/sub/b.bin', { mode: 0o640 })
    assert.equal(ch.mode, 0o640)
    assert.equal(await v.exists('/data/sub/b.bin'), true)
    assert.equal(await v.exists('/nope'), false)

    await assert.rejects(v.readFile('/nope.txt'), VolumePathNotFoundError)
    await assert.rejects(v.writeFile('/missing/dir/x.txt', 'x'), VolumePathNotFoundError)
    await v.remove('/data')
    assert.equal(await v.exists('/data/sub/b.bin'), false)
    await assert.rejects(v.remove('/data'), VolumePathNotFoundError)

    // The token is the volume's own: another volume's does not open it.
    const other = await Volume.create(uniq('vol'))
    try {
      const forged = new Volume(v.volumeId, v.name, other.token, v.domain, v.debug)
      await assert.rejects(forged.readFile('/hello.txt'), /401|Unauthorized/)
    } finally {
      await Volume.destroy(other.volumeId)
    }
  } finally {
    await Volume.destroy(v.volumeId)
  }
})

test('volumes: volumeMounts, written by one sandbox, read by the next and without a sandbox', async (t) => {
  if (BACKEND !== 'jail') return t.skip('SKIP: volumeMounts need the jail backend')
  const v = await Volume.create(uniq('vol'))
  try {
    await v.writeFile('/from-api.txt', 'written through the API')
    const a = await create({ volumeMounts: { '/mnt/vol': v } })
    assert.deepEqual((await Sandbox.getInfo(a.sandboxId)).volumeMounts, [{ name: v.name, path: '/mnt/vol' }])
    assert.equal((await a.commands.run('cat /mnt/vol/from-api.txt')).stdout, 'written through the API')
    // The sandbox's user owns what it writes, in the volume as in every sandbox.
    await a.commands.run('echo from-a > /mnt/vol/a.txt && mkdir /mnt/vol/d && id -u > /mnt/vol/d/uid')
    // The volume's size holds inside a sandbox too (run-normal: volumes.size 64MiB): a write
    // past it fails there, and what fits stays.
    const full = await a.commands.run('dd if=/dev/zero of=/mnt/vol/big bs=1M count=100', { timeoutMs: 120_000 })
      .then(() => null, (e) => e)
    assert.ok(full && full.exitCode !== 0, 'a write past the volume\'s size succeeded')
    assert.match(full.stderr, /No space left on device/)
    await a.commands.run('rm /mnt/vol/big')
    // Deleting a mounted volume is refused, also while its sandbox is paused; the boot that
    // resumes it mounts the volume again.
    await assert.rejects(Volume.destroy(v.volumeId), /409/)
    assert.equal(await a.pause({ keepMemory: false }), true)
    await assert.rejects(Volume.destroy(v.volumeId), /409/)
    await Sandbox.connect(a.sandboxId, { timeoutMs: 180_000 })
    assert.equal((await a.commands.run('cat /mnt/vol/a.txt')).stdout, 'from-a\n')
    await a.kill()
    const b = await create({ volumeMounts: { '/data': v.name } })
    assert.equal((await b.commands.run('cat /data/a.txt /data/d/uid')).stdout, 'from-a\n1000\n')
    await b.kill()
    assert.equal(await v.readFile('/a.txt'), 'from-a\n')
    assert.equal((await v.getInfo('/a.txt')).uid, 1000)
    // Bad mounts refuse the creation with 400 and make nothing.
    const tag = uniq('badmount')
    const bad = [{ '/data': 'no-such-volume' }, { 'rel': v }, { '/proc/x': v }, { '/data/': v },
      { '/data': v, '/data/sub': v }]
    for (const m of bad) {
      await assert.rejects(Sandbox.create(TEMPLATE, { volumeMounts: m, metadata: { tag } }), /400/)
    }
    assert.deepEqual(await Sandbox.list({ query: { metadata: { tag } } }).nextItems(), [])
    assert.deepEqual((await v.list('/')).map((e) => e.name).sort(), ['a.txt', 'd', 'from-api.txt'])
  } finally {
    await Volume.destroy(v.volumeId)
  }
})
