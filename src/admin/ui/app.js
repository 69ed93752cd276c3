// hookgate inspector. Plain JavaScript, no framework, no build step: it reads the admin
// endpoints of the listener that served it. Everything a delivery carries is written
// into the page as text (textContent), never parsed as markup.
'use strict';

(() => {
  const TOKEN_KEY = 'hookgate.admin_token';
  const OUTCOMES = [
    'forwarded', 'queued', 'duplicate', 'filtered', 'handshake', 'forwarded_unclaimed',
    'in_flight', 'mismatch', 'upstream_rejected', 'upstream_error', 'missing_header',
    'malformed_header', 'bad_signature', 'stale_timestamp', 'needs_public_url',
    'certificate_unavailable', 'handshake_refused', 'no_event_id', 'bad_body', 'too_large',
    'body_timeout', 'method_not_allowed', 'no_route', 'store_error', 'overloaded',
    'rate_limited', 'client_busy', 'request_timeout',
  ];
  const GOOD = new Set(['forwarded', 'queued', 'duplicate', 'filtered', 'handshake', 'delivered']);
  const SOSO = new Set(['in_flight', 'forwarded_unclaimed', 'upstream_rejected', 'overloaded',
    'rate_limited', 'client_busy', 'retrying', 'pending']);

  // The token: this tab only (sessionStorage), sent as a Bearer header, never a cookie.
  let token = null;
  try { token = sessionStorage.getItem(TOKEN_KEY); } catch (_) { token = null; }
  // The open view's cleanup (its requests and stream are aborted on leaving it).
  let leave = null;
  // Route names for the filters' suggestions, from /overview.
  let knownRoutes = [];
  // Whether the gateway records deliveries ([log] enabled), from /overview.
  let logEnabled = true;

  const $ = (id) => document.getElementById(id);

  // Control characters (C0, DEL, C1) and the Unicode bidirectional overrides and
  // isolates, written out as \u202e (as the command line writes them), so text from
  // a request cannot reorder or hide what the page shows. A body's block keeps its
  // tabs and line breaks.
  const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
  const UNSAFE_IN_BLOCK = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
  const writtenOut = (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0');
  const printable = (s) => String(s).replace(UNSAFE, writtenOut);
  const printableBlock = (s) => String(s).replace(UNSAFE_IN_BLOCK, writtenOut);

  // el('a', {href: '#', class: 'x'}, 'text', node, ...): an element with text children
  // (made printable).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = printable(v);
      else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else if (k in e && typeof v !== 'string') e[k] = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(printable(c)));
    }
    return e;
  }

  class AuthNeeded extends Error {}

  function authHeaders(extra) {
    const h = Object.assign({}, extra);
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  // One admin request: {status, ok, data}; a 401 shows the token prompt.
  async function api(method, path, signal) {
    const headers = authHeaders({ Accept: 'application/json' });
    // The admin guard refuses a POST without it (no other site can add it).
    if (method !== 'GET') headers['X-Requested-By'] = 'hookgate';
    let resp;
    try {
      resp = await fetch(path, { method, headers, signal, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new Error('the admin listener did not answer (' + e.message + ')');
    }
    if (resp.status === 401) {
      needToken(token ? 'The admin listener refused the token.' : null);
      throw new AuthNeeded();
    }
    const text = await resp.text();
    let data = null;
    try { data = JSON.parse(text); } catch (_) { data = null; }
    return { status: resp.status, ok: resp.ok, data, text };
  }

  function failure(r, what) {
    const why = r.data && (r.data.error || r.data.status) ? (r.data.error || r.data.status) : r.text.trim();
    return what + ': ' + r.status + (why ? ' — ' + why : '');
  }

  function say(message, isError) {
    const s = $('status');
    s.textContent = printable(message || '');
    s.classList.toggle('error', !!isError);
  }

  function needToken(message) {
    if (leave) { leave(); leave = null; }
    $('view').replaceChildren();
    say('');
    $('main').hidden = true;
    $('nav').hidden = true;
    $('login').hidden = false;
    const err = $('login-error');
    err.hidden = !message;
    err.textContent = message || '';
    $('token').value = '';
    $('token').focus();
  }

  function showApp() {
    $('login').hidden = true;
    $('main').hidden = false;
    $('nav').hidden = false;
    $('forget').hidden = !token;
  }

  // --- formatting -------------------------------------------------------------------

  const pad = (n, w) => String(n).padStart(w || 2, '0');
  function fmtTime(ms) {
    if (ms === undefined || ms === null) return '—';
    const d = new Date(Number(ms));
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3);
  }
  function timeEl(ms) {
    if (ms === undefined || ms === null) return '—';
    return el('time', { datetime: new Date(Number(ms)).toISOString(), title: new Date(Number(ms)).toISOString() }, fmtTime(ms));
  }
  function fmtAge(ms) {
    if (ms === undefined || ms === null) return '—';
    const s = Math.round(ms / 1000);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  }
  function fmtMicros(us) {
    if (us === undefined || us === null) return '—';
    if (us < 1000) return us + ' µs';
    if (us < 1e6) return (us / 1000).toFixed(1) + ' ms';
    return (us / 1e6).toFixed(2) + ' s';
  }
  function fmtBytes(n) {
    if (n < 1024) return n + ' B';
    if (n < 1048576) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1048576).toFixed(1) + ' MiB';
  }
  function badge(word) {
    const w = String(word || '—');
    const kind = GOOD.has(w) ? 'ok' : SOSO.has(w) ? 'warn' : (w === '—' ? '' : 'bad');
    return el('span', { class: 'badge ' + kind, 'data-outcome': w }, w);
  }
  const enc = encodeURIComponent;

  // A body, pretty-printed when it is JSON, with buttons to switch to the raw text.
  function bodyBlock(text, isBase64, label) {
    const wrap = el('div', { class: 'bodyblock' });
    let pretty = null;
    if (!isBase64) {
      try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { pretty = null; }
    }
    const pre = el('pre', { class: 'body', tabindex: '0', 'aria-label': label });
    pre.textContent = printableBlock(pretty !== null ? pretty : text);
    if (pretty !== null) {
      const prettyBtn = el('button', { type: 'button', 'aria-pressed': 'true', class: 'view-pretty' }, 'Pretty');
      const rawBtn = el('button', { type: 'button', 'aria-pressed': 'false', class: 'view-raw' }, 'Raw');
      const pick = (raw) => {
        pre.textContent = printableBlock(raw ? text : pretty);
        prettyBtn.setAttribute('aria-pressed', String(!raw));
        rawBtn.setAttribute('aria-pressed', String(raw));
      };
      prettyBtn.addEventListener('click', () => pick(false));
      rawBtn.addEventListener('click', () => pick(true));
      wrap.append(el('div', { class: 'toggle', role: 'group', 'aria-label': label + ' view' }, prettyBtn, rawBtn));
    }
    wrap.append(pre);
    return wrap;
  }

  function facts(pairs) {
    const dl = el('dl', { class: 'facts' });
    for (const [k, v] of pairs) {
      if (v === undefined || v === null || v === '') continue;
      dl.append(el('dt', {}, k), el('dd', {}, v));
    }
    return dl;
  }

  // A button that acts on a second press, so one stray press deletes nothing.
  function confirmButton(label, confirmLabel, cls, act) {
    const b = el('button', { type: 'button', class: cls }, label);
    let armed = null;
    b.addEventListener('click', async () => {
      if (!armed) {
        b.textContent = confirmLabel;
        armed = setTimeout(() => { armed = null; b.textContent = label; }, 5000);
        return;
      }
      clearTimeout(armed);
      armed = null;
      b.textContent = label;
      b.disabled = true;
      try { await act(); } finally { b.disabled = false; }
    });
    return b;
  }

  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

  // --- the live stream ----------------------------------------------------------------

  // Reads /deliveries/stream (Server-Sent Events) with fetch: EventSource cannot send an
  // Authorization header. Reconnects with a growing pause until `signal` aborts.
  async function follow(query, onRecord, onState, signal, onLagged) {
    let pause = 1000;
    while (!signal.aborted) {
      try {
        const resp = await fetch('/deliveries/stream' + (query ? '?' + query : ''), {
          headers: authHeaders({ Accept: 'text/event-stream' }), signal, cache: 'no-store', credentials: 'omit',
        });
        if (resp.status === 401) { needToken(token ? 'The admin listener refused the token.' : null); return; }
        if (!resp.ok || !resp.body) throw new Error('HTTP ' + resp.status);
        onState(true);
        pause = 1000;
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          buf = buf.replace(/\r\n/g, '\n');
          let cut;
          while ((cut = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            let event = 'message';
            const data = [];
            for (const line of block.split('\n')) {
              if (line === '' || line.startsWith(':')) continue;
              const c = line.indexOf(':');
              const field = c < 0 ? line : line.slice(0, c);
              let v = c < 0 ? '' : line.slice(c + 1);
              if (v.startsWith(' ')) v = v.slice(1);
              if (field === 'event') event = v;
              else if (field === 'data') data.push(v);
            }
            if (event === 'lagged' && onLagged) onLagged(Number(data.join('')) || 0);
            if (event === 'delivery' && data.length) {
              let rec = null;
              try { rec = JSON.parse(data.join('\n')); } catch (_) { rec = null; }
              if (rec) onRecord(rec);
            }
          }
        }
      } catch (e) {
        if (signal.aborted) return;
      }
      onState(false);
      await sleep(pause, signal);
      pause = Math.min(pause * 2, 15000);
    }
  }

  // --- views ----------------------------------------------------------------------------

  function heading(text) {
    document.title = text + ' · hookgate inspector';
    return el('h1', { tabindex: '-1' }, text);
  }

  function setView(...nodes) {
    $('view').replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
  }

  async function loadRoutes(signal) {
    try {
      const r = await api('GET', '/overview', signal);
      if (r.ok && r.data && Array.isArray(r.data.routes)) {
        knownRoutes = r.data.routes;
        logEnabled = !(r.data.log && r.data.log.enabled === false);
        return r.data.routes;
      }
    } catch (e) {
      if (e instanceof AuthNeeded || e.name === 'AbortError') throw e;
    }
    return null;
  }

  function routeList(id) {
    return el('datalist', { id }, knownRoutes.map((r) => el('option', { value: r.route })));
  }

  const FILTERS = ['route', 'outcome', 'event_type', 'event_id', 'since', 'before', 'limit'];

  // datetime-local ⇄ the API's milliseconds.
  function toLocalInput(ms) {
    const d = new Date(Number(ms));
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + 'T' + pad(d.getHours()) + ':' + pad(d.getMinutes());
  }

  function deliveryRow(rec, fresh) {
    const id = rec.delivery_id;
    const tr = el('tr', { 'data-delivery-id': id, 'data-event-id': rec.event_id, class: fresh ? 'fresh' : '' },
      el('td', { class: 'time' }, el('a', { href: '#/delivery/' + enc(id), 'aria-label': 'Delivery ' + id + ' at ' + fmtTime(rec.received_at) }, fmtTime(rec.received_at))),
      el('td', {}, rec.route || '—'),
      el('td', {}, badge(rec.outcome)),
      el('td', { class: 'num' }, rec.status === undefined || rec.status === null ? '—' : String(rec.status)),
      el('td', { class: 'hide-narrow' }, rec.event_type || '—'),
      el('td', { class: 'mono' }, rec.event_id || '—'),
      el('td', { class: 'num hide-narrow' }, fmtMicros(rec.duration_us)),
      el('td', { class: 'hide-narrow' }, rec.reason || ''));
    return tr;
  }

  // The list's filters: a form that sets the page's address (its hash).
  function filtersForm(params) {
    const form = el('form', { class: 'filters', 'aria-label': 'Filters' });
    const field = (name, label, input) => el('div', { class: 'field' }, el('label', { for: 'f-' + name }, label), input);
    const val = (k) => params.get(k) || '';
    const inputs = {
      route: el('input', { id: 'f-route', name: 'route', value: val('route'), list: 'routes-list', autocomplete: 'off' }),
      outcome: el('input', { id: 'f-outcome', name: 'outcome', value: val('outcome'), list: 'outcomes-list', autocomplete: 'off' }),
      event_type: el('input', { id: 'f-event_type', name: 'event_type', value: val('event_type'), autocomplete: 'off' }),
      event_id: el('input', { id: 'f-event_id', name: 'event_id', value: val('event_id'), autocomplete: 'off' }),
      since: el('input', { id: 'f-since', name: 'since', type: 'datetime-local', value: params.get('since') ? toLocalInput(params.get('since')) : '' }),
      before: el('input', { id: 'f-before', name: 'before', type: 'datetime-local', value: params.get('before') ? toLocalInput(params.get('before')) : '' }),
      limit: el('input', { id: 'f-limit', name: 'limit', type: 'number', min: '1', max: '500', value: val('limit') || '50' }),
    };
    form.append(
      field('route', 'Route', inputs.route), routeList('routes-list'),
      field('outcome', 'Outcome', inputs.outcome),
      el('datalist', { id: 'outcomes-list' }, OUTCOMES.map((o) => el('option', { value: o }))),
      field('event_type', 'Event type', inputs.event_type),
      field('event_id', 'Event ID', inputs.event_id),
      field('since', 'Since', inputs.since),
      field('before', 'Before', inputs.before),
      field('limit', 'Limit', inputs.limit),
      el('div', { class: 'actions' },
        el('button', { type: 'submit' }, 'Apply'),
        el('button', { type: 'button', class: 'secondary', on: { click: () => { location.hash = '#/deliveries'; } } }, 'Clear')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams();
      for (const k of FILTERS) {
        let v = inputs[k].value.trim();
        if (!v) continue;
        if (k === 'since' || k === 'before') {
          const ms = new Date(v).getTime();
          if (Number.isNaN(ms)) continue;
          v = String(ms);
        }
        if (k === 'limit' && v === '50') continue;
        q.set(k, v);
      }
      const hash = '#/deliveries' + (q.toString() ? '?' + q : '');
      if (location.hash === hash) route(); else location.hash = hash;
    });
    return form;
  }

  // The list's table around its body.
  function deliveriesTable(tbody) {
    return el('div', { class: 'table-wrap' }, el('table', {},
      el('caption', { class: 'note', hidden: true }, 'Deliveries, newest first'),
      el('thead', {}, el('tr', {},
        el('th', { scope: 'col' }, 'Received'), el('th', { scope: 'col' }, 'Route'),
        el('th', { scope: 'col' }, 'Outcome'), el('th', { scope: 'col', class: 'num' }, 'Status'),
        el('th', { scope: 'col', class: 'hide-narrow' }, 'Event type'), el('th', { scope: 'col' }, 'Event ID'),
        el('th', { scope: 'col', class: 'num hide-narrow' }, 'Took'), el('th', { scope: 'col', class: 'hide-narrow' }, 'Reason'))),
      tbody));
  }

  async function deliveriesView(params, signal) {
    // The route names, for the route filter's suggestions.
    await loadRoutes(signal);
    const form = filtersForm(params);

    const live = el('span', { class: 'live', id: 'live' }, 'Connecting…');
    const count = el('span', { class: 'note', id: 'count' });
    const tbody = el('tbody', { id: 'deliveries' });
    const table = deliveriesTable(tbody);
    const empty = el('p', { class: 'empty', hidden: true }, 'No deliveries match.');
    const more = el('button', { type: 'button', class: 'secondary', hidden: true }, 'Older deliveries');
    const off = logEnabled ? null : el('p', { class: 'notice', id: 'log-off', role: 'note' },
      'The delivery log is off ([log] enabled = false in the gateway\'s config): requests are only counted, in ',
      el('a', { href: '#/routes' }, 'the routes overview'), ', and none is listed here.');
    setView(heading('Deliveries'), off, form, el('div', { class: 'bar' }, live, count), table, empty, el('div', { class: 'bar' }, more));

    const seen = new Set();
    const shown = () => {
      empty.hidden = seen.size > 0;
      count.textContent = seen.size + ' shown';
    };
    const add = (rec, fresh) => {
      if (!rec || !rec.delivery_id || seen.has(rec.delivery_id)) return;
      seen.add(rec.delivery_id);
      const row = deliveryRow(rec, fresh);
      if (fresh) tbody.prepend(row); else tbody.append(row);
      shown();
    };
    const query = new URLSearchParams();
    for (const k of FILTERS) if (params.get(k)) query.set(k, params.get(k));
    const filterOnly = new URLSearchParams(query);
    filterOnly.delete('limit');
    filterOnly.delete('before');

    // The stream first, then the page: a delivery made between the two is not missed
    // (one seen twice is shown once).
    if (!params.get('before')) {
      follow(filterOnly.toString(), (rec) => add(rec, true), (on) => {
        live.className = 'live ' + (on ? 'on' : 'off');
        live.textContent = on ? 'Live' : 'Reconnecting…';
      }, signal, (skipped) => reload(skipped));
    } else {
      live.className = 'live';
      live.textContent = 'Not live (a “before” filter is set)';
    }

    let cursor = null;
    const want = Number(params.get('limit')) || 50;
    // One page: the listener reads a bounded number of records per request, so a page
    // may come back short with the cursor still set; follow it a few times.
    const page = async () => {
      let got = 0;
      for (let i = 0; i < 20; i++) {
        const q = new URLSearchParams(query);
        if (cursor) q.set('cursor', cursor);
        const r = await api('GET', '/deliveries?' + q, signal);
        if (r.status === 404 && !(r.data && r.data.deliveries)) {
          say('This gateway keeps no delivery log (GET /deliveries answered 404).', true);
          return;
        }
        if (!r.ok) { say(failure(r, 'Loading deliveries'), true); return; }
        const recs = r.data.deliveries || [];
        for (const rec of recs) add(rec, false);
        got += recs.length;
        cursor = r.data.next_cursor || null;
        if (!cursor || got >= want) break;
      }
      more.hidden = !cursor;
      shown();
    };
    // A reader that fell behind the stream missed some: read the list again.
    const reload = (skipped) => {
      say(skipped + ' deliveries came faster than this page could show them; the list was read again.');
      seen.clear();
      tbody.replaceChildren();
      cursor = null;
      page().catch(quiet);
    };
    more.addEventListener('click', () => { page().catch(quiet); });
    await page();
  }

  async function deliveryView(id, signal) {
    const r = await api('GET', '/deliveries/' + enc(id), signal);
    const back = el('p', {}, el('a', { href: '#/deliveries' }, '← Deliveries'));
    if (!r.ok) {
      setView(heading('Delivery'), back);
      say(r.status === 404 ? 'No delivery ' + id + ' in the log (it may have aged out).' : failure(r, 'Loading the delivery'), true);
      return;
    }
    const d = r.data;
    const nodes = [heading('Delivery ' + d.delivery_id), back];
    if (d.reason) {
      nodes.push(el('div', { class: 'panel reason', id: 'reason', role: 'note' },
        el('strong', {}, 'Refused: '), d.reason));
    }
    const link = (text, hash) => el('a', { href: hash }, text);
    nodes.push(el('div', { class: 'panel' }, facts([
      ['Received', timeEl(d.received_at)],
      ['Route', d.route ? link(d.route, '#/deliveries?route=' + enc(d.route)) : null],
      ['Provider', d.provider],
      ['Outcome', badge(d.outcome)],
      ['Answered', d.status === undefined || d.status === null ? null : String(d.status)],
      ['Took', fmtMicros(d.duration_us)],
      ['From', d.peer],
      ['Secret matched', d.secret],
      ['Event ID', d.event_id ? link(d.event_id, '#/deliveries?event_id=' + enc(d.event_id)) : null],
      ['Event type', d.event_type],
      ["Provider's delivery ID", d.provider_delivery_id],
      ['Replay of', d.replay_of ? link(d.replay_of, '#/delivery/' + enc(d.replay_of)) : null],
      ['Queued event', d.queue ? link(d.queue.event_id, '#/queues/' + enc(d.queue.route) + '/' + enc(d.queue.event_id)) : null],
    ])));

    nodes.push(el('h2', {}, 'Request'));
    nodes.push(el('p', { class: 'mono', id: 'request-line' }, (d.method || '') + ' ' + (d.path || '')));
    const headers = Array.isArray(d.headers) ? d.headers : [];
    nodes.push(el('h3', {}, 'Headers'));
    nodes.push(el('div', { class: 'table-wrap' }, el('table', { class: 'headers', id: 'headers' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Name'), el('th', { scope: 'col' }, 'Value'))),
      el('tbody', {}, headers.map(([n, v]) => el('tr', {}, el('td', {}, n),
        el('td', { class: v === '[redacted]' ? 'redacted' : '' }, v)))))));
    nodes.push(el('h3', {}, 'Body'));
    if (d.body === null || d.body === undefined) {
      nodes.push(el('p', { class: 'note', id: 'body-none' }, d.reason
        ? 'Not kept: the delivery was refused (' + fmtBytes(d.body_bytes || 0) + ').'
        : 'Not kept (log.bodies = "none"); it was ' + fmtBytes(d.body_bytes || 0) + '.'));
    } else {
      if (d.body_truncated) nodes.push(el('p', { class: 'note' }, 'Cut at log.max_body: the first ' + fmtBytes(d.body.length) + ' of ' + fmtBytes(d.body_bytes) + '.'));
      if (d.body_base64) nodes.push(el('p', { class: 'note' }, 'Not UTF-8: shown as base64.'));
      const block = bodyBlock(d.body, d.body_base64, 'Request body');
      block.id = 'body';
      nodes.push(block);
    }

    nodes.push(el('h2', {}, 'Answer'));
    nodes.push(el('p', {}, 'hookgate answered ', el('strong', {}, String(d.status ?? '—')), ' (', badge(d.outcome), ').'));
    if (d.answer) {
      const block = bodyBlock(d.answer, false, 'Answer body');
      block.id = 'answer';
      nodes.push(block);
    }

    if (Array.isArray(d.destinations) && d.destinations.length) {
      nodes.push(el('h2', {}, 'Destinations'));
      const cards = el('div', { class: 'cards', id: 'destinations' });
      for (const dest of d.destinations) cards.append(destinationCard(d.queue ? d.queue.route : d.route, d.queue ? d.queue.event_id : d.event_id, dest, () => route(true)));
      nodes.push(cards);
    }

    nodes.push(el('h2', {}, 'Replay'));
    if (d.body === null || d.body === undefined || d.body_truncated) {
      nodes.push(el('p', { class: 'note' }, 'Nothing to replay: the whole body was not kept for this delivery.'));
    } else {
      const form = el('form', { class: 'bar', id: 'replay' });
      let pick = null;
      if (Array.isArray(d.destinations) && d.destinations.length > 1) {
        pick = el('select', { id: 'replay-destination' },
          el('option', { value: '' }, 'where its type goes'),
          d.destinations.map((x) => el('option', { value: x.destination || '' }, x.destination || '(the route)')));
        form.append(el('label', { for: 'replay-destination' }, 'To'), pick);
      }
      form.append(el('button', { type: 'submit' }, d.queue ? 'Queue again' : 'Replay to the upstream'),
        el('span', { class: 'note' }, 'Sent with the same Idempotency-Key, recorded as a replay.'));
      const result = el('p', { id: 'replay-result', role: 'status' });
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        const q = pick && pick.value ? '?destination=' + enc(pick.value) : '';
        const rr = await api('POST', '/deliveries/' + enc(d.delivery_id) + '/replay' + q, signal);
        if (!rr.ok) { result.className = 'error'; result.replaceChildren(failure(rr, 'Replay')); return; }
        result.className = '';
        result.replaceChildren('Replayed: ', badge(rr.data.outcome), ' ', String(rr.data.status ?? ''), ' — ',
          el('a', { href: '#/delivery/' + enc(rr.data.delivery_id) }, 'the replay\'s record'));
      });
      nodes.push(form, result);
    }
    setView(...nodes);
  }

  // One destination's state and attempts for a queued event, with retry and purge.
  function destinationCard(routeName, eventId, dest, reload) {
    const name = dest.destination || routeName;
    const attempts = Array.isArray(dest.attempts) ? dest.attempts : (dest.history || []);
    const count = Array.isArray(dest.attempts) ? dest.attempts.length : dest.attempts;
    const card = el('div', { class: 'panel', 'data-destination': name },
      el('h3', {}, name, ' ', badge(dest.state)),
      facts([
        ['Attempts', count === undefined ? null : String(count)],
        ['Next try', dest.next_at_ms ? timeEl(dest.next_at_ms) : null],
        ['Dead because', dest.dead_reason],
        ['Waiting behind', dest.order_key ? 'order key ' + dest.order_key : null],
      ]));
    if (attempts.length) {
      card.append(el('div', { class: 'table-wrap' }, el('table', {},
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'At'), el('th', { scope: 'col' }, 'Result'),
          el('th', { scope: 'col', class: 'num' }, 'Status'), el('th', { scope: 'col', class: 'num' }, 'Took'), el('th', { scope: 'col' }, 'Error'))),
        el('tbody', {}, attempts.map((a) => el('tr', {},
          el('td', { class: 'time' }, timeEl(a.at_ms)),
          el('td', {}, (a.kind ? a.kind + ': ' : '') + (a.result || '') + (a.receipt ? ' (' + a.receipt + ')' : '')),
          el('td', { class: 'num' }, a.status ? String(a.status) : '—'),
          el('td', { class: 'num' }, a.duration_ms === undefined ? '—' : a.duration_ms + ' ms'),
          el('td', {}, a.error || '')))))));
    }
    const q = '?event_id=' + enc(eventId) + (dest.destination ? '&destination=' + enc(dest.destination) : '');
    const path = '/events/' + enc(routeName);
    const bar = el('div', { class: 'bar' });
    if (dest.state === 'dead' || dest.state === 'retrying') {
      bar.append(el('button', { type: 'button', class: 'retry', on: { click: async () => {
        const r = await api('POST', path + '/retry' + q);
        say(r.ok ? 'Queued again: ' + eventId + ' to ' + name + '.' : failure(r, 'Retry'), !r.ok);
        if (r.ok) reload();
      } } }, 'Retry now'));
    }
    if (dest.state !== 'delivered') {
      bar.append(confirmButton('Purge', 'Press again to purge', 'danger purge', async () => {
        const r = await api('POST', path + '/purge' + q);
        say(r.ok ? 'Purged: ' + eventId + ' from ' + name + '.' : failure(r, 'Purge'), !r.ok);
        if (r.ok) reload();
      }));
    }
    if (bar.childElementCount) card.append(bar);
    return card;
  }

  async function queuesView(signal) {
    const routes = await loadRoutes(signal);
    const open = el('form', { class: 'bar', id: 'open-queue' },
      el('label', { for: 'q-route' }, 'Open a route\'s queue'),
      el('input', { id: 'q-route', list: 'queue-routes', required: true, autocomplete: 'off' }),
      el('datalist', { id: 'queue-routes' }, (routes || []).filter((r) => r.delivery === 'queue').map((r) => el('option', { value: r.route }))),
      el('button', { type: 'submit' }, 'Open'));
    open.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = $('q-route').value.trim();
      if (v) location.hash = '#/queues/' + enc(v);
    });
    const nodes = [heading('Queues and dead letters')];
    if (routes === null) {
      nodes.push(el('p', { class: 'note' }, 'The routes overview is not available; name a queue route to open it.'));
    } else {
      const queued = routes.filter((r) => r.delivery === 'queue');
      if (!queued.length) nodes.push(el('p', { class: 'empty' }, 'No route has delivery = "queue": deliveries are forwarded while the provider waits.'));
      const cards = el('div', { class: 'cards' });
      for (const r of queued) {
        const rows = (r.queues || []).map((q) => el('tr', {},
          el('td', {}, q.destination),
          el('td', { class: 'num' }, String(q.depth ?? '—')),
          el('td', { class: 'num' }, q.dead ? el('a', { href: '#/queues/' + enc(r.route) + '?state=dead&destination=' + enc(q.destination) }, String(q.dead)) : '0'),
          el('td', { class: 'num' }, fmtAge(q.oldest_undelivered_age_ms))));
        cards.append(el('div', { class: 'panel', 'data-route': r.route },
          el('h2', {}, el('a', { href: '#/queues/' + enc(r.route) }, r.route), ' ', el('span', { class: 'note' }, r.provider || '')),
          el('div', { class: 'table-wrap' }, el('table', {},
            el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Destination'), el('th', { scope: 'col', class: 'num' }, 'Waiting'),
              el('th', { scope: 'col', class: 'num' }, 'Dead'), el('th', { scope: 'col', class: 'num' }, 'Oldest waiting'))),
            el('tbody', {}, rows))),
          el('p', {}, el('a', { href: '#/queues/' + enc(r.route) + '?state=dead' }, 'Dead letters'))));
      }
      nodes.push(cards);
    }
    nodes.push(open);
    setView(...nodes);
  }

  async function queueView(routeName, params, signal) {
    const state = params.get('state') || '';
    const destination = params.get('destination') || '';
    const q = new URLSearchParams({ limit: params.get('limit') || '100' });
    if (state) q.set('state', state);
    if (destination) q.set('destination', destination);
    const base = '/events/' + enc(routeName);
    const r = await api('GET', base + '?' + q, signal);
    const title = heading('Queue of ' + routeName);
    const back = el('p', {}, el('a', { href: '#/queues' }, '← Queues'), ' · ',
      el('a', { href: '#/deliveries?route=' + enc(routeName) }, 'Deliveries on this route'));
    if (!r.ok) {
      setView(title, back);
      say(failure(r, 'Loading the queue'), true);
      return;
    }
    const form = el('form', { class: 'filters', 'aria-label': 'Queue filters' });
    const stateSel = el('select', { id: 'q-state' }, ['', 'queued', 'retrying', 'dead', 'delivered'].map((s) =>
      el('option', { value: s, selected: s === state }, s || 'undelivered and delivered')));
    const destIn = el('input', { id: 'q-destination', value: destination, autocomplete: 'off', list: 'q-destinations' });
    const info = knownRoutes.find((x) => x.route === routeName);
    form.append(
      el('div', { class: 'field' }, el('label', { for: 'q-state' }, 'State'), stateSel),
      el('div', { class: 'field' }, el('label', { for: 'q-destination' }, 'Destination'), destIn,
        el('datalist', { id: 'q-destinations' }, ((info && info.queues) || []).map((x) => el('option', { value: x.destination })))),
      el('div', { class: 'actions' }, el('button', { type: 'submit' }, 'Show')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      if (stateSel.value) p.set('state', stateSel.value);
      if (destIn.value.trim()) p.set('destination', destIn.value.trim());
      location.hash = '#/queues/' + enc(routeName) + (p.toString() ? '?' + p : '');
    });
    const scope = destination ? '&destination=' + enc(destination) : '';
    const bulk = el('div', { class: 'bar' },
      el('button', { type: 'button', id: 'retry-dead', on: { click: async () => {
        const rr = await api('POST', base + '/retry?all_dead=true' + scope);
        say(rr.ok ? rr.data.retried + ' dead event(s) queued again.' : failure(rr, 'Retry'), !rr.ok);
        if (rr.ok) route(true);
      } } }, 'Retry every dead event'),
      confirmButton('Purge every dead event', 'Press again to purge them all', 'danger', async () => {
        const rr = await api('POST', base + '/purge?all_dead=true' + scope);
        say(rr.ok ? rr.data.purged + ' dead event(s) purged.' : failure(rr, 'Purge'), !rr.ok);
        if (rr.ok) route(true);
      }));
    const events = (r.data && r.data.events) || [];
    const tbody = el('tbody', { id: 'events' });
    for (const e of events) {
      const eq = '?event_id=' + enc(e.event_id) + (e.destination ? '&destination=' + enc(e.destination) : '');
      const actions = el('td', {});
      if (e.state === 'dead' || e.state === 'retrying') {
        actions.append(el('button', { type: 'button', class: 'secondary retry', 'aria-label': 'Retry ' + e.event_id, on: { click: async () => {
          const rr = await api('POST', base + '/retry' + eq);
          say(rr.ok ? 'Queued again: ' + e.event_id + '.' : failure(rr, 'Retry'), !rr.ok);
          if (rr.ok) route(true);
        } } }, 'Retry'), ' ');
      }
      if (e.state !== 'delivered') {
        const p = confirmButton('Purge', 'Confirm purge', 'danger purge', async () => {
          const rr = await api('POST', base + '/purge' + eq);
          say(rr.ok ? 'Purged: ' + e.event_id + '.' : failure(rr, 'Purge'), !rr.ok);
          if (rr.ok) route(true);
        });
        p.setAttribute('aria-label', 'Purge ' + e.event_id);
        actions.append(p);
      }
      tbody.append(el('tr', { 'data-event-id': e.event_id, 'data-state': e.state },
        el('td', { class: 'mono' }, el('a', { href: '#/queues/' + enc(routeName) + '/' + enc(e.event_id) + (e.destination ? '?destination=' + enc(e.destination) : '') }, e.event_id)),
        el('td', {}, e.destination || routeName),
        el('td', {}, badge(e.state)),
        el('td', { class: 'num' }, String(e.attempts)),
        el('td', { class: 'time hide-narrow' }, timeEl(e.received_at_ms)),
        el('td', { class: 'time hide-narrow' }, e.next_at_ms ? timeEl(e.next_at_ms) : '—'),
        el('td', { class: 'hide-narrow' }, e.last_result || ''),
        actions));
    }
    const table = el('div', { class: 'table-wrap' }, el('table', {},
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Event ID'), el('th', { scope: 'col' }, 'Destination'),
        el('th', { scope: 'col' }, 'State'), el('th', { scope: 'col', class: 'num' }, 'Attempts'),
        el('th', { scope: 'col', class: 'hide-narrow' }, 'Received'), el('th', { scope: 'col', class: 'hide-narrow' }, 'Next try'),
        el('th', { scope: 'col', class: 'hide-narrow' }, 'Last result'), el('th', { scope: 'col' }, 'Actions'))),
      tbody));
    const note = r.data && r.data.delivery === 'sync'
      ? el('p', { class: 'note' }, 'This route is now a sync route; these events were stored while it was a queue route.') : null;
    setView(title, back, note, form, bulk, table,
      events.length ? null : el('p', { class: 'empty' }, state ? 'No ' + state + ' events.' : 'No events.'));
  }

  async function eventView(routeName, eventId, params, signal) {
    const destination = params.get('destination');
    const r = await api('GET', '/events/' + enc(routeName) + '/' + enc(eventId) + (destination ? '?destination=' + enc(destination) : ''), signal);
    const title = heading('Event ' + eventId);
    const back = el('p', {}, el('a', { href: '#/queues/' + enc(routeName) }, '← Queue of ' + routeName), ' · ',
      el('a', { href: '#/deliveries?event_id=' + enc(eventId) }, 'Deliveries of this event'));
    if (!r.ok) {
      setView(title, back);
      say(failure(r, 'Loading the event'), true);
      return;
    }
    const d = r.data;
    const dests = Array.isArray(d.destinations) && d.destinations.length ? d.destinations : [d];
    const cards = el('div', { class: 'cards', id: 'destinations' });
    for (const x of dests) cards.append(destinationCard(routeName, eventId, x, () => route(true)));
    setView(title, back, el('div', { class: 'panel' }, facts([
      ['Route', routeName],
      ['Event type', d.event_type],
      ['Received', timeEl(d.received_at_ms)],
      ['Method', d.method],
      ['Headers forwarded', Array.isArray(d.headers) ? d.headers.join(', ') : null],
    ])), el('h2', {}, 'Destinations'), cards);
  }

  async function routesView(signal) {
    const routes = await loadRoutes(signal);
    const title = heading('Routes');
    if (routes === null) {
      setView(title);
      say('The routes overview (GET /overview) is not available on this gateway.', true);
      return;
    }
    const refresh = el('button', { type: 'button', class: 'secondary', on: { click: () => route() } }, 'Refresh');
    const tbody = el('tbody', { id: 'routes' });
    for (const r of routes) {
      const hour = r.last_hour || {};
      const counts = Object.entries(hour).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
      const total = counts.reduce((s, [, n]) => s + n, 0);
      tbody.append(el('tr', { 'data-route': r.route },
        el('td', {}, el('a', { href: '#/deliveries?route=' + enc(r.route) }, r.route)),
        el('td', { class: 'hide-narrow' }, r.provider || ''),
        el('td', {}, r.delivery || ''),
        el('td', {}, el('div', { class: 'counts' }, counts.length
          ? counts.map(([o, n]) => el('a', { href: '#/deliveries?route=' + enc(r.route) + '&outcome=' + enc(o), class: 'plain' }, badge(o + ' ' + n)))
          : el('span', { class: 'note' }, 'none')), el('span', { class: 'note' }, total ? total + ' in all' : '')),
        el('td', {}, (r.queues || []).length
          ? (r.queues || []).map((q) => el('div', {},
            el('a', { href: '#/queues/' + enc(r.route) + '?destination=' + enc(q.destination) }, q.destination), ': ',
            String(q.depth ?? 0) + ' waiting, ',
            q.dead ? el('a', { href: '#/queues/' + enc(r.route) + '?state=dead&destination=' + enc(q.destination) }, q.dead + ' dead') : '0 dead',
            q.oldest_undelivered_age_ms !== null && q.oldest_undelivered_age_ms !== undefined ? ', oldest ' + fmtAge(q.oldest_undelivered_age_ms) : ''))
          : el('span', { class: 'note' }, '—'))));
    }
    setView(title, el('div', { class: 'bar' }, refresh, el('span', { class: 'note' }, 'Deliveries by outcome in the last hour; queues as they stand.')),
      el('div', { class: 'table-wrap' }, el('table', {},
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Route'), el('th', { scope: 'col', class: 'hide-narrow' }, 'Provider'),
          el('th', { scope: 'col' }, 'Delivery'), el('th', { scope: 'col' }, 'Last hour'), el('th', { scope: 'col' }, 'Queues'))),
        tbody)));
    // Kept current while open.
    const t = setTimeout(() => { if (!signal.aborted) route(); }, 10000);
    signal.addEventListener('abort', () => clearTimeout(t), { once: true });
  }

  function quiet(e) {
    if (e instanceof AuthNeeded || (e && e.name === 'AbortError')) return;
    say(String(e && e.message ? e.message : e), true);
  }

  // --- navigation -------------------------------------------------------------------------

  let lastSection = null;
  // Shows the view the address names; `keepStatus` keeps the line that says what an
  // action just did.
  function route(keepStatus) {
    if (leave) leave();
    const controller = new AbortController();
    leave = () => controller.abort();
    const hash = location.hash.replace(/^#/, '') || '/deliveries';
    const qAt = hash.indexOf('?');
    const parts = (qAt < 0 ? hash : hash.slice(0, qAt)).split('/').filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (_) { return p; }
    });
    const params = new URLSearchParams(qAt < 0 ? '' : hash.slice(qAt + 1));
    const section = parts[0] === 'delivery' ? 'deliveries' : (parts[0] || 'deliveries');
    for (const a of document.querySelectorAll('nav a')) {
      if (a.dataset.section === section) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    if (keepStatus !== true) say('');
    let job;
    switch (parts[0]) {
      case 'delivery': job = deliveryView(parts.slice(1).join('/'), controller.signal); break;
      case 'queues':
        if (parts.length >= 3) job = eventView(parts[1], parts.slice(2).join('/'), params, controller.signal);
        else if (parts.length === 2) job = queueView(parts[1], params, controller.signal);
        else job = queuesView(controller.signal);
        break;
      case 'routes': job = routesView(controller.signal); break;
      default: job = deliveriesView(params, controller.signal);
    }
    // Moving to another section puts the keyboard at its heading.
    const moved = lastSection !== null && lastSection !== section + parts.length;
    lastSection = section + parts.length;
    job.then(() => {
      if (moved && !controller.signal.aborted) {
        const h = $('view').querySelector('h1');
        if (h) h.focus({ preventScroll: true });
      }
    }).catch(quiet);
  }

  // Whether the listener takes this tab's token (or needs none): /healthz is open to
  // all, so ask an endpoint behind the token.
  async function probe() {
    const resp = await fetch('/overview', { headers: authHeaders({ Accept: 'application/json' }), cache: 'no-store', credentials: 'omit' });
    return resp.status !== 401;
  }

  async function start() {
    $('login-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const given = $('token').value.trim();
      if (!given) return;
      const err = $('login-error');
      const before = token;
      token = given;
      let ok = false;
      try { ok = await probe(); } catch (e) {
        token = before;
        err.hidden = false;
        err.textContent = 'The token cannot be sent (' + e.message + ').';
        return;
      }
      if (!ok) {
        token = before;
        err.hidden = false;
        err.textContent = 'The admin listener refused this token.';
        $('token').select();
        return;
      }
      try { sessionStorage.setItem(TOKEN_KEY, given); } catch (_) { /* kept in memory only */ }
      $('token').value = '';
      showApp();
      route();
    });
    $('forget').addEventListener('click', () => {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* nothing kept */ }
      token = null;
      needToken(null);
    });
    window.addEventListener('hashchange', () => route());
    let ok = false;
    try { ok = await probe(); } catch (e) {
      say('The admin listener did not answer: ' + e.message, true);
      $('main').hidden = false;
      return;
    }
    if (!ok) { needToken(token ? 'The admin listener refused the stored token.' : null); return; }
    showApp();
    route();
  }

  start();
})();
