// tests/console/browser.mjs: the web console in Debian's chromium (puppeteer-core, no
// downloaded browser), run by tests/integration/cp_console.sh inside its network namespace.
// Environment: CONSOLE_URL (http://127.0.0.1:PORT), API_KEY, SANDBOX (a running sandbox whose
// metadata is hostile), AUDITOR_KEY (a key of the auditor role), SANDBOX2 (another running
// sandbox, which the auditor must fail to kill), TEMPLATE_BUILD (a build of template tpl-live
// waiting for its definition), POLICY_FILE (the policy e2e, whose test cases are in the
// policies directory's tests/e2e.yaml), SHOTS (a directory for the screenshots). Prints one "ok - ..."
// line per check; the first failure throws (exit 1).
import fs from "node:fs";
import puppeteer from "puppeteer-core";

const base = process.env.CONSOLE_URL;
const key = process.env.API_KEY;
const sandbox = process.env.SANDBOX;
const auditorKey = process.env.AUDITOR_KEY;
const sandbox2 = process.env.SANDBOX2;
const shots = process.env.SHOTS;
const auditFile = process.env.AUDIT_FILE;
const sandboxLog = process.env.SANDBOX_LOG; // SANDBOX's agent log
const templateBuild = process.env.TEMPLATE_BUILD; // the build of template tpl-live, waiting
const policyFile = process.env.POLICY_FILE; // the policy e2e's file, edited to see a reload
const origin = new URL(base).origin;
const T = 30000; // every wait is bounded

function ok(cond, what) {
  if (!cond) throw new Error(`FAIL - ${what}`);
  console.log(`ok - ${what}`);
}

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox", // root in a test namespace; the page under test is ours
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--no-proxy-server",
  ],
});
let failed = false;
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(T);
  const foreign = [];
  const errors = [];
  page.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith(origin + "/") && !u.startsWith("data:")) foreign.push(u);
  });
  page.on("pageerror", (e) => errors.push(String(e)));
  // Refusals the checks provoke, the browser's own favicon request, and the audit log that a
  // world without airlock-egress does not have are answers, not errors.
  const expected = /\/favicon\.ico$|\/admin\/audit(\/verify)?(\?|$)/;
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const u = m.location()?.url || "";
    if (/status of (401|403)/.test(m.text()) || (/status of 404/.test(m.text()) && expected.test(u))) return;
    // The explain of a URL that is refused on purpose.
    if (/status of 400/.test(m.text()) && /\/admin\/policies\/[^/]+\/explain\?/.test(u)) return;
    // The vault secret with a bad name, refused on purpose.
    if (/status of 400/.test(m.text()) && /\/admin\/vault\//.test(u)) return;
    // The auditor's terminal, refused on purpose (the browser logs the refused upgrade).
    if (/WebSocket connection to .*\/terminal.* failed/.test(m.text())) return;
    errors.push(`${m.text()} (${u})`);
  });
  page.on("dialog", (d) => d.accept());

  // Sign-in: a wrong key is refused, the right one opens the console.
  await page.goto(`${base}/console/`, { waitUntil: "load" });
  await page.waitForSelector("#signin");
  await page.type("#apikey", "e2b_0000000000000000000000000000000000000000");
  await page.click("#signin button[type=submit]");
  await page.waitForFunction(() => document.querySelector("[data-testid=signin-error]")?.textContent.includes("invalid API key"));
  ok(true, "a wrong key is refused with the API's reason");
  await page.screenshot({ path: `${shots}/signin.png`, fullPage: true });
  await page.type("#apikey", key);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("[data-testid=backend]");
  ok((await page.$eval("[data-testid=backend]", (e) => e.textContent)) === "test", "overview: the backend");
  const cookies = await browser.cookies();
  const c = cookies.find((x) => x.name === "airlock_console");
  ok(c && c.httpOnly && c.sameSite === "Strict", "the session cookie is HttpOnly and SameSite=Strict");
  ok(await page.evaluate(() => !document.cookie.includes("airlock_console")), "the page's script cannot read it");
  await page.screenshot({ path: `${shots}/overview.png`, fullPage: true });

  // Overview charts: each creation is in the latency chart (a point per bucket of 10 s, its
  // title saying how many and how long); one more creation adds one; no airlock-egress in this
  // world, which the egress chart's place says.
  const charted = () => page.$$eval("[data-testid=chart-create] [data-testid=series-s-mean] circle title",
    (ts) => ts.reduce((n, t) => n + Number((/: (\d+) creations?, mean [\d.]+ m?s, max [\d.]+ m?s$/.exec(t.textContent) || [0, NaN])[1]), 0));
  await page.waitForSelector("[data-testid=chart-create] [data-testid=chart-point]");
  const before = await charted();
  ok(before >= 2, `overview: the creations so far are charted (${before})`);
  ok(await page.$("[data-testid=chart-create] [data-testid=series-s-max] circle"), "overview: their largest too");
  ok(await page.$("[data-testid=chart-egress-none]") && !(await page.$("[data-testid=chart-egress]")), "overview: no egress chart without airlock-egress, and why");
  const extra = await page.evaluate(async () => {
    const s = await (await fetch("/console/api/session")).json();
    const r = await fetch("/sandboxes", { method: "POST", headers: { "Content-Type": "application/json", "X-Airlock-CSRF": s.csrfToken }, body: '{"templateID":"base"}' });
    return (await r.json()).sandboxID;
  });
  ok(extra, "a sandbox created from the page");
  await page.waitForFunction((n) => {
    const ts = [...document.querySelectorAll("[data-testid=chart-create] [data-testid=series-s-mean] circle title")];
    return ts.reduce((a, t) => a + Number((/: (\d+) creations?,/.exec(t.textContent) || [0, 0])[1]), 0) === n;
  }, { timeout: 20000 }, before + 1);
  ok(true, "overview: the chart shows it at its next redrawing (every 10 s)");
  await page.screenshot({ path: `${shots}/overview-charts.png`, fullPage: true });
  const killed = await page.evaluate(async (id) => {
    const s = await (await fetch("/console/api/session")).json();
    return (await fetch(`/sandboxes/${id}`, { method: "DELETE", headers: { "X-Airlock-CSRF": s.csrfToken } })).status;
  }, extra);
  ok(killed === 204, "and killed");

  // The egress chart's drawing, in a second tab of the same session whose
  // /admin/overview/series is answered here (this world has no airlock-egress to count
  // decisions; test_cp_series checks the series airlockd computes): two runs of buckets with a
  // gap between them, so each series is two lines, a point per bucket where its value is, on
  // a scale whose top is the smallest round number over the largest value, each point's title
  // saying what it holds.
  const cpage = await browser.newPage();
  cpage.on("pageerror", (e) => errors.push(String(e)));
  cpage.on("request", (r) => {
    if (!r.url().startsWith(origin + "/")) foreign.push(r.url());
  });
  const from = Math.floor(Date.now() / 10000) * 10 - 3590;
  const offs = [100, 110, 120, 200, 210]; // seconds after `from`: 130..190 missing
  const counts = { connectionAllow: [4, 8, 2, 5, 5], connectionDeny: [0, 1, 0, 3, 0], httpDeny: [0, 0, 2, 0, 1], dnsDeny: [1, 0, 0, 0, 0] };
  const fake = {
    bucketSeconds: 10, buckets: 360, fromUnix: from, toUnix: from + 3600, create: [], egressProxy: true,
    egress: offs.map((o, i) => ({ timestamp: new Date((from + o) * 1000).toISOString(), timestampUnix: from + o, samples: 2,
      connectionAllow: counts.connectionAllow[i], connectionDeny: counts.connectionDeny[i], httpDeny: counts.httpDeny[i], dnsDeny: counts.dnsDeny[i] })),
  };
  await cpage.setRequestInterception(true);
  cpage.on("request", (r) => {
    if (new URL(r.url()).pathname === "/admin/overview/series") r.respond({ status: 200, contentType: "application/json", body: JSON.stringify(fake) });
    else r.continue();
  });
  await cpage.goto(`${base}/console/#/overview`);
  await cpage.waitForSelector("[data-testid=chart-egress] [data-testid=chart-point]");
  const drawn = await cpage.evaluate(() => {
    const chart = document.querySelector("[data-testid=chart-egress]");
    const series = {};
    for (const g of chart.querySelectorAll("g.series")) {
      series[g.dataset.testid] = {
        lines: [...g.querySelectorAll("polyline")].map((l) => l.getAttribute("points").split(" ").length),
        points: [...g.querySelectorAll("circle")].map((c) => ({ x: Number(c.getAttribute("cx")), y: Number(c.getAttribute("cy")), title: c.querySelector("title").textContent })),
        linePts: [...g.querySelectorAll("polyline")].flatMap((l) => l.getAttribute("points").split(" ")),
      };
    }
    return { series, axis: [...chart.querySelectorAll("text.axis")].map((t) => t.textContent), legend: [...chart.querySelectorAll(".legend .key")].map((k) => k.textContent) };
  });
  const keys = [["connectionAllow", "s-allow", "connections allowed"], ["connectionDeny", "s-deny", "connections denied"], ["httpDeny", "s-http", "HTTP requests denied"], ["dnsDeny", "s-dns", "DNS queries denied"]];
  // The drawing's frame (main.js: 640 x 190, margins 58, 14, 10, 26); the scale's top is 10 (max 8).
  const px = (o) => 58 + ((o + 5) / 3600) * (640 - 58 - 14), py = (v) => 10 + (1 - v / 10) * (190 - 10 - 26);
  const hhmmss = (t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  for (const [k, cls, name] of keys) {
    const sr = drawn.series[`series-${cls}`];
    ok(sr && sr.lines.length === 2 && sr.lines[0] === 3 && sr.lines[1] === 2, `egress chart, ${name}: two lines, broken at the missing buckets (${sr && JSON.stringify(sr.lines)})`);
    ok(sr.points.length === 5 && sr.points.every((p, i) => Math.abs(p.x - px(offs[i])) < 0.2 && Math.abs(p.y - py(counts[k][i])) < 0.2),
      `egress chart, ${name}: a point per bucket at its time and value (${JSON.stringify(sr.points.map((p) => [p.x, p.y]))})`);
    ok(sr.points.every((p, i) => p.title === `${hhmmss(from + offs[i])}: ${counts[k][i]} ${name}`), `egress chart, ${name}: each point's title says what it holds (${sr.points[1].title})`);
    ok(sr.linePts.every((xy, i) => { const [x, y] = xy.split(",").map(Number); return Math.abs(x - sr.points[i].x) < 0.2 && Math.abs(y - sr.points[i].y) < 0.2; }),
      `egress chart, ${name}: its lines go through its points`);
  }
  ok(JSON.stringify(drawn.axis.slice(0, 3)) === '["0","5","10"]', `egress chart: the scale is 0, 5, 10 (${drawn.axis.join(", ")})`);
  ok(JSON.stringify(drawn.legend) === JSON.stringify(keys.map((x) => x[2])), `egress chart: its legend (${drawn.legend.join(", ")})`);
  ok(await cpage.$("[data-testid=chart-create-none]"), "overview: no creation in the answered hour, which the page says");
  await cpage.screenshot({ path: `${shots}/overview-egress-chart.png`, fullPage: true });
  await cpage.close();

  // Sandboxes: the hostile metadata is text, nothing of it runs.
  await page.goto(`${base}/console/#/sandboxes`);
  await page.waitForFunction((id) => [...document.querySelectorAll("[data-testid=sandbox-row]")].some((r) => r.textContent.includes(id)), {}, sandbox);
  ok(true, "the sandboxes page lists the created sandbox");
  const md = await page.$$eval("[data-testid=metadata]", (els) => els.map((e) => e.textContent).join("\n"));
  ok(md.includes('note=<img src=x onerror="window.__pwned=1">'), "an <img onerror> in metadata shows as text");
  ok(md.includes("tag=\"><script>window.__pwned=2</script>"), "a <script> in metadata shows as text");
  ok(md.includes("bidi=abc[U+202E]dcba") && !md.includes("\u202E"), "a bidi control is shown as a visible mark, not obeyed");
  ok(await page.evaluate(() => document.querySelectorAll("main img, main script").length === 0), "no element was made from it");
  ok(await page.evaluate(() => window.__pwned === undefined), "nothing of it ran");
  await page.screenshot({ path: `${shots}/sandboxes.png`, fullPage: true });

  // A state-changing request without the CSRF token is refused, with the cookie.
  const csrf = await page.evaluate(async () => {
    const r = await fetch("/v2/sandboxes", { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"templateID":"base"}' });
    return [r.status, (await r.json()).message];
  });
  ok(csrf[0] === 403 && csrf[1].includes("X-Airlock-CSRF"), "a POST with the cookie and no CSRF token: 403");

  // The detail page, then kill (confirmed).
  await page.goto(`${base}/console/#/sandboxes/${sandbox}`);
  await page.waitForSelector("[data-testid=metadata-value]");
  const vals = await page.$$eval("[data-testid=metadata-value]", (els) => els.map((e) => e.textContent));
  ok(vals.includes('<img src=x onerror="window.__pwned=1">'), "the detail shows the metadata as text");
  // Its logs, live: lines the agent writes now (appended here in its layout: JSON lines, or
  // plain text) appear at the bottom, hostile ones as text.
  await page.waitForFunction(() => document.querySelector("[data-testid=logs-status]")?.textContent.includes("Following"));
  const logLine = (o) => fs.appendFileSync(sandboxLog, (typeof o === "string" ? o : JSON.stringify({ time: new Date().toISOString(), ...o })) + "\n");
  logLine({ level: "info", msg: "live line one" });
  logLine({ level: "error", msg: "<img src=x onerror=window.__pwned=8>", pid: 7 });
  logLine("plain \"><script>window.__pwned=9</script> abc\u202edcba");
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid=log-message]")].some((m) => m.textContent.includes("<script>window.__pwned=9")));
  const logs = await page.$$eval("[data-testid=log-row]", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)));
  const li = logs.findIndex((c) => c[2] === "live line one");
  ok(li >= 0 && logs[li + 1][1] === "error" && logs[li + 1][2] === "<img src=x onerror=window.__pwned=8>" && logs[li + 1][3] === "pid=7" &&
    logs[li + 2][2] === "plain \"><script>window.__pwned=9</script> abc[U+202E]dcba" && li + 2 === logs.length - 1,
  `sandbox logs live: new lines at the bottom, in order, level and fields, hostile text as text (${JSON.stringify(logs.slice(li))})`);
  ok(await page.evaluate(() => document.querySelectorAll("main img, main script").length === 0 && window.__pwned === undefined), "sandbox logs live: nothing of them ran");
  // Its resources: CPU, memory and disk charts over airlockd's samples of it (the test
  // backend's come from /proc), a point per sample whose title says what it holds.
  await page.waitForSelector("[data-testid=chart-cpu] [data-testid=chart-point]", { timeout: 60000 });
  const res = await page.evaluate(async (id) => {
    const m = await (await fetch(`/sandboxes/${id}/metrics`)).json();
    const titles = (c, s) => [...document.querySelectorAll(`[data-testid=${c}] [data-testid=series-${s}] circle title`)].map((t) => t.textContent);
    return { m, cpu: titles("chart-cpu", "s-mean"), mem: titles("chart-mem", "s-mean"), limit: titles("chart-mem", "s-max"), disk: titles("chart-disk", "s-mean") };
  }, sandbox);
  const s0 = res.m[0];
  ok(res.cpu.length >= 1 && res.cpu.length <= res.m.length && res.mem.length === res.cpu.length && res.disk.length === res.cpu.length && res.limit.length === res.cpu.length,
    `sandbox resources: CPU, memory (and its limit) and disk charted, a point per sample (${res.cpu.length} of ${res.m.length})`);
  ok(res.cpu[0].endsWith(`: ${s0.cpuUsedPct.toFixed(1)}% of ${s0.cpuCount} vCPU`) && / used of /.test(res.mem[0]) && / used of /.test(res.disk[0]),
    `sandbox resources: each point's title says what the sample holds (${res.cpu[0]}; ${res.mem[0]}; ${res.disk[0]})`);
  await page.screenshot({ path: `${shots}/sandbox.png`, fullPage: true });
  const [kill] = await page.$$("xpath/.//button[contains(., 'Kill')]");
  await kill.click();
  await page.waitForFunction(() => location.hash === "#/sandboxes");
  await page.waitForFunction((id) => document.querySelector("table") && ![...document.querySelectorAll("[data-testid=sandbox-row]")].some((r) => r.textContent.includes(id)), {}, sandbox);
  ok(true, "kill: the sandbox is gone from the list");

  // Templates: the list (what each is made from), a template's builds, and a build's log
  // live: the page follows a build that waits for its definition, which is sent now (as the
  // SDK sends it); its entries appear in order at the bottom, a hostile one as text, the
  // status turns ready and the stream says the log ends there.
  await page.goto(`${base}/console/#/templates`);
  await page.waitForSelector("[data-testid=template-row]");
  const trows = await page.$$eval("[data-testid=template-row]", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)));
  ok(trows.some((c) => c[0] === "mini" && c[1] === "ready" && c[2] === "image registry.test/mini:1" && c[5] === "2.0 KiB"),
    `templates: mini listed, ready, the image it was pulled from and its size (${JSON.stringify(trows)})`);
  ok(trows.some((c) => c[0] === "tpl-live" && c[1] === "waiting" && c[2] === "—"), "templates: tpl-live listed, waiting for its definition");
  await page.screenshot({ path: `${shots}/templates.png`, fullPage: true });
  await page.goto(`${base}/console/#/templates/tpl-live`);
  await page.waitForSelector("[data-testid=build-row] a");
  await page.click("[data-testid=build-row] a");
  await page.waitForFunction(() => document.querySelector("[data-testid=build-log-status]")?.textContent.includes("Following"));
  ok((await page.$eval("[data-testid=build-state]", (e) => e.textContent)) === "waiting" && !(await page.$("[data-testid=build-log-row]")),
    "build page: waiting, no entries yet, following its log");
  const hostileUser = "<img src=x onerror=window.__pwned=10>\u202e";
  const trig = await fetch(`${base}/v2/templates/tpl-live/builds/${templateBuild}`, {
    method: "POST", headers: { "X-API-KEY": key, "Content-Type": "application/json" },
    body: JSON.stringify({ fromTemplate: "mini", steps: [{ type: "ENV", args: ["APP_ENV", "prod"] }, { type: "USER", args: [hostileUser] }] }),
  });
  ok(trig.status === 202, `the build's definition is sent (${trig.status})`);
  await page.waitForFunction(() => document.querySelector("[data-testid=build-log-status]")?.textContent.includes("The log ended"));
  const blog = await page.$$eval("[data-testid=build-log-row]", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)));
  const msgs = blog.map((c) => c[3]);
  ok(msgs[0].startsWith(`build ${templateBuild} of template tpl-live: from template mini, 2 steps`) &&
    msgs.some((m) => m === "the files of template mini") && msgs.indexOf("ENV: 1 variable") < msgs.indexOf("USER <img src=x onerror=window.__pwned=10>[U+202E]") &&
    msgs[msgs.length - 1].startsWith("template tpl-live is ready"),
  `build log live: its entries in order, the hostile one as text (${JSON.stringify(msgs)})`);
  ok(await page.evaluate(() => document.querySelectorAll("main img").length === 0 && window.__pwned === undefined), "build log live: nothing of it ran");
  ok((await page.$eval("[data-testid=build-state]", (e) => e.textContent)) === "ready" &&
    (await page.$eval("[data-testid=build-log-status]", (e) => e.textContent)).includes("the build is ready"),
  "build page: the status turned ready, and the stream says the log ends there");
  await page.screenshot({ path: `${shots}/template-build.png`, fullPage: true });
  // Opened again once it is over: the whole log, and its end.
  await page.reload();
  await page.waitForFunction(() => document.querySelector("[data-testid=build-log-status]")?.textContent.includes("The log ended"));
  ok((await page.$$eval("[data-testid=build-log-row]", (rs) => rs.length)) === blog.length, "build page of an ended build: the whole log, then its end");
  await page.goto(`${base}/console/#/templates`);
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid=template-row]")].some((r) => r.children[0].textContent === "tpl-live" && r.children[1].textContent === "ready"));
  const tl = await page.$$eval("[data-testid=template-row]", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)).find((c) => c[0] === "tpl-live"));
  ok(tl[2] === "template mini" && /^\d+ ms$|^[\d.]+ s$/.test(tl[3]) && tl[4] === "1", `templates: tpl-live ready, made from template mini, its build time (${tl.join(" | ")})`);

  // Audit: the page answers (with the records, or why there are none).
  await page.goto(`${base}/console/#/audit`);
  await page.waitForSelector("#verify");
  await page.click("#verify");
  await page.waitForFunction(() => {
    const v = document.querySelector("[data-testid=verify]");
    return v && (v.querySelector("[data-testid=verdict]") || v.querySelector("[data-testid=error]"));
  });
  ok(true, "audit: verification answers");
  await page.screenshot({ path: `${shots}/audit.png`, fullPage: true });

  // Audit, live: the page follows the log with its filter; a record written now appears on
  // top, as text, and one the filter leaves out does not. cp_console.sh's world has no
  // airlock-egress: this appends records to the log file as the log's writer lays them out.
  const appendRecord = (seq, fields) =>
    fs.appendFileSync(auditFile, JSON.stringify({ seq, time: new Date().toISOString(), type: "http_request", sandbox: sandbox2, ...fields }) + "\n");
  await page.goto(`${base}/console/#/audit?decision=deny&live=1`);
  await page.waitForFunction(() => document.querySelector("[data-testid=live-status]")?.textContent.includes("Following"));
  appendRecord(2, { decision: "allow", reason: "rule_allows", rule: "web", host: "live-allow.test", path: "/ok" });
  appendRecord(3, { decision: "deny", reason: "path_not_allowed", rule: "web", host: "<img src=x onerror=window.__pwned=6>.test", path: "/live-deny" });
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid=audit-row]")].some((r) => r.textContent.includes("/live-deny")));
  const liveRow = await page.$$eval("[data-testid=audit-row]", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)).find((c) => c.includes("/live-deny")));
  ok(liveRow[4] === "deny" && liveRow[5] === "path_not_allowed" && liveRow[6] === "web" && liveRow[7] === "<img src=x onerror=window.__pwned=6>.test",
    `audit live: the denial appears with its rule and reason, its host as text (${liveRow.join(" | ")})`);
  ok(await page.evaluate(() => document.querySelectorAll("main img").length === 0 && window.__pwned === undefined), "audit live: nothing of the host ran");
  appendRecord(4, { decision: "deny", reason: "no_rule_matched", rule: null, host: "after.test", path: "/after" });
  await page.waitForFunction(() => document.querySelector("[data-testid=audit-row]")?.textContent.includes("/after"));
  ok(!(await page.$$eval("[data-testid=audit-row]", (rs) => rs.some((r) => r.textContent.includes("live-allow.test")))),
    "audit live: the filter (deny) leaves the allowed record out, and the newest is on top");
  await page.screenshot({ path: `${shots}/audit-live.png`, fullPage: true });

  // Audit export: the page's links download what its filters select, as JSONL (the log's lines
  // as written) and as OCSF events (the CLI's mapping); the filters also narrow the listing.
  await page.goto(`${base}/console/#/audit?decision=deny`);
  await page.waitForSelector("[data-testid=export-jsonl]");
  const links = await page.$$eval("[data-testid=export] a", (as) => as.map((a) => [a.getAttribute("href"), a.hasAttribute("download")]));
  ok(links.length === 2 && links[0][0] === "/admin/audit/export?decision=deny&format=jsonl" && links[1][0] === "/admin/audit/export?decision=deny&format=ocsf" && links.every((l) => l[1]),
    `audit export: a JSONL and an OCSF download with the page's filters (${JSON.stringify(links)})`);
  const fetchText = (u) => page.evaluate(async (u) => {
    const r = await fetch(u);
    return { status: r.status, type: r.headers.get("content-type"), disposition: r.headers.get("content-disposition"), text: await r.text() };
  }, u);
  const logLines = fs.readFileSync(auditFile, "utf8").split("\n").filter(Boolean);
  const denied = logLines.filter((l) => JSON.parse(l).decision === "deny");
  const jl = await fetchText(links[0][0]);
  ok(jl.status === 200 && jl.type.startsWith("application/x-ndjson") && /^attachment; filename="airlock-audit-.*\.jsonl"$/.test(jl.disposition),
    `audit export: JSONL is a download (${jl.status} ${jl.type}; ${jl.disposition})`);
  ok(jl.text === denied.join("\n") + "\n", `audit export: JSONL holds the denied records, each line as the log has it (${jl.text.split("\n").length - 1} of ${logLines.length})`);
  const oc = await fetchText(links[1][0]);
  const events = oc.text.split("\n").filter(Boolean).map((l) => JSON.parse(l));
  ok(oc.status === 200 && /\.ocsf\.jsonl"$/.test(oc.disposition) && events.length === denied.length, `audit export: one OCSF event per denied record (${events.length})`);
  ok(events.every((e, i) => {
    const r = JSON.parse(denied[i]);
    return e.class_uid === 4002 && e.category_uid === 4 && e.action_id === 2 && e.disposition_id === 2 && e.status_detail === r.reason &&
      e.metadata.sequence === r.seq && e.metadata.version === "1.1.0" && e.metadata.product.name === "airlock" && e.unmapped.host === r.host &&
      (r.rule ? e.firewall_rule.name === r.rule : true) && e.http_request.url.hostname === r.host;
  }), `audit export: the OCSF fields (HTTP Activity, denied, the reason, rule, host and seq) (${JSON.stringify(events[events.length - 1]).slice(0, 300)})`);
  await page.$eval("#filter-host", (e) => { e.value = "after.test"; });
  await page.click("#audit-filters button[type=submit]");
  await page.waitForFunction(() => location.hash.includes("host=after.test") && document.querySelector("[data-testid=export-jsonl]")?.getAttribute("href").includes("host=after.test"));
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid=audit-row]")].length === 1);
  ok((await page.$eval("[data-testid=audit-row]", (r) => r.textContent)).includes("after.test"), "audit: the host filter narrows the listing and the export");
  await page.screenshot({ path: `${shots}/audit-export.png`, fullPage: true });

  // Policies: the list, a policy's YAML with each finding on its line (and a hostile string in
  // it as text), the sandboxes using one, and explain (a decision, its rule and why).
  await page.goto(`${base}/console/#/policies`);
  await page.waitForSelector("[data-testid=policy-row]");
  const prows = await page.$$eval("[data-testid=policy-row]", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)));
  const e2eRow = prows.find((c) => c[0] === "e2e");
  const brokenRow = prows.find((c) => c[0] === "broken");
  ok(e2eRow && e2eRow[1] === "valid" && e2eRow[2] === "enforce" && e2eRow[3] === "1", `policies: e2e listed, valid, one rule (${e2eRow})`);
  ok(brokenRow && brokenRow[1] === "2 errors, 0 warnings", `policies: broken listed with its errors (${brokenRow})`);
  await page.screenshot({ path: `${shots}/policies.png`, fullPage: true });
  await page.goto(`${base}/console/#/policies/broken`);
  await page.waitForSelector("[data-testid=finding]");
  const listing = await page.$$eval("[data-testid=yaml] tr", (rs) => rs.map((r) => [r.dataset.testid, r.className, ...[...r.children].map((c) => c.textContent)]));
  const fi = listing.findIndex((r) => r[0] === "finding" && r[3].includes("7:5: error: unknown key 'hostz'"));
  ok(fi > 0 && listing[fi - 1][2] === "7" && listing[fi - 1][1].includes("marked") && listing[fi - 1][3].includes("hostz:"),
    `a policy's lint finding is shown under the line and column it names (${fi > 0 ? listing[fi].slice(3) : listing.map((r) => r[3]).join(" / ")})`);
  ok(listing.some((r) => r[0] === "yaml-line" && r[3] === 'description: "<img src=x onerror=window.__pwned=7>"'), "the policy's YAML is shown as text");
  ok(await page.evaluate(() => document.querySelectorAll("main img").length === 0 && window.__pwned === undefined), "nothing of the YAML ran");
  ok(await page.$eval("#explain button[type=submit]", (b) => b.disabled), "a policy with errors offers no explain");
  await page.screenshot({ path: `${shots}/policy-broken.png`, fullPage: true });
  const users = await page.evaluate(async () => (await (await fetch("/admin/policies")).json()).policies);
  const used = users.find((p) => p.sandboxes.some((s) => s.sandboxID === sandbox2));
  await page.goto(`${base}/console/#/policies/${used ? used.name : "none"}`);
  await page.waitForFunction((id) => [...document.querySelectorAll("[data-testid=policy-sandbox]")].some((r) => r.textContent.includes(id)), {}, sandbox2);
  ok(true, `a policy's page lists the sandboxes using it (${used && used.name})`);
  // A policy's page, once it shows that policy (the previous page's form is gone).
  const openPolicy = async (name) => {
    await page.goto(`${base}/console/#/policies/${name}`);
    await page.waitForFunction((n) => document.querySelector("main h1")?.textContent === `Policy ${n}` && document.querySelector("#explain-url"), {}, name);
  };
  await openPolicy("e2e");
  const explain = async (url) => {
    await page.$eval("#explain-url", (e) => { e.value = ""; });
    await page.type("#explain-url", url);
    await page.evaluate(() => document.querySelector("[data-testid=explain-out]").replaceChildren());
    await page.click("#explain button[type=submit]");
    await page.waitForFunction(() => document.querySelector("[data-testid=explain-result], [data-testid=explain-out] [data-testid=error]"));
    return page.evaluate(() => {
      const t = (id) => document.querySelector(`[data-testid=${id}]`)?.textContent;
      return { decision: t("explain-decision"), rule: t("explain-rule"), reason: t("explain-reason"), why: t("explain-why"), error: document.querySelector("[data-testid=explain-out] [data-testid=error]")?.textContent };
    });
  };
  let x = await explain("http://allowed.test/x");
  ok(x.decision === "allow" && x.rule === "web (line 5)" && x.reason === "rule_allows" && x.why.includes("web"),
    `explain: http://allowed.test/x is allowed by rule web, and why (${JSON.stringify(x)})`);
  x = await explain("http://allowed.test:8080/x");
  ok(x.decision === "deny" && x.rule === "web (line 5)" && x.reason === "port_not_allowed", `explain: another port is denied, naming the rule (${x.reason}: ${x.why})`);
  x = await explain("<b>evil</b>.test:22");
  ok(x.error && x.error.includes("'<b>evil</b>.test:22': the host is neither a name"), `explain: a hostile host is refused, quoted as text (${x.error})`);
  x = await explain("ftp://allowed.test/");
  ok(x.error && x.error.includes("unsupported URL scheme"), `explain: a URL it cannot read is refused with why (${x.error})`);
  ok(await page.evaluate(() => document.querySelectorAll("main b, main img").length === 0), "explain: nothing of the input became markup");
  await page.screenshot({ path: `${shots}/policy.png`, fullPage: true });

  // Its test cases (tests/e2e.yaml), run as `airlock policy test` runs them: each case's
  // expectation beside the decision and its rule, a failing one saying why, names as text.
  await page.waitForSelector("[data-testid=tests-summary]");
  const tsum = await page.$eval("[data-testid=tests-summary]", (e) => e.textContent);
  ok(tsum.startsWith("3 cases: 2 passed, 1 failed"), `policy tests: the summary (${tsum})`);
  const tcases = await page.$$eval("[data-testid=test-case]", (rs) => rs.map((r) => Object.fromEntries([...r.querySelectorAll("[data-testid]")].map((c) => [c.dataset.testid, c.textContent]))));
  const tc = (n) => tcases.find((c) => c["test-name"].startsWith(n)) || {};
  ok(tc("reads the site")["test-result"] === "pass" && tc("reads the site")["test-expected"] === "allow, rule web" &&
    tc("reads the site")["test-actual"] === "allow, rule web (line 5), rule_allows", `policy tests: a passing case, expected and actual (${JSON.stringify(tc("reads the site"))})`);
  ok(tc("another port")["test-result"] === "FAIL" && tc("another port")["test-expected"] === "allow" &&
    tc("another port")["test-actual"] === "deny, rule web (line 5), port_not_allowed" && tc("another port")["test-why"].startsWith("expected allow, got deny"),
  `policy tests: a failing case says what it expected and got (${JSON.stringify(tc("another port"))})`);
  ok(tc("<img src=x onerror=window.__pwned=12>")["test-result"] === "pass", "policy tests: a hostile case name is shown as text");
  ok(await page.evaluate(() => document.querySelectorAll("main img").length === 0 && window.__pwned === undefined), "policy tests: nothing of the cases ran");
  await page.screenshot({ path: `${shots}/policy-tests.png`, fullPage: true });

  // Its reloads: airlockd's first reading; the file edited and read again from the page (an
  // admin's reload), recorded with the key, the hash before and after and the lint result.
  const hashOf = () => page.evaluate(async () => (await (await fetch("/admin/policies/e2e")).json()).hash);
  const h1 = await hashOf();
  await page.waitForSelector("[data-testid=reload-row]");
  const reloadRowsNow = () => page.$$eval("[data-testid=reload-row]", (rs) => rs.map((r) => Object.fromEntries([...r.querySelectorAll("[data-testid]")].map((c) => [c.dataset.testid, c.textContent]))));
  let rl = await reloadRowsNow();
  ok(rl.length === 1 && rl[0]["reload-trigger"] === "airlockd started" && rl[0]["reload-before"] === "(first reading)" && rl[0]["reload-after"] === h1.slice(0, 16) && rl[0]["reload-lint"] === "valid",
    `policy reloads: airlockd's first reading (${JSON.stringify(rl)})`);
  fs.appendFileSync(policyFile, "  - name: added\n    hosts: [added.test]\n");
  const myKey = await page.evaluate(async () => (await (await fetch("/console/api/session")).json()).keyId);
  await page.click("#reload-policies");
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=reload-row]").length === 2);
  const h2 = await hashOf();
  rl = await reloadRowsNow();
  ok(h2 !== h1 && rl[0]["reload-trigger"] === `reload by key ${myKey}` && rl[0]["reload-before"] === h1.slice(0, 16) && rl[0]["reload-after"] === h2.slice(0, 16) && rl[0]["reload-lint"] === "valid",
    `policy reloads: the edit, read again from the page, newest first (${JSON.stringify(rl[0])})`);
  // broken and vaulted were written after airlockd started: their first reading is this one.
  const said = await page.$eval("[data-testid=reload-out]", (e) => e.textContent);
  ok(/^3 changed, \d+ unchanged\.$/.test(said), `policy reloads: the page says what changed (${said})`);
  await page.screenshot({ path: `${shots}/policy-reloads.png`, fullPage: true });
  // The default policies' own cases (deploy/policies/tests/), installed beside them, pass.
  await openPolicy("default");
  await page.waitForSelector("[data-testid=tests-summary]");
  const dsum = await page.$eval("[data-testid=tests-summary]", (e) => e.textContent);
  ok(/^(\d+) cases: \1 passed, 0 failed \(.*\/tests\/default\.yaml\)$/.test(dsum), `policy tests: the default policy's installed cases pass (${dsum})`);

  // Vault: a secret added through the page's write-only field, listed with its version, bound
  // host and the rule that injects it; its value is in no answer and nowhere on the page;
  // rotated, a bad name refused, deleted.
  const value1 = "s3cret-value-one", value2 = "s3cret-value-two";
  const vaultJson = () => page.evaluate(async () => (await fetch("/admin/vault")).text());
  await page.goto(`${base}/console/#/vault`);
  await page.waitForSelector("#vault-create");
  await page.type("#vault-name", "console/token");
  await page.type("#vault-value", value1);
  await page.type("#vault-desc", "<img src=x onerror=window.__pwned=11>");
  await page.type("#vault-hosts", "api.github.test");
  await page.click("#vault-create button[type=submit]");
  await page.waitForFunction(() => document.querySelector("[data-testid=vault-status]")?.textContent.includes("was added"));
  const vrow = async () => page.$$eval("[data-testid=vault-row]", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)).find((c) => c[0] === "console/token"));
  let vr = await vrow();
  ok(vr && vr[1] === "<img src=x onerror=window.__pwned=11>" && vr[2].startsWith("1 ") && vr[3] === "api.github.test" && vr[4] === "vaulted/gh → api.github.test",
    `vault: the secret is listed with its version, bound host and the rule injecting it, its description as text (${vr && vr.join(" | ")})`);
  ok(await page.evaluate(() => document.querySelectorAll("main img").length === 0 && window.__pwned === undefined), "vault: nothing of the description ran");
  const noValue = async (v) => !(await page.evaluate(() => document.body.innerText)).includes(v) && !(await vaultJson()).includes(v) &&
    (await page.$$eval("input", (is, v) => is.every((i) => i.value !== v), v));
  ok(await noValue(value1), "vault: the value is nowhere on the page, in no field and in no answer");
  await page.screenshot({ path: `${shots}/vault.png`, fullPage: true });
  const rotate = await page.$$("xpath/.//tr[contains(., 'console/token')]//form[@data-testid='vault-rotate']//input");
  await rotate[0].type(value2);
  const [rotBtn] = await page.$$("xpath/.//tr[contains(., 'console/token')]//button[contains(., 'Rotate')]");
  await rotBtn.click();
  await page.waitForFunction(() => document.querySelector("[data-testid=vault-status]")?.textContent.includes("is at version 2"));
  vr = await vrow();
  ok(vr[2].startsWith("2 ") && (await noValue(value2)), `vault: rotated to version 2, the new value nowhere either (${vr[2]})`);
  await page.$eval("#vault-name", (e) => { e.value = ""; });
  await page.type("#vault-name", "Not A/Name");
  await page.type("#vault-value", "x");
  await page.click("#vault-create button[type=submit]");
  await page.waitForFunction(() => document.querySelector("[data-testid=vault-status] [data-testid=error]")?.textContent.includes("is not a secret name"));
  ok(true, "vault: a bad name is refused, saying what a name is");
  const [delBtn] = await page.$$("xpath/.//tr[contains(., 'console/token')]//button[contains(., 'Delete')]");
  await delBtn.click();
  await page.waitForFunction(() => document.querySelector("[data-testid=vault-status]")?.textContent.includes("was deleted"));
  ok(!(await vrow()), "vault: deleted, it is gone from the list");
  // One for the auditor to see.
  const kept = await page.evaluate(async () => {
    const s = await (await fetch("/console/api/session")).json();
    return (await fetch("/admin/vault/console/kept", { method: "POST", headers: { "Content-Type": "application/json", "X-Airlock-CSRF": s.csrfToken }, body: '{"value":"kept-value"}' })).status;
  });
  ok(kept === 201, "vault: a secret added through the API the page uses");

  // API keys: create one (shown once), see it listed with its role, revoke it: it stops working.
  await page.goto(`${base}/console/#/keys`);
  await page.waitForSelector("#key-create");
  await page.type("#key-name", "from-console");
  await page.select("#key-role", "auditor");
  await page.click("#key-create button[type=submit]");
  await page.waitForSelector("[data-testid=new-key]");
  const made = await page.$eval("[data-testid=new-key]", (e) => e.textContent);
  ok(/^e2b_[0-9a-f]{40}$/.test(made), "keys: a created key is shown once");
  const row = () => page.$$eval("[data-testid=key-row]", (rs) => rs.map((r) => r.textContent).find((t) => t.includes("from-console")) || "");
  ok((await row()).includes("auditor"), "keys: listed with its role");
  const useKey = (k) => page.evaluate(async (k) => (await fetch("/v2/sandboxes", { headers: { "X-API-KEY": k } })).status, k);
  ok((await useKey(made)) === 200, "keys: the new key works");
  await page.screenshot({ path: `${shots}/keys.png`, fullPage: true });
  const [revoke] = await page.$$("xpath/.//tr[contains(., 'from-console')]//button[contains(., 'Revoke')]");
  await revoke.click();
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid=key-row]")].some((r) => r.textContent.includes("from-console") && r.textContent.includes("revoked")));
  ok((await useKey(made)) === 401, "keys: revoked, it is refused at once");

  // Terminal: a shell in the sandbox through its agent; typed input, its output as text.
  await page.goto(`${base}/console/#/sandboxes/${sandbox2}`);
  await page.waitForSelector("[data-testid=open-terminal]");
  // Its own egress decisions: the latest, then live; another sandbox's are not its.
  await page.waitForFunction(() => document.querySelector("[data-testid=sandbox-audit-status]")?.textContent.includes("Following"));
  const sbRows = () => page.$$eval("[data-testid=sandbox-audit-rows] [data-testid=audit-row]", (rs) => rs.map((r) => r.textContent));
  ok((await sbRows()).some((t) => t.includes("before.test")), "sandbox page: its egress decisions so far");
  appendRecord(5, { sandbox, decision: "deny", reason: "no_rule_matched", host: "other-sandbox.test", path: "/x" });
  appendRecord(6, { decision: "deny", reason: "method_not_allowed", rule: "web", host: "sb-live.test", path: "/sb-live" });
  await page.waitForFunction(() => document.querySelector("[data-testid=sandbox-audit-rows] [data-testid=audit-row]")?.textContent.includes("sb-live.test"));
  ok(!(await sbRows()).some((t) => t.includes("other-sandbox.test")), "sandbox page: a new decision of it appears on top, live; another sandbox's does not");
  await page.click("[data-testid=open-terminal]");
  await page.waitForFunction(() => document.querySelector("[data-testid=term-status]")?.textContent.includes("Connected"));
  await page.focus("[data-testid=terminal]");
  const termLines = () => page.evaluate(() => {
    const back = document.querySelector(".term-scrollback")?.textContent.split("\n") || [];
    return back.concat([...document.querySelectorAll("[data-testid=term-row]")].map((r) => r.textContent)).map((l) => l.trimEnd());
  });
  const waitLine = (want) => page.waitForFunction((want) => {
    const back = document.querySelector(".term-scrollback")?.textContent.split("\n") || [];
    const rows = [...document.querySelectorAll("[data-testid=term-row]")].map((r) => r.textContent);
    return back.concat(rows).some((l) => l.trim() === want);
  }, {}, want);
  await page.keyboard.type("echo hi");
  await page.keyboard.press("Enter");
  await waitLine("hi");
  ok(true, "terminal: typed `echo hi`, `hi` is shown");
  await page.keyboard.type("printf '%s\\n' '<img src=x onerror=window.__pwned=3>' \"\\\"><script>window.__pwned=4</script>\"");
  await page.keyboard.press("Enter");
  await waitLine("<img src=x onerror=window.__pwned=3>");
  await waitLine("\"><script>window.__pwned=4</script>");
  ok(await page.evaluate(() => document.querySelectorAll("main img, main script").length === 0 && window.__pwned === undefined),
    "terminal: hostile output is text, nothing of it ran");
  await page.keyboard.type("stty size");
  await page.keyboard.press("Enter");
  const cols = await page.evaluate(() => document.querySelector("[data-testid=terminal]") && Math.floor(
    (document.querySelector("[data-testid=terminal]").clientWidth - 16) / (document.querySelector(".term-probe").getBoundingClientRect().width / 10)));
  await page.waitForFunction((c) => {
    const rows = [...document.querySelectorAll("[data-testid=term-row]")].map((r) => r.textContent.trim());
    return rows.includes(`24 ${c}`);
  }, {}, Math.max(20, Math.min(1000, cols)));
  ok(true, `terminal: the pty has the page's size (24 x ${cols})`);
  await page.keyboard.type("echo shell=$$");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid=term-row]")].some((r) => /^shell=\d+$/.test(r.textContent.trim())));
  const shellPid = await page.evaluate(() => [...document.querySelectorAll("[data-testid=term-row]")]
    .map((r) => r.textContent.trim()).find((t) => /^shell=\d+$/.test(t)).slice(6));
  await page.screenshot({ path: `${shots}/terminal.png`, fullPage: true });
  await page.click("#term-close");
  await page.waitForFunction(() => document.querySelector("[data-testid=term-status]")?.textContent.includes("Closed"));
  const evs = await page.evaluate(async (id) => (await fetch(`/events/sandboxes/${id}?orderAsc=true&limit=100`)).json(), sandbox2);
  const me = await page.evaluate(async () => (await (await fetch("/console/api/session")).json()).keyId);
  const opened = evs.find((e) => e.type === "sandbox.lifecycle.terminal_opened");
  const closed = evs.find((e) => e.type === "sandbox.lifecycle.terminal_closed");
  ok(opened && opened.eventData.apiKeyId === me && opened.eventData.cols > 0 && String(opened.eventData.pid) === shellPid,
    "terminal: its start is a lifecycle event with the key and the shell's pid");
  console.log(`shell-pid ${shellPid}`); // cp_console.sh checks that the shell is gone
  ok(closed && closed.eventData.terminal === opened.eventData.terminal && closed.eventData.apiKeyId === me &&
    closed.eventData.bytesIn > 0 && !JSON.stringify(evs).includes("echo hi") && !JSON.stringify(evs).includes("pwned"),
  `terminal: its end too (${closed ? closed.eventData.why : "none"}), without what was typed or shown`);

  // Sign-out: the cookie no longer authenticates anything.
  await page.click("#signout");
  await page.waitForSelector("#signin");
  const after = await page.evaluate(async () => (await fetch("/v2/sandboxes")).status);
  ok(after === 401, "after sign-out the API says 401");

  // An auditor key: its role shown, no action on a sandbox offered, and the API refusing the
  // kill the page did not offer, even with the session's CSRF token.
  await page.type("#apikey", auditorKey);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("[data-testid=role]");
  ok((await page.$eval("[data-testid=role]", (e) => e.textContent)) === "auditor", "the auditor's role is shown");
  ok(await page.$eval("nav a[data-page=keys]", (a) => a.hidden), "auditor: no API keys page offered");
  await page.goto(`${base}/console/#/sandboxes/${sandbox2}`);
  await page.waitForSelector("[data-testid=role-note]");
  const buttons = await page.$$eval("main button", (els) => els.map((e) => e.textContent));
  ok(!buttons.some((t) => /Kill|Pause|Resume/.test(t)), `auditor: no kill, pause or resume button (${buttons.join(", ") || "none"})`);
  ok(!(await page.$("[data-testid=open-terminal]")), "auditor: no terminal offered");
  ok(!(await page.$("[data-testid=logs]")), "auditor: no sandbox logs offered (its role has no data plane)");
  await page.screenshot({ path: `${shots}/sandbox-auditor.png`, fullPage: true });
  const wsAuditor = await page.evaluate((id) => new Promise((resolve) => {
    fetch("/console/api/session").then((r) => r.json()).then((s) => {
      const ws = new WebSocket(`ws://${location.host}/console/api/sandboxes/${id}/terminal`, ["airlock.terminal", `csrf.${s.csrfToken}`]);
      ws.onopen = () => { ws.close(); resolve("opened"); };
      ws.onclose = (e) => resolve(`closed ${e.code}`);
    });
  }), sandbox2);
  ok(wsAuditor === "closed 1006", `auditor: airlockd refuses the terminal's upgrade (${wsAuditor})`);
  const refused = await page.evaluate(async (id) => {
    const s = await (await fetch("/console/api/session")).json();
    const r = await fetch(`/sandboxes/${id}`, { method: "DELETE", headers: { "X-Airlock-CSRF": s.csrfToken } });
    return [s.may.killSandbox, r.status, (await r.json()).message];
  }, sandbox2);
  ok(refused[0] === false, "the session says the auditor may not kill");
  ok(refused[1] === 403 && refused[2].includes("has the role auditor"), `auditor: the API refuses the kill (${refused[1]} ${refused[2]})`);
  await page.goto(`${base}/console/#/sandboxes`);
  await page.waitForFunction((id) => [...document.querySelectorAll("[data-testid=sandbox-row]")].some((r) => r.textContent.includes(id)), {}, sandbox2);
  ok(true, "auditor: the sandbox is still listed");
  await page.goto(`${base}/console/#/vault`);
  await page.waitForFunction(() => [...document.querySelectorAll("[data-testid=vault-name]")].some((e) => e.textContent === "console/kept"));
  ok(!(await page.$("#vault-create")) && !(await page.$("[data-testid=vault-rotate]")) && !(await page.$("[data-testid=vault-delete]")),
    "auditor: the vault's names, no add, rotate or delete offered");
  await page.screenshot({ path: `${shots}/vault-auditor.png`, fullPage: true });
  const vaultRefused = await page.evaluate(async () => {
    const s = await (await fetch("/console/api/session")).json();
    const r = await fetch("/admin/vault/console/kept", { method: "PUT", headers: { "Content-Type": "application/json", "X-Airlock-CSRF": s.csrfToken }, body: '{"value":"stolen"}' });
    return [s.may.writeVault, r.status];
  });
  ok(vaultRefused[0] === false && vaultRefused[1] === 403, `auditor: the API refuses its vault write (${vaultRefused[1]})`);
  await page.goto(`${base}/console/#/audit`);
  await page.waitForSelector("#verify");
  ok(true, "auditor: the audit page and its verification are offered");
  ok(await page.$("[data-testid=export-ocsf]"), "auditor: the audit export is offered");
  ok(!(await page.$eval("nav a[data-page=policies]", (a) => a.hidden)), "auditor: the policies page is offered");
  await openPolicy("e2e");
  x = await explain("http://allowed.test/x");
  ok(x.decision === "allow", "auditor: explain answers");
  await page.waitForSelector("[data-testid=reload-row]");
  ok(!(await page.$("#reload-policies")), "auditor: the reloads are shown, reloading is not offered");
  await page.click("#signout");
  await page.waitForSelector("#signin");

  ok(foreign.length === 0, `no request to anything but airlockd (${foreign.join(", ") || "none"})`);
  ok(errors.length === 0, `no script error or CSP violation (${errors.join(" | ") || "none"})`);
} catch (e) {
  failed = true;
  console.log(e.message);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
