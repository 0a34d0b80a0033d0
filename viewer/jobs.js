/* The jobs view of the viewer: the job list, one job's progress and product, the mosaic
 * form.  What it shares with the rest of the app comes from app.js (imported bindings are
 * read when a function runs, after app.js has been evaluated); initJobs() wires the
 * form's and the cancel button's handlers. */
import { $, T, enc, request, getJSON, showMessage, clearMessage, failure, isOutage, hashFor,
  replaceHash, loadDatasets, fitsLink, findDataset } from './app.js';

// ----- jobs -------------------------------------------------------------------------------------
let jobTimer = null, listTimer = null;
const TERMINAL = new Set(['succeeded', 'failed', 'cancelled']);

function authHeaders() {
  const tok = $('#jobs-token').value.trim();
  try { localStorage.setItem('tessera.token', tok); } catch (_) { /* private mode */ }
  return tok ? { Authorization: `Bearer ${tok}` } : {};
}
export function stopJobPolling() {
  clearTimeout(jobTimer);
  clearTimeout(listTimer);
  jobTimer = listTimer = null;
}

export async function showJobs(params) {
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
    if (e.status === 404) showMessage('This server has no job endpoints yet (GET /api/v1/jobs answered 404).', 'info', 'jobs-list');
    else failure('jobs-list', `cannot list the jobs: ${e.message}`, isOutage(e));
    return;
  }
  clearMessage('jobs-list');
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
    span.append(`${name}: `, p, ' · ', fitsLink(name));
    return span;
  }
  const s = document.createElement('a');
  s.href = hashFor('sky', name);
  s.textContent = `${name} in the sky view`;
  s.className = 'open-sky';
  span.append(s, ' · ', p, ' · ', fitsLink(name));
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
      failure(`job-${id}`, `job ${id}: ${e.message}`, isOutage(e));
      return;
    }
    clearMessage(`job-${id}`);
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

export function initJobs() {
  $('#mosaic-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const inputs = [...document.querySelectorAll('#mosaic-inputs input:checked')].map((i) => i.value);
    // One message for the form, replaced by the next problem and removed once it submits.
    if (inputs.length < 2) {
      showMessage('Select at least two datasets for a mosaic.', 'error', 'jobs-submit');
      return;
    }
    const output = $('#mosaic-output').value.trim();
    if (!/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$/.test(output)) {
      showMessage('The output name must be 1-64 characters of letters, digits, _ . - (not starting with .).', 'error', 'jobs-submit');
      return;
    }
    clearMessage('jobs-submit');
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
      clearMessage('jobs-submit');
      replaceHash('jobs', null, { job: job.id });
      showJob(job);
      watchJob(job.id);
      refreshJobList();
    } catch (err) {
      const say = (t) => showMessage(t, 'error', 'jobs-submit');
      if (err.status === 404) say('This server does not run jobs (POST /api/v1/jobs answered 404).');
      else if (err.status === 401 || err.status === 403) say(`Not allowed: ${err.message}. Enter the server's jobs token.`);
      else say(`The mosaic was not accepted: ${err.message}`);
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
}
