"""Collections and discovery: a generated survey of 30 small overlapping TAN images (astropy,
different rotations and pixel scales, in nested folders, plus an unreadable file) served as
one collection; pyvo 1.2.1's SIA 2.0 client (pyvo.dal.sia2.SIAService) and SIA 1.0
SIAService find exactly the members that
astropy's WCS says overlap each query region, STILTS votlint accepts the answers and
datalinklint the members' DataLink, the
s_region corners are astropy's calc_footprint, access_url and DataLink give the member's
file, and a file added while serving is found by the rescan."""
import csv
import io
import json
import math
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from harness import Postgres, Server, need
from skygeom import image_distance, rotated_tan

try:
    import numpy as np
    import pyvo
    from pyvo.dal import sia2
    from astropy import units as u
    from astropy.coordinates import SkyCoord
    from astropy.io import fits
    from astropy.time import Time
    from astropy.wcs import WCS
except ImportError as e:  # pragma: no cover - scripts/setup.sh installs them
    if os.environ.get("CI") == "true":
        raise
    raise unittest.SkipTest(f"pyvo or astropy missing ({e}): scripts/setup.sh")

N = 64            # image side, pixels
RA0, DEC0 = 150.0, 2.0
# Some regions' answers are decided by less than this (degrees): not asserted either way.
AMBIGUOUS = 2e-5


def _write_image(path, w, header_extra):
    hdr = w.to_header()
    for k, v in header_extra.items():
        hdr[k] = v
    data = np.arange(N * N, dtype=np.float32).reshape(N, N)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fits.PrimaryHDU(data, hdr).writeto(path, overwrite=True)


def _in_image(px, py):
    return -0.5 <= px <= N - 0.5 and -0.5 <= py <= N - 0.5


def _cross(p, q, r, s):
    def orient(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return ((orient(r, s, p) > 0) != (orient(r, s, q) > 0) and
            (orient(p, q, r) > 0) != (orient(p, q, s) > 0))


def _in_poly(pt, poly):
    inside = False
    for i in range(len(poly)):
        (xi, yi), (xj, yj) = poly[i], poly[i - 1]
        if (yi > pt[1]) != (yj > pt[1]) and pt[0] < (xj - xi) * (pt[1] - yi) / (yj - yi) + xi:
            inside = not inside
    return inside


RECT = [(-0.5, -0.5), (N - 0.5, -0.5), (N - 0.5, N - 0.5), (-0.5, N - 0.5)]


def _polygon_overlaps(w, verts):
    """Whether the image of w overlaps the sky polygon verts [(ra, dec)...]: in the image's
    own gnomonic pixel plane great circles are straight lines, so plane geometry decides."""
    px, py = w.world_to_pixel(SkyCoord([v[0] for v in verts] * u.deg,
                                       [v[1] for v in verts] * u.deg))
    poly = list(zip(px.tolist(), py.tolist()))
    if any(_in_image(x, y) for x, y in poly) or any(_in_poly(c, poly) for c in RECT):
        return True
    return any(_cross(poly[i], poly[(i + 1) % len(poly)], RECT[j], RECT[(j + 1) % 4])
               for i in range(len(poly)) for j in range(4))


def _circle_distance(w, ra, dec):
    return image_distance(w, N, ra, dec)


class SiaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-sia-")
        cls.root = os.path.join(cls.tmp, "survey")
        rng = random.Random(33)
        cls.wcs = {}
        for i in range(30):
            ra = RA0 + rng.uniform(-0.06, 0.06)
            dec = DEC0 + rng.uniform(-0.06, 0.06)
            scale = rng.uniform(1.5, 3.0)
            rot = rng.uniform(0, 90)
            rel = "night%d/chip%02d/img%02d.fits" % (i % 2, i % 5, i)
            w = rotated_tan(ra, dec, N, scale, rot)
            extra = {"MJD-OBS": 60000.0 + i, "EXPTIME": 300.0, "FILTER": "r" if i % 2 else "g",
                     "WAVELENG": 6.2e-7 if i % 2 else 4.8e-7}
            _write_image(os.path.join(cls.root, rel), w, extra)
            cls.wcs[rel] = w
        # Not a FITS file, and a file the glob does not name.
        with open(os.path.join(cls.root, "night0", "broken.fits"), "wb") as f:
            f.write(b"this is not FITS" * 200)
        with open(os.path.join(cls.root, "night0", "notes.txt"), "w") as f:
            f.write("not an image\n")
        cls.srv = Server(datasets=[{"name": "night1", "kind": "collection",
                                    "images": os.path.join(cls.root, "**", "*.fits")}],
                         roots=[cls.root], extra={"collections_rescan_s": 1})
        cls.base = cls.srv.base

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, path):
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            return r.status, r.headers, r.read()

    def sia2(self):
        return sia2.SIAService(self.base + "/vo")

    def ids(self, results):
        return sorted(str(r["obs_id"]) for r in results)

    def test_capabilities(self):
        _, _, body = self.get("/vo/capabilities")
        self.assertIn(b'standardID="ivo://ivoa.net/std/SIA#query-2.0"', body)
        self.assertIn(b'standardID="ivo://ivoa.net/std/SIA"', body)
        self.assertTrue(self.sia2().query_ep.endswith("/vo/sia/query"))

    def test_circles_match_astropy(self):
        rng = random.Random(7)
        svc = self.sia2()
        checked = 0
        for _ in range(12):
            ra = RA0 + rng.uniform(-0.1, 0.1)
            dec = DEC0 + rng.uniform(-0.1, 0.1)
            r = rng.uniform(0.003, 0.04)
            got = set(self.ids(svc.search(pos=(ra * u.deg, dec * u.deg, r * u.deg))))
            for rel, w in self.wcs.items():
                d = _circle_distance(w, ra, dec)
                if abs(d - r) < AMBIGUOUS:
                    continue
                self.assertEqual(rel in got, d <= r, (rel, ra, dec, r, d))
                checked += 1
        self.assertGreater(checked, 300)

    def test_polygons_match_astropy(self):
        rng = random.Random(11)
        svc = self.sia2()
        nonempty = 0
        for _ in range(10):
            cra, cdec = RA0 + rng.uniform(-0.08, 0.08), DEC0 + rng.uniform(-0.08, 0.08)
            k = rng.choice([3, 4, 5])
            verts = []
            for j in range(k):
                a = 2 * math.pi * j / k + rng.uniform(0, 0.3)
                rr = rng.uniform(0.005, 0.03)
                verts.append((cra + rr * math.cos(a) / math.cos(math.radians(cdec)),
                              cdec + rr * math.sin(a)))
            flat = [x for v in verts for x in v]
            got = set(self.ids(svc.search(pos=tuple(x * u.deg for x in flat))))
            want = {rel for rel, w in self.wcs.items() if _polygon_overlaps(w, verts)}
            self.assertEqual(got, want, verts)
            nonempty += bool(want)
        self.assertGreater(nonempty, 5)

    def test_range_time_band_collection_maxrec(self):
        svc = self.sia2()
        every = self.ids(svc.search(pos=(0 * u.deg, 360 * u.deg, -90 * u.deg, 90 * u.deg)))
        self.assertEqual(every, sorted(self.wcs))
        # A small RANGE around one image's centre finds it.
        rel = sorted(self.wcs)[3]
        ra, dec = self.wcs[rel].wcs.crval
        got = self.ids(svc.search(pos=((ra - 1e-3) * u.deg, (ra + 1e-3) * u.deg,
                                       (dec - 1e-3) * u.deg, (dec + 1e-3) * u.deg)))
        self.assertIn(rel, got)
        # TIME in MJD: images 6..9 (MJD-OBS 60000 + i, EXPTIME 300 s: image 5 ends before).
        got = self.ids(svc.search(time=(Time(60005.01, format="mjd"),
                                         Time(60009.0, format="mjd"))))
        want = sorted(r for r in self.wcs if 6 <= int(r[-7:-5]) <= 9)
        self.assertEqual(got, want)
        # BAND in metres: the r-band half.
        got = self.ids(svc.search(band=(6.0e-7 * u.m, 6.5e-7 * u.m)))
        self.assertEqual(got, sorted(r for r in self.wcs if int(r[-7:-5]) % 2 == 1))
        self.assertEqual(self.ids(svc.search(collection="elsewhere")), [])
        self.assertEqual(len(self.ids(svc.search(collection="night1"))), 30)
        res = svc.search(maxrec=4)
        self.assertEqual(len(res), 4)
        # DALI: QUERY_STATUS OK before the table, OVERFLOW after it (pyvo reads the first).
        _, _, body = self.get("/vo/sia/query?MAXREC=4")
        self.assertLess(body.index(b'value="OK"'), body.index(b"</TABLE>"))
        self.assertGreater(body.index(b'name="QUERY_STATUS" value="OVERFLOW"'),
                           body.index(b"</TABLE>"))
        _, _, body = self.get("/vo/sia/query?MAXREC=30")
        self.assertNotIn(b"OVERFLOW", body)

    def test_rows_against_astropy_footprints(self):
        res = self.sia2().search(pos=(RA0 * u.deg, DEC0 * u.deg, 1 * u.deg))
        self.assertEqual(len(res), 30)
        for row in res:
            rel = str(row["obs_id"])
            w = self.wcs[rel]
            self.assertEqual(str(row["dataproduct_type"]), "image")
            self.assertEqual(str(row["obs_collection"]), "night1")
            self.assertEqual(str(row["access_format"]), "application/fits")
            self.assertEqual(str(row["obs_publisher_did"]), "ivo://tessera/night1?" + rel)
            fp = w.calc_footprint(axes=(N, N), center=False)
            reg = str(row["s_region"]).split()
            self.assertEqual(reg[:2], ["POLYGON", "ICRS"])
            corners = np.array(reg[2:], dtype=float).reshape(4, 2)
            # The same four corners (astropy lists them from another one).
            fpc = SkyCoord(fp[:, 0] * u.deg, fp[:, 1] * u.deg)
            for a, b in corners:
                self.assertLess(SkyCoord(a * u.deg, b * u.deg).separation(fpc).deg.min(), 1e-7)
            centre = w.pixel_to_world((N - 1) / 2, (N - 1) / 2)
            self.assertAlmostEqual(float(row["s_ra"]), centre.ra.deg, places=8)
            self.assertAlmostEqual(float(row["s_dec"]), centre.dec.deg, places=8)
            scale = math.sqrt(abs(np.linalg.det(w.wcs.cd))) * 3600
            self.assertAlmostEqual(float(row["s_resolution"]), scale, delta=scale * 1e-4)
            i = int(rel[-7:-5])
            self.assertAlmostEqual(float(row["t_min"]), 60000.0 + i, places=9)
            self.assertAlmostEqual(float(row["t_max"]), 60000.0 + i + 300 / 86400, places=9)
            self.assertEqual(int(row["s_xel1"]), N)
        # The member's FITS file, byte for byte, from access_url.
        row = res[0]
        with urllib.request.urlopen(str(row["access_url"]), timeout=30) as r:
            body = r.read()
        with open(os.path.join(self.root, str(row["obs_id"])), "rb") as f:
            self.assertEqual(body, f.read())
        # DataLink per row: #this is the same file.
        links = row.getdatalink()
        this = [lk for lk in links if lk.semantics == "#this"]
        self.assertEqual(len(this), 1)
        self.assertEqual(this[0].access_url, str(row["access_url"]))

    def test_soda_member(self):
        """SODA for a member image: its DataLink gives a #cutout link to the "soda"
        descriptor, and pyvo's SodaQuery with a circle cuts the member's own pixels (the
        box of the circle, the WCS moved with it), as SODA cuts a dataset."""
        from pyvo.dal.adhoc import SODA_SYNC_IVOID, SodaQuery
        res = self.sia2().search(pos=(RA0 * u.deg, DEC0 * u.deg, 1 * u.deg))
        row = sorted(res, key=lambda r: str(r["obs_id"]))[0]
        rel = str(row["obs_id"])
        links = row.getdatalink()
        svc = links.get_adhocservice_by_ivoid(SODA_SYNC_IVOID)
        self.assertEqual(svc.ID, "soda")
        cut = next(links.bysemantics("#cutout", include_narrower=False))
        self.assertEqual(cut.service_def, "soda")
        w = self.wcs[rel]
        ra, dec = (float(v) for v in w.pixel_to_world_values((N - 1) / 2, (N - 1) / 2))
        q = SodaQuery.from_resource(cut, svc, circle=[ra, dec, 0.005] * u.deg)
        self.assertEqual(q["ID"], "ivo://tessera/night1?" + rel)
        stream = q.execute_stream()
        q.raise_if_error()
        body = stream.read()
        # Given the whole DataLink table instead of one row, pyvo sends the ID of every
        # row (#this and #cutout: the same ID twice); one dataset named twice is one.
        qt = SodaQuery.from_resource(links, svc, circle=[ra, dec, 0.005] * u.deg)
        self.assertEqual(list(qt["ID"]), ["ivo://tessera/night1?" + rel] * 2)
        self.assertEqual(qt.execute_stream().read(), body)
        import io
        with fits.open(io.BytesIO(body)) as hl:
            got = hl[0].data
            hdr = hl[0].header
        with fits.open(os.path.join(self.root, rel)) as hl:
            full = hl[0].data
            orig = hl[0].header
        ny, nx = got.shape
        self.assertTrue(nx < N and ny < N and nx > 4 and ny > 4, got.shape)
        x0 = int(round(orig["CRPIX1"] - hdr["CRPIX1"]))
        y0 = int(round(orig["CRPIX2"] - hdr["CRPIX2"]))
        self.assertTrue(np.array_equal(got, full[y0:y0 + ny, x0:x0 + nx]))
        # the circle's centre lies at the centre of the box
        cx, cy = WCS(hdr).world_to_pixel_values(ra, dec)
        self.assertLess(abs(cx - (nx - 1) / 2), 1.5)
        self.assertLess(abs(cy - (ny - 1) / 2), 1.5)
        # IDs of two datasets: a UsageError that says to give one row
        two = self.sia2().search(pos=(RA0 * u.deg, DEC0 * u.deg, 1 * u.deg))
        ids = sorted({str(r["obs_publisher_did"]) for r in two})[:2]
        with self.assertRaises(urllib.error.HTTPError) as e:
            self.get("/vo/soda/sync?" + urllib.parse.urlencode(
                [("ID", ids[0]), ("ID", ids[1]), ("CIRCLE", "150 2 0.01")]))
        self.assertEqual(e.exception.code, 400)
        self.assertIn(b"give SodaQuery.from_resource one row of the DataLink table",
                      e.exception.read())
        # a member that is not there: 404 NotFoundFault
        with self.assertRaises(urllib.error.HTTPError) as e:
            self.get("/vo/soda/sync?ID=" + urllib.parse.quote(
                "ivo://tessera/night1?nothere.fits", safe="") + "&CIRCLE=150+2+0.01")
        self.assertEqual(e.exception.code, 404)

    def test_votlint(self):
        stilts = need("stilts")
        out = os.path.join(self.tmp, "answers")
        os.makedirs(out, exist_ok=True)
        for name, path in (("sia2", "/vo/sia/query?POS=CIRCLE+150+2+0.05&MAXREC=5"),
                           ("sia1", "/vo/sia1/query?POS=150,2&SIZE=0.05")):
            _, headers, body = self.get(path)
            p = os.path.join(out, name + ".xml")
            with open(p, "wb") as f:
                f.write(body)
            r = subprocess.run([stilts, "votlint", "votable=" + p], capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertNotIn("ERROR", r.stdout + r.stderr, name)
        # The DataLink answer of two members' obs_publisher_did: 0 errors.
        rel = sorted(self.wcs)[:2]
        url = self.base + "/vo/datalink?" + "&".join(
            "ID=" + urllib.parse.quote("ivo://tessera/night1?" + r, safe="") for r in rel)
        r = subprocess.run([stilts, "datalinklint", "votable=" + url], capture_output=True,
                           text=True, timeout=300, stdin=subprocess.DEVNULL)
        m = re.search(r"Totals: Errors: (\d+); Warnings: (\d+);.*Failures: (\d+)", r.stdout)
        self.assertIsNotNone(m, r.stdout[-2000:] + r.stderr[-2000:])
        self.assertEqual((m.group(1), m.group(3)), ("0", "0"), r.stdout[-3000:])
        # two rows a member: #this and #cutout (SODA)
        self.assertIn("Datalink table rows checked: 4\n", r.stdout)

    def test_sia1_matches_astropy(self):
        svc = pyvo.dal.SIAService(self.base + "/vo/sia1/query")
        ra, dec, size = RA0 + 0.02, DEC0 - 0.01, 0.03
        res = svc.search(pos=(ra, dec), size=size)
        got = sorted(str(r.title).split("/", 1)[1] for r in res)
        # The box: SIZE on the tangent plane at POS, its corners back on the sky.
        t = WCS(naxis=2)
        t.wcs.ctype = ["RA---TAN", "DEC--TAN"]
        t.wcs.crval = [ra, dec]
        t.wcs.crpix = [1.0, 1.0]
        t.wcs.cdelt = [-1.0, 1.0]   # "pixels" of one degree of the tangent plane
        h = math.degrees(math.tan(math.radians(size / 2)))
        box = t.wcs_pix2world([[h, -h], [-h, -h], [-h, h], [h, h]], 0)
        want = sorted(rel for rel, w in self.wcs.items() if _polygon_overlaps(w, box.tolist()))
        self.assertEqual(got, want)
        self.assertTrue(want)
        for r in res:
            self.assertEqual(r.format, "image/fits")
        self.assertEqual(len(svc.search(pos=(ra, dec), size=size, format="metadata")), 0)

    def test_stilts_cone_finds_members(self):
        """STILTS discovers the members as pyvo does: `stilts cone` with servicetype=sia2
        (serviceurl the query endpoint) equals the images astropy finds in the circle, and
        servicetype=sia1 equals pyvo's SIA 1.0 answer for the same position and size."""
        stilts = need("stilts")
        ra, dec, r = RA0 + 0.01, DEC0 + 0.02, 0.02

        def cone(kind, url):
            out = subprocess.run([stilts, "cone", "servicetype=" + kind, "serviceurl=" + url,
                                  "lon=%r" % ra, "lat=%r" % dec, "radius=%r" % r, "ofmt=csv"],
                                 capture_output=True, text=True, timeout=300,
                                 stdin=subprocess.DEVNULL)
            self.assertEqual(out.returncode, 0, out.stderr[-2000:])
            return list(csv.DictReader(io.StringIO(out.stdout)))

        rows = cone("sia2", self.base + "/vo/sia/query")
        got = sorted(row["obs_id"] for row in rows)
        want = sorted(rel for rel, w in self.wcs.items() if _circle_distance(w, ra, dec) <= r)
        self.assertTrue(want)
        self.assertEqual(got, want)
        rows = cone("sia1", self.base + "/vo/sia1/query")
        svc = pyvo.dal.SIAService(self.base + "/vo/sia1/query")
        pyvo_titles = sorted(str(x.title) for x in svc.search(pos=(ra, dec), size=2 * r))
        self.assertTrue(pyvo_titles)
        self.assertEqual(sorted(row["title"] for row in rows), pyvo_titles)

    def test_unreadable_is_listed(self):
        import json
        _, _, body = self.get("/api/v1/collections/night1")
        doc = json.loads(body)
        self.assertEqual(doc["members"], 30)
        self.assertEqual(doc["unreadable_count"], 1)
        self.assertEqual(doc["unreadable"][0]["obs_id"], "night0/broken.fits")
        reason = doc["unreadable"][0]["reason"]
        self.assertIn("night0/broken.fits", reason)
        self.assertNotIn(self.root, reason)   # the obs_id, never the server's path
        try:
            self.get("/api/v1/collections/nope")
            self.fail("expected 404")
        except urllib.error.HTTPError as e:
            self.assertEqual(e.code, 404)
            self.assertEqual(e.headers["Content-Type"], "application/problem+json")
        try:
            self.get("/api/v1/collections/night1/fits/../../etc/passwd")
            self.fail("expected 404")
        except urllib.error.HTTPError as e:
            self.assertEqual(e.code, 404)
        # Off the sky, a dec bound past the pole, a negative wavelength: each a
        # UsageError naming the parameter (DALI), the service still up.
        for query, name in (("POS=CIRCLE+400+0+1", b"POS"),
                            ("POS=RANGE+149+151+-100+3", b"POS"),
                            ("POS=RANGE+-10+400+1+3", b"POS"),
                            ("BAND=-1", b"BAND"),
                            # degenerate: three points of one meridian, and one point
                            # repeated: no area (DALI's polygon encloses one)
                            ("POS=POLYGON+150+1+150+2+150+3", b"great circle"),
                            ("POS=POLYGON+150+2+150+2+150+2", b"great circle")):
            try:
                self.get("/vo/sia/query?" + query)
                self.fail(f"{query}: expected 400")
            except urllib.error.HTTPError as e:
                self.assertEqual(e.code, 400, query)
                body = e.read()
                self.assertTrue(body.startswith(b"UsageError"), (query, body))
                self.assertIn(name, body, query)
        # Open bounds stay allowed.
        status, _, _ = self.get("/vo/sia/query?POS=RANGE+-Inf+%2BInf+-90+90&BAND=-Inf+1e-6")
        self.assertEqual(status, 200)

    def test_zz_new_file_found_while_serving(self):
        w = rotated_tan(RA0 + 0.5, DEC0 + 0.5, N, 2.0, 10.0)
        rel = "night2/late.fits"
        _write_image(os.path.join(self.root, rel), w, {})
        svc = self.sia2()
        deadline = time.time() + 15
        got = []
        while time.time() < deadline:
            got = self.ids(svc.search(pos=((RA0 + 0.5) * u.deg, (DEC0 + 0.5) * u.deg,
                                           0.01 * u.deg)))
            if got:
                break
            time.sleep(0.3)
        self.assertEqual(got, [rel])
        os.unlink(os.path.join(self.root, rel))
        deadline = time.time() + 15
        while time.time() < deadline and got:
            got = self.ids(svc.search(pos=((RA0 + 0.5) * u.deg, (DEC0 + 0.5) * u.deg,
                                           0.01 * u.deg)))
            time.sleep(0.3)
        self.assertEqual(got, [])


class SiaPostgresTest(unittest.TestCase):
    """The index in PostgreSQL (jobs.database): a second server with a jobs.dir of its own
    finds the members there and reads no header: a file rewritten in place with its size
    and mtime kept is still answered as first indexed.  The collection matches
    backgrounds: the first server stores the pairs and offsets there, the second finds
    them solved at once."""

    def test_index_in_postgres(self):
        pg = Postgres()
        tmp = tempfile.mkdtemp(prefix="tessera-siapg-")
        try:
            root = os.path.join(tmp, "survey")
            for i in range(5):
                _write_image(os.path.join(root, "a", "i%d.fits" % i),
                             rotated_tan(RA0 + 0.01 * i, DEC0, N, 2.0, 0.0), {})
            uri = pg.uri("tessera")
            coll = [{"name": "pgc", "kind": "collection", "match_background": True,
                     "images": os.path.join(root, "**", "*.fits")}]

            def server():
                jobs = tempfile.mkdtemp(dir=tmp)
                return Server(datasets=coll, roots=[root], demo=False,
                              extra={"collections_rescan_s": 0,
                                     "jobs": {"dir": jobs, "database": uri}})

            def ras():
                with urllib.request.urlopen(srv.base + "/vo/sia/query?COLLECTION=pgc",
                                            timeout=30) as r:
                    body = r.read().decode()
                svc = sia2.SIAService(srv.base + "/vo")
                return {str(r["obs_id"]): float(r["s_ra"]) for r in svc.search(
                    collection="pgc")}, body

            def background():
                with urllib.request.urlopen(srv.base + "/api/v1/collections/pgc",
                                            timeout=30) as r:
                    return json.loads(r.read())["background"]["state"]

            srv = server()
            try:
                first, _ = ras()
                end = time.monotonic() + 30
                while background() != "solved":
                    self.assertLess(time.monotonic(), end)
                    time.sleep(0.1)
            finally:
                srv.stop()
            self.assertGreaterEqual(
                int(pg.query("tessera", "SELECT count(*) FROM col_bgpair")[0][0]), 4)
            self.assertEqual(int(pg.query("tessera", "SELECT count(*) FROM col_image WHERE"
                                          " bg_offset IS NOT NULL")[0][0]), 5)
            self.assertEqual(sorted(first), ["a/i%d.fits" % i for i in range(5)])
            self.assertEqual(int(pg.query("tessera", "SELECT count(*) FROM col_image")[0][0]),
                             5)
            self.assertGreaterEqual(
                int(pg.query("tessera", "SELECT count(*) FROM col_cell")[0][0]), 5)
            # Same inode, size and mtime, other CRVAL1: only a header read would see it.
            path = os.path.join(root, "a", "i0.fits")
            st = os.stat(path)
            with fits.open(path, mode="update") as h:
                h[0].header["CRVAL1"] = RA0 + 1.0
            self.assertEqual(os.stat(path).st_size, st.st_size)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            srv = server()
            try:
                self.assertEqual(background(), "solved")
                again, _ = ras()
            finally:
                srv.stop()
            self.assertEqual(again, first)
        finally:
            pg.close()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
