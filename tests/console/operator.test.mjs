// An operator's daily jobs in the console (issue 40), at a laptop's width (1366 px) and a
// phone's (390 px): find a user by part of their id, find and approve a waiting call of a
// user they did not know and see its result, read why a connection is broken and retry
// it, disable a user's tool and see the audit row, export the audit for a filter. On every
// page no action button of a table lies outside the viewport, and axe-core finds no
// serious violation. Started by tests/api/console_browser.rs, which prepares:
//   KNOWN_USER    a user with the fixture `fx` (whose id holds "support")
//   STRANGER      a user with calls of `add` parked: WAITING_1 and WAITING_2 (message ids)
//   BROKEN_USER   a user whose server `weather` points at a closed port
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import {
  launchBrowser, screenshot, signIn, actionsOutOfView, seriousViolations, BASE_URL,
} from './lib.mjs';

const KNOWN_USER = process.env.KNOWN_USER;
const STRANGER = process.env.STRANGER;
const WAITING = [process.env.WAITING_1, process.env.WAITING_2];
const BROKEN_USER = process.env.BROKEN_USER;

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** Layout and accessibility, checked on every page an operator sees. */
async function checkPage(page, name) {
  assert.deepEqual(await actionsOutOfView(page), [], `${name}: every action button is in view`);
  assert.deepEqual(await seriousViolations(page), [], `${name}: no serious accessibility violation`);
  await screenshot(page, name);
}

for (const [index, [label, viewport]] of [
  ['laptop', { width: 1366, height: 768 }],
  ['phone', { width: 390, height: 844 }],
].entries()) {
  test(`at ${viewport.width} px an operator does the day's jobs`, async () => {
    const page = await browser.newPage({ viewport });
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));
    const go = (hash) => page.goto(`${BASE_URL}/console/#/${hash}`);
    await signIn(page);
    await checkPage(page, `op-${label}-overview`);

    // Find a user by part of their id.
    await page.getByRole('link', { name: 'Users', exact: true }).click();
    await page.getByLabel('User id or part of it').fill('SUPPORT');
    await page.getByRole('button', { name: 'Find' }).click();
    const users = page.getByRole('table', { name: 'Users' });
    await page.getByTestId('users-page').filter({ hasText: '· 1 users' }).waitFor();
    await users.getByRole('link', { name: KNOWN_USER }).waitFor();
    assert.match(page.url(), /#\/users\?search=SUPPORT/, 'the search is in the address');
    assert.equal(await users.locator('tr[data-user]').count(), 1);
    await checkPage(page, `op-${label}-users`);
    await users.getByRole('link', { name: KNOWN_USER }).click();
    await page.getByRole('heading', { name: `User ${KNOWN_USER}` }).waitFor();
    await page.getByRole('table', { name: 'Servers' }).getByText('fx', { exact: true }).waitFor();

    // Find a waiting call of a user they did not know, approve it, see its result.
    await page.getByRole('link', { name: 'Approvals', exact: true }).click();
    const waiting = page.getByRole('table', { name: 'Waiting calls' });
    const call = waiting.locator(`tr[data-message="${WAITING[index]}"]`);
    await call.waitFor();
    await checkPage(page, `op-${label}-approvals`);
    await call.getByRole('button', { name: `Approve add of ${STRANGER}` }).click();
    const decision = page.getByRole('list', { name: 'Decisions' }).locator('li').first();
    await decision.getByTestId('decision-result').filter({ hasText: /^5$/ }).waitFor();
    assert.match(await decision.innerText(), /Approved add of .*now done/s);
    await call.waitFor({ state: 'detached' });

    // Read why a connection is broken, and retry it.
    await go(`servers?search=${encodeURIComponent(BROKEN_USER)}`);
    const servers = page.getByRole('table', { name: 'Servers' });
    const broken = servers.locator('tr[data-server]').filter({ hasText: 'weather' });
    await broken.waitFor();
    await broken.getByRole('button', { name: `Reconnect weather of ${BROKEN_USER}` }).click();
    const alert = page.getByRole('alert');
    await alert.filter({ hasText: 'MCP_CONNECTION_ERROR' }).waitFor();
    const said = await alert.innerText();
    assert.match(said, /refused/i, `the cause in words: ${said}`);
    assert.ok(!said.includes('::'), `no type path: ${said}`);
    const brokenDetail = servers.locator('tr[data-server-detail]');
    await brokenDetail.getByTestId('last-error').filter({ hasText: /refused/i }).waitFor();
    await brokenDetail.getByRole('button', { name: /^History/ }).click();
    await page.getByRole('list', { name: 'History of weather' }).getByText(/refused/i).first().waitFor();
    await checkPage(page, `op-${label}-servers`);

    // Disable a user's tool, and see the audit row saying the admin did it.
    await go(`servers?search=${encodeURIComponent(KNOWN_USER)}`);
    const fx = servers.locator('tr[data-server]').filter({ hasText: 'fx' });
    await fx.locator('summary').click();
    page.once('dialog', (dialog) => dialog.accept(index === 0 ? 'add' : 'add, echo'));
    await fx.getByRole('button', { name: 'Disabled tools…' }).click();
    await page.getByRole('status').filter({ hasText: 'Saved disabled tools of fx' }).waitFor();
    await fx.getByText(index === 0 ? 'disabled: add' : 'disabled: add, echo').waitFor();
    await go(`audit?userId=${encodeURIComponent(KNOWN_USER)}&outcome=server_changed`);
    const entries = page.getByRole('table', { name: 'Audit entries' });
    await page.getByTestId('entries-page').filter({ hasText: `· ${index + 1} entries` }).waitFor();
    await checkPage(page, `op-${label}-audit`);
    // Who did it, in the row's details (the column is hidden on a phone).
    await entries.getByRole('button', { name: /^Details/ }).first().click();
    await page.getByTestId('audit-detail').getByText('admin key “bootstrap admin', { exact: false }).waitFor();

    // Export the audit for a filter: the download holds what the filter keeps.
    await go(`audit?server=fx&via=rest&outcome=done`);
    // The last filter's rows (admins' changes) stay until the new page arrives: wait for it.
    await entries.locator('tbody tr').first().filter({ hasText: 'done' }).waitFor();
    await entries.locator('tbody tr').filter({ hasText: 'server changed' }).first().waitFor({ state: 'detached' });
    assert.match(page.url(), /server=fx/);
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      page.getByRole('link', { name: 'CSV' }).click(),
    ]);
    const csv = await readFile(await download.path(), 'utf8');
    const lines = csv.trim().split('\n');
    assert.match(lines[0], /^id,createdAt,userId,serverId,serverName,toolName/);
    assert.ok(lines.length > 1, `rows exported: ${csv}`);
    for (const line of lines.slice(1)) {
      const fields = line.split(',');
      assert.equal(fields[4], 'fx', line);
      assert.equal(fields[7], 'done', line);
      assert.equal(fields[12], 'rest', line);
    }
    // Drill down into one row: its arguments and result.
    await page.getByRole('table', { name: 'Audit entries' }).getByRole('button', { name: /^Details/ }).first().click();
    const detail = page.getByTestId('audit-detail');
    await detail.getByTestId('audit-arguments').filter({ hasText: 'from the console test' }).waitFor();
    await detail.getByTestId('audit-result').filter({ hasText: 'from the console test' }).waitFor();
    assert.match(page.url(), /row=/, 'the open row is in the address');
    await checkPage(page, `op-${label}-audit-detail`);

    assert.deepEqual(errors, [], 'no script errors');
    await page.close();
  });
}
