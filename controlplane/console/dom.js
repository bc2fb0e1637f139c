// dom.js: the one way the console builds its pages. Every string goes in as text (a Text
// node or textContent), never as markup: sandbox ids, metadata, hostnames, paths and reasons
// come from sandboxes and upstreams. The Content Security Policy's Trusted Types make any
// HTML sink (assigning markup to an element) throw, so a slip here fails loudly instead of
// rendering.

// h("td", {class: "mono"}, "text", childNode, ...): an element with children; strings and
// numbers become Text nodes, null/undefined/false are skipped, arrays are flattened.
export function h(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "href") e.setAttribute("href", internalHref(v));
    else if (SAFE_ATTRS.has(k)) e.setAttribute(k, String(v));
    else throw new Error(`dom.js: attribute ${k} is not one the console sets`);
  }
  append(e, children);
  return e;
}

const SAFE_ATTRS = new Set([
  "id", "type", "name", "value", "placeholder", "autocomplete", "title", "for", "colspan",
  "disabled", "required", "data-page", "data-testid", "aria-label", "spellcheck", "selected",
  "tabindex", "data-empty", "download",
]);

// svg("circle", {cx: 3, cy: 4, r: 2}, svg("title", {}, "text")): an SVG element (the
// overview's charts), with the same rule: children are elements or text, attributes are the
// drawing's own (numbers and class names), never a link or a handler.
const SVG_NS = "http://www.w3.org/2000/svg";
const SVG_ATTRS = new Set([
  "viewBox", "width", "height", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "points",
  "text-anchor", "dominant-baseline", "role", "aria-label", "data-testid", "preserveAspectRatio",
]);

export function svg(tag, props, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.setAttribute("class", v);
    else if (SVG_ATTRS.has(k)) e.setAttribute(k, String(v));
    else throw new Error(`dom.js: SVG attribute ${k} is not one the console sets`);
  }
  append(e, children);
  return e;
}

// Links stay inside the console (its hash routes) or are airlockd's own downloads (the audit
// export): never a URL a sandbox chose.
function internalHref(v) {
  const s = String(v);
  if (!s.startsWith("#/") && !s.startsWith("/admin/audit/export?")) throw new Error("dom.js: only #/ links and the audit export");
  return s;
}

// Bidirectional controls (and other invisible format characters) would reorder or hide what
// is shown, so that a hostname or a metadata value looks like another: they are shown as
// visible [U+XXXX] marks instead.
const INVISIBLE = /[\u061C\u200B-\u200F\u202A-\u202E\u2060-\u2069\uFEFF]/g;

export function visible(s) {
  return String(s).replace(INVISIBLE, (c) => `[U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}]`);
}

function append(e, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(e, c);
    else if (c instanceof Node) e.appendChild(c);
    else e.appendChild(document.createTextNode(visible(c)));
  }
}

// Replaces what el shows.
export function show(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return isNaN(d) ? String(iso) : d.toLocaleString();
}
