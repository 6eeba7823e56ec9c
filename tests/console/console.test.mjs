// The operators' console in Debian's chromium against the real service (started by
// tests/api/console_browser.rs, which also prepares the data named in the environment):
//   USER_ID       a user with the stdio fixture `fx` bound to assistant a1
//   SERVER_ID     that server's id
//   XSS_SERVER    the id of the user's second fixture server, named <script>…</script>
//   MESSAGE_ID    a message whose call `c1` (fx's `add`) is parked for approval
//   FORM_SERVER   the user's fixture started with --form-tool (the tool `form`)
// Each test builds on the previous one (one signed-in page), as an operator would.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  launchBrowser, screenshot, api, waitFor, processAlive, BASE_URL, ADMIN_KEY,
} from './lib.mjs';

const USER = process.env.USER_ID;
const SERVER = process.env.SERVER_ID;
const XSS_SERVER = process.env.XSS_SERVER;
const MESSAGE = process.env.MESSAGE_ID;
const FORM_SERVER = process.env.FORM_SERVER;
const SERVICE_KEY = process.env.SERVICE_KEY;
const XSS_NAME = '<script>window.__xss=1</script>';

let browser;
let page;
const pageErrors = [];

before(async () => {
  browser = await launchBrowser();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (error) => pageErrors.push(error.message));
});

after(async () => {
  await browser?.close();
});

const row = (user, server) => page.locator(`tr[data-user="${user}"][data-server="${server}"]`);

async function go(hash) {
  await page.goto(`${BASE_URL}/console/#/${hash}`);
}

test('a wrong key and a service key are refused; the admin key signs in (keyboard only)', async () => {
  await page.goto(`${BASE_URL}/console`);
  const key = page.getByLabel('Admin API key');
  await key.waitFor();
  // Keyboard only: the key field is reachable with Tab, Enter submits.
  for (let i = 0; i < 3 && await page.evaluate(() => document.activeElement.id) !== 'admin-key'; i += 1) {
    await page.keyboard.press('Tab');
  }
  assert.equal(await page.evaluate(() => document.activeElement.id), 'admin-key');
  await page.keyboard.type('not-a-real-key-000000');
  await page.keyboard.press('Enter');
  await page.getByRole('alert').filter({ hasText: 'UNAUTHORIZED' }).waitFor();
  await screenshot(page, '01-sign-in-refused');

  await key.fill(SERVICE_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'FORBIDDEN' }).waitFor();

  await key.fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.getByText('● live').waitFor();
  // The session survives a reload: it is a cookie, not page state.
  await page.reload();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.getByTestId('stdio').waitFor();
  await screenshot(page, '02-overview');
});

test('a connection appears live when a call is made through the REST API', async () => {
  // Start from no connection of the user's fixture.
  const stopped = await api('DELETE', `/admin/connections/${USER}/${SERVER}`);
  assert.ok([204, 404].includes(stopped.status), JSON.stringify(stopped));
  // On a busy machine the page's event stream may open only after the call below, and
  // its first list (read before the call) arrive after it: both are held here until the
  // call is done, so the page must catch up on what it missed (CI failed this way once).
  let release;
  const called = new Promise((resolve) => { release = resolve; });
  const hold = async (route) => { await called; await route.continue(); };
  const stale = async (route) => {
    const response = await route.fetch();
    await called;
    await route.fulfill({ response });
  };
  await page.route('**/admin/events', hold);
  await page.route('**/admin/connections', stale);
  await go('connections');
  await page.reload();
  await page.getByRole('table', { name: 'Live connections' }).waitFor();
  await page.getByLabel('User').fill(USER);
  assert.equal(await row(USER, SERVER).count(), 0);

  const call = await api('POST', `/api/mcp-servers/${SERVER}/tools/echo/call`,
    { key: SERVICE_KEY, user: USER, body: { arguments: { text: 'hello' } } });
  assert.equal(call.status, 200, JSON.stringify(call));
  release();
  // No reload by the operator: the row comes over /admin/events or the catch-up.
  await row(USER, SERVER).and(page.locator('[data-state="connected"]')).waitFor({ timeout: 10_000 });
  await page.unroute('**/admin/events', hold);
  await page.unroute('**/admin/connections', stale);
  assert.match(await row(USER, SERVER).innerText(), /fx/);
  await screenshot(page, '03-connections');
});

test('stopping it from the console ends its process', async () => {
  const pid = await api('POST', `/api/mcp-servers/${SERVER}/tools/pid/call`,
    { key: SERVICE_KEY, user: USER, body: { arguments: {} } });
  assert.equal(pid.status, 200, JSON.stringify(pid));
  // Its process on the host, as the admin API shows it (inside its sandbox the fixture
  // is pid 2 of its own pid namespace).
  const live = await api('GET', `/admin/connections?userId=${USER}`);
  const processId = live.body.connections.find((c) => c.serverId === SERVER)?.pid;
  assert.ok(await processAlive(processId), `the fixture ${processId} runs`);
  // What it runs, read from /proc when the list is read.
  await page.reload();
  await page.getByLabel('User').fill(USER);
  await row(USER, SERVER).getByTestId('memory').filter({ hasText: /^\d+\.\d MiB\s*(of \d+\.\d MiB)?$/ }).waitFor();
  assert.equal(await row(USER, SERVER).getByTestId('processes').innerText(), '1');

  // Stop asks first.
  page.once('dialog', (dialog) => dialog.accept());
  await page.getByRole('button', { name: `Stop fx of ${USER}` }).click();
  await page.getByRole('status').filter({ hasText: `Stopped fx of ${USER}` }).waitFor();
  await row(USER, SERVER).waitFor({ state: 'detached', timeout: 10_000 });
  await waitFor(async () => !(await processAlive(processId)), { timeoutMs: 10_000, what: `process ${processId} to end` });
  const left = await api('GET', `/admin/connections?userId=${USER}`);
  assert.ok(!left.body.connections.some((c) => c.serverId === SERVER), JSON.stringify(left.body));
});

test('the servers page shows a stdio server\'s private home and its size', async () => {
  await go(`servers?search=${encodeURIComponent(USER)}`);
  const home = page.locator(`tr[data-server="${SERVER}"]`).getByTestId('home');
  await home.waitFor();
  assert.match(await home.innerText(), /^home: \d+\.\d MiB$/);
});

test('a server named <script> renders as text', async () => {
  await go(`users/${USER}`);
  const servers = page.getByRole('table', { name: 'Servers' });
  await servers.waitFor();
  await servers.getByText(XSS_NAME, { exact: true }).waitFor();
  // The live connections list shows it as text too.
  const call = await api('POST', `/api/mcp-servers/${XSS_SERVER}/tools/echo/call`,
    { key: SERVICE_KEY, user: USER, body: { arguments: { text: 'x' } } });
  assert.equal(call.status, 200, JSON.stringify(call));
  await go('connections');
  await row(USER, XSS_SERVER).getByText(XSS_NAME, { exact: true }).waitFor();
  assert.equal(await page.evaluate(() => window.__xss), undefined, 'the name ran as a script');
  assert.equal(await page.locator('main script').count(), 0);
});

test('a parked call approved from the console is done through the REST API', async () => {
  await go('users');
  await page.getByLabel('User id or part of it').fill(USER);
  await page.getByRole('button', { name: 'Find' }).click();
  await page.getByRole('table', { name: 'Users' }).getByRole('link', { name: USER, exact: true }).click();
  const open = page.getByRole('table', { name: 'Open tool calls' });
  await open.waitFor();
  await open.locator('tr[data-call="c1"]').waitFor();
  await page.getByRole('table', { name: 'Assistants' }).getByText('a1').waitFor();
  await screenshot(page, '04-user');
  await open.locator('tr[data-call="c1"]').getByRole('button', { name: /^Approve/ }).click();
  // The decision shows what the call answered.
  const decision = page.getByRole('list', { name: 'Decisions' }).locator('li').first();
  await decision.getByText(/^Approved/).waitFor();
  await decision.getByTestId('decision-result').filter({ hasText: '3' }).waitFor();

  await waitFor(async () => {
    const message = await api('GET', `/api/messages/${MESSAGE}`, { key: SERVICE_KEY, user: USER });
    const record = message.body.toolCalls.find((c) => c.id === 'c1');
    return record.status === 'done' && JSON.stringify(record.response).includes('"3"');
  }, { timeoutMs: 10_000, what: 'the approved call to be done' });
  // The decision is the admin's, on the record.
  const audit = await api('GET', `/admin/audit?userId=${USER}&outcome=approved`);
  assert.equal(audit.body.total, 1, JSON.stringify(audit.body));
  assert.ok(audit.body.entries[0].decidedBy, 'decidedBy names the admin key');
  await page.getByText('No open tool calls.').waitFor();
});

test('a form generated from the add tool\'s inputSchema calls it and shows the result', async () => {
  await go(`try/${USER}`);
  await page.getByRole('button', { name: 'Load servers' }).click();
  await page.getByLabel('Server').selectOption(SERVER);
  await page.getByRole('button', { name: 'Connect' }).click();
  await page.getByRole('status').filter({ hasText: 'Connected to' }).waitFor();
  await page.getByRole('group', { name: 'Tools' }).getByRole('button', { name: 'add', exact: true }).click();
  const form = page.getByRole('form', { name: 'Call add' });
  // Required fields are checked before anything is sent.
  await form.getByRole('button', { name: 'Call add' }).click();
  await form.getByText('Required.').first().waitFor();
  assert.equal(await form.getByLabel(/^a/).getAttribute('aria-invalid'), 'true');
  await form.getByLabel(/^a/).fill('1.5');
  await form.getByLabel(/^b/).fill('2');
  await form.getByRole('button', { name: 'Call add' }).click();
  const result = form.getByTestId('tool-result');
  await result.waitFor();
  assert.equal((await result.locator('pre.result-text').innerText()).trim(), '3.5');
  await screenshot(page, '05-try-a-server');

  // Progress shows as it comes.
  await page.getByRole('group', { name: 'Tools' }).getByRole('button', { name: 'progress', exact: true }).click();
  const progress = page.getByRole('form', { name: 'Call progress' });
  await progress.getByLabel(/^steps/).fill('4');
  await progress.getByLabel(/^delayMs/).fill('300');
  await progress.getByRole('button', { name: 'Call progress' }).click();
  await progress.getByText(/Progress [12] of 4/).waitFor();
  assert.equal(await progress.getByTestId('tool-result').count(), 0, 'progress arrives before the result');
  await progress.getByTestId('tool-result').getByText('done after 4 steps').waitFor();
  await progress.getByText('(4 notifications)').waitFor();
});

test('a form for nested objects, arrays, enums and booleans checks input and sends what was entered', async () => {
  await page.getByLabel('Server').selectOption(FORM_SERVER);
  await page.getByRole('button', { name: 'Connect' }).click();
  await page.getByRole('group', { name: 'Tools' }).getByRole('button', { name: 'form', exact: true }).click();
  const form = page.getByRole('form', { name: 'Call form' });
  await form.getByLabel(/^title/).fill('ab');
  await form.getByLabel(/^count/).fill('11');
  await form.getByRole('button', { name: 'Call form' }).click();
  await form.getByText('At least 3 characters.').waitFor();
  await form.getByText('At most 10.').waitFor();
  // The enum is a select; its message names the field that is missing.
  await form.getByText('Required.').first().waitFor();
  assert.equal(await form.getByTestId('tool-result').count(), 0, 'nothing was sent');

  await form.getByLabel(/^title/).fill('Quarterly report');
  await form.getByLabel(/^count/).fill('3');
  await form.getByLabel(/^ratio/).fill('0.25');
  await form.getByLabel(/^colour/).selectOption('green');
  await form.getByLabel(/^urgent/).check();
  await form.getByRole('button', { name: 'Add tags item' }).click();
  await form.getByRole('button', { name: 'Add tags item' }).click();
  await form.getByLabel(/^tags 1/).fill('q3');
  await form.getByLabel(/^tags 2/).fill('finance');
  await form.getByLabel(/^name/).fill('Ada');
  await form.getByRole('button', { name: 'Add contacts item' }).click();
  await form.getByLabel(/^kind/).selectOption('email');
  await form.getByLabel(/^value/).fill('ada@example.com');
  await form.getByRole('button', { name: 'Call form' }).click();
  const result = form.getByTestId('tool-result');
  await result.waitFor();
  const sent = JSON.parse(await result.locator('pre.result-text').innerText());
  assert.deepEqual(sent, {
    title: 'Quarterly report', count: 3, ratio: 0.25, urgent: true, colour: 'green',
    tags: ['q3', 'finance'],
    owner: { name: 'Ada', contacts: [{ kind: 'email', value: 'ada@example.com' }] },
  });
  await screenshot(page, '05b-generated-form');
});

test('a preset with a slot pattern is created and edited from the console', async () => {
  await go('settings');
  await page.getByRole('button', { name: 'New preset' }).click();
  const form = page.getByRole('form', { name: 'Preset' });
  await form.getByLabel('Name', { exact: true }).fill('notes');
  await form.getByLabel('Command', { exact: true }).fill('/usr/bin/true');
  await form.getByLabel('Arguments, one per line').fill('--root\n{root}');
  await form.getByRole('button', { name: 'Add argument slots' }).click();
  await form.getByLabel('Slot name').fill('root');
  await form.getByLabel('Pattern (regex)').fill('/srv/notes/[a-z]+');
  await form.getByLabel('Required').check();
  await form.getByRole('button', { name: 'Save preset' }).click();
  await page.getByRole('status').filter({ hasText: 'Preset “notes” saved.' }).waitFor();
  let stored = await api('GET', '/admin/presets/notes');
  assert.equal(stored.status, 200, JSON.stringify(stored));
  assert.deepEqual(stored.body.args, ['--root', '{root}']);
  assert.equal(stored.body.argSlots[0].pattern, '/srv/notes/[a-z]+');
  assert.equal(stored.body.argSlots[0].required, true);

  await page.getByRole('button', { name: 'Edit notes' }).click();
  await form.getByLabel('Pattern (regex)').fill('/srv/notes/[a-z0-9]+');
  await form.getByRole('button', { name: 'Save preset' }).click();
  await page.getByRole('status').filter({ hasText: 'Preset “notes” saved.' }).waitFor();
  stored = await api('GET', '/admin/presets/notes');
  assert.equal(stored.body.argSlots[0].pattern, '/srv/notes/[a-z0-9]+');
  // A pattern the service cannot compile is refused with its error code.
  await page.getByRole('button', { name: 'Edit notes' }).click();
  await form.getByLabel('Pattern (regex)').fill('([');
  await form.getByRole('button', { name: 'Save preset' }).click();
  await form.getByRole('alert').filter({ hasText: 'VALIDATION_ERROR' }).waitFor();
  await form.getByRole('button', { name: 'Cancel' }).click();
});

test('an API key is created, shown once, works, and is revoked', async () => {
  await go('settings');
  await page.getByLabel('Name', { exact: true }).fill('support-bot');
  await page.getByLabel('Role').selectOption('service');
  await page.getByRole('button', { name: 'Create key' }).click();
  const shown = page.getByTestId('new-key');
  await shown.waitFor();
  const key = (await shown.innerText()).trim();
  const works = await api('GET', '/api/mcp-servers', { key, user: USER });
  assert.equal(works.status, 200, JSON.stringify(works));
  await screenshot(page, '06-settings');

  page.once('dialog', (dialog) => dialog.accept());
  await page.getByRole('button', { name: 'Revoke support-bot' }).click();
  await page.locator('tr[data-key-name="support-bot"]').getByRole('button').waitFor({ state: 'detached' });
  // Keys accepted recently are cached for auth.key_cache_ttl_secs; this instance drops
  // a revoked key from its cache at once.
  const refused = await api('GET', '/api/mcp-servers', { key, user: USER });
  assert.equal(refused.status, 401, JSON.stringify(refused));
});

test('the audit log pages and filters', async () => {
  await go('audit');
  const pageLabel = page.getByTestId('entries-page');
  await pageLabel.waitFor();
  const first = await pageLabel.innerText();
  const total = Number(/· (\d+) entries/.exec(first)[1]);
  assert.ok(total > 25, `more than one page of entries (${first})`);
  assert.match(first, /^Page 1 of 2/);
  const firstIds = await page.locator('tr[data-entry]').evaluateAll((rows) => rows.map((r) => r.dataset.entry));
  assert.equal(firstIds.length, 25);
  await page.getByRole('button', { name: 'Next page' }).click();
  await pageLabel.filter({ hasText: /^Page 2 of 2/ }).waitFor();
  const secondIds = await page.locator('tr[data-entry]').evaluateAll((rows) => rows.map((r) => r.dataset.entry));
  assert.equal(secondIds.length, total - 25);
  assert.ok(secondIds.every((id) => !firstIds.includes(id)), 'pages do not overlap');
  await screenshot(page, '07-audit');

  await page.getByLabel('Outcome').selectOption('approved');
  await page.getByRole('button', { name: 'Apply' }).click();
  await pageLabel.filter({ hasText: /· 1 entries/ }).waitFor();
  const entries = page.getByRole('table', { name: 'Audit entries' });
  await entries.getByText('approved', { exact: true }).waitFor();
  // The deciding key by its name.
  await entries.getByText('admin key “bootstrap admin', { exact: false }).waitFor();
});

test('on a phone in dark mode the console still works', async () => {
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, colorScheme: 'dark' });
  // browser.newPage() opens a new context: no cookie yet, so it signs in.
  await phone.goto(`${BASE_URL}/console`);
  await phone.getByLabel('Admin API key').fill(ADMIN_KEY);
  await phone.getByRole('button', { name: 'Sign in' }).click();
  await phone.getByRole('heading', { name: 'Overview' }).waitFor();
  const background = await phone.evaluate(() => getComputedStyle(document.body).backgroundColor);
  assert.equal(background, 'rgb(13, 17, 23)', 'dark colours follow the system');
  const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling of the page (${overflow}px)`);
  await screenshot(phone, '08-overview-phone-dark');
  await phone.goto(`${BASE_URL}/console/#/connections`);
  await phone.getByRole('table', { name: 'Live connections' }).waitFor();
  await screenshot(phone, '09-connections-phone-dark');
  await phone.close();
  assert.deepEqual(pageErrors, [], 'no script errors');
});
