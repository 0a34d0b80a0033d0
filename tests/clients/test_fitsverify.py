"""Every FITS that Tessera writes passes HEASARC's fitsverify with 0 warnings and 0 errors
and carries CHECKSUM and DATASUM in every HDU (fitsverify checks their values): the
cutouts (GET and POST), slices, reductions, HiPS tiles, Allsky and Moc.fits of the server,
the product of each FITS job type, and the outputs of the command line."""
import json
import math
import os
import re
import subprocess
import tempfile
import time
import unittest
import urllib.request

from harness import TOP, Server, need, tesserad_path

DEMO = os.path.join(TOP, "data", "demo")


def hdu_cards(data):
    """The cards of each HDU of the FITS bytes `data`, as lists of 80-character strings."""
    hdus, off = [], 0
    while off < len(data):
        cards = []
        while True:
            block = data[off:off + 2880]
            if len(block) < 2880:
                raise AssertionError("a header runs past the end of the file")
            off += 2880
            done = False
            for i in range(36):
                c = block[80 * i:80 * i + 80].decode("ascii")
                cards.append(c)
                if c.startswith("END     "):
                    done = True
                    break
            if done:
                break
        val = {c[:8].strip(): c[10:].split("/")[0].strip() for c in cards if c[8:10] == "= "}
        naxis = int(val["NAXIS"])
        n = 1 if naxis else 0
        for k in range(1, naxis + 1):
            n *= int(val["NAXIS%d" % k])
        size = abs(int(val["BITPIX"])) // 8 * int(val.get("GCOUNT", 1)) * (
            int(val.get("PCOUNT", 0)) + n)
        off += (size + 2879) // 2880 * 2880
        hdus.append(cards)
    return hdus


class FitsverifyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fitsverify = need("fitsverify")
        cls.srv = Server()
        cls.tmp = tempfile.mkdtemp(prefix="tessera-fitsverify-")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        subprocess.run(["rm", "-rf", cls.tmp], check=False)

    def verify_bytes(self, name, data):
        path = os.path.join(self.tmp, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".fits")
        with open(path, "wb") as f:
            f.write(data)
        self.verify_file(path, name)

    def verify_file(self, path, name=None):
        name = name or path
        out = subprocess.run([self.fitsverify, "-q", path], capture_output=True, text=True,
                             timeout=120)
        self.assertIn("verification OK", out.stdout,
                      "%s: fitsverify -q says %r" % (name, out.stdout + out.stderr))
        full = subprocess.run([self.fitsverify, path], capture_output=True, text=True,
                              timeout=120).stdout
        self.assertIn("0 warning(s) and 0 error(s)", full, "%s:\n%s" % (name, full))
        with open(path, "rb") as f:
            hdus = hdu_cards(f.read())
        for i, cards in enumerate(hdus):
            keys = [c[:8].strip() for c in cards]
            self.assertIn("CHECKSUM", keys, "%s: HDU %d has no CHECKSUM" % (name, i + 1))
            self.assertIn("DATASUM", keys, "%s: HDU %d has no DATASUM" % (name, i + 1))
        return hdus

    def fetch(self, path, body=None):
        req = urllib.request.Request(self.srv.url(path), data=body,
                                     headers={"Content-Type": "application/json"} if body else {})
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.read()

    def test_cutouts_slices_reductions(self):
        paths = [
            "/api/v1/cutout?dataset=horsehead&ra=85.25&dec=-2.46&fov=0.2&width=100&height=80"
            "&format=fits",
            "/hips-image-services/hips2fits?hips=gc_2mass_k&ra=0&dec=0&coordsys=galactic"
            "&fov=0.3&width=64&height=64&projection=CAR&format=fits&cmap=Greys_r",
            "/api/v1/datasets/l1448_13co/slice/xy/40_30/5_5_10.fits",
            "/api/v1/datasets/l1448_13co/slice/xz/40_30/5_5_10.fits",
            "/api/v1/datasets/l1448_13co/slice/yz/40_30/5_5_10.fits",
            "/api/v1/datasets/m13/reduce?op=mean&axis=z&format=fits",
        ]
        for p in paths:
            self.verify_bytes(p, self.fetch(p))
        hdr = self.fetch(paths[0])
        self.verify_bytes("POST cutout", self.fetch(
            "/api/v1/cutout?dataset=horsehead&method=bicubic&format=fits", body=hdr))

    def test_hips(self):
        moc = self.fetch("/hips/horsehead/Moc.fits")
        self.verify_bytes("Moc.fits", moc)
        # A tile inside the footprint: the first cell of the MOC, at its order and one up.
        cards = hdu_cards(moc)
        h0 = sum(math.ceil((len(c)) / 36) for c in cards[:2]) * 2880
        uniq = int.from_bytes(moc[h0:h0 + 8], "big")
        order = (uniq.bit_length() - 3) // 2
        npix = uniq - 4 * 4 ** order
        for o, n in ((order, npix), (order - 1, npix >> 2)):
            p = "/hips/horsehead/Norder%d/Dir%d/Npix%d.fits" % (o, n // 10000 * 10000, n)
            self.verify_bytes(p, self.fetch(p))
        self.verify_bytes("Allsky.fits", self.fetch("/hips/allsky_rosat/Norder3/Allsky.fits"))

    def run_job(self, body):
        doc = json.loads(self.fetch("/api/v1/jobs", body=json.dumps(body).encode()))
        end = time.monotonic() + 300
        while time.monotonic() < end:
            j = json.loads(self.fetch("/api/v1/jobs/" + doc["id"]))
            if j["state"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.2)
        self.assertEqual(j["state"], "succeeded", json.dumps(j))
        return self.fetch("/api/v1/jobs/%s/result" % doc["id"])

    def test_job_products(self):
        jobs = {
            "mosaic": {"type": "mosaic", "inputs": ["gc_2mass_k", "gc_msx_e"],
                       "target": {"auto": {"frame": "galactic", "projection": "TAN"}},
                       "match_background": True, "output": {"name": "fv_mosaic"}},
            "reproject": {"type": "reproject", "input": "horsehead",
                          "target": {"auto": {"frame": "galactic", "projection": "TAN"}},
                          "output": {"name": "fv_reproject"}},
            "power_spectrum": {"type": "power_spectrum", "dataset": "l1448_13co",
                               "output": {"name": "fv_spectrum"}},
            "recenter": {"type": "recenter", "dataset": "m13", "size": [64, 48],
                         "output": {"name": "fv_recenter"}},
            "reduce": {"type": "reduce", "dataset": "m13", "op": "std", "axis": "z",
                       "output": {"name": "fv_reduce"}},
        }
        for name, body in jobs.items():
            with self.subTest(job=name):
                self.verify_bytes("job " + name, self.run_job(body))

    def test_command_line(self):
        tessera = os.path.join(os.path.dirname(tesserad_path()), "tessera")
        d = os.path.join(self.tmp, "cli")
        os.makedirs(d)
        hh = os.path.join(DEMO, "HorseHead.fits")
        target = os.path.join(d, "target.fits")
        with open(target, "wb") as f:
            f.write(self.fetch("/api/v1/cutout?dataset=horsehead&ra=85.25&dec=-2.46&fov=0.3"
                               "&width=120&height=100&format=fits"))
        runs = [
            ([tessera, "reproject", hh, "--target", target, "-o", os.path.join(d, "rp.fits")],
             [os.path.join(d, "rp.fits")]),
            ([tessera, "mosaic", os.path.join(DEMO, "gc_2mass_k.fits"),
              os.path.join(DEMO, "gc_msx_e.fits"), "-o", os.path.join(d, "mos.fits"), "--auto"],
             [os.path.join(d, "mos.fits")]),
            ([tessera, "mkstack", "--frames", "2", "--size", "64x48", "--format", "fits",
              "--bitpix", "16", "-o", os.path.join(d, "stack")],
             [os.path.join(d, "stack", "frame_00000.fits")]),
            ([tessera, "hips", hh, "-o", os.path.join(d, "hips"), "--order", "4", "--format",
              "png,fits"],
             [os.path.join(d, "hips", "Moc.fits"),
              os.path.join(d, "hips", "Norder3", "Allsky.fits")]),
        ]
        for cmd, outputs in runs:
            with self.subTest(command=cmd[1]):
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
                if cmd[1] == "hips":
                    for root, _, files in os.walk(os.path.join(d, "hips", "Norder4")):
                        outputs += [os.path.join(root, f) for f in files if f.endswith(".fits")][:2]
                for out in outputs:
                    self.verify_file(out)


if __name__ == "__main__":
    unittest.main()
