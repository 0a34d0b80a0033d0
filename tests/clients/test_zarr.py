"""Zarr over HTTP with the real clients: zarr-python 2 and dask (fsspec/aiohttp) read
/zarr/{name} of an image, a cube, a FITS stack, a PNG stack (tessera mkstack) and TIFF
frames and a TIFF cube (tifffile); the values equal astropy's, skimage's and tifffile's
reading of the files and the slice API; dask's reductions
equal the reduce route; a rechunk job's profile copy serves series as one chunk; and
skimage.io.imread reads the DVID-shaped raw route and stretch=none slices."""
import glob
import io
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
import urllib.request

from harness import Server, TOP, tesserad_path

try:
    import numpy as np
    import dask.array as da
    import numcodecs
    import skimage.io
    import tifffile
    import zarr
    from astropy.io import fits
except ImportError as e:   # scripts/setup.sh installs them
    if os.environ.get("CI") == "true":
        raise
    raise unittest.SkipTest(f"a client is missing: {e}")

DEMO = os.path.join(TOP, "data", "demo")


def tessera_path():
    return os.path.join(os.path.dirname(tesserad_path()), "tessera")


class TestZarr(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-zarr-")
        cls.em = os.path.join(cls.tmp, "em")
        subprocess.run([tessera_path(), "mkstack", "--frames", "6", "--size", "300x200",
                        "-o", cls.em, "--format", "png", "--bitpix", "8"], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        cls.em_frames = sorted(glob.glob(os.path.join(cls.em, "frame_*.png")))
        # Wider than one plane chunk (1024) and no multiple of its chunk (551): edge chunks
        cls.wide = os.path.join(cls.tmp, "wide")
        subprocess.run([tessera_path(), "mkstack", "--frames", "2", "--size", "1101x20",
                        "-o", cls.wide, "--format", "png", "--bitpix", "8"], check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        # TIFF: 16-bit frames (one file each) and a multi-page float32 cube, by tifffile
        rng = np.random.default_rng(5)
        cls.tif_frames = rng.integers(0, 65536, size=(4, 70, 90), dtype=np.uint16)
        cls.tif_cube = (rng.standard_normal((3, 40, 50)) * 10).astype(np.float32)
        tif = os.path.join(cls.tmp, "tif")
        os.mkdir(tif)
        for k, f in enumerate(cls.tif_frames):
            tifffile.imwrite(os.path.join(tif, "t%02d.tif" % k), f, compression="zlib")
        tifffile.imwrite(os.path.join(tif, "cube.tif"), cls.tif_cube, tile=(16, 16),
                         photometric="minisblack")
        cls.srv = Server(datasets=[{"name": "em", "frames": os.path.join(cls.em,
                                                                       "frame_*.png")},
                                   {"name": "wide", "frames": os.path.join(cls.wide,
                                                                         "frame_*.png")},
                                   {"name": "tframes", "frames": os.path.join(tif, "t*.tif")},
                                   {"name": "tcube", "path": os.path.join(tif, "cube.tif")}],
                         roots=[cls.em, cls.wide, tif])
        cls.base = cls.srv.base

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def npy(self, path):
        status, _, body = self.srv.get(path)
        self.assertEqual(status, 200, body[:300])
        return np.load(io.BytesIO(body))

    def m13_frames(self):
        return np.stack([fits.getdata(f) for f in
                         sorted(glob.glob(os.path.join(DEMO, "M13_blue_*.fits")))])

    def em_files(self):
        return np.stack([skimage.io.imread(f) for f in self.em_frames])

    # ---- the arrays ------------------------------------------------------------------

    def test_image(self):
        z = zarr.open(f"{self.base}/zarr/horsehead/0", mode="r")
        ref = fits.getdata(os.path.join(DEMO, "HorseHead.fits"))
        self.assertEqual(z.shape, ref.shape)
        self.assertEqual(z.dtype, np.int16)          # BITPIX 16, no BZERO
        a = z[:]
        np.testing.assert_array_equal(a, ref)
        ny, nx = ref.shape
        np.testing.assert_array_equal(
            a, self.npy(f"/api/v1/datasets/horsehead/slice/xy/{nx}_{ny}/0_0_0.npy"))
        # A corner read crosses chunk edges.
        np.testing.assert_array_equal(z[500:893, 600:891], ref[500:, 600:])

    def test_cube(self):
        c = da.from_zarr(f"{self.base}/zarr/l1448_13co/0")
        ref = fits.getdata(os.path.join(DEMO, "l1448_13co.fits"))
        self.assertEqual(c.shape, ref.shape)
        self.assertEqual(c.dtype, np.float32)
        v = c.compute()
        np.testing.assert_array_equal(v, ref)
        nz, ny, nx = ref.shape
        np.testing.assert_array_equal(
            v[17], self.npy(f"/api/v1/datasets/l1448_13co/slice/xy/{nx}_{ny}/0_0_17.npy"))

    def test_fits_stack_and_reductions(self):
        s = da.from_zarr(f"{self.base}/zarr/m13/0")
        ref = self.m13_frames()
        self.assertEqual(s.dtype, np.uint16)         # BITPIX 16, BZERO 32768
        self.assertEqual(s.chunksize[0], 1)           # a plane a chunk
        np.testing.assert_array_equal(s.compute(), ref)
        nz, ny, nx = ref.shape
        np.testing.assert_array_equal(
            s[3].compute(), self.npy(f"/api/v1/datasets/m13/slice/xy/{nx}_{ny}/0_0_3.npy"))
        mean_z = self.npy("/api/v1/datasets/m13/reduce?op=mean&axis=z&format=npy")
        np.testing.assert_allclose(s.mean(axis=0).compute(), mean_z, rtol=1e-12)
        mean_xy = self.npy("/api/v1/datasets/m13/reduce?op=mean&axis=xy&format=npy")
        np.testing.assert_allclose(s.mean(axis=(1, 2)).compute(), mean_xy, rtol=1e-12)

    def test_edge_chunks_padded(self):
        # The Zarr spec's chunks are all of the array's chunk shape: the last one along x
        # holds 550 columns of the image and one of fill_value (0), and zarr-python reads
        # the whole array as the frames are.
        z = zarr.open(f"{self.base}/zarr/wide/0", mode="r")
        self.assertEqual((z.shape, z.chunks), ((2, 20, 1101), (1, 20, 551)))
        files = np.stack([skimage.io.imread(f) for f in
                          sorted(glob.glob(os.path.join(self.wide, "frame_*.png")))])
        np.testing.assert_array_equal(z[:], files[:, ::-1, :])
        status, _, body = self.srv.get("/zarr/wide/0/1/0/1")
        self.assertEqual(status, 200)
        chunk = np.frombuffer(numcodecs.Blosc().decode(body), np.uint8).reshape(20, 551)
        np.testing.assert_array_equal(chunk[:, :550], files[1, ::-1, 551:])
        np.testing.assert_array_equal(chunk[:, 550], 0)

    def test_png_stack(self):
        s = da.from_zarr(f"{self.base}/zarr/em/0")
        files = self.em_files()
        self.assertEqual(s.dtype, np.uint8)
        # y = 0 is the last row of a PNG frame, as on every route (engine/image/stack.h).
        np.testing.assert_array_equal(s.compute(), files[:, ::-1, :])
        mean_xy = self.npy("/api/v1/datasets/em/reduce?op=mean&axis=xy&format=npy")
        np.testing.assert_allclose(s.mean(axis=(1, 2)).compute(), mean_xy, rtol=1e-12)
        np.testing.assert_allclose(mean_xy, files.mean(axis=(1, 2)), rtol=1e-12)

    def test_reduced_levels(self):
        g = zarr.open_consolidated(f"{self.base}/zarr/m13", mode="r")
        ms = g.attrs["multiscales"][0]["datasets"]
        self.assertEqual([d["path"] for d in ms], ["0", "1", "2", "3"])   # 1392 .. 174
        self.assertEqual(ms[2]["coordinateTransformations"][0]["scale"], [1.0, 4.0, 4.0])
        ref = self.m13_frames().astype(np.float64)
        l1 = g["1"]
        self.assertEqual((l1.shape, l1.dtype), ((5, 520, 696), np.uint16))
        # 2x2 means (1392 x 1040 halves exactly), rounded halves up.
        means = ref.reshape(5, 520, 2, 696, 2).mean(axis=(2, 4))
        np.testing.assert_array_equal(l1[:], np.floor(means + 0.5))
        self.assertEqual(g["3"].shape, (5, 130, 174))
        one = zarr.open(f"{self.base}/zarr/horsehead", mode="r")
        self.assertEqual(one["2"].shape, (224, 223))   # ceil(893 / 4), ceil(891 / 4)
        attrs = json.loads(self.srv.get("/zarr/l1448_13co/.zattrs")[2])
        self.assertEqual(len(attrs["multiscales"][0]["datasets"]), 1)   # 105 x 105: one

    def test_tiff_stacks(self):
        # y = 0 is the last TIFF row, as for PNG frames (engine/image/stack.h).
        s = da.from_zarr(f"{self.base}/zarr/tframes/0")
        self.assertEqual((s.shape, s.dtype), ((4, 70, 90), np.uint16))
        np.testing.assert_array_equal(s.compute(), self.tif_frames[:, ::-1, :])
        np.testing.assert_allclose(
            s.mean(axis=(1, 2)).compute(),
            self.npy("/api/v1/datasets/tframes/reduce?op=mean&axis=xy&format=npy"), rtol=1e-12)
        c = zarr.open(f"{self.base}/zarr/tcube/0", mode="r")
        self.assertEqual((c.shape, c.dtype), ((3, 40, 50), np.float32))
        np.testing.assert_array_equal(c[:], self.tif_cube[:, ::-1, :])
        im = skimage.io.imread(f"{self.base}/api/node/u/tframes/raw/0_1/90_70/0_0_1")
        np.testing.assert_array_equal(im, self.tif_frames[1][::-1])

    # ---- metadata, keys, caching ----------------------------------------------------

    def test_group_metadata(self):
        g = zarr.open_consolidated(f"{self.base}/zarr/m13", mode="r")
        self.assertEqual(g["0"].shape, (5, 1040, 1392))
        ms = g.attrs["multiscales"][0]
        self.assertEqual(ms["version"], "0.4")
        self.assertEqual([a["name"] for a in ms["axes"]], ["z", "y", "x"])
        self.assertEqual(ms["datasets"][0]["path"], "0")
        self.assertEqual(ms["datasets"][0]["coordinateTransformations"][0]["type"], "scale")
        g2 = zarr.open(f"{self.base}/zarr/horsehead", mode="r")
        axes = g2.attrs["multiscales"][0]["axes"]
        self.assertEqual([(a["name"], a["type"]) for a in axes], [("y", "space"), ("x", "space")])
        self.assertEqual(g2["0"].attrs["_ARRAY_DIMENSIONS"], ["y", "x"])
        meta = json.loads(self.srv.get("/zarr/em/0/.zarray")[2])
        self.assertEqual(meta["fill_value"], 0)
        self.assertEqual(meta["dimension_separator"], "/")
        self.assertEqual(meta["compressor"]["id"], "blosc")
        cube = json.loads(self.srv.get("/zarr/l1448_13co/0/.zarray")[2])
        self.assertEqual(cube["dtype"], "<f4")
        self.assertEqual(cube["fill_value"], "NaN")

    def test_omero_window(self):
        """The omero rendering metadata: a window from the server's cut levels of the
        default plane (the middle one), min and max the range of that plane's values, as
        zarr reads them from .zattrs, .zmetadata and zarr.json."""
        cube = fits.getdata(os.path.join(DEMO, "l1448_13co.fits")).astype(np.float64)
        props = self.srv.get("/hips/l1448_13co/properties?plane=26")[2].decode()
        cut = [float(x) for x in next(l for l in props.splitlines()
                                      if l.startswith("hips_pixel_cut")).split("=")[1].split()]
        g = zarr.open_consolidated(f"{self.base}/zarr/l1448_13co", mode="r")
        for attrs in (g.attrs, zarr.open(f"{self.base}/zarr/l1448_13co", mode="r").attrs):
            om = attrs["omero"]
            self.assertEqual(om["version"], "0.4")
            self.assertEqual(om["rdefs"]["defaultZ"], 26)
            (ch,) = om["channels"]
            w = ch["window"]
            self.assertAlmostEqual(w["min"], float(np.nanmin(cube[26])), places=6)
            self.assertAlmostEqual(w["max"], float(np.nanmax(cube[26])), places=6)
            self.assertAlmostEqual(w["start"], cut[0], places=5)
            self.assertAlmostEqual(w["end"], cut[1], places=5)
            self.assertTrue(w["min"] < w["start"] < w["end"] < w["max"], w)
        # A uint16 stack: its own values, not the dtype's 0..65535.
        m13 = self.m13_frames()
        v3 = json.loads(self.srv.get("/zarr/m13/zarr.json")[2])["attributes"]["ome"]["omero"]
        w = v3["channels"][0]["window"]
        self.assertEqual(v3["rdefs"]["defaultZ"], 2)
        self.assertEqual((w["min"], w["max"]), (float(m13[2].min()), float(m13[2].max())))
        self.assertTrue(w["min"] <= w["start"] < w["end"] <= w["max"] < 65535, w)

    def test_absent_keys_and_etags(self):
        for key in ["/zarr/m13/0/5/0/0", "/zarr/m13/0/0/2/0", "/zarr/m13/0/0/0", "/zarr/m13/4/.zarray",
                    "/zarr/l1448_13co/1/.zarray", "/zarr/m13/4/0/0/0",
                    "/zarr/m13/0/.zgroup", "/zarr/m13/profile/.zarray", "/zarr/nosuch/.zgroup",
                    "/zarr/horsehead/0/0/0/0"]:
            self.assertEqual(self.srv.get(key)[0], 404, key)
        status, headers, body = self.srv.get("/zarr/m13/0/1/1/1")
        self.assertEqual(status, 200)
        etag = headers["ETag"]
        status, headers, _ = self.srv.get("/zarr/m13/0/1/1/1", {"If-None-Match": etag})
        self.assertEqual(status, 304)

    def test_v3_chunks(self):
        meta = json.loads(self.srv.get("/zarr/m13/0/zarr.json")[2])
        self.assertEqual(meta["node_type"], "array")
        self.assertEqual(meta["data_type"], "uint16")
        self.assertEqual(meta["chunk_key_encoding"]["name"], "default")
        cy, cx = meta["chunk_grid"]["configuration"]["chunk_shape"][1:]
        group = json.loads(self.srv.get("/zarr/m13/zarr.json")[2])
        self.assertEqual(group["attributes"]["ome"]["version"], "0.5")
        status, _, body = self.srv.get("/zarr/m13/0/c/2/1/0")
        self.assertEqual(status, 200)
        chunk = np.frombuffer(numcodecs.Blosc().decode(body), "<u2").reshape(cy, cx)
        np.testing.assert_array_equal(chunk, self.m13_frames()[2, cy:2 * cy, 0:cx])

    # ---- a rechunk job's profile copy ----------------------------------------------

    def test_rechunk_profile(self):
        req = urllib.request.Request(f"{self.base}/api/v1/jobs", method="POST",
                                     data=json.dumps({"type": "rechunk", "dataset": "em"}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            job = json.load(r)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            state = json.loads(self.srv.get(f"/api/v1/jobs/{job['id']}")[2])["state"]
            if state not in ("queued", "running"):
                break
            time.sleep(0.1)
        self.assertEqual(state, "succeeded")
        # The copy is attached to em, not a new dataset; the chunk store's edge tiles are
        # clipped (4 KiB header, then exactly nx * ny * nz values of u1).
        result = json.loads(self.srv.get(f"/api/v1/jobs/{job['id']}")[2])["result"]
        self.assertEqual(sorted(result), ["attached_to", "bytes", "url"])
        self.assertEqual(result["attached_to"], "em")
        self.assertEqual(result["bytes"], 4096 + 300 * 200 * 6)
        p = da.from_zarr(f"{self.base}/zarr/em/profile")
        self.assertEqual(p.shape, (6, 200, 300))
        self.assertEqual(p.chunksize, (6, 16, 16))    # a series is one chunk
        # Its edge chunks are whole (6, 16, 16) too, filled with 0 past the image:
        # chunk (12, 18) holds rows 192..199 and columns 288..299.
        status, _, body = self.srv.get("/zarr/em/profile/0/12/18")
        self.assertEqual(status, 200)
        edge = np.frombuffer(numcodecs.Blosc().decode(body), np.uint8).reshape(6, 16, 16)
        files = self.em_files()[:, ::-1, :]
        np.testing.assert_array_equal(edge[:, :8, :12], files[:, 192:, 288:])
        self.assertFalse(edge[:, 8:, :].any() or edge[:, :, 12:].any())
        np.testing.assert_array_equal(p.compute(), files)
        series = json.loads(self.srv.get("/api/v1/datasets/em/series?x=123&y=45")[2])["values"]
        np.testing.assert_array_equal(p[:, 45, 123].compute(), series)
        attrs = json.loads(self.srv.get("/zarr/em/.zattrs")[2])
        self.assertEqual(attrs["tessera"]["profile"], "profile")

    # ---- stored values as images ---------------------------------------------------

    def test_dvid_raw(self):
        files = self.em_files()
        for k in range(len(files)):
            im = skimage.io.imread(f"{self.base}/api/node/a1b2/em/raw/0_1/300_200/0_0_{k}")
            self.assertEqual(im.dtype, np.uint8)
            self.assertEqual(im.mean(), files[k].mean())
            np.testing.assert_array_equal(im, files[k][::-1])   # row 0 = the offset's row
        m13 = self.m13_frames()
        im = skimage.io.imread(f"{self.base}/api/node/x/m13/raw/xy/100_60/700_300_4/png")
        self.assertEqual(im.dtype, np.uint16)
        np.testing.assert_array_equal(im, m13[4, 300:360, 700:800])
        status, headers, body = self.srv.get("/api/node/x/m13/raw/0_2/50_5/10_20_0/octet-stream")
        self.assertEqual((status, headers["Content-Type"]), (200, "application/octet-stream"))
        np.testing.assert_array_equal(np.frombuffer(body, "<u2").reshape(5, 50),
                                      m13[:, 20, 10:60])
        status, _, body = self.srv.get("/api/node/x/m13/raw/1_2/40_5/7_30_0/octet-stream")
        np.testing.assert_array_equal(np.frombuffer(body, "<u2").reshape(5, 40),
                                      m13[:, 30:70, 7])
        # int16 values have no greyscale PNG; outside the data is 400, no dataset 404.
        self.assertEqual(self.srv.get("/api/node/x/horsehead/raw/0_1/10_10/0_0_0")[0], 400)
        self.assertEqual(self.srv.get("/api/node/x/em/raw/0_1/10_10/295_0_0")[0], 400)
        self.assertEqual(self.srv.get("/api/node/x/nosuch/raw/0_1/10_10/0_0_0")[0], 404)

    def test_stretch_none(self):
        files = self.em_files()
        im = skimage.io.imread(
            f"{self.base}/api/v1/datasets/em/slice/xy/300_200/0_0_2.png?stretch=none")
        np.testing.assert_array_equal(im, files[2])  # the PNG frame's own pixels
        m13 = self.m13_frames()
        im = skimage.io.imread(
            f"{self.base}/api/v1/datasets/m13/slice/xy/1392_1040/0_0_1.png?stretch=none")
        self.assertEqual(im.dtype, np.uint16)
        self.assertEqual(im.mean(), m13[1].mean())
        np.testing.assert_array_equal(im, m13[1][::-1])
        for bad in ["/api/v1/datasets/m13/slice/xy/10_10/0_0_1.npy?stretch=none",
                    "/api/v1/datasets/m13/slice/xy/10_10/0_0_1.png?stretch=none&cmap=viridis",
                    "/api/v1/datasets/l1448_13co/slice/xy/10_10/0_0_1.png?stretch=none"]:
            self.assertEqual(self.srv.get(bad)[0], 400, bad)


if __name__ == "__main__":
    unittest.main()
