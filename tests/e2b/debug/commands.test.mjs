// commands: stdout, stderr, exit codes, envs, cwd, background + kill, stdin, list, connect.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, TimeoutError } from 'e2b'
import { HOME, UID, sandbox, until, uniq } from './helpers.mjs'

test('run: stdout and exit code 0', async () => {
  const s = await sandbox()
  const r = await s.commands.run('echo "Hello, World!"')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'Hello, World!\n')
  assert.equal(r.stderr, '')
})

test('run: special characters and multiline', async () => {
  const s = await sandbox()
  const text = '!@#$%^&*()_+ ünïcödé 🙂\nline 2'
  const r = await s.commands.run(`printf '%s\\n' "${text}"`)
  assert.equal(r.stdout, `${text}\n`)
})

test('run: stderr is separate from stdout', async () => {
  const s = await sandbox()
  const r = await s.commands.run('echo out; echo err >&2')
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
})

test('run: a non-zero exit throws CommandExitError with the code and output', async () => {
  const s = await sandbox()
  await assert.rejects(s.commands.run('echo partial; echo bad >&2; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    assert.equal(err.stderr, 'bad\n')
    assert.match(err.error, /exit status 3/)
    return true
  })
})

test('run: a signalled process reports exit code -1 and "signal: killed"', async () => {
  const s = await sandbox()
  await assert.rejects(s.commands.run('kill -9 $$'), (err) => {
    assert.ok(err instanceof CommandExitError)
    assert.equal(err.exitCode, -1)
    assert.equal(err.error, 'signal: killed')
    return true
  })
})

test('run: envs are per command', async () => {
  const s = await sandbox()
  const r = await s.commands.run('echo "$FOO-$BAR"', { envs: { FOO: 'foo', BAR: 'b a r' } })
  assert.equal(r.stdout, 'foo-b a r\n')
  const r2 = await s.commands.run('echo "${FOO:-unset}"')
  assert.equal(r2.stdout, 'unset\n')
})

test('run: HOME, USER and the default working directory', async () => {
  const s = await sandbox()
  const r = await s.commands.run('echo "$HOME"; pwd; echo "$USER"; id -u')
  const [home, pwd, user, uid] = r.stdout.trim().split('\n')
  assert.equal(home, HOME)
  assert.equal(pwd, HOME)
  assert.ok(user.length > 0)
  assert.equal(uid, UID)
})

test('run: cwd, relative to the home or absolute; a missing cwd is an error', async () => {
  const s = await sandbox()
  const dir = uniq('cwd')
  await s.files.makeDir(dir)
  assert.equal((await s.commands.run('pwd', { cwd: dir })).stdout, `${HOME}/${dir}\n`)
  assert.equal((await s.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
  await assert.rejects(s.commands.run('pwd', { cwd: '/does/not/exist' }), /does not exist/)
})

test('run: onStdout/onStderr stream the output', async () => {
  const s = await sandbox()
  const out = []
  const err = []
  await s.commands.run('for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2', {
    onStdout: (d) => out.push(d),
    onStderr: (d) => err.push(d),
  })
  assert.equal(out.join(''), '1\n2\n3\n')
  assert.equal(err.join(''), 'e\n')
})

test('run: timeoutMs ends the command with a TimeoutError', async () => {
  const s = await sandbox()
  const t0 = Date.now()
  await assert.rejects(s.commands.run('sleep 30', { timeoutMs: 1000 }), TimeoutError)
  assert.ok(Date.now() - t0 < 10000)
})

test('background: list, connect, kill', async () => {
  const s = await sandbox()
  const h = await s.commands.run('sleep 30', { background: true })
  assert.ok(h.pid > 0)
  const list = await s.commands.list()
  const me = list.find((p) => p.pid === h.pid)
  assert.ok(me, 'the background process is listed')
  assert.equal(me.cmd, '/bin/bash')
  assert.deepEqual(me.args, ['-l', '-c', 'sleep 30'])
  const c = await s.commands.connect(h.pid)
  assert.equal(c.pid, h.pid)
  assert.equal(await s.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
  await until(async () => !(await s.commands.list()).some((p) => p.pid === h.pid), { what: 'the process to leave the list' })
  await assert.rejects(s.commands.run(`kill -0 ${h.pid}`), CommandExitError)
})

test('kill and connect: an unknown pid', async () => {
  const s = await sandbox()
  assert.equal(await s.commands.kill(999999), false)
  await assert.rejects(s.commands.connect(999999))
})

test('background: output collected while running, wait() gives the result', async () => {
  const s = await sandbox()
  const h = await s.commands.run('echo one; sleep 0.3; echo two', { background: true })
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'one\ntwo\n')
})

test('stdin: sendStdin and closeStdin', async () => {
  const s = await sandbox()
  const h = await s.commands.run('cat', { background: true, stdin: true })
  await s.commands.sendStdin(h.pid, 'Hello, ')
  await h.sendStdin(new TextEncoder().encode('World!\n'))
  await until(() => h.stdout === 'Hello, World!\n', { what: 'cat to echo stdin' })
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'Hello, World!\n')
})

test('stdin: closed by default (stdin: false reads EOF at once)', async () => {
  const s = await sandbox()
  const r = await s.commands.run('cat; echo done')
  assert.equal(r.stdout, 'done\n')
})

test('run: a command that does not exist exits 127', async () => {
  const s = await sandbox()
  await assert.rejects(s.commands.run('definitely-not-a-command-xyz'), (e) => e.exitCode === 127)
})

test('run: large output arrives complete', async () => {
  const s = await sandbox()
  const r = await s.commands.run('head -c 3000000 /dev/zero | tr "\\0" a; echo')
  assert.equal(r.stdout.length, 3000001)
})

test('run: a background grandchild does not hold the command open', async () => {
  const s = await sandbox()
  const t0 = Date.now()
  const r = await s.commands.run('sleep 5 & echo started')
  assert.equal(r.stdout, 'started\n')
  assert.ok(Date.now() - t0 < 4000, 'returned before the grandchild ended')
})
