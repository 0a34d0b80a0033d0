"""DataLink answers as their clients read them: STILTS datalinklint on every demo
dataset (0 errors), the SODA descriptor offering BAND only where a BAND can be used, each
#this row's content_length equal to the Content-Length of the download (stacks and
written copies included), and the #auxiliary info.json typed as it is served."""
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.parse
import urllib.request

from harness import TOP, Server, ServerCase, need, need_module

DEMO = os.path.join(TOP, "data", "demo")
DEMO_IDS = ("horsehead", "gc_2mass_k", "gc_msx_e", "allsky_rosat", "l1448_13co", "m13")


class DatalinkTest(ServerCase):
    @classmethod
    def setUpClass(cls):
        cls.np = need_module("numpy")
        fits = need_module("astropy.io.fits")
        cls.votable = need_module("astropy.io.votable")
        cls.dir = tempfile.mkdtemp(prefix="tessera-datalink-")
        # l1448_13co (VOPT, no rest frequency) with the 13CO J=1-0 rest frequency added.
        with fits.open(os.path.join(DEMO, "l1448_13co.fits")) as h:
            hdr, data = h[0].header.copy(), h[0].data
        hdr["RESTFRQ"] = 110.2013542798e9
        fits.PrimaryHDU(data, hdr).writeto(os.path.join(cls.dir, "l1448_rest.fits"))
        # A wavelength cube (WAVE on axis 3, metres).
        np = cls.np
        h = fits.Header()
        for k, v in (("CTYPE1", "RA---TAN"), ("CTYPE2", "DEC--TAN"), ("CTYPE3", "WAVE"),
                     ("CUNIT3", "m"), ("CRPIX1", 8.5), ("CRPIX2", 6.5), ("CRPIX3", 1.0),
                     ("CRVAL1", 150.0), ("CRVAL2", 2.0), ("CRVAL3", 5.0e-7),
                     ("CDELT1", -0.001), ("CDELT2", 0.001), ("CDELT3", 1.0e-9)):
            h[k] = v
        fits.PrimaryHDU(np.arange(6 * 12 * 16, dtype=np.float32).reshape(6, 12, 16),
                        h).writeto(os.path.join(cls.dir, "wavecube.fits"))
        shutil.copy(os.path.join(TOP, "tests", "data", "astropy", "comp.fits"), cls.dir)
        cls.srv = Server(roots=[cls.dir], datasets=[
            {"name": n, "path": os.path.join(cls.dir, f), "hdu": hdu}
            for n, f, hdu in (("l1448_rest", "l1448_rest.fits", 0),
                              ("wavecube", "wavecube.fits", 0), ("comp", "comp.fits", 1))])
        cls.ids = DEMO_IDS + ("l1448_rest", "wavecube", "comp")

    def links(self, *ids):
        """The DataLink VOTable of `ids`, parsed by astropy."""
        body = self.get("/vo/datalink?" + "&".join("ID=" + i for i in ids))[1]
        return self.votable.parse(io.BytesIO(body))

    def rows(self, vot, semantics):
        t = vot.get_first_table().array
        return [r for r in t if r["semantics"] == semantics]

    def descriptors(self, vot):
        """{ID: [input parameter names]} of the service descriptors."""
        out = {}
        for res in vot.resources:
            if res.type == "meta":
                names = [p.name for g in res.groups for p in g.entries]
                out[res.ID] = names
        return out

    def test_content_length_is_the_download(self):
        for name in self.ids:
            with self.subTest(dataset=name):
                row = self.rows(self.links(name), "#this")[0]
                path = urllib.parse.urlparse(str(row["access_url"])).path
                headers, body = self.get(path)
                self.assertEqual(int(headers["Content-Length"]), len(body))
                self.assertEqual(int(row["content_length"]), len(body))

    def test_band_only_where_it_can_be_used(self):
        vot = self.links(*self.ids)
        cut = {str(r["ID"]): str(r["service_def"]) for r in self.rows(vot, "#cutout")}
        desc = self.descriptors(vot)
        self.assertEqual(sorted(desc), ["soda", "soda-band"])
        self.assertNotIn("BAND", desc["soda"])
        self.assertEqual(desc["soda-band"][-1], "BAND")
        for name in ("horsehead", "gc_2mass_k", "comp"):
            self.assertEqual(cut[name], "soda", name)
        # l1448_13co: VOPT with the configured rest_frequency (conf/demo.json).
        for name in ("l1448_rest", "wavecube", "l1448_13co"):
            self.assertEqual(cut[name], "soda-band", name)
        self.assertNotIn("m13", cut)   # a stack of frames: SODA does not cut it
        # What the descriptor says holds: BAND is refused where it is not offered...
        st, _, body = self.srv.get("/vo/soda/sync?ID=horsehead&BAND=2.7e-3+2.8e-3")
        self.assertEqual(st, 400, body)
        # ... and cuts where it is: 13CO at -3 .. +3 km/s of its rest wavelength.
        lam0 = 299792458.0 / 110.2013542798e9
        lo, hi = lam0 * (1 - 3e3 / 299792458.0), lam0 * (1 + 3e3 / 299792458.0)
        st, _, body = self.srv.get(f"/vo/soda/sync?ID=l1448_rest&BAND={lo!r}+{hi!r}")
        self.assertEqual(st, 200, body[:300])
        fits = need_module("astropy.io.fits")
        with fits.open(io.BytesIO(body)) as h:
            nz = h[0].data.shape[0]
            c = h[0].header
            v = c["CRVAL3"] + (self.np.arange(nz) + 1 - c["CRPIX3"]) * c["CDELT3"]
        self.assertTrue(0 < nz < 53, nz)
        self.assertTrue(((v >= -3e3) & (v <= 3e3)).all(), v)

    def test_band_with_configured_rest_frequency(self):
        """BAND on l1448_13co (VOPT, no RESTFRQ in its header) uses the configured
        rest_frequency: the planes whose optical-convention wavelengths, from the header's
        axis 3 (astropy.wcs) and 110201354300 Hz, lie in the band."""
        np = self.np
        fits = need_module("astropy.io.fits")
        wcs = need_module("astropy.wcs")
        with fits.open(os.path.join(DEMO, "l1448_13co.fits")) as h:
            hdr, data = h[0].header.copy(), h[0].data
        self.assertNotIn("RESTFRQ", hdr)
        c, nu0 = 299792458.0, 110201354300.0
        k = np.arange(hdr["NAXIS3"], dtype=float)
        w = wcs.WCS(hdr)
        v = w.all_pix2world(np.full_like(k, hdr["NAXIS1"] // 2),
                            np.full_like(k, hdr["NAXIS2"] // 2), k, 0)[2]   # m/s
        lam = c / nu0 * (1.0 + v / c)
        lo, hi = 0.00272044, 0.00272045   # a part of the cube's 2.72043 .. 2.72046 mm
        want = np.nonzero((lam >= lo) & (lam <= hi))[0]
        self.assertTrue(0 < len(want) < hdr["NAXIS3"], want)
        st, _, body = self.srv.get(f"/vo/soda/sync?ID=l1448_13co&BAND={lo!r}+{hi!r}")
        self.assertEqual(st, 200, body[:300])
        with fits.open(io.BytesIO(body)) as h:
            out, oh = h[0].data, h[0].header
        self.assertEqual(out.shape[0], len(want))
        self.assertEqual(oh["CRPIX3"], hdr["CRPIX3"] - want[0])
        self.assertTrue(np.array_equal(out, data[want[0]:want[-1] + 1], equal_nan=True))
        # A band beside the cube's wavelengths: no plane.
        st, _, body = self.srv.get("/vo/soda/sync?ID=l1448_13co&BAND=0.0028+0.0029")
        self.assertEqual(st, 400, body)
        self.assertIn(b"NoOverlap", body)

    def test_info_json_typed_as_served(self):
        for name in ("horsehead", "m13"):
            aux = [r for r in self.rows(self.links(name), "#auxiliary")
                   if str(r["access_url"]).endswith("/info.json")]
            self.assertEqual(len(aux), 1)
            headers, _ = self.get(urllib.parse.urlparse(str(aux[0]["access_url"])).path)
            self.assertEqual(str(aux[0]["content_type"]), headers["Content-Type"])

    def test_iiif_manifest_linked(self):
        """Each dataset links its IIIF Presentation manifest, typed as served, with one
        canvas a plane (a cube's 53 planes: 53 canvases)."""
        for name, canvases in (("horsehead", 1), ("l1448_13co", 53)):
            aux = [r for r in self.rows(self.links(name), "#auxiliary")
                   if str(r["access_url"]).endswith("/manifest.json")]
            self.assertEqual(len(aux), 1, name)
            path = urllib.parse.urlparse(str(aux[0]["access_url"])).path
            self.assertEqual(path, f"/iiif/3/{name}/manifest.json")
            headers, body = self.get(path)
            self.assertEqual(str(aux[0]["content_type"]), headers["Content-Type"])
            man = json.loads(body)
            self.assertEqual(man["type"], "Manifest")
            self.assertEqual(len(man["items"]), canvases, name)

    def test_datalinklint(self):
        """One answer holding every demo dataset's rows and both descriptors (a dataset's
        own answer is its rows of it), the extra cubes and an unknown ID: one JVM start."""
        stilts = need("stilts")
        ids = DEMO_IDS + ("l1448_rest", "wavecube", "comp", "nosuch")
        url = self.srv.url("/vo/datalink?" + "&".join("ID=" + i for i in ids))
        out = subprocess.run([stilts, "datalinklint", "votable=" + url], capture_output=True,
                             text=True, timeout=300, stdin=subprocess.DEVNULL)
        m = re.search(r"Totals: Errors: (\d+); Warnings: (\d+);.*Failures: (\d+)", out.stdout)
        self.assertIsNotNone(m, out.stdout[-2000:] + out.stderr[-2000:])
        self.assertEqual((m.group(1), m.group(3)), ("0", "0"), out.stdout[-3000:])
        nrows = len(self.links(*ids).get_first_table().array)
        self.assertIn("Datalink table rows checked: %d\n" % nrows, out.stdout)

if __name__ == "__main__":
    unittest.main()
