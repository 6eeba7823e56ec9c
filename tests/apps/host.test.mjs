// An MCP Apps host in Chromium, written with the official ext-apps SDK's AppBridge, renders
// the SDK's published example app (`@modelcontextprotocol/server-basic-vanillajs`) twice:
// against the example server alone (its own streamable HTTP endpoint) and through the
// pool's gateway. The app must render and behave the same both ways: it shows the tool's
// result, and its button calls the server's tool back through the host (the relay marks the
// call as the view's, as the gateway asks of hosts). Run by tests/api/apps.rs with:
//   DIRECT_URL     the example server alone, e.g. http://127.0.0.1:PORT/mcp
//   GATEWAY_URL    the assistant's gateway, e.g. http://127.0.0.1:PORT/mcp/assistants/a1
//   GATEWAY_TOKEN  a gateway token of that assistant
//   CHROMIUM       the browser (default /usr/bin/chromium)
//   SCREENSHOT_DIR where the two renderings are saved
// Installed by tests/setup.sh (npm ci --prefix tests/apps).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const UI = 'io.modelcontextprotocol/ui';
const APP_MIME = 'text/html;profile=mcp-app';
const ORIGIN = 'http://apps-host.test';
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

// The host page: the view in a sandboxed iframe, connected to an AppBridge before it loads.
// Calls the view makes go to `hostCallTool`, which the test provides (the host's backend).
const HOST_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>apps host</title></head>
<body>
<iframe id="app" sandbox="allow-scripts" style="width: 800px; height: 600px"></iframe>
<script type="module">
import { AppBridge, PostMessageTransport } from '/bridge.js';
window.startApp = async (html, toolInput, toolResult) => {
  const iframe = document.getElementById('app');
  const bridge = new AppBridge(null, { name: 'apps-host', version: '1.0.0' },
    { serverTools: {}, logging: {}, openLinks: {} });
  bridge.oncalltool = (params) => window.hostCallTool(params);
  const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  iframe.srcdoc = html;
  await initialized;
  await bridge.sendToolInput({ arguments: toolInput });
  await bridge.sendToolResult(toolResult);
  window.bridge = bridge;
  return true;
};
</script>
</body></html>`;

/** `promise`, or an error saying `what` did not happen within `ms`. */
async function within(ms, promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The ext-apps AppBridge for the page, bundled from the installed SDK (nothing fetched). */
async function bridgeBundle() {
  const bundled = await build({
    stdin: {
      contents: "export { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';",
      resolveDir: HERE,
      loader: 'js',
    },
    bundle: true,
    format: 'esm',
    platform: 'browser',
    write: false,
    logLevel: 'silent',
  });
  return bundled.outputFiles[0].text;
}

/** An MCP client of `url` that renders views (declares the extension). */
async function connect(url, token) {
  const client = new Client(
    { name: 'apps-host', version: '1.0.0' },
    { capabilities: { extensions: { [UI]: { mimeTypes: [APP_MIME] } } } },
  );
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

/**
 * Hosts the example's app on `url`: lists, reads the view, calls the
 * tool, renders the view with the result, clicks its "Get Server Time" button. Returns
 * what a person and the host saw.
 */
async function host(browser, bridge, label, url, token) {
  const client = await connect(url, token);
  const { tools } = await client.listTools();
  // The example's tool (through the gateway other bound servers' tools have views too).
  const tool = tools.find((t) => /get-time\/mcp-app\.html$/.test(t._meta?.ui?.resourceUri ?? ''));
  assert.ok(tool, `${label}: the example's tool in ${JSON.stringify(tools.map((t) => t.name))}`);
  const uri = tool._meta.ui.resourceUri;
  const read = await client.readResource({ uri });
  const view = read.contents[0];
  const result = await client.callTool({ name: tool.name, arguments: {} });

  const page = await browser.newPage({ viewport: { width: 1024, height: 768 } });
  const errors = [];
  page.on('pageerror', (error) => errors.push(String(error)));
  const relayed = [];
  await page.exposeFunction('hostCallTool', async (params) => {
    relayed.push(params.name);
    // The host marks the relay as the view's (the gateway keeps it to the view's server).
    return client.callTool({ ...params, _meta: { ...(params._meta ?? {}), [UI]: { resourceUri: uri } } });
  });
  await page.route(`${ORIGIN}/**`, (route) => {
    const asked = new URL(route.request().url()).pathname;
    if (asked === '/bridge.js') {
      return route.fulfill({ contentType: 'text/javascript', body: bridge });
    }
    return route.fulfill({ contentType: 'text/html', body: HOST_PAGE });
  });
  await page.goto(`${ORIGIN}/`);
  await within(
    20_000,
    page.evaluate(([html, toolResult]) => window.startApp(html, {}, toolResult), [view.text, result]),
    `${label}: the view initializes`,
  );

  const frame = page.frameLocator('#app');
  const shown = frame.locator('#server-time');
  // The tool's result, rendered by the view.
  await shown.filter({ hasText: ISO_TIME }).waitFor({ timeout: 20_000 });
  const first = (await shown.textContent()).trim();
  // The view calls the tool back through the host; the new time replaces the first.
  await frame.locator('#get-time-btn').click();
  await shown.filter({ hasNotText: first }).filter({ hasText: ISO_TIME }).waitFor({ timeout: 20_000 });
  const second = (await shown.textContent()).trim();
  const headings = await frame.locator('button').allTextContents();

  const dir = process.env.SCREENSHOT_DIR;
  if (dir) {
    await mkdir(dir, { recursive: true });
    await page.screenshot({ path: path.join(dir, `apps-${label}.png`), fullPage: true });
  }
  await page.close();
  await client.close();
  return {
    toolName: tool.name,
    uri,
    mimeType: view.mimeType,
    html: view.text,
    resultTime: result.structuredContent?.time,
    first,
    second,
    buttons: headings.map((b) => b.trim()),
    relayed,
    errors,
  };
}

test('the example app renders and calls back through the gateway as against its server alone', { timeout: 150_000 }, async () => {
  for (const name of ['DIRECT_URL', 'GATEWAY_URL', 'GATEWAY_TOKEN']) {
    assert.ok(process.env[name], `${name} is set`);
  }
  const bridge = await bridgeBundle();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox'],
    timeout: 60_000,
  });
  try {
    const alone = await host(browser, bridge, 'alone', process.env.DIRECT_URL);
    const through = await host(browser, bridge, 'gateway', process.env.GATEWAY_URL, process.env.GATEWAY_TOKEN);

    // What the host is given: the same view, under the gateway's name for it.
    assert.equal(alone.uri, 'ui://get-time/mcp-app.html');
    assert.equal(through.uri, 'ui://basic__get-time/mcp-app.html');
    assert.equal(through.toolName, 'basic__get-time');
    assert.equal(through.mimeType, alone.mimeType);
    assert.equal(through.mimeType, APP_MIME);
    assert.equal(through.html, alone.html, 'the view is byte for byte the server\'s');

    // What a person sees: the tool's result, then the view's own call's.
    for (const seen of [alone, through]) {
      assert.deepEqual(seen.errors, [], 'no script error');
      assert.match(seen.first, ISO_TIME);
      assert.equal(seen.first, seen.resultTime, 'the view shows the result it was given');
      assert.match(seen.second, ISO_TIME);
      assert.ok(seen.second > seen.first, `${seen.second} after ${seen.first}`);
    }
    assert.deepEqual(through.buttons, alone.buttons);
    // The view called its tool by the server's own name both ways.
    assert.deepEqual(alone.relayed, ['get-time']);
    assert.deepEqual(through.relayed, ['get-time']);
  } finally {
    await browser.close();
  }
});
