// hookgate inspector. Plain JavaScript, no framework, no build step: it reads the admin
// endpoints of the listener that served it. Everything a delivery carries is written
// into the page as text (textContent), never parsed as markup.
'use strict';

(() => {
  const TOKEN_KEY = 'hookgate.admin_token';
  // Every word the gateway writes for what became of a request (src/outcome.rs: each
  // `Outcome`, a verification's refusal reasons included), of a queued event (its
  // state) or of one attempt (`AttemptResult`), by class: the one place the page
  // decides a colour.
  //   ok       delivered, or accepted for delivery (green)
  //   copy     a copy of an event already taken: nothing to do (grey)
  //   refused  turned away: the sender's (or the route's set-up) to fix (amber)
  //   failed   the gateway, its store or a destination failed: the operator's (red)
  //   waiting  on its way: queued again after a failed attempt (blue)
  const CLASS_OF = Object.freeze({
    // Requests (hookgate-outcome).
    forwarded: 'ok', queued: 'ok', filtered: 'ok', handshake: 'ok', forwarded_unclaimed: 'ok',
    duplicate: 'copy', in_flight: 'copy',
    mismatch: 'refused', missing_header: 'refused', malformed_header: 'refused',
    bad_signature: 'refused', stale_timestamp: 'refused', needs_public_url: 'refused',
    certificate_unavailable: 'refused', handshake_refused: 'refused', no_event_id: 'refused',
    bad_body: 'refused', too_large: 'refused', body_timeout: 'refused',
    method_not_allowed: 'refused', no_route: 'refused', rate_limited: 'refused',
    client_busy: 'refused',
    upstream_rejected: 'failed', upstream_error: 'failed', store_error: 'failed',
    overloaded: 'failed', request_timeout: 'failed',
    // Queued events (state), and the destination's running or paused.
    delivered: 'ok', retrying: 'waiting', pending: 'waiting', dead: 'failed',
    running: 'ok', paused: 'refused', breaker: 'failed',
    // One attempt's result.
    http_4xx: 'failed', http_5xx: 'failed', timeout: 'failed', connect: 'failed',
    broken: 'failed', refused: 'failed', other: 'unknown',
  });
  // The words that are not a request's outcome (the outcome filter's suggestions).
  const NOT_OUTCOMES = new Set(['delivered', 'retrying', 'pending', 'dead', 'running', 'paused',
    'breaker', 'http_4xx', 'http_5xx', 'timeout', 'connect', 'broken', 'refused', 'other']);
  const OUTCOMES = Object.keys(CLASS_OF).filter((w) => !NOT_OUTCOMES.has(w));
  const CLASSES = ['ok', 'copy', 'refused', 'failed', 'waiting', 'unknown'];
  const CLASS_LABEL = { ok: 'delivered or accepted', copy: 'copies', refused: 'refused', failed: 'failed', waiting: 'waiting', unknown: 'other' };
  const outcomeClass = (word) => Object.prototype.hasOwnProperty.call(CLASS_OF, word) ? CLASS_OF[word] : 'unknown';
  // For the page's tests (and the curious, from the console): read-only.
  window.hookgateInspector = Object.freeze({ outcomeClass, CLASS_OF, CLASSES });
  // Where the delivery log keeps requests for no route (store/log: UNROUTED).
  const UNROUTED = '#unrouted';

  // The token: this tab only (sessionStorage), sent as a Bearer header, never a cookie.
  let token = null;
  try { token = sessionStorage.getItem(TOKEN_KEY); } catch (_) { token = null; }
  // The open view's cleanup (its requests and stream are aborted on leaving it).
  let leave = null;
  // Route names for the filters' suggestions, from /overview.
  let knownRoutes = [];
  // Whether the gateway records deliveries ([log] enabled), from /overview.
  let logEnabled = true;
  // The last /overview read (requests for no route in the last hour).
  let lastOverview = null;

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
    for (const c of children.flat(Infinity)) {
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
  // A time as spans: the date and the milliseconds go on a phone.
  function timeParts(ms) {
    const t = fmtTime(ms);
    return [el('span', { class: 'date' }, t.slice(0, 11)), t.slice(11, 19), el('span', { class: 'ms' }, t.slice(19))];
  }
  function timeEl(ms) {
    if (ms === undefined || ms === null) return '—';
    return el('time', { datetime: new Date(Number(ms)).toISOString(), title: new Date(Number(ms)).toISOString() }, timeParts(ms));
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
  // A word in its class's colour; `label` (the word by default) is what it says.
  function badge(word, label) {
    const w = String(word || '—');
    const cls = w === '—' ? 'none' : outcomeClass(w);
    return el('span', { class: 'badge c-' + cls, 'data-outcome': w, 'data-class': cls, title: CLASS_LABEL[cls] }, label === undefined ? w : label);
  }

  // A long ID shortened (its first 12 characters and …), the whole on hover, with a
  // button that copies it; `href` makes the short form a link.
  const SHORT = 12;
  function shortId(id, href) {
    const full = String(id || '');
    if (!full) return '—';
    const shown = full.length > SHORT + 2 ? full.slice(0, SHORT) + '…' : full;
    const text = href ? el('a', { href, class: 'mono', title: full }, shown) : el('span', { class: 'mono', title: full }, shown);
    const wrap = el('span', { class: 'id', 'data-full': full }, text);
    if (shown !== full) wrap.append(copyButton(full));
    return wrap;
  }

  function copyButton(text) {
    const b = el('button', { type: 'button', class: 'copy', title: 'Copy ' + text, 'aria-label': 'Copy ' + text }, 'Copy');
    b.addEventListener('click', async (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      let ok = false;
      try {
        if (navigator.clipboard && window.isSecureContext) { await navigator.clipboard.writeText(text); ok = true; }
      } catch (_) { ok = false; }
      if (!ok) {
        // Outside a secure context: the old way, through a selection.
        const t = el('textarea', { class: 'offscreen', readonly: true });
        t.value = text;
        document.body.append(t);
        t.select();
        try { ok = document.execCommand('copy'); } catch (_) { ok = false; }
        t.remove();
      }
      b.textContent = ok ? 'Copied' : 'Select it';
      b.dataset.copied = ok ? 'true' : 'false';
      setTimeout(() => { b.textContent = 'Copy'; }, 1500);
    });
    return b;
  }

  // Text kept to one line, cut with … (the whole on hover).
  function clip(text, cls) {
    const t = String(text || '');
    return el('span', { class: 'clip' + (cls ? ' ' + cls : ''), title: t }, t);
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
        lastOverview = r.data;
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

  function routeCell(name) {
    if (name === UNROUTED) return el('a', { href: '#/unrouted', class: 'note' }, 'no route');
    return name || '—';
  }

  function deliveryRow(rec, fresh) {
    const id = rec.delivery_id;
    const tr = el('tr', { 'data-delivery-id': id, 'data-event-id': rec.event_id, class: fresh ? 'fresh' : '' },
      el('td', { class: 'time' }, el('a', { href: '#/delivery/' + enc(id), 'aria-label': 'Delivery ' + id + ' at ' + fmtTime(rec.received_at) }, timeParts(rec.received_at))),
      el('td', { class: 'route' }, routeCell(rec.route)),
      el('td', {}, badge(rec.outcome)),
      el('td', { class: 'num hide-narrow' }, rec.status === undefined || rec.status === null ? '—' : String(rec.status)),
      el('td', { class: 'hide-narrow' }, clip(rec.event_type || '—', 'type')),
      el('td', { class: 'nowrap' }, rec.event_id ? shortId(rec.event_id) : (rec.route === UNROUTED ? clip(rec.path, 'mono path') : '—')),
      el('td', { class: 'num hide-narrow' }, fmtMicros(rec.duration_us)),
      el('td', { class: 'hide-narrow fill' }, clip(rec.reason || '', 'why')));
    return tr;
  }

  // The list's filters: a form that sets the page's address (its hash).
  function filtersForm(params) {
    const form = el('form', { class: 'filters', 'aria-label': 'Filters' });
    const field = (name, label, input) => el('div', { class: 'field' }, el('label', { for: 'f-' + name }, label), input);
    const val = (k) => params.get(k) || '';
    const inputs = {
      route: el('input', { id: 'f-route', name: 'route', value: val('route'), list: 'routes-list', autocomplete: 'off' }),
      // The outcomes as choices (one given in the address that is not among them is kept).
      outcome: el('select', { id: 'f-outcome', name: 'outcome' },
        el('option', { value: '' }, 'any outcome'),
        (OUTCOMES.includes(val('outcome')) || !val('outcome') ? OUTCOMES : [val('outcome')].concat(OUTCOMES))
          .map((o) => el('option', { value: o, selected: o === val('outcome') }, o))),
      event_type: el('input', { id: 'f-event_type', name: 'event_type', value: val('event_type'), autocomplete: 'off' }),
      event_id: el('input', { id: 'f-event_id', name: 'event_id', value: val('event_id'), autocomplete: 'off' }),
      since: el('input', { id: 'f-since', name: 'since', type: 'datetime-local', value: params.get('since') ? toLocalInput(params.get('since')) : '' }),
      before: el('input', { id: 'f-before', name: 'before', type: 'datetime-local', value: params.get('before') ? toLocalInput(params.get('before')) : '' }),
      limit: el('input', { id: 'f-limit', name: 'limit', type: 'number', min: '1', max: '500', value: val('limit') || '50' }),
    };
    form.append(
      field('route', 'Route', inputs.route), routeList('routes-list'),
      field('outcome', 'Outcome', inputs.outcome),
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
    return el('div', { class: 'table-wrap' }, el('table', { class: 'list' },
      el('caption', { class: 'note', hidden: true }, 'Deliveries, newest first'),
      el('thead', {}, el('tr', {},
        el('th', { scope: 'col' }, 'Received'), el('th', { scope: 'col' }, 'Route'),
        el('th', { scope: 'col' }, 'Outcome'), el('th', { scope: 'col', class: 'num hide-narrow' }, 'Status'),
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
      ['Route', d.route === UNROUTED ? link('no route has this path', '#/unrouted') : (d.route ? link(d.route, '#/deliveries?route=' + enc(d.route)) : null)],
      ['Provider', d.provider],
      ['Outcome', badge(d.outcome)],
      ['Answered', d.status === undefined || d.status === null ? null : String(d.status)],
      ['Took', fmtMicros(d.duration_us)],
      ['From', d.peer],
      ['Secret matched', d.secret],
      ['Event ID', d.event_id ? [link(d.event_id, '#/deliveries?event_id=' + enc(d.event_id)), ' ', copyButton(d.event_id)] : null],
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
      const cards = el('div', { class: 'cards whole', id: 'destinations' });
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
      card.append(el('div', { class: 'table-wrap' }, el('table', { class: 'attempts' },
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'At'), el('th', { scope: 'col' }, 'Result'),
          el('th', { scope: 'col', class: 'num' }, 'Status'), el('th', { scope: 'col', class: 'num' }, 'Took'), el('th', { scope: 'col' }, 'Error'))),
        el('tbody', {}, attempts.map((a) => el('tr', {},
          el('td', { class: 'time' }, timeEl(a.at_ms)),
          el('td', {}, a.result ? badge(a.result, (a.kind ? a.kind + ': ' : '') + a.result) : '', a.receipt ? ' (' + a.receipt + ')' : ''),
          el('td', { class: 'num' }, a.status ? String(a.status) : '—'),
          el('td', { class: 'num' }, a.duration_ms === undefined ? '—' : a.duration_ms + ' ms'),
          el('td', { class: 'wrap error-text' }, a.error || '')))))));
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

  // A destination's pause, in words: its reason, since when, until when.
  function pauseWords(p) {
    if (!p) return 'running';
    const parts = [p.breaker ? 'breaker open (one event probed at a time)' : p.reason];
    if (p.since) parts.push('since ' + fmtTime(Date.parse(p.since)));
    if (p.until) parts.push('until ' + fmtTime(Date.parse(p.until)));
    return parts.join(', ');
  }
  function pauseBadge(p) {
    if (!p) return badge('running');
    return badge(p.breaker ? 'breaker' : 'paused', p.breaker ? 'breaker open' : 'paused');
  }

  // A pull destination's consumers (hookgate listen, a service that pulls): who last
  // leased its events, and how long ago.
  function consumersNote(list) {
    if (!list || !list.length) return '';
    const c = list[0];
    const more = list.length > 1 ? ' and ' + (list.length - 1) + ' more' : '';
    return el('div', { class: 'note consumers', title: list.map((x) => x.name + ' ' + x.last_lease).join('\n') },
      'pulled by ' + c.name + more + ', last ' + fmtAge(Date.now() - Date.parse(c.last_lease)) + ' ago');
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
    const nodes = [heading('Queues and dead letters'),
      el('p', { class: 'note', id: 'queues-legend' }, 'Waiting: events not yet delivered (queued or retrying). Dead: out of attempts, waiting for an operator. Oldest: the age of the oldest undelivered event.')];
    if (routes === null) {
      nodes.push(el('p', { class: 'note' }, 'The routes overview is not available; name a queue route to open it.'));
    } else {
      const queued = routes.filter((r) => r.delivery === 'queue');
      if (!queued.length) nodes.push(el('p', { class: 'empty' }, 'No route has delivery = "queue": deliveries are forwarded while the provider waits.'));
      const cards = el('div', { class: 'cards' });
      for (const r of queued) {
        const rows = (r.queues || []).map((q) => el('tr', { 'data-destination': q.destination },
          el('td', {}, clip(q.destination), consumersNote(q.consumers)),
          el('td', {}, pauseBadge(q.paused)),
          el('td', { class: 'num' }, String(q.depth ?? '—')),
          el('td', { class: 'num' }, q.dead ? el('a', { href: '#/queues/' + enc(r.route) + '?state=dead&destination=' + enc(q.destination) }, String(q.dead)) : '0'),
          el('td', { class: 'num' }, fmtAge(q.oldest_undelivered_age_ms))));
        cards.append(el('div', { class: 'panel', 'data-route': r.route },
          el('h2', {}, el('a', { href: '#/queues/' + enc(r.route) }, r.route), ' ', el('span', { class: 'note' }, r.provider || '')),
          el('div', { class: 'table-wrap' }, el('table', {},
            el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Destination'), el('th', { scope: 'col' }, 'State'),
              el('th', { scope: 'col', class: 'num' }, 'Waiting'), el('th', { scope: 'col', class: 'num' }, 'Dead'),
              el('th', { scope: 'col', class: 'num', title: 'the age of the oldest undelivered event' }, 'Oldest'))),
            el('tbody', {}, rows))),
          el('p', {}, el('a', { href: '#/queues/' + enc(r.route) }, 'Pause, resume and retry'), ' · ',
            el('a', { href: '#/queues/' + enc(r.route) + '?state=dead' }, 'Dead letters'), ' · ',
            el('a', { href: '#/routes/' + enc(r.route) }, 'Charts'))));
      }
      nodes.push(cards);
    }
    nodes.push(open);
    setView(...nodes);
  }

  // Each destination's state, with pause (a reason, an optional end) and resume.
  function controlsPanel(routeName, controls, info) {
    const base = '/events/' + enc(routeName);
    const depth = new Map(((info && info.queues) || []).map((q) => [q.destination, q]));
    const rows = controls.map((c) => {
      const q = depth.get(c.destination);
      const act = el('td', { class: 'actions-cell' });
      const dq = '?destination=' + enc(c.destination);
      if (c.paused) {
        act.append(el('button', { type: 'button', class: 'resume', 'aria-label': 'Resume ' + c.destination, on: { click: async (ev) => {
          ev.currentTarget.disabled = true;
          const r = await api('POST', base + '/resume' + dq);
          say(r.ok ? 'Resumed ' + c.destination + ': its events are delivered again, at its rate limit, in order.' : failure(r, 'Resume'), !r.ok);
          if (r.ok) route(true);
        } } }, 'Resume'));
      } else {
        const reason = el('input', { class: 'reason-in', 'aria-label': 'Reason for pausing ' + c.destination, placeholder: 'reason (e.g. deploy)', maxlength: '500', autocomplete: 'off' });
        const until = el('input', { class: 'until-in', 'aria-label': 'Pause ' + c.destination + ' until', placeholder: 'until: 30m, 2h, a time', autocomplete: 'off' });
        const form = el('form', { class: 'inline', 'aria-label': 'Pause ' + c.destination }, reason, until,
          el('button', { type: 'submit', class: 'secondary pause' }, 'Pause'));
        form.addEventListener('submit', async (ev) => {
          ev.preventDefault();
          const p = new URLSearchParams({ destination: c.destination });
          if (reason.value.trim()) p.set('reason', reason.value.trim());
          if (until.value.trim()) p.set('until', until.value.trim());
          const r = await api('POST', base + '/pause?' + p);
          say(r.ok ? 'Paused ' + c.destination + ': its events are kept and queued until it resumes.' : failure(r, 'Pause'), !r.ok);
          if (r.ok) route(true);
        });
        act.append(form);
      }
      return el('tr', { 'data-destination': c.destination, 'data-paused': c.paused ? 'true' : 'false' },
        el('td', {}, clip(c.destination)),
        el('td', { class: 'fill' }, pauseBadge(c.paused), ' ', c.paused ? clip(pauseWords(c.paused), 'note pause-words') : ''),
        el('td', { class: 'num hide-narrow' }, q ? String(q.depth ?? 0) : '—'),
        el('td', { class: 'num hide-narrow' }, q ? String(q.dead ?? 0) : '—'),
        act);
    });
    return el('section', { class: 'panel', id: 'controls', 'aria-labelledby': 'controls-title' },
      el('h2', { id: 'controls-title' }, 'Destinations'),
      el('p', { class: 'note' }, 'A paused destination keeps accepting and queueing: nothing is refused or dropped. Its breaker pauses it after repeated failures and probes one event at a time.'),
      el('div', { class: 'table-wrap' }, el('table', { class: 'controls' },
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Destination'), el('th', { scope: 'col' }, 'State'),
          el('th', { scope: 'col', class: 'num hide-narrow' }, 'Waiting'), el('th', { scope: 'col', class: 'num hide-narrow' }, 'Dead'),
          el('th', { scope: 'col' }, 'Action'))),
        el('tbody', {}, rows))));
  }

  // Bulk retry: the filters, then the plan (how many, a sample), then the retry.
  function bulkRetryPanel(routeName, destinations) {
    const base = '/events/' + enc(routeName) + '/retry';
    const field = (id, label, input) => el('div', { class: 'field' }, el('label', { for: id }, label), input);
    const dest = el('select', { id: 'b-destination' }, el('option', { value: '' }, 'all'),
      destinations.map((d) => el('option', { value: d }, d)));
    const state = el('select', { id: 'b-state' }, [['', 'dead, retrying'], ['dead', 'dead'], ['retrying', 'retrying']].map(([v, t]) => el('option', { value: v }, t)));
    const since = el('input', { id: 'b-since', type: 'datetime-local' });
    const until = el('input', { id: 'b-until', type: 'datetime-local' });
    const type = el('input', { id: 'b-event_type', placeholder: 'invoice.*', autocomplete: 'off' });
    const last = el('input', { id: 'b-last_result', placeholder: 'http_5xx, 500, timeout', autocomplete: 'off' });
    const planBtn = el('button', { type: 'submit', id: 'b-plan' }, 'Plan');
    const runBtn = el('button', { type: 'button', id: 'b-run', class: 'danger', disabled: true }, 'Retry');
    const plan = el('div', { id: 'plan', role: 'status', 'aria-live': 'polite' });
    const form = el('form', { class: 'filters', id: 'bulk-form', 'aria-label': 'Bulk retry filters' },
      field('b-destination', 'Destination', dest), field('b-state', 'State', state),
      field('b-since', 'Failed since', since), field('b-until', 'Failed before', until),
      field('b-event_type', 'Event type', type), field('b-last_result', 'Last result', last),
      el('div', { class: 'actions' }, planBtn, runBtn));
    const query = () => {
      const p = new URLSearchParams();
      if (dest.value) p.set('destination', dest.value);
      if (state.value) p.set('state', state.value);
      for (const [k, i] of [['since', since], ['until', until]]) {
        const ms = i.value ? new Date(i.value).getTime() : NaN;
        if (!Number.isNaN(ms)) p.set(k, String(ms));
      }
      if (type.value.trim()) p.set('event_type', type.value.trim());
      if (last.value.trim()) p.set('last_result', last.value.trim());
      return p;
    };
    let planned = null;
    // A changed filter makes the plan stale: plan again before retrying.
    form.addEventListener('input', () => { planned = null; runBtn.disabled = true; runBtn.textContent = 'Retry'; });
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const p = query();
      p.set('plan', 'true');
      const r = await api('POST', base + '?' + p);
      if (!r.ok) { plan.replaceChildren(el('p', { class: 'error' }, failure(r, 'Plan'))); return; }
      const d = r.data;
      p.delete('plan');
      planned = p.toString();
      const sample = (d.sample || []).map((e) => el('li', {}, shortId(e.event_id), ' ', e.destination ? el('span', { class: 'note' }, '→ ' + e.destination) : '', ' ',
        badge(e.state), ' ', el('span', { class: 'note' }, (e.last_result || '') + (e.last_status ? ' ' + e.last_status : ''))));
      plan.replaceChildren(...[
        el('p', {}, el('strong', { id: 'plan-count', 'data-count': String(d.count) }, String(d.count)),
          d.count === 1 ? ' event would be retried' : ' events would be retried', d.more ? ' (more remain beyond this call\'s bound: run it again after)' : '', '. Nothing has changed yet.'),
        sample.length ? el('ul', { class: 'sample' }, sample) : null,
        d.count > sample.length ? el('p', { class: 'note' }, 'The first ' + sample.length + ' shown.') : null,
      ].filter(Boolean));
      runBtn.disabled = d.count === 0;
      runBtn.textContent = 'Retry ' + d.count + ' event' + (d.count === 1 ? '' : 's');
    });
    runBtn.addEventListener('click', async () => {
      if (planned === null) return;
      runBtn.disabled = true;
      // plan=false names this a bulk retry even with no filter set (every dead and
      // retrying event, as the plan counted).
      const r = await api('POST', base + '?' + (planned ? planned + '&' : '') + 'plan=false');
      if (!r.ok) { plan.replaceChildren(el('p', { class: 'error' }, failure(r, 'Retry'))); return; }
      planned = null;
      say('Retried ' + r.data.retried + ' event(s): queued again, due now, delivered at the destination\'s rate limit in per-key order.');
      route(true);
    });
    return el('section', { class: 'panel', id: 'bulk-retry', 'aria-labelledby': 'bulk-title' },
      el('h2', { id: 'bulk-title' }, 'Retry in bulk'),
      el('p', { class: 'note' }, 'Choose what failed, see the plan, then retry: the plan changes nothing.'),
      form, plan);
  }

  async function queueView(routeName, params, signal) {
    const state = params.get('state') || '';
    const destination = params.get('destination') || '';
    const q = new URLSearchParams({ limit: params.get('limit') || '100' });
    if (state) q.set('state', state);
    if (destination) q.set('destination', destination);
    const base = '/events/' + enc(routeName);
    await loadRoutes(signal);
    const r = await api('GET', base + '?' + q, signal);
    const title = heading('Queue of ' + routeName);
    const back = el('p', {}, el('a', { href: '#/queues' }, '← Queues'), ' · ',
      el('a', { href: '#/deliveries?route=' + enc(routeName) }, 'Deliveries on this route'), ' · ',
      el('a', { href: '#/routes/' + enc(routeName) }, 'Charts'));
    if (!r.ok) {
      setView(title, back);
      say(failure(r, 'Loading the queue'), true);
      return;
    }
    const info = knownRoutes.find((x) => x.route === routeName);
    const controls = (r.data && r.data.destinations) || [];
    const names = controls.length ? controls.map((c) => c.destination) : ((info && info.queues) || []).map((x) => x.destination);
    const form = el('form', { class: 'filters', 'aria-label': 'Queue filters' });
    // Each choice says what it lists.
    const stateSel = el('select', { id: 'q-state' }, [
      ['', 'every event: waiting, retrying, dead and delivered'],
      ['queued', 'queued: waiting for their first attempt'],
      ['retrying', 'retrying: failed, to be tried again'],
      ['dead', 'dead: out of attempts, waiting for an operator'],
      ['delivered', 'delivered: kept for the dedup window'],
    ].map(([v, t]) => el('option', { value: v, selected: v === state }, t)));
    // The route's destinations as choices.
    const destIn = el('select', { id: 'q-destination' }, el('option', { value: '' }, 'every destination'),
      (names.includes(destination) || !destination ? names : [destination].concat(names))
        .map((x) => el('option', { value: x, selected: x === destination }, x)));
    form.append(
      el('div', { class: 'field' }, el('label', { for: 'q-state' }, 'Events listed'), stateSel),
      el('div', { class: 'field' }, el('label', { for: 'q-destination' }, 'Destination'), destIn),
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
      const actions = el('td', { class: 'actions-cell' });
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
      const link = '#/queues/' + enc(routeName) + '/' + enc(e.event_id) + (e.destination ? '?destination=' + enc(e.destination) : '');
      tbody.append(el('tr', { 'data-event-id': e.event_id, 'data-state': e.state, 'data-destination': e.destination || '' },
        el('td', { class: 'nowrap' }, shortId(e.event_id, link)),
        el('td', {}, clip(e.destination || routeName)),
        el('td', {}, badge(e.state)),
        el('td', { class: 'num' }, String(e.attempts)),
        el('td', { class: 'time hide-narrow' }, timeEl(e.received_at_ms)),
        el('td', { class: 'time hide-narrow' }, e.next_at_ms ? timeEl(e.next_at_ms) : '—'),
        el('td', { class: 'hide-narrow' }, e.last_result ? badge(e.last_result, e.last_result + (e.last_status ? ' ' + e.last_status : '')) : ''),
        actions));
    }
    const table = el('div', { class: 'table-wrap' }, el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Event ID'), el('th', { scope: 'col' }, 'Destination'),
        el('th', { scope: 'col' }, 'State'), el('th', { scope: 'col', class: 'num' }, 'Tries'),
        el('th', { scope: 'col', class: 'hide-narrow' }, 'Received'), el('th', { scope: 'col', class: 'hide-narrow' }, 'Next try'),
        el('th', { scope: 'col', class: 'hide-narrow' }, 'Last result'), el('th', { scope: 'col' }, 'Actions'))),
      tbody));
    const note = r.data && r.data.delivery === 'sync'
      ? el('p', { class: 'note' }, 'This route is now a sync route; these events were stored while it was a queue route.') : null;
    setView(title, back, note, controls.length ? controlsPanel(routeName, controls, info) : null,
      bulkRetryPanel(routeName, names),
      el('h2', {}, 'Events'), form, bulk, table,
      events.length ? null : el('p', { class: 'empty' }, state ? 'No ' + state + ' events.' : 'No events.'));
  }

  async function eventView(routeName, eventId, params, signal) {
    const destination = params.get('destination');
    const r = await api('GET', '/events/' + enc(routeName) + '/' + enc(eventId) + (destination ? '?destination=' + enc(destination) : ''), signal);
    const title = heading('Event ' + eventId);
    const back = el('p', {}, el('a', { href: '#/queues/' + enc(routeName) }, '← Queue of ' + routeName), ' · ',
      el('a', { href: '#/deliveries?event_id=' + enc(eventId) }, 'Deliveries of this event'), ' ', copyButton(eventId));
    if (!r.ok) {
      setView(title, back);
      say(failure(r, 'Loading the event'), true);
      return;
    }
    const d = r.data;
    const dests = Array.isArray(d.destinations) && d.destinations.length ? d.destinations : [d];
    const cards = el('div', { class: 'cards whole', id: 'destinations' });
    for (const x of dests) cards.append(destinationCard(routeName, eventId, x, () => route(true)));
    setView(title, back, el('div', { class: 'panel' }, facts([
      ['Route', routeName],
      ['Event type', d.event_type],
      ['Received', timeEl(d.received_at_ms)],
      ['Method', d.method],
      ['Headers forwarded', Array.isArray(d.headers) ? d.headers.join(', ') : null],
    ])), el('h2', {}, 'Destinations'), cards);
  }

  // --- charts: inline SVG, drawn here (no library) -----------------------------------

  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(printable(c)));
    }
    return e;
  }
  const niceMax = (m) => {
    if (m <= 4) return Math.max(1, m);
    const p = Math.pow(10, Math.floor(Math.log10(m)));
    for (const f of [1, 2, 2.5, 5, 10]) if (f * p >= m) return f * p;
    return 10 * p;
  };
  const hhmm = (ms) => { const d = new Date(ms); return pad(d.getHours()) + ':' + pad(d.getMinutes()); };

  // A chart's width: the page's, so that it is drawn at one unit a pixel and its
  // labels read at any width.
  const chartWidth = () => Math.max(300, Math.min(1360, ($('view').clientWidth || 720) - 34));

  // Requests per bucket, stacked by class; each bar's title names its counts.
  function outcomeChart(series, label) {
    const W = chartWidth(), H = 190, L = 40, B = 22, T = 8;
    const buckets = series.buckets || [];
    const totals = buckets.map((b) => Object.values(b.counts || {}).reduce((s, n) => s + n, 0));
    const max = niceMax(Math.max(0, ...totals));
    const bw = (W - L - 4) / Math.max(1, buckets.length);
    const y = (n) => T + (H - T - B) * (1 - n / max);
    const g = svg('g', {});
    g.append(svg('line', { x1: L, x2: W - 2, y1: y(0), y2: y(0), class: 'axis' }),
      svg('line', { x1: L, x2: W - 2, y1: y(max), y2: y(max), class: 'grid' }),
      svg('text', { x: L - 4, y: y(max) + 4, class: 'tick', 'text-anchor': 'end' }, String(max)),
      svg('text', { x: L - 4, y: y(0), class: 'tick', 'text-anchor': 'end' }, '0'),
      svg('text', { x: L, y: H - 6, class: 'tick' }, hhmm(series.from_ms)),
      svg('text', { x: W - 2, y: H - 6, class: 'tick', 'text-anchor': 'end' }, 'now'));
    const seen = new Set();
    buckets.forEach((b, i) => {
      const byClass = {};
      for (const [o, n] of Object.entries(b.counts || {})) {
        const c = outcomeClass(o);
        byClass[c] = (byClass[c] || 0) + n;
        seen.add(c);
      }
      let acc = 0;
      const x = L + 2 + i * bw;
      const words = Object.entries(b.counts || {}).map(([o, n]) => o + ' ' + n).join(', ');
      const bar = svg('g', { class: 'bar', 'data-at': b.at_ms }, svg('title', {}, fmtTime(b.at_ms) + (words ? ': ' + words : ': none')));
      for (const c of CLASSES) {
        const n = byClass[c] || 0;
        if (!n) continue;
        bar.append(svg('rect', { x: x.toFixed(1), width: Math.max(1, bw - 1).toFixed(1), y: y(acc + n).toFixed(1), height: Math.max(0.5, y(acc) - y(acc + n)).toFixed(1), class: 'f-' + c }));
        acc += n;
      }
      // An empty bucket still answers a hover.
      bar.append(svg('rect', { x: x.toFixed(1), width: Math.max(1, bw - 1).toFixed(1), y: T, height: (y(acc) - T).toFixed(1), class: 'hover' }));
      g.append(bar);
    });
    const total = totals.reduce((s, n) => s + n, 0);
    const chart = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, class: 'chart', role: 'img', 'aria-label': label + ': ' + total + ' requests' }, svg('title', {}, label), g);
    const legend = el('p', { class: 'legend' }, CLASSES.filter((c) => seen.has(c)).map((c) => el('span', { class: 'key' }, el('span', { class: 'swatch s-' + c }), CLASS_LABEL[c])));
    return el('figure', { class: 'chart-box', 'data-chart': 'outcomes' }, chart, el('figcaption', {}, label + ' — ' + total + ' in all', legend));
  }

  // One line per destination of `pick(sample)` over the window.
  function lineChart(series, pick, label, fmt, kind) {
    const W = chartWidth(), H = 150, L = 64, B = 22, T = 8;
    const queues = series.queues || [];
    const values = queues.flatMap((q) => q.samples.map(pick));
    const max = niceMax(Math.max(0, ...values));
    const x = (ms) => L + (W - L - 4) * Math.min(1, Math.max(0, (ms - series.from_ms) / Math.max(1, series.to_ms - series.from_ms)));
    const y = (n) => T + (H - T - B) * (1 - n / max);
    const g = svg('g', {},
      svg('line', { x1: L, x2: W - 2, y1: y(0), y2: y(0), class: 'axis' }),
      svg('line', { x1: L, x2: W - 2, y1: y(max), y2: y(max), class: 'grid' }),
      svg('text', { x: L - 4, y: y(max) + 4, class: 'tick', 'text-anchor': 'end' }, fmt(max)),
      svg('text', { x: L - 4, y: y(0), class: 'tick', 'text-anchor': 'end' }, fmt(0)),
      svg('text', { x: L, y: H - 6, class: 'tick' }, hhmm(series.from_ms)),
      svg('text', { x: W - 2, y: H - 6, class: 'tick', 'text-anchor': 'end' }, 'now'));
    const keys = [];
    queues.forEach((q, i) => {
      const pts = q.samples.map((s) => x(s.at_ms).toFixed(1) + ',' + y(pick(s)).toFixed(1));
      const cls = 'l-' + (i % 6);
      if (pts.length === 1) g.append(svg('circle', { cx: pts[0].split(',')[0], cy: pts[0].split(',')[1], r: 3, class: cls + ' dot' }));
      if (pts.length > 1) g.append(svg('polyline', { points: pts.join(' '), class: cls + ' line' }));
      const last = q.samples[q.samples.length - 1];
      g.append(svg('title', {}, q.destination + ': ' + (last ? fmt(pick(last)) + ' now' : 'no sample yet')));
      keys.push(el('span', { class: 'key' }, el('span', { class: 'swatch ' + cls }), q.destination + (last ? ' ' + fmt(pick(last)) : '')));
    });
    const chart = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, class: 'chart', role: 'img', 'aria-label': label }, svg('title', {}, label), g);
    return el('figure', { class: 'chart-box', 'data-chart': kind }, chart, el('figcaption', {}, label, el('p', { class: 'legend' }, keys)));
  }

  // A route's last hour in one line: bars of its minutes, coloured by class.
  function sparkline(series) {
    const W = 120, H = 20;
    const buckets = series.buckets || [];
    const totals = buckets.map((b) => Object.values(b.counts || {}).reduce((s, n) => s + n, 0));
    const max = Math.max(1, ...totals);
    const bw = W / Math.max(1, buckets.length);
    const g = svg('g', {}, svg('rect', { x: 0, width: W, y: H - 1, height: 1, class: 'f-base' }));
    buckets.forEach((b, i) => {
      // The bar takes the colour of the worst class in its minute.
      const SEVERITY = ['ok', 'copy', 'unknown', 'waiting', 'refused', 'failed'];
      let worst = 'ok';
      for (const o of Object.keys(b.counts || {})) {
        const c = outcomeClass(o);
        if (SEVERITY.indexOf(c) > SEVERITY.indexOf(worst)) worst = c;
      }
      if (totals[i]) g.append(svg('rect', { x: (i * bw).toFixed(1), width: Math.max(0.8, bw - 0.4).toFixed(1), y: (H - H * totals[i] / max).toFixed(1), height: (H * totals[i] / max).toFixed(1), class: 'f-' + worst }));
    });
    return svg('svg', { viewBox: '0 0 ' + W + ' ' + H, class: 'spark', role: 'img', 'aria-label': 'Last hour by minute' }, g);
  }

  // --- routes, one route, requests for no route -------------------------------------

  // Open incidents from GET /alerts; the section stays hidden when the endpoint is
  // not there (404) or has none.
  async function incidents(section, signal) {
    let r;
    try { r = await api('GET', '/alerts', signal); } catch (e) {
      if (e instanceof AuthNeeded || e.name === 'AbortError') throw e;
      section.dataset.state = 'none';
      return;
    }
    const list = r.ok && r.data && Array.isArray(r.data.incidents) ? r.data.incidents.filter((i) => !i.state || i.state === 'open') : [];
    // What was learnt (the page's tests wait for it): none, or shown.
    section.dataset.state = list.length ? 'shown' : 'none';
    if (!list.length) { section.hidden = true; return; }
    section.replaceChildren(el('h2', { id: 'incidents-title' }, list.length === 1 ? '1 open incident' : list.length + ' open incidents'),
      el('ul', {}, list.map((i) => el('li', { 'data-kind': i.kind },
        el('span', { class: 'badge c-failed', 'data-class': 'failed' }, i.kind || 'incident'), ' ',
        el('strong', {}, i.route ? el('a', { href: '#/routes/' + enc(i.route) }, i.route) : ''), i.destination ? ' → ' + i.destination : '', ' ',
        el('span', { class: 'note' }, i.opened_at ? 'since ' + fmtTime(Date.parse(i.opened_at)) : ''), ' ',
        el('span', { class: 'incident-message' }, i.message || '')))));
    section.hidden = false;
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
    const sparks = [];
    for (const r of routes) {
      const hour = r.last_hour || {};
      const counts = Object.entries(hour).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
      const total = counts.reduce((s, [, n]) => s + n, 0);
      const shown = counts.slice(0, 4);
      const spark = el('span', { class: 'spark-slot' });
      sparks.push([r.route, spark]);
      tbody.append(el('tr', { 'data-route': r.route },
        el('td', {}, el('a', { href: '#/routes/' + enc(r.route) }, r.route)),
        el('td', { class: 'hide-narrow' }, clip(r.path || '', 'mono')),
        el('td', { class: 'hide-narrow' }, r.provider || ''),
        el('td', { class: 'hide-narrow' }, r.delivery || ''),
        el('td', { class: 'hide-narrow' }, spark),
        el('td', {}, el('div', { class: 'counts' }, counts.length
          ? [shown.map(([o, n]) => el('a', { href: '#/deliveries?route=' + enc(r.route) + '&outcome=' + enc(o), class: 'plain' }, badge(o, o + ' ' + n))),
            counts.length > shown.length ? el('a', { href: '#/routes/' + enc(r.route), class: 'note' }, '+' + (counts.length - shown.length) + ' more') : null,
            el('span', { class: 'note' }, total + ' in all')]
          : el('span', { class: 'note' }, 'none'))),
        el('td', {}, (r.queues || []).length
          ? el('div', { class: 'counts' }, queuesSummary(r), (r.queues || []).map((q) => el('span', { class: 'dest', 'data-destination': q.destination },
            el('a', { href: '#/queues/' + enc(r.route) + '?destination=' + enc(q.destination) }, q.destination), ' ',
            q.paused ? pauseBadge(q.paused) : '', ' ',
            el('span', { class: 'note' }, String(q.depth ?? 0) + ' waiting' + (q.dead ? ', ' : '')),
            q.dead ? el('a', { href: '#/queues/' + enc(r.route) + '?state=dead&destination=' + enc(q.destination), class: 'plain dead-link' }, badge('dead', q.dead + ' dead')) : '')))
          : el('span', { class: 'note' }, '—'))));
    }
    const incidentBox = el('section', { class: 'panel incidents', id: 'incidents', role: 'alert', 'aria-labelledby': 'incidents-title', hidden: true });
    const unrouted = el('p', { id: 'unrouted-summary' }, el('a', { href: '#/unrouted' }, 'Requests for no route'), ': ',
      String((lastOverview && lastOverview.unrouted && lastOverview.unrouted.last_hour) || 0), ' in the last hour.');
    setView(title, incidentBox, el('div', { class: 'bar' }, refresh, el('span', { class: 'note' }, 'Requests by outcome in the last hour; queues as they stand.')),
      el('div', { class: 'table-wrap' }, el('table', { class: 'list' },
        el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Route'), el('th', { scope: 'col', class: 'hide-narrow' }, 'Path'),
          el('th', { scope: 'col', class: 'hide-narrow' }, 'Provider'), el('th', { scope: 'col', class: 'hide-narrow' }, 'Delivery'),
          el('th', { scope: 'col', class: 'hide-narrow' }, 'By minute'),
          el('th', { scope: 'col' }, 'Last hour'), el('th', { scope: 'col' }, 'Queues'))),
        tbody)), unrouted, legendOfClasses());
    incidents(incidentBox, signal).catch(quiet);
    for (const [name, slot] of sparks) {
      api('GET', '/overview/series?route=' + enc(name) + '&window=1h', signal)
        .then((r) => { if (r.ok && r.data) slot.replaceChildren(sparkline(r.data)); })
        .catch(quiet);
    }
    // Kept current while open.
    const t = setTimeout(() => { if (!signal.aborted) route(true); }, 10000);
    signal.addEventListener('abort', () => clearTimeout(t), { once: true });
  }

  // A route's queues in one line (a phone's routes page): how many destinations,
  // waiting, dead and paused.
  function queuesSummary(r) {
    const qs = r.queues || [];
    const sum = (f) => qs.reduce((n, q) => n + (Number(f(q)) || 0), 0);
    const paused = qs.filter((q) => q.paused).length;
    const dead = sum((q) => q.dead);
    return el('a', { class: 'dest-sum', href: '#/queues/' + enc(r.route) },
      qs.length + ' destination' + (qs.length === 1 ? '' : 's') + ': ' + sum((q) => q.depth) + ' waiting' +
      (dead ? ', ' + dead + ' dead' : '') + (paused ? ', ' + paused + ' paused' : ''));
  }

  function legendOfClasses() {
    return el('p', { class: 'legend note', id: 'classes' }, 'Colours: ',
      ['ok', 'copy', 'refused', 'failed', 'waiting'].map((c) => el('span', { class: 'key' }, el('span', { class: 'swatch s-' + c }), CLASS_LABEL[c])));
  }

  async function routeView(name, params, signal) {
    const window_ = params.get('window') === '1d' ? '1d' : '1h';
    const routes = await loadRoutes(signal);
    const info = (routes || []).find((r) => r.route === name);
    const title = heading('Route ' + name);
    const back = el('p', {}, el('a', { href: '#/routes' }, '← Routes'), ' · ',
      el('a', { href: '#/deliveries?route=' + enc(name) }, 'Its deliveries'),
      info && info.delivery === 'queue' ? [' · ', el('a', { href: '#/queues/' + enc(name) }, 'Its queue: pause, resume, retry')] : null);
    const r = await api('GET', '/overview/series?route=' + enc(name) + '&window=' + window_, signal);
    if (!r.ok) {
      setView(title, back);
      say(failure(r, 'Loading the charts'), true);
      return;
    }
    const toggle = el('div', { class: 'toggle', role: 'group', 'aria-label': 'Window' },
      ['1h', '1d'].map((w) => el('button', { type: 'button', 'aria-pressed': String(w === window_), 'data-window': w,
        on: { click: () => { location.hash = '#/routes/' + enc(name) + (w === '1h' ? '' : '?window=' + w); } } },
      w === '1h' ? 'Last hour' : 'Last day')));
    const d = r.data;
    const span = window_ === '1h' ? 'last hour, by minute' : 'last day, by ten minutes';
    const nodes = [title, back, info ? el('div', { class: 'panel' }, facts([
      ['Path', el('code', {}, info.path || '')], ['Provider', info.provider], ['Delivery', info.delivery],
    ])) : null, el('div', { class: 'bar' }, toggle),
    outcomeChart(d, 'Requests by outcome, ' + span)];
    if ((d.queues || []).length) {
      nodes.push(lineChart(d, (s) => s.waiting, 'Waiting events per destination, ' + (window_ === '1h' ? 'last hour' : 'last day'), (n) => String(Math.round(n)), 'depth'));
      nodes.push(lineChart(d, (s) => s.oldest_age_ms, 'Oldest undelivered event per destination', (n) => n ? fmtAge(n) : '0', 'age'));
      nodes.push(el('p', { class: 'note' }, 'Sampled by this process every ' + Math.round(d.sample_every_ms / 1000) + ' s (a day kept), the last point read now.'));
    }
    setView(...nodes);
  }

  // The edit distance of two short strings (the closest route's path).
  function distance(a, b) {
    if (a.length > 300 || b.length > 300) return Math.abs(a.length - b.length) + 300;
    let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
      const cur = [i];
      for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
    return prev[b.length];
  }

  async function unroutedView(signal) {
    const routes = await loadRoutes(signal);
    const r = await api('GET', '/deliveries?route=' + enc(UNROUTED) + '&limit=100', signal);
    const title = heading('Requests for no route');
    const intro = el('p', { class: 'note' }, 'Requests whose path no route takes, answered 404: usually a provider set up with a wrong URL. Kept without body or query, within a share of the log: ',
      'a flood of them never pushes the routes\' records out.');
    const paths = (routes || []).map((x) => ({ route: x.route, path: x.path || '' }));
    const routesBox = el('section', { class: 'panel', id: 'route-paths', 'aria-labelledby': 'paths-title' },
      el('h2', { id: 'paths-title' }, 'The routes\' paths'),
      paths.length ? el('ul', { class: 'paths' }, paths.map((p) => el('li', {}, el('code', {}, clip(p.path, 'mono')), ' ',
        el('a', { href: '#/routes/' + enc(p.route), class: 'note' }, p.route)))) : el('p', { class: 'note' }, 'No route is configured.'));
    if (!r.ok) {
      setView(title, intro, routesBox);
      say(failure(r, 'Loading the requests'), true);
      return;
    }
    const recs = (r.data && r.data.deliveries) || [];
    const closest = (path) => {
      let best = null;
      for (const p of paths) {
        const dd = distance(path, p.path);
        if (!best || dd < best.d) best = { d: dd, p };
      }
      return best && best.d <= Math.max(4, Math.floor(best.p.path.length / 2)) ? best.p : null;
    };
    const tbody = el('tbody', { id: 'unrouted' }, recs.map((x) => {
      const near = closest(x.path || '');
      const ua = (x.headers || []).find(([n]) => n === 'user-agent');
      return el('tr', { 'data-delivery-id': x.delivery_id },
        el('td', { class: 'time' }, el('a', { href: '#/delivery/' + enc(x.delivery_id) }, timeParts(x.received_at))),
        el('td', {}, x.method || ''),
        el('td', {}, clip(x.path || '', 'mono path')),
        el('td', { class: 'hide-narrow' }, clip(x.peer || '')),
        el('td', { class: 'hide-narrow fill' }, clip(ua ? ua[1] : '')),
        el('td', {}, near ? el('span', { class: 'near' }, 'did you mean ', el('code', {}, clip(near.path, 'mono')), '?') : el('span', { class: 'note' }, '—')));
    }));
    const table = el('div', { class: 'table-wrap' }, el('table', { class: 'list' },
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Received'), el('th', { scope: 'col' }, 'Method'),
        el('th', { scope: 'col' }, 'Path'), el('th', { scope: 'col', class: 'hide-narrow' }, 'From'),
        el('th', { scope: 'col', class: 'hide-narrow' }, 'User agent'), el('th', { scope: 'col' }, 'Closest route'))),
      tbody));
    const hour = (lastOverview && lastOverview.unrouted && lastOverview.unrouted.last_hour) || 0;
    setView(title, intro, el('div', { class: 'split' },
      el('div', {}, el('p', { id: 'unrouted-count' }, hour + ' in the last hour; the newest ' + recs.length + ' kept:'), table,
        recs.length ? null : el('p', { class: 'empty' }, 'None recorded.')),
      routesBox));
  }

  // --- the audit ----------------------------------------------------------------------

  const AUDIT_ACTIONS = ['retry', 'purge', 'pause', 'resume', 'replay', 'forget', 'reload', 'handshake_show', 'handshake_clear'];

  // Operators' actions, newest first: who (the token's name), what, on what, how it ended.
  async function auditView(params, signal) {
    const q = new URLSearchParams();
    for (const k of ['action', 'name', 'result']) if (params.get(k)) q.set(k, params.get(k));
    q.set('limit', '200');
    const r = await api('GET', '/audit?' + q, signal);
    const title = heading('Audit');
    const intro = el('p', { class: 'note' }, 'Every operator action on the admin listener, newest first, under the name of the token that made it. ',
      'The store keeps the newest ' + ((r.data && r.data.keeps) || 10000) + '; each is also in the gateway\'s log.');
    const form = el('form', { class: 'filters', 'aria-label': 'Filters', id: 'audit-filters' });
    const field = (name, label, input) => el('div', { class: 'field' }, el('label', { for: 'a-' + name }, label), input);
    const action = el('select', { id: 'a-action', name: 'action' }, el('option', { value: '' }, 'any'),
      AUDIT_ACTIONS.map((a) => el('option', { value: a, selected: params.get('action') === a }, a)));
    const name = el('input', { id: 'a-name', name: 'name', value: params.get('name') || '', autocomplete: 'off' });
    const result = el('select', { id: 'a-result', name: 'result' }, el('option', { value: '' }, 'any'),
      ['ok', 'refused', 'failed'].map((x) => el('option', { value: x, selected: params.get('result') === x }, x)));
    form.append(field('action', 'Action', action), field('name', 'Token name', name), field('result', 'Result', result),
      el('div', { class: 'actions' }, el('button', { type: 'submit' }, 'Apply'),
        el('button', { type: 'button', class: 'secondary', on: { click: () => { location.hash = '#/audit'; } } }, 'Clear')));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const f = new URLSearchParams();
      if (action.value) f.set('action', action.value);
      if (name.value.trim()) f.set('name', name.value.trim());
      if (result.value) f.set('result', result.value);
      const hash = '#/audit' + (f.toString() ? '?' + f : '');
      if (location.hash === hash) route(); else location.hash = hash;
    });
    if (!r.ok) {
      setView(title, intro, form);
      say(failure(r, 'Loading the audit'), true);
      return;
    }
    const recs = (r.data && r.data.audit) || [];
    const tbody = el('tbody', { id: 'audit' }, recs.map((x) => el('tr', { 'data-audit-id': x.id, 'data-action': x.action },
      el('td', { class: 'time' }, el('time', { datetime: x.at, title: x.at }, timeParts(Date.parse(x.at)))),
      el('td', { class: 'name' }, clip(x.name || ''), ' ', el('span', { class: 'note' }, x.role || '')),
      el('td', {}, x.action),
      el('td', { class: 'fill' }, clip(x.target || '', 'mono'), x.detail ? el('div', { class: 'note' }, clip(x.detail)) : null),
      el('td', {}, el('span', { class: 'badge c-' + (['ok', 'refused', 'failed'].includes(x.result) ? x.result : 'none'), 'data-result': x.result }, x.result + ' ' + x.status)),
      el('td', { class: 'hide-narrow' }, clip(x.message || '', 'why')))));
    const table = el('div', { class: 'table-wrap' }, el('table', { class: 'list' },
      el('caption', { class: 'note', hidden: true }, 'Operator actions, newest first'),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'At'), el('th', { scope: 'col' }, 'Token'),
        el('th', { scope: 'col' }, 'Action'), el('th', { scope: 'col' }, 'Target'),
        el('th', { scope: 'col' }, 'Result'), el('th', { scope: 'col', class: 'hide-narrow' }, 'Said'))),
      tbody));
    setView(title, intro, form, table, recs.length ? null : el('p', { class: 'empty' }, 'No action recorded.'));
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
      case 'routes':
        job = parts.length >= 2 ? routeView(parts.slice(1).join('/'), params, controller.signal) : routesView(controller.signal);
        break;
      case 'unrouted': job = unroutedView(controller.signal); break;
      case 'audit': job = auditView(params, controller.signal); break;
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
