// files: write/read (multipart, octet-stream, gzip), multi-file write, list with depth,
// exists, getInfo, makeDir, rename, remove, watchDir (plain, recursive, entry info).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { FileNotFoundError, FilesystemEventType, InvalidArgumentError } from 'e2b'
import { HOME, sandbox, until, uniq } from './helpers.mjs'

test('write + read a file (relative to the home)', async () => {
  const s = await sandbox()
  const name = `${uniq('w')}.txt`
  const info = await s.files.write(name, 'This is a test file.')
  assert.equal(Array.isArray(info), false)
  assert.equal(info.name, name)
  assert.equal(info.type, 'file')
  assert.equal(info.path, `${HOME}/${name}`)
  assert.equal(await s.files.exists(name), true)
  assert.equal(await s.files.read(name), 'This is a test file.')
  assert.equal(await s.files.read(`${HOME}/${name}`), 'This is a test file.')
})

test('write creates parent directories and overwrites', async () => {
  const s = await sandbox()
  const p = `${uniq('deep')}/a/b/c.txt`
  await s.files.write(p, 'one')
  await s.files.write(p, 'two, longer')
  assert.equal(await s.files.read(p), 'two, longer')
})

test('read: bytes, blob, stream; empty files; binary content', async () => {
  const s = await sandbox()
  const bin = new Uint8Array(256 * 1024)
  for (let i = 0; i < bin.length; i++) bin[i] = (i * 7 + 3) & 0xff
  const p = `${uniq('bin')}.dat`
  await s.files.write(p, bin.buffer)
  const got = await s.files.read(p, { format: 'bytes' })
  assert.equal(got.length, bin.length)
  assert.deepEqual(Buffer.from(got), Buffer.from(bin))
  const blob = await s.files.read(p, { format: 'blob' })
  assert.equal(blob.size, bin.length)
  const stream = await s.files.read(p, { format: 'stream' })
  let total = 0
  for await (const chunk of stream) total += chunk.length
  assert.equal(total, bin.length)
  const e = `${uniq('empty')}.txt`
  await s.files.write(e, '')
  assert.equal(await s.files.read(e), '')
})

test('write: octet-stream and gzip uploads (envd >= 0.5.7 paths)', async () => {
  const s = await sandbox()
  const big = 'x'.repeat(1 << 20) + 'end'
  const p1 = `${uniq('oct')}.txt`
  await s.files.write(p1, big, { useOctetStream: true })
  assert.equal(await s.files.read(p1), big)
  const p2 = `${uniq('gz')}.txt`
  await s.files.write(p2, big, { gzip: true })
  assert.equal(await s.files.read(p2), big)
  assert.equal(await s.files.read(p2, { gzip: true }), big)
  const p3 = `${uniq('stream')}.txt`
  const rs = new ReadableStream({
    start(c) {
      c.enqueue(new TextEncoder().encode('streamed '))
      c.enqueue(new TextEncoder().encode('body'))
      c.close()
    },
  })
  await s.files.write(p3, rs)
  assert.equal(await s.files.read(p3), 'streamed body')
})

test('write multiple files in one request', async () => {
  const s = await sandbox()
  assert.deepEqual(await s.files.write([]), [])
  const dir = uniq('multi')
  const files = []
  for (let i = 0; i < 10; i++) {
    const path = i % 2 ? `${HOME}/${dir}/f${i}.txt` : `/tmp/${dir}/${i}/f${i}.txt`
    files.push({ path, data: `file ${i}` })
  }
  const infos = await s.files.write(files)
  assert.ok(Array.isArray(infos))
  assert.equal(infos.length, files.length)
  for (let i = 0; i < files.length; i++) {
    assert.equal(infos[i].path, files[i].path)
    assert.equal(infos[i].type, 'file')
    assert.equal(await s.files.read(files[i].path), files[i].data)
  }
  const one = await s.files.write([{ path: `${dir}/single.txt`, data: 'x' }])
  assert.ok(Array.isArray(one))
  assert.equal(one[0].path, `${HOME}/${dir}/single.txt`)
})

test('read: a missing file is FileNotFoundError, a directory is InvalidArgumentError', async () => {
  const s = await sandbox()
  await assert.rejects(s.files.read(uniq('missing')), FileNotFoundError)
  await assert.rejects(s.files.read('/tmp'), InvalidArgumentError)
})

test('exists, getInfo of a file, a directory and a symlink', async () => {
  const s = await sandbox()
  const f = `${uniq('info')}.txt`
  await s.files.write(f, 'test')
  const i = await s.files.getInfo(f)
  assert.equal(i.name, f)
  assert.equal(i.type, 'file')
  assert.equal(i.path, `${HOME}/${f}`)
  assert.equal(i.size, 4)
  assert.equal(i.mode, 0o644)
  assert.equal(i.permissions, '-rw-r--r--')
  assert.ok(i.owner.length > 0 && i.group.length > 0)
  assert.ok(i.modifiedTime instanceof Date && !isNaN(i.modifiedTime))
  assert.equal(i.symlinkTarget, undefined)
  const d = uniq('infodir')
  await s.files.makeDir(d)
  const di = await s.files.getInfo(d)
  assert.equal(di.type, 'dir')
  assert.equal(di.mode, 0o755)
  assert.equal(di.permissions, 'drwxr-xr-x')
  const l = `${uniq('link')}`
  await s.commands.run(`ln -s ${f} ${l}`)
  const li = await s.files.getInfo(l)
  assert.equal(li.name, l)
  assert.equal(li.type, 'file')
  assert.equal(li.symlinkTarget, `${HOME}/${f}`)
  assert.match(li.permissions, /^Lrwxrwxrwx$/)
  assert.equal(await s.files.exists(uniq('nope')), false)
  await assert.rejects(s.files.getInfo(uniq('nope')), FileNotFoundError)
})

test('list with depth, in name order', async () => {
  const s = await sandbox()
  const p = uniq('list')
  for (const d of ['subdir1/subdir1_1', 'subdir1/subdir1_2', 'subdir2/subdir2_1'])
    await s.files.makeDir(`${p}/${d}`)
  await s.files.write(`${p}/file1.txt`, 'Hello, world!')
  const l1 = await s.files.list(p)
  assert.deepEqual(l1.map((e) => e.name), ['file1.txt', 'subdir1', 'subdir2'])
  assert.deepEqual(l1.map((e) => e.type), ['file', 'dir', 'dir'])
  assert.equal(l1[0].path, `${HOME}/${p}/file1.txt`)
  assert.equal(l1[0].size, 13)
  const l2 = await s.files.list(p, { depth: 2 })
  assert.deepEqual(l2.map((e) => e.path.slice(HOME.length + p.length + 2)),
    ['file1.txt', 'subdir1', 'subdir1/subdir1_1', 'subdir1/subdir1_2', 'subdir2', 'subdir2/subdir2_1'])
  await assert.rejects(s.files.list(p, { depth: -1 }), /depth should be at least one/)
  await assert.rejects(s.files.list(uniq('nolist')), FileNotFoundError)
})

test('makeDir: creates parents; an existing directory returns false', async () => {
  const s = await sandbox()
  const d = `${uniq('mk')}/a/b`
  assert.equal(await s.files.makeDir(d), true)
  assert.equal(await s.files.makeDir(d), false)
  assert.equal((await s.files.getInfo(d)).type, 'dir')
})

test('rename and remove', async () => {
  const s = await sandbox()
  const a = `${uniq('ren')}.txt`
  const b = `${uniq('ren')}/moved.txt`
  await s.files.write(a, 'content')
  const info = await s.files.rename(a, b)
  assert.equal(info.path, `${HOME}/${b}`)
  assert.equal(await s.files.exists(a), false)
  assert.equal(await s.files.read(b), 'content')
  await assert.rejects(s.files.rename(uniq('nosrc'), uniq('dst')), FileNotFoundError)
  const dir = uniq('rmdir')
  await s.files.write(`${dir}/x/y.txt`, 'y')
  await s.files.remove(dir)
  assert.equal(await s.files.exists(dir), false)
  await s.files.remove(dir) // removing a missing path is fine (RemoveAll)
})

test('watchDir: a write in the directory', async () => {
  const s = await sandbox()
  const dir = uniq('watch')
  await s.files.makeDir(dir)
  await s.files.write(`${dir}/w.txt`, 'first')
  const events = []
  const h = await s.files.watchDir(dir, (e) => events.push(e))
  await s.files.write(`${dir}/w.txt`, 'second')
  await s.files.write(`${dir}/new.txt`, 'n')
  await until(() => events.some((e) => e.type === FilesystemEventType.WRITE && e.name === 'w.txt') &&
    events.some((e) => e.type === FilesystemEventType.CREATE && e.name === 'new.txt'), { what: 'watch events' })
  await s.files.remove(`${dir}/new.txt`)
  await until(() => events.some((e) => e.type === FilesystemEventType.REMOVE && e.name === 'new.txt'), { what: 'remove event' })
  await s.files.rename(`${dir}/w.txt`, `${dir}/w2.txt`)
  await until(() => events.some((e) => e.type === FilesystemEventType.RENAME && e.name === 'w.txt'), { what: 'rename event' })
  await h.stop()
})

test('watchDir: recursive, including directories created after the start, with entry info', async () => {
  const s = await sandbox()
  const dir = uniq('rwatch')
  await s.files.makeDir(`${dir}/nested`)
  const events = []
  const h = await s.files.watchDir(dir, (e) => events.push(e), { recursive: true, includeEntry: true })
  await s.files.write(`${dir}/nested/f.txt`, 'x')
  await until(() => events.some((e) => e.type === FilesystemEventType.WRITE && e.name === 'nested/f.txt'), { what: 'nested write' })
  await s.files.makeDir(`${dir}/later`)
  await until(() => events.some((e) => e.type === FilesystemEventType.CREATE && e.name === 'later'), { what: 'new dir' })
  await s.files.write(`${dir}/later/g.txt`, 'y')
  await until(() => events.some((e) => e.type === FilesystemEventType.WRITE && e.name === 'later/g.txt'), { what: 'write in new dir' })
  const w = events.find((e) => e.name === 'later/g.txt' && e.type === FilesystemEventType.WRITE)
  assert.ok(w.entry, 'includeEntry attaches the entry')
  assert.equal(w.entry.path, `${HOME}/${dir}/later/g.txt`)
  await h.stop()
})

test('watchDir: a missing directory fails at once', async () => {
  const s = await sandbox()
  await assert.rejects(s.files.watchDir(uniq('nowatch'), () => {}))
})
