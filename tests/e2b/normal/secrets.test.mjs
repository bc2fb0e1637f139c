// secrets (e2b 2.51.0): Secret.create/getInfo/exists/list/update/destroy against airlockd,
// which keeps every secret in airlock-vault (keys/<API key id>/<name>). Values are
// write-only (no answer carries one), an update is a new version, metadata is replaced by an
// update that gives it, names are lower-cased, another API key sees none of them, and
// `airlock vault` shows the same secrets.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { InvalidArgumentError, Secret, SecretError, SecretNotFoundError } from 'e2b'
import { api, uniq } from './helpers.mjs'

const STATE = process.env.AIRLOCK_E2B_STATE
const BIN = process.env.AIRLOCK_E2B_BIN
const VALUE = `sv-${process.pid}-Qm4ZtK8pW1xR7nLs`

function airlock(...args) {
  return execFileSync(`${BIN}/airlock`, ['--state-dir', STATE, ...args], { encoding: 'utf8' })
}

async function drain(pager) {
  const all = []
  let pages = 0
  while (pager.hasNext) {
    all.push(...(await pager.nextItems()))
    pages++
  }
  return { all, pages }
}

test('create, getInfo, exists, update (a new version), destroy; no answer has the value', async () => {
  const name = uniq('OpenAI-Key').toLowerCase()
  const t0 = Date.now()
  const made = await Secret.create(name.toUpperCase(), VALUE, { metadata: { team: 'ml', 'a b': 'ünï' } })
  assert.match(made.secretId, /^sec_[0-9a-f]{32}$/)
  assert.equal(made.name, name) // lower-cased, as E2B stores it
  assert.equal(made.version, 1)
  assert.deepEqual(made.metadata, { team: 'ml', 'a b': 'ünï' })
  assert.ok(Math.abs(made.createdAt.getTime() - t0) < 60_000, `createdAt ${made.createdAt}`)
  assert.ok(made.updatedAt.getTime() >= made.createdAt.getTime())

  for (const ref of [made.secretId, name, name.toUpperCase()]) {
    const info = await Secret.getInfo(ref)
    assert.equal(info.secretId, made.secretId)
    assert.equal(info.name, name)
    assert.equal(info.version, 1)
  }
  assert.equal(await Secret.exists(name), true)
  assert.equal(await Secret.exists(made.secretId), true)
  assert.equal(await Secret.exists(uniq('absent')), false)
  assert.equal(await Secret.exists('sec_00000000000000000000000000000000'), false)

  const up = await Secret.update(made.secretId, VALUE + '-v2')
  assert.equal(up.secretId, made.secretId)
  assert.equal(up.version, 2)
  assert.deepEqual(up.metadata, { team: 'ml', 'a b': 'ünï' }, 'metadata not given: kept')
  const up3 = await Secret.update(name, VALUE + '-v3', { metadata: { team: 'infra' } })
  assert.equal(up3.version, 3)
  assert.deepEqual(up3.metadata, { team: 'infra' }, 'metadata given: replaced')

  // Raw answers never carry the value (any version).
  for (const path of ['/secrets', `/secrets/${made.secretId}`, `/secrets/${name}`]) {
    const r = await api('GET', path)
    assert.equal(r.status, 200)
    assert.ok(!JSON.stringify(r.body).includes(VALUE), `${path} shows the value`)
  }

  // The vault holds it, under the key's namespace, with the same identifier and versions.
  if (STATE && BIN) {
    const ls = JSON.parse(airlock('vault', 'ls', '--json'))
    const vs = (ls.secrets || ls).find((s) => s.name.endsWith(`/${name}`))
    assert.ok(vs, `airlock vault ls has no */${name}: ${JSON.stringify(ls)}`)
    assert.match(vs.name, new RegExp(`^keys/[a-z0-9_]+/${name}$`))
    assert.equal(vs.id, made.secretId)
    assert.equal(vs.current_version, 3)
    assert.ok(!JSON.stringify(ls).includes(VALUE))
    // Nowhere in clear: not in airlockd's database, the vault's files or airlockd's log.
    const b64 = Buffer.from(VALUE).toString('base64').slice(0, 20)
    for (const where of [STATE, `${STATE}.log`]) {
      for (const needle of [VALUE, b64]) {
        let found = true
        try {
          execFileSync('grep', ['-rqaF', needle, where])
        } catch (e) {
          assert.equal(e.status, 1, `grep ${where}: ${e}`)
          found = false
        }
        assert.equal(found, false, `${where} holds the value`)
      }
    }
  }

  assert.equal(await Secret.destroy(made.secretId), true)
  assert.equal(await Secret.exists(name), false)
  assert.equal(await Secret.destroy(name), false)
  await assert.rejects(Secret.getInfo(made.secretId), SecretNotFoundError)
  await assert.rejects(Secret.update(name, 'x'), SecretNotFoundError)
})

test('refusals: duplicate name, bad names, empty value, bad metadata, unknown fields', async () => {
  const name = uniq('dup')
  await Secret.create(name, VALUE)
  try {
    await assert.rejects(Secret.create(name, VALUE), (e) => {
      assert.ok(e instanceof SecretError, `${e}`)
      assert.match(e.message, /already exists/)
      return true
    })
    const bad = [
      ['with space', /not valid/],
      ['sec_reserved', /reserved for secret identifiers/],
      ['a//b', /not valid/],
      ['.hidden', /not valid/],
      ['x'.repeat(200), /too long/],
    ]
    for (const [n, re] of bad) {
      const r = await api('POST', '/secrets', { name: n, value: VALUE })
      assert.equal(r.status, 400, `${n}: ${JSON.stringify(r.body)}`)
      assert.match(r.body.message, re)
      assert.ok(!r.body.message.includes(VALUE))
    }
    let r = await api('POST', '/secrets', { name: uniq('e'), value: '' })
    assert.equal(r.status, 400)
    assert.match(r.body.message, /"value"/)
    r = await api('POST', '/secrets', { name: uniq('e'), value: VALUE, metadata: { k: 5 } })
    assert.equal(r.status, 400)
    assert.match(r.body.message, /metadata "k": the value must be a string/)
    r = await api('POST', '/secrets', { name: uniq('e'), value: VALUE, metadata: Object.fromEntries(
      Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])) })
    assert.equal(r.status, 400)
    assert.match(r.body.message, /33 entries, at most 32/)
    r = await api('POST', '/secrets', { name: uniq('e'), value: VALUE, ttl: 5 })
    assert.equal(r.status, 400)
    assert.match(r.body.message, /unknown field "ttl"/)
    r = await api('POST', `/secrets/${name}`, { value: VALUE, name: 'other' })
    assert.equal(r.status, 400)
    r = await api('PUT', `/secrets/${name}`, { value: VALUE })
    assert.equal(r.status, 405)
    // The SDK itself refuses names that cannot be placeholders.
    assert.throws(() => Secret.fill('a{b'), InvalidArgumentError)
  } finally {
    await Secret.destroy(name)
  }
})

test('list: only the caller\'s, in name order, paginated with limit and nextToken', async () => {
  const tag = uniq('list')
  const names = []
  for (let i = 0; i < 5; i++) names.push(`${tag}/s${i}`)
  for (const n of [...names].reverse()) await Secret.create(n, VALUE, { metadata: { i: n.slice(-1) } })
  try {
    const { all, pages } = await drain(Secret.list({ limit: 2 }))
    const mine = all.filter((s) => s.name.startsWith(`${tag}/`))
    assert.deepEqual(mine.map((s) => s.name), names)
    assert.ok(pages >= 3, `${pages} pages of 2`)
    assert.equal(new Set(all.map((s) => s.secretId)).size, all.length, 'no secret twice')
    const r = await api('GET', '/secrets?limit=0')
    assert.equal(r.status, 400)
    assert.equal((await api('GET', '/secrets?nextToken=Not%20A%20Token')).status, 400)
  } finally {
    for (const n of names) await Secret.destroy(n)
  }
})

test('another API key sees none of them, and cannot change them', async (t) => {
  if (!STATE || !BIN) {
    t.skip('AIRLOCK_E2B_STATE / AIRLOCK_E2B_BIN not set (run through tests/e2b/run-normal)')
    return
  }
  const other = execFileSync(`${BIN}/airlock`, ['--state-dir', STATE, 'apikey', 'create', uniq('other')],
                             { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  assert.match(other, /^e2b_[0-9a-f]+$/)
  const name = uniq('mine')
  const mine = await Secret.create(name, VALUE)
  try {
    const opts = { apiKey: other }
    assert.equal(await Secret.exists(name, opts), false)
    assert.equal(await Secret.exists(mine.secretId, opts), false)
    const { all } = await drain(Secret.list(opts))
    assert.ok(!all.some((s) => s.secretId === mine.secretId))
    await assert.rejects(Secret.update(name, 'stolen', opts), SecretNotFoundError)
    assert.equal(await Secret.destroy(mine.secretId, opts), false)
    // The same name is free in the other key's namespace: two different secrets.
    const theirs = await Secret.create(name, VALUE + '-other', opts)
    assert.notEqual(theirs.secretId, mine.secretId)
    assert.equal((await Secret.getInfo(name)).secretId, mine.secretId)
    assert.equal((await Secret.getInfo(name, opts)).secretId, theirs.secretId)
    assert.equal(await Secret.destroy(name, opts), true)
    assert.equal((await Secret.getInfo(name)).version, 1, 'the owner\'s is untouched')
  } finally {
    await Secret.destroy(name)
  }
})
