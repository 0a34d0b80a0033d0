// End-to-end tests of the viewer in headless Chromium.  Each test gets a fresh tesserad
// (demo data, scratch jobs directory, free port) from the runner (run.mjs).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { check, Skip, until, imageStats, newPage, pageMessages, TOP } from './harness.mjs';

const hipsTile = /\/hips\/([^/]+)\/Norder\d+\/Dir\d+\/Npix\d+\.(png|jpg|fits)/;

/** Waits until the responses matching `re` have been quiet for `quietMs` (at most ms). */
async function settle(rec, re, quietMs, ms) {
  let last = -1, since = Date.now();
  await until(ms, `requests matching ${re} to finish`, () => {
    const n = rec.responses.filter((r) => re.test(r.url)).length;
    if (n !== last) { last = n; since = Date.now(); }
    return n > 0 && Date.now() - since > quietMs;
  }, 100);
}

async function noMessages(page, what) {
  const m = await pageMessages(page);
  check(m.length === 0, `${what}: the page shows messages: ${JSON.stringify(m)}`);
}

export const tests = [
  {
    name: 'datasets_page_lists_every_dataset_with_a_thumbnail',
    async run({ browser, server, shot }) {
      const list = await (await fetch(`${server.base}/api/v1/datasets`)).json();
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/`);
      await page.waitForSelector('#dataset-list .card');
      await until(20000, 'every thumbnail to load', () => page.$$eval('#dataset-list img.thumb',
        (imgs) => imgs.length > 0 && imgs.every((i) => i.complete && i.naturalWidth > 0)));
      const names = await page.$$eval('#dataset-list .card', (cs) => cs.map((c) => c.dataset.name));
      check(JSON.stringify(names) === JSON.stringify(list.map((d) => d.name)),
        `cards ${names} != datasets ${list.map((d) => d.name)}`);
      const cube = await page.textContent('.card[data-name="l1448_13co"] .kind');
      check(cube.includes('cube') && cube.includes('105 × 105 × 53'), `l1448 card says '${cube}'`);
      const hh = await page.textContent('.card[data-name="horsehead"] .wcs');
      check(hh.includes('RA---TAN') && hh.includes('icrs'), `horsehead WCS summary '${hh}'`);
      await noMessages(page, 'datasets page');
      check(rec.external.length === 0, `requests left the server: ${rec.external}`);
      await shot(page, 'datasets.png');
      await context.close();
    },
  },
  {
    name: 'sky_view_draws_horsehead_from_hips_tiles',
    async run({ browser, server, shot }) {
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/sky/horsehead`);
      await page.waitForSelector('#aladin canvas');
      await settle(rec, hipsTile, 2000, 45000);
      const tiles = rec.responses.filter((r) => hipsTile.test(r.url));
      const ok = tiles.filter((r) => r.status === 200);
      const bad = tiles.filter((r) => r.status !== 200 && r.status !== 404 && r.status !== 304);
      check(ok.length > 0, `no HiPS tile answered 200 (${tiles.length} tile requests)`);
      check(bad.length === 0, `HiPS tile errors: ${JSON.stringify(bad.slice(0, 5))}`);
      check(tiles.every((r) => hipsTile.exec(r.url)[1] === 'horsehead'), 'tiles of another dataset');
      await page.waitForTimeout(500); // the last tiles blend in
      const el = await page.$('#aladin');
      const png = await el.screenshot();
      const st = await imageStats(page, png);
      check(st.std > 12 && st.levels > 40, `the sky canvas looks blank: ${JSON.stringify(st)}`);
      // The footprint: 32 points around the 891 x 893 image, about 0.25 deg on a side.
      const fp = await page.evaluate(() => window.tessera.footprint);
      check(Array.isArray(fp) && fp.length === 32, `footprint ${JSON.stringify(fp)}`);
      const ras = fp.map((p) => p[0]), decs = fp.map((p) => p[1]);
      const h = Math.max(...decs) - Math.min(...decs);
      check(Math.abs(h - 893 * 0.0002798) < 0.01, `footprint height ${h} deg`);
      check(Math.min(...ras) > 85.1 && Math.max(...ras) < 85.45, `footprint RA ${Math.min(...ras)}..${Math.max(...ras)}`);
      // Cursor coordinates at the centre of the view: the view is centred on the
      // HiPS initial position (hips_initial_ra/dec of the properties).
      const props = await (await fetch(`${server.base}/hips/horsehead/properties`)).text();
      const ra0 = parseFloat(props.match(/hips_initial_ra\s*=\s*(\S+)/)[1]);
      const dec0 = parseFloat(props.match(/hips_initial_dec\s*=\s*(\S+)/)[1]);
      const box = await el.boundingBox();
      await page.mouse.move(box.x + box.width / 2 - 3, box.y + box.height / 2 - 3);
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      const cur = await until(5000, 'cursor coordinates', () => page.evaluate(() => window.tessera.cursor));
      check(Math.abs(cur.ra - ra0) < 0.01 && Math.abs(cur.dec - dec0) < 0.01,
        `cursor at the centre reads ${cur.ra}, ${cur.dec}; expected about ${ra0}, ${dec0}`);
      const text = await page.textContent('#sky-cursor');
      check(text.includes('(icrs)') && text.includes('05h41m'), `cursor text '${text}'`);
      await noMessages(page, 'sky view');
      await shot(page, 'sky_horsehead.png');
      // Switch the frame; the URL keeps it and the view still draws.
      await page.selectOption('#sky-frame', 'galactic');
      await until(3000, 'frame in the URL', async () => (await page.evaluate(() => location.hash)).includes('frame=galactic'));
      await page.waitForTimeout(800);
      const st2 = await imageStats(page, await el.screenshot());
      check(st2.std > 12, `blank after switching to galactic: ${JSON.stringify(st2)}`);
      await shot(page, 'sky_horsehead_galactic.png');
      check(rec.external.length === 0, `requests left the server: ${rec.external.slice(0, 5)}`);
      await context.close();
    },
  },
  {
    name: 'pixel_view_moves_planes_and_plots_a_spectrum',
    async run({ browser, server, shot }) {
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/l1448_13co`);
      const tileOk = (z) => rec.responses.some((r) => r.url.includes(`/iiif/3/l1448_13co~${z}/`) &&
        !r.url.endsWith('info.json') && r.status === 200);
      await until(20000, 'a tile of plane 26', () => tileOk(26));
      // Move the slider: a new plane is requested.
      await page.locator('#px-plane').fill('30');
      await until(15000, 'a tile of plane 30', () => tileOk(30));
      const label = await page.textContent('#px-plane-label');
      check(label.startsWith('plane 30 / 52') && label.includes('km/s'), `plane label '${label}'`);
      // Keyboard: the right arrow goes to the next plane.
      await page.locator('#osd').hover();
      await page.keyboard.press('ArrowRight');
      await until(15000, 'a tile of plane 31', () => tileOk(31));
      // Click the centre of pixel x=40, y=60 (FITS row 61 is picture row 105 - 61 = 44).
      const pt = await page.evaluate(() => {
        const osd = window.tessera.osd;
        const item = osd.world.getItemAt(0);
        const vp = item.imageToViewportCoordinates(40.5, 44.5);
        const p = osd.viewport.pixelFromPoint(vp, true);
        const r = osd.element.getBoundingClientRect();
        return { x: r.left + p.x, y: r.top + p.y };
      });
      await page.mouse.click(pt.x, pt.y);
      await until(15000, 'the series plot', () => page.evaluate(() => window.tessera.plot !== null &&
        window.tessera.plot !== undefined));
      const series = rec.responses.find((r) => r.url.includes('/api/v1/datasets/l1448_13co/series?'));
      check(series && series.status === 200, `series request: ${JSON.stringify(series)}`);
      check(series.url.includes('x=40') && series.url.includes('y=60'), `clicked pixel: ${series.url}`);
      const n = await page.evaluate(() => window.tessera.plot.data[0].length);
      check(n === 53, `the plot has ${n} points, not 53`);
      const ok = await page.evaluate(() => window.tessera.plot.data[1].some((v) => v !== null && Number.isFinite(v)));
      check(ok, 'the plotted spectrum has no finite value');
      check(await page.$('#px-plot canvas'), 'no plot canvas');
      const axis = await page.evaluate(() => window.tessera.plot.series[0].label);
      check(axis.includes('km/s'), `spectral axis label '${axis}' is not in km/s`);
      await noMessages(page, 'pixel view');
      await page.waitForTimeout(300);
      await shot(page, 'pixels_l1448_spectrum.png');
      // The URL holds the view: reopening it shows the same plane and pixel.
      const hash = await page.evaluate(() => location.hash);
      check(/z=31/.test(hash) && /x=40/.test(hash) && /y=60/.test(hash), `hash '${hash}'`);
      const second = await newPage(browser, server.base);
      await second.page.goto(`${server.base}/${hash}`);
      await until(20000, 'the reopened plot', () => second.page.evaluate(() => window.tessera.plot &&
        window.tessera.plot.data[0].length === 53));
      check(second.rec.responses.some((r) => r.url.includes('/iiif/3/l1448_13co~31/') && r.status === 200),
        'the reopened link did not show plane 31');
      await second.context.close();
      await context.close();
    },
  },
  {
    name: 'pixel_view_renders_controls_and_vertical_cuts',
    async run({ browser, server, shot }) {
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/l1448_13co?z=20`);
      await until(20000, 'plane 20', () => rec.responses.some((r) => r.url.includes('l1448_13co~20/') &&
        !r.url.endsWith('info.json') && r.status === 200));
      await page.selectOption('#px-cmap', 'inferno');
      await page.selectOption('#px-stretch', 'sqrt');
      await until(15000, 'a tile with the new rendering', () => rec.responses.some((r) =>
        r.url.includes('l1448_13co~20/') && r.url.includes('cmap=inferno') && r.url.includes('stretch=sqrt') &&
        r.status === 200));
      await page.selectOption('#px-axis', 'xz');
      await until(15000, 'an xz cut', () => rec.responses.some((r) => /\/slice\/xz\/105_53\/0_52_0\.png/.test(r.url)));
      const xz = rec.responses.find((r) => /\/slice\/xz\//.test(r.url));
      check(xz.status === 200, `xz cut answered ${xz.status}: ${xz.url}`);
      await page.waitForTimeout(500);
      await shot(page, 'pixels_l1448_xz.png');
      await noMessages(page, 'xz cut');
      await context.close();
    },
  },
  {
    name: 'errors_are_shown_as_messages',
    async run({ browser, server }) {
      const { page, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/no_such_dataset`);
      await until(10000, 'a message', async () => (await pageMessages(page)).length > 0);
      let m = await pageMessages(page);
      check(m.some((t) => t.includes("no dataset named 'no_such_dataset'")), `messages ${JSON.stringify(m)}`);
      await page.goto(`${server.base}/#/sky/m13`);
      await until(10000, 'the sky message', async () => (await pageMessages(page)).some((t) => t.includes('no celestial WCS')));
      // A bad cut level: the tiles fail and the server's problem detail is shown.
      await page.goto(`${server.base}/#/pixels/horsehead?max=abc`);
      await until(15000, 'the problem detail', async () => (await pageMessages(page)).some((t) => t.includes('max_cut')));
      m = await pageMessages(page);
      const body = await page.textContent('body');
      check(body.trim().length > 100, 'blank page');
      await context.close();
      void m;
    },
  },
  {
    name: 'phone_viewport_shows_datasets_and_pixels',
    async run({ browser, server, shot }) {
      const { page, rec, context } = await newPage(browser, server.base, { width: 390, height: 844 });
      await page.goto(`${server.base}/`);
      await page.waitForSelector('#dataset-list .card');
      const overflow = await page.evaluate(() => document.scrollingElement.scrollWidth);
      check(overflow <= 391, `the datasets page is ${overflow} px wide on a 390 px screen`);
      await shot(page, 'phone_datasets.png');
      await page.goto(`${server.base}/#/pixels/l1448_13co`);
      await until(20000, 'a tile', () => rec.responses.some((r) => r.url.includes('/iiif/3/l1448_13co~26/') &&
        !r.url.endsWith('info.json') && r.status === 200));
      const w = await page.evaluate(() => document.scrollingElement.scrollWidth);
      check(w <= 391, `the pixel view is ${w} px wide on a 390 px screen`);
      const osd = await page.$eval('#osd', (e) => { const r = e.getBoundingClientRect(); return { w: r.width, h: r.height }; });
      check(osd.w > 300 && osd.h > 300, `image area ${JSON.stringify(osd)}`);
      await page.waitForTimeout(500);
      await shot(page, 'phone_pixels.png');
      await noMessages(page, 'phone pixel view');
      await context.close();
    },
  },
  {
    name: 'mosaic_job_reaches_succeeded_and_opens',
    timeout: 240000,
    async run({ browser, server, shot }) {
      const probe = await fetch(`${server.base}/api/v1/jobs`);
      if (probe.status === 404) throw new Skip('GET /api/v1/jobs answers 404: this server has no job runner');
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/jobs`);
      await page.waitForSelector('#mosaic-inputs input[value="gc_msx_e"]');
      await page.check('#mosaic-inputs input[value="gc_2mass_k"]');
      await page.check('#mosaic-inputs input[value="gc_msx_e"]');
      await page.fill('#mosaic-output', 'gc_mosaic');
      await page.selectOption('#mosaic-frame', 'galactic');
      await page.click('#mosaic-submit');
      const post = await until(15000, 'the POST answer', () => rec.responses.find((r) =>
        r.url === `${server.base}/api/v1/jobs` && r.status !== 200));
      if (post.status === 404) throw new Skip('POST /api/v1/jobs answers 404: this server has no job runner');
      const said = (await pageMessages(page)).join(' ');
      if (post.status === 400 && said.includes("unknown job type 'mosaic'")) {
        throw new Skip(`this server has no mosaic job type yet: ${said}`);
      }
      check(post.status === 202, `POST /api/v1/jobs answered ${post.status}: ${await pageMessages(page)}`);
      const fractions = new Set();
      const state = await until(200000, 'the job to finish', async () => {
        const s = await page.textContent('#job-state');
        fractions.add(await page.$eval('#job-progress', (p) => p.value));
        return ['succeeded', 'failed', 'cancelled'].includes(s) ? s : null;
      }, 150);
      const err = await page.textContent('#job-error');
      check(state === 'succeeded', `the job ended ${state}: ${err} ${await pageMessages(page)}`);
      check(await page.$eval('#job-progress', (p) => p.value) === 1, 'progress bar not full');
      await shot(page, 'jobs_mosaic_succeeded.png');
      // The product opens in the sky view ...
      await page.click('#job-links a.open-sky');
      await page.waitForSelector('#aladin canvas');
      const re = /\/hips\/gc_mosaic\/Norder\d+\/Dir\d+\/Npix\d+\.png/;
      await settle(rec, re, 2000, 60000);
      check(rec.responses.some((r) => re.test(r.url) && r.status === 200), 'no mosaic HiPS tile answered 200');
      await page.waitForTimeout(500);
      const st = await imageStats(page, await (await page.$('#aladin')).screenshot());
      check(st.std > 8, `the mosaic sky view looks blank: ${JSON.stringify(st)}`);
      await shot(page, 'mosaic_sky.png');
      // ... and in the pixel view.
      await page.goto(`${server.base}/#/pixels/gc_mosaic`);
      await until(20000, 'a mosaic IIIF tile', () => rec.responses.some((r) => r.url.includes('/iiif/3/gc_mosaic/') &&
        !r.url.endsWith('info.json') && r.status === 200));
      await page.waitForTimeout(500);
      await shot(page, 'mosaic_pixels.png');
      // The job list shows it.
      await page.goto(`${server.base}/#/jobs`);
      await until(10000, 'the job list', async () => (await page.textContent('#job-table tbody')).includes('succeeded'));
      await noMessages(page, 'jobs');
      await context.close();
      void fractions;
    },
  },
  {
    name: 'jobs_view_follows_a_job_and_opens_its_product',
    async run({ browser, server, shot }) {
      // A short job of another type, so that this part runs whatever job types exist.
      const body = { type: 'reduce', dataset: 'l1448_13co', op: 'mean', axis: 'z', output: { name: 'l1448_mean' } };
      const r = await fetch(`${server.base}/api/v1/jobs`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      });
      if (r.status === 404) throw new Skip('POST /api/v1/jobs answers 404: this server has no job runner');
      const job = await r.json();
      if (r.status === 400 && /unknown job type/.test(job.detail || '')) throw new Skip(`no reduce job type: ${job.detail}`);
      check(r.status === 202 && job.id, `POST answered ${r.status}: ${JSON.stringify(job)}`);
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/jobs?job=${job.id}`);
      await until(60000, 'the job to succeed', async () => (await page.textContent('#job-state')) === 'succeeded');
      check(await page.$eval('#job-progress', (p) => p.value) === 1, 'progress bar not full');
      await until(10000, 'the job in the list', async () => (await page.textContent('#job-table tbody')).includes(job.id));
      await page.click('#job-links a.open-pixels');
      await until(20000, 'a tile of the product', () => rec.responses.some((x) => x.url.includes('/iiif/3/l1448_mean/') &&
        !x.url.endsWith('info.json') && x.status === 200));
      await noMessages(page, 'the product in the pixel view');
      await page.waitForTimeout(300);
      await shot(page, 'jobs_product_pixels.png');
      await context.close();
    },
  },
  {
    name: 'footprint_wcs_matches_astropy',
    browser: false,
    async run({ server }) {
      const py = '/usr/bin/python3';
      try {
        execFileSync(py, ['-c', 'import astropy.wcs'], { stdio: 'ignore', timeout: 30000 });
      } catch (_) {
        throw new Skip('no astropy in /usr/bin/python3');
      }
      const { makePix2Sky } = await import(path.join(TOP, 'viewer', 'wcs.js'));
      const list = await (await fetch(`${server.base}/api/v1/datasets`)).json();
      const demo = JSON.parse(fs.readFileSync(path.join(TOP, 'conf', 'demo.json'), 'utf8'));
      const pts = [[0, 0], [0.5, 100.25], [37, 11], [80, 60]];
      const script = [
        'import sys, json, warnings', 'warnings.simplefilter("ignore")',
        'from astropy.io import fits', 'from astropy.wcs import WCS',
        'w = WCS(fits.getheader(sys.argv[1])).celestial',
        'pts = json.loads(sys.argv[2])',
        'out = [[float(v) for v in w.pixel_to_world_values(x, y)] for x, y in pts]',
        'print(json.dumps([[v if v == v else None for v in p] for p in out]))',
      ].join('\n');
      let compared = 0;
      for (const d of list.filter((x) => x.celestial)) {
        const f = makePix2Sky(d.wcs);
        check(f, `${d.name}: projection ${d.wcs.ctype[0]} not supported by viewer/wcs.js`);
        const file = path.join(TOP, 'data', 'demo', demo.datasets.find((x) => x.name === d.name).path);
        const ref = JSON.parse(execFileSync(py, ['-c', script, file, JSON.stringify(pts)], { timeout: 60000 }).toString());
        // HorseHead's DSS plate solution has a polynomial distortion the linear summary
        // leaves out (a few arcsec); the others are exact.
        const tol = d.name === 'horsehead' ? 10 / 3600 : 1e-7;
        pts.forEach(([x, y], i) => {
          const got = f(x, y);
          if (ref[i][0] === null) {
            check(got === null, `${d.name} (${x}, ${y}): astropy has no sky position, the viewer ${got}`);
            compared++;
            return;
          }
          check(got, `${d.name} (${x}, ${y}): no sky position from the viewer, astropy ${ref[i]}`);
          const dl = Math.abs(((got[0] - ref[i][0] + 540) % 360) - 180) * Math.cos(ref[i][1] * Math.PI / 180);
          const db = Math.abs(got[1] - ref[i][1]);
          check(dl < tol && db < tol, `${d.name} (${x}, ${y}): viewer ${got}, astropy ${ref[i]}`);
          compared++;
        });
      }
      check(compared >= 16, `only ${compared} positions compared`);
    },
  },
];
