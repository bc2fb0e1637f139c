// The previous SDK generation (e2b 2.50.0): POST /sandboxes, POST /sandboxes/{id}/connect,
// and the same data plane. Runs next to 2.51.0 in the same airlockd.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError, AuthenticationError } from 'e2b-2.50'
import { TEMPLATE, create, uniq } from './helpers.mjs'

test('2.50: create (v1 path) with metadata and envs, commands, files', async () => {
  const tag = uniq('v1')
  const s = await create({ metadata: { tag }, envs: { AL_V1: 'yes' } }, TEMPLATE, Sandbox)
  assert.equal((await s.commands.run('echo $AL_V1')).stdout, 'yes\n')
  await s.files.write('v1.txt', 'from 2.50')
  assert.equal(await s.files.read('v1.txt'), 'from 2.50')
  const info = await s.getInfo()
  assert.equal(info.metadata.tag, tag)
  const listed = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
  assert.deepEqual(listed.map((x) => x.sandboxId), [s.sandboxId])
})

test('2.50: connect (v1 path) to running and paused sandboxes, kill', async () => {
  const s = await create({}, TEMPLATE, Sandbox)
  const c = await Sandbox.connect(s.sandboxId)
  assert.equal((await c.commands.run('echo again')).stdout, 'again\n')
  assert.equal(await s.pause(), true)
  const r = await Sandbox.connect(s.sandboxId)
  assert.equal((await r.commands.run('echo resumed')).stdout, 'resumed\n')
  assert.equal(await r.kill(), true)
  await assert.rejects(Sandbox.connect(s.sandboxId), SandboxNotFoundError)
})

test('2.50: errors', async () => {
  await assert.rejects(Sandbox.getInfo('nosuchsandbox0000000'), SandboxNotFoundError)
  await assert.rejects(Sandbox.create(TEMPLATE, { apiKey: 'e2b_' + 'e'.repeat(40) }),
                       AuthenticationError)
})
