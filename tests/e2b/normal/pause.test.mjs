// Pause without memory through the real SDK (e2b 2.51.0): sbx.pause({ keepMemory: false })
// keeps the sandbox's files only, and Sandbox.connect boots it again over them (same id and
// access token, the same Sandbox object goes on working, no process survives); a memory
// pause resumed with onResume: 'reboot' boots the same way; lifecycle.onTimeout with
// keepMemory: false pauses at the timeout without memory. The test backend keeps no files
// without processes: a clear error, the sandbox untouched. (Restarts of airlockd and of the
// host: tests/integration/jail_persist_pause.sh.)
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxError } from 'e2b'
import { BACKEND, create, until } from './helpers.mjs'

test('pause({ keepMemory: false }), then connect: a boot over its files', async () => {
  const s = await create({ timeoutMs: 120_000 })
  await s.files.write('kept.txt', 'kept across a boot')
  await s.commands.run('sleep 100000', { background: true })
  if (BACKEND === 'test') {
    await assert.rejects(s.pause({ keepMemory: false }), (e) => {
      assert.ok(e instanceof SandboxError, `${e}`)
      assert.match(e.message, /keeps no files/)
      return true
    })
    assert.equal((await s.getInfo()).state, 'running')
    return
  }
  assert.equal(await s.pause({ keepMemory: false }), true)
  assert.equal(await s.pause({ keepMemory: false }), false) // already paused
  assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused')
  assert.equal(await s.isRunning(), false)
  const c = await Sandbox.connect(s.sandboxId, { timeoutMs: 120_000 })
  assert.equal(c.sandboxId, s.sandboxId)
  assert.equal((await c.getInfo()).state, 'running')
  // The first object works on: the same id and access token.
  assert.equal(await s.files.read('kept.txt'), 'kept across a boot')
  const ps = await s.commands.run('ps ax')
  assert.doesNotMatch(ps.stdout, /sleep 100000/)
  assert.equal((await s.commands.run('echo booted')).stdout, 'booted\n')
})

test("a memory pause resumed with onResume: 'reboot'", async () => {
  const s = await create({ timeoutMs: 120_000 })
  await s.files.write('r.txt', 'rebooted')
  await s.commands.run('sleep 100001', { background: true })
  assert.equal(await s.pause(), true)
  if (BACKEND === 'test') {
    await assert.rejects(Sandbox.connect(s.sandboxId, { onResume: 'reboot' }), SandboxError)
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, 'paused')
    await Sandbox.connect(s.sandboxId)
    return
  }
  await Sandbox.connect(s.sandboxId, { onResume: 'reboot' })
  assert.equal(await s.files.read('r.txt'), 'rebooted')
  assert.doesNotMatch((await s.commands.run('ps ax')).stdout, /sleep 100001/)
})

test('lifecycle.onTimeout { action: pause, keepMemory: false }', { skip: BACKEND === 'test' }, async () => {
  const s = await create({ timeoutMs: 3_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  await s.files.write('t.txt', 'at the timeout')
  await until(async () => (await Sandbox.getInfo(s.sandboxId)).state === 'paused',
              { timeoutMs: 60_000, stepMs: 200, what: 'the pause at the timeout' })
  await Sandbox.connect(s.sandboxId, { timeoutMs: 60_000 })
  assert.equal(await s.files.read('t.txt'), 'at the timeout')
})
