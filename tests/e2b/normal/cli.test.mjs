// E2B's own CLI (npm @e2b/cli 2.19.0, pinned in package-lock.json) against airlockd, as a user
// with a self-hosted API runs it: E2B_API_URL and E2B_API_KEY, a home of its own (no
// ~/.e2b/config.json), no update check (NO_UPDATE_NOTIFIER: it would ask the npm registry).
// `e2b sandbox logs <id>` reads GET /sandboxes/{id}/logs and JSON.parses each entry's line,
// reading its "level" (and "logger"): the lines must be JSON objects, as E2B's are.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { API_URL, API_KEY, create } from './helpers.mjs'

const CLI = fileURLToPath(new URL('../node_modules/@e2b/cli/dist/index.js', import.meta.url))
const home = await mkdtemp(join(tmpdir(), 'al-e2b-cli-'))
after(() => rm(home, { recursive: true, force: true }))

function e2b(...args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], {
      env: { PATH: process.env.PATH, HOME: home, E2B_API_URL: API_URL, E2B_API_KEY: API_KEY,
             NO_UPDATE_NOTIFIER: '1', NO_COLOR: '1' },
      timeout: 120000,
    }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }))
  })
}

test('e2b sandbox logs: the CLI prints the sandbox log', async () => {
  const s = await create()
  const r = await s.commands.run('echo logged')
  assert.equal(r.stdout, 'logged\n')
  const json = await e2b('sandbox', 'logs', s.sandboxId, '--format', 'json')
  assert.equal(json.code, 0, `exit ${json.code}: ${json.stderr}`)
  const lines = json.stdout.split('\n').filter((l) => l.trim())
  assert.ok(lines.length > 0, 'no log lines')
  const logs = lines.map((l) => JSON.parse(l))
  for (const l of logs) {
    assert.ok(!Number.isNaN(Date.parse(l.timestamp)), l.timestamp)
    assert.equal(typeof l.message, 'string')
  }
  // The agent logged the command it ran.
  assert.ok(logs.some((l) => /process \d+ started/.test(l.message)), json.stdout)
  // Levels filter as the CLI does it (from the line's "level").
  const errors = await e2b('sandbox', 'logs', s.sandboxId, '--format', 'json', '--level', 'error')
  assert.equal(errors.code, 0, errors.stderr)
  assert.ok(errors.stdout.split('\n').filter((l) => l.trim()).length < lines.length)
  const pretty = await e2b('sandbox', 'logs', s.sandboxId)
  assert.equal(pretty.code, 0, pretty.stderr)
  assert.match(pretty.stdout, new RegExp(`Logs for sandbox ${s.sandboxId}`))
  assert.match(pretty.stdout, /process \d+ started/)
})
