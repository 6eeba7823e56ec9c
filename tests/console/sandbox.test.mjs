// The overview says when stdio servers are not isolated (issue 59): a service started
// with a sandbox that cannot be made (tests/api/console_browser.rs names a bubblewrap
// that does not exist) shows why on the first page an operator sees, at a laptop's and a
// phone's width.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launchBrowser, screenshot, signIn } from './lib.mjs';

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

for (const viewport of [{ width: 1366, height: 768 }, { width: 390, height: 844 }]) {
  test(`at ${viewport.width} px the overview warns that stdio servers are not isolated`, async () => {
    const page = await browser.newPage({ viewport });
    await signIn(page);
    const warning = page.getByTestId('not-isolated');
    await warning.waitFor();
    const text = await warning.innerText();
    assert.match(text, /Stdio servers are not isolated/);
    assert.match(text, /pool\.sandbox\.mode/);
    assert.ok(await warning.isVisible());
    const box = await warning.boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= viewport.width, 'the warning fits the screen');
    await screenshot(page, `sandbox-warning-${viewport.width}`);
    await page.close();
  });
}
