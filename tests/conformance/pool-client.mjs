// The "client" of the MCP conformance suite's client scenarios: the pool is the MCP client
// under test, and this script is the SaaS backend and the end user driving it over the
// REST API. The suite runs `node pool-client.mjs <scenario server URL>` with
// MCP_CONFORMANCE_SCENARIO (and, for some scenarios, MCP_CONFORMANCE_CONTEXT) set; the
// pool is already running at POOL_URL and answers the admin key POOL_KEY (client.sh).
//
// What it does, as a user of the pool would: register the URL as a streamable-HTTP server,
// connect, list the tools and call each of them. Whenever the pool says the server needs
// the user's OAuth authorization (409 MCP_AUTH_REQUIRED with an authorizationUrl) it plays
// the user's browser through the authorization server's redirects to the pool's
// /oauth/callback and tries again; an elicitation on the user's event stream is accepted
// as it comes, without filling anything in. Everything it sees goes to stderr, which the
// suite keeps. It exits 1 when a step did not succeed.

const serverUrl = process.argv.at(-1);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? 'unknown';
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? '{}');
const pool = (process.env.POOL_URL ?? '').replace(/\/$/, '');
const key = process.env.POOL_KEY;
if (!serverUrl?.startsWith('http') || !pool || !key) {
  console.error('usage: POOL_URL=… POOL_KEY=… node pool-client.mjs <server url>');
  process.exit(2);
}

// A fresh user per run: no tokens, registrations or connections from an earlier scenario.
const user = `conformance-${scenario.replace(/[^A-Za-z0-9._-]/g, '.')}-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
// A user who keeps answering the pool's "please authorize" stops after this many; the
// pool's own limits (oauth.max_step_ups) are what the suite measures, so this stays above them.
const MAX_AUTHORIZATIONS = 8;
// The arguments a scenario's tool needs; the suite may name the calls to make itself
// (context.toolCalls); every other tool is called with a value for each required
// property (see argumentsFor).
const ARGUMENTS = {
  add_numbers: { a: 5, b: 3 },
  json_schema_2020_12_tool: { name: 'Ada', contactMethod: 'email', email: 'ada@example.com' },
};
// Scenarios whose server answers tools/list only: listing is all they look at.
const LIST_ONLY = new Set(['json-schema-ref-no-deref']);

const log = (...parts) => console.error(`[pool-client ${new Date().toISOString().slice(11, 23)}]`, ...parts);
const short = (value) => {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return text.length > 600 ? `${text.slice(0, 600)}…` : text;
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function api(method, path, body) {
  const res = await fetch(pool + path, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      'x-user-id': user,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = text;
  }
  log(`${method} ${path} → ${res.status} ${short(text)}`);
  return { status: res.status, body: json, retryAfter: Number(res.headers.get('retry-after') ?? 0) };
}

// The user's browser: follows the authorization server's redirects by hand (so that the
// last hop, the pool's callback, is seen and not left to fetch) and opens the callback.
async function authorize(url) {
  const callback = `${pool}/oauth/callback`;
  for (let hop = 0; hop < 10; hop++) {
    const res = await fetch(url, { redirect: 'manual' });
    if (url.startsWith(callback)) {
      const page = (await res.text()).replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim();
      log(`browser: callback → ${res.status} ${res.headers.get('location') ?? ''} ${short(page)}`);
      return res.status < 400;
    }
    const location = res.headers.get('location');
    log(`browser: GET ${url} → ${res.status}${location ? ` → ${location}` : ''}`);
    if (res.status < 300 || res.status >= 400 || !location) {
      log(`browser: the authorization server did not redirect: ${short(await res.text())}`);
      return false;
    }
    url = new URL(location, url).href;
  }
  log('browser: too many redirects');
  return false;
}

let authorizations = 0;
// Runs a request, authorizing whenever the pool asks for it, as a user clicking "Connect"
// would; waits out a Retry-After (a connection backed off after the 401 it just reported).
async function asUser(id, request) {
  for (let attempt = 0; ; attempt++) {
    const res = await request();
    const error = res.body?.error;
    if (error?.code === 'MCP_AUTH_REQUIRED') {
      if (authorizations >= MAX_AUTHORIZATIONS) {
        log(`gave up after ${authorizations} authorizations`);
        return res;
      }
      // The answer should carry the URL; where it does not, a front end asks for one.
      let url = error.authorizationUrl;
      if (!url) {
        log('MCP_AUTH_REQUIRED without an authorizationUrl: asking POST …/oauth/authorize');
        url = (await api('POST', `/api/mcp-servers/${id}/oauth/authorize`)).body?.authorizationUrl;
        if (!url) return res;
      }
      authorizations++;
      log(`authorization #${authorizations}: ${url}`);
      if (!(await authorize(url))) return res;
      continue;
    }
    if (res.retryAfter > 0 && res.status >= 500 && attempt < 5) {
      await sleep(Math.min(res.retryAfter, 5) * 1000);
      continue;
    }
    return res;
  }
}

// The user's event stream, open before anything can ask a question: elicitations are
// accepted with empty content (every field the scenarios ask for has a default, which is
// the pool's to fill in, not the user's).
async function watchEvents(signal) {
  const res = await fetch(`${pool}/api/events`, {
    headers: { authorization: `Bearer ${key}`, 'x-user-id': user, accept: 'text/event-stream' },
    signal,
  });
  if (!res.ok) throw new Error(`GET /api/events → ${res.status}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const pump = (async () => {
    let buffer = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value.replace(/\r\n/g, '\n');
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = /^event: ?(.*)$/m.exec(block)?.[1];
          const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.replace(/^data: ?/, '')).join('\n');
          if (event) await onEvent(event, data);
        }
      }
    } catch (e) {
      if (!signal.aborted) log(`event stream ended: ${e.message}`);
    }
  })();
  // Wrapped: an async function returning the promise itself would wait for the stream's end.
  return { pump };
}

// What a user fills into a tool's form: the known arguments, else a plain value for each
// required property. The schema-echo tool of json-schema-2020-12-preservation gets the
// inputSchema of the tool it asks about exactly as the pool's tool list shows it, which is
// what the scenario checks (that the schema reaches the pool's users as the server wrote it).
function argumentsFor(tool, tools) {
  if (ARGUMENTS[tool.name]) return ARGUMENTS[tool.name];
  if (tool.name === 'json_schema_echo') {
    return { schema: tools.find((t) => t.name === 'json_schema_2020_12_tool')?.inputSchema ?? {} };
  }
  const schema = tool.inputSchema ?? {};
  const plain = { string: 'x', integer: 1, number: 1, boolean: true, object: {}, array: [] };
  return Object.fromEntries((schema.required ?? []).map((name) => [name, plain[schema.properties?.[name]?.type] ?? 'x']));
}

async function onEvent(event, data) {
  log(`event ${event} ${short(data)}`);
  if (event !== 'mcp.elicitation.requested') return;
  const question = JSON.parse(data);
  await api('POST', `/api/elicitations/${question.id}`, { action: 'accept', content: {} });
}

async function main() {
  log(`scenario ${scenario}, server ${serverUrl}, user ${user}`);
  const events = new AbortController();
  const { pump } = await watchEvents(events.signal);
  let ok = true;
  let id;
  try {
    // The type is explicit: several scenario servers listen at a URL without /mcp, which
    // the pool would otherwise take for legacy SSE.
    const server = { name: 'conformance', type: 'streamableHttp', baseUrl: serverUrl };
    if (context.client_id) server.oauth = { clientId: context.client_id, clientSecret: context.client_secret };
    const created = await api('POST', '/api/mcp-servers', server);
    if (created.status !== 201) return false;
    id = created.body.id;

    const connected = await asUser(id, () => api('POST', `/api/mcp-servers/${id}/connect`));
    if (connected.status !== 200) return false;
    const listed = await asUser(id, () => api('GET', `/api/mcp-servers/${id}/tools`));
    if (listed.status !== 200) return false;
    const calls = context.toolCalls ?? (LIST_ONLY.has(scenario) ? [] : listed.body.tools.map((tool) => ({
      name: tool.name,
      arguments: argumentsFor(tool, listed.body.tools),
    })));
    for (const { name, arguments: args } of calls) {
      const call = await asUser(id, () =>
        api('POST', `/api/mcp-servers/${id}/tools/${encodeURIComponent(name)}/call`, { arguments: args }),
      );
      ok &&= call.status === 200 && call.body?.isError !== true;
    }
    const oauth = await api('GET', `/api/mcp-servers/${id}/oauth`);
    log(`done after ${authorizations} authorization(s); oauth status ${oauth.body?.status}`);
    return ok;
  } finally {
    // The pool would keep the session (and any GET stream) open for half an hour, and try
    // to reconnect to a server the suite is about to stop: the session is stopped here.
    if (id) await api('DELETE', `/admin/connections/${encodeURIComponent(user)}/${id}`).catch(() => {});
    events.abort();
    await pump;
  }
}

// The suite gives a client 30 s and then only kills it; ending first keeps what it saw in
// the suite's record of the run.
setTimeout(() => {
  log('still not done after 25 s; giving up');
  process.exit(1);
}, 25_000).unref();

main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (e) => {
    log(`failed: ${e.stack ?? e}`);
    process.exit(1);
  },
);
