// Shared helpers of the agent-level E2B SDK tests. Two ways to run them:
//   - tests/e2b/run-debug: debug mode (E2B_DEBUG), the SDK talks straight to an agent on
//     localhost:49983/49999, no control plane;
//   - tests/e2b/run-normal with the jail backend (AIRLOCK_E2B_VIA_AIRLOCKD=1): the same
//     tests against one real sandbox (code-interpreter-v1) created through airlockd, its
//     agent inside the jail, reached the way users reach it.
import { after } from 'node:test'
import { Sandbox } from '@e2b/code-interpreter'

export const HOME = process.env.AIRLOCK_E2B_HOME
if (!HOME) throw new Error('AIRLOCK_E2B_HOME is not set: run these tests through tests/e2b/run-debug or run-normal')
const VIA_AIRLOCKD = process.env.AIRLOCK_E2B_VIA_AIRLOCKD === '1'
// The uid commands run as: the template's user in a sandbox; on the host, nobody (the
// debug agent runs as root and drops to 65534) or the caller.
export const UID = process.env.AIRLOCK_E2B_UID || String(process.getuid() === 0 ? 65534 : process.getuid())

let sbx
export async function sandbox() {
  if (!sbx) {
    // In debug mode Sandbox.create() makes no API call: it targets localhost:49983/49999.
    sbx = VIA_AIRLOCKD
      ? await Sandbox.create(process.env.AIRLOCK_E2B_CI_TEMPLATE || 'code-interpreter-v1',
                             { timeoutMs: 600_000 })
      : await Sandbox.create()
  }
  return sbx
}
if (VIA_AIRLOCKD) after(async () => { if (sbx) await sbx.kill().catch(() => {}) })

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
