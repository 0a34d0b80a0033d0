// Mirador (npm mirador, its prebuilt bundle) opens a dataset's IIIF Presentation 3
// manifest, /iiif/3/{name}/manifest.json, in headless Chromium: the window shows the
// manifest's canvases ("1 of 5" for the five frames of m13, not "1 of 0" as from an
// info.json alone), draws the first frame from the Image API service, and moves to the
// next canvas.  The page is the test's own, Mirador.viewer as its documentation shows it.
import fs from 'node:fs';
import path from 'node:path';
import { check, Skip, until, imageStats, newPage, TOP } from './harness.mjs';

const bundle = path.join(TOP, 'node_modules', 'mirador', 'dist', 'mirador.min.js');
const PAGE = '/e2e/mirador.html';
const html = `<!doctype html>
<html><head><meta charset="utf-8"><title>Mirador</title>
<style>html, body { margin: 0; } #mirador { position: absolute; inset: 0; }</style>
</head><body>
<div id="mirador"></div>
<script src="/e2e/mirador.min.js"></script>
<script>
const manifest = new URLSearchParams(location.search).get('manifest');
window.viewer = Mirador.viewer({
  id: 'mirador',
  windows: [{ manifestId: manifest }],
  window: { allowClose: false, allowMaximize: false },
  workspaceControlPanel: { enabled: false },
});
</script>
</body></html>`;

export const tests = [
  {
    name: 'mirador_opens_the_manifest_of_a_stack',
    timeout: 150000,
    async run({ browser, server, shot }) {
      if (!fs.existsSync(bundle)) throw new Skip('npm mirador is not installed (npm install)');
      const { page, rec, context } = await newPage(browser, server.base, { width: 1100, height: 800 });
      try {
        await page.route(`${server.base}${PAGE}*`, (route) =>
          route.fulfill({ status: 200, contentType: 'text/html; charset=utf-8', body: html }));
        await page.route(`${server.base}/e2e/mirador.min.js`, (route) =>
          route.fulfill({ status: 200, contentType: 'text/javascript', body: fs.readFileSync(bundle) }));
        const manifest = `${server.base}/iiif/3/m13/manifest.json`;
        await page.goto(`${server.base}${PAGE}?manifest=${encodeURIComponent(manifest)}`);
        const count = async () => (await page.evaluate(() => document.body.innerText)).match(/(\d+) of (\d+)/);
        const m = await until(60000, 'Mirador to show the canvas count', count, 250);
        check(m[1] === '1' && m[2] === '5', `Mirador shows "${m[0]}", not "1 of 5"`);
        const tile = /\/iiif\/3\/m13~0\/[^/]+\/[^/]+\/0\/default\.(jpg|png)$/;
        await until(60000, 'Mirador to draw frame 1 from its image service', () =>
          rec.responses.some((r) => tile.test(r.url) && r.status === 200), 250);
        await page.waitForTimeout(2000);
        const canvas = await page.$('.openseadragon-canvas canvas');
        check(canvas, 'Mirador shows no image canvas');
        const st = await imageStats(page, await canvas.screenshot());
        check(st.levels > 20 && st.std > 5, `frame 1 looks blank: mean ${st.mean.toFixed(1)}, std ${st.std.toFixed(1)}, ${st.levels} levels`);
        await shot(page, 'mirador_m13.png');
        // The next canvas: frame 2, from its own service.
        const next = await page.$('button[aria-label="Next item"]');
        check(next, 'Mirador shows no "Next item" button');
        await next.click();
        const two = await until(20000, '"2 of 5"', async () => { const c = await count(); return c && c[1] === '2' ? c : null; }, 250);
        check(two[2] === '5', `Mirador shows "${two[0]}" after Next`);
        await until(60000, 'frame 2 from its service', () =>
          rec.responses.some((r) => /\/iiif\/3\/m13~1\//.test(r.url) && r.status === 200), 250);
        const bad = rec.responses.filter((r) => r.url.startsWith(server.base) && r.status >= 400);
        check(bad.length === 0, `failed requests: ${bad.slice(0, 3).map((r) => `${r.status} ${r.url}`)}`);
        check(rec.external.length === 0, `requests off the server: ${rec.external.slice(0, 3)}`);
        check(rec.pageErrors.length === 0, `page errors: ${rec.pageErrors.slice(0, 3)}`);
      } finally {
        await context.close();
      }
    },
  },
];
