// tests/e2b/sdk-driver.mjs: the real E2B SDK (e2b 2.51.0 and @e2b/code-interpreter 2.8.0,
// pinned in package-lock.json) as a command-line tool for integration scripts that check
// what happens around a sandbox from the host (tests/integration/cp_intercept.sh,
// cp_netupdate.sh, cp_disk.sh). Each call
// makes one SDK operation against airlockd in normal mode (E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY, as a user's program would) and prints one JSON object on stdout.
//
//   create TEMPLATE [OPTS-JSON]   Sandbox.create(TEMPLATE, opts)   -> {"sandboxId"}
//                                 opts: envs, metadata, network, allowInternetAccess,
//                                 timeoutMs (default 300 s)
//   run ID CMD [TIMEOUT-S]        sbx.commands.run(CMD)            -> {"exitCode","stdout","stderr","error"}
//   background ID CMD             commands.run(CMD, {background})  -> {"pid"}
//   code ID PYTHON                sbx.runCode(PYTHON)              -> {"text","stdout","stderr","error"}
//   info ID                       Sandbox.getInfo(ID)              -> the SandboxInfo
//   network ID FIELDS-JSON        Sandbox.updateNetwork(ID, fields) -> {"updated": true}, or
//                                 {"error", "statusCode"} (exit 1) when the API refused it
//   pause ID                      Sandbox.pause(ID)                -> {"paused"}
//                                 (every other op on a paused sandbox resumes it: connect)
//   kill ID                       Sandbox.kill(ID)                 -> {"killed"}
//
// Exit status 0 when the SDK call itself worked (a command that exits non-zero is a result,
// not a failure), 1 with {"error": ...} otherwise, 2 on usage errors.
import { Sandbox } from '@e2b/code-interpreter'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) {
    console.error(`sdk-driver: ${v} is not set`)
    process.exit(2)
  }
}

const [op, ...args] = process.argv.slice(2)
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n')

async function connect(id) {
  return Sandbox.connect(id, { timeoutMs: 300_000 })
}

async function main() {
  switch (op) {
    case 'create': {
      const opts = args[1] ? JSON.parse(args[1]) : {}
      const s = await Sandbox.create(args[0], { timeoutMs: 300_000, ...opts })
      return out({ sandboxId: s.sandboxId })
    }
    case 'run': {
      const s = await connect(args[0])
      const timeoutMs = (Number(args[2]) || 60) * 1000
      try {
        const r = await s.commands.run(args[1], { timeoutMs })
        return out({ exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, error: r.error ?? null })
      } catch (e) {
        // CommandExitError: a result like any other.
        if (e && typeof e.exitCode === 'number')
          return out({ exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr, error: e.error ?? null })
        throw e
      }
    }
    case 'background': {
      const s = await connect(args[0])
      const h = await s.commands.run(args[1], { background: true, timeoutMs: 0 })
      return out({ pid: h.pid })
    }
    case 'code': {
      const s = await connect(args[0])
      const x = await s.runCode(args[1], { timeoutMs: 60_000 })
      return out({
        text: x.text ?? null,
        stdout: x.logs.stdout.join(''),
        stderr: x.logs.stderr.join(''),
        error: x.error ? `${x.error.name}: ${x.error.value}` : null,
      })
    }
    case 'info':
      return out(await Sandbox.getInfo(args[0]))
    case 'network':
      await Sandbox.updateNetwork(args[0], JSON.parse(args[1]))
      return out({ updated: true })
    case 'pause':
      return out({ paused: await Sandbox.pause(args[0]) })
    case 'kill':
      return out({ killed: await Sandbox.kill(args[0]) })
    default:
      console.error('usage: sdk-driver.mjs create|run|background|code|info|network|pause|kill ... (see the header)')
      process.exit(2)
  }
}

// Exit at once: a background command's stream (and keep-alive connections) would keep
// Node running.
main().then(
  () => process.exit(0),
  (e) => {
    out({ error: `${e?.name ?? 'Error'}: ${e?.message ?? e}`, statusCode: e?.statusCode ?? null })
    process.exit(1)
  },
)
