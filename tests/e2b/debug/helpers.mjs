// Shared helpers of the debug-mode E2B SDK tests (run by tests/e2b/run-debug).
import { Sandbox } from '@e2b/code-interpreter'

export const HOME = process.env.AIRLOCK_E2B_HOME
if (!HOME) throw new Error('AIRLOCK_E2B_HOME is not set: run these tests through tests/e2b/run-debug')

let sbx
// In debug mode Sandbox.create() makes no API call: it targets localhost:49983/49999.
export async function sandbox() {
  if (!sbx) sbx = await Sandbox.create()
  return sbx
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
