'use strict';
// timeline.js: one row per thread, events over time as ticks coloured by
// span (grey outside any span); off-CPU events are bars covering the time
// blocked. Events that do not pass the filters are drawn faded so the
// selection keeps its context. Pixels are written into one ImageData:
// 100k fillRect calls would cost more than the rest of the page.

SP.TL = {LABEL: 200, AXIS: 20, ROW: 14, TICK: 10, PAD: 8};

SP.Timeline = class {
  constructor(canvas, tip, model, on) {
    this.canvas = canvas;
    this.tip = tip;
    this.model = model;
    this.on = on; // {span(link), range(from, to)}
    this.rows = [];
    this.kind = SP.ON;
    this.filter = null;
    this.drag = null;
    this.sel = document.createElement('div');
    this.sel.className = 'tl-sel';
    this.sel.hidden = true;
    canvas.parentElement.appendChild(this.sel);
    canvas.addEventListener('mousemove', (e) => this.move(e));
    canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    canvas.addEventListener('mousedown', (e) => this.down(e));
    window.addEventListener('mouseup', (e) => this.up(e));
    canvas.addEventListener('dblclick', () => this.on.range(null, null));
  }

  // threadsOf lists the threads with timed events of a kind, by pid, tid.
  threadsOf(kind) {
    const m = this.model;
    const rows = [];
    m.byThread.forEach((list, ti) => {
      for (const i of list) {
        if (m.kind[i] === kind && m.time[i] >= 0) {
          rows.push(ti);
          return;
        }
      }
    });
    return rows.sort((a, b) => m.threads[a].pid - m.threads[b].pid || m.threads[a].tid - m.threads[b].tid);
  }

  draw(filter) {
    const m = this.model;
    const L = SP.TL;
    this.filter = filter;
    this.kind = filter.kind;
    this.rows = this.threadsOf(filter.kind);
    const c = this.canvas;
    const width = c.parentElement.clientWidth || 800;
    const height = L.AXIS + Math.max(this.rows.length, 1) * L.ROW + 4;
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(width * dpr);
    c.height = Math.round(height * dpr);
    c.style.width = width + 'px';
    c.style.height = height + 'px';
    this.width = width;
    this.scale = (width - L.LABEL - L.PAD) / m.tMax; // CSS px per µs
    const g = c.getContext('2d');
    if (!m.hasTime || this.rows.length === 0) {
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.fillStyle = '#666';
      g.font = '13px sans-serif';
      g.fillText(m.hasTime ? 'no ' + (filter.kind === SP.OFF ? 'off' : 'on') + '-CPU events with times' :
        'this file has no event times (pprof keeps none): no timeline', 8, 20);
      c.dataset.spans = '0';
      return;
    }
    const spans = this.paint(g, c.width, c.height, dpr, m.passes(filter));
    c.dataset.spans = String(spans);
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.decorate(g, width, height, filter);
  }

  // paint writes the event pixels and returns how many spans they show.
  paint(g, pw, ph, dpr, pass) {
    const m = this.model;
    const L = SP.TL;
    const img = g.createImageData(pw, ph);
    const px = new Uint32Array(img.data.buffer);
    px.fill(0xffffffff);
    const full = new Uint32Array(m.links.length);
    const faded = new Uint32Array(m.links.length);
    const abgr = (r, gg, b) => (0xff000000 | (b << 16) | (gg << 8) | r) >>> 0;
    m.links.forEach((_, i) => {
      const [r, gg, b] = SP.spanRGB(i);
      full[i] = abgr(r, gg, b);
      const f = (v) => Math.round(v + (255 - v) * 0.82);
      faded[i] = abgr(f(r), f(gg), f(b));
    });
    const seen = new Uint8Array(m.links.length);
    let spans = 0;
    const x0 = L.LABEL * dpr;
    const sc = this.scale * dpr;
    const xmax = pw - 1;
    for (let pass2 = 0; pass2 < 2; pass2++) {
      for (let r = 0; r < this.rows.length; r++) {
        const y0 = Math.round((L.AXIS + r * L.ROW + (L.ROW - L.TICK) / 2) * dpr);
        const y1 = Math.min(Math.round(y0 + L.TICK * dpr), ph);
        let lastX = -1;
        let lastC = 0;
        for (const i of m.byThread[this.rows[r]]) {
          if (m.kind[i] !== this.kind || m.time[i] < 0 || pass[i] !== pass2) continue;
          const link = m.link[i];
          if (link && !seen[link]) {
            seen[link] = 1;
            spans++;
          }
          const col = pass2 ? full[link] : faded[link];
          const t = m.time[i];
          let a = Math.floor(x0 + t * sc);
          const b = Math.min(a, xmax);
          if (this.kind === SP.OFF) a = Math.floor(x0 + Math.max(t - m.value[i] / 1000, 0) * sc);
          if (b === lastX && col === lastC && a === b) continue;
          lastX = b;
          lastC = col;
          for (let y = y0; y < y1; y++) {
            const row = y * pw;
            for (let x = Math.max(a, 0); x <= b; x++) px[row + x] = col;
          }
        }
      }
    }
    g.putImageData(img, 0, 0);
    return spans;
  }

  decorate(g, width, height, f) {
    const m = this.model;
    const L = SP.TL;
    g.font = '11px sans-serif';
    g.textBaseline = 'middle';
    g.fillStyle = '#333';
    this.rows.forEach((ti, r) => {
      const y = L.AXIS + r * L.ROW + L.ROW / 2;
      let label = m.threadLabel(ti);
      if (label.length > 32) label = label.slice(0, 31) + '…';
      g.fillText(label, 4, y);
    });
    g.strokeStyle = '#ccc';
    g.beginPath();
    g.moveTo(L.LABEL, L.AXIS - 0.5);
    g.lineTo(width - L.PAD, L.AXIS - 0.5);
    g.stroke();
    const spanUs = m.tMax;
    const want = (width - L.LABEL) / 110;
    const raw = spanUs / Math.max(want, 1);
    const p10 = Math.pow(10, Math.floor(Math.log10(raw)));
    const q = raw / p10;
    const step = p10 * (q <= 1 ? 1 : q <= 2 ? 2 : q <= 5 ? 5 : 10);
    g.fillStyle = '#555';
    g.textBaseline = 'alphabetic';
    // A label starts right of its tick, but one that would run past the
    // canvas (the last tick sits at the right end when the recording
    // lasted a round time) ends at the edge instead: ticks are ~110 px
    // apart, so it still clears the label before it.
    this.axisLabels = [];
    for (let t = 0; t <= spanUs; t += step) {
      const x = L.LABEL + t * this.scale;
      g.fillRect(x, L.AXIS - 5, 1, 5);
      const text = t >= 1e6 ? (t / 1e6).toFixed(step >= 1e6 ? 0 : 2) + ' s' : (t / 1e3).toFixed(step >= 1e3 ? 0 : 2) + ' ms';
      const lx = Math.min(x + 2, width - 1 - g.measureText(text).width);
      g.fillText(text, lx, L.AXIS - 7);
      this.axisLabels.push({text, x: lx});
    }
    if (f.from != null || f.to != null) {
      const a = L.LABEL + (f.from || 0) * this.scale;
      const b = L.LABEL + (f.to == null ? m.tMax : f.to) * this.scale;
      g.fillStyle = 'rgba(60, 90, 200, 0.12)';
      g.fillRect(a, L.AXIS, Math.max(b - a, 1), height - L.AXIS);
    }
  }

  // at finds the event under the mouse: the nearest within 3 pixels on
  // that thread's row, or an off-CPU bar covering the spot.
  at(e) {
    const m = this.model;
    const L = SP.TL;
    const r = this.canvas.getBoundingClientRect();
    const row = Math.floor((e.clientY - r.top - L.AXIS) / L.ROW);
    if (row < 0 || row >= this.rows.length) return -1;
    const t = (e.clientX - r.left - L.LABEL) / this.scale;
    const tol = 3 / this.scale;
    const list = m.byThread[this.rows[row]];
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (m.time[list[mid]] < t - tol) lo = mid + 1;
      else hi = mid;
    }
    let best = -1;
    let bestD = Infinity;
    for (let j = lo; j < list.length && m.time[list[j]] <= t + tol + (this.kind === SP.OFF ? Infinity : 0); j++) {
      const i = list[j];
      if (m.kind[i] !== this.kind) continue;
      const start = this.kind === SP.OFF ? m.time[i] - m.value[i] / 1000 : m.time[i];
      const d = t < start ? start - t : t > m.time[i] ? t - m.time[i] : 0;
      if (d < bestD && d <= tol) {
        best = i;
        bestD = d;
      }
      if (this.kind === SP.OFF && start > t + tol) break;
    }
    return best;
  }

  move(e) {
    if (this.drag) {
      const r = this.canvas.getBoundingClientRect();
      const x = Math.max(e.clientX - r.left, SP.TL.LABEL);
      this.sel.hidden = false;
      this.sel.style.left = Math.min(x, this.drag) + 'px';
      this.sel.style.width = Math.abs(x - this.drag) + 'px';
      this.sel.style.height = this.canvas.style.height;
      return;
    }
    const i = this.at(e);
    if (i < 0) {
      this.tip.hidden = true;
      this.canvas.style.cursor = 'crosshair';
      return;
    }
    const m = this.model;
    const l = m.links[m.link[i]];
    const st = m.stacks[m.stack[i]];
    const fn = st.length ? m.frameName[st[st.length - 1]] : '(no frames)';
    this.canvas.style.cursor = m.link[i] ? 'pointer' : 'crosshair';
    SP.showTip(this.tip, e, [
      fn,
      m.threadLabel(m.thread[i]),
      'time ' + m.formatTime(m.time[i]) + ' · ' + m.formatValue(m.value[i], m.kind[i]),
      'trace_id ' + (l.trace || '(none)'),
      'span_id ' + (l.span || '(none)'),
    ]);
  }

  down(e) {
    const r = this.canvas.getBoundingClientRect();
    const x = e.clientX - r.left;
    if (x < SP.TL.LABEL || e.button !== 0) return;
    this.drag = x;
    this.dragFrom = e;
    e.preventDefault();
  }

  up(e) {
    if (this.drag == null) return;
    const r = this.canvas.getBoundingClientRect();
    const x = Math.max(e.clientX - r.left, SP.TL.LABEL);
    const start = this.drag;
    this.drag = null;
    this.sel.hidden = true;
    if (Math.abs(x - start) > 4) {
      const t = (px) => Math.max((px - SP.TL.LABEL) / this.scale, 0);
      this.on.range(t(Math.min(x, start)), t(Math.max(x, start)));
      return;
    }
    const i = this.at(e);
    if (i >= 0 && this.model.link[i]) this.on.span(this.model.link[i]);
  }
};
