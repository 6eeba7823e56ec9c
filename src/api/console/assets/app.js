// mcp-pool operators' console. Reads and changes state only through the service's own
// admin and user API (signed in by the console cookie, with the CSRF token on every
// request that changes state); live parts follow /admin/events. Text is always rendered
// as text (Preact escapes it), never as HTML.
import {
  html, render, useState, useEffect, useRef, useCallback, useMemo,
} from './vendor/htm-preact-standalone.module.js';

// ---------------------------------------------------------------- API client

let csrf = null;
let onSignedOut = () => {};

/** An error answer of the API: its stable code, message and details. */
class ApiFailure extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || `HTTP_${status}`;
    this.details = error.details || [];
  }
}

async function api(method, path, { body, user, accept } = {}) {
  const headers = { Accept: accept || 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (csrf && method !== 'GET') headers['X-CSRF-Token'] = csrf;
  if (user !== undefined) headers['X-User-Id'] = user;
  const response = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (accept === 'text/event-stream' && response.ok) return response;
  const text = await response.text();
  let parsed = null;
  try { parsed = text ? JSON.parse(text) : null; } catch { parsed = null; }
  if (!response.ok) {
    const failure = new ApiFailure(response.status, parsed);
    if (response.status === 401 && !path.startsWith('/console/session')) onSignedOut();
    throw failure;
  }
  return parsed;
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------- helpers

function useAsync(load, deps) {
  const [state, setState] = useState({ loading: true, data: null, error: null });
  const reload = useCallback(() => {
    setState((s) => ({ ...s, loading: true }));
    return load().then(
      (data) => setState({ loading: false, data, error: null }),
      (error) => setState({ loading: false, data: null, error }),
    );
  }, deps);
  useEffect(() => { reload(); }, [reload]);
  return [state, reload];
}

function ErrorBox({ error }) {
  if (!error) return null;
  const code = error.code || 'ERROR';
  return html`<div class="alert error" role="alert">
    <strong><code>${code}</code></strong> ${error.message}
    ${error.details && error.details.length
      ? html`<ul>${error.details.map((d) => html`<li>${d}</li>`)}</ul>` : null}
  </div>`;
}

/**
 * A form field's state that follows `value` (from the address) when the address changes,
 * and only then: an effect that also ran at mount could undo what was typed before it
 * ran (a fast first fill, and Find searched for nothing).
 */
function useFieldFollowing(value) {
  const [field, setField] = useState(value);
  const seen = useRef(value);
  useEffect(() => {
    if (seen.current !== value) {
      seen.current = value;
      setField(value);
    }
  }, [value]);
  return [field, setField];
}

/** How many rows a page of any list came back with. */
function rowsOn(result) {
  const rows = result.users || result.servers || result.calls || result.entries || [];
  return rows.length;
}

/** Previous/next for a server-side page; `go(page)` changes the address. */
function Pager({ result, go, label }) {
  if (!result) return null;
  const pages = Math.max(1, Math.ceil(result.total / result.pageSize));
  // A capped count (more than the service counts) says "at least": pages go on while
  // they come back full.
  const more = result.totalCapped ? '+' : '';
  const last = result.totalCapped
    ? (result.page + 1) * result.pageSize > result.total && rowsOn(result) < result.pageSize
    : result.page + 1 >= pages;
  return html`<div class="pager">
    <button type="button" disabled=${result.page === 0} onClick=${() => go(result.page - 1)}>Previous page</button>
    <span aria-live="polite" data-testid=${`${label}-page`}>Page ${result.page + 1} of ${pages}${more} · ${result.total.toLocaleString('en')}${more} ${label}</span>
    <button type="button" disabled=${last} onClick=${() => go(result.page + 1)}>Next page</button>
  </div>`;
}

/** The text of a tool result (MCP content) or of a record's response, for a person. */
function resultText(response) {
  if (response == null) return '';
  if (typeof response === 'string') return response;
  const blocks = Array.isArray(response) ? response : response.content;
  if (Array.isArray(blocks)) {
    return blocks.map((b) => (b && b.type === 'text' ? b.text : `[${(b && b.type) || 'content'}]`)).join('\n');
  }
  return JSON.stringify(response);
}

/**
 * Decides a parked call as its user and follows it until it settles (bounded): what the
 * decision led to, with the call's result. Each call's outcome is its own: deciding one
 * call while another is followed never overwrites the other's.
 */
async function decideCall(user, messageId, call, approved) {
  const answer = await api('POST', `/api/messages/${enc(messageId)}/tool-confirm`,
    { user, body: { toolCallId: call.id, approved } });
  let record = answer.toolCall;
  // A slow call is followed for up to ten minutes, asking at most every 2 s.
  const until = Date.now() + 600_000;
  for (let wait = 200; (record.status === 'invoking' || record.status === 'pending') && Date.now() < until; wait = Math.min(wait * 1.5, 2000)) {
    await new Promise((resolve) => setTimeout(resolve, wait));
    const message = await api('GET', `/api/messages/${enc(messageId)}`, { user });
    record = message.toolCalls.find((c) => c.id === call.id) || record;
  }
  return record;
}

/** The outcomes of decisions made on this page, newest first, each kept. */
function Decisions({ decisions }) {
  if (!decisions.length) return null;
  return html`<ul class="decisions" aria-label="Decisions" aria-live="polite">
    ${decisions.map((d) => html`<li key=${d.key} class=${d.error ? 'alert error' : 'alert ok'} data-decision=${d.key}>
      <strong>${d.verb} ${d.name}</strong> of ${d.user}${d.error ? html`: <code>${d.error.code}</code> ${d.error.message}`
        : d.record ? html`: now ${d.record.status}${resultText(d.record.response)
          ? html`<pre data-testid="decision-result">${resultText(d.record.response)}</pre>` : null}`
          : ': waiting for its result…'}
    </li>`)}
  </ul>`;
}

/** Decisions as a list a page keeps: `decide` adds one and fills it in when it settles. */
function useDecisions(onSettled) {
  const [decisions, setDecisions] = useState([]);
  const decide = async (user, messageId, call, approved) => {
    const key = `${messageId}/${call.id}/${Date.now()}`;
    const base = { key, user, verb: approved ? 'Approved' : 'Rejected', name: call.toolName || call.displayName };
    setDecisions((old) => [base, ...old].slice(0, 20));
    const update = (patch) => setDecisions((old) => old.map((d) => (d.key === key ? { ...d, ...patch } : d)));
    try {
      update({ record: await decideCall(user, messageId, call, approved) });
    } catch (error) {
      update({ error });
    }
    if (onSettled) onSettled();
  };
  return [decisions, decide];
}

function when(iso) {
  if (!iso) return '—';
  const date = new Date(iso);
  return date.toLocaleString();
}

function ago(iso, now) {
  if (!iso) return '—';
  const secs = Math.max(0, Math.round((now - new Date(iso).getTime()) / 1000));
  if (secs < 60) return `${secs} s`;
  if (secs < 3600) return `${Math.floor(secs / 60)} min ${secs % 60} s`;
  if (secs < 86400) return `${Math.floor(secs / 3600)} h ${Math.floor((secs % 3600) / 60)} min`;
  return `${Math.floor(secs / 86400)} d`;
}

function StateBadge({ state }) {
  return html`<span class=${`state state-${state}`}>${state.replace('_', ' ')}</span>`;
}

function useNow(everyMs) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), everyMs);
    return () => clearInterval(timer);
  }, [everyMs]);
  return now;
}

// ---------------------------------------------------------------- live events

/** One EventSource on /admin/events for the whole console, fanned out to listeners. */
const live = {
  source: null,
  listeners: new Map(),
  status: 'closed',
  statusListeners: new Set(),
  start() {
    if (this.source) return;
    const source = new EventSource('/admin/events');
    this.source = source;
    const names = ['connection', 'connection.removed', 'stats', 'calls', 'stream.lagged'];
    for (const name of names) {
      source.addEventListener(name, (event) => {
        let data = null;
        try { data = JSON.parse(event.data); } catch { return; }
        for (const listener of this.listeners.get(name) || []) listener(data);
      });
    }
    source.onopen = () => {
      this.setStatus('live');
      // What happened before the stream (re)opened was never sent on it: views that
      // keep a list reload it.
      for (const listener of this.listeners.get('stream.open') || []) listener(null);
    };
    source.onerror = () => {
      this.setStatus('reconnecting');
      // A stream refused because the session ended (expired, key revoked) signs out
      // rather than retrying forever.
      api('GET', '/console/session').catch((failure) => {
        if (failure.status === 401) onSignedOut();
      });
    };
  },
  stop() {
    if (this.source) this.source.close();
    this.source = null;
    this.setStatus('closed');
  },
  setStatus(status) {
    this.status = status;
    for (const listener of this.statusListeners) listener(status);
  },
  on(name, listener) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(listener);
    return () => this.listeners.get(name).delete(listener);
  },
};

function useLive(name, listener, deps) {
  useEffect(() => live.on(name, listener), deps);
}

function LiveStatus() {
  const [status, setStatus] = useState(live.status);
  useEffect(() => {
    live.statusListeners.add(setStatus);
    return () => live.statusListeners.delete(setStatus);
  }, []);
  return html`<span class="muted" aria-live="polite">
    ${status === 'live' ? '● live' : status === 'reconnecting' ? '○ reconnecting…' : ''}
  </span>`;
}

// ---------------------------------------------------------------- sign-in

function SignIn({ onSignedIn }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const session = await api('POST', '/console/session', { body: { key } });
      onSignedIn(session);
    } catch (failure) {
      setError(failure);
    } finally {
      setBusy(false);
    }
  };
  return html`<main id="main" class="signin">
    <form class="panel" onSubmit=${submit} aria-labelledby="signin-title">
      <h1 id="signin-title">Sign in to the mcp-pool console</h1>
      <div class="field">
        <label for="admin-key">Admin API key</label>
        <input id="admin-key" name="key" type="password" autocomplete="current-password"
          required value=${key} onInput=${(e) => setKey(e.target.value)} />
        <span class="hint">The key printed when the service first started, or one made with
          <code>mcp-pool keys create</code>.</span>
      </div>
      <${ErrorBox} error=${error} />
      <button class="primary" type="submit" disabled=${busy}>Sign in</button>
    </form>
  </main>`;
}

// ---------------------------------------------------------------- overview

const SERIES_COLOURS = ['#0b5cad', '#d1242f', '#1a7f37', '#8250df', '#bc4c00', '#0f766e', '#6e7781'];

function LineChart({ title, slots, series, unit }) {
  const width = 600;
  const height = 160;
  const pad = { left: 44, right: 8, top: 8, bottom: 20 };
  const values = series.flatMap((s) => slots.map((slot) => s.value(slot)).filter((v) => v != null));
  const max = Math.max(1e-9, ...values) * 1.1;
  const x = (i) => pad.left + (i * (width - pad.left - pad.right)) / Math.max(1, slots.length - 1);
  const y = (v) => height - pad.bottom - (v / max) * (height - pad.top - pad.bottom);
  const latest = series.map((s) => {
    const last = [...slots].reverse().find((slot) => s.value(slot) != null);
    return `${s.name} ${last ? fmt(s.value(last)) : '—'}${unit}`;
  }).join(', ');
  const paths = series.map((s, index) => {
    let d = '';
    slots.forEach((slot, i) => {
      const v = s.value(slot);
      if (v == null) return;
      d += `${d ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
    });
    const colour = s.colour || SERIES_COLOURS[index % SERIES_COLOURS.length];
    // A lone point has no line to draw: each value also gets a dot.
    const dots = slots.map((slot, i) => {
      const v = s.value(slot);
      return v == null || v === 0 ? null : html`<circle cx=${x(i).toFixed(1)} cy=${y(v).toFixed(1)} r="2.5" fill=${colour} />`;
    });
    return html`<g><path d=${d} fill="none" stroke=${colour} stroke-width="2" />${dots}</g>`;
  });
  return html`<figure class="chart">
    <figcaption>${title}</figcaption>
    <svg viewBox=${`0 0 ${width} ${height}`} role="img" aria-label=${`${title}, last 15 minutes. Latest: ${latest}`}
      preserveAspectRatio="none">
      <line x1=${pad.left} y1=${height - pad.bottom} x2=${width - pad.right} y2=${height - pad.bottom}
        stroke="currentColor" stroke-opacity="0.3" />
      <text x="2" y=${pad.top + 10} font-size="11" fill="currentColor">${fmt(max)}${unit}</text>
      <text x="2" y=${height - pad.bottom} font-size="11" fill="currentColor">0</text>
      <text x=${pad.left} y=${height - 4} font-size="11" fill="currentColor">−15 min</text>
      <text x=${width - pad.right - 30} y=${height - 4} font-size="11" fill="currentColor">now</text>
      ${paths}
    </svg>
    <div class="legend">${series.map((s, index) => html`<span>
      <span class="swatch" style=${`background:${s.colour || SERIES_COLOURS[index % SERIES_COLOURS.length]}`}></span>${s.name}</span>`)}
    </div>
  </figure>`;
}

function fmt(value) {
  if (value == null) return '—';
  if (value >= 100) return Math.round(value).toString();
  if (value >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

function Overview() {
  const [stats, setStats] = useState(null);
  const [calls, setCalls] = useState(null);
  const [error, setError] = useState(null);
  const [instances, setInstances] = useState(null);
  useEffect(() => {
    api('GET', '/admin/stats').then(setStats, setError);
    api('GET', '/admin/metrics/recent').then(setCalls, setError);
    api('GET', '/admin/instances').then(setInstances, setError);
  }, []);
  useLive('stats', setStats, []);
  useLive('calls', setCalls, []);
  const slots = calls ? calls.slots : [];
  const perSecond = calls ? calls.slotSeconds : 10;
  const codes = useMemo(() => {
    const all = new Set();
    for (const slot of slots) for (const code of Object.keys(slot.errors)) all.add(code);
    return [...all].sort();
  }, [calls]);
  const c = stats && stats.connections;
  const card = (label, value, testid) => html`<div class="card" data-testid=${testid}>
    <div class="label">${label}</div><div class="value">${value ?? '—'}</div></div>`;
  const liveInstances = instances ? instances.instances.filter((i) => i.live).length : null;
  const sandbox = stats && stats.sandbox;
  return html`<h1>Overview</h1>
    <${ErrorBox} error=${error} />
    ${sandbox && !sandbox.isolated ? html`<div class="alert error" role="alert" data-testid="not-isolated">
      Stdio servers are not isolated: ${sandbox.problem}</div>` : null}
    <h2>Now</h2>
    <div class="cards">
      ${card('Live connections', c && c.total, 'connections-total')}
      ${card('Connected', c && c.connected, 'connections-connected')}
      ${card('Connecting', c && c.connecting, 'connections-connecting')}
      ${card('Errored', c && c.error, 'connections-error')}
      ${card('Awaiting authorization', c && c.authRequired, 'connections-auth')}
      ${card('Stdio processes', c && c.stdio, 'stdio')}
      <a class="card-link" href="#/approvals">${card('Parked tool calls', stats && stats.confirmations.parkedCalls, 'parked')}</a>
      ${card('Confirmation actors', stats && stats.confirmations.activeMessages, 'confirmation-actors')}
      ${card('Live instances', liveInstances, 'instances')}
    </div>
    <h2>Tool calls, last 15 minutes (this instance)</h2>
    <div class="charts">
      <${LineChart} title="Calls per second" unit="/s" slots=${slots}
        series=${[{ name: 'calls/s', value: (s) => s.calls / perSecond }]} />
      <${LineChart} title="Latency" unit=" ms" slots=${slots}
        series=${[{ name: 'p50', value: (s) => s.p50Ms }, { name: 'p99', value: (s) => s.p99Ms, colour: '#d1242f' }]} />
      <${LineChart} title="Errors by code" unit="" slots=${slots}
        series=${codes.length ? codes.map((code) => ({ name: code, value: (s) => s.errors[code] || 0 }))
          : [{ name: 'no errors', value: () => 0, colour: '#1a7f37' }]} />
    </div>`;
}

// ---------------------------------------------------------------- connections

/** Resident memory as an operator reads it. */
const mebibytes = (bytes) => `${(bytes / 1048576).toFixed(1)} MiB`;

const STATES = ['connected', 'connecting', 'disconnected', 'error', 'auth_required'];
const connectionKey = (c) =>
  `${c.userId}\u0000${c.serverId}\u0000${c.scope || ''}\u0000${c.olderClients ? 'older' : ''}`;

function Connections() {
  const [rows, setRows] = useState(new Map());
  const [error, setError] = useState(null);
  const [notice, setNotice] = useState(null);
  const [filter, setFilter] = useState({ user: '', server: '', state: '' });
  const now = useNow(5000);
  // A list read while events arrive must not undo them: the events seen since the
  // latest read began are applied again to its answer, and an older read's answer that
  // comes after a newer one began is dropped.
  const reads = useRef({ latest: 0, seen: [] });
  const change = (apply) => {
    reads.current.seen.push(apply);
    setRows((old) => { const next = new Map(old); apply(next); return next; });
  };
  const load = useCallback(() => {
    const read = ++reads.current.latest;
    reads.current.seen = [];
    return api('GET', '/admin/connections').then((body) => {
      if (read !== reads.current.latest) return;
      const next = new Map(body.connections.map((c) => [connectionKey(c), c]));
      for (const apply of reads.current.seen) apply(next);
      setRows(next);
    }, setError);
  }, []);
  useEffect(() => { load(); }, [load]);
  // An event does not read /proc: a connected row keeps the list's processes and memory
  // until the next read.
  useLive('connection', (c) => change((rows) => {
    const before = rows.get(connectionKey(c));
    const kept = before && c.state === 'connected'
      ? { processes: before.processes, memoryBytes: before.memoryBytes } : {};
    rows.set(connectionKey(c), { ...kept, ...c });
  }), []);
  useLive('connection.removed', (c) => change((rows) => rows.delete(connectionKey(c))), []);
  useLive('stream.lagged', () => load(), [load]);
  useLive('stream.open', () => load(), [load]);
  const act = async (label, method, path) => {
    setError(null);
    setNotice(null);
    try {
      await api(method, path);
      setNotice(label);
    } catch (failure) {
      setError(failure);
    }
  };
  const shown = [...rows.values()].filter((c) =>
    (!filter.user || c.userId.includes(filter.user))
    && (!filter.server || c.serverName.includes(filter.server) || c.serverId.includes(filter.server))
    && (!filter.state || c.state === filter.state));
  shown.sort((a, b) => a.userId.localeCompare(b.userId) || a.serverName.localeCompare(b.serverName));
  const set = (field) => (e) => setFilter({ ...filter, [field]: e.target.value });
  return html`<h1>Connections</h1>
    <form class="panel row" role="search" aria-label="Filter connections" onSubmit=${(e) => e.preventDefault()}>
      <div class="field"><label for="f-user">User</label>
        <input id="f-user" value=${filter.user} onInput=${set('user')} /></div>
      <div class="field"><label for="f-server">Server</label>
        <input id="f-server" value=${filter.server} onInput=${set('server')} /></div>
      <div class="field"><label for="f-state">State</label>
        <select id="f-state" value=${filter.state} onChange=${set('state')}>
          <option value="">any</option>
          ${STATES.map((s) => html`<option value=${s}>${s}</option>`)}
        </select></div>
    </form>
    <${ErrorBox} error=${error} />
    ${notice ? html`<div class="alert ok" role="status">${notice}</div>` : null}
    <p class="muted" aria-live="polite">${shown.length} of ${rows.size} live connections</p>
    <div class="table-wrap"><table aria-label="Live connections">
      <thead><tr><th>User</th><th>Server</th><th class="hide-narrow">Transport</th><th>State</th>
        <th class="hide-narrow">Server info</th><th class="hide-narrow">Connected since</th><th>Idle for</th>
        <th class="hide-narrow">Processes</th><th>Memory</th>
        <th>Last error</th><th class="actions">Actions</th></tr></thead>
      <tbody>${shown.map((c) => html`<tr key=${connectionKey(c)} data-user=${c.userId}
          data-server=${c.serverId} data-state=${c.state}>
        <td>${c.userId}</td>
        <td><span>${c.serverName}</span><div class="muted mono">${c.serverId}</div>
          ${c.scope ? html`<div class="muted">scope ${c.scope}</div>` : null}
          ${c.olderClients ? html`<div class="muted">2025-11-25 session, for older gateway clients</div>` : null}</td>
        <td class="hide-narrow">${c.transport}</td>
        <td><${StateBadge} state=${c.state} /></td>
        <td class="hide-narrow">${c.serverInfo ? `${c.serverInfo.name} ${c.serverInfo.version || ''}` : '—'}</td>
        <td class="hide-narrow">${when(c.connectedAt)}</td>
        <td>${ago(c.lastActiveAt, now)}</td>
        <td class="hide-narrow" data-testid="processes">${c.processes ?? '—'}</td>
        <td data-testid="memory">${c.memoryBytes == null ? '—' : mebibytes(c.memoryBytes)}${
          c.memoryBytes != null && c.memoryLimitBytes ? html`<div class="muted">of ${mebibytes(c.memoryLimitBytes)}</div>` : null}</td>
        <td>${c.lastError ? html`<span class="cause">${c.lastError}</span>` : '—'}</td>
        <td class="actions">
          <button type="button" aria-label=${`Refresh ${c.serverName} of ${c.userId}`}
            onClick=${() => act(`Refreshed ${c.serverName} of ${c.userId}.`, 'POST',
              `/admin/connections/${enc(c.userId)}/${enc(c.serverId)}/refresh`)}>Refresh</button>
          <button type="button" class="danger" aria-label=${`Stop ${c.serverName} of ${c.userId}`}
            onClick=${() => confirm(`Stop the connection to ${c.serverName} of ${c.userId}? Its calls in flight fail; the next call connects again.`)
              && act(`Stopped ${c.serverName} of ${c.userId}.`, 'DELETE',
                `/admin/connections/${enc(c.userId)}/${enc(c.serverId)}`)}>Stop</button>
        </td>
      </tr>`)}</tbody>
    </table></div>`;
}

// ---------------------------------------------------------------- users

function Users({ user, params }) {
  if (user) {
    return html`<h1>User ${user}</h1>
      <p><a href="#/users">← All users</a></p>
      <${UserDetail} key=${user} user=${user} />`;
  }
  return html`<${UserList} params=${params} />`;
}

/** Every user with servers, found by part of their id; the search and page are in the address. */
function UserList({ params }) {
  const search = params.get('search') || '';
  const page = Number(params.get('page') || 0);
  const [query, setQuery] = useFieldFollowing(search);
  const [result] = useAsync(() => api('GET', `/admin/users?${new URLSearchParams({ search, page, pageSize: PAGE_SIZE })}`), [search, page]);
  return html`<h1>Users</h1>
    <form class="panel row" role="search" aria-label="Find users"
      onSubmit=${(e) => { e.preventDefault(); navigate('users', { search: query.trim() }); }}>
      <div class="field"><label for="user-search">User id or part of it</label>
        <input id="user-search" type="search" value=${query} onInput=${(e) => setQuery(e.target.value)} /></div>
      <button class="primary" type="submit">Find</button>
    </form>
    <${ErrorBox} error=${result.error} />
    ${result.data ? html`
      <${Pager} result=${result.data} label="users" go=${(p) => navigate('users', { search, page: p })} />
      ${result.data.users.length ? html`<div class="table-wrap"><table aria-label="Users">
        <thead><tr><th>User</th><th>Servers</th><th>Open calls</th></tr></thead>
        <tbody>${result.data.users.map((u) => html`<tr data-user=${u.userId}>
          <td><a href=${`#/users/${enc(u.userId)}`}>${u.userId}</a></td>
          <td>${u.servers}</td>
          <td>${u.openCalls ? html`<strong>${u.openCalls}</strong>` : '0'}</td>
        </tr>`)}</tbody></table></div>`
      : html`<p class="muted">No user${search ? html` whose id holds “${search}”` : ''}.</p>`}` : null}`;
}

function UserDetail({ user }) {
  const [overview, reloadOverview] = useAsync(() => api('GET', `/admin/users/${enc(user)}`), [user]);
  const [servers] = useAsync(() => api('GET', '/api/mcp-servers', { user }), [user]);
  const [oauth, setOauth] = useState({});
  const [decisions, decide] = useDecisions(() => reloadOverview());
  // Live: a call parked or settled anywhere changes the parked count on the admin stream.
  useParkedChanges(reloadOverview);
  useEffect(() => {
    if (!servers.data) return;
    for (const server of servers.data.servers) {
      if (server.type === 'stdio') continue;
      api('GET', `/api/mcp-servers/${enc(server.id)}/oauth`, { user }).then(
        (state) => setOauth((old) => ({ ...old, [server.id]: state.status })),
        () => {},
      );
    }
  }, [servers.data]);
  const names = new Map((servers.data ? servers.data.servers : []).map((s) => [s.id, s.name]));
  const secrets = (map) => (map && Object.keys(map).length
    ? Object.entries(map).map(([k, v]) => html`<div><code>${k}</code> = <code>${v}</code></div>`) : '—');
  return html`
    <${QuotaUse} user=${user} />
    <h2>Servers of ${user}</h2>
    <${ErrorBox} error=${servers.error} />
    ${servers.data ? html`<div class="table-wrap" tabIndex="0" role="region" aria-label="The user's servers (scrolls sideways)"><table aria-label="Servers">
      <thead><tr><th>Name</th><th>Type</th><th>Active</th><th>Where</th><th>Headers / env</th>
        <th>OAuth</th><th>Auto-approve</th></tr></thead>
      <tbody>${servers.data.servers.map((s) => html`<tr>
        <td><span>${s.name}</span><div class="muted mono">${s.id}</div>${s.team ? html`<div class="muted">team server of ${s.team}</div>` : null}</td>
        <td>${s.type}</td><td>${s.isActive ? 'yes' : 'no'}</td>
        <td class="mono">${s.baseUrl || [s.command, ...(s.args || [])].filter(Boolean).join(' ') || s.embedded || s.preset || '—'}
          ${s.catalog ? html`<div class="muted" data-testid="catalog-entry">from the catalog: ${s.catalog}${s.catalogVersion ? ` (pinned ${s.catalogVersion})` : ''}</div>` : null}</td>
        <td>${secrets(s.headers || s.env || s.values)}</td>
        <td>${s.type === 'stdio' ? '—' : oauth[s.id] || '…'}</td>
        <td>${s.autoApproveTools.join(', ') || '—'}</td>
      </tr>`)}</tbody></table></div>
      ${servers.data.servers.length === 0 ? html`<p class="muted">No servers.</p>` : null}` : null}

    <h2>Assistants</h2>
    <${ErrorBox} error=${overview.error} />
    ${overview.data ? (overview.data.assistants.length ? html`<div class="table-wrap"><table aria-label="Assistants">
      <thead><tr><th>Assistant</th><th>Bound servers</th><th>Gateway tokens</th></tr></thead>
      <tbody>${overview.data.assistants.map((a) => html`<tr>
        <td>${a.id}</td>
        <td>${a.serverIds.map((id) => names.get(id) || id).join(', ') || '—'}</td>
        <td>${a.gatewayTokens.map((t) => t.name).join(', ') || '—'}</td>
      </tr>`)}</tbody></table></div>` : html`<p class="muted">No assistants.</p>`) : null}

    <h2>Open tool calls</h2>
    <${Decisions} decisions=${decisions} />
    ${overview.data ? (overview.data.openToolCalls.length ? html`<div class="table-wrap"><table aria-label="Open tool calls">
      <thead><tr><th>Tool</th><th>Server</th><th>Status</th><th>Arguments</th><th>Message</th><th>Decide</th></tr></thead>
      <tbody>${overview.data.openToolCalls.flatMap((m) => m.toolCalls.map((call) => html`<tr data-call=${call.id}>
        <td>${call.displayName || call.toolName}</td>
        <td>${call.serverName || '—'}</td>
        <td><span class="state">${call.status}</span></td>
        <td><pre>${JSON.stringify(call.arguments, null, 2)}</pre></td>
        <td class="mono">${m.messageId}<div class="muted">${when(m.createdAt)}</div></td>
        <td class="actions">${call.status === 'pending' ? html`
          <button type="button" class="primary" aria-label=${`Approve ${call.displayName || call.toolName}`}
            onClick=${() => decide(user, m.messageId, call, true)}>Approve</button>
          <button type="button" class="danger" aria-label=${`Reject ${call.displayName || call.toolName}`}
            onClick=${() => decide(user, m.messageId, call, false)}>Reject</button>` : 'running'}</td>
      </tr>`))}</tbody></table></div>
      <p class="hint">Decisions made here are recorded in the audit log as this admin key's.</p>`
    : html`<p class="muted">No open tool calls.</p>`) : null}`;
}

// ---------------------------------------------------------------- approvals

/** Calls `reload` whenever the number of parked calls changes (admin stream `stats`). */
function useParkedChanges(reload) {
  const last = useRef(null);
  useLive('stats', (stats) => {
    const parked = stats && stats.confirmations ? stats.confirmations.parkedCalls : null;
    if (last.current !== null && parked !== last.current) reload();
    last.current = parked;
  }, [reload]);
}

/** Every call waiting for a decision, across users, oldest first; live. */
function Approvals({ params }) {
  const page = Number(params.get('page') || 0);
  const [result, reload] = useAsync(() => api('GET', `/admin/approvals?${new URLSearchParams({ page, pageSize: PAGE_SIZE })}`), [page]);
  const [decisions, decide] = useDecisions(() => reload());
  useParkedChanges(reload);
  const now = useNow(5000);
  return html`<h1>Approvals</h1>
    <p class="hint">Every tool call waiting for its user's decision, oldest first. A decision made here is
      recorded in the audit log as this admin key's.</p>
    <${Decisions} decisions=${decisions} />
    <${ErrorBox} error=${result.error} />
    ${result.data ? html`
      <${Pager} result=${result.data} label="waiting" go=${(p) => navigate('approvals', { page: p })} />
      ${result.data.calls.length ? html`<div class="table-wrap"><table aria-label="Waiting calls">
        <thead><tr><th>Waiting for</th><th>User</th><th>Tool</th><th class="hide-narrow">Arguments</th><th class="actions">Decide</th></tr></thead>
        <tbody>${result.data.calls.map((c) => {
          const name = c.toolCall.toolName || c.toolCall.displayName;
          return html`<tr key=${`${c.messageId}/${c.toolCall.id}`} data-message=${c.messageId} data-call=${c.toolCall.id}>
            <td>${ago(c.since, now)}<div class="muted">${when(c.since)}</div></td>
            <td><a href=${`#/users/${enc(c.userId)}`}>${c.userId}</a></td>
            <td>${c.toolCall.toolName}<div class="muted">on ${c.toolCall.serverName || '—'}</div></td>
            <td class="hide-narrow"><pre>${JSON.stringify(c.toolCall.arguments, null, 2)}</pre></td>
            <td class="actions">
              <button type="button" class="primary" aria-label=${`Approve ${name} of ${c.userId}`}
                onClick=${() => decide(c.userId, c.messageId, c.toolCall, true)}>Approve</button>
              <button type="button" class="danger" aria-label=${`Reject ${name} of ${c.userId}`}
                onClick=${() => decide(c.userId, c.messageId, c.toolCall, false)}>Reject</button>
            </td>
          </tr>`;
        })}</tbody></table></div>`
      : html`<p class="muted" data-testid="no-approvals">No call is waiting for a decision.</p>`}` : null}`;
}

// ---------------------------------------------------------------- servers

/** Every user's servers by name, user or URL; each with its connection here and what to do. */
function Servers({ params }) {
  const search = params.get('search') || '';
  const stateFilter = params.get('state') || '';
  const page = Number(params.get('page') || 0);
  const [query, setQuery] = useFieldFollowing(search);
  const [stateDraft, setStateDraft] = useFieldFollowing(stateFilter);
  const [result, reload] = useAsync(() => api('GET', `/admin/servers?${new URLSearchParams({ search, state: stateFilter, page, pageSize: PAGE_SIZE })}`), [search, stateFilter, page]);
  const [notice, setNotice] = useState(null);
  const [error, setError] = useState(null);
  const [open, setOpen] = useState(null);
  const act = async (label, run) => {
    setError(null);
    setNotice(null);
    try {
      await run();
      setNotice(label);
    } catch (failure) {
      setError(failure);
    }
    reload();
  };
  const reconnect = (s) => act(`Connected ${s.name} of ${s.userId}.`, async () => {
    await api('POST', `/api/mcp-servers/${enc(s.id)}/connect`, { user: s.userId });
  });
  const toggleActive = (s) => act(`${s.isActive ? 'Deactivated' : 'Activated'} ${s.name} of ${s.userId}.`,
    () => api('PUT', `/api/mcp-servers/${enc(s.id)}`, { user: s.userId, body: { isActive: !s.isActive } }));
  const remove = (s) => {
    if (!confirm(`Delete the server “${s.name}” of ${s.userId}? Its connection stops and it is unbound from every assistant.`)) return;
    act(`Deleted ${s.name} of ${s.userId}.`, () => api('DELETE', `/api/mcp-servers/${enc(s.id)}`, { user: s.userId }));
  };
  const setTools = (s, field, label) => {
    const current = s[field].join(', ');
    const given = prompt(`${label} of “${s.name}” (${s.userId}), comma-separated:`, current);
    if (given === null) return;
    const tools = given.split(',').map((t) => t.trim()).filter(Boolean);
    act(`Saved ${label.toLowerCase()} of ${s.name}.`,
      () => api('PUT', `/api/mcp-servers/${enc(s.id)}`, { user: s.userId, body: { [field]: tools } }));
  };
  return html`<h1>Servers</h1>
    <form class="panel row" role="search" aria-label="Find servers"
      onSubmit=${(e) => { e.preventDefault(); navigate('servers', { search: query.trim(), state: stateDraft }); }}>
      <div class="field"><label for="server-search">Name, user or URL</label>
        <input id="server-search" type="search" value=${query} onInput=${(e) => setQuery(e.target.value)} /></div>
      <div class="field"><label for="server-state">Connection</label>
        <select id="server-state" value=${stateDraft} onChange=${(e) => setStateDraft(e.target.value)}>
          <option value="">any</option>${STATES.map((st) => html`<option value=${st}>${st.replace('_', ' ')}</option>`)}</select></div>
      <button class="primary" type="submit">Find</button>
    </form>
    <${ErrorBox} error=${error || result.error} />
    ${notice ? html`<div class="alert ok" role="status">${notice}</div>` : null}
    ${result.data ? html`
      <${Pager} result=${result.data} label="servers" go=${(p) => navigate('servers', { search, state: stateFilter, page: p })} />
      <p class="hint">Changes made here act for the server's user and are recorded in the audit log as this admin key's.
        The state is this instance's connection.</p>
      ${result.data.servers.length ? html`<div class="table-wrap"><table aria-label="Servers">
        <thead><tr><th>Server</th><th>User</th><th class="hide-narrow">Where</th><th>State</th><th class="actions">Actions</th></tr></thead>
        <tbody>${result.data.servers.map((s) => {
          const c = s.connection;
          return html`<tr key=${s.id} data-server=${s.id} data-user=${s.userId}>
            <td>${s.name}<div class="muted">${s.type}${s.isActive ? '' : ' · inactive'}</div>
              ${s.catalog ? html`<div class="muted" data-testid="catalog-entry">from the catalog: <a href=${`#/catalog?${new URLSearchParams({ search: s.catalog })}`}>${s.catalog}</a></div>` : null}
              ${s.disabledTools.length ? html`<div class="muted">disabled: ${s.disabledTools.join(', ')}</div>` : null}
              ${s.autoApproveTools.length ? html`<div class="muted">auto-approved: ${s.autoApproveTools.join(', ')}</div>` : null}
              ${s.homeBytes != null ? html`<div class="muted" data-testid="home">home: ${mebibytes(s.homeBytes)}</div>` : null}</td>
            <td><a href=${`#/users/${enc(s.userId)}`}>${s.userId}</a></td>
            <td class="hide-narrow mono">${s.target}</td>
            <td>${c ? html`<${StateBadge} state=${c.state} />` : html`<span class="muted">not connected here</span>`}</td>
            <td class="actions">
              <button type="button" class="primary" aria-label=${`Reconnect ${s.name} of ${s.userId}`} onClick=${() => reconnect(s)}>Reconnect</button>
              <details class="more"><summary aria-label=${`More for ${s.name} of ${s.userId}`}>More</summary>
                <div class="menu">
                  <button type="button" onClick=${() => setTools(s, 'disabledTools', 'Disabled tools')}>Disabled tools…</button>
                  <button type="button" onClick=${() => setTools(s, 'autoApproveTools', 'Auto-approved tools')}>Auto-approve…</button>
                  <button type="button" onClick=${() => toggleActive(s)}>${s.isActive ? 'Deactivate' : 'Activate'}</button>
                  <button type="button" class="danger" onClick=${() => remove(s)}>Delete</button>
                </div></details>
            </td>
          </tr>
          ${c && (c.lastError || c.history.length) ? html`<tr class="sub" data-server-detail=${s.id}><td colspan="5"><div class="sub-body">
            ${c.lastError ? html`<div class="cause" data-testid="last-error">${c.lastError}</div>` : null}
            ${c.history.length ? html`<button type="button" class="link" aria-expanded=${open === s.id}
              onClick=${() => setOpen(open === s.id ? null : s.id)}>History (${c.history.length})</button>` : null}
            ${open === s.id ? html`<ol class="history" aria-label=${`History of ${s.name}`}>
              ${[...c.history].reverse().map((h) => html`<li><${StateBadge} state=${h.state} /> ${when(h.at)}
                ${h.cause ? html`<div class="cause">${h.cause}</div>` : null}</li>`)}</ol>` : null}
          </div></td></tr>` : null}`;
        })}</tbody></table></div>`
      : html`<p class="muted">No server${search ? html` whose name, user or URL holds “${search}”` : ''}.</p>`}` : null}`;
}

// ---------------------------------------------------------------- catalog

/** `io.github.x/y` as a path: each part escaped, the one `/` kept. */
const entryPath = (name) => name.split('/').map(enc).join('/');

function Catalog({ params }) {
  const search = params.get('search') || '';
  const page = Number(params.get('page') || 0);
  const [query, setQuery] = useFieldFollowing(search);
  const [result, reload] = useAsync(() => api('GET', `/admin/catalog?${new URLSearchParams({ search, page, pageSize: PAGE_SIZE })}`), [search, page]);
  const [notice, setNotice] = useState(null);
  const [error, setError] = useState(null);
  const [documents, setDocuments] = useState('');
  const [registry, setRegistry] = useState('');
  const act = async (run) => {
    setError(null);
    setNotice(null);
    try { setNotice(await run()); } catch (failure) { setError(failure); }
    reload();
  };
  const toggle = (e) => act(async () => {
    await api('PATCH', `/admin/catalog/${entryPath(e.name)}`, { body: { enabled: !e.enabled } });
    return `${e.enabled ? 'Disabled' : 'Enabled'} ${e.name}.`;
  });
  const importReport = (report) => {
    const lines = report.imported.map((i) => `${i.outcome} ${i.name} ${i.version}`);
    const skipped = (report.skipped || []).map((k) => `skipped ${k.name} ${k.version}: ${k.reason}`);
    return `Imported ${report.imported.length}: ${[...lines, ...skipped].join('; ')}`;
  };
  const importDocuments = (e) => {
    e.preventDefault();
    let body;
    try { body = JSON.parse(documents); } catch (failure) {
      setNotice(null);
      setError({ code: 'NOT_JSON', message: `The text is not JSON: ${failure.message}` });
      return;
    }
    act(async () => { const report = await api('POST', '/admin/catalog', { body }); setDocuments(''); return importReport(report); });
  };
  const importRegistry = (e) => {
    e.preventDefault();
    act(async () => importReport(await api('POST', '/admin/catalog/registry', { body: { registry: registry.trim() } })));
  };
  return html`<h1>Catalog</h1>
    <form class="panel row" role="search" aria-label="Find catalog entries"
      onSubmit=${(e) => { e.preventDefault(); navigate('catalog', { search: query.trim() }); }}>
      <div class="field"><label for="catalog-search">Name, description or tag</label>
        <input id="catalog-search" type="search" value=${query} onInput=${(e) => setQuery(e.target.value)} /></div>
      <button class="primary" type="submit">Find</button>
    </form>
    <${ErrorBox} error=${error || result.error} />
    ${notice ? html`<div class="alert ok" role="status">${notice}</div>` : null}
    ${result.data ? html`
      <${Pager} result=${result.data} label="entries" go=${(p) => navigate('catalog', { search, page: p })} />
      <p class="hint">Users see and add only enabled entries. A package runs through the runtime configured for its registry (nothing is downloaded at run time).</p>
      ${result.data.entries.length ? html`<div class="table-wrap"><table aria-label="Catalog entries">
        <thead><tr><th>Entry</th><th class="hide-narrow">Version</th><th>State</th><th class="actions">Actions</th></tr></thead>
        <tbody>${result.data.entries.map((e) => html`<tr key=${e.name} data-entry=${e.name}>
          <td>${e.title || e.name}<div class="muted mono">${e.name}</div><div class="muted">${e.description}</div>
            ${e.problem ? html`<div class="cause">${e.problem}</div>` : null}</td>
          <td class="hide-narrow">${e.version}${e.pinnedVersion ? ' (pinned)' : ''}<div class="muted">${e.kind}</div></td>
          <td>${e.enabled ? 'enabled' : 'disabled'}<div class="muted">${e.servers} server${e.servers === 1 ? '' : 's'}</div></td>
          <td class="actions"><button type="button" class=${e.enabled ? '' : 'primary'} aria-label=${`${e.enabled ? 'Disable' : 'Enable'} ${e.name}`}
            onClick=${() => toggle(e)}>${e.enabled ? 'Disable' : 'Enable'}</button></td>
        </tr>`)}</tbody></table></div>`
      : html`<p class="muted">No entry${search ? html` holds “${search}”` : ''}.</p>`}` : null}
    <section class="panel" aria-labelledby="catalog-import-title">
      <h2 id="catalog-import-title">Import</h2>
      <form onSubmit=${importDocuments} aria-label="Import server.json">
        <div class="field"><label for="catalog-documents">server.json (one document, or an array of them)</label>
          <textarea id="catalog-documents" class="mono" required value=${documents} onInput=${(e) => setDocuments(e.target.value)}></textarea></div>
        <button class="primary" type="submit">Import</button>
      </form>
      <form class="row" onSubmit=${importRegistry} aria-label="Import from a registry">
        <div class="field"><label for="catalog-registry">Registry API</label>
          <input id="catalog-registry" type="url" required placeholder="https://registry.modelcontextprotocol.io" value=${registry} onInput=${(e) => setRegistry(e.target.value)} /></div>
        <button type="submit">Read the registry</button>
      </form>
    </section>`;
}

// ---------------------------------------------------------------- audit

const OUTCOMES = ['done', 'error', 'cancelled', 'approved', 'rejected', 'server_changed', 'server_deleted', 'connect_failed'];
const DOORS = ['rest', 'chat', 'gateway', 'xiaozhi', 'grpc'];
const PAGE_SIZE = 25;
const AUDIT_FILTERS = ['userId', 'server', 'tool', 'via', 'outcome', 'from', 'to'];

/** `datetime-local` (the browser's zone) ↔ RFC 3339 (what the address and the API hold). */
const toIso = (local) => (local ? new Date(local).toISOString() : '');
const toLocal = (iso) => {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
};

function Audit({ params }) {
  const filter = Object.fromEntries(AUDIT_FILTERS.map((k) => [k, params.get(k) || '']));
  const page = Number(params.get('page') || 0);
  const selected = params.get('row');
  const key = params.toString();
  const [draft, setDraft] = useState({ ...filter, from: toLocal(filter.from), to: toLocal(filter.to) });
  const seenKey = useRef(key);
  useEffect(() => {
    // Only when the address changes (see useFieldFollowing).
    if (seenKey.current === key) return;
    seenKey.current = key;
    setDraft({ ...filter, from: toLocal(filter.from), to: toLocal(filter.to) });
  }, [key]);
  const query = new URLSearchParams(Object.entries(filter).filter(([, v]) => v));
  const [result] = useAsync(() => api('GET', `/admin/audit?${query}&page=${page}&pageSize=${PAGE_SIZE}`), [key]);
  const [detail] = useAsync(() => (selected ? api('GET', `/admin/audit/${enc(selected)}`) : Promise.resolve(null)), [selected]);
  const [keyNames, setKeyNames] = useState(new Map());
  useEffect(() => {
    api('GET', '/admin/keys').then((body) => setKeyNames(new Map(body.keys.map((k) => [k.id, k.name]))), () => {});
  }, []);
  const go = (changes) => navigate('audit', { ...filter, page, row: selected, ...changes });
  const set = (field) => (e) => setDraft({ ...draft, [field]: e.target.value });
  const field = (id, label, input) => html`<div class="field"><label for=${id}>${label}</label>${input}</div>`;
  const who = (e) => {
    const key = e.decidedBy || e.keyId;
    if (!key) return e.via === 'chat' ? 'the agent loop' : '—';
    const name = keyNames.get(key);
    const kind = e.decidedBy || e.byAdmin ? 'admin key' : e.via === 'gateway' ? 'gateway token' : e.via === 'xiaozhi' ? 'bridge' : 'key';
    return name ? html`${kind} “${name}”` : html`${kind} <code>${key.slice(0, 8)}</code>`;
  };
  const exportLink = (format) => `/admin/audit?${new URLSearchParams([...query, ['format', format]])}`;
  return html`<h1>Audit log</h1>
    <form class="panel row" aria-label="Filter the audit log"
      onSubmit=${(e) => { e.preventDefault(); navigate('audit', { ...draft, from: toIso(draft.from), to: toIso(draft.to) }); }}>
      ${field('a-user', 'User id', html`<input id="a-user" value=${draft.userId} onInput=${set('userId')} />`)}
      ${field('a-server', 'Server name', html`<input id="a-server" value=${draft.server} onInput=${set('server')} />`)}
      ${field('a-tool', 'Tool', html`<input id="a-tool" value=${draft.tool} onInput=${set('tool')} />`)}
      ${field('a-via', 'Door', html`<select id="a-via" value=${draft.via} onChange=${set('via')}>
        <option value="">any</option>${DOORS.map((o) => html`<option value=${o}>${o}</option>`)}</select>`)}
      ${field('a-outcome', 'Outcome', html`<select id="a-outcome" value=${draft.outcome} onChange=${set('outcome')}>
        <option value="">any</option>${OUTCOMES.map((o) => html`<option value=${o}>${o.replace('_', ' ')}</option>`)}</select>`)}
      ${field('a-from', 'From', html`<input id="a-from" type="datetime-local" value=${draft.from} onInput=${set('from')} />`)}
      ${field('a-to', 'To', html`<input id="a-to" type="datetime-local" value=${draft.to} onInput=${set('to')} />`)}
      <button class="primary" type="submit">Apply</button>
      <button type="button" onClick=${() => navigate('audit')}>Clear</button>
    </form>
    <p class="row exports">Export what this filter keeps:
      <a class="button" href=${exportLink('csv')} download="audit.csv">CSV</a>
      <a class="button" href=${exportLink('ndjson')} download="audit.ndjson">NDJSON</a></p>
    <${ErrorBox} error=${result.error} />
    ${selected ? html`<section class="panel" aria-label="Audit entry" data-testid="audit-detail">
      <h2>Entry</h2>
      <${ErrorBox} error=${detail.error} />
      ${detail.data ? html`<dl class="detail">
        <dt>When</dt><dd>${when(detail.data.createdAt)}</dd>
        <dt>Who</dt><dd>${detail.data.userId} · ${who(detail.data)}${detail.data.via ? ` · via ${detail.data.via}` : ''}${detail.data.fromApp ? ' · by the server\'s view (MCP App)' : ''}</dd>
        <dt>What</dt><dd>${detail.data.serverName} · ${detail.data.toolName || '—'}</dd>
        <dt>Outcome</dt><dd>${detail.data.outcome}${detail.data.errorCode ? html` · <code>${detail.data.errorCode}</code>` : ''}
          ${detail.data.latencyMs == null ? '' : ` · ${detail.data.latencyMs} ms`}</dd>
        ${detail.data.errorMessage ? html`<dt>Error</dt><dd class="cause">${detail.data.errorMessage}</dd>` : null}
        <dt>Arguments</dt><dd><pre data-testid="audit-arguments">${detail.data.arguments || '—'}</pre></dd>
        <dt>Result</dt><dd><pre data-testid="audit-result">${detail.data.result || '—'}</pre></dd>
        <dt>Instance</dt><dd class="mono">${detail.data.instanceId || '—'}</dd>
      </dl>` : null}
      <button type="button" onClick=${() => go({ row: '' })}>Close</button>
    </section>` : null}
    ${result.data ? html`
      <${Pager} result=${result.data} label="entries" go=${(p) => go({ page: p, row: '' })} />
      <div class="table-wrap"><table aria-label="Audit entries">
        <thead><tr><th>When</th><th>User</th><th>Server</th><th>Tool</th><th>Outcome</th>
          <th>Error</th><th class="hide-narrow">Latency</th><th class="hide-narrow">Who</th><th class="actions"></th></tr></thead>
        <tbody>${result.data.entries.map((e) => html`<tr data-entry=${e.id}>
          <td>${when(e.createdAt)}</td><td>${e.userId}</td>
          <td>${e.serverName}</td><td>${e.toolName || '—'}</td><td>${e.outcome.replace('_', ' ')}</td>
          <td>${e.errorCode ? html`<code>${e.errorCode}</code>${e.errorMessage ? html`<div class="cause">${e.errorMessage}</div>` : null}` : '—'}</td>
          <td class="hide-narrow">${e.latencyMs == null ? '—' : `${e.latencyMs} ms`}</td>
          <td class="hide-narrow">${who(e)}${e.via ? html`<div class="muted">via ${e.via}</div>` : null}</td>
          <td class="actions"><button type="button" aria-label=${`Details of ${e.toolName || e.outcome} at ${when(e.createdAt)}`}
            onClick=${() => { go({ row: e.id }); scrollTo(0, 0); }}>Details</button></td>
        </tr>`)}</tbody></table></div>` : null}`;
}

// ---------------------------------------------------------------- try a server

/** The type a schema describes, JSON Schema's `type` or what its keywords imply. */
function schemaType(schema) {
  if (!schema || typeof schema !== 'object') return 'any';
  let type = schema.type;
  if (Array.isArray(type)) type = type.find((t) => t !== 'null') || 'any';
  if (type) return type;
  if (schema.enum) return 'enum';
  if (schema.properties) return 'object';
  if (schema.items) return 'array';
  return 'any';
}

function initialValue(schema) {
  if (schema && schema.default !== undefined) return schema.default;
  switch (schemaType(schema)) {
    case 'object': {
      const value = {};
      for (const [name, sub] of Object.entries(schema.properties || {})) {
        if ((schema.required || []).includes(name)) value[name] = initialValue(sub);
      }
      return value;
    }
    case 'array': return [];
    case 'boolean': return false;
    default: return undefined;
  }
}

/** Checks `value` against the parts of `schema` a form can break; path → message. */
function validate(schema, value, path = '', errors = {}, required = false) {
  const type = schemaType(schema);
  const missing = value === undefined || value === '' || value === null;
  if (missing) {
    if (required) errors[path] = 'Required.';
    return errors;
  }
  if (schema.enum && !schema.enum.some((option) => option === value)) {
    errors[path] = `Must be one of: ${schema.enum.join(', ')}.`;
  }
  if (type === 'string') {
    if (schema.minLength != null && value.length < schema.minLength) errors[path] = `At least ${schema.minLength} characters.`;
    if (schema.maxLength != null && value.length > schema.maxLength) errors[path] = `At most ${schema.maxLength} characters.`;
    if (schema.pattern) {
      try { if (!new RegExp(schema.pattern, 'u').test(value)) errors[path] = `Must match ${schema.pattern}.`; } catch { /* server checks */ }
    }
  } else if (type === 'number' || type === 'integer') {
    if (typeof value !== 'number' || Number.isNaN(value)) errors[path] = 'Must be a number.';
    else if (type === 'integer' && !Number.isInteger(value)) errors[path] = 'Must be a whole number.';
    else if (schema.minimum != null && value < schema.minimum) errors[path] = `At least ${schema.minimum}.`;
    else if (schema.maximum != null && value > schema.maximum) errors[path] = `At most ${schema.maximum}.`;
  } else if (type === 'object') {
    for (const [name, sub] of Object.entries(schema.properties || {})) {
      validate(sub, value[name], `${path}/${name}`, errors, (schema.required || []).includes(name));
    }
  } else if (type === 'array') {
    if (schema.minItems != null && value.length < schema.minItems) errors[path] = `At least ${schema.minItems} items.`;
    if (schema.maxItems != null && value.length > schema.maxItems) errors[path] = `At most ${schema.maxItems} items.`;
    value.forEach((item, i) => validate(schema.items || {}, item, `${path}/${i}`, errors, true));
  } else if (type === 'any' && value && value.__invalidJson) {
    errors[path] = 'Not valid JSON.';
  }
  return errors;
}

/** Drops empty optional fields, so the server sees only what was filled in. */
function clean(schema, value) {
  const type = schemaType(schema);
  if (type === 'object' && value && typeof value === 'object') {
    const out = {};
    for (const [name, sub] of Object.entries(schema.properties || {})) {
      const v = clean(sub, value[name]);
      if (v !== undefined && v !== '') out[name] = v;
    }
    return out;
  }
  if (type === 'array' && Array.isArray(value)) return value.map((item) => clean(schema.items || {}, item));
  if (value && value.__invalidJson) return undefined;
  return value;
}

const fieldId = (path) => `arg${path.replace(/[^A-Za-z0-9_-]/g, (c) => `_${c.charCodeAt(0)}_`)}`;

function SchemaField({ schema, name, path, value, onChange, errors, required }) {
  const type = schemaType(schema);
  const id = fieldId(path || '/root');
  const error = errors[path];
  const describedBy = [schema.description ? `${id}-hint` : null, error ? `${id}-error` : null].filter(Boolean).join(' ') || undefined;
  const label = html`<label for=${id}>${schema.title || name}${required ? html` <span aria-hidden="true">*</span><span class="visually-hidden">(required)</span>` : null}</label>`;
  const hint = schema.description ? html`<span class="hint" id=${`${id}-hint`}>${schema.description}</span>` : null;
  const message = error ? html`<span class="invalid" id=${`${id}-error`}>${error}</span>` : null;
  const common = { id, 'aria-invalid': error ? 'true' : 'false', 'aria-describedby': describedBy };

  if (type === 'object') {
    const properties = Object.entries(schema.properties || {});
    const inner = properties.map(([key, sub]) => html`<${SchemaField} key=${key} schema=${sub} name=${key}
      path=${`${path}/${key}`} value=${(value || {})[key]} errors=${errors}
      required=${(schema.required || []).includes(key)}
      onChange=${(v) => onChange({ ...(value || {}), [key]: v })} />`);
    if (!path) return html`<div>${inner}${properties.length === 0 ? html`<p class="muted">This tool takes no arguments.</p>` : null}</div>`;
    return html`<fieldset><legend>${schema.title || name}${required ? ' *' : ''}</legend>${hint}${inner}${message}</fieldset>`;
  }
  if (type === 'array') {
    const items = Array.isArray(value) ? value : [];
    const itemSchema = schema.items || {};
    return html`<fieldset aria-describedby=${describedBy}><legend>${schema.title || name}${required ? ' *' : ''}</legend>${hint}
      ${items.map((item, i) => html`<div class="array-item" key=${i}>
        <${SchemaField} schema=${itemSchema} name=${`${name} ${i + 1}`} path=${`${path}/${i}`} value=${item}
          errors=${errors} required=${true}
          onChange=${(v) => onChange(items.map((old, j) => (j === i ? v : old)))} />
        <button type="button" aria-label=${`Remove ${name} ${i + 1}`}
          onClick=${() => onChange(items.filter((_, j) => j !== i))}>Remove</button>
      </div>`)}
      <button type="button" onClick=${() => onChange([...items, initialValue(itemSchema)])}>Add ${name} item</button>
      ${message}</fieldset>`;
  }
  if (type === 'boolean') {
    return html`<div class="field inline">
      <input type="checkbox" ...${common} checked=${!!value} onChange=${(e) => onChange(e.target.checked)} />
      ${label}${hint}${message}</div>`;
  }
  let input;
  if (schema.enum) {
    input = html`<select ...${common} value=${value === undefined ? '' : String(value)}
      onChange=${(e) => onChange(e.target.value === '' ? undefined : schema.enum.find((o) => String(o) === e.target.value))}>
      <option value="">${required ? 'choose…' : '(none)'}</option>
      ${schema.enum.map((option) => html`<option value=${String(option)}>${String(option)}</option>`)}
    </select>`;
  } else if (type === 'number' || type === 'integer') {
    input = html`<input type="number" ...${common} step=${type === 'integer' ? '1' : 'any'}
      min=${schema.minimum} max=${schema.maximum} value=${value === undefined ? '' : value}
      onInput=${(e) => onChange(e.target.value === '' ? undefined : Number(e.target.value))} />`;
  } else if (type === 'string') {
    input = html`<input type="text" ...${common} value=${value || ''}
      onInput=${(e) => onChange(e.target.value === '' ? undefined : e.target.value)} />`;
  } else {
    input = html`<textarea ...${common} placeholder="JSON"
      onInput=${(e) => {
        const text = e.target.value;
        if (!text.trim()) return onChange(undefined);
        try { onChange(JSON.parse(text)); } catch { onChange({ __invalidJson: text }); }
      }}></textarea>`;
  }
  return html`<div class="field">${label}${input}${hint}${message}</div>`;
}

/** Reads a text/event-stream response, calling `onEvent(name, data)` per event. */
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      let name = 'message';
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) onEvent(name, data.join('\n'));
    }
  }
}

function ToolForm({ user, server, tool }) {
  const schema = tool.inputSchema || { type: 'object' };
  const [value, setValue] = useState(() => initialValue({ ...schema, type: 'object' }) || {});
  const [errors, setErrors] = useState({});
  const [progress, setProgress] = useState([]);
  const [result, setResult] = useState(null);
  const [error, setError] = useState(null);
  const [running, setRunning] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const found = validate({ ...schema, type: 'object' }, value, '', {}, true);
    setErrors(found);
    if (Object.keys(found).length) return;
    setRunning(true);
    setProgress([]);
    setResult(null);
    setError(null);
    try {
      const response = await api('POST', `/api/mcp-servers/${enc(server.id)}/tools/${enc(tool.name)}/call`,
        { user, body: { arguments: clean({ ...schema, type: 'object' }, value) }, accept: 'text/event-stream' });
      await readEvents(response, (name, data) => {
        const parsed = JSON.parse(data);
        if (name === 'progress') setProgress((old) => [...old, parsed]);
        else if (name === 'result') setResult(parsed);
        else if (name === 'error') setError(new ApiFailure(0, parsed));
      });
    } catch (failure) {
      setError(failure);
    } finally {
      setRunning(false);
    }
  };
  const last = progress[progress.length - 1];
  return html`<form class="panel" onSubmit=${submit} noValidate aria-label=${`Call ${tool.name}`}>
    <h3>${tool.name}</h3>
    ${tool.description ? html`<p class="muted">${tool.description}</p>` : null}
    <${SchemaField} schema=${{ ...schema, type: 'object' }} name=${tool.name} path="" value=${value}
      errors=${errors} onChange=${setValue} required=${true} />
    ${Object.keys(errors).length ? html`<div class="alert error" role="alert">Fix the marked fields first.</div>` : null}
    <button class="primary" type="submit" disabled=${running}>${running ? 'Calling…' : `Call ${tool.name}`}</button>
    ${progress.length ? html`<div role="status" aria-live="polite">
      <progress max=${last.total || 100} value=${last.progress}></progress>
      <div class="muted">Progress ${last.progress}${last.total ? ` of ${last.total}` : ''}${last.message ? `: ${last.message}` : ''}
        (${progress.length} notifications)</div></div>` : null}
    <${ErrorBox} error=${error} />
    ${result ? html`<section aria-label="Result" data-testid="tool-result">
      <h4>${result.isError ? 'The tool answered with an error' : 'Result'} <span class="muted">(${result.latencyMs} ms)</span></h4>
      ${(result.content || []).map((block) => (block.type === 'text'
        ? html`<pre class="result-text">${block.text}</pre>`
        : html`<pre>${JSON.stringify(block, null, 2)}</pre>`))}
      ${result.structuredContent ? html`<h4>Structured content</h4><pre>${JSON.stringify(result.structuredContent, null, 2)}</pre>` : null}
    </section>` : null}
  </form>`;
}

function TryServer({ user: initialUser }) {
  const [user, setUser] = useState(initialUser || '');
  const [servers, setServers] = useState(null);
  const [serverId, setServerId] = useState('');
  const [connected, setConnected] = useState(null);
  const [lists, setLists] = useState(null);
  const [tool, setTool] = useState(null);
  const [read, setRead] = useState(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const run = async (work) => {
    setError(null);
    setBusy(true);
    try { await work(); } catch (failure) { setError(failure); } finally { setBusy(false); }
  };
  const loadServers = (e) => {
    e.preventDefault();
    setServers(null); setConnected(null); setLists(null); setTool(null);
    run(async () => {
      const body = await api('GET', '/api/mcp-servers', { user });
      setServers(body.servers);
      setServerId(body.servers.length ? body.servers[0].id : '');
    });
  };
  const server = servers && servers.find((s) => s.id === serverId);
  const connect = () => run(async () => {
    setConnected(null); setLists(null); setTool(null); setRead(null);
    const report = await api('POST', `/api/mcp-servers/${enc(serverId)}/connect`, { user });
    setConnected(report);
    const [tools, resources, prompts] = await Promise.all([
      api('GET', `/api/mcp-servers/${enc(serverId)}/tools`, { user }),
      api('GET', `/api/mcp-servers/${enc(serverId)}/resources`, { user }).catch((f) => ({ failure: f })),
      api('GET', `/api/mcp-servers/${enc(serverId)}/prompts`, { user }).catch((f) => ({ failure: f })),
    ]);
    setLists({ tools: tools.tools, resources, prompts });
  });
  const readResource = (uri) => run(async () => {
    setRead(await api('POST', `/api/mcp-servers/${enc(serverId)}/resources/read`, { user, body: { uri } }));
  });
  return html`<h1>Try a server</h1>
    <p class="muted">Calls made here run as the user, through the same pool and limits as theirs.</p>
    <form class="panel row" onSubmit=${loadServers} aria-label="Choose a user">
      <div class="field"><label for="try-user">User id</label>
        <input id="try-user" value=${user} required onInput=${(e) => setUser(e.target.value)} /></div>
      <button type="submit">Load servers</button>
    </form>
    ${servers ? html`<div class="panel row">
      <div class="field"><label for="try-server">Server</label>
        <select id="try-server" value=${serverId} onChange=${(e) => { setServerId(e.target.value); setConnected(null); setLists(null); setTool(null); }}>
          ${servers.map((s) => html`<option value=${s.id}>${s.name} (${s.type})</option>`)}
        </select></div>
      <button class="primary" type="button" disabled=${!server || busy} onClick=${connect}>Connect</button>
      ${servers.length === 0 ? html`<span class="muted">This user has no servers.</span>` : null}
    </div>` : null}
    <${ErrorBox} error=${error} />
    ${connected ? html`<div class="alert ok" role="status">${`Connected to ${connected.serverInfo.name} ${connected.serverInfo.version || ''} (protocol ${connected.protocolVersion}) in ${connected.latencyMs} ms.`}</div>` : null}
    ${lists ? html`
      <h2>Tools (${lists.tools.length})</h2>
      <div class="tools" role="group" aria-label="Tools">
        ${lists.tools.map((t) => html`<button type="button" aria-pressed=${tool && tool.name === t.name ? 'true' : 'false'}
          onClick=${() => setTool(t)}>${t.name}</button>`)}
      </div>
      ${tool ? html`<${ToolForm} key=${`${serverId}/${tool.name}`} user=${user} server=${server} tool=${tool} />` : null}
      <h2>Resources</h2>
      ${lists.resources.failure ? html`<${ErrorBox} error=${lists.resources.failure} />`
        : (lists.resources.resources || []).length ? html`<ul>${lists.resources.resources.map((r) => html`<li>
            <code>${r.uri}</code> ${r.name} <button type="button" onClick=${() => readResource(r.uri)}>Read</button></li>`)}</ul>`
          : html`<p class="muted">None.</p>`}
      ${read ? html`<pre>${JSON.stringify(read, null, 2)}</pre>` : null}
      <h2>Prompts</h2>
      ${lists.prompts.failure ? html`<${ErrorBox} error=${lists.prompts.failure} />`
        : (lists.prompts.prompts || []).length ? html`<ul>${lists.prompts.prompts.map((p) => html`<li>
            <strong>${p.name}</strong> <span class="muted">${p.description || ''}</span>
            ${(p.arguments || []).length ? html` <span class="hint">arguments: ${p.arguments.map((a) => a.name).join(', ')}</span>` : null}</li>`)}</ul>`
          : html`<p class="muted">None.</p>`}` : null}`;
}

// ---------------------------------------------------------------- settings

function Keys() {
  const [keys, reload] = useAsync(() => api('GET', '/admin/keys'), []);
  const [name, setName] = useState('');
  const [role, setRole] = useState('service');
  const [created, setCreatedKey] = useState(null);
  const [copied, setCopied] = useState(false);
  const setCreated = (key) => { setCopied(false); setCreatedKey(key); };
  const [error, setError] = useState(null);
  const create = async (e) => {
    e.preventDefault();
    setError(null);
    try {
      setCreated(await api('POST', '/admin/keys', { body: { name, role } }));
      setName('');
      reload();
    } catch (failure) { setError(failure); }
  };
  const revoke = async (key) => {
    setError(null);
    if (!confirm(`Revoke the key “${key.name}”? Requests made with it will be refused.`)) return;
    try {
      await api('DELETE', `/admin/keys/${enc(key.id)}`);
      // A revoked key's secret has nothing left to be copied for.
      if (created && created.id === key.id) setCreated(null);
      reload();
    } catch (failure) { setError(failure); }
  };
  return html`<section class="panel" aria-labelledby="keys-title">
    <h2 id="keys-title">API keys</h2>
    <form class="row" onSubmit=${create} aria-label="Create an API key">
      <div class="field"><label for="key-name">Name</label>
        <input id="key-name" required maxLength="128" value=${name} onInput=${(e) => setName(e.target.value)} /></div>
      <div class="field"><label for="key-role">Role</label>
        <select id="key-role" value=${role} onChange=${(e) => setRole(e.target.value)}>
          <option value="service">service</option><option value="admin">admin</option></select></div>
      <button class="primary" type="submit">Create key</button>
    </form>
    ${created ? html`<div class="alert ok" role="status">
      Key “${created.name}” created. Copy it now: it is not shown again.
      <div class="secret-once mono" data-testid="new-key">${created.key}</div>
      <button type="button" onClick=${() => navigator.clipboard.writeText(created.key).then(
        () => setCopied(true), () => setCopied(false))}>${copied ? 'Copied' : 'Copy'}</button>
      <button type="button" onClick=${() => setCreated(null)}>Done</button></div>` : null}
    <${ErrorBox} error=${error || keys.error} />
    ${keys.data ? html`<div class="table-wrap"><table aria-label="API keys">
      <thead><tr><th>Name</th><th>Role</th><th>Prefix</th><th class="hide-narrow">Created</th><th>Revoked</th><th class="actions"></th></tr></thead>
      <tbody>${keys.data.keys.map((k) => html`<tr data-key-name=${k.name}>
        <td>${k.name}</td><td>${k.role}</td><td class="mono">${k.prefix}…</td><td class="hide-narrow">${when(k.createdAt)}</td>
        <td>${k.revokedAt ? when(k.revokedAt) : '—'}</td>
        <td class="actions">${k.revokedAt ? null : html`<button type="button" class="danger"
          aria-label=${`Revoke ${k.name}`} onClick=${() => revoke(k)}>Revoke</button>`}</td>
      </tr>`)}</tbody></table></div>` : null}
  </section>`;
}

const emptySlot = () => ({ name: '', description: '', required: false, default: '', pattern: '' });

function SlotEditor({ title, slots, onChange, idPrefix }) {
  const set = (i, field, v) => onChange(slots.map((s, j) => (j === i ? { ...s, [field]: v } : s)));
  return html`<fieldset><legend>${title}</legend>
    ${slots.map((slot, i) => html`<div class="row" key=${i}>
      <div class="field"><label for=${`${idPrefix}-${i}-name`}>Slot name</label>
        <input id=${`${idPrefix}-${i}-name`} required value=${slot.name} onInput=${(e) => set(i, 'name', e.target.value)} /></div>
      <div class="field"><label for=${`${idPrefix}-${i}-pattern`}>Pattern (regex)</label>
        <input id=${`${idPrefix}-${i}-pattern`} class="mono" value=${slot.pattern || ''} onInput=${(e) => set(i, 'pattern', e.target.value)} /></div>
      <div class="field"><label for=${`${idPrefix}-${i}-default`}>Default</label>
        <input id=${`${idPrefix}-${i}-default`} value=${slot.default || ''} onInput=${(e) => set(i, 'default', e.target.value)} /></div>
      <div class="field"><label for=${`${idPrefix}-${i}-desc`}>Description</label>
        <input id=${`${idPrefix}-${i}-desc`} value=${slot.description} onInput=${(e) => set(i, 'description', e.target.value)} /></div>
      <div class="field inline"><input type="checkbox" id=${`${idPrefix}-${i}-req`} checked=${slot.required}
        onChange=${(e) => set(i, 'required', e.target.checked)} /><label for=${`${idPrefix}-${i}-req`}>Required</label></div>
      <button type="button" onClick=${() => onChange(slots.filter((_, j) => j !== i))}>Remove slot</button>
    </div>`)}
    <button type="button" onClick=${() => onChange([...slots, emptySlot()])}>Add ${title.toLowerCase()}</button>
  </fieldset>`;
}

function Presets() {
  const [presets, reload] = useAsync(() => api('GET', '/admin/presets'), []);
  const [editing, setEditing] = useState(null);
  const [error, setError] = useState(null);
  const [notice, setNotice] = useState(null);
  const start = (preset) => {
    setError(null);
    setNotice(null);
    setEditing(preset ? {
      original: preset.name, name: preset.name, description: preset.description, command: preset.command,
      args: preset.args.join('\n'), argSlots: preset.argSlots, envSlots: preset.envSlots,
      timeoutSecs: preset.timeoutSecs ?? '', memoryLimitMib: preset.memoryLimitMib ?? '', maxTasks: preset.maxTasks ?? '',
    } : { original: null, name: '', description: '', command: '', args: '', argSlots: [], envSlots: [], timeoutSecs: '', memoryLimitMib: '', maxTasks: '' });
  };
  const slotBody = (slots) => slots.map((s) => ({
    name: s.name, description: s.description || '', required: !!s.required,
    default: s.default ? s.default : null, pattern: s.pattern ? s.pattern : null,
  }));
  const save = async (e) => {
    e.preventDefault();
    setError(null);
    const body = {
      description: editing.description, command: editing.command,
      args: editing.args.split('\n').map((a) => a.trim()).filter(Boolean),
      argSlots: slotBody(editing.argSlots), envSlots: slotBody(editing.envSlots),
      timeoutSecs: editing.timeoutSecs === '' ? null : Number(editing.timeoutSecs),
      memoryLimitMib: editing.memoryLimitMib === '' ? null : Number(editing.memoryLimitMib),
      maxTasks: editing.maxTasks === '' ? null : Number(editing.maxTasks),
    };
    try {
      if (editing.original) await api('PUT', `/admin/presets/${enc(editing.original)}`, { body });
      else await api('POST', '/admin/presets', { body: { ...body, name: editing.name } });
      setNotice(`Preset “${editing.name}” saved.`);
      setEditing(null);
      reload();
    } catch (failure) { setError(failure); }
  };
  const remove = async (name) => {
    if (!confirm(`Delete the preset “${name}”?`)) return;
    try { await api('DELETE', `/admin/presets/${enc(name)}`); reload(); } catch (failure) { setError(failure); }
  };
  const set = (field) => (e) => setEditing({ ...editing, [field]: e.target.value });
  return html`<section class="panel" aria-labelledby="presets-title">
    <h2 id="presets-title">Presets (the stdio allow-list)</h2>
    <p class="hint">Users can run only these programs; they fill in the slots (<code>{slot}</code> in an argument), checked against each slot's pattern.</p>
    ${editing ? null : html`<${ErrorBox} error=${error || presets.error} />`}
    ${notice ? html`<div class="alert ok" role="status">${notice}</div>` : null}
    ${presets.data ? html`<div class="table-wrap"><table aria-label="Presets">
      <thead><tr><th>Name</th><th>Command line</th><th>Slots</th><th></th></tr></thead>
      <tbody>${presets.data.presets.map((p) => html`<tr>
        <td>${p.name}<div class="muted">${p.description}</div></td>
        <td class="mono">${[p.command, ...p.args].join(' ')}</td>
        <td>${[...p.argSlots, ...p.envSlots].map((s) => html`<div><code>${s.name}</code>${s.pattern ? html` ~ <code>${s.pattern}</code>` : null}</div>`)}</td>
        <td class="actions"><button type="button" onClick=${() => start(p)} aria-label=${`Edit ${p.name}`}>Edit</button>
          <button type="button" class="danger" onClick=${() => remove(p.name)} aria-label=${`Delete ${p.name}`}>Delete</button></td>
      </tr>`)}</tbody></table></div>` : null}
    ${editing ? html`<form onSubmit=${save} aria-label="Preset">
      <h3>${editing.original ? `Edit ${editing.original}` : 'New preset'}</h3>
      <div class="row">
        <div class="field"><label for="p-name">Name</label>
          <input id="p-name" required pattern="[a-z0-9_-]{1,64}" disabled=${!!editing.original} value=${editing.name} onInput=${set('name')} /></div>
        <div class="field"><label for="p-command">Command</label>
          <input id="p-command" class="mono" required value=${editing.command} onInput=${set('command')} /></div>
        <div class="field"><label for="p-timeout">Timeout (s)</label>
          <input id="p-timeout" type="number" min="1" value=${editing.timeoutSecs} onInput=${set('timeoutSecs')} /></div>
        <div class="field"><label for="p-memory">Memory limit (MiB)</label>
          <input id="p-memory" type="number" min="0" placeholder="default" value=${editing.memoryLimitMib} onInput=${set('memoryLimitMib')} /></div>
        <div class="field"><label for="p-tasks">Task limit</label>
          <input id="p-tasks" type="number" min="0" placeholder="default" value=${editing.maxTasks} onInput=${set('maxTasks')} /></div>
      </div>
      <div class="field"><label for="p-desc">Description</label>
        <input id="p-desc" value=${editing.description} onInput=${set('description')} /></div>
      <div class="field"><label for="p-args">Arguments, one per line</label>
        <textarea id="p-args" value=${editing.args} onInput=${set('args')}></textarea></div>
      <${SlotEditor} title="Argument slots" idPrefix="arg-slot" slots=${editing.argSlots} onChange=${(v) => setEditing({ ...editing, argSlots: v })} />
      <${SlotEditor} title="Env slots" idPrefix="env-slot" slots=${editing.envSlots} onChange=${(v) => setEditing({ ...editing, envSlots: v })} />
      <${ErrorBox} error=${error} />
      <button class="primary" type="submit">Save preset</button>
      <button type="button" onClick=${() => setEditing(null)}>Cancel</button>
    </form>` : html`<button type="button" onClick=${() => start(null)}>New preset</button>`}
  </section>`;
}

function JsonPanel({ title, path, render: show }) {
  const [state] = useAsync(() => api('GET', path), [path]);
  return html`<section class="panel" aria-label=${title}>
    <h2>${title}</h2>
    <${ErrorBox} error=${state.error} />
    ${state.data ? show(state.data) : null}
  </section>`;
}

function Settings() {
  return html`<h1>Settings</h1>
    <${Presets} />
    <${Keys} />
    <${JsonPanel} title="Global servers file" path="/admin/global-servers"
      render=${(data) => html`
        <p>${data.file ? html`<code>${data.file}</code>, loaded ${when(data.loadedAt)}` : 'No global servers file is configured.'}</p>
        ${data.lastError ? html`<div class="alert error" role="alert">The newest content was refused (the previous set is in use): ${data.lastError}</div>` : null}
        ${data.servers.length ? html`<div class="table-wrap"><table aria-label="Global servers">
          <thead><tr><th>Name</th><th>Type</th><th>Id</th></tr></thead>
          <tbody>${data.servers.map((g) => html`<tr><td>${g.name}</td><td>${g.type}</td><td class="mono">${g.id}</td></tr>`)}</tbody>
        </table></div>` : null}`} />
    <${JsonPanel} title="Xiaozhi bridges" path="/admin/xiaozhi"
      render=${(data) => (data.bridges.length ? html`<div class="table-wrap"><table aria-label="Xiaozhi bridges">
        <thead><tr><th>User</th><th>Assistant</th><th>State</th><th>Endpoint</th><th>Connections</th><th>Last error</th></tr></thead>
        <tbody>${data.bridges.map((b) => html`<tr><td>${b.userId}</td><td>${b.assistantId}</td>
          <td>${b.state}${b.nextAttemptInMs != null ? ` (next try in ${Math.round(b.nextAttemptInMs / 1000)} s)` : ''}</td>
          <td class="mono">${b.endpoint}</td><td>${b.connections}</td><td>${b.lastError || '—'}</td></tr>`)}</tbody>
      </table></div>` : html`<p class="muted">No bridges run on this instance.</p>`)} />
    <${JsonPanel} title="Cluster instances" path="/admin/instances"
      render=${(data) => html`<div class="table-wrap"><table aria-label="Instances">
        <thead><tr><th>Instance</th><th>Started</th><th>Last heartbeat</th><th>Live</th></tr></thead>
        <tbody>${data.instances.map((i) => html`<tr><td class="mono">${i.id}${i.me ? ' (this one)' : ''}</td>
          <td>${when(i.startedAt)}</td><td>${when(i.heartbeatAt)}</td><td>${i.live ? 'yes' : 'no'}</td></tr>`)}</tbody>
      </table></div>`} />
    <p class="hint">OAuth authorizations are per user and server: see a user's servers on the Users page.</p>`;
}

// ---------------------------------------------------------------- policies

const SAMPLE_CALL = {
  user: { id: 'alice', groups: ['support'], plan: 'free' },
  server: { name: 'shell', type: 'stdio', preset: 'shell' },
  tool: { name: 'run', annotations: { destructiveHint: true } },
  arguments: { command: 'ls' },
  path: 'chat',
};

/** The rules and quotas as one JSON document the operator edits, checked by the service. */
function Policies() {
  const [current, reload] = useAsync(() => api('GET', '/admin/policies'), []);
  const [draft, setDraft] = useState(null);
  const [saveState, setSaveState] = useState({ error: null, saved: null });
  const [sample, setSample] = useState(JSON.stringify(SAMPLE_CALL, null, 2));
  const [testState, setTestState] = useState({ error: null, decision: null });
  useEffect(() => {
    if (current.data && draft === null) {
      setDraft(JSON.stringify({ rules: current.data.rules, quotas: current.data.quotas }, null, 2));
    }
  }, [current.data]);
  const parsed = (text, what) => {
    try { return { value: JSON.parse(text) }; } catch (e) {
      return { error: { code: 'NOT_JSON', message: `${what} is not JSON: ${e.message}` } };
    }
  };
  const save = async (e) => {
    e.preventDefault();
    const body = parsed(draft, 'The rules');
    if (body.error) { setSaveState({ error: body.error, saved: null }); return; }
    try {
      const saved = await api('PUT', '/admin/policies', { body: body.value });
      setSaveState({ error: null, saved: saved.version });
      reload();
    } catch (error) { setSaveState({ error, saved: null }); }
  };
  const test = async (e) => {
    e.preventDefault();
    const rules = parsed(draft, 'The rules');
    const call = parsed(sample, 'The sample call');
    const failed = rules.error || call.error;
    if (failed) { setTestState({ error: failed, decision: null }); return; }
    try {
      const decision = await api('POST', '/admin/policies/test', { body: { rules: rules.value.rules || [], quotas: rules.value.quotas || [], call: call.value } });
      setTestState({ error: null, decision });
    } catch (error) { setTestState({ error, decision: null }); }
  };
  return html`<h1>Policies</h1>
    <${ErrorBox} error=${current.error} />
    ${current.data ? html`<p data-testid="policy-version">Version ${current.data.version}${current.data.updatedAt ? `, saved ${when(current.data.updatedAt)} by key ${current.data.updatedBy || '—'}` : ' (none saved yet)'}.</p>` : null}
    <form class="panel" onSubmit=${save} aria-label="Rules and quotas">
      <label for="policy-draft">Rules and quotas (JSON: <code>{"rules": […], "quotas": […]}</code>; the first rule whose <code>when</code> is true decides)</label>
      <textarea id="policy-draft" class="mono" rows="18" spellcheck="false" value=${draft || ''}
        onInput=${(e) => { setDraft(e.target.value); setSaveState({ error: null, saved: null }); }}></textarea>
      <div class="actions"><button type="submit" class="primary">Save as a new version</button></div>
      <${ErrorBox} error=${saveState.error} />
      ${saveState.saved != null ? html`<div class="alert ok" role="status">Saved: version ${saveState.saved}, in force on every instance within a second.</div>` : null}
    </form>
    <form class="panel" onSubmit=${test} aria-label="Test a call">
      <label for="policy-sample">A sample call (<code>user</code>, <code>server</code>, <code>tool</code>, <code>arguments</code>, <code>path</code>), decided by the rules above as drafted</label>
      <textarea id="policy-sample" class="mono" rows="10" spellcheck="false" value=${sample}
        onInput=${(e) => setSample(e.target.value)}></textarea>
      <div class="actions"><button type="submit">Test this call</button></div>
      <${ErrorBox} error=${testState.error} />
      ${testState.decision ? html`<div class="alert" role="status" data-testid="policy-decision">
        <strong>${testState.decision.action}</strong>${testState.decision.rule ? html` by rule <code>${testState.decision.rule}</code>` : ' (no rule applied)'}
        ${testState.decision.dryRun ? html`<div>Dry-run rules that would have decided: ${testState.decision.dryRun.join(', ')}</div>` : null}
        ${testState.decision.redact ? html`<div>Kept out of the audit log: ${testState.decision.redact.join(', ')}</div>` : null}
        ${testState.decision.quotas ? html`<div>Counted by quotas: ${testState.decision.quotas.join(', ')}</div>` : null}
      </div>` : null}
    </form>`;
}

function QuotaUse({ user }) {
  const [state] = useAsync(() => api('GET', `/admin/users/${enc(user)}/quotas`), [user]);
  const [attributes] = useAsync(() => api('GET', `/admin/users/${enc(user)}/attributes`), [user]);
  return html`<h2>Groups, plan and quotas</h2>
    <${ErrorBox} error=${attributes.error || state.error} />
    ${attributes.data ? html`<p data-testid="user-attributes">Groups: ${attributes.data.groups.join(', ') || '—'}; plan: ${attributes.data.plan || '—'}</p>` : null}
    ${state.data ? (state.data.quotas.length ? html`<div class="table-wrap"><table aria-label="Quota use">
      <thead><tr><th>Quota</th><th>Used</th><th>Limit</th><th>Counted</th><th>Starts again</th></tr></thead>
      <tbody>${state.data.quotas.map((q) => html`<tr>
        <td>${q.quota.name}<div class="muted mono">${q.quota.when}</div></td>
        <td data-testid=${`quota-used-${q.quota.name}`}>${q.used}</td><td>${q.quota.limit} a ${q.quota.window}</td>
        <td>${q.quota.per === 'shared' ? 'shared by all it applies to' : 'per user'}</td>
        <td>${when(q.resetsAt)}</td></tr>`)}</tbody></table></div>` : html`<p class="muted">No quotas are defined.</p>`) : null}`;
}

// ---------------------------------------------------------------- shell

const PAGES = [
  ['overview', 'Overview'], ['approvals', 'Approvals'], ['users', 'Users'], ['servers', 'Servers'],
  ['connections', 'Connections'], ['catalog', 'Catalog'], ['policies', 'Policies'], ['audit', 'Audit log'], ['try', 'Try a server'], ['settings', 'Settings'],
];

/** `#/page/arg?key=value…`: the page, its argument and its filters, so a view is a link. */
function parseRoute() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query = ''] = raw.split('?');
  const [page = 'overview', ...rest] = path.split('/');
  return {
    page: PAGES.some(([p]) => p === page) ? page : 'overview',
    arg: rest.length && rest.join('/') ? decodeURIComponent(rest.join('/')) : null,
    params: new URLSearchParams(query),
  };
}

/** Goes to `page` with `params` (empty values dropped): the address says what is shown. */
function navigate(page, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v != null) query.set(k, v);
  const text = query.toString();
  location.hash = `#/${page}${text ? `?${text}` : ''}`;
}

function useRoute() {
  const parse = parseRoute;
  const [route, setRoute] = useState(parse);
  useEffect(() => {
    const changed = () => setRoute(parse());
    addEventListener('hashchange', changed);
    return () => removeEventListener('hashchange', changed);
  }, []);
  return route;
}

function Console({ onSignOut }) {
  const route = useRoute();
  const mainRef = useRef(null);
  useEffect(() => { live.start(); return () => live.stop(); }, []);
  useEffect(() => {
    const title = PAGES.find(([p]) => p === route.page)[1];
    document.title = `${title} · mcp-pool console`;
  }, [route.page]);
  const page = {
    overview: () => html`<${Overview} />`,
    connections: () => html`<${Connections} />`,
    users: () => html`<${Users} user=${route.arg} params=${route.params} />`,
    servers: () => html`<${Servers} params=${route.params} />`,
    approvals: () => html`<${Approvals} params=${route.params} />`,
    catalog: () => html`<${Catalog} params=${route.params} />`,
    policies: () => html`<${Policies} />`,
    audit: () => html`<${Audit} params=${route.params} />`,
    try: () => html`<${TryServer} user=${route.arg} />`,
    settings: () => html`<${Settings} />`,
  }[route.page];
  return html`<a class="skip" href="#main" onClick=${(e) => { e.preventDefault(); mainRef.current && mainRef.current.focus(); }}>Skip to content</a>
    <header class="top">
      <span class="brand">mcp-pool console</span>
      <nav class="main" aria-label="Console sections"><ul>
        ${PAGES.map(([id, label]) => html`<li><a href=${`#/${id}`} aria-current=${route.page === id ? 'page' : undefined}>${label}</a></li>`)}
      </ul></nav>
      <span class="spacer"></span>
      <${LiveStatus} />
      <button type="button" onClick=${onSignOut}>Sign out</button>
    </header>
    <main id="main" tabIndex="-1" ref=${mainRef}>${page()}</main>`;
}

function App() {
  const [session, setSession] = useState(undefined);
  useEffect(() => {
    onSignedOut = () => { csrf = null; setSession(null); };
    api('GET', '/console/session').then((s) => { csrf = s.csrfToken; setSession(s); }, () => setSession(null));
  }, []);
  if (session === undefined) return html`<p class="loading">Loading the console…</p>`;
  if (!session) {
    return html`<${SignIn} onSignedIn=${(s) => { csrf = s.csrfToken; setSession(s); }} />`;
  }
  const signOut = async () => {
    try { await api('DELETE', '/console/session'); } catch { /* signed out either way */ }
    csrf = null;
    setSession(null);
  };
  return html`<${Console} onSignOut=${signOut} />`;
}

render(html`<${App} />`, document.getElementById('app'));
