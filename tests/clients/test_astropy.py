"""astropy's files and header text served as astropy reads and writes them.

- Tile-compressed images: astropy's own test file comp.fits (its ZTENSION card comes
  last, which cfitsio's header converter refuses) and files astropy's CompImageHDU writes,
  with and without the optional ZTENSION/ZPCOUNT/ZGCOUNT cards (CompImageHDU given a
  header writes none of them), and with them moved last by a byte edit: the server
  starts, and /fits and slices hold astropy's values.
- POST /api/v1/cutout with the header text of every form astropy writes (Header.tostring
  with and without sep, padding and END, WCS.to_header().tostring, totextfile, CRLF,
  trailing blanks): the pixels of the cutout onto a whole FITS file's header.
- projection=ZPN|COE|COD|COO|COP|BON with their default and given PV2_m: the cutout's
  values equal a bilinear sampling of the source at the positions astropy's WCS gives for
  the header the server describes.
"""
import io
import os
import shutil
import tempfile
import unittest
import urllib.request

from harness import TOP, Server, ServerCase, need_module

COMP = os.path.join(TOP, "tests", "data", "astropy", "comp.fits")


def move_cards_last(data, keys):
    """The FITS bytes `data` with the cards of `keys` of the second HDU's header (the
    compressed one) moved to just before its END, as comp.fits has its ZTENSION,
    ZPCOUNT and ZGCOUNT: a byte edit of the header, the data left in place."""
    start = off = 2880
    cards = []
    while not any(c.startswith(b"END     ") for c in cards):
        cards += [data[off + i:off + i + 80] for i in range(0, 2880, 80)]
        off += 2880
    end = next(i for i, c in enumerate(cards) if c.startswith(b"END     "))
    moved = [c for c in cards[:end] if c[:8].decode().strip() in keys]
    assert len(moved) == len(keys), "a card to move is missing"
    kept = [c for c in cards[:end] if c[:8].decode().strip() not in keys]
    out = kept + moved + cards[end:]
    return data[:start] + b"".join(out) + data[off:]


class CompressedTest(ServerCase):
    """Tile-compressed images astropy writes or ships: the server starts and serves
    astropy's values."""

    @classmethod
    def setUpClass(cls):
        cls.np = need_module("numpy")
        fits = need_module("astropy.io.fits")
        cls.dir = tempfile.mkdtemp(prefix="tessera-astropy-")
        shutil.copy(COMP, os.path.join(cls.dir, "comp.fits"))
        np = cls.np
        rng = np.random.default_rng(37)
        cls.arrays = {
            "i16": rng.integers(-3000, 30000, size=(70, 90)).astype(np.int16),
            "f32": rng.normal(100.0, 20.0, size=(64, 96)).astype(np.float32),
        }
        hdr = fits.Header()
        hdr["CTYPE1"], hdr["CTYPE2"] = "RA---TAN", "DEC--TAN"
        hdr["CRVAL1"], hdr["CRVAL2"] = 83.8, -5.4
        hdr["CRPIX1"], hdr["CRPIX2"] = 45.0, 35.0
        hdr["CDELT1"], hdr["CDELT2"] = -0.001, 0.001
        datasets = [{"name": "comp", "path": os.path.join(cls.dir, "comp.fits"), "hdu": 1}]
        for kind, ctype in (("i16", "RICE_1"), ("f32", "GZIP_2")):
            # CompImageHDU(data, header=...) writes no ZTENSION (nor ZPCOUNT, ZGCOUNT);
            # given the data alone, with the cards added after, it writes them.
            noz = fits.CompImageHDU(cls.arrays[kind], header=hdr, compression_type=ctype)
            withz = fits.CompImageHDU(cls.arrays[kind], compression_type=ctype)
            withz.header.update(hdr)
            for name, hdu, has in ((kind, withz, True), (kind + "_noz", noz, False)):
                path = os.path.join(cls.dir, name + ".fits")
                fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(path)
                with open(path, "rb") as f:
                    assert (b"ZTENSION= 'IMAGE" in f.read()) == has, name
                datasets.append({"name": name, "path": path, "hdu": 1})
            with open(os.path.join(cls.dir, kind + ".fits"), "rb") as f:
                last = move_cards_last(f.read(), {"ZTENSION", "ZPCOUNT", "ZGCOUNT"})
            path = os.path.join(cls.dir, kind + "_zlast.fits")
            with open(path, "wb") as f:
                f.write(last)
            datasets.append({"name": kind + "_zlast", "path": path, "hdu": 1})
        cls.fits = fits
        cls.srv = Server(datasets=datasets, roots=[cls.dir])

    def reference(self, name):
        """astropy's values of dataset `name` (it reads every one of these files)."""
        with self.fits.open(os.path.join(self.dir, name + ".fits")) as h:
            data = h[1].data.astype(self.np.float64)
        if name.startswith("i16"):   # RICE_1 of integers is lossless
            self.np.testing.assert_array_equal(data, self.arrays["i16"])
        elif name != "comp":   # floats are quantized (astropy's default, 16 levels a sigma)
            self.np.testing.assert_allclose(data, self.arrays["f32"], atol=2.0)
        return data

    def check(self, name):
        np = self.np
        ref = self.reference(name)
        body = self.get(f"/api/v1/datasets/{name}/fits")[1]
        with self.fits.open(io.BytesIO(body)) as h:
            np.testing.assert_array_equal(h[0].data.astype(np.float64), ref)
            served = h[0].header
        ny, nx = ref.shape
        x, y, w, hh = nx // 3, ny // 4, nx // 2, ny // 2
        part = self.npy(f"/api/v1/datasets/{name}/slice/xy/{w}_{hh}/{x}_{y}_0.npy")
        # float64 from the stored integers; astropy dequantizes to float32
        np.testing.assert_array_equal(part.astype(np.float32),
                                      ref[y:y + hh, x:x + w].astype(np.float32))
        return served

    def test_astropy_comp_fits(self):
        """comp.fits (ZTENSION after the image's cards): values, WCS and cards."""
        import json
        served = self.check("comp")
        self.assertEqual(served["OBJECT"], "NGC 1316")
        doc = json.loads(self.get("/api/v1/datasets/comp")[1])
        self.assertEqual(doc["shape"], [440, 300])
        self.assertEqual(doc["header"][0][:20], "XTENSION= 'IMAGE   '")
        self.assertFalse(any(c.startswith(("ZTENSION", "ZIMAGE", "TFORM1", "ZCMPTYPE"))
                             for c in doc["header"]))
        with self.fits.open(COMP) as h:
            ah = h[1].header
        self.assertEqual(doc["wcs"]["crval"], [ah["CRVAL1"], ah["CRVAL2"]])
        self.assertEqual(doc["wcs"]["crpix"], [ah["CRPIX1"], ah["CRPIX2"]])

    def test_written_with_ztension(self):
        for kind in ("i16", "f32"):
            with self.subTest(kind=kind):
                self.check(kind)

    def test_without_ztension_and_ztension_last(self):
        """What CompImageHDU writes given a header (no ZTENSION), and its files with
        ZTENSION moved last, as comp.fits has it."""
        for name in ("i16_noz", "f32_noz", "i16_zlast", "f32_zlast"):
            with self.subTest(dataset=name):
                served = self.check(name)
                self.assertEqual(served["CRVAL1"], 83.8)


class AstropyCase(ServerCase):
    @classmethod
    def modules(cls):
        """numpy, astropy.io.fits and astropy.wcs as cls.np, cls.fits and cls.wcsmod."""
        cls.np = need_module("numpy")
        cls.fits = need_module("astropy.io.fits")
        cls.wcsmod = need_module("astropy.wcs")


class HeaderTextTest(AstropyCase):
    """POST /api/v1/cutout takes the header text of every form astropy writes."""

    @classmethod
    def setUpClass(cls):
        cls.modules()
        cls.dir = tempfile.mkdtemp(prefix="tessera-astropy-hdr-")
        cls.srv = Server()

    def post(self, body):
        req = urllib.request.Request(
            self.srv.url("/api/v1/cutout?dataset=gc_2mass_k&format=fits"), data=body,
            headers={"Content-Type": "text/plain"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        self.assertEqual(status, 200, data[:300])
        with self.fits.open(io.BytesIO(data)) as h:
            return h[0].data.astype(self.np.float64)

    def test_every_form(self):
        np, fits = self.np, self.fits
        w = self.wcsmod.WCS(naxis=2)
        w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
        w.wcs.crval = [266.4, -28.93]
        w.wcs.crpix = [40.5, 30.5]
        w.wcs.cdelt = [-0.002, 0.002]
        w.wcs.radesys = "FK5"
        w.wcs.equinox = 2000.0
        wh = w.to_header()
        hdr = fits.Header([("NAXIS", 2), ("NAXIS1", 80), ("NAXIS2", 60)])
        hdr.extend(wh)
        # The reference: a whole FITS file astropy writes, posted as it is.
        buf = io.BytesIO()
        fits.PrimaryHDU(np.zeros((60, 80), np.float32), header=hdr).writeto(buf)
        ref = self.post(buf.getvalue())
        self.assertGreater(np.isfinite(ref).sum(), 0.9 * ref.size)
        textfile = os.path.join(self.dir, "target.hdr")
        hdr.totextfile(textfile, overwrite=True)
        with open(textfile, "rb") as f:
            totext = f.read()
        whdr = wh.copy()
        whdr.insert(0, ("NAXIS2", 60))
        whdr.insert(0, ("NAXIS1", 80))
        whdr.insert(0, ("NAXIS", 2))
        forms = {
            "tostring()": hdr.tostring().encode(),
            "tostring() and a newline": (hdr.tostring() + "\n").encode(),
            "tostring(sep='\\n')": hdr.tostring(sep="\n").encode(),
            "tostring(sep='\\n', padding=False)": hdr.tostring(sep="\n", padding=False).encode(),
            "tostring(sep='\\n', endcard=False)": hdr.tostring(sep="\n", endcard=False).encode(),
            "WCS.to_header().tostring(sep='\\n')": whdr.tostring(sep="\n").encode(),
            "totextfile": totext,
            "CRLF": hdr.tostring(sep="\r\n").encode(),
            "trailing blanks": "\n".join(c + "    " for c in
                                         hdr.tostring(sep="\n", padding=False).split("\n")
                                         ).encode(),
        }
        self.assertGreater(max(len(l) for l in forms["tostring(sep='\\n')"].split(b"\n")), 80)
        for name, body in forms.items():
            with self.subTest(form=name):
                np.testing.assert_array_equal(self.post(body), ref)
        # The GET form of the same geometry: the same grid (CRPIX at the centre).
        got = self.get("/api/v1/cutout?dataset=gc_2mass_k&ra=266.4&dec=-28.93&fov=0.16"
                       "&width=80&height=60&coordsys=fk5&format=fits")[1]
        with fits.open(io.BytesIO(got)) as h:
            np.testing.assert_allclose(h[0].data, ref, rtol=1e-6, atol=1e-6 * np.nanmax(ref),
                                       equal_nan=True)


class ProjectionTest(AstropyCase):
    """Projections that need PV parameters, against astropy's WCS."""

    @classmethod
    def setUpClass(cls):
        cls.modules()
        cls.srv = Server()
        with cls.fits.open(os.path.join(TOP, "data", "demo", "gc_2mass_k.fits")) as h:
            cls.src = h[0].data.astype(cls.np.float64)
            cls.srcwcs = cls.wcsmod.WCS(h[0].header)

    def bilinear(self, x, y):
        """The source's values at 0-based pixel positions (x, y), interpolated as
        reproject_interp's order 1; NaN off the image."""
        np = self.np
        ny, nx = self.src.shape
        ok = (x >= 0) & (y >= 0) & (x <= nx - 1) & (y <= ny - 1)
        x, y = np.where(ok, x, 0), np.where(ok, y, 0)
        xc, yc = np.clip(x, 0, nx - 1.000001), np.clip(y, 0, ny - 1.000001)
        x0, y0 = np.floor(xc).astype(int), np.floor(yc).astype(int)
        fx, fy = xc - x0, yc - y0
        s = self.src
        v = (s[y0, x0] * (1 - fx) * (1 - fy) + s[y0, x0 + 1] * fx * (1 - fy)
             + s[y0 + 1, x0] * (1 - fx) * fy + s[y0 + 1, x0 + 1] * fx * fy)
        return np.where(ok, v, np.nan)

    def cutout(self, proj, pv, extra=""):
        np = self.np
        w, h, fov = 72, 54, 0.7
        body = self.get(f"/api/v1/cutout?dataset=gc_2mass_k&ra=266.4&dec=-28.93&fov={fov}"
                        f"&width={w}&height={h}&coordsys=fk5&projection={proj}"
                        f"&format=fits{extra}")[1]
        with self.fits.open(io.BytesIO(body)) as hl:
            got = hl[0].data.astype(np.float64)
            served = self.wcsmod.WCS(hl[0].header)
        # astropy's WCS of the header the parameters describe.
        aw = self.wcsmod.WCS(naxis=2)
        aw.wcs.ctype = [f"RA---{proj}", f"DEC--{proj}"]
        aw.wcs.crval = [266.4, -28.93]
        aw.wcs.crpix = [w / 2 + 0.5, h / 2 + 0.5]
        aw.wcs.cdelt = [-fov / w, fov / w]
        aw.wcs.radesys = "FK5"
        aw.wcs.equinox = 2000.0
        aw.wcs.set_pv(pv)
        aw.wcs.set()
        self.assertEqual(sorted(served.wcs.get_pv()), sorted(pv))
        yy, xx = np.mgrid[0:h, 0:w]
        ra, dec = aw.pixel_to_world_values(xx.ravel(), yy.ravel())
        sra, sdec = served.pixel_to_world_values(xx.ravel(), yy.ravel())
        np.testing.assert_allclose(sra, ra, rtol=0, atol=1e-9)
        np.testing.assert_allclose(sdec, dec, rtol=0, atol=1e-9)
        sx, sy = self.srcwcs.world_to_pixel_values(ra, dec)
        ref = self.bilinear(sx, sy).reshape(h, w)
        ok = np.isfinite(ref) & np.isfinite(got)
        self.assertGreater(ok.sum(), 0.9 * got.size)
        peak = np.nanmax(np.abs(ref))
        self.assertLess(np.abs(got[ok] - ref[ok]).max(), 1e-5 * peak, proj)

    def test_defaults(self):
        for proj, pv1 in (("ZPN", 1.0), ("COE", 45.0), ("COD", 45.0), ("COO", 45.0),
                          ("COP", 45.0), ("BON", 45.0)):
            with self.subTest(projection=proj):
                self.cutout(proj, [(2, 1, pv1)])

    def test_given(self):
        self.cutout("COE", [(2, 1, -29.0), (2, 2, 4.0)], "&pv2_1=-29&pv2_2=4")
        self.cutout("ZPN", [(2, 0, 0.001), (2, 1, 0.98), (2, 3, -0.05)],
                    "&pv2_0=0.001&pv2_1=0.98&pv2_3=-0.05")
        self.cutout("BON", [(2, 1, -20.0)], "&pv2_1=-20")

    def test_refused(self):
        st, _, body = self.srv.get("/api/v1/cutout?dataset=gc_2mass_k&ra=266.4&dec=-28.93"
                                   "&fov=0.7&width=72&height=54&projection=COE&pv2_1=0")
        self.assertEqual(st, 400)
        self.assertIn(b"projection COE with PV2_1 = 0", body)
        st, _, body = self.srv.get("/api/v1/cutout?dataset=gc_2mass_k&ra=266.4&dec=-28.93"
                                   "&fov=0.7&width=72&height=54&projection=COE&pv2_1=x")
        self.assertEqual(st, 400)
        self.assertIn(b'"parameter":"pv2_1"', body)


if __name__ == "__main__":
    unittest.main()
