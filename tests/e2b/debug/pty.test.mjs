// pty: create, input, output, resize, kill, connect.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { HOME, sandbox, until } from './helpers.mjs'

const dec = () => {
  const d = new TextDecoder()
  let text = ''
  return { on: (b) => { text += d.decode(b, { stream: true }) }, get text() { return text } }
}

test('pty: an interactive shell echoes input and runs commands', async () => {
  const s = await sandbox()
  const out = dec()
  const t = await s.pty.create({ cols: 80, rows: 24, onData: out.on })
  assert.ok(t.pid > 0)
  await s.pty.sendInput(t.pid, new TextEncoder().encode('echo "pty-$((40+2))"\n'))
  await until(() => out.text.includes('pty-42'), { what: 'the command output in the pty' })
  await s.pty.sendInput(t.pid, new TextEncoder().encode('pwd; tty\n'))
  await until(() => out.text.includes(HOME) && /\/dev\/pts\/\d+/.test(out.text), { what: 'pwd and tty' })
  await s.pty.kill(t.pid)
  await assert.rejects(t.wait())
})

test('pty: resize is seen by the program (stty size)', async () => {
  const s = await sandbox()
  const out = dec()
  const t = await s.pty.create({ cols: 100, rows: 30, onData: out.on })
  await s.pty.sendInput(t.pid, new TextEncoder().encode('stty size\n'))
  await until(() => out.text.includes('30 100'), { what: 'stty size 30 100' })
  await s.pty.resize(t.pid, { cols: 132, rows: 43 })
  await s.pty.sendInput(t.pid, new TextEncoder().encode('stty size\n'))
  await until(() => out.text.includes('43 132'), { what: 'stty size 43 132 after resize' })
  await s.pty.kill(t.pid)
})

test('pty: exit ends the session with its status; envs and TERM are set', async () => {
  const s = await sandbox()
  const out = dec()
  const t = await s.pty.create({ cols: 80, rows: 24, onData: out.on, envs: { MYVAR: 'set-in-pty' } })
  await s.pty.sendInput(t.pid, new TextEncoder().encode('echo "$MYVAR $TERM"; exit 7\n'))
  await assert.rejects(t.wait(), (e) => e.exitCode === 7)
  assert.match(out.text, /set-in-pty xterm-256color/)
})

test('pty: connect to a running terminal and receive its output', async () => {
  const s = await sandbox()
  const t = await s.pty.create({ cols: 80, rows: 24, onData: () => {} })
  const out = dec()
  const c = await s.pty.connect(t.pid, { onData: out.on })
  await s.pty.sendInput(t.pid, new TextEncoder().encode('echo connected-$((1+1))\n'))
  await until(() => out.text.includes('connected-2'), { what: 'output through the second stream' })
  await s.pty.kill(t.pid)
  await assert.rejects(c.wait())
})
