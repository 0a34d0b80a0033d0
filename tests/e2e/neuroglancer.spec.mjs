// neuroglancer (the prebuilt bundle of npm @janelia-flyem/neuroglancer, served under
// /vendor/neuroglancer/) opens Tessera's Zarr view of a stack, zarr://{base}/zarr/m13/0,
// in headless Chromium and draws a plane: the screenshot of its xy panel must show the
// frame's structure, not a blank panel.
import fs from 'node:fs';
import path from 'node:path';
import { check, Skip, until, imageStats, newPage, TOP } from './harness.mjs';

const bundle = path.join(TOP, 'node_modules', '@janelia-flyem', 'neuroglancer', 'dist', 'min',
  'main.bundle.js');

/** Chromium with WebGL 2 (neuroglancer draws with it): the runner's browser runs with
 * --disable-gpu, so when its pages have no WebGL 2 a second one is started on
 * SwiftShader, the software renderer. */
async function webglBrowser(browser, base) {
  const { page, context } = await newPage(browser, base, { width: 400, height: 300 });
  await page.goto(`${base}/healthz`);
  const ok = await page.evaluate(() => !!document.createElement('canvas').getContext('webgl2'));
  await context.close();
  if (ok) return { b: browser, own: false };
  const { chromium } = await import('playwright-core');
  const b = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, timeout: 60000,
    args: ['--no-sandbox', '--use-gl=angle', '--use-angle=swiftshader', '--enable-unsafe-swiftshader',
      '--ignore-gpu-blocklist', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  return { b, own: true };
}

export const tests = [
  {
    name: 'neuroglancer_draws_a_plane_of_the_zarr_view',
    timeout: 180000,
    async run({ browser, server, shot }) {
      if (!fs.existsSync(bundle)) throw new Skip('npm @janelia-flyem/neuroglancer is not installed (npm install)');
      const { b, own } = await webglBrowser(browser, server.base);
      try {
        const { page, rec } = await newPage(b, server.base, { width: 900, height: 700 });
        // m13 is uint16, its frames 400..612 (1st to 99.9th percentile), the cluster a
        // faint glow in the middle (mean 527 in the central 120x120 pixels, 509 off
        // it): toNormalized() divides by 65535, the shader maps 470..590 to black..white.
        const state = {
          layers: [{
            type: 'image', name: 'm13', source: `zarr://${server.base}/zarr/m13/0`,
            shader: 'void main() { emitGrayscale((toNormalized(getDataValue()) * 65535.0 - 470.0) / 120.0); }',
          }],
          // x and y first: the xy panel shows the first two global dimensions.
          dimensions: { x: [1, ''], y: [1, ''], z: [1, ''] },
          layout: 'xy', showAxisLines: false, showDefaultAnnotations: false,
        };
        await page.goto(`${server.base}/vendor/neuroglancer/index.html#!${encodeURIComponent(JSON.stringify(state))}`);
        const chunk = /\/zarr\/m13\/0\/\d+\/\d+\/\d+$/;
        await until(60000, 'neuroglancer to fetch chunks of the Zarr view', () =>
          rec.responses.some((r) => chunk.test(r.url) && r.status === 200), 200);
        // Let the chunks arrive and the panel redraw.
        let last = -1, since = Date.now();
        await until(60000, 'the chunk requests to settle', () => {
          const n = rec.responses.filter((r) => chunk.test(r.url)).length;
          if (n !== last) { last = n; since = Date.now(); }
          return Date.now() - since > 2000;
        }, 200);
        await page.waitForTimeout(1500);
        const panel = await page.$('.neuroglancer-rendered-data-panel');
        check(panel, 'neuroglancer shows no data panel');
        const png = await panel.screenshot();
        await shot(page, 'neuroglancer_m13.png');
        const st = await imageStats(page, png);
        const meta = rec.responses.filter((r) => /\/zarr\/m13\/0\/\.zarray$/.test(r.url));
        check(meta.length > 0 && meta.every((r) => r.status === 200), `.zarray answers: ${JSON.stringify(meta)}`);
        check(rec.external.length === 0, `requests outside the server: ${rec.external.slice(0, 3)}`);
        check(rec.pageErrors.length === 0, `page errors: ${rec.pageErrors.slice(0, 3)}`);
        // A blank panel is one level; the frame's noise gives many, around the
        // background's 0.33 of white (84).
        check(st.levels > 20 && st.std > 3 && st.mean > 40 && st.mean < 140,
          `the panel does not show the frame: mean ${st.mean.toFixed(1)}, std ${st.std.toFixed(1)}, ${st.levels} levels`);
        // The view is centred on voxel (696, 520) at about one voxel a pixel: the cluster
        // makes the panel's middle brighter than its corners (expected about 120 vs 84).
        const box = await panel.boundingBox();
        const region = async (fx, fy) => imageStats(page, await page.screenshot({ clip: {
          x: box.x + fx * box.width - 60, y: box.y + fy * box.height - 60, width: 120, height: 120 } }));
        const mid = await region(0.5, 0.5);
        const corners = await Promise.all([[0.2, 0.25], [0.8, 0.25], [0.2, 0.8], [0.8, 0.8]]
          .map(([fx, fy]) => region(fx, fy)));
        const off = corners.reduce((a, c) => a + c.mean, 0) / corners.length;
        check(mid.mean > off + 15, `the cluster does not show: middle ${mid.mean.toFixed(1)}, corners ${off.toFixed(1)}`);
      } finally {
        if (own) await b.close();
      }
    },
  },
];
