// The Policies page (issue 42) at a laptop's width (1366 px) and a phone's (390 px): a rule
// that does not compile is refused with its line and column and nothing is saved; a
// valid draft is tested on a sample call (which rule decides, which quotas count it)
// and saved as a new version that the service then enforces; a user's page shows their
// groups, plan and what they used of each quota. No action button lies outside the
// viewport, and axe-core finds no serious violation. Started by
// tests/api/console_browser.rs, which prepares:
//   QUOTA_USER   a user on the free plan in group support, with calls counted by `daily`
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  launchBrowser, screenshot, signIn, actionsOutOfView, seriousViolations, api, BASE_URL,
} from './lib.mjs';

const QUOTA_USER = process.env.QUOTA_USER;

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

async function checkPage(page, name) {
  assert.deepEqual(await actionsOutOfView(page), [], `${name}: every action button is in view`);
  assert.deepEqual(await seriousViolations(page), [], `${name}: no serious accessibility violation`);
  await screenshot(page, name);
}

for (const [label, viewport] of [
  ['laptop', { width: 1366, height: 768 }],
  ['phone', { width: 390, height: 844 }],
]) {
  test(`at ${viewport.width} px an operator edits, tests and saves policies`, async () => {
    const page = await browser.newPage({ viewport });
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await signIn(page);
    await page.getByRole('link', { name: 'Policies', exact: true }).click();
    const before = (await api('GET', '/admin/policies')).body;
    await page.getByTestId('policy-version').filter({ hasText: `Version ${before.version}` }).waitFor();
    const draft = page.getByRole('textbox', { name: /Rules and quotas/ });

    // A condition that does not compile: refused, with where.
    await draft.fill(JSON.stringify({
      rules: [{ name: 'broken', when: 'tool.name ==', action: 'deny' }],
      quotas: before.quotas,
    }));
    await page.getByRole('button', { name: 'Save as a new version' }).click();
    const refused = page.getByRole('alert').filter({ hasText: 'VALIDATION_ERROR' });
    await refused.waitFor();
    assert.match(await refused.innerText(), /rules\[0\]\.when \('broken'\): line 1, column/);
    assert.equal((await api('GET', '/admin/policies')).body.version, before.version, 'nothing saved');

    // A valid draft, tested on a sample call before it is saved.
    const rule = `no-echo-${label}`;
    await draft.fill(JSON.stringify({
      rules: [{ name: rule, when: 'tool.name == "echo" && user.plan == "free"', action: 'deny' }],
      quotas: before.quotas,
    }, null, 2));
    await page.getByRole('textbox', { name: /A sample call/ }).fill(JSON.stringify({
      user: { id: QUOTA_USER, plan: 'free', groups: ['support'] }, tool: { name: 'echo' }, path: 'chat',
    }));
    await page.getByRole('button', { name: 'Test this call' }).click();
    const decision = page.getByTestId('policy-decision');
    await decision.filter({ hasText: rule }).waitFor();
    assert.match(await decision.innerText(), /deny/);
    assert.match(await decision.innerText(), /Counted by quotas: daily/);
    await checkPage(page, `policies-${label}`);

    await page.getByRole('button', { name: 'Save as a new version' }).click();
    await page.getByRole('status').filter({ hasText: `version ${before.version + 1}` }).waitFor();
    await page.getByTestId('policy-version').filter({ hasText: `Version ${before.version + 1}` }).waitFor();
    const saved = (await api('GET', '/admin/policies')).body;
    assert.equal(saved.rules[0].name, rule);
    assert.deepEqual(saved.quotas, before.quotas, 'the quotas are kept');

    // The user's page: attributes and quota use.
    await page.goto(`${BASE_URL}/console/#/users/${encodeURIComponent(QUOTA_USER)}`);
    await page.getByTestId('user-attributes').filter({ hasText: 'plan: free' }).waitFor();
    const use = page.getByRole('table', { name: 'Quota use' });
    await use.waitFor();
    assert.match(await use.innerText(), /daily/);
    assert.equal(await page.getByTestId('quota-used-daily').innerText(), '2', 'the two calls counted');
    await checkPage(page, `policies-user-${label}`);
    assert.deepEqual(errors, [], 'no script errors');
    await page.close();
  });
}
