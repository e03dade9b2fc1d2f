'use strict';
// app.js: filter state (mirrored in the URL query), controls, and the
// render pass. The page reports its timings in data attributes of <html>
// (data-load-ms, data-render-ms, data-paint-ms) for tests and people.

(function () {
  const $ = (id) => document.getElementById(id);
  const root = document.documentElement;
  const tLoad = performance.now();
  let model;
  let meta;
  try {
    meta = JSON.parse($('spanprof-meta').textContent);
    model = new SP.Model(JSON.parse($('spanprof-data').textContent));
  } catch (err) {
    $('status').textContent = 'cannot read the profile in this page: ' + err.message;
    root.dataset.error = err.message;
    return;
  }
  root.dataset.loadMs = (performance.now() - tLoad).toFixed(1);

  const MAX_SPAN_ROWS = 500;
  const state = {kind: SP.ON, trace: '', span: '', pid: null, tid: null, from: null, to: null, search: ''};
  const num = (v) => (v == null || v === '' || isNaN(Number(v)) ? null : Number(v));

  function readURL() {
    const q = new URLSearchParams(location.search);
    state.kind = q.get('kind') === 'off' ? SP.OFF : SP.ON;
    if (!model.hasKind[state.kind] && model.hasKind[1 - state.kind]) state.kind = 1 - state.kind;
    state.trace = (q.get('trace_id') || '').toLowerCase();
    state.span = (q.get('span_id') || '').toLowerCase();
    state.pid = num(q.get('pid'));
    state.tid = num(q.get('tid'));
    // from/to are milliseconds after the first event, as shown on the axis.
    state.from = num(q.get('from')) == null ? null : num(q.get('from')) * 1000;
    state.to = num(q.get('to')) == null ? null : num(q.get('to')) * 1000;
    state.search = q.get('search') || '';
  }

  function writeURL() {
    const q = new URLSearchParams(location.search);
    const set = (k, v) => (v == null || v === '' ? q.delete(k) : q.set(k, v));
    set('kind', state.kind === SP.OFF ? 'off' : null);
    set('trace_id', state.trace);
    set('span_id', state.span);
    set('pid', state.pid);
    set('tid', state.tid);
    set('from', state.from == null ? null : +(state.from / 1000).toFixed(3));
    set('to', state.to == null ? null : +(state.to / 1000).toFixed(3));
    set('search', state.search);
    const s = q.toString();
    history.replaceState(null, '', location.pathname + (s ? '?' + s : '') + location.hash);
  }

  function searchRE() {
    if (!state.search) return null;
    try {
      $('search').classList.remove('bad');
      return new RegExp(state.search, 'i');
    } catch (err) {
      $('search').classList.add('bad');
      return new RegExp(state.search.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
    }
  }

  const tip = $('tip');
  const flame = new SP.Flame($('flame'), tip, $('flame-info'));
  const timeline = new SP.Timeline($('timeline'), tip, model, {
    span(link) {
      const l = model.links[link];
      state.trace = l.trace;
      state.span = l.span;
      update();
    },
    range(from, to) {
      state.from = from;
      state.to = to;
      update();
    },
  });

  function fillSelects() {
    const pid = $('f-pid');
    pid.length = 1;
    for (const p of [...model.procs].sort((a, b) => a.pid - b.pid)) {
      pid.add(new Option(p.name + ' (' + p.pid + ')' + (p.service ? ' ' + p.service : ''), p.pid));
    }
    const tid = $('f-tid');
    tid.length = 1;
    const ths = model.threads.filter((t) => state.pid == null || t.pid === state.pid);
    const seen = new Set();
    for (const t of ths.sort((a, b) => a.pid - b.pid || a.tid - b.tid)) {
      if (seen.has(t.tid)) continue;
      seen.add(t.tid);
      tid.add(new Option(t.pid + '/' + t.tid + (t.name ? ' ' + t.name : ''), t.tid));
    }
  }

  function fillFiles() {
    const sel = $('file');
    if (!meta.files || meta.files.length < 2) return;
    for (const f of meta.files) sel.add(new Option(f, f, false, f === meta.current));
    sel.hidden = false;
    sel.addEventListener('change', () => {
      location.search = '?file=' + encodeURIComponent(sel.value);
    });
  }

  function threadList(set) {
    const tids = [...new Set([...set].map((t) => model.threads[t].tid))].sort((a, b) => a - b);
    return tids.slice(0, 4).join(' ') + (tids.length > 4 ? ' +' + (tids.length - 4) : '');
  }

  function spanTable() {
    const body = $('spans').tBodies[0];
    body.textContent = '';
    const rows = model.spans.slice(0, MAX_SPAN_ROWS);
    for (const s of rows) {
      const tr = body.insertRow();
      tr.dataset.link = s.link;
      const dot = '<span class="dot" style="background:' + SP.css(SP.spanRGB(s.link)) + '"></span>';
      const cells = [s.trace, s.span, threadList(s.threads),
        s.first === Infinity ? '' : model.formatTime(s.first), s.last === -Infinity ? '' : model.formatTime(s.last),
        s.on.toLocaleString('en-US'), s.offNs ? SP.formatNanos(s.offNs) : ''];
      cells.forEach((v, i) => {
        const td = tr.insertCell();
        if (i === 1) td.innerHTML = dot;
        if (i === 0 && meta.live) {
          // A live window knows the trace's exported spans: link its view.
          const a = document.createElement('a');
          a.href = '/trace/' + encodeURIComponent(s.trace);
          a.className = 'trace-link';
          a.textContent = v;
          a.addEventListener('click', (e) => e.stopPropagation());
          td.appendChild(a);
          return;
        }
        td.appendChild(document.createTextNode(v));
      });
      tr.addEventListener('click', () => {
        const same = state.span === s.span && state.trace === s.trace;
        state.trace = same ? '' : s.trace;
        state.span = same ? '' : s.span;
        update();
      });
    }
    if (rows.length === 0) {
      const td = body.insertRow().insertCell();
      td.colSpan = 7;
      td.className = 'empty';
      td.textContent = 'no event carried a trace context (no span was active, or the service publishes none: see spanprof check)';
    }
    $('spans').dataset.rows = String(rows.length);
    $('span-info').textContent = model.spans.length + ' spans' +
      (model.spans.length > MAX_SPAN_ROWS ? ', first ' + MAX_SPAN_ROWS + ' by time shown' : '') +
      ' · click a row to filter by it, again to clear';
  }

  function syncControls() {
    document.querySelectorAll('input[name=kind]').forEach((r) => {
      r.checked = Number(r.value === 'off') === state.kind;
      r.disabled = !model.hasKind[r.value === 'off' ? SP.OFF : SP.ON];
    });
    $('kind-off-label').hidden = !model.hasKind[SP.OFF];
    $('f-trace').value = state.trace;
    $('f-span').value = state.span;
    $('search').value = state.search;
    $('f-pid').value = state.pid == null ? '' : String(state.pid);
    $('f-tid').value = state.tid == null ? '' : String(state.tid);
    const t = $('f-time');
    t.textContent = '';
    if (state.from != null || state.to != null) {
      t.append('time ' + model.formatTime(state.from || 0) + ' – ' + (state.to == null ? 'end' : model.formatTime(state.to)) + ' ');
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = 'clear';
      b.addEventListener('click', () => timeline.on.range(null, null));
      t.append(b);
    }
    for (const tr of $('spans').tBodies[0].rows) {
      if (!tr.dataset.link) continue;
      const l = model.links[Number(tr.dataset.link)];
      const active = !!state.span && l.span.startsWith(state.span) && l.trace.startsWith(state.trace);
      if (active && !tr.classList.contains('active')) {
        const wrap = $('spans-wrap');
        wrap.scrollTop = tr.offsetTop - wrap.clientHeight / 2;
      }
      tr.classList.toggle('active', active);
    }
  }

  function status(agg) {
    const parts = [agg.count.toLocaleString('en-US') + ' of ' + model.n.toLocaleString('en-US') + ' events match',
      model.formatValue(agg.total, state.kind), model.procs.length + ' processes', model.threads.length + ' threads',
      model.spans.length + ' spans'];
    const lost = Object.entries(model.lost).map(([k, v]) => k + ' ' + v);
    if (lost.length) parts.push('lost: ' + lost.join(', '));
    $('status').textContent = parts.join(' · ');
  }

  // render redraws every view for the current state and records how long
  // it took; data-render-count lets tests wait for a render to finish.
  function render() {
    const t0 = performance.now();
    const f = {...state};
    const agg = model.aggregate(f);
    flame.setTree(model, SP.buildTree(model, agg), state.kind);
    flame.setSearch(searchRE());
    flame.draw();
    timeline.draw(f);
    syncControls();
    status(agg);
    const ms = performance.now() - t0;
    root.dataset.renderMs = ms.toFixed(1);
    root.dataset.renderCount = String(Number(root.dataset.renderCount || 0) + 1);
    $('perf').textContent = model.n.toLocaleString('en-US') + ' events · decoded in ' + root.dataset.loadMs +
      ' ms · rendered in ' + ms.toFixed(1) + ' ms';
    requestAnimationFrame(() => requestAnimationFrame(() => {
      root.dataset.paintMs = (performance.now() - t0).toFixed(1);
    }));
  }

  function update() {
    writeURL();
    render();
  }

  function bind() {
    document.querySelectorAll('input[name=kind]').forEach((r) => r.addEventListener('change', () => {
      state.kind = r.value === 'off' ? SP.OFF : SP.ON;
      update();
    }));
    let timer = 0;
    const later = (fn) => () => {
      clearTimeout(timer);
      timer = setTimeout(fn, 250);
    };
    $('search').addEventListener('input', later(() => {
      state.search = $('search').value;
      writeURL();
      flame.setSearch(searchRE());
      flame.draw();
    }));
    const idInput = (id, key) => {
      const apply = () => {
        const v = $(id).value.trim().toLowerCase();
        if (v !== state[key]) {
          state[key] = v;
          update();
        }
      };
      $(id).addEventListener('change', apply);
      $(id).addEventListener('input', later(apply));
    };
    idInput('f-trace', 'trace');
    idInput('f-span', 'span');
    $('f-pid').addEventListener('change', () => {
      state.pid = num($('f-pid').value);
      state.tid = null;
      fillSelects();
      update();
    });
    $('f-tid').addEventListener('change', () => {
      state.tid = num($('f-tid').value);
      update();
    });
    $('reset').addEventListener('click', () => {
      Object.assign(state, {trace: '', span: '', pid: null, tid: null, from: null, to: null, search: ''});
      update();
    });
    let resize = 0;
    window.addEventListener('resize', () => {
      cancelAnimationFrame(resize);
      resize = requestAnimationFrame(render);
    });
  }

  // A live window (serve --otlp-listen) polls its counters and reloads
  // when data arrived, keeping the filters (they live in the URL).
  function pollLive() {
    const el = document.createElement('p');
    el.id = 'live';
    el.className = 'status';
    const follow = document.createElement('input');
    follow.type = 'checkbox';
    follow.checked = new URLSearchParams(location.search).get('follow') !== '0';
    const label = document.createElement('label');
    label.append(follow, ' follow');
    const text = document.createElement('span');
    const traces = document.createElement('a');
    traces.href = '/trace/';
    traces.textContent = 'traces';
    el.append(text, ' · ', traces, ' · ', label);
    $('status').before(el);
    let seen = null;
    const tick = () => fetch('/api/window', {cache: 'no-store'}).then((r) => r.json()).then((w) => {
      if (w.store) {
        const s = w.store;
        text.textContent = 'store ' + s.url + ': ' + s.status.toUpperCase() + ' · ' + w.samples.toLocaleString('en-US') + ' samples, ' +
          w.spans.toLocaleString('en-US') + ' spans · buffered ' + s.buffered_batches + ' exports, dropped ' +
          s.dropped_samples.toLocaleString('en-US') + ' samples, ' + s.dropped_spans.toLocaleString('en-US') + ' spans' +
          (s.error ? ' · failing since ' + s.error_since + ': ' + s.error : '');
      } else text.textContent = 'live window: ' + w.samples.toLocaleString('en-US') + ' samples, ' +
        w.spans.toLocaleString('en-US') + ' spans, ' + w.traces.toLocaleString('en-US') + ' traces · evicted ' +
        (w.evicted_samples_size + w.evicted_samples_age).toLocaleString('en-US') + ' samples, ' +
        (w.evicted_spans_size + w.evicted_spans_age).toLocaleString('en-US') + ' spans' +
        (w.rejected ? ' · rejected ' + w.rejected + ' exports' : '');
      root.dataset.liveVersion = String(w.version);
      if (seen === null) seen = model.version != null ? model.version : w.version;
      if (w.version !== seen && follow.checked) location.reload();
    }).catch((err) => { text.textContent = 'live window: ' + err.message; });
    tick();
    setInterval(tick, 2000);
  }

  readURL();
  if (meta.live) pollLive();
  fillFiles();
  fillSelects();
  spanTable();
  bind();
  render();
  // The page API: tests and the console read the views through it.
  window.spanprof = {
    model, state, flame, timeline, render, update,
    frames: () => flame.nodes().map((n) => n.name),
  };
})();
