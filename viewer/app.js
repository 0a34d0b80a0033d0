// Tessera viewer: datasets, sky (Aladin Lite on /hips), pixels (OpenSeadragon on /iiif and
// slices, uPlot for the values along z), jobs (mosaics).  The view lives in the URL hash:
//   #/datasets
//   #/sky/{name}?frame=icrs|galactic&ra=&dec=&fov=&proj=&plane=&min=&max=&layer=&opacity=
//   #/collection/{name}?frame=&ra=&dec=&fov=&proj=   (a collection in the sky view)
//   #/pixels/{name}?z=&axis=xy|xz|yz&stretch=&min=&max=&cmap=&fixed=1&x=&y=&zoom=&cx=&cy=
//   #/jobs?job={id}
// so that a copied link reopens the same view.  Every failure becomes one message on the
// page (one per cause, replaced while the cause lasts, removed when it is gone); a load
// that failed because the server was away is retried when it answers again.
import { footprintIcrs, makePix2Sky, makeSky2Pix, icrsToGal, linearWorld } from './wcs.js';
import { cmapColour, stretchApply } from './colormaps.js';
import { initJobs, showJobs, stopJobPolling } from './jobs.js';

window.tesseraStarted = true;
export const $ = (sel) => document.querySelector(sel);
export const enc = encodeURIComponent;

// ---- state shared with the browser tests -------------------------------------------------
export const T = (window.tessera = {
  view: null,
  datasets: null,
  aladin: null,
  osd: null,
  plot: null,
  series: null,
  cursor: null,
  job: null,
  tileUrls: [],
  hipsTiles: [],
  readout: null,
  cuts: null,
  features: {},
});

// ---- HiPS requests of Aladin Lite ------------------------------------------------------------
// Aladin Lite fetches a survey's properties, Moc.fits and tiles with window.fetch; this
// wrapper (installed before Aladin loads) does two things to them:
//  - A survey URL /hips/{name}/@{tag} (tag "z{plane}" and/or "g{n}") is the plane of a
//    cube (tiles Npix{N}_{plane}, properties turned into an image survey of its own
//    creator_did, so that Aladin keeps the planes apart) or a fresh copy after a failure.
//  - Every tile's request and answer time is recorded in tessera.hipsTiles.
const realFetch = window.fetch.bind(window);
window.fetch = function hipsFetch(input, init) {
  const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input && input.url;
  const m = typeof url === 'string' ? url.match(/\/hips\/([^/?#]+)\/(?:@([a-z0-9]+)\/)?([^?#]*)$/) : null;
  if (!m) return realFetch(input, init);
  const name = decodeURIComponent(m[1]), tag = m[2] || '', rest = m[3];
  const zm = tag.match(/z(\d+)/);
  let real = url;
  if (tag) {
    real = url.replace(`/@${tag}/`, '/');
    if (zm) real = real.replace(/\/(Npix\d+|Allsky)\.(\w+)$/, `/$1_${zm[1]}.$2`);
    // Fixed levels (tag "f{n}"): every plane's pictures with the same cut levels.
    if (/f\d+/.test(tag) && sky.cuts && /(Npix\d+|Allsky)(_\d+)?\.(png|jpg)$/.test(real)) {
      real += `?min_cut=${sky.cuts.lo}&max_cut=${sky.cuts.hi}`;
    }
  }
  const req = typeof input === 'string' || input instanceof URL ? real : new Request(real, input);
  const tile = /Npix\d+/.test(rest);
  const rec = tile ? { url: real, t0: performance.now(), t1: null, status: null } : null;
  if (rec) T.hipsTiles.push(rec);
  const p = realFetch(req, init).then((resp) => {
    if (rec) { rec.t1 = performance.now(); rec.status = resp.status; }
    if (resp.status >= 500) failure('sky-tiles', `the server could not make HiPS tiles of '${name}' (${resp.status} ${resp.statusText})`, true);
    else if (tile && resp.ok) clearMessage('sky-tiles');
    // Aladin Lite sets a layer's options again as its survey loads, which put the
    // opacity back to 1: the slider's value is applied again with each of its tiles.
    if (tile && resp.ok && name === sky.layer && !sky.blink) layerOpacity();
    if (!(rest === 'properties' && zm)) return resp;
    return resp.text().then((text) => {
      const lines = text.split('\n').filter((l) => !/^\s*(hips_cube_\w+|creator_did|dataproduct_type)\s*=/.test(l));
      lines.unshift(`creator_did = ivo://tessera/${name}/plane${zm[1]}`, 'dataproduct_type = image');
      return new Response(lines.join('\n'), { status: resp.status, headers: resp.headers });
    });
  }, (e) => {
    if (rec) { rec.t1 = performance.now(); rec.status = 0; }
    failure('sky-tiles', `cannot reach the server for the HiPS tiles of '${name}': ${e.message}`, true);
    throw e;
  });
  return p;
};

// ---- messages and fetch helpers ------------------------------------------------------------
/** Shows `text` as the one message of cause `key` (a later message of the same cause
 * replaces it; without a key the text is its own key). */
export function showMessage(text, kind = 'error', key = null) {
  const box = $('#messages');
  const k = key || `text:${text}`;
  let p = [...box.children].find((c) => c.dataset.key === k);
  if (!p) {
    p = document.createElement('p');
    p.dataset.key = k;
    box.append(p);
  }
  p.className = `msg ${kind}`;
  p.dataset.text = text;
  p.textContent = text;
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = '×';
  b.title = 'dismiss';
  b.onclick = () => p.remove();
  p.prepend(b);
}
/** Removes the message of cause `key` (its cause is gone). */
export function clearMessage(key) {
  for (const p of [...$('#messages').children]) if (p.dataset.key === key) p.remove();
}
function clearMessages() {
  $('#messages').replaceChildren();
}
window.addEventListener('error', (e) => showMessage(`Error: ${e.message}`));
window.addEventListener('unhandledrejection', (e) =>
  showMessage(e.reason && e.reason.message ? e.reason.message : String(e.reason)));

// A load that failed because the server did not answer (or answered 5xx) is retried when
// GET /api/v1/datasets answers again: the failure messages go and the view is redrawn.
let serverWatch = null;
const retryKeys = new Set();
export function failure(key, text, retry) {
  showMessage(text, 'error', key);
  if (!retry) return;
  retryKeys.add(key);
  if (serverWatch) return;
  serverWatch = setInterval(async () => {
    let ok = false;
    try { ok = (await realFetch('/api/v1/datasets', { cache: 'no-store' })).ok; } catch (_) { ok = false; }
    if (!ok) return;
    clearInterval(serverWatch);
    serverWatch = null;
    for (const k of retryKeys) clearMessage(k);
    retryKeys.clear();
    reloadView();
  }, 1500);
}
export const isOutage = (e) => !e.status || e.status >= 500;

let busyCount = 0;
function busy(delta) {
  busyCount = Math.max(0, busyCount + delta);
  $('#busy').hidden = busyCount === 0;
}

/** fetch() that turns a non-2xx answer into an Error carrying the problem+json detail. */
export async function request(url, opts = {}) {
  busy(1);
  let resp;
  try {
    resp = await fetch(url, opts);
  } catch (e) {
    const err = new Error(`cannot reach the server (${url}): ${e.message}`);
    err.status = 0;
    throw err;
  } finally {
    busy(-1);
  }
  if (!resp.ok) {
    let detail = `${resp.status} ${resp.statusText}`;
    try {
      const ct = resp.headers.get('Content-Type') || '';
      if (ct.includes('json')) {
        const p = await resp.json();
        if (p && p.detail) detail = `${p.detail} (${p.status || resp.status} ${p.title || ''})`.trim();
      }
    } catch (_) { /* keep the status line */ }
    const err = new Error(detail);
    err.status = resp.status;
    throw err;
  }
  return resp;
}
export const getJSON = async (url, opts) => (await request(url, opts)).json();
const getText = async (url) => (await request(url)).text();

/** Whether a server route family answers (not 404): `probe` is a URL of it. */
async function feature(name, probe) {
  if (T.features[name] === undefined) {
    T.features[name] = realFetch(probe, { method: 'HEAD' }).then((r) => r.status !== 404, () => false);
  }
  return T.features[name];
}

export async function loadDatasets(force = false) {
  if (!T.datasets || force) T.datasets = await getJSON('/api/v1/datasets');
  return T.datasets;
}
export const findDataset = (name) => (T.datasets || []).find((d) => d.name === name);

// ---- URL state -------------------------------------------------------------------------------
function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const q = h.indexOf('?');
  const path = q >= 0 ? h.slice(0, q) : h;
  const parts = path.split('/');
  return {
    view: parts[0] || 'datasets',
    name: parts[1] ? decodeURIComponent(parts[1]) : null,
    params: new URLSearchParams(q >= 0 ? h.slice(q + 1) : ''),
  };
}
export function hashFor(view, name, params) {
  let h = `#/${view}`;
  if (name) h += `/${enc(name)}`;
  const s = params ? new URLSearchParams(params).toString() : '';
  return s ? `${h}?${s}` : h;
}
/** Records the current view in the URL without reloading it. */
export function replaceHash(view, name, params) {
  const h = hashFor(view, name, params);
  if (location.hash !== h) history.replaceState(null, '', h);
}

const VIEWS = ['datasets', 'sky', 'pixels', 'jobs'];
async function route() {
  const { view, name, params } = parseHash();
  const v = VIEWS.includes(view) || view === 'collection' ? view : 'datasets';
  T.view = v;
  // A collection is shown in the sky view's section.
  const section = v === 'collection' ? 'sky' : v;
  for (const id of VIEWS) $(`#view-${id}`).hidden = id !== section;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === section);
  if (v !== 'jobs') stopJobPolling();
  try {
    if (v === 'datasets') await showDatasets();
    else if (v === 'sky') await showSky(name, params);
    else if (v === 'collection') await showCollection(name, params);
    else if (v === 'pixels') await showPixels(name, params);
    else await showJobs(params);
  } catch (e) {
    showMessage(e.message);
  }
}
window.addEventListener('hashchange', () => {
  clearMessages();
  route();
});
/** Redraws the current view from scratch (after the server came back). */
function reloadView() {
  px.openKey = null;
  sky.gen += 1;
  sky.name = null;
  col.name = null;
  route();
}

// ---- formatting ------------------------------------------------------------------------------
const fmt = (v, d = 5) => (v === null || v === undefined || Number.isNaN(v) ? '–' : Number(v).toFixed(d));
function sexa(deg, hours) {
  let v = hours ? deg / 15 : Math.abs(deg);
  const sign = hours ? '' : deg < 0 ? '−' : '+';
  let a = Math.floor(v);
  let b = Math.floor((v - a) * 60);
  let c = ((v - a) * 60 - b) * 60;
  if (c >= 59.995) { c = 0; b += 1; }
  if (b >= 60) { b = 0; a += 1; }
  const p2 = (n) => String(n).padStart(2, '0');
  return hours ? `${p2(a)}h${p2(b)}m${c.toFixed(2).padStart(5, '0')}s`
    : `${sign}${p2(a)}°${p2(b)}′${c.toFixed(1).padStart(4, '0')}″`;
}
function pixelScaleArcsec(wcs) {
  if (!wcs) return null;
  const a = wcs.cd ? wcs.cd[0][0] * wcs.cd[1][1] - wcs.cd[0][1] * wcs.cd[1][0]
    : wcs.cdelt[0] * wcs.cdelt[1];
  return Math.sqrt(Math.abs(a)) * 3600;
}
/** The label and a converter for a spectral/time axis unit (velocities shown in km/s). */
function axisUnit(unit) {
  const u = (unit || '').trim();
  if (/^m ?s-1$|^m\/s$|^m\.s-1$/.test(u)) return { unit: 'km/s', f: (v) => (v === null ? null : v / 1000) };
  return { unit: u, f: (v) => v };
}
function wcsSummary(d) {
  const w = d.wcs;
  if (!w) return d.wcs_error ? `no usable WCS: ${d.wcs_error}` : 'no WCS';
  const parts = [w.ctype.join(' ')];
  if (w.frame) parts.push(w.frame);
  const f = d.celestial ? makePix2Sky(w) : null;
  if (f) {
    const c = f((d.shape[0] - 1) / 2, (d.shape[1] - 1) / 2);
    if (c) parts.push(`centre ${fmt(c[0], 4)}, ${fmt(c[1], 4)}`);
  }
  const s = pixelScaleArcsec(w);
  if (s) parts.push(s >= 60 ? `${fmt(s / 60, 2)}′/px` : `${fmt(s, 2)}″/px`);
  if (w.ctype.length > 2 && d.shape[2]) {
    const au = axisUnit(w.cunit && w.cunit[2]);
    const a = au.f(linearWorld(w, 2, 0)), b = au.f(linearWorld(w, 2, d.shape[2] - 1));
    parts.push(`${w.ctype[2]} ${fmt(a, 2)}…${fmt(b, 2)} ${au.unit}`);
  }
  return parts.join(' · ');
}
const planeCount = (d) => (d.kind === 'image' ? 1 : d.shape[2] || 1);
const midPlane = (d) => Math.floor((planeCount(d) - 1) / 2);
const iiifId = (d, z) => (d.kind === 'image' ? d.name : `${d.name}~${z}`);

// ---- datasets ----------------------------------------------------------------------------------
/** A card of the datasets page for `name` (classes "card" and `cls`, data-name the name)
 * and its meta block, not yet appended to it: the name in bold, then an empty div of each
 * class in `rows` for the caller to fill. */
function newCard(name, cls, rows) {
  const card = document.createElement('div');
  card.className = cls ? `card ${cls}` : 'card';
  card.dataset.name = name;
  const meta = document.createElement('div');
  meta.className = 'meta';
  meta.innerHTML = '<b></b>' + rows.map((r) => `<div class="${r}"></div>`).join('');
  meta.querySelector('b').textContent = name;
  return { card, meta };
}

/** A link to view `view` (sky, pixels, collection) of `name`, reading `text`. */
function viewLink(view, name, text) {
  const a = document.createElement('a');
  a.href = hashFor(view, name);
  a.textContent = text;
  return a;
}

async function showDatasets() {
  const list = await loadDatasets(true);
  const box = $('#dataset-list');
  box.replaceChildren();
  if (!list.length) box.textContent = 'This server has no datasets.';
  for (const d of list) {
    const { card, meta } = newCard(d.name, '', ['kind', 'wcs', 'links']);
    const img = document.createElement('img');
    img.className = 'thumb';
    img.alt = `${d.name} preview`;
    img.loading = 'lazy';
    img.src = `/iiif/3/${enc(iiifId(d, midPlane(d)))}/full/!128,128/0/default.png?stretch=asinh&cuts=picture`;
    img.onerror = () => { img.alt = 'no preview'; img.classList.add('broken'); };
    const shape = d.shape.join(' × ');
    meta.querySelector('.kind').textContent =
      `${d.kind} · ${shape} · BITPIX ${d.bitpix}${d.bunit ? ` · ${d.bunit}` : ''}`;
    meta.querySelector('.wcs').textContent = wcsSummary(d);
    const links = meta.querySelector('.links');
    if (d.celestial) links.append(viewLink('sky', d.name, 'sky'));
    links.append(viewLink('pixels', d.name, 'pixels'), fitsLink(d.name));
    card.append(img, meta);
    box.append(card);
  }
  showCollectionList();
}

/** A link that downloads dataset `name` as FITS (hidden when the server has no such route). */
export function fitsLink(name) {
  const a = document.createElement('a');
  a.href = `/api/v1/datasets/${enc(name)}/fits`;
  a.download = `${name}.fits`;
  a.textContent = 'FITS';
  a.className = 'fits-link';
  a.hidden = true;
  feature('fits', a.href).then((ok) => { a.hidden = !ok; });
  return a;
}

function fillSelect(sel, items, current) {
  sel.replaceChildren();
  for (const d of items) {
    const o = document.createElement('option');
    o.value = d.name;
    o.textContent = d.name;
    sel.append(o);
  }
  sel.value = current;
}

// ---- coordinates through the server's full WCS (distortions, plate solutions) ----------------
const transformCache = new Map();
const transformTimers = {};
/** Asks GET /transform for one point of dataset d, `query` being "x=..&y=.." (pixel to sky)
 * or "lon=..&lat=.." (sky to pixel) with &frame=; calls done([a, b]) with the answer, or
 * done(null) when the point is off the projection, and done(undefined) when the server has
 * no such route or fails (the callers then keep the viewer's linear WCS).  Debounced per
 * `slot`, answers cached. */
function readTransform(slot, d, query, done) {
  clearTimeout(transformTimers[slot]);
  const url = `/api/v1/datasets/${enc(d.name)}/transform?${query}`;
  if (transformCache.has(url)) { done(transformCache.get(url)); return; }
  transformTimers[slot] = setTimeout(async () => {
    if (!(await feature('transform', `/api/v1/datasets/${enc(d.name)}/transform`))) { done(undefined); return; }
    let v;
    try {
      const r = await getJSON(url);
      const pt = (r.world || r.pixel || [])[0];
      v = pt && pt[0] !== null && pt[1] !== null ? pt : null;
    } catch (_) {
      done(undefined);
      return;
    }
    if (transformCache.size > 2000) transformCache.clear();
    transformCache.set(url, v);
    done(v);
  }, 40);
}

// ---- values under the cursor (both views) ----------------------------------------------------
const valueCache = new Map();
let valueTimer = null;
/** Asks GET /values for pixel (x, y) of plane z of dataset d (debounced; answers cached) and
 * calls show(text) with "value unit", or with '' when the server has no values route. */
function readValue(d, x, y, z, show) {
  clearTimeout(valueTimer);
  const key = `${d.name}|${x}|${y}|${z}`;
  if (valueCache.has(key)) { show(valueCache.get(key)); return; }
  valueTimer = setTimeout(async () => {
    const url = `/api/v1/datasets/${enc(d.name)}/values?x=${x}&y=${y}&plane=${z}`;
    if (!(await feature('values', url))) { show(''); return; }
    let text;
    try {
      const r = await getJSON(url);
      const v = r.values && r.values[0] ? r.values[0][0] : null;
      const unit = r.unit || d.bunit || '';
      text = v === null || v === undefined ? 'value NaN (blank)' : `value ${fmtValue(v)}${unit ? ` ${unit}` : ''}`;
      T.readout = { x, y, z, value: v, unit: r.unit || null };
    } catch (e) {
      text = `value: ${e.message}`;
    }
    if (valueCache.size > 2000) valueCache.clear();
    valueCache.set(key, text);
    show(text);
  }, 60);
}
const fmtValue = (v) => (v === 0 ? '0' : Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3 ? Number(v).toExponential(4) : Number(v).toPrecision(6));

/** World coordinates of sky position (ra, dec) ICRS in display frame `frame`. */
function worldText(raIcrs, decIcrs, frame) {
  if (frame === 'galactic') {
    const [l, b] = icrsToGal(raIcrs, decIcrs);
    return `(galactic) l ${fmt(l, 5)}° b ${fmt(b, 5)}°`;
  }
  return `(icrs) α ${fmt(raIcrs, 5)}° ${sexa(raIcrs, true)} δ ${fmt(decIcrs, 5)}° ${sexa(decIcrs, false)}`;
}

// ---- sky view (Aladin Lite) ------------------------------------------------------------------
let A = null;
let sky = { name: null, overlay: null, frame: 'icrs', plane: null, depth: 0, gen: 0, layer: null, blink: null, props: null, cuts: null };

async function loadAladin() {
  if (A) return A;
  let mod;
  try {
    mod = await import('/vendor/aladin-lite/aladin.js');
  } catch (e) {
    throw new Error(`Aladin Lite is not installed on this server (/vendor/aladin-lite/aladin.js: ${e.message}); run scripts/setup.sh (npm ci)`);
  }
  A = mod.default;
  try {
    await A.init;
  } catch (e) {
    A = null;
    throw new Error(`Aladin Lite cannot start in this browser: ${e}`);
  }
  return A;
}

function parseProperties(text) {
  const p = {};
  for (const line of text.split('\n')) {
    const m = line.match(/^\s*([A-Za-z0-9_]+)\s*=\s*(.*?)\s*$/);
    if (m) p[m[1]] = m[2];
  }
  return p;
}

/** The cursor line of the sky view: position in the display frame, the dataset's pixel
 * under it and (from the server) its value. */
function cursorText(raIcrs, decIcrs, frame) {
  if (raIcrs === null || raIcrs === undefined || Number.isNaN(raIcrs)) return 'cursor: outside the sky';
  return `cursor ${worldText(raIcrs, decIcrs, frame)}`;
}

/** The HiPS URL Aladin gets for dataset `name`: plain, or tagged (fetch wrapper above). */
function surveyUrl(name, plane) {
  let tag = '';
  if (plane !== null && plane !== undefined) tag += `z${plane}`;
  if (plane !== null && plane !== undefined && sky.cuts) tag += `f${sky.cuts.n}`;
  if (sky.gen) tag += `g${sky.gen}`;
  return `${location.origin}/hips/${enc(name)}${tag ? `/@${tag}` : ''}`;
}
const isAllSky = (props) => (parseFloat(props.hips_initial_fov) || 0) >= 150;

function skyParams() {
  const p = { frame: sky.frame };
  if (T.aladin) {
    const [ra, dec] = T.aladin.getRaDec();
    p.ra = ra.toFixed(6);
    p.dec = dec.toFixed(6);
    p.fov = Number(T.aladin.getFov()[0].toPrecision(6));
    p.proj = T.aladin.getProjectionName();
  }
  if (sky.plane !== null) p.plane = sky.plane;
  if (sky.plane !== null && sky.cuts) { p.min = sky.cuts.lo; p.max = sky.cuts.hi; }
  if (sky.layer) { p.layer = sky.layer; p.opacity = $('#sky-opacity').value; }
  return p;
}
let skyHashTimer = null;
function recordSky() {
  clearTimeout(skyHashTimer);
  skyHashTimer = setTimeout(() => {
    if (T.view === 'sky' && sky.name) replaceHash('sky', sky.name, skyParams());
    else if (T.view === 'collection' && col.name) replaceHash('collection', col.name, skyParams());
  }, 200);
}
/** The view moved or zoomed: the URL follows, and a collection's footprints are redrawn. */
function skyMoved() {
  recordSky();
  scheduleMembers();
}

async function showSky(name, params) {
  const list = await loadDatasets();
  const celestial = list.filter((d) => d.celestial);
  if (!celestial.length) throw new Error('No dataset on this server has a celestial WCS.');
  if (!name) name = sky.name && findDataset(sky.name) ? sky.name : celestial[0].name;
  const d = findDataset(name);
  if (!d) throw new Error(`no dataset named '${name}'`);
  fillSelect($('#sky-dataset'), celestial, d.celestial ? name : '');
  loadCollections().then(() => addCollectionOptions(null), () => {});
  $('#sky-to-pixels').href = hashFor('pixels', name);
  if (d.wcs_error) {
    throw new Error(`'${name}' has no usable WCS: ${d.wcs_error}; open its pixel view instead.`);
  }
  if (!d.celestial) {
    throw new Error(`'${name}' has no celestial WCS, so it has no sky view; open its pixel view instead.`);
  }
  const frame = params.get('frame') === 'galactic' || params.get('frame') === 'icrs'
    ? params.get('frame') : d.wcs && d.wcs.frame === 'galactic' ? 'galactic' : 'icrs';
  $('#sky-frame').value = frame;
  let props;
  try {
    props = parseProperties(await getText(`/hips/${enc(name)}/properties`));
  } catch (e) {
    failure('sky-open', `cannot open the sky view of '${name}': ${e.message}`, isOutage(e));
    return;
  }
  clearMessage('sky-open');
  sky.props = props;
  await loadAladin();
  // Cubes: one survey per plane (HiPS cube tiles), chosen with the plane slider.
  sky.depth = props.dataproduct_type === 'cube' ? parseInt(props.hips_cube_depth, 10) || 0 : 0;
  const first = parseInt(props.hips_cube_firstframe, 10);
  const pz = parseInt(params.get('plane'), 10);
  const newName = sky.name !== name;
  sky.plane = sky.depth > 1
    ? (Number.isInteger(pz) && pz >= 0 && pz < sky.depth ? pz
      : !newName && sky.plane !== null ? sky.plane : Number.isInteger(first) ? first : Math.floor(sky.depth / 2))
    : null;
  $('#sky-plane-row').hidden = sky.plane === null;
  const qlo = parseFloat(params.get('min')), qhi = parseFloat(params.get('max'));
  const wantCuts = sky.plane !== null && Number.isFinite(qlo) && Number.isFinite(qhi) && qlo < qhi
    ? { lo: qlo, hi: qhi } : null;
  if (newName || params.has('min') || !wantCuts) {
    const same = sky.cuts && wantCuts && sky.cuts.lo === wantCuts.lo && sky.cuts.hi === wantCuts.hi;
    if (!same) {
      if (sky.cuts || wantCuts) sky.urlPlane = undefined;   /* the survey changes */
      sky.cuts = wantCuts ? { ...wantCuts, n: (sky.cuts ? sky.cuts.n : 0) + 1 } : null;
    }
  }
  $('#sky-fixcuts').checked = !!sky.cuts;
  if (sky.plane !== null) {
    $('#sky-plane').max = String(sky.depth - 1);
    $('#sky-plane').value = String(sky.plane);
    skyPlaneLabel(d);
  }
  const ra0 = parseFloat(props.hips_initial_ra), dec0 = parseFloat(props.hips_initial_dec);
  const allSky = isAllSky(props);
  // Aladin's fov is the width of the view: widen it so that the whole image fits the height.
  const el = $('#aladin');
  const aspect = el.clientHeight > 0 ? Math.max(1, el.clientWidth / el.clientHeight) : 1;
  let fov = allSky ? 360 : Math.min(180, (parseFloat(props.hips_initial_fov) || 1) * 1.15 * aspect);
  let proj = allSky ? 'MOL' : 'SIN';
  let ra = ra0, dec = dec0;
  const pra = parseFloat(params.get('ra')), pdec = parseFloat(params.get('dec')), pfov = parseFloat(params.get('fov'));
  if (Number.isFinite(pra) && Number.isFinite(pdec) && Math.abs(pdec) <= 90) { ra = pra; dec = pdec; }
  if (Number.isFinite(pfov) && pfov > 0 && pfov <= 360) fov = pfov;
  if (/^[A-Z]{3}$/.test(params.get('proj') || '')) proj = params.get('proj');
  const alFrame = frame === 'galactic' ? 'galactic' : 'ICRS';
  const survey = () => A.imageHiPS(surveyUrl(name, sky.plane), { name, imgFormat: 'png' });
  const hadAladin = !!T.aladin;
  leaveCollection();
  $('#sky-to-pixels').hidden = false;
  if (!T.aladin) createAladin(survey(), alFrame, proj, fov, ra, dec);
  // Move first, then change the survey: the new survey's first tiles are then asked where
  // it will be seen, not at the old dataset's position.
  if (!hadAladin || newName || params.has('ra') || params.has('proj')) {
    if (T.aladin.getProjectionName() !== proj) T.aladin.setProjection(proj);
    // The target string is read in cooFrame; the HiPS centre is ICRS: go there explicitly.
    T.aladin.gotoRaDec(ra, dec);
    T.aladin.setFoV(fov);
  }
  if (hadAladin && (newName || params.has('plane') || sky.urlPlane !== sky.plane || sky.gen !== sky.urlGen)) {
    T.aladin.setImageSurvey(survey());
  }
  sky.urlPlane = sky.plane;
  sky.urlGen = sky.gen;
  T.aladin.setFrame(alFrame);
  sky.frame = frame;
  sky.name = name;
  await setLayer(params.get('layer'), params.get('opacity'));
  drawFootprint(d);
  $('#sky-info').textContent = `${name}: HiPS order ${props.hips_order || '?'}, ` +
    `tiles ${props.hips_tile_format || ''}, frame ${props.hips_frame || '?'}` +
    (sky.depth ? `, cube of ${sky.depth} planes` : '');
  replaceHash('sky', name, skyParams());
}

/** The sky view's Aladin Lite, opened on `survey`. */
function createAladin(survey, alFrame, proj, fov, ra, dec) {
  T.aladin = A.aladin('#aladin', {
    survey,
    hipsList: [],
    log: false, // no start-up report to alasky.unistra.fr
    cooFrame: alFrame,
    projection: proj,
    fov,
    target: `${ra} ${dec}`,
    showLayersControl: false,
    showSettingsControl: false,
    showShareControl: false,
    showSimbadPointerControl: false,
    showContextMenu: false,
    showFrame: false,
    showCooGridControl: true,
    showProjectionControl: true,
    showFullscreenControl: true,
  });
  // Aladin keeps one callback per event.
  T.aladin.on('mouseMove', skyMouseMove);
  T.aladin.on('positionChanged', skyMoved);
  T.aladin.on('zoomChanged', skyMoved);
  T.aladin.on('projectionChanged', recordSky);
  T.aladin.on('click', skyClick);
}

function skyMouseMove(e) {
  let c = null;
  try { c = T.aladin.pix2world(e.x, e.y, 'icrs'); } catch (_) { c = null; }
  const d = findDataset(sky.name);
  const cur = c ? { ra: c[0], dec: c[1] } : null;
  T.cursor = cur;
  const box = $('#sky-cursor');
  if (!c) { box.textContent = 'cursor: outside the sky'; return; }
  const text = cursorText(c[0], c[1], sky.frame);
  box.textContent = text;
  if (!d) return; // a collection: the position only
  // The dataset's pixel under the cursor: through the server's full WCS (a plate
  // solution's polynomial moves horsehead's pixels by arcseconds), the linear WCS of the
  // summary only where the server has no transform route.
  const atPixel = (p) => {
    if (T.cursor !== cur) return;
    const x = p ? Math.round(p[0]) : -1, y = p ? Math.round(p[1]) : -1;
    if (!(x >= 0 && y >= 0 && x < d.shape[0] && y < d.shape[1])) { box.textContent = text; return; }
    const t = `${text} · pixel x=${x} y=${y}`;
    cur.x = x;
    cur.y = y;
    cur.px = p;
    box.textContent = t;
    readValue(d, x, y, sky.plane || 0, (v) => { if (T.cursor === cur && cur.x === x && cur.y === y) box.textContent = v ? `${t} · ${v}` : t; });
  };
  readTransform('sky', d, `lon=${c[0]}&lat=${c[1]}&frame=icrs`, (p) => {
    if (p !== undefined) { atPixel(p); return; }
    const inv = makeSky2Pix(d.wcs);
    const native = d.wcs.frame === 'galactic' ? icrsToGal(c[0], c[1]) : c;
    atPixel(inv ? inv(native[0], native[1]) : null);
  });
}

function skyPlaneLabel(d) {
  let t = `plane ${sky.plane} / ${sky.depth - 1}`;
  if (d.wcs && d.wcs.ctype.length > 2) {
    const au = axisUnit(d.wcs.cunit && d.wcs.cunit[2]);
    t += ` · ${d.wcs.ctype[2]} ${fmt(au.f(linearWorld(d.wcs, 2, sky.plane)), 3)} ${au.unit}`;
  }
  $('#sky-plane-label').textContent = t;
}
let skyPlaneTimer = null;
function setSkyPlane(z) {
  if (sky.plane === null || !T.aladin) return;
  z = Math.max(0, Math.min(sky.depth - 1, z));
  sky.plane = z;
  $('#sky-plane').value = String(z);
  skyPlaneLabel(findDataset(sky.name));
  clearTimeout(skyPlaneTimer);
  skyPlaneTimer = setTimeout(() => {
    T.aladin.setImageSurvey(A.imageHiPS(surveyUrl(sky.name, sky.plane), { name: sky.name, imgFormat: 'png' }));
    sky.urlPlane = sky.plane;
    recordSky();
  }, 150);
}

/** A second dataset drawn over the first with an opacity (and optional blinking). */
async function setLayer(name, opacity) {
  const sel = $('#sky-layer');
  const list = (T.datasets || []).filter((x) => x.celestial && x.name !== sky.name);
  const cur = name && list.some((x) => x.name === name) ? name : '';
  sel.replaceChildren(new Option('none', ''), ...list.map((x) => new Option(x.name, x.name)));
  sel.value = cur;
  const op = parseFloat(opacity);
  if (Number.isFinite(op) && op >= 0 && op <= 1) $('#sky-opacity').value = String(op);
  $('#sky-opacity').disabled = !cur;
  $('#sky-blink').disabled = !cur;
  if (!cur) {
    if (sky.layer) { try { T.aladin.removeImageLayer('layer'); } catch (_) { /* none */ } }
    sky.layer = null;
    stopBlink();
    return;
  }
  if (sky.layer !== cur) {
    const props = parseProperties(await getText(`/hips/${enc(cur)}/properties`));
    T.aladin.setOverlayImageLayer(A.imageHiPS(`${location.origin}/hips/${enc(cur)}`,
      { name: cur, imgFormat: 'png', opacity: parseFloat($('#sky-opacity').value) }), 'layer');
    sky.layer = cur;
  }
  layerOpacity();
}
function layerOpacity(forced) {
  if (!sky.layer || !T.aladin) return;
  const op = forced !== undefined ? forced : parseFloat($('#sky-opacity').value);
  const l = T.aladin.getOverlayImageLayer('layer');
  if (l) l.setOpacity(op);
}
function stopBlink() {
  clearInterval(sky.blink);
  sky.blink = null;
  $('#sky-blink').textContent = 'blink';
}

function drawFootprint(d) {
  if (!T.aladin) return;
  if (!sky.overlay) {
    sky.overlay = A.graphicOverlay({ name: 'footprint', color: '#ffd400', lineWidth: 2 });
    T.aladin.addOverlay(sky.overlay);
  }
  sky.overlay.removeAll();
  T.footprint = null;
  T.footprintSource = null;
  if (!$('#sky-footprint').checked) return;
  const name = d.name;
  const url = `/api/v1/datasets/${enc(name)}/footprint?frame=icrs`;
  // The server's outline (its full WCS, distortions included); the viewer's own linear
  // one when the server has no footprint route.
  feature('footprint', url).then(async (ok) => {
    let pts = null, src = 'viewer';
    if (ok) {
      try {
        const f = await getJSON(url);
        if (Array.isArray(f.polygon) && f.polygon.length >= 3) { pts = f.polygon; src = 'server'; }
        else if (f.polygon === null || (Array.isArray(f.polygon) && !f.polygon.length)) src = 'server';
      } catch (e) {
        showMessage(`the outline of '${name}': ${e.message}`, 'error', 'sky-footprint');
      }
    }
    if (!pts && src === 'viewer') pts = footprintIcrs(d.wcs, d.shape[0], d.shape[1]);
    if (sky.name !== name || !$('#sky-footprint').checked) return;
    sky.overlay.removeAll();
    T.footprintSource = src;
    if (!pts) return; // all-sky maps and unsupported projections: no outline
    T.footprint = pts;
    sky.overlay.add(A.polygon(pts));
  });
}

async function exportSkyPng() {
  if (!T.aladin) return;
  const url = await T.aladin.getViewDataURL({ format: 'image/png' });
  download(url, `${sky.name || col.name}${sky.plane !== null ? `_plane${sky.plane}` : ''}_sky.png`);
}
function download(href, filename) {
  const a = document.createElement('a');
  a.href = href;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
}

$('#sky-dataset').addEventListener('change', (e) => {
  const v = e.target.value;
  const c = v.startsWith('collection:') ? v.slice(11) : null;
  location.hash = hashFor(c ? 'collection' : 'sky', c || v, { frame: $('#sky-frame').value });
});
$('#sky-frame').addEventListener('change', (e) => {
  const frame = e.target.value;
  if (T.aladin) T.aladin.setFrame(frame === 'galactic' ? 'galactic' : 'ICRS');
  sky.frame = frame;
  if (sky.name) replaceHash('sky', sky.name, skyParams());
  else if (col.name) replaceHash('collection', col.name, skyParams());
});
$('#sky-footprint').addEventListener('change', () => {
  if (col.name) { drawMembers(); return; }
  const d = findDataset(sky.name);
  if (d) drawFootprint(d);
});
$('#sky-plane').addEventListener('input', (e) => setSkyPlane(parseInt(e.target.value, 10)));
/** Fixed levels in the sky view of a cube: the shown plane's 0.5% and 99.5% levels (the
 * server's histogram) for the pictures of every plane. */
$('#sky-fixcuts').addEventListener('change', async (e) => {
  const d = findDataset(sky.name);
  if (!d || sky.plane === null || !T.aladin) return;
  let cuts = null;
  if (e.target.checked) {
    const h = await histogram(d, sky.plane).catch(() => null);
    const lo = cutValue('0.5%', h), hi = cutValue('99.5%', h);
    if (lo === null || hi === null || !(lo < hi)) {
      showMessage('Fixed cut levels need the server\'s histogram of the plane.', 'error', 'sky-cuts');
      e.target.checked = false;
      return;
    }
    cuts = { lo: Number(lo.toPrecision(6)), hi: Number(hi.toPrecision(6)), n: (sky.cuts ? sky.cuts.n : 0) + 1 };
  }
  clearMessage('sky-cuts');
  sky.cuts = cuts;
  T.aladin.setImageSurvey(A.imageHiPS(surveyUrl(sky.name, sky.plane), { name: sky.name, imgFormat: 'png' }));
  sky.urlPlane = sky.plane;
  recordSky();
});
$('#sky-prev').addEventListener('click', () => setSkyPlane(sky.plane - 1));
$('#sky-next').addEventListener('click', () => setSkyPlane(sky.plane + 1));
$('#sky-layer').addEventListener('change', (e) => {
  setLayer(e.target.value, null).then(recordSky, (err) => showMessage(`cannot add the layer: ${err.message}`, 'error', 'sky-layer'));
});
$('#sky-opacity').addEventListener('input', () => { if (!sky.blink) layerOpacity(); recordSky(); });
$('#sky-blink').addEventListener('click', () => {
  if (sky.blink) { stopBlink(); layerOpacity(); return; }
  let on = false;
  $('#sky-blink').textContent = 'stop';
  sky.blink = setInterval(() => { on = !on; layerOpacity(on ? 1 : 0); }, 700);
});
$('#sky-png').addEventListener('click', () => exportSkyPng().catch((e) => showMessage(`cannot export the picture: ${e.message}`)));

// ---- collections in the sky view ---------------------------------------------------------------
// A collection (a folder of images served as one sky) opens in the sky view on its own HiPS
// (/hips/{name}/) when the server has one, else over a dataset of the server as background.
// The footprints of the members in the view come from SIA 2.0 (a circle around the view,
// at most MEMBERS_MAX rows) and are drawn again when the view moves; a click lists the
// members under the cursor with links to their FITS and DataLink.
const MEMBERS_MAX = 500;
const UNDER_MAX = 100;
const CLICK_PIXELS = 4;
const col = { name: null, overlay: null, hilite: null, timer: null, gen: 0, clickGen: 0, hips: false };
T.collections = null;
T.collection = null;

/** GET /api/v1/collections, or [] where the server has no collections. */
async function loadCollections(force = false) {
  if (T.collections && !force) return T.collections;
  if (!(await feature('collections', '/api/v1/collections'))) return (T.collections = []);
  T.collections = await getJSON('/api/v1/collections');
  return T.collections;
}

/** The collections' cards under the datasets. */
async function showCollectionList() {
  let list;
  try {
    list = await loadCollections(true);
  } catch (e) {
    failure('collections', `cannot list the collections: ${e.message}`, isOutage(e));
    return;
  }
  clearMessage('collections');
  const box = $('#collection-list');
  box.replaceChildren();
  $('#collections').hidden = !list.length;
  for (const c of list) {
    const { card, meta } = newCard(c.name, 'collection', ['kind', 'links']);
    meta.querySelector('.kind').textContent = `collection · ${c.members} images` +
      (c.unreadable_count ? ` · ${c.unreadable_count} unreadable` : '');
    meta.querySelector('.links').append(viewLink('collection', c.name, 'sky'));
    card.append(meta);
    box.append(card);
  }
}

/** The collections as options of the sky view's dataset list (value "collection:NAME"). */
function addCollectionOptions(current) {
  const sel = $('#sky-dataset');
  for (const g of sel.querySelectorAll('optgroup')) g.remove();
  if (!T.collections || !T.collections.length) return;
  const g = document.createElement('optgroup');
  g.label = 'collections';
  for (const c of T.collections) g.append(new Option(c.name, `collection:${c.name}`));
  sel.append(g);
  if (current) sel.value = `collection:${current}`;
}

/** The background survey when the collection has no HiPS: the survey already shown, else
 * the server's widest celestial dataset (an all-sky map where it has one: a narrow image
 * elsewhere on the sky would only answer 404 for every tile), never a survey from elsewhere. */
function backgroundSurvey(list) {
  const width = (x) => (pixelScaleArcsec(x.wcs) || 0) * Math.max(x.shape[0] || 0, x.shape[1] || 0) *
    (x.kind === 'image' ? 1 : 0.999); // an image before a cube of the same width
  let d = null;
  for (const x of list) if (x.celestial && x.wcs && (!d || width(x) > width(d))) d = x;
  return d ? { survey: A.imageHiPS(surveyUrl(d.name, d.kind === 'image' ? null : midPlane(d)), { name: d.name, imgFormat: 'png' }), name: d.name } : null;
}

async function showCollection(name, params) {
  // Fresh when another collection opens: its extent and number of members change as the
  // server's index follows the folder.
  let list;
  try {
    list = await loadCollections(!name || name !== col.name);
  } catch (e) {
    failure('sky-open', `cannot list the collections: ${e.message}`, isOutage(e));
    return;
  }
  if (!list.length) throw new Error('This server has no collections.');
  if (!name) name = col.name || list[0].name;
  const info = list.find((c) => c.name === name);
  if (!info) throw new Error(`no collection named '${name}'`);
  const datasets = await loadDatasets();
  fillSelect($('#sky-dataset'), datasets.filter((d) => d.celestial), '');
  addCollectionOptions(name);
  $('#sky-to-pixels').hidden = true;
  $('#sky-plane-row').hidden = true;
  // The collection's own HiPS where the server makes one (its properties answer 200).
  let hips = false;
  try { hips = (await realFetch(`/hips/${enc(name)}/properties`, { cache: 'no-store' })).ok; } catch (_) { hips = false; }
  clearMessage('sky-open');
  await loadAladin();
  const frame = params.get('frame') === 'galactic' ? 'galactic' : 'icrs';
  $('#sky-frame').value = frame;
  const alFrame = frame === 'galactic' ? 'galactic' : 'ICRS';
  // The circle of the members' footprints (the server's; none without a member).
  const ext = Number.isFinite(info.radius) ? info : { ra: 0, dec: 0, radius: 90 };
  const el = $('#aladin');
  const aspect = el.clientHeight > 0 ? Math.max(1, el.clientWidth / el.clientHeight) : 1;
  let fov = Math.min(180, Math.max(ext.radius * 2.3 * aspect, 1 / 60));
  let ra = ext.ra, dec = ext.dec, proj = 'SIN';
  const pra = parseFloat(params.get('ra')), pdec = parseFloat(params.get('dec')), pfov = parseFloat(params.get('fov'));
  if (Number.isFinite(pra) && Number.isFinite(pdec) && Math.abs(pdec) <= 90) { ra = pra; dec = pdec; }
  if (Number.isFinite(pfov) && pfov > 0 && pfov <= 360) fov = pfov;
  if (/^[A-Z]{3}$/.test(params.get('proj') || '')) proj = params.get('proj');
  const newName = col.name !== name;
  let background = null;
  const survey = hips ? A.imageHiPS(surveyUrl(name, null), { name, imgFormat: 'png' }) : null;
  // The view moves before its survey changes: the new survey's first tiles are those of
  // the collection's sky (Aladin asks for them before it has the survey's coverage).
  const move = () => {
    if (T.aladin.getProjectionName() !== proj) T.aladin.setProjection(proj);
    T.aladin.gotoRaDec(ra, dec);
    T.aladin.setFoV(fov);
  };
  if (T.aladin && (newName || params.has('ra') || params.has('proj'))) move();
  if (!T.aladin) {
    const bg = survey ? null : backgroundSurvey(datasets);
    background = bg ? bg.name : null;
    createAladin(survey || (bg && bg.survey), alFrame, proj, fov, ra, dec);
    move(); // the target string is read in cooFrame; the centre is ICRS
  } else if (survey) {
    if (newName || !col.hips) T.aladin.setImageSurvey(survey);
  } else if (newName || col.hips) {
    // A dataset's survey or another collection's HiPS is shown: the background instead.
    const bg = backgroundSurvey(datasets);
    if (bg) T.aladin.setImageSurvey(bg.survey);
    background = bg ? bg.name : null;
  } else {
    background = col.background;
  }
  if (sky.overlay) sky.overlay.removeAll();
  T.footprint = null;
  sky.name = null;
  sky.plane = null;
  sky.depth = 0;
  T.aladin.setFrame(alFrame);
  sky.frame = frame;
  if (newName) showUnder(null);
  col.name = name;
  col.hips = hips;
  col.background = background;
  T.collection = { name, hips, background, members: info.members, footprints: null, under: null };
  $('#sky-members').hidden = false;
  await setLayer(params.get('layer'), params.get('opacity'));
  $('#sky-info').textContent = `${name}: collection of ${info.members} images, ` +
    (hips ? `HiPS /hips/${name}/` : `no HiPS of its own yet: footprints over ${background || 'the current survey'}`);
  drawMembers();
  replaceHash('collection', name, skyParams());
}

/** Back to a dataset's sky: the collection's footprints, highlight and list go. */
function leaveCollection() {
  if (!col.name) return;
  col.name = null;
  col.hips = false;
  col.gen += 1;
  col.clickGen += 1;
  clearTimeout(col.timer);
  if (col.overlay) col.overlay.removeAll();
  if (col.hilite) col.hilite.removeAll();
  clearMessage('sky-members');
  T.collection = null;
  $('#sky-members').hidden = true;
  showUnder(null);
}

/** The rows of an SIA 2.0 VOTable answer as {field: text} objects, and whether it overflowed. */
async function siaQuery(params) {
  const q = new URLSearchParams({ RESPONSEFORMAT: 'application/x-votable+xml', ...params });
  const text = await getText(`/vo/sia/query?${q}`);
  const doc = new DOMParser().parseFromString(text, 'application/xml');
  const res = [...doc.getElementsByTagName('RESOURCE')].find((r) => r.getAttribute('type') === 'results');
  if (!res) throw new Error('the SIA answer has no results');
  const infos = [...res.children].filter((e) => e.localName === 'INFO' && e.getAttribute('name') === 'QUERY_STATUS');
  if (infos.some((e) => e.getAttribute('value') === 'ERROR')) throw new Error(`SIA: ${infos[0].textContent}`);
  const names = [...res.getElementsByTagName('FIELD')].map((f) => f.getAttribute('name'));
  const rows = [...res.getElementsByTagName('TR')].map((tr) => {
    const o = {};
    [...tr.getElementsByTagName('TD')].forEach((td, i) => { o[names[i]] = td.textContent; });
    return o;
  });
  return { rows, overflow: infos.some((e) => e.getAttribute('value') === 'OVERFLOW') };
}
/** The vertices [[ra, dec], ...] of an s_region "POLYGON [frame] ra dec ...", or null. */
function regionPoints(s) {
  const m = /^\s*POLYGON\s+(?:[A-Za-z]\w*\s+)?([-+0-9.eE\s]+)$/.exec(s || '');
  if (!m) return null;
  const v = m[1].trim().split(/\s+/).map(Number);
  if (v.length < 6 || v.length % 2 || v.some((x) => !Number.isFinite(x))) return null;
  const pts = [];
  for (let i = 0; i < v.length; i += 2) pts.push([v[i], v[i + 1]]);
  return pts;
}

function scheduleMembers() {
  if (!col.name) return;
  clearTimeout(col.timer);
  col.timer = setTimeout(drawMembers, 300);
}
/** The footprints of the members in the view (a circle around it), drawn as polygons. */
async function drawMembers() {
  if (!col.name || !T.aladin) return;
  const name = col.name;
  const gen = ++col.gen;
  if (!col.overlay) {
    col.overlay = A.graphicOverlay({ name: 'members', color: '#3ee0a0', lineWidth: 1 });
    T.aladin.addOverlay(col.overlay);
  }
  if (!$('#sky-footprint').checked) {
    col.overlay.removeAll();
    T.collection.footprints = null;
    return;
  }
  const [ra, dec] = T.aladin.getRaDec();
  const [w, h] = T.aladin.getFov();
  const r = Math.min(90, 0.5 * Math.hypot(w, h));
  const pos = `CIRCLE ${ra.toFixed(8)} ${dec.toFixed(8)} ${r.toPrecision(8)}`;
  let ans;
  try {
    ans = await siaQuery({ POS: pos, COLLECTION: name, MAXREC: String(MEMBERS_MAX) });
  } catch (e) {
    if (gen === col.gen) failure('sky-members', `cannot find the members of '${name}' in the view: ${e.message}`, isOutage(e));
    return;
  }
  if (gen !== col.gen || col.name !== name) return;
  clearMessage('sky-members');
  col.overlay.removeAll();
  const ids = [];
  for (const row of ans.rows) {
    const pts = regionPoints(row.s_region);
    if (!pts) continue;
    col.overlay.add(A.polygon(pts, { name: row.obs_id }));
    ids.push(row.obs_id);
  }
  if (ans.overflow) {
    showMessage(`More than ${MEMBERS_MAX} images of '${name}' are in the view: ${MEMBERS_MAX} footprints are drawn; zoom in to see all of them.`, 'info', 'sky-members-many');
  } else {
    clearMessage('sky-members-many');
  }
  T.collection.footprints = { pos, ids, overflow: ans.overflow, drawn: col.overlay.overlayItems.length };
}

/** A click in a collection's sky lists the members under the cursor (a few pixels around it). */
function skyClick(e) {
  if (!col.name || !e || e.isDragging || !Number.isFinite(e.ra) || !Number.isFinite(e.dec)) return;
  const [w] = T.aladin.getFov();
  const [pw] = T.aladin.getSize();
  const r = Math.max(1e-6, (w / Math.max(1, pw)) * CLICK_PIXELS);
  listUnder(e.ra, e.dec, r);
}
async function listUnder(ra, dec, r) {
  const name = col.name;
  const gen = ++col.clickGen;
  const pos = `CIRCLE ${ra.toFixed(8)} ${dec.toFixed(8)} ${r.toPrecision(6)}`;
  let ans;
  try {
    ans = await siaQuery({ POS: pos, COLLECTION: name, MAXREC: String(UNDER_MAX) });
  } catch (e) {
    if (gen === col.clickGen) failure('sky-under', `cannot list the images under the cursor: ${e.message}`, isOutage(e));
    return;
  }
  if (gen !== col.clickGen || col.name !== name) return;
  clearMessage('sky-under');
  showUnder({ ra, dec, r, pos, rows: ans.rows, overflow: ans.overflow });
}

/** MJD to "YYYY-MM-DD hh:mm:ss" (UTC), or '' when absent. */
function mjdText(v) {
  const x = parseFloat(v);
  if (!Number.isFinite(x)) return '';
  return new Date((x - 40587) * 86400000).toISOString().slice(0, 19).replace('T', ' ');
}
/** The band of a row: its FILTER, else its wavelengths in nm. */
function bandText(row) {
  if (row.filter) return row.filter;
  const a = parseFloat(row.em_min), b = parseFloat(row.em_max);
  if (!Number.isFinite(a)) return '';
  return a === b || !Number.isFinite(b) ? `${(a * 1e9).toPrecision(4)} nm` : `${(a * 1e9).toPrecision(4)}–${(b * 1e9).toPrecision(4)} nm`;
}
/** The list of the images under a click (null: none yet), their footprints highlighted. */
function showUnder(u) {
  const body = $('#sky-members-table tbody');
  body.replaceChildren();
  if (col.hilite) col.hilite.removeAll();
  if (T.collection) T.collection.under = u ? { pos: u.pos, ids: u.rows.map((r) => r.obs_id) } : null;
  if (!u) {
    $('#sky-members-title').textContent = 'Click the sky to list the images under the cursor.';
    $('#sky-members-table').hidden = true;
    return;
  }
  const where = worldText(u.ra, u.dec, sky.frame);
  $('#sky-members-title').textContent = u.rows.length
    ? `${u.rows.length}${u.overflow ? '+' : ''} image${u.rows.length === 1 ? '' : 's'} under ${where}`
    : `No image of '${col.name}' under ${where}.`;
  $('#sky-members-table').hidden = !u.rows.length;
  if (!col.hilite && T.aladin) {
    col.hilite = A.graphicOverlay({ name: 'under the cursor', color: '#ff5cf4', lineWidth: 3 });
    T.aladin.addOverlay(col.hilite);
  }
  for (const row of u.rows) {
    const tr = document.createElement('tr');
    tr.dataset.obsId = row.obs_id;
    const id = document.createElement('td');
    id.textContent = row.obs_id;
    const date = document.createElement('td');
    date.textContent = mjdText(row.t_min);
    const band = document.createElement('td');
    band.textContent = bandText(row);
    const links = document.createElement('td');
    const fits = document.createElement('a');
    fits.href = row.access_url;
    fits.textContent = 'FITS';
    fits.className = 'member-fits';
    fits.download = row.obs_id.split('/').pop();
    const dl = document.createElement('a');
    dl.href = `/vo/datalink?ID=${enc(row.obs_publisher_did)}`;
    dl.textContent = 'DataLink';
    dl.className = 'member-datalink';
    dl.target = '_blank';
    links.append(fits, dl);
    tr.append(id, date, band, links);
    body.append(tr);
    const pts = regionPoints(row.s_region);
    if (pts && col.hilite) col.hilite.add(A.polygon(pts, { name: row.obs_id }));
  }
}

// ---- pixel view (OpenSeadragon + uPlot) ------------------------------------------------------
const px = {
  name: null, z: 0, axis: 'xy', stretch: 'linear', min: '0.5%', max: '99.5%', cmap: 'grey',
  fixed: false, pick: null, openKey: null, view: null, failedTiles: 0,
};
const STRETCHES = ['linear', 'sqrt', 'log', 'asinh', 'power'];
// The colour maps of engine/image/render.c (cmap_names), each also reversed with _r.
const CMAP_BASES = ['grey', 'viridis', 'inferno', 'magma', 'plasma', 'cubehelix', 'Greys',
  'coolwarm', 'RdBu', 'twilight', 'turbo', 'jet'];
const CMAPS = CMAP_BASES.concat(CMAP_BASES.map((c) => c + '_r'));
for (const c of CMAPS) {
  const o = document.createElement('option');
  o.textContent = c;
  $('#px-cmap').append(o);
}

function renderQuery() {
  const q = new URLSearchParams();
  q.set('stretch', px.stretch);
  q.set('min_cut', px.min);
  q.set('max_cut', px.max);
  q.set('cmap', px.cmap);
  return q.toString();
}
function pixelParams() {
  const p = { z: px.z, axis: px.axis, stretch: px.stretch, min: px.min, max: px.max, cmap: px.cmap };
  if (px.fixed) p.fixed = 1;
  if (px.pick) { p.x = px.pick.x; p.y = px.pick.y; }
  const v = currentOsdView();
  if (v) Object.assign(p, v);
  return p;
}
/** The OpenSeadragon view as zoom (1: the picture's width fills the view) and centre (cx, cy,
 * picture pixels from the top left), or null before a picture is open. */
function currentOsdView() {
  const osd = T.osd;
  if (!osd || !osd.world.getItemCount()) return null;
  const vp = osd.viewport;
  const c = osd.world.getItemAt(0).viewportToImageCoordinates(vp.getCenter(false));
  return { zoom: Number(vp.getZoom(false).toPrecision(5)), cx: Number(c.x.toFixed(2)), cy: Number(c.y.toFixed(2)) };
}
let pxHashTimer = null;
function recordPixels() {
  clearTimeout(pxHashTimer);
  pxHashTimer = setTimeout(() => { if (T.view === 'pixels' && px.name) replaceHash('pixels', px.name, pixelParams()); }, 200);
}
/** The number of positions the slider runs over for the current cut axis. */
function sliderMax(d) {
  if (px.axis === 'xz') return d.shape[1] - 1;
  if (px.axis === 'yz') return d.shape[0] - 1;
  return planeCount(d) - 1;
}

/** Checks a cut level: a number, or a percentile "p%" with 0 <= p <= 100. */
function cutLevel(s) {
  const m = String(s).trim().match(/^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(%?)$/);
  if (!m) return null;
  const v = parseFloat(m[1]);
  if (m[2] && (v < 0 || v > 100)) return null;
  return { pct: !!m[2], v };
}
/** The reason the cut levels cannot be used, or null. */
function cutProblem(min, max) {
  const a = cutLevel(min), b = cutLevel(max);
  if (!a) return `min_cut '${min}' is neither a number nor a percentile such as 0.5%`;
  if (!b) return `max_cut '${max}' is neither a number nor a percentile such as 99.5%`;
  if (a.pct === b.pct && a.v >= b.v) return `min_cut ${min} must be below max_cut ${max}`;
  return null;
}

function ensureOsd() {
  if (T.osd) return T.osd;
  if (!window.OpenSeadragon) throw new Error('OpenSeadragon is not installed on this server (/vendor/openseadragon); run scripts/setup.sh (npm ci)');
  T.osd = window.OpenSeadragon({
    element: $('#osd'),
    prefixUrl: '/vendor/openseadragon/images/',
    showNavigationControl: true,
    showNavigator: false,
    preserveViewport: true,
    maxZoomPixelRatio: 24,
    imageSmoothingEnabled: false,
    crossOriginPolicy: false,
    gestureSettingsMouse: { clickToZoom: false, dblClickToZoom: true },
    gestureSettingsTouch: { clickToZoom: false },
  });
  T.osd.addHandler('open-failed', (e) => {
    px.openKey = null;
    failure('px-open', `cannot open the image: ${e.message || 'failed'}`, true);
  });
  T.osd.addHandler('tile-load-failed', (e) => {
    const url = e.tile && (e.tile.getUrl ? e.tile.getUrl() : e.tile.url);
    px.failedTiles += 1;
    px.openKey = null; // not done: the next open (or the retry) asks again
    const n = px.failedTiles;
    const say = (detail, retry) => failure('px-tiles',
      `${n === 1 ? 'a tile' : `${n} tiles`} of '${px.name}' did not load: ${detail}`, retry);
    if (n === 1) {
      say(e.message || 'failed', false);
      checkUrl(url).then((err) => say(err ? err.message : (e.message || 'failed'), !err || isOutage(err)));
    } else {
      const p = $('#messages [data-key="px-tiles"]');
      if (p) p.lastChild.textContent = p.lastChild.textContent.replace(/^(a tile|\d+ tiles)/, `${n} tiles`);
    }
  });
  T.osd.addHandler('tile-loaded', () => { if (!px.failedTiles) { clearMessage('px-tiles'); clearMessage('px-open'); } });
  T.osd.addHandler('canvas-click', (e) => {
    if (!e.quick) return;
    e.preventDefaultAction = true;
    const vp = T.osd.viewport.pointFromPixel(e.position);
    const img = T.osd.viewport.viewportToImageCoordinates(vp);
    pickPicture(Math.floor(img.x), Math.floor(img.y));
  });
  T.osd.addHandler('animation-finish', recordPixels);
  T.osd.addHandler('update-viewport', drawAxes);
  $('#osd').addEventListener('mousemove', pixelMouseMove);
  $('#osd').addEventListener('mouseleave', () => { $('#px-cursor').textContent = 'cursor: –'; });
  return T.osd;
}

/** Asks a failed URL again; resolves with the error carrying the server's detail (or null). */
async function checkUrl(url) {
  if (!url) return null;
  try { await request(url); return null; } catch (e) { return e; }
}

/** The picture pixel under a mouse event, as FITS indices {x, y, z} of the dataset (z the
 * plane), or null outside the picture. */
function pictureToData(ix, iy) {
  const d = findDataset(px.name);
  const nx = d.shape[0], ny = d.shape[1], nz = planeCount(d);
  let x, y, z;
  // FITS row 1 (and z = 0 in vertical cuts) is at the bottom of the picture.
  if (px.axis === 'xy') { x = ix; y = ny - 1 - iy; z = px.z; }
  else if (px.axis === 'xz') { x = ix; y = px.z; z = nz - 1 - iy; }
  else { x = px.z; y = ix; z = nz - 1 - iy; }
  if (x < 0 || y < 0 || z < 0 || x >= nx || y >= ny || z >= nz) return null;
  return { x, y, z };
}

function pixelMouseMove(ev) {
  const osd = T.osd;
  if (!osd || !osd.world.getItemCount() || !px.name) return;
  const r = $('#osd').getBoundingClientRect();
  const vp = osd.viewport.pointFromPixel(new window.OpenSeadragon.Point(ev.clientX - r.left, ev.clientY - r.top));
  const img = osd.world.getItemAt(0).viewportToImageCoordinates(vp);
  const p = pictureToData(Math.floor(img.x), Math.floor(img.y));
  const box = $('#px-cursor');
  if (!p) { box.textContent = 'cursor: outside the image'; T.cursor = null; return; }
  const d = findDataset(px.name);
  T.cursor = p;
  // The parts of the line: the world coordinates come from the server's full WCS (the
  // linear one of the summary is shown until they arrive, and kept without the route).
  const parts = { head: `pixel x=${p.x} y=${p.y}${planeCount(d) > 1 ? ` z=${p.z}` : ''}`, world: '', tail: '', value: '' };
  const show = () => {
    if (T.cursor === p) box.textContent = [parts.head, parts.world, parts.tail, parts.value].filter((t) => t).join(' · ');
  };
  const fr = d.celestial && d.wcs ? (d.wcs.frame === 'galactic' ? 'galactic' : 'icrs') : null;
  const worldText = (w, frame) => (frame === 'galactic' ? `(galactic) l ${fmt(w[0], 5)}° b ${fmt(w[1], 5)}°`
    : `(${frame}) α ${fmt(w[0], 5)}° ${sexa(w[0], true)} δ ${fmt(w[1], 5)}° ${sexa(w[1], false)}`);
  const f = d.celestial ? makePix2Sky(d.wcs) : null;
  const w = f ? f(p.x, p.y) : null;
  if (w) parts.world = worldText(w, d.wcs.frame || 'icrs');
  if (planeCount(d) > 1 && d.wcs && d.wcs.ctype.length > 2) {
    const au = axisUnit(d.wcs.cunit && d.wcs.cunit[2]);
    parts.tail = `${d.wcs.ctype[2]} ${fmt(au.f(linearWorld(d.wcs, 2, p.z)), 3)} ${au.unit}`;
  }
  show();
  if (fr) {
    readTransform('px', d, `x=${p.x}&y=${p.y}&frame=${fr}`, (sw) => {
      if (sw === undefined) return;
      parts.world = sw ? worldText(sw, fr) : '';
      if (T.cursor === p) T.cursor.world = sw ? { frame: fr, lon: sw[0], lat: sw[1] } : null;
      show();
    });
  }
  if (d.solar) {
    // An image of the Sun: its own frame (helioprojective in arcseconds, heliographic in
    // degrees) and, for a helioprojective one, the Stonyhurst position on the disk.
    const sf = d.solar.frame;
    const solarText = (v, frame) => (frame === 'helioprojective'
      ? `(helioprojective) Tx ${fmt(v[0], 2)}″ Ty ${fmt(v[1], 2)}″`
      : `(${frame}) lon ${fmt(v[0], 4)}° lat ${fmt(v[1], 4)}°`);
    let own = '', hg = '';
    const solarShow = () => { parts.world = [own, hg].filter((t) => t).join(' · '); show(); };
    readTransform('px', d, `x=${p.x}&y=${p.y}&frame=${sf}`, (v) => {
      if (v === undefined) return;
      own = v ? solarText(v, sf) : '';
      if (T.cursor === p) T.cursor.solar = v ? { frame: sf, lon: v[0], lat: v[1] } : null;
      solarShow();
    });
    if (sf === 'helioprojective' && d.solar.observer) {
      readTransform('px-hg', d, `x=${p.x}&y=${p.y}&frame=stonyhurst`, (v) => {
        if (v === undefined) return;
        hg = v ? solarText(v, 'stonyhurst') : '(stonyhurst) off the disk';
        if (T.cursor === p) T.cursor.stonyhurst = v ? { lon: v[0], lat: v[1] } : null;
        solarShow();
      });
    }
  }
  readValue(d, p.x, p.y, p.z, (v) => { parts.value = v; show(); });
}

async function openPixels() {
  const d = findDataset(px.name);
  const osd = ensureOsd();
  // The spectrum's plane line and the picked value belong to the xy view: drawn again
  // (or left out) for the axis now shown.
  if (T.plot) T.plot.redraw(false);
  pickText();
  const problem = cutProblem(px.min, px.max);
  $('#px-min').classList.toggle('invalid', !cutLevel(px.min) || !!problem && /^min/.test(problem));
  $('#px-max').classList.toggle('invalid', !cutLevel(px.max) || !!problem && /^max/.test(problem));
  if (problem) {
    // No tile is asked for with levels the server would refuse; a picture of another
    // dataset does not stay on the screen.
    showMessage(`Cut levels: ${problem}.`, 'error', 'cuts');
    if (px.openKey && px.openKey.split('|')[0] !== px.name) osd.close();
    px.openKey = null;
    return;
  }
  clearMessage('cuts');
  const key = `${px.name}|${px.axis}|${px.z}|${renderQuery()}`;
  if (px.openKey === key) return;
  // The URL holds what was asked for, so that a retry after a failure asks for it again.
  replaceHash('pixels', px.name, pixelParams());
  const resetView = !px.openKey || px.openKey.split('|').slice(0, 2).join('|') !== `${px.name}|${px.axis}`;
  px.openKey = key;
  px.failedTiles = 0;
  clearMessage('px-tiles');
  const q = renderQuery();
  let source;
  if (px.axis === 'xy') {
    const id = iiifId(d, px.z);
    let info;
    try {
      info = await getJSON(`/iiif/3/${enc(id)}/info.json`);
    } catch (e) {
      if (px.openKey === key) px.openKey = null;
      failure('px-open', `cannot open '${d.name}': ${e.message}`, isOutage(e));
      return;
    }
    clearMessage('px-open');
    if (px.openKey !== key) return; // a newer request won
    const opts = window.OpenSeadragon.IIIFTileSource.prototype.configure(info, `${location.origin}/iiif/3/${enc(id)}/info.json`);
    source = new window.OpenSeadragon.IIIFTileSource(opts);
    source.tileFormat = 'png';
    const base = source.getTileUrl;
    source.getTileUrl = function (level, x, y) {
      const u = `${base.call(this, level, x, y)}?${q}`;
      T.tileUrls.push(u);
      return u;
    };
  } else {
    const nx = d.shape[0], ny = d.shape[1], nz = planeCount(d);
    const w = px.axis === 'xz' ? nx : ny;
    const off = px.axis === 'xz' ? `0_${px.z}_0` : `${px.z}_0_0`;
    const url = `/api/v1/datasets/${enc(d.name)}/slice/${px.axis}/${w}_${nz}/${off}.png?${q}`;
    T.tileUrls.push(url);
    source = { type: 'image', url, buildPyramid: false };
  }
  const want = px.view;
  px.view = null;
  osd.open(source);
  osd.addOnceHandler('open', () => {
    const vp = osd.viewport;
    if (want) {
      const c = osd.world.getItemAt(0).imageToViewportCoordinates(want.cx, want.cy);
      vp.zoomTo(want.zoom, null, true);
      vp.panTo(c, true);
    } else if (resetView) vp.goHome(true);
    drawPick();
    drawAxes();
    recordPixels();
  });
  updatePlaneLabel(d);
  updateCuts(d).catch(() => {});
  replaceHash('pixels', px.name, pixelParams());
}

// ---- cut levels: histogram, colorbar, fixed levels ----------------------------------------
const histCache = new Map();
async function histogram(d, z) {
  const url = `/api/v1/datasets/${enc(d.name)}/histogram?plane=${z}&bins=128`;
  if (!(await feature('histogram', url))) return null;
  if (!histCache.has(url)) histCache.set(url, getJSON(url).catch((e) => { histCache.delete(url); throw e; }));
  return histCache.get(url);
}
/** The value of cut level s (a number or "p%") over histogram h. */
function cutValue(s, h) {
  const c = cutLevel(s);
  if (!c) return null;
  if (!c.pct) return c.v;
  if (!h) return null;
  const exact = h.percentiles && h.percentiles[String(c.v)];
  if (typeof exact === 'number') return exact;
  const total = h.counts.reduce((a, b) => a + b, 0);
  if (!total) return null;
  const want = (c.v / 100) * total, w = (h.max - h.min) / h.counts.length;
  let acc = 0;
  for (let i = 0; i < h.counts.length; i++) {
    if (acc + h.counts[i] >= want) return h.min + w * (i + (h.counts[i] ? (want - acc) / h.counts[i] : 0));
    acc += h.counts[i];
  }
  return h.max;
}

/** Draws the histogram of the shown plane and the colorbar of the current stretch, map and
 * cut levels (tessera.cuts holds the levels as values). */
async function updateCuts(d) {
  const z = px.axis === 'xy' ? px.z : midPlane(d);
  // An outage is told once, by the picture's own message; other failures here by one of their own.
  const h = px.axis === 'xy' ? await histogram(d, z).catch((e) => {
    if (!isOutage(e)) showMessage(`the histogram of '${d.name}': ${e.message}`, 'error', 'hist');
    return null;
  }) : null;
  if (px.name !== d.name) return;
  const lo = cutValue(px.min, h), hi = cutValue(px.max, h);
  T.cuts = { min: lo, max: hi, stretch: px.stretch, cmap: px.cmap, plane: z, histogram: !!h };
  drawColorbar(d, lo, hi);
  drawHistogram(h, lo, hi);
}

function niceTicks(lo, hi, n) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const step0 = span / n, mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((k) => k * mag).find((s) => s >= step0) || mag * 10;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}
const tickText = (v) => (Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(1) : String(Number(v.toPrecision(4))));

/** Sizes canvas c to its laid-out width and height `hgt`, fills it with `bg`; returns
 * {g (its 2-D context), w}. */
function blankCanvas(c, hgt, bg) {
  const w = c.clientWidth || 300;
  c.width = w;
  c.height = hgt;
  const g = c.getContext('2d');
  g.fillStyle = bg;
  g.fillRect(0, 0, w, hgt);
  return { g, w };
}

function drawColorbar(d, lo, hi) {
  const c = $('#px-colorbar');
  const hgt = 46;
  const { g, w } = blankCanvas(c, hgt, '#15181d');
  const x0 = 8, bw = w - 16;
  for (let i = 0; i < bw; i++) {
    // Position i is the stretched level s = i/bw; the map is indexed by s as the server does.
    const [r, gg, b] = px.cmap === 'grey' ? [0, 0, 0].map(() => Math.round((255 * i) / (bw - 1))) : cmapColour(px.cmap, i / (bw - 1));
    g.fillStyle = `rgb(${r},${gg},${b})`;
    g.fillRect(x0 + i, 2, 1, 16);
  }
  g.fillStyle = '#e6e6e6';
  g.strokeStyle = '#e6e6e6';
  g.font = '11px ui-monospace, monospace';
  const unit = d.bunit || '';
  c.dataset.min = lo === null ? '' : String(lo);
  c.dataset.max = hi === null ? '' : String(hi);
  if (lo === null || hi === null || !(hi > lo)) {
    g.textAlign = 'left';
    g.fillText(`${px.min}`, x0, 32);
    g.textAlign = 'right';
    g.fillText(`${px.max}${unit ? ` ${unit}` : ''}`, x0 + bw, 32);
    c.dataset.ticks = '0';
    return;
  }
  // A tick at value v sits where the server puts v: stretch((v - lo) / (hi - lo)).
  const ticks = niceTicks(lo, hi, 5);
  if (px.stretch === 'log' || px.stretch === 'asinh') {
    for (const f of [0.001, 0.01, 0.1]) ticks.push(lo + f * (hi - lo));
  }
  const placed = [];
  g.textAlign = 'center';
  for (const v of ticks.sort((a, b) => a - b)) {
    const s = stretchApply(px.stretch, (v - lo) / (hi - lo));
    const x = x0 + s * (bw - 1);
    if (placed.some((p) => Math.abs(p - x) < 44)) continue;
    placed.push(x);
    g.fillRect(Math.round(x), 18, 1, 5);
    g.fillText(tickText(v), Math.min(w - 22, Math.max(22, x)), 34);
  }
  g.textAlign = 'right';
  g.fillStyle = '#9aa4b0';
  g.fillText(`${px.stretch}${unit ? ` · ${unit}` : ''}`, w - 4, 45);
  c.dataset.ticks = String(placed.length);
}

function drawHistogram(h, lo, hi) {
  const c = $('#px-hist');
  c.hidden = !h;
  if (!h) return;
  const hgt = 70;
  const { g, w } = blankCanvas(c, hgt, '#0f1216');
  const n = h.counts.length, top = Math.log10(1 + Math.max(...h.counts));
  g.fillStyle = '#6cb4ff';
  for (let i = 0; i < n; i++) {
    const y = top ? (Math.log10(1 + h.counts[i]) / top) * (hgt - 14) : 0;
    g.fillRect((i * w) / n, hgt - 12 - y, Math.max(1, w / n - 0.5), y);
  }
  const xOf = (v) => ((v - h.min) / (h.max - h.min || 1)) * w;
  g.fillStyle = '#ffd400';
  for (const v of [lo, hi]) if (v !== null) g.fillRect(Math.round(Math.max(0, Math.min(w - 2, xOf(v)))), 0, 2, hgt - 12);
  g.fillStyle = '#9aa4b0';
  g.font = '10px ui-monospace, monospace';
  g.textAlign = 'left';
  g.fillText(tickText(h.min), 2, hgt - 2);
  g.textAlign = 'right';
  g.fillText(tickText(h.max), w - 2, hgt - 2);
  c.dataset.min = String(h.min);
  c.dataset.max = String(h.max);
}

/** A click on the histogram moves the nearer cut level to the value clicked. */
$('#px-hist').addEventListener('click', async (e) => {
  const d = findDataset(px.name);
  const h = d && px.axis === 'xy' ? await histogram(d, px.z) : null;
  if (!h) return;
  const r = e.currentTarget.getBoundingClientRect();
  const v = h.min + ((e.clientX - r.left) / r.width) * (h.max - h.min);
  const lo = cutValue(px.min, h), hi = cutValue(px.max, h);
  const val = String(Number(v.toPrecision(5)));
  if (lo === null || hi === null || Math.abs(v - lo) <= Math.abs(v - hi)) $('#px-min').value = val;
  else $('#px-max').value = val;
  rerender();
});

/** Fixed levels: the current plane's cut levels, as values, for every plane. */
$('#px-fixcuts').addEventListener('change', async (e) => {
  const d = findDataset(px.name);
  if (!d) return;
  px.fixed = e.target.checked;
  if (px.fixed) {
    const h = await histogram(d, px.axis === 'xy' ? px.z : midPlane(d)).catch(() => null);
    const lo = cutValue(px.min, h), hi = cutValue(px.max, h);
    if (lo === null || hi === null) {
      showMessage('Fixed cut levels need the server\'s histogram (or numeric Min and Max).', 'error', 'cuts');
      px.fixed = false;
      e.target.checked = false;
      return;
    }
    $('#px-min').value = String(Number(lo.toPrecision(6)));
    $('#px-max').value = String(Number(hi.toPrecision(6)));
  } else {
    $('#px-min').value = '0.5%';
    $('#px-max').value = '99.5%';
  }
  rerender();
});

/** Pixel axes (and the spectral axis of vertical cuts) along the bottom and left edges. */
function drawAxes() {
  const c = $('#px-axes');
  const osd = T.osd;
  const d = findDataset(px.name);
  const el = $('#osd');
  c.width = el.clientWidth;
  c.height = el.clientHeight;
  const g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  if (!osd || !d || !osd.world.getItemCount()) return;
  const item = osd.world.getItemAt(0);
  const size = item.getContentSize();
  const nz = planeCount(d);
  // The picture's horizontal and vertical axes: FITS x, y or z (z and y grow upwards).
  const hAxis = px.axis === 'yz' ? { name: 'y', n: d.shape[1] } : { name: 'x', n: d.shape[0] };
  const vAxis = px.axis === 'xy' ? { name: 'y', n: d.shape[1] } : { name: 'z', n: nz };
  const toScreen = (ix, iy) => item.imageToViewerElementCoordinates(new window.OpenSeadragon.Point(ix, iy));
  const p0 = toScreen(0, 0), p1 = toScreen(size.x, size.y);
  const scale = (p1.x - p0.x) / size.x;
  if (!(scale > 0)) return;
  const worldOf = (axis, k) => {
    if (axis !== 'z' || !d.wcs || d.wcs.ctype.length < 3) return null;
    const au = axisUnit(d.wcs.cunit && d.wcs.cunit[2]);
    return { v: au.f(linearWorld(d.wcs, 2, k)), unit: au.unit, name: d.wcs.ctype[2] };
  };
  g.font = '11px ui-monospace, monospace';
  g.lineWidth = 3;
  g.strokeStyle = 'rgba(0,0,0,0.8)';
  g.fillStyle = '#e6e6e6';
  // Ticks at least 60 screen pixels apart, at 1, 2 or 5 times a power of ten.
  const stepFor = (pxPerUnit) => {
    const raw = 60 / pxPerUnit, mag = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 5, 10].map((k) => k * mag).find((v) => v >= raw);
  };
  const label = (text, x, y) => { g.strokeText(text, x, y); g.fillText(text, x, y); };
  // Horizontal axis: index k at picture column k + 0.5.
  const hs = Math.max(1, Math.round(stepFor(scale)));
  const vs = hs;
  g.textAlign = 'center';
  let ticks = 0;
  for (let k = 0; k < hAxis.n; k += hs) {
    const x = toScreen(k + 0.5, 0).x;
    if (x < 60 || x > c.width - 10) continue;
    g.fillRect(Math.round(x), c.height - 30, 1, 5);
    label(String(k), x, c.height - 17);
    ticks++;
  }
  label(`${hAxis.name} [pixel]`, c.width / 2, c.height - 4);
  // Vertical axis: index k at picture row n - 1 - k + 0.5.
  g.textAlign = 'right';
  let vlabel = `${vAxis.name} [pixel]`;
  for (let k = 0; k < vAxis.n; k += vs) {
    const y = toScreen(0, vAxis.n - 1 - k + 0.5).y;
    if (y < 40 || y > c.height - 30) continue;
    g.fillRect(53, Math.round(y), 5, 1);
    const w = worldOf(vAxis.name, k);
    label(w ? String(Number(w.v.toPrecision(4))) : String(k), 51, y + 4);
    if (w) vlabel = `${w.name} [${w.unit}]`;
    ticks++;
  }
  g.save();
  g.translate(11, (c.height - 30) / 2);
  g.rotate(-Math.PI / 2);
  g.textAlign = 'center';
  label(vlabel, 0, 0);
  g.restore();
  c.dataset.ticks = String(ticks);
  c.dataset.labels = `${hAxis.name} [pixel]|${vlabel}`;
}

function updatePlaneLabel(d) {
  const lab = $('#px-plane-label');
  if (px.axis === 'xz') { lab.textContent = `y = ${px.z} / ${d.shape[1] - 1}`; return; }
  if (px.axis === 'yz') { lab.textContent = `x = ${px.z} / ${d.shape[0] - 1}`; return; }
  let t = `${d.kind === 'stack' ? 'frame' : 'plane'} ${px.z} / ${planeCount(d) - 1}`;
  if (d.kind === 'cube' && d.wcs && d.wcs.ctype.length > 2) {
    const au = axisUnit(d.wcs.cunit && d.wcs.cunit[2]);
    t += ` · ${d.wcs.ctype[2]} ${fmt(au.f(linearWorld(d.wcs, 2, px.z)), 3)} ${au.unit}`;
  }
  lab.textContent = t;
}

/** A click at picture pixel (ix, iy) (top-left origin) of the shown cut. */
function pickPicture(ix, iy) {
  const p = pictureToData(ix, iy);
  if (!p) return;
  px.pick = { x: p.x, y: p.y };
  if (px.axis !== 'xy') $('#px-pick').dataset.z = p.z;
  replaceHash('pixels', px.name, pixelParams());
  drawPick();
  loadSeries().catch((e) => showMessage(e.message));
}

function drawPick() {
  const osd = T.osd;
  if (!osd || !osd.world.getItemCount()) return;
  osd.clearOverlays();
  if (!px.pick) return;
  const d = findDataset(px.name);
  const ny = d.shape[1];
  let ix = null, iy = null;
  if (px.axis === 'xy') { ix = px.pick.x; iy = ny - 1 - px.pick.y; }
  else if (px.axis === 'xz' && px.pick.y === px.z) { ix = px.pick.x; iy = null; }
  else if (px.axis === 'yz' && px.pick.x === px.z) { ix = px.pick.y; iy = null; }
  if (ix === null) return;
  const item = osd.world.getItemAt(0);
  const size = item.getContentSize();
  const el = document.createElement('div');
  el.className = 'pick-marker';
  el.style.cssText = 'border:2px solid #ff3b3b;box-sizing:border-box;pointer-events:none';
  const r = iy === null
    ? item.imageToViewportRectangle(ix, 0, 1, size.y)
    : item.imageToViewportRectangle(ix, iy, 1, 1);
  osd.addOverlay({ element: el, location: r });
}

async function loadSeries() {
  const d = findDataset(px.name);
  const { x, y } = px.pick;
  $('#px-pick').textContent = `pixel x=${x} y=${y}: loading…`;
  if (planeCount(d) < 2) {
    const f = d.celestial ? makePix2Sky(d.wcs) : null;
    const w = f ? f(x, y) : null;
    $('#px-pick').textContent = `pixel x=${x} y=${y}` +
      (w ? ` · ${d.wcs.frame || 'sky'} ${fmt(w[0], 5)}°, ${fmt(w[1], 5)}°` : '') + ' (a 2-D image has no series)';
    readValue(d, x, y, 0, (v) => { if (v && px.pick && px.pick.x === x && px.pick.y === y) $('#px-pick').textContent += ` · ${v}`; });
    return;
  }
  const s = await getJSON(`/api/v1/datasets/${enc(d.name)}/series?x=${x}&y=${y}`);
  T.series = s;
  const vals = (s.values || []).map((v) => (v === null || v === undefined ? null : Number(v)));
  const za = s.z_axis || {};
  const au = axisUnit(za.unit);
  const world = Array.isArray(za.values) && za.values.length === vals.length;
  let xs = world ? za.values.map((v) => au.f(v)) : vals.map((_, i) => i);
  const xLabel = world ? `${za.name || 'z'}${au.unit ? ` [${au.unit}]` : ''}` : (d.kind === 'stack' ? 'frame' : 'plane');
  // uPlot needs increasing x: reverse a decreasing axis (planes kept in `planes`).
  let ys = vals;
  let planes = vals.map((_, i) => i);
  if (xs.length > 1 && xs[0] > xs[xs.length - 1]) {
    xs = xs.slice().reverse(); ys = ys.slice().reverse(); planes = planes.reverse();
  }
  const unit = s.unit || d.bunit;
  const yLabel = unit ? `value [${unit}]` : 'value [no unit given]';
  const box = $('#px-plot');
  const width = Math.max(240, Math.min(box.parentElement.clientWidth || 400, 600));
  const opts = {
    title: `${d.name} at x=${x}, y=${y}`,
    width,
    height: 260,
    scales: { x: { time: false } },
    series: [
      { label: xLabel },
      { label: yLabel, stroke: '#1f6fd1', width: 1.5, points: { show: true, size: 4 }, spanGaps: false },
    ],
    axes: [{ label: xLabel }, { label: yLabel }],
    hooks: {
      draw: [(u) => {
        // The plane shown in the picture (read at each draw, so it follows the plane).
        if (px.axis !== 'xy') {
          u.root.dataset.marker = '';
          return;
        }
        const i = planes.indexOf(px.z);
        if (i < 0) return;
        const cx = u.valToPos(xs[i], 'x', true);
        const c = u.ctx;
        c.save();
        c.strokeStyle = '#e0403a';
        c.setLineDash([4, 3]);
        c.beginPath();
        c.moveTo(cx, u.bbox.top);
        c.lineTo(cx, u.bbox.top + u.bbox.height);
        c.stroke();
        c.restore();
        u.root.dataset.marker = String(px.z);
      }],
    },
  };
  if (T.plot) T.plot.destroy();
  box.replaceChildren();
  T.plot = new window.uPlot(opts, [xs, ys], box);
  // A click on the plot shows the nearest plane in the picture.
  T.plot.over.addEventListener('click', () => {
    const u = T.plot;
    if (!u || u.cursor.left === null || u.cursor.left < 0) return;
    const v = u.posToVal(u.cursor.left, 'x');
    let best = 0;
    for (let i = 1; i < xs.length; i++) if (Math.abs(xs[i] - v) < Math.abs(xs[best] - v)) best = i;
    if (px.axis !== 'xy') setAxis('xy');
    setPlane(planes[best]);
  });
  box.dataset.points = String(xs.length);
  pickText();
}
function pickText() {
  const s = T.series;
  if (!px.pick || !s) return;
  const v = s.values && s.values[px.z];
  const unit = s.unit || (findDataset(px.name) || {}).bunit || '';
  $('#px-pick').textContent = `pixel x=${px.pick.x} y=${px.pick.y}: ${s.values.length} values` +
    (px.axis === 'xy' && v !== undefined ? `, value at plane ${px.z} = ${v === null ? 'NaN' : fmtValue(v)}${unit ? ` ${unit}` : ''}` : '');
}

async function showPixels(name, params) {
  const list = await loadDatasets();
  if (!list.length) throw new Error('This server has no datasets.');
  if (!name) name = px.name && findDataset(px.name) ? px.name : list[0].name;
  const d = findDataset(name);
  if (!d) throw new Error(`no dataset named '${name}'`);
  fillSelect($('#px-dataset'), list, name);
  $('#px-to-sky').hidden = !d.celestial;
  $('#px-to-sky').href = hashFor('sky', name);
  $('#px-fits').replaceWith(Object.assign(fitsLink(name), { id: 'px-fits' }));
  const changed = px.name !== name;
  px.name = name;
  const np = planeCount(d);
  px.axis = np > 1 && ['xy', 'xz', 'yz'].includes(params.get('axis')) ? params.get('axis') : 'xy';
  const zDefault = changed || px.axis !== 'xy' ? (px.axis === 'xy' ? midPlane(d) : Math.floor(sliderMax(d) / 2)) : px.z;
  const z = parseInt(params.get('z'), 10);
  px.z = Number.isInteger(z) && z >= 0 && z <= sliderMax(d) ? z : Math.min(zDefault, sliderMax(d));
  px.stretch = STRETCHES.includes(params.get('stretch')) ? params.get('stretch')
    : changed ? (d.kind === 'image' ? 'asinh' : 'linear') : px.stretch;
  px.cmap = CMAPS.includes(params.get('cmap')) ? params.get('cmap') : changed ? (np > 1 ? 'viridis' : 'grey') : px.cmap;
  px.min = params.get('min') || (changed ? '0.5%' : px.min);
  px.max = params.get('max') || (changed ? '99.5%' : px.max);
  px.fixed = params.get('fixed') === '1' || (!changed && px.fixed && !params.has('min'));
  const x = parseInt(params.get('x'), 10), y = parseInt(params.get('y'), 10);
  px.pick = Number.isInteger(x) && Number.isInteger(y) && x >= 0 && y >= 0 && x < d.shape[0] && y < d.shape[1]
    ? { x, y } : changed ? null : px.pick;
  const zoom = parseFloat(params.get('zoom')), cx = parseFloat(params.get('cx')), cy = parseFloat(params.get('cy'));
  px.view = zoom > 0 && Number.isFinite(cx) && Number.isFinite(cy) ? { zoom, cx, cy } : null;
  if (px.view) px.openKey = null;
  $('#px-stretch').value = px.stretch;
  $('#px-cmap').value = px.cmap;
  $('#px-min').value = px.min;
  $('#px-max').value = px.max;
  $('#px-fixcuts').checked = px.fixed;
  $('#px-fixcuts-label').hidden = np < 2;
  $('#px-axis').value = px.axis;
  $('#px-axis-group').hidden = np < 2;
  $('#px-plane-row').hidden = np < 2;
  const slider = $('#px-plane');
  slider.max = String(sliderMax(d));
  slider.value = String(px.z);
  if (changed) {
    if (T.plot) { T.plot.destroy(); T.plot = null; }
    T.series = null;
    $('#px-plot').replaceChildren();
    $('#px-pick').textContent = np > 1 ? 'Click a pixel to plot its values along the third axis.'
      : 'A 2-D image: click a pixel to see its position and value.';
  }
  await openPixels();
  if (px.pick && (changed || !T.plot)) await loadSeries();
}

function setPlane(z) {
  const d = findDataset(px.name);
  if (!d) return;
  z = Math.max(0, Math.min(sliderMax(d), z));
  if (z === px.z) return;
  px.z = z;
  $('#px-plane').value = String(z);
  openPixels().catch((e) => showMessage(e.message));
  if (T.plot) T.plot.redraw(false, false);
  if (px.axis === 'xy') pickText();
}
function rerender() {
  px.stretch = $('#px-stretch').value;
  px.cmap = $('#px-cmap').value;
  px.min = $('#px-min').value.trim() || '0.5%';
  px.max = $('#px-max').value.trim() || '99.5%';
  openPixels().catch((e) => showMessage(e.message));
}
function setAxis(axis) {
  const d = findDataset(px.name);
  if (!d || planeCount(d) < 2) return;
  px.axis = axis;
  $('#px-axis').value = axis;
  px.z = px.axis === 'xy' ? midPlane(d) : Math.floor(sliderMax(d) / 2);
  $('#px-plane').max = String(sliderMax(d));
  $('#px-plane').value = String(px.z);
  openPixels().catch((e) => showMessage(e.message));
}

function exportPixelsPng() {
  const osd = T.osd;
  if (!osd || !osd.drawer || !osd.drawer.canvas) return;
  const url = osd.drawer.canvas.toDataURL('image/png');
  download(url, `${px.name}_${px.axis}${px.axis === 'xy' ? `_plane${px.z}` : `_${px.z}`}.png`);
}

$('#px-dataset').addEventListener('change', (e) => { location.hash = hashFor('pixels', e.target.value); });
$('#px-plane').addEventListener('input', (e) => setPlane(parseInt(e.target.value, 10)));
$('#px-prev').addEventListener('click', () => setPlane(px.z - 1));
$('#px-next').addEventListener('click', () => setPlane(px.z + 1));
for (const id of ['#px-stretch', '#px-cmap', '#px-min', '#px-max']) $(id).addEventListener('change', rerender);
$('#px-axis').addEventListener('change', (e) => setAxis(e.target.value));
$('#px-png').addEventListener('click', exportPixelsPng);
// A list chosen with the mouse gives the keys back to the page (arrows move the plane).
for (const sel of document.querySelectorAll('.toolbar select')) sel.addEventListener('change', () => sel.blur());
window.addEventListener('resize', () => {
  const d = findDataset(px.name);
  if (T.view === 'pixels' && d) { updateCuts(d).catch(() => {}); drawAxes(); }
});

document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const k = e.key;
  const arrows = ['ArrowRight', 'ArrowUp', 'ArrowLeft', 'ArrowDown'];
  // On a list of the toolbar the arrows still move the plane, not the list's choice.
  if (t && t.tagName === 'SELECT' && arrows.includes(k) && (T.view === 'pixels' || sky.plane !== null)) t.blur();
  else if (t && (t.tagName === 'INPUT' && t.type !== 'range' && t.type !== 'checkbox' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA')) return;
  if (k === 'g') { location.hash = hashFor('sky', T.view === 'pixels' ? px.name : sky.name); return; }
  if (k === 'd') { location.hash = '#/datasets'; return; }
  if (k === 'j') { location.hash = '#/jobs'; return; }
  if (k === 'p' && T.view !== 'pixels') { location.hash = hashFor('pixels', sky.name || px.name); return; }
  const step = e.shiftKey ? 10 : 1;
  if (T.view === 'sky' && sky.plane !== null) {
    if (k === 'ArrowRight' || k === 'ArrowUp') { setSkyPlane(sky.plane + step); e.preventDefault(); }
    else if (k === 'ArrowLeft' || k === 'ArrowDown') { setSkyPlane(sky.plane - step); e.preventDefault(); }
    return;
  }
  if (T.view !== 'pixels' || !px.name) return;
  if (k === 'ArrowRight' || k === 'ArrowUp') { setPlane(px.z + step); e.preventDefault(); }
  else if (k === 'ArrowLeft' || k === 'ArrowDown') { setPlane(px.z - step); e.preventDefault(); }
  else if (k === 'Home') { setPlane(0); e.preventDefault(); }
  else if (k === 'End') { setPlane(1e9); e.preventDefault(); }
  else if (k === 'c') { $('#px-cmap').value = CMAPS[(CMAPS.indexOf(px.cmap) + 1) % CMAPS.length]; rerender(); }
  else if (k === 's') { $('#px-stretch').value = STRETCHES[(STRETCHES.indexOf(px.stretch) + 1) % STRETCHES.length]; rerender(); }
  else if (k === 'x') { const ax = ['xy', 'xz', 'yz']; setAxis(ax[(ax.indexOf(px.axis) + 1) % 3]); }
  else if (k === '0' && T.osd) T.osd.viewport.goHome();
  else if ((k === '+' || k === '=') && T.osd) T.osd.viewport.zoomBy(1.5);
  else if (k === '-' && T.osd) T.osd.viewport.zoomBy(1 / 1.5);
}, true);

initJobs();

// ---- start ---------------------------------------------------------------------------------------
route();
