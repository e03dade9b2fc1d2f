'use strict';
// flame.js: builds the call tree of an aggregate and draws it on a canvas,
// root on top. Only frames at least half a pixel wide are laid out, so the
// cost follows what is visible, not the profile size.

SP.ROW = 18;

// buildTree turns (process, stack) weights into a tree: all → process →
// frames, root first.
SP.buildTree = function (model, agg) {
  const ns = model.stacks.length;
  const mk = (name, module, parent) => ({
    name, module, parent, value: 0, self: 0, kids: new Map(), children: null,
    depth: parent ? parent.depth + 1 : 0,
  });
  const root = mk('all', '', null);
  for (const [key, w] of agg.weights) {
    const proc = Math.floor(key / ns);
    const stack = model.stacks[key % ns];
    root.value += w;
    let node = root.kids.get(-1 - proc);
    if (!node) {
      const p = model.procs[proc];
      node = mk(p.name + ' (' + p.pid + ')', 'process', root);
      root.kids.set(-1 - proc, node);
    }
    node.value += w;
    for (let j = 0; j < stack.length; j++) {
      const f = stack[j];
      let c = node.kids.get(f);
      if (!c) {
        c = mk(model.frameName[f], model.frameModule[f], node);
        node.kids.set(f, c);
      }
      c.value += w;
      node = c;
    }
    node.self += w;
  }
  const order = (n) => {
    n.children = [...n.kids.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    n.kids = null;
    n.children.forEach(order);
  };
  order(root);
  return root;
};

SP.Flame = class {
  constructor(canvas, tip, info) {
    this.canvas = canvas;
    this.tip = tip;
    this.info = info;
    this.root = null;
    this.zoom = null;
    this.search = null;
    this.rows = [];
    this.kind = SP.ON;
    this.model = null;
    canvas.addEventListener('mousemove', (e) => this.hover(e));
    canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    canvas.addEventListener('click', (e) => this.click(e));
  }

  setTree(model, root, kind) {
    this.model = model;
    this.root = root;
    this.kind = kind;
    this.zoom = root;
  }

  setSearch(re) {
    this.search = re;
  }

  // layout places every visible node into rows[depth] as [x, w, node],
  // x and w in CSS pixels, sorted by x.
  layout(width) {
    const rows = [];
    const put = (n, x, w) => {
      (rows[n.depth] || (rows[n.depth] = [])).push([x, w, n]);
    };
    for (let a = this.zoom.parent; a; a = a.parent) put(a, 0, width);
    const place = (n, x, w) => {
      put(n, x, w);
      if (n.value <= 0) return;
      let cx = x;
      for (const c of n.children) {
        const cw = (c.value / n.value) * w;
        if (cw >= 0.5) place(c, cx, cw);
        cx += cw;
      }
    };
    place(this.zoom, 0, width);
    for (let d = 0; d < rows.length; d++) rows[d] = rows[d] || [];
    return rows;
  }

  draw() {
    const c = this.canvas;
    const width = c.parentElement.clientWidth || 800;
    if (!this.root || this.root.value === 0) {
      this.rows = [];
      this.size(width, SP.ROW * 2);
      const g = c.getContext('2d');
      g.fillStyle = '#666';
      g.font = '13px sans-serif';
      g.fillText('no samples match the filters', 8, 20);
      c.dataset.frames = '0';
      return;
    }
    this.rows = this.layout(width);
    const g = this.size(width, this.rows.length * SP.ROW);
    g.font = '11px ui-monospace, Menlo, Consolas, monospace';
    g.textBaseline = 'middle';
    let matched = 0;
    let frames = 0;
    const re = this.search;
    for (let d = 0; d < this.rows.length; d++) {
      const y = d * SP.ROW;
      for (const [x, w, n] of this.rows[d]) {
        frames++;
        const hit = re && re.test(n.name);
        if (hit && !this.hasMatchedAncestor(n)) matched += n.value;
        g.fillStyle = hit ? '#c04bd6' : this.color(n);
        g.fillRect(x, y, Math.max(w - 0.5, 0.5), SP.ROW - 1);
        if (w > 24) {
          const chars = Math.floor((w - 6) / 6.6);
          const label = n.name.length > chars ? n.name.slice(0, Math.max(chars - 1, 0)) + '…' : n.name;
          g.fillStyle = '#000';
          g.fillText(label, x + 3, y + SP.ROW / 2);
        }
      }
    }
    c.dataset.frames = String(frames);
    let text = 'click a frame to zoom, click the root to reset · total ' + this.model.formatValue(this.root.value, this.kind);
    if (this.zoom !== this.root) text += ' · zoomed on ' + this.zoom.name;
    if (re) {
      const pct = ((100 * matched) / this.zoom.value).toFixed(1);
      text += ' · search matched ' + this.model.formatValue(matched, this.kind) + ' (' + pct + '%)';
      c.dataset.matched = String(matched);
    } else {
      delete c.dataset.matched;
    }
    this.info.textContent = text;
  }

  hasMatchedAncestor(n) {
    for (let a = n.parent; a && a.depth >= this.zoom.depth; a = a.parent) {
      if (this.search.test(a.name)) return true;
    }
    return false;
  }

  size(width, height) {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(width * dpr);
    c.height = Math.round(height * dpr);
    c.style.width = width + 'px';
    c.style.height = height + 'px';
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, width, height);
    return g;
  }

  color(n) {
    if (n.depth === 0) return '#d8d8d8';
    if (n.module === 'process') return '#9fb7d6';
    let h = 0;
    for (let i = 0; i < n.name.length; i++) h = (h * 31 + n.name.charCodeAt(i)) | 0;
    const r = ((h >>> 0) % 1000) / 1000;
    if (n.module.startsWith('[')) return SP.css(SP.hsl(25 + r * 15, 0.55, 0.62));
    if (this.kind === SP.OFF) return SP.css(SP.hsl(200 + r * 30, 0.55, 0.68));
    return SP.css(SP.hsl(r * 45, 0.8, 0.62));
  }

  at(e) {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    const row = this.rows[Math.floor((e.clientY - r.top) / SP.ROW)];
    if (!row) return null;
    let lo = 0;
    let hi = row.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const [rx, rw] = row[mid];
      if (x < rx) hi = mid - 1;
      else if (x >= rx + rw) lo = mid + 1;
      else return row[mid][2];
    }
    return null;
  }

  hover(e) {
    const n = this.at(e);
    if (!n) {
      this.tip.hidden = true;
      return;
    }
    const pct = (x) => ((100 * n.value) / x.value).toFixed(2) + '%';
    const lines = [n.name];
    if (n.module && n.module !== 'process') lines.push(n.module);
    lines.push(this.model.formatValue(n.value, this.kind) + ' · ' + pct(this.root) + ' of all' +
      (this.zoom !== this.root ? ' · ' + pct(this.zoom) + ' of zoom' : ''));
    if (n.self > 0) lines.push('self ' + this.model.formatValue(n.self, this.kind));
    SP.showTip(this.tip, e, lines);
  }

  click(e) {
    const n = this.at(e);
    if (!n) return;
    this.zoom = n.depth === 0 || n === this.zoom ? this.root : n;
    this.draw();
  }

  // nodes lists what is drawn, for tests and the page API.
  nodes() {
    const out = [];
    for (const row of this.rows) for (const [, w, n] of row) out.push({name: n.name, depth: n.depth, value: n.value, width: w});
    return out;
  }
};

SP.showTip = function (tip, e, lines) {
  tip.textContent = '';
  lines.forEach((l, i) => {
    const div = document.createElement('div');
    div.textContent = l;
    if (i === 0) div.className = 'tip-title';
    tip.appendChild(div);
  });
  tip.hidden = false;
  const pad = 14;
  let x = e.clientX + pad;
  let y = e.clientY + pad;
  const r = tip.getBoundingClientRect();
  if (x + r.width > window.innerWidth) x = Math.max(0, e.clientX - r.width - pad);
  if (y + r.height > window.innerHeight) y = Math.max(0, e.clientY - r.height - pad);
  tip.style.left = x + 'px';
  tip.style.top = y + 'px';
};
