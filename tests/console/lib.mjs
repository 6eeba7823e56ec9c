// Helpers for the console's browser tests: node:test scripts in this directory, driving
// Debian's chromium through playwright-core against a running service. Run by
// tests/api/console_browser.rs (`run_console_script`), which sets:
//   BASE_URL        the service, e.g. http://127.0.0.1:PORT
//   ADMIN_KEY       its bootstrap admin key
//   SCREENSHOT_DIR  where screenshot() writes (target/console-screenshots)
//   CHROMIUM        the browser binary (default /usr/bin/chromium)
// Installed by tests/setup.sh (npm ci --prefix tests/console; apt-get install chromium).

import { mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const BASE_URL = (process.env.BASE_URL ?? '').replace(/\/+$/, '');
export const ADMIN_KEY = process.env.ADMIN_KEY ?? '';

/** Headless chromium (env CHROMIUM, default /usr/bin/chromium); close it when done. */
export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    // The tests run as root, where chromium's sandbox cannot start.
    args: ['--no-sandbox'],
    timeout: 60_000,
  });
}

/**
 * A full-page PNG of `page` at its own viewport (set it with
 * `browser.newPage({viewport: {width, height}})`), saved as `${SCREENSHOT_DIR}/${name}.png`.
 * Returns the file's path.
 */
export async function screenshot(page, name) {
  const dir = process.env.SCREENSHOT_DIR;
  if (!dir) throw new Error('SCREENSHOT_DIR is not set');
  const file = path.join(dir, `${name}.png`);
  await mkdir(path.dirname(file), { recursive: true });
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/**
 * A request to the service at BASE_URL: `Authorization: Bearer <key>` (default ADMIN_KEY;
 * pass `key: null` for none), `X-User-Id: <user>` when given, `body` sent as JSON.
 * Returns `{status, body}`, body parsed as JSON when it is JSON, else the text.
 */
export async function api(method, urlPath, { key = ADMIN_KEY, user, body } = {}) {
  if (!BASE_URL) throw new Error('BASE_URL is not set');
  const headers = {};
  if (key) headers.Authorization = `Bearer ${key}`;
  if (user !== undefined && user !== null) headers['X-User-Id'] = user;
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(`${BASE_URL}${urlPath}`, init);
  const text = await response.text();
  let parsed = text;
  if (text !== '') {
    try {
      parsed = JSON.parse(text);
    } catch {
      // Not JSON: the text itself.
    }
  }
  return { status: response.status, body: parsed };
}

/**
 * Polls the async predicate `fn` every 100 ms until it returns a truthy value (returned),
 * or throws once `timeoutMs` have passed (default 10 s), naming `what`. An exception from
 * `fn` counts as "not yet"; the last one is quoted in the timeout error.
 */
export async function waitFor(fn, { timeoutMs = 10_000, what = 'a condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const cause = lastError ? ` (last error: ${lastError.message ?? lastError})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}`, {
        cause: lastError,
      });
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Whether process `pid` exists and is not a zombie (state in /proc/<pid>/stat). */
export async function processAlive(pid) {
  let stat;
  try {
    stat = await readFile(`/proc/${Number(pid)}/stat`, 'utf8');
  } catch (error) {
    if (error.code === 'ENOENT' || error.code === 'ESRCH') return false;
    throw error;
  }
  // "pid (comm) state ...": comm may hold spaces and parentheses, so the state is the
  // first field after the last ')'.
  const state = stat.slice(stat.lastIndexOf(')') + 1).trim().split(' ')[0];
  return state !== 'Z' && state !== 'X';
}

/** Signs `page` in with the admin key at the console's start page. */
export async function signIn(page) {
  await page.goto(`${BASE_URL}/console`);
  await page.getByLabel('Admin API key').fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
}

/**
 * The action buttons of every table on the page that lie outside the viewport (partly
 * or wholly), as `"<label> (left–right of width)"`: a row's actions must be reachable
 * without scrolling the page sideways.
 */
export async function actionsOutOfView(page) {
  return page.evaluate(() => {
    const out = [];
    for (const control of document.querySelectorAll('table td.actions button, table td.actions summary')) {
      const box = control.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue; // not rendered (a closed menu)
      if (box.left < 0 || box.right > window.innerWidth) {
        const label = control.getAttribute('aria-label') || control.textContent.trim();
        out.push(`${label} (${Math.round(box.left)}–${Math.round(box.right)} of ${window.innerWidth})`);
      }
    }
    return out;
  });
}

const AXE = new URL('./node_modules/axe-core/axe.min.js', import.meta.url);

/**
 * axe-core's serious and critical violations on the page as it is now (WCAG 2 A/AA
 * rules), each as `"<rule>: <help> (<first target>)"`.
 */
export async function seriousViolations(page) {
  if (!(await page.evaluate(() => 'axe' in window))) {
    // Evaluated through the DevTools protocol: the console's CSP (script-src 'self')
    // rightly refuses an injected <script>.
    await page.evaluate(await readFile(AXE, 'utf8'));
  }
  const result = await page.evaluate(() => window.axe.run(document, {
    runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] },
  }));
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes[0]?.target?.join(' ') ?? '?'})`);
}
