"""astroquery's hips2fits client (python3-astroquery 0.4.6), unchanged but for its server,
against tesserad's /hips-image-services/hips2fits: query and query_with_wcs in FITS and
PNG give the values of Tessera's own /api/v1/cutout, and an error shows its description."""
import io
import json
import unittest
import urllib.parse
import urllib.request
import warnings

from harness import Server, need_module


class AstroqueryHips2fitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need_module("astroquery")
        cls.np = need_module("numpy")
        from astroquery.hips2fits import hips2fitsClass
        cls.srv = Server()
        cls.h2f = hips2fitsClass()
        cls.h2f.server = cls.srv.url("/hips-image-services/hips2fits")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def cutout(self, params, body=None):
        """Bytes of Tessera's /api/v1/cutout with `params` (POST of `body` when given)."""
        url = self.srv.url("/api/v1/cutout?" + urllib.parse.urlencode(params))
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60) as r:
            return r.read()

    def geometry(self):
        import astropy.units as u
        from astropy.coordinates import Angle, Latitude, Longitude
        return dict(hips="horsehead", width=120, height=90, projection="TAN",
                    ra=Longitude(85.25 * u.deg), dec=Latitude(-2.46 * u.deg),
                    fov=Angle(0.25 * u.deg), rotation_angle=Angle(0 * u.deg))

    def plain(self, **extra):
        return dict(dataset="horsehead", width=120, height=90, projection="TAN", ra=85.25,
                    dec=-2.46, fov=0.25, **extra)

    def assert_same_pixels(self, a, b):
        np = self.np
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        self.assertEqual(a.shape, b.shape)
        self.assertTrue(np.array_equal(np.isnan(a), np.isnan(b)))
        self.assertTrue(np.array_equal(a[~np.isnan(a)], b[~np.isnan(b)]))

    def test_query_fits(self):
        from astropy.io import fits
        hdul = self.h2f.query(**self.geometry())
        self.assertEqual(hdul[0].data.shape, (90, 120))
        self.assertEqual(hdul[0].header["CTYPE1"], "RA---TAN")
        ours = fits.open(io.BytesIO(self.cutout(self.plain(format="fits"))))
        self.assert_same_pixels(hdul[0].data, ours[0].data)

    def test_query_png(self):
        from PIL import Image
        img = self.h2f.query(format="png", stretch="asinh", min_cut=1.0, max_cut=99.0,
                             **self.geometry())
        # Greys_r (astroquery's default cmap): grey and alpha, the values, not palette indices
        self.assertEqual(img.shape, (90, 120, 2))
        ours = Image.open(io.BytesIO(self.cutout(self.plain(
            format="png", stretch="asinh", min_cut="1.0%", max_cut="99.0%", cmap="Greys_r"))))
        self.assertEqual(ours.mode, "LA")
        self.assert_same_pixels(img, self.np.asarray(ours))
        self.assertGreater(len(self.np.unique(img[..., 0])), 50)
        rgba = self.h2f.query(format="png", cmap="viridis", **self.geometry())
        self.assertEqual(rgba.shape, (90, 120, 4))
        ours = Image.open(io.BytesIO(self.cutout(self.plain(format="png", cmap="viridis"))))
        self.assertEqual(ours.mode, "RGBA")
        self.assert_same_pixels(rgba, self.np.asarray(ours))

    def wcs(self):
        from astropy.wcs import WCS
        return WCS(header={
            "NAXIS1": 100, "NAXIS2": 80, "WCSAXES": 2, "CRPIX1": 50.5, "CRPIX2": 40.5,
            "CDELT1": -0.0025, "CDELT2": 0.0025, "CUNIT1": "deg", "CUNIT2": "deg",
            "CTYPE1": "GLON-SIN", "CTYPE2": "GLAT-SIN", "CRVAL1": 206.95, "CRVAL2": -16.6})

    def test_query_with_wcs(self):
        from astropy.io import fits
        w = self.wcs()
        payload = self.h2f.query_with_wcs(hips="horsehead", wcs=w, get_query_payload=True)
        self.assertIn("NAXIS1", json.loads(payload["wcs"]))
        hdul = self.h2f.query_with_wcs(hips="horsehead", wcs=w)
        self.assertEqual(hdul[0].data.shape, (80, 100))
        self.assertEqual(hdul[0].header["CTYPE1"], "GLON-SIN")
        hdr = w.to_header()
        hdr["NAXIS1"], hdr["NAXIS2"] = 100, 80
        body = hdr.tostring(sep="\n", endcard=False, padding=False).encode()
        ours = fits.open(io.BytesIO(self.cutout({"dataset": "horsehead", "format": "fits"},
                                                body=body)))
        self.assert_same_pixels(hdul[0].data, ours[0].data)
        self.assertGreater(int(self.np.isfinite(hdul[0].data).sum()), 1000)
        png = self.h2f.query_with_wcs(hips="ivo://tessera/horsehead", wcs=w, format="png",
                                      cmap="gray")
        self.assertEqual(png.shape, (80, 100, 2))

    def test_error_shows_description(self):
        g = self.geometry()
        g["hips"] = "no_such_survey"
        with self.assertRaises(AttributeError) as cm:
            self.h2f.query(**g)
        self.assertIn("Not Found: no dataset named 'no_such_survey'", str(cm.exception))
        g = self.geometry()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # astroquery warns, then sends it all the same
            with self.assertRaises(AttributeError) as cm:
                self.h2f.query(stretch="histeq", **g)
        self.assertIn("Bad Request: stretch must be", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
