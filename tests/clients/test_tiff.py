"""TIFF datasets served by tesserad, against tifffile (Debian python3-tifffile) and numpy:
a multi-page TIFF (a cube of pages), a glob of single-page TIFF frames (a stack) and a
single-page float TIFF (an image).  Plane z of a TIFF dataset is numpy.flipud of the page
(y = 0 is the last TIFF row, as for PNG frames); values are the stored samples."""
import glob
import io
import json
import os
import shutil
import tempfile
import unittest

from harness import Server, ServerCase, need_module


class TestTiff(ServerCase):
    @classmethod
    def setUpClass(cls):
        cls.np = np = need_module("numpy")
        tifffile = need_module("tifffile")
        cls.dir = tempfile.mkdtemp(prefix="tessera-tiff-")
        rng = np.random.default_rng(20)
        # 7 pages of 16-bit, deflate in 16 x 16 tiles
        cls.cube = rng.integers(0, 65536, size=(7, 45, 60), dtype=np.uint16)
        cls.cube_path = os.path.join(cls.dir, "cube.tif")
        tifffile.imwrite(cls.cube_path, cls.cube, compression="zlib", tile=(16, 16))
        # 6 frames of 8 bits, one file each: uncompressed strips and deflate strips
        cls.frames = rng.integers(0, 256, size=(6, 33, 41), dtype=np.uint8)
        os.mkdir(os.path.join(cls.dir, "frames"))
        for k, f in enumerate(cls.frames):
            tifffile.imwrite(os.path.join(cls.dir, "frames", "f%03d.tif" % k), f,
                             compression="zlib" if k % 2 else None, rowsperstrip=5)
        # one float page
        cls.img = (rng.standard_normal((30, 20)) * 100).astype(np.float32)
        cls.img_path = os.path.join(cls.dir, "img.tif")
        tifffile.imwrite(cls.img_path, cls.img)
        # tifffile reads back what it wrote
        assert (tifffile.imread(cls.cube_path) == cls.cube).all()
        cls.srv = Server(roots=[cls.dir], datasets=[
            {"name": "tcube", "path": cls.cube_path},
            {"name": "tframes", "frames": os.path.join(cls.dir, "frames", "f*.tif")},
            {"name": "timg", "path": cls.img_path}])

    def test_describe(self):
        for name, kind, shape, bitpix in (("tcube", "cube", [60, 45, 7], 16),
                                          ("tframes", "stack", [41, 33, 6], 8),
                                          ("timg", "image", [20, 30], -32)):
            d = json.loads(self.get("/api/v1/datasets/" + name)[1])
            self.assertEqual((d["kind"], d["shape"], d["bitpix"]), (kind, shape, bitpix), name)
        d = json.loads(self.get("/api/v1/datasets/tframes")[1])
        self.assertEqual(d["frames"], ["f%03d.tif" % k for k in range(6)])

    def test_slices_equal_tifffile(self):
        np = self.np
        for name, vol in (("tcube", self.cube), ("tframes", self.frames)):
            nz, ny, nx = vol.shape
            for z in (0, nz - 1, nz // 2):
                a = self.npy(f"/api/v1/datasets/{name}/slice/xy/{nx}_{ny}/0_0_{z}.npy")
                np.testing.assert_array_equal(a, np.flipud(vol[z]), f"{name} plane {z}")
            # an inner region: row y of the slice is TIFF row ny - 1 - y
            a = self.npy(f"/api/v1/datasets/{name}/slice/xy/13_9/5_7_1.npy")
            np.testing.assert_array_equal(a, np.flipud(vol[1])[7:16, 5:18])
            # xz at row y: (nz, nx)
            y = 11
            a = self.npy(f"/api/v1/datasets/{name}/slice/xz/{nx}_{nz}/0_{y}_0.npy")
            np.testing.assert_array_equal(a, vol[:, ny - 1 - y, :])
        a = self.npy("/api/v1/datasets/timg/slice/xy/20_30/0_0_0.npy")
        np.testing.assert_array_equal(a, np.flipud(self.img).astype(np.float64))

    def test_series_equal_tifffile(self):
        np = self.np
        for name, vol in (("tcube", self.cube), ("tframes", self.frames)):
            nz, ny, nx = vol.shape
            for x, y in ((0, 0), (nx - 1, ny - 1), (7, 3)):
                a = self.npy(f"/api/v1/datasets/{name}/series?x={x}&y={y}&format=npy")
                np.testing.assert_array_equal(a, vol[:, ny - 1 - y, x], f"{name} ({x}, {y})")

    def test_reductions_equal_numpy(self):
        np = self.np
        for name, vol in (("tcube", self.cube), ("tframes", self.frames)):
            v = vol.astype(np.float64)
            for op, f in (("mean", np.mean), ("sum", np.sum), ("min", np.min),
                          ("max", np.max), ("std", np.std)):
                a = self.npy(f"/api/v1/datasets/{name}/reduce?op={op}&axis=z&format=npy")
                want = np.flipud(f(v, axis=0))
                if op == "std":
                    np.testing.assert_allclose(a, want, rtol=1e-12, err_msg=name)
                else:
                    np.testing.assert_array_equal(a, want, f"{name} {op}")
                a = self.npy(f"/api/v1/datasets/{name}/reduce?op={op}&axis=xy&format=npy")
                np.testing.assert_allclose(a, f(v, axis=(1, 2)), rtol=1e-12,
                                           err_msg=f"{name} {op} xy")

    def test_jobs(self):
        np = self.np
        # a reduce job's product is a dataset of the same values as the reduce route
        self.job({"type": "reduce", "dataset": "tframes", "op": "mean", "axis": "z",
                  "output": {"name": "tframes_mean"}})
        a = self.npy("/api/v1/datasets/tframes_mean/slice/xy/41_33/0_0_0.npy")
        np.testing.assert_array_equal(a, np.flipud(self.frames.astype(np.float64).mean(axis=0)))
        # a rechunked copy of the cube serves the same series
        self.job({"type": "rechunk", "dataset": "tcube"})
        for x, y in ((0, 0), (59, 44), (13, 29)):
            a = self.npy(f"/api/v1/datasets/tcube/series?x={x}&y={y}&format=npy")
            np.testing.assert_array_equal(a, self.cube[:, 44 - y, x])

    def test_fits_copy_and_soda(self):
        """/fits writes TIFF datasets as FITS (a cube of the pages, y = 0 the last TIFF row,
        as every route numbers it); SODA, which cuts FITS files, says what it cuts."""
        np = self.np
        fits = need_module("astropy.io.fits")
        for name, want in (("tcube", np.flip(self.cube, axis=1)),
                           ("timg", np.flipud(self.img)),
                           ("tframes", np.flip(np.stack(self.frames), axis=1))):
            with fits.open(io.BytesIO(self.get(f"/api/v1/datasets/{name}/fits")[1])) as hdul:
                self.assertTrue(np.array_equal(hdul[0].data, want.astype(hdul[0].data.dtype)),
                                name)
        st, _, body = self.srv.get("/vo/soda/sync?ID=tcube")
        self.assertEqual(st, 400, body)
        self.assertTrue(body.startswith(b"UsageError: dataset 'tcube' is stored as PNG or TIFF"),
                        body)

    def test_iiif(self):
        np = self.np
        info = json.loads(self.get("/iiif/3/tcube~3/info.json")[1])
        self.assertEqual((info["width"], info["height"]), (60, 45))
        info = json.loads(self.get("/iiif/3/tframes~5/info.json")[1])
        self.assertEqual((info["width"], info["height"]), (41, 33))
        headers, body = self.get("/iiif/3/tcube~3/0,0,32,16/max/0/default.png")
        self.assertEqual(headers["Content-Type"], "image/png")
        self.assertEqual(body[:8], b"\x89PNG\r\n\x1a\n")
        Image = need_module("PIL.Image")
        im = np.asarray(Image.open(io.BytesIO(body)).convert("L"))
        self.assertEqual(im.shape[:2], (16, 32))
        # the picture is the page as a TIFF viewer shows it: region (0, 0) is its first
        # rows, so the tile's grey levels follow the page's top-left block (a monotonic
        # stretch), not the block the other way up
        block = self.cube[3][:16, :32].astype(float).ravel()
        grey = im.astype(float)
        self.assertGreater(np.corrcoef(grey.ravel(), block)[0, 1], 0.8)
        flipped = self.cube[3][-16:, :32][::-1].astype(float).ravel()
        self.assertLess(abs(np.corrcoef(grey.ravel(), flipped)[0, 1]), 0.5)
        self.get("/iiif/3/tcube~7/info.json", status=404)

    def test_hostile_files(self):
        # an RGB TIFF and a truncated copy of the cube are refused at start with a reason;
        # a copy whose last page has corrupt compressed data is served, and reading that
        # page answers 500 naming the failure; the server does not crash
        np = self.np
        tifffile = need_module("tifffile")
        bad = tempfile.mkdtemp(prefix="tessera-tiff-bad-")
        try:
            rgb = os.path.join(bad, "rgb.tif")
            tifffile.imwrite(rgb, np.zeros((8, 8, 3), np.uint8), photometric="rgb")
            with self.assertRaises(RuntimeError) as cm:
                Server(roots=[bad], datasets=[{"name": "rgb", "path": rgb}]).stop()
            self.assertIn("only greyscale TIFF", str(cm.exception))
            with open(self.cube_path, "rb") as f:
                data = bytearray(f.read())
            cut = os.path.join(bad, "cut.tif")
            with open(cut, "wb") as f:
                f.write(data[: len(data) // 2])
            with self.assertRaises(RuntimeError) as cm:
                Server(roots=[bad], datasets=[{"name": "cut", "path": cut}]).stop()
            self.assertIn("cut.tif: directory", str(cm.exception))
            with tifffile.TiffFile(self.cube_path) as t:
                page = t.pages[6]
                off, n = page.dataoffsets[0], page.databytecounts[0]
            data[off:off + n] = b"\xff" * n
            corrupt = os.path.join(bad, "corrupt.tif")
            with open(corrupt, "wb") as f:
                f.write(data)
            with Server(roots=[bad], datasets=[{"name": "c", "path": corrupt}]) as s:
                st, _, body = s.get("/api/v1/datasets/c/slice/xy/60_45/0_0_6.npy")
                self.assertEqual(st, 500, body[:300])
                self.assertIn(b"cannot decode tile", body)
                st, _, body = s.get("/api/v1/datasets/c/slice/xy/60_45/0_0_5.npy")
                self.assertEqual(st, 200, body[:300])
                self.assertEqual(s.get("/healthz")[0], 200)
                self.assertNotIn("TIFF", s.log().replace("cannot decode", ""),
                                 "libtiff printed to stderr")
            # a compression bomb: 2000 x 2000 16-bit zeros (8 MB decoded, a few KB stored)
            # over a 1 MB budget answers 413 naming the limit on every pixel route
            bomb = os.path.join(bad, "bomb.tif")
            tifffile.imwrite(bomb, np.zeros((2000, 2000), np.uint16), compression="zlib")
            self.assertLess(os.path.getsize(bomb), 100000)
            with Server(roots=[bad], datasets=[{"name": "b", "path": bomb}],
                        extra={"limits": {"max_decoded_mb": 1}}) as s:
                for path in ("/api/v1/datasets/b/slice/xy/4_4/0_0_0.npy",
                             "/iiif/3/b/0,0,64,64/max/0/default.png"):
                    st, _, body = s.get(path)
                    self.assertEqual(st, 413, f"{path}: {body[:300]!r}")
                    self.assertIn(b"limits.max_decoded_mb", body)
        finally:
            shutil.rmtree(bad, ignore_errors=True)

    def test_huge_declared_size_413_everywhere(self):
        # a TIFF that declares 100000 x 100000 8-bit pixels in a file of a few hundred bytes:
        # every pixel route, IIIF and the histogram included (they answered 500 "too large
        # to hold in memory"), answers 413 naming the input-pixels budget
        import struct
        bad = tempfile.mkdtemp(prefix="tessera-tiff-huge-")
        try:
            path = os.path.join(bad, "huge.tif")
            ents = [(256, 4, 1, 100000), (257, 4, 1, 100000), (258, 3, 1, 8), (259, 3, 1, 1),
                    (262, 3, 1, 1), (273, 4, 1, 512), (277, 3, 1, 1), (278, 4, 1, 100000),
                    (279, 4, 1, 64)]
            b = bytearray(600)
            b[0:8] = b"II*\0\x08\0\0\0"
            struct.pack_into("<H", b, 8, len(ents))
            for i, (tag, typ, count, value) in enumerate(ents):
                struct.pack_into("<HHII", b, 10 + 12 * i, tag, typ, count, value)
            with open(path, "wb") as f:
                f.write(b)
            with Server(roots=[bad], demo=False, datasets=[{"name": "h", "path": path}]) as s:
                for p in ("/iiif/3/h/0,0,64,64/max/0/default.png",
                          "/iiif/3/h/full/64,/0/default.png",
                          "/api/v1/datasets/h/histogram",
                          "/api/v1/datasets/h/slice/xy/4_4/0_0_0.npy",
                          "/api/v1/datasets/h/values?x=1&y=1"):
                    st, _, body = s.get(p)
                    self.assertEqual(st, 413, f"{p}: {body[:300]!r}")
                    self.assertIn(b"limits.max_input_pixels", body, p)
                self.assertEqual(s.get("/healthz")[0], 200)
        finally:
            shutil.rmtree(bad, ignore_errors=True)

    def test_short_offset_arrays(self):
        # a frame whose StripOffsets has 2 entries for its 6 strips (libtiff pads the array
        # with zeros: the missing strips were read from offset 0, the file's own header and
        # tags, and served as pixels): a dataset of that file, or a stack with it as a
        # frame, is refused at start naming the tag and both counts; a frame replaced by
        # it while served answers a problem that says the same, the other frames are served
        np = self.np
        tifffile = need_module("tifffile")
        bad = tempfile.mkdtemp(prefix="tessera-tiff-short-")
        try:
            os.mkdir(os.path.join(bad, "fr"))
            for k in range(3):
                tifffile.imwrite(os.path.join(bad, "fr", "f%d.tif" % k), self.frames[k],
                                 rowsperstrip=6)
            short = os.path.join(bad, "short.tif")
            tifffile.imwrite(short, self.frames[1], rowsperstrip=6)
            with tifffile.TiffFile(short) as t:
                tag = t.pages[0].tags["StripOffsets"]
                self.assertEqual(tag.count, 6)
                at = tag.offset   # the directory entry: tag, type, count (LE classic TIFF)
            with open(short, "r+b") as f:
                f.seek(at + 4)
                f.write((2).to_bytes(4, "little"))
            said = "directory 0 has 2 StripOffsets for 6 strips"
            with self.assertRaises(RuntimeError) as cm:
                Server(roots=[bad], datasets=[{"name": "s", "path": short}]).stop()
            self.assertIn("short.tif: " + said, str(cm.exception))
            frames = os.path.join(bad, "fr", "f*.tif")
            with self.assertRaises(RuntimeError) as cm:
                Server(roots=[bad], datasets=[
                    {"name": "fr", "frames": os.path.join(bad, "*.tif")}]).stop()
            self.assertIn("short.tif: " + said, str(cm.exception))
            with Server(roots=[bad], datasets=[{"name": "fr", "frames": frames}]) as s:
                shutil.copy(short, os.path.join(bad, "fr", "new.tif"))
                os.replace(os.path.join(bad, "fr", "new.tif"), os.path.join(bad, "fr", "f1.tif"))
                st, _, body = s.get("/api/v1/datasets/fr/slice/xy/41_33/0_0_0.npy")
                self.assertEqual(st, 200, body[:300])
                got = np.load(io.BytesIO(body))
                self.assertTrue((got == np.flipud(self.frames[0])).all())
                for path in ("/api/v1/datasets/fr/slice/xy/41_33/0_0_1.npy",
                             "/api/v1/datasets/fr/series?x=3&y=3"):
                    st, hdr, body = s.get(path)
                    self.assertNotEqual(st, 200, f"{path}: {body[:300]!r}")
                    self.assertIn(said.encode(), body, path)
                self.assertEqual(s.get("/healthz")[0], 200)
        finally:
            shutil.rmtree(bad, ignore_errors=True)

if __name__ == "__main__":
    unittest.main()
