"""zarr-python 2 reading a many-chunk array whole over fsspec's HTTP store, whose aiohttp
connector opens up to 100 connections at once: with the server's default
limits.max_connections_per_address every value equals astropy's reading of the FITS file.
With that limit set low (4), a request past it is refused loudly: a 503 problem document
that fsspec raises (aiohttp's ClientResponseError, not an OSError or KeyError, so
FSStore.__getitem__ does not take it for a missing chunk), where a closed connection
used to be.  (zarr-python 2.13's FSStore.getitems, the whole-array path, leaves out every
chunk whose fetch raised, whatever the error, and fills it with fill_value: the default
limit must leave room for the client's connections, which this file checks.)"""
import json
import os
import shutil
import socket
import tempfile
import time
import unittest

from harness import Server

try:
    import numpy as np
    import aiohttp
    import fsspec
    import zarr
    from astropy.io import fits
except ImportError as e:   # scripts/setup.sh installs them
    if os.environ.get("CI") == "true":
        raise
    raise unittest.SkipTest(f"a client is missing: {e}")

NZ, NY, NX = 300, 24, 20         # 300 chunks of one plane each


class TestZarrConnections(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-zarrconn-")
        cls.path = os.path.join(cls.tmp, "cube.fits")
        rng = np.random.default_rng(11)
        cube = rng.integers(-30000, 30000, size=(NZ, NY, NX)).astype(np.int16)
        fits.PrimaryHDU(cube).writeto(cls.path)
        cls.ref = fits.getdata(cls.path)
        cls.datasets = [{"name": "cube", "path": cls.path}]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_default_limit_whole_read_exact(self):
        with Server(datasets=self.datasets, roots=[self.tmp], demo=False) as srv:
            self.assertNotIn("max_connections_per_address", srv.conf.get("limits", {}))
            for _ in range(2):
                z = zarr.open(f"{srv.base}/zarr/cube/0", mode="r")
                self.assertEqual((z.shape, z.chunks), ((NZ, NY, NX), (1, NY, NX)))
                a = z[:]
                self.assertEqual(int(np.count_nonzero(a != self.ref)), 0)
                np.testing.assert_array_equal(a, self.ref)
            # Nothing was refused.
            self.assertIn("\ntessera_http_per_address_refused_total 0\n",
                          srv.get("/metrics")[2].decode())

    def test_low_limit_raises(self):
        with Server(datasets=self.datasets, roots=[self.tmp], demo=False,
                    extra={"limits": {"max_connections_per_address": 4}}) as srv:
            host, port = "127.0.0.1", int(srv.base.rsplit(":", 1)[1])
            # Four kept-alive connections from this address hold the limit.
            held = []
            try:
                for _ in range(4):
                    s = socket.create_connection((host, port), timeout=10)
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 200"))
                    held.append(s)
                url = f"{srv.base}/zarr/cube/0"
                store = zarr.storage.FSStore(url, mode="r")
                # A chunk past the limit: the store raises the 503, not KeyError.
                with self.assertRaises(aiohttp.ClientResponseError) as cm:
                    store["0/0/0"]
                self.assertEqual(cm.exception.status, 503)
                self.assertNotIsInstance(cm.exception, (KeyError, OSError))
                # fsspec's concurrent read of every chunk (up to 100 at once) raises.
                fs = fsspec.filesystem("http")
                urls = [f"{url}/{k}/0/0" for k in range(NZ)]
                with self.assertRaises(aiohttp.ClientResponseError) as cm:
                    fs.cat(urls)
                self.assertEqual(cm.exception.status, 503)
            finally:
                for s in held:
                    s.close()
            # The answer: a problem document naming the limit, Retry-After, close.
            extra = [socket.create_connection((host, port), timeout=10) for _ in range(4)]
            s = socket.create_connection((host, port), timeout=10)
            try:
                for e in extra:
                    e.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    e.recv(4096)
                s.sendall(b"GET /zarr/cube/0/0/0/0 HTTP/1.1\r\nHost: x\r\n\r\n")
                raw = b""
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    raw += b
            finally:
                s.close()
                for e in extra:
                    e.close()
            head, _, body = raw.partition(b"\r\n\r\n")
            head = head.decode("latin-1").lower()
            self.assertTrue(head.startswith("http/1.1 503"), head)
            self.assertIn("retry-after: 1", head)
            self.assertIn("connection: close", head)
            self.assertIn("content-type: application/problem+json", head)
            doc = json.loads(body)
            self.assertEqual(doc["status"], 503)
            self.assertIn("limits.max_connections_per_address = 4", doc["detail"])
            # Once the connections are gone (the /metrics request's own is the one left),
            # a chunk reads again.
            end = time.monotonic() + 5
            while time.monotonic() < end:
                m = srv.get("/metrics")[2].decode()
                if "\ntessera_http_open_connections 1\n" in m:
                    break
                time.sleep(0.05)
            self.assertIn("\ntessera_http_client_addresses 1\n", m)
            z = zarr.open(url, mode="r")
            np.testing.assert_array_equal(z[7], self.ref[7])


if __name__ == "__main__":
    unittest.main()
