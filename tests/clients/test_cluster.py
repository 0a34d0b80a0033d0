"""Three tesserad on one PostgreSQL job store and one shared jobs directory, behind nginx:
a job posted to one server is followed on another and downloaded from the third, its blocks
run on all of them; a server killed with SIGKILL loses only its leases; a cancel on one
stops the blocks on the others; nginx sends a dead server's tile requests elsewhere; a
stopped database pauses the job until it is back.  Inputs: the six small tiles of
tests/data/mosaic (a 71-block mosaic, under a second on an idle machine: the tests that
act in the middle of a job hold the servers still with SIGSTOP while they do).  A rechunk
and a power spectrum of a PNG stack (written by the test) begun by a server of one
thread count and finished by one of another follow the first one's plan (the records of
daemon/jobs/job_common.c jobc_plan_record): every value checked against the frames."""
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request
import zlib

from harness import TOP, Nginx, Postgres, Server

try:
    import numpy as np
    from astropy.io import fits
except ImportError:  # scripts/setup.sh installs python3-astropy; CI must have it
    if os.environ.get("CI") == "true":
        raise
    np = fits = None

MOSAIC = os.path.join(TOP, "tests", "data", "mosaic")
LEASE_S = 2


# A stack of random 8-bit PNG frames (written by the test, seeded) for the jobs planned
# by thread count: 200 frames of 256 x 160 are more than the rechunk's 64 cached frames, so
# both rechunk and the power spectrum's first stage run groups of planes in parts
# (daemon/jobs/job_rechunk.c): on 1 thread 4 groups of 64 planes, 1 part each (4
# blocks), on 2 threads 4 of 50 in 2 parts (8), on 3 threads 6 of 34 in 3 parts (18).
STACK_FRAMES, STACK_W, STACK_H = 200, 256, 160


def write_png8(path, rows):
    """A greyscale 8-bit PNG of the 2-D uint8 array rows (first row first)."""
    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c))

    h, w = rows.shape
    raw = b"".join(b"\0" + rows[y].tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


def make_stack(top):
    """Writes the stack under top/frames; its (nz, ny, nx) values in the servers' order:
    [z, y, x] with y = 0 the last row of a PNG frame (README, /zarr)."""
    rng = np.random.default_rng(20261207)
    cube = rng.integers(0, 256, size=(STACK_FRAMES, STACK_H, STACK_W), dtype=np.uint8)
    os.mkdir(os.path.join(top, "frames"))
    for k in range(STACK_FRAMES):
        write_png8(os.path.join(top, "frames", "f%03d.png" % k), cube[k])
    return cube[:, ::-1, :]


def target_header(scale=1.5):
    """reference_target.hdr with pixels `scale` times smaller (scale^2 times the work:
    enough blocks of enough length that three servers all take part)."""
    with open(os.path.join(MOSAIC, "reference_target.hdr")) as f:
        h = fits.Header.fromstring(f.read(), sep="\n")
    for k in (1, 2):
        h["NAXIS%d" % k] = int(round(h["NAXIS%d" % k] * scale))
        h["CRPIX%d" % k] = (h["CRPIX%d" % k] - 0.5) * scale + 0.5
        h["CDELT%d" % k] = h["CDELT%d" % k] / scale
    return "\n".join(c.image for c in h.cards)


def mosaic_body(name):
    hdr = target_header()
    return {"type": "mosaic",
            "inputs": [os.path.join(MOSAIC, "tile_%d.fits" % i) for i in range(1, 7)],
            "target": {"header": hdr}, "method": "lanczos3", "match_background": True,
            "output": {"name": name}}


def post(server, body):
    req = urllib.request.Request(server.url("/api/v1/jobs"), data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["id"]


def delete(server, path):
    req = urllib.request.Request(server.url(path), method="DELETE")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def job(server, jid):
    status, _, body = server.get("/api/v1/jobs/" + jid)
    return json.loads(body) if status == 200 else {"state": "?%d" % status}


def wait_state(server, jid, states, limit=60.0):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        d = job(server, jid)
        if d.get("state") in states:
            return d
        time.sleep(0.1)
    raise AssertionError(f"job {jid} not {states} within {limit} s: {d}")


def metric(server, name):
    status, _, body = server.get("/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def read_chunkstore(raw):
    """The (nz, ny, nx) values of a chunk store (engine/image/chunkstore.h: the JSON
    header, then every pixel's series in tile rows, tiles left to right, rows)."""
    head = json.loads(raw[:4096].decode().strip())
    nx, ny, nz = head["nx"], head["ny"], head["nz"]
    tx, ty = head["tile"]
    vals = np.frombuffer(raw, dtype=np.dtype(head["dtype"]).newbyteorder("<"),
                         offset=head["data_offset"])
    assert vals.size == nx * ny * nz, (vals.size, nx, ny, nz)
    out = np.empty((nz, ny, nx), dtype=vals.dtype)
    for y0 in range(0, ny, ty):
        h = min(ty, ny - y0)
        for x0 in range(0, nx, tx):
            w = min(tx, nx - x0)
            i = (y0 * nx + x0 * h) * nz
            out[:, y0:y0 + h, x0:x0 + w] = vals[i:i + h * w * nz].reshape(h, w, nz) \
                .transpose(2, 0, 1)
    return head, out


def product_data(server, jid):
    status, _, body = server.get("/api/v1/jobs/%s/result" % jid)
    assert status == 200, status
    fd, path = tempfile.mkstemp(suffix=".fits")
    with os.fdopen(fd, "wb") as f:
        f.write(body)
    try:
        with fits.open(path) as h:
            return np.array(h[0].data)
    finally:
        os.unlink(path)


class TestCluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if np is None:
            raise unittest.SkipTest("numpy and astropy are needed (python3-astropy)")
        cls.pg = Postgres()
        # The one-server product (SQLite store in its own jobs.dir), to compare with.
        with Server(roots=[MOSAIC], extra={"threads": 1}) as s:
            jid = post(s, mosaic_body("single"))
            d = wait_state(s, jid, ("succeeded", "failed", "cancelled"))
            assert d["state"] == "succeeded", d
            cls.reference = product_data(s, jid)
        cls.ndb = 0

    @classmethod
    def tearDownClass(cls):
        cls.pg.close()
        if getattr(cls, "stack_dir", None):
            shutil.rmtree(cls.stack_dir, ignore_errors=True)

    def setUp(self):
        TestCluster.ndb += 1
        self.db = "cluster%d" % TestCluster.ndb
        self.uri = self.pg.uri(self.db)
        self.shared = tempfile.mkdtemp(prefix="tessera-shared-")
        self.servers = []

    def tearDown(self):
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.shared, ignore_errors=True)

    def start(self, n, lease_s=LEASE_S):
        extra = {"threads": 1,
                 "jobs": {"dir": self.shared, "database": self.uri, "lease_s": lease_s}}
        new = [Server(roots=[MOSAIC], extra=extra) for _ in range(n)]
        self.servers += new
        return new

    def assert_clean(self):
        """Nothing left of the job in the shared directory (within a second)."""
        end = time.monotonic() + 3
        while True:
            work = os.listdir(os.path.join(self.shared, "work"))
            tmp = [f for f in os.listdir(os.path.join(self.shared, "results"))
                   if f.endswith(".tmp")]
            if not work and not tmp:
                return
            if time.monotonic() > end:
                self.fail(f"left in jobs.dir: work {work}, results {tmp}")
            time.sleep(0.1)

    def assert_same_values(self, data):
        self.assertEqual(data.shape, self.reference.shape)
        self.assertTrue(np.array_equal(data, self.reference, equal_nan=True),
                        "cluster product differs from the one-server product")

    def stack_server(self, threads):
        """A server of `threads` threads on the shared jobs, serving the random PNG stack
        (written once for the class) as dataset "stk"."""
        if not getattr(TestCluster, "stack_dir", None):
            TestCluster.stack_dir = tempfile.mkdtemp(prefix="tessera-stack-")
            TestCluster.stack = make_stack(TestCluster.stack_dir)
        extra = {"threads": threads,
                 "jobs": {"dir": self.shared, "database": self.uri, "lease_s": LEASE_S}}
        s = Server(roots=[self.stack_dir], demo=False, extra=extra,
                   datasets=[{"name": "stk",
                              "frames": os.path.join(self.stack_dir, "frames", "f*.png")}])
        self.servers.append(s)
        return s

    def shared_by_thread_counts(self, body, first, second):
        """Job `body` planned and begun by a server of `first` threads (alone, so its plan
        is the job's), that server killed (SIGKILL) once a block is done, the job then
        finished by a server of `second` threads.  Returns (the second server, the job's
        id, blocks done at the kill, the block counts of blocks.plan)."""
        a = self.stack_server(first)
        jid = post(a, body)
        # The job takes some 30 ms of CPU, and a server records its blocks done when it
        # has no more to run or a second after it last did (blocksrc_shared.c): held still
        # 250 ms for each 1 ms it runs, the first server records some blocks done at 1 s
        # and has others left (at 100 ms, a power spectrum's first stage on 3 threads
        # could be done by then).
        self.catch_running([a], jid, lambda done: done >= 1, "a block done", step=0.001,
                           hold=0.25)
        _, done = self.db_job(jid)
        wd = os.path.join(self.shared, "work", jid)
        with open(os.path.join(wd, "blocks.plan")) as f:
            counts = [int(v) for v in f.read().split()]
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        b = self.stack_server(second)
        d = wait_state(b, jid, ("succeeded", "failed", "cancelled"), limit=60)
        self.assertEqual(d["state"], "succeeded", d)
        self.assertEqual(d["progress"]["done"], d["progress"]["total"])
        ran = metric(b, "tessera_job_blocks_total")
        print(f"\n{body['type']}: {first} threads ran {done} of {d['progress']['total']} "
              f"blocks (plan {counts}), killed; {second} threads ran {ran:.0f}")
        self.assertLess(done, d["progress"]["total"])
        self.assertGreater(ran, 0)
        return b, jid, done, counts

    def test_rechunk_shared_by_servers_of_1_and_3_threads(self):
        """A rechunk begun on 1 thread (4 blocks: groups of 64 planes, whole) and finished
        on 3 (whose own plan would be 18: groups of 34 planes in 3 parts): every value of
        the store is the frames'.  Before the plan records (daemon/jobs/job_common.c
        jobc_plan_record), the second server planned for its own threads and block k
        named other work: parts of the store were never written."""
        b, jid, _, counts = self.shared_by_thread_counts(
            {"type": "rechunk", "dataset": "stk"}, 1, 3)
        self.assertEqual(counts[:2], [1, 4])
        status, _, raw = b.get("/api/v1/jobs/%s/result" % jid)
        self.assertEqual(status, 200)
        self.assertEqual(len(raw), 4096 + STACK_FRAMES * STACK_H * STACK_W)
        head, store = read_chunkstore(raw)
        self.assertEqual((head["nz"], head["ny"], head["nx"], head["dtype"]),
                         (STACK_FRAMES, STACK_H, STACK_W, "u1"))
        bad = np.argwhere(store != self.stack)
        self.assertEqual(len(bad), 0, "%d values of the store differ from the frames, "
                         "first [z, y, x] %s" % (len(bad), bad[:5].tolist()))
        # The copy is attached: the series read from it are the frames' too.
        for x, y in ((0, 0), (STACK_W - 1, STACK_H - 1), (77, 41), (250, 150)):
            status, _, body = b.get("/api/v1/datasets/stk/series?x=%d&y=%d&format=json"
                                    % (x, y))
            self.assertEqual(status, 200, body[:300])
            self.assertEqual(json.loads(body)["values"], self.stack[:, y, x].tolist())
        self.assert_clean()

    def test_power_spectrum_shared_by_servers_of_3_and_2_threads(self):
        """A power spectrum whose first stage (the store-order staging file, in groups of
        planes recorded in groups.plan) is begun on 3 threads (18 blocks: groups of 34
        planes in 3 parts) and finished on 2 (whose own plan would be 8: groups of 50 in
        2 parts): every pixel's spectrum is numpy's abs(fft(series))**2, within float32
        rounding (rtol 1e-6, and 1e-9 of the pixel's largest term for the terms near 0)."""
        b, jid, done, counts = self.shared_by_thread_counts(
            {"type": "power_spectrum", "dataset": "stk", "output": {"name": "ps"}}, 3, 2)
        self.assertEqual(counts[:2], [2, 18])
        self.assertLess(done, counts[1], "the first server ended stage A before its kill")
        got = product_data(b, jid)
        self.assertEqual(got.shape, (STACK_FRAMES, STACK_H, STACK_W))
        want = np.abs(np.fft.fft(self.stack.astype(np.float64), axis=0)) ** 2
        tol = 1e-6 * want + 1e-9 * want.max(axis=0)
        bad = np.argwhere(~(np.abs(got - want) <= tol))
        self.assertEqual(len(bad), 0, "%d terms differ from numpy's, first [k, y, x] %s"
                         % (len(bad), bad[:5].tolist()))
        self.assert_clean()

    def test_posted_on_a_followed_on_b_downloaded_from_c(self):
        a, b, c = self.start(3)
        jid = post(a, mosaic_body("m3"))
        # Every server takes blocks of a job posted to one.  The server that took the job
        # may run most of it before the others look (they poll the database; its 71
        # blocks take well under a second): once a block is done, all three are held
        # still (SIGSTOP), and C, then B, runs alone until it has run a block (a block
        # leased by a server held still is free again when its lease lapses), then is
        # held again; then all go on.  B and C let go together could leave one of them
        # none: the other took the blocks left and the job ended (2 runs in 49 here:
        # [26, 0, 45] and [48, 23, 0] blocks by A, B, C; twice before, in make check).
        self.catch_running([a, b, c], jid, lambda done: done >= 1, "a block done")
        try:
            for s in (c, b):
                self.thaw([s])
                self.wait_own_block(s, 30)
                s.proc.send_signal(signal.SIGSTOP)
        finally:
            self.thaw([a, b, c])
        d = wait_state(b, jid, ("succeeded", "failed", "cancelled"))
        self.assertEqual(d["state"], "succeeded", d)
        self.assertEqual(d["progress"]["done"], d["progress"]["total"])
        self.assert_same_values(product_data(c, jid))
        ran = [metric(s, "tessera_job_blocks_total") for s in (a, b, c)]
        print(f"\nblocks run per server: {ran} of {d['progress']['total']}")
        self.assertTrue(all(r and r > 0 for r in ran), ran)
        self.assertGreaterEqual(sum(ran), d["progress"]["total"])
        # The product is a dataset on every server within about a second.
        end = time.monotonic() + 2.5
        for s in (a, b, c):
            while s.get("/api/v1/datasets/m3")[0] != 200:
                self.assertLess(time.monotonic(), end, "product not registered everywhere")
                time.sleep(0.05)
        self.assert_clean()

    def leases_held(self, jid):
        """{pid: blocks of job jid not yet done that the database has leased to the server
        of that pid} (its owner name in the blocks table is host/pid/random)."""
        rows = self.pg.query(self.db, "SELECT split_part(owner, '/', 2), count(*) FROM "
                             "blocks WHERE job = '%s' AND NOT done AND owner IS NOT NULL "
                             "GROUP BY 1" % jid)
        return {int(pid): int(n) for pid, n in rows}

    def db_job(self, jid):
        """(state, blocks done) of job jid as the database holds them."""
        rows = self.pg.query(self.db, "SELECT state, done FROM jobs WHERE id = '%s'" % jid)
        return (rows[0][0], int(rows[0][1])) if rows else ("?", 0)

    def catch_running(self, servers, jid, ready, what, limit=60.0, may_end=False,
                      step=0.005, hold=0.02):
        """Stops (SIGSTOP) every server of `servers` at the first moment the database
        shows job jid running and ready() is true, and returns with them stopped; between
        looks they run for `step` seconds (5 ms), each look `hold` s (20 ms) after the
        stop.  On an idle machine the test jobs take well under a second, so a test that
        must act in the middle of one (kill a lease holder, stop the database, cancel)
        holds the servers still while it does, whatever the machine's speed.  When the
        job ends first: False if may_end, else a failure."""
        end = time.monotonic() + limit
        while time.monotonic() < end:
            for s in servers:
                s.proc.send_signal(signal.SIGSTOP)
            time.sleep(hold)   # statements sent before the stop are through
            state, done = self.db_job(jid)
            if state == "running" and ready(done):
                return True
            for s in servers:
                s.proc.send_signal(signal.SIGCONT)
            if state in ("succeeded", "failed", "cancelled"):
                if may_end:
                    return False
                self.fail(f"job {jid} {state} before {what}")
            time.sleep(step)
        if may_end:
            return False
        self.fail(f"job {jid}: not {what} within {limit} s")

    def wait_own_block(self, server, limit):
        """Waits (at most limit s) until server has run a block of a job; else fails with
        its job metrics and the end of its standard error."""
        end = time.monotonic() + limit
        while not metric(server, "tessera_job_blocks_total"):
            if time.monotonic() > end:
                m = [ln for ln in server.get("/metrics")[2].decode().splitlines()
                     if ln.startswith("tessera_job")]
                self.fail("no block run in %g s; metrics %s; stderr: %s"
                          % (limit, m, server.log()[-2000:]))
            time.sleep(0.01)

    @staticmethod
    def thaw(servers):
        for s in servers:
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)

    def kill_holding_leases(self, candidates, jid, limit=60.0, may_end=False, min_done=0):
        """SIGKILL of the first of candidates the database shows holding a lease on a block
        not done, all running servers held still (catch_running) while it is chosen.
        Not before min_done blocks are done.  Returns (server, its blocks leased when
        killed); (None, 0) when may_end and the job ended first."""
        live = [s for s in self.servers if s.proc.poll() is None]
        found = {}

        def holder(done):
            if done < min_done:
                return False
            held = self.leases_held(jid)
            for s in candidates:
                if held.get(s.proc.pid):
                    found["s"], found["n"] = s, held[s.proc.pid]
                    return True
            return False

        if not self.catch_running(live, jid, holder, "a candidate held a lease", limit,
                                  may_end):
            return None, 0
        victim = found["s"]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=10)
        self.thaw(live)
        return victim, found["n"]

    def test_sigkill_of_lease_holders(self):
        a, b, c = self.start(3)
        jid = post(a, mosaic_body("mk"))
        # Each server is killed while it holds leases (by the database), so that they
        # expire and are taken over: the first by A, B or the replacement, the second
        # (no server is killed after it) by C or the replacement.  Under load a server
        # may hold none at a given instant (its blocks recorded, none left to lease).
        first, held = self.kill_holding_leases([a, b], jid, min_done=8)
        d = job(c, jid)
        print(f"\nSIGKILL of a server holding {held} leases at "
              f"{d['progress']['done']}/{d['progress']['total']}")
        self.start(1)   # a replacement joins the running job
        time.sleep(1.0)   # the second kill, a second later
        second, held = self.kill_holding_leases([b if first is a else a], jid, limit=10,
                                                may_end=True)
        if second is not None:
            print(f"SIGKILL of a second server holding {held} leases")
        d = wait_state(c, jid, ("succeeded", "failed", "cancelled"), limit=90)
        self.assertEqual(d["state"], "succeeded", d)
        self.assert_same_values(product_data(c, jid))
        # The last server killed left leases that only servers still running can have
        # taken over (or the first one's were, by a server not killed after).
        taken = sum(metric(s, "tessera_job_lease_expiries_total") or 0
                    for s in self.servers if s.proc.poll() is None)
        self.assertGreaterEqual(taken, 1, "no expired lease was taken over")
        self.assert_clean()

    def test_cancel_on_b_stops_blocks_on_a(self):
        a, b = self.start(2)
        jid = post(a, mosaic_body("mc"))
        # Both held still once A holds a lease and 3 blocks are done; the cancel is sent
        # to B while A stays stopped with blocks in hand.
        self.catch_running([a, b], jid,
                           lambda done: done >= 3 and self.leases_held(jid).get(a.proc.pid),
                           "A held a lease after 3 blocks")
        self.thaw([b])
        try:
            self.assertIn(delete(b, "/api/v1/jobs/" + jid), (200, 202, 204))
        finally:
            self.thaw([a])
        d = wait_state(a, jid, ("cancelled", "succeeded", "failed"), limit=10)
        self.assertEqual(d["state"], "cancelled", d)
        time.sleep(0.5)
        before = metric(a, "tessera_job_blocks_total")
        time.sleep(LEASE_S + 0.5)
        after = metric(a, "tessera_job_blocks_total")
        self.assertEqual(before, after, "server A still ran blocks after the cancel")
        self.assertEqual(job(b, jid)["state"], "cancelled")
        self.assert_clean()

    def finisher_writing(self, jid):
        """pid of the server whose finish claim on job jid is alive while every block is
        done and the product is being written (its temporary file exists), else None."""
        rows = self.pg.query(self.db, "SELECT split_part(j.finisher, '/', 2), "
                             "(SELECT count(*) FROM blocks WHERE job = j.id), "
                             "(SELECT count(*) FROM blocks WHERE job = j.id AND NOT done) "
                             "FROM jobs j WHERE j.id = '%s'" % jid)
        if not rows or not rows[0][0] or int(rows[0][1]) == 0 or int(rows[0][2]) != 0:
            return None
        tmp = os.path.join(self.shared, "results", ".%s.tmp" % jid)
        return int(rows[0][0]) if os.path.exists(tmp) else None

    def test_cancel_during_the_finish_on_another_server(self):
        a, b = self.start(2)
        by_pid = {a.proc.pid: a, b.proc.pid: b}
        # Both held still while one of them writes the product (its finish claimed, every
        # block done); the cancel goes to the other.  The finish is short: a job that
        # ends before it is caught is followed by another, up to three.
        for attempt in range(3):
            name = "mf%d" % attempt
            jid = post(a, mosaic_body(name))
            if self.catch_running([a, b], jid, lambda done: self.finisher_writing(jid),
                                  "writing its product", may_end=True):
                break
            wait_state(a, jid, ("succeeded", "failed", "cancelled"))
        else:
            self.skipTest("the finish was never caught while it wrote the product")
        finisher = by_pid[self.finisher_writing(jid)]
        other = b if finisher is a else a
        self.thaw([other])
        try:
            self.assertIn(delete(other, "/api/v1/jobs/" + jid), (200, 202, 204))
        finally:
            self.thaw([finisher])
        # The finisher goes on to the end of its finish, then finds the job cancelled.
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if not os.path.exists(os.path.join(self.shared, "results", ".%s.tmp" % jid)) \
                    and metric(finisher, "tessera_job_database_up") == 1:
                break
            time.sleep(0.1)
        time.sleep(1.0)
        for s in (a, b):
            self.assertEqual(job(s, jid)["state"], "cancelled")
            self.assertEqual(s.get("/api/v1/datasets/" + name)[0], 404,
                             "a cancelled job's product was registered")
            self.assertNotEqual(s.get("/api/v1/jobs/%s/result" % jid)[0], 200)
        left = [f for f in os.listdir(os.path.join(self.shared, "results"))
                if f.startswith(jid) or f.startswith("." + jid)]
        self.assertEqual(left, [], "a cancelled job's product was left in results/")
        self.assert_clean()

    def test_two_jobs_run_at_once(self):
        # Leases of 30 s: a server held still keeps its blocks of the first job (nobody
        # takes them over during the test), so that the first job cannot end while it is
        # stopped; the other, with nothing of that job left to lease, takes up the second
        # job and runs it to its end meanwhile.  Which server holds blocks of the first
        # job is the database's choice: the one seen holding some is the one held still.
        a, b = self.start(2, lease_s=30)
        j1 = post(a, mosaic_body("m2a"))
        j2 = post(b, mosaic_body("m2b"))
        found = {}

        def holder(done):
            held = self.leases_held(j1)
            for s in (a, b):
                if done >= 3 and held.get(s.proc.pid):
                    found["s"] = s
                    return True
            return False

        self.catch_running([a, b], j1, holder, "a server held a lease after 3 blocks")
        still = found["s"]
        other = b if still is a else a
        try:
            self.thaw([other])
            d2 = wait_state(other, j2, ("succeeded", "failed", "cancelled"), limit=60)
            self.assertEqual(d2["state"], "succeeded", d2)
            self.assertEqual(self.db_job(j1)[0], "running",
                             "the first job ended while a server held its blocks")
        finally:
            self.thaw([still])
        d1 = wait_state(other, j1, ("succeeded", "failed", "cancelled"), limit=60)
        self.assertEqual(d1["state"], "succeeded", d1)
        self.assert_same_values(product_data(a, j1))
        self.assert_same_values(product_data(a, j2))
        self.assertGreater(metric(still, "tessera_job_blocks_total"), 0)
        self.assert_clean()

    def test_tiles_through_nginx_while_a_server_dies(self):
        servers = self.start(3)
        front = Nginx([s.base[len("http://"):] for s in servers])
        try:
            codes = []
            stop = threading.Event()

            def client():
                i = 0
                while not stop.is_set():
                    x, y = (i * 37) % 256, (i * 53) % 256
                    codes.append(front.get(f"/iiif/3/horsehead/{x},{y},128,128/64,/0/"
                                           "default.png")[0])
                    i += 1

            threads = [threading.Thread(target=client) for _ in range(4)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            servers[1].proc.send_signal(signal.SIGKILL)
            time.sleep(2.0)
            stop.set()
            for t in threads:
                t.join(timeout=60)
            bad = [c for c in codes if c >= 500]
            print(f"\n{len(codes)} tile requests through nginx, a server killed: "
                  f"{len(bad)} answered 5xx")
            self.assertGreater(len(codes), 20)
            self.assertEqual(bad, [])
            self.assertTrue(all(c == 200 for c in codes), set(codes))
        finally:
            front.close()

    def test_database_stopped_mid_job(self):
        a, b, c = self.start(3)
        jid = post(a, mosaic_body("md"))
        # All three held still after 10 blocks while the database stops under them.
        self.catch_running([a, b, c], jid, lambda done: done >= 10, "10 blocks done")
        try:
            self.pg.stop("fast")
        finally:
            self.thaw([a, b, c])
        try:
            time.sleep(1.5)
            status, _, body = a.get("/healthz")
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(body).get("database"), "unreachable", body)
            status, _, _ = b.get("/iiif/3/horsehead/0,0,256,256/128,/0/default.png")
            self.assertEqual(status, 200, "tiles stop without the database")
            ran = [metric(s, "tessera_job_blocks_total") for s in (a, b, c)]
            time.sleep(1.0)
            self.assertEqual(ran, [metric(s, "tessera_job_blocks_total") for s in (a, b, c)],
                             "blocks went on without the database")
        finally:
            self.pg.start()
        d = wait_state(b, jid, ("succeeded", "failed", "cancelled"), limit=90)
        self.assertEqual(d["state"], "succeeded", d)
        self.assert_same_values(product_data(c, jid))
        self.assertEqual(json.loads(a.get("/healthz")[2]).get("status"), "ok")
        self.assert_clean()

    def timed(self, server, path, method="GET", data=None):
        """(status, headers, body, seconds) of one request (15 s at most)."""
        t0 = time.monotonic()
        req = urllib.request.Request(server.url(path), method=method, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=15) as r:
                out = (r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            out = (e.code, e.headers, e.read())
        return out + (time.monotonic() - t0,)

    CUTOUT = "/api/v1/cutout?dataset=horsehead&ra=85.27&dec=-2.46&fov=0.1&width=64&height=64"

    def assert_unreachable_503(self, answer, problem=True):
        status, headers, body, _ = answer
        self.assertEqual(status, 503, body[:300])
        self.assertTrue(headers.get("Retry-After"), "503 without Retry-After")
        if problem:
            self.assertEqual(headers.get("Content-Type"), "application/problem+json")
            self.assertIn("database", json.loads(body)["detail"])
        else:
            self.assertNotIn(b"NotFound", body)

    def test_database_stalled(self):
        """The postmaster and its backends held still (SIGSTOP: a hung host, a partition):
        the first job call waits out jobs.database_timeout_s (1 s here), then the circuit
        answers job routes 503 at once; /healthz says degraded, cutouts and /metrics go on;
        all of it back within seconds of the database.  Before: the cutout and /metrics
        took the whole 15 s, /healthz did not answer."""
        extra = {"threads": 1, "jobs": {"dir": self.shared, "database": self.uri,
                                        "lease_s": LEASE_S, "database_timeout_s": 1}}
        a = Server(roots=[MOSAIC], extra=extra)
        self.servers.append(a)
        jid = post(a, mosaic_body("st"))
        self.assertEqual(wait_state(a, jid, ("succeeded", "failed"))["state"], "succeeded")
        self.assertEqual(self.timed(a, self.CUTOUT)[0], 200)
        self.pg.freeze()
        try:
            first = self.timed(a, "/api/v1/jobs/" + jid)
            self.assert_unreachable_503(first)
            self.assertLess(first[3], 3.0, "the first job call outlived its bound")
            health = self.timed(a, "/healthz")
            cut = self.timed(a, self.CUTOUT.replace("85.27", "85.26"))   # not cached
            met = self.timed(a, "/metrics")
            again = self.timed(a, "/api/v1/jobs/" + jid)
            listed = self.timed(a, "/api/v1/jobs")
            uws = self.timed(a, "/vo/uws/jobs/" + jid)
            posted = self.timed(a, "/api/v1/jobs", "POST",
                                json.dumps(mosaic_body("st2")).encode())
            self.assertEqual(health[0], 200)
            self.assertEqual(json.loads(health[2]),
                             {"status": "degraded", "database": "unreachable"})
            self.assertEqual(cut[0], 200, "cutouts stop with the database")
            self.assertEqual(met[0], 200)
            self.assertIn(b"tessera_job_database_up 0", met[2])
            for answer in (again, listed, posted):
                self.assert_unreachable_503(answer)
            self.assert_unreachable_503(uws, problem=False)
            for name, answer in (("healthz", health), ("cutout", cut), ("metrics", met),
                                 ("job", again), ("list", listed), ("uws job", uws),
                                 ("submit", posted)):
                self.assertLess(answer[3], 2.0, name + " waited on the stalled database")
            print("\nstalled database (timeout 1 s): first job GET %.3f s, then healthz "
                  "%.3f, cutout %.3f, metrics %.3f, job GET %.3f, list %.3f, UWS job %.3f, "
                  "submit %.3f s" % (first[3], health[3], cut[3], met[3], again[3],
                                     listed[3], uws[3], posted[3]))
        finally:
            self.pg.thaw()
        t0 = time.monotonic()
        while json.loads(a.get("/healthz")[2]).get("status") != "ok":
            self.assertLess(time.monotonic() - t0, 10.0, "the database did not come back")
            time.sleep(0.1)
        back = time.monotonic() - t0
        self.assertEqual(job(a, jid)["state"], "succeeded")
        print("back %.2f s after SIGCONT" % back)
        jid2 = post(a, mosaic_body("st3"))
        self.assertEqual(wait_state(a, jid2, ("succeeded", "failed"))["state"], "succeeded")

    def test_database_stopped_answers_503(self):
        """With the database stopped, job lists and jobs answer 503, never an empty list or
        NotFoundFault (clients would conclude the jobs were deleted)."""
        (a,) = self.start(1)
        jid = post(a, mosaic_body("sp"))
        self.assertEqual(wait_state(a, jid, ("succeeded", "failed"))["state"], "succeeded")
        self.pg.stop("fast")
        try:
            took = []
            for path in ("/api/v1/jobs", "/api/v1/jobs/" + jid,
                         "/api/v1/jobs/%s/result" % jid):
                took.append(self.timed(a, path))
                self.assert_unreachable_503(took[-1])
            for path in ("/vo/uws/jobs", "/vo/uws/jobs/" + jid):
                took.append(self.timed(a, path))
                self.assert_unreachable_503(took[-1], problem=False)
            took.append(self.timed(a, "/api/v1/jobs/" + jid, "DELETE"))
            self.assert_unreachable_503(took[-1])
            cut = self.timed(a, self.CUTOUT.replace("85.27", "85.25"))
            self.assertEqual(cut[0], 200)
            health = self.timed(a, "/healthz")
            self.assertEqual(json.loads(health[2]).get("database"), "unreachable")
            for answer in took + [cut, health]:
                self.assertLess(answer[3], 2.0)
            print("\nstopped database: list, job, result, UWS list, UWS job, DELETE 503 in "
                  "%s s; cutout %.3f s, healthz %.3f s"
                  % (", ".join("%.3f" % t[3] for t in took), cut[3], health[3]))
        finally:
            self.pg.start()
        t0 = time.monotonic()
        while a.get("/api/v1/jobs/" + jid)[0] != 200:
            self.assertLess(time.monotonic() - t0, 10.0, "the database did not come back")
            time.sleep(0.05)
        print("back %.2f s after pg_ctl start returned" % (time.monotonic() - t0))
        status, _, body = a.get("/vo/uws/jobs")
        self.assertEqual(status, 200)
        self.assertIn(jid.encode(), body)

    def test_malformed_job_id_in_the_database(self):
        """A row of the shared jobs table whose id is not one of the server's (written by a
        mistake or an intruder) is left out with a line in the log: never a path."""
        (a,) = self.start(1)
        jid = post(a, mosaic_body("ok"))
        self.assertEqual(wait_state(a, jid, ("succeeded", "failed"))["state"], "succeeded")
        outside = os.path.join(self.shared, "..", "outside.fits")
        product_path = os.path.join(self.shared, "results", jid + ".fits")
        shutil.copy(product_path, outside)
        try:
            self.pg.query(self.db, "INSERT INTO jobs (id, type, state, body, created, finished, "
                          "product_dataset, content_type) VALUES ('../../outside', 'mosaic', "
                          "'succeeded', '{}', 1, extract(epoch from now()) + 5, 'stolen', "
                          "'application/fits')")
            (b,) = self.start(1)   # registers the products it finds at its start
            end = time.monotonic() + 5
            while "ignored the job row with id '../../outside'" not in b.log():
                self.assertLess(time.monotonic(), end, b.log()[-2000:])
                time.sleep(0.1)
            for s in (a, b):
                status, _, body = s.get("/api/v1/jobs")
                self.assertEqual(status, 200)
                self.assertEqual([d["id"] for d in json.loads(body)], [jid])
                self.assertEqual(s.get("/api/v1/datasets/stolen")[0], 404)
            self.assertTrue(os.path.exists(product_path))
        finally:
            os.unlink(outside)

    def test_blocks_table_dropped_fails_the_job(self):
        """The blocks table dropped under a running job: the job fails, its error naming
        the table, instead of staying running."""
        (a,) = self.start(1)
        jid = post(a, mosaic_body("bd"))
        self.catch_running([a], jid, lambda done: done >= 5, "5 blocks done")
        try:
            self.pg.query(self.db, "DROP TABLE blocks")
        finally:
            self.thaw([a])
        d = wait_state(a, jid, ("succeeded", "failed", "cancelled"), limit=20)
        self.assertEqual(d["state"], "failed", d)
        self.assertIn('relation "blocks" does not exist', d["error"]["detail"])

    def test_worker_takes_blocks_and_leaves_on_sigterm(self):
        (a,) = self.start(1)
        tessera = os.path.join(os.path.dirname(a.proc.args[0]), "tessera")
        log = open(os.path.join(self.shared, "worker.log"), "wb")
        w = subprocess.Popen([tessera, "worker", "--config", a.conf_path],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        try:
            time.sleep(1.0)
            jid = post(a, mosaic_body("mw"))
            # The server is held still (SIGSTOP) from the moment the job runs, so the
            # worker has it to itself; SIGTERM once the worker holds leases after blocks
            # done, then the server goes on and finishes the job.
            self.catch_running([a], jid, lambda done: done >= 1, "running")
            try:
                # The server may have recorded several blocks before it was stopped:
                # only blocks recorded since then are the worker's own.
                _, done0 = self.db_job(jid)
                self.catch_running([], jid, lambda done: done >= max(5, done0 + 1) and any(
                    k != str(a.proc.pid) for k in map(str, self.leases_held(jid))),
                    "the worker held leases after blocks of its own")
                w.send_signal(signal.SIGTERM)
                self.assertEqual(w.wait(timeout=30), 0)
            finally:
                self.thaw([a])
        finally:
            if w.poll() is None:
                w.kill()
                w.wait()
            log.close()
        with open(os.path.join(self.shared, "worker.log")) as f:
            text = f.read()
        m = re.search(r"SIGTERM received after (\d+) job blocks", text)
        self.assertTrue(m and int(m.group(1)) > 0, text)
        os.unlink(os.path.join(self.shared, "worker.log"))
        d = wait_state(a, jid, ("succeeded", "failed", "cancelled"))
        self.assertEqual(d["state"], "succeeded", d)
        self.assert_same_values(product_data(a, jid))
        self.assert_clean()


if __name__ == "__main__":
    unittest.main()
