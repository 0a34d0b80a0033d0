#!/usr/bin/env node
// Runs the browser tests of tests/e2e/*.spec.mjs and writes, like a Check runner, one line
// per failure ("file:0:F:test: message") and a summary "N%: Checks: N, Failures: F,
// Errors: E" to stdout and to OUT/e2e.log, so that scripts/test.sh counts them.
// Screenshots go to OUT/screenshots/.  OUT: $E2E_OUT, default build/tests/e2e.
//   node tests/e2e/run.mjs [name-substring...]
// Environment: TESSERAD (default build/tesserad), CHROMIUM (default /usr/bin/chromium).
import fs from 'node:fs';
import path from 'node:path';
import { TOP, Skip, within, startServer, launchBrowser } from './harness.mjs';

const OUT = path.resolve(process.env.E2E_OUT || path.join(TOP, 'build', 'tests', 'e2e'));
const SHOTS = path.join(OUT, 'screenshots');
fs.mkdirSync(SHOTS, { recursive: true });
const logPath = path.join(OUT, 'e2e.log');
fs.writeFileSync(logPath, '');
function log(line) {
  console.log(line);
  fs.appendFileSync(logPath, `${line}\n`);
}

const filters = process.argv.slice(2);
const specs = fs.readdirSync(path.join(TOP, 'tests', 'e2e')).filter((f) => f.endsWith('.spec.mjs')).sort();
const all = [];
for (const f of specs) {
  const mod = await import(path.join(TOP, 'tests', 'e2e', f));
  for (const t of mod.tests) if (!filters.length || filters.some((s) => t.name.includes(s))) all.push({ ...t, file: f });
}

let browser = null;
let failures = 0, errors = 0, passed = 0, skipped = 0;
const t0 = Date.now();
try {
  if (all.some((t) => t.browser !== false)) {
    try {
      browser = await within(90000, 'Chromium to start', launchBrowser());
    } catch (e) {
      log(`tests/e2e/run.mjs:0:E:launch: cannot start headless Chromium: ${e.message.split('\n')[0]}`);
      errors += all.filter((t) => t.browser !== false).length;
    }
  }
  for (const t of all) {
    if (t.browser !== false && !browser) continue;
    const start = Date.now();
    let server = null;
    try {
      // A test may name data of its own for the server (harness.mjs: startServer's prepare).
      server = await startServer({ prepare: t.prepare || null });
      const shot = async (page, name) => {
        await page.screenshot({ path: path.join(SHOTS, name), fullPage: false });
      };
      await within(t.timeout || 120000, t.name, t.run({ browser, server, shot }));
      passed++;
      log(`e2e: ${t.name}: passed (${((Date.now() - start) / 1000).toFixed(1)} s)`);
    } catch (e) {
      if (e instanceof Skip) {
        skipped++;
        log(`e2e: ${t.name}: SKIPPED: ${e.message}`);
      } else {
        failures++;
        const msg = String(e && e.message ? e.message : e).split('\n')[0];
        log(`tests/e2e/${t.file}:0:F:${t.name}: ${msg}`);
        if (server) {
          const tail = server.log().split('\n').slice(-8).join('\n   ');
          if (tail.trim()) log(`   tesserad log: ${tail}`);
        }
      }
    } finally {
      if (server) await server.stop();
    }
  }
} finally {
  if (browser) await browser.close().catch(() => {});
}
const n = passed + failures + errors;
const pct = n ? Math.floor((100 * passed) / n) : 100;
log(`e2e: ${skipped} skipped, screenshots in ${SHOTS} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
log(`${pct}%: Checks: ${n}, Failures: ${failures}, Errors: ${errors}`);
process.exit(failures + errors ? 1 : 0);
