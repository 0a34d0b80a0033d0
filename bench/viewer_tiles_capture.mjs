// Records the HiPS tile requests of the viewer's initial sky view of each dataset (headless
// Chromium, a fresh tesserad each): one line per tile path, into bench/viewer_tiles.d/NAME.
// Run once when the viewer changes what it asks for: node bench/viewer_tiles_capture.mjs [name...]
import fs from 'node:fs';
import path from 'node:path';
import { startServer, launchBrowser, newPage, until, TOP } from '../tests/e2e/harness.mjs';

const names = process.argv.slice(2).length ? process.argv.slice(2)
  : ['horsehead', 'gc_2mass_k', 'gc_msx_e', 'allsky_rosat', 'l1448_13co'];
const tile = /\/hips\/[^/]+\/Norder\d+\/(Dir\d+\/Npix\d+|Allsky)\.(png|jpg|fits)/;
const outDir = path.join(TOP, 'bench', 'viewer_tiles.d');
fs.mkdirSync(outDir, { recursive: true });
const browser = await launchBrowser();
for (const name of names) {
  const server = await startServer();
  try {
    const { page, rec, context } = await newPage(browser, server.base);
    await page.goto(`${server.base}/#/sky/${name}`);
    let last = -1, since = Date.now();
    await until(60000, `tiles of ${name}`, () => {
      const n = rec.responses.filter((r) => tile.test(r.url)).length;
      if (n !== last) { last = n; since = Date.now(); }
      return n > 0 && Date.now() - since > 3000;
    }, 100);
    const paths = [...new Set(rec.responses.filter((r) => tile.test(r.url))
      .map((r) => new URL(r.url).pathname + new URL(r.url).search))];
    fs.writeFileSync(path.join(outDir, name), paths.join('\n') + '\n');
    console.log(`${name}: ${paths.length} tiles`);
    await context.close();
  } finally {
    await server.stop();
  }
}
await browser.close();
