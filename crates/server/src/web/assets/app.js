// The Intendant dashboard: a display of the daemon's events and a sender of intents.
// Every string from the daemon (model text, command output, paths) becomes a text node through
// h(); nothing is ever parsed as markup. A tab holds one live stream (/api/events), which the
// browser resumes by Last-Event-ID: it keeps the lists fresh and feeds the open session page.
// On a fleet member it also carries the other members' events, each with its `member` (and no
// id: the browser resumes after this daemon's last).
// (One per tab because a browser opens at most six HTTP/1.1 connections to a server: two
// streams per tab stalled the third tab.) A session page reads the session's recorded events
// once the stream is open, then the stream's events after them, so a reload shows everything
// once, in order.
'use strict';

const view = document.getElementById('view');
const state = { sessions: [], approvals: [], settings: null };
let page = null; // the current page: { render(), onEvent(env)?, close()? }

// ---------- small helpers ----------

// An element with attributes (on* keys are listeners) and children (strings become text).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'value') el.value = v;
    else if (k === 'indent') el.style.paddingLeft = v; // CSSOM: the CSP refuses style attributes
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

function toast(text) {
  const el = document.getElementById('toast');
  el.textContent = text;
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, 5000);
}

// GET path's JSON; a 404 is `absent` when one is given (else an error, as any refusal is).
async function getJson(path, { absent } = {}) {
  const r = await fetch(path, { credentials: 'same-origin' });
  if (r.status === 401) { location.assign('/login'); throw new Error('logged out'); }
  if (r.status === 404 && absent !== undefined) return absent;
  const body = await r.json();
  if (!r.ok) throw new Error(body.message || r.statusText);
  return body;
}

// Every session, read a page at a time (SessionsPage::SIZE; a page's reply stays small however
// many sessions the daemon has); a short page is the last.
const SESSIONS_PAGE = 256;
async function allSessions() {
  const all = [];
  for (;;) {
    const after = all.length ? '&after=' + encodeURIComponent(all[all.length - 1].id) : '';
    const got = await getJson('/api/sessions?limit=' + SESSIONS_PAGE + after);
    all.push(...got);
    if (got.length < SESSIONS_PAGE) return all;
  }
}

// POST one intent; a refusal is shown, and a 409 (answered elsewhere) refreshes the lists.
async function send(intent) {
  const r = await fetch('/api/intents', {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(intent),
  });
  if (r.status === 401) { location.assign('/login'); return null; }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    toast(body.message || ('refused: ' + r.status));
    if (r.status === 409 || r.status === 404) refreshLists();
    return null;
  }
  return body;
}

function age(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 86400) return Math.floor(s / 3600) + 'h';
  return Math.floor(s / 86400) + 'd';
}

const fmtTokens = (n) => (n >= 10000 ? (n / 1000).toFixed(1) + 'k' : String(n));
const fmtCost = (c) => '$' + Number(c || 0).toFixed(c >= 1 ? 2 : 4);
const fmtBytes = (n) => (n >= 1048576 ? (n / 1048576).toFixed(1) + ' MiB' : n >= 1024 ? (n / 1024).toFixed(1) + ' KiB' : n + ' B');
// What a live session's processes use now, from its cgroups (the figures its groups keep).
const fmtUsage = (u) => [u.processes + (u.processes === 1 ? ' process' : ' processes'),
  u.memory_bytes != null ? fmtBytes(u.memory_bytes) : null,
  u.cpu_ms != null ? (u.cpu_ms / 1000).toFixed(1) + ' s CPU' : null].filter(Boolean).join(' · ');
const backendName = (b) => (b && b.kind === 'agent' ? b.name : 'native');
const statusLabel = (s) => s.replace(/_/g, ' ');
const short = (id) => (id.length > 14 ? id.slice(0, 14) + '…' : id);

// ---------- the lists, kept fresh by the live stream ----------

let refreshTimer = null;
let soonTimer = null;
function refreshSoon() {
  if (soonTimer) return;
  soonTimer = setTimeout(() => { soonTimer = null; refreshLists(); }, 1000);
}
// The sessions whose events came since the lists were last read: only their rows are read
// again, 256 to a request (a whole list of thousands of sessions read on every event cost the
// daemon and the tab far more than the event, and with many sessions busy at once it was read
// whole almost every time).
const changed = new Set();
let whole = true;
// Whether the approval queue may have changed since it was read: only an event that changes it
// (or a whole read) has it read again, not every event of every session.
let queueChanged = true;
const QUEUE_EVENTS = new Set(['approval_required', 'approval_resolved', 'session_ended', 'agenda']);
// Pseudo-sessions: their events are the daemon's, with no row of their own.
const NO_ROW = new Set(['agenda', 'memory', 'daemon']);
function refreshLists(sessionId, queue = true) {
  if (sessionId === undefined) whole = true;
  else if (!NO_ROW.has(sessionId)) changed.add(sessionId);
  if (queue || whole) queueChanged = true;
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    // One read at a time: a read of a few rows starts from what the read before it gave.
    reading = reading.then(readLists);
  }, 60);
}
let reading = Promise.resolve();
async function readLists() {
  const ids = whole ? null : [...changed];
  const queue = queueChanged;
  whole = false;
  queueChanged = false;
  changed.clear();
  try {
    const [sessions, approvals] = await Promise.all([
      ids ? changedSessions(ids) : allSessions(),
      queue ? getJson('/api/approvals') : state.approvals,
    ]);
    state.sessions = sessions;
    state.approvals = approvals;
    const badge = document.getElementById('approval-count');
    badge.textContent = String(approvals.length);
    badge.hidden = approvals.length === 0;
    if (page && page.onLists) page.onLists();
  } catch (e) {
    whole = true;
    queueChanged = true;
    toast(String(e.message || e));
  }
}

// The list with sessions `ids` read again: each replaced in place, or added at the end (a new
// session is the newest). An id that names no session (any more) is passed over.
async function changedSessions(ids) {
  const asks = [];
  for (let i = 0; i < ids.length; i += SESSIONS_PAGE) {
    const part = ids.slice(i, i + SESSIONS_PAGE);
    asks.push(getJson('/api/sessions?ids=' + part.map(encodeURIComponent).join(',')));
  }
  const got = (await Promise.all(asks)).flat();
  const sessions = state.sessions.slice();
  for (const s of got) {
    const at = sessions.findIndex((x) => x.id === s.id);
    // A row read by id has no `member`: in a fleet it keeps the one the whole list gave it.
    if (at >= 0) sessions[at] = { member: sessions[at].member, member_lost: sessions[at].member_lost, ...s };
    else sessions.push(s);
  }
  return sessions;
}

function setConn(ok) {
  const el = document.getElementById('conn');
  el.textContent = ok ? 'live' : 'reconnecting';
  el.className = 'conn ' + (ok ? 'ok' : 'down');
}

// The tab's one stream: every envelope once, in order, from the moment it first opened (the
// server subscribes before it answers, so once open nothing published later is missed). After
// a `lagged` message the server ends it and the browser reconnects from its last id.
const live = { open: false, waiting: [] };
const events = new EventSource('/api/events');
events.onopen = () => {
  live.open = true;
  for (const resolve of live.waiting.splice(0)) resolve();
  setConn(true);
  refreshLists();
};
events.onerror = () => setConn(false);
events.onmessage = (m) => {
  const env = JSON.parse(m.data);
  if (env.event.type !== 'model_response_delta') {
    // Another fleet member's event (env.member): its list, which /api/sessions shows, is
    // published a moment after the event, so the lists are asked for whole once more.
    if (env.member) {
      refreshLists();
      refreshSoon();
    } else if (env.event.type === 'sessions_pruned' || env.event.type === 'sessions_changed') {
      // Their records are gone, or another process's sessions were found or ended: the list
      // read again has them as they are now, in their places.
      refreshLists();
    } else {
      refreshLists(env.session_id, QUEUE_EVENTS.has(env.event.type));
    }
  }
  // A due reminder, or a scheduled session started, missed or failed: said on every page.
  if (env.event.type === 'agenda' && env.session_id === 'agenda') {
    const e = env.event;
    toast('Agenda #' + e.id + ' ' + e.notice + ': ' + e.text + (e.detail ? ' — ' + e.detail : ''));
  }
  if (page && page.onEvent) page.onEvent(env);
};
events.addEventListener('lagged', () => refreshLists());
const streamOpen = () => (live.open ? Promise.resolve() : new Promise((r) => live.waiting.push(r)));

// ---------- approval buttons, shared by the queue and the session page ----------

function approvalButtons(a) {
  const act = (action) => async (ev) => {
    ev.target.closest('.approval').classList.add('busy');
    await send({ intent: 'session', session_id: a.session_id, action, id: a.id });
    refreshLists();
  };
  if (a.category === 'memory') {
    // A proposed memory is kept or dropped, one at a time: "approve all" would mean nothing more.
    return h('div', { class: 'buttons' },
      h('button', { class: 'approve', onclick: act('approve') }, 'Remember'),
      h('button', { class: 'deny', onclick: act('deny') }, 'Drop'));
  }
  if (a.category === 'schedule') {
    // A scheduled session is approved or refused whole: no skip, no "everything after".
    return h('div', { class: 'buttons' },
      h('button', { class: 'approve', onclick: act('approve') }, 'Approve schedule'),
      h('button', { class: 'deny', onclick: act('deny') }, 'Refuse'));
  }
  if (a.category === 'network') {
    // A connection: this one, the host for the session, or the host for good (the project's
    // allow list, kept trusted only if it was).
    return h('div', { class: 'buttons' },
      h('button', { class: 'approve', onclick: act('approve') }, 'Allow once'),
      h('button', { class: 'deny', onclick: act('deny') }, 'Deny'),
      h('button', { onclick: act('skip') }, 'Skip'),
      h('button', { onclick: act('approve_all'), title: 'Allow this host for the rest of the session' }, 'Allow for session'),
      h('button', { class: 'allow-host', onclick: act('allow_host'), title: "Allow this host for good: added to [sandbox.network] allow in the project's intendant.toml" }, 'Allow host for good'));
  }
  return h('div', { class: 'buttons' },
    h('button', { class: 'approve', onclick: act('approve') }, 'Approve'),
    h('button', { class: 'deny', onclick: act('deny') }, 'Deny'),
    h('button', { onclick: act('skip') }, 'Skip'),
    h('button', { onclick: act('approve_all'), title: 'Approve this and everything after it in the session' }, 'Approve all'));
}

function approvalCard(a, withSession) {
  return h('div', { class: 'approval', 'data-approval': a.id },
    h('div', { class: 'meta' },
      h('span', { class: 'cat' }, a.category.replace(/_/g, ' ')),
      withSession && a.session_id === 'agenda' ? h('a', { href: '#/agenda' }, 'agenda') : null,
      // A proposal whose session ended waits under the pseudo-session `memory`.
      withSession && a.session_id === 'memory' ? h('a', { href: '#/memory' }, 'memory') : null,
      withSession && a.session_id !== 'agenda' && a.session_id !== 'memory' ? h('a', { href: '#/s/' + encodeURIComponent(a.session_id) }, short(a.session_id)) : null,
      withSession ? h('span', { class: 'project' }, a.project) : null,
      h('span', { class: 'age', title: a.requested }, age(a.requested))),
    h('pre', { class: 'preview' }, a.command_preview),
    a.detail ? h('details', {}, h('summary', {}, 'What it changes'), h('pre', {}, a.detail)) : null,
    approvalButtons(a));
}

// ---------- pages ----------

function sessionsPage() {
  const status = h('select', { onchange: () => draw() },
    h('option', { value: '' }, 'every status'),
    ['running', 'waiting_for_human', 'queued', 'idle', 'done', 'failed', 'interrupted']
      .map((s) => h('option', { value: s }, statusLabel(s))));
  const project = h('input', { type: 'search', placeholder: 'project contains…', oninput: () => draw() });
  const body = h('tbody');
  const head = h('thead');
  // In a fleet every member's sessions are listed, each with its member: a column of its own.
  const fleet = () => state.sessions.some((s) => s.member);
  function row(s, depth) {
    return h('tr', { 'data-session': s.id, 'data-status': s.status },
      h('td', { class: 'id', indent: depth ? (depth * 1.2 + 0.4) + 'em' : null },
        depth ? '↳ ' : '', h('a', { href: '#/s/' + encodeURIComponent(s.id) }, short(s.id))),
      h('td', {}, h('span', { class: 'status st-' + s.status }, statusLabel(s.status)),
        s.pending_approvals ? h('span', { class: 'badge' }, String(s.pending_approvals)) : null),
      h('td', { class: 'task' }, s.task),
      h('td', { class: 'project' }, s.project),
      h('td', {}, backendName(s.backend), ' · ', s.provider, ' · ', s.model),
      h('td', { title: s.created }, age(s.created)),
      h('td', { class: 'num' }, fmtTokens(s.input_tokens + s.output_tokens)),
      h('td', { class: 'num' }, fmtCost(s.cost_usd)),
      fleet() ? h('td', { class: 'member' }, s.member || '', s.member_lost ? ' (gone)' : '') : null);
  }
  function draw() {
    const wanted = (s) => (!status.value || s.status === status.value)
      && (!project.value || s.project.includes(project.value));
    const children = new Map();
    const ids = new Set(state.sessions.map((s) => s.id));
    for (const s of state.sessions) {
      const p = s.parent && ids.has(s.parent) ? s.parent : '';
      if (!children.has(p)) children.set(p, []);
      children.get(p).push(s);
    }
    const rows = [];
    const walk = (parent, depth) => {
      for (const s of children.get(parent) || []) {
        if (wanted(s)) rows.push(row(s, depth));
        walk(s.id, depth + 1);
      }
    };
    walk('', 0);
    const columns = ['Session', 'Status', 'Task', 'Project', 'Runs on', 'Age', 'Tokens', 'Cost'];
    if (fleet()) columns.push('Member');
    head.replaceChildren(h('tr', {}, columns.map((t) => h('th', {}, t))));
    body.replaceChildren(...rows);
    if (!rows.length) body.append(h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, 'No sessions.')));
  }
  // Other members' sessions come with their events on the live stream; a member that is gone
  // says nothing, so while the list shows a fleet it is asked for again every 15 s as well.
  const poll = setInterval(() => { if (fleet()) refreshLists(); }, 15000);
  return {
    render() {
      view.replaceChildren(
        h('div', { class: 'bar' }, h('h1', {}, 'Sessions'), status, project),
        h('div', { class: 'scroll' }, h('table', { class: 'sessions' }, head, body)));
      draw();
    },
    onLists: draw,
    close() { clearInterval(poll); },
  };
}

function approvalsPage() {
  const list = h('div', { id: 'approvals' });
  function draw() {
    const items = [...state.approvals].sort((a, b) => a.seq - b.seq);
    list.replaceChildren(...items.map((a) => approvalCard(a, true)));
    if (!items.length) list.append(h('p', { class: 'empty' }, 'Nothing is waiting for you.'));
  }
  return {
    render() { view.replaceChildren(h('h1', {}, 'Approvals'), list); draw(); },
    onLists: draw,
  };
}

function agendaPage() {
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });
  const text = h('input', { name: 'text', placeholder: 'what to do later…', required: true });
  const remind = h('input', { name: 'remind', type: 'datetime-local', title: 'remind at (optional)' });
  // One agenda action (a refusal is the toast `send` shows), then the list again.
  async function act(op) {
    await send(Object.assign({ intent: 'agenda' }, op));
    await draw();
  }
  const iso = (local) => (local ? new Date(local).toISOString() : undefined);
  const form = h('form', {
    class: 'bar',
    onsubmit: (ev) => {
      ev.preventDefault();
      act({ action: 'add', text: text.value, remind_at: iso(remind.value) });
      text.value = '';
      remind.value = '';
    },
  }, text, remind, h('button', { type: 'submit' }, 'Add'));
  function buttons(e) {
    const b = [];
    if (e.kind === 'item' && e.state === 'open') {
      b.push(h('button', { onclick: () => act({ action: 'done', id: e.id }) }, 'Done'));
      b.push(h('button', {
        onclick: () => act({ action: 'snooze', id: e.id, until: new Date(Date.now() + 3600e3).toISOString() }),
        title: 'remind again in an hour',
      }, 'Snooze 1h'));
    }
    if (e.kind === 'schedule' && e.state === 'pending') {
      b.push(h('button', { class: 'approve', onclick: () => act({ action: 'approve', id: e.id }) }, 'Approve schedule'));
      b.push(h('button', { class: 'deny', onclick: () => act({ action: 'reject', id: e.id }) }, 'Refuse'));
    }
    if (e.kind === 'schedule' && (e.state === 'pending' || e.state === 'approved')) {
      b.push(h('button', { onclick: () => act({ action: 'done', id: e.id }) }, 'Cancel'));
    }
    return b;
  }
  function row(e) {
    const what = e.kind === 'schedule' && e.request
      ? [e.text, h('div', { class: 'dim' }, 'in ', e.request.project, e.digest ? ' · sha256 ' + e.digest.slice(0, 12) + '…' : '')]
      : [e.text];
    return h('tr', { 'data-agenda': e.id, 'data-state': e.state },
      h('td', { class: 'num' }, String(e.id)),
      h('td', {}, e.kind),
      h('td', {}, h('span', { class: 'status st-' + e.state }, e.state)),
      h('td', { title: e.at || '' }, e.at ? new Date(e.at).toLocaleString() : '—'),
      h('td', { class: 'task' }, ...what,
        e.session_id ? h('div', {}, h('a', { href: '#/s/' + encodeURIComponent(e.session_id) }, 'session ' + short(e.session_id))) : null,
        e.note ? h('div', { class: 'dim' }, e.note) : null),
      h('td', {}, h('div', { class: 'buttons' }, ...buttons(e))));
  }
  async function draw() {
    let entries = [];
    try {
      entries = await getJson('/api/agenda');
      error.hidden = true;
    } catch (e) {
      error.textContent = 'The agenda cannot be read: ' + String(e.message || e);
      error.hidden = false;
    }
    body.replaceChildren(...entries.map(row));
    if (!entries.length) body.append(h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'The agenda is empty.')));
  }
  return {
    render() {
      view.replaceChildren(
        h('h1', {}, 'Agenda'), form, error,
        h('div', { class: 'scroll' }, h('table', { class: 'sessions agenda' },
          h('thead', {}, h('tr', {}, ['#', 'Kind', 'State', 'When', 'What', ''].map((t) => h('th', {}, t)))),
          body)));
      draw();
    },
    onLists: draw,
  };
}

// The memories humans keep (docs/memory.md): listed or searched, added, edited, removed. A
// session's model only proposes one; its proposal waits in the approvals (category memory).
function memoryPage() {
  const body = h('tbody');
  const error = h('p', { class: 'error', hidden: true });
  const note = h('p', { class: 'dim', hidden: true });
  const query = h('input', { type: 'search', name: 'q', placeholder: 'search the memories…' });
  const scope = h('input', { name: 'scope', value: 'all', list: 'memory-scopes', title: 'all, user or project:/path', autocomplete: 'off' });
  const scopes = h('datalist', { id: 'memory-scopes' });
  const search = h('form', {
    class: 'bar',
    onsubmit: (ev) => { ev.preventDefault(); draw(); },
  }, query, scope, scopes, h('button', { type: 'submit' }, 'Search'));
  const newText = h('textarea', { name: 'text', rows: 2, placeholder: 'a fact worth keeping…', required: true });
  const newScope = h('input', { name: 'new-scope', value: 'user', list: 'memory-scopes', title: 'user or project:/path', autocomplete: 'off' });
  const add = h('form', {
    class: 'bar add-memory',
    onsubmit: async (ev) => {
      ev.preventDefault();
      const done = await send({ intent: 'memory', action: 'add', scope: newScope.value.trim(), text: newText.value });
      if (done) { newText.value = ''; toast('remembered #' + done.memories[0].id); }
      await draw();
    },
  }, newText, newScope, h('button', { type: 'submit', class: 'primary' }, 'Add'));
  let editing = false;
  function buttons(m, textCell) {
    const edit = h('button', {
      onclick: () => {
        editing = true;
        const area = h('textarea', { rows: 3, value: m.text });
        textCell.replaceChildren(area, h('div', { class: 'buttons' },
          h('button', {
            class: 'primary',
            onclick: async () => {
              const done = await send({ intent: 'memory', action: 'edit', id: m.id, text: area.value });
              if (done) { editing = false; await draw(); }
            },
          }, 'Save'),
          h('button', { onclick: () => { editing = false; draw(); } }, 'Cancel')));
        area.focus();
      },
    }, 'Edit');
    // Two clicks: the first arms it, so a stray tap removes nothing.
    const remove = h('button', {
      class: 'deny',
      onclick: async (ev) => {
        if (!ev.target.dataset.armed) {
          ev.target.dataset.armed = '1';
          ev.target.textContent = 'Really remove?';
          return;
        }
        if (await send({ intent: 'memory', action: 'remove', id: m.id })) toast('removed memory #' + m.id);
        await draw();
      },
    }, 'Remove');
    return h('div', { class: 'buttons' }, edit, remove);
  }
  function row(m) {
    const textCell = h('td', { class: 'task memory-text' }, h('div', { class: 'text' }, m.text));
    const from = m.source.startsWith('session:')
      ? h('a', { href: '#/s/' + encodeURIComponent(m.source.slice(8)) }, 'session ' + short(m.source.slice(8)))
      : m.source;
    return h('tr', { 'data-memory': m.id },
      h('td', { class: 'num' }, String(m.id)),
      h('td', { class: 'project' }, m.scope),
      textCell,
      h('td', { class: 'dim' }, from),
      h('td', { title: m.updated }, age(m.updated)),
      h('td', {}, buttons(m, textCell)));
  }
  async function draw() {
    const params = new URLSearchParams();
    if (query.value.trim()) params.set('q', query.value);
    if (scope.value.trim()) params.set('scope', scope.value.trim());
    let answer = { memories: [] };
    try {
      answer = await getJson('/api/memories?' + params);
      error.hidden = true;
    } catch (e) {
      error.textContent = 'The memories cannot be read: ' + String(e.message || e);
      error.hidden = false;
    }
    note.textContent = answer.note || '';
    note.hidden = !answer.note;
    const projects = new Set(state.sessions.map((s) => 'project:' + s.project));
    scopes.replaceChildren(...['all', 'user', ...projects].map((v) => h('option', { value: v })));
    body.replaceChildren(...answer.memories.map(row));
    if (!answer.memories.length) {
      body.append(h('tr', {}, h('td', { colspan: 6, class: 'empty' }, query.value.trim() ? 'No memory matches.' : 'No memories.')));
    }
  }
  return {
    render() {
      view.replaceChildren(
        h('h1', {}, 'Memory'), search, add, error, note,
        h('div', { class: 'scroll' }, h('table', { class: 'sessions memories' },
          h('thead', {}, h('tr', {}, ['#', 'Scope', 'Fact', 'Source', 'Changed', ''].map((t) => h('th', {}, t)))),
          body)));
      draw();
    },
    // An approved proposal shows up without a reload, unless a memory is being edited.
    onLists() { if (!editing) draw(); },
  };
}

// A backend name: the built-in ones offered, a named ACP agent of intendant.toml typed.
function backendInput(name, value, placeholder) {
  const list = 'backends-' + name;
  return [
    h('input', { name, value, placeholder, list, autocomplete: 'off' }),
    h('datalist', { id: list }, ['native', 'codex', 'claude-code', 'kimi'].map((b) => h('option', { value: b }))),
  ];
}

function newTaskPage() {
  const last = state.sessions.length ? state.sessions[state.sessions.length - 1].project : '';
  const form = h('form', { class: 'stack', onsubmit: async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const req = { intent: 'start', task: f.get('task'), project: f.get('project') };
    for (const k of ['autonomy', 'network', 'provider', 'model']) if (f.get(k)) req[k] = f.get(k);
    const b = f.get('backend').trim();
    if (b) req.backend = b === 'native' ? { kind: 'native' } : { kind: 'agent', name: b };
    const s = await send(req);
    if (s) location.hash = '#/s/' + encodeURIComponent(s.id);
  } },
  h('label', {}, 'Project directory', h('input', { name: 'project', required: true, value: last, placeholder: '/path/to/project' })),
  h('label', {}, 'Task', h('textarea', { name: 'task', required: true, rows: 5 })),
  h('label', {}, 'Autonomy', h('select', { name: 'autonomy' }, h('option', { value: '' }, 'default'),
    ['low', 'medium', 'high', 'full'].map((l) => h('option', { value: l }, l)))),
  h('label', {}, 'Network', h('select', { name: 'network' }, h('option', { value: '' }, 'project default'),
    [['none', 'none: its own loopback only'], ['proxy', 'proxy: out through the egress proxy'],
      ['host', 'host: only if the project trusts it']].map(([v, t]) => h('option', { value: v }, t)))),
  h('label', {}, 'Backend', backendInput('backend', '', 'default')),
  h('label', {}, 'Provider', h('input', { name: 'provider', placeholder: 'default' })),
  h('label', {}, 'Model', h('input', { name: 'model', placeholder: 'default' })),
  h('button', { type: 'submit', class: 'primary' }, 'Start'));
  return { render() { view.replaceChildren(h('h1', {}, 'New task'), form); } };
}

function settingsPage() {
  const form = h('form', { class: 'stack' });
  async function draw() {
    const s = state.settings = await getJson('/api/settings');
    const backend = backendName(s.default_backend);
    form.replaceChildren(
      h('label', {}, 'Default autonomy', h('select', { name: 'default_autonomy' },
        ['low', 'medium', 'high', 'full'].map((l) => h('option', { value: l, selected: l === s.default_autonomy }, l)))),
      h('label', {}, 'Default backend', backendInput('default_backend', backend, 'native')),
      h('label', {}, 'Sessions running at once', h('input', { name: 'max_running', type: 'number', min: 1, value: s.max_running })),
      h('button', { type: 'submit', class: 'primary' }, 'Save'));
  }
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    const b = f.get('default_backend').trim() || 'native';
    const saved = await send({
      intent: 'settings',
      default_autonomy: f.get('default_autonomy'),
      default_backend: b === 'native' ? { kind: 'native' } : { kind: 'agent', name: b },
      max_running: Number(f.get('max_running')),
    });
    if (saved) { toast('Saved.'); draw(); }
  });
  return {
    render() { view.replaceChildren(h('h1', {}, 'Settings'), form); draw().catch((e) => toast(e.message)); },
  };
}

// ---------- one session ----------

function pretty(v) { return typeof v === 'string' ? v : JSON.stringify(v, null, 2); }

// An edit as a diff: removed lines then added ones (no markup, just prefixed text lines).
function editDiff(args) {
  const lines = [];
  const add = (prefix, text, cls) => {
    for (const l of String(text).split('\n')) lines.push(h('span', { class: cls }, prefix + l + '\n'));
  };
  if (args.match_content !== undefined) add('-', args.match_content, 'del');
  if (args.line_number !== undefined) lines.push(h('span', { class: 'hunk' },
    '@@ line ' + args.line_number + (args.end_line ? '–' + args.end_line : '') + ' @@\n'));
  if (args.content !== undefined) add('+', args.content, 'add');
  return h('pre', { class: 'diff' }, lines);
}

function toolCall(e) {
  const args = e.arguments || {};
  const title = e.name === 'exec_command' || e.name === 'exec_pty' ? ['$ ', args.command]
    : e.name === 'edit_file' ? ['edit ', args.file_path, ' (', args.operation, ')']
      : [e.name];
  return h('details', { class: 'tool', open: e.name === 'edit_file' },
    h('summary', {}, h('span', { class: 'tool-name' }, e.name), ' ', h('code', {}, title)),
    e.name === 'edit_file' ? editDiff(args) : h('pre', { class: 'args' }, pretty(args)),
    h('div', { class: 'output', 'data-call': e.call_id }));
}

function batchSummary(out) {
  const results = (out && out.results) || [];
  const failed = results.filter((r) => r && r.exit_code !== undefined && r.exit_code !== 0).length;
  return results.length + ' command' + (results.length === 1 ? '' : 's') + (failed ? ', ' + failed + ' failed' : '');
}

// A unified diff as prefixed, coloured text lines (still only text nodes).
function unifiedDiff(text) {
  const lines = String(text).split('\n').map((l) => {
    const cls = l.startsWith('+') && !l.startsWith('+++') ? 'add'
      : l.startsWith('-') && !l.startsWith('---') ? 'del'
        : l.startsWith('@@') ? 'hunk' : null;
    return h('span', { class: cls }, l + '\n');
  });
  return h('pre', { class: 'diff' }, lines);
}

const changeLetter = { added: 'A', modified: 'M', deleted: 'D', type_changed: 'T' };

// The rewind of session `id` to before `turn` (or, with turn null, the undo of its last
// rewind): first a preview of what changes (files and diff) in `slot`, then the rewind itself
// once confirmed there.
async function rewindPanel(slot, id, turn) {
  const scope = h('select', { name: 'scope', onchange: () => show() },
    [['both', 'files and conversation'], ['code', 'files only'], ['conversation', 'conversation only']]
      .map(([v, label]) => h('option', { value: v }, label)));
  // Sub-agents' worktrees stay as they are unless asked.
  const children = h('input', { type: 'checkbox', name: 'with_children', onchange: () => show() });
  const request = () => {
    const r = { intent: 'rewind', session_id: id, with_children: children.checked };
    if (turn === null) r.undo = true; else { r.to_turn = turn; r.scope = scope.value; }
    return r;
  };
  const panel = h('div', { class: 'rewind', id: 'rewind-panel' });
  slot.replaceChildren(panel);
  async function show() {
    panel.replaceChildren(h('p', { class: 'dim' }, 'Looking at what would change…'));
    const seen = await send({ ...request(), preview: true });
    if (!seen) { slot.replaceChildren(); return; }
    const force = h('input', { type: 'checkbox', name: 'force' });
    const outsideFiles = (seen.changed_outside || []).concat(...(seen.children || [])
      .map((c) => (c.changed_outside || []).map((f) => short(c.session_id) + ': ' + f)));
    const outside = outsideFiles.length;
    const go = h('button', { class: 'deny', id: 'rewind-confirm', onclick: async () => {
      go.disabled = true;
      const done = await send({ ...request(), force: force.checked });
      if (!done) { go.disabled = false; return; }
      slot.replaceChildren();
      toast(done.summary);
      refreshLists();
    } }, turn === null ? 'Undo the rewind' : 'Rewind');
    // DOM's replaceChildren would show a null as the text "null": absent parts are dropped.
    panel.replaceChildren(...[
      h('h2', {}, turn === null ? 'Undo the last rewind' : 'Rewind to before turn ' + turn),
      turn === null ? null : h('label', {}, 'What goes back ', scope),
      h('label', {}, children, ' with its sub-agents\' worktrees'),
      h('p', { class: 'summary' }, seen.summary),
      seen.changes.length
        ? h('ul', { class: 'changes' }, seen.changes.map((c) => h('li', { 'data-path': c.path },
          h('code', {}, changeLetter[c.kind] || '?'), ' ', c.path)))
        : h('p', { class: 'dim' }, 'No file changes.'),
      seen.diff ? unifiedDiff(seen.diff) : null,
      seen.diff_truncated ? h('p', { class: 'dim' }, 'The diff is cut here.') : null,
      ...(seen.children || []).map((c) => h('div', { class: 'rewind-child', 'data-session': c.session_id },
        h('p', { class: 'summary' }, 'Sub-agent ', short(c.session_id), ': ', c.summary),
        c.changes.length
          ? h('ul', { class: 'changes' }, c.changes.map((f) => h('li', { 'data-path': f.path },
            h('code', {}, changeLetter[f.kind] || '?'), ' ', f.path)))
          : null)),
      seen.not_restored && seen.not_restored.length
        ? h('p', { class: 'warn' }, 'Left as they are (never captured): ', seen.not_restored.join(', ')) : null,
      outside ? h('p', { class: 'warn' }, 'Changed since the session\'s last checkpoint by something else (lost if you rewind): ',
        outsideFiles.join(', '), ' ', h('label', {}, force, ' rewind anyway')) : null,
      h('div', { class: 'buttons' }, go, h('button', { onclick: () => slot.replaceChildren() }, 'Cancel')),
    ].filter(Boolean));
  }
  await show();
}

// A session's Network panel: its egress events (from the record and as they come) summed per
// destination and verdict, so a session that opened thousands of connections is a few rows.
// Hidden until the session's first connection.
function networkPanel() {
  const rows = new Map(); // "host:port verdict" -> { e, count, up, down, ms, tr }
  const body = h('tbody');
  const summary = h('summary', {});
  const element = h('details', { class: 'network', id: 'network-panel', hidden: true }, summary,
    h('table', { class: 'network' },
      h('thead', {}, h('tr', {}, ['Host', 'Port', 'Verdict', 'Conns', 'Up', 'Down', 'Time'].map((c) => h('th', {}, c)))),
      body));
  const draw = (row) => row.tr.replaceChildren(
    h('td', { class: 'host' }, row.e.host), h('td', {}, String(row.e.port)),
    h('td', { class: 'verdict v-' + row.e.verdict, title: row.e.rule }, row.e.verdict),
    h('td', {}, String(row.count)), h('td', {}, fmtBytes(row.up)), h('td', {}, fmtBytes(row.down)),
    h('td', {}, row.ms + ' ms'));
  let total = 0;
  let refused = 0;
  return {
    element,
    add(e) {
      const key = e.host + ':' + e.port + ' ' + e.verdict;
      let row = rows.get(key);
      if (!row) {
        row = { e, count: 0, up: 0, down: 0, ms: 0, tr: h('tr', { 'data-host': e.host, 'data-verdict': e.verdict }) };
        rows.set(key, row);
        body.append(row.tr);
      }
      row.e = e;
      row.count += 1;
      row.up += e.bytes_up;
      row.down += e.bytes_down;
      row.ms += e.duration_ms;
      draw(row);
      total += 1;
      if (e.verdict !== 'allowed') refused += 1;
      summary.replaceChildren('Network: ', String(total), total === 1 ? ' connection' : ' connections',
        refused ? ' (' + refused + ' not allowed)' : '', ' to ', String(new Set([...rows.values()].map((r) => r.e.host)).size), ' host(s)');
      element.hidden = false;
    },
  };
}

function sessionPage(id) {
  let closed = false;
  let replayed = 0; // the last recorded seq shown; the stream's events wait until then
  let early = []; // this session's stream events that came while the record was read
  let streaming = null; // the element model_response_delta text goes to
  const transcript = h('ol', { class: 'transcript', id: 'transcript' });
  const head = h('div', { class: 'session-head' });
  const inlineApprovals = h('div', { class: 'inline-approvals' });
  const network = networkPanel();
  const questions = new Map(); // question id -> its line
  const approvalLines = new Map(); // approval id -> its line
  const calls = new Map(); // call id -> output element
  const seen = new Set();
  const rewindSlot = h('div', { class: 'rewind-slot' });
  // Turns as the session's checkpoints number them: across its runs (each run's events count
  // from 1), so the n-th turn_started of the record is turn n.
  let turns = 0;
  let turnLine = null; // the line of the current turn, which gets a Rewind button once it ran a batch
  // A round works, or the run has not begun its first (it waits for a slot; a run's first round
  // takes its task): a follow-up sent now reaches the session, which takes it when that round ends.
  let inRound = true;

  // A follow-up while it runs here; once it ended (stopped, its daemon restarted, finished),
  // the same box resumes it: its conversation goes on in its own project (empty: it goes on).
  let resumes = false;
  const followUp = h('form', { class: 'follow-up', onsubmit: async (ev) => {
    ev.preventDefault();
    const text = followUp.elements.text.value.trim();
    if (resumes) {
      if (await send({ intent: 'start', task: text, project: '', resume: id })) followUp.reset();
      return;
    }
    if (!text) return;
    if (await send({ intent: 'session', session_id: id, action: 'follow_up', text })) followUp.reset();
  } }, h('textarea', { name: 'text', rows: 2, placeholder: 'Follow-up instruction…' }),
  h('button', { type: 'submit', class: 'primary', id: 'follow-up-send' }, 'Send'));

  function drawHead() {
    const s = state.sessions.find((x) => x.id === id);
    if (!s) { head.replaceChildren(h('h1', {}, short(id))); return; }
    const autonomy = h('select', { disabled: s.run_by != null, onchange: () => send({ intent: 'autonomy', session_id: id, level: autonomy.value }) },
      ['low', 'medium', 'high', 'full'].map((l) => h('option', { value: l, selected: l === s.autonomy }, l)));
    const live = !['done', 'failed', 'interrupted'].includes(s.status);
    // Run by another process (a one-shot run beside the daemon): followed here, answered there.
    const here = live && s.run_by == null;
    followUp.hidden = !here && live;
    resumes = !live && s.run_by == null;
    followUp.elements.text.placeholder = resumes ? 'Resume it: what should it do now? (empty: go on)' : 'Follow-up instruction…';
    followUp.querySelector('button').textContent = resumes ? 'Resume' : 'Send';
    // Its record is another process's while it runs: no rewind of it until that run ends.
    transcript.classList.toggle('run-elsewhere', s.run_by != null);
    head.replaceChildren(
      h('h1', { class: 'task' }, s.task || short(s.id)),
      h('div', { class: 'meta' },
        h('span', { class: 'status st-' + s.status, id: 'session-status' }, statusLabel(s.status)),
        // Why it ended: said in its transcript too, unless nothing could end it there (its
        // daemon killed, its record unwritable).
        !live && s.reason ? h('span', { id: 'session-reason', class: 'dim' }, s.reason) : null,
        h('span', {}, s.project),
        s.network ? h('span', { id: 'session-network', title: 'What network its commands get' }, 'network ', s.network) : null,
        h('span', {}, backendName(s.backend), ' · ', s.provider, ' · ', s.model),
        h('span', {}, 'in ', fmtTokens(s.input_tokens), ' · out ', fmtTokens(s.output_tokens), ' · ', fmtCost(s.cost_usd)),
        s.usage ? h('span', { id: 'session-usage', title: 'What its processes use now, from its cgroups' }, fmtUsage(s.usage)) : null,
        s.parent ? h('a', { href: '#/s/' + encodeURIComponent(s.parent) }, 'parent ' + short(s.parent)) : null,
        // A sub-agent's own checkout: its branch, and what became of it once it ended.
        s.worktree ? h('span', { id: 'session-worktree', title: s.worktree.path },
          'worktree ', s.worktree.branch, ' (', s.worktree.outcome || 'in use', ')') : null,
        s.skills && s.skills.length ? h('span', { id: 'session-skills', title: 'Skills this session invoked' }, 'Skills: ', s.skills.join(', ')) : null,
        s.run_by != null ? h('span', { id: 'session-run-by', class: 'warn' }, 'Run by another process (pid ', String(s.run_by),
          '), which asks its own human: followed here, answered where it runs') : null),
      h('div', { class: 'buttons' },
        h('label', {}, 'Autonomy ', autonomy),
        h('button', { disabled: !here, onclick: () => send({ intent: 'interrupt', session_id: id }) }, 'Interrupt'),
        h('button', { class: 'deny', disabled: !here, onclick: () => send({ intent: 'stop', session_id: id }) }, 'Stop'),
        h('button', { title: 'Put back what the last rewind changed', disabled: s.run_by != null, onclick: () => rewindPanel(rewindSlot, id, null).catch((e) => toast(String(e.message || e))) }, 'Undo rewind')));
  }

  function drawApprovals() {
    const mine = state.approvals.filter((a) => a.session_id === id).sort((a, b) => a.seq - b.seq);
    inlineApprovals.replaceChildren(...mine.map((a) => approvalCard(a, false)));
    const pending = new Set(mine.map((a) => a.id));
    for (const [aid, li] of approvalLines) li.classList.toggle('pending', pending.has(aid));
  }

  function line(env, cls, ...kids) {
    return h('li', { class: 'ev ' + cls, 'data-seq': env.seq, 'data-type': env.event.type }, ...kids);
  }

  function render(env) {
    const e = env.event;
    switch (e.type) {
      case 'session_started':
        inRound = true;
        return line(env, 'note', (e.resumed ? 'Resumed: ' : 'Started: '), e.task);
      case 'session_ended':
        // What is sent before a resume's run begins waits for its first round.
        inRound = true;
        return line(env, 'end st-' + e.status, 'Session ended: ', e.status, e.reason ? ' — ' + e.reason : '');
      case 'turn_started': {
        turns += 1;
        inRound = true;
        turnLine = line(env, 'turn', 'Turn ', turns);
        turnLine.dataset.turn = turns;
        return turnLine;
      }
      case 'model_response':
        return line(env, 'model',
          e.reasoning ? h('details', { class: 'reasoning' }, h('summary', {}, 'Reasoning'), h('pre', {}, e.reasoning)) : null,
          e.text ? h('div', { class: 'text' }, e.text) : null,
          !e.text && !e.reasoning ? h('span', { class: 'dim' }, e.tool_calls.length + ' tool call(s)') : null);
      case 'refusal':
        return line(env, 'error', h('strong', {}, 'Refused: '), h('div', { class: 'text' }, e.text));
      case 'truncated':
        return line(env, 'warn', 'Truncated (turn ', e.turn, '): ', e.detail);
      case 'warning':
        return line(env, 'warn', 'Warning: ', e.message);
      case 'tool_call':
        return line(env, 'call', toolCall(e));
      case 'tool_batch': {
        if (turnLine && !turnLine.querySelector('button.rewind')) {
          const turn = turns;
          turnLine.append(' ', h('button', { class: 'rewind', 'data-turn': turn, title: 'See what rewinding to before this turn changes, then rewind',
            onclick: () => rewindPanel(rewindSlot, id, turn).catch((err) => toast(String(err.message || err))) }, 'Rewind'));
        }
        return line(env, 'batch dim', 'Batch sent to the runtime (turn ', e.turn, ')');
      }
      case 'agent_output': {
        const out = h('pre', { class: 'out' }, e.output);
        const li = line(env, 'output', h('span', { class: 'dim' }, e.name, ' output'), out);
        const slot = calls.get(e.call_id);
        if (slot) slot.replaceChildren(h('pre', { class: 'out' }, e.output));
        return li;
      }
      case 'tool_batch_result': {
        const out = e.output || {};
        const bad = out.timed_out || out.truncated || (out.results || []).some((r) => r && r.exit_code && r.exit_code !== 0);
        return line(env, 'batch' + (bad ? ' warn' : ' dim'),
          h('details', {}, h('summary', {}, 'Result: ', batchSummary(out)), h('pre', {}, pretty(out))));
      }
      case 'approval_required': {
        const li = line(env, 'ask', h('span', { class: 'cat' }, e.category.replace(/_/g, ' ')), ' needs approval: ',
          h('pre', { class: 'preview' }, e.command_preview),
          e.detail ? h('details', {}, h('summary', {}, 'What it changes'), h('pre', {}, e.detail)) : null);
        approvalLines.set(e.id, li);
        return li;
      }
      case 'approval_resolved':
        return line(env, 'verdict v-' + e.verdict, 'Approval #', e.id, ': ', e.verdict);
      case 'human_question': {
        const answer = h('form', { class: 'answer', onsubmit: async (ev) => {
          ev.preventDefault();
          const text = answer.elements.text.value;
          if (await send({ intent: 'session', session_id: id, action: 'input', text })) answer.remove();
        } }, h('input', { name: 'text', placeholder: 'Your answer', required: true }), h('button', { type: 'submit' }, 'Answer'));
        const li = line(env, 'question', h('strong', {}, 'Question: '), h('div', { class: 'text' }, e.question), answer);
        questions.set(e.id, answer);
        return li;
      }
      case 'human_answer': {
        const form = questions.get(e.id);
        if (form) form.remove();
        return line(env, 'you', 'Answer: ', e.text);
      }
      case 'budget_warning':
        return line(env, 'warn', 'Budget: ', fmtTokens(e.used_tokens), ' of ', fmtTokens(e.budget_tokens), ' tokens used');
      case 'context_management':
        return line(env, 'note', 'Context ', e.action.replace(/_/g, ' '), ': ', e.detail);
      case 'usage':
        return line(env, 'usage dim', 'Turn ', e.turn, ': in ', fmtTokens(e.input_tokens),
          e.cached_input_tokens ? ' (' + fmtTokens(e.cached_input_tokens) + ' cached)' : '',
          ', out ', fmtTokens(e.output_tokens), ', ', fmtCost(e.cost_usd));
      case 'round_complete':
        inRound = false;
        return line(env, 'round', 'Round ', e.round, ' complete (', e.reason.replace(/_/g, ' '), '): ',
          fmtTokens(e.input_tokens + e.output_tokens), ' tokens, ', fmtCost(e.cost_usd));
      case 'done':
        return line(env, 'done', h('strong', {}, 'Done: '), h('div', { class: 'text' }, e.message));
      case 'error':
        return line(env, 'error', h('strong', {}, 'Error: '), h('span', { class: 'text' }, e.message));
      case 'hook_run':
        return line(env, 'hook' + (e.failure || e.verdict === 'deny' || e.verdict === 'ask' ? ' warn' : ' dim'),
          'Hook ', e.hook_event.replace(/_/g, ' '), e.tool ? ' on ' + e.tool : '', ' (', e.hook, '): ', e.verdict,
          ' in ', e.duration_ms, ' ms', e.reason ? ' — ' + e.reason : '', e.failure ? ' — failed: ' + e.failure : '');
      case 'autonomy_changed':
        return line(env, 'note', 'Autonomy: ', e.level,
          e.own !== e.level ? ' (its own is ' + e.own + '; its parent\'s level caps it)' : '');
      case 'egress':
        return line(env, e.verdict === 'allowed' ? 'note dim' : 'warn', 'Network: ', e.host, ':', e.port, ' ', e.verdict,
          ' (', e.rule, ')', e.verdict === 'allowed' ? ' · ' + e.bytes_up + ' B up, ' + e.bytes_down + ' B down' : '');
      case 'mcp_server':
        return line(env, ['ready', 'tools_changed', 'let_go'].includes(e.state) ? 'note' : 'warn',
          'MCP server ', e.server, ' ', e.state.replace(/_/g, ' '), e.detail ? ': ' + e.detail : '');
      case 'agenda':
        return line(env, e.notice === 'missed' || e.notice === 'failed' ? 'warn' : 'note',
          'Agenda #', e.id, ' ', e.notice, ': ', e.text, e.detail ? ' — ' + e.detail : '');
      case 'follow_up_held':
        return line(env, 'note', 'You (held until the session can take it): follow up: ', e.text);
      case 'control_command':
        return line(env, 'you', e.action === 'follow_up' && inRound ? 'You (taken when this round ends): ' : 'You: ',
          e.action.replace(/_/g, ' '), e.id !== undefined ? ' #' + e.id : '', e.text ? ': ' + e.text : '');
      default:
        return line(env, 'dim', e.type);
    }
  }

  // Set once the page shows the session from its record: how far the record was read. The
  // daemon relays each record with where its line ends (`record_end`), so one it relays that
  // ends there or before was shown already.
  let recordedTo = null;
  function onEnvelope(env) {
    if (env.session_id !== id || seen.has(env.seq) || env.seq <= replayed) return;
    if (recordedTo !== null && env.record_end != null && env.record_end <= recordedTo) return;
    show(env);
  }
  function show(env) {
    const e = env.event;
    if (e.type === 'model_response_delta') {
      if (!streaming) {
        streaming = h('li', { class: 'ev model streaming' }, h('div', { class: 'text' }));
        transcript.append(streaming);
      }
      streaming.firstChild.append(e.text);
    } else {
      if (env.seq != null) seen.add(env.seq);
      if (e.type === 'model_response' && streaming) { streaming.remove(); streaming = null; }
      const li = render(env);
      if (e.type === 'tool_call') calls.set(e.call_id, li.querySelector('.output'));
      if (e.type === 'egress') network.add(e);
      transcript.append(li);
      if (streaming) transcript.append(streaming);
    }
    followBottom();
  }

  // Keeps the newest line in view while the reader is at the bottom: one layout read and one
  // scroll per frame, not per event (per event, a 1,000-event replay took seconds).
  let atBottom = true;
  let scrollQueued = false;
  function followBottom() {
    if (scrollQueued || !atBottom) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      window.scrollTo(0, document.body.scrollHeight);
    });
  }
  const onScroll = () => {
    if (!scrollQueued) atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  };
  window.addEventListener('scroll', onScroll, { passive: true });

  const ONE_SHOT_RECORDED = 'A one-shot run recorded this session, not the daemon: shown from its record.';

  // The record up to now, page by page, then what the stream brought meanwhile. A session a
  // one-shot run records beside the daemon is relayed from its record while it runs, and the
  // daemon holds only its recent events of it, of its current run; the runs a one-shot run
  // recorded before a resume through the daemon are in the record alone: when what the daemon
  // holds begins otherwise than with the session's first start (a relayed event, a resumed
  // run's start, a later event), or it holds nothing of it, the session is read from its
  // record itself.
  async function replay() {
    await streamOpen();
    let shown = 0;
    let refused = null;
    for (let after = 0, more = true; more && !closed;) {
      let got;
      try {
        got = await getJson('/api/sessions/' + encodeURIComponent(id) + '/events?after=' + after);
      } catch (e) {
        if (after !== 0) throw e;
        refused = String(e.message || e);
        break;
      }
      const head = got.events[0];
      if (after === 0 && head && !beginsSession(head) && await fromRecord(recordNote(head))) {
        flushEarly();
        return;
      }
      for (const env of got.events) onEnvelope(env);
      shown += got.events.length;
      more = got.more;
      if (got.events.length) after = replayed = got.events[got.events.length - 1].seq;
    }
    const s = refused || shown > 0 ? null
      : await getJson('/api/sessions/' + encodeURIComponent(id), { absent: null });
    const ended = s && ['done', 'failed', 'interrupted'].includes(s.status);
    if ((ended || (s && s.run_by != null))
      && await fromRecord(ONE_SHOT_RECORDED)) {
      flushEarly();
      return;
    }
    const rest = flushEarly();
    const why = refused || (ended && rest === 0 ? 'Nothing of this session went through the daemon: a one-shot run '
      + 'recorded it. `intendant sessions show ' + id + '` prints its record.' : null);
    if (why) transcript.append(h('li', { class: 'ev warn', id: 'session-unpublished' }, why));
  }

  // Whether a history that begins with `env` holds the session whole: its first start, which
  // the daemon ran (`Envelope::begins_session` in the protocol crate).
  function beginsSession(env) {
    return env.record_end == null && env.event.type === 'session_started' && !env.event.resumed;
  }

  // Why the page reads the session from its record when the daemon's history begins with `head`.
  function recordNote(head) {
    if (head.record_end != null) return ONE_SHOT_RECORDED;
    if (head.event.type === 'session_started') {
      return 'Resumed through the daemon, its runs before recorded by a one-shot run: shown from its record.';
    }
    return 'The daemon no longer holds this session\'s start: shown from its record.';
  }

  // What the stream brought while the record was read, shown now; how many.
  function flushEarly() {
    const rest = early;
    early = null;
    for (const env of rest) onEnvelope(env);
    return rest.length;
  }

  // The session read from its record page by page, each record shown as its event is, under
  // `note`; what the stream brings of it afterwards (a relayed run's next records, the daemon's
  // next events) is shown unless the record showed it already (by where a relayed line ends,
  // or by the `seq` the daemon recorded with its own). False when there is no record to show
  // (another member's session, or one pruned meanwhile).
  async function fromRecord(note) {
    let shown = 0;
    let passedOver = 0;
    for (let from = 0, more = true; more && !closed;) {
      let got;
      try {
        got = await getJson('/api/sessions/' + encodeURIComponent(id) + '/record?from=' + from);
      } catch (e) {
        if (from === 0) return false;
        throw e;
      }
      if (from === 0) {
        if (!got.records.length) return false;
        transcript.append(h('li', { class: 'ev note', id: 'session-from-record' }, note));
      }
      for (const r of got.records) show({ session_id: id, seq: r.seq ?? null, ts: r.ts, event: r.event });
      shown += got.records.length;
      passedOver += got.passed_over;
      more = got.more;
      from = recordedTo = got.next;
    }
    if (passedOver) {
      transcript.append(h('li', { class: 'ev warn', id: 'session-record-passed-over' },
        passedOver + ' line(s) of the record were too long to show here or not readable: `intendant sessions show '
        + id + '` prints the record.'));
    }
    return shown > 0;
  }

  return {
    render() {
      view.replaceChildren(head, rewindSlot, inlineApprovals, network.element, transcript, followUp);
      drawHead();
      drawApprovals();
      replay().catch((e) => toast(String(e.message || e)));
    },
    onEvent(env) {
      if (env.event.type === 'sessions_pruned' && !env.member && env.event.ids.includes(id)) {
        transcript.append(h('li', { class: 'ev warn', id: 'session-pruned' },
          'This session\'s records were pruned: it can no longer be resumed, rewound or read again.'));
        followUp.hidden = true;
        return;
      }
      if (env.session_id !== id) return;
      if (early) early.push(env); else onEnvelope(env);
    },
    onLists() { drawHead(); drawApprovals(); },
    close() { closed = true; window.removeEventListener('scroll', onScroll); },
  };
}

// ---------- routing ----------

function route() {
  if (page && page.close) page.close();
  const hash = location.hash || '#/';
  let name = 'sessions';
  if (hash.startsWith('#/s/')) { name = 'session'; page = sessionPage(decodeURIComponent(hash.slice(4))); }
  else if (hash === '#/approvals') { name = 'approvals'; page = approvalsPage(); }
  else if (hash === '#/agenda') { name = 'agenda'; page = agendaPage(); }
  else if (hash === '#/memory') { name = 'memory'; page = memoryPage(); }
  else if (hash === '#/new') { name = 'new'; page = newTaskPage(); }
  else if (hash === '#/settings') { name = 'settings'; page = settingsPage(); }
  else page = sessionsPage();
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('here', a.dataset.nav === name);
  page.render();
  refreshLists();
}

window.addEventListener('hashchange', route);
route();
