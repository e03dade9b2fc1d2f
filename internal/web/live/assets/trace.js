'use strict';
// trace.js: the trace list (/trace/) and the trace view (/trace/ID) of a
// live window. Data comes from the JSON API of the same server; the page
// re-reads it when /api/window's version changes and "follow" is on.
// Timings and counts go to data attributes of <html> for tests.
(function () {
  const $ = (id) => document.getElementById(id);
  const root = document.documentElement;
  const traceID = root.dataset.traceId;
  let flameSel = null; // {span, kind}

  const ms = (ns) => (ns / 1e6).toLocaleString('en-US', {maximumFractionDigits: ns < 1e7 ? 2 : 1}) + ' ms';
  const pct = (f) => (100 * f).toFixed(f < 0.1 ? 1 : 0) + ' %';
  const time = (t) => (t ? new Date(t).toISOString().replace('T', ' ').replace('Z', '') : '');
  const get = (url) => fetch(url, {cache: 'no-store'}).then((r) => {
    if (!r.ok) return r.text().then((t) => { throw new Error(t.trim() || r.statusText); });
    return r.json();
  });
  function cell(tr, text, cls) {
    const td = tr.insertCell();
    if (text instanceof Node) td.appendChild(text); else td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }
  function link(href, text) {
    const a = document.createElement('a');
    a.href = href;
    a.textContent = text;
    return a;
  }

  function renderList(rows) {
    $('list-panel').hidden = false;
    const body = $('traces').tBodies[0];
    body.textContent = '';
    for (const t of rows) {
      const tr = body.insertRow();
      cell(tr, link('/trace/' + t.trace_id, t.trace_id), 'id');
      cell(tr, t.root || '(no exported span)', t.root ? '' : 'muted');
      cell(tr, t.service || '');
      cell(tr, time(t.start));
      cell(tr, t.wall_ns ? ms(t.wall_ns) : '', 'num');
      cell(tr, String(t.spans), 'num');
      cell(tr, String(t.sampled_spans), 'num');
      cell(tr, ms(t.on_cpu_ns), 'num');
      cell(tr, ms(t.off_cpu_ns), 'num');
    }
    $('list-info').textContent = rows.length + ' traces, newest first';
    root.dataset.traces = String(rows.length);
  }

  function shareText(ns, share, exported) {
    if (!ns) return '';
    return ms(ns) + (exported && share ? ' (' + pct(share) + ')' : '');
  }

  function renderTrace(tv) {
    $('trace-panel').hidden = false;
    const body = $('spans').tBodies[0];
    body.textContent = '';
    const t0 = tv.start ? Date.parse(tv.start) : 0;
    const span = Math.max(1, (tv.end ? Date.parse(tv.end) : t0) - t0);
    const gantt = $('gantt');
    gantt.textContent = '';
    for (const s of tv.spans) {
      const tr = body.insertRow();
      tr.dataset.spanId = s.span_id;
      const name = cell(tr, s.exported ? s.name : 'not exported: samples only', s.exported ? 'name' : 'name muted');
      name.style.paddingLeft = (4 + 14 * s.depth) + 'px';
      if (s.exported && s.samples === 0) {
        const tag = document.createElement('span');
        tag.className = 'tag';
        tag.textContent = 'no samples';
        name.appendChild(tag);
      }
      cell(tr, s.service || '');
      cell(tr, s.span_id, 'id');
      cell(tr, time(s.exported ? s.start : s.first_sample));
      cell(tr, s.exported ? ms(s.wall_ns) : '', 'num');
      cell(tr, shareText(s.on_cpu_ns, s.on_cpu_share, s.exported), 'num on');
      cell(tr, shareText(s.off_cpu_ns, s.off_cpu_share, s.exported), 'num off');
      const reasons = Object.entries(s.off_cpu_by_reason || {}).sort((a, b) => b[1] - a[1])
        .map(([r, v]) => r + ' ' + ms(v)).join(', ');
      const states = Object.entries(s.off_cpu_by_state || {}).map(([k, v]) => k + ' ' + ms(v)).join(', ');
      // Samples that carried the span's ids outside its exported time
      // (a goroutine that inherited its labels and outlived it) are
      // left out of its figures and said here.
      const outside = s.outside_span_ns ? ' · outside the span: ' + ms(s.outside_span_ns) + ' in ' + s.outside_span_samples + ' samples' : '';
      cell(tr, reasons + (states ? ' · ' + states : '') + outside, 'reasons');
      cell(tr, String(s.samples), 'num');
      const fl = document.createElement('span');
      if (s.samples) {
        for (const k of ['on', 'off']) {
          const b = document.createElement('button');
          b.type = 'button';
          b.textContent = k + '-CPU';
          b.addEventListener('click', () => { flameSel = {span: s.span_id, kind: k}; loadFlame(); });
          fl.append(b, ' ');
        }
        fl.appendChild(link('/?trace_id=' + tv.trace_id + '&span_id=' + s.span_id, 'in the window'));
      }
      cell(tr, fl);
      if (s.exported && tv.start) {
        const bar = document.createElement('div');
        bar.className = 'bar' + (s.samples ? '' : ' nosamples');
        const l = (Date.parse(s.start) - t0) / span, w = Math.max(0.002, (Date.parse(s.end) - Date.parse(s.start)) / span);
        bar.style.marginLeft = (100 * l).toFixed(2) + '%';
        bar.style.width = (100 * w).toFixed(2) + '%';
        const on = document.createElement('div');
        on.className = 'on';
        on.style.width = (100 * Math.min(1, s.on_cpu_share)).toFixed(1) + '%';
        const off = document.createElement('div');
        off.className = 'off';
        off.style.width = (100 * Math.min(1 - Math.min(1, s.on_cpu_share), s.off_cpu_share)).toFixed(1) + '%';
        bar.append(on, off);
        bar.title = s.name + ' · ' + ms(s.wall_ns);
        const row = document.createElement('div');
        row.className = 'grow';
        row.appendChild(bar);
        gantt.appendChild(row);
      }
    }
    $('trace-info').textContent = tv.spans.length + ' spans from ' + (tv.services.join(', ') || 'no named service') +
      ' · ' + tv.spans_without_samples + ' exported without samples · ' + tv.unexported_spans + ' only in samples';
    root.dataset.spans = String(tv.spans.length);
    if (!flameSel) {
      const first = tv.spans.find((s) => s.samples);
      if (first) flameSel = {span: first.span_id, kind: first.on_cpu_ns || !first.off_cpu_ns ? 'on' : 'off'};
    }
    if (flameSel) loadFlame();
  }

  function loadFlame() {
    document.querySelectorAll('input[name=kind]').forEach((r) => { r.checked = r.value === flameSel.kind; });
    return get('/api/trace/' + traceID + '/flame?span_id=' + flameSel.span + '&kind=' + flameSel.kind).then((f) => {
      $('flame-panel').hidden = false;
      $('flame-info').textContent = 'span ' + flameSel.span + ' · ' + flameSel.kind + '-CPU · ' + ms(f.value);
      drawFlame($('flame'), f);
    });
  }

  // drawFlame lays the tree out as an icicle of absolutely placed divs,
  // root on top, skipping frames narrower than half a pixel.
  function drawFlame(el, tree) {
    el.textContent = '';
    const width = el.clientWidth || 1000, rowH = 17;
    let depthMax = 0, n = 0;
    const walk = (node, x, depth) => {
      const w = tree.value ? (node.value / tree.value) * width : 0;
      if (w < 0.5 || n > 5000) return;
      n++;
      depthMax = Math.max(depthMax, depth);
      const d = document.createElement('div');
      d.className = 'frame';
      d.style.left = x.toFixed(1) + 'px';
      d.style.top = (depth * rowH) + 'px';
      d.style.width = Math.max(0, w - 1).toFixed(1) + 'px';
      d.textContent = node.name;
      d.title = node.name + ' · ' + ms(node.value) + ' · ' + pct(node.value / tree.value);
      el.appendChild(d);
      let cx = x;
      for (const c of node.children || []) {
        walk(c, cx, depth + 1);
        cx += tree.value ? (c.value / tree.value) * width : 0;
      }
    };
    walk(tree, 0, 0);
    el.style.height = ((depthMax + 1) * rowH) + 'px';
    root.dataset.flameFrames = String(n);
  }

  function showWindow(w) {
    const mib = (n) => (n / 1048576).toFixed(0) + ' MiB';
    if (w.store) {
      $('window').textContent = storeLine(w);
      $('window').classList.toggle('failing', w.store.status !== 'ok');
      return;
    }
    $('window').textContent = 'live window: ' + w.samples.toLocaleString('en-US') + ' samples (' + mib(w.bytes) + '), ' +
      w.spans.toLocaleString('en-US') + ' spans, ' + w.traces.toLocaleString('en-US') + ' traces · evicted ' +
      (w.evicted_samples_size + w.evicted_samples_bytes + w.evicted_samples_age).toLocaleString('en-US') + ' samples, ' +
      (w.evicted_spans_size + w.evicted_spans_age).toLocaleString('en-US') + ' spans (limits ' +
      w.max_samples.toLocaleString('en-US') + ' samples, ' + mib(w.max_bytes) + ', ' + w.max_spans.toLocaleString('en-US') + ' spans, ' +
      w.max_age_seconds + ' s)' + (w.rejected ? ' · rejected ' + w.rejected + ' exports' : '');
  }
  // storeLine is the line of a database store (serve --store): its
  // tables, this instance's buffer and drops, and what is wrong.
  function storeLine(w) {
    const s = w.store;
    const n = (v) => v.toLocaleString('en-US');
    let t = 'store ' + s.url + ': ' + s.status.toUpperCase() + ' · ' + n(w.samples) + ' samples, ' + n(w.spans) + ' spans, ' +
      n(w.traces) + ' traces, ' + (s.disk_bytes / 1048576).toFixed(1) + ' MiB on disk · buffered ' + n(s.buffered_batches) +
      ' exports (' + (s.buffered_bytes / 1048576).toFixed(1) + ' of ' + (s.max_buffer_bytes / 1048576).toFixed(0) + ' MiB), dropped ' +
      n(s.dropped_samples) + ' samples, ' + n(s.dropped_spans) + ' spans, ' + n(s.duplicate_batches) + ' retried exports not counted twice';
    if (s.error) t += ' · failing since ' + s.error_since + ': ' + s.error;
    if (w.rejected) t += ' · rejected ' + w.rejected + ' exports';
    return t;
  }
  let version = null;
  function load() {
    const t = performance.now();
    const p = traceID ? get('/api/trace/' + traceID).then(renderTrace) : get('/api/traces?limit=1000').then(renderList);
    return p.then(() => {
      $('status').textContent = '';
      root.dataset.renderMs = (performance.now() - t).toFixed(1);
      $('perf').textContent = 'loaded and drawn in ' + root.dataset.renderMs + ' ms';
      root.dataset.ready = '1';
    }).catch((err) => {
      $('status').textContent = err.message;
      root.dataset.ready = '1';
    });
  }
  function poll() {
    get('/api/window').then((w) => {
      showWindow(w);
      if (version !== null && w.version !== version && $('follow').checked) load();
      version = w.version;
    }).catch((err) => { $('window').textContent = 'live window: ' + err.message; });
  }
  document.querySelectorAll('input[name=kind]').forEach((r) => r.addEventListener('change', () => {
    if (flameSel) { flameSel.kind = r.value; loadFlame(); }
  }));
  load();
  poll();
  setInterval(poll, 2000);
})();
