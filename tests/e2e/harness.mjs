// Browser-test harness: starts tesserad (demo data, a scratch jobs directory, a free
// loopback port) and headless Chromium through playwright-core, with bounded waits.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const TOP = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Throws (fails the test) with `msg` when `cond` is false. */
export function check(cond, msg) {
  if (!cond) throw new Error(msg);
}

/** A test that cannot run here (a missing server feature) throws this. */
export class Skip extends Error {}

/** Resolves with p, or rejects after ms milliseconds naming `what`. */
export function within(ms, what, p) {
  let t;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms); }),
  ]);
}

/** Waits until fn() returns a truthy value (polled every `step` ms), at most ms. */
export async function until(ms, what, fn, step = 100) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, step));
  }
}

/** Starts tesserad on the demo datasets with jobs in a fresh directory.  Returns
 * {base, pid, dir, stop(), restart(between), log()}: restart stops the server, awaits
 * between() (may be omitted) and starts it again on the same port.  `prepare(dir)`, where
 * given, is awaited first with the server's scratch directory (removed by stop()) and may
 * return {data_roots, datasets, settings}: more data roots and datasets (collections
 * included) for the configuration, and top-level settings. */
export async function startServer({ tesserad, token = null, prepare = null } = {}) {
  const bin = tesserad || process.env.TESSERAD || path.join(TOP, 'build', 'tesserad');
  check(fs.existsSync(bin), `no tesserad at ${bin} (build first, or set TESSERAD)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-e2e-'));
  const demo = JSON.parse(fs.readFileSync(path.join(TOP, 'conf', 'demo.json'), 'utf8'));
  demo.listen = '127.0.0.1:0';
  demo.threads = 2;
  demo.data_roots = [path.join(TOP, 'data', 'demo')];
  // conf/demo.json names the viewer relative to itself; this copy lives elsewhere.
  demo.viewer = { dir: path.join(TOP, 'viewer'), node_modules: path.join(TOP, 'node_modules') };
  demo.jobs = { dir: path.join(dir, 'jobs'), token };
  if (prepare) {
    const more = (await prepare(dir)) || {};
    demo.data_roots.push(...(more.data_roots || []));
    demo.datasets.push(...(more.datasets || []));
    Object.assign(demo, more.settings || {});
  }
  const conf = path.join(dir, 'tessera.json');
  const env = { ...process.env, TESSERA_VIEWER_DIR: path.join(TOP, 'viewer'), TESSERA_NODE_MODULES: path.join(TOP, 'node_modules') };
  let stderr = '';
  let child = null, exited = null;
  const launch = async () => {
    fs.writeFileSync(conf, JSON.stringify(demo, null, 2));
    child = spawn(bin, ['--config', conf], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    exited = null;
    const mark = stderr.length;
    child.stderr.on('data', (b) => { stderr += b.toString(); });
    const me = child;
    child.on('exit', (code, sig) => { if (child === me) exited = { code, sig }; });
    return until(15000, 'tesserad to listen', () => {
      if (exited) throw new Error(`tesserad exited (${exited.code ?? exited.sig}): ${stderr}`);
      const m = stderr.slice(mark).match(/serving \d+ datasets?(?: and \d+ collections?)? on http:\/\/127\.0\.0\.1:(\d+)\//);
      return m ? Number(m[1]) : null;
    }, 50);
  };
  const port = await launch();
  const base = `http://127.0.0.1:${port}`;
  const halt = async () => {
    if (exited) return;
    process.kill(child.pid, 'SIGTERM');
    try {
      await until(12000, 'tesserad to stop', () => exited, 50);
    } catch (_) {
      process.kill(child.pid, 'SIGKILL');
      await until(5000, 'tesserad to die', () => exited, 50);
    }
  };
  const stop = async () => {
    await halt();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const restart = async (between) => {
    await halt();
    if (between) await between();
    demo.listen = `127.0.0.1:${port}`;
    await launch();
  };
  return { base, dir, get pid() { return child.pid; }, stop, restart, log: () => stderr };
}

/** Launches headless Chromium (Debian's /usr/bin/chromium unless $CHROMIUM). */
export async function launchBrowser() {
  const { chromium } = await import('playwright-core');
  const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
  return chromium.launch({
    executablePath,
    headless: true,
    timeout: 60000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** A new page of `viewport` size that may only talk to `base` (any other request is
 * aborted and recorded), records console errors and every response. */
export async function newPage(browser, base, viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport, deviceScaleFactor: 1 });
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  const rec = { external: [], responses: [], consoleErrors: [], pageErrors: [] };
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(base) || u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
    rec.external.push(u);
    return route.abort();
  });
  page.on('response', (r) => rec.responses.push({ url: r.url(), status: r.status() }));
  page.on('console', (m) => { if (m.type() === 'error') rec.consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => rec.pageErrors.push(String(e)));
  return { context, page, rec };
}

/** The text of the page's error messages (the viewer's #messages box). */
export async function pageMessages(page) {
  return page.$$eval('#messages .msg', (els) => els.map((e) => e.textContent.replace(/^×/, '').trim()));
}

/** Mean and standard deviation of the luminance of a PNG screenshot's pixels (decoded in
 * the page, so no image library is needed in node); `differ`: the fraction of the pixels
 * whose colour differs from that of the top-left one by more than 3 levels in a channel. */
export async function imageStats(page, png, { opaqueOnly = false } = {}) {
  const b64 = png.toString('base64');
  return page.evaluate(async ([data, opaque]) => {
    const img = new Image();
    img.src = `data:image/png;base64,${data}`;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.width;
    c.height = img.height;
    const ctx = c.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    let s = 0, s2 = 0, n = 0, differ = 0;
    const levels = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (Math.abs(d[i] - d[0]) > 3 || Math.abs(d[i + 1] - d[1]) > 3 || Math.abs(d[i + 2] - d[2]) > 3) differ++;
      if (opaque && d[i + 3] === 0) continue; // transparent (blank) pixels left out
      const y = 0.299 * d[i] + 0.587 * d[i + 1] + 0.114 * d[i + 2];
      s += y; s2 += y * y; n++;
      if (levels.size < 256) levels.add(Math.round(y));
    }
    const mean = s / n;
    return { mean, std: Math.sqrt(Math.max(0, s2 / n - mean * mean)), levels: levels.size, w: c.width, h: c.height, n,
      differ: differ / (d.length / 4) };
  }, [b64, opaqueOnly]);
}

export function hasChromium() {
  const exe = process.env.CHROMIUM || '/usr/bin/chromium';
  try {
    execFileSync(exe, ['--version'], { stdio: 'ignore', timeout: 20000 });
    return true;
  } catch (_) {
    return false;
  }
}

/** The picture-pixel centre of FITS pixel (x, y) of an xy view, in page coordinates. */
export async function pagePointOf(page, x, y) {
  return page.evaluate(([fx, fy]) => {
    const osd = window.tessera.osd;
    const item = osd.world.getItemAt(0);
    const ny = item.getContentSize().y;
    const vp = item.imageToViewportCoordinates(fx + 0.5, ny - 1 - fy + 0.5);
    const p = osd.viewport.pixelFromPoint(vp, true);
    const r = osd.element.getBoundingClientRect();
    return { x: r.left + p.x, y: r.top + p.y };
  }, [x, y]);
}
