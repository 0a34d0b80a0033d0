// Browser test of an image of the Sun in the pixel view: the cursor readout in the
// image's own frame (helioprojective, arcseconds) and the Stonyhurst position on the disk,
// against sunpy 4.1 (Debian's python3-sunpy) on the real AIA file of tests/data/solar.
import { execFileSync } from 'node:child_process';
import path from 'node:path';

import { TOP, Skip, check, newPage, pagePointOf, until } from './harness.mjs';

const SOLAR = path.join(TOP, 'tests', 'data', 'solar');
const AIA = path.join(SOLAR, 'aia_171_level1.fits');

/** sunpy's helioprojective (arcsec) and Stonyhurst (degrees, NaN off the disk) positions
 * of 0-based pixels of the AIA file as it is: sunpy's AIAMap, and Tessera for an AIA
 * header, take the observer from HAEX/Y/Z_OBS. */
function sunpyPositions(pix) {
  const script = [
    'import sys, json, warnings', 'warnings.simplefilter("ignore")',
    'import astropy.units as u', 'from astropy.io import fits', 'import sunpy.map',
    'from sunpy.coordinates import frames',
    'with fits.open(sys.argv[1]) as f:',
    '    d, h = f[0].data, f[0].header.copy()',
    'm = sunpy.map.Map(d, h)', 'x, y = zip(*json.loads(sys.argv[2]))',
    'c = m.pixel_to_world(x * u.pix, y * u.pix)',
    'g = c.transform_to(frames.HeliographicStonyhurst(obstime=c.obstime))',
    'out = [[float(a), float(b), float(p), float(q)] for a, b, p, q in zip(c.Tx.to_value(u.arcsec), c.Ty.to_value(u.arcsec), g.lon.wrap_at(180 * u.deg).deg, g.lat.deg)]',
    'print(json.dumps(out).replace("NaN", "null"))',
  ].join('\n');
  return JSON.parse(execFileSync('/usr/bin/python3', ['-c', script, AIA, JSON.stringify(pix)], { timeout: 120000 }).toString());
}

export const tests = [
  {
    name: 'solar_cursor_readout_in_the_frame_units',
    prepare: () => ({ data_roots: [SOLAR], datasets: [{ name: 'aia', path: AIA }] }),
    async run({ browser, server }) {
      try {
        execFileSync('/usr/bin/python3', ['-c', 'import sunpy.map'], { stdio: 'ignore', timeout: 60000 });
      } catch (_) {
        throw new Skip('no sunpy in /usr/bin/python3');
      }
      const { page, rec, context } = await newPage(browser, server.base);
      await page.goto(`${server.base}/#/pixels/aia`);
      await until(20000, 'an aia tile', () => rec.responses.some((r) => /\/iiif\/3\/aia\//.test(r.url) && !r.url.endsWith('info.json') && r.status === 200));
      await page.waitForTimeout(300);
      // On the disk (centre, north-west, south-east) and off it (a corner).
      const pts = [[64, 64], [90, 100], [40, 40], [2, 2]];
      const got = [];
      for (const [x, y] of pts) {
        const pt = await pagePointOf(page, x, y);
        await page.mouse.move(pt.x - 2, pt.y - 2);
        await page.mouse.move(pt.x, pt.y);
        got.push(await until(5000, `the solar readout of (${x}, ${y})`, () => page.evaluate(([wx, wy]) => {
          const c = window.tessera.cursor;
          const text = document.querySelector('#px-cursor').textContent;
          return c && Math.abs(c.x - wx) <= 1 && Math.abs(c.y - wy) <= 1 && c.solar &&
            c.stonyhurst !== undefined && text.includes('(stonyhurst)')
            ? { x: c.x, y: c.y, solar: c.solar, hg: c.stonyhurst, text } : null;
        }, [x, y])));
      }
      const ref = sunpyPositions(got.map((c) => [c.x, c.y]));
      const mas = 1 / 3600e3;
      got.forEach((c, i) => {
        const [tx, ty, lon, lat] = ref[i];
        const at = `pixel (${c.x}, ${c.y}): ${c.text}; sunpy ${ref[i]}`;
        check(c.solar.frame === 'helioprojective', `frame ${c.solar.frame}`);
        // Helioprojective in arcseconds, within 1 mas of sunpy's.
        check(Math.abs(c.solar.lon - tx) < 1e-3 && Math.abs(c.solar.lat - ty) < 1e-3, at);
        check(c.text.includes(`Tx ${c.solar.lon.toFixed(2)}″ Ty ${c.solar.lat.toFixed(2)}″`), at);
        if (lon === null) {
          check(c.hg === null && c.text.includes('(stonyhurst) off the disk'), at);
          return;
        }
        // Stonyhurst degrees within 1 mas of sunpy's (the Earth of ERFA's epv00 on both
        // sides).
        const dl = Math.abs(((c.hg.lon - lon + 540) % 360) - 180);
        check(c.hg && dl < mas && Math.abs(c.hg.lat - lat) < mas, at);
        check(c.text.includes(`(stonyhurst) lon ${c.hg.lon.toFixed(4)}° lat ${c.hg.lat.toFixed(4)}°`), at);
      });
      check(ref.filter((r) => r[2] === null).length === 1, `sunpy's off-disk points: ${JSON.stringify(ref)}`);
      await context.close();
    },
  },
];
