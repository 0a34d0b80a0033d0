// Tessera viewer: datasets, sky (Aladin Lite on /hips), pixels (OpenSeadragon on /iiif and
// slices, uPlot for the values along z), jobs (mosaics).  The view lives in the URL hash:
//   #/datasets
//   #/sky/{name}?frame=icrs|galactic
//   #/pixels/{name}?z=&axis=xy|xz|yz&stretch=&min=&max=&cmap=&x=&y=
//   #/jobs?job={id}
// so that a copied link reopens the same view.  Every failure becomes a message on the page.
import { footprintIcrs, makePix2Sky, icrsToGal, linearWorld } from './wcs.js';

window.tesseraStarted = true;
const $ = (sel) => document.querySelector(sel);
const enc = encodeURIComponent;

// ---- state shared with the browser tests -------------------------------------------------
const T = (window.tessera = {
  view: null,
  datasets: null,
  aladin: null,
  osd: null,
  plot: null,
  series: null,
  cursor: null,
  job: null,
  tileUrls: [],
});

// ---- messages and fetch helpers ------------------------------------------------------------
function showMessage(text, kind = 'error') {
  const box = $('#messages');
  for (const p of box.children) if (p.dataset.text === text) return;
  const p = document.createElement('p');
  p.className = `msg ${kind}`;
  p.dataset.text = text;
  p.textContent = text;
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = '×';
  b.title = 'dismiss';
  b.onclick = () => p.remove();
  p.prepend(b);
  box.append(p);
}
function clearMessages() {
  $('#messages').replaceChildren();
}
window.addEventListener('error', (e) => showMessage(`Error: ${e.message}`));
window.addEventListener('unhandledrejection', (e) =>
  showMessage(e.reason && e.reason.message ? e.reason.message : String(e.reason)));

let busyCount = 0;
function busy(delta) {
  busyCount = Math.max(0, busyCount + delta);
  $('#busy').hidden = busyCount === 0;
}

/** fetch() that turns a non-2xx answer into an Error carrying the problem+json detail. */
async function request(url, opts = {}) {
  busy(1);
  let resp;
  try {
    resp = await fetch(url, opts);
  } catch (e) {
    throw new Error(`cannot reach the server (${url}): ${e.message}`);
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
const getJSON = async (url, opts) => (await request(url, opts)).json();
const getText = async (url) => (await request(url)).text();

async function loadDatasets(force = false) {
  if (!T.datasets || force) T.datasets = await getJSON('/api/v1/datasets');
  return T.datasets;
}
const findDataset = (name) => (T.datasets || []).find((d) => d.name === name);

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
function hashFor(view, name, params) {
  let h = `#/${view}`;
  if (name) h += `/${enc(name)}`;
  const s = params ? new URLSearchParams(params).toString() : '';
  return s ? `${h}?${s}` : h;
}
/** Records the current view in the URL without reloading it. */
function replaceHash(view, name, params) {
  const h = hashFor(view, name, params);
  if (location.hash !== h) history.replaceState(null, '', h);
}

const VIEWS = ['datasets', 'sky', 'pixels', 'jobs'];
async function route() {
  const { view, name, params } = parseHash();
  const v = VIEWS.includes(view) ? view : 'datasets';
  T.view = v;
  for (const id of VIEWS) $(`#view-${id}`).hidden = id !== v;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === v);
  if (v !== 'jobs') stopJobPolling();
  try {
    if (v === 'datasets') await showDatasets();
    else if (v === 'sky') await showSky(name, params);
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
async function showDatasets() {
  const list = await loadDatasets(true);
  const box = $('#dataset-list');
  box.replaceChildren();
  if (!list.length) box.textContent = 'This server has no datasets.';
  for (const d of list) {
    const card = document.createElement('div');
    card.className = 'card';
    card.dataset.name = d.name;
    const img = document.createElement('img');
    img.className = 'thumb';
    img.alt = `${d.name} preview`;
    img.loading = 'lazy';
    img.src = `/iiif/3/${enc(iiifId(d, midPlane(d)))}/full/!128,128/0/default.png?stretch=asinh`;
    img.onerror = () => { img.alt = 'no preview'; img.classList.add('broken'); };
    const meta = document.createElement('div');
    meta.className = 'meta';
    const shape = d.shape.join(' × ');
    meta.innerHTML = '<b></b><div class="kind"></div><div class="wcs"></div><div class="links"></div>';
    meta.querySelector('b').textContent = d.name;
    meta.querySelector('.kind').textContent =
      `${d.kind} · ${shape} · BITPIX ${d.bitpix}${d.bunit ? ` · ${d.bunit}` : ''}`;
    meta.querySelector('.wcs').textContent = wcsSummary(d);
    const links = meta.querySelector('.links');
    if (d.celestial) {
      const a = document.createElement('a');
      a.href = hashFor('sky', d.name);
      a.textContent = 'sky';
      links.append(a);
    }
    const p = document.createElement('a');
    p.href = hashFor('pixels', d.name);
    p.textContent = 'pixels';
    links.append(p);
    card.append(img, meta);
    box.append(card);
  }
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

// ---- sky view (Aladin Lite) ------------------------------------------------------------------
let A = null;
let sky = { name: null, overlay: null, frame: 'icrs' };

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

function cursorText(raIcrs, decIcrs, d) {
  if (raIcrs === null || raIcrs === undefined || Number.isNaN(raIcrs)) return 'cursor: outside the sky';
  const dsFrame = d && d.wcs && d.wcs.frame ? d.wcs.frame : 'icrs';
  if (dsFrame === 'galactic') {
    const [l, b] = icrsToGal(raIcrs, decIcrs);
    return `cursor (galactic): l ${fmt(l, 5)}°  b ${fmt(b, 5)}°`;
  }
  return `cursor (${dsFrame}): α ${fmt(raIcrs, 5)}° ${sexa(raIcrs, true)}  δ ${fmt(decIcrs, 5)}° ${sexa(decIcrs, false)}`;
}

async function showSky(name, params) {
  const list = await loadDatasets();
  const celestial = list.filter((d) => d.celestial);
  if (!celestial.length) throw new Error('No dataset on this server has a celestial WCS.');
  if (!name) name = sky.name && findDataset(sky.name) ? sky.name : celestial[0].name;
  const d = findDataset(name);
  if (!d) throw new Error(`no dataset named '${name}'`);
  fillSelect($('#sky-dataset'), celestial, d.celestial ? name : '');
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
  replaceHash('sky', name, { frame });
  const props = parseProperties(await getText(`/hips/${enc(name)}/properties`));
  await loadAladin();
  const hipsUrl = `${location.origin}/hips/${enc(name)}`;
  const ra = parseFloat(props.hips_initial_ra), dec = parseFloat(props.hips_initial_dec);
  // Aladin's fov is the width of the view: widen it so that the whole image fits the height.
  const el = $('#aladin');
  const aspect = el.clientHeight > 0 ? Math.max(1, el.clientWidth / el.clientHeight) : 1;
  const fov = Math.min(180, (parseFloat(props.hips_initial_fov) || 1) * 1.15 * aspect);
  const alFrame = frame === 'galactic' ? 'galactic' : 'ICRS';
  if (!T.aladin) {
    T.aladin = A.aladin('#aladin', {
      survey: A.imageHiPS(hipsUrl, { name, imgFormat: 'png' }),
      hipsList: [],
      log: false, // no start-up report to alasky.unistra.fr
      cooFrame: alFrame,
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
    // The target string is read in cooFrame; the HiPS centre is ICRS: go there explicitly.
    T.aladin.gotoRaDec(ra, dec);
    T.aladin.on('mouseMove', (e) => {
      let c = null;
      try { c = T.aladin.pix2world(e.x, e.y, 'icrs'); } catch (_) { c = null; }
      const dd = findDataset(sky.name);
      T.cursor = c ? { ra: c[0], dec: c[1] } : null;
      $('#sky-cursor').textContent = c ? cursorText(c[0], c[1], dd) : 'cursor: outside the sky';
    });
  } else if (sky.name !== name) {
    T.aladin.setImageSurvey(A.imageHiPS(hipsUrl, { name, imgFormat: 'png' }));
    T.aladin.gotoRaDec(ra, dec);
    T.aladin.setFoV(fov);
  }
  if (sky.frame !== frame || !sky.name) T.aladin.setFrame(alFrame);
  sky.frame = frame;
  sky.name = name;
  drawFootprint(d);
  $('#sky-info').textContent = `${name}: HiPS order ${props.hips_order || '?'}, ` +
    `tiles ${props.hips_tile_format || ''}, frame ${props.hips_frame || '?'}`;
}

function drawFootprint(d) {
  if (!T.aladin) return;
  if (!sky.overlay) {
    sky.overlay = A.graphicOverlay({ name: 'footprint', color: '#ffd400', lineWidth: 2 });
    T.aladin.addOverlay(sky.overlay);
  }
  sky.overlay.removeAll();
  T.footprint = null;
  if (!$('#sky-footprint').checked) return;
  const pts = footprintIcrs(d.wcs, d.shape[0], d.shape[1]);
  if (!pts) return; // all-sky maps and unsupported projections: no outline
  T.footprint = pts;
  sky.overlay.add(A.polygon(pts));
}

$('#sky-dataset').addEventListener('change', (e) => {
  location.hash = hashFor('sky', e.target.value, { frame: $('#sky-frame').value });
});
$('#sky-frame').addEventListener('change', (e) => {
  const frame = e.target.value;
  replaceHash('sky', sky.name, { frame });
  if (T.aladin) T.aladin.setFrame(frame === 'galactic' ? 'galactic' : 'ICRS');
  sky.frame = frame;
});
$('#sky-footprint').addEventListener('change', () => {
  const d = findDataset(sky.name);
  if (d) drawFootprint(d);
});

// ---- pixel view (OpenSeadragon + uPlot) ------------------------------------------------------
const px = {
  name: null, z: 0, axis: 'xy', stretch: 'linear', min: '0.5%', max: '99.5%', cmap: 'grey',
  pick: null, openKey: null,
};
const STRETCHES = ['linear', 'sqrt', 'log', 'asinh', 'power'];
const CMAPS = ['grey', 'viridis', 'inferno', 'magma', 'plasma', 'cubehelix'];

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
  if (px.pick) { p.x = px.pick.x; p.y = px.pick.y; }
  return p;
}
/** The number of positions the slider runs over for the current cut axis. */
function sliderMax(d) {
  if (px.axis === 'xz') return d.shape[1] - 1;
  if (px.axis === 'yz') return d.shape[0] - 1;
  return planeCount(d) - 1;
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
  T.osd.addHandler('open-failed', (e) => showMessage(`cannot open the image: ${e.message || 'failed'}`));
  T.osd.addHandler('tile-load-failed', (e) => {
    const url = e.tile && (e.tile.getUrl ? e.tile.getUrl() : e.tile.url);
    showMessage(`a tile did not load${url ? ` (${url})` : ''}: ${e.message || ''}`);
    checkUrl(url);
  });
  T.osd.addHandler('canvas-click', (e) => {
    if (!e.quick) return;
    e.preventDefaultAction = true;
    const vp = T.osd.viewport.pointFromPixel(e.position);
    const img = T.osd.viewport.viewportToImageCoordinates(vp);
    pickPicture(Math.floor(img.x), Math.floor(img.y));
  });
  return T.osd;
}

/** Asks a failed URL again to show the server's problem detail. */
async function checkUrl(url) {
  if (!url) return;
  try { await request(url); } catch (e) { showMessage(e.message); }
}

async function openPixels() {
  const d = findDataset(px.name);
  const osd = ensureOsd();
  const key = `${px.name}|${px.axis}|${px.z}|${renderQuery()}`;
  if (px.openKey === key) return;
  const resetView = !px.openKey || px.openKey.split('|').slice(0, 2).join('|') !== `${px.name}|${px.axis}`;
  px.openKey = key;
  const q = renderQuery();
  let source;
  if (px.axis === 'xy') {
    const id = iiifId(d, px.z);
    const info = await getJSON(`/iiif/3/${enc(id)}/info.json`);
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
  osd.open(source);
  if (resetView) osd.addOnceHandler('open', () => osd.viewport.goHome(true));
  osd.addOnceHandler('open', () => drawPick());
  updatePlaneLabel(d);
  replaceHash('pixels', px.name, pixelParams());
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
  const d = findDataset(px.name);
  const nx = d.shape[0], ny = d.shape[1], nz = planeCount(d);
  let x, y, z = null;
  // FITS row 1 (and z = 0 in vertical cuts) is at the bottom of the picture.
  if (px.axis === 'xy') { x = ix; y = ny - 1 - iy; }
  else if (px.axis === 'xz') { x = ix; y = px.z; z = nz - 1 - iy; }
  else { x = px.z; y = ix; z = nz - 1 - iy; }
  if (x < 0 || y < 0 || x >= nx || y >= ny || (z !== null && (z < 0 || z >= nz))) return;
  px.pick = { x, y };
  if (z !== null && px.axis !== 'xy') $('#px-pick').dataset.z = z;
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
    return;
  }
  const s = await getJSON(`/api/v1/datasets/${enc(d.name)}/series?x=${x}&y=${y}`);
  T.series = s;
  const vals = (s.values || []).map((v) => (v === null || v === undefined ? null : Number(v)));
  const za = s.z_axis || {};
  const au = axisUnit(za.unit);
  let xs = Array.isArray(za.values) && za.values.length === vals.length
    ? za.values.map((v) => au.f(v)) : vals.map((_, i) => i);
  const xLabel = Array.isArray(za.values) && za.values.length === vals.length
    ? `${za.name || 'z'}${au.unit ? ` [${au.unit}]` : ''}` : (d.kind === 'stack' ? 'frame' : 'plane');
  // uPlot needs increasing x: reverse a decreasing axis.
  let ys = vals;
  if (xs.length > 1 && xs[0] > xs[xs.length - 1]) { xs = xs.slice().reverse(); ys = ys.slice().reverse(); }
  const yLabel = s.unit || d.bunit || 'value';
  const box = $('#px-plot');
  const width = Math.max(240, Math.min(box.parentElement.clientWidth || 400, 600));
  const zMarker = au.f(za.values && za.values[px.z] !== undefined ? za.values[px.z] : px.z);
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
        if (px.axis !== 'xy' || zMarker === null || Number.isNaN(zMarker)) return;
        const cx = u.valToPos(zMarker, 'x', true);
        const c = u.ctx;
        c.save();
        c.strokeStyle = '#e0403a';
        c.setLineDash([4, 3]);
        c.beginPath();
        c.moveTo(cx, u.bbox.top);
        c.lineTo(cx, u.bbox.top + u.bbox.height);
        c.stroke();
        c.restore();
      }],
    },
  };
  if (T.plot) T.plot.destroy();
  box.replaceChildren();
  T.plot = new window.uPlot(opts, [xs, ys], box);
  box.dataset.points = String(xs.length);
  const v = s.values && s.values[px.z];
  $('#px-pick').textContent = `pixel x=${x} y=${y}: ${vals.length} values` +
    (px.axis === 'xy' && v !== undefined ? `, value at plane ${px.z} = ${v === null ? 'NaN' : fmt(v, 4)}` : '');
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
  const x = parseInt(params.get('x'), 10), y = parseInt(params.get('y'), 10);
  px.pick = Number.isInteger(x) && Number.isInteger(y) && x >= 0 && y >= 0 && x < d.shape[0] && y < d.shape[1]
    ? { x, y } : changed ? null : px.pick;
  $('#px-stretch').value = px.stretch;
  $('#px-cmap').value = px.cmap;
  $('#px-min').value = px.min;
  $('#px-max').value = px.max;
  $('#px-axis').value = px.axis;
  $('#px-axis-group').hidden = np < 2;
  $('#px-plane-row').hidden = np < 2;
  const slider = $('#px-plane');
  slider.max = String(sliderMax(d));
  slider.value = String(px.z);
  if (changed) {
    if (T.plot) { T.plot.destroy(); T.plot = null; }
    $('#px-plot').replaceChildren();
    $('#px-pick').textContent = np > 1 ? 'Click a pixel to plot its values along the third axis.'
      : 'A 2-D image: click a pixel to see its position.';
  }
  await openPixels();
  if (px.pick && (changed || !T.plot) && np > 1) await loadSeries();
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
  if (px.pick && T.series && px.axis === 'xy') {
    const v = T.series.values[z];
    $('#px-pick').textContent = `pixel x=${px.pick.x} y=${px.pick.y}: ${T.series.values.length} values, ` +
      `value at plane ${z} = ${v === null ? 'NaN' : fmt(v, 4)}`;
  }
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

$('#px-dataset').addEventListener('change', (e) => { location.hash = hashFor('pixels', e.target.value); });
$('#px-plane').addEventListener('input', (e) => setPlane(parseInt(e.target.value, 10)));
$('#px-prev').addEventListener('click', () => setPlane(px.z - 1));
$('#px-next').addEventListener('click', () => setPlane(px.z + 1));
for (const id of ['#px-stretch', '#px-cmap', '#px-min', '#px-max']) $(id).addEventListener('change', rerender);
$('#px-axis').addEventListener('change', (e) => setAxis(e.target.value));

document.addEventListener('keydown', (e) => {
  const t = e.target;
  if (t && (t.tagName === 'INPUT' && t.type !== 'range' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA')) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const k = e.key;
  if (k === 'g') { location.hash = hashFor('sky', T.view === 'pixels' ? px.name : sky.name); return; }
  if (k === 'd') { location.hash = '#/datasets'; return; }
  if (k === 'j') { location.hash = '#/jobs'; return; }
  if (k === 'p' && T.view !== 'pixels') { location.hash = hashFor('pixels', sky.name || px.name); return; }
  if (T.view !== 'pixels' || !px.name) return;
  const step = e.shiftKey ? 10 : 1;
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
});

// ---- jobs --------------------------------------------------------------------------------------
let jobTimer = null, listTimer = null;
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

function authHeaders() {
  const tok = $('#jobs-token').value.trim();
  try { localStorage.setItem('tessera.token', tok); } catch (_) { /* private mode */ }
  return tok ? { Authorization: `Bearer ${tok}` } : {};
}
function stopJobPolling() {
  clearTimeout(jobTimer);
  clearTimeout(listTimer);
  jobTimer = listTimer = null;
}

async function showJobs(params) {
  const list = await loadDatasets(true);
  const box = $('#mosaic-inputs');
  const prev = new Set([...box.querySelectorAll('input:checked')].map((i) => i.value));
  box.replaceChildren();
  for (const d of list.filter((x) => x.celestial && x.kind === 'image')) {
    const lab = document.createElement('label');
    const cb = document.createElement('input');
    cb.type = 'checkbox';
    cb.value = d.name;
    cb.checked = prev.has(d.name);
    lab.append(cb, ` ${d.name}`);
    box.append(lab);
  }
  try { $('#jobs-token').value = localStorage.getItem('tessera.token') || ''; } catch (_) { /* ignore */ }
  await refreshJobList();
  const id = params.get('job');
  if (id) watchJob(id);
}

function jobProduct(job) {
  const r = job.result || {};
  if (typeof r === 'string') return null;
  return r.dataset || r.name || (job.output && job.output.name) || (job.request && job.request.output && job.request.output.name) || null;
}

async function refreshJobList() {
  clearTimeout(listTimer);
  let jobs;
  try {
    jobs = await getJSON('/api/v1/jobs', { headers: authHeaders() });
  } catch (e) {
    if (e.status === 404) showMessage('This server has no job endpoints yet (GET /api/v1/jobs answered 404).', 'info');
    else showMessage(`cannot list the jobs: ${e.message}`);
    return;
  }
  if (!Array.isArray(jobs)) jobs = jobs.jobs || jobs.items || [];
  const tb = $('#job-table tbody');
  tb.replaceChildren();
  for (const j of jobs) {
    const tr = document.createElement('tr');
    const frac = j.progress && j.progress.fraction !== undefined ? `${Math.round(j.progress.fraction * 100)}%` : '';
    const cells = [j.id, j.type, j.state, frac, j.created || '', ''];
    cells.forEach((c, i) => {
      const td = document.createElement('td');
      if (i === 0) {
        const a = document.createElement('a');
        a.href = hashFor('jobs', null, { job: j.id });
        a.textContent = c;
        td.append(a);
      } else if (i === 5 && j.state === 'succeeded' && jobProduct(j)) {
        td.append(productLinks(jobProduct(j)));
      } else td.textContent = c;
      if (i === 2) td.className = `state ${c}`;
      tr.append(td);
    });
    tb.append(tr);
  }
  if (T.view === 'jobs') listTimer = setTimeout(refreshJobList, 3000);
}

function productLinks(name) {
  const span = document.createElement('span');
  const d = findDataset(name);
  const p = document.createElement('a');
  p.href = hashFor('pixels', name);
  p.textContent = 'pixel view';
  p.className = 'open-pixels';
  if (d && !d.celestial) {
    // No celestial WCS: no sky view.
    span.append(`${name}: `, p);
    return span;
  }
  const s = document.createElement('a');
  s.href = hashFor('sky', name);
  s.textContent = `${name} in the sky view`;
  s.className = 'open-sky';
  span.append(s, ' · ', p);
  return span;
}

function showJob(job) {
  T.job = job;
  $('#job-current').hidden = false;
  $('#job-id').textContent = job.id;
  const st = $('#job-state');
  st.textContent = job.state;
  st.className = `state ${job.state}`;
  const frac = job.progress && typeof job.progress.fraction === 'number' ? job.progress.fraction
    : job.state === 'succeeded' ? 1 : 0;
  $('#job-progress').value = frac;
  let t = `${(frac * 100).toFixed(1)}%`;
  if (job.progress && job.progress.total) t += ` (${job.progress.done}/${job.progress.total})`;
  if (typeof job.eta_s === 'number' && !TERMINAL.has(job.state)) t += ` · about ${Math.ceil(job.eta_s)} s left`;
  $('#job-progress-text').textContent = t;
  $('#job-cancel').disabled = TERMINAL.has(job.state);
  const links = $('#job-links');
  links.replaceChildren();
  const prod = jobProduct(job) || T.pendingOutput;
  if (job.state === 'succeeded' && prod) links.append(productLinks(prod));
  const err = $('#job-error');
  err.hidden = !job.error;
  err.textContent = job.error ? `error: ${typeof job.error === 'string' ? job.error : JSON.stringify(job.error)}` : '';
}

function watchJob(id) {
  clearTimeout(jobTimer);
  const poll = async () => {
    let job;
    try {
      job = await getJSON(`/api/v1/jobs/${enc(id)}`, { headers: authHeaders() });
    } catch (e) {
      showMessage(`job ${id}: ${e.message}`);
      return;
    }
    showJob(job);
    if (TERMINAL.has(job.state)) {
      if (job.state === 'succeeded') await loadDatasets(true).catch(() => {});
      refreshJobList();
      return;
    }
    if (T.view === 'jobs') jobTimer = setTimeout(poll, 400);
  };
  poll();
}

$('#mosaic-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const inputs = [...document.querySelectorAll('#mosaic-inputs input:checked')].map((i) => i.value);
  if (inputs.length < 2) {
    showMessage('Select at least two datasets for a mosaic.');
    return;
  }
  const output = $('#mosaic-output').value.trim();
  if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/.test(output)) {
    showMessage('The output name must be 1-64 characters of letters, digits, _ . - (not starting with .).');
    return;
  }
  const body = {
    type: 'mosaic',
    inputs,
    target: { auto: { frame: $('#mosaic-frame').value, projection: $('#mosaic-proj').value } },
    match_background: $('#mosaic-bg').checked,
    output: { name: output },
  };
  $('#mosaic-submit').disabled = true;
  try {
    const job = await getJSON('/api/v1/jobs', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...authHeaders() },
      body: JSON.stringify(body),
    });
    T.pendingOutput = output;
    replaceHash('jobs', null, { job: job.id });
    showJob(job);
    watchJob(job.id);
    refreshJobList();
  } catch (err) {
    if (err.status === 404) showMessage('This server does not run jobs (POST /api/v1/jobs answered 404).');
    else if (err.status === 401 || err.status === 403) showMessage(`Not allowed: ${err.message}. Enter the server's jobs token.`);
    else showMessage(`The mosaic was not accepted: ${err.message}`);
  } finally {
    $('#mosaic-submit').disabled = false;
  }
});

$('#job-cancel').addEventListener('click', async () => {
  if (!T.job) return;
  try {
    await request(`/api/v1/jobs/${enc(T.job.id)}`, { method: 'DELETE', headers: authHeaders() });
    watchJob(T.job.id);
  } catch (e) {
    showMessage(`cannot cancel job ${T.job.id}: ${e.message}`);
  }
});

// ---- start ---------------------------------------------------------------------------------------
route();
