"""Jobs over a collection: a generated survey of 12 small TAN images of one smooth sky
(astropy, different rotations and pixel scales, an unreadable file among them) served as a
collection; a mosaic job posted through HTTP with {"collection": NAME, "region": ...} as its
inputs takes exactly the members astropy's WCS says overlap the region, and its product
equals astropy reproject 0.10's reproject_and_coadd of those members (bilinear, mean, no
background matching) within the project's reprojection tolerance (tests/engine/
test_mosaic.c: 1e-4 relative on the interior, NaN where nothing covers)."""
import json
import math
import os
import random
import shutil
import tempfile
import unittest
import urllib.error
import urllib.request

from harness import ServerCase, Server
from skygeom import image_distance, rotated_tan

try:
    import numpy as np
    from astropy import units as u
    from astropy.coordinates import SkyCoord
    from astropy.io import fits
    from astropy.wcs import WCS
    from reproject import reproject_interp
    from reproject.mosaicking import reproject_and_coadd
except ImportError as e:  # pragma: no cover - scripts/setup.sh installs them
    if os.environ.get("CI") == "true":
        raise
    raise unittest.SkipTest(f"astropy or reproject missing ({e}): scripts/setup.sh")

N = 48                  # image side, pixels
RA0, DEC0 = 210.0, -12.0


def sky(ra, dec):
    """The survey's sky: a smooth pattern in (ra, dec) degrees."""
    x, y = (ra - RA0) * 60.0, (dec - DEC0) * 60.0
    return 100.0 + 20.0 * np.sin(0.9 * x) * np.cos(0.7 * y) + 3.0 * x - 2.0 * y


def circle_distance(w, ra, dec):
    return image_distance(w, N, ra, dec)


class CollectionJobTest(ServerCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="tessera-coljobs-")
        cls.root = os.path.join(cls.dir, "survey")
        rng = random.Random(4)
        cls.images = {}
        for i in range(12):
            ra = RA0 + rng.uniform(-0.03, 0.03) / math.cos(math.radians(DEC0))
            dec = DEC0 + rng.uniform(-0.03, 0.03)
            w = rotated_tan(ra, dec, N, rng.uniform(1.5, 2.5), rng.uniform(0, 90))
            yy, xx = np.mgrid[0:N, 0:N]
            pra, pdec = w.pixel_to_world_values(xx, yy)
            data = sky(pra, pdec).astype(np.float32)
            rel = "chip%d/img%02d.fits" % (i % 3, i)
            path = os.path.join(cls.root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fits.PrimaryHDU(data, w.to_header()).writeto(path)
            cls.images[rel] = (data, w)
        with open(os.path.join(cls.root, "chip0", "broken.fits"), "wb") as f:
            f.write(b"not FITS at all" * 300)
        cls.srv = Server(datasets=[{"name": "field", "kind": "collection",
                                    "images": os.path.join(cls.root, "**", "*.fits")}],
                         roots=[cls.root], extra={"collections_rescan_s": 0})

    def post(self, body):
        req = urllib.request.Request(self.srv.url("/api/v1/jobs"), data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def product(self, doc):
        import io
        _, body = self.get(f"/api/v1/jobs/{doc['id']}/result")
        with fits.open(io.BytesIO(body)) as h:
            return h[0].data.astype(np.float64), WCS(h[0].header), h[1].data.astype(np.float64)

    def test_circle_equals_reproject_and_coadd(self):
        ra, dec, r = RA0 + 0.01, DEC0 - 0.005, 0.012
        doc = self.job({"type": "mosaic",
                        "inputs": {"collection": "field", "region": {"circle": [ra, dec, r]}},
                        "target": {"region": True}, "method": "bilinear", "combine": "mean",
                        "output": {"name": "coljob_circle"}})
        members = doc["request"]["inputs"]["members"]
        self.assertEqual(members, sorted(members))
        # exactly the images astropy finds within the circle (none decided by < 1e-5 deg)
        want = {rel for rel, (_, w) in self.images.items() if circle_distance(w, ra, dec) <= r}
        for rel, (_, w) in self.images.items():
            self.assertGreater(abs(circle_distance(w, ra, dec) - r), 1e-5, rel)
        self.assertEqual(set(members), want)
        self.assertGreaterEqual(len(members), 3)
        self.assertLess(len(members), len(self.images))
        got, gw, cov = self.product(doc)
        # the region's grid: centred on the circle, at the finest member pixel scale
        finest = min(float(np.sqrt(abs(np.linalg.det(self.images[m][1].wcs.cd))))
                     for m in members)
        self.assertAlmostEqual(abs(gw.wcs.cdelt[1]), finest, delta=finest * 1e-6)
        cra, cdec = gw.wcs.crval
        self.assertAlmostEqual(cra, ra, delta=1e-9)
        self.assertAlmostEqual(cdec, dec, delta=1e-9)
        ref, foot = reproject_and_coadd([self.images[m] for m in members], gw,
                                        shape_out=got.shape, reproject_function=reproject_interp,
                                        combine_function="mean", match_background=False)
        ref = np.where(foot > 0, ref, np.nan)
        # NaN exactly where nothing covers; coverage = reproject's footprint sum
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref))
        np.testing.assert_allclose(cov, foot, rtol=0, atol=1e-6)
        fin = np.isfinite(ref)
        interior = fin.copy()
        for dy in range(-2, 3):
            for dx in range(-2, 3):
                interior &= np.roll(np.roll(fin, dy, 0), dx, 1)
        interior[:2, :] = interior[-2:, :] = interior[:, :2] = interior[:, -2:] = False
        self.assertGreater(interior.sum(), 0.3 * got.size)
        rel = np.abs(got[interior] - ref[interior]) / np.maximum(np.abs(ref[interior]), 1.0)
        print(f"coljobs: {len(members)} of {len(self.images)} members, {got.shape[1]} x "
              f"{got.shape[0]} pixels, {int(interior.sum())} interior, worst relative error "
              f"{rel.max():.3g}")
        self.assertLessEqual(rel.max(), 1e-4)

    def test_problems(self):
        def body(inputs):
            return {"type": "mosaic", "inputs": inputs, "output": {"name": "bad"}}
        cases = [
            (body({"collection": "nosuch", "region": {"circle": [RA0, DEC0, 0.01]}}), 404,
             "inputs.collection"),
            (body({"collection": "field", "region": {"circle": [RA0, DEC0]}}), 400,
             "inputs.region"),
            (body({"collection": "field", "region": {"range": [10, 11, 40, 41]}}), 422,
             "inputs.region"),
        ]
        for b, status, field in cases:
            st, doc = self.post(b)
            self.assertEqual(st, status, doc)
            self.assertEqual(doc["status"], status)
            self.assertEqual(doc["parameter"], field)
            self.assertTrue(doc["detail"])


if __name__ == "__main__":
    unittest.main()
