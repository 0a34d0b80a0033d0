// End-to-end tests of the viewer in headless Chromium.  Each test gets a fresh tesserad
// (demo data, scratch jobs directory, free port) from the runner (run.mjs).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { check, Skip, until, imageStats, newPage, pageMessages, pagePointOf, TOP } from './harness.mjs';

const hipsTile = /\/hips\/([^/]+)\/Norder\d+\/Dir\d+\/Npix\d+(?:_\d+)?\.(png|jpg|fits)/;

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


const OUT = path.resolve(process.env.E2E_OUT || path.join(TOP, 'build', 'tests', 'e2e'));

/** Whether the server answers `url` with something else than 404 (a route of another part). */
async function hasRoute(server, url) {
  return (await fetch(`${server.base}${url}`)).status !== 404;
}

/** Statistics of a screenshot of element `sel`. */
async function shotStats(page, sel) {
  return imageStats(page, await (await page.$(sel)).screenshot());
}

/** Screenshot statistics of `sel`, taken every 150 ms until ok(stats) holds or `ms` have
 * passed; returns the last (the caller checks them). */
async function untilStats(page, sel, ok, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const st = await shotStats(page, sel);
    if (ok(st) || Date.now() > end) return st;
    await page.waitForTimeout(150);
  }
}

/** Runs fn(item) for every item, at most n at once; resolves when all have (the first
 * failure rejects, after the others finished). */
async function inPool(items, n, fn) {
  const queue = items.slice();
  const errors = [];
  const worker = async () => {
    while (queue.length) {
      const it = queue.shift();
      try { await fn(it); } catch (e) { errors.push(e); }
    }
  };
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
  if (errors.length) throw errors[0];
}

/** Opens the sky view `hash` in a fresh page, waits for its tiles and returns
 * {stats (footprint hidden), first, all (ms from the page's start to the first and the
 * last tile answer), tiles, page, rec, context}. */
async function openSky(browser, server, hash, { stats: wantStats = true, viewport, quietMs = 1500, drawn = null } = {}) {
  const { page, rec, context } = await newPage(browser, server.base, viewport);
  await page.goto(`${server.base}/${hash}`);
  await page.waitForSelector('#aladin canvas');
  await settle(rec, hipsTile, quietMs, 45000);
  let stats = null;
  if (wantStats && drawn) {
    // Screenshots until `drawn(stats)` holds (the last tiles blend in), 10 s at most.
    await page.evaluate(() => { const c = document.querySelector('#sky-footprint'); if (c.checked) c.click(); });
    stats = await untilStats(page, '#aladin', drawn, 10000);
  } else if (wantStats) {
    await page.waitForTimeout(400); // the last tiles blend in
    await page.evaluate(() => { const c = document.querySelector('#sky-footprint'); if (c.checked) c.click(); });
    await page.waitForTimeout(200);
    stats = await shotStats(page, '#aladin');
  }
  const t = await page.evaluate(() => window.tessera.hipsTiles.filter((r) => r.status === 200).map((r) => [r.t0, r.t1]));
  const asked = t.length ? Math.min(...t.map((x) => x[0])) : null;
  return {
    stats, first: t.length ? Math.min(...t.map((x) => x[1])) : null, all: t.length ? Math.max(...t.map((x) => x[1])) : null,
    asked, tiles: t.length, page, rec, context,
  };
}

const tileOf = (rec, re) => rec.responses.some((r) => re.test(r.url) && !r.url.endsWith('info.json') && r.status === 200);

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
      // Every thumbnail shows its data, not a flat box (m13's raw frame was one grey:
      // its plane's cut levels leave the 1/11-scale means in a band of 0.56..0.92).
      const srcs = await page.$$eval('#dataset-list .card', (cs) => cs.map((c) => [c.dataset.name, c.querySelector('img.thumb').getAttribute('src')]));
      const thumbs = [];
      for (const [name, src] of srcs) {
        const buf = Buffer.from(await (await fetch(`${server.base}${src}`)).arrayBuffer());
        thumbs.push({ name, ...(await imageStats(page, buf, { opaqueOnly: true })) });
      }
      const flat = thumbs.filter((t) => !(t.n > 1000 && t.std > 20));
      check(flat.length === 0, `thumbnails without contrast: ${JSON.stringify(flat)}`);
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
      // The footprint: the server's outline (or the viewer's own 32 points without the
      // footprint route) around the 891 x 893 image, about 0.25 deg on a side.
      const fp = await until(5000, 'the footprint', () => page.evaluate(() => window.tessera.footprint));
      check(Array.isArray(fp) && fp.length >= 8, `footprint ${JSON.stringify(fp)}`);
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
    name: 'phone_viewport_shows_every_view',
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
      // The sky view and the jobs page (its table with a job in it) fit the width too.
      await page.goto(`${server.base}/#/sky/horsehead`);
      await page.waitForSelector('#aladin canvas');
      await settle(rec, hipsTile, 1000, 30000);
      const sw = await page.evaluate(() => document.scrollingElement.scrollWidth);
      check(sw <= 391, `the sky view is ${sw} px wide on a 390 px screen`);
      const sky = await page.$eval('#aladin', (e) => { const r = e.getBoundingClientRect(); return { w: r.width, h: r.height }; });
      check(sky.w > 300 && sky.h > 300, `sky area ${JSON.stringify(sky)}`);
      await shot(page, 'phone_sky.png');
      if (await hasRoute(server, '/api/v1/jobs')) {
        await fetch(`${server.base}/api/v1/jobs`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ type: 'reduce', dataset: 'l1448_13co', op: 'mean', axis: 'z', output: { name: 'phone_mean' } }),
        });
      }
      await page.goto(`${server.base}/#/jobs`);
      await page.waitForSelector('#mosaic-inputs input');
      await page.waitForTimeout(800);
      const jw = await page.evaluate(() => ({
        page: document.scrollingElement.scrollWidth,
        table: document.querySelector('#job-table').getBoundingClientRect().right,
        rows: document.querySelectorAll('#job-table tbody tr').length,
      }));
      check(jw.page <= 391 && jw.table <= 391, `the jobs page on a 390 px screen: ${JSON.stringify(jw)}`);
      await shot(page, 'phone_jobs.png');
      await context.close();
    },
  },
  {
    name: 'every_dataset_draws_when_opened_directly',
    timeout: 400000,
    async run({ browser, server, shot }) {
      const list = await (await fetch(`${server.base}/api/v1/datasets`)).json();
      const times = [];
      // Sky view of each celestial dataset, opened by its link in a fresh page: once on
      // a cold server (every tile made now), then in the other frame, and once more warm
      // (the server's caches full: times only).  The outline is hidden before the
      // screenshot, so that only drawn tiles can pass.  Datasets run SKY_AT_ONCE at a
      // time in their own contexts, and screenshots are polled until they show data
      // (not taken after fixed sleeps): the tile times below are therefore those of a
      // server busy with several views (bench/viewer_tiles measures them one by one).
      const SKY_AT_ONCE = 3;
      const viewport = { width: 640, height: 480 };
      const drawn = (st) => st.std > 15 && st.levels > 40;
      const tileTimes = (page) => page.evaluate(() => {
        const t = window.tessera.hipsTiles.filter((r) => r.status === 200);
        const m = (f, k) => (t.length ? Math.round(f(...t.map((r) => r[k]))) : null);
        return { first: m(Math.min, 't1'), all: m(Math.max, 't1'), asked: m(Math.min, 't0'), tiles: t.length };
      });
      await inPool(list.filter((x) => x.celestial), SKY_AT_ONCE, async (d) => {
        const o = await openSky(browser, server, `#/sky/${d.name}`, { viewport, quietMs: 600, drawn });
        try {
          times.push({ dataset: d.name, pass: 'cold', first_ms: Math.round(o.first), all_ms: Math.round(o.all), asked_ms: Math.round(o.asked), tiles: o.tiles });
          check(drawn(o.stats), `sky view of ${d.name} looks blank: ${JSON.stringify(o.stats)}`);
          await noMessages(o.page, `sky view of ${d.name}`);
          await shot(o.page, `direct_sky_${d.name}.png`);
          const other = d.wcs.frame === 'galactic' ? 'icrs' : 'galactic';
          await o.page.selectOption('#sky-frame', other);
          await o.page.waitForTimeout(150);
          const st = await untilStats(o.page, '#aladin', drawn, 10000);
          check(drawn(st), `sky view of ${d.name} in ${other} looks blank: ${JSON.stringify(st)}`);
          // Warm: the same link again (the server's and the browser's caches full).
          o.rec.responses.length = 0;
          await o.page.reload();
          await o.page.waitForSelector('#aladin canvas');
          await settle(o.rec, hipsTile, 600, 30000);
          const w = await tileTimes(o.page);
          times.push({ dataset: d.name, pass: 'warm', first_ms: w.first, all_ms: w.all, asked_ms: w.asked, tiles: w.tiles });
        } finally {
          await o.context.close();
        }
      });
      // Pixel view of every dataset, three at a time.
      const pixelDrawn = (st) => st.std > 10 && st.levels > 30;
      await inPool(list, 3, async (d) => {
        const { page, rec, context } = await newPage(browser, server.base, viewport);
        try {
          await page.goto(`${server.base}/#/pixels/${d.name}`);
          await until(30000, `a tile of ${d.name}`, () => tileOf(rec, new RegExp(`/iiif/3/${d.name}[~/]`)));
          await settle(rec, /\/iiif\/3\//, 500, 30000);
          const st = await untilStats(page, '#osd', pixelDrawn, 10000);
          check(pixelDrawn(st), `pixel view of ${d.name} looks blank: ${JSON.stringify(st)}`);
          await noMessages(page, `pixel view of ${d.name}`);
          await shot(page, `direct_pixels_${d.name}.png`);
        } finally {
          await context.close();
        }
      });
      times.sort((a, b) => (a.dataset + a.pass).localeCompare(b.dataset + b.pass));
      fs.mkdirSync(OUT, { recursive: true });
      fs.writeFileSync(path.join(OUT, 'tile_times.json'), JSON.stringify(times, null, 1));
      // From the page's start; in brackets from the first tile request (Aladin started).
      for (const t of times) {
        console.log(`e2e: tiles ${t.pass} ${t.dataset}: first ${t.first_ms} ms, all ${t.all_ms} ms ` +
          `(${t.first_ms - t.asked_ms}, ${t.all_ms - t.asked_ms} ms after the first request; ${t.tiles} tiles)`);
      }
    },
  },
  {
    name: 'one_message_per_failure_cleared_when_gone',
    async run({ browser, server }) {
      const { page, rec, context } = await newPage(browser, server.base);
      // A mistyped level: one message, and no tile is asked for.
      await page.goto(`${server.base}/#/pixels/horsehead?max=abc`);
      await until(10000, 'the message', async () => (await pageMessages(page)).length > 0);
      await page.waitForTimeout(1500);
      let m = await pageMessages(page);
      check(m.length === 1 && m[0].includes('max_cut') && m[0].includes('abc'), `messages ${JSON.stringify(m)}`);
      check(!rec.responses.some((r) => r.url.includes('/iiif/') && !r.url.endsWith('info.json')),
        'tiles were asked for with a bad cut level');
      check(await page.$eval('#px-max', (e) => e.classList.contains('invalid')), 'the Max field is not marked');
      // Fixed: the message goes and tiles come.
      await page.fill('#px-max', '99.5%');
      await page.press('#px-max', 'Enter');
      await page.locator('#osd').click({ position: { x: 5, y: 300 } }).catch(() => {});
      await until(15000, 'a horsehead tile', () => tileOf(rec, /\/iiif\/3\/horsehead\//));
      await until(5000, 'the message to go', async () => (await pageMessages(page)).length === 0);
      // Min above max: one message again, replaced, not added, on a second mistake.
      await page.fill('#px-min', '9000');
      await page.fill('#px-max', '100');
      await page.press('#px-max', 'Enter');
      await page.fill('#px-min', '9001');
      await page.press('#px-min', 'Enter');
      await page.waitForTimeout(300);
      m = await pageMessages(page);
      check(m.length === 1 && m[0].includes('must be below'), `min > max: messages ${JSON.stringify(m)}`);
      // Jobs: the form's message is replaced and goes once the job is accepted.
      await page.goto(`${server.base}/#/jobs`);
      await page.waitForSelector('#mosaic-inputs input[value="gc_msx_e"]');
      await page.click('#mosaic-submit');
      await page.click('#mosaic-submit');
      m = await pageMessages(page);
      check(m.length === 1 && m[0].includes('at least two'), `jobs: messages ${JSON.stringify(m)}`);
      if (await hasRoute(server, '/api/v1/jobs')) {
        await page.check('#mosaic-inputs input[value="gc_2mass_k"]');
        await page.check('#mosaic-inputs input[value="gc_msx_e"]');
        await page.fill('#mosaic-output', 'msg_mosaic');
        await page.click('#mosaic-submit');
        await until(15000, 'the job', async () => !(await page.$eval('#job-current', (e) => e.hidden)));
        m = await pageMessages(page);
        check(!m.some((t) => t.includes('at least two')), `the form's message stayed: ${JSON.stringify(m)}`);
      }
      await context.close();
    },
  },
  {
    name: 'failed_loads_are_retried_when_the_server_is_back',
    async run({ browser, server, shot }) {
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/l1448_13co`);
      await until(20000, 'a tile of plane 26', () => tileOf(rec, /\/iiif\/3\/l1448_13co~26\//));
      await server.restart(async () => {
        await page.selectOption('#px-cmap', 'inferno');
        await until(10000, 'a failure message', async () => (await pageMessages(page)).length > 0);
        const m = await pageMessages(page);
        check(m.length === 1, `while the server is away: messages ${JSON.stringify(m)}`);
      });
      await until(20000, 'an inferno tile after the restart', () =>
        rec.responses.some((r) => r.url.includes('l1448_13co~26/') && r.url.includes('cmap=inferno') && r.status === 200));
      await until(5000, 'the message to go', async () => (await pageMessages(page)).length === 0);
      await page.waitForTimeout(500);
      const st = await shotStats(page, '#osd');
      check(st.std > 10, `blank after the restart: ${JSON.stringify(st)}`);
      await shot(page, 'retry_after_restart.png');
      await context.close();
    },
  },
  {
    name: 'values_under_the_cursor_colorbar_histogram_fixed_levels',
    async run({ browser, server, shot }) {
      if (!(await hasRoute(server, '/api/v1/datasets/l1448_13co/values?x=0&y=0'))) {
        throw new Skip('GET /api/v1/datasets/{name}/values answers 404 on this server');
      }
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/l1448_13co?z=26`);
      await until(20000, 'plane 26', () => tileOf(rec, /\/iiif\/3\/l1448_13co~26\//));
      await page.waitForTimeout(300);
      const pt = await pagePointOf(page, 40, 60);
      await page.mouse.move(pt.x - 2, pt.y - 2);
      await page.mouse.move(pt.x, pt.y);
      const want = await (await fetch(`${server.base}/api/v1/datasets/l1448_13co/values?x=40&y=60&plane=26`)).json();
      const text = await until(5000, 'the value readout', async () => {
        const t = await page.textContent('#px-cursor');
        return t.includes('value') ? t : null;
      });
      check(text.includes('pixel x=40 y=60 z=26') && text.includes('(icrs) α') && text.includes('km/s'), `readout '${text}'`);
      const v = want.values[0][0];
      check(text.includes(`value ${Number(v).toPrecision(6)}`), `readout '${text}' lacks the value ${v}`);
      // The colorbar: the levels as values (the plane's 0.5 and 99.5 percentiles), ticks.
      const h = await (await fetch(`${server.base}/api/v1/datasets/l1448_13co/histogram?plane=26&bins=128`)).json();
      const cuts = await until(5000, 'cut values', () => page.evaluate(() => window.tessera.cuts && window.tessera.cuts.histogram && window.tessera.cuts));
      check(Math.abs(cuts.min - h.percentiles['0.5']) < 1e-6 && Math.abs(cuts.max - h.percentiles['99.5']) < 1e-6,
        `colorbar levels ${JSON.stringify(cuts)} != percentiles ${JSON.stringify(h.percentiles)}`);
      check(Number(await page.$eval('#px-colorbar', (c) => c.dataset.ticks)) >= 3, 'colorbar without ticks');
      const cb = await shotStats(page, '#px-colorbar');
      check(cb.levels > 40, `colorbar ${JSON.stringify(cb)}`);
      await page.selectOption('#px-stretch', 'log');
      await until(5000, 'log colorbar', () => page.evaluate(() => window.tessera.cuts.stretch === 'log'));
      // A click on the histogram sets the nearer level (here Min, at the left end).
      const hb = await (await page.$('#px-hist')).boundingBox();
      await page.mouse.click(hb.x + 2, hb.y + hb.height / 2);
      const min = await page.inputValue('#px-min');
      check(/^-?[0-9.e-]+$/.test(min) && parseFloat(min) < cuts.min, `Min after the histogram click: '${min}'`);
      await until(15000, 'a tile with that level', () => rec.responses.some((r) => r.url.includes(`min_cut=${encodeURIComponent(min)}`) && r.status === 200));
      await shot(page, 'pixels_colorbar_histogram.png');
      // Fixed levels: the same values for every plane.
      await page.fill('#px-min', '0.5%');
      await page.press('#px-min', 'Enter');
      await page.check('#px-fixcuts');
      await until(5000, 'numeric levels', async () => /^-?[0-9.]/.test(await page.inputValue('#px-max')) && !(await page.inputValue('#px-max')).endsWith('%'));
      const lo = await page.inputValue('#px-min'), hi = await page.inputValue('#px-max');
      check(Math.abs(parseFloat(lo) - h.percentiles['0.5']) < 1e-4, `fixed Min ${lo}`);
      await page.locator('#px-plane').fill('3');
      await until(15000, 'plane 3 with the fixed levels', () => rec.responses.some((r) => r.url.includes('l1448_13co~3/') &&
        r.url.includes(`min_cut=${encodeURIComponent(lo)}`) && r.url.includes(`max_cut=${encodeURIComponent(hi)}`) && r.status === 200));
      check((await page.evaluate(() => location.hash)).includes('fixed=1'), 'fixed levels not in the URL');
      await noMessages(page, 'pixel view');
      // The sky view: the pixel and value under the cursor, the display frame named.
      await page.goto(`${server.base}/#/sky/gc_msx_e?frame=galactic`);
      await page.waitForSelector('#aladin canvas');
      await settle(rec, hipsTile, 1000, 30000);
      const box = await (await page.$('#aladin')).boundingBox();
      await page.mouse.move(box.x + box.width / 2 - 3, box.y + box.height / 2);
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      const sk = await until(5000, 'the sky readout', async () => {
        const t = await page.textContent('#sky-cursor');
        return t.includes('value') ? t : null;
      });
      check(sk.includes('(galactic) l') && sk.includes('pixel x=') && sk.includes('W/m^2-sr'), `sky readout '${sk}'`);
      await page.selectOption('#sky-frame', 'icrs');
      await page.mouse.move(box.x + box.width / 2 + 30, box.y + box.height / 2 + 20, { steps: 3 });
      await page.mouse.move(box.x + box.width / 2 + 3, box.y + box.height / 2, { steps: 3 });
      const sk2 = await until(5000, 'the icrs readout', async () => {
        const t = await page.textContent('#sky-cursor');
        return t.includes('(icrs)') ? t : null;
      });
      check(!sk2.includes('fk5') && sk2.includes('α'), `icrs readout '${sk2}'`);
      await shot(page, 'sky_readout.png');
      await context.close();
    },
  },
  {
    name: 'links_reopen_the_whole_view',
    async run({ browser, server }) {
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/l1448_13co?z=20&cmap=magma&stretch=sqrt`);
      await until(20000, 'plane 20', () => tileOf(rec, /\/iiif\/3\/l1448_13co~20\//));
      await page.evaluate(() => {
        const osd = window.tessera.osd;
        const item = osd.world.getItemAt(0);
        osd.viewport.zoomTo(4.18, null, true);
        osd.viewport.panTo(item.imageToViewportCoordinates(30, 70), true);
        osd.raiseEvent('animation-finish');
      });
      const hash = await until(5000, 'zoom in the URL', async () => {
        const h = await page.evaluate(() => location.hash);
        return h.includes('zoom=4.18') ? h : null;
      });
      const two = await newPage(browser, server.base);
      await two.page.goto(`${server.base}/${hash}`);
      await until(20000, 'the reopened plane', () => tileOf(two.rec, /\/iiif\/3\/l1448_13co~20\/.*cmap=magma/));
      const v = await until(5000, 'the reopened view', () => two.page.evaluate(() => {
        const osd = window.tessera.osd;
        if (!osd.world.getItemCount()) return null;
        const c = osd.world.getItemAt(0).viewportToImageCoordinates(osd.viewport.getCenter(true));
        return { zoom: osd.viewport.getZoom(true), cx: c.x, cy: c.y };
      }));
      check(Math.abs(v.zoom - 4.18) < 0.01 && Math.abs(v.cx - 30) < 0.1 && Math.abs(v.cy - 70) < 0.1, `reopened ${JSON.stringify(v)} from ${hash}`);
      await two.context.close();
      // The sky view: centre, field, projection and frame.
      await page.goto(`${server.base}/#/sky/horsehead`);
      await page.waitForSelector('#aladin canvas');
      await settle(rec, hipsTile, 1000, 30000);
      await page.selectOption('#sky-frame', 'galactic');
      await page.evaluate(() => {
        const a = window.tessera.aladin;
        a.setProjection('AIT');
        a.gotoRaDec(85.31, -2.44);
        a.setFoV(0.4321);
      });
      const sh = await until(5000, 'the sky view in the URL', async () => {
        const h = await page.evaluate(() => location.hash);
        return h.includes('proj=AIT') && h.includes('fov=0.4321') && h.includes('ra=85.31') ? h : null;
      });
      check(sh.includes('frame=galactic') && sh.includes('dec=-2.44'), `sky hash ${sh}`);
      const three = await newPage(browser, server.base);
      await three.page.goto(`${server.base}/${sh}`);
      await three.page.waitForSelector('#aladin canvas');
      await settle(three.rec, hipsTile, 1000, 30000);
      const s = await three.page.evaluate(() => {
        const a = window.tessera.aladin;
        return { rd: a.getRaDec(), fov: a.getFov()[0], proj: a.getProjectionName(), frame: document.querySelector('#sky-frame').value };
      });
      check(Math.abs(s.rd[0] - 85.31) < 1e-4 && Math.abs(s.rd[1] + 2.44) < 1e-4 && Math.abs(s.fov - 0.4321) < 1e-3 &&
        s.proj === 'AIT' && s.frame === 'galactic', `reopened sky view ${JSON.stringify(s)} from ${sh}`);
      await three.context.close();
      await context.close();
    },
  },
  {
    name: 'spectrum_follows_the_plane_and_cuts_have_axes',
    async run({ browser, server, shot }) {
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/l1448_13co?z=26&x=40&y=60`);
      await until(20000, 'the plot', () => page.evaluate(() => window.tessera.plot && window.tessera.plot.data[0].length === 53));
      const marker = () => page.$eval('#px-plot .uplot', (e) => e.dataset.marker);
      await until(3000, 'the plane line at 26', async () => (await marker()) === '26');
      const ylab = await page.evaluate(() => window.tessera.plot.series[1].label);
      check(/^value \[/.test(ylab), `y axis '${ylab}'`);
      // Keys move the plane even after a colour map was chosen from its list.
      await page.selectOption('#px-cmap', 'inferno');
      await page.focus('#px-cmap');
      await page.keyboard.press('ArrowRight');
      await until(3000, 'plane 27', async () => (await page.inputValue('#px-plane')) === '27');
      check((await page.inputValue('#px-cmap')) === 'inferno', 'the arrow key changed the colour map');
      await until(3000, 'the plane line at 27', async () => (await marker()) === '27');
      // A click on the plot jumps to that channel.
      const target = await page.evaluate(() => {
        const u = window.tessera.plot;
        const r = u.over.getBoundingClientRect();
        return { x: r.left + u.valToPos(u.data[0][10], 'x'), y: r.top + r.height / 2, v: u.data[0][10] };
      });
      await page.mouse.move(target.x, target.y);
      await page.mouse.click(target.x, target.y);
      const z = await until(3000, 'a new plane', async () => {
        const v = await page.inputValue('#px-plane');
        return v !== '27' ? Number(v) : null;
      });
      const mk = await marker();
      check(String(z) === mk, `plane ${z}, line at ${mk}`);
      await until(15000, `a tile of plane ${z}`, () => tileOf(rec, new RegExp(`/iiif/3/l1448_13co~${z}/`)));
      await shot(page, 'spectrum_click.png');
      // The xz cut: ticked and labelled axes, the spectral axis in km/s.
      await page.selectOption('#px-axis', 'xz');
      await until(15000, 'an xz cut', () => rec.responses.some((r) => /\/slice\/xz\//.test(r.url) && r.status === 200));
      await page.waitForTimeout(500);
      const ax = await page.$eval('#px-axes', (c) => ({ ticks: Number(c.dataset.ticks), labels: c.dataset.labels }));
      check(ax.ticks >= 6 && ax.labels.includes('x [pixel]') && ax.labels.includes('km/s'), `xz axes ${JSON.stringify(ax)}`);
      await shot(page, 'pixels_xz_axes.png');
      // The xy view's plane line and picked value are gone from the cut's view.
      await until(3000, 'no plane line on the xz cut', async () => (await marker()) === '');
      const pick = await page.textContent('#px-pick');
      check(!/value at plane/.test(pick), `the xz cut still says '${pick}'`);
      await noMessages(page, 'spectrum');
      await context.close();
    },
  },
  {
    name: 'all_sky_opens_in_mollweide_and_outline_from_the_server',
    async run({ browser, server, shot }) {
      const o = await openSky(browser, server, '#/sky/allsky_rosat');
      const s = await o.page.evaluate(() => ({ proj: window.tessera.aladin.getProjectionName(), fov: window.tessera.aladin.getFov()[0] }));
      check(['MOL', 'AIT'].includes(s.proj) && s.fov >= 300, `all-sky view ${JSON.stringify(s)}`);
      check(o.stats.std > 15, `all-sky view blank ${JSON.stringify(o.stats)}`);
      await shot(o.page, 'sky_allsky_mollweide.png');
      await o.context.close();
      if (!(await hasRoute(server, '/api/v1/datasets/horsehead/footprint?frame=icrs'))) return;
      const { page, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/sky/horsehead`);
      await until(10000, "the server's outline", () => page.evaluate(() => window.tessera.footprintSource === 'server' && window.tessera.footprint));
      const fp = await page.evaluate(() => window.tessera.footprint);
      const want = await (await fetch(`${server.base}/api/v1/datasets/horsehead/footprint?frame=icrs`)).json();
      check(JSON.stringify(fp) === JSON.stringify(want.polygon), 'the outline is not the server\'s polygon');
      await context.close();
    },
  },
  {
    name: 'sky_view_of_a_cube_has_a_plane_selector',
    async run({ browser, server, shot }) {
      const props = await (await fetch(`${server.base}/hips/l1448_13co/properties`)).text();
      if (!/dataproduct_type\s*=\s*cube/.test(props)) throw new Skip('the HiPS of l1448_13co is not a HiPS cube on this server');
      const o = await openSky(browser, server, '#/sky/l1448_13co?plane=10');
      check(!(await o.page.$eval('#sky-plane-row', (e) => e.hidden)), 'no plane selector');
      check(o.rec.responses.some((r) => /\/hips\/l1448_13co\/Norder\d+\/Dir\d+\/Npix\d+_10\.png/.test(r.url) && r.status === 200), 'no tile of plane 10');
      check(o.stats.std > 15, `plane 10 looks blank ${JSON.stringify(o.stats)}`);
      await o.page.locator('#sky-plane').fill('30');
      await until(20000, 'a tile of plane 30', () => o.rec.responses.some((r) => /Npix\d+_30\.png/.test(r.url) && r.status === 200));
      await until(5000, 'plane 30 in the URL', async () => (await o.page.evaluate(() => location.hash)).includes('plane=30'));
      await shot(o.page, 'sky_cube_plane30.png');
      // Fixed levels: plane 26's (the emission) for every plane; the noise of plane 52,
      // as bright as the emission with its own levels, is then dark.
      await o.page.locator('#sky-plane').fill('26');
      await until(20000, 'a tile of plane 26', () => o.rec.responses.some((r) => /Npix\d+_26\.png$/.test(r.url) && r.status === 200));
      await o.page.check('#sky-fixcuts');
      await until(20000, 'a tile with fixed levels', () => o.rec.responses.some((r) => /Npix\d+_26\.png\?min_cut=[-0-9.e]+&max_cut=[-0-9.e]+$/.test(r.url) && r.status === 200));
      const h = await (await fetch(`${server.base}/api/v1/datasets/l1448_13co/histogram?plane=26&bins=128`)).json();
      const hash = await until(5000, 'the levels in the URL', async () => {
        const x = await o.page.evaluate(() => location.hash);
        return /[?&]min=/.test(x) && /[?&]max=/.test(x) ? x : null;
      });
      const lo = Number(new URLSearchParams(hash.split('?')[1]).get('min'));
      check(Math.abs(lo - h.percentiles['0.5']) <= 1e-5 * Math.max(1, Math.abs(lo)), `fixed min ${lo}, plane 26's 0.5% is ${h.percentiles['0.5']}`);
      await o.page.locator('#sky-plane').fill('52');
      await until(20000, 'plane 52 with fixed levels', () => o.rec.responses.some((r) => /Npix\d+_52\.png\?min_cut=/.test(r.url) && r.status === 200));
      await o.context.close();
      const own = await openSky(browser, server, '#/sky/l1448_13co?plane=52');
      const fixed = await openSky(browser, server, `#/sky/l1448_13co${hash.slice(hash.indexOf('?')).replace(/plane=\d+/, 'plane=52')}`);
      check(await fixed.page.isChecked('#sky-fixcuts'), 'the link did not keep the fixed levels');
      check(fixed.stats.mean < own.stats.mean - 5, `plane 52: own levels ${JSON.stringify(own.stats)}, fixed ${JSON.stringify(fixed.stats)}`);
      await own.context.close();
      await fixed.context.close();
    },
  },
  {
    name: 'downloads_png_export_and_a_second_layer',
    timeout: 200000,
    async run({ browser, server, shot }) {
      const { page, rec, context } = await newPage(browser, server.base, { width: 960, height: 640 });
      const pngStats = async (dl) => {
        const buf = fs.readFileSync(await dl.path());
        check(buf.slice(1, 4).toString() === 'PNG', `${dl.suggestedFilename()} is not a PNG`);
        return imageStats(page, buf);
      };
      await page.goto(`${server.base}/#/pixels/horsehead`);
      await until(20000, 'a horsehead tile', () => tileOf(rec, /\/iiif\/3\/horsehead\//));
      await settle(rec, /\/iiif\/3\//, 800, 20000);
      const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#px-png')]);
      const st = await pngStats(dl);
      check(st.std > 10 && st.w > 300, `the exported picture ${JSON.stringify(st)}`);
      if (await hasRoute(server, '/api/v1/datasets/horsehead/fits')) {
        const href = await until(5000, 'the FITS link', () => page.$eval('#px-fits', (a) => (a.hidden ? null : a.getAttribute('href'))));
        const r = await fetch(`${server.base}${href}`);
        const head = Buffer.from(await r.arrayBuffer()).slice(0, 30).toString();
        check(r.status === 200 && head.startsWith('SIMPLE  ='), `FITS download ${r.status} '${head}'`);
        await page.goto(`${server.base}/#/datasets`);
        await page.waitForSelector('#dataset-list .card');
        const n = await until(5000, 'FITS links', async () => {
          const k = await page.$$eval('#dataset-list a.fits-link:not([hidden])', (as) => as.length);
          return k > 0 ? k : null;
        });
        check(n === (await page.$$('#dataset-list .card')).length, `${n} FITS links`);
      }
      // The sky view: a second dataset over the first, its opacity in the URL; PNG export.
      await page.goto(`${server.base}/#/sky/gc_2mass_k`);
      await page.waitForSelector('#aladin canvas');
      await settle(rec, hipsTile, 1000, 30000);
      await page.uncheck('#sky-footprint');
      const before = await shotStats(page, '#aladin');
      await page.selectOption('#sky-layer', 'gc_msx_e');
      await page.locator('#sky-opacity').fill('0.8');
      await until(20000, 'gc_msx_e tiles', () => rec.responses.some((r) => /\/hips\/gc_msx_e\/Norder/.test(r.url) && r.status === 200));
      await settle(rec, hipsTile, 1000, 30000);
      await page.waitForTimeout(400);
      const after = await shotStats(page, '#aladin');
      check(Math.abs(after.mean - before.mean) > 1 || Math.abs(after.std - before.std) > 1,
        `the layer changes nothing: ${JSON.stringify(before)} ${JSON.stringify(after)}`);
      const h = await until(5000, 'the layer in the URL', async () => {
        const x = await page.evaluate(() => location.hash);
        return x.includes('layer=gc_msx_e') && x.includes('opacity=0.8') ? x : null;
      });
      await page.click('#sky-blink');
      check((await page.textContent('#sky-blink')) === 'stop', 'blink did not start');
      await page.click('#sky-blink');
      await shot(page, 'sky_layer.png');
      const [sdl] = await Promise.all([page.waitForEvent('download'), page.click('#sky-png')]);
      const ss = await pngStats(sdl);
      check(ss.std > 10, `the exported sky picture ${JSON.stringify(ss)}`);
      await noMessages(page, 'layer');
      void h;
      await context.close();
      // A link with a layer, opened in a fresh page, shows it at its opacity (Aladin put
      // it back to 1 as the layer's survey loaded, until the slider was moved): the
      // picture at opacity=0.3 lies between those at 0 and 1.
      const means = {};
      for (const o of ['0', '0.3', '1']) {
        const f = await newPage(browser, server.base);
        await f.page.goto(`${server.base}/#/sky/gc_2mass_k?layer=gc_msx_e&opacity=${o}`);
        await f.page.waitForSelector('#aladin canvas');
        await until(20000, 'gc_msx_e tiles', () => f.rec.responses.some((r) => /\/hips\/gc_msx_e\/Norder/.test(r.url) && r.status === 200));
        await settle(f.rec, hipsTile, 1000, 30000);
        await f.page.uncheck('#sky-footprint');
        await f.page.waitForTimeout(600);
        check((await f.page.inputValue('#sky-opacity')) === o, `the slider does not say ${o}`);
        means[o] = (await shotStats(f.page, '#aladin')).mean;
        await f.context.close();
      }
      const lo = Math.min(means['0'], means['1']), hi = Math.max(means['0'], means['1']);
      check(hi - lo > 2 && means['0.3'] > lo + 0.1 * (hi - lo) && means['0.3'] < hi - 0.1 * (hi - lo),
        `opacity from the link: mean ${JSON.stringify(means)}`);
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
      if (await hasRoute(server, '/api/v1/datasets/l1448_mean/fits')) {
        const href = await until(5000, "the product's FITS link", () => page.$eval('#job-links a.fits-link', (a) => (a.hidden ? null : a.getAttribute('href'))));
        check(href === '/api/v1/datasets/l1448_mean/fits', `product FITS link ${href}`);
        const r = await fetch(`${server.base}${href}`);
        check(r.status === 200 && Buffer.from(await r.arrayBuffer()).slice(0, 9).toString() === 'SIMPLE  =', `product FITS ${r.status}`);
      }
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
    name: 'cursor_readout_uses_the_full_wcs',
    async run({ browser, server }) {
      const py = '/usr/bin/python3';
      try {
        execFileSync(py, ['-c', 'import astropy.wcs'], { stdio: 'ignore', timeout: 30000 });
      } catch (_) {
        throw new Skip('no astropy in /usr/bin/python3');
      }
      if (!(await hasRoute(server, '/api/v1/datasets/horsehead/transform?x=0&y=0'))) {
        throw new Skip('GET /api/v1/datasets/{name}/transform answers 404 on this server');
      }
      // astropy's all_pix2world (the DSS plate solution's polynomial included), in ICRS,
      // and the reverse for the sky view's positions.
      const script = [
        'import sys, json, warnings', 'warnings.simplefilter("ignore")',
        'from astropy.io import fits', 'from astropy.wcs import WCS',
        'from astropy.coordinates import SkyCoord', 'import astropy.units as u',
        'w = WCS(fits.getheader(sys.argv[1]))', 'a = json.loads(sys.argv[2])',
        'fr = w.wcs.radesys.lower() or "icrs"', 'eq = "J%s" % w.wcs.equinox',
        'if a["pix"]:',
        '    x, y = zip(*a["pix"]); lon, lat = w.all_pix2world(x, y, 0)',
        '    c = SkyCoord(lon * u.deg, lat * u.deg, frame=fr, equinox=eq).icrs',
        '    out = [[float(p), float(q)] for p, q in zip(c.ra.deg, c.dec.deg)]',
        'else:',
        '    ra, dec = zip(*a["sky"]); c = SkyCoord(ra * u.deg, dec * u.deg, frame="icrs").transform_to(fr if fr == "icrs" else SkyCoord(0, 0, unit="deg", frame=fr, equinox=eq).frame)',
        '    x, y = w.all_world2pix(c.spherical.lon.deg, c.spherical.lat.deg, 0)',
        '    out = [[float(p), float(q)] for p, q in zip(x, y)]',
        'print(json.dumps(out))',
      ].join('\n');
      const file = path.join(TOP, 'data', 'demo', 'HorseHead.fits');
      const astropy = (a) => JSON.parse(execFileSync(py, ['-c', script, file, JSON.stringify(a)], { timeout: 60000 }).toString());
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/horsehead`);
      await until(20000, 'a horsehead tile', () => tileOf(rec, /\/iiif\/3\/horsehead\//));
      await page.waitForTimeout(300);
      const pts = [[300, 600], [600, 300], [445, 446]];
      const got = [];
      for (const [x, y] of pts) {
        const pt = await pagePointOf(page, x, y);
        await page.mouse.move(pt.x - 2, pt.y - 2);
        await page.mouse.move(pt.x, pt.y);
        // The pixel the pointer landed on (within one of the one aimed at, rounding at the
        // zoom), once its world coordinates have come from the server.
        got.push(await until(5000, `the readout of (${x}, ${y})`, () => page.evaluate(([wx, wy]) => {
          const c = window.tessera.cursor;
          return c && Math.abs(c.x - wx) <= 1 && Math.abs(c.y - wy) <= 1 && c.world ? { x: c.x, y: c.y, ...c.world } : null;
        }, [x, y])));
      }
      const ref = astropy({ pix: got.map((c) => [c.x, c.y]) });
      // Tolerance 0.01 arcsec (the server agrees with astropy to ~1e-3 arcsec; the linear
      // WCS the readout used before is ~4 arcsec off here).
      got.forEach((w, i) => {
        check(w.frame === 'icrs', `frame ${w.frame}`);
        const dl = Math.abs(((w.lon - ref[i][0] + 540) % 360) - 180) * Math.cos(ref[i][1] * Math.PI / 180);
        const db = Math.abs(w.lat - ref[i][1]);
        check(Math.hypot(dl, db) * 3600 < 0.01, `pixel (${w.x}, ${w.y}): readout ${JSON.stringify(w)}, astropy ${ref[i]}`);
      });
      const text = await page.textContent('#px-cursor');
      check(text.includes('(icrs) α'), `pixel readout '${text}'`);
      // The sky view: the pixel under the cursor from Aladin's ICRS position through the
      // full WCS, as astropy's all_world2pix gives it (to 1e-3 pixel).
      await page.goto(`${server.base}/#/sky/horsehead`);
      await page.waitForSelector('#aladin canvas');
      await settle(rec, hipsTile, 500, 30000);
      const box = await (await page.$('#aladin')).boundingBox();
      const sky = [];
      for (const [fx, fy] of [[0.5, 0.5], [0.4, 0.6]]) {
        await page.mouse.move(box.x + box.width * fx - 3, box.y + box.height * fy);
        await page.mouse.move(box.x + box.width * fx, box.y + box.height * fy);
        sky.push(await until(5000, 'the sky readout', () => page.evaluate(() => {
          const c = window.tessera.cursor;
          return c && c.px ? { ra: c.ra, dec: c.dec, px: c.px } : null;
        })));
      }
      const back = astropy({ pix: null, sky: sky.map((c) => [c.ra, c.dec]) });
      sky.forEach((c, i) => check(Math.abs(c.px[0] - back[i][0]) < 1e-3 && Math.abs(c.px[1] - back[i][1]) < 1e-3,
        `sky (${c.ra}, ${c.dec}): pixel ${c.px}, astropy ${back[i]}`));
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
      // One python for every file (astropy's import is most of its time).
      const script = [
        'import sys, json, warnings', 'warnings.simplefilter("ignore")',
        'from astropy.io import fits', 'from astropy.wcs import WCS',
        'pts = json.loads(sys.argv[1])', 'res = []',
        'for f in sys.argv[2:]:',
        '    w = WCS(fits.getheader(f)).celestial',
        '    out = [[float(v) for v in w.pixel_to_world_values(x, y)] for x, y in pts]',
        '    res.append([[v if v == v else None for v in p] for p in out])',
        'print(json.dumps(res))',
      ].join('\n');
      let compared = 0;
      const sky = list.filter((x) => x.celestial);
      const files = sky.map((d) => path.join(TOP, 'data', 'demo', demo.datasets.find((x) => x.name === d.name).path));
      const refs = JSON.parse(execFileSync(py, ['-c', script, JSON.stringify(pts), ...files], { timeout: 60000 }).toString());
      for (const [k, d] of sky.entries()) {
        const f = makePix2Sky(d.wcs);
        check(f, `${d.name}: projection ${d.wcs.ctype[0]} not supported by viewer/wcs.js`);
        const ref = refs[k];
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
