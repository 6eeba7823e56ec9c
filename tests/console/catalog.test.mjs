// The Catalog page (issue 43) at a laptop's width (1366 px) and a phone's (390 px): find a
// built-in entry, enable it (users then see it), import a server.json by pasting it, see
// the schema's reason for an invalid one, and see on the Servers and Users pages which
// entry a user's server came from. On every page no action button of a table lies
// outside the viewport, and axe-core finds no serious violation. Started by
// tests/api/console_browser.rs, which prepares:
//   CATALOG_USER  a user with a server made from the enabled entry CATALOG_ENTRY
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  launchBrowser, screenshot, signIn, actionsOutOfView, seriousViolations, api, BASE_URL,
} from './lib.mjs';

const CATALOG_USER = process.env.CATALOG_USER;
const CATALOG_ENTRY = process.env.CATALOG_ENTRY;
const SERVICE_KEY = process.env.SERVICE_KEY;

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

async function checkPage(page, name) {
  assert.deepEqual(await actionsOutOfView(page), [], `${name}: every action button is in view`);
  assert.deepEqual(await seriousViolations(page), [], `${name}: no serious accessibility violation`);
  await screenshot(page, name);
}

for (const [label, viewport, builtIn] of [
  ['laptop', { width: 1366, height: 768 }, 'memory'],
  ['phone', { width: 390, height: 844 }, 'sequential-thinking'],
]) {
  test(`at ${viewport.width} px an operator runs the catalog`, async () => {
    const page = await browser.newPage({ viewport });
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await signIn(page);

    // Find a built-in entry and enable it: users see it at once.
    await page.getByRole('link', { name: 'Catalog', exact: true }).click();
    await page.getByLabel('Name, description or tag').fill(builtIn);
    await page.getByRole('button', { name: 'Find' }).click();
    const name = `io.github.modelcontextprotocol/${builtIn}`;
    const row = page.getByRole('table', { name: 'Catalog entries' }).locator(`tr[data-entry="${name}"]`);
    await row.waitFor();
    assert.match(page.url(), new RegExp(`#/catalog\\?search=${builtIn}`), 'the search is in the address');
    assert.match(await row.innerText(), /disabled/);
    await checkPage(page, `catalog-${label}`);
    const before = await api('GET', '/api/catalog', { key: SERVICE_KEY, user: 'someone' });
    assert.ok(!before.body.entries.some((e) => e.name === name), 'not offered while disabled');
    await row.getByRole('button', { name: `Enable ${name}` }).click();
    await page.getByRole('status').filter({ hasText: `Enabled ${name}.` }).waitFor();
    await row.getByRole('button', { name: `Disable ${name}` }).waitFor();
    const after = await api('GET', `/api/catalog?search=${builtIn}`, { key: SERVICE_KEY, user: 'someone' });
    assert.ok(after.body.entries.some((e) => e.name === name), 'offered once enabled');

    // Import a server.json by pasting it; an invalid one says why, in the schema's words.
    const imported = `io.example.console/${label}`;
    await page.getByLabel('server.json (one document, or an array of them)').fill(JSON.stringify({
      name: imported, description: `pasted at ${label} width`, version: '1.0.0',
      remotes: [{ type: 'streamable-http', url: 'https://example.com/mcp' }],
    }));
    await page.getByRole('button', { name: 'Import', exact: true }).click();
    await page.getByRole('status').filter({ hasText: `created ${imported} 1.0.0` }).waitFor();
    await page.getByLabel('server.json (one document, or an array of them)').fill(JSON.stringify({ name: 'no-namespace' }));
    await page.getByRole('button', { name: 'Import', exact: true }).click();
    const refused = page.getByRole('alert').filter({ hasText: 'SERVER_JSON_INVALID' });
    await refused.waitFor();
    assert.match(await refused.innerText(), /description/, 'the schema names what is missing');
    await checkPage(page, `catalog-import-${label}`);

    // Which entry a user's server came from, on the Servers and Users pages.
    await page.goto(`${BASE_URL}/console/#/servers?search=${encodeURIComponent(CATALOG_USER)}`);
    const server = page.getByRole('table', { name: 'Servers' }).locator('tr[data-server]').first();
    await server.getByTestId('catalog-entry').filter({ hasText: CATALOG_ENTRY }).waitFor();
    await page.goto(`${BASE_URL}/console/#/users/${encodeURIComponent(CATALOG_USER)}`);
    await page.getByTestId('catalog-entry').filter({ hasText: CATALOG_ENTRY }).waitFor();
    await checkPage(page, `catalog-user-${label}`);
    assert.deepEqual(errors, [], 'no script errors');
    await page.close();
  });
}
