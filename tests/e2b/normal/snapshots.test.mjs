// Snapshots through the real SDK (e2b 2.51.0): sbx.createSnapshot (optionally named: a name
// that exists gets a new version), Sandbox.create(snapshotId) starting a new sandbox with the
// snapshot's files and its own identity, Sandbox.listSnapshots (paged, by sandbox) and
// Sandbox.deleteSnapshot. Jail backend: the file system only (what the sandbox wrote, not its
// processes). A canary secret in the sandbox's environment must not be in the snapshot's
// files. The test backend has no snapshots: a clear error.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readdir, readFile, lstat } from 'node:fs/promises'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'
import { BACKEND, api, create, track, uniq } from './helpers.mjs'

const STATE = process.env.AIRLOCK_E2B_STATE

async function listAll(opts) {
  const p = Sandbox.listSnapshots(opts)
  const out = []
  while (p.hasNext) out.push(...(await p.nextItems()))
  return out
}

// Every regular file under dir, as bytes (symbolic links are not followed).
async function* files(dir) {
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name)
    if (e.isDirectory()) yield* files(p)
    else if (e.isFile()) yield [p, await readFile(p)]
  }
}

test('snapshots: the test backend refuses them clearly', async (t) => {
  if (BACKEND === 'jail') return t.skip('SKIP: the jail backend has snapshots (tested below)')
  const s = await create()
  await assert.rejects(s.createSnapshot(), /test backend has no snapshots/)
  assert.deepEqual(await listAll(), [])
})

test('snapshots: createSnapshot, Sandbox.create(snapshotId), list, delete', async (t) => {
  if (BACKEND !== 'jail') return t.skip('SKIP: snapshots need the jail backend')
  const canary = 'canary-' + randomBytes(12).toString('hex')
  const mark = 'mark-' + randomBytes(8).toString('hex')
  const s = await create({ envs: { SNAP_CANARY: canary } })
  assert.equal((await s.commands.run('echo "$SNAP_CANARY"')).stdout, canary + '\n')
  await s.files.write('/home/user/kept.txt', mark)
  await s.commands.run('mkdir -p /home/user/d/e && ln -s ../kept.txt /home/user/d/link && ' +
                       'sudo rm /etc/motd 2>/dev/null; sudo sh -c "echo root-file > /opt/r.txt"')
  const name = uniq('snap')
  const snap = await s.createSnapshot({ name })
  assert.match(snap.snapshotId, /^snap_[a-z0-9]{20}$/)
  assert.deepEqual(snap.names, [`${name}:v1`])
  // After the snapshot: not in it.
  await s.files.write('/home/user/later.txt', 'later')

  // No secret of the sandbox in the snapshot's files.
  const dir = join(STATE, 'snapshots', snap.snapshotId)
  assert.ok((await lstat(dir)).isDirectory(), `${dir} exists`)
  let n = 0
  for await (const [p, data] of files(dir)) {
    n++
    assert.ok(!data.includes(canary), `the canary secret is in ${p}`)
  }
  assert.ok(n > 0, 'the snapshot has files')

  // A new sandbox from it: the files, a new identity.
  const c = track(await Sandbox.create(snap.snapshotId, { timeoutMs: 180_000 }))
  assert.notEqual(c.sandboxId, s.sandboxId)
  assert.equal(await c.files.read('/home/user/kept.txt'), mark)
  assert.equal((await c.commands.run('readlink /home/user/d/link; cat /opt/r.txt; ' +
                                     'test -d /home/user/d/e && echo dir')).stdout,
               '../kept.txt\nroot-file\ndir\n')
  assert.equal((await c.commands.run('test -e /home/user/later.txt && echo yes || echo no'))
    .stdout, 'no\n')
  assert.equal((await c.commands.run('test -e /etc/motd && echo yes || echo no')).stdout,
               (await s.commands.run('test -e /etc/motd && echo yes || echo no')).stdout)
  assert.equal((await c.commands.run('echo "[$SNAP_CANARY]"')).stdout, '[]\n')
  const host = async (x) => (await x.commands.run('hostname')).stdout
  assert.notEqual(await host(c), await host(s))
  // A snapshot of the copy names the snapshot it came from.
  const child = await c.createSnapshot()
  const childRow = (await api('GET', `/snapshots?sandboxID=${c.sandboxId}`)).body
  assert.deepEqual(childRow.map((x) => [x.snapshotID, x.parent]), [[child.snapshotId, snap.snapshotId]])
  assert.equal(await Sandbox.deleteSnapshot(child.snapshotId), true)
  // It writes on its own: neither the original nor the snapshot changes.
  await c.files.write('/home/user/kept.txt', 'changed')
  assert.equal(await s.files.read('/home/user/kept.txt'), mark)
  // The events: the snapshot with who asked, the start from it.
  const evs = (await api('GET', `/events/sandboxes/${s.sandboxId}?orderAsc=true&limit=100`)).body
  const cp = evs.filter((e) => e.type === 'sandbox.lifecycle.checkpointed')
  assert.equal(cp.length, 1)
  assert.equal(cp[0].eventData.snapshot_id, snap.snapshotId)
  assert.equal(cp[0].eventData.cause, 'api')
  assert.ok(cp[0].eventData.apiKeyId)
  const made = (await api('GET', `/events/sandboxes/${c.sandboxId}?orderAsc=true`)).body
    .filter((e) => e.type === 'sandbox.lifecycle.created')
  assert.equal(made.length, 1)
  assert.equal(made[0].eventData.snapshot_id, snap.snapshotId)
  // By its name, as createSnapshot gave it.
  const byVer = track(await Sandbox.create(`${name}:v1`, { timeoutMs: 180_000 }))
  assert.equal(await byVer.files.read('/home/user/kept.txt'), mark)
  await byVer.kill()
  const info = await Sandbox.getInfo(c.sandboxId)
  assert.equal(info.templateId.split(':')[0], (await Sandbox.getInfo(s.sandboxId)).templateId.split(':')[0])

  // The same name again: a new version; a paused sandbox can be snapshotted and stays paused.
  await s.pause()
  const snap2 = await Sandbox.createSnapshot(s.sandboxId, { name })
  assert.deepEqual(snap2.names, [`${name}:v2`])
  assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused')
  const anon = await Sandbox.createSnapshot(s.sandboxId)
  assert.deepEqual(anon.names, [])

  // Lists: the sandbox's, oldest first, paged; by name.
  const mine = await listAll({ sandboxId: s.sandboxId })
  assert.deepEqual(mine.map((x) => x.snapshotId), [snap.snapshotId, snap2.snapshotId, anon.snapshotId])
  const p = Sandbox.listSnapshots({ sandboxId: s.sandboxId, limit: 2 })
  assert.equal((await p.nextItems()).length, 2)
  assert.ok(p.hasNext)
  assert.deepEqual((await p.nextItems()).map((x) => x.snapshotId), [anon.snapshotId])
  assert.ok(!p.hasNext)
  assert.equal((await listAll({ sandboxId: c.sandboxId })).length, 0)
  const byName = await api('GET', `/snapshots?name=${name}`)
  assert.equal(byName.status, 200)
  assert.deepEqual(byName.body.map((x) => x.snapshotID), [snap.snapshotId, snap2.snapshotId])
  assert.equal(byName.body[0].sandboxID, s.sandboxId)
  assert.ok(byName.body[0].sizeBytes >= mark.length)
  const bad = await api('GET', '/snapshots?nextToken=zz')
  assert.equal(bad.status, 400)
  const badName = await api('POST', `/sandboxes/${s.sandboxId}/snapshots`, { name: '../x' })
  assert.equal(badName.status, 400)
  const noSbx = await api('POST', '/sandboxes/nosuchsandbox/snapshots', {})
  assert.equal(noSbx.status, 404)

  // Delete: gone from the list, from the disk; a second delete is false, a start from it 404.
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  await assert.rejects(lstat(dir), { code: 'ENOENT' })
  await assert.rejects(Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 }), /not found/)
  assert.deepEqual((await listAll({ sandboxId: s.sandboxId })).map((x) => x.snapshotId),
                   [snap2.snapshotId, anon.snapshotId])
  // The sandbox made from it lives on (its files were copied at its start).
  assert.equal(await c.files.read('/home/user/kept.txt'), 'changed')
  for (const x of [snap2, anon]) assert.equal(await Sandbox.deleteSnapshot(x.snapshotId), true)
  assert.equal((await listAll({ sandboxId: s.sandboxId })).length, 0)
})

test('snapshots: rollback in place to one of its own (airlock extension, by fetch)', async (t) => {
  if (BACKEND !== 'jail') return t.skip('SKIP: rollback needs the jail backend')
  const s = await create()
  const other = await create()
  await s.files.write('/home/user/a.txt', 'A')
  const snap = await s.createSnapshot()
  const foreign = await other.createSnapshot()
  await s.files.write('/home/user/b.txt', 'B')
  await s.commands.run('rm /home/user/a.txt')
  const before = await Sandbox.getInfo(s.sandboxId)

  const r = await api('POST', `/sandboxes/${s.sandboxId}/rollback`, { snapshotID: snap.snapshotId })
  assert.equal(r.status, 200, JSON.stringify(r.body))
  assert.deepEqual(r.body, { sandboxID: s.sandboxId, snapshotID: snap.snapshotId })
  // The same Sandbox object goes on working: same id, token, expiry; the files as then.
  assert.equal(await s.files.read('/home/user/a.txt'), 'A')
  assert.equal((await s.commands.run('test -e /home/user/b.txt && echo yes || echo no')).stdout, 'no\n')
  const after = await Sandbox.getInfo(s.sandboxId)
  assert.equal(after.state, 'running')
  assert.equal(after.endAt.getTime(), before.endAt.getTime())
  const evs = (await api('GET', `/events/sandboxes/${s.sandboxId}?orderAsc=true&limit=100`)).body
    .filter((e) => e.type === 'sandbox.lifecycle.rolled_back')
  assert.equal(evs.length, 1)
  assert.equal(evs[0].eventData.snapshot_id, snap.snapshotId)
  assert.ok(evs[0].eventData.apiKeyId)

  // Refusals: another sandbox's snapshot (400, naming why), none (404), paused (409).
  const bad = await api('POST', `/sandboxes/${s.sandboxId}/rollback`, { snapshotID: foreign.snapshotId })
  assert.equal(bad.status, 400)
  assert.match(bad.body.message, /is of sandbox .* not of/)
  const none = await api('POST', `/sandboxes/${s.sandboxId}/rollback`, { snapshotID: 'snap_aaaaaaaaaaaaaaaaaaa0' })
  assert.equal(none.status, 404)
  await s.pause()
  const paused = await api('POST', `/sandboxes/${s.sandboxId}/rollback`, { snapshotID: snap.snapshotId })
  assert.equal(paused.status, 409)
  for (const x of [snap, foreign]) assert.equal(await Sandbox.deleteSnapshot(x.snapshotId), true)
})

// sbx.fork (e2b 2.51; 2.50 has none): the sandbox is checkpointed in place and each copy is a
// new sandbox from that moment's files, writing on its own. The test backend has no
// snapshots, so no fork: a clear error.
const hasFork = typeof Sandbox.prototype.fork === 'function'

test('fork: the test backend refuses it clearly', async (t) => {
  if (!hasFork) return t.skip('SKIP: this SDK has no fork')
  if (BACKEND === 'jail') return t.skip('SKIP: the jail backend forks (tested below)')
  const s = await create()
  await assert.rejects(s.fork({ count: 2 }), /501: .*test backend has no snapshots/)
})

test('fork: sbx.fork({count: 5}), independent writes', async (t) => {
  if (!hasFork) return t.skip('SKIP: this SDK has no fork')
  if (BACKEND !== 'jail') return t.skip('SKIP: fork needs the jail backend')
  const canary = 'canary-' + randomBytes(12).toString('hex')
  const s = await create({ envs: { FORK_CANARY: canary }, metadata: { role: 'parent' } })
  await s.files.write('/home/user/shared.txt', 'from the parent')
  const before = await Sandbox.getInfo(s.sandboxId)
  const copies = await s.fork({ count: 5, timeoutMs: 180_000 })
  assert.equal(copies.length, 5)
  for (const c of copies) {
    assert.ok(c instanceof Sandbox, `a copy failed: ${c}`)
    track(c)
  }
  const ids = new Set([s.sandboxId, ...copies.map((c) => c.sandboxId)])
  assert.equal(ids.size, 6, 'six different sandbox ids')
  // Each has the parent's file and writes its own; the parent writes after the fork.
  await Promise.all(copies.map(async (c) => {
    assert.equal(await c.files.read('/home/user/shared.txt'), 'from the parent')
    await c.files.write('/home/user/shared.txt', c.sandboxId)
  }))
  await s.files.write('/home/user/parent-later.txt', 'later')
  for (const c of copies) {
    assert.equal(await c.files.read('/home/user/shared.txt'), c.sandboxId)
    assert.equal((await c.commands.run('test -e /home/user/parent-later.txt && echo yes || echo no')).stdout, 'no\n')
    // A new identity: not the parent's environment, not its hostname; its metadata.
    assert.equal((await c.commands.run('echo "[$FORK_CANARY]"')).stdout, '[]\n')
    const info = await Sandbox.getInfo(c.sandboxId)
    assert.deepEqual(info.metadata, { role: 'parent' })
  }
  const hosts = await Promise.all([s, ...copies].map(async (x) => (await x.commands.run('hostname')).stdout))
  assert.equal(new Set(hosts).size, 6, `hostnames: ${hosts}`)
  assert.equal(await s.files.read('/home/user/shared.txt'), 'from the parent')
  // The parent: the same sandbox, its expiry untouched; no snapshot left listed.
  const after = await Sandbox.getInfo(s.sandboxId)
  assert.equal(after.state, 'running')
  assert.equal(after.endAt.getTime(), before.endAt.getTime())
  assert.deepEqual(await listAll({ sandboxId: s.sandboxId }), [])
  // The checkpoint's files are gone: what is left in the store are listed snapshots (this
  // file is the only one that takes any).
  const listed = new Set((await listAll()).map((x) => x.snapshotId))
  const left = (await readdir(join(STATE, 'snapshots'))).filter((n) => !listed.has(n))
  assert.deepEqual(left, [], 'no checkpoint left in the snapshot store')
  const evs = (await api('GET', `/events/sandboxes/${s.sandboxId}?orderAsc=true&limit=100`)).body
    .filter((e) => e.type === 'sandbox.lifecycle.forked')
  assert.equal(evs.length, 1)
  assert.deepEqual([...evs[0].eventData.sandbox_ids].sort(), copies.map((c) => c.sandboxId).sort())
  assert.equal(evs[0].eventData.count, 5)
  assert.equal(evs[0].eventData.failed, 0)
  assert.ok(evs[0].eventData.apiKeyId)

  // Refusals before any copy: a count beyond sandboxes.max_fork, an unknown sandbox.
  await assert.rejects(s.fork({ count: 101 }), /400: .*sandboxes\.max_fork/)
  await assert.rejects(Sandbox.fork('nosuchsandbox', { count: 1 }), /not found/)
})
