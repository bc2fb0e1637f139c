// Shared helpers of the normal-mode E2B SDK tests (run by tests/e2b/run-normal): the SDK
// talks to airlockd's API (E2B_API_URL) and routes sandbox traffic through it
// (E2B_SANDBOX_URL), exactly as a user's code would.
import { after } from 'node:test'
import { Sandbox } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} is not set: run these tests through tests/e2b/run-normal`)
}
if (process.env.E2B_DEBUG) throw new Error('E2B_DEBUG must not be set in normal mode')

export const API_URL = process.env.E2B_API_URL
export const API_KEY = process.env.E2B_API_KEY
export const TEMPLATE = process.env.AIRLOCK_E2B_TEMPLATE || 'base'
export const CI_TEMPLATE = process.env.AIRLOCK_E2B_CI_TEMPLATE || 'code-interpreter-v1'
export const BACKEND = process.env.AIRLOCK_E2B_BACKEND || 'jail'

const created = []
// Sandboxes made by a test file are killed when the file is done, whatever happened.
after(async () => {
  await Promise.all(created.map((s) => s.kill().catch(() => {})))
})

export async function create(opts = {}, template = TEMPLATE, Cls = Sandbox) {
  const s = await Cls.create(template, { timeoutMs: 180_000, ...opts })
  created.push(s)
  return s
}

export function track(s) {
  created.push(s)
  return s
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

export async function until(fn, { timeoutMs = 10000, stepMs = 50, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs
  for (;;) {
    if (await fn()) return
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(stepMs)
  }
}

let n = 0
export function uniq(prefix) {
  n += 1
  return `${prefix}-${process.pid}-${n}`
}

// A raw call to the control plane (for what the SDK does not expose).
export async function api(method, path, body, key = API_KEY) {
  const r = await fetch(API_URL + path, {
    method,
    headers: { 'X-API-KEY': key, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  return { status: r.status, headers: r.headers, body: text ? JSON.parse(text) : null }
}
