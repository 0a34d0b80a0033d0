"""Stacks of greyscale PNG frames whose frames disagree: one bit depth for the whole stack
(issue 34, item 11), checked at start and again when a frame is replaced while served, on
every route that reads the frames; a frame replaced by a PNG of another size is refused
from its header, undecoded (item 15)."""
import os
import shutil
import struct
import tempfile
import unittest
import zlib

from harness import Server, need_module


def write_png(path, rows, bits):
    """A greyscale PNG of `bits` 8 or 16 from a list of rows of ints (first row first)."""
    h, w = len(rows), len(rows[0])

    def chunk(kind, data):
        c = kind + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c))

    fmt = ">%dB" % w if bits == 8 else ">%dH" % w
    raw = b"".join(b"\0" + struct.pack(fmt, *r) for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bits, 0, 0,
                                                                 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


W, H = 24, 16


def frame_rows(k, bits):
    top = 255 if bits == 8 else 65535
    return [[(x * 3 + y * 5 + k * 7) % 200 if bits == 8 else min(top, 65400 - x - y)
             for x in range(W)] for y in range(H)]


class TestPngStack(unittest.TestCase):
    def setUp(self):
        self.np = need_module("numpy")
        self.dir = tempfile.mkdtemp(prefix="tessera-pngstack-")
        self.frames = os.path.join(self.dir, "fr")
        os.mkdir(self.frames)
        for k in range(3):
            write_png(os.path.join(self.frames, "f%d.png" % k), frame_rows(k, 8), 8)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def replace(self, k, rows, bits):
        tmp = os.path.join(self.frames, "new.tmp")
        write_png(tmp, rows, bits)
        os.replace(tmp, os.path.join(self.frames, "f%d.png" % k))

    def test_mixed_depth_refused_at_start(self):
        write_png(os.path.join(self.frames, "f1.png"), frame_rows(1, 16), 16)
        with self.assertRaises(RuntimeError) as cm:
            Server(roots=[self.dir], demo=False,
                   datasets=[{"name": "p", "frames": os.path.join(self.frames, "f*.png")}]).stop()
        self.assertIn("frame '%s' is BITPIX 16, the first frame is BITPIX 8" %
                      os.path.join(self.frames, "f1.png"), str(cm.exception))

    def test_frame_replaced_while_served(self):
        np = self.np
        with Server(roots=[self.dir], demo=False,
                    datasets=[{"name": "p", "frames": os.path.join(self.frames, "f*.png")}]) as s:
            self.replace(1, frame_rows(1, 16), 16)
            said = b"f1.png is now BITPIX 16, not the stack's BITPIX 8"
            for path in ("/api/v1/datasets/p/slice/xy/%d_%d/0_0_1.npy" % (W, H),
                         "/api/v1/datasets/p/slice/xy/%d_%d/0_0_1.png?stretch=none" % (W, H),
                         "/api/v1/datasets/p/slice/xz/%d_3/0_2_0.npy" % W,
                         "/api/v1/datasets/p/series?x=2&y=3",
                         "/api/v1/datasets/p/fits",
                         "/zarr/p/0/1/0/0",
                         "/api/node/u/p/raw/0_1/%d_%d/0_0_1/octet-stream" % (W, H)):
                st, _, body = s.get(path)
                self.assertGreaterEqual(st, 400, f"{path}: {body[:200]!r}")
                self.assertIn(said, body, path)
            st, _, body = s.get("/api/v1/datasets/p/slice/xy/%d_%d/0_0_2.npy" % (W, H))
            self.assertEqual(st, 200, body[:300])
            got = np.load(__import__("io").BytesIO(body))
            self.assertTrue((got == np.flipud(np.array(frame_rows(2, 8)))).all())
            # a frame of another size: refused from its header, never decoded
            before = s.get("/metrics")[2].decode()
            self.replace(2, [[0] * 3000 for _ in range(3000)], 8)
            st, _, body = s.get("/api/v1/datasets/p/slice/xy/10_10/1_1_2.npy")
            self.assertGreaterEqual(st, 400, body[:300])
            self.assertIn(b"f2.png is now 3000 x 3000, not the 24 x 16", body)
            after = s.get("/metrics")[2].decode()
            self.assertEqual(decodes(before), decodes(after))
            self.assertEqual(s.get("/healthz")[0], 200)


def decodes(metrics):
    for line in metrics.splitlines():
        if line.startswith("tessera_frames_decoded_total{format=\"png\"}"):
            return line
    raise AssertionError("no frames-decoded metric in /metrics")


if __name__ == "__main__":
    unittest.main()
