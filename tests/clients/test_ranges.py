"""Byte ranges (RFC 9110) with real clients: curl -C - resumes a job product, fsspec's
HTTP file system and astropy's fits.open(url, use_fsspec=True) read sections through
ranged requests, HEAD gives the length, If-Range by ETag and by Last-Modified."""
import json
import os
import re
import subprocess
import tempfile
import time
import unittest
import urllib.request

from harness import Server, need, need_module


class RangesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server()
        cls.tmp = tempfile.mkdtemp(prefix="tessera-ranges-")
        body = json.dumps({"type": "reduce", "dataset": "m13", "op": "mean", "axis": "z",
                           "output": {"name": "rg_mean"}}).encode()
        req = urllib.request.Request(cls.srv.url("/api/v1/jobs"), data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            jid = json.load(r)["id"]
        end = time.monotonic() + 120
        while time.monotonic() < end:
            with urllib.request.urlopen(cls.srv.url("/api/v1/jobs/" + jid), timeout=60) as r:
                state = json.load(r)["state"]
            if state in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.2)
        assert state == "succeeded", state
        cls.product = "/api/v1/jobs/%s/result" % jid
        status, cls.headers, cls.whole = cls.srv.get(cls.product)
        assert status == 200

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        subprocess.run(["rm", "-rf", cls.tmp], check=False)

    def count_206(self):
        _, _, m = self.srv.get("/metrics")
        hit = re.search(rb'tessera_http_requests_total\{code="206"\} (\d+)', m)
        return int(hit.group(1)) if hit else 0

    def test_curl_resume(self):
        curl = need("curl")
        self.assertEqual(self.headers["Accept-Ranges"], "bytes")
        out = os.path.join(self.tmp, "product.fits")
        with open(out, "wb") as f:      # an interrupted download: the first 5000 bytes
            f.write(self.whole[:5000])
        r = subprocess.run([curl, "-sS", "-C", "-", "-o", out, "-w", "%{http_code}",
                            self.srv.url(self.product)], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "206")
        with open(out, "rb") as f:
            self.assertEqual(f.read(), self.whole)

    def test_head_and_ranges(self):
        req = urllib.request.Request(self.srv.url(self.product), method="HEAD")
        with urllib.request.urlopen(req, timeout=60) as r:
            self.assertEqual(int(r.headers["Content-Length"]), len(self.whole))
            self.assertEqual(r.headers["Accept-Ranges"], "bytes")
            self.assertEqual(r.read(), b"")
        n = len(self.whole)
        status, h, body = self.srv.get(self.product, {"Range": "bytes=100-199"})
        self.assertEqual((status, h["Content-Range"], body),
                         (206, "bytes 100-199/%d" % n, self.whole[100:200]))
        status, h, body = self.srv.get(self.product, {"Range": "bytes=-80"})
        self.assertEqual((status, body), (206, self.whole[-80:]))
        status, h, body = self.srv.get(self.product, {"Range": "bytes=%d-" % n})
        self.assertEqual((status, h["Content-Range"]), (416, "bytes */%d" % n))
        self.assertEqual(json.loads(body)["status"], 416)
        status, h, body = self.srv.get(self.product, {"Range": "bytes=0-9,20-29"})
        self.assertEqual((status, len(body)), (200, n))   # several ranges: the whole body
        lm, etag = self.headers["Last-Modified"], self.headers["ETag"]
        for validator, want in ((etag, 206), (lm, 206), ('"other"', 200),
                                ("Thu, 01 Jan 1970 00:00:00 GMT", 200)):
            status, _, body = self.srv.get(self.product, {"Range": "bytes=0-9",
                                                          "If-Range": validator})
            self.assertEqual((validator, status), (validator, want))
            self.assertEqual(body, self.whole[:10] if want == 206 else self.whole)
        # tiles and images too
        tile = "/hips/horsehead/Moc.fits"
        status, h, moc = self.srv.get(tile)
        self.assertEqual(h["Accept-Ranges"], "bytes")
        status, _, body = self.srv.get(tile, {"Range": "bytes=2880-2959"})
        self.assertEqual((status, body), (206, moc[2880:2960]))

    def test_fsspec_and_astropy_sections(self):
        fsspec = need_module("fsspec")
        need_module("aiohttp")
        np = need_module("numpy")
        from astropy.io import fits
        url = self.srv.url(self.product)
        before = self.count_206()
        with fsspec.open(url, "rb", block_size=4096) as f:
            self.assertEqual(f.size, len(self.whole))
            f.seek(len(self.whole) - 2880)
            self.assertEqual(f.read(2880), self.whole[-2880:])
        self.assertGreater(self.count_206(), before)
        whole = fits.open(__import__("io").BytesIO(self.whole))
        before = self.count_206()
        with fits.open(url, use_fsspec=True, fsspec_kwargs={"block_size": 4096}) as h:
            sec = h[0].section[10:20, 30:45]
            self.assertTrue(np.array_equal(sec, whole[0].data[10:20, 30:45], equal_nan=True))
        self.assertGreater(self.count_206(), before)


if __name__ == "__main__":
    unittest.main()
