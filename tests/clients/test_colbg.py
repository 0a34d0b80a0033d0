"""Background matching of a collection, on a generated survey with a known sky (issue 33,
item 7).  56 TAN images of 64 to 88 pixels (astropy; random rotations, pixel scales of
2 to 3.5", centres spread so that each overlaps several others) of one sky, a smooth
model plus 40 point sources (Gaussians of 2.5" sigma), each image with an additive
offset of -10..10 injected.  One folder served as two collections: "bgm"
(match_background true) and "raw" (false), combine mean.

(a) the offsets the server solves (/api/v1/collections/bgm, "bg_offset") equal the
    injected ones within 1% of the injected spread (largest |offset - mean|), both taken
    relative to their mean (the gauge: the solution's mean is zero);
(b) cutouts and an order-16 FITS tile equal astropy reproject 0.10's
    reproject_and_coadd (reproject_interp, combine_function='mean', match_background=
    False) within 2e-6 of the peak (the README's bilinear tolerance; test_colsky's), NaN
    where it is NaN: for "raw" on the images as written, for "bgm" on the images less the
    server's own offsets (so the comparison is of the combination, (a) of the offsets);
    and the matched cutout is flat where the raw one is not: against the true sky less
    the mean injected offset it is within 0.05 where every image agrees;
(c) SIA 2.0 answers for random circles equal the images astropy's WCS finds within each
    circle (tests/clients/skygeom.py; cases within 2e-5 degree skipped); a mosaic job
    over a circle of "bgm" equals reproject_and_coadd of its members less the offsets it
    stored at submit;
and a member rewritten with another offset is solved again (its new offset recovered)
while the others keep theirs up to the gauge."""
import io
import math
import os
import random
import shutil
import tempfile
import time
import unittest
import urllib.parse
import urllib.request
import warnings

from harness import Server, need_module
from skygeom import rotated_tan

RA0, DEC0 = 210.0, -12.0
NIMG = 56
TOL = 2e-6            # bilinear, of the reference's peak (README, Correctness)
ORDER = 16


def angdist(ra1, dec1, ra2, dec2):
    """Great-circle distance in degrees (haversine)."""
    p1, p2 = math.radians(dec1), math.radians(dec2)
    h = (math.sin((p2 - p1) / 2) ** 2 +
         math.cos(p1) * math.cos(p2) * math.sin(math.radians(ra2 - ra1) / 2) ** 2)
    return math.degrees(2 * math.asin(math.sqrt(min(1.0, h))))


class ColbgTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.np = np = need_module("numpy")
        need_module("reproject")
        from astropy.io import fits
        from astropy.wcs import WCS
        cls.fits, cls.WCS = fits, WCS
        cls.tmp = tempfile.mkdtemp(prefix="tessera-colbg-")
        cls.root = os.path.join(cls.tmp, "survey")
        rng = random.Random(33)
        cosd = math.cos(math.radians(DEC0))
        # point sources: (ra, dec, flux)
        cls.stars = [(RA0 + rng.uniform(-0.07, 0.07) / cosd, DEC0 + rng.uniform(-0.07, 0.07),
                      rng.uniform(50.0, 400.0)) for _ in range(40)]
        cls.members, cls.offsets, cls.paths = [], [], []
        for i in range(NIMG):
            n = rng.choice((64, 72, 80, 88))
            scale = rng.uniform(2.0, 3.5)
            w = rotated_tan(RA0 + rng.uniform(-0.06, 0.06) / cosd,
                            DEC0 + rng.uniform(-0.06, 0.06), n, scale,
                            rng.uniform(0.0, 360.0))
            off = rng.uniform(-10.0, 10.0)
            path = os.path.join(cls.root, "f%d" % (i % 4), "img%02d.fits" % i)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = cls.render(w, n, off)
            fits.PrimaryHDU(data, w.to_header()).writeto(path)
            cls.members.append((data, w))
            cls.offsets.append(off)
            cls.paths.append(os.path.relpath(path, cls.root))
        glob = os.path.join(cls.root, "**", "*.fits")
        cls.srv = Server(datasets=[{"name": "bgm", "kind": "collection", "images": glob,
                                    "combine": "mean", "match_background": True},
                                   {"name": "raw", "kind": "collection", "images": glob,
                                    "combine": "mean"}],
                         roots=[cls.root], demo=False, extra={"collections_rescan_s": 1})

    @classmethod
    def sky(cls, ra, dec):
        """The true sky at (ra, dec) (arrays, degrees)."""
        np = cls.np
        cosd = math.cos(math.radians(DEC0))
        x = (ra - RA0) * cosd * 60.0
        y = (dec - DEC0) * 60.0
        v = 100.0 + 15.0 * np.sin(0.5 * x + 0.3) * np.cos(0.4 * y) + 2.0 * x - 1.5 * y
        s2 = (2.5 / 3600.0) ** 2
        for sra, sdec, f in cls.stars:
            d2 = ((ra - sra) * cosd) ** 2 + (dec - sdec) ** 2
            v = v + f * np.exp(-0.5 * d2 / s2)
        return v

    @classmethod
    def render(cls, w, n, off):
        yy, xx = cls.np.mgrid[0:n, 0:n]
        ra, dec = w.pixel_to_world_values(xx, yy)
        return (cls.sky(ra, dec) + off).astype(cls.np.float32)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, path):
        status, _, body = self.srv.get(path, timeout=120)
        self.assertEqual(status, 200, body[:400])
        return body

    def solved(self, generation_above=0, seconds=60):
        """The collection's document once its offsets are solved (polling)."""
        import json
        end = time.monotonic() + seconds
        while True:
            doc = json.loads(self.get("/api/v1/collections/bgm"))
            bg = doc["background"]
            if bg["state"] == "solved" and bg["generation"] > generation_above:
                return doc
            self.assertLess(time.monotonic(), end, "offsets not solved: %s" % bg)
            time.sleep(0.2)

    def recovered(self, doc):
        by = {m["obs_id"]: m["bg_offset"] for m in doc["images"]}
        return [by[p] for p in self.paths]

    def coadd(self, members, wcs, shape):
        from reproject import reproject_interp
        from reproject.mosaicking import reproject_and_coadd
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return reproject_and_coadd(members, wcs, shape_out=shape,
                                       reproject_function=reproject_interp,
                                       combine_function="mean", match_background=False)

    def assert_like(self, got, ref, what):
        np = self.np
        got = np.asarray(got, dtype=np.float64)
        nan_got, nan_ref = np.isnan(got), np.isnan(ref)
        differ = int((nan_got != nan_ref).sum())
        ok = ~nan_got & ~nan_ref
        self.assertGreater(ok.sum(), 1000, what)
        err = np.abs(got[ok] - ref[ok]).max() / np.nanmax(np.abs(ref))
        print(f"\n{what}: {ok.sum()} pixels, max |diff| {err:.2e} of the peak, "
              f"{differ} NaN differ")
        self.assertLess(err, TOL, what)
        self.assertEqual(differ, 0, what)

    def check_offsets(self, rec, inj, what):
        np = self.np
        rec, inj = np.array(rec, dtype=np.float64), np.array(inj, dtype=np.float64)
        self.assertAlmostEqual(float(rec.mean()), 0.0, delta=1e-9)   # the gauge
        spread = np.abs(inj - inj.mean()).max()
        err = np.abs((rec - rec.mean()) - (inj - inj.mean())).max()
        print(f"\n{what}: largest error {err:.2e} ({err / spread:.2e} of the spread "
              f"{spread:.2f})")
        self.assertLess(err, 0.01 * spread, what)

    def cutout(self, name, **kw):
        q = dict(dataset=name, ra=RA0, dec=DEC0, fov=0.08, width=96, height=96, format="fits")
        q.update(kw)
        body = self.get("/api/v1/cutout?" + urllib.parse.urlencode(q))
        with self.fits.open(io.BytesIO(body)) as h:
            return h[0].data.astype(self.np.float64), self.WCS(h[0].header)

    def test_a_offsets(self):
        doc = self.solved()
        self.assertTrue(doc["match_background"])
        self.assertEqual(len(doc["images"]), NIMG)
        self.check_offsets(self.recovered(doc), self.offsets, "recovered offsets")

    def test_b_cutouts_and_tiles(self):
        np = self.np
        rec = self.recovered(self.solved())
        matched = [(d.astype(np.float64) - o, w) for (d, w), o in zip(self.members, rec)]
        for kw, what in ((dict(), "cutout"),
                         (dict(fov=0.12, width=120, height=100, rotation_angle=25),
                          "wide rotated cutout")):
            got, wcs = self.cutout("raw", **kw)
            ref, fp = self.coadd(self.members, wcs, got.shape)
            self.assertGreater(fp.max(), 5)
            self.assert_like(got, ref, what + " (raw)")
            got_m, wcs = self.cutout("bgm", **kw)
            ref_m, _ = self.coadd(matched, wcs, got_m.shape)
            self.assert_like(got_m, ref_m, what + " (matched)")
        # the matched sky is the true sky (less the mean offset, the gauge) where the
        # images agree, away from the point sources; the raw one is not
        got, wcs = self.cutout("raw")
        got_m, _ = self.cutout("bgm")
        yy, xx = np.mgrid[0:got.shape[0], 0:got.shape[1]]
        ra, dec = wcs.pixel_to_world_values(xx, yy)
        truth = self.sky(ra, dec) + float(np.mean(self.offsets))
        smooth = np.isfinite(got_m) & np.isfinite(got)
        cosd = math.cos(math.radians(DEC0))
        for sra, sdec, _ in self.stars:
            smooth &= ((ra - sra) * cosd) ** 2 + (dec - sdec) ** 2 > (12.0 / 3600.0) ** 2
        em = np.abs(got_m - truth)[smooth]
        er = np.abs(got - truth)[smooth]
        print(f"\nagainst the true sky: matched median {np.median(em):.3f}, "
              f"raw median {np.median(er):.3f}")
        self.assertLess(float(np.median(em)), 0.05)
        self.assertGreater(float(np.median(er)), 0.5)
        # an order-16 FITS tile of the matched sky
        from astropy_healpix import HEALPix
        import astropy.units as u
        npix = int(HEALPix(nside=2 ** ORDER, order="nested").lonlat_to_healpix(
            RA0 * u.deg, DEC0 * u.deg))
        body = self.get(f"/hips/bgm/Norder{ORDER}/Dir{npix // 10000 * 10000}/Npix{npix}.fits")
        with self.fits.open(io.BytesIO(body)) as h:
            got = h[0].data.astype(np.float64)
            w = self.WCS(h[0].header)
        ref, _ = self.coadd(matched, w, got.shape)
        self.assert_like(got, ref, "tile (matched)")
        status, headers, _ = self.srv.get(f"/hips/bgm/Norder{ORDER}/Dir"
                                          f"{npix // 10000 * 10000}/Npix{npix}.png")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "image/png")

    def test_c_sia_circles(self):
        from astropy.io.votable import parse_single_table
        from skygeom import image_distance
        rng = random.Random(7)
        cosd = math.cos(math.radians(DEC0))
        for _ in range(6):
            ra = RA0 + rng.uniform(-0.08, 0.08) / cosd
            dec = DEC0 + rng.uniform(-0.08, 0.08)
            r = rng.uniform(0.002, 0.03)
            body = self.get("/vo/sia/query?" + urllib.parse.urlencode(
                dict(POS=f"CIRCLE {ra} {dec} {r}", COLLECTION="bgm", MAXREC=1000)))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = parse_single_table(io.BytesIO(body)).to_table()
            got = set(str(v) for v in t["obs_id"])
            want, skip = set(), set()
            for p, (data, w) in zip(self.paths, self.members):
                d = image_distance(w, data.shape[0], ra, dec)
                if abs(d - r) < 2e-5:
                    skip.add(p)
                elif d <= r:
                    want.add(p)
            self.assertEqual(got - skip, want - skip, (ra, dec, r))
            self.assertTrue(want, (ra, dec, r))

    def test_c_mosaic_job(self):
        """A mosaic job over a circle of "bgm" takes the members' offsets at submit (kept
        in its request as bg_offsets) and equals reproject_and_coadd of those members less
        them."""
        np = self.np
        rec = dict(zip(self.paths, self.recovered(self.solved())))
        doc, got, hdr = self.job({"type": "mosaic",
                                  "inputs": {"collection": "bgm",
                                             "region": {"circle": [RA0, DEC0, 0.02]}},
                                  "target": {"region": True}, "method": "bilinear",
                                  "combine": "mean", "output": {"name": "bgm_job"}})
        inputs = doc["request"]["inputs"]
        members = inputs["members"]
        self.assertGreater(len(members), 5)
        np.testing.assert_allclose(inputs["bg_offsets"], [rec[m] for m in members],
                                   rtol=0, atol=1e-9)
        w = self.WCS(hdr)
        by = dict(zip(self.paths, self.members))
        ref, foot = self.coadd([(by[m][0].astype(np.float64) - rec[m], by[m][1])
                                for m in members], w, got.shape)
        self.assert_like(got, np.where(foot > 0, ref, np.nan), "mosaic job (matched)")

    def job(self, body):
        """Runs a job to success; its document, its product's values and header."""
        doc = self.srv.job(body)
        self.assertEqual(doc["state"], "succeeded", doc)
        with self.fits.open(io.BytesIO(self.get(f"/api/v1/jobs/{doc['id']}/result"))) as h:
            return doc, h[0].data.astype(self.np.float64), h[0].header

    def assert_same(self, got, ref, what):
        """Equal within float32 rounding (2 x 2^-24 of the peak), the same NaN pattern."""
        np = self.np
        nan_got, nan_ref = np.isnan(got), np.isnan(ref)
        ok = ~nan_got & ~nan_ref
        self.assertGreater(ok.sum(), 1000, what)
        peak = np.nanmax(np.abs(ref))
        err = np.abs(got[ok] - ref[ok]).max() / peak
        print(f"\n{what}: {ok.sum()} pixels, max |diff| {err:.2e} of the peak {peak:.1f}, "
              f"{int((nan_got != nan_ref).sum())} NaN differ")
        np.testing.assert_array_equal(nan_got, nan_ref, what)
        self.assertLessEqual(err, 2 * 2.0 ** -24, what)

    def test_c_job_equals_tile_and_cutout(self):
        """Issue 33 item 4: the product of a job over a collection equals the on-demand
        tiles it contains.  A mosaic job whose target is an order-16 FITS tile's own header
        (HPX) equals the tile, raw and background-matched (the same stored offsets); a job
        onto a TAN grid covering 4 tiles equals POST /api/v1/cutout onto that header."""
        np = self.np
        from astropy_healpix import HEALPix
        import astropy.units as u
        self.solved()
        npix = int(HEALPix(nside=2 ** ORDER, order="nested").lonlat_to_healpix(
            RA0 * u.deg, DEC0 * u.deg))
        for name in ("raw", "bgm"):
            path = f"/hips/{name}/Norder{ORDER}/Dir{npix // 10000 * 10000}/Npix{npix}.fits"
            with self.fits.open(io.BytesIO(self.get(path))) as h:
                tile = h[0].data.astype(np.float64)
                hdr = h[0].header
            # the region: a circle about the tile's centre through its corners
            w = self.WCS(hdr)
            ny, nx = tile.shape
            cra, cdec = (float(v) for v in w.pixel_to_world_values((nx - 1) / 2, (ny - 1) / 2))
            cx, cy = w.pixel_to_world_values([-0.5, nx - 0.5, -0.5, nx - 0.5],
                                             [-0.5, -0.5, ny - 0.5, ny - 0.5])
            r = 1.01 * max(angdist(cra, cdec, float(a), float(b)) for a, b in zip(cx, cy))
            doc, got, _ = self.job({"type": "mosaic",
                                 "inputs": {"collection": name,
                                            "region": {"circle": [cra, cdec, r]}},
                                 "target": {"header": hdr.tostring(sep="\n")},
                                 "method": "bilinear", "combine": "mean",
                                 "output": {"name": f"tilejob_{name}"}})
            self.assert_same(got, tile, f"job onto the tile's header ({name})")
        # 4 tiles' worth: a TAN grid twice the tile's side, of pixels twice the tile's,
        # rotated
        g = self.WCS(naxis=2)
        g.wcs.ctype = ["RA---TAN", "DEC--TAN"]
        g.wcs.crval = [cra, cdec]
        g.wcs.crpix = [(nx + 1) / 2, (ny + 1) / 2]
        d = 2 * float(np.sqrt(abs(np.linalg.det(w.pixel_scale_matrix))))
        c, sn = math.cos(math.radians(20.0)), math.sin(math.radians(20.0))
        g.wcs.cd = [[-d * c, d * sn], [d * sn, d * c]]
        h = g.to_header()
        h.insert(0, ("NAXIS2", ny))
        h.insert(0, ("NAXIS1", nx))
        h.insert(0, ("NAXIS", 2))
        text = h.tostring(sep="\n")
        for name in ("raw", "bgm"):
            req = urllib.request.Request(self.srv.url("/api/v1/cutout?" + urllib.parse.urlencode(
                dict(dataset=name, format="fits", method="bilinear"))), data=text.encode())
            with urllib.request.urlopen(req, timeout=60) as resp:
                body = resp.read()
            with self.fits.open(io.BytesIO(body)) as f:
                cut = f[0].data.astype(np.float64)
            _, got, _ = self.job({"type": "mosaic",
                               "inputs": {"collection": name,
                                          "region": {"circle": [cra, cdec, 2 * r]}},
                               "target": {"header": text},
                               "method": "bilinear", "combine": "mean",
                               "output": {"name": f"tanjob_{name}"}})
            self.assert_same(got, cut, f"job onto a TAN grid = its cutout ({name})")

    def test_d_changed_member(self):
        """One member rewritten with a new offset: solved again, the new offset found."""
        doc = self.solved()
        gen = doc["background"]["generation"]
        data, w = self.members[5]
        path = os.path.join(self.root, self.paths[5])
        new = self.offsets[5] + 25.0
        tmp = path + ".tmp"
        self.fits.PrimaryHDU(self.render(w, data.shape[0], new), w.to_header()).writeto(tmp)
        os.rename(tmp, path)
        try:
            inj = list(self.offsets)
            inj[5] = new
            self.check_offsets(self.recovered(self.solved(gen)), inj, "after a change")
        finally:
            self.fits.PrimaryHDU(data, w.to_header()).writeto(tmp)
            os.rename(tmp, path)
            self.solved(gen + 1)


if __name__ == "__main__":
    unittest.main()
