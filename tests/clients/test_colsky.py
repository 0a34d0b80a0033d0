"""A collection's sky on demand: 20 small overlapping TAN images (astropy; different
rotations, pixel scales and an additive offset each) served as one collection
(combine mean).  A cutout across member borders and a FITS HiPS tile equal astropy
reproject 0.10's reproject_and_coadd (reproject_interp, combine_function='mean',
match_background=False) onto the same grid within the README's bilinear tolerance (2e-6
of the peak), NaN where it is NaN; astroquery's hips2fits cuts the same pixels; Moc.fits
covers every member; properties describe the union; the Allsky holds the members' cells."""
import io
import math
import os
import random
import shutil
import tempfile
import time
import unittest
import urllib.parse
import warnings

from harness import Server, need_module

N = 48                      # image side, pixels
# The centre of HEALPix cell 1744516 of order 9 (nested): a pixel of the Allsky (its
# 64-pixel cells are cells of order 9) the members cover.
RA0, DEC0 = 149.94140625, 2.014719913447979
TOL = 2e-6                  # bilinear, of the reference's peak (README, Correctness)
ORDER = 16                  # tile order whose cells (3.2") are finer than two member pixels


def sky(ra, dec):
    """A smooth sky: the value at (ra, dec), degrees."""
    x = (ra - RA0) * math.cos(math.radians(DEC0)) * 60.0
    y = (dec - DEC0) * 60.0
    return 100.0 + 20.0 * math.sin(0.9 * x + 0.3) * math.cos(0.7 * y) + 3.0 * x


class ColskyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.np = np = need_module("numpy")
        need_module("reproject")
        from astropy.io import fits
        from astropy.wcs import WCS
        cls.fits, cls.WCS = fits, WCS
        cls.tmp = tempfile.mkdtemp(prefix="tessera-colsky-")
        cls.root = os.path.join(cls.tmp, "survey")
        rng = random.Random(3)
        cls.members = []
        vsky = np.vectorize(sky)
        for i in range(20):
            ra = RA0 + rng.uniform(-0.02, 0.02) / math.cos(math.radians(DEC0))
            dec = DEC0 + rng.uniform(-0.02, 0.02)
            scale = rng.uniform(2.0, 3.0) / 3600.0
            rot = math.radians(rng.uniform(0.0, 360.0))
            w = WCS(naxis=2)
            w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
            w.wcs.crval = [ra, dec]
            w.wcs.crpix = [(N + 1) / 2.0, (N + 1) / 2.0]
            c, s = math.cos(rot), math.sin(rot)
            w.wcs.cd = [[-scale * c, scale * s], [scale * s, scale * c]]
            yy, xx = np.mgrid[0:N, 0:N]
            wra, wdec = w.pixel_to_world_values(xx, yy)
            data = (vsky(wra, wdec) + rng.uniform(-5.0, 5.0)).astype(np.float32)
            path = os.path.join(cls.root, "d%d" % (i % 3), "img%02d.fits" % i)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fits.PrimaryHDU(data, w.to_header()).writeto(path)
            cls.members.append((data, w))
        cls.srv = Server(datasets=[{"name": "night1", "kind": "collection",
                                    "images": os.path.join(cls.root, "**", "*.fits"),
                                    "combine": "mean"},
                                   {"name": "night1med", "kind": "collection",
                                    "images": os.path.join(cls.root, "**", "*.fits"),
                                    "combine": "median"}],
                         roots=[cls.root], demo=False)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, path):
        status, _, body = self.srv.get(path, timeout=120)
        self.assertEqual(status, 200, body[:400])
        return body

    def coadd(self, wcs, shape):
        from reproject import reproject_interp
        from reproject.mosaicking import reproject_and_coadd
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref, fp = reproject_and_coadd(self.members, wcs, shape_out=shape,
                                          reproject_function=reproject_interp,
                                          combine_function="mean", match_background=False)
        return ref, fp

    def assert_like(self, got, ref, what):
        np = self.np
        got = np.asarray(got, dtype=np.float64)
        nan_got, nan_ref = np.isnan(got), np.isnan(ref)
        differ = int((nan_got != nan_ref).sum())
        ok = ~nan_got & ~nan_ref
        self.assertGreater(ok.sum(), 1000, what)
        peak = np.nanmax(np.abs(ref))
        err = np.abs(got[ok] - ref[ok]).max() / peak
        print(f"\n{what}: {ok.sum()} pixels, max |diff| {err:.2e} of the peak, "
              f"{differ} NaN differ")
        self.assertLess(err, TOL, what)
        self.assertEqual(differ, 0, what)

    def test_cutout_across_borders(self):
        # one inside the survey, and a wider rotated one where each member covers a small
        # part of the grid (each is reprojected onto its part only)
        for fov, w, h, rot, what in ((0.07, 100, 90, 0, "cutout"),
                                     (0.2, 160, 120, 30, "wide rotated cutout")):
            body = self.get("/api/v1/cutout?" + urllib.parse.urlencode(dict(
                dataset="night1", ra=RA0 + 0.01, dec=DEC0 - 0.01, fov=fov, width=w, height=h,
                rotation_angle=rot, format="fits")))
            with self.fits.open(io.BytesIO(body)) as hl:
                got = hl[0].data.astype(self.np.float64)
                wcs = self.WCS(hl[0].header)
            self.assertEqual(got.shape, (h, w))
            ref, fp = self.coadd(wcs, got.shape)
            self.assertGreater(fp.max(), 5)   # many members overlap
            self.assert_like(got, ref, what)

    def test_median(self):
        """combine median: the median of the members reprojected one by one
        (reproject_interp) onto the grid, where they are finite."""
        np = self.np
        from reproject import reproject_interp
        body = self.get("/api/v1/cutout?" + urllib.parse.urlencode(dict(
            dataset="night1med", ra=RA0, dec=DEC0, fov=0.05, width=80, height=70,
            format="fits")))
        with self.fits.open(io.BytesIO(body)) as hl:
            got = hl[0].data.astype(np.float64)
            wcs = self.WCS(hl[0].header)
        stack = []
        for m in self.members:
            arr, fp = reproject_interp(m, wcs, shape_out=got.shape)
            stack.append(np.where(fp > 0, arr, np.nan))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = np.nanmedian(np.array(stack), axis=0)
        self.assert_like(got, ref, "median cutout")

    def test_hips_tile(self):
        from astropy_healpix import HEALPix
        import astropy.units as u
        npix = int(HEALPix(nside=2 ** ORDER, order="nested").lonlat_to_healpix(
            RA0 * u.deg, DEC0 * u.deg))
        body = self.get(f"/hips/night1/Norder{ORDER}/Dir{npix // 10000 * 10000}/Npix{npix}.fits")
        with self.fits.open(io.BytesIO(body)) as h:
            got = h[0].data.astype(self.np.float64)
            w = self.WCS(h[0].header)
        ref, _ = self.coadd(w, got.shape)
        self.assert_like(got, ref, "tile")
        # the same tile as PNG, and a tile outside every member: 404
        status, headers, _ = self.srv.get(f"/hips/night1/Norder{ORDER}/Dir"
                                          f"{npix // 10000 * 10000}/Npix{npix}.png")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "image/png")
        status, _, body = self.srv.get("/hips/night1/Norder3/Dir0/Npix0.fits")
        self.assertEqual(status, 404, body)
        self.assertIn(b"outside the footprint", body)

    def test_hips2fits(self):
        need_module("astroquery")
        from astroquery.hips2fits import hips2fitsClass
        import astropy.units as u
        from astropy.coordinates import Angle, Latitude, Longitude
        h2f = hips2fitsClass()
        h2f.server = self.srv.url("/hips-image-services/hips2fits")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hdul = h2f.query(hips="night1", width=100, height=90, projection="TAN",
                             ra=Longitude(RA0 * u.deg), dec=Latitude(DEC0 * u.deg),
                             fov=Angle(0.07 * u.deg), rotation_angle=Angle(0 * u.deg))
        got = hdul[0].data.astype(self.np.float64)
        ref, _ = self.coadd(self.WCS(hdul[0].header), got.shape)
        self.assert_like(got, ref, "hips2fits")

    def test_moc_and_properties(self):
        np = self.np
        from astropy_healpix import HEALPix
        import astropy.units as u
        with self.fits.open(io.BytesIO(self.get("/hips/night1/Moc.fits"))) as h:
            uniq = np.asarray(h[1].data["UNIQ"], dtype=np.int64)
            self.assertEqual(h[1].header["MOCORDER"], 8)
        order = (np.floor(np.log2(uniq) / 2) - 1).astype(int)
        cell = uniq - 4 ** (order + 1)
        hp = HEALPix(nside=2 ** 8, order="nested")
        for data, w in self.members:
            ny, nx = data.shape
            for x, y in ((0, 0), (nx - 1, 0), (0, ny - 1), (nx - 1, ny - 1), (nx / 2, ny / 2)):
                ra, dec = w.pixel_to_world_values(x, y)
                c = int(hp.lonlat_to_healpix(float(ra) * u.deg, float(dec) * u.deg))
                self.assertTrue(np.any(c >> (2 * (8 - order)) == cell), (ra, dec))
        text = self.get("/hips/night1/properties").decode()
        props = {k.strip(): v.strip() for k, v in
                 (line.split("=", 1) for line in text.splitlines() if "=" in line)}
        self.assertAlmostEqual(float(props["hips_initial_ra"]), RA0, delta=0.03)
        self.assertAlmostEqual(float(props["hips_initial_dec"]), DEC0, delta=0.03)
        self.assertGreater(float(props["hips_initial_fov"]), 0.04)
        self.assertLess(float(props["hips_initial_fov"]), 0.2)
        # the finest member pixel is 2 arcsec or more: the pixels of order 8's tiles (cells
        # of order 17, 1.6") are the first finer, as for a dataset of that pixel scale
        self.assertEqual(int(props["hips_order"]), 8, text)
        self.assertAlmostEqual(float(props["hips_pixel_scale"]) * 3600, 1.61, delta=0.01)
        lo, hi = (float(v) for v in props["hips_pixel_cut"].split())
        self.assertLess(lo, hi)

    def test_problems(self):
        status, headers, body = self.srv.get("/api/v1/cutout?dataset=night1&ra=10&dec=-40"
                                             "&fov=0.05&width=10&height=10&format=fits")
        self.assertEqual(status, 422, body)
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        status, _, body = self.srv.get("/api/v1/cutout?dataset=night1&ra=150&dec=2"
                                       "&fov=0.05&width=10&height=10&plane=1")
        self.assertEqual(status, 400, body)

    def test_values(self):
        """/values of the collection at a position: the members combined on the 5 x 5 TAN
        grid centred there (2" pixels), equal to reproject_and_coadd on that grid."""
        np = self.np
        import json
        scale = 2.0 / 3600.0
        body = self.get("/api/v1/datasets/night1/values?" + urllib.parse.urlencode(dict(
            ra=RA0 + 0.003, dec=DEC0 - 0.002, size=5, scale=scale)))
        doc = json.loads(body)
        self.assertEqual(doc["size"], 5)
        self.assertEqual(doc["frame"], "icrs")
        got = np.array([[np.nan if v is None else v for v in row] for row in doc["values"]])
        w = self.WCS(naxis=2)
        w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
        w.wcs.crval = [RA0 + 0.003, DEC0 - 0.002]
        w.wcs.crpix = [3.0, 3.0]
        w.wcs.cdelt = [-scale, scale]
        ref, _ = self.coadd(w, (5, 5))
        peak = np.nanmax(np.abs(ref))
        self.assertTrue(np.all(np.isfinite(ref)))
        err = np.abs(got - ref).max() / peak
        print(f"\nvalues 5x5: max |diff| {err:.2e} of the peak")
        self.assertLess(err, TOL)
        # one value (the default size) is the centre of that grid; outside every member
        # the values are null; a bad parameter is a problem document naming it
        one = json.loads(self.get("/api/v1/datasets/night1/values?" + urllib.parse.urlencode(
            dict(ra=RA0 + 0.003, dec=DEC0 - 0.002))))
        self.assertLess(abs(one["values"][0][0] - ref[2, 2]) / peak, TOL)
        far = json.loads(self.get("/api/v1/datasets/night1/values?ra=10&dec=-40"))
        self.assertEqual(far["values"], [[None]])
        status, headers, body = self.srv.get("/api/v1/datasets/night1/values?ra=10&dec=95")
        self.assertEqual(status, 400, body)
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        self.assertEqual(json.loads(body)["parameter"], "dec")

    def test_footprint(self):
        """/footprint of the collection: each member's outline (its pixel-edge corners),
        as astropy's calc_footprint gives them, in ICRS and galactic."""
        np = self.np
        import json
        doc = json.loads(self.get("/api/v1/datasets/night1/footprint"))
        self.assertEqual((doc["frame"], doc["unit"], doc["members"], doc["truncated"]),
                         ("icrs", "deg", 20, False))
        self.assertEqual(len(doc["polygons"]), 20)
        refs = [w.calc_footprint(axes=(N, N), center=False) for _, w in self.members]
        for poly in doc["polygons"]:
            p = np.array(poly)
            self.assertEqual(p.shape, (4, 2))
            best = min(max(min(np.hypot((q[0] - c[0]) * math.cos(math.radians(c[1])),
                                        q[1] - c[1]) for q in p) for c in ref)
                       for ref in refs)
            self.assertLess(best, 1e-7)
        gal = json.loads(self.get("/api/v1/datasets/night1/footprint?frame=galactic"))
        from astropy.coordinates import SkyCoord
        p = np.array(doc["polygons"][0])
        g = SkyCoord(p[:, 0], p[:, 1], unit="deg", frame="icrs").galactic
        self.assertLess(np.abs(np.array(gal["polygons"][0]) -
                               np.stack([g.l.deg, g.b.deg], axis=1)).max(), 1e-6)
        status, _, body = self.srv.get("/api/v1/datasets/night1/footprint?frame=carrington")
        self.assertEqual(status, 400, body)

    def test_index_page(self):
        status, headers, body = self.srv.get("/hips/night1/")
        self.assertEqual(status, 200, body)
        self.assertTrue(headers["Content-Type"].startswith("text/html"))
        text = body.decode()
        self.assertIn("collection <b>night1</b> (20 images, equatorial frame, orders 0 to 8)",
                      text)
        self.assertIn('<base href="/hips/night1/">', text)
        self.assertIn('href="Norder3/Allsky.png"', text)

    def test_allsky(self):
        np = self.np
        with self.fits.open(io.BytesIO(self.get("/hips/night1/Norder3/Allsky.fits"))) as h:
            pic = h[0].data.astype(np.float64)
        self.assertEqual(pic.shape, (29 * 64, 27 * 64))
        ok = np.isfinite(pic)
        # the members span some 3 arcmin: a few cells of order 9 (6.9')
        self.assertGreaterEqual(ok.sum(), 1)
        self.assertLess(ok.sum(), 50)
        # its pixels come from the members' top reductions (each member's mean)
        lo = min(float(np.mean(d)) for d, _ in self.members)
        hi = max(float(np.mean(d)) for d, _ in self.members)
        self.assertTrue(np.all((pic[ok] >= lo) & (pic[ok] <= hi)))
        status, headers, _ = self.srv.get("/hips/night1/Norder3/Allsky.png")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "image/png")


LN = 32                     # side of the members of the large collection, pixels
LRA, LDEC = 210.0, -30.0    # its centre


def large_sky(ra, dec):
    x = (ra - LRA) * math.cos(math.radians(LDEC)) * 60.0
    y = (dec - LDEC) * 60.0
    return 50.0 + 10.0 * math.sin(0.8 * x) * math.cos(0.5 * y) + 2.0 * y


class ColskyLargeTest(unittest.TestCase):
    """A collection of 80 members (10 x 8 generated 32x32 TAN images, 2" pixels, each
    overlapping its neighbours): its coarse tiles cover more than the 64 members a tile is
    rendered from, so they are made from their children; each pixel of such a tile is the
    mean of the finite values of its 2 x 2 child pixels (as Hipsgen makes coarser orders),
    equal to float32 rounding to the children served at order + 1."""

    @classmethod
    def setUpClass(cls):
        cls.np = np = need_module("numpy")
        need_module("astropy_healpix")
        from astropy.io import fits
        from astropy.wcs import WCS
        cls.fits = fits
        cls.tmp = tempfile.mkdtemp(prefix="tessera-colsky-large-")
        cls.root = os.path.join(cls.tmp, "large")
        os.makedirs(cls.root)
        vsky = np.vectorize(large_sky)
        scale = 2.0 / 3600.0
        step = 50.0 / 3600.0        # 25 pixels: neighbours overlap by 7 pixels
        k = 0
        for iy in range(8):
            for ix in range(10):
                w = WCS(naxis=2)
                w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
                w.wcs.crval = [LRA + (ix - 4.5) * step / math.cos(math.radians(LDEC)),
                               LDEC + (iy - 3.5) * step]
                w.wcs.crpix = [(LN + 1) / 2.0, (LN + 1) / 2.0]
                w.wcs.cdelt = [-scale, scale]
                yy, xx = np.mgrid[0:LN, 0:LN]
                wra, wdec = w.pixel_to_world_values(xx, yy)
                data = vsky(wra, wdec).astype(np.float32)
                fits.PrimaryHDU(data, w.to_header()).writeto(
                    os.path.join(cls.root, "m%03d.fits" % k))
                k += 1
        cls.srv = Server(datasets=[{"name": "big", "kind": "collection",
                                    "images": os.path.join(cls.root, "*.fits")}],
                         roots=[cls.root], demo=False)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def tile(self, order, npix):
        status, _, body = self.srv.get(f"/hips/big/Norder{order}/Dir{npix // 10000 * 10000}/"
                                       f"Npix{npix}.fits", timeout=300)
        if status == 404:
            return None
        self.assertEqual(status, 200, body[:400])
        with self.fits.open(io.BytesIO(body)) as h:
            return h[0].data.astype(self.np.float64)

    def test_coarse_tiles_from_children(self):
        np = self.np
        from astropy_healpix import HEALPix
        import astropy.units as u
        t0 = time.monotonic()
        checked = 0
        for order in (7, 8):
            npix = int(HEALPix(nside=2 ** order, order="nested").lonlat_to_healpix(
                LRA * u.deg, LDEC * u.deg))
            got = self.tile(order, npix)
            self.assertIsNotNone(got)
            w = got.shape[0]
            h = w // 2
            ref = np.full((w, w), np.nan)
            top = ref[::-1]                 # rows from the top of the picture
            for c in range(4):
                child = self.tile(order + 1, 4 * npix + c)
                if child is None:
                    continue
                ct = child[::-1].reshape(h, 2, h, 2)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mean = np.nanmean(ct, axis=(1, 3))
                qi, qj = c & 1, c >> 1      # face row and column halves of child c
                top[qi * h:(qi + 1) * h, qj * h:(qj + 1) * h] = mean
            self.assertTrue(np.array_equal(np.isnan(got), np.isnan(ref)), order)
            ok = np.isfinite(ref)
            self.assertGreater(ok.sum(), 1000, order)
            err = np.abs(got[ok] - ref[ok]) / np.abs(ref[ok])
            print(f"\nNorder{order}: {ok.sum()} pixels, max relative |diff| {err.max():.1e} "
                  "to the children's mean")
            self.assertLess(err.max(), 2.5e-7, order)   # two float32 roundings
            checked += 1
        self.assertEqual(checked, 2)
        # the lowest orders and the Allsky open (Aladin's first requests)
        npix = int(HEALPix(nside=8, order="nested").lonlat_to_healpix(LRA * u.deg,
                                                                         LDEC * u.deg))
        got = self.tile(3, npix)
        self.assertGreater(int(np.isfinite(got).sum()), 0)
        lo, hi = 50.0 - 10.0 - 2.0 * 4.0, 50.0 + 10.0 + 2.0 * 4.0
        self.assertTrue(np.all((got[np.isfinite(got)] > lo) & (got[np.isfinite(got)] < hi)))
        status, _, body = self.srv.get("/hips/big/Norder3/Allsky.fits", timeout=300)
        self.assertEqual(status, 200, body[:400])
        print(f"coarse tiles of 80 members: {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    unittest.main()
