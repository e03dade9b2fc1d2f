'use strict';
// data.js: the profile model decoded from the embedded JSON, and the
// filters every view shares. Samples stay in flat typed arrays so that
// filtering 100k events is one tight loop.

const SP = {};

SP.ON = 0;
SP.OFF = 1;

SP.Model = class {
  constructor(d) {
    if (d.version !== 1) {
      throw new Error('unsupported profile data version ' + d.version);
    }
    const str = d.strings;
    const s = d.samples;
    this.n = s.kind.length;
    this.kind = Uint8Array.from(s.kind);
    this.thread = Int32Array.from(s.thread);
    this.stack = Int32Array.from(s.stack);
    this.link = Int32Array.from(s.link);
    this.time = Float64Array.from(s.time);
    this.value = Float64Array.from(s.value);
    this.periodNanos = d.periodNanos || 0;
    this.startUnixNano = d.startUnixNano;
    this.startMs = Number(BigInt(d.startUnixNano || '0') / 1000000n);
    this.lost = d.lost || {};
    this.frameName = d.frames.map((f) => str[f[0]]);
    this.frameModule = d.frames.map((f) => str[f[1]]);
    this.stacks = d.stacks;
    this.procs = d.processes.map((p) => ({pid: p[0], name: str[p[1]], service: str[p[2]]}));
    this.threads = d.threads.map((t) => ({
      proc: t[0], pid: this.procs[t[0]].pid, tid: t[1], name: str[t[2]],
    }));
    this.links = d.links.map((l) => ({trace: l[0], span: l[1]}));
    this.hasKind = [false, false];
    this.hasTime = false;
    let tMax = d.endMicros || 0;
    const per = this.threads.map(() => []);
    for (let i = 0; i < this.n; i++) {
      this.hasKind[this.kind[i]] = true;
      const t = this.time[i];
      if (t >= 0) {
        this.hasTime = true;
        if (t > tMax) tMax = t;
      }
      per[this.thread[i]].push(i);
    }
    this.tMax = Math.max(tMax, 1);
    // Samples are sorted by time, so each thread's list is too.
    this.byThread = per.map((a) => Int32Array.from(a));
    this.spans = this.spanStats();
  }

  // spanStats summarises every linked span over all events.
  spanStats() {
    const st = this.links.map((l, i) => ({
      link: i, trace: l.trace, span: l.span, first: Infinity, last: -Infinity,
      on: 0, offNs: 0, threads: new Set(),
    }));
    for (let i = 0; i < this.n; i++) {
      const l = this.link[i];
      if (l === 0) continue;
      const s = st[l];
      const t = this.time[i];
      if (t >= 0) {
        if (t < s.first) s.first = t;
        if (t > s.last) s.last = t;
      }
      if (this.kind[i] === SP.ON) s.on += this.value[i];
      else s.offNs += this.value[i];
      s.threads.add(this.thread[i]);
    }
    return st.slice(1).sort((a, b) => a.first - b.first || a.link - b.link);
  }

  threadLabel(ti) {
    const t = this.threads[ti];
    const p = this.procs[t.proc];
    return p.name + ' ' + t.pid + '/' + t.tid + (t.name ? ' ' + t.name : '');
  }

  // masks turns a filter into per-link and per-thread pass tables.
  masks(f) {
    const trace = (f.trace || '').toLowerCase();
    const span = (f.span || '').toLowerCase();
    const linkOK = new Uint8Array(this.links.length);
    this.links.forEach((l, i) => {
      if (trace && !(i > 0 && l.trace.startsWith(trace))) return;
      if (span && !(i > 0 && l.span.startsWith(span))) return;
      linkOK[i] = 1;
    });
    const threadOK = new Uint8Array(this.threads.length);
    this.threads.forEach((t, i) => {
      if (f.pid != null && t.pid !== f.pid) return;
      if (f.tid != null && t.tid !== f.tid) return;
      threadOK[i] = 1;
    });
    return {linkOK, threadOK};
  }

  // inRange reports whether event i overlaps the filter's time range; an
  // off-CPU event covers the Value nanoseconds before its time.
  inRange(i, f) {
    if (f.from == null && f.to == null) return true;
    const t = this.time[i];
    if (t < 0) return false;
    const start = this.kind[i] === SP.OFF ? t - this.value[i] / 1000 : t;
    return (f.from == null || t >= f.from) && (f.to == null || start <= f.to);
  }

  // aggregate sums the events passing f by (process, stack).
  aggregate(f) {
    const {linkOK, threadOK} = this.masks(f);
    const ns = this.stacks.length;
    const weights = new Map();
    let total = 0;
    let count = 0;
    const ranged = f.from != null || f.to != null;
    for (let i = 0; i < this.n; i++) {
      if (this.kind[i] !== f.kind || !linkOK[this.link[i]] || !threadOK[this.thread[i]]) continue;
      if (ranged && !this.inRange(i, f)) continue;
      const key = this.threads[this.thread[i]].proc * ns + this.stack[i];
      const v = this.value[i];
      weights.set(key, (weights.get(key) || 0) + v);
      total += v;
      count++;
    }
    return {weights, total, count, kind: f.kind};
  }

  // passes reports, per event, whether it passes f (for the timeline).
  passes(f) {
    const {linkOK, threadOK} = this.masks(f);
    const out = new Uint8Array(this.n);
    for (let i = 0; i < this.n; i++) {
      out[i] = linkOK[this.link[i]] && threadOK[this.thread[i]] && this.inRange(i, f) ? 1 : 0;
    }
    return out;
  }

  // formatValue renders a weight of the given kind for people.
  formatValue(v, kind) {
    if (kind === SP.OFF) return SP.formatNanos(v);
    const n = v.toLocaleString('en-US') + (v === 1 ? ' sample' : ' samples');
    return this.periodNanos ? n + ' (' + SP.formatNanos(v * this.periodNanos) + ')' : n;
  }

  // formatTime renders a microsecond offset from the start.
  formatTime(us) {
    if (us < 0) return 'no time';
    return '+' + (us / 1e6).toFixed(us < 1e6 ? 6 : 3) + ' s';
  }
};

SP.formatNanos = function (ns) {
  if (ns >= 1e9) return (ns / 1e9).toFixed(2) + ' s';
  if (ns >= 1e6) return (ns / 1e6).toFixed(2) + ' ms';
  if (ns >= 1e3) return (ns / 1e3).toFixed(1) + ' µs';
  return ns + ' ns';
};

// spanColor gives link i a hue far from its neighbours' (golden angle).
SP.spanRGB = function (i) {
  if (i === 0) return [190, 190, 190];
  const h = (i * 137.508) % 360;
  return SP.hsl(h, 0.65, 0.5);
};

SP.hsl = function (h, s, l) {
  const k = (n) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  return [Math.round(255 * f(0)), Math.round(255 * f(8)), Math.round(255 * f(4))];
};

SP.css = function (rgb) {
  return 'rgb(' + rgb[0] + ',' + rgb[1] + ',' + rgb[2] + ')';
};
