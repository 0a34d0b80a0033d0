// A collection in the viewer: six small TAN images written by this test (64x64 float32,
// different centres, rotations and pixel scales, in nested folders) served as the
// collection "night".  The collection is listed beside the datasets; its sky view draws
// one footprint polygon per member that SIA 2.0 finds in the view, drawn again when the
// view moves; a click lists the members under the cursor with links to their FITS (200)
// and DataLink.
import fs from 'node:fs';
import path from 'node:path';
import { check, until, newPage, pageMessages } from './harness.mjs';

const N = 64;
// [obs_id, ra, dec, rotation (deg), pixel scale (arcsec), filter, MJD-OBS]: a..d overlap
// around (150, 2); e is 0.15 deg east of them, f 0.36 deg away to the north-east.
const MEMBERS = [
  ['n1/chip1/a.fits', 150.0, 2.0, 0, 2.0, 'g', 60100.25],
  ['n1/chip2/b.fits', 150.012, 2.006, 20, 2.2, 'r', 60100.5],
  ['n1/chip1/c.fits', 149.99, 1.992, 45, 1.8, 'g', 60101.25],
  ['n2/d.fits', 150.005, 1.985, 70, 2.5, 'i', 60102.75],
  ['n2/e.fits', 150.15, 2.0, 10, 2.0, 'r', 60103.0],
  ['n2/far/f.fits', 150.3, 2.2, 30, 2.0, 'z', 60104.5],
];

/** One 80-character header card. */
function card(key, value) {
  let v;
  if (typeof value === 'string') v = `'${value.padEnd(8)}'`.padEnd(20);
  else if (typeof value === 'boolean') v = (value ? 'T' : 'F').padStart(20);
  else if (Number.isInteger(value)) v = String(value).padStart(20);
  else v = value.toExponential(14).toUpperCase().padStart(20);
  return `${key.padEnd(8)}= ${v}`.padEnd(80);
}

/** A FITS file of one 64x64 float32 TAN image centred on (ra, dec). */
function fitsImage(ra, dec, rotDeg, scaleArcsec, filter, mjd) {
  const d = scaleArcsec / 3600, c = Math.cos((rotDeg * Math.PI) / 180), s = Math.sin((rotDeg * Math.PI) / 180);
  const cards = [
    card('SIMPLE', true), card('BITPIX', -32), card('NAXIS', 2), card('NAXIS1', N), card('NAXIS2', N),
    card('CTYPE1', 'RA---TAN'), card('CTYPE2', 'DEC--TAN'), card('RADESYS', 'ICRS'),
    card('CRVAL1', ra), card('CRVAL2', dec), card('CRPIX1', (N + 1) / 2), card('CRPIX2', (N + 1) / 2),
    card('CD1_1', -d * c), card('CD1_2', d * s), card('CD2_1', d * s), card('CD2_2', d * c),
    card('MJD-OBS', mjd), card('EXPTIME', 60.5), card('FILTER', filter), 'END'.padEnd(80),
  ];
  let head = cards.join('');
  head = head.padEnd(Math.ceil(head.length / 2880) * 2880);
  const data = Buffer.alloc(Math.ceil((N * N * 4) / 2880) * 2880);
  for (let i = 0; i < N * N; i++) data.writeFloatBE(i % N + Math.floor(i / N), 4 * i);
  return Buffer.concat([Buffer.from(head, 'ascii'), data]);
}

/** Writes the collection's images under dir; the server's extra configuration. */
function prepare(dir) {
  const root = path.join(dir, 'survey');
  for (const [id, ra, dec, rot, scale, filter, mjd] of MEMBERS) {
    const f = path.join(root, id);
    fs.mkdirSync(path.dirname(f), { recursive: true });
    fs.writeFileSync(f, fitsImage(ra, dec, rot, scale, filter, mjd));
  }
  return { data_roots: [root], datasets: [{ name: 'night', kind: 'collection', images: path.join(root, '**', '*.fits') }] };
}

/** The obs_id of the SIA 2.0 answer to a POS of collection "night" (at most 1000). */
async function siaIds(server, pos) {
  const q = new URLSearchParams({ POS: pos, COLLECTION: 'night', MAXREC: '1000' });
  const r = await fetch(`${server.base}/vo/sia/query?${q}`);
  check(r.status === 200, `SIA ${pos}: ${r.status}`);
  const text = await r.text();
  const fields = [...text.matchAll(/<FIELD\b[^>]*\bname="([^"]+)"/g)].map((m) => m[1]);
  const k = fields.indexOf('obs_id');
  check(k >= 0, 'the SIA answer has no obs_id field');
  return [...text.matchAll(/<TR>([\s\S]*?)<\/TR>/g)].map((m) =>
    [...m[1].matchAll(/<TD>([^<]*)<\/TD>|<TD\/>/g)].map((t) => t[1] || '')[k]).sort();
}

const sorted = (a) => [...a].sort();
const same = (a, b) => JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));

/** Waits until the footprints drawn answer the view's circle at (ra, dec) (after a move);
 * checks them against the server's SIA answer; returns the drawn obs_id. */
async function footprintsAt(page, server, ra, dec, what) {
  const fp = await until(20000, `the footprints ${what}`, () => page.evaluate(([ra0, dec0]) => {
    const f = window.tessera.collection && window.tessera.collection.footprints;
    if (!f) return null;
    const [, r, d] = f.pos.split(' ').map(Number);
    return Math.abs(r - ra0) < 1e-4 && Math.abs(d - dec0) < 1e-4 ? f : null;
  }, [ra, dec]), 100);
  const want = await siaIds(server, fp.pos);
  check(same(fp.ids, want), `${what}: drew ${JSON.stringify(sorted(fp.ids))}, SIA answers ${JSON.stringify(want)} for ${fp.pos}`);
  check(fp.drawn === want.length && !fp.overflow, `${what}: ${fp.drawn} polygons drawn for ${want.length} members`);
  return fp.ids;
}

/** Clicks the sky view at (ra, dec); returns the obs_id listed (after the list changed). */
async function clickAt(page, ra, dec) {
  const before = await page.evaluate(() => JSON.stringify(window.tessera.collection.under));
  const xy = await page.evaluate(([a, d]) => window.tessera.aladin.world2pix(a, d), [ra, dec]);
  check(xy && Number.isFinite(xy[0]), `(${ra}, ${dec}) is not in the view`);
  const box = await (await page.$('#aladin')).boundingBox();
  await page.mouse.click(box.x + xy[0], box.y + xy[1]);
  return until(15000, 'the list of the images under the click', () => page.evaluate((b) => {
    const u = window.tessera.collection.under;
    return u && JSON.stringify(u) !== b ? u : null;
  }, before), 100);
}

/** No message on the page, no page error, no request off the server or failed (but
 * /hips/night/, which answers 404 until the server makes a collection's HiPS, and those
 * that `allow` allows). */
async function noTrouble(page, rec, allow = () => false) {
  const msgs = await pageMessages(page);
  check(msgs.length === 0, `the page shows messages: ${JSON.stringify(msgs)}`);
  check(rec.external.length === 0, `requests off the server: ${rec.external.slice(0, 3)}`);
  check(rec.pageErrors.length === 0, `page errors: ${rec.pageErrors.slice(0, 3)}`);
  const bad = rec.responses.filter((r) => r.status >= 400 && !r.url.includes('/hips/night/') && !allow(r));
  check(bad.length === 0, `failed requests: ${JSON.stringify(bad.slice(0, 3))}`);
}

export const tests = [
  {
    name: 'collection_sky',
    timeout: 150000,
    prepare,
    async run({ browser, server, shot }) {
      const info = await (await fetch(`${server.base}/api/v1/collections/night`)).json();
      check(info.members === MEMBERS.length, `the collection has ${info.members} members, not ${MEMBERS.length}`);
      check(info.images.every((m) => Array.isArray(m.footprint) && m.footprint.length === 4),
        'the collection JSON lacks the members\' footprints');
      // a is unrotated, 64 pixels of 2": its corners 32 pixels (64") from its centre on each axis.
      const fa = info.images.find((m) => m.obs_id === 'n1/chip1/a.fits').footprint;
      const h = 64 / 3600, cosd = Math.cos((2 * Math.PI) / 180);
      for (const [sx, sy] of [[1, 1], [1, -1], [-1, 1], [-1, -1]]) {
        check(fa.some(([r, d]) => Math.abs((r - 150) * cosd - sx * h) < 1e-6 && Math.abs(d - 2 - sy * h) < 1e-6),
          `a's footprint ${JSON.stringify(fa)} lacks the corner (${sx}, ${sy})`);
      }
      // The list gives the circle of the footprints: the mean direction of the members'
      // centres, out to the farthest corner.
      const entry = (await (await fetch(`${server.base}/api/v1/collections`)).json()).find((c) => c.name === 'night');
      const vec = ([r, d]) => [r, d].map((x) => (x * Math.PI) / 180).reduce((ra, de) =>
        [Math.cos(de) * Math.cos(ra), Math.cos(de) * Math.sin(ra), Math.sin(de)]);
      const sum = info.images.map((m) => vec([m.ra, m.dec])).reduce((a, v) => a.map((x, i) => x + v[i]));
      const len = Math.hypot(...sum);
      const want = { ra: (Math.atan2(sum[1], sum[0]) * 180) / Math.PI, dec: (Math.asin(sum[2] / len) * 180) / Math.PI };
      want.radius = Math.max(...info.images.flatMap((m) => m.footprint.map((p) =>
        (Math.acos(Math.min(1, vec(p).reduce((a, x, i) => a + (x * sum[i]) / len, 0))) * 180) / Math.PI)));
      check(entry.members === MEMBERS.length && ['ra', 'dec', 'radius'].every((k) => Math.abs(entry[k] - want[k]) < 1e-9),
        `the collection's extent is ${JSON.stringify(entry)}, not ${JSON.stringify(want)}`);
      check(want.radius > 0.3 && want.radius < 0.35, `the members reach ${want.radius} deg from their centre`);
      const hipsStatus = (await fetch(`${server.base}/hips/night/properties`)).status;
      const { page, rec, context } = await newPage(browser, server.base);
      try {
        // Listed beside the datasets, with its number of images.
        await page.goto(`${server.base}/#/datasets`);
        const cardSel = '#collection-list .card[data-name="night"]';
        await page.waitForSelector(cardSel);
        const text = await page.textContent(cardSel);
        check(text.includes(`${MEMBERS.length} images`), `the collection's card says ${JSON.stringify(text)}`);
        await page.click(`${cardSel} a`);
        await until(30000, 'the collection sky view', () => page.evaluate(() => window.tessera.view === 'collection' &&
          window.tessera.collection && window.tessera.collection.footprints), 100);
        check(/#\/collection\/night\b/.test(page.url()), `the URL is ${page.url()}`);
        const col = await page.evaluate(() => window.tessera.collection);
        check(col.hips === (hipsStatus === 200), `hips ${col.hips} while /hips/night/properties answers ${hipsStatus}`);

        // Opened on the whole collection: every member's footprint is drawn.
        const [ra0, dec0] = await page.evaluate(() => window.tessera.aladin.getRaDec());
        const all = await footprintsAt(page, server, ra0, dec0, 'of the whole collection');
        check(same(all, MEMBERS.map((m) => m[0])), `the first view draws ${JSON.stringify(sorted(all))}`);
        await shot(page, 'collection_sky.png');

        // Zoomed on a..d: e and f leave the view (drawn again after the move).
        await page.evaluate(() => { window.tessera.aladin.gotoRaDec(150.0, 2.0); window.tessera.aladin.setFoV(0.1); });
        const near = await footprintsAt(page, server, 150.0, 2.0, 'around (150, 2)');
        check(same(near, ['n1/chip1/a.fits', 'n1/chip2/b.fits', 'n1/chip1/c.fits', 'n2/d.fits']),
          `around (150, 2) the view draws ${JSON.stringify(sorted(near))}`);
        await until(5000, 'the URL to follow the view', () => /[?&]fov=0\.1\b/.test(page.url()), 100);

        // A click at a's centre lists a (and its neighbours under the cursor), never e or f;
        // exactly the SIA answer of the click's circle.
        const under = await clickAt(page, 150.0, 2.0);
        check(under.ids.includes('n1/chip1/a.fits') && !under.ids.includes('n2/e.fits') && !under.ids.includes('n2/far/f.fits'),
          `a click at (150, 2) lists ${JSON.stringify(under.ids)}`);
        check(same(under.ids, await siaIds(server, under.pos)), `the list ${JSON.stringify(under.ids)} is not the SIA answer of ${under.pos}`);
        const rows = await page.$$eval('#sky-members-table tbody tr', (trs) => trs.map((tr) => ({
          id: tr.dataset.obsId, cells: [...tr.children].map((td) => td.textContent),
          fits: tr.querySelector('a.member-fits').href, datalink: tr.querySelector('a.member-datalink').href })));
        check(same(rows.map((r) => r.id), under.ids), `the table lists ${JSON.stringify(rows.map((r) => r.id))}`);
        const a = rows.find((r) => r.id === 'n1/chip1/a.fits');
        check(a.cells[1] === '2023-06-05 06:00:00' && a.cells[2] === 'g', `a's row: ${JSON.stringify(a.cells)}`);
        const fr = await fetch(a.fits);
        const body = Buffer.from(await fr.arrayBuffer());
        // The file this test wrote: one header block and the data's blocks.
        check(fr.status === 200 && body.subarray(0, 9).toString('ascii') === 'SIMPLE  =' &&
          body.length === 2880 + Math.ceil((N * N * 4) / 2880) * 2880,
          `a's FITS link ${a.fits} answers ${fr.status} with ${body.length} bytes`);
        check(fr.headers.get('content-type') === 'application/fits', `a's FITS is ${fr.headers.get('content-type')}`);
        const dl = await fetch(a.datalink);
        const dlText = await dl.text();
        check(dl.status === 200 && dlText.includes('/api/v1/collections/night/fits/n1/chip1/a.fits'),
          `a's DataLink ${a.datalink} answers ${dl.status}`);

        // The view moved to f: only f is drawn, and a click on it lists f alone.
        await page.evaluate(() => window.tessera.aladin.gotoRaDec(150.3, 2.2));
        const far = await footprintsAt(page, server, 150.3, 2.2, 'around f');
        check(same(far, ['n2/far/f.fits']), `around f the view draws ${JSON.stringify(far)}`);
        const underF = await clickAt(page, 150.3, 2.2);
        check(same(underF.ids, ['n2/far/f.fits']), `a click at f's centre lists ${JSON.stringify(underF.ids)}`);
        await shot(page, 'collection_click.png');
        await noTrouble(page, rec);
      } finally {
        await context.close();
      }
    },
  },
  {
    name: 'collection_from_a_dataset_sky',
    timeout: 120000,
    prepare,
    async run({ browser, server }) {
      const { page, rec, context } = await newPage(browser, server.base);
      try {
        // From a dataset's sky to the collection through the view's list: the collection's
        // HiPS, or the server's all-sky map, never the dataset's tiles far from it.
        await page.goto(`${server.base}/#/sky/horsehead`);
        await until(30000, 'the sky view of horsehead', () => page.evaluate(() =>
          window.tessera.view === 'sky' && !window.tessera.collection && !!window.tessera.footprint), 100);
        check(await page.$('#sky-dataset option[value="collection:night"]'), 'the sky view\'s list lacks the collection');
        // Aladin Lite asks for horsehead's first tiles before it has the survey's coverage
        // (some answer 404, as viewer.spec.mjs allows); once they are all in, the switch
        // must ask for none.
        let last = -1, since = Date.now();
        await until(30000, "horsehead's tiles to settle", () => {
          const n = rec.responses.filter((r) => r.url.includes('/hips/horsehead/')).length;
          if (n !== last) { last = n; since = Date.now(); }
          return n > 0 && Date.now() - since > 1500;
        }, 100);
        let switched = false;
        const later = [];
        page.on('request', (r) => { if (switched && r.url().includes('/hips/horsehead/')) later.push(r.url()); });
        switched = true;
        await page.selectOption('#sky-dataset', 'collection:night');
        await until(30000, 'the collection from the list', () => page.evaluate(() =>
          window.tessera.view === 'collection' && window.tessera.collection && window.tessera.collection.footprints), 100);
        const back = await page.evaluate(() => window.tessera.collection);
        check(back.hips || back.background === 'allsky_rosat', `from horsehead the collection shows ${back.background}`);
        check(back.footprints.ids.length === MEMBERS.length && back.under === null,
          `from horsehead: ${back.footprints.ids.length} footprints, list ${JSON.stringify(back.under)}`);
        check(await page.$eval('#sky-members-table', (t) => t.hidden), 'a list of images is shown before any click');
        const under = await clickAt(page, 150.3, 2.2);
        check(same(under.ids, ['n2/far/f.fits']), `a click at f's centre lists ${JSON.stringify(under.ids)}`);
        check(later.length === 0, `horsehead's tiles asked for over the collection: ${later.slice(0, 3)}`);
        await noTrouble(page, rec, (r) => r.status === 404 && /\/hips\/horsehead\/Norder\d+\//.test(r.url));
      } finally {
        await context.close();
      }
    },
  },
  {
    // Until the server makes a collection's HiPS, the page's requests for /hips/night/ are
    // answered with the demo's all-sky map: the view must then open on /hips/night/ itself.
    name: 'collection_sky_on_its_hips',
    timeout: 120000,
    prepare,
    async run({ browser, server }) {
      const { page, rec, context } = await newPage(browser, server.base);
      try {
        const native = (await fetch(`${server.base}/hips/night/properties`)).status === 200;
        if (!native) {
          await page.route(`${server.base}/hips/night/**`, async (route) => {
            const u = route.request().url().replace('/hips/night/', '/hips/allsky_rosat/');
            const r = await fetch(u);
            await route.fulfill({ status: r.status, headers: { 'Content-Type': r.headers.get('content-type') || 'application/octet-stream' },
              body: Buffer.from(await r.arrayBuffer()) });
          });
        }
        await page.goto(`${server.base}/#/collection/night`);
        await until(30000, 'the collection sky view', () => page.evaluate(() =>
          window.tessera.collection && window.tessera.collection.footprints), 100);
        const col = await page.evaluate(() => window.tessera.collection);
        check(col.hips === true && col.background === null, `hips ${col.hips}, background ${col.background}`);
        const [ra0, dec0] = await page.evaluate(() => window.tessera.aladin.getRaDec());
        const all = await footprintsAt(page, server, ra0, dec0, 'over the collection\'s HiPS');
        check(all.length === MEMBERS.length, `${all.length} footprints over the collection's HiPS`);
        const tile = /\/hips\/night\/Norder\d+\/Dir\d+\/Npix\d+\.png$/;
        await until(30000, 'tiles of /hips/night/', () => rec.responses.some((r) => tile.test(r.url) && r.status === 200), 100);
        check(!rec.responses.some((r) => /\/hips\/(?!night\/)[^/]+\/Norder/.test(r.url)),
          'tiles of another survey were asked for');
        const info = await page.textContent('#sky-info');
        check(info.includes('HiPS /hips/night/'), `the status line says ${JSON.stringify(info)}`);
      } finally {
        await context.close();
      }
    },
  },
];
