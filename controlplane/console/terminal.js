// terminal.js: the console's terminal emulator, a small VT100/xterm subset: enough for a
// shell, readline, and full-screen programs that keep to the usual sequences (cursor motion,
// erasing, insert/delete, scroll regions, the alternate screen). Colours and other character
// attributes are parsed and dropped: everything is shown as plain text.
//
// What the sandbox writes is shown as text only: each row of the screen is one element whose
// textContent is set (never markup), with bidi controls and invisible format characters
// made visible by dom.js's visible(), as everywhere in the console.
import { h, visible } from "./dom.js";

const SCROLLBACK = 1000;

export class Terminal {
  // el: the element to render into; onInput(Uint8Array): what is typed; onResize(cols, rows).
  constructor(el, { onInput, onResize, rows = 24 }) {
    this.el = el;
    this.onInput = onInput;
    this.onResize = onResize;
    this.decoder = new TextDecoder("utf-8");
    this.encoder = new TextEncoder();
    this.rowsFixed = rows;
    this.cols = 80;
    this.rows = rows;
    this.state = "ground";
    this.params = "";
    this.scrollback = [];
    this.screen = this.blank(this.rows);
    this.alt = null; // the main screen while the alternate one is shown
    this.x = 0;
    this.y = 0;
    this.saved = { x: 0, y: 0 };
    this.top = 0;
    this.bottom = this.rows - 1;
    this.cursorOn = true;
    this.dirty = false;
    this.scrollEl = h("div", { class: "term-scrollback" });
    this.screenEl = h("div", { class: "term-screen" });
    this.probe = h("span", { class: "term-probe" }, "MMMMMMMMMM");
    el.replaceChildren(this.scrollEl, this.screenEl, this.probe);
    this.rowEls = [];
    el.addEventListener("keydown", (ev) => this.key(ev));
    el.addEventListener("paste", (ev) => {
      ev.preventDefault();
      const t = ev.clipboardData ? ev.clipboardData.getData("text/plain") : "";
      if (t) this.send(t.replace(/\r?\n/g, "\r"));
    });
    this.fit();
    if (typeof ResizeObserver !== "undefined") {
      this.observer = new ResizeObserver(() => this.fit());
      this.observer.observe(el);
    }
    this.render();
  }

  dispose() {
    if (this.observer) this.observer.disconnect();
  }

  blank(n) {
    return Array.from({ length: n }, () => this.blankRow());
  }

  blankRow() {
    return new Array(this.cols).fill(" ");
  }

  // The columns that fit the element's width (the rows are fixed).
  fit() {
    const w = this.probe.getBoundingClientRect().width / 10;
    const avail = this.el.clientWidth - 16;
    const cols = w > 0 && avail > 0 ? Math.max(20, Math.min(1000, Math.floor(avail / w))) : 80;
    if (cols === this.cols) return;
    this.resize(cols, this.rows);
    if (this.onResize) this.onResize(this.cols, this.rows);
  }

  resize(cols, rows) {
    const fix = (row) => {
      if (row.length > cols) return row.slice(0, cols);
      while (row.length < cols) row.push(" ");
      return row;
    };
    this.cols = cols;
    this.screen = this.screen.map(fix);
    if (this.alt) this.alt.screen = this.alt.screen.map(fix);
    this.rows = rows;
    this.x = Math.min(this.x, cols - 1);
    this.top = 0;
    this.bottom = rows - 1;
    this.schedule();
  }

  // ---- output ----------------------------------------------------------------------------

  write(bytes) {
    const s = this.decoder.decode(bytes, { stream: true });
    for (const ch of s) this.char(ch);
    this.schedule();
  }

  schedule() {
    if (this.dirty) return;
    this.dirty = true;
    requestAnimationFrame(() => {
      this.dirty = false;
      this.render();
    });
  }

  char(ch) {
    const c = ch.codePointAt(0);
    switch (this.state) {
      case "esc": return this.esc(ch);
      case "csi": return this.csiByte(ch, c);
      case "osc":
        if (c === 7) this.state = "ground";
        else if (c === 27) this.state = "osc-esc";
        return;
      case "osc-esc": this.state = ch === "\\" ? "ground" : "osc"; return;
      case "charset": this.state = "ground"; return;
      default: break;
    }
    if (c === 27) { this.state = "esc"; return; }
    if (c < 32 || c === 127) return this.control(c);
    if (this.x >= this.cols) { // the wrap a full line left pending
      this.x = 0;
      this.lineFeed();
    }
    this.screen[this.y][this.x] = ch;
    this.x++;
  }

  control(c) {
    switch (c) {
      case 8: if (this.x > 0) this.x = Math.min(this.x, this.cols) - 1; break;
      case 9: this.x = Math.min(this.cols - 1, (Math.floor(this.x / 8) + 1) * 8); break;
      case 10: case 11: case 12: this.lineFeed(); break;
      case 13: this.x = 0; break;
      default: break; // BEL and the rest: nothing to show
    }
  }

  esc(ch) {
    this.state = "ground";
    switch (ch) {
      case "[": this.state = "csi"; this.params = ""; break;
      case "]": this.state = "osc"; break;
      case "(": case ")": case "*": case "+": this.state = "charset"; break;
      case "7": this.saved = { x: this.x, y: this.y }; break;
      case "8": this.x = this.saved.x; this.y = this.saved.y; break;
      case "D": this.lineFeed(); break;
      case "E": this.x = 0; this.lineFeed(); break;
      case "M": this.reverseIndex(); break;
      case "c": this.reset(); break;
      default: break;
    }
  }

  csiByte(ch, c) {
    if (c >= 0x20 && c <= 0x3f) {
      if (this.params.length < 64) this.params += ch;
      return;
    }
    this.state = "ground";
    if (c >= 0x40 && c <= 0x7e) this.csi(ch, this.params);
  }

  csi(f, raw) {
    const priv = raw.startsWith("?");
    const ps = raw.replace(/^[?>=]/, "").split(";").map((p) => parseInt(p, 10));
    const n = (i, d = 1) => (Number.isFinite(ps[i]) && ps[i] > 0 ? ps[i] : d);
    const row = this.screen[this.y];
    switch (f) {
      case "A": this.y = Math.max(this.y < this.top ? 0 : this.top, this.y - n(0)); break;
      case "B": this.y = Math.min(this.y > this.bottom ? this.rows - 1 : this.bottom, this.y + n(0)); break;
      case "C": this.x = Math.min(this.cols - 1, this.x + n(0)); break;
      case "D": this.x = Math.max(0, Math.min(this.x, this.cols - 1) - n(0)); break;
      case "E": this.x = 0; this.y = Math.min(this.rows - 1, this.y + n(0)); break;
      case "F": this.x = 0; this.y = Math.max(0, this.y - n(0)); break;
      case "G": case "`": this.x = Math.min(this.cols - 1, n(0) - 1); break;
      case "d": this.y = Math.min(this.rows - 1, n(0) - 1); break;
      case "H": case "f":
        this.y = Math.min(this.rows - 1, n(0) - 1);
        this.x = Math.min(this.cols - 1, n(1) - 1);
        break;
      case "J": this.eraseDisplay(Number.isFinite(ps[0]) ? ps[0] : 0); break;
      case "K": this.eraseLine(Number.isFinite(ps[0]) ? ps[0] : 0); break;
      case "X": for (let i = 0, x = this.x; i < n(0) && x < this.cols; i++, x++) row[x] = " "; break;
      case "P": row.splice(this.x, n(0)); while (row.length < this.cols) row.push(" "); break;
      case "@": row.splice(this.x, 0, ...new Array(n(0)).fill(" ")); row.length = this.cols; break;
      case "L": this.insertLines(n(0)); break;
      case "M": this.deleteLines(n(0)); break;
      case "S": for (let i = 0; i < n(0); i++) this.scrollUp(); break;
      case "T": for (let i = 0; i < n(0); i++) this.scrollDown(); break;
      case "r":
        this.top = Math.min(this.rows - 1, n(0) - 1);
        this.bottom = Math.min(this.rows - 1, n(1, this.rows) - 1);
        if (this.top >= this.bottom) { this.top = 0; this.bottom = this.rows - 1; }
        this.x = 0; this.y = 0;
        break;
      case "s": this.saved = { x: this.x, y: this.y }; break;
      case "u": this.x = this.saved.x; this.y = this.saved.y; break;
      case "h": case "l": if (priv) this.mode(ps, f === "h"); break;
      case "n": if (ps[0] === 6) this.send(`\x1b[${this.y + 1};${Math.min(this.x, this.cols - 1) + 1}R`); break;
      default: break; // m (attributes) and the rest: nothing to show
    }
  }

  mode(ps, on) {
    for (const p of ps) {
      if (p === 25) this.cursorOn = on;
      if (p === 47 || p === 1047 || p === 1049) {
        if (on && !this.alt) {
          this.alt = { screen: this.screen, x: this.x, y: this.y };
          this.screen = this.blank(this.rows);
          this.x = 0; this.y = 0;
        } else if (!on && this.alt) {
          ({ screen: this.screen, x: this.x, y: this.y } = this.alt);
          this.alt = null;
        }
      }
    }
  }

  eraseDisplay(m) {
    if (m === 0) {
      this.eraseLine(0);
      for (let y = this.y + 1; y < this.rows; y++) this.screen[y] = this.blankRow();
    } else if (m === 1) {
      this.eraseLine(1);
      for (let y = 0; y < this.y; y++) this.screen[y] = this.blankRow();
    } else {
      this.screen = this.blank(this.rows);
      if (m === 3) this.scrollback = [];
    }
  }

  eraseLine(m) {
    const row = this.screen[this.y];
    const x = Math.min(this.x, this.cols);
    const [a, b] = m === 0 ? [x, this.cols] : m === 1 ? [0, x + 1] : [0, this.cols];
    for (let i = a; i < b && i < this.cols; i++) row[i] = " ";
  }

  lineFeed() {
    if (this.y === this.bottom) this.scrollUp();
    else if (this.y < this.rows - 1) this.y++;
  }

  reverseIndex() {
    if (this.y === this.top) this.scrollDown();
    else if (this.y > 0) this.y--;
  }

  scrollUp() {
    const [gone] = this.screen.splice(this.top, 1);
    this.screen.splice(this.bottom, 0, this.blankRow());
    if (this.top === 0 && !this.alt) {
      this.scrollback.push(gone.join("").trimEnd());
      if (this.scrollback.length > SCROLLBACK) this.scrollback.shift();
      this.scrollbackDirty = true;
    }
  }

  scrollDown() {
    this.screen.splice(this.bottom, 1);
    this.screen.splice(this.top, 0, this.blankRow());
  }

  insertLines(n) {
    if (this.y < this.top || this.y > this.bottom) return;
    for (let i = 0; i < n; i++) {
      this.screen.splice(this.bottom, 1);
      this.screen.splice(this.y, 0, this.blankRow());
    }
  }

  deleteLines(n) {
    if (this.y < this.top || this.y > this.bottom) return;
    for (let i = 0; i < n; i++) {
      this.screen.splice(this.y, 1);
      this.screen.splice(this.bottom, 0, this.blankRow());
    }
  }

  reset() {
    this.screen = this.blank(this.rows);
    this.alt = null;
    this.x = 0; this.y = 0;
    this.top = 0; this.bottom = this.rows - 1;
    this.cursorOn = true;
  }

  render() {
    if (this.scrollbackDirty) {
      this.scrollbackDirty = false;
      this.scrollEl.textContent = this.scrollback.length ? visible(this.scrollback.join("\n")) + "\n" : "";
    }
    while (this.rowEls.length < this.rows) {
      const r = h("div", { class: "term-row", "data-testid": "term-row" });
      this.rowEls.push(r);
      this.screenEl.appendChild(r);
    }
    while (this.rowEls.length > this.rows) this.rowEls.pop().remove();
    for (let y = 0; y < this.rows; y++) {
      const text = this.screen[y].join("");
      const el = this.rowEls[y];
      if (y === this.y && this.cursorOn && document.activeElement === this.el) {
        const x = Math.min(this.x, this.cols - 1);
        el.replaceChildren(visible(text.slice(0, x)), h("span", { class: "term-cursor" }, text[x]), visible(text.slice(x + 1).trimEnd()));
      } else {
        el.textContent = visible(text.trimEnd());
      }
    }
    this.el.scrollTop = this.el.scrollHeight; // the live screen, not the scrollback
  }

  // ---- input -----------------------------------------------------------------------------

  send(s) {
    if (this.onInput) this.onInput(this.encoder.encode(s));
  }

  key(ev) {
    const k = ev.key;
    const special = {
      Enter: "\r", Backspace: "\x7f", Tab: "\t", Escape: "\x1b",
      ArrowUp: "\x1b[A", ArrowDown: "\x1b[B", ArrowRight: "\x1b[C", ArrowLeft: "\x1b[D",
      Home: "\x1b[H", End: "\x1b[F", Delete: "\x1b[3~", Insert: "\x1b[2~",
      PageUp: "\x1b[5~", PageDown: "\x1b[6~",
    };
    let out = null;
    if (ev.ctrlKey && !ev.altKey && !ev.metaKey && k.length === 1) {
      if (k === "v" || k === "V") return; // the browser's paste (the paste event sends it)
      const c = k.toUpperCase().charCodeAt(0);
      if (c >= 64 && c <= 95) out = String.fromCharCode(c - 64); // ^A .. ^_
      else if (k === " ") out = "\x00";
    } else if (special[k] && !ev.metaKey) {
      out = special[k];
    } else if (k.length === 1 && !ev.ctrlKey && !ev.metaKey) {
      out = ev.altKey ? `\x1b${k}` : k;
    }
    if (out === null) return;
    ev.preventDefault();
    this.send(out);
  }
}
