// tests/e2b/template-build.mjs: the real SDK's Template.build (e2b 2.51.0) against airlockd,
// run by tests/integration/templates_oci.sh inside its registry world. A template from the
// world's registry (with its credentials) with ENV, WORKDIR, USER, startCmd and readyCmd,
// its build log through onBuildLogs; RUN steps (their output, their files, a failing one
// as BuildError naming it, no egress);
// COPY steps (GET /templates/{id}/files/{hash}, the PUT it grants, the files applied to the
// template, found again by a second build); a rebuild whose image comes from the blob cache;
// Template.exists, Sandbox.create(alias) and a command in it; tags (assignTags, getTags,
// removeTags, 'name:tag' builds and sandboxes); startCmd and readyCmd honoured at create.
// Prints one line per check; exits non-zero on the first failure.
//
// Environment: E2B_API_URL, E2B_API_KEY (airlockd's), AIRLOCK_IMAGE (a reference of the
// registry), AIRLOCK_REG_USER, AIRLOCK_REG_PASSWORD.
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BuildError, Sandbox, Template } from 'e2b'

const image = process.env.AIRLOCK_IMAGE
const creds = { username: process.env.AIRLOCK_REG_USER, password: process.env.AIRLOCK_REG_PASSWORD }
const ok = (what) => console.log(`ok - ${what}`)

function tpl() {
  return Template()
    .fromImage(image, creds)
    .setEnvs({ BUILT_BY: 'sdk', GREETING: 'hello' })
    .setWorkdir('/srv/app')
    .setUser('user')
    .setStartCmd('sleep 3600', 'true')
}

const logs = []
const built = await Template.build(tpl(), 'sdk-tpl', { onBuildLogs: (e) => logs.push(e) })
assert.equal(built.templateId, 'sdk-tpl')
assert.match(built.buildId, /^[0-9a-f-]{36}$/)
const text = logs.map((e) => `${e.level} ${e.message}`).join('\n')
assert.match(text, /pulling registry\.test:5000\/test\/base:1/, text)
assert.match(text, /unpacked: \d+ entries/, text)
assert.match(text, /WORKDIR \/srv\/app/, text)
assert.match(text, /template sdk-tpl is ready/, text)
assert.ok(logs.every((e) => e.timestamp instanceof Date && !isNaN(e.timestamp)), 'timestamps')
ok('Template.build from the registry, with the build log through onBuildLogs')

// RUN: each step runs in a build sandbox over the version being built, as the step's user
// (or the current USER), in the current WORKDIR with the ENV so far; its output is in the
// build log; what it changes (files made, removed, links) is in the template's files.
const runTpl = (skip = false) =>
  (skip ? Template().skipCache() : Template())
    .fromImage(image, creds)
    .setEnvs({ GREETING: 'hello' })
    .setWorkdir('/srv/app')
    .setUser('user')
    .runCmd('echo "$GREETING from $(id -u) in $(pwd)" > /home/user/run.txt; echo to-stderr >&2; echo out-line')
    .runCmd(['rm /etc/doomed', 'mkdir -p /opt/made', 'ln -s /etc/passwd /opt/made/link', 'echo x > /opt/made/gone'], { user: 'root' })
    .runCmd('rm /opt/made/gone', { user: 'root' })
{
  const rlogs = []
  await Template.build(runTpl(), 'sdk-run', { onBuildLogs: (e) => rlogs.push(e) })
  const rtext = rlogs.map((e) => `${e.level} ${e.message}`).join('\n')
  assert.match(rtext, /info RUN echo "\$GREETING .* \(as user\)/, rtext)
  assert.match(rtext, /info out-line/, rtext)
  assert.match(rtext, /warn to-stderr/, rtext)
  assert.equal(rtext.match(/RUN: \d+ entr(y|ies) changed \(\d+ files, [\d.]+ MiB\), 1 removed/g)?.length, 2, rtext)
  assert.match(rtext, /template sdk-run is ready/, rtext)
  const rs = await Sandbox.create('sdk-run')
  try {
    const r = await rs.commands.run(
      'cat /home/user/run.txt; ls -ln /home/user/run.txt; readlink /opt/made/link; ' +
        'test -e /etc/doomed || test -e /opt/made/gone || echo removed',
      { user: 'root' }
    )
    const lines = r.stdout.trim().split('\n')
    assert.equal(lines[0], 'hello from 1000 in /srv/app', r.stdout)
    assert.deepEqual(lines[1].trim().split(/\s+/).slice(2, 4), ['1000', '1000'], r.stdout)
    assert.deepEqual(lines.slice(2), ['/etc/passwd', 'removed'], r.stdout)
  } finally {
    await rs.kill()
  }
  ok(`RUN steps: as the step's user, in WORKDIR with ENV, output in the log, files made and removed in the template (${rtext.match(/RUN: .*/g).join('; ')})`)
}

// The step cache: the same base and steps again run no step (each RUN's layer is taken from
// the cache, the log says so); skipCache (force) runs them again.
{
  const clogs = []
  await Template.build(runTpl(), 'sdk-run', { onBuildLogs: (e) => clogs.push(e) })
  const ctext = clogs.map((e) => `${e.level} ${e.message}`).join('\n')
  assert.equal(ctext.match(/info RUN .*: cached \(layer sha256:[0-9a-f]{64}, \d+ entries\)/g)?.length, 3, ctext)
  assert.doesNotMatch(ctext, /^info out-line$|\(as user\)$|\(as root\)$/m, ctext)
  assert.match(ctext, /template sdk-run is ready/, ctext)
  const rs = await Sandbox.create('sdk-run')
  try {
    assert.equal((await rs.commands.run('cat /home/user/run.txt; readlink /opt/made/link')).stdout, 'hello from 1000 in /srv/app\n/etc/passwd\n')
  } finally {
    await rs.kill()
  }
  const flogs = []
  await Template.build(runTpl(true), 'sdk-run', { onBuildLogs: (e) => flogs.push(e) })
  const ftext = flogs.map((e) => `${e.level} ${e.message}`).join('\n')
  assert.doesNotMatch(ftext, /: cached/, ftext)
  assert.match(ftext, /^info out-line$/m, ftext)
  ok('a rebuild with the same steps runs none (cached layers); skipCache runs them again')
}

// A failing step: a BuildError naming the step and its exit code; the template's previous
// version stays the one sandboxes get.
let err
try {
  await Template.build(runTpl().runCmd('echo about to fail; exit 3'), 'sdk-run')
} catch (e) {
  err = e
}
assert.ok(err instanceof BuildError, `a BuildError, not ${err}`)
assert.match(err.message, /step 7 \(RUN echo about to fail; exit 3\): the command failed with exit code 3/, err.message)
{
  const rs = await Sandbox.create('sdk-run')
  try {
    assert.equal((await rs.commands.run('cat /home/user/run.txt')).stdout, 'hello from 1000 in /srv/app\n')
  } finally {
    await rs.kill()
  }
}
ok(`a failing RUN step is a BuildError naming it (${err.message}); the previous version stays`)
err = undefined
try {
  await Template.build(Template().fromImage(image, creds).setEnvs({ A: '1' }).runCmd('false'), 'sdk-bad')
} catch (e) {
  err = e
}
assert.match(String(err?.message), /step 2 \(RUN false\): the command failed with exit code 1/, String(err))

// Egress from a RUN step is denied by default (templates.build_policy: deny-all; here the
// world's airlockd has no network at all): the registry the build pulled from is out of reach.
{
  const elogs = []
  await Template.build(
    Template()
      .fromImage(image, creds)
      .runCmd('if wget -q -T 5 -O /dev/null http://registry.test:5000/v2/; then echo egress-open; exit 1; fi; echo egress-denied'),
    'sdk-egress',
    { onBuildLogs: (e) => elogs.push(e) }
  )
  const etext = elogs.map((e) => e.message).join('\n')
  assert.match(etext, /^egress-denied$/m, etext)
  ok('a RUN step reaches nothing outside its sandbox by default')
}

// COPY: the SDK asks GET /templates/{id}/files/{hash}, PUTs the files' archive to the URL
// it is given, then starts the build, which applies the archive to the template's root: a
// file into a directory (owned by the current USER), a directory's files with the step's
// owner and mode. A second build finds the files already there and uploads nothing.
const ctx = mkdtempSync(join(tmpdir(), 'al-copy-'))
process.on('exit', () => rmSync(ctx, { recursive: true, force: true }))
writeFileSync(join(ctx, 'hello.txt'), 'copied by the sdk\n')
mkdirSync(join(ctx, 'conf', 'sub'), { recursive: true })
writeFileSync(join(ctx, 'conf', 'app.ini'), 'x=1\n')
writeFileSync(join(ctx, 'conf', 'sub', 'deep.ini'), 'y=2\n')
writeFileSync(join(ctx, 'conf', 'skip.txt'), 'not an ini\n')
const copyTpl = () =>
  Template({ fileContextPath: ctx })
    .fromImage(image, creds)
    .setUser('user')
    .copy('hello.txt', '/srv/')
    .copy('conf/**/*.ini', '/etc/app', { user: 'root', mode: 0o640 })
    .setWorkdir('/srv')
    .copy('hello.txt', 'again.txt')
for (const [round, want] of [[1, /Uploaded 'hello\.txt'/], [2, /Skipping upload of 'hello\.txt', already cached/]]) {
  const clogs = []
  await Template.build(copyTpl(), 'sdk-copy', { onBuildLogs: (e) => clogs.push(e) })
  const ctext = clogs.map((e) => e.message).join('\n')
  assert.match(ctext, want, ctext)
  assert.match(ctext, /COPY hello\.txt \/srv\/: \/srv\/hello\.txt \(18 bytes\), owner user/, ctext)
  assert.match(ctext, /template sdk-copy is ready/, ctext)
  ok(`COPY ${round}: ${want.source.replace(/\\/g, '')}, the files applied`)
}
{
  // forceUpload: the files are sent again although the server has them.
  const flogs = []
  const forced = Template({ fileContextPath: ctx }).fromImage(image, creds).copy('hello.txt', '/srv/', { forceUpload: true })
  await Template.build(forced, 'sdk-force', { onBuildLogs: (e) => flogs.push(e) })
  await Template.build(forced, 'sdk-force', { onBuildLogs: (e) => flogs.push(e) })
  const ftext = flogs.map((e) => e.message).join('\n')
  assert.equal(ftext.match(/Uploaded 'hello\.txt'/g)?.length, 2, ftext)
  ok('COPY with forceUpload uploads its files again')
}
{
  const cs = await Sandbox.create('sdk-copy')
  try {
    const r = await cs.commands.run(
      'cat /srv/hello.txt /srv/again.txt /etc/app/app.ini /etc/app/sub/deep.ini; ls /etc/app; ' +
        'ls -ln /srv/hello.txt /etc/app/app.ini /srv/again.txt',
      { user: 'root' }
    )
    const lines = r.stdout.trim().split('\n')
    assert.deepEqual(lines.slice(0, 6), ['copied by the sdk', 'copied by the sdk', 'x=1', 'y=2', 'app.ini', 'sub'], r.stdout)
    const owner = (l) => l.trim().split(/\s+/).slice(0, 4).filter((_, i) => i !== 1).join(' ')
    assert.equal(owner(lines[6]), '-rw-r----- 0 0', r.stdout) // /etc/app/app.ini: the step's owner and mode
    assert.equal(owner(lines[7]), '-rw-r--r-- 1000 1000', r.stdout) // /srv/again.txt, relative to WORKDIR
    assert.equal(owner(lines[8]), '-rw-r--r-- 1000 1000', r.stdout) // /srv/hello.txt: the current USER
  } finally {
    await cs.kill()
  }
  ok('a sandbox of the template has the copied files, with their owners and modes')
}

// Tags: a build gets the default tag (what the name alone names); a tag keeps a build's
// version while later builds move the default; removing the tag lets the version go.
{
  const tctx = mkdtempSync(join(tmpdir(), 'al-tags-'))
  process.on('exit', () => rmSync(tctx, { recursive: true, force: true }))
  const vt = (v) => {
    writeFileSync(join(tctx, 'version.txt'), `${v}\n`)
    return Template({ fileContextPath: tctx }).fromImage(image, creds).copy('version.txt', '/srv/')
  }
  const b1 = await Template.build(vt(1), 'sdk-tags')
  const assigned = await Template.assignTags('sdk-tags', ['v1', 'stable'])
  assert.equal(assigned.buildId, b1.buildId)
  assert.deepEqual(assigned.tags, ['v1', 'stable'])
  const b2 = await Template.build(vt(2), 'sdk-tags')
  const b3 = await Template.build(vt(3), 'sdk-tags:rc')
  assert.deepEqual(b3.tags, ['rc'])
  const tags = await Template.getTags('sdk-tags')
  assert.deepEqual(
    tags.map((t) => `${t.tag}=${t.buildId}`),
    [`default=${b2.buildId}`, `rc=${b3.buildId}`, `stable=${b1.buildId}`, `v1=${b1.buildId}`]
  )
  assert.ok(tags.every((t) => t.createdAt instanceof Date && !isNaN(t.createdAt)))
  const cat = async (ref) => {
    const s = await Sandbox.create(ref)
    try {
      return (await s.commands.run('cat /srv/version.txt', { user: 'root' })).stdout.trim()
    } finally {
      await s.kill()
    }
  }
  assert.equal(await cat('sdk-tags'), '2')
  assert.equal(await cat('sdk-tags:v1'), '1')
  assert.equal(await cat('sdk-tags:rc'), '3')
  assert.equal(await cat(`sdk-tags:${b1.buildId}`), '1')
  ok("Template.assignTags/getTags, Template.build('name:tag'), Sandbox.create('name:tag') gets that build's files")
  let terr
  try {
    await Template.removeTags('sdk-tags', 'default')
  } catch (e) {
    terr = e
  }
  assert.match(String(terr?.message), /cannot be removed/, String(terr))
  await Template.removeTags('sdk-tags', ['v1', 'stable'])
  let cerr
  try {
    await Sandbox.create('sdk-tags:v1')
  } catch (e) {
    cerr = e
  }
  assert.match(String(cerr?.message), /has no tag 'v1'/, String(cerr))
  ok('Template.removeTags: the tag is gone (the default tag cannot be removed)')
  console.log(`tags ${b1.buildId} ${b2.buildId} ${b3.buildId}`)
}

const again = []
const rebuilt = await Template.build(tpl(), 'sdk-tpl', { onBuildLogs: (e) => again.push(e) })
assert.notEqual(rebuilt.buildId, built.buildId)
const text2 = again.map((e) => e.message).join('\n')
assert.match(text2, /, 0\.0 MiB pulled\)/, text2)
ok('a rebuild takes the image from the blob cache (0.0 MiB pulled)')

assert.equal(await Template.exists('sdk-tpl'), true)
assert.equal(await Template.exists('sdk-bad'), true) // requested, its build failed
ok('Template.exists')

const sbx = await Sandbox.create('sdk-tpl')
try {
  const r = await sbx.commands.run('echo from-the-template')
  assert.equal(r.stdout.trim(), 'from-the-template')
  const info = await sbx.getInfo()
  assert.equal(info.templateId, 'sdk-tpl')
  if (process.env.AIRLOCK_E2B_BACKEND === 'jail') {
    // In a jail sandbox: the image's files, the build's ENV, WORKDIR and USER.
    const w = await sbx.commands.run('echo "$GREETING $BUILT_BY $PATH"; pwd; id -u; cat /home/user/hello.txt')
    assert.equal(w.stdout, 'hello sdk /bin:/usr/bin\n/srv/app\n1000\nhello\n', w.stdout)
  }
} finally {
  await sbx.kill()
}
ok(`Sandbox.create(alias) and commands in it (${process.env.AIRLOCK_E2B_BACKEND ?? 'test'} backend)`)

// startCmd and readyCmd (E2B's semantics): the start command runs as the template's USER in
// its WORKDIR with its ENV, and Sandbox.create returns once the readyCmd succeeded: here
// once the server the start command brings up (2 s late) answers, so the sandbox's first
// command finds it up. The start command is one of the sandbox's processes (tag startCmd).
const svc = Template()
  .fromImage(image, creds)
  .setEnvs({ GREETING: 'hello' })
  .setWorkdir('/srv/app')
  .setUser('user')
  .setStartCmd(
    'mkdir -p /home/user/www && echo "$GREETING $(id -u) $(pwd)" > /home/user/www/index.html && ' +
      'sleep 2 && exec httpd -f -p 127.0.0.1:8080 -h /home/user/www',
    'wget -q -O - http://127.0.0.1:8080/index.html | grep -q hello'
  )
await Template.build(svc, 'sdk-svc')
const t0 = Date.now()
const ss = await Sandbox.create('sdk-svc')
const took = Date.now() - t0
try {
  const r = await ss.commands.run('wget -q -O - http://127.0.0.1:8080/index.html')
  assert.equal(r.stdout, 'hello 1000 /srv/app\n', r.stdout)
  assert.ok(took >= 2000, `create returned after ${took} ms, before the server was up`)
  const procs = await ss.commands.list()
  const sc = procs.find((p) => p.tag === 'startCmd')
  assert.ok(sc && sc.args.join(' ').includes('exec httpd'), JSON.stringify(procs))
} finally {
  await ss.kill()
}
ok(`startCmd runs as the template's user, workdir and env; Sandbox.create waits for readyCmd (${took} ms)`)

// A readyCmd that never succeeds fails the creation once sandboxes.ready_timeout (5 s here)
// is over, a start command that fails fails it at once; each says why, and no sandbox is left.
for (const [alias, start, ready, want] of [
  ['sdk-never', 'sleep 3600', 'echo not yet >&2; false',
    /readyCmd 'echo not yet >&2; false' did not succeed within 5\.0 s .*exit status 1, output: not yet$/],
  ['sdk-crash', 'echo broken >&2; exit 3', 'sleep 1; false',
    /the template's start failed: startCmd 'echo broken >&2; exit 3' ended \(exit status 3\)/],
]) {
  await Template.build(Template().fromImage(image, creds).setStartCmd(start, ready), alias)
  let e
  const t1 = Date.now()
  try {
    const s = await Sandbox.create(alias)
    await s.kill()
  } catch (x) {
    e = x
  }
  assert.ok(e, `Sandbox.create('${alias}') succeeded`)
  assert.match(e.message, want, e.message)
  ok(`Sandbox.create('${alias}') fails after ${Date.now() - t1} ms: ${e.message}`)
}
const left = await Sandbox.list().nextItems()
assert.deepEqual(left.filter((s) => s.templateId.startsWith('sdk-')), [], JSON.stringify(left))
ok('... and leaves no sandbox')
console.log(`builds ${built.buildId} ${rebuilt.buildId}`)
