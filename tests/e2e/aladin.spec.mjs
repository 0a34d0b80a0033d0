// Stock Aladin Lite (npm aladin-lite, served by tesserad under /vendor/aladin-lite/) on
// every demo HiPS, through a page of our own that uses only Aladin's documented API
// (A.init, A.aladin with A.imageHiPS as its survey, gotoRaDec, setFoV) - not the project's viewer and
// its fetch wrapper.  For each survey: no tile request answers 404 (Aladin asks only for
// what Moc.fits lists), no console or page error, and the screenshot shows the data where
// the data is and the empty sky where it is not.
import { check, until, imageStats, newPage } from './harness.mjs';

const PAGE = '/e2e/aladin-stock.html';

// The page: Aladin Lite as its documentation shows it (ES module build of the npm
// package), the survey given by URL.  `window.ready` is set once A.init resolves and the
// view exists; `window.aladinError` records a failure to start.  The view opens on the
// middle of the image, an eighth of its field wide, and the test zooms out once Moc.fits
// has arrived: Aladin Lite 3.8 asks for its first tiles without waiting for the MOC, so a
// view opened at once on more than the image asks for tiles outside it too (404) before
// the coverage culls them.
const html = `<!doctype html>
<html><head><meta charset="utf-8"><title>Aladin Lite</title>
<style>html, body { margin: 0; background: #000; } #aladin-lite-div { width: 600px; height: 600px; }</style>
</head><body>
<div id="aladin-lite-div"></div>
<script type="module">
import A from '/vendor/aladin-lite/aladin.js';
const q = new URLSearchParams(location.search);
A.init.then(() => {
  // The survey as the documentation's first example gives it: A.imageHiPS(url) as the
  // base layer (without one Aladin would load its default, DSS, from CDS).
  const aladin = A.aladin('#aladin-lite-div', {
    survey: A.imageHiPS(q.get('hips'), { imgFormat: 'png' }), fov: Number(q.get('fov')), target: q.get('target'), projection: q.get('proj') || 'SIN',
    cooFrame: 'ICRS', showReticle: false, showFrame: false, showZoomControl: false,
    showFullscreenControl: false, showLayersControl: false, showGotoControl: false,
    showSimbadPointerControl: false, showCooGridControl: false, showProjectionControl: false,
    showSettingsControl: false, showShareControl: false, showStatusBar: false,
    showCooLocation: false, showFov: false, log: false,   // no startup report to CDS
  });
  window.aladin = aladin;
  window.ready = true;
}).catch((e) => { window.aladinError = String(e); });
</script>
</body></html>`;

/** The properties of survey `name` as a {key: value} object. */
async function properties(server, name) {
  const text = await (await fetch(`${server.base}/hips/${name}/properties`)).text();
  const p = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^\s*([\w.]+)\s*=\s*(.*?)\s*$/);
    if (m) p[m[1]] = m[2];
  }
  return p;
}

const tile = /\/hips\/[^/]+\/Norder\d+\/Dir\d+\/Npix\d+(?:_\d+)?\.png$/;

/** Opens survey `name` in stock Aladin Lite centred on ra, dec with field `fov` degrees;
 * waits until its tile requests have been quiet for 2 s; returns the page, its record
 * and the screenshot statistics of the view (the whole view and `regions`, squares of
 * `size` pixels centred at fractions of the view). */
async function openSurvey(browser, server, shot, { name, ra, dec, fov, startFov = fov / 8, proj, regions, size = 60 }) {
  const { page, rec, context } = await newPage(browser, server.base, { width: 600, height: 600 });
  await page.route(`${server.base}${PAGE}*`, (route) =>
    route.fulfill({ status: 200, contentType: 'text/html; charset=utf-8', body: html }));
  const hips = `${server.base}/hips/${name}`;
  await page.goto(`${server.base}${PAGE}?hips=${encodeURIComponent(hips)}&target=${ra}%20${dec}&fov=${startFov}&proj=${proj || 'SIN'}`);
  await until(30000, 'Aladin Lite to start', () => page.evaluate(() => window.ready || window.aladinError));
  const err = await page.evaluate(() => window.aladinError);
  check(!err, `Aladin Lite did not start: ${err}`);
  await until(30000, `Moc.fits of ${name}`, () => rec.responses.some((r) => /\/Moc\.fits$/.test(r.url)), 100);
  await page.waitForTimeout(1500);
  if (startFov !== fov) await page.evaluate((f) => { window.aladin.setFoV(f); }, fov);
  await until(60000, `tiles of ${name}`, () => rec.responses.some((r) => tile.test(r.url) && r.url.includes(`/hips/${name}/`)), 200);
  let last = -1, since = Date.now();
  await until(60000, 'the tile requests to settle', () => {
    const n = rec.responses.filter((r) => tile.test(r.url)).length;
    if (n !== last) { last = n; since = Date.now(); }
    return Date.now() - since > 2000;
  }, 200);
  await page.waitForTimeout(800);
  const el = await page.$('#aladin-lite-div');
  await shot(page, `aladin_stock_${name}.png`);
  const box = await el.boundingBox();
  const png = await el.screenshot();
  const whole = await imageStats(page, png);
  const frac = whole.differ;
  const parts = [];
  for (const [fx, fy] of regions) {
    parts.push(await imageStats(page, await page.screenshot({ clip: {
      x: box.x + fx * box.width - size / 2, y: box.y + fy * box.height - size / 2, width: size, height: size } })));
  }
  return { page, rec, context, whole, parts, frac };
}

/** The checks every survey shares: no 404, no error, no request off the server. */
function noErrors(name, rec) {
  const tiles = rec.responses.filter((r) => tile.test(r.url));
  const bad = rec.responses.filter((r) => r.url.includes('/hips/') && r.status >= 400);
  check(tiles.length > 0, `${name}: Aladin asked for no tile`);
  check(bad.length === 0, `${name}: ${bad.length} of ${tiles.length} HiPS requests failed: ${bad.slice(0, 3).map((r) => `${r.status} ${r.url}`).join(', ')}`);
  const moc = rec.responses.filter((r) => /\/Moc\.fits$/.test(r.url));
  check(moc.length > 0 && moc.every((r) => r.status === 200), `${name}: Moc.fits answers ${JSON.stringify(moc)}`);
  check(rec.pageErrors.length === 0, `${name}: page errors: ${rec.pageErrors.slice(0, 3)}`);
  check(rec.consoleErrors.length === 0, `${name}: console errors: ${rec.consoleErrors.slice(0, 3)}`);
}

const fmt = (s) => `mean ${s.mean.toFixed(1)}, std ${s.std.toFixed(1)}, ${s.levels} levels`;

/** Data in the middle: many levels, not flat; the empty sky at the corners: one flat
 * colour; and the data covering about the image's share of the view (the view is twice
 * the image's field: about a quarter, less for a tilted or irregular footprint). */
function dataInMiddle(name, parts, frac) {
  const [mid, ...corners] = parts;
  check(mid.levels > 20 && mid.std > 8, `${name}: the middle of the view does not show the data: ${fmt(mid)}`);
  for (const c of corners) check(c.levels <= 2 && c.std < 0.5, `${name}: a corner outside the image is not empty sky: ${fmt(c)}`);
  check(frac > 0.08 && frac < 0.45, `${name}: the data covers ${(100 * frac).toFixed(1)}% of the view`);
}

const small = (name, extra = {}) => ({
  name: `aladin_stock_${name}`,
  timeout: 150000,
  async run({ browser, server, shot }) {
    const p = await properties(server, name);
    const ra = Number(p.hips_initial_ra), dec = Number(p.hips_initial_dec), fov = Number(p.hips_initial_fov);
    // Twice the image's field: the image fills the middle half of the view.
    const { rec, context, parts, frac } = await openSurvey(browser, server, shot, {
      name, ra, dec, fov: 2 * fov, regions: [[0.5, 0.5], [0.08, 0.08], [0.9, 0.08], [0.08, 0.9], [0.88, 0.88]], size: 40 });
    try {
      noErrors(name, rec);
      dataInMiddle(name, parts, frac);
      if (extra.check) await extra.check({ server, rec });
    } finally {
      await context.close();
    }
  },
});

export const tests = [
  small('horsehead'),
  small('gc_2mass_k'),
  small('gc_msx_e'),
  // The cube: Aladin Lite 3.8 computes a plane's frequency from em_min and em_max (NaN
  // without them, and its WebGL core panics); 13CO J=1-0 from 2528.19 to 5982.22 m/s
  // (optical velocity, 53 planes of 66.42 m/s) is 2.7204292e-3 to 2.7204606e-3 m.
  small('l1448_13co', {
    async check({ server, rec }) {
      const p = await properties(server, 'l1448_13co');
      const near = (a, b, tol) => Math.abs(Number(a) - b) <= tol;
      check(near(p.em_min, 2.7204292e-3, 1e-10) && near(p.em_max, 2.7204606e-3, 1e-10),
        `em_min ${p.em_min}, em_max ${p.em_max}`);
      check(p.data_cube_crpix3 === '1' && near(p.data_cube_crval3, 2528.19, 0.01) &&
        near(p.data_cube_cdelt3, 66.42361, 1e-6) && p.data_cube_bunit3 === 'm s-1',
        `data_cube_*: ${p.data_cube_crpix3} ${p.data_cube_crval3} ${p.data_cube_cdelt3} ${p.data_cube_bunit3}`);
      const planes = new Set(rec.responses.filter((r) => tile.test(r.url)).map((r) => (r.url.match(/_(\d+)\.png$/) || [])[1]));
      // Without its cube control (hidden here) Aladin shows the middle plane.
      const z = [...planes].map(Number);
      check(z.length === 1 && z[0] >= 0 && z[0] < 53, `Aladin asked for the tiles of planes ${z}, not of one plane of 0..52`);
    },
  }),
  {
    name: 'aladin_stock_allsky_rosat',
    timeout: 150000,
    async run({ browser, server, shot }) {
      // The whole sky in Aitoff: data everywhere inside the ellipse, none outside it.
      const { rec, context, parts } = await openSurvey(browser, server, shot, {
        name: 'allsky_rosat', ra: 0, dec: 0, fov: 360, startFov: 360, proj: 'AIT',
        regions: [[0.5, 0.5], [0.3, 0.5], [0.7, 0.5], [0.03, 0.03], [0.97, 0.05]], size: 20 });
      try {
        noErrors('allsky_rosat', rec);
        for (const r of parts.slice(0, 3)) check(r.mean > 10 && r.levels > 3, `allsky_rosat: no data inside the sky: ${fmt(r)}`);
        for (const r of parts.slice(3)) check(r.levels <= 2 && r.std < 0.5, `allsky_rosat: a corner outside the sky is not empty: ${fmt(r)}`);
      } finally {
        await context.close();
      }
    },
  },
];
