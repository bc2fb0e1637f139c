// sudo in the base template through the real SDK (e2b 2.51.0), as E2B's base image has it:
// the sandbox's user runs commands as root (or -u another user) without a password. The
// template's /usr/bin/sudo is the agent's (/.airlock/bin/sudo, not setuid): uid 0 of the
// sandbox with what the API's `user: 'root'` has. Covered: id, -u, exit statuses, a command
// that is not found, stdin (piped and through the SDK), writes to root-owned paths (tee,
// apt-get's lock, dpkg's database), the environment, -i, -l, and the command's lifetime
// (timeoutMs and commands.kill end the root command with its sudo). Jail backend only: the
// test backend's agent is not the sandbox's init and serves no sudo.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, TimeoutError } from 'e2b'
import { BACKEND, create, until } from './helpers.mjs'

let shared
async function sbx() {
  if (!shared) shared = await create()
  return shared
}

const jailOnly = (t) => {
  if (BACKEND !== 'jail') {
    t.skip('SKIP: sudo is served by the agent as the sandbox\'s init (jail backend)')
    return true
  }
  return false
}

// Whether `sleep <secs>` runs, seen by root (the pattern's brackets keep pgrep's own shell,
// whose command line holds the pattern, from matching).
async function sleeping(s, secs) {
  const r = await s.commands.run(`pgrep -f -- '[s]leep ${secs}' >/dev/null && echo yes || echo no`,
                                 { user: 'root' })
  return r.stdout === 'yes\n'
}

test('sudo: the user becomes root, or another user, without a password', async (t) => {
  if (jailOnly(t)) return
  const s = await sbx()
  assert.equal((await s.commands.run('id -un')).stdout, 'user\n')
  assert.equal((await s.commands.run('sudo id -u')).stdout, '0\n')
  assert.equal((await s.commands.run('sudo -n true && echo ok')).stdout, 'ok\n')
  assert.equal((await s.commands.run('sudo -u user id -un')).stdout, 'user\n')
  assert.equal((await s.commands.run('sudo -u nobody id -un')).stdout, 'nobody\n')
  assert.equal((await s.commands.run('sudo -i pwd')).stdout, '/root\n')
  assert.match((await s.commands.run('sudo -l')).stdout, /\(ALL : ALL\) NOPASSWD: ALL/)
  assert.equal((await s.commands.run('ls -l /usr/bin/sudo | sed "s/.* -> //"')).stdout,
               '/.airlock/bin/sudo\n')
})

test('sudo: exit statuses, command not found, stdin', async (t) => {
  if (jailOnly(t)) return
  const s = await sbx()
  await assert.rejects(s.commands.run('sudo sh -c "echo to-stderr >&2; exit 5"'),
                       (e) => e instanceof CommandExitError && e.exitCode === 5 &&
                         e.stderr === 'to-stderr\n')
  await assert.rejects(s.commands.run('sudo no-such-command-xyz'),
                       (e) => e instanceof CommandExitError && e.exitCode === 1 &&
                         e.stderr === 'sudo: no-such-command-xyz: command not found\n')
  assert.equal((await s.commands.run('printf "a\\nb\\n" | sudo cat')).stdout, 'a\nb\n')
  // stdin from the SDK, through sudo to the root command
  const h = await s.commands.run('sudo cat', { background: true, stdin: true })
  await s.commands.sendStdin(h.pid, 'through the sdk\n')
  await s.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.stdout, 'through the sdk\n')
})

test('sudo: writes to root-owned paths (tee, apt-get, dpkg)', async (t) => {
  if (jailOnly(t)) return
  const s = await sbx()
  await assert.rejects(s.commands.run('echo x > /etc/airlock-sudo-test'), CommandExitError)
  await s.commands.run('echo written-by-root | sudo tee /etc/airlock-sudo-test >/dev/null')
  assert.equal((await s.commands.run('stat -c %U:%G /etc/airlock-sudo-test && cat /etc/airlock-sudo-test')).stdout,
               'root:root\nwritten-by-root\n')
  await s.commands.run('sudo mkdir -p /opt/tool && sudo cp /bin/true /usr/local/bin/airlock-true')
  assert.equal((await s.commands.run('stat -c %U /opt/tool /usr/local/bin/airlock-true')).stdout,
               'root\nroot\n')
  // apt-get takes dpkg's lock (a root-owned file): refused to the user, done through sudo.
  // (--no-download: the test sandboxes have no network; the package is already there.)
  await assert.rejects(s.commands.run('apt-get install -y --no-download jq'),
                       (e) => e instanceof CommandExitError && /lock/.test(e.stderr))
  const apt = await s.commands.run('sudo apt-get install -y --no-download jq')
  assert.match(apt.stdout, /jq is already the newest version/)
  // dpkg's database changes: a package's state is set and read back.
  await s.commands.run('echo "jq hold" | sudo dpkg --set-selections')
  assert.match((await s.commands.run('dpkg --get-selections jq')).stdout, /^jq\s+hold\n$/)
  await s.commands.run('echo "jq install" | sudo dpkg --set-selections')
})

test('sudo: the environment is reset, the secure PATH, SUDO_*; -E keeps it', async (t) => {
  if (jailOnly(t)) return
  const s = await sbx()
  const env = (await s.commands.run('sudo env', { envs: { AL_CALLER: 'x', TERM: 'xterm' } })).stdout
  const vars = Object.fromEntries(env.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]))
  assert.equal(vars.USER, 'root')
  assert.equal(vars.HOME, '/root')
  assert.equal(vars.PATH, '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
  assert.equal(vars.SUDO_USER, 'user')
  assert.equal(vars.SUDO_UID, '1000')
  assert.equal(vars.SUDO_COMMAND, '/usr/bin/env')
  assert.equal(vars.TERM, 'xterm')
  assert.equal(vars.AL_CALLER, undefined)
  assert.equal(vars.PIP_BREAK_SYSTEM_PACKAGES, '1') // the template's own variables stay
  const kept = await s.commands.run('sudo -E sh -c \'echo $AL_CALLER\'', { envs: { AL_CALLER: 'x' } })
  assert.equal(kept.stdout, 'x\n')
})

test('sudo: the root command ends with its sudo (timeoutMs, commands.kill)', async (t) => {
  if (jailOnly(t)) return
  const s = await sbx()
  const d1 = `200.${process.pid}1`, d2 = `200.${process.pid}2` // unique durations
  await assert.rejects(s.commands.run(`sudo sleep ${d1}`, { timeoutMs: 2000 }),
                       (e) => e instanceof TimeoutError)
  await until(async () => !(await sleeping(s, d1)), { what: 'the root command to end at the deadline' })

  const h = await s.commands.run(`sudo sleep ${d2}`, { background: true, timeoutMs: 0 })
  await until(() => sleeping(s, d2), { what: 'the root command to start' })
  assert.equal(await s.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), CommandExitError)
  await until(async () => !(await sleeping(s, d2)), { what: 'the root command to go with its sudo' })
})
