"""The viewer's pixel routes against astropy and numpy: values, histogram percentiles,
the footprint through the full WCS (the horsehead's DSS plate solution), the FITS download,
and gzip'ed static files."""
import gzip
import io
import json
import os
import unittest
import warnings

from harness import Server, TOP

try:
    import numpy as np
    from astropy.io import fits
    from astropy.wcs import WCS, FITSFixedWarning
    from astropy.coordinates import SkyCoord
    import astropy.units as u
except ImportError:  # pragma: no cover
    np = None

DEMO = os.path.join(TOP, "data", "demo")


def demo_data(name):
    with fits.open(os.path.join(DEMO, name)) as h:
        return h[0].data.astype(np.float64), h[0].header.copy()


@unittest.skipIf(np is None, "astropy and numpy are needed (scripts/setup.sh)")
class TestViewerRoutes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Server()

    @classmethod
    def tearDownClass(cls):
        cls.s.stop()

    def get_json(self, path):
        status, headers, body = self.s.get(path)
        self.assertEqual(status, 200, f"{path}: {body[:300]}")
        return json.loads(body)

    def test_values_match_astropy(self):
        data, _ = demo_data("l1448_13co.fits")
        doc = self.get_json("/api/v1/datasets/l1448_13co/values?x=40&y=50&plane=20&size=5")
        want = data[20, 50:55, 40:45]
        got = np.array(doc["values"], dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        data, _ = demo_data("HorseHead.fits")
        doc = self.get_json("/api/v1/datasets/horsehead/values?x=887&y=3&size=8")
        got = np.array(doc["values"], dtype=np.float64)
        self.assertEqual(got.shape, (8, 4))
        np.testing.assert_array_equal(got, data[3:11, 887:891])

    def test_histogram_percentiles_are_numpys(self):
        for name, path in (("gc_2mass_k", "gc_2mass_k.fits"), ("allsky_rosat", "allsky_rosat.fits")):
            data, _ = demo_data(path)
            v = data[np.isfinite(data)].astype(np.float32).astype(np.float64)
            doc = self.get_json(f"/api/v1/datasets/{name}/histogram?bins=100")
            for p in ("0.5", "1", "99", "99.5"):
                self.assertAlmostEqual(doc["percentiles"][p], np.percentile(v, float(p)),
                                       delta=1e-5 * (abs(np.percentile(v, float(p))) + 1), msg=p)
            counts, _ = np.histogram(v, bins=100, range=(v.min(), v.max()))
            # gc_2mass_k is BITPIX 16 with BSCALE: astropy scales in float32, cfitsio (the
            # server) in float64, rounded to float32 in memory: an ulp apart at most.
            self.assertAlmostEqual(doc["min"], v.min(), delta=1e-6 * abs(v.min()))
            self.assertAlmostEqual(doc["max"], v.max(), delta=1e-6 * abs(v.max()))
            self.assertEqual(sum(doc["counts"]), v.size)
            # A value on a bin edge may fall in the next bin, as may one an ulp apart.
            self.assertLessEqual(np.abs(np.array(doc["counts"]) - counts).sum(),
                                 max(4, v.size // 1000), name)

    def test_footprint_is_astropys_with_the_plate_solution(self):
        _, hdr = demo_data("HorseHead.fits")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FITSFixedWarning)
            w = WCS(hdr)
        doc = self.get_json("/api/v1/datasets/horsehead/footprint?n=8")
        self.assertEqual(doc["frame"], "icrs")
        poly = np.array(doc["polygon"])
        self.assertEqual(poly.shape, (32, 2))
        nx, ny = hdr["NAXIS1"], hdr["NAXIS2"]
        t = np.arange(8) / 8.0
        x = np.concatenate([-0.5 + t * nx, np.full(8, nx - 0.5), nx - 0.5 - t * nx,
                            np.full(8, -0.5)])
        y = np.concatenate([np.full(8, -0.5), -0.5 + t * ny, np.full(8, ny - 0.5),
                            ny - 0.5 - t * ny])
        lon, lat = w.all_pix2world(x, y, 0)
        c = SkyCoord(lon * u.deg, lat * u.deg, frame=w.wcs.radesys.lower() or "icrs",
                     equinox=f"J{w.wcs.equinox}" if w.wcs.equinox == w.wcs.equinox else None)
        c = c.icrs
        sep = SkyCoord(poly[:, 0] * u.deg, poly[:, 1] * u.deg, frame="icrs").separation(c)
        self.assertLess(sep.arcsec.max(), 0.01)
        # Without the plate solution's polynomial (a plain TAN of the same centre and
        # scale) the corners would be arcseconds away: the polynomial is used.
        doc = self.get_json("/api/v1/datasets/horsehead/footprint?frame=galactic&n=2")
        g = SkyCoord(poly[::4, 0] * u.deg, poly[::4, 1] * u.deg, frame="icrs").galactic
        got = np.array(doc["polygon"])
        np.testing.assert_allclose(got[:, 0], g.l.deg, atol=1e-8)
        np.testing.assert_allclose(got[:, 1], g.b.deg, atol=1e-8)

    def test_transform_is_astropys_all_pix2world(self):
        """The cursor readout's coordinates: the full WCS, horsehead's DSS plate solution
        included, both ways; within 1 mas of astropy and 1e-4 pixel back."""
        _, hdr = demo_data("HorseHead.fits")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FITSFixedWarning)
            w = WCS(hdr)
        x = np.array([0.0, 100.25, 445.0, 700.5, 890.0])
        y = np.array([0.0, 800.75, 446.0, 20.5, 892.0])
        q = ",".join(repr(float(v)) for v in x), ",".join(repr(float(v)) for v in y)
        doc = self.get_json(f"/api/v1/datasets/horsehead/transform?x={q[0]}&y={q[1]}")
        self.assertEqual(doc["frame"], "icrs")
        got = np.array(doc["world"], dtype=np.float64)
        lon, lat = w.all_pix2world(x, y, 0)
        c = SkyCoord(lon * u.deg, lat * u.deg, frame=w.wcs.radesys.lower() or "icrs",
                     equinox=f"J{w.wcs.equinox}" if w.wcs.equinox == w.wcs.equinox else None)
        sep = SkyCoord(got[:, 0] * u.deg, got[:, 1] * u.deg, frame="icrs").separation(c.icrs)
        self.assertLess(sep.arcsec.max(), 1e-3)
        # The linear part alone (what the viewer computed from the summary's CRPIX, CRVAL
        # and CD) is arcseconds off: the plate solution's polynomial matters here.
        summ = self.get_json("/api/v1/datasets/horsehead")["wcs"]
        lin = WCS(naxis=2)
        lin.wcs.ctype = summ["ctype"]
        lin.wcs.crval = summ["crval"]
        lin.wcs.crpix = summ["crpix"]  # FITS 1-based, as in the header
        lin.wcs.cd = summ["cd"]
        lin_lon, lin_lat = lin.wcs_pix2world(x, y, 0)
        off = SkyCoord(lin_lon * u.deg, lin_lat * u.deg).separation(c.icrs).arcsec
        self.assertGreater(off.max(), 1.0)
        # Sky to pixel: back to the positions asked, in ICRS and in galactic coordinates.
        back = self.get_json("/api/v1/datasets/horsehead/transform?lon=%s&lat=%s" % (
            ",".join(repr(float(v)) for v in got[:, 0]),
            ",".join(repr(float(v)) for v in got[:, 1])))
        np.testing.assert_allclose(np.array(back["pixel"])[:, 0], x, atol=1e-4)
        np.testing.assert_allclose(np.array(back["pixel"])[:, 1], y, atol=1e-4)
        g = c.galactic
        back = self.get_json("/api/v1/datasets/horsehead/transform?frame=galactic&lon=%s&lat=%s" % (
            ",".join(repr(float(v)) for v in g.l.deg), ",".join(repr(float(v)) for v in g.b.deg)))
        self.assertEqual(back["frame"], "galactic")
        np.testing.assert_allclose(np.array(back["pixel"])[:, 0], x, atol=1e-4)
        np.testing.assert_allclose(np.array(back["pixel"])[:, 1], y, atol=1e-4)
        # A galactic map, and a point off the all-sky projection (null).
        _, hdr = demo_data("allsky_rosat.fits")
        w = WCS(hdr)
        doc = self.get_json("/api/v1/datasets/allsky_rosat/transform?x=0,240,100.5&y=0,120,60.25&frame=galactic")
        self.assertEqual(doc["world"][0], [None, None])
        lon, lat = w.all_pix2world([240, 100.5], [120, 60.25], 0)
        got = np.array(doc["world"][1:], dtype=np.float64)
        np.testing.assert_allclose(got[:, 0], lon % 360, atol=1e-9)
        np.testing.assert_allclose(got[:, 1], lat, atol=1e-9)
        for bad, param in (("x=1,&y=2", "x"), ("x=1,2&y=2", "y"), ("x=a&y=2", "x"),
                           ("lon=1", "lat"), ("x=1&y=2&lon=3&lat=4", "lon"),
                           ("x=1&y=1&frame=fk4", "frame")):
            status, _, body = self.s.get(f"/api/v1/datasets/horsehead/transform?{bad}")
            self.assertEqual(status, 400, bad)
            self.assertEqual(json.loads(body)["parameter"], param, bad)
        status, _, _ = self.s.get("/api/v1/datasets/m13/transform?x=1&y=1")
        self.assertEqual(status, 422)

    def test_fits_download_reads_in_astropy(self):
        status, headers, body = self.s.get("/api/v1/datasets/l1448_13co/fits")
        self.assertEqual(status, 200)
        self.assertIn('filename="l1448_13co.fits"', headers.get("Content-Disposition", ""))
        with fits.open(io.BytesIO(body)) as h:
            want, _ = demo_data("l1448_13co.fits")
            np.testing.assert_array_equal(h[0].data.astype(np.float64), want)
        status, headers, body = self.s.get("/api/v1/datasets/m13/fits")
        self.assertEqual(status, 200)
        with fits.open(io.BytesIO(body)) as h:
            cube = h[0].data
            self.assertEqual(cube.shape, (5, 1040, 1392))
            for k in (0, 2, 4):
                want, _ = demo_data(f"M13_blue_000{k + 1}.fits")
                np.testing.assert_array_equal(cube[k].astype(np.float64), want)

    def test_aladin_script_travels_compressed(self):
        path = "/vendor/aladin-lite/aladin.js"
        if not os.path.exists(os.path.join(TOP, "node_modules", "aladin-lite", "dist", "aladin.js")):
            raise unittest.SkipTest("no node_modules (scripts/setup.sh)")
        status, headers, plain = self.s.get(path)
        self.assertEqual(status, 200)
        status, headers, body = self.s.get(path, headers={"Accept-Encoding": "gzip, br"})
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("Content-Encoding"), "gzip")
        self.assertEqual(headers.get("Vary"), "Accept-Encoding")
        self.assertLess(len(body), len(plain) / 2)
        self.assertEqual(gzip.decompress(body), plain)


if __name__ == "__main__":
    unittest.main()
