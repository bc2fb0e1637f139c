// main.js: the console's pages (hash routes) over airlockd's API.
//   #/overview          backend and why, pools, sandboxes by state, and charts of the last
//                       hour: creation latency, egress decisions (redrawn every 10 s)
//   #/sandboxes         the sandboxes (state filter), each linking to its detail
//   #/sandboxes/<id>    one sandbox: info, metadata, pause, resume, kill, its CPU, memory
//                       and disk (charts, redrawn every 10 s), its logs and its egress
//                       decisions, live
//   #/sandboxes/<id>/terminal  a shell in it (operator and admin), over a WebSocket
//   #/audit             the latest egress decisions (filters), followed live on request, and
//                       the log's verification
//   #/policies          the egress policies: valid or not, findings, sandboxes using each
//   #/policies/<name>   one policy: its YAML with each lint finding on its line, its rules and
//                       sandboxes, and explain (a URL or host:port decided by it, and why)
//   #/templates         the templates: status, what each is made from, build time, builds
//   #/templates/<id>    one template: its builds, each linking to its log
//   #/templates/<id>/builds/<build>  a build: its status and its log, live
//   #/vault             the vault's secrets (names, versions, bound hosts, the policy rules
//                       injecting each; never a value), and (admins) add, rotate, delete
//   #/keys              the API keys (admins): list, create (the key shown once), revoke
// What the signed-in key's role may do comes from the session (`may`, answered by the API's
// own table of routes): actions the role cannot take are not offered. The API refuses them
// anyway; hiding them only keeps the page honest about what will work.
import { api, ApiError, csrfToken, session, signIn, signOut } from "./api.js";
import { h, show, svg, when } from "./dom.js";
import { Terminal } from "./terminal.js";

const view = document.getElementById("view");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const signoutBtn = document.getElementById("signout");
let current = null; // the session
let openTerminal = null; // the terminal page's WebSocket and emulator, closed when it is left
let liveTail = null; // the audit page's EventSource, closed when it is left
let chartsTimer = null; // the redrawing of a page's charts, stopped when it is left
let liveLogs = null; // a sandbox page's EventSource of its logs, closed when it is left
let liveBuild = null; // a build page's EventSource of its log, closed when it is left

// Whether the session's role may take this action (docs/console.md, "Signing in").
function may(action) {
  return Boolean(current && current.may && current.may[action]);
}

function notForRole(what) {
  return h("p", { class: "muted", "data-testid": "role-note" },
    `Your key's role (${current ? current.role : "none"}) cannot ${what}; the API refuses it.`);
}

function problem(e) {
  return h("p", { class: "error", "data-testid": "error" }, e instanceof Error ? e.message : String(e));
}

async function guarded(fn) {
  try {
    await fn();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      current = null;
      renderSignIn(e.message);
      return;
    }
    show(view, problem(e));
  }
}

// ---- sign-in ----------------------------------------------------------------------------

function renderSignIn(message) {
  nav.hidden = true;
  signoutBtn.hidden = true;
  show(who);
  const input = h("input", {
    id: "apikey", type: "password", name: "apikey", autocomplete: "off", spellcheck: "false",
    placeholder: "e2b_…", required: true,
  });
  const status = h("p", { class: "error", "data-testid": "signin-error" }, message || "");
  const form = h("form", { class: "signin panel", id: "signin" },
    h("h1", {}, "Sign in"),
    h("label", { for: "apikey" }, "API key"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    status,
    h("p", { class: "muted" },
      "The key is sent once, to airlockd, and exchanged for a session; it is not stored in this browser."));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      current = await signIn(input.value);
      input.value = "";
      start();
    } catch (e) {
      input.value = "";
      show(status, e.message);
    }
  });
  show(view, form);
  input.focus();
}

signoutBtn.addEventListener("click", async () => {
  try {
    await signOut();
  } catch {
    // the session is gone either way
  }
  current = null;
  location.hash = "#/overview";
  renderSignIn("Signed out.");
});

// ---- overview ---------------------------------------------------------------------------

function card(title, n, ...rest) {
  return h("div", { class: "card" }, h("div", { class: "muted" }, title), h("div", { class: "n" }, n), ...rest);
}

// ---- charts -----------------------------------------------------------------------------
// Line charts of the series airlockd keeps (GET /admin/overview/series: buckets of 10 s over
// the last hour), drawn here as SVG: each series a line through its buckets, broken where
// one is missing (no data is not zero), and a point per bucket whose title says what it
// holds. Everything is an element or a text node (dom.js), styled by console.css.

const CW = 640, CH = 190, ML = 58, MR = 14, MT = 10, MB = 26;

// The smallest of 1, 2, 2.5, 5 x 10^n that is at least v: the chart's top.
function niceTop(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((t) => t >= v);
}

function clock(unix) {
  return new Date(unix * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function ms(v) {
  if (v >= 1000) return `${(v / 1000).toFixed(v >= 10000 ? 0 : 1)} s`;
  return v < 10 && !Number.isInteger(v) ? `${v.toFixed(1)} ms` : `${Math.round(v)} ms`;
}

// series: [{name, cls, points: [{t, v, label}]}], t the bucket's start (unix seconds), drawn
// at the bucket's middle; a line breaks where two points are more than `gap` apart (a bucket
// missing: `step`). Samples taken at instants pass at: 0.
function chart({ testid, caption, from, to, step, series, format, gap = step, at = step / 2, round = niceTop }) {
  const top = round(Math.max(0, ...series.flatMap((s) => s.points.map((p) => p.v))));
  const x = (t) => (ML + ((t - from) / (to - from)) * (CW - ML - MR)).toFixed(1);
  const y = (v) => (MT + (1 - v / top) * (CH - MT - MB)).toFixed(1);
  const grid = [0, 0.5, 1].map((f) => [
    svg("line", { class: "grid", x1: ML, x2: CW - MR, y1: y(top * f), y2: y(top * f) }),
    svg("text", { class: "axis", x: ML - 6, y: y(top * f), "text-anchor": "end", "dominant-baseline": "middle" }, format(top * f)),
  ]);
  const ticks = [[from, "start"], [(from + to) / 2, "middle"], [to, "end"]].map(([t, anchor]) =>
    svg("text", { class: "axis", x: x(t), y: CH - 6, "text-anchor": anchor }, clock(t)));
  const drawn = series.map((s) => {
    const runs = [];
    let prev = null;
    for (const p of s.points) {
      if (!prev || p.t - prev.t > gap) runs.push([]);
      runs[runs.length - 1].push(p);
      prev = p;
    }
    return svg("g", { class: `series ${s.cls}`, "data-testid": `series-${s.cls}` },
      runs.filter((r) => r.length > 1).map((r) =>
        svg("polyline", { points: r.map((p) => `${x(p.t + at)},${y(p.v)}`).join(" ") })),
      // Dense series are mostly their line: smaller points keep it readable.
      s.points.map((p) => svg("circle", { cx: x(p.t + at), cy: y(p.v), r: s.points.length > 60 ? 1.3 : 2.5, "data-testid": "chart-point" },
        svg("title", {}, p.label))));
  });
  return h("figure", { class: "chart panel", "data-testid": testid },
    h("figcaption", {}, caption),
    svg("svg", { viewBox: `0 0 ${CW} ${CH}`, role: "img", "aria-label": caption }, grid, ticks, drawn),
    h("div", { class: "legend" }, series.map((s) => h("span", { class: `key ${s.cls}` }, s.name))));
}

function createChart(c) {
  const pts = (f) => c.create.map((b) => ({
    t: b.timestampUnix, v: f(b),
    label: `${clock(b.timestampUnix)}: ${b.count} creation${b.count === 1 ? "" : "s"}, mean ${ms(b.meanMs)}, max ${ms(b.maxMs)}`,
  }));
  return chart({
    testid: "chart-create", caption: `Create latency (time to a healthy agent), per ${c.bucketSeconds} s`,
    from: c.fromUnix, to: c.toUnix, step: c.bucketSeconds, format: ms,
    series: [
      { name: "mean", cls: "s-mean", points: pts((b) => b.meanMs) },
      { name: "max", cls: "s-max", points: pts((b) => b.maxMs) },
    ],
  });
}

const DECISIONS = [
  ["connectionAllow", "connections allowed", "s-allow"],
  ["connectionDeny", "connections denied", "s-deny"],
  ["httpDeny", "HTTP requests denied", "s-http"],
  ["dnsDeny", "DNS queries denied", "s-dns"],
];

function egressChart(c) {
  return chart({
    testid: "chart-egress", caption: `Egress decisions, per ${c.bucketSeconds} s`,
    from: c.fromUnix, to: c.toUnix, step: c.bucketSeconds, format: (v) => String(Math.round(v * 10) / 10),
    series: DECISIONS.map(([k, name, cls]) => ({
      name, cls,
      points: c.egress.map((b) => ({ t: b.timestampUnix, v: b[k], label: `${clock(b.timestampUnix)}: ${b[k]} ${name}` })),
    })),
  });
}

async function drawCharts(box) {
  let c;
  try {
    c = await api("GET", "/admin/overview/series");
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) throw e;
    show(box, problem(e));
    return;
  }
  show(box,
    createChart(c),
    c.create.length ? null : h("p", { class: "muted", "data-testid": "chart-create-none" }, "No sandbox was created in the last hour."),
    c.egressProxy
      ? egressChart(c)
      : h("p", { class: "muted", "data-testid": "chart-egress-none" }, "airlock-egress is not running under this airlockd: there are no egress decisions to chart."),
    c.egressProxy && !c.egress.length ? h("p", { class: "muted" }, "No answer from airlock-egress's counters in the last hour yet.") : null);
}

function stopCharts() {
  if (chartsTimer) clearInterval(chartsTimer);
  chartsTimer = null;
}

async function renderOverview() {
  const o = await api("GET", "/admin/overview");
  const b = o.backend || {};
  const probe = b.kvmProbe;
  const s = o.sandboxes || {};
  const charts = h("div", { class: "charts", "data-testid": "charts" }, h("p", { class: "muted" }, "Loading…"));
  show(view,
    h("h1", {}, "Overview"),
    h("div", { class: "panel" },
      h("h2", {}, "Backend"),
      h("dl", { class: "kv" },
        h("dt", {}, "backend"), h("dd", { "data-testid": "backend" }, b.kind || ""),
        h("dt", {}, "why"), h("dd", {}, b.why || "—"),
        h("dt", {}, "KVM probe"),
        h("dd", {}, probe ? `${probe.usable ? "usable" : "not usable"}: ${probe.reason} (${probe.elapsedMs} ms)` : "not run"),
        h("dt", {}, "egress proxy"), h("dd", {}, o.egress ? "supervised by airlockd" : "not running"),
        h("dt", {}, "since"), h("dd", {}, when(o.startedAt)))),
    h("h2", {}, "Sandboxes"),
    h("div", { class: "cards" },
      card("running", s.running ?? 0),
      card("paused", s.paused ?? 0),
      card("being created", s.creating ?? 0),
      card("being stopped", s.stopping ?? 0),
      card("at most", s.max ?? 0)),
    h("h2", {}, "Pools"),
    h("div", { class: "cards" },
      card("networks ready", `${o.pools.network.ready} / ${o.pools.network.size}`),
      card("warm sandboxes ready", `${o.pools.warm.ready} / ${o.pools.warm.size}`)),
    h("h2", {}, "The last hour"),
    charts,
    may("readAudit") ? h("p", { class: "muted" }, "The audit log's state: ", h("a", { href: "#/audit" }, "Audit"), ".") : null);
  await drawCharts(charts);
  if (!charts.isConnected) return; // left the page meanwhile
  stopCharts();
  chartsTimer = setInterval(() => {
    if (!current || !charts.isConnected) stopCharts();
    else guarded(() => drawCharts(charts));
  }, 10000);
}

// ---- sandboxes --------------------------------------------------------------------------

function metadataText(md) {
  return Object.entries(md || {}).map(([k, v]) => `${k}=${v}`).join("\n");
}

async function renderSandboxes(params) {
  const state = params.get("state") || "running,paused";
  const list = await api("GET", `/v2/sandboxes?limit=100&state=${encodeURIComponent(state)}`);
  const select = h("select", { id: "state-filter", "aria-label": "state" },
    ["running,paused", "running", "paused"].map((v) => h("option", { value: v, selected: v === state }, v)));
  select.addEventListener("change", () => {
    location.hash = `#/sandboxes?state=${encodeURIComponent(select.value)}`;
  });
  const rows = list.map((sb) =>
    h("tr", { "data-testid": "sandbox-row" },
      h("td", { class: "mono" }, h("a", { href: `#/sandboxes/${encodeURIComponent(sb.sandboxID)}` }, sb.sandboxID)),
      h("td", {}, sb.templateID),
      h("td", {}, sb.state),
      h("td", {}, when(sb.startedAt)),
      h("td", {}, when(sb.endAt)),
      h("td", { class: "mono", "data-testid": "metadata" }, metadataText(sb.metadata))));
  show(view,
    h("h1", {}, "Sandboxes"),
    h("div", { class: "filters" }, h("label", { for: "state-filter" }, "state"), select,
      h("span", { class: "muted" }, `${list.length} shown`)),
    h("table", {},
      h("thead", {}, h("tr", {}, ["sandbox", "template", "state", "started", "ends", "metadata"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No sandboxes.")))));
}

async function renderSandbox(id) {
  const sb = await api("GET", `/sandboxes/${encodeURIComponent(id)}`);
  const status = h("p", { "data-testid": "action-status" });
  const act = (label, cls, fn) => h("button", { type: "button", class: cls, onclick: async (ev) => {
    ev.target.disabled = true;
    try {
      await fn();
    } catch (e) {
      show(status, problem(e));
      ev.target.disabled = false;
    }
  } }, label);
  const path = `/sandboxes/${encodeURIComponent(sb.sandboxID)}`;
  const md = Object.entries(sb.metadata || {});
  const logStatus = h("p", { class: "muted", "data-testid": "logs-status" });
  const logRows = h("tbody", { "data-testid": "log-rows" }, h("tr", { "data-testid": "no-logs", "data-empty": "" }, h("td", { colspan: 4, class: "muted" }, "No log lines yet.")));
  const logBox = h("div", { class: "logs", "data-testid": "logs" }, h("table", {}, logRows));
  const egressBox = h("div", { "data-testid": "sandbox-audit" }, h("p", { class: "muted" }, "Loading…"));
  const resources = h("div", { class: "charts", "data-testid": "resources" }, h("p", { class: "muted" }, "Loading…"));
  const actions = [
    sb.state === "running" && may("pauseSandbox") ? act("Pause", "", async () => { await api("POST", `${path}/pause`); route(); }) : null,
    sb.state === "paused" && may("resumeSandbox") ? act("Resume", "", async () => { await api("POST", `${path}/resume`, {}); route(); }) : null,
    may("killSandbox") ? act("Kill", "danger", async () => {
      if (!confirm(`Kill sandbox ${sb.sandboxID}? Its processes and files are gone for good.`)) {
        throw new Error("Not killed.");
      }
      await api("DELETE", path);
      location.hash = "#/sandboxes";
    }) : null,
  ].filter(Boolean);
  show(view,
    h("h1", {}, "Sandbox ", h("span", { class: "mono" }, sb.sandboxID)),
    h("div", { class: "panel" },
      h("dl", { class: "kv" },
        h("dt", {}, "state"), h("dd", {}, sb.state),
        h("dt", {}, "template"), h("dd", {}, sb.templateID),
        h("dt", {}, "started"), h("dd", {}, when(sb.startedAt)),
        h("dt", {}, "ends"), h("dd", {}, when(sb.endAt)),
        h("dt", {}, "resources"), h("dd", {}, `${sb.cpuCount} CPU, ${sb.memoryMB} MB memory, ${sb.diskSizeMB} MB disk`),
        h("dt", {}, "on timeout"), h("dd", {}, sb.lifecycle ? sb.lifecycle.onTimeout : ""),
        h("dt", {}, "internet"), h("dd", {}, sb.allowInternetAccess === false ? "only what network.allowOut names" : "as its policy allows"))),
    h("h2", {}, "Metadata"),
    h("table", {}, h("tbody", {}, md.length
      ? md.map(([k, v]) => h("tr", {}, h("td", { class: "mono" }, k), h("td", { class: "mono", "data-testid": "metadata-value" }, v)))
      : h("tr", {}, h("td", { class: "muted" }, "none")))),
    h("h2", {}, "Actions"),
    actions.length ? h("div", { class: "filters" }, actions) : notForRole("pause, resume or kill sandboxes"),
    sb.state === "running" && may("terminal")
      ? h("p", {}, h("a", { href: `#/sandboxes/${encodeURIComponent(sb.sandboxID)}/terminal`, "data-testid": "open-terminal" }, "Open a terminal"))
      : !may("terminal") ? notForRole("open a terminal in a sandbox") : null,
    status,
    h("h2", {}, "Resources"),
    resources,
    h("h2", {}, "Logs"),
    may("sandboxLogs") ? [logStatus, logBox] : notForRole("read a sandbox's logs"),
    h("h2", {}, "Egress decisions"),
    may("readAudit") ? egressBox : notForRole("read the egress audit log"));
  if (may("sandboxLogs")) followLogs(sb.sandboxID, logRows, logStatus, logBox);
  stopCharts();
  chartsTimer = setInterval(() => {
    if (!current || !resources.isConnected) stopCharts();
    else guarded(() => drawResources(sb.sandboxID, resources));
  }, 10000);
  await drawResources(sb.sandboxID, resources);
  if (may("readAudit")) await sandboxDecisions(sb.sandboxID, egressBox);
}

// ---- a sandbox's resources ---------------------------------------------------------------
// Its CPU, memory and disk over the samples airlockd keeps (GET /sandboxes/{id}/metrics: one
// every sandboxes.metrics_interval, the last 360), redrawn every 10 s while the page is open.

// The smallest power of two of bytes that is at least v: a size chart's top (its halves are
// round too).
function binTop(v) {
  if (!(v > 0)) return 1024;
  let t = 1;
  while (t < v) t *= 2;
  return t;
}

function size(n) {
  return bytes(Math.round(n)).replace(".0 ", " ");
}

async function drawResources(id, box) {
  let m;
  try {
    m = await api("GET", `/sandboxes/${encodeURIComponent(id)}/metrics`);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) throw e;
    show(box, problem(e));
    return;
  }
  if (!m.length) {
    show(box, h("p", { class: "muted", "data-testid": "resources-none" }, "No sample yet: airlockd takes one every sandboxes.metrics_interval."));
    return;
  }
  const ts = m.map((x) => x.timestampUnix);
  const to = Math.max(ts[ts.length - 1], Math.floor(Date.now() / 1000));
  const from = Math.min(ts[0], to - 600);
  // A line breaks where samples are missing: more than 2.5 times the usual interval apart.
  const diffs = ts.slice(1).map((t, i) => t - ts[i]).filter((d) => d > 0).sort((a, b) => a - b);
  const gap = diffs.length ? diffs[Math.floor(diffs.length / 2)] * 2.5 : Infinity;
  const one = (testid, caption, series, format, round) => chart({ testid, caption, from, to, step: 1, gap, at: 0, series, format, round });
  const pts = (f, label) => m.map((x) => ({ t: x.timestampUnix, v: f(x), label: `${clock(x.timestampUnix)}: ${label(x)}` }));
  show(box,
    one("chart-cpu", `CPU (% of ${m[m.length - 1].cpuCount} vCPU)`, [
      { name: "used", cls: "s-mean", points: pts((x) => x.cpuUsedPct, (x) => `${x.cpuUsedPct.toFixed(1)}% of ${x.cpuCount} vCPU`) },
    ], (v) => `${Math.round(v * 10) / 10}%`),
    one("chart-mem", "Memory", [
      { name: "used", cls: "s-mean", points: pts((x) => x.memUsed, (x) => `${size(x.memUsed)} used of ${size(x.memTotal)}`) },
      { name: "limit", cls: "s-max", points: pts((x) => x.memTotal, (x) => `limit ${size(x.memTotal)}`) },
    ], size, binTop),
    one("chart-disk", "Disk", [
      { name: "used", cls: "s-mean", points: pts((x) => x.diskUsed, (x) => `${size(x.diskUsed)} used of ${size(x.diskTotal)}`) },
    ], size, binTop));
}

// The sandbox's own records of the audit log, the latest then live (as the Audit page's).
async function sandboxDecisions(id, box) {
  let records;
  try {
    records = await api("GET", `/admin/audit?limit=50&sandbox=${encodeURIComponent(id)}`);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) throw e;
    show(box, problem(e));
    return;
  }
  const rows = records.records.map(auditRow);
  const tbody = h("tbody", { "data-testid": "sandbox-audit-rows" },
    rows.length ? rows : h("tr", { "data-testid": "no-records" }, h("td", { colspan: 9, class: "muted" }, "No records.")));
  const status = h("p", { class: "muted", "data-testid": "sandbox-audit-status" });
  show(box, status, h("table", {},
    h("thead", {}, h("tr", {}, ["seq", "time", "sandbox", "type", "decision", "reason", "rule", "host", "path"].map((t) => h("th", {}, t)))),
    tbody));
  if (box.isConnected) follow(tbody, status, { sandbox: id }, records.lastSeq ?? undefined);
}

// ---- a sandbox's logs, live -----------------------------------------------------------------

function closeLogs() {
  if (liveLogs) liveLogs.close();
  liveLogs = null;
}

function logRow(e) {
  const fields = Object.entries(e.fields || {}).map(([k, v]) => `${k}=${v}`).join(" ");
  return h("tr", { "data-testid": "log-row" },
    h("td", { class: "mono" }, when(e.timestamp)),
    h("td", { class: e.level === "error" ? "deny" : e.level === "warn" ? "would_deny" : "" }, e.level || ""),
    h("td", { class: "mono", "data-testid": "log-message" }, e.message ?? ""),
    h("td", { class: "mono muted" }, fields));
}

// A log as it is written, as Server-Sent Events (a sandbox's, a build's): each "log" event a
// row at the bottom of tbody (the last `keep` kept; the view follows the end unless scrolled
// up), the stream's own end said in status; `events` handles the stream's other events.
// whose: "the sandbox", "the build".
function followLog(url, { tbody, status, box, row, keep, whose, events = {} }) {
  const es = new EventSource(url);
  show(status, "Connecting…");
  es.addEventListener("open", () => show(status, `Following ${whose}'s log: new entries appear at the bottom.`));
  es.addEventListener("log", (ev) => {
    let e;
    try {
      e = JSON.parse(ev.data);
    } catch {
      return;
    }
    const empty = tbody.querySelector("[data-empty]");
    if (empty) empty.remove();
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    tbody.append(row(e));
    while (tbody.children.length > keep) tbody.firstElementChild.remove();
    if (atEnd) box.scrollTop = box.scrollHeight;
  });
  for (const [name, fn] of Object.entries(events)) {
    es.addEventListener(name, (ev) => {
      let d;
      try {
        d = JSON.parse(ev.data);
      } catch {
        return;
      }
      fn(d);
    });
  }
  // The stream's own end (the sandbox stopped, the build ended, airlockd stops): no
  // reconnecting.
  es.addEventListener("end", (ev) => {
    es.close();
    show(status, h("span", { class: "muted" }, `The log ended: ${ev.data}`));
  });
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CLOSED) show(status, h("span", { class: "error" }, `The log could not be followed (${whose} is gone, or the session ended).`));
    else show(status, "Reconnecting…");
  });
  return es;
}

// The sandbox's agent log (GET /v2/sandboxes/{id}/logs as Server-Sent Events: the latest 200
// entries, then each new one).
function followLogs(id, tbody, status, box) {
  closeLogs();
  liveLogs = followLog(`/v2/sandboxes/${encodeURIComponent(id)}/logs?limit=200`,
    { tbody, status, box, row: logRow, keep: 1000, whose: "the sandbox" });
}

// ---- terminal ---------------------------------------------------------------------------

function closeTerminal() {
  if (!openTerminal) return;
  const t = openTerminal;
  openTerminal = null;
  t.term.dispose();
  if (t.ws.readyState <= WebSocket.OPEN) t.ws.close(1000, "left the page");
}

async function renderTerminal(id) {
  if (!may("terminal")) {
    show(view, h("h1", {}, "Terminal"), notForRole("open a terminal in a sandbox"));
    return;
  }
  const status = h("p", { class: "muted", "data-testid": "term-status" }, "Connecting…");
  const screen = h("pre", { class: "terminal", tabindex: "0", "data-testid": "terminal", "aria-label": "terminal" });
  const closeBtn = h("button", { type: "button", id: "term-close" }, "Close");
  show(view,
    h("h1", {}, "Terminal in ", h("a", { href: `#/sandboxes/${encodeURIComponent(id)}` }, h("span", { class: "mono" }, id))),
    h("div", { class: "filters" }, closeBtn, status),
    screen,
    h("p", { class: "muted" }, "A login shell of the sandbox's default user. What you type and what it shows are not recorded; the terminal's start and end are (the sandbox's lifecycle events, with your key)."));
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  let ws = null;
  const term = new Terminal(screen, {
    rows: 24,
    onInput: (bytes) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(bytes); },
    onResize: (cols, rows) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { cols, rows } })); },
  });
  const q = new URLSearchParams({ cols: String(term.cols), rows: String(term.rows) });
  ws = new WebSocket(`${proto}//${location.host}/console/api/sandboxes/${encodeURIComponent(id)}/terminal?${q}`,
    ["airlock.terminal", `csrf.${csrfToken()}`]);
  ws.binaryType = "arraybuffer";
  openTerminal = { ws, term };
  let opened = false;
  ws.addEventListener("open", () => {
    opened = true;
    show(status, "Connected.");
    ws.send(JSON.stringify({ resize: { cols: term.cols, rows: term.rows } }));
    screen.focus();
    term.render();
  });
  ws.addEventListener("message", (ev) => {
    if (ev.data instanceof ArrayBuffer) term.write(new Uint8Array(ev.data));
  });
  ws.addEventListener("close", (ev) => {
    if (openTerminal && openTerminal.ws === ws) openTerminal = null;
    term.dispose();
    // The browser does not say why an upgrade was refused: the session says what the role
    // may do, the API's answer is in the network panel.
    show(status, h("span", { class: opened ? "muted" : "error" },
      opened ? `Closed: ${ev.reason || `code ${ev.code}`}.` : "The terminal could not be opened (refused by airlockd, or the sandbox is not running)."));
    closeBtn.disabled = true;
  });
  screen.addEventListener("focus", () => term.render());
  screen.addEventListener("blur", () => term.render());
  closeBtn.addEventListener("click", () => ws.close(1000, "closed by the user"));
}

// ---- audit ------------------------------------------------------------------------------

function target(r) {
  return r.host || r.sni || r.qname || r.dst || "";
}

function auditRow(r) {
  return h("tr", { "data-testid": "audit-row" },
    h("td", { class: "mono" }, r.seq),
    h("td", {}, when(r.time)),
    h("td", { class: "mono" }, r.sandbox || ""),
    h("td", {}, r.type || ""),
    h("td", { class: r.decision || "" }, r.decision || ""),
    h("td", { class: "mono" }, r.reason || ""),
    h("td", { class: "mono" }, r.rule || ""),
    h("td", { class: "mono" }, target(r)),
    h("td", { class: "mono" }, r.path || ""));
}

function closeLive() {
  if (liveTail) liveTail.close();
  liveTail = null;
}

// The audit query's filters (those of `airlock audit query`): each one given must match.
const AUDIT_FILTERS = ["decision", "sandbox", "host", "type", "reason", "since", "until"];

function auditQuery(filters) {
  const q = new URLSearchParams();
  for (const k of AUDIT_FILTERS) if (filters[k]) q.set(k, filters[k]);
  return q;
}

// Follows the log from record `after` on (the newest the page lists), with the page's filters
// (auditQuery): each new record goes on top of tbody. GET /admin/audit as Server-Sent Events.
function follow(tbody, status, filters, after) {
  closeLive();
  const q = auditQuery(filters);
  if (after !== undefined) q.set("after", String(after));
  const es = new EventSource(`/admin/audit?${q}`);
  liveTail = es;
  show(status, "Connecting…");
  es.addEventListener("open", () => show(status, "Following the log: new records appear on top."));
  es.addEventListener("record", (ev) => {
    let r;
    try {
      r = JSON.parse(ev.data);
    } catch {
      return;
    }
    const empty = tbody.querySelector("[data-testid=no-records]");
    if (empty) empty.remove();
    tbody.prepend(auditRow(r));
    while (tbody.children.length > 1000) tbody.lastElementChild.remove();
  });
  es.addEventListener("end", (ev) => show(status, h("span", { class: "error" }, `The live tail ended: ${ev.data}`)));
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CLOSED) show(status, h("span", { class: "error" }, "The live tail stopped (no audit log to follow, or the session ended)."));
    else show(status, "Reconnecting…");
  });
}

async function renderAudit(params) {
  if (!may("readAudit")) {
    show(view, h("h1", {}, "Audit"), notForRole("read the egress audit log"));
    return;
  }
  const filters = {};
  for (const k of AUDIT_FILTERS) filters[k] = params.get(k) || "";
  const q = auditQuery(filters);
  q.set("limit", "200");
  const verifyOut = h("div", { class: "panel", "data-testid": "verify" },
    h("p", { class: "muted" }, "The hash chain and the signed checkpoints of the whole log are checked on request."));
  const verifyBtn = h("button", { type: "button", id: "verify" }, "Verify the log");
  verifyBtn.addEventListener("click", async () => {
    verifyBtn.disabled = true;
    show(verifyOut, h("p", { class: "muted" }, "Verifying…"));
    try {
      const v = await api("GET", "/admin/audit/verify");
      show(verifyOut, verdict(v));
    } catch (e) {
      show(verifyOut, problem(e));
    }
    verifyBtn.disabled = false;
  });
  const select = h("select", { id: "decision-filter", "aria-label": "decision" },
    [["", "every decision"], ["deny", "deny"], ["would_deny", "would_deny"], ["allow", "allow"]]
      .map(([v, t]) => h("option", { value: v, selected: v === filters.decision }, t)));
  const field = (k, placeholder) => h("input", { id: `filter-${k}`, type: "text", name: k, value: filters[k], autocomplete: "off", spellcheck: "false", placeholder });
  const inputs = {
    decision: select,
    sandbox: field("sandbox", "sandbox id"),
    host: field("host", "host (.example.com: and under)"),
    type: field("type", "http_request, dns_query, ..."),
    reason: field("reason", "reason code"),
    since: field("since", "since: RFC 3339 or 10m, 2h"),
    until: field("until", "until: RFC 3339 or an age"),
  };
  const filterForm = h("form", { id: "audit-filters", class: "filters wrap" },
    AUDIT_FILTERS.map((k) => [h("label", { for: k === "decision" ? "decision-filter" : `filter-${k}` }, k), inputs[k]]),
    h("button", { type: "submit" }, "Apply"));
  const apply = () => {
    const p = new URLSearchParams();
    for (const k of AUDIT_FILTERS) if (inputs[k].value.trim()) p.set(k, inputs[k].value.trim());
    if (liveBox.checked) p.set("live", "1");
    location.hash = `#/audit${p.size ? `?${p}` : ""}`;
  };
  select.addEventListener("change", apply);
  filterForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    apply();
  });
  // Downloads of every record that matches the filters, from the log's first line on (the
  // whole log, unfiltered, verifies like the log: `airlock audit verify FILE`).
  const exportQ = (format) => {
    const e = auditQuery(filters);
    e.set("format", format);
    return `/admin/audit/export?${e}`;
  };
  const exports = may("exportAudit") ? h("div", { class: "filters", "data-testid": "export" },
    h("span", {}, "Export the matching records:"),
    h("a", { href: exportQ("jsonl"), download: "", "data-testid": "export-jsonl" }, "JSONL (as the log holds them)"),
    h("a", { href: exportQ("ocsf"), download: "", "data-testid": "export-ocsf" }, "OCSF 1.1 events")) : null;
  let records;
  let listing;
  let tbody = null;
  try {
    records = await api("GET", `/admin/audit?${q}`);
    const rows = records.records.map(auditRow);
    tbody = h("tbody", { "data-testid": "audit-rows" }, rows.length ? rows : h("tr", { "data-testid": "no-records" }, h("td", { colspan: 9, class: "muted" }, "No records.")));
    listing = h("table", {},
      h("thead", {}, h("tr", {}, ["seq", "time", "sandbox", "type", "decision", "reason", "rule", "host", "path"].map((t) => h("th", {}, t)))),
      tbody);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) throw e;
    listing = problem(e);
  }
  const liveStatus = h("span", { class: "muted", "data-testid": "live-status" });
  const liveBox = h("input", { type: "checkbox", id: "live", "aria-label": "follow the log live" });
  liveBox.addEventListener("change", () => {
    if (!liveBox.checked) {
      closeLive();
      show(liveStatus, "");
      return;
    }
    // From the last record the listing read on (the log's order is its seq): none is missed.
    follow(tbody, liveStatus, filters, records.lastSeq ?? undefined);
  });
  show(view,
    h("h1", {}, "Audit"),
    h("h2", {}, "Verification"),
    may("verifyAudit") ? h("div", { class: "filters" }, verifyBtn) : notForRole("verify the audit log"),
    verifyOut,
    h("h2", {}, "Latest records"),
    filterForm,
    records ? h("p", { class: "muted" }, `${records.records.length} shown, newest first, from ${records.dir}`) : null,
    exports,
    tbody ? h("div", { class: "filters" }, liveBox, h("label", { for: "live" }, "live"), liveStatus) : null,
    listing);
  if (tbody && params.get("live") === "1") {
    liveBox.checked = true;
    liveBox.dispatchEvent(new Event("change"));
  }
}

function verdict(v) {
  const head = v.intact
    ? h("p", { class: "ok", "data-testid": "verdict" }, `Intact: records ${v.first_seq} to ${v.last_seq}, ${v.checkpoints} signed checkpoints (key ${v.key_id}).`)
    : h("p", { class: "error", "data-testid": "verdict" }, `Not intact (${v.verdict}).`);
  const p = v.problem;
  return [
    head,
    p ? h("dl", { class: "kv" },
      h("dt", {}, "first bad record"), h("dd", { class: "mono", "data-testid": "bad-seq" }, String(p.seq)),
      h("dt", {}, "file"), h("dd", { class: "mono" }, `${p.file}:${p.line}`),
      h("dt", {}, "what is wrong"), h("dd", {}, p.reason)) : null,
    h("dl", { class: "kv" },
      h("dt", {}, "files"), h("dd", {}, String(v.files)),
      h("dt", {}, "records"), h("dd", {}, String(v.records)),
      h("dt", {}, "records after the last checkpoint"), h("dd", {}, String(v.unsigned_tail)),
      h("dt", {}, "end of the log"), h("dd", {}, v.tail),
      h("dt", {}, "starts at"), h("dd", {}, v.starts_at_genesis ? "the first record (nothing deleted)" : `record ${v.first_seq} (retention)`)),
  ];
}

// ---- policies ---------------------------------------------------------------------------

function findingsText(p) {
  if (!p.valid) return `${p.errors} error${p.errors === 1 ? "" : "s"}, ${p.warnings} warning${p.warnings === 1 ? "" : "s"}`;
  return p.warnings ? `valid, ${p.warnings} warning${p.warnings === 1 ? "" : "s"}` : "valid";
}

async function renderPolicies() {
  if (!may("readPolicies")) {
    show(view, h("h1", {}, "Policies"), notForRole("read the egress policies"));
    return;
  }
  const list = await api("GET", "/admin/policies");
  const rows = list.policies.map((p) =>
    h("tr", { "data-testid": "policy-row" },
      h("td", { class: "mono" }, h("a", { href: `#/policies/${encodeURIComponent(p.name)}` }, p.name), p.default ? " (default)" : ""),
      h("td", { class: p.valid ? (p.warnings ? "would_deny" : "ok") : "error", "data-testid": "policy-state" }, findingsText(p)),
      h("td", {}, p.mode || "—"),
      h("td", {}, p.ruleCount ?? "—"),
      h("td", {}, String(p.sandboxes.length)),
      h("td", {}, p.description || ""),
      h("td", { class: "mono" }, p.hash ? p.hash.slice(0, 16) : "")));
  show(view,
    h("h1", {}, "Policies"),
    h("p", { class: "muted" }, `${list.policies.length} in ${list.dir}; sandboxes that name none get ${list.default}.`),
    h("table", {},
      h("thead", {}, h("tr", {}, ["policy", "lint", "mode", "rules", "sandboxes", "description", "hash"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No policies.")))));
}

// The file's lines, numbered, each finding under the line it names (findings without a line
// go first).
function yamlListing(text, diags) {
  const lines = (text ?? "").split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  const at = new Map();
  const loose = [];
  for (const d of diags) {
    if (d.line >= 1 && d.line <= lines.length) {
      if (!at.has(d.line)) at.set(d.line, []);
      at.get(d.line).push(d);
    } else {
      loose.push(d);
    }
  }
  const finding = (d) => h("tr", { class: `finding ${d.severity}`, "data-testid": "finding" },
    h("td", { class: "ln" }, ""),
    h("td", { class: "mono" }, `${" ".repeat(Math.max(0, d.col - 1))}^ ${d.line}:${d.col}: ${d.severity}: ${d.message} [${d.code}]`));
  const rows = loose.map(finding);
  lines.forEach((l, i) => {
    const mine = at.get(i + 1) || [];
    rows.push(h("tr", { class: mine.length ? `marked ${mine.some((d) => d.severity === "error") ? "error" : "warning"}` : "", "data-testid": "yaml-line" },
      h("td", { class: "ln" }, String(i + 1)),
      h("td", { class: "mono" }, l)));
    rows.push(...mine.map(finding));
  });
  return h("table", { class: "yaml", "data-testid": "yaml" }, h("tbody", {}, rows));
}

function explainResult(x) {
  const dec = x.would_deny ? "would_deny" : x.decision;
  return h("dl", { class: "kv", "data-testid": "explain-result" },
    h("dt", {}, "decision"), h("dd", { class: dec, "data-testid": "explain-decision" }, x.would_deny ? "allow (report mode: would deny)" : x.decision),
    h("dt", {}, "rule"), h("dd", { class: "mono", "data-testid": "explain-rule" }, x.rule ? `${x.rule} (line ${x.rule_line})` : "none"),
    h("dt", {}, "reason"), h("dd", { class: "mono", "data-testid": "explain-reason" }, x.reason),
    h("dt", {}, "why"), h("dd", { "data-testid": "explain-why" }, x.explanation),
    h("dt", {}, "host"), h("dd", { class: "mono" }, `${x.host ?? "(invalid)"}${x.address_class ? `, address class ${x.address_class}` : ""}`),
    x.query === "dns" ? null : [
      h("dt", {}, "asked"), h("dd", { class: "mono" }, x.query === "request" ? `${x.method} ${x.scheme}, port ${x.port}, ${x.path}${x.body ? ", with a body" : ""}` : `connection, ${x.scheme}, port ${x.port}`),
      h("dt", {}, "tls"), h("dd", {}, x.tls),
      h("dt", {}, "inject"), h("dd", { class: "mono" }, x.inject.length ? x.inject.join(", ") : "none"),
    ],
    h("dt", {}, "policy"), h("dd", { class: "mono" }, `${x.policy.name}, ${x.policy.mode}, hash ${x.policy.hash}`));
}

function explainForm(name, valid) {
  const url = h("input", { id: "explain-url", type: "text", name: "url", autocomplete: "off", spellcheck: "false", placeholder: "a URL (https or http), host:port, tcp://host:port or dns:name", required: true });
  const method = h("input", { id: "explain-method", type: "text", name: "method", autocomplete: "off", spellcheck: "false", placeholder: "GET" });
  const addr = h("input", { id: "explain-addr", type: "text", name: "addr", autocomplete: "off", spellcheck: "false", placeholder: "resolved address (optional)" });
  const body = h("input", { id: "explain-body", type: "checkbox", name: "body" });
  const conn = h("input", { id: "explain-connection", type: "checkbox", name: "connection" });
  const out = h("div", { class: "panel", "data-testid": "explain-out" },
    h("p", { class: "muted" }, valid ? "The decision of this policy for one request, as `airlock policy explain` gives it." : "This policy has errors: fix them before explaining requests against it."));
  const form = h("form", { id: "explain", class: "filters wrap" },
    h("label", { for: "explain-url" }, "URL"), url,
    h("label", { for: "explain-method" }, "method"), method,
    h("label", { for: "explain-addr" }, "address"), addr,
    body, h("label", { for: "explain-body" }, "body"),
    conn, h("label", { for: "explain-connection" }, "connection only"),
    h("button", { type: "submit", disabled: !valid }, "Explain"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ url: url.value });
    if (method.value) q.set("method", method.value);
    if (addr.value) q.set("addr", addr.value);
    if (body.checked) q.set("body", "true");
    if (conn.checked) q.set("connection", "true");
    show(out, h("p", { class: "muted" }, "Deciding…"));
    try {
      show(out, explainResult(await api("GET", `/admin/policies/${encodeURIComponent(name)}/explain?${q}`)));
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) throw e;
      show(out, problem(e));
    }
  });
  return [form, out];
}

// The policy's test cases (<policies dir>/tests/<name>.yaml), run as `airlock policy test`
// runs them: each case's expectation beside the decision and its rule.
function testCases(t) {
  if (!t.found) return h("p", { class: "muted", "data-testid": "tests-none" }, `No test cases: write them in ${t.casesFile} (the CASES format of docs/policy.md).`);
  const expected = (c) => `${c.expect}${"expectRule" in c ? `, rule ${c.expectRule ?? "none"}` : ""}`;
  const rows = t.cases.map((c) => h("tr", { "data-testid": "test-case" },
    h("td", { "data-testid": "test-result", class: c.pass ? "ok" : "error" }, c.pass ? "pass" : "FAIL"),
    h("td", { "data-testid": "test-name" }, c.name, h("span", { class: "muted" }, ` line ${c.line}`)),
    h("td", { class: "mono" }, c.method ? `${c.method} ${c.url}` : c.url),
    h("td", { class: "mono", "data-testid": "test-expected" }, expected(c)),
    h("td", { class: "mono", "data-testid": "test-actual" }, h("span", { class: c.wouldDeny ? "would_deny" : c.decision }, c.wouldDeny ? "allow (would deny)" : c.decision),
      `, rule ${c.rule ? `${c.rule} (line ${c.ruleLine})` : "none"}, ${c.reason}`),
    h("td", { "data-testid": "test-why" }, c.failures ? h("span", { class: "error" }, c.failures) : null, c.failures ? h("br", {}) : null, c.why)));
  const diags = t.diagnostics.map((d) => h("li", { class: d.severity, "data-testid": "test-finding" }, `${d.line}:${d.col}: ${d.severity}: ${d.message}`));
  return [
    h("p", { "data-testid": "tests-summary", class: t.failed || t.malformed || !t.ran ? "error" : "ok" },
      t.ran ? `${t.total} case${t.total === 1 ? "" : "s"}: ${t.passed} passed, ${t.failed} failed${t.malformed ? `, ${t.malformed} malformed` : ""}` : "The cases file cannot be run:",
      h("span", { class: "muted" }, ` (${t.casesFile})`)),
    diags.length ? h("ul", { class: "findings" }, diags) : null,
    rows.length ? h("table", {},
      h("thead", {}, h("tr", {}, ["result", "case", "request", "expected", "decision", "why"].map((x) => h("th", {}, x)))),
      h("tbody", {}, rows)) : null,
  ];
}

function hashText(v) {
  if (!v) return "(no file)";
  return v.valid ? v.hash.slice(0, 16) : "invalid";
}

const TRIGGERS = { start: "airlockd started", sighup: "SIGHUP", api: "reload by key", file_changed: "a creation read the changed file" };

// Each reading of the policy that changed what airlockd had: when, why, the hash before and
// after and the lint result.
function reloadRows(list) {
  return list.map((r) => h("tr", { "data-testid": "reload-row" },
    h("td", {}, when(r.time)),
    h("td", { "data-testid": "reload-trigger" }, TRIGGERS[r.trigger] || r.trigger, r.keyId ? h("span", { class: "mono" }, ` ${r.keyId}`) : null),
    h("td", { class: "mono", "data-testid": "reload-before" }, r.before ? hashText(r.before) : "(first reading)"),
    h("td", { class: "mono", "data-testid": "reload-after" }, hashText(r.after)),
    h("td", { class: !r.after ? "muted" : r.after.valid ? "ok" : "error", "data-testid": "reload-lint" },
      !r.after ? "removed" : r.after.valid ? (r.after.warnings ? `valid, ${r.after.warnings} warning${r.after.warnings === 1 ? "" : "s"}` : "valid")
        : `${r.after.errors} error${r.after.errors === 1 ? "" : "s"}${r.after.firstError ? `: ${r.after.firstError}` : ""}`)));
}

function reloadsTable(list) {
  return h("table", { "data-testid": "reloads" },
    h("thead", {}, h("tr", {}, ["when", "triggered by", "before", "after", "lint"].map((x) => h("th", {}, x)))),
    h("tbody", {}, list.length ? reloadRows(list) : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No reading recorded since airlockd started."))));
}

// Admins read the policies again at once (what SIGHUP does); the answer says what changed.
function reloadButton(done) {
  if (!may("reloadPolicies")) return null;
  const out = h("span", { class: "muted", "data-testid": "reload-out" });
  const b = h("button", { type: "button", id: "reload-policies" }, "Read the policies again");
  b.addEventListener("click", async () => {
    b.disabled = true;
    show(out, "Reading…");
    try {
      const r = await api("POST", "/admin/policy-reloads");
      const eg = r.egress ? (r.egress.error ? `; airlock-egress: ${r.egress.error}` : `; airlock-egress reloaded ${r.egress.reloaded} sandboxes' policies${r.egress.failed.length ? `, refused ${r.egress.failed.length}` : ""}`) : "";
      show(out, `${r.changed.length} changed, ${r.unchanged} unchanged${eg}.`);
      await done();
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) throw e;
      show(out, problem(e));
    }
    b.disabled = false;
  });
  return h("div", { class: "filters" }, b, out);
}

async function renderPolicy(name) {
  if (!may("readPolicies")) {
    show(view, h("h1", {}, "Policy"), notForRole("read the egress policies"));
    return;
  }
  const p = await api("GET", `/admin/policies/${encodeURIComponent(name)}`);
  const tests = h("div", { "data-testid": "tests" });
  if (p.valid) {
    api("GET", `/admin/policies/${encodeURIComponent(name)}/tests`).then((t) => show(tests, testCases(t)), (e) => show(tests, problem(e)));
  } else {
    show(tests, h("p", { class: "muted" }, "The test cases run once the policy's errors are fixed."));
  }
  const reloads = h("div", { "data-testid": "policy-reloads" });
  const loadReloads = async () => show(reloads, reloadsTable((await api("GET", `/admin/policy-reloads?policy=${encodeURIComponent(name)}`)).reloads));
  loadReloads().catch((e) => show(reloads, problem(e)));
  const rules = p.rules.map((r) => h("tr", { "data-testid": "rule-row" },
    h("td", { class: "mono" }, r.name), h("td", { class: r.action === "deny" ? "deny" : "allow" }, r.action), h("td", {}, r.report ? "report" : "enforce"), h("td", {}, String(r.line))));
  const sandboxes = p.sandboxes.map((s) => h("tr", { "data-testid": "policy-sandbox" },
    h("td", { class: "mono" }, h("a", { href: `#/sandboxes/${encodeURIComponent(s.sandboxID)}` }, s.sandboxID)), h("td", {}, s.state), h("td", {}, s.templateID)));
  show(view,
    h("h1", {}, "Policy ", h("span", { class: "mono" }, p.name)),
    h("div", { class: "panel" },
      h("dl", { class: "kv" },
        h("dt", {}, "file"), h("dd", { class: "mono" }, p.file),
        h("dt", {}, "lint"), h("dd", { class: p.valid ? "ok" : "error", "data-testid": "policy-lint" }, findingsText(p)),
        h("dt", {}, "name"), h("dd", { class: "mono" }, p.policyName ?? "—"),
        h("dt", {}, "description"), h("dd", {}, p.description ?? "—"),
        h("dt", {}, "mode"), h("dd", {}, p.mode ?? "—"),
        h("dt", {}, "hash"), h("dd", { class: "mono" }, p.hash ?? "—"),
        h("dt", {}, "default"), h("dd", {}, p.default ? "yes: sandboxes that name no policy get this one" : "no"))),
    h("h2", {}, "Explain"),
    explainForm(p.name, p.valid),
    h("h2", {}, "Test cases"),
    tests,
    h("h2", {}, "YAML"),
    p.yaml === null ? h("p", { class: "error" }, "The file is not UTF-8 text; its findings say what is wrong.") : null,
    p.diagnosticsDropped ? h("p", { class: "muted" }, `${p.diagnosticsDropped} more findings are not listed.`) : null,
    yamlListing(p.yaml, p.diagnostics),
    h("h2", {}, "Rules"),
    h("table", {},
      h("thead", {}, h("tr", {}, ["rule", "action", "mode", "line"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rules.length ? rules : h("tr", {}, h("td", { colspan: 4, class: "muted" }, p.valid ? "No rules: everything is denied." : "None (the policy has errors).")))),
    h("h2", {}, "Sandboxes using it"),
    h("table", {},
      h("thead", {}, h("tr", {}, ["sandbox", "state", "template"].map((t) => h("th", {}, t)))),
      h("tbody", {}, sandboxes.length ? sandboxes : h("tr", {}, h("td", { colspan: 3, class: "muted" }, "None.")))),
    h("h2", {}, "Reloads"),
    h("p", { class: "muted" }, "Each time airlockd read this policy and found it changed (kept in memory since airlockd started: its first reading, SIGHUP, a reload, a creation that read the changed file)."),
    reloadButton(loadReloads),
    reloads);
}

// ---- templates --------------------------------------------------------------------------

function bytes(n) {
  if (typeof n !== "number") return "—";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${u[i]}`;
}

// What a template or a build is made from (airlock's fields of E2B's objects).
function madeFrom(t) {
  if (t.fromImage) return `image ${t.fromImage}`;
  if (t.fromTemplate) return `template ${t.fromTemplate}`;
  return "—";
}

function statusCell(status) {
  return h("td", { class: status === "ready" ? "ok" : status === "error" ? "error" : "", "data-testid": "build-status" }, status);
}

async function renderTemplates() {
  const list = await api("GET", "/templates");
  const rows = list.map((t) => h("tr", { "data-testid": "template-row" },
    h("td", { class: "mono" }, h("a", { href: `#/templates/${encodeURIComponent(t.templateID)}` }, t.templateID)),
    statusCell(t.buildStatus),
    h("td", { class: "mono", "data-testid": "template-from" }, madeFrom(t)),
    h("td", {}, typeof t.buildDurationMs === "number" ? ms(t.buildDurationMs) : "—"),
    h("td", {}, String(t.buildCount)),
    h("td", {}, bytes(t.imageBytes)),
    h("td", {}, when(t.updatedAt))));
  show(view,
    h("h1", {}, "Templates"),
    h("table", {},
      h("thead", {}, h("tr", {}, ["template", "latest build", "made from", "build time", "builds", "image (compressed)", "updated"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No templates.")))),
    h("p", { class: "muted" }, "Made from, build time: of the version sandboxes get (the newest ready build). Templates are built through the API (the SDK's Template.build) or pulled with `airlock template pull`."));
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

async function renderTemplate(id) {
  const t = await api("GET", `/templates/${encodeURIComponent(id)}`);
  const rows = t.builds.map((b) => h("tr", { "data-testid": "build-row" },
    // Builds of the API have a UUID and a log; a template made otherwise has one build
    // standing for its files (its image's digest, or none), without a log.
    h("td", { class: "mono" }, UUID.test(b.buildID)
      ? h("a", { href: `#/templates/${encodeURIComponent(t.templateID)}/builds/${encodeURIComponent(b.buildID)}` }, b.buildID)
      : b.buildID || "(files made without the API)"),
    statusCell(b.status),
    h("td", { class: "mono" }, madeFrom(b)),
    h("td", {}, typeof b.stepCount === "number" ? String(b.stepCount) : "—"),
    h("td", { class: "mono" }, b.startedBy || "—"),
    h("td", {}, when(b.createdAt)),
    h("td", {}, b.finishedAt ? when(b.finishedAt) : "—"),
    h("td", {}, typeof b.durationMs === "number" ? ms(b.durationMs) : "—")));
  show(view,
    h("h1", {}, "Template ", h("span", { class: "mono" }, t.templateID)),
    h("div", { class: "panel" },
      h("dl", { class: "kv" },
        h("dt", {}, "names"), h("dd", { class: "mono" }, (t.names || []).join(", ")),
        h("dt", {}, "created"), h("dd", {}, when(t.createdAt)),
        h("dt", {}, "updated"), h("dd", {}, when(t.updatedAt)))),
    h("h2", {}, "Builds"),
    h("table", {},
      h("thead", {}, h("tr", {}, ["build", "status", "made from", "steps", "started by", "created", "finished", "took"].map((x) => h("th", {}, x)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No builds.")))));
}

function closeBuild() {
  if (liveBuild) liveBuild.close();
  liveBuild = null;
}

function buildLogRow(e) {
  return h("tr", { "data-testid": "build-log-row" },
    h("td", { class: "mono" }, when(e.timestamp)),
    h("td", { class: e.level === "error" ? "deny" : e.level === "warn" ? "would_deny" : "" }, e.level || ""),
    h("td", { class: "mono" }, e.step ?? ""),
    h("td", { class: "mono", "data-testid": "build-log-message" }, e.message ?? ""));
}

// A build's log as builds.c writes it (GET .../status as Server-Sent Events: every entry so
// far, then each new one), and its status as it changes.
async function renderBuild(id, bid) {
  const path = `/templates/${encodeURIComponent(id)}/builds/${encodeURIComponent(bid)}/status`;
  const first = await api("GET", `${path}?limit=1`); // a 404 for a build that is not there
  const state = h("span", { "data-testid": "build-state" }, first.status);
  const reason = h("div", { "data-testid": "build-reason" });
  const status = h("p", { class: "muted", "data-testid": "build-log-status" }, "Connecting…");
  const tbody = h("tbody", { "data-testid": "build-log-rows" }, h("tr", { "data-testid": "no-build-logs", "data-empty": "" }, h("td", { colspan: 4, class: "muted" }, "No log entries yet.")));
  const box = h("div", { class: "logs", "data-testid": "build-logs" }, h("table", {}, tbody));
  show(view,
    h("h1", {}, "Build ", h("span", { class: "mono" }, bid)),
    h("p", {}, "Of template ", h("a", { href: `#/templates/${encodeURIComponent(id)}` }, h("span", { class: "mono" }, id)), ": ", state),
    reason,
    h("h2", {}, "Log"),
    status,
    box);
  closeBuild();
  liveBuild = followLog(path, {
    tbody, status, box, row: buildLogRow, keep: 5000, whose: "the build",
    events: {
      status: (st) => {
        show(state, st.status);
        state.className = st.status === "ready" ? "ok" : st.status === "error" ? "error" : "";
        show(reason, st.reason ? h("p", { class: "error" }, `Failed${st.reason.step ? ` at step ${st.reason.step}` : ""}: ${st.reason.message}`) : null);
      },
    },
  });
}

// ---- vault ------------------------------------------------------------------------------
// Values are write-only: typed into a password field, sent once (POST or PUT
// /admin/vault/{name}), the field cleared; no answer of airlockd carries one.

function vaultPath(name) {
  return `/admin/vault/${name.split("/").map(encodeURIComponent).join("/")}`;
}

function hostList(s) {
  return s.split(/[\s,]+/).filter(Boolean);
}

// The rules of the policies that inject each secret: name -> [{policy, rule, hosts}].
function injectors(policies) {
  const by = new Map();
  for (const p of policies) {
    for (const r of p.rules || []) {
      for (const n of r.secrets || []) {
        if (!by.has(n)) by.set(n, []);
        by.get(n).push({ policy: p.name, rule: r.name, hosts: r.hosts || [] });
      }
    }
  }
  return by;
}

async function renderVault(message) {
  if (!may("readVault")) {
    show(view, h("h1", {}, "Vault"), notForRole("read the vault's secret names"));
    return;
  }
  const { secrets } = await api("GET", "/admin/vault");
  let users = new Map();
  let policyNote = null;
  if (may("readPolicies")) {
    try {
      users = injectors((await api("GET", "/admin/policies")).policies);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) throw e;
      policyNote = problem(e);
    }
  }
  const status = h("div", { "data-testid": "vault-status" }, message ? h("p", { class: "ok" }, message) : null);
  const write = may("writeVault");
  const fail = (e) => show(status, problem(e));
  const rows = secrets.map((s) => {
    const used = users.get(s.name) || [];
    const value = h("input", { type: "password", name: "value", autocomplete: "new-password", spellcheck: "false", placeholder: "new value", "aria-label": `new value of ${s.name}`, required: true });
    const rotate = h("form", { class: "filters", "data-testid": "vault-rotate" }, value, h("button", { type: "submit" }, "Rotate"));
    rotate.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const v = value.value;
      value.value = "";
      try {
        const r = await api("PUT", vaultPath(s.name), { value: v });
        await renderVault(`Secret ${r.name} is at version ${r.current_version}.`);
      } catch (e) {
        fail(e);
      }
    });
    const del = h("button", { type: "button", class: "danger", "data-testid": "vault-delete", onclick: async (ev) => {
      if (!confirm(`Delete secret ${s.name} and every version of it? Rules that inject it fail their requests.`)) return;
      ev.target.disabled = true;
      try {
        await api("DELETE", vaultPath(s.name));
        await renderVault(`Secret ${s.name} was deleted.`);
      } catch (e) {
        fail(e);
        ev.target.disabled = false;
      }
    } }, "Delete");
    return h("tr", { "data-testid": "vault-row" },
      h("td", { class: "mono", "data-testid": "vault-name" }, s.name),
      h("td", {}, s.description || ""),
      h("td", { "data-testid": "vault-version" }, `${s.current_version} (${(s.versions || []).length} kept)`),
      h("td", { class: "mono", "data-testid": "vault-hosts" }, (s.bound_hosts || []).length ? s.bound_hosts.join(", ") : "any host its rules allow"),
      h("td", { class: "mono", "data-testid": "vault-used" }, used.length ? used.map((u) => `${u.policy}/${u.rule} → ${u.hosts.join(", ") || "—"}`).join("\n") : "no rule"),
      h("td", { class: "mono" }, Object.entries(s.metadata || {}).map(([k, v]) => `${k}=${v}`).join("\n")),
      h("td", {}, when(s.updated)),
      write ? h("td", {}, rotate, del) : null);
  });
  let form = null;
  if (write) {
    const name = h("input", { id: "vault-name", type: "text", name: "name", autocomplete: "off", spellcheck: "false", placeholder: "github/token", required: true });
    const value = h("input", { id: "vault-value", type: "password", name: "value", autocomplete: "new-password", spellcheck: "false", required: true });
    const desc = h("input", { id: "vault-desc", type: "text", name: "description", autocomplete: "off", placeholder: "optional" });
    const hosts = h("input", { id: "vault-hosts", type: "text", name: "hosts", autocomplete: "off", spellcheck: "false", placeholder: "api.github.com, *.example.com (optional)" });
    form = h("form", { id: "vault-create", class: "filters wrap" },
      h("label", { for: "vault-name" }, "name"), name,
      h("label", { for: "vault-value" }, "value"), value,
      h("label", { for: "vault-desc" }, "description"), desc,
      h("label", { for: "vault-hosts" }, "bound hosts"), hosts,
      h("button", { type: "submit" }, "Add"));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const body = { value: value.value };
      value.value = "";
      if (desc.value) body.description = desc.value;
      if (hosts.value) body.boundHosts = hostList(hosts.value);
      try {
        const r = await api("POST", vaultPath(name.value), body);
        await renderVault(`Secret ${r.name} was added (version ${r.current_version}).`);
      } catch (e) {
        fail(e);
      }
    });
  }
  show(view,
    h("h1", {}, "Vault"),
    h("p", { class: "muted" }, "Secrets are kept by airlock-vault and injected by the egress proxy into the requests the rules that name them allow. Their values are never shown: airlockd cannot read them."),
    write ? [h("h2", {}, "Add a secret"), form] : notForRole("add, rotate or delete secrets"),
    status,
    h("h2", {}, "Secrets"),
    policyNote,
    h("table", {},
      h("thead", {}, h("tr", {}, ["name", "description", "version", "bound hosts", "injected by (policy/rule → hosts)", "metadata", "updated", write ? "" : null].filter((x) => x !== null).map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No secrets.")))));
}

// ---- API keys ---------------------------------------------------------------------------

async function renderKeys(made) {
  if (!may("manageKeys")) {
    show(view, h("h1", {}, "API keys"), notForRole("manage API keys"));
    return;
  }
  const { keys } = await api("GET", "/admin/keys");
  const status = h("p", { "data-testid": "keys-status" });
  const name = h("input", { id: "key-name", type: "text", name: "name", autocomplete: "off", spellcheck: "false", placeholder: "name" });
  const role = h("select", { id: "key-role", "aria-label": "role" },
    ["operator", "auditor", "admin"].map((r) => h("option", { value: r }, r)));
  const policies = h("input", { id: "key-policies", type: "text", name: "policies", autocomplete: "off", spellcheck: "false", value: "*" });
  const form = h("form", { id: "key-create", class: "filters" },
    h("label", { for: "key-name" }, "name"), name,
    h("label", { for: "key-role" }, "role"), role,
    h("label", { for: "key-policies" }, "policies"), policies,
    h("button", { type: "submit" }, "Create"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const body = { role: role.value, policies: policies.value || "*" };
      if (name.value) body.name = name.value;
      const k = await api("POST", "/admin/keys", body);
      await renderKeys(k);
    } catch (e) {
      show(status, problem(e));
    }
  });
  const rows = keys.map((k) => {
    const revoke = k.status === "valid"
      ? h("button", { type: "button", class: "danger", "data-testid": "revoke", onclick: async (ev) => {
        if (!confirm(`Revoke API key ${k.id} (${k.name})? Whatever uses it stops working at once.`)) return;
        ev.target.disabled = true;
        try {
          await api("DELETE", `/admin/keys/${encodeURIComponent(k.id)}`);
          await renderKeys();
        } catch (e) {
          show(status, problem(e));
          ev.target.disabled = false;
        }
      } }, "Revoke")
      : null;
    return h("tr", { "data-testid": "key-row" },
      h("td", { class: "mono" }, k.id),
      h("td", {}, k.name),
      h("td", { "data-testid": "key-role" }, k.role),
      h("td", { class: "mono" }, k.policies),
      h("td", {}, when(k.createdAt)),
      h("td", {}, k.lastUsedAt ? when(k.lastUsedAt) : "never"),
      h("td", { "data-testid": "key-status" }, k.status === "valid" ? "valid" : `revoked ${when(k.revokedAt)}`),
      h("td", {}, revoke));
  });
  show(view,
    h("h1", {}, "API keys"),
    made ? h("div", { class: "panel", "data-testid": "new-key-panel" },
      h("p", {}, `Key ${made.id} (${made.name}, role ${made.role}) was created. It is shown this once: copy it now.`),
      h("p", { class: "mono", "data-testid": "new-key" }, made.key)) : null,
    h("h2", {}, "Create a key"),
    form,
    status,
    h("h2", {}, "Keys"),
    h("table", {},
      h("thead", {}, h("tr", {}, ["id", "name", "role", "policies", "created", "last used", "status", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No stored keys.")))),
    h("p", { class: "muted" }, "Roles: admin (everything), operator (sandboxes, templates, snapshots), auditor (the audit log, the policies and what exists; reads only). The keys themselves are never stored, only their digests."));
}

// ---- routing ----------------------------------------------------------------------------

function route() {
  closeTerminal();
  closeLive();
  closeLogs();
  closeBuild();
  stopCharts();
  if (!current) return;
  const raw = location.hash.replace(/^#/, "") || "/overview";
  const [path, query] = raw.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean);
  for (const a of nav.querySelectorAll("a")) {
    a.classList.toggle("current", a.dataset.page === parts[0]);
    if (a.dataset.page === "audit") a.hidden = !may("readAudit");
    if (a.dataset.page === "keys") a.hidden = !may("manageKeys");
    if (a.dataset.page === "policies") a.hidden = !may("readPolicies");
    if (a.dataset.page === "vault") a.hidden = !may("readVault");
  }
  if (parts[0] === "sandboxes" && parts[1] && parts[2] === "terminal") return guarded(() => renderTerminal(decodeURIComponent(parts[1])));
  if (parts[0] === "sandboxes" && parts[1]) return guarded(() => renderSandbox(decodeURIComponent(parts[1])));
  if (parts[0] === "sandboxes") return guarded(() => renderSandboxes(params));
  if (parts[0] === "audit") return guarded(() => renderAudit(params));
  if (parts[0] === "policies" && parts[1]) return guarded(() => renderPolicy(decodeURIComponent(parts[1])));
  if (parts[0] === "policies") return guarded(renderPolicies);
  if (parts[0] === "templates" && parts[1] && parts[2] === "builds" && parts[3]) return guarded(() => renderBuild(decodeURIComponent(parts[1]), decodeURIComponent(parts[3])));
  if (parts[0] === "templates" && parts[1]) return guarded(() => renderTemplate(decodeURIComponent(parts[1])));
  if (parts[0] === "templates") return guarded(renderTemplates);
  if (parts[0] === "vault") return guarded(() => renderVault());
  if (parts[0] === "keys") return guarded(() => renderKeys());
  return guarded(renderOverview);
}

function start() {
  nav.hidden = false;
  signoutBtn.hidden = false;
  show(who, `key ${current.keyId} · `, h("span", { "data-testid": "role" }, current.role), ` · until ${when(current.expiresAt)}`);
  route();
}

window.addEventListener("hashchange", route);

(async () => {
  try {
    current = await session();
  } catch (e) {
    show(view, problem(e));
    return;
  }
  if (current) start();
  else renderSignIn();
})();
