// Pixel -> sky for the WCS summary of GET /api/v1/datasets/{name} (FITS WCS Papers I and II,
// Greisen & Calabretta 2002, Calabretta & Greisen 2002), enough to draw a dataset's footprint
// and label cursor positions.  Supported projections: the zenithal TAN, SIN, ARC, STG, ZEA and
// the cylindrical CAR, SFL (GLS), MER, AIT, with LONPOLE/LATPOLE at their defaults.  Angles
// in degrees.  Pixel coordinates here are 0-based (pixel centre of the first pixel = 0), as in
// the HTTP API; the FITS 1-based CRPIX is handled inside.

const D2R = Math.PI / 180;
const R2D = 180 / Math.PI;
const ZENITHAL = new Set(['TAN', 'SIN', 'ARC', 'STG', 'ZEA']);
const CYLINDRICAL = new Set(['CAR', 'SFL', 'GLS', 'MER', 'AIT']);

// ICRS -> Galactic rotation (the Hipparcos definition, as astropy uses).
const ICRS_TO_GAL = [
  [-0.0548755604162154, -0.8734370902348850, -0.4838350155487132],
  [0.4941094278755837, -0.4448296299600112, 0.7469822444972189],
  [-0.8676661490190047, -0.1980763734312015, 0.4559837761750669],
];

function toVec(lon, lat) {
  const cl = Math.cos(lat * D2R);
  return [cl * Math.cos(lon * D2R), cl * Math.sin(lon * D2R), Math.sin(lat * D2R)];
}

function fromVec(v) {
  let lon = Math.atan2(v[1], v[0]) * R2D;
  if (lon < 0) lon += 360;
  const lat = Math.asin(Math.max(-1, Math.min(1, v[2]))) * R2D;
  return [lon, lat];
}

/** Galactic (l, b) -> ICRS (ra, dec), degrees. */
export function galToIcrs(l, b) {
  const g = toVec(l, b);
  const M = ICRS_TO_GAL;
  return fromVec([0, 1, 2].map((j) => M[0][j] * g[0] + M[1][j] * g[1] + M[2][j] * g[2]));
}

/** ICRS (ra, dec) -> Galactic (l, b), degrees. */
export function icrsToGal(ra, dec) {
  const e = toVec(ra, dec);
  return fromVec(ICRS_TO_GAL.map((row) => row[0] * e[0] + row[1] * e[1] + row[2] * e[2]));
}

/** The projection code ("TAN") of a celestial CTYPE ("RA---TAN"), or "". */
function projCode(ctype) {
  return (ctype || '').length >= 8 ? ctype.slice(5, 8) : '';
}

/** Returns a function (x, y) -> [lon, lat] in the dataset's frame (0-based pixels), or null
 * when the WCS is absent, not celestial in its first two axes, or its projection unknown. */
export function makePix2Sky(wcs) {
  if (!wcs || !wcs.ctype || wcs.ctype.length < 2) return null;
  const c1 = wcs.ctype[0], c2 = wcs.ctype[1];
  const lonFirst = /^(RA--|GLON|ELON)/.test(c1) && /^(DEC-|GLAT|ELAT)/.test(c2);
  if (!lonFirst) return null;
  const code = projCode(c1);
  if (!ZENITHAL.has(code) && !CYLINDRICAL.has(code)) return null;
  const cd = (i, j) => {
    if (wcs.cd) return wcs.cd[i][j];
    return i === j ? wcs.cdelt[i] : 0;
  };
  const a0 = wcs.crval[0], d0 = wcs.crval[1];
  const zen = ZENITHAL.has(code);
  const theta0 = zen ? 90 : 0;
  // Native longitude of the celestial pole (LONPOLE default) and the native pole's
  // celestial latitude (the solution nearest LATPOLE = +90).
  const phip = d0 >= theta0 ? 0 : 180;
  let dp;
  if (zen) dp = d0;
  else dp = phip === 0 ? 90 - d0 : 90 + d0;
  const native2cel = (phi, theta, ap) => {
    const st = Math.sin(theta * D2R), ct = Math.cos(theta * D2R);
    const sd = Math.sin(dp * D2R), cdp = Math.cos(dp * D2R);
    const dphi = (phi - phip) * D2R;
    const lon = ap + Math.atan2(-ct * Math.sin(dphi), st * cdp - ct * sd * Math.cos(dphi)) * R2D;
    const lat = Math.asin(Math.max(-1, Math.min(1, st * sd + ct * cdp * Math.cos(dphi)))) * R2D;
    return [((lon % 360) + 360) % 360, lat];
  };
  // The celestial longitude of the native pole, such that the reference point maps to CRVAL.
  const ap = zen ? a0 : a0 - native2cel(0, theta0, 0)[0];
  const R0 = R2D;
  const project = (x, y) => {
    const r = Math.hypot(x, y);
    const phiz = r === 0 ? 0 : Math.atan2(x, -y) * R2D;
    switch (code) {
      case 'TAN': return [phiz, r === 0 ? 90 : Math.atan(R0 / r) * R2D];
      case 'SIN': return r > R0 ? null : [phiz, Math.acos(r / R0) * R2D];
      case 'ARC': return [phiz, 90 - r];
      case 'STG': return [phiz, 90 - 2 * Math.atan(r / (2 * R0)) * R2D];
      case 'ZEA': return r > 2 * R0 ? null : [phiz, 90 - 2 * Math.asin(r / (2 * R0)) * R2D];
      case 'CAR': return [x, y];
      case 'SFL':
      case 'GLS': {
        const c = Math.cos(y * D2R);
        return Math.abs(y) > 90 || c === 0 ? null : [x / c, y];
      }
      case 'MER': return [x, 2 * Math.atan(Math.exp(y / R0)) * R2D - 90];
      case 'AIT': {
        const z2 = 1 - (x / (4 * R0)) ** 2 - (y / (2 * R0)) ** 2;
        if (z2 < 0.5) return null;
        const z = Math.sqrt(z2);
        return [2 * Math.atan2(z * x / (2 * R0), 2 * z2 - 1) * R2D, Math.asin(y * z / R0) * R2D];
      }
      default: return null;
    }
  };
  return (px, py) => {
    // FITS pixel p (1-based) = 0-based index + 1.
    const p = [px + 1 - wcs.crpix[0], py + 1 - wcs.crpix[1]];
    let x = 0, y = 0;
    for (let j = 0; j < 2; j++) {
      x += cd(0, j) * p[j];
      y += cd(1, j) * p[j];
    }
    const nat = project(x, y);
    if (!nat || !Number.isFinite(nat[0]) || !Number.isFinite(nat[1])) return null;
    if (Math.abs(nat[0]) > 180 + 1e-9) return null;
    return native2cel(nat[0], nat[1], ap);
  };
}

/** The footprint of an nx x ny image as [[ra, dec], ...] in ICRS (edges sampled `per`
 * times each, so curved edges stay curved), or null when any edge point has no sky
 * position (e.g. an all-sky map) or the WCS is not supported. */
export function footprintIcrs(wcs, nx, ny, per = 8) {
  const f = makePix2Sky(wcs);
  if (!f) return null;
  const pts = [];
  const lo = -0.5, hx = nx - 0.5, hy = ny - 0.5;
  const edge = (x0, y0, x1, y1) => {
    for (let i = 0; i < per; i++) {
      const t = i / per;
      pts.push([x0 + (x1 - x0) * t, y0 + (y1 - y0) * t]);
    }
  };
  edge(lo, lo, hx, lo);
  edge(hx, lo, hx, hy);
  edge(hx, hy, lo, hy);
  edge(lo, hy, lo, lo);
  const gal = (wcs.frame || '') === 'galactic';
  const out = [];
  for (const [x, y] of pts) {
    const s = f(x, y);
    if (!s) return null;
    out.push(gal ? galToIcrs(s[0], s[1]) : s);
  }
  return out;
}

/** The world value of 0-based index k along axis `axis` of a linear (spectral) axis. */
export function linearWorld(wcs, axis, k) {
  if (!wcs || !wcs.crval || wcs.crval.length <= axis) return null;
  const cdelt = wcs.cd ? wcs.cd[axis][axis] : wcs.cdelt[axis];
  return wcs.crval[axis] + (k + 1 - wcs.crpix[axis]) * cdelt;
}

/** Returns a function (lon, lat) -> [x, y] (0-based pixels; lon, lat in the dataset's
 * frame) that inverts makePix2Sky by Newton steps from the reference pixel, or null when
 * makePix2Sky has none.  The function returns null where no pixel maps to the position
 * within 1e-6 pixel after 30 steps (the far side of a SIN image, outside an AIT ellipse). */
export function makeSky2Pix(wcs) {
  const f = makePix2Sky(wcs);
  if (!f) return null;
  const dlon = (a, b) => ((a - b + 540) % 360) - 180;
  return (lon, lat) => {
    let x = wcs.crpix[0] - 1, y = wcs.crpix[1] - 1;
    for (let it = 0; it < 30; it++) {
      const s = f(x, y), sx = f(x + 1, y), sy = f(x, y + 1);
      if (!s || !sx || !sy) return null;
      const c = Math.cos(s[1] * D2R);
      const r0 = dlon(lon, s[0]) * c, r1 = lat - s[1];
      const a = dlon(sx[0], s[0]) * c, b = dlon(sy[0], s[0]) * c;
      const cc = sx[1] - s[1], dd = sy[1] - s[1];
      const det = a * dd - b * cc;
      if (!det) return null;
      const ex = (dd * r0 - b * r1) / det, ey = (a * r1 - cc * r0) / det;
      x += ex;
      y += ey;
      if (Math.hypot(ex, ey) < 1e-6) return [x, y];
    }
    return null;
  };
}
