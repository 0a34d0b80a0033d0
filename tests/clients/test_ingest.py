"""After an ingest job, a PNG stack is served from its store and its frames are never
decoded again: slices on every axis, series, reductions, values, histograms, IIIF tiles,
Zarr chunks and the jobs (reduce, rechunk) give numpy's values on the frames (read by
PIL), while tessera_frames_decoded_total (/metrics) stays where it was.  Plane z of a PNG
stack is numpy.flipud of frame z (y = 0 is the last PNG row)."""
import json
import os
import re
import tempfile
import unittest

from harness import Server, ServerCase, need_module

NZ, NY, NX = 9, 37, 53


class TestIngest(ServerCase):
    @classmethod
    def setUpClass(cls):
        cls.np = np = need_module("numpy")
        Image = need_module("PIL.Image")
        cls.dir = tempfile.mkdtemp(prefix="tessera-ingest-")
        rng = np.random.default_rng(17)
        cls.vols = {"p8": rng.integers(0, 256, size=(NZ, NY, NX), dtype=np.uint8),
                    "p16": rng.integers(0, 65536, size=(NZ, NY, NX), dtype=np.uint16)}
        datasets = []
        for name, vol in cls.vols.items():
            d = os.path.join(cls.dir, name)
            os.mkdir(d)
            for k, f in enumerate(vol):
                path = os.path.join(d, "f%03d.png" % k)
                im = Image.fromarray(f) if f.dtype == np.uint8 else \
                    Image.fromarray(f.astype(np.uint16), mode="I;16")
                im.save(path, compress_level=6)
                # PIL reads back what it wrote: the reference is the files' samples
                back = np.asarray(Image.open(path))
                assert (back.astype(np.int64) == f.astype(np.int64)).all(), path
            datasets.append({"name": name, "frames": os.path.join(d, "f*.png")})
        cls.srv = Server(roots=[cls.dir], datasets=datasets, demo=False)

    def json(self, path):
        return json.loads(self.get(path)[1])

    def decoded(self):
        text = self.get("/metrics")[1].decode()
        m = re.search(r'^tessera_frames_decoded_total\{format="png"\} (\d+)$', text, re.M)
        self.assertIsNotNone(m, "no frames-decoded metric")
        return int(m.group(1))

    def check_routes(self, name, z):
        """Every kind of read of plane z (and of the whole stack) equals numpy."""
        np = self.np
        vol = self.vols[name]
        v = vol.astype(np.float64)
        plane = np.flipud(v[z])
        np.testing.assert_array_equal(
            self.npy(f"/api/v1/datasets/{name}/slice/xy/{NX}_{NY}/0_0_{z}.npy"), plane)
        y, x = (z * 3) % NY, (z * 5) % NX
        np.testing.assert_array_equal(
            self.npy(f"/api/v1/datasets/{name}/slice/xz/{NX}_{NZ}/0_{y}_0.npy"),
            v[:, NY - 1 - y, :])
        np.testing.assert_array_equal(
            self.npy(f"/api/v1/datasets/{name}/slice/yz/{NY}_{NZ}/{x}_0_0.npy"),
            v[:, ::-1, x])
        np.testing.assert_array_equal(
            self.npy(f"/api/v1/datasets/{name}/series?x={x}&y={y}&format=npy"),
            v[:, NY - 1 - y, x])
        doc = self.json(f"/api/v1/datasets/{name}/values?x={x}&y={y}&plane={z}&size=4")
        np.testing.assert_array_equal(np.array(doc["values"]), plane[y:y + 4, x:x + 4])
        # the histogram reads the plane through the plane cache (daemon/cache/planes)
        doc = self.json(f"/api/v1/datasets/{name}/histogram?plane={z}&bins=16")
        self.assertEqual((doc["min"], doc["max"]), (plane.min(), plane.max()))
        counts, _ = np.histogram(plane, bins=16, range=(plane.min(), plane.max()))
        self.assertLessEqual(np.abs(np.array(doc["counts"]) - counts).sum(), 2)
        self.assertEqual(sum(doc["counts"]), plane.size)
        for p in ("1", "99"):
            self.assertEqual(doc["percentiles"][p], np.percentile(plane, float(p)), p)
        # an IIIF tile of the plane, through the plane cache too
        headers, body = self.get(f"/iiif/3/{name}~{z}/0,0,32,16/max/0/default.png")
        self.assertEqual(body[:8], b"\x89PNG\r\n\x1a\n")

    def check_reductions(self, name, ops):
        np = self.np
        v = self.vols[name].astype(np.float64)
        for op in ops:
            f = getattr(np, op)
            a = self.npy(f"/api/v1/datasets/{name}/reduce?op={op}&axis=z&format=npy")
            want = np.flipud(f(v, axis=0))
            if op == "std":
                np.testing.assert_allclose(a, want, rtol=1e-12, err_msg=f"{name} {op}")
            else:
                np.testing.assert_array_equal(a, want, f"{name} {op}")
            a = self.npy(f"/api/v1/datasets/{name}/reduce?op={op}&axis=xy&format=npy")
            np.testing.assert_allclose(a, f(v, axis=(1, 2)), rtol=1e-12, err_msg=f"{name} {op}")

    def test_ingested_stack_is_never_decoded_again(self):
        np = self.np
        for name in self.vols:
            # before: the routes decode frames (so the metric can see a decode)
            before = self.decoded()
            self.check_routes(name, 0)
            self.check_reductions(name, ("mean",))
            self.assertGreater(self.decoded(), before, "the routes decoded no frame")
            doc = self.job({"type": "ingest", "dataset": name})
            self.assertEqual(doc["result"]["attached_to"], name, doc)
            after = self.decoded()
            # after: other planes, other reductions (nothing from the answer caches)
            for z in range(1, NZ):
                self.check_routes(name, z)
            self.check_reductions(name, ("sum", "min", "max", "std"))
            zarr = None
            try:
                zarr = need_module("zarr")
            except unittest.SkipTest:
                pass
            if zarr is not None:
                a = zarr.open(self.srv.url(f"/zarr/{name}/0"), mode="r")[:]
                np.testing.assert_array_equal(a, self.vols[name][:, ::-1, :])
            # jobs read the store too: a reduce job's product and a rechunked copy
            out = name + "_max"
            self.job({"type": "reduce", "dataset": name, "op": "max", "axis": "z",
                      "output": {"name": out}})
            np.testing.assert_array_equal(
                self.npy(f"/api/v1/datasets/{out}/slice/xy/{NX}_{NY}/0_0_0.npy"),
                np.flipud(self.vols[name].astype(np.float64).max(axis=0)))
            self.job({"type": "rechunk", "dataset": name})
            for x, y in ((0, 0), (NX - 1, NY - 1), (11, 20)):
                np.testing.assert_array_equal(
                    self.npy(f"/api/v1/datasets/{name}/series?x={x}&y={y}&format=npy"),
                    self.vols[name][:, NY - 1 - y, x].astype(np.float64))
            self.assertEqual(self.decoded(), after, f"{name}: frames decoded after ingest")


if __name__ == "__main__":
    unittest.main()
